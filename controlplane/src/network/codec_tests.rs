//! The binary codecs of the control plane's messages, as specifications:
//! every message round-trips, refuses another version and trailing bytes by
//! name, and never panics on arbitrary or damaged input.

use bytes::Bytes;
use narad_protocol::codec::{decode_message, encode_message};
use narad_protocol::{DecodeError, Message};
use openraft::error::{Fatal, InstallSnapshotError, RaftError, SnapshotMismatch};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::SnapshotSignature;
use openraft::{
    AnyError, BasicNode, CommittedLeaderId, EntryPayload, ErrorSubject, ErrorVerb, Membership,
    SnapshotSegmentId, StorageError, StorageIOError, Violation,
};
use proptest::collection::{btree_map, btree_set, vec};
use proptest::prelude::*;

use super::messages::{
    AppendEntries, AppendEntriesAnswer, CONTROL_MESSAGE_VERSION, InstallSnapshot,
    InstallSnapshotAnswer, Vote, VoteAnswer,
};
use crate::node::wire::{
    ConfirmAnswer, ConfirmQuestion, ConfirmRequest, JoinAnswer, JoinRequest, LocalRead,
    LocalReadAnswer, MemberReport, MemberRequest, ProposeRequest, Status,
};
use crate::raft::{Applied, ControlNodeId, Entry, LogId, SnapshotMeta};
use narad_meta::follow::AppliedOutcome;
use narad_meta::{
    Actor, AssignPartitions, AttachEpoch, Command, CreateTopic, DeleteTopic, Heartbeat,
    IncarnationId, ParentLink, PartitionOwner, RegisterMember, SchemaVersion, Topic,
};

// ---- strategies ------------------------------------------------------------

fn text() -> impl Strategy<Value = String> {
    ".{0,12}"
}

fn log_id() -> impl Strategy<Value = LogId> {
    (any::<u64>(), any::<u64>(), any::<u64>())
        .prop_map(|(term, node, index)| LogId::new(CommittedLeaderId::new(term, node), index))
}

fn vote() -> impl Strategy<Value = openraft::Vote<ControlNodeId>> {
    (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(term, node, committed)| {
        if committed {
            openraft::Vote::new_committed(term, node)
        } else {
            openraft::Vote::new(term, node)
        }
    })
}

fn membership() -> impl Strategy<Value = Membership<ControlNodeId, BasicNode>> {
    (
        vec(btree_set(0_u64..16, 1..5), 1..=2),
        btree_map(0_u64..16, text(), 0..4),
    )
        .prop_map(|(configs, learners)| {
            let mut nodes = learners
                .into_iter()
                .map(|(id, addr)| (id, BasicNode::new(addr)))
                .collect::<std::collections::BTreeMap<_, _>>();
            for voter in configs.iter().flatten() {
                nodes
                    .entry(*voter)
                    .or_insert_with(|| BasicNode::new(format!("10.0.0.{voter}:7943")));
            }
            Membership::new(configs, nodes)
        })
}

fn incarnation() -> impl Strategy<Value = IncarnationId> {
    any::<u64>().prop_map(IncarnationId::from_bits)
}

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        (text(), any::<u64>()).prop_map(|(id, at_ms)| Command::Heartbeat(Heartbeat { id, at_ms })),
        (text(), text(), text(), any::<u64>()).prop_map(|(id, http_addr, rpc_addr, at_ms)| {
            Command::RegisterMember(RegisterMember {
                id,
                http_addr,
                rpc_addr,
                at_ms,
            })
        }),
        (text(), proptest::option::of(incarnation())).prop_map(|(name, expected_id)| {
            Command::DeleteTopic(DeleteTopic {
                actor: Actor::User("alice".into()),
                name,
                expected_id,
            })
        }),
        (text(), incarnation(), vec((any::<u32>(), text()), 0..4)).prop_map(
            |(topic, id, owners)| {
                Command::AssignPartitions(AssignPartitions {
                    topic,
                    id,
                    owners: owners
                        .into_iter()
                        .map(|(partition, owner)| PartitionOwner { partition, owner })
                        .collect(),
                })
            }
        ),
        (text(), incarnation(), any::<u64>()).prop_map(|(name, id, at)| create_topic(name, id, at)),
    ]
}

fn create_topic(name: String, id: IncarnationId, created_at_ms: u64) -> Command {
    Command::CreateTopic(CreateTopic::named(
        Actor::SecurityOff,
        &name,
        id,
        created_at_ms,
    ))
}

