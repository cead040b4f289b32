//! `CommitProduceBatch` (opcode 11): a batch of records for one partition,
//! sent by a dispatcher (or a fan-out runner) to the partition's owner, and
//! the owner's answer.
//!
//! ```text
//! request body (a Message, version 1)
//!   u8    version        1
//!   str   topic          u32 length + UTF-8
//!   u32   partition
//!   u32   record count   1 ..= COMMIT_BATCH_RECORDS_MAX
//!   per record:
//!     bytes key          u32 length + bytes; empty = no key
//!     bytes payload      u32 length + bytes
//!     u64   created_at   Unix ms, when the accepting node took the record
//!   optional trailing section, written only when some record has an id:
//!   u32   run count      1 ..= record count
//!   per run:
//!     u32   records      ≥ 1; the runs' records sum to the record count
//!     [16]  incarnation  16 lowercase hex characters, or 16 zero bytes for
//!                        records without an id
//!   optional provenance section, written only when some record has an
//!   origin or an idempotency key:
//!   u32   marker         0xFFFF_FFFF (never a run count)
//!   u64   floor          the sender's durable WAL checkpoint: it never
//!                        sends a sequence below it again
//!   per record:
//!     [16]  origin id    the WAL epoch's id, or 16 zero bytes for none
//!     u64   sequence     the record's WAL sequence (0 without an origin)
//!     bytes idem. key    u32 length + bytes, 0 ..= 256; empty = none
//!
//! answer: 200, body (a Message, version 1)
//!   u8    version        1
//!   u64   first offset   the offset the batch's first record took
//!   u64   end offset     one past the last; end − first = record count
//! ```
//!
//! A batch without ids is byte for byte the frame of a build that predates
//! the section, so such an owner accepts it. Bytes after the section (a
//! field from a newer build) are refused with `400 unsupported rpc
//! operation`, the spec's signal for a sender to retry in the older shape.

use std::fmt;
use std::ops::Range;

use bytes::Bytes;

use crate::codec::{Decode, DecodeError, Encode, Message, Reader, Writer, decode_message};
use crate::fields::get_count_in;
use crate::frame::{RpcError, Status};

/// Most records one batch carries: the dispatcher's hard window cap (a
/// commit never holds more records than the dispatcher may hold at all).
/// Checked on encode and on decode, before anything is allocated.
pub const COMMIT_BATCH_RECORDS_MAX: u32 = 65_536;

/// Bytes of an incarnation id on the wire: the 16 hex characters the
/// control plane mints.
pub const INCARNATION_ID_BYTES: usize = 16;

/// Smallest encoding of one record (empty key, empty payload): two length
/// prefixes and the timestamp. Bounds the record count by the bytes present.
const RECORD_BYTES_MIN: usize = 4 + 4 + 8;

/// Smallest encoding of one incarnation run.
const RUN_BYTES_MIN: usize = 4 + INCARNATION_ID_BYTES;

/// Bytes of an origin id on the wire.
pub const ORIGIN_ID_BYTES: usize = 16;

/// The longest idempotency key a record carries.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 256;

/// What starts the provenance section: a value no incarnation run count
/// can take.
const PROVENANCE_MARKER: u32 = u32::MAX;

/// Smallest encoding of one record's provenance.
const PROVENANCE_BYTES_MIN: usize = ORIGIN_ID_BYTES + 8 + 4;

/// `421`: this node does not own the partition (any more); the sender looks
/// the owner up again.
pub const NOT_OWNER: Status = Status(421);

/// The start of the message of every `400 unsupported rpc operation`, the
/// transport's own included.
pub const UNSUPPORTED_OPERATION_PREFIX: &str = "unsupported rpc operation";

const _: () =
    assert!(COMMIT_BATCH_RECORDS_MAX as usize * RECORD_BYTES_MIN <= crate::limits::FRAME_BYTES_MAX);

/// A topic incarnation id: 16 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IncarnationId([u8; INCARNATION_ID_BYTES]);

/// Text that is not an incarnation id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an incarnation id (16 lowercase hex characters)")]
pub struct InvalidIncarnationId(pub String);

