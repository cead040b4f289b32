//! Reads by offset and by range, below the high watermark only.
//!
//! A read finds the segment holding its first offset, asks the segment's
//! sparse index where to start, and walks frames forward. Frames that fail
//! their CRC are never decoded: their offsets come back as
//! [`ReadEntry::Unreadable`], which a consumer skips and counts. A disk
//! error fails only the read that hit it.

use std::ops::Range;
use std::sync::Arc;

use narad_disk::FileHandle;

use crate::error::LogError;
use crate::frame::{self, FrameHeader};
use crate::log::{PartitionLog, SealedSegment};
use crate::record::Record;
use crate::scan::{FrameScanner, ScanItem};
use crate::segment::{IndexEntry, SparseIndex};

/// Default bound on records per read.
pub const READ_RECORDS_MAX_DEFAULT: usize = 1_000;

/// Default bound on key and payload bytes per read.
pub const READ_BYTES_MAX_DEFAULT: usize = 8 << 20;

/// Entries a read from the segments makes room for at once, at most.
const SEGMENT_READ_ENTRIES_RESERVED_MAX: usize = 16_384;

/// How much one read may return. At least one entry comes back whenever
/// the range holds one, even if it alone exceeds `bytes_max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadLimits {
    /// Entries (records and unreadable stretches) at most.
    pub records_max: usize,
    /// Key plus payload bytes at most.
    pub bytes_max: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self {
            records_max: READ_RECORDS_MAX_DEFAULT,
            bytes_max: READ_BYTES_MAX_DEFAULT,
        }
    }
}

/// One entry of a read, in offset order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadEntry {
    /// A committed record whose frame passed its CRC and decoded.
    Record(Record),
    /// Offsets whose records cannot be served: damaged on disk, or a gap
    /// recovery left under later valid frames. Never retried into data.
    Unreadable {
        /// The offsets lost.
        offsets: Range<u64>,
    },
}

/// The result of a read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadBatch {
    /// Records and unreadable stretches, contiguous from the first offset
    /// asked for.
    pub entries: Vec<ReadEntry>,
    /// Where the next read should start.
    pub next_offset: u64,
}

/// Where a read of one segment starts and ends.
#[derive(Debug)]
struct SegmentView {
    file: FileHandle,
    start: IndexEntry,
    scan_end_bytes: u64,
    end_offset: u64,
}

impl PartitionLog {
    /// Reads from `from` up to `until` (exclusive), never at or past the
    /// high watermark, within `limits`.
    ///
    /// # Errors
    /// [`LogError::OffsetTrimmed`] when `from` was deleted by retention; a
    /// disk error reading a segment.
    pub fn read(&self, from: u64, until: u64, limits: ReadLimits) -> Result<ReadBatch, LogError> {
        let mut reader = Reader {
            entries: Vec::new(),
            next_offset: from,
            bytes: 0,
            limits,
        };
        if self.read_cached(&mut reader, until) {
            return Ok(reader.into_batch());
        }
        // A read from the segments is a long one as often as not: room for
        // its entries up front saves copying them as the vector doubles.
        reader
            .entries
            .reserve(limits.records_max.min(SEGMENT_READ_ENTRIES_RESERVED_MAX));
        while !reader.full() {
            let Some((view, high_watermark)) = self.locate(reader.next_offset)? else {
                break;
            };
            let bound = until.min(high_watermark).min(view.end_offset);
            if reader.next_offset >= bound {
                break;
            }
            reader.read_segment(&view, bound, self.config.frame_bytes_max)?;
            if reader.next_offset < bound {
                break;
            }
        }
        Ok(reader.into_batch())
    }

    /// [`PartitionLog::read`] without touching the disk: the batch when the
    /// tail cache holds `from`, or when `from` is at or past the high
    /// watermark (an empty batch); `None` when the read would go to the
    /// segments. Async callers read here first and take a `None` to a
    /// thread that may block.
    pub fn read_from_memory(&self, from: u64, until: u64, limits: ReadLimits) -> Option<ReadBatch> {
        let mut reader = Reader {
            entries: Vec::new(),
            next_offset: from,
            bytes: 0,
            limits,
        };
        self.read_cached(&mut reader, until)
            .then(|| reader.into_batch())
    }

    /// Serves a read from memory when the tail cache holds its first
    /// offset, or when it starts at or past the high watermark (nothing to
    /// return). The cache ends at the high watermark, so it then holds
    /// everything the read may return. Offsets below the oldest kept are
    /// left to the segments' path, which reports them trimmed.
    fn read_cached(&self, reader: &mut Reader, until: u64) -> bool {
        let table = self.table.read();
        let from = reader.next_offset;
        if from >= table.high_watermark {
            return true;
        }
        if from < table.oldest_offset() {
            return false;
        }
        let Some(records) = table.tail.records_from(from) else {
            return false;
        };
        reader.take_cached(records, until.min(table.high_watermark));
        true
    }