fn entry() -> impl Strategy<Value = Entry> {
    let payload = prop_oneof![
        Just(EntryPayload::Blank),
        command().prop_map(EntryPayload::Normal),
        membership().prop_map(EntryPayload::Membership),
    ];
    (log_id(), payload).prop_map(|(log_id, payload)| Entry { log_id, payload })
}

fn append_entries() -> impl Strategy<Value = AppendEntries> {
    (
        vote(),
        proptest::option::of(log_id()),
        proptest::option::of(log_id()),
        vec(entry(), 0..6),
    )
        .prop_map(|(vote, prev_log_id, leader_commit, entries)| {
            AppendEntries(AppendEntriesRequest {
                vote,
                prev_log_id,
                entries,
                leader_commit,
            })
        })
}

fn subject() -> impl Strategy<Value = ErrorSubject<ControlNodeId>> {
    let signature = (
        proptest::option::of(log_id()),
        proptest::option::of(log_id()),
        text(),
    )
        .prop_map(
            |(last_log_id, last_membership_log_id, snapshot_id)| SnapshotSignature {
                last_log_id,
                last_membership_log_id,
                snapshot_id,
            },
        );
    prop_oneof![
        Just(ErrorSubject::Store),
        Just(ErrorSubject::Vote),
        Just(ErrorSubject::Logs),
        log_id().prop_map(ErrorSubject::Log),
        any::<u64>().prop_map(ErrorSubject::LogIndex),
        log_id().prop_map(ErrorSubject::Apply),
        Just(ErrorSubject::StateMachine),
        proptest::option::of(signature).prop_map(ErrorSubject::Snapshot),
        Just(ErrorSubject::None),
    ]
}

fn bound() -> impl Strategy<Value = std::ops::Bound<u64>> {
    prop_oneof![
        Just(std::ops::Bound::Unbounded),
        any::<u64>().prop_map(std::ops::Bound::Included),
        any::<u64>().prop_map(std::ops::Bound::Excluded),
    ]
}

fn violation() -> impl Strategy<Value = Violation<ControlNodeId>> {
    let opt_log_id = || proptest::option::of(log_id());
    let opt_u64 = || proptest::option::of(any::<u64>());
    prop_oneof![
        (vote(), vote()).prop_map(|(curr, to)| Violation::VoteNotAscending { curr, to }),
        (vote(), vote()).prop_map(|(curr, to)| Violation::NonIncrementalVote { curr, to }),
        (log_id(), log_id()).prop_map(|(higher, lower)| Violation::DirtyLog {
            higher_index_log_id: higher,
            lower_index_log_id: lower,
        }),
        (any::<u64>(), opt_u64()).prop_map(|(want, got)| Violation::LogIndexNotFound { want, got }),
        (opt_u64(), opt_u64()).prop_map(|(start, end)| Violation::RangeEmpty { start, end }),
        (bound(), bound()).prop_map(|(start, end)| Violation::RangeNotHalfOpen { start, end }),
        Just(Violation::LogsEmpty),
        Just(Violation::StoreLogsEmpty),
        (opt_log_id(), log_id())
            .prop_map(|(prev, next)| Violation::LogsNonConsecutive { prev, next }),
        (opt_log_id(), log_id())
            .prop_map(|(prev, next)| Violation::ApplyNonConsecutive { prev, next }),
        (opt_log_id(), log_id()).prop_map(|(last_applied, first)| {
            Violation::AppliedWontConflict {
                last_applied,
                first_conflict_log_id: first,
            }
        }),
        (opt_log_id(), log_id()).prop_map(|(last_applied, purge_upto)| {
            Violation::PurgeNonApplied {
                last_applied,
                purge_upto,
            }
        }),
    ]
}

fn fatal() -> impl Strategy<Value = Fatal<ControlNodeId>> {
    let verb = prop_oneof![
        Just(ErrorVerb::Read),
        Just(ErrorVerb::Write),
        Just(ErrorVerb::Seek),
        Just(ErrorVerb::Delete),
    ];
    prop_oneof![
        Just(Fatal::Panicked),
        Just(Fatal::Stopped),
        (subject(), verb, text()).prop_map(|(subject, verb, cause)| {
            Fatal::StorageError(StorageError::IO {
                source: StorageIOError::new(subject, verb, AnyError::error(cause)),
            })
        }),
        (subject(), violation()).prop_map(|(subject, violation)| {
            Fatal::StorageError(StorageError::Defensive {
                source: openraft::DefensiveError::new(subject, violation),
            })
        }),
    ]
}

