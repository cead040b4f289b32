//! Writes into prepared segments with `O_DIRECT`.
//!
//! A prepared segment's blocks are allocated and already hold zeros, so a
//! write into it changes no file metadata. Opened with `O_DIRECT`, such a
//! write bypasses the page cache: no dirty pages for writeback, no copy into
//! the cache, and on io_uring it completes without the kernel's io-wq
//! workers; its durability comes from `RWF_DSYNC` or one fdatasync (the disk
//! backend's choice, `narad_disk::uring::DirectSync`).
//!
//! `O_DIRECT` needs offsets and lengths in whole 4 KiB blocks, and chunks end
//! anywhere. So a write starts at the block the segment's data ends in:
//! it repeats the bytes of that block already written (the *tail*, at most
//! 4,095 bytes kept here), then the chunk's frames, then pads to the next
//! block boundary with what the prepared file already holds there (zeros, and
//! the trailer in the segment's last block).
//!
//! Why rewriting durable bytes is safe: they are rewritten with the same
//! bytes. A crash that tears the write leaves each 512-byte sector old or
//! new, and old and new agree everywhere before the chunk's first frame and
//! in the padding. Only the chunk's own frames can be torn, as with any
//! write; recovery cuts them as it always did. Recovery also still sees the
//! data end where the frames end: the padding is zeros, the prepared
//! segment's free space.

use narad_disk::{IO_ALIGN, IoBuf};

use crate::segment::{PREP_TRAILER_BYTES, prep_trailer};

/// What the sync loop keeps to write the next chunk of a prepared segment
/// opened with `O_DIRECT`.
#[derive(Debug)]
pub(crate) struct DirectTail {
    /// The written bytes of the block the data ends in: `end % 4096` bytes.
    tail: Vec<u8>,
    /// The trailer the segment ends in, reproduced by a write that pads into
    /// the last block.
    trailer: [u8; PREP_TRAILER_BYTES],
    segment_bytes: u64,
}

impl DirectTail {
    /// The tail of a prepared segment of `segment_bytes` whose data ends at
    /// `end`, given the bytes of its last partial block (`end % 4096` of
    /// them) and the write limit its trailer holds.
    pub(crate) fn new(tail: Vec<u8>, end: u64, write_limit: u64, segment_bytes: u64) -> Self {
        assert_eq!(
            tail.len() as u64,
            end % IO_ALIGN as u64,
            "the tail is the data's last partial block"
        );
        Self {
            tail,
            trailer: prep_trailer(write_limit),
            segment_bytes,
        }
    }

    /// Whether a prepared segment of this size can be written with `O_DIRECT`:
    /// its end must fall on a block boundary, or the last write would extend
    /// the file past its trailer.
    pub(crate) fn fits(segment_bytes: u64) -> bool {
        segment_bytes.is_multiple_of(IO_ALIGN as u64)
    }

    /// Fills `out` with the aligned write that puts `frames` at `offset`
    /// (the segment's data end) and returns the offset it starts at.
    pub(crate) fn fill(&self, offset: u64, frames: &[u8], out: &mut IoBuf) -> u64 {
        let lead = self.tail.len() as u64;
        assert_eq!(
            offset % IO_ALIGN as u64,
            lead,
            "a chunk starts where the data ends"
        );
        let start = offset - lead;
        let end = offset + frames.len() as u64;
        let padded_end = end.next_multiple_of(IO_ALIGN as u64);
        assert!(
            padded_end <= self.segment_bytes,
            "a write stays inside its segment"
        );
        out.clear();
        out.extend_from_slice(&self.tail);
        out.extend_from_slice(frames);
        out.extend_zeros((padded_end - end) as usize);
        let trailer_at = self.segment_bytes - PREP_TRAILER_BYTES as u64;
        if padded_end > trailer_at {
            // Frames never reach into the trailer (a segment keeps its last
            // 16 bytes free), so only padding is overwritten here.
            let from = (trailer_at - start) as usize;
            out[from..].copy_from_slice(&self.trailer);
        }
        start
    }

