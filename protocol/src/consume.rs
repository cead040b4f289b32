//! Forwarded consume, replay, settle and partition statistics: the messages
//! a data node sends the owner of a partition it does not own (spec §3
//! "Cross-node consume", "Forwarded acks"; §7 opcodes 2, 3, 8, 18, 19, 32).
//!
//! ```text
//! Consume (2), a Message, version 1
//!   u8    version        1
//!   str   topic
//!   u8    scope          0 any partition the owner owns · 1 pinned · 2 replay
//!   u32   partition      0 unless pinned or replay
//!   u64   offset         the replay offset; 0 otherwise
//!   u32   wait_ms        0 = non-blocking probe; ≤ CONSUME_WAIT_MS_MAX
//!   optional trailing fields (spec §7):
//!   u8    claim          0 or 1; written only when claim is set or max > 1
//!   i32   max            2 ..= 100; written only when max > 1
//!
//! ConsumeAnswer, a Message, version 1
//!   u32   count          0 ..= CONSUME_RECORDS_MAX
//!   per record: u32 partition, u64 offset, bytes key, bytes payload,
//!               u64 committed_at_ms, u64 nonce (0 on a replay)
//!
//! Settle (3 Ack, 18 ExtendAck, 19 Nack), a Message, version 1
//!   str topic, u32 partition, u64 offset, u64 nonce     → 204, no body
//!
//! AckBatch (32), a Message, version 1
//!   str   topic
//!   u8    how            0 ack · 1 extend · 2 nack
//!   u32   count          1 ..= ACK_BATCH_RECORDS_MAX
//!   per record: u32 partition, u64 offset, u64 nonce
//! AckBatchAnswer, a Message, version 1
//!   u32   count          as the request's
//!   per record: u16 status (what a single settle would have answered)
//!
//! TopicPartitionStats (8), a Message, version 1
//!   str   topic
//!   u32   count          1 ..= STATS_PARTITIONS_MAX
//!   per partition: u32 partition
//!   optional trailing field:
//!   u8    with_cursors   1; written only when the fan-out cursors are wanted
//! TopicPartitionStatsAnswer, a Message, version 1
//!   u32   count          as the request's
//!   per partition: u32 partition, u8 owned (0/1), u64 segments,
//!     u64 oldest_offset, u64 next_offset, u64 high_watermark,
//!     u64 size_bytes, u8 has_oldest_segment_time, u64 oldest_segment_time_ms
//!   optional trailing section, written only when some entry has a cursor
//!   (absent: no entry has one):
//!   per partition, in entry order: u32 cursor count
//!     (0 ..= STATS_CURSORS_PER_PARTITION_MAX), per cursor: str child,
//!     u64 next_offset
//!
//! TokenRegister (30), a Message, version 1: str topic, u32 ttl_ms
//!   (1 ..= 65,000)                                             → 204
//! TokenNotify (31), a Message, version 1: str topic           → 204
//! ```
//!
//! Every count is checked against its limit and against the bytes present
//! before anything is allocated. Bytes after the last known field are an
//! unknown field: [`decode_forward_request`] refuses them as
//! `400 unsupported rpc operation`.

use bytes::Bytes;

use crate::codec::{Decode, DecodeError, Encode, Message, Reader, Writer, decode_message};
use crate::commit::UNSUPPORTED_OPERATION_PREFIX;
use crate::fields::get_count_in;
use crate::frame::RpcError;

/// Records one consume answer carries at most (the HTTP `max` limit).
pub const CONSUME_RECORDS_MAX: u32 = 100;

/// Longest wait a forwarded consume may ask for: 60 s, above any
/// `http.max_consume_wait` a requester clamps to.
pub const CONSUME_WAIT_MS_MAX: u32 = 60_000;

/// Records one `AckBatch` carries at most (spec §3).
pub const ACK_BATCH_RECORDS_MAX: u32 = 64;

/// Partitions one statistics request names at most.
pub const STATS_PARTITIONS_MAX: u32 = 65_536;

/// Fan-out cursors one statistics entry lists at most: a parent has at most
/// 108 children (spec §1.4), and each has one cursor per parent partition.
pub const STATS_CURSORS_PER_PARTITION_MAX: u32 = 108;

const RECORD_BYTES_MIN: usize = 4 + 8 + 4 + 4 + 8 + 8;
const HANDLE_BYTES: usize = 4 + 8 + 8;
const STATS_BYTES: usize = 4 + 1 + 8 * 5 + 1 + 8;
/// An empty child name and its offset.
const CURSOR_BYTES_MIN: usize = 4 + 8;

const _: () =
    assert!(STATS_PARTITIONS_MAX as usize * STATS_BYTES <= crate::limits::FRAME_BYTES_MAX);

/// Which records a forwarded consume wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsumeScope {
    /// Any partition of the topic the owner owns (a queue-style probe).
    Any,
    /// This partition only (a pinned consume).
    Pinned(u32),
    /// The record at `offset` of `partition`, without a lease.
    Replay {
        /// The partition.
        partition: u32,
        /// The offset.
        offset: u64,
    },
}

/// The request of opcode 2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardConsume {
    /// The topic.
    pub topic: String,
    /// Which records.
    pub scope: ConsumeScope,
    /// How long the owner may hold the request when nothing is ready; 0 is
    /// a non-blocking probe.
    pub wait_ms: u32,
    /// The spec's `Claim` flag (a claim after a delivery-token notify).
    pub claim: bool,
    /// Records wanted, 1 ..= [`CONSUME_RECORDS_MAX`].
    pub max: u32,
}

