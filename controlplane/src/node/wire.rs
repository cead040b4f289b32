//! The control node's messages (`Propose`, `ReadLocal`, `LeaderConfirm`,
//! `RegisterMember`, `JoinCluster`) and their binary encodings: each is a
//! [`Message`](narad_protocol::Message) of version
//! [`CONTROL_MESSAGE_VERSION`](crate::network::messages::CONTROL_MESSAGE_VERSION),
//! field by field, as drawn in `docs/internals/controlplane-rpc.md` ("Wire
//! formats"). The serde derives serve `/status` and logs, not the wire.

use narad_protocol::{Decode, DecodeError, Encode, Reader, Writer};
use serde::{Deserialize, Serialize};

use crate::network::messages::control_message;
use crate::network::metastore_fields::{
    PARTITION_SLOTS_MAX, get_command, get_epoch, get_incarnation, get_topic, put_command,
    put_epoch, put_incarnation, put_topic,
};
use crate::network::raft_fields::MEMBERSHIP_NODES_MAX;
use crate::raft::{Applied, ControlNodeId};
use narad_meta::follow::AppliedOutcome;
use narad_meta::{AttachEpoch, Command, IncarnationId, Topic};
use narad_protocol::fields::{
    get_bool, get_count, get_option, invalid, put_bool, put_count, put_option,
};

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
    /// The newest metastore command version this node decodes; `None` in
    /// the answer of a release before the field (it decodes at most
    /// version 3). Written last, so such a release's answer still reads.
    pub command_version: Option<u8>,
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
    /// Does `member` still own, or receive in a move, `partition` of
    /// incarnation `id` of topic `name`? (No: its copy there may go.)
    PartitionHolder {
        /// The topic name.
        name: String,
        /// The incarnation the asker's copy belongs to.
        id: IncarnationId,
        /// The partition.
        partition: u32,
        /// The asker's member id.
        member: String,
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

/// The most usernames a `ReadLocal` answer lists. The metastore does not
/// cap users; a bound this high is never reached by an operator's users and
/// stops a forged count.
pub const USERNAMES_MAX: u32 = 1 << 20;

/// Version of the `ReadLocal` answer: one above
/// [`CONTROL_MESSAGE_VERSION`](crate::network::messages::CONTROL_MESSAGE_VERSION),
/// because the topic record it carries gained the idempotency window (a
/// value inside a message carries no version of its own). Version 2, the
/// record without it, is refused by name: `ReadLocal` serves operators and
/// tests, not the data path, so a mixed cluster loses only that read.
pub const LOCAL_READ_ANSWER_VERSION: u8 = 3;

const _: () =
    assert!(LOCAL_READ_ANSWER_VERSION > crate::network::messages::CONTROL_MESSAGE_VERSION);

impl narad_protocol::Message for LocalReadAnswer {
    const NAME: &'static str = "ReadLocal answer";
    const VERSION: u8 = LOCAL_READ_ANSWER_VERSION;
}

control_message!(
    ProposeRequest => "Propose",
    Applied => "Applied",
    LocalRead => "ReadLocal",
    ConfirmRequest => "LeaderConfirm",
    ConfirmAnswer => "LeaderConfirm answer",
    MemberRequest => "RegisterMember",
    JoinRequest => "JoinCluster",
    JoinAnswer => "JoinCluster answer",
);

impl Encode for ProposeRequest {
    fn encode(&self, writer: &mut Writer) {
        put_command(writer, &self.command);
        put_bool(writer, self.forwarded);
    }
}

impl Decode for ProposeRequest {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            command: get_command(reader)?,
            forwarded: get_bool(reader, "forwarded")?,
        })
    }
}

/// Tags of [`AppliedOutcome`].
mod outcome {
    pub(super) const APPLIED: u8 = 1;
    pub(super) const UNCHANGED: u8 = 2;
    pub(super) const REFUSED: u8 = 3;
    pub(super) const NO_COMMAND: u8 = 4;
}

impl Encode for Applied {
    fn encode(&self, writer: &mut Writer) {
        writer.u64(self.index);
        match &self.outcome {
            AppliedOutcome::Applied => writer.u8(outcome::APPLIED),
            AppliedOutcome::Unchanged => writer.u8(outcome::UNCHANGED),
            AppliedOutcome::Refused { status, message } => {
                writer.u8(outcome::REFUSED);
                writer.u16(*status);
                writer.str(message);
            }
            AppliedOutcome::NoCommand => writer.u8(outcome::NO_COMMAND),
        }
    }
}

impl Decode for Applied {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let index = reader.u64("applied index")?;
        let outcome = match reader.u8("outcome")? {
            outcome::APPLIED => AppliedOutcome::Applied,
            outcome::UNCHANGED => AppliedOutcome::Unchanged,
            outcome::REFUSED => AppliedOutcome::Refused {
                status: reader.u16("refusal status")?,
                message: reader.str("refusal message")?,
            },
            outcome::NO_COMMAND => AppliedOutcome::NoCommand,
            other => return Err(invalid("outcome", other)),
        };
        Ok(Self { index, outcome })
    }
}

