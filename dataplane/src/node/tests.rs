//! A data node's incarnation housekeeping, on a real directory (the
//! simulated disk cannot rename directories): a deleted topic's directory
//! is quarantined and removed only after the leader confirms, and a
//! directory of a topic the replica never had is retired and removed once
//! the leader confirms its incarnation gone.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use narad_disk::Disk;
use narad_disk::portable::PortableDisk;
use narad_meta::{Actor, Command, CreateTopic, DeleteTopic};
use narad_plog::LogConfig;
use tempfile::TempDir;

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use tower::ServiceExt;

use super::{DataNode, DataNodeConfig, HousekeepingConfig, NodeServices};
use crate::consume::ahead::{ConsumerStateConfig, DURABLE_INTERVAL_MIN};
use crate::dispatch::{
    CommitDone, CommitOrder, CommitOutcome, CommitTarget, GoneQuestion, LeaderConfirm,
    ReplicaLeader, WalPayload,
};
use crate::metadata::MetadataReplica;
use crate::partitions::{LocalLogs, partition_dir};
use crate::testing::{apply, create_command, id_text, place};
use crate::topology::Destination;

const NODE: u64 = 1;
/// The incarnation id of `orders` (and of the orphaned `ghost`), as bits.
const ORDERS_ID: u64 = 0xd4;

/// A ceiling that turns a hang into a failure; no speed is asserted.
const WAIT_MAX: Duration = Duration::from_secs(20);

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_MAX;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Answers "not gone" until opened, then what the replica says.
#[derive(Debug)]
struct GatedLeader {
    open: AtomicBool,
    asked: AtomicUsize,
    replica: ReplicaLeader,
}

impl LeaderConfirm for GatedLeader {
    fn confirm_gone(&self, question: &GoneQuestion) -> Result<bool, String> {
        self.asked.fetch_add(1, Ordering::AcqRel);
        if self.open.load(Ordering::Acquire) {
            self.replica.confirm_gone(question)
        } else {
            Ok(false)
        }
    }
}

fn portable() -> Arc<dyn Disk> {
    Arc::new(PortableDisk::new(1).expect("portable disk"))
}

/// The housekeeping cadences of most tests here: every few milliseconds.
fn quick_housekeeping() -> HousekeepingConfig {
    HousekeepingConfig {
        tick: Duration::from_millis(5),
        stats_interval: Duration::from_millis(5),
        sweep_interval: Duration::from_millis(5),
    }
}

/// A standalone node under `data_dir` whose replica holds `topics`, every
/// partition placed on the node, from the start (so the housekeeping's
/// first tick sees them), whose housekeeping ticks every few milliseconds
/// and asks `GatedLeader` (returned, closed).
fn start(
    disk: Arc<dyn Disk>,
    data_dir: &Path,
    topics: Vec<CreateTopic>,
) -> (DataNode, Arc<GatedLeader>) {
    let mut config = DataNodeConfig::new(data_dir);
    config.housekeeping = quick_housekeeping();
    start_with(disk, config, topics)
}

/// [`start`] with `config`.
fn start_with(
    disk: Arc<dyn Disk>,
    config: DataNodeConfig,
    topics: Vec<CreateTopic>,
) -> (DataNode, Arc<GatedLeader>) {
    let mut services = NodeServices::standalone(disk, NODE);
    for topic in topics {
        place(&services.replica, topic, NODE);
    }
    let leader = Arc::new(GatedLeader {
        open: AtomicBool::new(false),
        asked: AtomicUsize::new(0),
        replica: ReplicaLeader::new(Arc::clone(&services.replica)),
    });
    services.leader = Arc::clone(&leader) as Arc<dyn LeaderConfirm>;
    let node = DataNode::start(services, config).expect("node starts");
    (node, leader)
}

fn topics(dir: &TempDir) -> PathBuf {
    dir.path().join("topics")
}

fn stale_copy(dir: &TempDir, topic: &str, id: &str) -> PathBuf {
    topics(dir).join(format!("{topic}.stale-{id}"))
}