fn append_answer() -> impl Strategy<Value = AppendEntriesAnswer> {
    let response = prop_oneof![
        Just(()).prop_map(|()| AppendEntriesResponse::Success),
        proptest::option::of(log_id()).prop_map(AppendEntriesResponse::PartialSuccess),
        Just(()).prop_map(|()| AppendEntriesResponse::Conflict),
        vote().prop_map(AppendEntriesResponse::HigherVote),
    ];
    prop_oneof![
        response.prop_map(|response| AppendEntriesAnswer(Ok(response))),
        fatal().prop_map(|fatal| AppendEntriesAnswer(Err(RaftError::Fatal(fatal)))),
    ]
}

fn vote_request() -> impl Strategy<Value = Vote> {
    (vote(), proptest::option::of(log_id()))
        .prop_map(|(vote, last_log_id)| Vote(VoteRequest { vote, last_log_id }))
}

fn vote_answer() -> impl Strategy<Value = VoteAnswer> {
    let response = (vote(), any::<bool>(), proptest::option::of(log_id())).prop_map(
        |(vote, vote_granted, last_log_id)| VoteResponse {
            vote,
            vote_granted,
            last_log_id,
        },
    );
    prop_oneof![
        response.prop_map(|response| VoteAnswer(Ok(response))),
        fatal().prop_map(|fatal| VoteAnswer(Err(RaftError::Fatal(fatal)))),
    ]
}

fn snapshot_meta() -> impl Strategy<Value = SnapshotMeta> {
    (
        proptest::option::of(log_id()),
        proptest::option::of(log_id()),
        membership(),
        text(),
    )
        .prop_map(
            |(last_log_id, membership_log_id, membership, snapshot_id)| SnapshotMeta {
                last_log_id,
                last_membership: openraft::StoredMembership::new(membership_log_id, membership),
                snapshot_id,
            },
        )
}

fn install_snapshot() -> impl Strategy<Value = InstallSnapshot> {
    (
        vote(),
        snapshot_meta(),
        any::<u64>(),
        vec(any::<u8>(), 0..64),
        any::<bool>(),
    )
        .prop_map(|(vote, meta, offset, data, done)| {
            InstallSnapshot(InstallSnapshotRequest {
                vote,
                meta,
                offset,
                data,
                done,
            })
        })
}

fn install_snapshot_answer() -> impl Strategy<Value = InstallSnapshotAnswer> {
    let segment =
        || (text(), any::<u64>()).prop_map(|(id, offset)| SnapshotSegmentId { id, offset });
    let mismatch = (segment(), segment()).prop_map(|(expect, got)| {
        InstallSnapshotAnswer(Err(RaftError::APIError(
            InstallSnapshotError::SnapshotMismatch(SnapshotMismatch { expect, got }),
        )))
    });
    prop_oneof![
        vote().prop_map(|vote| InstallSnapshotAnswer(Ok(InstallSnapshotResponse { vote }))),
        fatal().prop_map(|fatal| InstallSnapshotAnswer(Err(RaftError::Fatal(fatal)))),
        mismatch,
    ]
}

fn propose() -> impl Strategy<Value = ProposeRequest> {
    (command(), any::<bool>())
        .prop_map(|(command, forwarded)| ProposeRequest { command, forwarded })
}

fn applied() -> impl Strategy<Value = Applied> {
    let outcome = prop_oneof![
        Just(AppliedOutcome::Applied),
        Just(AppliedOutcome::Unchanged),
        (any::<u16>(), text())
            .prop_map(|(status, message)| AppliedOutcome::Refused { status, message }),
        Just(AppliedOutcome::NoCommand),
    ];
    (any::<u64>(), outcome).prop_map(|(index, outcome)| Applied { index, outcome })
}

fn local_read() -> impl Strategy<Value = LocalRead> {
    prop_oneof![
        text().prop_map(|name| LocalRead::Topic { name }),
        text().prop_map(|topic| LocalRead::Owners { topic }),
        Just(LocalRead::Users),
        Just(LocalRead::Status),
    ]
}

fn topic() -> impl Strategy<Value = Topic> {
    let link = (text(), any::<u64>(), any::<u64>(), vec(any::<u64>(), 0..4)).prop_map(
        |(parent, epoch, fanout_delay_ms, attach_offsets)| ParentLink {
            parent,
            attach_epoch: AttachEpoch::from_bits(epoch),
            fanout_delay_ms,
            attach_offsets,
        },
    );
    (
        (text(), incarnation(), any::<u32>(), any::<[u64; 6]>()),
        proptest::option::of(text()),
        vec((any::<u32>(), text()), 0..3),
        proptest::option::of(link),
        vec(text(), 0..3),
    )
        .prop_map(
            |((name, id, partitions, numbers), owner, schemas, parent, children)| Topic {
                name,
                id,
                partitions,
                retention_ms: numbers[0],
                visibility_timeout_ms: numbers[1],
                max_in_flight_per_partition: numbers[2],
                max_acked_ahead_per_partition: numbers[3],
                idempotency_window_ms: numbers[5],
                created_at_ms: numbers[4],
                owner,
                schemas: schemas
                    .into_iter()
                    .map(|(version, document)| SchemaVersion { version, document })
                    .collect(),
                parent,
                children,
            },
        )
}

