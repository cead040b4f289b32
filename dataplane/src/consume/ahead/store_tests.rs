//! Tests of the consumer state store: recovery rules, cadences, crashes (on
//! the simulated disk), the handle bound and latching.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use narad_clock::SystemClock;

use narad_disk::sim::{Fault, FaultError, FaultOp, SimDisk, Tear};
use narad_disk::{Disk, IoBuf, OpenOptions};
use parking_lot::Mutex;

use super::*;

/// A shard stand-in whose position the test sets.
#[derive(Debug, Default)]
struct Source(Mutex<ConsumerPosition>);

impl Source {
    fn at(frontier: u64, acked_ahead: &[u64]) -> Arc<Self> {
        Arc::new(Self(Mutex::new(position(frontier, acked_ahead))))
    }

    fn set(&self, frontier: u64, acked_ahead: &[u64]) {
        *self.0.lock() = position(frontier, acked_ahead);
    }
}

impl PositionSource for Source {
    fn position(&self) -> ConsumerPosition {
        self.0.lock().clone()
    }
}

fn position(frontier: u64, acked_ahead: &[u64]) -> ConsumerPosition {
    ConsumerPosition {
        frontier,
        acked_ahead: acked_ahead.to_vec(),
    }
}

fn weak(source: &Arc<Source>) -> Weak<dyn PositionSource> {
    let weak: Weak<Source> = Arc::downgrade(source);
    weak
}

/// One tick per durability interval, so every partition's writeout points
/// are `epoch + k * 1 s` whatever its directory hash: a tick before
/// `epoch + 1 s` never writes out.
fn config() -> ConsumerStateConfig {
    ConsumerStateConfig {
        tick: Duration::from_secs(1),
        durable_interval: Duration::from_secs(1),
        offset_level_interval: Duration::from_secs(30),
        handles_max: 64,
    }
}

fn partition_dir(disk: &SimDisk, partition: u32) -> PathBuf {
    let dir = PathBuf::from(format!("/data/topics/orders/p{partition:05}"));
    disk.create_dir_all(&dir).expect("create partition dir");
    dir
}

fn store(disk: &SimDisk, config: ConsumerStateConfig) -> Arc<ConsumerStateStore> {
    ConsumerStateStore::new(Arc::new(disk.clone()), config)
}

/// What a fresh process would load for `dir` from this disk.
fn reload(disk: &SimDisk, dir: &Path) -> ConsumerPosition {
    let source = Source::at(0, &[]);
    let (position, _) = store(disk, config())
        .attach(dir, weak(&source))
        .expect("attach after restart");
    position
}

fn slots(disk: &SimDisk, dir: &Path) -> [Result<SlotRecord, SlotError>; 2] {
    let bytes = disk
        .read_file(&dir.join(AHEAD_FILE_NAME))
        .expect("consumer.ahead exists");
    assert_eq!(bytes.len(), AHEAD_FILE_BYTES);
    [
        decode_slot(&bytes[..SLOT_BYTES]),
        decode_slot(&bytes[SLOT_BYTES..]),
    ]
}

