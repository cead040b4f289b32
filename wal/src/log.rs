//! The log: open, append, and the handles the dispatcher uses.

use std::collections::{BTreeMap, VecDeque};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use narad_disk::{BackendKind, Disk, IO_ALIGN, IoBuf};
use parking_lot::{Condvar, Mutex};

use crate::appender;
use crate::error::{FillError, IoFailure, WalError};
use crate::frame::frame_len;
use crate::notify::{DurableWatch, Frontier, Pending};
use crate::options::WalOptions;
use crate::origin::{self, Origins};
use crate::prep::{self, Prep, PrepStatus};
use crate::reader::WalReader;
use crate::recent::Recent;
use crate::record::WalRecordRef;
use crate::recovery::recover;
use crate::staging::{AppendState, StageFailure};
use crate::sync_loop::{self, Writer};

/// State shared by the appenders, the sync loop, readers and compaction.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) disk: Arc<dyn Disk>,
    pub(crate) dir: PathBuf,
    pub(crate) options: WalOptions,
    /// The append lock.
    pub(crate) append: Mutex<AppendState>,
    /// Wakes the sync loop.
    pub(crate) work: Condvar,
    /// Wakes appenders waiting for staging room.
    pub(crate) room: Condvar,
    /// Mirrors `AppendState::latch` for lock-free reads (the gauge).
    pub(crate) failed: AtomicBool,
    /// Group commits written with `O_DIRECT` so far.
    pub(crate) direct_writes: AtomicU64,
    /// Flushes an appender ran on its own thread.
    inline_flushes: AtomicU64,
    /// Flushes that panicked (each latched the log).
    pub(crate) flush_panics: AtomicU64,
    /// The newest durable chunks, for readers.
    pub(crate) recent: Mutex<Recent>,
    /// Reader windows filled from `recent` instead of the file.
    pub(crate) recent_reads: AtomicU64,
    pub(crate) frontier: Arc<Frontier>,
    /// Every segment's base and the end of its durable data.
    pub(crate) segments: Mutex<BTreeMap<u64, u64>>,
    pub(crate) prep: Arc<Prep>,
    /// The active segment, written by whoever holds the flush turn.
    pub(crate) writer: Mutex<Writer>,
}

/// Panics of a log's background work since it opened: `narad_wal_worker_panics_total`.
///
/// The two kinds end differently. A flush that panics (a broken invariant,
/// or a fault in the disk layer) leaves unknown whether its write and
/// fdatasync happened, so it latches the log as a failed write does: its
/// waiters and every later append get the error, and the sync loop lives
/// on only to close. Retrying there could acknowledge records the kernel
/// has dropped. A segment preparation that panics holds nothing durable:
/// its spare is removed, the next roll creates an empty segment, and the
/// preparation thread goes on with the next request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerPanics {
    /// Flushes (on the sync loop or inline) that panicked.
    pub flush: u64,
    /// Segment preparations that panicked and were restarted.
    pub prep: u64,
}

/// The ingress write-ahead log of one data node.
///
/// Appends are staged under one lock and made durable by a dedicated sync
/// loop thread (group commit); a record is acknowledged only once the
/// fdatasync covering it completed. See `docs/internals/wal.md`.
#[derive(Debug)]
pub struct Wal {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    truncated_at: Option<(PathBuf, u64)>,
    origins: Origins,
}

