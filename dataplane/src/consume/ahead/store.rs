//! The consumer state store: attaches partitions (loading and priming
//! their files), rewrites touched partitions' window slots every tick and
//! writes them out at their writeout points, levels `consumer.offset`, keeps
//! at most `handles_max` files open, and latches a partition on a disk
//! error.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use narad_clock::millis;
use narad_disk::{Disk, FileHandle};
use parking_lot::Mutex;
use tracing::debug;

use super::cadence::{next_writeout_ms, writeout_phase_ms};
use super::config::ConsumerStateConfig;
use super::error::StateError;
use super::position::{ConsumerPosition, PositionSource};
use super::recovery::Recovered;
use narad_disk::queue::{self, Receiver, Sender};

mod handles;
mod load;
mod writeout;

use self::load::log_recovery;

/// Nudges queued for the worker at most: one queued nudge wakes it as
/// well as many would.
const NUDGES_MAX: usize = 1;

/// Tells the store that a partition's position changed (cheap: an atomic
/// flag, and a nudge to the worker on the first touch since a tick).
#[derive(Clone, Debug)]
pub struct StateTicket {
    touched: Arc<AtomicBool>,
    nudge: Sender<()>,
}

impl StateTicket {
    /// Marks the partition for the next tick's window write.
    pub fn touched(&self) {
        if !self.touched.swap(true, Ordering::AcqRel) {
            // Wakes a worker that sleeps with nothing pending; a full
            // queue already holds a nudge.
            let _ = self.nudge.try_send(());
        }
    }
}

/// Persists each attached partition's position on the two cadences.
pub struct ConsumerStateStore {
    disk: Arc<dyn Disk>,
    config: ConsumerStateConfig,
    inner: Mutex<Inner>,
    /// Partitions latched by a disk error since the store was made.
    disk_failures: Arc<AtomicU64>,
    /// Wakes the worker (`worker.rs`) from its sleep with nothing pending.
    nudge: Sender<()>,
    nudged: Receiver<()>,
}

impl fmt::Debug for ConsumerStateStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("ConsumerStateStore")
            .field("config", &self.config)
            .field("partitions", &inner.partitions.len())
            .field("handles_open", &inner.handles_open)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// The first tick's time (the clock's milliseconds): writeout points
    /// are counted from it, so a run driven by explicit times is
    /// deterministic.
    epoch_ms: Option<u64>,
    partitions: HashMap<PathBuf, Partition>,
    /// `consumer.ahead` handles held, at most `config.handles_max`.
    handles_open: usize,
    /// Counter for least-recently-touched ordering.
    use_counter: u64,
}

/// One attached partition.
#[derive(Debug)]
struct Partition {
    source: Weak<dyn PositionSource>,
    touched: Arc<AtomicBool>,
    /// The held `consumer.ahead` handle (None after eviction or a latch).
    file: Option<FileHandle>,
    /// The slot holding the newest durable record; never written.
    anchor_slot: usize,
    anchor_generation: u64,
    /// The newest position written to the file (window, or anchor when
    /// `unsynced` is false).
    written: ConsumerPosition,
    /// The window holds a record not yet written out.
    unsynced: bool,
    /// What `consumer.offset` holds, as far as this process knows.
    offset_frontier: u64,
    offset_levelled_at_ms: Option<u64>,
    phase_ms: u64,
    next_writeout_ms: Option<u64>,
    last_used: u64,
    /// A disk error (or a malformed position) stopped all writes for it.
    latched: bool,
    /// The store's count of disk failures, shared by its partitions.
    disk_failures: Arc<AtomicU64>,
    truncation_warned: bool,
}

impl Partition {
    fn window_slot(&self) -> usize {
        1 - self.anchor_slot
    }
}

/// The loaded state of a partition's files.
#[derive(Debug)]
struct Loaded {
    file: FileHandle,
    ahead_created: bool,
    ahead_size: u64,
    offset_frontier: Option<u64>,
    recovered: Recovered,
}

impl ConsumerStateStore {
    /// A store writing through `disk`.
    ///
    /// # Panics
    /// If `config` is out of range (see [`ConsumerStateConfig`]).
    pub fn new(disk: Arc<dyn Disk>, config: ConsumerStateConfig) -> Arc<Self> {
        config.assert_valid();
        let (nudge, nudged) = queue::bounded(NUDGES_MAX);
        Arc::new(Self {
            disk,
            config,
            inner: Mutex::new(Inner::default()),
            disk_failures: Arc::new(AtomicU64::new(0)),
            nudge,
            nudged,
        })
    }

    /// What wakes the worker.
    pub(super) fn nudges(&self) -> Receiver<()> {
        self.nudged.clone()
    }

