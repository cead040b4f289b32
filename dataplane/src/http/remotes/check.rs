//! What a node can tell about a remote from where it stands: whether it
//! opens the credential, whether its secret derives the cluster's key, and
//! the `/test` route's checks.
//!
//! The `/test` route runs the checks this node can make without talking to
//! the remote: the URL against the node's current settings, the credential
//! opening here, and the host resolving. The checks that need the outbound
//! client (TLS, the address guard, authentication and the target topic)
//! are reported as `skipped` until that client is wired in.

use std::time::Duration;

use narad_meta::{Metastore, Remote};
use narad_remotes::url as rules;
use serde_json::{Value, json};

use super::super::ApiState;
use crate::credentials::CredentialError;

/// The longest a `/test` waits for the host to resolve.
pub const RESOLVE_BUDGET: Duration = Duration::from_secs(5);

/// This node's view of `remote`'s credential: an entry of `nodes[]`.
pub(crate) fn local_node_view(state: &ApiState, metastore: &Metastore, remote: &Remote) -> Value {
    let node = state.replica.local_node();
    let (credential, error) = match credential_state(state, metastore, remote) {
        Ok(()) => ("readable", None),
        Err(CredentialError::NoSecret) => ("no_secret", None),
        Err(error) => ("unreadable", Some(error.to_string())),
    };
    let key_current = metastore
        .remote_key()
        .and_then(|key| state.credentials.current_key_id(key).ok())
        .is_some_and(|id| id == remote.password.key_id);
    let mut value = json!({
        "node": node,
        "credential": credential,
        "credential_version": remote.credential_version,
        "key_current": key_current,
    });
    if let Some(error) = error {
        value["error"] = json!(error);
    }
    value
}

fn credential_state(
    state: &ApiState,
    metastore: &Metastore,
    remote: &Remote,
) -> Result<(), CredentialError> {
    let key = metastore.remote_key().ok_or(CredentialError::BadSalt)?;
    state.credentials.open(key, remote).map(drop)
}

/// The `key` block of `GET /v1/remotes`: the cluster's key, whether this
/// node's secret derives it, and how many credentials are still sealed
/// under an older key.
pub(crate) fn key_json(state: &ApiState, metastore: &Metastore) -> Value {
    let Some(key) = metastore.remote_key() else {
        return Value::Null;
    };
    let node_key_id = state.credentials.current_key_id(key).ok();
    let on_old_key = metastore
        .remotes()
        .filter(|remote| remote.password.key_id != key.key_id)
        .count();
    json!({
        "version": key.version,
        "key_id": key.key_id,
        "node_key_id": node_key_id,
        "node_current": node_key_id.as_deref() == Some(key.key_id.as_str()),
        "node_previous_secret": state.credentials.has_previous_secret(),
        "remotes_on_older_keys": on_old_key,
    })
}

fn outcome(
    name: &str,
    result: Result<String, (&'static str, String)>,
) -> (Value, Option<&'static str>) {
    match result {
        Ok(detail) => (
            json!({ "name": name, "result": "pass", "detail": detail }),
            None,
        ),
        Err((class, detail)) => (
            json!({ "name": name, "result": "fail", "class": class, "detail": detail }),
            Some(class),
        ),
    }
}

fn skipped(name: &str) -> Value {
    json!({
        "name": name,
        "result": "skipped",
        "detail": "needs the outbound client to the remote, not wired into this node yet",
    })
}

/// The `/test` report: `{remote,result,class,checks[]}`. `result` is
/// `pass` when no check failed; `class` is the first failure's link state
/// (`destination_refused`, `credential_unreadable`, `unavailable`), `null`
/// on a pass.
pub(crate) async fn run(
    state: &ApiState,
    metastore: &Metastore,
    remote: &Remote,
    topic: &str,
    source: Option<&str>,
) -> Value {
    let mut checks = Vec::new();
    let mut class = None;
    let url = rules::parse_url(&remote.url, &state.config.remotes.url_policy);
    let (check, failed) = outcome(
        "url",
        url.as_ref()
            .map(|url| {
                format!(
                    "{} meets remotes.allowed_hosts and remotes.allowed_ports",
                    url.text
                )
            })
            .map_err(|error| ("destination_refused", error.to_string())),
    );
    checks.push(check);
    class = class.or(failed);
    let (check, failed) = outcome(
        "credential",
        credential_state(state, metastore, remote)
            .map(|()| format!("opens on node {}", state.replica.local_node()))
            .map_err(|error| ("credential_unreadable", error.to_string())),
    );
    checks.push(check);
    class = class.or(failed);
    if let Ok(url) = &url {
        let host = url
            .host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let resolved = tokio::time::timeout(
            RESOLVE_BUDGET,
            tokio::net::lookup_host((host.as_str(), url.port)),
        )
        .await;
        let result = match resolved {
            Ok(Ok(addresses)) => {
                let addresses: Vec<String> =
                    addresses.map(|address| address.ip().to_string()).collect();
                Ok(format!("{host} resolves to {}", addresses.join(", ")))
            }
            Ok(Err(error)) => Err(("unavailable", format!("{host} does not resolve: {error}"))),
            Err(_) => Err((
                "unavailable",
                format!("{host} did not resolve within {RESOLVE_BUDGET:?}"),
            )),
        };
        let (check, failed) = outcome("dns", result);
        checks.push(check);
        class = class.or(failed);
    }
    for name in ["address_guard", "tls", "auth", "target_topic"] {
        checks.push(skipped(name));
    }
    json!({
        "remote": remote.name,
        "topic": topic,
        "source": source,
        "result": if class.is_none() { "pass" } else { "fail" },
        "class": class,
        "checks": checks,
    })
}
