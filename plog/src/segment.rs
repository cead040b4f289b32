//! Segment files and their sparse offset index.
//!
//! A segment is named by the offset of its first record, zero-padded to 20
//! digits, with the suffix `.log`. The index maps a frame's base offset to
//! its byte position, one entry per `index_interval_bytes` of frames; it
//! lives in memory only and is rebuilt from the segment by a scan.

use std::path::{Path, PathBuf};

/// Suffix of every segment file.
pub const SEGMENT_SUFFIX: &str = ".log";

/// Digits of a segment name's offset.
const SEGMENT_NAME_DIGITS: usize = 20;

/// The file name of the segment whose first offset is `base_offset`.
pub fn segment_file_name(base_offset: u64) -> String {
    format!("{base_offset:020}{SEGMENT_SUFFIX}")
}

/// The path of that segment inside `dir`.
pub(crate) fn segment_path(dir: &Path, base_offset: u64) -> PathBuf {
    dir.join(segment_file_name(base_offset))
}

/// The base offset a segment file name stands for, or `None` for any other
/// file (the partition directory also holds `hwm` and consumer state).
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != SEGMENT_NAME_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// One index entry: a frame starting at `position` whose first record is
/// `base_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    /// The frame's first offset.
    pub base_offset: u64,
    /// The frame's byte position in its segment.
    pub position: u64,
}

/// A sparse map from offsets to frame positions in one segment.
///
/// Entries are strictly increasing in both fields; a lookup returns the
/// last entry at or below the offset, from where a read scans forward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SparseIndex {
    entries: Vec<IndexEntry>,
    interval_bytes: u64,
}

impl SparseIndex {
    /// An empty index adding an entry at most once per `interval_bytes`.
    pub fn new(interval_bytes: u64) -> Self {
        Self {
            entries: Vec::new(),
            interval_bytes: interval_bytes.max(1),
        }
    }

    /// Notes a valid frame. The first frame is always indexed, later ones
    /// once at least `interval_bytes` lie between them and the last entry.
    ///
    /// # Panics
    /// If the frame is not after the last entry in both offset and position:
    /// frames are noted in file order.
    pub fn note_frame(&mut self, base_offset: u64, position: u64) {
        if let Some(last) = self.entries.last() {
            assert!(
                base_offset > last.base_offset && position > last.position,
                "index entries must increase: {base_offset}@{position} after {last:?}"
            );
            if position - last.position < self.interval_bytes {
                return;
            }
        }
        self.entries.push(IndexEntry {
            base_offset,
            position,
        });
    }

    /// The last entry whose frame starts at or below `offset`, if any.
    pub fn lookup(&self, offset: u64) -> Option<IndexEntry> {
        let after = self
            .entries
            .partition_point(|entry| entry.base_offset <= offset);
        after.checked_sub(1).map(|index| self.entries[index])
    }

    /// Drops every entry at or past byte `position` (a truncated tail).
    pub fn truncate(&mut self, position: u64) {
        let keep = self
            .entries
            .partition_point(|entry| entry.position < position);
        self.entries.truncate(keep);
    }

    /// The entries, in file order.
    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_twenty_digits_of_the_first_offset() {
        assert_eq!(segment_file_name(450_832), "00000000000000450832.log");
        assert_eq!(
            parse_segment_file_name("00000000000000450832.log"),
            Some(450_832)
        );
        assert_eq!(
            parse_segment_file_name(&segment_file_name(u64::MAX)),
            Some(u64::MAX)
        );
    }

    #[test]
    fn other_files_are_not_segments() {
        for name in [
            "hwm",
            "consumer.offset",
            "0000000000000045083.log",
            "0000000000000045083x.log",
            "00000000000000450832.wal",
            "+0000000000000450832.log",
        ] {
            assert_eq!(parse_segment_file_name(name), None, "{name}");
        }
    }

    #[test]
    fn lookup_finds_the_last_entry_at_or_below_at_every_boundary() {
        let mut index = SparseIndex::new(1);
        // Frames of 10 records at positions 0, 100, 200.
        for frame in 0..3u64 {
            index.note_frame(1_000 + frame * 10, frame * 100);
        }
        assert_eq!(index.lookup(999), None);
        for offset in 1_000..1_040u64 {
            let entry = index.lookup(offset).unwrap();
            let frame = ((offset - 1_000) / 10).min(2);
            assert_eq!(entry.base_offset, 1_000 + frame * 10, "offset {offset}");
            assert_eq!(entry.position, frame * 100);
        }
    }

    #[test]
    fn sparse_entries_skip_frames_closer_than_the_interval() {
        let mut index = SparseIndex::new(250);
        for frame in 0..10u64 {
            index.note_frame(frame, frame * 100);
        }
        let positions: Vec<u64> = index.entries().iter().map(|e| e.position).collect();
        assert_eq!(positions, vec![0, 300, 600, 900]);
        assert_eq!(index.lookup(5).unwrap().position, 300);
    }

    #[test]
    fn truncate_drops_entries_at_and_past_the_cut() {
        let mut index = SparseIndex::new(1);
        for frame in 0..4u64 {
            index.note_frame(frame, frame * 100);
        }
        index.truncate(200);
        assert_eq!(index.entries().len(), 2);
        index.truncate(0);
        assert!(index.entries().is_empty());
    }

    #[test]
    #[should_panic(expected = "index entries must increase")]
    fn out_of_order_frames_are_a_programming_error() {
        let mut index = SparseIndex::new(1);
        index.note_frame(10, 100);
        index.note_frame(5, 200);
    }
}
