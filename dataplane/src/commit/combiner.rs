//! The per-partition commit combiner.
//!
//! A batch queues on its partition's combiner. The oldest waiting batch,
//! when no cycle runs, leads: it holds the partition's produce lock (the
//! cycle itself), drains every batch queued by then, re-checks them, and
//! commits the survivors as one run with one `commit_durable`. Everyone in
//! the cycle gets the outcome for their own batch: contiguous offsets, or
//! the same error. Batches arriving during a cycle wait for the next one.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use narad_clock::millis;

use bytes::Bytes;
use narad_plog::{CommitRecord, LogError, Origin};
use parking_lot::{Condvar, Mutex};

use crate::metadata::{MetadataReplica, TopicMeta};
use crate::metrics::NodeMetrics;
use crate::partitions::freeze::{self, Freeze, Freezes};
use crate::partitions::{LocalLogs, partition_dir};
use crate::topology::{Destination, Route, Topology};

// A log uses the plog's default window until its first commit sets the
// topic's; a topic without a window of its own has the metastore's default.
// They are one window.
const _: () = assert!(
    narad_meta::limits::IDEMPOTENCY_WINDOW_MS_DEFAULT == narad_plog::IDEMPOTENCY_WINDOW_MS_DEFAULT
);

/// One record of a commit batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitItem {
    /// Key; empty means none.
    pub key: Bytes,
    /// Payload, stored as it is.
    pub payload: Bytes,
    /// The topic incarnation the record was accepted under, if any.
    pub incarnation: Option<Arc<str>>,
    /// The ingress WAL record this is, if known: a record whose origin the
    /// partition already stores is acknowledged without being stored again.
    pub origin: Option<Origin>,
    /// The producer's idempotency key; empty means none.
    pub idempotency_key: Bytes,
}

impl CommitItem {
    /// A record without provenance.
    pub fn new(key: Bytes, payload: Bytes, incarnation: Option<Arc<str>>) -> Self {
        Self {
            key,
            payload,
            incarnation,
            origin: None,
            idempotency_key: Bytes::new(),
        }
    }
}

/// What a committed batch got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The offsets its newly stored records took, contiguous.
    pub offsets: Range<u64>,
    /// Its records the partition already stored (by origin, or by
    /// idempotency key within the topic's window), not stored again.
    pub already_stored: u32,
}

impl Stored {
    /// Records of the batch accounted for: stored now or before.
    pub fn records(&self) -> u64 {
        self.offsets.end - self.offsets.start + u64::from(self.already_stored)
    }
}

/// One caller's batch for one partition.
#[derive(Clone, Debug)]
pub struct CommitBatch {
    /// The records, in order.
    pub items: Vec<CommitItem>,
    /// The caller gives up at this point of the node's monotonic clock
    /// ([`Combiners::deadline_in`]); a batch found past it under the lock is
    /// left out, since its caller will retry it anyway.
    pub deadline_ms: u64,
}

/// Why a batch was not committed. Every one is retriable; nothing of the
/// batch is visible.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// This node does not own the partition (any more).
    #[error("not the partition owner")]
    NotOwner,
    /// The partition is being handed to a move's target: nothing commits
    /// until the move ends or the freeze lapses.
    #[error("the partition is frozen for a move handoff")]
    Frozen,
    /// The topic is not in the replica.
    #[error("topic not found")]
    TopicNotFound,
    /// A record's incarnation is not the live topic's.
    #[error("topic incarnation mismatch: records carry {batch}, live topic is {live}")]
    IncarnationMismatch {
        /// The id the records carry.
        batch: String,
        /// The live id (`none` when the topic has none).
        live: String,
    },
    /// The caller's deadline passed before the cycle reached its batch.
    #[error("the caller stopped waiting")]
    CallerGone,
    /// The cycle carrying the batch ended without an outcome (it panicked).
    #[error("the commit cycle was aborted")]
    Aborted,
    /// The partition log refused or failed the commit.
    #[error("partition log: {0}")]
    Log(Arc<LogError>),
}

