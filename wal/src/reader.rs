//! The dispatcher's reader: frames from a sequence number onward, as they
//! become durable.
//!
//! The reader never sees a record before the fdatasync that covers it
//! completed: it reads each segment only up to the durable end the sync loop
//! published. Every frame it yields has had its checksum and sequence number
//! checked again after the read. [`WalReader::skip_frame`] passes over a
//! record without reading its checksum or handing out its payload, for
//! records the dispatcher knows need no work; [`WalReader::seek`] jumps.
//!
//! When [`WalReader::next_frame`] returns `None` the reader has caught up;
//! wait on [`crate::DurableWatch`] for more.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use narad_disk::{FileHandle, OpenOptions};

use crate::error::WalError;
use crate::frame::{FRAME_HEADER_BYTES, FrameHeader, parse_header, payload_crc};
use crate::log::{Shared, oldest_base};
use crate::segment::segment_path;

/// Bytes read at a time (more when one frame is larger).
const READ_WINDOW_BYTES: usize = 1024 * 1024;

/// A position is remembered every this many frames, so a seek back (the
/// dispatcher re-reading skipped records) does not rescan a segment.
const SEEK_MARK_EVERY_FRAMES: u64 = 256;

/// Remembered positions kept at most; the oldest are forgotten first.
const SEEK_MARKS_MAX: usize = 4096;

/// One record as stored: its sequence number and its (opaque) payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The record's sequence number.
    pub seq: u64,
    /// The record payload, checksum verified.
    pub payload: &'a [u8],
}

/// Reads durable records in sequence order. Cheap to create; one per
/// consumer of the log.
#[derive(Debug)]
pub struct WalReader {
    shared: Arc<Shared>,
    segment_base: u64,
    file: Option<FileHandle>,
    /// Offset of the next frame in the segment.
    offset: u64,
    /// Sequence number of the next frame.
    next_seq: u64,
    /// Frames below this are passed over (a seek past the durable end).
    skip_below: u64,
    window: Vec<u8>,
    window_start: u64,
    marks: BTreeMap<u64, (u64, u64)>,
    /// A durable end of the reader's segment learnt from the segment table
    /// (0: none yet). A segment's durable end only grows and falls between
    /// frames, so the frames below it are read without asking the table
    /// (under its lock) again for each one.
    durable_known: u64,
}

impl WalReader {
    pub(crate) fn new(shared: Arc<Shared>, from_seq: u64) -> Result<Self, WalError> {
        let oldest = oldest_base(&shared);
        let mut reader = Self {
            shared,
            segment_base: oldest,
            file: None,
            offset: 0,
            next_seq: oldest,
            skip_below: oldest,
            window: Vec::new(),
            window_start: 0,
            marks: BTreeMap::new(),
            durable_known: 0,
        };
        reader.seek(from_seq)?;
        Ok(reader)
    }

    /// The sequence number of the next record [`WalReader::next_frame`]
    /// yields.
    pub fn next_seq(&self) -> u64 {
        self.next_seq.max(self.skip_below)
    }

    /// Positions the reader so the next record yielded is `seq` (forward or
    /// back). A `seq` past the durable end is fine: records below it are
    /// passed over as they become durable.
    ///
    /// # Errors
    /// [`WalError::Compacted`] when `seq` is below the oldest segment.
    pub fn seek(&mut self, seq: u64) -> Result<(), WalError> {
        let base = {
            let segments = self.shared.segments.lock();
            let oldest = *segments.keys().next().expect("a log always has a segment");
            if seq < oldest {
                return Err(WalError::Compacted { seq, oldest });
            }
            *segments
                .range(..=seq)
                .next_back()
                .map(|(base, _)| base)
                .expect("seq is at or above the oldest base")
        };
        let ahead_in_segment = base == self.segment_base && seq >= self.next_seq;
        if !ahead_in_segment {
            let mark = self
                .marks
                .range(..=seq)
                .next_back()
                .filter(|(_, (mark_base, _))| *mark_base == base)
                .map(|(&mark_seq, &(_, offset))| (mark_seq, offset));
            let (start_seq, offset) = mark.unwrap_or((base, 0));
            self.move_to(base, offset, start_seq);
        }
        self.skip_below = seq;
        Ok(())
    }

    /// The next durable record, or `None` once caught up.
    ///
    /// # Errors
    /// [`WalError::Corrupt`] when a frame fails its checks after the read,
    /// [`WalError::Compacted`] when the reader's segment was compacted away
    /// under it, or [`WalError::Io`].
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, WalError> {
        loop {
            let Some((header, at)) = self.next_header()? else {
                return Ok(None);
            };
            let frame_offset = self.offset;
            self.pass(&header, frame_offset);
            if header.seq < self.skip_below {
                continue;
            }
            let payload = &self.window[at + FRAME_HEADER_BYTES..at + header.frame_len()];
            let computed = payload_crc(payload);
            if computed != header.crc {
                return Err(WalError::corrupt(
                    segment_path(&self.shared.dir, self.segment_base),
                    frame_offset,
                    format!(
                        "payload CRC32C mismatch on read (stored {:#010x}, computed {computed:#010x})",
                        header.crc
                    ),
                ));
            }
            return Ok(Some(Frame {
                seq: header.seq,
                payload: &self.window[at + FRAME_HEADER_BYTES..at + header.frame_len()],
            }));
        }
    }

