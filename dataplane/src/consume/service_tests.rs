//! The consume service over real partition logs on the simulated disk
//! (or a temporary directory where a test damages a file), a real consumer
//! state store, and a manual clock.

use std::future::Future;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use narad_clock::{Clock, ManualClock};
use narad_disk::Disk;
use narad_disk::portable::PortableDisk;
use narad_disk::sim::SimDisk;
use narad_plog::segment::segment_file_name;
use narad_plog::{CommitRecord, LogConfig};

use super::ahead::{ConsumerStateConfig, ConsumerStateStore};
use super::service::{
    ConsumeConfig, ConsumeError, ConsumeRequest, ConsumeService, Delivery, ReplayError, SettleError,
};
use super::shard::Settle;
use crate::metadata::MetadataReplica;
use crate::partitions::LocalLogs;
use crate::testing::{LOCAL_NODE, apply, assign, create_command, register, replica};
use crate::topology::Destination;
use narad_meta::{Actor, AlterTopic, Command, CreateTopic, DeleteTopic};

const TOPIC: &str = "orders";
/// The lease length of a topic created without one (`TopicDefaults`).
const VISIBILITY_MS: u64 = 30_000;
/// A long poll that only the manual clock can end.
const LONG_WAIT: Duration = Duration::from_secs(10);
/// How long a test awaits a parked consume's answer: a ceiling that turns
/// a lost wake-up into a failure, not a timing assertion.
const ANSWER_CEILING: Duration = Duration::from_secs(30);
/// Yields allowed while waiting for a spawned consume to park: a ceiling
/// that turns a hang into a failure, not a timing assertion.
const PARK_YIELDS_MAX: usize = 10_000;
/// How long a test waits for a spawned consume to park, polling: its first
/// scan may open the partition on the blocking pool. A ceiling, not a
/// timing assertion.
const PARK_CEILING: Duration = Duration::from_secs(30);

/// One node's consume path over `disk`.
struct Node {
    replica: Arc<MetadataReplica>,
    logs: Arc<LocalLogs>,
    store: Arc<ConsumerStateStore>,
    clock: Arc<ManualClock>,
    service: Arc<ConsumeService>,
}

impl Node {
    fn on(disk: Arc<dyn Disk>, data_dir: &Path, replica: Arc<MetadataReplica>, seed: u64) -> Self {
        Self::with_config(disk, data_dir, replica, seed, ConsumeConfig::default())
    }

    fn with_config(
        disk: Arc<dyn Disk>,
        data_dir: &Path,
        replica: Arc<MetadataReplica>,
        seed: u64,
        config: ConsumeConfig,
    ) -> Self {
        Self::with_log_config(disk, data_dir, replica, seed, config, LogConfig::default())
    }

    fn with_log_config(
        disk: Arc<dyn Disk>,
        data_dir: &Path,
        replica: Arc<MetadataReplica>,
        seed: u64,
        config: ConsumeConfig,
        log_config: LogConfig,
    ) -> Self {
        let clock = Arc::new(ManualClock::new(1_000));
        let logs = Arc::new(LocalLogs::new(
            Arc::clone(&disk),
            data_dir,
            log_config,
            Arc::clone(&clock) as _,
        ));
        let store = ConsumerStateStore::new(Arc::clone(&disk), ConsumerStateConfig::default());
        let service = ConsumeService::new(
            Arc::clone(&logs),
            Arc::clone(&replica),
            Arc::clone(&store),
            data_dir.to_path_buf(),
            Arc::clone(&clock) as _,
            config,
            seed,
        );
        Self {
            replica,
            logs,
            store,
            clock,
            service,
        }
    }

    /// Commits `payloads` to `partition`; returns their offsets.
    fn commit(&self, partition: u32, payloads: &[&str]) -> Range<u64> {
        let records: Vec<CommitRecord<'_>> = payloads
            .iter()
            .map(|payload| CommitRecord::new(b"", payload.as_bytes(), 1_000))
            .collect();
        let meta = self.replica.topic_meta(TOPIC).expect("topic");
        let log = self
            .logs
            .resolve(
                &Destination::new(TOPIC, partition),
                meta.incarnation_id.as_ref(),
            )
            .expect("open log");
        log.commit_durable(&[&records]).expect("commit").offsets
    }

    async fn consume(&self, partition: Option<u32>, max: usize) -> Vec<Delivery> {
        self.service
            .consume(request(partition, max, Duration::ZERO))
            .await
            .expect("consume")
    }

    fn settle(&self, delivery: &Delivery, how: Settle) -> Result<(), SettleError> {
        self.service.settle(
            TOPIC,
            delivery.partition,
            delivery.record.offset,
            delivery.nonce,
            how,
        )
    }

    /// Alters the topic as a client's `PATCH` does: `change` sets the
    /// fields of one alter group.
    fn alter_topic(&self, change: impl FnOnce(&mut AlterTopic)) {
        let mut alter = AlterTopic::named(Actor::SecurityOff, TOPIC, None);
        change(&mut alter);
        apply(&self.replica, Command::AlterTopic(alter));
    }

