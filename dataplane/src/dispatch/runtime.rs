//! The dispatcher's runtime: one thread that feeds [`Dispatcher`] what
//! happened (records read from the WAL, commit outcomes, leader answers,
//! the time) and carries out the commands it returns. All decisions stay in
//! the machine; this file only does I/O.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use narad_plog::Origin;
use narad_wal::{
    CheckpointStore, FrontierChange, RecordError, Wal, WalError, WalReader, WalRecordRef,
};

use super::targets::{CommitDone, CommitTarget, LeaderConfirm, WalPayload};
use super::{
    Command, CommitId, CommitOutcome, DispatchConfig, Dispatcher, GoneQuestion, Held, RecordMeta,
};
use crate::topology::{Destination, Topology};

/// How long the runtime sleeps at most without news: a record becoming
/// durable wakes it at once, so this only bounds a missed wakeup (and is
/// how often an owner that does not resolve is looked up again).
pub const IDLE_BACKSTOP: Duration = Duration::from_millis(10);

/// The dispatcher as a whole backs off this long after it could not read
/// the WAL or store its checkpoint.
pub const FAILURE_BACKOFF: Duration = Duration::from_secs(1);

/// How long the durable-frontier watcher blocks before checking for stop.
const WATCH_POLL: Duration = Duration::from_millis(100);

/// What reaches the runtime thread.
#[derive(Debug)]
pub(crate) enum Event {
    /// The WAL's durable frontier moved.
    Durable(u64),
    /// A commit ended.
    CommitDone {
        id: CommitId,
        outcome: CommitOutcome,
        records: Vec<Held<WalPayload>>,
    },
    /// The leader answered.
    Gone { question: GoneQuestion, gone: bool },
    /// Stop the loop.
    Stop,
}

/// What the runtime needs.
#[derive(Debug)]
pub struct DispatchParts<T> {
    /// The ingress WAL.
    pub wal: Arc<Wal>,
    /// Its checkpoint store.
    pub checkpoint: Arc<CheckpointStore>,
    /// The metadata replica.
    pub topology: Arc<T>,
    /// Commits to this node's partitions.
    pub local: Arc<dyn CommitTarget>,
    /// Commits to other nodes' partitions.
    pub remote: Arc<dyn CommitTarget>,
    /// Leader confirmation before discards.
    pub leader: Arc<dyn LeaderConfirm>,
}

/// What the runtime reports while it runs.
#[derive(Debug, Default)]
pub struct DispatchStatus {
    /// The checkpoint last stored (in place; synced within 250 ms).
    pub checkpoint_stored: Arc<AtomicU64>,
    /// Records discarded after leader confirmation.
    pub discarded: AtomicU64,
    /// Set when the runtime stopped on an error it cannot get past.
    pub failed: AtomicBool,
    /// Commits that stored records outside their home partition.
    pub reroutes: Arc<AtomicU64>,
    /// Records those commits stored.
    pub rerouted_records: Arc<AtomicU64>,
}

/// A running dispatcher.
#[derive(Debug)]
pub struct DispatchRuntime {
    events: Sender<Event>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    status: Arc<DispatchStatus>,
}

impl DispatchRuntime {
    /// Starts dispatching from the stored checkpoint (or the oldest WAL
    /// segment when the checkpoint is below it).
    ///
    /// # Errors
    /// The WAL cannot be read from the start point, or a thread cannot be
    /// spawned.
    pub fn spawn<T: Topology + Send + Sync + 'static>(
        parts: DispatchParts<T>,
        config: DispatchConfig,
        status: Arc<DispatchStatus>,
    ) -> std::io::Result<Self> {
        let stored = parts.checkpoint.stored();
        let start = parts.wal.dispatch_start(stored);
        if start > stored {
            // The checkpoint was below the oldest segment: record where
            // dispatch really starts, so the next start does not warn again.
            parts
                .checkpoint
                .store(start)
                .map_err(std::io::Error::other)?;
        }
        let reader = parts.wal.reader(start).map_err(std::io::Error::other)?;
        status.checkpoint_stored.store(start, Ordering::Release);
        let (events, receiver) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = spawn_watcher(&parts.wal, events.clone(), Arc::clone(&stop))?;
        let mut state = Loop {
            machine: Dispatcher::new(config, start),
            reader,
            parts,
            events: events.clone(),
            receiver,
            epoch: Instant::now(),
            status: Arc::clone(&status),
            backoff_until: Duration::ZERO,
            compacted_behind: 0,
        };
        let runner = std::thread::Builder::new()
            .name("narad-dispatch".into())
            .spawn(move || state.run())?;
        Ok(Self {
            events,
            stop,
            threads: vec![runner, watcher],
            status,
        })
    }

    /// What the runtime reports.
    pub fn status(&self) -> &Arc<DispatchStatus> {
        &self.status
    }

    /// Stops the loop and waits for its threads. Commits in flight finish
    /// on their workers; their records are still in the WAL, above the
    /// checkpoint, so nothing is lost.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.events.send(Event::Stop);
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::error!("a dispatcher thread panicked");
            }
        }
    }
}

