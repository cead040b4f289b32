//! Cluster administration routes (spec §1.9): the members and the
//! partition moves as this node's replica holds them, with each node's own
//! report when `detail=true`; decommission and its cancel; a move's abort;
//! and `forget`. Admin only (everyone with security off). Changes go
//! through [`crate::admin::Admin`].
//!
//! Where this design departs from the spec's cluster, and what it answers:
//! - Data nodes are not Raft voters: the control plane runs Raft on nodes
//!   of its own. So every member's `voter` and `leader` are `false`, and the
//!   voter block codes (`below_min_voters`, `no_healthy_majority`,
//!   `leader_transfer`) never appear.
//! - `forget` removes a Raft server that has no member record. Raft servers
//!   are control nodes here, whose membership a data node cannot change:
//!   `409` for an id with a member record, `404` for an id the cluster has
//!   never known, `501` for the id of a removed data node (the one case the
//!   spec's `forget` was for, which cannot arise here).
//! - `heartbeat_age_seconds` is a number of seconds with millisecond
//!   precision (a float), from the leader's stamp to this node's clock;
//!   `0` when the stamp is ahead of this clock.
//! - A move worker's start is `started_at_ms`, Unix milliseconds, the unit
//!   in its name as elsewhere in the API.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use narad_clock::millis;
use serde_json::{Value, json};

use narad_meta::{
    AbortMove, Command, DecommissionBlock, Member, MemberStatus, Metastore, MetastoreError,
    SetDraining,
};
use narad_protocol::NodeStatus as NodeStatusRequest;
use narad_protocol::commit::is_unsupported_operation;
use narad_protocol::{RpcError, Status};

use super::error::ApiError;
use super::produce::parse_partition;
use super::query::params;
use super::topics::{found, json_response, propose, refused};
use super::{ApiState, authenticate};
use crate::admin::actor_of;
use crate::forward::ForwardError;
use crate::status::{MoveWorkerStatus, NodeStatus};
use crate::topology::node_of;

/// Budget of the node status calls of one listing, every node asked at
/// once (spec §1.9: 2 s in total).
pub(crate) const NODE_STATUS_BUDGET: Duration = Duration::from_secs(2);

/// The block a detailed listing adds for a draining member whose ingress
/// WAL still holds records for their owners.
const DISPATCH_BACKLOG: &str = "dispatch_backlog";
/// The block a detailed listing adds for a draining member it could not
/// ask: its backlog is unknown.
const NODE_STATUS_UNAVAILABLE: &str = "node_status_unavailable";

/// What each asked node answered, or why it did not, by member id.
pub(crate) type Statuses = BTreeMap<String, Result<NodeStatus, String>>;

/// Authenticates the caller and checks, by the metastore's rule, that it
/// may administer the cluster: an admin, or anyone with security off.
async fn admin(state: &ApiState, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    let user = authenticate(state, method, headers).await?;
    let actor = actor_of(user.as_deref());
    state
        .replica
        .view()
        .metastore
        .require_admin(&actor)
        .map_err(refused)?;
    Ok(())
}

/// The one value of query parameter `name`, if given.
///
/// # Errors
/// `400` when it is given twice.
pub(crate) fn query_value(query: Option<&str>, name: &str) -> Result<Option<Vec<u8>>, ApiError> {
    let mut values = params(query.unwrap_or(""))
        .into_iter()
        .filter(|param| param.name == name.as_bytes());
    let value = values.next().map(|param| param.value);
    if values.next().is_some() {
        return Err(ApiError::bad_request(format!(
            "duplicate {name} query parameter"
        )));
    }
    Ok(value)
}

/// Boolean query parameter `name`: `true`/`1` or `false`/`0`; absent is
/// false.
///
/// # Errors
/// `400` for another value or a repeat.
pub(crate) fn query_flag(query: Option<&str>, name: &str) -> Result<bool, ApiError> {
    match query_value(query, name)?.as_deref() {
        None | Some(b"false" | b"0") => Ok(false),
        Some(b"true" | b"1") => Ok(true),
        Some(_) => Err(ApiError::bad_request(format!(
            "invalid {name}: want true or false"
        ))),
    }
}

