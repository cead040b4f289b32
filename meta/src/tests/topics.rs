//! Topic create, alter and delete (spec §1.3).

use super::*;

#[test]
fn create_with_fields_omitted_takes_the_server_defaults() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let topic = store.topic("orders");
    assert_eq!(topic.partitions, 3);
    assert_eq!(topic.retention_ms, 604_800_000);
    assert_eq!(topic.visibility_timeout_ms, 30_000);
    assert_eq!(topic.max_in_flight_per_partition, 1_024);
    assert_eq!(topic.max_acked_ahead_per_partition, 1_024);
    assert_eq!(topic.idempotency_window_ms, 120_000);
    assert_eq!(topic.id, id_of("orders"));
    assert_eq!(topic.role(), Role::Standalone);
}

#[test]
fn zero_takes_the_default_except_retention_where_zero_keeps_forever() {
    let mut store = Store::new();
    store.ok(Command::CreateTopic(CreateTopic {
        partitions: Some(0),
        retention_ms: Some(0),
        visibility_timeout_ms: Some(0),
        max_in_flight_per_partition: Some(0),
        max_acked_ahead_per_partition: Some(0),
        ..create("orders")
    }));
    let topic = store.topic("orders");
    assert_eq!(topic.partitions, 3);
    assert_eq!(topic.retention_ms, 0);
    assert_eq!(topic.visibility_timeout_ms, 30_000);
    assert_eq!(topic.max_in_flight_per_partition, 1_024);
}

#[test]
fn the_proposer_defaults_travel_in_the_command() {
    let mut store = Store::new();
    let defaults = TopicDefaults {
        partitions: 6,
        retention_ms: 43_200_000,
        ..TopicDefaults::default()
    };
    store.ok(Command::CreateTopic(CreateTopic {
        defaults,
        ..create("orders")
    }));
    assert_eq!(store.topic("orders").partitions, 6);
    assert_eq!(store.topic("orders").retention_ms, 43_200_000);
}

#[test]
fn an_empty_name_is_refused() {
    let mut store = Store::new();
    let refused = store.apply(create_cmd(""));
    assert_eq!(refused, Err(MetastoreError::TopicNameEmpty));
}

#[test]
fn a_name_over_200_bytes_is_refused_with_the_wire_text() {
    let mut store = Store::new();
    let error = store.apply(create_cmd(&"a".repeat(201))).unwrap_err();
    assert_eq!(
        error.to_string(),
        "topic name is 201 bytes; new topic names are limited to 200 bytes"
    );
    assert_eq!(error.status(), 400);
}

#[test]
fn a_name_of_exactly_200_bytes_is_accepted() {
    let mut store = Store::new();
    store.ok(create_cmd(&"a".repeat(200)));
}

#[test]
fn a_name_with_a_character_outside_the_set_is_refused() {
    let mut store = Store::new();
    for name in ["a/b", "a b", "ä", "a*", "a:b"] {
        let error = store.apply(create_cmd(name)).unwrap_err();
        assert!(
            matches!(error, MetastoreError::TopicNameInvalid { .. }),
            "{name}"
        );
        assert_eq!(error.status(), 400);
    }
}

#[test]
fn the_names_dot_and_dot_dot_are_refused() {
    let mut store = Store::new();
    for name in [".", ".."] {
        let error = store.apply(create_cmd(name)).unwrap_err();
        assert!(
            matches!(error, MetastoreError::TopicNameInvalid { .. }),
            "{name}"
        );
    }
    store.ok(create_cmd("..."));
}

#[test]
fn every_name_character_is_accepted() {
    let mut store = Store::new();
    store.ok(create_cmd("AZaz09._-"));
}

#[test]
fn an_existing_name_is_refused_with_409_topic_already_exists() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let error = store.apply(create_cmd("orders")).unwrap_err();
    assert_eq!(error, MetastoreError::TopicExists);
    assert_eq!(error.to_string(), "topic already exists");
    assert_eq!(error.status(), 409);
}

#[test]
fn a_name_differing_only_in_case_is_refused_with_the_exact_wire_text() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let error = store.apply(create_cmd("Orders")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "topic already exists: \"Orders\" differs only in letter case from the existing topic \"orders\"; on a case-insensitive filesystem both would share one directory, so choose another name"
    );
    assert_eq!(error.status(), 409);
}