    /// Passes over the next durable record without checking its payload;
    /// returns its sequence number, or `None` once caught up.
    ///
    /// # Errors
    /// As [`WalReader::next_frame`].
    pub fn skip_frame(&mut self) -> Result<Option<u64>, WalError> {
        let Some((header, _)) = self.next_header()? else {
            return Ok(None);
        };
        let frame_offset = self.offset;
        self.pass(&header, frame_offset);
        Ok(Some(header.seq))
    }

    fn pass(&mut self, header: &FrameHeader, frame_offset: u64) {
        if header.seq.is_multiple_of(SEEK_MARK_EVERY_FRAMES) {
            self.marks
                .insert(header.seq, (self.segment_base, frame_offset));
            if self.marks.len() > SEEK_MARKS_MAX {
                self.marks.pop_first();
            }
        }
        self.offset = frame_offset + header.frame_len() as u64;
        self.next_seq = header.seq + 1;
    }

    fn move_to(&mut self, base: u64, offset: u64, seq: u64) {
        if base != self.segment_base {
            self.file = None;
        }
        self.segment_base = base;
        self.offset = offset;
        self.next_seq = seq;
        self.durable_known = 0;
        self.window.clear();
        self.window_start = offset;
    }

    /// Reads and checks the header of the next durable frame; returns it and
    /// where the frame starts in the window (the whole frame is in it).
    fn next_header(&mut self) -> Result<Option<(FrameHeader, usize)>, WalError> {
        if self.offset < self.durable_known {
            return self.header_at(self.durable_known).map(Some);
        }
        loop {
            let (durable_end, next_segment) = {
                let segments = self.shared.segments.lock();
                match segments.get(&self.segment_base) {
                    Some(&end) => {
                        let next = segments
                            .range(self.segment_base + 1..)
                            .next()
                            .map(|(&base, _)| base);
                        self.durable_known = end;
                        (end, next)
                    }
                    // The reader read its segment to the end, then
                    // compaction rotated and reclaimed it: the next segment
                    // starts at the reader's next record, so nothing it has
                    // not read is gone.
                    None if segments.contains_key(&self.next_seq) => {
                        (self.offset, Some(self.next_seq))
                    }
                    None => {
                        let oldest = segments.keys().next().copied().unwrap_or(self.next_seq);
                        return Err(WalError::Compacted {
                            seq: self.next_seq,
                            oldest,
                        });
                    }
                }
            };
            if self.offset < durable_end {
                return self.header_at(durable_end).map(Some);
            }
            let Some(next_base) = next_segment else {
                return Ok(None);
            };
            if next_base != self.next_seq {
                return Err(WalError::corrupt(
                    segment_path(&self.shared.dir, next_base),
                    0,
                    format!(
                        "segment starts at sequence {next_base} but the one before ends at {}",
                        self.next_seq
                    ),
                ));
            }
            self.move_to(next_base, 0, next_base);
        }
    }

    fn header_at(&mut self, durable_end: u64) -> Result<(FrameHeader, usize), WalError> {
        let at = self.ensure(self.offset, FRAME_HEADER_BYTES, durable_end)?;
        // The path names a fault only: made for one, not per frame.
        let path = || segment_path(&self.shared.dir, self.segment_base);
        let header = parse_header(&self.window[at..], self.shared.options.record_bytes_max)
            .map_err(|fault| WalError::corrupt(path(), self.offset, fault.to_string()))?;
        if header.seq != self.next_seq {
            return Err(WalError::corrupt(
                path(),
                self.offset,
                format!(
                    "frame has sequence {} where {} was expected",
                    header.seq, self.next_seq
                ),
            ));
        }
        if self.offset + header.frame_len() as u64 > durable_end {
            return Err(WalError::corrupt(
                path(),
                self.offset,
                "frame runs past the durable end of its segment",
            ));
        }
        let at = self.ensure(self.offset, header.frame_len(), durable_end)?;
        Ok((header, at))
    }

    /// Makes `[offset, offset + len)` of the segment present in the window
    /// and returns where it starts there.
    fn ensure(&mut self, offset: u64, len: usize, durable_end: u64) -> Result<usize, WalError> {
        let window_end = self.window_start + self.window.len() as u64;
        if offset >= self.window_start && offset + len as u64 <= window_end {
            return Ok((offset - self.window_start) as usize);
        }
        let max = len.max(READ_WINDOW_BYTES);
        let copied = self.shared.recent.lock().copy_from(
            self.segment_base,
            offset,
            durable_end,
            max,
            &mut self.window,
        );
        if copied >= len {
            self.shared.recent_reads.fetch_add(1, Ordering::Relaxed);
            self.window_start = offset;
            return Ok(0);
        }
        let path = segment_path(&self.shared.dir, self.segment_base);
        if self.file.is_none() {
            let file = self
                .shared
                .disk
                .open(&path, OpenOptions::EXISTING)
                .map_err(|e| WalError::io("open for reading", &path, e))?;
            self.file = Some(file);
        }
        let file = self.file.as_ref().expect("opened above");
        let available = (durable_end - offset) as usize;
        let read_len = len.max(READ_WINDOW_BYTES).min(available.max(len));
        let bytes = file
            .read_at(offset, read_len)
            .wait()
            .map_err(|e| WalError::io("read", &path, e))?;
        if bytes.len() < len {
            return Err(WalError::corrupt(
                &path,
                offset,
                "segment is shorter than its durable end",
            ));
        }
        self.window = bytes;
        self.window_start = offset;
        Ok(0)
    }
}
