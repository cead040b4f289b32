//! The dispatcher's decision logic: a state machine with no I/O.
//!
//! The runtime feeds it what happened (records read, commits finished,
//! leader answers, the time) and carries out what it returns. Between the
//! checkpoint and the read frontier every sequence number is exactly one of:
//! done (committed or discarded; in no set), held (queued, in a commit, or
//! kept as a probe) or skipped (left in the WAL, its placement facts kept in
//! `skipped` so a rescan reads only the records it will place). `pending`
//! holds every seq that is held or skipped, so the checkpoint, its first
//! element, never passes a record that is not done.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::constants::{
    DESTINATION_QUEUE_RECORDS_MIN, HELD_LIMIT_DESTINATIONS, LATENCY_EWMA_WEIGHT,
    LINGER_LATENCY_FACTOR, LOOKAHEAD_WINDOWS, TARGET_RECORDS_PER_DESTINATION, WINDOW_RECORDS_MAX,
    WINDOW_RECORDS_MIN,
};
use super::pending::PendingSeqs;
use super::types::{
    Command, CommitId, CommitOrder, CommitOutcome, DispatchConfig, GoneQuestion, Held, RecordMeta,
};
use crate::topology::{Destination, NodeId, Route, Topology};

/// A failing destination: its first failed attempt's start, and the one
/// record it keeps to probe the owner with.
#[derive(Debug)]
struct Failing<P> {
    since: Duration,
    probe: Option<Held<P>>,
    next_probe_at: Duration,
    reroute_announced: bool,
}

#[derive(Debug)]
struct DestinationState<P> {
    queue: VecDeque<Held<P>>,
    in_flight: Option<CommitId>,
    failing: Option<Failing<P>>,
    /// The `queued_at` of the record heading the queue when the destination
    /// began to linger beside running commits. While that record still heads
    /// the queue, the destination waits out its deadline even if those
    /// commits land first. Otherwise the partitions of one busy moment all
    /// leave together whenever its last commit lands, and pay their fsyncs
    /// side by side, on the disk the WAL's next group commit waits for.
    lingering_since: Option<Duration>,
}

impl<P> Default for DestinationState<P> {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
            in_flight: None,
            failing: None,
            lingering_since: None,
        }
    }
}

#[derive(Debug)]
struct InFlight {
    destination: Destination,
    node: NodeId,
    started: Duration,
    records: usize,
    hung: bool,
}

/// What to do with one record, given the state now.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Place(Destination),
    Skip,
    Ask(GoneQuestion),
    Discard(GoneQuestion),
}

/// The leader's answers about deleted topics and incarnations.
#[derive(Debug, Default)]
struct Confirmations {
    gone: HashSet<GoneQuestion>,
    asked: HashSet<GoneQuestion>,
    unconfirmed_until: HashMap<GoneQuestion, Duration>,
}

/// The produce dispatcher's state machine. `P` is the record payload, opaque
/// here (bytes in production, `()` or a tag in tests).
#[derive(Debug)]
pub struct Dispatcher<P> {
    config: DispatchConfig,
    checkpoint_stored: u64,
    read_frontier: u64,
    durable: u64,
    pending: PendingSeqs,
    skipped: BTreeMap<u64, RecordMeta>,
    skipped_by_home: HashMap<Destination, BTreeSet<u64>>,
    destinations: BTreeMap<Destination, DestinationState<P>>,
    commits: BTreeMap<CommitId, InFlight>,
    owner_latency: HashMap<NodeId, Duration>,
    next_commit_id: u64,
    held: usize,
    rescan_position: Option<u64>,
    last_rescan: Duration,
    rescan_wanted: bool,
    round_robin_after: Option<Destination>,
    confirmations: Confirmations,
    commands: Vec<Command<P>>,
    reroutes: RerouteTally,
}

/// Commits that stored records in a sibling of their home partition, and
/// the records they moved: the seam that can still store a record twice
/// (its home owner may have stored it before going silent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RerouteTally {
    /// Committed commits holding at least one rerouted record.
    pub commits: u64,
    /// Records committed outside their home partition.
    pub records: u64,
}

