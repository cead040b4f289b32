//! Incarnation markers and quarantine: adopt, serve, quarantine, sweep,
//! crash recovery. The simulated disk cannot rename directories, so every
//! test that quarantines runs on the portable backend in a temporary
//! directory; the marker's own crash safety runs on the simulated disk.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use narad_disk::portable::PortableDisk;
use narad_disk::sim::{Fault, FaultError, FaultOp, SimDisk, Tear};
use narad_disk::{BackendKind, Disk, FileHandle, OpenOptions};
use narad_plog::{CommitRecord, LogConfig, LogError, PartitionLog, ReadEntry, ReadLimits};
use parking_lot::Mutex;
use tempfile::TempDir;

use super::incarnation::{
    DirAction, MARKER_FILE_NAME, Marker, MarkerToken, decide, parse_stale_dir_name,
};
use super::{
    LocalLogs, QuarantineStats, Retirement, SweepReport, TopicDirError, partition_dir, topics_dir,
};
use crate::dispatch::{GoneQuestion, LeaderConfirm};
use crate::metrics::NodeMetrics;
use crate::topology::Destination;

const OLD_ID: &str = "00000000000000a1";
const NEW_ID: &str = "00000000000000b2";
const NEWEST_ID: &str = "00000000000000c3";

fn id(text: &str) -> Arc<str> {
    Arc::from(text)
}

/// Logs on the portable backend under a fresh temporary directory.
fn real_logs() -> (TempDir, Arc<dyn Disk>, LocalLogs) {
    let dir = tempfile::tempdir().expect("temp dir");
    let disk: Arc<dyn Disk> = Arc::new(PortableDisk::new(1).expect("portable disk"));
    let logs = LocalLogs::new(
        Arc::clone(&disk),
        dir.path(),
        LogConfig::default(),
        crate::testing::system_clock(),
    );
    (dir, disk, logs)
}

fn restart(disk: &Arc<dyn Disk>, data_dir: &Path) -> LocalLogs {
    LocalLogs::new(
        Arc::clone(disk),
        data_dir,
        LogConfig::default(),
        crate::testing::system_clock(),
    )
}

fn commit(log: &PartitionLog, payload: &str) {
    let record = CommitRecord::new(b"", payload.as_bytes(), 1);
    log.commit_durable(&[&[record]]).expect("commit");
}

fn payloads(log: &PartitionLog) -> Vec<String> {
    let read = log.read(0, u64::MAX, ReadLimits::default()).expect("read");
    read.entries
        .into_iter()
        .map(|entry| match entry {
            ReadEntry::Record(record) => String::from_utf8(record.payload).expect("utf-8"),
            ReadEntry::Unreadable { .. } => panic!("unreadable record"),
        })
        .collect()
}

fn marker_on_disk(data_dir: &Path, topic: &str) -> Option<String> {
    std::fs::read_to_string(topics_dir(data_dir).join(topic).join(MARKER_FILE_NAME)).ok()
}

fn stale_path(data_dir: &Path, topic: &str, token: &str) -> PathBuf {
    topics_dir(data_dir).join(format!("{topic}.stale-{token}"))
}

/// Records of partition 0 of a quarantined copy, read by opening it as a log.
fn stale_payloads(disk: &Arc<dyn Disk>, stale: &Path) -> Vec<String> {
    let log = PartitionLog::open(
        Arc::clone(disk),
        &stale.join("p00000"),
        LogConfig::default(),
        crate::testing::system_clock(),
    )
    .expect("open the quarantined copy");
    let records = payloads(&log);
    log.close().expect("close");
    records
}

/// A leader that confirms gone exactly the questions it was given, and
/// records what it was asked.
#[derive(Debug, Default)]
struct Leader {
    gone: BTreeSet<GoneQuestion>,
    fail: bool,
    asked: Mutex<Vec<GoneQuestion>>,
}

