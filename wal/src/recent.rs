//! The newest durable chunks, kept in memory for the dispatcher's reader.
//!
//! The dispatcher reads each record right after its group commit. Prepared
//! segments are written with `O_DIRECT`, which leaves nothing in the page
//! cache, so without this every such read would go to the device through a
//! storage thread: two more thread hand-offs and a disk read per commit. The
//! sync loop copies each chunk here once it is durable (before it publishes
//! the new durable end), and the reader takes bytes from here when they are
//! present, from the file otherwise.
//!
//! Bounded by bytes: the oldest chunks are dropped first, and a reader that
//! fell further behind than that reads the file as before.

use std::collections::VecDeque;
use std::sync::Arc;

/// Bytes of recent chunks kept: two staging buffers' worth at the default
/// size, a few group commits at full load and thousands at light load.
pub(crate) const RECENT_BYTES_MAX: usize = 8 * 1024 * 1024;

#[derive(Debug)]
struct RecentChunk {
    segment_base: u64,
    offset: u64,
    bytes: Arc<[u8]>,
}

impl RecentChunk {
    fn end(&self) -> u64 {
        self.offset + self.bytes.len() as u64
    }
}

/// The chunks, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    chunks: VecDeque<RecentChunk>,
    bytes: usize,
}

impl Recent {
    /// Keeps a copy of `bytes`, durable at `offset` of segment
    /// `segment_base`, dropping the oldest chunks past the bound.
    pub(crate) fn push(&mut self, segment_base: u64, offset: u64, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if bytes.len() > RECENT_BYTES_MAX {
            self.chunks.clear();
            self.bytes = 0;
            return;
        }
        self.bytes += bytes.len();
        self.chunks.push_back(RecentChunk {
            segment_base,
            offset,
            bytes: Arc::from(bytes),
        });
        while self.bytes > RECENT_BYTES_MAX {
            let Some(old) = self.chunks.pop_front() else {
                break;
            };
            self.bytes -= old.bytes.len();
        }
    }

    /// Copies into `window` the bytes of segment `segment_base` from
    /// `offset` on, across consecutive chunks, up to `until` and at most
    /// `max` bytes. Returns how many it copied: 0 when no chunk holds
    /// `offset`.
    pub(crate) fn copy_from(
        &self,
        segment_base: u64,
        offset: u64,
        until: u64,
        max: usize,
        window: &mut Vec<u8>,
    ) -> usize {
        window.clear();
        let Some(first) = self.chunks.iter().rposition(|c| {
            c.segment_base == segment_base && c.offset <= offset && offset < c.end()
        }) else {
            return 0;
        };
        let mut at = offset;
        for chunk in self.chunks.range(first..) {
            if chunk.segment_base != segment_base || chunk.offset > at || at >= until {
                break;
            }
            let from = (at - chunk.offset) as usize;
            let to =
                ((until.min(chunk.end()) - chunk.offset) as usize).min(from + max - window.len());
            window.extend_from_slice(&chunk.bytes[from..to]);
            at = chunk.offset + to as u64;
            if window.len() >= max {
                break;
            }
        }
        window.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_come_from_consecutive_chunks_of_one_segment() {
        let mut recent = Recent::default();
        recent.push(0, 0, &[1; 10]);
        recent.push(0, 10, &[2; 10]);
        recent.push(30, 0, &[3; 10]);
        let mut window = Vec::new();
        assert_eq!(recent.copy_from(0, 5, 20, 100, &mut window), 15);
        assert_eq!(window, [vec![1; 5], vec![2; 10]].concat());
        assert_eq!(recent.copy_from(0, 5, 12, 100, &mut window), 7);
        assert_eq!(recent.copy_from(0, 5, 20, 3, &mut window), 3);
        assert_eq!(recent.copy_from(30, 2, 10, 100, &mut window), 8);
        assert_eq!(window, vec![3; 8]);
    }

    #[test]
    fn an_offset_no_chunk_holds_copies_nothing() {
        let mut recent = Recent::default();
        recent.push(0, 100, &[1; 10]);
        let mut window = vec![9];
        assert_eq!(recent.copy_from(0, 50, 200, 100, &mut window), 0);
        assert_eq!(recent.copy_from(0, 110, 200, 100, &mut window), 0);
        assert_eq!(recent.copy_from(7, 100, 200, 100, &mut window), 0);
        assert!(window.is_empty());
    }

    #[test]
    fn a_gap_between_chunks_ends_the_copy() {
        let mut recent = Recent::default();
        recent.push(0, 0, &[1; 10]);
        recent.push(0, 20, &[2; 10]);
        let mut window = Vec::new();
        assert_eq!(recent.copy_from(0, 0, 30, 100, &mut window), 10);
    }

    #[test]
    fn the_oldest_chunks_go_first_past_the_bound() {
        let mut recent = Recent::default();
        let big = vec![0; RECENT_BYTES_MAX / 2];
        recent.push(0, 0, &big);
        recent.push(0, big.len() as u64, &big);
        recent.push(0, 2 * big.len() as u64, &[5; 10]);
        let mut window = Vec::new();
        assert_eq!(recent.copy_from(0, 0, u64::MAX, 10, &mut window), 0);
        assert_eq!(
            recent.copy_from(0, big.len() as u64, u64::MAX, 10, &mut window),
            10
        );
        recent.push(0, 0, &vec![1; RECENT_BYTES_MAX + 1]);
        assert_eq!(
            recent.copy_from(0, big.len() as u64, u64::MAX, 10, &mut window),
            0
        );
    }
}
