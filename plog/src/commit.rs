//! `commit_durable`: the only place a record becomes visible.
//!
//! Under the writer lock: stamp and frame the run, empty the `hwm` file if
//! this is the first commit since open, roll the active segment if it is
//! full or too old, write every frame with one write, fdatasync once, read
//! the frames back and check each against what was written, then publish
//! index entries, size and the high watermark together and wake waiters.
//! Any failure truncates the segment back to where the commit started and
//! syncs that; a failed fdatasync (or a failed undo) poisons the log.

use std::ops::Range;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::Duration;

use narad_disk::{FileHandle, IoBuf, OpenOptions};

use crate::config::{PREPARE_ALIGN_BYTES, PREPARED_WRITE_BYTES_MAX};
use crate::dedupe::{ClaimedKey, REBUILD_RECORDS, RunClaims, Seen};
use crate::error::FrameError;
use crate::error::LogError;
use crate::frame;
use crate::hwm;
use crate::log::{ActiveSegment, PartitionLog, SealedSegment, Writer};
use crate::read::{ReadEntry, ReadLimits};
use crate::record::CommitRecord;
use crate::retention;
use crate::segment::{self, SparseIndex};
use crate::tail::CachedFrame;

/// A provenance rebuild at least this long is logged at `info`: the
/// partition's commits waited for it.
const REBUILD_SLOW_MS: u64 = 100;

/// A commit's write or read-back buffer at most this large is kept for the
/// committing thread's next commit; a larger one is freed. Small, because
/// every committing thread (48 on a data node) may keep two: a commit
/// larger than this pays for its allocation many times over in its write.
const KEPT_COMMIT_BUF_BYTES_MAX: usize = 256 << 10;

thread_local! {
    /// The last commit's write buffer on this thread, kept for its next
    /// commit (to any log): the buffer is page-aligned and zeroed when
    /// made, and making one per commit cost page faults and zeroing of
    /// fresh memory on every commit (perf, fan-out with 4 children).
    static WRITE_BUF: std::cell::Cell<Option<IoBuf>> = const { std::cell::Cell::new(None) };

    /// The last commit's read-back buffer on this thread, kept likewise.
    static READ_BACK_BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// An empty write buffer of at least `bytes`: the thread's kept one when it
/// is large enough.
fn take_write_buf(bytes: usize) -> IoBuf {
    match WRITE_BUF.take() {
        Some(mut buf) if buf.capacity() >= bytes => {
            buf.clear();
            buf
        }
        _ => IoBuf::with_capacity(bytes),
    }
}

/// Keeps `buf` for the thread's next commit, unless it is large.
fn keep_write_buf(buf: IoBuf) {
    if buf.capacity() <= KEPT_COMMIT_BUF_BYTES_MAX {
        WRITE_BUF.set(Some(buf));
    }
}

/// Keeps `buf` for the thread's next commit's read-back, unless it is large.
fn keep_read_back_buf(buf: Vec<u8>) {
    if buf.capacity() <= KEPT_COMMIT_BUF_BYTES_MAX {
        READ_BACK_BUF.set(buf);
    }
}

/// What a successful commit did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitOutcome {
    /// Offsets of the whole run, contiguous.
    pub offsets: Range<u64>,
    /// Offsets of each batch's stored records, in the order given.
    pub batch_offsets: Vec<Range<u64>>,
    /// Records of each batch that were not stored again because the
    /// partition already stores them (their origin, or their idempotency
    /// key within the window), in the order given.
    pub batch_already_stored: Vec<u32>,
    /// Payload bytes of the records stored (keys and envelopes not
    /// counted).
    pub payload_bytes: u64,
    /// Commit time of the run's last record (after raising).
    pub newest_commit_ms: u64,
    /// The high watermark after the commit.
    pub high_watermark: u64,
    /// How long the commit's write and fdatasync took, measured in
    /// microseconds on the log's clock; `None` for an empty run, which does
    /// no I/O.
    pub sync_duration: Option<Duration>,
}

