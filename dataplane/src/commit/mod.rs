//! The commit stage on a partition's owner (seed, "Commit stage" and
//! "Commit combining"): the per-partition combiner turns every batch queued
//! for a partition into one `commit_durable` (one append, one fdatasync,
//! read back and CRC-checked, then visible), after re-checking under the
//! partition's produce lock that this node still owns the partition, that
//! each batch's incarnation is the live one, that no move handoff froze
//! the partition ([`crate::partitions::freeze`]), and that each caller still waits. [`LocalCommitTarget`] is how this node's dispatcher reaches it.

mod combiner;
mod local_target;

pub use combiner::{Combiners, CommitBatch, CommitError, CommitItem, Stored};
#[cfg(test)]
pub(crate) use local_target::commit_locally;
pub use local_target::{LOCAL_COMMIT_QUEUE_MAX, LOCAL_COMMIT_WORKERS, LocalCommitTarget};

#[cfg(test)]
mod tests;
