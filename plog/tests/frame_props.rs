//! Property tests for the frame decoder and the segment scan.

// Helpers outside `#[test]` functions panic on failure like the tests do.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::read_all;
use narad_disk::sim::SimDisk;
use narad_disk::{Disk, IoBuf, OpenOptions};
use narad_plog::frame::{self, FRAME_BYTES_MAX, FRAME_HEADER_BYTES};
use narad_plog::segment::segment_file_name;
use narad_plog::{Codec, CommitRecord, CompressionLevel, LogConfig, PartitionLog, ReadEntry};
use proptest::prelude::*;

/// A frame limit small enough that arbitrary headers often fall inside it.
const SMALL_FRAME_LIMIT: u32 = 1 << 16;

fn stored_crc_matches(bytes: &[u8]) -> bool {
    let header = frame::FrameHeader::parse(bytes, FRAME_BYTES_MAX).unwrap();
    let end = header.frame_bytes() as usize;
    let mut covered = bytes[2..23].to_vec();
    covered.extend_from_slice(&bytes[FRAME_HEADER_BYTES..end]);
    crc32c::crc32c(&covered) == header.crc
}

fn arb_records() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>, u64)>> {
    prop::collection::vec(
        (
            prop::collection::vec(any::<u8>(), 0..20),
            prop::collection::vec(any::<u8>(), 0..200),
            any::<u64>(),
        ),
        1..20,
    )
}

fn encode(records: &[(Vec<u8>, Vec<u8>, u64)], base: u64, codec: Codec) -> Vec<u8> {
    let records: Vec<CommitRecord<'_>> = records
        .iter()
        .map(|(key, payload, time)| CommitRecord::new(key, payload, *time))
        .collect();
    frame::encode_frame(
        &records,
        base,
        codec,
        CompressionLevel::Fastest,
        FRAME_BYTES_MAX,
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic_and_never_decode_without_a_good_crc(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        if frame::decode_frame(&bytes, SMALL_FRAME_LIMIT).is_ok() {
            prop_assert!(stored_crc_matches(&bytes));
        }
        let _ = frame::check_frame(&bytes, SMALL_FRAME_LIMIT);
    }

    #[test]
    fn arbitrary_bytes_behind_a_valid_magic_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 27..400), flags in 0u8..2) {
        bytes[0] = 0xCA;
        bytes[1] = 0xFE;
        bytes[2] = flags;
        if frame::decode_frame(&bytes, SMALL_FRAME_LIMIT).is_ok() {
            prop_assert!(stored_crc_matches(&bytes));
        }
    }

    #[test]
    fn frames_round_trip(records in arb_records(), base in 0u64..(1 << 62), zstd in any::<bool>()) {
        let codec = if zstd { Codec::Zstd } else { Codec::None };
        let bytes = encode(&records, base, codec);
        let (header, decoded) = frame::decode_frame(&bytes, FRAME_BYTES_MAX).unwrap();
        prop_assert_eq!(header.base_offset, base);
        prop_assert_eq!(decoded.len(), records.len());
        for (index, (record, (key, payload, time))) in decoded.iter().zip(&records).enumerate() {
            prop_assert_eq!(record.offset, base + index as u64);
            prop_assert_eq!(&record.key, key);
            prop_assert_eq!(&record.payload, payload);
            prop_assert_eq!(record.committed_at_ms, *time);
        }
    }

    #[test]
    fn a_damaged_frame_never_decodes_to_other_records(
        records in arb_records(),
        zstd in any::<bool>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let codec = if zstd { Codec::Zstd } else { Codec::None };
        let original = encode(&records, 5, codec);
        let mut damaged = original.clone();
        for (at, mask) in flips {
            let at = at.index(damaged.len());
            // The magic is outside the CRC; damage there is caught as a bad magic.
            damaged[at] ^= mask;
        }
        if damaged != original {
            prop_assert!(frame::decode_frame(&damaged, FRAME_BYTES_MAX).is_err());
        }
    }

    #[test]
    fn opening_an_arbitrary_active_segment_never_panics_and_serves_only_crc_clean_records(
        segment in prop::collection::vec(any::<u8>(), 0..2_000),
        splice_valid in any::<bool>(),
    ) {
        let sim = SimDisk::new(1);
        let dir = Path::new("/p");
        sim.create_dir_all(dir).unwrap();
        let mut bytes = segment;
        if splice_valid {
            bytes.extend(encode(&[(b"k".to_vec(), b"v".to_vec(), 1)], 0, Codec::None));
        }
        let file = sim.open(&dir.join(segment_file_name(0)), OpenOptions::CREATE).unwrap();
        if !bytes.is_empty() {
            file.write_at(0, IoBuf::from_slice(&bytes)).wait().unwrap();
        }
        drop(file);
        let log = PartitionLog::open(Arc::new(sim.clone()), dir, LogConfig::default()).unwrap();
        let entries = read_all(&log, 0);
        let served: u64 = entries.iter().map(|e| match e {
            ReadEntry::Record(_) => 1,
            ReadEntry::Unreadable { offsets } => offsets.end - offsets.start,
        }).sum();
        prop_assert_eq!(served, log.high_watermark());
        if splice_valid {
            prop_assert!(log.high_watermark() >= 1);
        }
    }
}
