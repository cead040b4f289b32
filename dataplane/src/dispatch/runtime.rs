//! The dispatcher's runtime: one thread that feeds [`Dispatcher`] what
//! happened (records read from the WAL, commit outcomes, leader answers,
//! the time) and carries out the commands it returns. All decisions stay in
//! the machine; this file only does I/O.
//!
//! The thread sleeps on its event queue until an event comes or the next
//! real deadline passes; with nothing pending it sleeps without a timeout.
//! What wakes it: a commit ending, a leader answer, the WAL's durable
//! frontier moving, the topology changing (both through a waker that posts
//! [`Event::Wake`]), and the deadlines of the machine, of a failure
//! backoff and of WAL compaction behind a checkpoint not yet synced.
//!
//! The thread is supervised. A panic (a broken invariant the machine
//! asserts, or a bug in a commit target's `start`) or a WAL record that
//! does not read back does not end dispatch: after [`FAILURE_BACKOFF`] the
//! loop starts again from the stored checkpoint with a fresh machine and
//! reader, as a restarted process would, counts the restart
//! (`narad_dispatch_restarts_total`) and logs it. A record that is really
//! damaged fails again at each start, once a second, loudly, and is never
//! skipped; one that a reader misread (its window, a race with a segment
//! roll) is read again from the disk. Commits the panicked generation ordered may still report; their
//! reports are ignored, and their records, read again from the WAL, are
//! stored once by their origin. Before this, a panic ended the thread and
//! every record accepted after it waited for a process restart.

use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use narad_plog::Origin;
use narad_wal::{
    CheckpointStore, DurableWatch, FrontierChange, RecordError, Wal, WalError, WalReader,
    WalRecordRef,
};
use tokio::sync::watch;

use super::targets::{CommitDone, CommitTarget, Event, LeaderConfirm, WalPayload};
use super::{Command, DispatchConfig, Dispatcher, GoneQuestion, RecordMeta};
use crate::topology::{Destination, Topology};
use narad_clock::{Clock, millis};
use narad_disk::queue::{self, Received, Receiver, Sender};

/// The dispatcher as a whole backs off this long after it could not read
/// the WAL or store its checkpoint.
pub const FAILURE_BACKOFF: Duration = Duration::from_secs(1);

/// A stored checkpoint is synced within the checkpoint store's sync delay,
/// plus the time of one fdatasync of an 8-byte file; the dispatcher looks
/// for the synced value to compact behind this long after the delay.
pub const COMPACTION_SLACK: Duration = Duration::from_millis(10);

/// The failing destinations' figures are published at most this often
/// (finding them walks every destination); a pass that comes sooner leaves
/// a wakeup for when they are due. Whether the lookahead is exhausted is
/// published at every pass.
pub const STALL_REPORT_EVERY: Duration = Duration::from_secs(1);

/// A record the durable frontier covers but the WAL reader does not see
/// yet is read again after this long. The WAL publishes a segment's end
/// before it moves the frontier, so this is a backstop, not a cadence.
pub const UNSEEN_DURABLE_RETRY: Duration = Duration::from_millis(10);

/// What the runtime needs.
#[derive(Debug)]
pub struct DispatchParts<T> {
    /// The ingress WAL.
    pub wal: Arc<Wal>,
    /// Its checkpoint store.
    pub checkpoint: Arc<CheckpointStore>,
    /// The metadata replica.
    pub topology: Arc<T>,
    /// Ticks after every change to `topology`
    /// ([`crate::metadata::MetadataReplica::watch_changes`]): a partition
    /// assigned, an owner marked dead, a topic deleted. The dispatcher
    /// looks again at once instead of polling the topology.
    pub topology_changes: watch::Receiver<u64>,
    /// The checkpoint store's sync delay (`CheckpointConfig::sync_delay`):
    /// when to look for a newly stored checkpoint to compact behind.
    pub checkpoint_sync_delay: Duration,
    /// Commits to this node's partitions.
    pub local: Arc<dyn CommitTarget>,
    /// Commits to other nodes' partitions.
    pub remote: Arc<dyn CommitTarget>,
    /// Leader confirmation before discards.
    pub leader: Arc<dyn LeaderConfirm>,
    /// The node's clock: the machine's "now" is its monotonic reading.
    pub clock: Arc<dyn Clock>,
}

