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
//! Logs open only once something touched them (a produce, a consume, a
//! replay), so after a restart an idle partition would never be swept.
//! Every cold-walk interval (300 s by default, and at the first pass) a
//! pass first opens each partition this node owns whose log is not open
//! and whose oldest segment file was modified longer than the retention
//! ago; the pass then sweeps it with the others.
//!
//! After each pass the thread first asks the log holders to let go of what
//! they no longer use ([`LogHolders`]: the consume service releases the
//! shards idle for `consume.idle_shard_release_ms`, 10 minutes by default),
//! then closes the logs that nobody holds and nobody used for
//! `storage.idle_log_eviction_ms` (30 minutes by default), so open logs do
//! not pile up: the next produce, consume or replay opens such a log again.
//! Eviction runs after the sweep, never during it. A log a consume shard
//! or a fan-out cursor holds stays open. A log the cold walk opened counts
//! as unused, so the pass that swept it closes it again.
//!
//! The thread is supervised: a panic that escapes a pass (the sweeps and
//! the cold walk catch their own) restarts the loop, which waits one check
//! interval before its next pass, counts `narad_reaper_restarts` and logs
//! the restart at error level.
//!
//! A log whose topic the replica no longer holds, or holds as another
//! incarnation, is left alone: the incarnation housekeeping retires it.
//! A sweep that fails or panics is logged and the pass goes on with the
//! next log. Readers already cope with what a sweep removes: a consume
//! below the oldest offset jumps to it, a replay gets `410`, a fan-out
//! cursor counts the records it skipped, and a move copying a segment
//! that retention removed at the source drops it from the copy.

use std::fmt;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::thread::JoinHandle;
use std::time::Duration;

use narad_clock::millis;
use narad_disk::Disk;
use narad_plog::PartitionLog;
use narad_plog::segment::parse_segment_file_name;

use super::{LocalLogs, partition_dir};
use crate::metadata::MetadataReplica;
use crate::metrics::{
    COLD_RETENTION_PANICS_TOTAL, COLD_RETENTION_SWEPT_TOTAL, ERRORS_TOTAL, IDLE_LOGS_EVICTED_TOTAL,
    NodeMetrics, REAPER_RESTARTS, STORAGE_RETENTION_BYTES_DELETED_TOTAL,
    STORAGE_RETENTION_MESSAGES_DELETED_TOTAL, STORAGE_RETENTION_RUN_DURATION_SECONDS,
};
use crate::topology::Destination;

/// How often the open logs are swept (spec: about every 60 s;
/// `storage.retention_check_interval_ms`).
pub const RETENTION_CHECK_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);

/// How often the cold walk looks at partitions whose log is not open
/// (spec: `storage.cold_retention_walk_ms`, 300 s).
pub const COLD_RETENTION_WALK_DEFAULT: Duration = Duration::from_secs(300);

/// How long a log nobody holds stays open unused (spec:
/// `storage.idle_log_eviction_ms`, 30 minutes).
pub const IDLE_LOG_EVICTION_DEFAULT: Duration = Duration::from_secs(1800);

/// Cadences of the retention thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Between two passes over the open logs.
    pub check_interval: Duration,
    /// Between two cold walks, which run at a pass; `None` never walks.
    pub cold_walk: Option<Duration>,
    /// How long an open log nobody holds may go unused before a pass
    /// closes it; `None` never closes one.
    pub idle_eviction: Option<Duration>,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            check_interval: RETENTION_CHECK_INTERVAL_DEFAULT,
            cold_walk: Some(COLD_RETENTION_WALK_DEFAULT),
            idle_eviction: Some(IDLE_LOG_EVICTION_DEFAULT),
        }
    }
}

/// The only deletion reason a data node has: age.
const REASON_AGE: &str = "age";

/// Whoever holds partition logs open and lets go of the ones it no longer
/// uses by a rule of its own, asked before each idle eviction so that a
/// log it let go can be closed by the same pass. The consume service
/// implements it (idle shards): this room knows no consumer.
pub trait LogHolders: Send + Sync + fmt::Debug {
    /// Lets go of what has been idle long enough; returns how many
    /// holds it let go. May block on the disk.
    fn release_idle(&self) -> usize;
}

/// What the retention loop works on.
#[derive(Debug)]
pub(crate) struct RetentionParts {
    pub(crate) logs: Arc<LocalLogs>,
    pub(crate) replica: Arc<MetadataReplica>,
    pub(crate) metrics: Arc<NodeMetrics>,
    /// Asked to let go of idle logs before each eviction.
    pub(crate) holders: Option<Arc<dyn LogHolders>>,
}

