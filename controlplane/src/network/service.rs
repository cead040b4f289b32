//! The serving side of Raft RPCs: decode, hand to the local openraft, and
//! answer its `Result` as JSON.

use std::sync::{Arc, OnceLock};

use narad_protocol::{Inbound, OperationLimit, Response, Router, RpcError};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};

use super::messages::{AppendEntriesMessage, InstallSnapshotMessage, VoteMessage, opcodes};
use crate::raft::{ControlNodeId, ControlRaft, TypeConfig};

/// The Raft handle, set once openraft has started. The transport must be
/// bound (and its router built) before openraft can start, so handlers find
/// the handle here and answer `503` until it is set.
pub type RaftSlot = Arc<OnceLock<ControlRaft>>;

/// Raft RPCs are few and short: a bound on concurrent ones keeps a flood
/// from a misbehaving peer from starving the control lane's other work.
/// 64 covers a leader's heartbeats and appends to 4 peers many times over.
pub const RAFT_RPC_PERMITS: usize = 64;

fn raft_limit() -> OperationLimit {
    OperationLimit::new("raft", RAFT_RPC_PERMITS)
}

/// The Raft handle, or `503` while openraft has not started.
pub fn started(slot: &RaftSlot) -> Result<ControlRaft, RpcError> {
    slot.get()
        .cloned()
        .ok_or_else(|| RpcError::unavailable("control node starting: raft not running yet"))
}

fn internal(error: serde_json::Error) -> RpcError {
    RpcError::internal(format!("answer not encodable: {error}"))
}

/// Adds the three Raft routes to `router`.
pub fn raft_routes(router: Router, slot: &RaftSlot) -> Router {
    let append = slot.clone();
    let vote = slot.clone();
    let snapshot = slot.clone();
    router
        .route(
            opcodes::RAFT_APPEND_ENTRIES,
            raft_limit(),
            move |inbound: Inbound| {
                let slot = append.clone();
                async move {
                    let raft = started(&slot)?;
                    let request: AppendEntriesRequest<TypeConfig> =
                        inbound.message::<AppendEntriesMessage>()?.parse()?;
                    let answer = raft.append_entries(request).await;
                    Ok(Response::message(
                        &AppendEntriesMessage::of(&answer).map_err(internal)?,
                    ))
                }
            },
        )
        .route(opcodes::RAFT_VOTE, raft_limit(), move |inbound: Inbound| {
            let slot = vote.clone();
            async move {
                let raft = started(&slot)?;
                let request: VoteRequest<ControlNodeId> =
                    inbound.message::<VoteMessage>()?.parse()?;
                let answer = raft.vote(request).await;
                Ok(Response::message(
                    &VoteMessage::of(&answer).map_err(internal)?,
                ))
            }
        })
        .route(
            opcodes::RAFT_INSTALL_SNAPSHOT,
            raft_limit(),
            move |inbound: Inbound| {
                let slot = snapshot.clone();
                async move {
                    let raft = started(&slot)?;
                    let request: InstallSnapshotRequest<TypeConfig> =
                        inbound.message::<InstallSnapshotMessage>()?.parse()?;
                    let answer = raft.install_snapshot(request).await;
                    Ok(Response::message(
                        &InstallSnapshotMessage::of(&answer).map_err(internal)?,
                    ))
                }
            },
        )
}
