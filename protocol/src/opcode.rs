//! Operation codes: the stable, append-only numbers of the spec (§7).
//!
//! An opcode is a plain byte on the wire, not a closed enum, because a newer
//! peer may send one this build does not know. The frame layer carries it
//! through; the server's router answers an opcode without a handler with
//! `400 unsupported rpc operation`, which tells the sender to fall back.
//!
//! Opcode 0 (`PING`) belongs to the transport: every server answers it with
//! `204` itself, before any route, and a router cannot claim it.

use std::fmt;

/// One operation code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

macro_rules! opcodes {
    ($($name:ident = $value:literal, $text:literal;)*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", $text, "` (", stringify!($value), ").")]
                pub const $name: Opcode = Opcode($value);
            )*

            /// The spec's name of a known opcode.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($text),)*
                    _ => None,
                }
            }
        }
    };
}

opcodes! {
    PING = 0, "Ping";
    PRODUCE = 1, "Produce";
    CONSUME = 2, "Consume";
    ACK = 3, "Ack";
    CREATE_TOPIC = 4, "CreateTopic";
    ALTER_TOPIC = 5, "AlterTopic";
    DELETE_TOPIC = 6, "DeleteTopic";
    PURGE_TOPIC = 7, "PurgeTopic";
    TOPIC_PARTITION_STATS = 8, "TopicPartitionStats";
    REGISTER_MEMBER = 9, "RegisterMember";
    COMMIT_PRODUCE = 10, "CommitProduce";
    COMMIT_PRODUCE_BATCH = 11, "CommitProduceBatch";
    CREATE_USER = 12, "CreateUser";
    UPDATE_USER = 13, "UpdateUser";
    DELETE_USER = 14, "DeleteUser";
    ATTACH_CHILD = 15, "AttachChild";
    DETACH_CHILD = 16, "DetachChild";
    FANOUT_CURSORS = 17, "FanoutCursors";
    EXTEND_ACK = 18, "ExtendAck";
    NACK = 19, "Nack";
    GET_TOPIC = 20, "GetTopic";
    JOIN_CLUSTER = 21, "JoinCluster";
    LIST_PARTITION_SEGMENTS = 22, "ListPartitionSegments";
    FETCH_SEGMENT_CHUNK = 23, "FetchSegmentChunk";
    PREPARE_HANDOFF = 24, "PrepareHandoff";
    DECOMMISSION_MEMBER = 25, "DecommissionMember";
    COMPLETE_MOVE = 26, "CompleteMove";
    ABORT_MOVE = 27, "AbortMove";
    GET_ASSIGNMENT = 28, "GetAssignment";
    APPLIED_INDEX = 29, "AppliedIndex";
    TOKEN_REGISTER = 30, "TokenRegister";
    TOKEN_NOTIFY = 31, "TokenNotify";
    ACK_BATCH = 32, "AckBatch";
    NODE_STATUS = 33, "NodeStatus";
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({})", self.0),
            None => write!(f, "unknown opcode {}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_opcodes_keep_their_spec_numbers() {
        assert_eq!(Opcode::PRODUCE.0, 1);
        assert_eq!(Opcode::COMMIT_PRODUCE_BATCH.0, 11);
        assert_eq!(Opcode::GET_ASSIGNMENT.0, 28);
        assert_eq!(Opcode::ACK_BATCH.0, 32);
        assert_eq!(Opcode::NODE_STATUS.0, 33);
        assert_eq!(Opcode(11).name(), Some("CommitProduceBatch"));
    }

    #[test]
    fn unknown_opcode_has_no_name_and_says_so() {
        assert_eq!(Opcode(200).name(), None);
        assert_eq!(Opcode(200).to_string(), "unknown opcode 200");
    }
}
