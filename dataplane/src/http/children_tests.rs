//! HTTP tests of fan-out children: create-as-child, attach, list with lag,
//! detach, every refusal with its status and text, and the attach point
//! recorded from the parent partitions' high watermarks.
//!
//! The test replica (`crate::testing::replica`) holds `orders`, `legacy`
//! (parent of the delay child `delayed`, 60 s) and `typed` (with a schema),
//! all owned by no user (made with security off), so only an admin manages
//! them; `alice` may produce to `ord*`, `typed` and `delayed`; `bob` has no
//! grant.

use axum::http::StatusCode;
use narad_meta::{Actor, AttachEpoch, Command, IncarnationId, NewLink};
use narad_plog::CommitRecord;
use serde_json::{Value, json};

use super::tests::{ALICE, Answer, Api, api, produce_request, request, send};
use crate::fanout::{CursorKey, CursorReport};
use crate::metadata::{Grant, GrantAction};
use crate::testing::{LOCAL_NODE, add_user, apply, assign, create_command, mark_dead, topic};
use crate::topology::Destination;

const ROOT: (&str, &str) = ("root", "root-pw");
const BOB: (&str, &str) = ("bob", "bob-pw");
/// May create `carol-*` topics, and so owns them.
const CAROL: (&str, &str) = ("carol", "carol-pw");
/// Owns partitions of `split` in [`with_remote_parents`]; alive, but the
/// test API has no forwarder to reach it.
const OTHER_NODE: u64 = LOCAL_NODE + 1;
/// Owns a partition of `ghostly` in [`with_remote_parents`]; marked dead.
const DEAD_NODE: u64 = LOCAL_NODE + 2;

const ROLE_CONFLICT: &str = "fan-out role conflict: ";
const NOT_OWNER: &str = "only the topic's owner or an admin may change this topic";

async fn create(api: &Api, who: (&str, &str), body: Value) -> Answer {
    send(api, request("POST", "/v1/topics", who, &body.to_string())).await
}

async fn attach(api: &Api, who: (&str, &str), parent: &str, body: Value) -> Answer {
    let uri = format!("/v1/topics/{parent}/children");
    send(api, request("POST", &uri, who, &body.to_string())).await
}

async fn children(api: &Api, who: (&str, &str), parent: &str) -> Answer {
    let uri = format!("/v1/topics/{parent}/children");
    send(api, request("GET", &uri, who, "")).await
}

async fn detach(api: &Api, who: (&str, &str), parent: &str, child: &str) -> Answer {
    let uri = format!("/v1/topics/{parent}/children/{child}");
    send(api, request("DELETE", &uri, who, "")).await
}

async fn describe(api: &Api, name: &str) -> Value {
    let uri = format!("/v1/topics/{name}");
    json_of(&send(api, request("GET", &uri, ROOT, "")).await)
}

pub(super) fn json_of(answer: &Answer) -> Value {
    serde_json::from_str(&answer.body).expect("JSON body")
}

/// Commits `count` records to `topic`'s `partition` on this node's log.
pub(super) fn commit(api: &Api, topic: &str, partition: u32, count: usize) {
    let meta = api.state.replica.topic_meta(topic).expect("topic");
    let logs = api.state.logs.as_ref().expect("logs");
    let log = logs
        .resolve(
            &Destination::new(topic, partition),
            meta.incarnation_id.as_ref(),
        )
        .expect("open log");
    let records: Vec<CommitRecord<'_>> = (0..count)
        .map(|_| CommitRecord::new(b"", b"x", 1))
        .collect();
    log.commit_durable(&[&records]).expect("commit");
}

/// What a running cursor of `parent`'s `partition` feeding `child` reports.
fn report(api: &Api, parent: &str, partition: u32, child: &str, next_offset: u64) {
    let key = CursorKey {
        parent: parent.into(),
        partition,
        child: child.into(),
    };
    let report = CursorReport {
        next_offset,
        high_watermark: next_offset,
        due_lag_ms: None,
        remote: None,
    };
    api.state.fanout.report(key, report);
}