impl Wal {
    /// Opens (or creates) the log in `dir`: recovers it, then starts the
    /// sync loop and, with `prealloc`, the preparation thread.
    ///
    /// # Errors
    /// [`WalError::Options`], [`WalError::Corrupt`] when recovery finds
    /// damage that is not a torn tail, or [`WalError::Io`].
    pub fn open(
        disk: Arc<dyn Disk>,
        dir: impl Into<PathBuf>,
        options: WalOptions,
    ) -> Result<Self, WalError> {
        options.validate()?;
        let dir = dir.into();
        let recovered = recover(&*disk, &dir, &options)?;
        let next_seq = recovered.next_seq;
        let origins = origin::open(&*disk, &dir, next_seq, recovered.truncated_at.is_some())?;
        // Not registered with io_uring: the sync loop writes them with plain
        // system calls on its own thread (`write_and_sync_now`), which
        // measured faster than any trip through a storage thread's ring.
        let pool = vec![
            IoBuf::with_capacity(options.staging_buffer_bytes),
            IoBuf::with_capacity(options.staging_buffer_bytes),
        ];
        // Prepared segments are written with O_DIRECT from a buffer of their
        // own, where each write is assembled in whole blocks.
        let direct_buf = (options.prealloc && options.direct_io)
            .then(|| IoBuf::with_capacity(options.staging_buffer_bytes + 2 * IO_ALIGN));
        tracing::info!(
            dir = %dir.display(),
            backend = %disk.kind(),
            next_seq,
            segments = recovered.segments.len(),
            "ingress WAL open"
        );
        let active_base = recovered.active.base;
        let active_end = recovered.active.end;
        let append = AppendState {
            next_seq,
            stage_base: active_base,
            stage_end: active_end,
            chunks: VecDeque::new(),
            staged_bytes: 0,
            free_pooled: pool,
            latch: None,
            closed: false,
            flushing: false,
            segment_data_bytes: options.segment_data_bytes(),
            staging_buffer_bytes: options.staging_buffer_bytes,
        };
        let shared = Arc::new(Shared {
            disk: Arc::clone(&disk),
            dir: dir.clone(),
            options: options.clone(),
            append: Mutex::new(append),
            work: Condvar::new(),
            room: Condvar::new(),
            failed: AtomicBool::new(false),
            direct_writes: AtomicU64::new(0),
            inline_flushes: AtomicU64::new(0),
            flush_panics: AtomicU64::new(0),
            recent: Mutex::new(Recent::default()),
            recent_reads: AtomicU64::new(0),
            frontier: Arc::new(Frontier::new(next_seq)),
            segments: Mutex::new(recovered.segments),
            prep: Prep::new(),
            writer: Mutex::new(Writer::new(recovered.active, direct_buf)),
        });
        // Before any flush: a prepared active segment is reopened for
        // O_DIRECT here, on the opening thread.
        shared.writer.lock().go_direct(&shared);
        let mut threads = Vec::new();
        let spawn_error = |e| WalError::io("start thread", &dir, e);
        if options.prealloc {
            threads.push(
                prep::spawn(Arc::clone(&shared.prep), disk, dir.clone(), options.clone())
                    .map_err(spawn_error)?,
            );
        }
        let truncated_at = recovered.truncated_at;
        threads.push(sync_loop::spawn(Arc::clone(&shared)).map_err(spawn_error)?);
        if options.prealloc && active_end >= options.segment_bytes / 2 {
            shared.prep.request(active_base);
        }
        Ok(Self {
            shared,
            threads: Mutex::new(threads),
            truncated_at,
            origins,
        })
    }

    /// Stages one record.
    ///
    /// # Errors
    /// Before anything is staged: [`WalError::RecordSize`],
    /// [`WalError::Failed`] (latched) or [`WalError::Closed`]. The returned
    /// [`Pending`] then resolves to the flush's outcome.
    pub fn append(&self, payload: &[u8]) -> Result<Pending, WalError> {
        self.append_with(payload.len(), |dst| {
            dst.copy_from_slice(payload);
            Ok(())
        })
    }

