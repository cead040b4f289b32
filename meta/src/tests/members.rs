//! Data-node members and partition placements.

use super::*;

fn heartbeat(id: &str, at_ms: u64) -> Command {
    Command::Heartbeat(Heartbeat {
        id: id.into(),
        at_ms,
    })
}

fn mark_dead(id: &str, observed_heartbeat_ms: u64) -> Command {
    Command::MarkDead(MarkDead {
        id: id.into(),
        observed_heartbeat_ms,
    })
}

fn drain(id: &str, draining: bool) -> Command {
    Command::SetDraining(SetDraining {
        id: id.into(),
        draining,
    })
}

#[test]
fn a_registered_member_is_alive_with_its_addresses_and_stamp() {
    let mut store = Store::new();
    store.ok(register("n1", 1_000));
    let member = store.meta.member("n1").unwrap();
    assert_eq!(member.status, MemberStatus::Alive);
    assert_eq!(
        (member.http_addr.as_str(), member.rpc_addr.as_str()),
        ("n1:7942", "n1:7942")
    );
    assert_eq!(member.last_heartbeat_ms, 1_000);
    assert!(!member.draining);
}

#[test]
fn a_member_id_must_be_printable_and_not_empty() {
    let mut store = Store::new();
    for id in ["", "a b", &"n".repeat(254)] {
        let refused = store.apply(register(id, 1));
        assert!(
            matches!(refused, Err(MetastoreError::MemberIdInvalid { .. })),
            "{id:?}"
        );
    }
}

#[test]
fn a_member_needs_both_addresses() {
    let mut store = Store::new();
    let command = RegisterMember {
        id: "n1".into(),
        http_addr: String::new(),
        rpc_addr: "r".into(),
        at_ms: 1,
    };
    let refused = store.apply(Command::RegisterMember(command));
    assert!(matches!(
        refused,
        Err(MetastoreError::MemberAddressMissing { .. })
    ));
}

#[test]
fn re_registration_keeps_the_draining_mark_and_takes_new_addresses() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(drain("n1", true));
    let moved = RegisterMember {
        id: "n1".into(),
        http_addr: "h2".into(),
        rpc_addr: "r2".into(),
        at_ms: 9_000,
    };
    store.ok(Command::RegisterMember(moved));
    let member = store.meta.member("n1").unwrap();
    assert!(member.draining);
    assert_eq!(
        (member.http_addr.as_str(), member.last_heartbeat_ms),
        ("h2", 9_000)
    );
}

#[test]
fn re_registration_revives_a_dead_member() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(mark_dead("n1", 1_000));
    store.ok(register("n1", 50_000));
    assert_eq!(store.meta.member("n1").unwrap().status, MemberStatus::Alive);
}

#[test]
fn a_heartbeat_stamps_the_leader_time() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(heartbeat("n1", 6_000));
    assert_eq!(store.meta.member("n1").unwrap().last_heartbeat_ms, 6_000);
}

#[test]
fn a_heartbeat_from_an_unknown_member_is_404() {
    let mut store = Store::new();
    let error = store.apply(heartbeat("n1", 6_000)).unwrap_err();
    assert_eq!(
        (error.status(), error),
        (404, MetastoreError::MemberNotFound)
    );
}

#[test]
fn a_heartbeat_revives_a_dead_member() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(mark_dead("n1", 1_000));
    store.ok(heartbeat("n1", 40_000));
    assert_eq!(store.meta.member("n1").unwrap().status, MemberStatus::Alive);
}

#[test]
fn a_bare_heartbeat_does_not_count_as_a_membership_change() {
    let mut store = Store::new();
    store.member("n1");
    let before = store.meta.versions().members;
    store.ok(heartbeat("n1", 6_000));
    assert_eq!(store.meta.versions().members, before);
}

#[test]
fn mark_dead_sets_the_member_dead() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(mark_dead("n1", 1_000));
    assert_eq!(store.meta.member("n1").unwrap().status, MemberStatus::Dead);
}

