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

use crate::record::{Origin, Record};

/// Default bytes of records one partition keeps decoded in memory.
///
/// 256 KiB: about a second of one busy partition at the soak's record
/// sizes, so consumers that keep up read no segment. A larger cache buys
/// little (the flow bench moved within its spread between 1 MiB and 256
/// KiB) and costs resident memory: in 30-minute soaks of 45 partitions the
/// node's RSS kept rising 1.5–2 MiB a minute with 1 MiB and levelled off
/// with 256 KiB (`docs/operations.md`, "Memory bound").
pub const TAIL_CACHE_BYTES_DEFAULT: usize = 256 << 10;

/// What one record costs the budget besides its key and payload bytes.
const RECORD_OVERHEAD_BYTES: usize = size_of::<CachedRecord>();

/// One cached record: its fields, and where its bytes end in its frame's
/// buffer (key, then payload, then idempotency key, back to back).
#[derive(Debug)]
struct CachedRecord {
    offset: u64,
    committed_at_ms: u64,
    origin: Option<Origin>,
    key_end: usize,
    payload_end: usize,
    idempotency_key_end: usize,
}

/// One committed frame's records, in two allocations: the records' fixed
/// fields, and all their bytes in one buffer.
///
/// Why not the decoded [`Record`]s as they come: each holds its key and
/// payload in allocations of their own, three per record, made on whichever
/// commit worker committed the frame and freed when the frame leaves the
/// cache, long after the short-lived allocations made around them on that
/// thread. A heap profile of a 30-minute soak found 41 MiB of such records
/// live in 45 partitions; two 10-minute soaks side by side ended 72 MiB
/// apart in resident memory with the cache on and off, more than the cache
/// ever held, so the allocator kept pages around the records resident. One
/// buffer per frame is allocated and freed whole.
#[derive(Debug)]
pub(crate) struct CachedFrame {
    records: Box<[CachedRecord]>,
    bytes: Box<[u8]>,
    /// What the frame costs the budget.
    charge: usize,
}

impl CachedFrame {
    /// The frame of `records` (consecutive offsets), made before the
    /// partition's table is locked to cache it; `None` for no records.
    pub(crate) fn new(records: &[Record]) -> Option<Self> {
        records.first()?;
        let total = records
            .iter()
            .map(|r| r.key.len() + r.payload.len() + r.idempotency_key.len())
            .sum();
        let mut bytes = Vec::with_capacity(total);
        let cached = records
            .iter()
            .map(|record| {
                bytes.extend_from_slice(&record.key);
                let key_end = bytes.len();
                bytes.extend_from_slice(&record.payload);
                let payload_end = bytes.len();
                bytes.extend_from_slice(&record.idempotency_key);
                CachedRecord {
                    offset: record.offset,
                    committed_at_ms: record.committed_at_ms,
                    origin: record.origin,
                    key_end,
                    payload_end,
                    idempotency_key_end: bytes.len(),
                }
            })
            .collect();
        let charge = records
            .iter()
            .map(|r| r.key.len() + r.payload.len() + RECORD_OVERHEAD_BYTES)
            .sum();
        Some(Self {
            records: cached,
            bytes: bytes.into_boxed_slice(),
            charge,
        })
    }

    fn base_offset(&self) -> u64 {
        self.records.first().map_or(0, |r| r.offset)
    }

    /// First offset after the frame.
    fn end_offset(&self) -> u64 {
        self.base_offset() + self.records.len() as u64
    }

    /// Record `index` of the frame, as a read returns it.
    fn record(&self, index: usize) -> Record {
        let cached = &self.records[index];
        let start = index
            .checked_sub(1)
            .map_or(0, |before| self.records[before].idempotency_key_end);
        Record {
            offset: cached.offset,
            key: self.bytes[start..cached.key_end].to_vec(),
            committed_at_ms: cached.committed_at_ms,
            payload: self.bytes[cached.key_end..cached.payload_end].to_vec(),
            origin: cached.origin,
            idempotency_key: self.bytes[cached.payload_end..cached.idempotency_key_end].to_vec(),
        }
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

    /// Appends one committed frame. A frame that does not follow the cached
    /// ones replaces them.
    pub(crate) fn push(&mut self, frame: CachedFrame) {
        if self
            .frames
            .back()
            .is_some_and(|newest| newest.end_offset() != frame.base_offset())
        {
            self.clear();
        }
        let charge = frame.charge;
        if charge > self.budget {
            self.clear();
            return;
        }
        while self.bytes + charge > self.budget {
            let Some(oldest) = self.frames.pop_front() else {
                break;
            };
            self.bytes -= oldest.charge;
        }
        self.bytes += charge;
        self.frames.push_back(frame);
    }

    /// Drops everything.
    pub(crate) fn clear(&mut self) {
        self.frames.clear();
        self.bytes = 0;
    }

    /// The cached records from `from` on, oldest first, each copied out as
    /// it is taken; `None` when `from` is below the cache (or nothing is
    /// cached). Past the newest record the iterator is empty.
    pub(crate) fn records_from(&self, from: u64) -> Option<impl Iterator<Item = Record> + '_> {
        let start = self.start()?;
        if from < start {
            return None;
        }
        // Frames are contiguous: the first one that ends past `from`.
        let first = self.frames.partition_point(|f| f.end_offset() <= from);
        Some(self.frames.range(first..).flat_map(move |frame| {
            let skip = usize::try_from(from.saturating_sub(frame.base_offset()))
                .unwrap_or(usize::MAX)
                .min(frame.records.len());
            (skip..frame.records.len()).map(move |index| frame.record(index))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(offsets: std::ops::Range<u64>, payload_bytes: usize) -> CachedFrame {
        let records: Vec<Record> = offsets
            .map(|offset| Record {
                offset,
                key: Vec::new(),
                committed_at_ms: offset,
                payload: vec![offset as u8; payload_bytes],
                origin: None,
                idempotency_key: Vec::new(),
            })
            .collect();
        CachedFrame::new(&records).expect("not empty")
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
    fn records_come_back_exactly_as_cached_from_any_offset_of_a_frame() {
        let records: Vec<Record> = (40..44_u64)
            .map(|offset| Record {
                offset,
                key: if offset == 41 {
                    Vec::new()
                } else {
                    format!("k{offset}").into_bytes()
                },
                committed_at_ms: 1_000 + offset,
                payload: vec![offset as u8; offset as usize - 39],
                origin: (offset % 2 == 0).then_some(Origin {
                    id: [offset as u8; crate::record::ORIGIN_ID_BYTES],
                    seq: offset * 10,
                    floor: offset,
                }),
                idempotency_key: if offset == 43 {
                    b"idem-43".to_vec()
                } else {
                    Vec::new()
                },
            })
            .collect();
        let mut cache = TailCache::new(1 << 20);
        cache.push(CachedFrame::new(&records).expect("not empty"));
        assert!(CachedFrame::new(&[]).is_none());
        let all: Vec<Record> = cache.records_from(40).expect("cached").collect();
        assert_eq!(all, records);
        let tail: Vec<Record> = cache.records_from(42).expect("cached").collect();
        assert_eq!(tail, records[2..]);
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
