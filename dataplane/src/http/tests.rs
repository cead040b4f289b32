//! HTTP tests: every route and error case of the produce API, auth, the
//! cross-site guard, health and metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use narad_disk::sim::{Fault, FaultError, FaultOp, SimDisk};
use narad_wal::Wal;
use tower::ServiceExt;

use super::{ApiConfig, ApiState, Health, router};
use crate::admin::{Admin, LocalAdmin};
use crate::ingress::Acceptor;
use crate::ingress::partition::key_partition;
use crate::metadata::MetadataReplica;
use crate::metrics::NodeMetrics;
use crate::testing::{basic, replica, sim_wal, wal_records};

pub(super) struct Api {
    pub(super) router: Router,
    pub(super) state: Arc<ApiState>,
    pub(super) wal: Arc<Wal>,
    pub(super) sim: SimDisk,
}

pub(super) fn api_with(config: ApiConfig) -> Api {
    api_with_budget(config, super::body::BATCH_BODY_BYTES_IN_FLIGHT_MAX)
}

fn api_with_budget(config: ApiConfig, budget_bytes: usize) -> Api {
    api_with_parts(config, budget_bytes, 2)
}

fn api_with_parts(config: ApiConfig, budget_bytes: usize, validation_slots: usize) -> Api {
    api_with_admin(config, budget_bytes, validation_slots, |replica| {
        Arc::new(LocalAdmin::new(replica))
    })
}

/// An API whose admin changes go to the admin `admin` makes over the
/// test replica.
pub(super) fn api_with_admin(
    config: ApiConfig,
    budget_bytes: usize,
    validation_slots: usize,
    admin: impl FnOnce(Arc<MetadataReplica>) -> Arc<dyn Admin>,
) -> Api {
    api_over(replica(), config, budget_bytes, validation_slots, admin)
}

/// An API whose state `tune` changed before it was shared.
pub(super) fn api_with_state(
    config: ApiConfig,
    budget_bytes: usize,
    validation_slots: usize,
    admin: impl FnOnce(Arc<MetadataReplica>) -> Arc<dyn Admin>,
    tune: impl FnOnce(&mut ApiState),
) -> Api {
    api_over(replica(), config, budget_bytes, validation_slots, admin).rebuilt(tune)
}

/// An API over `replica` (another API's, to see what a second node of
/// the same cluster answers), changing `state` before it serves.
pub(super) fn api_over_replica(
    replica: Arc<MetadataReplica>,
    config: ApiConfig,
    change: impl FnOnce(&mut ApiState),
) -> Api {
    api_over(
        replica,
        config,
        super::body::BATCH_BODY_BYTES_IN_FLIGHT_MAX,
        2,
        |replica| {
            let admin: Arc<dyn Admin> = Arc::new(LocalAdmin::new(replica));
            admin
        },
    )
    .rebuilt(change)
}

impl Api {
    /// The same API with `change` made to its state (nothing may hold
    /// the state yet).
    fn rebuilt(self, change: impl FnOnce(&mut ApiState)) -> Self {
        let Api {
            router: served,
            state,
            wal,
            sim,
        } = self;
        drop(served);
        let mut state = Arc::into_inner(state).expect("the state is not shared yet");
        change(&mut state);
        let state = Arc::new(state);
        Api {
            router: router(Arc::clone(&state)),
            state,
            wal,
            sim,
        }
    }
}

fn api_over(
    replica: Arc<MetadataReplica>,
    config: ApiConfig,
    budget_bytes: usize,
    validation_slots: usize,
    admin: impl FnOnce(Arc<MetadataReplica>) -> Arc<dyn Admin>,
) -> Api {
    let (sim, wal) = sim_wal(11);
    let metrics = Arc::new(NodeMetrics::new());
    let acceptor = Arc::new(
        Acceptor::new(
            Arc::clone(&wal),
            Arc::clone(&replica),
            5,
            crate::testing::system_clock(),
        )
        .with_validation_slots(validation_slots, std::time::Duration::ZERO)
        .with_validation_timer(metrics.histogram(crate::metrics::SCHEMA_VALIDATION_SECONDS, &[])),
    );
    let admin_replica = Arc::clone(&replica);
    let health = Arc::new(Health::default());
    health.started.store(true, Ordering::Release);
    let mut state = ApiState::new(
        config,
        acceptor,
        replica,
        metrics,
        health,
        Arc::new(AtomicU64::new(0)),
        admin(admin_replica),
    );
    state.body_budget = super::body::BodyBudget::new(budget_bytes);
    let disk: Arc<dyn narad_disk::Disk> = Arc::new(sim.clone());
    state.logs = Some(Arc::new(crate::partitions::LocalLogs::new(
        disk,
        "/node",
        narad_plog::LogConfig::default(),
        crate::testing::system_clock(),
    )));
    let state = Arc::new(state);
    Api {
        router: router(Arc::clone(&state)),
        state,
        wal,
        sim,
    }
}