impl<P> Dispatcher<P> {
    /// A dispatcher starting at `checkpoint`, the stored first seq not done
    /// (or the oldest WAL segment's base when the checkpoint is below it).
    pub fn new(config: DispatchConfig, checkpoint: u64) -> Self {
        Self {
            config,
            checkpoint_stored: checkpoint,
            read_frontier: checkpoint,
            durable: checkpoint,
            pending: PendingSeqs::default(),
            skipped: BTreeMap::new(),
            skipped_by_home: HashMap::new(),
            destinations: BTreeMap::new(),
            commits: BTreeMap::new(),
            owner_latency: HashMap::new(),
            next_commit_id: 0,
            held: 0,
            rescan_position: None,
            last_rescan: Duration::ZERO,
            rescan_wanted: false,
            round_robin_after: None,
            confirmations: Confirmations::default(),
            commands: Vec::new(),
            reroutes: RerouteTally::default(),
        }
    }

    /// Reroutes committed so far.
    pub fn reroutes(&self) -> RerouteTally {
        self.reroutes
    }

    /// The first sequence number not done: everything below it committed or
    /// was discarded.
    pub fn checkpoint(&self) -> u64 {
        self.pending.first().unwrap_or(self.read_frontier)
    }

    /// The next sequence number never read.
    pub fn read_frontier(&self) -> u64 {
        self.read_frontier
    }

    /// Records held in memory: queued, in non-hung commits, or probes.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Records left in the WAL to be read again.
    pub fn skipped(&self) -> usize {
        self.skipped.len()
    }

    /// Commits in flight, hung ones included.
    pub fn commits_in_flight(&self) -> usize {
        self.commits.len()
    }

    /// Records held for every destination seen: 64 per destination, clamped.
    pub fn window(&self) -> usize {
        (TARGET_RECORDS_PER_DESTINATION * self.destinations.len())
            .clamp(WINDOW_RECORDS_MIN, WINDOW_RECORDS_MAX)
    }

    /// A destination's queue cap: a quarter of the window, at least 4,096.
    pub fn queue_cap(&self) -> usize {
        (self.window() / 4).max(DESTINATION_QUEUE_RECORDS_MIN)
    }

    /// The reader stops once this many records are held: the window, but at
    /// least four destinations' queues.
    pub fn held_limit(&self) -> usize {
        self.window()
            .max(HELD_LIMIT_DESTINATIONS * self.queue_cap())
    }

    /// The first sequence number past the reader's lookahead: it never
    /// reads [`LOOKAHEAD_WINDOWS`] windows or more past the checkpoint.
    fn lookahead_end(&self) -> u64 {
        self.checkpoint()
            .saturating_add(LOOKAHEAD_WINDOWS * u64::try_from(self.window()).unwrap_or(u64::MAX))
    }

    /// Whether the reader stopped at its lookahead with durable records
    /// beyond it. The record at the checkpoint is then what every
    /// destination waits for: nothing more is read, for any partition,
    /// until it is done.
    pub fn lookahead_exhausted(&self) -> bool {
        self.read_frontier >= self.lookahead_end() && self.read_frontier < self.durable
    }

    /// The home partition of the record at the checkpoint, the one every
    /// other waits for once the lookahead is exhausted; `None` when nothing
    /// is pending, or when that record is in a commit in flight.
    pub fn checkpoint_holder(&self) -> Option<&Destination> {
        let checkpoint = self.pending.first()?;
        if let Some(meta) = self.skipped.get(&checkpoint) {
            return Some(&meta.home);
        }
        self.destinations.values().find_map(|state| {
            let probe = state.failing.as_ref().and_then(|f| f.probe.as_ref());
            state
                .queue
                .iter()
                .chain(probe)
                .find(|held| held.seq == checkpoint)
                .map(|held| &held.meta.home)
        })
    }

    /// The destinations failing now (their last commit failed and they
    /// probe their owner), and the one failing longest with when its first
    /// failed attempt started.
    pub fn failing(&self) -> (usize, Option<(&Destination, Duration)>) {
        let mut count = 0;
        let mut longest: Option<(&Destination, Duration)> = None;
        for (destination, state) in &self.destinations {
            let Some(failing) = &state.failing else {
                continue;
            };
            count += 1;
            if longest.is_none_or(|(_, since)| failing.since < since) {
                longest = Some((destination, failing.since));
            }
        }
        (count, longest)
    }

    /// Whether the reader is held back by [`Self::held_limit`].
    fn reader_held_back(&self) -> bool {
        self.held >= self.held_limit()
    }

    /// The WAL made every seq below `next` durable.
    pub fn durable_advanced(&mut self, next: u64) {
        self.durable = self.durable.max(next);
    }