    /// Reads the one entry holding `offset`, or `None` at or above the high
    /// watermark.
    ///
    /// # Errors
    /// As [`PartitionLog::read`].
    pub fn read_record(&self, offset: u64) -> Result<Option<ReadEntry>, LogError> {
        let limits = ReadLimits {
            records_max: 1,
            bytes_max: 1,
        };
        let batch = self.read(offset, offset.saturating_add(1), limits)?;
        Ok(batch.entries.into_iter().next())
    }

    /// The segment holding `offset` and where to start in it, with the high
    /// watermark read under the same lock; `None` at or past the watermark.
    fn locate(&self, offset: u64) -> Result<Option<(SegmentView, u64)>, LogError> {
        let sealed = {
            let table = self.table.read();
            let high_watermark = table.high_watermark;
            if offset >= high_watermark {
                return Ok(None);
            }
            let oldest = table.oldest_offset();
            if offset < oldest {
                return Err(LogError::OffsetTrimmed { offset, oldest });
            }
            let after = table.sealed.partition_point(|s| s.base_offset <= offset);
            match after.checked_sub(1).map(|i| &table.sealed[i]) {
                Some(segment) if offset < segment.end_offset => {
                    (Arc::clone(segment), high_watermark)
                }
                _ => {
                    let active = &table.active;
                    let view = SegmentView {
                        file: active.file.clone(),
                        start: start_entry(&active.index, active.base_offset, offset),
                        scan_end_bytes: active.committed_bytes,
                        end_offset: high_watermark,
                    };
                    return Ok(Some((view, high_watermark)));
                }
            }
        };
        let (segment, high_watermark) = sealed;
        let start = match segment.index.get() {
            Some(index) => start_entry(index, segment.base_offset, offset),
            None => {
                let index = self.build_sealed_index(&segment)?;
                let start = start_entry(&index, segment.base_offset, offset);
                // Two readers may race to build it; both built the same.
                let _ = segment.index.set(index);
                start
            }
        };
        let view = SegmentView {
            file: segment.file.clone(),
            start,
            scan_end_bytes: segment.size_bytes,
            end_offset: segment.end_offset,
        };
        Ok(Some((view, high_watermark)))
    }

    /// Rebuilds a sealed segment's index by scanning it.
    pub(crate) fn build_sealed_index(
        &self,
        segment: &SealedSegment,
    ) -> Result<SparseIndex, LogError> {
        let mut index = SparseIndex::new(self.config.index_interval_bytes);
        let mut scanner = FrameScanner::new(
            &segment.file,
            0,
            segment.size_bytes,
            segment.base_offset,
            self.config.frame_bytes_max,
        );
        let mut last_frame = None;
        while let Some(item) = scanner
            .next_item()
            .map_err(LogError::io("scan a sealed segment"))?
        {
            match item {
                ScanItem::Frame {
                    position, header, ..
                } => {
                    index.note_frame(header.base_offset, position);
                    last_frame = Some((position, header));
                }
                ScanItem::Damaged {
                    position,
                    end_position,
                } => {
                    tracing::error!(
                        segment = %segment.path.display(),
                        position,
                        end_position,
                        "damaged bytes in a sealed partition log segment"
                    );
                }
            }
        }
        let last_write_ms = match last_frame {
            Some((position, header)) => {
                let bytes = scanner
                    .frame_again(position, &header)
                    .map_err(LogError::io("scan a sealed segment"))?;
                frame::decode_frame(bytes, self.config.frame_bytes_max)
                    .ok()
                    .and_then(|(_, records)| records.last().map(|r| r.committed_at_ms))
            }
            None => None,
        };
        let _ = segment.last_write_ms.set(last_write_ms);
        Ok(index)
    }
}

fn start_entry(index: &SparseIndex, base_offset: u64, offset: u64) -> IndexEntry {
    index.lookup(offset).unwrap_or(IndexEntry {
        base_offset,
        position: 0,
    })
}

/// A read in progress.
#[derive(Debug)]
struct Reader {
    entries: Vec<ReadEntry>,
    next_offset: u64,
    bytes: usize,
    limits: ReadLimits,
}

impl Reader {
    fn full(&self) -> bool {
        self.entries.len() >= self.limits.records_max.max(1)
            || (self.bytes >= self.limits.bytes_max && !self.entries.is_empty())
    }