/// `carol`, who may create `carol-*` topics.
fn with_carol(api: &Api) {
    let grant = Grant {
        action: GrantAction::Create,
        patterns: vec!["carol-*".into()],
    };
    add_user(&api.state.replica, "carol", "carol-pw", vec![grant]);
}

fn children_of(api: &Api, parent: &str) -> Vec<String> {
    api.state
        .replica
        .topic_meta(parent)
        .expect("parent")
        .children
        .clone()
}

// ---- Create as a child ----

#[tokio::test]
async fn create_with_a_parent_links_the_child_at_the_parents_high_watermarks() {
    let api = api();
    topic(&api.state.replica, "wide", 0xf0, 5, LOCAL_NODE);
    commit(&api, "wide", 0, 2);
    commit(&api, "wide", 3, 1);
    let answer = create(&api, ROOT, json!({"name": "wide-copy", "parent": "wide"})).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    let child = json_of(&answer);
    assert_eq!(child["role"], "child");
    assert_eq!(child["parent"], "wide");
    assert_eq!(child["partitions"], 5, "inherited from the parent");
    assert_eq!(child["attach_offsets"], json!([2, 0, 0, 1, 0]));
    assert_eq!(child["fanout_delay_ms"], 0);
    let epoch = child["attach_epoch"].as_str().expect("an epoch");
    assert!(AttachEpoch::try_from(epoch.to_owned()).is_ok(), "{epoch}");
    let parent = describe(&api, "wide").await;
    assert_eq!(parent["role"], "parent");
    assert_eq!(parent["children"], json!(["wide-copy"]));
}

#[tokio::test]
async fn a_plain_create_answers_without_a_role_and_describe_shows_standalone() {
    let api = api();
    let answer = create(&api, ROOT, json!({"name": "plain"})).await;
    assert_eq!(answer.status, StatusCode::CREATED);
    let record = json_of(&answer);
    assert!(record.get("role").is_none(), "{record}");
    assert!(record.get("parent").is_none(), "{record}");
    assert!(record.get("children").is_none(), "{record}");
    assert_eq!(describe(&api, "plain").await["role"], "standalone");
}

#[tokio::test]
async fn a_delay_child_is_created_with_its_delay_and_refuses_produces() {
    let api = api();
    let body = json!({"name": "orders-late", "parent": "orders", "fanout_delay_ms": 60_000});
    let answer = create(&api, ROOT, body).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    assert_eq!(json_of(&answer)["fanout_delay_ms"], 60_000);
    let produced = send(
        &api,
        produce_request("/v1/topics/orders-late/produce", ALICE, "x"),
    )
    .await;
    assert_eq!(produced.status, StatusCode::CONFLICT);
    assert_eq!(
        produced.error(),
        "direct produce to a delayed child topic is not allowed"
    );
}

#[tokio::test]
async fn create_under_a_missing_parent_is_404() {
    let api = api();
    let answer = create(&api, ROOT, json!({"name": "orphan", "parent": "nope"})).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.error(), "parent topic not found");
    assert!(api.state.replica.topic_meta("orphan").is_none());
}

#[tokio::test]
async fn create_under_a_child_is_409_fan_out_does_not_chain() {
    let api = api();
    let answer = create(&api, ROOT, json!({"name": "deeper", "parent": "delayed"})).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(
        answer.error(),
        format!("{ROLE_CONFLICT}\"delayed\" is a child of \"legacy\"; fan-out does not chain")
    );
    assert!(api.state.replica.topic_meta("deeper").is_none());
}

#[tokio::test]
async fn a_fanout_delay_without_a_parent_is_400() {
    let api = api();
    let answer = create(&api, ROOT, json!({"name": "late", "fanout_delay_ms": 1000})).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        answer.error(),
        "fanout_delay_ms needs parent: only a fan-out child has a delay"
    );
}

