//! Behaviour of the dispatch checkpoint store on the simulated disk (crashes,
//! injected faults, counted fdatasyncs) and on real files (portable backend).

// The workspace denies `unwrap()` outside tests; in this file every function
// is test code, including the helpers clippy cannot see as such.
#![allow(clippy::unwrap_used)]

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use narad_clock::{Clock, ManualClock, SystemClock};
use narad_disk::portable::PortableDisk;
use narad_disk::sim::{Fault, FaultError, FaultOp, SimDisk, Tear};
use narad_disk::{BackendKind, Completion, Disk, DiskFile, FileHandle, IoBuf, OpenOptions};
use narad_wal::checkpoint::{
    CHECKPOINT_FILE_NAME, CHECKPOINT_TEMP_FILE_NAME, CheckpointConfig, CheckpointError,
    CheckpointOp, CheckpointStore,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A flush delay no test outlives: the flusher never syncs on its own, so
/// only `sync_now` and `shutdown` make values durable.
const NEVER: Duration = Duration::from_secs(10);

/// A flush delay of a few milliseconds, for tests that let the flusher run.
const SOON: Duration = Duration::from_millis(2);

/// Generous bound for waits that should end almost at once; never asserted
/// on as a duration.
const PATIENCE: Duration = Duration::from_secs(30);

/// `EIO` on Linux, the only platform Narad stores data on.
const EIO: i32 = 5;

fn wal_dir() -> PathBuf {
    PathBuf::from("/data/ingress/produce")
}

fn checkpoint_path() -> PathBuf {
    wal_dir().join(CHECKPOINT_FILE_NAME)
}

fn sim() -> SimDisk {
    let disk = SimDisk::new(7);
    disk.create_dir_all(&wal_dir()).unwrap();
    disk
}

fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock::new())
}

fn open(disk: &dyn Disk, sync_delay: Duration) -> Result<CheckpointStore, CheckpointError> {
    open_on(disk, sync_delay, system_clock())
}

fn open_on(
    disk: &dyn Disk,
    sync_delay: Duration,
    clock: Arc<dyn Clock>,
) -> Result<CheckpointStore, CheckpointError> {
    CheckpointStore::open(disk, &wal_dir(), CheckpointConfig { sync_delay }, clock)
}

/// Writes a checkpoint file of arbitrary bytes, durably.
fn put_file(disk: &SimDisk, bytes: &[u8]) {
    let file = disk.open(&checkpoint_path(), OpenOptions::CREATE).unwrap();
    if !bytes.is_empty() {
        file.write_at(0, IoBuf::from_slice(bytes)).wait().unwrap();
    }
    file.fdatasync().wait().unwrap();
    disk.sync_dir(&wal_dir()).unwrap();
}

/// What the file says after a power cut: reopens on the crashed disk.
fn value_after_power_cut(disk: &SimDisk, tear: Tear) -> u64 {
    disk.crash(tear);
    let store = open(disk, NEVER).unwrap();
    let value = store.synced();
    store.shutdown().unwrap();
    value
}

#[test]
fn a_missing_checkpoint_reads_as_zero() {
    let disk = sim();
    let store = open(&disk, NEVER).unwrap();
    assert_eq!(store.stored(), 0);
    assert_eq!(store.synced(), 0);
}

#[test]
fn a_missing_checkpoint_is_created_whole_and_durable() {
    let disk = sim();
    drop(open(&disk, NEVER).unwrap());
    disk.crash(Tear::LastWrite);
    assert_eq!(disk.read_file(&checkpoint_path()), Some(vec![0; 8]));
    let temp = wal_dir().join(CHECKPOINT_TEMP_FILE_NAME);
    assert_eq!(disk.read_file(&temp), None);
}

#[test]
fn a_checkpoint_of_any_size_but_eight_bytes_is_refused_naming_the_file() {
    for size in [0usize, 1, 7, 9, 16] {
        let disk = sim();
        put_file(&disk, &vec![1; size]);
        match open(&disk, NEVER) {
            Err(CheckpointError::Corrupt { path, size: found }) => {
                assert_eq!(path, checkpoint_path());
                assert_eq!(found, size as u64);
            }
            other => panic!("size {size}: expected Corrupt, got {other:?}"),
        }
    }
}

#[test]
fn the_corrupt_error_message_names_the_file_and_its_size() {
    let disk = sim();
    put_file(&disk, &[0; 5]);
    let error = open(&disk, NEVER).unwrap_err();
    assert_eq!(
        error.to_string(),
        "checkpoint file /data/ingress/produce/checkpoint is 5 bytes; it must be exactly 8"
    );
}

