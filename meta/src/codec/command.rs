//! The binary encoding of [`Command`]: a kind tag, then the command's
//! fields in declaration order. The version byte in front is
//! [`Command::VERSION`](narad_protocol::Message::VERSION), written by
//! whoever frames the command (a message's command field, a metadata
//! change).

use narad_protocol::{Decode, DecodeError, Encode, Message, Reader, Writer};

use super::values::{
    PARTITION_SLOTS_MAX, STR_BYTES_MIN, get_epoch, get_grants, get_hash, get_incarnation, get_list,
    get_offsets, get_opt_i64, get_opt_incarnation, get_opt_str, put_epoch, put_grants, put_hash,
    put_incarnation, put_list, put_offsets, put_opt_i64, put_opt_incarnation, put_opt_str,
};
use super::{Layout, remotes};
use crate::{
    AbortMove, Actor, AddSchemaVersion, AlterTopic, AssignPartitions, AttachChild, Command,
    CompleteMove, CreateTopic, CreateUser, DeleteTopic, DeleteUser, DetachChild, Heartbeat,
    MarkDead, MoveTarget, NewLink, PartitionOwner, RegisterMember, RemoveMember, SeedAdmin,
    SetDraining, SetGrants, SetMoveTargets, SetPassword, TopicDefaults,
};
use crate::{
    AttachRemoteChild, DeleteRemote, PauseRemoteChild, ResumeRemoteChild, SkipRemoteRecord,
};
use narad_protocol::fields::{get_bool, get_option, invalid, put_bool, put_option};

/// The version of the binary command encoding. Version 1 was the serde
/// JSON of [`Command`] in a length-prefixed blob; version 2 was this
/// encoding without the idempotency window of `CreateTopic` and
/// `AlterTopic` ([`COMMAND_VERSION_BEFORE_WINDOW`]); version 3 without the
/// mint time of a remote key ([`COMMAND_VERSION_BEFORE_KEY_TIME`]).
/// Decoders still read all three (see [`super::get_command`]).
pub const COMMAND_VERSION: u8 = 4;

/// The binary command encoding before the cluster remote key recorded
/// when it was minted: every kind as in [`COMMAND_VERSION`], except that
/// the `RemoteKey` of `CreateRemote`, `UpdateRemote` and `ResealRemotes`
/// has no `created_at_ms` (it reads as unknown). Still written for a
/// create or an alter that sets an idempotency window (see
/// [`command_layout`]).
pub const COMMAND_VERSION_BEFORE_KEY_TIME: u8 = 3;

/// The binary command encoding before the idempotency window was a topic
/// setting: every kind as in [`COMMAND_VERSION_BEFORE_KEY_TIME`], except
/// that `CreateTopic` and `AlterTopic` have no `idempotency_window_ms` (it
/// reads as omitted). Still written for every command that neither sets a
/// window nor carries a remote key, so a leader of an older build takes
/// what upgraded nodes propose (see [`command_layout`]).
pub const COMMAND_VERSION_BEFORE_WINDOW: u8 = 2;

/// The command version a member must report decoding before a remote
/// write (a remote kind, spec §6: new entry types are proposed only once
/// every member reports it applies them) is proposed. The remote kinds
/// came with no version of their own, so a build reporting version 3 may
/// not know them; every build that decodes version 4 does. Builds before
/// version 4 report no version at all.
pub const COMMAND_VERSION_FOR_REMOTES: u8 = 4;

const _: () = assert!(COMMAND_VERSION_FOR_REMOTES <= COMMAND_VERSION);

/// The command version every member must report decoding before `command`
/// is proposed ([`COMMAND_VERSION_FOR_REMOTES`] for the eight remote
/// kinds), or `None` when every build that can be a member applies it.
pub fn members_must_decode(command: &Command) -> Option<u8> {
    match command {
        Command::CreateRemote(_)
        | Command::UpdateRemote(_)
        | Command::DeleteRemote(_)
        | Command::ResealRemotes(_)
        | Command::AttachRemoteChild(_)
        | Command::PauseRemoteChild(_)
        | Command::ResumeRemoteChild(_)
        | Command::SkipRemoteRecord(_) => Some(COMMAND_VERSION_FOR_REMOTES),
        _ => None,
    }
}

