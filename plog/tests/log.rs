//! The partition log on the portable backend, in temporary directories.

// Helpers outside `#[test]` functions panic on failure like the tests do.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::thread;

use common::{Owned, commit, numbered, read_all, read_records, same_content, small_config};
use narad_disk::Disk;
use narad_disk::portable::PortableDisk;
use narad_plog::frame::{self, FRAME_BYTES_MAX};
use narad_plog::segment::segment_file_name;
use narad_plog::{
    Codec, CommitRecord, CompressionLevel, HWM_FILE_NAME, LogConfig, LogError, PartitionLog,
    ReadEntry, ReadLimits,
};

fn disk() -> Arc<dyn Disk> {
    Arc::new(PortableDisk::new(2).unwrap())
}

fn open(dir: &Path, config: LogConfig) -> PartitionLog {
    PartitionLog::open(
        disk(),
        dir,
        config,
        Arc::new(narad_clock::SystemClock::new()),
    )
    .unwrap()
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".log"))
        .collect();
    names.sort();
    names
}

#[test]
fn commits_take_contiguous_offsets_and_read_back_identically() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    let first = numbered(0, 5, 100);
    let second = numbered(5, 3, 100);
    assert_eq!(commit(&log, &first).unwrap(), 0..5);
    assert_eq!(commit(&log, &second).unwrap(), 5..8);
    assert_eq!(log.high_watermark(), 8);
    let records = read_records(&log, 0);
    let all: Vec<Owned> = first.into_iter().chain(second).collect();
    assert_eq!(records.len(), 8);
    for (offset, (record, owned)) in records.iter().zip(&all).enumerate() {
        assert_eq!(record.offset, offset as u64);
        assert!(same_content(record, owned));
    }
}

#[test]
fn many_batches_commit_as_one_run_with_offsets_per_batch() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    let a = numbered(0, 2, 1);
    let b = numbered(2, 3, 1);
    let a: Vec<CommitRecord<'_>> = a.iter().map(Owned::as_commit).collect();
    let b: Vec<CommitRecord<'_>> = b.iter().map(Owned::as_commit).collect();
    let outcome = log.commit_durable(&[&a, &[], &b]).unwrap();
    assert_eq!(outcome.offsets, 0..5);
    assert_eq!(outcome.batch_offsets, vec![0..2, 2..2, 2..5]);
    assert_eq!(outcome.high_watermark, 5);
}

#[test]
fn an_empty_commit_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    let outcome = log.commit_durable(&[]).unwrap();
    assert_eq!(outcome.offsets, 0..0);
    assert_eq!(log.high_watermark(), 0);
}

#[test]
fn commit_times_never_go_backwards() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    commit(&log, &[Owned::new("a", "1", 500)]).unwrap();
    let outcome_early = commit(
        &log,
        &[
            Owned::new("b", "2", 200),
            Owned::new("c", "3", 700),
            Owned::new("d", "4", 600),
        ],
    )
    .unwrap();
    assert_eq!(outcome_early, 1..4);
    let times: Vec<u64> = read_records(&log, 0)
        .iter()
        .map(|r| r.committed_at_ms)
        .collect();
    assert_eq!(times, vec![500, 500, 700, 700]);
}

#[test]
fn commit_times_stay_monotonic_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    commit(&log, &[Owned::new("a", "1", 900)]).unwrap();
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), LogConfig::default());
    commit(&log, &[Owned::new("b", "2", 100)]).unwrap();
    assert_eq!(read_records(&log, 1)[0].committed_at_ms, 900);
}

#[test]
fn reads_never_pass_the_high_watermark_or_the_range_end() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    commit(&log, &numbered(0, 10, 1)).unwrap();
    let batch = log.read(3, 6, ReadLimits::default()).unwrap();
    assert_eq!(batch.entries.len(), 3);
    assert_eq!(batch.next_offset, 6);
    let beyond = log.read(10, u64::MAX, ReadLimits::default()).unwrap();
    assert!(beyond.entries.is_empty());
    assert_eq!(beyond.next_offset, 10);
    assert_eq!(log.read_record(10).unwrap(), None);
}