#[test]
fn fewer_than_three_partitions_are_refused_with_the_wire_text() {
    let mut store = Store::new();
    for partitions in [1, 2, -1] {
        let command = CreateTopic {
            partitions: Some(partitions),
            ..create("orders")
        };
        let error = store.apply(Command::CreateTopic(command)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "partitions must be >= 3 (0 = use default)"
        );
        assert_eq!(error.status(), 400);
    }
}

#[test]
fn more_partitions_than_the_ceiling_are_refused() {
    let mut store = Store::new();
    let command = CreateTopic {
        partitions: Some(109),
        ..create("orders")
    };
    let refused = store.apply(Command::CreateTopic(command));
    assert_eq!(refused, Err(MetastoreError::PartitionsTooMany { max: 108 }));
    store.ok(Command::CreateTopic(CreateTopic {
        partitions: Some(108),
        ..create("orders")
    }));
}

#[test]
fn negative_retention_is_refused() {
    let mut store = Store::new();
    let command = CreateTopic {
        retention_ms: Some(-1),
        ..create("orders")
    };
    assert_eq!(
        store.apply(Command::CreateTopic(command)),
        Err(MetastoreError::RetentionNegative)
    );
}

#[test]
fn retention_under_one_hour_is_refused() {
    let mut store = Store::new();
    let command = CreateTopic {
        retention_ms: Some(3_599_999),
        ..create("orders")
    };
    let refused = store.apply(Command::CreateTopic(command));
    assert_eq!(
        refused,
        Err(MetastoreError::RetentionBelowFloor {
            retention_ms: 3_599_999
        })
    );
}

#[test]
fn retention_of_exactly_one_hour_is_accepted() {
    let mut store = Store::new();
    store.ok(Command::CreateTopic(CreateTopic {
        retention_ms: Some(3_600_000),
        ..create("orders")
    }));
}

#[test]
fn an_idempotency_window_from_one_second_to_one_day_is_kept() {
    let mut store = Store::new();
    for (name, window_ms) in [("short", 1_000), ("long", 86_400_000)] {
        store.ok(Command::CreateTopic(CreateTopic {
            idempotency_window_ms: Some(window_ms),
            ..create(name)
        }));
        let kept = store.topic(name).idempotency_window_ms;
        assert_eq!(i64::try_from(kept), Ok(window_ms));
    }
}

#[test]
fn an_idempotency_window_outside_one_second_to_one_day_is_refused_with_a_400() {
    let mut store = Store::new();
    for window_ms in [-1, 0, 999, 86_400_001] {
        let command = CreateTopic {
            idempotency_window_ms: Some(window_ms),
            ..create("orders")
        };
        let error = store.apply(Command::CreateTopic(command)).unwrap_err();
        assert_eq!(error.status(), 400);
        assert_eq!(
            error.to_string(),
            format!(
                "idempotency_window_ms must be at least 1000 (1 second) and at most 86400000 (1 day), got {window_ms}"
            )
        );
    }
    assert!(store.meta.topic("orders").is_none());
}

#[test]
fn alter_changes_the_idempotency_window_within_its_range() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    store.ok(Command::AlterTopic(AlterTopic {
        idempotency_window_ms: Some(5_000),
        ..alter("orders")
    }));
    assert_eq!(store.topic("orders").idempotency_window_ms, 5_000);
    let zero = AlterTopic {
        idempotency_window_ms: Some(0),
        ..alter("orders")
    };
    assert_eq!(
        store.apply(Command::AlterTopic(zero)),
        Err(MetastoreError::IdempotencyWindowOutOfRange {
            idempotency_window_ms: 0
        })
    );
    assert_eq!(store.topic("orders").idempotency_window_ms, 5_000);
}

#[test]
fn an_alter_to_the_same_idempotency_window_is_unchanged() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let same = AlterTopic {
        idempotency_window_ms: Some(120_000),
        ..alter("orders")
    };
    assert_eq!(
        store.apply(Command::AlterTopic(same)),
        Ok(Outcome::Unchanged)
    );
}

#[test]
fn a_negative_visibility_timeout_is_refused() {
    let mut store = Store::new();
    let command = CreateTopic {
        visibility_timeout_ms: Some(-5),
        ..create("orders")
    };
    let refused = store.apply(Command::CreateTopic(command));
    assert_eq!(refused, Err(MetastoreError::VisibilityTimeoutNegative));
}

