//! The settings of one log, with the constants of the seed and the spec as
//! defaults.

use crate::error::WalError;
use crate::frame::{FRAME_HEADER_BYTES, FRAME_PAYLOAD_BYTES_MAX};
use crate::segment::PREP_TRAILER_BYTES;

/// Segment size (64 MiB): large enough that rolls are rare, small enough
/// that compaction reclaims space in useful steps.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;

/// Each of the two staging buffers holds up to 4 MiB: a busy log reuses
/// them instead of allocating per flush.
pub const STAGING_BUFFER_BYTES_DEFAULT: usize = 4 * 1024 * 1024;

/// Bytes staged and not yet taken by the sync loop before appenders wait:
/// a bound on memory when the disk is slower than the producers.
pub const STAGED_BYTES_MAX_DEFAULT: usize = 64 * 1024 * 1024;

/// Largest run of frames written into a prepared segment between two
/// fdatasyncs (16 MiB), and so recovery's window for "a bad frame followed
/// by valid frames".
pub const PREP_RUN_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// A fully dispatched active segment is rotated once it holds this much
/// (1 MiB, `CompactRotateBytes`), so a lightly loaded WAL stays small.
pub const COMPACT_ROTATE_BYTES_DEFAULT: u64 = 1024 * 1024;

/// How a [`crate::Wal`] is laid out and paced. Every timing and size is
/// configurable so tests can use small segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalOptions {
    /// Size of a segment file, trailer included.
    pub segment_bytes: u64,
    /// Largest record payload; at most 16 MiB.
    pub record_bytes_max: usize,
    /// Capacity of each staging buffer; also the largest write of frames
    /// (a record larger than this goes in its own write).
    pub staging_buffer_bytes: usize,
    /// Bytes staged before appenders wait for the sync loop.
    pub staged_bytes_max: usize,
    /// Prepare the next segment off the append path
    /// (`storage.ingress_wal_prealloc`).
    pub prealloc: bool,
    /// Write prepared segments with `O_DIRECT` (`internals/wal.md`); plain
    /// segments always go through the page cache.
    pub direct_io: bool,
    /// Write limit stored in a prepared segment's trailer; at most 16 MiB.
    pub prep_run_bytes_max: u64,
    /// Rotate a fully dispatched active segment past this many bytes.
    pub compact_rotate_bytes: u64,
    /// Let an appender that finds nothing else staged and no flush under
    /// way write and sync its records itself, on its own thread, instead
    /// of handing them to the sync loop (see `internals/wal.md`). Such an
    /// append returns after the fdatasync, with its [`crate::Pending`]
    /// already complete.
    pub inline_flush: bool,
}

impl Default for WalOptions {
    fn default() -> Self {
        Self {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            record_bytes_max: FRAME_PAYLOAD_BYTES_MAX,
            staging_buffer_bytes: STAGING_BUFFER_BYTES_DEFAULT,
            staged_bytes_max: STAGED_BYTES_MAX_DEFAULT,
            prealloc: false,
            direct_io: true,
            prep_run_bytes_max: PREP_RUN_BYTES_MAX,
            compact_rotate_bytes: COMPACT_ROTATE_BYTES_DEFAULT,
            inline_flush: false,
        }
    }
}

const _: () = assert!(STAGING_BUFFER_BYTES_DEFAULT as u64 <= PREP_RUN_BYTES_MAX);
const _: () = assert!(
    (FRAME_HEADER_BYTES + FRAME_PAYLOAD_BYTES_MAX + PREP_TRAILER_BYTES) as u64
        <= SEGMENT_BYTES_DEFAULT
);

impl WalOptions {
    /// Bytes of frames a segment may hold: everything but the room kept for
    /// a preparation trailer (kept in every segment, so prepared and plain
    /// segments roll at the same point).
    pub fn segment_data_bytes(&self) -> u64 {
        self.segment_bytes - PREP_TRAILER_BYTES as u64
    }

    /// How much a fully dispatched active segment holds before compaction
    /// rotates it. With `prealloc` a segment takes its full size on disk
    /// whatever it holds, and each rotation costs a whole zero-filled spare,
    /// so rotation waits until the segment is half full, when the spare is
    /// asked for anyway; without it, `compact_rotate_bytes`.
    pub fn rotate_bytes(&self) -> u64 {
        if self.prealloc {
            self.compact_rotate_bytes.max(self.segment_bytes / 2)
        } else {
            self.compact_rotate_bytes
        }
    }

    /// Checks the relations the log relies on.
    ///
    /// # Errors
    /// [`WalError::Options`] naming the broken rule.
    pub fn validate(&self) -> Result<(), WalError> {
        let fail = |rule: &str| Err(WalError::Options(rule.to_string()));
        if self.record_bytes_max == 0 || self.record_bytes_max > FRAME_PAYLOAD_BYTES_MAX {
            return fail("record_bytes_max must be within 1..=16 MiB");
        }
        let frame_max = (FRAME_HEADER_BYTES + self.record_bytes_max) as u64;
        if self.segment_bytes < frame_max + PREP_TRAILER_BYTES as u64 {
            return fail("segment_bytes must hold the largest frame and the trailer");
        }
        if self.staging_buffer_bytes < FRAME_HEADER_BYTES + 1 {
            return fail("staging_buffer_bytes must hold a frame");
        }
        if self.prep_run_bytes_max == 0 || self.prep_run_bytes_max > PREP_RUN_BYTES_MAX {
            return fail("prep_run_bytes_max must be within 1..=16 MiB");
        }
        if self.staging_buffer_bytes as u64 > self.prep_run_bytes_max {
            return fail("staging_buffer_bytes must not exceed prep_run_bytes_max");
        }
        if self.staged_bytes_max < self.staging_buffer_bytes {
            return fail("staged_bytes_max must hold a staging buffer");
        }
        Ok(())
    }
}