    /// Deletes the topic and creates it again as incarnation `id`, every
    /// partition on this node.
    fn recreate_topic(&self, id: u64) {
        let delete = DeleteTopic {
            actor: Actor::SecurityOff,
            name: TOPIC.into(),
            expected_id: None,
        };
        apply(&self.replica, Command::DeleteTopic(delete));
        apply(
            &self.replica,
            Command::CreateTopic(create_command(TOPIC, id, 3)),
        );
        assign(
            &self.replica,
            TOPIC,
            &[(0, LOCAL_NODE), (1, LOCAL_NODE), (2, LOCAL_NODE)],
        );
    }

    /// A consume with a long wait, running on its own task, once it has
    /// parked.
    async fn parked_consume(
        &self,
        partition: Option<u32>,
    ) -> tokio::task::JoinHandle<Result<Vec<Delivery>, ConsumeError>> {
        let parked = self.service.parked(TOPIC);
        let service = Arc::clone(&self.service);
        let task =
            tokio::spawn(async move { service.consume(request(partition, 10, LONG_WAIT)).await });
        let deadline = std::time::Instant::now() + PARK_CEILING;
        while self.service.parked(TOPIC) <= parked {
            assert!(
                std::time::Instant::now() < deadline,
                "the consume never parked"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        task
    }
}

/// The answer of a parked consume.
async fn answer(
    task: tokio::task::JoinHandle<Result<Vec<Delivery>, ConsumeError>>,
) -> Vec<Delivery> {
    tokio::time::timeout(ANSWER_CEILING, task)
        .await
        .expect("the parked consume was never answered")
        .expect("task")
        .expect("consume")
}

/// A node on a temporary directory (tests that rename or damage files).
fn temp_node() -> (tempfile::TempDir, Node) {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk: Arc<dyn Disk> = Arc::new(PortableDisk::new(1).expect("disk"));
    let node = Node::on(disk, dir.path(), replica(), 5);
    (dir, node)
}

/// A node on a real directory whose logs read every record from their
/// segments, as they do for records their tail cache no longer holds, so
/// damage written behind a log's back is seen.
fn temp_node_without_tail_cache() -> (tempfile::TempDir, Node) {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk: Arc<dyn Disk> = Arc::new(PortableDisk::new(1).expect("disk"));
    let log_config = LogConfig {
        tail_cache_bytes: 0,
        ..LogConfig::default()
    };
    let node = Node::with_log_config(
        disk,
        dir.path(),
        replica(),
        5,
        ConsumeConfig::default(),
        log_config,
    );
    (dir, node)
}

/// A replica holding only topic `orders` (3 partitions), created as
/// `create` says, with partition i placed on `owners[i]` (`None`:
/// unassigned).
fn orders_replica(
    owners: [Option<u64>; 3],
    create: impl FnOnce(&mut CreateTopic),
) -> Arc<MetadataReplica> {
    let replica = Arc::new(MetadataReplica::new(LOCAL_NODE));
    register(&replica, LOCAL_NODE);
    let mut command = create_command(TOPIC, 0xa1, 3);
    create(&mut command);
    apply(&replica, Command::CreateTopic(command));
    let placed: Vec<(u32, u64)> = (0..3)
        .zip(owners)
        .filter_map(|(partition, owner)| Some((partition, owner?)))
        .collect();
    if !placed.is_empty() {
        assign(&replica, TOPIC, &placed);
    }
    replica
}

/// A node on the simulated disk over `replica`.
fn sim_node_over(replica: Arc<MetadataReplica>) -> Node {
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(11));
    Node::on(disk, Path::new("/node"), replica, 5)
}

const ELSEWHERE: Option<u64> = Some(LOCAL_NODE + 1);
const HERE: Option<u64> = Some(LOCAL_NODE);

fn sim_node() -> Node {
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(11));
    Node::on(disk, Path::new("/node"), replica(), 5)
}

fn request(partition: Option<u32>, max: usize, wait: Duration) -> ConsumeRequest {
    ConsumeRequest {
        topic: TOPIC.to_owned(),
        partition,
        max,
        wait,
    }
}

fn offsets(deliveries: &[Delivery]) -> Vec<u64> {
    deliveries.iter().map(|d| d.record.offset).collect()
}

fn payloads(deliveries: &[Delivery]) -> Vec<String> {
    deliveries
        .iter()
        .map(|d| String::from_utf8(d.record.payload.clone()).expect("utf-8"))
        .collect()
}

#[tokio::test]
async fn a_pinned_consume_delivers_records_in_offset_order() {
    let node = sim_node();
    node.commit(0, &["a", "b", "c"]);
    let got = node.consume(Some(0), 10).await;
    assert_eq!(offsets(&got), vec![0, 1, 2]);
    assert_eq!(payloads(&got), vec!["a", "b", "c"]);
    assert!(got.iter().all(|d| d.partition == 0 && &*d.topic == TOPIC));
}

#[tokio::test]
async fn a_queue_consume_takes_from_every_owned_partition() {
    let node = sim_node();
    for partition in 0..3 {
        node.commit(partition, &["x"]);
    }
    let got = node.consume(None, 10).await;
    let mut partitions: Vec<u32> = got.iter().map(|d| d.partition).collect();
    partitions.sort_unstable();
    assert_eq!(partitions, vec![0, 1, 2]);
}

