//! Commits to partitions another data node owns, over the cluster transport
//! (`CommitProduceBatch`, opcode 11).
//!
//! Two halves:
//! - the sending side, [`RemoteCommitTarget`]: the dispatcher's
//!   [`CommitTarget`](crate::dispatch::CommitTarget) for owners that are not
//!   this node. It sends a commit order on the produce lane within the
//!   order's budget (30 s, a probe 5 s) and maps the owner's answer to a
//!   [`CommitOutcome`](crate::dispatch::CommitOutcome). An owner that refuses
//!   the trailing incarnation section as an unknown field (`400 unsupported
//!   rpc operation`, an older build) gets the batch again without it on what
//!   is left of the budget, and its batches go without ids for 2 minutes
//!   ([`LegacyOwners`]). A commit still unanswered at the hung threshold
//!   (1 s) has the transport check the owner's liveness, so an owner that
//!   died fails the commit about 2 s into it rather than at the transport's
//!   10 s idle timeout, and the dispatcher's 3 s reroute grace holds.
//! - the owning side, [`CommitService`]: the handler of opcode 11. It hands
//!   the batch to the partition's combiner, which re-checks ownership and
//!   the incarnation under the produce lock exactly as for a local commit,
//!   and answers `200` with the offsets, `412` (incarnation mismatch, both
//!   ids named), `421` (not the owner), `503` (log unavailable, cycle
//!   aborted) or `400` (malformed, unknown trailing field).
//!
//! What it guarantees: an answer of `200` means the owner's partition log
//! made the records durable, CRC-checked and visible; any other ending is
//! reported as not committed, so the records stay in the sender's WAL and
//! are sent again (a duplicate at worst, never a loss). Byte layout, status
//! mapping and the fallback rule: `docs/internals/commit-rpc.md`.

mod client;
mod handler;
mod legacy;
mod verdict;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;

use parking_lot::RwLock;

pub use client::RemoteCommitTarget;
pub use handler::{COMMIT_OPERATION_LIMIT_NAME, CommitService};
pub use legacy::{LEGACY_OWNER_TTL_MS, LEGACY_OWNERS_MAX, LegacyOwners};
pub use verdict::{Verdict, judge};

use crate::topology::NodeId;

/// Where a data node's cluster RPC endpoint is. The metadata replica's
/// member records carry no address, so whoever feeds membership (the
/// control-plane bridge) provides this.
pub trait OwnerAddresses: Send + Sync + fmt::Debug {
    /// The RPC address of `node`, or `None` if it is not known.
    fn rpc_addr(&self, node: NodeId) -> Option<SocketAddr>;
}

/// A table of node addresses, set by whoever learns them.
#[derive(Debug, Default)]
pub struct AddressTable {
    addresses: RwLock<HashMap<NodeId, SocketAddr>>,
}

impl AddressTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records (or replaces) the address of `node`.
    pub fn set(&self, node: NodeId, addr: SocketAddr) {
        self.addresses.write().insert(node, addr);
    }

    /// Forgets `node`.
    pub fn remove(&self, node: NodeId) {
        self.addresses.write().remove(&node);
    }
}

impl OwnerAddresses for AddressTable {
    fn rpc_addr(&self, node: NodeId) -> Option<SocketAddr> {
        self.addresses.read().get(&node).copied()
    }
}

#[cfg(test)]
mod tests;
