//! Property tests for the decoders of a partition log's bytes on disk: the
//! frame decoder (also behind a good CRC), the segment scan, the `hwm` file
//! and segment file names.

// Helpers outside `#[test]` functions panic on failure like the tests do.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{Owned, commit, read_all};
use narad_clock::{Clock, SystemClock};
use narad_disk::sim::SimDisk;
use narad_disk::{Disk, IoBuf, OpenOptions};
use narad_plog::frame::{self, FRAME_BYTES_MAX, FRAME_HEADER_BYTES};
use narad_plog::segment::{parse_segment_file_name, segment_file_name};
use narad_plog::{
    Codec, CommitRecord, CompressionLevel, HWM_FILE_NAME, LogConfig, PartitionLog, ReadEntry,
};
use proptest::prelude::*;

/// A frame limit small enough that arbitrary headers often fall inside it.
const SMALL_FRAME_LIMIT: u32 = 1 << 16;

/// The clock the logs measure their durations on.
fn clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock::new())
}

fn stored_crc_matches(bytes: &[u8]) -> bool {
    let header = frame::FrameHeader::parse(bytes, FRAME_BYTES_MAX).unwrap();
    let end = header.frame_bytes() as usize;
    let mut covered = bytes[2..23].to_vec();
    covered.extend_from_slice(&bytes[FRAME_HEADER_BYTES..end]);
    crc32c::crc32c(&covered) == header.crc
}

/// Writes the CRC a frame's header and payload call for, so a test reaches
/// the decoder behind the checksum with bytes of its choosing (what a
/// hostile writer, or damage the CRC happens to miss, hands it).
fn seal(frame: &mut [u8]) {
    let mut covered = frame[2..23].to_vec();
    covered.extend_from_slice(&frame[FRAME_HEADER_BYTES..]);
    let crc = crc32c::crc32c(&covered);
    frame[23..27].copy_from_slice(&crc.to_be_bytes());
}

/// A sealed frame with the given header fields around `stored`.
fn sealed_frame(flags: u8, record_count: u32, uncompressed_bytes: u32, stored: &[u8]) -> Vec<u8> {
    let mut frame = vec![0xCA, 0xFE, flags];
    frame.extend_from_slice(&record_count.to_be_bytes());
    frame.extend_from_slice(&7u64.to_be_bytes());
    frame.extend_from_slice(&uncompressed_bytes.to_be_bytes());
    frame.extend_from_slice(&(stored.len() as u32).to_be_bytes());
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(stored);
    seal(&mut frame);
    frame
}

/// A record count: mostly small, sometimes anything a header can hold.
fn arb_record_count() -> impl Strategy<Value = u32> {
    prop_oneof![1u32..40, any::<u32>()]
}

/// Opens the log in `dir` on `sim`, commits `count` one-record frames and
/// closes it, leaving an `hwm` file of `count`.
fn closed_log_of(sim: &SimDisk, dir: &Path, count: u64) {
    sim.create_dir_all(dir).unwrap();
    let log =
        PartitionLog::open(Arc::new(sim.clone()), dir, LogConfig::default(), clock()).unwrap();
    for n in 0..count {
        commit(&log, &[Owned::new("k", &format!("record-{n}"), 1)]).unwrap();
    }
    log.close().unwrap();
}

