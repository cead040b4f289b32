//! The io_uring backend: storage threads, each owning one ring.
//!
//! Callers hand requests to a storage thread over a bounded channel and get a
//! [`Completion`] back. The thread keeps one `Read` of an eventfd in flight on
//! its ring at all times; submitters signal that eventfd after queueing a
//! request, so the thread wakes from `io_uring_enter` and submits new work
//! while earlier operations (a slow fdatasync) are still running in the
//! kernel. Nothing on the thread ever blocks on one operation (except a
//! truncate on kernels without `IORING_OP_FTRUNCATE`, which the thread runs
//! itself).
//!
//! Every operation completes with the kernel's own result. Short writes are
//! continued with the remainder and a write that makes no progress is an
//! error; short reads are continued until end of file. Buffers move into the
//! request and come back with its completion, so the kernel never sees memory
//! that the caller could touch or free meanwhile.
//!
//! A write-and-sync is one request and one `io_uring_enter`: the write
//! linked (`IOSQE_IO_LINK`) to an `FSYNC(DATASYNC)`, which the kernel starts
//! only after the write completed in full. A short write cancels the sync;
//! the rest is then written, again linked to a sync, so success always means
//! a sync ordered after the last byte.
//!
//! Reads the page cache can answer skip the ring: `read_at` first tries
//! `preadv2(RWF_NOWAIT)` on the calling thread, which copies cached pages and
//! never waits for the disk. Only what that leaves (pages not cached) goes to
//! the ring. A caller reading back what it just wrote (a partition log's
//! commit) or reading the recent tail saves two thread hand-offs. As through
//! the ring, a read sees a write once that write has completed; entries of
//! one ring are not ordered by the kernel unless linked.
//!
//! Registered (fixed) buffers: each ring starts with a sparse table of
//! [`REGISTERED_BUFFERS_MAX`] slots, and [`Disk::register_buffers`] fills
//! slots with `IORING_REGISTER_BUFFERS_UPDATE`. Writes from a registered
//! buffer use `WriteFixed`, which skips pinning the pages on every write.
//! Kernels without sparse registration (before 5.13) or that refuse the
//! registration (locked-memory limit) leave buffers unregistered, with a
//! warning; they still work, through plain `Write`.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Instant;

use io_uring::{IoUring, opcode, squeue, types};

use crate::queue::{self, Received, Receiver, Sender};

use crate::OpenOptions;
use crate::portable::{open_std, std_namespace_ops};
use crate::{BackendKind, Completion, CompletionSender, Disk, DiskFile, FileHandle, IoBuf};

/// Submission-queue entries per ring. Each operation in flight holds one
/// entry (a write-and-sync two), so this bounds a ring's concurrency; 256 is
/// far beyond what a group-committing WAL and a node's partition logs keep in
/// flight at once.
pub const RING_ENTRIES: u32 = 256;

/// Entries one ring has in flight at most, plus one for the eventfd read, so
/// pushing an entry can never find the queue full (and the completion queue,
/// twice as deep, can never overflow).
const ENTRIES_IN_FLIGHT_MAX: usize = RING_ENTRIES as usize - 1;
const _: () = assert!(ENTRIES_IN_FLIGHT_MAX < RING_ENTRIES as usize);

/// Entries one operation holds at once: a write linked to its fdatasync.
const ENTRIES_PER_OP_MAX: usize = 2;
const _: () = assert!(ENTRIES_PER_OP_MAX <= ENTRIES_IN_FLIGHT_MAX);

/// Requests queued ahead of one storage thread before submitters block: a
/// bound on memory, not a tuning knob; a full queue is backpressure.
pub const URING_QUEUE_CAPACITY: usize = 1024;

/// Storage threads by default. One ring already overlaps any number of
/// operations (the kernel runs blocking ones such as fdatasync on its own
/// workers), and a second thread only competes for a core on small machines.
pub const URING_THREADS_DEFAULT: usize = 1;

/// Fixed-buffer slots per ring. Slots are reused round-robin, so a caller
/// that registers buffers each time it opens never runs out (a stale slot
/// only stops being used: see `fixed_slot`).
pub const REGISTERED_BUFFERS_MAX: u16 = 64;

/// Largest transfer one read or write entry asks for. Linux moves at most
/// 0x7fff_f000 bytes per call anyway; longer operations continue as short
/// ones do.
const IO_CHUNK_BYTES_MAX: usize = 1 << 30;
const _: () = assert!(IO_CHUNK_BYTES_MAX <= u32::MAX as usize);

/// `user_data` of the eventfd read; operation slots use their index.
const WAKE_TOKEN: u64 = u64::MAX;

/// Set in the `user_data` of the fdatasync entry of a write-and-sync, beside
/// its slot index, to tell its completion from the write's.
const SYNC_PART_BIT: u64 = 1 << 62;

/// The io_uring backend. Clones share the same storage threads; they stop
/// once the last clone and the last file opened through it are dropped and
/// every operation in flight has completed.
#[derive(Debug, Clone)]
pub struct UringDisk {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    workers: Vec<WorkerLink>,
    next_worker: AtomicUsize,
    /// Whether every ring accepted a sparse buffer table.
    buffers_supported: bool,
    /// The next fixed-buffer slot to hand out (round-robin).
    next_slot: Mutex<u16>,
    /// Write entries submitted from registered buffers, on every ring.
    fixed_writes: Arc<AtomicU64>,
    /// Reads answered in full on the calling thread from the page cache.
    cached_reads: AtomicU64,
    /// Cleared when the file system refuses `RWF_NOWAIT`: every read then
    /// goes to the ring.
    cached_reads_supported: AtomicBool,
    /// How write-and-syncs to `O_DIRECT` files are made durable.
    direct_sync: DirectSync,
    /// Gathered write-and-syncs running on their callers' threads now
    /// (`DiskFile::write_and_sync_gathered`); one that starts while this is
    /// not 0 goes to the ring instead.
    gathering_now: AtomicUsize,
    /// Gathered write-and-syncs sent to the ring because another was
    /// running.
    gathered_syncs: AtomicU64,
}

/// Counts a gathered write-and-sync running on its caller's thread for as
/// long as it lives.
struct GatheringNow<'a>(&'a AtomicUsize);

impl Drop for GatheringNow<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The submitting side of one storage thread.
#[derive(Debug)]
struct WorkerLink {
    /// `None` only while dropping, so the thread sees the channel close.
    requests: Option<Sender<Request>>,
    wake: Arc<Wake>,
}

impl Drop for WorkerLink {
    fn drop(&mut self) {
        drop(self.requests.take());
        // The thread may be asleep in io_uring_enter; it only notices the
        // closed channel once woken.
        self.wake.signal();
    }
}

/// An eventfd that submitters signal and a storage thread reads through its
/// ring. `pending` saves a syscall per request under load: only the first
/// submitter after the thread last woke writes to the eventfd.
#[derive(Debug)]
struct Wake {
    fd: OwnedFd,
    pending: AtomicBool,
}

impl Wake {
    fn new() -> io::Result<Self> {
        // Blocking on purpose: on kernels where io_uring returns EAGAIN for a
        // read of a non-blocking file instead of waiting, the storage thread
        // would spin. A blocking eventfd is polled (or read by a kernel
        // worker) until a submitter signals it.
        // SAFETY: eventfd takes no pointers; a non-negative result is a new
        // descriptor that nothing else owns.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            // SAFETY: `fd` is a freshly created descriptor owned by no one
            // else, so `OwnedFd` may take ownership and close it once.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            pending: AtomicBool::new(false),
        })
    }

    /// Wakes the thread after a request was queued. The swap pairs with the
    /// thread's `swap(false)`: either the thread clears the flag after our
    /// request was queued (and then drains it), or we see it cleared and
    /// write to the eventfd.
    fn wake(&self) {
        if !self.pending.swap(true, Ordering::AcqRel) {
            self.signal();
        }
    }

    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live local to a descriptor this
        // struct owns. It could only block (or fail) with the counter near
        // u64::MAX, impossible since the thread resets it on every read.
        let written = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                std::ptr::from_ref(&one).cast::<libc::c_void>(),
                size_of::<u64>(),
            )
        };
        if written != size_of::<u64>() as isize {
            tracing::error!(
                error = %io::Error::last_os_error(),
                "signalling a storage thread's eventfd failed"
            );
        }
    }
}

enum Request {
    Op(Op),
    Register {
        /// (slot, address, length) of each buffer.
        buffers: Vec<(u16, usize, usize)>,
        done: CompletionSender<()>,
    },
}

/// One data operation, owned by the storage thread while it runs.
struct Op {
    file: Arc<fs::File>,
    kind: OpKind,
}

enum OpKind {
    Write {
        offset: u64,
        buf: IoBuf,
        written: usize,
        /// The fixed-buffer slot this write uses, decided when it starts and
        /// kept for its continuations.
        fixed: Option<u16>,
        done: CompletionSender<IoBuf>,
    },
    Read {
        offset: u64,
        target: ReadTarget,
        len: usize,
        filled: usize,
        done: CompletionSender<Vec<u8>>,
    },
    Sync {
        done: CompletionSender<()>,
    },
    /// A write followed by an fdatasync: each round submits the rest of the
    /// write linked (`IO_LINK`) to an fdatasync, so the kernel starts the
    /// sync only once the write completed in full.
    WriteSync {
        offset: u64,
        buf: IoBuf,
        written: usize,
        fixed: Option<u16>,
        round: SyncRound,
        /// Durable by `RWF_DSYNC` on the write instead of a linked
        /// fdatasync (see [`DirectSync`]).
        dsync: bool,
        done: CompletionSender<IoBuf>,
    },
    Fallocate {
        offset: u64,
        len: u64,
        done: CompletionSender<()>,
    },
    Truncate {
        len: u64,
        done: CompletionSender<()>,
    },
}

