//! Encodings of metastore values inside control-plane messages: the
//! command a log entry or a proposal carries, topic records, and the
//! 8-byte ids.
//!
//! A command is the state machine's own format, persisted in the Raft log
//! and replayed by every replica: serde JSON of [`Command`]. Changing it is
//! a change of the log format, not of the wire, so on the wire it travels
//! as a blob: a format byte ([`COMMAND_FORMAT_JSON`]) and the JSON,
//! length-prefixed. A peer that meets another format refuses the message
//! by name instead of guessing.

use narad_protocol::{DecodeError, Reader, Writer};

use super::fields::{get_count, get_option, invalid, put_count, put_option};
use crate::metastore::limits::{CHILDREN_MAX, SCHEMA_VERSIONS_MAX};
use crate::metastore::{AttachEpoch, Command, IncarnationId, ParentLink, SchemaVersion, Topic};

/// Format byte of a command blob whose bytes are the serde JSON of
/// [`Command`].
pub(crate) const COMMAND_FORMAT_JSON: u8 = 1;

/// The most partition slots a list on the wire holds (a topic's attach
/// offsets, its owners). Partition counts are configured far below this
/// (the spec's default ceiling is 108); the bound only stops a forged count.
pub(crate) const PARTITION_SLOTS_MAX: u32 = 1 << 20;

/// Appends a command blob: format byte, then the JSON, length-prefixed.
///
/// # Panics
/// If the command does not serialize: every field of [`Command`] is a
/// string, number, list or struct, so serde JSON cannot fail on it.
pub(crate) fn put_command(writer: &mut Writer, command: &Command) {
    let json = serde_json::to_vec(command).expect("a metastore command serializes to JSON");
    writer.u8(COMMAND_FORMAT_JSON);
    writer.bytes(&json);
}

/// Reads a command blob written by [`put_command`].
///
/// # Errors
/// [`DecodeError::UnsupportedVersion`] for another format byte; a JSON that
/// is not a command is [`DecodeError::InvalidValue`] whose value is the
/// column serde JSON stopped at.
pub(crate) fn get_command(reader: &mut Reader) -> Result<Command, DecodeError> {
    let format = reader.u8("command format")?;
    if format != COMMAND_FORMAT_JSON {
        return Err(DecodeError::UnsupportedVersion {
            what: "metastore command format",
            found: format,
            supported: COMMAND_FORMAT_JSON,
        });
    }
    let json = reader.bytes("command json")?;
    serde_json::from_slice(&json).map_err(|error| {
        invalid(
            "command json (column of the first error)",
            error.column() as u64,
        )
    })
}

/// Appends an incarnation id as its 8 bytes.
pub(crate) fn put_incarnation(writer: &mut Writer, id: &IncarnationId) {
    writer.u64(hex_bits(id.as_str()));
}

/// Reads an incarnation id written by [`put_incarnation`].
pub(crate) fn get_incarnation(
    reader: &mut Reader,
    field: &'static str,
) -> Result<IncarnationId, DecodeError> {
    Ok(IncarnationId::from_bits(reader.u64(field)?))
}

/// Appends an attach epoch as its 8 bytes.
pub(crate) fn put_epoch(writer: &mut Writer, epoch: &AttachEpoch) {
    writer.u64(hex_bits(epoch.as_str()));
}

/// Reads an attach epoch written by [`put_epoch`].
pub(crate) fn get_epoch(
    reader: &mut Reader,
    field: &'static str,
) -> Result<AttachEpoch, DecodeError> {
    Ok(AttachEpoch::from_bits(reader.u64(field)?))
}

/// The 8 bytes of a hex id.
///
/// # Panics
/// If `text` is not 16 hex characters: every constructor of the id types
/// checks that, so it cannot happen.
fn hex_bits(text: &str) -> u64 {
    u64::from_str_radix(text, 16).expect("a hex id is 16 hex characters")
}

