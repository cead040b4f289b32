//! Binary codecs of the metastore: a [`Command`] (in Raft entries,
//! proposals and metadata-stream changes) and the whole [`Metastore`]
//! (metadata-stream snapshots, and the state inside a Raft snapshot).
//! Layouts are drawn in `docs/internals/metastore-formats.md`.
//!
//! - A command is `u8 version` ([`COMMAND_VERSION`], 4), a kind tag, then
//!   the command's fields in declaration order.
//! - A state is `u8 version` ([`STATE_VERSION`], 5), then topics,
//!   placements (owner and move target per slot), members and users, each
//!   map in key order, the ids of removed members, the change counters, the
//!   applied index and the remotes section. The same state always gives
//!   the same bytes.
//!
//! Every decoder refuses trailing bytes, an unknown version (naming the
//! type), an unknown kind or enum tag (naming the type and the tag), and a
//! count that the remaining input cannot hold, before reserving anything.
//!
//! **The forms of earlier builds are still read.** Command version 2 and
//! state version 1 are the binary forms from before the idempotency window
//! was a topic setting (see [`Layout::BeforeWindow`]); state version 2 is
//! the form from before moves (no move targets, no removed members);
//! state version 3 the form from before remotes. Command version 3 and
//! state version 4 are the forms from before the cluster remote key
//! recorded its mint time (see [`Layout::BeforeKeyTime`]). State versions
//! 1 to 4 are never written. Each command is written in the oldest version
//! that holds it ([`command::command_layout`]): version 2 unless it sets
//! an idempotency window (3) or carries a remote key (4), so an older
//! leader takes what upgraded nodes propose whenever it can.
//! Before the binary codecs a command crossed the wire as format byte 1
//! and its serde JSON, length-prefixed ([`COMMAND_FORMAT_JSON`]); a
//! metadata-stream change or snapshot was the bare JSON; a Raft snapshot
//! was the bare JSON of the state machine. The decoders here take all of
//! these, so a redb snapshot written by an older build still opens, and an
//! entry or proposal from an older peer still applies. Bare JSON is told
//! apart by its first byte: serde JSON of a struct or an enum starts with
//! `{`, which is no version byte. An older build cannot read the newer
//! forms: it refuses a command or a state of a version it does not speak
//! by name, and a JSON-only build fails to parse a binary snapshot.
//!
//! The Raft log in redb stores entries in the same binary form (see
//! `store/log.rs`), and reads the serde JSON entries of older builds too.
//! The serde derives of the command and state types stay: openraft
//! requires them, and they read the JSON of older builds.

mod command;
mod remotes;
mod state;
mod values;

#[cfg(test)]
mod tests;

use bytes::Bytes;
use narad_protocol::codec::encode_message;
use narad_protocol::{Decode, DecodeError, Encode, Message, Reader, Writer};
use serde::de::DeserializeOwned;

pub use command::{
    COMMAND_VERSION, COMMAND_VERSION_BEFORE_KEY_TIME, COMMAND_VERSION_BEFORE_WINDOW,
    COMMAND_VERSION_FOR_REMOTES, members_must_decode, why_behind,
};
pub use state::{
    STATE_VERSION, STATE_VERSION_BEFORE_KEY_TIME, STATE_VERSION_BEFORE_MOVES,
    STATE_VERSION_BEFORE_REMOTES, STATE_VERSION_BEFORE_WINDOW,
};
pub use values::{
    PARTITION_SLOTS_MAX, get_epoch, get_incarnation, get_topic, put_epoch, put_incarnation,
    put_topic,
};

use super::{Command, Metastore};
use narad_protocol::fields::invalid;

/// Format byte of a command in a message whose bytes are the serde JSON of
/// [`Command`], length-prefixed: what builds before [`COMMAND_VERSION`]
/// wrote. Read, never written.
pub const COMMAND_FORMAT_JSON: u8 = 1;

/// The first byte of every serde JSON value the metastore wrote (an object).
pub const BARE_JSON_FIRST_BYTE: u8 = b'{';