fn status() -> impl Strategy<Value = Status> {
    (
        (
            any::<u64>(),
            text(),
            any::<u64>(),
            proptest::option::of(any::<u64>()),
        ),
        any::<[u64; 5]>(),
        vec(any::<u64>(), 0..5),
        vec(any::<u64>(), 0..3),
        proptest::option::of(any::<u8>()),
    )
        .prop_map(
            |((node_id, state, term, leader), indexes, voters, learners, command_version)| Status {
                node_id,
                state,
                term,
                leader,
                last_log_index: indexes[0],
                applied_index: indexes[1],
                leader_commit_index: indexes[2],
                snapshot_index: indexes[3],
                purged_index: indexes[4],
                voters,
                learners,
                command_version,
            },
        )
}

/// Every answer but the status, whose optional last byte (the command
/// version) makes one cut and one trailing byte valid: its own properties
/// are below ([`status_answer`]).
fn local_read_answer() -> impl Strategy<Value = LocalReadAnswer> {
    prop_oneof![
        (proptest::option::of(topic()), any::<u64>()).prop_map(|(topic, applied_index)| {
            LocalReadAnswer::Topic {
                topic,
                applied_index,
            }
        }),
        vec(proptest::option::of(text()), 0..6)
            .prop_map(|owners| LocalReadAnswer::Owners { owners }),
        vec(text(), 0..6).prop_map(|usernames| LocalReadAnswer::Users { usernames }),
    ]
}

mod status_answer {
    use super::*;

    proptest! {
        #[test]
        fn a_status_round_trips(status in status()) {
            let answer = LocalReadAnswer::Status(status);
            prop_assert_eq!(
                decode_message::<LocalReadAnswer>(encode_message(&answer)),
                Ok(answer)
            );
        }

        /// Every cut is refused but the one that drops just the command
        /// version, which leaves an older release's answer.
        #[test]
        fn every_cut_but_the_version_byte_is_refused(
            status in status(),
            at in any::<prop::sample::Index>(),
        ) {
            let reported = Status { command_version: Some(4), ..status };
            let bytes = encode_message(&LocalReadAnswer::Status(reported.clone()));
            let cut = at.index(bytes.len() - 1);
            prop_assert!(decode_message::<LocalReadAnswer>(bytes.slice(..cut)).is_err());
            let older = Status { command_version: None, ..reported };
            prop_assert_eq!(
                decode_message::<LocalReadAnswer>(bytes.slice(..bytes.len() - 1)),
                Ok(LocalReadAnswer::Status(older))
            );
        }

        #[test]
        fn bytes_after_the_version_are_refused(
            status in status(),
            extra in vec(any::<u8>(), 1..8),
        ) {
            let reported = Status { command_version: Some(4), ..status };
            let mut bytes = encode_message(&LocalReadAnswer::Status(reported)).to_vec();
            bytes.extend(&extra);
            prop_assert_eq!(
                decode_message::<LocalReadAnswer>(Bytes::from(bytes)).err(),
                Some(DecodeError::TrailingBytes { count: extra.len() })
            );
        }

        #[test]
        fn damaged_status_bytes_never_panic(
            status in status(),
            at in any::<prop::sample::Index>(),
            value in any::<u8>(),
        ) {
            let mut bytes = encode_message(&LocalReadAnswer::Status(status)).to_vec();
            let at = at.index(bytes.len());
            bytes[at] = value;
            let _ = decode_message::<LocalReadAnswer>(Bytes::from(bytes));
        }
    }
}

fn confirm_request() -> impl Strategy<Value = ConfirmRequest> {
    let question = prop_oneof![
        (text(), incarnation()).prop_map(|(name, id)| ConfirmQuestion::Incarnation { name, id }),
        (text(), any::<u64>()).prop_map(|(child, epoch)| ConfirmQuestion::AttachEpoch {
            child,
            epoch: AttachEpoch::from_bits(epoch),
        }),
        (text(), incarnation(), any::<u32>(), text()).prop_map(|(name, id, partition, member)| {
            ConfirmQuestion::PartitionHolder {
                name,
                id,
                partition,
                member,
            }
        }),
    ];
    (question, any::<bool>()).prop_map(|(question, forwarded)| ConfirmRequest {
        question,
        forwarded,
    })
}