#[tokio::test]
async fn queue_consumes_start_at_a_rotating_partition() {
    let node = sim_node();
    for partition in 0..3 {
        node.commit(partition, &["x", "y", "z"]);
    }
    let mut firsts = Vec::new();
    for _ in 0..3 {
        firsts.push(node.consume(None, 1).await[0].partition);
    }
    firsts.sort_unstable();
    assert_eq!(firsts, vec![0, 1, 2]);
}

#[tokio::test]
async fn a_queue_consume_skips_partitions_owned_elsewhere() {
    let node = sim_node_over(orders_replica([HERE, ELSEWHERE, HERE], |_| {}));
    node.commit(1, &["elsewhere"]);
    assert!(node.consume(None, 10).await.is_empty());
}

#[tokio::test]
async fn a_pinned_consume_of_a_partition_owned_elsewhere_is_owner_unavailable() {
    let node = sim_node_over(orders_replica([HERE, HERE, ELSEWHERE], |_| {}));
    let outcome = node
        .service
        .consume(request(Some(2), 1, Duration::ZERO))
        .await;
    assert_eq!(
        outcome,
        Err(ConsumeError::OwnerUnavailable { partition: 2 })
    );
}

#[tokio::test]
async fn a_pinned_partition_past_the_count_is_out_of_range() {
    let node = sim_node();
    let outcome = node
        .service
        .consume(request(Some(3), 1, Duration::ZERO))
        .await;
    assert_eq!(
        outcome,
        Err(ConsumeError::PartitionOutOfRange {
            partition: 3,
            count: 3
        })
    );
}

#[tokio::test]
async fn a_consume_of_an_unknown_topic_is_topic_not_found() {
    let node = sim_node();
    let mut unknown = request(None, 1, Duration::ZERO);
    unknown.topic = "missing".to_owned();
    assert_eq!(
        node.service.consume(unknown).await,
        Err(ConsumeError::TopicNotFound)
    );
}

#[tokio::test]
async fn a_batch_takes_at_most_max_records() {
    let node = sim_node();
    node.commit(0, &["a", "b", "c", "d"]);
    assert_eq!(offsets(&node.consume(Some(0), 3).await), vec![0, 1, 2]);
}

#[tokio::test]
async fn a_batch_stops_reserving_once_its_bytes_reach_the_limit() {
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(11));
    let config = ConsumeConfig {
        batch_bytes_max: 10,
        ..ConsumeConfig::default()
    };
    let node = Node::with_config(disk, Path::new("/node"), replica(), 5, config);
    node.commit(0, &["0123456789abc", "x", "y"]);
    let first = node.consume(Some(0), 10).await;
    assert_eq!(offsets(&first), vec![0], "the first record is always taken");
    assert_eq!(
        node.service.gauges()[0].in_flight,
        1,
        "nothing more reserved"
    );
    let rest = node.consume(Some(0), 10).await;
    assert_eq!(offsets(&rest), vec![1, 2]);
}

#[tokio::test]
async fn a_leased_record_is_not_delivered_again_while_the_lease_lives() {
    let node = sim_node();
    node.commit(0, &["a"]);
    node.consume(Some(0), 1).await;
    node.clock.advance(VISIBILITY_MS - 1);
    assert!(node.consume(Some(0), 1).await.is_empty());
}

#[tokio::test]
async fn an_expired_lease_is_redelivered_under_a_new_nonce() {
    let node = sim_node();
    node.commit(0, &["a"]);
    let first = node.consume(Some(0), 1).await;
    node.clock.advance(VISIBILITY_MS);
    let again = node.consume(Some(0), 1).await;
    assert_eq!(offsets(&again), vec![0]);
    assert_ne!(again[0].nonce, first[0].nonce);
    assert_eq!(
        node.settle(&first[0], Settle::Ack),
        Err(SettleError::LeaseGone)
    );
}

/// Runs the spawned tasks until none can go on without the clock.
async fn let_tasks_run() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
}

/// One record leased from partition 0, and a handoff's wait of 5 s for
/// the partition's leases, started.
async fn waiting_for_a_lease(
    node: &Node,
) -> (
    Delivery,
    tokio::task::JoinHandle<Result<usize, ConsumeError>>,
) {
    node.commit(0, &["a"]);
    let leased = node.consume(Some(0), 1).await.remove(0);
    let meta = node.replica.topic_meta(TOPIC).expect("topic");
    let service = Arc::clone(&node.service);
    let waiting = tokio::spawn(async move {
        service
            .wait_for_leases(&meta, 0, Duration::from_secs(5))
            .await
    });
    let_tasks_run().await;
    (leased, waiting)
}

#[tokio::test]
async fn the_handoffs_wait_for_leases_ends_at_its_bound_on_the_nodes_clock() {
    let node = sim_node();
    let (_, waiting) = waiting_for_a_lease(&node).await;
    node.clock.advance(4_999);
    let_tasks_run().await;
    assert!(!waiting.is_finished(), "still within its bound");
    node.clock.advance(1);
    let live = waiting.await.expect("join").expect("wait");
    assert_eq!(live, 1, "the lease is still out");
}