/// `GET /v1/cluster/members[?detail=true]` → every member in id order.
pub(crate) async fn members(
    State(state): State<Arc<ApiState>>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin(&state, &method, &headers).await?;
    let detail = query_flag(query.as_deref(), "detail")?;
    let view = state.replica.view();
    let metastore = &*view.metastore;
    let statuses = if detail {
        let ids = metastore.members().map(|member| member.id.clone());
        Some(node_statuses(&state, ids.collect(), NodeStatusRequest::default()).await)
    } else {
        None
    };
    let holdings = Holdings::of(metastore);
    let now_ms = state.clock().unix_ms();
    let members: Vec<Value> = metastore
        .members()
        .map(|member| {
            let status = statuses
                .as_ref()
                .map(|statuses| answer_of(statuses, &member.id));
            member_json(metastore, member, &holdings, now_ms, status)
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({ "members": members }),
    ))
}

/// Partitions owned and moves out, by member id, counted in one pass over
/// the placements.
#[derive(Debug, Default)]
struct Holdings {
    by_member: HashMap<String, Held>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Held {
    owned: usize,
    outbound: usize,
}

impl Holdings {
    fn of(metastore: &Metastore) -> Self {
        let mut holdings = Self::default();
        for topic in metastore.topics() {
            let slots = metastore.assignments(&topic.name).unwrap_or_default();
            for assignment in slots.iter().flatten() {
                let owner = holdings.entry(&assignment.owner);
                owner.owned += 1;
                owner.outbound += usize::from(assignment.target.is_some());
            }
        }
        holdings
    }

    fn entry(&mut self, id: &str) -> &mut Held {
        self.by_member.entry(id.to_owned()).or_default()
    }

    fn get(&self, id: &str) -> Held {
        self.by_member.get(id).copied().unwrap_or_default()
    }
}

/// What `id`'s node answered, or why it did not.
fn answer_of<'a>(statuses: &'a Statuses, id: &str) -> Result<&'a NodeStatus, &'a str> {
    match statuses.get(id) {
        Some(Ok(status)) => Ok(status),
        Some(Err(error)) => Err(error),
        None => Err("it was not asked"),
    }
}

/// One member's entry; `status` is what its node answered, with `detail`.
fn member_json(
    metastore: &Metastore,
    member: &Member,
    holdings: &Holdings,
    now_ms: u64,
    status: Option<Result<&NodeStatus, &str>>,
) -> Value {
    let held = holdings.get(&member.id);
    let age_ms = now_ms.saturating_sub(member.last_heartbeat_ms);
    let mut value = json!({
        "id": member.id,
        "addr": member.http_addr,
        "status": status_name(member.status),
        "draining": member.draining,
        "owned_partitions": held.owned,
        "outbound_moves": held.outbound,
        "voter": false,
        "leader": false,
        "heartbeat_age_seconds": age_ms as f64 / 1000.0,
    });
    value["decommission_blocked"] = blocks_json(metastore, member, status);
    match status {
        Some(Ok(status)) => value["node_status"] = node_status_json(status),
        Some(Err(error)) => value["status_error"] = json!(error),
        None => {}
    }
    value
}

fn status_name(status: MemberStatus) -> &'static str {
    match status {
        MemberStatus::Alive => "alive",
        MemberStatus::Dead => "dead",
    }
}

/// What keeps a draining member from leaving: the metastore's verdict,
/// then, from a detailed listing, a backlog its node reported or the fact
/// that it could not be asked. Empty for a member that is not draining.
fn blocks_json(
    metastore: &Metastore,
    member: &Member,
    status: Option<Result<&NodeStatus, &str>>,
) -> Value {
    if !member.draining {
        return json!([]);
    }
    let mut blocks: Vec<Value> = metastore
        .decommission_blocks(&member.id)
        .into_iter()
        .map(|block| block_json(block.code(), block.message()))
        .collect();
    match status {
        Some(Ok(status)) if status.dispatch_backlog > 0 => blocks.push(block_json(
            DISPATCH_BACKLOG,
            &format!(
                "its ingress WAL still holds {} records not yet committed to their partition owners",
                status.dispatch_backlog
            ),
        )),
        Some(Err(_)) => blocks.push(block_json(
            NODE_STATUS_UNAVAILABLE,
            "its node status could not be read, so whether its ingress WAL is drained is unknown",
        )),
        _ => {}
    }
    Value::Array(blocks)
}

fn block_json(code: &str, message: &str) -> Value {
    json!({ "code": code, "message": message })
}

