//! What a data node reports of itself to another (spec §1.9
//! `GET /v1/cluster/members?detail=true`; opcode 33, `NodeStatus`): whether
//! it drains, its produces in flight, its ingress records not yet committed
//! to their owners, its quarantined copies, and the partition moves its
//! workers run.
//!
//! ```text
//! NodeStatus (33), a Message, version 1
//!   [u8 1]               with_remotes: present only when asked (an older
//!                        node refuses the byte as trailing)
//!   [u8 2]               with_remotes and with_command_version: present
//!                        only when asked (a node before the command version
//!                        refuses the value, one before with_remotes the
//!                        byte)
//!
//! NodeStatusAnswer, a Message, version 1
//!   u8    draining           0/1
//!   u64   produce_in_flight
//!   u64   dispatch_backlog   ingress WAL records not yet committed
//!   u64   quarantine_copies
//!   u64   quarantine_bytes
//!   u32   copy count         0 ..= QUARANTINE_LIST_MAX
//!   per copy: str kind · str topic · u8 has_partition · [u32 partition] ·
//!             str dir · u64 bytes · u64 mod_time_ms
//!   u32   move count         0 ..= NODE_MOVES_MAX
//!   per move: str topic · u32 partition · str source · str target ·
//!             u64 started_at_ms · str phase · u32 attempts ·
//!             u8 has_last_error · [str last_error] · u64 copied_bytes ·
//!             u8 has_blocked · [str blocked]
//!   only when the request asked with_remotes:
//!   u32   remote count       0 ..= NODE_REMOTES_MAX
//!   per remote: str name · u64 credential_version · u8 credential
//!             (1 readable, 2 unreadable, 3 no_secret) · u8 key_current ·
//!             u8 has_error · [str error]
//!   only when the request asked with_command_version (the remote count is
//!   then always written, 0 for a node with no views):
//!   u8    command_version    the newest metastore command version the
//!                            node decodes
//! ```
//!
//! The remote views are the answering node's own look at each remote's
//! credential (whether its secret opens it), for the `nodes[]` of
//! `GET /v1/remotes`.
//!
//! Every text is at most [`NODE_STATUS_TEXT_BYTES_MAX`] bytes and every
//! count within its limit, checked by the decoder before anything is
//! allocated; a sender builds nothing larger (the encoder asserts it), so
//! one answer stays far below the frame limit. Bytes after the last field
//! are refused (`400 unsupported rpc operation` through
//! [`crate::consume::decode_forward_request`]).

use crate::codec::{Decode, DecodeError, Encode, Message, Reader, Writer};
use crate::fields::{get_bool, get_count, get_option, invalid, put_bool, put_count, put_option};

/// Quarantined copies one answer lists at most (spec §1.9: `list[≤100]`);
/// the totals count every copy.
pub const QUARANTINE_LIST_MAX: u32 = 100;

/// Move workers one answer lists at most. A node runs one worker per
/// partition moving to it, and the planner keeps a handful of moves in
/// flight in the whole cluster, so this is room to spare, not a limit an
/// honest node meets.
pub const NODE_MOVES_MAX: u32 = 256;

/// Bytes of any one text field (a topic, a member id, a phase, an error, a
/// directory) at most: long enough for any path, short enough that a full
/// answer fits a frame many times over.
pub const NODE_STATUS_TEXT_BYTES_MAX: usize = 4_096;

/// Remote views one answer lists at most: a cluster has at most 64
/// remotes (spec §1.10).
pub const NODE_REMOTES_MAX: u32 = 64;

/// Texts of one move and of one quarantined copy.
const MOVE_TEXTS: usize = 6;
const COPY_TEXTS: usize = 3;
/// Texts of one remote view (its name and error).
const REMOTE_TEXTS: usize = 2;
/// Fixed bytes of one move and one copy besides their texts' bytes: the
/// length prefixes, integers and presence bytes.
const MOVE_BYTES_MIN: usize = 4 + 4 + 4 + 4 + 8 + 4 + 4 + 1 + 8 + 1;
const COPY_BYTES_MIN: usize = 4 + 4 + 1 + 4 + 8 + 8;
const REMOTE_BYTES_MIN: usize = 4 + 8 + 1 + 1 + 1;
/// The fixed part of an answer besides its lists' items: the head, the
/// three counts and the command version.
const ANSWER_HEAD_BYTES: usize = 1 + 8 * 4 + 4 + 4 + 4 + 1;

