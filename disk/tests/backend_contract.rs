//! The behaviour every backend owes its callers, checked on all three:
//! portable and io_uring on real temporary files, the simulated disk in
//! memory. Each behaviour is one function; the macro at the bottom runs it
//! once per backend, and io_uring twice: with its default rings
//! (`DEFER_TASKRUN`) and with plain ones.

// The helpers below sit outside `#[test]` functions, where clippy's
// allow-unwrap-in-tests does not reach; a failed unwrap here is a failed test.
#![allow(clippy::unwrap_used)]

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;

use narad_disk::portable::PortableDisk;
use narad_disk::sim::SimDisk;
use narad_disk::uring::{DirectSync, RingOptions, UringDisk};
use narad_disk::{BackendKind, Completion, Disk, FileHandle, IO_ALIGN, IoBuf, OpenOptions};
use tempfile::TempDir;

/// A backend and a directory to work in.
struct Env {
    disk: Arc<dyn Disk>,
    root: PathBuf,
    _dir: Option<TempDir>,
}

impl Env {
    fn portable() -> Option<Self> {
        Some(Self::on_real_files(Arc::new(PortableDisk::new(2).unwrap())))
    }

    /// `None` only where the kernel refuses io_uring outright (a seccomp
    /// profile, `io_uring_disabled`); any other setup failure fails the test.
    fn io_uring() -> Option<Self> {
        Self::io_uring_with(RingOptions::default())
    }

    /// io_uring on rings set up without `DEFER_TASKRUN`, as on kernels
    /// before 6.1, and `O_DIRECT` files synced by a linked fdatasync rather
    /// than `RWF_DSYNC`: the default rings cover the other mode.
    fn io_uring_plain() -> Option<Self> {
        Self::io_uring_with(RingOptions {
            defer_taskrun: false,
            direct_sync: DirectSync::LinkedFsync,
        })
    }

    fn io_uring_with(options: RingOptions) -> Option<Self> {
        match UringDisk::with_options(1, options) {
            Ok(disk) => Some(Self::on_real_files(Arc::new(disk))),
            Err(error) if matches!(error.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                eprintln!("SKIPPED: io_uring is unavailable here: {error}");
                None
            }
            Err(error) => panic!("io_uring setup failed: {error}"),
        }
    }

    fn sim() -> Option<Self> {
        let disk = SimDisk::new(7);
        let root = PathBuf::from("/contract");
        disk.create_dir_all(&root).unwrap();
        Some(Self {
            disk: Arc::new(disk),
            root,
            _dir: None,
        })
    }

