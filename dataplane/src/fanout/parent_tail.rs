//! One reader per parent partition: the records the cursors of a parent
//! partition read from its log, kept decoded and shared by the cursors of
//! all its children until each of them has taken them.
//!
//! The cursors of one parent partition (one per child) wait on the same
//! high watermark and read about the same slabs. Each read its slab from
//! the partition log on its own before, so with 4 children every record
//! was read, decoded and copied out of the log 4 times. Now a cursor takes
//! what the shared tail holds from its position on (a reference count per
//! key and payload, no copy) and reads from the log only what follows the
//! tail's end, which it then adds for the others. Cursors that wake
//! together on one commit read the log one after another, so the first
//! reads it and the others find its records held.
//!
//! The tail holds one stretch of consecutive offsets of one log. It lets a
//! record go once every cursor of the partition has taken it (each
//! cursor's mark is the end of its last read; a cursor that has not read
//! yet holds everything), and the oldest first once over its byte budget.
//! A cursor further behind than the tail reaches reads from the log as
//! before, and so does a cursor after a restart (its file's position is
//! where it starts) or a remote cursor reading a lane again. The tail is
//! never what makes a cursor correct: offsets are never rewritten once
//! committed, so a record held is the record the log would return, and a
//! miss reads the log. A tail belongs to one open log (a partition reopened
//! or a topic made again gets a new one).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use narad_plog::{LogError, PartitionLog, ReadBatch, ReadEntry, ReadLimits};
use parking_lot::Mutex;

use super::machine::{ParentRecord, SlabEntry};

/// Slabs (`fanout.max_batch_bytes` each) one parent partition's tail holds
/// at most: the newest slab read, and one more for the cursors that have
/// not taken the one before it yet. Cursors further apart read the log.
pub const TAIL_SLABS: usize = 2;

/// What a record costs the tail's budget besides its key and payload.
const RECORD_OVERHEAD_BYTES: usize = size_of::<ParentRecord>();

/// The records read from one parent partition that a cursor of it has
/// not taken yet.
#[derive(Debug)]
pub struct ParentTail {
    budget_bytes: usize,
    held: Mutex<Held>,
    /// Held by a read that may extend the stretch from the log, so that
    /// cursors woken by one commit read the log once between them.
    extending: Mutex<()>,
}

/// Consecutive offsets, oldest first, and the cursors that take them.
#[derive(Debug, Default)]
struct Held {
    records: VecDeque<ParentRecord>,
    bytes: usize,
    /// Each joined cursor's mark: the end of its last read, `None` before
    /// its first.
    marks: HashMap<u64, Option<u64>>,
    next_reader: u64,
}

impl Held {
    fn start(&self) -> Option<u64> {
        self.records.front().map(|record| record.offset)
    }

    fn end(&self) -> Option<u64> {
        self.records.back().map(|record| record.offset + 1)
    }

