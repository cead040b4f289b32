//! The dispatcher's rules, each driven by a fake topology and a fake clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::constants::{
    COMMIT_SLOTS, LOOKAHEAD_WINDOWS, TARGET_RECORDS_PER_DESTINATION, UNRESOLVED_RETRY,
    WINDOW_RECORDS_MIN,
};
use super::*;
use crate::topology::{Destination, NodeId, Route, TopicView, Topology};

const LOCAL: NodeId = 1;
const REMOTE: NodeId = 2;
const OTHER: NodeId = 3;

#[derive(Default)]
struct FakeTopology {
    topics: HashMap<String, TopicView>,
    routes: HashMap<Destination, Route>,
    lagging: bool,
}

impl Topology for FakeTopology {
    fn topic(&self, name: &str) -> Option<TopicView> {
        self.topics.get(name).cloned()
    }
    fn route(&self, destination: &Destination) -> Route {
        self.routes
            .get(destination)
            .copied()
            .unwrap_or(Route::Unassigned)
    }
    fn caught_up(&self) -> bool {
        !self.lagging
    }
}

/// A dispatcher, the WAL it reads (metadata by seq), a topology and a clock.
struct Harness {
    dispatcher: Dispatcher<u64>,
    topology: FakeTopology,
    wal: Vec<RecordMeta>,
    now: Duration,
    checkpoints: Vec<u64>,
    questions: Vec<GoneQuestion>,
    discarded: Vec<u64>,
}

impl Harness {
    fn new() -> Self {
        Self {
            dispatcher: Dispatcher::new(DispatchConfig::default(), 0),
            topology: FakeTopology::default(),
            wal: Vec::new(),
            now: Duration::ZERO,
            checkpoints: Vec::new(),
            questions: Vec::new(),
            discarded: Vec::new(),
        }
    }

    /// Adds topic `name` with `partitions`, partition p owned by `owners[p]`.
    fn topic(&mut self, name: &str, owners: &[NodeId]) {
        let view = TopicView {
            partitions: owners.len() as u32,
            incarnation: Some(Arc::from("id-1")),
        };
        self.topology.topics.insert(name.to_string(), view);
        for (partition, node) in owners.iter().enumerate() {
            self.set_owner(name, partition as u32, *node, true);
        }
    }

    fn set_owner(&mut self, topic: &str, partition: u32, node: NodeId, alive: bool) {
        let route = Route::Owner {
            node,
            local: node == LOCAL,
            alive,
        };
        self.topology
            .routes
            .insert(Destination::new(topic, partition), route);
    }

    /// Appends records to the WAL and makes them durable.
    fn produce(&mut self, topic: &str, partition: u32, count: usize) {
        let incarnation = self
            .topology
            .topics
            .get(topic)
            .and_then(|view| view.incarnation.clone());
        for _ in 0..count {
            let meta = RecordMeta {
                home: Destination::new(topic, partition),
                bytes: 100,
                incarnation: incarnation.clone(),
            };
            self.wal.push(meta);
        }
        self.dispatcher.durable_advanced(self.wal.len() as u64);
    }

    /// Reads what the dispatcher asks for, then polls; returns the commits.
    fn step(&mut self) -> Vec<CommitOrder<u64>> {
        let mut reads = 0;
        // As the runtime reads: time and membership are followed once a pass.
        let mut next = self.dispatcher.next_read(&self.topology, self.now);
        while let Some(seq) = next {
            let meta = self.wal[seq as usize].clone();
            self.dispatcher
                .place(seq, meta, seq, &self.topology, self.now);
            reads += 1;
            assert!(reads <= 1_000_000, "reader does not stop");
            next = self.dispatcher.next_read_in_pass(&self.topology, self.now);
        }
        let mut commits = Vec::new();
        for command in self.dispatcher.poll(&self.topology, self.now) {
            match command {
                Command::Commit(order) => commits.push(order),
                Command::StoreCheckpoint(seq) => self.checkpoints.push(seq),
                Command::ConfirmGone(question) => self.questions.push(question),
                Command::Discarded { seqs, .. } => self.discarded.extend(seqs),
            }
        }
        commits
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
    }