impl Leader {
    fn confirming(questions: &[(&str, Option<&str>)]) -> Self {
        Self {
            gone: questions
                .iter()
                .map(|(topic, incarnation)| GoneQuestion {
                    topic: Arc::from(*topic),
                    incarnation: incarnation.map(Arc::from),
                })
                .collect(),
            ..Self::default()
        }
    }

    fn unreachable() -> Self {
        Self {
            fail: true,
            ..Self::default()
        }
    }
}

impl LeaderConfirm for Leader {
    fn confirm_gone(&self, question: &GoneQuestion) -> Result<bool, String> {
        self.asked.lock().push(question.clone());
        if self.fail {
            return Err("no leader".into());
        }
        Ok(self.gone.contains(question))
    }
}

/// `orders` served for OLD_ID with one record, then resolved for NEW_ID.
fn replaced_once(logs: &LocalLogs) -> (Arc<PartitionLog>, Arc<PartitionLog>) {
    let destination = Destination::new("orders", 0);
    let old = logs.resolve(&destination, Some(&id(OLD_ID))).expect("old");
    commit(&old, "old record");
    let new = logs.resolve(&destination, Some(&id(NEW_ID))).expect("new");
    (old, new)
}

#[test]
fn a_directory_without_a_marker_is_adopted() {
    let (dir, disk, logs) = real_logs();
    let legacy = PartitionLog::open(
        Arc::clone(&disk),
        &partition_dir(dir.path(), "orders", 0),
        LogConfig::default(),
        crate::testing::system_clock(),
    )
    .expect("open");
    commit(&legacy, "from before markers");
    legacy.close().expect("close");
    let log = logs
        .resolve(&Destination::new("orders", 0), Some(&id(OLD_ID)))
        .expect("resolve");
    assert_eq!(
        marker_on_disk(dir.path(), "orders").as_deref(),
        Some(OLD_ID)
    );
    assert_eq!(payloads(&log), vec!["from before markers"]);
}

#[test]
fn resolving_the_same_incarnation_again_returns_the_open_log() {
    let (_dir, _disk, logs) = real_logs();
    let destination = Destination::new("orders", 0);
    let first = logs
        .resolve(&destination, Some(&id(OLD_ID)))
        .expect("first");
    let second = logs
        .resolve(&destination, Some(&id(OLD_ID)))
        .expect("second");
    assert!(Arc::ptr_eq(&first, &second));
}

#[test]
fn a_matching_marker_serves_the_directory_after_a_restart() {
    let (dir, disk, logs) = real_logs();
    let destination = Destination::new("orders", 0);
    let log = logs
        .resolve(&destination, Some(&id(OLD_ID)))
        .expect("resolve");
    commit(&log, "kept");
    logs.close_all();
    let logs = restart(&disk, dir.path());
    let log = logs
        .resolve(&destination, Some(&id(OLD_ID)))
        .expect("again");
    assert_eq!(payloads(&log), vec!["kept"]);
    assert!(!stale_path(dir.path(), "orders", OLD_ID).exists());
}

#[test]
fn a_different_marker_quarantines_the_directory_and_opens_a_fresh_one() {
    let (dir, disk, logs) = real_logs();
    let (old, new) = replaced_once(&logs);
    assert!(payloads(&new).is_empty(), "the new log starts empty");
    assert!(
        matches!(commit_error(&old), LogError::Closed),
        "the old incarnation's log was closed"
    );
    assert_eq!(
        marker_on_disk(dir.path(), "orders").as_deref(),
        Some(NEW_ID)
    );
    let stale = stale_path(dir.path(), "orders", OLD_ID);
    assert_eq!(
        std::fs::read_to_string(stale.join(MARKER_FILE_NAME))
            .ok()
            .as_deref(),
        Some(OLD_ID)
    );
    logs.close_all();
    assert_eq!(stale_payloads(&disk, &stale), vec!["old record"]);
}

