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
        let buf_end = self.buf_start + self.buf.len() as u64;
        if position < self.buf_start || position > buf_end {
            self.buf.clear();
            self.buf_start = position;
        } else if want_end > buf_end {
            // Keep only what is still ahead of us before reading more.
            let consumed = (position - self.buf_start) as usize;
            self.buf.drain(..consumed);
            self.buf_start = position;
        }
        let mut buf_end = self.buf_start + self.buf.len() as u64;
        if want_end > buf_end {
            while buf_end < want_end {
                let bytes = match self.ahead.take() {
                    Some(ahead) if ahead.position == buf_end => ahead.completion.wait()?,
                    _ => {
                        let read_len = (want_end - buf_end)
                            .max(self.chunk as u64)
                            .min(self.end - buf_end);
                        self.file.read_at(buf_end, read_len as usize).wait()?
                    }
                };
                self.note_read();
                if bytes.is_empty() {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "{} ended at {buf_end} inside the range being scanned",
                            self.file.path().display(),
                        ),
                    ));
                }
                buf_end += bytes.len() as u64;
                if self.buf.is_empty() {
                    // Nothing kept: take the read's buffer instead of
                    // copying it.
                    self.buf = bytes;
                } else {
                    self.buf.extend_from_slice(&bytes);
                }
            }
            if self.read_ahead && buf_end < self.end && self.ahead.is_none() {
                let read_len = (self.end - buf_end).min(self.chunk as u64);
                self.ahead = Some(ReadAhead {
                    position: buf_end,
                    completion: self.file.read_at(buf_end, read_len as usize),
                });
            }
        }
        let from = (position - self.buf_start) as usize;
        let to = (want_end - self.buf_start) as usize;
        Ok(&self.buf[from..to])
    }
}