/// The entries of one write-and-sync round and what the kernel returned for
/// them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct SyncRound {
    /// Entries of this round not yet completed.
    awaiting: u8,
    /// The write entry's result, if the round had one.
    write: Option<i32>,
    /// The fdatasync entry's result, if the round had one.
    sync: Option<i32>,
    /// The kernel took the write without its linked fdatasync in the same
    /// submission (it stops early only when out of memory), so the sync
    /// started unordered and its success proves nothing about the write.
    split: bool,
    /// The round's write carried `RWF_DSYNC` (an `O_DIRECT` file under
    /// [`DirectSync::DsyncWrite`]): it has no fdatasync entry, and the write
    /// completing in full is the data being durable.
    dsync: bool,
}

/// What a write-and-sync does once its round's completions are all in.
#[derive(Debug, PartialEq, Eq)]
enum Settled {
    /// Submit another round: the rest of the write and its fdatasync, or an
    /// fdatasync alone.
    Again,
    /// Complete with this result (0 or a negative errno); a result of 0 with
    /// bytes left unwritten is reported as `WriteZero`.
    Done(i32),
    /// The write completed and its fdatasync failed with this negative
    /// errno: complete with it, marked as the fdatasync's
    /// ([`crate::sync_failure`]). Never retried.
    SyncFailed(i32),
}

/// Decides a write-and-sync's next step from its finished round and counts
/// the bytes its write moved.
///
/// - A failed write is the outcome (`EINTR` and `EAGAIN` try again); the
///   kernel cancelled the linked fdatasync.
/// - A write of zero bytes is `WriteZero`.
/// - A short write cancels the linked fdatasync (`ECANCELED`): the rest is
///   written and synced next round. Success is reported only after a sync
///   that was ordered after the last byte.
/// - A failed fdatasync is the outcome and never retried; a cancelled one
///   never ran, so it is submitted again.
fn settle(round: SyncRound, len: usize, written: &mut usize) -> Settled {
    assert_eq!(
        round.awaiting, 0,
        "a round settles once all its entries completed"
    );
    if let Some(result) = round.write {
        match usize::try_from(result) {
            Ok(0) => return Settled::Done(0),
            Ok(count) => {
                *written += count;
                assert!(*written <= len, "kernel wrote past the buffer");
            }
            Err(_) if matches!(-result, libc::EINTR | libc::EAGAIN) => return Settled::Again,
            // A `RWF_DSYNC` write's I/O or space error may be its flush's:
            // treated as a failed fdatasync, so it is never retried. Others
            // (`EINVAL` for a misaligned one, `EBADF`, ...) wrote nothing.
            Err(_) if round.dsync && matches!(-result, libc::EIO | libc::ENOSPC | libc::EDQUOT) => {
                return Settled::SyncFailed(result);
            }
            Err(_) => return Settled::Done(result),
        }
    }
    if round.dsync {
        // Each byte a `RWF_DSYNC` write reports written is durable; a short
        // one continues with the rest, again with the flag.
        return if *written == len {
            Settled::Done(0)
        } else {
            Settled::Again
        };
    }
    match round.sync {
        Some(0) if !round.split && *written == len => Settled::Done(0),
        Some(result) if result < 0 && result != -libc::ECANCELED => Settled::SyncFailed(result),
        _ => Settled::Again,
    }
}

/// Where a read lands: a plain vector, or (for `O_DIRECT` files, which need
/// an aligned address) an aligned buffer copied out at the end.
enum ReadTarget {
    Plain(Vec<u8>),
    Aligned(IoBuf),
}

impl ReadTarget {
    fn new(len: usize, direct_io: bool) -> Self {
        if direct_io {
            Self::Aligned(IoBuf::with_capacity(len))
        } else {
            Self::Plain(vec![0; len])
        }
    }

    /// The initialised bytes the kernel may fill: at least the read's length.
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Self::Plain(data) => data,
            Self::Aligned(buf) => buf.spare_capacity_mut(),
        }
    }

    fn into_vec(self, filled: usize) -> Vec<u8> {
        match self {
            Self::Plain(mut data) => {
                data.truncate(filled);
                data
            }
            Self::Aligned(mut buf) => buf.spare_capacity_mut()[..filled].to_vec(),
        }
    }
}

impl UringDisk {
    /// Starts `threads` storage threads (at least one), each with its own
    /// ring.
    ///
    /// # Errors
    /// When a ring cannot be set up (no io_uring in the kernel, a seccomp
    /// profile or `kernel.io_uring_disabled` refusing it, or an opcode Narad
    /// needs missing), or a thread cannot be spawned.
    pub fn new(threads: usize) -> io::Result<Self> {
        Self::with_options(threads, RingOptions::default())
    }

    /// Starts `threads` storage threads whose rings are set up as `options`
    /// say.
    ///
    /// # Errors
    /// As [`UringDisk::new`].
    pub fn with_options(threads: usize, options: RingOptions) -> io::Result<Self> {
        let mut workers = Vec::new();
        let mut buffers_supported = true;
        let fixed_writes = Arc::new(AtomicU64::new(0));
        for index in 0..threads.max(1) {
            let (ring, features) = setup_ring(options)?;
            buffers_supported &= features.fixed_buffers;
            let wake = Arc::new(Wake::new()?);
            let (requests, queue) = queue::bounded(URING_QUEUE_CAPACITY);
            let thread_wake = Arc::clone(&wake);
            let counter = Arc::clone(&fixed_writes);
            // The thread enables its own ring (a single-issuer ring belongs to
            // the thread that enables it) and reports whether that worked.
            let (started_tx, started) = std::sync::mpsc::sync_channel(1);
            thread::Builder::new()
                .name(format!("narad-uring-{index}"))
                .spawn(
                    move || match Worker::new(ring, queue, thread_wake, features, counter) {
                        Ok(worker) => {
                            let _ = started_tx.send(Ok(()));
                            worker.run();
                        }
                        Err(error) => {
                            let _ = started_tx.send(Err(error));
                        }
                    },
                )?;
            started.recv().unwrap_or_else(|_| {
                Err(io::Error::other("a storage thread stopped while starting"))
            })?;
            workers.push(WorkerLink {
                requests: Some(requests),
                wake,
            });
        }
        Ok(Self {
            shared: Arc::new(Shared {
                workers,
                next_worker: AtomicUsize::new(0),
                buffers_supported,
                next_slot: Mutex::new(0),
                fixed_writes,
                cached_reads: AtomicU64::new(0),
                cached_reads_supported: AtomicBool::new(true),
                direct_sync: options.direct_sync,
                gathering_now: AtomicUsize::new(0),
                gathered_syncs: AtomicU64::new(0),
            }),
        })
    }

    /// Gathered write-and-syncs (`DiskFile::write_and_sync_gathered`) that
    /// went to the ring so far because another one was running: how often
    /// syncs of different files were submitted together.
    pub fn gathered_syncs(&self) -> u64 {
        self.shared.gathered_syncs.load(Ordering::Relaxed)
    }

    /// Write entries submitted from registered buffers (`WriteFixed`) so far,
    /// on every ring: shows whether registration is paying off.
    pub fn fixed_writes(&self) -> u64 {
        self.shared.fixed_writes.load(Ordering::Relaxed)
    }

    /// Reads answered in full from the page cache on the calling thread,
    /// without the ring, so far.
    pub fn cached_reads(&self) -> u64 {
        self.shared.cached_reads.load(Ordering::Relaxed)
    }

    /// Hands a request to a storage thread. If the thread is gone the request
    /// is dropped, and with it the sender of its completion, which then
    /// resolves to "storage thread stopped".
    fn send(&self, worker: usize, request: Request) {
        let link = &self.shared.workers[worker];
        let Some(requests) = &link.requests else {
            return;
        };
        if requests.send(request).is_err() {
            tracing::error!(worker, "io_uring storage thread has stopped");
            return;
        }
        link.wake.wake();
    }

    /// Reserves `count` fixed-buffer slots, round-robin.
    fn reserve_slots(&self, count: usize) -> Vec<u16> {
        let mut next = self
            .shared
            .next_slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (0..count)
            .map(|_| {
                let slot = *next;
                *next = (slot + 1) % REGISTERED_BUFFERS_MAX;
                slot
            })
            .collect()
    }
}

/// How each storage thread's ring is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingOptions {
    /// `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN` (Linux
    /// 6.1): the kernel runs completion work only when the storage thread
    /// waits for completions, instead of interrupting it. On by default: it
    /// measured 10–18 µs off a 4 KiB write-and-sync on a preallocated file
    /// (docs/internals/disk.md). Where the kernel refuses the flags the ring
    /// is set up without them, and an `info` line says so.
    pub defer_taskrun: bool,
    /// How a write-and-sync to an `O_DIRECT` file makes its data durable.
    pub direct_sync: DirectSync,
}

impl Default for RingOptions {
    fn default() -> Self {
        Self {
            defer_taskrun: true,
            direct_sync: DirectSync::default(),
        }
    }
}

/// How [`DiskFile::write_and_sync`] makes an `O_DIRECT` file's write
/// durable on io_uring. Buffered files always use the linked fdatasync.
///
/// Either way the write itself completes without the kernel's io-wq workers
/// when the file system can write directly at submission (an overwrite of
/// allocated blocks, such as a prepared WAL segment).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DirectSync {
    /// One `WRITE` entry with `RWF_DSYNC`: the kernel flushes the device
    /// cache (or writes with FUA) before completing it. No fdatasync entry,
    /// so nothing goes to an io-wq worker.
    #[default]
    DsyncWrite,
    /// The write linked to an `FSYNC(DATASYNC)`, as for buffered files. The
    /// fdatasync runs on an io-wq worker.
    LinkedFsync,
}

