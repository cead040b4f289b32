//! Walking the frames of a segment, resyncing past damage.
//!
//! Recovery, index rebuilds and reads all walk a segment the same way: read
//! ahead in chunks, accept a frame only if its header is in range, its CRC
//! passes and its base offset does not go backwards, and otherwise search
//! forward for the next `0xCAFE` that starts such a frame. Bytes skipped that
//! way are reported as damaged; the caller decides whether they are a torn
//! tail (nothing valid after them) or a gap.

use std::io;

use narad_disk::{Completion, FileHandle};

use crate::frame::{self, FRAME_HEADER_BYTES, FRAME_MAGIC, FrameHeader};

/// Most bytes read from the file at a time when a scan needs more.
pub(crate) const SCAN_CHUNK_BYTES: usize = 1 << 20;

/// First read of a bounded read (a consume or a replay): enough for the
/// index interval (4 KiB) in front of the wanted offset and a commit's
/// frame or a batch of records, without copying a megabyte to deliver one
/// message. Each further read doubles, up to [`SCAN_CHUNK_BYTES`].
pub(crate) const READ_FIRST_CHUNK_BYTES: usize = 64 << 10;

/// One step of a scan.
#[derive(Debug)]
pub(crate) enum ScanItem<'s> {
    /// A frame that passed its CRC; `bytes` is the whole frame, borrowed
    /// from the scan's buffer until the next step.
    Frame {
        position: u64,
        header: FrameHeader,
        bytes: &'s [u8],
    },
    /// Bytes `[position, end_position)` hold no valid frame. `end_position`
    /// is where the next valid frame starts, or the end of the scan.
    Damaged { position: u64, end_position: u64 },
}

/// A forward walk over the frames in `[start, end)` of one file.
#[derive(Debug)]
pub(crate) struct FrameScanner<'f> {
    file: &'f FileHandle,
    end: u64,
    position: u64,
    expected_offset: u64,
    frame_bytes_max: u32,
    buf: Vec<u8>,
    buf_start: u64,
    /// Bytes the next read from the file asks for at least.
    chunk: usize,
    /// Reads from the file so far.
    reads: u32,
    /// Whether to ask for the next chunk before it is needed: from the
    /// start for whole-segment walks, and once a bounded read came back for
    /// more (it is then a long read).
    read_ahead: bool,
    /// The next chunk, already asked of the disk, so it reads while the
    /// caller decodes.
    ahead: Option<ReadAhead>,
    /// Where the caller expects to stop ([`FrameScanner::expect_until`]):
    /// reads, and reads ahead, go no further than needed to get there.
    expect_end: u64,
}

#[derive(Debug)]
struct ReadAhead {
    position: u64,
    completion: Completion<Vec<u8>>,
}

impl<'f> FrameScanner<'f> {
    /// A scan of `[start, end)`, where the frame at `start` (if valid) has a
    /// base offset of at least `expected_offset`, that will walk all of it
    /// (recovery, index rebuilds): megabyte reads with one read ahead.
    pub(crate) fn new(
        file: &'f FileHandle,
        start: u64,
        end: u64,
        expected_offset: u64,
        frame_bytes_max: u32,
    ) -> Self {
        Self {
            file,
            end,
            position: start,
            expected_offset,
            frame_bytes_max,
            buf: Vec::new(),
            buf_start: start,
            chunk: SCAN_CHUNK_BYTES,
            reads: 0,
            read_ahead: true,
            ahead: None,
            expect_end: u64::MAX,
        }
    }

    /// Makes this the scan of a read that likely stops after a few frames:
    /// it reads [`READ_FIRST_CHUNK_BYTES`] first and doubles each time it
    /// needs more, and reads ahead only from its second read.
    pub(crate) fn bounded(self) -> Self {
        Self {
            chunk: READ_FIRST_CHUNK_BYTES,
            read_ahead: false,
            ..self
        }
    }

    /// Tells the scan that its caller expects to stop at about `position`
    /// in the file: reads, and reads ahead, then stop there instead of a
    /// whole chunk further. The scan still reads past it when asked to.
    pub(crate) fn expect_until(&mut self, position: u64) {
        self.expect_end = position;
    }