impl IncarnationId {
    /// Parses the id's text.
    ///
    /// # Errors
    /// [`InvalidIncarnationId`] unless `text` is 16 lowercase hex characters.
    pub fn parse(text: &str) -> Result<Self, InvalidIncarnationId> {
        let bytes: [u8; INCARNATION_ID_BYTES] = text
            .as_bytes()
            .try_into()
            .map_err(|_| InvalidIncarnationId(text.to_owned()))?;
        if bytes.iter().all(|byte| is_lower_hex(*byte)) {
            Ok(Self(bytes))
        } else {
            Err(InvalidIncarnationId(text.to_owned()))
        }
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        // Every constructor checked the bytes are ASCII hex digits.
        std::str::from_utf8(&self.0).expect("an incarnation id is ASCII")
    }
}

fn is_lower_hex(byte: u8) -> bool {
    byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)
}

impl fmt::Debug for IncarnationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IncarnationId({})", self.as_str())
    }
}

impl fmt::Display for IncarnationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One record of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRecord {
    /// Key; empty means none.
    pub key: Bytes,
    /// The message, opaque.
    pub payload: Bytes,
    /// When the accepting node took the record, Unix ms.
    pub created_at_unix_ms: u64,
}

/// Where one record of a batch came from, so its owner stores it once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordProvenance {
    /// The ingress WAL epoch's id and the record's sequence in it.
    pub origin: Option<([u8; ORIGIN_ID_BYTES], u64)>,
    /// The producer's idempotency key; empty means none.
    pub idempotency_key: Bytes,
}

/// Consecutive records sharing one incarnation id (or sharing none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncarnationRun {
    /// Records in the run, at least 1.
    pub records: u32,
    /// The id they were accepted under, if their topic has one.
    pub id: Option<IncarnationId>,
}

/// The request of opcode 11.
///
/// Invariants, kept by every constructor and checked by the decoder: 1 to
/// [`COMMIT_BATCH_RECORDS_MAX`] records; the incarnation runs are empty, or
/// cover exactly the records and name at least one id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitProduceBatch {
    topic: String,
    partition: u32,
    records: Vec<BatchRecord>,
    runs: Vec<IncarnationRun>,
    /// The sender's durable checkpoint, and one entry per record; empty
    /// when no record has provenance.
    floor: u64,
    provenance: Vec<RecordProvenance>,
}

impl CommitProduceBatch {
    /// A batch of `records` for `topic`/`partition`, each with the
    /// incarnation id it was accepted under. The trailing section is kept
    /// only when some record has an id.
    ///
    /// # Panics
    /// If there are no records or more than [`COMMIT_BATCH_RECORDS_MAX`]:
    /// a caller splits its batches (the dispatcher's never come near).
    pub fn new(
        topic: impl Into<String>,
        partition: u32,
        records: impl IntoIterator<Item = (BatchRecord, Option<IncarnationId>)>,
    ) -> Self {
        let mut batch_records = Vec::new();
        let mut runs: Vec<IncarnationRun> = Vec::new();
        for (record, id) in records {
            batch_records.push(record);
            match runs.last_mut() {
                Some(run) if run.id == id => run.records += 1,
                _ => runs.push(IncarnationRun { records: 1, id }),
            }
        }
        assert!(
            !batch_records.is_empty() && batch_records.len() <= COMMIT_BATCH_RECORDS_MAX as usize,
            "a commit batch holds 1 to {COMMIT_BATCH_RECORDS_MAX} records, not {}",
            batch_records.len()
        );
        if runs.iter().all(|run| run.id.is_none()) {
            runs.clear();
        }
        Self {
            topic: topic.into(),
            partition,
            records: batch_records,
            runs,
            floor: 0,
            provenance: Vec::new(),
        }
    }