fn put_file(sim: &SimDisk, path: &Path, bytes: &[u8]) {
    let file = sim.open(path, OpenOptions::CREATE).unwrap();
    file.truncate(0).wait().unwrap();
    if !bytes.is_empty() {
        file.write_at(0, IoBuf::from_slice(bytes)).wait().unwrap();
    }
    file.fdatasync().wait().unwrap();
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
        let log = PartitionLog::open(Arc::new(sim.clone()), dir, LogConfig::default(), clock()).unwrap();
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

// The default 256 cases, or `PROPTEST_CASES`.
proptest! {
    #[test]
    fn an_arbitrary_payload_behind_a_good_crc_never_panics(
        record_count in arb_record_count(),
        payload in prop::collection::vec(any::<u8>(), 1..400),
    ) {
        let frame = sealed_frame(0, record_count, payload.len() as u32, &payload);
        if let Ok((header, records)) = frame::decode_frame(&frame, SMALL_FRAME_LIMIT) {
            prop_assert_eq!(records.len() as u64, u64::from(header.record_count));
        }
    }

    /// The zstd path behind a good CRC: a declared size that is wrong, a
    /// stream that is not zstd, or one that holds garbage records are all
    /// errors; what decodes had exactly its declared size.
    #[test]
    fn an_arbitrary_zstd_payload_behind_a_good_crc_never_panics(
        record_count in arb_record_count(),
        plain in prop::collection::vec(any::<u8>(), 1..400),
        declared_slack in -8i64..8,
        compress in any::<bool>(),
    ) {
        let stored = if compress { zstd::encode_all(&plain[..], 1).unwrap() } else { plain.clone() };
        let declared = (plain.len() as i64 + declared_slack).clamp(1, i64::from(SMALL_FRAME_LIMIT));
        let frame = sealed_frame(1, record_count, declared as u32, &stored);
        if let Ok((header, records)) = frame::decode_frame(&frame, SMALL_FRAME_LIMIT) {
            prop_assert_eq!(records.len() as u64, u64::from(header.record_count));
            prop_assert_eq!(u64::from(header.uncompressed_bytes), plain.len() as u64);
        }
    }

    /// Damage the CRC would have caught, sealed again so it reaches the
    /// header checks, the decompressor and the record stream.
    #[test]
    fn a_damaged_and_resealed_frame_never_panics(
        records in arb_records(),
        zstd in any::<bool>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let codec = if zstd { Codec::Zstd } else { Codec::None };
        let mut frame = encode(&records, 5, codec);
        for (at, mask) in flips {
            // Past the magic and outside the CRC field, which `seal` rewrites.
            let at = 2 + at.index(frame.len() - 6);
            let at = if at >= 23 { at + 4 } else { at };
            frame[at] ^= mask;
        }
        seal(&mut frame);
        if let Ok((header, decoded)) = frame::decode_frame(&frame, FRAME_BYTES_MAX) {
            prop_assert_eq!(decoded.len() as u64, u64::from(header.record_count));
        }
    }

    #[test]
    fn a_cut_frame_is_refused_and_an_extended_one_decodes_only_by_check(
        records in arb_records(),
        zstd in any::<bool>(),
        cut in any::<prop::sample::Index>(),
        extra in prop::collection::vec(any::<u8>(), 1..16),
    ) {
        let codec = if zstd { Codec::Zstd } else { Codec::None };
        let frame = encode(&records, 5, codec);
        let cut = cut.index(frame.len());
        prop_assert!(frame::check_frame(&frame[..cut], FRAME_BYTES_MAX).is_err());
        prop_assert!(frame::decode_frame(&frame[..cut], FRAME_BYTES_MAX).is_err());
        let mut extended = frame.clone();
        extended.extend_from_slice(&extra);
        // A scan hands `check_frame` the rest of the segment; the frame
        // checks on its own bytes. Decoding takes exactly one frame.
        let checked = frame::check_frame(&extended, FRAME_BYTES_MAX).unwrap();
        prop_assert_eq!(checked.frame_bytes(), frame.len() as u64);
        prop_assert!(frame::decode_frame(&extended, FRAME_BYTES_MAX).is_err());
    }

    #[test]
    fn segment_file_names_round_trip_and_nothing_else_parses(base in any::<u64>(), name in "\\PC{0,28}") {
        prop_assert_eq!(parse_segment_file_name(&segment_file_name(base)), Some(base));
        if let Some(parsed) = parse_segment_file_name(&name) {
            prop_assert_eq!(segment_file_name(parsed), name);
        }
    }
}

proptest! {
    // Each case opens and closes a log twice on the simulated disk.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// An `hwm` file of any bytes never panics an open. Exactly eight bytes
    /// cut the log back to that boundary when it is at or below the verified
    /// tail; anything else (torn, oversized, a value past the tail) leaves the
    /// tail as the boundary.
    #[test]
    fn an_arbitrary_hwm_file_never_raises_the_boundary_past_the_tail(
        committed in 1u64..5,
        contents in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..12),
            (0u64..8).prop_map(|value| value.to_be_bytes().to_vec()),
        ],
    ) {
        let sim = SimDisk::new(3);
        let dir = Path::new("/hwm");
        closed_log_of(&sim, dir, committed);
        put_file(&sim, &dir.join(HWM_FILE_NAME), &contents);
        let log = PartitionLog::open(Arc::new(sim.clone()), dir, LogConfig::default(), clock()).unwrap();
        let expected = match <[u8; 8]>::try_from(contents.as_slice()) {
            Ok(value) => u64::from_be_bytes(value).min(committed),
            Err(_) => committed,
        };
        prop_assert_eq!(log.high_watermark(), expected);
        prop_assert_eq!(read_all(&log, 0).len() as u64, expected);
    }
}