#[derive(Debug)]
struct Ticket {
    batch: Mutex<Option<CommitBatch>>,
    outcome: Mutex<Option<Result<Stored, CommitError>>>,
}

#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<Arc<Ticket>>,
    cycle_running: bool,
}

#[derive(Debug, Default)]
struct Combiner {
    queue: Mutex<Queue>,
    turn: Condvar,
}

/// Marks a combiner's cycle over and wakes its waiters when dropped; a
/// batch of the cycle left without an outcome (the cycle panicked) gets
/// [`CommitError::Aborted`].
struct CycleEnd<'a> {
    combiner: &'a Combiner,
    cycle: &'a [Arc<Ticket>],
}

impl Drop for CycleEnd<'_> {
    fn drop(&mut self) {
        for ticket in self.cycle {
            let mut outcome = ticket.outcome.lock();
            if outcome.is_none() {
                *outcome = Some(Err(CommitError::Aborted));
            }
        }
        self.combiner.queue.lock().cycle_running = false;
        self.combiner.turn.notify_all();
    }
}

/// The combiners of the partitions this node owns.
#[derive(Debug)]
pub struct Combiners {
    combiners: Mutex<HashMap<Destination, Arc<Combiner>>>,
    freezes: Arc<Freezes>,
    logs: Arc<LocalLogs>,
    replica: Arc<MetadataReplica>,
    metrics: Arc<NodeMetrics>,
}

impl Combiners {
    /// Combiners committing into `logs`, checking against `replica`.
    pub fn new(
        logs: Arc<LocalLogs>,
        replica: Arc<MetadataReplica>,
        metrics: Arc<NodeMetrics>,
    ) -> Self {
        Self {
            combiners: Mutex::new(HashMap::new()),
            freezes: Arc::new(Freezes::default()),
            logs,
            replica,
            metrics,
        }
    }

    /// The logs committed into.
    pub fn logs(&self) -> &Arc<LocalLogs> {
        &self.logs
    }

    /// The handoff freezes of this node's partitions.
    pub fn freezes(&self) -> &Freezes {
        &self.freezes
    }

    /// The deadline of a batch whose caller waits at most `budget` from
    /// now, on the node's clock ([`CommitBatch::deadline_ms`]).
    pub fn deadline_in(&self, budget: Duration) -> u64 {
        self.logs.clock().now_ms().saturating_add(millis(budget))
    }

    /// The same freezes, shared: the consume path pauses a frozen
    /// partition's new leases.
    pub fn shared_freezes(&self) -> Arc<Freezes> {
        Arc::clone(&self.freezes)
    }

    /// Freezes `destination` for its move to `target` and waits until a
    /// commit cycle running now has ended: from then on nothing commits to
    /// it, so its high watermark stays put while the freeze holds.
    pub fn freeze_for_handoff(&self, destination: &Destination, target: &str) -> Freeze {
        let since_index = self.replica.view().applied_index;
        let freeze =
            self.freezes
                .start(destination, target, since_index, self.logs.clock().now_ms());
        let combiner = self.combiner(destination);
        let mut queue = combiner.queue.lock();
        while queue.cycle_running {
            combiner.turn.wait(&mut queue);
        }
        freeze
    }

    /// Makes sure a fence written before a restart is back in force for
    /// `destination` (a move's calls can arrive before any commit does).
    pub fn restore_fences(&self, destination: &Destination) {
        let _ = self.combiner(destination);
    }

    /// The combiner of `destination`, made on first use. A partition seen
    /// for the first time since start may hold a fence written before a
    /// restart; it is restored before any commit can run.
    fn combiner(&self, destination: &Destination) -> Arc<Combiner> {
        let mut combiners = self.combiners.lock();
        if let Some(combiner) = combiners.get(destination) {
            return Arc::clone(combiner);
        }
        self.restore_fence(destination);
        Arc::clone(combiners.entry(destination.clone()).or_default())
    }