const _: () = assert!(COMMAND_VERSION != COMMAND_FORMAT_JSON);
const _: () = assert!(COMMAND_VERSION != BARE_JSON_FIRST_BYTE);
const _: () = assert!(COMMAND_VERSION != COMMAND_VERSION_BEFORE_WINDOW);
const _: () = assert!(COMMAND_VERSION != COMMAND_VERSION_BEFORE_KEY_TIME);
const _: () = assert!(COMMAND_VERSION_BEFORE_KEY_TIME != COMMAND_VERSION_BEFORE_WINDOW);
const _: () = assert!(COMMAND_VERSION_BEFORE_KEY_TIME != COMMAND_FORMAT_JSON);
const _: () = assert!(COMMAND_VERSION_BEFORE_KEY_TIME != BARE_JSON_FIRST_BYTE);
const _: () = assert!(COMMAND_VERSION_BEFORE_WINDOW != COMMAND_FORMAT_JSON);
const _: () = assert!(COMMAND_VERSION_BEFORE_WINDOW != BARE_JSON_FIRST_BYTE);
const _: () = assert!(STATE_VERSION != BARE_JSON_FIRST_BYTE);
const _: () = assert!(STATE_VERSION != STATE_VERSION_BEFORE_WINDOW);
const _: () = assert!(STATE_VERSION != STATE_VERSION_BEFORE_MOVES);
const _: () = assert!(STATE_VERSION != STATE_VERSION_BEFORE_KEY_TIME);
const _: () = assert!(STATE_VERSION != STATE_VERSION_BEFORE_REMOTES);
const _: () = assert!(STATE_VERSION_BEFORE_KEY_TIME != BARE_JSON_FIRST_BYTE);
const _: () = assert!(STATE_VERSION_BEFORE_MOVES != BARE_JSON_FIRST_BYTE);
const _: () = assert!(STATE_VERSION_BEFORE_WINDOW != BARE_JSON_FIRST_BYTE);

/// Which form of the values inside a command or a state a decoder reads.
/// Values carry no version byte, so the top-level version chooses the
/// layout of every value in it. Ordered oldest first: a layout has every
/// field of the layouts before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Layout {
    /// Before the idempotency window was a topic setting
    /// ([`COMMAND_VERSION_BEFORE_WINDOW`], [`STATE_VERSION_BEFORE_WINDOW`]):
    /// a create or an alter has no window (it reads as omitted), and a
    /// topic has none (it takes the default, two minutes).
    BeforeWindow,
    /// Before the cluster remote key recorded when it was minted
    /// ([`COMMAND_VERSION_BEFORE_KEY_TIME`], [`STATE_VERSION_BEFORE_KEY_TIME`]):
    /// a remote key has no `created_at_ms` (it reads as unknown).
    BeforeKeyTime,
    /// What this build writes: [`COMMAND_VERSION`], [`STATE_VERSION`].
    Current,
}

impl Layout {
    /// Whether topics, creates and alters carry the idempotency window.
    fn has_window(self) -> bool {
        self >= Self::BeforeKeyTime
    }

    /// Whether a remote key carries its mint time.
    fn has_key_time(self) -> bool {
        self >= Self::Current
    }
}

/// Appends a command inside a message: its version byte, then its fields.
/// A command that sets no idempotency window is written as
/// [`COMMAND_VERSION_BEFORE_WINDOW`], which an older build reads.
pub fn put_command(writer: &mut Writer, command: &Command) {
    let layout = command::command_layout(command);
    writer.u8(command::command_version(layout));
    command::encode_command(command, writer, layout);
}

