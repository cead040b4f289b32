//! The consume service of one node: leases over the partitions it owns,
//! long polls, replays and settles.
//!
//! Each owned partition gets an in-flight shard ([`InFlightShard`]) on
//! first touch, seeded from the consumer state store. A consume purges
//! expired leases, reserves the lowest reservable offset, *then* reads it
//! from the partition log; a damaged record is skipped and counted, an
//! offset retention already deleted moves the frontier to the oldest
//! retained one. A batch takes what is ready (never waits to fill) and
//! stops reserving once its keys and payloads reach
//! [`ConsumeConfig::batch_bytes_max`].
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
//! For delivery tokens (`hold`), a record can be leased for a short hold
//! on behalf of another node and turned into a full lease by that node's
//! claim; an unclaimed hold lapses as any lease does.
//!
//! What it does not do: serve partitions owned elsewhere (queue consumes
//! skip them, pinned ones get [`ConsumeError::OwnerUnavailable`]; forwarding
//! is issue #8), or count delivery metrics (the HTTP layer does, from what
//! it returns); [`ConsumeService::gauges`] reports the per-partition state.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use narad_plog::{HwmWatch, LogError, PartitionLog, ReadEntry, ReadLimits, Record};
use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::AbortHandle;

use super::ahead::{ConsumerPosition, ConsumerStateStore, PositionSource, StateTicket};
use super::clock::Clock;
use super::shard::{InFlightShard, Reserve, Settle, ShardLimits};
use super::waiters::{Line, Waiters};
use crate::commit::{LocalLogs, partition_dir};
use crate::metadata::{MetadataReplica, TopicMeta};
use crate::topology::Destination;

mod hold;

pub use hold::HeldRecord;

/// Records one consume returns at most (`max` is clamped to it).
pub const CONSUME_RECORDS_MAX: usize = 100;

/// Default bound on the keys and payloads one consume reserves: 4 MiB.
pub const BATCH_BYTES_MAX_DEFAULT: usize = 4 << 20;

/// Default cap on a long poll (`http.max_consume_wait`): 10 s.
pub const MAX_WAIT_DEFAULT: Duration = Duration::from_secs(10);

/// How the service serves consumes.
#[derive(Clone, Debug)]
pub struct ConsumeConfig {
    /// Longest long poll; longer waits are cut to it.
    pub max_wait: Duration,
    /// A consume stops reserving once the keys and payloads it took reach
    /// this (its first record is always taken).
    pub batch_bytes_max: usize,
}

impl Default for ConsumeConfig {
    fn default() -> Self {
        Self {
            max_wait: MAX_WAIT_DEFAULT,
            batch_bytes_max: BATCH_BYTES_MAX_DEFAULT,
        }
    }
}

/// One consume.
#[derive(Clone, Debug)]
pub struct ConsumeRequest {
    /// The topic.
    pub topic: String,
    /// Only this partition, if given.
    pub partition: Option<u32>,
    /// Records wanted at most, `1..=100` (clamped).
    pub max: usize,
    /// How long to wait when nothing is ready (cut to the configured
    /// maximum).
    pub wait: Duration,
}

/// One leased record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Its topic.
    pub topic: Arc<str>,
    /// Its partition.
    pub partition: u32,
    /// The record (its offset included).
    pub record: Record,
    /// The lease's nonce: with partition and offset, the receipt handle.
    pub nonce: u64,
}

/// Why a consume was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumeError {
    /// No such topic.
    #[error("topic not found")]
    TopicNotFound,
    /// The pinned partition does not exist.
    #[error("partition {partition} out of range: topic has {count} partitions")]
    PartitionOutOfRange {
        /// The partition asked for.
        partition: u32,
        /// The topic's partition count.
        count: u32,
    },
    /// The pinned partition is not owned by this node.
    #[error("partition {partition} is owned by another node")]
    OwnerUnavailable {
        /// The partition asked for.
        partition: u32,
    },
    /// Reading a partition log failed.
    #[error("consume failed: {0}")]
    Read(String),
}