pub(super) fn api() -> Api {
    api_with(ApiConfig::default())
}

pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) headers: axum::http::HeaderMap,
    pub(super) body: String,
}

impl Answer {
    pub(super) fn error(&self) -> String {
        let value: serde_json::Value = serde_json::from_str(&self.body).expect("JSON error body");
        value["error"].as_str().expect("error text").to_owned()
    }
}

pub(super) async fn send(api: &Api, request: Request<Body>) -> Answer {
    let response = api
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

fn post(uri: &str) -> axum::http::request::Builder {
    Request::post(uri)
}

/// A JSON request as `who` (username, password).
pub(super) fn request(method: &str, uri: &str, who: (&str, &str), body: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, basic(who.0, who.1))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .expect("request")
}

pub(super) fn produce_request(
    uri: &str,
    who: (&str, &str),
    body: impl Into<Body>,
) -> Request<Body> {
    post(uri)
        .header(header::AUTHORIZATION, basic(who.0, who.1))
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .body(body.into())
        .expect("request")
}

pub(super) const ALICE: (&str, &str) = ("alice", "alice-pw");

#[tokio::test]
async fn produce_answers_202_after_staging_a_format_2_record() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce?partition=1", ALICE, "hello"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    assert_eq!(answer.body, "");
    let records = wal_records(&api.wal);
    assert_eq!(records.len(), 1);
    let record = &records[0].1;
    assert_eq!(record.topic, "orders");
    assert_eq!(record.incarnation_id.as_deref(), Some("00000000000000a1"));
    assert_eq!(record.partition, 1);
    assert_eq!(record.payload, b"hello");
    assert!(record.key.is_empty());
}

#[tokio::test]
async fn keyed_produce_goes_to_the_fnv_partition() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce?key=%83abc", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    let record = &wal_records(&api.wal)[0].1;
    assert_eq!(record.key, vec![0x83, b'a', b'b', b'c']);
    assert_eq!(
        record.partition,
        key_partition(&[0x83, b'a', b'b', b'c'], 3)
    );
}

#[tokio::test]
async fn pinned_partition_wins_over_the_key() {
    let api = api();
    let pinned = (key_partition(b"k", 3) + 1) % 3;
    let uri = format!("/v1/topics/orders/produce?key=k&partition={pinned}");
    send(&api, produce_request(&uri, ALICE, "x")).await;
    assert_eq!(wal_records(&api.wal)[0].1.partition, pinned);
}

#[tokio::test]
async fn keyless_produces_rotate_over_every_partition() {
    let api = api();
    for _ in 0..3 {
        send(
            &api,
            produce_request("/v1/topics/orders/produce", ALICE, "x"),
        )
        .await;
    }
    let mut partitions: Vec<u32> = wal_records(&api.wal)
        .iter()
        .map(|(_, r)| r.partition)
        .collect();
    partitions.sort_unstable();
    assert_eq!(partitions, vec![0, 1, 2]);
}

#[tokio::test]
async fn partition_out_of_range_is_400() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce?partition=3", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        answer.error(),
        "partition 3 out of range: topic has 3 partitions"
    );
    assert!(wal_records(&api.wal).is_empty());
}

#[tokio::test]
async fn malformed_partition_is_400() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce?partition=-1", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn duplicate_key_parameter_is_400() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce?key=a&key=b", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "duplicate key query parameter");
}

#[tokio::test]
async fn unknown_topic_is_404() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/ordersx/produce", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.error(), "topic not found");
    assert_eq!(answer.headers[header::CONTENT_TYPE], "application/json");
}

#[tokio::test]
async fn empty_body_is_400() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, ""),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "message required");
}