    /// The next sequence number the runtime should read and hand to
    /// [`Dispatcher::place`], or `None` when nothing is to be read now.
    /// Within a rescan, seqs come in WAL order; a rescan starts below the
    /// frontier, so the runtime repositions its WAL cursor when the seq it
    /// gets is not the one after the last it read.
    pub fn next_read(&mut self, topology: &dyn Topology, now: Duration) -> Option<u64> {
        self.follow_time(topology, now);
        self.next_read_in_pass(topology, now)
    }

    /// [`Dispatcher::next_read`] for the reads after the first of one pass
    /// at the same `now`, with a [`Dispatcher::place`] between each two:
    /// placing a record changes nothing that time and membership act on
    /// (commits in flight, failing destinations), so the pass skips going
    /// over every commit and destination again for each record. A change
    /// of the topology during the pass is followed by the next pass or
    /// poll.
    pub fn next_read_in_pass(&mut self, topology: &dyn Topology, now: Duration) -> Option<u64> {
        if self.reader_held_back() {
            return None;
        }
        if self.rescan_position.is_none()
            && !self.skipped.is_empty()
            && (self.rescan_wanted || now >= self.last_rescan + self.config.rescan_interval)
        {
            self.rescan_position = self.skipped.first_key_value().map(|(seq, _)| *seq);
            self.last_rescan = now;
            self.rescan_wanted = false;
        }
        if let Some(seq) = self.next_rescan_read(topology, now) {
            return Some(seq);
        }
        (self.read_frontier < self.durable && self.read_frontier < self.lookahead_end())
            .then_some(self.read_frontier)
    }

    /// Walks the skipped records from the rescan position: discards what the
    /// leader confirmed gone, asks what needs asking, and stops at the first
    /// record that will be placed.
    fn next_rescan_read(&mut self, topology: &dyn Topology, now: Duration) -> Option<u64> {
        let mut position = self.rescan_position?;
        while let Some((seq, meta)) = self
            .skipped
            .range(position..)
            .next()
            .map(|(seq, meta)| (*seq, meta.clone()))
        {
            position = seq + 1;
            match self.decide(seq, &meta, topology, now) {
                Decision::Place(_) => {
                    self.rescan_position = Some(seq);
                    return Some(seq);
                }
                Decision::Skip => {}
                Decision::Ask(question) => self.ask(question),
                Decision::Discard(question) => {
                    self.unskip(seq, &meta);
                    self.pending.remove(seq);
                    self.commands.push(Command::Discarded {
                        question,
                        seqs: vec![seq],
                    });
                }
            }
        }
        self.rescan_position = None;
        None
    }

    /// Places the record at `seq`, which [`Dispatcher::next_read`] returned
    /// and the runtime read from the WAL.
    ///
    /// # Panics
    /// If `seq` is neither the read frontier nor a skipped record: the
    /// runtime read something it was not asked to, and the marks would lie.
    pub fn place(
        &mut self,
        seq: u64,
        meta: RecordMeta,
        payload: P,
        topology: &dyn Topology,
        now: Duration,
    ) {
        if seq == self.read_frontier {
            self.read_frontier += 1;
            self.pending.insert(seq);
        } else {
            let known = self.skipped.get(&seq).cloned();
            assert!(
                known.is_some(),
                "dispatcher placed seq {seq}, neither skipped nor next"
            );
            if let Some(known) = known {
                self.unskip(seq, &known);
            }
            if let Some(position) = self.rescan_position.as_mut() {
                *position = (*position).max(seq + 1);
            }
        }
        match self.decide(seq, &meta, topology, now) {
            Decision::Place(destination) => self.enqueue(destination, seq, meta, payload, now),
            Decision::Skip => self.skip(seq, meta),
            Decision::Ask(question) => {
                self.ask(question);
                self.skip(seq, meta);
            }
            Decision::Discard(question) => {
                self.pending.remove(seq);
                self.commands.push(Command::Discarded {
                    question,
                    seqs: vec![seq],
                });
            }
        }
        self.store_checkpoint_if_moved();
    }