/// Why a replay was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// No such topic.
    #[error("topic not found")]
    TopicNotFound,
    /// The partition does not exist.
    #[error("partition {partition} out of range: topic has {count} partitions")]
    PartitionOutOfRange {
        /// The partition asked for.
        partition: u32,
        /// The topic's partition count.
        count: u32,
    },
    /// Retention deleted the offset.
    #[error("offset {offset} aged out of retention")]
    Gone {
        /// The offset asked for.
        offset: u64,
    },
    /// The record is damaged on disk.
    #[error("offset {offset} is unreadable")]
    Unreadable {
        /// The offset asked for.
        offset: u64,
    },
    /// The partition is not owned by this node.
    #[error("partition {partition} is owned by another node")]
    OwnerUnavailable {
        /// The partition asked for.
        partition: u32,
    },
    /// Reading the partition log failed.
    #[error("replay failed: {0}")]
    Read(String),
}

/// Why an ack, extend or nack was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettleError {
    /// No such topic.
    #[error("topic not found")]
    TopicNotFound,
    /// The handle names no live lease (lapsed, settled already, leased
    /// again, or an unknown partition).
    #[error("receipt handle no longer matches an active reservation")]
    LeaseGone,
    /// The partition is not owned by this node.
    #[error("partition {partition} is owned by another node")]
    OwnerUnavailable {
        /// The handle's partition.
        partition: u32,
    },
    /// Kept for the forwarded settle (issue #8); a local settle does no
    /// I/O and never returns it.
    #[error("settle failed: {0}")]
    Read(String),
}

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

/// What a pump sends a parked consume.
type Reply = Result<Handoff, ConsumeError>;

/// Records handed to a parked consume. Dropped without
/// [`Handoff::open`] (the consume went away first), it releases their
/// leases so they are redelivered at once.
#[derive(Debug)]
struct Handoff {
    service: Weak<ConsumeService>,
    deliveries: Vec<Delivery>,
}

impl Handoff {
    fn open(mut self) -> Vec<Delivery> {
        std::mem::take(&mut self.deliveries)
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        if self.deliveries.is_empty() {
            return;
        }
        if let Some(service) = self.service.upgrade() {
            service.release(&self.deliveries);
        }
    }
}

/// One owned partition: its log, its shard, its persistence ticket.
#[derive(Debug)]
struct PartitionShard {
    destination: Destination,
    incarnation: Option<Arc<str>>,
    dir: PathBuf,
    log: Arc<PartitionLog>,
    state: Mutex<InFlightShard>,
    ticket: OnceLock<StateTicket>,
    watcher: Mutex<Option<AbortHandle>>,
}

impl PositionSource for PartitionShard {
    fn position(&self) -> ConsumerPosition {
        self.state.lock().position()
    }
}

impl PartitionShard {
    fn touch(&self) {
        if let Some(ticket) = self.ticket.get() {
            ticket.touched();
        }
    }
}

impl Drop for PartitionShard {
    fn drop(&mut self) {
        if let Some(watcher) = self.watcher.get_mut().take() {
            watcher.abort();
        }
    }
}

/// The single expiry timer: sleeps until the earliest lease expiry that a
/// parked consume waits on.
#[derive(Debug, Default)]
struct ExpiryTimer {
    at_ms: Mutex<Option<u64>>,
    rearm: Notify,
    task: OnceLock<AbortHandle>,
}

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
}

/// What one consume has taken so far.
#[derive(Debug)]
struct Batch {
    deliveries: Vec<Delivery>,
    bytes: usize,
    records_max: usize,
    bytes_max: usize,
}

impl Batch {
    fn full(&self) -> bool {
        self.deliveries.len() >= self.records_max || self.bytes >= self.bytes_max
    }

    fn push(&mut self, delivery: Delivery) {
        self.bytes += delivery.record.key.len() + delivery.record.payload.len();
        self.deliveries.push(delivery);
    }
}

