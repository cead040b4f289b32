//! The partition store: the partition logs this node owns and everything
//! that decides where they live on disk and when they may be touched.
//!
//! - [`LocalLogs`] ([`logs`]): the registry of open partition logs, opened
//!   on first use and closed again after `storage.idle_log_eviction_ms`
//!   unused; the topic directories they live in.
//! - [`incarnation`]: which incarnation a topic directory holds, and the
//!   quarantine of a directory whose incarnation was replaced or deleted
//!   (`docs/internals/topic-directories.md`).
//! - [`freeze`]: the handoff freeze a move puts on a partition, and the
//!   fence file that makes it survive a restart.
//! - [`note`]: the small files a partition directory carries beside its
//!   log (the fence, a moved copy's `move.marker`), written whole and
//!   synced.
//! - [`retention`]: the thread that sweeps open logs by age, walks cold
//!   ones, asks their holders to let go of idle ones, and evicts them.
//! - [`poller`]: the thread that exports every owned partition's lag,
//!   oldest unconsumed age, size and segments, reading closed logs from
//!   their files.
//!
//! This room sits below the commit combiner, the consume service, fan-out,
//! moves and forwarding, which all take their logs from here; it knows none
//! of them. It does no waiting of its own: time comes from the node's
//! [`narad_clock::Clock`].

pub mod freeze;
pub mod incarnation;
mod logs;
pub mod note;
pub mod poller;
pub mod retention;

pub use incarnation::{MarkerToken, QuarantineStats, QuarantinedCopy, SweepReport, TopicDirError};
pub use logs::{LocalLogs, Retirement, partition_dir, topics_dir};
pub use poller::{Frontiers, PollerConfig};
pub use retention::{
    COLD_RETENTION_WALK_DEFAULT, IDLE_LOG_EVICTION_DEFAULT, LogHolders,
    RETENTION_CHECK_INTERVAL_DEFAULT, RetentionConfig,
};

#[cfg(test)]
mod eviction_tests;
#[cfg(test)]
mod incarnation_tests;
