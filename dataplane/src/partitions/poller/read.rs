//! Reading one partition's figures: from its open log's memory, or from
//! the files of a closed one without opening it (`narad_plog::inspect`).
//! What was read at some cost (a commit time, a crashed log's tail) is
//! kept while what it depends on does not change.

use std::io;
use std::path::Path;

use narad_disk::Disk;
use narad_plog::inspect::{self, DirFigures};
use narad_plog::{LogError, PartitionLog, ReadEntry};

use super::decide::{PartitionFigures, unconsumed_start};

/// A commit time read for one unconsumed start: kept while the start (and
/// for a closed log its oldest offset) stays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TimeMemo {
    key: Option<(u64, u64)>,
    committed_at_ms: Option<u64>,
}

impl TimeMemo {
    fn get_or(
        &mut self,
        key: (u64, u64),
        read: impl FnOnce() -> io::Result<Option<u64>>,
    ) -> io::Result<Option<u64>> {
        if self.key != Some(key) {
            self.committed_at_ms = read()?;
            self.key = Some(key);
        }
        Ok(self.committed_at_ms)
    }
}

/// The high watermark a crashed log's active segment gave, kept while the
/// segment's base and size stay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TailMemo {
    key: Option<(u64, u64)>,
    high_watermark: u64,
}

/// The figures of an open log, from its memory; the commit time of the
/// unconsumed start from `memo` or one read of the log (the tail cache
/// usually holds it).
///
/// # Errors
/// A disk error dating the oldest segment or reading the record.
pub(crate) fn open_figures(
    log: &PartitionLog,
    frontier: Option<u64>,
    memo: &mut TimeMemo,
) -> io::Result<PartitionFigures> {
    let stats = log.stats().map_err(io::Error::other)?;
    let figures = PartitionFigures {
        high_watermark: stats.high_watermark,
        oldest_offset: stats.oldest_offset,
        frontier,
        unconsumed_committed_at_ms: None,
        size_bytes: stats.size_bytes,
        segments: stats.segments as u64,
    };
    dated(figures, memo, |start| match log.read_record(start) {
        Ok(Some(ReadEntry::Record(record))) => Ok(Some(record.committed_at_ms)),
        Ok(_) | Err(LogError::OffsetTrimmed { .. }) => Ok(None),
        Err(error) => Err(io::Error::other(error)),
    })
}

/// `figures` with the commit time of their first unconsumed record, if
/// any is unconsumed: `read` reads it at that offset, unless `memo` holds
/// it for the same offset and oldest offset.
fn dated(
    mut figures: PartitionFigures,
    memo: &mut TimeMemo,
    read: impl FnOnce(u64) -> io::Result<Option<u64>>,
) -> io::Result<PartitionFigures> {
    let start = unconsumed_start(&figures);
    if start < figures.high_watermark {
        figures.unconsumed_committed_at_ms =
            memo.get_or((start, figures.oldest_offset), || read(start))?;
    }
    Ok(figures)
}

/// The figures of the closed log in `dir`, from its files: sizes from the
/// segment files, the high watermark from the `hwm` file (or, after a
/// crash, from the active segment's frames, through `tail`), the commit
/// time of the unconsumed start from its segment (through `time`).
///
/// # Errors
/// A disk error; `NotFound` when a file went while it was read (the log
/// was opened, moved or retired meanwhile).
pub(crate) fn closed_figures(
    disk: &dyn Disk,
    dir: &Path,
    frontier: Option<u64>,
    frame_bytes_max: u32,
    tail: &mut TailMemo,
    time: &mut TimeMemo,
) -> io::Result<PartitionFigures> {
    let Some(files) = inspect::inspect_dir(disk, dir)? else {
        return Ok(PartitionFigures {
            frontier,
            ..PartitionFigures::EMPTY
        });
    };
    let high_watermark = match files.stored_high_watermark {
        Some(high_watermark) => high_watermark,
        None => tail_high_watermark(disk, dir, &files, frame_bytes_max, tail)?,
    };
    let figures = PartitionFigures {
        high_watermark,
        oldest_offset: files.oldest_offset,
        frontier,
        unconsumed_committed_at_ms: None,
        size_bytes: files.size_bytes,
        segments: files.segments as u64,
    };
    dated(figures, time, |start| {
        inspect::commit_time_at(disk, dir, &files, start, frame_bytes_max)
    })
}

fn tail_high_watermark(
    disk: &dyn Disk,
    dir: &Path,
    files: &DirFigures,
    frame_bytes_max: u32,
    memo: &mut TailMemo,
) -> io::Result<u64> {
    let key = (files.active_base, files.active_bytes);
    if memo.key != Some(key) {
        memo.high_watermark = inspect::tail_high_watermark(disk, dir, files, frame_bytes_max)?;
        memo.key = Some(key);
    }
    Ok(memo.high_watermark)
}