#[test]
fn an_existing_checkpoint_is_read_big_endian() {
    let disk = sim();
    put_file(&disk, &0x0102_0304_0506_0708u64.to_be_bytes());
    let store = open(&disk, NEVER).unwrap();
    assert_eq!(store.synced(), 0x0102_0304_0506_0708);
}

#[test]
fn open_syncs_the_recovered_value_before_returning_it() {
    let disk = sim();
    put_file(&disk, &3u64.to_be_bytes());
    // A crashed process left 42 in the page cache only.
    let file = disk
        .open(&checkpoint_path(), OpenOptions::EXISTING)
        .unwrap();
    file.write_at(0, IoBuf::from_slice(&42u64.to_be_bytes()))
        .wait()
        .unwrap();
    drop(file);
    let store = open(&disk, NEVER).unwrap();
    assert_eq!(store.synced(), 42);
    assert_eq!(value_after_power_cut(&disk, Tear::None), 42);
}

#[test]
fn a_store_overwrites_the_file_at_once() {
    let disk = sim();
    let store = open(&disk, NEVER).unwrap();
    store.store(5).unwrap();
    // What a restarted process reads after a process crash: the live file.
    assert_eq!(
        disk.read_file(&checkpoint_path()),
        Some(5u64.to_be_bytes().to_vec())
    );
}

#[test]
fn a_power_cut_before_the_flush_brings_back_the_last_synced_value() {
    let disk = sim();
    let store = open(&disk, NEVER).unwrap();
    store.store(5).unwrap();
    store.sync_now().unwrap();
    store.store(9).unwrap();
    assert_eq!(value_after_power_cut(&disk, Tear::None), 5);
}

#[test]
fn a_value_synced_by_the_flusher_survives_a_power_cut() {
    let disk = sim();
    let store = open(&disk, SOON).unwrap();
    store.store(5).unwrap();
    assert_eq!(store.wait_synced(5, PATIENCE).unwrap(), 5);
    assert_eq!(value_after_power_cut(&disk, Tear::LastWrite), 5);
}

#[test]
fn a_flush_falls_due_one_delay_after_the_first_store_by_the_clock() {
    let disk = sim();
    let clock = Arc::new(ManualClock::new(1_000));
    let store = open_on(&disk, Duration::from_millis(250), clock.clone()).unwrap();
    store.store(5).unwrap();
    clock.advance(100);
    // A later store does not push the flush back.
    store.store(6).unwrap();
    clock.advance(149);
    assert_eq!(store.flush_if_due().unwrap(), None);
    assert_eq!(store.synced(), 0);
    clock.advance(1);
    // The flusher thread may have seen the clock first; either way the
    // flush that fell due at 1,250 covered both stores.
    store.flush_if_due().unwrap();
    assert_eq!(store.synced(), 6);
}

#[test]
fn nothing_is_due_while_every_store_is_synced() {
    let disk = sim();
    let clock = Arc::new(ManualClock::new(0));
    let store = open_on(&disk, Duration::from_millis(250), clock.clone()).unwrap();
    clock.advance(1_000);
    assert_eq!(store.flush_if_due().unwrap(), None);
    store.store(3).unwrap();
    store.sync_now().unwrap();
    clock.advance(1_000);
    assert_eq!(store.flush_if_due().unwrap(), None);
    assert_eq!(store.sync_count(), 2);
}

#[test]
fn a_store_after_a_flush_falls_due_one_delay_after_itself() {
    let disk = sim();
    let clock = Arc::new(ManualClock::new(0));
    let store = open_on(&disk, Duration::from_millis(250), clock.clone()).unwrap();
    store.store(1).unwrap();
    clock.advance(250);
    store.flush_if_due().unwrap();
    assert_eq!(store.synced(), 1);
    clock.advance(1_000);
    store.store(2).unwrap();
    clock.advance(249);
    assert_eq!(store.flush_if_due().unwrap(), None);
    assert_eq!(store.synced(), 1);
    clock.advance(1);
    store.flush_if_due().unwrap();
    assert_eq!(store.synced(), 2);
}

#[test]
fn flush_if_due_refuses_a_shut_down_store() {
    let disk = sim();
    let store = open_on(&disk, NEVER, Arc::new(ManualClock::new(0))).unwrap();
    store.shutdown().unwrap();
    assert!(matches!(
        store.flush_if_due(),
        Err(CheckpointError::Closed { .. })
    ));
}

#[test]
fn synced_trails_store_until_the_flush() {
    let disk = sim();
    let store = open(&disk, NEVER).unwrap();
    store.store(10).unwrap();
    assert_eq!(store.stored(), 10);
    assert_eq!(store.synced(), 0);
    assert_eq!(store.sync_now().unwrap(), 10);
    assert_eq!(store.synced(), 10);
}