fn offset_file(disk: &SimDisk, dir: &Path) -> Option<u64> {
    let bytes = disk.read_file(&dir.join(OFFSET_FILE_NAME))?;
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

fn write_file(disk: &SimDisk, path: &Path, bytes: &[u8]) {
    disk.open(path, OpenOptions::CREATE)
        .expect("open")
        .write_and_sync(0, IoBuf::from_slice(bytes))
        .wait()
        .expect("write");
    disk.sync_dir(path.parent().expect("parent"))
        .expect("sync dir");
}

/// A reading of the node's monotonic clock at which a test's ticks start.
const START_MS: u64 = 5_000;

fn secs(start_ms: u64, seconds: u64) -> u64 {
    start_ms + seconds * 1_000
}

// ---------------------------------------------------------------------------
// Priming and recovery rules.

#[test]
fn first_attach_primes_durable_files_at_frontier_zero() {
    let disk = SimDisk::new(1);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let (loaded, _) = store(&disk, config())
        .attach(&dir, weak(&source))
        .expect("attach");
    assert_eq!(loaded, ConsumerPosition::default());
    disk.crash(Tear::None);
    let [first, second] = slots(&disk, &dir);
    assert!(first.is_ok() != second.is_ok(), "exactly one slot written");
    assert_eq!(offset_file(&disk, &dir), Some(0));
}

#[test]
fn larger_offset_frontier_wins_and_drops_acked_ahead_below_it() {
    let disk = SimDisk::new(2);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(10, &[12, 15, 20, 21, 30]);
    let state = store(&disk, config());
    state.attach(&dir, weak(&source)).expect("attach");
    state.flush_all().expect("flush");
    write_file(&disk, &dir.join(OFFSET_FILE_NAME), &20u64.to_be_bytes());
    disk.crash(Tear::None);
    // 12 and 15 lie below 20; 20 and 21 are settled, so the frontier moves
    // past them.
    assert_eq!(reload(&disk, &dir), position(22, &[30]));
}

#[test]
fn larger_ahead_frontier_wins_over_consumer_offset() {
    let disk = SimDisk::new(3);
    let dir = partition_dir(&disk, 0);
    write_file(&disk, &dir.join(OFFSET_FILE_NAME), &4u64.to_be_bytes());
    let source = Source::at(9, &[11]);
    let state = store(&disk, config());
    let (loaded, _) = state.attach(&dir, weak(&source)).expect("attach");
    assert_eq!(
        loaded,
        position(4, &[]),
        "seeded from consumer.offset alone"
    );
    state.flush_all().expect("flush");
    write_file(&disk, &dir.join(OFFSET_FILE_NAME), &4u64.to_be_bytes());
    disk.crash(Tear::None);
    assert_eq!(reload(&disk, &dir), position(9, &[11]));
}

#[test]
fn two_invalid_slots_recover_to_consumer_offset_or_zero() {
    let disk = SimDisk::new(4);
    let dir = partition_dir(&disk, 0);
    write_file(&disk, &dir.join(AHEAD_FILE_NAME), &[0xA5; AHEAD_FILE_BYTES]);
    assert_eq!(reload(&disk, &dir), ConsumerPosition::default());

    let dir = partition_dir(&disk, 1);
    write_file(&disk, &dir.join(AHEAD_FILE_NAME), &[0xA5; AHEAD_FILE_BYTES]);
    write_file(&disk, &dir.join(OFFSET_FILE_NAME), &7u64.to_be_bytes());
    assert_eq!(reload(&disk, &dir), position(7, &[]));
}

#[test]
fn oversized_set_survives_restart_as_frontier_and_lowest_offsets() {
    let disk = SimDisk::new(5);
    let dir = partition_dir(&disk, 0);
    let acked: Vec<u64> = (1..=5_000).map(|i| 10 + i * 1_000).collect();
    let source = Source::at(10, &acked);
    let state = store(&disk, config());
    state.attach(&dir, weak(&source)).expect("attach");
    state.flush_all().expect("flush");
    disk.crash(Tear::None);
    let loaded = reload(&disk, &dir);
    assert_eq!(loaded.frontier, 10);
    assert!(!loaded.acked_ahead.is_empty());
    assert_eq!(loaded.acked_ahead[..], acked[..loaded.acked_ahead.len()]);
}

// ---------------------------------------------------------------------------
// Cadences and crashes.

#[test]
fn power_cut_after_a_tick_before_the_writeout_loses_that_interval_only() {
    let disk = SimDisk::new(6);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    let (_, ticket) = state.attach(&dir, weak(&source)).expect("attach");
    let start = START_MS;
    source.set(5, &[7]);
    ticket.touched();
    state.tick(start);
    source.set(8, &[]);
    ticket.touched();
    state.tick(start + 500);
    disk.crash(Tear::None);
    assert_eq!(reload(&disk, &dir), ConsumerPosition::default());
}

#[test]
fn writeout_point_makes_the_window_durable() {
    let disk = SimDisk::new(7);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    let (_, ticket) = state.attach(&dir, weak(&source)).expect("attach");
    let start = START_MS;
    state.tick(start);
    source.set(5, &[7]);
    ticket.touched();
    state.tick(start + 500);
    state.tick(secs(start, 1));
    disk.crash(Tear::None);
    assert_eq!(reload(&disk, &dir), position(5, &[7]));
}

#[test]
fn process_crash_keeps_acks_a_tick_wrote_to_the_page_cache() {
    let disk = SimDisk::new(8);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    let (_, ticket) = state.attach(&dir, weak(&source)).expect("attach");
    source.set(3, &[4 + 1]);
    ticket.touched();
    state.tick(START_MS);
    // The process dies without flushing; the kernel keeps its page cache.
    drop(state);
    assert_eq!(reload(&disk, &dir), position(3, &[5]));
}

#[test]
fn torn_window_falls_back_to_the_anchor() {
    let mut torn = 0;
    let mut whole = 0;
    for seed in 0..48 {
        let disk = SimDisk::new(seed);
        let dir = partition_dir(&disk, 0);
        let source = Source::at(0, &[]);
        let state = store(&disk, config());
        let (_, ticket) = state.attach(&dir, weak(&source)).expect("attach");
        source.set(1_000, &[1_002]);
        state.flush_all().expect("anchor written out");
        let acked: Vec<u64> = (0..300).map(|i| 2_000 + i * 3).collect();
        source.set(1_500, &acked);
        ticket.touched();
        state.tick(START_MS);
        disk.crash(Tear::LastWrite);
        let window_valid = slots(&disk, &dir)
            .iter()
            .filter(|slot| {
                slot.as_ref()
                    .is_ok_and(|record| record.position.frontier == 1_500)
            })
            .count();
        let loaded = reload(&disk, &dir);
        if loaded == position(1_000, &[1_002]) {
            torn += usize::from(window_valid == 0);
        } else {
            assert_eq!(loaded, position(1_500, &acked), "seed {seed}");
            whole += 1;
        }
    }
    assert!(torn > 0, "no seed tore the window");
    assert!(whole > 0, "no seed kept the whole window");
}

#[test]
fn flush_all_then_power_cut_loses_nothing() {
    let disk = SimDisk::new(9);
    let dirs: Vec<PathBuf> = (0..3).map(|p| partition_dir(&disk, p)).collect();
    let sources: Vec<Arc<Source>> = (0..3).map(|_| Source::at(0, &[])).collect();
    let state = store(&disk, config());
    for (dir, source) in dirs.iter().zip(&sources) {
        state.attach(dir, weak(source)).expect("attach");
    }
    let start = START_MS;
    state.tick(start);
    for (p, source) in sources.iter().enumerate() {
        let base = 100 * (p as u64 + 1);
        source.set(base, &[base + 2, base + 3]);
    }
    // Untouched on purpose: flush_all reads every source.
    state.flush_all().expect("flush");
    disk.crash(Tear::LastWrite);
    for (p, dir) in dirs.iter().enumerate() {
        let base = 100 * (p as u64 + 1);
        assert_eq!(reload(&disk, dir), position(base, &[base + 2, base + 3]));
        assert_eq!(offset_file(&disk, dir), Some(base));
    }
}

#[test]
fn writeout_flips_roles_and_the_anchor_is_never_written() {
    let disk = SimDisk::new(10);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    let (_, ticket) = state.attach(&dir, weak(&source)).expect("attach");
    let anchor_of = |disk: &SimDisk| {
        let slots = slots(disk, &dir);
        (0..2)
            .max_by_key(|&i| slots[i].as_ref().map_or(0, |record| record.generation))
            .expect("two slots")
    };
    let bytes = |disk: &SimDisk| disk.read_file(&dir.join(AHEAD_FILE_NAME)).expect("file");
    let start = START_MS;
    let first_anchor = anchor_of(&disk);
    let anchor_range = first_anchor * SLOT_BYTES..(first_anchor + 1) * SLOT_BYTES;
    let before = bytes(&disk)[anchor_range.clone()].to_vec();
    for (step, at) in [(1u64, 0u64), (2, 400), (3, 800)] {
        source.set(step, &[]);
        ticket.touched();
        state.tick(start + at);
        assert_eq!(
            bytes(&disk)[anchor_range.clone()],
            before[..],
            "anchor rewritten"
        );
    }
    state.tick(secs(start, 1));
    assert_eq!(anchor_of(&disk), 1 - first_anchor, "roles flipped");
    let slots = slots(&disk, &dir);
    let new_anchor = slots[1 - first_anchor].as_ref().expect("valid");
    assert_eq!(new_anchor.position, position(3, &[]));
    // The next window write lands in the old anchor.
    source.set(4, &[]);
    ticket.touched();
    state.tick(start + 1_100);
    let after = slots_after(&disk, &dir);
    assert_eq!(after[first_anchor].position, position(4, &[]));
    assert_eq!(after[1 - first_anchor].position, position(3, &[]));
}

fn slots_after(disk: &SimDisk, dir: &Path) -> Vec<SlotRecord> {
    slots(disk, dir)
        .into_iter()
        .map(|slot| slot.expect("valid slot"))
        .collect()
}

#[test]
fn consumer_offset_is_levelled_at_most_every_level_interval() {
    let disk = SimDisk::new(11);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    let (_, ticket) = state.attach(&dir, weak(&source)).expect("attach");
    let start = START_MS;
    state.tick(start);
    let settle_and_write_out = |frontier: u64, second: u64| {
        source.set(frontier, &[]);
        ticket.touched();
        state.tick(secs(start, second));
        offset_file(&disk, &dir)
    };
    assert_eq!(settle_and_write_out(10, 1), Some(10), "first levelling");
    assert_eq!(settle_and_write_out(20, 2), Some(10), "too soon");
    assert_eq!(settle_and_write_out(30, 30), Some(10), "29 s after");
    assert_eq!(settle_and_write_out(40, 31), Some(40), "30 s after");
}

#[test]
fn dropped_source_is_written_out_and_forgotten() {
    let disk = SimDisk::new(12);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    let (_, ticket) = state.attach(&dir, weak(&source)).expect("attach");
    source.set(6, &[]);
    ticket.touched();
    state.tick(START_MS);
    drop(source);
    state.tick(START_MS);
    assert_eq!(state.handles_open(), 0);
    disk.crash(Tear::None);
    assert_eq!(reload(&disk, &dir), position(6, &[]));
}

// ---------------------------------------------------------------------------
// Handles, detach and disk errors.

#[test]
fn handle_bound_closes_least_recently_touched_after_writing_it_out() {
    let disk = SimDisk::new(13);
    let state = store(
        &disk,
        ConsumerStateConfig {
            handles_max: 2,
            ..config()
        },
    );
    let dirs: Vec<PathBuf> = (0..3).map(|p| partition_dir(&disk, p)).collect();
    let sources: Vec<Arc<Source>> = (0..3).map(|_| Source::at(0, &[])).collect();
    let mut tickets = Vec::new();
    for (dir, source) in dirs.iter().zip(&sources).take(2) {
        tickets.push(state.attach(dir, weak(source)).expect("attach").1);
    }
    let start = START_MS;
    state.tick(start);
    for (p, ticket) in tickets.iter().enumerate() {
        sources[p].set(10 + p as u64, &[]);
        ticket.touched();
        state.tick(start + 100 * (p as u64 + 1));
    }
    // Partition 0 is the least recently touched: attaching a third closes it
    // after writing out its window.
    tickets.push(state.attach(&dirs[2], weak(&sources[2])).expect("attach").1);
    assert_eq!(state.handles_open(), 2);
    // Touching it again reopens it (closing another) and keeps writing.
    sources[0].set(20, &[]);
    tickets[0].touched();
    state.tick(start + 500);
    assert_eq!(state.handles_open(), 2);
    state.flush_all().expect("flush");
    assert!(state.handles_open() <= 2);
    disk.crash(Tear::None);
    assert_eq!(reload(&disk, &dirs[0]), position(20, &[]));
    assert_eq!(reload(&disk, &dirs[1]), position(11, &[]));
    assert_eq!(reload(&disk, &dirs[2]), position(0, &[]));
}

#[test]
fn evicted_window_is_durable_before_its_handle_closes() {
    let disk = SimDisk::new(14);
    let state = store(
        &disk,
        ConsumerStateConfig {
            handles_max: 1,
            ..config()
        },
    );
    let first = partition_dir(&disk, 0);
    let second = partition_dir(&disk, 1);
    let source = Source::at(0, &[]);
    let (_, ticket) = state.attach(&first, weak(&source)).expect("attach");
    source.set(9, &[11]);
    ticket.touched();
    state.tick(START_MS);
    let other = Source::at(0, &[]);
    state.attach(&second, weak(&other)).expect("attach");
    disk.crash(Tear::None);
    assert_eq!(reload(&disk, &first), position(9, &[11]));
}

#[test]
fn detach_stops_writes() {
    let disk = SimDisk::new(15);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    let (_, ticket) = state.attach(&dir, weak(&source)).expect("attach");
    let before = disk.read_file(&dir.join(AHEAD_FILE_NAME));
    let ops = disk.op_count();
    state.detach(&dir);
    source.set(50, &[]);
    ticket.touched();
    let start = START_MS;
    state.tick(start);
    state.tick(secs(start, 1));
    state.flush_all().expect("nothing attached");
    assert_eq!(disk.op_count(), ops);
    assert_eq!(disk.read_file(&dir.join(AHEAD_FILE_NAME)), before);
    assert_eq!(state.handles_open(), 0);
}

#[test]
fn release_writes_out_the_position_now_then_forgets_the_partition() {
    let disk = SimDisk::new(17);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    state.attach(&dir, weak(&source)).expect("attach");
    state.tick(START_MS);
    // Untouched on purpose: release reads the source.
    source.set(7, &[9]);
    state.release(&dir).expect("released");
    assert!(!state.is_attached(&dir));
    assert_eq!(state.handles_open(), 0);
    disk.crash(Tear::LastWrite);
    assert_eq!(reload(&disk, &dir), position(7, &[9]));
    assert_eq!(offset_file(&disk, &dir), Some(7));
}

#[test]
fn release_of_a_partition_not_attached_is_nothing() {
    let disk = SimDisk::new(18);
    let dir = partition_dir(&disk, 0);
    let state = store(&disk, config());
    let ops = disk.op_count();
    state.release(&dir).expect("nothing to release");
    assert_eq!(disk.op_count(), ops);
}

#[test]
fn release_of_a_latched_partition_fails_and_keeps_it_attached() {
    let disk = SimDisk::new(19);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    state.attach(&dir, weak(&source)).expect("attach");
    source.set(3, &[]);
    disk.inject(Fault {
        op: FaultOp::Sync,
        nth: 0,
        error: FaultError::Eio,
        sticky: false,
    });
    assert!(matches!(
        state.release(&dir),
        Err(StateError::NotDurable { dirs }) if dirs == vec![dir.clone()]
    ));
    assert!(state.is_attached(&dir));
    assert!(state.is_latched(&dir));
    assert_eq!(state.handles_open(), 0);
}

#[test]
fn failed_fdatasync_latches_the_partition_and_is_never_retried() {
    let disk = SimDisk::new(16);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    let (_, ticket) = state.attach(&dir, weak(&source)).expect("attach");
    let start = START_MS;
    state.tick(start);
    source.set(4, &[]);
    ticket.touched();
    disk.inject(Fault {
        op: FaultOp::Sync,
        nth: 0,
        error: FaultError::Eio,
        sticky: false,
    });
    state.tick(secs(start, 1));
    assert!(state.is_latched(&dir));
    assert_eq!(state.handles_open(), 0);
    let ops = disk.op_count();
    source.set(8, &[]);
    ticket.touched();
    state.tick(secs(start, 2));
    let error = state.flush_all().expect_err("latched partition reported");
    assert!(
        matches!(&error, StateError::NotDurable { dirs } if dirs == &vec![dir.clone()]),
        "{error}"
    );
    assert_eq!(disk.op_count(), ops, "no write after the latch");
}

#[test]
fn failed_window_write_latches_without_touching_other_partitions() {
    let disk = SimDisk::new(17);
    let failing = partition_dir(&disk, 0);
    let healthy = partition_dir(&disk, 1);
    let sources = [Source::at(0, &[]), Source::at(0, &[])];
    let state = store(&disk, config());
    let (_, failing_ticket) = state.attach(&failing, weak(&sources[0])).expect("attach");
    state.attach(&healthy, weak(&sources[1])).expect("attach");
    sources[0].set(3, &[]);
    failing_ticket.touched();
    disk.inject(Fault {
        op: FaultOp::Write,
        nth: 0,
        error: FaultError::Enospc,
        sticky: false,
    });
    state.tick(START_MS);
    assert!(state.is_latched(&failing));
    sources[1].set(7, &[]);
    assert!(state.flush_all().is_err());
    disk.crash(Tear::None);
    assert_eq!(reload(&disk, &healthy), position(7, &[]));
    assert_eq!(reload(&disk, &failing), position(0, &[]));
}

#[test]
fn unreadable_file_fails_attach_with_the_disk_error() {
    let disk = SimDisk::new(18);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    state.attach(&dir, weak(&source)).expect("prime");
    disk.inject(Fault {
        op: FaultOp::Read,
        nth: 0,
        error: FaultError::Eio,
        sticky: false,
    });
    let error = state
        .attach(&dir, weak(&source))
        .expect_err("read failure surfaces");
    assert!(matches!(error, StateError::Io { .. }), "{error}");
}

#[test]
fn work_is_pending_from_a_touch_until_it_is_written_out_and_levelled() {
    let disk = SimDisk::new(24);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    let (_, ticket) = state.attach(&dir, weak(&source)).expect("attach");
    let start = START_MS;
    state.tick(start);
    assert!(!state.has_pending(), "a primed partition owes nothing");
    source.set(4, &[]);
    ticket.touched();
    assert!(state.has_pending(), "touched");
    state.tick(start + 500);
    assert!(state.has_pending(), "written into the window, not out");
    state.tick(secs(start, 1));
    assert_eq!(offset_file(&disk, &dir), Some(4));
    assert!(!state.has_pending(), "written out and levelled");
}

#[test]
fn spawned_worker_writes_touched_partitions_and_stops() {
    let disk = SimDisk::new(19);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(
        &disk,
        ConsumerStateConfig {
            tick: Duration::from_millis(10),
            durable_interval: Duration::from_millis(10),
            ..config()
        },
    );
    let (_, ticket) = state.attach(&dir, weak(&source)).expect("attach");
    let worker = state.spawn(Arc::new(SystemClock::new())).expect("spawn");
    source.set(12, &[]);
    ticket.touched();
    // Liveness only: wait (bounded) until a tick wrote the new position.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !slots(&disk, &dir).iter().any(|slot| {
        slot.as_ref()
            .is_ok_and(|record| record.position == position(12, &[]))
    }) {
        assert!(Instant::now() < deadline, "worker never ticked");
        std::thread::sleep(Duration::from_millis(5));
    }
    worker.stop();
}