/// Tags of [`LocalRead`] and of the matching [`LocalReadAnswer`].
mod read {
    pub(super) const TOPIC: u8 = 1;
    pub(super) const OWNERS: u8 = 2;
    pub(super) const USERS: u8 = 3;
    pub(super) const STATUS: u8 = 4;
}

impl Encode for LocalRead {
    fn encode(&self, writer: &mut Writer) {
        match self {
            Self::Topic { name } => {
                writer.u8(read::TOPIC);
                writer.str(name);
            }
            Self::Owners { topic } => {
                writer.u8(read::OWNERS);
                writer.str(topic);
            }
            Self::Users => writer.u8(read::USERS),
            Self::Status => writer.u8(read::STATUS),
        }
    }
}

impl Decode for LocalRead {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match reader.u8("read kind")? {
            read::TOPIC => Self::Topic {
                name: reader.str("topic name")?,
            },
            read::OWNERS => Self::Owners {
                topic: reader.str("topic name")?,
            },
            read::USERS => Self::Users,
            read::STATUS => Self::Status,
            other => return Err(invalid("read kind", other)),
        })
    }
}

impl Encode for LocalReadAnswer {
    fn encode(&self, writer: &mut Writer) {
        match self {
            Self::Topic {
                topic,
                applied_index,
            } => {
                writer.u8(read::TOPIC);
                put_option(writer, topic.as_ref(), put_topic);
                writer.u64(*applied_index);
            }
            Self::Owners { owners } => {
                writer.u8(read::OWNERS);
                put_count(writer, "owners", owners.len(), PARTITION_SLOTS_MAX);
                for owner in owners {
                    put_option(writer, owner.as_deref(), Writer::str);
                }
            }
            Self::Users { usernames } => {
                writer.u8(read::USERS);
                put_count(writer, "usernames", usernames.len(), USERNAMES_MAX);
                for username in usernames {
                    writer.str(username);
                }
            }
            Self::Status(status) => {
                writer.u8(read::STATUS);
                status.encode(writer);
            }
        }
    }
}

impl Decode for LocalReadAnswer {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match reader.u8("read kind")? {
            read::TOPIC => Self::Topic {
                topic: get_option(reader, "topic", get_topic)?,
                applied_index: reader.u64("applied index")?,
            },
            read::OWNERS => {
                let count = get_count(reader, "owners", PARTITION_SLOTS_MAX, 1)?;
                let mut owners = Vec::with_capacity(count);
                for _ in 0..count {
                    owners.push(get_option(reader, "owner", |reader| reader.str("owner"))?);
                }
                Self::Owners { owners }
            }
            read::USERS => {
                let count = get_count(reader, "usernames", USERNAMES_MAX, 4)?;
                let mut usernames = Vec::with_capacity(count);
                for _ in 0..count {
                    usernames.push(reader.str("username")?);
                }
                Self::Users { usernames }
            }
            read::STATUS => Self::Status(Status::decode(reader)?),
            other => return Err(invalid("read kind", other)),
        })
    }
}

fn put_ids(writer: &mut Writer, field: &'static str, ids: &[ControlNodeId]) {
    put_count(writer, field, ids.len(), MEMBERSHIP_NODES_MAX);
    for id in ids {
        writer.u64(*id);
    }
}

fn get_ids(reader: &mut Reader, field: &'static str) -> Result<Vec<ControlNodeId>, DecodeError> {
    let count = get_count(reader, field, MEMBERSHIP_NODES_MAX, 8)?;
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        ids.push(reader.u64(field)?);
    }
    Ok(ids)
}

impl Encode for Status {
    fn encode(&self, writer: &mut Writer) {
        writer.u64(self.node_id);
        writer.str(&self.state);
        writer.u64(self.term);
        put_option(writer, self.leader.as_ref(), |writer, id| writer.u64(*id));
        writer.u64(self.last_log_index);
        writer.u64(self.applied_index);
        writer.u64(self.leader_commit_index);
        writer.u64(self.snapshot_index);
        writer.u64(self.purged_index);
        put_ids(writer, "voters", &self.voters);
        put_ids(writer, "learners", &self.learners);
        if let Some(version) = self.command_version {
            writer.u8(version);
        }
    }
}

impl Decode for Status {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            node_id: reader.u64("node id")?,
            state: reader.str("state")?,
            term: reader.u64("term")?,
            leader: get_option(reader, "leader", |reader| reader.u64("leader"))?,
            last_log_index: reader.u64("last log index")?,
            applied_index: reader.u64("applied index")?,
            leader_commit_index: reader.u64("leader commit index")?,
            snapshot_index: reader.u64("snapshot index")?,
            purged_index: reader.u64("purged index")?,
            voters: get_ids(reader, "voters")?,
            learners: get_ids(reader, "learners")?,
            // The status ends its answer: an older release wrote no more.
            command_version: if reader.remaining() > 0 {
                Some(reader.u8("command version")?)
            } else {
                None
            },
        })
    }
}

