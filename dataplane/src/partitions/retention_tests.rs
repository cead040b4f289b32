//! The retention loop over real partition logs on the simulated disk and a
//! metadata replica.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use narad_clock::ManualClock;
use narad_disk::Disk;
use narad_disk::portable::PortableDisk;
use narad_disk::sim::SimDisk;
use narad_meta::{Actor, AlterTopic, Command, DeleteTopic};
use narad_plog::{CommitRecord, LogConfig};

use super::{
    PassReport, Retention, RetentionConfig, RetentionParts, cold_walk_due, evict_idle, pass,
    pass_until,
};
use crate::metadata::MetadataReplica;
use crate::metrics::NodeMetrics;
use crate::partitions::LocalLogs;
use crate::testing::{LOCAL_NODE, apply, create_command, place, register};
use crate::topology::Destination;

const HOUR_MS: u64 = 3_600_000;
/// When the test's first records were committed (Unix ms).
const T0: u64 = 1_000;
/// How long the thread test waits for a pass: a ceiling that turns a
/// loop that never runs into a failure, not a timing assertion.
const PASS_CEILING: Duration = Duration::from_secs(30);

/// Topic `orders` (incarnation 0xa1) with `retention_ms`, and `forever`
/// (0xb2) that keeps everything, each of one partition on this node.
fn replica(retention_ms: u64) -> Arc<MetadataReplica> {
    let replica = Arc::new(MetadataReplica::new(LOCAL_NODE));
    register(&replica, LOCAL_NODE);
    let mut orders = create_command("orders", 0xa1, 3);
    orders.retention_ms = Some(i64::try_from(retention_ms).expect("retention"));
    place(&replica, orders, LOCAL_NODE);
    let mut forever = create_command("forever", 0xb2, 3);
    forever.retention_ms = Some(0);
    place(&replica, forever, LOCAL_NODE);
    replica
}

/// The retention loop's parts on the simulated disk, which keeps no
/// modification times.
fn parts(replica: Arc<MetadataReplica>) -> RetentionParts {
    parts_on(Arc::new(SimDisk::new(7)), Path::new("/node"), replica)
}

fn parts_on(disk: Arc<dyn Disk>, data_dir: &Path, replica: Arc<MetadataReplica>) -> RetentionParts {
    // Small segments, so a few commits make several.
    let config = LogConfig {
        segment_bytes: 4_096,
        ..LogConfig::default()
    };
    RetentionParts {
        logs: Arc::new(LocalLogs::new(
            disk,
            data_dir,
            config,
            crate::testing::system_clock(),
        )),
        replica,
        metrics: Arc::new(NodeMetrics::new()),
        holders: None,
    }
}

fn close(parts: &RetentionParts, topic: &str) {
    assert!(parts.logs.close_partition(&Destination::new(topic, 0)));
}

/// Commits `count` records of 1 KiB to partition 0 of `topic`, stamped
/// `at_ms`; returns the high watermark.
fn commit(parts: &RetentionParts, topic: &str, count: usize, at_ms: u64) -> u64 {
    let meta = parts.replica.topic_meta(topic).expect("topic");
    let log = parts
        .logs
        .resolve(&Destination::new(topic, 0), meta.incarnation_id.as_ref())
        .expect("open log");
    let payload = vec![b'x'; 1_024];
    for _ in 0..count {
        let record = [CommitRecord::new(b"", &payload, at_ms)];
        log.commit_durable(&[&record]).expect("commit");
    }
    log.high_watermark()
}

fn oldest_offset(parts: &RetentionParts, topic: &str) -> u64 {
    parts
        .logs
        .get(&Destination::new(topic, 0))
        .expect("open log")
        .stats()
        .expect("stats")
        .oldest_offset
}

/// The value of counter `name` for partition 0 of `topic` on `/metrics`.
fn counter(parts: &RetentionParts, name: &str, topic: &str) -> Option<u64> {
    series_value(
        parts,
        &format!("{name}{{topic=\"{topic}\",partition=\"0\",reason=\"age\"}}"),
    )
}

/// The value of `series` (a name and its labels) on `/metrics`.
fn series_value(parts: &RetentionParts, series: &str) -> Option<u64> {
    let prefix = format!("{series} ");
    parts.metrics.render().lines().find_map(|line| {
        line.strip_prefix(&prefix)
            .map(|value| value.parse().expect("a counter value"))
    })
}

