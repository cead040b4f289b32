//! Remote children on the data node (spec §1.4 and §4, v3.2): the remote
//! variant of attach (and its dry run), pause and skip (resume is
//! [`super::remote_resume`]'s), the
//! `remote` object of a stub's record and of the children listing, the
//! refusal of a produce, consume or ack on a stub, and the unshipped-records
//! check a detach or delete runs.
//!
//! Every change is an admin's, with security on; the metastore holds the
//! rules (limits, retention, one link per remote topic) and the node maps
//! its refusals. The node adds what needs it: the start offsets of `from`,
//! the target's checks (its [`RemoteProbe`](crate::remote_children::RemoteProbe)),
//! and the rate limits ([`RemoteChildLimits`](crate::remote_children::RemoteChildLimits)).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use narad_meta::{
    Actor, AttachEpoch, AttachRemoteChild, Command, IncarnationId, MetastoreError,
    PauseRemoteChild, RemoteFrom, RemoteLink, SkipRemoteRecord, limits::REMOTE_LANES_MAX, rules,
};

use super::body::read_limited;
use super::children::{OwnerCursor, Positions, owner_cursor, positions};
use super::error::ApiError;
use super::remotes::upgrade_gate;
use super::topics::{StartFigure, json_response, known_topic, record, refused, start_offsets};
use super::{ApiState, authenticate};
use crate::admin::actor_of;
use crate::metadata::{TopicMeta, User};
use crate::remote_children::{CheckReport, cursor_times, link_state, skip_allowed};

/// A remote-children request body (pause, resume, skip) is at most this
/// large; over it answers `413` (spec §1.1).
pub(super) const REMOTE_BODY_BYTES_MAX: usize = 128 * 1024;

/// Below this parent retention an attach warns (spec §1.4): a remote that
/// is down over a long weekend loses records.
pub(super) const RETENTION_WARNING_MS: u64 = 72 * 3_600_000;

/// The remote fields of an attach body.
#[derive(Debug, Default)]
pub(super) struct RemoteAttach {
    pub(super) remote: String,
    pub(super) remote_topic: Option<String>,
    pub(super) from: Option<String>,
    pub(super) lanes: Option<i64>,
    pub(super) dry_run: bool,
}

/// Adds `Cache-Control: no-store` (spec §1.1: remote routes).
pub(super) fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// [`no_store`] as a response layer of the remote routes.
pub(super) async fn no_store_layer(response: Response) -> Response {
    no_store(response)
}

/// `403` with security off, else the metastore's refusal of a non-admin;
/// the acting user otherwise.
fn remote_admin(state: &ApiState, user: Option<&User>) -> Result<Actor, ApiError> {
    let Some(user) = user else {
        return Err(refused(MetastoreError::RemotesRequireSecurity));
    };
    let actor = actor_of(Some(user));
    state
        .replica
        .view()
        .metastore
        .require_admin(&actor)
        .map_err(refused)?;
    Ok(actor)
}

/// Takes one remote-child write of this node's minute.
///
/// # Errors
/// `429` with `Retry-After` past [`WRITES_PER_MINUTE`](crate::remote_children::WRITES_PER_MINUTE).
pub(super) fn take_write(state: &ApiState) -> Result<(), ApiError> {
    state
        .remote_limits
        .take_write(state.clock().now_ms())
        .map_err(|seconds| {
            too_many(
                seconds,
                "too many remote-child changes on this node (at most 60 a minute); retry later",
            )
        })
}

fn too_many(seconds: u32, message: &str) -> ApiError {
    let mut error = ApiError::new(StatusCode::TOO_MANY_REQUESTS, message);
    error.retry_after_seconds = Some(seconds);
    error
}

/// The `remote` object of a stub's record.
pub(super) fn remote_json(link: &RemoteLink) -> Value {
    let mut value = json!({
        "name": link.remote,
        "topic": link.remote_topic,
        "lanes": link.lanes,
        "from": link.from.name(),
        "paused": link.paused.is_some(),
        "created_at_ms": link.created_at_ms,
    });
    if let Some(pause) = &link.paused {
        value["paused_reason"] = json!(pause.reason);
        value["paused_at_ms"] = json!(pause.at_ms);
        value["paused_by"] = json!(pause.by);
    }
    if let Some(target_id) = &link.target_id {
        value["target_id"] = json!(target_id);
    }
    if !link.skip.is_empty() {
        let skip: serde_json::Map<String, Value> = link
            .skip
            .iter()
            .map(|(partition, offsets)| (partition.to_string(), json!(offsets)))
            .collect();
        value["skip"] = Value::Object(skip);
    }
    value
}