    /// Records that `out`, filled by [`Self::fill`] and starting at `start`,
    /// is durable and the data now ends at `end`.
    pub(crate) fn written(&mut self, start: u64, out: &[u8], end: u64) {
        let block = end - end % IO_ALIGN as u64;
        self.tail.clear();
        self.tail
            .extend_from_slice(&out[(block - start) as usize..(end - start) as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEGMENT: u64 = 4 * IO_ALIGN as u64;

    fn write(tail: &mut DirectTail, offset: u64, frames: &[u8]) -> (u64, Vec<u8>) {
        let mut out = IoBuf::with_capacity(SEGMENT as usize);
        let start = tail.fill(offset, frames, &mut out);
        tail.written(start, &out, offset + frames.len() as u64);
        (start, out.to_vec())
    }

    #[test]
    fn a_write_repeats_the_partial_block_and_pads_it_with_zeros() {
        let mut tail = DirectTail::new(Vec::new(), 0, 1024, SEGMENT);
        let (start, out) = write(&mut tail, 0, &[1; 100]);
        assert_eq!(start, 0);
        assert_eq!(out.len(), IO_ALIGN);
        assert_eq!(&out[..100], &[1; 100]);
        assert!(out[100..].iter().all(|&b| b == 0));

        let (start, out) = write(&mut tail, 100, &[2; 5000]);
        assert_eq!(start, 0);
        assert_eq!(out.len(), 2 * IO_ALIGN);
        assert_eq!(
            &out[..100],
            &[1; 100],
            "durable bytes are rewritten as they are"
        );
        assert_eq!(&out[100..5100], &[2; 5000]);
        assert!(out[5100..].iter().all(|&b| b == 0));

        let (start, out) = write(&mut tail, 5100, &[3; 10]);
        assert_eq!(start, IO_ALIGN as u64);
        assert_eq!(&out[..5100 - IO_ALIGN], &[2; 5100 - IO_ALIGN]);
        assert_eq!(&out[5100 - IO_ALIGN..5110 - IO_ALIGN], &[3; 10]);
    }

    #[test]
    fn a_write_ending_on_a_block_boundary_leaves_no_tail() {
        let mut tail = DirectTail::new(Vec::new(), 0, 1024, SEGMENT);
        let (_, out) = write(&mut tail, 0, &[7; IO_ALIGN]);
        assert_eq!(out.len(), IO_ALIGN);
        let (start, out) = write(&mut tail, IO_ALIGN as u64, &[8; 1]);
        assert_eq!(start, IO_ALIGN as u64);
        assert_eq!(out[0], 8);
    }

    #[test]
    fn padding_into_the_last_block_keeps_the_trailer() {
        let data_end = SEGMENT - PREP_TRAILER_BYTES as u64;
        let start_at = data_end - 200;
        let block = start_at - start_at % IO_ALIGN as u64;
        let old: Vec<u8> = vec![9; (start_at - block) as usize];
        let tail = DirectTail::new(old, start_at, 1024, SEGMENT);
        let mut out = IoBuf::with_capacity(SEGMENT as usize);
        let start = tail.fill(start_at, &[5; 100], &mut out);
        assert_eq!(start + out.len() as u64, SEGMENT);
        assert_eq!(&out[out.len() - PREP_TRAILER_BYTES..], &prep_trailer(1024));
        let frames_end = (start_at + 100 - start) as usize;
        assert!(
            out[frames_end..out.len() - PREP_TRAILER_BYTES]
                .iter()
                .all(|&b| b == 0)
        );
    }

    #[test]
    fn only_block_multiples_take_direct_writes() {
        assert!(DirectTail::fits(64 << 20));
        assert!(!DirectTail::fits(10_000));
    }
}