#[test]
fn mark_dead_based_on_a_superseded_heartbeat_is_refused() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(heartbeat("n1", 2_000));
    let refused = store.apply(mark_dead("n1", 1_000));
    assert_eq!(refused, Err(MetastoreError::HeartbeatChanged));
    assert_eq!(store.meta.member("n1").unwrap().status, MemberStatus::Alive);
}

#[test]
fn mark_dead_of_a_dead_member_changes_nothing() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(mark_dead("n1", 1_000));
    assert_eq!(store.apply(mark_dead("n1", 1_000)), Ok(Outcome::Unchanged));
}

#[test]
fn draining_is_set_and_cleared() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(drain("n1", true));
    assert!(store.meta.member("n1").unwrap().draining);
    assert_eq!(store.apply(drain("n1", true)), Ok(Outcome::Unchanged));
    store.ok(drain("n1", false));
    assert!(!store.meta.member("n1").unwrap().draining);
}

#[test]
fn draining_an_unknown_member_is_404() {
    let mut store = Store::new();
    assert_eq!(
        store.apply(drain("n1", true)),
        Err(MetastoreError::MemberNotFound)
    );
}

#[test]
fn assignment_places_owners() {
    let mut store = Store::new();
    store.member("n1");
    store.member("n2");
    store.ok(create_cmd("orders"));
    store.ok(assign("orders", &[(0, "n1"), (1, "n2"), (2, "n1")]));
    assert_eq!(store.meta.owner("orders", 1), Some("n2"));
}

#[test]
fn an_owned_partition_is_never_placed_again() {
    let mut store = Store::new();
    store.member("n1");
    store.member("n2");
    store.ok(create_cmd("orders"));
    store.ok(assign("orders", &[(0, "n1")]));
    store.ok(mark_dead("n1", 1_000));
    let refused = store.apply(assign("orders", &[(0, "n2")]));
    assert_eq!(
        refused,
        Err(MetastoreError::PartitionAssigned { partition: 0 })
    );
    assert_eq!(store.meta.owner("orders", 0), Some("n1"));
}

#[test]
fn a_partition_named_twice_in_one_assignment_is_refused() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(create_cmd("orders"));
    let refused = store.apply(assign("orders", &[(0, "n1"), (0, "n1")]));
    assert_eq!(
        refused,
        Err(MetastoreError::PartitionAssigned { partition: 0 })
    );
}

#[test]
fn an_assignment_out_of_range_is_refused() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(create_cmd("orders"));
    let refused = store.apply(assign("orders", &[(3, "n1")]));
    assert_eq!(
        refused,
        Err(MetastoreError::PartitionOutOfRange { partition: 3 })
    );
}

#[test]
fn an_assignment_to_a_dead_or_draining_member_is_refused() {
    let mut store = Store::new();
    store.member("dead");
    store.member("leaving");
    store.ok(create_cmd("orders"));
    store.ok(mark_dead("dead", 1_000));
    store.ok(drain("leaving", true));
    for id in ["dead", "leaving"] {
        let refused = store.apply(assign("orders", &[(0, id)]));
        assert!(
            matches!(refused, Err(MetastoreError::MemberNotReceiver { .. })),
            "{id}"
        );
    }
}

#[test]
fn an_assignment_to_an_unknown_member_is_refused() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    assert_eq!(
        store.apply(assign("orders", &[(0, "n9")])),
        Err(MetastoreError::MemberNotFound)
    );
}

#[test]
fn an_assignment_for_another_incarnation_is_topic_changed() {
    let mut store = Store::new();
    store.member("n1");
    let other = CreateTopic {
        id: IncarnationId::from_bits(77),
        ..create("orders")
    };
    store.ok(Command::CreateTopic(other));
    assert_eq!(
        store.apply(assign("orders", &[(0, "n1")])),
        Err(MetastoreError::TopicChanged)
    );
}

#[test]
fn an_assignment_is_all_or_nothing() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(create_cmd("orders"));
    store
        .apply(assign("orders", &[(0, "n1"), (1, "n9")]))
        .unwrap_err();
    assert_eq!(store.meta.owner("orders", 0), None);
}