/// What a ring can do beyond the operations Narad requires.
#[derive(Clone, Copy, Debug)]
struct RingFeatures {
    fixed_buffers: bool,
    ftruncate: bool,
    /// The ring was created disabled and single-issuer: the thread that
    /// enables it becomes its only submitter.
    single_issuer: bool,
}

/// Builds a ring with the setup flags `options` ask for, or a plain one where
/// the kernel refuses them (`EINVAL`, before Linux 6.1). Returns whether it
/// is single-issuer.
fn build_ring(options: RingOptions) -> io::Result<(IoUring, bool)> {
    if options.defer_taskrun {
        let built = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_r_disabled()
            .build(RING_ENTRIES);
        match built {
            Ok(ring) => return Ok((ring, true)),
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
                tracing::info!(
                    "io_uring refused IORING_SETUP_DEFER_TASKRUN (needs Linux 6.1): \
                     the storage threads use plain rings"
                );
            }
            Err(error) => return Err(error),
        }
    }
    Ok((IoUring::new(RING_ENTRIES)?, false))
}

/// Creates a ring and checks that the kernel supports what the backend uses.
/// Registrations made here happen while a single-issuer ring is still
/// disabled, so any thread may make them.
fn setup_ring(options: RingOptions) -> io::Result<(IoUring, RingFeatures)> {
    let (ring, single_issuer) = build_ring(options)?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    let required = [
        ("read", opcode::Read::CODE),
        ("write", opcode::Write::CODE),
        ("write_fixed", opcode::WriteFixed::CODE),
        ("fsync", opcode::Fsync::CODE),
        ("fallocate", opcode::Fallocate::CODE),
    ];
    for (name, code) in required {
        if !probe.is_supported(code) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("io_uring lacks the {name} operation"),
            ));
        }
    }
    let ftruncate = probe.is_supported(opcode::Ftruncate::CODE);
    if !ftruncate {
        tracing::info!(
            "io_uring has no ftruncate (Linux < 6.9): truncates run synchronously \
             on the storage thread"
        );
    }
    let fixed_buffers = match ring
        .submitter()
        .register_buffers_sparse(u32::from(REGISTERED_BUFFERS_MAX))
    {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(
                %error,
                "io_uring refused a sparse fixed-buffer table (needs Linux 5.13): \
                 writes use unregistered buffers"
            );
            false
        }
    };
    Ok((
        ring,
        RingFeatures {
            fixed_buffers,
            ftruncate,
            single_issuer,
        },
    ))
}

/// One storage thread's state: its ring and the operations in flight on it.
struct Worker {
    ring: IoUring,
    requests: Receiver<Request>,
    wake: Arc<Wake>,
    /// Target of the eventfd read. Leaked on purpose (8 bytes per thread),
    /// so it stays valid even if the thread unwinds with the read in flight.
    wake_target: *mut u64,
    wake_armed: bool,
    /// Operations in flight, indexed by their `user_data`.
    slots: Vec<Option<Op>>,
    free_slots: Vec<usize>,
    /// Entries of operations pushed and not yet completed (the eventfd read
    /// aside).
    in_flight: usize,
    closing: bool,
    features: RingFeatures,
    /// What each fixed-buffer slot holds as far as this ring knows:
    /// (address, length).
    registered: Vec<Option<(usize, usize)>>,
    /// Writes in flight per fixed-buffer slot. A slot is re-registered only
    /// when none uses it: the kernel resolves a write's slot when it issues
    /// the write, which may be after we pushed it, so updating a busy slot
    /// could point a queued write at another buffer (and fail it).
    fixed_busy: Vec<u32>,
    /// A registration waiting for its slots to fall idle; no request queued
    /// behind it starts before it is done.
    parked: Option<ParkedRegistration>,
    /// Completions reaped but not yet handled (reused between rounds).
    reaped: Vec<(u64, i32)>,
    /// `user_data` of the entries pushed since the last submission, in
    /// order, to notice a linked pair the kernel took only half of.
    unsubmitted: Vec<u64>,
    fixed_writes: Arc<AtomicU64>,
}

struct ParkedRegistration {
    buffers: Vec<(u16, usize, usize)>,
    done: CompletionSender<()>,
}

impl Worker {
    /// Takes over a ring on the thread that will drive it, enabling it first
    /// if it was created disabled (single-issuer), which makes this thread
    /// its submitter.
    ///
    /// # Errors
    /// When the kernel refuses to enable the ring.
    fn new(
        ring: IoUring,
        requests: Receiver<Request>,
        wake: Arc<Wake>,
        features: RingFeatures,
        fixed_writes: Arc<AtomicU64>,
    ) -> io::Result<Self> {
        if features.single_issuer {
            ring.submitter().register_enable_rings()?;
        }
        Ok(Self {
            ring,
            requests,
            wake,
            wake_target: Box::into_raw(Box::new(0u64)),
            wake_armed: false,
            slots: Vec::new(),
            free_slots: Vec::new(),
            in_flight: 0,
            closing: false,
            features,
            registered: vec![None; usize::from(REGISTERED_BUFFERS_MAX)],
            fixed_busy: vec![0; usize::from(REGISTERED_BUFFERS_MAX)],
            parked: None,
            reaped: Vec::with_capacity(RING_ENTRIES as usize * 2),
            unsubmitted: Vec::with_capacity(RING_ENTRIES as usize),
            fixed_writes,
        })
    }

    fn run(mut self) {
        loop {
            if !self.closing && !self.wake_armed {
                self.arm_wake();
            }
            self.take_requests();
            if self.closing && self.in_flight == 0 && !self.wake_armed {
                return;
            }
            self.submit_and_wait();
            self.reap();
        }
    }

    /// Keeps one read of the eventfd in flight, so a submitter's signal
    /// completes it and wakes the thread.
    fn arm_wake(&mut self) {
        let entry = opcode::Read::new(
            types::Fd(self.wake.fd.as_raw_fd()),
            self.wake_target.cast::<u8>(),
            size_of::<u64>() as u32,
        )
        .build()
        .user_data(WAKE_TOKEN);
        // The read targets `wake_target`, a leaked 8-byte allocation that is
        // never freed and that we never read or write; the eventfd stays open
        // because `self.wake` holds it until the thread exits, which it does
        // only once this read has completed.
        self.push(&entry);
        self.wake_armed = true;
    }

    /// Starts queued requests, in order, while the ring has room.
    fn take_requests(&mut self) {
        if !self.register_parked() {
            return;
        }
        while self.in_flight + ENTRIES_PER_OP_MAX <= ENTRIES_IN_FLIGHT_MAX {
            // Never waits: the thread sleeps in `io_uring_enter` instead.
            match self.requests.recv_until(Some(Instant::now())) {
                Received::Item(Request::Op(op)) => self.start(op),
                Received::Item(Request::Register { buffers, done }) => {
                    self.parked = Some(ParkedRegistration { buffers, done });
                    if !self.register_parked() {
                        return;
                    }
                }
                Received::TimedOut => return,
                Received::Disconnected => {
                    if !self.closing {
                        self.closing = true;
                        // Completes our own eventfd read so we can exit.
                        self.wake.signal();
                    }
                    return;
                }
            }
        }
    }

    /// Carries out the parked registration if no write in flight uses its
    /// slots. Returns whether nothing is left parked.
    fn register_parked(&mut self) -> bool {
        let Some(parked) = self.parked.take() else {
            return true;
        };
        let busy = parked
            .buffers
            .iter()
            .any(|&(slot, ..)| self.fixed_busy[usize::from(slot)] > 0);
        if busy {
            self.parked = Some(parked);
            return false;
        }
        parked.done.complete(self.register(&parked.buffers));
        true
    }

