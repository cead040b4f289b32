//! The simulated disk: an in-memory [`Disk`] that loses what a power cut
//! would lose, tears writes the way real disks do, and fails chosen
//! operations on demand. Every random choice comes from one seed, so a
//! failing run replays exactly.
//!
//! # Fault model
//!
//! **Data.** Each file has its *live* bytes (what a running process reads)
//! and its *durable* bytes (what a power cut leaves). A successful
//! [`DiskFile::fdatasync`] makes the live bytes durable, size included (so a
//! `truncate` or `fallocate` becomes durable with the next fdatasync, as with
//! `fdatasync(2)`). Nothing else ever makes data durable: there is no
//! background writeback.
//!
//! **Crash.** [`SimDisk::crash`] is a power cut followed by a restart:
//! - every file goes back to its durable bytes;
//! - with [`Tear::None`] every unsynced write is dropped;
//! - with [`Tear::LastWrite`] the *last* unsynced write of each file (the
//!   last write since its last successful fdatasync, if no truncate or
//!   fallocate came after it) is torn instead of dropped; earlier unsynced
//!   writes are still dropped. The part of the write at or past the durable
//!   size keeps a random prefix (possibly empty, possibly whole); if the write
//!   started past the durable size and any of it is kept, the gap before it
//!   reads as zeros. The part that overwrites durable bytes (a preallocated
//!   segment) keeps a random subset of its 512-byte sectors, each sector
//!   whole or not at all, and the other sectors keep their old bytes. So a
//!   hole of old bytes (zeros, in a zero-filled segment) can sit before valid
//!   new bytes. Sectors are counted from the start of the file.
//! - handles opened before the crash are dead: every operation on them fails,
//!   because the process that held them is gone. Reopen the files.
//!
//! **Namespace.** Creating a file (`open` with `create`), `rename` and
//! `remove_file` change the live namespace at once, but survive a crash only
//! if their parent directory was synced ([`Disk::sync_dir`]) after them;
//! otherwise the crash reverts them (a created file vanishes, a renamed file
//! is back under its old name, a removed file is back). A file's data and its
//! name are separate: a synced file whose creation was never made durable
//! vanishes. Directories made by `create_dir_all` are durable at once (a
//! simplification: Narad creates its directories before it stores data).
//! `rename` moves files only. An unlinked file stays readable and writable
//! through handles already open, as in POSIX.
//!
//! **Injected faults.** [`SimDisk::inject`] arms a [`Fault`]: the `nth`
//! (0 = the very next) data operation matching its [`FaultOp`], counted from
//! the moment it was armed, fails with its error; a sticky fault fails that
//! one and every later matching operation until [`SimDisk::clear_faults`].
//! Faults describe the device, so a crash does not clear them. Only data
//! operations (write, read, fdatasync, fallocate, truncate) take faults;
//! namespace operations never fail by injection. A failed operation changes
//! nothing, except a write failing with `ENOSPC`, which may leave a random
//! prefix (possibly empty) of its bytes in the live file, unsynced, like a
//! real short write followed by a full disk. A failed fdatasync makes nothing
//! newly durable. (A later fdatasync that succeeds does make the data durable
//! here, which is kinder than ext4, where the pages may already be marked
//! clean: callers must not retry, and tests should check that they latch.)
//!
//! **Write and sync.** [`DiskFile::write_and_sync`] is a write followed by
//! an fdatasync, two data operations, each taking faults as it would alone:
//! a failed write runs no sync; a failed sync leaves the write live but not
//! durable.
//!
//! **Direct I/O.** A file opened with `direct_io` refuses, with `EINVAL`,
//! reads and writes whose offset or length is not a multiple of
//! [`IO_ALIGN`], like `O_DIRECT`.
//!
//! Every data operation completes at once; [`SimDisk::op_count`] counts them
//! (failed ones included, operations on dead handles excluded) so seeded
//! tests can pick crash and fault points.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::{BackendKind, Completion, Disk, DiskFile, FileHandle, IO_ALIGN, IoBuf, OpenOptions};

/// The unit a torn overwrite keeps or loses as a whole: the smallest sector
/// a disk writes atomically.
pub const SECTOR_BYTES: u64 = 512;

/// How a crash treats each file's last unsynced write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tear {
    /// Every unsynced write is dropped.
    None,
    /// The last unsynced write of each file is torn (see the module doc).
    LastWrite,
}

/// An armed failure: the `nth` (0 = the very next) operation matching `op`
/// fails with `error`; with `sticky`, so does every later matching one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Which operations count and fail.
    pub op: FaultOp,
    /// How many matching operations pass before one fails.
    pub nth: u64,
    /// The error the operation fails with.
    pub error: FaultError,
    /// Keep failing every later matching operation until cleared.
    pub sticky: bool,
}