fn replica_of(node: &DataNode) -> &MetadataReplica {
    &node.api().replica
}

#[test]
fn a_deleted_topics_directory_is_quarantined_then_removed_once_the_leader_confirms() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let orders = create_command("orders", ORDERS_ID, 3);
    let (node, leader) = start(portable(), dir.path(), vec![orders]);
    let replica = replica_of(&node);
    // The gauges are set at the end of a tick: from then on the
    // housekeeping remembers `orders`.
    wait_until("the housekeeping's first tick", || {
        node.api()
            .metrics
            .render()
            .contains("narad_quarantined_copies")
    });
    node.logs()
        .resolve(
            &Destination::new("orders", 0),
            Some(&Arc::from(id_text(ORDERS_ID))),
        )
        .expect("log opens");
    assert!(topics(&dir).join("orders").exists());

    apply(
        replica,
        Command::DeleteTopic(DeleteTopic {
            actor: Actor::SecurityOff,
            name: "orders".into(),
            expected_id: None,
        }),
    );
    let stale = stale_copy(&dir, "orders", &id_text(ORDERS_ID));
    wait_until("the directory renamed to its quarantined name", || {
        stale.exists() && !topics(&dir).join("orders").exists()
    });
    let metrics = &node.api().metrics;
    wait_until("the quarantine gauge to count the copy", || {
        metrics.render().contains("narad_quarantined_copies 1")
    });

    leader.open.store(true, Ordering::Release);
    wait_until("the quarantined copy removed", || !stale.exists());
    node.shutdown();
}

#[test]
fn a_directory_of_a_topic_the_replica_never_had_is_kept_until_the_leader_confirms_it_gone() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let disk = portable();
    let earlier = LocalLogs::new(
        Arc::clone(&disk),
        dir.path(),
        LogConfig::default(),
        crate::testing::system_clock(),
    );
    earlier
        .resolve(
            &Destination::new("ghost", 0),
            Some(&Arc::from(id_text(ORDERS_ID))),
        )
        .expect("log opens");
    earlier.close_all();

    let (node, leader) = start(disk, dir.path(), Vec::new());
    wait_until("the leader asked twice", || {
        leader.asked.load(Ordering::Acquire) >= 2
    });
    assert!(topics(&dir).join("ghost").exists());

    leader.open.store(true, Ordering::Release);
    let stale = stale_copy(&dir, "ghost", &id_text(ORDERS_ID));
    wait_until("the orphan directory retired and swept", || {
        !topics(&dir).join("ghost").exists() && !stale.exists()
    });
    node.shutdown();
}

/// Records produced, consumed and acked on `orders` partition 0 before it
/// is deleted.
const ACKED: usize = 5;

/// How often the consumer state store of [`consuming_node`] levels
/// `consumer.offset`: after a burst of acks one levelling stays owed for
/// up to this long, as it does for 30 s by default.
const OFFSET_LEVEL_INTERVAL: Duration = Duration::from_millis(200);

/// A node with security off whose consumer state store writes out every
/// few milliseconds, with `housekeeping`.
fn consuming_node(data_dir: &Path, housekeeping: HousekeepingConfig) -> DataNode {
    let mut config = DataNodeConfig::new(data_dir);
    config.api.security = false;
    config.housekeeping = housekeeping;
    config.consumer_state = ConsumerStateConfig {
        tick: Duration::from_millis(5),
        durable_interval: DURABLE_INTERVAL_MIN,
        offset_level_interval: OFFSET_LEVEL_INTERVAL,
        ..ConsumerStateConfig::default()
    };
    let orders = create_command("orders", ORDERS_ID, 3);
    let (node, _leader) = start_with(portable(), config, vec![orders]);
    wait_until("the housekeeping's first tick", || {
        node.api()
            .metrics
            .render()
            .contains("narad_quarantined_copies")
    });
    node
}