/// `409` when `topic` is a remote child's stub: it takes no consume and no
/// ack (spec §1.6, §1.7).
pub(super) fn refuse_stub(state: &ApiState, topic: &str) -> Result<(), ApiError> {
    match state
        .replica
        .topic_meta(topic)
        .and_then(|meta| meta.remote.clone())
    {
        Some(link) => Err(refused(MetastoreError::RemoteStub {
            name: topic.to_owned(),
            remote: link.remote.clone(),
        })),
        None => Ok(()),
    }
}

/// The attach with `remote` (spec §1.4, v3.2): `201` with the stub's
/// record and `warnings`, or for a dry run `200` with the report. Every
/// answer carries `Cache-Control: no-store`.
pub(super) async fn attach(
    state: &Arc<ApiState>,
    user: Option<&User>,
    parent_name: &str,
    child_name: String,
    request: RemoteAttach,
) -> Response {
    match attach_answer(state, user, parent_name, child_name, request).await {
        Ok(response) => no_store(response),
        Err(error) => no_store(error.into_response()),
    }
}

async fn attach_answer(
    state: &Arc<ApiState>,
    user: Option<&User>,
    parent_name: &str,
    child_name: String,
    request: RemoteAttach,
) -> Result<Response, ApiError> {
    let actor = remote_admin(state, user)?;
    rules::check_new_topic_name(&child_name).map_err(refused)?;
    let lanes = match request.lanes {
        None => 1,
        Some(lanes) => u8::try_from(lanes)
            .ok()
            .filter(|lanes| (1..=REMOTE_LANES_MAX).contains(lanes))
            .ok_or_else(|| refused(MetastoreError::RemoteLanesInvalid))?,
    };
    let from = match request.from.as_deref() {
        None => RemoteFrom::Attach,
        Some(name) => RemoteFrom::from_name(name).ok_or_else(|| {
            ApiError::bad_request(format!(
                "invalid from {name:?}: want attach, unconsumed or earliest"
            ))
        })?,
    };
    let remote_topic = request
        .remote_topic
        .unwrap_or_else(|| parent_name.to_owned());
    rules::check_new_topic_name(&remote_topic)
        .map_err(|error| ApiError::bad_request(format!("invalid remote_topic: {error}")))?;
    let parent = known_topic(state, parent_name)?;
    if state.replica.topic_meta(&child_name).is_some() {
        return Err(refused(MetastoreError::TopicExists));
    }
    let remote = state
        .replica
        .view()
        .metastore
        .remote(&request.remote)
        .cloned()
        .ok_or_else(|| refused(MetastoreError::RemoteNotFound))?;
    if !request.dry_run {
        take_write(state)?;
    }
    let attach_offsets = start_offsets(state, &parent, start_figure(from)).await?;
    let report = state.remote_probe().check(&remote, &remote_topic).await;
    if report
        .checks
        .iter()
        .any(|check| check.outcome != crate::remote_children::CheckOutcome::Skipped)
    {
        state
            .remote_limits
            .take_remote_check(&remote.name, state.clock().now_ms())
            .map_err(|seconds| {
                too_many(
                    seconds,
                    "this remote was checked less than 5 s ago; retry later",
                )
            })?;
    }
    let warnings = warnings(&parent, &report);
    if request.dry_run {
        let body = json!({
            "attach_offsets": attach_offsets,
            "checks": report.checks,
            "warnings": warnings,
            "capabilities": report.capabilities,
        });
        return Ok(json_response(StatusCode::OK, &body));
    }
    if let Some(failed) = report.failure() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "remote {:?} failed the {} check ({}): {}",
                remote.name,
                failed.name,
                failed.state.as_deref().unwrap_or("unknown"),
                failed.detail
            ),
        ));
    }
    let attach = AttachRemoteChild {
        actor,
        parent: parent_name.to_owned(),
        parent_id: parent.id.clone(),
        child: child_name.clone(),
        child_id: IncarnationId::mint(&mut rand::rng()),
        attach_epoch: AttachEpoch::mint(&mut rand::rng()),
        attach_offsets,
        link: RemoteLink {
            remote: remote.name.clone(),
            remote_id: remote.id.clone(),
            remote_topic,
            target_id: report.target_id.clone(),
            lanes,
            from,
            paused: None,
            skip: Default::default(),
            created_at_ms: state.clock().unix_ms(),
        },
    };
    upgrade_gate::propose(state, Command::AttachRemoteChild(attach)).await?;
    let stub = known_topic(state, &child_name)?;
    let mut body = record(&stub);
    body["warnings"] = json!(warnings);
    Ok(json_response(StatusCode::CREATED, &body))
}