    fn decide(
        &self,
        seq: u64,
        meta: &RecordMeta,
        topology: &dyn Topology,
        now: Duration,
    ) -> Decision {
        let home = &meta.home;
        let Some(topic) = topology.topic(&home.topic) else {
            return self.gone_decision(
                GoneQuestion {
                    topic: home.topic.clone(),
                    incarnation: None,
                },
                topology,
                now,
            );
        };
        if let Some(id) = &meta.incarnation
            && topic.incarnation.as_ref() != Some(id)
        {
            let question = GoneQuestion {
                topic: home.topic.clone(),
                incarnation: Some(id.clone()),
            };
            return self.gone_decision(question, topology, now);
        }
        if home.partition >= topic.partitions {
            // The replica does not know this partition (yet): leave it.
            return Decision::Skip;
        }
        let earlier_skipped = self
            .skipped_by_home
            .get(home)
            .and_then(|seqs| seqs.first())
            .is_some_and(|first| *first < seq);
        if earlier_skipped {
            return Decision::Skip;
        }
        let target = if self.rerouting(home, topology, now) {
            match self.sibling(home, topic.partitions, topology) {
                Some(sibling) => sibling,
                None => return Decision::Skip,
            }
        } else {
            home.clone()
        };
        if self.accepts_records(&target) {
            Decision::Place(target)
        } else {
            Decision::Skip
        }
    }

    fn gone_decision(
        &self,
        question: GoneQuestion,
        topology: &dyn Topology,
        now: Duration,
    ) -> Decision {
        if self.confirmations.gone.contains(&question) {
            return Decision::Discard(question);
        }
        let recently_unconfirmed = self
            .confirmations
            .unconfirmed_until
            .get(&question)
            .is_some_and(|until| now < *until);
        if !topology.caught_up()
            || recently_unconfirmed
            || self.confirmations.asked.contains(&question)
        {
            return Decision::Skip;
        }
        Decision::Ask(question)
    }

    fn ask(&mut self, question: GoneQuestion) {
        if self.confirmations.asked.insert(question.clone()) {
            self.commands.push(Command::ConfirmGone(question));
        }
    }

    /// The leader answered a [`Command::ConfirmGone`].
    pub fn gone_answered(&mut self, question: GoneQuestion, gone: bool, now: Duration) {
        self.confirmations.asked.remove(&question);
        if gone {
            self.confirmations.unconfirmed_until.remove(&question);
            self.confirmations.gone.insert(question);
            self.rescan_wanted = true;
        } else {
            let until = now + self.config.confirm_negative_ttl;
            self.confirmations.unconfirmed_until.insert(question, until);
        }
    }

    /// Whether records whose home is `home` go to a sibling now: its owner
    /// is dead, or its commits have failed for the reroute grace.
    fn rerouting(&self, home: &Destination, topology: &dyn Topology, now: Duration) -> bool {
        if matches!(topology.route(home), Route::Owner { alive: false, .. }) {
            return true;
        }
        self.failing_since(home)
            .is_some_and(|since| now >= since + self.config.reroute_grace)
    }

    fn failing_since(&self, destination: &Destination) -> Option<Duration> {
        self.destinations
            .get(destination)?
            .failing
            .as_ref()
            .map(|failing| failing.since)
    }

    /// The next partition after `home`, counting up and wrapping, whose
    /// owner is alive and whose commits are neither failing nor hung.
    fn sibling(
        &self,
        home: &Destination,
        partitions: u32,
        topology: &dyn Topology,
    ) -> Option<Destination> {
        (1..partitions)
            .map(|step| Destination {
                topic: home.topic.clone(),
                partition: (home.partition + step) % partitions,
            })
            .find(|candidate| {
                matches!(topology.route(candidate), Route::Owner { alive: true, .. })
                    && self.failing_since(candidate).is_none()
                    && !self.is_hung(candidate)
            })
    }

    fn is_hung(&self, destination: &Destination) -> bool {
        self.destinations
            .get(destination)
            .and_then(|state| state.in_flight)
            .and_then(|id| self.commits.get(&id))
            .is_some_and(|commit| commit.hung)
    }

    /// Whether `destination` takes a new record now: not hung, not failing
    /// (its probe is held), and its queue not full.
    fn accepts_records(&self, destination: &Destination) -> bool {
        let cap = self.queue_cap();
        match self.destinations.get(destination) {
            None => true,
            Some(state) => {
                state.failing.is_none() && !self.is_hung(destination) && state.queue.len() < cap
            }
        }
    }

    fn enqueue(
        &mut self,
        destination: Destination,
        seq: u64,
        meta: RecordMeta,
        payload: P,
        now: Duration,
    ) {
        let state = self.destinations.entry(destination).or_default();
        state.queue.push_back(Held {
            seq,
            meta,
            payload,
            queued_at: now,
        });
        self.held += 1;
    }

    fn skip(&mut self, seq: u64, meta: RecordMeta) {
        debug_assert!(self.pending.contains(seq));
        self.skipped_by_home
            .entry(meta.home.clone())
            .or_default()
            .insert(seq);
        self.skipped.insert(seq, meta);
    }

