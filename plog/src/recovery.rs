//! Recovery at open: finding the boundary of the active segment.
//!
//! Only the active (last) segment is scanned; sealed segments are trusted by
//! name and checked when read. The scan accepts every frame that passes its
//! CRC with a base offset that does not go backwards. Then:
//!
//! - bytes after the last valid frame are a torn tail: truncated, and the
//!   truncate synced;
//! - a damaged stretch with valid frames after it is corruption under
//!   committed data: left in place, its offsets a permanent gap;
//! - a stored `hwm` below the tail cuts the tail back to it (records above
//!   a closed log's boundary are a hidden tail that must never be served).
//!
//! A commit written into prepared zeros (`commit::prepare_ahead`) is an
//! overwrite, and a power cut can tear an overwrite anywhere: some of its
//! sectors new, others still zeros, so a hole can sit in front of valid
//! frames of the same, unacknowledged, commit. Such a write is at most
//! [`PREPARED_WRITE_BYTES_MAX`] long and is the last in the file. So a
//! damaged stretch with valid frames after it is taken for a torn tail, and
//! cut with them, when the last valid frame ends within that many bytes of
//! the stretch's start and the file ends in prepared zeros (at least
//! [`PREPARE_ALIGN_BYTES`] of them, which every such write leaves after
//! it). The cost: damage to already synced frames that close to the end
//! cannot be told from a tear and is cut too.

use std::ops::Range;

use narad_disk::FileHandle;

use crate::config::{LogConfig, PREPARE_ALIGN_BYTES, PREPARED_WRITE_BYTES_MAX};
use crate::error::LogError;
use crate::frame;
use crate::scan::{FrameScanner, ScanItem};
use crate::segment::SparseIndex;

/// A valid frame found by the scan.
#[derive(Clone, Copy, Debug)]
struct FrameSpan {
    base_offset: u64,
    end_offset: u64,
    position: u64,
    frame_bytes: u64,
}

/// What recovery found and left in the active segment.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub(crate) index: SparseIndex,
    /// Bytes of the segment after recovery: every one is part of a kept
    /// frame or of a damaged stretch under one.
    pub(crate) committed_bytes: u64,
    /// The recovered high watermark.
    pub(crate) tail_offset: u64,
    /// Commit time of the segment's first and last kept records.
    pub(crate) oldest_ms: Option<u64>,
    pub(crate) newest_ms: Option<u64>,
    /// Offsets lost to corruption under later valid frames.
    pub(crate) gaps: Vec<Range<u64>>,
    /// Bytes cut off the end (torn tail or hidden tail).
    pub(crate) truncated_bytes: u64,
}

/// Scans the active segment, truncates what must go, and returns its state.
///
/// # Errors
/// A disk error while reading, truncating or syncing.
pub(crate) fn recover_active(
    file: &FileHandle,
    base_offset: u64,
    stored_hwm: Option<u64>,
    config: &LogConfig,
) -> Result<Recovered, LogError> {
    let size = file
        .size()
        .map_err(LogError::io("stat the active segment"))?;
    let mut frames = Vec::new();
    let mut damaged = Vec::new();
    let mut scanner = FrameScanner::new(file, 0, size, base_offset, config.frame_bytes_max);
    while let Some(item) = scanner
        .next_item()
        .map_err(LogError::io("scan the active segment"))?
    {
        match item {
            ScanItem::Frame {
                position, header, ..
            } => frames.push(FrameSpan {
                base_offset: header.base_offset,
                end_offset: header.end_offset(),
                position,
                frame_bytes: header.frame_bytes(),
            }),
            ScanItem::Damaged {
                position,
                end_position,
            } => damaged.push(position..end_position),
        }
    }
    cut_torn_overwrite(&mut frames, &damaged, file, size)?;
    let kept_end = frames.last().map_or(0, |f| f.position + f.frame_bytes);
    for stretch in damaged.iter().filter(|stretch| stretch.start < kept_end) {
        tracing::warn!(
            segment = %file.path().display(),
            position = stretch.start,
            end_position = stretch.end,
            "damaged bytes in the active partition log segment"
        );
    }
    if let Some(stored) = stored_hwm {
        cut_to_stored_hwm(&mut frames, stored, base_offset, file);
    }
    let keep_bytes = frames.last().map_or(0, |f| f.position + f.frame_bytes);
    if keep_bytes < size {
        tracing::warn!(
            segment = %file.path().display(),
            keep_bytes,
            size,
            "truncating the tail of the active partition log segment"
        );
        file.truncate(keep_bytes)
            .wait()
            .map_err(LogError::io("truncate the active segment tail"))?;
        file.fdatasync()
            .wait()
            .map_err(LogError::io("sync the truncated active segment"))?;
    }
    let mut index = SparseIndex::new(config.index_interval_bytes);
    let mut gaps = Vec::new();
    let mut expected = base_offset;
    for span in &frames {
        if span.base_offset > expected {
            gaps.push(expected..span.base_offset);
        }
        index.note_frame(span.base_offset, span.position);
        expected = span.end_offset;
    }
    for gap in &gaps {
        tracing::error!(
            segment = %file.path().display(),
            first = gap.start,
            end = gap.end,
            "corruption under committed records: these offsets are a permanent gap"
        );
    }
    let oldest_ms = first_and_last_times(file, frames.first(), config)?.map(|t| t.0);
    let newest_ms = first_and_last_times(file, frames.last(), config)?.map(|t| t.1);
    Ok(Recovered {
        index,
        committed_bytes: keep_bytes,
        tail_offset: expected,
        oldest_ms,
        newest_ms,
        gaps,
        truncated_bytes: size - keep_bytes,
    })
}