/// The kind of data operation a [`Fault`] matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOp {
    /// Every data operation.
    Any,
    /// `write_at`, and the write part of `write_and_sync`.
    Write,
    /// `read_at`.
    Read,
    /// `fdatasync`, and the sync part of `write_and_sync`.
    Sync,
    /// `fallocate`.
    Fallocate,
    /// `truncate`.
    Truncate,
}

/// The error an injected fault returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultError {
    /// `EIO`: the device failed.
    Eio,
    /// `ENOSPC`: the device is full.
    Enospc,
    /// No error: the operation panics, as a bug in a backend would, to
    /// test that the threads above it are supervised.
    Panic,
}

impl FaultError {
    fn to_io_error(self) -> io::Error {
        io::Error::from_raw_os_error(match self {
            Self::Eio => libc::EIO,
            Self::Enospc => libc::ENOSPC,
            Self::Panic => panic!("injected panic in a simulated disk operation"),
        })
    }
}

/// The simulated disk. Clones share one disk.
#[derive(Clone)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("SimDisk")
            .field("files", &state.names.len())
            .field("epoch", &state.epoch)
            .field("op_count", &state.op_count)
            .finish_non_exhaustive()
    }
}

impl SimDisk {
    /// An empty disk whose random choices (tears, ENOSPC prefixes) all come
    /// from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::new(seed))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock left the state whole
        // (every mutation completes before unlocking), so keep using it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Power loss and restart; see the module doc for what survives.
    pub fn crash(&self, tear: Tear) {
        self.lock().crash(tear);
    }

    /// Arms a fault; see [`Fault`].
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push(ArmedFault {
            fault,
            remaining: fault.nth,
        });
    }

    /// Disarms every fault.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Data operations served so far (write, read, fdatasync, fallocate,
    /// truncate), failed ones included.
    pub fn op_count(&self) -> u64 {
        self.lock().op_count
    }

    /// Bytes every read so far returned, summed.
    pub fn bytes_read(&self) -> u64 {
        self.lock().bytes_read
    }

    /// A file's live contents, as a running process would read them.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.lock();
        let inode = state.names.get(path)?;
        state.inodes.get(inode).map(|inode| inode.data.clone())
    }
}

type InodeId = u64;

struct State {
    rng: SplitMix64,
    /// Incremented by every crash; handles from an older epoch are dead.
    epoch: u64,
    op_count: u64,
    bytes_read: u64,
    next_inode: InodeId,
    inodes: HashMap<InodeId, Inode>,
    /// The namespace a running process sees.
    names: BTreeMap<PathBuf, InodeId>,
    /// The namespace a crash leaves: changed only by `sync_dir`.
    durable_names: BTreeMap<PathBuf, InodeId>,
    dirs: BTreeSet<PathBuf>,
    faults: Vec<ArmedFault>,
}

struct ArmedFault {
    fault: Fault,
    remaining: u64,
}

#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// The byte range changed since the last successful fdatasync (a single
    /// covering range, so a sync copies only what changed).
    dirty: Option<(usize, usize)>,
    /// The write a `Tear::LastWrite` crash tears.
    last_write: Option<PendingWrite>,
    open_handles: usize,
}

struct PendingWrite {
    offset: usize,
    bytes: Vec<u8>,
}

impl Inode {
    fn mark_dirty(&mut self, start: usize, end: usize) {
        if start >= end {
            return;
        }
        self.dirty = Some(match self.dirty {
            Some((lo, hi)) => (lo.min(start), hi.max(end)),
            None => (start, end),
        });
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        let end = offset + bytes.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[offset..end].copy_from_slice(bytes);
        self.mark_dirty(offset, end);
    }

    fn set_len(&mut self, len: usize) {
        let old = self.data.len();
        self.data.resize(len, 0);
        self.mark_dirty(old.min(len), old.max(len));
        // A write followed by a size change is not the last thing the device
        // saw for this file; the crash drops it rather than tear it.
        self.last_write = None;
    }

    fn sync(&mut self) {
        self.durable.resize(self.data.len(), 0);
        if let Some((lo, hi)) = self.dirty.take() {
            let hi = hi.min(self.data.len());
            if lo < hi {
                self.durable[lo..hi].copy_from_slice(&self.data[lo..hi]);
            }
        }
        assert_eq!(
            self.durable.len(),
            self.data.len(),
            "fdatasync missed a size change"
        );
        self.last_write = None;
    }

    /// What a power cut leaves of this file.
    fn crash(&mut self, tear: Tear, rng: &mut SplitMix64) {
        let mut after = std::mem::take(&mut self.durable);
        if let (Tear::LastWrite, Some(write)) = (tear, self.last_write.take()) {
            tear_write(&mut after, &write, rng);
        }
        self.data.clone_from(&after);
        self.durable = after;
        self.dirty = None;
        self.last_write = None;
    }
}

