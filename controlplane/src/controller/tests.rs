//! The controller's rules, each driven by a metastore built through `apply`
//! and a fake clock (plain `Duration`s since the Unix epoch).

use std::time::Duration;

use super::*;
use narad_meta::{
    Actor, ApplyContext, AssignPartitions, AttachEpoch, Command, CreateTopic, Heartbeat,
    IncarnationId, MarkDead, Metastore, NewLink, PartitionOwner, RegisterMember, SetDraining,
};

/// When the leader took over in most tests.
const LEADER_SINCE: Duration = Duration::from_secs(1_000_000);

fn secs(offset: u64) -> Duration {
    LEADER_SINCE + Duration::from_secs(offset)
}

fn ms(time: Duration) -> u64 {
    time.as_millis() as u64
}

/// A metastore and its log index, with helpers that apply commands.
struct Cluster {
    meta: Metastore,
    index: u64,
}

impl Cluster {
    fn new() -> Self {
        Self {
            meta: Metastore::new(),
            index: 0,
        }
    }

    fn apply(&mut self, command: &Command) {
        self.index += 1;
        self.meta
            .apply(command, ApplyContext { index: self.index })
            .unwrap();
    }

    /// Applies every command a decision carries (as the runtime would).
    fn apply_all(&mut self, decision: &Decision) {
        for command in &decision.commands {
            self.apply(command);
        }
    }

    fn member(&mut self, id: &str, at: Duration) {
        self.apply(&Command::RegisterMember(RegisterMember {
            id: id.into(),
            http_addr: format!("{id}:7942"),
            rpc_addr: format!("{id}:7942"),
            at_ms: ms(at),
        }));
    }

    fn heartbeat(&mut self, id: &str, at: Duration) {
        self.apply(&Command::Heartbeat(Heartbeat {
            id: id.into(),
            at_ms: ms(at),
        }));
    }

    fn topic(&mut self, name: &str, partitions: i64) {
        self.apply(&create(name, partitions, None));
    }

    fn child(&mut self, name: &str, parent: &str) {
        let partitions = self.meta.topic(parent).unwrap().partitions;
        let link = NewLink {
            parent: parent.into(),
            parent_id: id_of(parent),
            fanout_delay_ms: None,
            attach_epoch: AttachEpoch::from_bits(1),
            attach_offsets: vec![0; partitions as usize],
        };
        self.apply(&create(name, 0, Some(link)));
    }

    fn owners(&self, topic: &str) -> Vec<Option<String>> {
        let slots = self.meta.assignments(topic).unwrap();
        slots
            .iter()
            .map(|slot| slot.as_ref().map(|a| a.owner.clone()))
            .collect()
    }
}

fn id_of(name: &str) -> IncarnationId {
    IncarnationId::from_bits(name.bytes().fold(17, |h, b| h * 31 + u64::from(b)))
}

fn create(name: &str, partitions: i64, parent: Option<NewLink>) -> Command {
    Command::CreateTopic(CreateTopic {
        partitions: Some(partitions),
        parent,
        ..CreateTopic::named(Actor::SecurityOff, name, id_of(name), 0)
    })
}

fn controller() -> Controller {
    Controller::new(ControllerConfig::default(), LEADER_SINCE)
}

fn some(owners: &[&str]) -> Vec<Option<String>> {
    owners
        .iter()
        .map(|owner| Some((*owner).to_owned()))
        .collect()
}

fn marked_dead(decision: &Decision) -> Vec<String> {
    let marks = decision
        .commands
        .iter()
        .filter_map(|command| match command {
            Command::MarkDead(mark) => Some(mark.id.clone()),
            _ => None,
        });
    marks.collect()
}

fn placements(decision: &Decision) -> Vec<&AssignPartitions> {
    let placements = decision
        .commands
        .iter()
        .filter_map(|command| match command {
            Command::AssignPartitions(assign) => Some(assign),
            _ => None,
        });
    placements.collect()
}

/// Three alive members heard from at `secs(0)`.
fn three_nodes() -> Cluster {
    let mut cluster = Cluster::new();
    for id in ["n1", "n2", "n3"] {
        cluster.member(id, secs(0));
    }
    cluster
}

