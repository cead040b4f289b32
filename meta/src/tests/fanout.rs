//! Fan-out children: create-as-child, attach, detach (spec §1.4).

use super::*;

fn with_parent_and_child() -> Store {
    let mut store = Store::new();
    store.ok(create_cmd("parent"));
    store.ok(create_cmd("child"));
    store
}

fn attach_cmd(parent: &str, child: &str) -> Command {
    Command::AttachChild(attach(parent, child))
}

#[test]
fn create_with_parent_links_both_topics_in_one_command() {
    let mut store = Store::new();
    store.ok(create_cmd("parent"));
    let command = CreateTopic {
        parent: Some(link("parent")),
        ..create("child")
    };
    store.ok(Command::CreateTopic(command));
    assert_eq!(store.topic("parent").children, vec!["child".to_owned()]);
    let child_link = store.topic("child").parent.clone().unwrap();
    assert_eq!(child_link.parent, "parent");
    assert_eq!(child_link.attach_epoch, AttachEpoch::from_bits(9));
    assert_eq!(store.topic("parent").role(), Role::Parent);
    assert_eq!(store.topic("child").role(), Role::Child);
}

#[test]
fn create_with_parent_inherits_the_parent_partition_count() {
    let mut store = Store::new();
    store.ok(Command::CreateTopic(CreateTopic {
        partitions: Some(7),
        ..create("parent")
    }));
    let link = NewLink {
        attach_offsets: vec![0; 7],
        ..link("parent")
    };
    store.ok(Command::CreateTopic(CreateTopic {
        parent: Some(link),
        ..create("child")
    }));
    assert_eq!(store.topic("child").partitions, 7);
}

#[test]
fn create_with_a_missing_parent_is_404() {
    let mut store = Store::new();
    let command = CreateTopic {
        parent: Some(link("parent")),
        ..create("child")
    };
    let error = store.apply(Command::CreateTopic(command)).unwrap_err();
    assert_eq!(
        (error, error_status_404()),
        (MetastoreError::ParentNotFound, 404)
    );
}

fn error_status_404() -> u16 {
    MetastoreError::ParentNotFound.status()
}

#[test]
fn create_with_parent_rolls_back_entirely_when_the_link_is_refused() {
    let mut store = with_parent_and_child();
    store.ok(attach_cmd("parent", "child"));
    // "child" is a child, so a create under it would chain.
    let command = CreateTopic {
        parent: Some(link("child")),
        ..create("grandchild")
    };
    let refused = store.apply(Command::CreateTopic(command));
    assert!(matches!(
        refused,
        Err(MetastoreError::FanoutRoleConflict { .. })
    ));
    assert!(store.meta.topic("grandchild").is_none());
    assert!(store.meta.assignments("grandchild").is_none());
}

#[test]
fn create_with_a_delay_needs_parent_retention_of_delay_plus_one_hour() {
    let mut store = Store::new();
    let parent = CreateTopic {
        retention_ms: Some(7_200_000),
        ..create("parent")
    };
    store.ok(Command::CreateTopic(parent));
    let too_long = NewLink {
        fanout_delay_ms: Some(3_600_001),
        ..link("parent")
    };
    let command = CreateTopic {
        parent: Some(too_long),
        ..create("late")
    };
    let error = store.apply(Command::CreateTopic(command)).unwrap_err();
    assert_eq!(error.status(), 409);
    assert!(matches!(
        error,
        MetastoreError::DelayExceedsRetention {
            required_ms: 7_200_001,
            ..
        }
    ));
    let fits = NewLink {
        fanout_delay_ms: Some(3_600_000),
        ..link("parent")
    };
    store.ok(Command::CreateTopic(CreateTopic {
        parent: Some(fits),
        ..create("late")
    }));
    assert_eq!(
        store.topic("late").parent.as_ref().unwrap().fanout_delay_ms,
        3_600_000
    );
}

#[test]
fn attach_links_the_child_with_its_epoch_and_attach_point() {
    let mut store = with_parent_and_child();
    let command = AttachChild {
        attach_offsets: vec![10, 20, 30],
        ..attach("parent", "child")
    };
    store.ok(Command::AttachChild(command));
    let link = store.topic("child").parent.clone().unwrap();
    assert_eq!(link.attach_offsets, vec![10, 20, 30]);
    assert_eq!(link.attach_epoch, AttachEpoch::from_bits(7));
    assert_eq!(store.topic("parent").children, vec!["child".to_owned()]);
}

#[test]
fn children_are_listed_in_attach_order() {
    let mut store = with_parent_and_child();
    store.ok(create_cmd("another"));
    store.ok(attach_cmd("parent", "child"));
    store.ok(attach_cmd("parent", "another"));
    assert_eq!(
        store.topic("parent").children,
        vec!["child".to_owned(), "another".to_owned()]
    );
}

