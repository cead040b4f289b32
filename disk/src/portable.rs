//! The portable backend: `pwrite`, `pread` and `fdatasync` on a small pool of
//! threads.
//!
//! It serves where io_uring cannot be set up (an old kernel, a seccomp
//! profile that blocks it, `kernel.io_uring_disabled`) and as the reference
//! the io_uring backend is tested against.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;

use crate::queue::{self, Receiver, Sender};
use crate::{BackendKind, Completion, Disk, DiskFile, FileHandle, IoBuf, OpenOptions};

/// Threads serving disk operations. Two are enough to overlap an fdatasync
/// with a write to another file; more only add contention on 2-core machines.
pub const PORTABLE_THREADS_DEFAULT: usize = 4;

/// Operations queued ahead of the pool before submitters wait: a bound on
/// memory, not a tuning knob; a full queue is backpressure.
pub const PORTABLE_QUEUE_CAPACITY: usize = 1024;

type Job = Box<dyn FnOnce() + Send>;

/// The portable backend. Dropping the last handle stops its threads once
/// their queue is drained.
#[derive(Debug, Clone)]
pub struct PortableDisk {
    jobs: Sender<Job>,
}

impl PortableDisk {
    /// Starts a pool of `threads` storage threads.
    ///
    /// # Errors
    /// When a thread cannot be spawned.
    pub fn new(threads: usize) -> io::Result<Self> {
        let (jobs, queue) = queue::bounded::<Job>(PORTABLE_QUEUE_CAPACITY);
        for index in 0..threads.max(1) {
            let queue: Receiver<Job> = queue.clone();
            thread::Builder::new()
                .name(format!("narad-disk-{index}"))
                .spawn(move || {
                    while let Some(job) = queue.recv() {
                        job();
                    }
                })?;
        }
        Ok(Self { jobs })
    }

    fn run<T: Send + 'static>(
        &self,
        operation: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> Completion<T> {
        let (sender, completion) = Completion::channel();
        let job: Job = Box::new(move || sender.complete(operation()));
        if self.jobs.send(job).is_err() {
            // Only possible if every pool thread died; the completion then
            // resolves to "storage thread stopped" because the sender dropped.
            tracing::error!("portable disk pool has no threads left");
        }
        completion
    }
}

/// The namespace operations of a backend over the real file system: every
/// such backend creates, lists, removes, renames and syncs directories the
/// same way, through `std`; only data operations differ. Expands to those
/// methods of a [`Disk`] impl.
macro_rules! std_namespace_ops {
    () => {
        fn create_dir_all(&self, path: &std::path::Path) -> std::io::Result<()> {
            $crate::portable::create_dir_all_std(path)
        }

        fn list_dir(&self, path: &std::path::Path) -> std::io::Result<Vec<String>> {
            $crate::portable::list_dir_std(path)
        }

        fn exists(&self, path: &std::path::Path) -> std::io::Result<bool> {
            path.try_exists()
        }

        fn modified_ms(&self, path: &std::path::Path) -> std::io::Result<u64> {
            let modified = std::fs::metadata(path)?.modified()?;
            let since_epoch = modified
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Ok(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
        }

        fn remove_file(&self, path: &std::path::Path) -> std::io::Result<()> {
            std::fs::remove_file(path)
        }

        fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
            std::fs::rename(from, to)
        }

        fn sync_dir(&self, path: &std::path::Path) -> std::io::Result<()> {
            $crate::portable::sync_dir_std(path)
        }
    };
}
pub(crate) use std_namespace_ops;

impl Disk for PortableDisk {
    fn kind(&self) -> BackendKind {
        BackendKind::Portable
    }

    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<FileHandle> {
        let file = open_std(path, options)?;
        Ok(FileHandle::new(Arc::new(PortableFile {
            disk: self.clone(),
            file: Arc::new(file),
            path: path.to_path_buf(),
            direct_io: options.direct_io,
        })))
    }

    std_namespace_ops!();
}