/// What each parent partition is asked for a link shipping `from`.
fn start_figure(from: RemoteFrom) -> StartFigure {
    match from {
        RemoteFrom::Attach => StartFigure::HighWatermark,
        RemoteFrom::Unconsumed => StartFigure::ConsumeFrontier,
        RemoteFrom::Earliest => StartFigure::OldestOffset,
    }
}

/// An attach's warnings: a parent retention under 72 h, and each check
/// that did not run.
fn warnings(parent: &TopicMeta, report: &CheckReport) -> Vec<String> {
    let mut warnings = Vec::new();
    if parent.retention_ms != 0 && parent.retention_ms < RETENTION_WARNING_MS {
        warnings.push(format!(
            "parent {:?} keeps records {} h; a remote unreachable for longer loses records (72 h or more recommended)",
            parent.name,
            parent.retention_ms / 3_600_000
        ));
    }
    for check in &report.checks {
        if check.outcome == crate::remote_children::CheckOutcome::Skipped {
            warnings.push(format!("check {} skipped: {}", check.name, check.detail));
        }
    }
    warnings
}

/// A remote child's lag: each parent partition's high watermark less its
/// cursor's next offset, or less the link's start offset where no cursor
/// reported (an upper bound: the cursor is at least there). Complete when
/// every partition's owner reported its high watermark.
pub(super) fn unshipped(positions: &[Option<Positions>], stub: &TopicMeta) -> (u64, bool) {
    let starts = stub
        .parent
        .as_ref()
        .map(|link| link.attach_offsets.as_slice())
        .unwrap_or_default();
    let mut lag = (0u64, true);
    for (partition, reported) in positions.iter().enumerate() {
        let Some(reported) = reported else {
            lag.1 = false;
            continue;
        };
        let next = reported
            .cursors
            .get(&*stub.name)
            .copied()
            .or_else(|| starts.get(partition).copied())
            .unwrap_or(0);
        lag.0 += reported.high_watermark.saturating_sub(next);
    }
    lag
}

/// The unshipped-records check of a detach or delete that removes the
/// stubs `stubs` of `parent` (spec §1.3): nothing when `force`; else `429`
/// when the parent was checked less than 10 s ago, and the `409` answer
/// while some record is unshipped or some owner did not report.
pub(super) async fn check_unshipped(
    state: &ApiState,
    parent: &TopicMeta,
    stubs: &[Arc<TopicMeta>],
    force: bool,
) -> Result<Option<Response>, ApiError> {
    if force || stubs.is_empty() {
        return Ok(None);
    }
    state
        .remote_limits
        .take_unshipped_check(&parent.name, state.clock().now_ms())
        .map_err(|seconds| {
            too_many(
                seconds,
                "unshipped records of this parent were checked less than 10 s ago; retry later",
            )
        })?;
    let positions = positions(state, parent).await;
    let (mut messages, mut complete) = (0, true);
    for stub in stubs {
        let (lag, reported) = unshipped(&positions, stub);
        messages += lag;
        complete &= reported;
    }
    if messages == 0 && complete {
        return Ok(None);
    }
    let body = json!({
        "error": format!(
            "remote children of {:?} have records not shipped yet; wait for them, or pass force=true to lose them",
            parent.name
        ),
        "lag_messages": messages,
        "lag_complete": complete,
        "dispatch_backlog": state.status.dispatch_backlog(),
    });
    Ok(Some(json_response(StatusCode::CONFLICT, &body)))
}

