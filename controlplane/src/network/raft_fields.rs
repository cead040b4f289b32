//! Field-by-field encodings of the openraft 0.9.25 values that travel in
//! Raft RPCs: votes, log ids, log entries, memberships, snapshot metadata
//! and the errors a peer's Raft answers with. Layouts are drawn in
//! `docs/internals/controlplane-rpc.md` ("Wire formats"); a change to one is a
//! new message version.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use narad_protocol::{DecodeError, Reader, Writer};
use openraft::error::{Fatal, InstallSnapshotError, SnapshotMismatch};
use openraft::storage::SnapshotSignature;

use openraft::{
    AnyError, BasicNode, CommittedLeaderId, DefensiveError, EntryPayload, ErrorSubject, ErrorVerb,
    Membership, SnapshotSegmentId, StorageError, StorageIOError, Violation, Vote,
};

use super::metastore_fields::{get_command, put_command};
use crate::raft::{ControlNodeId, Entry, LogId, SnapshotMeta, StoredMembership, TypeConfig};
use narad_protocol::fields::{
    get_bool, get_count, get_option, invalid, put_bool, put_count, put_option,
};

/// The most configurations a membership holds: one, or two while a joint
/// consensus moves from the old voters to the new.
pub(crate) const MEMBERSHIP_CONFIGS_MAX: u32 = 2;

/// The most nodes a membership names (and voters one configuration names).
/// A control plane has a handful of voters; the bound only stops a forged
/// count.
pub(crate) const MEMBERSHIP_NODES_MAX: u32 = 1_024;

/// Bytes of an encoded log id: term, leader node id, index.
pub(crate) const LOG_ID_BYTES: usize = 24;

/// Appends a vote: term, node id, committed flag (17 bytes).
pub(crate) fn put_vote(writer: &mut Writer, vote: &Vote<ControlNodeId>) {
    writer.u64(vote.leader_id.term);
    writer.u64(vote.leader_id.node_id);
    put_bool(writer, vote.committed);
}

/// Reads a vote written by [`put_vote`].
pub(crate) fn get_vote(reader: &mut Reader) -> Result<Vote<ControlNodeId>, DecodeError> {
    let term = reader.u64("vote term")?;
    let node_id = reader.u64("vote node id")?;
    let committed = get_bool(reader, "vote committed")?;
    Ok(if committed {
        Vote::new_committed(term, node_id)
    } else {
        Vote::new(term, node_id)
    })
}

/// Appends a log id: the term and node id of the leader that wrote it, and
/// its index ([`LOG_ID_BYTES`]).
pub(crate) fn put_log_id(writer: &mut Writer, log_id: &LogId) {
    writer.u64(log_id.leader_id.term);
    writer.u64(log_id.leader_id.node_id);
    writer.u64(log_id.index);
}

/// Reads a log id written by [`put_log_id`].
pub(crate) fn get_log_id(reader: &mut Reader) -> Result<LogId, DecodeError> {
    let term = reader.u64("log id term")?;
    let node_id = reader.u64("log id node id")?;
    let index = reader.u64("log id index")?;
    Ok(LogId::new(CommittedLeaderId::new(term, node_id), index))
}

/// Appends an optional log id (presence byte, then the log id).
pub(crate) fn put_opt_log_id(writer: &mut Writer, log_id: Option<&LogId>) {
    put_option(writer, log_id, put_log_id);
}

/// Reads an optional log id written by [`put_opt_log_id`].
pub(crate) fn get_opt_log_id(
    reader: &mut Reader,
    field: &'static str,
) -> Result<Option<LogId>, DecodeError> {
    get_option(reader, field, get_log_id)
}

/// Appends a membership: its configurations (each its voter ids, ascending),
/// then every node (voters and learners) with its cluster address.
pub(crate) fn put_membership(
    writer: &mut Writer,
    membership: &Membership<ControlNodeId, BasicNode>,
) {
    let configs = membership.get_joint_config();
    put_count(
        writer,
        "membership configs",
        configs.len(),
        MEMBERSHIP_CONFIGS_MAX,
    );
    for config in configs {
        put_count(
            writer,
            "membership voters",
            config.len(),
            MEMBERSHIP_NODES_MAX,
        );
        for id in config {
            writer.u64(*id);
        }
    }
    let nodes: Vec<_> = membership.nodes().collect();
    put_count(
        writer,
        "membership nodes",
        nodes.len(),
        MEMBERSHIP_NODES_MAX,
    );
    for (id, node) in nodes {
        writer.u64(*id);
        writer.str(&node.addr);
    }
}