/// Applies the surviving part of a torn write to a file's durable bytes.
fn tear_write(file: &mut Vec<u8>, write: &PendingWrite, rng: &mut SplitMix64) {
    let durable_len = file.len();
    let end = write.offset + write.bytes.len();
    // Overwritten durable bytes: each sector survives whole or not at all.
    let mut position = write.offset;
    while position < end.min(durable_len) {
        let sector_end = ((position as u64 / SECTOR_BYTES + 1) * SECTOR_BYTES) as usize;
        let piece_end = sector_end.min(end).min(durable_len);
        if rng.next_bool() {
            let from = position - write.offset;
            file[position..piece_end]
                .copy_from_slice(&write.bytes[from..from + (piece_end - position)]);
        }
        position = piece_end;
    }
    // Appended bytes: a prefix survives.
    let append_start = write.offset.max(durable_len);
    if append_start < end {
        let kept = rng.below(end - append_start + 1);
        if kept > 0 {
            let from = append_start - write.offset;
            file.resize(append_start, 0);
            file.extend_from_slice(&write.bytes[from..from + kept]);
        }
    }
}

impl State {
    fn new(seed: u64) -> Self {
        let mut dirs = BTreeSet::new();
        dirs.insert(PathBuf::from("/"));
        Self {
            rng: SplitMix64(seed),
            epoch: 0,
            op_count: 0,
            bytes_read: 0,
            next_inode: 0,
            inodes: HashMap::new(),
            names: BTreeMap::new(),
            durable_names: BTreeMap::new(),
            dirs,
            faults: Vec::new(),
        }
    }

    fn crash(&mut self, tear: Tear) {
        self.epoch += 1;
        self.names = self.durable_names.clone();
        let reachable: BTreeSet<InodeId> = self.names.values().copied().collect();
        self.inodes.retain(|id, _| reachable.contains(id));
        for inode in self.inodes.values_mut() {
            inode.crash(tear, &mut self.rng);
            // Handles from before the crash are dead and no longer pin it.
            inode.open_handles = 0;
        }
    }

    /// Starts a data operation: refuses dead handles, counts the operation
    /// and fires an armed fault if one is due.
    fn begin(&mut self, epoch: u64, op: FaultOp) -> io::Result<Option<FaultError>> {
        if epoch != self.epoch {
            return Err(io::Error::other(
                "simulated disk: this handle was opened before a crash",
            ));
        }
        self.op_count += 1;
        let mut fired = None;
        self.faults.retain_mut(|armed| {
            if armed.fault.op != FaultOp::Any && armed.fault.op != op {
                return true;
            }
            if armed.remaining > 0 {
                armed.remaining -= 1;
                return true;
            }
            fired.get_or_insert(armed.fault.error);
            armed.fault.sticky
        });
        Ok(fired)
    }

    fn inode(&mut self, id: InodeId) -> io::Result<&mut Inode> {
        self.inodes
            .get_mut(&id)
            .ok_or_else(|| io::Error::other("simulated disk: inode vanished under a live handle"))
    }

    fn parent_exists(&self, path: &Path) -> bool {
        match path.parent() {
            None => false,
            Some(parent) if parent.as_os_str().is_empty() => true,
            Some(parent) => self.dirs.contains(parent),
        }
    }

    /// Drops an inode nobody can reach any more, now or after a crash.
    fn collect(&mut self, id: InodeId) {
        let pinned = self
            .inodes
            .get(&id)
            .is_some_and(|inode| inode.open_handles > 0);
        let named = self.names.values().any(|&other| other == id)
            || self.durable_names.values().any(|&other| other == id);
        if !pinned && !named {
            self.inodes.remove(&id);
        }
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("simulated disk: {} not found", path.display()),
    )
}

fn to_index(value: u64) -> io::Result<usize> {
    usize::try_from(value)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset beyond address space"))
}