/// The `force` query parameter of a detach or delete: `true`, `false` or
/// absent (`false`).
///
/// # Errors
/// `400` for any other value.
pub(super) fn force_param(query: &str) -> Result<bool, ApiError> {
    let mut force = false;
    for param in super::query::params(query) {
        if param.name.as_slice() == b"force" {
            force = match param.value.as_slice() {
                b"true" => true,
                b"false" => false,
                _ => return Err(ApiError::bad_request("invalid force: want true or false")),
            };
        }
    }
    Ok(force)
}

/// The stub `child` under `parent`, for pause, resume or skip by an admin.
pub(super) async fn managed_stub(
    state: &ApiState,
    method: &Method,
    headers: &HeaderMap,
    parent_name: &str,
    child_name: &str,
) -> Result<(Actor, Arc<TopicMeta>, Arc<RemoteLink>), ApiError> {
    let user = authenticate(state, method, headers).await?;
    let actor = remote_admin(state, user.as_deref())?;
    let child = known_topic(state, child_name)?;
    let linked = child
        .parent
        .as_ref()
        .is_some_and(|link| link.parent == parent_name);
    if !linked {
        return Err(refused(MetastoreError::NotLinked));
    }
    let link = child.remote.clone().ok_or_else(|| {
        refused(MetastoreError::NotRemoteChild {
            name: child_name.to_owned(),
        })
    })?;
    Ok((actor, child, link))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PauseBody {
    #[serde(default)]
    reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SkipBody {
    partition: u32,
    offset: u64,
}

/// A remote-children body: at most [`REMOTE_BODY_BYTES_MAX`] (`413`),
/// strict JSON (`400`); an empty body reads as `{}`.
pub(super) async fn remote_body<T: for<'de> Deserialize<'de>>(
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    let bytes = read_limited(headers, body, REMOTE_BODY_BYTES_MAX, None).await?;
    let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        &bytes
    };
    serde_json::from_slice(text)
        .map_err(|error| ApiError::bad_request(format!("invalid json: {error}")))
}

/// The stub's record after a change.
pub(super) fn stub_answer(state: &ApiState, name: &str) -> Result<Response, ApiError> {
    let stub = known_topic(state, name)?;
    Ok(json_response(StatusCode::OK, &record(&stub)))
}

/// `POST /v1/topics/{parent}/children/{child}/pause` `{"reason"}` → `200`
/// the stub: shipping stops until a resume.
pub(crate) async fn pause(
    State(state): State<Arc<ApiState>>,
    Path((parent, child)): Path<(String, String)>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (actor, _, _) = managed_stub(&state, &method, &headers, &parent, &child).await?;
    let request: PauseBody = remote_body(&headers, body).await?;
    rules::check_pause_reason(&request.reason).map_err(refused)?;
    take_write(&state)?;
    let pause = PauseRemoteChild {
        actor,
        child: child.clone(),
        reason: request.reason,
        at_ms: state.clock().unix_ms(),
    };
    upgrade_gate::propose(&state, Command::PauseRemoteChild(pause)).await?;
    stub_answer(&state, &child)
}

/// `POST /v1/topics/{parent}/children/{child}/skip`
/// `{"partition","offset"}` → `200` the stub: that partition's cursor
/// passes the record without shipping it. Taken only while the cursor
/// holds on exactly that record (see [`skip_allowed`]), else `409`. The
/// cursor's report comes from the partition's owner: this node, or
/// another asked over the cluster RPC; `503` with `Retry-After` when that
/// owner cannot be asked.
pub(crate) async fn skip(
    State(state): State<Arc<ApiState>>,
    Path((parent, child)): Path<(String, String)>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (actor, stub, _) = managed_stub(&state, &method, &headers, &parent, &child).await?;
    let request: SkipBody = remote_body(&headers, body).await?;
    let partitions = stub
        .parent
        .as_ref()
        .map_or(0, |link| link.attach_offsets.len());
    let partitions = u32::try_from(partitions).unwrap_or(u32::MAX);
    let report = if request.partition < partitions {
        let parent_meta = known_topic(&state, &parent)?;
        match owner_cursor(&state, &parent_meta, request.partition, &child).await {
            OwnerCursor::Heard(report) => report,
            OwnerCursor::Unheard => {
                let mut error = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "the owner of partition {} of {parent:?} cannot be asked whether its cursor holds on offset {}; retry later",
                        request.partition, request.offset
                    ),
                );
                error.retry_after_seconds = Some(1);
                return Err(error);
            }
        }
    } else {
        None
    };
    if !skip_allowed(
        partitions,
        request.partition,
        request.offset,
        report.as_ref(),
    ) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "partition {} of {parent:?} is not held on offset {} by a refused record; only a record the target refused (rejected_record, record_too_large) can be skipped",
                request.partition, request.offset
            ),
        ));
    }
    take_write(&state)?;
    let skip = SkipRemoteRecord {
        actor,
        child: child.clone(),
        partition: request.partition,
        offset: request.offset,
    };
    upgrade_gate::propose(&state, Command::SkipRemoteRecord(skip)).await?;
    stub_answer(&state, &child)
}