/// Drops the frames after a hole that a torn overwrite can have left (see
/// the module doc): those from the first damaged stretch that has valid
/// frames after it, when the last of them ends within
/// [`PREPARED_WRITE_BYTES_MAX`] of the stretch's start.
fn cut_torn_overwrite(
    frames: &mut Vec<FrameSpan>,
    damaged: &[Range<u64>],
    file: &FileHandle,
    size: u64,
) -> Result<(), LogError> {
    let end = frames.last().map_or(0, |f| f.position + f.frame_bytes);
    let Some(hole) = damaged.iter().find(|stretch| stretch.start < end) else {
        return Ok(());
    };
    if end - hole.start > PREPARED_WRITE_BYTES_MAX || !ends_in_prepared_zeros(file, end, size)? {
        return Ok(());
    }
    let keep = frames.partition_point(|f| f.position < hole.start);
    tracing::warn!(
        segment = %file.path().display(),
        position = hole.start,
        dropped_frames = frames.len() - keep,
        "a torn write left a hole before its last frames; cutting the tail there"
    );
    frames.truncate(keep);
    Ok(())
}

/// Whether the file ends in at least [`PREPARE_ALIGN_BYTES`] of zeros after
/// `end`, as every commit written into prepared zeros leaves it.
fn ends_in_prepared_zeros(file: &FileHandle, end: u64, size: u64) -> Result<bool, LogError> {
    if size < end + PREPARE_ALIGN_BYTES {
        return Ok(false);
    }
    let tail = file
        .read_at(size - PREPARE_ALIGN_BYTES, PREPARE_ALIGN_BYTES as usize)
        .wait()
        .map_err(LogError::io("read the end of the active segment"))?;
    Ok(tail.len() == PREPARE_ALIGN_BYTES as usize && tail.iter().all(|&b| b == 0))
}

/// Drops frames at or above a stored boundary. A frame straddling it (which
/// a consistent log never has) is dropped whole, because the next commit
/// must start at a frame boundary.
fn cut_to_stored_hwm(
    frames: &mut Vec<FrameSpan>,
    stored: u64,
    base_offset: u64,
    file: &FileHandle,
) {
    if stored < base_offset {
        tracing::warn!(
            segment = %file.path().display(),
            stored,
            base_offset,
            "stored high watermark is below the active segment; recovering from the tail instead"
        );
        return;
    }
    let tail = frames.last().map_or(base_offset, |f| f.end_offset);
    if stored > tail {
        tracing::warn!(
            segment = %file.path().display(),
            stored,
            tail,
            "stored high watermark is above the verified tail; using the tail"
        );
        return;
    }
    let keep = frames.partition_point(|f| f.end_offset <= stored);
    if let Some(straddling) = frames.get(keep).filter(|f| f.base_offset < stored) {
        tracing::error!(
            segment = %file.path().display(),
            stored,
            frame_base = straddling.base_offset,
            "stored high watermark falls inside a frame; dropping the frame"
        );
    }
    if keep < frames.len() {
        tracing::info!(
            segment = %file.path().display(),
            stored,
            dropped_frames = frames.len() - keep,
            "dropping the hidden tail above the stored high watermark"
        );
    }
    frames.truncate(keep);
}

/// Commit times of the first and last record of a frame.
fn first_and_last_times(
    file: &FileHandle,
    span: Option<&FrameSpan>,
    config: &LogConfig,
) -> Result<Option<(u64, u64)>, LogError> {
    let Some(span) = span else {
        return Ok(None);
    };
    let bytes = file
        .read_at(span.position, span.frame_bytes as usize)
        .wait()
        .map_err(LogError::io("read a recovered frame"))?;
    match frame::decode_frame(&bytes, config.frame_bytes_max) {
        Ok((_, records)) => Ok(records
            .first()
            .zip(records.last())
            .map(|(f, l)| (f.committed_at_ms, l.committed_at_ms))),
        Err(error) => {
            // The CRC passed, so the writer itself produced a frame this
            // decoder refuses; reads will report it as unreadable.
            tracing::error!(segment = %file.path().display(), position = span.position, %error, "recovered frame does not decode");
            Ok(None)
        }
    }
}
