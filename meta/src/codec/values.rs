//! Field-by-field encodings of the values that metastore commands and the
//! metastore state carry: ids, password hashes, actors, topic defaults,
//! topic records with their fan-out links and schema histories, grants,
//! members and users. Each decoder reads exactly what its encoder writes and
//! refuses every other byte pattern (an unknown tag, a presence byte other
//! than 0 or 1, a malformed password hash), so a value has one encoding.

use std::mem::size_of;

use narad_protocol::limits::FRAME_BYTES_MAX;
use narad_protocol::{Decode, DecodeError, Encode, Reader, Writer};

use super::Layout;
use crate::limits::{CHILDREN_MAX, IDEMPOTENCY_WINDOW_MS_DEFAULT, SCHEMA_VERSIONS_MAX};
use crate::{
    Actor, AttachEpoch, Grant, GrantAction, IncarnationId, Member, MemberStatus, ParentLink,
    PasswordHash, SchemaVersion, Topic, TopicDefaults, User,
};
use narad_protocol::fields::{
    get_bool, get_count, get_option, invalid, put_bool, put_count, put_option,
};

/// The most partition slots a list holds (a topic's attach offsets, its
/// placements, a command's owners). Partition counts are configured far
/// below this (the spec's default ceiling is 108); the bound only stops a
/// forged count.
pub const PARTITION_SLOTS_MAX: u32 = 1 << 20;

/// The most items of a list without a domain limit of its own (a user's
/// grants, a grant's patterns). Every item takes at least 4 bytes, so no
/// list that fits a frame can be longer: the bound never refuses a command
/// that could travel, and stops a forged count.
pub(crate) const LIST_ITEMS_MAX: u32 = (FRAME_BYTES_MAX / 4) as u32;

const _: () = assert!(FRAME_BYTES_MAX / 4 <= u32::MAX as usize);
const _: () = assert!(PARTITION_SLOTS_MAX <= LIST_ITEMS_MAX);

/// Smallest encoding of a string: its length prefix.
pub(super) const STR_BYTES_MIN: usize = 4;

/// Appends a counted list, each item by `put`.
///
/// # Panics
/// If the list is longer than `max` (see [`put_count`]).
pub(super) fn put_list<T>(
    writer: &mut Writer,
    field: &'static str,
    items: &[T],
    max: u32,
    mut put: impl FnMut(&mut Writer, &T),
) {
    put_count(writer, field, items.len(), max);
    for item in items {
        put(writer, item);
    }
}

/// Reads a list written by [`put_list`]. The count is checked against `max`
/// and against the input at `item_bytes_min` bytes per item before anything
/// is reserved, and the reservation never exceeds the bytes that remain, so
/// a forged count costs no memory the input does not back.
///
/// # Errors
/// The count's errors (see [`get_count`]), then the items'.
pub(super) fn get_list<T>(
    reader: &mut Reader,
    field: &'static str,
    max: u32,
    item_bytes_min: usize,
    mut get: impl FnMut(&mut Reader) -> Result<T, DecodeError>,
) -> Result<Vec<T>, DecodeError> {
    assert!(item_bytes_min > 0, "{field}: an item takes at least a byte");
    let count = get_count(reader, field, max, item_bytes_min)?;
    let reserve = count.min(reader.remaining() / size_of::<T>().max(1));
    let mut items = Vec::with_capacity(reserve);
    for _ in 0..count {
        items.push(get(reader)?);
    }
    Ok(items)
}

/// Appends an optional signed number (the client's fields as sent).
pub(super) fn put_opt_i64(writer: &mut Writer, value: Option<i64>) {
    put_option(writer, value.as_ref(), |writer, value| writer.i64(*value));
}

/// Reads an optional signed number written by [`put_opt_i64`].
pub(super) fn get_opt_i64(
    reader: &mut Reader,
    field: &'static str,
) -> Result<Option<i64>, DecodeError> {
    get_option(reader, field, |reader| reader.i64(field))
}

/// Appends an optional string.
pub(super) fn put_opt_str(writer: &mut Writer, value: Option<&str>) {
    put_option(writer, value, Writer::str);
}

/// Reads an optional string written by [`put_opt_str`].
pub(super) fn get_opt_str(
    reader: &mut Reader,
    field: &'static str,
) -> Result<Option<String>, DecodeError> {
    get_option(reader, field, |reader| reader.str(field))
}

