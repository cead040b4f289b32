//! The partition poller: what it exports from given figures (pure, on
//! chosen clock readings), which closed partitions it reads, and passes
//! over real logs on the simulated disk, open and closed.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

use narad_clock::{Clock, ManualClock};
use narad_disk::Disk;
use narad_disk::sim::SimDisk;
use narad_meta::{Actor, Command, DeleteTopic};
use narad_plog::{CommitRecord, LogConfig};
use parking_lot::Mutex;

use super::decide::{PartitionFigures, closed_reads, series};
use super::{Frontiers, PollerConfig, PollerParts, PollerState, pass};
use crate::consume::ahead::stored_frontier;
use crate::metadata::MetadataReplica;
use crate::metrics::{NodeMetrics, Series};
use crate::partitions::LocalLogs;
use crate::testing::{LOCAL_NODE, apply, create_command, place, register};
use crate::topology::Destination;

const T0_MS: u64 = 1_000_000;

fn figures(high_watermark: u64, frontier: Option<u64>, at_ms: Option<u64>) -> PartitionFigures {
    PartitionFigures {
        high_watermark,
        oldest_offset: 0,
        frontier,
        unconsumed_committed_at_ms: at_ms,
        size_bytes: 100,
        segments: 1,
    }
}

fn value(series: &[Series], partition: u32) -> Option<f64> {
    let partition = partition.to_string();
    series
        .iter()
        .find(|(labels, _)| {
            labels
                .iter()
                .any(|(k, v)| *k == "partition" && *v == partition)
        })
        .map(|(_, value)| *value)
}

#[test]
fn a_partition_nobody_consumed_lags_by_everything_it_holds() {
    let partitions =
        BTreeMap::from([(Destination::new("orders", 0), figures(7, None, Some(T0_MS)))]);
    let out = series(&partitions, T0_MS + 90_000);
    assert_eq!(value(&out.lag, 0), Some(7.0));
    assert_eq!(value(&out.oldest_age, 0), Some(90.0));
    assert_eq!(value(&out.size, 0), Some(100.0));
    assert_eq!(value(&out.segments, 0), Some(1.0));
}

#[test]
fn a_caught_up_partition_has_no_lag_and_age_zero() {
    let partitions = BTreeMap::from([(Destination::new("orders", 0), figures(7, Some(7), None))]);
    let out = series(&partitions, T0_MS);
    assert_eq!(value(&out.lag, 0), Some(0.0));
    assert_eq!(value(&out.oldest_age, 0), Some(0.0));
}

#[test]
fn a_frontier_below_the_oldest_offset_counts_from_the_oldest() {
    let mut trimmed = figures(10, Some(2), Some(T0_MS));
    trimmed.oldest_offset = 6;
    let partitions = BTreeMap::from([(Destination::new("orders", 0), trimmed)]);
    assert_eq!(value(&series(&partitions, T0_MS).lag, 0), Some(4.0));
}

#[test]
fn an_unreadable_commit_time_serves_no_age_but_the_lag() {
    let partitions = BTreeMap::from([(Destination::new("orders", 0), figures(3, Some(1), None))]);
    let out = series(&partitions, T0_MS);
    assert_eq!(value(&out.lag, 0), Some(2.0));
    assert!(out.oldest_age.is_empty());
}

#[test]
fn a_commit_time_ahead_of_the_clock_is_age_zero() {
    let partitions = BTreeMap::from([(
        Destination::new("orders", 0),
        figures(3, None, Some(T0_MS + 5_000)),
    )]);
    assert_eq!(value(&series(&partitions, T0_MS).oldest_age, 0), Some(0.0));
}

#[test]
fn topic_bytes_add_up_the_topics_partitions() {
    let partitions = BTreeMap::from([
        (Destination::new("a", 0), figures(1, None, None)),
        (Destination::new("a", 1), figures(1, None, None)),
        (Destination::new("b", 0), figures(1, None, None)),
    ]);
    let out = series(&partitions, T0_MS);
    assert_eq!(
        out.topic_bytes,
        vec![
            (vec![("topic", "a".to_owned())], 200.0),
            (vec![("topic", "b".to_owned())], 100.0),
        ]
    );
}