#[test]
fn a_pass_deletes_what_each_topics_retention_expired_and_counts_it() {
    let parts = parts(replica(HOUR_MS));
    let old = commit(&parts, "orders", 12, T0);
    commit(&parts, "orders", 3, T0 + 2 * HOUR_MS);
    commit(&parts, "forever", 12, T0);

    let report = pass(&parts, T0 + 2 * HOUR_MS + 1, false);

    let oldest = oldest_offset(&parts, "orders");
    assert!(report.deleted_segments > 0, "{report:?}");
    assert_eq!(report.deleted_messages, oldest);
    assert!(oldest > 0, "nothing old was deleted");
    assert!(
        oldest <= old,
        "a young record was deleted: oldest {oldest}, old {old}"
    );
    assert_eq!(report.swept, 1, "the topic kept forever is not swept");
    assert_eq!(oldest_offset(&parts, "forever"), 0);
    assert_eq!(
        counter(
            &parts,
            "narad_storage_retention_messages_deleted_total",
            "orders"
        ),
        Some(oldest)
    );
    assert_eq!(
        counter(
            &parts,
            "narad_storage_retention_bytes_deleted_total",
            "orders"
        ),
        Some(report.deleted_bytes)
    );
    assert!(report.deleted_bytes > 0);
    assert_eq!(
        counter(
            &parts,
            "narad_storage_retention_messages_deleted_total",
            "forever"
        ),
        Some(0),
        "a log the pass saw is served at zero"
    );
}

#[test]
fn a_retention_lowered_by_an_alter_applies_at_the_next_pass() {
    let parts = parts(replica(7 * 24 * HOUR_MS));
    let committed = commit(&parts, "orders", 12, T0);
    let now = T0 + 2 * HOUR_MS;
    assert_eq!(pass(&parts, now, false).deleted_segments, 0);

    let mut alter = AlterTopic::named(Actor::SecurityOff, "orders", None);
    alter.retention_ms = Some(i64::try_from(HOUR_MS).expect("an hour"));
    apply(&parts.replica, Command::AlterTopic(alter));
    let report = pass(&parts, now, false);

    // Every record is past the hour, and the idle active segment is sealed
    // and goes too.
    assert_eq!(report.deleted_messages, committed);
    assert_eq!(oldest_offset(&parts, "orders"), committed);
}

#[test]
fn the_roll_age_follows_the_topics_retention() {
    let parts = parts(replica(HOUR_MS));
    commit(&parts, "orders", 1, T0);
    let log = parts
        .logs
        .get(&Destination::new("orders", 0))
        .expect("open log");
    let segments = || log.stats().expect("stats").segments;
    let before = segments();
    // A pass just before the hour is up deletes nothing but sets the roll
    // age, so the next commit past the hour starts a new segment.
    assert_eq!(pass(&parts, T0 + HOUR_MS, false).deleted_segments, 0);
    commit(&parts, "orders", 1, T0 + HOUR_MS + 1);
    assert_eq!(segments(), before + 1);
}

#[test]
fn a_log_of_a_replaced_incarnation_is_left_to_the_housekeeping() {
    let parts = parts(replica(HOUR_MS));
    commit(&parts, "orders", 12, T0);
    apply(
        &parts.replica,
        Command::DeleteTopic(DeleteTopic {
            actor: Actor::SecurityOff,
            name: "orders".into(),
            expected_id: None,
        }),
    );
    let mut again = create_command("orders", 0xc3, 3);
    again.retention_ms = Some(i64::try_from(HOUR_MS).expect("an hour"));
    place(&parts.replica, again, LOCAL_NODE);

    let report = pass(&parts, T0 + 10 * HOUR_MS, true);

    assert_eq!(report.swept, 0);
    assert_eq!(oldest_offset(&parts, "orders"), 0);
}

