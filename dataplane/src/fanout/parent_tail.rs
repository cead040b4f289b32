//! One reader per parent partition: the newest records the cursors of a
//! parent partition read from its log, kept decoded and shared by the
//! cursors of all its children.
//!
//! The cursors of one parent partition (one per child) wait on the same
//! high watermark and read about the same slabs. Each read its slab from
//! the partition log on its own before, so with 4 children every record
//! was read, decoded and copied out of the log 4 times. Now a cursor takes
//! what the shared tail holds from its position on (a reference count per
//! key and payload, no copy) and reads from the log only what follows the
//! tail's end, which it then adds for the others.
//!
//! The tail holds one stretch of consecutive offsets of one log, bounded
//! by bytes (oldest records go first). A cursor further behind than the
//! tail reaches reads from the log as before. Offsets are never rewritten
//! once committed, so a record held is the record the log would return;
//! a tail belongs to one open log (a partition reopened or a topic made
//! again gets a new one).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use narad_plog::{LogError, PartitionLog, ReadBatch, ReadEntry, ReadLimits};
use parking_lot::Mutex;

use super::machine::{ParentRecord, SlabEntry};

/// What a record costs the tail's budget besides its key and payload.
const RECORD_OVERHEAD_BYTES: usize = size_of::<ParentRecord>();

/// The newest records read from one parent partition.
#[derive(Debug)]
pub struct ParentTail {
    budget_bytes: usize,
    held: Mutex<Held>,
}

/// Consecutive offsets, oldest first.
#[derive(Debug, Default)]
struct Held {
    records: VecDeque<ParentRecord>,
    bytes: usize,
}

impl Held {
    fn end(&self) -> Option<u64> {
        self.records.back().map(|record| record.offset + 1)
    }
}

fn cost(record: &ParentRecord) -> usize {
    record.key.len() + record.payload.len() + RECORD_OVERHEAD_BYTES
}

impl ParentTail {
    /// An empty tail holding about `budget_bytes` at most.
    pub fn new(budget_bytes: usize) -> Self {
        Self {
            budget_bytes,
            held: Mutex::new(Held::default()),
        }
    }

    /// Reads a slab from `from` within `limits`: what the tail holds from
    /// `from` on, then from `read_log` (the partition log's read) what
    /// follows, which the tail keeps for the other cursors. As a read of
    /// the log would, it returns at least one entry when there is one, and
    /// stops at the first record past `limits.bytes_max`.
    ///
    /// # Errors
    /// `read_log`'s, when the tail held nothing from `from`; when it held
    /// some, they come back alone and the next read meets the error.
    pub fn read(
        &self,
        from: u64,
        limits: ReadLimits,
        read_log: impl FnOnce(u64, ReadLimits) -> Result<ReadBatch, LogError>,
    ) -> Result<(Vec<SlabEntry>, u64), LogError> {
        let (mut entries, bytes, full) = self.records_from(from, limits);
        let next = from + entries.len() as u64;
        if full {
            return Ok((entries, next));
        }
        let rest = ReadLimits {
            records_max: limits.records_max - entries.len(),
            bytes_max: limits.bytes_max - bytes,
        };
        let batch = match read_log(next, rest) {
            Ok(batch) => batch,
            Err(_) if !entries.is_empty() => return Ok((entries, next)),
            Err(error) => return Err(error),
        };
        let mut taken = bytes;
        let read: Vec<SlabEntry> = batch.entries.into_iter().map(slab_entry).collect();
        self.keep(next, &read);
        let mut next_offset = batch.next_offset;
        for entry in read {
            if let SlabEntry::Record(record) = &entry {
                // The log gave the first record past the budget to a read
                // that asked for a part of it; the slab stops before it.
                let size = record.key.len() + record.payload.len();
                if !entries.is_empty() && taken + size > limits.bytes_max {
                    next_offset = record.offset;
                    break;
                }
                taken += size;
            }
            entries.push(entry);
        }
        Ok((entries, next_offset))
    }