#[tokio::test]
async fn a_delay_over_a_year_is_400_on_create_and_attach() {
    let api = api();
    let year_and_a_bit = 31_536_000_001_i64;
    let body = json!({"name": "late", "parent": "orders", "fanout_delay_ms": year_and_a_bit});
    let created = create(&api, ROOT, body).await;
    let attached = attach(
        &api,
        ROOT,
        "orders",
        json!({"child": "legacy", "delay_ms": year_and_a_bit}),
    )
    .await;
    for answer in [created, attached] {
        assert_eq!(answer.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            answer.error(),
            "fan-out delay too long: at most 31536000000 ms (1 year)"
        );
    }
}

/// `orders` keeps records for the default 7 days: a delay one millisecond
/// longer than 7 days less an hour does not fit.
const DELAY_OVER_ORDERS_RETENTION_MS: i64 = 604_800_000 - 3_600_000 + 1;
const ORDERS_RETENTION_TOO_SHORT: &str = "parent retention must be at least the fan-out delay plus 1 hour: retention_ms is 604800000, needs at least 604800001";

#[tokio::test]
async fn a_delay_the_parents_retention_does_not_cover_is_409_on_create() {
    let api = api();
    let body = json!({
        "name": "late",
        "parent": "orders",
        "fanout_delay_ms": DELAY_OVER_ORDERS_RETENTION_MS,
    });
    let answer = create(&api, ROOT, body).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.error(), ORDERS_RETENTION_TOO_SHORT);
    assert!(api.state.replica.topic_meta("late").is_none());
}

#[tokio::test]
async fn a_delay_the_parents_retention_does_not_cover_is_409_on_attach() {
    let api = api();
    apply(
        &api.state.replica,
        Command::CreateTopic(create_command("late", 0xf1, 3)),
    );
    let body = json!({"child": "late", "delay_ms": DELAY_OVER_ORDERS_RETENTION_MS});
    let answer = attach(&api, ROOT, "orders", body).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.error(), ORDERS_RETENTION_TOO_SHORT);
    assert!(children_of(&api, "orders").is_empty());
}

