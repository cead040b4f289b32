//! The proposer API: a write goes through the leader and is answered after
//! the answering node applied it.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use narad_protocol::{
    CallError, Inbound, Lane, Message, Opcode, OperationLimit, Response, Router, RpcError, Status,
};
use openraft::error::{ClientWriteError, RaftError};
use tokio::time::timeout;

use super::runtime::{PROPOSE_TIMEOUT, Shared};
use super::wire::{LocalRead, LocalReadAnswer, ProposeRequest};
use super::{confirm, join, members, metadata, upgrade_gate};
use crate::network::messages::opcodes;
use crate::raft::{Applied, ControlNodeId};
use narad_meta::Command;

/// Why a proposal got no outcome. A refusal by the metastore is not an
/// error here: it is an outcome ([`narad_meta::follow::AppliedOutcome::Refused`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProposeError {
    /// No leader is known (an election is running): retry shortly. 503.
    #[error("no raft leader")]
    NoLeader,
    /// The leader could not be reached or did not answer; the command may
    /// or may not have been committed. 503.
    #[error("leader {leader} unreachable: {reason}")]
    LeaderUnreachable {
        /// The leader's id.
        leader: ControlNodeId,
        /// Why.
        reason: String,
    },
    /// Committed at `index` by the leader, but this node had not applied it
    /// within the bound. 503.
    #[error("committed at index {index} but not applied on this node within {seconds} s")]
    NotAppliedHere {
        /// The entry's index.
        index: u64,
        /// The bound.
        seconds: u64,
    },
    /// Raft on this node stopped (shutting down, or a storage fault). 503.
    #[error("raft stopped: {0}")]
    Stopped(String),
}

impl From<ProposeError> for RpcError {
    fn from(error: ProposeError) -> Self {
        RpcError::new(Status::UNAVAILABLE, error.to_string())
    }
}

/// Writes `command` through the leader; see the module doc. The leader
/// first refuses a command some control node may not decode
/// ([`upgrade_gate`]).
pub(super) async fn propose(
    shared: &Shared,
    command: Command,
    forwarded: bool,
) -> Result<Applied, ProposeError> {
    if let Some(refused) = upgrade_gate::refusal(shared, &command).await {
        return Ok(refused);
    }
    match shared.raft.client_write(command.clone()).await {
        Ok(response) => Ok(response.data),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
            if forwarded {
                // One hop only: the sender believed this node led.
                return Err(ProposeError::NoLeader);
            }
            let (Some(leader), Some(node)) = (forward.leader_id, forward.leader_node) else {
                return Err(ProposeError::NoLeader);
            };
            let applied = forward_to(shared, leader, &node.addr, command).await?;
            wait_applied(shared, applied.index).await?;
            Ok(applied)
        }
        Err(RaftError::APIError(other)) => Err(ProposeError::Stopped(other.to_string())),
        Err(RaftError::Fatal(fatal)) => Err(ProposeError::Stopped(fatal.to_string())),
    }
}

async fn forward_to(
    shared: &Shared,
    leader: ControlNodeId,
    addr: &str,
    command: Command,
) -> Result<Applied, ProposeError> {
    let unreachable = |reason: String| ProposeError::LeaderUnreachable { leader, reason };
    let peer = resolve(addr)
        .await
        .ok_or_else(|| unreachable(format!("address {addr:?} does not resolve")))?;
    let request = ProposeRequest {
        command,
        forwarded: true,
    };
    let answer: Result<Applied, CallError> = shared
        .transport
        .call_message(peer, Lane::Control, opcodes::PROPOSE, &request)
        .await;
    match answer {
        Ok(applied) => Ok(applied),
        Err(CallError::Rejected(error)) if error.message == ProposeError::NoLeader.to_string() => {
            Err(ProposeError::NoLeader)
        }
        Err(error) => Err(unreachable(error.to_string())),
    }
}

/// The leader this node knows of and its cluster address, or 503 when it
/// knows of none.
pub(super) fn leader_address(shared: &Shared) -> Result<(ControlNodeId, String), RpcError> {
    let leader = shared
        .status()
        .leader
        .ok_or_else(|| RpcError::unavailable("no raft leader"))?;
    let addr = shared
        .raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .get_node(&leader)
        .map(|node| node.addr.clone())
        .ok_or_else(|| RpcError::unavailable("leader address unknown"))?;
    Ok((leader, addr))
}

/// Sends `message` to the leader on the control lane and returns its
/// answer; the leader's own refusal comes back as it is, anything else
/// (no leader, unreachable, timeout) as 503.
pub(super) async fn call_leader<Q: Message, A: Message>(
    shared: &Shared,
    opcode: Opcode,
    message: &Q,
) -> Result<A, RpcError> {
    let (leader, addr) = leader_address(shared)?;
    let peer = resolve(&addr).await.ok_or_else(|| {
        RpcError::unavailable(format!("leader address {addr:?} does not resolve"))
    })?;
    match shared
        .transport
        .call_message(peer, Lane::Control, opcode, message)
        .await
    {
        Ok(answer) => Ok(answer),
        Err(CallError::Rejected(error)) => Err(error),
        Err(error) => Err(RpcError::unavailable(format!("leader {leader}: {error}"))),
    }
}

