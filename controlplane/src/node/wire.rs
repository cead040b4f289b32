//! The JSON shapes inside the control node's messages (`Propose`,
//! `ReadLocal`, `JoinCluster`).

use serde::{Deserialize, Serialize};

use crate::metastore::{AttachEpoch, Command, IncarnationId, Topic};
use crate::raft::ControlNodeId;

/// A proposed metastore command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProposeRequest {
    /// The command.
    pub command: Command,
    /// Set by a follower that forwards to the leader: the leader must not
    /// forward again (one hop at most).
    pub forwarded: bool,
}

/// What a local read asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LocalRead {
    /// One topic by exact name.
    Topic {
        /// The name.
        name: String,
    },
    /// The owners of a topic's partitions.
    Owners {
        /// The topic name.
        topic: String,
    },
    /// The usernames, in order.
    Users,
    /// The node's Raft status.
    Status,
}

/// The answer to [`LocalRead`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LocalReadAnswer {
    /// The topic, if this replica has it, and the replica's applied index.
    Topic {
        /// The topic.
        topic: Option<Topic>,
        /// The replica's applied index when it was read.
        applied_index: u64,
    },
    /// One slot per partition: its owner, or `None` while it waits.
    Owners {
        /// The owners; empty when the topic is unknown.
        owners: Vec<Option<String>>,
    },
    /// The usernames.
    Users {
        /// In name order.
        usernames: Vec<String>,
    },
    /// The node's status.
    Status(Status),
}

/// A control node's view of Raft, as `/status` and `ReadLocal` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// This node's id.
    pub node_id: ControlNodeId,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub state: String,
    /// Current term.
    pub term: u64,
    /// The leader this node knows of.
    pub leader: Option<ControlNodeId>,
    /// Last log index appended here.
    pub last_log_index: u64,
    /// Last index applied to the metastore here.
    pub applied_index: u64,
    /// Highest commit index a leader reported to this node (a leader's
    /// own applied index when it leads).
    pub leader_commit_index: u64,
    /// Last log index covered by this node's latest snapshot (0 = none).
    pub snapshot_index: u64,
    /// Last log index purged from this node's log (0 = none).
    pub purged_index: u64,
    /// Voters of the current membership.
    pub voters: Vec<ControlNodeId>,
    /// Learners of the current membership.
    pub learners: Vec<ControlNodeId>,
}

/// A control node asks to join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinRequest {
    /// Its id.
    pub id: ControlNodeId,
    /// Its cluster address.
    pub addr: String,
    /// Set when a follower forwards to the leader.
    pub forwarded: bool,
}

/// How a join ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinAnswer {
    /// Added as a learner, caught up, then made a voter.
    Promoted,
    /// It already was a voter.
    Voter,
}

/// A question a data node asks before something destructive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfirmQuestion {
    /// Is topic `name` still incarnation `id`? (No: deleted or recreated,
    /// so that incarnation's data may go.)
    Incarnation {
        /// The topic name.
        name: String,
        /// The incarnation the asker holds.
        id: IncarnationId,
    },
    /// Is `child` still attached under `epoch`? (No: its cursors may go.)
    AttachEpoch {
        /// The child topic.
        child: String,
        /// The attach epoch the asker holds.
        epoch: AttachEpoch,
    },
}

/// A question and whether a follower already forwarded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfirmRequest {
    /// The question.
    pub question: ConfirmQuestion,
    /// Set by a follower forwarding to the leader (one hop at most).
    pub forwarded: bool,
}

/// The leader's answer, read after a linearizable barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfirmAnswer {
    /// The incarnation or epoch is current.
    pub current: bool,
    /// The log index the read reflects (every change committed before the
    /// question was asked is at or below it).
    pub read_index: u64,
}

/// What a data node tells the control plane about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberReport {
    /// First start or restart: its addresses.
    Register {
        /// The node id.
        id: String,
        /// Its HTTP API address.
        http_addr: String,
        /// Its node RPC address.
        rpc_addr: String,
    },
    /// Still running.
    Heartbeat {
        /// The node id.
        id: String,
    },
}

/// A member report and whether a follower already forwarded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRequest {
    /// The report.
    pub report: MemberReport,
    /// Set by a follower forwarding to the leader (one hop at most).
    pub forwarded: bool,
}