#[tokio::test]
async fn exactly_one_mebibyte_is_accepted() {
    let api = api();
    let body = vec![b'a'; 1024 * 1024];
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, body),
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn over_one_mebibyte_is_413() {
    let api = api();
    let body = vec![b'a'; 1024 * 1024 + 1];
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, body),
    )
    .await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.error(), "request body too large");
}

#[tokio::test]
async fn missing_credentials_are_401_with_a_challenge() {
    let api = api();
    let request = post("/v1/topics/orders/produce")
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .body(Body::from("x"))
        .expect("request");
    let answer = send(&api, request).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.error(), "authentication required");
    assert_eq!(
        answer.headers[header::WWW_AUTHENTICATE],
        r#"Basic realm="narad""#
    );
}

#[tokio::test]
async fn unknown_user_is_401_without_running_bcrypt() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce", ("mallory", "x"), "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(api.state.auth.bcrypt_runs(), 0);
}

#[tokio::test]
async fn verified_credentials_are_cached() {
    let api = api();
    for _ in 0..3 {
        let answer = send(
            &api,
            produce_request("/v1/topics/orders/produce", ALICE, "x"),
        )
        .await;
        assert_eq!(answer.status, StatusCode::ACCEPTED);
    }
    assert_eq!(api.state.auth.bcrypt_runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_concurrent_credentials_share_one_bcrypt_run() {
    let api = api();
    let requests: Vec<_> = (0..8)
        .map(|_| {
            let router = api.router.clone();
            tokio::spawn(async move {
                let request = produce_request("/v1/topics/orders/produce", ALICE, "x");
                router.oneshot(request).await.expect("infallible").status()
            })
        })
        .collect();
    for request in requests {
        assert_eq!(request.await.expect("task"), StatusCode::ACCEPTED);
    }
    assert_eq!(api.state.auth.bcrypt_runs(), 1);
}

#[tokio::test]
async fn sixth_wrong_password_is_throttled_with_429() {
    let api = api();
    for _ in 0..5 {
        let answer = send(
            &api,
            produce_request("/v1/topics/orders/produce", ("alice", "wrong"), "x"),
        )
        .await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    }
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce", ("alice", "wrong"), "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(answer.error(), "too many failed authentication attempts");
}

#[tokio::test]
async fn user_without_produce_grant_is_403() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce", ("bob", "bob-pw"), "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(answer.error(), "no produce grant on this topic");
}

#[tokio::test]
async fn grant_pattern_does_not_reach_other_topics() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/legacy/produce", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn post_without_api_content_type_is_415() {
    let api = api();
    let request = post("/v1/topics/orders/produce")
        .header(header::AUTHORIZATION, basic("alice", "alice-pw"))
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("x"))
        .expect("request");
    assert_eq!(
        send(&api, request).await.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
}

