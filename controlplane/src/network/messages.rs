//! The control plane's opcodes and the Raft RPC messages.
//!
//! Each openraft request travels as its own message, encoded field by field
//! (`raft_fields`), behind the codec's version byte. The answer carries the
//! peer's `Result<response, RaftError>` the same way, so a refusal by the
//! peer's Raft (not a transport failure) reaches the caller's openraft
//! intact. The control node's own messages (`Propose`, `ReadLocal`, …) are
//! the types of `node::wire`. Layouts:
//! `docs/internals/controlplane-rpc.md`, "Wire formats".

use narad_protocol::{Decode, DecodeError, Encode, Reader, Writer};
use openraft::error::{Infallible, InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use super::raft_fields::{
    ENTRY_BYTES_MIN, get_entry, get_fatal, get_install_snapshot_error, get_opt_log_id,
    get_snapshot_meta, get_vote, put_entry, put_fatal, put_install_snapshot_error, put_opt_log_id,
    put_snapshot_meta, put_vote,
};
use crate::raft::{ControlNodeId, TypeConfig};
use narad_protocol::fields::{get_bool, get_count, invalid, put_bool, put_count};

/// Opcodes of the control plane's own operations. The spec's numbers end at
/// 32 with later ones unnamed there; the control plane takes 64 and up. The
/// numbers and names live in `narad_protocol`'s one opcode registry.
pub mod opcodes {
    use narad_protocol::Opcode;

    /// Raft append entries (and heartbeats), leader to follower.
    pub const RAFT_APPEND_ENTRIES: Opcode = Opcode::RAFT_APPEND_ENTRIES;
    /// Raft vote request, candidate to voter.
    pub const RAFT_VOTE: Opcode = Opcode::RAFT_VOTE;
    /// One chunk of a Raft snapshot, leader to a lagging follower.
    pub const RAFT_INSTALL_SNAPSHOT: Opcode = Opcode::RAFT_INSTALL_SNAPSHOT;
    /// Propose a metastore command; a follower forwards it to the leader.
    pub const PROPOSE: Opcode = Opcode::PROPOSE;
    /// Read this node's local replica (no forwarding).
    pub const READ_LOCAL: Opcode = Opcode::READ_LOCAL;
    /// The metadata stream: a snapshot, then ordered changes (long poll).
    pub const METADATA_FETCH: Opcode = Opcode::METADATA_FETCH;
    /// Leader confirmation: the leader runs a linearizable read barrier,
    /// then answers from its state.
    pub const LEADER_CONFIRM: Opcode = Opcode::LEADER_CONFIRM;
    /// A data node registers or heartbeats; the leader stamps its clock.
    pub const REGISTER_MEMBER: Opcode = Opcode::REGISTER_MEMBER;
    /// A new control node asks to be added as a learner, then promoted.
    pub const JOIN_CLUSTER: Opcode = Opcode::JOIN_CLUSTER;
}

/// The opcodes above never collide with the spec's.
const _: () = assert!(opcodes::RAFT_APPEND_ENTRIES.0 > 32);

/// Version of every control-plane message this build speaks. Version 1 was
/// one JSON field per message; a peer still on it is refused by name
/// ("RaftVote version 1 is not supported (this build speaks version 2)").
pub const CONTROL_MESSAGE_VERSION: u8 = 2;

/// Makes each named type a [`Message`](narad_protocol::Message) of version
/// [`CONTROL_MESSAGE_VERSION`] under its name on the wire.
macro_rules! control_message {
    ($($name:ident => $text:literal),* $(,)?) => {
        $(impl narad_protocol::Message for $name {
            const NAME: &'static str = $text;
            const VERSION: u8 = $crate::network::messages::CONTROL_MESSAGE_VERSION;
        })*
    };
}
pub(crate) use control_message;

/// The most entries one append decodes. openraft sends at most
/// `max_payload_entries` per append (300 by default, and this crate keeps
/// the default); the bound only stops a forged count.
pub const APPEND_ENTRIES_MAX: u32 = 4_096;

/// `RaftAppendEntries` request.
#[derive(Debug, Clone)]
pub struct AppendEntries(pub AppendEntriesRequest<TypeConfig>);

/// `RaftAppendEntries` answer: the peer's Raft result.
#[derive(Debug, PartialEq, Eq)]
pub struct AppendEntriesAnswer(
    pub Result<AppendEntriesResponse<ControlNodeId>, RaftError<ControlNodeId>>,
);

/// `RaftVote` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vote(pub VoteRequest<ControlNodeId>);

/// `RaftVote` answer: the peer's Raft result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoteAnswer(pub Result<VoteResponse<ControlNodeId>, RaftError<ControlNodeId>>);

/// `RaftInstallSnapshot` request: one chunk of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallSnapshot(pub InstallSnapshotRequest<TypeConfig>);

/// `RaftInstallSnapshot` answer: the peer's Raft result.
#[derive(Debug, PartialEq, Eq)]
pub struct InstallSnapshotAnswer(
    pub  Result<
        InstallSnapshotResponse<ControlNodeId>,
        RaftError<ControlNodeId, InstallSnapshotError>,
    >,
);

control_message!(
    AppendEntries => "RaftAppendEntries",
    AppendEntriesAnswer => "RaftAppendEntries answer",
    Vote => "RaftVote",
    VoteAnswer => "RaftVote answer",
    InstallSnapshot => "RaftInstallSnapshot",
    InstallSnapshotAnswer => "RaftInstallSnapshot answer",
);

impl Encode for AppendEntries {
    fn encode(&self, writer: &mut Writer) {
        let request = &self.0;
        put_vote(writer, &request.vote);
        put_opt_log_id(writer, request.prev_log_id.as_ref());
        put_opt_log_id(writer, request.leader_commit.as_ref());
        put_count(writer, "entries", request.entries.len(), APPEND_ENTRIES_MAX);
        for entry in &request.entries {
            put_entry(writer, entry);
        }
    }
}

impl Decode for AppendEntries {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let vote = get_vote(reader)?;
        let prev_log_id = get_opt_log_id(reader, "prev log id")?;
        let leader_commit = get_opt_log_id(reader, "leader commit")?;
        let count = get_count(reader, "entries", APPEND_ENTRIES_MAX, ENTRY_BYTES_MIN)?;
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            entries.push(get_entry(reader)?);
        }
        Ok(Self(AppendEntriesRequest {
            vote,
            prev_log_id,
            entries,
            leader_commit,
        }))
    }
}