#[test]
fn waiting_partitions_are_placed_round_robin_over_receivers() {
    let mut cluster = three_nodes();
    cluster.topic("orders", 6);
    let decision = controller().decide(&cluster.meta, secs(1));
    cluster.apply_all(&decision);
    assert_eq!(
        cluster.owners("orders"),
        some(&["n1", "n2", "n3", "n1", "n2", "n3"])
    );
}

#[test]
fn the_rotation_continues_across_topics_instead_of_restarting() {
    let mut cluster = three_nodes();
    cluster.topic("a", 4);
    cluster.apply_all(&controller().decide(&cluster.meta, secs(1)));
    cluster.topic("b", 3);
    cluster.apply_all(&controller().decide(&cluster.meta, secs(2)));
    assert_eq!(cluster.owners("b"), some(&["n2", "n3", "n1"]));
}

#[test]
fn a_draining_member_receives_no_partitions() {
    let mut cluster = three_nodes();
    cluster.apply(&Command::SetDraining(SetDraining {
        id: "n2".into(),
        draining: true,
    }));
    cluster.topic("orders", 4);
    cluster.apply_all(&controller().decide(&cluster.meta, secs(1)));
    assert_eq!(cluster.owners("orders"), some(&["n1", "n3", "n1", "n3"]));
}

#[test]
fn a_dead_member_receives_no_partitions() {
    let mut cluster = three_nodes();
    cluster.apply(&Command::MarkDead(MarkDead {
        id: "n1".into(),
        observed_heartbeat_ms: ms(secs(0)),
    }));
    cluster.topic("orders", 3);
    cluster.apply_all(&controller().decide(&cluster.meta, secs(1)));
    assert_eq!(cluster.owners("orders"), some(&["n2", "n3", "n2"]));
}

#[test]
fn a_silent_member_receives_no_partitions_even_before_it_is_marked_dead() {
    let mut cluster = three_nodes();
    cluster.heartbeat("n2", secs(20));
    cluster.heartbeat("n3", secs(20));
    cluster.topic("orders", 3);
    // n1 is silent for 30 s, but the leader is still in its grace.
    let early = Controller::new(ControllerConfig::default(), secs(10));
    let decision = early.decide(&cluster.meta, secs(30));
    assert!(marked_dead(&decision).is_empty());
    cluster.apply_all(&decision);
    assert_eq!(cluster.owners("orders"), some(&["n2", "n3", "n2"]));
}

#[test]
fn a_child_partition_avoids_its_parent_partition_owner() {
    let mut cluster = three_nodes();
    cluster.topic("parent", 3);
    cluster.apply_all(&controller().decide(&cluster.meta, secs(1)));
    cluster.child("replica", "parent");
    cluster.apply_all(&controller().decide(&cluster.meta, secs(2)));
    let parent = cluster.owners("parent");
    let child = cluster.owners("replica");
    for partition in 0..3 {
        assert_ne!(parent[partition], child[partition], "partition {partition}");
    }
}

#[test]
fn a_child_placed_in_the_same_pass_as_its_parent_still_avoids_it() {
    let mut cluster = Cluster::new();
    cluster.member("n1", secs(0));
    cluster.member("n2", secs(0));
    // "a-child" sorts before "parent": parents are placed first anyway.
    cluster.topic("parent", 4);
    cluster.child("a-child", "parent");
    cluster.apply_all(&controller().decide(&cluster.meta, secs(1)));
    let parent = cluster.owners("parent");
    let child = cluster.owners("a-child");
    for partition in 0..4 {
        assert_ne!(parent[partition], child[partition], "partition {partition}");
    }
}

#[test]
fn with_a_single_receiver_a_child_shares_its_parent_owner() {
    let mut cluster = Cluster::new();
    cluster.member("n1", secs(0));
    cluster.topic("parent", 3);
    cluster.child("replica", "parent");
    cluster.apply_all(&controller().decide(&cluster.meta, secs(1)));
    assert_eq!(cluster.owners("replica"), some(&["n1", "n1", "n1"]));
}