/// What the runtime reports while it runs.
#[derive(Debug, Default)]
pub struct DispatchStatus {
    /// The checkpoint last stored (in place; synced within 250 ms).
    pub checkpoint_stored: Arc<AtomicU64>,
    /// Records discarded after leader confirmation.
    pub discarded: AtomicU64,
    /// Set while the last pass ended on a WAL record that did not read
    /// back (the loop starts again from the checkpoint each second).
    pub failed: AtomicBool,
    /// Commits that stored records outside their home partition.
    pub reroutes: Arc<AtomicU64>,
    /// Records those commits stored.
    pub rerouted_records: Arc<AtomicU64>,
    /// Local commits run on the dispatcher's own thread, each the only
    /// commit in flight ([`CommitTarget::run_here`]).
    pub local_commits_run_here: AtomicU64,
    /// Times the loop panicked, or met a record that did not read back,
    /// and started again from the checkpoint.
    pub restarts: Arc<AtomicU64>,
    /// Set while the reader stands at its lookahead with durable records
    /// beyond it ([`Dispatcher::lookahead_exhausted`]): the record at the
    /// checkpoint holds every partition's dispatch on this node.
    pub lookahead_exhausted: AtomicBool,
    /// Destinations whose commits fail now.
    pub failing_destinations: AtomicU64,
    /// How long the destination failing longest has failed, in ms; 0 when
    /// none fails.
    pub longest_failure_ms: AtomicU64,
}

/// A running dispatcher.
#[derive(Debug)]
pub struct DispatchRuntime {
    events: Sender<Event>,
    thread: Option<JoinHandle<()>>,
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
        let (events, receiver) = queue::unbounded();
        let watches = Watches::new(
            parts.wal.durable_watch(),
            parts.topology_changes.clone(),
            &events,
        );
        let mut state = Loop {
            machine: Dispatcher::new(config.clone(), start),
            config,
            generation: 0,
            reader,
            parts,
            events: events.clone(),
            receiver,
            watches,
            status: Arc::clone(&status),
            backoff_until: Duration::ZERO,
            compacted_behind: 0,
            compaction_due: None,
            reread_due: None,
            names: RecordNames::default(),
            stall_reported_at: None,
            stall_report_due: None,
        };
        let runner = std::thread::Builder::new()
            .name("narad-dispatch".into())
            .spawn(move || state.run_supervised())?;
        Ok(Self {
            events,
            thread: Some(runner),
            status,
        })
    }

    /// What the runtime reports.
    pub fn status(&self) -> &Arc<DispatchStatus> {
        &self.status
    }

    /// Stops the loop and waits for its thread. Commits in flight finish
    /// on their workers; their records are still in the WAL, above the
    /// checkpoint, so nothing is lost.
    pub fn stop(mut self) {
        let _ = self.events.send(Event::Stop);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the dispatcher thread panicked");
        }
    }
}

impl Drop for DispatchRuntime {
    /// A runtime dropped without [`DispatchRuntime::stop`] (a panicking
    /// test, an aborted start) still stops its thread, without waiting.
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.events.send(Event::Stop);
        }
    }
}

/// Posts [`Event::Wake`] when a watched future's waker is called, so the
/// dispatcher thread sleeps on its queue alone.
struct EventWaker(Sender<Event>);

impl Wake for EventWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // A stopped dispatcher no longer listens.
        let _ = self.0.send(Event::Wake);
    }
}

/// The next change of the topology, as an owned future.
type TopologyChange = Pin<
    Box<dyn Future<Output = (watch::Receiver<u64>, Result<(), watch::error::RecvError>)> + Send>,
>;

fn next_topology_change(mut changes: watch::Receiver<u64>) -> TopologyChange {
    Box::pin(async move {
        let changed = changes.changed().await;
        (changes, changed)
    })
}

/// What the dispatcher watches besides its queue: the WAL's durable
/// frontier and the topology. Both are futures polled with an
/// [`EventWaker`], never waited on.
struct Watches {
    waker: Waker,
    durable: DurableWatch,
    /// The frontier the current pass read.
    durable_seen: u64,
    /// The WAL closed or latched: its frontier moves no more.
    durable_stopped: bool,
    /// `None` once the replica is gone.
    topology: Option<TopologyChange>,
}

impl Watches {
    fn new(durable: DurableWatch, topology: watch::Receiver<u64>, events: &Sender<Event>) -> Self {
        Self {
            waker: Waker::from(Arc::new(EventWaker(events.clone()))),
            durable_seen: durable.next_durable_seq(),
            durable,
            durable_stopped: false,
            topology: Some(next_topology_change(topology)),
        }
    }