    fn on_real_files(disk: Arc<dyn Disk>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self {
            disk,
            root: dir.path().to_path_buf(),
            _dir: Some(dir),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn create(&self, name: &str) -> FileHandle {
        self.disk
            .open(&self.path(name), OpenOptions::CREATE)
            .unwrap()
    }
}

fn write(file: &FileHandle, offset: u64, bytes: &[u8]) {
    let buf = file
        .write_at(offset, IoBuf::from_slice(bytes))
        .wait()
        .unwrap();
    assert_eq!(&buf[..], bytes);
}

fn read(file: &FileHandle, offset: u64, len: usize) -> Vec<u8> {
    file.read_at(offset, len).wait().unwrap()
}

/// Bytes that differ with every (seed, index), so misplaced data shows.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn write_read_round_trips_at_offsets(env: &Env) {
    let file = env.create("a");
    write(&file, 0, b"first");
    write(&file, 100, b"second");
    write(&file, 2, b"XY");
    assert_eq!(read(&file, 0, 5), b"fiXYt");
    assert_eq!(read(&file, 100, 6), b"second");
    assert_eq!(file.size().unwrap(), 106);
}

fn write_past_the_end_leaves_zeros_before_it(env: &Env) {
    let file = env.create("a");
    write(&file, 10, b"x");
    assert_eq!(read(&file, 0, 11), [&[0u8; 10][..], b"x"].concat());
}

fn read_past_the_end_of_file_is_short(env: &Env) {
    let file = env.create("a");
    write(&file, 0, b"abcdef");
    assert_eq!(read(&file, 4, 100), b"ef");
    assert!(read(&file, 6, 10).is_empty());
    assert!(read(&file, 1000, 10).is_empty());
    assert!(read(&file, 0, 0).is_empty());
}

fn fdatasync_succeeds_and_keeps_the_data_readable(env: &Env) {
    let file = env.create("a");
    write(&file, 0, b"durable");
    file.fdatasync().wait().unwrap();
    file.fdatasync().wait().unwrap();
    assert_eq!(read(&file, 0, 7), b"durable");
}

fn truncate_shrinks_and_extends_with_zeros(env: &Env) {
    let file = env.create("a");
    write(&file, 0, b"abcdef");
    file.truncate(2).wait().unwrap();
    assert_eq!(file.size().unwrap(), 2);
    file.truncate(4).wait().unwrap();
    assert_eq!(read(&file, 0, 10), b"ab\0\0");
}

fn fallocate_extends_with_zeros_and_keeps_existing_bytes(env: &Env) {
    let file = env.create("a");
    write(&file, 0, b"keep");
    file.fallocate(0, 1 << 16).wait().unwrap();
    assert_eq!(file.size().unwrap(), 1 << 16);
    let data = read(&file, 0, 1 << 16);
    assert_eq!(&data[..4], b"keep");
    assert!(data[4..].iter().all(|&b| b == 0));
    file.fallocate(0, 10).wait().unwrap();
    assert_eq!(file.size().unwrap(), 1 << 16, "fallocate never shrinks");
}

fn opening_a_missing_file_without_create_is_not_found(env: &Env) {
    let error = env
        .disk
        .open(&env.path("missing"), OpenOptions::EXISTING)
        .unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound);
}

fn namespace_operations_behave_like_posix(env: &Env) {
    let sub = env.path("x/y");
    env.disk.create_dir_all(&sub).unwrap();
    let old = env.disk.open(&sub.join("b"), OpenOptions::CREATE).unwrap();
    write(&old, 0, b"new");
    let target = env.disk.open(&sub.join("a"), OpenOptions::CREATE).unwrap();
    write(&target, 0, b"old");
    env.disk.rename(&sub.join("b"), &sub.join("a")).unwrap();
    env.disk.sync_dir(&sub).unwrap();
    assert_eq!(env.disk.list_dir(&sub).unwrap(), vec!["a".to_string()]);
    let renamed = env
        .disk
        .open(&sub.join("a"), OpenOptions::EXISTING)
        .unwrap();
    assert_eq!(read(&renamed, 0, 3), b"new");
    assert_eq!(
        env.disk.list_dir(&env.path("x")).unwrap(),
        vec!["y".to_string()]
    );
    env.disk.remove_file(&sub.join("a")).unwrap();
    assert!(!env.disk.exists(&sub.join("a")).unwrap());
    assert!(env.disk.exists(&sub).unwrap());
    let missing = env.disk.list_dir(&env.path("nope")).unwrap_err();
    assert_eq!(missing.kind(), io::ErrorKind::NotFound);
}

/// Threads in the interleaved test, and rounds each; every round issues
/// four writes and an fdatasync before waiting on any of them.
const THREADS: u64 = 8;
const ROUNDS: u64 = 25;
const WRITES_PER_ROUND: u64 = 4;
const BLOCK: usize = 512;
const _: () = assert!(THREADS * ROUNDS * (WRITES_PER_ROUND + 1) == 1000);

fn block_offset(thread: u64, round: u64, index: u64) -> u64 {
    ((thread * ROUNDS + round) * WRITES_PER_ROUND + index) * BLOCK as u64
}

fn block_seed(thread: u64, round: u64, index: u64) -> u64 {
    block_offset(thread, round, index) + 1
}