const _: () = assert!(
    ANSWER_HEAD_BYTES
        + NODE_MOVES_MAX as usize * (MOVE_BYTES_MIN + 4 + MOVE_TEXTS * NODE_STATUS_TEXT_BYTES_MAX)
        + QUARANTINE_LIST_MAX as usize
            * (COPY_BYTES_MIN + 4 + COPY_TEXTS * NODE_STATUS_TEXT_BYTES_MAX)
        + NODE_REMOTES_MAX as usize
            * (REMOTE_BYTES_MIN + 4 + REMOTE_TEXTS * NODE_STATUS_TEXT_BYTES_MAX)
        <= crate::limits::FRAME_BYTES_MAX,
    "a full node status answer must fit one frame"
);

/// The request of opcode 33: this node's status, please, and its views of
/// the remotes' credentials when `with_remotes`, and the newest metastore
/// command version it decodes when `with_command_version`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStatus {
    /// Ask for [`NodeStatusAnswer::remotes`]. Written only when set, so a
    /// request without it is the bytes an older node takes.
    pub with_remotes: bool,
    /// Ask for [`NodeStatusAnswer::command_version`] (and the remotes with
    /// it). A node of a release before it refuses the request, which is
    /// how the asker learns it is older.
    pub with_command_version: bool,
}

impl Encode for NodeStatus {
    fn encode(&self, writer: &mut Writer) {
        if self.with_command_version {
            writer.u8(2);
        } else if self.with_remotes {
            writer.u8(1);
        }
    }
}

impl Decode for NodeStatus {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        if reader.remaining() == 0 {
            return Ok(Self::default());
        }
        // Written only when set: any byte but 1 or 2 is not this request.
        match reader.u8("with_remotes")? {
            1 => Ok(Self {
                with_remotes: true,
                with_command_version: false,
            }),
            2 => Ok(Self {
                with_remotes: true,
                with_command_version: true,
            }),
            other => Err(invalid("with_remotes", other)),
        }
    }
}

impl Message for NodeStatus {
    const NAME: &'static str = "NodeStatus";
    const VERSION: u8 = 1;
}

/// One copy of a partition (or topic) kept aside on the answering node's
/// disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuarantinedCopy {
    /// What kind of copy it is, in the answering node's words.
    pub kind: String,
    /// The topic it was a copy of.
    pub topic: String,
    /// The partition, when the copy is of one partition.
    pub partition: Option<u32>,
    /// Its directory on the answering node.
    pub dir: String,
    /// Bytes of its files.
    pub bytes: u64,
    /// When it was last changed, Unix ms.
    pub mod_time_ms: u64,
}

/// One partition move as the worker copying it (on the move's target)
/// sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveReport {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The member the partition moves from.
    pub source: String,
    /// The member it moves to (the answering node).
    pub target: String,
    /// When the worker started, Unix ms.
    pub started_at_ms: u64,
    /// Where the worker is (spec: `copying`, `frozen`, `flip_pending`,
    /// `waiting_for_source`, `blocked`).
    pub phase: String,
    /// Attempts so far.
    pub attempts: u32,
    /// The last attempt's error, if it failed.
    pub last_error: Option<String>,
    /// Bytes copied so far.
    pub copied_bytes: u64,
    /// Why it cannot go on, if it cannot (spec: `copy_unverifiable`,
    /// `source_dead_copy_behind`).
    pub blocked: Option<String>,
}

/// Whether a node's secret opens a remote's credential.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialState {
    /// It opens.
    Readable,
    /// The node has a secret, and it does not open it.
    Unreadable,
    /// The node has no cluster secret.
    NoSecret,
}

impl CredentialState {
    /// The name the API shows: `readable`, `unreadable`, `no_secret`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Readable => "readable",
            Self::Unreadable => "unreadable",
            Self::NoSecret => "no_secret",
        }
    }
}

/// One node's look at one remote's credential.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteView {
    /// The remote's name.
    pub name: String,
    /// The credential version the node's replica holds.
    pub credential_version: u64,
    /// Whether the node's secret opens it.
    pub credential: CredentialState,
    /// Whether the node's current secret derives the key it is sealed
    /// under.
    pub key_current: bool,
    /// Why it does not open, when it does not.
    pub error: Option<String>,
}

