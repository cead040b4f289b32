//! `POST /v1/topics/{parent}/children/{child}/resume` (spec §1.4, v3.2):
//! the target is checked again from every data member, since each member
//! ships the parent partitions it owns over its own outbound client. This
//! node runs its checks itself and asks every other live member to run
//! theirs (opcode 34), all at once within [`RESUME_CHECK_BUDGET`]; what
//! the resume decides from them is
//! [`resume_verdict`](crate::remote_children::resume_verdict)'s.
//!
//! The answer is the stub's record with `checks`: one entry per data
//! member, `{"node","result","target_id"}` and for a failure its `check`,
//! `class` and `detail`. A `409` carries the same `checks` beside its
//! `error`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use narad_meta::{Command, MemberStatus, Remote, ResumeRemoteChild};
use narad_protocol::CheckRemoteTarget;

use super::ApiState;
use super::error::ApiError;
use super::remote_children::{managed_stub, remote_body, take_write};
use super::remotes::upgrade_gate;
use super::topics::{json_response, known_topic, record};
use crate::remote_children::{MemberCheck, answer_of, resume_verdict};
use crate::topology::{NodeId, node_of};

/// How long a resume waits for every member's checks of the target, this
/// node's own included. A check is a few requests to the target; a member
/// still checking at the end is listed as not answering, and the resume
/// goes on without it (its shipper looks at the target itself before it
/// ships again).
pub(crate) const RESUME_CHECK_BUDGET: Duration = Duration::from_secs(15);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResumeBody {
    #[serde(default)]
    accept_target: bool,
}

/// `POST /v1/topics/{parent}/children/{child}/resume`
/// `{"accept_target": bool}` → `200` the stub with every member's
/// `checks`. `409` `target_replaced` when the members reach a target topic
/// other than the one attached (unless accepted), or reach different
/// ones (accepted or not).
pub(crate) async fn resume(
    State(state): State<Arc<ApiState>>,
    Path((parent, child)): Path<(String, String)>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (actor, _, link) = managed_stub(&state, &method, &headers, &parent, &child).await?;
    let request: ResumeBody = remote_body(&headers, body).await?;
    take_write(&state)?;
    let remote = state.replica.view().metastore.remote(&link.remote).cloned();
    let checks = match &remote {
        Some(remote) => member_checks(&state, remote, &link.remote_topic).await,
        None => BTreeMap::new(),
    };
    let listed: Vec<Value> = checks
        .iter()
        .map(|(node, check)| check.to_json(*node))
        .collect();
    let target_id = match resume_verdict(link.target_id.as_deref(), &checks, request.accept_target)
    {
        Ok(target_id) => target_id,
        Err(refusal) => {
            return Ok(json_response(
                StatusCode::CONFLICT,
                &json!({ "error": refusal.to_string(), "checks": listed }),
            ));
        }
    };
    let resume = ResumeRemoteChild {
        actor,
        child: child.clone(),
        target_id,
    };
    upgrade_gate::propose(&state, Command::ResumeRemoteChild(resume)).await?;
    let stub = known_topic(&state, &child)?;
    let mut answer = record(&stub);
    answer["checks"] = Value::Array(listed);
    Ok(json_response(StatusCode::OK, &answer))
}

/// Every data member's checks of `topic` on `remote`: this node's run
/// here, every other live member's asked of it over node RPC, all within
/// [`RESUME_CHECK_BUDGET`]. A member marked dead is not asked.
async fn member_checks(
    state: &Arc<ApiState>,
    remote: &Remote,
    topic: &str,
) -> BTreeMap<NodeId, MemberCheck> {
    let deadline_ms = state
        .clock()
        .now_ms()
        .saturating_add(RESUME_CHECK_BUDGET.as_millis() as u64);
    let local = state.replica.local_node();
    let asked = CheckRemoteTarget {
        remote: remote.name.clone(),
        remote_id: remote.id.as_str().to_owned(),
        topic: topic.to_owned(),
    };
    let mut checks = BTreeMap::new();
    let mut calls = tokio::task::JoinSet::new();
    for member in state.replica.view().metastore.members() {
        let Some(node) = node_of(&member.id).filter(|node| *node != local) else {
            continue;
        };
        if member.status == MemberStatus::Dead {
            checks.insert(node, MemberCheck::NotAnswering("marked dead".to_owned()));
            continue;
        }
        let (state, asked) = (Arc::clone(state), asked.clone());
        calls.spawn(async move {
            let timeout = state.clock().sleep_until(deadline_ms);
            let check = tokio::select! {
                check = ask_member(&state, node, &asked) => check,
                () = timeout => MemberCheck::NotAnswering(no_answer()),
            };
            (node, check)
        });
    }
    let timeout = state.clock().sleep_until(deadline_ms);
    let own = tokio::select! {
        report = state.remote_probe().check(remote, topic) => {
            MemberCheck::Checked(answer_of(&report))
        }
        () = timeout => MemberCheck::NotAnswering(no_answer()),
    };
    checks.insert(local, own);
    while let Some(joined) = calls.join_next().await {
        match joined {
            Ok((node, check)) => {
                checks.insert(node, check);
            }
            Err(error) => tracing::error!(%error, "a member's target check task failed"),
        }
    }
    checks
}

/// What member `node` answers to `asked`.
async fn ask_member(state: &ApiState, node: NodeId, asked: &CheckRemoteTarget) -> MemberCheck {
    let Some(forwarder) = state.forwarder.get() else {
        return MemberCheck::NotAnswering("node RPC is not running on this node".to_owned());
    };
    match forwarder
        .check_remote_target(node, RESUME_CHECK_BUDGET, asked)
        .await
    {
        Ok(answer) => MemberCheck::Checked(answer),
        Err(error) => MemberCheck::NotAnswering(error.to_string()),
    }
}

fn no_answer() -> String {
    format!("no answer within {} s", RESUME_CHECK_BUDGET.as_secs())
}
