//! Idle consume shards are released (`consume.idle_shard_release_ms`), on
//! real partition logs, a real consumer state store and a manual clock:
//! what keeps a shard, what a release keeps of it (acks, and receipt
//! handles that never match a later lease), and that a node that consumed
//! many partitions once gives them all back. On the simulated disk, but
//! for the 2,000 partitions: the simulated disk's cost per operation grows
//! with the files it holds, so those live in a temporary directory.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use narad_clock::{ManualClock, millis};
use narad_disk::Disk;
use narad_disk::portable::PortableDisk;
use narad_disk::sim::SimDisk;
use narad_plog::{CommitRecord, LogConfig};

use super::ahead::{ConsumerStateConfig, ConsumerStateStore};
use super::service::{ConsumeConfig, ConsumeRequest, ConsumeService, Delivery, SettleError};
use super::shard::Settle;
use crate::metadata::MetadataReplica;
use crate::metrics::NodeMetrics;
use crate::partitions::LocalLogs;
use crate::partitions::retention::{RetentionParts, evict_idle, release_idle};
use crate::testing::{LOCAL_NODE, create_command, place, register};
use crate::topology::Destination;

const TOPIC: &str = "orders";
/// The lease length of a topic created without one (`TopicDefaults`).
const VISIBILITY_MS: u64 = 30_000;
/// `consume.idle_shard_release_ms` in these tests: its default.
const IDLE: Duration = Duration::from_secs(600);
/// `storage.idle_log_eviction_ms`: its default.
const IDLE_LOG: Duration = Duration::from_secs(1_800);
/// How long a test waits for a spawned consume to park or be answered: a
/// ceiling that turns a hang into a failure, not a timing assertion.
const CEILING: Duration = Duration::from_secs(30);

/// One node's consume path, with the retention thread's parts for one
/// release-then-evict step.
struct Node {
    replica: Arc<MetadataReplica>,
    logs: Arc<LocalLogs>,
    store: Arc<ConsumerStateStore>,
    clock: Arc<ManualClock>,
    service: Arc<ConsumeService>,
}

impl Node {
    /// `topics` topics of `partitions` partitions each, all here:
    /// `orders` first, then `t1`, `t2`, ...
    fn new(topics: u32, partitions: u32, idle: Option<Duration>) -> Self {
        Self::on(
            Arc::new(SimDisk::new(23)),
            Path::new("/node"),
            topics,
            partitions,
            idle,
        )
    }

    /// As [`Self::new`], on `disk` under `data_dir`.
    fn on(
        disk: Arc<dyn Disk>,
        data_dir: &Path,
        topics: u32,
        partitions: u32,
        idle: Option<Duration>,
    ) -> Self {
        let replica = Arc::new(MetadataReplica::new(LOCAL_NODE));
        register(&replica, LOCAL_NODE);
        for index in 0..topics {
            let name = if index == 0 {
                TOPIC.to_owned()
            } else {
                format!("t{index}")
            };
            let id = 0xa100 + u64::from(index);
            place(&replica, create_command(&name, id, partitions), LOCAL_NODE);
        }
        let clock = Arc::new(ManualClock::new(1_000));
        let logs = Arc::new(LocalLogs::new(
            Arc::clone(&disk),
            data_dir,
            LogConfig::default(),
            Arc::clone(&clock) as _,
        ));
        let store = ConsumerStateStore::new(disk, ConsumerStateConfig::default());
        let config = ConsumeConfig {
            idle_shard_release: idle,
            ..ConsumeConfig::default()
        };
        let service = ConsumeService::new(
            Arc::clone(&logs),
            Arc::clone(&replica),
            Arc::clone(&store),
            data_dir.to_path_buf(),
            Arc::clone(&clock) as _,
            config,
            5,
        );
        Self {
            replica,
            logs,
            store,
            clock,
            service,
        }
    }

    fn orders(idle: Duration) -> Self {
        Self::new(1, 3, Some(idle))
    }