#[test]
fn touches_beyond_the_handle_bound_in_one_tick_are_all_written() {
    let disk = SimDisk::new(20);
    let state = store(
        &disk,
        ConsumerStateConfig {
            handles_max: 1,
            ..config()
        },
    );
    let dirs: Vec<PathBuf> = (0..3).map(|p| partition_dir(&disk, p)).collect();
    let sources: Vec<Arc<Source>> = (0..3).map(|_| Source::at(0, &[])).collect();
    let tickets: Vec<StateTicket> = dirs
        .iter()
        .zip(&sources)
        .map(|(dir, source)| state.attach(dir, weak(source)).expect("attach").1)
        .collect();
    for (p, (source, ticket)) in sources.iter().zip(&tickets).enumerate() {
        source.set(30 + p as u64, &[]);
        ticket.touched();
    }
    state.tick(START_MS);
    assert!(state.handles_open() <= 1);
    for (p, dir) in dirs.iter().enumerate() {
        // Both slots valid: the anchor was never overwritten.
        let [first, second] = slots(&disk, dir);
        let (first, second) = (first.expect("slot 0"), second.expect("slot 1"));
        let newest = if first.generation > second.generation {
            first
        } else {
            second
        };
        assert_eq!(newest.position, position(30 + p as u64, &[]));
    }
}