/// Why a member whose report is `report` may not decode command version
/// `version`, or `None` when it does: the version it reported, or an error
/// getting its report (then its support is not known). A report of no
/// version is a release before reports, which decodes at most version 3.
pub fn why_behind(report: Result<Option<u8>, &str>, version: u8) -> Option<String> {
    match report {
        Ok(Some(reported)) if reported >= version => None,
        Ok(Some(reported)) => Some(format!("decodes command version {reported}")),
        Ok(None) => Some("reports no command version: an older release".to_owned()),
        Err(error) => Some(format!("its command version is not known: {error}")),
    }
}

/// The layout a command is written in: the oldest that holds it.
/// [`Layout::Current`] for a command carrying a remote key (its mint
/// time), [`Layout::BeforeKeyTime`] for a create or an alter that sets an
/// idempotency window, every other command in [`Layout::BeforeWindow`],
/// whose bytes an older build reads.
pub(super) fn command_layout(command: &Command) -> Layout {
    match command {
        Command::CreateRemote(_) | Command::ResealRemotes(_) => Layout::Current,
        Command::UpdateRemote(update) if update.key.is_some() => Layout::Current,
        Command::CreateTopic(create) if create.idempotency_window_ms.is_some() => {
            Layout::BeforeKeyTime
        }
        Command::AlterTopic(alter) if alter.idempotency_window_ms.is_some() => {
            Layout::BeforeKeyTime
        }
        _ => Layout::BeforeWindow,
    }
}

/// The version byte of `layout`.
pub(super) fn command_version(layout: Layout) -> u8 {
    match layout {
        Layout::Current => COMMAND_VERSION,
        Layout::BeforeKeyTime => COMMAND_VERSION_BEFORE_KEY_TIME,
        Layout::BeforeWindow => COMMAND_VERSION_BEFORE_WINDOW,
    }
}

impl Message for Command {
    const NAME: &'static str = "metastore command";
    const VERSION: u8 = COMMAND_VERSION;
}

/// Kind tags of [`Command`], in declaration order.
mod kind {
    pub(super) const CREATE_TOPIC: u8 = 1;
    pub(super) const ALTER_TOPIC: u8 = 2;
    pub(super) const DELETE_TOPIC: u8 = 3;
    pub(super) const ADD_SCHEMA_VERSION: u8 = 4;
    pub(super) const ATTACH_CHILD: u8 = 5;
    pub(super) const DETACH_CHILD: u8 = 6;
    pub(super) const ASSIGN_PARTITIONS: u8 = 7;
    pub(super) const REGISTER_MEMBER: u8 = 8;
    pub(super) const HEARTBEAT: u8 = 9;
    pub(super) const MARK_DEAD: u8 = 10;
    pub(super) const SET_DRAINING: u8 = 11;
    pub(super) const SEED_ADMIN: u8 = 12;
    pub(super) const CREATE_USER: u8 = 13;
    pub(super) const DELETE_USER: u8 = 14;
    pub(super) const SET_PASSWORD: u8 = 15;
    pub(super) const SET_GRANTS: u8 = 16;
    pub(super) const SET_MOVE_TARGETS: u8 = 17;
    pub(super) const ABORT_MOVE: u8 = 18;
    pub(super) const COMPLETE_MOVE: u8 = 19;
    pub(super) const REMOVE_MEMBER: u8 = 20;
    pub(super) const FORCE_PROMOTE: u8 = 21;
    pub(super) const CREATE_REMOTE: u8 = 22;
    pub(super) const UPDATE_REMOTE: u8 = 23;
    pub(super) const DELETE_REMOTE: u8 = 24;
    pub(super) const RESEAL_REMOTES: u8 = 25;
    pub(super) const ATTACH_REMOTE_CHILD: u8 = 26;
    pub(super) const PAUSE_REMOTE_CHILD: u8 = 27;
    pub(super) const RESUME_REMOTE_CHILD: u8 = 28;
    pub(super) const SKIP_REMOTE_RECORD: u8 = 29;
}