/// What one pass did, over every log it swept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PassReport {
    /// Logs swept (a topic with retention 0 is not swept).
    pub(crate) swept: usize,
    /// Of those, logs the cold walk opened to sweep them.
    pub(crate) opened_cold: usize,
    /// Segments dropped from their logs.
    pub(crate) deleted_segments: usize,
    /// Offsets those segments held.
    pub(crate) deleted_messages: u64,
    /// Bytes unlinked.
    pub(crate) deleted_bytes: u64,
    /// Sweeps that failed or panicked.
    pub(crate) failed: usize,
}

/// [`pass_until`] to the end.
#[cfg(test)]
pub(crate) fn pass(parts: &RetentionParts, now_ms: u64, cold: bool) -> PassReport {
    pass_until(parts, now_ms, cold, &|| false)
}

/// Sweeps every open log once, at `now_ms` (Unix milliseconds, the clock
/// records are stamped with); with `cold`, first opens the logs the cold
/// walk finds holding an expired segment, so they are swept too. Ends
/// early, between two logs, once `stopping` says so.
fn pass_until(
    parts: &RetentionParts,
    now_ms: u64,
    cold: bool,
    stopping: &dyn Fn() -> bool,
) -> PassReport {
    let clock = parts.logs.clock();
    let started_us = clock.now_us();
    let mut report = PassReport::default();
    if cold {
        match panic::catch_unwind(AssertUnwindSafe(|| open_cold(parts, now_ms, stopping))) {
            Ok(opened) => report.opened_cold = opened,
            Err(_) => {
                parts.metrics.count(COLD_RETENTION_PANICS_TOTAL, &[], 1);
                tracing::error!("cold retention walk panicked; the next walk tries again");
            }
        }
    }
    for (destination, opened_for) in parts.logs.open_destinations() {
        if stopping() {
            break;
        }
        let Some(meta) = parts.replica.topic_meta(&destination.topic) else {
            continue;
        };
        if opened_for.is_some() && opened_for != meta.incarnation_id {
            continue;
        }
        let Some(log) = parts.logs.get(&destination) else {
            continue;
        };
        sweep(
            parts,
            &destination,
            &log,
            meta.retention_ms,
            now_ms,
            &mut report,
        );
    }
    parts.metrics.observe(
        STORAGE_RETENTION_RUN_DURATION_SECONDS,
        &[],
        Duration::from_micros(clock.now_us().saturating_sub(started_us)),
    );
    report
}

/// Whether the pass at `now_ms` (the node's monotonic clock) walks cold
/// logs too: the first pass does, then one every `config.cold_walk` after
/// the last walk (`walked_ms`); never without a cold-walk interval.
fn cold_walk_due(config: &RetentionConfig, walked_ms: Option<u64>, now_ms: u64) -> bool {
    config.cold_walk.is_some_and(|every| {
        walked_ms.is_none_or(|at_ms| now_ms.saturating_sub(at_ms) >= millis(every))
    })
}