#[tokio::test]
async fn lowering_a_parents_retention_below_a_delay_child_is_409() {
    let api = api();
    let answer = send(
        &api,
        request(
            "PATCH",
            "/v1/topics/legacy",
            ROOT,
            r#"{"retention_ms":3600000}"#,
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(
        answer.error(),
        "parent retention must be at least the fan-out delay plus 1 hour: retention_ms is 3600000, needs at least 3660000"
    );
    assert_eq!(describe(&api, "legacy").await["retention_ms"], 604_800_000);
}

#[tokio::test]
async fn create_under_someone_elses_parent_is_403() {
    let api = api();
    with_carol(&api);
    let answer = create(
        &api,
        CAROL,
        json!({"name": "carol-copy", "parent": "orders"}),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(answer.error(), NOT_OWNER);
    assert!(api.state.replica.topic_meta("carol-copy").is_none());
}

// ---- Attach ----

#[tokio::test]
async fn attach_answers_the_parent_record_and_links_at_the_high_watermarks() {
    let api = api();
    commit(&api, "orders", 1, 3);
    apply(
        &api.state.replica,
        Command::CreateTopic(create_command("copy", 0xf2, 4)),
    );
    let answer = attach(&api, ROOT, "orders", json!({"child": "copy"})).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let parent = json_of(&answer);
    assert_eq!(parent["name"], "orders");
    assert_eq!(parent["role"], "parent");
    assert_eq!(parent["children"], json!(["copy"]));
    let child = describe(&api, "copy").await;
    assert_eq!(child["role"], "child");
    assert_eq!(child["parent"], "orders");
    assert_eq!(child["partitions"], 4, "an attached child keeps its count");
    assert_eq!(child["attach_offsets"], json!([0, 3, 0]));
}

#[tokio::test]
async fn an_attached_child_without_a_schema_adopts_the_parents_history() {
    let api = api();
    apply(
        &api.state.replica,
        Command::CreateTopic(create_command("typed-copy", 0xf3, 3)),
    );
    let answer = attach(&api, ROOT, "typed", json!({"child": "typed-copy"})).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let child = describe(&api, "typed-copy").await;
    assert_eq!(child["schema_version"], 1);
    assert_eq!(child["schema"]["required"], json!(["amount"]));
}

#[tokio::test]
async fn attach_of_a_child_with_a_schema_under_a_parent_without_one_is_409() {
    let api = api();
    let answer = attach(&api, ROOT, "orders", json!({"child": "typed"})).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(
        answer.error(),
        "fan-out schema mismatch: a child with a schema cannot go under a parent without one"
    );
}

#[tokio::test]
async fn attach_of_a_topic_that_already_has_a_parent_is_409() {
    let api = api();
    let answer = attach(&api, ROOT, "orders", json!({"child": "delayed"})).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(
        answer.error(),
        format!("{ROLE_CONFLICT}\"delayed\" is already a child of \"legacy\"")
    );
}

#[tokio::test]
async fn attach_of_a_parent_as_a_child_is_409() {
    let api = api();
    let answer = attach(&api, ROOT, "orders", json!({"child": "legacy"})).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(
        answer.error(),
        format!("{ROLE_CONFLICT}\"legacy\" is a parent; a child cannot have children")
    );
}

#[tokio::test]
async fn attach_under_a_child_is_409_fan_out_does_not_chain() {
    let api = api();
    let answer = attach(&api, ROOT, "delayed", json!({"child": "orders"})).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(
        answer.error(),
        format!("{ROLE_CONFLICT}\"delayed\" is a child of \"legacy\"; fan-out does not chain")
    );
}

/// Gives `orders` the most children a parent may have.
fn fill_orders_with_children(api: &Api) {
    for index in 0..108_u64 {
        let name = format!("child-{index}");
        let mut create = create_command(&name, 0x1000 + index, 3);
        create.parent = Some(NewLink {
            parent: "orders".into(),
            parent_id: IncarnationId::from_bits(0xa1),
            fanout_delay_ms: None,
            attach_epoch: AttachEpoch::from_bits(index + 1),
            attach_offsets: vec![0; 3],
        });
        apply(&api.state.replica, Command::CreateTopic(create));
    }
}

const CHILD_LIMIT: &str = "fan-out child limit reached: a parent has at most 108 children";

#[tokio::test]
async fn the_109th_child_is_409_on_create() {
    let api = api();
    fill_orders_with_children(&api);
    let answer = create(&api, ROOT, json!({"name": "one-more", "parent": "orders"})).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.error(), CHILD_LIMIT);
}

#[tokio::test]
async fn the_109th_child_is_409_on_attach() {
    let api = api();
    fill_orders_with_children(&api);
    apply(
        &api.state.replica,
        Command::CreateTopic(create_command("one-more", 0xf4, 3)),
    );
    let answer = attach(&api, ROOT, "orders", json!({"child": "one-more"})).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.error(), CHILD_LIMIT);
    assert_eq!(children_of(&api, "orders").len(), 108);
}

#[tokio::test]
async fn attach_without_a_child_is_400() {
    let api = api();
    for body in [json!({}), json!({"child": ""})] {
        let answer = attach(&api, ROOT, "orders", body).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST);
        assert_eq!(answer.error(), "child required");
    }
}

#[tokio::test]
async fn attach_of_a_topic_to_itself_is_400() {
    let api = api();
    let answer = attach(&api, ROOT, "orders", json!({"child": "orders"})).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "a topic cannot be attached to itself");
}

#[tokio::test]
async fn attach_with_an_unknown_field_is_400() {
    let api = api();
    let body = json!({"child": "legacy", "colour": "red"});
    let answer = attach(&api, ROOT, "orders", body).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(
        answer
            .error()
            .starts_with("invalid json: unknown field `colour`"),
        "{}",
        answer.error()
    );
}

#[tokio::test]
async fn an_attach_body_over_one_mebibyte_is_400_not_413() {
    let api = api();
    let body = format!(r#"{{"child":"{}"}}"#, "c".repeat(1024 * 1024));
    let uri = "/v1/topics/orders/children";
    let answer = send(&api, request("POST", uri, ROOT, &body)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error(), "request body too large");
}

#[tokio::test]
async fn attach_under_a_missing_parent_is_404() {
    let api = api();
    let answer = attach(&api, ROOT, "nope", json!({"child": "orders"})).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.error(), "topic not found");
}

