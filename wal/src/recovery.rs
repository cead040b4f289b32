//! Recovery at open: what the directory holds, what is a torn tail, and what
//! is corruption.
//!
//! The rules, in the order they are applied:
//! - the active (last) segment is fdatasynced before it is read, so frames a
//!   crashed process left in the page cache are durable before they count;
//! - every segment is read whole and its frames checked (magic, length,
//!   CRC32C) and numbered: each segment starts at the sequence number after
//!   the previous one's last record, and inside a segment sequence numbers
//!   go up by one. A CRC-valid frame with the wrong number is corruption;
//! - the first bad frame of a segment ends its data. After it, a segment may
//!   hold only: nothing; zeros up to a preparation trailer (the unused part
//!   of a prepared segment); or, in the last segment only, a torn tail;
//! - a torn tail is a bad frame with no valid frame after it, or, when the
//!   segment ends in a preparation trailer, a bad frame followed by valid
//!   frames all starting within the trailer's write limit of it (a torn
//!   overwrite can leave a hole before valid frames of the same write). A
//!   torn tail is truncated at the bad frame and the truncate synced;
//! - anything else is [`WalError::Corrupt`], naming file and offset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use narad_disk::{Disk, FileHandle, OpenOptions};

use crate::direct::DirectTail;
use crate::error::WalError;
use crate::frame::{check_frame, valid_frames_after};
use crate::options::{PREP_RUN_BYTES_MAX, WalOptions};
use crate::prep::{self, Prep};
use crate::segment::{
    PREP_FILE_NAME, PREP_TRAILER_BYTES, parse_prep_trailer, parse_segment_name, segment_path,
};

/// The active segment as the sync loop takes it over.
#[derive(Debug)]
pub(crate) struct Active {
    pub(crate) base: u64,
    pub(crate) file: FileHandle,
    /// End of its durable data: the next frame goes here.
    pub(crate) end: u64,
    /// For a prepared (zero-filled, trailer-ended) segment, the write limit
    /// its trailer holds; `None` for a plain one.
    pub(crate) write_limit: Option<u64>,
    /// Set once the sync loop writes it with `O_DIRECT` (`file` is then the
    /// direct handle).
    pub(crate) direct: Option<DirectTail>,
}

/// What open found.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// Every segment's base and the end of its data.
    pub(crate) segments: BTreeMap<u64, u64>,
    /// The sequence number after the last record.
    pub(crate) next_seq: u64,
    pub(crate) active: Active,
    /// Where a torn tail was cut, if one was.
    pub(crate) truncated_at: Option<(PathBuf, u64)>,
}

/// How one segment's bytes end.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SegmentScan {
    /// The sequence number after its last valid record.
    pub(crate) next_seq: u64,
    /// End of its valid frames.
    pub(crate) data_end: u64,
    /// The write limit of its valid preparation trailer; `None` when it has
    /// none.
    pub(crate) write_limit: Option<u64>,
    /// Whether the bytes after `data_end` are a torn tail to cut off.
    pub(crate) torn: bool,
}

/// Checks one segment's bytes. `last` says whether it is the last segment,
/// the only one allowed a torn tail.
///
/// # Errors
/// [`WalError::Corrupt`] as the module doc states.
pub(crate) fn scan_segment(
    path: &Path,
    bytes: &[u8],
    base: u64,
    last: bool,
    payload_max: usize,
) -> Result<SegmentScan, WalError> {
    let trailer_limit = parse_prep_trailer(bytes, PREP_RUN_BYTES_MAX);
    let region = match trailer_limit {
        Some(_) => bytes.len() - PREP_TRAILER_BYTES,
        None => bytes.len(),
    };
    let data = &bytes[..region];
    let mut at = 0usize;
    let mut next_seq = base;
    let mut fault = None;
    while at < region {
        match check_frame(&data[at..], payload_max) {
            Ok(header) if header.seq == next_seq => {
                at += header.frame_len();
                next_seq += 1;
            }
            Ok(header) => {
                return Err(WalError::corrupt(
                    path,
                    at as u64,
                    format!(
                        "frame has sequence {} where {next_seq} was expected",
                        header.seq
                    ),
                ));
            }
            Err(bad) => {
                fault = Some(bad);
                break;
            }
        }
    }
    let clean = SegmentScan {
        next_seq,
        data_end: at as u64,
        write_limit: trailer_limit,
        torn: false,
    };
    let Some(fault) = fault else {
        return Ok(clean);
    };
    if trailer_limit.is_some() && data[at..].iter().all(|&b| b == 0) {
        return Ok(clean);
    }
    let corrupt = |why: &str| {
        Err(WalError::corrupt(
            path,
            at as u64,
            format!("{fault}; {why}"),
        ))
    };
    if !last {
        return corrupt("a sealed segment must hold only whole, valid frames");
    }
    let later = valid_frames_after(data, at + 1, payload_max);
    match (later.last(), trailer_limit) {
        (None, _) => {}
        (Some(&furthest), Some(limit)) if ((furthest - at) as u64) < limit => {}
        (Some(&furthest), Some(limit)) => {
            return corrupt(&format!(
                "a valid frame at offset {furthest} lies beyond the write limit {limit} of the bad frame"
            ));
        }
        (Some(&first), None) => {
            return corrupt(&format!(
                "a valid frame follows at offset {first} in a segment that was not prepared"
            ));
        }
    }
    Ok(SegmentScan {
        torn: true,
        write_limit: None,
        ..clean
    })
}

