//! The upgrade gate of remote writes (spec §1.10 "Writes require every
//! member upgraded (`412`)", §6 "Stack"): a command of a remote kind is
//! proposed only once every data member reports that it decodes the
//! command version that carries it
//! ([`COMMAND_VERSION_FOR_REMOTES`](narad_meta::codec::COMMAND_VERSION_FOR_REMOTES)).
//! A member that could not apply it would stop at the entry.
//!
//! The proposing node asks every member not marked dead for its status
//! `with_command_version` (opcode 33) within the budget of a cluster
//! listing; itself included, answered locally. A member behind is one that
//! reports an older version, answers without one (a release before the
//! report), refuses the request (a release before `with_remotes`), or does
//! not answer: its support is not known, so the write waits. A member
//! marked dead is not asked; should it come back on an older release it
//! stops at the first entry it cannot decode, as the spec has it. The
//! control nodes, which apply every entry too, are checked by the control
//! plane's leader before it appends one (`narad_controlplane`'s
//! `upgrade_gate`).

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::http::StatusCode;
use narad_meta::codec::{members_must_decode, why_behind};
use narad_meta::{Command, MemberStatus, Metastore};
use narad_protocol::NodeStatus as NodeStatusRequest;

use super::super::ApiState;
use super::super::cluster::{Statuses, node_statuses};
use super::super::error::ApiError;
use super::super::topics;

/// Proposes `command` as [`topics::propose`] does, after the gate when it
/// is of a kind every member must decode first.
///
/// # Errors
/// `412` naming the members behind; what the proposal answers.
pub(crate) async fn propose(state: &Arc<ApiState>, command: Command) -> Result<(), ApiError> {
    if let Some(version) = members_must_decode(&command) {
        require_members_decode(state, version).await?;
    }
    topics::propose(state, command).await
}

/// `412` unless every member not marked dead reports that it decodes
/// command version `version`.
async fn require_members_decode(state: &Arc<ApiState>, version: u8) -> Result<(), ApiError> {
    let ids = live_members(&state.replica.view().metastore);
    let asked = NodeStatusRequest {
        with_remotes: true,
        with_command_version: true,
    };
    let behind = behind(&node_statuses(state, ids, asked).await, version);
    if behind.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = behind
        .iter()
        .map(|(id, why)| format!("{id} ({why})"))
        .collect();
    Err(ApiError::new(
        StatusCode::PRECONDITION_FAILED,
        format!(
            "remote writes need every member on a release that applies them \
             (metastore command version {version}); upgrade or wait for: {}",
            named.join(", ")
        ),
    ))
}

/// The members not marked dead, by id.
fn live_members(metastore: &Metastore) -> BTreeSet<String> {
    metastore
        .members()
        .filter(|member| member.status != MemberStatus::Dead)
        .map(|member| member.id.clone())
        .collect()
}

/// The members whose answer does not show that they decode `version`,
/// with why ([`why_behind`]), in id order.
pub(crate) fn behind(statuses: &Statuses, version: u8) -> Vec<(String, String)> {
    statuses
        .iter()
        .filter_map(|(id, answer)| {
            let report = answer
                .as_ref()
                .map(|status| status.command_version)
                .map_err(String::as_str);
            why_behind(report, version).map(|why| (id.clone(), why))
        })
        .collect()
}

#[cfg(test)]
#[path = "upgrade_gate_tests.rs"]
mod tests;
