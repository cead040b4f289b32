//! The shared tail on a fake log that counts the records it serves: each
//! record is read from the log once while the cursors keep together, the
//! window slides past what every cursor took and within its budget, a
//! cursor behind it or joining late reads the log, and a reopened
//! partition gets a tail of its own.

use super::*;
use std::ops::Range;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use narad_plog::LogConfig;

const PAYLOAD: usize = 10;

/// The budget charge of one test record.
const RECORD_COST: usize = PAYLOAD + RECORD_OVERHEAD_BYTES;

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

/// A log holding offsets from its start up to its high watermark that
/// serves reads as `PartitionLog::read` does (at least one record; stops
/// at the limits), counting the records it returned.
struct FakeLog {
    high_watermark: AtomicU64,
    served: AtomicU64,
    /// How long a read takes.
    pause: Duration,
}

impl FakeLog {
    fn new(offsets: Range<u64>) -> Self {
        assert_eq!(offsets.start, 0);
        Self {
            high_watermark: AtomicU64::new(offsets.end),
            served: AtomicU64::new(0),
            pause: Duration::ZERO,
        }
    }

    fn grow_to(&self, high_watermark: u64) {
        self.high_watermark.store(high_watermark, Ordering::SeqCst);
    }

    fn served(&self) -> u64 {
        self.served.load(Ordering::SeqCst)
    }

