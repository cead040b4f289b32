//! The dispatch checkpoint: the first WAL sequence number the dispatcher
//! has not finished with, stored in the file `checkpoint` in the WAL
//! directory.
//!
//! # Layout
//!
//! Exactly [`CHECKPOINT_BYTES`] bytes: the sequence number as a big-endian
//! `u64`. A missing file means 0. Any other size is corruption, reported as
//! [`CheckpointError::Corrupt`] naming the file, never guessed around.
//!
//! # Protocol
//!
//! - Every [`CheckpointStore::store`] overwrites the 8 bytes in place at
//!   once, so a process crash keeps the value (it is in the page cache).
//! - A background flusher makes the value durable with one `fdatasync` for
//!   however many stores landed since the last one, at most
//!   [`CheckpointConfig::sync_delay`] after the first of them. The delay is
//!   measured in whole milliseconds on the node's monotonic clock (the
//!   [`Clock`] given to [`CheckpointStore::open`]), so a test on a
//!   `ManualClock` decides when a flush is due
//!   ([`CheckpointStore::flush_if_due`]).
//! - [`CheckpointStore::synced`] is the last value known durable. WAL
//!   compaction deletes segments only behind it, so a power loss, which may
//!   bring back an older checkpoint, never brings back one that points into
//!   a deleted segment (except when the disk loses an acknowledged
//!   `fdatasync`; the WAL's open handles that case by starting at its oldest
//!   segment).
//! - [`CheckpointStore::open`] fdatasyncs the recovered value before
//!   returning it: a crashed process may have left a value in the page cache
//!   only, and compaction must not trail a value that is not on disk.
//! - [`CheckpointStore::shutdown`] syncs the last stored value.
//! - A failed write or `fdatasync` latches the store: the error is returned
//!   and every later call fails with [`CheckpointError::Latched`]. It is
//!   never retried, because after a failed `fdatasync` the kernel may have
//!   dropped the dirty page, and a retry that succeeds would claim
//!   durability for bytes that are gone.
//!
//! # Crash safety
//!
//! The 8 bytes sit in one 512-byte sector at offset 0, and a sector write is
//! assumed atomic, so an overwrite leaves either the old or the new value,
//! never a mix. The file is only ever overwritten, never appended to: it is
//! created whole (8 zero bytes, synced) under a temporary name and renamed
//! into place, then the directory is synced, so a crash during creation
//! leaves either no `checkpoint` (read as 0) or a complete one.

use std::fmt;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use narad_clock::{Clock, millis};
use narad_disk::{Disk, FileHandle, IoBuf, OpenOptions};

/// The checkpoint's file name inside the WAL directory.
pub const CHECKPOINT_FILE_NAME: &str = "checkpoint";

/// The name a new checkpoint file is written under before it is renamed to
/// [`CHECKPOINT_FILE_NAME`]. Only a crash during creation leaves it behind,
/// and the next creation overwrites it.
pub const CHECKPOINT_TEMP_FILE_NAME: &str = "checkpoint.tmp";

/// The checkpoint file's size: one big-endian `u64`.
pub const CHECKPOINT_BYTES: u64 = 8;

/// How long a stored checkpoint may sit written but not yet fdatasynced.
///
/// Why 250 ms: the checkpoint moves on every commit that lands, which can be
/// thousands of times a second, and an fdatasync per move would put a disk
/// flush on the dispatcher's path. What the delay costs is bounded: a power
/// loss brings back a checkpoint at most this old, so the records dispatched
/// in that window are committed again (duplicates, never loss), and WAL
/// compaction trails the stored value by at most this long.
pub const CHECKPOINT_SYNC_DELAY_DEFAULT: Duration = Duration::from_millis(250);

/// The longest flush delay a configuration may ask for: past it, a power
/// loss would replay more than a few seconds of dispatched records and
/// compaction would lag for no gain.
pub const CHECKPOINT_SYNC_DELAY_MAX: Duration = Duration::from_secs(10);