impl Encode for Command {
    fn encode(&self, writer: &mut Writer) {
        encode_command(self, writer, Layout::Current);
    }
}

/// Writes a command's kind and fields in `layout` (its version byte in
/// front is the caller's).
pub(super) fn encode_command(command: &Command, writer: &mut Writer, layout: Layout) {
    let (tag, body): (u8, &dyn Encode) = match command {
        Command::CreateTopic(body) => {
            writer.u8(kind::CREATE_TOPIC);
            return encode_create_topic(body, writer, layout);
        }
        Command::AlterTopic(body) => {
            writer.u8(kind::ALTER_TOPIC);
            return encode_alter_topic(body, writer, layout);
        }
        Command::DeleteTopic(body) => (kind::DELETE_TOPIC, body),
        Command::AddSchemaVersion(body) => (kind::ADD_SCHEMA_VERSION, body),
        Command::AttachChild(body) => (kind::ATTACH_CHILD, body),
        Command::DetachChild(body) => (kind::DETACH_CHILD, body),
        Command::AssignPartitions(body) => (kind::ASSIGN_PARTITIONS, body),
        Command::RegisterMember(body) => (kind::REGISTER_MEMBER, body),
        Command::Heartbeat(body) => (kind::HEARTBEAT, body),
        Command::MarkDead(body) => (kind::MARK_DEAD, body),
        Command::SetDraining(body) => (kind::SET_DRAINING, body),
        Command::SeedAdmin(body) => (kind::SEED_ADMIN, body),
        Command::CreateUser(body) => (kind::CREATE_USER, body),
        Command::DeleteUser(body) => (kind::DELETE_USER, body),
        Command::SetPassword(body) => (kind::SET_PASSWORD, body),
        Command::SetGrants(body) => (kind::SET_GRANTS, body),
        Command::SetMoveTargets(body) => (kind::SET_MOVE_TARGETS, body),
        Command::AbortMove(body) => (kind::ABORT_MOVE, body),
        Command::CompleteMove(body) => (kind::COMPLETE_MOVE, body),
        Command::RemoveMember(body) => (kind::REMOVE_MEMBER, body),
        Command::ForcePromote(body) => (kind::FORCE_PROMOTE, body),
        Command::CreateRemote(body) => {
            writer.u8(kind::CREATE_REMOTE);
            return remotes::encode_create_remote(body, writer, layout);
        }
        Command::UpdateRemote(body) => {
            writer.u8(kind::UPDATE_REMOTE);
            return remotes::encode_update_remote(body, writer, layout);
        }
        Command::DeleteRemote(body) => (kind::DELETE_REMOTE, body),
        Command::ResealRemotes(body) => {
            writer.u8(kind::RESEAL_REMOTES);
            return remotes::encode_reseal_remotes(body, writer, layout);
        }
        Command::AttachRemoteChild(body) => (kind::ATTACH_REMOTE_CHILD, body),
        Command::PauseRemoteChild(body) => (kind::PAUSE_REMOTE_CHILD, body),
        Command::ResumeRemoteChild(body) => (kind::RESUME_REMOTE_CHILD, body),
        Command::SkipRemoteRecord(body) => (kind::SKIP_REMOTE_RECORD, body),
    };
    writer.u8(tag);
    body.encode(writer);
}

impl Decode for Command {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        decode_command(reader, Layout::Current)
    }
}

