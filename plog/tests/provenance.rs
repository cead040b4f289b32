//! A record sent twice is stored once: origins and idempotency keys, within
//! one commit, across commits, across a reopen and across a crash.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{read_records, small_config};
use narad_clock::{Clock, SystemClock};
use narad_disk::Disk;
use narad_disk::sim::{SimDisk, Tear};
use narad_plog::{CommitOutcome, CommitRecord, LogConfig, ORIGIN_ID_BYTES, Origin, PartitionLog};

const DIR: &str = "/p0";

/// The clock the logs measure their durations on.
fn clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock::new())
}

fn open(disk: Arc<dyn Disk>) -> PartitionLog {
    PartitionLog::open(disk, Path::new(DIR), small_config(), clock()).unwrap()
}

fn origin(id: u8, seq: u64, floor: u64) -> Option<Origin> {
    Some(Origin {
        id: [id; ORIGIN_ID_BYTES],
        seq,
        floor,
    })
}

/// Records `seqs` of origin `id` (floor 0), each payload naming its seq.
fn from_origin(id: u8, seqs: std::ops::Range<u64>) -> Vec<(Option<Origin>, Vec<u8>)> {
    seqs.map(|seq| (origin(id, seq, 0), format!("o{id}-s{seq}").into_bytes()))
        .collect()
}

fn commit(log: &PartitionLog, records: &[(Option<Origin>, Vec<u8>)]) -> CommitOutcome {
    let batch: Vec<CommitRecord<'_>> = records
        .iter()
        .map(|(origin, payload)| CommitRecord {
            origin: *origin,
            ..CommitRecord::new(b"", payload, 1_000)
        })
        .collect();
    log.commit_durable(&[&batch]).unwrap()
}

fn commit_keyed(log: &PartitionLog, key: &[u8], payload: &[u8], at_ms: u64) -> CommitOutcome {
    let record = CommitRecord {
        idempotency_key: key,
        ..CommitRecord::new(b"", payload, at_ms)
    };
    log.commit_durable(&[&[record]]).unwrap()
}

fn payloads(log: &PartitionLog) -> Vec<String> {
    read_records(log, 0)
        .into_iter()
        .map(|record| String::from_utf8(record.payload).unwrap())
        .collect()
}

#[test]
fn a_resent_origin_is_acknowledged_without_being_stored_again() {
    let sim = SimDisk::new(1);
    let log = open(Arc::new(sim.clone()));
    let first = commit(&log, &from_origin(1, 0..5));
    assert_eq!(first.batch_offsets, vec![0..5]);
    assert_eq!(first.batch_already_stored, vec![0]);
    // A retry of records 3 and 4 with three new ones.
    let again = commit(&log, &from_origin(1, 3..8));
    assert_eq!(again.batch_offsets, vec![5..8]);
    assert_eq!(again.batch_already_stored, vec![2]);
    // The same sequences from another origin are other records.
    let other = commit(&log, &from_origin(2, 0..2));
    assert_eq!(other.batch_already_stored, vec![0]);
    let stored = payloads(&log);
    assert_eq!(stored.len(), 10);
    assert_eq!(stored[5..8], ["o1-s5", "o1-s6", "o1-s7"]);
}

#[test]
fn the_same_origin_twice_in_one_run_is_stored_once() {
    let sim = SimDisk::new(2);
    let log = open(Arc::new(sim.clone()));
    let records = from_origin(1, 0..3);
    let batch: Vec<CommitRecord<'_>> = records
        .iter()
        .map(|(origin, payload)| CommitRecord {
            origin: *origin,
            ..CommitRecord::new(b"", payload, 1)
        })
        .collect();
    let outcome = log.commit_durable(&[&batch, &batch[1..]]).unwrap();
    assert_eq!(outcome.batch_offsets, vec![0..3, 3..3]);
    assert_eq!(outcome.batch_already_stored, vec![0, 2]);
}

#[test]
fn a_whole_run_already_stored_does_no_io() {
    let sim = SimDisk::new(3);
    let log = open(Arc::new(sim.clone()));
    commit(&log, &from_origin(1, 0..4));
    let again = commit(&log, &from_origin(1, 0..4));
    assert_eq!(again.sync_duration, None);
    assert_eq!(again.batch_offsets, vec![4..4]);
    assert_eq!(log.high_watermark(), 4);
}

#[test]
fn provenance_is_read_back_with_the_record() {
    let sim = SimDisk::new(4);
    let log = open(Arc::new(sim.clone()));
    let record = CommitRecord {
        origin: origin(9, 77, 70),
        idempotency_key: b"req-1",
        ..CommitRecord::new(b"k", b"p", 5)
    };
    log.commit_durable(&[&[record, CommitRecord::new(b"", b"plain", 5)]])
        .unwrap();
    let read = read_records(&log, 0);
    assert_eq!(read[0].origin, origin(9, 77, 70));
    assert_eq!(read[0].idempotency_key, b"req-1");
    assert_eq!(read[1].origin, None);
    assert!(read[1].idempotency_key.is_empty());
}