    fn unskip(&mut self, seq: u64, meta: &RecordMeta) {
        self.skipped.remove(&seq);
        if let Some(seqs) = self.skipped_by_home.get_mut(&meta.home) {
            seqs.remove(&seq);
            if seqs.is_empty() {
                self.skipped_by_home.remove(&meta.home);
            }
        }
    }

    /// Returns held records to the WAL: they become skipped and are read
    /// again by a later rescan.
    fn return_to_wal(&mut self, records: impl IntoIterator<Item = Held<P>>) {
        for record in records {
            self.held -= 1;
            self.skip(record.seq, record.meta);
        }
        self.rescan_wanted = true;
    }

    /// Everything that is due at `now`: hung commits, dead owners, probes,
    /// new commits, the checkpoint. Returns the commands to carry out.
    pub fn poll(&mut self, topology: &dyn Topology, now: Duration) -> Vec<Command<P>> {
        self.follow_time(topology, now);
        self.send_probes(topology, now);
        self.send_commits(topology, now);
        self.store_checkpoint_if_moved();
        std::mem::take(&mut self.commands)
    }

    /// The transitions that time and membership alone cause: commits turning
    /// hung, dead owners giving up their records, reroute graces passing.
    /// Idempotent, so both the read and the poll path run it first.
    fn follow_time(&mut self, topology: &dyn Topology, now: Duration) {
        self.mark_hung_commits(now);
        self.release_dead_owners(topology);
        self.release_deleted_topics(topology);
        self.announce_reroutes(now);
    }

    /// A queue (and a failing destination's probe) whose topic the replica
    /// no longer holds goes back to the WAL, where the rescan asks the
    /// leader and discards it once confirmed. Without this, records whose
    /// destination never resolves again (a topic deleted before it was
    /// assigned, or while its owner was failing) would never be checked
    /// again and would pin the checkpoint.
    fn release_deleted_topics(&mut self, topology: &dyn Topology) {
        let deleted: Vec<Destination> = self
            .destinations
            .iter()
            .filter(|(_, state)| {
                !state.queue.is_empty()
                    || state
                        .failing
                        .as_ref()
                        .is_some_and(|failing| failing.probe.is_some())
            })
            .filter(|(destination, _)| topology.topic(&destination.topic).is_none())
            .map(|(destination, _)| destination.clone())
            .collect();
        for destination in deleted {
            self.release_destination(&destination);
        }
    }

    /// `destination` gives up its queue and its failing state: the queued
    /// records and the probe go back to the WAL.
    fn release_destination(&mut self, destination: &Destination) {
        let Some(state) = self.destinations.get_mut(destination) else {
            return;
        };
        let mut released: Vec<Held<P>> = state.queue.drain(..).collect();
        if let Some(probe) = state.failing.take().and_then(|failing| failing.probe) {
            released.push(probe);
        }
        self.return_to_wal(released);
    }

    fn mark_hung_commits(&mut self, now: Duration) {
        let newly_hung: Vec<CommitId> = self
            .commits
            .iter()
            .filter(|(_, commit)| !commit.hung && now >= commit.started + self.config.hung_after)
            .map(|(id, _)| *id)
            .collect();
        for id in newly_hung {
            let Some(commit) = self.commits.get_mut(&id) else {
                continue;
            };
            commit.hung = true;
            let (destination, records) = (commit.destination.clone(), commit.records);
            // A hung commit stops counting against the window.
            self.held -= records;
            let followers = self
                .destinations
                .get_mut(&destination)
                .map(|state| std::mem::take(&mut state.queue))
                .unwrap_or_default();
            self.return_to_wal(followers);
        }
    }

    /// A destination whose owner membership reports dead gives up its queue
    /// and its probe: its records go to siblings at once, and when the owner
    /// is back the destination starts afresh.
    fn release_dead_owners(&mut self, topology: &dyn Topology) {
        let dead: Vec<Destination> = self
            .destinations
            .iter()
            .filter(|(_, state)| !state.queue.is_empty() || state.failing.is_some())
            .filter(|(destination, _)| {
                matches!(
                    topology.route(destination),
                    Route::Owner { alive: false, .. }
                )
            })
            .map(|(destination, _)| destination.clone())
            .collect();
        for destination in dead {
            self.release_destination(&destination);
        }
    }