/// Opens the directory, checks every segment and cuts a torn tail.
///
/// # Errors
/// [`WalError::Corrupt`] for damage that is not a torn tail, or
/// [`WalError::Io`].
pub(crate) fn recover(
    disk: &dyn Disk,
    dir: &Path,
    options: &WalOptions,
) -> Result<Recovered, WalError> {
    let bases = list_segments(disk, dir)?;
    let Some(&last_base) = bases.last() else {
        return create_first_segment(disk, dir, options);
    };
    let last_path = segment_path(dir, last_base);
    let last_file = disk
        .open(&last_path, OpenOptions::EXISTING)
        .map_err(|e| WalError::io("open", &last_path, e))?;
    last_file
        .fdatasync()
        .wait()
        .map_err(|e| WalError::io("fdatasync at open", &last_path, e))?;

    let mut segments = BTreeMap::new();
    let mut expected: Option<u64> = None;
    let mut last_scan = None;
    for &base in &bases {
        let path = segment_path(dir, base);
        if let Some(expected) = expected
            && base != expected
        {
            return Err(WalError::corrupt(
                &path,
                0,
                format!("segment starts at sequence {base} but the one before ends at {expected}"),
            ));
        }
        let is_last = base == last_base;
        let file = if is_last {
            last_file.clone()
        } else {
            disk.open(&path, OpenOptions::EXISTING)
                .map_err(|e| WalError::io("open", &path, e))?
        };
        let bytes = read_whole(&file, &path)?;
        let scan = scan_segment(&path, &bytes, base, is_last, options.record_bytes_max)?;
        segments.insert(base, scan.data_end);
        expected = Some(scan.next_seq);
        if is_last {
            last_scan = Some(scan);
        }
    }
    let scan = last_scan.expect("the last segment was scanned");
    let truncated_at = if scan.torn {
        cut_torn_tail(&last_file, &last_path, scan.data_end)?;
        Some((last_path, scan.data_end))
    } else {
        None
    };
    Ok(Recovered {
        segments,
        next_seq: scan.next_seq,
        active: Active {
            base: last_base,
            file: last_file,
            end: scan.data_end,
            write_limit: scan.write_limit,
            direct: None,
        },
        truncated_at,
    })
}

/// Creates the directory if needed, removes a stale spare, and returns the
/// segments' bases in order.
fn list_segments(disk: &dyn Disk, dir: &Path) -> Result<Vec<u64>, WalError> {
    disk.create_dir_all(dir)
        .map_err(|e| WalError::io("create directory", dir, e))?;
    let names = disk
        .list_dir(dir)
        .map_err(|e| WalError::io("list directory", dir, e))?;
    if names.iter().any(|n| n == PREP_FILE_NAME) {
        // A spare is rebuilt from scratch: one left by a crash may be partly
        // zero-filled, and it holds no records.
        let prep = dir.join(PREP_FILE_NAME);
        disk.remove_file(&prep)
            .map_err(|e| WalError::io("remove stale spare", &prep, e))?;
    }
    let mut bases: Vec<u64> = names.iter().filter_map(|n| parse_segment_name(n)).collect();
    bases.sort_unstable();
    Ok(bases)
}

/// Truncates the last segment at `offset` and makes the cut durable before
/// anything is appended after it.
fn cut_torn_tail(file: &FileHandle, path: &Path, offset: u64) -> Result<(), WalError> {
    tracing::warn!(
        path = %path.display(),
        offset,
        "truncating a torn tail of the ingress WAL"
    );
    file.truncate(offset)
        .wait()
        .map_err(|e| WalError::io("truncate torn tail", path, e))?;
    file.fdatasync()
        .wait()
        .map_err(|e| WalError::io("fdatasync after truncate", path, e))
}

/// Creates segment 0 of a new log. With `prealloc` it is prepared like any
/// spare (zero-filled, trailer, fdatasync, then renamed into place), so the
/// first records already take the prepared path. When that fails (a disk
/// too small for a whole segment), it is created empty, as a roll does
/// without a spare, and a warning says why: the log works the same.
fn create_first_segment(
    disk: &dyn Disk,
    dir: &Path,
    options: &WalOptions,
) -> Result<Recovered, WalError> {
    let path = segment_path(dir, 0);
    let mut write_limit = None;
    if options.prealloc {
        let spare = dir.join(PREP_FILE_NAME);
        let prepared = prep::prepare(&Prep::new(), disk, dir, options)
            .and_then(|_| disk.rename(&spare, &path));
        match prepared {
            Ok(()) => write_limit = Some(options.prep_run_bytes_max),
            Err(error) => {
                tracing::warn!(
                    %error,
                    "preparing the first ingress WAL segment failed; it starts empty and unprepared"
                );
                let _ = disk.remove_file(&spare);
            }
        }
    }
    let file = disk
        .open(&path, OpenOptions::CREATE)
        .map_err(|e| WalError::io("create segment", &path, e))?;
    disk.sync_dir(dir)
        .map_err(|e| WalError::io("sync directory", dir, e))?;
    Ok(Recovered {
        segments: BTreeMap::from([(0, 0)]),
        next_seq: 0,
        active: Active {
            base: 0,
            file,
            end: 0,
            write_limit,
            direct: None,
        },
        truncated_at: None,
    })
}