/// Reads a membership written by [`put_membership`]. Ids must be strictly
/// ascending (a set has one encoding), and every voter must be among the
/// nodes, as in every membership openraft builds.
pub(crate) fn get_membership(
    reader: &mut Reader,
) -> Result<Membership<ControlNodeId, BasicNode>, DecodeError> {
    let config_count = get_count(reader, "membership configs", MEMBERSHIP_CONFIGS_MAX, 4)?;
    let mut configs = Vec::with_capacity(config_count);
    for _ in 0..config_count {
        let voter_count = get_count(reader, "membership voters", MEMBERSHIP_NODES_MAX, 8)?;
        let mut voters = BTreeSet::new();
        for _ in 0..voter_count {
            let id = reader.u64("voter id")?;
            if voters.last().is_some_and(|last| *last >= id) {
                return Err(invalid("voter id (not ascending)", id));
            }
            voters.insert(id);
        }
        configs.push(voters);
    }
    let node_count = get_count(reader, "membership nodes", MEMBERSHIP_NODES_MAX, 12)?;
    let mut nodes = BTreeMap::new();
    for _ in 0..node_count {
        let id = reader.u64("node id")?;
        if nodes.last_key_value().is_some_and(|(last, _)| *last >= id) {
            return Err(invalid("node id (not ascending)", id));
        }
        nodes.insert(id, BasicNode::new(reader.str("node address")?));
    }
    for voter in configs.iter().flatten() {
        if !nodes.contains_key(voter) {
            return Err(invalid("voter id (not among the nodes)", *voter));
        }
    }
    Ok(Membership::new(configs, nodes))
}

/// Appends a stored membership: the log id that carried it, then it.
pub(crate) fn put_stored_membership(writer: &mut Writer, stored: &StoredMembership) {
    put_opt_log_id(writer, stored.log_id().as_ref());
    put_membership(writer, stored.membership());
}

/// Reads a stored membership written by [`put_stored_membership`].
pub(crate) fn get_stored_membership(reader: &mut Reader) -> Result<StoredMembership, DecodeError> {
    let log_id = get_opt_log_id(reader, "membership log id")?;
    let membership = get_membership(reader)?;
    Ok(StoredMembership::new(log_id, membership))
}

/// Appends a snapshot's metadata: last log id, last membership, id.
pub(crate) fn put_snapshot_meta(writer: &mut Writer, meta: &SnapshotMeta) {
    put_opt_log_id(writer, meta.last_log_id.as_ref());
    put_stored_membership(writer, &meta.last_membership);
    writer.str(&meta.snapshot_id);
}

/// Reads snapshot metadata written by [`put_snapshot_meta`].
pub(crate) fn get_snapshot_meta(reader: &mut Reader) -> Result<SnapshotMeta, DecodeError> {
    Ok(SnapshotMeta {
        last_log_id: get_opt_log_id(reader, "snapshot last log id")?,
        last_membership: get_stored_membership(reader)?,
        snapshot_id: reader.str("snapshot id")?,
    })
}

/// Payload kinds of a log entry.
mod payload {
    pub(super) const BLANK: u8 = 0;
    pub(super) const NORMAL: u8 = 1;
    pub(super) const MEMBERSHIP: u8 = 2;
}

/// Appends a log entry: its log id, a payload kind, then the payload (a
/// metastore command blob or a membership; nothing for a blank entry).
pub(crate) fn put_entry(writer: &mut Writer, entry: &Entry) {
    put_log_id(writer, &entry.log_id);
    match &entry.payload {
        EntryPayload::Blank => writer.u8(payload::BLANK),
        EntryPayload::Normal(command) => {
            writer.u8(payload::NORMAL);
            put_command(writer, command);
        }
        EntryPayload::Membership(membership) => {
            writer.u8(payload::MEMBERSHIP);
            put_membership(writer, membership);
        }
    }
}