    fn submit_and_wait(&mut self) {
        match self.ring.submit_and_wait(1) {
            Ok(submitted) => self.submitted(submitted),
            // Interrupted, or completions must be reaped before more can be
            // submitted: both are handled by reaping and coming round again.
            Err(error) if matches!(error.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
            Err(error) => panic!("io_uring_enter failed on a storage thread: {error}"),
        }
    }

    /// Notes that the kernel took the first `count` pushed entries. The rest
    /// stay queued for the next submission; if the first of them is the
    /// fdatasync linked behind a write the kernel already took, the pair was
    /// split and the sync will start unordered.
    fn submitted(&mut self, count: usize) {
        let count = count.min(self.unsubmitted.len());
        if let Some(&next) = self.unsubmitted.get(count)
            && next != WAKE_TOKEN
            && next & SYNC_PART_BIT != 0
            && count > 0
        {
            let slot = usize::try_from(next & !SYNC_PART_BIT).unwrap_or(usize::MAX);
            if let Some(Some(Op {
                kind: OpKind::WriteSync { round, .. },
                ..
            })) = self.slots.get_mut(slot)
            {
                round.split = true;
            }
        }
        self.unsubmitted.drain(..count);
    }

    fn reap(&mut self) {
        let mut reaped = std::mem::take(&mut self.reaped);
        reaped.extend(
            self.ring
                .completion()
                .map(|cqe| (cqe.user_data(), cqe.result())),
        );
        for &(token, result) in &reaped {
            if token == WAKE_TOKEN {
                self.wake_armed = false;
                // Pairs with `Wake::wake`: requests queued before a submitter
                // set the flag are visible to the drain that follows.
                self.wake.pending.swap(false, Ordering::AcqRel);
            } else {
                self.finish(token, result);
            }
        }
        reaped.clear();
        self.reaped = reaped;
    }

    /// Queues an entry on the submission queue; it is sent to the kernel by
    /// the next `submit_and_wait`.
    fn push(&mut self, entry: &squeue::Entry) {
        self.unsubmitted.push(entry.get_user_data());
        // SAFETY: the kernel reads or writes the memory an entry points at
        // until its completion is reaped, and uses its descriptor. Every
        // entry is built by `entry`, `queue_write_sync` (through
        // `write_entry`, or an fsync, which points at no memory) or
        // `arm_wake`: the memory is the heap allocation of the `IoBuf` or
        // `Vec` owned by the operation parked in `self.slots` (it does not
        // move when the struct holding it moves, and nothing touches it until
        // `finish` takes the operation back after the completion; a
        // write-and-sync goes back into its slot until every entry of its
        // round has completed), or the leaked wake target. A read entry
        // covers only `target[filled..len]`, inside the initialised
        // allocation; a write entry only `buf[written..]`. Descriptors are
        // kept open by the operation's `Arc<File>` or by `self.wake`. If the
        // thread unwinds with entries in flight, `Drop for Worker` leaks their
        // memory.
        let pushed = unsafe { self.ring.submission().push(entry) };
        // `ENTRIES_IN_FLIGHT_MAX` plus the eventfd read never exceed the
        // queue, and the queue is flushed to the kernel on every round.
        assert!(pushed.is_ok(), "io_uring submission queue overflow");
    }

    /// Starts an operation: completes at once what needs no kernel call,
    /// otherwise takes a slot and queues its first entry.
    fn start(&mut self, op: Op) {
        match &op.kind {
            OpKind::Write { buf, .. } if buf.is_empty() => return complete(op, 0, false),
            OpKind::Read { len: 0, .. } => return complete(op, 0, false),
            &OpKind::Truncate { len, .. } if !self.features.ftruncate => {
                let result = op.file.set_len(len);
                let errno = result
                    .err()
                    .map_or(0, |error| -error.raw_os_error().unwrap_or(libc::EIO));
                return complete(op, errno, false);
            }
            _ => {}
        }
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        let mut op = op;
        if let OpKind::Write { buf, fixed, .. } | OpKind::WriteSync { buf, fixed, .. } =
            &mut op.kind
        {
            *fixed = self.fixed_slot(buf);
            if let Some(index) = *fixed {
                self.fixed_busy[usize::from(index)] += 1;
            }
        }
        self.queue(&mut op, slot);
        self.slots[slot] = Some(op);
    }

    /// Pushes an operation's next entries, from where it has got to.
    fn queue(&mut self, op: &mut Op, slot: usize) {
        if let OpKind::WriteSync { .. } = op.kind {
            return self.queue_write_sync(op, slot);
        }
        let entry = self.entry(op, slot);
        self.push_op_entry(&entry);
    }

    /// Pushes a write-and-sync round: the rest of the write linked to an
    /// fdatasync, or the fdatasync alone once every byte is written. A rest
    /// longer than one entry may carry goes first without a sync, as a short
    /// write would.
    fn queue_write_sync(&mut self, op: &mut Op, slot: usize) {
        let fd = types::Fd(op.file.as_raw_fd());
        let OpKind::WriteSync {
            offset,
            buf,
            written,
            fixed,
            round,
            dsync,
            ..
        } = &mut op.kind
        else {
            unreachable!("queue_write_sync is called for write-and-sync operations only");
        };
        *round = SyncRound {
            dsync: *dsync,
            ..SyncRound::default()
        };
        if *dsync {
            // One entry: the write itself waits for its data to be durable.
            // An empty buffer writes nothing, so it is a lone fdatasync.
            if *written < buf.len() {
                let entry = self.write_entry(fd, *offset, buf, *written, *fixed, libc::RWF_DSYNC);
                self.push_op_entry(&entry.user_data(slot as u64));
                round.awaiting += 1;
                return;
            }
            round.dsync = false;
        }
        if *written < buf.len() {
            let linked = buf.len() - *written <= IO_CHUNK_BYTES_MAX;
            let mut entry = self.write_entry(fd, *offset, buf, *written, *fixed, 0);
            if linked {
                entry = entry.flags(squeue::Flags::IO_LINK);
            }
            // The linked pair is pushed back to back, so no other entry can
            // slip between the write and its sync.
            self.push_op_entry(&entry.user_data(slot as u64));
            round.awaiting += 1;
            if !linked {
                return;
            }
        }
        let sync = opcode::Fsync::new(fd)
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(slot as u64 | SYNC_PART_BIT);
        self.push_op_entry(&sync);
        round.awaiting += 1;
    }

    /// Pushes one entry of an operation, counting it in flight.
    fn push_op_entry(&mut self, entry: &squeue::Entry) {
        self.in_flight += 1;
        self.push(entry);
    }

    /// The fixed-buffer slot `buf` may use: only if this ring's slot holds
    /// exactly this buffer's memory. A buffer whose slot was since given to
    /// another buffer falls back to a plain write. Decided once per write.
    fn fixed_slot(&self, buf: &IoBuf) -> Option<u16> {
        let slot = buf.registered_index()?;
        let held = *self.registered.get(usize::from(slot))?;
        (held == Some((buf.as_ptr() as usize, buf.capacity()))).then_some(slot)
    }

    /// The next entry for an operation, from where it has got to.
    fn entry(&self, op: &mut Op, slot: usize) -> squeue::Entry {
        let fd = types::Fd(op.file.as_raw_fd());
        let entry = match &mut op.kind {
            OpKind::Write {
                offset,
                buf,
                written,
                fixed,
                ..
            } => self.write_entry(fd, *offset, buf, *written, *fixed, 0),
            OpKind::Read {
                offset,
                target,
                len,
                filled,
                ..
            } => {
                let rest = &mut target.as_mut_slice()[*filled..*len];
                let chunk = rest.len().min(IO_CHUNK_BYTES_MAX) as u32;
                opcode::Read::new(fd, rest.as_mut_ptr(), chunk)
                    .offset(*offset + *filled as u64)
                    .build()
            }
            OpKind::Sync { .. } => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            OpKind::Fallocate { offset, len, .. } => {
                opcode::Fallocate::new(fd, *len).offset(*offset).build()
            }
            OpKind::Truncate { len, .. } => opcode::Ftruncate::new(fd, *len).build(),
            OpKind::WriteSync { .. } => {
                unreachable!("write-and-sync entries are built by queue_write_sync")
            }
        };
        entry.user_data(slot as u64)
    }

    /// A write entry for `buf[written..]` (at most one chunk), from the
    /// fixed-buffer slot when the write has one, with `rw_flags` (0, or
    /// `RWF_DSYNC`).
    fn write_entry(
        &self,
        fd: types::Fd,
        offset: u64,
        buf: &IoBuf,
        written: usize,
        fixed: Option<u16>,
        rw_flags: i32,
    ) -> squeue::Entry {
        let rest = &buf[written..];
        let len = rest.len().min(IO_CHUNK_BYTES_MAX) as u32;
        let at = offset + written as u64;
        match fixed {
            Some(index) => {
                self.fixed_writes.fetch_add(1, Ordering::Relaxed);
                opcode::WriteFixed::new(fd, rest.as_ptr(), len, index)
                    .offset(at)
                    .rw_flags(rw_flags)
                    .build()
            }
            None => opcode::Write::new(fd, rest.as_ptr(), len)
                .offset(at)
                .rw_flags(rw_flags)
                .build(),
        }
    }

    /// Handles a completion: continues a short transfer, or completes the
    /// operation with the kernel's result and frees its slot.
    fn finish(&mut self, token: u64, result: i32) {
        let sync_part = token & SYNC_PART_BIT != 0;
        let slot = usize::try_from(token & !SYNC_PART_BIT).unwrap_or(usize::MAX);
        let Some(mut op) = self.slots.get_mut(slot).and_then(Option::take) else {
            panic!("io_uring completion for unknown operation {token}");
        };
        self.in_flight -= 1;
        let outcome = if let OpKind::WriteSync {
            buf,
            written,
            round,
            ..
        } = &mut op.kind
        {
            assert!(round.awaiting > 0, "completion for a settled round");
            round.awaiting -= 1;
            if sync_part {
                round.sync = Some(result);
            } else {
                round.write = Some(result);
            }
            if round.awaiting > 0 {
                self.slots[slot] = Some(op);
                return;
            }
            settle(*round, buf.len(), written)
        } else if advance(&mut op, result) {
            Settled::Again
        } else {
            Settled::Done(result)
        };
        match outcome {
            Settled::Again => {
                self.queue(&mut op, slot);
                self.slots[slot] = Some(op);
            }
            Settled::Done(result) | Settled::SyncFailed(result) => {
                self.free_slots.push(slot);
                if let OpKind::Write {
                    fixed: Some(index), ..
                }
                | OpKind::WriteSync {
                    fixed: Some(index), ..
                } = op.kind
                {
                    self.fixed_busy[usize::from(index)] -= 1;
                }
                let sync_failed = matches!(outcome, Settled::SyncFailed(_));
                complete(op, result, sync_failed);
            }
        }
    }

    /// Fills fixed-buffer slots on this ring.
    fn register(&mut self, buffers: &[(u16, usize, usize)]) -> io::Result<()> {
        if !self.features.fixed_buffers {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this ring has no fixed-buffer table",
            ));
        }
        for &(slot, address, len) in buffers {
            // Forget the old occupant first: if the update fails, the slot
            // must not be trusted for either buffer.
            self.registered[usize::from(slot)] = None;
            let iovec = libc::iovec {
                iov_base: address as *mut libc::c_void,
                iov_len: len,
            };
            // SAFETY: the kernel pins the pages behind [address, address +
            // len), taking its own references, so they stay valid for it
            // however long the slot lives, even after the caller frees the
            // `IoBuf`. We only ever *write from* fixed buffers (never
            // ReadFixed), so the kernel never stores into that memory; and
            // `fixed_slot` uses a slot only for a buffer at exactly this
            // address and length, so a freed buffer's slot is not used by
            // another one by accident. No write in flight uses this slot
            // (`register_parked` waits for that), so none can be redirected.
            unsafe {
                self.ring
                    .submitter()
                    .register_buffers_update(u32::from(slot), &[iovec], None)?;
            }
            self.registered[usize::from(slot)] = Some((address, len));
        }
        Ok(())
    }
}