/// The 8 bytes of a hex id.
///
/// # Panics
/// If `text` is not 16 hex characters: every constructor of the id types
/// checks that, so it cannot happen.
fn hex_bits(text: &str) -> u64 {
    u64::from_str_radix(text, 16).expect("a hex id is 16 hex characters")
}

/// Appends an incarnation id as its 8 bytes.
pub fn put_incarnation(writer: &mut Writer, id: &IncarnationId) {
    writer.u64(hex_bits(id.as_str()));
}

/// Reads an incarnation id written by [`put_incarnation`]. Every 8 bytes
/// are an id, so only a short input fails.
pub fn get_incarnation(
    reader: &mut Reader,
    field: &'static str,
) -> Result<IncarnationId, DecodeError> {
    Ok(IncarnationId::from_bits(reader.u64(field)?))
}

/// Appends an optional incarnation id (the one a proposer read, if any).
pub(super) fn put_opt_incarnation(writer: &mut Writer, id: Option<&IncarnationId>) {
    put_option(writer, id, put_incarnation);
}

/// Reads an optional incarnation id written by [`put_opt_incarnation`].
pub(super) fn get_opt_incarnation(
    reader: &mut Reader,
    field: &'static str,
) -> Result<Option<IncarnationId>, DecodeError> {
    get_option(reader, field, |reader| get_incarnation(reader, field))
}

/// Appends an attach epoch as its 8 bytes.
pub fn put_epoch(writer: &mut Writer, epoch: &AttachEpoch) {
    writer.u64(hex_bits(epoch.as_str()));
}

/// Reads an attach epoch written by [`put_epoch`].
pub fn get_epoch(reader: &mut Reader, field: &'static str) -> Result<AttachEpoch, DecodeError> {
    Ok(AttachEpoch::from_bits(reader.u64(field)?))
}

/// Appends a bcrypt hash as its text.
pub(super) fn put_hash(writer: &mut Writer, hash: &PasswordHash) {
    writer.str(hash.as_str());
}

/// Reads a bcrypt hash written by [`put_hash`]. A text that is not a hash
/// is refused; the error carries its length, never the text (a hash is a
/// secret's derivative and error texts reach logs).
pub(super) fn get_hash(
    reader: &mut Reader,
    field: &'static str,
) -> Result<PasswordHash, DecodeError> {
    let text = reader.str(field)?;
    let length = text.len() as u64;
    PasswordHash::try_from(text).map_err(|_| invalid(field, length))
}

/// Appends a list of 8-byte offsets (a fan-out attach point).
pub(super) fn put_offsets(writer: &mut Writer, offsets: &[u64]) {
    put_list(
        writer,
        "attach offsets",
        offsets,
        PARTITION_SLOTS_MAX,
        |writer, offset| writer.u64(*offset),
    );
}

/// Reads offsets written by [`put_offsets`].
pub(super) fn get_offsets(reader: &mut Reader) -> Result<Vec<u64>, DecodeError> {
    get_list(reader, "attach offsets", PARTITION_SLOTS_MAX, 8, |reader| {
        reader.u64("attach offset")
    })
}

/// Tags of [`Actor`].
mod actor {
    pub(super) const SECURITY_OFF: u8 = 1;
    pub(super) const USER: u8 = 2;
}

impl Encode for Actor {
    fn encode(&self, writer: &mut Writer) {
        match self {
            Self::SecurityOff => writer.u8(actor::SECURITY_OFF),
            Self::User(username) => {
                writer.u8(actor::USER);
                writer.str(username);
            }
        }
    }
}

impl Decode for Actor {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        match reader.u8("Actor kind")? {
            actor::SECURITY_OFF => Ok(Self::SecurityOff),
            actor::USER => Ok(Self::User(reader.str("actor username")?)),
            other => Err(invalid("Actor kind", other)),
        }
    }
}

impl Encode for TopicDefaults {
    fn encode(&self, writer: &mut Writer) {
        writer.u32(self.partitions);
        writer.u32(self.partitions_max);
        writer.u64(self.retention_ms);
        writer.u64(self.visibility_timeout_ms);
        writer.u64(self.max_in_flight_per_partition);
        writer.u64(self.max_acked_ahead_per_partition);
    }
}