impl Disk for SimDisk {
    fn kind(&self) -> BackendKind {
        BackendKind::Simulated
    }

    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<FileHandle> {
        let mut state = self.lock();
        if state.dirs.contains(path) {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("simulated disk: {} is a directory", path.display()),
            ));
        }
        let id = match state.names.get(path) {
            Some(&id) => id,
            None if options.create && state.parent_exists(path) => {
                let id = state.next_inode;
                state.next_inode += 1;
                state.inodes.insert(id, Inode::default());
                state.names.insert(path.to_path_buf(), id);
                id
            }
            None => return Err(not_found(path)),
        };
        state.inode(id)?.open_handles += 1;
        let file = SimFile {
            disk: self.clone(),
            inode: id,
            epoch: state.epoch,
            path: path.to_path_buf(),
            direct_io: options.direct_io,
        };
        Ok(FileHandle::new(Arc::new(file)))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        for ancestor in path.ancestors() {
            if ancestor.as_os_str().is_empty() {
                continue;
            }
            if state.names.contains_key(ancestor) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("simulated disk: {} is a file", ancestor.display()),
                ));
            }
            state.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let state = self.lock();
        if !state.dirs.contains(path) {
            return Err(if state.names.contains_key(path) {
                io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "simulated disk: not a directory",
                )
            } else {
                not_found(path)
            });
        }
        let children = state
            .names
            .keys()
            .chain(state.dirs.iter())
            .filter(|child| child.parent() == Some(path) && child.as_path() != path);
        let mut names: Vec<String> = children
            .filter_map(|child| child.file_name())
            .map(|name| name.to_string_lossy().into_owned())
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let state = self.lock();
        Ok(state.names.contains_key(path) || state.dirs.contains(path))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        let id = state.names.remove(path).ok_or_else(|| not_found(path))?;
        state.collect(id);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.lock();
        if state.dirs.contains(from) || state.dirs.contains(to) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "simulated disk: rename moves files only",
            ));
        }
        if !state.names.contains_key(from) {
            return Err(not_found(from));
        }
        if !state.parent_exists(to) {
            return Err(not_found(to));
        }
        let Some(id) = state.names.remove(from) else {
            return Err(not_found(from));
        };
        if let Some(replaced) = state.names.insert(to.to_path_buf(), id) {
            state.collect(replaced);
        }
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        if !state.dirs.contains(path) {
            return Err(not_found(path));
        }
        let in_dir = |child: &PathBuf| child.parent() == Some(path);
        let dropped: Vec<InodeId> = state
            .durable_names
            .iter()
            .filter(|(child, _)| in_dir(child))
            .map(|(_, &id)| id)
            .collect();
        state.durable_names.retain(|child, _| !in_dir(child));
        let live: Vec<(PathBuf, InodeId)> = state
            .names
            .iter()
            .filter(|(child, _)| in_dir(child))
            .map(|(child, &id)| (child.clone(), id))
            .collect();
        state.durable_names.extend(live);
        for id in dropped {
            state.collect(id);
        }
        Ok(())
    }
}

/// An open file of a [`SimDisk`].
struct SimFile {
    disk: SimDisk,
    inode: InodeId,
    epoch: u64,
    path: PathBuf,
    direct_io: bool,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("path", &self.path)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl SimFile {
    fn check_direct(&self, offset: u64, len: usize) -> io::Result<()> {
        let align = IO_ALIGN as u64;
        if self.direct_io && !(offset.is_multiple_of(align) && (len as u64).is_multiple_of(align)) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(())
    }

    fn write(&self, offset: u64, buf: &IoBuf) -> io::Result<()> {
        self.check_direct(offset, buf.len())?;
        let mut state = self.disk.lock();
        let fault = state.begin(self.epoch, FaultOp::Write)?;
        let offset = to_index(offset)?;
        if let Some(error) = fault {
            if error == FaultError::Enospc {
                let kept = state.rng.below(buf.len() + 1);
                if kept > 0 {
                    state.inode(self.inode)?.write(offset, &buf[..kept]);
                }
            }
            return Err(error.to_io_error());
        }
        let inode = state.inode(self.inode)?;
        inode.write(offset, buf);
        inode.last_write = Some(PendingWrite {
            offset,
            bytes: buf.to_vec(),
        });
        Ok(())
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.check_direct(offset, len)?;
        let mut state = self.disk.lock();
        if let Some(error) = state.begin(self.epoch, FaultOp::Read)? {
            return Err(error.to_io_error());
        }
        let data = &state.inode(self.inode)?.data;
        let start = to_index(offset).map_or(data.len(), |offset| offset.min(data.len()));
        let end = start.saturating_add(len).min(data.len());
        let bytes = data[start..end].to_vec();
        state.bytes_read += bytes.len() as u64;
        Ok(bytes)
    }

    fn data_op(&self, op: FaultOp, action: impl FnOnce(&mut Inode)) -> io::Result<()> {
        let mut state = self.disk.lock();
        if let Some(error) = state.begin(self.epoch, op)? {
            return Err(error.to_io_error());
        }
        action(state.inode(self.inode)?);
        Ok(())
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut state = self.disk.lock();
        if state.epoch != self.epoch {
            return;
        }
        if let Some(inode) = state.inodes.get_mut(&self.inode) {
            inode.open_handles = inode.open_handles.saturating_sub(1);
        }
        state.collect(self.inode);
    }
}

impl DiskFile for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn size(&self) -> io::Result<u64> {
        let mut state = self.disk.lock();
        if state.epoch != self.epoch {
            return Err(io::Error::other(
                "simulated disk: this handle was opened before a crash",
            ));
        }
        Ok(state.inode(self.inode)?.data.len() as u64)
    }

    fn write_at(&self, offset: u64, buf: IoBuf) -> Completion<IoBuf> {
        Completion::ready(self.write(offset, &buf).map(|()| buf))
    }

    fn read_at(&self, offset: u64, len: usize) -> Completion<Vec<u8>> {
        Completion::ready(self.read(offset, len))
    }

