//! Frames: the unit a commit writes and a read verifies.
//!
//! ```text
//! off 0  magic         2B  0xCA 0xFE
//! off 2  flags         1B  bits 0-2 codec (0 none, 1 zstd), bits 3-7 reserved (zero)
//! off 3  record_count  4B  BE, > 0
//! off 7  base_offset   8B  BE, offset of the first record, < 2^63
//! off 15 uncompressed  4B  BE, > 0, <= frame_bytes_max
//! off 19 stored        4B  BE, > 0, <= frame_bytes_max (bytes after the header)
//! off 23 crc32c        4B  BE, Castagnoli over bytes [2, 23) ++ stored payload
//! off 27 payload           codec([len: 4B BE][envelope] x record_count)
//! ```
//!
//! The magic is outside the CRC so recovery can scan for `0xCAFE` and test
//! each candidate. Decoding is strict: the decompressed payload must be
//! exactly `uncompressed` bytes and the record stream must consume it
//! exactly, with exactly `record_count` records.

use crate::error::FrameError;
use crate::record::{self, CommitRecord, Record};

/// The two bytes every frame starts with.
pub const FRAME_MAGIC: [u8; 2] = [0xCA, 0xFE];

/// Bytes of a frame header.
pub const FRAME_HEADER_BYTES: usize = 27;

/// Upper bound on a frame's stored and uncompressed sizes (`maxFrameBytes`),
/// checked on write and on read. A configured limit may only be lower.
pub const FRAME_BYTES_MAX: u32 = 256 << 20;

/// Bytes of the record length prefix inside a payload.
const RECORD_LEN_BYTES: usize = 4;

/// The fewest payload bytes one record takes: its length prefix and the
/// smallest envelope (version, a one-byte key length, the commit time).
const RECORD_BYTES_MIN: usize = RECORD_LEN_BYTES + record::ENVELOPE_BYTES_MIN;

/// The header fields the CRC covers: `[2, 23)`.
const CRC_COVERED: std::ops::Range<usize> = 2..23;

const CODEC_MASK: u8 = 0b0000_0111;

// The sizes are stored as big-endian int32 and must stay positive.
const _: () = assert!(FRAME_BYTES_MAX as u64 <= i32::MAX as u64);
const _: () = assert!(CRC_COVERED.end + 4 == FRAME_HEADER_BYTES);

/// How a frame's payload is stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Codec {
    /// Stored as it is.
    #[default]
    None,
    /// Compressed with zstd.
    Zstd,
}

impl Codec {
    fn flags(self) -> u8 {
        match self {
            Self::None => 0,
            Self::Zstd => 1,
        }
    }

    fn from_flags(flags: u8) -> Result<Self, FrameError> {
        if flags & !CODEC_MASK != 0 {
            return Err(FrameError::Header("reserved flag bits are set"));
        }
        match flags & CODEC_MASK {
            0 => Ok(Self::None),
            1 => Ok(Self::Zstd),
            _ => Err(FrameError::Header("unknown codec")),
        }
    }
}

/// zstd effort (`storage.compression_level`); decoding speed does not
/// depend on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompressionLevel {
    /// zstd level 1.
    Fastest,
    /// zstd level 3.
    #[default]
    Default,
    /// zstd level 7.
    Better,
    /// zstd level 11.
    Best,
}

impl CompressionLevel {
    fn zstd_level(self) -> i32 {
        match self {
            Self::Fastest => 1,
            Self::Default => 3,
            Self::Better => 7,
            Self::Best => 11,
        }
    }
}

/// A frame header, parsed and range-checked (but not yet CRC-checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// How the payload is stored.
    pub codec: Codec,
    /// Records in the frame; at least one.
    pub record_count: u32,
    /// Offset of the first record.
    pub base_offset: u64,
    /// Payload bytes before compression.
    pub uncompressed_bytes: u32,
    /// Payload bytes as stored after the header.
    pub stored_bytes: u32,
    /// CRC32C over header bytes `[2, 23)` and the stored payload.
    pub crc: u32,
}

impl FrameHeader {
    /// Bytes of the whole frame: header and stored payload.
    pub fn frame_bytes(&self) -> u64 {
        FRAME_HEADER_BYTES as u64 + u64::from(self.stored_bytes)
    }