#[test]
fn closed_reads_take_the_never_read_then_the_oldest_within_the_budget() {
    let closed = vec![
        (Destination::new("t", 0), Some(T0_MS - 40_000)),
        (Destination::new("t", 1), None),
        (Destination::new("t", 2), Some(T0_MS - 10_000)),
        (Destination::new("t", 3), Some(T0_MS - 60_000)),
    ];
    assert_eq!(
        closed_reads(&closed, T0_MS, 30_000, 2),
        vec![Destination::new("t", 1), Destination::new("t", 3)]
    );
    assert_eq!(
        closed_reads(&closed, T0_MS, 30_000, 10),
        vec![
            Destination::new("t", 1),
            Destination::new("t", 3),
            Destination::new("t", 0)
        ],
        "one read 10 s ago is not due"
    );
}

/// Frontiers from a table (live) and the consumer-state files (stored).
#[derive(Debug)]
struct FakeFrontiers {
    disk: Arc<dyn Disk>,
    live: Mutex<BTreeMap<Destination, u64>>,
}

impl Frontiers for FakeFrontiers {
    fn live(&self, destination: &Destination, _: Option<&Arc<str>>) -> Option<u64> {
        self.live.lock().get(destination).copied()
    }

    fn stored(&self, dir: &Path) -> io::Result<Option<u64>> {
        stored_frontier(&*self.disk, dir)
    }
}

struct Bench {
    clock: Arc<ManualClock>,
    parts: PollerParts,
    frontiers: Arc<FakeFrontiers>,
    state: PollerState,
}

/// Topic `orders` (3 partitions) on this node, logs on the simulated disk,
/// the clock at [`T0_MS`].
fn bench() -> Bench {
    let replica = Arc::new(MetadataReplica::new(LOCAL_NODE));
    register(&replica, LOCAL_NODE);
    place(&replica, create_command("orders", 0xa1, 3), LOCAL_NODE);
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(3));
    let clock = Arc::new(ManualClock::new(T0_MS));
    let config = LogConfig {
        segment_bytes: 4_096,
        ..LogConfig::default()
    };
    let logs = Arc::new(LocalLogs::new(
        Arc::clone(&disk),
        "/node",
        config,
        Arc::clone(&clock) as Arc<dyn Clock>,
    ));
    let frontiers = Arc::new(FakeFrontiers {
        disk,
        live: Mutex::new(BTreeMap::new()),
    });
    Bench {
        clock,
        parts: PollerParts {
            logs,
            replica,
            metrics: Arc::new(NodeMetrics::new()),
            frontiers: Arc::clone(&frontiers) as Arc<dyn Frontiers>,
        },
        frontiers,
        state: PollerState::default(),
    }
}

impl Bench {
    fn commit(&self, partition: u32, count: usize, at_ms: u64) {
        let meta = self.parts.replica.topic_meta("orders").expect("topic");
        let log = self
            .parts
            .logs
            .resolve(
                &Destination::new("orders", partition),
                meta.incarnation_id.as_ref(),
            )
            .expect("open");
        let payload = vec![b'x'; 512];
        for _ in 0..count {
            log.commit_durable(&[&[CommitRecord::new(b"", &payload, at_ms)]])
                .expect("commit");
        }
    }

    fn close(&self, partition: u32) {
        assert!(
            self.parts
                .logs
                .close_partition(&Destination::new("orders", partition))
        );
    }

    fn pass(&mut self) -> super::PassReport {
        let now = self.clock.now_ms();
        pass(
            &self.parts,
            &PollerConfig::default(),
            &mut self.state,
            now,
            now,
        )
        .expect("a caught-up replica")
    }

    fn scraped(&self, name: &str, partition: u32) -> Option<f64> {
        let prefix = format!("{name}{{topic=\"orders\",partition=\"{partition}\"}} ");
        self.parts.metrics.render().lines().find_map(|line| {
            line.strip_prefix(&prefix)
                .map(|value| value.parse().expect("a number"))
        })
    }
}