    /// Adds each record's provenance and the sender's durable checkpoint.
    /// Kept only when some record has an origin or an idempotency key.
    ///
    /// # Panics
    /// If `provenance` does not hold one entry per record, or a key is over
    /// [`IDEMPOTENCY_KEY_BYTES_MAX`].
    #[must_use]
    pub fn with_provenance(mut self, floor: u64, provenance: Vec<RecordProvenance>) -> Self {
        assert_eq!(
            provenance.len(),
            self.records.len(),
            "one provenance per record"
        );
        assert!(
            provenance
                .iter()
                .all(|p| p.idempotency_key.len() <= IDEMPOTENCY_KEY_BYTES_MAX),
            "idempotency keys are at most {IDEMPOTENCY_KEY_BYTES_MAX} bytes"
        );
        if provenance
            .iter()
            .any(|p| p.origin.is_some() || !p.idempotency_key.is_empty())
        {
            self.floor = floor;
            self.provenance = provenance;
        }
        self
    }

    /// The sender's durable checkpoint (0 without provenance).
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Each record's provenance, in record order; empty when the batch
    /// carries none.
    pub fn provenance(&self) -> &[RecordProvenance] {
        &self.provenance
    }

    /// Drops the provenance section: the shape an owner from before it
    /// accepts. Its records may then be stored twice.
    pub fn strip_provenance(&mut self) {
        self.provenance.clear();
        self.floor = 0;
    }

    /// Whether the batch carries a trailing section (incarnations or
    /// provenance) that an owner from before them refuses.
    pub fn has_trailing_sections(&self) -> bool {
        self.has_incarnations() || !self.provenance.is_empty()
    }

    /// Drops both trailing sections: the shape every older owner accepts.
    pub fn strip_trailing_sections(&mut self) {
        self.strip_incarnations();
        self.strip_provenance();
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The records, in order.
    pub fn records(&self) -> &[BatchRecord] {
        &self.records
    }

    /// The incarnation runs; empty when no record has an id (then no
    /// trailing section is written).
    pub fn incarnation_runs(&self) -> &[IncarnationRun] {
        &self.runs
    }

    /// Whether the batch carries the trailing incarnation section.
    pub fn has_incarnations(&self) -> bool {
        !self.runs.is_empty()
    }

    /// Each record's incarnation id, in record order.
    pub fn record_incarnations(&self) -> impl Iterator<Item = Option<IncarnationId>> + '_ {
        let runs = self
            .runs
            .iter()
            .flat_map(|run| std::iter::repeat_n(run.id, run.records as usize));
        let none = std::iter::repeat_n(
            None,
            if self.runs.is_empty() {
                self.records.len()
            } else {
                0
            },
        );
        runs.chain(none)
    }

    /// The records with their ids, taking the batch apart.
    pub fn into_parts(self) -> (String, u32, Vec<(BatchRecord, Option<IncarnationId>)>) {
        let ids: Vec<Option<IncarnationId>> = self.record_incarnations().collect();
        let records = self.records.into_iter().zip(ids).collect();
        (self.topic, self.partition, records)
    }

    /// Drops the trailing section: the shape an owner from before it
    /// accepts. Its records then commit by name.
    pub fn strip_incarnations(&mut self) {
        self.runs.clear();
    }
}

impl Encode for CommitProduceBatch {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.topic);
        writer.u32(self.partition);
        let count = u32::try_from(self.records.len()).expect("checked by the constructor");
        writer.u32(count);
        for record in &self.records {
            writer.bytes(&record.key);
            writer.bytes(&record.payload);
            writer.u64(record.created_at_unix_ms);
        }
        if !self.runs.is_empty() {
            let runs = u32::try_from(self.runs.len()).expect("no more runs than records");
            writer.u32(runs);
            for run in &self.runs {
                writer.u32(run.records);
                match &run.id {
                    Some(id) => writer_fixed(writer, &id.0),
                    None => writer_fixed(writer, &[0; INCARNATION_ID_BYTES]),
                }
            }
        }
        if !self.provenance.is_empty() {
            writer.u32(PROVENANCE_MARKER);
            writer.u64(self.floor);
            for provenance in &self.provenance {
                let (id, seq) = provenance.origin.unwrap_or(([0; ORIGIN_ID_BYTES], 0));
                writer_fixed(writer, &id);
                writer.u64(seq);
                writer.bytes(&provenance.idempotency_key);
            }
        }
    }
}