    /// Registers the waker with both watches for the pass that just ended.
    /// `true` when one moved during the pass: the loop then goes round
    /// again instead of sleeping.
    fn arm(&mut self) -> bool {
        let mut cx = Context::from_waker(&self.waker);
        let mut moved = false;
        if !self.durable_stopped {
            match Pin::new(&mut self.durable.changed(self.durable_seen)).poll(&mut cx) {
                Poll::Ready(FrontierChange::Advanced(_)) => moved = true,
                Poll::Ready(FrontierChange::Stopped(_)) => self.durable_stopped = true,
                Poll::Pending => {}
            }
        }
        if let Some(change) = &mut self.topology
            && let Poll::Ready((changes, changed)) = change.as_mut().poll(&mut cx)
        {
            // An error means the replica is gone: nothing changes any more.
            self.topology = changed.is_ok().then(|| next_topology_change(changes));
            moved |= changed.is_ok();
        }
        moved
    }
}

/// Why a read of the WAL failed.
#[derive(Debug, thiserror::Error)]
enum ReadFailure {
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error("WAL record {seq} does not decode: {error}")]
    Decode { seq: u64, error: RecordError },
}

/// How a run of the loop ended.
enum Ended {
    /// Told to stop.
    Stopped,
    /// A WAL record did not read back.
    Unreadable,
}

impl ReadFailure {
    /// A record that does not read back ends the loop's run: skipping it
    /// would lose it. The supervisor starts dispatch again from the
    /// checkpoint with a fresh reader, which heals a misread and fails
    /// again, loudly, on real damage.
    fn is_fatal(&self) -> bool {
        matches!(
            self,
            Self::Decode { .. } | Self::Wal(WalError::Corrupt { .. })
        )
    }
}

struct Loop<T> {
    machine: Dispatcher<WalPayload>,
    /// What a restarted machine is made with.
    config: DispatchConfig,
    /// Counts restarts: reports of commits and questions an earlier
    /// generation started are ignored.
    generation: u64,
    reader: WalReader,
    parts: DispatchParts<T>,
    events: Sender<Event>,
    receiver: Receiver<Event>,
    watches: Watches,
    status: Arc<DispatchStatus>,
    backoff_until: Duration,
    /// The synced checkpoint the WAL was last compacted behind.
    compacted_behind: u64,
    /// When to look for a stored checkpoint's sync, to compact behind it.
    compaction_due: Option<Duration>,
    /// When to read again a record the frontier covers but the reader did
    /// not see.
    reread_due: Option<Duration>,
    /// Names shared by the records read.
    names: RecordNames,
    /// When the failing destinations' figures were last published.
    stall_reported_at: Option<Duration>,
    /// When they are due again, after a pass that came too soon.
    stall_report_due: Option<Duration>,
}