const _: () =
    assert!(CHECKPOINT_SYNC_DELAY_DEFAULT.as_nanos() <= CHECKPOINT_SYNC_DELAY_MAX.as_nanos());
// The whole value must lie in the first 512-byte sector so that an overwrite
// is atomic on any disk.
const _: () = assert!(CHECKPOINT_BYTES <= 512);

/// How a [`CheckpointStore`] behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// How long after the first unsynced store the flusher fdatasyncs, in
    /// whole milliseconds of the clock (a fraction of one is dropped). At
    /// most [`CHECKPOINT_SYNC_DELAY_MAX`]; zero syncs as soon as the flusher
    /// wakes.
    pub sync_delay: Duration,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            sync_delay: CHECKPOINT_SYNC_DELAY_DEFAULT,
        }
    }
}

/// The file operation an error came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckpointOp {
    /// Opening or creating a file.
    Open,
    /// Reading the file's size or bytes.
    Read,
    /// Writing the 8 bytes.
    Write,
    /// Setting a new file's size.
    Truncate,
    /// `fdatasync` of the file.
    Fdatasync,
    /// Renaming the new file into place.
    Rename,
    /// Syncing the WAL directory after the rename.
    SyncDir,
    /// Starting the flusher thread.
    SpawnFlusher,
}

impl fmt::Display for CheckpointOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Open => "open",
            Self::Read => "read",
            Self::Write => "write",
            Self::Truncate => "truncate",
            Self::Fdatasync => "fdatasync",
            Self::Rename => "rename",
            Self::SyncDir => "directory sync",
            Self::SpawnFlusher => "starting the flusher thread",
        })
    }
}

/// Why a checkpoint operation failed.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The file exists but is not exactly [`CHECKPOINT_BYTES`] long.
    #[error("checkpoint file {} is {size} bytes; it must be exactly {CHECKPOINT_BYTES}", path.display())]
    Corrupt {
        /// The checkpoint file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// This call's file operation failed. When it was a write or an
    /// fdatasync of a running store, the store is now latched.
    #[error("checkpoint file {}: {op} failed: {source}", path.display())]
    Io {
        /// The file the operation was on.
        path: PathBuf,
        /// The operation.
        op: CheckpointOp,
        /// The system's error.
        #[source]
        source: Arc<io::Error>,
    },
    /// An earlier write or fdatasync failed; the store refuses all work
    /// until the WAL is reopened.
    #[error(
        "checkpoint file {}: an earlier {op} failed ({source}); the checkpoint store refuses \
         work until the WAL is reopened",
        path.display()
    )]
    Latched {
        /// The checkpoint file.
        path: PathBuf,
        /// The operation that failed first.
        op: CheckpointOp,
        /// Its error.
        #[source]
        source: Arc<io::Error>,
    },
    /// The store was shut down.
    #[error("checkpoint file {}: the checkpoint store is shut down", path.display())]
    Closed {
        /// The checkpoint file.
        path: PathBuf,
    },
}

/// When the flusher should next fdatasync: a pure schedule on the clock's
/// monotonic milliseconds, fed the time by its caller, so the timing rule
/// is tested with plain numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FlushSchedule {
    delay_ms: u64,
    /// When the oldest store not covered by a started fdatasync becomes due.
    due_at_ms: Option<u64>,
}

impl FlushSchedule {
    fn new(delay_ms: u64) -> Self {
        Self {
            delay_ms,
            due_at_ms: None,
        }
    }

    /// Records a store at `now_ms`; returns whether this store started a
    /// new wait (the flusher must be woken to arm its timer). Later stores
    /// do not push the flush back, so a stored value is durable within one
    /// delay (plus the fdatasync's own time) however busy the store is.
    fn on_store(&mut self, now_ms: u64) -> bool {
        if self.due_at_ms.is_some() {
            return false;
        }
        self.due_at_ms = Some(now_ms.saturating_add(self.delay_ms));
        true
    }