/// A node's report in the listing's shape.
fn node_status_json(status: &NodeStatus) -> Value {
    let list: Vec<Value> = status
        .quarantine
        .list
        .iter()
        .map(|copy| {
            let mut value = json!({
                "kind": copy.kind, "topic": copy.topic, "dir": copy.dir,
                "bytes": copy.bytes, "mod_time_ms": copy.mod_time_ms,
            });
            if let Some(partition) = copy.partition {
                value["partition"] = json!(partition);
            }
            value
        })
        .collect();
    json!({
        "draining": status.draining,
        "produce_in_flight": status.produce_in_flight,
        "dispatch_backlog": status.dispatch_backlog,
        "quarantine": {
            "copies": status.quarantine.copies,
            "bytes": status.quarantine.bytes,
            "list": list,
        },
        "moves": status.moves.iter().map(worker_json).collect::<Vec<_>>(),
    })
}

/// A move worker's report; `last_error` and `blocked` only when set.
fn worker_json(worker: &MoveWorkerStatus) -> Value {
    let mut value = json!({
        "topic": worker.topic,
        "partition": worker.partition,
        "source": worker.source,
        "target": worker.target,
        "started_at_ms": worker.started_at_ms,
        "phase": worker.phase,
        "attempts": worker.attempts,
        "copied_bytes": worker.copied_bytes,
    });
    if let Some(error) = &worker.last_error {
        value["last_error"] = json!(error);
    }
    if let Some(blocked) = &worker.blocked {
        value["blocked"] = json!(blocked);
    }
    value
}

/// Asks every node in `ids` for its status at once, within
/// [`NODE_STATUS_BUDGET`] in all: this node reads its own, the others are
/// asked over node RPC; with their views of the remotes' credentials and
/// the command version they decode when `asked` says so. Every id gets an
/// entry.
pub(crate) async fn node_statuses(
    state: &Arc<ApiState>,
    ids: BTreeSet<String>,
    asked: NodeStatusRequest,
) -> Statuses {
    let deadline_ms = state
        .clock()
        .now_ms()
        .saturating_add(millis(NODE_STATUS_BUDGET));
    let mut calls = tokio::task::JoinSet::new();
    for id in &ids {
        let (state, id) = (Arc::clone(state), id.clone());
        calls.spawn(async move {
            let timeout = state.clock().sleep_until(deadline_ms);
            let answer = tokio::select! {
                answer = node_status(&state, &id, asked) => answer,
                () = timeout => Err(format!(
                    "no answer within {} s",
                    NODE_STATUS_BUDGET.as_secs()
                )),
            };
            (id, answer)
        });
    }
    let mut statuses = Statuses::new();
    while let Some(joined) = calls.join_next().await {
        match joined {
            Ok((id, answer)) => {
                statuses.insert(id, answer);
            }
            Err(error) => tracing::error!(%error, "a node status task failed"),
        }
    }
    for id in ids {
        statuses
            .entry(id)
            .or_insert_with(|| Err("the node status task failed".to_owned()));
    }
    statuses
}

/// Member `id`'s status: this node's read here, another's asked of it.
async fn node_status(
    state: &ApiState,
    id: &str,
    asked: NodeStatusRequest,
) -> Result<NodeStatus, String> {
    let node = node_of(id).ok_or("its id names no data node this one can address")?;
    if node == state.replica.local_node() {
        let mut status = NodeStatus::read(&state.status).await;
        status.answer(asked, &state.status);
        return Ok(status);
    }
    let forwarder = state
        .forwarder
        .get()
        .ok_or("node RPC is not running on this node")?;
    forwarder
        .node_status(node, NODE_STATUS_BUDGET, asked)
        .await
        .map(NodeStatus::from_wire)
        .map_err(|error| status_error(&error))
}

/// Why a node's status could not be had, as the listing says it.
fn status_error(error: &ForwardError) -> String {
    match error {
        ForwardError::OwnerDown => "no node RPC address is known for it".to_owned(),
        ForwardError::Refused { status, message }
            if is_unsupported_operation(&RpcError::new(Status(*status), message.clone())) =>
        {
            format!("its release does not serve this request (an older node): {message}")
        }
        ForwardError::NoAnswer(cause) => format!("no answer: {cause}"),
        ForwardError::Refused { status, message } => format!("refused ({status}): {message}"),
    }
}

/// One move as the replica holds it.
struct Move {
    topic: String,
    partition: u32,
    from: String,
    to: String,
}