/// Appends a topic record, field by field in declaration order.
pub(crate) fn put_topic(writer: &mut Writer, topic: &Topic) {
    writer.str(&topic.name);
    put_incarnation(writer, &topic.id);
    writer.u32(topic.partitions);
    writer.u64(topic.retention_ms);
    writer.u64(topic.visibility_timeout_ms);
    writer.u64(topic.max_in_flight_per_partition);
    writer.u64(topic.max_acked_ahead_per_partition);
    writer.u64(topic.created_at_ms);
    put_option(writer, topic.owner.as_deref(), Writer::str);
    put_count(
        writer,
        "schema versions",
        topic.schemas.len(),
        SCHEMA_VERSIONS_MAX as u32,
    );
    for schema in &topic.schemas {
        writer.u32(schema.version);
        writer.str(&schema.document);
    }
    put_option(writer, topic.parent.as_ref(), put_parent_link);
    put_count(
        writer,
        "children",
        topic.children.len(),
        CHILDREN_MAX as u32,
    );
    for child in &topic.children {
        writer.str(child);
    }
}

/// Reads a topic record written by [`put_topic`].
pub(crate) fn get_topic(reader: &mut Reader) -> Result<Topic, DecodeError> {
    let name = reader.str("topic name")?;
    let id = get_incarnation(reader, "topic incarnation id")?;
    let partitions = reader.u32("topic partitions")?;
    let retention_ms = reader.u64("topic retention_ms")?;
    let visibility_timeout_ms = reader.u64("topic visibility_timeout_ms")?;
    let max_in_flight_per_partition = reader.u64("topic max_in_flight_per_partition")?;
    let max_acked_ahead_per_partition = reader.u64("topic max_acked_ahead_per_partition")?;
    let created_at_ms = reader.u64("topic created_at_ms")?;
    let owner = get_option(reader, "topic owner", |reader| reader.str("topic owner"))?;
    let schema_count = get_count(reader, "schema versions", SCHEMA_VERSIONS_MAX as u32, 8)?;
    let mut schemas = Vec::with_capacity(schema_count);
    for _ in 0..schema_count {
        schemas.push(SchemaVersion {
            version: reader.u32("schema version")?,
            document: reader.str("schema document")?,
        });
    }
    let parent = get_option(reader, "topic parent", get_parent_link)?;
    let child_count = get_count(reader, "children", CHILDREN_MAX as u32, 4)?;
    let mut children = Vec::with_capacity(child_count);
    for _ in 0..child_count {
        children.push(reader.str("child name")?);
    }
    Ok(Topic {
        name,
        id,
        partitions,
        retention_ms,
        visibility_timeout_ms,
        max_in_flight_per_partition,
        max_acked_ahead_per_partition,
        created_at_ms,
        owner,
        schemas,
        parent,
        children,
    })
}

fn put_parent_link(writer: &mut Writer, link: &ParentLink) {
    writer.str(&link.parent);
    put_epoch(writer, &link.attach_epoch);
    writer.u64(link.fanout_delay_ms);
    put_count(
        writer,
        "attach offsets",
        link.attach_offsets.len(),
        PARTITION_SLOTS_MAX,
    );
    for offset in &link.attach_offsets {
        writer.u64(*offset);
    }
}

fn get_parent_link(reader: &mut Reader) -> Result<ParentLink, DecodeError> {
    let parent = reader.str("parent name")?;
    let attach_epoch = get_epoch(reader, "attach epoch")?;
    let fanout_delay_ms = reader.u64("fanout_delay_ms")?;
    let count = get_count(reader, "attach offsets", PARTITION_SLOTS_MAX, 8)?;
    let mut attach_offsets = Vec::with_capacity(count);
    for _ in 0..count {
        attach_offsets.push(reader.u64("attach offset")?);
    }
    Ok(ParentLink {
        parent,
        attach_epoch,
        fanout_delay_ms,
        attach_offsets,
    })
}