#[test]
fn a_dead_owner_keeps_its_partitions() {
    let mut cluster = three_nodes();
    cluster.topic("orders", 3);
    cluster.apply_all(&controller().decide(&cluster.meta, secs(1)));
    cluster.heartbeat("n2", secs(40));
    cluster.heartbeat("n3", secs(40));
    let decision = controller().decide(&cluster.meta, secs(41));
    assert_eq!(marked_dead(&decision), vec!["n1".to_owned()]);
    assert!(placements(&decision).is_empty());
    cluster.apply_all(&decision);
    let later = controller().decide(&cluster.meta, secs(42));
    assert!(later.commands.is_empty());
    assert_eq!(cluster.owners("orders")[0].as_deref(), Some("n1"));
}

#[test]
fn without_receivers_partitions_wait_and_the_next_pass_comes_within_the_watch_interval() {
    let mut cluster = Cluster::new();
    cluster.topic("orders", 3);
    let decision = controller().decide(&cluster.meta, secs(1));
    assert!(decision.commands.is_empty());
    assert_eq!(decision.next_pass_at, secs(1) + Duration::from_millis(250));
}

#[test]
fn a_member_turning_alive_receives_the_waiting_partitions_at_the_next_pass() {
    let mut cluster = Cluster::new();
    cluster.topic("orders", 3);
    let waiting = controller().decide(&cluster.meta, secs(1));
    cluster.member("n1", secs(1));
    let decision = controller().decide(&cluster.meta, waiting.next_pass_at);
    assert!(waiting.next_pass_at - secs(1) < Duration::from_secs(1));
    cluster.apply_all(&decision);
    assert_eq!(cluster.owners("orders"), some(&["n1", "n1", "n1"]));
}

#[test]
fn a_member_silent_for_the_dead_after_span_is_marked_dead() {
    let mut cluster = three_nodes();
    cluster.heartbeat("n2", secs(31));
    cluster.heartbeat("n3", secs(31));
    let decision = controller().decide(&cluster.meta, secs(31));
    assert_eq!(marked_dead(&decision), vec!["n1".to_owned()]);
    cluster.apply_all(&decision);
}

#[test]
fn a_member_silent_for_just_under_the_span_stays_alive() {
    let mut cluster = three_nodes();
    cluster.heartbeat("n2", secs(31));
    cluster.heartbeat("n3", secs(31));
    let now = secs(30) - Duration::from_millis(1);
    assert!(marked_dead(&controller().decide(&cluster.meta, now)).is_empty());
}

#[test]
fn the_dead_marking_names_the_heartbeat_it_judged() {
    let mut cluster = three_nodes();
    cluster.heartbeat("n2", secs(31));
    cluster.heartbeat("n3", secs(31));
    let decision = controller().decide(&cluster.meta, secs(31));
    let expected = MarkDead {
        id: "n1".into(),
        observed_heartbeat_ms: ms(secs(0)),
    };
    assert_eq!(decision.commands, vec![Command::MarkDead(expected)]);
}

#[test]
fn a_heartbeat_landing_before_the_marking_is_applied_keeps_the_member_alive() {
    let mut cluster = three_nodes();
    cluster.heartbeat("n2", secs(31));
    cluster.heartbeat("n3", secs(31));
    let decision = controller().decide(&cluster.meta, secs(31));
    cluster.heartbeat("n1", secs(31));
    cluster.index += 1;
    let refused = cluster.meta.apply(
        &decision.commands[0],
        ApplyContext {
            index: cluster.index,
        },
    );
    assert!(refused.is_err());
    assert!(cluster.meta.member("n1").unwrap().is_receiver());
}

#[test]
fn a_new_leader_marks_nobody_dead_during_its_election_grace() {
    let mut cluster = three_nodes();
    cluster.heartbeat("n2", secs(100));
    cluster.heartbeat("n3", secs(100));
    let new_leader = Controller::new(ControllerConfig::default(), secs(80));
    let decision = new_leader.decide(&cluster.meta, secs(109));
    assert!(marked_dead(&decision).is_empty());
    assert!(decision.dead_marking_refused.is_empty());
}

#[test]
fn a_new_leader_marks_overdue_members_once_the_grace_ends() {
    let mut cluster = three_nodes();
    cluster.heartbeat("n2", secs(105));
    cluster.heartbeat("n3", secs(105));
    let new_leader = Controller::new(ControllerConfig::default(), secs(80));
    assert_eq!(
        marked_dead(&new_leader.decide(&cluster.meta, secs(110))),
        vec!["n1".to_owned()]
    );
}

