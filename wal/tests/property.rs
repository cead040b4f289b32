//! Property tests: whatever bytes a segment holds, recovery and the reader
//! never panic and never yield a record whose checksum did not match; the
//! frame decoder, the preparation trailer, segment names and the dispatch
//! checkpoint file take any bytes without panicking.

// Test helpers outside `#[test]` functions unwrap too: a failure is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::small_options;
use narad_clock::SystemClock;
use narad_disk::sim::SimDisk;
use narad_disk::{Disk, IoBuf, OpenOptions};
use narad_wal::checkpoint::{
    CHECKPOINT_FILE_NAME, CheckpointConfig, CheckpointError, CheckpointStore,
};
use narad_wal::frame::{
    FRAME_HEADER_BYTES, FRAME_MAGIC, FrameFault, check_frame, encode_frame, payload_crc,
};
use narad_wal::segment::{
    PREP_TRAILER_BYTES, parse_prep_trailer, parse_segment_name, prep_trailer, segment_name,
    segment_path,
};
use narad_wal::{Wal, WalError};
use proptest::prelude::*;

fn dir() -> PathBuf {
    PathBuf::from("/prop/wal")
}

/// Puts `bytes` as segment 0 of a fresh simulated disk and opens the log.
fn open_with(bytes: &[u8]) -> Result<Wal, WalError> {
    let disk = SimDisk::new(0);
    disk.create_dir_all(&dir()).unwrap();
    let file = disk
        .open(&segment_path(&dir(), 0), OpenOptions::CREATE)
        .unwrap();
    if !bytes.is_empty() {
        file.write_at(0, IoBuf::from_slice(bytes)).wait().unwrap();
    }
    file.fdatasync().wait().unwrap();
    disk.sync_dir(&dir()).unwrap();
    Wal::open(Arc::new(disk), dir(), small_options())
}

/// Every record the log yields, or the reader's error.
fn records(wal: &Wal) -> Result<Vec<(u64, Vec<u8>)>, WalError> {
    let mut reader = wal.reader(wal.oldest_seq())?;
    let mut out = Vec::new();
    while let Some(frame) = reader.next_frame()? {
        out.push((frame.seq, frame.payload.to_vec()));
    }
    Ok(out)
}

fn originals(count: usize, len_seed: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut bytes = Vec::new();
    let mut payloads = Vec::new();
    for seq in 0..count {
        let len = 1 + (seq * 131 + len_seed) % 700;
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + seq) as u8).collect();
        encode_frame(&mut bytes, seq as u64, &payload);
        payloads.push(payload);
    }
    (bytes, payloads)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn the_frame_decoder_never_panics_and_checks_the_crc(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(header) = check_frame(&bytes, 1 << 20) {
            let payload = &bytes[20..header.frame_len()];
            prop_assert_eq!(payload_crc(payload), header.crc);
        }
    }

    #[test]
    fn arbitrary_segment_bytes_never_panic_recovery(
        bytes in prop::collection::vec(any::<u8>(), 0..3000),
        with_trailer in any::<bool>(),
    ) {
        let mut bytes = bytes;
        if with_trailer {
            bytes.resize(small_options().segment_bytes as usize - PREP_TRAILER_BYTES, 0);
            bytes.extend_from_slice(&prep_trailer(small_options().prep_run_bytes_max));
        }
        if let Ok(wal) = open_with(&bytes) {
            for (seq, payload) in records(&wal).unwrap() {
                let mut frame = Vec::new();
                encode_frame(&mut frame, seq, &payload);
                let present = bytes.windows(frame.len()).any(|w| w == frame.as_slice());
                prop_assert!(present, "record {} is not a checksummed frame of the segment", seq);
            }
        }
    }

    #[test]
    fn damaged_segments_never_yield_a_damaged_record(
        count in 1usize..12,
        len_seed in 0usize..1000,
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..4),
        cut in prop::option::of(any::<prop::sample::Index>()),
        zeros in prop::option::of((any::<prop::sample::Index>(), 1usize..600)),
        with_trailer in any::<bool>(),
    ) {
        let (mut bytes, payloads) = originals(count, len_seed);
        for (at, mask) in flips {
            let at = at.index(bytes.len());
            bytes[at] ^= mask;
        }
        if let Some((at, len)) = zeros {
            let at = at.index(bytes.len());
            let end = (at + len).min(bytes.len());
            bytes[at..end].fill(0);
        }
        if let Some(at) = cut {
            bytes.truncate(at.index(bytes.len() + 1));
        }
        if with_trailer {
            bytes.resize(small_options().segment_bytes as usize - PREP_TRAILER_BYTES, 0);
            bytes.extend_from_slice(&prep_trailer(small_options().prep_run_bytes_max));
        }
        match open_with(&bytes) {
            Ok(wal) => {
                for (index, (seq, payload)) in records(&wal).unwrap().into_iter().enumerate() {
                    prop_assert_eq!(seq, index as u64);
                    prop_assert_eq!(&payload, &payloads[index]);
                }
            }
            Err(WalError::Corrupt { .. }) => {}
            Err(other) => prop_assert!(false, "unexpected error {}", other),
        }
    }
}