    fn finish(&mut self, order: CommitOrder<u64>, outcome: CommitOutcome) {
        self.dispatcher
            .commit_done(order.id, outcome, order.records, self.now);
    }

    /// Commits everything, step after step, until nothing is left to do.
    fn drain(&mut self) -> Vec<u64> {
        let mut committed = Vec::new();
        for _ in 0..10_000 {
            let commits = self.step();
            if self.dispatcher.checkpoint() == self.wal.len() as u64 {
                return committed;
            }
            if commits.is_empty() {
                self.advance(Duration::from_secs(1));
                continue;
            }
            for order in commits {
                committed.extend(seqs(&order));
                self.finish(order, CommitOutcome::Committed);
            }
        }
        panic!("dispatcher did not drain");
    }
}

fn seqs(order: &CommitOrder<u64>) -> Vec<u64> {
    order.records.iter().map(|record| record.seq).collect()
}

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

#[test]
fn commits_each_destination_with_at_most_one_commit_in_flight() {
    let mut h = Harness::new();
    h.topic("orders", &[LOCAL, REMOTE]);
    h.produce("orders", 0, 3);
    h.produce("orders", 1, 2);
    let commits = h.step();
    assert_eq!(commits.len(), 2);
    assert_eq!(seqs(&commits[0]), vec![0, 1, 2]);
    assert_eq!(seqs(&commits[1]), vec![3, 4]);
    h.produce("orders", 0, 2);
    assert!(
        h.step().is_empty(),
        "orders/0 already has a commit in flight"
    );
}

#[test]
fn next_batch_is_everything_queued_meanwhile() {
    let mut h = Harness::new();
    h.topic("orders", &[LOCAL]);
    h.produce("orders", 0, 1);
    let first = h.step().remove(0);
    h.produce("orders", 0, 5);
    assert!(h.step().is_empty());
    h.finish(first, CommitOutcome::Committed);
    let second = h.step();
    assert_eq!(seqs(&second[0]), vec![1, 2, 3, 4, 5]);
}

#[test]
fn checkpoint_moves_only_past_committed_records() {
    let mut h = Harness::new();
    h.topic("orders", &[LOCAL, REMOTE]);
    h.produce("orders", 0, 2);
    h.produce("orders", 1, 2);
    let mut commits = h.step();
    let second = commits.pop().unwrap();
    let first = commits.pop().unwrap();
    // Commit the later records first: the checkpoint must not pass 0..2.
    h.finish(second, CommitOutcome::Committed);
    h.step();
    assert_eq!(h.dispatcher.checkpoint(), 0);
    assert!(h.checkpoints.is_empty());
    h.finish(first, CommitOutcome::Committed);
    h.step();
    assert_eq!(h.dispatcher.checkpoint(), 4);
    assert_eq!(h.checkpoints, vec![4]);
}

#[test]
fn sixteen_commit_slots_bound_the_commits_in_flight() {
    let mut h = Harness::new();
    let owners = vec![REMOTE; 20];
    h.topic("wide", &owners);
    for partition in 0..20 {
        h.produce("wide", partition, 1);
    }
    let commits = h.step();
    assert_eq!(commits.len(), COMMIT_SLOTS);
    let order = commits.into_iter().next().unwrap();
    h.finish(order, CommitOutcome::Committed);
    assert_eq!(
        h.step().len(),
        1,
        "a freed slot is used by a waiting destination"
    );
}

#[test]
fn a_hung_commit_frees_its_slot_and_returns_its_followers_to_the_wal() {
    let mut h = Harness::new();
    let owners = vec![REMOTE; 17];
    h.topic("wide", &owners);
    for partition in 0..17 {
        h.produce("wide", partition, 1);
    }
    let mut commits = h.step();
    assert_eq!(commits.len(), 16);
    h.produce("wide", 0, 3); // followers of the commit that will hang
    h.advance(ms(999));
    assert!(h.step().is_empty(), "nothing is hung before one second");
    // Every commit but the one to wide/0 lands before the threshold.
    let hung = commits.remove(0);
    assert_eq!(hung.destination, Destination::new("wide", 0));
    for order in commits {
        h.finish(order, CommitOutcome::Committed);
    }
    h.advance(ms(1));
    let after = h.step();
    assert_eq!(
        after
            .iter()
            .map(|o| o.destination.partition)
            .collect::<Vec<_>>(),
        vec![16]
    );
    assert_eq!(
        h.dispatcher.skipped(),
        3,
        "the hung commit's followers went back to the WAL"
    );
    h.produce("wide", 0, 1);
    h.step();
    assert_eq!(
        h.dispatcher.skipped(),
        4,
        "a hung destination takes no new records"
    );
    for order in after {
        h.finish(order, CommitOutcome::Committed);
    }
    h.finish(hung, CommitOutcome::Committed);
    let resumed = h.step();
    assert_eq!(
        seqs(&resumed[0]),
        vec![17, 18, 19, 20],
        "followers come back in WAL order"
    );
}