#[test]
fn the_thread_sweeps_every_interval_until_stopped() {
    let parts = parts(replica(HOUR_MS));
    // Stamped in 1970: long past an hour on the system clock.
    commit(&parts, "orders", 12, T0);
    let logs = Arc::clone(&parts.logs);
    let metrics = Arc::clone(&parts.metrics);
    let config = RetentionConfig {
        check_interval: Duration::from_millis(10),
        cold_walk: None,
        idle_eviction: None,
    };
    let retention = Retention::spawn(parts, config).expect("spawn");
    let started = Instant::now();
    let destination = Destination::new("orders", 0);
    let oldest = || {
        logs.get(&destination)
            .expect("open log")
            .stats()
            .expect("stats")
            .oldest_offset
    };
    while oldest() == 0 {
        assert!(started.elapsed() < PASS_CEILING, "no pass deleted anything");
        std::thread::sleep(Duration::from_millis(5));
    }
    retention.stop();
    assert!(
        metrics
            .render()
            .contains("narad_storage_retention_run_duration_seconds_count")
    );
}

#[test]
fn the_thread_closes_a_log_nobody_used_for_the_idle_time() {
    let parts = parts(replica(HOUR_MS));
    commit(&parts, "forever", 3, T0);
    let logs = Arc::clone(&parts.logs);
    let metrics = Arc::clone(&parts.metrics);
    let config = RetentionConfig {
        check_interval: Duration::from_millis(10),
        cold_walk: None,
        idle_eviction: Some(Duration::from_millis(20)),
    };
    let retention = Retention::spawn(parts, config).expect("spawn");
    let started = Instant::now();
    while logs.open_count() > 0 {
        assert!(started.elapsed() < PASS_CEILING, "the idle log stayed open");
        std::thread::sleep(Duration::from_millis(5));
    }
    retention.stop();
    assert!(
        metrics.render().contains("narad_idle_logs_evicted_total 1"),
        "{}",
        metrics.render()
    );
}

#[test]
fn eviction_counts_what_it_closed_and_leaves_a_held_log() {
    let clock = Arc::new(ManualClock::new(0));
    let mut parts = parts(replica(HOUR_MS));
    parts.logs = Arc::new(LocalLogs::new(
        Arc::new(SimDisk::new(7)),
        "/node",
        LogConfig::default(),
        clock.clone(),
    ));
    commit(&parts, "orders", 3, T0);
    commit(&parts, "forever", 3, T0);
    let meta = parts.replica.topic_meta("orders").expect("topic");
    let held = parts
        .logs
        .resolve(&Destination::new("orders", 0), meta.incarnation_id.as_ref())
        .expect("open");
    clock.advance(HOUR_MS);

    assert_eq!(evict_idle(&parts, Duration::from_secs(1800)), 1);
    assert!(parts.logs.get(&Destination::new("forever", 0)).is_none());
    assert!(parts.logs.get(&Destination::new("orders", 0)).is_some());
    assert_eq!(
        series_value(&parts, "narad_idle_logs_evicted_total"),
        Some(1)
    );

    // The held log reopens nothing and loses nothing once let go.
    drop(held);
    assert_eq!(evict_idle(&parts, Duration::from_secs(1800)), 1);
    assert_eq!(
        series_value(&parts, "narad_idle_logs_evicted_total"),
        Some(2)
    );
    assert_eq!(
        commit(&parts, "orders", 1, T0),
        4,
        "reopened with its records"
    );
}

#[test]
fn an_empty_node_passes_without_sweeping() {
    let parts = parts(replica(HOUR_MS));
    assert_eq!(pass(&parts, T0, true), PassReport::default());
}

#[test]
fn the_cold_walk_opens_an_owned_closed_partition_and_the_pass_sweeps_it() {
    let parts = parts(replica(HOUR_MS));
    let committed = commit(&parts, "orders", 12, T0);
    commit(&parts, "forever", 12, T0);
    close(&parts, "orders");
    close(&parts, "forever");
    let now = T0 + 2 * HOUR_MS;

    assert_eq!(pass(&parts, now, false), PassReport::default());
    let report = pass(&parts, now, true);

    // The simulated disk keeps no modification times: every closed
    // partition with a segment and a retention is opened.
    assert_eq!(report.opened_cold, 1, "{report:?}");
    assert_eq!(report.deleted_messages, committed);
    assert!(parts.logs.get(&Destination::new("forever", 0)).is_none());
    assert!(parts.logs.get(&Destination::new("orders", 1)).is_none());
    assert_eq!(
        series_value(&parts, "narad_cold_retention_swept_total"),
        Some(1)
    );
    // Swept, it is closed again by the eviction after the pass, however
    // long the idle time.
    assert_eq!(evict_idle(&parts, Duration::from_secs(1800)), 1);
    assert!(parts.logs.get(&Destination::new("orders", 0)).is_none());
}

