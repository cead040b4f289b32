//! Forwarding end to end: two data nodes on simulated disks, joined by
//! loopback QUIC. Records are committed on node B; node A's HTTP router
//! consumes (queue-style and pinned), replays, acks (single and batch),
//! nacks and describes them through B's forward service. Then the owner
//! dead (`503`) and the owner silent (`502`).
//!
//! Waits here are ceilings that turn a hang into a failure, never timing
//! assertions. Where time decides (holds, token TTLs, claims, queued acks'
//! budgets, the memory of owners refusing `AckBatch`), the parts run on a
//! [`ManualClock`] the test moves; the polls that wait for an event (a
//! commit, a park, a notification) sleep on Tokio's timer, since they
//! decide nothing.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{HeaderMap, Request, StatusCode};
use bytes::Bytes;
use narad_clock::{Clock, ManualClock, SystemClock};
use narad_disk::Disk;
use narad_disk::sim::SimDisk;
use narad_meta::Command;
use narad_protocol::{ClusterAuth, ClusterSecret, Node, NodeConfig};
use serde_json::Value;
use tower::ServiceExt;

use super::coalesce::ACK_BATCH_REFUSAL_MEMORY;
use super::tokens::CLAIM_HOLD;
use super::{ForwardError, ForwardService, Forwarder, SETTLE_BUDGET, StatsAsk};
use crate::admin::LocalAdmin;
use crate::dispatch::{NoRemoteTarget, ReplicaLeader};
use crate::fanout::{CursorKey, CursorReport};
use crate::http::ApiConfig;
use crate::http::topics::{StartFigure, start_offsets};
use crate::ingress::ProduceMessage;
use crate::metadata::MetadataReplica;
use crate::node::{DataNode, DataNodeConfig, NodeServices};
use crate::remote::AddressTable;
use crate::testing::{apply, assign, create_command, mark_dead, register, topic};
use crate::topology::{Destination, NodeId};

const A: NodeId = 1;
const B: NodeId = 2;
/// Owns `ghost`; membership says it is dead.
const DEAD: NodeId = 3;
/// Owns `silent`; alive, but its address answers nothing.
const SILENT: NodeId = 4;
/// Owns `nowhere`; alive, but no address is known for it.
const NOWHERE: NodeId = 5;

/// Turns a hang into a failure; never a timing assertion.
const CEILING: Duration = Duration::from_secs(30);

const LEASE_GONE: &str = "receipt handle no longer matches an active reservation";

/// Node `node`'s replica of the metadata every node holds: `remote` (3
/// partitions, all on B), `split` (0 on A, 1 and 2 on B), `pair` (0 on the
/// silent node, 1 and 2 on B), `ghost` (on the dead node), `silent` (on the
/// silent node), `nowhere` (on the node without an address).
fn replica_of(node: NodeId) -> Arc<MetadataReplica> {
    let replica = Arc::new(MetadataReplica::new(node));
    for member in [A, B, DEAD, SILENT, NOWHERE] {
        register(&replica, member);
    }
    topic(&replica, "remote", 0xa1, 3, B);
    apply(
        &replica,
        Command::CreateTopic(create_command("split", 0xe5, 3)),
    );
    assign(&replica, "split", &[(0, A), (1, B), (2, B)]);
    apply(
        &replica,
        Command::CreateTopic(create_command("pair", 0xe6, 3)),
    );
    assign(&replica, "pair", &[(0, SILENT), (1, B), (2, B)]);
    topic(&replica, "ghost", 0xe7, 3, DEAD);
    topic(&replica, "silent", 0xe8, 3, SILENT);
    topic(&replica, "nowhere", 0xe9, 3, NOWHERE);
    // Dead only once its partitions are placed: the metastore places
    // partitions on live members alone.
    mark_dead(&replica, DEAD);
    replica
}

fn auth() -> ClusterAuth {
    ClusterAuth::Secret(ClusterSecret::new(vec![9; 32]).expect("32 bytes"))
}

/// A clock the test moves, at 1 s.
fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(1_000))
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).expect("fits")
}

fn data_node(id: NodeId, seed: u64, clock: Arc<dyn Clock>) -> (DataNode, Arc<MetadataReplica>) {
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(seed));
    let replica = replica_of(id);
    let mut config = DataNodeConfig::new(Path::new("/node"));
    config.seed = seed;
    config.consume_seed = seed;
    config.api = ApiConfig {
        security: false,
        ..ApiConfig::default()
    };
    let services = NodeServices {
        disk,
        replica: Arc::clone(&replica),
        leader: Arc::new(ReplicaLeader::new(Arc::clone(&replica))),
        remote: Arc::new(NoRemoteTarget),
        admin: Arc::new(LocalAdmin::new(Arc::clone(&replica))),
        clock,
    };
    let node = tokio::task::block_in_place(|| DataNode::start(services, config)).expect("start");
    (node, replica)
}

/// Node A (requester) and node B (owner of `remote` and `split`/1-2), their
/// transports joined; A finds B, and the silent node at a UDP socket that
/// never answers.
struct Cluster {
    a: DataNode,
    b: DataNode,
    router: Router,
    a_transport: Arc<Node>,
    b_transport: Arc<Node>,
    b_service: Arc<ForwardService>,
    inbox: Arc<super::tokens::TokenInbox>,
    _silent: UdpSocket,
}

impl Cluster {
    /// Every part on the system clock.
    fn start() -> Self {
        Self::start_on(Arc::new(SystemClock::new()))
    }

    /// B, and A's token inbox and forwarder, on `clock`: holds, token TTLs
    /// and claims lapse only when the test moves it. A's data node stays
    /// on the system clock, so its long polls and re-probes still end.
    fn start_on_manual_clock(clock: &Arc<ManualClock>) -> Self {
        Self::start_on(Arc::clone(clock) as Arc<dyn Clock>)
    }

    fn start_on(clock: Arc<dyn Clock>) -> Self {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let (a, a_replica) = data_node(A, 11, Arc::new(SystemClock::new()));
        let (b, b_replica) = data_node(B, 12, Arc::clone(&clock));
        let service = ForwardService::with_consume(
            Arc::clone(b.consume()),
            Arc::clone(b.logs()),
            b_replica,
            Arc::clone(b.fanout()),
        );
        let b_transport = Arc::new(
            Node::bind(
                NodeConfig::new(loopback, auth()),
                service.route(narad_protocol::Router::new()),
            )
            .expect("bind B"),
        );
        service.attach_transport(&b_transport);
        let inbox = super::tokens::TokenInbox::new(Arc::clone(&clock));
        let a_transport = Arc::new(
            Node::bind(
                NodeConfig::new(loopback, auth()),
                inbox.route(narad_protocol::Router::new()),
            )
            .expect("bind A"),
        );
        let silent = UdpSocket::bind(loopback).expect("bind a silent socket");
        let addresses = Arc::new(AddressTable::new());
        addresses.set(B, b_transport.local_addr());
        addresses.set(SILENT, silent.local_addr().expect("address"));
        let forwarder = Forwarder::new(Arc::clone(&a_transport), addresses, a_replica, clock);
        forwarder.use_tokens(Arc::clone(&inbox));
        assert!(a.api().forwarder.set(forwarder).is_ok());
        let router = a.router();
        Self {
            a,
            b,
            router,
            a_transport,
            b_transport,
            b_service: service,
            inbox,
            _silent: silent,
        }
    }

