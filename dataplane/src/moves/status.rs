//! What a move worker reports: the spec's worker phases, for
//! `/v1/cluster/members?detail=true`, `/v1/cluster/moves?detail=true` and
//! the move metrics.

use std::fmt;

/// Where a worker is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MovePhase {
    /// Copying while traffic flows.
    Copying,
    /// The source is frozen; the rest is being copied and verified.
    Frozen,
    /// The copy is whole and fenced; the flip is being proposed.
    FlipPending,
    /// The source did not answer; the worker waits for it.
    WaitingForSource,
    /// The flip committed.
    Done,
    /// The move was cleared; the copy is gone.
    Abandoned,
}

impl MovePhase {
    /// The spec's name (`blocked` is reported through `blocked`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Copying => "copying",
            Self::Frozen => "frozen",
            Self::FlipPending => "flip_pending",
            Self::WaitingForSource => "waiting_for_source",
            Self::Done => "done",
            Self::Abandoned => "abandoned",
        }
    }
}

/// One partition move as the worker copying it (on the move's target)
/// reports it: exactly what a node status answer carries for it on the
/// wire, so the report is the wire type itself. `phase` is a
/// [`MovePhase::name`] or `blocked`; `blocked` says why a worker cannot go
/// on (`copy_unverifiable`, `source_dead_copy_behind`; spec §1.9).
pub type MoveWorkerStatus = narad_protocol::MoveReport;

/// The seam a move runner reports its workers through.
///
/// Called on every node status request, from an async task: it must
/// answer at once from memory (a snapshot under a lock), never wait on
/// disk or network. At most
/// [`NODE_MOVES_MAX`](narad_protocol::node_status::NODE_MOVES_MAX) workers
/// are reported; longer texts are cut to
/// [`NODE_STATUS_TEXT_BYTES_MAX`](narad_protocol::node_status::NODE_STATUS_TEXT_BYTES_MAX)
/// bytes.
pub trait MoveReports: Send + Sync + fmt::Debug {
    /// The move workers running on this node now.
    fn moves(&self) -> Vec<MoveWorkerStatus>;
}