impl Encode for ForwardConsume {
    fn encode(&self, writer: &mut Writer) {
        assert!(
            (1..=CONSUME_RECORDS_MAX).contains(&self.max) && self.wait_ms <= CONSUME_WAIT_MS_MAX,
            "a forwarded consume asks for 1 to {CONSUME_RECORDS_MAX} records within {CONSUME_WAIT_MS_MAX} ms"
        );
        writer.str(&self.topic);
        let (scope, partition, offset) = match self.scope {
            ConsumeScope::Any => (0, 0, 0),
            ConsumeScope::Pinned(partition) => (1, partition, 0),
            ConsumeScope::Replay { partition, offset } => (2, partition, offset),
        };
        writer.u8(scope);
        writer.u32(partition);
        writer.u64(offset);
        writer.u32(self.wait_ms);
        if self.claim || self.max > 1 {
            writer.u8(u8::from(self.claim));
        }
        if self.max > 1 {
            writer.i32(self.max as i32);
        }
    }
}

impl Decode for ForwardConsume {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let topic = reader.str("topic")?;
        let scope = reader.u8("scope")?;
        let partition = reader.u32("partition")?;
        let offset = reader.u64("offset")?;
        let scope = match scope {
            0 => ConsumeScope::Any,
            1 => ConsumeScope::Pinned(partition),
            2 => ConsumeScope::Replay { partition, offset },
            other => {
                return Err(DecodeError::InvalidValue {
                    field: "scope",
                    value: u64::from(other),
                });
            }
        };
        let wait_ms = reader.u32("wait_ms")?;
        if wait_ms > CONSUME_WAIT_MS_MAX {
            return Err(DecodeError::InvalidValue {
                field: "wait_ms",
                value: u64::from(wait_ms),
            });
        }
        let claim = if reader.remaining() > 0 {
            match reader.u8("claim")? {
                0 => false,
                1 => true,
                other => {
                    return Err(DecodeError::InvalidValue {
                        field: "claim",
                        value: u64::from(other),
                    });
                }
            }
        } else {
            false
        };
        let max = if reader.remaining() > 0 {
            let max = reader.i32("max")?;
            u32::try_from(max)
                .ok()
                .filter(|max| (2..=CONSUME_RECORDS_MAX).contains(max))
                .ok_or(DecodeError::InvalidValue {
                    field: "max",
                    value: max as u64,
                })?
        } else {
            1
        };
        Ok(Self {
            topic,
            scope,
            wait_ms,
            claim,
            max,
        })
    }
}

impl Message for ForwardConsume {
    const NAME: &'static str = "Consume";
    const VERSION: u8 = 1;
}

/// One record of a consume answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardedRecord {
    /// Its partition.
    pub partition: u32,
    /// Its offset.
    pub offset: u64,
    /// Its key; empty = none.
    pub key: Bytes,
    /// Its payload.
    pub payload: Bytes,
    /// Its commit time, Unix ms.
    pub committed_at_ms: u64,
    /// The lease's nonce on the owner; 0 for a replay.
    pub nonce: u64,
}

/// The owner's answer to opcode 2: the records it leased (or replayed).
/// Empty means nothing was ready within the wait (or replay past the end).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumeAnswer {
    /// The records, at most [`CONSUME_RECORDS_MAX`].
    pub records: Vec<ForwardedRecord>,
}

impl Encode for ConsumeAnswer {
    fn encode(&self, writer: &mut Writer) {
        let count = u32::try_from(self.records.len()).expect("at most 100 records");
        assert!(
            count <= CONSUME_RECORDS_MAX,
            "{count} records in one answer"
        );
        writer.u32(count);
        for record in &self.records {
            writer.u32(record.partition);
            writer.u64(record.offset);
            writer.bytes(&record.key);
            writer.bytes(&record.payload);
            writer.u64(record.committed_at_ms);
            writer.u64(record.nonce);
        }
    }
}

impl Decode for ConsumeAnswer {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let count = counted(
            reader,
            "record count",
            0,
            CONSUME_RECORDS_MAX,
            RECORD_BYTES_MIN,
        )?;
        let mut records = Vec::with_capacity(count);
        for _ in 0..count {
            records.push(ForwardedRecord {
                partition: reader.u32("record partition")?,
                offset: reader.u64("record offset")?,
                key: reader.bytes("record key")?,
                payload: reader.bytes("record payload")?,
                committed_at_ms: reader.u64("record committed_at_ms")?,
                nonce: reader.u64("record nonce")?,
            });
        }
        Ok(Self { records })
    }
}

impl Message for ConsumeAnswer {
    const NAME: &'static str = "ConsumeAnswer";
    const VERSION: u8 = 1;
}

/// Reads a `u32` count within `min..=max` whose items (each at least
/// `item_bytes` long) fit the bytes that remain.
fn counted(
    reader: &mut Reader,
    field: &'static str,
    min: u32,
    max: u32,
    item_bytes: usize,
) -> Result<usize, DecodeError> {
    get_count_in(reader, field, field, min..=max, item_bytes)
}

/// One lease: `partition:offset:nonce` on the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseRef {
    /// The partition.
    pub partition: u32,
    /// The offset.
    pub offset: u64,
    /// The lease's nonce.
    pub nonce: u64,
}

impl LeaseRef {
    fn encode(&self, writer: &mut Writer) {
        writer.u32(self.partition);
        writer.u64(self.offset);
        writer.u64(self.nonce);
    }

    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            partition: reader.u32("partition")?,
            offset: reader.u64("offset")?,
            nonce: reader.u64("nonce")?,
        })
    }
}

/// The request of opcodes 3 (Ack), 18 (ExtendAck) and 19 (Nack): the
/// opcode says what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardSettle {
    /// The topic.
    pub topic: String,
    /// The lease.
    pub lease: LeaseRef,
}

impl Encode for ForwardSettle {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.topic);
        self.lease.encode(writer);
    }
}

impl Decode for ForwardSettle {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            topic: reader.str("topic")?,
            lease: LeaseRef::decode(reader)?,
        })
    }
}