#[tokio::test]
async fn the_handoffs_wait_for_leases_ends_once_the_last_is_acked() {
    let node = sim_node();
    let (leased, waiting) = waiting_for_a_lease(&node).await;
    node.settle(&leased, Settle::Ack).expect("ack");
    node.clock.advance(5);
    let live = waiting.await.expect("join").expect("wait");
    assert_eq!(live, 0);
    assert!(node.clock.now_ms() < 1_000 + 5_000, "before its bound");
}

#[tokio::test]
async fn a_nacked_record_is_redelivered_at_once() {
    let node = sim_node();
    node.commit(0, &["a", "b"]);
    let first = node.consume(Some(0), 1).await;
    node.settle(&first[0], Settle::Nack).expect("nack");
    assert_eq!(offsets(&node.consume(Some(0), 1).await), vec![0]);
}

#[tokio::test]
async fn a_second_ack_of_the_same_handle_is_lease_gone() {
    let node = sim_node();
    node.commit(0, &["a"]);
    let got = node.consume(Some(0), 1).await;
    node.settle(&got[0], Settle::Ack).expect("ack");
    assert_eq!(
        node.settle(&got[0], Settle::Ack),
        Err(SettleError::LeaseGone)
    );
}

#[tokio::test]
async fn an_acked_record_is_never_delivered_again() {
    let node = sim_node();
    node.commit(0, &["a"]);
    let got = node.consume(Some(0), 1).await;
    node.settle(&got[0], Settle::Ack).expect("ack");
    node.clock.advance(2 * VISIBILITY_MS);
    assert!(node.consume(Some(0), 1).await.is_empty());
}

#[tokio::test]
async fn an_extend_keeps_the_lease_past_its_first_expiry() {
    let node = sim_node();
    node.commit(0, &["a"]);
    let got = node.consume(Some(0), 1).await;
    node.clock.advance(VISIBILITY_MS - 1);
    node.settle(&got[0], Settle::Extend).expect("extend");
    node.clock.advance(VISIBILITY_MS - 1);
    assert!(node.consume(Some(0), 1).await.is_empty());
    node.settle(&got[0], Settle::Ack)
        .expect("same handle still valid");
}

#[tokio::test]
async fn a_settle_on_a_partition_never_consumed_is_lease_gone() {
    let node = sim_node();
    assert_eq!(
        node.service.settle(TOPIC, 1, 0, 42, Settle::Ack),
        Err(SettleError::LeaseGone)
    );
    assert_eq!(
        node.service.settle(TOPIC, 9, 0, 42, Settle::Ack),
        Err(SettleError::LeaseGone),
        "an unknown partition is a stale handle too"
    );
}

#[tokio::test]
async fn a_settle_on_a_partition_owned_elsewhere_is_owner_unavailable() {
    let node = sim_node_over(orders_replica([HERE, ELSEWHERE, HERE], |_| {}));
    assert_eq!(
        node.service.settle(TOPIC, 1, 0, 42, Settle::Ack),
        Err(SettleError::OwnerUnavailable { partition: 1 })
    );
    assert_eq!(
        node.service.settle("missing", 0, 0, 42, Settle::Ack),
        Err(SettleError::TopicNotFound)
    );
}

#[tokio::test]
async fn the_in_flight_cap_limits_what_one_partition_leases() {
    let node = sim_node();
    node.alter_topic(|alter| alter.max_in_flight_per_partition = Some(2));
    node.commit(0, &["a", "b", "c"]);
    let got = node.consume(Some(0), 10).await;
    assert_eq!(offsets(&got), vec![0, 1]);
    assert!(node.consume(Some(0), 10).await.is_empty());
    node.settle(&got[0], Settle::Ack).expect("ack");
    assert_eq!(offsets(&node.consume(Some(0), 10).await), vec![2]);
}

#[tokio::test]
async fn at_the_acked_ahead_cap_only_the_frontier_hole_is_delivered() {
    let node = sim_node();
    node.alter_topic(|alter| alter.max_acked_ahead_per_partition = Some(2));
    node.commit(0, &["a", "b", "c", "d", "e"]);
    let got = node.consume(Some(0), 3).await;
    node.settle(&got[1], Settle::Ack).expect("ack 1");
    node.settle(&got[2], Settle::Ack).expect("ack 2");
    assert!(
        node.consume(Some(0), 10).await.is_empty(),
        "the hole is leased, nothing fresh goes out"
    );
    node.settle(&got[0], Settle::Nack).expect("nack the hole");
    assert_eq!(offsets(&node.consume(Some(0), 10).await), vec![0]);
}

#[tokio::test]
async fn a_long_poll_is_answered_by_a_commit() {
    let node = sim_node();
    let task = node.parked_consume(Some(0)).await;
    node.commit(0, &["late"]);
    let got = answer(task).await;
    assert_eq!(payloads(&got), vec!["late"]);
}

#[tokio::test]
async fn a_long_poll_parked_before_its_partitions_had_an_owner_is_answered_by_a_commit() {
    // A topic created a moment ago: the controller has not assigned it.
    let node = sim_node_over(orders_replica([None, None, None], |_| {}));
    let task = node.parked_consume(None).await;
    assign(
        &node.replica,
        TOPIC,
        &[(0, LOCAL_NODE), (1, LOCAL_NODE), (2, LOCAL_NODE)],
    );
    // Let the metadata pump open the newly owned partitions' watchers.
    for _ in 0..PARK_YIELDS_MAX {
        tokio::task::yield_now().await;
    }
    node.commit(2, &["first"]);
    let got = answer(task).await;
    assert_eq!(payloads(&got), vec!["first"]);
}