#[test]
fn negative_caps_are_refused() {
    let mut store = Store::new();
    let command = CreateTopic {
        max_in_flight_per_partition: Some(-1),
        ..create("a1")
    };
    let error = store.apply(Command::CreateTopic(command)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_in_flight_per_partition must not be negative"
    );
    let command = CreateTopic {
        max_acked_ahead_per_partition: Some(-1),
        ..create("a2")
    };
    let error = store.apply(Command::CreateTopic(command)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_acked_ahead_per_partition must not be negative"
    );
}

#[test]
fn the_creator_becomes_the_owner_and_security_off_leaves_no_owner() {
    let mut store = Store::new();
    let alice = store.user("alice", vec![grant(GrantAction::Create, &["*"])]);
    store.ok(Command::CreateTopic(CreateTopic {
        actor: alice,
        ..create("mine")
    }));
    store.ok(create_cmd("nobodys"));
    assert_eq!(store.topic("mine").owner.as_deref(), Some("alice"));
    assert_eq!(store.topic("nobodys").owner, None);
}

#[test]
fn create_gives_every_partition_a_waiting_slot() {
    let mut store = Store::new();
    store.ok(Command::CreateTopic(CreateTopic {
        partitions: Some(5),
        ..create("orders")
    }));
    assert_eq!(
        store.meta.assignments("orders").unwrap(),
        &[None, None, None, None, None]
    );
}

#[test]
fn a_refused_command_changes_nothing_but_advances_the_applied_index() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let before = store.meta.clone();
    store.apply(create_cmd("orders")).unwrap_err();
    assert_eq!(store.meta.applied_index(), before.applied_index() + 1);
    assert_eq!(store.meta.versions(), before.versions());
    assert_eq!(store.meta.topics().count(), 1);
}

#[test]
#[should_panic(expected = "applied after")]
fn applying_an_index_that_does_not_advance_panics() {
    let mut meta = Metastore::new();
    meta.apply(&create_cmd("a1"), ApplyContext { index: 5 })
        .unwrap();
    let _ = meta.apply(&create_cmd("a2"), ApplyContext { index: 5 });
}

#[test]
fn delete_removes_the_topic_and_its_placements() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    store.ok(delete("orders"));
    assert!(store.meta.topic("orders").is_none());
    assert!(store.meta.assignments("orders").is_none());
}

#[test]
fn delete_of_a_missing_topic_is_404() {
    let mut store = Store::new();
    let error = store.apply(delete("orders")).unwrap_err();
    assert_eq!(
        (error.status(), error.to_string().as_str()),
        (404, "topic not found")
    );
}

#[test]
fn a_change_to_another_incarnation_is_topic_changed() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let stale = DeleteTopic {
        actor: Actor::SecurityOff,
        name: "orders".into(),
        expected_id: Some(IncarnationId::from_bits(1)),
    };
    let error = store.apply(Command::DeleteTopic(stale)).unwrap_err();
    assert_eq!(error.to_string(), "topic changed since it was read");
    assert_eq!(error.status(), 409);
}

#[test]
fn a_recreated_topic_gets_the_new_incarnation_id() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    store.ok(delete("orders"));
    let fresh = IncarnationId::from_bits(42);
    store.ok(Command::CreateTopic(CreateTopic {
        id: fresh.clone(),
        ..create("orders")
    }));
    assert_eq!(store.topic("orders").id, fresh);
}

#[test]
fn an_alter_without_fields_is_refused() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let refused = store.apply(Command::AlterTopic(alter("orders")));
    assert_eq!(refused, Err(MetastoreError::AlterEmpty));
}

#[test]
fn an_alter_of_a_missing_topic_is_404() {
    let mut store = Store::new();
    let command = AlterTopic {
        retention_ms: Some(0),
        ..alter("orders")
    };
    assert_eq!(
        store.apply(Command::AlterTopic(command)),
        Err(MetastoreError::TopicNotFound)
    );
}

#[test]
fn alter_retention_follows_the_floor_rules() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let low = AlterTopic {
        retention_ms: Some(1_000),
        ..alter("orders")
    };
    let refused = store.apply(Command::AlterTopic(low));
    assert_eq!(
        refused,
        Err(MetastoreError::RetentionBelowFloor {
            retention_ms: 1_000
        })
    );
    store.ok(Command::AlterTopic(AlterTopic {
        retention_ms: Some(0),
        ..alter("orders")
    }));
    assert_eq!(store.topic("orders").retention_ms, 0);
}

