//! HTTP tests of the consume path through the router of a whole data node
//! (WAL, dispatcher, partition logs and the consume service on a simulated
//! disk): consume, batch consume, replay, ack, extend, nack, batch ack,
//! their refusals, the per-identity cap, the wait ceiling and the metrics;
//! then the consume-related checks of the wire contract's conformance list
//! (§13 items 14–17 and 20–30).
//!
//! Waits in these tests are ceilings that turn a hang into a failure, never
//! timing assertions: a consume that should find a message asks for
//! `wait=5s` and returns as soon as the message is committed.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use narad_disk::Disk;
use narad_disk::sim::SimDisk;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::ApiConfig;
use super::tests::{Answer, api};
use crate::admin::LocalAdmin;
use crate::dispatch::{NoRemoteTarget, ReplicaLeader};
use crate::metadata::{Grant, GrantAction};
use crate::node::{DataNode, DataNodeConfig, NodeServices};
use crate::testing::{LOCAL_NODE, add_user, apply, assign, basic, create_command, replica};
use crate::topology::Destination;
use narad_meta::Command;

const ROOT: (&str, &str) = ("root", "root-pw");
/// Consume and produce on `ord*` only.
const CAROL: (&str, &str) = ("carol", "carol-pw");
/// Produce only.
const ALICE: (&str, &str) = ("alice", "alice-pw");

/// Turns a hang into a failure; never a timing assertion.
const CEILING: Duration = Duration::from_secs(30);

/// Owns partitions 1 and 2 of topic `split` (partition 0 is local).
const OTHER_NODE: u64 = 2;

const LEASE_GONE: &str = "receipt handle no longer matches an active reservation";

/// A running node and its router.
struct Node {
    node: Option<DataNode>,
    router: Router,
}

impl Node {
    fn start(api: ApiConfig, seed: u64) -> Self {
        Self::on(SimDisk::new(seed), api, seed)
    }

    /// A node on `sim`, which may hold an earlier node's data.
    fn on(sim: SimDisk, api: ApiConfig, seed: u64) -> Self {
        let disk: Arc<dyn Disk> = Arc::new(sim);
        let replica = replica();
        add_user(
            &replica,
            "carol",
            "carol-pw",
            vec![
                Grant {
                    action: GrantAction::Consume,
                    patterns: vec!["ord*".into()],
                },
                Grant {
                    action: GrantAction::Produce,
                    patterns: vec!["ord*".into()],
                },
            ],
        );
        apply(
            &replica,
            Command::CreateTopic(create_command("split", 0xe5, 3)),
        );
        let owners = [(0, LOCAL_NODE), (1, OTHER_NODE), (2, OTHER_NODE)];
        assign(&replica, "split", &owners);
        let mut config = DataNodeConfig::new(Path::new("/node"));
        config.seed = seed;
        config.api = api;
        let node = DataNode::start(
            NodeServices {
                disk,
                replica: Arc::clone(&replica),
                leader: Arc::new(ReplicaLeader::new(Arc::clone(&replica))),
                remote: Arc::new(NoRemoteTarget),
                admin: Arc::new(LocalAdmin::new(Arc::clone(&replica))),
                clock: Arc::new(narad_clock::SystemClock::new()),
            },
            config,
        )
        .expect("start node");
        let router = node.router();
        Self {
            node: Some(node),
            router,
        }
    }

    fn new() -> Self {
        Self::start(ApiConfig::default(), 7)
    }