#[tokio::test]
async fn the_first_long_poll_of_a_partition_is_answered_by_a_commit_before_its_watcher_ran() {
    let node = sim_node();
    let mut consume = Box::pin(node.service.consume(request(Some(0), 10, LONG_WAIT)));
    // One poll parks it; no other task (the new watcher) runs before the
    // commit below.
    let first = std::future::poll_fn(|cx| Poll::Ready(consume.as_mut().poll(cx))).await;
    assert!(first.is_pending(), "nothing to take yet: parked");
    node.commit(0, &["late"]);
    let got = tokio::time::timeout(ANSWER_CEILING, consume)
        .await
        .expect("the parked consume was never answered")
        .expect("consume");
    assert_eq!(payloads(&got), vec!["late"]);
}

#[tokio::test]
async fn a_second_shutdown_changes_nothing() {
    let node = sim_node();
    node.commit(0, &["a"]);
    node.consume(Some(0), 1).await;
    node.service.shutdown();
    node.service.shutdown();
    assert!(node.consume(Some(0), 1).await.is_empty());
}

#[tokio::test]
async fn a_queue_long_poll_is_answered_by_a_commit_to_any_partition() {
    let node = sim_node();
    let task = node.parked_consume(None).await;
    node.commit(2, &["late"]);
    let got = answer(task).await;
    assert_eq!(got[0].partition, 2);
}

#[tokio::test]
async fn a_long_poll_is_answered_by_a_nack() {
    let node = sim_node();
    node.commit(0, &["a"]);
    let held = node.consume(Some(0), 1).await;
    let task = node.parked_consume(Some(0)).await;
    node.settle(&held[0], Settle::Nack).expect("nack");
    let got = answer(task).await;
    assert_eq!(offsets(&got), vec![0]);
}

#[tokio::test]
async fn a_long_poll_is_answered_by_a_lease_expiry() {
    // Shorter than the long poll, so the expiry comes first.
    let short = |create: &mut CreateTopic| create.visibility_timeout_ms = Some(5_000);
    let node = sim_node_over(orders_replica([HERE, HERE, HERE], short));
    node.commit(0, &["a"]);
    let held = node.consume(Some(0), 1).await;
    let task = node.parked_consume(Some(0)).await;
    node.clock.advance(5_000);
    let got = answer(task).await;
    assert_eq!(offsets(&got), vec![0]);
    assert_ne!(got[0].nonce, held[0].nonce);
}

#[tokio::test]
async fn a_long_poll_is_answered_by_an_ack_that_frees_a_cap_slot() {
    let node = sim_node();
    node.alter_topic(|alter| alter.max_in_flight_per_partition = Some(1));
    node.commit(0, &["a", "b"]);
    let held = node.consume(Some(0), 1).await;
    let task = node.parked_consume(Some(0)).await;
    node.settle(&held[0], Settle::Ack).expect("ack");
    let got = answer(task).await;
    assert_eq!(offsets(&got), vec![1]);
}

#[tokio::test]
async fn a_long_poll_answers_empty_when_its_wait_runs_out() {
    let node = sim_node();
    let task = node.parked_consume(Some(0)).await;
    node.clock.advance(LONG_WAIT.as_millis() as u64);
    assert!(answer(task).await.is_empty());
    assert_eq!(node.service.parked(TOPIC), 0);
}

#[tokio::test]
async fn pinned_waiters_are_served_before_topic_waiters() {
    let node = sim_node();
    let queue = node.parked_consume(None).await;
    let pinned = node.parked_consume(Some(0)).await;
    node.commit(0, &["one"]);
    let got = answer(pinned).await;
    assert_eq!(offsets(&got), vec![0]);
    node.commit(0, &["two"]);
    let got = answer(queue).await;
    assert_eq!(offsets(&got), vec![1]);
}

#[tokio::test]
async fn a_cancelled_long_poll_leaves_no_waiter_and_reserves_nothing() {
    let node = sim_node();
    let task = node.parked_consume(Some(0)).await;
    task.abort();
    assert!(task.await.is_err(), "the task was cancelled");
    assert_eq!(node.service.parked(TOPIC), 0);
    node.commit(0, &["a"]);
    assert_eq!(offsets(&node.consume(Some(0), 1).await), vec![0]);
}

#[tokio::test]
async fn a_record_handed_to_a_consume_cancelled_before_it_ran_is_released() {
    let node = sim_node();
    node.commit(0, &["a"]);
    let held = node.consume(Some(0), 1).await;
    let task = node.parked_consume(Some(0)).await;
    // The nack hands the record to the parked consume at once, and the
    // consume is cancelled before it runs to take it.
    node.settle(&held[0], Settle::Nack).expect("nack");
    task.abort();
    assert!(task.await.is_err(), "the task was cancelled");
    let got = node.consume(Some(0), 1).await;
    assert_eq!(offsets(&got), vec![0]);
    assert_eq!(node.service.gauges()[0].in_flight, 1);
}