/// Creates a directory and its parents as every real backend does: 0700.
pub(crate) fn create_dir_all_std(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

/// Makes a directory's entries durable: fsync of the directory itself.
pub(crate) fn sync_dir_std(path: &Path) -> io::Result<()> {
    fs::File::open(path)?.sync_all()
}

/// Opens a file as every real backend does: read-write, 0600, optionally
/// `O_DIRECT`.
pub(crate) fn open_std(path: &Path, options: OpenOptions) -> io::Result<fs::File> {
    let mut open = fs::OpenOptions::new();
    open.read(true)
        .write(true)
        .create(options.create)
        .mode(0o600);
    if options.direct_io {
        open.custom_flags(libc::O_DIRECT);
    }
    open.open(path)
}

/// Lists a directory's entry names, sorted, refusing names that are not
/// UTF-8 (Narad never creates such names).
pub(crate) fn list_dir_std(path: &Path) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(path)? {
        let name = entry?.file_name().into_string().map_err(|name| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("non-UTF-8 file name {name:?}"),
            )
        })?;
        names.push(name);
    }
    names.sort();
    Ok(names)
}

/// `fallocate(2)` with mode 0 on a real file.
pub(crate) fn fallocate_std(file: &fs::File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let to_off = |value: u64| {
        libc::off_t::try_from(value)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "fallocate range too large"))
    };
    let (offset, len) = (to_off(offset)?, to_off(len)?);
    // SAFETY: the descriptor is owned by `file`, which outlives the call;
    // fallocate reads no user memory.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[derive(Debug)]
struct PortableFile {
    disk: PortableDisk,
    file: Arc<fs::File>,
    path: PathBuf,
    direct_io: bool,
}

impl DiskFile for PortableFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn write_at(&self, offset: u64, buf: IoBuf) -> Completion<IoBuf> {
        let file = Arc::clone(&self.file);
        self.disk.run(move || {
            // `write_all_at` continues short writes and fails on a zero-byte
            // write, so either every byte landed or we report an error.
            file.write_all_at(&buf, offset)?;
            Ok(buf)
        })
    }

    fn read_at(&self, offset: u64, len: usize) -> Completion<Vec<u8>> {
        let file = Arc::clone(&self.file);
        let direct_io = self.direct_io;
        self.disk
            .run(move || read_full_at(&file, offset, len, direct_io))
    }

    fn fdatasync(&self) -> Completion<()> {
        let file = Arc::clone(&self.file);
        self.disk.run(move || file.sync_data())
    }

    /// One job on the pool: the same thread writes and then syncs, so the
    /// caller is woken once.
    fn write_and_sync(&self, offset: u64, buf: IoBuf) -> Completion<IoBuf> {
        let file = Arc::clone(&self.file);
        self.disk.run(move || {
            write_then_sync_std(&file, offset, &buf)?;
            Ok(buf)
        })
    }

    fn write_now(&self, offset: u64, buf: IoBuf) -> io::Result<IoBuf> {
        self.file.write_all_at(&buf, offset)?;
        Ok(buf)
    }

    fn write_and_sync_now(&self, offset: u64, buf: IoBuf) -> io::Result<IoBuf> {
        write_and_sync_std(&self.file, offset, &buf, self.direct_io)?;
        Ok(buf)
    }

    fn fallocate(&self, offset: u64, len: u64) -> Completion<()> {
        let file = Arc::clone(&self.file);
        self.disk.run(move || fallocate_std(&file, offset, len))
    }

    fn truncate(&self, len: u64) -> Completion<()> {
        let file = Arc::clone(&self.file);
        self.disk.run(move || file.set_len(len))
    }
}

/// `pwrite` until every byte of `bytes` is at `offset`, then one
/// `fdatasync`, never retried (see the crate documentation); its error comes
/// marked as the fdatasync's.
fn write_then_sync_std(file: &fs::File, offset: u64, bytes: &[u8]) -> io::Result<()> {
    // `write_all_at` continues short writes and fails on a zero-byte one.
    file.write_all_at(bytes, offset)?;
    file.sync_data().map_err(crate::sync_failed)
}