    async fn send(&self, request: Request<Body>) -> Answer {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
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

    async fn get(&self, uri: &str, who: (&str, &str)) -> Answer {
        self.send(get(uri, who)).await
    }

    /// A single produce that must answer `202`, then waits until the
    /// record is committed, so a consume that follows finds it.
    async fn produce(&self, uri: &str, body: impl Into<Body>) {
        let answer = self
            .send(
                Request::post(uri)
                    .header(header::AUTHORIZATION, basic(ROOT.0, ROOT.1))
                    .header(header::CONTENT_TYPE, "application/octet-stream")
                    .body(body.into())
                    .expect("request"),
            )
            .await;
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
        self.drained().await;
    }

    /// A queue consume of `topic` that must answer `200`: the message.
    async fn receive(&self, topic: &str) -> Value {
        let answer = self
            .get(&format!("/v1/topics/{topic}/consume?wait=5s"), ROOT)
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        serde_json::from_str(&answer.body).expect("message JSON")
    }

    /// A batch consume of up to `max` that must answer `200`: the messages.
    async fn receive_batch(&self, topic: &str, max: usize) -> Vec<Value> {
        let answer = self
            .send(batch_consume(
                &format!("/v1/topics/{topic}/consume?max={max}&wait=5s"),
                ROOT,
            ))
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let body: Value = serde_json::from_str(&answer.body).expect("batch JSON");
        body["messages"].as_array().expect("messages list").clone()
    }

    async fn ack(&self, topic: &str, query: &str) -> Answer {
        self.send(ack(
            &format!("/v1/topics/{topic}/ack?{query}"),
            ROOT,
            Body::empty(),
        ))
        .await
    }

    async fn ack_handle(&self, topic: &str, handle: &str, extend: Option<&str>) -> Answer {
        let handle = handle.replace(':', "%3A");
        let query = match extend {
            None => format!("receipt_handle={handle}"),
            Some(extend) => format!("extend={extend}&receipt_handle={handle}"),
        };
        self.ack(topic, &query).await
    }

    async fn batch_ack(&self, topic: &str, query: &str, handles: &[&str]) -> Answer {
        let body = json!({ "receipt_handles": handles }).to_string();
        self.send(ack(
            &format!("/v1/topics/{topic}/ack?{query}"),
            ROOT,
            body.into(),
        ))
        .await
    }

    /// Waits until every accepted record is committed to its partition.
    async fn drained(&self) {
        for _ in 0..15_000 {
            if self.node.as_ref().expect("running").drained() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("dispatch did not drain");
    }

    /// Waits until `count` consumes are parked on `topic`.
    async fn parked(&self, topic: &str, count: usize) {
        let consume = Arc::clone(self.node.as_ref().expect("running").consume());
        for _ in 0..15_000 {
            if consume.parked(topic) == count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("{count} consumes never parked on {topic}");
    }

    async fn metrics(&self) -> String {
        self.get("/metrics", ROOT).await.body
    }

    /// A graceful stop, off the async workers (it joins threads).
    async fn stop(mut self) {
        let node = self.node.take().expect("running");
        tokio::task::spawn_blocking(move || node.shutdown())
            .await
            .expect("shutdown");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            node.shutdown();
        }
    }
}

fn get(uri: &str, who: (&str, &str)) -> Request<Body> {
    Request::get(uri)
        .header(header::AUTHORIZATION, basic(who.0, who.1))
        .body(Body::empty())
        .expect("request")
}

fn batch_consume(uri: &str, who: (&str, &str)) -> Request<Body> {
    Request::get(uri)
        .header(header::AUTHORIZATION, basic(who.0, who.1))
        .header("x-narad-client", "narad-go/0.1.0")
        .body(Body::empty())
        .expect("request")
}

/// An ack as the Go client sends it: `Content-Type: application/json`,
/// `X-Narad-Client`, and no body for a single settle.
fn ack(uri: &str, who: (&str, &str), body: Body) -> Request<Body> {
    Request::post(uri)
        .header(header::AUTHORIZATION, basic(who.0, who.1))
        .header(header::CONTENT_TYPE, "application/json")
        .header("x-narad-client", "narad-go/0.1.0")
        .body(body)
        .expect("request")
}

fn handle_of(message: &Value) -> &str {
    message["receipt_handle"].as_str().expect("receipt_handle")
}

fn json_of(answer: &Answer) -> Value {
    serde_json::from_str(&answer.body).expect("JSON body")
}

// ---- consume: refusals -------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_without_credentials_is_401() {
    let node = Node::new();
    let answer = node
        .send(
            Request::get("/v1/topics/orders/consume")
                .body(Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.error(), "authentication required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_without_a_consume_grant_is_403() {
    let node = Node::new();
    let answer = node.get("/v1/topics/orders/consume", ALICE).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(answer.error(), "no consume grant on this topic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consume_grant_is_enough() {
    let node = Node::new();
    let answer = node.get("/v1/topics/orders/consume", CAROL).await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_of_an_unknown_topic_is_404() {
    let node = Node::new();
    let answer = node.get("/v1/topics/nope/consume", ROOT).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.error(), "topic not found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_of_a_partition_out_of_range_is_400() {
    let node = Node::new();
    let answer = node
        .get("/v1/topics/orders/consume?partition=3", ROOT)
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        answer.error(),
        "partition 3 out of range: topic has 3 partitions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unparsable_wait_is_400() {
    let node = Node::new();
    let answer = node.get("/v1/topics/orders/consume?wait=later", ROOT).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "invalid wait: invalid duration \"later\"");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_consume_without_the_client_header_is_400() {
    let node = Node::new();
    let answer = node.get("/v1/topics/orders/consume?max=10", ROOT).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        answer.error(),
        "batch consume requires an X-Narad-Client header"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_over_a_hundred_is_400() {
    let node = Node::new();
    let answer = node
        .send(batch_consume("/v1/topics/orders/consume?max=101", ROOT))
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "invalid max: want an integer from 1 to 100");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_with_offset_is_400() {
    let node = Node::new();
    let answer = node
        .send(batch_consume(
            "/v1/topics/orders/consume?max=2&offset=0&partition=0",
            ROOT,
        ))
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "max cannot be combined with offset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_without_partition_is_400() {
    let node = Node::new();
    let answer = node.get("/v1/topics/orders/consume?offset=0", ROOT).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "offset requires partition");
}

#[tokio::test]
async fn a_node_without_the_consume_service_answers_503() {
    let api = api();
    let answer = super::tests::send(&api, get("/v1/topics/orders/consume", ROOT)).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.error(), "consume is not available on this node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_on_consume_is_405() {
    let node = Node::new();
    let answer = node
        .send(ack("/v1/topics/orders/consume", ROOT, Body::empty()))
        .await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
}

// ---- consume: answers ----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_topic_answers_204_at_once_with_wait_0() {
    let node = Node::new();
    let answer = node.get("/v1/topics/orders/consume?wait=0", ROOT).await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    assert_eq!(answer.body, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_over_the_ceiling_is_clamped_and_says_so() {
    let node = Node::start(
        ApiConfig {
            max_consume_wait: Duration::from_millis(20),
            ..ApiConfig::default()
        },
        8,
    );
    let answer = node.get("/v1/topics/orders/consume?wait=1h", ROOT).await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    assert_eq!(
        answer
            .headers
            .get("x-narad-wait-clamped")
            .map(|v| v.as_bytes()),
        Some(&b"20ms"[..])
    );
    let answer = node.get("/v1/topics/orders/consume?wait=10ms", ROOT).await;
    assert!(answer.headers.get("x-narad-wait-clamped").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumed_message_has_every_field_and_a_lease() {
    let node = Node::new();
    node.produce(
        "/v1/topics/orders/produce?key=customer-1",
        r#"{"id": "o1",  "amount": 7.50}"#,
    )
    .await;
    let answer = node.get("/v1/topics/orders/consume?wait=5s", ROOT).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(
        answer
            .headers
            .get(header::CONTENT_TYPE)
            .map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );
    assert!(
        answer
            .body
            .contains(r#""payload":{"id": "o1",  "amount": 7.50}"#),
        "the JSON payload is verbatim: {}",
        answer.body
    );
    let message = json_of(&answer);
    assert_eq!(message["topic"], "orders");
    assert_eq!(message["offset"], 0);
    assert_eq!(message["key"], "customer-1");
    assert!(message["timestamp"].as_u64().expect("seconds") > 1_600_000_000);
    let partition = message["partition"].as_u64().expect("partition");
    let handle = handle_of(&message);
    assert!(handle.starts_with(&format!("{partition}:0:")), "{handle}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_consume_ack_and_a_second_ack_is_410() {
    let node = Node::new();
    node.produce("/v1/topics/orders/produce", "hello").await;
    let message = node.receive("orders").await;
    assert_eq!(message["payload"], "hello");
    let handle = handle_of(&message).to_owned();
    assert_eq!(
        node.ack_handle("orders", &handle, None).await.status,
        StatusCode::NO_CONTENT
    );
    let again = node.ack_handle("orders", &handle, None).await;
    assert_eq!(again.status, StatusCode::GONE);
    assert_eq!(again.error(), LEASE_GONE);
    let empty = node.get("/v1/topics/orders/consume", ROOT).await;
    assert_eq!(empty.status, StatusCode::NO_CONTENT, "acked: gone for good");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_is_answered_by_a_later_produce() {
    let node = Arc::new(Node::new());
    let waiting = {
        let node = Arc::clone(&node);
        tokio::spawn(async move { node.get("/v1/topics/orders/consume?wait=10s", ROOT).await })
    };
    node.parked("orders", 1).await;
    node.produce("/v1/topics/orders/produce", "late").await;
    let answer = waiting.await.expect("consume task");
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(json_of(&answer)["payload"], "late");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_right_after_a_produce_gets_the_message() {
    let node = Node::new();
    // Not waiting for the commit: the first consume of the topic races it
    // (its partition watchers start while the record is being committed).
    let produced = node
        .send(
            Request::post("/v1/topics/orders/produce")
                .header(header::AUTHORIZATION, basic(ROOT.0, ROOT.1))
                .header(header::CONTENT_TYPE, "application/octet-stream")
                .body(Body::from("racing"))
                .expect("request"),
        )
        .await;
    assert_eq!(produced.status, StatusCode::ACCEPTED);
    let message = node.receive("orders").await;
    assert_eq!(message["payload"], "racing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_consume_takes_only_its_partition() {
    let node = Node::new();
    node.produce("/v1/topics/orders/produce?partition=0", "zero")
        .await;
    node.produce("/v1/topics/orders/produce?partition=2", "two")
        .await;
    let answer = node
        .get("/v1/topics/orders/consume?partition=2&wait=5s", ROOT)
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    let message = json_of(&answer);
    assert_eq!(
        (message["partition"].as_u64(), &message["payload"]),
        (Some(2), &json!("two"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_consume_answers_a_messages_list_even_for_one() {
    let node = Node::new();
    node.produce("/v1/topics/orders/produce", "only").await;
    let messages = node.receive_batch("orders", 1).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["payload"], "only");
    assert!(messages[0]["receipt_handle"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_consume_returns_what_is_ready_up_to_max() {
    let node = Node::new();
    for i in 0..5 {
        node.produce("/v1/topics/orders/produce?partition=1", format!("m{i}"))
            .await;
    }
    node.drained().await;
    let mut payloads = Vec::new();
    while payloads.len() < 5 {
        let messages = node.receive_batch("orders", 3).await;
        assert!((1..=3).contains(&messages.len()), "{messages:?}");
        payloads.extend(messages.iter().map(|m| m["payload"].clone()));
    }
    assert_eq!(
        payloads,
        (0..5).map(|i| json!(format!("m{i}"))).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_batch_consume_is_204() {
    let node = Node::new();
    let answer = node
        .send(batch_consume("/v1/topics/orders/consume?max=10", ROOT))
        .await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    assert_eq!(answer.body, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_records_past_8_mib_are_released_at_once() {
    let node = Node::new();
    // 1 MiB of U+0001 renders as 6 MiB of `\u0001` escapes, so a second
    // record does not fit an 8 MiB answer.
    let payload = vec![0x01u8; 1024 * 1024];
    for _ in 0..2 {
        node.produce("/v1/topics/orders/produce?partition=0", payload.clone())
            .await;
    }
    node.drained().await;
    let first = node.receive_batch("orders", 2).await;
    assert_eq!(first.len(), 1, "the second record did not fit");
    assert_eq!(first[0]["offset"], 0);
    let second = node.receive_batch("orders", 2).await;
    assert_eq!(second.len(), 1, "released, so redelivered at once");
    assert_eq!(second[0]["offset"], 1);
    assert!(
        node.metrics()
            .await
            .contains(r#"narad_nack_total{topic="orders"} 1"#)
    );
}

// ---- replay ---------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_reads_without_a_lease() {
    let node = Node::new();
    node.produce("/v1/topics/orders/produce?partition=1", r#"{"n":1}"#)
        .await;
    node.drained().await;
    let answer = node
        .get("/v1/topics/orders/consume?offset=0&partition=1", ROOT)
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    let message = json_of(&answer);
    assert_eq!(message["payload"], json!({"n": 1}));
    assert!(message.get("receipt_handle").is_none());
    let leased = node.receive("orders").await;
    assert_eq!(leased["offset"], 0, "the replay reserved nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_past_the_end_is_204() {
    let node = Node::new();
    let answer = node
        .get("/v1/topics/orders/consume?offset=0&partition=0", ROOT)
        .await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
}

/// Deletes every segment of `orders` partition 0 as retention would ten
/// days from now with a one-hour retention.
fn age_out_partition_0(node: &Node) {
    let log = node
        .node
        .as_ref()
        .expect("running")
        .logs()
        .get(&Destination {
            topic: Arc::from("orders"),
            partition: 0,
        })
        .expect("partition 0 is open");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;
    let ten_days_on = now_ms + 10 * 86_400_000;
    let report = log
        .sweep_retention(ten_days_on, 3_600_000)
        .expect("retention sweep");
    assert!(!report.deleted.is_empty(), "the segment was deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_an_offset_retention_deleted_is_410() {
    let node = Node::new();
    for i in 0..2 {
        node.produce("/v1/topics/orders/produce?partition=0", format!("old{i}"))
            .await;
    }
    age_out_partition_0(&node);
    let answer = node
        .get("/v1/topics/orders/consume?offset=0&partition=0", ROOT)
        .await;
    assert_eq!(answer.status, StatusCode::GONE);
    assert_eq!(answer.error(), "offset 0 aged out of retention");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_retention_deleted_before_consumption_are_reported_dropped() {
    let node = Node::new();
    for i in 0..2 {
        node.produce("/v1/topics/orders/produce?partition=0", format!("old{i}"))
            .await;
    }
    age_out_partition_0(&node);
    let answer = node
        .get("/v1/topics/orders/consume?partition=0", ROOT)
        .await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    let text = node.metrics().await;
    assert!(
        text.contains(r#"narad_consumer_dropped_messages{topic="orders",partition="0"} 2"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_are_not_counted_as_consumed() {
    let node = Node::new();
    node.produce("/v1/topics/orders/produce?partition=1", "x")
        .await;
    node.drained().await;
    let answer = node
        .get("/v1/topics/orders/consume?offset=0&partition=1", ROOT)
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    let text = node.metrics().await;
    assert!(
        text.contains(r#"narad_messages_consumed_total{topic="orders",partition="1"} 0"#),
        "served at 0 since the produce took the partition's handles: {text}"
    );
}

// ---- ack, extend, nack ------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_without_a_handle_is_400_receipt_handle_required() {
    let node = Node::new();
    let answer = node.ack("orders", "").await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "receipt_handle required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_of_a_malformed_handle_is_400() {
    let node = Node::new();
    for handle in ["1:2", "a:b:c", "1:2:3:4", "-1:2:3"] {
        let answer = node.ack_handle("orders", handle, None).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{handle}");
        assert_eq!(
            answer.error(),
            "invalid receipt_handle: want partition:offset:nonce in decimal digits"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_with_an_unknown_extend_is_400_with_the_spec_text() {
    let node = Node::new();
    let answer = node.ack_handle("orders", "0:0:1", Some("maybe")).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        answer.error(),
        r#"invalid extend: want "true" (renew lease) or "0" (release for redelivery)"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_of_a_handle_never_leased_is_410() {
    let node = Node::new();
    let answer = node.ack_handle("orders", "0:0:12345", None).await;
    assert_eq!(answer.status, StatusCode::GONE);
    assert_eq!(answer.error(), LEASE_GONE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_on_an_unknown_topic_is_404() {
    let node = Node::new();
    let answer = node.ack_handle("nope", "0:0:1", None).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_without_a_consume_grant_is_403() {
    let node = Node::new();
    let answer = node
        .send(ack(
            "/v1/topics/orders/ack?receipt_handle=0%3A0%3A1",
            ALICE,
            Body::empty(),
        ))
        .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(answer.error(), "no consume grant on this topic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bodyless_ack_without_content_type_or_client_header_is_415() {
    let node = Node::new();
    let answer = node
        .send(
            Request::post("/v1/topics/orders/ack?receipt_handle=0%3A0%3A1")
                .header(header::AUTHORIZATION, basic(ROOT.0, ROOT.1))
                .body(Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(answer.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_header_alone_passes_the_guard() {
    let node = Node::new();
    let answer = node
        .send(
            Request::post("/v1/topics/orders/ack?receipt_handle=0%3A0%3A1")
                .header(header::AUTHORIZATION, basic(ROOT.0, ROOT.1))
                .header("x-narad-client", "curl")
                .body(Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(answer.status, StatusCode::GONE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_makes_the_message_redeliverable_at_once() {
    let node = Node::new();
    node.produce("/v1/topics/orders/produce", "again").await;
    let first = node.receive("orders").await;
    let handle = handle_of(&first).to_owned();
    assert_eq!(
        node.ack_handle("orders", &handle, Some("0")).await.status,
        StatusCode::NO_CONTENT
    );
    let second = node.receive("orders").await;
    assert_eq!(
        (&second["partition"], &second["offset"]),
        (&first["partition"], &first["offset"])
    );
    assert_ne!(handle_of(&second), handle, "a new lease, a new nonce");
    assert_eq!(
        node.ack_handle("orders", &handle, None).await.status,
        StatusCode::GONE,
        "the released lease is spent"
    );
    assert_eq!(
        node.ack_handle("orders", handle_of(&second), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert!(
        node.metrics()
            .await
            .contains(r#"narad_nack_total{topic="orders"} 1"#)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_keeps_the_same_handle_valid() {
    let node = Node::new();
    node.produce("/v1/topics/orders/produce", "long job").await;
    let message = node.receive("orders").await;
    let handle = handle_of(&message).to_owned();
    for extend in ["true", "1"] {
        assert_eq!(
            node.ack_handle("orders", &handle, Some(extend))
                .await
                .status,
            StatusCode::NO_CONTENT
        );
    }
    let nothing = node.get("/v1/topics/orders/consume", ROOT).await;
    assert_eq!(nothing.status, StatusCode::NO_CONTENT, "still leased");
    assert_eq!(
        node.ack_handle("orders", &handle, Some("false"))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert!(
        node.metrics()
            .await
            .contains(r#"narad_ack_extended_total{topic="orders"} 2"#)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_ack_answers_per_handle_results_in_order() {
    let node = Node::new();
    for i in 0..2 {
        node.produce("/v1/topics/orders/produce?partition=0", format!("b{i}"))
            .await;
    }
    node.drained().await;
    let mut handles = Vec::new();
    while handles.len() < 2 {
        for message in node.receive_batch("orders", 2).await {
            handles.push(handle_of(&message).to_owned());
        }
    }
    let answer = node
        .batch_ack(
            "orders",
            "",
            &[&handles[0], "garbage", &handles[1], &handles[0]],
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let results = json_of(&answer)["results"].clone();
    let statuses: Vec<u64> = results
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["status"].as_u64().expect("status"))
        .collect();
    assert_eq!(statuses, vec![204, 400, 204, 410]);
    assert!(results[0].get("error").is_none());
    assert_eq!(results[3]["error"], LEASE_GONE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_nack_applies_extend_to_every_handle() {
    let node = Node::new();
    for i in 0..2 {
        node.produce("/v1/topics/orders/produce?partition=0", format!("n{i}"))
            .await;
    }
    node.drained().await;
    let mut handles = Vec::new();
    while handles.len() < 2 {
        for message in node.receive_batch("orders", 2).await {
            handles.push(handle_of(&message).to_owned());
        }
    }
    let answer = node
        .batch_ack("orders", "extend=0", &[&handles[0], &handles[1]])
        .await;
    assert_eq!(
        answer.body,
        "{\"results\":[{\"status\":204},{\"status\":204}]}\n"
    );
    let mut redelivered = 0;
    while redelivered < 2 {
        redelivered += node.receive_batch("orders", 2).await.len();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_ack_of_101_handles_is_400() {
    let node = Node::new();
    let handles: Vec<String> = (0..101).map(|i| format!("0:{i}:1")).collect();
    let refs: Vec<&str> = handles.iter().map(String::as_str).collect();
    let answer = node.batch_ack("orders", "", &refs).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "too many receipt_handles: more than 100");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_ack_body_over_64_kib_is_413() {
    let node = Node::new();
    let body = format!("{{\"receipt_handles\":[\"{}\"]}}", "1".repeat(64 * 1024));
    let answer = node
        .send(ack("/v1/topics/orders/ack", ROOT, body.into()))
        .await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_ack_with_an_unknown_field_is_400() {
    let node = Node::new();
    let answer = node
        .send(ack(
            "/v1/topics/orders/ack",
            ROOT,
            r#"{"receipt_handles":["0:0:1"],"extend":true}"#.into(),
        ))
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
}

// ---- partitions owned by another node --------------------------------------

fn assert_owner_unavailable(answer: &Answer) {
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.error(), "partition owner is down; retry later");
    assert_eq!(
        answer
            .headers
            .get(header::RETRY_AFTER)
            .map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_consume_of_a_partition_owned_elsewhere_is_503() {
    let node = Node::new();
    let answer = node.get("/v1/topics/split/consume?partition=1", ROOT).await;
    assert_owner_unavailable(&answer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_a_partition_owned_elsewhere_is_503() {
    let node = Node::new();
    let answer = node
        .get("/v1/topics/split/consume?offset=0&partition=2", ROOT)
        .await;
    assert_owner_unavailable(&answer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_for_a_partition_owned_elsewhere_is_503() {
    let node = Node::new();
    let answer = node.ack_handle("split", "1:0:1", None).await;
    assert_owner_unavailable(&answer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_consume_takes_the_local_partitions_only() {
    let node = Node::new();
    node.produce("/v1/topics/split/produce?partition=0", "local")
        .await;
    let message = node.receive("split").await;
    assert_eq!(
        (message["partition"].as_u64(), &message["payload"]),
        (Some(0), &json!("local"))
    );
    let nothing = node.get("/v1/topics/split/consume", ROOT).await;
    assert_eq!(nothing.status, StatusCode::NO_CONTENT);
}

// ---- restart -----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_survive_a_graceful_restart_even_out_of_order() {
    let sim = SimDisk::new(21);
    let node = Node::on(sim.clone(), ApiConfig::default(), 21);
    for i in 0..3 {
        node.produce("/v1/topics/orders/produce?partition=0", format!("r{i}"))
            .await;
    }
    node.drained().await;
    let mut handles = Vec::new();
    while handles.len() < 3 {
        for message in node.receive_batch("orders", 3).await {
            handles.push(handle_of(&message).to_owned());
        }
    }
    for acked in [&handles[2], &handles[0]] {
        assert_eq!(
            node.ack_handle("orders", acked, None).await.status,
            StatusCode::NO_CONTENT
        );
    }
    node.stop().await;
    let node = Node::on(sim, ApiConfig::default(), 22);
    let message = node.receive("orders").await;
    assert_eq!(
        (message["offset"].as_u64(), &message["payload"]),
        (Some(1), &json!("r1")),
        "only the unacked message comes again"
    );
    let empty = node.get("/v1/topics/orders/consume", ROOT).await;
    assert_eq!(empty.status, StatusCode::NO_CONTENT);
}

/// A long poll that could otherwise wait an hour: only a stop can end it.
fn hour_long_polls() -> ApiConfig {
    ApiConfig {
        max_consume_wait: Duration::from_secs(3_600),
        ..ApiConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_consumes_answers_parked_long_polls_with_204() {
    let node = Arc::new(Node::start(hour_long_polls(), 23));
    let waiting = {
        let node = Arc::clone(&node);
        tokio::spawn(async move { node.get("/v1/topics/orders/consume?wait=1h", ROOT).await })
    };
    node.parked("orders", 1).await;
    node.node.as_ref().expect("running").stop_consumes();
    let answer = tokio::time::timeout(CEILING, waiting)
        .await
        .expect("the stop answered the long poll")
        .expect("task");
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    let later = node.get("/v1/topics/orders/consume?wait=1h", ROOT).await;
    assert_eq!(later.status, StatusCode::NO_CONTENT, "answered at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_serve_stop_releases_long_polls_over_tcp() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = Arc::new(Node::start(hour_long_polls(), 24));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = {
        let node = Arc::clone(&node);
        tokio::spawn(async move {
            let data_node = node.node.as_ref().expect("running");
            data_node
                .serve(listener, async {
                    let _ = stopped.await;
                })
                .await
        })
    };
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let request = format!(
        "GET /v1/topics/orders/consume?wait=1h HTTP/1.1\r\nHost: narad\r\nAuthorization: {}\r\nConnection: close\r\n\r\n",
        basic(ROOT.0, ROOT.1)
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write request");
    node.parked("orders", 1).await;
    stop.send(()).expect("stop");
    let mut response = String::new();
    tokio::time::timeout(CEILING, stream.read_to_string(&mut response))
        .await
        .expect("the stop answered the long poll")
        .expect("read response");
    assert!(response.starts_with("HTTP/1.1 204"), "{response}");
    server.await.expect("server task").expect("serve");
}

// ---- cap and metrics ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumes_past_the_identity_cap_are_429() {
    let node = Arc::new(Node::start(
        ApiConfig {
            consume_in_flight_per_identity: 2,
            ..ApiConfig::default()
        },
        9,
    ));
    // A batch of 5 holds the whole cap of 2 while it waits.
    let parked = {
        let node = Arc::clone(&node);
        tokio::spawn(async move {
            node.send(batch_consume(
                "/v1/topics/orders/consume?max=5&wait=10s",
                ROOT,
            ))
            .await
        })
    };
    node.parked("orders", 1).await;
    let refused = node.get("/v1/topics/orders/consume", ROOT).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.error(),
        "too many in-flight consume requests for this identity (limit 2 per node)"
    );
    let other = node.get("/v1/topics/orders/consume", CAROL).await;
    assert_eq!(
        other.status,
        StatusCode::NO_CONTENT,
        "other users are not capped"
    );
    node.produce("/v1/topics/orders/produce", "free").await;
    assert_eq!(parked.await.expect("task").status, StatusCode::OK);
    let after = node.get("/v1/topics/orders/consume", ROOT).await;
    assert_eq!(
        after.status,
        StatusCode::NO_CONTENT,
        "the cap was given back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_metrics_are_exported_after_traffic() {
    let node = Node::new();
    node.produce("/v1/topics/orders/produce?partition=1", "12345")
        .await;
    let message = node.receive("orders").await;
    let empty = node.get("/v1/topics/orders/consume", ROOT).await;
    assert_eq!(empty.status, StatusCode::NO_CONTENT);
    let text = node.metrics().await;
    for series in [
        r#"narad_messages_consumed_total{topic="orders",partition="1"} 1"#,
        r#"narad_bytes_consumed_total{topic="orders",partition="1"} 5"#,
        r#"narad_consume_empty_total{topic="orders"} 1"#,
        r#"narad_consume_wait_seconds_count{topic="orders",outcome="hit"} 1"#,
        r#"narad_consume_wait_seconds_count{topic="orders",outcome="no_wait"} 1"#,
        r#"narad_inflight_size{topic="orders",partition="1"} 1"#,
        r#"narad_acked_ahead_size{topic="orders",partition="1"} 0"#,
        r#"narad_consumer_dropped_messages{topic="orders",partition="1"} 0"#,
        r#"narad_consumer_corrupt_skipped_total{topic="orders",partition="1"} 0"#,
    ] {
        assert!(text.contains(series), "missing {series} in\n{text}");
    }
    // The lag is the partition poller's (`partitions::poller`), which
    // this API-only node does not run.
    node.ack_handle("orders", handle_of(&message), None).await;
    let text = node.metrics().await;
    assert!(text.contains(r#"narad_inflight_size{topic="orders",partition="1"} 0"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consume_whose_client_left_is_recorded_as_cancelled() {
    let node = Arc::new(Node::new());
    let waiting = {
        let node = Arc::clone(&node);
        tokio::spawn(async move { node.get("/v1/topics/orders/consume?wait=10s", ROOT).await })
    };
    node.parked("orders", 1).await;
    waiting.abort();
    assert!(waiting.await.is_err(), "the consume was still waiting");
    node.parked("orders", 0).await;
    assert!(
        node.metrics()
            .await
            .contains(r#"narad_consume_wait_seconds_count{topic="orders",outcome="cancelled"} 1"#)
    );
}

// ---- wire contract §13 ---------------------------------------------------------

/// §13 items 14–17: a batch produce of 30 messages with text keys, binary
/// keys and no keys, consumed with `max=10` by two workers; every key comes
/// back byte for byte and every batch ack succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_14_to_17_batch_produce_and_batch_consume_keep_keys() {
    let node = Arc::new(Node::new());
    let mut produced: HashMap<String, Option<Vec<u8>>> = HashMap::new();
    let mut messages = Vec::new();
    for i in 0..30u8 {
        let id = format!("m{i}");
        let key = match i % 3 {
            0 => Some(format!("customer-{i}").into_bytes()),
            1 => Some(vec![0x00, i, 0x83, 0xff]),
            _ => None,
        };
        let mut message = json!({ "payload": { "id": id } });
        match &key {
            Some(key) if i % 3 == 1 => {
                message["key"] = json!(BASE64.encode(key));
                message["key_encoding"] = json!("base64");
            }
            Some(key) => message["key"] = json!(String::from_utf8(key.clone()).expect("text")),
            None => {}
        }
        messages.push(message);
        produced.insert(id, key);
    }
    let answer = node
        .send(
            Request::post("/v1/topics/orders/produce/batch")
                .header(header::AUTHORIZATION, basic(ROOT.0, ROOT.1))
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(json!({ "messages": messages }).to_string()))
                .expect("request"),
        )
        .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    assert_eq!(json_of(&answer)["accepted"], 30);
    node.drained().await;
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let node = Arc::clone(&node);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                loop {
                    let answer = node
                        .send(batch_consume(
                            "/v1/topics/orders/consume?max=10&wait=1s",
                            ROOT,
                        ))
                        .await;
                    if answer.status == StatusCode::NO_CONTENT {
                        return seen;
                    }
                    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
                    let batch = json_of(&answer)["messages"]
                        .as_array()
                        .expect("list")
                        .clone();
                    let handles: Vec<&str> = batch.iter().map(handle_of).collect();
                    let acked = node.batch_ack("orders", "", &handles).await;
                    assert_eq!(acked.status, StatusCode::OK);
                    let results = json_of(&acked)["results"]
                        .as_array()
                        .expect("results")
                        .clone();
                    assert_eq!(results.len(), handles.len());
                    assert!(results.iter().all(|r| r["status"] == 204), "{results:?}");
                    seen.extend(batch);
                }
            })
        })
        .collect();
    let mut consumed: HashMap<String, Value> = HashMap::new();
    for worker in workers {
        for message in worker.await.expect("worker") {
            let id = message["payload"]["id"].as_str().expect("id").to_owned();
            assert!(consumed.insert(id, message).is_none(), "a duplicate");
        }
    }
    assert_eq!(consumed.len(), 30);
    for (id, key) in produced {
        let message = &consumed[&id];
        match key {
            None => {
                assert!(message.get("key").is_none(), "{message}");
                assert!(message.get("key_encoding").is_none());
            }
            Some(key) => {
                let decoded = match message["key_encoding"].as_str() {
                    Some("base64") => BASE64
                        .decode(message["key"].as_str().expect("key"))
                        .expect("base64"),
                    None => message["key"].as_str().expect("key").as_bytes().to_vec(),
                    Some(other) => panic!("key_encoding {other}"),
                };
                assert_eq!(decoded, key, "{message}");
            }
        }
    }
}

/// §13 items 20–21: 20 single keyed produces, consumed by four workers with
/// single consumes and acked one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_20_21_single_produces_reach_four_single_consumers() {
    let node = Arc::new(Node::new());
    for i in 0..20 {
        node.produce(
            &format!("/v1/topics/orders/produce?key=customer-{i}"),
            format!("{{\"n\":{i}}}"),
        )
        .await;
    }
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let node = Arc::clone(&node);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                loop {
                    let answer = node.get("/v1/topics/orders/consume?wait=1s", ROOT).await;
                    if answer.status == StatusCode::NO_CONTENT {
                        return seen;
                    }
                    assert_eq!(answer.status, StatusCode::OK);
                    let message = json_of(&answer);
                    let acked = node.ack_handle("orders", handle_of(&message), None).await;
                    assert_eq!(acked.status, StatusCode::NO_CONTENT);
                    seen.push(message["payload"]["n"].as_u64().expect("n"));
                }
            })
        })
        .collect();
    let mut all = BTreeSet::new();
    for worker in workers {
        for n in worker.await.expect("worker") {
            assert!(all.insert(n), "a duplicate");
        }
    }
    assert_eq!(all, (0..20).collect());
}

/// §13 items 22–27: an envelope comes back as verbatim JSON; a retry is
/// produced as a new record with attempts + 1 before the original is
/// acked, and the next receive gets the copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_22_to_27_envelopes_round_trip_and_a_retry_is_a_new_record() {
    let node = Node::new();
    let envelope = json!({
        "_narad": 1, "id": "pay_env", "attempts": 1, "produced_at": 1_700_000_000_000u64,
        "headers": {"trace": "it-trace-1"}, "body": {"id": "pay_env", "amount": 42}
    });
    node.produce("/v1/topics/orders/produce", envelope.to_string())
        .await;
    let first = node.receive("orders").await;
    assert_eq!(first["payload"], envelope, "verbatim JSON, not a string");
    let mut retry = envelope.clone();
    retry["attempts"] = json!(2);
    retry["last_error"] = json!("downstream refused");
    node.produce("/v1/topics/orders/produce", retry.to_string())
        .await;
    assert_eq!(
        node.ack_handle("orders", handle_of(&first), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let second = node.receive("orders").await;
    assert_eq!(second["payload"]["attempts"], 2);
    assert_eq!(second["payload"]["last_error"], "downstream refused");
    assert_eq!(second["payload"]["id"], "pay_env");
    let same_place =
        second["partition"] == first["partition"] && second["offset"] == first["offset"];
    assert!(!same_place, "the copy is a new record");
    assert_eq!(
        node.ack_handle("orders", handle_of(&second), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
}

/// §13 items 28–30: `Replay` (describe, then offset reads from each
/// partition's `oldest_offset` until `204`) reads exactly the 10 records,
/// none with a receipt handle, and a later receive still gets a message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_28_to_30_replay_reads_history_and_reserves_nothing() {
    let node = Node::new();
    for i in 0..10 {
        node.produce("/v1/topics/orders/produce", format!("{{\"r\":{i}}}"))
            .await;
    }
    node.drained().await;
    let described = json_of(&node.get("/v1/topics/orders", ROOT).await);
    let stats = described["partition_stats"]
        .as_array()
        .expect("stats")
        .clone();
    let mut replayed = Vec::new();
    for (partition, stat) in stats.iter().enumerate() {
        let mut offset = stat["oldest_offset"].as_u64().expect("oldest_offset");
        loop {
            let answer = node
                .get(
                    &format!("/v1/topics/orders/consume?offset={offset}&partition={partition}"),
                    ROOT,
                )
                .await;
            if answer.status == StatusCode::NO_CONTENT {
                break;
            }
            assert_eq!(answer.status, StatusCode::OK);
            let message = json_of(&answer);
            assert!(message.get("receipt_handle").is_none());
            offset = message["offset"].as_u64().expect("offset") + 1;
            replayed.push(message["payload"]["r"].as_u64().expect("r"));
        }
    }
    replayed.sort_unstable();
    assert_eq!(replayed, (0..10).collect::<Vec<_>>());
    let message = node.receive("orders").await;
    assert_eq!(
        node.ack_handle("orders", handle_of(&message), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
}
