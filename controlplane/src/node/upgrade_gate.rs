//! The control side of the upgrade gate (spec §6 "Stack": new entry types
//! are proposed only once every member reports it applies them, `412`
//! otherwise). Before the leader appends a command of a kind every member
//! must decode first ([`members_must_decode`]: the remote kinds), it asks
//! every other control node of the Raft membership, voters and learners,
//! for its status, which reports the newest command version it decodes.
//! A node that reports an older one, none (a release before the report),
//! or gives no answer within [`STATUS_WAIT`] holds the command back: it is
//! refused `412` without entering the log, naming the nodes. A follower
//! that could not decode the entry would stop applying; with a majority
//! of such followers the cluster would stop committing.
//!
//! The data members are asked by the data node that proposes (the data
//! plane's `remotes::upgrade_gate`): the control plane has no node RPC to
//! them. Followers do not check: they forward to the leader, which does.

use std::time::Duration;

use narad_meta::Command;
use narad_meta::codec::{members_must_decode, why_behind};
use narad_meta::follow::AppliedOutcome;
use narad_protocol::{CallError, Lane};
use openraft::ServerState;

use super::propose::resolve;
use super::runtime::Shared;
use super::wire::{LocalRead, LocalReadAnswer};
use crate::network::messages::opcodes;
use crate::raft::{Applied, ControlNodeId};

/// How long the leader waits for one control node's status.
pub(super) const STATUS_WAIT: Duration = Duration::from_secs(2);

/// The `412` refusal of `command` when this node leads and another control
/// node may not decode it; `None` to propose it.
pub(super) async fn refusal(shared: &Shared, command: &Command) -> Option<Applied> {
    let version = members_must_decode(command)?;
    let others: Vec<(ControlNodeId, String)> = {
        let watch = shared.raft.metrics();
        let metrics = watch.borrow();
        if metrics.state != ServerState::Leader {
            return None;
        }
        metrics
            .membership_config
            .membership()
            .nodes()
            .filter(|(id, _)| **id != metrics.id)
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect()
    };
    let mut reports = Vec::with_capacity(others.len());
    for (id, addr) in others {
        reports.push((id, reported_version(shared, &addr).await));
    }
    let behind = behind(&reports, version);
    if behind.is_empty() {
        return None;
    }
    Some(Applied {
        index: shared.view.applied_index(),
        outcome: AppliedOutcome::Refused {
            status: 412,
            message: refusal_message(version, &behind),
        },
    })
}

/// The command version the control node at `addr` reports, or why it is
/// not known.
async fn reported_version(shared: &Shared, addr: &str) -> Result<Option<u8>, String> {
    let peer = resolve(addr)
        .await
        .ok_or_else(|| format!("address {addr:?} does not resolve"))?;
    let call = shared.transport.call_message::<_, LocalReadAnswer>(
        peer,
        Lane::Control,
        opcodes::READ_LOCAL,
        &LocalRead::Status,
    );
    let answer: Result<LocalReadAnswer, CallError> = tokio::time::timeout(STATUS_WAIT, call)
        .await
        .map_err(|_| format!("no answer within {} s", STATUS_WAIT.as_secs()))?;
    match answer {
        Ok(LocalReadAnswer::Status(status)) => Ok(status.command_version),
        Ok(other) => Err(format!("answered {other:?} to a status read")),
        Err(error) => Err(error.to_string()),
    }
}

/// The control nodes whose report does not show that they decode
/// `version`, with why, in the order given.
pub(super) fn behind(
    reports: &[(ControlNodeId, Result<Option<u8>, String>)],
    version: u8,
) -> Vec<(ControlNodeId, String)> {
    reports
        .iter()
        .filter_map(|(id, report)| {
            let report = report.as_ref().copied().map_err(String::as_str);
            why_behind(report, version).map(|why| (*id, why))
        })
        .collect()
}

/// The text of the refusal: the version and the nodes behind.
pub(super) fn refusal_message(version: u8, behind: &[(ControlNodeId, String)]) -> String {
    let named: Vec<String> = behind
        .iter()
        .map(|(id, why)| format!("control node {id} ({why})"))
        .collect();
    format!(
        "remote writes need every member on a release that applies them \
         (metastore command version {version}); upgrade or wait for: {}",
        named.join(", ")
    )
}

#[cfg(test)]
#[path = "upgrade_gate_tests.rs"]
mod tests;