impl Decode for TopicDefaults {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            partitions: reader.u32("defaults partitions")?,
            partitions_max: reader.u32("defaults partitions_max")?,
            retention_ms: reader.u64("defaults retention_ms")?,
            visibility_timeout_ms: reader.u64("defaults visibility_timeout_ms")?,
            max_in_flight_per_partition: reader.u64("defaults max_in_flight_per_partition")?,
            max_acked_ahead_per_partition: reader.u64("defaults max_acked_ahead_per_partition")?,
        })
    }
}

impl Encode for SchemaVersion {
    fn encode(&self, writer: &mut Writer) {
        writer.u32(self.version);
        writer.str(&self.document);
    }
}

impl Decode for SchemaVersion {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            version: reader.u32("schema version")?,
            document: reader.str("schema document")?,
        })
    }
}

impl Encode for ParentLink {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.parent);
        put_epoch(writer, &self.attach_epoch);
        writer.u64(self.fanout_delay_ms);
        put_offsets(writer, &self.attach_offsets);
    }
}

impl Decode for ParentLink {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            parent: reader.str("parent name")?,
            attach_epoch: get_epoch(reader, "attach epoch")?,
            fanout_delay_ms: reader.u64("fanout_delay_ms")?,
            attach_offsets: get_offsets(reader)?,
        })
    }
}

/// Smallest encoded [`Topic`]: name prefix, id, partitions, six `u64`
/// settings and stamps, owner presence, schema count, parent presence,
/// child count.
pub(super) const TOPIC_BYTES_MIN: usize = STR_BYTES_MIN + 8 + 4 + 6 * 8 + 1 + 4 + 1 + 4;

/// Smallest [`Topic`] in [`Layout::BeforeWindow`]: no window.
pub(super) const TOPIC_BYTES_MIN_BEFORE_WINDOW: usize = TOPIC_BYTES_MIN - 8;

impl Encode for Topic {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.name);
        put_incarnation(writer, &self.id);
        writer.u32(self.partitions);
        writer.u64(self.retention_ms);
        writer.u64(self.visibility_timeout_ms);
        writer.u64(self.max_in_flight_per_partition);
        writer.u64(self.max_acked_ahead_per_partition);
        writer.u64(self.idempotency_window_ms);
        writer.u64(self.created_at_ms);
        put_opt_str(writer, self.owner.as_deref());
        put_list(
            writer,
            "schema versions",
            &self.schemas,
            SCHEMA_VERSIONS_MAX as u32,
            |writer, schema| schema.encode(writer),
        );
        put_option(writer, self.parent.as_ref(), |writer, link| {
            link.encode(writer);
        });
        put_list(
            writer,
            "children",
            &self.children,
            CHILDREN_MAX as u32,
            |writer, child| writer.str(child),
        );
    }
}

impl Decode for Topic {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        decode_topic(reader, Layout::Current)
    }
}

/// Reads a topic in `layout`; one in [`Layout::BeforeWindow`] has no window
/// field and takes the default window.
pub(super) fn decode_topic(reader: &mut Reader, layout: Layout) -> Result<Topic, DecodeError> {
    Ok(Topic {
        name: reader.str("topic name")?,
        id: get_incarnation(reader, "topic incarnation id")?,
        partitions: reader.u32("topic partitions")?,
        retention_ms: reader.u64("topic retention_ms")?,
        visibility_timeout_ms: reader.u64("topic visibility_timeout_ms")?,
        max_in_flight_per_partition: reader.u64("topic max_in_flight_per_partition")?,
        max_acked_ahead_per_partition: reader.u64("topic max_acked_ahead_per_partition")?,
        idempotency_window_ms: if layout.has_window() {
            reader.u64("topic idempotency_window_ms")?
        } else {
            IDEMPOTENCY_WINDOW_MS_DEFAULT
        },
        created_at_ms: reader.u64("topic created_at_ms")?,
        owner: get_opt_str(reader, "topic owner")?,
        schemas: get_list(
            reader,
            "schema versions",
            SCHEMA_VERSIONS_MAX as u32,
            4 + STR_BYTES_MIN,
            SchemaVersion::decode,
        )?,
        parent: get_option(reader, "topic parent", ParentLink::decode)?,
        children: get_list(
            reader,
            "children",
            CHILDREN_MAX as u32,
            STR_BYTES_MIN,
            |reader| reader.str("child name"),
        )?,
    })
}

/// Appends a topic record (for callers that take a function).
pub fn put_topic(writer: &mut Writer, topic: &Topic) {
    topic.encode(writer);
}

