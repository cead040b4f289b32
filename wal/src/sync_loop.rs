//! Group commit's doing half: the flush turn and the sync loop.
//!
//! Whoever holds the flush turn owns the active segment: it takes every
//! staged chunk at once and, for each, rolls to the chunk's segment if it
//! differs, writes the chunk and fdatasyncs it on its own thread
//! (`write_and_sync_now`; `O_DIRECT` and `RWF_DSYNC` for a prepared
//! segment), advances the durable frontier and completes the chunk's
//! waiters with the true outcome. The turn is a flag under the append lock,
//! so there is one flush at a time and each write is synced before the next
//! one is issued: a file never has more than one unsynced write, and a
//! crash can tear only the last write of the last segment.
//!
//! Two kinds of thread take the turn. The sync loop, a dedicated thread,
//! sleeps until an append (or a rotation, or close) wakes it. An appender
//! that finds nothing else staged and no flush under way takes the turn
//! itself and flushes its own records inline (`WalOptions::inline_flush`):
//! at low concurrency that saves the hand-off to the sync loop and the
//! wake-up back, the largest costs of a lone append on a small VM.
//! Appenders that stage while a flush is under way leave their chunks to
//! the next turn, which the sync loop takes.
//!
//! A write, fdatasync or roll error latches the log: the failing chunk, the
//! chunks after it and every later append get the same error. An fdatasync
//! is never retried, because after a failed one the kernel may already have
//! dropped the dirty pages.

use std::collections::VecDeque;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::{self, JoinHandle};

use narad_disk::{IO_ALIGN, IoBuf, OpenOptions};

use crate::direct::DirectTail;
use crate::error::{FailedOp, IoFailure};
use crate::frame::{FRAME_PAYLOAD_BYTES_MAX, parse_header};
use crate::log::Shared;
use crate::notify::{FlushError, FlushSlot};
use crate::recovery::Active;
use crate::segment::{PREP_FILE_NAME, segment_path};
use crate::staging::{AppendState, Chunk};

/// Starts the sync loop on its own thread.
///
/// # Errors
/// When the thread cannot be spawned.
pub(crate) fn spawn(shared: Arc<Shared>) -> io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name("narad-wal-sync".to_string())
        .spawn(move || run(&shared))
}

/// The segment being written and the buffer `O_DIRECT` writes are
/// assembled in. Only the holder of the flush turn touches it (the sync
/// loop, or an appender flushing inline), so its lock is never contended.
#[derive(Debug)]
pub(crate) struct Writer {
    active: Active,
    /// The aligned buffer `O_DIRECT` writes are assembled in; a chunk too
    /// large for it gets a buffer of its own.
    direct_buf: Option<IoBuf>,
}

impl Writer {
    pub(crate) fn new(active: Active, direct_buf: Option<IoBuf>) -> Self {
        Self { active, direct_buf }
    }
}

fn run(shared: &Shared) {
    while let Some(chunks) = wait_for_turn(shared) {
        // A panicking flush has latched the log and failed its waiters by
        // the time it unwinds to here (`FailOnPanic`); the loop lives on,
        // so close still finds a thread to drain and join.
        let _ = panic::catch_unwind(AssertUnwindSafe(|| flush_turn(shared, chunks)));
    }
    shared.frontier.stop();
}

/// Waits until chunks are staged and no one else is flushing, then takes
/// the turn and every staged chunk; `None` once the log is closed and
/// drained.
fn wait_for_turn(shared: &Shared) -> Option<VecDeque<Chunk>> {
    let mut state = shared.append.lock();
    loop {
        if !state.flushing {
            if !state.chunks.is_empty() {
                return Some(take_turn(shared, &mut state));
            }
            if state.closed {
                return None;
            }
        }
        // Every append, rotation and close changes this state under the
        // lock and then notifies, and so does the end of an inline flush:
        // no wake-up can be missed, and no timer runs.
        shared.work.wait(&mut state);
    }
}

/// Takes the flush turn and every staged chunk, in order. The caller must
/// hold the append lock, find no one flushing, and then call
/// [`flush_turn`] with what it took.
pub(crate) fn take_turn(shared: &Shared, state: &mut AppendState) -> VecDeque<Chunk> {
    debug_assert!(!state.flushing, "one flush turn at a time");
    state.flushing = true;
    let chunks = std::mem::take(&mut state.chunks);
    state.staged_bytes = 0;
    shared.room.notify_all();
    chunks
}

/// Writes and syncs `chunks` (taken with [`take_turn`]) on the calling
/// thread, completes their waiters, and ends the turn.
pub(crate) fn flush_turn(shared: &Shared, chunks: VecDeque<Chunk>) {
    let _turn = EndTurn { shared };
    let guard = FailOnPanic {
        shared,
        slots: chunks.iter().map(|c| Arc::clone(&c.slot)).collect(),
    };
    shared.writer.lock().flush_chunks(shared, chunks);
    drop(guard);
}

/// Ends the flush turn, also when the flush panicked, and wakes the sync
/// loop when chunks were staged meanwhile (appenders do not wake it while
/// a flush is under way) or the log is closing.
struct EndTurn<'a> {
    shared: &'a Shared,
}

