//! The storage interface every backend implements.

use std::fmt;
use std::io;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{Completion, IoBuf};

/// The fdatasync part of a [`DiskFile::write_and_sync`] failed (the write
/// completed): the fdatasync's own error, wrapped so that callers which
/// treat the two differently (a failed fdatasync must never be retried) can
/// tell them apart with [`sync_failure`].
#[derive(Debug)]
struct SyncFailed(io::Error);

impl fmt::Display for SyncFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fdatasync failed: {}", self.0)
    }
}

impl std::error::Error for SyncFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Marks `error` as the failure of a write-and-sync's fdatasync part; for
/// backends implementing [`DiskFile::write_and_sync`].
pub fn sync_failed(error: io::Error) -> io::Error {
    io::Error::new(error.kind(), SyncFailed(error))
}

/// When `error` came from the fdatasync part of a
/// [`DiskFile::write_and_sync`], that fdatasync's own error (with its OS
/// error number); `None` for a failed write and for any other error.
pub fn sync_failure(error: &io::Error) -> Option<&io::Error> {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<SyncFailed>())
        .map(|failed| &failed.0)
}

/// Which backend serves a [`Disk`]; logged at start-up and exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// Storage threads each owning an io_uring ring.
    IoUring,
    /// `pwrite`/`pread`/`fdatasync` on a small thread pool.
    Portable,
    /// The in-memory simulated disk used by tests.
    Simulated,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::IoUring => "io_uring",
            Self::Portable => "portable",
            Self::Simulated => "simulated",
        })
    }
}

/// How to open a file. Files are always opened for reading and writing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Create the file if it does not exist (mode 0600).
    pub create: bool,
    /// Bypass the page cache (`O_DIRECT`): offsets, lengths and buffers must
    /// then be multiples of 4 KiB.
    pub direct_io: bool,
}

impl OpenOptions {
    /// Open an existing file.
    pub const EXISTING: Self = Self {
        create: false,
        direct_io: false,
    };
    /// Open a file, creating it if needed.
    pub const CREATE: Self = Self {
        create: true,
        direct_io: false,
    };
}

/// A file system as Narad's storage sees it.
///
/// Namespace operations (open, rename, remove, list, directory sync) are
/// rare and synchronous; data operations live on [`DiskFile`] and are
/// asynchronous.
pub trait Disk: Send + Sync + fmt::Debug + 'static {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// Opens `path` for reading and writing.
    ///
    /// # Errors
    /// `NotFound` when it does not exist and `options.create` is false, or
    /// any error of the file system.
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<FileHandle>;

    /// Creates a directory and its parents (mode 0700).
    ///
    /// # Errors
    /// Any error of the file system.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;

    /// Names of the entries of a directory, sorted.
    ///
    /// # Errors
    /// Any error of the file system.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;

    /// Whether `path` exists.
    ///
    /// # Errors
    /// Any error other than "not found".
    fn exists(&self, path: &Path) -> io::Result<bool>;

    /// When `path` (a file or a directory) was last modified, in Unix
    /// milliseconds. The real backends read it from the file system; the
    /// default (the simulated disk's) answers `Unsupported`.
    ///
    /// # Errors
    /// Any error of the file system; `Unsupported` where the backend keeps
    /// no modification times.
    fn modified_ms(&self, path: &Path) -> io::Result<u64> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{}: this disk keeps no modification times", path.display()),
        ))
    }

    /// Removes a file.
    ///
    /// # Errors
    /// Any error of the file system.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Renames a file, replacing the destination.
    ///
    /// # Errors
    /// Any error of the file system.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Makes the directory's entries (creates, renames, removes) durable.
    ///
    /// # Errors
    /// Any error of the file system.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;

    /// Registers buffers with the kernel for zero-copy writes, setting each
    /// buffer's slot index. Backends without the notion do nothing, and a
    /// buffer works the same registered or not.
    ///
    /// # Errors
    /// When registration fails; the buffers are then left unregistered.
    fn register_buffers(&self, buffers: &mut [IoBuf]) -> io::Result<()> {
        let _ = buffers;
        Ok(())
    }
}

/// One open file. Every method returns at once; its [`Completion`] resolves
/// when the operation finished.
pub trait DiskFile: Send + Sync + fmt::Debug {
    /// The path the file was opened at.
    fn path(&self) -> &Path;

    /// The file's current size in bytes.
    ///
    /// # Errors
    /// Any error of the file system.
    fn size(&self) -> io::Result<u64>;

    /// Writes all of `buf` at `offset` and hands the buffer back. Short
    /// writes are continued until every byte is written or an error occurs.
    fn write_at(&self, offset: u64, buf: IoBuf) -> Completion<IoBuf>;

    /// [`Self::write_at`] for a caller that would wait for it at once: the
    /// write is done when this returns.
    ///
    /// The real backends write on the calling thread (`pwrite`), so a small
    /// write that lands in the page cache (a checkpoint's 8 bytes) costs
    /// one system call instead of a hand-off to a storage thread and back.
    /// The default waits for [`Self::write_at`].
    ///
    /// # Errors
    /// As [`Self::write_at`].
    fn write_now(&self, offset: u64, buf: IoBuf) -> io::Result<IoBuf> {
        self.write_at(offset, buf).wait()
    }

