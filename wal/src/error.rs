//! Errors of the log.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// The error a fill function returns to refuse its record.
pub type FillError = Box<dyn std::error::Error + Send + Sync>;

/// The operation of the sync loop that failed and latched the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailedOp {
    /// Writing staged frames.
    Write,
    /// The fdatasync after a write.
    Sync,
    /// Sealing the active segment or creating the next one.
    Roll,
    /// The sync loop itself failed (a broken internal invariant).
    SyncLoop,
}

impl fmt::Display for FailedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Write => "write",
            Self::Sync => "fdatasync",
            Self::Roll => "segment roll",
            Self::SyncLoop => "sync loop",
        })
    }
}

/// The disk failure that latched the log, kept so that every later append
/// fails with the same error kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoFailure {
    /// What the sync loop was doing.
    pub op: FailedOp,
    /// The error kind the disk returned.
    pub kind: io::ErrorKind,
    /// The OS error number (`EIO`, `ENOSPC`), when there was one.
    pub raw_os_error: Option<i32>,
    /// The error's text.
    pub message: String,
}

impl IoFailure {
    pub(crate) fn new(op: FailedOp, error: &io::Error) -> Self {
        Self {
            op,
            kind: error.kind(),
            raw_os_error: error.raw_os_error(),
            message: error.to_string(),
        }
    }

    /// The failure as an `io::Error` of the same kind and OS error number.
    pub fn to_io_error(&self) -> io::Error {
        match self.raw_os_error {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(self.kind, self.message.clone()),
        }
    }
}

impl fmt::Display for IoFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WAL {} failed: {}", self.op, self.message)
    }
}

/// Errors of the ingress WAL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// A batch with no records; nothing was staged.
    #[error("WAL batch of no records")]
    EmptyBatch,
    /// A record payload of 0 bytes or over the limit; nothing was staged.
    #[error("WAL record of {len} bytes is outside 1..={max}")]
    RecordSize {
        /// The payload length asked for.
        len: usize,
        /// The log's record limit.
        max: usize,
    },
    /// The log is latched after a write or fdatasync failure (or this is the
    /// flush that failed). Every append fails until the log is reopened.
    #[error("{0}; the WAL refuses appends until it is reopened")]
    Failed(IoFailure),
    /// A produce record broke a field limit; nothing of its batch was
    /// staged.
    #[error("WAL record {index} of the batch is invalid: {source}")]
    Record {
        /// Position of the record in the batch.
        index: usize,
        /// What is wrong with it.
        #[source]
        source: crate::record::RecordError,
    },
    /// A fill function refused its record; the call's records were
    /// withdrawn and their sequence numbers given back.
    #[error("WAL fill failed: {0}")]
    Fill(#[source] FillError),
    /// A fill function panicked; handled as a failed fill.
    #[error("WAL fill panicked: {0}")]
    FillPanicked(String),
    /// The log was shut down.
    #[error("the WAL is closed")]
    Closed,
    /// Corruption found at open or by a reader: a loud error, never skipped.
    #[error("WAL corruption in {path} at offset {offset}: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the damage in that file.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A sequence number below the oldest segment (compacted) was asked for.
    #[error("WAL sequence {seq} was compacted (oldest segment starts at {oldest})")]
    Compacted {
        /// The sequence number asked for.
        seq: u64,
        /// Base of the oldest segment left.
        oldest: u64,
    },
    /// Options that break a rule of the log.
    #[error("invalid WAL options: {0}")]
    Options(String),
    /// An I/O error outside the append path (open, recovery, reading,
    /// compaction).
    #[error("WAL {op} on {path} failed: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The disk's error.
        #[source]
        source: io::Error,
    },
}

impl WalError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(
        path: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        Self::Corrupt {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }
}
