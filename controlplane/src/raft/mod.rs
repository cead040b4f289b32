//! The openraft type configuration of the control plane: what a log entry
//! carries (a metastore [`Command`]), what applying one answers
//! ([`Applied`]), how a control node is named (a `u64` id) and reached (its
//! cluster address, in [`openraft::BasicNode`]).

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use narad_meta::Command;
use narad_meta::follow::AppliedOutcome;

/// A control node's Raft id. openraft wants an integer; operators give it as
/// `cluster.node_id` (a positive number for control nodes).
pub type ControlNodeId = u64;

openraft::declare_raft_types!(
    /// The control plane's openraft types.
    pub TypeConfig:
        D = Command,
        R = Applied,
        NodeId = ControlNodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The Raft handle of a control node.
pub type ControlRaft = openraft::Raft<TypeConfig>;
/// A log id of this configuration.
pub type LogId = openraft::LogId<ControlNodeId>;
/// A log entry of this configuration.
pub type Entry = openraft::Entry<TypeConfig>;
/// A membership as stored with the state machine.
pub type StoredMembership = openraft::StoredMembership<ControlNodeId, openraft::BasicNode>;
/// A snapshot's metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<ControlNodeId, openraft::BasicNode>;
/// A storage failure, as openraft wants it reported.
pub type StorageError = openraft::StorageError<ControlNodeId>;

/// What applying one log entry did, as the proposer is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The entry's log index.
    pub index: u64,
    /// The result.
    pub outcome: AppliedOutcome,
}
