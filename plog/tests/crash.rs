//! Crash and fault tests on the simulated disk.
//!
//! A power cut is modelled as a sticky fault on every operation from a
//! seeded point on (the process can no longer reach the disk), followed by
//! `SimDisk::crash`, which keeps only synced bytes and may tear the last
//! unsynced write. After each cut the log is reopened and checked against a
//! model of what was acknowledged.

// Helpers outside `#[test]` functions panic on failure like the tests do.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{Owned, commit, numbered, read_all, read_records, same_content};
use narad_clock::ManualClock;
use narad_disk::sim::{Fault, FaultError, FaultOp, SimDisk, Tear};
use narad_disk::{Disk, IoBuf, OpenOptions};
use narad_plog::frame::{self, FRAME_BYTES_MAX};
use narad_plog::segment::segment_file_name;
use narad_plog::{
    Codec, CommitRecord, CompressionLevel, HEAL_RETRY_MS, HWM_FILE_NAME, LogConfig, LogError,
    PartitionLog, ReadEntry, ReadLimits, Record,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Seeds of the crash loop: enough to hit every step of a commit, a roll,
/// the hwm file and close many times, within the test-time budget.
const CRASH_SEEDS: u64 = 200;

/// Crash-and-reopen cycles per seed.
const CYCLES_PER_SEED: usize = 4;

/// Retention in the crash loop, in the loop's millisecond clock.
const RETENTION_MS: u64 = 20;

const DIR: &str = "/data/topics/orders/p00000";

fn dir() -> &'static Path {
    Path::new(DIR)
}

fn open(sim: &SimDisk, config: &LogConfig) -> PartitionLog {
    PartitionLog::open(
        Arc::new(sim.clone()),
        dir(),
        config.clone(),
        Arc::new(narad_clock::SystemClock::new()),
    )
    .unwrap()
}

fn crash_config(rng: &mut StdRng) -> LogConfig {
    LogConfig {
        segment_bytes: rng.random_range(512..4_096),
        frame_payload_bytes_target: rng.random_range(64..1_024),
        frame_records_max: rng.random_range(1..12),
        index_interval_bytes: rng.random_range(1..512),
        codec: if rng.random_bool(0.3) {
            Codec::Zstd
        } else {
            Codec::None
        },
        // Commits into prepared zeros (overwrites, torn in sectors) or
        // appended.
        prepare_bytes: if rng.random_bool(0.2) {
            0
        } else {
            rng.random_range(1..8_192)
        },
        ..LogConfig::default()
    }
}

fn random_batch(rng: &mut StdRng, time_ms: u64) -> Vec<Owned> {
    (0..rng.random_range(1..10))
        .map(|_| {
            let mut key = vec![0u8; rng.random_range(0..12)];
            rng.fill(&mut key[..]);
            // Repetitive payloads so zstd frames are really compressed.
            let unit = rng.random_range(b'a'..=b'z');
            let payload = vec![unit; rng.random_range(0..200)];
            Owned {
                key,
                payload,
                committed_at_ms: time_ms,
            }
        })
        .collect()
}

/// Checks a reopened log against the acknowledged records, and adopts the
/// prefix of the cut commit that recovery found durable.
fn check_recovered(log: &PartitionLog, acked: &mut Vec<Owned>, in_flight: &[Owned], seed: u64) {
    let high_watermark = log.high_watermark();
    assert!(
        high_watermark >= acked.len() as u64,
        "seed {seed}: acknowledged commits lost: hwm {high_watermark} < {}",
        acked.len()
    );
    let extra = (high_watermark - acked.len() as u64) as usize;
    assert!(
        extra <= in_flight.len(),
        "seed {seed}: {extra} records above the acknowledged ones, but only {} were in flight",
        in_flight.len()
    );
    // Retention may have deleted the oldest segments.
    let oldest = log.stats().unwrap().oldest_offset;
    assert!(oldest <= high_watermark, "seed {seed}");
    let records = read_records(log, oldest);
    assert_eq!(
        records.len() as u64,
        high_watermark - oldest,
        "seed {seed}: offsets are contiguous"
    );
    let mut last_time = 0;
    for (index, record) in records.iter().enumerate() {
        let offset = oldest as usize + index;
        assert_eq!(record.offset, offset as u64, "seed {seed}");
        let expected = acked
            .get(offset)
            .unwrap_or_else(|| &in_flight[offset - acked.len()]);
        assert!(
            same_content(record, expected),
            "seed {seed}: offset {offset} differs"
        );
        assert!(
            record.committed_at_ms >= last_time,
            "seed {seed}: commit time went backwards"
        );
        last_time = record.committed_at_ms;
    }
    assert_eq!(
        log.read(high_watermark, u64::MAX, Default::default())
            .unwrap()
            .entries,
        vec![]
    );
    // A commit that was cut may have become durable in part; it is now
    // committed, as recovery from the tail promises.
    acked.extend_from_slice(&in_flight[..extra]);
}