    /// The offset after the frame's last record.
    pub fn end_offset(&self) -> u64 {
        self.base_offset + u64::from(self.record_count)
    }

    /// Parses and range-checks the header at the start of `bytes`.
    ///
    /// # Errors
    /// [`FrameError::Truncated`] with fewer than 27 bytes; otherwise the
    /// first field out of range.
    pub fn parse(bytes: &[u8], frame_bytes_max: u32) -> Result<Self, FrameError> {
        let Some(header) = bytes.first_chunk::<FRAME_HEADER_BYTES>() else {
            return Err(FrameError::Truncated {
                have: bytes.len() as u64,
                need: FRAME_HEADER_BYTES as u64,
            });
        };
        if header[0..2] != FRAME_MAGIC {
            return Err(FrameError::Magic);
        }
        let codec = Codec::from_flags(header[2])?;
        let be32 = |at: usize| {
            u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
        };
        let record_count = be32(3);
        let mut offset_bytes = [0u8; 8];
        offset_bytes.copy_from_slice(&header[7..15]);
        let base_offset = u64::from_be_bytes(offset_bytes);
        let uncompressed_bytes = be32(15);
        let stored_bytes = be32(19);
        let crc = be32(23);
        let limit = frame_bytes_max.min(FRAME_BYTES_MAX);
        if record_count == 0 || record_count > i32::MAX as u32 {
            return Err(FrameError::Header("record count out of range"));
        }
        if base_offset > i64::MAX as u64 || base_offset + u64::from(record_count) > i64::MAX as u64
        {
            return Err(FrameError::Header("base offset out of range"));
        }
        for size in [uncompressed_bytes, stored_bytes] {
            if size == 0 {
                return Err(FrameError::Header("zero payload size"));
            }
            if size > limit {
                return Err(FrameError::TooLarge {
                    bytes: u64::from(size),
                    limit,
                });
            }
        }
        if codec == Codec::None && stored_bytes != uncompressed_bytes {
            return Err(FrameError::Header("uncompressed frame with two sizes"));
        }
        if u64::from(record_count) * RECORD_LEN_BYTES as u64 > u64::from(uncompressed_bytes) {
            return Err(FrameError::Header("more records than the payload can hold"));
        }
        Ok(Self {
            codec,
            record_count,
            base_offset,
            uncompressed_bytes,
            stored_bytes,
            crc,
        })
    }

    fn write(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&FRAME_MAGIC);
        out[2] = self.codec.flags();
        out[3..7].copy_from_slice(&self.record_count.to_be_bytes());
        out[7..15].copy_from_slice(&self.base_offset.to_be_bytes());
        out[15..19].copy_from_slice(&self.uncompressed_bytes.to_be_bytes());
        out[19..23].copy_from_slice(&self.stored_bytes.to_be_bytes());
        out[23..27].copy_from_slice(&self.crc.to_be_bytes());
    }
}

fn frame_crc(frame: &[u8]) -> u32 {
    let covered = crc32c::crc32c(&frame[CRC_COVERED]);
    crc32c::crc32c_append(covered, &frame[FRAME_HEADER_BYTES..])
}

/// Checks the frame at the start of `bytes` without decoding it: header
/// ranges, length and CRC. Bytes after the frame are ignored, so a scan can
/// hand it the rest of a segment.
///
/// # Errors
/// Any [`FrameError`] other than the decode-only kinds.
pub fn check_frame(bytes: &[u8], frame_bytes_max: u32) -> Result<FrameHeader, FrameError> {
    let header = FrameHeader::parse(bytes, frame_bytes_max)?;
    let need = header.frame_bytes();
    if (bytes.len() as u64) < need {
        return Err(FrameError::Truncated {
            have: bytes.len() as u64,
            need,
        });
    }
    let computed = frame_crc(&bytes[..need as usize]);
    if computed != header.crc {
        return Err(FrameError::Crc {
            stored: header.crc,
            computed,
        });
    }
    Ok(header)
}