    /// The next frame or damaged stretch, or `None` at the end.
    ///
    /// # Errors
    /// A read error of the disk; the scan cannot go on past it.
    pub(crate) fn next_item(&mut self) -> io::Result<Option<ScanItem<'_>>> {
        if self.position >= self.end {
            return Ok(None);
        }
        let position = self.position;
        if let Some(header) = self.frame_at(position)? {
            self.position = position + header.frame_bytes();
            self.expected_offset = header.end_offset();
            // Still in the buffer: frame_at just checked these bytes there.
            let bytes = self.window(position, header.frame_bytes() as usize)?;
            return Ok(Some(ScanItem::Frame {
                position,
                header,
                bytes,
            }));
        }
        let end_position = self.resync(position + 1)?;
        self.position = end_position;
        Ok(Some(ScanItem::Damaged {
            position,
            end_position,
        }))
    }

    /// The bytes of a frame this scan returned earlier at `position`,
    /// read again if the buffer moved past them.
    ///
    /// # Errors
    /// A read error of the disk.
    pub(crate) fn frame_again(&mut self, position: u64, header: &FrameHeader) -> io::Result<&[u8]> {
        self.window(position, header.frame_bytes() as usize)
    }

    /// The header of the valid frame starting exactly at `position`, if
    /// there is one; its bytes are then in the buffer.
    fn frame_at(&mut self, position: u64) -> io::Result<Option<FrameHeader>> {
        let frame_bytes_max = self.frame_bytes_max;
        let head = self.window(position, FRAME_HEADER_BYTES)?;
        let Ok(header) = FrameHeader::parse(head, frame_bytes_max) else {
            return Ok(None);
        };
        if header.base_offset < self.expected_offset || position + header.frame_bytes() > self.end {
            return Ok(None);
        }
        let bytes = self.window(position, header.frame_bytes() as usize)?;
        if frame::check_frame(bytes, frame_bytes_max).is_err() {
            return Ok(None);
        }
        Ok(Some(header))
    }

    /// The position of the next valid frame at or after `from`, or the end.
    fn resync(&mut self, mut from: u64) -> io::Result<u64> {
        while from + FRAME_HEADER_BYTES as u64 <= self.end {
            let window = self.window(from, SCAN_CHUNK_BYTES)?;
            let found = window.windows(2).position(|pair| pair == FRAME_MAGIC);
            let Some(at) = found else {
                // Keep the last byte: it may be the first half of a magic.
                from += window.len().saturating_sub(1).max(1) as u64;
                continue;
            };
            let candidate = from + at as u64;
            if self.frame_at(candidate)?.is_some() {
                return Ok(candidate);
            }
            from = candidate + 1;
        }
        Ok(self.end)
    }

    /// After each read from the file: a bounded read that needed more than
    /// its first read is a long one, so it reads in doubling chunks and
    /// ahead from then on.
    fn note_read(&mut self) {
        if self.reads > 0 {
            self.read_ahead = true;
            self.chunk = (self.chunk * 2).min(SCAN_CHUNK_BYTES);
        }
        self.reads += 1;
    }

    /// Up to `len` bytes at `position`, fewer only at the end of the scan.
    fn window(&mut self, position: u64, len: usize) -> io::Result<&[u8]> {
        let want_end = (position + len as u64).min(self.end);
        if position < self.buf_start || want_end > self.buf_end() {
            self.refill(position, want_end)?;
        }
        let from = (position - self.buf_start) as usize;
        let to = (want_end - self.buf_start) as usize;
        Ok(&self.buf[from..to])
    }

    fn buf_end(&self) -> u64 {
        self.buf_start + self.buf.len() as u64
    }

    /// Makes the buffer hold `[position, want_end)`, then asks for the
    /// next chunk ahead if the scan reads ahead.
    ///
    /// Bytes are copied once, by the kernel, wherever that can be had: a
    /// read ahead that starts at a frame boundary at or before `position`
    /// becomes the buffer whole, and a read the scan has to wait for starts
    /// at `position` (reading again the little the buffer still held
    /// rather than copying the new chunk behind it). Only a read ahead that
    /// could not start at a frame boundary is appended to what is kept.
    fn refill(&mut self, position: u64, want_end: u64) -> io::Result<()> {
        let buf_end = self.buf_end();
        let in_buffer = self.buf_start <= position && position <= buf_end;
        if let Some(ahead) = self.ahead.take() {
            if in_buffer && self.buf_start <= ahead.position && ahead.position <= position {
                let bytes = ahead.completion.wait()?;
                self.replace(ahead.position, bytes)?;
            } else if in_buffer && ahead.position == buf_end {
                self.buf.drain(..(position - self.buf_start) as usize);
                self.buf_start = position;
                let bytes = ahead.completion.wait()?;
                self.append(bytes)?;
            }
            // Any other read ahead is of bytes the scan has left behind.
        }
        if position < self.buf_start || want_end > self.buf_end() {
            let read_len = self.read_len(position, want_end - position);
            let bytes = self.file.read_at(position, read_len as usize).wait()?;
            self.replace(position, bytes)?;
            // Shorter only where the file ends: the next read says so.
            while self.buf_end() < want_end {
                let from = self.buf_end();
                let bytes = self.file.read_at(from, (want_end - from) as usize).wait()?;
                self.append(bytes)?;
            }
        }
        if self.read_ahead && self.ahead.is_none() {
            let (from, frame_bytes) = self.next_frame_boundary(position);
            if self.buf_end() < self.expect_end.min(self.end) && from < self.end {
                // At least the frame that starts there, or the header that
                // says how long it is.
                let at_least =
                    frame_bytes.unwrap_or(self.buf_end() - from + FRAME_HEADER_BYTES as u64);
                let read_len = self.read_len(from, at_least);
                self.ahead = Some(ReadAhead {
                    position: from,
                    completion: self.file.read_at(from, read_len as usize),
                });
            }
        }
        Ok(())
    }

    /// How much to read at `from`: a chunk, or less when the caller
    /// expects to stop sooner ([`FrameScanner::expect_until`]), and never
    /// less than `at_least` or past the end of the scan.
    fn read_len(&self, from: u64, at_least: u64) -> u64 {
        let expected = self.expect_end.saturating_sub(from);
        (self.chunk as u64)
            .min(expected)
            .max(at_least)
            .max(FRAME_HEADER_BYTES as u64)
            .min(self.end - from)
    }

    /// Makes a read's bytes, from `from`, the buffer.
    fn replace(&mut self, from: u64, bytes: Vec<u8>) -> io::Result<()> {
        self.check_read(from, &bytes)?;
        self.buf = bytes;
        self.buf_start = from;
        Ok(())
    }

    /// Adds a read's bytes, from where the buffer ends, to the buffer.
    fn append(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        self.check_read(self.buf_end(), &bytes)?;
        if self.buf.is_empty() {
            self.buf = bytes;
        } else {
            self.buf.extend_from_slice(&bytes);
        }
        Ok(())
    }

    /// Counts a read from the file, and fails an empty one: the file ended
    /// inside the range being scanned.
    fn check_read(&mut self, from: u64, bytes: &[u8]) -> io::Result<()> {
        self.note_read();
        if bytes.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{} ended at {from} inside the range being scanned",
                    self.file.path().display(),
                ),
            ));
        }
        Ok(())
    }

    /// Where the first frame that does not fit whole in the buffer starts,
    /// walking headers from `position`, with its length when its header is
    /// in the buffer: the next read starts there, so that it becomes the
    /// buffer by itself. The end of the buffer when a header on the way
    /// does not parse (`position` is no frame boundary, or the bytes are
    /// damaged): the scan then checks them as usual.
    fn next_frame_boundary(&self, position: u64) -> (u64, Option<u64>) {
        let buf_end = self.buf_end();
        let mut at = position;
        loop {
            let from = (at - self.buf_start) as usize;
            let Some(head) = self.buf.get(from..from + FRAME_HEADER_BYTES) else {
                return (at, None);
            };
            let Ok(header) = FrameHeader::parse(head, self.frame_bytes_max) else {
                return (buf_end, None);
            };
            let next = at + header.frame_bytes();
            if next > buf_end {
                return (at, Some(header.frame_bytes()));
            }
            at = next;
        }
    }
}