fn run_crash_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let sim = SimDisk::new(seed);
    let config = crash_config(&mut rng);
    let mut acked: Vec<Owned> = Vec::new();
    let mut in_flight: Vec<Owned> = Vec::new();
    let mut time_ms = 1_000;
    for _ in 0..CYCLES_PER_SEED {
        let log = open(&sim, &config);
        check_recovered(&log, &mut acked, &in_flight, seed);
        in_flight.clear();
        let clean_close = rng.random_bool(0.25);
        if !clean_close {
            sim.inject(Fault {
                op: FaultOp::Any,
                nth: rng.random_range(0..80),
                error: if rng.random_bool(0.8) {
                    FaultError::Eio
                } else {
                    FaultError::Enospc
                },
                sticky: true,
            });
        }
        for _ in 0..rng.random_range(1..25) {
            time_ms += rng.random_range(0..3);
            let batch = random_batch(&mut rng, time_ms);
            match commit(&log, &batch) {
                Ok(offsets) => {
                    assert_eq!(
                        offsets.start,
                        acked.len() as u64,
                        "seed {seed}: offsets contiguous"
                    );
                    acked.extend(batch);
                }
                Err(_) => {
                    assert_eq!(
                        log.high_watermark(),
                        acked.len() as u64,
                        "seed {seed}: a failed commit is not visible"
                    );
                    in_flight = batch;
                    break;
                }
            }
        }
        if rng.random_bool(0.3) {
            // Retention of a few milliseconds deletes all but the newest
            // segments; under a cut it may fail part way.
            let _ = log.sweep_retention(time_ms, RETENTION_MS);
        }
        if clean_close {
            log.close().unwrap();
        } else {
            // Close may fail too; either way the crash decides.
            let _ = log.close();
        }
        drop(log);
        sim.clear_faults();
        sim.crash(if rng.random_bool(0.5) {
            Tear::LastWrite
        } else {
            Tear::None
        });
    }
    let log = open(&sim, &config);
    check_recovered(&log, &mut acked, &in_flight, seed);
}

#[test]
fn every_acknowledged_commit_survives_crashes_at_seeded_points() {
    for seed in 0..CRASH_SEEDS {
        run_crash_seed(seed);
    }
}

