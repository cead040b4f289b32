//! The transfer operations of a partition move (spec §6, rebalance): the
//! move's target asks the partition's current owner (the source) for its
//! files, then for a handoff.
//!
//! ```text
//! ListPartitionSegments (22), a Message, version 1
//!   PartitionRef                                    → PartitionListing
//! PartitionListing, a Message, version 1
//!   u64 high_watermark, u32 count (≤ FILES_MAX), per file: FileExtent,
//!   HandoffFenced position (the consumer position read after the listing)
//! FetchSegmentChunk (23), a Message, version 1
//!   PartitionRef, str file, u64 offset, u32 max_bytes (1 ..= CHUNK_BYTES_MAX),
//!   u64 token (0: no handoff yet)                   → SegmentChunk
//! SegmentChunk, a Message, version 1: bytes data (≤ CHUNK_BYTES_MAX)
//! PrepareHandoff (24), a Message, version 1
//!   PartitionRef, str target                        → HandoffPrepared
//! HandoffPrepared, a Message, version 1
//!   u64 token (≠ 0), u32 ttl_ms, u64 high_watermark, u32 count, FileExtent × count
//! FenceHandoff (26, CompleteMove), a Message, version 1
//!   PartitionRef, u64 token, u64 high_watermark     → HandoffFenced
//! HandoffFenced, a Message, version 1
//!   u64 frontier, u32 count (≤ ACKED_AHEAD_MAX), u64 × count acked-ahead offsets
//! ReleaseHandoff (27, AbortMove), a Message, version 1
//!   PartitionRef, u64 token                         → 204
//!
//! PartitionRef: str topic, u32 partition, str incarnation (16 hex, or "")
//! FileExtent:   str name, u64 bytes
//! ```
//!
//! Every count is checked against its limit and against the bytes present
//! before anything is allocated; bytes after the last field are refused.

use bytes::Bytes;

use crate::codec::{Decode, DecodeError, Encode, Message, Reader, Writer};
use crate::fields::{get_count_in, invalid};

/// Bytes one chunk carries at most: 4 MiB, a quarter of the frame limit,
/// so a chunk never waits behind the frame cap and one copy pass makes
/// few round trips.
pub const CHUNK_BYTES_MAX: u32 = 4 << 20;

/// Files one listing names at most: a partition holds about 64 segment
/// files per 4 GiB, and a few state files beside them.
pub const FILES_MAX: u32 = 1 << 20;

/// Acked-ahead offsets a fenced handoff carries at most (the consumer
/// state's own bound).
pub const ACKED_AHEAD_MAX: u32 = 1 << 20;

const _: () = assert!((CHUNK_BYTES_MAX as usize) < crate::limits::FRAME_BYTES_MAX);

/// Which partition (and which incarnation of its topic) a transfer
/// operation is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionRef {
    /// The topic.
    pub topic: String,
    /// The partition index.
    pub partition: u32,
    /// The topic incarnation the caller copies; empty for a topic from
    /// before incarnation ids.
    pub incarnation: String,
}

impl Encode for PartitionRef {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.topic);
        writer.u32(self.partition);
        writer.str(&self.incarnation);
    }
}

impl Decode for PartitionRef {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            topic: reader.str("topic")?,
            partition: reader.u32("partition")?,
            incarnation: reader.str("incarnation")?,
        })
    }
}

/// One file of a partition directory and how many of its bytes to copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileExtent {
    /// The file name inside the partition directory.
    pub name: String,
    /// Bytes to copy: a segment's committed bytes, a state file's size.
    pub bytes: u64,
}

const FILE_EXTENT_BYTES_MIN: usize = 4 + 8;

fn put_files(writer: &mut Writer, files: &[FileExtent]) {
    let count = u32::try_from(files.len()).expect("bounded file list");
    assert!(
        count <= FILES_MAX,
        "a listing names at most {FILES_MAX} files"
    );
    writer.u32(count);
    for file in files {
        writer.str(&file.name);
        writer.u64(file.bytes);
    }
}

