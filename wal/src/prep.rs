//! Segment preparation: a background thread zero-fills the next segment so
//! that appends overwrite allocated blocks and an fdatasync on the append
//! path never changes a file's size.
//!
//! The spare is `next-segment.prep`: zeros to the full segment size, then
//! the 16-byte trailer, then one fdatasync. It is only ever used once
//! [`PrepStatus::Ready`]; a roll that finds none ready creates an empty
//! segment instead. A spare left by a crash is removed at open.

use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::{self, JoinHandle};

use narad_disk::{Disk, FileHandle, IO_ALIGN, IoBuf, OpenOptions};
use parking_lot::{Condvar, Mutex};

use crate::direct::DirectTail;
use crate::options::WalOptions;
use crate::segment::{PREP_FILE_NAME, PREP_TRAILER_BYTES, prep_trailer};

/// Zero-fill writes are this large: big enough to stream, small enough to
/// check for shutdown often.
const ZERO_WRITE_BYTES: usize = 1024 * 1024;

/// Where the spare stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PrepStatus {
    /// No spare, none asked for.
    Idle,
    /// Asked for, not started.
    Requested,
    /// Being zero-filled.
    Preparing,
    /// Complete and synced; the next roll renames it.
    Ready,
}

#[derive(Debug)]
struct PrepState {
    status: PrepStatus,
    /// The active segment a spare was last asked for: one attempt per
    /// segment, so a full disk does not turn every flush into a retry.
    asked_for: Option<u64>,
    stop: bool,
}

/// Shared between the sync loop (which asks and consumes) and the
/// preparation thread.
#[derive(Debug)]
pub(crate) struct Prep {
    state: Mutex<PrepState>,
    wake: Condvar,
    /// Preparations that panicked (each was dropped and the thread went on).
    panics: AtomicU64,
}

impl Prep {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(PrepState {
                status: PrepStatus::Idle,
                asked_for: None,
                stop: false,
            }),
            wake: Condvar::new(),
            panics: AtomicU64::new(0),
        })
    }

    /// Preparations that panicked since open.
    pub(crate) fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    /// Asks for a spare while `active_base` is the active segment, unless
    /// one exists, is under way, or was already asked for it.
    pub(crate) fn request(&self, active_base: u64) {
        let mut state = self.state.lock();
        if state.status != PrepStatus::Idle || state.asked_for == Some(active_base) {
            return;
        }
        state.status = PrepStatus::Requested;
        state.asked_for = Some(active_base);
        self.wake.notify_all();
    }

    /// Takes the ready spare, if there is one: the caller renames it.
    pub(crate) fn take_ready(&self) -> bool {
        let mut state = self.state.lock();
        if state.status == PrepStatus::Ready {
            state.status = PrepStatus::Idle;
            true
        } else {
            false
        }
    }

    pub(crate) fn status(&self) -> PrepStatus {
        self.state.lock().status
    }

    pub(crate) fn stop(&self) {
        self.state.lock().stop = true;
        self.wake.notify_all();
    }

    fn stopped(&self) -> bool {
        self.state.lock().stop
    }
}

/// Starts the preparation thread.
///
/// # Errors
/// When the thread cannot be spawned.
pub(crate) fn spawn(
    prep: Arc<Prep>,
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    options: WalOptions,
) -> std::io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name("narad-wal-prep".to_string())
        .spawn(move || run(&prep, &*disk, &dir, &options))
}

fn run(prep: &Prep, disk: &dyn Disk, dir: &Path, options: &WalOptions) {
    loop {
        {
            let mut state = prep.state.lock();
            while state.status != PrepStatus::Requested && !state.stop {
                prep.wake.wait(&mut state);
            }
            if state.stop {
                return;
            }
            state.status = PrepStatus::Preparing;
        }
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| prepare(prep, disk, dir, options)));
        let mut state = prep.state.lock();
        state.status = match outcome {
            Ok(Ok(true)) => PrepStatus::Ready,
            Ok(Ok(false)) => PrepStatus::Idle,
            Ok(Err(error)) => {
                tracing::warn!(
                    error = %error,
                    "preparing the next ingress WAL segment failed; the next roll creates an empty one"
                );
                let _ = disk.remove_file(&dir.join(PREP_FILE_NAME));
                PrepStatus::Idle
            }
            Err(_) => {
                prep.panics.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    dir = %dir.display(),
                    "preparing the next ingress WAL segment panicked; the spare is dropped, the next roll creates an empty segment, and preparation goes on"
                );
                let _ = disk.remove_file(&dir.join(PREP_FILE_NAME));
                PrepStatus::Idle
            }
        };
    }
}