fn interleaved_ops_from_eight_threads_all_complete_correctly(env: &Env) {
    let file = env.create("shared");
    thread::scope(|scope| {
        for thread in 0..THREADS {
            let file = file.clone();
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    let writes: Vec<Completion<IoBuf>> = (0..WRITES_PER_ROUND)
                        .map(|index| {
                            let bytes = pattern(block_seed(thread, round, index), BLOCK);
                            file.write_at(
                                block_offset(thread, round, index),
                                IoBuf::from_slice(&bytes),
                            )
                        })
                        .collect();
                    let sync = file.fdatasync();
                    for write in writes {
                        write.wait().unwrap();
                    }
                    sync.wait().unwrap();
                    let first = read(&file, block_offset(thread, round, 0), BLOCK);
                    assert_eq!(first, pattern(block_seed(thread, round, 0), BLOCK));
                }
            });
        }
    });
    let all = read(
        &file,
        0,
        (THREADS * ROUNDS * WRITES_PER_ROUND) as usize * BLOCK,
    );
    for thread in 0..THREADS {
        for round in 0..ROUNDS {
            for index in 0..WRITES_PER_ROUND {
                let at = block_offset(thread, round, index) as usize;
                assert_eq!(
                    &all[at..at + BLOCK],
                    &pattern(block_seed(thread, round, index), BLOCK)[..],
                    "block of thread {thread}, round {round}, write {index}"
                );
            }
        }
    }
}

fn registered_buffers_write_and_stay_registered(env: &Env) {
    let mut buffers = vec![IoBuf::with_capacity(1 << 16), IoBuf::with_capacity(1 << 16)];
    env.disk.register_buffers(&mut buffers).unwrap();
    if env.disk.kind() == BackendKind::IoUring {
        assert!(buffers.iter().all(|buf| buf.registered_index().is_some()));
    }
    let file = env.create("wal");
    let mut offset = 0;
    for round in 0..4u64 {
        for buf in &mut buffers {
            buf.clear();
            buf.extend_from_slice(&pattern(round * 2 + offset, 3000));
            let index = buf.registered_index();
            let written = std::mem::replace(buf, IoBuf::with_capacity(1));
            *buf = file.write_at(offset * 3000, written).wait().unwrap();
            assert_eq!(
                buf.registered_index(),
                index,
                "the buffer comes back as it went"
            );
            offset += 1;
        }
    }
    let data = read(&file, 0, 8 * 3000);
    for (block, chunk) in data.chunks(3000).enumerate() {
        let block = block as u64;
        let round = block / 2;
        assert_eq!(
            chunk,
            &pattern(round * 2 + block, 3000)[..],
            "block {block}"
        );
    }
}

fn eight_mib_write_round_trips(env: &Env) {
    const LEN: usize = 8 << 20;
    let file = env.create("big");
    let bytes = pattern(99, LEN);
    write(&file, 4096, &bytes);
    file.fdatasync().wait().unwrap();
    assert_eq!(read(&file, 4096, LEN), bytes);
}

fn direct_io_aligned_writes_round_trip(env: &Env) {
    let options = OpenOptions {
        create: true,
        direct_io: true,
    };
    let file = match env.disk.open(&env.path("direct"), options) {
        Ok(file) => file,
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
            eprintln!("SKIPPED: this file system refuses O_DIRECT");
            return;
        }
        Err(error) => panic!("opening with O_DIRECT: {error}"),
    };
    let bytes = pattern(5, 3 * IO_ALIGN);
    write(&file, IO_ALIGN as u64, &bytes);
    file.fdatasync().wait().unwrap();
    assert_eq!(read(&file, IO_ALIGN as u64, 3 * IO_ALIGN), bytes);
    assert_eq!(read(&file, 0, IO_ALIGN), vec![0; IO_ALIGN]);
}

fn operations_on_many_files_at_once_stay_separate(env: &Env) {
    let files: Vec<FileHandle> = (0..16).map(|i| env.create(&format!("f{i}"))).collect();
    let pending: Vec<Completion<IoBuf>> = files
        .iter()
        .enumerate()
        .map(|(i, file)| file.write_at(0, IoBuf::from_slice(&pattern(i as u64, 777))))
        .collect();
    for completion in pending {
        completion.wait().unwrap();
    }
    let syncs: Vec<Completion<()>> = files.iter().map(|file| file.fdatasync()).collect();
    for sync in syncs {
        sync.wait().unwrap();
    }
    for (i, file) in files.iter().enumerate() {
        assert_eq!(read(file, 0, 1000), pattern(i as u64, 777));
    }
}