#[test]
fn a_failed_commit_keeps_one_probe_and_returns_the_rest() {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE]);
    h.produce("orders", 0, 4);
    let order = h.step().remove(0);
    h.advance(ms(20));
    h.finish(order, CommitOutcome::Failed);
    assert_eq!(h.dispatcher.held(), 1, "only the probe is held");
    assert_eq!(h.dispatcher.skipped(), 3);
    assert!(
        h.step().is_empty(),
        "the probe waits for the failure backoff"
    );
    h.advance(ms(999));
    assert!(h.step().is_empty());
    h.advance(ms(1));
    let probe = h.step().remove(0);
    assert!(probe.probe);
    assert_eq!(seqs(&probe), vec![0]);
    assert_eq!(probe.budget, Duration::from_secs(5));
}

#[test]
fn a_failing_destination_retries_its_probe_once_a_second() {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE]);
    h.produce("orders", 0, 1);
    let order = h.step().remove(0);
    h.finish(order, CommitOutcome::Failed);
    let mut probe_times = Vec::new();
    for _ in 0..30 {
        h.advance(ms(100));
        for probe in h.step() {
            probe_times.push(h.now);
            h.advance(ms(50));
            h.finish(probe, CommitOutcome::Failed);
        }
    }
    // Each retry is due one second after the previous probe failed.
    assert_eq!(probe_times, vec![ms(1000), ms(2050), ms(3100)]);
}

#[test]
fn reroutes_after_three_seconds_of_failures() {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE, OTHER]);
    h.produce("orders", 0, 1);
    let order = h.step().remove(0);
    h.advance(ms(200));
    h.finish(order, CommitOutcome::Failed); // failing since t=0, the attempt's start
    h.produce("orders", 0, 2);
    h.advance(ms(2_799)); // t = 2.999 s
    let before: Vec<_> = h.step().into_iter().filter(|o| !o.probe).collect();
    assert!(before.is_empty(), "no reroute before three seconds");
    h.advance(ms(1)); // t = 3 s
    let after: Vec<_> = h.step().into_iter().filter(|o| !o.probe).collect();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].destination, Destination::new("orders", 1));
    assert_eq!(seqs(&after[0]), vec![1, 2]);
}

#[test]
fn a_hung_commit_that_fails_counts_its_failure_from_its_start() {
    // The remote target has the transport check a silent owner's liveness
    // once a commit turns hung; a dead owner's connection closes about a
    // second later and the commit fails. The grace counts from the start of
    // that attempt, so the reroute comes three seconds after it, not three
    // seconds after the failure.
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE, OTHER]);
    h.produce("orders", 0, 1);
    let hung = h.step().remove(0);
    h.advance(ms(1_000));
    h.produce("orders", 0, 2);
    assert!(
        h.step().is_empty(),
        "a hung destination takes no new records"
    );
    h.advance(ms(1_100)); // t = 2.1 s: the liveness check closed the connection
    h.finish(hung, CommitOutcome::Failed);
    h.advance(ms(899)); // t = 2.999 s
    let before: Vec<_> = h.step().into_iter().filter(|o| !o.probe).collect();
    assert!(before.is_empty(), "no reroute before three seconds");
    h.advance(ms(1)); // t = 3 s since the hung attempt started
    let after: Vec<_> = h.step().into_iter().filter(|o| !o.probe).collect();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].destination, Destination::new("orders", 1));
    assert_eq!(seqs(&after[0]), vec![1, 2]);
}

