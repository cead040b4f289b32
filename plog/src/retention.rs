//! Retention: a pure decision, and the worker that carries it out.
//!
//! [`choose`] looks at the ages of a partition's segments and returns which
//! to delete; [`must_roll_by_age`] tells a commit whether the active segment
//! must roll first. Neither does I/O. [`PartitionLog::sweep_retention`]
//! gathers the ages, asks [`choose`], seals an idle active segment if told
//! to, and unlinks outside the locks. The loop that sweeps a node's logs,
//! with each topic's retention, belongs to the data plane (its `node`
//! module), which knows the topics.
//!
//! Record lifetime is bounded by roll age + retention + sweep interval:
//! about twice the retention when the roll age is the retention.

use std::sync::atomic::Ordering;

use crate::error::LogError;
use crate::frame::{self, FRAME_HEADER_BYTES, FRAME_MAGIC};
use crate::log::{PartitionLog, SealedSegment};

/// How far back from a sealed segment's end to look for its last frame
/// before falling back to a full scan.
const LAST_FRAME_SEARCH_BYTES: u64 = 2 << 20;

/// The age of one segment, as [`choose`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentAge {
    /// The segment's first offset.
    pub base_offset: u64,
    /// Commit time of its newest record; `None` when it holds no readable
    /// record (all damaged), so it can only be dated by a younger segment.
    pub last_write_ms: Option<u64>,
}

/// What [`choose`] needs to know about a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionInput {
    /// Now, in Unix milliseconds.
    pub now_ms: u64,
    /// The topic's retention; 0 keeps everything forever.
    pub retention_ms: u64,
    /// Sealed segments, oldest first.
    pub sealed: Vec<SegmentAge>,
    /// The active segment; `last_write_ms` is `None` when it is empty.
    pub active: SegmentAge,
    /// Whether every byte of the active segment is committed (no hidden
    /// tail); only then may it be sealed and deleted.
    pub active_fully_committed: bool,
}

/// What to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionChoice {
    /// Base offsets of the segments to delete, oldest first. May include
    /// the active segment's, in which case `seal_active` is set.
    pub delete: Vec<u64>,
    /// Seal the active segment (start a new one) so it can be deleted.
    pub seal_active: bool,
}

fn expired(last_write_ms: u64, now_ms: u64, retention_ms: u64) -> bool {
    now_ms.saturating_sub(last_write_ms) > retention_ms
}

/// Chooses the segments past retention: the longest run of oldest segments
/// whose newest record is older than `retention_ms`, so what remains is
/// contiguous. An undatable segment goes only with a younger expired one.
/// An idle active segment goes too when everything before it goes, it is
/// not empty, and it holds no uncommitted bytes.
pub fn choose(input: &RetentionInput) -> RetentionChoice {
    let mut choice = RetentionChoice::default();
    if input.retention_ms == 0 {
        return choice;
    }
    let mut undated = Vec::new();
    for segment in &input.sealed {
        match segment.last_write_ms {
            None => undated.push(segment.base_offset),
            Some(last) if expired(last, input.now_ms, input.retention_ms) => {
                choice.delete.append(&mut undated);
                choice.delete.push(segment.base_offset);
            }
            Some(_) => return choice,
        }
    }
    let active_expired = input
        .active
        .last_write_ms
        .is_some_and(|last| expired(last, input.now_ms, input.retention_ms));
    if active_expired && input.active_fully_committed {
        choice.delete.append(&mut undated);
        choice.delete.push(input.active.base_offset);
        choice.seal_active = true;
    }
    choice
}

/// Whether the active segment must roll before a commit at `now_ms`: its
/// oldest record is older than `roll_age_ms` (0 never rolls by age).
pub fn must_roll_by_age(oldest_ms: Option<u64>, now_ms: u64, roll_age_ms: u64) -> bool {
    roll_age_ms > 0 && oldest_ms.is_some_and(|oldest| expired(oldest, now_ms, roll_age_ms))
}

/// What one sweep of one log did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Base offsets of the segments deleted.
    pub deleted: Vec<u64>,
    /// Bytes those segments held.
    pub deleted_bytes: u64,
    /// Offsets the log no longer holds: every segment dropped from it,
    /// its unlink failed or not.
    pub deleted_messages: u64,
    /// Segments dropped from the log whose unlink failed
    /// (`errors_total{component="storage",kind="retention_unlink"}`).
    pub unlink_failures: u64,
}

