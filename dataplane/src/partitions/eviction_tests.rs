//! Idle log eviction: a log nobody holds and nobody asked for within the
//! idle time is closed, and opened again on its next use with its records.

use std::sync::Arc;
use std::time::Duration;

use narad_clock::ManualClock;
use narad_disk::Disk;
use narad_disk::portable::PortableDisk;
use narad_plog::{CommitRecord, LogConfig, ReadLimits};
use tempfile::TempDir;

use super::LocalLogs;
use crate::topology::Destination;

const IDLE: Duration = Duration::from_secs(1800);

/// Logs on the portable backend whose idle clock moves only when the test
/// moves it.
fn logs() -> (TempDir, Arc<ManualClock>, LocalLogs) {
    let dir = tempfile::tempdir().expect("temp dir");
    let disk: Arc<dyn Disk> = Arc::new(PortableDisk::new(1).expect("portable disk"));
    let clock = Arc::new(ManualClock::new(0));
    let logs = LocalLogs::new(disk, dir.path(), LogConfig::default(), clock.clone());
    (dir, clock, logs)
}

fn advance(clock: &ManualClock, by: Duration) {
    clock.advance(u64::try_from(by.as_millis()).expect("ms"));
}

fn commit_one(logs: &LocalLogs, destination: &Destination, payload: &str) {
    let log = logs.resolve(destination, None).expect("open");
    let record = CommitRecord::new(b"", payload.as_bytes(), 1);
    log.commit_durable(&[&[record]]).expect("commit");
}

#[test]
fn a_log_unused_for_the_idle_time_is_closed_and_reopens_with_its_records() {
    let (_dir, clock, logs) = logs();
    let destination = Destination::new("orders", 0);
    commit_one(&logs, &destination, "one");
    let watched = Arc::downgrade(&logs.get(&destination).expect("open"));

    advance(&clock, IDLE + Duration::from_secs(1));
    assert_eq!(logs.evict_idle(IDLE), vec![destination.clone()]);
    assert_eq!(logs.open_count(), 0);
    assert!(logs.get(&destination).is_none());
    assert!(watched.upgrade().is_none(), "the evicted log is dropped");

    commit_one(&logs, &destination, "two");
    let log = logs.get(&destination).expect("reopened");
    let read = log.read(0, u64::MAX, ReadLimits::default()).expect("read");
    assert_eq!(read.entries.len(), 2, "the reopened log holds both records");
}

#[test]
fn a_log_used_within_the_idle_time_stays_open() {
    let (_dir, clock, logs) = logs();
    let destination = Destination::new("orders", 0);
    commit_one(&logs, &destination, "one");

    advance(&clock, IDLE - Duration::from_secs(60));
    assert!(logs.evict_idle(IDLE).is_empty());
    assert_eq!(logs.open_count(), 1);
}

#[test]
fn a_use_moves_the_idle_clock() {
    let (_dir, clock, logs) = logs();
    let old = Destination::new("orders", 0);
    let fresh = Destination::new("orders", 1);
    commit_one(&logs, &old, "one");
    commit_one(&logs, &fresh, "one");
    // Only `fresh` is used again, a while after both opened.
    advance(&clock, Duration::from_millis(50));
    let _ = logs.current(&fresh, None).expect("open");

    let evicted = logs.evict_idle(Duration::from_millis(30));
    assert_eq!(evicted, vec![old]);
    assert!(logs.get(&fresh).is_some());
}

#[test]
fn a_log_held_elsewhere_is_never_evicted() {
    let (_dir, clock, logs) = logs();
    let destination = Destination::new("orders", 0);
    let held = logs.resolve(&destination, None).expect("open");

    advance(&clock, IDLE * 10);
    assert!(
        logs.evict_idle(IDLE).is_empty(),
        "a holder (a consume shard, a cursor, a read) keeps the log open"
    );
    assert!(Arc::ptr_eq(&held, &logs.get(&destination).expect("open")));

    drop(held);
    assert_eq!(logs.evict_idle(IDLE).len(), 1);
}

#[test]
fn an_evicted_log_is_closed_cleanly() {
    let (dir, clock, logs) = logs();
    let destination = Destination::new("orders", 0);
    commit_one(&logs, &destination, "one");
    // A clean close, and only that, leaves the high-watermark file behind.
    let hwm = super::partition_dir(dir.path(), "orders", 0).join("hwm");
    assert!(!hwm.exists(), "an open log has no {}", hwm.display());
    advance(&clock, IDLE * 2);
    assert_eq!(logs.evict_idle(IDLE).len(), 1);
    assert!(hwm.exists(), "closing writes {}", hwm.display());
}

#[test]
fn a_look_at_a_log_is_not_a_use() {
    let (_dir, clock, logs) = logs();
    let looked_at = Destination::new("orders", 0);
    let used = Destination::new("orders", 1);
    commit_one(&logs, &looked_at, "one");
    commit_one(&logs, &used, "one");
    advance(&clock, IDLE * 2);
    assert_eq!(logs.evict_idle(IDLE).len(), 2);

    // Describe opens a closed log: it is closed again at the next pass,
    // however recent the look.
    drop(
        logs.resolve_to_look(&looked_at, None)
            .expect("open to look"),
    );
    drop(logs.resolve(&used, None).expect("open to use"));
    assert_eq!(logs.evict_idle(IDLE), vec![looked_at.clone()]);

    // A look at an open log does not move its idle clock either.
    commit_one(&logs, &looked_at, "two");
    advance(&clock, Duration::from_millis(50));
    drop(logs.resolve_to_look(&looked_at, None).expect("look"));
    let evicted = logs.evict_idle(Duration::from_millis(30));
    assert!(evicted.contains(&looked_at), "{evicted:?}");
}