#[test]
fn every_owned_partition_is_exported_consumed_or_not_open_or_closed() {
    let mut bench = bench();
    bench.commit(0, 5, T0_MS - 60_000);
    bench.commit(1, 3, T0_MS - 30_000);
    bench.close(1);
    let report = bench.pass();
    assert_eq!(
        (report.exported, report.open, report.closed_read),
        (3, 1, 2)
    );
    let lag = "narad_consumer_lag_messages";
    let age = "narad_oldest_unconsumed_message_age_seconds";
    assert_eq!(bench.scraped(lag, 0), Some(5.0), "open, never consumed");
    assert_eq!(bench.scraped(age, 0), Some(60.0));
    assert_eq!(
        bench.scraped(lag, 1),
        Some(3.0),
        "closed, read from its files"
    );
    assert_eq!(bench.scraped(age, 1), Some(30.0));
    assert_eq!(bench.scraped(lag, 2), Some(0.0), "never written");
    assert_eq!(bench.scraped("narad_segments", 2), Some(0.0));
    assert!(
        bench
            .scraped("narad_partition_size_bytes", 0)
            .unwrap_or(0.0)
            > 2_500.0
    );
    assert!(
        bench
            .parts
            .logs
            .get(&Destination::new("orders", 1))
            .is_none(),
        "the closed log stays closed"
    );
}

#[test]
fn a_live_frontier_is_the_consumers() {
    let mut bench = bench();
    bench.commit(0, 5, T0_MS - 60_000);
    bench
        .frontiers
        .live
        .lock()
        .insert(Destination::new("orders", 0), 2);
    bench.pass();
    assert_eq!(bench.scraped("narad_consumer_lag_messages", 0), Some(3.0));
}

#[test]
fn a_closed_partition_is_read_again_only_after_the_refresh() {
    let mut bench = bench();
    bench.commit(1, 3, T0_MS);
    bench.close(1);
    assert_eq!(bench.pass().closed_read, 3);
    bench.clock.advance(5_000);
    assert_eq!(bench.pass().closed_read, 0);
    assert_eq!(
        bench.scraped("narad_oldest_unconsumed_message_age_seconds", 1),
        Some(5.0),
        "the age grows from the kept commit time"
    );
    bench.clock.advance(25_000);
    assert_eq!(bench.pass().closed_read, 3);
}

#[test]
fn a_partition_no_longer_owned_loses_its_series() {
    let mut bench = bench();
    bench.commit(2, 1, T0_MS);
    bench.pass();
    assert!(bench.scraped("narad_consumer_lag_messages", 2).is_some());
    apply(
        &bench.parts.replica,
        Command::DeleteTopic(DeleteTopic {
            actor: Actor::SecurityOff,
            name: "orders".into(),
            expected_id: None,
        }),
    );
    bench.pass();
    let text = bench.parts.metrics.render();
    for name in [
        "narad_consumer_lag_messages",
        "narad_oldest_unconsumed_message_age_seconds",
        "narad_partition_size_bytes",
        "narad_segments",
        "narad_topic_bytes",
    ] {
        assert!(!text.contains(name), "{name}: {text}");
    }
}

#[test]
fn a_log_open_for_a_replaced_incarnation_counts_as_empty() {
    let mut bench = bench();
    bench.commit(0, 4, T0_MS);
    apply(
        &bench.parts.replica,
        Command::DeleteTopic(DeleteTopic {
            actor: Actor::SecurityOff,
            name: "orders".into(),
            expected_id: None,
        }),
    );
    place(
        &bench.parts.replica,
        create_command("orders", 0xb2, 3),
        LOCAL_NODE,
    );
    bench.pass();
    assert_eq!(bench.scraped("narad_consumer_lag_messages", 0), Some(0.0));
    assert_eq!(bench.scraped("narad_partition_size_bytes", 0), Some(0.0));
}