/// Tags of a Raft result on the wire.
mod result {
    pub(super) const OK: u8 = 0;
    pub(super) const FATAL: u8 = 1;
    pub(super) const API: u8 = 2;
}

/// An API error of a Raft RPC: none for append and vote, a snapshot
/// mismatch for install snapshot.
trait ApiError: Sized {
    fn put(&self, writer: &mut Writer);
    fn get(reader: &mut Reader) -> Result<Self, DecodeError>;
}

impl ApiError for Infallible {
    fn put(&self, _writer: &mut Writer) {
        match *self {}
    }

    fn get(_reader: &mut Reader) -> Result<Self, DecodeError> {
        Err(invalid("raft result kind (no API error here)", result::API))
    }
}

impl ApiError for InstallSnapshotError {
    fn put(&self, writer: &mut Writer) {
        put_install_snapshot_error(writer, self);
    }

    fn get(reader: &mut Reader) -> Result<Self, DecodeError> {
        get_install_snapshot_error(reader)
    }
}

fn put_result<T, E: ApiError>(
    writer: &mut Writer,
    value: &Result<T, RaftError<ControlNodeId, E>>,
    put: impl FnOnce(&mut Writer, &T),
) {
    match value {
        Ok(value) => {
            writer.u8(result::OK);
            put(writer, value);
        }
        Err(RaftError::Fatal(fatal)) => {
            writer.u8(result::FATAL);
            put_fatal(writer, fatal);
        }
        Err(RaftError::APIError(error)) => {
            writer.u8(result::API);
            error.put(writer);
        }
    }
}