/// Decodes a frame that spans exactly all of `bytes` into its records.
///
/// # Errors
/// Trailing bytes after the frame are [`FrameError::RecordStream`]; a frame
/// whose CRC fails is never decoded; any malformed payload or envelope.
pub fn decode_frame(
    bytes: &[u8],
    frame_bytes_max: u32,
) -> Result<(FrameHeader, Vec<Record>), FrameError> {
    let header = check_frame(bytes, frame_bytes_max)?;
    let records = decode_checked_frame(bytes, &header)?;
    Ok((header, records))
}

/// Decodes a frame `check_frame` already accepted with `header` (a scan
/// checks each frame once; decoding does not repeat the CRC).
pub(crate) fn decode_checked_frame(
    bytes: &[u8],
    header: &FrameHeader,
) -> Result<Vec<Record>, FrameError> {
    if bytes.len() as u64 != header.frame_bytes() {
        return Err(FrameError::RecordStream("bytes after the frame"));
    }
    let stored = &bytes[FRAME_HEADER_BYTES..];
    let decompressed;
    let payload: &[u8] = match header.codec {
        Codec::None => stored,
        Codec::Zstd => {
            let capacity = header.uncompressed_bytes as usize;
            decompressed = zstd::bulk::decompress(stored, capacity)
                .map_err(|_| FrameError::Codec("zstd refused the payload"))?;
            &decompressed
        }
    };
    if payload.len() != header.uncompressed_bytes as usize {
        return Err(FrameError::Codec("payload size differs from the header"));
    }
    decode_record_stream(payload, header)
}

fn decode_record_stream(
    mut payload: &[u8],
    header: &FrameHeader,
) -> Result<Vec<Record>, FrameError> {
    let mut records = Vec::with_capacity(records_capacity(header.record_count, payload.len()));
    for index in 0..u64::from(header.record_count) {
        let Some((len, rest)) = payload.split_first_chunk::<RECORD_LEN_BYTES>() else {
            return Err(FrameError::RecordStream(
                "record length runs past the payload",
            ));
        };
        let len = u32::from_be_bytes(*len) as usize;
        if len > rest.len() {
            return Err(FrameError::RecordStream("record runs past the payload"));
        }
        let (bytes, rest) = rest.split_at(len);
        let envelope = record::decode_envelope(bytes)?;
        records.push(Record {
            offset: header.base_offset + index,
            key: envelope.key.to_vec(),
            committed_at_ms: envelope.committed_at_ms,
            payload: envelope.payload.to_vec(),
            origin: envelope.origin,
            idempotency_key: envelope.idempotency_key.to_vec(),
        });
        payload = rest;
    }
    if !payload.is_empty() {
        return Err(FrameError::RecordStream("bytes after the last record"));
    }
    Ok(records)
}

/// Records to reserve room for before decoding a payload: the declared
/// count, but no more than the payload can hold. The header check allows
/// one record per four payload bytes, so a header that passed its CRC may
/// declare 64 Mi records for a 256 MiB payload; the reservation follows the
/// smallest real record instead of that claim.
fn records_capacity(record_count: u32, payload_bytes: usize) -> usize {
    (record_count as usize).min(payload_bytes / RECORD_BYTES_MIN)
}

/// Uncompressed payload bytes a record adds to a frame.
pub(crate) fn record_payload_bytes(record: &CommitRecord<'_>) -> usize {
    RECORD_LEN_BYTES + record::envelope_bytes(record)
}

