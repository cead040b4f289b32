//! What a node can tell about a remote from where it stands: whether it
//! opens the credential, whether its secret derives the cluster's key, and
//! the `/test` route's checks.
//!
//! The `/test` route checks, in order, what this node decides alone (the
//! URL under its current settings, the credential opening here, the
//! outbound client being built with its address guard and pinned CA), then
//! the target itself through `narad_remotes::check`.

use std::sync::Arc;

use narad_meta::{Metastore, Remote};
use narad_protocol::RemoteView;
use narad_remotes::check;
use narad_remotes::client::RemoteClient;
use narad_remotes::state::LinkState;
use serde_json::{Value, json};

use super::super::ApiState;
use super::settings::checked_url;
use crate::credentials::client_of;
use crate::topology::NodeId;

/// This node's view of `remote`'s credential: an entry of `nodes[]`.
pub(crate) fn local_node_view(state: &ApiState, metastore: &Metastore, remote: &Remote) -> Value {
    let view = state.credentials.view(metastore, remote);
    node_view_json(state.replica.local_node(), &view)
}

/// Node `node`'s `view` of a remote's credential as `nodes[]` shows it:
/// `{"node","credential","credential_version","key_current"}` and the
/// `error` when it does not open.
pub(crate) fn node_view_json(node: NodeId, view: &RemoteView) -> Value {
    let mut value = json!({
        "node": node,
        "credential": view.credential.as_str(),
        "credential_version": view.credential_version,
        "key_current": view.key_current,
    });
    if let Some(error) = &view.error {
        value["error"] = json!(error);
    }
    value
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
        "created_at": key.created_at_ms.map(|ms| ms / 1000),
        "node_key_id": node_key_id,
        "node_current": node_key_id.as_deref() == Some(key.key_id.as_str()),
        "node_previous_secret": state.credentials.has_previous_secret(),
        "remotes_on_older_keys": on_old_key,
    })
}

/// One check as the report shows it.
fn check_json(name: &str, pass: bool, class: Option<LinkState>, detail: &str) -> Value {
    let mut value = json!({
        "name": name,
        "result": if pass { "pass" } else { "fail" },
        "detail": detail,
    });
    if let Some(class) = class {
        value["class"] = json!(class.as_str());
    }
    value
}

/// The checks made on this node before anything is sent: the URL under
/// this node's settings, the credential opening here, the client being
/// built. The client when all pass, else the failure's class.
fn local_checks(
    state: &ApiState,
    metastore: &Metastore,
    remote: &Remote,
    checks: &mut Vec<Value>,
) -> Result<RemoteClient, LinkState> {
    let policy = &state.config.remotes.url_policy;
    if let Err(error) = checked_url(policy, &state.metrics, &remote.name, &remote.url) {
        let class = LinkState::DestinationRefused;
        checks.push(check_json("url", false, Some(class), &error.to_string()));
        return Err(class);
    }
    checks.push(check_json(
        "url",
        true,
        None,
        "meets remotes.allowed_hosts and remotes.allowed_ports",
    ));
    let node = state.replica.local_node();
    let client = client_of(
        metastore,
        &state.credentials,
        remote,
        state.config.remotes.guard(),
        Arc::clone(state.clock()),
    );
    match client {
        Ok(client) => {
            let detail = format!("opens on node {node}");
            checks.push(check_json("credential", true, None, &detail));
            Ok(client)
        }
        Err(failure) => {
            if failure.step != "credential" {
                let detail = format!("opens on node {node}");
                checks.push(check_json("credential", true, None, &detail));
            }
            let class = failure.state;
            checks.push(check_json(
                failure.step,
                false,
                Some(class),
                &failure.detail,
            ));
            Err(class)
        }
    }
}

/// The `/test` report: `{remote,result,class,checks[]}`, plus what the
/// target takes (`capabilities`) and its topic's id. `result` is `pass`
/// when every check passed; `class` is the first failure's link state,
/// `null` on a pass. The checks on the target are `narad_remotes::check`'s
/// (reach, auth, topic, batch produce, idempotency keys, zstd); none can
/// store anything there.
pub(crate) async fn run(
    state: &ApiState,
    metastore: &Metastore,
    remote: &Remote,
    topic: &str,
    source: Option<&str>,
) -> Value {
    let mut checks = Vec::new();
    let mut body = json!({
        "remote": remote.name,
        "topic": topic,
        "source": source,
    });
    let client = match local_checks(state, metastore, remote, &mut checks) {
        Ok(client) => client,
        Err(class) => {
            body["result"] = json!("fail");
            body["class"] = json!(class.as_str());
            body["checks"] = Value::Array(checks);
            return body;
        }
    };
    let report = check::check(&client, topic).await;
    for check in &report.checks {
        checks.push(check_json(
            check.name,
            check.pass,
            check.class,
            &check.detail,
        ));
    }
    let capabilities = &report.capabilities;
    body["result"] = json!(if report.pass() { "pass" } else { "fail" });
    body["class"] = json!(report.class().map(LinkState::as_str));
    body["checks"] = Value::Array(checks);
    body["capabilities"] = json!({
        "max_messages": capabilities.max_messages,
        "idempotency_keys": capabilities.idempotency_keys,
        "zstd": capabilities.zstd,
    });
    body["target_id"] = json!(report.target_id);
    body
}
