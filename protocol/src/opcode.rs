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
    ($($name:ident = $value:literal, $text:literal, $label:literal;)*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", $text, "` (", stringify!($value), ").")]
                pub const $name: Opcode = Opcode($value);
            )*

            /// The name of a known opcode: the spec's, or the control plane's own.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($text),)*
                    _ => None,
                }
            }

            /// The `op` label of a metric series: the name in snake case
            /// (`ack_batch`), `unknown` for an opcode this build does not
            /// know, so a peer cannot grow the label set.
            pub fn label(self) -> &'static str {
                match self.0 {
                    $($value => $label,)*
                    _ => "unknown",
                }
            }
        }
    };
}

opcodes! {
    PING = 0, "Ping", "ping";
    PRODUCE = 1, "Produce", "produce";
    CONSUME = 2, "Consume", "consume";
    ACK = 3, "Ack", "ack";
    CREATE_TOPIC = 4, "CreateTopic", "create_topic";
    ALTER_TOPIC = 5, "AlterTopic", "alter_topic";
    DELETE_TOPIC = 6, "DeleteTopic", "delete_topic";
    PURGE_TOPIC = 7, "PurgeTopic", "purge_topic";
    TOPIC_PARTITION_STATS = 8, "TopicPartitionStats", "topic_partition_stats";
    REGISTER_MEMBER = 9, "RegisterMember", "register_member";
    COMMIT_PRODUCE = 10, "CommitProduce", "commit_produce";
    COMMIT_PRODUCE_BATCH = 11, "CommitProduceBatch", "commit_produce_batch";
    CREATE_USER = 12, "CreateUser", "create_user";
    UPDATE_USER = 13, "UpdateUser", "update_user";
    DELETE_USER = 14, "DeleteUser", "delete_user";
    ATTACH_CHILD = 15, "AttachChild", "attach_child";
    DETACH_CHILD = 16, "DetachChild", "detach_child";
    FANOUT_CURSORS = 17, "FanoutCursors", "fanout_cursors";
    EXTEND_ACK = 18, "ExtendAck", "extend_ack";
    NACK = 19, "Nack", "nack";
    GET_TOPIC = 20, "GetTopic", "get_topic";
    JOIN_CLUSTER = 21, "JoinCluster", "join_cluster";
    LIST_PARTITION_SEGMENTS = 22, "ListPartitionSegments", "list_partition_segments";
    FETCH_SEGMENT_CHUNK = 23, "FetchSegmentChunk", "fetch_segment_chunk";
    PREPARE_HANDOFF = 24, "PrepareHandoff", "prepare_handoff";
    DECOMMISSION_MEMBER = 25, "DecommissionMember", "decommission_member";
    COMPLETE_MOVE = 26, "CompleteMove", "complete_move";
    ABORT_MOVE = 27, "AbortMove", "abort_move";
    GET_ASSIGNMENT = 28, "GetAssignment", "get_assignment";
    APPLIED_INDEX = 29, "AppliedIndex", "applied_index";
    TOKEN_REGISTER = 30, "TokenRegister", "token_register";
    TOKEN_NOTIFY = 31, "TokenNotify", "token_notify";
    ACK_BATCH = 32, "AckBatch", "ack_batch";
    NODE_STATUS = 33, "NodeStatus", "node_status";
    CHECK_REMOTE_TARGET = 34, "CheckRemoteTarget", "check_remote_target";
    // The control plane's own operations take 64 and up; they are named
    // here so that every opcode has one registry.
    RAFT_APPEND_ENTRIES = 64, "RaftAppendEntries", "raft_append_entries";
    RAFT_VOTE = 65, "RaftVote", "raft_vote";
    RAFT_INSTALL_SNAPSHOT = 66, "RaftInstallSnapshot", "raft_install_snapshot";
    PROPOSE = 67, "Propose", "propose";
    READ_LOCAL = 68, "ReadLocal", "read_local";
    METADATA_FETCH = 69, "MetadataFetch", "metadata_fetch";
    LEADER_CONFIRM = 70, "LeaderConfirm", "leader_confirm";
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
        assert_eq!(Opcode::CHECK_REMOTE_TARGET.0, 34);
        assert_eq!(Opcode(11).name(), Some("CommitProduceBatch"));
    }

    #[test]
    fn metric_labels_are_the_names_in_snake_case() {
        assert_eq!(Opcode::ACK_BATCH.label(), "ack_batch");
        assert_eq!(Opcode::COMMIT_PRODUCE_BATCH.label(), "commit_produce_batch");
        assert_eq!(Opcode::RAFT_APPEND_ENTRIES.label(), "raft_append_entries");
        assert_eq!(Opcode(200).label(), "unknown");
    }

    #[test]
    fn unknown_opcode_has_no_name_and_says_so() {
        assert_eq!(Opcode(200).name(), None);
        assert_eq!(Opcode(200).to_string(), "unknown opcode 200");
    }
}
