//! Disk faults on the append path (simulated disk): a write or fdatasync
//! error fails the flush and latches the log until it is reopened.

// Test helpers outside `#[test]` functions unwrap too: a failure is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{payload, prealloc_options, read_all, small_options};
use narad_disk::sim::{Fault, FaultError, FaultOp, SimDisk};
use narad_wal::{FailedOp, Wal, WalError, WalOptions};

fn dir() -> PathBuf {
    PathBuf::from("/faults/wal")
}

fn open(disk: &SimDisk, options: WalOptions) -> Wal {
    Wal::open(Arc::new(disk.clone()), dir(), options).unwrap()
}

fn fault(op: FaultOp, error: FaultError) -> Fault {
    Fault {
        op,
        nth: 0,
        error,
        sticky: false,
    }
}

/// Appends two records, arms `fault`, appends a third, and checks the
/// third fails with `errno` from `failed_op`, the log latches, and a later
/// append fails with the same error without touching the disk.
fn latches_on(op: FaultOp, error: FaultError, errno: i32, failed_op: FailedOp) {
    let disk = SimDisk::new(11);
    let wal = open(&disk, small_options());
    wal.append(b"one").unwrap().wait().unwrap();
    wal.append(b"two").unwrap().wait().unwrap();
    disk.inject(fault(op, error));
    let failure = match wal.append(b"three").unwrap().wait() {
        Err(WalError::Failed(failure)) => failure,
        other => panic!("expected a latched failure, got {other:?}"),
    };
    assert_eq!(failure.raw_os_error, Some(errno));
    assert_eq!(failure.op, failed_op);
    assert!(wal.is_failed());
    let ops = disk.op_count();
    match wal.append(b"four") {
        Err(WalError::Failed(later)) => assert_eq!(later, failure),
        other => panic!("expected the latch, got {other:?}"),
    }
    assert_eq!(disk.op_count(), ops, "a latched log does no I/O");
    assert_eq!(wal.failure(), Some(failure));
}

#[test]
fn a_panicking_flush_latches_the_log_and_is_counted() {
    for inline_flush in [false, true] {
        let disk = SimDisk::new(12);
        let wal = open(
            &disk,
            WalOptions {
                inline_flush,
                ..small_options()
            },
        );
        wal.append(b"one").unwrap().wait().unwrap();
        disk.inject(fault(FaultOp::Write, FaultError::Panic));
        let failure = match wal.append(b"two").unwrap().wait() {
            Err(WalError::Failed(failure)) => failure,
            other => panic!("expected a latched failure, got {other:?}"),
        };
        assert_eq!(failure.op, FailedOp::SyncLoop);
        assert!(wal.is_failed());
        assert_eq!(wal.worker_panics().flush, 1);
        assert!(matches!(wal.append(b"three"), Err(WalError::Failed(_))));
        // The acknowledged record is still there; the sync loop lived on
        // and closes.
        assert_eq!(read_all(&wal, 0).len(), 1);
        wal.close();
    }
}

#[test]
fn an_eio_on_write_fails_the_flush_and_latches() {
    latches_on(FaultOp::Write, FaultError::Eio, libc::EIO, FailedOp::Write);
}

#[test]
fn an_enospc_on_write_fails_the_flush_and_latches() {
    latches_on(
        FaultOp::Write,
        FaultError::Enospc,
        libc::ENOSPC,
        FailedOp::Write,
    );
}

#[test]
fn an_eio_on_fdatasync_fails_the_flush_and_latches() {
    latches_on(FaultOp::Sync, FaultError::Eio, libc::EIO, FailedOp::Sync);
}

#[test]
fn an_enospc_on_fdatasync_fails_the_flush_and_latches() {
    latches_on(
        FaultOp::Sync,
        FaultError::Enospc,
        libc::ENOSPC,
        FailedOp::Sync,
    );
}

#[test]
fn every_waiter_staged_with_or_after_a_failed_flush_gets_the_error() {
    let disk = SimDisk::new(12);
    let wal = open(&disk, small_options());
    disk.inject(Fault {
        sticky: true,
        ..fault(FaultOp::Write, FaultError::Eio)
    });
    let pending: Vec<_> = (0..5u64)
        .filter_map(|i| wal.append(&payload(i, 100)).ok())
        .collect();
    assert!(!pending.is_empty());
    for waiter in pending {
        assert!(matches!(waiter.wait(), Err(WalError::Failed(_))));
    }
}