/// The answer to [`NodeStatus`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStatusAnswer {
    /// Whether the node's member record says it drains.
    pub draining: bool,
    /// Produce requests it is answering now.
    pub produce_in_flight: u64,
    /// Its ingress WAL records not yet committed to their partition owners.
    pub dispatch_backlog: u64,
    /// Quarantined copies on its disk, all of them.
    pub quarantine_copies: u64,
    /// Bytes of those copies.
    pub quarantine_bytes: u64,
    /// Some of those copies, at most [`QUARANTINE_LIST_MAX`].
    pub quarantine: Vec<QuarantinedCopy>,
    /// Its move workers, at most [`NODE_MOVES_MAX`].
    pub moves: Vec<MoveReport>,
    /// Its views of the remotes, at most [`NODE_REMOTES_MAX`]: present
    /// when the request asked `with_remotes` (and only then written).
    pub remotes: Option<Vec<RemoteView>>,
    /// The newest metastore command version it decodes: present when the
    /// request asked `with_command_version` (and only then written, after
    /// the remotes, which are then written even when `None`, as none).
    pub command_version: Option<u8>,
}

/// Appends a text field.
///
/// # Panics
/// If `text` is over [`NODE_STATUS_TEXT_BYTES_MAX`]: every decoder would
/// refuse it, so building one is a programmer error of the sender.
pub(crate) fn put_text(writer: &mut Writer, field: &'static str, text: &str) {
    assert!(
        text.len() <= NODE_STATUS_TEXT_BYTES_MAX,
        "{field}: {} bytes, over the limit of {NODE_STATUS_TEXT_BYTES_MAX}",
        text.len()
    );
    writer.str(text);
}

/// `text` cut to at most [`NODE_STATUS_TEXT_BYTES_MAX`] bytes, on a
/// character boundary: what a sender does to a detail before it encodes
/// it.
pub fn clip_text(text: &mut String) {
    if text.len() <= NODE_STATUS_TEXT_BYTES_MAX {
        return;
    }
    let mut end = NODE_STATUS_TEXT_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
}

/// Reads a text field written by [`put_text`], refusing one over the limit
/// before copying it.
pub(crate) fn get_text(reader: &mut Reader, field: &'static str) -> Result<String, DecodeError> {
    let mut peek = reader.clone();
    let claimed = peek.u32(field)?;
    if claimed as usize > NODE_STATUS_TEXT_BYTES_MAX {
        return Err(invalid(field, claimed));
    }
    reader.str(field)
}

impl Encode for QuarantinedCopy {
    fn encode(&self, writer: &mut Writer) {
        put_text(writer, "copy kind", &self.kind);
        put_text(writer, "copy topic", &self.topic);
        put_option(writer, self.partition.as_ref(), |writer, partition| {
            writer.u32(*partition);
        });
        put_text(writer, "copy dir", &self.dir);
        writer.u64(self.bytes);
        writer.u64(self.mod_time_ms);
    }
}

impl Decode for QuarantinedCopy {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            kind: get_text(reader, "copy kind")?,
            topic: get_text(reader, "copy topic")?,
            partition: get_option(reader, "copy has_partition", |reader| {
                reader.u32("copy partition")
            })?,
            dir: get_text(reader, "copy dir")?,
            bytes: reader.u64("copy bytes")?,
            mod_time_ms: reader.u64("copy mod_time_ms")?,
        })
    }
}

impl Encode for MoveReport {
    fn encode(&self, writer: &mut Writer) {
        put_text(writer, "move topic", &self.topic);
        writer.u32(self.partition);
        put_text(writer, "move source", &self.source);
        put_text(writer, "move target", &self.target);
        writer.u64(self.started_at_ms);
        put_text(writer, "move phase", &self.phase);
        writer.u32(self.attempts);
        put_option(writer, self.last_error.as_deref(), |writer, text| {
            put_text(writer, "move last_error", text);
        });
        writer.u64(self.copied_bytes);
        put_option(writer, self.blocked.as_deref(), |writer, text| {
            put_text(writer, "move blocked", text);
        });
    }
}

impl Decode for MoveReport {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            topic: get_text(reader, "move topic")?,
            partition: reader.u32("move partition")?,
            source: get_text(reader, "move source")?,
            target: get_text(reader, "move target")?,
            started_at_ms: reader.u64("move started_at_ms")?,
            phase: get_text(reader, "move phase")?,
            attempts: reader.u32("move attempts")?,
            last_error: get_option(reader, "move has_last_error", |reader| {
                get_text(reader, "move last_error")
            })?,
            copied_bytes: reader.u64("move copied_bytes")?,
            blocked: get_option(reader, "move has_blocked", |reader| {
                get_text(reader, "move blocked")
            })?,
        })
    }
}

