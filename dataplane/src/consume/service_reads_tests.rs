//! Where the consume service reads: records the tail cache holds are read
//! inline, records below it on the blocking pool, never on the async
//! worker.
//!
//! Every test runs on a current-thread runtime, whose one worker is the
//! test's own thread, over a simulated disk that notes the thread of every
//! read. A read on the worker would show up as a read on this thread.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use narad_clock::ManualClock;
use narad_disk::sim::SimDisk;
use narad_disk::{BackendKind, Completion, Disk, DiskFile, FileHandle, IoBuf, OpenOptions};
use narad_plog::segment::SEGMENT_SUFFIX;
use narad_plog::{CommitRecord, LogConfig, Record};
use parking_lot::{Condvar, Mutex};

use super::ahead::{ConsumerStateConfig, ConsumerStateStore};
use super::service::{ConsumeConfig, ConsumeRequest, ConsumeService, Delivery};
use super::shard::Settle;
use crate::metadata::MetadataReplica;
use crate::partitions::LocalLogs;
use crate::testing::replica;
use crate::topology::Destination;

const TOPIC: &str = "orders";
/// A ceiling that turns a lost wake-up into a failure, not a timing
/// assertion.
const CEILING: Duration = Duration::from_secs(30);

/// What the disk saw of reads once armed, and a gate that can hold reads
/// of log segments.
#[derive(Debug, Default)]
struct ReadWatch {
    armed: AtomicBool,
    threads: Mutex<Vec<ThreadId>>,
    gate: Mutex<Gate>,
    gate_moved: Condvar,
}

#[derive(Debug, Default)]
struct Gate {
    closed: bool,
    /// Segment reads waiting at the closed gate.
    waiting: usize,
}

impl ReadWatch {
    fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }

    fn note(&self, path: &Path) {
        if self.armed.load(Ordering::Acquire) {
            self.threads.lock().push(std::thread::current().id());
        }
        if !path.to_string_lossy().ends_with(SEGMENT_SUFFIX) {
            return;
        }
        let mut gate = self.gate.lock();
        if !gate.closed {
            return;
        }
        gate.waiting += 1;
        self.gate_moved.notify_all();
        while gate.closed {
            self.gate_moved.wait(&mut gate);
        }
        gate.waiting -= 1;
    }

    /// The threads that read since the watch was armed.
    fn threads(&self) -> Vec<ThreadId> {
        self.threads.lock().clone()
    }

    fn close_gate(&self) {
        self.gate.lock().closed = true;
    }

    fn open_gate(&self) {
        self.gate.lock().closed = false;
        self.gate_moved.notify_all();
    }

    /// Blocks until a segment read waits at the gate.
    fn wait_for_a_read_at_the_gate(&self) {
        let mut gate = self.gate.lock();
        let deadline = Instant::now() + CEILING;
        while gate.waiting == 0 {
            assert!(
                !self.gate_moved.wait_until(&mut gate, deadline).timed_out(),
                "no read reached the gate"
            );
        }
    }
}

#[derive(Debug)]
struct WatchedDisk {
    inner: SimDisk,
    watch: Arc<ReadWatch>,
}

#[derive(Debug)]
struct WatchedFile {
    inner: FileHandle,
    watch: Arc<ReadWatch>,
}

impl DiskFile for WatchedFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn write_at(&self, offset: u64, buf: IoBuf) -> Completion<IoBuf> {
        self.inner.write_at(offset, buf)
    }
    fn read_at(&self, offset: u64, len: usize) -> Completion<Vec<u8>> {
        self.watch.note(self.inner.path());
        self.inner.read_at(offset, len)
    }
    fn fdatasync(&self) -> Completion<()> {
        self.inner.fdatasync()
    }
    fn fallocate(&self, offset: u64, len: u64) -> Completion<()> {
        self.inner.fallocate(offset, len)
    }
    fn truncate(&self, len: u64) -> Completion<()> {
        self.inner.truncate(len)
    }
}

impl Disk for WatchedDisk {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<FileHandle> {
        let inner = self.inner.open(path, options)?;
        Ok(FileHandle::new(Arc::new(WatchedFile {
            inner,
            watch: Arc::clone(&self.watch),
        })))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.inner.exists(path)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }
}

/// One node's consume path over a watched disk, its logs keeping only the
/// newest one-byte record in memory.
struct Node {
    replica: Arc<MetadataReplica>,
    logs: Arc<LocalLogs>,
    service: Arc<ConsumeService>,
    watch: Arc<ReadWatch>,
}

impl Node {
    fn new() -> Self {
        let watch = Arc::new(ReadWatch::default());
        let disk: Arc<dyn Disk> = Arc::new(WatchedDisk {
            inner: SimDisk::new(31),
            watch: Arc::clone(&watch),
        });
        let data_dir = Path::new("/node");
        let log_config = LogConfig {
            tail_cache_bytes: 1 + size_of::<Record>(),
            ..LogConfig::default()
        };
        let logs = Arc::new(LocalLogs::new(
            Arc::clone(&disk),
            data_dir,
            log_config,
            crate::testing::system_clock(),
        ));
        let store = ConsumerStateStore::new(disk, ConsumerStateConfig::default());
        let replica = replica();
        let service = ConsumeService::new(
            Arc::clone(&logs),
            Arc::clone(&replica),
            store,
            data_dir.to_path_buf(),
            Arc::new(ManualClock::new(1_000)),
            ConsumeConfig::default(),
            5,
        );
        Self {
            replica,
            logs,
            service,
            watch,
        }
    }

