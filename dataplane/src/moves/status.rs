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
/// reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveWorkerStatus {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The member the partition moves from.
    pub source: String,
    /// The member it moves to: this node.
    pub target: String,
    /// When the worker started, Unix ms.
    pub started_at_ms: u64,
    /// Where the worker is: `copying`, `frozen`, `flip_pending`,
    /// `waiting_for_source` or `blocked` (spec §1.9).
    pub phase: String,
    /// Attempts so far.
    pub attempts: u32,
    /// The last attempt's error, if it failed.
    pub last_error: Option<String>,
    /// Bytes copied so far.
    pub copied_bytes: u64,
    /// Why the worker cannot go on, if it cannot: `copy_unverifiable` or
    /// `source_dead_copy_behind` (spec §1.9).
    pub blocked: Option<String>,
}

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