    fn read(&self, from: u64, limits: ReadLimits) -> Result<ReadBatch, LogError> {
        std::thread::sleep(self.pause);
        let end = self.high_watermark.load(Ordering::SeqCst);
        let mut entries = Vec::new();
        let mut bytes = 0;
        let mut next = from;
        while next < end
            && entries.len() < limits.records_max
            && (entries.is_empty() || bytes + PAYLOAD <= limits.bytes_max)
        {
            entries.push(record(next));
            bytes += PAYLOAD;
            next += 1;
        }
        self.served
            .fetch_add(entries.len() as u64, Ordering::SeqCst);
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

/// A cursor's read of `log` through the tail: the offsets and the next.
fn take(reader: &TailReader, log: &FakeLog, from: u64, records_max: usize) -> (Vec<u64>, u64) {
    let (entries, next) = reader
        .read(from, limits(records_max), |f, l| log.read(f, l))
        .expect("read");
    (offsets(&entries), next)
}

fn range(offsets: Range<u64>) -> Vec<u64> {
    offsets.collect()
}

fn big_tail() -> Arc<ParentTail> {
    Arc::new(ParentTail::new(1 << 20))
}

#[test]
fn cursors_at_one_position_read_the_log_once() {
    let log = FakeLog::new(0..100);
    let tail = big_tail();
    let readers: Vec<TailReader> = (0..4).map(|_| tail.join()).collect();
    for reader in &readers {
        assert_eq!(take(reader, &log, 0, 100), (range(0..100), 100));
    }
    assert_eq!(log.served(), 100, "one cursor read the log");
    assert_eq!(tail.held_bytes(), 0, "every cursor took every record");
}

#[test]
fn cursors_woken_together_read_the_log_once() {
    let mut log = FakeLog::new(0..100);
    log.pause = Duration::from_millis(20);
    let tail = big_tail();
    let readers: Vec<TailReader> = (0..4).map(|_| tail.join()).collect();
    let start = Barrier::new(readers.len());
    std::thread::scope(|scope| {
        for reader in &readers {
            let (log, start) = (&log, &start);
            scope.spawn(move || {
                start.wait();
                assert_eq!(take(reader, log, 0, 100), (range(0..100), 100));
            });
        }
    });
    assert_eq!(log.served(), 100, "the others waited for the first read");
}

#[test]
fn a_cursor_takes_the_held_part_and_reads_only_what_follows() {
    let tail = big_tail();
    let (ahead, behind) = (tail.join(), tail.join());
    let log = FakeLog::new(0..60);
    assert_eq!(take(&ahead, &log, 0, 100), (range(0..60), 60));
    log.grow_to(100);
    assert_eq!(take(&behind, &log, 0, 100), (range(0..100), 100));
    assert_eq!(log.served(), 100, "offsets 60..100 read once, by the second");
    // What followed is held now for the first.
    assert_eq!(take(&ahead, &log, 60, 100), (range(60..100), 100));
    assert_eq!(log.served(), 100);
}

#[test]
fn the_record_limit_covers_held_and_read_records_together() {
    let tail = big_tail();
    let (reader, _idle) = (tail.join(), tail.join());
    let log = FakeLog::new(0..100);
    take(&reader, &log, 0, 30);
    assert_eq!(take(&reader, &log, 10, 50), (range(10..60), 60));
    assert_eq!(take(&reader, &log, 5, 10), (range(5..15), 15));
}

#[test]
fn the_byte_limit_covers_held_and_read_records_together() {
    let tail = big_tail();
    let (reader, _idle) = (tail.join(), tail.join());
    let log = FakeLog::new(0..100);
    take(&reader, &log, 0, 10);
    let bytes = ReadLimits {
        records_max: 100,
        bytes_max: 25 * PAYLOAD + 3,
    };
    let (entries, next) = reader.read(0, bytes, |f, l| log.read(f, l)).unwrap();
    assert_eq!((entries.len(), next), (25, 25));
    // A single record over the limit still comes back.
    let tiny = ReadLimits {
        records_max: 100,
        bytes_max: 1,
    };
    let (entries, next) = reader.read(3, tiny, |f, l| log.read(f, l)).unwrap();
    assert_eq!((offsets(&entries), next), (vec![3], 4));
}

#[test]
fn the_window_slides_past_what_every_cursor_took() {
    let tail = big_tail();
    let (first, second) = (tail.join(), tail.join());
    let log = FakeLog::new(0..100);
    assert_eq!(take(&first, &log, 0, 50), (range(0..50), 50));
    assert_eq!(tail.held_bytes(), 50 * RECORD_COST, "the second has not");
    assert_eq!(take(&second, &log, 0, 50), (range(0..50), 50));
    assert_eq!(tail.held_bytes(), 0);
    assert_eq!(take(&second, &log, 50, 20), (range(50..70), 70));
    assert_eq!(take(&first, &log, 50, 50), (range(50..100), 100));
    assert_eq!(tail.held_bytes(), 30 * RECORD_COST, "70..100");
    assert_eq!(take(&second, &log, 70, 50), (range(70..100), 100));
    assert_eq!(tail.held_bytes(), 0);
    assert_eq!(log.served(), 100);
}

#[test]
fn the_oldest_records_go_once_over_budget() {
    let tail = Arc::new(ParentTail::new(10 * RECORD_COST));
    let (reader, _idle) = (tail.join(), tail.join());
    let log = FakeLog::new(0..100);
    take(&reader, &log, 0, 25);
    assert_eq!(tail.held_bytes(), 10 * RECORD_COST);
    let served = log.served();
    assert_eq!(take(&reader, &log, 15, 10), (range(15..25), 25));
    assert_eq!(log.served(), served, "15..25 held");
    take(&reader, &log, 0, 5);
    assert_eq!(log.served(), served + 5, "0..5 went");
}

#[test]
fn a_slow_cursor_behind_the_window_reads_the_log_and_the_window_stays() {
    let tail = Arc::new(ParentTail::new(30 * RECORD_COST));
    let (fast, slow, follower) = (tail.join(), tail.join(), tail.join());
    let log = FakeLog::new(0..100);
    for from in (0..100).step_by(10) {
        assert_eq!(take(&fast, &log, from, 10), (range(from..from + 10), from + 10));
    }
    assert_eq!(log.served(), 100);
    // The window slid to 70..100 by its budget; the slow cursor is behind.
    assert_eq!(take(&slow, &log, 0, 20), (range(0..20), 20));
    assert_eq!(log.served(), 120, "read from the log");
    assert_eq!(take(&follower, &log, 70, 100), (range(70..100), 100));
    assert_eq!(log.served(), 120, "70..100 still held");
}

#[test]
fn a_cursor_behind_never_waits_for_one_reading_the_log() {
    let tail = big_tail();
    let (ahead, behind) = (tail.join(), tail.join());
    let log = FakeLog::new(0..100);
    take(&ahead, &log, 50, 10);
    let (inside, done) = (Barrier::new(2), Barrier::new(2));
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // Reads past the window's end: it holds the extending lock
            // while the log read runs, until the other has read.
            ahead
                .read(60, limits(40), |f, l| {
                    inside.wait();
                    done.wait();
                    log.read(f, l)
                })
                .expect("read")
        });
        inside.wait();
        // A read behind the window (50..60) goes on beside it; were it to
        // wait for the lock, both threads would wait for ever.
        assert_eq!(take(&behind, &log, 0, 10), (range(0..10), 10));
        done.wait();
    });
}