#[test]
fn reroutes_at_once_when_membership_says_the_owner_is_dead() {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE, OTHER, LOCAL]);
    h.set_owner("orders", 0, REMOTE, false);
    h.set_owner("orders", 1, OTHER, false);
    h.produce("orders", 0, 2);
    let commits = h.step();
    assert_eq!(commits.len(), 1);
    assert_eq!(
        commits[0].destination,
        Destination::new("orders", 2),
        "next live sibling"
    );
    assert!(commits[0].local);
}

#[test]
fn records_of_a_commit_in_flight_are_never_sent_again() {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE, OTHER]);
    h.produce("orders", 0, 3);
    let in_flight = h.step().remove(0);
    h.set_owner("orders", 0, REMOTE, false); // owner dies while the commit runs
    h.produce("orders", 0, 2);
    let mut sent: Vec<u64> = Vec::new();
    for _ in 0..5 {
        h.advance(ms(500));
        for order in h.step() {
            sent.extend(seqs(&order));
            h.finish(order, CommitOutcome::Committed);
        }
    }
    assert_eq!(sent, vec![3, 4], "only the new records were rerouted");
    h.finish(in_flight, CommitOutcome::Committed);
    assert_eq!(h.dispatcher.checkpoint(), 5);
}

#[test]
fn the_original_partition_gets_its_records_back_when_its_probe_lands() {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE, OTHER]);
    h.produce("orders", 0, 1);
    let order = h.step().remove(0);
    h.finish(order, CommitOutcome::Failed);
    h.advance(Duration::from_secs(3));
    let probe = h.step().into_iter().find(|o| o.probe).unwrap();
    h.produce("orders", 0, 1);
    let rerouted = h.step();
    assert_eq!(rerouted[0].destination.partition, 1);
    h.finish(
        rerouted.into_iter().next().unwrap(),
        CommitOutcome::Committed,
    );
    h.finish(probe, CommitOutcome::Committed);
    h.produce("orders", 0, 1);
    let home = h.step();
    assert_eq!(
        home[0].destination.partition, 0,
        "records go home once the probe landed"
    );
}

#[test]
fn skipped_records_come_back_in_wal_order() {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE]);
    h.produce("orders", 0, 1);
    let order = h.step().remove(0);
    h.finish(order, CommitOutcome::Failed);
    h.produce("orders", 0, 4);
    h.step();
    assert_eq!(h.dispatcher.skipped(), 4);
    h.advance(Duration::from_secs(1));
    let probe = h.step().remove(0);
    h.finish(probe, CommitOutcome::Committed);
    let next = h.step();
    assert_eq!(seqs(&next[0]), vec![1, 2, 3, 4]);
}

/// A dispatcher that measured the remote owner of `orders/0` at `latency`,
/// with a commit to the local `orders/1` running (its owner's latency is not
/// known yet, so it never lingers). Returns that running commit.
fn beside_a_running_commit(latency: Duration) -> (Harness, CommitOrder<u64>) {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE, LOCAL]);
    h.produce("orders", 0, 1);
    let order = h.step().remove(0);
    h.advance(latency);
    h.finish(order, CommitOutcome::Committed);
    h.produce("orders", 1, 1);
    let busy = h.step().remove(0);
    (h, busy)
}

#[test]
fn a_small_batch_lingers_while_other_commits_run() {
    let (mut h, busy) = beside_a_running_commit(ms(10));
    h.produce("orders", 0, 1);
    assert!(h.step().is_empty(), "lingers for twice the owner's latency");
    h.advance(ms(19));
    assert!(h.step().is_empty());
    h.advance(ms(1));
    assert_eq!(h.step().len(), 1, "sent once 20 ms passed");
    h.finish(busy, CommitOutcome::Committed);
}