/// Moves an operation on after a completion. Returns whether it needs another
/// entry (a short transfer, or an interrupted one).
fn advance(op: &mut Op, result: i32) -> bool {
    let retry = matches!(-result, libc::EINTR | libc::EAGAIN);
    match &mut op.kind {
        OpKind::Write { buf, written, .. } => match usize::try_from(result) {
            Ok(0) => false,
            Ok(count) => {
                *written += count;
                assert!(*written <= buf.len(), "kernel wrote past the buffer");
                *written < buf.len()
            }
            Err(_) => retry,
        },
        OpKind::Read { len, filled, .. } => match usize::try_from(result) {
            Ok(0) => false,
            Ok(count) => {
                *filled += count;
                assert!(*filled <= *len, "kernel read past the buffer");
                *filled < *len
            }
            Err(_) => retry,
        },
        // A failed fdatasync is never retried: the kernel may already have
        // dropped the dirty pages, so a later success would prove nothing.
        OpKind::Sync { .. } | OpKind::Fallocate { .. } | OpKind::Truncate { .. } => false,
        OpKind::WriteSync { .. } => unreachable!("write-and-sync rounds are settled by `settle`"),
    }
}

/// Completes a finished operation with the kernel's result.
/// Completes `op` with the kernel's `result`; `sync_failed` marks a
/// write-and-sync whose fdatasync part failed.
fn complete(op: Op, result: i32, sync_failed: bool) {
    let error = (result < 0).then(|| {
        let error = io::Error::from_raw_os_error(-result);
        if sync_failed {
            crate::sync_failed(error)
        } else {
            error
        }
    });
    match op.kind {
        OpKind::Write {
            buf, written, done, ..
        }
        | OpKind::WriteSync {
            buf, written, done, ..
        } => done.complete(match error {
            Some(error) => Err(error),
            None if written < buf.len() => Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "write made no progress after {written} of {} bytes",
                    buf.len()
                ),
            )),
            None => Ok(buf),
        }),
        OpKind::Read {
            target,
            filled,
            done,
            ..
        } => done.complete(match error {
            Some(error) => Err(error),
            None => Ok(target.into_vec(filled)),
        }),
        OpKind::Sync { done } | OpKind::Fallocate { done, .. } | OpKind::Truncate { done, .. } => {
            done.complete(error.map_or(Ok(()), Err));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Only reached with operations in flight if the thread is unwinding.
        // The kernel may still write into their buffers, so leak the memory
        // rather than free it; drop the senders so callers get an error.
        for op in self.slots.drain(..).flatten() {
            match op.kind {
                OpKind::Write { buf, done, .. } | OpKind::WriteSync { buf, done, .. } => {
                    std::mem::forget(buf);
                    drop(done);
                }
                OpKind::Read { target, done, .. } => {
                    std::mem::forget(target);
                    drop(done);
                }
                OpKind::Sync { .. } | OpKind::Fallocate { .. } | OpKind::Truncate { .. } => {}
            }
        }
    }
}

impl Disk for UringDisk {
    fn kind(&self) -> BackendKind {
        BackendKind::IoUring
    }

    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<FileHandle> {
        let file = open_std(path, options)?;
        let worker =
            self.shared.next_worker.fetch_add(1, Ordering::Relaxed) % self.shared.workers.len();
        Ok(FileHandle::new(Arc::new(UringFile {
            disk: self.clone(),
            worker,
            file: Arc::new(file),
            path: path.to_path_buf(),
            direct_io: options.direct_io,
        })))
    }

    std_namespace_ops!();

    /// Registers the buffers on every ring. When the kernel cannot or will
    /// not (no sparse tables, locked-memory limit), the buffers stay
    /// unregistered, a warning says why, and this still returns `Ok`: writes
    /// from them work the same, only without the fixed-buffer saving.
    ///
    /// # Errors
    /// `InvalidInput` for more buffers than [`REGISTERED_BUFFERS_MAX`].
    fn register_buffers(&self, buffers: &mut [IoBuf]) -> io::Result<()> {
        if buffers.len() > usize::from(REGISTERED_BUFFERS_MAX) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} buffers exceed the {REGISTERED_BUFFERS_MAX} fixed-buffer slots",
                    buffers.len()
                ),
            ));
        }
        for buf in buffers.iter_mut() {
            buf.set_registered_index(None);
        }
        if !self.shared.buffers_supported || buffers.is_empty() {
            return Ok(());
        }
        let slots = self.reserve_slots(buffers.len());
        let table: Vec<(u16, usize, usize)> = slots
            .iter()
            .zip(buffers.iter())
            .map(|(&slot, buf)| (slot, buf.as_ptr() as usize, buf.capacity()))
            .collect();
        let pending: Vec<Completion<()>> = (0..self.shared.workers.len())
            .map(|worker| {
                let (done, completion) = Completion::channel();
                let buffers = table.clone();
                self.send(worker, Request::Register { buffers, done });
                completion
            })
            .collect();
        let mut outcome = Ok(());
        for completion in pending {
            if let Err(error) = completion.wait() {
                outcome = Err(error);
            }
        }
        match outcome {
            Ok(()) => {
                for (buf, slot) in buffers.iter_mut().zip(slots) {
                    buf.set_registered_index(Some(slot));
                }
            }
            Err(error) => tracing::warn!(
                %error,
                "registering I/O buffers with io_uring failed: writes use unregistered buffers"
            ),
        }
        Ok(())
    }
}

/// An open file served by one storage thread, so its operations reach the
/// kernel in the order they were issued.
#[derive(Debug)]
struct UringFile {
    disk: UringDisk,
    worker: usize,
    file: Arc<fs::File>,
    path: PathBuf,
    direct_io: bool,
}

impl UringFile {
    fn submit<T>(&self, kind: OpKind, completion: Completion<T>) -> Completion<T> {
        let op = Op {
            file: Arc::clone(&self.file),
            kind,
        };
        self.disk.send(self.worker, Request::Op(op));
        completion
    }

    /// Reads `len` bytes at `offset` into `target`: from the page cache on
    /// this thread when it holds them all, else through the ring.
    fn read_into_target(
        &self,
        offset: u64,
        len: usize,
        mut target: ReadTarget,
    ) -> Completion<Vec<u8>> {
        let (filled, finished) = self.read_cached(offset, &mut target.as_mut_slice()[..len]);
        if finished {
            self.disk
                .shared
                .cached_reads
                .fetch_add(1, Ordering::Relaxed);
            return Completion::ready(Ok(target.into_vec(filled)));
        }
        let (done, completion) = Completion::channel();
        let kind = OpKind::Read {
            offset,
            target,
            len,
            filled,
            done,
        };
        self.submit(kind, completion)
    }

    /// Reads into `target` what the page cache holds, on this thread.
    /// Returns the bytes read and whether the read is finished: every byte,
    /// or the end of the file. Like a read through the ring, it sees a write
    /// once that write has completed.
    fn read_cached(&self, offset: u64, target: &mut [u8]) -> (usize, bool) {
        let shared = &self.disk.shared;
        if self.direct_io || !shared.cached_reads_supported.load(Ordering::Relaxed) {
            return (0, false);
        }
        let mut filled = 0;
        while filled < target.len() {
            let rest = &mut target[filled..];
            let Ok(at) = libc::off_t::try_from(offset + filled as u64) else {
                break;
            };
            let iov = libc::iovec {
                iov_base: rest.as_mut_ptr().cast(),
                iov_len: rest.len(),
            };
            // SAFETY: the one iovec points at `rest`, memory this call
            // borrows mutably, and the kernel writes at most `iov_len` bytes
            // into it before returning. The descriptor is kept open by
            // `self.file`.
            let read =
                unsafe { libc::preadv2(self.file.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
            match usize::try_from(read) {
                Ok(0) => return (filled, true),
                Ok(count) => filled += count.min(rest.len()),
                Err(_) => match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR) => {}
                    // Not cached (`EAGAIN`): the ring reads the rest.
                    Some(libc::EOPNOTSUPP | libc::EINVAL) => {
                        shared
                            .cached_reads_supported
                            .store(false, Ordering::Relaxed);
                        break;
                    }
                    // Anything else: the ring's own read reports it.
                    _ => break,
                },
            }
        }
        (filled, filled == target.len())
    }
}

