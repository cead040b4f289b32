//! What the partition poller exports from a pass's figures, and which
//! closed partitions it reads from disk this pass: pure functions, tested
//! without disk or clock.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::metrics::Series;
use crate::topology::Destination;

/// One owned partition's figures, from its open log (in memory) or from
/// its files (a closed log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PartitionFigures {
    /// Exclusive bound of the visible offsets.
    pub(crate) high_watermark: u64,
    /// First offset of the oldest segment: below it, retention deleted.
    pub(crate) oldest_offset: u64,
    /// The consumer frontier; `None` when nobody ever consumed the
    /// partition here.
    pub(crate) frontier: Option<u64>,
    /// Commit time (Unix ms) of the record at the unconsumed start
    /// ([`unconsumed_start`]), when one is there and readable.
    pub(crate) unconsumed_committed_at_ms: Option<u64>,
    /// Bytes of the segment files.
    pub(crate) size_bytes: u64,
    /// Segment files.
    pub(crate) segments: u64,
}

impl PartitionFigures {
    /// The figures of a partition with no files yet (never written here).
    pub(crate) const EMPTY: Self = Self {
        high_watermark: 0,
        oldest_offset: 0,
        frontier: None,
        unconsumed_committed_at_ms: None,
        size_bytes: 0,
        segments: 0,
    };
}

/// The first offset a consumer would still be given: the frontier, raised
/// to the log's oldest offset (what retention deleted below it is counted
/// by `narad_consumer_dropped_messages`, not as lag); the oldest offset
/// when nobody consumed yet.
pub(crate) fn unconsumed_start(figures: &PartitionFigures) -> u64 {
    figures
        .frontier
        .unwrap_or(figures.oldest_offset)
        .max(figures.oldest_offset)
}

/// The series of one pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PollSeries {
    pub(crate) lag: Vec<Series>,
    pub(crate) oldest_age: Vec<Series>,
    pub(crate) size: Vec<Series>,
    pub(crate) segments: Vec<Series>,
    pub(crate) topic_bytes: Vec<Series>,
}

/// What to export for `partitions` at `now_unix_ms`: per partition its lag
/// (high watermark less the unconsumed start), the age in seconds of the
/// record at the unconsumed start (0 with no lag; no series when its
/// commit time could not be read), its size and segments; per topic the
/// bytes of its partitions. A partition not in `partitions` has no series.
pub(crate) fn series(
    partitions: &BTreeMap<Destination, PartitionFigures>,
    now_unix_ms: u64,
) -> PollSeries {
    let mut out = PollSeries::default();
    let mut topic_bytes: BTreeMap<&Arc<str>, u64> = BTreeMap::new();
    for (destination, figures) in partitions {
        let labels = || {
            vec![
                ("topic", destination.topic.to_string()),
                ("partition", destination.partition.to_string()),
            ]
        };
        let lag = figures
            .high_watermark
            .saturating_sub(unconsumed_start(figures));
        out.lag.push((labels(), lag as f64));
        let age_ms = match (lag, figures.unconsumed_committed_at_ms) {
            (0, _) => Some(0),
            (_, Some(at_ms)) => Some(now_unix_ms.saturating_sub(at_ms)),
            (_, None) => None,
        };
        if let Some(age_ms) = age_ms {
            out.oldest_age.push((labels(), age_ms as f64 / 1_000.0));
        }
        out.size.push((labels(), figures.size_bytes as f64));
        out.segments.push((labels(), figures.segments as f64));
        let bytes = topic_bytes.entry(&destination.topic).or_default();
        *bytes = bytes.saturating_add(figures.size_bytes);
    }
    out.topic_bytes = topic_bytes
        .into_iter()
        .map(|(topic, bytes)| (vec![("topic", topic.to_string())], bytes as f64))
        .collect();
    out
}

/// Which of the closed partitions `closed` (each with when its figures
/// were last read, on the monotonic clock in ms; `None` never) to read
/// from disk at `now_ms`: those never read or read at least
/// `refresh_ms` ago, never-read ones first, then the longest ago, at
/// most `reads_max`. The rest keep the figures they have.
pub(crate) fn closed_reads(
    closed: &[(Destination, Option<u64>)],
    now_ms: u64,
    refresh_ms: u64,
    reads_max: usize,
) -> Vec<Destination> {
    let mut due: Vec<&(Destination, Option<u64>)> = closed
        .iter()
        .filter(|(_, read_ms)| read_ms.is_none_or(|at| now_ms.saturating_sub(at) >= refresh_ms))
        .collect();
    due.sort_by_key(|(destination, read_ms)| (*read_ms, destination.clone()));
    due.into_iter()
        .take(reads_max)
        .map(|(destination, _)| destination.clone())
        .collect()
}
