//! Where the consume service reads partition logs.
//!
//! Consumes, settles and the pump run on Tokio's async workers, and a
//! worker must not wait for the disk. So every read is tried in memory
//! first: a read the tail cache serves runs inline, with no extra hop on
//! the hot path. A read that would go to the segments (and the first open
//! of a partition, which reads its files) stops the work where it is; the
//! work then resumes on Tokio's blocking pool, where it may read the disk.
//! The work keeps its place across the hop (the leases it took, the
//! partition it was reading), so what it reserves, and in which order, is
//! the same wherever it runs.

use narad_plog::{LogError, PartitionLog, ReadBatch, ReadLimits};

/// Where a piece of work may read the partition log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reads {
    /// On an async worker: only what the tail cache serves. A read that
    /// needs the disk stops the work with [`NeedsDisk`].
    Memory,
    /// On a thread that may block: anything.
    Disk,
}

/// The work stopped at a read that needs the disk; it keeps its place and
/// resumes on the blocking pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct NeedsDisk;

/// [`PartitionLog::read`] as `reads` allows: `None` when it would need the
/// disk and only memory may be read.
pub(super) fn read(
    log: &PartitionLog,
    from: u64,
    until: u64,
    limits: ReadLimits,
    reads: Reads,
) -> Result<Result<ReadBatch, LogError>, NeedsDisk> {
    match reads {
        Reads::Memory => log
            .read_from_memory(from, until, limits)
            .map(Ok)
            .ok_or(NeedsDisk),
        Reads::Disk => Ok(log.read(from, until, limits)),
    }
}
