//! Partition moves on the data plane (spec §6, rebalance and
//! decommission): the control plane's planner writes a move's target; the
//! target node copies the partition from its owner and flips the owner to
//! itself with a compare-and-set in Raft.
//!
//! - [`worker`]: one move on its target: catch-up copy into
//!   `<data>/.moves/<topic>-<N>` while traffic flows, handoff, final copy to
//!   the frozen high watermark, verification, fence, `move.marker`, install
//!   (a rename to the partition directory under the topic guard), flip;
//! - [`source`]: the owner's side: listing, chunks, the freeze and its
//!   fence (the freeze itself is the partition store's, `partitions::freeze`);
//! - [`runner`]: starts workers for moves headed here, ends freezes whose
//!   move is over, reclaims copies of partitions that moved away (removed
//!   when the new owner holds all they hold, else quarantined) and staged
//!   copies of moves that no longer come here;
//! - [`service`]: the transfer operations on the cluster transport;
//! - [`decide`]: what a worker decides between attempts (retry pauses,
//!   force-promote), with no I/O, on the node's clock;
//! - [`settle`]: when an installed copy may be rolled back;
//! - [`files`]: what travels and what the target writes;
//! - [`status`]: what a worker reports;
//! - [`window`]: which chunks a copy fetches and writes next, and how far
//!   a file is whole, with no I/O.
//!
//! What it guarantees: a message committed on the source before the flip is
//! in the copy the flip installs (the source commits nothing from the
//! handoff until the move ends, and the copy is verified to recover to the
//! frozen high watermark before the flip is proposed); produce keeps
//! getting `202` throughout (records wait in the ingress WALs while the
//! partition is frozen); a crash of either side at any point leaves the
//! partition whole on the source or installed on the target, never both
//! serving and never neither. Consumer positions travel as read at the
//! fence: acks landing after it, and leases outstanding at the flip, are
//! delivered again by the new owner (at-least-once).
//!
//! A source that stays dead for 2 minutes is promoted past: a copy that
//! reached the source's last listed high watermark flips with
//! `ForcePromote`, a compare-and-set that holds only while the source is
//! marked dead. What the source committed after that listing stays in its
//! own copy, which is quarantined when it comes back.
//!
//! The copy is made where nothing is served or listed (`<data>/.moves`)
//! and becomes the partition directory in one rename, after it is whole,
//! verified, fenced and marked, and before the flip is proposed; a copy in
//! `.moves` is never flipped, so it is removed without asking anyone.
//!
//! What it does not do: run on the simulated disk, which cannot rename a
//! directory; resume a staged copy's bytes across a restart (the worker
//! copies again).

pub mod decide;
pub mod files;
pub mod runner;
pub mod service;
pub mod settle;
pub mod source;
pub mod status;
pub mod window;
pub mod worker;

pub use runner::MoveRunner;
pub use service::{DirectLinks, LinkFactory, QuicLinks, TransferService};

#[cfg(test)]
mod tests;
