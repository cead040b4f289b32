//! Remote routes (spec §1.10): add, list, describe, change and delete the
//! other Narad clusters remote children ship to; test one; re-encrypt every
//! credential under the current cluster secret.
//!
//! Admin only, and only with security on (`403 remotes require
//! security`). Every answer carries `Cache-Control: no-store`. Bodies are
//! at most 128 KiB (`413`). The password is sealed here, on the node that
//! received it ([`crate::credentials`]); only the sealed bytes are
//! proposed. Writes that carry a password need `remotes.api_hop_encrypted`
//! (the operator's word that the hop to this node is encrypted; `412`
//! otherwise). Remote writes are limited per node ([`write_rate`]; `429`
//! with `Retry-After`), and wait until every member applies them
//! ([`upgrade_gate`]; `412`).

pub mod check;
pub mod gauges;
mod nodes;
pub mod settings;
pub(crate) mod upgrade_gate;
mod wire;
pub mod write_rate;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use zeroize::Zeroizing;

use narad_meta::{
    Actor, Command, CreateRemote, DeleteRemote, Metastore, MetastoreError, Remote, RemoteId,
    RemoteLimits, ResealRemotes, UpdateRemote,
};
use narad_remotes::seal::Binding;
use narad_remotes::url::{self as rules, RuleError};

use super::body::read_limited;
use super::cluster::query_flag;
use super::error::ApiError;
use super::topics::{json_response, refused};
use super::{ApiState, authenticate};
use crate::admin::actor_of;
use crate::credentials::{CredentialError, SealedFor};
pub use settings::RemotesConfig;
use wire::{CreateBody, PatchBody, TestBody, limits_over, remote_json};
use write_rate::Decision;

/// Remote request bodies are at most this large; over it answers `413`.
pub const REMOTE_BODY_BYTES_MAX: usize = 128 * 1024;

/// Marks an answer of a remote route `Cache-Control: no-store` (spec
/// §1.1), errors included; the router maps every remote route's answers
/// through it.
pub(crate) async fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Authenticates; refuses with security off; requires an admin.
async fn remote_admin(
    state: &ApiState,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Actor, ApiError> {
    let user = authenticate(state, method, headers).await?;
    if !state.config.security {
        return Err(refused(MetastoreError::RemotesRequireSecurity));
    }
    let actor = actor_of(user.as_deref());
    state
        .replica
        .view()
        .metastore
        .require_admin(&actor)
        .map_err(refused)?;
    Ok(actor)
}

/// A JSON body of at most [`REMOTE_BODY_BYTES_MAX`] bytes, the raw bytes
/// wiped once parsed (they may hold a password).
async fn read_json<T: for<'de> Deserialize<'de>>(
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    let bytes = read_limited(headers, body, REMOTE_BODY_BYTES_MAX, None).await?;
    let raw = Zeroizing::new(Vec::from(bytes));
    serde_json::from_slice(&raw)
        .map_err(|error| ApiError::bad_request(format!("invalid json: {error}")))
}

fn rule_error(error: RuleError) -> ApiError {
    ApiError::bad_request(error.to_string())
}

fn credential_error(error: CredentialError) -> ApiError {
    let status = match error {
        CredentialError::KeyMismatch { .. } => StatusCode::CONFLICT,
        CredentialError::NoSecret => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, error.to_string())
}

/// `412` unless the operator attested that the hop to this node is
/// encrypted: a password must not cross plain HTTP.
fn require_encrypted_hop(state: &ApiState) -> Result<(), ApiError> {
    if state.config.remotes.api_hop_encrypted {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::PRECONDITION_FAILED,
        "remotes.api_hop_encrypted is false: a remote's password must reach this node over an \
         encrypted hop (TLS in front of it); set remotes.api_hop_encrypted=true once it does",
    ))
}

/// Counts a remote write against this node's rate, or `429`.
fn admit_write(state: &ApiState) -> Result<(), ApiError> {
    let now_ms = state.clock().now_ms();
    match state.remote_writes.lock().admit(now_ms) {
        Decision::Admit => Ok(()),
        Decision::Refuse {
            retry_after_seconds,
        } => {
            let mut error = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "too many remote writes: at most {} a minute on this node",
                    write_rate::WRITES_PER_WINDOW
                ),
            );
            error.retry_after_seconds = Some(retry_after_seconds);
            Err(error)
        }
    }
}