/// Tags of [`ConfirmQuestion`].
mod question {
    pub(super) const INCARNATION: u8 = 1;
    pub(super) const ATTACH_EPOCH: u8 = 2;
    pub(super) const PARTITION_HOLDER: u8 = 3;
}

impl Encode for ConfirmRequest {
    fn encode(&self, writer: &mut Writer) {
        match &self.question {
            ConfirmQuestion::Incarnation { name, id } => {
                writer.u8(question::INCARNATION);
                writer.str(name);
                put_incarnation(writer, id);
            }
            ConfirmQuestion::AttachEpoch { child, epoch } => {
                writer.u8(question::ATTACH_EPOCH);
                writer.str(child);
                put_epoch(writer, epoch);
            }
            ConfirmQuestion::PartitionHolder {
                name,
                id,
                partition,
                member,
            } => {
                writer.u8(question::PARTITION_HOLDER);
                writer.str(name);
                put_incarnation(writer, id);
                writer.u32(*partition);
                writer.str(member);
            }
        }
        put_bool(writer, self.forwarded);
    }
}

impl Decode for ConfirmRequest {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let question = match reader.u8("question kind")? {
            question::INCARNATION => ConfirmQuestion::Incarnation {
                name: reader.str("topic name")?,
                id: get_incarnation(reader, "incarnation id")?,
            },
            question::ATTACH_EPOCH => ConfirmQuestion::AttachEpoch {
                child: reader.str("child name")?,
                epoch: get_epoch(reader, "attach epoch")?,
            },
            question::PARTITION_HOLDER => ConfirmQuestion::PartitionHolder {
                name: reader.str("topic name")?,
                id: get_incarnation(reader, "incarnation id")?,
                partition: reader.u32("partition")?,
                member: reader.str("member id")?,
            },
            other => return Err(invalid("question kind", other)),
        };
        Ok(Self {
            question,
            forwarded: get_bool(reader, "forwarded")?,
        })
    }
}

impl Encode for ConfirmAnswer {
    fn encode(&self, writer: &mut Writer) {
        put_bool(writer, self.current);
        writer.u64(self.read_index);
    }
}

impl Decode for ConfirmAnswer {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            current: get_bool(reader, "current")?,
            read_index: reader.u64("read index")?,
        })
    }
}

/// Tags of [`MemberReport`].
mod report {
    pub(super) const REGISTER: u8 = 1;
    pub(super) const HEARTBEAT: u8 = 2;
}

impl Encode for MemberRequest {
    fn encode(&self, writer: &mut Writer) {
        match &self.report {
            MemberReport::Register {
                id,
                http_addr,
                rpc_addr,
            } => {
                writer.u8(report::REGISTER);
                writer.str(id);
                writer.str(http_addr);
                writer.str(rpc_addr);
            }
            MemberReport::Heartbeat { id } => {
                writer.u8(report::HEARTBEAT);
                writer.str(id);
            }
        }
        put_bool(writer, self.forwarded);
    }
}

impl Decode for MemberRequest {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let report = match reader.u8("report kind")? {
            report::REGISTER => MemberReport::Register {
                id: reader.str("member id")?,
                http_addr: reader.str("http address")?,
                rpc_addr: reader.str("rpc address")?,
            },
            report::HEARTBEAT => MemberReport::Heartbeat {
                id: reader.str("member id")?,
            },
            other => return Err(invalid("report kind", other)),
        };
        Ok(Self {
            report,
            forwarded: get_bool(reader, "forwarded")?,
        })
    }
}

impl Encode for JoinRequest {
    fn encode(&self, writer: &mut Writer) {
        writer.u64(self.id);
        writer.str(&self.addr);
        put_bool(writer, self.forwarded);
    }
}

impl Decode for JoinRequest {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            id: reader.u64("node id")?,
            addr: reader.str("cluster address")?,
            forwarded: get_bool(reader, "forwarded")?,
        })
    }
}

/// Tags of [`JoinAnswer`].
mod join {
    pub(super) const PROMOTED: u8 = 1;
    pub(super) const VOTER: u8 = 2;
}

impl Encode for JoinAnswer {
    fn encode(&self, writer: &mut Writer) {
        writer.u8(match self {
            Self::Promoted => join::PROMOTED,
            Self::Voter => join::VOTER,
        });
    }
}

impl Decode for JoinAnswer {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        match reader.u8("join answer")? {
            join::PROMOTED => Ok(Self::Promoted),
            join::VOTER => Ok(Self::Voter),
            other => Err(invalid("join answer", other)),
        }
    }
}
