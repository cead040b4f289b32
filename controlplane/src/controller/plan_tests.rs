//! The planner as a table: a cluster laid out by hand, the moves it plans,
//! and the balance those moves reach.

use std::collections::BTreeMap;

use narad_meta::{
    Actor, ApplyContext, AssignPartitions, AttachEpoch, Command, CreateTopic, IncarnationId,
    MarkDead, Metastore, MoveTarget, NewLink, PartitionOwner, RegisterMember, SetDraining,
    SetMoveTargets,
};

use super::constants::MAX_IN_FLIGHT_MOVES;
use super::plan_moves;

/// A metastore built by applying commands, as replicas build theirs.
struct Layout {
    meta: Metastore,
    index: u64,
}

impl Layout {
    fn new(members: &[&str]) -> Self {
        let mut layout = Self {
            meta: Metastore::new(),
            index: 0,
        };
        for id in members {
            layout.apply(Command::RegisterMember(RegisterMember {
                id: (*id).into(),
                http_addr: format!("{id}:7942"),
                rpc_addr: format!("{id}:7942"),
                at_ms: 1_000,
            }));
        }
        layout
    }

    fn apply(&mut self, command: Command) {
        self.index += 1;
        let context = ApplyContext { index: self.index };
        if let Err(error) = self.meta.apply(&command, context) {
            panic!("{command:?} refused: {error}");
        }
    }

    /// Topic `name` whose partition i is owned by `owners[i]`.
    fn topic(&mut self, name: &str, owners: &[&str], parent: Option<&str>) {
        let parent = parent.map(|parent| NewLink {
            parent: parent.into(),
            parent_id: id_of(parent),
            fanout_delay_ms: None,
            attach_epoch: AttachEpoch::from_bits(1),
            attach_offsets: vec![0; owners.len()],
        });
        self.apply(Command::CreateTopic(CreateTopic {
            partitions: Some(owners.len() as i64),
            parent,
            ..CreateTopic::named(Actor::SecurityOff, name, id_of(name), 0)
        }));
        let owners = owners
            .iter()
            .enumerate()
            .map(|(partition, owner)| PartitionOwner {
                partition: partition as u32,
                owner: (*owner).into(),
            })
            .collect();
        self.apply(Command::AssignPartitions(AssignPartitions {
            topic: name.into(),
            id: id_of(name),
            owners,
        }));
    }

    /// Topic `name` with `count` partitions on each of `members` in turn.
    fn spread(&mut self, name: &str, members: &[(&str, usize)]) {
        let owners: Vec<&str> = members
            .iter()
            .flat_map(|(id, count)| std::iter::repeat_n(*id, *count))
            .collect();
        self.topic(name, &owners, None);
    }

    fn drain(&mut self, id: &str) {
        self.apply(Command::SetDraining(SetDraining {
            id: id.into(),
            draining: true,
        }));
    }

    fn kill(&mut self, id: &str) {
        self.apply(Command::MarkDead(MarkDead {
            id: id.into(),
            observed_heartbeat_ms: 1_000,
        }));
    }

    fn moving(&mut self, topic: &str, partition: u32, target: &str) {
        let owner = self.meta.owner(topic, partition).unwrap().to_owned();
        self.apply(Command::SetMoveTargets(SetMoveTargets {
            topic: topic.into(),
            id: id_of(topic),
            moves: vec![MoveTarget {
                partition,
                owner,
                target: target.into(),
            }],
        }));
    }

    /// Plans over `receivers`, applies the plan, and returns its moves as
    /// (topic, partition, from, to).
    fn plan(&mut self, receivers: &[&str]) -> Vec<(String, u32, String, String)> {
        let commands = plan_moves(&self.meta, receivers);
        let mut moves = Vec::new();
        for command in commands {
            let Command::SetMoveTargets(set) = &command else {
                panic!("the planner proposed {command:?}");
            };
            for step in &set.moves {
                moves.push((
                    set.topic.clone(),
                    step.partition,
                    step.owner.clone(),
                    step.target.clone(),
                ));
            }
            self.apply(command);
        }
        moves
    }