    /// A sender of nudges, for the worker's stop.
    pub(super) fn nudger(&self) -> Sender<()> {
        self.nudge.clone()
    }

    /// The store's configuration.
    pub fn config(&self) -> &ConsumerStateConfig {
        &self.config
    }

    /// Loads (primes) the partition's state from `<dir>/consumer.ahead` and
    /// `<dir>/consumer.offset` (larger frontier wins) and registers `source`
    /// for the cadences. Returns the position to seed the shard with and a
    /// ticket the service touches after every settle.
    ///
    /// Priming extends `consumer.ahead` to 8 KiB, writes the position into
    /// the slot that does not hold the newest valid record and writes it out
    /// (fdatasync, and a directory sync for new files). The directory must
    /// exist; it is never created here. Attaching an attached directory
    /// first writes out the old registration, then loads again; a latched
    /// one stays latched (loaded, never written).
    ///
    /// # Errors
    /// [`StateError::Io`] when the files cannot be opened or read (the
    /// position is unknown). A failure while priming writes is not an error:
    /// the partition is latched (logged) and its position still returned.
    pub fn attach(
        &self,
        dir: &Path,
        source: Weak<dyn PositionSource>,
    ) -> Result<(ConsumerPosition, StateTicket), StateError> {
        let mut inner = self.inner.lock();
        let mut keep_latched = false;
        if let Some(mut old) = inner.partitions.remove(dir) {
            keep_latched = old.latched;
            self.flush_partition(dir, &mut old);
            if old.file.take().is_some() {
                inner.handles_open -= 1;
            }
        }
        inner.make_room(&*self.disk, self.config.handles_max - 1, None);
        let loaded = self.load(dir)?;
        log_recovery(dir, &loaded);
        let touched = Arc::new(AtomicBool::new(false));
        inner.use_counter += 1;
        let mut partition = Partition {
            source,
            touched: Arc::clone(&touched),
            file: None,
            anchor_slot: loaded.recovered.newest_slot.unwrap_or(1),
            anchor_generation: loaded.recovered.generation,
            written: loaded.recovered.position.clone(),
            unsynced: false,
            offset_frontier: loaded.offset_frontier.unwrap_or(0),
            offset_levelled_at_ms: None,
            phase_ms: writeout_phase_ms(dir, &self.config),
            next_writeout_ms: None,
            last_used: inner.use_counter,
            latched: keep_latched,
            disk_failures: Arc::clone(&self.disk_failures),
            truncation_warned: false,
        };
        if !keep_latched {
            self.prime(dir, &mut partition, &loaded);
        }
        if !partition.latched {
            partition.file = Some(loaded.file);
            inner.handles_open += 1;
        }
        inner.partitions.insert(dir.to_path_buf(), partition);
        let ticket = StateTicket {
            touched,
            nudge: self.nudge.clone(),
        };
        Ok((loaded.recovered.position, ticket))
    }

    /// Forget a partition (topic deleted / partition moved); nothing more is
    /// written for it, not even what was touched since the last tick. It
    /// returns after a tick in progress ended, so once it returned no write
    /// to `dir` is in flight either: the directory may be renamed away.
    pub fn detach(&self, dir: &Path) {
        let mut inner = self.inner.lock();
        if let Some(partition) = inner.partitions.remove(dir)
            && partition.file.is_some()
        {
            inner.handles_open -= 1;
        }
    }

    /// Lets go of a partition whose shard is released while the partition
    /// is still served here: writes out its position as its source reports
    /// it now (fdatasync), levels `consumer.offset`, then forgets it as
    /// [`Self::detach`] does, its handle closed. The next
    /// [`Self::attach`] loads that position. A partition not attached is
    /// let go already.
    ///
    /// # Errors
    /// [`StateError::NotDurable`] when the partition is latched (now or
    /// earlier): it stays attached, so its source keeps the only copy of
    /// its position that is not older.
    pub fn release(&self, dir: &Path) -> Result<(), StateError> {
        let mut inner = self.inner.lock();
        let Some(partition) = inner.partitions.get_mut(dir) else {
            return Ok(());
        };
        self.flush_partition(dir, partition);
        let dirs = [dir.to_path_buf()];
        self.level_offsets(&mut inner, &dirs, None);
        if inner
            .partitions
            .get(dir)
            .is_some_and(|partition| partition.latched)
        {
            inner.close_latched();
            return Err(StateError::NotDurable {
                dirs: dirs.to_vec(),
            });
        }
        if let Some(partition) = inner.partitions.remove(dir)
            && partition.file.is_some()
        {
            inner.handles_open -= 1;
        }
        Ok(())
    }