#[test]
fn reads_respect_record_and_byte_limits() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    commit(&log, &numbered(0, 10, 1)).unwrap();
    let by_count = log
        .read(
            0,
            u64::MAX,
            ReadLimits {
                records_max: 4,
                bytes_max: usize::MAX,
            },
        )
        .unwrap();
    assert_eq!((by_count.entries.len(), by_count.next_offset), (4, 4));
    let by_bytes = log
        .read(
            0,
            u64::MAX,
            ReadLimits {
                records_max: 100,
                bytes_max: 1,
            },
        )
        .unwrap();
    assert_eq!((by_bytes.entries.len(), by_bytes.next_offset), (1, 1));
}

#[test]
fn index_lookups_find_every_offset_across_segments_and_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    let mut all = Vec::new();
    for round in 0..60u64 {
        let batch = numbered(all.len() as u64, 1 + round % 5, round);
        commit(&log, &batch).unwrap();
        all.extend(batch);
    }
    assert!(
        segment_files(dir.path()).len() > 3,
        "the test must span segments"
    );
    let check = |log: &PartitionLog| {
        for (offset, owned) in all.iter().enumerate() {
            match log.read_record(offset as u64).unwrap() {
                Some(ReadEntry::Record(record)) => {
                    assert_eq!(record.offset, offset as u64);
                    assert!(same_content(&record, owned), "offset {offset}");
                }
                other => panic!("offset {offset}: {other:?}"),
            }
        }
        // Reading from every offset to the end crosses every boundary.
        for from in 0..all.len() as u64 {
            assert_eq!(
                read_records(log, from).len() as u64,
                all.len() as u64 - from
            );
        }
    };
    check(&log);
    log.close().unwrap();
    drop(log);
    // Sealed segment indexes are rebuilt from the files.
    check(&open(dir.path(), small_config()));
}

#[test]
fn segments_are_named_by_their_first_offset_and_roll_lazily() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    let big = vec![Owned::new("k", &"p".repeat(600), 1); 4];
    commit(&log, &big).unwrap();
    // The commit filled the segment past its size, but it is still active.
    assert_eq!(segment_files(dir.path()), vec![segment_file_name(0)]);
    commit(&log, &numbered(4, 1, 1)).unwrap();
    assert_eq!(
        segment_files(dir.path()),
        vec![segment_file_name(0), segment_file_name(4)]
    );
}

#[test]
fn zstd_frames_round_trip_through_the_log() {
    let dir = tempfile::tempdir().unwrap();
    for level in [
        CompressionLevel::Fastest,
        CompressionLevel::Default,
        CompressionLevel::Better,
        CompressionLevel::Best,
    ] {
        let path = dir.path().join(format!("{level:?}"));
        let config = LogConfig {
            codec: Codec::Zstd,
            compression_level: level,
            ..LogConfig::default()
        };
        let log = open(&path, config.clone());
        let records = numbered(0, 300, 1);
        commit(&log, &records).unwrap();
        // Closing cuts the zeros prepared after the commit.
        log.close().unwrap();
        let size = fs::metadata(path.join(segment_file_name(0))).unwrap().len();
        let raw: usize = records.iter().map(|r| r.payload.len() + r.key.len()).sum();
        assert!(
            size < raw as u64 / 2,
            "zstd should shrink JSON-like records: {size} vs {raw}"
        );
        log.close().unwrap();
        drop(log);
        let log = open(&path, config);
        let read = read_records(&log, 0);
        assert!(read.iter().zip(&records).all(|(r, o)| same_content(r, o)));
        assert_eq!(read.len(), 300);
    }
}

#[test]
fn close_writes_the_hwm_file_and_the_first_commit_empties_it() {
    let dir = tempfile::tempdir().unwrap();
    let hwm = dir.path().join(HWM_FILE_NAME);
    let log = open(dir.path(), LogConfig::default());
    commit(&log, &numbered(0, 3, 1)).unwrap();
    assert!(!hwm.exists());
    log.close().unwrap();
    assert_eq!(fs::read(&hwm).unwrap(), 3u64.to_be_bytes());
    drop(log);
    let log = open(dir.path(), LogConfig::default());
    assert_eq!(log.high_watermark(), 3);
    assert_eq!(fs::read(&hwm).unwrap().len(), 8, "open alone leaves it");
    commit(&log, &numbered(3, 1, 1)).unwrap();
    assert_eq!(fs::read(&hwm).unwrap().len(), 0);
}