    /// Produces `payload` on `node` into `topic`/`partition` and waits until
    /// the owner committed it.
    async fn produce_on(node: &DataNode, topic: &str, partition: u32, payload: &str) {
        let meta = node.api().acceptor.producible_topic(topic).expect("topic");
        let message = ProduceMessage {
            key: Vec::new(),
            partition: Some(partition),
            payload: Bytes::from(payload.to_owned()),
            idempotency_key: Vec::new(),
        };
        let destination = Destination::new(topic, partition);
        let wanted = 1 + node
            .logs()
            .get(&destination)
            .map_or(0, |log| log.high_watermark());
        node.api()
            .acceptor
            .accept(&meta, &message)
            .await
            .expect("accepted");
        tokio::time::timeout(CEILING, async {
            while node
                .logs()
                .get(&destination)
                .is_none_or(|log| log.high_watermark() < wanted)
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the record is committed");
    }

    async fn produce_on_b(&self, topic: &str, partition: u32, payload: &str) {
        Self::produce_on(&self.b, topic, partition, payload).await;
    }

    async fn send(&self, request: Request<Body>) -> Answer {
        let response = tokio::time::timeout(CEILING, self.router.clone().oneshot(request))
            .await
            .expect("answered within the ceiling")
            .expect("infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let body = to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    async fn get(&self, uri: &str) -> Answer {
        let request = Request::get(uri)
            .header("x-narad-client", "forward-tests")
            .body(Body::empty())
            .expect("request");
        self.send(request).await
    }

    async fn post_json(&self, uri: &str, body: &Value) -> Answer {
        let request = Request::post(uri)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .expect("request");
        self.send(request).await
    }

    async fn ack(&self, topic: &str, handle: &str, extend: &str) -> Answer {
        let uri = format!("/v1/topics/{topic}/ack?receipt_handle={handle}{extend}");
        let request = Request::post(uri)
            .header("x-narad-client", "forward-tests")
            .body(Body::empty())
            .expect("request");
        self.send(request).await
    }

    async fn ack_batch(&self, topic: &str, handles: &[&str]) -> Answer {
        let body = serde_json::json!({ "receipt_handles": handles }).to_string();
        let request = Request::post(format!("/v1/topics/{topic}/ack"))
            .header("content-type", "application/json")
            .body(Body::from(body))
            .expect("request");
        self.send(request).await
    }

    fn stop(self) {
        tokio::task::block_in_place(|| {
            self.a.shutdown();
            self.b.shutdown();
        });
    }
}

#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }

    fn handle(&self) -> String {
        self.json()["receipt_handle"]
            .as_str()
            .expect("a receipt handle")
            .to_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_consume_on_a_serves_a_record_committed_on_b() {
    let cluster = Cluster::start();
    cluster.produce_on_b("remote", 1, r#"{"n":1}"#).await;

    let answer = cluster.get("/v1/topics/remote/consume").await;

    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let message = answer.json();
    assert_eq!(message["partition"], 1);
    assert_eq!(message["offset"], 0);
    assert_eq!(message["payload"], serde_json::json!({"n": 1}));
    assert!(answer.handle().starts_with("1:0:"), "{}", answer.body);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consume_with_nothing_anywhere_answers_204() {
    let cluster = Cluster::start();
    let answer = cluster.get("/v1/topics/remote/consume").await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT, "{}", answer.body);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_consume_on_a_gets_a_record_committed_later_on_b() {
    let cluster = Arc::new(Cluster::start());
    let waiting = {
        let cluster = Arc::clone(&cluster);
        tokio::spawn(async move { cluster.get("/v1/topics/remote/consume?wait=10s").await })
    };
    // A consume that found nothing takes a token at B as it parks.
    until("the consume parks before the record exists", || {
        cluster.b_service.holds_token("remote")
    })
    .await;
    cluster.produce_on_b("remote", 0, "late").await;

    let answer = waiting.await.expect("consume task");

    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.json()["payload"], "late");
    Arc::into_inner(cluster).expect("sole owner").stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_consume_prefers_the_local_partition_then_finds_the_remote_one() {
    let cluster = Cluster::start();
    Cluster::produce_on(&cluster.a, "split", 0, "here").await;
    cluster.produce_on_b("split", 1, "there").await;

    let first = cluster.get("/v1/topics/split/consume").await;
    let second = cluster.get("/v1/topics/split/consume").await;

    assert_eq!(first.json()["payload"], "here");
    assert_eq!(second.json()["payload"], "there");
    assert_eq!(second.json()["partition"], 1);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_consume_of_a_remote_partition_is_served_by_its_owner() {
    let cluster = Cluster::start();
    cluster.produce_on_b("remote", 0, "zero").await;
    cluster.produce_on_b("remote", 1, "one").await;

    let answer = cluster
        .get("/v1/topics/remote/consume?partition=1&wait=1s")
        .await;

    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.json()["payload"], "one");
    assert_eq!(answer.json()["partition"], 1);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_long_poll_of_a_remote_partition_waits_at_the_owner_for_a_record() {
    let cluster = Arc::new(Cluster::start());
    let waiting = {
        let cluster = Arc::clone(&cluster);
        tokio::spawn(async move {
            cluster
                .get("/v1/topics/remote/consume?partition=1&wait=10s")
                .await
        })
    };
    parked_on_b_until(&cluster, "the pinned long poll parks on the owner", 1).await;

    cluster.produce_on_b("remote", 1, "awaited").await;
    let answer = waiting.await.expect("consume task");

    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.json()["payload"], "awaited");
    Arc::into_inner(cluster).expect("sole owner").stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_without_a_known_address_answers_503() {
    let cluster = Cluster::start();

    let consume = cluster.get("/v1/topics/nowhere/consume?partition=0").await;
    let ack = cluster.ack("nowhere", "0:0:1", "").await;

    for answer in [&consume, &ack] {
        assert_eq!(
            answer.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            answer.body
        );
        assert_eq!(answer.headers["retry-after"], "1");
    }
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_consume_through_a_takes_records_from_b() {
    let cluster = Cluster::start();
    for payload in ["a", "b", "c"] {
        cluster.produce_on_b("remote", 0, payload).await;
    }

    let answer = cluster.get("/v1/topics/remote/consume?max=2").await;

    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let messages = answer.json()["messages"].as_array().expect("list").clone();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["payload"], "a");
    assert_eq!(messages[1]["payload"], "b");
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_through_a_settles_the_lease_on_b_and_a_second_ack_answers_410() {
    let cluster = Cluster::start();
    cluster.produce_on_b("remote", 1, "x").await;
    let handle = cluster.get("/v1/topics/remote/consume").await.handle();

    let first = cluster.ack("remote", &handle, "").await;
    let second = cluster.ack("remote", &handle, "").await;

    assert_eq!(first.status, StatusCode::NO_CONTENT, "{}", first.body);
    assert_eq!(second.status, StatusCode::GONE);
    assert_eq!(second.json()["error"], LEASE_GONE);
    assert_eq!(
        cluster.get("/v1/topics/remote/consume").await.status,
        StatusCode::NO_CONTENT
    );
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_through_a_keeps_the_lease_valid() {
    let cluster = Cluster::start();
    cluster.produce_on_b("remote", 0, "x").await;
    let handle = cluster.get("/v1/topics/remote/consume").await.handle();

    let extended = cluster.ack("remote", &handle, "&extend=true").await;
    let acked = cluster.ack("remote", &handle, "").await;

    assert_eq!(extended.status, StatusCode::NO_CONTENT, "{}", extended.body);
    assert_eq!(acked.status, StatusCode::NO_CONTENT, "{}", acked.body);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nack_through_a_redelivers_at_once_under_a_new_handle() {
    let cluster = Cluster::start();
    cluster.produce_on_b("remote", 0, "again").await;
    let first = cluster.get("/v1/topics/remote/consume").await.handle();

    let nack = cluster.ack("remote", &first, "&extend=0").await;
    let redelivered = cluster.get("/v1/topics/remote/consume").await;

    assert_eq!(nack.status, StatusCode::NO_CONTENT, "{}", nack.body);
    assert_eq!(redelivered.status, StatusCode::OK);
    assert_eq!(redelivered.json()["payload"], "again");
    assert_ne!(redelivered.handle(), first);
    assert!(redelivered.handle().starts_with("0:0:"));
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_ack_through_a_answers_per_handle_in_request_order() {
    let cluster = Cluster::start();
    Cluster::produce_on(&cluster.a, "split", 0, "local").await;
    cluster.produce_on_b("split", 1, "remote").await;
    let local = cluster
        .get("/v1/topics/split/consume?partition=0")
        .await
        .handle();
    let remote = cluster
        .get("/v1/topics/split/consume?partition=1")
        .await
        .handle();
    let stale = "1:0:12345";

    let answer = cluster
        .ack_batch("split", &[&remote, stale, &local, "x"])
        .await;

    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let statuses: Vec<u64> = answer.json()["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|result| result["status"].as_u64().expect("status"))
        .collect();
    assert_eq!(statuses, vec![204, 410, 204, 400]);
    let again = cluster.ack_batch("split", &[&remote]).await;
    assert_eq!(again.json()["results"][0]["status"], 410);
    assert_eq!(again.json()["results"][0]["error"], LEASE_GONE);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_through_a_reads_the_remote_offset_without_a_lease() {
    let cluster = Cluster::start();
    cluster.produce_on_b("remote", 1, "first").await;
    cluster.produce_on_b("remote", 1, "second").await;

    let answer = cluster
        .get("/v1/topics/remote/consume?partition=1&offset=1")
        .await;
    let past_the_end = cluster
        .get("/v1/topics/remote/consume?partition=1&offset=9")
        .await;

    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.json()["payload"], "second");
    assert_eq!(answer.json()["offset"], 1);
    assert!(answer.json().get("receipt_handle").is_none());
    assert_eq!(past_the_end.status, StatusCode::NO_CONTENT);
    // The replay leased nothing: a queue consume still gets offset 0.
    let leased = cluster.get("/v1/topics/remote/consume?partition=1").await;
    assert_eq!(leased.json()["offset"], 0);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_on_a_shows_the_partition_stats_of_b() {
    let cluster = Cluster::start();
    cluster.produce_on_b("split", 1, "one").await;
    cluster.produce_on_b("split", 1, "two").await;

    let answer = cluster.get("/v1/topics/split").await;

    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let body = answer.json();
    assert_eq!(body["partial"], false, "{}", answer.body);
    let remote = &body["partition_stats"][1];
    assert_eq!(remote["status"], "ok");
    assert_eq!(remote["owner_node"], B.to_string());
    assert_eq!(remote["high_watermark"], 2);
    assert_eq!(remote["next_offset"], 2);
    assert_eq!(body["partition_stats"][0]["owner_node"], A.to_string());
    cluster.stop();
}

/// A cursor on `node` of `split`'s `partition` feeding `split-copy` reports
/// `next_offset`.
fn report_cursor(node: &DataNode, partition: u32, next_offset: u64) {
    let key = CursorKey {
        parent: "split".into(),
        partition,
        child: "split-copy".into(),
    };
    let report = CursorReport {
        next_offset,
        high_watermark: next_offset,
        due_lag_ms: None,
        remote: None,
    };
    node.fanout().report(key, report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_created_on_a_starts_at_the_high_watermarks_b_reports() {
    let cluster = Cluster::start();
    cluster.produce_on_b("split", 1, "one").await;
    cluster.produce_on_b("split", 1, "two").await;
    cluster.produce_on_b("split", 2, "three").await;

    let body = serde_json::json!({"name": "split-copy", "parent": "split"});
    let answer = cluster.post_json("/v1/topics", &body).await;

    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    assert_eq!(
        answer.json()["attach_offsets"],
        serde_json::json!([0, 2, 1])
    );
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_children_listing_on_a_counts_the_lag_of_cursors_running_on_b() {
    let cluster = Cluster::start();
    let body = serde_json::json!({"name": "split-copy", "parent": "split"});
    let created = cluster.post_json("/v1/topics", &body).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    for payload in ["one", "two", "three"] {
        cluster.produce_on_b("split", 1, payload).await;
    }
    cluster.produce_on_b("split", 2, "four").await;
    report_cursor(&cluster.a, 0, 0);
    report_cursor(&cluster.b, 1, 2);
    report_cursor(&cluster.b, 2, 0);

    let all = cluster.get("/v1/topics/split/children").await;
    cluster.b.fanout().forget(&CursorKey {
        parent: "split".into(),
        partition: 2,
        child: "split-copy".into(),
    });
    let one_missing = cluster.get("/v1/topics/split/children").await;

    assert_eq!(all.status, StatusCode::OK, "{}", all.body);
    let child = &all.json()["children"][0];
    assert_eq!(child["name"], "split-copy");
    assert_eq!(child["lag_messages"], 2, "{}", all.body);
    assert_eq!(child["lag_complete"], true);
    let child = &one_missing.json()["children"][0];
    assert_eq!(child["lag_messages"], 1, "{}", one_missing.body);
    assert_eq!(child["lag_complete"], false);
    cluster.stop();
}

/// Reports on B the cursor of remote child `split-dr` on `split`'s
/// partition 1, at offset 0 of 1, shipping as `shipping`; returns the
/// report.
fn report_split_dr_cursor_on_b(
    cluster: &Cluster,
    shipping: crate::fanout::RemoteReport,
) -> CursorReport {
    let key = CursorKey {
        parent: "split".into(),
        partition: 1,
        child: "split-dr".into(),
    };
    let report = CursorReport {
        next_offset: 0,
        high_watermark: 1,
        due_lag_ms: None,
        remote: Some(shipping),
    };
    cluster.b.fanout().report(key, report.clone());
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_childs_shipping_report_on_b_reaches_a_only_when_asked() {
    let cluster = Cluster::start();
    cluster.produce_on_b("split", 1, "one").await;
    let shipping = crate::fanout::RemoteReport {
        state: "rejected_record".into(),
        blocked_at: Some(0),
        last_success_at_ms: Some(5_000),
        oldest_pending_ms: Some(4_000),
    };
    report_split_dr_cursor_on_b(&cluster, shipping.clone());
    let forwarder = cluster.a.api().forwarder.get().expect("forwarder");
    let ask = |remote_reports| StatsAsk {
        cursors: true,
        remote_reports,
        ..StatsAsk::default()
    };

    let with = forwarder
        .stats(B, "split", vec![1], ask(true), SETTLE_BUDGET)
        .await
        .expect("B answers");
    let without = forwarder
        .stats(B, "split", vec![1], ask(false), SETTLE_BUDGET)
        .await
        .expect("B answers");

    let cursor = &with[0].cursors[0];
    assert_eq!((cursor.child.as_str(), cursor.next_offset), ("split-dr", 0));
    let remote = cursor.remote.as_ref().expect("the report");
    assert_eq!(remote.state, shipping.state);
    assert_eq!(remote.blocked_at, Some(0));
    assert_eq!(remote.last_success_at_ms, Some(5_000));
    assert_eq!(remote.oldest_pending_ms, Some(4_000));
    assert_eq!(without[0].cursors[0].remote, None);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_on_a_reads_whether_the_cursor_on_b_holds_on_the_record() {
    use crate::http::children::{OwnerCursor, owner_cursor};
    use crate::remote_children::skip_allowed;

    let cluster = Cluster::start();
    cluster.produce_on_b("split", 1, "one").await;
    let report = report_split_dr_cursor_on_b(
        &cluster,
        crate::fanout::RemoteReport {
            state: "rejected_record".into(),
            blocked_at: Some(0),
            last_success_at_ms: None,
            oldest_pending_ms: None,
        },
    );
    let a = cluster.a.api();
    let split = a.replica.topic_meta("split").expect("split");

    // Partition 1 runs on B: A asks B, and only the held record passes.
    let heard = owner_cursor(a, &split, 1, "split-dr").await;
    assert_eq!(heard, OwnerCursor::Heard(Some(report)));
    let OwnerCursor::Heard(from_b) = heard else {
        unreachable!()
    };
    assert!(skip_allowed(3, 1, 0, from_b.as_ref()));
    assert!(!skip_allowed(3, 1, 1, from_b.as_ref()));
    // B runs no cursor of another child there: nothing to hold on.
    assert_eq!(
        owner_cursor(a, &split, 1, "split-other").await,
        OwnerCursor::Heard(None)
    );
    // Partition 0 is A's own, and no cursor reported on A.
    assert_eq!(
        owner_cursor(a, &split, 0, "split-dr").await,
        OwnerCursor::Heard(None)
    );
    // A dead owner cannot be asked.
    let ghost = a.replica.topic_meta("ghost").expect("ghost");
    assert_eq!(
        owner_cursor(a, &ghost, 0, "ghost-dr").await,
        OwnerCursor::Unheard
    );
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consume_frontier_of_a_partition_b_owns_is_asked_of_b() {
    let cluster = Cluster::start();
    for payload in ["one", "two", "three"] {
        cluster.produce_on_b("split", 1, payload).await;
    }
    let first = cluster
        .get("/v1/topics/split/consume?partition=1")
        .await
        .handle();
    let second = cluster
        .get("/v1/topics/split/consume?partition=1")
        .await
        .handle();
    // Offset 1 acked ahead of 0, then 0: the frontier is 2, with offset 2
    // never delivered.
    assert_eq!(
        cluster.ack("split", &second, "").await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        cluster.ack("split", &first, "").await.status,
        StatusCode::NO_CONTENT
    );
    let parent = cluster.a.api().replica.topic_meta("split").expect("split");

    let offsets = start_offsets(cluster.a.api(), &parent, StartFigure::ConsumeFrontier)
        .await
        .expect("every owner answers its frontier");

    // Partition 0 is A's own, 1 and 2 are B's; 2 was never consumed.
    assert_eq!(offsets, vec![0, 2, 0]);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_on_a_under_a_parent_with_a_silent_owner_is_503() {
    let cluster = Cluster::start();
    let body = serde_json::json!({"name": "pair-copy"});
    let created = cluster.post_json("/v1/topics", &body).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);

    let body = serde_json::json!({"child": "pair-copy"});
    let answer = cluster.post_json("/v1/topics/pair/children", &body).await;

    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.body
    );
    let parent = cluster.a.api().replica.topic_meta("pair").expect("pair");
    assert!(parent.children.is_empty());
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owner_answers_503_with_retry_after_and_sends_nothing() {
    let cluster = Cluster::start();

    let consume = cluster.get("/v1/topics/ghost/consume?partition=0").await;
    let replay = cluster
        .get("/v1/topics/ghost/consume?partition=0&offset=0")
        .await;
    let ack = cluster.ack("ghost", "0:0:1", "").await;
    let batch = cluster.ack_batch("ghost", &["0:0:1", "0:1:1"]).await;
    let queue = cluster.get("/v1/topics/ghost/consume").await;

    for answer in [&consume, &replay, &ack] {
        assert_eq!(
            answer.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            answer.body
        );
        assert_eq!(answer.headers["retry-after"], "1");
    }
    assert_eq!(batch.json()["results"][0]["status"], 503);
    assert_eq!(batch.json()["results"][1]["status"], 503);
    assert_eq!(queue.status, StatusCode::NO_CONTENT);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_does_not_answer_gives_502_and_a_partial_describe() {
    let cluster = Cluster::start();

    let consume = cluster.get("/v1/topics/silent/consume?partition=0").await;
    let ack = cluster.ack("silent", "0:0:1", "").await;
    let batch = cluster.ack_batch("silent", &["0:0:1"]).await;
    let describe = cluster.get("/v1/topics/silent").await;

    assert_eq!(consume.status, StatusCode::BAD_GATEWAY, "{}", consume.body);
    assert_eq!(ack.status, StatusCode::BAD_GATEWAY, "{}", ack.body);
    assert_eq!(batch.json()["results"][0]["status"], 502);
    assert_eq!(describe.json()["partial"], true);
    assert_eq!(
        describe.json()["partition_stats"][0]["status"],
        "owner_unavailable"
    );
    cluster.stop();
}

/// Calls B's forward service directly, as another node's transport would.
async fn call_b(
    cluster: &Cluster,
    opcode: narad_protocol::Opcode,
    body: Bytes,
    timeout: Duration,
) -> Result<narad_protocol::Response, narad_protocol::CallError> {
    cluster
        .a_transport
        .call_with_timeout(
            cluster.b_transport.local_addr(),
            narad_protocol::Lane::Consume,
            narad_protocol::Request::new(opcode, body),
            timeout,
        )
        .await
}

async fn parked_on_b_until(cluster: &Cluster, what: &str, count: usize) {
    tokio::time::timeout(CEILING, async {
        while cluster.b.consume().parked("remote") != count {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_long_poll_whose_requester_gave_up_leaves_nothing_parked_on_the_owner() {
    let cluster = Arc::new(Cluster::start());
    let request = narad_protocol::ForwardConsume {
        topic: "remote".into(),
        scope: narad_protocol::ConsumeScope::Pinned(0),
        wait_ms: 30_000,
        claim: false,
        max: 1,
    };
    let body = narad_protocol::codec::encode_message(&request);
    let polling = {
        let cluster = Arc::clone(&cluster);
        tokio::spawn(async move {
            call_b(&cluster, narad_protocol::Opcode::CONSUME, body, CEILING).await
        })
    };
    parked_on_b_until(&cluster, "the forwarded long poll parks on the owner", 1).await;

    // The requester gives up: its call is dropped and a cancel goes out.
    polling.abort();

    parked_on_b_until(
        &cluster,
        "the cancelled long poll leaves the owner's line",
        0,
    )
    .await;
    cluster.produce_on_b("remote", 0, "kept").await;
    let consumed = cluster.get("/v1/topics/remote/consume?partition=0").await;
    assert_eq!(consumed.json()["payload"], "kept");
    let _ = polling.await;
    Arc::into_inner(cluster).expect("sole owner").stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_trailing_field_is_an_unsupported_operation() {
    let cluster = Cluster::start();
    let settle = narad_protocol::ForwardSettle {
        topic: "remote".into(),
        lease: narad_protocol::LeaseRef {
            partition: 0,
            offset: 0,
            nonce: 1,
        },
    };
    let mut body = narad_protocol::codec::encode_message(&settle).to_vec();
    body.push(7);

    let answer = call_b(
        &cluster,
        narad_protocol::Opcode::ACK,
        Bytes::from(body),
        CEILING,
    )
    .await;

    match answer {
        Err(narad_protocol::CallError::Rejected(error)) => {
            assert!(
                narad_protocol::commit::is_unsupported_operation(&error),
                "{error}"
            );
        }
        other => panic!("expected a 400, got {other:?}"),
    }
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_service_not_attached_yet_answers_503() {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let owner = Node::bind(
        NodeConfig::new(loopback, auth()),
        ForwardService::new().route(narad_protocol::Router::new()),
    )
    .expect("bind");
    let caller = Node::bind(
        NodeConfig::new(loopback, auth()),
        narad_protocol::Router::new(),
    )
    .expect("bind");
    let request = narad_protocol::TopicPartitionStats {
        topic: "remote".into(),
        partitions: vec![0],
        with_cursors: false,
        with_frontier: false,
        with_remote_reports: false,
    };

    let answer = caller
        .call_message::<_, narad_protocol::TopicPartitionStatsAnswer>(
            owner.local_addr(),
            narad_protocol::Lane::Control,
            narad_protocol::Opcode::TOPIC_PARTITION_STATS,
            &request,
        )
        .await;

    match answer {
        Err(narad_protocol::CallError::Rejected(error)) => {
            assert_eq!(error.status, narad_protocol::Status::UNAVAILABLE);
        }
        other => panic!("expected a 503, got {other:?}"),
    }
}

/// An owner whose single acks wait until released (`release` starts with
/// the permits it is built with). A current one answers each `AckBatch`
/// and records its size; an older release refuses `AckBatch` with `400
/// unsupported rpc operation` and counts the refusals.
#[derive(Debug)]
struct AckOwner {
    refuses_batches: bool,
    release: tokio::sync::Semaphore,
    singles: std::sync::atomic::AtomicUsize,
    batches: parking_lot::Mutex<Vec<usize>>,
    batches_refused: std::sync::atomic::AtomicUsize,
}

impl AckOwner {
    fn current(permits: usize) -> Arc<Self> {
        Self::new(permits, false)
    }

    fn older(permits: usize) -> Arc<Self> {
        Self::new(permits, true)
    }

    fn new(permits: usize, refuses_batches: bool) -> Arc<Self> {
        Arc::new(Self {
            refuses_batches,
            release: tokio::sync::Semaphore::new(permits),
            singles: std::sync::atomic::AtomicUsize::new(0),
            batches: parking_lot::Mutex::new(Vec::new()),
            batches_refused: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    fn singles(&self) -> usize {
        self.singles.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn batches_refused(&self) -> usize {
        self.batches_refused
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    fn router(self: &Arc<Self>) -> narad_protocol::Router {
        let limit = narad_protocol::OperationLimit::new("acks", 64);
        let single = Arc::clone(self);
        let batch = Arc::clone(self);
        narad_protocol::Router::new()
            .route(
                narad_protocol::Opcode::ACK,
                limit,
                move |_inbound: narad_protocol::Inbound| {
                    let owner = Arc::clone(&single);
                    async move {
                        owner
                            .singles
                            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let permit = owner.release.acquire().await.expect("open");
                        permit.forget();
                        Ok(narad_protocol::Response::no_content())
                    }
                },
            )
            .route(
                narad_protocol::Opcode::ACK_BATCH,
                limit,
                move |inbound: narad_protocol::Inbound| {
                    let owner = Arc::clone(&batch);
                    async move {
                        if owner.refuses_batches {
                            owner
                                .batches_refused
                                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            return Err(narad_protocol::RpcError::unsupported_operation(
                                narad_protocol::Opcode::ACK_BATCH,
                            ));
                        }
                        let request = inbound.message::<narad_protocol::AckBatch>()?;
                        owner.batches.lock().push(request.leases.len());
                        let statuses = vec![204; request.leases.len()];
                        Ok(narad_protocol::Response::message(
                            &narad_protocol::AckBatchAnswer { statuses },
                        ))
                    }
                },
            )
    }
}

/// Acks the remote handle at `offset` through `forwarder`, in a task.
fn spawn_ack(
    forwarder: &Arc<Forwarder>,
    offset: u64,
) -> tokio::task::JoinHandle<Result<(), ForwardError>> {
    let forwarder = Arc::clone(forwarder);
    tokio::spawn(async move {
        forwarder
            .settle(
                "remote",
                remote_handle(offset),
                crate::consume::shard::Settle::Ack,
            )
            .await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_beyond_the_single_slots_leave_as_one_ack_batch_and_each_gets_its_answer() {
    let owner = AckOwner::current(0);
    let (forwarder, _owner_node) = forwarder_with_single_acks(owner.router(), 1, &manual_clock());
    let first = spawn_ack(&forwarder, 0);
    until("the first ack reaches the owner", || owner.singles() == 1).await;
    let queued = [spawn_ack(&forwarder, 1), spawn_ack(&forwarder, 2)];
    until("the next two acks queue", || forwarder.queued_acks(B) == 2).await;

    owner.release.add_permits(1);

    assert_eq!(first.await.expect("task"), Ok(()));
    for answer in queued {
        assert_eq!(answer.await.expect("task"), Ok(()));
    }
    assert_eq!(owner.singles(), 1);
    assert_eq!(*owner.batches.lock(), vec![2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_leased_remotely_for_a_consume_that_went_away_are_released_at_once() {
    let cluster = Cluster::start();
    cluster.produce_on_b("remote", 0, "orphan").await;
    let forwarder = Arc::clone(cluster.a.api().forwarder.get().expect("forwarder"));
    let records = forwarder.probe(B, "remote", 1).await;
    assert_eq!(records.len(), 1);
    let topic: Arc<str> = Arc::from("remote");

    drop(crate::consume_front::LeasedRemotely {
        forwarder,
        deliveries: records
            .into_iter()
            .map(|record| super::delivery_of(&topic, record))
            .collect(),
    });

    // Without the release the lease would hold for the visibility timeout
    // (30 s), past this wait.
    let answer = cluster.get("/v1/topics/remote/consume?wait=10s").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.json()["payload"], "orphan");
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_consume_holds_a_token_at_the_owner_and_is_notified_of_a_commit() {
    // The clock stands still, so the hold outlasts the consume's wait:
    // only the notified node's claim can take the record in time.
    let clock = manual_clock();
    let cluster = Arc::new(Cluster::start_on_manual_clock(&clock));
    let waiting = {
        let cluster = Arc::clone(&cluster);
        tokio::spawn(async move { cluster.get("/v1/topics/remote/consume?wait=10s").await })
    };
    tokio::time::timeout(CEILING, async {
        while !cluster.b_service.holds_token("remote") {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the parked consume registers a token at the owner");

    cluster.produce_on_b("remote", 1, "announced").await;
    let answer = waiting.await.expect("consume task");

    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.json()["payload"], "announced");
    tokio::time::timeout(CEILING, async {
        while cluster.inbox.notified_total() == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the owner spent the token by notifying node A");
    assert!(
        !cluster.b_service.holds_token("remote"),
        "a token is single use"
    );
    assert_eq!(
        cluster.b_service.claimed_total(),
        1,
        "the notified consume claimed the held record"
    );
    Arc::into_inner(cluster).expect("sole owner").stop();
}

/// A node of its own with a token inbox on `clock`, to hold tokens at B
/// besides A.
fn token_holder(clock: &Arc<ManualClock>) -> (Node, Arc<super::tokens::TokenInbox>) {
    let inbox = super::tokens::TokenInbox::new(Arc::clone(clock) as Arc<dyn Clock>);
    let node = Node::bind(
        NodeConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), auth()),
        inbox.route(narad_protocol::Router::new()),
    )
    .expect("bind a token holder");
    (node, inbox)
}

/// The TTL of the tokens [`register_at_b`] takes.
const TOKEN_TTL_MS: u32 = 60_000;

/// Takes a delivery token of `remote` at B for `from`, as a parked
/// consume's node would.
async fn register_at_b(cluster: &Cluster, from: &Node) {
    let request = narad_protocol::TokenRegister {
        topic: "remote".into(),
        ttl_ms: TOKEN_TTL_MS,
    };
    from.call_with_timeout(
        cluster.b_transport.local_addr(),
        narad_protocol::Lane::Consume,
        narad_protocol::Request::new(
            narad_protocol::Opcode::TOKEN_REGISTER,
            narad_protocol::codec::encode_message(&request),
        ),
        CEILING,
    )
    .await
    .expect("the token is taken");
}

/// A non-blocking consume of `remote` at B from `from`, with or without
/// the `Claim` flag: the payloads it got.
async fn probe_b(cluster: &Cluster, from: &Node, claim: bool) -> Vec<String> {
    let request = narad_protocol::ForwardConsume {
        topic: "remote".into(),
        scope: narad_protocol::ConsumeScope::Any,
        wait_ms: 0,
        claim,
        max: 1,
    };
    let response = from
        .call_with_timeout(
            cluster.b_transport.local_addr(),
            narad_protocol::Lane::Consume,
            narad_protocol::Request::new(
                narad_protocol::Opcode::CONSUME,
                narad_protocol::codec::encode_message(&request),
            ),
            CEILING,
        )
        .await
        .expect("answered");
    let answer: narad_protocol::ConsumeAnswer =
        narad_protocol::codec::decode_message(response.body).expect("a consume answer");
    answer
        .records
        .iter()
        .map(|record| String::from_utf8_lossy(&record.payload).into_owned())
        .collect()
}

async fn notified(inboxes: &[&super::tokens::TokenInbox], count: u64) {
    tokio::time::timeout(CEILING, async {
        while inboxes
            .iter()
            .map(|inbox| inbox.notified_total())
            .sum::<u64>()
            < count
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the owner notifies a token holder");
}

/// A consume on B itself, as a local client's would be.
async fn consume_on_b(cluster: &Cluster, wait: Duration) -> Vec<String> {
    cluster
        .b
        .consume()
        .consume(crate::consume::service::ConsumeRequest {
            topic: "remote".into(),
            partition: None,
            max: 1,
            wait,
        })
        .await
        .expect("consumed")
        .into_iter()
        .map(|delivery| String::from_utf8_lossy(&delivery.record.payload).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_spends_no_more_tokens_than_records_it_can_hold() {
    let clock = manual_clock();
    let cluster = Cluster::start_on_manual_clock(&clock);
    let (other, other_inbox) = token_holder(&clock);
    register_at_b(&cluster, &cluster.a_transport).await;
    register_at_b(&cluster, &other).await;
    assert_eq!(cluster.b_service.live_tokens("remote"), 2);

    cluster.produce_on_b("remote", 0, "one").await;
    notified(&[&cluster.inbox, &other_inbox], 1).await;

    assert_eq!(
        cluster.b_service.live_tokens("remote"),
        1,
        "one record, one notification: the other token stays live"
    );
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notified_record_is_held_back_from_other_consumers_until_its_holder_claims_it() {
    let clock = manual_clock();
    let cluster = Cluster::start_on_manual_clock(&clock);
    let (other, _other_inbox) = token_holder(&clock);
    register_at_b(&cluster, &cluster.a_transport).await;
    cluster.produce_on_b("remote", 1, "held").await;
    notified(&[&cluster.inbox], 1).await;
    let holder = cluster.a_transport.local_addr();
    assert_eq!(cluster.b_service.held_for("remote", holder), 1);

    let local = consume_on_b(&cluster, Duration::ZERO).await;
    let other_claim = probe_b(&cluster, &other, true).await;
    let unclaimed_probe = probe_b(&cluster, &cluster.a_transport, false).await;
    let claim = probe_b(&cluster, &cluster.a_transport, true).await;

    assert!(local.is_empty(), "a local consume skips the held record");
    assert!(
        other_claim.is_empty(),
        "another node's claim does not take it"
    );
    assert!(unclaimed_probe.is_empty(), "only a claim takes a hold");
    assert_eq!(claim, vec!["held".to_owned()]);
    assert_eq!(cluster.b_service.claimed_total(), 1);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unclaimed_hold_lapses_at_claim_hold_and_a_parked_local_consume_gets_the_record() {
    let clock = manual_clock();
    let cluster = Arc::new(Cluster::start_on_manual_clock(&clock));
    register_at_b(&cluster, &cluster.a_transport).await;
    cluster.produce_on_b("remote", 0, "lapsed").await;
    notified(&[&cluster.inbox], 1).await;
    let local = {
        let cluster = Arc::clone(&cluster);
        tokio::spawn(async move { consume_on_b(&cluster, Duration::from_secs(10)).await })
    };
    parked_on_b_until(&cluster, "the local consume parks behind the hold", 1).await;

    clock.advance(ms(CLAIM_HOLD));

    let local = tokio::time::timeout(CEILING, local)
        .await
        .expect("the lapse wakes the parked consume")
        .expect("consume task");
    assert_eq!(local, vec!["lapsed".to_owned()]);
    let late_claim = probe_b(&cluster, &cluster.a_transport, true).await;
    assert!(late_claim.is_empty(), "the lapsed hold was not kept");
    assert_eq!(cluster.b_service.claimed_total(), 0);
    Arc::into_inner(cluster).expect("sole owner").stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_is_claimed_one_millisecond_before_it_lapses() {
    let clock = manual_clock();
    let cluster = Cluster::start_on_manual_clock(&clock);
    register_at_b(&cluster, &cluster.a_transport).await;
    cluster.produce_on_b("remote", 1, "just in time").await;
    notified(&[&cluster.inbox], 1).await;

    clock.advance(ms(CLAIM_HOLD) - 1);
    let claim = probe_b(&cluster, &cluster.a_transport, true).await;

    assert_eq!(claim, vec!["just in time".to_owned()]);
    assert_eq!(cluster.b_service.claimed_total(), 1);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_after_the_hold_lapsed_takes_the_record_as_a_plain_probe() {
    let clock = manual_clock();
    let cluster = Cluster::start_on_manual_clock(&clock);
    register_at_b(&cluster, &cluster.a_transport).await;
    cluster.produce_on_b("remote", 1, "free again").await;
    notified(&[&cluster.inbox], 1).await;
    let holder = cluster.a_transport.local_addr();

    clock.advance(ms(CLAIM_HOLD));

    assert_eq!(cluster.b_service.held_for("remote", holder), 0);
    let claim = probe_b(&cluster, &cluster.a_transport, true).await;
    assert_eq!(claim, vec!["free again".to_owned()]);
    assert_eq!(
        cluster.b_service.claimed_total(),
        0,
        "nothing was handed over through the hold"
    );
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_lapses_at_its_ttl_on_the_owners_clock() {
    let clock = manual_clock();
    let cluster = Cluster::start_on_manual_clock(&clock);
    register_at_b(&cluster, &cluster.a_transport).await;

    clock.advance(u64::from(TOKEN_TTL_MS) - 1);
    assert_eq!(cluster.b_service.live_tokens("remote"), 1);
    clock.advance(1);
    assert_eq!(cluster.b_service.live_tokens("remote"), 0);
    cluster.stop();
}

/// An owner that answers a consume with one leased record once released,
/// and records the nacks it gets.
#[derive(Debug)]
struct SlowOwner {
    release: tokio::sync::Semaphore,
    consumes: std::sync::atomic::AtomicUsize,
    nacks: parking_lot::Mutex<Vec<(u64, u64)>>,
}

/// The record [`SlowOwner`] leases: partition 0, offset 5, nonce 77.
fn slow_owner_record() -> narad_protocol::ForwardedRecord {
    narad_protocol::ForwardedRecord {
        partition: 0,
        offset: 5,
        key: Bytes::new(),
        payload: Bytes::from_static(b"late"),
        committed_at_ms: 1,
        nonce: 77,
    }
}

impl SlowOwner {
    fn router(self: &Arc<Self>) -> narad_protocol::Router {
        let limit = narad_protocol::OperationLimit::new("slow", 64);
        let consume = Arc::clone(self);
        let nack = Arc::clone(self);
        narad_protocol::Router::new()
            .route(
                narad_protocol::Opcode::CONSUME,
                limit,
                move |_inbound: narad_protocol::Inbound| {
                    let owner = Arc::clone(&consume);
                    async move {
                        owner
                            .consumes
                            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let permit = owner.release.acquire().await.expect("open");
                        permit.forget();
                        Ok(narad_protocol::Response::message(
                            &narad_protocol::ConsumeAnswer {
                                records: vec![slow_owner_record()],
                            },
                        ))
                    }
                },
            )
            .route(
                narad_protocol::Opcode::NACK,
                limit,
                move |inbound: narad_protocol::Inbound| {
                    let owner = Arc::clone(&nack);
                    async move {
                        let settle = inbound.message::<narad_protocol::ForwardSettle>()?;
                        owner
                            .nacks
                            .lock()
                            .push((settle.lease.offset, settle.lease.nonce));
                        Ok(narad_protocol::Response::no_content())
                    }
                },
            )
    }
}

/// A forwarder on node A on `clock`, whose only peer, B, is `router`.
fn forwarder_to(
    router: narad_protocol::Router,
    clock: &Arc<ManualClock>,
) -> (Arc<Forwarder>, Node) {
    bind_forwarder(router, None, clock)
}

/// [`forwarder_to`], with at most `single_acks_max` single ack RPCs in
/// flight to the owner before acks queue for an `AckBatch`.
fn forwarder_with_single_acks(
    router: narad_protocol::Router,
    single_acks_max: usize,
    clock: &Arc<ManualClock>,
) -> (Arc<Forwarder>, Node) {
    bind_forwarder(router, Some(single_acks_max), clock)
}

fn bind_forwarder(
    router: narad_protocol::Router,
    single_acks_max: Option<usize>,
    clock: &Arc<ManualClock>,
) -> (Arc<Forwarder>, Node) {
    let clock = Arc::clone(clock) as Arc<dyn Clock>;
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let owner = Node::bind(NodeConfig::new(loopback, auth()), router).expect("bind owner");
    let caller = Arc::new(
        Node::bind(
            NodeConfig::new(loopback, auth()),
            narad_protocol::Router::new(),
        )
        .expect("bind caller"),
    );
    let replica = replica_of(A);
    let addresses = Arc::new(AddressTable::new());
    addresses.set(B, owner.local_addr());
    let forwarder = match single_acks_max {
        Some(max) => Forwarder::with_single_acks_max(caller, addresses, replica, clock, max),
        None => Forwarder::new(caller, addresses, replica, clock),
    };
    (forwarder, owner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_answered_to_a_consume_that_went_away_meanwhile_are_nacked_at_their_owner() {
    let owner = Arc::new(SlowOwner {
        release: tokio::sync::Semaphore::new(0),
        consumes: std::sync::atomic::AtomicUsize::new(0),
        nacks: parking_lot::Mutex::new(Vec::new()),
    });
    let (forwarder, _owner_node) = forwarder_to(owner.router(), &manual_clock());
    let probing = {
        let forwarder = Arc::clone(&forwarder);
        tokio::spawn(async move { forwarder.probe(B, "remote", 1).await })
    };
    tokio::time::timeout(CEILING, async {
        while owner.consumes.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the probe reaches the owner");

    // The HTTP client goes away while the owner is answering.
    probing.abort();
    let _ = probing.await;
    owner.release.add_permits(1);

    tokio::time::timeout(CEILING, async {
        while owner.nacks.lock().is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the record leased for the vanished consume is nacked");
    assert_eq!(*owner.nacks.lock(), vec![(5, 77)]);
    assert_eq!(forwarder.unreceived_total(), 1);
}

async fn until(what: &str, done: impl Fn() -> bool) {
    tokio::time::timeout(CEILING, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}"));
}

fn remote_handle(offset: u64) -> crate::consume::handle::ReceiptHandle {
    crate::consume::handle::ReceiptHandle {
        partition: 0,
        offset,
        nonce: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_ack_refused_by_an_older_owner_is_resent_singly() {
    let owner = AckOwner::older(64);
    let (forwarder, _owner_node) = forwarder_to(owner.router(), &manual_clock());
    let handles = [remote_handle(0), remote_handle(1), remote_handle(2)];

    let outcomes = forwarder
        .settle_many("remote", &handles, crate::consume::shard::Settle::Ack)
        .await;

    let statuses: Vec<u16> = outcomes.iter().map(|outcome| outcome.status).collect();
    assert_eq!(statuses, vec![204, 204, 204]);
    assert_eq!(owner.batches_refused(), 1);
    assert_eq!(owner.singles(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_acks_to_an_owner_that_refused_ack_batch_go_singly_for_two_minutes() {
    let owner = AckOwner::older(0);
    let clock = manual_clock();
    let (forwarder, _owner_node) = forwarder_with_single_acks(owner.router(), 1, &clock);

    overflow_three_acks(&owner, &forwarder, 0).await;
    clock.advance(ms(ACK_BATCH_REFUSAL_MEMORY) - 1);
    overflow_three_acks(&owner, &forwarder, 1).await;

    assert_eq!(
        owner.batches_refused(),
        1,
        "within two minutes of the refusal the owner is not sent AckBatch again"
    );
    assert_eq!(owner.singles(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_holding_a_record_for_this_node_is_probed_first() {
    let owner = AckOwner::older(0);
    let clock = manual_clock();
    let (forwarder, owner_node) = forwarder_to(owner.router(), &clock);
    let inbox = super::tokens::TokenInbox::new(Arc::clone(&clock) as Arc<dyn Clock>);
    forwarder.use_tokens(Arc::clone(&inbox));
    inbox.notified("pair", owner_node.local_addr());

    // The rotation alternates the start; the owed claim overrides it.
    let first = forwarder.live_remote_owners("pair");
    let second = forwarder.live_remote_owners("pair");

    assert_eq!(first, vec![B, SILENT]);
    assert_eq!(second, vec![B, SILENT]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_whose_hold_lapsed_takes_its_turn_in_the_rotation_again() {
    let owner = AckOwner::older(0);
    let clock = manual_clock();
    let (forwarder, owner_node) = forwarder_to(owner.router(), &clock);
    let inbox = super::tokens::TokenInbox::new(Arc::clone(&clock) as Arc<dyn Clock>);
    forwarder.use_tokens(Arc::clone(&inbox));
    inbox.notified("pair", owner_node.local_addr());

    clock.advance(ms(CLAIM_HOLD));
    let first = forwarder.live_remote_owners("pair");
    let second = forwarder.live_remote_owners("pair");

    assert_ne!(first, second, "the rotation alternates the start again");
    assert!(!inbox.owes_claim("pair", owner_node.local_addr()));
}

/// One ack to `owner` holding the forwarder's only slot, two more queued
/// behind it, then all released: each answers `Ok`.
async fn overflow_three_acks(owner: &Arc<AckOwner>, forwarder: &Arc<Forwarder>, round: u64) {
    let singles_before = owner.singles();
    let first = spawn_ack(forwarder, 3 * round);
    until("the first ack holds the only slot", || {
        owner.singles() == singles_before + 1
    })
    .await;
    let queued = [
        spawn_ack(forwarder, 3 * round + 1),
        spawn_ack(forwarder, 3 * round + 2),
    ];
    until("the next two acks queue", || forwarder.queued_acks(B) == 2).await;

    owner.release.add_permits(3);

    assert_eq!(first.await.expect("task"), Ok(()));
    for answer in queued {
        assert_eq!(answer.await.expect("task"), Ok(()), "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_refused_ack_batch_is_sent_one_again_after_two_minutes() {
    let owner = AckOwner::older(0);
    let clock = manual_clock();
    let (forwarder, _owner_node) = forwarder_with_single_acks(owner.router(), 1, &clock);
    overflow_three_acks(&owner, &forwarder, 0).await;

    clock.advance(ms(ACK_BATCH_REFUSAL_MEMORY));
    overflow_three_acks(&owner, &forwarder, 1).await;

    assert_eq!(
        owner.batches_refused(),
        2,
        "the refusal was forgotten, so the overflow left as an AckBatch again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_ack_still_waiting_when_its_settle_budget_runs_out_is_withdrawn_and_answers_503() {
    let owner = AckOwner::current(0);
    let clock = manual_clock();
    let (forwarder, _owner_node) = forwarder_with_single_acks(owner.router(), 1, &clock);
    let first = spawn_ack(&forwarder, 0);
    until("the first ack holds the only slot", || owner.singles() == 1).await;
    let queued = spawn_ack(&forwarder, 1);
    until("the next ack queues", || forwarder.queued_acks(B) == 1).await;

    clock.advance(ms(SETTLE_BUDGET));

    let answer = tokio::time::timeout(CEILING, queued)
        .await
        .expect("the budget ends the wait")
        .expect("task");
    assert!(
        matches!(answer, Err(ForwardError::Refused { status: 503, .. })),
        "{answer:?}"
    );
    assert_eq!(forwarder.queued_acks(B), 0);
    owner.release.add_permits(1);
    assert_eq!(first.await.expect("task"), Ok(()));
    assert_eq!(owner.singles(), 1, "the withdrawn ack was never sent");
    assert!(owner.batches.lock().is_empty());
}