    /// Lets go of what every cursor took, then of the oldest records while
    /// over `budget_bytes`.
    fn trim(&mut self, budget_bytes: usize) {
        let taken = self
            .marks
            .values()
            .map(|mark| mark.unwrap_or(0))
            .min()
            .unwrap_or(u64::MAX);
        while self
            .records
            .front()
            .is_some_and(|oldest| oldest.offset < taken || self.bytes > budget_bytes)
        {
            if let Some(oldest) = self.records.pop_front() {
                self.bytes -= cost(&oldest);
            }
        }
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
            extending: Mutex::new(()),
        }
    }

    /// A new cursor of this tail's partition. Until its first read it
    /// holds every record; once dropped it holds none.
    pub fn join(self: &Arc<Self>) -> TailReader {
        let mut held = self.held.lock();
        let id = held.next_reader;
        held.next_reader += 1;
        held.marks.insert(id, None);
        TailReader {
            tail: Arc::clone(self),
            id,
        }
    }

    /// Key, payload and per-record bytes held now.
    pub fn held_bytes(&self) -> usize {
        self.held.lock().bytes
    }

    /// Reads a slab from `from` within `limits` for cursor `reader`: what
    /// the tail holds from `from` on, then from `read_log` (the partition
    /// log's read) what follows, which the tail keeps for the other
    /// cursors. As a read of the log would, it returns at least one entry
    /// when there is one, and stops at the first record past
    /// `limits.bytes_max`.
    fn read(
        &self,
        reader: u64,
        from: u64,
        limits: ReadLimits,
        read_log: impl FnOnce(u64, ReadLimits) -> Result<ReadBatch, LogError>,
    ) -> Result<(Vec<SlabEntry>, u64), LogError> {
        let read = self.read_unmarked(from, limits, read_log);
        let mut held = self.held.lock();
        if let Ok((_, next_offset)) = &read {
            held.marks.insert(reader, Some(*next_offset));
        }
        held.trim(self.budget_bytes);
        read
    }

    fn read_unmarked(
        &self,
        from: u64,
        limits: ReadLimits,
        read_log: impl FnOnce(u64, ReadLimits) -> Result<ReadBatch, LogError>,
    ) -> Result<(Vec<SlabEntry>, u64), LogError> {
        // A read behind the stretch adds nothing to it (it is read from
        // the log whole, and what it reads past the end is kept as any
        // read's is); it need not wait for one that does.
        let behind = self.held.lock().start().is_some_and(|start| from < start);
        let _extending = (!behind).then(|| self.extending.lock());
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
        let (Some(start), Some(end)) = (held.start(), held.end()) else {
            return (Vec::new(), 0, false);
        };
        if from < start || from >= end {
            return (Vec::new(), 0, false);
        }
        let skip = (from - start) as usize;
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
    /// starts past the stretch's end or nothing is held (the stretch then
    /// starts over).
    fn keep(&self, from: u64, read: &[SlabEntry]) {
        let mut held = self.held.lock();
        if held.end().is_none_or(|end| from > end) {
            held.records.clear();
            held.bytes = 0;
        }
        for (expected, entry) in (from..).zip(read) {
            let SlabEntry::Record(record) = entry else {
                break;
            };
            if record.offset != expected {
                break;
            }
            if held.end().is_none_or(|end| record.offset == end) {
                held.bytes += cost(record);
                held.records.push_back(record.clone());
            }
        }
    }
}

/// One cursor's share of its parent partition's tail. Dropping it lets go
/// of the records only this cursor had not taken.
#[derive(Debug)]
pub struct TailReader {
    tail: Arc<ParentTail>,
    id: u64,
}

impl TailReader {
    /// Reads a slab from `from` within `limits`: what the tail holds, and
    /// what follows from `read_log` (the partition log's read), kept for
    /// the other cursors. This cursor's mark moves to the slab's end.
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
        self.tail.read(self.id, from, limits, read_log)
    }
}

impl Drop for TailReader {
    fn drop(&mut self) {
        let mut held = self.tail.held.lock();
        held.marks.remove(&self.id);
        held.trim(self.tail.budget_bytes);
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

/// Parent partitions and the tail of each: one per open log, alive while
/// a cursor of it runs.
type TailMap = HashMap<(Arc<str>, u32), (Weak<PartitionLog>, Weak<ParentTail>)>;

/// The tails of the parent partitions this node's cursors read.
#[derive(Debug, Default)]
pub struct ParentTails {
    tails: Mutex<TailMap>,
}

impl ParentTails {
    /// Joins a new cursor to the tail of `log` (partition `partition` of
    /// `parent`), made with `budget_bytes` when no running cursor holds
    /// one of this log.
    pub fn join(
        &self,
        parent: &Arc<str>,
        partition: u32,
        log: &Arc<PartitionLog>,
        budget_bytes: usize,
    ) -> TailReader {
        let mut tails = self.tails.lock();
        tails.retain(|_, (_, tail)| tail.strong_count() > 0);
        let key = (Arc::clone(parent), partition);
        if let Some((held_log, tail)) = tails.get(&key)
            && held_log.ptr_eq(&Arc::downgrade(log))
            && let Some(tail) = tail.upgrade()
        {
            return tail.join();
        }
        let tail = Arc::new(ParentTail::new(budget_bytes));
        tails.insert(key, (Arc::downgrade(log), Arc::downgrade(&tail)));
        tail.join()
    }
}

#[cfg(test)]
#[path = "parent_tail_tests.rs"]
mod tests;