fn a_dropped_disk_still_completes_operations_in_flight(env: &Env) {
    let file = env.create("a");
    let pending = file.write_at(0, IoBuf::from_slice(b"late"));
    let disk_path = env.path("a");
    drop(file);
    pending.wait().unwrap();
    let reopened = env
        .disk
        .open(Path::new(&disk_path), OpenOptions::EXISTING)
        .unwrap();
    assert_eq!(read(&reopened, 0, 4), b"late");
}

fn write_and_sync(file: &FileHandle, offset: u64, bytes: &[u8]) {
    let buf = file
        .write_and_sync(offset, IoBuf::from_slice(bytes))
        .wait()
        .unwrap();
    assert_eq!(&buf[..], bytes, "the buffer comes back as it went");
}

fn write_and_sync_writes_every_byte_and_hands_the_buffer_back(env: &Env) {
    let file = env.create("a");
    let bytes = pattern(11, 3000);
    write_and_sync(&file, 4096, &bytes);
    assert_eq!(file.size().unwrap(), 4096 + 3000);
    assert_eq!(read(&file, 4096, 3000), bytes);
    assert_eq!(read(&file, 0, 4096), vec![0; 4096]);
}

fn write_and_sync_appends_in_order(env: &Env) {
    const BLOCKS: u64 = 64;
    let file = env.create("log");
    for block in 0..BLOCKS {
        write_and_sync(&file, block * 4096, &pattern(block, 4096));
    }
    let all = read(&file, 0, BLOCKS as usize * 4096);
    for (block, chunk) in all.chunks(4096).enumerate() {
        assert_eq!(chunk, &pattern(block as u64, 4096)[..], "block {block}");
    }
}

fn write_and_sync_of_an_empty_buffer_only_syncs(env: &Env) {
    let file = env.create("a");
    write(&file, 0, b"before");
    let buf = file
        .write_and_sync(6, IoBuf::with_capacity(4096))
        .wait()
        .unwrap();
    assert!(buf.is_empty());
    assert_eq!(file.size().unwrap(), 6);
    assert_eq!(read(&file, 0, 10), b"before");
}

fn write_and_sync_from_registered_buffers_keeps_them_registered(env: &Env) {
    let mut buffers = vec![IoBuf::with_capacity(1 << 16), IoBuf::with_capacity(1 << 16)];
    env.disk.register_buffers(&mut buffers).unwrap();
    let file = env.create("wal");
    for (index, buf) in buffers.iter_mut().enumerate() {
        buf.extend_from_slice(&pattern(index as u64, 5000));
        let slot = buf.registered_index();
        let staged = std::mem::replace(buf, IoBuf::with_capacity(1));
        *buf = file
            .write_and_sync(index as u64 * 5000, staged)
            .wait()
            .unwrap();
        assert_eq!(buf.registered_index(), slot);
    }
    let data = read(&file, 0, 10_000);
    assert_eq!(&data[..5000], &pattern(0, 5000)[..]);
    assert_eq!(&data[5000..], &pattern(1, 5000)[..]);
}

fn write_and_sync_from_many_threads_at_once_all_land(env: &Env) {
    const WRITERS: u64 = 8;
    const EACH: u64 = 10;
    let file = env.create("shared");
    thread::scope(|scope| {
        for writer in 0..WRITERS {
            let file = file.clone();
            scope.spawn(move || {
                let pending: Vec<Completion<IoBuf>> = (0..EACH)
                    .map(|index| {
                        let block = writer * EACH + index;
                        file.write_and_sync(
                            block * BLOCK as u64,
                            IoBuf::from_slice(&pattern(block, BLOCK)),
                        )
                    })
                    .collect();
                for completion in pending {
                    completion.wait().unwrap();
                }
            });
        }
    });
    let all = read(&file, 0, (WRITERS * EACH) as usize * BLOCK);
    for (block, chunk) in all.chunks(BLOCK).enumerate() {
        assert_eq!(chunk, &pattern(block as u64, BLOCK)[..], "block {block}");
    }
}

fn eight_mib_write_and_sync_round_trips(env: &Env) {
    const LEN: usize = 8 << 20;
    let file = env.create("big");
    let bytes = pattern(77, LEN);
    write_and_sync(&file, 512, &bytes);
    assert_eq!(read(&file, 512, LEN), bytes);
}

