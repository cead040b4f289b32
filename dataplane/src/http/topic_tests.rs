//! HTTP tests of the topic routes.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::Value;

use super::tests::{ALICE, Answer, api, produce_request, send};
use crate::testing::{LOCAL_NODE, basic};
use crate::testing::{add_user, apply, assign, create_command};
use narad_meta::Command;

const ROOT: (&str, &str) = ("root", "root-pw");

fn create(who: (&str, &str), body: &str) -> Request<Body> {
    Request::post("/v1/topics")
        .header(header::AUTHORIZATION, basic(who.0, who.1))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .expect("request")
}

fn get(who: (&str, &str), uri: &str) -> Request<Body> {
    Request::get(uri)
        .header(header::AUTHORIZATION, basic(who.0, who.1))
        .body(Body::empty())
        .expect("request")
}

fn delete(who: (&str, &str), uri: &str) -> Request<Body> {
    Request::delete(uri)
        .header(header::AUTHORIZATION, basic(who.0, who.1))
        .header("x-narad-client", "test")
        .body(Body::empty())
        .expect("request")
}

fn json(answer: &Answer) -> Value {
    serde_json::from_str(&answer.body).expect("JSON body")
}

#[tokio::test]
async fn create_answers_201_with_the_record() {
    let api = api();
    let answer = send(
        &api,
        create(ROOT, r#"{"name":"payments","retention_ms":0}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED);
    let record = json(&answer);
    assert_eq!(record["name"], "payments");
    assert_eq!(record["partitions"], 3);
    assert_eq!(record["retention_ms"], 0);
    assert_eq!(record["visibility_timeout_ms"], 30_000);
    assert_eq!(record["owner"], "root");
    assert_eq!(record["id"].as_str().map(str::len), Some(16));
}

#[tokio::test]
async fn a_created_topic_takes_produces() {
    let api = api();
    send(&api, create(ROOT, r#"{"name":"orders-eu","partitions":4}"#)).await;
    let answer = send(
        &api,
        produce_request("/v1/topics/orders-eu/produce?partition=3", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn fewer_than_three_partitions_is_400() {
    let api = api();
    let answer = send(&api, create(ROOT, r#"{"name":"t","partitions":2}"#)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "partitions must be >= 3 (0 = use default)");
}

#[tokio::test]
async fn a_name_over_200_bytes_is_400() {
    let api = api();
    let body = format!(r#"{{"name":"{}"}}"#, "a".repeat(201));
    let answer = send(&api, create(ROOT, &body)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        answer.error(),
        "topic name is 201 bytes; new topic names are limited to 200 bytes"
    );
}

#[tokio::test]
async fn a_name_with_a_slash_is_400() {
    let api = api();
    let answer = send(&api, create(ROOT, r#"{"name":"a/b"}"#)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn retention_under_an_hour_is_400() {
    let api = api();
    let answer = send(&api, create(ROOT, r#"{"name":"t","retention_ms":1000}"#)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn an_unknown_field_is_400() {
    let api = api();
    let answer = send(&api, create(ROOT, r#"{"name":"t","colour":"red"}"#)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.error().starts_with("invalid json: "));
}

#[tokio::test]
async fn a_schema_that_is_not_an_object_is_400() {
    let api = api();
    let answer = send(&api, create(ROOT, r#"{"name":"t","schema":5}"#)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn an_existing_name_is_409() {
    let api = api();
    let answer = send(&api, create(ROOT, r#"{"name":"orders"}"#)).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.error(), "topic already exists");
}

#[tokio::test]
async fn a_case_variant_of_an_existing_name_is_409() {
    let api = api();
    let answer = send(&api, create(ROOT, r#"{"name":"Orders"}"#)).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert!(answer.error().contains("differs only in letter case"));
}

#[tokio::test]
async fn create_without_a_create_grant_is_403() {
    let api = api();
    let answer = send(&api, create(ALICE, r#"{"name":"orders2"}"#)).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn list_pages_in_name_order() {
    let api = api();
    let first = json(&send(&api, get(ROOT, "/v1/topics?limit=3")).await);
    let names: Vec<&str> = first["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["delayed", "legacy", "orders"]);
    assert_eq!(first["next_page_token"], "orders");
    let second = json(&send(&api, get(ROOT, "/v1/topics?limit=3&page_token=orders")).await);
    let names: Vec<&str> = second["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["typed"]);
    assert_eq!(second["next_page_token"], "");
}

#[tokio::test]
async fn list_shows_only_readable_topics() {
    let api = api();
    let listed = json(&send(&api, get(("bob", "bob-pw"), "/v1/topics")).await);
    assert_eq!(listed["topics"].as_array().map(Vec::len), Some(0));
}

#[tokio::test]
async fn a_non_positive_limit_is_400() {
    let api = api();
    assert_eq!(
        send(&api, get(ROOT, "/v1/topics?limit=0")).await.status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn describe_reports_local_partition_stats() {
    let api = api();
    let answer = send(&api, get(ALICE, "/v1/topics/typed")).await;
    assert_eq!(answer.status, StatusCode::OK);
    let body = json(&answer);
    assert_eq!(body["schema_version"], 1);
    assert_eq!(body["schema"]["type"], "object");
    assert_eq!(body["partial"], false);
    let stats = body["partition_stats"].as_array().unwrap();
    assert_eq!(stats.len(), 3);
    assert_eq!(stats[2]["status"], "ok");
    assert_eq!(stats[2]["owner_node"], LOCAL_NODE.to_string());
}

#[tokio::test]
async fn describe_marks_a_remote_partition_unavailable() {
    let api = api();
    let replica = &api.state.replica;
    apply(
        replica,
        Command::CreateTopic(create_command("split", 0xe5, 3)),
    );
    let owners = [(0, LOCAL_NODE), (1, LOCAL_NODE + 1), (2, LOCAL_NODE)];
    assign(replica, "split", &owners);
    let body = json(&send(&api, get(ROOT, "/v1/topics/split")).await);
    assert_eq!(body["partial"], true);
    assert_eq!(body["partition_stats"][1]["status"], "owner_unavailable");
    assert_eq!(body["partition_stats"][1]["owner_liveness"], "unreachable");
}

#[tokio::test]
async fn describe_of_an_unknown_topic_is_404() {
    let api = api();
    assert_eq!(
        send(&api, get(ROOT, "/v1/topics/nope")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn describe_without_any_grant_is_403() {
    let api = api();
    let answer = send(&api, get(("bob", "bob-pw"), "/v1/topics/orders")).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(answer.error(), "no grant on this topic");
}

#[tokio::test]
async fn delete_is_204_then_404() {
    let api = api();
    assert_eq!(
        send(&api, delete(ROOT, "/v1/topics/legacy")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        send(&api, delete(ROOT, "/v1/topics/legacy")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn delete_by_a_non_owner_is_403() {
    let api = api();
    assert_eq!(
        send(&api, delete(ALICE, "/v1/topics/orders")).await.status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn the_creator_may_delete_its_topic() {
    let api = api();
    let with_create = crate::metadata::Grant {
        action: crate::metadata::GrantAction::Create,
        patterns: vec!["carol-*".into()],
    };
    add_user(&api.state.replica, "carol", "carol-pw", vec![with_create]);
    let carol = ("carol", "carol-pw");
    assert_eq!(
        send(&api, create(carol, r#"{"name":"carol-x"}"#))
            .await
            .status,
        StatusCode::CREATED
    );
    assert_eq!(
        send(&api, delete(carol, "/v1/topics/carol-x")).await.status,
        StatusCode::NO_CONTENT
    );
}

fn patch(who: (&str, &str), uri: &str, body: &str) -> Request<Body> {
    Request::patch(uri)
        .header(header::AUTHORIZATION, basic(who.0, who.1))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .expect("request")
}

#[tokio::test]
async fn alter_changes_retention_and_grows_partitions() {
    let api = api();
    let answer = send(
        &api,
        patch(
            ROOT,
            "/v1/topics/orders",
            r#"{"retention_ms":7200000,"partitions":5}"#,
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    let record = json(&answer);
    assert_eq!(record["retention_ms"], 7_200_000);
    assert_eq!(record["partitions"], 5);
    let produced = send(
        &api,
        produce_request("/v1/topics/orders/produce?partition=4", ALICE, "x"),
    )
    .await;
    assert_eq!(produced.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn alter_cannot_shrink_partitions() {
    let api = api();
    let answer = send(
        &api,
        patch(ROOT, "/v1/topics/orders", r#"{"partitions":3}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn alter_with_nothing_to_change_is_400() {
    let api = api();
    assert_eq!(
        send(&api, patch(ROOT, "/v1/topics/orders", "{}"))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn alter_with_a_null_schema_is_400() {
    let api = api();
    let answer = send(&api, patch(ROOT, "/v1/topics/orders", r#"{"schema":null}"#)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "schema must not be null");
}

#[tokio::test]
async fn a_first_schema_becomes_version_one_and_is_enforced() {
    let api = api();
    let answer = send(
        &api,
        patch(ROOT, "/v1/topics/orders", r#"{"schema":{"type":"object"}}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(json(&answer)["schema_version"], 1);
    let refused = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, "[1]"),
    )
    .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_stale_schema_base_version_is_409() {
    let api = api();
    let answer = send(
        &api,
        patch(
            ROOT,
            "/v1/topics/typed",
            r#"{"schema":true,"schema_base_version":7}"#,
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.error(), "schema version conflict");
}

#[tokio::test]
async fn a_narrowing_schema_change_is_409() {
    let api = api();
    let answer = send(
        &api,
        patch(ROOT, "/v1/topics/typed", r#"{"schema":{"type":"string"}}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn an_identical_schema_is_a_no_op() {
    let api = api();
    let body = r#"{"schema":{"type":"object","properties":{"amount":{"type":"integer"}},"required":["amount"]}}"#;
    let answer = send(&api, patch(ROOT, "/v1/topics/typed", body)).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(json(&answer)["schema_version"], 1);
}

#[tokio::test]
async fn schema_history_lists_every_version_oldest_first() {
    let api = api();
    send(
        &api,
        patch(ROOT, "/v1/topics/orders", r#"{"schema":{"type":"object"}}"#),
    )
    .await;
    send(
        &api,
        patch(
            ROOT,
            "/v1/topics/orders",
            r#"{"schema":true,"schema_base_version":1}"#,
        ),
    )
    .await;
    let body = json(&send(&api, get(ALICE, "/v1/topics/orders/schema")).await);
    assert_eq!(body["topic"], "orders");
    assert_eq!(body["version"], 2);
    assert_eq!(body["versions"][0]["version"], 1);
    assert_eq!(body["versions"][0]["schema"]["type"], "object");
    assert_eq!(body["versions"][1]["schema"], true);
}

#[tokio::test]
async fn schema_history_of_a_topic_without_schema_is_empty() {
    let api = api();
    let body = json(&send(&api, get(ALICE, "/v1/topics/orders/schema")).await);
    assert_eq!(body["version"], 0);
    assert_eq!(body["versions"].as_array().map(Vec::len), Some(0));
}

#[tokio::test]
async fn alter_by_a_non_owner_is_403() {
    let api = api();
    let answer = send(
        &api,
        patch(ALICE, "/v1/topics/orders", r#"{"retention_ms":0}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn an_idempotency_window_given_at_create_is_described_and_altered() {
    let api = api();
    let created = send(
        &api,
        create(ROOT, r#"{"name":"brief","idempotency_window_ms":1000}"#),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert_eq!(json(&created)["idempotency_window_ms"], 1_000);
    let described = send(&api, get(ROOT, "/v1/topics/brief")).await;
    assert_eq!(json(&described)["idempotency_window_ms"], 1_000);
    let altered = send(
        &api,
        patch(
            ROOT,
            "/v1/topics/brief",
            r#"{"idempotency_window_ms":86400000}"#,
        ),
    )
    .await;
    assert_eq!(altered.status, StatusCode::OK);
    assert_eq!(json(&altered)["idempotency_window_ms"], 86_400_000);
    let described = send(&api, get(ROOT, "/v1/topics/brief")).await;
    assert_eq!(json(&described)["idempotency_window_ms"], 86_400_000);
}

#[tokio::test]
async fn a_topic_created_without_a_window_has_two_minutes() {
    let api = api();
    let created = send(&api, create(ROOT, r#"{"name":"plain"}"#)).await;
    assert_eq!(json(&created)["idempotency_window_ms"], 120_000);
    let described = send(&api, get(ROOT, "/v1/topics/orders")).await;
    assert_eq!(json(&described)["idempotency_window_ms"], 120_000);
}

/// The metastore's text for a refused window of `window_ms`.
fn window_refusal(window_ms: i64) -> String {
    format!(
        "idempotency_window_ms must be at least 1000 (1 second) and at most 86400000 (1 day), got {window_ms}"
    )
}

#[tokio::test]
async fn an_idempotency_window_outside_one_second_to_one_day_is_400() {
    let api = api();
    for window_ms in [0, 999, 86_400_001, -5] {
        let body = format!(r#"{{"name":"brief","idempotency_window_ms":{window_ms}}}"#);
        let answer = send(&api, create(ROOT, &body)).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{window_ms}");
        assert_eq!(answer.error(), window_refusal(window_ms));
        let body = format!(r#"{{"idempotency_window_ms":{window_ms}}}"#);
        let answer = send(&api, patch(ROOT, "/v1/topics/orders", &body)).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{window_ms}");
        assert_eq!(answer.error(), window_refusal(window_ms));
    }
    let described = send(&api, get(ROOT, "/v1/topics/orders")).await;
    assert_eq!(json(&described)["idempotency_window_ms"], 120_000);
    let missing = send(&api, get(ROOT, "/v1/topics/brief")).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}
