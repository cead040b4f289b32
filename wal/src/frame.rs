//! The frame: how one record sits in a segment.
//!
//! ```text
//! offset  size  field
//!      0     4  magic "NWAL" (0x4e57414c)
//!      4     4  payload length, u32 BE, never 0, at most FRAME_PAYLOAD_BYTES_MAX
//!      8     8  sequence number, u64 BE
//!     16     4  CRC32C (Castagnoli) of the payload, u32 BE
//!     20     n  payload (opaque here; `record` defines it)
//! ```
//!
//! The checksum covers the payload only. The header fields are checked by
//! other means: the magic and the length bound catch garbage, and recovery
//! and the reader require every sequence number to be exactly the one after
//! the previous frame's, so a damaged sequence field is caught as a gap.

/// The four bytes every frame starts with.
pub const FRAME_MAGIC: [u8; 4] = *b"NWAL";

/// Bytes before the payload: magic, length, sequence number, checksum.
pub const FRAME_HEADER_BYTES: usize = 20;

/// The largest payload any frame may carry (16 MiB): the WAL record limit of
/// the seed and the spec. A per-log limit may be lower (tests), never higher.
pub const FRAME_PAYLOAD_BYTES_MAX: usize = 16 * 1024 * 1024;

const _: () = assert!(FRAME_HEADER_BYTES == FRAME_MAGIC.len() + 4 + 8 + 4);
const _: () = assert!(FRAME_PAYLOAD_BYTES_MAX <= u32::MAX as usize);
// A record that encodes must fit one frame, and no frame may carry more than
// a record can be: the two limits are one number.
const _: () = assert!(crate::record::RECORD_BYTES_MAX == FRAME_PAYLOAD_BYTES_MAX);

/// The decoded header of a frame whose magic and length bound checked out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload bytes that follow the header.
    pub payload_len: u32,
    /// The record's sequence number.
    pub seq: u64,
    /// CRC32C the payload must have.
    pub crc: u32,
}

impl FrameHeader {
    /// Header plus payload.
    pub fn frame_len(&self) -> usize {
        FRAME_HEADER_BYTES + self.payload_len as usize
    }
}

/// Why the bytes at some offset are not a whole, valid frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameFault {
    /// Fewer bytes remain than the header, or than the header announces.
    Short,
    /// The first four bytes are not the magic.
    BadMagic,
    /// The length is 0 or above the limit.
    BadLength(u32),
    /// The payload's checksum is not the one in the header.
    CrcMismatch {
        /// The checksum in the header.
        stored: u32,
        /// The checksum of the payload as read.
        computed: u32,
    },
}

impl std::fmt::Display for FrameFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Short => f.write_str("frame cut short"),
            Self::BadMagic => f.write_str("bad frame magic"),
            Self::BadLength(len) => write!(f, "bad frame payload length {len}"),
            Self::CrcMismatch { stored, computed } => write!(
                f,
                "payload CRC32C mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
        }
    }
}

/// Bytes a frame with a `payload_len`-byte payload takes.
pub fn frame_len(payload_len: usize) -> usize {
    FRAME_HEADER_BYTES + payload_len
}

/// CRC32C of a payload, as stored in its frame header.
pub fn payload_crc(payload: &[u8]) -> u32 {
    crc32c::crc32c(payload)
}

/// Writes a frame header into the first [`FRAME_HEADER_BYTES`] of `dst`.
///
/// # Panics
/// If `dst` is shorter than a header or the length breaks the frame rules:
/// the callers check sizes before staging, so this is a programmer error.
pub fn write_header(dst: &mut [u8], payload_len: usize, seq: u64, crc: u32) {
    assert!(
        payload_len > 0 && payload_len <= FRAME_PAYLOAD_BYTES_MAX,
        "frame payload length {payload_len} out of range"
    );
    let len = u32::try_from(payload_len).expect("payload length checked against a u32 bound");
    dst[0..4].copy_from_slice(&FRAME_MAGIC);
    dst[4..8].copy_from_slice(&len.to_be_bytes());
    dst[8..16].copy_from_slice(&seq.to_be_bytes());
    dst[16..20].copy_from_slice(&crc.to_be_bytes());
}

/// Encodes a whole frame into `dst` (appending). Used by tests and tools;
/// the log stages frames in place instead.
pub fn encode_frame(dst: &mut Vec<u8>, seq: u64, payload: &[u8]) {
    let start = dst.len();
    dst.resize(start + FRAME_HEADER_BYTES, 0);
    write_header(&mut dst[start..], payload.len(), seq, payload_crc(payload));
    dst.extend_from_slice(payload);
}

