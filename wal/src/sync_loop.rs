//! Group commit's doing half: the sync loop.
//!
//! One dedicated thread owns the active segment. It sleeps until an append
//! (or a rotation, or close) wakes it, takes every staged chunk at once,
//! and for each: rolls to the chunk's segment if it differs, writes the
//! chunk and fdatasyncs it on this thread (`write_and_sync_now`; `O_DIRECT`
//! and `RWF_DSYNC` for a prepared segment), advances the durable frontier
//! and completes the chunk's waiters with the true outcome. Each write is
//! synced before the next one is issued, so a file never has more than one
//! unsynced write: a crash can tear only the last write of the last segment.
//!
//! A write, fdatasync or roll error latches the log: the failing chunk, the
//! chunks after it and every later append get the same error. An fdatasync
//! is never retried, because after a failed one the kernel may already have
//! dropped the dirty pages.

use std::collections::VecDeque;
use std::io;
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
use crate::staging::Chunk;

/// Starts the sync loop on its own thread.
///
/// # Errors
/// When the thread cannot be spawned.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    active: Active,
    direct_buf: Option<IoBuf>,
) -> io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name("narad-wal-sync".to_string())
        .spawn(move || {
            SyncLoop {
                shared,
                active,
                direct_buf,
            }
            .run();
        })
}

struct SyncLoop {
    shared: Arc<Shared>,
    active: Active,
    /// The aligned buffer `O_DIRECT` writes are assembled in; a chunk too
    /// large for it gets a buffer of its own.
    direct_buf: Option<IoBuf>,
}

impl SyncLoop {
    fn run(mut self) {
        self.go_direct();
        while let Some(chunks) = self.take_staged() {
            self.flush(chunks);
        }
        self.shared.frontier.stop();
    }

    /// Waits for staged chunks and takes them all; `None` once the log is
    /// closed and drained.
    fn take_staged(&self) -> Option<VecDeque<Chunk>> {
        let mut state = self.shared.append.lock();
        loop {
            if !state.chunks.is_empty() {
                let chunks = std::mem::take(&mut state.chunks);
                state.staged_bytes = 0;
                self.shared.room.notify_all();
                return Some(chunks);
            }
            if state.closed {
                return None;
            }
            // Every append, rotation and close changes this state under the
            // lock and then notifies, so no wake-up can be missed: no timer.
            self.shared.work.wait(&mut state);
        }
    }

    fn flush(&mut self, chunks: VecDeque<Chunk>) {
        let shared = Arc::clone(&self.shared);
        let guard = FailOnPanic {
            shared: &shared,
            slots: chunks.iter().map(|c| Arc::clone(&c.slot)).collect(),
        };
        self.flush_chunks(chunks);
        drop(guard);
    }