impl Drop for EndTurn<'_> {
    fn drop(&mut self) {
        let wake = {
            let mut state = self.shared.append.lock();
            state.flushing = false;
            !state.chunks.is_empty() || state.closed
        };
        if wake {
            self.shared.work.notify_one();
        }
    }
}

impl Writer {
    fn flush_chunks(&mut self, shared: &Shared, chunks: VecDeque<Chunk>) {
        let mut pooled = Vec::new();
        let mut failure = shared.append.lock().latch.clone();
        for chunk in chunks {
            if let Some(failure) = &failure {
                chunk
                    .slot
                    .complete(Err(FlushError::Failed(failure.clone())));
                if chunk.pooled {
                    pooled.push(chunk.buf);
                }
                continue;
            }
            let slot = Arc::clone(&chunk.slot);
            let was_pooled = chunk.pooled;
            match self.write_chunk(shared, chunk) {
                Ok(buf) => {
                    slot.complete(Ok(()));
                    if was_pooled {
                        pooled.push(buf);
                    }
                }
                Err(error) => {
                    tracing::error!(error = %error, "ingress WAL failed; refusing appends until restart");
                    Self::latch(shared, &error);
                    slot.complete(Err(FlushError::Failed(error.clone())));
                    failure = Some(error);
                }
            }
        }
        let mut state = shared.append.lock();
        for buf in pooled {
            state.recycle(buf, true);
        }
    }

    fn latch(shared: &Shared, failure: &IoFailure) {
        {
            let mut state = shared.append.lock();
            if state.latch.is_none() {
                state.latch = Some(failure.clone());
            }
        }
        shared.failed.store(true, Ordering::Release);
        shared.room.notify_all();
        shared.frontier.stop();
    }

    /// Rolls if needed, writes and syncs one chunk; hands its buffer back.
    fn write_chunk(&mut self, shared: &Shared, chunk: Chunk) -> Result<IoBuf, IoFailure> {
        if chunk.segment_base != self.active.base {
            self.roll(shared, &chunk)?;
        }
        if chunk.buf.is_empty() {
            return Ok(chunk.buf);
        }
        check_chunk(&chunk, self.active.end, shared.options.record_bytes_max);
        let chunk_offset = chunk.offset;
        let end = chunk.offset + chunk.buf.len() as u64;
        // This thread only waits for the write and its fdatasync, so it runs
        // both itself (`write_and_sync_now`): no hand-off to a storage thread
        // and back. A prepared segment is written with `O_DIRECT` and
        // `RWF_DSYNC`, one system call.
        let written = if self.active.direct.is_some() {
            self.write_direct(shared, chunk.offset, chunk.buf)
        } else {
            self.active.file.write_and_sync_now(chunk.offset, chunk.buf)
        };
        let buf = written.map_err(|e| match narad_disk::sync_failure(&e) {
            Some(sync) => IoFailure::new(FailedOp::Sync, sync),
            None => IoFailure::new(FailedOp::Write, &e),
        })?;
        self.active.end = end;
        // Readers find the bytes in memory before they learn the new end.
        shared
            .recent
            .lock()
            .push(self.active.base, chunk_offset, &buf);
        shared.segments.lock().insert(self.active.base, end);
        shared.frontier.advance(chunk.end_seq);
        self.maybe_request_spare(shared);
        Ok(buf)
    }

    /// Writes and syncs `frames` at `offset` of the active `O_DIRECT`
    /// segment as whole blocks (see `direct.rs`); hands `frames` back.
    fn write_direct(&mut self, shared: &Shared, offset: u64, frames: IoBuf) -> io::Result<IoBuf> {
        let needed = frames.len() + 2 * IO_ALIGN;
        let (mut out, pooled) = match self.direct_buf.take() {
            Some(buf) if buf.capacity() >= needed => (buf, true),
            kept => {
                self.direct_buf = kept;
                (IoBuf::with_capacity(needed), false)
            }
        };
        let direct = self
            .active
            .direct
            .as_mut()
            .expect("write_direct is called for O_DIRECT segments only");
        let start = direct.fill(offset, &frames, &mut out);
        let out = self.active.file.write_and_sync_now(start, out)?;
        direct.written(start, &out, offset + frames.len() as u64);
        shared.direct_writes.fetch_add(1, Ordering::Relaxed);
        if pooled {
            self.direct_buf = Some(out);
        }
        Ok(frames)
    }