#[test]
fn during_the_grace_the_next_pass_comes_when_the_grace_ends() {
    let mut cluster = three_nodes();
    cluster.heartbeat("n2", secs(100));
    cluster.heartbeat("n3", secs(100));
    let new_leader = Controller::new(ControllerConfig::default(), secs(80));
    assert_eq!(
        new_leader.decide(&cluster.meta, secs(105)).next_pass_at,
        secs(110)
    );
}

#[test]
fn the_breaker_marks_nobody_when_most_members_fall_silent_at_once() {
    let mut cluster = three_nodes();
    cluster.heartbeat("n3", secs(40));
    let decision = controller().decide(&cluster.meta, secs(40));
    assert!(marked_dead(&decision).is_empty());
    assert_eq!(
        decision.dead_marking_refused,
        vec!["n1".to_owned(), "n2".to_owned()]
    );
}

#[test]
fn the_breaker_counts_members_already_dead() {
    let mut cluster = three_nodes();
    cluster.heartbeat("n2", secs(40));
    cluster.heartbeat("n3", secs(40));
    cluster.apply_all(&controller().decide(&cluster.meta, secs(40)));
    // n1 is dead; n2 falling silent would leave 1 of 3 alive.
    cluster.heartbeat("n3", secs(80));
    let decision = controller().decide(&cluster.meta, secs(80));
    assert_eq!(decision.dead_marking_refused, vec!["n2".to_owned()]);
}

#[test]
fn the_breaker_lets_a_minority_be_marked_in_one_pass() {
    let mut cluster = Cluster::new();
    for id in ["n1", "n2", "n3", "n4", "n5"] {
        cluster.member(id, secs(0));
    }
    for id in ["n3", "n4", "n5"] {
        cluster.heartbeat(id, secs(40));
    }
    let decision = controller().decide(&cluster.meta, secs(40));
    assert_eq!(
        marked_dead(&decision),
        vec!["n1".to_owned(), "n2".to_owned()]
    );
}

#[test]
fn the_next_pass_comes_when_the_next_member_would_fall_silent() {
    let mut cluster = three_nodes();
    cluster.heartbeat("n2", secs(35));
    cluster.heartbeat("n3", secs(35));
    cluster.apply_all(&controller().decide(&cluster.meta, secs(35)));
    let decision = controller().decide(&cluster.meta, secs(36));
    assert_eq!(decision.next_pass_at, secs(36) + Duration::from_secs(10));
    let decision = controller().decide(&cluster.meta, secs(60));
    assert_eq!(decision.next_pass_at, secs(65));
}

#[test]
fn a_quiet_healthy_cluster_is_swept_every_ten_seconds() {
    let mut cluster = three_nodes();
    for id in ["n1", "n2", "n3"] {
        cluster.heartbeat(id, secs(50));
    }
    let decision = controller().decide(&cluster.meta, secs(50));
    assert!(decision.commands.is_empty());
    assert_eq!(decision.next_pass_at, secs(60));
}

#[test]
fn timings_are_configurable() {
    let mut cluster = three_nodes();
    cluster.heartbeat("n2", secs(2));
    cluster.heartbeat("n3", secs(2));
    let config = ControllerConfig {
        heartbeat_interval: Duration::from_millis(100),
        dead_after: Duration::from_secs(1),
        election_grace: Duration::ZERO,
        ..ControllerConfig::default()
    };
    let fast = Controller::new(config, LEADER_SINCE);
    assert_eq!(
        marked_dead(&fast.decide(&cluster.meta, secs(2))),
        vec!["n1".to_owned()]
    );
}

#[test]
#[should_panic(expected = "must exceed the heartbeat interval")]
fn a_dead_after_span_not_longer_than_the_heartbeat_interval_is_refused() {
    let config = ControllerConfig {
        dead_after: constants::HEARTBEAT_INTERVAL,
        ..ControllerConfig::default()
    };
    let _ = Controller::new(config, LEADER_SINCE);
}