/// Reads a command's kind and fields in `layout` (the version byte in front
/// chose it).
pub(super) fn decode_command(reader: &mut Reader, layout: Layout) -> Result<Command, DecodeError> {
    Ok(match reader.u8("metastore command kind")? {
        kind::CREATE_TOPIC => Command::CreateTopic(decode_create_topic(reader, layout)?),
        kind::ALTER_TOPIC => Command::AlterTopic(decode_alter_topic(reader, layout)?),
        kind::DELETE_TOPIC => Command::DeleteTopic(DeleteTopic::decode(reader)?),
        kind::ADD_SCHEMA_VERSION => Command::AddSchemaVersion(AddSchemaVersion::decode(reader)?),
        kind::ATTACH_CHILD => Command::AttachChild(AttachChild::decode(reader)?),
        kind::DETACH_CHILD => Command::DetachChild(DetachChild::decode(reader)?),
        kind::ASSIGN_PARTITIONS => Command::AssignPartitions(AssignPartitions::decode(reader)?),
        kind::REGISTER_MEMBER => Command::RegisterMember(RegisterMember::decode(reader)?),
        kind::HEARTBEAT => Command::Heartbeat(Heartbeat::decode(reader)?),
        kind::MARK_DEAD => Command::MarkDead(MarkDead::decode(reader)?),
        kind::SET_DRAINING => Command::SetDraining(SetDraining::decode(reader)?),
        kind::SEED_ADMIN => Command::SeedAdmin(SeedAdmin::decode(reader)?),
        kind::CREATE_USER => Command::CreateUser(CreateUser::decode(reader)?),
        kind::DELETE_USER => Command::DeleteUser(DeleteUser::decode(reader)?),
        kind::SET_PASSWORD => Command::SetPassword(SetPassword::decode(reader)?),
        kind::SET_GRANTS => Command::SetGrants(SetGrants::decode(reader)?),
        kind::SET_MOVE_TARGETS => Command::SetMoveTargets(SetMoveTargets::decode(reader)?),
        kind::ABORT_MOVE => Command::AbortMove(AbortMove::decode(reader)?),
        kind::COMPLETE_MOVE => Command::CompleteMove(CompleteMove::decode(reader)?),
        kind::REMOVE_MEMBER => Command::RemoveMember(RemoveMember::decode(reader)?),
        kind::FORCE_PROMOTE => Command::ForcePromote(CompleteMove::decode(reader)?),
        kind::CREATE_REMOTE => {
            Command::CreateRemote(remotes::decode_create_remote(reader, layout)?)
        }
        kind::UPDATE_REMOTE => {
            Command::UpdateRemote(remotes::decode_update_remote(reader, layout)?)
        }
        kind::DELETE_REMOTE => Command::DeleteRemote(DeleteRemote::decode(reader)?),
        kind::RESEAL_REMOTES => {
            Command::ResealRemotes(remotes::decode_reseal_remotes(reader, layout)?)
        }
        kind::ATTACH_REMOTE_CHILD => Command::AttachRemoteChild(AttachRemoteChild::decode(reader)?),
        kind::PAUSE_REMOTE_CHILD => Command::PauseRemoteChild(PauseRemoteChild::decode(reader)?),
        kind::RESUME_REMOTE_CHILD => Command::ResumeRemoteChild(ResumeRemoteChild::decode(reader)?),
        kind::SKIP_REMOTE_RECORD => Command::SkipRemoteRecord(SkipRemoteRecord::decode(reader)?),
        other => return Err(invalid("metastore command kind", other)),
    })
}

impl Encode for NewLink {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.parent);
        put_incarnation(writer, &self.parent_id);
        put_opt_i64(writer, self.fanout_delay_ms);
        put_epoch(writer, &self.attach_epoch);
        put_offsets(writer, &self.attach_offsets);
    }
}

impl Decode for NewLink {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            parent: reader.str("link parent")?,
            parent_id: get_incarnation(reader, "link parent id")?,
            fanout_delay_ms: get_opt_i64(reader, "link fanout_delay_ms")?,
            attach_epoch: get_epoch(reader, "link attach epoch")?,
            attach_offsets: get_offsets(reader)?,
        })
    }
}

impl Encode for CreateTopic {
    fn encode(&self, writer: &mut Writer) {
        encode_create_topic(self, writer, Layout::Current);
    }
}

