//! HTTP tests of the remote routes, through the router.

use std::sync::Arc;

use axum::http::{StatusCode, header};
use narad_meta::{
    Actor, AttachEpoch, AttachRemoteChild, Command, CreateRemote, IncarnationId, RemoteFrom,
    RemoteId, RemoteLink,
};
use serde_json::Value;
use zeroize::Zeroizing;

use super::super::ApiConfig;
use super::super::tests::{ALICE, Answer, Api, api_over_replica, request, send};
use crate::credentials::{RemoteCredentials, RemoteSecrets};
use crate::testing::replica;

const ROOT: (&str, &str) = ("root", "root-pw");
const SECRET: &[u8] = b"the first cluster secret, 32 bytes";
const NEW_SECRET: &[u8] = b"the second cluster secret, 33 bytes";
const PASSWORD: &str = "replicator-password-0123456789";

fn secrets(current: &[u8], previous: Option<&[u8]>) -> RemoteSecrets {
    RemoteSecrets {
        current: Some(Zeroizing::new(current.to_vec())),
        previous: previous.map(|previous| Zeroizing::new(previous.to_vec())),
    }
}

fn secured() -> ApiConfig {
    let mut config = ApiConfig {
        bcrypt_cost: 4,
        ..ApiConfig::default()
    };
    config.remotes.api_hop_encrypted = true;
    config
}

/// A node with `secrets` over `replica`.
fn node(
    replica: Arc<crate::metadata::MetadataReplica>,
    config: ApiConfig,
    secrets: RemoteSecrets,
) -> Api {
    api_over_replica(replica, config, |state| {
        state.credentials = Arc::new(RemoteCredentials::new(secrets));
    })
}

fn api() -> Api {
    node(replica(), secured(), secrets(SECRET, None))
}

fn json(answer: &Answer) -> Value {
    serde_json::from_str(&answer.body).expect("JSON body")
}

fn create_body(name: &str) -> String {
    format!(
        r#"{{"name":"{name}","url":"https://dr.example.com","username":"replicator","password":"{PASSWORD}"}}"#
    )
}

async fn create(api: &Api, name: &str) -> Answer {
    send(
        api,
        request("POST", "/v1/remotes", ROOT, &create_body(name)),
    )
    .await
}

#[tokio::test]
async fn create_answers_201_with_the_remote_and_never_the_password() {
    let api = api();
    let answer = create(&api, "dr").await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    assert_eq!(answer.headers[header::CACHE_CONTROL], "no-store");
    assert!(!answer.body.contains(PASSWORD));
    let remote = json(&answer);
    assert_eq!(remote["name"], "dr");
    assert_eq!(remote["url"], "https://dr.example.com");
    assert_eq!(remote["username"], "replicator");
    assert_eq!(remote["credential_version"], 1);
    assert_eq!(remote["revision"], 1);
    assert_eq!(remote["created_by"], "root");
    assert_eq!(remote["password"]["set_by"], "root");
    assert_eq!(remote["password"]["key_version"], 1);
    assert_eq!(
        remote["password"]["fingerprint"].as_str().map(str::len),
        Some(16)
    );
    assert_eq!(remote["limits"]["max_in_flight"], 16);
    assert_eq!(remote["limits"]["compression"], "none");
    assert_eq!(remote["ca_pem_sha512"], Value::Null);
    assert_eq!(remote["links"], serde_json::json!([]));
    assert_eq!(remote["nodes"][0]["credential"], "readable");
    assert_eq!(remote["nodes"][0]["key_current"], true);
    assert!(remote.get("sealed").is_none());
}

#[tokio::test]
async fn the_metastore_holds_only_the_sealed_password() {
    let api = api();
    create(&api, "dr").await;
    let view = api.state.replica.view();
    let stored = view.metastore.remote("dr").expect("stored");
    let sealed = &stored.password.sealed;
    assert!(
        !sealed
            .windows(PASSWORD.len())
            .any(|w| w == PASSWORD.as_bytes())
    );
    let json = serde_json::to_string(&*view.metastore).expect("json");
    assert!(!json.contains(PASSWORD));
    let key = view.metastore.remote_key().expect("cluster key");
    let opened = api.state.credentials.open(key, stored).expect("opens");
    assert_eq!(opened.as_bytes(), PASSWORD.as_bytes());
}