#[test]
fn records_of_the_old_incarnation_are_never_read_through_the_new_log() {
    let (dir, disk, logs) = real_logs();
    let (_, new) = replaced_once(&logs);
    commit(&new, "new record");
    logs.close_all();
    let logs = restart(&disk, dir.path());
    let new = logs
        .resolve(&Destination::new("orders", 0), Some(&id(NEW_ID)))
        .expect("reopen");
    assert_eq!(payloads(&new), vec!["new record"]);
}

#[test]
fn quarantine_closes_every_open_log_of_the_topic() {
    let (_dir, _disk, logs) = real_logs();
    let other = logs
        .resolve(&Destination::new("orders", 1), Some(&id(OLD_ID)))
        .expect("partition 1");
    let (_, _) = replaced_once(&logs);
    assert!(matches!(commit_error(&other), LogError::Closed));
    assert!(logs.get(&Destination::new("orders", 1)).is_none());
}

#[test]
fn a_retired_incarnation_is_refused_and_nothing_moves() {
    let (dir, _disk, logs) = real_logs();
    let (_, new) = replaced_once(&logs);
    commit(&new, "new record");
    let late = logs.resolve(&Destination::new("orders", 1), Some(&id(OLD_ID)));
    assert!(matches!(late, Err(LogError::Inconsistent { .. })));
    assert_eq!(
        marker_on_disk(dir.path(), "orders").as_deref(),
        Some(NEW_ID)
    );
    assert!(!stale_path(dir.path(), "orders", NEW_ID).exists());
    assert_eq!(payloads(&new), vec!["new record"]);
}

#[test]
fn a_topic_without_an_id_never_gets_a_marker() {
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(1));
    let logs = LocalLogs::new(
        Arc::clone(&disk),
        "/node",
        LogConfig::default(),
        crate::testing::system_clock(),
    );
    let destination = Destination::new("legacy", 0);
    let log = logs.resolve(&destination, None).expect("resolve");
    commit(&log, "by name");
    logs.close_all();
    let log = restart(&disk, Path::new("/node"))
        .resolve(&destination, None)
        .expect("again");
    assert_eq!(payloads(&log), vec!["by name"]);
    let marker = Path::new("/node/topics/legacy").join(MARKER_FILE_NAME);
    assert!(!disk.exists(&marker).expect("exists"));
}

#[test]
fn the_sweep_removes_only_confirmed_incarnations() {
    let (dir, _disk, logs) = real_logs();
    let (_, new) = replaced_once(&logs);
    commit(&new, "second incarnation");
    logs.resolve(&Destination::new("orders", 0), Some(&id(NEWEST_ID)))
        .expect("third incarnation");
    let leader = Leader::confirming(&[("orders", Some(OLD_ID))]);
    let report = logs.sweep_quarantine(&leader);
    assert_eq!(
        report,
        SweepReport {
            removed: 1,
            unconfirmed: 1,
            ..SweepReport::default()
        }
    );
    assert_eq!(leader.asked.lock().len(), 2, "one question per copy");
    assert!(!stale_path(dir.path(), "orders", OLD_ID).exists());
    assert!(stale_path(dir.path(), "orders", NEW_ID).exists());
}

#[test]
fn a_failed_confirmation_keeps_the_directory() {
    let (dir, _disk, logs) = real_logs();
    replaced_once(&logs);
    let report = logs.sweep_quarantine(&Leader::unreachable());
    assert_eq!(report.questions_failed, 1);
    assert_eq!(report.removed, 0);
    assert!(stale_path(dir.path(), "orders", OLD_ID).exists());
    assert_eq!(logs.quarantine_stats().expect("stats").copies, 1);
}

#[test]
fn quarantine_stats_count_copies_and_their_bytes() {
    let (dir, _disk, logs) = real_logs();
    replaced_once(&logs);
    logs.close_all();
    let stale = stale_path(dir.path(), "orders", OLD_ID);
    let stats = logs.quarantine_stats().expect("stats");
    assert_eq!((stats.copies, stats.bytes), (1, bytes_under(&stale)));
    assert!(stats.bytes > 16, "marker and segment");
}