/// Parses the header at the start of `bytes`, checking the magic and that
/// the length is within `1..=payload_max`.
///
/// # Errors
/// [`FrameFault::Short`], [`FrameFault::BadMagic`] or
/// [`FrameFault::BadLength`].
pub fn parse_header(bytes: &[u8], payload_max: usize) -> Result<FrameHeader, FrameFault> {
    let Some(header) = bytes.get(..FRAME_HEADER_BYTES) else {
        return Err(FrameFault::Short);
    };
    if header[0..4] != FRAME_MAGIC {
        return Err(FrameFault::BadMagic);
    }
    let payload_len = u32::from_be_bytes(field(&header[4..8]));
    if payload_len == 0 || payload_len as usize > payload_max.min(FRAME_PAYLOAD_BYTES_MAX) {
        return Err(FrameFault::BadLength(payload_len));
    }
    Ok(FrameHeader {
        payload_len,
        seq: u64::from_be_bytes(field(&header[8..16])),
        crc: u32::from_be_bytes(field(&header[16..20])),
    })
}

/// Checks the whole frame at the start of `bytes`: header, length in range
/// and within `bytes`, payload checksum. Returns the header on success.
///
/// # Errors
/// The first [`FrameFault`] found.
pub fn check_frame(bytes: &[u8], payload_max: usize) -> Result<FrameHeader, FrameFault> {
    let header = parse_header(bytes, payload_max)?;
    let Some(payload) = bytes.get(FRAME_HEADER_BYTES..header.frame_len()) else {
        return Err(FrameFault::Short);
    };
    let computed = payload_crc(payload);
    if computed != header.crc {
        return Err(FrameFault::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok(header)
}

/// Offsets in `bytes[from..]` where a whole, valid frame starts (found by
/// looking for the magic at every byte and checking the frame there).
pub fn valid_frames_after(bytes: &[u8], from: usize, payload_max: usize) -> Vec<usize> {
    let mut found = Vec::new();
    let mut at = from;
    while let Some(rest) = bytes.get(at..) {
        let Some(hit) = rest
            .windows(FRAME_MAGIC.len())
            .position(|w| w == FRAME_MAGIC)
        else {
            break;
        };
        let offset = at + hit;
        if check_frame(&bytes[offset..], payload_max).is_ok() {
            found.push(offset);
        }
        at = offset + 1;
    }
    found
}

fn field<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_frame_checks_and_has_the_documented_layout() {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, 7, b"hello");
        assert_eq!(&bytes[0..4], b"NWAL");
        assert_eq!(&bytes[4..8], &5u32.to_be_bytes());
        assert_eq!(&bytes[8..16], &7u64.to_be_bytes());
        assert_eq!(&bytes[16..20], &crc32c::crc32c(b"hello").to_be_bytes());
        assert_eq!(&bytes[20..], b"hello");
        let header = check_frame(&bytes, FRAME_PAYLOAD_BYTES_MAX).unwrap();
        assert_eq!(header.seq, 7);
        assert_eq!(header.frame_len(), 25);
    }

    #[test]
    fn a_flipped_payload_bit_is_a_crc_mismatch() {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, 1, b"payload");
        bytes[22] ^= 1;
        assert!(matches!(
            check_frame(&bytes, FRAME_PAYLOAD_BYTES_MAX),
            Err(FrameFault::CrcMismatch { .. })
        ));
    }

    #[test]
    fn zero_and_oversized_lengths_are_refused() {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, 1, b"x");
        bytes[4..8].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(parse_header(&bytes, 100), Err(FrameFault::BadLength(0)));
        bytes[4..8].copy_from_slice(&101u32.to_be_bytes());
        assert_eq!(parse_header(&bytes, 100), Err(FrameFault::BadLength(101)));
    }

    #[test]
    fn a_cut_frame_is_short() {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, 1, b"abcdef");
        assert_eq!(
            check_frame(&bytes[..bytes.len() - 1], 100),
            Err(FrameFault::Short)
        );
        assert_eq!(check_frame(&bytes[..10], 100), Err(FrameFault::Short));
    }

    #[test]
    fn valid_frames_are_found_after_garbage() {
        let mut bytes = vec![0u8; 13];
        let first = bytes.len();
        encode_frame(&mut bytes, 3, b"abc");
        bytes.extend_from_slice(b"NWALjunk");
        let second = bytes.len();
        encode_frame(&mut bytes, 4, b"def");
        assert_eq!(valid_frames_after(&bytes, 0, 100), vec![first, second]);
        assert_eq!(valid_frames_after(&bytes, first + 1, 100), vec![second]);
    }
}