    /// Commits each payload to partition 0 on its own: the cache then
    /// holds the last one only.
    fn commit_each(&self, payloads: &[&str]) {
        let meta = self.replica.topic_meta(TOPIC).expect("topic");
        let log = self
            .logs
            .resolve(&Destination::new(TOPIC, 0), meta.incarnation_id.as_ref())
            .expect("open log");
        for payload in payloads {
            let record = [CommitRecord::new(b"", payload.as_bytes(), 1_000)];
            log.commit_durable(&[&record]).expect("commit");
        }
    }

    async fn consume(&self, max: usize, wait: Duration) -> Vec<Delivery> {
        self.service
            .consume(ConsumeRequest {
                topic: TOPIC.to_owned(),
                partition: Some(0),
                max,
                wait,
            })
            .await
            .expect("consume")
    }

    /// Asserts that the disk was read since the watch was armed, and never
    /// on this thread, the runtime's one worker.
    fn assert_read_off_the_worker(&self) {
        let threads = self.watch.threads();
        assert!(!threads.is_empty(), "the records came from the disk");
        let worker = std::thread::current().id();
        assert!(
            threads.iter().all(|thread| *thread != worker),
            "a read ran on the async worker"
        );
    }
}

fn payloads(deliveries: &[Delivery]) -> Vec<String> {
    deliveries
        .iter()
        .map(|d| String::from_utf8(d.record.payload.clone()).expect("utf-8"))
        .collect()
}

/// Polls `done` until it holds; a ceiling, not a timing assertion.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + CEILING;
    while !done() {
        assert!(Instant::now() < deadline, "never saw {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn records_below_the_tail_cache_are_read_off_the_async_worker() {
    let node = Node::new();
    node.commit_each(&["a", "b", "c"]);
    node.watch.arm();
    let got = node.consume(10, Duration::ZERO).await;
    assert_eq!(payloads(&got), vec!["a", "b", "c"]);
    node.assert_read_off_the_worker();
    assert!(node.service.reads_offloaded() > 0);
}

#[tokio::test]
async fn a_record_the_tail_cache_holds_is_read_inline() {
    let node = Node::new();
    node.commit_each(&["a"]);
    // The first consume opens the partition, on the blocking pool.
    assert_eq!(payloads(&node.consume(10, Duration::ZERO).await), vec!["a"]);
    let offloaded = node.service.reads_offloaded();
    node.commit_each(&["b"]);
    node.watch.arm();
    assert_eq!(payloads(&node.consume(10, Duration::ZERO).await), vec!["b"]);
    assert_eq!(
        node.service.reads_offloaded(),
        offloaded,
        "no hop to the blocking pool"
    );
    assert!(node.watch.threads().is_empty(), "served from memory");
}

#[tokio::test]
async fn a_parked_consume_gets_a_nacked_record_below_the_tail_cache_off_the_async_worker() {
    let node = Arc::new(Node::new());
    node.commit_each(&["a", "b"]);
    let held = node.consume(2, Duration::ZERO).await;
    assert_eq!(payloads(&held), vec!["a", "b"]);
    let parked = {
        let node = Arc::clone(&node);
        tokio::spawn(async move { node.consume(10, CEILING).await })
    };
    until("the consume to park", || node.service.parked(TOPIC) == 1).await;
    node.watch.arm();
    // The nack pumps here, on the worker; the pump reads "a" elsewhere.
    node.service
        .settle(TOPIC, 0, held[0].record.offset, held[0].nonce, Settle::Nack)
        .expect("nack");
    let got = tokio::time::timeout(CEILING, parked)
        .await
        .expect("the parked consume was answered")
        .expect("task");
    assert_eq!(payloads(&got), vec!["a"]);
    node.assert_read_off_the_worker();
}

#[tokio::test]
async fn a_replay_below_the_tail_cache_reads_off_the_async_worker() {
    let node = Node::new();
    node.commit_each(&["a", "b"]);
    node.watch.arm();
    let record = node.service.replay(TOPIC, 0, 0).await.expect("replay");
    assert_eq!(record.map(|record| record.payload), Some(b"a".to_vec()));
    node.assert_read_off_the_worker();
}

#[tokio::test]
async fn a_claim_of_a_hold_below_the_tail_cache_reads_off_the_async_worker() {
    let node = Node::new();
    node.commit_each(&["a", "b"]);
    let held = node.service.hold(TOPIC, 1, Duration::from_millis(500));
    node.watch.arm();
    let claimed = node.service.claim(TOPIC, &held, 1).await;
    assert_eq!(payloads(&claimed), vec!["a"]);
    node.assert_read_off_the_worker();
}

#[tokio::test]
async fn a_consume_that_goes_away_while_its_read_waits_for_the_disk_leaves_no_lease() {
    let node = Node::new();
    node.commit_each(&["a", "b", "c"]);
    // Open the partition first, so the consume below leases "b" before it
    // reads the segment.
    assert_eq!(payloads(&node.consume(1, Duration::ZERO).await), vec!["a"]);
    let first = node.service.gauges()[0].in_flight;
    node.watch.close_gate();
    let mut consume = Box::pin(node.consume(1, Duration::ZERO));
    assert!(
        poll_once(consume.as_mut()).await.is_none(),
        "the read waits at the gate"
    );
    let watch = Arc::clone(&node.watch);
    tokio::task::spawn_blocking(move || watch.wait_for_a_read_at_the_gate())
        .await
        .expect("gate");
    assert_eq!(node.service.gauges()[0].in_flight, first + 1, "leased");
    drop(consume);
    node.watch.open_gate();
    until("the lease given back", || {
        node.service.gauges()[0].in_flight == first
    })
    .await;
}

/// Polls `future` once: its output, or `None` while it is pending.
async fn poll_once<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> Option<F::Output> {
    let mut future = future;
    std::future::poll_fn(|cx| match future.as_mut().poll(cx) {
        std::task::Poll::Ready(output) => std::task::Poll::Ready(Some(output)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}
