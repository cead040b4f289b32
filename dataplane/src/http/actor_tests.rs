//! HTTP tests that every admin change names who acts: the authenticated
//! user, or security off. The control plane re-checks its rules for that
//! actor, so the routes must not lose it.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use parking_lot::Mutex;

use super::ApiConfig;
use super::body::BATCH_BODY_BYTES_IN_FLIGHT_MAX;
use super::tests::{ALICE, Api, api_with_admin, send};
use crate::admin::{Admin, AdminFuture, LocalAdmin};
use crate::testing::basic;
use narad_meta::{Actor, Command};

const ROOT: (&str, &str) = ("root", "root-pw");

/// One admin call as the admin received it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Call {
    operation: &'static str,
    actor: Actor,
    checked_hash: Option<String>,
}

/// Records each proposal, then applies it with a [`LocalAdmin`].
#[derive(Debug)]
struct RecordingAdmin {
    inner: LocalAdmin,
    calls: Arc<Mutex<Vec<Call>>>,
}

/// The operation a command carries out, its actor, and the password hash a
/// password change was checked against.
fn call_of(command: &Command) -> Call {
    let (operation, actor, checked_hash) = match command {
        Command::CreateTopic(create) => ("create_topic", &create.actor, None),
        Command::DeleteTopic(delete) => ("delete_topic", &delete.actor, None),
        Command::AlterTopic(alter) => ("alter_topic", &alter.actor, None),
        Command::AddSchemaVersion(add) => ("alter_topic", &add.actor, None),
        Command::CreateUser(create) => ("create_user", &create.actor, None),
        Command::DeleteUser(delete) => ("delete_user", &delete.actor, None),
        Command::SetGrants(set) => ("set_grants", &set.actor, None),
        Command::SetPassword(set) => (
            "set_password",
            &set.actor,
            set.checked_hash.clone().map(String::from),
        ),
        other => panic!("the HTTP API proposed an unexpected command {other:?}"),
    };
    Call {
        operation,
        actor: actor.clone(),
        checked_hash,
    }
}

impl Admin for RecordingAdmin {
    fn propose(&self, command: Command) -> AdminFuture<'_, ()> {
        self.calls.lock().push(call_of(&command));
        self.inner.propose(command)
    }
}

/// An API over a recording admin, and what it recorded.
fn recorded_api(security: bool) -> (Api, Arc<Mutex<Vec<Call>>>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let config = ApiConfig {
        security,
        bcrypt_cost: 4,
        ..ApiConfig::default()
    };
    let recorded = Arc::clone(&calls);
    let api = api_with_admin(config, BATCH_BODY_BYTES_IN_FLIGHT_MAX, 2, move |replica| {
        Arc::new(RecordingAdmin {
            inner: LocalAdmin::new(replica),
            calls: recorded,
        })
    });
    (api, calls)
}

fn request(method: &str, uri: &str, who: Option<(&str, &str)>, body: &str) -> Request<Body> {
    let mut builder = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some((user, password)) = who {
        builder = builder.header(header::AUTHORIZATION, basic(user, password));
    }
    builder.body(Body::from(body.to_owned())).expect("request")
}

fn user(name: &str) -> Actor {
    Actor::User(name.to_owned())
}

fn actors(calls: &Mutex<Vec<Call>>) -> Vec<(&'static str, Actor)> {
    calls
        .lock()
        .iter()
        .map(|call| (call.operation, call.actor.clone()))
        .collect()
}

#[tokio::test]
async fn topic_changes_name_the_authenticated_user() {
    let (api, calls) = recorded_api(true);
    let created = send(
        &api,
        request("POST", "/v1/topics", Some(ROOT), r#"{"name":"payments"}"#),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let altered = send(
        &api,
        request(
            "PATCH",
            "/v1/topics/payments",
            Some(ROOT),
            r#"{"retention_ms":0}"#,
        ),
    )
    .await;
    assert_eq!(altered.status, StatusCode::OK);
    let deleted = send(
        &api,
        request("DELETE", "/v1/topics/payments", Some(ROOT), ""),
    )
    .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert_eq!(
        actors(&calls),
        vec![
            ("create_topic", user("root")),
            ("alter_topic", user("root")),
            ("delete_topic", user("root")),
        ]
    );
}

#[tokio::test]
async fn user_changes_name_the_authenticated_admin() {
    let (api, calls) = recorded_api(true);
    let body = r#"{"username":"dave","password":"dave-pw"}"#;
    let created = send(&api, request("POST", "/v1/users", Some(ROOT), body)).await;
    assert_eq!(created.status, StatusCode::CREATED);
    let grants = r#"{"grants":[{"action":"consume","patterns":["orders"]}]}"#;
    let granted = send(
        &api,
        request("PUT", "/v1/users/dave/grants", Some(ROOT), grants),
    )
    .await;
    assert_eq!(granted.status, StatusCode::OK);
    let deleted = send(&api, request("DELETE", "/v1/users/dave", Some(ROOT), "")).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert_eq!(
        actors(&calls),
        vec![
            ("create_user", user("root")),
            ("set_grants", user("root")),
            ("delete_user", user("root")),
        ]
    );
}

#[tokio::test]
async fn an_own_password_change_carries_the_hash_its_current_password_matched() {
    let (api, calls) = recorded_api(true);
    let stored = api
        .state
        .replica
        .user("alice")
        .0
        .expect("alice")
        .password_hash
        .clone();
    let body = r#"{"new_password":"new-pw","current_password":"alice-pw"}"#;
    let answer = send(
        &api,
        request("PUT", "/v1/users/alice/password", Some(ALICE), body),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    let expected = Call {
        operation: "set_password",
        actor: user("alice"),
        checked_hash: Some(stored.into()),
    };
    assert_eq!(*calls.lock(), vec![expected]);
}

#[tokio::test]
async fn an_admin_changes_a_password_without_a_checked_hash() {
    let (api, calls) = recorded_api(true);
    let body = r#"{"new_password":"new-pw"}"#;
    let answer = send(
        &api,
        request("PUT", "/v1/users/alice/password", Some(ROOT), body),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    let expected = Call {
        operation: "set_password",
        actor: user("root"),
        checked_hash: None,
    };
    assert_eq!(*calls.lock(), vec![expected]);
}

#[tokio::test]
async fn with_security_off_changes_act_as_security_off() {
    let (api, calls) = recorded_api(false);
    let created = send(
        &api,
        request("POST", "/v1/topics", None, r#"{"name":"payments"}"#),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let deleted = send(&api, request("DELETE", "/v1/topics/payments", None, "")).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert_eq!(
        actors(&calls),
        vec![
            ("create_topic", Actor::SecurityOff),
            ("delete_topic", Actor::SecurityOff),
        ]
    );
}

#[tokio::test]
async fn a_request_refused_on_the_node_reaches_no_admin() {
    let (api, calls) = recorded_api(true);
    let answer = send(
        &api,
        request("DELETE", "/v1/topics/orders", Some(ALICE), ""),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert!(calls.lock().is_empty());
}
