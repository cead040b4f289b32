//! Moves (targets, the flip, aborts) and the removal that ends a
//! decommission.

use super::*;

/// Topic "t" with partitions 0, 1, 2 on n1, n1, n2; members n1, n2, n3.
fn placed() -> Store {
    let mut store = Store::new();
    for id in ["n1", "n2", "n3"] {
        store.member(id);
    }
    store.ok(create_cmd("t"));
    store.ok(assign("t", &[(0, "n1"), (1, "n1"), (2, "n2")]));
    store
}

fn set_targets(moves: &[(u32, &str, &str)]) -> Command {
    Command::SetMoveTargets(SetMoveTargets {
        topic: "t".into(),
        id: id_of("t"),
        moves: moves
            .iter()
            .map(|(partition, owner, target)| MoveTarget {
                partition: *partition,
                owner: (*owner).into(),
                target: (*target).into(),
            })
            .collect(),
    })
}

fn complete(partition: u32, source: &str, target: &str) -> Command {
    Command::CompleteMove(CompleteMove {
        topic: "t".into(),
        id: id_of("t"),
        partition,
        source: source.into(),
        target: target.into(),
    })
}

fn abort(partition: u32, target: &str) -> Command {
    Command::AbortMove(AbortMove {
        topic: "t".into(),
        id: id_of("t"),
        partition,
        target: target.into(),
    })
}

fn remove(id: &str) -> Command {
    Command::RemoveMember(RemoveMember { id: id.into() })
}

fn drain(id: &str) -> Command {
    Command::SetDraining(SetDraining {
        id: id.into(),
        draining: true,
    })
}

fn target_of(store: &Store, partition: u32) -> Option<String> {
    store
        .meta
        .assignment("t", partition)
        .unwrap()
        .target
        .clone()
}

#[test]
fn a_target_is_recorded_beside_the_owner() {
    let mut store = placed();
    let before = store.meta.versions().assignments;
    store.ok(set_targets(&[(0, "n1", "n3"), (1, "n1", "n2")]));
    assert_eq!(store.meta.owner("t", 0), Some("n1"));
    assert_eq!(target_of(&store, 0).as_deref(), Some("n3"));
    assert_eq!(target_of(&store, 1).as_deref(), Some("n2"));
    assert_eq!(store.meta.versions().assignments, before + 1);
    let moves: Vec<(&str, u32)> = store.meta.moves().map(|(t, p, _)| (t, p)).collect();
    assert_eq!(moves, [("t", 0), ("t", 1)]);
    assert_eq!(store.meta.holdings("n3"), (0, 1));
    assert_eq!(store.meta.holdings("n1"), (2, 0));
}

#[test]
fn targets_are_refused_all_or_none() {
    let mut store = placed();
    // The second move names a stale owner: the first is not applied either.
    let outcome = store.apply(set_targets(&[(0, "n1", "n3"), (2, "n1", "n3")]));
    assert_eq!(
        outcome,
        Err(MetastoreError::MoveOwnerChanged { partition: 2 })
    );
    assert_eq!(target_of(&store, 0), None);
    assert_eq!(
        store.apply(set_targets(&[(0, "n1", "n1")])),
        Err(MetastoreError::MoveToOwner { partition: 0 })
    );
    assert_eq!(
        store.apply(set_targets(&[(0, "n1", "n3"), (0, "n1", "n2")])),
        Err(MetastoreError::MoveInProgress { partition: 0 })
    );
    store.ok(set_targets(&[(0, "n1", "n3")]));
    assert_eq!(
        store.apply(set_targets(&[(0, "n1", "n2")])),
        Err(MetastoreError::MoveInProgress { partition: 0 })
    );
    assert_eq!(
        store.apply(set_targets(&[(7, "n1", "n2")])),
        Err(MetastoreError::PartitionOutOfRange { partition: 7 })
    );
}

#[test]
fn a_draining_or_dead_member_is_no_target() {
    let mut store = placed();
    store.ok(drain("n3"));
    assert_eq!(
        store.apply(set_targets(&[(0, "n1", "n3")])),
        Err(MetastoreError::MemberNotReceiver { id: "n3".into() })
    );
    store.ok(mark_dead("n2"));
    assert_eq!(
        store.apply(set_targets(&[(0, "n1", "n2")])),
        Err(MetastoreError::MemberNotReceiver { id: "n2".into() })
    );
    assert_eq!(
        store.apply(set_targets(&[(0, "n1", "n9")])),
        Err(MetastoreError::MemberNotFound)
    );
}

