//! The produce dispatcher: the background mover between the ingress WAL and
//! the partition owners.
//!
//! One reader reads each WAL record once, as it becomes durable, and queues
//! it on its destination partition; each destination has at most one commit
//! in flight; the checkpoint (first seq not done) never passes a record that
//! is not committed, so a crash replays from a point that skips nothing.
//! Failing destinations keep one probe record and are rerouted to a live
//! sibling after 3 s (at once when the owner is dead); hung commits stop
//! taking slots; records of deleted topics are discarded only after the
//! leader confirms.
//!
//! The decision logic is [`Dispatcher`], a state machine with no I/O: the
//! runtime feeds it records, commit outcomes, leader answers and the time,
//! and carries out the [`Command`]s it returns. Its tests need no disk,
//! network or clock.

pub mod constants;
mod machine;
mod pending;
pub mod runtime;
pub mod targets;
mod types;

pub use machine::{Dispatcher, incarnation_runs};
pub use runtime::{DispatchParts, DispatchRuntime, DispatchStatus};
#[cfg(test)]
pub(crate) use runtime::{RecordNames, held_of};
pub use targets::{
    CommitDone, CommitTarget, Declined, LeaderConfirm, NoRemoteTarget, PartitionHolder,
    ReplicaLeader, WalPayload,
};
pub use types::{
    Command, CommitId, CommitOrder, CommitOutcome, DispatchConfig, GoneQuestion, Held, RecordMeta,
};

#[cfg(test)]
mod tests;