fn confirm_answer() -> impl Strategy<Value = ConfirmAnswer> {
    (any::<bool>(), any::<u64>()).prop_map(|(current, read_index)| ConfirmAnswer {
        current,
        read_index,
    })
}

fn member_request() -> impl Strategy<Value = MemberRequest> {
    let report = prop_oneof![
        (text(), text(), text()).prop_map(|(id, http_addr, rpc_addr)| MemberReport::Register {
            id,
            http_addr,
            rpc_addr,
        }),
        text().prop_map(|id| MemberReport::Heartbeat { id }),
    ];
    (report, any::<bool>()).prop_map(|(report, forwarded)| MemberRequest { report, forwarded })
}

fn join_request() -> impl Strategy<Value = JoinRequest> {
    (any::<u64>(), text(), any::<bool>()).prop_map(|(id, addr, forwarded)| JoinRequest {
        id,
        addr,
        forwarded,
    })
}

fn join_answer() -> impl Strategy<Value = JoinAnswer> {
    prop_oneof![Just(JoinAnswer::Promoted), Just(JoinAnswer::Voter)]
}

// ---- properties ------------------------------------------------------------

/// Decodes `bytes` as `M` and encodes the result again: the bytes a peer
/// would send back. Equal bytes mean nothing was lost or added.
fn reencoded<M: Message>(bytes: &Bytes) -> Bytes {
    let decoded: M = decode_message(bytes.clone()).expect("a valid encoding decodes");
    encode_message(&decoded)
}

/// Every property for one message type: round trip (by value where the
/// type compares, and byte for byte), arbitrary bytes behind the right
/// version byte, and any single byte damaged or any prefix cut.
macro_rules! message_properties {
    ($module:ident, $message:ty, $strategy:expr, $same:expr) => {
        mod $module {
            use super::*;

            proptest! {
                #[test]
                fn round_trips(message in $strategy) {
                    let bytes = encode_message(&message);
                    let back: $message = decode_message(bytes.clone()).expect("decodes");
                    let same: fn(&$message, &$message) -> bool = $same;
                    prop_assert!(same(&message, &back), "{message:?} came back as {back:?}");
                    prop_assert_eq!(reencoded::<$message>(&bytes), bytes);
                }

                #[test]
                fn arbitrary_bytes_never_panic(body in vec(any::<u8>(), 0..256)) {
                    let mut bytes = vec![<$message as Message>::VERSION];
                    bytes.extend(body);
                    let _ = decode_message::<$message>(Bytes::from(bytes));
                }

                #[test]
                fn damaged_bytes_never_panic(
                    message in $strategy,
                    at in any::<prop::sample::Index>(),
                    value in any::<u8>(),
                ) {
                    let mut bytes = encode_message(&message).to_vec();
                    let at = at.index(bytes.len());
                    bytes[at] = value;
                    let _ = decode_message::<$message>(Bytes::from(bytes));
                }

                /// A forged count or length anywhere: refused, or read
                /// within the bytes present, never reserved from the claim.
                #[test]
                fn a_hostile_u32_anywhere_never_panics(
                    message in $strategy,
                    at in any::<prop::sample::Index>(),
                    hostile in prop_oneof![Just(u32::MAX), Just(0x8000_0000_u32), any::<u32>()],
                ) {
                    let mut bytes = encode_message(&message).to_vec();
                    if bytes.len() >= 4 {
                        let at = at.index(bytes.len() - 3);
                        bytes[at..at + 4].copy_from_slice(&hostile.to_be_bytes());
                    }
                    let _ = decode_message::<$message>(Bytes::from(bytes));
                }

                #[test]
                fn every_cut_is_refused(message in $strategy, at in any::<prop::sample::Index>()) {
                    let bytes = encode_message(&message);
                    let cut = at.index(bytes.len());
                    prop_assert!(decode_message::<$message>(bytes.slice(..cut)).is_err());
                }

                #[test]
                fn trailing_bytes_are_refused(message in $strategy, extra in vec(any::<u8>(), 1..8)) {
                    let mut bytes = encode_message(&message).to_vec();
                    bytes.extend(&extra);
                    prop_assert_eq!(
                        decode_message::<$message>(Bytes::from(bytes)).err(),
                        Some(DecodeError::TrailingBytes { count: extra.len() })
                    );
                }

                #[test]
                fn another_version_is_refused_by_name(message in $strategy, version in any::<u8>()) {
                    prop_assume!(version != <$message as Message>::VERSION);
                    let mut bytes = encode_message(&message).to_vec();
                    bytes[0] = version;
                    prop_assert_eq!(
                        decode_message::<$message>(Bytes::from(bytes)).err(),
                        Some(DecodeError::UnsupportedVersion {
                            what: <$message as Message>::NAME,
                            found: version,
                            supported: <$message as Message>::VERSION,
                        })
                    );
                }
            }
        }
    };
}