#[test]
fn commits_after_close_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    log.close().unwrap();
    assert!(matches!(
        commit(&log, &numbered(0, 1, 1)),
        Err(LogError::Closed)
    ));
}

#[test]
fn reopen_without_close_recovers_the_boundary_from_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    for n in 0..12 {
        commit(&log, &numbered(n * 3, 3, 1)).unwrap();
    }
    drop(log);
    let log = open(dir.path(), small_config());
    assert_eq!(log.high_watermark(), 36);
    assert_eq!(read_records(&log, 0).len(), 36);
}

#[test]
fn a_torn_tail_is_truncated_at_open() {
    let dir = tempfile::tempdir().unwrap();
    // Appended commits: a tear leaves a prefix of the last one.
    let appended = LogConfig {
        prepare_bytes: 0,
        ..LogConfig::default()
    };
    let log = open(dir.path(), appended);
    commit(&log, &numbered(0, 4, 1)).unwrap();
    drop(log);
    let segment = dir.path().join(segment_file_name(0));
    let good_len = fs::metadata(&segment).unwrap().len();
    // Half of a further frame: what a crash mid-write leaves.
    let next: Vec<Owned> = numbered(4, 2, 1);
    let next: Vec<CommitRecord<'_>> = next.iter().map(Owned::as_commit).collect();
    let torn = frame::encode_frame(
        &next,
        4,
        Codec::None,
        CompressionLevel::Default,
        FRAME_BYTES_MAX,
    )
    .unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap()
        .write_all(&torn[..torn.len() / 2])
        .unwrap();
    let log = open(dir.path(), LogConfig::default());
    assert_eq!(log.high_watermark(), 4);
    assert_eq!(fs::metadata(&segment).unwrap().len(), good_len);
    assert_eq!(commit(&log, &numbered(4, 1, 1)).unwrap(), 4..5);
}

/// A crash can tear a commit written into prepared zeros anywhere: a
/// sector of it still zeros, later frames of it whole. Those frames were
/// never acknowledged; recovery cuts at the hole instead of serving them
/// behind a gap.
#[test]
fn a_torn_overwrite_is_cut_at_the_hole_it_left() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        frame_records_max: 2,
        prepare_bytes: narad_plog::PREPARE_BYTES,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config.clone());
    commit(&log, &numbered(0, 4, 1)).unwrap();
    let hole_at = log.stats().unwrap().size_bytes;
    commit(&log, &numbered(4, 6, 1)).unwrap();
    let end = log.stats().unwrap().size_bytes;
    // What the power cut left: the process is gone without a close.
    drop(log);
    let segment = dir.path().join(segment_file_name(0));
    let mut bytes = fs::read(&segment).unwrap();
    assert!(
        bytes.len() as u64 >= end + 4_096,
        "zeros prepared after the commit"
    );
    // The first 40 bytes of the second commit never reached the disk.
    bytes[hole_at as usize..hole_at as usize + 40].fill(0);
    fs::write(&segment, &bytes).unwrap();
    let log = open(dir.path(), config);
    assert_eq!(log.high_watermark(), 4, "cut at the hole");
    assert_eq!(read_records(&log, 0).len(), 4);
    assert_eq!(commit(&log, &numbered(4, 1, 1)).unwrap(), 4..5);
}

#[test]
fn corruption_under_later_frames_becomes_a_permanent_gap() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    commit(&log, &numbered(0, 2, 1)).unwrap();
    let frame_start = log.stats().unwrap().size_bytes;
    commit(&log, &numbered(2, 3, 1)).unwrap();
    commit(&log, &numbered(5, 2, 1)).unwrap();
    // Closed, so the segment ends in its data: damage there can only be
    // corruption (contrast a_torn_overwrite_is_cut_at_the_hole_it_left).
    log.close().unwrap();
    drop(log);
    let segment = dir.path().join(segment_file_name(0));
    let mut bytes = fs::read(&segment).unwrap();
    bytes[frame_start as usize + 40] ^= 0xff;
    fs::write(&segment, &bytes).unwrap();
    let log = open(dir.path(), LogConfig::default());
    assert_eq!(log.high_watermark(), 7);
    let entries = read_all(&log, 0);
    assert_eq!(entries.len(), 5);
    assert_eq!(entries[2], ReadEntry::Unreadable { offsets: 2..5 });
    assert!(matches!(&entries[3], ReadEntry::Record(r) if r.offset == 5));
    // Reading from inside the gap reports the rest of it.
    assert_eq!(
        log.read_record(3).unwrap(),
        Some(ReadEntry::Unreadable { offsets: 3..4 })
    );
    assert_eq!(commit(&log, &numbered(7, 1, 1)).unwrap(), 7..8);
}