    /// An fdatasync is starting: it covers every store so far.
    fn on_sync_started(&mut self) {
        self.due_at_ms = None;
    }

    /// How long from `now_ms` until a flush is due: `None` while no store
    /// waits for one, `Some(0)` once one is due.
    fn due_in_ms(&self, now_ms: u64) -> Option<u64> {
        self.due_at_ms
            .map(|due_at_ms| due_at_ms.saturating_sub(now_ms))
    }
}

#[derive(Clone, Debug)]
struct Failure {
    op: CheckpointOp,
    source: Arc<io::Error>,
}

#[derive(Debug)]
struct State {
    /// The last value written to the file.
    stored: u64,
    /// The last value covered by a successful fdatasync.
    synced: u64,
    schedule: FlushSchedule,
    /// The 8-byte write buffer, reused across stores.
    buf: Option<IoBuf>,
    failure: Option<Failure>,
    closed: bool,
    /// Every fdatasync issued on the checkpoint file, failed ones included.
    sync_count: u64,
}

#[derive(Debug)]
struct Shared {
    file: FileHandle,
    path: PathBuf,
    /// The node's clock: flushes fall due and `wait_synced` times out on
    /// its monotonic milliseconds.
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// Wakes the flusher: a flush was scheduled, or the store is closing.
    flusher_wake: Condvar,
    /// Wakes waiters on `synced`: it advanced, or the store latched or closed.
    synced_advanced: Condvar,
    /// Serialises fdatasyncs, so `synced` only moves forward.
    sync_serial: Mutex<()>,
    /// Flushes that panicked (each latched the store).
    flusher_panics: AtomicU64,
}

/// The dispatch checkpoint of one WAL directory.
///
/// Share it behind an `Arc` between the dispatcher (which stores) and
/// compaction (which reads [`CheckpointStore::synced`]). Dropping it without
/// [`CheckpointStore::shutdown`] shuts it down, logging a failed final sync.
#[derive(Debug)]
pub struct CheckpointStore {
    shared: Arc<Shared>,
    flusher: Mutex<Option<JoinHandle<()>>>,
}