    fn flush_chunks(&mut self, chunks: VecDeque<Chunk>) {
        let mut pooled = Vec::new();
        let mut failure = self.shared.append.lock().latch.clone();
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
            match self.write_chunk(chunk) {
                Ok(buf) => {
                    slot.complete(Ok(()));
                    if was_pooled {
                        pooled.push(buf);
                    }
                }
                Err(error) => {
                    tracing::error!(error = %error, "ingress WAL failed; refusing appends until restart");
                    self.latch(&error);
                    slot.complete(Err(FlushError::Failed(error.clone())));
                    failure = Some(error);
                }
            }
        }
        let mut state = self.shared.append.lock();
        for buf in pooled {
            state.recycle(buf, true);
        }
    }

    fn latch(&self, failure: &IoFailure) {
        {
            let mut state = self.shared.append.lock();
            if state.latch.is_none() {
                state.latch = Some(failure.clone());
            }
        }
        self.shared.failed.store(true, Ordering::Release);
        self.shared.room.notify_all();
        self.shared.frontier.stop();
    }

    /// Rolls if needed, writes and syncs one chunk; hands its buffer back.
    fn write_chunk(&mut self, chunk: Chunk) -> Result<IoBuf, IoFailure> {
        if chunk.segment_base != self.active.base {
            self.roll(&chunk)?;
        }
        if chunk.buf.is_empty() {
            return Ok(chunk.buf);
        }
        check_chunk(
            &chunk,
            self.active.end,
            self.shared.options.record_bytes_max,
        );
        let chunk_offset = chunk.offset;
        let end = chunk.offset + chunk.buf.len() as u64;
        // This thread only waits for the write and its fdatasync, so it runs
        // both itself (`write_and_sync_now`): no hand-off to a storage thread
        // and back. A prepared segment is written with `O_DIRECT` and
        // `RWF_DSYNC`, one system call.
        let written = if self.active.direct.is_some() {
            self.write_direct(chunk.offset, chunk.buf)
        } else {
            self.active.file.write_and_sync_now(chunk.offset, chunk.buf)
        };
        let buf = written.map_err(|e| match narad_disk::sync_failure(&e) {
            Some(sync) => IoFailure::new(FailedOp::Sync, sync),
            None => IoFailure::new(FailedOp::Write, &e),
        })?;
        self.active.end = end;
        // Readers find the bytes in memory before they learn the new end.
        self.shared
            .recent
            .lock()
            .push(self.active.base, chunk_offset, &buf);
        self.shared.segments.lock().insert(self.active.base, end);
        self.shared.frontier.advance(chunk.end_seq);
        self.maybe_request_spare();
        Ok(buf)
    }

    /// Writes and syncs `frames` at `offset` of the active `O_DIRECT`
    /// segment as whole blocks (see `direct.rs`); hands `frames` back.
    fn write_direct(&mut self, offset: u64, frames: IoBuf) -> io::Result<IoBuf> {
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
        self.shared.direct_writes.fetch_add(1, Ordering::Relaxed);
        if pooled {
            self.direct_buf = Some(out);
        }
        Ok(frames)
    }

    /// Reopens the active segment with `O_DIRECT` when it is prepared and
    /// the options ask for it. Where that cannot be done (a file system that
    /// refuses `O_DIRECT`, a segment size that is not whole blocks) it stays
    /// written through the page cache, which is as durable, only dearer.
    fn go_direct(&mut self) {
        let Some(write_limit) = self.active.write_limit else {
            return;
        };
        if !self.shared.options.direct_io || self.active.direct.is_some() {
            return;
        }
        let path = segment_path(&self.shared.dir, self.active.base);
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
            let file = self.shared.disk.open(&path, options)?;
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

    fn maybe_request_spare(&self) {
        let options = &self.shared.options;
        if options.prealloc && self.active.end >= options.segment_bytes / 2 {
            self.shared.prep.request(self.active.base);
        }
    }

    /// Seals the active segment and makes the chunk's segment active: a
    /// prepared segment is trimmed to its data and synced first, then the
    /// spare is renamed into place (or an empty file created) and the
    /// directory synced.
    fn roll(&mut self, chunk: &Chunk) -> Result<(), IoFailure> {
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
        let disk = &*self.shared.disk;
        let dir = &self.shared.dir;
        let path = segment_path(dir, new_base);
        let use_spare = self.shared.options.prealloc && self.shared.prep.take_ready();
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
        self.shared.segments.lock().insert(new_base, 0);
        self.active = Active {
            base: new_base,
            file,
            end: 0,
            write_limit: use_spare.then_some(self.shared.options.prep_run_bytes_max),
            direct: None,
        };
        self.go_direct();
        tracing::debug!(base = new_base, prepared = use_spare, "ingress WAL rolled");
        Ok(())
    }
}

/// If the sync loop panics (a broken invariant), latches the log and fails
/// every waiter it holds or that is staged, so no appender waits forever.
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
            message: "the WAL sync loop panicked".to_string(),
        };
        let staged = {
            let mut state = self.shared.append.lock();
            state.latch.get_or_insert_with(|| failure.clone());
            std::mem::take(&mut state.chunks)
        };
        self.shared.failed.store(true, Ordering::Release);
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