/// Puts a checkpoint file of `bytes` beside the log and opens the store.
fn open_checkpoint_of(bytes: &[u8]) -> Result<CheckpointStore, CheckpointError> {
    let disk = SimDisk::new(0);
    disk.create_dir_all(&dir()).unwrap();
    let file = disk
        .open(&dir().join(CHECKPOINT_FILE_NAME), OpenOptions::CREATE)
        .unwrap();
    if !bytes.is_empty() {
        file.write_at(0, IoBuf::from_slice(bytes)).wait().unwrap();
    }
    file.fdatasync().wait().unwrap();
    drop(file);
    CheckpointStore::open(
        &disk,
        &dir(),
        CheckpointConfig::default(),
        Arc::new(SystemClock::new()),
    )
}

// The default 256 cases, or `PROPTEST_CASES`.
proptest! {
    /// A frame with a byte changed, cut short or followed by more bytes:
    /// the header is not covered by the CRC, so a changed sequence number
    /// may still check, but the payload never checks unless it is the one
    /// the CRC was computed over.
    #[test]
    fn a_mutated_frame_never_panics_and_checks_only_with_its_payload(
        seq in any::<u64>(),
        payload in prop::collection::vec(any::<u8>(), 1..300),
        at in any::<prop::sample::Index>(),
        mask in 1u8..=255,
        cut in any::<prop::sample::Index>(),
        extra in prop::collection::vec(any::<u8>(), 0..32),
    ) {
        let mut frame = Vec::new();
        encode_frame(&mut frame, seq, &payload);
        prop_assert_eq!(check_frame(&frame, 1 << 20).map(|h| h.seq), Ok(seq));

        let mut flipped = frame.clone();
        flipped[at.index(frame.len())] ^= mask;
        if let Ok(header) = check_frame(&flipped, 1 << 20) {
            prop_assert_eq!(&flipped[FRAME_HEADER_BYTES..header.frame_len()], payload.as_slice());
        }

        let cut = cut.index(frame.len());
        prop_assert!(check_frame(&frame[..cut], 1 << 20).is_err());

        let mut extended = frame.clone();
        extended.extend_from_slice(&extra);
        prop_assert_eq!(check_frame(&extended, 1 << 20).map(|h| h.frame_len()), Ok(frame.len()));
    }

    /// A hostile length is refused from the header alone, before any payload
    /// is read or reserved.
    #[test]
    fn a_length_over_the_limit_is_refused_from_the_header(
        len in (1u32 << 20) + 1..=u32::MAX,
        rest in prop::collection::vec(any::<u8>(), 16..64),
    ) {
        let mut bytes = FRAME_MAGIC.to_vec();
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes.extend_from_slice(&rest);
        prop_assert_eq!(check_frame(&bytes, 1 << 20), Err(FrameFault::BadLength(len)));
    }

    #[test]
    fn the_prep_trailer_round_trips_and_any_file_end_parses_without_panic(
        limit in 1u64..=1 << 24,
        file in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let _ = parse_prep_trailer(&file, 1 << 24);
        let mut prepared = file;
        prepared.extend_from_slice(&prep_trailer(limit));
        prop_assert_eq!(parse_prep_trailer(&prepared, 1 << 24), Some(limit));
    }

    #[test]
    fn segment_names_round_trip_and_nothing_else_parses(base in any::<u64>(), name in "\\PC{0,28}") {
        prop_assert_eq!(parse_segment_name(&segment_name(base)), Some(base));
        if let Some(parsed) = parse_segment_name(&name) {
            prop_assert_eq!(segment_name(parsed), name);
        }
    }
}

proptest! {
    // Each case starts and stops the checkpoint's flusher thread.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any eight bytes are a checkpoint, read big-endian; any other size is
    /// refused as corrupt with its size, never read as a guess.
    #[test]
    fn a_checkpoint_file_of_any_bytes_opens_only_at_eight_bytes(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..20),
            any::<u64>().prop_map(|value| value.to_be_bytes().to_vec()),
        ],
    ) {
        match (open_checkpoint_of(&bytes), <[u8; 8]>::try_from(bytes.as_slice())) {
            (Ok(store), Ok(value)) => prop_assert_eq!(store.stored(), u64::from_be_bytes(value)),
            (Err(CheckpointError::Corrupt { size, .. }), Err(_)) => {
                prop_assert_eq!(size, bytes.len() as u64);
            }
            (other, _) => prop_assert!(false, "{} bytes gave {:?}", bytes.len(), other.map(|s| s.stored())),
        }
    }
}