/// Locks a mutex, taking it over from a thread that panicked while holding
/// it: every critical section here leaves the state whole before anything
/// that can panic (the assertions run before any field changes).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl CheckpointStore {
    /// Opens the checkpoint in `wal_dir`, creating it (as 0) if missing, and
    /// fdatasyncs it before returning, so [`CheckpointStore::synced`] starts
    /// at the recovered value and compaction may trail it at once. Starts
    /// the flusher thread, which times flushes on `clock`. The directory
    /// must exist.
    ///
    /// # Errors
    /// [`CheckpointError::Corrupt`] when the file is not exactly 8 bytes;
    /// [`CheckpointError::Io`] when a file operation fails.
    ///
    /// # Panics
    /// If `config.sync_delay` exceeds [`CHECKPOINT_SYNC_DELAY_MAX`].
    pub fn open(
        disk: &dyn Disk,
        wal_dir: &Path,
        config: CheckpointConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, CheckpointError> {
        assert!(
            config.sync_delay <= CHECKPOINT_SYNC_DELAY_MAX,
            "checkpoint sync delay {:?} is over the limit of {:?}",
            config.sync_delay,
            CHECKPOINT_SYNC_DELAY_MAX
        );
        let path = wal_dir.join(CHECKPOINT_FILE_NAME);
        let (file, value) = match disk.open(&path, OpenOptions::EXISTING) {
            Ok(file) => {
                let value = read_value(&file, &path)?;
                io_step(&path, CheckpointOp::Fdatasync, file.fdatasync().wait())?;
                tracing::info!(checkpoint = value, path = %path.display(), "recovered WAL dispatch checkpoint");
                (file, value)
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                create_zeroed(disk, wal_dir, &path)?;
                let file = io_step(
                    &path,
                    CheckpointOp::Open,
                    disk.open(&path, OpenOptions::EXISTING),
                )?;
                tracing::info!(path = %path.display(), "created WAL dispatch checkpoint at 0");
                (file, 0)
            }
            Err(error) => return Err(io_error(&path, CheckpointOp::Open, error)),
        };
        let shared = Arc::new(Shared {
            file,
            path,
            clock,
            state: Mutex::new(State {
                stored: value,
                synced: value,
                schedule: FlushSchedule::new(millis(config.sync_delay)),
                buf: Some(IoBuf::with_capacity(CHECKPOINT_BYTES as usize)),
                failure: None,
                closed: false,
                sync_count: 1,
            }),
            flusher_wake: Condvar::new(),
            synced_advanced: Condvar::new(),
            sync_serial: Mutex::new(()),
            flusher_panics: AtomicU64::new(0),
        });
        let flusher_shared = Arc::clone(&shared);
        let flusher = thread::Builder::new()
            .name("narad-wal-checkpoint".to_owned())
            .spawn(move || flusher_shared.run_flusher());
        let flusher = io_step(&shared.path, CheckpointOp::SpawnFlusher, flusher)?;
        Ok(Self {
            shared,
            flusher: Mutex::new(Some(flusher)),
        })
    }

    /// Moves the checkpoint to `seq`: overwrites the file's 8 bytes now, and
    /// schedules the fdatasync that will make it durable. Storing the
    /// current value again does nothing.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] when the write fails (the store is then
    /// latched), [`CheckpointError::Latched`] after any earlier failure,
    /// [`CheckpointError::Closed`] after shutdown.
    ///
    /// # Panics
    /// If `seq` is below the stored value: the checkpoint never moves
    /// backwards, since that would re-dispatch records the WAL may already
    /// have compacted away.
    pub fn store(&self, seq: u64) -> Result<(), CheckpointError> {
        let shared = &self.shared;
        let mut state = lock(&shared.state);
        shared.check_usable(&state)?;
        assert!(
            seq >= state.stored,
            "checkpoint moved backwards from {} to {seq}",
            state.stored
        );
        if seq == state.stored {
            return Ok(());
        }
        let mut buf = state
            .buf
            .take()
            .unwrap_or_else(|| IoBuf::with_capacity(CHECKPOINT_BYTES as usize));
        buf.clear();
        buf.extend_from_slice(&seq.to_be_bytes());
        match shared.file.write_now(0, buf) {
            Ok(buf) => {
                state.buf = Some(buf);
                state.stored = seq;
                if state.schedule.on_store(shared.clock.now_ms()) {
                    shared.flusher_wake.notify_one();
                }
                Ok(())
            }
            Err(error) => Err(shared.latch(&mut state, CheckpointOp::Write, error)),
        }
    }

    /// The last value stored (written, not necessarily durable).
    pub fn stored(&self) -> u64 {
        lock(&self.shared.state).stored
    }

    /// Flushes of the background flusher that panicked since open; each
    /// latched the store (`narad_wal_worker_panics_total{worker="checkpoint"}`).
    pub fn flusher_panics(&self) -> u64 {
        self.shared.flusher_panics.load(Ordering::Relaxed)
    }

    /// The last value known durable: what WAL compaction may trail.
    pub fn synced(&self) -> u64 {
        lock(&self.shared.state).synced
    }

    /// How many fdatasyncs the store has issued on the file, the one at
    /// open and failed ones included.
    pub fn sync_count(&self) -> u64 {
        lock(&self.shared.state).sync_count
    }

    /// Whether a failed write or fdatasync has latched the store.
    pub fn is_latched(&self) -> bool {
        lock(&self.shared.state).failure.is_some()
    }

    /// The checkpoint file's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Waits until [`CheckpointStore::synced`] reaches `at_least` or
    /// `timeout` (whole milliseconds of the clock) passes, and returns the
    /// synced value then; it is below `at_least` only when the timeout
    /// passed.
    ///
    /// The wait blocks the thread for the time left by the clock's reading;
    /// a `ManualClock` moved past the deadline is noticed when that wait
    /// ends or `synced` moves.
    ///
    /// # Errors
    /// [`CheckpointError::Latched`] or [`CheckpointError::Closed`] when the
    /// value can no longer advance to `at_least`.
    pub fn wait_synced(&self, at_least: u64, timeout: Duration) -> Result<u64, CheckpointError> {
        let shared = &self.shared;
        // A timeout too long to add to now (`Duration::MAX`) waits forever.
        let deadline_ms = shared.clock.now_ms().checked_add(millis(timeout));
        let mut state = lock(&shared.state);
        loop {
            if state.synced >= at_least {
                return Ok(state.synced);
            }
            shared.check_usable(&state)?;
            let Some(deadline_ms) = deadline_ms else {
                state = shared
                    .synced_advanced
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            let now_ms = shared.clock.now_ms();
            if now_ms >= deadline_ms {
                return Ok(state.synced);
            }
            state = shared
                .synced_advanced
                .wait_timeout(state, Duration::from_millis(deadline_ms - now_ms))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// What the flusher does when it wakes: fdatasyncs if the schedule says
    /// a flush is due at the clock's reading now, and returns the value it
    /// made durable (`None` when none was due). A test that moves a
    /// `ManualClock` calls it to see the flush fall due without waiting for
    /// the flusher thread, which notices a moved clock only when its timed
    /// wait ends.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] when the fdatasync fails (the store is then
    /// latched), [`CheckpointError::Latched`] after any earlier failure,
    /// [`CheckpointError::Closed`] after shutdown.
    pub fn flush_if_due(&self) -> Result<Option<u64>, CheckpointError> {
        let shared = &self.shared;
        {
            let state = lock(&shared.state);
            shared.check_usable(&state)?;
            if state.schedule.due_in_ms(shared.clock.now_ms()) != Some(0) {
                return Ok(None);
            }
        }
        shared.sync().map(Some)
    }

    /// Makes the last stored value durable now, without waiting for the
    /// flusher, and returns it.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] when the fdatasync fails (the store is then
    /// latched), [`CheckpointError::Latched`] after any earlier failure,
    /// [`CheckpointError::Closed`] after shutdown.
    pub fn sync_now(&self) -> Result<u64, CheckpointError> {
        self.shared.check_usable(&lock(&self.shared.state))?;
        self.shared.sync()
    }

    /// Stops the flusher and makes the last stored value durable; later
    /// stores fail with [`CheckpointError::Closed`]. Calling it again only
    /// returns the synced value.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] when the final fdatasync fails,
    /// [`CheckpointError::Latched`] after an earlier failure.
    pub fn shutdown(&self) -> Result<u64, CheckpointError> {
        {
            let mut state = lock(&self.shared.state);
            if state.closed {
                self.shared.check_latched(&state)?;
                return Ok(state.synced);
            }
            state.closed = true;
            self.shared.flusher_wake.notify_all();
            self.shared.synced_advanced.notify_all();
        }
        if let Some(flusher) = lock(&self.flusher).take()
            && flusher.join().is_err()
        {
            tracing::error!(path = %self.shared.path.display(), "checkpoint flusher thread panicked");
        }
        self.shared.sync()
    }
}

impl Drop for CheckpointStore {
    fn drop(&mut self) {
        if lock(&self.shared.state).closed {
            return;
        }
        if let Err(error) = self.shutdown() {
            tracing::warn!(%error, "checkpoint store dropped without a final sync");
        }
    }
}

impl Shared {
    fn check_latched(&self, state: &State) -> Result<(), CheckpointError> {
        match &state.failure {
            Some(failure) => Err(CheckpointError::Latched {
                path: self.path.clone(),
                op: failure.op,
                source: Arc::clone(&failure.source),
            }),
            None => Ok(()),
        }
    }

    fn check_usable(&self, state: &State) -> Result<(), CheckpointError> {
        self.check_latched(state)?;
        if state.closed {
            return Err(CheckpointError::Closed {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// Latches the store with its first failure and wakes everyone waiting.
    fn latch(&self, state: &mut State, op: CheckpointOp, error: io::Error) -> CheckpointError {
        let source = Arc::new(error);
        tracing::error!(path = %self.path.display(), %op, error = %source, "checkpoint store latched");
        if state.failure.is_none() {
            state.failure = Some(Failure {
                op,
                source: Arc::clone(&source),
            });
        }
        self.flusher_wake.notify_all();
        self.synced_advanced.notify_all();
        CheckpointError::Io {
            path: self.path.clone(),
            op,
            source,
        }
    }

    /// One fdatasync covering every store so far; returns the value it made
    /// durable. Works on a closed store (shutdown's final sync), not on a
    /// latched one.
    fn sync(&self) -> Result<u64, CheckpointError> {
        let _serial = lock(&self.sync_serial);
        let target = {
            let mut state = lock(&self.state);
            self.check_latched(&state)?;
            state.schedule.on_sync_started();
            if state.stored == state.synced {
                return Ok(state.synced);
            }
            state.stored
        };
        // The state lock is released: stores go on while the disk flushes.
        // Every write of `target` or earlier completed before this call, so
        // this fdatasync covers it; later writes may or may not be covered,
        // and are not claimed.
        let result = self.file.fdatasync().wait();
        let mut state = lock(&self.state);
        state.sync_count += 1;
        match result {
            Ok(()) => {
                assert!(
                    target >= state.synced,
                    "synced checkpoint moved backwards from {} to {target}",
                    state.synced
                );
                state.synced = target;
                self.synced_advanced.notify_all();
                Ok(target)
            }
            Err(error) => Err(self.latch(&mut state, CheckpointOp::Fdatasync, error)),
        }
    }

    /// The flusher thread: waits for a due flush, syncs, repeats; exits when
    /// the store closes or latches.
    fn run_flusher(&self) {
        loop {
            {
                let mut state = lock(&self.state);
                loop {
                    if state.closed || state.failure.is_some() {
                        return;
                    }
                    state = match state.schedule.due_in_ms(self.clock.now_ms()) {
                        Some(0) => break,
                        // The clock is read again after the wait: a wait
                        // that ends early (or a clock that has not moved)
                        // only costs another turn of the loop.
                        Some(due_in_ms) => {
                            self.flusher_wake
                                .wait_timeout(state, Duration::from_millis(due_in_ms))
                                .unwrap_or_else(PoisonError::into_inner)
                                .0
                        }
                        None => self
                            .flusher_wake
                            .wait(state)
                            .unwrap_or_else(PoisonError::into_inner),
                    };
                }
            }
            // A failure latched the store and was logged there; the loop
            // then exits at its next check. A panic leaves unknown whether
            // the fdatasync ran or failed, and one that failed must not be
            // retried (the kernel may have dropped the pages): it latches
            // the store as a failed fdatasync does.
            if panic::catch_unwind(AssertUnwindSafe(|| self.sync())).is_err() {
                self.flusher_panics.fetch_add(1, Ordering::Relaxed);
                let mut state = lock(&self.state);
                let _ = self.latch(
                    &mut state,
                    CheckpointOp::Fdatasync,
                    io::Error::other(
                        "the checkpoint flush panicked; whether its fdatasync ran is unknown",
                    ),
                );
            }
        }
    }
}

/// Reads the value of an existing checkpoint file, refusing any size but 8.
fn read_value(file: &FileHandle, path: &Path) -> Result<u64, CheckpointError> {
    let corrupt = |size| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        size,
    };
    let size = io_step(path, CheckpointOp::Read, file.size())?;
    if size != CHECKPOINT_BYTES {
        return Err(corrupt(size));
    }
    let bytes = io_step(
        path,
        CheckpointOp::Read,
        file.read_at(0, CHECKPOINT_BYTES as usize).wait(),
    )?;
    // The file shrank between the size check and the read: report what was
    // read, still not 8 bytes.
    let value: [u8; CHECKPOINT_BYTES as usize] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| corrupt(bytes.len() as u64))?;
    Ok(u64::from_be_bytes(value))
}

/// Creates `checkpoint` holding 0, durably and whole: written and synced
/// under the temporary name, renamed into place, directory synced.
fn create_zeroed(disk: &dyn Disk, wal_dir: &Path, path: &Path) -> Result<(), CheckpointError> {
    let temp = wal_dir.join(CHECKPOINT_TEMP_FILE_NAME);
    let file = io_step(
        &temp,
        CheckpointOp::Open,
        disk.open(&temp, OpenOptions::CREATE),
    )?;
    // A crash during an earlier creation may have left a longer file.
    io_step(&temp, CheckpointOp::Truncate, file.truncate(0).wait())?;
    let zero = IoBuf::from_slice(&0u64.to_be_bytes());
    io_step(&temp, CheckpointOp::Write, file.write_at(0, zero).wait())?;
    io_step(&temp, CheckpointOp::Fdatasync, file.fdatasync().wait())?;
    drop(file);
    io_step(path, CheckpointOp::Rename, disk.rename(&temp, path))?;
    io_step(wal_dir, CheckpointOp::SyncDir, disk.sync_dir(wal_dir))
}

fn io_error(path: &Path, op: CheckpointOp, error: io::Error) -> CheckpointError {
    CheckpointError::Io {
        path: path.to_path_buf(),
        op,
        source: Arc::new(error),
    }
}

fn io_step<T>(path: &Path, op: CheckpointOp, result: io::Result<T>) -> Result<T, CheckpointError> {
    result.map_err(|error| io_error(path, op, error))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELAY_MS: u64 = 250;

    #[test]
    fn a_flush_is_due_one_delay_after_the_first_unsynced_store() {
        let mut schedule = FlushSchedule::new(DELAY_MS);
        assert_eq!(schedule.due_in_ms(1_000), None);
        assert!(schedule.on_store(1_000));
        assert_eq!(schedule.due_in_ms(1_000), Some(250));
        assert_eq!(schedule.due_in_ms(1_249), Some(1));
        assert_eq!(schedule.due_in_ms(1_250), Some(0));
        assert_eq!(schedule.due_in_ms(5_000), Some(0));
    }

    #[test]
    fn later_stores_do_not_push_the_flush_back() {
        let mut schedule = FlushSchedule::new(DELAY_MS);
        assert!(schedule.on_store(1_000));
        assert!(!schedule.on_store(1_100));
        assert!(!schedule.on_store(1_249));
        assert_eq!(schedule.due_in_ms(1_249), Some(1));
    }

    #[test]
    fn a_store_after_a_sync_started_schedules_the_next_flush() {
        let mut schedule = FlushSchedule::new(DELAY_MS);
        schedule.on_store(1_000);
        schedule.on_sync_started();
        assert_eq!(schedule.due_in_ms(1_300), None);
        assert!(schedule.on_store(1_300));
        assert_eq!(schedule.due_in_ms(1_300), Some(250));
    }

    #[test]
    fn a_zero_delay_is_due_at_once() {
        let mut schedule = FlushSchedule::new(0);
        assert!(schedule.on_store(7));
        assert_eq!(schedule.due_in_ms(7), Some(0));
    }

    #[test]
    fn the_default_delay_is_the_documented_quarter_second() {
        assert_eq!(
            CheckpointConfig::default().sync_delay,
            Duration::from_millis(250)
        );
    }
}