/// Smallest encoded entry: a log id and a payload kind.
pub(crate) const ENTRY_BYTES_MIN: usize = LOG_ID_BYTES + 1;

/// Reads a log entry written by [`put_entry`].
pub(crate) fn get_entry(reader: &mut Reader) -> Result<Entry, DecodeError> {
    let log_id = get_log_id(reader)?;
    let payload: EntryPayload<TypeConfig> = match reader.u8("entry payload kind")? {
        payload::BLANK => EntryPayload::Blank,
        payload::NORMAL => EntryPayload::Normal(get_command(reader)?),
        payload::MEMBERSHIP => EntryPayload::Membership(get_membership(reader)?),
        other => return Err(invalid("entry payload kind", other)),
    };
    Ok(Entry { log_id, payload })
}

/// Tags of [`Fatal`].
mod fatal {
    pub(super) const STORAGE: u8 = 1;
    pub(super) const PANICKED: u8 = 2;
    pub(super) const STOPPED: u8 = 3;
}

/// Appends a fatal error of a peer's Raft.
pub(crate) fn put_fatal(writer: &mut Writer, error: &Fatal<ControlNodeId>) {
    match error {
        Fatal::StorageError(storage) => {
            writer.u8(fatal::STORAGE);
            put_storage_error(writer, storage);
        }
        Fatal::Panicked => writer.u8(fatal::PANICKED),
        Fatal::Stopped => writer.u8(fatal::STOPPED),
    }
}

/// Reads a fatal error written by [`put_fatal`].
pub(crate) fn get_fatal(reader: &mut Reader) -> Result<Fatal<ControlNodeId>, DecodeError> {
    match reader.u8("fatal error kind")? {
        fatal::STORAGE => Ok(Fatal::StorageError(get_storage_error(reader)?)),
        fatal::PANICKED => Ok(Fatal::Panicked),
        fatal::STOPPED => Ok(Fatal::Stopped),
        other => Err(invalid("fatal error kind", other)),
    }
}

/// Kinds of [`StorageError`].
mod storage {
    pub(super) const IO: u8 = 1;
    pub(super) const DEFENSIVE: u8 = 2;
}

/// Appends a storage error: its kind and subject, then for an I/O error
/// the verb and the cause as text (`AnyError`'s display: its type chain and
/// backtrace are not carried), for a defensive-check error the violation.
fn put_storage_error(writer: &mut Writer, error: &StorageError<ControlNodeId>) {
    match error {
        StorageError::IO { source } => {
            let parts = IoParts::of(source);
            writer.u8(storage::IO);
            put_subject(writer, &parts.subject);
            writer.u8(verb_tag(parts.verb));
            writer.str(&parts.cause);
        }
        StorageError::Defensive { source } => {
            writer.u8(storage::DEFENSIVE);
            put_subject(writer, &source.subject);
            put_violation(writer, &source.violation);
        }
    }
}

/// The parts of an I/O storage error. openraft 0.9 keeps them private and
/// exposes them only through serde, so they are read that way; should that
/// ever fail, the error's whole text becomes the cause.
struct IoParts {
    subject: ErrorSubject<ControlNodeId>,
    verb: ErrorVerb,
    cause: String,
}

impl IoParts {
    fn of(error: &StorageIOError<ControlNodeId>) -> Self {
        #[derive(serde::Deserialize)]
        struct Fields {
            subject: ErrorSubject<ControlNodeId>,
            verb: ErrorVerb,
            source: AnyError,
        }
        serde_json::to_value(error)
            .and_then(serde_json::from_value::<Fields>)
            .map_or_else(
                |_| Self {
                    subject: ErrorSubject::None,
                    verb: ErrorVerb::Read,
                    cause: error.to_string(),
                },
                |fields| Self {
                    subject: fields.subject,
                    verb: fields.verb,
                    cause: fields.source.to_string(),
                },
            )
    }
}