/// Resolves a `host:port` cluster address.
pub(super) async fn resolve(addr: &str) -> Option<SocketAddr> {
    if let Ok(addr) = addr.parse() {
        return Some(addr);
    }
    tokio::net::lookup_host(addr).await.ok()?.next()
}

/// Waits until this node's replica applied `index`.
async fn wait_applied(shared: &Shared, index: u64) -> Result<(), ProposeError> {
    let mut applied = shared.view.watch_applied();
    let reached = timeout(
        PROPOSE_TIMEOUT,
        applied.wait_for(|applied| *applied >= index),
    )
    .await;
    match reached {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(_)) => Err(ProposeError::Stopped("state machine closed".into())),
        Err(_) => Err(ProposeError::NotAppliedHere {
            index,
            seconds: PROPOSE_TIMEOUT.as_secs(),
        }),
    }
}

/// Proposals wait for a commit; a bound keeps a burst of them from holding
/// unbounded memory while the cluster has no leader.
const PROPOSE_PERMITS: usize = 256;

fn shared_or_503(slot: &OnceLock<Arc<Shared>>) -> Result<Arc<Shared>, RpcError> {
    slot.get()
        .cloned()
        .ok_or_else(|| RpcError::unavailable("control node starting"))
}

/// Routes `Propose`, `ReadLocal`, `RegisterMember`, `LeaderConfirm`, `MetadataFetch` (a long poll, exempt
/// from a permit limit like the spec's long-poll consumes) and
/// `JoinCluster`.
pub(super) fn routes(router: Router, slot: &Arc<OnceLock<Arc<Shared>>>) -> Router {
    let for_propose = slot.clone();
    let for_read = slot.clone();
    let for_join = slot.clone();
    let limit = OperationLimit::new("propose", PROPOSE_PERMITS);
    router
        .route(opcodes::PROPOSE, limit, move |inbound: Inbound| {
            let slot = for_propose.clone();
            async move {
                let shared = shared_or_503(&slot)?;
                let request: ProposeRequest = inbound.message()?;
                let applied = propose(&shared, request.command, request.forwarded).await?;
                Ok(Response::message(&applied))
            }
        })
        .route(
            opcodes::READ_LOCAL,
            OperationLimit::messaging(),
            move |inbound: Inbound| {
                let slot = for_read.clone();
                async move {
                    let shared = shared_or_503(&slot)?;
                    let request: LocalRead = inbound.message()?;
                    let answer = match request {
                        LocalRead::Topic { name } => LocalReadAnswer::Topic {
                            topic: shared
                                .view
                                .read(|metastore| metastore.topic(&name).cloned()),
                            applied_index: shared.view.applied_index(),
                        },
                        LocalRead::Owners { topic } => LocalReadAnswer::Owners {
                            owners: shared.view.read(|metastore| {
                                let slots = metastore.assignments(&topic).unwrap_or_default();
                                slots
                                    .iter()
                                    .map(|slot| slot.as_ref().map(|a| a.owner.clone()))
                                    .collect()
                            }),
                        },
                        LocalRead::Users => LocalReadAnswer::Users {
                            usernames: shared.view.read(|metastore| {
                                metastore
                                    .users()
                                    .map(|user| user.username.clone())
                                    .collect()
                            }),
                        },
                        LocalRead::Status => LocalReadAnswer::Status(shared.status()),
                    };
                    Ok(Response::message(&answer))
                }
            },
        )
        .route(
            opcodes::REGISTER_MEMBER,
            OperationLimit::new("propose", PROPOSE_PERMITS),
            {
                let slot = slot.clone();
                move |inbound: Inbound| {
                    let slot = slot.clone();
                    async move {
                        let shared = shared_or_503(&slot)?;
                        members::serve(&shared, inbound).await
                    }
                }
            },
        )
        .route(opcodes::LEADER_CONFIRM, OperationLimit::messaging(), {
            let slot = slot.clone();
            move |inbound: Inbound| {
                let slot = slot.clone();
                async move {
                    let shared = shared_or_503(&slot)?;
                    confirm::serve(&shared, inbound).await
                }
            }
        })
        .route(
            opcodes::METADATA_FETCH,
            OperationLimit::exempt("metadata"),
            {
                let slot = slot.clone();
                move |inbound: Inbound| {
                    let slot = slot.clone();
                    async move {
                        let shared = shared_or_503(&slot)?;
                        metadata::serve(&shared, inbound).await
                    }
                }
            },
        )
        .route(
            opcodes::JOIN_CLUSTER,
            OperationLimit::new("join", 4),
            move |inbound: Inbound| {
                let slot = for_join.clone();
                async move {
                    let shared = shared_or_503(&slot)?;
                    join::serve(&shared, inbound).await
                }
            },
        )
}