/// Writes a create in `layout`; [`Layout::BeforeWindow`] has no window.
fn encode_create_topic(create: &CreateTopic, writer: &mut Writer, layout: Layout) {
    create.actor.encode(writer);
    writer.str(&create.name);
    put_incarnation(writer, &create.id);
    put_opt_i64(writer, create.partitions);
    put_opt_i64(writer, create.retention_ms);
    put_opt_i64(writer, create.visibility_timeout_ms);
    put_opt_i64(writer, create.max_in_flight_per_partition);
    put_opt_i64(writer, create.max_acked_ahead_per_partition);
    put_window(writer, create.idempotency_window_ms, layout);
    put_opt_str(writer, create.schema.as_deref());
    put_option(writer, create.parent.as_ref(), |writer, link| {
        link.encode(writer);
    });
    create.defaults.encode(writer);
    writer.u64(create.created_at_ms);
}

/// Writes the optional idempotency window of a create or an alter in
/// `layout`.
///
/// # Panics
/// If `layout` has no window and one is set: [`command_layout`] chooses the
/// layout that has one.
fn put_window(writer: &mut Writer, window: Option<i64>, layout: Layout) {
    if layout.has_window() {
        put_opt_i64(writer, window);
    } else {
        assert!(
            window.is_none(),
            "a command that sets an idempotency window is written in a layout that has one"
        );
    }
}

impl Decode for CreateTopic {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        decode_create_topic(reader, Layout::Current)
    }
}

/// Reads a create in `layout`; in [`Layout::BeforeWindow`] it has no
/// window, which reads as omitted (the default).
fn decode_create_topic(reader: &mut Reader, layout: Layout) -> Result<CreateTopic, DecodeError> {
    Ok(CreateTopic {
        actor: Actor::decode(reader)?,
        name: reader.str("topic name")?,
        id: get_incarnation(reader, "topic incarnation id")?,
        partitions: get_opt_i64(reader, "partitions")?,
        retention_ms: get_opt_i64(reader, "retention_ms")?,
        visibility_timeout_ms: get_opt_i64(reader, "visibility_timeout_ms")?,
        max_in_flight_per_partition: get_opt_i64(reader, "max_in_flight_per_partition")?,
        max_acked_ahead_per_partition: get_opt_i64(reader, "max_acked_ahead_per_partition")?,
        idempotency_window_ms: get_window(reader, layout)?,
        schema: get_opt_str(reader, "schema")?,
        parent: get_option(reader, "parent link", NewLink::decode)?,
        defaults: TopicDefaults::decode(reader)?,
        created_at_ms: reader.u64("created_at_ms")?,
    })
}

/// The optional idempotency window of a create or an alter in `layout`.
fn get_window(reader: &mut Reader, layout: Layout) -> Result<Option<i64>, DecodeError> {
    if layout.has_window() {
        get_opt_i64(reader, "idempotency_window_ms")
    } else {
        Ok(None)
    }
}

impl Encode for AlterTopic {
    fn encode(&self, writer: &mut Writer) {
        encode_alter_topic(self, writer, Layout::Current);
    }
}

/// Writes an alter in `layout`; [`Layout::BeforeWindow`] has no window.
fn encode_alter_topic(alter: &AlterTopic, writer: &mut Writer, layout: Layout) {
    alter.actor.encode(writer);
    writer.str(&alter.name);
    put_opt_incarnation(writer, alter.expected_id.as_ref());
    put_opt_i64(writer, alter.retention_ms);
    put_opt_i64(writer, alter.max_in_flight_per_partition);
    put_opt_i64(writer, alter.max_acked_ahead_per_partition);
    put_window(writer, alter.idempotency_window_ms, layout);
    put_opt_i64(writer, alter.partitions);
    alter.defaults.encode(writer);
}

impl Decode for AlterTopic {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        decode_alter_topic(reader, Layout::Current)
    }
}