    /// Every move in flight completes.
    fn finish_moves(&mut self) {
        let moves: Vec<(String, u32, String, String)> = self
            .meta
            .moves()
            .map(|(topic, partition, at)| {
                let target = at.target.clone().unwrap();
                (topic.to_owned(), partition, at.owner.clone(), target)
            })
            .collect();
        for (topic, partition, source, target) in moves {
            self.apply(Command::CompleteMove(narad_meta::CompleteMove {
                id: id_of(&topic),
                topic,
                partition,
                source,
                target,
            }));
        }
    }

    /// Partitions per member, counting a move at its target.
    fn load(&self) -> BTreeMap<String, usize> {
        let mut load = BTreeMap::new();
        for topic in self.meta.topics() {
            for partition in 0..topic.partitions {
                if let Some(at) = self.meta.assignment(&topic.name, partition) {
                    let holder = at.target.as_ref().unwrap_or(&at.owner);
                    *load.entry(holder.clone()).or_default() += 1;
                }
            }
        }
        load
    }

    /// Plans and finishes moves until the planner proposes none; returns
    /// how many moves that took.
    fn settle(&mut self, receivers: &[&str]) -> usize {
        let mut total = 0;
        loop {
            let moves = self.plan(receivers);
            if moves.is_empty() {
                return total;
            }
            assert!(moves.len() <= MAX_IN_FLIGHT_MOVES);
            total += moves.len();
            self.finish_moves();
        }
    }
}

fn id_of(name: &str) -> IncarnationId {
    IncarnationId::from_bits(name.bytes().fold(7, |h, b| h * 131 + u64::from(b)))
}

fn loads(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(id, n)| ((*id).to_owned(), *n)).collect()
}

#[test]
fn a_joining_node_takes_its_share_from_the_others_and_no_more() {
    let mut layout = Layout::new(&["n1", "n2", "n3", "n4"]);
    layout.spread("t", &[("n1", 9), ("n2", 9), ("n3", 9)]);
    let moves = layout.plan(&["n1", "n2", "n3", "n4"]);
    // T = 27 over 4: the three that hold most keep 7, the newcomer gets 6.
    assert_eq!(moves.len(), 6);
    assert!(moves.iter().all(|(_, _, _, to)| to == "n4"));
    assert_eq!(
        layout.load(),
        loads(&[("n1", 7), ("n2", 7), ("n3", 7), ("n4", 6)])
    );
    // Nothing more once the moves are planned, or done.
    assert!(layout.plan(&["n1", "n2", "n3", "n4"]).is_empty());
    layout.finish_moves();
    assert!(layout.plan(&["n1", "n2", "n3", "n4"]).is_empty());
}

#[test]
fn a_balanced_cluster_plans_nothing() {
    for owners in [
        vec![("n1", 4), ("n2", 3), ("n3", 3)],
        vec![("n1", 3), ("n2", 3), ("n3", 3)],
        vec![("n1", 1), ("n2", 1), ("n3", 1)],
    ] {
        let mut layout = Layout::new(&["n1", "n2", "n3"]);
        layout.spread("t", &owners);
        assert!(
            layout.plan(&["n1", "n2", "n3"]).is_empty(),
            "{owners:?} is balanced"
        );
    }
}

#[test]
fn at_most_eight_moves_are_in_flight() {
    let mut layout = Layout::new(&["n1", "n2", "n3", "n4", "n5"]);
    layout.spread("t", &[("n1", 12), ("n2", 12), ("n3", 12), ("n4", 12)]);
    layout.moving("t", 0, "n5");
    layout.moving("t", 12, "n5");
    layout.moving("t", 24, "n5");
    let receivers = ["n1", "n2", "n3", "n4", "n5"];
    let moves = layout.plan(&receivers);
    assert_eq!(moves.len(), MAX_IN_FLIGHT_MOVES - 3);
    assert_eq!(layout.meta.moves().count(), MAX_IN_FLIGHT_MOVES);
    assert!(layout.plan(&receivers).is_empty(), "the budget is spent");
    // Topped up as moves finish, until balanced: 48 over 5 is 10,10,10,9,9.
    layout.finish_moves();
    layout.settle(&receivers);
    let mut counts: Vec<usize> = layout.load().into_values().collect();
    counts.sort_unstable();
    assert_eq!(counts, [9, 9, 10, 10, 10]);
}