    /// When a failing destination passes the reroute grace, its skipped
    /// records are read again so they reach a sibling now.
    fn announce_reroutes(&mut self, now: Duration) {
        let grace = self.config.reroute_grace;
        for state in self.destinations.values_mut() {
            if let Some(failing) = state.failing.as_mut()
                && !failing.reroute_announced
                && now >= failing.since + grace
            {
                failing.reroute_announced = true;
                self.rescan_wanted = true;
            }
        }
    }

    /// Commits in flight that are not hung: the ones holding a slot.
    fn commits_running(&self) -> usize {
        self.commits.values().filter(|commit| !commit.hung).count()
    }

    fn free_slots(&self) -> usize {
        self.config
            .commit_slots
            .saturating_sub(self.commits_running())
    }

    fn send_probes(&mut self, topology: &dyn Topology, now: Duration) {
        let due: Vec<Destination> =
            self.destinations
                .iter()
                .filter(|(_, state)| state.in_flight.is_none())
                .filter(|(_, state)| {
                    state.failing.as_ref().is_some_and(|failing| {
                        failing.probe.is_some() && now >= failing.next_probe_at
                    })
                })
                .map(|(destination, _)| destination.clone())
                .collect();
        for destination in due {
            if self.free_slots() == 0 {
                return;
            }
            let Route::Owner { node, local, .. } = topology.route(&destination) else {
                continue;
            };
            let probe = self
                .destinations
                .get_mut(&destination)
                .and_then(|state| state.failing.as_mut())
                .and_then(|failing| failing.probe.take());
            if let Some(probe) = probe {
                let budget = self.config.probe_budget;
                self.start_commit(destination, node, local, vec![probe], budget, true, now);
            }
        }
    }

    fn send_commits(&mut self, topology: &dyn Topology, now: Duration) {
        // Whether other commits run is judged once, before this poll starts
        // any: an idle dispatcher sends every destination at once.
        let others_running = self.commits_running() > 0;
        let ready: Vec<Destination> = self
            .destinations
            .iter()
            .filter(|(_, state)| {
                !state.queue.is_empty() && state.in_flight.is_none() && state.failing.is_none()
            })
            .map(|(destination, _)| destination.clone())
            .collect();
        // Serve destinations round-robin, starting after the one served
        // last, so sixteen slots are shared fairly among many partitions.
        let start = self.round_robin_after.as_ref().map_or(0, |last| {
            ready.partition_point(|destination| destination <= last)
        });
        let rotated = ready[start..].iter().chain(ready[..start].iter()).cloned();
        for destination in rotated.collect::<Vec<_>>() {
            if self.free_slots() == 0 {
                return;
            }
            let Route::Owner {
                node,
                local,
                alive: true,
            } = topology.route(&destination)
            else {
                // Unassigned: looked up again on the next poll (the runtime
                // polls after every topology change, and at least every
                // `unresolved_retry`). Dead: released on the next poll.
                continue;
            };
            if self.lingers(&destination, node, now, others_running) {
                if let Some(state) = self.destinations.get_mut(&destination) {
                    state.lingering_since = state.queue.front().map(|record| record.queued_at);
                }
                continue;
            }
            let was_full = self
                .destinations
                .get(&destination)
                .is_some_and(|state| state.queue.len() >= self.queue_cap());
            let batch = self.take_batch(&destination, local, topology);
            if batch.is_empty() {
                continue;
            }
            if was_full {
                // Records read while the queue was full stayed in the WAL;
                // there is room for them now, so they are read again at
                // once rather than at the next periodic rescan. Waiting for
                // that one held the checkpoint, and so the reader's
                // lookahead, for up to a second per window.
                self.rescan_wanted = true;
            }
            let budget = self.config.commit_budget;
            self.round_robin_after = Some(destination.clone());
            self.start_commit(destination, node, local, batch, budget, false, now);
        }
    }

    /// A destination holding fewer than 64 records waits for company while
    /// other commits run: up to twice its owner's recent commit latency since
    /// its oldest record, at most 50 ms. Once it lingers it waits out that
    /// deadline, even if the other commits land first. An idle dispatcher
    /// (`others_running` is judged once per poll), an owner with no latency
    /// measured yet, and a failing destination commit at once.
    fn lingers(
        &self,
        destination: &Destination,
        node: NodeId,
        now: Duration,
        others_running: bool,
    ) -> bool {
        self.linger_deadline(destination, node, others_running)
            .is_some_and(|deadline| now < deadline)
    }

