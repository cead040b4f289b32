//! The partition log: its state, open, close and statistics.
//!
//! Commits are serialized by the writer lock ([`Writer`]); the segment table
//! sits behind a separate read-write lock that a commit takes only briefly
//! to publish, so reads run concurrently with each other and with the
//! write, fdatasync and read-back of a commit in progress.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use narad_clock::Clock;
use narad_disk::{Disk, FileHandle, OpenOptions};
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use crate::config::LogConfig;
use crate::dedupe::{IDEMPOTENCY_WINDOW_MS_DEFAULT, Seen};
use crate::error::LogError;
use crate::hwm;
use crate::recovery;
use crate::segment::{self, SparseIndex};
use crate::tail::TailCache;
use crate::watch::{HwmState, HwmWatch};

/// One partition's log. Share it behind an `Arc`: commits serialize on an
/// internal lock, reads run concurrently.
#[derive(Debug)]
pub struct PartitionLog {
    pub(crate) disk: Arc<dyn Disk>,
    /// The node's clock: how long a commit's fdatasync and a provenance
    /// rebuild took are measured on it (commit times come from the records).
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) dir: PathBuf,
    pub(crate) config: LogConfig,
    pub(crate) writer: Mutex<Writer>,
    pub(crate) table: RwLock<Table>,
    pub(crate) poisoned: AtomicBool,
    pub(crate) roll_age_ms: AtomicU64,
    pub(crate) idempotency_window_ms: AtomicU64,
    pub(crate) hwm_sender: watch::Sender<HwmState>,
    /// Held by a retention sweep from its check that the log is open to its
    /// last unlink, and taken by [`Self::close`] once the log is closed:
    /// unlinks go by path, so none may run after a caller that closed the
    /// log renames or replaces its directory.
    pub(crate) sweeping: Mutex<()>,
}

/// State only a commit (or a roll, or close) touches, under the writer lock.
#[derive(Debug)]
pub(crate) struct Writer {
    /// The offset the next commit's first record takes. Between commits it
    /// always equals the high watermark.
    pub(crate) next_offset: u64,
    /// Newest commit time stamped in this partition; commit times are raised
    /// to it so they never go backwards.
    pub(crate) newest_commit_ms: u64,
    /// Whether the `hwm` file was emptied since open.
    pub(crate) hwm_file_emptied: bool,
    pub(crate) closed: bool,
    /// The provenance the partition stores; rebuilt from the log by the
    /// first commit that carries provenance.
    pub(crate) seen: Option<Seen>,
    /// While the log is poisoned: the clock time (ms) from which a commit
    /// may try to heal it (`heal.rs`); `None` until a commit found it
    /// poisoned.
    pub(crate) heal_after_ms: Option<u64>,
}

/// A segment that no longer takes writes.
#[derive(Debug)]
pub(crate) struct SealedSegment {
    pub(crate) base_offset: u64,
    /// The successor's base offset: the segment's range ends there.
    pub(crate) end_offset: u64,
    pub(crate) size_bytes: u64,
    pub(crate) path: PathBuf,
    pub(crate) file: FileHandle,
    /// Built by the first read that needs it (a scan), or moved in at roll.
    pub(crate) index: OnceLock<SparseIndex>,
    /// Commit time of its last readable record (`None`: it has none).
    pub(crate) last_write_ms: OnceLock<Option<u64>>,
}

/// The segment commits append to.
#[derive(Debug)]
pub(crate) struct ActiveSegment {
    pub(crate) base_offset: u64,
    pub(crate) path: PathBuf,
    pub(crate) file: FileHandle,
    pub(crate) index: SparseIndex,
    /// Bytes holding committed frames; readers never look past them.
    pub(crate) committed_bytes: u64,
    /// The file's size as the writer left it: the committed bytes, then
    /// zeros prepared for the next small commits (`commit::prepare_ahead`).
    pub(crate) file_bytes: u64,
    pub(crate) oldest_ms: Option<u64>,
    pub(crate) newest_ms: Option<u64>,
}

/// What readers consult, under the table lock.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) sealed: Vec<Arc<SealedSegment>>,
    pub(crate) active: ActiveSegment,
    pub(crate) high_watermark: u64,
    /// The newest committed records, ending at the high watermark.
    pub(crate) tail: TailCache,
}

impl Table {
    pub(crate) fn oldest_offset(&self) -> u64 {
        self.sealed
            .first()
            .map_or(self.active.base_offset, |s| s.base_offset)
    }
}