impl Message for ForwardSettle {
    const NAME: &'static str = "Settle";
    const VERSION: u8 = 1;
}

/// What a settle does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleKind {
    /// Ack.
    Ack,
    /// Renew the lease.
    Extend,
    /// Release for redelivery.
    Nack,
}

/// The request of opcode 32: up to [`ACK_BATCH_RECORDS_MAX`] leases of one
/// topic, all settled the same way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckBatch {
    /// The topic.
    pub topic: String,
    /// What to do with every lease.
    pub how: SettleKind,
    /// The leases, 1 ..= [`ACK_BATCH_RECORDS_MAX`].
    pub leases: Vec<LeaseRef>,
}

impl Encode for AckBatch {
    fn encode(&self, writer: &mut Writer) {
        let count = u32::try_from(self.leases.len()).expect("at most 64 leases");
        assert!(
            (1..=ACK_BATCH_RECORDS_MAX).contains(&count),
            "an AckBatch holds 1 to {ACK_BATCH_RECORDS_MAX} leases, not {count}"
        );
        writer.str(&self.topic);
        writer.u8(match self.how {
            SettleKind::Ack => 0,
            SettleKind::Extend => 1,
            SettleKind::Nack => 2,
        });
        writer.u32(count);
        for lease in &self.leases {
            lease.encode(writer);
        }
    }
}

impl Decode for AckBatch {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let topic = reader.str("topic")?;
        let how = match reader.u8("how")? {
            0 => SettleKind::Ack,
            1 => SettleKind::Extend,
            2 => SettleKind::Nack,
            other => {
                return Err(DecodeError::InvalidValue {
                    field: "how",
                    value: u64::from(other),
                });
            }
        };
        let count = counted(
            reader,
            "lease count",
            1,
            ACK_BATCH_RECORDS_MAX,
            HANDLE_BYTES,
        )?;
        let mut leases = Vec::with_capacity(count);
        for _ in 0..count {
            leases.push(LeaseRef::decode(reader)?);
        }
        Ok(Self { topic, how, leases })
    }
}

impl Message for AckBatch {
    const NAME: &'static str = "AckBatch";
    const VERSION: u8 = 1;
}

/// The owner's answer to opcode 32: one HTTP status per lease, in request
/// order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckBatchAnswer {
    /// What a single settle of each lease would have answered.
    pub statuses: Vec<u16>,
}

impl Encode for AckBatchAnswer {
    fn encode(&self, writer: &mut Writer) {
        let count = u32::try_from(self.statuses.len()).expect("at most 64 statuses");
        assert!(count <= ACK_BATCH_RECORDS_MAX, "{count} statuses");
        writer.u32(count);
        for status in &self.statuses {
            writer.u16(*status);
        }
    }
}

impl Decode for AckBatchAnswer {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let count = counted(reader, "status count", 1, ACK_BATCH_RECORDS_MAX, 2)?;
        let mut statuses = Vec::with_capacity(count);
        for _ in 0..count {
            let status = reader.u16("status")?;
            if !(200..600).contains(&status) {
                return Err(DecodeError::InvalidValue {
                    field: "status",
                    value: u64::from(status),
                });
            }
            statuses.push(status);
        }
        Ok(Self { statuses })
    }
}

impl Message for AckBatchAnswer {
    const NAME: &'static str = "AckBatchAnswer";
    const VERSION: u8 = 1;
}

/// The request of opcode 8: statistics of these partitions of a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPartitionStats {
    /// The topic.
    pub topic: String,
    /// The partitions, 1 ..= [`STATS_PARTITIONS_MAX`].
    pub partitions: Vec<u32>,
    /// Whether the answer should list the owner's fan-out cursors of each
    /// partition. Sent only when set, so a request without it is the one an
    /// older owner reads (and an older requester never gets the cursors it
    /// could not decode).
    pub with_cursors: bool,
    /// Whether each entry should carry the partition's consume frontier
    /// (a remote child attached `from: unconsumed`). Sent only when set
    /// (or when a later flag is), after the cursor flag; an owner too old
    /// to know it refuses the request (trailing bytes), which the
    /// requester reports as the owner not answering.
    pub with_frontier: bool,
    /// Whether each listed cursor of a remote child should carry its
    /// shipping report (a children listing). Sent only when set, after the
    /// frontier flag; an older owner refuses it as the others.
    pub with_remote_reports: bool,
}

impl Encode for TopicPartitionStats {
    fn encode(&self, writer: &mut Writer) {
        let count = u32::try_from(self.partitions.len()).expect("bounded partitions");
        assert!(
            (1..=STATS_PARTITIONS_MAX).contains(&count),
            "a stats request names 1 to {STATS_PARTITIONS_MAX} partitions"
        );
        writer.str(&self.topic);
        writer.u32(count);
        for partition in &self.partitions {
            writer.u32(*partition);
        }
        // Each flag is written when it or a later one is set.
        if self.with_cursors || self.with_frontier || self.with_remote_reports {
            writer.u8(u8::from(self.with_cursors));
        }
        if self.with_frontier || self.with_remote_reports {
            writer.u8(u8::from(self.with_frontier));
        }
        if self.with_remote_reports {
            writer.u8(1);
        }
    }
}

impl Decode for TopicPartitionStats {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let topic = reader.str("topic")?;
        let count = counted(reader, "partition count", 1, STATS_PARTITIONS_MAX, 4)?;
        let mut partitions = Vec::with_capacity(count);
        for _ in 0..count {
            partitions.push(reader.u32("partition")?);
        }
        let with_cursors = reader.remaining() > 0 && flag(reader, "with_cursors")?;
        let with_frontier = reader.remaining() > 0 && flag(reader, "with_frontier")?;
        let with_remote_reports = reader.remaining() > 0 && flag(reader, "with_remote_reports")?;
        Ok(Self {
            topic,
            partitions,
            with_cursors,
            with_frontier,
            with_remote_reports,
        })
    }
}

