//! What the state machine's snapshots measured, kept in the store and read
//! when the node renders `narad_metastore_snapshot_bytes` and
//! `narad_metastore_snapshot_failures_total`.

use std::sync::atomic::{AtomicU64, Ordering};

/// The size of the last snapshot and the count of failed ones. Shared by
/// every clone of the state machine and its views.
#[derive(Debug, Default)]
pub struct SnapshotStats {
    /// Data bytes of the last snapshot built or installed (at open, of the
    /// one stored); 0 before any.
    bytes: AtomicU64,
    /// Builds that failed (the durable write) and installs that failed
    /// (data that does not decode or disagrees with its meta, or the
    /// durable write).
    failures: AtomicU64,
}

impl SnapshotStats {
    /// Notes the data size of a snapshot built, installed or found stored.
    pub(super) fn note_size(&self, bytes: usize) {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.bytes.store(bytes, Ordering::Relaxed);
    }

    /// Counts a build or an install that failed.
    pub(super) fn note_failure(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The data size of the last snapshot built or installed, 0 before any.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Builds and installs that failed since the store opened.
    pub fn failures_total(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}