#[test]
fn a_secured_cluster_without_users_needs_its_root_admin() {
    let cluster = Cluster::new();
    assert!(controller().decide(&cluster.meta, secs(1)).seed_admin);
    let insecure = ControllerConfig {
        security_enabled: false,
        ..ControllerConfig::default()
    };
    let open = Controller::new(insecure, LEADER_SINCE);
    assert!(!open.decide(&cluster.meta, secs(1)).seed_admin);
}

#[test]
fn a_cluster_with_users_needs_no_seed() {
    let mut cluster = Cluster::new();
    let hash = narad_meta::hash_password(b"pw", 4, [0; 16]).unwrap();
    cluster.apply(&Command::SeedAdmin(narad_meta::SeedAdmin {
        username: "admin".into(),
        password_hash: hash,
        at_ms: 0,
    }));
    assert!(!controller().decide(&cluster.meta, secs(1)).seed_admin);
}

#[test]
fn every_decision_applies_cleanly_and_a_second_pass_finds_nothing_to_do() {
    let mut cluster = three_nodes();
    cluster.topic("a", 5);
    cluster.topic("b", 3);
    cluster.child("c", "a");
    cluster.heartbeat("n2", secs(31));
    cluster.heartbeat("n3", secs(31));
    let decision = controller().decide(&cluster.meta, secs(31));
    cluster.apply_all(&decision);
    assert!(
        controller()
            .decide(&cluster.meta, secs(31))
            .commands
            .is_empty()
    );
    let placed = placements(&decision);
    assert_eq!(placed.len(), 3);
    assert!(
        placed
            .iter()
            .flat_map(|assign| &assign.owners)
            .all(|owner: &PartitionOwner| owner.owner != "n1")
    );
}

/// Seeded runs: random members (some dead, draining or silent), random
/// topics and children, partly placed. Each pass's commands must apply
/// without refusal, fill every slot when a receiver exists, keep every
/// existing owner, use only receivers, and keep children anti-affine
/// whenever two receivers exist; a second pass then finds nothing to place.
#[test]
fn random_clusters_are_placed_completely_and_by_the_rules() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    for seed in 0..40 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut cluster = Cluster::new();
        let members = rng.random_range(1..6);
        for n in 0..members {
            let id = format!("n{n}");
            cluster.member(&id, secs(rng.random_range(0..3) * 20));
        }
        for t in 0..rng.random_range(1..5) {
            let parent = format!("p{t}");
            cluster.topic(&parent, rng.random_range(3..8));
            if rng.random_bool(0.5) {
                cluster.apply_all(&controller().decide(&cluster.meta, secs(45)));
            }
            if rng.random_bool(0.6) {
                cluster.child(&format!("c{t}"), &parent);
            }
        }
        // Draining after the creates: a create is refused while every
        // alive node drains.
        for n in 0..members {
            if rng.random_bool(0.2) {
                let id = format!("n{n}");
                cluster.apply(&Command::SetDraining(SetDraining { id, draining: true }));
            }
        }
        let now = secs(45);
        let before: Vec<_> = cluster
            .meta
            .topics()
            .map(|t| (t.name.clone(), cluster.owners(&t.name)))
            .collect();
        let receivers: Vec<String> = cluster
            .meta
            .members()
            .filter(|m| m.is_receiver() && ms(now) - m.last_heartbeat_ms < 30_000)
            .map(|m| m.id.clone())
            .collect();
        let decision = controller().decide(&cluster.meta, now);
        for command in placements(&decision) {
            for placed in &command.owners {
                assert!(receivers.contains(&placed.owner), "seed {seed}: {placed:?}");
            }
        }
        cluster.apply_all(&decision);
        for (name, owners) in before {
            let after = cluster.owners(&name);
            for (slot, owner) in owners.iter().enumerate() {
                if owner.is_some() {
                    assert_eq!(&after[slot], owner, "seed {seed}: {name}/{slot} moved");
                }
            }
            if !receivers.is_empty() {
                assert!(
                    after.iter().all(Option::is_some),
                    "seed {seed}: {name} still waits"
                );
            }
        }
        if receivers.len() >= 2 {
            for topic in cluster.meta.topics().filter(|t| t.parent.is_some()) {
                let parent = &topic.parent.as_ref().unwrap().parent;
                let (child, parent) = (cluster.owners(&topic.name), cluster.owners(parent));
                for (slot, owner) in child.iter().enumerate() {
                    // Only partitions placed in this pass are bound by the rule.
                    let fresh = decision.commands.iter().any(|c| {
                        matches!(c,
                        Command::AssignPartitions(a) if a.topic == topic.name
                            && a.owners.iter().any(|o| o.partition as usize == slot))
                    });
                    if fresh {
                        assert_ne!(owner, &parent[slot], "seed {seed}: {} {slot}", topic.name);
                    }
                }
            }
        }
        assert!(
            placements(&controller().decide(&cluster.meta, now)).is_empty(),
            "seed {seed}"
        );
    }
}