fn get_files(reader: &mut Reader) -> Result<Vec<FileExtent>, DecodeError> {
    let count = get_count_in(
        reader,
        "file count",
        "files",
        0..=FILES_MAX,
        FILE_EXTENT_BYTES_MIN,
    )?;
    let mut files = Vec::with_capacity(count);
    for _ in 0..count {
        files.push(FileExtent {
            name: reader.str("file name")?,
            bytes: reader.u64("file bytes")?,
        });
    }
    Ok(files)
}

macro_rules! message {
    ($type:ty, $name:literal) => {
        impl Message for $type {
            const NAME: &'static str = $name;
            const VERSION: u8 = 1;
        }
    };
}

/// Asks the source for the partition's files as they stand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPartitionSegments {
    /// The partition.
    pub partition: PartitionRef,
}

impl Encode for ListPartitionSegments {
    fn encode(&self, writer: &mut Writer) {
        self.partition.encode(writer);
    }
}

impl Decode for ListPartitionSegments {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            partition: PartitionRef::decode(reader)?,
        })
    }
}

message!(ListPartitionSegments, "ListPartitionSegments");

/// The partition's segment files, oldest first, with their committed
/// bytes, and the high watermark they hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionListing {
    /// Exclusive bound of the offsets the listed bytes hold.
    pub high_watermark: u64,
    /// Segment files, oldest first.
    pub files: Vec<FileExtent>,
    /// The consumer position read right after the listing: what a
    /// force-promoted copy starts from when the source never fences.
    pub position: HandoffFenced,
}

impl Encode for PartitionListing {
    fn encode(&self, writer: &mut Writer) {
        writer.u64(self.high_watermark);
        put_files(writer, &self.files);
        self.position.encode(writer);
    }
}

impl Decode for PartitionListing {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            high_watermark: reader.u64("high watermark")?,
            files: get_files(reader)?,
            position: HandoffFenced::decode(reader)?,
        })
    }
}

message!(PartitionListing, "PartitionListing");

/// Asks the source for bytes of one file of the partition directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchSegmentChunk {
    /// The partition.
    pub partition: PartitionRef,
    /// The file name (a listed one).
    pub file: String,
    /// The first byte wanted.
    pub offset: u64,
    /// Bytes wanted at most, 1 ..= [`CHUNK_BYTES_MAX`].
    pub max_bytes: u32,
    /// The handoff token while the source is frozen for this move (a fetch
    /// under it keeps the freeze armed); 0 before the handoff.
    pub token: u64,
}

impl Encode for FetchSegmentChunk {
    fn encode(&self, writer: &mut Writer) {
        assert!(
            (1..=CHUNK_BYTES_MAX).contains(&self.max_bytes),
            "a fetch asks for 1 to {CHUNK_BYTES_MAX} bytes"
        );
        self.partition.encode(writer);
        writer.str(&self.file);
        writer.u64(self.offset);
        writer.u32(self.max_bytes);
        writer.u64(self.token);
    }
}

impl Decode for FetchSegmentChunk {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let partition = PartitionRef::decode(reader)?;
        let file = reader.str("file name")?;
        let offset = reader.u64("file offset")?;
        let max_bytes = reader.u32("max bytes")?;
        if !(1..=CHUNK_BYTES_MAX).contains(&max_bytes) {
            return Err(invalid("max bytes", max_bytes));
        }
        Ok(Self {
            partition,
            file,
            offset,
            max_bytes,
            token: reader.u64("handoff token")?,
        })
    }
}

message!(FetchSegmentChunk, "FetchSegmentChunk");

/// Bytes of one file, from the asked offset; fewer than asked at the end
/// of what the source holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentChunk {
    /// The bytes.
    pub data: Bytes,
}

impl Encode for SegmentChunk {
    fn encode(&self, writer: &mut Writer) {
        assert!(
            self.data.len() <= CHUNK_BYTES_MAX as usize,
            "a chunk carries at most {CHUNK_BYTES_MAX} bytes"
        );
        writer.bytes(&self.data);
    }

    fn encoded_len_hint(&self) -> usize {
        4 + self.data.len()
    }
}

impl Decode for SegmentChunk {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let data = reader.bytes("chunk data")?;
        if data.len() > CHUNK_BYTES_MAX as usize {
            return Err(invalid("chunk data length", data.len() as u64));
        }
        Ok(Self { data })
    }
}