fn username_of(actor: &Actor) -> String {
    match actor {
        Actor::User(name) => name.clone(),
        Actor::SecurityOff => String::new(),
    }
}

fn known_remote(metastore: &Metastore, name: &str) -> Result<Remote, ApiError> {
    metastore
        .remote(name)
        .cloned()
        .ok_or_else(|| refused(MetastoreError::RemoteNotFound))
}

/// Checks `ca_pem` and keeps it as given.
fn checked_ca(ca_pem: Option<String>) -> Result<Option<String>, ApiError> {
    if let Some(pem) = &ca_pem {
        rules::parse_ca_pem(pem).map_err(rule_error)?;
    }
    Ok(ca_pem)
}

/// `password` sealed now by `actor` for remote `id` at
/// `credential_version`, under the cluster's key (or a first one).
fn seal(
    state: &ApiState,
    metastore: &Metastore,
    id: &RemoteId,
    credential_version: u64,
    password: &str,
    actor: &Actor,
) -> Result<SealedFor, ApiError> {
    let binding = Binding {
        remote_id: id.as_str(),
        credential_version,
    };
    let set = (state.clock().unix_ms(), username_of(actor));
    state
        .credentials
        .seal(
            metastore.remote_key(),
            binding,
            password.as_bytes(),
            (set.0, &set.1),
        )
        .map_err(credential_error)
}

/// `POST /v1/remotes` → `201` Remote.
pub(crate) async fn create(
    State(state): State<Arc<ApiState>>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let actor = remote_admin(&state, &method, &headers).await?;
    let request: CreateBody = read_json(&headers, body).await?;
    let password = Zeroizing::new(request.password);
    rules::check_name(&request.name).map_err(rule_error)?;
    let url = settings::checked_url(
        &state.config.remotes.url_policy,
        &state.metrics,
        &request.name,
        &request.url,
    )
    .map_err(rule_error)?;
    rules::check_username(&request.username).map_err(rule_error)?;
    rules::check_password(password.as_bytes()).map_err(rule_error)?;
    let ca_pem = checked_ca(request.ca_pem)?;
    let limits = limits_over(RemoteLimits::default(), request.limits.unwrap_or_default())
        .map_err(rule_error)?;
    require_encrypted_hop(&state)?;
    let metastore = Arc::clone(&state.replica.view().metastore);
    if metastore.remote(&request.name).is_some() {
        return Err(refused(MetastoreError::RemoteExists));
    }
    admit_write(&state)?;
    let id = RemoteId::mint(&mut rand::rng());
    let sealed = seal(&state, &metastore, &id, 1, &password, &actor)?;
    let (created_at_ms, created_by) = (sealed.password.set_at_ms, sealed.password.set_by.clone());
    let remote = Remote {
        name: request.name.clone(),
        id,
        url: url.text,
        username: request.username,
        password: sealed.password,
        credential_version: 1,
        ca_pem,
        limits,
        revision: 1,
        created_at_ms,
        created_by,
    };
    let create = CreateRemote {
        actor,
        remote,
        key: sealed.key,
    };
    upgrade_gate::propose(&state, Command::CreateRemote(create)).await?;
    describe_answer(&state, &request.name, StatusCode::CREATED)
}

/// The Remote object of `name` as the replica holds it now, with this
/// node's view of its credential as `nodes[]` (an answer to a write: the
/// other nodes may not have applied it yet).
fn describe_answer(state: &ApiState, name: &str, status: StatusCode) -> Result<Response, ApiError> {
    let view = state.replica.view();
    let remote = known_remote(&view.metastore, name)?;
    let links = view.metastore.links_of_remote(name);
    let nodes = vec![check::local_node_view(state, &view.metastore, &remote)];
    Ok(json_response(
        status,
        &remote_json(&remote, &links, Some(nodes)),
    ))
}