    /// Reopens the active segment with `O_DIRECT` when it is prepared and
    /// the options ask for it. Where that cannot be done (a file system that
    /// refuses `O_DIRECT`, a segment size that is not whole blocks) it stays
    /// written through the page cache, which is as durable, only dearer.
    pub(crate) fn go_direct(&mut self, shared: &Shared) {
        let Some(write_limit) = self.active.write_limit else {
            return;
        };
        if !shared.options.direct_io || self.active.direct.is_some() {
            return;
        }
        let path = segment_path(&shared.dir, self.active.base);
        let end = self.active.end;
        let block = end - end % IO_ALIGN as u64;
        let reopened = self.active.file.size().and_then(|size| {
            if !DirectTail::fits(size) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("a segment of {size} bytes is not whole 4 KiB blocks"),
                ));
            }
            let tail = self
                .active
                .file
                .read_at(block, (end - block) as usize)
                .wait()?;
            let options = OpenOptions {
                create: false,
                direct_io: true,
            };
            let file = shared.disk.open(&path, options)?;
            Ok((file, DirectTail::new(tail, end, write_limit, size)))
        });
        match reopened {
            Ok((file, direct)) => {
                self.active.file = file;
                self.active.direct = Some(direct);
            }
            Err(error) => tracing::info!(
                path = %path.display(),
                %error,
                "writing the prepared ingress WAL segment through the page cache, not O_DIRECT"
            ),
        }
    }

    fn maybe_request_spare(&self, shared: &Shared) {
        let options = &shared.options;
        if options.prealloc && self.active.end >= options.segment_bytes / 2 {
            shared.prep.request(self.active.base);
        }
    }

    /// Seals the active segment and makes the chunk's segment active: a
    /// prepared segment is trimmed to its data and synced first, then the
    /// spare is renamed into place (or an empty file created) and the
    /// directory synced.
    fn roll(&mut self, shared: &Shared, chunk: &Chunk) -> Result<(), IoFailure> {
        let new_base = chunk.segment_base;
        assert_eq!(
            new_base, chunk.first_seq,
            "a segment must start with the chunk's first record"
        );
        assert!(new_base > self.active.base, "segments only roll forward");
        assert_eq!(chunk.offset, 0, "a new segment is written from its start");
        let fail = |e: io::Error| IoFailure::new(FailedOp::Roll, &e);
        if self.active.write_limit.is_some() {
            self.active
                .file
                .truncate(self.active.end)
                .wait()
                .map_err(fail)?;
            self.active.file.fdatasync().wait().map_err(fail)?;
        }
        let disk = &*shared.disk;
        let dir = &shared.dir;
        let path = segment_path(dir, new_base);
        let use_spare = shared.options.prealloc && shared.prep.take_ready();
        if use_spare {
            disk.rename(&dir.join(PREP_FILE_NAME), &path)
                .map_err(fail)?;
        }
        let file = disk.open(&path, OpenOptions::CREATE).map_err(fail)?;
        if !use_spare && file.size().map_err(fail)? != 0 {
            return Err(fail(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("new segment {} is not empty", path.display()),
            )));
        }
        disk.sync_dir(dir).map_err(fail)?;
        shared.segments.lock().insert(new_base, 0);
        self.active = Active {
            base: new_base,
            file,
            end: 0,
            write_limit: use_spare.then_some(shared.options.prep_run_bytes_max),
            direct: None,
        };
        self.go_direct(shared);
        tracing::debug!(base = new_base, prepared = use_spare, "ingress WAL rolled");
        Ok(())
    }
}

/// If a flush panics (a broken invariant), latches the log and fails every
/// waiter it holds or that is staged, so no appender waits forever.
struct FailOnPanic<'a> {
    shared: &'a Shared,
    slots: Vec<Arc<FlushSlot>>,
}

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if !thread::panicking() {
            return;
        }
        let failure = IoFailure {
            op: FailedOp::SyncLoop,
            kind: io::ErrorKind::Other,
            raw_os_error: None,
            message: "a WAL flush panicked".to_string(),
        };
        let staged = {
            let mut state = self.shared.append.lock();
            state.latch.get_or_insert_with(|| failure.clone());
            std::mem::take(&mut state.chunks)
        };
        self.shared.failed.store(true, Ordering::Release);
        self.shared.flush_panics.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            dir = %self.shared.dir.display(),
            "an ingress WAL flush panicked; the WAL is latched failed and refuses appends until restart"
        );
        self.shared.room.notify_all();
        self.shared.frontier.stop();
        let error = FlushError::Failed(failure);
        for slot in self.slots.iter().chain(staged.iter().map(|c| &c.slot)) {
            slot.complete(Err(error.clone()));
        }
    }
}

/// Checks a chunk before it is written: it continues the segment's data
/// exactly, and its frames are whole with dense sequence numbers.
///
/// # Panics
/// On any mismatch: staging produced a bad chunk, and writing it would put
/// corruption on disk.
fn check_chunk(chunk: &Chunk, segment_end: u64, record_bytes_max: usize) {
    assert_eq!(
        chunk.offset, segment_end,
        "a chunk must start where the segment's data ends"
    );
    let mut at = 0;
    let mut seq = chunk.first_seq;
    while at < chunk.buf.len() {
        let header = match parse_header(
            &chunk.buf[at..],
            record_bytes_max.min(FRAME_PAYLOAD_BYTES_MAX),
        ) {
            Ok(header) => header,
            Err(fault) => panic!("staged frame at {at} is malformed: {fault}"),
        };
        assert_eq!(header.seq, seq, "staged frames must be numbered densely");
        at += header.frame_len();
        seq += 1;
    }
    assert_eq!(at, chunk.buf.len(), "a staged frame overruns its chunk");
    assert_eq!(
        seq, chunk.end_seq,
        "a chunk's frames must end at its end_seq"
    );
}
