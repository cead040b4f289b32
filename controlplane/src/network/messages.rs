//! The control plane's cluster messages and their opcodes.
//!
//! Raft's own requests (append entries, vote, install snapshot) are openraft
//! types; each travels as one typed message whose single field is the
//! request's JSON, behind the codec's version byte. The answer carries
//! `Result<response, RaftError>` the same way, so a refusal by the peer's
//! Raft (not a transport failure) reaches the caller's openraft intact.

use bytes::Bytes;
use narad_protocol::{Decode, DecodeError, Encode, Message, Opcode, Reader, RpcError, Writer};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Opcodes of the control plane's own operations. The spec's numbers end at
/// 32 with later ones unnamed there; the control plane takes 64 and up.
pub mod opcodes {
    use narad_protocol::Opcode;

    /// Raft append entries (and heartbeats), leader to follower.
    pub const RAFT_APPEND_ENTRIES: Opcode = Opcode(64);
    /// Raft vote request, candidate to voter.
    pub const RAFT_VOTE: Opcode = Opcode(65);
    /// One chunk of a Raft snapshot, leader to a lagging follower.
    pub const RAFT_INSTALL_SNAPSHOT: Opcode = Opcode(66);
    /// Propose a metastore command; a follower forwards it to the leader.
    pub const PROPOSE: Opcode = Opcode(67);
    /// Read this node's local replica (no forwarding).
    pub const READ_LOCAL: Opcode = Opcode(68);
    /// The metadata stream: a snapshot, then ordered changes (long poll).
    pub const METADATA_FETCH: Opcode = Opcode(69);
    /// Leader confirmation: the leader runs a linearizable read barrier,
    /// then answers from its state.
    pub const LEADER_CONFIRM: Opcode = Opcode(70);
    /// A data node registers or heartbeats; the leader stamps its clock.
    pub const REGISTER_MEMBER: Opcode = Opcode::REGISTER_MEMBER;
    /// A new control node asks to be added as a learner, then promoted.
    pub const JOIN_CLUSTER: Opcode = Opcode::JOIN_CLUSTER;
}

macro_rules! json_message {
    ($(#[$doc:meta])* $name:ident, $text:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            /// The payload as JSON.
            pub json: Bytes,
        }

        impl $name {
            /// Wraps `value` as JSON.
            ///
            /// # Errors
            /// The serializer's error (a map with non-string keys, say).
            pub fn of<T: Serialize>(value: &T) -> Result<Self, serde_json::Error> {
                Ok(Self {
                    json: Bytes::from(serde_json::to_vec(value)?),
                })
            }

            /// Reads the JSON payload as `T`.
            ///
            /// # Errors
            /// `400 malformed request` naming the message when the JSON is
            /// not a `T`.
            pub fn parse<T: DeserializeOwned>(&self) -> Result<T, RpcError> {
                serde_json::from_slice(&self.json).map_err(|error| {
                    RpcError::bad_request(format!("malformed request: {}: {error}", $text))
                })
            }
        }

        impl Encode for $name {
            fn encode(&self, writer: &mut Writer) {
                writer.bytes(&self.json);
            }
        }

        impl Decode for $name {
            fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
                Ok(Self {
                    json: reader.bytes(concat!($text, " json"))?,
                })
            }
        }

        impl Message for $name {
            const NAME: &'static str = $text;
            const VERSION: u8 = 1;
        }
    };
}

json_message!(
    /// `RaftAppendEntries` request or answer.
    AppendEntriesMessage,
    "RaftAppendEntries"
);
json_message!(
    /// `RaftVote` request or answer.
    VoteMessage,
    "RaftVote"
);
json_message!(
    /// `RaftInstallSnapshot` request or answer.
    InstallSnapshotMessage,
    "RaftInstallSnapshot"
);
json_message!(
    /// `Propose` request (a metastore command) or answer (what applying it
    /// did, at which index).
    ProposeMessage,
    "Propose"
);
json_message!(
    /// `ReadLocal` request (what to read) or answer.
    ReadLocalMessage,
    "ReadLocal"
);
json_message!(
    /// `LeaderConfirm` request (a question) or answer.
    ConfirmMessage,
    "LeaderConfirm"
);
json_message!(
    /// `RegisterMember` request (register or heartbeat) or answer.
    MemberMessage,
    "RegisterMember"
);
json_message!(
    /// `JoinCluster` request (who joins, where) or answer.
    JoinMessage,
    "JoinCluster"
);

/// The opcodes above never collide with the spec's.
const _: () = assert!(opcodes::RAFT_APPEND_ENTRIES.0 > 32);

/// Reads `Opcode` names for logs.
pub fn opcode_name(opcode: Opcode) -> &'static str {
    match opcode {
        opcodes::RAFT_APPEND_ENTRIES => "RaftAppendEntries",
        opcodes::RAFT_VOTE => "RaftVote",
        opcodes::RAFT_INSTALL_SNAPSHOT => "RaftInstallSnapshot",
        opcodes::PROPOSE => "Propose",
        opcodes::READ_LOCAL => "ReadLocal",
        opcodes::METADATA_FETCH => "MetadataFetch",
        opcodes::LEADER_CONFIRM => "LeaderConfirm",
        _ => opcode.name().unwrap_or("unknown"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use narad_protocol::codec::{decode_message, encode_message};

    #[test]
    fn json_message_round_trips_behind_its_version_byte() {
        let message = VoteMessage::of(&vec![1_u64, 2, 3]).expect("encodes");
        let bytes = encode_message(&message);
        assert_eq!(bytes[0], 1);
        let back: VoteMessage = decode_message(bytes).expect("decodes");
        assert_eq!(back.parse::<Vec<u64>>().expect("parses"), vec![1, 2, 3]);
    }

    #[test]
    fn malformed_json_is_a_400_naming_the_message() {
        let message = AppendEntriesMessage {
            json: Bytes::from_static(b"{nope"),
        };
        let error = message.parse::<Vec<u64>>().expect_err("refused");
        assert_eq!(error.status.0, 400);
        assert!(error.message.contains("RaftAppendEntries"), "{error}");
    }

    #[test]
    fn truncated_message_is_refused_not_a_panic() {
        let bytes = encode_message(&ProposeMessage::of(&"x").expect("encodes"));
        for cut in 0..bytes.len() {
            assert!(decode_message::<ProposeMessage>(bytes.slice(..cut)).is_err());
        }
    }
}