/// Reads a topic record written by [`put_topic`].
pub fn get_topic(reader: &mut Reader) -> Result<Topic, DecodeError> {
    Topic::decode(reader)
}

/// Tags of [`GrantAction`].
mod action {
    pub(super) const PRODUCE: u8 = 1;
    pub(super) const CONSUME: u8 = 2;
    pub(super) const CREATE: u8 = 3;
    pub(super) const ADMIN: u8 = 4;
}

/// Smallest encoded [`Grant`]: action tag and pattern count.
pub(super) const GRANT_BYTES_MIN: usize = 1 + 4;

impl Encode for Grant {
    fn encode(&self, writer: &mut Writer) {
        writer.u8(match self.action {
            GrantAction::Produce => action::PRODUCE,
            GrantAction::Consume => action::CONSUME,
            GrantAction::Create => action::CREATE,
            GrantAction::Admin => action::ADMIN,
        });
        put_list(
            writer,
            "grant patterns",
            &self.patterns,
            LIST_ITEMS_MAX,
            |writer, pattern| writer.str(pattern),
        );
    }
}

impl Decode for Grant {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let action = match reader.u8("GrantAction kind")? {
            action::PRODUCE => GrantAction::Produce,
            action::CONSUME => GrantAction::Consume,
            action::CREATE => GrantAction::Create,
            action::ADMIN => GrantAction::Admin,
            other => return Err(invalid("GrantAction kind", other)),
        };
        let patterns = get_list(
            reader,
            "grant patterns",
            LIST_ITEMS_MAX,
            STR_BYTES_MIN,
            |reader| reader.str("grant pattern"),
        )?;
        Ok(Self { action, patterns })
    }
}

/// Appends a list of grants.
pub(super) fn put_grants(writer: &mut Writer, grants: &[Grant]) {
    put_list(writer, "grants", grants, LIST_ITEMS_MAX, |writer, grant| {
        grant.encode(writer);
    });
}

/// Reads grants written by [`put_grants`].
pub(super) fn get_grants(reader: &mut Reader) -> Result<Vec<Grant>, DecodeError> {
    get_list(
        reader,
        "grants",
        LIST_ITEMS_MAX,
        GRANT_BYTES_MIN,
        Grant::decode,
    )
}

/// Tags of [`MemberStatus`].
mod status {
    pub(super) const ALIVE: u8 = 1;
    pub(super) const DEAD: u8 = 2;
}

/// Smallest encoded [`Member`]: three string prefixes, the heartbeat, the
/// status and the draining flag.
pub(super) const MEMBER_BYTES_MIN: usize = 3 * STR_BYTES_MIN + 8 + 1 + 1;

impl Encode for Member {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.id);
        writer.str(&self.http_addr);
        writer.str(&self.rpc_addr);
        writer.u64(self.last_heartbeat_ms);
        writer.u8(match self.status {
            MemberStatus::Alive => status::ALIVE,
            MemberStatus::Dead => status::DEAD,
        });
        put_bool(writer, self.draining);
    }
}

impl Decode for Member {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            id: reader.str("member id")?,
            http_addr: reader.str("member http_addr")?,
            rpc_addr: reader.str("member rpc_addr")?,
            last_heartbeat_ms: reader.u64("member last_heartbeat_ms")?,
            status: match reader.u8("MemberStatus kind")? {
                status::ALIVE => MemberStatus::Alive,
                status::DEAD => MemberStatus::Dead,
                other => return Err(invalid("MemberStatus kind", other)),
            },
            draining: get_bool(reader, "member draining")?,
        })
    }
}

/// Smallest encoded [`User`]: name and hash prefixes, root flag, grant
/// count, two stamps.
pub(super) const USER_BYTES_MIN: usize = 2 * STR_BYTES_MIN + 1 + 4 + 2 * 8;

impl Encode for User {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.username);
        put_hash(writer, &self.password_hash);
        put_bool(writer, self.root);
        put_grants(writer, &self.grants);
        writer.u64(self.created_at_ms);
        writer.u64(self.updated_at_ms);
    }
}

impl Decode for User {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            username: reader.str("username")?,
            password_hash: get_hash(reader, "password hash (length)")?,
            root: get_bool(reader, "user root")?,
            grants: get_grants(reader)?,
            created_at_ms: reader.u64("user created_at_ms")?,
            updated_at_ms: reader.u64("user updated_at_ms")?,
        })
    }
}
