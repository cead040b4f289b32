//! What a move worker reports: the spec's worker phases, for
//! `/v1/cluster/members?detail=true`, `/v1/cluster/moves?detail=true` and
//! the move metrics.

use crate::topology::Destination;

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

/// One worker's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerStatus {
    /// The partition.
    pub destination: Destination,
    /// Its owner, copied from.
    pub source: String,
    /// This node.
    pub target: String,
    /// When the worker began (Unix ms).
    pub started_at_ms: u64,
    /// Where it is.
    pub phase: MovePhase,
    /// Failed attempts so far.
    pub attempts: u32,
    /// The last attempt's error.
    pub last_error: Option<String>,
    /// Bytes copied by the current attempt.
    pub copied_bytes: u64,
    /// Why it cannot go on by itself (`copy_unverifiable`,
    /// `source_dead_copy_behind`), if it cannot.
    pub blocked: Option<String>,
}