/// One frame of a planned commit.
#[derive(Debug)]
struct PlannedFrame {
    base_offset: u64,
    record_count: u32,
    bytes: Vec<u8>,
}

/// A commit, stamped and encoded, before any I/O.
#[derive(Debug)]
struct Plan<'a> {
    frames: Vec<PlannedFrame>,
    offsets: Range<u64>,
    batch_offsets: Vec<Range<u64>>,
    batch_already_stored: Vec<u32>,
    /// The records to store, with their final commit times.
    stamped: Vec<CommitRecord<'a>>,
    /// The idempotency keys `stamped` claimed, hashed.
    claimed_keys: Vec<ClaimedKey<'a>>,
    oldest_ms: u64,
    newest_ms: u64,
    total_bytes: usize,
}

impl PartitionLog {
    /// Appends `batches` as one run of contiguous offsets and makes them
    /// durable and visible with one fdatasync.
    ///
    /// Each record's commit time is raised to the partition's newest, so
    /// times never go backwards along the partition. A record whose origin
    /// or idempotency key the partition already stores (see
    /// [`CommitOutcome::batch_already_stored`]) is left out. An empty run
    /// commits nothing and does no I/O.
    ///
    /// # Errors
    /// On any error nothing of the run is visible now or after a restart,
    /// and a retry lands on the same offsets. [`LogError::SyncFailed`]
    /// poisons the log; later commits then fail with [`LogError::Poisoned`]
    /// until one heals it (`heal.rs`: at most once per
    /// [`crate::HEAL_RETRY_MS`], the file cut back to the last commit).
    pub fn commit_durable(
        &self,
        batches: &[&[CommitRecord<'_>]],
    ) -> Result<CommitOutcome, LogError> {
        let mut writer = self.writer.lock();
        if writer.closed {
            return Err(LogError::Closed);
        }
        if self.is_poisoned() {
            self.heal_if_due(&mut writer)?;
        }
        let high_watermark = self.high_watermark();
        assert_eq!(
            writer.next_offset, high_watermark,
            "a commit starts at the high watermark"
        );
        let carries_provenance = batches
            .iter()
            .flat_map(|batch| batch.iter())
            .any(CommitRecord::has_provenance);
        if carries_provenance && writer.seen.is_none() {
            writer.seen = Some(self.rebuild_seen()?);
        }
        let window_ms = self.idempotency_window_ms.load(Ordering::Relaxed);
        let plan = self.plan(&writer, batches, window_ms)?;
        if plan.frames.is_empty() {
            return Ok(CommitOutcome {
                offsets: plan.offsets,
                batch_offsets: plan.batch_offsets,
                batch_already_stored: plan.batch_already_stored,
                payload_bytes: 0,
                newest_commit_ms: writer.newest_commit_ms,
                high_watermark,
                sync_duration: None,
            });
        }
        self.empty_hwm_file_once(&mut writer)?;
        self.roll_if_due(&writer, plan.newest_ms)?;
        let (file, position) = {
            let table = self.table.read();
            (table.active.file.clone(), table.active.committed_bytes)
        };
        self.prepare_ahead(&file, position, plan.total_bytes as u64)?;
        let sync_duration = match self.write_sync_verify(&file, position, &plan) {
            Ok(sync_duration) => sync_duration,
            Err(error) => {
                self.undo(&file, position);
                return Err(error);
            }
        };
        self.publish(&mut writer, position, &plan);
        if let Some(seen) = writer.seen.as_mut() {
            seen.expire_keys(plan.newest_ms, window_ms);
            seen.remember_all(&plan.stamped, &plan.claimed_keys);
        }
        let payload_bytes = plan.stamped.iter().map(|r| r.payload.len() as u64).sum();
        Ok(CommitOutcome {
            offsets: plan.offsets,
            batch_offsets: plan.batch_offsets,
            batch_already_stored: plan.batch_already_stored,
            payload_bytes,
            newest_commit_ms: plan.newest_ms,
            high_watermark: self.high_watermark(),
            sync_duration: Some(sync_duration),
        })
    }

    /// Rebuilds what the partition stores from the provenance of its
    /// newest records (see [`Self::rebuild_from`]).
    fn rebuild_seen(&self) -> Result<Seen, LogError> {
        let started_us = self.clock.now_us();
        let mut seen = Seen::default();
        let high_watermark = self.high_watermark();
        let mut from = self.rebuild_from(high_watermark);
        let mut records = 0u64;
        while from < high_watermark {
            let batch = match self.read(from, high_watermark, ReadLimits::default()) {
                Ok(batch) => batch,
                // Retention deleted the start meanwhile: go on from the
                // oldest offset left, which is always higher.
                Err(LogError::OffsetTrimmed { .. }) => {
                    let oldest = self.table.read().oldest_offset();
                    if oldest <= from {
                        break;
                    }
                    from = oldest;
                    continue;
                }
                Err(error) => return Err(error),
            };
            if batch.entries.is_empty() {
                break;
            }
            for entry in &batch.entries {
                if let ReadEntry::Record(record) = entry {
                    seen.remember_record(record);
                    records += 1;
                }
            }
            from = batch.next_offset;
        }
        let (origins, keys) = seen.sizes();
        let elapsed_ms = self.clock.now_us().saturating_sub(started_us) / 1_000;
        if elapsed_ms >= REBUILD_SLOW_MS {
            tracing::info!(dir = %self.dir.display(), records, origins, idempotency_keys = keys, elapsed_ms, "partition provenance rebuilt (slowly; commits to the partition waited)");
        } else {
            tracing::debug!(dir = %self.dir.display(), records, origins, idempotency_keys = keys, elapsed_ms, "partition provenance rebuilt");
        }
        Ok(seen)
    }

    /// Where the rebuild starts: [`REBUILD_RECORDS`] below the high
    /// watermark, or later if fewer segments hold the configured rebuild
    /// bytes ([`crate::REBUILD_BYTES`] by default): the active segment's
    /// index entry that many bytes before its end, or else the first offset
    /// of the newest sealed segment that brings the bytes counted to the
    /// bound. Starting at a segment's first offset needs no index of it, so
    /// no sealed segment is scanned twice.
    fn rebuild_from(&self, high_watermark: u64) -> u64 {
        let by_records = high_watermark.saturating_sub(REBUILD_RECORDS);
        let bound = self.config.provenance_rebuild_bytes;
        let table = self.table.read();
        let active = &table.active;
        let by_bytes = if active.committed_bytes >= bound {
            let cut = active.committed_bytes - bound;
            active
                .index
                .entries()
                .iter()
                .take_while(|entry| entry.position <= cut)
                .last()
                .map_or(active.base_offset, |entry| entry.base_offset)
        } else {
            let mut bytes = active.committed_bytes;
            let mut from = active.base_offset;
            for segment in table.sealed.iter().rev() {
                if bytes >= bound {
                    break;
                }
                bytes += segment.size_bytes;
                from = segment.base_offset;
            }
            from
        };
        by_records.max(by_bytes)
    }

    /// Stamps, leaves out what the partition already stores, splits into
    /// frames and encodes the run. No I/O.
    fn plan<'a>(
        &self,
        writer: &Writer,
        batches: &[&[CommitRecord<'a>]],
        window_ms: u64,
    ) -> Result<Plan<'a>, LogError> {
        let config = &self.config;
        let first = writer.next_offset;
        let mut newest = writer.newest_commit_ms;
        let mut stamped = Vec::with_capacity(batches.iter().map(|b| b.len()).sum());
        let mut batch_offsets = Vec::with_capacity(batches.len());
        let mut batch_already_stored = Vec::with_capacity(batches.len());
        let mut claims = RunClaims::with_capacity(if writer.seen.is_some() {
            stamped.capacity()
        } else {
            0
        });
        let mut payload_bytes: u64 = 0;
        for batch in batches {
            let start = first + stamped.len() as u64;
            let mut already_stored = 0u32;
            for record in *batch {
                let record_bytes = frame::record_payload_bytes(record) as u64;
                if record_bytes > u64::from(config.frame_bytes_max) {
                    return Err(LogError::RecordTooLarge {
                        bytes: record_bytes,
                        limit: config.frame_bytes_max,
                    });
                }
                newest = newest.max(record.committed_at_ms);
                if let Some(seen) = &writer.seen
                    && seen.already_stored(record, newest, window_ms, &mut claims)
                {
                    already_stored += 1;
                    continue;
                }
                payload_bytes += record_bytes;
                stamped.push(CommitRecord {
                    committed_at_ms: newest,
                    ..*record
                });
            }
            batch_offsets.push(start..first + stamped.len() as u64);
            batch_already_stored.push(already_stored);
        }
        if payload_bytes > config.commit_bytes_max {
            return Err(LogError::CommitTooLarge {
                bytes: payload_bytes,
                limit: config.commit_bytes_max,
            });
        }
        let mut frames = Vec::new();
        let mut base_offset = first;
        for chunk in split_into_frames(
            &stamped,
            config.frame_records_max,
            config.frame_payload_bytes_target,
        ) {
            let bytes = frame::encode_frame(
                chunk,
                base_offset,
                config.codec,
                config.compression_level,
                config.frame_bytes_max,
            )
            .map_err(|error| match error {
                // Not expected: each record fits (checked above) and frames
                // are cut at a payload target no larger than the frame
                // limit. Still a size the caller can act on, so typed.
                FrameError::TooLarge { bytes, limit } => LogError::RecordTooLarge { bytes, limit },
                other => panic!("encoding a frame fails only on its size, not with {other}"),
            })?;
            frames.push(PlannedFrame {
                base_offset,
                record_count: chunk.len() as u32,
                bytes,
            });
            base_offset += chunk.len() as u64;
        }
        let total_bytes = frames.iter().map(|f| f.bytes.len()).sum();
        Ok(Plan {
            frames,
            offsets: first..base_offset,
            batch_offsets,
            batch_already_stored,
            oldest_ms: stamped.first().map_or(newest, |r| r.committed_at_ms),
            newest_ms: newest,
            total_bytes,
            stamped,
            claimed_keys: claims.into_keys(),
        })
    }

    /// The first commit after an open empties the `hwm` file, so a value
    /// written at an earlier close can never hide what this session commits.
    fn empty_hwm_file_once(&self, writer: &mut Writer) -> Result<(), LogError> {
        if writer.hwm_file_emptied {
            return Ok(());
        }
        if let Err(error) = hwm::empty(&*self.disk, &self.dir) {
            // The file's durable content is unknown now; a stale value could
            // hide commits after a restart, so commit nothing more.
            self.poison("emptying the hwm file failed");
            return Err(LogError::SyncFailed(error));
        }
        writer.hwm_file_emptied = true;
        Ok(())
    }

    /// Rolls lazily, before the first frame of a commit, so a commit's
    /// frames all land in one segment and none is sealed before it returns.
    fn roll_if_due(&self, writer: &Writer, now_ms: u64) -> Result<(), LogError> {
        let (committed_bytes, oldest_ms) = {
            let table = self.table.read();
            (table.active.committed_bytes, table.active.oldest_ms)
        };
        if committed_bytes == 0 {
            return Ok(());
        }
        let by_size = committed_bytes >= self.config.segment_bytes;
        let by_age = retention::must_roll_by_age(
            oldest_ms,
            now_ms,
            self.roll_age_ms.load(Ordering::Relaxed),
        );
        if by_size || by_age {
            self.roll(writer)?;
        }
        Ok(())
    }

    /// Makes room for a commit of `bytes` at `position`, the end of the
    /// committed bytes. A small commit (at most [`PREPARED_WRITE_BYTES_MAX`]
    /// and at most [`LogConfig::prepare_bytes`]) goes into zeros written
    /// and synced ahead of it: when fewer than `bytes` and a block are
    /// left, `prepare_bytes` more are prepared now (up to the segment's
    /// roll size), so the commit's own fdatasync changes neither the file's
    /// size nor its block map. A larger commit is appended to the end of
    /// the file as before: zeros left after `position` are cut first and
    /// the cut synced ([`Self::trim_prepared`]), so that every overwrite
    /// stays within the bound recovery knows.
    ///
    /// A prepared stretch that cannot be written (a full disk) is not an
    /// error: the commit is appended instead.
    ///
    /// # Errors
    /// A failed fdatasync of the zeros poisons the log. A failed cut is a
    /// disk error: the commit fails before anything is written, and the
    /// next one cuts again.
    ///
    /// [`LogConfig::prepare_bytes`]: crate::LogConfig::prepare_bytes
    fn prepare_ahead(&self, file: &FileHandle, position: u64, bytes: u64) -> Result<(), LogError> {
        let file_bytes = self.table.read().active.file_bytes;
        let prepare = self.config.prepare_bytes;
        if bytes > PREPARED_WRITE_BYTES_MAX.min(prepare) {
            // Synced before the commit is written: over durable zeros it
            // would be an overwrite, torn in any sector, and longer than
            // recovery's bound.
            return self.trim_prepared();
        }
        // At least one aligned block of zeros stays after the commit: it
        // tells recovery the segment was being written in place.
        let needed = position + bytes + PREPARE_ALIGN_BYTES;
        if needed <= file_bytes {
            return Ok(());
        }
        let end = (position + bytes + prepare)
            .min(self.config.segment_bytes)
            .max(needed)
            .next_multiple_of(PREPARE_ALIGN_BYTES);
        let from = file_bytes.max(position);
        let mut zeros = IoBuf::with_capacity((end - from) as usize);
        zeros.extend_zeros((end - from) as usize);
        let written = file.write_at(from, zeros).wait();
        if let Err(error) = written {
            tracing::debug!(dir = %self.dir.display(), %error, "preparing zeros ahead of a commit failed; appending it");
            // A short write may have grown the file; what it holds past
            // `position` is zeros, which the commit overwrites or recovery
            // cuts off.
            let size = file.size().unwrap_or(position).max(position);
            self.table.write().active.file_bytes = size;
            return Ok(());
        }
        if let Err(error) = file.fdatasync().wait() {
            self.poison("fdatasync of prepared zeros failed");
            return Err(LogError::SyncFailed(error));
        }
        self.table.write().active.file_bytes = end;
        Ok(())
    }

    /// Cuts the active segment's prepared zeros off and syncs the cut, so
    /// the file ends at its committed bytes (before a roll seals it, and at
    /// close).
    pub(crate) fn trim_prepared(&self) -> Result<(), LogError> {
        let (file, committed, file_bytes) = {
            let table = self.table.read();
            let active = &table.active;
            (
                active.file.clone(),
                active.committed_bytes,
                active.file_bytes,
            )
        };
        if file_bytes <= committed {
            return Ok(());
        }
        file.truncate(committed)
            .wait()
            .and_then(|()| file.fdatasync().wait())
            .map_err(LogError::io(
                "cut the prepared zeros off the active segment",
            ))?;
        self.table.write().active.file_bytes = committed;
        Ok(())
    }

    /// Seals the active segment and starts a new one at the next offset.
    /// The sealed segment's frames were all synced by their commits; its
    /// prepared zeros are cut off first, so a sealed segment's size is
    /// its data.
    pub(crate) fn roll(&self, writer: &Writer) -> Result<(), LogError> {
        self.trim_prepared()?;
        let base_offset = writer.next_offset;
        let path = segment::segment_path(&self.dir, base_offset);
        let file = self
            .disk
            .open(&path, OpenOptions::CREATE)
            .map_err(LogError::io("create a segment"))?;
        // Only a roll that failed after creating the file can have left one
        // here, and it wrote nothing into it.
        let existing = file.size().map_err(LogError::io("stat a new segment"))?;
        if existing != 0 {
            return Err(LogError::Inconsistent {
                dir: self.dir.display().to_string(),
                reason: format!("segment {} already holds {existing} bytes", path.display()),
            });
        }
        self.disk
            .sync_dir(&self.dir)
            .map_err(LogError::io("sync the partition directory after a roll"))?;
        let new_active = ActiveSegment {
            base_offset,
            path,
            file,
            index: SparseIndex::new(self.config.index_interval_bytes),
            committed_bytes: 0,
            file_bytes: 0,
            oldest_ms: None,
            newest_ms: None,
        };
        let mut table = self.table.write();
        assert!(
            base_offset > table.active.base_offset,
            "a roll moves to a higher base offset"
        );
        let old = std::mem::replace(&mut table.active, new_active);
        let sealed = SealedSegment {
            base_offset: old.base_offset,
            end_offset: base_offset,
            size_bytes: old.committed_bytes,
            path: old.path,
            file: old.file,
            index: OnceLock::from(old.index),
            last_write_ms: OnceLock::from(old.newest_ms),
        };
        table.sealed.push(Arc::new(sealed));
        tracing::debug!(dir = %self.dir.display(), base_offset, "partition log segment rolled");
        Ok(())
    }

    fn write_sync_verify(
        &self,
        file: &FileHandle,
        position: u64,
        plan: &Plan<'_>,
    ) -> Result<Duration, LogError> {
        let mut buf = take_write_buf(plan.total_bytes);
        for planned in &plan.frames {
            buf.extend_from_slice(&planned.bytes);
        }
        // The committing thread only waits for the write and its fdatasync:
        // alone it runs both itself (no hand-off to a storage thread and
        // back); beside other logs' commits the disk may submit them all
        // together (`write_and_sync_gathered`).
        let syncing_us = self.clock.now_us();
        match file.write_and_sync_gathered(position, buf) {
            Ok(buf) => keep_write_buf(buf),
            Err(error) => {
                if narad_disk::sync_failure(&error).is_none() {
                    return Err(LogError::io("write a commit")(error));
                }
                // After a failed fdatasync the kernel may have dropped the
                // dirty pages; a retry that succeeds would prove nothing.
                // Latch.
                self.poison("fdatasync of a commit failed");
                return Err(LogError::SyncFailed(error));
            }
        }
        let sync_duration = Duration::from_micros(self.clock.now_us().saturating_sub(syncing_us));
        let read_back = file
            .read_at_into(position, plan.total_bytes, READ_BACK_BUF.take())
            .wait()
            .map_err(LogError::io("read back a commit"))?;
        self.verify(&read_back, position, plan)?;
        keep_read_back_buf(read_back);
        Ok(sync_duration)
    }

    /// Checks every frame read back: its CRC, its header against the plan,
    /// and its bytes against what was written.
    fn verify(&self, read_back: &[u8], position: u64, plan: &Plan<'_>) -> Result<(), LogError> {
        let mut at = 0usize;
        for planned in &plan.frames {
            let frame_position = position + at as u64;
            let fail = |reason: String| LogError::ReadBack {
                position: frame_position,
                reason,
            };
            let header = frame::check_frame(
                &read_back[at.min(read_back.len())..],
                self.config.frame_bytes_max,
            )
            .map_err(|error| fail(error.to_string()))?;
            if header.base_offset != planned.base_offset
                || header.record_count != planned.record_count
            {
                return Err(fail(format!(
                    "header names {}+{}",
                    header.base_offset, header.record_count
                )));
            }
            let end = at + planned.bytes.len();
            if read_back.get(at..end) != Some(&planned.bytes[..]) {
                return Err(fail("bytes differ from those written".to_string()));
            }
            at = end;
        }
        if at != read_back.len() {
            return Err(LogError::ReadBack {
                position,
                reason: format!("read back {} bytes, wrote {at}", read_back.len()),
            });
        }
        Ok(())
    }

    /// Truncates the active segment's `file` to `position` and syncs the
    /// truncate; the log takes the file to end there either way (prepared
    /// zeros past it are prepared again when needed).
    pub(crate) fn cut_active(&self, file: &FileHandle, position: u64) -> std::io::Result<()> {
        let result = file
            .truncate(position)
            .wait()
            .and_then(|()| file.fdatasync().wait());
        self.table.write().active.file_bytes = position;
        result
    }

    /// Takes a failed commit back out: truncate to where it started and
    /// sync the truncate. If that fails too the file no longer matches what
    /// the log believes, so the log is poisoned.
    fn undo(&self, file: &FileHandle, position: u64) {
        if let Err(error) = self.cut_active(file, position) {
            tracing::error!(dir = %self.dir.display(), position, %error, "undoing a failed commit failed");
            self.poison("undoing a failed commit failed");
        }
    }

    /// Makes a verified commit visible: index entries, size and high
    /// watermark in one step under the table lock, then wakes waiters.
    fn publish(&self, writer: &mut Writer, position: u64, plan: &Plan<'_>) {
        // The read-back matched these bytes, so these are the records a read
        // of the segment would decode; decoded before the table is locked.
        let decoded = (self.config.tail_cache_bytes > 0)
            .then(|| {
                plan.frames
                    .iter()
                    .map(|planned| {
                        frame::decode_frame(&planned.bytes, self.config.frame_bytes_max)
                            .map(|(_, records)| CachedFrame::new(&records))
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .ok()
            })
            .flatten();
        {
            let mut table = self.table.write();
            assert_eq!(
                table.active.committed_bytes, position,
                "nothing else wrote the active segment"
            );
            assert_eq!(
                table.high_watermark, plan.offsets.start,
                "the run starts at the high watermark"
            );
            let mut at = position;
            for planned in &plan.frames {
                table.active.index.note_frame(planned.base_offset, at);
                at += planned.bytes.len() as u64;
            }
            match decoded {
                Some(frames) => frames
                    .into_iter()
                    .flatten()
                    .for_each(|f| table.tail.push(f)),
                None => table.tail.clear(),
            }
            table.active.committed_bytes = at;
            table.active.file_bytes = table.active.file_bytes.max(at);
            table.active.oldest_ms.get_or_insert(plan.oldest_ms);
            table.active.newest_ms = Some(plan.newest_ms);
            table.high_watermark = plan.offsets.end;
        }
        writer.next_offset = plan.offsets.end;
        writer.newest_commit_ms = plan.newest_ms;
        self.hwm_sender
            .send_modify(|state| state.high_watermark = plan.offsets.end);
    }
}

/// Splits a run into frames of at most `records_max` records and about
/// `payload_target` payload bytes; a record larger than the target gets a
/// frame of its own.
fn split_into_frames<'r, 'a>(
    records: &'r [CommitRecord<'a>],
    records_max: usize,
    payload_target: usize,
) -> Vec<&'r [CommitRecord<'a>]> {
    let mut frames = Vec::new();
    let mut start = 0;
    let mut bytes = 0usize;
    for (index, record) in records.iter().enumerate() {
        let record_bytes = frame::record_payload_bytes(record);
        let count = index - start;
        if count > 0 && (count >= records_max || bytes + record_bytes > payload_target) {
            frames.push(&records[start..index]);
            start = index;
            bytes = 0;
        }
        bytes += record_bytes;
    }
    if start < records.len() {
        frames.push(&records[start..]);
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(payload: &[u8]) -> CommitRecord<'_> {
        CommitRecord::new(b"", payload, 0)
    }

    #[test]
    fn frames_split_at_the_record_limit() {
        let payload = [0u8; 10];
        let records = vec![record(&payload); 25];
        let sizes: Vec<usize> = split_into_frames(&records, 10, 1 << 20)
            .iter()
            .map(|f| f.len())
            .collect();
        assert_eq!(sizes, vec![10, 10, 5]);
    }

    #[test]
    fn frames_split_at_the_payload_target_and_large_records_stand_alone() {
        let small = [0u8; 10];
        let large = [0u8; 500];
        let records = vec![
            record(&small),
            record(&small),
            record(&large),
            record(&small),
        ];
        let sizes: Vec<usize> = split_into_frames(&records, 100, 100)
            .iter()
            .map(|f| f.len())
            .collect();
        assert_eq!(sizes, vec![2, 1, 1]);
    }
}