#[test]
fn attach_without_a_child_name_is_400() {
    let mut store = with_parent_and_child();
    let error = store.apply(attach_cmd("parent", "")).unwrap_err();
    assert_eq!(
        (error.status(), error),
        (400, MetastoreError::ChildRequired)
    );
}

#[test]
fn attach_of_a_topic_to_itself_is_400() {
    let mut store = with_parent_and_child();
    let error = store.apply(attach_cmd("parent", "parent")).unwrap_err();
    assert_eq!(
        (error.status(), error),
        (400, MetastoreError::ChildIsParent)
    );
}

#[test]
fn attach_needs_both_topics_to_exist() {
    let mut store = with_parent_and_child();
    assert_eq!(
        store.apply(attach_cmd("parent", "nope")),
        Err(MetastoreError::TopicNotFound)
    );
    assert_eq!(
        store.apply(attach_cmd("nope", "child")),
        Err(MetastoreError::TopicNotFound)
    );
}

#[test]
fn a_child_has_only_one_parent() {
    let mut store = with_parent_and_child();
    store.ok(create_cmd("other"));
    store.ok(attach_cmd("parent", "child"));
    let error = store.apply(attach_cmd("other", "child")).unwrap_err();
    assert!(matches!(error, MetastoreError::FanoutRoleConflict { .. }));
    assert_eq!(error.status(), 409);
}

#[test]
fn a_parent_cannot_become_a_child() {
    let mut store = with_parent_and_child();
    store.ok(create_cmd("top"));
    store.ok(attach_cmd("parent", "child"));
    let refused = store.apply(attach_cmd("top", "parent"));
    assert!(matches!(
        refused,
        Err(MetastoreError::FanoutRoleConflict { .. })
    ));
}

#[test]
fn a_child_cannot_become_a_parent_so_links_never_chain() {
    let mut store = with_parent_and_child();
    store.ok(create_cmd("below"));
    store.ok(attach_cmd("parent", "child"));
    let refused = store.apply(attach_cmd("child", "below"));
    assert!(matches!(
        refused,
        Err(MetastoreError::FanoutRoleConflict { .. })
    ));
}

#[test]
fn a_parent_takes_at_most_108_children() {
    let mut store = Store::new();
    store.ok(create_cmd("parent"));
    for n in 0..108 {
        let name = format!("c{n}");
        store.ok(create_cmd(&name));
        store.ok(attach_cmd("parent", &name));
    }
    store.ok(create_cmd("c108"));
    let error = store.apply(attach_cmd("parent", "c108")).unwrap_err();
    assert_eq!((error.status(), error), (409, MetastoreError::ChildLimit));
}

#[test]
fn a_delay_over_one_year_is_400() {
    let mut store = with_parent_and_child();
    let command = AttachChild {
        delay_ms: Some(31_536_000_001),
        ..attach("parent", "child")
    };
    let error = store.apply(Command::AttachChild(command)).unwrap_err();
    assert_eq!(
        (error.status(), error),
        (400, MetastoreError::FanoutDelayTooLong)
    );
}

#[test]
fn a_negative_delay_is_400() {
    let mut store = with_parent_and_child();
    let command = AttachChild {
        delay_ms: Some(-1),
        ..attach("parent", "child")
    };
    let refused = store.apply(Command::AttachChild(command));
    assert_eq!(refused, Err(MetastoreError::FanoutDelayNegative));
}

#[test]
fn a_delay_needs_parent_retention_of_delay_plus_one_hour() {
    let mut store = with_parent_and_child();
    // The parent keeps 7 days; a 7-day delay needs 7 days + 1 h.
    let command = AttachChild {
        delay_ms: Some(604_800_000),
        ..attach("parent", "child")
    };
    let refused = store.apply(Command::AttachChild(command));
    assert!(matches!(
        refused,
        Err(MetastoreError::DelayExceedsRetention { .. })
    ));
}

#[test]
fn a_parent_that_keeps_records_forever_takes_a_one_year_delay() {
    let mut store = Store::new();
    store.ok(Command::CreateTopic(CreateTopic {
        retention_ms: Some(0),
        ..create("parent")
    }));
    store.ok(create_cmd("child"));
    let command = AttachChild {
        delay_ms: Some(31_536_000_000),
        ..attach("parent", "child")
    };
    store.ok(Command::AttachChild(command));
}

#[test]
fn parent_retention_cannot_drop_below_a_delay_child_plus_one_hour() {
    let mut store = with_parent_and_child();
    let command = AttachChild {
        delay_ms: Some(3_600_000),
        ..attach("parent", "child")
    };
    store.ok(Command::AttachChild(command));
    let lower = AlterTopic {
        retention_ms: Some(7_199_999),
        ..alter("parent")
    };
    let error = store.apply(Command::AlterTopic(lower)).unwrap_err();
    assert_eq!(error.status(), 409);
    assert!(matches!(
        error,
        MetastoreError::DelayExceedsRetention { .. }
    ));
    store.ok(Command::AlterTopic(AlterTopic {
        retention_ms: Some(7_200_000),
        ..alter("parent")
    }));
}