    fn restore_fence(&self, destination: &Destination) {
        let dir = partition_dir(
            self.logs.data_dir(),
            &destination.topic,
            destination.partition,
        );
        match freeze::read_fence(&**self.logs.disk(), &dir) {
            Ok(None) => {}
            Ok(Some((target, token, since_index))) => {
                tracing::warn!(%destination, target, "partition is fenced for a move handoff since before the restart; commits wait until the move ends");
                let fence = Freeze {
                    token,
                    target,
                    since_index,
                    until_ms: 0,
                    fenced: true,
                };
                self.freezes.restore(destination, fence);
            }
            Err(error) => {
                // Unknown: hold commits back as if fenced to nobody; the
                // move runner thaws it once the replica shows no move.
                tracing::error!(%destination, %error, "reading the handoff fence failed; commits wait");
                let fence = Freeze {
                    token: u64::MAX,
                    target: String::new(),
                    since_index: u64::MAX,
                    until_ms: 0,
                    fenced: true,
                };
                self.freezes.restore(destination, fence);
            }
        }
    }

    /// Commits `batch` to `destination`, blocking until its cycle ended.
    /// Returns the offsets the batch took, and how many of its records the
    /// partition already stored.
    ///
    /// # Errors
    /// [`CommitError`]; nothing of the batch is visible.
    pub fn commit(
        &self,
        destination: &Destination,
        batch: CommitBatch,
    ) -> Result<Stored, CommitError> {
        let combiner = self.combiner(destination);
        let ticket = Arc::new(Ticket {
            batch: Mutex::new(Some(batch)),
            outcome: Mutex::new(None),
        });
        let mut queue = combiner.queue.lock();
        queue.waiting.push_back(Arc::clone(&ticket));
        loop {
            if let Some(outcome) = ticket.outcome.lock().take() {
                return outcome;
            }
            let oldest = queue
                .waiting
                .front()
                .is_some_and(|front| Arc::ptr_eq(front, &ticket));
            if !queue.cycle_running && oldest {
                queue.cycle_running = true;
                let cycle: Vec<Arc<Ticket>> = queue.waiting.drain(..).collect();
                drop(queue);
                {
                    // Ends the cycle even if it panics, so the partition's
                    // other callers are not left waiting on it forever.
                    let _end = CycleEnd {
                        combiner: &combiner,
                        cycle: &cycle,
                    };
                    self.run_cycle(destination, &cycle);
                }
                queue = combiner.queue.lock();
                continue;
            }
            combiner.turn.wait(&mut queue);
        }
    }

    /// One cycle, under the produce lock (only one cycle per partition runs
    /// at a time).
    fn run_cycle(&self, destination: &Destination, cycle: &[Arc<Ticket>]) {
        let batches: Vec<(Arc<Ticket>, CommitBatch)> = cycle
            .iter()
            .filter_map(|ticket| {
                ticket
                    .batch
                    .lock()
                    .take()
                    .map(|batch| (Arc::clone(ticket), batch))
            })
            .collect();
        let finish = |ticket: &Ticket, outcome: Result<Stored, CommitError>| {
            *ticket.outcome.lock() = Some(outcome);
        };
        if let Err(error) = self.check_owner(destination) {
            for (ticket, _) in &batches {
                finish(ticket, Err(error.clone()));
            }
            return;
        }
        if self.freezes.holds(destination, self.logs.clock().now_ms()) {
            for (ticket, _) in &batches {
                finish(ticket, Err(CommitError::Frozen));
            }
            return;
        }
        let Some(topic) = self.replica.topic_meta(&destination.topic) else {
            for (ticket, _) in &batches {
                finish(ticket, Err(CommitError::TopicNotFound));
            }
            return;
        };
        let live = topic.incarnation_id.clone();
        let now_ms = self.logs.clock().now_ms();
        let mut admitted = Vec::with_capacity(batches.len());
        for (ticket, batch) in batches {
            match admit(&batch, live.as_ref(), now_ms) {
                Ok(()) => admitted.push((ticket, batch)),
                Err(error) => finish(&ticket, Err(error)),
            }
        }
        if admitted.is_empty() {
            return;
        }
        let outcome = self.append_run(destination, &topic, &admitted);
        match outcome {
            Ok(offsets) => {
                for ((ticket, _), range) in admitted.iter().zip(offsets) {
                    finish(ticket, Ok(range));
                }
            }
            Err(error) => {
                for (ticket, _) in &admitted {
                    finish(ticket, Err(error.clone()));
                }
            }
        }
    }