impl Encode for RemoteView {
    fn encode(&self, writer: &mut Writer) {
        put_text(writer, "remote name", &self.name);
        writer.u64(self.credential_version);
        writer.u8(match self.credential {
            CredentialState::Readable => 1,
            CredentialState::Unreadable => 2,
            CredentialState::NoSecret => 3,
        });
        put_bool(writer, self.key_current);
        put_option(writer, self.error.as_deref(), |writer, text| {
            put_text(writer, "remote error", text);
        });
    }
}

impl Decode for RemoteView {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            name: get_text(reader, "remote name")?,
            credential_version: reader.u64("remote credential_version")?,
            credential: match reader.u8("remote credential")? {
                1 => CredentialState::Readable,
                2 => CredentialState::Unreadable,
                3 => CredentialState::NoSecret,
                other => return Err(invalid("remote credential", other)),
            },
            key_current: get_bool(reader, "remote key_current")?,
            error: get_option(reader, "remote has_error", |reader| {
                get_text(reader, "remote error")
            })?,
        })
    }
}

impl Encode for NodeStatusAnswer {
    fn encode(&self, writer: &mut Writer) {
        put_bool(writer, self.draining);
        writer.u64(self.produce_in_flight);
        writer.u64(self.dispatch_backlog);
        writer.u64(self.quarantine_copies);
        writer.u64(self.quarantine_bytes);
        put_count(
            writer,
            "copy count",
            self.quarantine.len(),
            QUARANTINE_LIST_MAX,
        );
        for copy in &self.quarantine {
            copy.encode(writer);
        }
        put_count(writer, "move count", self.moves.len(), NODE_MOVES_MAX);
        for report in &self.moves {
            report.encode(writer);
        }
        if self.remotes.is_some() || self.command_version.is_some() {
            let remotes = self.remotes.as_deref().unwrap_or_default();
            put_count(writer, "remote count", remotes.len(), NODE_REMOTES_MAX);
            for view in remotes {
                view.encode(writer);
            }
        }
        if let Some(version) = self.command_version {
            writer.u8(version);
        }
    }
}

impl Decode for NodeStatusAnswer {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let draining = get_bool(reader, "draining")?;
        let produce_in_flight = reader.u64("produce_in_flight")?;
        let dispatch_backlog = reader.u64("dispatch_backlog")?;
        let quarantine_copies = reader.u64("quarantine_copies")?;
        let quarantine_bytes = reader.u64("quarantine_bytes")?;
        let quarantine = decode_list(reader, "copy count", QUARANTINE_LIST_MAX, COPY_BYTES_MIN)?;
        let moves = decode_list(reader, "move count", NODE_MOVES_MAX, MOVE_BYTES_MIN)?;
        let remotes = if reader.remaining() > 0 {
            Some(decode_list(
                reader,
                "remote count",
                NODE_REMOTES_MAX,
                REMOTE_BYTES_MIN,
            )?)
        } else {
            None
        };
        let command_version = if reader.remaining() > 0 {
            Some(reader.u8("command_version")?)
        } else {
            None
        };
        Ok(Self {
            draining,
            produce_in_flight,
            dispatch_backlog,
            quarantine_copies,
            quarantine_bytes,
            quarantine,
            moves,
            remotes,
            command_version,
        })
    }
}

/// A counted list of `T`, the count checked against `max` and against the
/// bytes left at `item_bytes_min` each before anything is reserved.
fn decode_list<T: Decode>(
    reader: &mut Reader,
    field: &'static str,
    max: u32,
    item_bytes_min: usize,
) -> Result<Vec<T>, DecodeError> {
    let count = get_count(reader, field, max, item_bytes_min)?;
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        items.push(T::decode(reader)?);
    }
    Ok(items)
}