fn same_append(a: &AppendEntries, b: &AppendEntries) -> bool {
    a.0.vote == b.0.vote
        && a.0.prev_log_id == b.0.prev_log_id
        && a.0.leader_commit == b.0.leader_commit
        && a.0.entries == b.0.entries
}

message_properties!(
    append_entries_message,
    AppendEntries,
    append_entries(),
    same_append
);
message_properties!(
    append_entries_answer,
    AppendEntriesAnswer,
    append_answer(),
    |a, b| a == b
);
message_properties!(vote_message, Vote, vote_request(), |a, b| a == b);
message_properties!(vote_answer_message, VoteAnswer, vote_answer(), |a, b| a
    == b);
message_properties!(
    install_snapshot_message,
    InstallSnapshot,
    install_snapshot(),
    |a, b| a == b
);
message_properties!(
    install_snapshot_answer_message,
    InstallSnapshotAnswer,
    install_snapshot_answer(),
    |a, b| a == b
);
message_properties!(propose_message, ProposeRequest, propose(), |a, b| a == b);
message_properties!(applied_message, Applied, applied(), |a, b| a == b);
message_properties!(read_local_message, LocalRead, local_read(), |a, b| a == b);
message_properties!(
    read_local_answer,
    LocalReadAnswer,
    local_read_answer(),
    |a, b| a == b
);
message_properties!(
    confirm_message,
    ConfirmRequest,
    confirm_request(),
    |a, b| a == b
);
message_properties!(
    confirm_answer_message,
    ConfirmAnswer,
    confirm_answer(),
    |a, b| a == b
);
message_properties!(member_message, MemberRequest, member_request(), |a, b| a
    == b);
message_properties!(join_message, JoinRequest, join_request(), |a, b| a == b);
message_properties!(join_answer_message, JoinAnswer, join_answer(), |a, b| a
    == b);

// ---- named behaviours --------------------------------------------------------

fn sample_vote() -> Vote {
    Vote(VoteRequest {
        vote: openraft::Vote::new(3, 1),
        last_log_id: Some(LogId::new(CommittedLeaderId::new(2, 1), 40)),
    })
}

#[test]
fn a_version_1_json_message_is_refused_with_a_clear_text() {
    let json = serde_json::to_vec(&sample_vote().0).expect("serializes");
    let mut bytes = vec![1_u8];
    bytes.extend((json.len() as u32).to_be_bytes());
    bytes.extend(json);
    let error = decode_message::<Vote>(Bytes::from(bytes)).expect_err("refused");
    assert_eq!(
        error.to_string(),
        "RaftVote version 1 is not supported (this build speaks version 2)"
    );
}

#[test]
fn trailing_bytes_become_a_400_naming_them() {
    let mut bytes = encode_message(&sample_vote()).to_vec();
    bytes.extend([0, 0, 0]);
    let inbound = narad_protocol::Inbound {
        peer: "127.0.0.1:1".parse().expect("address"),
        request_id: narad_protocol::RequestId(1),
        request: narad_protocol::Request::new(super::messages::opcodes::RAFT_VOTE, bytes),
    };
    let error = inbound.message::<Vote>().expect_err("refused");
    assert_eq!(error.status.0, 400);
    assert!(error.message.contains("3 trailing bytes"), "{error}");
}

#[test]
fn an_api_error_is_refused_where_raft_has_none() {
    // Result tag 2 (API error) on an append answer: append has no API error.
    let bytes = Bytes::from(vec![CONTROL_MESSAGE_VERSION, 2]);
    assert!(matches!(
        decode_message::<AppendEntriesAnswer>(bytes),
        Err(DecodeError::InvalidValue { value: 2, .. })
    ));
}

#[test]
fn a_forged_entry_count_is_refused_before_anything_is_reserved() {
    let empty = AppendEntries(AppendEntriesRequest {
        vote: openraft::Vote::new(1, 1),
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    });
    let mut bytes = encode_message(&empty).to_vec();
    let count_at = bytes.len() - 4;
    bytes[count_at..].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(
        decode_message::<AppendEntries>(Bytes::from(bytes.clone())).err(),
        Some(DecodeError::InvalidValue {
            field: "entries",
            value: u64::from(u32::MAX)
        })
    );
    bytes[count_at..].copy_from_slice(&100_u32.to_be_bytes());
    assert!(matches!(
        decode_message::<AppendEntries>(Bytes::from(bytes)),
        Err(DecodeError::LengthExceedsInput {
            field: "entries",
            ..
        })
    ));
}

