//! Recovery at open on hand-built directories (simulated disk): what is a
//! torn tail and cut, and what is corruption and fails loudly.

// Test helpers outside `#[test]` functions unwrap too: a failure is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{prealloc_options, read_all, small_options};
use narad_disk::sim::{SimDisk, Tear};
use narad_disk::{Disk, IoBuf, OpenOptions};
use narad_wal::frame::encode_frame;
use narad_wal::segment::{PREP_TRAILER_BYTES, prep_trailer, segment_path};
use narad_wal::{Wal, WalError, WalOptions};

fn dir() -> PathBuf {
    PathBuf::from("/wal")
}

fn frames(range: std::ops::Range<u64>) -> Vec<u8> {
    let mut bytes = Vec::new();
    for seq in range {
        encode_frame(
            &mut bytes,
            seq,
            format!("payload of record {seq}").as_bytes(),
        );
    }
    bytes
}

fn prepared(mut data: Vec<u8>, options: &WalOptions) -> Vec<u8> {
    data.resize(options.segment_bytes as usize - PREP_TRAILER_BYTES, 0);
    data.extend_from_slice(&prep_trailer(options.prep_run_bytes_max));
    data
}

/// Writes a durable segment file.
fn put(disk: &SimDisk, path: &Path, bytes: &[u8], sync: bool) {
    disk.create_dir_all(&dir()).unwrap();
    let file = disk.open(path, OpenOptions::CREATE).unwrap();
    file.write_at(0, IoBuf::from_slice(bytes)).wait().unwrap();
    if sync {
        file.fdatasync().wait().unwrap();
    }
    disk.sync_dir(&dir()).unwrap();
}

fn open(disk: &SimDisk, options: WalOptions) -> Result<Wal, WalError> {
    Wal::open(Arc::new(disk.clone()), dir(), options)
}