impl Message for TopicPartitionStats {
    const NAME: &'static str = "TopicPartitionStats";
    const VERSION: u8 = 1;
}

/// What describe shows of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionStatsEntry {
    /// The partition.
    pub partition: u32,
    /// Whether the answering node owns it and read its log; when not, the
    /// figures are zero.
    pub owned: bool,
    /// Segment files.
    pub segments: u64,
    /// First offset of the oldest segment.
    pub oldest_offset: u64,
    /// The offset the next commit takes.
    pub next_offset: u64,
    /// Exclusive bound of visible offsets.
    pub high_watermark: u64,
    /// Bytes of all segment files.
    pub size_bytes: u64,
    /// Commit time of the oldest segment's newest record, Unix ms.
    pub oldest_segment_time_ms: Option<u64>,
    /// The owner's fan-out cursors of this partition, at most
    /// [`STATS_CURSORS_PER_PARTITION_MAX`]; empty unless asked for, and in
    /// an answer from an owner that does not list them.
    pub cursors: Vec<CursorPosition>,
    /// The partition's consume frontier (every offset below it acked),
    /// when asked for and the owner could read it; `None` otherwise.
    pub consume_frontier: Option<u64>,
}

/// Where one fan-out cursor of a parent partition stands on its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CursorPosition {
    /// The child topic the cursor feeds.
    pub child: String,
    /// The first parent offset not yet delivered to the child.
    pub next_offset: u64,
    /// A remote child's shipping report, when asked for.
    pub remote: Option<RemoteCursor>,
}

/// Longest link state name a [`RemoteCursor`] carries.
pub const REMOTE_STATE_BYTES_MAX: usize = 64;

/// What a remote child's cursor reports beside its position: how its
/// shipping to the other cluster goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteCursor {
    /// The link state (`running`, `unavailable`, `rejected_record`, ...),
    /// at most [`REMOTE_STATE_BYTES_MAX`] bytes.
    pub state: String,
    /// The offset of the record the target refuses, while the state names
    /// one.
    pub blocked_at: Option<u64>,
    /// When a lane was last stored in full, Unix ms.
    pub last_success_at_ms: Option<u64>,
    /// When the oldest record not yet shipped was committed, Unix ms.
    pub oldest_pending_ms: Option<u64>,
}

fn write_optional(writer: &mut Writer, value: Option<u64>) {
    writer.u8(u8::from(value.is_some()));
    writer.u64(value.unwrap_or(0));
}

fn read_optional(reader: &mut Reader, field: &'static str) -> Result<Option<u64>, DecodeError> {
    let known = flag(reader, field)?;
    let value = reader.u64(field)?;
    Ok(known.then_some(value))
}

/// The owner's answer to opcode 8, one entry per partition asked, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPartitionStatsAnswer {
    /// The entries.
    pub entries: Vec<PartitionStatsEntry>,
}

impl Encode for TopicPartitionStatsAnswer {
    fn encode(&self, writer: &mut Writer) {
        let count = u32::try_from(self.entries.len()).expect("bounded partitions");
        assert!(count <= STATS_PARTITIONS_MAX, "{count} entries");
        writer.u32(count);
        for entry in &self.entries {
            writer.u32(entry.partition);
            writer.u8(u8::from(entry.owned));
            writer.u64(entry.segments);
            writer.u64(entry.oldest_offset);
            writer.u64(entry.next_offset);
            writer.u64(entry.high_watermark);
            writer.u64(entry.size_bytes);
            writer.u8(u8::from(entry.oldest_segment_time_ms.is_some()));
            writer.u64(entry.oldest_segment_time_ms.unwrap_or(0));
        }
        let reports = self
            .entries
            .iter()
            .flat_map(|entry| &entry.cursors)
            .any(|cursor| cursor.remote.is_some());
        let frontiers = reports
            || self
                .entries
                .iter()
                .any(|entry| entry.consume_frontier.is_some());
        // The sections come in order, each only when it or a later one
        // has something: an older requester, which asks for none of them,
        // gets the first part alone.
        if !frontiers && self.entries.iter().all(|entry| entry.cursors.is_empty()) {
            return;
        }
        for entry in &self.entries {
            let count = u32::try_from(entry.cursors.len()).expect("bounded cursors");
            assert!(
                count <= STATS_CURSORS_PER_PARTITION_MAX,
                "{count} cursors for one partition"
            );
            writer.u32(count);
            for cursor in &entry.cursors {
                writer.str(&cursor.child);
                writer.u64(cursor.next_offset);
            }
        }
        if !frontiers {
            return;
        }
        for entry in &self.entries {
            write_optional(writer, entry.consume_frontier);
        }
        if !reports {
            return;
        }
        for cursor in self.entries.iter().flat_map(|entry| &entry.cursors) {
            writer.u8(u8::from(cursor.remote.is_some()));
            if let Some(remote) = &cursor.remote {
                assert!(
                    remote.state.len() <= REMOTE_STATE_BYTES_MAX,
                    "link state {:?} too long",
                    remote.state
                );
                writer.str(&remote.state);
                write_optional(writer, remote.blocked_at);
                write_optional(writer, remote.last_success_at_ms);
                write_optional(writer, remote.oldest_pending_ms);
            }
        }
    }
}

fn flag(reader: &mut Reader, field: &'static str) -> Result<bool, DecodeError> {
    match reader.u8(field)? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(DecodeError::InvalidValue {
            field,
            value: u64::from(other),
        }),
    }
}