#[test]
fn a_lingering_batch_waits_out_its_deadline_after_the_other_commit_lands() {
    let (mut h, busy) = beside_a_running_commit(ms(10));
    h.produce("orders", 0, 1);
    assert!(h.step().is_empty(), "lingers beside the running commit");
    h.advance(ms(5));
    h.finish(busy, CommitOutcome::Committed);
    assert!(
        h.step().is_empty(),
        "the dispatcher is idle now, but the batch already lingers: it keeps its deadline"
    );
    h.advance(ms(14));
    assert!(h.step().is_empty());
    h.advance(ms(1));
    let lingered = h.step();
    assert_eq!(lingered.len(), 1, "sent once 20 ms passed");
    h.finish(
        lingered.into_iter().next().expect("one order"),
        CommitOutcome::Committed,
    );
    h.produce("orders", 0, 1);
    assert_eq!(
        h.step().len(),
        1,
        "a batch that finds the dispatcher idle still leaves at once"
    );
}

#[test]
fn linger_never_exceeds_fifty_milliseconds() {
    // A very slow owner.
    let (mut h, _busy) = beside_a_running_commit(Duration::from_secs(2));
    h.produce("orders", 0, 1);
    assert!(h.step().is_empty());
    h.advance(ms(49));
    assert!(h.step().is_empty());
    h.advance(ms(1));
    assert_eq!(h.step().len(), 1);
}

#[test]
fn a_full_target_batch_does_not_linger() {
    let (mut h, _busy) = beside_a_running_commit(ms(10));
    h.produce("orders", 0, TARGET_RECORDS_PER_DESTINATION);
    assert_eq!(h.step().len(), 1);
}

#[test]
fn an_idle_dispatcher_commits_every_destination_at_once() {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE, REMOTE]);
    h.produce("orders", 0, 1);
    let order = h.step().remove(0);
    h.advance(ms(10));
    h.finish(order, CommitOutcome::Committed);
    h.produce("orders", 0, 1);
    h.produce("orders", 1, 1);
    assert_eq!(h.step().len(), 2);
}

#[test]
fn a_remote_commit_carries_at_most_eight_mebibytes_and_at_least_one_record() {
    let mut h = Harness::new();
    h.topic("big", &[REMOTE]);
    for _ in 0..5 {
        h.wal.push(RecordMeta {
            home: Destination::new("big", 0),
            bytes: 3 << 20,
            incarnation: Some(Arc::from("id-1")),
        });
    }
    h.wal.push(RecordMeta {
        home: Destination::new("big", 0),
        bytes: 20 << 20,
        incarnation: Some(Arc::from("id-1")),
    });
    h.dispatcher.durable_advanced(6);
    let mut batches = Vec::new();
    for _ in 0..5 {
        for order in h.step() {
            batches.push(seqs(&order));
            h.finish(order, CommitOutcome::Committed);
        }
    }
    assert_eq!(batches, vec![vec![0, 1], vec![2, 3], vec![4], vec![5]]);
}

#[test]
fn a_local_commit_has_no_byte_budget() {
    let mut h = Harness::new();
    h.topic("big", &[LOCAL]);
    for _ in 0..5 {
        h.wal.push(RecordMeta {
            home: Destination::new("big", 0),
            bytes: 3 << 20,
            incarnation: None,
        });
    }
    h.dispatcher.durable_advanced(5);
    assert_eq!(seqs(&h.step()[0]), vec![0, 1, 2, 3, 4]);
}

#[test]
fn the_reader_stops_at_the_held_limit() {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE, REMOTE, REMOTE, REMOTE, REMOTE]);
    assert_eq!(h.dispatcher.window(), WINDOW_RECORDS_MIN);
    let limit = h.dispatcher.held_limit();
    for partition in 0..5 {
        h.produce("orders", partition, limit / 4);
    }
    h.step();
    assert_eq!(h.dispatcher.held(), limit);
    assert_eq!(h.dispatcher.read_frontier(), limit as u64);
}