/// Reads a storage error written by [`put_storage_error`].
fn get_storage_error(reader: &mut Reader) -> Result<StorageError<ControlNodeId>, DecodeError> {
    match reader.u8("storage error kind")? {
        storage::IO => {
            let subject = get_subject(reader)?;
            let verb = verb_of(reader.u8("storage error verb")?)?;
            let cause = reader.str("storage error cause")?;
            Ok(StorageError::IO {
                source: StorageIOError::new(subject, verb, AnyError::error(cause)),
            })
        }
        storage::DEFENSIVE => {
            let subject = get_subject(reader)?;
            let violation = get_violation(reader)?;
            Ok(StorageError::Defensive {
                source: DefensiveError::new(subject, violation),
            })
        }
        other => Err(invalid("storage error kind", other)),
    }
}

fn verb_tag(verb: ErrorVerb) -> u8 {
    match verb {
        ErrorVerb::Read => 1,
        ErrorVerb::Write => 2,
        ErrorVerb::Seek => 3,
        ErrorVerb::Delete => 4,
    }
}

fn verb_of(tag: u8) -> Result<ErrorVerb, DecodeError> {
    match tag {
        1 => Ok(ErrorVerb::Read),
        2 => Ok(ErrorVerb::Write),
        3 => Ok(ErrorVerb::Seek),
        4 => Ok(ErrorVerb::Delete),
        other => Err(invalid("storage error verb", other)),
    }
}

/// Tags of [`ErrorSubject`].
mod subject {
    pub(super) const STORE: u8 = 1;
    pub(super) const VOTE: u8 = 2;
    pub(super) const LOGS: u8 = 3;
    pub(super) const LOG: u8 = 4;
    pub(super) const LOG_INDEX: u8 = 5;
    pub(super) const APPLY: u8 = 6;
    pub(super) const STATE_MACHINE: u8 = 7;
    pub(super) const SNAPSHOT: u8 = 8;
    pub(super) const NONE: u8 = 9;
}

fn put_subject(writer: &mut Writer, value: &ErrorSubject<ControlNodeId>) {
    match value {
        ErrorSubject::Store => writer.u8(subject::STORE),
        ErrorSubject::Vote => writer.u8(subject::VOTE),
        ErrorSubject::Logs => writer.u8(subject::LOGS),
        ErrorSubject::Log(log_id) => {
            writer.u8(subject::LOG);
            put_log_id(writer, log_id);
        }
        ErrorSubject::LogIndex(index) => {
            writer.u8(subject::LOG_INDEX);
            writer.u64(*index);
        }
        ErrorSubject::Apply(log_id) => {
            writer.u8(subject::APPLY);
            put_log_id(writer, log_id);
        }
        ErrorSubject::StateMachine => writer.u8(subject::STATE_MACHINE),
        ErrorSubject::Snapshot(signature) => {
            writer.u8(subject::SNAPSHOT);
            put_option(writer, signature.as_ref(), |writer, signature| {
                put_opt_log_id(writer, signature.last_log_id.as_ref());
                put_opt_log_id(writer, signature.last_membership_log_id.as_ref());
                writer.str(&signature.snapshot_id);
            });
        }
        ErrorSubject::None => writer.u8(subject::NONE),
    }
}

fn get_subject(reader: &mut Reader) -> Result<ErrorSubject<ControlNodeId>, DecodeError> {
    Ok(match reader.u8("storage error subject")? {
        subject::STORE => ErrorSubject::Store,
        subject::VOTE => ErrorSubject::Vote,
        subject::LOGS => ErrorSubject::Logs,
        subject::LOG => ErrorSubject::Log(get_log_id(reader)?),
        subject::LOG_INDEX => ErrorSubject::LogIndex(reader.u64("subject log index")?),
        subject::APPLY => ErrorSubject::Apply(get_log_id(reader)?),
        subject::STATE_MACHINE => ErrorSubject::StateMachine,
        subject::SNAPSHOT => {
            ErrorSubject::Snapshot(get_option(reader, "snapshot signature", |reader| {
                Ok(SnapshotSignature {
                    last_log_id: get_opt_log_id(reader, "signature last log id")?,
                    last_membership_log_id: get_opt_log_id(reader, "signature membership log id")?,
                    snapshot_id: reader.str("signature snapshot id")?,
                })
            })?)
        }
        subject::NONE => ErrorSubject::None,
        other => return Err(invalid("storage error subject", other)),
    })
}