#[test]
fn wait_synced_returns_the_lower_value_when_the_timeout_passes() {
    let disk = sim();
    let store = open(&disk, NEVER).unwrap();
    store.store(10).unwrap();
    assert_eq!(store.wait_synced(10, Duration::ZERO).unwrap(), 0);
}

#[test]
fn wait_synced_without_a_deadline_returns_once_the_flusher_synced() {
    let disk = sim();
    let store = open(&disk, SOON).unwrap();
    store.store(6).unwrap();
    assert_eq!(store.wait_synced(6, Duration::MAX).unwrap(), 6);
}

#[test]
fn wait_synced_ends_with_the_latch_instead_of_waiting_forever() {
    let disk = sim();
    let store = open(&disk, SOON).unwrap();
    disk.inject(Fault {
        op: FaultOp::Sync,
        nth: 0,
        error: FaultError::Eio,
        sticky: false,
    });
    store.store(6).unwrap();
    assert!(matches!(
        store.wait_synced(6, Duration::MAX),
        Err(CheckpointError::Latched { .. })
    ));
}

#[test]
fn a_panicking_flush_latches_the_store_and_is_counted() {
    let disk = sim();
    let store = open(&disk, SOON).unwrap();
    disk.inject(Fault {
        op: FaultOp::Sync,
        nth: 0,
        error: FaultError::Panic,
        sticky: false,
    });
    store.store(6).unwrap();
    // Whether the fdatasync ran is unknown: it is never retried, and the
    // store refuses from then on, as after a failed one.
    assert!(matches!(
        store.wait_synced(6, Duration::MAX),
        Err(CheckpointError::Latched { .. })
    ));
    assert_eq!(store.flusher_panics(), 1);
    assert!(matches!(
        store.store(7),
        Err(CheckpointError::Latched { .. })
    ));
}

#[test]
fn storing_the_current_value_again_writes_nothing() {
    let disk = sim();
    let store = open(&disk, NEVER).unwrap();
    store.store(4).unwrap();
    let ops = disk.op_count();
    store.store(4).unwrap();
    assert_eq!(disk.op_count(), ops);
}

#[test]
fn a_sync_with_nothing_new_issues_no_fdatasync() {
    let disk = sim();
    let store = open(&disk, NEVER).unwrap();
    store.store(4).unwrap();
    store.sync_now().unwrap();
    let syncs = store.sync_count();
    store.sync_now().unwrap();
    assert_eq!(store.sync_count(), syncs);
}

#[test]
#[should_panic(expected = "checkpoint moved backwards from 9 to 8")]
fn the_checkpoint_never_moves_backwards() {
    let disk = sim();
    let store = open(&disk, NEVER).unwrap();
    store.store(9).unwrap();
    let _ = store.store(8);
}

#[test]
fn shutdown_syncs_the_last_stored_value() {
    let disk = sim();
    let store = open(&disk, NEVER).unwrap();
    store.store(77).unwrap();
    assert_eq!(store.shutdown().unwrap(), 77);
    assert_eq!(value_after_power_cut(&disk, Tear::None), 77);
}

#[test]
fn dropping_the_store_syncs_like_shutdown() {
    let disk = sim();
    let store = open(&disk, NEVER).unwrap();
    store.store(78).unwrap();
    drop(store);
    assert_eq!(value_after_power_cut(&disk, Tear::None), 78);
}

#[test]
fn a_shut_down_store_refuses_stores_and_syncs() {
    let disk = sim();
    let store = open(&disk, NEVER).unwrap();
    store.shutdown().unwrap();
    assert!(matches!(
        store.store(1),
        Err(CheckpointError::Closed { .. })
    ));
    assert!(matches!(
        store.sync_now(),
        Err(CheckpointError::Closed { .. })
    ));
    assert_eq!(store.shutdown().unwrap(), 0);
}

#[test]
fn a_failed_write_latches_the_store() {
    let disk = sim();
    let store = open(&disk, NEVER).unwrap();
    store.store(3).unwrap();
    disk.inject(Fault {
        op: FaultOp::Write,
        nth: 0,
        error: FaultError::Eio,
        sticky: false,
    });
    match store.store(4) {
        Err(CheckpointError::Io { op, source, .. }) => {
            assert_eq!(op, CheckpointOp::Write);
            assert_eq!(source.raw_os_error(), Some(EIO));
        }
        other => panic!("expected a write error, got {other:?}"),
    }
    assert!(store.is_latched());
    // The fault was one-shot: a later store would succeed on the disk, and
    // is refused by the latch all the same.
    assert!(matches!(
        store.store(5),
        Err(CheckpointError::Latched {
            op: CheckpointOp::Write,
            ..
        })
    ));
    assert!(matches!(
        store.sync_now(),
        Err(CheckpointError::Latched { .. })
    ));
    assert_eq!(store.stored(), 3);
}