#[test]
fn quarantine_stats_describe_each_copy() {
    let (dir, _disk, logs) = real_logs();
    replaced_once(&logs);
    logs.close_all();
    let stale = stale_path(dir.path(), "orders", OLD_ID);
    let kept =
        partition_dir(dir.path(), "orders", 0).with_file_name("p00003.quarantine-1796400000000");
    std::fs::create_dir_all(&kept).expect("partition copy");
    std::fs::write(kept.join("00000000000000000000.log"), [7u8; 300]).expect("segment");
    let stats = logs.quarantine_stats().expect("stats");
    assert_eq!(stats.copies, 2);
    assert_eq!(stats.bytes, bytes_under(&stale) + 300);
    let [topic_copy, partition_copy] = &stats.listed[..] else {
        panic!("two copies listed: {:?}", stats.listed);
    };
    assert_eq!(
        (
            topic_copy.kind,
            topic_copy.topic.as_str(),
            topic_copy.partition
        ),
        ("incarnation", "orders", None)
    );
    assert_eq!(topic_copy.dir, stale);
    assert_eq!(topic_copy.bytes, bytes_under(&stale));
    let changed = std::fs::metadata(&stale)
        .expect("metadata")
        .modified()
        .expect("mtime");
    let changed_ms = changed
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    assert_eq!(u128::from(topic_copy.mod_time_ms), changed_ms);
    assert_eq!(
        (
            partition_copy.kind,
            partition_copy.topic.as_str(),
            partition_copy.partition
        ),
        ("partition", "orders", Some(3))
    );
    assert_eq!(partition_copy.dir, kept);
    assert_eq!(partition_copy.bytes, 300);
    assert_eq!(
        partition_copy.mod_time_ms, 1_796_400_000_000,
        "quarantined then, as its name says"
    );
}

#[test]
fn quarantine_stats_list_at_most_a_hundred_copies_and_count_them_all() {
    let (dir, _disk, logs) = real_logs();
    logs.resolve(&Destination::new("orders", 0), Some(&id(NEW_ID)))
        .expect("live topic");
    let topic_dir = topics_dir(dir.path()).join("orders");
    for n in 0..105u64 {
        std::fs::create_dir_all(topic_dir.join(format!("p00001.quarantine-{n}"))).expect("copy");
    }
    let stats = logs.quarantine_stats().expect("stats");
    assert_eq!(stats.copies, 105);
    assert_eq!(stats.listed.len(), 100);
}

#[test]
fn quarantine_stats_set_both_gauges() {
    let (_dir, _disk, logs) = real_logs();
    replaced_once(&logs);
    let metrics = NodeMetrics::new();
    logs.quarantine_stats().expect("stats").record(&metrics);
    let text = metrics.render();
    assert!(text.contains("narad_quarantined_copies 1"), "{text}");
    assert!(text.contains("narad_quarantined_bytes "), "{text}");
}

#[test]
fn a_live_topic_named_like_a_quarantined_copy_is_never_swept() {
    let (dir, _disk, logs) = real_logs();
    let lookalike = format!("orders.stale-{OLD_ID}");
    let log = logs
        .resolve(&Destination::new(&lookalike, 0), Some(&id(NEW_ID)))
        .expect("resolve");
    commit(&log, "live");
    let leader = Leader::confirming(&[("orders", Some(OLD_ID))]);
    assert_eq!(logs.sweep_quarantine(&leader), SweepReport::default());
    assert!(leader.asked.lock().is_empty());
    assert_eq!(logs.quarantine_stats().expect("stats").copies, 0);
    assert_eq!(
        logs.topic_directories().expect("list"),
        vec![lookalike.clone()]
    );
    assert_eq!(payloads(&log), vec!["live"]);
    assert!(topics_dir(dir.path()).join(&lookalike).exists());
}