#[tokio::test]
async fn narad_client_header_passes_the_guard() {
    let api = api();
    let request = post("/v1/topics/orders/produce")
        .header(header::AUTHORIZATION, basic("alice", "alice-pw"))
        .header("x-narad-client", "narad-go/0.1.0")
        .body(Body::from("x"))
        .expect("request");
    assert_eq!(send(&api, request).await.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn json_content_type_with_charset_passes_the_guard() {
    let api = api();
    let request = post("/v1/topics/orders/produce")
        .header(header::AUTHORIZATION, basic("alice", "alice-pw"))
        .header(header::CONTENT_TYPE, "application/json; charset=utf-8")
        .body(Body::from("{}"))
        .expect("request");
    assert_eq!(send(&api, request).await.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn anonymous_request_gets_401_before_415() {
    let api = api();
    let request = post("/v1/topics/orders/produce")
        .body(Body::from("x"))
        .expect("request");
    assert_eq!(send(&api, request).await.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn security_off_needs_no_credentials() {
    let api = api_with(ApiConfig {
        security: false,
        ..ApiConfig::default()
    });
    let request = post("/v1/topics/legacy/produce")
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .body(Body::from("x"))
        .expect("request");
    assert_eq!(send(&api, request).await.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn schema_refusal_is_400_with_the_schema_text() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/typed/produce", ALICE, r#"{"amount":"x"}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(
        answer.error().starts_with("schema: /amount: "),
        "{}",
        answer.error()
    );
    assert!(
        api.state
            .metrics
            .render()
            .contains("narad_produce_rejections_total")
    );
}

/// The value of series `name{labels}` in a Prometheus text exposition.
pub(super) fn series_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series))
        .and_then(|rest| rest.trim().parse().ok())
}

#[tokio::test]
async fn schema_refusals_are_counted_by_reason() {
    let api = api();
    let invalid = r#"narad_schema_rejections_total{reason="invalid"}"#;
    let malformed = r#"narad_schema_rejections_total{reason="malformed"}"#;
    let depth = r#"narad_schema_rejections_total{reason="depth"}"#;
    let before = api.state.metrics.render();
    for series in [invalid, malformed, depth] {
        assert_eq!(
            series_value(&before, series),
            Some(0.0),
            "{series} starts at 0"
        );
    }
    let deep = "[".repeat(300);
    for body in [
        r#"{"amount":"x"}"#.to_owned(),
        r#"{"amount":1} {}"#.to_owned(),
        deep,
    ] {
        let answer = send(
            &api,
            produce_request("/v1/topics/typed/produce", ALICE, body),
        )
        .await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.error());
    }
    let after = api.state.metrics.render();
    for series in [invalid, malformed, depth] {
        assert_eq!(series_value(&after, series), Some(1.0), "{series}\n{after}");
    }
    assert_eq!(
        series_value(&after, "narad_schema_validations_in_flight "),
        None,
        "the gauge is set when /metrics refreshes it, not before"
    );
}

#[tokio::test]
async fn every_schema_validation_is_timed_whatever_its_verdict() {
    let api = api();
    let count = "narad_schema_validation_seconds_count ";
    assert_eq!(series_value(&api.state.metrics.render(), count), Some(0.0));
    for body in [r#"{"amount":"x"}"#, r#"{"amount":1}"#] {
        send(
            &api,
            produce_request("/v1/topics/typed/produce", ALICE, body),
        )
        .await;
    }
    let text = api.state.metrics.render();
    assert_eq!(series_value(&text, count), Some(2.0), "{text}");
    assert!(
        text.contains("narad_schema_validation_seconds_bucket{le=\"0.00005\"}"),
        "{text}"
    );
}

#[tokio::test]
async fn conforming_payload_on_a_schema_topic_is_accepted() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/typed/produce", ALICE, r#"{"amount":3}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn payload_nested_too_deep_is_400() {
    let api = api();
    let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
    let answer = send(
        &api,
        produce_request("/v1/topics/typed/produce", ALICE, deep),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "payload nests deeper than 256 levels");
}

#[tokio::test]
async fn produce_to_a_delay_child_is_409() {
    let api = api();
    let answer = send(
        &api,
        produce_request("/v1/topics/delayed/produce", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert!(
        answer
            .error()
            .contains("delayed child topic is not allowed")
    );
}

#[tokio::test]
async fn wal_failure_is_500_produce_failed_and_latches_the_gauge() {
    let api = api();
    api.sim.inject(Fault {
        op: FaultOp::Sync,
        nth: 0,
        error: FaultError::Eio,
        sticky: true,
    });
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(answer.error(), "produce failed");
    let again = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, "x"),
    )
    .await;
    assert_eq!(again.status, StatusCode::INTERNAL_SERVER_ERROR);
    let metrics = send(&api, get_with("/metrics", ("root", "root-pw"))).await;
    assert!(
        metrics.body.contains("narad_ingress_wal_failed 1"),
        "{}",
        metrics.body
    );
}

fn batch_request(who: (&str, &str)) -> axum::http::request::Builder {
    post("/v1/topics/orders/produce/batch")
        .header(header::AUTHORIZATION, basic(who.0, who.1))
        .header(header::CONTENT_TYPE, "application/json")
}

fn batch(who: (&str, &str), body: &str) -> Request<Body> {
    batch_request(who)
        .body(Body::from(body.to_owned()))
        .expect("request")
}

#[tokio::test]
async fn batch_answers_accepted_count_with_consecutive_seqs() {
    let api = api();
    let answer = send(
        &api,
        batch(ALICE, r#"{"messages":[{"payload":{"id": 1}},{"payload":"s","key":"k"},{"payload":"AQI=","payload_encoding":"base64","partition":2}]}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    assert_eq!(answer.body, "{\"accepted\":3}\n");
    let records = wal_records(&api.wal);
    let seqs: Vec<u64> = records.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, vec![0, 1, 2]);
    assert_eq!(records[0].1.payload, br#"{"id": 1}"#);
    assert_eq!(records[1].1.payload, br#""s""#);
    assert_eq!(records[1].1.partition, key_partition(b"k", 3));
    assert_eq!(records[2].1.payload, vec![1, 2]);
    assert_eq!(records[2].1.partition, 2);
    assert_eq!(
        records[0].1.created_at_unix_ms,
        records[2].1.created_at_unix_ms
    );
}

#[tokio::test]
async fn batch_schema_failure_names_the_message_and_stores_nothing() {
    let api = api();
    let request = post("/v1/topics/typed/produce/batch")
        .header(header::AUTHORIZATION, basic("alice", "alice-pw"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            r#"{"messages":[{"payload":{"amount":1}},{"payload":{"amount":1.5}}]}"#,
        ))
        .expect("request");
    let answer = send(&api, request).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(
        answer.error().starts_with("message 1: schema: "),
        "{}",
        answer.error()
    );
    assert!(wal_records(&api.wal).is_empty());
}

#[tokio::test]
async fn batch_partition_out_of_range_names_the_message() {
    let api = api();
    let answer = send(
        &api,
        batch(ALICE, r#"{"messages":[{"payload":1,"partition":9}]}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        answer.error(),
        "message 0: partition 9 out of range: topic has 3 partitions"
    );
}

#[tokio::test]
async fn batch_with_a_query_parameter_is_400() {
    let api = api();
    let request = post("/v1/topics/orders/produce/batch?key=k")
        .header(header::AUTHORIZATION, basic("alice", "alice-pw"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"messages":[{"payload":1}]}"#))
        .expect("request");
    let answer = send(&api, request).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        answer.error(),
        "key is set per message in a batch produce, not as a query parameter"
    );
}

#[tokio::test]
async fn batch_without_messages_is_400() {
    let api = api();
    let answer = send(&api, batch(ALICE, r#"{"messages":[]}"#)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "messages required");
}

#[tokio::test]
async fn batch_of_more_than_a_thousand_is_400() {
    let api = api();
    let body = format!(
        r#"{{"messages":[{}]}}"#,
        vec![r#"{"payload":1}"#; 1001].join(",")
    );
    let answer = send(&api, batch(ALICE, &body)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "too many messages: more than 1000");
}

#[tokio::test]
async fn batch_with_invalid_json_is_400() {
    let api = api();
    let answer = send(&api, batch(ALICE, r#"{"messages":[{"payload":1}"#)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.error().starts_with("invalid json: "));
}

#[tokio::test]
async fn batch_body_over_sixteen_mebibytes_is_413() {
    let api = api();
    let body = " ".repeat(16 * 1024 * 1024 + 1);
    let answer = send(&api, batch(ALICE, &body)).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn batch_message_over_a_mebibyte_is_413_naming_it() {
    let api = api();
    let payload = format!("\"{}\"", "a".repeat(1024 * 1024));
    let body = format!(r#"{{"messages":[{{"payload":1}},{{"payload":{payload}}}]}}"#);
    let answer = send(&api, batch(ALICE, &body)).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.error(), "message 1: message too large");
}

#[tokio::test]
async fn zstd_batch_is_accepted() {
    let api = api();
    let packed =
        zstd::encode_all(&br#"{"messages":[{"payload":1},{"payload":2}]}"#[..], 1).expect("zstd");
    let request = batch_request(ALICE)
        .header(header::CONTENT_ENCODING, "zstd")
        .body(Body::from(packed))
        .expect("request");
    let answer = send(&api, request).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    assert_eq!(answer.body, "{\"accepted\":2}\n");
}

#[tokio::test]
async fn gzip_batch_is_accepted() {
    use std::io::Write;
    let api = api();
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder
        .write_all(br#"{"messages":[{"payload":1}]}"#)
        .expect("gzip");
    let request = batch_request(ALICE)
        .header(header::CONTENT_ENCODING, "gzip")
        .body(Body::from(encoder.finish().expect("gzip")))
        .expect("request");
    assert_eq!(send(&api, request).await.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn other_content_encoding_is_415() {
    let api = api();
    let request = batch_request(ALICE)
        .header(header::CONTENT_ENCODING, "br")
        .body(Body::from("x"))
        .expect("request");
    assert_eq!(
        send(&api, request).await.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
}

#[tokio::test]
async fn undecodable_zstd_is_400_invalid_json() {
    let api = api();
    let request = batch_request(ALICE)
        .header(header::CONTENT_ENCODING, "zstd")
        .body(Body::from("not zstd"))
        .expect("request");
    let answer = send(&api, request).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.error().starts_with("invalid json"));
}

/// Bytes a compression bomb expands to: far past the 16 MiB batch limit.
const BOMB_DECODED_BYTES: usize = 1 << 30;

/// A zstd frame of [`BOMB_DECODED_BYTES`] zeros, made by streaming zeros
/// into the encoder (never holding the decoded gibibyte).
fn zstd_bomb() -> Vec<u8> {
    use std::io::Write;
    let zeros = vec![0u8; 1 << 20];
    let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 1).expect("zstd encoder");
    for _ in 0..BOMB_DECODED_BYTES / zeros.len() {
        encoder.write_all(&zeros).expect("zstd");
    }
    encoder.finish().expect("zstd")
}

/// A gzip body of [`BOMB_DECODED_BYTES`] zeros: one member of a mebibyte
/// of zeros, repeated (a gzip body may hold many members, all decoded).
fn gzip_bomb() -> Vec<u8> {
    use std::io::Write;
    let zeros = vec![0u8; 1 << 20];
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(&zeros).expect("gzip");
    let member = encoder.finish().expect("gzip");
    member.repeat(BOMB_DECODED_BYTES / zeros.len())
}

async fn send_bomb(api: &Api, encoding: &str, bomb: Vec<u8>) -> Answer {
    assert!(
        bomb.len() <= crate::ingress::BATCH_BODY_BYTES_MAX,
        "the bomb is small as sent"
    );
    let request = batch_request(ALICE)
        .header(header::CONTENT_ENCODING, encoding)
        .body(Body::from(bomb))
        .expect("request");
    send(api, request).await
}

#[tokio::test]
async fn zstd_bomb_is_413_before_it_expands_past_the_limit() {
    let api = api();
    let answer = send_bomb(&api, "zstd", zstd_bomb()).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.error(), "request body too large");
    assert!(wal_records(&api.wal).is_empty());
}

#[tokio::test]
async fn gzip_bomb_is_413_before_it_expands_past_the_limit() {
    let api = api();
    let answer = send_bomb(&api, "gzip", gzip_bomb()).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.error(), "request body too large");
    assert!(wal_records(&api.wal).is_empty());
}

#[tokio::test]
async fn batch_to_an_unknown_topic_is_404() {
    let api = api();
    let request = post("/v1/topics/ordersz/produce/batch")
        .header(header::AUTHORIZATION, basic("alice", "alice-pw"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"messages":[{"payload":1}]}"#))
        .expect("request");
    assert_eq!(send(&api, request).await.status, StatusCode::NOT_FOUND);
}

fn get_with(uri: &str, who: (&str, &str)) -> Request<Body> {
    Request::get(uri)
        .header(header::AUTHORIZATION, basic(who.0, who.1))
        .body(Body::empty())
        .expect("request")
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).expect("request")
}

#[tokio::test]
async fn healthz_is_ok_without_credentials() {
    let api = api();
    let answer = send(&api, get("/healthz")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body, "{\"status\":\"ok\"}\n");
}

#[tokio::test]
async fn healthz_is_503_once_shutdown_began() {
    let api = api();
    api.state
        .health
        .shutting_down
        .store(true, Ordering::Release);
    assert_eq!(
        send(&api, get("/healthz")).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn readyz_is_ready_once_started_and_caught_up() {
    let api = api();
    let answer = send(&api, get("/readyz")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body, "{\"status\":\"ready\"}\n");
}

#[tokio::test]
async fn readyz_is_503_while_the_replica_lags() {
    let api = api();
    api.state.replica.set_leader_commit_index(99);
    let answer = send(&api, get("/readyz")).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(!answer.error().is_empty());
}

#[tokio::test]
async fn readyz_is_503_before_startup_finished() {
    let api = api();
    api.state.health.started.store(false, Ordering::Release);
    assert_eq!(
        send(&api, get("/readyz")).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn metrics_need_credentials_with_security_on() {
    let api = api();
    assert_eq!(
        send(&api, get("/metrics")).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn metrics_unauthenticated_serves_without_credentials() {
    let api = api_with(ApiConfig {
        metrics_unauthenticated: true,
        ..ApiConfig::default()
    });
    assert_eq!(send(&api, get("/metrics")).await.status, StatusCode::OK);
}

#[tokio::test]
async fn metrics_count_requests_by_route_method_and_status() {
    let api = api();
    send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, "x"),
    )
    .await;
    let answer = send(&api, get_with("/metrics", ("bob", "bob-pw"))).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(
        answer.body.contains(
            r#"narad_http_requests_total{route="/v1/topics/{topic}/produce",method="POST",status="202"} 1"#
        ),
        "{}",
        answer.body
    );
    assert!(answer.body.contains("narad_ingress_wal_failed 0"));
    assert!(answer.body.contains("narad_http_request_bytes_in_total"));
    // The metrics request itself is the one in flight.
    assert!(
        answer.body.contains("narad_http_requests_in_flight 1"),
        "{}",
        answer.body
    );
    assert!(
        answer
            .body
            .contains("narad_ingress_dispatch_backlog_records 1")
    );
}

#[tokio::test]
async fn unknown_path_is_plain_text_404() {
    let api = api();
    let answer = send(&api, get("/v2/nothing")).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.body, "404 page not found\n");
}

#[tokio::test]
async fn wrong_method_is_405_with_allow() {
    let api = api();
    let answer = send(&api, get("/v1/topics/orders/produce")).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.headers[header::ALLOW], "POST");
}

#[tokio::test]
async fn head_is_answered_on_get_routes() {
    let api = api();
    let request = Request::head("/healthz")
        .body(Body::empty())
        .expect("request");
    assert_eq!(send(&api, request).await.status, StatusCode::OK);
}

#[tokio::test]
async fn batch_body_past_the_node_budget_is_503_with_retry_after() {
    let api = api_with_budget(ApiConfig::default(), 0);
    let payload = format!("\"{}\"", "a".repeat(600 * 1024));
    let body = format!(r#"{{"messages":[{{"payload":{payload}}},{{"payload":{payload}}}]}}"#);
    let answer = send(&api, batch(ALICE, &body)).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.headers[header::RETRY_AFTER], "1");
    assert!(wal_records(&api.wal).is_empty());
}

#[tokio::test]
async fn batch_body_within_the_first_mebibyte_needs_no_budget() {
    let api = api_with_budget(ApiConfig::default(), 0);
    let answer = send(&api, batch(ALICE, r#"{"messages":[{"payload":1}]}"#)).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn large_payload_with_no_validation_slot_is_503() {
    let api = api_with_parts(
        ApiConfig::default(),
        super::body::BATCH_BODY_BYTES_IN_FLIGHT_MAX,
        0,
    );
    let payload = format!(r#"{{"amount":1,"pad":"{}"}}"#, "x".repeat(20 * 1024));
    let answer = send(
        &api,
        produce_request("/v1/topics/typed/produce", ALICE, payload),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer.error().contains("schema validation slot"));
    assert!(wal_records(&api.wal).is_empty());
}

#[tokio::test]
async fn small_payload_needs_no_validation_slot() {
    let api = api_with_parts(
        ApiConfig::default(),
        super::body::BATCH_BODY_BYTES_IN_FLIGHT_MAX,
        0,
    );
    let answer = send(
        &api,
        produce_request("/v1/topics/typed/produce", ALICE, r#"{"amount":1}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn batch_without_a_validation_slot_is_503_naming_message_0() {
    let api = api_with_parts(
        ApiConfig::default(),
        super::body::BATCH_BODY_BYTES_IN_FLIGHT_MAX,
        0,
    );
    let pad = "x".repeat(20 * 1024);
    let body = format!(r#"{{"messages":[{{"payload":{{"amount":1,"pad":"{pad}"}}}}]}}"#);
    let request = post("/v1/topics/typed/produce/batch")
        .header(header::AUTHORIZATION, basic("alice", "alice-pw"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("request");
    let answer = send(&api, request).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        answer
            .error()
            .starts_with("message 0: schema: validation capacity busy")
    );
}

#[tokio::test]
async fn produce_past_the_identity_cap_is_429() {
    let api = api_with(ApiConfig {
        produce_in_flight_per_identity: 1,
        ..ApiConfig::default()
    });
    let held = api.state.produce_cap.take("alice", 1).expect("take");
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        answer
            .error()
            .starts_with("too many in-flight produce requests")
    );
    drop(held);
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
}