#[tokio::test]
async fn shutdown_answers_parked_consumes_empty() {
    let node = sim_node();
    let task = node.parked_consume(Some(0)).await;
    node.service.shutdown();
    assert!(answer(task).await.is_empty());
    node.commit(0, &["a"]);
    assert!(node.consume(Some(0), 1).await.is_empty(), "stopped");
}

#[tokio::test]
async fn a_replay_reads_a_record_without_leasing_it() {
    let node = sim_node();
    node.commit(0, &["a"]);
    let record = node.service.replay(TOPIC, 0, 0).await.expect("replay");
    assert_eq!(record.map(|r| r.payload), Some(b"a".to_vec()));
    assert_eq!(offsets(&node.consume(Some(0), 1).await), vec![0]);
}

#[tokio::test]
async fn a_replay_of_a_leased_record_leaves_the_lease_alone() {
    let node = sim_node();
    node.commit(0, &["a"]);
    let got = node.consume(Some(0), 1).await;
    assert!(
        node.service
            .replay(TOPIC, 0, 0)
            .await
            .expect("replay")
            .is_some()
    );
    node.settle(&got[0], Settle::Ack)
        .expect("the lease is intact");
}

#[tokio::test]
async fn a_replay_past_the_end_is_none() {
    let node = sim_node();
    node.commit(0, &["a"]);
    assert_eq!(node.service.replay(TOPIC, 0, 1).await, Ok(None));
}

#[tokio::test]
async fn a_replay_of_an_offset_retention_deleted_is_gone() {
    let node = sim_node();
    node.commit(0, &["a", "b"]);
    let log = node
        .logs
        .get(&Destination::new(TOPIC, 0))
        .expect("open log");
    log.sweep_retention(1_000 + 7_200_000, 3_600_000)
        .expect("sweep");
    assert_eq!(
        node.service.replay(TOPIC, 0, 0).await,
        Err(ReplayError::Gone { offset: 0 })
    );
}

#[tokio::test]
async fn a_consume_behind_retention_jumps_to_the_oldest_record_and_counts_the_gap() {
    let node = sim_node();
    node.commit(0, &["a", "b", "c"]);
    let log = node
        .logs
        .get(&Destination::new(TOPIC, 0))
        .expect("open log");
    log.sweep_retention(1_000 + 7_200_000, 3_600_000)
        .expect("sweep");
    node.commit(0, &["d"]);
    let got = node.consume(Some(0), 10).await;
    assert_eq!(offsets(&got), vec![3]);
    let gauges = node.service.gauges();
    assert_eq!(gauges[0].dropped, 3);
    assert_eq!(gauges[0].lag, 1);
}

#[tokio::test]
async fn a_damaged_record_is_skipped_and_counted() {
    let (dir, node) = temp_node_without_tail_cache();
    node.commit(0, &["good"]);
    let segment = dir
        .path()
        .join("topics/orders/p00000")
        .join(segment_file_name(0));
    // The committed bytes, not the file's size: zeros are prepared after.
    let frame_start = node
        .logs
        .get(&Destination::new(TOPIC, 0))
        .expect("open log")
        .stats()
        .expect("stats")
        .size_bytes;
    node.commit(0, &["damaged-record"]);
    node.commit(0, &["after"]);
    let mut bytes = std::fs::read(&segment).expect("read segment");
    bytes[frame_start as usize + 40] ^= 0xff;
    std::fs::write(&segment, &bytes).expect("write segment");
    let got = node.consume(Some(0), 10).await;
    assert_eq!(payloads(&got), vec!["good", "after"]);
    assert_eq!(node.service.gauges()[0].corrupt_skipped_total, 1);
    for delivery in &got {
        node.settle(delivery, Settle::Ack).expect("ack");
    }
    assert_eq!(node.service.gauges()[0].lag, 0, "the frontier passed it");
}

#[tokio::test]
async fn a_damaged_record_replays_as_unreadable() {
    let (dir, node) = temp_node_without_tail_cache();
    node.commit(0, &["damaged-record"]);
    let segment = dir
        .path()
        .join("topics/orders/p00000")
        .join(segment_file_name(0));
    let mut bytes = std::fs::read(&segment).expect("read segment");
    bytes[40] ^= 0xff;
    std::fs::write(&segment, &bytes).expect("write segment");
    assert_eq!(
        node.service.replay(TOPIC, 0, 0).await,
        Err(ReplayError::Unreadable { offset: 0 })
    );
}

#[tokio::test]
async fn gauges_count_only_live_leases() {
    let node = sim_node();
    node.commit(0, &["a"]);
    node.consume(Some(0), 1).await;
    node.clock.advance(VISIBILITY_MS);
    assert_eq!(node.service.gauges()[0].in_flight, 0);
}

#[tokio::test]
async fn a_recreated_topic_is_served_from_a_fresh_shard() {
    // The old incarnation's directory is renamed aside: a real file system.
    let (_dir, node) = temp_node();
    node.commit(0, &["old"]);
    let old = node.consume(Some(0), 1).await;
    node.recreate_topic(0xb2);
    node.commit(0, &["new"]);
    let got = node.consume(Some(0), 1).await;
    assert_eq!(payloads(&got), vec!["new"]);
    assert_eq!(
        node.settle(&old[0], Settle::Ack),
        Err(SettleError::LeaseGone)
    );
    let gauges = node.service.gauges();
    assert_eq!(gauges.len(), 1, "the old incarnation's shard is gone");
    assert_eq!(gauges[0].in_flight, 1);
}