fn corrupt_at(error: WalError) -> (PathBuf, u64) {
    match error {
        WalError::Corrupt { path, offset, .. } => (path, offset),
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn a_torn_tail_is_truncated_and_the_truncate_is_durable() {
    let disk = SimDisk::new(1);
    let mut bytes = frames(0..5);
    let whole = bytes.len() as u64;
    bytes.extend_from_slice(&frames(5..6)[..17]);
    put(&disk, &segment_path(&dir(), 0), &bytes, true);
    let wal = open(&disk, small_options()).unwrap();
    assert_eq!(wal.truncated_at_open().map(|(_, at)| at), Some(whole));
    assert_eq!(wal.next_seq(), 5);
    drop(wal);
    disk.crash(Tear::None);
    let wal = open(&disk, small_options()).unwrap();
    assert_eq!(wal.truncated_at_open(), None, "the cut survived the crash");
    assert_eq!(read_all(&wal, 0).len(), 5);
}

#[test]
fn the_active_segment_is_fdatasynced_at_open() {
    let disk = SimDisk::new(2);
    put(&disk, &segment_path(&dir(), 0), &frames(0..4), false);
    drop(open(&disk, small_options()).unwrap());
    disk.crash(Tear::None);
    let wal = open(&disk, small_options()).unwrap();
    assert_eq!(wal.next_seq(), 4);
}

#[test]
fn damage_in_a_sealed_segment_fails_the_open_naming_file_and_offset() {
    let disk = SimDisk::new(3);
    let mut first = frames(0..3);
    let second_frame_at = frames(0..1).len();
    first[second_frame_at + 25] ^= 0x40;
    put(&disk, &segment_path(&dir(), 0), &first, true);
    put(&disk, &segment_path(&dir(), 3), &frames(3..5), true);
    let error = open(&disk, small_options()).unwrap_err();
    let message = error.to_string();
    let (path, offset) = corrupt_at(error);
    assert_eq!(path, segment_path(&dir(), 0));
    assert_eq!(offset, second_frame_at as u64);
    assert!(message.contains("00000000000000000000.wal"), "{message}");
}

#[test]
fn a_missing_segment_between_two_is_corruption() {
    let disk = SimDisk::new(4);
    put(&disk, &segment_path(&dir(), 0), &frames(0..3), true);
    put(&disk, &segment_path(&dir(), 5), &frames(5..7), true);
    let (path, offset) = corrupt_at(open(&disk, small_options()).unwrap_err());
    assert_eq!((path, offset), (segment_path(&dir(), 5), 0));
}

#[test]
fn a_frame_with_the_wrong_sequence_number_fails_the_open() {
    let disk = SimDisk::new(5);
    let mut bytes = frames(0..3);
    bytes.extend_from_slice(&frames(4..5));
    put(&disk, &segment_path(&dir(), 0), &bytes, true);
    let (_, offset) = corrupt_at(open(&disk, small_options()).unwrap_err());
    assert_eq!(offset, frames(0..3).len() as u64);
}

#[test]
fn a_hole_before_valid_frames_in_a_prepared_last_segment_is_cut_at_the_hole() {
    let disk = SimDisk::new(6);
    let options = prealloc_options();
    let mut data = frames(0..3);
    let hole_at = data.len();
    data.extend_from_slice(&vec![0u8; frames(3..4).len()]);
    data.extend_from_slice(&frames(4..6));
    put(
        &disk,
        &segment_path(&dir(), 0),
        &prepared(data, &options),
        true,
    );
    let wal = open(&disk, options).unwrap();
    assert_eq!(
        wal.truncated_at_open().map(|(_, at)| at),
        Some(hole_at as u64)
    );
    assert_eq!(read_all(&wal, 0).len(), 3);
    assert_eq!(wal.append(b"next").unwrap().wait().unwrap(), 3..4);
}

#[test]
fn a_hole_before_valid_frames_beyond_the_write_limit_fails_the_open() {
    let disk = SimDisk::new(7);
    let options = prealloc_options();
    let mut data = frames(0..3);
    let hole_at = data.len();
    data.resize(hole_at + options.prep_run_bytes_max as usize + 100, 0);
    data.extend_from_slice(&frames(4..5));
    put(
        &disk,
        &segment_path(&dir(), 0),
        &prepared(data, &options),
        true,
    );
    let (_, offset) = corrupt_at(open(&disk, options).unwrap_err());
    assert_eq!(offset, hole_at as u64);
}

#[test]
fn a_hole_before_valid_frames_in_an_unprepared_segment_fails_the_open() {
    let disk = SimDisk::new(8);
    let mut data = frames(0..3);
    data.extend_from_slice(&[0u8; 40]);
    data.extend_from_slice(&frames(4..5));
    put(&disk, &segment_path(&dir(), 0), &data, true);
    assert!(matches!(
        open(&disk, small_options()),
        Err(WalError::Corrupt { .. })
    ));
}

#[test]
fn a_hole_before_valid_frames_in_a_sealed_prepared_segment_fails_the_open() {
    let disk = SimDisk::new(9);
    let options = prealloc_options();
    let mut data = frames(0..3);
    data.extend_from_slice(&[0u8; 40]);
    data.extend_from_slice(&frames(4..5));
    put(
        &disk,
        &segment_path(&dir(), 0),
        &prepared(data, &options),
        true,
    );
    put(&disk, &segment_path(&dir(), 5), &frames(5..6), true);
    assert!(matches!(
        open(&disk, options),
        Err(WalError::Corrupt { .. })
    ));
}

#[test]
fn an_untrimmed_sealed_prepared_segment_opens() {
    let disk = SimDisk::new(10);
    let options = prealloc_options();
    put(
        &disk,
        &segment_path(&dir(), 0),
        &prepared(frames(0..3), &options),
        true,
    );
    put(&disk, &segment_path(&dir(), 3), &frames(3..5), true);
    let wal = open(&disk, options).unwrap();
    assert_eq!(read_all(&wal, 0).len(), 5);
}

#[test]
fn a_clean_prepared_last_segment_keeps_its_space_and_is_written_in_place() {
    let disk = SimDisk::new(11);
    let options = prealloc_options();
    let path = segment_path(&dir(), 0);
    put(&disk, &path, &prepared(frames(0..3), &options), true);
    let wal = open(&disk, options.clone()).unwrap();
    assert_eq!(wal.truncated_at_open(), None);
    wal.append(b"in place").unwrap().wait().unwrap();
    assert_eq!(
        disk.read_file(&path).unwrap().len() as u64,
        options.segment_bytes
    );
    drop(wal);
    let wal = open(&disk, options).unwrap();
    assert_eq!(read_all(&wal, 3), vec![(3, b"in place".to_vec())]);
}
