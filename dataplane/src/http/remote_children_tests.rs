//! HTTP tests of remote children (spec §1.3, §1.4, v3.2) through the
//! router: the remote attach and its dry run, the stub's refusals and
//! record, the listing's remote fields, detach and delete with the
//! unshipped-records check and `force`, pause, resume and skip, and the
//! node's rate limit of remote-child writes.
//!
//! The test replica holds `orders` (3 partitions, kept 7 days) owned by
//! nobody, so only `root` (an admin) manages it; each test adds remote
//! `dr`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::{StatusCode, header};
use narad_meta::{
    Actor, AlterTopic, Command, CreateRemote, MetastoreError, Remote, RemoteId, RemoteKey,
    RemoteLimits, SealedPassword,
};
use serde_json::{Value, json};

use super::children_tests::{commit, json_of};
use super::tests::{
    ALICE, Answer, Api, api, api_with, api_with_state, produce_request, request, send, series_value,
};
use super::{ApiConfig, ApiState};
use crate::admin::LocalAdmin;
use crate::fanout::{CursorKey, CursorReport, RemoteReport};
use crate::remote_children::{
    Capabilities, Check, CheckOutcome, CheckReport, ProbeFuture, RemoteProbe, WRITES_PER_MINUTE,
};
use crate::testing::{LOCAL_NODE, apply, topic};

const ROOT: (&str, &str) = ("root", "root-pw");

/// Adds remote `dr` as root.
fn with_remote(api: &Api) {
    let key = RemoteKey {
        version: 1,
        key_id: "k1".into(),
        salt: vec![7; 32],
        created_at_ms: Some(5),
    };
    let remote = Remote {
        name: "dr".into(),
        id: RemoteId::from_bits(1),
        url: "https://dr.example:443".into(),
        username: "replicator".into(),
        password: SealedPassword {
            key_version: 1,
            key_id: "k1".into(),
            sealed: b"sealed".to_vec(),
            fingerprint: "fp".into(),
            set_at_ms: 1,
            set_by: "root".into(),
        },
        credential_version: 1,
        ca_pem: None,
        limits: RemoteLimits::default(),
        revision: 1,
        created_at_ms: 1,
        created_by: "root".into(),
    };
    apply(
        &api.state.replica,
        Command::CreateRemote(CreateRemote {
            actor: Actor::User("root".into()),
            remote,
            key,
        }),
    );
}

/// The test API with remote `dr`.
fn remote_api() -> Api {
    let api = api();
    with_remote(&api);
    api
}

async fn attach(api: &Api, who: (&str, &str), parent: &str, body: Value) -> Answer {
    let uri = format!("/v1/topics/{parent}/children");
    send(api, request("POST", &uri, who, &body.to_string())).await
}