message!(SegmentChunk, "SegmentChunk");

/// Asks the source to freeze the partition for the move to `target`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareHandoff {
    /// The partition.
    pub partition: PartitionRef,
    /// The member id of the move's target (the caller).
    pub target: String,
}

impl Encode for PrepareHandoff {
    fn encode(&self, writer: &mut Writer) {
        self.partition.encode(writer);
        writer.str(&self.target);
    }
}

impl Decode for PrepareHandoff {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            partition: PartitionRef::decode(reader)?,
            target: reader.str("target")?,
        })
    }
}

message!(PrepareHandoff, "PrepareHandoff");

/// The source froze the partition: no commit lands until the freeze
/// lapses, is released, or the move ends. Lists every file to copy, with
/// the bytes that hold exactly the high watermark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandoffPrepared {
    /// Names this freeze in later calls; never 0.
    pub token: u64,
    /// The freeze lapses this long after the last call under the token,
    /// unless fenced.
    pub ttl_ms: u32,
    /// The frozen high watermark.
    pub high_watermark: u64,
    /// Segment files, oldest first, then the other files that travel with
    /// the partition (fan-out cursors).
    pub files: Vec<FileExtent>,
}

impl Encode for HandoffPrepared {
    fn encode(&self, writer: &mut Writer) {
        assert_ne!(self.token, 0, "a handoff token is never 0");
        writer.u64(self.token);
        writer.u32(self.ttl_ms);
        writer.u64(self.high_watermark);
        put_files(writer, &self.files);
    }
}

impl Decode for HandoffPrepared {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let token = reader.u64("handoff token")?;
        if token == 0 {
            return Err(invalid("handoff token", 0_u64));
        }
        Ok(Self {
            token,
            ttl_ms: reader.u32("freeze ttl_ms")?,
            high_watermark: reader.u64("high watermark")?,
            files: get_files(reader)?,
        })
    }
}

message!(HandoffPrepared, "HandoffPrepared");

/// The target copied everything up to the frozen high watermark: the
/// source must hold the freeze until the move ends (the flip commits, or
/// the leader clears the move).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FenceHandoff {
    /// The partition.
    pub partition: PartitionRef,
    /// The freeze's token.
    pub token: u64,
    /// The high watermark the copy holds; the source refuses if its own
    /// differs.
    pub high_watermark: u64,
}

impl Encode for FenceHandoff {
    fn encode(&self, writer: &mut Writer) {
        self.partition.encode(writer);
        writer.u64(self.token);
        writer.u64(self.high_watermark);
    }
}

impl Decode for FenceHandoff {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            partition: PartitionRef::decode(reader)?,
            token: reader.u64("handoff token")?,
            high_watermark: reader.u64("high watermark")?,
        })
    }
}

message!(FenceHandoff, "FenceHandoff");

/// The fenced partition's consumer position, read under the fence: every
/// offset below the frontier is settled, and so are the acked-ahead ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandoffFenced {
    /// The frontier.
    pub frontier: u64,
    /// Settled offsets above the frontier, ascending.
    pub acked_ahead: Vec<u64>,
}

impl Encode for HandoffFenced {
    fn encode(&self, writer: &mut Writer) {
        let count = u32::try_from(self.acked_ahead.len()).expect("bounded set");
        assert!(
            count <= ACKED_AHEAD_MAX,
            "at most {ACKED_AHEAD_MAX} offsets"
        );
        writer.u64(self.frontier);
        writer.u32(count);
        for offset in &self.acked_ahead {
            writer.u64(*offset);
        }
    }
}

impl Decode for HandoffFenced {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let frontier = reader.u64("frontier")?;
        let count = get_count_in(
            reader,
            "acked-ahead count",
            "acked-ahead offsets",
            0..=ACKED_AHEAD_MAX,
            8,
        )?;
        let mut acked_ahead = Vec::with_capacity(count);
        let mut previous = frontier;
        for _ in 0..count {
            let offset = reader.u64("acked-ahead offset")?;
            if offset <= previous {
                return Err(invalid("acked-ahead offset out of order", offset));
            }
            previous = offset;
            acked_ahead.push(offset);
        }
        Ok(Self {
            frontier,
            acked_ahead,
        })
    }
}