#[test]
fn openraft_default_append_size_fits_the_decoder_limit() {
    let default = openraft::Config::default().max_payload_entries;
    assert!(default <= u64::from(super::messages::APPEND_ENTRIES_MAX));
}

fn membership_bytes(configs: &[&[u64]], nodes: &[u64]) -> Vec<u8> {
    let mut writer = narad_protocol::Writer::new();
    writer.u32(configs.len() as u32);
    for config in configs {
        writer.u32(config.len() as u32);
        for id in *config {
            writer.u64(*id);
        }
    }
    writer.u32(nodes.len() as u32);
    for id in nodes {
        writer.u64(*id);
        writer.str("a:1");
    }
    writer.finish().to_vec()
}

fn decode_membership(bytes: Vec<u8>) -> Result<Membership<ControlNodeId, BasicNode>, DecodeError> {
    let mut reader = narad_protocol::Reader::new(Bytes::from(bytes));
    let membership = super::raft_fields::get_membership(&mut reader)?;
    reader.finish()?;
    Ok(membership)
}

#[test]
fn a_membership_voter_missing_from_the_nodes_is_refused() {
    assert_eq!(
        decode_membership(membership_bytes(&[&[1, 2]], &[1])).err(),
        Some(DecodeError::InvalidValue {
            field: "voter id (not among the nodes)",
            value: 2
        })
    );
}

#[test]
fn membership_ids_out_of_order_are_refused() {
    assert!(decode_membership(membership_bytes(&[&[2, 1]], &[1, 2])).is_err());
    assert!(decode_membership(membership_bytes(&[&[1]], &[2, 1])).is_err());
    assert!(decode_membership(membership_bytes(&[&[1, 1]], &[1])).is_err());
    assert!(decode_membership(membership_bytes(&[&[1, 2]], &[1, 2])).is_ok());
}

#[test]
fn a_joint_membership_of_three_configs_is_refused() {
    assert!(decode_membership(membership_bytes(&[&[1], &[1], &[1]], &[1])).is_err());
}

fn propose_bytes(format: u8, json: &[u8]) -> Bytes {
    let mut writer = narad_protocol::Writer::new();
    writer.u8(CONTROL_MESSAGE_VERSION);
    writer.u8(format);
    writer.bytes(json);
    writer.u8(0);
    writer.finish()
}

#[test]
fn another_command_format_is_refused_by_name() {
    let error = decode_message::<ProposeRequest>(propose_bytes(9, b"{}")).expect_err("refused");
    assert_eq!(
        error.to_string(),
        "metastore command version 9 is not supported (this build speaks version 4)"
    );
}

#[test]
fn a_command_blob_that_is_not_a_command_is_refused() {
    let error = decode_message::<ProposeRequest>(propose_bytes(1, b"{\"nope\":1}"));
    assert!(matches!(
        error,
        Err(DecodeError::InvalidValue {
            field: "command json (column of the first error)",
            ..
        })
    ));
}

#[test]
fn a_defensive_storage_error_keeps_its_subject_and_violation() {
    let violation = Violation::LogsNonConsecutive {
        prev: Some(LogId::new(CommittedLeaderId::new(1, 1), 3)),
        next: LogId::new(CommittedLeaderId::new(1, 1), 5),
    };
    let fatal = Fatal::StorageError(StorageError::Defensive {
        source: openraft::DefensiveError::new(ErrorSubject::Logs, violation),
    });
    let answer = VoteAnswer(Err(RaftError::Fatal(fatal.clone())));
    let back: VoteAnswer = decode_message(encode_message(&answer)).expect("decodes");
    assert_eq!(back.0, Err(RaftError::Fatal(fatal)));
}

#[test]
fn an_io_storage_error_keeps_subject_verb_and_cause() {
    let source = StorageIOError::write_log_entry(
        LogId::new(CommittedLeaderId::new(4, 2), 17),
        AnyError::error("disk full"),
    );
    let fatal = Fatal::StorageError(StorageError::IO { source });
    let answer = AppendEntriesAnswer(Err(RaftError::Fatal(fatal.clone())));
    let back: AppendEntriesAnswer = decode_message(encode_message(&answer)).expect("decodes");
    assert_eq!(back.0, Err(RaftError::Fatal(fatal)));
}