#[test]
fn alter_cap_zero_restores_the_default() {
    let mut store = Store::new();
    let custom = CreateTopic {
        max_in_flight_per_partition: Some(7),
        ..create("orders")
    };
    store.ok(Command::CreateTopic(custom));
    let reset = AlterTopic {
        max_in_flight_per_partition: Some(0),
        ..alter("orders")
    };
    store.ok(Command::AlterTopic(reset));
    assert_eq!(store.topic("orders").max_in_flight_per_partition, 1_024);
}

#[test]
fn alter_partitions_must_strictly_grow() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let same = AlterTopic {
        partitions: Some(3),
        ..alter("orders")
    };
    let refused = store.apply(Command::AlterTopic(same));
    assert_eq!(
        refused,
        Err(MetastoreError::PartitionsCannotShrink {
            current: 3,
            requested: 3
        })
    );
}

#[test]
fn alter_partitions_growth_adds_waiting_slots_and_keeps_owners() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(create_cmd("orders"));
    store.ok(assign("orders", &[(0, "n1")]));
    store.ok(Command::AlterTopic(AlterTopic {
        partitions: Some(5),
        ..alter("orders")
    }));
    assert_eq!(store.topic("orders").partitions, 5);
    assert_eq!(store.meta.owner("orders", 0), Some("n1"));
    assert_eq!(store.meta.assignments("orders").unwrap().len(), 5);
    assert_eq!(store.meta.owner("orders", 4), None);
}

#[test]
fn alter_partitions_stays_under_the_ceiling() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let huge = AlterTopic {
        partitions: Some(109),
        ..alter("orders")
    };
    let refused = store.apply(Command::AlterTopic(huge));
    assert_eq!(refused, Err(MetastoreError::PartitionsTooMany { max: 108 }));
}

#[test]
fn alter_keeps_earlier_groups_when_a_later_group_fails() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let command = AlterTopic {
        retention_ms: Some(7_200_000),
        max_in_flight_per_partition: Some(9),
        partitions: Some(2),
        ..alter("orders")
    };
    let refused = store.apply(Command::AlterTopic(command));
    assert!(matches!(
        refused,
        Err(MetastoreError::PartitionsCannotShrink { .. })
    ));
    assert_eq!(store.topic("orders").retention_ms, 7_200_000);
    assert_eq!(store.topic("orders").max_in_flight_per_partition, 9);
}

#[test]
fn create_counts_a_topic_change_and_a_placement_change() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let versions = store.meta.versions();
    assert_eq!((versions.topics, versions.assignments), (1, 1));
}

#[test]
fn an_entry_without_a_command_advances_only_the_applied_index() {
    let mut store = Store::new();
    store.ok(create_cmd("orders"));
    let before = store.meta.clone();
    store.meta.note_applied(ApplyContext { index: 10 });
    assert_eq!(store.meta.applied_index(), 10);
    assert_eq!(store.meta.versions(), before.versions());
    assert_eq!(store.meta.topic("orders"), before.topic("orders"));
}

#[test]
fn a_create_while_every_alive_node_drains_is_503() {
    let mut store = Store::new();
    store.member("n1");
    let drain = SetDraining {
        id: "n1".into(),
        draining: true,
    };
    store.ok(Command::SetDraining(drain));
    let error = store.apply(create_cmd("orders")).unwrap_err();
    assert_eq!(
        (error.status(), error),
        (503, MetastoreError::AllNodesDraining)
    );
}

#[test]
fn a_create_with_no_alive_node_succeeds_and_its_partitions_wait() {
    let mut store = Store::new();
    store.member("n1");
    store.ok(Command::MarkDead(MarkDead {
        id: "n1".into(),
        observed_heartbeat_ms: 1_000,
    }));
    store.ok(create_cmd("orders"));
    assert_eq!(store.meta.owner("orders", 0), None);
}

#[test]
fn a_create_succeeds_while_one_alive_node_does_not_drain() {
    let mut store = Store::new();
    store.member("n1");
    store.member("n2");
    store.ok(Command::SetDraining(SetDraining {
        id: "n1".into(),
        draining: true,
    }));
    store.ok(create_cmd("orders"));
}