#[test]
fn the_flip_makes_the_target_owner_once() {
    let mut store = placed();
    store.ok(set_targets(&[(0, "n1", "n3")]));
    store.ok(complete(0, "n1", "n3"));
    assert_eq!(store.meta.owner("t", 0), Some("n3"));
    assert_eq!(target_of(&store, 0), None);
    // A retried proposal of the same flip changes nothing.
    assert_eq!(store.apply(complete(0, "n1", "n3")), Ok(Outcome::Unchanged));
}

#[test]
fn a_flip_after_an_abort_or_for_another_move_is_refused() {
    let mut store = placed();
    store.ok(set_targets(&[(0, "n1", "n3")]));
    assert_eq!(
        store.apply(complete(0, "n1", "n2")),
        Err(MetastoreError::MoveChanged { partition: 0 })
    );
    assert_eq!(
        store.apply(complete(0, "n2", "n3")),
        Err(MetastoreError::MoveChanged { partition: 0 })
    );
    store.ok(abort(0, "n3"));
    assert_eq!(
        store.apply(complete(0, "n1", "n3")),
        Err(MetastoreError::MoveChanged { partition: 0 })
    );
    assert_eq!(store.meta.owner("t", 0), Some("n1"));
}

/// The controller's judgement that `id` died (its last heartbeat seen at
/// 1 s).
fn mark_dead(id: &str) -> Command {
    Command::MarkDead(MarkDead {
        id: id.into(),
        observed_heartbeat_ms: 1_000,
    })
}

fn force(partition: u32, source: &str, target: &str) -> Command {
    let Command::CompleteMove(body) = complete(partition, source, target) else {
        unreachable!("complete() builds a CompleteMove");
    };
    Command::ForcePromote(body)
}

#[test]
fn a_force_promote_needs_the_source_marked_dead() {
    let mut store = placed();
    store.ok(set_targets(&[(0, "n1", "n3")]));
    assert_eq!(
        store.apply(force(0, "n1", "n3")),
        Err(MetastoreError::SourceAlive {
            partition: 0,
            member: "n1".into(),
        })
    );
    assert_eq!(store.meta.owner("t", 0), Some("n1"));
    store.ok(mark_dead("n1"));
    // Still the flip's compare-and-set: another target cannot take it.
    assert_eq!(
        store.apply(force(0, "n1", "n2")),
        Err(MetastoreError::MoveChanged { partition: 0 })
    );
    store.ok(force(0, "n1", "n3"));
    assert_eq!(store.meta.owner("t", 0), Some("n3"));
    assert_eq!(target_of(&store, 0), None);
    assert_eq!(store.apply(force(0, "n1", "n3")), Ok(Outcome::Unchanged));
}

#[test]
fn a_source_back_alive_refuses_the_force_promote() {
    let mut store = placed();
    store.ok(set_targets(&[(0, "n1", "n3")]));
    store.ok(mark_dead("n1"));
    store.ok(Command::Heartbeat(Heartbeat {
        id: "n1".into(),
        at_ms: 2_000,
    }));
    assert_eq!(
        store.apply(force(0, "n1", "n3")),
        Err(MetastoreError::SourceAlive {
            partition: 0,
            member: "n1".into(),
        })
    );
    assert_eq!(store.meta.owner("t", 0), Some("n1"));
}

#[test]
fn an_abort_names_the_move_it_clears() {
    let mut store = placed();
    assert_eq!(
        store.apply(abort(0, "n3")),
        Err(MetastoreError::NoMove { partition: 0 })
    );
    store.ok(set_targets(&[(0, "n1", "n3")]));
    assert_eq!(
        store.apply(abort(0, "n2")),
        Err(MetastoreError::MoveTargetDiffers {
            partition: 0,
            current: "n3".into(),
            asked: "n2".into(),
        })
    );
    store.ok(complete(0, "n1", "n3"));
    let refused = store.apply(abort(0, "n3"));
    assert_eq!(
        refused,
        Err(MetastoreError::MoveCompleted {
            partition: 0,
            owner: "n3".into(),
        })
    );
    assert_eq!(refused.unwrap_err().status(), 409);
}