/// Settled offsets of `position` below `limit`.
fn settled(position: &ConsumerPosition, limit: u64) -> Vec<u64> {
    (0..limit)
        .filter(|offset| *offset < position.frontier || position.acked_ahead.contains(offset))
        .collect()
}

/// Seeded runs of settles, touches, ticks, flushes, evictions and crashes
/// (power cuts with torn writes, and process crashes): every recovered
/// position settles nothing the shard had not settled, and everything it
/// had settled at the last successful `flush_all`.
#[test]
fn random_runs_recover_only_settled_offsets_and_all_flushed_ones() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    const LIMIT: u64 = 2_000;
    for seed in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let disk = SimDisk::new(seed);
        let dirs: Vec<PathBuf> = (0..3).map(|p| partition_dir(&disk, p)).collect();
        // The shard's truth per partition, and what was flushed last.
        let mut truth: Vec<ConsumerPosition> = vec![ConsumerPosition::default(); 3];
        let mut flushed = truth.clone();
        let config = ConsumerStateConfig {
            tick: Duration::from_millis(100),
            durable_interval: Duration::from_millis(300),
            offset_level_interval: Duration::from_millis(700),
            handles_max: 2,
        };
        for _restart in 0..3 {
            let state = store(&disk, config.clone());
            let sources: Vec<Arc<Source>> = (0..3).map(|_| Source::at(0, &[])).collect();
            let mut tickets = Vec::new();
            for (p, dir) in dirs.iter().enumerate() {
                let (loaded, ticket) = state.attach(dir, weak(&sources[p])).expect("attach");
                let recovered = settled(&loaded, LIMIT);
                let had = settled(&truth[p], LIMIT);
                assert!(
                    recovered.iter().all(|offset| had.contains(offset)),
                    "seed {seed}: recovered {loaded:?} settles beyond {:?}",
                    truth[p]
                );
                assert!(
                    settled(&flushed[p], LIMIT)
                        .iter()
                        .all(|offset| recovered.contains(offset)),
                    "seed {seed}: recovered {loaded:?} lost flushed {:?}",
                    flushed[p]
                );
                truth[p] = loaded.clone();
                flushed[p] = loaded.clone();
                sources[p].set(loaded.frontier, &loaded.acked_ahead);
                tickets.push(ticket);
            }
            let start = START_MS;
            for step in 0..rng.random_range(5..40u64) {
                let p = rng.random_range(0..3usize);
                settle_one(&mut truth[p], rng.random_range(0..40u64));
                sources[p].set(truth[p].frontier, &truth[p].acked_ahead);
                tickets[p].touched();
                if rng.random_bool(0.5) {
                    state.tick(start + 100 * step);
                }
                if rng.random_bool(0.05) {
                    state.flush_all().expect("flush");
                    flushed.clone_from(&truth);
                }
            }
            if rng.random_bool(0.5) {
                disk.crash(Tear::LastWrite);
            } else {
                drop(state);
            }
        }
    }
}

