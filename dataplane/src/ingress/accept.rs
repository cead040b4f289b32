//! The accept stage: check a produce against the local replica, choose its
//! partition, stage it into the ingress WAL and wait for the group commit.
//! A caller is told `Ok` only once the fdatasync covering its records
//! completed.

use std::sync::Arc;
use std::time::Duration;

use narad_clock::Clock;

use narad_wal::record::{IDEMPOTENCY_KEY_BYTES_MAX, KEY_BYTES_MAX};
use narad_wal::{Wal, WalError, WalRecordRef};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::partition::{RoundRobin, key_partition};
use super::schema::{SchemaCache, SchemaError};
use crate::metadata::{MetadataReplica, TopicMeta};

/// Largest message payload (spec §1.1): 1 MiB, exactly that size allowed.
pub const MESSAGE_BYTES_MAX: usize = 1024 * 1024;

/// Most messages in one batch produce (v3.2).
pub const BATCH_MESSAGES_MAX: usize = 1_000;

/// Largest batch produce body, as sent or decoded (v3.2).
pub const BATCH_BODY_BYTES_MAX: usize = 16 * 1024 * 1024;

// A whole batch of maximal payloads is still one WAL append of records each
// under the WAL's record limit.
const _: () = assert!(MESSAGE_BYTES_MAX + KEY_BYTES_MAX < narad_wal::record::RECORD_BYTES_MAX);

/// Payloads larger than this are validated under a validation slot: a
/// large payload can cost milliseconds of CPU, and unbounded concurrent
/// validations would starve request handling.
pub const SCHEMA_SLOT_PAYLOAD_BYTES_MIN: usize = 16 * 1024;

/// How long a produce waits for a validation slot before it is refused
/// with `503` (the spec's 5 s).
pub const SCHEMA_SLOT_WAIT: Duration = Duration::from_secs(5);

/// The refusal text when no validation slot freed up in time (wire
/// contract §7.2: clients read "schema validation slot" as "nothing
/// stored").
pub const SCHEMA_BUSY_TEXT: &str = "schema: validation capacity busy, retry: no schema validation slot on this node freed up within 5s, so the payload was not validated; retry, preferably through another node";

/// One message to accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProduceMessage {
    /// The key; empty means none.
    pub key: Vec<u8>,
    /// A pinned partition, if any (it wins over the key).
    pub partition: Option<u32>,
    /// The payload, stored byte for byte.
    pub payload: bytes::Bytes,
    /// The producer's idempotency key; empty means none. A message with a
    /// key its partition stored within the topic's window is acknowledged
    /// and not stored again. Without a key and a partition, the message
    /// goes to the partition this key hashes to, so every retry meets the
    /// first copy.
    pub idempotency_key: Vec<u8>,
}

/// Why a produce was refused. Nothing of a refused produce was staged,
/// except for [`AcceptError::Wal`], after which records may survive.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcceptError {
    /// No such topic in the replica.
    #[error("topic not found")]
    TopicNotFound,
    /// The topic is a delay child, fed only by its parent.
    #[error("direct produce to a delayed child topic is not allowed")]
    DelayedChild,
    /// The topic is a remote child's stub: its records live on the remote.
    #[error("{}", narad_meta::MetastoreError::RemoteStub { name: name.clone(), remote: remote.clone() })]
    RemoteChild {
        /// The stub.
        name: String,
        /// The remote it lives on.
        remote: String,
    },
    /// The payload is empty.
    #[error("message required")]
    Empty,
    /// The payload is over [`MESSAGE_BYTES_MAX`].
    #[error("message too large")]
    TooLarge,
    /// The key is over the WAL's key limit.
    #[error("invalid key: longer than {KEY_BYTES_MAX} bytes")]
    KeyTooLong,
    /// The idempotency key is empty, too long, or not visible ASCII.
    #[error(
        "invalid idempotency key: want 1 to {IDEMPOTENCY_KEY_BYTES_MAX} visible ASCII characters"
    )]
    IdempotencyKeyInvalid,
    /// A pinned partition the topic does not have.
    #[error("partition {partition} out of range: topic has {partitions} partitions")]
    PartitionOutOfRange {
        /// The partition asked for.
        partition: u32,
        /// The topic's partition count.
        partitions: u32,
    },
    /// The topic's schema refused the payload.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// No schema validation slot freed up in time (`503`).
    #[error("{SCHEMA_BUSY_TEXT}")]
    SchemaBusy,
    /// The WAL refused or failed the append (`500 produce failed`).
    #[error("produce failed: {0}")]
    Wal(#[from] WalError),
}

/// A refusal of one message of a batch: `message <index>: <error>`.
#[derive(Debug, thiserror::Error)]
#[error("message {index}: {error}")]
pub struct BatchRefusal {
    /// Zero-based index of the first failing message.
    pub index: usize,
    /// Why.
    pub error: AcceptError,
}

