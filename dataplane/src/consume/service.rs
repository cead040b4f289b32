//! The consume service of one node: leases over the partitions it owns,
//! long polls, replays and settles.
//!
//! Each owned partition gets an in-flight shard
//! ([`InFlightShard`](super::shard::InFlightShard)) on first touch, seeded
//! from the consumer state store. A consume purges expired leases,
//! reserves the lowest reservable offset, *then* reads it from the
//! partition log; a damaged record is skipped and counted, an offset
//! retention already deleted moves the frontier to the oldest retained one.
//! A batch takes what is ready (never waits to fill) and stops reserving
//! once its keys and payloads reach [`ConsumeConfig::batch_bytes_max`].
//!
//! A consume that finds nothing parks in the topic's waiter FIFO (pinned
//! consumes in their partition's FIFO, served first). A pump hands records
//! to waiters in order, reserving only for a waiter that is still there;
//! it runs when a waiter arrives, when a partition's high watermark moves
//! (a watcher task per shard on the log's watch), when a nack or an expiry
//! returns a record, and when an ack frees a cap slot. A record handed to
//! a consume that has just gone away is released at once: the answer is a
//! handoff that gives its leases back when dropped unopened. Parked
//! consumes are served in arrival order among themselves; a fresh consume
//! looks for ready records before it joins a line, so it may take a record
//! that arrived just before the pump ran.
//!
//! Reads of the partition logs run inline when the tail cache serves them;
//! a read that needs the disk (and a partition's first open) moves the
//! rest of its work to Tokio's blocking pool, so no async worker waits for
//! the disk (`reads`).
//!
//! For delivery tokens (`hold`), a record can be leased for a short hold
//! on behalf of another node and turned into a full lease by that node's
//! claim; an unclaimed hold lapses as any lease does.
//!
//! What it does not do: serve partitions owned elsewhere (queue consumes
//! skip them, pinned ones get [`ConsumeError::OwnerUnavailable`]; the consume
//! front sends those to their owner through [`crate::forward`]), or count
//! delivery metrics (the HTTP layer does, from what it returns); [`ConsumeService::gauges`] reports the per-partition state.
//!
//! This file holds the service's entry points; the parts live beside it:
//! `request` and `error` (what goes in and out), `lease` (scan, reserve,
//! read), `shards` (each owned partition's shard and its persisted
//! position), `release` (letting idle shards go), `pump` (parked consumes
//! and the pump serving them), `wakeups` (what runs the pump besides a
//! consume), `hold` (records held for delivery tokens) and `reads` (where
//! reads of the log run).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use narad_plog::{LogError, ReadEntry, ReadLimits, Record};
use parking_lot::Mutex;
use tokio::task::AbortHandle;

use super::ahead::{ConsumerPosition, ConsumerStateStore, stored_frontier, stored_frontier_of};
use super::shard::{Settle, ShardLimits};
use super::waiters::Waiters;
use crate::metadata::{MetadataReplica, TopicMeta};
use crate::partitions::freeze::Freezes;
use crate::partitions::{Frontiers, LocalLogs};
use crate::topology::Destination;
use narad_clock::{Clock, millis};

mod error;
mod hold;
mod lease;
mod pump;
mod reads;
mod release;
mod request;
mod shards;
mod wakeups;

pub use error::{ConsumeError, ReplayError, SettleError};
pub use hold::HeldRecord;
use pump::Reply;
pub use request::{
    BATCH_BYTES_MAX_DEFAULT, CONSUME_RECORDS_MAX, ConsumeConfig, ConsumeRequest, Delivery,
    MAX_WAIT_DEFAULT,
};
use shards::PartitionShard;
use wakeups::ExpiryTimer;

/// The consume state of one partition, for metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionGauges {
    /// Topic.
    pub topic: Arc<str>,
    /// Partition.
    pub partition: u32,
    /// High watermark minus frontier.
    pub lag: u64,
    /// Live leases.
    pub in_flight: u64,
    /// Settled offsets above the frontier.
    pub acked_ahead: u64,
    /// Unacked records passed over because retention deleted them, since
    /// the shard was made.
    pub dropped: u64,
    /// Records skipped as unreadable since the shard was made.
    pub corrupt_skipped_total: u64,
}