/// Two partition logs of one disk committing at the same moments (their
/// write-and-syncs may be submitted together, `write_and_sync_gathered`),
/// cut at a seeded point and torn: each log keeps every commit it
/// acknowledged, and a commit the cut failed fails only its own caller.
fn run_two_logs_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let sim = SimDisk::new(seed);
    let config = crash_config(&mut rng);
    let dirs = [
        Path::new("/data/topics/parent/p00000"),
        Path::new("/data/topics/child/p00000"),
    ];
    let open_at = |dir: &Path| {
        PartitionLog::open(
            Arc::new(sim.clone()),
            dir,
            config.clone(),
            Arc::new(narad_clock::SystemClock::new()),
        )
        .unwrap()
    };
    let batches: Vec<Vec<Vec<Owned>>> = (0..2)
        .map(|_| {
            (0..rng.random_range(5..20))
                .map(|n| random_batch(&mut rng, 1_000 + n))
                .collect()
        })
        .collect();
    let logs: Vec<PartitionLog> = dirs.iter().map(|dir| open_at(dir)).collect();
    sim.inject(Fault {
        op: FaultOp::Any,
        nth: rng.random_range(0..120),
        error: FaultError::Eio,
        sticky: true,
    });
    let outcomes: Vec<(Vec<Owned>, Vec<Owned>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = logs
            .into_iter()
            .zip(&batches)
            .map(|(log, batches)| {
                scope.spawn(move || {
                    let mut acked = Vec::new();
                    for batch in batches {
                        match commit(&log, batch) {
                            Ok(offsets) => {
                                assert_eq!(offsets.start, acked.len() as u64, "seed {seed}");
                                acked.extend(batch.iter().cloned());
                            }
                            Err(_) => {
                                assert_eq!(log.high_watermark(), acked.len() as u64);
                                return (acked, batch.clone());
                            }
                        }
                    }
                    (acked, Vec::new())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    sim.clear_faults();
    sim.crash(if rng.random_bool(0.5) {
        Tear::LastWrite
    } else {
        Tear::None
    });
    for (dir, (mut acked, in_flight)) in dirs.iter().zip(outcomes) {
        let log = open_at(dir);
        check_recovered(&log, &mut acked, &in_flight, seed);
    }
}

#[test]
fn two_logs_committing_at_once_keep_every_acknowledged_commit_across_a_cut() {
    for seed in 0..CRASH_SEEDS {
        run_two_logs_seed(seed);
    }
}

/// A log with `count` records committed and synced, on a fresh disk.
fn log_with(sim: &SimDisk, count: u64) -> PartitionLog {
    let log = open(sim, &LogConfig::default());
    commit(&log, &numbered(0, count, 1)).unwrap();
    log
}

/// A log under `config` holding offsets 0..40, committed four at a time.
fn forty_records_in_ten_commits(sim: &SimDisk, config: &LogConfig) -> PartitionLog {
    let log = open(sim, config);
    for n in 0..10 {
        commit(&log, &numbered(n * 4, 4, 1)).unwrap();
    }
    log
}

/// The first segment's bytes without the zeros prepared after them.
fn segment_data(sim: &SimDisk) -> Vec<u8> {
    let mut bytes = sim.read_file(&dir().join(segment_file_name(0))).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |at| at + 1);
    bytes.truncate(end);
    bytes
}

/// Checks that after a crash the log holds exactly `count` numbered records
/// and takes the next commit at `count`.
fn assert_exactly_after_crash(sim: &SimDisk, count: u64) {
    sim.clear_faults();
    sim.crash(Tear::LastWrite);
    let log = open(sim, &LogConfig::default());
    assert_eq!(log.high_watermark(), count);
    let records = read_records(&log, 0);
    assert!(
        records
            .iter()
            .zip(numbered(0, count, 1))
            .all(|(r, o)| same_content(r, &o))
    );
    assert_eq!(
        commit(&log, &numbered(count, 1, 1)).unwrap(),
        count..count + 1
    );
}

fn fail_next(sim: &SimDisk, op: FaultOp, error: FaultError) {
    sim.inject(Fault {
        op,
        nth: 0,
        error,
        sticky: false,
    });
}

#[test]
fn a_failed_write_leaves_no_trace_and_the_retry_takes_the_same_offsets() {
    for error in [FaultError::Eio, FaultError::Enospc] {
        let sim = SimDisk::new(7);
        let log = log_with(&sim, 3);
        let data = segment_data(&sim);
        fail_next(&sim, FaultOp::Write, error);
        assert!(matches!(
            commit(&log, &numbered(100, 4, 1)),
            Err(LogError::Io { .. })
        ));
        assert_eq!(log.high_watermark(), 3);
        assert_eq!(
            segment_data(&sim),
            data,
            "the partial write was truncated away"
        );
        assert!(!log.is_poisoned());
        assert_eq!(commit(&log, &numbered(3, 2, 1)).unwrap(), 3..5);
        drop(log);
        assert_exactly_after_crash(&sim, 5);
    }
}

#[test]
fn a_failed_read_back_leaves_no_trace_and_the_retry_takes_the_same_offsets() {
    let sim = SimDisk::new(8);
    let log = log_with(&sim, 3);
    let data = segment_data(&sim);
    fail_next(&sim, FaultOp::Read, FaultError::Eio);
    assert!(commit(&log, &numbered(100, 4, 1)).is_err());
    assert_eq!(log.high_watermark(), 3);
    assert_eq!(read_records(&log, 0).len(), 3);
    assert_eq!(
        segment_data(&sim),
        data,
        "the synced frames were truncated away"
    );
    assert_eq!(commit(&log, &numbered(3, 1, 1)).unwrap(), 3..4);
    drop(log);
    assert_exactly_after_crash(&sim, 4);
}

#[test]
fn a_commit_that_failed_after_its_fdatasync_is_gone_after_a_crash() {
    let sim = SimDisk::new(17);
    let log = log_with(&sim, 3);
    // The frames are durable when the read-back fails; the undo must
    // truncate them durably too.
    fail_next(&sim, FaultOp::Read, FaultError::Eio);
    assert!(commit(&log, &numbered(100, 4, 1)).is_err());
    drop(log);
    assert_exactly_after_crash(&sim, 3);
}

#[test]
fn a_failed_fdatasync_poisons_the_log_until_reopen() {
    let sim = SimDisk::new(9);
    let log = log_with(&sim, 3);
    fail_next(&sim, FaultOp::Sync, FaultError::Eio);
    assert!(matches!(
        commit(&log, &numbered(100, 2, 1)),
        Err(LogError::SyncFailed(_))
    ));
    assert!(log.is_poisoned());
    // The latch holds even though the disk works again.
    assert!(matches!(
        commit(&log, &numbered(3, 1, 1)),
        Err(LogError::Poisoned)
    ));
    assert!(matches!(
        commit(&log, &numbered(3, 1, 1)),
        Err(LogError::Poisoned)
    ));
    // Committed records stay readable; the failed ones never show.
    assert_eq!(read_records(&log, 0).len(), 3);
    assert_eq!(log.high_watermark(), 3);
    drop(log);
    assert_exactly_after_crash(&sim, 3);
}

#[test]
fn reopening_a_poisoned_log_without_a_crash_clears_the_latch() {
    let sim = SimDisk::new(10);
    let log = log_with(&sim, 2);
    fail_next(&sim, FaultOp::Sync, FaultError::Eio);
    assert!(commit(&log, &numbered(2, 1, 1)).is_err());
    log.close().unwrap();
    drop(log);
    let log = open(&sim, &LogConfig::default());
    assert!(!log.is_poisoned());
    assert_eq!(commit(&log, &numbered(2, 1, 1)).unwrap(), 2..3);
}

/// A log on `clock` with `count` records committed and synced, on a fresh
/// disk.
fn log_on_clock(sim: &SimDisk, clock: &Arc<ManualClock>, count: u64) -> PartitionLog {
    let log = PartitionLog::open(
        Arc::new(sim.clone()),
        dir(),
        LogConfig::default(),
        Arc::clone(clock) as Arc<dyn narad_clock::Clock>,
    )
    .unwrap();
    commit(&log, &numbered(0, count, 1)).unwrap();
    log
}

/// Poisons `log` with a failed fdatasync of a commit of two records at
/// `next`, then shows a commit refused at once.
fn poison_with_a_failed_sync(sim: &SimDisk, log: &PartitionLog, next: u64) {
    fail_next(sim, FaultOp::Sync, FaultError::Enospc);
    assert!(matches!(
        commit(log, &numbered(next, 2, 1)),
        Err(LogError::SyncFailed(_))
    ));
    assert!(log.is_poisoned());
    assert_still_poisoned(log, next);
}

/// A commit of two records at `next` is refused: the latch holds.
fn assert_still_poisoned(log: &PartitionLog, next: u64) {
    assert!(matches!(
        commit(log, &numbered(next, 2, 1)),
        Err(LogError::Poisoned)
    ));
}

#[test]
fn a_poisoned_log_heals_at_a_commit_after_the_retry_interval_and_loses_nothing() {
    let sim = SimDisk::new(21);
    let clock = Arc::new(ManualClock::new(1_000));
    let log = log_on_clock(&sim, &clock, 3);
    poison_with_a_failed_sync(&sim, &log, 3);
    // Within the interval the disk is not touched and the latch holds.
    clock.advance(HEAL_RETRY_MS - 1);
    let ops = sim.op_count();
    assert_still_poisoned(&log, 3);
    assert_eq!(sim.op_count(), ops, "no attempt before the interval");
    // Then a commit heals the log and lands on the offsets the failed one
    // would have taken.
    clock.advance(1);
    assert_eq!(commit(&log, &numbered(3, 2, 1)).unwrap(), 3..5);
    assert!(!log.is_poisoned());
    assert_eq!(log.high_watermark(), 5);
    let records = read_records(&log, 0);
    assert_eq!(records.len(), 5);
    assert!(
        records
            .iter()
            .zip(numbered(0, 5, 1))
            .all(|(r, o)| same_content(r, &o))
    );
    drop(log);
    assert_exactly_after_crash(&sim, 5);
}

#[test]
fn a_heal_that_fails_keeps_the_latch_and_is_tried_again_one_interval_later() {
    let sim = SimDisk::new(22);
    let clock = Arc::new(ManualClock::new(1_000));
    let log = log_on_clock(&sim, &clock, 3);
    poison_with_a_failed_sync(&sim, &log, 3);
    clock.advance(HEAL_RETRY_MS);
    // The heal's own sync of the cut fails: still poisoned.
    fail_next(&sim, FaultOp::Sync, FaultError::Eio);
    assert_still_poisoned(&log, 3);
    assert!(log.is_poisoned());
    clock.advance(HEAL_RETRY_MS - 1);
    assert_still_poisoned(&log, 3);
    clock.advance(1);
    assert_eq!(commit(&log, &numbered(3, 2, 1)).unwrap(), 3..5);
    drop(log);
    assert_exactly_after_crash(&sim, 5);
}

#[test]
fn a_heal_refuses_a_log_whose_newest_committed_frame_no_longer_reads_back() {
    let sim = SimDisk::new(23);
    let clock = Arc::new(ManualClock::new(1_000));
    let log = log_on_clock(&sim, &clock, 3);
    poison_with_a_failed_sync(&sim, &log, 3);
    // The committed frame's payload is damaged on the disk meanwhile.
    let file = sim
        .open(&dir().join(segment_file_name(0)), OpenOptions::EXISTING)
        .unwrap();
    let data = segment_data(&sim);
    file.write_at(data.len() as u64 - 1, IoBuf::from_slice(&[0xff]))
        .wait()
        .unwrap();
    file.fdatasync().wait().unwrap();
    drop(file);
    clock.advance(HEAL_RETRY_MS);
    assert_still_poisoned(&log, 3);
    assert!(log.is_poisoned(), "a damaged tail is never healed over");
    assert_eq!(log.high_watermark(), 3);
}

#[test]
fn a_failed_undo_poisons_the_log() {
    let sim = SimDisk::new(11);
    let log = log_with(&sim, 2);
    fail_next(&sim, FaultOp::Read, FaultError::Eio);
    fail_next(&sim, FaultOp::Truncate, FaultError::Eio);
    assert!(commit(&log, &numbered(2, 1, 1)).is_err());
    assert!(log.is_poisoned());
    assert_eq!(log.high_watermark(), 2);
    assert_eq!(
        read_records(&log, 0).len(),
        2,
        "the hidden tail is never served"
    );
}

#[test]
fn a_crash_during_close_recovers_the_boundary_from_the_tail() {
    let sim = SimDisk::new(12);
    let log = log_with(&sim, 5);
    fail_next(&sim, FaultOp::Sync, FaultError::Eio);
    assert!(log.close().is_err());
    drop(log);
    assert_exactly_after_crash(&sim, 5);
}

#[test]
fn the_first_commit_after_open_empties_the_hwm_file_durably() {
    let sim = SimDisk::new(13);
    let log = log_with(&sim, 2);
    log.close().unwrap();
    drop(log);
    let log = open(&sim, &LogConfig::default());
    commit(&log, &numbered(2, 3, 1)).unwrap();
    drop(log);
    // A stale hwm of 2 must not hide the three records committed after it.
    sim.crash(Tear::LastWrite);
    assert_eq!(sim.read_file(&dir().join(HWM_FILE_NAME)).unwrap().len(), 0);
    assert_eq!(open(&sim, &LogConfig::default()).high_watermark(), 5);
}

#[test]
fn an_open_without_a_stored_boundary_makes_what_it_serves_durable() {
    let sim = SimDisk::new(14);
    let log = log_with(&sim, 2);
    drop(log);
    // Frames a crashed process wrote but never synced sit in the page cache.
    let extra = numbered(2, 2, 1);
    let extra: Vec<CommitRecord<'_>> = extra.iter().map(Owned::as_commit).collect();
    let frame = frame::encode_frame(
        &extra,
        2,
        Codec::None,
        CompressionLevel::Default,
        FRAME_BYTES_MAX,
    )
    .unwrap();
    let file = sim
        .open(&dir().join(segment_file_name(0)), OpenOptions::EXISTING)
        .unwrap();
    let end = file.size().unwrap();
    file.write_at(end, IoBuf::from_slice(&frame))
        .wait()
        .unwrap();
    drop(file);
    let log = open(&sim, &LogConfig::default());
    assert_eq!(log.high_watermark(), 4);
    drop(log);
    // What it served survives a power cut.
    sim.crash(Tear::None);
    assert_eq!(open(&sim, &LogConfig::default()).high_watermark(), 4);
}

#[test]
fn a_crash_after_a_roll_before_any_write_keeps_the_empty_segment_consistent() {
    let sim = SimDisk::new(15);
    let config = LogConfig {
        segment_bytes: 256,
        ..LogConfig::default()
    };
    let log = open(&sim, &config);
    commit(&log, &numbered(0, 10, 1)).unwrap();
    // The roll happens, then the write fails and the process dies.
    sim.inject(Fault {
        op: FaultOp::Write,
        nth: 0,
        error: FaultError::Eio,
        sticky: true,
    });
    assert!(commit(&log, &numbered(10, 1, 1)).is_err());
    drop(log);
    sim.clear_faults();
    sim.crash(Tear::LastWrite);
    let log = open(&sim, &config);
    assert_eq!(log.high_watermark(), 10);
    assert_eq!(commit(&log, &numbered(10, 2, 1)).unwrap(), 10..12);
    assert_eq!(read_records(&log, 0).len(), 12);
}

#[test]
fn retention_deletions_survive_a_crash() {
    let sim = SimDisk::new(16);
    let config = LogConfig {
        segment_bytes: 256,
        ..LogConfig::default()
    };
    let log = open(&sim, &config);
    for n in 0..10 {
        commit(&log, &numbered(n * 4, 4, 1_000)).unwrap();
    }
    let report = log.sweep_retention(1_000 + 7_200_000, 3_600_000).unwrap();
    assert!(!report.deleted.is_empty());
    let oldest = log.stats().unwrap().oldest_offset;
    drop(log);
    sim.crash(Tear::None);
    let log = open(&sim, &config);
    assert_eq!(log.stats().unwrap().oldest_offset, oldest);
    assert_eq!(log.high_watermark(), 40);
    assert!(
        read_all(&log, oldest)
            .iter()
            .all(|e| matches!(e, ReadEntry::Record(_)))
    );
}

#[test]
fn a_read_error_in_a_sealed_segment_fails_only_the_reads_that_need_it() {
    let sim = SimDisk::new(18);
    let config = LogConfig {
        segment_bytes: 256,
        // Every read goes to the segments.
        tail_cache_bytes: 0,
        ..LogConfig::default()
    };
    let log = forty_records_in_ten_commits(&sim, &config);
    fail_next(&sim, FaultOp::Read, FaultError::Eio);
    assert!(matches!(
        log.read(0, u64::MAX, Default::default()),
        Err(LogError::Io { .. })
    ));
    // The next read works; the active segment was never affected.
    assert_eq!(read_records(&log, 36).len(), 4);
    assert_eq!(read_records(&log, 0).len(), 40);
}

#[test]
fn a_commit_of_many_batches_and_frames_costs_one_write_one_fdatasync_and_one_read() {
    let sim = SimDisk::new(19);
    let config = LogConfig {
        frame_records_max: 2,
        ..LogConfig::default()
    };
    let log = open(&sim, &config);
    commit(&log, &numbered(0, 1, 1)).unwrap();
    let a = numbered(1, 5, 1);
    let b = numbered(6, 4, 1);
    let a: Vec<CommitRecord<'_>> = a.iter().map(Owned::as_commit).collect();
    let b: Vec<CommitRecord<'_>> = b.iter().map(Owned::as_commit).collect();
    // Arm a failure for a second fdatasync: the commit must not reach it.
    sim.inject(Fault {
        op: FaultOp::Sync,
        nth: 1,
        error: FaultError::Eio,
        sticky: false,
    });
    let before = sim.op_count();
    let outcome = log.commit_durable(&[&a, &b]).unwrap();
    assert_eq!(outcome.offsets, 1..10);
    assert_eq!(sim.op_count() - before, 3, "write, fdatasync, read back");
    sim.clear_faults();
}

#[test]
fn reads_at_the_head_are_served_from_memory_with_the_records_on_disk() {
    let sim = SimDisk::new(20);
    let config = LogConfig {
        segment_bytes: 512,
        frame_records_max: 3,
        codec: Codec::Zstd,
        ..LogConfig::default()
    };
    let log = forty_records_in_ten_commits(&sim, &config);
    let before = sim.op_count();
    let cached: Vec<Vec<Record>> = (0..40).map(|from| read_records(&log, from)).collect();
    assert_eq!(sim.op_count(), before, "no read reached the disk");
    drop(log);
    let reopened = open(&sim, &config);
    let before = sim.op_count();
    let from_disk: Vec<Vec<Record>> = (0..40).map(|from| read_records(&reopened, from)).collect();
    assert!(sim.op_count() > before, "a reopened log reads its segments");
    assert_eq!(cached, from_disk);
    assert_eq!(cached[0].len(), 40);
}

#[test]
fn reads_older_than_the_tail_cache_go_to_the_segments() {
    let sim = SimDisk::new(21);
    // Room for exactly the newest two commits of four records.
    let newest_two = numbered(32, 8, 1)
        .iter()
        .map(|o| o.key.len() + o.payload.len() + size_of::<Record>())
        .sum();
    let config = LogConfig {
        tail_cache_bytes: newest_two,
        ..LogConfig::default()
    };
    let log = forty_records_in_ten_commits(&sim, &config);
    let before = sim.op_count();
    assert_eq!(read_records(&log, 32).len(), 8);
    assert_eq!(
        sim.op_count(),
        before,
        "the newest two commits are in memory"
    );
    let all = read_records(&log, 0);
    assert!(
        sim.op_count() > before,
        "older records come from the segment"
    );
    assert_eq!(
        all.iter().map(|r| r.offset).collect::<Vec<_>>(),
        (0..40).collect::<Vec<_>>()
    );
}

#[test]
fn a_read_from_memory_serves_the_tail_cache_and_declines_what_lies_below_it() {
    let sim = SimDisk::new(23);
    let newest_two = numbered(32, 8, 1)
        .iter()
        .map(|o| o.key.len() + o.payload.len() + size_of::<Record>())
        .sum();
    let config = LogConfig {
        tail_cache_bytes: newest_two,
        ..LogConfig::default()
    };
    let log = forty_records_in_ten_commits(&sim, &config);
    let before = sim.op_count();
    let cached = log
        .read_from_memory(32, u64::MAX, ReadLimits::default())
        .expect("the newest two commits are in memory");
    assert_eq!(
        cached,
        log.read(32, u64::MAX, ReadLimits::default()).unwrap()
    );
    assert_eq!(cached.entries.len(), 8);
    let past_the_end = log
        .read_from_memory(40, u64::MAX, ReadLimits::default())
        .expect("nothing to read needs no disk");
    assert!(past_the_end.entries.is_empty());
    assert_eq!(past_the_end.next_offset, 40);
    assert_eq!(
        log.read_from_memory(31, u64::MAX, ReadLimits::default()),
        None,
        "below the cache the read would go to the segment"
    );
    assert_eq!(sim.op_count(), before, "no read touched the disk");
}

/// A log on `sim` holding 2,000 records of about 1 KB, in frames of 10
/// and no tail cache, so every read goes to the segment (of over 1 MiB).
fn two_thousand_kilobyte_records(sim: &SimDisk) -> PartitionLog {
    let config = LogConfig {
        frame_records_max: 10,
        tail_cache_bytes: 0,
        ..LogConfig::default()
    };
    let log = open(sim, &config);
    let body = "b".repeat(1_000);
    for batch in 0..20u64 {
        let records: Vec<Owned> = (0..100)
            .map(|n| Owned::new("", &format!("{}{body}", batch * 100 + n), 1))
            .collect();
        commit(&log, &records).unwrap();
    }
    log
}

#[test]
fn reading_one_record_of_a_large_segment_reads_only_near_it() {
    let sim = SimDisk::new(22);
    let log = two_thousand_kilobyte_records(&sim);
    assert!(
        log.stats().unwrap().size_bytes > 1 << 20,
        "a segment of over 1 MiB"
    );
    let before = sim.op_count();
    let record = log.read_record(10).unwrap();
    assert!(matches!(record, Some(ReadEntry::Record(r)) if r.offset == 10));
    assert_eq!(
        sim.op_count() - before,
        1,
        "one read, with nothing read ahead of a one-record read"
    );
    let before = sim.op_count();
    assert_eq!(read_records(&log, 0).len(), 2_000);
    assert!(sim.op_count() - before > 2, "a long read goes on in chunks");
}

#[test]
fn a_read_that_stops_at_its_record_limit_reads_little_past_it() {
    let sim = SimDisk::new(23);
    let log = two_thousand_kilobyte_records(&sim);
    let file_bytes_per_record = log.stats().unwrap().size_bytes / 2_000;
    let limits = ReadLimits {
        records_max: 100,
        bytes_max: usize::MAX,
    };
    for from in [0, 500, 1_234] {
        let before = sim.bytes_read();
        let batch = log.read(from, u64::MAX, limits).unwrap();
        assert_eq!(batch.entries.len(), 100);
        assert_eq!(batch.next_offset, from + 100);
        let read = sim.bytes_read() - before;
        // The records' own frames, a frame on either side, and the index
        // interval in front: anything more was read ahead for nothing.
        let needed = (100 + 2 * 10) * file_bytes_per_record + 4_096;
        assert!(
            read <= needed,
            "a read of 100 records from {from} read {read} bytes, where {needed} would do"
        );
    }
}

#[test]
fn reads_of_frames_larger_than_a_read_chunk_return_every_record_in_order() {
    let sim = SimDisk::new(24);
    let config = LogConfig {
        frame_payload_bytes_target: 3 << 20,
        frame_records_max: 1_000,
        tail_cache_bytes: 0,
        ..LogConfig::default()
    };
    let log = open(&sim, &config);
    let mut committed = Vec::new();
    // Frames of about 2.5 MiB (25 records of 100 KiB), of a few records,
    // and of one small record, in turn, so reads cross chunk ends inside
    // frames of every size.
    for round in 0..4u64 {
        for (count, size) in [(25u64, 100 << 10), (3, 1_000), (1, 10)] {
            let records: Vec<Owned> = (0..count)
                .map(|n| {
                    let tag = format!("{round}-{count}-{n}:");
                    Owned::new("k", &format!("{tag}{}", "x".repeat(size)), 1)
                })
                .collect();
            commit(&log, &records).unwrap();
            committed.extend(records);
        }
    }
    for records_max in [1, 7, 29, 1_000] {
        let limits = ReadLimits {
            records_max,
            bytes_max: usize::MAX,
        };
        let mut next = 0;
        let mut read = Vec::new();
        while next < committed.len() as u64 {
            let batch = log.read(next, u64::MAX, limits).unwrap();
            assert!(
                !batch.entries.is_empty(),
                "a read below the watermark returns something"
            );
            next = batch.next_offset;
            read.extend(batch.entries.into_iter().map(|entry| match entry {
                ReadEntry::Record(record) => record,
                ReadEntry::Unreadable { offsets } => panic!("unreadable {offsets:?}"),
            }));
        }
        assert_eq!(read.len(), committed.len());
        for (record, owned) in read.iter().zip(&committed) {
            assert!(
                same_content(record, owned),
                "record {} differs (limit {records_max})",
                record.offset
            );
        }
    }
}
