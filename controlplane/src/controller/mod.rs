//! The controller: the decisions the Raft leader makes about the metastore
//! on its own initiative.
//!
//! [`Controller::decide`] is a pure function of the metastore state and the
//! time. It returns [`Decision`]: the commands to propose (partition
//! placements, dead markings), whether the root admin must be seeded, the
//! members the dead-marking breaker held back, and when to pass again. A
//! thin runtime on the leader proposes the commands and calls `decide`
//! again on a membership change or at `next_pass_at`. Every command it
//! proposes is checked again by `apply` against the state it meets (a slot
//! already filled, a heartbeat newer than the one judged), so a stale or
//! repeated decision is refused, never applied twice.
//!
//! Rules:
//! - Waiting partitions are placed round-robin over receivers: members that
//!   are alive, not draining, and heard from within the dead-after span.
//!   A child's partition p avoids the owner of its parent's partition p
//!   when another receiver exists (anti-affinity). Parents are placed
//!   before children so that the parent's owner is known.
//! - A partition that has an owner is never placed again: a dead owner's
//!   partitions stay its own (their only copy is on its disk).
//! - An alive member not heard from for the dead-after span is marked dead,
//!   but not before the leader has led for the election grace, and not
//!   when the dead-marking breaker trips (see [`decide`](Controller::decide)).
//! - Rebalance: the planner ([`plan_moves`]) sets move targets so every
//!   receiver holds its share, draining members' partitions first, at most
//!   eight moves in flight. The target nodes move the data and flip the
//!   owner themselves. A move whose target stays dead for two minutes is
//!   aborted.

mod colocated;
pub mod constants;
mod decide;
mod plan;

pub use colocated::colocated_child_partitions;
pub use decide::{Controller, ControllerConfig, Decision};
pub use plan::plan_moves;

#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod tests;