/// Partition statistics for topic describe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionStats {
    /// Segment files, sealed and active.
    pub segments: usize,
    /// First offset of the oldest segment.
    pub oldest_offset: u64,
    /// The offset the next commit takes.
    pub next_offset: u64,
    /// Exclusive bound of visible offsets.
    pub high_watermark: u64,
    /// Bytes of all segment files.
    pub size_bytes: u64,
    /// Commit time of the oldest segment's newest record, if it holds one.
    pub oldest_segment_time_ms: Option<u64>,
}

impl PartitionLog {
    /// Opens (or creates) the log in `dir`, recovering the active segment;
    /// the durations it reports are measured on `clock`.
    ///
    /// With no usable `hwm` file the active segment is first synced (what a
    /// crashed process left in the page cache becomes durable before it is
    /// served) and the boundary comes from the CRC-verified tail.
    ///
    /// # Errors
    /// Any disk error; [`LogError::Inconsistent`] when a segment name is
    /// ahead of the data.
    ///
    /// # Panics
    /// If `config` is invalid (see [`LogConfig`]).
    pub fn open(
        disk: Arc<dyn Disk>,
        dir: &Path,
        config: LogConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, LogError> {
        config.assert_valid();
        disk.create_dir_all(dir)
            .map_err(LogError::io("create the partition directory"))?;
        let mut bases: Vec<u64> = disk
            .list_dir(dir)
            .map_err(LogError::io("list the partition directory"))?
            .iter()
            .filter_map(|name| segment::parse_segment_file_name(name))
            .collect();
        bases.sort_unstable();
        if bases.is_empty() {
            disk.open(&segment::segment_path(dir, 0), OpenOptions::CREATE)
                .map_err(LogError::io("create the first segment"))?;
            disk.sync_dir(dir)
                .map_err(LogError::io("sync the partition directory"))?;
            bases.push(0);
        }
        let stored_hwm = hwm::read(&*disk, dir).map_err(LogError::io("read the hwm file"))?;
        let (&active_base, sealed_bases) =
            bases.split_last().ok_or_else(|| LogError::Inconsistent {
                dir: dir.display().to_string(),
                reason: "no segment after creating one".to_string(),
            })?;
        let active_path = segment::segment_path(dir, active_base);
        let active_file = disk
            .open(&active_path, OpenOptions::EXISTING)
            .map_err(LogError::io("open the active segment"))?;
        if stored_hwm.is_none() {
            active_file
                .fdatasync()
                .wait()
                .map_err(LogError::io("sync the active segment at open"))?;
        }
        let recovered = recovery::recover_active(&active_file, active_base, stored_hwm, &config)?;
        let sealed = open_sealed(&*disk, dir, sealed_bases, active_base)?;
        let high_watermark = recovered.tail_offset;
        tracing::info!(
            dir = %dir.display(),
            high_watermark,
            segments = bases.len(),
            stored_hwm = ?stored_hwm,
            truncated_bytes = recovered.truncated_bytes,
            gaps = recovered.gaps.len(),
            "partition log opened"
        );
        let active = ActiveSegment {
            base_offset: active_base,
            path: active_path,
            file: active_file,
            index: recovered.index,
            committed_bytes: recovered.committed_bytes,
            file_bytes: recovered.committed_bytes,
            oldest_ms: recovered.oldest_ms,
            newest_ms: recovered.newest_ms,
        };
        let (hwm_sender, _) = watch::channel(HwmState {
            high_watermark,
            closed: false,
        });
        let tail = TailCache::new(config.tail_cache_bytes);
        Ok(Self {
            disk,
            clock,
            dir: dir.to_path_buf(),
            roll_age_ms: AtomicU64::new(config.roll_age_ms),
            idempotency_window_ms: AtomicU64::new(IDEMPOTENCY_WINDOW_MS_DEFAULT),
            config,
            writer: Mutex::new(Writer {
                next_offset: high_watermark,
                newest_commit_ms: recovered.newest_ms.unwrap_or(0),
                hwm_file_emptied: false,
                closed: false,
                seen: None,
                heal_after_ms: None,
            }),
            table: RwLock::new(Table {
                sealed,
                active,
                high_watermark,
                tail,
            }),
            poisoned: AtomicBool::new(false),
            hwm_sender,
            sweeping: Mutex::new(()),
        })
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Exclusive bound of the offsets a read may return.
    pub fn high_watermark(&self) -> u64 {
        self.table.read().high_watermark
    }

    /// A watch that async code can await for the high watermark to pass an
    /// offset.
    pub fn watch_high_watermark(&self) -> HwmWatch {
        HwmWatch::new(self.hwm_sender.subscribe())
    }

    /// Whether an fdatasync failure latched the log; cleared when a later
    /// commit heals it in place (at most once per
    /// [`crate::HEAL_RETRY_MS`]) or by reopening.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Changes the age after which the active segment rolls (the topic's
    /// retention); 0 never rolls by age.
    pub fn set_roll_age_ms(&self, roll_age_ms: u64) {
        self.roll_age_ms.store(roll_age_ms, Ordering::Relaxed);
    }

    /// Changes how long after a record with an idempotency key is stored a
    /// record with the same key is still recognised and not stored again
    /// (the topic's idempotency window).
    pub fn set_idempotency_window_ms(&self, window_ms: u64) {
        self.idempotency_window_ms
            .store(window_ms, Ordering::Relaxed);
    }

    /// The idempotency window commits use now (see
    /// [`Self::set_idempotency_window_ms`]).
    pub fn idempotency_window_ms(&self) -> u64 {
        self.idempotency_window_ms.load(Ordering::Relaxed)
    }

    /// Origins and idempotency keys the partition remembers now (`None`
    /// until a commit with provenance rebuilt the memory).
    pub fn provenance_memory(&self) -> Option<(usize, usize)> {
        self.writer.lock().seen.as_ref().map(Seen::sizes)
    }

    /// Latches the log: every later commit fails with [`LogError::Poisoned`].
    pub(crate) fn poison(&self, reason: &str) {
        if !self.poisoned.swap(true, Ordering::AcqRel) {
            tracing::error!(dir = %self.dir.display(), reason, "partition log poisoned; commits fail until it heals or is reopened");
        }
    }

    /// Closes the log: writes the exact high watermark to the `hwm` file and
    /// syncs it. Later commits fail with [`LogError::Closed`]; reads keep
    /// working; retention sweeps do nothing. Returns only after a sweep in
    /// progress has ended, so the caller may then move the directory.
    /// Closing twice does nothing.
    ///
    /// # Errors
    /// A disk error writing the `hwm` file; the next open then recovers the
    /// boundary from the tail, which is always safe.
    pub fn close(&self) -> Result<(), LogError> {
        let closed = self.close_writer();
        drop(self.sweeping.lock());
        closed
    }

    fn close_writer(&self) -> Result<(), LogError> {
        let mut writer = self.writer.lock();
        if writer.closed {
            return Ok(());
        }
        writer.closed = true;
        let high_watermark = self.high_watermark();
        assert_eq!(
            writer.next_offset, high_watermark,
            "no commit is half done under the writer lock"
        );
        self.hwm_sender.send_modify(|state| state.closed = true);
        hwm::write(&*self.disk, &self.dir, high_watermark)
            .map_err(LogError::io("write the hwm file at close"))?;
        if let Err(error) = self.trim_prepared() {
            // The next open cuts the zeros off at the stored boundary.
            tracing::warn!(dir = %self.dir.display(), %error, "trimming the prepared zeros at close failed");
        }
        tracing::info!(dir = %self.dir.display(), high_watermark, "partition log closed");
        Ok(())
    }

    /// Statistics for topic describe. Dating the oldest segment may read its
    /// last frame once; the answer is cached.
    ///
    /// # Errors
    /// A disk error while dating the oldest segment.
    pub fn stats(&self) -> Result<PartitionStats, LogError> {
        let (mut stats, oldest_sealed) = {
            let table = self.table.read();
            let size_bytes = table.sealed.iter().map(|s| s.size_bytes).sum::<u64>()
                + table.active.committed_bytes;
            let stats = PartitionStats {
                segments: table.sealed.len() + 1,
                oldest_offset: table.oldest_offset(),
                // A commit publishes its offsets and the high watermark at
                // once, so between commits the two are equal.
                next_offset: table.high_watermark,
                high_watermark: table.high_watermark,
                size_bytes,
                oldest_segment_time_ms: table.active.newest_ms,
            };
            (stats, table.sealed.first().cloned())
        };
        if let Some(segment) = oldest_sealed {
            stats.oldest_segment_time_ms = self.sealed_last_write_ms(&segment)?;
        }
        Ok(stats)
    }
}

fn open_sealed(
    disk: &dyn Disk,
    dir: &Path,
    bases: &[u64],
    active_base: u64,
) -> Result<Vec<Arc<SealedSegment>>, LogError> {
    let mut sealed = Vec::with_capacity(bases.len());
    for (index, &base_offset) in bases.iter().enumerate() {
        let end_offset = bases.get(index + 1).copied().unwrap_or(active_base);
        let path = segment::segment_path(dir, base_offset);
        let file = disk
            .open(&path, OpenOptions::EXISTING)
            .map_err(LogError::io("open a sealed segment"))?;
        let size_bytes = file.size().map_err(LogError::io("stat a sealed segment"))?;
        sealed.push(Arc::new(SealedSegment {
            base_offset,
            end_offset,
            size_bytes,
            path,
            file,
            index: OnceLock::new(),
            last_write_ms: OnceLock::new(),
        }));
    }
    Ok(sealed)
}