impl DiskFile for UringFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn write_at(&self, offset: u64, buf: IoBuf) -> Completion<IoBuf> {
        let (done, completion) = Completion::channel();
        let kind = OpKind::Write {
            offset,
            buf,
            written: 0,
            fixed: None,
            done,
        };
        self.submit(kind, completion)
    }

    fn read_at(&self, offset: u64, len: usize) -> Completion<Vec<u8>> {
        // O_DIRECT needs an aligned destination address.
        self.read_into_target(offset, len, ReadTarget::new(len, self.direct_io))
    }

    fn read_at_into(&self, offset: u64, len: usize, mut buf: Vec<u8>) -> Completion<Vec<u8>> {
        if self.direct_io {
            return self.read_at(offset, len);
        }
        buf.clear();
        buf.resize(len, 0);
        self.read_into_target(offset, len, ReadTarget::Plain(buf))
    }

    fn fdatasync(&self) -> Completion<()> {
        let (done, completion) = Completion::channel();
        self.submit(OpKind::Sync { done }, completion)
    }

    /// One request to the storage thread, which submits the write linked
    /// (`IO_LINK`) to an fdatasync in one `io_uring_enter`; or, for an
    /// `O_DIRECT` file under [`DirectSync::DsyncWrite`], one write with
    /// `RWF_DSYNC`.
    fn write_and_sync(&self, offset: u64, buf: IoBuf) -> Completion<IoBuf> {
        let (done, completion) = Completion::channel();
        let dsync = self.direct_io && self.disk.shared.direct_sync == DirectSync::DsyncWrite;
        let kind = OpKind::WriteSync {
            offset,
            buf,
            written: 0,
            fixed: None,
            round: SyncRound::default(),
            dsync,
            done,
        };
        self.submit(kind, completion)
    }

    /// On the calling thread, past the ring: a caller that waits anyway
    /// saves the two hand-offs through the storage thread.
    fn write_now(&self, offset: u64, buf: IoBuf) -> io::Result<IoBuf> {
        std::os::unix::fs::FileExt::write_all_at(&*self.file, &buf, offset)?;
        Ok(buf)
    }

    fn write_and_sync_now(&self, offset: u64, buf: IoBuf) -> io::Result<IoBuf> {
        crate::portable::write_and_sync_std(&self.file, offset, &buf, self.direct_io)?;
        Ok(buf)
    }

    /// Alone, on the calling thread; while another gathered write-and-sync
    /// runs, through the ring, where the storage thread submits it with
    /// every request queued beside it in one `io_uring_enter`.
    fn write_and_sync_gathered(&self, offset: u64, buf: IoBuf) -> io::Result<IoBuf> {
        let shared = &self.disk.shared;
        if shared.gathering_now.fetch_add(1, Ordering::AcqRel) > 0 {
            shared.gathering_now.fetch_sub(1, Ordering::AcqRel);
            shared.gathered_syncs.fetch_add(1, Ordering::Relaxed);
            return self.write_and_sync(offset, buf).wait();
        }
        let _running = GatheringNow(&shared.gathering_now);
        self.write_and_sync_now(offset, buf)
    }

    fn fallocate(&self, offset: u64, len: u64) -> Completion<()> {
        let (done, completion) = Completion::channel();
        self.submit(OpKind::Fallocate { offset, len, done }, completion)
    }

    fn truncate(&self, len: u64) -> Completion<()> {
        let (done, completion) = Completion::channel();
        self.submit(OpKind::Truncate { len, done }, completion)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-ring disk with fixed buffers, or `None` (the test is skipped)
    /// where the kernel refuses io_uring or sparse buffer tables.
    fn uring_disk(threads: usize) -> Option<UringDisk> {
        match UringDisk::new(threads) {
            Ok(disk) if disk.shared.buffers_supported => Some(disk),
            Ok(_) => {
                eprintln!("SKIPPED: no sparse fixed-buffer tables on this kernel");
                None
            }
            Err(error) if matches!(error.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                eprintln!("SKIPPED: io_uring is unavailable here: {error}");
                None
            }
            Err(error) => panic!("io_uring setup failed: {error}"),
        }
    }

    /// A worker on a ring of its own whose features `adjust` may take away,
    /// and the sender of its request queue; `None` (the test is skipped)
    /// where the kernel refuses io_uring.
    fn lone_worker(
        adjust: impl FnOnce(RingFeatures) -> RingFeatures,
    ) -> Option<(Worker, Sender<Request>)> {
        uring_disk(1)?;
        let (ring, features) = setup_ring(RingOptions::default()).unwrap();
        let (requests, queue) = queue::bounded(8);
        let wake = Arc::new(Wake::new().unwrap());
        let worker = Worker::new(ring, queue, wake, adjust(features), Arc::default()).unwrap();
        Some((worker, requests))
    }

    fn temp_file() -> (tempfile::TempDir, Arc<fs::File>) {
        let dir = tempfile::tempdir().unwrap();
        let file = open_std(&dir.path().join("f"), crate::OpenOptions::CREATE).unwrap();
        (dir, Arc::new(file))
    }

    /// A new file opened through `disk`, in a directory removed on drop.
    fn opened_temp_file(disk: &UringDisk) -> (tempfile::TempDir, FileHandle) {
        let dir = tempfile::tempdir().unwrap();
        let file = disk
            .open(&dir.path().join("f"), crate::OpenOptions::CREATE)
            .unwrap();
        (dir, file)
    }

    fn write_op(file: &Arc<fs::File>, len: usize) -> (Op, Completion<IoBuf>) {
        let (done, completion) = Completion::channel();
        let op = Op {
            file: Arc::clone(file),
            kind: OpKind::Write {
                offset: 0,
                buf: IoBuf::from_slice(&vec![1; len]),
                written: 0,
                fixed: None,
                done,
            },
        };
        (op, completion)
    }

    fn read_op(file: &Arc<fs::File>, len: usize) -> (Op, Completion<Vec<u8>>) {
        let (done, completion) = Completion::channel();
        let op = Op {
            file: Arc::clone(file),
            kind: OpKind::Read {
                offset: 0,
                target: ReadTarget::new(len, false),
                len,
                filled: 0,
                done,
            },
        };
        (op, completion)
    }

    #[test]
    fn short_write_continues_with_the_remainder() {
        let (_dir, file) = temp_file();
        let (mut op, completion) = write_op(&file, 10);
        assert!(advance(&mut op, 4));
        assert!(matches!(op.kind, OpKind::Write { written: 4, .. }));
        assert!(!advance(&mut op, 6));
        complete(op, 6, false);
        assert_eq!(completion.wait().unwrap().len(), 10);
    }

    #[test]
    fn write_that_makes_no_progress_is_an_error() {
        let (_dir, file) = temp_file();
        let (mut op, completion) = write_op(&file, 10);
        assert!(advance(&mut op, 3));
        assert!(!advance(&mut op, 0));
        complete(op, 0, false);
        let error = completion.wait().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::WriteZero);
    }

    #[test]
    fn interrupted_write_is_resubmitted() {
        let (_dir, file) = temp_file();
        let (mut op, _completion) = write_op(&file, 10);
        assert!(advance(&mut op, -libc::EINTR));
    }

    #[test]
    fn failed_write_completes_with_the_kernel_error() {
        let (_dir, file) = temp_file();
        let (mut op, completion) = write_op(&file, 10);
        assert!(!advance(&mut op, -libc::ENOSPC));
        complete(op, -libc::ENOSPC, false);
        let error = completion.wait().unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    }

    #[test]
    fn short_read_continues_until_end_of_file() {
        let (_dir, file) = temp_file();
        let (mut op, completion) = read_op(&file, 10);
        assert!(advance(&mut op, 4));
        assert!(!advance(&mut op, 0));
        complete(op, 0, false);
        assert_eq!(completion.wait().unwrap().len(), 4);
    }

    #[test]
    fn failed_fdatasync_is_never_retried() {
        let (_dir, file) = temp_file();
        let (done, completion) = Completion::channel();
        let mut op = Op {
            file,
            kind: OpKind::Sync { done },
        };
        assert!(!advance(&mut op, -libc::EINTR));
        complete(op, -libc::EIO, false);
        assert_eq!(
            completion.wait().unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
    }

    #[test]
    fn a_write_and_sync_whose_fdatasync_failed_says_so() {
        let (_dir, file) = temp_file();
        let (op, completion) = write_sync_op(&file, b"bytes");
        complete(op, -libc::EIO, true);
        let error = completion.wait().unwrap_err();
        let sync = crate::sync_failure(&error).expect("marked as the fdatasync's");
        assert_eq!(sync.raw_os_error(), Some(libc::EIO));
        let (op, completion) = write_sync_op(&file, b"bytes");
        complete(op, -libc::ENOSPC, false);
        let error = completion.wait().unwrap_err();
        assert!(crate::sync_failure(&error).is_none());
        assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    }

    fn write_sync_op(file: &Arc<fs::File>, bytes: &[u8]) -> (Op, Completion<IoBuf>) {
        let (done, completion) = Completion::channel();
        let op = Op {
            file: Arc::clone(file),
            kind: OpKind::WriteSync {
                offset: 0,
                buf: IoBuf::from_slice(bytes),
                written: 0,
                fixed: None,
                round: SyncRound::default(),
                dsync: false,
                done,
            },
        };
        (op, completion)
    }

    fn round(write: Option<i32>, sync: Option<i32>) -> SyncRound {
        SyncRound {
            awaiting: 0,
            write,
            sync,
            split: false,
            dsync: false,
        }
    }

    fn dsync_round(write: i32) -> SyncRound {
        SyncRound {
            write: Some(write),
            dsync: true,
            ..SyncRound::default()
        }
    }

    #[test]
    fn a_dsync_write_is_done_once_every_byte_is_written() {
        let mut written = 0;
        assert_eq!(
            settle(dsync_round(4096), 4096, &mut written),
            Settled::Done(0)
        );
        assert_eq!(written, 4096);
    }

    #[test]
    fn a_short_dsync_write_continues_with_the_rest() {
        let mut written = 0;
        assert_eq!(settle(dsync_round(512), 4096, &mut written), Settled::Again);
        assert_eq!(written, 512);
        assert_eq!(
            settle(dsync_round(3584), 4096, &mut written),
            Settled::Done(0)
        );
    }

    #[test]
    fn a_failed_dsync_write_counts_as_a_failed_fdatasync_and_is_never_retried() {
        let mut written = 0;
        assert_eq!(
            settle(dsync_round(-libc::EIO), 4096, &mut written),
            Settled::SyncFailed(-libc::EIO)
        );
        assert_eq!(
            settle(dsync_round(-libc::EINTR), 4096, &mut written),
            Settled::Again
        );
        assert_eq!(
            settle(dsync_round(-libc::EINVAL), 4096, &mut written),
            Settled::Done(-libc::EINVAL)
        );
        assert_eq!(settle(dsync_round(0), 4096, &mut written), Settled::Done(0));
    }

    #[test]
    fn linked_write_and_sync_is_done_when_both_succeed() {
        let mut written = 0;
        assert_eq!(
            settle(round(Some(10), Some(0)), 10, &mut written),
            Settled::Done(0)
        );
        assert_eq!(written, 10);
    }

    #[test]
    fn short_linked_write_continues_and_syncs_after_the_last_byte() {
        let mut written = 0;
        let cancelled = round(Some(4), Some(-libc::ECANCELED));
        assert_eq!(settle(cancelled, 10, &mut written), Settled::Again);
        assert_eq!(written, 4);
        assert_eq!(
            settle(round(Some(6), Some(0)), 10, &mut written),
            Settled::Done(0)
        );
    }

    #[test]
    fn short_write_is_never_reported_as_success_even_if_its_sync_succeeded() {
        let mut written = 0;
        assert_eq!(
            settle(round(Some(4), Some(0)), 10, &mut written),
            Settled::Again
        );
    }

    #[test]
    fn failed_sync_of_a_write_and_sync_is_never_retried() {
        let mut written = 0;
        assert_eq!(
            settle(round(Some(10), Some(-libc::EIO)), 10, &mut written),
            Settled::SyncFailed(-libc::EIO)
        );
    }

    #[test]
    fn failed_write_of_a_write_and_sync_is_the_outcome() {
        let mut written = 0;
        let failed = round(Some(-libc::ENOSPC), Some(-libc::ECANCELED));
        assert_eq!(
            settle(failed, 10, &mut written),
            Settled::Done(-libc::ENOSPC)
        );
    }

    #[test]
    fn interrupted_write_of_a_write_and_sync_is_resubmitted() {
        let mut written = 0;
        let interrupted = round(Some(-libc::EINTR), Some(-libc::ECANCELED));
        assert_eq!(settle(interrupted, 10, &mut written), Settled::Again);
        assert_eq!(written, 0);
    }

    #[test]
    fn cancelled_sync_after_a_full_write_runs_again() {
        let mut written = 0;
        let cancelled = round(Some(10), Some(-libc::ECANCELED));
        assert_eq!(settle(cancelled, 10, &mut written), Settled::Again);
        assert_eq!(
            settle(round(None, Some(0)), 10, &mut written),
            Settled::Done(0)
        );
    }

    #[test]
    fn sync_of_a_split_pair_proves_nothing_and_runs_again() {
        let mut written = 0;
        let split = SyncRound {
            split: true,
            dsync: false,
            ..round(Some(10), Some(0))
        };
        assert_eq!(settle(split, 10, &mut written), Settled::Again);
    }

    /// What a kernel may return for one write-and-sync round, chosen by a
    /// seeded generator: the round's results and whether the round was an
    /// ordered, successful sync covering every byte.
    fn kernel_round(state: &mut u64, len: usize, written: usize) -> (SyncRound, bool) {
        let mut next = |bound: u64| {
            *state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (*state >> 33) % bound
        };
        let rest = len - written;
        let cancelled = Some(-libc::ECANCELED);
        if rest == 0 {
            let sync = [0, -libc::EIO][usize::from(next(4) == 0)];
            return (round(None, Some(sync)), sync == 0);
        }
        let split = next(8) == 0;
        let (write, sync) = match next(6) {
            0 => (-libc::EIO, cancelled),
            1 => (-libc::EINTR, cancelled),
            2 if rest > 1 => (next(rest as u64 - 1) as i32 + 1, cancelled),
            3 => (rest as i32, Some(-libc::EIO)),
            _ => (rest as i32, Some(0)),
        };
        let durable = sync == Some(0) && !split;
        (
            SyncRound {
                split,
                ..round(Some(write), sync)
            },
            durable,
        )
    }

    #[test]
    fn write_and_sync_is_ok_only_after_an_ordered_sync_of_every_byte() {
        for seed in 0..2_000u64 {
            let mut state = seed;
            let len = 1 + (seed as usize % 9) * 512;
            let mut written = 0;
            let mut rounds = 0;
            let outcome = loop {
                rounds += 1;
                assert!(rounds < 1_000, "seed {seed}: no end");
                let before = written;
                let (kernel, durable) = kernel_round(&mut state, len, written);
                match settle(kernel, len, &mut written) {
                    Settled::Again => {
                        assert!(
                            !matches!(kernel.sync, Some(result) if result < 0 && result != -libc::ECANCELED),
                            "seed {seed}: a failed fdatasync was retried"
                        );
                    }
                    Settled::Done(0) => {
                        assert!(durable, "seed {seed}: Ok without an ordered sync");
                        assert_eq!(written, len, "seed {seed}: Ok for a partial write");
                        break 0;
                    }
                    Settled::Done(error) | Settled::SyncFailed(error) => {
                        assert!(error < 0 && error != -libc::ECANCELED, "seed {seed}");
                        assert!(written <= len && written >= before, "seed {seed}");
                        break error;
                    }
                }
            };
            assert!(
                outcome == 0 || outcome == -libc::EIO,
                "seed {seed}: {outcome}"
            );
        }
    }

    #[test]
    fn write_and_sync_that_makes_no_progress_is_write_zero() {
        let (_dir, file) = temp_file();
        let (mut op, completion) = write_sync_op(&file, b"0123456789");
        let OpKind::WriteSync { written, .. } = &mut op.kind else {
            unreachable!()
        };
        assert_eq!(
            settle(round(Some(0), Some(-libc::ECANCELED)), 10, written),
            Settled::Done(0)
        );
        complete(op, 0, false);
        let error = completion.wait().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::WriteZero);
    }

    fn round_of(worker: &Worker, slot: usize) -> SyncRound {
        match &worker.slots[slot] {
            Some(Op {
                kind: OpKind::WriteSync { round, .. },
                ..
            }) => *round,
            _ => panic!("slot {slot} holds no write-and-sync"),
        }
    }

    /// Submits and reaps until nothing of `worker` is in flight.
    fn drive(worker: &mut Worker) {
        while worker.in_flight > 0 {
            worker.submit_and_wait();
            worker.reap();
        }
    }

    #[test]
    fn write_and_sync_pushes_a_linked_pair_and_completes_once_both_finish() {
        let Some((mut worker, requests)) = lone_worker(|features| features) else {
            return;
        };
        let (_dir, file) = temp_file();
        let (op, completion) = write_sync_op(&file, b"linked");
        assert!(requests.send(Request::Op(op)).is_ok());
        worker.take_requests();
        assert_eq!(worker.in_flight, 2, "a write and its fdatasync");
        assert_eq!(worker.unsubmitted, [0, SYNC_PART_BIT]);
        drive(&mut worker);
        assert_eq!(&completion.wait().unwrap()[..], b"linked");
        assert_eq!(file.metadata().unwrap().len(), 6);
    }

    #[test]
    fn write_and_syncs_of_two_files_go_in_one_submission_and_fail_apart() {
        let Some((mut worker, requests)) = lone_worker(|features| features) else {
            return;
        };
        let (dir, file) = temp_file();
        let (other_dir, writable) = temp_file();
        // Opened read-only: its write fails (EBADF), as a torn or failed
        // device write would fail one partition's commit.
        let read_only = Arc::new(fs::File::open(other_dir.path().join("f")).unwrap());
        let (good, good_done) = write_sync_op(&file, b"first log");
        let (bad, bad_done) = write_sync_op(&read_only, b"second log");
        assert!(requests.send(Request::Op(good)).is_ok());
        assert!(requests.send(Request::Op(bad)).is_ok());
        worker.take_requests();
        assert_eq!(worker.in_flight, 4, "two writes, each linked to its sync");
        assert_eq!(worker.unsubmitted, [0, SYNC_PART_BIT, 1, 1 | SYNC_PART_BIT]);
        worker.submit_and_wait();
        assert!(
            worker.unsubmitted.is_empty(),
            "one io_uring_enter took both pairs"
        );
        worker.reap();
        drive(&mut worker);
        assert_eq!(&good_done.wait().unwrap()[..], b"first log");
        assert_eq!(fs::read(dir.path().join("f")).unwrap(), b"first log");
        let error = bad_done.wait().unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EBADF));
        assert!(
            crate::sync_failure(&error).is_none(),
            "the write failed, so its sync never ran"
        );
        assert_eq!(writable.metadata().unwrap().len(), 0);
    }

    #[test]
    fn a_gathered_write_and_sync_goes_to_the_ring_only_beside_another() {
        let Some(disk) = uring_disk(1) else { return };
        let (_dir, file) = opened_temp_file(&disk);
        file.write_and_sync_gathered(0, IoBuf::from_slice(b"alone"))
            .unwrap();
        assert_eq!(disk.gathered_syncs(), 0, "a lone one runs on its thread");
        // As if another log's commit were syncing on its own thread now.
        disk.shared.gathering_now.fetch_add(1, Ordering::AcqRel);
        file.write_and_sync_gathered(5, IoBuf::from_slice(b"beside"))
            .unwrap();
        disk.shared.gathering_now.fetch_sub(1, Ordering::AcqRel);
        assert_eq!(disk.gathered_syncs(), 1);
        assert_eq!(file.read_at(0, 11).wait().unwrap(), b"alonebeside");
        assert_eq!(disk.shared.gathering_now.load(Ordering::Acquire), 0);
    }

    #[test]
    fn linked_pair_the_kernel_took_half_of_is_synced_again() {
        let Some((mut worker, requests)) = lone_worker(|features| features) else {
            return;
        };
        let (_dir, file) = temp_file();
        let (op, completion) = write_sync_op(&file, b"split");
        assert!(requests.send(Request::Op(op)).is_ok());
        worker.take_requests();
        // As if io_uring_enter had taken only the write.
        worker.submitted(1);
        assert!(round_of(&worker, 0).split);
        // Both entries really reach the kernel now; once both are back the
        // round settles and a fresh one (a lone fdatasync) starts.
        while round_of(&worker, 0).split {
            worker.submit_and_wait();
            worker.reap();
        }
        assert_eq!(worker.in_flight, 1, "one more fdatasync was queued");
        assert_eq!(round_of(&worker, 0).awaiting, 1);
        drive(&mut worker);
        assert_eq!(&completion.wait().unwrap()[..], b"split");
    }

    #[test]
    fn a_read_of_cached_pages_is_answered_without_the_ring() {
        let Some(disk) = uring_disk(1) else { return };
        let (_dir, file) = opened_temp_file(&disk);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        file.write_at(0, IoBuf::from_slice(&data)).wait().unwrap();
        assert_eq!(file.read_at(100, 5_000).wait().unwrap(), &data[100..5_100]);
        assert_eq!(disk.cached_reads(), 1);
        // Past the end: the bytes there are, and the read is still finished.
        assert_eq!(file.read_at(9_000, 4_096).wait().unwrap(), &data[9_000..]);
        assert_eq!(disk.cached_reads(), 2);
    }

    #[test]
    fn a_read_into_a_reused_buffer_returns_only_the_bytes_read_in_its_memory() {
        let Some(disk) = uring_disk(1) else { return };
        let (_dir, file) = opened_temp_file(&disk);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        file.write_at(0, IoBuf::from_slice(&data)).wait().unwrap();
        let old = vec![0xee; 20_000];
        let memory = old.as_ptr();
        let read = file.read_at_into(100, 5_000, old).wait().unwrap();
        assert_eq!(read, &data[100..5_100]);
        assert_eq!(read.as_ptr(), memory, "the buffer given was read into");
        // Past the end: only the bytes there are, none of the old content.
        let read = file.read_at_into(9_000, 4_096, read).wait().unwrap();
        assert_eq!(read, &data[9_000..]);
    }

    /// Asks the kernel to drop `file`'s clean pages, a few times, and says
    /// whether none of its first `len` bytes is resident afterwards (read
    /// with `mincore` on a mapping, which faults nothing in).
    fn drop_cached_pages(file: &fs::File, len: usize) -> bool {
        let fd = file.as_raw_fd();
        for _ in 0..20 {
            // SAFETY: a plain advisory call on a descriptor `file` keeps open.
            let advised = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(advised, 0);
            if resident_pages(fd, len) == 0 {
                return true;
            }
            thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    /// How many of the pages backing the first `len` bytes of `fd` are in
    /// the page cache.
    fn resident_pages(fd: std::os::fd::RawFd, len: usize) -> usize {
        // SAFETY: a read-only shared mapping of an open file, unmapped below;
        // nothing reads through it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED, "mmap for mincore");
        // SAFETY: sysconf reads a constant of the running system.
        let page_bytes = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap();
        let pages = len.div_ceil(page_bytes);
        let mut vector = vec![0u8; pages];
        // SAFETY: `map` spans `len` bytes and `vector` has a byte per page.
        let status = unsafe { libc::mincore(map, len, vector.as_mut_ptr()) };
        // SAFETY: `map` and `len` are the mapping made above.
        unsafe { libc::munmap(map, len) };
        assert_eq!(status, 0, "mincore");
        vector.iter().filter(|&&byte| byte & 1 == 1).count()
    }

    #[test]
    #[ignore = "kernel-dependent: a RWF_NOWAIT read of pages not cached may start readahead and, on a fast disk, return the data itself; it failed in CI runs under load"]
    fn a_read_of_pages_not_cached_goes_through_the_ring() {
        let Some(disk) = uring_disk(1) else { return };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..65_536u32).map(|i| (i % 249) as u8).collect();
        fs::write(&path, &data).unwrap();
        let std_file = fs::File::open(&path).unwrap();
        std_file.sync_all().unwrap();
        if !drop_cached_pages(&std_file, data.len()) {
            // The premise is the kernel's to grant: a busy machine may keep
            // the pages. Nothing about the ring can be checked then.
            eprintln!("the kernel kept the file's pages cached; nothing to check");
            return;
        }
        let file = disk.open(&path, crate::OpenOptions::EXISTING).unwrap();
        assert_eq!(file.read_at(0, data.len()).wait().unwrap(), data);
        assert_eq!(
            disk.cached_reads(),
            0,
            "clean pages were dropped, so the ring read them"
        );
    }

    #[test]
    fn registered_buffers_are_written_with_write_fixed() {
        let Some(disk) = uring_disk(1) else { return };
        let (_dir, file) = opened_temp_file(&disk);
        let mut buffers = [IoBuf::with_capacity(8192)];
        disk.register_buffers(&mut buffers).unwrap();
        let [mut buf] = buffers;
        buf.extend_from_slice(b"fixed");
        file.write_at(0, buf).wait().unwrap();
        assert_eq!(disk.fixed_writes(), 1);
        file.write_at(5, IoBuf::from_slice(b"plain"))
            .wait()
            .unwrap();
        assert_eq!(disk.fixed_writes(), 1);
        assert_eq!(file.read_at(0, 10).wait().unwrap(), b"fixedplain");
    }

    #[test]
    fn a_buffer_whose_slot_was_reused_falls_back_to_a_plain_write() {
        let Some(disk) = uring_disk(1) else { return };
        let (_dir, file) = opened_temp_file(&disk);
        let mut first = [IoBuf::with_capacity(4096)];
        disk.register_buffers(&mut first).unwrap();
        let mut filler: Vec<IoBuf> = (0..REGISTERED_BUFFERS_MAX)
            .map(|_| IoBuf::with_capacity(4096))
            .collect();
        disk.register_buffers(&mut filler).unwrap();
        let [mut stale] = first;
        stale.extend_from_slice(b"stale");
        file.write_at(0, stale).wait().unwrap();
        assert_eq!(disk.fixed_writes(), 0);
        assert_eq!(file.read_at(0, 5).wait().unwrap(), b"stale");
    }

    #[test]
    fn registration_waits_for_writes_using_its_slot_and_holds_back_later_requests() {
        let Some((mut worker, requests)) = lone_worker(|features| features) else {
            return;
        };
        let buf = IoBuf::with_capacity(4096);
        worker.fixed_busy[3] = 1;
        let (done, registered) = Completion::channel();
        let buffers = vec![(3, buf.as_ptr() as usize, buf.capacity())];
        assert!(requests.send(Request::Register { buffers, done }).is_ok());
        let (_dir, file) = temp_file();
        let (sync_done, _synced) = Completion::channel();
        let sync = Op {
            file,
            kind: OpKind::Sync { done: sync_done },
        };
        assert!(requests.send(Request::Op(sync)).is_ok());
        worker.take_requests();
        assert!(worker.parked.is_some());
        assert_eq!(
            worker.in_flight, 0,
            "a request behind the registration started"
        );
        worker.fixed_busy[3] = 0;
        worker.take_requests();
        assert!(worker.parked.is_none());
        registered.wait().unwrap();
        assert_eq!(worker.in_flight, 1);
        assert_eq!(
            worker.registered[3],
            Some((buf.as_ptr() as usize, buf.capacity()))
        );
        worker.ring.submit_and_wait(1).unwrap();
        worker.reap();
        assert_eq!(worker.in_flight, 0);
    }

    #[test]
    fn truncate_runs_on_the_thread_when_the_ring_cannot() {
        let no_ftruncate = |features| RingFeatures {
            ftruncate: false,
            ..features
        };
        let Some((mut worker, requests)) = lone_worker(no_ftruncate) else {
            return;
        };
        let (_dir, file) = temp_file();
        let (done, truncated) = Completion::channel();
        let truncate = Op {
            file: Arc::clone(&file),
            kind: OpKind::Truncate { len: 12345, done },
        };
        assert!(requests.send(Request::Op(truncate)).is_ok());
        worker.take_requests();
        assert_eq!(worker.in_flight, 0, "the truncate went to the ring");
        truncated.wait().unwrap();
        assert_eq!(file.metadata().unwrap().len(), 12345);
    }

    #[test]
    fn too_many_buffers_are_refused() {
        let Some(disk) = uring_disk(1) else { return };
        let mut buffers: Vec<IoBuf> = (0..=REGISTERED_BUFFERS_MAX)
            .map(|_| IoBuf::with_capacity(4096))
            .collect();
        let error = disk.register_buffers(&mut buffers).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn several_rings_serve_files_round_robin() {
        let Some(disk) = uring_disk(2) else { return };
        let dir = tempfile::tempdir().unwrap();
        let mut buffers = [IoBuf::with_capacity(4096), IoBuf::with_capacity(4096)];
        disk.register_buffers(&mut buffers).unwrap();
        for (index, mut buf) in buffers.into_iter().enumerate() {
            let file = disk
                .open(
                    &dir.path().join(format!("f{index}")),
                    crate::OpenOptions::CREATE,
                )
                .unwrap();
            buf.extend_from_slice(b"ring");
            file.write_at(0, buf).wait().unwrap();
            file.fdatasync().wait().unwrap();
            assert_eq!(file.read_at(0, 4).wait().unwrap(), b"ring");
        }
        assert_eq!(disk.fixed_writes(), 2);
    }
}