#[test]
fn a_member_leaves_only_drained_and_empty() {
    let mut store = placed();
    assert_eq!(
        store.apply(remove("n3")),
        Err(MetastoreError::MemberNotDraining { id: "n3".into() })
    );
    store.ok(set_targets(&[(2, "n2", "n3")]));
    store.ok(drain("n3"));
    assert_eq!(
        store.apply(remove("n3")),
        Err(MetastoreError::MemberNotEmpty {
            id: "n3".into(),
            partitions: 0,
            inbound: 1,
        })
    );
    store.ok(drain("n2"));
    assert_eq!(
        store.apply(remove("n2")),
        Err(MetastoreError::MemberNotEmpty {
            id: "n2".into(),
            partitions: 1,
            inbound: 0,
        })
    );
    store.ok(abort(2, "n3"));
    store.ok(remove("n3"));
    assert!(store.meta.member("n3").is_none());
    assert!(store.meta.is_removed("n3"));
    assert_eq!(store.apply(remove("n3")), Ok(Outcome::Unchanged));
}

#[test]
fn a_removed_member_cannot_heartbeat_back_but_can_register_again() {
    let mut store = placed();
    store.ok(drain("n3"));
    store.ok(remove("n3"));
    let refused = store.apply(Command::Heartbeat(Heartbeat {
        id: "n3".into(),
        at_ms: 2_000,
    }));
    assert_eq!(
        refused,
        Err(MetastoreError::MemberRemoved { id: "n3".into() })
    );
    assert!(store.meta.member("n3").is_none());
    store.ok(register("n3", 3_000));
    assert!(!store.meta.is_removed("n3"));
    let member = store.meta.member("n3").unwrap();
    assert!(member.is_receiver(), "a fresh member is not draining");
}

#[test]
fn deleting_a_topic_drops_its_moves() {
    let mut store = placed();
    store.ok(set_targets(&[(0, "n1", "n3")]));
    store.ok(delete("t"));
    assert_eq!(store.meta.moves().count(), 0);
    assert_eq!(store.meta.holdings("n3"), (0, 0));
}

#[test]
fn a_decommission_is_blocked_for_good_without_receivers_or_with_a_dead_owner() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(create_cmd("t"));
    store.ok(assign("t", &[(0, "n1"), (1, "n1"), (2, "n1")]));
    assert_eq!(
        store.meta.decommission_blocks("n1"),
        [DecommissionBlock::NoReceivers]
    );
    store.member("n2");
    assert_eq!(store.meta.decommission_blocks("n1"), []);
    store.ok(mark_dead("n1"));
    let blocks = store.meta.decommission_blocks("n1");
    assert_eq!(blocks, [DecommissionBlock::OwnerDead]);
    assert!(blocks[0].is_permanent());
    assert_eq!(blocks[0].code(), "owner_dead");
    assert_eq!(store.meta.decommission_blocks("nobody"), []);
}

#[test]
fn a_decommission_waits_for_inbound_moves_and_the_move_budget() {
    let mut store = Store::new();
    for id in ["n1", "n2", "n3"] {
        store.member(id);
    }
    let partitions = i64::try_from(limits::MOVES_IN_FLIGHT_MAX).unwrap() + 1;
    store.ok(Command::CreateTopic(CreateTopic {
        partitions: Some(partitions),
        ..create("t")
    }));
    let owners: Vec<(u32, &str)> = (0..partitions as u32)
        .map(|p| (p, if p == 0 { "n3" } else { "n1" }))
        .collect();
    store.ok(assign("t", &owners));
    let moves: Vec<(u32, &str, &str)> = (1..=limits::MOVES_IN_FLIGHT_MAX as u32)
        .map(|p| (p, "n1", "n2"))
        .collect();
    store.ok(set_targets(&moves));
    // n3 owns partition 0 and the budget is spent by n1's moves.
    assert_eq!(
        store.meta.decommission_blocks("n3"),
        [DecommissionBlock::MoveBudgetFull]
    );
    // n2 receives moves; n1's partitions are all moving already.
    assert_eq!(
        store.meta.decommission_blocks("n2"),
        [DecommissionBlock::MoveTarget]
    );
    assert_eq!(store.meta.decommission_blocks("n1"), []);
    let permanent: Vec<&str> = DecommissionBlock::ALL
        .iter()
        .filter(|block| block.is_permanent())
        .map(|block| block.code())
        .collect();
    assert_eq!(permanent, ["no_receivers", "owner_dead"]);
}
