//! Retention on a data node (spec §5.6): one thread that, every check
//! interval (60 s by default), sweeps every partition log open here with
//! its topic's `retention_ms`.
//!
//! The partition log decides what goes (`PartitionLog::sweep_retention`:
//! whole sealed segments whose newest record is older than the retention,
//! and an idle, fully committed active segment past it). This loop only
//! pairs each open log with the retention its topic has now, so a `PATCH`
//! of `retention_ms` takes effect at the next pass. Each pass also sets the
//! log's roll age to the retention, so a busy active segment rolls before
//! its oldest record outlives it. A record therefore lives at least its
//! topic's retention and at most about twice that plus one interval.
//!
//! A log whose topic the replica no longer holds, or holds as another
//! incarnation, is left alone: the incarnation housekeeping retires it.
//! A sweep that fails or panics is logged and the pass goes on with the
//! next log. Readers already cope with what a sweep removes: a consume
//! below the oldest offset jumps to it, a replay gets `410`, a fan-out
//! cursor counts the records it skipped, and a move copying a segment
//! that retention removed at the source drops it from the copy.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::commit::LocalLogs;
use crate::ingress::now_unix_ms;
use crate::metadata::MetadataReplica;
use crate::metrics::{
    ERRORS_TOTAL, NodeMetrics, STORAGE_RETENTION_BYTES_DELETED_TOTAL,
    STORAGE_RETENTION_MESSAGES_DELETED_TOTAL, STORAGE_RETENTION_RUN_DURATION_SECONDS,
};

/// How often the open logs are swept (spec: about every 60 s;
/// `storage.retention_check_interval_ms`).
pub const RETENTION_CHECK_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);

/// The only deletion reason a data node has: age.
const REASON_AGE: &str = "age";

/// What the retention loop works on.
#[derive(Debug)]
pub(crate) struct RetentionParts {
    pub(crate) logs: Arc<LocalLogs>,
    pub(crate) replica: Arc<MetadataReplica>,
    pub(crate) metrics: Arc<NodeMetrics>,
}

/// What one pass did, over every log it swept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PassReport {
    /// Logs swept (a topic with retention 0 is not swept).
    pub(crate) swept: usize,
    /// Segments dropped from their logs.
    pub(crate) deleted_segments: usize,
    /// Offsets those segments held.
    pub(crate) deleted_messages: u64,
    /// Bytes unlinked.
    pub(crate) deleted_bytes: u64,
    /// Sweeps that failed or panicked.
    pub(crate) failed: usize,
}

/// Sweeps every open log once, at `now_ms` (Unix milliseconds, the clock
/// records are stamped with).
pub(crate) fn pass(parts: &RetentionParts, now_ms: u64) -> PassReport {
    let started = Instant::now();
    let mut report = PassReport::default();
    for (destination, opened_for) in parts.logs.open_destinations() {
        let Some(meta) = parts.replica.topic_meta(&destination.topic) else {
            continue;
        };
        if opened_for.is_some() && opened_for != meta.incarnation_id {
            continue;
        }
        let Some(log) = parts.logs.get(&destination) else {
            continue;
        };
        let labels = [
            ("topic", destination.topic.to_string()),
            ("partition", destination.partition.to_string()),
            ("reason", REASON_AGE.to_owned()),
        ];
        // Served at zero from the first pass that sees the log.
        parts
            .metrics
            .count(STORAGE_RETENTION_BYTES_DELETED_TOTAL, &labels, 0);
        parts
            .metrics
            .count(STORAGE_RETENTION_MESSAGES_DELETED_TOTAL, &labels, 0);
        log.set_roll_age_ms(meta.retention_ms);
        if meta.retention_ms == 0 {
            continue;
        }
        report.swept += 1;
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
            log.sweep_retention(now_ms, meta.retention_ms)
        }));
        match outcome {
            Ok(Ok(swept)) => {
                report.deleted_segments += swept.deleted.len();
                report.deleted_messages += swept.deleted_messages;
                report.deleted_bytes += swept.deleted_bytes;
                parts.metrics.count(
                    STORAGE_RETENTION_BYTES_DELETED_TOTAL,
                    &labels,
                    swept.deleted_bytes,
                );
                parts.metrics.count(
                    STORAGE_RETENTION_MESSAGES_DELETED_TOTAL,
                    &labels,
                    swept.deleted_messages,
                );
                if swept.unlink_failures > 0 {
                    parts.metrics.count(
                        ERRORS_TOTAL,
                        &[
                            ("component", "storage".to_owned()),
                            ("kind", "retention_unlink".to_owned()),
                        ],
                        swept.unlink_failures,
                    );
                }
            }
            Ok(Err(error)) => {
                report.failed += 1;
                tracing::warn!(%destination, %error, "retention sweep failed; tried again next pass");
            }
            Err(_) => {
                report.failed += 1;
                tracing::error!(%destination, "retention sweep panicked; skipped this pass");
            }
        }
    }
    parts.metrics.observe(
        STORAGE_RETENTION_RUN_DURATION_SECONDS,
        &[],
        started.elapsed(),
    );
    report
}

/// The running retention thread; stopped by [`Retention::stop`].
#[derive(Debug)]
pub(crate) struct Retention {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Retention {
    /// Starts the thread; its first pass runs one `interval` from now.
    ///
    /// # Errors
    /// The thread could not be started.
    pub(crate) fn spawn(parts: RetentionParts, interval: Duration) -> std::io::Result<Self> {
        parts
            .metrics
            .register_histogram(STORAGE_RETENTION_RUN_DURATION_SECONDS, &[]);
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("narad-retention".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    pass(&parts, now_unix_ms());
                }
            })?;
        Ok(Self { stop, thread })
    }

    /// Stops the thread and waits for it: at most for the sweep it is in.
    pub(crate) fn stop(self) {
        drop(self.stop);
        if self.thread.join().is_err() {
            tracing::error!("the retention thread panicked");
        }
    }
}

#[cfg(test)]
#[path = "retention_tests.rs"]
mod tests;
