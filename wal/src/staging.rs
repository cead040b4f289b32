//! The staging area: frames encoded in place, waiting for the sync loop.
//!
//! Staged frames sit in chunks. A chunk is one future write: whole frames,
//! contiguous in one segment, in one [`IoBuf`] of at most the staging buffer
//! size (or a single larger frame). The two pooled staging buffers are
//! used first; when both are busy (one being written, one full) further
//! chunks get fresh buffers. A chunk whose segment differs from the one
//! before it tells the sync loop to roll first.
//!
//! Everything here runs under the append lock and does no I/O.

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use narad_disk::IoBuf;

use crate::error::{FillError, IoFailure};
use crate::frame::{FRAME_HEADER_BYTES, frame_len, payload_crc, write_header};
use crate::notify::FlushSlot;

/// One future write.
#[derive(Debug)]
pub(crate) struct Chunk {
    /// Base of the segment it goes to.
    pub(crate) segment_base: u64,
    /// Offset in that segment of its first byte.
    pub(crate) offset: u64,
    /// The frames.
    pub(crate) buf: IoBuf,
    /// Whether `buf` is one of the two pooled buffers.
    pub(crate) pooled: bool,
    /// Sequence number of its first frame.
    pub(crate) first_seq: u64,
    /// Sequence number after its last frame.
    pub(crate) end_seq: u64,
    /// Completed once the chunk is durable (or failed).
    pub(crate) slot: Arc<FlushSlot>,
}

/// State behind the append lock.
#[derive(Debug)]
pub(crate) struct AppendState {
    /// The sequence number the next staged record takes.
    pub(crate) next_seq: u64,
    /// The segment the next frame goes to.
    pub(crate) stage_base: u64,
    /// End offset, in that segment, of everything written or staged.
    pub(crate) stage_end: u64,
    /// Chunks not yet taken by a flush, in order.
    pub(crate) chunks: VecDeque<Chunk>,
    /// Bytes in `chunks`.
    pub(crate) staged_bytes: usize,
    /// Pooled buffers not in use.
    pub(crate) free_pooled: Vec<IoBuf>,
    /// Set once a write or fdatasync failed; never cleared.
    pub(crate) latch: Option<IoFailure>,
    /// Set by shutdown.
    pub(crate) closed: bool,
    /// Set while someone holds the flush turn (`sync_loop::take_turn`).
    pub(crate) flushing: bool,
    /// Segment data capacity and staging buffer size, copied from options.
    pub(crate) segment_data_bytes: u64,
    pub(crate) staging_buffer_bytes: usize,
}

/// Where the staging area stood when a call began, so a failed fill can
/// withdraw exactly what the call staged.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mark {
    chunks: usize,
    last_len: Option<usize>,
    next_seq: u64,
    stage_base: u64,
    stage_end: u64,
    staged_bytes: usize,
}

/// Why staging one frame failed.
#[derive(Debug)]
pub(crate) enum StageFailure {
    Fill(FillError),
    Panicked(String),
}