#[test]
fn a_failed_fdatasync_latches_the_store_and_is_never_retried() {
    let disk = sim();
    let store = open(&disk, SOON).unwrap();
    store.store(3).unwrap();
    store.wait_synced(3, PATIENCE).unwrap();
    disk.inject(Fault {
        op: FaultOp::Sync,
        nth: 0,
        error: FaultError::Eio,
        sticky: false,
    });
    store.store(4).unwrap();
    match store.wait_synced(4, PATIENCE) {
        Err(CheckpointError::Latched { op, .. }) => assert_eq!(op, CheckpointOp::Fdatasync),
        other => panic!("expected the latch, got {other:?}"),
    }
    let syncs = store.sync_count();
    assert!(matches!(
        store.store(5),
        Err(CheckpointError::Latched { .. })
    ));
    assert!(matches!(
        store.sync_now(),
        Err(CheckpointError::Latched { .. })
    ));
    assert!(store.shutdown().is_err());
    assert_eq!(store.sync_count(), syncs, "a failed fdatasync was retried");
    assert_eq!(store.synced(), 3);
    assert_eq!(value_after_power_cut(&disk, Tear::None), 3);
}

#[test]
fn an_open_interrupted_at_any_operation_never_leaves_a_corrupt_checkpoint() {
    for nth in 0..8 {
        for tear in [Tear::None, Tear::LastWrite] {
            let disk = sim();
            disk.inject(Fault {
                op: FaultOp::Any,
                nth,
                error: FaultError::Eio,
                sticky: true,
            });
            let _ = open(&disk, NEVER);
            disk.clear_faults();
            assert_eq!(value_after_power_cut(&disk, tear), 0, "fault at op {nth}");
        }
    }
}

/// Many seeded runs of stores, syncs and a power cut: the value that comes
/// back is one that was stored, and never below the last one synced.
#[test]
fn a_power_cut_brings_back_a_stored_value_no_older_than_the_last_sync() {
    for seed in 0..200u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let disk = SimDisk::new(seed);
        disk.create_dir_all(&wal_dir()).unwrap();
        let store = open(&disk, NEVER).unwrap();
        let mut stored = vec![0u64];
        let mut synced = 0;
        for _ in 0..rng.random_range(0..20) {
            let next = stored.last().copied().unwrap_or(0) + rng.random_range(1..1000);
            store.store(next).unwrap();
            stored.push(next);
            if rng.random_bool(0.3) {
                synced = store.sync_now().unwrap();
            }
        }
        let tear = if rng.random_bool(0.5) {
            Tear::LastWrite
        } else {
            Tear::None
        };
        let recovered = value_after_power_cut(&disk, tear);
        assert!(
            recovered >= synced,
            "seed {seed}: {recovered} below synced {synced}"
        );
        assert!(
            stored.contains(&recovered),
            "seed {seed}: {recovered} was never stored"
        );
    }
}

/// The same with the flusher running on a millisecond delay, so syncs land
/// at times the test does not choose. The invariants hold whatever the
/// timing: `synced()` read before the cut is a floor, since it only grows and
/// is only ever a durable value.
#[test]
fn a_power_cut_while_the_flusher_runs_brings_back_a_stored_value_no_older_than_synced() {
    for seed in 0..50u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let disk = SimDisk::new(seed);
        disk.create_dir_all(&wal_dir()).unwrap();
        let store = open(&disk, Duration::from_millis(1)).unwrap();
        let mut stored = vec![0u64];
        for _ in 0..rng.random_range(1..200) {
            let next = stored.last().copied().unwrap_or(0) + rng.random_range(1..10);
            store.store(next).unwrap();
            stored.push(next);
        }
        let floor = store.synced();
        let tear = if rng.random_bool(0.5) {
            Tear::LastWrite
        } else {
            Tear::None
        };
        let recovered = value_after_power_cut(&disk, tear);
        assert!(
            recovered >= floor,
            "seed {seed}: {recovered} below synced {floor}"
        );
        assert!(
            stored.contains(&recovered),
            "seed {seed}: {recovered} was never stored"
        );
    }
}

/// A disk whose fdatasyncs each wait for the test to let them through, so a
/// test can hold the flusher inside a sync while stores land.
#[derive(Debug, Clone)]
struct GatedDisk {
    inner: SimDisk,
    gate: Arc<Gate>,
}