    /// Reads up to `len` bytes at `offset`. Fewer bytes come back only when
    /// the file ends first.
    fn read_at(&self, offset: u64, len: usize) -> Completion<Vec<u8>>;

    /// [`Self::read_at`] into `buf`'s memory (its content is dropped), so a
    /// caller that reads often reuses one allocation instead of faulting in
    /// fresh pages each time (a partition log's read-back of each commit).
    /// The default ignores `buf` and reads with [`Self::read_at`].
    fn read_at_into(&self, offset: u64, len: usize, buf: Vec<u8>) -> Completion<Vec<u8>> {
        drop(buf);
        self.read_at(offset, len)
    }

    /// Makes every completed write to this file durable (`fdatasync`).
    fn fdatasync(&self) -> Completion<()>;

    /// Writes all of `buf` at `offset`, then makes the file durable
    /// (`fdatasync`), and hands the buffer back: the group-commit step of a
    /// log in one call.
    ///
    /// Completes `Ok` only when every byte was written and the fdatasync that
    /// followed succeeded. Otherwise it completes with the error of the part
    /// that failed: the write's (no fdatasync then runs), or the
    /// fdatasync's, which is never retried. The fdatasync's error comes
    /// wrapped so the caller can tell the two apart ([`sync_failure`] gives
    /// it back). Short writes are continued, and the fdatasync always runs
    /// after the last byte was written.
    ///
    /// The default waits for the write and then for the fdatasync on the
    /// calling thread, so it returns only when both finished: right for a
    /// backend whose operations complete in the call (the simulated disk).
    /// Backends with storage threads override it so that the call returns at
    /// once and both parts run back to back on their side.
    fn write_and_sync(&self, offset: u64, buf: IoBuf) -> Completion<IoBuf> {
        let result = self
            .write_at(offset, buf)
            .wait()
            .and_then(|buf| self.fdatasync().wait().map_err(sync_failed).map(|()| buf));
        Completion::ready(result)
    }

    /// [`Self::write_and_sync`] for a caller that would only wait for it (a
    /// log's dedicated flushing thread): the same contract, returned when
    /// done instead of as a [`Completion`].
    ///
    /// The real backends run it on the calling thread with plain system
    /// calls: `pwritev2(RWF_DSYNC)` for an `O_DIRECT` file, `pwrite` then
    /// `fdatasync` otherwise. A caller that blocks anyway then pays no
    /// hand-off to a storage thread and back, which on the 2-vCPU machines
    /// measured here cost more than the write (docs/internals/disk.md). The
    /// default waits for [`Self::write_and_sync`].
    ///
    /// # Errors
    /// As [`Self::write_and_sync`]: the write's error, or the fdatasync's,
    /// wrapped ([`sync_failure`]). An `RWF_DSYNC` write's `EIO`, `ENOSPC`
    /// or `EDQUOT` may be its flush's, so it comes wrapped as the
    /// fdatasync's: never retried.
    fn write_and_sync_now(&self, offset: u64, buf: IoBuf) -> io::Result<IoBuf> {
        self.write_and_sync(offset, buf).wait()
    }

    /// [`Self::write_and_sync_now`] for a caller of which several may be
    /// syncing different files of this disk at the same moment (a node's
    /// partition logs, each committing on its own thread): the same
    /// contract, and the same result for every caller as if it ran alone.
    ///
    /// A backend with a ring may submit the write-and-syncs that overlap
    /// together: the io_uring backend runs a lone one on the calling thread
    /// as [`Self::write_and_sync_now`] does, and sends those that start
    /// while another is running to its storage thread, which submits every
    /// request queued by then in one `io_uring_enter`, each file's write
    /// linked to its own fdatasync. A failed write or fdatasync fails only
    /// its own call. The default is [`Self::write_and_sync_now`].
    ///
    /// # Errors
    /// As [`Self::write_and_sync_now`].
    fn write_and_sync_gathered(&self, offset: u64, buf: IoBuf) -> io::Result<IoBuf> {
        self.write_and_sync_now(offset, buf)
    }

    /// Allocates `[offset, offset + len)` without writing it
    /// (`fallocate`, mode 0).
    fn fallocate(&self, offset: u64, len: u64) -> Completion<()>;

    /// Sets the file's size; does not sync.
    fn truncate(&self, len: u64) -> Completion<()>;
}

/// A shared handle to an open file; cheap to clone.
#[derive(Clone, Debug)]
pub struct FileHandle(Arc<dyn DiskFile>);

impl FileHandle {
    /// Wraps a backend's file.
    pub fn new(file: Arc<dyn DiskFile>) -> Self {
        Self(file)
    }

    /// The path the file was opened at, owned.
    pub fn path_buf(&self) -> PathBuf {
        self.0.path().to_path_buf()
    }
}

impl Deref for FileHandle {
    type Target = dyn DiskFile;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}