#[test]
fn a_destination_failing_with_no_sibling_stops_the_reader_at_its_lookahead() {
    let mut h = Harness::new();
    // One partition in this topology, so its records have no sibling to go
    // to (a real topic has three or more, all of them then down).
    h.topic("lonely", &[REMOTE]);
    h.topic("orders", &[LOCAL]);
    h.produce("lonely", 0, 1);
    let order = h.step().remove(0);
    h.advance(ms(100));
    h.finish(order, CommitOutcome::Failed);
    assert_eq!(
        h.dispatcher.failing(),
        (1, Some((&Destination::new("lonely", 0), ms(0))))
    );
    let lookahead = LOOKAHEAD_WINDOWS * h.dispatcher.window() as u64;
    h.produce("lonely", 0, lookahead as usize - 1);
    h.step();
    assert!(
        !h.dispatcher.lookahead_exhausted(),
        "everything durable is read"
    );
    h.produce("lonely", 0, 10);
    h.produce("orders", 0, 5);
    assert!(h.step().is_empty(), "only the probe waits, not due yet");
    assert!(h.dispatcher.lookahead_exhausted());
    assert_eq!(h.dispatcher.read_frontier(), lookahead);
    assert_eq!(h.dispatcher.checkpoint(), 0);
    // The probe, record 0, holds the checkpoint.
    assert_eq!(
        h.dispatcher.checkpoint_holder(),
        Some(&Destination::new("lonely", 0))
    );
    // Once the owner answers again, everything is committed, the healthy
    // topic's records too.
    let committed = h.drain();
    assert!(!h.dispatcher.lookahead_exhausted());
    assert_eq!(h.dispatcher.failing(), (0, None));
    let last = h.wal.len() as u64;
    for seq in last - 5..last {
        assert!(committed.contains(&seq), "orders record {seq} committed");
    }
}

/// One destination with a commit in flight, a full queue behind it and
/// ten more records left in the WAL; returns the queue cap and the commit.
fn a_full_queue_behind_a_commit() -> (Harness, usize, CommitOrder<u64>) {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE]);
    let cap = h.dispatcher.queue_cap();
    h.produce("orders", 0, 1);
    let first = h.step().remove(0);
    h.produce("orders", 0, cap + 10);
    h.step();
    assert_eq!(h.dispatcher.skipped(), 10);
    (h, cap, first)
}

#[test]
fn a_destination_queue_is_capped_and_the_rest_stays_in_the_wal() {
    let (mut h, cap, first) = a_full_queue_behind_a_commit();
    h.finish(first, CommitOutcome::Committed);
    let committed = h.drain();
    assert_eq!(committed.len(), cap + 10);
    assert!(
        committed.windows(2).all(|pair| pair[0] < pair[1]),
        "WAL order kept"
    );
}

#[test]
fn records_a_full_queue_left_in_the_wal_are_read_again_once_it_empties() {
    let (mut h, cap, first) = a_full_queue_behind_a_commit();
    h.finish(first, CommitOutcome::Committed);
    let second = h.step().remove(0);
    assert_eq!(second.records.len(), cap, "the full queue goes out next");
    // No time passes: the queue has room, so the loop goes round at once
    // and the skipped records come back without waiting for the periodic
    // rescan.
    assert_eq!(h.dispatcher.next_deadline(&h.topology, h.now), Some(h.now));
    h.step();
    assert_eq!(h.dispatcher.skipped(), 0);
    assert_eq!(h.dispatcher.held(), cap + 10);
    h.finish(second, CommitOutcome::Committed);
    let third = h.step().remove(0);
    let expected: Vec<u64> = (cap as u64 + 1..=cap as u64 + 10).collect();
    assert_eq!(seqs(&third), expected);
}

#[test]
fn the_window_grows_with_the_destinations_seen() {
    let mut h = Harness::new();
    let owners = vec![REMOTE; 200];
    h.topic("wide", &owners);
    for partition in 0..200 {
        h.produce("wide", partition, 1);
    }
    h.step();
    assert_eq!(h.dispatcher.window(), 200 * TARGET_RECORDS_PER_DESTINATION);
}

#[test]
fn a_deleted_topic_is_discarded_only_after_the_leader_confirms() {
    let mut h = Harness::new();
    h.topic("gone", &[REMOTE]);
    h.produce("gone", 0, 3);
    h.topology.topics.remove("gone");
    h.step();
    assert_eq!(
        h.questions.len(),
        1,
        "one question per topic, not per record"
    );
    assert!(h.discarded.is_empty());
    assert_eq!(h.dispatcher.checkpoint(), 0);
    let question = h.questions[0].clone();
    h.dispatcher.gone_answered(question, true, h.now);
    h.step();
    assert_eq!(h.discarded, vec![0, 1, 2]);
    assert_eq!(h.dispatcher.checkpoint(), 3);
}

