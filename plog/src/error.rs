//! Errors of the partition log.

use std::io;

/// Why an operation on a partition log failed.
///
/// A commit that returns any of these left nothing behind: no record of it
/// is visible now or after a restart, and a retry lands on the same offsets
/// (unless the log is poisoned, when later commits fail until one heals it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// An earlier fdatasync failed (or a failed commit could not be undone),
    /// so the log refuses commits until a commit heals it (its file cut back
    /// to the last commit, synced and read back; tried at most once per
    /// [`crate::HEAL_RETRY_MS`]) or it is reopened. Reads of committed
    /// records keep working.
    #[error(
        "the partition log is poisoned by an earlier fdatasync failure; commits are refused until it heals (retried at most once a second) or is reopened"
    )]
    Poisoned,
    /// The log was closed.
    #[error("the partition log is closed")]
    Closed,
    /// One record cannot fit a frame.
    #[error("a record of {bytes} bytes does not fit a frame of at most {limit} bytes")]
    RecordTooLarge {
        /// Payload bytes the record needs in a frame.
        bytes: u64,
        /// The frame limit in force.
        limit: u32,
    },
    /// The whole commit is larger than the limit.
    #[error("a commit of {bytes} bytes exceeds the limit of {limit} bytes")]
    CommitTooLarge {
        /// Payload bytes of the commit.
        bytes: u64,
        /// The limit in force.
        limit: u64,
    },
    /// The fdatasync of a commit failed; the log is now poisoned.
    #[error("fdatasync of the partition log failed; the log is poisoned: {0}")]
    SyncFailed(#[source] io::Error),
    /// A frame just written did not read back as written.
    #[error("frame at byte {position} did not read back as written: {reason}")]
    ReadBack {
        /// Byte position of the frame in the active segment.
        position: u64,
        /// What the check found.
        reason: String,
    },
    /// The offset was deleted by retention.
    #[error("offset {offset} is below the oldest retained offset {oldest}")]
    OffsetTrimmed {
        /// The offset asked for.
        offset: u64,
        /// The oldest offset the log still holds.
        oldest: u64,
    },
    /// The partition directory holds something the log cannot work with.
    #[error("partition log at {dir} is inconsistent: {reason}")]
    Inconsistent {
        /// The partition directory.
        dir: String,
        /// What is wrong.
        reason: String,
    },
    /// Any other disk error.
    #[error("{operation}: {source}")]
    Io {
        /// What the log was doing.
        operation: &'static str,
        /// The disk's error.
        #[source]
        source: io::Error,
    },
}

impl LogError {
    pub(crate) fn io(operation: &'static str) -> impl FnOnce(io::Error) -> Self {
        move |source| Self::Io { operation, source }
    }
}

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// Fewer bytes than the header, or than the header says the frame has.
    #[error("frame truncated: {have} of {need} bytes")]
    Truncated {
        /// Bytes available.
        have: u64,
        /// Bytes the frame needs.
        need: u64,
    },
    /// The first two bytes are not `0xCAFE`.
    #[error("bad frame magic")]
    Magic,
    /// A header field is out of its range.
    #[error("bad frame header: {0}")]
    Header(&'static str),
    /// A size exceeds the frame limit.
    #[error("frame of {bytes} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// The size found or asked for.
        bytes: u64,
        /// The limit in force.
        limit: u32,
    },
    /// The CRC does not match the header and stored payload.
    #[error("frame CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Crc {
        /// The CRC in the header.
        stored: u32,
        /// The CRC of the bytes as read.
        computed: u32,
    },
    /// The payload did not decompress to exactly its stated size.
    #[error("frame payload does not decode: {0}")]
    Codec(&'static str),
    /// The record stream inside the payload is malformed.
    #[error("bad record stream: {0}")]
    RecordStream(&'static str),
    /// A record's envelope is malformed.
    #[error("bad record envelope: {0}")]
    Envelope(&'static str),
}