    fn linger_deadline(
        &self,
        destination: &Destination,
        node: NodeId,
        others_running: bool,
    ) -> Option<Duration> {
        let state = self.destinations.get(destination)?;
        if state.queue.len() >= TARGET_RECORDS_PER_DESTINATION {
            return None;
        }
        let oldest = state.queue.front()?.queued_at;
        if !others_running && state.lingering_since != Some(oldest) {
            return None;
        }
        let latency = self.owner_latency.get(&node)?;
        Some(oldest + (*latency * LINGER_LATENCY_FACTOR).min(self.config.linger_max))
    }

    /// Takes the next batch off a destination's queue: everything queued,
    /// within the byte budget for a remote owner (at least one record).
    /// Records whose topic or incarnation changed meanwhile go back to the
    /// WAL instead of leaving.
    fn take_batch(
        &mut self,
        destination: &Destination,
        local: bool,
        topology: &dyn Topology,
    ) -> Vec<Held<P>> {
        let budget = self.config.remote_commit_bytes_max;
        let Some(state) = self.destinations.get_mut(destination) else {
            return Vec::new();
        };
        state.lingering_since = None;
        let mut batch = Vec::new();
        let mut stale = Vec::new();
        let mut bytes = 0u64;
        let current = topology.topic(&destination.topic);
        while let Some(front) = state.queue.front() {
            if !local && !batch.is_empty() && bytes + front.meta.bytes > budget {
                break;
            }
            let Some(record) = state.queue.pop_front() else {
                break;
            };
            let still_live = current.as_ref().is_some_and(|topic| {
                record.meta.incarnation.is_none() || record.meta.incarnation == topic.incarnation
            });
            if still_live {
                bytes += record.meta.bytes;
                batch.push(record);
            } else {
                stale.push(record);
            }
        }
        if !stale.is_empty() {
            self.return_to_wal(stale);
        }
        batch
    }

    #[allow(clippy::too_many_arguments)]
    fn start_commit(
        &mut self,
        destination: Destination,
        node: NodeId,
        local: bool,
        records: Vec<Held<P>>,
        budget: Duration,
        probe: bool,
        now: Duration,
    ) {
        let id = CommitId(self.next_commit_id);
        self.next_commit_id += 1;
        if let Some(state) = self.destinations.get_mut(&destination) {
            state.in_flight = Some(id);
        }
        self.commits.insert(
            id,
            InFlight {
                destination: destination.clone(),
                node,
                started: now,
                records: records.len(),
                hung: false,
            },
        );
        self.commands.push(Command::Commit(CommitOrder {
            id,
            destination,
            node,
            local,
            records,
            budget,
            probe,
        }));
    }

    /// A commit ordered by [`Command::Commit`] ended; `records` are the ones
    /// it carried, handed back.
    ///
    /// # Panics
    /// If `id` is not a commit in flight, or `records` are not its records.
    pub fn commit_done(
        &mut self,
        id: CommitId,
        outcome: CommitOutcome,
        records: Vec<Held<P>>,
        now: Duration,
    ) {
        let commit = self.commits.remove(&id);
        assert!(
            commit.is_some(),
            "dispatcher: unknown commit {id:?} finished"
        );
        let Some(commit) = commit else { return };
        assert_eq!(
            commit.records,
            records.len(),
            "commit {id:?} came back with other records"
        );
        if !commit.hung {
            self.held -= commit.records;
        }
        if commit.hung {
            // Whatever it returned to the WAL can come back now.
            self.rescan_wanted = true;
        }
        let destination = commit.destination.clone();
        if let Some(state) = self.destinations.get_mut(&destination) {
            state.in_flight = None;
        }
        match outcome {
            CommitOutcome::Committed => self.committed(&commit, records, now),
            CommitOutcome::IncarnationMismatch => {
                // Not the destination's fault: everything goes back to the
                // WAL, in order, to be checked against the replica again.
                let queued = self
                    .destinations
                    .get_mut(&destination)
                    .map(|state| std::mem::take(&mut state.queue))
                    .unwrap_or_default();
                self.held += records.len();
                self.return_to_wal(records.into_iter().chain(queued));
            }
            CommitOutcome::Failed => self.failed(&commit, records, now),
        }
        self.store_checkpoint_if_moved();
    }

