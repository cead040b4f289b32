//! The keyed envelope: how one record is stored inside a frame.
//!
//! ```text
//! [version: 1B = 0x02][key length: uvarint][key][committed_at_ms: 8B BE][payload]
//! ```
//!
//! Key length 0 means "no key". Version 0x01 was retired and decodes as
//! corrupt, as does any other version byte.

use crate::frame::FrameError;

/// The only envelope version this crate writes or reads.
pub const ENVELOPE_VERSION: u8 = 0x02;

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
}

/// A decoded envelope, borrowing from the frame's payload.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Envelope<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) committed_at_ms: u64,
    pub(crate) payload: &'a [u8],
}

/// Encoded size of an envelope holding `key_bytes` and `payload_bytes`.
pub(crate) fn envelope_bytes(key_bytes: usize, payload_bytes: usize) -> usize {
    1 + uvarint_bytes(key_bytes as u64) + key_bytes + 8 + payload_bytes
}

/// Appends the envelope of one record to `out`.
pub(crate) fn encode_envelope(out: &mut Vec<u8>, key: &[u8], committed_at_ms: u64, payload: &[u8]) {
    out.push(ENVELOPE_VERSION);
    put_uvarint(out, key.len() as u64);
    out.extend_from_slice(key);
    out.extend_from_slice(&committed_at_ms.to_be_bytes());
    out.extend_from_slice(payload);
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
    if version != ENVELOPE_VERSION {
        return Err(FrameError::Envelope("unknown envelope version"));
    }
    let (key_len, rest) = take_uvarint(rest)?;
    let key_len = usize::try_from(key_len)
        .ok()
        .filter(|&len| len <= rest.len())
        .ok_or(FrameError::Envelope("key runs past the record"))?;
    let (key, rest) = rest.split_at(key_len);
    let Some((time, payload)) = rest.split_first_chunk::<8>() else {
        return Err(FrameError::Envelope("commit time runs past the record"));
    };
    Ok(Envelope {
        key,
        committed_at_ms: u64::from_be_bytes(*time),
        payload,
    })
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
            return Err(FrameError::Envelope("key length overflows 64 bits"));
        }
        value |= bits << shift;
        if byte & 0x80 == 0 {
            return Ok((value, &bytes[index + 1..]));
        }
    }
    Err(FrameError::Envelope("unterminated key length"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_round_trips_with_and_without_a_key() {
        for key in [&b""[..], b"order-17", &[0x83u8; 300][..]] {
            let mut out = Vec::new();
            encode_envelope(&mut out, key, 1_700_000_000_123, b"payload");
            assert_eq!(out.len(), envelope_bytes(key.len(), 7));
            let envelope = decode_envelope(&out).unwrap();
            assert_eq!(envelope.key, key);
            assert_eq!(envelope.committed_at_ms, 1_700_000_000_123);
            assert_eq!(envelope.payload, b"payload");
        }
    }

    #[test]
    fn retired_version_one_decodes_as_corrupt() {
        let mut out = Vec::new();
        encode_envelope(&mut out, b"k", 5, b"p");
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
