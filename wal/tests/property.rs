//! Property tests: whatever bytes a segment holds, recovery and the reader
//! never panic and never yield a record whose checksum did not match.

// Test helpers outside `#[test]` functions unwrap too: a failure is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::small_options;
use narad_disk::sim::SimDisk;
use narad_disk::{Disk, IoBuf, OpenOptions};
use narad_wal::frame::{check_frame, encode_frame, payload_crc};
use narad_wal::segment::{PREP_TRAILER_BYTES, prep_trailer, segment_path};
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