impl Message for NodeStatusAnswer {
    const NAME: &'static str = "NodeStatusAnswer";
    const VERSION: u8 = 1;
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn clipping_keeps_whole_characters() {
        let mut text = "é".repeat(NODE_STATUS_TEXT_BYTES_MAX);
        clip_text(&mut text);
        assert!(text.len() <= NODE_STATUS_TEXT_BYTES_MAX);
        assert!(text.len() >= NODE_STATUS_TEXT_BYTES_MAX - 1);
        assert!(text.chars().all(|c| c == 'é'));
    }
    use crate::codec::{decode_message, encode_message};
    use crate::commit::is_unsupported_operation;
    use crate::consume::decode_forward_request;

    fn text() -> impl Strategy<Value = String> {
        ".{0,12}"
    }

    fn copy_strategy() -> impl Strategy<Value = QuarantinedCopy> {
        (
            text(),
            text(),
            proptest::option::of(any::<u32>()),
            text(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(kind, topic, partition, dir, bytes, mod_time_ms)| {
                QuarantinedCopy {
                    kind,
                    topic,
                    partition,
                    dir,
                    bytes,
                    mod_time_ms,
                }
            })
    }

    fn move_strategy() -> impl Strategy<Value = MoveReport> {
        (
            (text(), any::<u32>(), text(), text(), any::<u64>()),
            (
                text(),
                any::<u32>(),
                proptest::option::of(text()),
                any::<u64>(),
                proptest::option::of(text()),
            ),
        )
            .prop_map(
                |(
                    (topic, partition, source, target, started_at_ms),
                    (phase, attempts, last_error, copied_bytes, blocked),
                )| MoveReport {
                    topic,
                    partition,
                    source,
                    target,
                    started_at_ms,
                    phase,
                    attempts,
                    last_error,
                    copied_bytes,
                    blocked,
                },
            )
    }

    fn remote_strategy() -> impl Strategy<Value = RemoteView> {
        (
            text(),
            any::<u64>(),
            prop_oneof![
                Just(CredentialState::Readable),
                Just(CredentialState::Unreadable),
                Just(CredentialState::NoSecret),
            ],
            any::<bool>(),
            proptest::option::of(text()),
        )
            .prop_map(
                |(name, credential_version, credential, key_current, error)| RemoteView {
                    name,
                    credential_version,
                    credential,
                    key_current,
                    error,
                },
            )
    }

    fn answer_strategy() -> impl Strategy<Value = NodeStatusAnswer> {
        (
            any::<bool>(),
            any::<[u64; 4]>(),
            proptest::collection::vec(copy_strategy(), 0..4),
            proptest::collection::vec(move_strategy(), 0..4),
            proptest::option::of((
                proptest::collection::vec(remote_strategy(), 0..4),
                proptest::option::of(any::<u8>()),
            )),
        )
            .prop_map(
                |(draining, figures, quarantine, moves, asked)| NodeStatusAnswer {
                    draining,
                    produce_in_flight: figures[0],
                    dispatch_backlog: figures[1],
                    quarantine_copies: figures[2],
                    quarantine_bytes: figures[3],
                    quarantine,
                    moves,
                    // The version travels only with the remotes.
                    command_version: asked.as_ref().and_then(|(_, version)| *version),
                    remotes: asked.map(|(remotes, _)| remotes),
                },
            )
    }

    proptest! {
        #[test]
        fn an_answer_round_trips(answer in answer_strategy()) {
            let decoded = decode_message::<NodeStatusAnswer>(encode_message(&answer));
            prop_assert_eq!(decoded, Ok(answer));
        }

        #[test]
        fn the_answer_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..160)) {
            let _ = decode_message::<NodeStatusAnswer>(Bytes::from(bytes));
        }

