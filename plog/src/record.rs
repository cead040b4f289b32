//! The keyed envelope: how one record is stored inside a frame.
//!
//! ```text
//! version 2: [0x02][key length: uvarint][key][committed_at_ms: 8B BE][payload]
//! version 3: [0x03][key length: uvarint][key][committed_at_ms: 8B BE]
//!            [provenance flags: 1B]
//!            [flags bit 0: origin id 16B][sequence: uvarint][sequence - floor: uvarint]
//!            [flags bit 1: idempotency key length: uvarint][idempotency key]
//!            [payload]
//! ```
//!
//! Key length 0 means "no key". A record with provenance (the ingress WAL it
//! came from, or an idempotency key) is written in version 3, every other
//! record in version 2, so a log without provenance is byte for byte what
//! older builds wrote. Flag bits 2 to 7 are reserved and must be zero; at
//! least one of bits 0 and 1 is set, and an idempotency key is never empty.
//! Version 0x01 was retired and decodes as corrupt, as does any other
//! version byte.

use crate::error::FrameError;

/// The envelope version of a record without provenance.
pub const ENVELOPE_VERSION: u8 = 0x02;

/// The envelope version of a record with provenance.
pub const ENVELOPE_VERSION_PROVENANCE: u8 = 0x03;

/// Bytes of an origin id: the identity of one ingress WAL's sequence space.
pub const ORIGIN_ID_BYTES: usize = 16;

/// The longest idempotency key the log stores, in bytes.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 256;

const PROVENANCE_ORIGIN: u8 = 0x01;
const PROVENANCE_IDEMPOTENCY_KEY: u8 = 0x02;

/// Where a record came from: one record of one ingress WAL.
///
/// `id` names the WAL's sequence space (a WAL made anew gets a new id), `seq`
/// is the record's WAL sequence number, and `floor` is the WAL's durable
/// dispatch checkpoint when the record was sent: the sender never sends a
/// sequence below it again, so a partition forgets the sequences below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The WAL's identity.
    pub id: [u8; ORIGIN_ID_BYTES],
    /// The record's WAL sequence number.
    pub seq: u64,
    /// The WAL's durable checkpoint when sent; at most `seq`.
    pub floor: u64,
}

/// The smallest envelope: version 2, a one-byte key length of zero and the
/// commit time, with no key and an empty payload (version 3 adds at least
/// its flags byte).
pub(crate) const ENVELOPE_BYTES_MIN: usize = 1 + 1 + 8;

/// A `u64` takes at most ten bytes as an unsigned LEB128 varint.
const UVARINT_BYTES_MAX: usize = 10;

/// One record handed to [`crate::PartitionLog::commit_durable`].
///
/// `committed_at_ms` is the time the caller stamped when it built the
/// record; the log raises it to the partition's newest commit time so commit
/// times never go backwards along a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitRecord<'a> {
    /// The record's key; empty means no key.
    pub key: &'a [u8],
    /// The record's payload, stored as it is.
    pub payload: &'a [u8],
    /// Unix time in milliseconds the caller stamped.
    pub committed_at_ms: u64,
    /// The ingress WAL record this is, if the caller knows it: a record
    /// whose origin the partition already stores is not stored again.
    pub origin: Option<Origin>,
    /// The producer's idempotency key; empty means none. A record whose key
    /// the partition stored within its idempotency window is not stored
    /// again.
    pub idempotency_key: &'a [u8],
}

impl<'a> CommitRecord<'a> {
    /// A record without provenance.
    pub fn new(key: &'a [u8], payload: &'a [u8], committed_at_ms: u64) -> Self {
        Self {
            key,
            payload,
            committed_at_ms,
            origin: None,
            idempotency_key: &[],
        }
    }

    /// Whether the record carries an origin or an idempotency key (and so is
    /// written in envelope version 3, and checked against what the
    /// partition stores).
    pub(crate) fn has_provenance(&self) -> bool {
        self.origin.is_some() || !self.idempotency_key.is_empty()
    }
}