#[test]
fn damage_in_a_sealed_segment_is_reported_unreadable_at_read_time() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    let mut committed = 0u64;
    while segment_files(dir.path()).len() < 3 {
        commit(&log, &numbered(committed, 4, 1)).unwrap();
        committed += 4;
    }
    log.close().unwrap();
    drop(log);
    // Damage the last frame of the first (sealed) segment.
    let first = dir.path().join(segment_file_name(0));
    let mut bytes = fs::read(&first).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x55;
    fs::write(&first, &bytes).unwrap();
    let log = open(dir.path(), small_config());
    assert_eq!(
        log.high_watermark(),
        committed,
        "sealed segments are trusted by name at open"
    );
    let entries = read_all(&log, 0);
    let unreadable: Vec<_> = entries
        .iter()
        .filter_map(|e| match e {
            ReadEntry::Unreadable { offsets } => Some(offsets.clone()),
            ReadEntry::Record(_) => None,
        })
        .collect();
    assert_eq!(unreadable.len(), 1);
    let second_base: u64 = segment_files(dir.path())[1][..20].parse().unwrap();
    assert_eq!(
        unreadable[0].end, second_base,
        "the damaged frame ran to the segment's end"
    );
    let served: u64 = entries
        .iter()
        .map(|e| match e {
            ReadEntry::Record(_) => 1,
            ReadEntry::Unreadable { offsets } => offsets.end - offsets.start,
        })
        .sum();
    assert_eq!(
        served, committed,
        "every offset is accounted for exactly once"
    );
}

#[test]
fn a_hidden_tail_above_the_stored_high_watermark_is_dropped_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    commit(&log, &numbered(0, 3, 1)).unwrap();
    log.close().unwrap();
    drop(log);
    // A valid frame above the stored boundary, as a poisoned log leaves.
    let extra = numbered(3, 2, 1);
    let extra: Vec<CommitRecord<'_>> = extra.iter().map(Owned::as_commit).collect();
    let frame = frame::encode_frame(
        &extra,
        3,
        Codec::None,
        CompressionLevel::Default,
        FRAME_BYTES_MAX,
    )
    .unwrap();
    let segment = dir.path().join(segment_file_name(0));
    fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap()
        .write_all(&frame)
        .unwrap();
    let log = open(dir.path(), LogConfig::default());
    assert_eq!(log.high_watermark(), 3);
    assert_eq!(commit(&log, &numbered(100, 1, 1)).unwrap(), 3..4);
    assert_eq!(read_records(&log, 3)[0].key, b"key-100");
}

#[test]
fn oversized_records_and_commits_are_refused_with_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        frame_bytes_max: 1_024,
        frame_payload_bytes_target: 1_024,
        commit_bytes_max: 4_096,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config);
    let huge = vec![Owned::new("k", &"x".repeat(2_000), 1)];
    assert!(matches!(
        commit(&log, &huge),
        Err(LogError::RecordTooLarge { .. })
    ));
    let many = vec![Owned::new("k", &"x".repeat(500), 1); 10];
    assert!(matches!(
        commit(&log, &many),
        Err(LogError::CommitTooLarge { .. })
    ));
    assert_eq!(
        fs::metadata(dir.path().join(segment_file_name(0)))
            .unwrap()
            .len(),
        0
    );
    assert_eq!(commit(&log, &numbered(0, 1, 1)).unwrap(), 0..1);
}