/// The accept stage of one data node.
#[derive(Debug)]
pub struct Acceptor {
    wal: Arc<Wal>,
    replica: Arc<MetadataReplica>,
    round_robin: RoundRobin,
    schemas: SchemaCache,
    /// The node's clock: records are stamped with its wall reading, and
    /// idle round-robin rotations are forgotten on its monotonic one.
    clock: Arc<dyn Clock>,
    validation_slots: Arc<Semaphore>,
    /// How many slots `validation_slots` was made with.
    validation_slots_total: usize,
    validation_wait: Duration,
    /// Where each schema validation's time goes
    /// (`narad_schema_validation_seconds`; nowhere until
    /// [`Acceptor::with_validation_timer`]).
    validation_seconds: metrics::Histogram,
}

/// A message checked and placed, ready to stage.
#[derive(Debug)]
struct Placed<'a> {
    partition: u32,
    message: &'a ProduceMessage,
}

impl Acceptor {
    /// An accept stage appending to `wal`, placing by `replica`, with
    /// rotation starts drawn from `seed`, on the node's `clock`.
    pub fn new(
        wal: Arc<Wal>,
        replica: Arc<MetadataReplica>,
        seed: u64,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let slots = std::thread::available_parallelism().map_or(1, usize::from);
        Self {
            wal,
            replica,
            round_robin: RoundRobin::new(seed),
            schemas: SchemaCache::default(),
            clock,
            validation_slots: Arc::new(Semaphore::new(slots)),
            validation_slots_total: slots,
            validation_wait: SCHEMA_SLOT_WAIT,
            validation_seconds: metrics::Histogram::noop(),
        }
    }

    /// Records the time of each schema validation (a payload produced to a
    /// topic with a schema, whatever the verdict) in `seconds`.
    pub fn with_validation_timer(mut self, seconds: metrics::Histogram) -> Self {
        self.validation_seconds = seconds;
        self
    }

    /// Sets the number of validation slots and how long a produce waits
    /// for one (tests shrink both).
    pub fn with_validation_slots(mut self, slots: usize, wait: Duration) -> Self {
        self.validation_slots = Arc::new(Semaphore::new(slots));
        self.validation_slots_total = slots;
        self.validation_wait = wait;
        self
    }

    /// A validation slot when `messages` need one: a schema topic and a
    /// payload over [`SCHEMA_SLOT_PAYLOAD_BYTES_MIN`]. One slot covers the
    /// whole request.
    async fn validation_slot(
        &self,
        topic: &TopicMeta,
        messages: &[ProduceMessage],
    ) -> Result<Option<OwnedSemaphorePermit>, AcceptError> {
        let costly = topic.schema().is_some()
            && messages
                .iter()
                .any(|message| message.payload.len() > SCHEMA_SLOT_PAYLOAD_BYTES_MIN);
        if !costly {
            return Ok(None);
        }
        let slot = Arc::clone(&self.validation_slots).acquire_owned();
        match tokio::time::timeout(self.validation_wait, slot).await {
            Ok(Ok(permit)) => Ok(Some(permit)),
            _ => Err(AcceptError::SchemaBusy),
        }
    }

    /// Costly schema validations holding a slot now
    /// (`narad_schema_validations_in_flight`).
    pub fn validations_in_flight(&self) -> usize {
        self.validation_slots_total
            .saturating_sub(self.validation_slots.available_permits())
    }

    /// The WAL this stage appends to.
    pub fn wal(&self) -> &Arc<Wal> {
        &self.wal
    }

    /// The topic under `name`, for checks that come before the body.
    ///
    /// # Errors
    /// [`AcceptError::TopicNotFound`], [`AcceptError::DelayedChild`],
    /// [`AcceptError::RemoteChild`].
    pub fn producible_topic(&self, name: &str) -> Result<Arc<TopicMeta>, AcceptError> {
        let topic = self
            .replica
            .topic_meta(name)
            .ok_or(AcceptError::TopicNotFound)?;
        if topic.fanout_delay_ms() > 0 {
            return Err(AcceptError::DelayedChild);
        }
        if let Some(link) = &topic.remote {
            return Err(AcceptError::RemoteChild {
                name: name.to_owned(),
                remote: link.remote.clone(),
            });
        }
        Ok(topic)
    }

    /// Accepts one message: checks, places and stages it, and returns its
    /// WAL sequence number once it is durable.
    ///
    /// # Errors
    /// [`AcceptError`]; nothing is staged unless it is [`AcceptError::Wal`].
    pub async fn accept(
        &self,
        topic: &TopicMeta,
        message: &ProduceMessage,
    ) -> Result<u64, AcceptError> {
        check_format(message)?;
        let slot = self
            .validation_slot(topic, std::slice::from_ref(message))
            .await?;
        let placed = self.place(topic, message)?;
        drop(slot);
        let created_at = self.clock.unix_ms();
        let record = record_of(topic, &placed, created_at);
        let pending = self.wal.append_records(std::slice::from_ref(&record))?;
        let seqs = pending.await?;
        Ok(seqs.start)
    }