/// One committed record as a read returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The record's offset in its partition.
    pub offset: u64,
    /// The record's key; empty means no key.
    pub key: Vec<u8>,
    /// Unix time in milliseconds of its commit, never below an earlier
    /// record's in the same partition (within one process).
    pub committed_at_ms: u64,
    /// The payload, byte for byte as committed.
    pub payload: Vec<u8>,
    /// The ingress WAL record it was committed from, if it was stored with
    /// one.
    pub origin: Option<Origin>,
    /// The producer's idempotency key; empty means none.
    pub idempotency_key: Vec<u8>,
}

/// A decoded envelope, borrowing from the frame's payload.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Envelope<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) committed_at_ms: u64,
    pub(crate) origin: Option<Origin>,
    pub(crate) idempotency_key: &'a [u8],
    pub(crate) payload: &'a [u8],
}

/// Encoded size of the envelope of `record`.
pub(crate) fn envelope_bytes(record: &CommitRecord<'_>) -> usize {
    let key_bytes = record.key.len();
    let plain = 1 + uvarint_bytes(key_bytes as u64) + key_bytes + 8 + record.payload.len();
    if !record.has_provenance() {
        return plain;
    }
    let origin = record.origin.map_or(0, |origin| {
        ORIGIN_ID_BYTES + uvarint_bytes(origin.seq) + uvarint_bytes(origin.seq - origin.floor)
    });
    let idempotency = match record.idempotency_key.len() {
        0 => 0,
        len => uvarint_bytes(len as u64) + len,
    };
    plain + 1 + origin + idempotency
}

/// Appends the envelope of one record to `out`.
///
/// # Panics
/// If the record's origin has a floor above its sequence, or its
/// idempotency key is longer than [`IDEMPOTENCY_KEY_BYTES_MAX`]: callers
/// check both before a record reaches the log.
pub(crate) fn encode_envelope(out: &mut Vec<u8>, record: &CommitRecord<'_>) {
    let provenance = record.has_provenance();
    out.push(if provenance {
        ENVELOPE_VERSION_PROVENANCE
    } else {
        ENVELOPE_VERSION
    });
    put_uvarint(out, record.key.len() as u64);
    out.extend_from_slice(record.key);
    out.extend_from_slice(&record.committed_at_ms.to_be_bytes());
    if provenance {
        let mut flags = 0;
        if record.origin.is_some() {
            flags |= PROVENANCE_ORIGIN;
        }
        if !record.idempotency_key.is_empty() {
            flags |= PROVENANCE_IDEMPOTENCY_KEY;
        }
        out.push(flags);
        if let Some(origin) = record.origin {
            assert!(
                origin.floor <= origin.seq,
                "an origin's floor is at most its sequence"
            );
            out.extend_from_slice(&origin.id);
            put_uvarint(out, origin.seq);
            put_uvarint(out, origin.seq - origin.floor);
        }
        if !record.idempotency_key.is_empty() {
            assert!(
                record.idempotency_key.len() <= IDEMPOTENCY_KEY_BYTES_MAX,
                "idempotency keys are at most {IDEMPOTENCY_KEY_BYTES_MAX} bytes"
            );
            put_uvarint(out, record.idempotency_key.len() as u64);
            out.extend_from_slice(record.idempotency_key);
        }
    }
    out.extend_from_slice(record.payload);
}

/// Decodes one envelope that spans all of `bytes`.
///
/// # Errors
/// [`FrameError::Envelope`] for an unknown version, a malformed or overlong
/// key length, or a key or commit time running past the end.
pub(crate) fn decode_envelope(bytes: &[u8]) -> Result<Envelope<'_>, FrameError> {
    let Some((&version, rest)) = bytes.split_first() else {
        return Err(FrameError::Envelope("empty record"));
    };
    if version != ENVELOPE_VERSION && version != ENVELOPE_VERSION_PROVENANCE {
        return Err(FrameError::Envelope("unknown envelope version"));
    }
    let (key_len, rest) = take_uvarint(rest)?;
    let key_len = usize::try_from(key_len)
        .ok()
        .filter(|&len| len <= rest.len())
        .ok_or(FrameError::Envelope("key runs past the record"))?;
    let (key, rest) = rest.split_at(key_len);
    let Some((time, rest)) = rest.split_first_chunk::<8>() else {
        return Err(FrameError::Envelope("commit time runs past the record"));
    };
    let mut envelope = Envelope {
        key,
        committed_at_ms: u64::from_be_bytes(*time),
        origin: None,
        idempotency_key: &[],
        payload: rest,
    };
    if version == ENVELOPE_VERSION_PROVENANCE {
        decode_provenance(rest, &mut envelope)?;
    }
    Ok(envelope)
}