/// Tags of [`Violation`].
mod violation {
    pub(super) const VOTE_NOT_ASCENDING: u8 = 1;
    pub(super) const NON_INCREMENTAL_VOTE: u8 = 2;
    pub(super) const DIRTY_LOG: u8 = 3;
    pub(super) const LOG_INDEX_NOT_FOUND: u8 = 4;
    pub(super) const RANGE_EMPTY: u8 = 5;
    pub(super) const RANGE_NOT_HALF_OPEN: u8 = 6;
    pub(super) const LOGS_EMPTY: u8 = 7;
    pub(super) const STORE_LOGS_EMPTY: u8 = 8;
    pub(super) const LOGS_NON_CONSECUTIVE: u8 = 9;
    pub(super) const APPLY_NON_CONSECUTIVE: u8 = 10;
    pub(super) const APPLIED_WONT_CONFLICT: u8 = 11;
    pub(super) const PURGE_NON_APPLIED: u8 = 12;
}

fn put_opt_u64(writer: &mut Writer, value: Option<u64>) {
    put_option(writer, value.as_ref(), |writer, value| writer.u64(*value));
}

fn get_opt_u64(reader: &mut Reader, field: &'static str) -> Result<Option<u64>, DecodeError> {
    get_option(reader, field, |reader| reader.u64(field))
}

/// A range bound: tag 0 unbounded, 1 included, 2 excluded, then the value.
fn put_bound(writer: &mut Writer, bound: Bound<&u64>) {
    match bound {
        Bound::Unbounded => writer.u8(0),
        Bound::Included(value) => {
            writer.u8(1);
            writer.u64(*value);
        }
        Bound::Excluded(value) => {
            writer.u8(2);
            writer.u64(*value);
        }
    }
}

fn get_bound(reader: &mut Reader, field: &'static str) -> Result<Bound<u64>, DecodeError> {
    match reader.u8(field)? {
        0 => Ok(Bound::Unbounded),
        1 => Ok(Bound::Included(reader.u64(field)?)),
        2 => Ok(Bound::Excluded(reader.u64(field)?)),
        other => Err(invalid(field, other)),
    }
}

/// Appends the defensive check a storage call violated, field by field.
fn put_violation(writer: &mut Writer, value: &Violation<ControlNodeId>) {
    match value {
        Violation::VoteNotAscending { curr, to } => {
            writer.u8(violation::VOTE_NOT_ASCENDING);
            put_vote(writer, curr);
            put_vote(writer, to);
        }
        Violation::NonIncrementalVote { curr, to } => {
            writer.u8(violation::NON_INCREMENTAL_VOTE);
            put_vote(writer, curr);
            put_vote(writer, to);
        }
        Violation::DirtyLog {
            higher_index_log_id,
            lower_index_log_id,
        } => {
            writer.u8(violation::DIRTY_LOG);
            put_log_id(writer, higher_index_log_id);
            put_log_id(writer, lower_index_log_id);
        }
        Violation::LogIndexNotFound { want, got } => {
            writer.u8(violation::LOG_INDEX_NOT_FOUND);
            writer.u64(*want);
            put_opt_u64(writer, *got);
        }
        Violation::RangeEmpty { start, end } => {
            writer.u8(violation::RANGE_EMPTY);
            put_opt_u64(writer, *start);
            put_opt_u64(writer, *end);
        }
        Violation::RangeNotHalfOpen { start, end } => {
            writer.u8(violation::RANGE_NOT_HALF_OPEN);
            put_bound(writer, start.as_ref());
            put_bound(writer, end.as_ref());
        }
        Violation::LogsEmpty => writer.u8(violation::LOGS_EMPTY),
        Violation::StoreLogsEmpty => writer.u8(violation::STORE_LOGS_EMPTY),
        Violation::LogsNonConsecutive { prev, next } => {
            writer.u8(violation::LOGS_NON_CONSECUTIVE);
            put_opt_log_id(writer, prev.as_ref());
            put_log_id(writer, next);
        }
        Violation::ApplyNonConsecutive { prev, next } => {
            writer.u8(violation::APPLY_NON_CONSECUTIVE);
            put_opt_log_id(writer, prev.as_ref());
            put_log_id(writer, next);
        }
        Violation::AppliedWontConflict {
            last_applied,
            first_conflict_log_id,
        } => {
            writer.u8(violation::APPLIED_WONT_CONFLICT);
            put_opt_log_id(writer, last_applied.as_ref());
            put_log_id(writer, first_conflict_log_id);
        }
        Violation::PurgeNonApplied {
            last_applied,
            purge_upto,
        } => {
            writer.u8(violation::PURGE_NON_APPLIED);
            put_opt_log_id(writer, last_applied.as_ref());
            put_log_id(writer, purge_upto);
        }
    }
}