/// Whether a read shows `nodes[]`: unless the query says `nodes=false`
/// (or `0`).
///
/// # Errors
/// `400` when `nodes` is given twice.
fn wants_nodes(query: Option<&str>) -> Result<bool, ApiError> {
    Ok(!matches!(
        super::cluster::query_value(query, "nodes")?.as_deref(),
        Some(b"false" | b"0")
    ))
}

/// `GET /v1/remotes[?nodes=false]` → every remote in name order, with
/// every data node's view of its credential, the node's allowlist, the
/// cluster key, links whose remote is gone and the members whose views
/// could not be had.
pub(crate) async fn list(
    State(state): State<Arc<ApiState>>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    remote_admin(&state, &method, &headers).await?;
    let nodes = wants_nodes(query.as_deref())?;
    let view = state.replica.view();
    let metastore = &*view.metastore;
    let views = if nodes {
        Some(nodes::gather(&state, metastore).await)
    } else {
        None
    };
    let remotes: Vec<Value> = metastore
        .remotes()
        .map(|remote| {
            let links = metastore.links_of_remote(&remote.name);
            let nodes = views.as_ref().map(|views| views.of(&remote.name));
            remote_json(remote, &links, nodes)
        })
        .collect();
    let lingering: Vec<Value> = metastore
        .remote_links()
        .filter(|(_, link)| {
            metastore
                .remote(&link.remote)
                .is_none_or(|remote| remote.id != link.remote_id)
        })
        .map(|(child, link)| json!({ "child": child, "remote": link.remote }))
        .collect();
    let body = json!({
        "remotes": remotes,
        "allowlist": state.config.remotes.allowlist_json(),
        "key": check::key_json(&state, metastore),
        "lingering": lingering,
        "not_answering": views.map_or_else(|| json!([]), |views| views.not_answering()),
    });
    Ok(json_response(StatusCode::OK, &body))
}

/// `GET /v1/remotes/{name}[?nodes=false]`: the remote with every data
/// node's view of its credential.
pub(crate) async fn describe(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    remote_admin(&state, &method, &headers).await?;
    let nodes = wants_nodes(query.as_deref())?;
    let view = state.replica.view();
    let remote = known_remote(&view.metastore, &name)?;
    let links = view.metastore.links_of_remote(&name);
    let nodes = if nodes {
        Some(nodes::gather(&state, &view.metastore).await.of(&name))
    } else {
        None
    };
    Ok(json_response(
        StatusCode::OK,
        &remote_json(&remote, &links, nodes),
    ))
}

/// `PATCH /v1/remotes/{name}` → `200` Remote. A new url, username or CA
/// needs the password again; a new password is sealed for the next
/// credential version and names the revision it was read at, so two
/// concurrent changes cannot both store a seal for the same version.
pub(crate) async fn update(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let actor = remote_admin(&state, &method, &headers).await?;
    let request: PatchBody = read_json(&headers, body).await?;
    let password = request.password.map(Zeroizing::new);
    let metastore = Arc::clone(&state.replica.view().metastore);
    let remote = known_remote(&metastore, &name)?;
    let url = request
        .url
        .as_deref()
        .map(|url| {
            settings::checked_url(&state.config.remotes.url_policy, &state.metrics, &name, url)
        })
        .transpose()
        .map_err(rule_error)?
        .map(|url| url.text);
    if let Some(username) = &request.username {
        rules::check_username(username).map_err(rule_error)?;
    }
    if let Some(password) = &password {
        rules::check_password(password.as_bytes()).map_err(rule_error)?;
    }
    let ca_pem = request.ca_pem.map(checked_ca).transpose()?;
    let limits = request
        .limits
        .map(|limits| limits_over(remote.limits, limits))
        .transpose()
        .map_err(rule_error)?;
    let opens_anew = url.as_ref().is_some_and(|url| *url != remote.url)
        || request
            .username
            .as_ref()
            .is_some_and(|username| *username != remote.username)
        || ca_pem.as_ref().is_some_and(|ca| *ca != remote.ca_pem);
    if opens_anew && password.is_none() {
        return Err(refused(MetastoreError::RemotePasswordRequired));
    }
    if password.is_some() {
        require_encrypted_hop(&state)?;
    }
    admit_write(&state)?;
    let mut expected_revision = request.revision;
    let (sealed, key) = match &password {
        Some(password) => {
            let version = remote.credential_version + 1;
            let sealed = seal(&state, &metastore, &remote.id, version, password, &actor)?;
            expected_revision = expected_revision.or(Some(remote.revision));
            (Some(sealed.password), Some(sealed.key))
        }
        None => (None, None),
    };
    let update = UpdateRemote {
        actor,
        name: name.clone(),
        expected_revision,
        url,
        username: request.username,
        password: sealed,
        key,
        ca_pem,
        limits,
    };
    upgrade_gate::propose(&state, Command::UpdateRemote(update)).await?;
    describe_answer(&state, &name, StatusCode::OK)
}