/// Settles the offset `distance` above the frontier of `position`, as the
/// shard would: the frontier absorbs any run it reaches.
fn settle_one(position: &mut ConsumerPosition, distance: u64) {
    let offset = position.frontier + distance;
    if let Err(at) = position.acked_ahead.binary_search(&offset) {
        position.acked_ahead.insert(at, offset);
    }
    while position.acked_ahead.first() == Some(&position.frontier) {
        position.acked_ahead.remove(0);
        position.frontier += 1;
    }
}

#[test]
fn real_files_through_the_portable_backend_survive_a_restart() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path().join("p00000");
    std::fs::create_dir(&dir).expect("partition dir");
    let disk: Arc<dyn Disk> =
        Arc::new(narad_disk::portable::PortableDisk::new(1).expect("portable disk"));
    let source = Source::at(0, &[]);
    let state = ConsumerStateStore::new(Arc::clone(&disk), config());
    let (loaded, ticket) = state.attach(&dir, weak(&source)).expect("attach");
    assert_eq!(loaded, ConsumerPosition::default());
    assert_eq!(
        std::fs::metadata(dir.join(AHEAD_FILE_NAME))
            .expect("consumer.ahead")
            .len(),
        AHEAD_FILE_BYTES as u64
    );
    source.set(41, &[43, 44, 50]);
    ticket.touched();
    let start = START_MS;
    state.tick(start);
    state.tick(secs(start, 1));
    source.set(42, &[43, 44, 50, 51]);
    state.flush_all().expect("flush");
    drop(state);
    let fresh = ConsumerStateStore::new(disk, config());
    let (loaded, _) = fresh.attach(&dir, weak(&source)).expect("reattach");
    assert_eq!(loaded, position(42, &[43, 44, 50, 51]));
    assert_eq!(
        std::fs::read(dir.join(OFFSET_FILE_NAME)).expect("consumer.offset"),
        42u64.to_be_bytes()
    );
}

#[test]
fn malformed_position_from_a_source_latches_instead_of_panicking() {
    let disk = SimDisk::new(21);
    let dir = partition_dir(&disk, 0);
    let source = Source::at(0, &[]);
    let state = store(&disk, config());
    let (_, ticket) = state.attach(&dir, weak(&source)).expect("attach");
    source.set(10, &[12, 11]);
    ticket.touched();
    state.tick(START_MS);
    assert!(state.is_latched(&dir));
    disk.crash(Tear::None);
    assert_eq!(reload(&disk, &dir), ConsumerPosition::default());
}
