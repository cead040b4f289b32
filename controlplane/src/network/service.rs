//! The serving side of Raft RPCs: decode, hand to the local openraft, and
//! answer its `Result`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use narad_clock::Clock;
use narad_protocol::{Inbound, OperationLimit, Response, Router, RpcError};
use openraft::raft::AppendEntriesResponse;

use super::messages::{
    AppendEntries, AppendEntriesAnswer, InstallSnapshot, InstallSnapshotAnswer, Vote, VoteAnswer,
    opcodes,
};
use crate::raft::ControlRaft;

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

/// Lets peers' Raft RPCs into the local openraft until the node stops.
///
/// A stop closes the gate, waiting for the RPCs inside to answer, before
/// it shuts openraft down: an RPC that reached a stopping openraft would be
/// refused there and logged by openraft as an error, in a clean stop. One
/// that finds the gate closed is answered `503`, which the caller's network
/// reports as an unreachable peer.
#[derive(Debug)]
pub struct RaftGate {
    open: tokio::sync::RwLock<bool>,
}

impl Default for RaftGate {
    fn default() -> Self {
        Self {
            open: tokio::sync::RwLock::new(true),
        }
    }
}

impl RaftGate {
    /// Runs `rpc` with the gate open, or answers `503` once it is closed.
    async fn pass<T>(&self, rpc: impl Future<Output = T>) -> Result<T, RpcError> {
        let open = self.open.read().await;
        if !*open {
            return Err(RpcError::unavailable("control node stopping"));
        }
        Ok(rpc.await)
    }

    /// Closes the gate once every RPC inside has answered.
    pub async fn close(&self) {
        *self.open.write().await = false;
    }
}

/// What a follower last heard from a leader: when, on the node's
/// monotonic clock, and the commit index it reported. `/readyz` and the
/// metadata stream's "caught up" read it.
#[derive(Debug)]
pub struct LeaderContact {
    clock: Arc<dyn Clock>,
    /// The clock's reading at the last accepted append, plus one (0 =
    /// never), so a clock that reads 0 still records a contact.
    last_ms: AtomicU64,
    /// Highest commit index any accepted append carried.
    commit_index: AtomicU64,
}

impl LeaderContact {
    /// No contact yet, timed on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            last_ms: AtomicU64::new(0),
            commit_index: AtomicU64::new(0),
        }
    }

    fn heard(&self, commit_index: u64) {
        let now_ms = self.clock.now_ms().saturating_add(1);
        self.last_ms.store(now_ms, Ordering::Relaxed);
        self.commit_index.fetch_max(commit_index, Ordering::Relaxed);
    }

    /// Time since a leader's append was last accepted, if ever.
    pub fn since_last(&self) -> Option<Duration> {
        let last = self.last_ms.load(Ordering::Relaxed);
        (last > 0).then(|| {
            let now_ms = self.clock.now_ms().saturating_add(1);
            Duration::from_millis(now_ms.saturating_sub(last))
        })
    }

    /// The highest commit index a leader reported.
    pub fn commit_index(&self) -> u64 {
        self.commit_index.load(Ordering::Relaxed)
    }
}

/// Adds the three Raft routes to `router`. A request is decoded before
/// anything else, so a malformed or other-version one is answered `400`
/// naming the fault even while Raft is starting.
pub fn raft_routes(
    router: Router,
    slot: &RaftSlot,
    gate: &Arc<RaftGate>,
    contact: &Arc<LeaderContact>,
) -> Router {
    let contact = contact.clone();
    let append = (slot.clone(), gate.clone());
    let vote = (slot.clone(), gate.clone());
    let snapshot = (slot.clone(), gate.clone());
    router
        .route(
            opcodes::RAFT_APPEND_ENTRIES,
            raft_limit(),
            move |inbound: Inbound| {
                let (slot, gate) = append.clone();
                let contact = contact.clone();
                async move {
                    let AppendEntries(request) = inbound.message()?;
                    let raft = started(&slot)?;
                    let commit_index = request.leader_commit.map_or(0, |log_id| log_id.index);
                    let answer = gate.pass(raft.append_entries(request)).await?;
                    // Any answer but "higher vote" means the sender is the
                    // leader this node follows.
                    if matches!(
                        answer,
                        Ok(AppendEntriesResponse::Success
                            | AppendEntriesResponse::PartialSuccess(_)
                            | AppendEntriesResponse::Conflict)
                    ) {
                        contact.heard(commit_index);
                    }
                    Ok(Response::message(&AppendEntriesAnswer(answer)))
                }
            },
        )
        .route(opcodes::RAFT_VOTE, raft_limit(), move |inbound: Inbound| {
            let (slot, gate) = vote.clone();
            async move {
                let Vote(request) = inbound.message()?;
                let raft = started(&slot)?;
                let answer = gate.pass(raft.vote(request)).await?;
                Ok(Response::message(&VoteAnswer(answer)))
            }
        })
        .route(
            opcodes::RAFT_INSTALL_SNAPSHOT,
            raft_limit(),
            move |inbound: Inbound| {
                let (slot, gate) = snapshot.clone();
                async move {
                    let InstallSnapshot(request) = inbound.message()?;
                    let raft = started(&slot)?;
                    let answer = gate.pass(raft.install_snapshot(request)).await?;
                    Ok(Response::message(&InstallSnapshotAnswer(answer)))
                }
            },
        )
}

#[cfg(test)]
mod tests {
    use narad_clock::ManualClock;

    use super::*;

    #[test]
    fn leader_contact_is_timed_on_the_nodes_clock() {
        let clock = Arc::new(ManualClock::new(0));
        let contact = LeaderContact::new(Arc::clone(&clock) as Arc<dyn Clock>);
        assert_eq!(contact.since_last(), None, "never heard");
        // A contact at the clock's origin still counts as one.
        contact.heard(7);
        assert_eq!(contact.since_last(), Some(Duration::ZERO));
        clock.advance(2_500);
        assert_eq!(contact.since_last(), Some(Duration::from_millis(2_500)));
        contact.heard(5);
        assert_eq!(contact.since_last(), Some(Duration::ZERO));
        assert_eq!(contact.commit_index(), 7, "the highest index reported");
    }
}