/// The partition poller's frontiers: a shard's when one serves the
/// partition, else the consumer-state files', read without attaching.
impl Frontiers for ConsumeService {
    fn live(&self, destination: &Destination, incarnation: Option<&Arc<str>>) -> Option<u64> {
        self.live_frontier(destination, incarnation)
    }

    fn stored(&self, dir: &std::path::Path) -> std::io::Result<Option<u64>> {
        stored_frontier(&**self.logs.disk(), dir)
    }
}

/// How often [`ConsumeService::wait_for_leases`] looks again.
const LEASE_WAIT_POLL: Duration = Duration::from_millis(5);

/// The consume path of one node. Share it behind the `Arc` that
/// [`ConsumeService::new`] returns.
#[derive(Debug)]
pub struct ConsumeService {
    this: Weak<ConsumeService>,
    logs: Arc<LocalLogs>,
    replica: Arc<MetadataReplica>,
    store: Arc<ConsumerStateStore>,
    data_dir: PathBuf,
    clock: Arc<dyn Clock>,
    config: ConsumeConfig,
    seed: u64,
    shards: Mutex<BTreeMap<Destination, Arc<PartitionShard>>>,
    /// One gate per partition being opened, so a partition is opened once.
    opening: Mutex<BTreeMap<Destination, Arc<Mutex<()>>>>,
    waiters: Waiters<Reply>,
    rotation: AtomicU32,
    timer: Arc<ExpiryTimer>,
    /// The task pumping waiters after metadata changes.
    metadata_task: OnceLock<AbortHandle>,
    runtime: OnceLock<tokio::runtime::Handle>,
    shut_down: AtomicBool,
    /// Pieces of work moved to the blocking pool to read the disk.
    reads_offloaded: AtomicU64,
    /// The node's handoff freezes: a frozen partition hands out no new
    /// lease (set once by the node, see [`Self::pause_when_frozen`]).
    freezes: OnceLock<Arc<Freezes>>,
    /// Shards made so far: each one's ordinal seeds its nonce stream.
    shards_made: AtomicU64,
    /// Shards released as idle so far.
    shards_released: AtomicU64,
}

impl ConsumeService {
    /// A service over `logs` for the partitions `replica` says this node
    /// owns, persisting positions through `store` (whose worker the caller
    /// runs). `seed` seeds each shard's nonce stream together with the
    /// partition's name and the shard's ordinal; it must differ between
    /// process starts, or handles from before a restart could match new
    /// leases.
    pub fn new(
        logs: Arc<LocalLogs>,
        replica: Arc<MetadataReplica>,
        store: Arc<ConsumerStateStore>,
        data_dir: PathBuf,
        clock: Arc<dyn Clock>,
        config: ConsumeConfig,
        seed: u64,
    ) -> Arc<Self> {
        assert!(
            config.batch_bytes_max > 0,
            "batch_bytes_max must be positive"
        );
        Arc::new_cyclic(|this| Self {
            this: this.clone(),
            logs,
            replica,
            store,
            data_dir,
            clock,
            config,
            seed,
            shards: Mutex::new(BTreeMap::new()),
            opening: Mutex::new(BTreeMap::new()),
            waiters: Waiters::default(),
            rotation: AtomicU32::new(seed as u32),
            timer: Arc::new(ExpiryTimer::default()),
            metadata_task: OnceLock::new(),
            runtime: OnceLock::new(),
            shut_down: AtomicBool::new(false),
            reads_offloaded: AtomicU64::new(0),
            freezes: OnceLock::new(),
            shards_made: AtomicU64::new(0),
            shards_released: AtomicU64::new(0),
        })
    }