#[test]
fn an_unconfirmed_deletion_is_asked_again_after_a_second() {
    let mut h = Harness::new();
    h.topic("gone", &[REMOTE]);
    h.produce("gone", 0, 1);
    h.topology.topics.remove("gone");
    h.step();
    let question = h.questions.remove(0);
    h.dispatcher.gone_answered(question, false, h.now);
    h.advance(ms(999));
    h.step();
    assert!(
        h.questions.is_empty(),
        "the unconfirmed answer is remembered for a second"
    );
    h.advance(ms(1));
    h.step();
    assert_eq!(h.questions.len(), 1);
}

#[test]
fn a_lagging_replica_never_starts_a_discard() {
    let mut h = Harness::new();
    h.topic("gone", &[REMOTE]);
    h.produce("gone", 0, 1);
    h.topology.topics.remove("gone");
    h.topology.lagging = true;
    h.step();
    assert!(h.questions.is_empty());
    assert_eq!(h.dispatcher.skipped(), 1);
}

#[test]
fn records_of_a_replaced_incarnation_never_reach_the_new_topic() {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE]);
    h.produce("orders", 0, 2);
    // Deleted and recreated under the same name before dispatch.
    h.topology.topics.get_mut("orders").unwrap().incarnation = Some(Arc::from("id-2"));
    h.produce("orders", 0, 1);
    let commits = h.step();
    assert!(commits.iter().all(|order| seqs(order) == vec![2]));
    assert_eq!(h.questions[0].incarnation.as_deref(), Some("id-1"));
    h.dispatcher
        .gone_answered(h.questions[0].clone(), true, h.now);
    h.step();
    assert_eq!(h.discarded, vec![0, 1]);
}

#[test]
fn an_incarnation_refusal_returns_records_without_failing_the_destination() {
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE]);
    h.produce("orders", 0, 2);
    let order = h.step().remove(0);
    h.finish(order, CommitOutcome::IncarnationMismatch);
    assert_eq!(h.dispatcher.skipped(), 2);
    h.advance(Duration::from_secs(1));
    let retry = h.step();
    assert_eq!(seqs(&retry[0]), vec![0, 1]);
    assert!(!retry[0].probe, "the destination was not marked failing");
}

#[test]
fn an_unassigned_partition_keeps_its_records_until_it_resolves() {
    let mut h = Harness::new();
    h.topic("new", &[REMOTE]);
    h.topology.routes.clear();
    h.produce("new", 0, 2);
    assert!(h.step().is_empty());
    let deadline = h.dispatcher.next_deadline(&h.topology, h.now);
    assert_eq!(
        deadline,
        Some(h.now + UNRESOLVED_RETRY),
        "looked up again after the retry"
    );
    h.set_owner("new", 0, REMOTE, true);
    assert_eq!(
        seqs(&h.step()[0]),
        vec![0, 1],
        "a poll after the assignment commits at once"
    );
}

#[test]
fn incarnation_runs_group_consecutive_ids() {
    let held = |seq, id: Option<&str>| Held {
        seq,
        meta: RecordMeta {
            home: Destination::new("t", 0),
            bytes: 1,
            incarnation: id.map(Arc::from),
        },
        payload: (),
        queued_at: Duration::ZERO,
    };
    let none = [held(0, None), held(1, None)];
    assert_eq!(incarnation_runs(&none), None);
    let mixed = [
        held(0, Some("a")),
        held(1, Some("a")),
        held(2, None),
        held(3, Some("b")),
    ];
    let runs = incarnation_runs(&mixed).unwrap();
    let runs: Vec<(u32, Option<&str>)> = runs.iter().map(|(n, id)| (*n, id.as_deref())).collect();
    assert_eq!(runs, vec![(2, Some("a")), (1, None), (1, Some("b"))]);
}