#[test]
fn a_stray_file_named_like_a_quarantined_copy_does_not_stop_the_sweep() {
    let (dir, _disk, logs) = real_logs();
    replaced_once(&logs);
    std::fs::write(stale_path(dir.path(), "stray", OLD_ID), b"not a directory").expect("write");
    let report = logs.sweep_quarantine(&Leader::confirming(&[("orders", Some(OLD_ID))]));
    assert_eq!(report.removed, 1);
    assert!(stale_path(dir.path(), "stray", OLD_ID).exists());
}

#[test]
fn a_deleted_topic_is_retired_and_swept_after_confirmation() {
    let (dir, _disk, logs) = real_logs();
    let destination = Destination::new("orders", 0);
    let log = logs
        .resolve(&destination, Some(&id(OLD_ID)))
        .expect("resolve");
    commit(&log, "deleted with the topic");
    let retired = logs.retire_deleted("orders", Some(OLD_ID)).expect("retire");
    let stale = stale_path(dir.path(), "orders", OLD_ID);
    assert_eq!(retired, Retirement::Quarantined(stale.clone()));
    assert!(logs.get(&destination).is_none());
    assert!(logs.topic_directories().expect("list").is_empty());
    let report = logs.sweep_quarantine(&Leader::confirming(&[("orders", Some(OLD_ID))]));
    assert_eq!(report.removed, 1);
    assert!(!stale.exists());
    assert_eq!(
        logs.quarantine_stats().expect("stats"),
        QuarantineStats::default()
    );
}

#[test]
fn retiring_refuses_a_directory_of_another_incarnation() {
    let (dir, _disk, logs) = real_logs();
    let destination = Destination::new("orders", 0);
    let live = logs
        .resolve(&destination, Some(&id(NEW_ID)))
        .expect("recreated");
    let refused = logs.retire_deleted("orders", Some(OLD_ID));
    assert!(matches!(refused, Err(TopicDirError::Refused { .. })));
    assert_eq!(
        marker_on_disk(dir.path(), "orders").as_deref(),
        Some(NEW_ID)
    );
    assert!(!stale_path(dir.path(), "orders", NEW_ID).exists());
    commit(&live, "still served");
}

#[test]
fn a_reconcile_retires_a_directory_by_the_incarnation_its_marker_names() {
    let (dir, disk, logs) = real_logs();
    logs.resolve(&Destination::new("orders", 0), Some(&id(OLD_ID)))
        .expect("resolve");
    logs.close_all();
    let logs = restart(&disk, dir.path());
    let token = logs.directory_incarnation("orders").expect("marker");
    assert_eq!(token, Some(MarkerToken::Id(id(OLD_ID))));
    let retired = logs.retire_deleted("orders", Some(OLD_ID)).expect("retire");
    assert_eq!(
        retired,
        Retirement::Quarantined(stale_path(dir.path(), "orders", OLD_ID))
    );
}

#[test]
fn a_deleted_topic_without_an_id_asks_whether_the_topic_is_gone() {
    let (dir, _disk, logs) = real_logs();
    let log = logs
        .resolve(&Destination::new("legacy", 0), None)
        .expect("resolve");
    commit(&log, "id-less");
    logs.retire_deleted("legacy", None).expect("retire");
    assert!(stale_path(dir.path(), "legacy", "none").exists());
    let leader = Leader::confirming(&[("legacy", None)]);
    assert_eq!(logs.sweep_quarantine(&leader).removed, 1);
    assert_eq!(
        *leader.asked.lock(),
        vec![GoneQuestion {
            topic: Arc::from("legacy"),
            incarnation: None
        }]
    );
}