async fn call(router: &axum::Router, request: Request<Body>) -> (StatusCode, String) {
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let body = to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Produces [`ACKED`] records to `orders`, then consumes and acks each:
/// the acks leave the partition's consumer state owed to the disk.
fn produce_consume_ack(node: &DataNode, runtime: &tokio::runtime::Runtime) {
    let router = node.router();
    runtime.block_on(async {
        for n in 0..ACKED {
            let request = Request::post("/v1/topics/orders/produce?partition=0")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(format!("{{\"n\":{n}}}")))
                .expect("request");
            assert_eq!(call(&router, request).await.0, StatusCode::ACCEPTED);
        }
    });
    wait_until("the records committed", || node.drained());
    runtime.block_on(async {
        for _ in 0..ACKED {
            let request = Request::get("/v1/topics/orders/consume?partition=0")
                .body(Body::empty())
                .expect("request");
            let (status, body) = call(&router, request).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            let message: serde_json::Value = serde_json::from_str(&body).expect("message");
            let handle = message["receipt_handle"].as_str().expect("receipt_handle");
            let request = Request::post(format!("/v1/topics/orders/ack?receipt_handle={handle}"))
                .header("x-narad-client", "test")
                .body(Body::empty())
                .expect("request");
            assert_eq!(call(&router, request).await.0, StatusCode::NO_CONTENT);
        }
    });
}

#[test]
fn a_lone_local_commit_runs_on_the_dispatcher_thread_and_concurrent_ones_on_workers() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let node = consuming_node(dir.path(), quick_housekeeping());
    let runtime = runtime();
    let router = node.router();
    let status = Arc::clone(node.dispatch_status());
    let produce = |partition: u32, n: u64| {
        Request::post(format!("/v1/topics/orders/produce?partition={partition}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(format!("{{\"n\":{n}}}")))
            .expect("request")
    };
    // One record at a time, each committed before the next: every commit
    // is the only one in flight.
    for n in 0..5 {
        let accepted = runtime.block_on(call(&router, produce(0, n))).0;
        assert_eq!(accepted, StatusCode::ACCEPTED);
        wait_until("the record committed", || node.drained());
        assert_eq!(
            status.local_commits_run_here.load(Ordering::Relaxed),
            n + 1,
            "a lone commit runs on the dispatcher's thread"
        );
    }
    // One batch for three partitions is durable in one group commit and
    // goes out as three commits at once: none runs on the dispatcher's
    // thread.
    let before = status.local_commits_run_here.load(Ordering::Relaxed);
    let batch = Request::post("/v1/topics/orders/produce/batch")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            r#"{"messages":[{"payload":1,"partition":0},{"payload":2,"partition":1},{"payload":3,"partition":2}]}"#,
        ))
        .expect("request");
    let (accepted, body) = runtime.block_on(call(&router, batch));
    assert_eq!(accepted, StatusCode::ACCEPTED, "{body}");
    wait_until("the records committed", || node.drained());
    let after = status.local_commits_run_here.load(Ordering::Relaxed);
    assert!(
        after - before < 3,
        "{} of 3 concurrent commits ran on the dispatcher's thread",
        after - before
    );
}