/// Writes the spare. Returns `Ok(false)` when stopped before finishing.
pub(crate) fn prepare(
    prep: &Prep,
    disk: &dyn Disk,
    dir: &Path,
    options: &WalOptions,
) -> std::io::Result<bool> {
    let path = dir.join(PREP_FILE_NAME);
    if disk.exists(&path)? {
        // Left by a preparation that failed half-way; start from nothing.
        disk.remove_file(&path)?;
    }
    let (file, direct) = open_spare(disk, &path, options)?;
    // With O_DIRECT the zeros go to the device write by write, and the final
    // fdatasync has no dirty pages to flush. Through the page cache, 64 MiB
    // of dirty pages would reach the device in one burst at that fdatasync,
    // and every group commit and partition commit behind it would wait.
    let trailer_at = options.segment_bytes - PREP_TRAILER_BYTES as u64;
    let zeros_end = if direct {
        options.segment_bytes - IO_ALIGN as u64
    } else {
        trailer_at
    };
    let mut zeros = IoBuf::with_capacity(ZERO_WRITE_BYTES);
    let mut offset = 0u64;
    while offset < zeros_end {
        if prep.stopped() {
            return Ok(false);
        }
        let len = (zeros_end - offset).min(ZERO_WRITE_BYTES as u64) as usize;
        zeros.clear();
        zeros.extend_zeros(len);
        zeros = file.write_at(offset, zeros).wait()?;
        offset += len as u64;
    }
    // The last block (or, through the page cache, just the trailer).
    let mut last = IoBuf::with_capacity(IO_ALIGN);
    last.extend_zeros((trailer_at - zeros_end) as usize);
    last.extend_from_slice(&prep_trailer(options.prep_run_bytes_max));
    file.write_at(zeros_end, last).wait()?;
    file.fdatasync().wait()?;
    Ok(true)
}

/// Creates the spare, with `O_DIRECT` when the options ask for it and the
/// segment is whole blocks; through the page cache where the file system
/// refuses `O_DIRECT`. Returns the file and whether it is direct.
fn open_spare(
    disk: &dyn Disk,
    path: &Path,
    options: &WalOptions,
) -> std::io::Result<(FileHandle, bool)> {
    if options.direct_io && DirectTail::fits(options.segment_bytes) {
        let direct = OpenOptions {
            create: true,
            direct_io: true,
        };
        match disk.open(path, direct) {
            Ok(file) => return Ok((file, true)),
            Err(error) if error.kind() == std::io::ErrorKind::InvalidInput => {}
            Err(error) => return Err(error),
        }
    }
    Ok((disk.open(path, OpenOptions::CREATE)?, false))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use narad_disk::sim::{Fault, FaultError, FaultOp, SimDisk};

    use super::*;

    /// Waits for `done`, polling; the bound only stops a hung test.
    fn wait_until(what: &str, done: impl Fn() -> bool) {
        for _ in 0..3_000 {
            if done() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        panic!("timed out waiting for {what}");
    }

    #[test]
    fn a_panicking_preparation_is_counted_and_the_thread_goes_on() {
        let disk = SimDisk::new(5);
        let dir = PathBuf::from("/wal");
        disk.create_dir_all(&dir).expect("dir");
        let options = WalOptions {
            segment_bytes: 4 * ZERO_WRITE_BYTES as u64,
            prealloc: true,
            ..WalOptions::default()
        };
        disk.inject(Fault {
            op: FaultOp::Write,
            nth: 0,
            error: FaultError::Panic,
            sticky: true,
        });
        let prep = Prep::new();
        let thread = spawn(
            Arc::clone(&prep),
            Arc::new(disk.clone()),
            dir.clone(),
            options,
        )
        .expect("spawn");
        prep.request(0);
        wait_until("the panic to be counted", || {
            prep.panics() == 1 && prep.status() == PrepStatus::Idle
        });
        assert!(
            !disk.exists(&dir.join(PREP_FILE_NAME)).expect("exists"),
            "the half-made spare is removed"
        );
        disk.clear_faults();
        prep.request(1);
        wait_until("a spare after the panic", || {
            prep.status() == PrepStatus::Ready
        });
        prep.stop();
        thread.join().expect("the thread never died");
    }
}