fn read_whole(file: &FileHandle, path: &Path) -> Result<Vec<u8>, WalError> {
    let size = file.size().map_err(|e| WalError::io("stat", path, e))?;
    let len = usize::try_from(size)
        .map_err(|_| WalError::corrupt(path, 0, format!("segment of {size} bytes")))?;
    let bytes = file
        .read_at(0, len)
        .wait()
        .map_err(|e| WalError::io("read", path, e))?;
    if bytes.len() != len {
        return Err(WalError::io(
            "read",
            path,
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "segment shrank while read",
            ),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::encode_frame;
    use crate::segment::prep_trailer;

    const MAX: usize = 1 << 20;

    fn frames(base: u64, count: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        for seq in base..base + count {
            encode_frame(&mut bytes, seq, format!("record {seq}").as_bytes());
        }
        bytes
    }

    fn prepared(mut data: Vec<u8>, size: usize, limit: u64) -> Vec<u8> {
        data.resize(size - PREP_TRAILER_BYTES, 0);
        data.extend_from_slice(&prep_trailer(limit));
        data
    }

    fn scan(bytes: &[u8], last: bool) -> Result<SegmentScan, WalError> {
        scan_segment(Path::new("seg"), bytes, 10, last, MAX)
    }

    #[test]
    fn whole_frames_scan_clean() {
        let bytes = frames(10, 3);
        let scan = scan(&bytes, false).unwrap();
        assert_eq!(scan.next_seq, 13);
        assert_eq!(scan.data_end, bytes.len() as u64);
        assert!(!scan.torn);
    }

    #[test]
    fn a_cut_last_frame_of_the_last_segment_is_a_torn_tail() {
        let bytes = frames(10, 3);
        let cut = &bytes[..bytes.len() - 3];
        let scan = scan(cut, true).unwrap();
        assert!(scan.torn);
        assert_eq!(scan.next_seq, 12);
    }

    #[test]
    fn a_cut_frame_in_a_sealed_segment_is_corruption() {
        let bytes = frames(10, 3);
        let error = scan(&bytes[..bytes.len() - 3], false).unwrap_err();
        assert!(matches!(error, WalError::Corrupt { .. }), "{error}");
    }

    #[test]
    fn a_wrong_sequence_number_is_corruption_even_at_the_tail() {
        let mut bytes = frames(10, 2);
        encode_frame(&mut bytes, 13, b"skipped one");
        let error = scan(&bytes, true).unwrap_err();
        assert!(error.to_string().contains("sequence 13"), "{error}");
    }

    #[test]
    fn zeros_after_frames_of_a_prepared_segment_are_free_space() {
        let bytes = prepared(frames(10, 2), 4096, 1024);
        let scan = scan(&bytes, false).unwrap();
        assert_eq!(scan.next_seq, 12);
        assert_eq!(scan.write_limit, Some(1024));
        assert!(!scan.torn);
    }

    #[test]
    fn a_hole_before_valid_frames_within_the_limit_is_a_torn_tail() {
        let mut data = frames(10, 2);
        let hole_at = data.len();
        data.extend_from_slice(&[0u8; 64]);
        encode_frame(&mut data, 13, b"after the hole");
        let bytes = prepared(data, 4096, 1024);
        let scan = scan(&bytes, true).unwrap();
        assert!(scan.torn);
        assert_eq!(scan.data_end, hole_at as u64);
        assert_eq!(scan.next_seq, 12);
    }

    #[test]
    fn a_hole_before_valid_frames_beyond_the_limit_is_corruption() {
        let mut data = frames(10, 2);
        data.extend_from_slice(&[0u8; 600]);
        encode_frame(&mut data, 13, b"far after the hole");
        let bytes = prepared(data, 4096, 512);
        assert!(matches!(scan(&bytes, true), Err(WalError::Corrupt { .. })));
    }

    #[test]
    fn a_hole_before_valid_frames_without_a_trailer_is_corruption() {
        let mut data = frames(10, 2);
        data.extend_from_slice(&[0u8; 64]);
        encode_frame(&mut data, 13, b"after the hole");
        assert!(matches!(scan(&data, true), Err(WalError::Corrupt { .. })));
    }

    #[test]
    fn a_hole_before_valid_frames_in_a_sealed_prepared_segment_is_corruption() {
        let mut data = frames(10, 2);
        data.extend_from_slice(&[0u8; 64]);
        encode_frame(&mut data, 13, b"after the hole");
        let bytes = prepared(data, 4096, 1024);
        assert!(matches!(scan(&bytes, false), Err(WalError::Corrupt { .. })));
    }
}