    /// Leases up to `request.max` ready records. When none is ready, waits
    /// up to `request.wait` for one; an empty answer means nothing came.
    ///
    /// Cancellation safe: dropping the future leaves no lease behind.
    ///
    /// # Errors
    /// [`ConsumeError::TopicNotFound`]; for a pinned partition
    /// [`ConsumeError::PartitionOutOfRange`] or
    /// [`ConsumeError::OwnerUnavailable`]; [`ConsumeError::Read`] when a
    /// partition log cannot be opened or read and nothing was taken.
    pub async fn consume(&self, request: ConsumeRequest) -> Result<Vec<Delivery>, ConsumeError> {
        self.start_runtime_tasks();
        let meta = self.topic(&request.topic)?;
        if let Some(partition) = request.partition {
            check_partition(&meta, partition)?;
            if !self.owns(&meta, partition) {
                return Err(ConsumeError::OwnerUnavailable { partition });
            }
        }
        if self.shut_down.load(Ordering::Acquire) {
            return Ok(Vec::new());
        }
        let max = request.max.clamp(1, CONSUME_RECORDS_MAX);
        let wait = request.wait.min(self.config.max_wait);
        let wait_ms = millis(wait);
        let deadline_ms = self.clock.now_ms().saturating_add(wait_ms);
        let ready = self.scan(&meta, request.partition, max).await?;
        if !ready.is_empty() || wait_ms == 0 {
            return Ok(ready);
        }
        self.park(&meta, request.partition, max, deadline_ms).await
    }