    /// The held records from `from` on, within `limits` (at least one when
    /// any is held), their key and payload bytes, and whether a limit cut
    /// them short.
    fn records_from(&self, from: u64, limits: ReadLimits) -> (Vec<SlabEntry>, usize, bool) {
        let held = self.held.lock();
        let Some(first) = held.records.front().map(|record| record.offset) else {
            return (Vec::new(), 0, false);
        };
        if from < first || held.end().is_none_or(|end| from >= end) {
            return (Vec::new(), 0, false);
        }
        let skip = (from - first) as usize;
        let mut entries = Vec::with_capacity(limits.records_max.min(held.records.len() - skip));
        let mut bytes = 0;
        for record in held.records.iter().skip(skip) {
            let size = record.key.len() + record.payload.len();
            let full = entries.len() >= limits.records_max
                || (!entries.is_empty() && bytes + size > limits.bytes_max);
            if full {
                return (entries, bytes, true);
            }
            bytes += size;
            entries.push(SlabEntry::Record(record.clone()));
        }
        let full = entries.len() >= limits.records_max || bytes >= limits.bytes_max;
        (entries, bytes, full)
    }

    /// Keeps the records of a log read from `from`: those that continue
    /// the held stretch, or all up to the first lost offset when the read
    /// starts past the stretch's end (the stretch then starts over). The
    /// oldest go once over budget.
    fn keep(&self, from: u64, read: &[SlabEntry]) {
        let mut held = self.held.lock();
        if held.end().is_none_or(|end| from > end) {
            held.records.clear();
            held.bytes = 0;
        }
        let mut expected = from;
        for entry in read {
            let SlabEntry::Record(record) = entry else {
                break;
            };
            if record.offset != expected {
                break;
            }
            expected += 1;
            if held.end().is_none_or(|end| record.offset == end) {
                held.bytes += cost(record);
                held.records.push_back(record.clone());
            }
        }
        while held.bytes > self.budget_bytes {
            let Some(oldest) = held.records.pop_front() else {
                break;
            };
            held.bytes -= cost(&oldest);
        }
    }
}

/// A parent log's read entry as a slab entry (key and payload move, not
/// copied).
pub fn slab_entry(entry: ReadEntry) -> SlabEntry {
    match entry {
        ReadEntry::Record(record) => SlabEntry::Record(ParentRecord {
            offset: record.offset,
            key: Bytes::from(record.key),
            payload: Bytes::from(record.payload),
            committed_at_ms: record.committed_at_ms,
        }),
        ReadEntry::Unreadable { offsets } => SlabEntry::Lost(offsets),
    }
}

/// The tails of the parent partitions this node's cursors read, one per
/// open log, alive while a cursor of it runs.
#[derive(Debug, Default)]
pub struct ParentTails {
    tails: Mutex<HashMap<(Arc<str>, u32), (Weak<PartitionLog>, Weak<ParentTail>)>>,
}