#[test]
fn a_failed_fdatasync_is_never_retried() {
    let disk = SimDisk::new(13);
    let wal = open(&disk, small_options());
    disk.inject(fault(FaultOp::Sync, FaultError::Eio));
    assert!(wal.append(b"x").unwrap().wait().is_err());
    let ops = disk.op_count();
    wal.close();
    assert_eq!(disk.op_count(), ops, "nothing was written or synced again");
}

#[test]
fn acknowledged_records_survive_a_failure_and_reopening_clears_the_latch() {
    let disk = SimDisk::new(14);
    let wal = open(&disk, small_options());
    for i in 0..10u64 {
        wal.append(&payload(i, 300)).unwrap().wait().unwrap();
    }
    disk.inject(fault(FaultOp::Sync, FaultError::Enospc));
    assert!(wal.append(b"refused").unwrap().wait().is_err());
    drop(wal);
    disk.clear_faults();
    let wal = open(&disk, small_options());
    assert!(!wal.is_failed());
    let recovered = read_all(&wal, 0);
    assert!(recovered.len() >= 10);
    for (i, (seq, bytes)) in recovered.iter().take(10).enumerate() {
        assert_eq!((*seq, bytes), (i as u64, &payload(i as u64, 300)));
    }
    let next = recovered.len() as u64;
    assert_eq!(
        wal.append(b"again").unwrap().wait().unwrap(),
        next..next + 1
    );
}

#[test]
fn a_failed_batch_keeps_at_most_a_synced_prefix() {
    let disk = SimDisk::new(15);
    let wal = open(&disk, small_options());
    let payloads: Vec<Vec<u8>> = (0..30).map(|i| payload(i, 1500)).collect();
    let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    disk.inject(Fault {
        nth: 3,
        ..fault(FaultOp::Sync, FaultError::Eio)
    });
    assert!(wal.append_many_slices(&slices).unwrap().wait().is_err());
    drop(wal);
    disk.clear_faults();
    let wal = open(&disk, small_options());
    let recovered = read_all(&wal, 0);
    assert!(!recovered.is_empty() && recovered.len() < 30);
    for (seq, bytes) in recovered {
        assert_eq!(bytes, payloads[seq as usize]);
    }
}

#[test]
fn a_failed_roll_latches_the_log() {
    let disk = SimDisk::new(16);
    let wal = open(&disk, prealloc_options());
    let mut i = 0u64;
    // Fill until a roll has put a prepared segment in place.
    while wal.segment_bases().len() < 2 || !last_segment_is_prepared(&disk, &wal) {
        wal.append(&payload(i, 800)).unwrap().wait().unwrap();
        i += 1;
        assert!(i < 1000, "a prepared segment never became active");
    }
    disk.inject(Fault {
        sticky: true,
        ..fault(FaultOp::Truncate, FaultError::Eio)
    });
    let failure = loop {
        match wal.append(&payload(i, 800)).unwrap().wait() {
            Ok(_) => i += 1,
            Err(WalError::Failed(failure)) => break failure,
            Err(other) => panic!("unexpected {other}"),
        }
    };
    assert_eq!(failure.op, FailedOp::Roll);
    assert!(wal.is_failed());
}

#[test]
fn a_first_segment_that_cannot_be_prepared_starts_empty_and_the_log_works() {
    let disk = SimDisk::new(17);
    disk.inject(fault(FaultOp::Write, FaultError::Enospc));
    let wal = open(&disk, prealloc_options());
    assert!(!last_segment_is_prepared(&disk, &wal));
    wal.append(b"still works").unwrap().wait().unwrap();
    assert_eq!(read_all(&wal, 0), vec![(0, b"still works".to_vec())]);
    assert_eq!(wal.direct_writes(), 0);
    assert!(
        disk.read_file(&dir().join(narad_wal::segment::PREP_FILE_NAME))
            .is_none()
    );
}

fn last_segment_is_prepared(disk: &SimDisk, wal: &Wal) -> bool {
    let last = *wal.segment_bases().last().unwrap();
    let path = narad_wal::segment::segment_path(&dir(), last);
    disk.read_file(&path)
        .is_some_and(|bytes| bytes.len() as u64 == prealloc_options().segment_bytes)
}