#[tokio::test]
async fn gauges_report_lag_leases_and_acks_ahead() {
    let node = sim_node();
    node.commit(0, &["a", "b", "c", "d"]);
    let got = node.consume(Some(0), 3).await;
    node.settle(&got[2], Settle::Ack).expect("ack");
    let gauges = node.service.gauges();
    assert_eq!(gauges.len(), 1);
    let gauge = &gauges[0];
    assert_eq!((gauge.partition, gauge.lag), (0, 4));
    assert_eq!((gauge.in_flight, gauge.acked_ahead), (2, 1));
}

#[tokio::test]
async fn acks_survive_a_restart_through_the_state_store() {
    let sim = SimDisk::new(11);
    let disk: Arc<dyn Disk> = Arc::new(sim);
    let replica = replica();
    let before = Node::on(
        Arc::clone(&disk),
        Path::new("/node"),
        Arc::clone(&replica),
        5,
    );
    before.commit(0, &["a", "b", "c", "d"]);
    let got = before.consume(Some(0), 3).await;
    before.settle(&got[0], Settle::Ack).expect("ack 0");
    before.settle(&got[2], Settle::Ack).expect("ack 2");
    before.service.shutdown();
    before.logs.close_all();
    drop(before);
    let after = Node::on(disk, Path::new("/node"), replica, 6);
    let again = after.consume(Some(0), 10).await;
    assert_eq!(
        offsets(&again),
        vec![1, 3],
        "acked records are not redelivered"
    );
}

#[tokio::test]
async fn acks_written_by_a_store_tick_survive_a_crash() {
    let sim = SimDisk::new(11);
    let disk: Arc<dyn Disk> = Arc::new(sim.clone());
    let replica = replica();
    let before = Node::on(
        Arc::clone(&disk),
        Path::new("/node"),
        Arc::clone(&replica),
        5,
    );
    before.commit(0, &["a", "b", "c"]);
    let got = before.consume(Some(0), 3).await;
    before.settle(&got[1], Settle::Ack).expect("ack 1");
    // A tick at the durability point writes the touched partition out.
    let now_ms = before.clock.now_ms();
    before.store.tick(now_ms);
    before.store.tick(now_ms + 2_000);
    sim.crash(narad_disk::sim::Tear::None);
    drop(before);
    let after = Node::on(disk, Path::new("/node"), replica, 6);
    let again = after.consume(Some(0), 10).await;
    assert_eq!(offsets(&again), vec![0, 2]);
}

/// What a competing consumer does with the first delivery of an offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum First {
    Ack,
    Nack,
    /// Leave it leased, as a crashed consumer would; the lease expires.
    Abandon,
}