/// `DELETE /v1/remotes/{name}[?force=true]` → `204`; `409` with `links`
/// while remote children ship to it, unless forced (the links then report
/// `remote_missing`).
pub(crate) async fn delete(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let actor = remote_admin(&state, &method, &headers).await?;
    let force = query_flag(query.as_deref(), "force")?;
    let metastore = Arc::clone(&state.replica.view().metastore);
    known_remote(&metastore, &name)?;
    let links = metastore.links_of_remote(&name);
    if !links.is_empty() && !force {
        let error = MetastoreError::RemoteInUse {
            links: links.clone(),
        };
        return Ok(json_response(
            StatusCode::CONFLICT,
            &json!({ "error": error.to_string(), "links": links }),
        ));
    }
    admit_write(&state)?;
    let delete = DeleteRemote { actor, name, force };
    upgrade_gate::propose(&state, Command::DeleteRemote(delete)).await?;
    state
        .credentials
        .forget_deleted(&state.replica.view().metastore);
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v1/remotes/{name}/test` `{"topic","source"?}` → `200`
/// `{remote,result,class,checks[]}` ([`check`]).
pub(crate) async fn test(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    remote_admin(&state, &method, &headers).await?;
    let request: TestBody = read_json(&headers, body).await?;
    let metastore = Arc::clone(&state.replica.view().metastore);
    let remote = known_remote(&metastore, &name)?;
    let report = check::run(
        &state,
        &metastore,
        &remote,
        &request.topic,
        request.source.as_deref(),
    )
    .await;
    Ok(json_response(StatusCode::OK, &report))
}

/// `POST /v1/cluster/reencrypt-remotes` → `200`
/// `{key_version,reencrypted,already_current,failed[]}`: every password
/// this node opens (with its current secret, or the previous one) is
/// sealed again under the current secret's key in one command. A remote
/// that does not open is listed in `failed` and keeps its seal.
pub(crate) async fn reencrypt(
    State(state): State<Arc<ApiState>>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let actor = remote_admin(&state, &method, &headers).await?;
    let metastore = Arc::clone(&state.replica.view().metastore);
    let plan = state
        .credentials
        .plan_reencrypt(&metastore, state.clock().unix_ms())
        .map_err(credential_error)?;
    let failed: Vec<Value> = plan
        .failed
        .iter()
        .map(|(remote, error)| json!({ "remote": remote, "error": error }))
        .collect();
    let key_changes = plan.key.as_ref().is_some_and(|key| {
        !metastore
            .remote_key()
            .is_some_and(|current| current.same_key(key))
    });
    if key_changes && plan.resealed.is_empty() && !plan.failed.is_empty() {
        // Moving the cluster key now would strand every credential under
        // a key this node cannot open.
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no remote password opened on this node: start it with the old secret in \
             NARAD_CLUSTER_SECRET_PREVIOUS, then re-encrypt",
        ));
    }
    if key_changes || !plan.resealed.is_empty() {
        admit_write(&state)?;
    }
    let key_version = plan.key.as_ref().map_or(0, |key| key.version);
    let reencrypted = plan.resealed.len();
    if let Some(key) = plan.key.filter(|_| key_changes || reencrypted > 0) {
        let reseal = ResealRemotes {
            actor,
            key,
            passwords: plan.resealed,
        };
        upgrade_gate::propose(&state, Command::ResealRemotes(reseal)).await?;
    }
    let body = json!({
        "key_version": key_version,
        "reencrypted": reencrypted,
        "already_current": plan.already_current.len(),
        "failed": failed,
    });
    Ok(json_response(StatusCode::OK, &body))
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