#[test]
fn a_dead_owners_partitions_never_move_and_do_not_count() {
    let mut layout = Layout::new(&["n1", "n2", "n3"]);
    layout.spread("t", &[("n1", 6), ("n2", 6), ("n3", 0)]);
    layout.spread("d", &[("n3", 5)]);
    layout.kill("n3");
    layout.apply(Command::RegisterMember(RegisterMember {
        id: "n4".into(),
        http_addr: "n4:7942".into(),
        rpc_addr: "n4:7942".into(),
        at_ms: 2_000,
    }));
    let moves = layout.plan(&["n1", "n2", "n4"]);
    assert!(
        moves
            .iter()
            .all(|(topic, _, from, _)| topic == "t" && from != "n3")
    );
    // T = 12 (n3's five are left out): 4 each.
    assert_eq!(moves.len(), 4);
    assert_eq!(
        layout.load(),
        loads(&[("n1", 4), ("n2", 4), ("n3", 5), ("n4", 4)])
    );
}

#[test]
fn a_draining_member_sheds_everything_first() {
    let mut layout = Layout::new(&["n1", "n2", "n3"]);
    layout.spread("t", &[("n1", 4), ("n2", 4), ("n3", 4)]);
    layout.drain("n2");
    let receivers = ["n1", "n3"];
    let moves = layout.plan(&receivers);
    assert_eq!(moves.len(), 4);
    assert!(moves.iter().all(|(_, _, from, _)| from == "n2"));
    assert_eq!(layout.load(), loads(&[("n1", 6), ("n3", 6)]));
    layout.finish_moves();
    assert_eq!(layout.meta.holdings("n2"), (0, 0));
}

#[test]
fn draining_goes_before_balancing_when_the_budget_is_short() {
    let mut layout = Layout::new(&["n1", "n2", "n3", "n4"]);
    layout.spread("t", &[("n1", 10), ("n2", 2), ("n3", 0), ("n4", 6)]);
    layout.drain("n4");
    let moves = layout.plan(&["n1", "n2", "n3"]);
    assert_eq!(moves.len(), MAX_IN_FLIGHT_MOVES);
    let from_draining = moves.iter().filter(|(_, _, from, _)| from == "n4").count();
    assert_eq!(from_draining, 6, "all of n4's partitions are planned");
    layout.finish_moves();
    assert_eq!(layout.settle(&["n1", "n2", "n3"]), 2);
    assert_eq!(layout.load(), loads(&[("n1", 6), ("n2", 6), ("n3", 6)]));
}

#[test]
fn a_move_in_flight_counts_at_its_target() {
    let mut layout = Layout::new(&["n1", "n2"]);
    layout.spread("t", &[("n1", 4)]);
    layout.moving("t", 0, "n2");
    layout.moving("t", 1, "n2");
    assert!(layout.plan(&["n1", "n2"]).is_empty());
}

#[test]
fn a_child_partition_avoids_its_parents_owner_when_it_can() {
    let mut layout = Layout::new(&["n1", "n2", "n3"]);
    layout.topic("p", &["n1", "n2", "n1"], None);
    layout.topic("c", &["n2", "n1", "n2"], Some("p"));
    // n3 joins empty: T = 6, 2 each. n1 and n2 shed one each to n3.
    let moves = layout.plan(&["n1", "n2", "n3"]);
    assert_eq!(moves.len(), 2);
    assert_eq!(layout.load(), loads(&[("n1", 2), ("n2", 2), ("n3", 2)]));
    // No partition index ends with parent and child on one node.
    for partition in 0..3 {
        let holder = |topic: &str| {
            let at = layout.meta.assignment(topic, partition).unwrap();
            at.target.clone().unwrap_or_else(|| at.owner.clone())
        };
        assert_ne!(holder("p"), holder("c"), "partition {partition}");
    }
}

#[test]
fn no_receivers_no_plan() {
    let mut layout = Layout::new(&["n1"]);
    layout.spread("t", &[("n1", 3)]);
    layout.drain("n1");
    assert!(layout.plan(&[]).is_empty());
}

#[test]
fn two_leaders_with_the_same_state_plan_the_same_moves() {
    let build = || {
        let mut layout = Layout::new(&["a", "b", "c", "d"]);
        layout.spread("x", &[("a", 5), ("b", 2)]);
        layout.spread("y", &[("c", 7)]);
        layout
    };
    let receivers = ["d", "c", "b", "a"];
    let first = plan_moves(&build().meta, &receivers);
    let second = plan_moves(&build().meta, &["a", "b", "c", "d"]);
    assert_eq!(first, second);
    assert!(!first.is_empty());
}