fn writer_fixed<const N: usize>(writer: &mut Writer, bytes: &[u8; N]) {
    for byte in bytes {
        writer.u8(*byte);
    }
}

impl Decode for CommitProduceBatch {
    /// Reads the batch and, if bytes remain, the trailing incarnation
    /// section. Only ever decoded as a whole message, so "bytes remain"
    /// means "the sender wrote the section".
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let topic = reader.str("topic")?;
        let partition = reader.u32("partition")?;
        let records = decode_records(reader)?;
        let runs = if reader.remaining() == 0 || next_is_provenance(reader) {
            Vec::new()
        } else {
            decode_runs(reader, records.len())?
        };
        // Bytes that are not a provenance section are a field from a newer
        // build: left unread, they make the message decoder refuse it as an
        // unsupported operation.
        let (floor, provenance) = if next_is_provenance(reader) {
            decode_provenance(reader, records.len())?
        } else {
            (0, Vec::new())
        };
        Ok(Self {
            topic,
            partition,
            records,
            runs,
            floor,
            provenance,
        })
    }
}

fn next_is_provenance(reader: &Reader) -> bool {
    reader
        .clone()
        .u32("provenance marker")
        .is_ok_and(|value| value == PROVENANCE_MARKER)
}

fn decode_provenance(
    reader: &mut Reader,
    records: usize,
) -> Result<(u64, Vec<RecordProvenance>), DecodeError> {
    let marker = reader.u32("provenance marker")?;
    if marker != PROVENANCE_MARKER {
        return Err(DecodeError::InvalidValue {
            field: "provenance marker",
            value: u64::from(marker),
        });
    }
    let floor = reader.u64("provenance floor")?;
    let needed = records.saturating_mul(PROVENANCE_BYTES_MIN);
    if needed > reader.remaining() {
        return Err(DecodeError::LengthExceedsInput {
            field: "record provenance",
            claimed: needed as u64,
            remaining: reader.remaining(),
        });
    }
    let mut provenance = Vec::with_capacity(records);
    for _ in 0..records {
        let raw = reader.fixed("origin id", ORIGIN_ID_BYTES)?;
        let mut id = [0_u8; ORIGIN_ID_BYTES];
        id.copy_from_slice(&raw);
        let seq = reader.u64("origin sequence")?;
        let idempotency_key = reader.bytes("idempotency key")?;
        if idempotency_key.len() > IDEMPOTENCY_KEY_BYTES_MAX {
            return Err(DecodeError::InvalidValue {
                field: "idempotency key length",
                value: idempotency_key.len() as u64,
            });
        }
        let origin = (id != [0; ORIGIN_ID_BYTES]).then_some((id, seq));
        provenance.push(RecordProvenance {
            origin,
            idempotency_key,
        });
    }
    if provenance
        .iter()
        .all(|p| p.origin.is_none() && p.idempotency_key.is_empty())
    {
        // A sender writes the section only when some record has one.
        return Err(DecodeError::InvalidValue {
            field: "records with provenance",
            value: 0,
        });
    }
    Ok((floor, provenance))
}

fn decode_records(reader: &mut Reader) -> Result<Vec<BatchRecord>, DecodeError> {
    let count = get_count_in(
        reader,
        "record count",
        "records",
        1..=COMMIT_BATCH_RECORDS_MAX,
        RECORD_BYTES_MIN,
    )?;
    let mut records = Vec::with_capacity(count);
    for _ in 0..count {
        records.push(BatchRecord {
            key: reader.bytes("record key")?,
            payload: reader.bytes("record payload")?,
            created_at_unix_ms: reader.u64("record created_at")?,
        });
    }
    Ok(records)
}