impl Decode for TopicPartitionStatsAnswer {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let count = counted(reader, "entry count", 0, STATS_PARTITIONS_MAX, STATS_BYTES)?;
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let partition = reader.u32("partition")?;
            let owned = flag(reader, "owned")?;
            let segments = reader.u64("segments")?;
            let oldest_offset = reader.u64("oldest_offset")?;
            let next_offset = reader.u64("next_offset")?;
            let high_watermark = reader.u64("high_watermark")?;
            let size_bytes = reader.u64("size_bytes")?;
            let has_time = flag(reader, "has_oldest_segment_time")?;
            let time = reader.u64("oldest_segment_time_ms")?;
            entries.push(PartitionStatsEntry {
                partition,
                owned,
                segments,
                oldest_offset,
                next_offset,
                high_watermark,
                size_bytes,
                oldest_segment_time_ms: has_time.then_some(time),
                cursors: Vec::new(),
                consume_frontier: None,
            });
        }
        if reader.remaining() > 0 {
            for entry in &mut entries {
                entry.cursors = decode_cursors(reader)?;
            }
        }
        if reader.remaining() > 0 {
            for entry in &mut entries {
                entry.consume_frontier = read_optional(reader, "consume_frontier")?;
            }
        }
        if reader.remaining() > 0 {
            for cursor in entries.iter_mut().flat_map(|entry| &mut entry.cursors) {
                cursor.remote = decode_remote_cursor(reader)?;
            }
        }
        Ok(Self { entries })
    }
}

/// One cursor's part of the answer's remote report section.
fn decode_remote_cursor(reader: &mut Reader) -> Result<Option<RemoteCursor>, DecodeError> {
    if !flag(reader, "has_remote_report")? {
        return Ok(None);
    }
    let state = reader.str("remote state")?;
    if state.len() > REMOTE_STATE_BYTES_MAX {
        return Err(DecodeError::InvalidValue {
            field: "remote state length",
            value: state.len() as u64,
        });
    }
    Ok(Some(RemoteCursor {
        state,
        blocked_at: read_optional(reader, "blocked_at")?,
        last_success_at_ms: read_optional(reader, "last_success_at_ms")?,
        oldest_pending_ms: read_optional(reader, "oldest_pending_ms")?,
    }))
}

/// One entry's part of the answer's cursor section.
fn decode_cursors(reader: &mut Reader) -> Result<Vec<CursorPosition>, DecodeError> {
    let count = counted(
        reader,
        "cursor count",
        0,
        STATS_CURSORS_PER_PARTITION_MAX,
        CURSOR_BYTES_MIN,
    )?;
    let mut cursors = Vec::with_capacity(count);
    for _ in 0..count {
        cursors.push(CursorPosition {
            child: reader.str("cursor child")?,
            next_offset: reader.u64("cursor next_offset")?,
            remote: None,
        });
    }
    Ok(cursors)
}

impl Message for TopicPartitionStatsAnswer {
    const NAME: &'static str = "TopicPartitionStatsAnswer";
    const VERSION: u8 = 1;
}

/// Longest TTL a delivery token may ask for: 65 s (a 60 s wait plus the
/// share window, with room).
pub const TOKEN_TTL_MS_MAX: u32 = 65_000;

/// The request of opcode 30: the sender has consumes of `topic` parked and
/// asks to be told (once) when a record commits here. It reserves nothing.
/// Answered `204`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRegister {
    /// The topic.
    pub topic: String,
    /// How long the token lives, 1 ..= [`TOKEN_TTL_MS_MAX`].
    pub ttl_ms: u32,
}

impl Encode for TokenRegister {
    fn encode(&self, writer: &mut Writer) {
        assert!(
            (1..=TOKEN_TTL_MS_MAX).contains(&self.ttl_ms),
            "a token lives 1 to {TOKEN_TTL_MS_MAX} ms"
        );
        writer.str(&self.topic);
        writer.u32(self.ttl_ms);
    }
}

impl Decode for TokenRegister {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let topic = reader.str("topic")?;
        let ttl_ms = reader.u32("ttl_ms")?;
        if !(1..=TOKEN_TTL_MS_MAX).contains(&ttl_ms) {
            return Err(DecodeError::InvalidValue {
                field: "ttl_ms",
                value: u64::from(ttl_ms),
            });
        }
        Ok(Self { topic, ttl_ms })
    }
}

impl Message for TokenRegister {
    const NAME: &'static str = "TokenRegister";
    const VERSION: u8 = 1;
}

/// The request of opcode 31, owner to token holder: a record of `topic`
/// committed; the holder's parked consumes probe again. Answered `204`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenNotify {
    /// The topic.
    pub topic: String,
}

impl Encode for TokenNotify {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.topic);
    }
}

impl Decode for TokenNotify {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            topic: reader.str("topic")?,
        })
    }
}

impl Message for TokenNotify {
    const NAME: &'static str = "TokenNotify";
    const VERSION: u8 = 1;
}