/// The remote fields of a children listing's entry for stub `stub`
/// (spec §1.4): the link, its state over the cursors' reports, lag and,
/// with `partitions`, one row per parent partition.
pub(super) fn list_fields(
    entry: &mut Value,
    (parent, stub): (&TopicMeta, &TopicMeta),
    positions: &[Option<Positions>],
    reports: &[(u32, Option<crate::fanout::CursorReport>)],
    with_partitions: bool,
    now_unix_ms: u64,
) {
    let Some(link) = &stub.remote else {
        return;
    };
    let (lag, complete) = unshipped(positions, stub);
    let state = link_state(link, reports);
    // The parent's retention now: the stub's copy is the one at attach.
    let times = cursor_times(reports, now_unix_ms, parent.retention_ms);
    entry["lag_messages"] = json!(lag);
    entry["lag_complete"] = json!(complete);
    entry["remote"] = json!({
        "name": link.remote,
        "topic": link.remote_topic,
        "lanes": link.lanes,
        "from": link.from.name(),
    });
    entry["paused"] = json!(link.paused.is_some());
    if let Some(pause) = &link.paused {
        entry["paused_reason"] = json!(pause.reason);
        entry["paused_at_ms"] = json!(pause.at_ms);
    }
    entry["state"] = json!(state.state);
    entry["lag_seconds"] = json!(times.lag_seconds);
    entry["retention_headroom_seconds"] = json!(times.retention_headroom_seconds);
    entry["source_drained"] = json!(complete && lag == 0);
    entry["blocked_at"] = state.blocked_at.map_or(
        Value::Null,
        |at| json!({ "partition": at.partition, "offset": at.offset, "state": at.state }),
    );
    entry["target_verified_at"] = json!(times.target_verified_at);
    entry["unverified"] = json!(link.target_id.is_none());
    entry["last_success_at"] = json!(times.last_success_at);
    if with_partitions {
        let starts = stub
            .parent
            .as_ref()
            .map(|link| link.attach_offsets.as_slice())
            .unwrap_or_default();
        let rows: Vec<Value> = positions
            .iter()
            .enumerate()
            .map(|(partition, reported)| {
                partition_row(partition, reported.as_ref(), &stub.name, starts)
            })
            .collect();
        entry["partitions"] = Value::Array(rows);
    }
}

/// One parent partition's row of a remote child: its high watermark, the
/// cursor's next offset (`null` when no cursor reported) and the lag.
fn partition_row(
    partition: usize,
    reported: Option<&Positions>,
    child: &str,
    starts: &[u64],
) -> Value {
    let Some(reported) = reported else {
        return json!({
            "partition": partition, "high_watermark": null, "next_offset": null,
            "lag_messages": null, "reported": false,
        });
    };
    let cursor = reported.cursors.get(child).copied();
    let next = cursor
        .or_else(|| starts.get(partition).copied())
        .unwrap_or(0);
    json!({
        "partition": partition,
        "high_watermark": reported.high_watermark,
        "next_offset": cursor,
        "lag_messages": reported.high_watermark.saturating_sub(next),
        "reported": cursor.is_some(),
    })
}

/// The remote fields of an attach body without `remote`: refused.
pub(super) fn refuse_without_remote(request: &RemoteAttach) -> Result<(), ApiError> {
    let given = [
        ("remote_topic", request.remote_topic.is_some()),
        ("from", request.from.is_some()),
        ("lanes", request.lanes.is_some()),
        ("dry_run", request.dry_run),
    ];
    match given.iter().find(|(_, given)| *given) {
        Some((field, _)) => Err(ApiError::bad_request(format!(
            "{field} needs remote: only a remote child takes it"
        ))),
        None => Ok(()),
    }
}