/// Attaches stub `orders-dr` to `orders` on `dr`.
async fn attach_stub(api: &Api) -> Value {
    let answer = attach(
        api,
        ROOT,
        "orders",
        json!({"child": "orders-dr", "remote": "dr"}),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    json_of(&answer)
}

async fn call(api: &Api, method: &str, uri: &str, body: Value) -> Answer {
    send(api, request(method, uri, ROOT, &body.to_string())).await
}

async fn children(api: &Api, query: &str) -> Value {
    let answer = call(
        api,
        "GET",
        &format!("/v1/topics/orders/children{query}"),
        json!(null),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    json_of(&answer)
}

fn no_store(answer: &Answer) -> bool {
    answer
        .headers
        .get(header::CACHE_CONTROL)
        .is_some_and(|value| value == "no-store")
}

const STUB_REFUSAL: &str = "remote child \"orders-dr\" lives on remote dr; consume it there";

// ---- Attach ----

#[tokio::test]
async fn a_remote_attach_creates_a_stub_without_partitions_at_the_parents_high_watermarks() {
    let api = remote_api();
    commit(&api, "orders", 1, 4);
    let answer = attach(
        &api,
        ROOT,
        "orders",
        json!({"child": "orders-dr", "remote": "dr", "remote_topic": "orders-copy", "lanes": 2}),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    assert!(no_store(&answer));
    let stub = json_of(&answer);
    assert_eq!(stub["name"], "orders-dr");
    assert_eq!(stub["partitions"], 0);
    assert_eq!(stub["role"], "child");
    assert_eq!(stub["parent"], "orders");
    assert_eq!(stub["attach_offsets"], json!([0, 4, 0]));
    assert_eq!(stub["remote"]["name"], "dr");
    assert_eq!(stub["remote"]["topic"], "orders-copy");
    assert_eq!(stub["remote"]["lanes"], 2);
    assert_eq!(stub["remote"]["from"], "attach");
    assert_eq!(stub["remote"]["paused"], false);
    let warnings = stub["warnings"].as_array().expect("warnings");
    assert!(
        warnings.iter().any(|warning| warning
            .as_str()
            .is_some_and(|text| text.contains("skipped"))),
        "{warnings:?}"
    );
    let parent = api.state.replica.topic_meta("orders").expect("parent");
    assert_eq!(parent.children, ["orders-dr"]);
}

#[tokio::test]
async fn from_earliest_starts_at_the_log_start_and_the_remote_topic_defaults_to_the_parents_name() {
    let api = remote_api();
    commit(&api, "orders", 0, 3);
    let answer = attach(
        &api,
        ROOT,
        "orders",
        json!({"child": "orders-dr", "remote": "dr", "from": "earliest"}),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    let stub = json_of(&answer);
    assert_eq!(stub["attach_offsets"], json!([0, 0, 0]));
    assert_eq!(stub["remote"]["from"], "earliest");
    assert_eq!(stub["remote"]["topic"], "orders");
    assert_eq!(stub["remote"]["lanes"], 1);
}

#[tokio::test]
async fn from_unconsumed_starts_at_a_never_consumed_partitions_log_start() {
    let api = remote_api();
    commit(&api, "orders", 2, 5);
    let answer = attach(
        &api,
        ROOT,
        "orders",
        json!({"child": "orders-dr", "remote": "dr", "from": "unconsumed"}),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    assert_eq!(json_of(&answer)["attach_offsets"], json!([0, 0, 0]));
}

#[tokio::test]
async fn a_dry_run_reports_and_links_nothing() {
    let api = remote_api();
    commit(&api, "orders", 0, 2);
    let answer = attach(
        &api,
        ROOT,
        "orders",
        json!({"child": "orders-dr", "remote": "dr", "dry_run": true}),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert!(no_store(&answer));
    let report = json_of(&answer);
    assert_eq!(report["attach_offsets"], json!([2, 0, 0]));
    assert_eq!(report["checks"][0]["outcome"], "skipped");
    assert_eq!(
        report["capabilities"],
        json!({"max_messages": 0, "zstd": false})
    );
    assert!(report["warnings"].is_array());
    assert!(api.state.replica.topic_meta("orders-dr").is_none());
}

#[tokio::test]
async fn a_remote_attach_is_refused_with_its_status_and_text() {
    let api = remote_api();
    let cases = [
        (
            json!({"child": "legacy", "remote": "dr"}),
            StatusCode::CONFLICT,
            "topic already exists",
        ),
        (
            json!({"child": "x", "remote": "nowhere"}),
            StatusCode::NOT_FOUND,
            "",
        ),
        (
            json!({"child": "x", "remote": "dr", "lanes": 9}),
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            json!({"child": "x", "remote": "dr", "lanes": 0}),
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            json!({"child": "x", "remote": "dr", "from": "tail"}),
            StatusCode::BAD_REQUEST,
            "invalid from \"tail\": want attach, unconsumed or earliest",
        ),
        (
            json!({"child": "x", "remote": "dr", "delay_ms": 5}),
            StatusCode::BAD_REQUEST,
            "delay_ms does not go with remote: a remote child has no delay",
        ),
        (
            json!({"child": "legacy", "lanes": 2}),
            StatusCode::BAD_REQUEST,
            "lanes needs remote: only a remote child takes it",
        ),
    ];
    for (body, status, text) in cases {
        let answer = attach(&api, ROOT, "orders", body.clone()).await;
        assert_eq!(answer.status, status, "{body}: {}", answer.body);
        if !text.is_empty() {
            assert_eq!(answer.error(), text, "{body}");
        }
    }
    let answer = attach(&api, ALICE, "orders", json!({"child": "x", "remote": "dr"})).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.body);
    assert!(api.state.replica.topic_meta("x").is_none());
}

#[tokio::test]
async fn remotes_need_security() {
    let api = api_with(ApiConfig {
        security: false,
        ..ApiConfig::default()
    });
    let answer = attach(&api, ROOT, "orders", json!({"child": "x", "remote": "dr"})).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(answer.error(), "remotes require security");
}

#[tokio::test]
async fn a_parent_kept_under_three_days_warns() {
    let api = remote_api();
    apply(
        &api.state.replica,
        Command::AlterTopic(AlterTopic {
            retention_ms: Some(30 * 3_600_000),
            ..AlterTopic::named(Actor::SecurityOff, "orders", None)
        }),
    );
    let stub = attach_stub(&api).await;
    let warnings = stub["warnings"].to_string();
    assert!(warnings.contains("keeps records 30 h"), "{warnings}");
}

// ---- The stub ----

#[tokio::test]
async fn a_stub_refuses_produce_batch_consume_and_ack_with_409() {
    let api = remote_api();
    attach_stub(&api).await;
    let produced = send(
        &api,
        produce_request("/v1/topics/orders-dr/produce", ROOT, "x"),
    )
    .await;
    assert_eq!(produced.status, StatusCode::CONFLICT);
    assert_eq!(produced.error(), STUB_REFUSAL);
    let batch = call(
        &api,
        "POST",
        "/v1/topics/orders-dr/produce/batch",
        json!({"messages": [{"payload": 1}]}),
    )
    .await;
    assert_eq!(batch.status, StatusCode::CONFLICT, "{}", batch.body);
    assert_eq!(batch.error(), STUB_REFUSAL);
    let metrics = api.state.metrics.render();
    assert_eq!(
        series_value(
            &metrics,
            "narad_produce_rejections_total{topic=\"orders-dr\",reason=\"remote_child\"}"
        ),
        Some(2.0),
        "{metrics}"
    );
    let consumed = call(&api, "GET", "/v1/topics/orders-dr/consume", json!(null)).await;
    assert_eq!(consumed.status, StatusCode::CONFLICT);
    assert_eq!(consumed.error(), STUB_REFUSAL);
    let replay = call(
        &api,
        "GET",
        "/v1/topics/orders-dr/consume?partition=0&offset=0",
        json!(null),
    )
    .await;
    assert_eq!(replay.status, StatusCode::CONFLICT);
    let acked = call(
        &api,
        "POST",
        "/v1/topics/orders-dr/ack?receipt_handle=0:0:1",
        json!(null),
    )
    .await;
    assert_eq!(acked.status, StatusCode::CONFLICT);
    assert_eq!(acked.error(), STUB_REFUSAL);
    let altered = call(
        &api,
        "PATCH",
        "/v1/topics/orders-dr",
        json!({"retention_ms": 0}),
    )
    .await;
    assert_eq!(altered.status, StatusCode::CONFLICT, "{}", altered.body);
}

#[tokio::test]
async fn a_stub_is_listed_and_described_with_no_partition() {
    let api = remote_api();
    attach_stub(&api).await;
    let described = call(&api, "GET", "/v1/topics/orders-dr", json!(null)).await;
    assert_eq!(described.status, StatusCode::OK, "{}", described.body);
    let stub = json_of(&described);
    assert_eq!(stub["partitions"], 0);
    assert_eq!(stub["partition_stats"], json!([]));
    assert_eq!(stub["partial"], false);
    assert_eq!(stub["remote"]["name"], "dr");
    let listed = json_of(&call(&api, "GET", "/v1/topics", json!(null)).await);
    let stub = listed["topics"]
        .as_array()
        .expect("topics")
        .iter()
        .find(|topic| topic["name"] == "orders-dr")
        .cloned()
        .expect("the stub is listed");
    assert_eq!(stub["remote"]["topic"], "orders");
    let metrics = call(&api, "GET", "/metrics", json!(null)).await;
    assert_eq!(metrics.status, StatusCode::OK);
}

// ---- Listing ----

#[tokio::test]
async fn the_listing_shows_a_remote_childs_link_state_and_lag() {
    let api = remote_api();
    attach_stub(&api).await;
    commit(&api, "orders", 0, 3);
    let listing = children(&api, "").await;
    let entry = &listing["children"][0];
    assert_eq!(entry["name"], "orders-dr");
    assert_eq!(
        entry["remote"],
        json!({"name": "dr", "topic": "orders", "lanes": 1, "from": "attach"})
    );
    assert_eq!(entry["state"], "running");
    assert_eq!(entry["paused"], false);
    assert_eq!(
        entry["lag_messages"], 3,
        "records committed since the attach"
    );
    assert_eq!(entry["lag_complete"], true);
    assert_eq!(entry["source_drained"], false);
    assert_eq!(entry["unverified"], true);
    assert_eq!(entry["blocked_at"], Value::Null);
    for field in [
        "lag_seconds",
        "retention_headroom_seconds",
        "target_verified_at",
        "last_success_at",
    ] {
        assert!(entry.get(field).is_some(), "{field} missing from {entry}");
    }
    assert!(entry.get("partitions").is_none());
    let with_rows = children(&api, "?partitions=true").await;
    let rows = with_rows["children"][0]["partitions"]
        .as_array()
        .expect("rows")
        .clone();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["high_watermark"], 3);
    assert_eq!(rows[0]["lag_messages"], 3);
    assert_eq!(rows[1]["lag_messages"], 0);
    let bad = call(
        &api,
        "GET",
        "/v1/topics/orders/children?partitions=yes",
        json!(null),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_paused_remote_child_lists_as_paused() {
    let api = remote_api();
    attach_stub(&api).await;
    let paused = call(
        &api,
        "POST",
        "/v1/topics/orders/children/orders-dr/pause",
        json!({"reason": "target maintenance"}),
    )
    .await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
    let entry = &children(&api, "").await["children"][0];
    assert_eq!(entry["state"], "paused");
    assert_eq!(entry["paused"], true);
    assert_eq!(entry["paused_reason"], "target maintenance");
}

// ---- Detach and delete ----

#[tokio::test]
async fn detaching_a_stub_with_unshipped_records_is_refused_then_throttled_then_forced() {
    let api = remote_api();
    attach_stub(&api).await;
    commit(&api, "orders", 2, 4);
    let uri = "/v1/topics/orders/children/orders-dr";
    let refused = call(&api, "DELETE", uri, json!(null)).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    let body = json_of(&refused);
    assert_eq!(body["lag_messages"], 4);
    assert_eq!(body["lag_complete"], true);
    assert_eq!(body["dispatch_backlog"], 0);
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|text| text.contains("force=true"))
    );
    let again = call(&api, "DELETE", uri, json!(null)).await;
    assert_eq!(
        again.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        again.body
    );
    let wait: u32 = again.headers[header::RETRY_AFTER]
        .to_str()
        .expect("text")
        .parse()
        .expect("seconds");
    assert!((1..=10).contains(&wait), "{wait}");
    let bad = call(&api, "DELETE", &format!("{uri}?force=yes"), json!(null)).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(api.state.replica.topic_meta("orders-dr").is_some());
    let forced = call(&api, "DELETE", &format!("{uri}?force=true"), json!(null)).await;
    assert_eq!(forced.status, StatusCode::NO_CONTENT, "{}", forced.body);
    assert!(
        api.state.replica.topic_meta("orders-dr").is_none(),
        "the stub is deleted"
    );
    let parent = api.state.replica.topic_meta("orders").expect("parent");
    assert!(parent.children.is_empty());
}

#[tokio::test]
async fn a_stub_with_nothing_unshipped_is_deleted_without_force() {
    let api = remote_api();
    commit(&api, "orders", 0, 2);
    attach_stub(&api).await;
    let answer = call(&api, "DELETE", "/v1/topics/orders-dr", json!(null)).await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT, "{}", answer.body);
    assert!(api.state.replica.topic_meta("orders-dr").is_none());
}

#[tokio::test]
async fn a_parent_with_unshipped_remote_records_is_deleted_only_with_force() {
    let api = remote_api();
    attach_stub(&api).await;
    commit(&api, "orders", 1, 1);
    let refused = call(&api, "DELETE", "/v1/topics/orders", json!(null)).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert_eq!(json_of(&refused)["lag_messages"], 1);
    let forced = call(&api, "DELETE", "/v1/topics/orders?force=true", json!(null)).await;
    assert_eq!(forced.status, StatusCode::NO_CONTENT, "{}", forced.body);
    assert!(api.state.replica.topic_meta("orders").is_none());
    assert!(
        api.state.replica.topic_meta("orders-dr").is_none(),
        "its stub goes too"
    );
}

#[tokio::test]
async fn a_delete_takes_only_true_or_false_for_force() {
    let api = remote_api();
    let answer = call(&api, "DELETE", "/v1/topics/legacy?force=1", json!(null)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "invalid force: want true or false");
}

// ---- Pause, resume, skip ----

#[tokio::test]
async fn pause_and_resume_answer_the_stub() {
    let api = remote_api();
    attach_stub(&api).await;
    let paused = call(
        &api,
        "POST",
        "/v1/topics/orders/children/orders-dr/pause",
        json!({"reason": "rotating the target"}),
    )
    .await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
    assert!(no_store(&paused));
    let stub = json_of(&paused);
    assert_eq!(stub["remote"]["paused"], true);
    assert_eq!(stub["remote"]["paused_reason"], "rotating the target");
    assert_eq!(stub["remote"]["paused_by"], "root");
    assert!(
        stub["remote"]["paused_at_ms"]
            .as_u64()
            .is_some_and(|ms| ms > 0)
    );
    let resumed = call(
        &api,
        "POST",
        "/v1/topics/orders/children/orders-dr/resume",
        json!({"accept_target": false}),
    )
    .await;
    assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.body);
    assert!(no_store(&resumed));
    assert_eq!(json_of(&resumed)["remote"]["paused"], false);
}

#[tokio::test]
async fn pause_resume_and_skip_are_refused_with_their_status() {
    let api = remote_api();
    attach_stub(&api).await;
    topic(&api.state.replica, "plain", 0xe1, 3, LOCAL_NODE);
    let base = "/v1/topics/orders/children";
    let long_reason = "r".repeat(257);
    let cases = [
        (
            format!("{base}/orders-dr/pause"),
            json!({"reason": long_reason}),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("{base}/orders-dr/pause"),
            json!({"why": "x"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            "/v1/topics/legacy/children/orders-dr/pause".to_owned(),
            json!({}),
            StatusCode::NOT_FOUND,
        ),
        (
            "/v1/topics/legacy/children/delayed/pause".to_owned(),
            json!({}),
            StatusCode::CONFLICT,
        ),
        (
            format!("{base}/orders-dr/skip"),
            json!({"partition": 3, "offset": 1}),
            StatusCode::CONFLICT,
        ),
        (
            format!("{base}/orders-dr/skip"),
            json!({"partition": 0}),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (uri, body, status) in cases {
        let answer = call(&api, "POST", &uri, body.clone()).await;
        assert_eq!(answer.status, status, "{uri} {body}: {}", answer.body);
        assert!(no_store(&answer), "{uri}");
    }
    let by_alice = send(
        &api,
        request("POST", &format!("{base}/orders-dr/pause"), ALICE, "{}"),
    )
    .await;
    assert_eq!(by_alice.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_skip_is_stored_in_the_link() {
    let api = remote_api();
    attach_stub(&api).await;
    let answer = call(
        &api,
        "POST",
        "/v1/topics/orders/children/orders-dr/skip",
        json!({"partition": 1, "offset": 7}),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(json_of(&answer)["remote"]["skip"], json!({"1": [7]}));
    let link = api
        .state
        .replica
        .view()
        .metastore
        .remote_link("orders-dr")
        .cloned()
        .expect("link");
    assert!(link.skips(1, 7));
}

#[tokio::test]
async fn a_skip_of_a_partition_whose_owner_cannot_be_asked_is_503_and_stores_nothing() {
    use narad_meta::{AttachEpoch, AttachRemoteChild, IncarnationId, RemoteFrom, RemoteLink};

    let api = remote_api();
    attach_stub(&api).await;
    // Parent `far` lives on node 2, which this node has no cluster RPC to
    // ask; its remote child `far-dr` is linked in the metastore.
    topic(&api.state.replica, "far", 0xf1, 3, 2);
    apply(
        &api.state.replica,
        Command::AttachRemoteChild(AttachRemoteChild {
            actor: Actor::User("root".into()),
            parent: "far".into(),
            parent_id: IncarnationId::from_bits(0xf1),
            child: "far-dr".into(),
            child_id: IncarnationId::from_bits(0xf2),
            attach_epoch: AttachEpoch::from_bits(9),
            attach_offsets: vec![0; 3],
            link: RemoteLink {
                remote: "dr".into(),
                remote_id: RemoteId::from_bits(1),
                remote_topic: "far".into(),
                target_id: None,
                lanes: 1,
                from: RemoteFrom::Attach,
                paused: None,
                skip: Default::default(),
                created_at_ms: 0,
            },
        }),
    );
    let answer = call(
        &api,
        "POST",
        "/v1/topics/far/children/far-dr/skip",
        json!({"partition": 2, "offset": 4}),
    )
    .await;
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.body
    );
    assert_eq!(answer.headers[header::RETRY_AFTER], "1");
    let link = api
        .state
        .replica
        .view()
        .metastore
        .remote_link("far-dr")
        .cloned()
        .expect("link");
    assert!(!link.skips(2, 4));
    // A live member that cannot be asked holds every remote write (it may
    // not apply it: `remotes::upgrade_gate`); marked dead, it is not asked.
    let held = call(
        &api,
        "POST",
        "/v1/topics/orders/children/orders-dr/skip",
        json!({"partition": 1, "offset": 4}),
    )
    .await;
    assert_eq!(
        held.status,
        StatusCode::PRECONDITION_FAILED,
        "{}",
        held.body
    );
    crate::testing::mark_dead(&api.state.replica, 2);
    // This node's own partition, whose cursor has not reported, is taken
    // on the operator's word as before.
    let own = call(
        &api,
        "POST",
        "/v1/topics/orders/children/orders-dr/skip",
        json!({"partition": 1, "offset": 4}),
    )
    .await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.body);
}

#[tokio::test]
async fn remote_child_writes_past_sixty_a_minute_wait() {
    let api = remote_api();
    attach_stub(&api).await;
    for _ in 1..WRITES_PER_MINUTE {
        let answer = call(
            &api,
            "POST",
            "/v1/topics/orders/children/orders-dr/pause",
            json!({"reason": "x"}),
        )
        .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    let answer = call(
        &api,
        "POST",
        "/v1/topics/orders/children/orders-dr/pause",
        json!({"reason": "x"}),
    )
    .await;
    assert_eq!(
        answer.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        answer.body
    );
    assert!(answer.headers.contains_key(header::RETRY_AFTER));
    let attach = attach(
        &api,
        ROOT,
        "orders",
        json!({"child": "orders-dr2", "remote": "dr", "remote_topic": "t2"}),
    )
    .await;
    assert_eq!(
        attach.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        attach.body
    );
}

// ---- A probe that reaches the target ----

/// A probe that fails the `auth` check, or passes and reads target id
/// `target_id`; counts its calls.
#[derive(Debug)]
struct TargetProbe {
    fail: bool,
    target_id: parking_lot::Mutex<&'static str>,
    calls: AtomicUsize,
}

impl RemoteProbe for TargetProbe {
    fn check<'a>(&'a self, _remote: &'a Remote, _topic: &'a str) -> ProbeFuture<'a> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let outcome = if self.fail {
            CheckOutcome::Failed
        } else {
            CheckOutcome::Passed
        };
        let report = CheckReport {
            checks: vec![Check {
                name: "auth".into(),
                outcome,
                state: self.fail.then(|| "auth_failed".to_owned()),
                detail: "the target answered 401".into(),
            }],
            target_id: Some((*self.target_id.lock()).to_owned()),
            capabilities: Capabilities {
                max_messages: 1000,
                zstd: true,
            },
        };
        Box::pin(async move { report })
    }
}

fn probed_api(probe: Arc<TargetProbe>) -> Api {
    let api = api_with_state(
        ApiConfig::default(),
        super::body::BATCH_BODY_BYTES_IN_FLIGHT_MAX,
        2,
        |replica| Arc::new(LocalAdmin::new(replica)),
        move |state: &mut ApiState| {
            let probe: Arc<dyn RemoteProbe> = probe;
            assert!(state.remote_probe.set(probe).is_ok());
        },
    );
    with_remote(&api);
    api
}

#[tokio::test]
async fn a_failed_check_refuses_the_attach_and_a_dry_run_shows_it() {
    let api = probed_api(Arc::new(TargetProbe {
        fail: true,
        target_id: parking_lot::Mutex::new("t1"),
        calls: AtomicUsize::new(0),
    }));
    let dry = attach(
        &api,
        ROOT,
        "orders",
        json!({"child": "orders-dr", "remote": "dr", "dry_run": true}),
    )
    .await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.body);
    let report = json_of(&dry);
    assert_eq!(report["checks"][0]["outcome"], "failed");
    assert_eq!(report["checks"][0]["state"], "auth_failed");
    assert_eq!(
        report["capabilities"],
        json!({"max_messages": 1000, "zstd": true})
    );
    let again = attach(
        &api,
        ROOT,
        "orders",
        json!({"child": "orders-dr", "remote": "dr"}),
    )
    .await;
    assert_eq!(
        again.status,
        StatusCode::TOO_MANY_REQUESTS,
        "a check of dr ran < 5 s ago"
    );
    assert!(api.state.replica.topic_meta("orders-dr").is_none());
}

#[tokio::test]
async fn a_replaced_target_is_resumed_only_when_accepted() {
    let probe = Arc::new(TargetProbe {
        fail: false,
        target_id: parking_lot::Mutex::new("t1"),
        calls: AtomicUsize::new(0),
    });
    let api = probed_api(Arc::clone(&probe));
    let stub = attach_stub(&api).await;
    assert_eq!(stub["remote"]["target_id"], "t1");
    assert_eq!(stub["remote"].get("unverified"), None);
    *probe.target_id.lock() = "t2";
    let uri = "/v1/topics/orders/children/orders-dr/resume";
    let refused = call(&api, "POST", uri, json!({})).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert!(
        refused.error().starts_with("target_replaced: "),
        "{}",
        refused.error()
    );
    let accepted = call(&api, "POST", uri, json!({"accept_target": true})).await;
    assert_eq!(accepted.status, StatusCode::OK, "{}", accepted.body);
    assert_eq!(json_of(&accepted)["remote"]["target_id"], "t2");
    assert_eq!(
        probe.calls.load(Ordering::Relaxed),
        3,
        "attach, then each resume"
    );
}

/// A loopback endpoint for another member of `api`'s cluster that checks
/// targets through `probe`, finding remotes in `replica` (opcode 34), and
/// reports its status (opcode 33, for the upgrade gate) from `api`'s
/// sources.
fn member_rpc(
    api: &Api,
    replica: Arc<crate::metadata::MetadataReplica>,
    probe: Arc<TargetProbe>,
) -> narad_protocol::Node {
    let checks = crate::remote_children::RemoteCheckService::new();
    checks.attach(replica, probe);
    let status = crate::status::NodeStatusService::new();
    status.attach(Arc::clone(&api.state.status));
    let router = status.route(checks.route(narad_protocol::Router::new()));
    crate::testing::loopback_rpc(router)
}

fn passing_probe(target_id: &'static str) -> Arc<TargetProbe> {
    Arc::new(TargetProbe {
        fail: false,
        target_id: parking_lot::Mutex::new(target_id),
        calls: AtomicUsize::new(0),
    })
}

#[tokio::test]
async fn a_resume_checks_the_target_from_every_member() {
    // Node 1 takes the requests; node 2 checks through its own probe;
    // node 3 runs a build without opcode 34 (it reports its status only);
    // node 4 is marked dead.
    let here = passing_probe("t1");
    let api = probed_api(Arc::clone(&here));
    attach_stub(&api).await;
    let there = passing_probe("t1");
    let member = member_rpc(&api, Arc::clone(&api.state.replica), Arc::clone(&there));
    let without = crate::testing::status_rpc(&api.state.status);
    let peers = [(2, member.local_addr()), (3, without.local_addr())];
    let _transport = crate::testing::attach_forwarder(&api.state, &peers);
    for node in [2, 3, 4] {
        crate::testing::register(&api.state.replica, node);
    }
    crate::testing::mark_dead(&api.state.replica, 4);
    let uri = "/v1/topics/orders/children/orders-dr/resume";

    // Every member that answers sees the attached target: resumed, and
    // each member's result is listed.
    let resumed = call(&api, "POST", uri, json!({})).await;
    assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.body);
    let body = json_of(&resumed);
    let checks = body["checks"].as_array().expect("checks").clone();
    assert_eq!(checks.len(), 4, "{body}");
    assert_eq!(checks[0]["node"], 1);
    assert_eq!(checks[0]["result"], "pass");
    assert_eq!(checks[1]["node"], 2);
    assert_eq!(checks[1]["result"], "pass");
    assert_eq!(checks[1]["target_id"], "t1");
    assert_eq!(checks[2]["node"], 3);
    assert_eq!(checks[2]["result"], "not_answering");
    let why = checks[2]["detail"].as_str().expect("a detail");
    assert!(why.contains("unsupported rpc operation"), "{why}");
    assert_eq!(checks[3]["result"], "not_answering");
    assert_eq!(checks[3]["detail"], "marked dead");
    assert_eq!(
        there.calls.load(Ordering::Relaxed),
        1,
        "node 2 ran its checks"
    );

    // Node 2 alone reaches a replaced target: the members disagree, so no
    // accept can choose one, and nothing changes.
    *there.target_id.lock() = "t2";
    for body in [json!({}), json!({"accept_target": true})] {
        let refused = call(&api, "POST", uri, body).await;
        assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
        assert!(
            refused.error().starts_with("target_replaced: "),
            "{}",
            refused.error()
        );
        assert!(
            refused.error().contains("node 2: t2"),
            "{}",
            refused.error()
        );
        assert_eq!(json_of(&refused)["checks"][1]["target_id"], "t2");
    }
    let link = api
        .state
        .replica
        .view()
        .metastore
        .remote_link("orders-dr")
        .cloned();
    assert_eq!(link.and_then(|link| link.target_id).as_deref(), Some("t1"));

    // Both reach the new target: refused unless accepted, then recorded.
    *here.target_id.lock() = "t2";
    let refused = call(&api, "POST", uri, json!({})).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert!(
        refused.error().contains("node(s) 1, 2"),
        "{}",
        refused.error()
    );
    let accepted = call(&api, "POST", uri, json!({"accept_target": true})).await;
    assert_eq!(accepted.status, StatusCode::OK, "{}", accepted.body);
    assert_eq!(json_of(&accepted)["remote"]["target_id"], "t2");
}

#[tokio::test]
async fn a_member_whose_replica_lacks_the_remote_reports_it_missing() {
    let api = probed_api(passing_probe("t1"));
    attach_stub(&api).await;
    // Node 2's replica has no remote dr: it cannot check, and says why.
    let member = member_rpc(&api, crate::testing::replica(), passing_probe("t1"));
    let _transport = crate::testing::attach_forwarder(&api.state, &[(2, member.local_addr())]);
    crate::testing::register(&api.state.replica, 2);
    let resumed = call(
        &api,
        "POST",
        "/v1/topics/orders/children/orders-dr/resume",
        json!({}),
    )
    .await;
    assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.body);
    let checks = &json_of(&resumed)["checks"];
    assert_eq!(checks[1]["result"], "fail", "{checks}");
    assert_eq!(checks[1]["class"], "remote_missing", "{checks}");
}

#[tokio::test]
async fn the_metastores_refusal_of_a_second_link_to_one_remote_topic_is_mapped() {
    let api = remote_api();
    attach_stub(&api).await;
    let answer = attach(
        &api,
        ROOT,
        "legacy",
        json!({"child": "legacy-dr", "remote": "dr", "remote_topic": "orders"}),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.body);
    let expected = MetastoreError::RemoteTopicLinked {
        remote: "dr".into(),
        remote_topic: "orders".into(),
        child: "orders-dr".into(),
    };
    assert_eq!(answer.error(), expected.to_string());
}

// ---- What the cursors report ----

/// Partition `partition`'s cursor of `orders-dr` reports `state`, holding
/// on `blocked_at`, with its next offset at 0.
fn cursor_reports(api: &Api, partition: u32, state: &str, blocked_at: Option<u64>) {
    let key = CursorKey {
        parent: "orders".into(),
        partition,
        child: "orders-dr".into(),
    };
    let now_ms = api.state.clock().unix_ms();
    let report = CursorReport {
        next_offset: 0,
        high_watermark: 0,
        due_lag_ms: None,
        remote: Some(RemoteReport {
            state: state.into(),
            blocked_at,
            last_success_at_ms: Some(now_ms - 5_000),
            oldest_pending_ms: Some(now_ms - 60_000),
        }),
    };
    api.state.fanout.report(key, report);
}

#[tokio::test]
async fn the_listing_shows_the_record_a_cursor_holds_on_and_only_that_record_is_skipped() {
    let api = remote_api();
    attach_stub(&api).await;
    cursor_reports(&api, 0, "running", None);
    cursor_reports(&api, 2, "rejected_record", Some(4));
    let entry = children(&api, "").await["children"][0].clone();
    assert_eq!(entry["state"], "rejected_record");
    assert_eq!(
        entry["blocked_at"],
        json!({"partition": 2, "offset": 4, "state": "rejected_record"})
    );
    let lag = entry["lag_seconds"].as_f64().expect("lag seconds");
    assert!((59.0..=70.0).contains(&lag), "{lag}");
    assert!(entry["last_success_at"].as_u64().is_some(), "{entry}");
    let skip = "/v1/topics/orders/children/orders-dr/skip";
    let wrong = call(&api, "POST", skip, json!({"partition": 2, "offset": 5})).await;
    assert_eq!(wrong.status, StatusCode::CONFLICT, "{}", wrong.body);
    let running = call(&api, "POST", skip, json!({"partition": 0, "offset": 4})).await;
    assert_eq!(running.status, StatusCode::CONFLICT, "{}", running.body);
    let held = call(&api, "POST", skip, json!({"partition": 2, "offset": 4})).await;
    assert_eq!(held.status, StatusCode::OK, "{}", held.body);
    assert_eq!(json_of(&held)["remote"]["skip"], json!({"2": [4]}));
}
