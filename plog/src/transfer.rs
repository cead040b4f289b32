//! What a partition move copies: the segment files and, for each, the
//! bytes that hold committed frames, taken at one instant.

use crate::log::PartitionLog;
use crate::segment;

/// One segment file and its bytes to copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentExtent {
    /// The file name inside the partition directory.
    pub file_name: String,
    /// Bytes holding committed frames: a sealed segment's size, the active
    /// segment's committed bytes (never a hidden tail, never a frame being
    /// written).
    pub bytes: u64,
}

/// The segments of a partition and the high watermark their committed
/// bytes hold, read together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferListing {
    /// Exclusive bound of the offsets the listed bytes hold.
    pub high_watermark: u64,
    /// Oldest first; the last one is the active segment.
    pub segments: Vec<SegmentExtent>,
}

impl PartitionLog {
    /// The segments and their committed bytes now. A copy of exactly these
    /// bytes opens (see [`PartitionLog::open`]) to exactly this high
    /// watermark: a commit publishes its bytes and its high watermark
    /// together under the table lock this reads under.
    pub fn transfer_listing(&self) -> TransferListing {
        let table = self.table.read();
        let sealed = table.sealed.iter().map(|segment| SegmentExtent {
            file_name: segment::segment_file_name(segment.base_offset),
            bytes: segment.size_bytes,
        });
        let active = SegmentExtent {
            file_name: segment::segment_file_name(table.active.base_offset),
            bytes: table.active.committed_bytes,
        };
        TransferListing {
            high_watermark: table.high_watermark,
            segments: sealed.chain(std::iter::once(active)).collect(),
        }
    }
}