#[tokio::test]
async fn attach_of_a_missing_child_is_404() {
    let api = api();
    let answer = attach(&api, ROOT, "orders", json!({"child": "nope"})).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.error(), "topic not found");
    assert!(children_of(&api, "orders").is_empty());
}

#[tokio::test]
async fn attach_without_managing_both_topics_is_403() {
    let api = api();
    with_carol(&api);
    let created = create(&api, CAROL, json!({"name": "carol-copy"})).await;
    assert_eq!(created.status, StatusCode::CREATED);
    for who in [BOB, CAROL] {
        let answer = attach(&api, who, "orders", json!({"child": "carol-copy"})).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN);
        assert_eq!(answer.error(), NOT_OWNER);
    }
    assert!(children_of(&api, "orders").is_empty());
}

// ---- An owner that cannot be asked ----

/// `split` (partition 0 here, 1 and 2 on a live node this one cannot
/// reach) and `ghostly` (partition 1 on a node marked dead), and a
/// standalone `copy` to attach.
fn with_remote_parents(api: &Api) {
    let replica = &api.state.replica;
    apply(
        replica,
        Command::CreateTopic(create_command("split", 0xe5, 3)),
    );
    assign(
        replica,
        "split",
        &[(0, LOCAL_NODE), (1, OTHER_NODE), (2, OTHER_NODE)],
    );
    apply(
        replica,
        Command::CreateTopic(create_command("ghostly", 0xe6, 3)),
    );
    assign(
        replica,
        "ghostly",
        &[(0, LOCAL_NODE), (1, DEAD_NODE), (2, LOCAL_NODE)],
    );
    apply(
        replica,
        Command::CreateTopic(create_command("copy", 0xf2, 3)),
    );
    mark_dead(replica, DEAD_NODE);
}

#[tokio::test]
async fn attach_when_a_parent_owner_cannot_be_asked_is_503_and_links_nothing() {
    let api = api();
    with_remote_parents(&api);
    for parent in ["split", "ghostly"] {
        let answer = attach(&api, ROOT, parent, json!({"child": "copy"})).await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{parent}");
        assert_eq!(
            answer.error(),
            format!(
                "cannot record the attach point: the owner of partition 1 of \"{parent}\" cannot be asked for its high watermark; retry later"
            )
        );
        assert!(children_of(&api, parent).is_empty());
    }
    assert_eq!(describe(&api, "copy").await["role"], "standalone");
}

#[tokio::test]
async fn create_when_a_parent_owner_cannot_be_asked_is_503_and_creates_nothing() {
    let api = api();
    with_remote_parents(&api);
    let answer = create(&api, ROOT, json!({"name": "split-copy", "parent": "split"})).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        answer.error().starts_with("cannot record the attach point"),
        "{}",
        answer.error()
    );
    assert!(api.state.replica.topic_meta("split-copy").is_none());
    assert!(children_of(&api, "split").is_empty());
}

// ---- List ----

#[tokio::test]
async fn list_shows_children_in_attach_order_with_their_lag() {
    let api = api();
    commit(&api, "orders", 0, 5);
    commit(&api, "orders", 2, 2);
    for (name, body) in [
        ("zeta", json!({"name": "zeta", "parent": "orders"})),
        (
            "alpha",
            json!({"name": "alpha", "parent": "orders", "fanout_delay_ms": 60_000}),
        ),
    ] {
        let answer = create(&api, ROOT, body).await;
        assert_eq!(
            answer.status,
            StatusCode::CREATED,
            "{name}: {}",
            answer.body
        );
    }
    commit(&api, "orders", 0, 3);
    for partition in 0..3 {
        report(&api, "orders", partition, "zeta", 0);
        report(&api, "orders", partition, "alpha", 1);
    }
    let answer = children(&api, ALICE, "orders").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let listed = json_of(&answer);
    assert_eq!(listed["parent"], "orders");
    assert_eq!(listed["parent_id"], "00000000000000a1");
    // High watermarks 8, 0, 2: zeta lags 8 + 0 + 2, alpha 7 + 0 + 1.
    assert_eq!(
        listed["children"],
        json!([
            {"name": "zeta", "delay_ms": 0, "lag_messages": 10, "lag_complete": true},
            {"name": "alpha", "delay_ms": 60_000, "lag_messages": 8, "lag_complete": true},
        ])
    );
}

