//! How a partition log is configured, with the named limits.

use crate::frame::{Codec, CompressionLevel, FRAME_BYTES_MAX};
pub use crate::tail::TAIL_CACHE_BYTES_DEFAULT;

/// Size at which the active segment rolls (lazily, before the next commit).
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;

/// Uncompressed payload a frame aims for; a single larger record gets a
/// frame of its own.
pub const FRAME_PAYLOAD_BYTES_TARGET_DEFAULT: usize = 1 << 20;

/// Records per frame at most.
pub const FRAME_RECORDS_MAX_DEFAULT: usize = 1_000;

/// Payload bytes one commit may carry.
pub const COMMIT_BYTES_MAX_DEFAULT: u64 = 256 << 20;

/// Bytes of frames between two sparse index entries.
pub const INDEX_INTERVAL_BYTES_DEFAULT: u64 = 4 << 10;

/// Zeros written and synced at a time ahead of the active segment's
/// committed bytes when preparation is on (`storage.partition_log_prealloc`),
/// so that a small commit overwrites blocks the file already has and its
/// fdatasync changes no metadata (on ext4 and XFS: no journal commit on the
/// path the commit waits for). See `commit::prepare_ahead`. Off by default:
/// on this project's VM it cut a lone commit's p50 by a fifth but no
/// end-to-end figure (docs/benchmarks.md).
pub const PREPARE_BYTES: u64 = 1 << 20;

/// Commits of at most this many bytes are written into prepared zeros;
/// larger ones are appended. It bounds how far apart a torn overwrite can
/// leave a hole and valid frames after it, which recovery relies on (see
/// `recovery`), so it is fixed, not configured.
pub const PREPARED_WRITE_BYTES_MAX: u64 = 1 << 20;

/// Prepared stretches end on this boundary (a file system block).
pub const PREPARE_ALIGN_BYTES: u64 = 4 << 10;

const _: () = assert!(FRAME_PAYLOAD_BYTES_TARGET_DEFAULT as u64 <= FRAME_BYTES_MAX as u64);
const _: () = assert!(FRAME_RECORDS_MAX_DEFAULT as u64 <= i32::MAX as u64);

/// Settings of one partition log. [`LogConfig::default`] is production's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// Segment size that triggers a roll (64 MiB; smaller in tests).
    pub segment_bytes: u64,
    /// `maxFrameBytes`: bound on a frame's stored and uncompressed sizes,
    /// on write and on read. At most [`FRAME_BYTES_MAX`].
    pub frame_bytes_max: u32,
    /// Uncompressed payload bytes a frame aims for.
    pub frame_payload_bytes_target: usize,
    /// Records per frame at most.
    pub frame_records_max: usize,
    /// Payload bytes per commit at most.
    pub commit_bytes_max: u64,
    /// Bytes between sparse index entries.
    pub index_interval_bytes: u64,
    /// How new frames are stored.
    pub codec: Codec,
    /// zstd effort when `codec` is zstd.
    pub compression_level: CompressionLevel,
    /// The active segment rolls before a commit that finds its oldest
    /// record older than this (the topic's retention); 0 never rolls by age.
    pub roll_age_ms: u64,
    /// Bytes of the newest records kept decoded in memory for reads
    /// (`tail` module); 0 keeps none.
    pub tail_cache_bytes: usize,
    /// Zeros prepared ahead of small commits in the active segment
    /// ([`PREPARE_BYTES`] when on); 0, the default, appends every commit to
    /// the end of the file.
    pub prepare_bytes: u64,
    /// Bytes of the newest records the provenance memory is rebuilt from
    /// after an open, rounded out to a segment ([`crate::REBUILD_BYTES`]).
    pub provenance_rebuild_bytes: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            frame_bytes_max: FRAME_BYTES_MAX,
            frame_payload_bytes_target: FRAME_PAYLOAD_BYTES_TARGET_DEFAULT,
            frame_records_max: FRAME_RECORDS_MAX_DEFAULT,
            commit_bytes_max: COMMIT_BYTES_MAX_DEFAULT,
            index_interval_bytes: INDEX_INTERVAL_BYTES_DEFAULT,
            codec: Codec::None,
            compression_level: CompressionLevel::Default,
            roll_age_ms: 0,
            tail_cache_bytes: TAIL_CACHE_BYTES_DEFAULT,
            prepare_bytes: 0,
            provenance_rebuild_bytes: crate::dedupe::REBUILD_BYTES,
        }
    }
}

impl LogConfig {
    /// Checks the relations between the settings.
    ///
    /// # Panics
    /// When a setting is zero or above its hard bound: configuration is
    /// validated before it reaches a log, so this is a programming error.
    pub(crate) fn assert_valid(&self) {
        assert!(self.segment_bytes > 0, "segment_bytes must be positive");
        assert!(
            self.frame_bytes_max > 0 && self.frame_bytes_max <= FRAME_BYTES_MAX,
            "frame_bytes_max must be in 1..={FRAME_BYTES_MAX}"
        );
        assert!(
            self.frame_records_max > 0 && self.frame_records_max as u64 <= i32::MAX as u64,
            "frame_records_max out of range"
        );
        assert!(
            self.frame_payload_bytes_target as u64 <= u64::from(self.frame_bytes_max),
            "frame_payload_bytes_target must not exceed frame_bytes_max"
        );
        assert!(
            self.frame_payload_bytes_target > 0,
            "frame_payload_bytes_target must be positive"
        );
        assert!(
            self.commit_bytes_max > 0,
            "commit_bytes_max must be positive"
        );
    }
}