message!(HandoffFenced, "HandoffFenced");

/// The target gives the freeze back (its move failed or was aborted): the
/// source resumes commits unless the freeze was fenced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseHandoff {
    /// The partition.
    pub partition: PartitionRef,
    /// The freeze's token.
    pub token: u64,
}

impl Encode for ReleaseHandoff {
    fn encode(&self, writer: &mut Writer) {
        self.partition.encode(writer);
        writer.u64(self.token);
    }
}

impl Decode for ReleaseHandoff {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            partition: PartitionRef::decode(reader)?,
            token: reader.u64("handoff token")?,
        })
    }
}

message!(ReleaseHandoff, "ReleaseHandoff");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_message, encode_message};

    fn partition() -> PartitionRef {
        PartitionRef {
            topic: "orders".into(),
            partition: 3,
            incarnation: "0123456789abcdef".into(),
        }
    }

    fn round_trip<M: Message + PartialEq + std::fmt::Debug>(message: &M) {
        let bytes = encode_message(message);
        assert_eq!(&decode_message::<M>(bytes.clone()).unwrap(), message);
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert!(
            decode_message::<M>(Bytes::from(longer)).is_err(),
            "trailing bytes are refused"
        );
        for cut in 0..bytes.len() {
            assert!(
                decode_message::<M>(bytes.slice(..cut)).is_err(),
                "{} cut at {cut} is refused",
                M::NAME
            );
        }
    }

    #[test]
    fn every_transfer_message_round_trips_and_refuses_damage() {
        let files = vec![
            FileExtent {
                name: "00000000000000000000.log".into(),
                bytes: 67_108_864,
            },
            FileExtent {
                name: "fanout-audit.offset".into(),
                bytes: 16,
            },
        ];
        round_trip(&ListPartitionSegments {
            partition: partition(),
        });
        round_trip(&PartitionListing {
            high_watermark: 42,
            files: files.clone(),
            position: HandoffFenced {
                frontier: 40,
                acked_ahead: vec![41],
            },
        });
        round_trip(&FetchSegmentChunk {
            partition: partition(),
            file: files[0].name.clone(),
            offset: 4096,
            max_bytes: CHUNK_BYTES_MAX,
            token: 0,
        });
        round_trip(&SegmentChunk {
            data: Bytes::from_static(b"frames"),
        });
        round_trip(&PrepareHandoff {
            partition: partition(),
            target: "2".into(),
        });
        round_trip(&HandoffPrepared {
            token: 7,
            ttl_ms: 30_000,
            high_watermark: 42,
            files,
        });
        round_trip(&FenceHandoff {
            partition: partition(),
            token: 7,
            high_watermark: 42,
        });
        round_trip(&HandoffFenced {
            frontier: 10,
            acked_ahead: vec![12, 13, 40],
        });
        round_trip(&ReleaseHandoff {
            partition: partition(),
            token: 7,
        });
    }

    #[test]
    fn a_fetch_over_the_chunk_limit_or_of_nothing_is_refused() {
        let mut writer = Writer::new();
        writer.u8(1);
        partition().encode(&mut writer);
        writer.str("x");
        writer.u64(0);
        writer.u32(CHUNK_BYTES_MAX + 1);
        writer.u64(0);
        assert_eq!(
            decode_message::<FetchSegmentChunk>(writer.finish()),
            Err(invalid("max bytes", CHUNK_BYTES_MAX + 1))
        );
    }

    #[test]
    fn a_zero_token_and_an_unordered_set_are_refused() {
        let mut writer = Writer::new();
        writer.u8(1);
        writer.u64(0);
        writer.u32(30_000);
        writer.u64(1);
        writer.u32(0);
        assert!(decode_message::<HandoffPrepared>(writer.finish()).is_err());
        let mut writer = Writer::new();
        writer.u8(1);
        writer.u64(10);
        writer.u32(2);
        writer.u64(12);
        writer.u64(11);
        assert_eq!(
            decode_message::<HandoffFenced>(writer.finish()),
            Err(invalid("acked-ahead offset out of order", 11_u64))
        );
    }
}