    fn commit(&self, partition: u32, payloads: &[&str]) {
        let records: Vec<CommitRecord<'_>> = payloads
            .iter()
            .map(|payload| CommitRecord::new(b"", payload.as_bytes(), 1_000))
            .collect();
        let meta = self.replica.topic_meta(TOPIC).expect("topic");
        self.logs
            .resolve(
                &Destination::new(TOPIC, partition),
                meta.incarnation_id.as_ref(),
            )
            .expect("open log")
            .commit_durable(&[&records])
            .expect("commit");
    }

    async fn consume(&self, topic: &str, partition: Option<u32>, wait: Duration) -> Vec<Delivery> {
        self.service
            .consume(ConsumeRequest {
                topic: topic.to_owned(),
                partition,
                max: 10,
                wait,
            })
            .await
            .expect("consume")
    }

    fn settle(&self, delivery: &Delivery, how: Settle) -> Result<(), SettleError> {
        self.service.settle(
            &delivery.topic,
            delivery.partition,
            delivery.record.offset,
            delivery.nonce,
            how,
        )
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(millis(by));
    }

    /// The retention thread's parts, with the service as the log holder.
    fn retention(&self) -> RetentionParts {
        RetentionParts {
            logs: Arc::clone(&self.logs),
            replica: Arc::clone(&self.replica),
            metrics: Arc::new(NodeMetrics::new()),
            holders: Some(Arc::clone(&self.service) as _),
        }
    }
}