fn decode_runs(reader: &mut Reader, records: usize) -> Result<Vec<IncarnationRun>, DecodeError> {
    // At most one run a record: `records` is a decoded record count, so it
    // fits a `u32`.
    let runs_max = u32::try_from(records).unwrap_or(u32::MAX);
    let count = get_count_in(
        reader,
        "incarnation run count",
        "incarnation runs",
        1..=runs_max,
        RUN_BYTES_MIN,
    )?;
    let mut runs = Vec::with_capacity(count);
    let mut covered = 0_usize;
    for _ in 0..count {
        let run_records = reader.u32("incarnation run records")?;
        covered += run_records as usize;
        if run_records == 0 || covered > records {
            return Err(DecodeError::InvalidValue {
                field: "incarnation run records",
                value: u64::from(run_records),
            });
        }
        runs.push(IncarnationRun {
            records: run_records,
            id: decode_id(reader)?,
        });
    }
    if covered != records {
        return Err(DecodeError::InvalidValue {
            field: "incarnation runs cover",
            value: covered as u64,
        });
    }
    if runs.iter().all(|run| run.id.is_none()) {
        // A sender writes the section only when some record has an id.
        return Err(DecodeError::InvalidValue {
            field: "incarnation runs with an id",
            value: 0,
        });
    }
    Ok(runs)
}

fn decode_id(reader: &mut Reader) -> Result<Option<IncarnationId>, DecodeError> {
    let raw = reader.fixed("incarnation id", INCARNATION_ID_BYTES)?;
    let mut bytes = [0_u8; INCARNATION_ID_BYTES];
    bytes.copy_from_slice(&raw);
    if bytes == [0; INCARNATION_ID_BYTES] {
        return Ok(None);
    }
    match bytes.iter().find(|byte| !is_lower_hex(**byte)) {
        None => Ok(Some(IncarnationId(bytes))),
        Some(bad) => Err(DecodeError::InvalidValue {
            field: "incarnation id",
            value: u64::from(*bad),
        }),
    }
}

impl Message for CommitProduceBatch {
    const NAME: &'static str = "CommitProduceBatch";
    const VERSION: u8 = 1;
}

/// Decodes a request body as the owner must: trailing bytes after the last
/// field this build knows are an unknown field, refused as
/// `400 unsupported rpc operation`; anything else unreadable is
/// `400 malformed request: …`.
///
/// # Errors
/// The `400` to answer.
pub fn decode_commit_request(body: Bytes) -> Result<CommitProduceBatch, RpcError> {
    decode_message::<CommitProduceBatch>(body).map_err(|error| match error {
        DecodeError::TrailingBytes { count } => RpcError::bad_request(format!(
            "{UNSUPPORTED_OPERATION_PREFIX}: {count} bytes of unknown trailing fields on CommitProduceBatch (11)"
        )),
        other => RpcError::from(other),
    })
}

/// Whether `error` is the spec's `400 unsupported rpc operation`: the peer
/// runs an older build that does not know an opcode or a trailing field.
pub fn is_unsupported_operation(error: &RpcError) -> bool {
    error.status == Status::BAD_REQUEST && error.message.starts_with(UNSUPPORTED_OPERATION_PREFIX)
}

/// The `412` an owner answers when records carry another incarnation than
/// its live topic: the message names both ids.
pub fn incarnation_mismatch(batch: &str, live: &str) -> RpcError {
    RpcError::new(
        Status::PRECONDITION_FAILED,
        format!("topic incarnation mismatch: records carry {batch}, live topic is {live}"),
    )
}

/// The `421` an owner answers for a partition it does not own.
pub fn not_owner(topic: &str, partition: u32) -> RpcError {
    RpcError::new(
        NOT_OWNER,
        format!("not the partition owner of {topic}/{partition}"),
    )
}

/// The owner's answer to a committed batch: the offsets it took.
///
/// `already_stored` counts the batch's records the partition stored before
/// (by their provenance) and did not store again; it is written as a
/// trailing `u32` only when non-zero, which happens only for a batch that
/// carried provenance, so an older sender never sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitProduceBatchAnswer {
    /// First offset taken, and one past the last.
    pub offsets: Range<u64>,
    /// Records of the batch the partition already stored.
    pub already_stored: u32,
}

impl Encode for CommitProduceBatchAnswer {
    fn encode(&self, writer: &mut Writer) {
        writer.u64(self.offsets.start);
        writer.u64(self.offsets.end);
        if self.already_stored > 0 {
            writer.u32(self.already_stored);
        }
    }
}