    /// Accepts a batch all or nothing: every message is checked (format
    /// first, then partition range and schema) before any is staged; then
    /// all are staged in one append, with consecutive sequence numbers and
    /// one accept time, and the call returns once the last is durable.
    ///
    /// # Errors
    /// The first failing message's [`BatchRefusal`] (nothing staged), or a
    /// WAL failure with index 0 and [`AcceptError::Wal`] (the batch is not
    /// acknowledged; a synced prefix may survive).
    pub async fn accept_batch(
        &self,
        topic: &TopicMeta,
        messages: &[ProduceMessage],
    ) -> Result<usize, BatchRefusal> {
        assert!(
            messages.len() <= BATCH_MESSAGES_MAX,
            "batch of {} messages reached the accept stage",
            messages.len()
        );
        for (index, message) in messages.iter().enumerate() {
            check_format(message).map_err(|error| BatchRefusal { index, error })?;
        }
        let slot = self
            .validation_slot(topic, messages)
            .await
            .map_err(|error| BatchRefusal { index: 0, error })?;
        let mut placed = Vec::with_capacity(messages.len());
        for (index, message) in messages.iter().enumerate() {
            placed.push(
                self.place(topic, message)
                    .map_err(|error| BatchRefusal { index, error })?,
            );
        }
        drop(slot);
        let created_at = self.clock.unix_ms();
        let records: Vec<WalRecordRef<'_>> = placed
            .iter()
            .map(|placed| record_of(topic, placed, created_at))
            .collect();
        let wal_refusal = |error: WalError| BatchRefusal {
            index: 0,
            error: AcceptError::Wal(error),
        };
        // Records were validated against the topic above; the WAL checks
        // its own field limits again before staging anything.
        let pending = self.wal.append_records(&records).map_err(wal_refusal)?;
        pending.await.map_err(wal_refusal)?;
        Ok(messages.len())
    }

    /// Range check, schema check and partition choice.
    fn place<'a>(
        &self,
        topic: &TopicMeta,
        message: &'a ProduceMessage,
    ) -> Result<Placed<'a>, AcceptError> {
        if let Some(partition) = message.partition
            && partition >= topic.partitions
        {
            return Err(AcceptError::PartitionOutOfRange {
                partition,
                partitions: topic.partitions,
            });
        }
        if topic.schema().is_some() {
            let started_us = self.clock.now_us();
            let checked = self.schemas.check(topic, &message.payload);
            let elapsed_us = self.clock.now_us().saturating_sub(started_us);
            self.validation_seconds
                .record(Duration::from_micros(elapsed_us).as_secs_f64());
            checked?;
        }
        let partition = match message.partition {
            Some(partition) => partition,
            None if !message.key.is_empty() => key_partition(&message.key, topic.partitions),
            None if !message.idempotency_key.is_empty() => {
                key_partition(&message.idempotency_key, topic.partitions)
            }
            None => self
                .round_robin
                .next(&topic.name, topic.partitions, self.elapsed()),
        };
        Ok(Placed { partition, message })
    }

    fn elapsed(&self) -> Duration {
        Duration::from_millis(self.clock.now_ms())
    }

    /// The node's clock this stage runs on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}

pub(crate) fn check_format(message: &ProduceMessage) -> Result<(), AcceptError> {
    if message.payload.is_empty() {
        return Err(AcceptError::Empty);
    }
    if message.payload.len() > MESSAGE_BYTES_MAX {
        return Err(AcceptError::TooLarge);
    }
    if message.key.len() > KEY_BYTES_MAX {
        return Err(AcceptError::KeyTooLong);
    }
    if !message.idempotency_key.is_empty() && !valid_idempotency_key(&message.idempotency_key) {
        return Err(AcceptError::IdempotencyKeyInvalid);
    }
    Ok(())
}

/// Whether `key` is a usable idempotency key: 1 to
/// [`IDEMPOTENCY_KEY_BYTES_MAX`] visible ASCII characters (what an HTTP
/// header carries unescaped).
pub fn valid_idempotency_key(key: &[u8]) -> bool {
    (1..=IDEMPOTENCY_KEY_BYTES_MAX).contains(&key.len()) && key.iter().all(u8::is_ascii_graphic)
}

fn record_of<'a>(topic: &'a TopicMeta, placed: &Placed<'a>, created_at: u64) -> WalRecordRef<'a> {
    WalRecordRef {
        topic: &topic.name,
        incarnation_id: topic.incarnation_id.as_deref(),
        key: &placed.message.key,
        idempotency_key: &placed.message.idempotency_key,
        partition: placed.partition,
        created_at_unix_ms: created_at,
        payload: &placed.message.payload,
    }
}