/// `GET /v1/cluster/moves[?detail=true]` → every move in progress, topics
/// in name order, partitions in index order.
pub(crate) async fn moves(
    State(state): State<Arc<ApiState>>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin(&state, &method, &headers).await?;
    let detail = query_flag(query.as_deref(), "detail")?;
    let view = state.replica.view();
    let metastore = &*view.metastore;
    let moves: Vec<Move> = metastore
        .moves()
        .filter_map(|(topic, partition, assignment)| {
            Some(Move {
                topic: topic.to_owned(),
                partition,
                from: assignment.owner.clone(),
                to: assignment.target.clone()?,
            })
        })
        .collect();
    let statuses = if detail {
        let targets = moves
            .iter()
            .filter(|step| metastore.member(&step.to).is_some())
            .map(|step| step.to.clone());
        Some(node_statuses(&state, targets.collect(), NodeStatusRequest::default()).await)
    } else {
        None
    };
    let moves: Vec<Value> = moves
        .iter()
        .map(|step| move_json(metastore, step, statuses.as_ref()))
        .collect();
    Ok(json_response(StatusCode::OK, &json!({ "moves": moves })))
}

/// One move's entry, with its worker (or why it could not be asked) when
/// `statuses` holds the detail.
fn move_json(metastore: &Metastore, step: &Move, statuses: Option<&Statuses>) -> Value {
    let from_status = member_state(metastore, &step.from);
    let to_status = member_state(metastore, &step.to);
    let mut value = json!({
        "topic": step.topic,
        "partition": step.partition,
        "from": step.from,
        "to": step.to,
        "from_status": from_status,
        "to_status": to_status,
    });
    if let Some(blocked) = move_blocked(from_status, to_status) {
        value["blocked"] = json!(blocked);
    }
    let Some(statuses) = statuses else {
        return value;
    };
    match statuses.get(&step.to) {
        Some(Ok(status)) => {
            let worker = status
                .moves
                .iter()
                .find(|worker| worker.topic == step.topic && worker.partition == step.partition);
            if let Some(worker) = worker {
                value["worker"] = worker_json(worker);
            }
        }
        Some(Err(error)) => value["worker_error"] = json!(error),
        None => value["worker_error"] = json!("the target is not a member, so no worker runs"),
    }
    value
}

/// `alive`, `dead`, `draining` or `not_a_member`; a dead member reads
/// dead whether or not it drains.
fn member_state(metastore: &Metastore, id: &str) -> &'static str {
    match metastore.member(id) {
        None => "not_a_member",
        Some(member) if member.status == MemberStatus::Dead => "dead",
        Some(member) if member.draining => "draining",
        Some(_) => "alive",
    }
}

/// What stops a move from finishing as membership stands, the target's
/// trouble first (the move cannot finish without it).
fn move_blocked(from_status: &str, to_status: &str) -> Option<&'static str> {
    match (from_status, to_status) {
        (_, "not_a_member") => Some("target_not_member"),
        (_, "dead") => Some("target_dead"),
        ("dead", _) => Some("source_dead"),
        _ => None,
    }
}