#[test]
fn stats_describe_the_partition() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    let mut committed = 0u64;
    for round in 0..20u64 {
        commit(&log, &numbered(committed, 3, 1_000 + round)).unwrap();
        committed += 3;
    }
    let stats = log.stats().unwrap();
    let files = segment_files(dir.path());
    assert_eq!(stats.segments, files.len());
    assert_eq!(stats.oldest_offset, 0);
    assert_eq!(stats.next_offset, committed);
    assert_eq!(stats.high_watermark, committed);
    // The active segment's prepared zeros are not data; close cuts them.
    log.close().unwrap();
    let on_disk: u64 = files
        .iter()
        .map(|f| fs::metadata(dir.path().join(f)).unwrap().len())
        .sum();
    assert_eq!(stats.size_bytes, on_disk);
    let second_base: u64 = files[1][..20].parse().unwrap();
    // The oldest segment's newest record was committed in round (second_base / 3 - 1).
    assert_eq!(
        stats.oldest_segment_time_ms,
        Some(1_000 + second_base / 3 - 1)
    );
}

#[test]
fn a_reopened_log_reads_its_sealed_segment_and_knows_its_last_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut committed = 0u64;
    {
        let log = open(dir.path(), small_config());
        for round in 0..20u64 {
            commit(&log, &numbered(committed, 3, 1_000 + round)).unwrap();
            committed += 3;
        }
        log.close().unwrap();
    }
    let files = segment_files(dir.path());
    let second_base: u64 = files[1][..20].parse().unwrap();
    let log = open(dir.path(), small_config());
    // The first read of the sealed segment rebuilds its index, and with it
    // the time of its newest record, from the frames it walks.
    let batch = log.read(0, second_base, ReadLimits::default()).unwrap();
    assert_eq!(batch.entries.len() as u64, second_base);
    assert_eq!(batch.next_offset, second_base);
    assert_eq!(
        log.stats().unwrap().oldest_segment_time_ms,
        Some(1_000 + second_base / 3 - 1)
    );
}

#[test]
fn retention_deletes_expired_sealed_segments_and_reads_below_report_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    let hour = 3_600_000;
    let mut committed = 0u64;
    for round in 0..20u64 {
        commit(&log, &numbered(committed, 3, round * hour)).unwrap();
        committed += 3;
    }
    let before = segment_files(dir.path());
    let report = log.sweep_retention(25 * hour, 10 * hour).unwrap();
    assert!(!report.deleted.is_empty());
    let after = segment_files(dir.path());
    assert_eq!(after.len(), before.len() - report.deleted.len());
    let oldest = log.stats().unwrap().oldest_offset;
    assert!(
        matches!(log.read(0, u64::MAX, ReadLimits::default()), Err(LogError::OffsetTrimmed { oldest: o, .. }) if o == oldest)
    );
    // Everything left is readable, and every kept segment is young enough.
    let records = read_records(&log, oldest);
    assert_eq!(records.len() as u64, committed - oldest);
    assert_eq!(oldest, after[0][..20].parse::<u64>().unwrap());
    assert_eq!(report.deleted_messages, oldest);
    // The newest deleted record was older than the retention.
    assert!((oldest - 1) / 3 * hour < 15 * hour);
}

#[test]
fn retention_seals_and_deletes_an_idle_expired_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    commit(&log, &numbered(0, 5, 1_000)).unwrap();
    let report = log.sweep_retention(1_000 + 7_200_000, 3_600_000).unwrap();
    assert_eq!(report.deleted, vec![0]);
    assert_eq!(report.deleted_messages, 5);
    assert_eq!(segment_files(dir.path()), vec![segment_file_name(5)]);
    assert_eq!(log.high_watermark(), 5);
    assert_eq!(commit(&log, &numbered(5, 1, 9_000_000)).unwrap(), 5..6);
}

#[test]
fn a_closed_log_is_not_swept() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    for n in 0..10 {
        commit(&log, &numbered(n * 3, 3, 0)).unwrap();
    }
    log.close().unwrap();
    let before = segment_files(dir.path());
    // Its directory may already hold another copy under the same names.
    let report = log.sweep_retention(10 * 3_600_000, 3_600_000).unwrap();
    assert_eq!(report, narad_plog::SweepReport::default());
    assert_eq!(segment_files(dir.path()), before);
}

#[test]
fn retention_zero_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    for n in 0..10 {
        commit(&log, &numbered(n * 3, 3, 0)).unwrap();
    }
    let report = log.sweep_retention(u64::MAX, 0).unwrap();
    assert_eq!(report, narad_plog::SweepReport::default());
}