/// Reads an alter in `layout`; in [`Layout::BeforeWindow`] it has no
/// window, which reads as not changed.
fn decode_alter_topic(reader: &mut Reader, layout: Layout) -> Result<AlterTopic, DecodeError> {
    Ok(AlterTopic {
        actor: Actor::decode(reader)?,
        name: reader.str("topic name")?,
        expected_id: get_opt_incarnation(reader, "expected incarnation id")?,
        retention_ms: get_opt_i64(reader, "retention_ms")?,
        max_in_flight_per_partition: get_opt_i64(reader, "max_in_flight_per_partition")?,
        max_acked_ahead_per_partition: get_opt_i64(reader, "max_acked_ahead_per_partition")?,
        idempotency_window_ms: get_window(reader, layout)?,
        partitions: get_opt_i64(reader, "partitions")?,
        defaults: TopicDefaults::decode(reader)?,
    })
}

impl Encode for DeleteTopic {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.name);
        put_opt_incarnation(writer, self.expected_id.as_ref());
    }
}

impl Decode for DeleteTopic {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            name: reader.str("topic name")?,
            expected_id: get_opt_incarnation(reader, "expected incarnation id")?,
        })
    }
}

impl Encode for AddSchemaVersion {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.name);
        put_opt_incarnation(writer, self.expected_id.as_ref());
        writer.str(&self.document);
        put_option(writer, self.base_version.as_ref(), |writer, version| {
            writer.u32(*version);
        });
    }
}

impl Decode for AddSchemaVersion {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            name: reader.str("topic name")?,
            expected_id: get_opt_incarnation(reader, "expected incarnation id")?,
            document: reader.str("schema document")?,
            base_version: get_option(reader, "schema_base_version", |reader| {
                reader.u32("schema_base_version")
            })?,
        })
    }
}

impl Encode for AttachChild {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.parent);
        put_opt_incarnation(writer, self.parent_id.as_ref());
        writer.str(&self.child);
        put_opt_incarnation(writer, self.child_id.as_ref());
        put_opt_i64(writer, self.delay_ms);
        put_epoch(writer, &self.attach_epoch);
        put_offsets(writer, &self.attach_offsets);
    }
}

impl Decode for AttachChild {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            parent: reader.str("parent name")?,
            parent_id: get_opt_incarnation(reader, "parent incarnation id")?,
            child: reader.str("child name")?,
            child_id: get_opt_incarnation(reader, "child incarnation id")?,
            delay_ms: get_opt_i64(reader, "delay_ms")?,
            attach_epoch: get_epoch(reader, "attach epoch")?,
            attach_offsets: get_offsets(reader)?,
        })
    }
}

impl Encode for DetachChild {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.parent);
        writer.str(&self.child);
    }
}

impl Decode for DetachChild {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            parent: reader.str("parent name")?,
            child: reader.str("child name")?,
        })
    }
}

impl Encode for AssignPartitions {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.topic);
        put_incarnation(writer, &self.id);
        put_list(
            writer,
            "partition owners",
            &self.owners,
            PARTITION_SLOTS_MAX,
            |writer, placement| {
                writer.u32(placement.partition);
                writer.str(&placement.owner);
            },
        );
    }
}

impl Decode for AssignPartitions {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            topic: reader.str("topic name")?,
            id: get_incarnation(reader, "topic incarnation id")?,
            owners: get_list(
                reader,
                "partition owners",
                PARTITION_SLOTS_MAX,
                4 + STR_BYTES_MIN,
                |reader| {
                    Ok(PartitionOwner {
                        partition: reader.u32("placement partition")?,
                        owner: reader.str("placement owner")?,
                    })
                },
            )?,
        })
    }
}

impl Encode for RegisterMember {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.id);
        writer.str(&self.http_addr);
        writer.str(&self.rpc_addr);
        writer.u64(self.at_ms);
    }
}

impl Decode for RegisterMember {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            id: reader.str("member id")?,
            http_addr: reader.str("member http_addr")?,
            rpc_addr: reader.str("member rpc_addr")?,
            at_ms: reader.u64("at_ms")?,
        })
    }
}

impl Encode for Heartbeat {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.id);
        writer.u64(self.at_ms);
    }
}

impl Decode for Heartbeat {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            id: reader.str("member id")?,
            at_ms: reader.u64("at_ms")?,
        })
    }
}

impl Encode for MarkDead {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.id);
        writer.u64(self.observed_heartbeat_ms);
    }
}