fn move_commands(decision: &Decision) -> Vec<&Command> {
    decision
        .commands
        .iter()
        .filter(|command| matches!(command, Command::SetMoveTargets(_) | Command::AbortMove(_)))
        .collect()
}

#[test]
fn a_member_that_joins_receives_moves_in_the_same_pass() {
    let mut cluster = three_nodes();
    cluster.topic("orders", 6);
    cluster.apply_all(&controller().decide(&cluster.meta, secs(1)));
    cluster.member("n4", secs(2));
    let decision = controller().decide(&cluster.meta, secs(3));
    let moves = move_commands(&decision);
    assert_eq!(moves.len(), 1, "one topic, one command");
    let Command::SetMoveTargets(set) = moves[0] else {
        panic!("expected targets, got {:?}", moves[0]);
    };
    assert_eq!(set.moves.len(), 1, "6 over 4: n4 takes one");
    assert_eq!(set.moves[0].target, "n4");
    // While the move is in flight the controller looks again within the
    // rebalance interval, not the ten-second sweep.
    cluster.apply_all(&decision);
    let next = controller().decide(&cluster.meta, secs(4));
    assert!(move_commands(&next).is_empty());
    assert_eq!(next.next_pass_at, secs(4) + constants::REBALANCE_INTERVAL);
}

#[test]
fn a_move_to_a_target_dead_for_two_minutes_is_aborted() {
    let mut cluster = three_nodes();
    cluster.topic("orders", 3);
    cluster.apply_all(&controller().decide(&cluster.meta, secs(1)));
    cluster.member("n4", secs(2));
    cluster.apply_all(&controller().decide(&cluster.meta, secs(3)));
    assert_eq!(cluster.meta.moves().count(), 0, "3 over 4 is balanced");
    // Force a move to n4 by draining n1, then let n4 die.
    cluster.apply(&Command::SetDraining(SetDraining {
        id: "n1".into(),
        draining: true,
    }));
    for id in ["n2", "n3"] {
        cluster.heartbeat(id, secs(4));
    }
    cluster.apply_all(&controller().decide(&cluster.meta, secs(4)));
    let (_, partition, moving) = cluster.meta.moves().next().expect("a move");
    let (partition, target) = (partition, moving.target.clone().unwrap());
    assert_eq!(target, "n4", "the emptiest receiver");
    let dead_at = secs(2) + constants::DEAD_AFTER;
    cluster.apply(&Command::MarkDead(MarkDead {
        id: "n4".into(),
        observed_heartbeat_ms: ms(secs(2)),
    }));
    let just_before = dead_at + constants::DEAD_TARGET_ABORT_AFTER - Duration::from_secs(1);
    for id in ["n2", "n3"] {
        cluster.heartbeat(id, just_before);
    }
    let early = controller().decide(&cluster.meta, just_before);
    assert!(
        !early
            .commands
            .iter()
            .any(|command| matches!(command, Command::AbortMove(_))),
        "{:?}",
        early.commands
    );
    let at = dead_at + constants::DEAD_TARGET_ABORT_AFTER;
    for id in ["n2", "n3"] {
        cluster.heartbeat(id, at);
    }
    let decision = controller().decide(&cluster.meta, at);
    let aborts: Vec<_> = decision
        .commands
        .iter()
        .filter_map(|command| match command {
            Command::AbortMove(abort) => Some((abort.partition, abort.target.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(aborts, [(partition, "n4".to_owned())]);
    cluster.apply_all(&decision);
    assert!(
        cluster
            .meta
            .moves()
            .all(|(_, _, at)| at.target.as_deref() != Some("n4"))
    );
}