impl Drop for DispatchRuntime {
    /// A runtime dropped without [`DispatchRuntime::stop`] (a panicking
    /// test, an aborted start) still stops its threads, without waiting.
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop.store(true, Ordering::Release);
            let _ = self.events.send(Event::Stop);
        }
    }
}

fn spawn_watcher(
    wal: &Wal,
    events: Sender<Event>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    let watch = wal.durable_watch();
    std::thread::Builder::new()
        .name("narad-dispatch-watch".into())
        .spawn(move || {
            let mut seen = watch.next_durable_seq();
            while !stop.load(Ordering::Acquire) {
                match watch.wait_changed(seen, WATCH_POLL) {
                    FrontierChange::Advanced(next) if next != seen => {
                        seen = next;
                        if events.send(Event::Durable(next)).is_err() {
                            return;
                        }
                    }
                    FrontierChange::Advanced(_) => {}
                    FrontierChange::Stopped(next) => {
                        let _ = events.send(Event::Durable(next));
                        return;
                    }
                }
            }
        })
}

/// Why a read of the WAL failed.
#[derive(Debug, thiserror::Error)]
enum ReadFailure {
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error("WAL record {seq} does not decode: {error}")]
    Decode { seq: u64, error: RecordError },
}

impl ReadFailure {
    /// Corruption stops dispatch for good: skipping a record would lose
    /// it, and retrying cannot heal it. The node must be looked at.
    fn is_fatal(&self) -> bool {
        matches!(
            self,
            Self::Decode { .. } | Self::Wal(WalError::Corrupt { .. })
        )
    }
}

struct Loop<T> {
    machine: Dispatcher<WalPayload>,
    reader: WalReader,
    parts: DispatchParts<T>,
    events: Sender<Event>,
    receiver: Receiver<Event>,
    epoch: Instant,
    status: Arc<DispatchStatus>,
    backoff_until: Duration,
    compacted_behind: u64,
}