fn delete_orders(node: &DataNode) {
    apply(
        replica_of(node),
        Command::DeleteTopic(DeleteTopic {
            actor: Actor::SecurityOff,
            name: "orders".into(),
            expected_id: None,
        }),
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn no_consumer_state_write_reaches_a_deleted_topics_directory() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let node = consuming_node(dir.path(), quick_housekeeping());
    let runtime = runtime();
    produce_consume_ack(&node, &runtime);
    let store = Arc::clone(node.consume().consumer_state());
    let partition = partition_dir(dir.path(), "orders", 0);
    assert!(store.is_attached(&partition));

    delete_orders(&node);
    let stale = stale_copy(&dir, "orders", &id_text(ORDERS_ID));
    wait_until("the directory renamed to its quarantined name", || {
        stale.exists() && !topics(&dir).join("orders").exists()
    });
    assert!(!store.is_attached(&partition), "detached before the rename");
    // The levelling the acks left owed comes due: had the partition
    // stayed attached, it would have been tried, and failed, by now.
    std::thread::sleep(OFFSET_LEVEL_INTERVAL * 2);
    assert_eq!(store.disk_failures(), 0);
    assert!(!topics(&dir).join("orders").exists());
    node.shutdown();
}

#[test]
fn a_deleted_topics_partition_logs_close_when_the_replica_applies_the_delete() {
    let dir = tempfile::tempdir().expect("temporary directory");
    // No periodic tick comes within the test: only the replica's change
    // can wake the housekeeping.
    let hour = Duration::from_secs(3_600);
    let node = consuming_node(
        dir.path(),
        HousekeepingConfig {
            tick: hour,
            stats_interval: hour,
            sweep_interval: hour,
        },
    );
    let runtime = runtime();
    produce_consume_ack(&node, &runtime);
    let orders_0 = Destination::new("orders", 0);
    assert!(node.logs().get(&orders_0).is_some());
    assert_eq!(node.logs().open_count(), 1);

    delete_orders(&node);
    wait_until("the deleted topic's logs closed", || {
        node.logs().open_count() == 0
    });
    assert!(node.logs().get(&orders_0).is_none());
    let partition = partition_dir(dir.path(), "orders", 0);
    assert!(!node.consume().consumer_state().is_attached(&partition));
    assert_eq!(node.consume().consumer_state().disk_failures(), 0);
    node.shutdown();
}

/// Another node's commit target whose first `start` panics, on the
/// dispatcher's thread (a bug in a target); every order after it is
/// recorded and reported committed.
#[derive(Debug, Default)]
struct PanicsOnce {
    started: AtomicUsize,
    committed: std::sync::Mutex<Vec<u64>>,
}

impl CommitTarget for PanicsOnce {
    fn start(&self, order: CommitOrder<WalPayload>, done: CommitDone) {
        if self.started.fetch_add(1, Ordering::AcqRel) == 0 {
            panic!("a bug in a commit target, injected by the test");
        }
        self.committed
            .lock()
            .expect("committed")
            .extend(order.records.iter().map(|held| held.seq));
        done.finish(order, CommitOutcome::Committed);
    }
}

#[test]
fn a_dispatcher_that_panics_starts_again_from_its_checkpoint_and_commits_every_record() {
    const RECORDS: u64 = 20;
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut services = NodeServices::standalone(portable(), NODE);
    // Every partition is another node's: each commit goes through the
    // target that panics once.
    place(
        &services.replica,
        create_command("orders", ORDERS_ID, 3),
        NODE + 1,
    );
    let target = Arc::new(PanicsOnce::default());
    services.remote = Arc::clone(&target) as Arc<dyn CommitTarget>;
    let mut config = DataNodeConfig::new(dir.path());
    config.api.security = false;
    config.housekeeping = quick_housekeeping();
    let node = DataNode::start(services, config).expect("node starts");
    let runtime = runtime();
    let router = node.router();
    for n in 0..RECORDS {
        let request = Request::post(format!("/v1/topics/orders/produce?partition={}", n % 3))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(format!("{{\"n\":{n}}}")))
            .expect("request");
        let (status, body) = runtime.block_on(call(&router, request));
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    wait_until("every record committed", || node.drained());

    assert_eq!(node.dispatch_status().restarts.load(Ordering::Relaxed), 1);
    let mut committed = target.committed.lock().expect("committed").clone();
    committed.sort_unstable();
    committed.dedup();
    assert_eq!(
        committed.len() as u64,
        RECORDS,
        "every accepted record is committed after the restart: {committed:?}"
    );
    let scrape = Request::get("/metrics")
        .body(Body::empty())
        .expect("request");
    let (status, metrics) = runtime.block_on(call(&router, scrape));
    assert_eq!(status, StatusCode::OK);
    assert!(
        metrics.contains("narad_dispatch_restarts_total 1"),
        "{metrics}"
    );
    node.shutdown();
}