/// Reads a command written by [`put_command`], or by an older build as
/// [`COMMAND_VERSION_BEFORE_WINDOW`] or [`COMMAND_FORMAT_JSON`].
///
/// # Errors
/// [`DecodeError::UnsupportedVersion`] naming `metastore command` for
/// another version byte; the command's field errors; for the JSON form,
/// [`DecodeError::InvalidValue`] carrying the column where parsing stopped.
pub fn get_command(reader: &mut Reader) -> Result<Command, DecodeError> {
    match reader.u8("metastore command version")? {
        COMMAND_VERSION => Command::decode(reader),
        COMMAND_VERSION_BEFORE_KEY_TIME => command::decode_command(reader, Layout::BeforeKeyTime),
        COMMAND_VERSION_BEFORE_WINDOW => command::decode_command(reader, Layout::BeforeWindow),
        COMMAND_FORMAT_JSON => {
            let json = reader.bytes("command json")?;
            from_json(&json, "command json (column of the first error)")
        }
        found => Err(DecodeError::UnsupportedVersion {
            what: Command::NAME,
            found,
            supported: COMMAND_VERSION,
        }),
    }
}

/// A command alone, as a metadata-stream change carries it.
pub fn encode_command(command: &Command) -> Bytes {
    let mut writer = Writer::new();
    put_command(&mut writer, command);
    writer.finish()
}

/// Reads a command written by [`encode_command`], by [`put_command`] (the
/// same bytes), or as bare JSON by an older build.
///
/// # Errors
/// As [`get_command`], and [`DecodeError::TrailingBytes`].
pub fn decode_command(bytes: Bytes) -> Result<Command, DecodeError> {
    if is_bare_json(&bytes) {
        return from_json(&bytes, "command json (column of the first error)");
    }
    let mut reader = Reader::new(bytes);
    let command = get_command(&mut reader)?;
    reader.finish()?;
    Ok(command)
}

/// Appends a whole state inside a larger value: its version byte, then its
/// fields.
pub fn put_state(writer: &mut Writer, metastore: &Metastore) {
    writer.u8(STATE_VERSION);
    metastore.encode(writer);
}

/// Reads a state written by [`put_state`], or by an older build as
/// [`STATE_VERSION_BEFORE_MOVES`] or [`STATE_VERSION_BEFORE_WINDOW`].
///
/// # Errors
/// [`DecodeError::UnsupportedVersion`] naming `metastore state`, then the
/// state's field errors.
pub fn get_state(reader: &mut Reader) -> Result<Metastore, DecodeError> {
    let found = reader.u8("metastore state version")?;
    match state::StateForm::of_version(found) {
        Some(form) => state::decode_state(reader, form),
        None => Err(DecodeError::UnsupportedVersion {
            what: Metastore::NAME,
            found,
            supported: STATE_VERSION,
        }),
    }
}

/// A whole state alone, as a metadata-stream snapshot carries it.
pub fn encode_state(metastore: &Metastore) -> Bytes {
    encode_message(metastore)
}

/// Reads a state written by [`encode_state`], or by an older build as
/// [`STATE_VERSION_BEFORE_WINDOW`] or bare JSON.
///
/// # Errors
/// As [`get_state`], and [`DecodeError::TrailingBytes`]; for the JSON form,
/// [`DecodeError::InvalidValue`] carrying the column where parsing stopped.
pub fn decode_state(bytes: Bytes) -> Result<Metastore, DecodeError> {
    if is_bare_json(&bytes) {
        return from_json(&bytes, "metastore state json (column of the first error)");
    }
    let mut reader = Reader::new(bytes);
    let metastore = get_state(&mut reader)?;
    reader.finish()?;
    Ok(metastore)
}

/// Whether `bytes` are the bare serde JSON an older build wrote.
pub fn is_bare_json(bytes: &[u8]) -> bool {
    bytes.first() == Some(&BARE_JSON_FIRST_BYTE)
}

/// Parses serde JSON written by an older build.
///
/// # Errors
/// [`DecodeError::InvalidValue`] named `field`, carrying the column where
/// parsing stopped.
pub fn from_json<T: DeserializeOwned>(json: &[u8], field: &'static str) -> Result<T, DecodeError> {
    serde_json::from_slice(json).map_err(|error| invalid(field, error.column() as u64))
}