impl<T: Topology + Send + Sync + 'static> Loop<T> {
    /// Runs the loop until it stops, starting it again after each panic
    /// or unreadable record.
    fn run_supervised(&mut self) {
        loop {
            let why = match panic::catch_unwind(AssertUnwindSafe(|| self.run())) {
                Ok(Ended::Stopped) => return,
                Ok(Ended::Unreadable) => "a WAL record did not read back",
                Err(_) => "the dispatcher panicked",
            };
            let restarts = self.status.restarts.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::error!(
                restarts,
                checkpoint = self.parts.checkpoint.stored(),
                "{why}; starting dispatch again from the stored checkpoint"
            );
            if !self.restart() {
                return;
            }
        }
    }

    /// Waits out [`FAILURE_BACKOFF`] (a panic that repeats must not spin),
    /// then starts a new generation from the stored checkpoint. `false`
    /// when told to stop meanwhile, or when the WAL cannot be read.
    fn restart(&mut self) -> bool {
        self.generation += 1;
        let until = self.now() + FAILURE_BACKOFF;
        loop {
            let left = until.saturating_sub(self.now());
            if left.is_zero() {
                break;
            }
            // Reports of the panicked generation are dropped here; a stop
            // is not.
            match self.receiver.recv_timeout(left) {
                Received::Item(Event::Stop) | Received::Disconnected => return false,
                Received::Item(_) | Received::TimedOut => {}
            }
        }
        let start = self
            .parts
            .wal
            .dispatch_start(self.parts.checkpoint.stored());
        match self.parts.wal.reader(start) {
            Ok(reader) => self.reader = reader,
            Err(error) => {
                tracing::error!(%error, "ingress dispatch stopped: the WAL cannot be read after a restart");
                self.status.failed.store(true, Ordering::Release);
                return false;
            }
        }
        self.machine = Dispatcher::new(self.config.clone(), start);
        self.backoff_until = Duration::ZERO;
        self.compaction_due = None;
        self.reread_due = None;
        true
    }

    fn run(&mut self) -> Ended {
        loop {
            let now = self.now();
            self.watches.durable_seen = self.parts.wal.next_durable_seq();
            self.machine.durable_advanced(self.watches.durable_seen);
            if now >= self.backoff_until {
                match self.read(now) {
                    Ok(read) if read > 0 => self.status.failed.store(false, Ordering::Release),
                    Ok(_) => {}
                    Err(error) if error.is_fatal() => {
                        tracing::error!(%error, "ingress dispatch cannot read a WAL record");
                        self.status.failed.store(true, Ordering::Release);
                        return Ended::Unreadable;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "ingress dispatch cannot read the WAL; backing off");
                        self.backoff_until = now + FAILURE_BACKOFF;
                        self.reopen_reader();
                    }
                }
            }
            let commands = self.machine.poll(&*self.parts.topology, now);
            // The one commit in flight, started by this poll: nothing else
            // is waiting on this thread, so a local one runs here.
            let alone = self.machine.commits_in_flight() == 1
                && commands
                    .iter()
                    .filter(|command| matches!(command, Command::Commit(_)))
                    .count()
                    == 1;
            for command in commands {
                self.execute(command, alone, now);
            }
            self.compact(now);
            self.report_stall(now);
            if !self.wait(now) {
                return Ended::Stopped;
            }
        }
    }

    /// Publishes whether the reader stands at its lookahead (every pass)
    /// and which destinations fail (at most every [`STALL_REPORT_EVERY`]);
    /// logs when the lookahead is reached and when the reader moves again.
    fn report_stall(&mut self, now: Duration) {
        let exhausted = self.machine.lookahead_exhausted();
        let was = self
            .status
            .lookahead_exhausted
            .swap(exhausted, Ordering::Relaxed);
        if was != exhausted || self.stall_report_due.is_some_and(|due| now >= due) {
            self.stall_reported_at = None;
        }
        if let Some(at) = self.stall_reported_at
            && now < at + STALL_REPORT_EVERY
        {
            self.stall_report_due = Some(at + STALL_REPORT_EVERY);
            return;
        }
        let (failing, longest) = self.machine.failing();
        let longest_ms = longest.map_or(0, |(_, since)| millis(now.saturating_sub(since)));
        self.stall_reported_at = Some(now);
        self.stall_report_due = None;
        self.status
            .failing_destinations
            .store(failing as u64, Ordering::Relaxed);
        self.status
            .longest_failure_ms
            .store(longest_ms, Ordering::Relaxed);
        match (was, exhausted) {
            (false, true) => {
                let holder = self.machine.checkpoint_holder().map_or_else(
                    || "a commit in flight".to_owned(),
                    |destination| destination.to_string(),
                );
                tracing::warn!(
                    checkpoint = self.machine.checkpoint(),
                    held_for = %holder,
                    read_frontier = self.machine.read_frontier(),
                    failing_destinations = failing,
                    longest_failing = %longest.map_or_else(
                        || "none".to_owned(),
                        |(destination, _)| destination.to_string()
                    ),
                    longest_failing_ms = longest_ms,
                    "ingress dispatch reached its lookahead: nothing more is read, for any partition, until the record at the checkpoint is committed"
                );
            }
            (true, false) => tracing::info!(
                checkpoint = self.machine.checkpoint(),
                "ingress dispatch reads again past its lookahead"
            ),
            _ => {}
        }
    }

    /// Reads what the machine asks for and places it; how many records.
    fn read(&mut self, now: Duration) -> Result<usize, ReadFailure> {
        self.reread_due = None;
        let topology = &*self.parts.topology;
        let mut read = 0;
        let mut next = self.machine.next_read(topology, now);
        while let Some(seq) = next {
            if self.reader.next_seq() != seq {
                self.reader.seek(seq)?;
            }
            let Some(frame) = self.reader.next_frame()? else {
                // Durable per the frontier but not visible to the reader
                // yet: read again shortly.
                self.reread_due = Some(now + UNSEEN_DURABLE_RETRY);
                return Ok(read);
            };
            assert_eq!(frame.seq, seq, "WAL reader yielded another seq than asked");
            let (meta, payload) = held_of(
                seq,
                frame.payload,
                &self.parts.wal,
                &self.parts.checkpoint,
                &mut self.names,
            )
            .map_err(|error| ReadFailure::Decode { seq, error })?;
            self.machine.place(seq, meta, payload, topology, now);
            read += 1;
            next = self.machine.next_read_in_pass(topology, now);
        }
        Ok(read)
    }

    fn reopen_reader(&mut self) {
        match self.parts.wal.reader(self.machine.checkpoint()) {
            Ok(reader) => self.reader = reader,
            Err(error) => tracing::warn!(%error, "ingress dispatch cannot reopen its WAL reader"),
        }
    }

    /// Carries out one of the machine's commands. `alone`: a commit is the
    /// only one in flight, and a local one then runs on this thread
    /// ([`CommitTarget::run_here`]); its report is the next event.
    fn execute(&mut self, command: Command<WalPayload>, alone: bool, now: Duration) {
        match command {
            Command::Commit(order) => {
                let done = CommitDone::new(self.events.clone(), self.generation);
                if !order.local {
                    self.parts.remote.start(order, done);
                } else if !alone {
                    self.parts.local.start(order, done);
                } else {
                    match self.parts.local.run_here(order, done) {
                        Ok(()) => {
                            self.status
                                .local_commits_run_here
                                .fetch_add(1, Ordering::Relaxed);
                        }
                        Err((order, done)) => self.parts.local.start(order, done),
                    }
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
        let generation = self.generation;
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
                let _ = events.send(Event::Gone {
                    generation,
                    question,
                    gone,
                });
            });
        if let Err(error) = spawned {
            // Unanswered, the question is asked again after the negative
            // answer's memory lapses; nothing is discarded meanwhile.
            tracing::warn!(%error, "cannot start a leader confirmation");
        }
    }

    /// Compacts the WAL behind the checkpoint's synced value when it moved.
    /// While a stored checkpoint waits for its sync, sets when to look
    /// again: the sync delay after now (plus slack). Nothing else wakes
    /// the loop when the checkpoint store's flusher syncs.
    fn compact(&mut self, now: Duration) {
        let checkpoint = &self.parts.checkpoint;
        let synced = checkpoint.synced();
        if synced > self.compacted_behind {
            match self.parts.wal.compact_behind(checkpoint) {
                Ok(_) => self.compacted_behind = synced,
                Err(error) => tracing::warn!(%error, "ingress WAL compaction failed"),
            }
        }
        let waiting = checkpoint.stored() > self.compacted_behind && !checkpoint.is_latched();
        self.compaction_due = match self.compaction_due {
            _ if !waiting => None,
            Some(at) if at > now => Some(at),
            _ => Some(now + self.parts.checkpoint_sync_delay + COMPACTION_SLACK),
        };
    }

    /// When the loop must run again at the latest, without news: the
    /// machine's next deadline, a compaction or a re-read due, and during
    /// a failure backoff not before it ends. `None`: nothing is pending.
    /// Now on the node's monotonic clock, in microseconds' precision: the
    /// machine compares commit latencies of well under a millisecond.
    fn now(&self) -> Duration {
        Duration::from_micros(self.parts.clock.now_us())
    }

    fn next_wakeup(&self, now: Duration) -> Option<Duration> {
        let due = [
            self.machine.next_deadline(&*self.parts.topology, now),
            self.compaction_due,
            self.reread_due,
            self.stall_report_due,
        ]
        .into_iter()
        .flatten()
        .min();
        if self.backoff_until > now {
            return Some(due.map_or(self.backoff_until, |at| at.max(self.backoff_until)));
        }
        due
    }

    /// Waits for news or the next wakeup, and applies what came. Returns
    /// `false` to stop.
    fn wait(&mut self, now: Duration) -> bool {
        let first = if self.watches.arm() {
            // News came during the pass: go round again without sleeping,
            // but first apply what is already queued. A commit this thread
            // ran reports itself on the queue; applied now, the record that
            // became durable meanwhile finds no commit in flight, commits
            // at once and runs here too, instead of lingering and then
            // waking a commit worker.
            match self.receiver.try_recv() {
                Some(event) => event,
                None => return true,
            }
        } else {
            let wait = self
                .next_wakeup(now)
                .map(|at| at.saturating_sub(self.now()));
            let received = match wait {
                Some(wait) => self.receiver.recv_timeout(wait),
                None => self.receiver.recv_until(None),
            };
            match received {
                Received::Item(event) => event,
                Received::TimedOut => return true,
                Received::Disconnected => return false,
            }
        };
        let mut next = Some(first);
        while let Some(event) = next {
            if !self.apply(event) {
                return false;
            }
            next = self.receiver.try_recv();
        }
        true
    }

    fn apply(&mut self, event: Event) -> bool {
        let now = self.now();
        match event {
            // The next pass reads the frontier and the topology anew.
            Event::Wake => {}
            // Reports to a generation that panicked: its machine is gone.
            Event::CommitDone { generation, .. } | Event::Gone { generation, .. }
                if generation != self.generation => {}
            Event::CommitDone {
                id,
                outcome,
                records,
                ..
            } => {
                self.machine.commit_done(id, outcome, records, now);
                let tally = self.machine.reroutes();
                self.status.reroutes.store(tally.commits, Ordering::Relaxed);
                self.status
                    .rerouted_records
                    .store(tally.records, Ordering::Relaxed);
            }
            Event::Gone { question, gone, .. } => self.machine.gone_answered(question, gone, now),
            Event::Stop => return false,
        }
        true
    }
}