    /// Reads the record at `offset` without leasing it. `None` when the
    /// offset is at or past the high watermark. Reads the tail cache
    /// inline, the disk on the blocking pool.
    ///
    /// # Errors
    /// [`ReplayError::Gone`] when retention deleted it,
    /// [`ReplayError::Unreadable`] when it is damaged, and the lookup
    /// errors.
    pub async fn replay(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<Option<Record>, ReplayError> {
        let meta = self
            .replica
            .topic_meta(topic)
            .ok_or(ReplayError::TopicNotFound)?;
        if partition >= meta.partitions {
            return Err(ReplayError::PartitionOutOfRange {
                partition,
                count: meta.partitions,
            });
        }
        if !self.owns(&meta, partition) {
            return Err(ReplayError::OwnerUnavailable { partition });
        }
        let destination = Destination {
            topic: Arc::clone(&meta.name),
            partition,
        };
        let one = ReadLimits {
            records_max: 1,
            bytes_max: 1,
        };
        let until = offset.saturating_add(1);
        let cached = self
            .logs
            .current(&destination, meta.incarnation_id.as_ref())
            .and_then(|log| log.read_from_memory(offset, until, one));
        let entry = match cached {
            Some(batch) => Ok(batch.entries.into_iter().next()),
            None => {
                let logs = Arc::clone(&self.logs);
                let incarnation = meta.incarnation_id.clone();
                self.reads_offloaded.fetch_add(1, Ordering::Relaxed);
                tokio::task::spawn_blocking(move || {
                    let log = logs.resolve(&destination, incarnation.as_ref())?;
                    log.read_record(offset)
                })
                .await
                .map_err(|error| ReplayError::Read(format!("partition read failed: {error}")))?
            }
        };
        match entry {
            Ok(None) => Ok(None),
            Ok(Some(ReadEntry::Record(record))) => Ok(Some(record)),
            Ok(Some(ReadEntry::Unreadable { .. })) => Err(ReplayError::Unreadable { offset }),
            Err(LogError::OffsetTrimmed { .. }) => Err(ReplayError::Gone { offset }),
            Err(error) => Err(ReplayError::Read(error.to_string())),
        }
    }

    /// Acks, extends or nacks the lease `partition:offset:nonce`.
    ///
    /// # Errors
    /// [`SettleError::LeaseGone`] when the handle names no live lease
    /// (including a partition the topic does not have);
    /// [`SettleError::TopicNotFound`]; [`SettleError::OwnerUnavailable`].
    pub fn settle(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        nonce: u64,
        how: Settle,
    ) -> Result<(), SettleError> {
        let meta = self
            .replica
            .topic_meta(topic)
            .ok_or(SettleError::TopicNotFound)?;
        if partition >= meta.partitions {
            return Err(SettleError::LeaseGone);
        }
        if !self.owns(&meta, partition) {
            return Err(SettleError::OwnerUnavailable { partition });
        }
        // No shard: no lease was ever handed out here since it started.
        let shard = self
            .existing_shard(&meta, partition)
            .ok_or(SettleError::LeaseGone)?;
        let limits = limits(&meta);
        let now_ms = self.clock.now_ms();
        let (outcome, purged, was_at_cap) = {
            let mut state = shard.state.lock();
            let purged = state.purge_expired(now_ms);
            let was_at_cap = state.in_flight() >= limits.max_in_flight
                || state.acked_ahead_len() >= limits.max_acked_ahead;
            let outcome = state.settle(offset, nonce, how, now_ms, meta.visibility_timeout_ms);
            (outcome, purged, was_at_cap)
        };
        if outcome.is_ok() && how == Settle::Ack {
            shard.touch();
        }
        let returned = outcome.is_ok() && how == Settle::Nack;
        let freed = outcome.is_ok() && how == Settle::Ack && was_at_cap;
        if returned || freed || purged > 0 {
            self.pump(&meta.name);
        }
        outcome.map_err(|_| SettleError::LeaseGone)
    }

    /// The state of every partition with a shard, in topic and partition
    /// order, after purging expired leases (so `in_flight` counts live
    /// ones only). Shards of partitions this node no longer serves (topic
    /// deleted or recreated, partition moved) are dropped first.
    pub fn gauges(&self) -> Vec<PartitionGauges> {
        self.retire_stale_shards();
        let shards: Vec<Arc<PartitionShard>> = self.shards.lock().values().cloned().collect();
        let now_ms = self.clock.now_ms();
        let mut gauges = Vec::with_capacity(shards.len());
        let mut returned: Vec<&Arc<str>> = Vec::new();
        for shard in &shards {
            let high_watermark = shard.log.high_watermark();
            let mut state = shard.state.lock();
            if state.purge_expired(now_ms) > 0 && !returned.contains(&&shard.destination.topic) {
                returned.push(&shard.destination.topic);
            }
            gauges.push(PartitionGauges {
                topic: Arc::clone(&shard.destination.topic),
                partition: shard.destination.partition,
                lag: high_watermark.saturating_sub(state.frontier()),
                in_flight: state.in_flight() as u64,
                acked_ahead: state.acked_ahead_len() as u64,
                dropped: state.dropped_total(),
                corrupt_skipped_total: state.corrupt_skipped_total(),
            });
        }
        for topic in returned {
            self.pump(topic);
        }
        gauges
    }

    /// The consume frontier of owned partition `destination` now, without
    /// making a shard: the live shard's, else the one its consumer-state
    /// files hold (0 when none was written yet). `None` when those files
    /// cannot be read.
    pub fn frontier_now(
        &self,
        destination: &Destination,
        incarnation: Option<&Arc<str>>,
    ) -> Option<u64> {
        self.live_frontier(destination, incarnation)
            .or_else(|| stored_frontier_of(&self.logs, destination))
    }

    /// The frontier of `destination`'s shard for incarnation
    /// `incarnation`, if it has one: the exact, in-memory figure. Never
    /// makes a shard, and holds the one it reads only while reading it.
    pub fn live_frontier(
        &self,
        destination: &Destination,
        incarnation: Option<&Arc<str>>,
    ) -> Option<u64> {
        let shard = self
            .shards
            .lock()
            .get(destination)
            .filter(|shard| shard.incarnation.as_ref() == incarnation)
            .cloned()?;
        let frontier = shard.state.lock().frontier();
        Some(frontier)
    }

    /// The consumer position of owned partition `partition` of `meta` now
    /// (its shard opened if needed): what a move's handoff gives the
    /// partition's next owner. Acks that land after the call are not in it
    /// (their messages are delivered again by the next owner).
    ///
    /// # Errors
    /// The partition's log or consumer state could not be opened.
    pub fn position_now(
        &self,
        meta: &TopicMeta,
        partition: u32,
    ) -> Result<ConsumerPosition, ConsumeError> {
        let shard = self.shard(meta, partition)?;
        let position = shard.state.lock().position();
        Ok(position)
    }

    /// From now on a partition frozen for a move handoff hands out no new
    /// lease while the freeze holds (spec §6: its consume pauses; acks,
    /// extends and nacks go on). Set once; later calls change nothing.
    pub fn pause_when_frozen(&self, freezes: Arc<Freezes>) {
        let _ = self.freezes.set(freezes);
    }

    /// Whether `destination` is frozen for a handoff now.
    pub(crate) fn frozen(&self, destination: &Destination) -> bool {
        self.freezes
            .get()
            .is_some_and(|freezes| freezes.holds(destination, self.clock.now_ms()))
    }

    /// Resolves once `partition` has no live lease or `wait` has passed on
    /// the node's clock (a handoff's bounded wait for outstanding leases);
    /// returns how many are still live.
    ///
    /// # Errors
    /// The partition's log or consumer state could not be opened.
    pub async fn wait_for_leases(
        &self,
        meta: &TopicMeta,
        partition: u32,
        wait: Duration,
    ) -> Result<usize, ConsumeError> {
        let shard = self.shard(meta, partition)?;
        let deadline_ms = self.clock.now_ms().saturating_add(millis(wait));
        loop {
            let now_ms = self.clock.now_ms();
            let live = {
                let mut state = shard.state.lock();
                state.purge_expired(now_ms);
                state.in_flight()
            };
            if live == 0 || now_ms >= deadline_ms {
                return Ok(live);
            }
            let next_ms = now_ms
                .saturating_add(millis(LEASE_WAIT_POLL))
                .min(deadline_ms);
            self.clock.sleep_until(next_ms).await;
        }
    }

    /// Drops the shards of partitions this node no longer serves (a move
    /// flipped away, a topic deleted); their consumer state is no longer
    /// written.
    pub fn retire_moved(&self) {
        self.retire_stale_shards();
    }

    /// Consumes parked on `topic` now (tests, diagnostics).
    pub fn parked(&self, topic: &str) -> usize {
        self.waiters.count(topic)
    }

    /// Pieces of work (a scan, a pump, a claim, a replay) that moved to the
    /// blocking pool because a read needed the disk (tests, diagnostics).
    pub fn reads_offloaded(&self) -> u64 {
        self.reads_offloaded.load(Ordering::Relaxed)
    }

    /// The consumer state store the service persists positions through.
    pub fn consumer_state(&self) -> &Arc<ConsumerStateStore> {
        &self.store
    }

    /// The clock leases lapse and long polls end on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Graceful stop: parked consumes answer empty, new consumes answer
    /// empty at once, then every partition's position is made durable
    /// (blocking fdatasyncs). Idempotent; a second call flushes again, so
    /// acks that landed after the first are made durable too.
    pub fn shutdown(&self) {
        self.shut_down.store(true, Ordering::Release);
        self.waiters.close();
        if let Some(task) = self.timer.task.get() {
            task.abort();
        }
        for shard in self.shards.lock().values() {
            if let Some(watcher) = shard.watcher.lock().take() {
                watcher.abort();
            }
        }
        if let Err(error) = self.store.flush_all() {
            tracing::error!(%error, "consumer positions not all durable at shutdown");
        }
    }

    fn topic(&self, name: &str) -> Result<Arc<TopicMeta>, ConsumeError> {
        self.replica
            .topic_meta(name)
            .ok_or(ConsumeError::TopicNotFound)
    }

    fn owns(&self, meta: &TopicMeta, partition: u32) -> bool {
        meta.owners.get(partition as usize).copied().flatten() == Some(self.replica.local_node())
    }
}

impl Drop for ConsumeService {
    fn drop(&mut self) {
        if let Some(task) = self.timer.task.get() {
            task.abort();
        }
        if let Some(task) = self.metadata_task.get() {
            task.abort();
        }
    }
}

fn check_partition(meta: &TopicMeta, partition: u32) -> Result<(), ConsumeError> {
    if partition >= meta.partitions {
        return Err(ConsumeError::PartitionOutOfRange {
            partition,
            count: meta.partitions,
        });
    }
    Ok(())
}

fn limits(meta: &TopicMeta) -> ShardLimits {
    ShardLimits {
        max_in_flight: (meta.max_in_flight_per_partition as usize).max(1),
        max_acked_ahead: (meta.max_acked_ahead_per_partition as usize).max(1),
    }
}