/// Writes all of `bytes` at `offset` and makes them durable, on the calling
/// thread: [`crate::DiskFile::write_and_sync_now`] of both real backends.
///
/// An `O_DIRECT` file takes `pwritev2(RWF_DSYNC)`: each call returns once
/// the bytes it wrote are durable, so a short write continues with the rest
/// and no fdatasync follows. Any other file takes `pwrite` until done, then
/// one `fdatasync`, never retried.
pub(crate) fn write_and_sync_std(
    file: &fs::File,
    offset: u64,
    bytes: &[u8],
    direct_io: bool,
) -> io::Result<()> {
    if !direct_io || bytes.is_empty() {
        return write_then_sync_std(file, offset, bytes);
    }
    let mut written = 0;
    while written < bytes.len() {
        let rest = &bytes[written..];
        let iov = libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        };
        let at = libc::off_t::try_from(offset + written as u64)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past off_t"))?;
        // SAFETY: `iov` describes `rest`, which outlives the call; the
        // kernel only reads from it.
        let result = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, at, libc::RWF_DSYNC) };
        match usize::try_from(result) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!(
                        "write made no progress after {written} of {} bytes",
                        bytes.len()
                    ),
                ));
            }
            Ok(count) => written += count,
            Err(_) => {
                let error = io::Error::last_os_error();
                match error.raw_os_error() {
                    Some(libc::EINTR | libc::EAGAIN) => {}
                    Some(libc::EIO | libc::ENOSPC | libc::EDQUOT) => {
                        return Err(crate::sync_failed(error));
                    }
                    _ => return Err(error),
                }
            }
        }
    }
    Ok(())
}

/// Reads up to `len` bytes, continuing short reads until end of file.
/// `O_DIRECT` files read into an aligned buffer first, as they must.
pub(crate) fn read_full_at(
    file: &fs::File,
    offset: u64,
    len: usize,
    direct_io: bool,
) -> io::Result<Vec<u8>> {
    if direct_io {
        let mut aligned = IoBuf::with_capacity(len);
        let filled = read_into(file, offset, &mut aligned.spare_capacity_mut()[..len])?;
        return Ok(aligned.spare_capacity_mut()[..filled].to_vec());
    }
    let mut data = vec![0u8; len];
    let filled = read_into(file, offset, &mut data)?;
    data.truncate(filled);
    Ok(data)
}

/// Fills `data` from `offset` until it is full or the file ends; returns the
/// bytes read.
fn read_into(file: &fs::File, offset: u64, data: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < data.len() {
        match file.read_at(&mut data[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_read_back_and_survive_sync() {
        let dir = tempfile::tempdir().unwrap();
        let disk = PortableDisk::new(2).unwrap();
        let file = disk
            .open(&dir.path().join("a"), OpenOptions::CREATE)
            .unwrap();
        let buf = file
            .write_at(3, IoBuf::from_slice(b"hello"))
            .wait()
            .unwrap();
        assert_eq!(&buf[..], b"hello");
        file.fdatasync().wait().unwrap();
        assert_eq!(file.size().unwrap(), 8);
        assert_eq!(file.read_at(0, 100).wait().unwrap(), b"\0\0\0hello");
    }

    #[test]
    fn truncate_and_fallocate_change_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let disk = PortableDisk::new(1).unwrap();
        let file = disk
            .open(&dir.path().join("b"), OpenOptions::CREATE)
            .unwrap();
        file.fallocate(0, 1 << 16).wait().unwrap();
        assert_eq!(file.size().unwrap(), 1 << 16);
        file.truncate(10).wait().unwrap();
        assert_eq!(file.size().unwrap(), 10);
    }

    #[test]
    fn opening_a_missing_file_without_create_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let disk = PortableDisk::new(1).unwrap();
        let error = disk
            .open(&dir.path().join("missing"), OpenOptions::EXISTING)
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn namespace_operations_list_rename_and_remove() {
        let dir = tempfile::tempdir().unwrap();
        let disk = PortableDisk::new(1).unwrap();
        let sub = dir.path().join("x/y");
        disk.create_dir_all(&sub).unwrap();
        drop(disk.open(&sub.join("b"), OpenOptions::CREATE).unwrap());
        disk.rename(&sub.join("b"), &sub.join("a")).unwrap();
        disk.sync_dir(&sub).unwrap();
        assert_eq!(disk.list_dir(&sub).unwrap(), vec!["a".to_string()]);
        disk.remove_file(&sub.join("a")).unwrap();
        assert!(!disk.exists(&sub.join("a")).unwrap());
    }
}