impl Decode for CommitProduceBatchAnswer {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let start = reader.u64("first offset")?;
        let end = reader.u64("end offset")?;
        if end < start {
            return Err(DecodeError::InvalidValue {
                field: "end offset",
                value: end,
            });
        }
        let already_stored = if reader.remaining() == 0 {
            0
        } else {
            reader.u32("already stored")?
        };
        Ok(Self {
            offsets: start..end,
            already_stored,
        })
    }
}

impl Message for CommitProduceBatchAnswer {
    const NAME: &'static str = "CommitProduceBatchAnswer";
    const VERSION: u8 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_message;
    use proptest::prelude::*;

    const A1: &str = "00000000000000a1";
    const B2: &str = "00000000000000b2";

    fn id(text: &str) -> IncarnationId {
        IncarnationId::parse(text).expect("a valid id")
    }

    fn record(payload: &'static str) -> BatchRecord {
        BatchRecord {
            key: Bytes::new(),
            payload: Bytes::from_static(payload.as_bytes()),
            created_at_unix_ms: 7,
        }
    }

    /// The shape a build without the trailing section writes, by hand.
    fn older_frame(topic: &str, partition: u32, records: &[BatchRecord]) -> Bytes {
        let mut writer = Writer::new();
        writer.u8(1);
        writer.str(topic);
        writer.u32(partition);
        writer.u32(records.len() as u32);
        for record in records {
            writer.bytes(&record.key);
            writer.bytes(&record.payload);
            writer.u64(record.created_at_unix_ms);
        }
        writer.finish()
    }

    fn id_strategy() -> impl Strategy<Value = Option<IncarnationId>> {
        proptest::option::of("[0-9a-f]{16}".prop_map(|text| id(&text)))
    }

    fn record_strategy() -> impl Strategy<Value = BatchRecord> {
        (
            proptest::collection::vec(any::<u8>(), 0..8),
            proptest::collection::vec(any::<u8>(), 0..32),
            any::<u64>(),
        )
            .prop_map(|(key, payload, created_at_unix_ms)| BatchRecord {
                key: Bytes::from(key),
                payload: Bytes::from(payload),
                created_at_unix_ms,
            })
    }

    fn batch_strategy() -> impl Strategy<Value = CommitProduceBatch> {
        (
            ".{0,16}",
            any::<u32>(),
            proptest::collection::vec(
                (record_strategy(), id_strategy(), provenance_strategy()),
                1..12,
            ),
            any::<u64>(),
        )
            .prop_map(|(topic, partition, records, floor)| {
                let provenance = records.iter().map(|(_, _, p)| p.clone()).collect();
                CommitProduceBatch::new(
                    topic,
                    partition,
                    records.into_iter().map(|(record, id, _)| (record, id)),
                )
                .with_provenance(floor, provenance)
            })
    }

    fn provenance_strategy() -> impl Strategy<Value = RecordProvenance> {
        (
            proptest::option::of((any::<[u8; ORIGIN_ID_BYTES]>(), any::<u64>())),
            proptest::collection::vec(any::<u8>(), 0..8),
        )
            .prop_map(|(origin, key)| RecordProvenance {
                // The all-zero id means "no origin" on the wire.
                origin: origin.filter(|(id, _)| *id != [0; ORIGIN_ID_BYTES]),
                idempotency_key: Bytes::from(key),
            })
    }