fn write_and_sync_on_a_direct_io_file_round_trips(env: &Env) {
    let options = OpenOptions {
        create: true,
        direct_io: true,
    };
    let file = match env.disk.open(&env.path("direct"), options) {
        Ok(file) => file,
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
            eprintln!("SKIPPED: this file system refuses O_DIRECT");
            return;
        }
        Err(error) => panic!("opening with O_DIRECT: {error}"),
    };
    let bytes = pattern(6, 2 * IO_ALIGN);
    write_and_sync(&file, 0, &bytes);
    assert_eq!(read(&file, 0, 2 * IO_ALIGN), bytes);
}

/// The WAL's pattern on a prepared segment: 4 KiB-aligned write-and-syncs
/// from registered buffers over zeros already on disk, each rewriting the
/// block the previous one ended in; an unaligned one is refused, not
/// reported durable.
fn write_and_sync_overwrites_a_preallocated_direct_io_file(env: &Env) {
    const BLOCKS: usize = 16;
    let options = OpenOptions {
        create: true,
        direct_io: true,
    };
    let file = match env.disk.open(&env.path("prepared"), options) {
        Ok(file) => file,
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
            eprintln!("SKIPPED: this file system refuses O_DIRECT");
            return;
        }
        Err(error) => panic!("opening with O_DIRECT: {error}"),
    };
    write_and_sync(&file, 0, &vec![0; BLOCKS * IO_ALIGN]);
    let mut pool = vec![
        IoBuf::with_capacity(2 * IO_ALIGN),
        IoBuf::with_capacity(2 * IO_ALIGN),
    ];
    env.disk.register_buffers(&mut pool).unwrap();
    let mut expected = vec![0; BLOCKS * IO_ALIGN];
    for block in 0..BLOCKS - 1 {
        let bytes = pattern(block as u64, 2 * IO_ALIGN);
        expected[block * IO_ALIGN..(block + 2) * IO_ALIGN].copy_from_slice(&bytes);
        let mut buf = pool.pop().unwrap();
        buf.clear();
        buf.extend_from_slice(&bytes);
        let buf = file
            .write_and_sync((block * IO_ALIGN) as u64, buf)
            .wait()
            .unwrap();
        pool.insert(0, buf);
    }
    assert_eq!(read(&file, 0, BLOCKS * IO_ALIGN), expected);
    let unaligned = file
        .write_and_sync(100, IoBuf::from_slice(&[1; IO_ALIGN]))
        .wait();
    assert_eq!(unaligned.unwrap_err().raw_os_error(), Some(libc::EINVAL));
    assert_eq!(read(&file, 0, BLOCKS * IO_ALIGN), expected);
}

/// `write_and_sync_now` keeps `write_and_sync`'s contract: buffered at any
/// offset, `O_DIRECT` in whole blocks, a misaligned direct write refused.
fn write_and_sync_now_round_trips(env: &Env) {
    let file = env.create("now");
    let bytes = pattern(41, 10_000);
    let buf = file
        .write_and_sync_now(300, IoBuf::from_slice(&bytes))
        .unwrap();
    assert_eq!(&buf[..], &bytes[..], "the buffer comes back");
    assert_eq!(read(&file, 300, bytes.len()), bytes);
    let empty = file.write_and_sync_now(0, IoBuf::with_capacity(0)).unwrap();
    assert!(empty.is_empty());

    let options = OpenOptions {
        create: true,
        direct_io: true,
    };
    let direct = match env.disk.open(&env.path("now-direct"), options) {
        Ok(file) => file,
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
            eprintln!("SKIPPED: this file system refuses O_DIRECT");
            return;
        }
        Err(error) => panic!("opening with O_DIRECT: {error}"),
    };
    let blocks = pattern(42, 3 * IO_ALIGN);
    direct
        .write_and_sync_now(IO_ALIGN as u64, IoBuf::from_slice(&blocks))
        .unwrap();
    assert_eq!(read(&direct, IO_ALIGN as u64, 3 * IO_ALIGN), blocks);
    let misaligned = direct.write_and_sync_now(7, IoBuf::from_slice(&[1; IO_ALIGN]));
    assert_eq!(misaligned.unwrap_err().raw_os_error(), Some(libc::EINVAL));
}