#[test]
fn a_child_without_a_schema_adopts_the_parent_history() {
    let mut store = with_parent_and_child();
    store.ok(Command::AddSchemaVersion(add_schema("parent", "true")));
    store.ok(Command::AddSchemaVersion(add_schema("parent", "{}")));
    store.ok(attach_cmd("parent", "child"));
    assert_eq!(store.topic("child").schemas, store.topic("parent").schemas);
    assert_eq!(store.topic("child").schema_version(), 2);
}

#[test]
fn a_child_with_a_schema_cannot_go_under_a_parent_without_one() {
    let mut store = with_parent_and_child();
    store.ok(Command::AddSchemaVersion(add_schema("child", "true")));
    let error = store.apply(attach_cmd("parent", "child")).unwrap_err();
    assert!(matches!(error, MetastoreError::SchemaMismatch { .. }));
    assert_eq!(error.status(), 409);
}

#[test]
fn schema_histories_must_be_identical() {
    let mut store = with_parent_and_child();
    store.ok(Command::AddSchemaVersion(add_schema("parent", "true")));
    store.ok(Command::AddSchemaVersion(add_schema("child", "{}")));
    let refused = store.apply(attach_cmd("parent", "child"));
    assert!(matches!(
        refused,
        Err(MetastoreError::SchemaMismatch { .. })
    ));
}

#[test]
fn a_child_already_holding_the_parent_history_attaches() {
    let mut store = with_parent_and_child();
    store.ok(Command::AddSchemaVersion(add_schema("parent", "true")));
    store.ok(Command::AddSchemaVersion(add_schema("child", "true")));
    store.ok(attach_cmd("parent", "child"));
}

#[test]
fn an_attach_point_not_covering_every_parent_partition_is_topic_changed() {
    let mut store = with_parent_and_child();
    let command = AttachChild {
        attach_offsets: vec![0; 2],
        ..attach("parent", "child")
    };
    let refused = store.apply(Command::AttachChild(command));
    assert_eq!(refused, Err(MetastoreError::TopicChanged));
}

#[test]
fn attach_to_a_recreated_parent_is_topic_changed() {
    let mut store = with_parent_and_child();
    let stale = AttachChild {
        parent_id: Some(IncarnationId::from_bits(3)),
        ..attach("parent", "child")
    };
    let refused = store.apply(Command::AttachChild(stale));
    assert_eq!(refused, Err(MetastoreError::TopicChanged));
}

#[test]
fn detach_leaves_the_child_standalone_with_its_schema_history() {
    let mut store = with_parent_and_child();
    store.ok(Command::AddSchemaVersion(add_schema("parent", "true")));
    store.ok(attach_cmd("parent", "child"));
    store.ok(detach("parent", "child"));
    assert_eq!(store.topic("child").role(), Role::Standalone);
    assert_eq!(store.topic("child").schema_version(), 1);
    assert_eq!(store.topic("parent").role(), Role::Standalone);
}

#[test]
fn detach_of_a_topic_that_is_not_linked_is_404() {
    let mut store = with_parent_and_child();
    let error = store.apply(detach("parent", "child")).unwrap_err();
    assert_eq!((error.status(), error), (404, MetastoreError::NotLinked));
}

#[test]
fn a_reattach_starts_at_a_new_attach_point_and_epoch() {
    let mut store = with_parent_and_child();
    store.ok(attach_cmd("parent", "child"));
    store.ok(detach("parent", "child"));
    let again = AttachChild {
        attach_epoch: AttachEpoch::from_bits(8),
        attach_offsets: vec![5, 5, 5],
        ..attach("parent", "child")
    };
    store.ok(Command::AttachChild(again));
    let link = store.topic("child").parent.clone().unwrap();
    assert_eq!(
        (link.attach_epoch, link.attach_offsets),
        (AttachEpoch::from_bits(8), vec![5; 3])
    );
}

#[test]
fn deleting_a_parent_leaves_its_children_standalone() {
    let mut store = with_parent_and_child();
    store.ok(attach_cmd("parent", "child"));
    store.ok(delete("parent"));
    assert_eq!(store.topic("child").role(), Role::Standalone);
}

#[test]
fn deleting_a_child_removes_it_from_its_parent() {
    let mut store = with_parent_and_child();
    store.ok(attach_cmd("parent", "child"));
    store.ok(delete("child"));
    assert_eq!(store.topic("parent").role(), Role::Standalone);
}
