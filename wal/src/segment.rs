//! Segment files: names, the preparation trailer, and where data may go.
//!
//! A segment is `<base seq, 20 digits>.wal` and holds frames with dense
//! sequence numbers starting at its base. A prepared segment is zero-filled
//! to its full size and ends in a 16-byte trailer:
//!
//! ```text
//! offset            size  field
//! size - 16            8  "NWPREP01"
//! size - 8             8  write limit, u64 BE: the largest run of frames
//!                         written between two fdatasyncs (recovery's window)
//! ```

use std::path::{Path, PathBuf};

/// Suffix of every segment file.
pub const SEGMENT_SUFFIX: &str = ".wal";

/// Digits of the base sequence number in a segment's name (a u64 fits 20).
pub const SEGMENT_NAME_DIGITS: usize = 20;

/// Name of the spare segment being prepared or ready for the next roll.
pub const PREP_FILE_NAME: &str = "next-segment.prep";

/// Magic of the preparation trailer.
pub const PREP_TRAILER_MAGIC: [u8; 8] = *b"NWPREP01";

/// Bytes of the preparation trailer: magic and the write limit.
pub const PREP_TRAILER_BYTES: usize = 16;

const _: () = assert!(PREP_TRAILER_BYTES == PREP_TRAILER_MAGIC.len() + 8);
const _: () = assert!(u64::MAX.ilog10() as usize + 1 == SEGMENT_NAME_DIGITS);

/// The file name of the segment whose first record is `base`.
pub fn segment_name(base: u64) -> String {
    format!(
        "{base:0width$}{SEGMENT_SUFFIX}",
        width = SEGMENT_NAME_DIGITS
    )
}

/// The path of the segment whose first record is `base`.
pub fn segment_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(segment_name(base))
}

/// The base sequence number a segment file name stands for, or `None` if the
/// name is not exactly 20 digits and the suffix.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != SEGMENT_NAME_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The trailer a prepared segment ends in.
pub fn prep_trailer(write_limit: u64) -> [u8; PREP_TRAILER_BYTES] {
    let mut trailer = [0u8; PREP_TRAILER_BYTES];
    trailer[..8].copy_from_slice(&PREP_TRAILER_MAGIC);
    trailer[8..].copy_from_slice(&write_limit.to_be_bytes());
    trailer
}

/// The write limit of a segment that ends in a valid preparation trailer,
/// or `None`. A limit of 0 or above `limit_max` is not a valid trailer.
pub fn parse_prep_trailer(file: &[u8], limit_max: u64) -> Option<u64> {
    let start = file.len().checked_sub(PREP_TRAILER_BYTES)?;
    let trailer = &file[start..];
    if trailer[..8] != PREP_TRAILER_MAGIC {
        return None;
    }
    let mut limit = [0u8; 8];
    limit.copy_from_slice(&trailer[8..]);
    let limit = u64::from_be_bytes(limit);
    (limit > 0 && limit <= limit_max).then_some(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_twenty_digits_and_parse_back() {
        assert_eq!(segment_name(42), "00000000000000000042.wal");
        assert_eq!(parse_segment_name("00000000000000000042.wal"), Some(42));
        assert_eq!(segment_name(u64::MAX).len(), 24);
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
    }

    #[test]
    fn other_names_are_not_segments() {
        assert_eq!(parse_segment_name("42.wal"), None);
        assert_eq!(parse_segment_name("0000000000000000004x.wal"), None);
        assert_eq!(parse_segment_name(PREP_FILE_NAME), None);
        assert_eq!(parse_segment_name("checkpoint"), None);
    }

    #[test]
    fn a_trailer_parses_only_with_its_magic_and_a_sane_limit() {
        let mut file = vec![0u8; 100];
        file.extend_from_slice(&prep_trailer(4096));
        assert_eq!(parse_prep_trailer(&file, 1 << 24), Some(4096));
        assert_eq!(parse_prep_trailer(&file, 1024), None);
        file.extend_from_slice(&prep_trailer(0));
        assert_eq!(parse_prep_trailer(&file, 1 << 24), None);
        assert_eq!(parse_prep_trailer(&[0u8; 10], 1 << 24), None);
    }
}