#[test]
fn the_memory_is_rebuilt_from_the_log_after_a_reopen_and_after_a_crash() {
    let sim = SimDisk::new(5);
    {
        let log = open(Arc::new(sim.clone()));
        // Across several segments of the small configuration.
        for chunk in 0..10 {
            commit(&log, &from_origin(1, chunk * 10..chunk * 10 + 10));
        }
        log.close().unwrap();
    }
    {
        let log = open(Arc::new(sim.clone()));
        assert_eq!(log.provenance_memory(), None);
        let again = commit(&log, &from_origin(1, 0..100));
        assert_eq!(again.batch_already_stored, vec![100]);
        commit(&log, &from_origin(1, 100..110));
        // No close: the crash keeps what was synced.
    }
    sim.crash(Tear::LastWrite);
    let log = open(Arc::new(sim.clone()));
    let again = commit(&log, &from_origin(1, 95..115));
    assert_eq!(again.batch_already_stored, vec![15]);
    assert_eq!(again.batch_offsets, vec![110..115]);
    let mut stored = payloads(&log);
    let total = stored.len();
    stored.sort();
    stored.dedup();
    assert_eq!(stored.len(), total, "no payload is stored twice");
    assert_eq!(total, 115);
}

/// Commits 200 records of origin 1 (sequences 0 to 199), closes, and
/// opens the log again under `config`.
fn reopened_with_history(sim: &SimDisk, config: &LogConfig) -> PartitionLog {
    {
        let log = PartitionLog::open(
            Arc::new(sim.clone()),
            Path::new(DIR),
            config.clone(),
            clock(),
        )
        .unwrap();
        for chunk in 0..20 {
            commit(&log, &from_origin(1, chunk * 10..chunk * 10 + 10));
        }
        log.close().unwrap();
    }
    PartitionLog::open(
        Arc::new(sim.clone()),
        Path::new(DIR),
        config.clone(),
        clock(),
    )
    .unwrap()
}

/// After a reopen under `config`, a re-send of the newest ten records is
/// recognised and one of the oldest ten is stored again: they lie beyond
/// the rebuild's byte bound.
fn remembers_the_newest_records_only(seed: u64, config: &LogConfig) {
    let sim = SimDisk::new(seed);
    let log = reopened_with_history(&sim, config);
    let recent = commit(&log, &from_origin(1, 190..200));
    assert_eq!(recent.batch_already_stored, vec![10]);
    let old = commit(&log, &from_origin(1, 0..10));
    assert_eq!(old.batch_already_stored, vec![0]);
}

#[test]
fn the_rebuild_reads_the_sealed_segments_holding_the_newest_bytes_only() {
    let config = LogConfig {
        provenance_rebuild_bytes: 4_096,
        ..small_config()
    };
    remembers_the_newest_records_only(8, &config);
}

#[test]
fn the_rebuild_starts_inside_an_active_segment_larger_than_the_bound() {
    let config = LogConfig {
        segment_bytes: 1 << 20,
        provenance_rebuild_bytes: 2_048,
        ..small_config()
    };
    remembers_the_newest_records_only(9, &config);
}

#[test]
fn a_floor_bounds_the_memory_of_an_origin() {
    let sim = SimDisk::new(6);
    let log = open(Arc::new(sim.clone()));
    commit(&log, &from_origin(1, 0..50));
    assert_eq!(log.provenance_memory(), Some((1, 0)));
    let advanced: Vec<_> = (50..52)
        .map(|seq| (origin(1, seq, 49), format!("s{seq}").into_bytes()))
        .collect();
    commit(&log, &advanced);
    // Sequences 49, 50 and 51 are remembered; 0 to 48 are forgotten, and
    // the floor's promise is that they are never sent again.
    let retry = commit(&log, &[(origin(1, 49, 49), b"x".to_vec())]);
    assert_eq!(retry.batch_already_stored, vec![1]);
}

#[test]
fn an_idempotency_key_is_stored_once_within_the_window_and_again_after_it() {
    let sim = SimDisk::new(7);
    let log = open(Arc::new(sim.clone()));
    log.set_idempotency_window_ms(60_000);
    assert_eq!(
        commit_keyed(&log, b"order-1", b"a", 1_000).batch_already_stored,
        vec![0]
    );
    assert_eq!(
        commit_keyed(&log, b"order-1", b"b", 60_999).batch_already_stored,
        vec![1]
    );
    assert_eq!(
        commit_keyed(&log, b"order-2", b"c", 61_000).batch_already_stored,
        vec![0]
    );
    // Past the window, measured from the stored copy's commit time.
    assert_eq!(
        commit_keyed(&log, b"order-1", b"d", 61_000).batch_already_stored,
        vec![0]
    );
    assert_eq!(payloads(&log), ["a", "c", "d"]);
    log.close().unwrap();
    let log = open(Arc::new(sim.clone()));
    log.set_idempotency_window_ms(60_000);
    assert_eq!(
        commit_keyed(&log, b"order-2", b"e", 62_000).batch_already_stored,
        vec![1]
    );
}

#[test]
fn records_without_provenance_are_never_left_out() {
    let sim = SimDisk::new(8);
    let log = PartitionLog::open(
        Arc::new(sim.clone()),
        Path::new(DIR),
        LogConfig::default(),
        clock(),
    )
    .unwrap();
    commit(&log, &from_origin(1, 0..3));
    let plain = CommitRecord::new(b"", b"o1-s0", 1_000);
    let outcome = log.commit_durable(&[&[plain, plain]]).unwrap();
    assert_eq!(outcome.batch_already_stored, vec![0]);
    assert_eq!(outcome.batch_offsets, vec![3..5]);
}