    fn fdatasync(&self) -> Completion<()> {
        Completion::ready(self.data_op(FaultOp::Sync, Inode::sync))
    }

    fn fallocate(&self, offset: u64, len: u64) -> Completion<()> {
        let end = offset.checked_add(len).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "fallocate range overflows")
        });
        let result = end.and_then(to_index).and_then(|end| {
            self.data_op(FaultOp::Fallocate, |inode| {
                if inode.data.len() < end {
                    inode.set_len(end);
                }
            })
        });
        Completion::ready(result)
    }

    fn truncate(&self, len: u64) -> Completion<()> {
        let result = to_index(len)
            .and_then(|len| self.data_op(FaultOp::Truncate, |inode| inode.set_len(len)));
        Completion::ready(result)
    }
}

/// SplitMix64: a tiny, well-mixed PRNG, enough for choosing tears and
/// prefixes reproducibly from a seed.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn next_bool(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    /// A value in `0..bound` (`bound` > 0); the modulo bias is irrelevant
    /// at the sizes a test writes.
    fn below(&mut self, bound: usize) -> usize {
        assert!(bound > 0, "empty range");
        (self.next_u64() % bound as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = "/data";

    fn disk_with_dir(seed: u64) -> SimDisk {
        let disk = SimDisk::new(seed);
        disk.create_dir_all(Path::new(DIR)).unwrap();
        disk
    }

    fn path(name: &str) -> PathBuf {
        Path::new(DIR).join(name)
    }

    /// Creates `name` and makes its directory entry durable.
    fn durable_file(disk: &SimDisk, name: &str) -> FileHandle {
        let file = disk.open(&path(name), OpenOptions::CREATE).unwrap();
        disk.sync_dir(Path::new(DIR)).unwrap();
        file
    }

    fn write(file: &FileHandle, offset: u64, bytes: &[u8]) {
        file.write_at(offset, IoBuf::from_slice(bytes))
            .wait()
            .unwrap();
    }

    fn fault(op: FaultOp, nth: u64, error: FaultError, sticky: bool) -> Fault {
        Fault {
            op,
            nth,
            error,
            sticky,
        }
    }

    fn raw_os_error<T: fmt::Debug>(result: io::Result<T>) -> Option<i32> {
        result.unwrap_err().raw_os_error()
    }

    #[test]
    fn unsynced_writes_vanish_on_crash() {
        let disk = disk_with_dir(1);
        let file = durable_file(&disk, "a");
        write(&file, 0, b"synced");
        file.fdatasync().wait().unwrap();
        write(&file, 6, b"-lost");
        disk.crash(Tear::None);
        assert_eq!(disk.read_file(&path("a")).unwrap(), b"synced");
    }

    #[test]
    fn synced_writes_survive_a_crash() {
        let disk = disk_with_dir(2);
        let file = durable_file(&disk, "a");
        write(&file, 0, b"one");
        write(&file, 3, b"two");
        file.fdatasync().wait().unwrap();
        disk.crash(Tear::LastWrite);
        assert_eq!(disk.read_file(&path("a")).unwrap(), b"onetwo");
    }

    #[test]
    fn unsynced_truncate_reverts_on_crash() {
        let disk = disk_with_dir(3);
        let file = durable_file(&disk, "a");
        write(&file, 0, b"keep me");
        file.fdatasync().wait().unwrap();
        file.truncate(2).wait().unwrap();
        assert_eq!(disk.read_file(&path("a")).unwrap(), b"ke");
        disk.crash(Tear::LastWrite);
        assert_eq!(disk.read_file(&path("a")).unwrap(), b"keep me");
    }

    #[test]
    fn synced_fallocate_survives_as_zeros() {
        let disk = disk_with_dir(4);
        let file = durable_file(&disk, "a");
        file.fallocate(0, 4096).wait().unwrap();
        file.fdatasync().wait().unwrap();
        disk.crash(Tear::None);
        assert_eq!(disk.read_file(&path("a")).unwrap(), vec![0u8; 4096]);
    }

    #[test]
    fn torn_append_keeps_a_prefix() {
        let new: Vec<u8> = (0..2000u32).map(|i| (i % 251) as u8 + 1).collect();
        let mut partial_seen = false;
        for seed in 0..64 {
            let disk = disk_with_dir(seed);
            let file = durable_file(&disk, "a");
            write(&file, 0, b"head");
            file.fdatasync().wait().unwrap();
            write(&file, 4, &new);
            disk.crash(Tear::LastWrite);
            let after = disk.read_file(&path("a")).unwrap();
            assert_eq!(&after[..4], b"head", "seed {seed}");
            let kept = &after[4..];
            assert_eq!(kept, &new[..kept.len()], "seed {seed}: not a prefix");
            partial_seen |= !kept.is_empty() && kept.len() < new.len();
        }
        assert!(partial_seen, "no seed tore the append part-way");
    }

    #[test]
    fn torn_append_past_a_gap_reads_zeros_before_the_kept_prefix() {
        let mut gap_seen = false;
        for seed in 0..32 {
            let disk = disk_with_dir(seed);
            let file = durable_file(&disk, "a");
            write(&file, 0, b"head");
            file.fdatasync().wait().unwrap();
            write(&file, 4, b"earlier unsynced");
            write(&file, 100, b"last");
            disk.crash(Tear::LastWrite);
            let after = disk.read_file(&path("a")).unwrap();
            if after.len() > 4 {
                assert!(after[4..100].iter().all(|&b| b == 0), "seed {seed}");
                assert_eq!(&after[100..], &b"last"[..after.len() - 100]);
                gap_seen = true;
            }
        }
        assert!(gap_seen, "no seed kept any of the last write");
    }

    #[test]
    fn torn_overwrite_keeps_a_subset_of_whole_sectors() {
        const SECTORS: usize = 8;
        let sector = SECTOR_BYTES as usize;
        let mut hole_before_new_seen = false;
        for seed in 0..64 {
            let disk = disk_with_dir(seed);
            let file = durable_file(&disk, "segment");
            file.fallocate(0, (SECTORS * sector) as u64).wait().unwrap();
            file.fdatasync().wait().unwrap();
            write(&file, 0, &vec![0xAB; SECTORS * sector]);
            disk.crash(Tear::LastWrite);
            let after = disk.read_file(&path("segment")).unwrap();
            assert_eq!(after.len(), SECTORS * sector, "seed {seed}");
            let kept: Vec<bool> = after
                .chunks(sector)
                .map(|chunk| {
                    let new = chunk.iter().all(|&b| b == 0xAB);
                    assert!(
                        new || chunk.iter().all(|&b| b == 0),
                        "seed {seed}: split sector"
                    );
                    new
                })
                .collect();
            hole_before_new_seen |= kept.windows(2).any(|pair| !pair[0] && pair[1]);
        }
        assert!(
            hole_before_new_seen,
            "no seed left old bytes before new ones"
        );
    }

    #[test]
    fn only_the_last_unsynced_write_is_torn() {
        for seed in 0..16 {
            let disk = disk_with_dir(seed);
            let file = durable_file(&disk, "a");
            file.fallocate(0, 2048).wait().unwrap();
            file.fdatasync().wait().unwrap();
            write(&file, 0, &[1; 512]);
            write(&file, 1024, &[2; 512]);
            disk.crash(Tear::LastWrite);
            let after = disk.read_file(&path("a")).unwrap();
            assert!(after[..512].iter().all(|&b| b == 0), "seed {seed}");
        }
    }

    #[test]
    fn the_same_seed_tears_the_same_way() {
        let run = |seed| {
            let disk = disk_with_dir(seed);
            let file = durable_file(&disk, "a");
            file.fallocate(0, 8192).wait().unwrap();
            file.fdatasync().wait().unwrap();
            write(&file, 0, &[7; 8192]);
            disk.crash(Tear::LastWrite);
            disk.read_file(&path("a")).unwrap()
        };
        assert_eq!(run(42), run(42));
    }

    #[test]
    fn created_file_without_dir_sync_vanishes_on_crash() {
        let disk = disk_with_dir(5);
        let file = disk.open(&path("new"), OpenOptions::CREATE).unwrap();
        write(&file, 0, b"data");
        file.fdatasync().wait().unwrap();
        disk.crash(Tear::None);
        assert!(!disk.exists(&path("new")).unwrap());
        assert_eq!(disk.list_dir(Path::new(DIR)).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn created_file_survives_after_dir_sync() {
        let disk = disk_with_dir(6);
        let file = durable_file(&disk, "new");
        write(&file, 0, b"data");
        file.fdatasync().wait().unwrap();
        disk.crash(Tear::None);
        assert_eq!(disk.read_file(&path("new")).unwrap(), b"data");
    }

    #[test]
    fn rename_without_dir_sync_reverts_on_crash() {
        let disk = disk_with_dir(7);
        let file = durable_file(&disk, "prep");
        write(&file, 0, b"segment");
        file.fdatasync().wait().unwrap();
        disk.rename(&path("prep"), &path("0001")).unwrap();
        assert_eq!(disk.read_file(&path("0001")).unwrap(), b"segment");
        disk.crash(Tear::None);
        assert_eq!(disk.read_file(&path("prep")).unwrap(), b"segment");
        assert!(disk.read_file(&path("0001")).is_none());
    }

    #[test]
    fn rename_after_dir_sync_survives_and_replaces_the_destination() {
        let disk = disk_with_dir(8);
        let old = durable_file(&disk, "state");
        write(&old, 0, b"old");
        old.fdatasync().wait().unwrap();
        let new = durable_file(&disk, "state.tmp");
        write(&new, 0, b"new");
        new.fdatasync().wait().unwrap();
        disk.rename(&path("state.tmp"), &path("state")).unwrap();
        disk.sync_dir(Path::new(DIR)).unwrap();
        disk.crash(Tear::None);
        assert_eq!(disk.read_file(&path("state")).unwrap(), b"new");
        assert_eq!(
            disk.list_dir(Path::new(DIR)).unwrap(),
            vec!["state".to_string()]
        );
    }

    #[test]
    fn remove_without_dir_sync_reverts_on_crash() {
        let disk = disk_with_dir(9);
        let file = durable_file(&disk, "a");
        write(&file, 0, b"still here");
        file.fdatasync().wait().unwrap();
        disk.remove_file(&path("a")).unwrap();
        assert!(!disk.exists(&path("a")).unwrap());
        disk.crash(Tear::None);
        assert_eq!(disk.read_file(&path("a")).unwrap(), b"still here");
    }

    #[test]
    fn removed_file_stays_usable_through_an_open_handle() {
        let disk = disk_with_dir(10);
        let file = durable_file(&disk, "a");
        disk.remove_file(&path("a")).unwrap();
        disk.sync_dir(Path::new(DIR)).unwrap();
        write(&file, 0, b"orphan");
        assert_eq!(file.read_at(0, 10).wait().unwrap(), b"orphan");
    }

    #[test]
    fn handles_opened_before_a_crash_are_dead() {
        let disk = disk_with_dir(11);
        let file = durable_file(&disk, "a");
        disk.crash(Tear::None);
        assert!(file.write_at(0, IoBuf::from_slice(b"x")).wait().is_err());
        assert!(file.read_at(0, 1).wait().is_err());
        assert!(file.fdatasync().wait().is_err());
        assert!(file.fallocate(0, 1).wait().is_err());
        assert!(file.truncate(0).wait().is_err());
        assert!(file.size().is_err());
        let reopened = disk.open(&path("a"), OpenOptions::EXISTING).unwrap();
        write(&reopened, 0, b"ok");
    }

    #[test]
    fn nth_fault_fails_exactly_that_operation() {
        let disk = disk_with_dir(12);
        let file = durable_file(&disk, "a");
        disk.inject(fault(FaultOp::Write, 2, FaultError::Eio, false));
        write(&file, 0, b"0");
        write(&file, 1, b"1");
        let failed = file.write_at(2, IoBuf::from_slice(b"2")).wait();
        assert_eq!(raw_os_error(failed), Some(libc::EIO));
        write(&file, 2, b"3");
        assert_eq!(disk.read_file(&path("a")).unwrap(), b"013");
    }

    #[test]
    fn faults_match_only_their_operation() {
        let disk = disk_with_dir(13);
        let file = durable_file(&disk, "a");
        disk.inject(fault(FaultOp::Sync, 0, FaultError::Eio, false));
        write(&file, 0, b"x");
        assert_eq!(file.read_at(0, 1).wait().unwrap(), b"x");
        assert_eq!(raw_os_error(file.fdatasync().wait()), Some(libc::EIO));
        file.fdatasync().wait().unwrap();
    }

    #[test]
    fn any_fault_counts_every_data_operation() {
        let disk = disk_with_dir(14);
        let file = durable_file(&disk, "a");
        disk.inject(fault(FaultOp::Any, 1, FaultError::Enospc, false));
        write(&file, 0, b"x");
        let failed = file.fallocate(0, 100).wait();
        assert_eq!(raw_os_error(failed), Some(libc::ENOSPC));
        assert_eq!(file.size().unwrap(), 1);
    }

    #[test]
    fn sticky_fault_fails_until_cleared() {
        let disk = disk_with_dir(15);
        let file = durable_file(&disk, "a");
        disk.inject(fault(FaultOp::Read, 1, FaultError::Eio, true));
        file.read_at(0, 1).wait().unwrap();
        for _ in 0..3 {
            assert_eq!(raw_os_error(file.read_at(0, 1).wait()), Some(libc::EIO));
        }
        disk.clear_faults();
        file.read_at(0, 1).wait().unwrap();
    }

    #[test]
    fn sticky_fault_survives_a_crash() {
        let disk = disk_with_dir(16);
        durable_file(&disk, "a");
        disk.inject(fault(FaultOp::Truncate, 0, FaultError::Eio, true));
        disk.crash(Tear::None);
        let file = disk.open(&path("a"), OpenOptions::EXISTING).unwrap();
        assert_eq!(raw_os_error(file.truncate(0).wait()), Some(libc::EIO));
    }

    #[test]
    fn failed_fdatasync_makes_nothing_durable() {
        let disk = disk_with_dir(17);
        let file = durable_file(&disk, "a");
        write(&file, 0, b"durable");
        file.fdatasync().wait().unwrap();
        write(&file, 7, b"+pending");
        disk.inject(fault(FaultOp::Sync, 0, FaultError::Eio, false));
        assert!(file.fdatasync().wait().is_err());
        disk.crash(Tear::None);
        assert_eq!(disk.read_file(&path("a")).unwrap(), b"durable");
    }

    #[test]
    fn eio_write_leaves_the_file_unchanged() {
        let disk = disk_with_dir(18);
        let file = durable_file(&disk, "a");
        write(&file, 0, b"abc");
        disk.inject(fault(FaultOp::Write, 0, FaultError::Eio, false));
        assert!(file.write_at(1, IoBuf::from_slice(b"XYZW")).wait().is_err());
        assert_eq!(disk.read_file(&path("a")).unwrap(), b"abc");
    }

    #[test]
    fn enospc_write_leaves_at_most_a_prefix() {
        let new = [9u8; 1000];
        for seed in 0..16 {
            let disk = disk_with_dir(seed);
            let file = durable_file(&disk, "a");
            write(&file, 0, b"abc");
            disk.inject(fault(FaultOp::Write, 0, FaultError::Enospc, false));
            let failed = file.write_at(3, IoBuf::from_slice(&new)).wait();
            assert_eq!(raw_os_error(failed), Some(libc::ENOSPC));
            let after = disk.read_file(&path("a")).unwrap();
            assert_eq!(&after[..3], b"abc");
            assert_eq!(&after[3..], &new[..after.len() - 3], "seed {seed}");
        }
    }

    #[test]
    fn op_count_counts_data_operations_only() {
        let disk = disk_with_dir(19);
        let file = durable_file(&disk, "a");
        assert_eq!(disk.op_count(), 0);
        write(&file, 0, b"x");
        file.read_at(0, 1).wait().unwrap();
        file.fdatasync().wait().unwrap();
        file.fallocate(0, 10).wait().unwrap();
        file.truncate(1).wait().unwrap();
        file.size().unwrap();
        assert_eq!(disk.op_count(), 5);
    }

    #[test]
    fn bytes_read_sums_what_reads_returned() {
        let disk = disk_with_dir(23);
        let file = durable_file(&disk, "a");
        write(&file, 0, b"0123456789");
        file.read_at(2, 3).wait().unwrap();
        file.read_at(8, 100).wait().unwrap();
        assert_eq!(disk.bytes_read(), 3 + 2);
    }

    #[test]
    fn reads_past_the_end_are_short() {
        let disk = disk_with_dir(20);
        let file = durable_file(&disk, "a");
        write(&file, 0, b"abc");
        assert_eq!(file.read_at(1, 10).wait().unwrap(), b"bc");
        assert!(file.read_at(50, 10).wait().unwrap().is_empty());
    }

    #[test]
    fn direct_io_refuses_unaligned_operations() {
        let disk = disk_with_dir(21);
        let options = OpenOptions {
            create: true,
            direct_io: true,
        };
        let file = disk.open(&path("direct"), options).unwrap();
        let unaligned = file.write_at(0, IoBuf::from_slice(b"abc")).wait();
        assert_eq!(raw_os_error(unaligned), Some(libc::EINVAL));
        write(&file, IO_ALIGN as u64, &[1; IO_ALIGN]);
        assert_eq!(
            raw_os_error(file.read_at(1, IO_ALIGN).wait()),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn namespace_errors_match_posix() {
        let disk = disk_with_dir(22);
        let missing_dir = disk.list_dir(Path::new("/nope")).unwrap_err();
        assert_eq!(missing_dir.kind(), io::ErrorKind::NotFound);
        let missing_file = disk.open(&path("x"), OpenOptions::EXISTING).unwrap_err();
        assert_eq!(missing_file.kind(), io::ErrorKind::NotFound);
        let no_parent = disk
            .open(Path::new("/nope/x"), OpenOptions::CREATE)
            .unwrap_err();
        assert_eq!(no_parent.kind(), io::ErrorKind::NotFound);
        let rename = disk.rename(&path("x"), &path("y")).unwrap_err();
        assert_eq!(rename.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            disk.remove_file(&path("x")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn list_dir_shows_files_and_subdirectories_sorted() {
        let disk = disk_with_dir(23);
        disk.create_dir_all(&path("sub/deeper")).unwrap();
        durable_file(&disk, "b");
        durable_file(&disk, "a");
        assert_eq!(
            disk.list_dir(Path::new(DIR)).unwrap(),
            vec!["a", "b", "sub"]
        );
        assert_eq!(disk.list_dir(Path::new("/")).unwrap(), vec!["data"]);
    }

    #[test]
    fn clones_share_one_disk() {
        let disk = disk_with_dir(24);
        let other = disk.clone();
        let file = durable_file(&other, "a");
        write(&file, 0, b"shared");
        assert_eq!(disk.read_file(&path("a")).unwrap(), b"shared");
        assert_eq!(disk.kind(), BackendKind::Simulated);
    }
}