/// Decodes a forwarded request body as the owner must: trailing bytes
/// after the last field this build knows are an unknown field, refused as
/// `400 unsupported rpc operation`; anything else unreadable is
/// `400 malformed request: …`.
///
/// # Errors
/// The `400` to answer.
pub fn decode_forward_request<M: Message>(body: Bytes) -> Result<M, RpcError> {
    decode_message::<M>(body).map_err(|error| match error {
        DecodeError::TrailingBytes { count } => RpcError::bad_request(format!(
            "{UNSUPPORTED_OPERATION_PREFIX}: {count} bytes of unknown trailing fields on {}",
            M::NAME
        )),
        other => RpcError::from(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_message;
    use crate::commit::is_unsupported_operation;
    use crate::frame::Status;
    use proptest::prelude::*;

    fn scope_strategy() -> impl Strategy<Value = ConsumeScope> {
        prop_oneof![
            Just(ConsumeScope::Any),
            any::<u32>().prop_map(ConsumeScope::Pinned),
            (any::<u32>(), any::<u64>())
                .prop_map(|(partition, offset)| ConsumeScope::Replay { partition, offset }),
        ]
    }

    fn consume_strategy() -> impl Strategy<Value = ForwardConsume> {
        (
            ".{0,16}",
            scope_strategy(),
            0..=CONSUME_WAIT_MS_MAX,
            any::<bool>(),
            1..=CONSUME_RECORDS_MAX,
        )
            .prop_map(|(topic, scope, wait_ms, claim, max)| ForwardConsume {
                topic,
                scope,
                wait_ms,
                claim,
                max,
            })
    }

    fn record_strategy() -> impl Strategy<Value = ForwardedRecord> {
        (
            any::<u32>(),
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..8),
            proptest::collection::vec(any::<u8>(), 0..32),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(
                |(partition, offset, key, payload, committed_at_ms, nonce)| ForwardedRecord {
                    partition,
                    offset,
                    key: Bytes::from(key),
                    payload: Bytes::from(payload),
                    committed_at_ms,
                    nonce,
                },
            )
    }

    fn lease_strategy() -> impl Strategy<Value = LeaseRef> {
        (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(partition, offset, nonce)| LeaseRef {
            partition,
            offset,
            nonce,
        })
    }

    fn batch_strategy() -> impl Strategy<Value = AckBatch> {
        (
            ".{0,16}",
            prop_oneof![
                Just(SettleKind::Ack),
                Just(SettleKind::Extend),
                Just(SettleKind::Nack)
            ],
            proptest::collection::vec(lease_strategy(), 1..=ACK_BATCH_RECORDS_MAX as usize),
        )
            .prop_map(|(topic, how, leases)| AckBatch { topic, how, leases })
    }

    fn remote_cursor_strategy() -> impl Strategy<Value = RemoteCursor> {
        (
            "[a-z_]{0,64}",
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(
                |(state, blocked_at, last_success_at_ms, oldest_pending_ms)| RemoteCursor {
                    state,
                    blocked_at,
                    last_success_at_ms,
                    oldest_pending_ms,
                },
            )
    }

    fn cursor_strategy() -> impl Strategy<Value = CursorPosition> {
        (
            "[a-z.]{0,12}",
            any::<u64>(),
            proptest::option::of(remote_cursor_strategy()),
        )
            .prop_map(|(child, next_offset, remote)| CursorPosition {
                child,
                next_offset,
                remote,
            })
    }

    fn stats_entry_strategy() -> impl Strategy<Value = PartitionStatsEntry> {
        (
            any::<u32>(),
            any::<bool>(),
            any::<[u64; 5]>(),
            proptest::option::of(any::<u64>()),
            proptest::collection::vec(cursor_strategy(), 0..3),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(|(partition, owned, figures, time, cursors, frontier)| {
                PartitionStatsEntry {
                    partition,
                    owned,
                    segments: figures[0],
                    oldest_offset: figures[1],
                    next_offset: figures[2],
                    high_watermark: figures[3],
                    size_bytes: figures[4],
                    oldest_segment_time_ms: time,
                    cursors,
                    consume_frontier: frontier,
                }
            })
    }

    fn round_trip<M: Message + PartialEq + std::fmt::Debug>(message: &M) -> M {
        decode_forward_request::<M>(encode_message(message)).expect("decodes")
    }

    fn never_panics<M: Message>(bytes: Vec<u8>) {
        let _ = decode_forward_request::<M>(Bytes::from(bytes));
    }

    /// Every damaged copy of `message`'s encoding decodes to `Ok` or `Err`.
    fn never_panics_damaged<M: Message>(message: &M, damage: &crate::damage::Damage) {
        for damaged in damage.apply(&encode_message(message)) {
            never_panics::<M>(damaged);
        }
    }

    proptest! {
        #[test]
        fn consume_round_trips(request in consume_strategy()) {
            prop_assert_eq!(round_trip(&request), request);
        }

        #[test]
        fn consume_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<ForwardConsume>(bytes);
        }

        #[test]
        fn answer_round_trips(records in proptest::collection::vec(record_strategy(), 0..8)) {
            let answer = ConsumeAnswer { records };
            prop_assert_eq!(round_trip(&answer), answer);
        }

        #[test]
        fn answer_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            never_panics::<ConsumeAnswer>(bytes);
        }

        #[test]
        fn truncated_answer_is_an_error(
            records in proptest::collection::vec(record_strategy(), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let bytes = encode_message(&ConsumeAnswer { records });
            let cut = cut.index(bytes.len());
            prop_assert!(decode_forward_request::<ConsumeAnswer>(bytes.slice(..cut)).is_err());
        }

        #[test]
        fn settle_round_trips(topic in ".{0,16}", lease in lease_strategy()) {
            let settle = ForwardSettle { topic, lease };
            prop_assert_eq!(round_trip(&settle), settle);
        }

        #[test]
        fn settle_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..48)) {
            never_panics::<ForwardSettle>(bytes);
        }

        #[test]
        fn ack_batch_round_trips(batch in batch_strategy()) {
            prop_assert_eq!(round_trip(&batch), batch);
        }

        #[test]
        fn ack_batch_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            never_panics::<AckBatch>(bytes);
        }

        #[test]
        fn ack_batch_answer_round_trips(statuses in proptest::collection::vec(200_u16..600, 1..=64)) {
            let answer = AckBatchAnswer { statuses };
            prop_assert_eq!(round_trip(&answer), answer);
        }

        #[test]
        fn ack_batch_answer_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<AckBatchAnswer>(bytes);
        }

        #[test]
        fn stats_round_trip(
            topic in ".{0,16}",
            partitions in proptest::collection::vec(any::<u32>(), 1..8),
            with_cursors in any::<bool>(),
            with_frontier in any::<bool>(),
            with_remote_reports in any::<bool>(),
            entries in proptest::collection::vec(stats_entry_strategy(), 0..8),
        ) {
            let request = TopicPartitionStats {
                topic,
                partitions,
                with_cursors,
                with_frontier,
                with_remote_reports,
            };
            prop_assert_eq!(round_trip(&request), request);
            let answer = TopicPartitionStatsAnswer { entries };
            prop_assert_eq!(round_trip(&answer), answer);
        }

        #[test]
        fn tokens_round_trip(topic in ".{0,16}", ttl_ms in 1..=TOKEN_TTL_MS_MAX) {
            let register = TokenRegister { topic: topic.clone(), ttl_ms };
            prop_assert_eq!(round_trip(&register), register);
            let notify = TokenNotify { topic };
            prop_assert_eq!(round_trip(&notify), notify);
        }

        #[test]
        fn token_decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..48)) {
            never_panics::<TokenRegister>(bytes.clone());
            never_panics::<TokenNotify>(bytes);
        }

        #[test]
        fn stats_decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            never_panics::<TopicPartitionStats>(bytes.clone());
            never_panics::<TopicPartitionStatsAnswer>(bytes);
        }

        #[test]
        fn damaged_requests_and_answers_never_panic(
            request in consume_strategy(),
            records in proptest::collection::vec(record_strategy(), 0..6),
            lease in lease_strategy(),
            batch in batch_strategy(),
            entries in proptest::collection::vec(stats_entry_strategy(), 1..6),
            damage in crate::damage::damage(),
        ) {
            never_panics_damaged(&request, &damage);
            never_panics_damaged(&ConsumeAnswer { records }, &damage);
            never_panics_damaged(&ForwardSettle { topic: "t".into(), lease }, &damage);
            never_panics_damaged(&batch, &damage);
            never_panics_damaged(&AckBatchAnswer { statuses: vec![200, 404, 409] }, &damage);
            let partitions = entries.iter().map(|entry| entry.partition).collect();
            never_panics_damaged(
                &TopicPartitionStats {
                    topic: "t".into(),
                    partitions,
                    with_cursors: true,
                    with_frontier: true,
                    with_remote_reports: true,
                },
                &damage,
            );
            never_panics_damaged(&TopicPartitionStatsAnswer { entries }, &damage);
            never_panics_damaged(&TokenRegister { topic: "t".into(), ttl_ms: 1_000 }, &damage);
        }
    }

    fn probe(max: u32, claim: bool) -> ForwardConsume {
        ForwardConsume {
            topic: "orders".into(),
            scope: ConsumeScope::Any,
            wait_ms: 0,
            claim,
            max,
        }
    }

    #[test]
    fn a_single_consume_without_claim_carries_no_trailing_fields() {
        let short = encode_message(&probe(1, false));
        let claim = encode_message(&probe(1, true));
        let batch = encode_message(&probe(5, false));
        assert_eq!(claim.len(), short.len() + 1);
        assert_eq!(batch.len(), short.len() + 1 + 4);
    }

    #[test]
    fn a_field_after_max_is_an_unsupported_operation() {
        let mut bytes = encode_message(&probe(5, false)).to_vec();
        bytes.push(0);
        let error = decode_forward_request::<ForwardConsume>(Bytes::from(bytes)).expect_err("no");
        assert!(is_unsupported_operation(&error), "{error}");
    }

    #[test]
    fn max_of_one_or_over_a_hundred_on_the_wire_is_refused() {
        for max in [1_i32, 0, -1, 101] {
            let mut bytes = encode_message(&probe(1, true)).to_vec();
            bytes.extend(max.to_be_bytes());
            let error =
                decode_forward_request::<ForwardConsume>(Bytes::from(bytes)).expect_err("no");
            assert_eq!(error.status, Status::BAD_REQUEST);
            assert!(error.message.contains("max"), "{error}");
        }
    }

    #[test]
    fn an_ack_batch_over_sixty_four_is_refused_before_allocating() {
        let mut writer = Writer::new();
        writer.u8(1);
        writer.str("orders");
        writer.u8(0);
        writer.u32(ACK_BATCH_RECORDS_MAX + 1);
        let error = decode_forward_request::<AckBatch>(writer.finish()).expect_err("refused");
        assert!(error.message.contains("lease count"), "{error}");
    }

    fn stats_entry(partition: u32, cursors: Vec<CursorPosition>) -> PartitionStatsEntry {
        PartitionStatsEntry {
            partition,
            owned: true,
            segments: 1,
            oldest_offset: 0,
            next_offset: 9,
            high_watermark: 9,
            size_bytes: 100,
            oldest_segment_time_ms: None,
            cursors,
            consume_frontier: None,
        }
    }

    /// The answer as an owner that lists no cursors writes it.
    fn answer_without_cursor_section(entries: &[PartitionStatsEntry]) -> Bytes {
        let mut writer = Writer::new();
        writer.u8(1);
        writer.u32(entries.len() as u32);
        for entry in entries {
            writer.u32(entry.partition);
            writer.u8(u8::from(entry.owned));
            for figure in [
                entry.segments,
                entry.oldest_offset,
                entry.next_offset,
                entry.high_watermark,
                entry.size_bytes,
            ] {
                writer.u64(figure);
            }
            writer.u8(0);
            writer.u64(0);
        }
        writer.finish()
    }

    #[test]
    fn a_stats_answer_without_the_cursor_section_decodes_with_no_cursors() {
        let entries = [stats_entry(0, Vec::new()), stats_entry(2, Vec::new())];
        let old = answer_without_cursor_section(&entries);
        let answer =
            decode_forward_request::<TopicPartitionStatsAnswer>(old.clone()).expect("decodes");
        assert_eq!(answer.entries, entries);
        let written = encode_message(&TopicPartitionStatsAnswer {
            entries: entries.to_vec(),
        });
        assert_eq!(written, old, "no cursors, no section");
    }

    #[test]
    fn a_stats_answer_lists_each_partitions_cursors_in_entry_order() {
        let audit = |next_offset| CursorPosition {
            child: "audit".into(),
            next_offset,
            remote: None,
        };
        let entries = vec![
            stats_entry(0, vec![audit(4)]),
            stats_entry(1, Vec::new()),
            stats_entry(
                2,
                vec![
                    audit(7),
                    CursorPosition {
                        child: "billing".into(),
                        next_offset: 2,
                        remote: None,
                    },
                ],
            ),
        ];
        let answer = TopicPartitionStatsAnswer { entries };
        assert_eq!(round_trip(&answer), answer);
    }

    #[test]
    fn a_remote_childs_report_rides_after_the_frontiers_for_its_cursor_alone() {
        let plain = |child: &str| CursorPosition {
            child: child.into(),
            next_offset: 3,
            remote: None,
        };
        let shipping = CursorPosition {
            remote: Some(RemoteCursor {
                state: "rejected_record".into(),
                blocked_at: Some(41),
                last_success_at_ms: Some(1_700_000_000_000),
                oldest_pending_ms: None,
            }),
            ..plain("orders-dr")
        };
        let entries = vec![
            stats_entry(0, vec![plain("audit"), shipping]),
            stats_entry(1, vec![plain("audit")]),
        ];
        let with_reports = TopicPartitionStatsAnswer {
            entries: entries.clone(),
        };
        assert_eq!(round_trip(&with_reports), with_reports);
        // Without reports, neither the frontier nor the report section.
        let mut bare = entries;
        bare[0].cursors[1].remote = None;
        let without = TopicPartitionStatsAnswer { entries: bare };
        let report_bytes = 3 + (4 + "rejected_record".len()) + 3 * 9;
        let frontier_bytes = 2 * 9;
        assert_eq!(
            encode_message(&with_reports).len(),
            encode_message(&without).len() + frontier_bytes + report_bytes
        );
    }

    #[test]
    fn a_link_state_name_over_sixty_four_bytes_is_refused() {
        let mut bytes = encode_message(&TopicPartitionStatsAnswer {
            entries: vec![stats_entry(
                0,
                vec![CursorPosition {
                    child: "dr".into(),
                    next_offset: 0,
                    remote: None,
                }],
            )],
        })
        .to_vec();
        // An empty frontier section, then one report with a long state.
        bytes.extend([0; 9]);
        bytes.push(1);
        let state = "x".repeat(REMOTE_STATE_BYTES_MAX + 1);
        bytes.extend((state.len() as u32).to_be_bytes());
        bytes.extend(state.as_bytes());
        bytes.extend([0; 27]);
        let error = decode_forward_request::<TopicPartitionStatsAnswer>(Bytes::from(bytes))
            .expect_err("refused");
        assert!(error.message.contains("remote state"), "{error}");
    }

    #[test]
    fn a_stats_request_without_cursors_is_the_old_layout() {
        let request = TopicPartitionStats {
            topic: "orders".into(),
            partitions: vec![0, 1],
            with_cursors: false,
            with_frontier: false,
            with_remote_reports: false,
        };
        let mut writer = Writer::new();
        writer.u8(1);
        writer.str("orders");
        writer.u32(2);
        writer.u32(0);
        writer.u32(1);
        assert_eq!(encode_message(&request), writer.finish());
        let asking = TopicPartitionStats {
            with_cursors: true,
            ..request.clone()
        };
        assert_eq!(
            encode_message(&asking).len(),
            encode_message(&request).len() + 1
        );
    }

    #[test]
    fn frontiers_follow_a_cursor_section_even_an_empty_one() {
        let mut entries = vec![stats_entry(0, Vec::new()), stats_entry(1, Vec::new())];
        entries[1].consume_frontier = Some(7);
        let answer = TopicPartitionStatsAnswer {
            entries: entries.clone(),
        };
        let bytes = encode_message(&answer);
        let without = answer_without_cursor_section(&entries);
        // Two empty cursor counts, then a flag and a value per entry.
        assert_eq!(bytes.len(), without.len() + 2 * 4 + 2 * 9);
        assert_eq!(round_trip(&answer), answer);
        // A request asking for frontiers only: the cursor flag, then its own.
        let request = TopicPartitionStats {
            topic: "orders".into(),
            partitions: vec![0],
            with_cursors: false,
            with_frontier: true,
            with_remote_reports: false,
        };
        let plain = TopicPartitionStats {
            with_frontier: false,
            ..request.clone()
        };
        assert_eq!(
            encode_message(&request).len(),
            encode_message(&plain).len() + 2
        );
        assert_eq!(round_trip(&request), request);
    }

    #[test]
    fn a_cursor_count_over_the_limit_is_refused() {
        let mut bytes = answer_without_cursor_section(&[stats_entry(0, Vec::new())]).to_vec();
        bytes.extend((STATS_CURSORS_PER_PARTITION_MAX + 1).to_be_bytes());
        let error = decode_forward_request::<TopicPartitionStatsAnswer>(Bytes::from(bytes))
            .expect_err("refused");
        assert!(error.message.contains("cursor count"), "{error}");
    }

    #[test]
    fn a_record_count_beyond_the_input_is_refused() {
        let mut writer = Writer::new();
        writer.u8(1);
        writer.u32(CONSUME_RECORDS_MAX);
        let error = decode_forward_request::<ConsumeAnswer>(writer.finish()).expect_err("refused");
        assert!(error.message.contains("record count claims"), "{error}");
    }
}