/// A disk whose writes panic once armed: stands in for a broken invariant
/// inside the sync loop.
#[derive(Debug)]
struct PanickyDisk {
    inner: SimDisk,
    armed: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Debug)]
struct PanickyFile {
    inner: narad_disk::FileHandle,
    armed: Arc<std::sync::atomic::AtomicBool>,
}

impl narad_disk::Disk for PanickyDisk {
    fn kind(&self) -> narad_disk::BackendKind {
        self.inner.kind()
    }
    fn open(
        &self,
        path: &std::path::Path,
        options: narad_disk::OpenOptions,
    ) -> std::io::Result<narad_disk::FileHandle> {
        let inner = self.inner.open(path, options)?;
        Ok(narad_disk::FileHandle::new(Arc::new(PanickyFile {
            inner,
            armed: Arc::clone(&self.armed),
        })))
    }
    fn create_dir_all(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, path: &std::path::Path) -> std::io::Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &std::path::Path) -> std::io::Result<bool> {
        self.inner.exists(path)
    }
    fn remove_file(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.inner.sync_dir(path)
    }
}

impl narad_disk::DiskFile for PanickyFile {
    fn path(&self) -> &std::path::Path {
        self.inner.path()
    }
    fn size(&self) -> std::io::Result<u64> {
        self.inner.size()
    }
    fn write_at(
        &self,
        offset: u64,
        buf: narad_disk::IoBuf,
    ) -> narad_disk::Completion<narad_disk::IoBuf> {
        assert!(
            !self.armed.load(std::sync::atomic::Ordering::SeqCst),
            "injected panic in write"
        );
        self.inner.write_at(offset, buf)
    }
    fn read_at(&self, offset: u64, len: usize) -> narad_disk::Completion<Vec<u8>> {
        self.inner.read_at(offset, len)
    }
    fn fdatasync(&self) -> narad_disk::Completion<()> {
        self.inner.fdatasync()
    }
    fn fallocate(&self, offset: u64, len: u64) -> narad_disk::Completion<()> {
        self.inner.fallocate(offset, len)
    }
    fn truncate(&self, len: u64) -> narad_disk::Completion<()> {
        self.inner.truncate(len)
    }
}

#[test]
fn a_panicking_flush_fails_its_waiters_instead_of_hanging() {
    // Inline, the flush panics on the appender's thread; otherwise on the
    // sync loop's. Either way the appender gets the latch, not a panic.
    for inline_flush in [true, false] {
        panicking_flush_fails_its_waiters(inline_flush);
    }
}

fn panicking_flush_fails_its_waiters(inline_flush: bool) {
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let disk = PanickyDisk {
        inner: SimDisk::new(17),
        armed: Arc::clone(&armed),
    };
    let options = WalOptions {
        inline_flush,
        ..small_options()
    };
    let wal = Wal::open(Arc::new(disk), dir(), options).unwrap();
    wal.append(b"fine").unwrap().wait().unwrap();
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let failure = match wal.append(b"boom").unwrap().wait() {
        Err(WalError::Failed(failure)) => failure,
        other => panic!("expected the latch, got {other:?}"),
    };
    assert_eq!(failure.op, FailedOp::SyncLoop);
    assert!(wal.is_failed());
    assert!(matches!(wal.append(b"later"), Err(WalError::Failed(_))));
}

#[test]
fn a_partial_write_left_by_enospc_is_cut_at_reopen() {
    for seed in 20..40 {
        let disk = SimDisk::new(seed);
        let wal = open(&disk, small_options());
        for i in 0..5u64 {
            wal.append(&payload(i, 900)).unwrap().wait().unwrap();
        }
        disk.inject(fault(FaultOp::Write, FaultError::Enospc));
        assert!(wal.append(&payload(5, 900)).unwrap().wait().is_err());
        drop(wal);
        disk.clear_faults();
        let wal = open(&disk, small_options());
        let recovered = read_all(&wal, 0);
        // The refused record may survive whole (the disk kept all of it),
        // never in part.
        assert!(matches!(recovered.len(), 5 | 6), "seed {seed}");
        for (seq, bytes) in recovered {
            assert_eq!(bytes, payload(seq, 900));
        }
    }
}