/// Decodes the provenance section at the start of `bytes` into `envelope`,
/// and sets its payload to what follows.
fn decode_provenance<'a>(bytes: &'a [u8], envelope: &mut Envelope<'a>) -> Result<(), FrameError> {
    let Some((&flags, mut rest)) = bytes.split_first() else {
        return Err(FrameError::Envelope("provenance flags run past the record"));
    };
    if flags & !(PROVENANCE_ORIGIN | PROVENANCE_IDEMPOTENCY_KEY) != 0 || flags == 0 {
        return Err(FrameError::Envelope("invalid provenance flags"));
    }
    if flags & PROVENANCE_ORIGIN != 0 {
        let Some((id, after)) = rest.split_first_chunk::<ORIGIN_ID_BYTES>() else {
            return Err(FrameError::Envelope("origin id runs past the record"));
        };
        let (seq, after) = take_uvarint(after)?;
        let (behind, after) = take_uvarint(after)?;
        let floor = seq
            .checked_sub(behind)
            .ok_or(FrameError::Envelope("origin floor is below zero"))?;
        envelope.origin = Some(Origin {
            id: *id,
            seq,
            floor,
        });
        rest = after;
    }
    if flags & PROVENANCE_IDEMPOTENCY_KEY != 0 {
        let (len, after) = take_uvarint(rest)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&len| (1..=IDEMPOTENCY_KEY_BYTES_MAX).contains(&len) && len <= after.len())
            .ok_or(FrameError::Envelope("invalid idempotency key length"))?;
        let (key, after) = after.split_at(len);
        envelope.idempotency_key = key;
        rest = after;
    }
    envelope.payload = rest;
    Ok(())
}

fn uvarint_bytes(mut value: u64) -> usize {
    let mut bytes = 1;
    while value >= 0x80 {
        value >>= 7;
        bytes += 1;
    }
    bytes
}