        #[test]
        fn a_damaged_answer_never_panics(
            answer in answer_strategy(),
            damage in crate::damage::damage(),
        ) {
            for damaged in damage.apply(&encode_message(&answer)) {
                let _ = decode_message::<NodeStatusAnswer>(Bytes::from(damaged));
            }
        }
    }

    fn sample_move() -> MoveReport {
        MoveReport {
            topic: "orders".into(),
            partition: 2,
            source: "1".into(),
            target: "3".into(),
            started_at_ms: 1_700_000_000_000,
            phase: "copying".into(),
            attempts: 1,
            last_error: None,
            copied_bytes: 4_096,
            blocked: Some("copy_unverifiable".into()),
        }
    }

    #[test]
    fn the_request_is_its_version_byte_alone() {
        let plain = NodeStatus::default();
        assert_eq!(encode_message(&plain), Bytes::from_static(&[1]));
    }

    #[test]
    fn a_request_without_the_byte_does_not_ask_for_the_remotes() {
        let decoded = decode_forward_request::<NodeStatus>(Bytes::from_static(&[1]));
        assert_eq!(decoded, Ok(NodeStatus::default()));
    }

    #[test]
    fn asking_for_the_remotes_adds_one_byte() {
        let asking = NodeStatus {
            with_remotes: true,
            with_command_version: false,
        };
        assert_eq!(encode_message(&asking), Bytes::from_static(&[1, 1]));
        assert_eq!(
            decode_forward_request::<NodeStatus>(Bytes::from_static(&[1, 1])),
            Ok(asking)
        );
    }

    #[test]
    fn asking_for_the_command_version_is_flag_two_and_brings_the_remotes() {
        let asking = NodeStatus {
            with_remotes: true,
            with_command_version: true,
        };
        assert_eq!(encode_message(&asking), Bytes::from_static(&[1, 2]));
        assert_eq!(
            decode_forward_request::<NodeStatus>(Bytes::from_static(&[1, 2])),
            Ok(asking)
        );
        // Asked alone, it is written the same way.
        let alone = NodeStatus {
            with_command_version: true,
            ..NodeStatus::default()
        };
        assert_eq!(encode_message(&alone), Bytes::from_static(&[1, 2]));
    }

    #[test]
    fn the_command_version_follows_the_remotes_written_even_when_there_are_none() {
        let answer = NodeStatusAnswer {
            moves: vec![sample_move()],
            ..NodeStatusAnswer::default()
        };
        let versioned = NodeStatusAnswer {
            command_version: Some(4),
            ..answer.clone()
        };
        let plain = encode_message(&answer);
        let asked = encode_message(&versioned);
        assert_eq!(&asked[..plain.len()], &plain[..]);
        assert_eq!(&asked[plain.len()..], &[0, 0, 0, 0, 4]);
        let decoded = decode_message::<NodeStatusAnswer>(asked).expect("decodes");
        assert_eq!(decoded.command_version, Some(4));
        assert_eq!(decoded.remotes, Some(Vec::new()));
        // The answer of a node before the version: no version.
        let older = NodeStatusAnswer {
            remotes: Some(Vec::new()),
            ..answer
        };
        let decoded = decode_message::<NodeStatusAnswer>(encode_message(&older));
        assert_eq!(decoded.map(|answer| answer.command_version), Ok(None));
    }

    #[test]
    fn trailing_bytes_on_the_request_are_an_unsupported_operation() {
        let error = decode_forward_request::<NodeStatus>(Bytes::from_static(&[1, 1, 0]))
            .expect_err("refused");
        assert!(is_unsupported_operation(&error), "{error}");
        assert!(error.message.contains("NodeStatus"), "{error}");
    }

    #[test]
    fn a_flag_byte_other_than_one_is_refused() {
        for bytes in [&[1, 0][..], &[1, 3]] {
            let error = decode_forward_request::<NodeStatus>(Bytes::copy_from_slice(bytes))
                .expect_err("refused");
            assert!(error.message.contains("with_remotes"), "{bytes:?}: {error}");
        }
    }

    #[test]
    fn an_answer_without_remotes_is_the_bytes_an_older_node_reads() {
        let answer = NodeStatusAnswer {
            moves: vec![sample_move()],
            ..NodeStatusAnswer::default()
        };
        let with_none = NodeStatusAnswer {
            remotes: Some(Vec::new()),
            ..answer.clone()
        };
        let plain = encode_message(&answer);
        let asked = encode_message(&with_none);
        assert_eq!(&asked[..plain.len()], &plain[..]);
        assert_eq!(&asked[plain.len()..], &[0, 0, 0, 0]);
    }

    #[test]
    fn trailing_bytes_on_the_answer_are_refused() {
        let answer = NodeStatusAnswer {
            moves: vec![sample_move()],
            ..NodeStatusAnswer::default()
        };
        let mut bytes = encode_message(&answer).to_vec();
        bytes.extend([0, 0, 0, 0, 4, 7]);
        assert_eq!(
            decode_message::<NodeStatusAnswer>(Bytes::from(bytes)),
            Err(DecodeError::TrailingBytes { count: 1 })
        );
    }

    /// An answer's fixed fields and an empty copy list, up to its move
    /// count.
    fn head() -> Writer {
        let mut writer = Writer::new();
        writer.u8(NodeStatusAnswer::VERSION);
        writer.u8(0);
        for _ in 0..4 {
            writer.u64(0);
        }
        writer.u32(0);
        writer
    }

    #[test]
    fn a_move_count_over_the_limit_is_refused_before_allocating() {
        let mut writer = head();
        writer.u32(NODE_MOVES_MAX + 1);
        assert_eq!(
            decode_message::<NodeStatusAnswer>(writer.finish()),
            Err(DecodeError::InvalidValue {
                field: "move count",
                value: u64::from(NODE_MOVES_MAX + 1)
            })
        );
    }

    #[test]
    fn a_text_over_the_limit_is_refused_by_name() {
        let mut writer = head();
        writer.u32(1);
        writer.bytes(&vec![b'a'; NODE_STATUS_TEXT_BYTES_MAX + 1]);
        assert_eq!(
            decode_message::<NodeStatusAnswer>(writer.finish()),
            Err(DecodeError::InvalidValue {
                field: "move topic",
                value: NODE_STATUS_TEXT_BYTES_MAX as u64 + 1
            })
        );
    }

    /// An answer's bytes up to its remote count: no copies, no moves.
    fn head_before_remotes() -> Writer {
        let mut writer = head();
        writer.u32(0);
        writer
    }

    /// An answer's bytes with one remote view, "dr", whose credential
    /// byte is `credential`, then `has_error`.
    fn one_remote_view(credential: u8, has_error: u8) -> Writer {
        let mut writer = head_before_remotes();
        writer.u32(1);
        writer.bytes(b"dr");
        writer.u64(1);
        writer.u8(credential);
        writer.u8(0);
        writer.u8(has_error);
        writer
    }

    #[test]
    fn a_remote_count_over_the_limit_is_refused_before_allocating() {
        let mut writer = head_before_remotes();
        writer.u32(NODE_REMOTES_MAX + 1);
        assert_eq!(
            decode_message::<NodeStatusAnswer>(writer.finish()),
            Err(DecodeError::InvalidValue {
                field: "remote count",
                value: u64::from(NODE_REMOTES_MAX + 1)
            })
        );
    }

    #[test]
    fn a_remote_count_beyond_the_bytes_left_is_refused() {
        let mut writer = head_before_remotes();
        writer.u32(2);
        writer.bytes(b"dr");
        assert_eq!(
            decode_message::<NodeStatusAnswer>(writer.finish()),
            Err(DecodeError::LengthExceedsInput {
                field: "remote count",
                claimed: 2 * REMOTE_BYTES_MIN as u64,
                remaining: 6
            })
        );
    }

    #[test]
    fn a_remote_error_over_the_limit_is_refused_by_name() {
        let mut writer = one_remote_view(2, 1);
        writer.bytes(&vec![b'e'; NODE_STATUS_TEXT_BYTES_MAX + 1]);
        assert_eq!(
            decode_message::<NodeStatusAnswer>(writer.finish()),
            Err(DecodeError::InvalidValue {
                field: "remote error",
                value: NODE_STATUS_TEXT_BYTES_MAX as u64 + 1
            })
        );
    }

    #[test]
    fn an_unknown_credential_state_is_refused() {
        assert_eq!(
            decode_message::<NodeStatusAnswer>(one_remote_view(4, 0).finish()),
            Err(DecodeError::InvalidValue {
                field: "remote credential",
                value: 4
            })
        );
    }

    #[test]
    fn an_asked_answer_round_trips_its_remote_views() {
        let answer = NodeStatusAnswer {
            remotes: Some(vec![RemoteView {
                name: "dr".into(),
                credential_version: 3,
                credential: CredentialState::NoSecret,
                key_current: false,
                error: None,
            }]),
            ..NodeStatusAnswer::default()
        };
        let decoded = decode_message::<NodeStatusAnswer>(encode_message(&answer));
        assert_eq!(decoded, Ok(answer));
    }

    #[test]
    #[should_panic(expected = "over the limit")]
    fn building_a_text_over_the_limit_is_a_programmer_error() {
        let answer = NodeStatusAnswer {
            moves: vec![MoveReport {
                last_error: Some("e".repeat(NODE_STATUS_TEXT_BYTES_MAX + 1)),
                ..sample_move()
            }],
            ..NodeStatusAnswer::default()
        };
        let _ = encode_message(&answer);
    }
}
