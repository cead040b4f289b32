//! A closed partition log's figures, read from its files without opening
//! it: what metrics and describe need of a partition whose log nobody
//! holds open (spec §5.6: metrics and describe never open a log).
//!
//! Nothing here writes, truncates or syncs: an open recovers and repairs,
//! a look does not. The figures are therefore what the files say now. For
//! a log closed cleanly that is exact (its `hwm` file holds the high
//! watermark, its active segment ends in its data). After a crash the
//! `hwm` file is empty and the high watermark is taken from the last frame
//! of the active segment that passes its CRC, which is what recovery keeps
//! except for the rare torn overwrite it cuts (`docs/internals/plog.md`).
//! A log opened or closed while a look runs may give a mixed answer, or a
//! `NotFound`; the caller looks again later.

use std::io;
use std::path::Path;

use narad_disk::{Disk, OpenOptions};

use crate::frame;
use crate::hwm;
use crate::scan::{FrameScanner, ScanItem};
use crate::segment::{parse_segment_file_name, segment_path};

/// What a partition directory's files say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirFigures {
    /// Segment files, sealed and active.
    pub segments: usize,
    /// Bytes of all segment files.
    pub size_bytes: u64,
    /// First offset of the oldest segment.
    pub oldest_offset: u64,
    /// First offset of the newest (active) segment.
    pub active_base: u64,
    /// Bytes of the active segment file.
    pub active_bytes: u64,
    /// The `hwm` file's value: `None` when it is missing, empty or torn
    /// (the log is open, or was not closed cleanly).
    pub stored_high_watermark: Option<u64>,
}

/// The figures of the partition directory `dir`, or `None` when it does
/// not exist or holds no segment.
///
/// # Errors
/// A disk error listing the directory or sizing a segment (a segment
/// removed meanwhile is `NotFound`).
pub fn inspect_dir(disk: &dyn Disk, dir: &Path) -> io::Result<Option<DirFigures>> {
    let names = match disk.list_dir(dir) {
        Ok(names) => names,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let mut bases: Vec<u64> = names
        .iter()
        .filter_map(|name| parse_segment_file_name(name))
        .collect();
    bases.sort_unstable();
    let (Some(&oldest_offset), Some(&active_base)) = (bases.first(), bases.last()) else {
        return Ok(None);
    };
    let mut size_bytes = 0u64;
    let mut active_bytes = 0;
    for &base in &bases {
        let bytes = disk
            .open(&segment_path(dir, base), OpenOptions::EXISTING)?
            .size()?;
        size_bytes = size_bytes.saturating_add(bytes);
        active_bytes = bytes;
    }
    Ok(Some(DirFigures {
        segments: bases.len(),
        size_bytes,
        oldest_offset,
        active_base,
        active_bytes,
        stored_high_watermark: hwm::read(disk, dir)?,
    }))
}

/// The high watermark the active segment's frames give: the end of its
/// last frame that passes its CRC, or its base when it holds none. Reads
/// the whole active segment (up to the roll size): callers keep the answer
/// while the file does not change.
///
/// # Errors
/// A disk error.
pub fn tail_high_watermark(
    disk: &dyn Disk,
    dir: &Path,
    figures: &DirFigures,
    frame_bytes_max: u32,
) -> io::Result<u64> {
    let file = disk.open(
        &segment_path(dir, figures.active_base),
        OpenOptions::EXISTING,
    )?;
    let mut scanner = FrameScanner::new(
        &file,
        0,
        figures.active_bytes,
        figures.active_base,
        frame_bytes_max,
    );
    let mut high_watermark = figures.active_base;
    while let Some(item) = scanner.next_item()? {
        if let ScanItem::Frame { header, .. } = item {
            high_watermark = header.end_offset();
        }
    }
    Ok(high_watermark)
}

/// The commit time (Unix milliseconds) of the record at `offset`, or of
/// the first readable record after it in the same segment; `None` when the
/// segment holding it has none (damaged, or `offset` is past its data).
/// Walks the segment from its start to the record.
///
/// # Errors
/// A disk error; `NotFound` when the segment went meanwhile.
pub fn commit_time_at(
    disk: &dyn Disk,
    dir: &Path,
    figures: &DirFigures,
    offset: u64,
    frame_bytes_max: u32,
) -> io::Result<Option<u64>> {
    if offset < figures.oldest_offset {
        return Ok(None);
    }
    let names = disk.list_dir(dir)?;
    let Some(base) = names
        .iter()
        .filter_map(|name| parse_segment_file_name(name))
        .filter(|&base| base <= offset)
        .max()
    else {
        return Ok(None);
    };
    let file = disk.open(&segment_path(dir, base), OpenOptions::EXISTING)?;
    let size = file.size()?;
    let mut scanner = FrameScanner::new(&file, 0, size, base, frame_bytes_max);
    while let Some(item) = scanner.next_item()? {
        let ScanItem::Frame { header, bytes, .. } = item else {
            continue;
        };
        if header.end_offset() <= offset {
            continue;
        }
        let Ok((_, records)) = frame::decode_frame(bytes, frame_bytes_max) else {
            continue;
        };
        if let Some(record) = records.iter().find(|record| record.offset >= offset) {
            return Ok(Some(record.committed_at_ms));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use narad_clock::{Clock, ManualClock};
    use narad_disk::sim::SimDisk;

    use super::*;
    use crate::{CommitRecord, LogConfig, PartitionLog};

    fn log_with(disk: &Arc<dyn Disk>, dir: &Path, times_ms: &[u64]) -> PartitionLog {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let config = LogConfig {
            segment_bytes: 200,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(Arc::clone(disk), dir, config, clock).expect("open");
        for &at_ms in times_ms {
            let record = CommitRecord::new(b"", b"payload", at_ms);
            log.commit_durable(&[&[record]]).expect("commit");
        }
        log
    }

    #[test]
    fn a_closed_log_is_read_from_its_files() {
        let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(1));
        let dir = Path::new("/p00000");
        let log = log_with(&disk, dir, &[1_000, 2_000, 3_000, 4_000, 5_000]);
        let stats = log.stats().expect("stats");
        log.close().expect("close");
        let figures = inspect_dir(&*disk, dir).expect("read").expect("segments");
        assert_eq!(figures.stored_high_watermark, Some(5));
        assert_eq!(figures.segments, stats.segments);
        assert_eq!(figures.size_bytes, stats.size_bytes);
        let max = LogConfig::default().frame_bytes_max;
        assert_eq!(
            tail_high_watermark(&*disk, dir, &figures, max).expect("scan"),
            5
        );
        assert_eq!(
            commit_time_at(&*disk, dir, &figures, 3, max).expect("read"),
            Some(4_000)
        );
        assert_eq!(
            commit_time_at(&*disk, dir, &figures, 5, max).expect("read"),
            None
        );
    }

    #[test]
    fn a_directory_without_segments_has_no_figures() {
        let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(2));
        assert_eq!(inspect_dir(&*disk, Path::new("/none")).expect("read"), None);
    }
}