/// Encodes `records` (their commit times already final) as one frame whose
/// first record takes `base_offset`. With zstd, a payload that does not get
/// smaller is stored uncompressed.
///
/// # Errors
/// [`FrameError::TooLarge`] when the payload exceeds `frame_bytes_max`.
///
/// # Panics
/// If `records` is empty or holds more than `i32::MAX` records: callers
/// split commits into frames first.
pub fn encode_frame(
    records: &[CommitRecord<'_>],
    base_offset: u64,
    codec: Codec,
    level: CompressionLevel,
    frame_bytes_max: u32,
) -> Result<Vec<u8>, FrameError> {
    assert!(!records.is_empty(), "a frame holds at least one record");
    let record_count = u32::try_from(records.len())
        .ok()
        .filter(|&count| count <= i32::MAX as u32)
        .expect("frame record count fits an int32");
    let limit = frame_bytes_max.min(FRAME_BYTES_MAX);
    let payload_bytes: u64 = records.iter().map(|r| record_payload_bytes(r) as u64).sum();
    if payload_bytes > u64::from(limit) {
        return Err(FrameError::TooLarge {
            bytes: payload_bytes,
            limit,
        });
    }
    // The records are encoded in place after room for the header: a frame
    // stored uncompressed (the default) is then built with one allocation
    // and no copy of its payload.
    let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + payload_bytes as usize);
    frame.resize(FRAME_HEADER_BYTES, 0);
    for record in records {
        let envelope_bytes = record::envelope_bytes(record);
        frame.extend_from_slice(&(envelope_bytes as u32).to_be_bytes());
        record::encode_envelope(&mut frame, record);
    }
    let uncompressed_bytes = frame.len() - FRAME_HEADER_BYTES;
    assert_eq!(
        uncompressed_bytes as u64, payload_bytes,
        "payload size as planned"
    );
    let codec = match codec {
        Codec::Zstd => match zstd::bulk::compress(&frame[FRAME_HEADER_BYTES..], level.zstd_level())
        {
            Ok(compressed) if compressed.len() < uncompressed_bytes => {
                frame.truncate(FRAME_HEADER_BYTES);
                frame.extend_from_slice(&compressed);
                Codec::Zstd
            }
            // Incompressible, or the compressor failed: storing the payload
            // as it is is always valid.
            _ => Codec::None,
        },
        Codec::None => Codec::None,
    };
    let mut header = FrameHeader {
        codec,
        record_count,
        base_offset,
        uncompressed_bytes: uncompressed_bytes as u32,
        stored_bytes: (frame.len() - FRAME_HEADER_BYTES) as u32,
        crc: 0,
    };
    header.write(&mut frame);
    header.crc = frame_crc(&frame);
    header.write(&mut frame);
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_reservation_follows_the_payload_not_the_declared_count() {
        assert_eq!(records_capacity(u32::MAX, 0), 0);
        assert_eq!(records_capacity(1 << 26, 256 << 20), (256 << 20) / 14);
        assert_eq!(records_capacity(3, 1_000), 3);
    }

    fn records(count: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..count)
            .map(|i| {
                (
                    format!("key-{i}").into_bytes(),
                    format!("{{\"order\":{i},\"status\":\"paid\"}}").into_bytes(),
                )
            })
            .collect()
    }

    fn commit_records(raw: &[(Vec<u8>, Vec<u8>)]) -> Vec<CommitRecord<'_>> {
        raw.iter()
            .enumerate()
            .map(|(i, (key, payload))| CommitRecord::new(key, payload, 1_000 + i as u64))
            .collect()
    }

    /// `raw` as one uncompressed frame at `base_offset`.
    fn plain_frame(raw: &[(Vec<u8>, Vec<u8>)], base_offset: u64) -> Vec<u8> {
        encode_frame(
            &commit_records(raw),
            base_offset,
            Codec::None,
            CompressionLevel::Default,
            FRAME_BYTES_MAX,
        )
        .unwrap()
    }

    #[test]
    fn uncompressed_frame_round_trips() {
        let raw = records(3);
        let frame = plain_frame(&raw, 42);
        let (header, decoded) = decode_frame(&frame, FRAME_BYTES_MAX).unwrap();
        assert_eq!(header.codec, Codec::None);
        assert_eq!(header.base_offset, 42);
        assert_eq!(decoded.len(), 3);
        assert_eq!(decoded[2].offset, 44);
        assert_eq!(decoded[2].key, raw[2].0);
        assert_eq!(decoded[2].payload, raw[2].1);
        assert_eq!(decoded[2].committed_at_ms, 1_002);
    }

    #[test]
    fn zstd_frame_round_trips_at_every_level() {
        let raw = records(200);
        for level in [
            CompressionLevel::Fastest,
            CompressionLevel::Default,
            CompressionLevel::Better,
            CompressionLevel::Best,
        ] {
            let frame = encode_frame(
                &commit_records(&raw),
                7,
                Codec::Zstd,
                level,
                FRAME_BYTES_MAX,
            )
            .unwrap();
            let (header, decoded) = decode_frame(&frame, FRAME_BYTES_MAX).unwrap();
            assert_eq!(header.codec, Codec::Zstd);
            assert!(header.stored_bytes < header.uncompressed_bytes);
            let payloads: Vec<_> = decoded
                .iter()
                .map(|r| (r.key.clone(), r.payload.clone()))
                .collect();
            assert_eq!(payloads, raw);
        }
    }

    #[test]
    fn incompressible_payload_is_stored_uncompressed() {
        let payload = [0x5au8];
        let record = CommitRecord::new(b"", &payload, 1);
        let frame = encode_frame(
            &[record],
            0,
            Codec::Zstd,
            CompressionLevel::Default,
            FRAME_BYTES_MAX,
        )
        .unwrap();
        let (header, _) = decode_frame(&frame, FRAME_BYTES_MAX).unwrap();
        assert_eq!(header.codec, Codec::None);
    }

    #[test]
    fn header_layout_matches_the_format() {
        let raw = records(1);
        let frame = plain_frame(&raw, 0x0102_0304_0506);
        assert_eq!(&frame[0..2], &[0xCA, 0xFE]);
        assert_eq!(frame[2], 0);
        assert_eq!(&frame[3..7], &1u32.to_be_bytes());
        assert_eq!(&frame[7..15], &0x0102_0304_0506u64.to_be_bytes());
        let stored = frame.len() as u32 - FRAME_HEADER_BYTES as u32;
        assert_eq!(&frame[15..19], &stored.to_be_bytes());
        assert_eq!(&frame[19..23], &stored.to_be_bytes());
        let mut crc_input = frame[2..23].to_vec();
        crc_input.extend_from_slice(&frame[27..]);
        assert_eq!(&frame[23..27], &crc32c::crc32c(&crc_input).to_be_bytes());
        // Envelope: length prefix, version, key length, key, time, payload.
        let envelope_len = u32::from_be_bytes(frame[27..31].try_into().unwrap()) as usize;
        assert_eq!(envelope_len, frame.len() - 31);
        assert_eq!(frame[31], 0x02);
        assert_eq!(frame[32] as usize, raw[0].0.len());
    }

    #[test]
    fn every_flipped_byte_is_caught() {
        let raw = records(2);
        let frame = plain_frame(&raw, 9);
        for at in 0..frame.len() {
            let mut damaged = frame.clone();
            damaged[at] ^= 0x10;
            assert!(
                decode_frame(&damaged, FRAME_BYTES_MAX).is_err(),
                "flip at {at} decoded"
            );
        }
    }

    #[test]
    fn trailing_bytes_are_refused_by_decode_but_not_by_check() {
        let raw = records(1);
        let mut frame = plain_frame(&raw, 0);
        frame.push(0);
        assert!(check_frame(&frame, FRAME_BYTES_MAX).is_ok());
        assert_eq!(
            decode_frame(&frame, FRAME_BYTES_MAX),
            Err(FrameError::RecordStream("bytes after the frame"))
        );
    }

    #[test]
    fn frame_limit_is_checked_on_write_and_read() {
        let payload = vec![7u8; 2_000];
        let record = CommitRecord::new(b"", &payload, 0);
        assert!(matches!(
            encode_frame(&[record], 0, Codec::None, CompressionLevel::Default, 1_000),
            Err(FrameError::TooLarge { .. })
        ));
        let frame =
            encode_frame(&[record], 0, Codec::None, CompressionLevel::Default, 4_096).unwrap();
        assert!(matches!(
            check_frame(&frame, 1_000),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn reserved_flag_bits_are_refused() {
        let raw = records(1);
        let mut frame = plain_frame(&raw, 0);
        frame[2] |= 0x08;
        assert_eq!(
            FrameHeader::parse(&frame, FRAME_BYTES_MAX),
            Err(FrameError::Header("reserved flag bits are set"))
        );
    }

    #[test]
    fn short_input_is_truncated_not_a_panic() {
        let raw = records(1);
        let frame = plain_frame(&raw, 0);
        for len in 0..frame.len() {
            assert!(matches!(
                check_frame(&frame[..len], FRAME_BYTES_MAX),
                Err(FrameError::Truncated { .. })
            ));
        }
    }
}