/// Runs `consumers` competing long-poll consumers against a producer of
/// 252 records over three partitions; `first` says what a consumer does
/// with the first delivery of each offset, and every later delivery is
/// acked. With abandoned leases the test moves the clock so they expire.
/// Returns the `(partition, offset)` pairs whose ack succeeded, sorted,
/// once every record is acked.
async fn compete(consumers: usize, first: fn(u64) -> First) -> (Arc<Node>, Vec<(u32, u64)>) {
    const RECORDS: usize = 252;
    let clock_moves = (0..RECORDS as u64).any(|offset| first(offset) == First::Abandon);
    let node = Arc::new(sim_node());
    let acked = Arc::new(parking_lot::Mutex::new(Vec::<(u32, u64)>::new()));
    let seen = Arc::new(parking_lot::Mutex::new(std::collections::HashSet::new()));
    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks: Vec<_> = (0..consumers)
        .map(|_| {
            let node = Arc::clone(&node);
            let acked = Arc::clone(&acked);
            let seen = Arc::clone(&seen);
            let stopping = Arc::clone(&stopping);
            tokio::spawn(async move {
                loop {
                    let got = node
                        .service
                        .consume(request(None, 7, LONG_WAIT))
                        .await
                        .expect("consume");
                    if got.is_empty() {
                        if stopping.load(std::sync::atomic::Ordering::Acquire) {
                            assert_eq!(acked.lock().len(), RECORDS, "stopped early");
                            return;
                        }
                        // The moving clock ended the long poll.
                        continue;
                    }
                    for delivery in &got {
                        let key = (delivery.partition, delivery.record.offset);
                        let how = if seen.lock().insert(key) {
                            first(key.1)
                        } else {
                            First::Ack
                        };
                        let outcome = match how {
                            First::Abandon => continue,
                            First::Nack => node.settle(delivery, Settle::Nack),
                            First::Ack => node.settle(delivery, Settle::Ack),
                        };
                        match outcome {
                            Ok(()) if how == First::Ack => acked.lock().push(key),
                            Ok(()) => {}
                            // Only a moving clock lets a lease lapse
                            // before its ack; the record comes back.
                            Err(SettleError::LeaseGone) if clock_moves => {}
                            Err(error) => panic!("settle of a live lease failed: {error}"),
                        }
                    }
                }
            })
        })
        .collect();
    let producer = {
        let node = Arc::clone(&node);
        tokio::task::spawn_blocking(move || {
            for round in 0..RECORDS / 6 {
                node.commit((round % 3) as u32, &["r"; 6]);
            }
        })
    };
    producer.await.expect("producer");
    for _ in 0..PARK_YIELDS_MAX {
        if acked.lock().len() == RECORDS {
            break;
        }
        if clock_moves {
            node.clock.advance(1_000);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    stopping.store(true, std::sync::atomic::Ordering::Release);
    let service = Arc::clone(&node.service);
    tokio::task::spawn_blocking(move || service.shutdown())
        .await
        .expect("shutdown");
    for task in tasks {
        task.await.expect("consumer");
    }
    let mut acked = acked.lock().clone();
    acked.sort_unstable();
    (node, acked)
}

fn every_record_of_compete() -> Vec<(u32, u64)> {
    (0..3u32)
        .flat_map(|partition| (0..84u64).map(move |offset| (partition, offset)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competing_consumers_ack_every_record_exactly_once() {
    let (node, acked) = compete(4, |_| First::Ack).await;
    assert_eq!(acked, every_record_of_compete());
    assert!(
        node.service
            .gauges()
            .iter()
            .all(|gauge| gauge.lag == 0 && gauge.in_flight == 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competing_consumers_that_nack_still_ack_every_record_exactly_once() {
    let (_, acked) = compete(4, |offset| {
        if offset % 3 == 0 {
            First::Nack
        } else {
            First::Ack
        }
    })
    .await;
    assert_eq!(acked, every_record_of_compete());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competing_consumers_that_abandon_leases_still_ack_every_record_exactly_once() {
    let (_, acked) = compete(4, |offset| {
        if offset % 4 == 1 {
            First::Abandon
        } else {
            First::Ack
        }
    })
    .await;
    assert_eq!(acked, every_record_of_compete());
}

/// How long the hold tests hold a record.
const HOLD: Duration = Duration::from_millis(500);

#[tokio::test]
async fn a_held_record_is_skipped_by_consumes_until_its_hold_lapses() {
    let node = sim_node();
    node.commit(0, &["a"]);

    let held = node.service.hold(TOPIC, 1, HOLD);

    assert_eq!(held.len(), 1);
    assert!(node.consume(None, 1).await.is_empty());
    node.clock.advance(499);
    assert!(node.consume(None, 1).await.is_empty());
    node.clock.advance(1);
    assert_eq!(payloads(&node.consume(None, 1).await), vec!["a"]);
}

#[tokio::test]
async fn holds_are_bounded_by_the_records_ready() {
    let node = sim_node();
    node.commit(0, &["a", "b", "c"]);
    let leased = node.consume(Some(0), 1).await;
    node.settle(&node.consume(Some(0), 1).await[0], Settle::Ack)
        .expect("ack");

    let held = node.service.hold(TOPIC, 5, HOLD);

    assert_eq!(leased.len(), 1);
    assert_eq!(
        held.iter().map(|held| held.offset).collect::<Vec<_>>(),
        vec![2],
        "one leased, one acked ahead: one of three is ready"
    );
}

#[tokio::test]
async fn a_claim_turns_a_hold_into_a_lease_of_the_visibility_timeout() {
    let node = sim_node();
    node.commit(1, &["a"]);
    let held = node.service.hold(TOPIC, 1, HOLD);

    let claimed = node.service.claim(TOPIC, &held, 1).await;

    assert_eq!(payloads(&claimed), vec!["a"]);
    assert_eq!(claimed[0].nonce, held[0].nonce);
    node.clock.advance(VISIBILITY_MS - 1);
    assert!(node.consume(None, 1).await.is_empty(), "still leased");
    node.settle(&claimed[0], Settle::Ack)
        .expect("the claim's lease");
}

#[tokio::test]
async fn a_claim_after_the_hold_lapsed_gets_nothing_and_the_record_is_ready_again() {
    let node = sim_node();
    node.commit(0, &["a"]);
    let held = node.service.hold(TOPIC, 1, HOLD);
    node.clock.advance(500);

    let claimed = node.service.claim(TOPIC, &held, 1).await;

    assert!(claimed.is_empty());
    assert_eq!(payloads(&node.consume(None, 1).await), vec!["a"]);
}

#[tokio::test]
async fn holds_past_the_claims_max_are_released_at_once() {
    let node = sim_node();
    node.commit(0, &["a", "b"]);
    let held = node.service.hold(TOPIC, 2, HOLD);
    assert_eq!(held.len(), 2);

    let claimed = node.service.claim(TOPIC, &held, 1).await;

    assert_eq!(payloads(&claimed), vec!["a"]);
    assert_eq!(payloads(&node.consume(None, 1).await), vec!["b"]);
}

#[tokio::test]
async fn a_parked_consume_gets_a_held_record_when_its_hold_lapses() {
    let node = sim_node();
    node.commit(0, &["a"]);
    let held = node.service.hold(TOPIC, 1, HOLD);
    assert_eq!(held.len(), 1);
    let task = node.parked_consume(None).await;

    node.clock.advance(500);

    assert_eq!(payloads(&answer(task).await), vec!["a"]);
}