impl PartitionLog {
    /// Deletes the segments past `retention_ms` at `now_ms`; nothing once
    /// the log is closed (its directory may be renamed or replaced then).
    ///
    /// # Errors
    /// A disk error while dating a segment or sealing the active one.
    /// Unlink failures are counted in the report instead.
    pub fn sweep_retention(&self, now_ms: u64, retention_ms: u64) -> Result<SweepReport, LogError> {
        let _sweeping = self.sweeping.lock();
        if retention_ms == 0 || self.writer.lock().closed {
            return Ok(SweepReport::default());
        }
        let input = self.retention_input(now_ms, retention_ms)?;
        let mut choice = choose(&input);
        if choice.seal_active && !self.seal_idle_active(&input)? {
            choice
                .delete
                .retain(|&base| base != input.active.base_offset);
        }
        let (removed, first_kept) = {
            let mut table = self.table.write();
            let (removed, kept): (Vec<_>, Vec<_>) = table
                .sealed
                .drain(..)
                .partition(|s| choice.delete.contains(&s.base_offset));
            table.sealed = kept;
            let first_kept = table
                .sealed
                .first()
                .map_or(table.active.base_offset, |s| s.base_offset);
            (removed, first_kept)
        };
        let mut report = SweepReport {
            deleted_messages: removed
                .first()
                .map_or(0, |oldest| first_kept.saturating_sub(oldest.base_offset)),
            ..SweepReport::default()
        };
        for segment in &removed {
            match self.disk.remove_file(&segment.path) {
                Ok(()) => {
                    report.deleted.push(segment.base_offset);
                    report.deleted_bytes += segment.size_bytes;
                }
                Err(error) => {
                    report.unlink_failures += 1;
                    tracing::error!(segment = %segment.path.display(), %error, "retention could not unlink a segment");
                }
            }
        }
        if !removed.is_empty() {
            if let Err(error) = self.disk.sync_dir(&self.dir) {
                // The unlinks may come back after a crash; the next sweep
                // deletes them again.
                tracing::warn!(dir = %self.dir.display(), %error, "syncing the partition directory after retention failed");
            }
            tracing::info!(dir = %self.dir.display(), deleted = ?report.deleted, reason = "age", "retention deleted segments");
        }
        Ok(report)
    }

    fn retention_input(&self, now_ms: u64, retention_ms: u64) -> Result<RetentionInput, LogError> {
        let (sealed, active, active_fully_committed) = {
            let table = self.table.read();
            let active = SegmentAge {
                base_offset: table.active.base_offset,
                last_write_ms: table
                    .active
                    .newest_ms
                    .filter(|_| table.active.committed_bytes > 0),
            };
            let size = table.active.file.size().unwrap_or(u64::MAX);
            (
                table.sealed.clone(),
                active,
                size == table.active.file_bytes && !self.is_poisoned(),
            )
        };
        let mut ages = Vec::with_capacity(sealed.len());
        for segment in &sealed {
            ages.push(SegmentAge {
                base_offset: segment.base_offset,
                last_write_ms: self.sealed_last_write_ms(segment)?,
            });
        }
        Ok(RetentionInput {
            now_ms,
            retention_ms,
            sealed: ages,
            active,
            active_fully_committed,
        })
    }

    /// Seals the active segment for deletion if nothing was committed to it
    /// since the input was gathered. Returns whether it did.
    fn seal_idle_active(&self, input: &RetentionInput) -> Result<bool, LogError> {
        let writer = self.writer.lock();
        if writer.closed || self.poisoned.load(Ordering::Acquire) {
            return Ok(false);
        }
        let unchanged = {
            let table = self.table.read();
            table.active.base_offset == input.active.base_offset
                && table.active.newest_ms == input.active.last_write_ms
        };
        if !unchanged {
            return Ok(false);
        }
        self.roll(&writer)?;
        Ok(true)
    }

    /// Commit time of a sealed segment's newest record, found once by
    /// looking for the frame that ends exactly at the end of the file, or
    /// else by scanning the whole segment.
    pub(crate) fn sealed_last_write_ms(
        &self,
        segment: &SealedSegment,
    ) -> Result<Option<u64>, LogError> {
        if let Some(&known) = segment.last_write_ms.get() {
            return Ok(known);
        }
        let start = segment.size_bytes.saturating_sub(LAST_FRAME_SEARCH_BYTES);
        let tail = segment
            .file
            .read_at(start, (segment.size_bytes - start) as usize)
            .wait()
            .map_err(LogError::io("read the tail of a sealed segment"))?;
        if let Some(last) = last_record_time(&tail, self.config.frame_bytes_max) {
            let _ = segment.last_write_ms.set(Some(last));
            return Ok(Some(last));
        }
        let index = self.build_sealed_index(segment)?;
        let _ = segment.index.set(index);
        Ok(segment.last_write_ms.get().copied().flatten())
    }
}