#[derive(Debug, Default)]
struct Gate {
    counts: Mutex<GateCounts>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateCounts {
    started: u64,
    released: u64,
}

impl Gate {
    /// Called by every fdatasync: waits until the test lets this one
    /// through. Gives up after `PATIENCE`, so a test that failed while a
    /// sync was held (a drop syncing on the way out) ends instead of hanging;
    /// the sync counts then show the failure.
    fn pass(&self) {
        let mut counts = self.counts.lock().unwrap();
        counts.started += 1;
        let ticket = counts.started;
        self.changed.notify_all();
        let (_counts, _timeout) = self
            .changed
            .wait_timeout_while(counts, PATIENCE, |counts| counts.released < ticket)
            .unwrap();
    }

    fn release(&self, count: u64) {
        self.counts.lock().unwrap().released += count;
        self.changed.notify_all();
    }

    /// Waits until `count` fdatasyncs have reached the gate.
    ///
    /// # Panics
    /// After `PATIENCE` without them.
    fn wait_started(&self, count: u64) {
        let counts = self.counts.lock().unwrap();
        let (counts, timeout) = self
            .changed
            .wait_timeout_while(counts, PATIENCE, |counts| counts.started < count)
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "only {} of {count} fdatasyncs reached the gate",
            counts.started
        );
    }

    fn started(&self) -> u64 {
        self.counts.lock().unwrap().started
    }
}

#[derive(Debug)]
struct GatedFile {
    inner: FileHandle,
    gate: Arc<Gate>,
}

impl DiskFile for GatedFile {
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
        self.inner.read_at(offset, len)
    }
    fn fdatasync(&self) -> Completion<()> {
        self.gate.pass();
        self.inner.fdatasync()
    }
    fn fallocate(&self, offset: u64, len: u64) -> Completion<()> {
        self.inner.fallocate(offset, len)
    }
    fn truncate(&self, len: u64) -> Completion<()> {
        self.inner.truncate(len)
    }
}

impl Disk for GatedDisk {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<FileHandle> {
        let inner = self.inner.open(path, options)?;
        Ok(FileHandle::new(Arc::new(GatedFile {
            inner,
            gate: Arc::clone(&self.gate),
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

#[test]
fn stores_between_flushes_share_one_fdatasync() {
    let disk = GatedDisk {
        inner: sim(),
        gate: Arc::default(),
    };
    // Let open's own sync of the new file through.
    disk.gate.release(1);
    let store = open(&disk, Duration::ZERO).unwrap();
    assert_eq!(disk.gate.started(), 1);

    store.store(1).unwrap();
    disk.gate.wait_started(2); // the flusher is now inside its fdatasync for 1
    for seq in 2..=100 {
        store.store(seq).unwrap();
    }
    disk.gate.release(1);
    assert!(store.wait_synced(1, PATIENCE).unwrap() >= 1);
    disk.gate.wait_started(3); // one more fdatasync, for all of 2..=100
    disk.gate.release(1);
    assert_eq!(store.wait_synced(100, PATIENCE).unwrap(), 100);
    store.shutdown().unwrap();
    assert_eq!(
        disk.gate.started(),
        3,
        "99 stores took more than one fdatasync"
    );
    assert_eq!(value_after_power_cut(&disk.inner, Tear::None), 100);
}

#[test]
fn the_store_works_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let disk = PortableDisk::new(1).unwrap();
    let config = CheckpointConfig { sync_delay: SOON };
    let store = CheckpointStore::open(&disk, dir.path(), config, system_clock()).unwrap();
    assert_eq!(store.synced(), 0);
    store.store(12).unwrap();
    assert_eq!(store.wait_synced(12, PATIENCE).unwrap(), 12);
    store.store(13).unwrap();
    assert_eq!(store.shutdown().unwrap(), 13);
    drop(store);
    let bytes = std::fs::read(dir.path().join(CHECKPOINT_FILE_NAME)).unwrap();
    assert_eq!(bytes, 13u64.to_be_bytes());
    let store = CheckpointStore::open(&disk, dir.path(), config, system_clock()).unwrap();
    assert_eq!(store.synced(), 13);
}

#[test]
fn a_corrupt_real_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(CHECKPOINT_FILE_NAME), [0u8; 3]).unwrap();
    let disk = PortableDisk::new(1).unwrap();
    let error = CheckpointStore::open(
        &disk,
        dir.path(),
        CheckpointConfig::default(),
        system_clock(),
    )
    .unwrap_err();
    assert!(matches!(error, CheckpointError::Corrupt { size: 3, .. }));
}