#[test]
fn crash_before_the_quarantine_rename_recovers_on_the_next_resolve() {
    let (dir, disk, logs) = real_logs();
    let destination = Destination::new("orders", 0);
    let old = logs.resolve(&destination, Some(&id(OLD_ID))).expect("old");
    commit(&old, "old record");
    // The process dies with the old directory and its marker in place;
    // whether its logs were closed first does not matter to recovery.
    drop(old);
    drop(logs);
    let logs = restart(&disk, dir.path());
    let new = logs.resolve(&destination, Some(&id(NEW_ID))).expect("new");
    assert!(payloads(&new).is_empty());
    let stale = stale_path(dir.path(), "orders", OLD_ID);
    assert_eq!(stale_payloads(&disk, &stale), vec!["old record"]);
}

#[test]
fn crash_after_the_quarantine_rename_recovers_with_a_fresh_directory() {
    let (dir, disk, logs) = real_logs();
    let destination = Destination::new("orders", 0);
    let old = logs.resolve(&destination, Some(&id(OLD_ID))).expect("old");
    commit(&old, "old record");
    logs.close_all();
    // The rename is one atomic step: after it, the crash left the copy and
    // no topic directory at all.
    let stale = stale_path(dir.path(), "orders", OLD_ID);
    std::fs::rename(topics_dir(dir.path()).join("orders"), &stale).expect("rename");
    let logs = restart(&disk, dir.path());
    let new = logs.resolve(&destination, Some(&id(NEW_ID))).expect("new");
    assert!(payloads(&new).is_empty());
    assert_eq!(
        marker_on_disk(dir.path(), "orders").as_deref(),
        Some(NEW_ID)
    );
    assert_eq!(stale_payloads(&disk, &stale), vec!["old record"]);
    assert!(
        logs.resolve(&Destination::new("orders", 1), Some(&id(OLD_ID)))
            .is_err(),
        "a quarantined copy on disk retires its incarnation after a restart too"
    );
}

/// A disk whose process stops after `left` more namespace operations:
/// every later one fails, as nothing more would happen after a crash. The
/// real file system keeps what the completed steps did, which is what a
/// process crash leaves (a power cut may also revert an unsynced rename,
/// which leaves the state of the step before, covered by the same loop).
#[derive(Debug)]
struct StopAfter {
    inner: Arc<dyn Disk>,
    left: AtomicU64,
}

impl StopAfter {
    fn step(&self) -> io::Result<()> {
        self.left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            })
            .map(|_| ())
            .map_err(|_| io::Error::other("the process stopped here"))
    }
}

impl Disk for StopAfter {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<FileHandle> {
        self.step()?;
        self.inner.open(path, options)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.step()?;
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.step()?;
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.step()?;
        self.inner.exists(path)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.step()?;
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.step()?;
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.step()?;
        self.inner.sync_dir(path)
    }
}

#[test]
fn a_crash_at_any_step_of_a_quarantine_recovers_on_the_next_resolve() {
    let destination = Destination::new("orders", 0);
    let mut completed = false;
    for stop_after in 0..64 {
        let (dir, disk, logs) = real_logs();
        let old = logs.resolve(&destination, Some(&id(OLD_ID))).expect("old");
        commit(&old, "old record");
        logs.close_all();
        let stopping: Arc<dyn Disk> = Arc::new(StopAfter {
            inner: Arc::clone(&disk),
            left: AtomicU64::new(stop_after),
        });
        let crashed = restart(&stopping, dir.path());
        completed = crashed.resolve(&destination, Some(&id(NEW_ID))).is_ok();
        drop(crashed);
        let logs = restart(&disk, dir.path());
        let new = logs
            .resolve(&destination, Some(&id(NEW_ID)))
            .unwrap_or_else(|error| panic!("stopped after {stop_after} steps: {error}"));
        assert!(
            payloads(&new).is_empty(),
            "stopped after {stop_after} steps"
        );
        assert_eq!(
            marker_on_disk(dir.path(), "orders").as_deref(),
            Some(NEW_ID)
        );
        logs.close_all();
        let stale = stale_path(dir.path(), "orders", OLD_ID);
        assert_eq!(stale_payloads(&disk, &stale), vec!["old record"]);
        if completed {
            break;
        }
    }
    assert!(completed, "the loop reached a resolve that ran every step");
}