/// `write_now` keeps `write_at`'s contract: every byte at any offset of a
/// buffered file, an overwrite in place, the buffer handed back, and
/// `O_DIRECT` in whole blocks with a misaligned write refused.
fn write_now_round_trips(env: &Env) {
    let file = env.create("now-plain");
    let bytes = pattern(43, 10_000);
    let buf = file.write_now(300, IoBuf::from_slice(&bytes)).unwrap();
    assert_eq!(&buf[..], &bytes[..], "the buffer comes back");
    assert_eq!(read(&file, 300, bytes.len()), bytes);
    file.write_now(302, IoBuf::from_slice(&[7; 8])).unwrap();
    let mut expected = bytes.clone();
    expected[2..10].fill(7);
    assert_eq!(
        read(&file, 300, bytes.len()),
        expected,
        "overwritten in place"
    );

    let options = OpenOptions {
        create: true,
        direct_io: true,
    };
    let direct = match env.disk.open(&env.path("now-plain-direct"), options) {
        Ok(file) => file,
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
            eprintln!("SKIPPED: this file system refuses O_DIRECT");
            return;
        }
        Err(error) => panic!("opening with O_DIRECT: {error}"),
    };
    let blocks = pattern(44, 2 * IO_ALIGN);
    direct
        .write_now(IO_ALIGN as u64, IoBuf::from_slice(&blocks))
        .unwrap();
    assert_eq!(read(&direct, IO_ALIGN as u64, 2 * IO_ALIGN), blocks);
    let misaligned = direct.write_now(7, IoBuf::from_slice(&[1; IO_ALIGN]));
    assert_eq!(misaligned.unwrap_err().raw_os_error(), Some(libc::EINVAL));
}

/// A real backend reports a file's and a directory's modification time,
/// about now; the simulated disk says it keeps none.
fn modified_ms_is_about_now_or_unsupported(env: &Env) {
    let file = env.create("modified");
    file.write_at(0, IoBuf::from_slice(b"x")).wait().unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for path in [env.path("modified"), env.path("")] {
        match env.disk.modified_ms(&path) {
            Ok(ms) => assert!(
                ms.abs_diff(now_ms) < 60_000,
                "{} modified at {ms}, now is {now_ms}",
                path.display()
            ),
            Err(error) => {
                assert_eq!(
                    env.disk.kind(),
                    narad_disk::BackendKind::Simulated,
                    "{error}"
                );
                assert_eq!(error.kind(), std::io::ErrorKind::Unsupported);
            }
        }
    }
}