    /// One cadence step at `now_ms`, a reading of the node's monotonic
    /// clock (tests drive it; `spawn` runs it every tick on a thread, on
    /// the clock it is given): touched partitions get their window slot
    /// rewritten (page cache only); partitions whose writeout point has
    /// come and whose window is unsynced are written out (fdatasync), which
    /// flips the slot roles; at a writeout point `consumer.offset` is
    /// levelled if the last levelling is at least `offset_level_interval`
    /// old. A partition whose source was dropped is written out and
    /// forgotten.
    pub fn tick(&self, now_ms: u64) {
        let mut inner = self.inner.lock();
        let epoch_ms = *inner.epoch_ms.get_or_insert(now_ms);
        let mut windows = Vec::new();
        let mut gone = Vec::new();
        for (dir, partition) in &inner.partitions {
            if partition.source.strong_count() == 0 {
                gone.push(dir.clone());
            } else if !partition.latched
                && partition.touched.swap(false, Ordering::AcqRel)
                && let Some(source) = partition.source.upgrade()
            {
                windows.push((dir.clone(), source.position()));
            }
        }
        self.write_windows(&mut inner, windows);
        let interval_ms = millis(self.config.durable_interval);
        let mut due = Vec::new();
        for (dir, partition) in &mut inner.partitions {
            let next_ms = next_writeout_ms(epoch_ms, partition.phase_ms, interval_ms, now_ms);
            let at_ms = *partition.next_writeout_ms.get_or_insert(next_ms);
            if now_ms >= at_ms && !partition.latched {
                partition.next_writeout_ms = Some(next_ms);
                due.push(dir.clone());
            }
        }
        self.write_out(&mut inner, &due);
        self.level_offsets(&mut inner, &due, Some(now_ms));
        for dir in gone {
            if let Some(mut partition) = inner.partitions.remove(&dir) {
                debug!(dir = %dir.display(), "consumer position source dropped; writing out and forgetting the partition");
                self.flush_partition(&dir, &mut partition);
                if partition.file.is_some() {
                    inner.handles_open -= 1;
                }
            }
        }
        inner.close_latched();
    }

    /// Whether a tick has work: a partition touched, a window not written
    /// out, a `consumer.offset` behind the written frontier, or a source
    /// gone. While there is none, the worker sleeps without a timer.
    pub fn has_pending(&self) -> bool {
        let inner = self.inner.lock();
        inner.partitions.values().any(|partition| {
            !partition.latched
                && (partition.touched.load(Ordering::Acquire)
                    || partition.unsynced
                    || partition.written.frontier != partition.offset_frontier
                    || partition.source.strong_count() == 0)
        })
    }

    /// Graceful stop: writes and fdatasyncs every attached partition's
    /// position (read from its source now, touched or not) and levels
    /// `consumer.offset`.
    ///
    /// # Errors
    /// [`StateError::NotDurable`] naming every partition that is latched
    /// (now or earlier); all others were made durable.
    pub fn flush_all(&self) -> Result<(), StateError> {
        let mut inner = self.inner.lock();
        let mut windows = Vec::new();
        for (dir, partition) in &inner.partitions {
            partition.touched.store(false, Ordering::Release);
            if !partition.latched
                && let Some(source) = partition.source.upgrade()
            {
                windows.push((dir.clone(), source.position()));
            }
        }
        self.write_windows(&mut inner, windows);
        let dirs: Vec<PathBuf> = inner.partitions.keys().cloned().collect();
        self.write_out(&mut inner, &dirs);
        self.level_offsets(&mut inner, &dirs, None);
        inner.close_latched();
        let mut failed: Vec<PathBuf> = inner
            .partitions
            .iter()
            .filter(|(_, partition)| partition.latched)
            .map(|(dir, _)| dir.clone())
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            failed.sort();
            Err(StateError::NotDurable { dirs: failed })
        }
    }

    /// `consumer.ahead` handles held now (at most `config.handles_max`).
    pub fn handles_open(&self) -> usize {
        self.inner.lock().handles_open
    }

    /// Partitions latched by a disk error since the store was made (a
    /// latch logs one `consumer state disk failure` error).
    pub fn disk_failures(&self) -> u64 {
        self.disk_failures.load(Ordering::Acquire)
    }

    /// Whether `dir` is attached.
    pub fn is_attached(&self, dir: &Path) -> bool {
        self.inner.lock().partitions.contains_key(dir)
    }

    /// Whether the partition is attached and latched by a disk error.
    pub fn is_latched(&self, dir: &Path) -> bool {
        self.inner
            .lock()
            .partitions
            .get(dir)
            .is_some_and(|partition| partition.latched)
    }
}