#[test]
fn the_active_segment_rolls_by_age_before_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        roll_age_ms: 1_000,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config);
    commit(&log, &numbered(0, 2, 10_000)).unwrap();
    commit(&log, &numbered(2, 2, 10_500)).unwrap();
    assert_eq!(segment_files(dir.path()).len(), 1);
    commit(&log, &numbered(4, 2, 11_001)).unwrap();
    assert_eq!(
        segment_files(dir.path()),
        vec![segment_file_name(0), segment_file_name(4)]
    );
}

#[test]
fn the_high_watermark_watch_wakes_on_commit_and_ends_on_close() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open(dir.path(), LogConfig::default()));
    let mut watch = log.watch_high_watermark();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let committer = {
        let log = Arc::clone(&log);
        thread::spawn(move || commit(&log, &numbered(0, 3, 1)).unwrap())
    };
    assert_eq!(runtime.block_on(watch.wait_beyond(1)).unwrap(), 3);
    committer.join().unwrap();
    log.close().unwrap();
    assert!(matches!(
        runtime.block_on(watch.wait_beyond(10)),
        Err(LogError::Closed)
    ));
}

#[test]
fn concurrent_readers_see_only_whole_commits_below_the_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open(dir.path(), small_config()));
    let writer = {
        let log = Arc::clone(&log);
        thread::spawn(move || {
            for n in 0..40u64 {
                commit(&log, &numbered(n * 4, 4, n)).unwrap();
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                let mut seen = 0u64;
                while seen < 160 {
                    let records = read_records(&log, 0);
                    assert_eq!(
                        records.len() % 4,
                        0,
                        "a commit is visible whole or not at all"
                    );
                    for (offset, record) in records.iter().enumerate() {
                        assert_eq!(record.key, format!("key-{offset}").into_bytes());
                    }
                    seen = records.len() as u64;
                }
            })
        })
        .collect();
    writer.join().unwrap();
    for reader in readers {
        reader.join().unwrap();
    }
}

#[test]
fn reads_stay_consistent_while_commits_and_retention_run_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open(dir.path(), small_config()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let log = Arc::clone(&log);
        let done = Arc::clone(&done);
        thread::spawn(move || {
            for n in 0..60u64 {
                commit(&log, &numbered(n * 4, 4, n)).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let reaper = {
        let log = Arc::clone(&log);
        let done = Arc::clone(&done);
        thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                // Everything but the last few milliseconds of commit time.
                let newest = log.high_watermark() / 4;
                log.sweep_retention(newest, 5).unwrap();
            }
        })
    };
    let reader = {
        let log = Arc::clone(&log);
        let done = Arc::clone(&done);
        thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let oldest = log.stats().unwrap().oldest_offset;
                match log.read(oldest, u64::MAX, ReadLimits::default()) {
                    Ok(batch) => {
                        for (index, entry) in batch.entries.iter().enumerate() {
                            let ReadEntry::Record(record) = entry else {
                                panic!("unreadable entry {entry:?}");
                            };
                            assert_eq!(record.offset, oldest + index as u64);
                            assert_eq!(record.key, format!("key-{}", record.offset).into_bytes());
                        }
                    }
                    // Retention moved past `oldest` between the two calls.
                    Err(LogError::OffsetTrimmed { .. }) => {}
                    Err(error) => panic!("read failed: {error}"),
                }
            }
        })
    };
    writer.join().unwrap();
    reaper.join().unwrap();
    reader.join().unwrap();
    assert_eq!(log.high_watermark(), 240);
    // However the threads interleaved, a last sweep leaves a known state.
    log.sweep_retention(60, 5).unwrap();
    let oldest = log.stats().unwrap().oldest_offset;
    assert!(oldest > 0, "retention deleted something");
    assert_eq!(read_records(&log, oldest).len() as u64, 240 - oldest);
}

/// Copies the listed bytes of every segment of `from` into `to`.
fn copy_listed(from: &Path, to: &Path, listing: &narad_plog::TransferListing) {
    fs::create_dir_all(to).unwrap();
    for segment in &listing.segments {
        let bytes = fs::read(from.join(&segment.file_name)).unwrap();
        let listed = usize::try_from(segment.bytes).unwrap();
        fs::write(to.join(&segment.file_name), &bytes[..listed]).unwrap();
    }
}