    /// Reads one segment from the view's start until `bound` or a limit.
    fn read_segment(
        &mut self,
        view: &SegmentView,
        bound: u64,
        frame_bytes_max: u32,
    ) -> Result<(), LogError> {
        let mut scanner = FrameScanner::new(
            &view.file,
            view.start.position,
            view.scan_end_bytes,
            view.start.base_offset,
            frame_bytes_max,
        )
        .bounded();
        let mut expected = view.start.base_offset;
        while self.next_offset < bound && !self.full() {
            let Some(item) = scanner
                .next_item()
                .map_err(LogError::io("read a segment"))?
            else {
                // Nothing valid up to the segment's end: the rest of its
                // range is unreadable.
                self.unreadable(expected..view.end_offset, bound);
                break;
            };
            let ScanItem::Frame {
                position,
                header,
                bytes,
            } = item
            else {
                continue;
            };
            if header.base_offset > expected {
                self.unreadable(expected..header.base_offset, bound);
            }
            expected = header.end_offset();
            if expected <= self.next_offset || self.full() {
                continue;
            }
            // The scan checked this frame's CRC over exactly these bytes.
            match frame::decode_checked_frame(bytes, &header) {
                Ok(records) => {
                    self.take_records(records, bound);
                    let frame_end = position + header.frame_bytes();
                    scanner.expect_until(frame_end + self.bytes_still_wanted(&header, bound));
                }
                Err(error) => {
                    tracing::error!(segment = %view.file.path().display(), base_offset = header.base_offset, %error, "frame passed its CRC but does not decode");
                    self.unreadable(header.base_offset..expected, bound);
                }
            }
        }
        Ok(())
    }

    /// About how many more bytes of the file this read will take, sized
    /// by the frame of `header` it just took: the records still wanted at
    /// that frame's bytes per record, or the bytes still allowed at its
    /// ratio of file bytes to record bytes, whichever is fewer. It tells
    /// the scan how far to read ahead, so a read that stops at its limit
    /// leaves no chunk read for nothing.
    fn bytes_still_wanted(&self, header: &FrameHeader, bound: u64) -> u64 {
        let frame_bytes = header.frame_bytes();
        let per_record = frame_bytes.div_ceil(u64::from(header.record_count.max(1)));
        let records = (self.limits.records_max.max(1) as u64)
            .saturating_sub(self.entries.len() as u64)
            .min(bound.saturating_sub(self.next_offset));
        let allowed = self.limits.bytes_max.saturating_sub(self.bytes) as u64;
        let by_bytes = allowed
            .saturating_mul(frame_bytes)
            .checked_div(u64::from(header.uncompressed_bytes))
            .unwrap_or(u64::MAX);
        records
            .saturating_mul(per_record)
            .min(by_bytes.saturating_add(per_record))
    }

    fn into_batch(self) -> ReadBatch {
        ReadBatch {
            entries: self.entries,
            next_offset: self.next_offset,
        }
    }

    fn take_records(&mut self, records: Vec<Record>, bound: u64) {
        for record in records {
            if record.offset < self.next_offset {
                continue;
            }
            if !self.wants(record.offset, bound) {
                break;
            }
            self.take(record);
        }
    }

    /// Takes records from the tail cache, which start at `next_offset`.
    fn take_cached(&mut self, records: impl Iterator<Item = Record>, bound: u64) {
        for record in records {
            if !self.wants(record.offset, bound) {
                break;
            }
            self.take(record);
        }
    }

    fn wants(&self, offset: u64, bound: u64) -> bool {
        offset < bound && !self.full()
    }

    fn take(&mut self, record: Record) {
        assert_eq!(
            record.offset, self.next_offset,
            "records come back contiguous"
        );
        self.bytes += record.key.len() + record.payload.len();
        self.next_offset = record.offset + 1;
        self.entries.push(ReadEntry::Record(record));
    }

    fn unreadable(&mut self, offsets: Range<u64>, bound: u64) {
        let start = offsets.start.max(self.next_offset);
        let end = offsets.end.min(bound);
        if start >= end || self.full() {
            return;
        }
        assert_eq!(
            start, self.next_offset,
            "unreadable offsets come back contiguous"
        );
        self.next_offset = end;
        self.entries.push(ReadEntry::Unreadable {
            offsets: start..end,
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use narad_disk::portable::PortableDisk;

    use crate::{CommitRecord, LogConfig, PartitionLog};

    #[test]
    fn a_sealed_segment_index_rebuilt_from_the_file_equals_the_one_built_by_commits() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 4_096,
            frame_records_max: 3,
            index_interval_bytes: 200,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(
            Arc::new(PortableDisk::new(1).unwrap()),
            dir.path(),
            config,
            Arc::new(narad_clock::SystemClock::new()),
        )
        .unwrap();
        let payload = [b'p'; 40];
        let records = vec![CommitRecord::new(b"k", &payload, 1); 7];
        while log.table.read().sealed.is_empty() {
            log.commit_durable(&[&records]).unwrap();
        }
        let sealed = Arc::clone(&log.table.read().sealed[0]);
        let built_by_commits = sealed.index.get().unwrap().clone();
        assert!(
            built_by_commits.entries().len() > 2,
            "the segment must have several entries"
        );
        let rebuilt = log.build_sealed_index(&sealed).unwrap();
        assert_eq!(rebuilt, built_by_commits);
    }
}