impl<T: Topology + Send + Sync + 'static> Loop<T> {
    fn run(&mut self) {
        loop {
            let now = self.epoch.elapsed();
            self.machine
                .durable_advanced(self.parts.wal.next_durable_seq());
            if now >= self.backoff_until
                && let Err(error) = self.read(now)
            {
                if error.is_fatal() {
                    tracing::error!(%error, "ingress dispatch stopped: a WAL record cannot be read");
                    self.status.failed.store(true, Ordering::Release);
                    return;
                }
                tracing::warn!(%error, "ingress dispatch cannot read the WAL; backing off");
                self.backoff_until = now + FAILURE_BACKOFF;
                self.reopen_reader();
            }
            let commands = self.machine.poll(&*self.parts.topology, now);
            for command in commands {
                self.execute(command, now);
            }
            self.compact();
            if !self.wait(now) {
                return;
            }
        }
    }

    /// Reads what the machine asks for and places it.
    fn read(&mut self, now: Duration) -> Result<(), ReadFailure> {
        let topology = &*self.parts.topology;
        while let Some(seq) = self.machine.next_read(topology, now) {
            if self.reader.next_seq() != seq {
                self.reader.seek(seq)?;
            }
            let Some(frame) = self.reader.next_frame()? else {
                // Durable per the frontier but not visible to the reader
                // yet: read again on the next wakeup.
                return Ok(());
            };
            assert_eq!(frame.seq, seq, "WAL reader yielded another seq than asked");
            let (meta, payload) =
                held_of(seq, frame.payload, &self.parts.wal, &self.parts.checkpoint)
                    .map_err(|error| ReadFailure::Decode { seq, error })?;
            self.machine.place(seq, meta, payload, topology, now);
        }
        Ok(())
    }

    fn reopen_reader(&mut self) {
        match self.parts.wal.reader(self.machine.checkpoint()) {
            Ok(reader) => self.reader = reader,
            Err(error) => tracing::warn!(%error, "ingress dispatch cannot reopen its WAL reader"),
        }
    }

    fn execute(&mut self, command: Command<WalPayload>, now: Duration) {
        match command {
            Command::Commit(order) => {
                let done = CommitDone::new(self.events.clone());
                if order.local {
                    self.parts.local.start(order, done);
                } else {
                    self.parts.remote.start(order, done);
                }
            }
            Command::StoreCheckpoint(seq) => match self.parts.checkpoint.store(seq) {
                Ok(()) => self.status.checkpoint_stored.store(seq, Ordering::Release),
                Err(error) => {
                    tracing::error!(%error, checkpoint = seq, "ingress dispatch cannot store its checkpoint; backing off");
                    self.backoff_until = now + FAILURE_BACKOFF;
                }
            },
            Command::ConfirmGone(question) => self.ask_leader(question),
            Command::Discarded { question, seqs } => {
                self.status
                    .discarded
                    .fetch_add(seqs.len() as u64, Ordering::Relaxed);
                match &question.incarnation {
                    None => {
                        tracing::warn!(topic = %question.topic, records = seqs.len(), "discarding undispatched produce records for deleted topic")
                    }
                    Some(id) => {
                        tracing::warn!(topic = %question.topic, topic_id = %id, records = seqs.len(), "discarding undispatched record of a deleted topic incarnation")
                    }
                }
            }
        }
    }

    fn ask_leader(&self, question: GoneQuestion) {
        let leader = Arc::clone(&self.parts.leader);
        let events = self.events.clone();
        let spawned = std::thread::Builder::new()
            .name("narad-dispatch-confirm".into())
            .spawn(move || {
                let gone = match leader.confirm_gone(&question) {
                    Ok(gone) => gone,
                    Err(error) => {
                        tracing::warn!(topic = %question.topic, %error, "leader confirmation failed");
                        false
                    }
                };
                let _ = events.send(Event::Gone { question, gone });
            });
        if let Err(error) = spawned {
            // Unanswered, the question is asked again after the negative
            // answer's memory lapses; nothing is discarded meanwhile.
            tracing::warn!(%error, "cannot start a leader confirmation");
        }
    }

    /// Compacts the WAL behind the checkpoint's synced value when it moved.
    fn compact(&mut self) {
        let synced = self.parts.checkpoint.synced();
        if synced <= self.compacted_behind {
            return;
        }
        match self.parts.wal.compact_behind(&self.parts.checkpoint) {
            Ok(_) => self.compacted_behind = synced,
            Err(error) => tracing::warn!(%error, "ingress WAL compaction failed"),
        }
    }

    /// Waits for news or the next deadline, and applies what came.
    /// Returns `false` to stop.
    fn wait(&mut self, now: Duration) -> bool {
        let deadline = self
            .machine
            .next_deadline(&*self.parts.topology, now)
            .map_or(IDLE_BACKSTOP, |at| at.saturating_sub(now))
            .min(IDLE_BACKSTOP)
            .max(self.backoff_until.saturating_sub(now).min(FAILURE_BACKOFF));
        let first = match self.receiver.recv_timeout(deadline) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => return true,
            Err(RecvTimeoutError::Disconnected) => return false,
        };
        let mut next = Some(first);
        while let Some(event) = next {
            if !self.apply(event) {
                return false;
            }
            next = self.receiver.try_recv().ok();
        }
        true
    }

    fn apply(&mut self, event: Event) -> bool {
        let now = self.epoch.elapsed();
        match event {
            Event::Durable(next) => self.machine.durable_advanced(next),
            Event::CommitDone {
                id,
                outcome,
                records,
            } => {
                self.machine.commit_done(id, outcome, records, now);
                let tally = self.machine.reroutes();
                self.status.reroutes.store(tally.commits, Ordering::Relaxed);
                self.status
                    .rerouted_records
                    .store(tally.records, Ordering::Relaxed);
            }
            Event::Gone { question, gone } => self.machine.gone_answered(question, gone, now),
            Event::Stop => return false,
        }
        true
    }
}

/// The dispatcher's view of WAL record `seq`: where it goes, and what a
/// commit carries, its origin included.
///
/// # Errors
/// The record does not decode.
pub(crate) fn held_of(
    seq: u64,
    bytes: &[u8],
    wal: &Wal,
    checkpoint: &CheckpointStore,
) -> Result<(RecordMeta, WalPayload), RecordError> {
    let record = WalRecordRef::decode(bytes)?;
    let meta = RecordMeta {
        home: Destination::new(record.topic, record.partition),
        bytes: bytes.len() as u64,
        incarnation: record.incarnation_id.map(Arc::from),
    };
    let payload = WalPayload {
        key: Bytes::copy_from_slice(record.key),
        payload: Bytes::copy_from_slice(record.payload),
        created_at_unix_ms: record.created_at_unix_ms,
        origin: Some(Origin {
            id: wal.origins().id_of(seq),
            seq,
            // No sequence below the synced checkpoint is ever read again,
            // after any crash.
            floor: checkpoint.synced().min(seq),
        }),
        idempotency_key: Bytes::copy_from_slice(record.idempotency_key),
    };
    Ok((meta, payload))
}