/// Sets `log`'s roll age to `retention_ms` and sweeps it.
fn sweep(
    parts: &RetentionParts,
    destination: &Destination,
    log: &PartitionLog,
    retention_ms: u64,
    now_ms: u64,
    report: &mut PassReport,
) {
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
    log.set_roll_age_ms(retention_ms);
    if retention_ms == 0 {
        return;
    }
    report.swept += 1;
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        log.sweep_retention(now_ms, retention_ms)
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

/// Asks the holders to let go of what they no longer use; a panic there
/// is logged and the pass goes on. Returns how many holds were let go.
pub(crate) fn release_idle(parts: &RetentionParts) -> usize {
    let Some(holders) = &parts.holders else {
        return 0;
    };
    match panic::catch_unwind(AssertUnwindSafe(|| holders.release_idle())) {
        Ok(released) => released,
        Err(_) => {
            tracing::error!("releasing idle log holders panicked; tried again next pass");
            0
        }
    }
}

/// Closes the logs nobody held or used for `idle`, and counts them.
/// Returns how many it closed.
pub(crate) fn evict_idle(parts: &RetentionParts, idle: Duration) -> usize {
    let evicted = parts.logs.evict_idle(idle);
    for destination in &evicted {
        tracing::info!(%destination, idle_ms = idle.as_millis(), "idle partition log closed");
    }
    parts
        .metrics
        .count(IDLE_LOGS_EVICTED_TOTAL, &[], evicted.len() as u64);
    evicted.len()
}

/// The cold walk: opens the log of every partition this node owns that is
/// not open and whose oldest segment file was last modified more than its
/// topic's retention ago (on a disk that keeps no modification times, every
/// such partition with a segment). A record is committed before its
/// segment's last write, so a segment modified within the retention holds
/// nothing past it, and neither does any younger one. Runs only on a
/// caught-up replica, so it never opens a partition on stale ownership.
/// Returns how many logs it opened.
fn open_cold(parts: &RetentionParts, now_ms: u64, stopping: &dyn Fn() -> bool) -> usize {
    if !parts.replica.is_caught_up() {
        return 0;
    }
    let view = parts.replica.view();
    let local = parts.replica.local_node();
    let disk = parts.logs.disk();
    let mut opened = 0;
    for (name, meta) in &view.topics {
        if meta.retention_ms == 0 {
            continue;
        }
        for (partition, owner) in (0u32..).zip(&meta.owners) {
            if stopping() {
                return opened;
            }
            let destination = Destination::new(name, partition);
            if *owner != Some(local) || parts.logs.get(&destination).is_some() {
                continue;
            }
            let dir = partition_dir(parts.logs.data_dir(), name, partition);
            match oldest_segment_modified_ms(&**disk, &dir) {
                Ok(None) => continue,
                Ok(Some(Some(modified)))
                    if now_ms.saturating_sub(modified) <= meta.retention_ms =>
                {
                    continue;
                }
                Ok(Some(_)) => {}
                Err(error) => {
                    tracing::warn!(%destination, %error, "cold retention could not read the partition directory");
                    continue;
                }
            }
            // Not a use: once swept, the log is closed again by the
            // eviction that follows the pass.
            match parts
                .logs
                .resolve_to_look(&destination, meta.incarnation_id.as_ref())
            {
                Ok(_) => {
                    opened += 1;
                    parts.metrics.count(COLD_RETENTION_SWEPT_TOTAL, &[], 1);
                }
                Err(error) => {
                    tracing::warn!(%destination, %error, "cold retention could not open the partition log");
                }
            }
        }
    }
    opened
}

/// When the oldest segment in `dir` was last modified: `None` when the
/// directory or its segments do not exist, `Some(None)` on a disk that
/// keeps no modification times.
fn oldest_segment_modified_ms(disk: &dyn Disk, dir: &Path) -> io::Result<Option<Option<u64>>> {
    let names = match disk.list_dir(dir) {
        Ok(names) => names,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let Some((_, oldest)) = names
        .iter()
        .filter_map(|name| parse_segment_file_name(name).map(|base| (base, name)))
        .min()
    else {
        return Ok(None);
    };
    match disk.modified_ms(&dir.join(oldest)) {
        Ok(modified) => Ok(Some(Some(modified))),
        Err(error) if error.kind() == io::ErrorKind::Unsupported => Ok(Some(None)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// The retention loop: a pass every check interval until the stop
/// channel closes.
fn run(parts: &RetentionParts, config: &RetentionConfig, stopped: &mpsc::Receiver<()>) {
    let clock = Arc::clone(parts.logs.clock());
    let mut walked_ms: Option<u64> = None;
    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(config.check_interval) {
        let now_ms = clock.now_ms();
        let cold = cold_walk_due(config, walked_ms, now_ms);
        if cold {
            walked_ms = Some(now_ms);
        }
        let stopping = || matches!(stopped.try_recv(), Err(TryRecvError::Disconnected));
        pass_until(parts, clock.unix_ms(), cold, &stopping);
        if !stopping() {
            release_idle(parts);
        }
        if let Some(idle) = config.idle_eviction
            && !stopping()
        {
            evict_idle(parts, idle);
        }
    }
}

/// Runs `body` until it returns; each time it panics instead, runs it
/// again, after telling `restarted` how many restarts there were so far
/// and logging it. `body` starts with a wait of its own (the retention
/// loop waits a check interval before each pass), so a body that panics
/// at once does not spin.
pub(crate) fn supervise(body: impl Fn(), restarted: impl Fn(u64)) {
    let mut restarts = 0u64;
    while panic::catch_unwind(AssertUnwindSafe(&body)).is_err() {
        restarts += 1;
        restarted(restarts);
        tracing::error!(restarts, "the retention thread panicked; restarted");
    }
}

/// The running retention thread; stopped by [`Retention::stop`].
#[derive(Debug)]
pub(crate) struct Retention {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Retention {
    /// Starts the thread; its first pass, with a cold walk, runs one check
    /// interval from now.
    ///
    /// # Errors
    /// The thread could not be started.
    pub(crate) fn spawn(parts: RetentionParts, config: RetentionConfig) -> std::io::Result<Self> {
        parts
            .metrics
            .register_histogram(STORAGE_RETENTION_RUN_DURATION_SECONDS, &[]);
        parts.metrics.count(COLD_RETENTION_SWEPT_TOTAL, &[], 0);
        parts.metrics.count(COLD_RETENTION_PANICS_TOTAL, &[], 0);
        parts.metrics.count(IDLE_LOGS_EVICTED_TOTAL, &[], 0);
        let restarts = parts.metrics.gauge(REAPER_RESTARTS, &[]);
        restarts.set(0.0);
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("narad-retention".into())
            .spawn(move || {
                supervise(
                    || run(&parts, &config, &stopped),
                    |count| restarts.set(count as f64),
                );
            })?;
        Ok(Self { stop, thread })
    }

    /// Stops the thread and waits for it: at most for the sweep (or the
    /// open of a cold log) it is in.
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