impl Decode for MarkDead {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            id: reader.str("member id")?,
            observed_heartbeat_ms: reader.u64("observed_heartbeat_ms")?,
        })
    }
}

impl Encode for SetDraining {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.id);
        put_bool(writer, self.draining);
    }
}

impl Decode for SetDraining {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            id: reader.str("member id")?,
            draining: get_bool(reader, "draining")?,
        })
    }
}

impl Encode for SetMoveTargets {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.topic);
        put_incarnation(writer, &self.id);
        put_list(
            writer,
            "move targets",
            &self.moves,
            PARTITION_SLOTS_MAX,
            |writer, step| {
                writer.u32(step.partition);
                writer.str(&step.owner);
                writer.str(&step.target);
            },
        );
    }
}

impl Decode for SetMoveTargets {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            topic: reader.str("topic name")?,
            id: get_incarnation(reader, "topic incarnation id")?,
            moves: get_list(
                reader,
                "move targets",
                PARTITION_SLOTS_MAX,
                4 + 2 * STR_BYTES_MIN,
                |reader| {
                    Ok(MoveTarget {
                        partition: reader.u32("move partition")?,
                        owner: reader.str("move owner")?,
                        target: reader.str("move target")?,
                    })
                },
            )?,
        })
    }
}

impl Encode for AbortMove {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.topic);
        put_incarnation(writer, &self.id);
        writer.u32(self.partition);
        writer.str(&self.target);
    }
}

impl Decode for AbortMove {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            topic: reader.str("topic name")?,
            id: get_incarnation(reader, "topic incarnation id")?,
            partition: reader.u32("move partition")?,
            target: reader.str("move target")?,
        })
    }
}

impl Encode for CompleteMove {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.topic);
        put_incarnation(writer, &self.id);
        writer.u32(self.partition);
        writer.str(&self.source);
        writer.str(&self.target);
    }
}

impl Decode for CompleteMove {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            topic: reader.str("topic name")?,
            id: get_incarnation(reader, "topic incarnation id")?,
            partition: reader.u32("move partition")?,
            source: reader.str("move source")?,
            target: reader.str("move target")?,
        })
    }
}

impl Encode for RemoveMember {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.id);
    }
}

impl Decode for RemoveMember {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            id: reader.str("member id")?,
        })
    }
}

impl Encode for SeedAdmin {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.username);
        put_hash(writer, &self.password_hash);
        writer.u64(self.at_ms);
    }
}

impl Decode for SeedAdmin {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            username: reader.str("username")?,
            password_hash: get_hash(reader, "password hash (length)")?,
            at_ms: reader.u64("at_ms")?,
        })
    }
}

impl Encode for CreateUser {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.username);
        put_hash(writer, &self.password_hash);
        put_grants(writer, &self.grants);
        writer.u64(self.at_ms);
    }
}

impl Decode for CreateUser {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            username: reader.str("username")?,
            password_hash: get_hash(reader, "password hash (length)")?,
            grants: get_grants(reader)?,
            at_ms: reader.u64("at_ms")?,
        })
    }
}

impl Encode for DeleteUser {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.username);
    }
}

impl Decode for DeleteUser {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            username: reader.str("username")?,
        })
    }
}

impl Encode for SetPassword {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.username);
        put_hash(writer, &self.password_hash);
        put_option(writer, self.checked_hash.as_ref(), put_hash);
        writer.u64(self.at_ms);
    }
}

impl Decode for SetPassword {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            username: reader.str("username")?,
            password_hash: get_hash(reader, "password hash (length)")?,
            checked_hash: get_option(reader, "checked hash", |reader| {
                get_hash(reader, "checked hash (length)")
            })?,
            at_ms: reader.u64("at_ms")?,
        })
    }
}

impl Encode for SetGrants {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.username);
        put_grants(writer, &self.grants);
        writer.u64(self.at_ms);
    }
}

impl Decode for SetGrants {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            username: reader.str("username")?,
            grants: get_grants(reader)?,
            at_ms: reader.u64("at_ms")?,
        })
    }
}