#[tokio::test]
async fn a_partition_without_a_cursor_report_makes_lag_incomplete() {
    let api = api();
    commit(&api, "legacy", 0, 4);
    commit(&api, "legacy", 1, 6);
    report(&api, "legacy", 0, "delayed", 1);
    report(&api, "legacy", 2, "delayed", 0);
    let listed = json_of(&children(&api, ROOT, "legacy").await);
    assert_eq!(
        listed["children"],
        json!([{"name": "delayed", "delay_ms": 60_000, "lag_messages": 3, "lag_complete": false}])
    );
}

#[tokio::test]
async fn list_of_a_topic_without_children_is_empty() {
    let api = api();
    let listed = json_of(&children(&api, ALICE, "orders").await);
    assert_eq!(listed["children"], json!([]));
}

#[tokio::test]
async fn list_without_a_grant_on_the_parent_is_403() {
    let api = api();
    let answer = children(&api, BOB, "legacy").await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(answer.error(), "no grant on this topic");
}

#[tokio::test]
async fn list_of_a_missing_parent_is_404() {
    let api = api();
    let answer = children(&api, ROOT, "nope").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.error(), "topic not found");
}

// ---- Detach ----

#[tokio::test]
async fn detach_is_204_then_404_and_the_child_becomes_standalone() {
    let api = api();
    let first = detach(&api, ROOT, "legacy", "delayed").await;
    assert_eq!(first.status, StatusCode::NO_CONTENT, "{}", first.body);
    let child = describe(&api, "delayed").await;
    assert_eq!(child["role"], "standalone");
    assert!(child.get("parent").is_none(), "{child}");
    assert_eq!(describe(&api, "legacy").await["role"], "standalone");
    let again = detach(&api, ROOT, "legacy", "delayed").await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
    assert_eq!(again.error(), "child is not attached to this parent");
}

#[tokio::test]
async fn detach_of_a_missing_child_is_404() {
    let api = api();
    let answer = detach(&api, ROOT, "legacy", "nope").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.error(), "topic not found");
}

#[tokio::test]
async fn detach_by_the_owner_of_the_child_alone_is_204() {
    let api = api();
    with_carol(&api);
    let created = create(&api, CAROL, json!({"name": "carol-copy"})).await;
    assert_eq!(created.status, StatusCode::CREATED);
    let attached = attach(&api, ROOT, "orders", json!({"child": "carol-copy"})).await;
    assert_eq!(attached.status, StatusCode::OK, "{}", attached.body);
    let answer = detach(&api, CAROL, "orders", "carol-copy").await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT, "{}", answer.body);
    assert!(children_of(&api, "orders").is_empty());
}

#[tokio::test]
async fn detach_by_someone_managing_neither_topic_is_403() {
    let api = api();
    let answer = detach(&api, BOB, "legacy", "delayed").await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(answer.error(), NOT_OWNER);
    assert_eq!(children_of(&api, "legacy"), ["delayed"]);
}

#[tokio::test]
async fn the_metastore_rechecks_grants_for_a_create_as_child() {
    // The same create proposed by a user without manage on the parent is
    // refused by the metastore too, with the same text.
    let api = api();
    with_carol(&api);
    let mut create = create_command("carol-copy", 0xf5, 3);
    create.actor = Actor::User("carol".into());
    create.parent = Some(NewLink {
        parent: "orders".into(),
        parent_id: IncarnationId::from_bits(0xa1),
        fanout_delay_ms: None,
        attach_epoch: AttachEpoch::from_bits(7),
        attach_offsets: vec![0; 3],
    });
    let error = api
        .state
        .replica
        .apply_next(&Command::CreateTopic(create))
        .expect_err("refused");
    assert_eq!((error.status(), error.to_string()), (403, NOT_OWNER.into()));
}
