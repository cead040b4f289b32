//! The tail cache: the newest committed records of a partition, decoded, in
//! memory.
//!
//! Consumers mostly read what was just committed. Without the cache every
//! such read goes to the disk (a round trip through a storage thread), then
//! scans from the nearest index entry, checks CRCs and decodes the frame
//! again for each record it delivers. A commit already holds its frames and
//! has read them back and checked them against what it wrote, so `publish`
//! decodes each frame once and keeps its records here. Reads at or above
//! the cache's first offset are served from memory; older ones read the
//! segments as before.
//!
//! The cache is contiguous and ends at the high watermark: it lives in the
//! log's table, changes only under the table's write lock, and only by
//! commits appending at the high watermark. When a frame does not follow the
//! cached ones (never, by the commit's own checks) the cache starts over.
//! It is bounded by bytes (payload and key bytes plus a fixed charge per
//! record), dropping its oldest frames first; a frame larger than the whole
//! budget empties it.

use std::collections::VecDeque;
use std::mem::size_of;

use crate::record::Record;

/// Default bytes of records one partition keeps decoded in memory.
///
/// 1 MiB: a few seconds of one partition at the produce rates of one node
/// (the figures in `docs/benchmarks.md`), enough for consumers that keep up
/// to never read the disk, while a node with a thousand busy partitions
/// still spends at most a gigabyte on it.
pub const TAIL_CACHE_BYTES_DEFAULT: usize = 1 << 20;

/// What one record costs the budget besides its key and payload bytes.
const RECORD_OVERHEAD_BYTES: usize = size_of::<Record>();

/// One committed frame's records.
#[derive(Debug)]
struct CachedFrame {
    records: Vec<Record>,
    /// What the frame costs the budget.
    bytes: usize,
}

impl CachedFrame {
    fn base_offset(&self) -> u64 {
        self.records.first().map_or(0, |r| r.offset)
    }

    /// First offset after the frame.
    fn end_offset(&self) -> u64 {
        self.base_offset() + self.records.len() as u64
    }
}

/// The newest committed records of one partition.
#[derive(Debug)]
pub(crate) struct TailCache {
    frames: VecDeque<CachedFrame>,
    bytes: usize,
    budget: usize,
}

impl TailCache {
    /// An empty cache of at most `budget` bytes (0 keeps nothing).
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            frames: VecDeque::new(),
            bytes: 0,
            budget,
        }
    }

    /// The first cached offset, if anything is cached.
    pub(crate) fn start(&self) -> Option<u64> {
        self.frames.front().map(CachedFrame::base_offset)
    }

    /// Bytes charged to the budget now.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Appends one committed frame's records (consecutive offsets). A frame
    /// that does not follow the cached ones replaces them.
    pub(crate) fn push(&mut self, records: Vec<Record>) {
        let Some(first) = records.first() else {
            return;
        };
        if self
            .frames
            .back()
            .is_some_and(|newest| newest.end_offset() != first.offset)
        {
            self.clear();
        }
        let bytes = records
            .iter()
            .map(|r| r.key.len() + r.payload.len() + RECORD_OVERHEAD_BYTES)
            .sum::<usize>();
        if bytes > self.budget {
            self.clear();
            return;
        }
        while self.bytes + bytes > self.budget {
            let Some(oldest) = self.frames.pop_front() else {
                break;
            };
            self.bytes -= oldest.bytes;
        }
        self.bytes += bytes;
        self.frames.push_back(CachedFrame { records, bytes });
    }

    /// Drops everything.
    pub(crate) fn clear(&mut self) {
        self.frames.clear();
        self.bytes = 0;
    }

    /// The cached records from `from` on, oldest first; `None` when `from`
    /// is below the cache (or nothing is cached). Past the newest record the
    /// iterator is empty.
    pub(crate) fn records_from(&self, from: u64) -> Option<impl Iterator<Item = &Record>> {
        let start = self.start()?;
        if from < start {
            return None;
        }
        // Frames are contiguous: the first one that ends past `from`.
        let first = self.frames.partition_point(|f| f.end_offset() <= from);
        Some(
            self.frames
                .range(first..)
                .flat_map(|f| f.records.iter())
                .skip_while(move |r| r.offset < from),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(offsets: std::ops::Range<u64>, payload_bytes: usize) -> Vec<Record> {
        offsets
            .map(|offset| Record {
                offset,
                key: Vec::new(),
                committed_at_ms: offset,
                payload: vec![offset as u8; payload_bytes],
                origin: None,
                idempotency_key: Vec::new(),
            })
            .collect()
    }

    fn offsets(cache: &TailCache, from: u64) -> Option<Vec<u64>> {
        cache
            .records_from(from)
            .map(|records| records.map(|r| r.offset).collect())
    }

    #[test]
    fn reads_from_any_cached_offset_to_the_end() {
        let mut cache = TailCache::new(1 << 20);
        cache.push(frame(10..13, 8));
        cache.push(frame(13..20, 8));
        assert_eq!(cache.start(), Some(10));
        assert_eq!(offsets(&cache, 10), Some((10..20).collect()));
        assert_eq!(offsets(&cache, 14), Some((14..20).collect()));
        assert_eq!(offsets(&cache, 20), Some(Vec::new()));
        assert_eq!(offsets(&cache, 9), None);
    }

    #[test]
    fn an_empty_cache_serves_nothing() {
        let cache = TailCache::new(1 << 20);
        assert_eq!(offsets(&cache, 0), None);
    }

    #[test]
    fn oldest_frames_go_first_once_over_budget() {
        let per_record = 100 + RECORD_OVERHEAD_BYTES;
        let mut cache = TailCache::new(per_record * 5);
        cache.push(frame(0..2, 100));
        cache.push(frame(2..4, 100));
        cache.push(frame(4..6, 100));
        assert_eq!(cache.start(), Some(2), "the first frame made room");
        assert_eq!(cache.bytes(), per_record * 4);
        assert_eq!(offsets(&cache, 2), Some((2..6).collect()));
        assert_eq!(offsets(&cache, 1), None);
    }

    #[test]
    fn a_frame_larger_than_the_budget_empties_the_cache() {
        let per_record = 100 + RECORD_OVERHEAD_BYTES;
        let mut cache = TailCache::new(per_record * 3);
        cache.push(frame(0..2, 100));
        cache.push(frame(2..6, 100));
        assert_eq!(cache.start(), None);
        assert_eq!(cache.bytes(), 0);
        cache.push(frame(6..7, 100));
        assert_eq!(offsets(&cache, 6), Some(vec![6]));
    }

    #[test]
    fn a_frame_that_does_not_follow_starts_the_cache_over() {
        let mut cache = TailCache::new(1 << 20);
        cache.push(frame(0..4, 8));
        cache.push(frame(10..12, 8));
        assert_eq!(cache.start(), Some(10));
        assert_eq!(offsets(&cache, 2), None);
        assert_eq!(offsets(&cache, 10), Some(vec![10, 11]));
    }

    #[test]
    fn a_zero_budget_keeps_nothing() {
        let mut cache = TailCache::new(0);
        cache.push(frame(0..1, 0));
        assert_eq!(cache.start(), None);
    }
}