    fn check_owner(&self, destination: &Destination) -> Result<(), CommitError> {
        match self.replica.route(destination) {
            Route::Owner { local: true, .. } => Ok(()),
            _ => Err(CommitError::NotOwner),
        }
    }

    /// One `commit_durable` for every admitted batch of `topic`; their
    /// offsets. The log deduplicates keys over the topic's idempotency
    /// window as the replica holds it now, so an alter takes effect at the
    /// partition's next commit.
    fn append_run(
        &self,
        destination: &Destination,
        topic: &TopicMeta,
        admitted: &[(Arc<Ticket>, CommitBatch)],
    ) -> Result<Vec<Stored>, CommitError> {
        let log = self
            .logs
            .resolve(destination, topic.incarnation_id.as_ref())
            .map_err(|error| CommitError::Log(Arc::new(error)))?;
        log.set_idempotency_window_ms(topic.idempotency_window_ms);
        let committed_at_ms = self.logs.clock().unix_ms();
        let runs: Vec<Vec<CommitRecord<'_>>> = admitted
            .iter()
            .map(|(_, batch)| {
                batch
                    .items
                    .iter()
                    .map(|item| CommitRecord {
                        origin: item.origin,
                        idempotency_key: &item.idempotency_key,
                        ..CommitRecord::new(&item.key, &item.payload, committed_at_ms)
                    })
                    .collect()
            })
            .collect();
        let slices: Vec<&[CommitRecord<'_>]> = runs.iter().map(Vec::as_slice).collect();
        let outcome = log
            .commit_durable(&slices)
            .map_err(|error| CommitError::Log(Arc::new(error)))?;
        assert_eq!(
            outcome.batch_offsets.len(),
            admitted.len(),
            "a commit returns one range per batch"
        );
        let already_stored: u64 = outcome
            .batch_already_stored
            .iter()
            .map(|&n| u64::from(n))
            .sum();
        let records = outcome.offsets.end - outcome.offsets.start;
        let handles = self
            .metrics
            .partition(&destination.topic, destination.partition);
        handles.messages_produced.increment(records);
        handles.bytes_produced.increment(outcome.payload_bytes);
        if already_stored > 0 {
            handles.duplicates_skipped.increment(already_stored);
        }
        if let Some(sync_duration) = outcome.sync_duration {
            handles.fsync_seconds.record(sync_duration.as_secs_f64());
        }
        Ok(outcome
            .batch_offsets
            .into_iter()
            .zip(outcome.batch_already_stored)
            .map(|(offsets, already_stored)| Stored {
                offsets,
                already_stored,
            })
            .collect())
    }
}

/// The checks a batch passes under the lock: its caller still waits, and
/// every record carrying an incarnation id carries the live one.
fn admit(batch: &CommitBatch, live: Option<&Arc<str>>, now_ms: u64) -> Result<(), CommitError> {
    if now_ms > batch.deadline_ms {
        return Err(CommitError::CallerGone);
    }
    let stale = batch
        .items
        .iter()
        .filter_map(|item| item.incarnation.as_ref())
        .find(|id| Some(*id) != live);
    match stale {
        None => Ok(()),
        Some(id) => Err(CommitError::IncarnationMismatch {
            batch: id.to_string(),
            live: live.map_or_else(|| "none".to_owned(), ToString::to_string),
        }),
    }
}
