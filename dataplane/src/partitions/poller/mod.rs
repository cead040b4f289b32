//! The partition poller (spec §9): one thread that, every interval (5 s,
//! the spec's), exports for every partition this node owns, consumed or
//! not, its consumer lag (high watermark less frontier), the age of its
//! oldest unconsumed message, its size and segment files, and each topic's
//! bytes; a partition this node no longer owns has no series after the
//! next pass.
//!
//! It opens no log and makes no consume shard. An open log's figures come
//! from its memory (`PartitionLog::stats`, the record at the frontier
//! usually from its tail cache); a closed log's from its files
//! (`narad_plog::inspect`: segment files, the `hwm` file), read at most
//! once per closed refresh (30 s, the spec's) and at most
//! [`PollerConfig::closed_reads_per_pass_max`] per pass, longest unread
//! first, so a node with many idle partitions spreads the reads over
//! passes. The frontier comes from the partition's consume shard when it
//! has one, else from its consumer-state files read without attaching
//! them ([`Frontiers`]); a partition nobody consumed has the frontier at
//! its log's oldest offset.
//!
//! Each pass also folds the histogram samples recorded since the last
//! one into their buckets (`NodeMetrics::fold_histogram_samples`), so a
//! node nobody scrapes holds at most one interval's samples.
//!
//! Deciding is apart from reading: `decide` turns figures into series and
//! chooses the closed partitions to read; `read` reads one partition's
//! figures; this module runs the passes.

mod decide;
mod read;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use narad_clock::millis;

use self::decide::{PartitionFigures, closed_reads, series};
use self::read::{TailMemo, TimeMemo, closed_figures, open_figures};
use super::incarnation::MarkerToken;
use super::{LocalLogs, partition_dir};
use crate::metadata::{MetadataReplica, TopicMeta};
use crate::metrics::{
    CONSUMER_LAG_MESSAGES, ERRORS_TOTAL, NodeMetrics, OLDEST_UNCONSUMED_MESSAGE_AGE_SECONDS,
    PARTITION_SIZE_BYTES, POLLER_LAST_SUCCESS_TIMESTAMP_SECONDS, SEGMENTS, TOPIC_BYTES,
};
use crate::topology::Destination;

/// How often the poller passes over the owned partitions (spec §9: 5 s).
pub const POLL_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);
/// How old a closed partition's figures may grow before they are read
/// from disk again (spec §9: at most every 30 s).
pub const CLOSED_REFRESH_DEFAULT: Duration = Duration::from_secs(30);
/// Closed partitions read from disk in one pass at most: each read lists
/// a directory, sizes its segments and reads two small files, and a
/// crashed log's first read scans its active segment.
pub const CLOSED_READS_PER_PASS_MAX_DEFAULT: usize = 256;

/// Cadences and limits of the poller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollerConfig {
    /// Between two passes.
    pub interval: Duration,
    /// How old a closed partition's figures may grow before a read.
    pub closed_refresh: Duration,
    /// Closed partitions read in one pass at most (at least 1).
    pub closed_reads_per_pass_max: usize,
}

impl Default for PollerConfig {
    fn default() -> Self {
        Self {
            interval: POLL_INTERVAL_DEFAULT,
            closed_refresh: CLOSED_REFRESH_DEFAULT,
            closed_reads_per_pass_max: CLOSED_READS_PER_PASS_MAX_DEFAULT,
        }
    }
}

/// Where the poller finds a partition's consumer frontier. The consume
/// service implements it: this room knows no consumer.
pub trait Frontiers: Send + Sync + fmt::Debug {
    /// The frontier of the partition's consume shard for `incarnation`,
    /// if one serves it now; never makes a shard.
    fn live(&self, destination: &Destination, incarnation: Option<&Arc<str>>) -> Option<u64>;

    /// The frontier the consumer-state files in `dir` hold, read without
    /// attaching them; `None` when there are none.
    ///
    /// # Errors
    /// A read error of the disk.
    fn stored(&self, dir: &Path) -> io::Result<Option<u64>>;
}

/// What the poller works on.
#[derive(Debug)]
pub(crate) struct PollerParts {
    pub(crate) logs: Arc<LocalLogs>,
    pub(crate) replica: Arc<MetadataReplica>,
    pub(crate) metrics: Arc<NodeMetrics>,
    pub(crate) frontiers: Arc<dyn Frontiers>,
}

/// What the poller keeps between passes, per owned partition.
#[derive(Debug, Default)]
pub(crate) struct PollerState {
    /// Open logs: the commit time last read for their unconsumed start.
    open: HashMap<Destination, TimeMemo>,
    /// Closed logs: their figures as last read from disk.
    closed: HashMap<Destination, Closed>,
}