/// A seeded model run: random produces, outcomes, deaths and time; at every
/// step no seq is in two commits at once and the checkpoint never passes a
/// record that is not committed; in the end every record is committed.
#[test]
fn random_runs_never_lose_or_double_send_a_record() {
    for seed in 0..40u64 {
        let mut rng = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = move |bound: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % bound
        };
        let mut h = Harness::new();
        h.topic("t", &[LOCAL, REMOTE, OTHER, REMOTE]);
        let mut in_flight: Vec<CommitOrder<u64>> = Vec::new();
        let mut committed = std::collections::BTreeSet::new();
        let mut verified_below = 0u64;
        for _ in 0..400 {
            match next(6) {
                0 | 1 => h.produce("t", next(4) as u32, 1 + next(20) as usize),
                2 => h.advance(ms(next(1_500))),
                3 => {
                    let partition = 1 + next(3) as u32;
                    let node = if partition == 2 { OTHER } else { REMOTE };
                    h.set_owner("t", partition, node, next(4) != 0);
                }
                _ => {
                    if !in_flight.is_empty() {
                        let order = in_flight.swap_remove(next(in_flight.len() as u64) as usize);
                        let outcome = match next(5) {
                            0 => CommitOutcome::Failed,
                            1 => CommitOutcome::IncarnationMismatch,
                            _ => CommitOutcome::Committed,
                        };
                        if outcome == CommitOutcome::Committed {
                            committed.extend(seqs(&order));
                        }
                        h.finish(order, outcome);
                    }
                }
            }
            in_flight.extend(h.step());
            let mut flying: Vec<u64> = in_flight.iter().flat_map(seqs).collect();
            flying.sort_unstable();
            let before = flying.len();
            flying.dedup();
            assert_eq!(before, flying.len(), "seed {seed}: a seq is in two commits");
            let checkpoint = h.dispatcher.checkpoint();
            assert!(
                (verified_below..checkpoint).all(|seq| committed.contains(&seq)),
                "seed {seed}: checkpoint {checkpoint} passed an uncommitted record"
            );
            verified_below = verified_below.max(checkpoint);
        }
        // Heal everything and drain.
        for partition in 1..4 {
            let node = if partition == 2 { OTHER } else { REMOTE };
            h.set_owner("t", partition, node, true);
        }
        for order in in_flight.drain(..) {
            committed.extend(seqs(&order));
            h.finish(order, CommitOutcome::Committed);
        }
        committed.extend(h.drain());
        assert_eq!(
            committed.len(),
            h.wal.len(),
            "seed {seed}: every record committed"
        );
        assert_eq!(h.dispatcher.checkpoint(), h.wal.len() as u64);
    }
}

#[test]
fn the_probe_of_a_failing_destination_is_discarded_when_its_topic_is_deleted() {
    // Regression: a probe held for a failing owner was never released when
    // the topic went away, so it pinned the checkpoint forever.
    let mut h = Harness::new();
    h.topic("orders", &[REMOTE]);
    h.produce("orders", 0, 3);
    let order = h.step().remove(0);
    h.advance(ms(20));
    h.finish(order, CommitOutcome::Failed);
    assert_eq!(h.dispatcher.held(), 1, "the probe is held");
    h.topology.topics.remove("orders");
    h.topology.routes.clear();
    h.step();
    assert_eq!(h.dispatcher.held(), 0, "the probe went back to the WAL");
    assert_eq!(h.questions.len(), 1);
    let question = h.questions[0].clone();
    h.dispatcher.gone_answered(question, true, h.now);
    h.step();
    h.discarded.sort_unstable();
    assert_eq!(h.discarded, vec![0, 1, 2]);
    assert_eq!(h.dispatcher.checkpoint(), 3);
}

#[test]
fn records_queued_for_an_unassigned_partition_are_discarded_when_the_topic_is_deleted() {
    // Regression: a queue whose destination never resolved was never
    // checked again, so a topic deleted before assignment pinned the
    // checkpoint forever.
    let mut h = Harness::new();
    h.topology.topics.insert(
        "fresh".to_string(),
        TopicView {
            partitions: 1,
            incarnation: Some(Arc::from("id-1")),
        },
    );
    h.produce("fresh", 0, 2);
    assert!(
        h.step().is_empty(),
        "an unassigned partition takes no commit"
    );
    h.topology.topics.remove("fresh");
    h.step();
    assert_eq!(h.questions.len(), 1);
    let question = h.questions[0].clone();
    h.dispatcher.gone_answered(question, true, h.now);
    h.step();
    assert_eq!(h.discarded, vec![0, 1]);
    assert_eq!(h.dispatcher.checkpoint(), 2);
}