impl ParentTails {
    /// The tail of `log` (partition `partition` of `parent`), made with
    /// `budget_bytes` when no running cursor holds one.
    pub fn tail(
        &self,
        parent: &Arc<str>,
        partition: u32,
        log: &Arc<PartitionLog>,
        budget_bytes: usize,
    ) -> Arc<ParentTail> {
        let mut tails = self.tails.lock();
        tails.retain(|_, (_, tail)| tail.strong_count() > 0);
        let key = (Arc::clone(parent), partition);
        if let Some((held_log, tail)) = tails.get(&key)
            && held_log.ptr_eq(&Arc::downgrade(log))
            && let Some(tail) = tail.upgrade()
        {
            return tail;
        }
        let tail = Arc::new(ParentTail::new(budget_bytes));
        tails.insert(key, (Arc::downgrade(log), Arc::downgrade(&tail)));
        tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::ops::Range;

    const PAYLOAD: usize = 10;

    fn record(offset: u64) -> ReadEntry {
        ReadEntry::Record(narad_plog::Record {
            offset,
            key: Vec::new(),
            committed_at_ms: offset,
            payload: vec![offset as u8; PAYLOAD],
            origin: None,
            idempotency_key: Vec::new(),
        })
    }

    /// A log holding `offsets` that serves reads as `PartitionLog::read`
    /// does (at least one record; stops at the limits), counting the
    /// records it returned.
    struct FakeLog {
        offsets: Range<u64>,
        served: Cell<u64>,
    }

    impl FakeLog {
        fn new(offsets: Range<u64>) -> Self {
            Self {
                offsets,
                served: Cell::new(0),
            }
        }

        fn read(&self, from: u64, limits: ReadLimits) -> Result<ReadBatch, LogError> {
            let mut entries = Vec::new();
            let mut bytes = 0;
            let mut next = from;
            while next < self.offsets.end
                && entries.len() < limits.records_max
                && (entries.is_empty() || bytes + PAYLOAD <= limits.bytes_max)
            {
                entries.push(record(next));
                bytes += PAYLOAD;
                next += 1;
            }
            self.served.set(self.served.get() + entries.len() as u64);
            Ok(ReadBatch {
                entries,
                next_offset: next,
            })
        }
    }

    fn limits(records_max: usize) -> ReadLimits {
        ReadLimits {
            records_max,
            bytes_max: 1 << 20,
        }
    }

    fn offsets(entries: &[SlabEntry]) -> Vec<u64> {
        entries
            .iter()
            .map(|entry| match entry {
                SlabEntry::Record(record) => record.offset,
                SlabEntry::Lost(range) => panic!("lost {range:?}"),
            })
            .collect()
    }

    fn big_tail() -> ParentTail {
        ParentTail::new(1 << 20)
    }

    #[test]
    fn cursors_at_one_position_read_the_log_once() {
        let log = FakeLog::new(0..100);
        let tail = big_tail();
        let mut slabs = Vec::new();
        for _ in 0..4 {
            slabs.push(tail.read(0, limits(100), |f, l| log.read(f, l)).unwrap());
        }
        assert_eq!(log.served.get(), 100, "one cursor read the log");
        for (entries, next) in &slabs {
            assert_eq!(*next, 100);
            assert_eq!(offsets(entries), (0..100).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_cursor_takes_the_held_part_and_reads_only_what_follows() {
        let tail = big_tail();
        let early = FakeLog::new(0..60);
        tail.read(0, limits(100), |f, l| early.read(f, l)).unwrap();
        let later = FakeLog::new(0..100);
        let (entries, next) = tail.read(20, limits(100), |f, l| later.read(f, l)).unwrap();
        assert_eq!(offsets(&entries), (20..100).collect::<Vec<_>>());
        assert_eq!(next, 100);
        assert_eq!(later.served.get(), 40, "offsets 60..100 only");
        // What followed is held now for the next cursor.
        let (entries, _) = tail.read(50, limits(100), |f, l| later.read(f, l)).unwrap();
        assert_eq!(offsets(&entries), (50..100).collect::<Vec<_>>());
        assert_eq!(later.served.get(), 40);
    }

    #[test]
    fn the_record_limit_covers_held_and_read_records_together() {
        let tail = big_tail();
        let log = FakeLog::new(0..100);
        tail.read(0, limits(30), |f, l| log.read(f, l)).unwrap();
        let (entries, next) = tail.read(10, limits(50), |f, l| log.read(f, l)).unwrap();
        assert_eq!((entries.len(), next), (50, 60));
        let (entries, next) = tail.read(5, limits(10), |f, l| log.read(f, l)).unwrap();
        assert_eq!((offsets(&entries), next), ((5..15).collect(), 15));
    }

    #[test]
    fn the_byte_limit_covers_held_and_read_records_together() {
        let tail = big_tail();
        let log = FakeLog::new(0..100);
        tail.read(0, limits(10), |f, l| log.read(f, l)).unwrap();
        let bytes = ReadLimits {
            records_max: 100,
            bytes_max: 25 * PAYLOAD + 3,
        };
        let (entries, next) = tail.read(0, bytes, |f, l| log.read(f, l)).unwrap();
        assert_eq!((entries.len(), next), (25, 25));
        // A single record over the limit still comes back.
        let tiny = ReadLimits {
            records_max: 100,
            bytes_max: 1,
        };
        let (entries, next) = tail.read(3, tiny, |f, l| log.read(f, l)).unwrap();
        assert_eq!((offsets(&entries), next), (vec![3], 4));
    }

    #[test]
    fn a_cursor_behind_the_tail_reads_the_log_and_the_tail_stays() {
        let tail = big_tail();
        let log = FakeLog::new(0..100);
        tail.read(50, limits(100), |f, l| log.read(f, l)).unwrap();
        let (entries, next) = tail.read(10, limits(20), |f, l| log.read(f, l)).unwrap();
        assert_eq!((offsets(&entries), next), ((10..30).collect(), 30));
        let served = log.served.get();
        let (entries, _) = tail.read(50, limits(100), |f, l| log.read(f, l)).unwrap();
        assert_eq!(entries.len(), 50);
        assert_eq!(log.served.get(), served, "still held");
    }

    #[test]
    fn a_read_past_the_end_starts_the_tail_over_and_lost_offsets_end_it() {
        let tail = big_tail();
        let early = FakeLog::new(0..10);
        tail.read(0, limits(100), |f, l| early.read(f, l)).unwrap();
        let lossy = |from: u64, _| {
            Ok(ReadBatch {
                entries: vec![
                    record(from),
                    record(from + 1),
                    ReadEntry::Unreadable {
                        offsets: from + 2..from + 5,
                    },
                    record(from + 5),
                ],
                next_offset: from + 6,
            })
        };
        let (entries, next) = tail.read(40, limits(100), lossy).unwrap();
        assert_eq!((entries.len(), next), (4, 46));
        assert!(matches!(entries[2], SlabEntry::Lost(ref lost) if *lost == (42..45)));
        let nothing = |_, _| -> Result<ReadBatch, LogError> { Err(LogError::Closed) };
        // Offsets 40 and 41 are held; 0..10 went when the tail started over.
        let (entries, next) = tail.read(40, limits(100), nothing).unwrap();
        assert_eq!((offsets(&entries), next), (vec![40, 41], 42));
        assert!(tail.read(5, limits(100), nothing).is_err());
        assert!(tail.read(42, limits(100), nothing).is_err());
    }

    #[test]
    fn the_oldest_records_go_once_over_budget() {
        let tail = ParentTail::new(10 * (PAYLOAD + RECORD_OVERHEAD_BYTES));
        let log = FakeLog::new(0..100);
        tail.read(0, limits(25), |f, l| log.read(f, l)).unwrap();
        let served = log.served.get();
        let (entries, _) = tail.read(15, limits(10), |f, l| log.read(f, l)).unwrap();
        assert_eq!(offsets(&entries), (15..25).collect::<Vec<_>>());
        assert_eq!(log.served.get(), served, "15..25 held");
        tail.read(0, limits(5), |f, l| log.read(f, l)).unwrap();
        assert_eq!(log.served.get(), served + 5, "0..5 went");
    }

    #[test]
    fn a_held_record_is_shared_not_copied() {
        let tail = big_tail();
        let log = FakeLog::new(0..1);
        let (first, _) = tail.read(0, limits(1), |f, l| log.read(f, l)).unwrap();
        let (second, _) = tail.read(0, limits(1), |f, l| log.read(f, l)).unwrap();
        let payload = |entries: &[SlabEntry]| match &entries[0] {
            SlabEntry::Record(record) => record.payload.as_ptr(),
            SlabEntry::Lost(_) => panic!("lost"),
        };
        assert_eq!(payload(&first), payload(&second));
    }
}