#[derive(Debug, Default)]
struct Closed {
    figures: Option<PartitionFigures>,
    /// When they were read, on the monotonic clock (ms).
    read_ms: Option<u64>,
    tail: TailMemo,
    time: TimeMemo,
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PassReport {
    /// Partitions exported.
    pub(crate) exported: usize,
    /// Of those, open logs read from memory.
    pub(crate) open: usize,
    /// Closed partitions read from disk this pass.
    pub(crate) closed_read: usize,
    /// Closed partitions due for a read that this pass left to the next.
    pub(crate) closed_deferred: usize,
    /// Reads that failed (the partition keeps its last figures, if any).
    pub(crate) failed: usize,
}

/// One pass at `now_ms` (the monotonic clock) and `now_unix_ms` (the clock
/// records are stamped with): reads the figures and publishes the series.
/// `None`, publishing nothing, while the replica has not caught up (its
/// ownership may be stale).
pub(crate) fn pass(
    parts: &PollerParts,
    config: &PollerConfig,
    state: &mut PollerState,
    now_ms: u64,
    now_unix_ms: u64,
) -> Option<PassReport> {
    if !parts.replica.is_caught_up() {
        return None;
    }
    let owned = owned_partitions(&parts.replica);
    state
        .open
        .retain(|destination, _| owned.contains_key(destination));
    state
        .closed
        .retain(|destination, _| owned.contains_key(destination));
    let mut report = PassReport::default();
    let mut figures = BTreeMap::new();
    let mut closed = Vec::new();
    for (destination, meta) in &owned {
        match parts.logs.open_incarnation(destination) {
            Some(opened_for) => {
                state.closed.remove(destination);
                let read = read_open(parts, state, destination, meta, opened_for.as_ref());
                match read {
                    Ok(read) => {
                        figures.insert(destination.clone(), read);
                        report.open += 1;
                    }
                    Err(error) => {
                        report.failed += 1;
                        tracing::warn!(%destination, %error, "the partition poller could not read an open log");
                    }
                }
            }
            None => {
                state.open.remove(destination);
                let read_ms = state.closed.get(destination).and_then(|c| c.read_ms);
                closed.push((destination.clone(), read_ms));
            }
        }
    }
    let reads = closed_reads(
        &closed,
        now_ms,
        millis(config.closed_refresh),
        config.closed_reads_per_pass_max.max(1),
    );
    report.closed_deferred = closed
        .iter()
        .filter(|(_, read_ms)| {
            read_ms.is_none_or(|at| now_ms.saturating_sub(at) >= millis(config.closed_refresh))
        })
        .count()
        - reads.len();
    for destination in reads {
        let meta = &owned[&destination];
        let entry = state.closed.entry(destination.clone()).or_default();
        entry.read_ms = Some(now_ms);
        match read_closed(parts, &destination, meta, entry) {
            Ok(read) => entry.figures = Some(read),
            Err(error) => {
                report.failed += 1;
                tracing::warn!(%destination, %error, "the partition poller could not read a closed partition's files");
            }
        }
        report.closed_read += 1;
    }
    for (destination, entry) in &state.closed {
        if let Some(read) = &entry.figures {
            figures.insert(destination.clone(), read.clone());
        }
    }
    report.exported = figures.len();
    publish(&parts.metrics, &figures, now_unix_ms);
    Some(report)
}

/// The partitions this node owns now, with their topics.
fn owned_partitions(replica: &MetadataReplica) -> BTreeMap<Destination, Arc<TopicMeta>> {
    let view = replica.view();
    let local = replica.local_node();
    let mut owned = BTreeMap::new();
    for (name, meta) in &view.topics {
        for (partition, owner) in (0u32..).zip(&meta.owners) {
            if *owner == Some(local) {
                owned.insert(Destination::new(name, partition), Arc::clone(meta));
            }
        }
    }
    owned
}

/// An open log's figures; a log open for another incarnation (about to be
/// retired) stands for nothing of this one yet.
fn read_open(
    parts: &PollerParts,
    state: &mut PollerState,
    destination: &Destination,
    meta: &TopicMeta,
    opened_for: Option<&Arc<str>>,
) -> io::Result<PartitionFigures> {
    if opened_for.is_some() && opened_for != meta.incarnation_id.as_ref() {
        return Ok(PartitionFigures::EMPTY);
    }
    let Some(log) = parts.logs.get(destination) else {
        // Closed since it was seen open: the next pass reads its files.
        return Ok(PartitionFigures::EMPTY);
    };
    let frontier = frontier(parts, destination, meta)?;
    let memo = state.open.entry(destination.clone()).or_default();
    open_figures(&log, frontier, memo)
}

/// A closed partition's figures from its files; a directory marked for
/// another incarnation (awaiting quarantine) stands for nothing of this
/// one.
fn read_closed(
    parts: &PollerParts,
    destination: &Destination,
    meta: &TopicMeta,
    entry: &mut Closed,
) -> io::Result<PartitionFigures> {
    let marker = parts
        .logs
        .directory_incarnation(&destination.topic)
        .map_err(io::Error::other)?;
    if let (Some(MarkerToken::Id(found)), Some(live)) = (&marker, &meta.incarnation_id)
        && found != live
    {
        return Ok(PartitionFigures::EMPTY);
    }
    let frontier = frontier(parts, destination, meta)?;
    let dir = partition_dir(
        parts.logs.data_dir(),
        &destination.topic,
        destination.partition,
    );
    closed_figures(
        &**parts.logs.disk(),
        &dir,
        frontier,
        parts.logs.config().frame_bytes_max,
        &mut entry.tail,
        &mut entry.time,
    )
}

fn frontier(
    parts: &PollerParts,
    destination: &Destination,
    meta: &TopicMeta,
) -> io::Result<Option<u64>> {
    if let Some(frontier) = parts
        .frontiers
        .live(destination, meta.incarnation_id.as_ref())
    {
        return Ok(Some(frontier));
    }
    let dir = partition_dir(
        parts.logs.data_dir(),
        &destination.topic,
        destination.partition,
    );
    parts.frontiers.stored(&dir)
}

/// Replaces the poller's five families with this pass's series.
fn publish(
    metrics: &NodeMetrics,
    figures: &BTreeMap<Destination, PartitionFigures>,
    now_unix_ms: u64,
) {
    let out = series(figures, now_unix_ms);
    metrics.publish_gauges(CONSUMER_LAG_MESSAGES, out.lag);
    metrics.publish_gauges(OLDEST_UNCONSUMED_MESSAGE_AGE_SECONDS, out.oldest_age);
    metrics.publish_gauges(PARTITION_SIZE_BYTES, out.size);
    metrics.publish_gauges(SEGMENTS, out.segments);
    metrics.publish_gauges(TOPIC_BYTES, out.topic_bytes);
}

/// The running poller thread; stopped by [`Poller::stop`].
#[derive(Debug)]
pub(crate) struct Poller {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Poller {
    /// Starts the thread; its first pass runs at once, then one every
    /// interval. A pass that panics is logged and counted
    /// (`narad_errors_total{component="metrics",kind="partition_poller"}`)
    /// and the next one runs from a clean state.
    ///
    /// # Errors
    /// The thread could not be started.
    pub(crate) fn spawn(parts: PollerParts, config: PollerConfig) -> io::Result<Self> {
        let vitals = parts.metrics.gauge(
            POLLER_LAST_SUCCESS_TIMESTAMP_SECONDS,
            &[("loop", "vitals".to_owned())],
        );
        let inventory = parts.metrics.gauge(
            POLLER_LAST_SUCCESS_TIMESTAMP_SECONDS,
            &[("loop", "inventory".to_owned())],
        );
        let failures = parts.metrics.counter(
            ERRORS_TOTAL,
            &[
                ("component", "metrics".to_owned()),
                ("kind", "partition_poller".to_owned()),
            ],
        );
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("narad-partition-poller".into())
            .spawn(move || {
                let clock = Arc::clone(parts.logs.clock());
                let mut state = PollerState::default();
                loop {
                    parts.metrics.fold_histogram_samples();
                    let now_unix_ms = clock.unix_ms();
                    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
                        pass(&parts, &config, &mut state, clock.now_ms(), now_unix_ms)
                    }));
                    match outcome {
                        Ok(Some(report)) => {
                            let at_seconds = now_unix_ms as f64 / 1_000.0;
                            vitals.set(at_seconds);
                            if report.closed_deferred == 0 {
                                inventory.set(at_seconds);
                            }
                            if report.failed > 0 {
                                failures.increment(report.failed as u64);
                            }
                        }
                        Ok(None) => {}
                        Err(_) => {
                            failures.increment(1);
                            state = PollerState::default();
                            tracing::error!(
                                "a partition poller pass panicked; the next pass starts afresh"
                            );
                        }
                    }
                    match stopped.recv_timeout(config.interval) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })?;
        Ok(Self { stop, thread })
    }

    /// Stops the thread and waits for it: at most for the pass it is in.
    pub(crate) fn stop(self) {
        drop(self.stop);
        if self.thread.join().is_err() {
            tracing::error!("the partition poller thread panicked");
        }
    }
}

#[cfg(test)]
mod tests;