fn put_uvarint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads an unsigned LEB128 varint, refusing encodings longer than ten bytes
/// or overflowing 64 bits.
fn take_uvarint(bytes: &[u8]) -> Result<(u64, &[u8]), FrameError> {
    let mut value: u64 = 0;
    for (index, &byte) in bytes.iter().enumerate().take(UVARINT_BYTES_MAX) {
        let bits = u64::from(byte & 0x7f);
        let shift = 7 * index as u32;
        if index == UVARINT_BYTES_MAX - 1 && byte > 1 {
            return Err(FrameError::Envelope("varint overflows 64 bits"));
        }
        value |= bits << shift;
        if byte & 0x80 == 0 {
            return Ok((value, &bytes[index + 1..]));
        }
    }
    Err(FrameError::Envelope("unterminated varint"))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn arb_origin() -> impl Strategy<Value = Origin> {
        (any::<[u8; ORIGIN_ID_BYTES]>(), any::<u64>(), any::<u64>()).prop_map(|(id, a, b)| Origin {
            id,
            seq: a.max(b),
            floor: a.min(b),
        })
    }

    /// Key, payload, time, origin and idempotency key of one record.
    type Parts = (Vec<u8>, Vec<u8>, u64, Option<Origin>, Vec<u8>);

    fn arb_parts() -> impl Strategy<Value = Parts> {
        (
            prop::collection::vec(any::<u8>(), 0..40),
            prop::collection::vec(any::<u8>(), 0..80),
            any::<u64>(),
            prop::option::of(arb_origin()),
            prop_oneof![
                Just(Vec::new()),
                prop::collection::vec(any::<u8>(), 1..=IDEMPOTENCY_KEY_BYTES_MAX),
            ],
        )
    }

    fn envelope_of(parts: &Parts) -> Vec<u8> {
        let (key, payload, time, origin, idempotency_key) = parts;
        let record = CommitRecord {
            origin: *origin,
            idempotency_key,
            ..CommitRecord::new(key, payload, *time)
        };
        let mut out = Vec::new();
        encode_envelope(&mut out, &record);
        assert_eq!(out.len(), envelope_bytes(&record));
        out
    }

    /// What decoded must encode again: the encoder asserts a floor at most
    /// its sequence and an idempotency key within its limit, so a decoder
    /// letting either through would turn damage into a panic on the next
    /// write.
    fn re_encodes(envelope: &Envelope<'_>) -> Vec<u8> {
        let record = CommitRecord {
            origin: envelope.origin,
            idempotency_key: envelope.idempotency_key,
            ..CommitRecord::new(envelope.key, envelope.payload, envelope.committed_at_ms)
        };
        let mut out = Vec::new();
        encode_envelope(&mut out, &record);
        out
    }

    proptest! {
        #[test]
        fn every_envelope_round_trips(parts in arb_parts()) {
            let bytes = envelope_of(&parts);
            let envelope = decode_envelope(&bytes).unwrap();
            let (key, payload, time, origin, idempotency_key) = &parts;
            prop_assert_eq!(envelope.key, key.as_slice());
            prop_assert_eq!(envelope.payload, payload.as_slice());
            prop_assert_eq!(envelope.committed_at_ms, *time);
            prop_assert_eq!(envelope.origin, *origin);
            prop_assert_eq!(envelope.idempotency_key, idempotency_key.as_slice());
        }

        #[test]
        fn arbitrary_bytes_behind_either_version_never_panic(
            version in prop_oneof![Just(ENVELOPE_VERSION), Just(ENVELOPE_VERSION_PROVENANCE), any::<u8>()],
            rest in prop::collection::vec(any::<u8>(), 0..96),
        ) {
            let mut bytes = vec![version];
            bytes.extend_from_slice(&rest);
            if let Ok(envelope) = decode_envelope(&bytes) {
                re_encodes(&envelope);
            }
        }

        #[test]
        fn a_damaged_envelope_never_panics_and_what_decodes_encodes_again(
            parts in arb_parts(),
            at in any::<prop::sample::Index>(),
            mask in 1u8..=255,
            cut in any::<prop::sample::Index>(),
        ) {
            let bytes = envelope_of(&parts);
            let mut flipped = bytes.clone();
            flipped[at.index(bytes.len())] ^= mask;
            for damaged in [&flipped[..], &bytes[..cut.index(bytes.len())]] {
                if let Ok(envelope) = decode_envelope(damaged) {
                    re_encodes(&envelope);
                }
            }
        }
    }

    #[test]
    fn envelope_round_trips_with_and_without_a_key() {
        for key in [&b""[..], b"order-17", &[0x83u8; 300][..]] {
            let mut out = Vec::new();
            let record = CommitRecord::new(key, b"payload", 1_700_000_000_123);
            encode_envelope(&mut out, &record);
            assert_eq!(out[0], ENVELOPE_VERSION);
            assert_eq!(out.len(), envelope_bytes(&record));
            let envelope = decode_envelope(&out).unwrap();
            assert_eq!(envelope.key, key);
            assert_eq!(envelope.committed_at_ms, 1_700_000_000_123);
            assert_eq!(envelope.payload, b"payload");
        }
    }

    const ORIGIN: Origin = Origin {
        id: [7; ORIGIN_ID_BYTES],
        seq: 1_000_000,
        floor: 999_000,
    };

    #[test]
    fn provenance_round_trips_in_version_three() {
        let cases = [
            (Some(ORIGIN), &b""[..]),
            (None, &b"order-17-attempt"[..]),
            (Some(ORIGIN), &[b'i'; IDEMPOTENCY_KEY_BYTES_MAX][..]),
        ];
        for (origin, idempotency_key) in cases {
            let record = CommitRecord {
                origin,
                idempotency_key,
                ..CommitRecord::new(b"k", b"payload", 42)
            };
            let mut out = Vec::new();
            encode_envelope(&mut out, &record);
            assert_eq!(out[0], ENVELOPE_VERSION_PROVENANCE);
            assert_eq!(out.len(), envelope_bytes(&record));
            let envelope = decode_envelope(&out).unwrap();
            assert_eq!(envelope.key, b"k");
            assert_eq!(envelope.committed_at_ms, 42);
            assert_eq!(envelope.origin, origin);
            assert_eq!(envelope.idempotency_key, idempotency_key);
            assert_eq!(envelope.payload, b"payload");
        }
    }

    #[test]
    fn provenance_flags_must_name_a_known_section() {
        let record = CommitRecord {
            origin: Some(ORIGIN),
            ..CommitRecord::new(b"", b"p", 1)
        };
        let mut out = Vec::new();
        encode_envelope(&mut out, &record);
        // Version, key length 0, eight bytes of time: the flags follow.
        let flags_at = 1 + 1 + 8;
        for flags in [0x00, 0x04, 0x80] {
            let mut bad = out.clone();
            bad[flags_at] = flags;
            assert!(decode_envelope(&bad).is_err(), "flags {flags:#04x}");
        }
    }

    #[test]
    fn an_idempotency_key_over_the_limit_or_past_the_record_is_refused() {
        let mut bytes = vec![ENVELOPE_VERSION_PROVENANCE, 0];
        bytes.extend_from_slice(&5u64.to_be_bytes());
        bytes.push(PROVENANCE_IDEMPOTENCY_KEY);
        let mut over = bytes.clone();
        put_uvarint(&mut over, IDEMPOTENCY_KEY_BYTES_MAX as u64 + 1);
        over.extend_from_slice(&[b'x'; IDEMPOTENCY_KEY_BYTES_MAX + 1]);
        assert!(decode_envelope(&over).is_err());
        let mut past = bytes;
        put_uvarint(&mut past, 10);
        past.extend_from_slice(b"short");
        assert!(decode_envelope(&past).is_err());
    }

    #[test]
    fn an_origin_floor_above_its_sequence_is_refused() {
        let mut bytes = vec![ENVELOPE_VERSION_PROVENANCE, 0];
        bytes.extend_from_slice(&5u64.to_be_bytes());
        bytes.push(PROVENANCE_ORIGIN);
        bytes.extend_from_slice(&[1; ORIGIN_ID_BYTES]);
        put_uvarint(&mut bytes, 3);
        put_uvarint(&mut bytes, 4);
        assert!(decode_envelope(&bytes).is_err());
    }

    #[test]
    fn retired_version_one_decodes_as_corrupt() {
        let mut out = Vec::new();
        encode_envelope(&mut out, &CommitRecord::new(b"k", b"p", 5));
        out[0] = 0x01;
        assert!(matches!(
            decode_envelope(&out),
            Err(FrameError::Envelope(_))
        ));
    }

    #[test]
    fn key_longer_than_the_record_is_refused() {
        let bytes = [ENVELOPE_VERSION, 50, b'a', b'b'];
        assert!(decode_envelope(&bytes).is_err());
    }

    #[test]
    fn overlong_varint_is_refused() {
        let mut bytes = vec![ENVELOPE_VERSION];
        bytes.extend_from_slice(&[0xff; 11]);
        assert!(decode_envelope(&bytes).is_err());
    }

    #[test]
    fn missing_commit_time_is_refused() {
        let bytes = [ENVELOPE_VERSION, 0, 1, 2, 3];
        assert!(decode_envelope(&bytes).is_err());
    }

    #[test]
    fn varint_sizes_match_encoding() {
        for value in [0u64, 127, 128, 16_383, 16_384, u64::MAX] {
            let mut out = Vec::new();
            put_uvarint(&mut out, value);
            assert_eq!(out.len(), uvarint_bytes(value));
            assert_eq!(take_uvarint(&out).unwrap().0, value);
        }
    }
}
