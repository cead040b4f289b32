//! The retention loop over real partition logs on the simulated disk and a
//! metadata replica.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use narad_disk::Disk;
use narad_disk::sim::SimDisk;
use narad_meta::{Actor, AlterTopic, Command, DeleteTopic};
use narad_plog::{CommitRecord, LogConfig};

use super::{PassReport, Retention, RetentionParts, pass};
use crate::commit::LocalLogs;
use crate::metadata::MetadataReplica;
use crate::metrics::NodeMetrics;
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

fn parts(replica: Arc<MetadataReplica>) -> RetentionParts {
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(7));
    // Small segments, so a few commits make several.
    let config = LogConfig {
        segment_bytes: 4_096,
        ..LogConfig::default()
    };
    RetentionParts {
        logs: Arc::new(LocalLogs::new(disk, Path::new("/node"), config)),
        replica,
        metrics: Arc::new(NodeMetrics::new()),
    }
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
    let series = format!("{name}{{topic=\"{topic}\",partition=\"0\",reason=\"age\"}} ");
    parts.metrics.render().lines().find_map(|line| {
        line.strip_prefix(&series)
            .map(|value| value.parse().expect("a counter value"))
    })
}

#[test]
fn a_pass_deletes_what_each_topics_retention_expired_and_counts_it() {
    let parts = parts(replica(HOUR_MS));
    let old = commit(&parts, "orders", 12, T0);
    commit(&parts, "orders", 3, T0 + 2 * HOUR_MS);
    commit(&parts, "forever", 12, T0);

    let report = pass(&parts, T0 + 2 * HOUR_MS + 1);

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
    assert_eq!(pass(&parts, now).deleted_segments, 0);

    let mut alter = AlterTopic::named(Actor::SecurityOff, "orders", None);
    alter.retention_ms = Some(i64::try_from(HOUR_MS).expect("an hour"));
    apply(&parts.replica, Command::AlterTopic(alter));
    let report = pass(&parts, now);

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
    assert_eq!(pass(&parts, T0 + HOUR_MS).deleted_segments, 0);
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

    let report = pass(&parts, T0 + 10 * HOUR_MS);

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
    let retention = Retention::spawn(parts, Duration::from_millis(10)).expect("spawn");
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
fn an_empty_node_passes_without_sweeping() {
    let parts = parts(replica(HOUR_MS));
    assert_eq!(pass(&parts, T0), PassReport::default());
}
