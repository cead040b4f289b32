//! Why a member's decommission cannot finish: the one verdict the HTTP API
//! (`409` up front, the dry run, the member listing) and the controller's
//! `narad_decommission_blocked` gauge both give.
//!
//! A decommission finishes when the member owns nothing, no move is headed
//! to it and its dispatch backlog is 0; then it leaves the cluster. What
//! stands in the way is either permanent (it could never finish as the
//! cluster stands: refused up front) or a wait that resolves itself.
//!
//! Data nodes are not Raft voters here (the control plane has its own
//! nodes), so the spec's voter reasons (`below_min_voters`,
//! `no_healthy_majority`, `leader_transfer`) never apply to a member.

use super::limits::MOVES_IN_FLIGHT_MAX;
use super::state::{MemberStatus, Metastore};

/// One reason a decommission cannot finish now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DecommissionBlock {
    /// It owns partitions and no other member could take them.
    NoReceivers,
    /// It is dead and owns partitions: their only copy is on its disk.
    OwnerDead,
    /// Moves are headed to it; they finish (or are aborted) first.
    MoveTarget,
    /// It owns partitions but the cluster's move budget is spent; its
    /// partitions move as earlier moves finish.
    MoveBudgetFull,
}

impl DecommissionBlock {
    /// The spec's code.
    pub fn code(self) -> &'static str {
        match self {
            Self::NoReceivers => "no_receivers",
            Self::OwnerDead => "owner_dead",
            Self::MoveTarget => "move_target",
            Self::MoveBudgetFull => "move_budget_full",
        }
    }

    /// What an operator reads.
    pub fn message(self) -> &'static str {
        match self {
            Self::NoReceivers => {
                "it owns partitions and no other alive, non-draining data node can take them"
            }
            Self::OwnerDead => {
                "it is dead and owns partitions; their only copy is on its disk, so they cannot move until it is back"
            }
            Self::MoveTarget => {
                "partition moves are headed to it; they finish or are aborted first"
            }
            Self::MoveBudgetFull => {
                "the cluster's move budget is spent; its partitions move as earlier moves finish"
            }
        }
    }

    /// Whether the decommission could never finish as the cluster stands
    /// (refused up front with `409`), not merely wait.
    pub fn is_permanent(self) -> bool {
        matches!(self, Self::NoReceivers | Self::OwnerDead)
    }

    /// Every block, in code order.
    pub const ALL: [Self; 4] = [
        Self::NoReceivers,
        Self::OwnerDead,
        Self::MoveTarget,
        Self::MoveBudgetFull,
    ];
}

impl Metastore {
    /// What stands in the way of decommissioning member `id` now, judged
    /// as if it were draining already; empty when nothing does (or when
    /// `id` is no member). The dispatch backlog is the member's own to
    /// report and is not judged here.
    pub fn decommission_blocks(&self, id: &str) -> Vec<DecommissionBlock> {
        let Some(member) = self.member(id) else {
            return Vec::new();
        };
        let (owned, inbound) = self.holdings(id);
        let mut blocks = Vec::new();
        if owned > 0 {
            let others = self
                .members()
                .any(|other| other.id != id && other.is_receiver());
            if !others {
                blocks.push(DecommissionBlock::NoReceivers);
            }
            if member.status == MemberStatus::Dead {
                blocks.push(DecommissionBlock::OwnerDead);
            }
            let idle = self
                .moves()
                .all(|(_, _, assignment)| assignment.owner != id);
            if idle && self.moves().count() >= MOVES_IN_FLIGHT_MAX {
                blocks.push(DecommissionBlock::MoveBudgetFull);
            }
        }
        if inbound > 0 {
            blocks.push(DecommissionBlock::MoveTarget);
        }
        blocks
    }
}