/// Reads a violation written by [`put_violation`].
fn get_violation(reader: &mut Reader) -> Result<Violation<ControlNodeId>, DecodeError> {
    Ok(match reader.u8("violation kind")? {
        violation::VOTE_NOT_ASCENDING => Violation::VoteNotAscending {
            curr: get_vote(reader)?,
            to: get_vote(reader)?,
        },
        violation::NON_INCREMENTAL_VOTE => Violation::NonIncrementalVote {
            curr: get_vote(reader)?,
            to: get_vote(reader)?,
        },
        violation::DIRTY_LOG => Violation::DirtyLog {
            higher_index_log_id: get_log_id(reader)?,
            lower_index_log_id: get_log_id(reader)?,
        },
        violation::LOG_INDEX_NOT_FOUND => Violation::LogIndexNotFound {
            want: reader.u64("wanted log index")?,
            got: get_opt_u64(reader, "found log index")?,
        },
        violation::RANGE_EMPTY => Violation::RangeEmpty {
            start: get_opt_u64(reader, "range start")?,
            end: get_opt_u64(reader, "range end")?,
        },
        violation::RANGE_NOT_HALF_OPEN => Violation::RangeNotHalfOpen {
            start: get_bound(reader, "range start bound")?,
            end: get_bound(reader, "range end bound")?,
        },
        violation::LOGS_EMPTY => Violation::LogsEmpty,
        violation::STORE_LOGS_EMPTY => Violation::StoreLogsEmpty,
        violation::LOGS_NON_CONSECUTIVE => Violation::LogsNonConsecutive {
            prev: get_opt_log_id(reader, "previous log id")?,
            next: get_log_id(reader)?,
        },
        violation::APPLY_NON_CONSECUTIVE => Violation::ApplyNonConsecutive {
            prev: get_opt_log_id(reader, "previous log id")?,
            next: get_log_id(reader)?,
        },
        violation::APPLIED_WONT_CONFLICT => Violation::AppliedWontConflict {
            last_applied: get_opt_log_id(reader, "last applied")?,
            first_conflict_log_id: get_log_id(reader)?,
        },
        violation::PURGE_NON_APPLIED => Violation::PurgeNonApplied {
            last_applied: get_opt_log_id(reader, "last applied")?,
            purge_upto: get_log_id(reader)?,
        },
        other => return Err(invalid("violation kind", other)),
    })
}

/// Appends an install-snapshot refusal: the segment expected, the segment
/// received (each a snapshot id and an offset).
pub(crate) fn put_install_snapshot_error(writer: &mut Writer, error: &InstallSnapshotError) {
    match error {
        InstallSnapshotError::SnapshotMismatch(mismatch) => {
            writer.u8(1);
            for segment in [&mismatch.expect, &mismatch.got] {
                writer.str(&segment.id);
                writer.u64(segment.offset);
            }
        }
    }
}

/// Reads an install-snapshot refusal written by
/// [`put_install_snapshot_error`].
pub(crate) fn get_install_snapshot_error(
    reader: &mut Reader,
) -> Result<InstallSnapshotError, DecodeError> {
    match reader.u8("install snapshot error kind")? {
        1 => {
            let mut segment = |field_id, field_offset| -> Result<_, DecodeError> {
                Ok(SnapshotSegmentId {
                    id: reader.str(field_id)?,
                    offset: reader.u64(field_offset)?,
                })
            };
            let expect = segment("expected snapshot id", "expected offset")?;
            let got = segment("received snapshot id", "received offset")?;
            Ok(InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                expect,
                got,
            }))
        }
        other => Err(invalid("install snapshot error kind", other)),
    }
}