#[test]
fn a_cursor_joining_late_takes_what_is_held_and_keeps_it_until_it_reads() {
    let tail = big_tail();
    let (first, second) = (tail.join(), tail.join());
    let log = FakeLog::new(0..80);
    take(&first, &log, 0, 50);
    take(&second, &log, 0, 50);
    assert_eq!(tail.held_bytes(), 0);
    let late = tail.join();
    take(&first, &log, 50, 50);
    take(&second, &log, 50, 50);
    assert_eq!(
        tail.held_bytes(),
        30 * RECORD_COST,
        "the late cursor has not read yet"
    );
    assert_eq!(take(&late, &log, 50, 50), (range(50..80), 80));
    assert_eq!(log.served(), 80, "from the tail");
    assert_eq!(tail.held_bytes(), 0);
    // A cursor joining at an older position (its file's, after a restart)
    // reads the log.
    let restarted = tail.join();
    assert_eq!(take(&restarted, &log, 10, 20), (range(10..30), 30));
    assert_eq!(log.served(), 100);
}

#[test]
fn a_cursor_that_stops_lets_go_of_what_only_it_needed() {
    let tail = big_tail();
    let (running, stopping) = (tail.join(), tail.join());
    let log = FakeLog::new(0..50);
    take(&running, &log, 0, 50);
    assert_eq!(tail.held_bytes(), 50 * RECORD_COST);
    drop(stopping);
    assert_eq!(tail.held_bytes(), 0);
}

#[test]
fn a_read_past_the_end_starts_the_tail_over_and_lost_offsets_end_it() {
    let tail = big_tail();
    let (reader, _idle) = (tail.join(), tail.join());
    take(&reader, &FakeLog::new(0..10), 0, 100);
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
    let (entries, next) = reader.read(40, limits(100), lossy).unwrap();
    assert_eq!((entries.len(), next), (4, 46));
    assert!(matches!(entries[2], SlabEntry::Lost(ref lost) if *lost == (42..45)));
    // Offsets 40 and 41 are held; 0..10 went when the tail started over.
    assert_eq!(tail.held_bytes(), 2 * RECORD_COST);
}

#[test]
fn a_closed_log_ends_reads_past_what_is_held() {
    let tail = big_tail();
    let (reader, _idle) = (tail.join(), tail.join());
    take(&reader, &FakeLog::new(0..10), 0, 5);
    let closed = |_, _| -> Result<ReadBatch, LogError> { Err(LogError::Closed) };
    // Held records come back alone; the next read meets the error.
    let (entries, next) = reader.read(2, limits(100), closed).unwrap();
    assert_eq!((offsets(&entries), next), (range(2..5), 5));
    assert!(matches!(
        reader.read(5, limits(100), closed),
        Err(LogError::Closed)
    ));
    assert!(matches!(
        reader.read(0, limits(100), closed),
        Ok((entries, 5)) if entries.len() == 5
    ));
}

#[test]
fn a_held_record_is_shared_not_copied() {
    let tail = big_tail();
    let (first, second) = (tail.join(), tail.join());
    let log = FakeLog::new(0..1);
    let (one, _) = first.read(0, limits(1), |f, l| log.read(f, l)).unwrap();
    let (two, _) = second.read(0, limits(1), |f, l| log.read(f, l)).unwrap();
    let payload = |entries: &[SlabEntry]| match &entries[0] {
        SlabEntry::Record(record) => record.payload.as_ptr(),
        SlabEntry::Lost(_) => panic!("lost"),
    };
    assert_eq!(payload(&one), payload(&two));
}

#[test]
fn a_reopened_parent_partition_gets_a_tail_of_its_own() {
    let dir = tempfile::tempdir().expect("temp dir");
    let disk: Arc<dyn narad_disk::Disk> =
        Arc::new(narad_disk::portable::PortableDisk::new(2).expect("portable disk"));
    let open = || {
        Arc::new(
            PartitionLog::open(
                Arc::clone(&disk),
                dir.path(),
                LogConfig::default(),
                crate::testing::system_clock(),
            )
            .expect("open"),
        )
    };
    let tails = ParentTails::default();
    let parent: Arc<str> = Arc::from("orders");
    let log = open();
    let first = tails.join(&parent, 0, &log, 1 << 20);
    let second = tails.join(&parent, 0, &log, 1 << 20);
    assert!(Arc::ptr_eq(&first.tail, &second.tail), "one per open log");
    let other_partition = tails.join(&parent, 1, &log, 1 << 20);
    assert!(!Arc::ptr_eq(&first.tail, &other_partition.tail));
    take(&first, &FakeLog::new(0..10), 0, 10);
    log.close().expect("close");
    drop(log);
    let reopened = open();
    let after = tails.join(&parent, 0, &reopened, 1 << 20);
    assert!(!Arc::ptr_eq(&first.tail, &after.tail), "a new log, a new tail");
    assert_eq!(after.tail.held_bytes(), 0);
    // The old log's cursors keep theirs until they stop; then it goes.
    let old = Arc::downgrade(&first.tail);
    drop((first, second));
    assert!(old.upgrade().is_none());
    reopened.close().expect("close");
}