/// The commit time of the last record of the frame that ends exactly at the
/// end of `tail`, if one does.
fn last_record_time(tail: &[u8], frame_bytes_max: u32) -> Option<u64> {
    let limit = tail.len().checked_sub(FRAME_HEADER_BYTES)?;
    (0..=limit)
        .filter(|&at| tail[at..at + 2] == FRAME_MAGIC)
        .find_map(|at| {
            let header = frame::check_frame(&tail[at..], frame_bytes_max).ok()?;
            if at as u64 + header.frame_bytes() != tail.len() as u64 {
                return None;
            }
            let (_, records) = frame::decode_frame(&tail[at..], frame_bytes_max).ok()?;
            records.last().map(|r| r.committed_at_ms)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR_MS: u64 = 3_600_000;

    fn input(
        sealed: &[(u64, Option<u64>)],
        active: (u64, Option<u64>),
        now_ms: u64,
    ) -> RetentionInput {
        RetentionInput {
            now_ms,
            retention_ms: HOUR_MS,
            sealed: sealed
                .iter()
                .map(|&(base_offset, last_write_ms)| SegmentAge {
                    base_offset,
                    last_write_ms,
                })
                .collect(),
            active: SegmentAge {
                base_offset: active.0,
                last_write_ms: active.1,
            },
            active_fully_committed: true,
        }
    }

    #[test]
    fn retention_zero_keeps_everything_forever() {
        let mut input = input(&[(0, Some(0))], (10, Some(0)), 100 * HOUR_MS);
        input.retention_ms = 0;
        assert_eq!(choose(&input), RetentionChoice::default());
    }

    #[test]
    fn deletes_the_oldest_run_of_expired_sealed_segments() {
        let now = 10 * HOUR_MS;
        let choice = choose(&input(
            &[
                (0, Some(HOUR_MS)),
                (10, Some(2 * HOUR_MS)),
                (20, Some(9 * HOUR_MS + 1)),
            ],
            (30, Some(now)),
            now,
        ));
        assert_eq!(choice.delete, vec![0, 10]);
        assert!(!choice.seal_active);
    }

    #[test]
    fn a_segment_exactly_at_retention_is_kept() {
        let now = 10 * HOUR_MS;
        let choice = choose(&input(&[(0, Some(now - HOUR_MS))], (30, Some(now)), now));
        assert!(choice.delete.is_empty());
    }

    #[test]
    fn stops_at_the_first_young_segment_so_offsets_stay_contiguous() {
        let now = 10 * HOUR_MS;
        // A clock step made segment 10 look younger than segment 20.
        let choice = choose(&input(
            &[(0, Some(0)), (10, Some(now)), (20, Some(0))],
            (30, Some(now)),
            now,
        ));
        assert_eq!(choice.delete, vec![0]);
    }

    #[test]
    fn undatable_segment_goes_only_with_a_younger_expired_one() {
        let now = 10 * HOUR_MS;
        let with_younger = choose(&input(&[(0, None), (10, Some(0))], (30, Some(now)), now));
        assert_eq!(with_younger.delete, vec![0, 10]);
        let alone = choose(&input(&[(0, Some(0)), (10, None)], (30, Some(now)), now));
        assert_eq!(alone.delete, vec![0]);
    }

    #[test]
    fn idle_expired_active_segment_is_sealed_and_deleted() {
        let now = 10 * HOUR_MS;
        let choice = choose(&input(&[(0, Some(0))], (30, Some(HOUR_MS)), now));
        assert_eq!(choice.delete, vec![0, 30]);
        assert!(choice.seal_active);
    }

    #[test]
    fn active_segment_with_uncommitted_bytes_is_kept() {
        let now = 10 * HOUR_MS;
        let mut input = input(&[], (30, Some(HOUR_MS)), now);
        input.active_fully_committed = false;
        assert_eq!(choose(&input), RetentionChoice::default());
    }

    #[test]
    fn empty_active_segment_is_never_sealed() {
        let now = 10 * HOUR_MS;
        let choice = choose(&input(&[(0, Some(0))], (30, None), now));
        assert_eq!(choice.delete, vec![0]);
        assert!(!choice.seal_active);
    }

    #[test]
    fn active_rolls_by_age_only_past_the_roll_age() {
        assert!(!must_roll_by_age(Some(1_000), 1_000 + HOUR_MS, HOUR_MS));
        assert!(must_roll_by_age(Some(1_000), 1_001 + HOUR_MS, HOUR_MS));
        assert!(!must_roll_by_age(None, u64::MAX, HOUR_MS));
        assert!(!must_roll_by_age(Some(0), u64::MAX, 0));
    }

    #[test]
    fn last_record_time_finds_the_frame_ending_at_the_tail() {
        use crate::frame::{Codec, CompressionLevel, FRAME_BYTES_MAX, encode_frame};
        use crate::record::CommitRecord;
        let record = |t| CommitRecord::new(b"k", b"\xca\xfe inside a payload", t);
        let mut tail = encode_frame(
            &[record(5)],
            0,
            Codec::None,
            CompressionLevel::Default,
            FRAME_BYTES_MAX,
        )
        .unwrap();
        tail.extend(
            encode_frame(
                &[record(6), record(7)],
                1,
                Codec::None,
                CompressionLevel::Default,
                FRAME_BYTES_MAX,
            )
            .unwrap(),
        );
        assert_eq!(last_record_time(&tail, FRAME_BYTES_MAX), Some(7));
        assert_eq!(
            last_record_time(&tail[..tail.len() - 1], FRAME_BYTES_MAX),
            None
        );
    }
}
