//! The rules both planes apply refuse the same input with the same status
//! and text: each case is sent to this node's HTTP API and, as the command
//! a proposer would build, applied by the leader's `Metastore::apply`.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use narad_meta::{
    Actor, ApplyContext, Command, CreateTopic, CreateUser, Grant, GrantAction, IncarnationId,
    Metastore, MetastoreError, SeedAdmin, SetGrants, rules,
};

use super::tests::{api, send};
use crate::testing::{basic, password_hash};

const ROOT: (&str, &str) = ("root", "root-pw");

/// The leader's state beside the test API's: root `root` and user `bob`.
fn leader() -> Metastore {
    let mut metastore = Metastore::new();
    let seed = Command::SeedAdmin(SeedAdmin {
        username: "root".into(),
        password_hash: password_hash("root-pw"),
        at_ms: 0,
    });
    let bob = Command::CreateUser(CreateUser {
        actor: Actor::SecurityOff,
        username: "bob".into(),
        password_hash: password_hash("bob-pw"),
        grants: Vec::new(),
        at_ms: 0,
    });
    for (index, command) in [seed, bob].iter().enumerate() {
        metastore
            .apply(
                command,
                ApplyContext {
                    index: index as u64 + 1,
                },
            )
            .expect("setup applies");
    }
    metastore
}

/// The leader's refusal of `command` as status and text.
fn leader_refusal(command: &Command) -> (u16, String) {
    let error = leader()
        .apply(command, ApplyContext { index: 10 })
        .expect_err("the leader refuses it");
    (error.status(), error.to_string())
}

/// This node's refusal of `body` sent to `uri` with `method`, as root.
async fn node_refusal(method: &str, uri: &str, body: &str) -> (u16, String) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, basic(ROOT.0, ROOT.1))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .expect("request");
    let answer = send(&api(), request).await;
    assert_ne!(answer.status, StatusCode::OK, "{uri} {body} was accepted");
    (answer.status.as_u16(), answer.error())
}

/// A create as root of `name` with one numeric field set as sent.
fn create(name: &str, field: &str, value: i64) -> (String, Command) {
    let mut create = CreateTopic::named(
        Actor::User("root".into()),
        name,
        IncarnationId::from_bits(0xf1),
        0,
    );
    let mut body = serde_json::json!({ "name": name });
    if !field.is_empty() {
        body[field] = serde_json::json!(value);
        let slot = match field {
            "partitions" => &mut create.partitions,
            "retention_ms" => &mut create.retention_ms,
            "visibility_timeout_ms" => &mut create.visibility_timeout_ms,
            "max_in_flight_per_partition" => &mut create.max_in_flight_per_partition,
            "max_acked_ahead_per_partition" => &mut create.max_acked_ahead_per_partition,
            other => panic!("no field {other}"),
        };
        *slot = Some(value);
    }
    (body.to_string(), Command::CreateTopic(create))
}

#[tokio::test]
async fn topic_names_and_settings_are_refused_alike_on_both_planes() {
    let long = "n".repeat(201);
    let cases = [
        create(&long, "", 0),
        create("bad/name", "", 0),
        create("..", "", 0),
        create("fine", "partitions", 2),
        create("fine", "partitions", 109),
        create("fine", "retention_ms", 1_000),
        create("fine", "retention_ms", -1),
        create("fine", "visibility_timeout_ms", -5),
        create("fine", "max_in_flight_per_partition", -1),
        create("fine", "max_acked_ahead_per_partition", -1),
    ];
    for (body, command) in cases {
        let node = node_refusal("POST", "/v1/topics", &body).await;
        assert_eq!(node, leader_refusal(&command), "create {body}");
    }
}

fn grant(action: GrantAction, patterns: &[&str]) -> Grant {
    Grant {
        action,
        patterns: patterns
            .iter()
            .map(|pattern| (*pattern).to_owned())
            .collect(),
    }
}

#[tokio::test]
async fn usernames_and_grants_are_refused_alike_on_both_planes() {
    let long = "u".repeat(65);
    let bad_grants = [
        grant(GrantAction::Produce, &["a*b"]),
        grant(GrantAction::Produce, &[]),
        grant(GrantAction::Admin, &["orders"]),
        grant(GrantAction::Consume, &["bad/name"]),
    ];
    for username in [long.as_str(), "bad name", ".."] {
        let body = serde_json::json!({ "username": username, "password": "pw" });
        let node = node_refusal("POST", "/v1/users", &body.to_string()).await;
        let command = Command::CreateUser(CreateUser {
            actor: Actor::User("root".into()),
            username: username.into(),
            password_hash: password_hash("pw"),
            grants: Vec::new(),
            at_ms: 0,
        });
        assert_eq!(node, leader_refusal(&command), "username {username:?}");
    }
    for bad in bad_grants {
        let wire = serde_json::json!({
            "grants": [{ "action": bad.action.name(), "patterns": bad.patterns }]
        });
        let node = node_refusal("PUT", "/v1/users/bob/grants", &wire.to_string()).await;
        let command = Command::SetGrants(SetGrants {
            actor: Actor::User("root".into()),
            username: "bob".into(),
            grants: vec![bad.clone()],
            at_ms: 0,
        });
        assert_eq!(node, leader_refusal(&command), "grant {bad:?}");
    }
}

#[tokio::test]
async fn passwords_are_refused_by_the_metastores_rule() {
    let long = "p".repeat(73);
    for password in ["", long.as_str()] {
        let body = serde_json::json!({ "username": "dave", "password": password });
        let node = node_refusal("POST", "/v1/users", &body.to_string()).await;
        let rule: MetastoreError =
            rules::check_password(password.as_bytes()).expect_err("the rule refuses it");
        assert_eq!(node, (rule.status(), rule.to_string()));
    }
}