#[test]
fn the_cold_walk_opens_only_a_partition_whose_oldest_segment_was_modified_before_the_retention() {
    let dir = tempfile::tempdir().expect("temp dir");
    let disk: Arc<dyn Disk> = Arc::new(PortableDisk::new(1).expect("portable disk"));
    let parts = parts_on(disk, dir.path(), replica(HOUR_MS));
    // Stamped in 1970, written now: the file's time decides.
    let committed = commit(&parts, "orders", 12, T0);
    close(&parts, "orders");
    let now = parts.logs.clock().unix_ms();

    assert_eq!(pass(&parts, now, true).opened_cold, 0);
    assert!(parts.logs.get(&Destination::new("orders", 0)).is_none());

    let report = pass(&parts, now + 2 * HOUR_MS, true);
    assert_eq!(report.opened_cold, 1);
    assert_eq!(report.deleted_messages, committed);
}

#[test]
fn the_cold_walk_waits_for_a_caught_up_replica() {
    let parts = parts(replica(HOUR_MS));
    commit(&parts, "orders", 12, T0);
    close(&parts, "orders");
    parts.replica.set_leader_commit_index(u64::MAX);

    let report = pass(&parts, T0 + 2 * HOUR_MS, true);

    assert_eq!(report.opened_cold, 0);
    assert_eq!(report.deleted_messages, 0);
}

#[test]
fn the_cold_walk_leaves_a_partition_another_node_owns() {
    let parts = parts(replica(HOUR_MS));
    // A copy left here by a partition that moved away.
    let mut moved = create_command("moved", 0xe5, 3);
    moved.retention_ms = Some(i64::try_from(HOUR_MS).expect("an hour"));
    place(&parts.replica, moved, LOCAL_NODE + 1);
    commit(&parts, "moved", 12, T0);
    close(&parts, "moved");

    let report = pass(&parts, T0 + 2 * HOUR_MS, true);

    assert_eq!(report.opened_cold, 0);
    assert!(parts.logs.get(&Destination::new("moved", 0)).is_none());
}

#[test]
fn a_stopping_thread_ends_its_pass_between_two_logs() {
    let parts = parts(replica(HOUR_MS));
    commit(&parts, "orders", 12, T0);
    commit(&parts, "forever", 12, T0);
    close(&parts, "forever");

    let report = pass_until(&parts, T0 + 2 * HOUR_MS, true, &|| true);

    assert_eq!(report.swept, 0);
    assert_eq!(report.opened_cold, 0);
    assert_eq!(oldest_offset(&parts, "orders"), 0);
}

#[test]
fn a_cold_walk_is_due_at_the_first_pass_then_once_per_interval() {
    let config = RetentionConfig {
        check_interval: Duration::from_secs(60),
        cold_walk: Some(Duration::from_secs(300)),
        idle_eviction: None,
    };
    assert!(cold_walk_due(&config, None, 60_000), "the first pass walks");
    assert!(!cold_walk_due(&config, Some(60_000), 359_999));
    assert!(cold_walk_due(&config, Some(60_000), 360_000));
    let never = RetentionConfig {
        cold_walk: None,
        ..config
    };
    assert!(!cold_walk_due(&never, None, 60_000), "walks switched off");
}

#[test]
fn a_panicking_loop_is_restarted_and_each_restart_counted() {
    let runs = std::cell::Cell::new(0u32);
    let counted = std::cell::RefCell::new(Vec::new());
    super::supervise(
        || {
            runs.set(runs.get() + 1);
            assert!(runs.get() > 2, "a pass that panics");
        },
        |restarts| counted.borrow_mut().push(restarts),
    );
    assert_eq!(runs.get(), 3, "two panics, then a run that ends");
    assert_eq!(*counted.borrow(), vec![1, 2]);
}

#[test]
fn the_restarts_gauge_is_served_at_zero_from_the_start() {
    let parts = parts(replica(HOUR_MS));
    let metrics = Arc::clone(&parts.metrics);
    let retention = Retention::spawn(parts, RetentionConfig::default()).expect("spawn");
    assert!(metrics.render().contains("\nnarad_reaper_restarts 0\n"));
    retention.stop();
}