#[test]
fn a_crash_while_stamping_leaves_the_marker_absent_or_whole() {
    let destination = Destination::new("orders", 0);
    let marker = Path::new("/node/topics/orders").join(MARKER_FILE_NAME);
    let segment = partition_dir(Path::new("/node"), "orders", 0).join(format!("{:020}.log", 0));
    for fail_at in 0..12 {
        let sim = SimDisk::new(fail_at);
        let disk: Arc<dyn Disk> = Arc::new(sim.clone());
        sim.inject(Fault {
            op: FaultOp::Any,
            nth: fail_at,
            error: FaultError::Eio,
            sticky: true,
        });
        let logs = LocalLogs::new(
            Arc::clone(&disk),
            "/node",
            LogConfig::default(),
            crate::testing::system_clock(),
        );
        let _ = logs.resolve(&destination, Some(&id(OLD_ID)));
        drop(logs);
        sim.crash(Tear::LastWrite);
        sim.clear_faults();
        let left = sim.read_file(&marker);
        assert!(
            left.is_none() || left.as_deref() == Some(OLD_ID.as_bytes()),
            "fault at op {fail_at} left the marker {left:?}"
        );
        if sim.read_file(&segment).is_some() {
            assert!(
                left.is_some(),
                "fault at op {fail_at}: a log opened before its marker"
            );
        }
        let logs = LocalLogs::new(
            Arc::clone(&disk),
            "/node",
            LogConfig::default(),
            crate::testing::system_clock(),
        );
        logs.resolve(&destination, Some(&id(OLD_ID)))
            .expect("recovers");
        assert_eq!(sim.read_file(&marker).as_deref(), Some(OLD_ID.as_bytes()));
    }
}

#[test]
fn decide_serves_stamps_quarantines_and_refuses() {
    let holds = |text: &str| Marker::Holds(MarkerToken::parse(text).expect("token"));
    assert_eq!(decide(&holds(OLD_ID), OLD_ID, false), DirAction::Serve);
    assert_eq!(decide(&Marker::Missing, OLD_ID, false), DirAction::Stamp);
    assert_eq!(
        decide(&holds("none"), OLD_ID, false),
        DirAction::Quarantine(MarkerToken::NoId)
    );
    assert!(matches!(
        decide(&Marker::Unreadable("x".into()), OLD_ID, false),
        DirAction::Refuse(_)
    ));
    assert!(matches!(
        decide(&holds(OLD_ID), OLD_ID, true),
        DirAction::Refuse(_)
    ));
}

#[test]
fn a_quarantined_name_splits_at_its_last_infix() {
    let name = format!("a.stale-{OLD_ID}.stale-{NEW_ID}");
    let (topic, token) = parse_stale_dir_name(&name).expect("parses");
    assert_eq!(topic, format!("a.stale-{OLD_ID}"));
    assert_eq!(token, MarkerToken::Id(id(NEW_ID)));
    assert!(parse_stale_dir_name("a.stale-notanid").is_none());
    assert!(parse_stale_dir_name(&format!(".stale-{OLD_ID}")).is_none());
}

fn commit_error(log: &PartitionLog) -> LogError {
    let record = CommitRecord::new(b"", b"late", 1);
    log.commit_durable(&[&[record]])
        .expect_err("commit must fail")
}

fn bytes_under(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .expect("read dir")
        .map(|entry| entry.expect("entry").path())
        .map(|path| {
            if path.is_dir() {
                bytes_under(&path)
            } else {
                std::fs::metadata(&path).expect("metadata").len()
            }
        })
        .sum()
}