/// The topic and incarnation names of the last record read, shared by
/// the records read after it while they match: a run of records to one
/// topic holds one copy of each name instead of one per record, and their
/// destinations compare equal by pointer.
#[derive(Debug, Default)]
pub(crate) struct RecordNames {
    topic: Option<Arc<str>>,
    incarnation: Option<Arc<str>>,
}

impl RecordNames {
    fn topic(&mut self, name: &str) -> Arc<str> {
        shared_name(&mut self.topic, name)
    }

    fn incarnation(&mut self, name: &str) -> Arc<str> {
        shared_name(&mut self.incarnation, name)
    }
}

/// The name kept in `kept` when it is `name`; else a new one, kept.
fn shared_name(kept: &mut Option<Arc<str>>, name: &str) -> Arc<str> {
    match kept {
        Some(same) if **same == *name => Arc::clone(same),
        _ => Arc::clone(kept.insert(Arc::from(name))),
    }
}

/// The dispatcher's view of WAL record `seq`: where it goes, and what a
/// commit carries, its origin included. The record's bytes are copied
/// once; its key, payload and idempotency key are slices of that copy.
///
/// # Errors
/// The record does not decode.
pub(crate) fn held_of(
    seq: u64,
    bytes: &[u8],
    wal: &Wal,
    checkpoint: &CheckpointStore,
    names: &mut RecordNames,
) -> Result<(RecordMeta, WalPayload), RecordError> {
    let record = WalRecordRef::decode(bytes)?;
    let meta = RecordMeta {
        home: Destination {
            topic: names.topic(record.topic),
            partition: record.partition,
        },
        bytes: bytes.len() as u64,
        incarnation: record.incarnation_id.map(|name| names.incarnation(name)),
    };
    let owned = Bytes::copy_from_slice(bytes);
    let payload = WalPayload {
        key: part_of(&owned, bytes, record.key),
        payload: part_of(&owned, bytes, record.payload),
        created_at_unix_ms: record.created_at_unix_ms,
        origin: Some(Origin {
            id: wal.origins().id_of(seq),
            seq,
            // No sequence below the synced checkpoint is ever read again,
            // after any crash.
            floor: checkpoint.synced().min(seq),
        }),
        idempotency_key: part_of(&owned, bytes, record.idempotency_key),
    };
    Ok((meta, payload))
}

/// `field`, a part of `bytes`, as the same part of `owned` (a copy of
/// `bytes`); a copy of its own when empty or not inside `bytes`.
fn part_of(owned: &Bytes, bytes: &[u8], field: &[u8]) -> Bytes {
    let start = (field.as_ptr() as usize).wrapping_sub(bytes.as_ptr() as usize);
    match start.checked_add(field.len()) {
        Some(end) if !field.is_empty() && end <= bytes.len() => owned.slice(start..end),
        _ => Bytes::copy_from_slice(field),
    }
}