impl ConsumeService {
    /// A service over `logs` for the partitions `replica` says this node
    /// owns, persisting positions through `store` (whose worker the caller
    /// runs). `seed` seeds each partition's nonce stream together with the
    /// partition's name; it must differ between process starts, or handles
    /// from before a restart could match new leases.
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
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let deadline_ms = self.clock.now_ms().saturating_add(wait_ms);
        let ready = self.scan(&meta, request.partition, max)?;
        if !ready.is_empty() || wait_ms == 0 {
            return Ok(ready);
        }
        self.park(&meta, request.partition, max, deadline_ms).await
    }

    /// Reads the record at `offset` without leasing it. `None` when the
    /// offset is at or past the high watermark.
    ///
    /// # Errors
    /// [`ReplayError::Gone`] when retention deleted it,
    /// [`ReplayError::Unreadable`] when it is damaged, and the lookup
    /// errors.
    pub fn replay(
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
        let log = self
            .logs
            .resolve(&destination, meta.incarnation_id.as_ref())
            .map_err(|error| ReplayError::Read(error.to_string()))?;
        match log.read_record(offset) {
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

    /// Consumes parked on `topic` now (tests, diagnostics).
    pub fn parked(&self, topic: &str) -> usize {
        self.waiters.count(topic)
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

    /// Takes up to `max` ready records of the topic (or of the pinned
    /// partition), scanning partitions from a rotating start.
    fn scan(
        &self,
        meta: &TopicMeta,
        pinned: Option<u32>,
        max: usize,
    ) -> Result<Vec<Delivery>, ConsumeError> {
        let mut batch = Batch {
            deliveries: Vec::new(),
            bytes: 0,
            records_max: max,
            bytes_max: self.config.batch_bytes_max,
        };
        let order: Vec<u32> = match pinned {
            Some(partition) => vec![partition],
            None => {
                let start = self.rotation.fetch_add(1, Ordering::Relaxed) % meta.partitions;
                (start..meta.partitions).chain(0..start).collect()
            }
        };
        let mut failure = None;
        for partition in order {
            if batch.full() {
                break;
            }
            if !self.owns(meta, partition) {
                if pinned.is_some() {
                    return Err(ConsumeError::OwnerUnavailable { partition });
                }
                continue;
            }
            let taken = self
                .shard(meta, partition)
                .and_then(|shard| self.take_from(&shard, meta, &mut batch));
            if let Err(error) = taken {
                tracing::warn!(topic = %meta.name, partition, %error, "consume could not read a partition");
                failure.get_or_insert(error);
            }
        }
        match failure {
            Some(error) if batch.deliveries.is_empty() => Err(error),
            _ => Ok(batch.deliveries),
        }
    }

    /// Reserves and reads records of one partition into `batch` until it
    /// is full or the partition has nothing more to give.
    fn take_from(
        &self,
        shard: &PartitionShard,
        meta: &TopicMeta,
        batch: &mut Batch,
    ) -> Result<(), ConsumeError> {
        let limits = limits(meta);
        let mut ahead = ReadAhead::default();
        while !batch.full() {
            let now_ms = self.clock.now_ms();
            let high_watermark = shard.log.high_watermark();
            let reserved = {
                let mut state = shard.state.lock();
                state.purge_expired(now_ms);
                state.reserve(now_ms, high_watermark, meta.visibility_timeout_ms, limits)
            };
            let Reserve::Reserved(lease) = reserved else {
                return Ok(());
            };
            let records_left = batch.records_max - batch.deliveries.len();
            let bytes_left = batch.bytes_max.saturating_sub(batch.bytes).max(1);
            let entry = ahead.entry(&shard.log, lease.offset, records_left, bytes_left);
            match read_leased(shard, lease.offset, lease.nonce, entry) {
                Leased::Record(record) => batch.push(Delivery {
                    topic: Arc::clone(&meta.name),
                    partition: shard.destination.partition,
                    record,
                    nonce: lease.nonce,
                }),
                Leased::Skipped => {}
                Leased::Stop(outcome) => return outcome,
            }
        }
        Ok(())
    }

    /// The shard of an owned partition, made on first touch: the log is
    /// opened and the position loaded from the consumer state store.
    fn shard(&self, meta: &TopicMeta, partition: u32) -> Result<Arc<PartitionShard>, ConsumeError> {
        let destination = Destination {
            topic: Arc::clone(&meta.name),
            partition,
        };
        if let Some(shard) = self.existing_shard(meta, partition) {
            self.ensure_watcher(&shard);
            return Ok(shard);
        }
        // Opening reads and syncs files: it runs under this partition's
        // gate only, so consumes and settles of other partitions go on.
        let gate = Arc::clone(self.opening.lock().entry(destination.clone()).or_default());
        let opened = {
            let _gate = gate.lock();
            self.open_shard(&destination, meta)
        };
        {
            let mut opening = self.opening.lock();
            if opening
                .get(&destination)
                .is_some_and(|entry| Arc::ptr_eq(entry, &gate) && Arc::strong_count(entry) == 2)
            {
                opening.remove(&destination);
            }
        }
        let shard = opened?;
        self.ensure_watcher(&shard);
        Ok(shard)
    }

    /// Makes the shard of `destination` unless another consume made it
    /// meanwhile; a shard of an older incarnation is detached first.
    fn open_shard(
        &self,
        destination: &Destination,
        meta: &TopicMeta,
    ) -> Result<Arc<PartitionShard>, ConsumeError> {
        if let Some(shard) = self.existing_shard(meta, destination.partition) {
            return Ok(shard);
        }
        // A request holding an older view of the topic must not replace
        // the live incarnation's shard.
        let live = self.replica.topic_meta(&destination.topic);
        if live.is_none_or(|live| live.incarnation_id != meta.incarnation_id) {
            return Err(ConsumeError::Read(format!(
                "topic {} changed during the request",
                destination.topic
            )));
        }
        // The topic was deleted and made again under the same name.
        let stale = self.shards.lock().remove(destination);
        if let Some(stale) = stale {
            self.store.detach(&stale.dir);
        }
        let log = self
            .logs
            .resolve(destination, meta.incarnation_id.as_ref())
            .map_err(|error| ConsumeError::Read(error.to_string()))?;
        let shard = self.attach_shard(destination.clone(), meta, log)?;
        self.shards
            .lock()
            .insert(destination.clone(), Arc::clone(&shard));
        Ok(shard)
    }

    fn attach_shard(
        &self,
        destination: Destination,
        meta: &TopicMeta,
        log: Arc<PartitionLog>,
    ) -> Result<Arc<PartitionShard>, ConsumeError> {
        let dir = partition_dir(&self.data_dir, &destination.topic, destination.partition);
        let nonce_seed = nonce_seed(self.seed, &destination, meta.incarnation_id.as_deref());
        let shard = Arc::new(PartitionShard {
            destination,
            incarnation: meta.incarnation_id.clone(),
            dir,
            log,
            state: Mutex::new(InFlightShard::new(ConsumerPosition::default(), nonce_seed)),
            ticket: OnceLock::new(),
            watcher: Mutex::new(None),
        });
        let source: Weak<dyn PositionSource> = Arc::downgrade(&shard) as Weak<PartitionShard>;
        {
            // Held across attach so that the store, which may ask for the
            // position as soon as attach registered it, waits for the
            // seeded state instead of reading the placeholder. The store
            // cannot ask this shard during attach itself: it is not
            // registered before attach returns.
            let mut state = shard.state.lock();
            let (position, ticket) = self
                .store
                .attach(&shard.dir, source)
                .map_err(|error| ConsumeError::Read(error.to_string()))?;
            *state = InFlightShard::new(position, nonce_seed);
            // Set once, right after the shard was made.
            let _ = shard.ticket.set(ticket);
        }
        Ok(shard)
    }

    fn existing_shard(&self, meta: &TopicMeta, partition: u32) -> Option<Arc<PartitionShard>> {
        let destination = Destination {
            topic: Arc::clone(&meta.name),
            partition,
        };
        self.shards
            .lock()
            .get(&destination)
            .filter(|shard| shard.incarnation == meta.incarnation_id)
            .cloned()
    }

    fn retire_stale_shards(&self) {
        let view = self.replica.view();
        let local = self.replica.local_node();
        let mut shards = self.shards.lock();
        let stale: Vec<Destination> = shards
            .iter()
            .filter(|(destination, shard)| {
                view.topics.get(&destination.topic).is_none_or(|meta| {
                    meta.incarnation_id != shard.incarnation
                        || meta
                            .owners
                            .get(destination.partition as usize)
                            .copied()
                            .flatten()
                            != Some(local)
                })
            })
            .map(|(destination, _)| destination.clone())
            .collect();
        for destination in stale {
            if let Some(shard) = shards.remove(&destination) {
                self.store.detach(&shard.dir);
                tracing::info!(%destination, "consume shard retired: partition no longer served here");
            }
        }
    }

    /// Parks a consume until the pump answers it or `deadline_ms` passes.
    async fn park(
        &self,
        meta: &Arc<TopicMeta>,
        partition: Option<u32>,
        max: usize,
        deadline_ms: u64,
    ) -> Result<Vec<Delivery>, ConsumeError> {
        let topic = &meta.name;
        let Some((id, mut reply)) = self.waiters.park(topic, partition, max) else {
            if self.shut_down.load(Ordering::Acquire) {
                return Ok(Vec::new());
            }
            // The line is full: wait without a place in it, look once.
            self.clock.sleep_until(deadline_ms).await;
            return self.scan(meta, partition, max);
        };
        let parked = Parked {
            waiters: &self.waiters,
            topic,
            id,
        };
        self.pump(topic);
        tokio::select! {
            biased;
            answer = &mut reply => return opened(answer),
            () = self.clock.sleep_until(deadline_ms) => {}
        }
        if self.waiters.remove(topic, id) {
            return Ok(Vec::new());
        }
        drop(parked);
        // A pump holds this waiter right now; its answer is on the way.
        opened(reply.await)
    }

    /// Serves the waiters of `topic` until one finds nothing.
    fn pump(&self, topic: &Arc<str>) {
        if !self.waiters.begin_pump(topic) {
            return;
        }
        loop {
            self.pump_pass(topic);
            if !self.waiters.finish_pass(topic) {
                break;
            }
        }
    }

    fn pump_pass(&self, topic: &Arc<str>) {
        let Some(meta) = self.replica.topic_meta(topic) else {
            self.waiters.drain_topic(topic);
            return;
        };
        for line in self.waiters.lines(topic) {
            self.serve_line(&meta, line);
        }
        if self.waiters.has_waiters(topic)
            && let Some(at_ms) = self.next_expiry_ms(topic)
        {
            self.arm_timer(at_ms);
        }
    }

    fn serve_line(&self, meta: &TopicMeta, line: Line) {
        while let Some(waiter) = self.waiters.pop(&meta.name, line) {
            if waiter.reply.is_closed() {
                continue;
            }
            let answer = match self.scan(meta, waiter.partition, waiter.max) {
                Ok(deliveries) if deliveries.is_empty() => {
                    self.waiters.put_back(&meta.name, waiter);
                    return;
                }
                Ok(deliveries) => Ok(Handoff {
                    service: self.this.clone(),
                    deliveries,
                }),
                Err(error) => Err(error),
            };
            // A consume gone since: the unopened handoff drops here and
            // gives its leases back.
            let _ = waiter.reply.send(answer);
        }
    }

    /// Gives back the leases of records a consume never received, and
    /// lets waiters have them.
    fn release(&self, deliveries: &[Delivery]) {
        let mut topics: Vec<Arc<str>> = Vec::new();
        for delivery in deliveries {
            let destination = Destination {
                topic: Arc::clone(&delivery.topic),
                partition: delivery.partition,
            };
            let shard = self.shards.lock().get(&destination).cloned();
            if let Some(shard) = shard {
                shard
                    .state
                    .lock()
                    .release(delivery.record.offset, delivery.nonce);
            }
            if !topics.contains(&delivery.topic) {
                topics.push(Arc::clone(&delivery.topic));
            }
        }
        for topic in topics {
            self.pump(&topic);
        }
    }

    fn next_expiry_ms(&self, topic: &str) -> Option<u64> {
        let shards: Vec<Arc<PartitionShard>> = self
            .shards
            .lock()
            .values()
            .filter(|shard| &*shard.destination.topic == topic)
            .cloned()
            .collect();
        shards
            .iter()
            .filter_map(|shard| shard.state.lock().next_expiry_ms())
            .min()
    }

    fn arm_timer(&self, at_ms: u64) {
        let mut armed = self.timer.at_ms.lock();
        if armed.is_none_or(|current| at_ms < current) {
            *armed = Some(at_ms);
            self.timer.rearm.notify_one();
        }
    }

    /// Remembers the runtime and starts the expiry timer, on the first
    /// consume (the service is built outside any runtime).
    fn start_runtime_tasks(&self) {
        if self.runtime.get().is_some() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.runtime.set(handle.clone()).is_err() {
            return;
        }
        let task = handle.spawn(run_expiry_timer(
            self.this.clone(),
            Arc::clone(&self.timer),
            Arc::clone(&self.clock),
        ));
        let _ = self.timer.task.set(task.abort_handle());
        let task = handle.spawn(watch_metadata(
            self.this.clone(),
            self.replica.watch_changes(),
        ));
        let _ = self.metadata_task.set(task.abort_handle());
    }

    /// Starts the shard's high-watermark watcher if it has none.
    fn ensure_watcher(&self, shard: &PartitionShard) {
        let Some(handle) = self.runtime.get() else {
            return;
        };
        if self.shut_down.load(Ordering::Acquire) {
            return;
        }
        let mut watcher = shard.watcher.lock();
        if watcher.is_none() {
            // The starting point is taken now, before the caller reads the
            // log: a commit landing before the task first runs still wakes
            // it.
            let watch = shard.log.watch_high_watermark();
            let seen = watch.high_watermark();
            let task = handle.spawn(watch_commits(
                self.this.clone(),
                Arc::clone(&shard.destination.topic),
                watch,
                seen,
            ));
            *watcher = Some(task.abort_handle());
        }
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

/// Removes a parked consume from its line when the consume goes away.
struct Parked<'a> {
    waiters: &'a Waiters<Reply>,
    topic: &'a str,
    id: u64,
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.waiters.remove(self.topic, self.id);
    }
}

fn opened(answer: Result<Reply, oneshot::error::RecvError>) -> Result<Vec<Delivery>, ConsumeError> {
    match answer {
        Ok(Ok(handoff)) => Ok(handoff.open()),
        Ok(Err(error)) => Err(error),
        // The table closed (shutdown) or the topic went away.
        Err(_) => Ok(Vec::new()),
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

/// A partition's nonce seed: the service seed mixed with its name and
/// incarnation (SplitMix64 steps), so partitions draw unrelated streams.
fn nonce_seed(seed: u64, destination: &Destination, incarnation: Option<&str>) -> u64 {
    let mut state = seed;
    let bytes = destination
        .topic
        .bytes()
        .chain([0xff])
        .chain(destination.partition.to_be_bytes())
        .chain(incarnation.unwrap_or("").bytes());
    for byte in bytes {
        state = splitmix64(state ^ u64::from(byte));
    }
    state
}

fn splitmix64(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What became of a leased offset once read.
#[derive(Debug)]
enum Leased {
    /// Deliver it.
    Record(Record),
    /// Settled as unreadable, or passed over by retention: look further.
    Skipped,
    /// Released: the log no longer has it (`Ok`), or the read failed.
    Stop(Result<(), ConsumeError>),
}

/// Settles what reading the leased `offset` found: a record is delivered;
/// an unreadable one is skipped for good; an offset retention deleted
/// moves the frontier to the oldest kept; a log that no longer has it
/// (closed or replaced under us: transient, never a gap) or a failed read
/// releases the lease.
fn read_leased(
    shard: &PartitionShard,
    offset: u64,
    nonce: u64,
    entry: Result<Option<ReadEntry>, LogError>,
) -> Leased {
    match entry {
        Ok(Some(ReadEntry::Record(record))) => {
            assert_eq!(
                record.offset, offset,
                "read a record other than the leased one"
            );
            Leased::Record(record)
        }
        Ok(Some(ReadEntry::Unreadable { .. })) => {
            shard.state.lock().skip_unreadable(offset..offset + 1);
            shard.touch();
            tracing::warn!(destination = %shard.destination, offset, "skipped permanently-unreadable record");
            Leased::Skipped
        }
        Err(LogError::OffsetTrimmed { oldest, .. }) => {
            let gap = shard.state.lock().skip_to(oldest);
            shard.touch();
            tracing::warn!(destination = %shard.destination, oldest, gap, "consumer frontier fell behind retention; skipped to oldest retained offset");
            Leased::Skipped
        }
        Ok(None) | Err(LogError::Closed) => {
            shard.state.lock().release(offset, nonce);
            Leased::Stop(Ok(()))
        }
        Err(error) => {
            shard.state.lock().release(offset, nonce);
            Leased::Stop(Err(ConsumeError::Read(error.to_string())))
        }
    }
}

/// Reads ahead of the offset being leased, so a batch of consecutive
/// offsets costs one log read (one frame decode) rather than one per
/// record. Records are immutable, so reading before leasing is harmless:
/// only leased offsets are ever delivered.
#[derive(Debug, Default)]
struct ReadAhead {
    entries: VecDeque<ReadEntry>,
}

impl ReadAhead {
    fn entry(
        &mut self,
        log: &PartitionLog,
        offset: u64,
        records_max: usize,
        bytes_max: usize,
    ) -> Result<Option<ReadEntry>, LogError> {
        if let Some(entry) = self.cached(offset) {
            return Ok(Some(entry));
        }
        let read = log.read(
            offset,
            u64::MAX,
            ReadLimits {
                records_max: records_max.max(1),
                bytes_max,
            },
        )?;
        self.entries = read.entries.into();
        Ok(self.cached(offset))
    }

    fn cached(&mut self, offset: u64) -> Option<ReadEntry> {
        loop {
            let (start, end) = match self.entries.front()? {
                ReadEntry::Record(record) => (record.offset, record.offset + 1),
                ReadEntry::Unreadable { offsets } => (offsets.start, offsets.end),
            };
            if end <= offset {
                self.entries.pop_front();
                continue;
            }
            if start > offset {
                return None;
            }
            return match self.entries.front()? {
                ReadEntry::Record(_) => self.entries.pop_front(),
                ReadEntry::Unreadable { .. } => Some(ReadEntry::Unreadable {
                    offsets: offset..offset + 1,
                }),
            };
        }
    }
}

/// Sleeps until the armed expiry, then pumps every topic with waiters.
async fn run_expiry_timer(
    service: Weak<ConsumeService>,
    timer: Arc<ExpiryTimer>,
    clock: Arc<dyn Clock>,
) {
    loop {
        let armed = *timer.at_ms.lock();
        let Some(at_ms) = armed else {
            timer.rearm.notified().await;
            continue;
        };
        tokio::select! {
            () = clock.sleep_until(at_ms) => {}
            () = timer.rearm.notified() => continue,
        }
        {
            let mut armed = timer.at_ms.lock();
            if *armed == Some(at_ms) {
                *armed = None;
            }
        }
        let Some(service) = service.upgrade() else {
            return;
        };
        for topic in service.waiters.topics() {
            service.pump(&topic);
        }
    }
}

/// Pumps every topic with waiters after each metadata change: a parked
/// consume skipped partitions that had no owner yet (a topic created a
/// moment ago) or were at a cap, and a commit to such a partition wakes no
/// watcher until a pump has opened its shard.
async fn watch_metadata(service: Weak<ConsumeService>, mut changes: watch::Receiver<u64>) {
    while changes.changed().await.is_ok() {
        let Some(service) = service.upgrade() else {
            return;
        };
        for topic in service.waiters.topics() {
            service.pump(&topic);
        }
    }
}

/// Pumps the topic's waiters whenever the partition's high watermark
/// moves past `seen`; ends when the log closes or the service is gone.
async fn watch_commits(
    service: Weak<ConsumeService>,
    topic: Arc<str>,
    mut watch: HwmWatch,
    mut seen: u64,
) {
    while let Ok(high_watermark) = watch.wait_beyond(seen).await {
        seen = high_watermark;
        let Some(service) = service.upgrade() else {
            return;
        };
        // Unconditionally: a waiter a running pump holds is in no line, so
        // "anyone waiting?" would say no and the pump would put it back
        // without having seen this commit. Asking for a pump while one
        // runs makes that pump go round again.
        service.pump(&topic);
    }
}