#[tokio::test]
async fn with_security_off_every_remote_route_is_403() {
    let config = ApiConfig {
        security: false,
        ..secured()
    };
    let api = node(replica(), config, RemoteSecrets::default());
    for (method, uri, body) in [
        ("POST", "/v1/remotes", create_body("dr")),
        ("GET", "/v1/remotes", String::new()),
        ("GET", "/v1/remotes/dr", String::new()),
        ("PATCH", "/v1/remotes/dr", "{}".into()),
        ("DELETE", "/v1/remotes/dr", String::new()),
        ("POST", "/v1/remotes/dr/test", r#"{"topic":"t"}"#.into()),
        ("POST", "/v1/cluster/reencrypt-remotes", String::new()),
    ] {
        let answer = send(&api, request(method, uri, ROOT, &body)).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{method} {uri}");
        assert_eq!(answer.error(), "remotes require security", "{method} {uri}");
        assert_eq!(answer.headers[header::CACHE_CONTROL], "no-store");
    }
}

#[tokio::test]
async fn a_non_admin_is_403() {
    let api = api();
    let answer = send(
        &api,
        request("POST", "/v1/remotes", ALICE, &create_body("dr")),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    let answer = send(&api, request("GET", "/v1/remotes", ALICE, "")).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn bad_definitions_are_400_with_the_field_named() {
    let api = api();
    let long_password = "p".repeat(73);
    let cases = [
        (
            r#"{"name":"dr","url":"http://dr.example.com","username":"u","password":"replicator-password-0123456789"}"#.to_owned(),
            "url: must use https",
        ),
        (
            r#"{"name":"dr","url":"https://dr.example.com:8443","username":"u","password":"replicator-password-0123456789"}"#.to_owned(),
            "url: port 8443 is not in remotes.allowed_ports",
        ),
        (
            r#"{"name":"Dr","url":"https://dr.example.com","username":"u","password":"replicator-password-0123456789"}"#.to_owned(),
            "name:",
        ),
        (
            r#"{"name":"dr","url":"https://dr.example.com","username":"u","password":"short"}"#.to_owned(),
            "password: must be 24-72 bytes",
        ),
        (
            format!(r#"{{"name":"dr","url":"https://dr.example.com","username":"u","password":"{long_password}"}}"#),
            "password: must be 24-72 bytes",
        ),
        (
            r#"{"name":"dr","url":"https://dr.example.com","username":"u","password":"replicator-password-0123456789","limits":{"max_in_flight":0}}"#.to_owned(),
            "limits.max_in_flight",
        ),
        (
            r#"{"name":"dr","url":"https://dr.example.com","username":"u","password":"replicator-password-0123456789","limits":{"compression":"gzip"}}"#.to_owned(),
            "limits.compression",
        ),
        (
            r#"{"name":"dr","url":"https://dr.example.com","username":"u","password":"replicator-password-0123456789","ca_pem":"nope"}"#.to_owned(),
            "ca_pem:",
        ),
        (
            r#"{"name":"dr","url":"https://dr.example.com","username":"u","password":"replicator-password-0123456789","extra":1}"#.to_owned(),
            "invalid json",
        ),
    ];
    for (body, words) in cases {
        let answer = send(&api, request("POST", "/v1/remotes", ROOT, &body)).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
        assert!(
            answer.error().contains(words),
            "{words}: {}",
            answer.error()
        );
        assert!(
            !answer.body.contains("replicator-password"),
            "{}",
            answer.body
        );
    }
    assert!(api.state.replica.view().metastore.remote_key().is_none());
}

#[tokio::test]
async fn a_body_over_128_kib_is_413() {
    let api = api();
    let body = format!(
        r#"{{"name":"dr","url":"https://dr.example.com","username":"u","password":"{PASSWORD}","ca_pem":"{}"}}"#,
        "x".repeat(super::REMOTE_BODY_BYTES_MAX)
    );
    let answer = send(&api, request("POST", "/v1/remotes", ROOT, &body)).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn a_password_write_without_an_encrypted_hop_is_412() {
    let config = ApiConfig {
        bcrypt_cost: 4,
        ..ApiConfig::default()
    };
    let api = node(replica(), config, secrets(SECRET, None));
    let answer = create(&api, "dr").await;
    assert_eq!(answer.status, StatusCode::PRECONDITION_FAILED);
    assert!(answer.error().contains("remotes.api_hop_encrypted"));
}

#[tokio::test]
async fn a_node_without_a_secret_cannot_seal() {
    let api = node(replica(), secured(), RemoteSecrets::default());
    let answer = create(&api, "dr").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer.error().contains("NARAD_CLUSTER_SECRET"));
}

#[tokio::test]
async fn an_existing_name_is_409() {
    let api = api();
    create(&api, "dr").await;
    assert_eq!(create(&api, "dr").await.status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn the_eleventh_write_in_a_minute_is_429_with_retry_after() {
    let api = api();
    for i in 0..super::write_rate::WRITES_PER_WINDOW {
        let answer = create(&api, &format!("dr-{i}")).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }
    let answer = create(&api, "dr-last").await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = answer.headers[header::RETRY_AFTER]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    // Reads are not writes.
    let list = send(&api, request("GET", "/v1/remotes", ROOT, "")).await;
    assert_eq!(list.status, StatusCode::OK);
}

/// Stores `count` remotes straight into the replica (past the write rate).
fn fill(api: &Api, count: usize) {
    let credentials = &api.state.credentials;
    for i in 0..count {
        let metastore = Arc::clone(&api.state.replica.view().metastore);
        let id = RemoteId::mint(&mut rand::rng());
        let binding = narad_remotes::seal::Binding {
            remote_id: id.as_str(),
            credential_version: 1,
        };
        let sealed = credentials
            .seal(
                metastore.remote_key(),
                binding,
                PASSWORD.as_bytes(),
                (0, "root"),
            )
            .expect("seal");
        let remote = narad_meta::Remote {
            name: format!("filler-{i}"),
            id,
            url: "https://dr.example.com".into(),
            username: "u".into(),
            password: sealed.password,
            credential_version: 1,
            ca_pem: None,
            limits: Default::default(),
            revision: 1,
            created_at_ms: 0,
            created_by: "root".into(),
        };
        let create = CreateRemote {
            actor: Actor::User("root".into()),
            remote,
            key: sealed.key,
        };
        api.state
            .replica
            .apply_next(&Command::CreateRemote(create))
            .expect("stored");
    }
}

#[tokio::test]
async fn the_sixty_fifth_remote_is_409() {
    let api = api();
    fill(&api, narad_meta::limits::REMOTES_MAX);
    let answer = create(&api, "one-more").await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert!(
        answer.error().contains("at most 64 remotes"),
        "{}",
        answer.error()
    );
}

#[tokio::test]
async fn list_has_remotes_allowlist_key_and_lingering() {
    let api = api();
    create(&api, "dr").await;
    create(&api, "backup").await;
    let answer = send(&api, request("GET", "/v1/remotes", ROOT, "")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.headers[header::CACHE_CONTROL], "no-store");
    let body = json(&answer);
    let names: Vec<&str> = body["remotes"]
        .as_array()
        .expect("remotes")
        .iter()
        .filter_map(|remote| remote["name"].as_str())
        .collect();
    assert_eq!(names, ["backup", "dr"]);
    assert_eq!(body["allowlist"]["ports"], serde_json::json!([443]));
    assert_eq!(body["allowlist"]["configured"], false);
    assert_eq!(body["key"]["version"], 1);
    assert_eq!(body["key"]["node_current"], true);
    assert_eq!(body["lingering"], serde_json::json!([]));
    assert!(body["remotes"][0]["nodes"].is_array());
    let without = json(&send(&api, request("GET", "/v1/remotes?nodes=false", ROOT, "")).await);
    assert!(without["remotes"][0].get("nodes").is_none());
}

#[tokio::test]
async fn describe_of_an_unknown_remote_is_404() {
    let api = api();
    let answer = send(&api, request("GET", "/v1/remotes/nope", ROOT, "")).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.error(), "remote not found");
}

#[tokio::test]
async fn changing_the_url_needs_the_password_again() {
    let api = api();
    create(&api, "dr").await;
    let answer = send(
        &api,
        request(
            "PATCH",
            "/v1/remotes/dr",
            ROOT,
            r#"{"url":"https://dr2.example.com"}"#,
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.error().contains("needs the password again"));
    let body = format!(r#"{{"url":"https://dr2.example.com","password":"{PASSWORD}-2"}}"#);
    let answer = send(&api, request("PATCH", "/v1/remotes/dr", ROOT, &body)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let remote = json(&answer);
    assert_eq!(remote["url"], "https://dr2.example.com");
    assert_eq!(remote["credential_version"], 2);
    assert_eq!(remote["revision"], 2);
    assert_eq!(remote["nodes"][0]["credential"], "readable");
    let view = api.state.replica.view();
    let stored = view.metastore.remote("dr").expect("stored");
    let key = view.metastore.remote_key().expect("key");
    let opened = api.state.credentials.open(key, stored).expect("opens");
    assert_eq!(opened.as_bytes(), format!("{PASSWORD}-2").as_bytes());
}

#[tokio::test]
async fn limits_change_alone_without_the_password() {
    let api = api();
    create(&api, "dr").await;
    let answer = send(
        &api,
        request(
            "PATCH",
            "/v1/remotes/dr",
            ROOT,
            r#"{"limits":{"max_in_flight":4}}"#,
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let remote = json(&answer);
    assert_eq!(remote["limits"]["max_in_flight"], 4);
    assert_eq!(remote["limits"]["request_timeout_ms"], 30_000);
    assert_eq!(remote["credential_version"], 1);
}

#[tokio::test]
async fn a_stale_revision_is_409() {
    let api = api();
    create(&api, "dr").await;
    let answer = send(
        &api,
        request(
            "PATCH",
            "/v1/remotes/dr",
            ROOT,
            r#"{"limits":{"max_in_flight":4},"revision":7}"#,
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
}

fn link(api: &Api, remote: &str, child: &str) {
    let view = api.state.replica.view();
    let stored = view.metastore.remote(remote).expect("remote");
    let attach = AttachRemoteChild {
        actor: Actor::User("root".into()),
        parent: "orders".into(),
        parent_id: IncarnationId::from_bits(0xa1),
        child: child.into(),
        child_id: IncarnationId::from_bits(0xe5),
        attach_epoch: AttachEpoch::from_bits(9),
        attach_offsets: vec![0; 3],
        link: RemoteLink {
            remote: remote.into(),
            remote_id: stored.id.clone(),
            remote_topic: "orders".into(),
            target_id: None,
            lanes: 2,
            from: RemoteFrom::Attach,
            paused: None,
            skip: Default::default(),
            created_at_ms: 0,
        },
    };
    api.state
        .replica
        .apply_next(&Command::AttachRemoteChild(attach))
        .expect("attached");
}

#[tokio::test]
async fn delete_with_links_is_409_naming_them_unless_forced() {
    let api = api();
    create(&api, "dr").await;
    link(&api, "dr", "orders-dr");
    let answer = send(&api, request("DELETE", "/v1/remotes/dr", ROOT, "")).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(json(&answer)["links"], serde_json::json!(["orders-dr"]));
    let described = json(&send(&api, request("GET", "/v1/remotes/dr", ROOT, "")).await);
    assert_eq!(described["links"], serde_json::json!(["orders-dr"]));
    let answer = send(
        &api,
        request("DELETE", "/v1/remotes/dr?force=true", ROOT, ""),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    let list = json(&send(&api, request("GET", "/v1/remotes", ROOT, "")).await);
    assert_eq!(list["remotes"], serde_json::json!([]));
    assert_eq!(list["lingering"][0]["child"], "orders-dr");
}

#[tokio::test]
async fn delete_without_links_is_204() {
    let api = api();
    create(&api, "dr").await;
    let answer = send(&api, request("DELETE", "/v1/remotes/dr", ROOT, "")).await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    let answer = send(&api, request("DELETE", "/v1/remotes/dr", ROOT, "")).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn reencrypt_under_a_new_secret_keeps_the_credential_readable() {
    let first = api();
    create(&first, "dr").await;
    create(&first, "backup").await;
    let replica = Arc::clone(&first.state.replica);
    let old_fingerprint = json(&send(&first, request("GET", "/v1/remotes/dr", ROOT, "")).await)
        ["password"]["fingerprint"]
        .clone();
    let first_key = replica.view().metastore.remote_key().cloned().expect("key");
    assert!(
        first_key.created_at_ms.is_some(),
        "the first add mints the key now"
    );
    assert_key_age(&first, 1, first_key.created_at_ms.expect("minted"));
    // The node restarted with a new secret and the old one as previous.
    let rotated = node(
        Arc::clone(&replica),
        secured(),
        secrets(NEW_SECRET, Some(SECRET)),
    );
    let before = json(&send(&rotated, request("GET", "/v1/remotes/dr", ROOT, "")).await);
    assert_eq!(before["nodes"][0]["credential"], "readable");
    assert_eq!(before["nodes"][0]["key_current"], false);
    // A new remote cannot be sealed under a key the cluster does not use.
    let refused = create(&rotated, "third").await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert!(refused.error().contains("reencrypt-remotes"));
    let answer = send(
        &rotated,
        request("POST", "/v1/cluster/reencrypt-remotes", ROOT, ""),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.headers[header::CACHE_CONTROL], "no-store");
    let report = json(&answer);
    assert_eq!(report["key_version"], 2);
    assert_eq!(report["reencrypted"], 2);
    assert_eq!(report["already_current"], 0);
    assert_eq!(report["failed"], serde_json::json!([]));
    // Once re-encrypted, a node with only the new secret opens it.
    let only_new = node(Arc::clone(&replica), secured(), secrets(NEW_SECRET, None));
    let after = json(&send(&only_new, request("GET", "/v1/remotes/dr", ROOT, "")).await);
    assert_eq!(after["nodes"][0]["credential"], "readable");
    assert_eq!(after["nodes"][0]["key_current"], true);
    assert_eq!(after["password"]["key_version"], 2);
    assert_eq!(after["credential_version"], 1);
    assert_ne!(after["password"]["fingerprint"], old_fingerprint);
    let view = replica.view();
    let stored = view.metastore.remote("dr").expect("stored");
    let key = view.metastore.remote_key().expect("key");
    let opened = only_new.state.credentials.open(key, stored).expect("opens");
    assert_eq!(opened.as_bytes(), PASSWORD.as_bytes());
    // The next key was minted by the re-encryption; only it has an age.
    let minted = key.created_at_ms.expect("minted");
    assert!(minted >= first_key.created_at_ms.expect("minted"));
    assert_key_age(&rotated, 2, minted);
    assert_eq!(key_age(&rotated, 1), None);
    let listed = json(&send(&rotated, request("GET", "/v1/remotes", ROOT, "")).await);
    assert_eq!(listed["key"]["created_at"], minted / 1000);
    // Again: nothing left to do.
    let again = json(
        &send(
            &only_new,
            request("POST", "/v1/cluster/reencrypt-remotes", ROOT, ""),
        )
        .await,
    );
    assert_eq!(
        (
            again["reencrypted"].as_u64(),
            again["already_current"].as_u64()
        ),
        (Some(0), Some(2))
    );
    // And the old secret alone no longer opens it.
    let old_only = node(replica, secured(), secrets(SECRET, None));
    let old_view = json(&send(&old_only, request("GET", "/v1/remotes/dr", ROOT, "")).await);
    assert_eq!(old_view["nodes"][0]["credential"], "unreadable");
}

/// `narad_remote_key_age_seconds{key}` on `api` after a refresh.
fn key_age(api: &Api, version: u32) -> Option<f64> {
    super::gauges::refresh(&api.state);
    super::super::tests::series_value(
        &api.state.metrics.render(),
        &format!("narad_remote_key_age_seconds{{key=\"{version}\"}}"),
    )
}

/// The key age gauge of `version` on `api` is the seconds since
/// `minted_ms` on the node's clock, read before and after the refresh.
fn assert_key_age(api: &Api, version: u32, minted_ms: u64) {
    let seconds = || api.state.clock().unix_ms().saturating_sub(minted_ms) as f64 / 1000.0;
    let before = seconds();
    let age = key_age(api, version).expect("served");
    let after = seconds();
    assert!(
        before <= age && age <= after,
        "{before} <= {age} <= {after}"
    );
}

#[tokio::test]
async fn reencrypt_without_the_previous_secret_moves_nothing() {
    let first = api();
    create(&first, "dr").await;
    let replica = Arc::clone(&first.state.replica);
    let rotated = node(Arc::clone(&replica), secured(), secrets(NEW_SECRET, None));
    let answer = send(
        &rotated,
        request("POST", "/v1/cluster/reencrypt-remotes", ROOT, ""),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert!(answer.error().contains("NARAD_CLUSTER_SECRET_PREVIOUS"));
    assert_eq!(
        replica.view().metastore.remote_key().map(|key| key.version),
        Some(1)
    );
}

/// A node whose remotes may point at `port` on loopback, if `loopback`.
fn lab_node(port: u16, loopback: bool) -> Api {
    let mut config = secured();
    config.remotes.url_policy =
        narad_remotes::url::UrlPolicy::new(&[], &[443, port]).expect("policy");
    config.remotes.allow_loopback = loopback;
    node(replica(), config, secrets(SECRET, None))
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    port
}

async fn test_report(api: &Api, url: &str) -> Value {
    let body = format!(
        r#"{{"name":"lab","url":"{url}","username":"replicator","password":"{PASSWORD}"}}"#
    );
    let created = send(api, request("POST", "/v1/remotes", ROOT, &body)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let answer = send(
        api,
        request(
            "POST",
            "/v1/remotes/lab/test",
            ROOT,
            r#"{"topic":"orders"}"#,
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.headers[header::CACHE_CONTROL], "no-store");
    json(&answer)
}

/// The report of `POST /v1/remotes/dr/test` for topic `orders` on `api`.
async fn test_dr_report(api: &Api) -> Value {
    let answer = send(
        api,
        request("POST", "/v1/remotes/dr/test", ROOT, r#"{"topic":"orders"}"#),
    )
    .await;
    json(&answer)
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|check| check["name"] == name))
        .unwrap_or_else(|| panic!("check {name} in {report}"))
}

#[tokio::test]
async fn test_of_a_target_nobody_answers_fails_as_unavailable_after_the_local_checks() {
    let port = closed_port();
    let api = lab_node(port, true);
    let report = test_report(&api, &format!("https://127.0.0.1:{port}")).await;
    assert_eq!(check(&report, "url")["result"], "pass");
    assert_eq!(check(&report, "credential")["result"], "pass");
    assert_eq!(check(&report, "reach")["result"], "fail");
    assert_eq!(report["result"], "fail");
    assert_eq!(report["class"], "unavailable", "{report}");
}

#[tokio::test]
async fn test_of_a_loopback_target_without_the_lab_switch_is_destination_refused() {
    let port = closed_port();
    let api = lab_node(port, false);
    let report = test_report(&api, &format!("https://127.0.0.1:{port}")).await;
    assert_eq!(report["result"], "fail");
    assert_eq!(report["class"], "destination_refused", "{report}");
}

#[tokio::test]
async fn test_of_a_credential_this_node_cannot_open_fails_as_credential_unreadable() {
    let first = api();
    create(&first, "dr").await;
    let other = node(
        Arc::clone(&first.state.replica),
        secured(),
        secrets(NEW_SECRET, None),
    );
    let report = test_dr_report(&other).await;
    assert_eq!(report["result"], "fail");
    assert_eq!(report["class"], "credential_unreadable");
}

/// `narad_remote_destination_refused_total{remote,reason}` on `api`.
fn refused_total(api: &Api, remote: &str, reason: &str) -> Option<f64> {
    super::super::tests::series_value(
        &api.state.metrics.render(),
        &format!(
            "narad_remote_destination_refused_total{{remote=\"{remote}\",reason=\"{reason}\"}}"
        ),
    )
}

#[tokio::test]
async fn urls_the_nodes_ports_or_allowlist_refuse_count_by_reason_at_add_change_and_test() {
    let mut config = secured();
    config.remotes.url_policy =
        narad_remotes::url::UrlPolicy::new(&["*.example.com".to_owned()], &[443]).expect("policy");
    let api = node(replica(), config, secrets(SECRET, None));
    let add = async |url: &str| {
        let body =
            format!(r#"{{"name":"dr","url":"{url}","username":"u","password":"{PASSWORD}"}}"#);
        send(&api, request("POST", "/v1/remotes", ROOT, &body))
            .await
            .status
    };
    assert_eq!(
        add("https://dr.example.com:8443").await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(refused_total(&api, "dr", "port"), Some(1.0));
    assert_eq!(add("https://dr.example.org").await, StatusCode::BAD_REQUEST);
    assert_eq!(refused_total(&api, "dr", "allowlist"), Some(1.0));
    // A malformed URL is no destination refusal.
    assert_eq!(add("http://dr.example.com").await, StatusCode::BAD_REQUEST);
    assert_eq!(refused_total(&api, "dr", "port"), Some(1.0));
    assert_eq!(refused_total(&api, "dr", "allowlist"), Some(1.0));

    let answer = create(&api, "dr").await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    let patch = format!(r#"{{"url":"https://dr.example.com:9443","password":"{PASSWORD}"}}"#);
    let answer = send(&api, request("PATCH", "/v1/remotes/dr", ROOT, &patch)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused_total(&api, "dr", "port"), Some(2.0));

    // Another node of the cluster whose allowlist does not hold the host
    // the first accepted refuses it in /test.
    let mut config = secured();
    config.remotes.url_policy =
        narad_remotes::url::UrlPolicy::new(&["dr.example.net".to_owned()], &[443]).expect("policy");
    let other = node(
        Arc::clone(&api.state.replica),
        config,
        secrets(SECRET, None),
    );
    let report = test_dr_report(&other).await;
    assert_eq!(report["class"], "destination_refused", "{report}");
    assert_eq!(check(&report, "url")["result"], "fail");
    assert_eq!(refused_total(&other, "dr", "allowlist"), Some(1.0));
}

#[tokio::test]
async fn a_node_whose_settings_refuse_a_remotes_url_does_not_ship_or_check_through_it() {
    use crate::fanout::remote::{RemoteShipper, ShipOutcome, Shipment};
    use crate::fanout::shipping::{NodeShipper, SharedShipper};
    use crate::remote_children::{CheckOutcome, RemoteProbe};
    use narad_remotes::state::LinkState;

    let api = api();
    assert_eq!(create(&api, "dr").await.status, StatusCode::CREATED);
    let remote = api
        .state
        .replica
        .view()
        .metastore
        .remote("dr")
        .cloned()
        .expect("dr");
    // This node allows only port 8443: the remote's 443 is refused here.
    let policy = narad_remotes::url::UrlPolicy::new(&[], &[8443]).expect("policy");
    let shipper = NodeShipper::new(
        Arc::clone(&api.state.replica),
        Arc::clone(&api.state.credentials),
        policy,
        narad_remotes::guard::AddressGuard::default(),
        Arc::clone(api.state.clock()),
        Arc::clone(&api.state.metrics),
    )
    .expect("shipper");
    let report = shipper.check(&remote, "orders").await;
    assert_eq!(report.checks.len(), 1, "{:?}", report.checks);
    assert_eq!(report.checks[0].name, "url");
    assert_eq!(report.checks[0].outcome, CheckOutcome::Failed);
    assert_eq!(
        report.checks[0].state.as_deref(),
        Some("destination_refused")
    );
    assert_eq!(refused_total(&api, "dr", "port"), Some(1.0));

    // A lane of a link to it fails before anything is sent.
    link(&api, "dr", "orders-dr");
    let shipment = Shipment {
        child: Arc::from("orders-dr"),
        parent: Arc::from("orders"),
        parent_partition: 0,
        link: api
            .state
            .replica
            .view()
            .metastore
            .remote_link("orders-dr")
            .cloned()
            .expect("link"),
        lane: 0,
        records: Vec::new(),
        attach_epoch: AttachEpoch::from_bits(9),
        parent_incarnation: None,
    };
    let outcome = SharedShipper(Arc::new(shipper)).ship(shipment).await;
    assert_eq!(
        outcome,
        ShipOutcome::Failed {
            shipped: 0,
            state: LinkState::DestinationRefused
        }
    );
    assert_eq!(refused_total(&api, "dr", "port"), Some(2.0));
}

/// Opcode 33's request as a release before `with_remotes` reads it: no
/// fields, so the flag byte is trailing.
struct OlderNodeStatus;

impl narad_protocol::Encode for OlderNodeStatus {
    fn encode(&self, _writer: &mut narad_protocol::Writer) {}
}

impl narad_protocol::Decode for OlderNodeStatus {
    fn decode(_reader: &mut narad_protocol::Reader) -> Result<Self, narad_protocol::DecodeError> {
        Ok(Self)
    }
}

impl narad_protocol::Message for OlderNodeStatus {
    const NAME: &'static str = "NodeStatus";
    const VERSION: u8 = 1;
}

/// A node RPC router that answers opcode 33 as an older release does.
fn older_release() -> narad_protocol::Router {
    use narad_protocol::consume::decode_forward_request;
    use narad_protocol::{Inbound, NodeStatusAnswer, Opcode, OperationLimit, Response};

    narad_protocol::Router::new().route(
        Opcode::NODE_STATUS,
        OperationLimit::new("node-status", 1),
        |inbound: Inbound| async move {
            decode_forward_request::<OlderNodeStatus>(inbound.request.body)?;
            Ok(Response::message(&NodeStatusAnswer::default()))
        },
    )
}

#[tokio::test]
async fn nodes_lists_every_members_own_view_of_the_credential_and_why_one_is_unknown() {
    use crate::testing::{attach_forwarder, loopback_rpc, status_rpc};

    // Node 1 (this one) seals dr and dr-two under SECRET.
    let api = api();
    assert_eq!(create(&api, "dr").await.status, StatusCode::CREATED);
    assert_eq!(create(&api, "dr-two").await.status, StatusCode::CREATED);
    let (remote, key) = {
        let view = api.state.replica.view();
        let remote = view.metastore.remote("dr").cloned().expect("dr");
        (remote, view.metastore.remote_key().cloned().expect("key"))
    };
    // Node 2 holds dr only, and another secret: it cannot open it.
    let other = node(replica(), secured(), secrets(NEW_SECRET, None));
    other
        .state
        .replica
        .apply_next(&Command::CreateRemote(CreateRemote {
            actor: Actor::User("root".into()),
            remote,
            key,
        }))
        .expect("created on node 2");
    assert!(
        other
            .state
            .status
            .plug_credentials(Arc::clone(&other.state.credentials))
    );
    let other_transport = status_rpc(&other.state.status);
    // Node 4 runs an older release, which refuses the with_remotes byte.
    let older = loopback_rpc(older_release());
    // Node 6 serves its status without credentials plugged in.
    let bare = node(replica(), secured(), secrets(SECRET, None));
    let bare_transport = status_rpc(&bare.state.status);
    let peers = [
        (2, other_transport.local_addr()),
        (4, older.local_addr()),
        (6, bare_transport.local_addr()),
    ];
    let _transport = attach_forwarder(&api.state, &peers);
    // Node 3 is a member without a known address; node 5 is marked dead.
    for member in [2, 3, 4, 5, 6] {
        crate::testing::register(&api.state.replica, member);
    }
    crate::testing::mark_dead(&api.state.replica, 5);

    let answer = send(&api, request("GET", "/v1/remotes", ROOT, "")).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let body = json(&answer);
    let nodes = &body["remotes"][0]["nodes"];
    assert_eq!(body["remotes"][0]["name"], "dr");
    assert_eq!(nodes.as_array().map(Vec::len), Some(6), "{body}");
    assert_eq!(nodes[0]["node"], 1);
    assert_eq!(nodes[0]["credential"], "readable");
    assert_eq!(nodes[0]["key_current"], true);
    assert_eq!(nodes[1]["node"], 2);
    assert_eq!(nodes[1]["credential"], "unreadable", "{body}");
    assert_eq!(nodes[1]["key_current"], false);
    assert_eq!(nodes[1]["credential_version"], 1);
    assert!(nodes[1]["error"].is_string(), "{body}");
    for (entry, node) in [(2, 3), (3, 4), (4, 5), (5, 6)] {
        assert_eq!(nodes[entry]["node"], node, "{body}");
        assert_eq!(nodes[entry]["credential"], "unknown", "{body}");
        assert_eq!(nodes[entry]["key_current"], Value::Null, "{body}");
        assert_eq!(nodes[entry]["credential_version"], Value::Null, "{body}");
    }
    assert_eq!(nodes[2]["error"], "no node RPC address is known for it");
    let older_error = nodes[3]["error"].as_str().expect("an error");
    assert!(older_error.contains("an older node"), "{older_error}");
    assert!(
        older_error.contains("unsupported rpc operation"),
        "{older_error}"
    );
    assert_eq!(nodes[4]["error"], "marked dead");
    assert_eq!(
        nodes[5]["error"],
        "it does not report its views of the remotes"
    );
    // Node 2 answered, but its replica does not hold dr-two.
    let two = &body["remotes"][1]["nodes"];
    assert_eq!(two[1]["credential"], "unknown", "{body}");
    assert_eq!(
        two[1]["error"],
        "its replica does not hold this remote (yet)"
    );
    let not_answering: Vec<&str> = body["not_answering"]
        .as_array()
        .expect("not_answering")
        .iter()
        .filter_map(|entry| entry["node"].as_str())
        .collect();
    assert_eq!(not_answering, ["3", "4", "5", "6"], "{body}");

    let one = send(&api, request("GET", "/v1/remotes/dr", ROOT, "")).await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.body);
    assert_eq!(json(&one)["nodes"], *nodes);
    let local_only = send(&api, request("GET", "/v1/remotes/dr?nodes=false", ROOT, "")).await;
    assert!(
        json(&local_only).get("nodes").is_none(),
        "{}",
        local_only.body
    );
    drop((other_transport, older, bare_transport));
}

#[tokio::test]
async fn a_remote_write_waits_until_every_live_member_applies_it() {
    use crate::testing::{attach_forwarder, loopback_rpc, status_rpc};

    let api = api();
    // Node 2 runs this release; node 4 an older one, which refuses to
    // report its command version.
    let current = node(replica(), secured(), secrets(SECRET, None));
    let current_transport = status_rpc(&current.state.status);
    let older = loopback_rpc(older_release());
    let peers = [(2, current_transport.local_addr()), (4, older.local_addr())];
    let _transport = attach_forwarder(&api.state, &peers);
    for member in [2, 4] {
        crate::testing::register(&api.state.replica, member);
    }
    let refused = create(&api, "dr").await;
    assert_eq!(
        refused.status,
        StatusCode::PRECONDITION_FAILED,
        "{}",
        refused.body
    );
    let error = refused.error();
    assert!(error.contains("command version 4"), "{error}");
    assert!(error.contains("unsupported rpc operation"), "{error}");
    let member_4 = crate::topology::member_id(4);
    let member_2 = crate::topology::member_id(2);
    assert!(error.contains(&format!("{member_4} (")), "{error}");
    assert!(!error.contains(&format!("{member_2} (")), "{error}");
    assert!(api.state.replica.view().metastore.remote("dr").is_none());
    // Marked dead, node 4 is not asked; every live member is current.
    crate::testing::mark_dead(&api.state.replica, 4);
    let accepted = create(&api, "dr").await;
    assert_eq!(accepted.status, StatusCode::CREATED, "{}", accepted.body);
    drop((current_transport, older));
}