macro_rules! contract {
    ($($behaviour:ident),* $(,)?) => {
        mod portable {
            $(#[test] fn $behaviour() { if let Some(env) = super::Env::portable() { super::$behaviour(&env) } })*
        }
        mod io_uring {
            $(#[test] fn $behaviour() { if let Some(env) = super::Env::io_uring() { super::$behaviour(&env) } })*
        }
        mod io_uring_plain {
            $(#[test] fn $behaviour() { if let Some(env) = super::Env::io_uring_plain() { super::$behaviour(&env) } })*
        }
        mod sim {
            $(#[test] fn $behaviour() { if let Some(env) = super::Env::sim() { super::$behaviour(&env) } })*
        }
    };
}

contract!(
    write_read_round_trips_at_offsets,
    write_past_the_end_leaves_zeros_before_it,
    read_past_the_end_of_file_is_short,
    fdatasync_succeeds_and_keeps_the_data_readable,
    truncate_shrinks_and_extends_with_zeros,
    fallocate_extends_with_zeros_and_keeps_existing_bytes,
    opening_a_missing_file_without_create_is_not_found,
    namespace_operations_behave_like_posix,
    interleaved_ops_from_eight_threads_all_complete_correctly,
    registered_buffers_write_and_stay_registered,
    eight_mib_write_round_trips,
    direct_io_aligned_writes_round_trip,
    operations_on_many_files_at_once_stay_separate,
    a_dropped_disk_still_completes_operations_in_flight,
    write_and_sync_writes_every_byte_and_hands_the_buffer_back,
    write_and_sync_appends_in_order,
    write_and_sync_of_an_empty_buffer_only_syncs,
    write_and_sync_from_registered_buffers_keeps_them_registered,
    write_and_sync_from_many_threads_at_once_all_land,
    eight_mib_write_and_sync_round_trips,
    write_and_sync_on_a_direct_io_file_round_trips,
    write_and_sync_overwrites_a_preallocated_direct_io_file,
    write_and_sync_now_round_trips,
    write_now_round_trips,
    modified_ms_is_about_now_or_unsupported,
);

/// Faults on the simulated disk: a write-and-sync is a write and then an
/// fdatasync, and each part takes faults as the plain operations do.
mod sim_faults {
    use std::path::Path;

    use narad_disk::sim::{Fault, FaultError, FaultOp, SimDisk, Tear};
    use narad_disk::{Disk, FileHandle, IoBuf, OpenOptions};

    const PATH: &str = "/faults/log";

    /// A file whose name is durable and whose first 7 bytes are synced.
    fn synced_file(disk: &SimDisk) -> FileHandle {
        disk.create_dir_all(Path::new("/faults")).unwrap();
        let file = disk.open(Path::new(PATH), OpenOptions::CREATE).unwrap();
        disk.sync_dir(Path::new("/faults")).unwrap();
        file.write_and_sync(0, IoBuf::from_slice(b"durable"))
            .wait()
            .unwrap();
        file
    }

    fn eio(op: FaultOp) -> Fault {
        Fault {
            op,
            nth: 0,
            error: FaultError::Eio,
            sticky: false,
        }
    }

    #[test]
    fn failed_sync_part_is_an_error_and_makes_nothing_newly_durable() {
        let disk = SimDisk::new(21);
        let file = synced_file(&disk);
        disk.inject(eio(FaultOp::Sync));
        let error = file
            .write_and_sync(7, IoBuf::from_slice(b"+lost"))
            .wait()
            .unwrap_err();
        let sync = narad_disk::sync_failure(&error).expect("marked as the fdatasync's");
        assert_eq!(sync.raw_os_error(), Some(libc::EIO));
        assert_eq!(
            disk.read_file(Path::new(PATH)).unwrap(),
            b"durable+lost",
            "the write itself went through"
        );
        disk.crash(Tear::None);
        assert_eq!(disk.read_file(Path::new(PATH)).unwrap(), b"durable");
    }

    #[test]
    fn failed_write_part_is_an_error_and_runs_no_sync() {
        let disk = SimDisk::new(22);
        let file = synced_file(&disk);
        file.write_at(7, IoBuf::from_slice(b"+unsynced"))
            .wait()
            .unwrap();
        let before = disk.op_count();
        disk.inject(eio(FaultOp::Write));
        let error = file
            .write_and_sync(16, IoBuf::from_slice(b"+failed"))
            .wait()
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
        assert!(
            narad_disk::sync_failure(&error).is_none(),
            "a write failure"
        );
        assert_eq!(disk.op_count(), before + 1, "only the write ran");
        disk.crash(Tear::None);
        assert_eq!(disk.read_file(Path::new(PATH)).unwrap(), b"durable");
    }

    #[test]
    fn successful_write_and_sync_survives_a_crash_whole() {
        let disk = SimDisk::new(23);
        let file = synced_file(&disk);
        file.write_and_sync(7, IoBuf::from_slice(b"+kept"))
            .wait()
            .unwrap();
        disk.crash(Tear::LastWrite);
        assert_eq!(disk.read_file(Path::new(PATH)).unwrap(), b"durable+kept");
    }

    #[test]
    fn each_part_counts_as_one_data_operation() {
        let disk = SimDisk::new(24);
        let file = synced_file(&disk);
        let before = disk.op_count();
        file.write_and_sync(7, IoBuf::from_slice(b"x"))
            .wait()
            .unwrap();
        assert_eq!(disk.op_count(), before + 2);
    }
}

/// Writes the kernel cuts short, on the real backends: with `RLIMIT_FSIZE`
/// set, a write crossing the limit lands only up to it (a short write) and
/// the rest fails with `EFBIG`. The limit holds for the whole process, so the
/// checks run in a child process: the test binary again, on this test only.
mod short_writes {
    use std::process::Command;

    use narad_disk::{IO_ALIGN, IoBuf, OpenOptions};

    use super::{Env, pattern, read};

    const CHILD_ENV: &str = "NARAD_DISK_SHORT_WRITE_CHILD";
    const TEST_NAME: &str = "short_writes::writes_cut_short_by_the_kernel_report_its_error";
    /// The file size limit of the child.
    const LIMIT: u64 = 1 << 20;
    /// Bytes of each write that fit under the limit.
    const LANDED: usize = 100;

    #[test]
    fn writes_cut_short_by_the_kernel_report_its_error() {
        if std::env::var_os(CHILD_ENV).is_some() {
            return in_child();
        }
        let child = Command::new(std::env::current_exe().unwrap())
            .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .output()
            .unwrap();
        assert!(
            child.status.success(),
            "the child process failed ({}):\n{}\n{}",
            child.status,
            String::from_utf8_lossy(&child.stdout),
            String::from_utf8_lossy(&child.stderr)
        );
    }

    fn in_child() {
        // SAFETY: plain libc calls on this process with valid arguments;
        // ignoring SIGXFSZ turns the signal a write past the limit raises
        // into an EFBIG result.
        let limited = unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: LIMIT,
                rlim_max: LIMIT,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &raw const limit)
        };
        assert_eq!(limited, 0, "setrlimit failed");
        let bytes = pattern(3, 4096);
        let at = LIMIT - LANDED as u64;
        let backends = [Env::portable(), Env::io_uring(), Env::io_uring_plain()];
        for env in backends.into_iter().flatten() {
            let kind = env.disk.kind();
            let synced = env.create("synced");
            let error = synced
                .write_and_sync(at, IoBuf::from_slice(&bytes))
                .wait()
                .unwrap_err();
            assert_eq!(error.raw_os_error(), Some(libc::EFBIG), "{kind}");
            assert_eq!(read(&synced, at, 4096), &bytes[..LANDED], "{kind}");
            let plain = env.create("plain");
            let error = plain
                .write_at(at, IoBuf::from_slice(&bytes))
                .wait()
                .unwrap_err();
            assert_eq!(error.raw_os_error(), Some(libc::EFBIG), "{kind}");
            assert_eq!(read(&plain, at, 4096), &bytes[..LANDED], "{kind}");
            let now = env.create("now");
            let error = now
                .write_and_sync_now(at, IoBuf::from_slice(&bytes))
                .unwrap_err();
            assert_eq!(error.raw_os_error(), Some(libc::EFBIG), "{kind}");
            assert_eq!(read(&now, at, 4096), &bytes[..LANDED], "{kind}");
            direct_writes_cut_short(&env);
        }
    }

    /// An `O_DIRECT` write of two blocks from one block below the limit:
    /// the first lands (a short write), the rest fails with `EFBIG`, through
    /// the ring (`RWF_DSYNC` or the linked fsync) and on the calling thread.
    fn direct_writes_cut_short(env: &Env) {
        let kind = env.disk.kind();
        let blocks = pattern(4, 2 * IO_ALIGN);
        let at = LIMIT - IO_ALIGN as u64;
        let options = OpenOptions {
            create: true,
            direct_io: true,
        };
        let Ok(ring) = env.disk.open(&env.path("direct-ring"), options) else {
            eprintln!("SKIPPED: this file system refuses O_DIRECT");
            return;
        };
        let error = ring
            .write_and_sync(at, IoBuf::from_slice(&blocks))
            .wait()
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EFBIG), "{kind}");
        assert_eq!(read(&ring, at, 2 * IO_ALIGN), &blocks[..IO_ALIGN], "{kind}");
        let now = env.disk.open(&env.path("direct-now"), options).unwrap();
        let error = now
            .write_and_sync_now(at, IoBuf::from_slice(&blocks))
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EFBIG), "{kind}");
        assert_eq!(read(&now, at, 2 * IO_ALIGN), &blocks[..IO_ALIGN], "{kind}");
    }
}