#[tokio::test]
async fn a_released_shards_receipt_handle_is_refused_and_never_settles_the_new_lease() {
    let node = Node::orders(IDLE);
    node.commit(0, &["a"]);
    let old = node.consume(TOPIC, Some(0), Duration::ZERO).await;
    assert_eq!(old.len(), 1);
    // The lease lapses unacked, then nobody consumes for the idle time.
    node.advance(IDLE + Duration::from_millis(VISIBILITY_MS));
    assert_eq!(node.service.release_idle_shards(), 1);
    assert_eq!(node.service.shards_open(), 0);

    let new = node.consume(TOPIC, Some(0), Duration::ZERO).await;
    assert_eq!(new.len(), 1);
    assert_eq!(
        new[0].record.offset, old[0].record.offset,
        "the same record, leased by the new shard"
    );
    assert_ne!(new[0].nonce, old[0].nonce, "a nonce of a new stream");
    for how in [Settle::Ack, Settle::Extend, Settle::Nack] {
        assert_eq!(node.settle(&old[0], how), Err(SettleError::LeaseGone));
    }
    node.settle(&new[0], Settle::Ack)
        .expect("the new lease is untouched by the old handle");
    assert!(
        node.consume(TOPIC, Some(0), Duration::ZERO)
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn an_ack_before_the_release_is_kept_by_it() {
    let node = Node::orders(IDLE);
    node.commit(0, &["a", "b"]);
    let first = node.consume(TOPIC, Some(0), Duration::ZERO).await;
    node.settle(&first[1], Settle::Ack).expect("ack b");
    node.settle(&first[0], Settle::Nack).expect("nack a");
    node.advance(IDLE);
    assert_eq!(node.service.release_idle_shards(), 1);

    let again = node.consume(TOPIC, Some(0), Duration::ZERO).await;
    let offsets: Vec<u64> = again.iter().map(|d| d.record.offset).collect();
    assert_eq!(offsets, vec![0], "b stays acked, a is delivered again");
    assert_eq!(
        node.settle(&first[1], Settle::Ack),
        Err(SettleError::LeaseGone)
    );
}

#[tokio::test]
async fn a_shard_used_within_the_idle_time_is_kept() {
    let node = Node::orders(IDLE);
    node.commit(0, &["a"]);
    let leased = node.consume(TOPIC, Some(0), Duration::ZERO).await;
    node.advance(Duration::from_secs(20));
    node.settle(&leased[0], Settle::Ack).expect("ack");
    // The idle time counts from the ack, the last use.
    node.advance(IDLE - Duration::from_secs(1));
    assert_eq!(node.service.release_idle_shards(), 0);
    assert_eq!(node.service.shards_open(), 1);
    node.advance(Duration::from_secs(1));
    assert_eq!(node.service.release_idle_shards(), 1);
}

#[tokio::test]
async fn a_live_lease_keeps_its_shard_past_the_idle_time() {
    // Leases outlive the idle time here.
    let node = Node::orders(Duration::from_millis(VISIBILITY_MS / 3));
    node.commit(0, &["a"]);
    let leased = node.consume(TOPIC, Some(0), Duration::ZERO).await;
    node.advance(Duration::from_millis(VISIBILITY_MS - 1));
    assert_eq!(node.service.release_idle_shards(), 0);
    node.settle(&leased[0], Settle::Extend)
        .expect("the lease is still there");
    // Once the extended lease lapses, nothing holds the shard.
    node.advance(Duration::from_millis(VISIBILITY_MS));
    assert_eq!(node.service.release_idle_shards(), 1);
}

#[tokio::test]
async fn a_consume_parked_on_the_topic_keeps_its_shards_and_is_answered_by_a_commit() {
    let node = Node::orders(Duration::from_secs(1));
    let parked = {
        let service = Arc::clone(&node.service);
        tokio::spawn(async move {
            service
                .consume(ConsumeRequest {
                    topic: TOPIC.to_owned(),
                    partition: None,
                    max: 1,
                    wait: Duration::from_secs(10),
                })
                .await
        })
    };
    let deadline = std::time::Instant::now() + CEILING;
    while node.service.parked(TOPIC) == 0 {
        assert!(std::time::Instant::now() < deadline, "never parked");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    node.advance(Duration::from_secs(2));
    assert_eq!(node.service.release_idle_shards(), 0);
    assert_eq!(node.service.shards_open(), 3);

    node.commit(2, &["late"]);
    let got = tokio::time::timeout(CEILING, parked)
        .await
        .expect("the parked consume was never answered")
        .expect("task")
        .expect("consume");
    assert_eq!(got[0].partition, 2, "the kept shard's watcher woke it");
}

#[tokio::test]
async fn no_setting_keeps_every_shard() {
    let node = Node::new(1, 3, None);
    node.consume(TOPIC, None, Duration::ZERO).await;
    node.advance(Duration::from_secs(24 * 3_600));
    assert_eq!(node.service.release_idle_shards(), 0);
    assert_eq!(node.service.shards_open(), 3);
}

/// 2,000 partitions consumed once, then idle: the release pass lets every
/// shard go, with its consumer-state handle, and the idle eviction that
/// follows it in the same retention pass closes every log. Memory is not
/// measured here (a process's RSS in a unit test says little).
#[tokio::test]
async fn two_thousand_partitions_consumed_once_are_all_released_then_their_logs_closed() {
    const TOPICS: u32 = 20;
    const PARTITIONS: u32 = 100;
    let dir = tempfile::tempdir().expect("temp dir");
    let disk: Arc<dyn Disk> = Arc::new(PortableDisk::new(1).expect("portable disk"));
    let node = Node::on(disk, dir.path(), TOPICS, PARTITIONS, Some(IDLE));
    for index in 0..TOPICS {
        let topic = if index == 0 {
            TOPIC.to_owned()
        } else {
            format!("t{index}")
        };
        // A queue consume visits, so opens, every partition of its topic.
        assert!(node.consume(&topic, None, Duration::ZERO).await.is_empty());
    }
    let opened = (TOPICS * PARTITIONS) as usize;
    assert_eq!(node.service.shards_open(), opened);
    assert_eq!(node.logs.open_count(), opened);
    assert!(node.store.handles_open() > 0);

    node.advance(IDLE_LOG);
    let parts = node.retention();
    assert_eq!(release_idle(&parts), opened);
    assert_eq!(evict_idle(&parts, IDLE_LOG), opened);

    assert_eq!(node.service.shards_open(), 0);
    assert_eq!(node.service.shards_released(), opened as u64);
    assert_eq!(node.logs.open_count(), 0);
    assert_eq!(node.store.handles_open(), 0);
}