    proptest! {
        #[test]
        fn batch_round_trips(batch in batch_strategy()) {
            let decoded = decode_commit_request(encode_message(&batch)).expect("decodes");
            prop_assert_eq!(decoded, batch);
        }

        #[test]
        fn batch_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..160)) {
            let _ = decode_commit_request(Bytes::from(bytes));
        }

        #[test]
        fn batch_decoder_never_panics_on_damaged_batches(
            batch in batch_strategy(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut bytes = encode_message(&batch).to_vec();
            let at = at.index(bytes.len());
            bytes[at] = byte;
            let _ = decode_commit_request(Bytes::from(bytes));
        }

        #[test]
        fn a_damaged_batch_never_panics(batch in batch_strategy(), damage in crate::damage::damage()) {
            for damaged in damage.apply(&encode_message(&batch)) {
                let _ = decode_commit_request(Bytes::from(damaged));
            }
        }

        #[test]
        fn truncated_batch_is_an_error(batch in batch_strategy(), cut in any::<prop::sample::Index>()) {
            let bytes = encode_message(&batch);
            let cut = cut.index(bytes.len());
            // A cut exactly before a trailing section leaves a valid batch
            // without it; every other cut is refused.
            match decode_commit_request(bytes.slice(..cut)) {
                Ok(decoded) => {
                    prop_assert!(batch.has_trailing_sections());
                    prop_assert!(decoded.provenance().is_empty());
                    prop_assert_eq!(decoded.records(), batch.records());
                }
                Err(error) => prop_assert_eq!(error.status, Status::BAD_REQUEST),
            }
        }

        #[test]
        fn answer_round_trips(start in any::<u64>(), len in 0_u64..1_000_000) {
            let answer = CommitProduceBatchAnswer {
                offsets: start..start.saturating_add(len),
                already_stored: (len % 3) as u32,
            };
            let decoded = decode_message::<CommitProduceBatchAnswer>(encode_message(&answer));
            prop_assert_eq!(decoded.expect("decodes"), answer);
        }

        #[test]
        fn answer_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = decode_message::<CommitProduceBatchAnswer>(Bytes::from(bytes));
        }
    }

    #[test]
    fn batch_without_ids_is_exactly_the_older_frame() {
        let records = vec![record("a"), record("b")];
        let batch =
            CommitProduceBatch::new("orders", 2, records.iter().cloned().map(|r| (r, None)));
        assert!(!batch.has_incarnations());
        assert_eq!(encode_message(&batch), older_frame("orders", 2, &records));
    }

    #[test]
    fn stripped_batch_is_exactly_the_older_frame() {
        let records = vec![record("a"), record("b")];
        let mut batch = CommitProduceBatch::new(
            "orders",
            2,
            records.iter().cloned().map(|r| (r, Some(id(A1)))),
        );
        assert!(batch.has_incarnations());
        batch.strip_incarnations();
        assert_eq!(encode_message(&batch), older_frame("orders", 2, &records));
    }

    #[test]
    fn consecutive_records_with_one_id_share_a_run() {
        let batch = CommitProduceBatch::new(
            "orders",
            0,
            [
                (record("a"), Some(id(A1))),
                (record("b"), Some(id(A1))),
                (record("c"), None),
                (record("d"), Some(id(B2))),
            ],
        );
        assert_eq!(
            batch.incarnation_runs(),
            &[
                IncarnationRun {
                    records: 2,
                    id: Some(id(A1))
                },
                IncarnationRun {
                    records: 1,
                    id: None
                },
                IncarnationRun {
                    records: 1,
                    id: Some(id(B2))
                },
            ]
        );
        let ids: Vec<_> = batch.record_incarnations().collect();
        assert_eq!(ids, vec![Some(id(A1)), Some(id(A1)), None, Some(id(B2))]);
    }

    #[test]
    fn section_costs_four_bytes_plus_twenty_per_run() {
        let records = vec![record("a"), record("b"), record("c")];
        let batch = CommitProduceBatch::new(
            "orders",
            1,
            records.iter().cloned().map(|r| (r, Some(id(A1)))),
        );
        let older = older_frame("orders", 1, &records);
        assert_eq!(encode_message(&batch).len(), older.len() + 4 + 20);
    }

    #[test]
    fn unknown_trailing_field_is_an_unsupported_operation() {
        let batch = CommitProduceBatch::new("orders", 0, [(record("a"), Some(id(A1)))]);
        let mut bytes = encode_message(&batch).to_vec();
        bytes.extend([9, 9]);
        let error = decode_commit_request(Bytes::from(bytes)).expect_err("refused");
        assert_eq!(error.status, Status::BAD_REQUEST);
        assert!(is_unsupported_operation(&error), "{error}");
    }

    #[test]
    fn provenance_without_incarnations_round_trips_and_can_be_stripped() {
        let provenance = vec![
            RecordProvenance {
                origin: Some(([3; ORIGIN_ID_BYTES], 41)),
                idempotency_key: Bytes::new(),
            },
            RecordProvenance {
                origin: None,
                idempotency_key: Bytes::from_static(b"req-7"),
            },
        ];
        let mut batch =
            CommitProduceBatch::new("orders", 2, [(record("a"), None), (record("b"), None)])
                .with_provenance(40, provenance.clone());
        let decoded = decode_commit_request(encode_message(&batch)).expect("decodes");
        assert_eq!(decoded.provenance(), &provenance[..]);
        assert_eq!(decoded.floor(), 40);
        batch.strip_provenance();
        let older = older_frame("orders", 2, &[record("a"), record("b")]);
        assert_eq!(encode_message(&batch), older);
    }

    #[test]
    fn provenance_is_dropped_when_no_record_has_any() {
        let batch = CommitProduceBatch::new("orders", 0, [(record("a"), None)])
            .with_provenance(5, vec![RecordProvenance::default()]);
        assert!(batch.provenance().is_empty());
        assert_eq!(batch.floor(), 0);
    }

    #[test]
    fn malformed_batch_is_a_plain_bad_request() {
        let error = decode_commit_request(Bytes::from_static(&[1, 0, 0])).expect_err("refused");
        assert_eq!(error.status, Status::BAD_REQUEST);
        assert!(!is_unsupported_operation(&error), "{error}");
        assert!(error.message.starts_with("malformed request"), "{error}");
    }

    #[test]
    fn empty_batch_is_refused() {
        let error = decode_commit_request(older_frame("orders", 0, &[])).expect_err("refused");
        assert!(error.message.contains("record count"), "{error}");
    }

    #[test]
    fn record_count_beyond_the_input_is_refused_before_allocating() {
        let mut writer = Writer::new();
        writer.u8(1);
        writer.str("orders");
        writer.u32(0);
        writer.u32(COMMIT_BATCH_RECORDS_MAX);
        let error = decode_commit_request(writer.finish()).expect_err("refused");
        assert!(error.message.contains("records claims"), "{error}");
    }

    #[test]
    fn section_without_any_id_is_refused() {
        let mut bytes = older_frame("orders", 0, &[record("a")]).to_vec();
        bytes.extend(1_u32.to_be_bytes());
        bytes.extend(1_u32.to_be_bytes());
        bytes.extend([0_u8; INCARNATION_ID_BYTES]);
        let error = decode_commit_request(Bytes::from(bytes)).expect_err("refused");
        assert!(
            error.message.contains("incarnation runs with an id"),
            "{error}"
        );
    }

    #[test]
    fn runs_that_do_not_cover_the_records_are_refused() {
        let mut bytes = older_frame("orders", 0, &[record("a"), record("b")]).to_vec();
        bytes.extend(1_u32.to_be_bytes());
        bytes.extend(1_u32.to_be_bytes());
        bytes.extend(A1.as_bytes());
        let error = decode_commit_request(Bytes::from(bytes)).expect_err("refused");
        assert!(error.message.contains("incarnation runs cover"), "{error}");
    }

    #[test]
    fn id_that_is_not_lowercase_hex_is_refused() {
        let mut bytes = older_frame("orders", 0, &[record("a")]).to_vec();
        bytes.extend(1_u32.to_be_bytes());
        bytes.extend(1_u32.to_be_bytes());
        bytes.extend(b"00000000000000A1");
        let error = decode_commit_request(Bytes::from(bytes)).expect_err("refused");
        assert!(error.message.contains("incarnation id"), "{error}");
        assert!(IncarnationId::parse("00000000000000A1").is_err());
        assert!(IncarnationId::parse("0123").is_err());
    }

    #[test]
    fn answer_with_end_before_start_is_refused() {
        let mut writer = Writer::new();
        writer.u8(1);
        writer.u64(5);
        writer.u64(4);
        assert!(decode_message::<CommitProduceBatchAnswer>(writer.finish()).is_err());
    }

    #[test]
    fn mismatch_answer_names_both_ids() {
        let error = incarnation_mismatch(A1, B2);
        assert_eq!(error.status, Status::PRECONDITION_FAILED);
        assert!(error.message.contains(A1) && error.message.contains(B2));
    }
}