/// `POST /v1/cluster/members/{id}/decommission[?dry_run=true]` → `204`
/// marked draining, or `200` with the verdict on a dry run (nothing
/// changes); `404` unknown member; `409` when it could never complete.
pub(crate) async fn decommission(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin(&state, &method, &headers).await?;
    let dry_run = query_flag(query.as_deref(), "dry_run")?;
    let view = state.replica.view();
    let metastore = &*view.metastore;
    found(metastore.member(&id), MetastoreError::MemberNotFound)?;
    let blocks = metastore.decommission_blocks(&id);
    if dry_run {
        let verdict = verdict_json(metastore, &id, &blocks);
        return Ok(json_response(StatusCode::OK, &verdict));
    }
    let permanent: Vec<DecommissionBlock> = blocks
        .into_iter()
        .filter(|block| block.is_permanent())
        .collect();
    if !permanent.is_empty() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            never_completes(&id, &permanent),
        ));
    }
    let drain = SetDraining { id, draining: true };
    propose(&state, Command::SetDraining(drain)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A dry run's answer: whether the decommission would be taken, and every
/// reason it cannot finish now (`permanent` ones refuse it).
fn verdict_json(metastore: &Metastore, id: &str, blocks: &[DecommissionBlock]) -> Value {
    let (owned, inbound) = metastore.holdings(id);
    let reasons: Vec<Value> = blocks
        .iter()
        .map(|block| {
            json!({
                "code": block.code(),
                "message": block.message(),
                "permanent": block.is_permanent(),
            })
        })
        .collect();
    json!({
        "member": id,
        "would_decommission": !blocks.iter().any(|block| block.is_permanent()),
        "reasons": reasons,
        "voter": false,
        "owned_partitions": owned,
        "inbound_moves": inbound,
    })
}

/// The `409` text: each reason's code, then what it means.
fn never_completes(id: &str, permanent: &[DecommissionBlock]) -> String {
    let reasons: Vec<String> = permanent
        .iter()
        .map(|block| format!("{} ({})", block.code(), block.message()))
        .collect();
    format!(
        "member {id:?} can never finish a decommission as the cluster stands: {}; nothing was changed",
        reasons.join("; ")
    )
}

/// `DELETE /v1/cluster/members/{id}/decommission` → `204`: the draining
/// mark is cleared; partitions that moved away stay moved. A dry run is
/// `400`: there is nothing to judge.
pub(crate) async fn cancel_decommission(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin(&state, &method, &headers).await?;
    if query_flag(query.as_deref(), "dry_run")? {
        return Err(ApiError::bad_request(
            "dry_run applies to starting a decommission, not to cancelling one",
        ));
    }
    found(
        state.replica.view().metastore.member(&id),
        MetastoreError::MemberNotFound,
    )?;
    let undrain = SetDraining {
        id,
        draining: false,
    };
    propose(&state, Command::SetDraining(undrain)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v1/cluster/members/{id}/forget`: never done here (see the module
/// doc): `409` for a member, `501` for a removed data node's id, `404`
/// otherwise.
pub(crate) async fn forget(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin(&state, &method, &headers).await?;
    let view = state.replica.view();
    if view.metastore.member(&id).is_some() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "member {id:?} has a member record: forget removes only a Raft server without one; decommission a data node instead"
            ),
        ));
    }
    if view.metastore.is_removed(&id) {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            format!(
                "{id:?} is a removed data node, and data nodes are never Raft servers here: the Raft servers are the control nodes, and control-plane servers are changed through the control nodes"
            ),
        ));
    }
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        "member not found: no data node has or had this id; control-plane servers are changed through the control nodes",
    ))
}

/// `POST /v1/cluster/moves/{topic}/{partition}/abort[?target=node]` →
/// `202`: the move to `target` (default: the current one) is cleared, if
/// it is still that move (the metastore's compare-and-set).
pub(crate) async fn abort_move(
    State(state): State<Arc<ApiState>>,
    Path((topic, partition)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin(&state, &method, &headers).await?;
    let partition = parse_partition(partition.as_bytes())?;
    let asked = query_value(query.as_deref(), "target")?
        .map(|target| String::from_utf8_lossy(&target).into_owned());
    let (abort, from) = abort_command(&state, &topic, partition, asked)?;
    let to = abort.target.clone();
    propose(&state, Command::AbortMove(abort)).await?;
    let note = format!(
        "the move is cancelled: node {to} stops copying the partition and discards what it copied, and {from} keeps it"
    );
    let body = json!({
        "move": { "topic": topic, "partition": partition, "from": from, "to": to },
        "note": note,
    });
    Ok(json_response(StatusCode::ACCEPTED, &body))
}

/// The abort of `topic`'s `partition` move to `asked` (or to its current
/// target), with the partition's owner as the replica holds it.
///
/// # Errors
/// `404` unknown topic, `400` partition out of range, `409` no move when
/// none is in progress and no target was named.
fn abort_command(
    state: &ApiState,
    topic: &str,
    partition: u32,
    asked: Option<String>,
) -> Result<(AbortMove, String), ApiError> {
    let view = state.replica.view();
    let metastore = &*view.metastore;
    let record = found(metastore.topic(topic), MetastoreError::TopicNotFound)?;
    if partition >= record.partitions {
        return Err(refused(MetastoreError::PartitionOutOfRange { partition }));
    }
    let placed = metastore.assignment(topic, partition);
    let current = placed.and_then(|placed| placed.target.clone());
    let target = asked
        .or(current)
        .ok_or_else(|| refused(MetastoreError::NoMove { partition }))?;
    let from = placed
        .map(|placed| placed.owner.clone())
        .unwrap_or_default();
    let abort = AbortMove {
        topic: topic.to_owned(),
        id: record.id.clone(),
        partition,
        target,
    };
    Ok((abort, from))
}