fn get_result<T, E: ApiError>(
    reader: &mut Reader,
    get: impl FnOnce(&mut Reader) -> Result<T, DecodeError>,
) -> Result<Result<T, RaftError<ControlNodeId, E>>, DecodeError> {
    Ok(match reader.u8("raft result kind")? {
        result::OK => Ok(get(reader)?),
        result::FATAL => Err(RaftError::Fatal(get_fatal(reader)?)),
        result::API => Err(RaftError::APIError(E::get(reader)?)),
        other => return Err(invalid("raft result kind", other)),
    })
}

/// Tags of [`AppendEntriesResponse`].
mod append {
    pub(super) const SUCCESS: u8 = 1;
    pub(super) const PARTIAL_SUCCESS: u8 = 2;
    pub(super) const CONFLICT: u8 = 3;
    pub(super) const HIGHER_VOTE: u8 = 4;
}

impl Encode for AppendEntriesAnswer {
    fn encode(&self, writer: &mut Writer) {
        put_result(writer, &self.0, |writer, response| match response {
            AppendEntriesResponse::Success => writer.u8(append::SUCCESS),
            AppendEntriesResponse::PartialSuccess(matching) => {
                writer.u8(append::PARTIAL_SUCCESS);
                put_opt_log_id(writer, matching.as_ref());
            }
            AppendEntriesResponse::Conflict => writer.u8(append::CONFLICT),
            AppendEntriesResponse::HigherVote(vote) => {
                writer.u8(append::HIGHER_VOTE);
                put_vote(writer, vote);
            }
        });
    }
}

impl Decode for AppendEntriesAnswer {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        get_result(reader, |reader| {
            Ok(match reader.u8("append entries response kind")? {
                append::SUCCESS => AppendEntriesResponse::Success,
                append::PARTIAL_SUCCESS => {
                    AppendEntriesResponse::PartialSuccess(get_opt_log_id(reader, "matching")?)
                }
                append::CONFLICT => AppendEntriesResponse::Conflict,
                append::HIGHER_VOTE => AppendEntriesResponse::HigherVote(get_vote(reader)?),
                other => return Err(invalid("append entries response kind", other)),
            })
        })
        .map(Self)
    }
}

impl Encode for Vote {
    fn encode(&self, writer: &mut Writer) {
        put_vote(writer, &self.0.vote);
        put_opt_log_id(writer, self.0.last_log_id.as_ref());
    }
}

impl Decode for Vote {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let vote = get_vote(reader)?;
        let last_log_id = get_opt_log_id(reader, "last log id")?;
        Ok(Self(VoteRequest { vote, last_log_id }))
    }
}

impl Encode for VoteAnswer {
    fn encode(&self, writer: &mut Writer) {
        put_result(writer, &self.0, |writer, response| {
            put_vote(writer, &response.vote);
            put_bool(writer, response.vote_granted);
            put_opt_log_id(writer, response.last_log_id.as_ref());
        });
    }
}

impl Decode for VoteAnswer {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        get_result(reader, |reader| {
            Ok(VoteResponse {
                vote: get_vote(reader)?,
                vote_granted: get_bool(reader, "vote granted")?,
                last_log_id: get_opt_log_id(reader, "last log id")?,
            })
        })
        .map(Self)
    }
}

impl Encode for InstallSnapshot {
    fn encode(&self, writer: &mut Writer) {
        let request = &self.0;
        put_vote(writer, &request.vote);
        put_snapshot_meta(writer, &request.meta);
        writer.u64(request.offset);
        writer.bytes(&request.data);
        put_bool(writer, request.done);
    }
}

impl Decode for InstallSnapshot {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self(InstallSnapshotRequest {
            vote: get_vote(reader)?,
            meta: get_snapshot_meta(reader)?,
            offset: reader.u64("snapshot offset")?,
            data: reader.bytes("snapshot chunk")?.to_vec(),
            done: get_bool(reader, "snapshot done")?,
        }))
    }
}

impl Encode for InstallSnapshotAnswer {
    fn encode(&self, writer: &mut Writer) {
        put_result(writer, &self.0, |writer, response| {
            put_vote(writer, &response.vote);
        });
    }
}

impl Decode for InstallSnapshotAnswer {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        get_result(reader, |reader| {
            Ok(InstallSnapshotResponse {
                vote: get_vote(reader)?,
            })
        })
        .map(Self)
    }
}