#[test]
fn a_copy_of_the_listed_bytes_opens_to_the_listed_high_watermark() {
    let source_dir = tempfile::tempdir().unwrap();
    let copy_dir = tempfile::tempdir().unwrap();
    let log = open(source_dir.path(), small_config());
    let records = numbered(0, 200, 1_000);
    for chunk in records.chunks(7) {
        commit(&log, chunk).unwrap();
    }
    let listing = log.transfer_listing();
    assert_eq!(listing.high_watermark, 200);
    assert!(
        listing.segments.len() > 2,
        "the small config rolls segments"
    );
    assert_eq!(
        listing
            .segments
            .iter()
            .map(|s| s.file_name.clone())
            .collect::<Vec<_>>(),
        segment_files(source_dir.path())
    );
    // A later commit does not change what the listing promised.
    commit(&log, &numbered(200, 5, 1_000)).unwrap();
    copy_listed(source_dir.path(), copy_dir.path(), &listing);
    let copy = open(copy_dir.path(), small_config());
    assert_eq!(copy.high_watermark(), 200);
    assert_eq!(
        read_records(&copy, 0),
        read_records(&log, 0)[..200].to_vec()
    );
}

#[test]
fn a_commits_sync_duration_is_measured_on_the_logs_clock() {
    let dir = tempfile::tempdir().unwrap();
    // A clock that never moves: however long the fdatasync really took,
    // the log saw none of it pass.
    let clock = Arc::new(narad_clock::ManualClock::new(5_000));
    let log = PartitionLog::open(disk(), dir.path(), LogConfig::default(), clock).unwrap();
    let records = [CommitRecord::new(b"k", b"v", 1)];
    let outcome = log.commit_durable(&[&records]).unwrap();
    assert_eq!(outcome.sync_duration, Some(std::time::Duration::ZERO));
}

/// Commits of two logs on one io_uring disk, from threads of their own,
/// until at least one went to the ring beside another's
/// (`write_and_sync_gathered`): every commit is acknowledged once, and
/// both logs read back everything after a reopen.
#[test]
fn commits_of_two_logs_submitted_together_are_all_stored() {
    let disk = match narad_disk::uring::UringDisk::new(1) {
        Ok(disk) => disk,
        Err(error) => {
            eprintln!("SKIPPED: io_uring is unavailable here: {error}");
            return;
        }
    };
    let shared: Arc<dyn Disk> = Arc::new(disk.clone());
    let root = tempfile::tempdir().unwrap();
    let dirs = [root.path().join("parent"), root.path().join("child")];
    let clock = || Arc::new(narad_clock::SystemClock::new());
    let logs: Vec<PartitionLog> = dirs
        .iter()
        .map(|dir| PartitionLog::open(Arc::clone(&shared), dir, small_config(), clock()).unwrap())
        .collect();
    let committed: Vec<Vec<Owned>> = thread::scope(|scope| {
        let handles: Vec<_> = logs
            .iter()
            .map(|log| {
                let disk = &disk;
                scope.spawn(move || {
                    let mut stored = Vec::new();
                    // A commit syncs for tens of µs at least, so two threads
                    // overlap within a few commits; 5,000 bounds the wait.
                    for round in 0..5_000u64 {
                        if round >= 20 && disk.gathered_syncs() > 0 {
                            break;
                        }
                        let batch = numbered(stored.len() as u64, 3, 1);
                        let offsets = commit(log, &batch).unwrap();
                        assert_eq!(offsets.start, stored.len() as u64);
                        stored.extend(batch);
                    }
                    stored
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        disk.gathered_syncs() > 0,
        "no commit overlapped another's sync"
    );
    for log in logs {
        log.close().unwrap();
    }
    for (dir, stored) in dirs.iter().zip(committed) {
        let log = PartitionLog::open(Arc::clone(&shared), dir, small_config(), clock()).unwrap();
        let records = read_records(&log, 0);
        assert_eq!(records.len(), stored.len());
        assert!(records.iter().zip(&stored).all(|(r, o)| same_content(r, o)));
    }
}
