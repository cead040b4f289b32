//! Shared helpers of the WAL's integration tests: the backends to run
//! against, small options, and a minimal executor for the async API.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use narad_disk::Disk;
use narad_disk::portable::PortableDisk;
use narad_disk::sim::SimDisk;
use narad_disk::uring::UringDisk;
use narad_wal::{Wal, WalOptions};

/// One place a log can live: a disk and a directory on it.
pub struct Backend {
    pub name: &'static str,
    pub disk: Arc<dyn Disk>,
    pub dir: PathBuf,
    /// Keeps a real temporary directory alive.
    _temp: Option<tempfile::TempDir>,
}

impl Backend {
    pub fn open(&self, options: WalOptions) -> Wal {
        Wal::open(Arc::clone(&self.disk), self.dir.clone(), options).unwrap()
    }
}

/// Every backend this machine can run, each with a fresh directory: the
/// portable and io_uring backends on real temporary files, and the
/// simulated disk. io_uring is left out (with a note on stderr) only where
/// the kernel refuses it outright.
pub fn backends() -> Vec<Backend> {
    let mut list = vec![on_real_files(
        "portable",
        Arc::new(PortableDisk::new(2).unwrap()),
    )];
    match UringDisk::new(1) {
        Ok(disk) => list.push(on_real_files("io_uring", Arc::new(disk))),
        Err(error) if matches!(error.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
            eprintln!("SKIPPED io_uring backend: {error}");
        }
        Err(error) => panic!("io_uring setup failed: {error}"),
    }
    list.push(Backend {
        name: "simulated",
        disk: Arc::new(SimDisk::new(7)),
        dir: PathBuf::from("/data/ingress/produce"),
        _temp: None,
    });
    list
}

fn on_real_files(name: &'static str, disk: Arc<dyn Disk>) -> Backend {
    let temp = tempfile::tempdir().unwrap();
    Backend {
        name,
        disk,
        dir: temp.path().join("wal"),
        _temp: Some(temp),
    }
}

/// Small segments and buffers, so tests roll and overflow quickly.
pub fn small_options() -> WalOptions {
    WalOptions {
        segment_bytes: 16 * 1024,
        record_bytes_max: 2048,
        staging_buffer_bytes: 4096,
        staged_bytes_max: 256 * 1024,
        prealloc: false,
        direct_io: true,
        prep_run_bytes_max: 4096,
        compact_rotate_bytes: 4096,
        inline_flush: true,
    }
}

pub fn prealloc_options() -> WalOptions {
    WalOptions {
        prealloc: true,
        ..small_options()
    }
}

/// A payload that says which record it is, of a length that varies.
pub fn payload(seq_hint: u64, len: usize) -> Vec<u8> {
    let mut bytes = format!("record-{seq_hint}-").into_bytes();
    let mut x = seq_hint.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while bytes.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.push(x as u8);
    }
    bytes.truncate(len.max(1));
    bytes
}

/// Every durable record from `from`, as (seq, payload).
pub fn read_all(wal: &Wal, from: u64) -> Vec<(u64, Vec<u8>)> {
    let mut reader = wal.reader(from).unwrap();
    let mut records = Vec::new();
    while let Some(frame) = reader.next_frame().unwrap() {
        records.push((frame.seq, frame.payload.to_vec()));
    }
    records
}

/// Runs a future to completion on the current thread.
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::park();
    }
}

/// Polls a future once with a waker that does nothing.
pub fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    std::pin::Pin::new(future).poll(&mut cx)
}