    /// Stages one record of `len` bytes that `fill` writes in place into the
    /// staging buffer. A fill that fails or panics withdraws the record and
    /// gives its sequence number back.
    ///
    /// # Errors
    /// As [`Wal::append`], plus [`WalError::Fill`] and
    /// [`WalError::FillPanicked`].
    pub fn append_with(
        &self,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), FillError>,
    ) -> Result<Pending, WalError> {
        let mut fill = Some(fill);
        self.stage(&[len], |_, dst| match fill.take() {
            Some(fill) => fill(dst),
            None => unreachable!("a single record is filled once"),
        })
    }

    /// Stages a batch under one hold of the append lock: consecutive
    /// sequence numbers, nothing staged between them, one wake of the sync
    /// loop, one wait on the flush holding the last record. `fill(i, dst)`
    /// writes record `i` in place. Every size is checked before anything is
    /// staged; a fill that fails or panics withdraws the whole batch.
    ///
    /// A batch that outgrows the active segment rolls it between two
    /// records; the records before the roll are written and synced before
    /// the new segment is created, so no frame spans two segments.
    ///
    /// # Errors
    /// As [`Wal::append_with`], plus [`WalError::EmptyBatch`].
    pub fn append_many(
        &self,
        lens: &[usize],
        fill: impl FnMut(usize, &mut [u8]) -> Result<(), FillError>,
    ) -> Result<Pending, WalError> {
        self.stage(lens, fill)
    }

    /// [`Wal::append_many`] for payloads already in memory.
    ///
    /// # Errors
    /// As [`Wal::append_many`].
    pub fn append_many_slices(&self, payloads: &[&[u8]]) -> Result<Pending, WalError> {
        let lens: Vec<usize> = payloads.iter().map(|p| p.len()).collect();
        self.stage(&lens, |i, dst| {
            dst.copy_from_slice(payloads[i]);
            Ok(())
        })
    }

    /// Stages produce records as one batch ([`Wal::append_many`]): every
    /// record is validated against the record limits before anything is
    /// staged, then encoded in place into the staging buffer.
    ///
    /// # Errors
    /// [`WalError::Record`] for the first invalid record (nothing staged),
    /// or as [`Wal::append_many`].
    pub fn append_records(&self, records: &[WalRecordRef<'_>]) -> Result<Pending, WalError> {
        for (index, record) in records.iter().enumerate() {
            record
                .validate()
                .map_err(|source| WalError::Record { index, source })?;
        }
        let lens: Vec<usize> = records.iter().map(WalRecordRef::encoded_len).collect();
        self.stage(&lens, |index, dst| {
            records[index]
                .encode_into(dst)
                .map_err(|error| Box::new(error) as FillError)
        })
    }

    fn stage(
        &self,
        lens: &[usize],
        mut fill: impl FnMut(usize, &mut [u8]) -> Result<(), FillError>,
    ) -> Result<Pending, WalError> {
        if lens.is_empty() {
            return Err(WalError::EmptyBatch);
        }
        let max = self.shared.options.record_bytes_max;
        if let Some(&len) = lens.iter().find(|&&len| len == 0 || len > max) {
            return Err(WalError::RecordSize { len, max });
        }
        let total: usize = lens.iter().map(|&len| frame_len(len)).sum();
        let mut state = self.shared.append.lock();
        loop {
            if let Some(failure) = &state.latch {
                return Err(WalError::Failed(failure.clone()));
            }
            if state.closed {
                return Err(WalError::Closed);
            }
            if state.staged_bytes == 0
                || state.staged_bytes + total <= self.shared.options.staged_bytes_max
            {
                break;
            }
            self.shared.room.wait(&mut state);
        }
        let alone = state.chunks.is_empty();
        let mark = state.mark();
        for (index, &len) in lens.iter().enumerate() {
            if let Err(failure) = state.stage_frame(len, |dst| fill(index, dst)) {
                state.rollback(mark);
                return Err(match failure {
                    StageFailure::Fill(error) => WalError::Fill(error),
                    StageFailure::Panicked(message) => WalError::FillPanicked(message),
                });
            }
        }
        let seqs = mark_next_seq(&state, lens.len())..state.next_seq;
        let slot = Arc::clone(&state.chunks.back().expect("records were just staged").slot);
        if state.flushing {
            // The flush under way wakes the sync loop when it ends.
            return Ok(Pending::new(seqs, slot));
        }
        if alone && (self.shared.options.inline_flush || appender::serves_only_the_appender()) {
            let chunks = sync_loop::take_turn(&self.shared, &mut state);
            drop(state);
            self.shared.inline_flushes.fetch_add(1, Ordering::Relaxed);
            // A panicking flush (a broken invariant) has latched the log and
            // failed its waiters by the time it unwinds to here; the caller
            // learns it from the `Pending`, as it would from the sync loop.
            let shared = &*self.shared;
            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                sync_loop::flush_turn(shared, chunks);
            }));
            return Ok(Pending::new(seqs, slot));
        }
        drop(state);
        self.shared.work.notify_one();
        Ok(Pending::new(seqs, slot))
    }

    /// Whether a write or fdatasync failed and the log refuses appends
    /// (the gauge `narad_ingress_wal_failed`).
    pub fn is_failed(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// Group commits written into prepared segments with `O_DIRECT` since
    /// open: zero without `prealloc`, or where the file system refuses
    /// `O_DIRECT`.
    pub fn direct_writes(&self) -> u64 {
        self.shared.direct_writes.load(Ordering::Relaxed)
    }

    /// Panics of the log's workers since open (see [`WorkerPanics`]).
    pub fn worker_panics(&self) -> WorkerPanics {
        WorkerPanics {
            flush: self.shared.flush_panics.load(Ordering::Relaxed),
            prep: self.shared.prep.panics(),
        }
    }

    /// Flushes that an appender ran on its own thread since open
    /// ([`WalOptions::inline_flush`], [`crate::flush_inline_while_serving_one`]).
    pub fn inline_flushes(&self) -> u64 {
        self.shared.inline_flushes.load(Ordering::Relaxed)
    }

    /// Reads of durable records served from the copies of the newest
    /// chunks kept in memory rather than from the segment file.
    pub fn recent_reads(&self) -> u64 {
        self.shared.recent_reads.load(Ordering::Relaxed)
    }

    /// The failure that latched the log, if any.
    pub fn failure(&self) -> Option<IoFailure> {
        self.shared.append.lock().latch.clone()
    }

    /// The origin ids of this log's sequence numbers, which commits carry
    /// so a partition stores a re-sent record once.
    pub fn origins(&self) -> &Origins {
        &self.origins
    }

    /// The sequence number the next staged record will take.
    pub fn next_seq(&self) -> u64 {
        self.shared.append.lock().next_seq
    }

    /// The sequence number after the last durable record.
    pub fn next_durable_seq(&self) -> u64 {
        self.shared.frontier.get()
    }

    /// A watch on the durable frontier.
    pub fn durable_watch(&self) -> DurableWatch {
        DurableWatch::new(Arc::clone(&self.shared.frontier))
    }

    /// The first sequence number still on disk (the oldest segment's base).
    pub fn oldest_seq(&self) -> u64 {
        oldest_base(&self.shared)
    }

    /// Base sequence numbers of the segments on disk, oldest first.
    pub fn segment_bases(&self) -> Vec<u64> {
        self.shared.segments.lock().keys().copied().collect()
    }

    /// Where open cut a torn tail (file and offset), if it did.
    pub fn truncated_at_open(&self) -> Option<(&Path, u64)> {
        self.truncated_at
            .as_ref()
            .map(|(path, offset)| (path.as_path(), *offset))
    }

    /// Whether a prepared spare segment is ready for the next roll.
    pub fn spare_ready(&self) -> bool {
        self.shared.prep.status() == PrepStatus::Ready
    }

    /// The directory the log lives in.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The backend the log writes through.
    pub fn backend(&self) -> BackendKind {
        self.shared.disk.kind()
    }

    /// A reader positioned at `from_seq`, yielding records as they become
    /// durable.
    ///
    /// # Errors
    /// [`WalError::Compacted`] when `from_seq` is below the oldest segment.
    pub fn reader(&self, from_seq: u64) -> Result<WalReader, WalError> {
        WalReader::new(Arc::clone(&self.shared), from_seq)
    }

    /// Stops the log: records already staged are still written and their
    /// callers answered; later appends fail with [`WalError::Closed`].
    /// Waits for the log's threads. Idempotent.
    pub fn close(&self) {
        self.shared.append.lock().closed = true;
        self.shared.work.notify_all();
        self.shared.room.notify_all();
        self.shared.prep.stop();
        let threads = std::mem::take(&mut *self.threads.lock());
        for thread in threads {
            if thread.join().is_err() {
                tracing::error!("an ingress WAL thread panicked");
            }
        }
        self.shared.frontier.stop();
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.close();
    }
}

fn mark_next_seq(state: &AppendState, count: usize) -> u64 {
    state.next_seq - count as u64
}

pub(crate) fn oldest_base(shared: &Shared) -> u64 {
    shared
        .segments
        .lock()
        .keys()
        .next()
        .copied()
        .expect("a log always has its active segment")
}