/// An append as a leader sends it under load: 64 entries, each a topic
/// create like the control-plane benchmark's.
fn typical_append() -> AppendEntries {
    let entries = (0..64_u64)
        .map(|i| Entry {
            log_id: LogId::new(CommittedLeaderId::new(7, 1), 1_000 + i),
            payload: EntryPayload::Normal(create_topic(
                format!("bench-topic-{i:04}"),
                IncarnationId::from_bits(0x9e37_79b9_7f4a_7c15 ^ i),
                1_764_000_000_000 + i,
            )),
        })
        .collect();
    AppendEntries(AppendEntriesRequest {
        vote: openraft::Vote::new_committed(7, 1),
        prev_log_id: Some(LogId::new(CommittedLeaderId::new(7, 1), 999)),
        entries,
        leader_commit: Some(LogId::new(CommittedLeaderId::new(7, 1), 990)),
    })
}

#[test]
fn a_typical_append_is_smaller_than_its_version_1_json_form() {
    let append = typical_append();
    let binary = encode_message(&append).len();
    // Version 1: version byte, u32 length, the request's JSON.
    let json = 1 + 4 + serde_json::to_vec(&append.0).expect("serializes").len();
    let commands: usize = append
        .0
        .entries
        .iter()
        .map(|entry| match &entry.payload {
            EntryPayload::Normal(command) => serde_json::to_vec(command).map_or(0, |j| j.len()),
            _ => 0,
        })
        .sum();
    println!(
        "append entries, 64 entries: binary {binary} bytes, version 1 JSON {json} bytes; \
         of which command JSON {commands} bytes in version 1"
    );
    assert!(binary < json, "binary {binary} >= json {json}");
}

#[test]
fn a_heartbeat_append_is_smaller_than_its_version_1_json_form() {
    let heartbeat = AppendEntries(AppendEntriesRequest {
        vote: openraft::Vote::new_committed(7, 1),
        prev_log_id: Some(LogId::new(CommittedLeaderId::new(7, 1), 1_063)),
        entries: Vec::new(),
        leader_commit: Some(LogId::new(CommittedLeaderId::new(7, 1), 1_063)),
    });
    let binary = encode_message(&heartbeat).len();
    let json = 1 + 4 + serde_json::to_vec(&heartbeat.0).expect("serializes").len();
    println!("append entries, no entries: binary {binary} bytes, version 1 JSON {json} bytes");
    assert_eq!(
        binary,
        1 + 17 + 25 + 25 + 4,
        "version, vote, two log ids, count"
    );
    assert!(binary < json, "binary {binary} >= json {json}");
}

#[test]
fn a_membership_entry_round_trips_with_learners() {
    let nodes = [(1, "a:1"), (2, "b:2"), (3, "c:3"), (9, "learner:9")]
        .into_iter()
        .map(|(id, addr)| (id, BasicNode::new(addr)))
        .collect::<std::collections::BTreeMap<_, _>>();
    let membership = Membership::new(
        vec![
            std::collections::BTreeSet::from([1, 2, 3]),
            std::collections::BTreeSet::from([2, 3]),
        ],
        nodes,
    );
    let append = AppendEntries(AppendEntriesRequest {
        vote: openraft::Vote::new_committed(2, 1),
        prev_log_id: None,
        entries: vec![Entry {
            log_id: LogId::new(CommittedLeaderId::new(2, 1), 5),
            payload: EntryPayload::Membership(membership),
        }],
        leader_commit: None,
    });
    let back: AppendEntries = decode_message(encode_message(&append)).expect("decodes");
    assert_eq!(back.0.entries, append.0.entries);
    let EntryPayload::Membership(back) = &back.0.entries[0].payload else {
        panic!("a membership entry");
    };
    assert_eq!(back.learner_ids().collect::<Vec<_>>(), vec![9]);
}

#[test]
fn a_status_carries_its_command_version_last_and_an_older_ones_reads_without() {
    let status = Status {
        node_id: 2,
        state: "follower".into(),
        term: 7,
        leader: Some(1),
        last_log_index: 40,
        applied_index: 40,
        leader_commit_index: 40,
        snapshot_index: 0,
        purged_index: 0,
        voters: vec![1, 2, 3],
        learners: Vec::new(),
        command_version: Some(4),
    };
    let older = Status {
        command_version: None,
        ..status.clone()
    };
    let current_bytes = encode_message(&LocalReadAnswer::Status(status.clone()));
    let older_bytes = encode_message(&LocalReadAnswer::Status(older.clone()));
    assert_eq!(current_bytes.len(), older_bytes.len() + 1);
    assert_eq!(current_bytes.last(), Some(&4));
    assert_eq!(
        decode_message::<LocalReadAnswer>(older_bytes),
        Ok(LocalReadAnswer::Status(older))
    );
    assert_eq!(
        decode_message::<LocalReadAnswer>(current_bytes),
        Ok(LocalReadAnswer::Status(status))
    );
}
