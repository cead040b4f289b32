//! The Narad partition log: the only place a message becomes visible.
//!
//! One [`PartitionLog`] owns one partition's directory: segment files of up
//! to 64 MiB named by their first offset, each a sequence of CRC-protected
//! frames of keyed-envelope records (layout in `docs/internals/plog.md`),
//! a sparse in-memory offset index per segment, and the `hwm` file written
//! at close.
//!
//! What it guarantees:
//! - a commit that returned `Ok` was written with one fdatasync, read back
//!   and checked frame by frame, and survives any crash with identical bytes;
//! - reads return only records below the high watermark, and never a record
//!   from a frame whose CRC failed: damaged records come back as
//!   [`ReadEntry::Unreadable`] offsets for the consumer to skip and count;
//! - a commit that returned an error left nothing: not visible now, not
//!   after a restart, and a retry lands on the same offsets;
//! - after a failed fdatasync the log is poisoned: commits fail until one
//!   heals it (the file cut back to the last commit, synced and read back;
//!   at most once per [`HEAL_RETRY_MS`]) or it is reopened, and reads of
//!   committed records keep working;
//! - commit times never go backwards along a partition within a process.
//!
//! What it does not do: combining commit batches from many callers (the
//! data plane's combiner drains them into one [`PartitionLog::commit_durable`]
//! call), consumer state, and deciding retention policy per topic (callers
//! pass `retention_ms`). All I/O goes through [`narad_disk::Disk`].

mod commit;
mod config;
mod dedupe;
mod error;
pub mod frame;
mod heal;
mod hwm;
pub mod inspect;
mod log;
mod read;
mod record;
mod recovery;
pub mod retention;
mod scan;
pub mod segment;
mod seq_ranges;
mod stored_keys;
mod tail;
mod transfer;
mod watch;

pub use commit::CommitOutcome;
pub use config::{
    COMMIT_BYTES_MAX_DEFAULT, FRAME_PAYLOAD_BYTES_TARGET_DEFAULT, FRAME_RECORDS_MAX_DEFAULT,
    INDEX_INTERVAL_BYTES_DEFAULT, LogConfig, PREPARE_ALIGN_BYTES, PREPARE_BYTES,
    PREPARED_WRITE_BYTES_MAX, SEGMENT_BYTES_DEFAULT, TAIL_CACHE_BYTES_DEFAULT,
};
pub use dedupe::{
    IDEMPOTENCY_KEYS_MAX, IDEMPOTENCY_WINDOW_MS_DEFAULT, ORIGIN_SEQS_MAX, ORIGINS_MAX,
    REBUILD_BYTES, REBUILD_RECORDS,
};
pub use error::{FrameError, LogError};
pub use frame::{Codec, CompressionLevel};
pub use heal::HEAL_RETRY_MS;
pub use hwm::HWM_FILE_NAME;
pub use log::{PartitionLog, PartitionStats};
pub use read::{
    READ_BYTES_MAX_DEFAULT, READ_RECORDS_MAX_DEFAULT, ReadBatch, ReadEntry, ReadLimits,
};
pub use record::{
    CommitRecord, ENVELOPE_VERSION, ENVELOPE_VERSION_PROVENANCE, IDEMPOTENCY_KEY_BYTES_MAX,
    ORIGIN_ID_BYTES, Origin, Record,
};
pub use retention::SweepReport;
pub use transfer::{SegmentExtent, TransferListing};
pub use watch::HwmWatch;