    fn committed(&mut self, commit: &InFlight, records: Vec<Held<P>>, now: Duration) {
        let mut rerouted = 0;
        for record in &records {
            let removed = self.pending.remove(record.seq);
            assert!(removed, "committed seq {} was not pending", record.seq);
            if record.meta.home != commit.destination {
                rerouted += 1;
            }
        }
        if rerouted > 0 {
            self.reroutes.commits += 1;
            self.reroutes.records += rerouted;
        }
        let sample = now.saturating_sub(commit.started);
        let average = self.owner_latency.entry(commit.node).or_insert(sample);
        *average = average.mul_f64(1.0 - LATENCY_EWMA_WEIGHT) + sample.mul_f64(LATENCY_EWMA_WEIGHT);
        if let Some(state) = self.destinations.get_mut(&commit.destination)
            && state.failing.take().is_some()
        {
            // Recovered: its records come back from the WAL, and records
            // rerouted away from it come home again.
            self.rescan_wanted = true;
        }
    }

    fn failed(&mut self, commit: &InFlight, records: Vec<Held<P>>, now: Duration) {
        let probe_interval = self.config.probe_interval;
        let mut records = records.into_iter();
        let Some(probe) = records.next() else { return };
        let Some(state) = self.destinations.get_mut(&commit.destination) else {
            return;
        };
        let queued: Vec<Held<P>> = state.queue.drain(..).collect();
        match state.failing.as_mut() {
            Some(failing) => {
                failing.probe = Some(probe);
                failing.next_probe_at = now + probe_interval;
            }
            None => {
                state.failing = Some(Failing {
                    since: commit.started,
                    probe: Some(probe),
                    next_probe_at: now + probe_interval,
                    reroute_announced: false,
                });
            }
        }
        // The probe stays held; the rest of the batch and the queue go back.
        self.held += 1;
        let rest: Vec<Held<P>> = records.collect();
        self.held += rest.len();
        self.return_to_wal(rest.into_iter().chain(queued));
    }

    /// When the runtime should poll again at the latest, if nothing else
    /// happens first: a commit turning hung, a probe due, a linger ending,
    /// the rescan backstop, an unresolved owner's retry, a reroute grace.
    pub fn next_deadline(&self, topology: &dyn Topology, now: Duration) -> Option<Duration> {
        let hung = self
            .commits
            .values()
            .filter(|commit| !commit.hung)
            .map(|commit| commit.started + self.config.hung_after);
        let failing = self
            .destinations
            .values()
            .filter_map(|state| state.failing.as_ref());
        let probes = failing
            .clone()
            .filter(|failing| failing.probe.is_some())
            .map(|failing| failing.next_probe_at);
        let reroutes = failing
            .filter(|failing| !failing.reroute_announced)
            .map(|failing| failing.since + self.config.reroute_grace);
        let waiting = self
            .destinations
            .iter()
            .filter(|(_, state)| !state.queue.is_empty() && state.in_flight.is_none());
        let others_running = self.commits_running() > 0;
        let mut lingers = Vec::new();
        for (destination, _) in waiting {
            match topology.route(destination) {
                Route::Owner { node, .. } => {
                    lingers.extend(self.linger_deadline(destination, node, others_running))
                }
                Route::Unassigned => lingers.push(now + self.config.unresolved_retry),
            }
        }
        // A rescan that is wanted runs now, unless the reader is held back
        // by its limit: then a commit landing wakes the loop anyway.
        let rescan = (!self.skipped.is_empty()).then(|| {
            if self.rescan_wanted && !self.reader_held_back() {
                now
            } else {
                self.last_rescan + self.config.rescan_interval
            }
        });
        hung.chain(probes)
            .chain(reroutes)
            .chain(lingers)
            .chain(rescan)
            .min()
    }

    fn store_checkpoint_if_moved(&mut self) {
        let checkpoint = self.checkpoint();
        assert!(
            checkpoint >= self.checkpoint_stored,
            "checkpoint went backwards: {checkpoint} < {}",
            self.checkpoint_stored
        );
        if checkpoint > self.checkpoint_stored {
            self.checkpoint_stored = checkpoint;
            self.commands.push(Command::StoreCheckpoint(checkpoint));
        }
    }
}

/// The incarnation ids a commit's records carry, as runs of (count, id), for
/// the commit RPC's trailing section. `None` when no record has an id.
pub fn incarnation_runs<P>(records: &[Held<P>]) -> Option<Vec<(u32, Option<Arc<str>>)>> {
    if records
        .iter()
        .all(|record| record.meta.incarnation.is_none())
    {
        return None;
    }
    let mut runs: Vec<(u32, Option<Arc<str>>)> = Vec::new();
    for record in records {
        match runs.last_mut() {
            Some((count, id)) if *id == record.meta.incarnation => *count += 1,
            _ => runs.push((1, record.meta.incarnation.clone())),
        }
    }
    Some(runs)
}