impl AppendState {
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            chunks: self.chunks.len(),
            last_len: self.chunks.back().map(|c| c.buf.len()),
            next_seq: self.next_seq,
            stage_base: self.stage_base,
            stage_end: self.stage_end,
            staged_bytes: self.staged_bytes,
        }
    }

    /// Withdraws everything staged since `mark`, giving the sequence numbers
    /// back.
    pub(crate) fn rollback(&mut self, mark: Mark) {
        while self.chunks.len() > mark.chunks {
            if let Some(chunk) = self.chunks.pop_back() {
                self.recycle(chunk.buf, chunk.pooled);
            }
        }
        if let (Some(len), Some(last)) = (mark.last_len, self.chunks.back_mut()) {
            last.buf.truncate(len);
            last.end_seq = last.end_seq.min(mark.next_seq);
        }
        self.next_seq = mark.next_seq;
        self.stage_base = mark.stage_base;
        self.stage_end = mark.stage_end;
        self.staged_bytes = mark.staged_bytes;
    }

    /// Returns a buffer to the pool if it came from there.
    pub(crate) fn recycle(&mut self, mut buf: IoBuf, pooled: bool) {
        if pooled {
            buf.clear();
            self.free_pooled.push(buf);
        }
    }

    /// Stages one frame of `len` payload bytes, letting `fill` write the
    /// payload in place. Rolls to a new segment first when the frame does
    /// not fit the rest of the current one.
    ///
    /// On failure the frame is not staged, but frames staged before it in
    /// the same call are still there: the caller rolls back to its mark.
    pub(crate) fn stage_frame(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), FillError>,
    ) -> Result<(), StageFailure> {
        let frame = frame_len(len);
        if self.stage_end > 0 && self.stage_end + frame as u64 > self.segment_data_bytes {
            self.stage_base = self.next_seq;
            self.stage_end = 0;
        }
        let seq = self.next_seq;
        let chunk = self.chunk_for(frame);
        let start = chunk.buf.len();
        chunk.buf.extend_zeros(frame);
        let payload = &mut chunk.buf[start + FRAME_HEADER_BYTES..start + frame];
        let filled = panic::catch_unwind(AssertUnwindSafe(|| fill(payload)));
        let failure = match filled {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(StageFailure::Fill(error)),
            Err(panic) => Some(StageFailure::Panicked(panic_message(&*panic))),
        };
        if let Some(failure) = failure {
            chunk.buf.truncate(start);
            return Err(failure);
        }
        let crc = payload_crc(&chunk.buf[start + FRAME_HEADER_BYTES..start + frame]);
        write_header(&mut chunk.buf[start..], len, seq, crc);
        chunk.end_seq = seq + 1;
        self.next_seq = seq + 1;
        self.stage_end += frame as u64;
        self.staged_bytes += frame;
        Ok(())
    }

    /// The chunk the next frame of `frame` bytes goes into, opening a new one
    /// when the last is in another segment or has no room.
    fn chunk_for(&mut self, frame: usize) -> &mut Chunk {
        let fits = self.chunks.back().is_some_and(|last| {
            last.segment_base == self.stage_base
                && last.buf.len() + frame <= self.staging_buffer_bytes
                && frame <= last.buf.remaining()
        });
        if !fits {
            let (buf, pooled) = match self.free_pooled.pop() {
                Some(buf) if frame <= self.staging_buffer_bytes => (buf, true),
                other => {
                    if let Some(buf) = other {
                        self.free_pooled.push(buf);
                    }
                    (
                        IoBuf::with_capacity(frame.max(self.staging_buffer_bytes)),
                        false,
                    )
                }
            };
            self.chunks.push_back(Chunk {
                segment_base: self.stage_base,
                offset: self.stage_end,
                buf,
                pooled,
                first_seq: self.next_seq,
                end_seq: self.next_seq,
                slot: FlushSlot::new(),
            });
        }
        let last = self.chunks.back_mut().expect("a chunk was just ensured");
        assert_eq!(
            last.offset + last.buf.len() as u64,
            self.stage_end,
            "staged frames must be contiguous in their segment"
        );
        last
    }

    /// Stages a roll with no records: the next frame goes to a new segment
    /// starting at `next_seq`. Returns the slot completed once the roll is
    /// done.
    pub(crate) fn stage_rotation(&mut self) -> Arc<FlushSlot> {
        self.stage_base = self.next_seq;
        self.stage_end = 0;
        let slot = FlushSlot::new();
        self.chunks.push_back(Chunk {
            segment_base: self.stage_base,
            offset: 0,
            buf: IoBuf::with_capacity(0),
            pooled: false,
            first_seq: self.next_seq,
            end_seq: self.next_seq,
            slot: Arc::clone(&slot),
        });
        slot
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
