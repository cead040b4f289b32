//! Users, grants and the authorization re-check (spec §1.8).

use super::*;

fn set_grants(actor: Actor, name: &str, grants: Vec<Grant>) -> Command {
    Command::SetGrants(SetGrants {
        actor,
        username: name.into(),
        grants,
        at_ms: 9,
    })
}

fn set_password(actor: Actor, name: &str, checked: Option<PasswordHash>) -> Command {
    Command::SetPassword(SetPassword {
        actor,
        username: name.into(),
        password_hash: hash(20),
        checked_hash: checked,
        at_ms: 9,
    })
}

fn delete_user(actor: Actor, name: &str) -> Command {
    Command::DeleteUser(DeleteUser {
        actor,
        username: name.into(),
    })
}

fn forbidden(result: Result<Outcome, MetastoreError>) -> String {
    match result {
        Err(error @ MetastoreError::Forbidden { .. }) => {
            assert_eq!(error.status(), 403);
            error.to_string()
        }
        other => panic!("expected 403, got {other:?}"),
    }
}

#[test]
fn the_root_admin_is_seeded_once() {
    let mut store = Store::new();
    store.root();
    let again = SeedAdmin {
        username: "other".into(),
        password_hash: hash(3),
        at_ms: 2,
    };
    assert_eq!(
        store.apply(Command::SeedAdmin(again)),
        Ok(Outcome::Unchanged)
    );
    assert!(store.meta.user("admin").unwrap().root);
    assert!(store.meta.user("other").is_none());
}

#[test]
fn an_admin_creates_a_user_with_grants_and_timestamps() {
    let mut store = Store::new();
    store.user("bob", vec![grant(GrantAction::Produce, &["orders"])]);
    let bob = store.meta.user("bob").unwrap();
    assert_eq!(bob.grants, vec![grant(GrantAction::Produce, &["orders"])]);
    assert_eq!(
        (bob.created_at_ms, bob.updated_at_ms, bob.root),
        (5, 5, false)
    );
}

#[test]
fn a_username_outside_the_rules_is_refused() {
    let mut store = Store::new();
    let root = store.root();
    for name in ["", ".", "..", "a b", "a/b", &"u".repeat(65)] {
        let refused = store.apply(create_user(root.clone(), name, vec![]));
        assert!(
            matches!(refused, Err(MetastoreError::UsernameInvalid { .. })),
            "{name:?}"
        );
    }
    store.ok(create_user(root, &"u".repeat(64), vec![]));
}

#[test]
fn an_existing_username_is_409() {
    let mut store = Store::new();
    store.user("bob", vec![]);
    let error = store
        .apply(create_user(Actor::User("admin".into()), "bob", vec![]))
        .unwrap_err();
    assert_eq!((error.status(), error), (409, MetastoreError::UserExists));
}

#[test]
fn a_non_admin_cannot_create_users() {
    let mut store = Store::new();
    let bob = store.user("bob", vec![grant(GrantAction::Create, &["*"])]);
    let text = forbidden(store.apply(create_user(bob, "eve", vec![])));
    assert_eq!(text, "admin required");
}

#[test]
fn only_root_gives_the_admin_grant() {
    let mut store = Store::new();
    let boss = store.user("boss", vec![grant(GrantAction::Admin, &[])]);
    let admin_grant = vec![grant(GrantAction::Admin, &[])];
    let text = forbidden(store.apply(create_user(boss.clone(), "eve", admin_grant.clone())));
    assert_eq!(text, "only the root admin may give the admin grant");
    store.ok(create_user(
        boss,
        "eve",
        vec![grant(GrantAction::Consume, &["*"])],
    ));
}

#[test]
fn admin_grants_take_no_patterns_and_others_need_one() {
    let mut store = Store::new();
    let root = store.root();
    for bad in [
        grant(GrantAction::Admin, &["x"]),
        grant(GrantAction::Produce, &[]),
    ] {
        let refused = store.apply(create_user(root.clone(), "eve", vec![bad]));
        assert!(matches!(refused, Err(MetastoreError::GrantInvalid { .. })));
    }
}

#[test]
fn a_star_anywhere_but_the_end_of_a_pattern_is_400() {
    let mut store = Store::new();
    let root = store.root();
    for pattern in ["a*b", "*a", "a**", ""] {
        let bad = grant(GrantAction::Consume, &[pattern]);
        let error = store
            .apply(create_user(root.clone(), "eve", vec![bad]))
            .unwrap_err();
        assert_eq!(error.status(), 400, "{pattern:?}");
    }
}

#[test]
fn a_pattern_is_at_most_255_name_characters() {
    let mut store = Store::new();
    let root = store.root();
    let long = "p".repeat(256);
    let refused = store.apply(create_user(
        root.clone(),
        "eve",
        vec![grant(GrantAction::Consume, &[&long])],
    ));
    assert!(matches!(refused, Err(MetastoreError::GrantInvalid { .. })));
    let fits = format!("{}*", "p".repeat(255));
    store.ok(create_user(
        root,
        "eve",
        vec![grant(GrantAction::Consume, &[&fits])],
    ));
}

#[test]
fn patterns_match_exactly_by_prefix_or_everything() {
    assert!(pattern_matches("*", "anything"));
    assert!(pattern_matches("orders.*", "orders.eu"));
    assert!(!pattern_matches("orders.*", "order"));
    assert!(pattern_matches("orders", "orders"));
    assert!(!pattern_matches("orders", "orders2"));
}

#[test]
fn root_cannot_be_deleted() {
    let mut store = Store::new();
    let boss = store.user("boss", vec![grant(GrantAction::Admin, &[])]);
    assert_eq!(
        forbidden(store.apply(delete_user(boss, "admin"))),
        "cannot delete the root admin"
    );
}

#[test]
fn an_admin_cannot_delete_itself() {
    let mut store = Store::new();
    let boss = store.user("boss", vec![grant(GrantAction::Admin, &[])]);
    assert_eq!(
        forbidden(store.apply(delete_user(boss, "boss"))),
        "cannot delete yourself"
    );
}

#[test]
fn deleting_a_missing_user_is_404() {
    let mut store = Store::new();
    let root = store.root();
    assert_eq!(
        store.apply(delete_user(root, "ghost")),
        Err(MetastoreError::UserNotFound)
    );
}

#[test]
fn an_admin_deletes_a_user() {
    let mut store = Store::new();
    store.user("bob", vec![]);
    store.ok(delete_user(Actor::User("admin".into()), "bob"));
    assert!(store.meta.user("bob").is_none());
}

#[test]
fn a_deleted_user_can_no_longer_act() {
    let mut store = Store::new();
    let bob = store.user("bob", vec![grant(GrantAction::Create, &["*"])]);
    store.ok(delete_user(Actor::User("admin".into()), "bob"));
    let command = CreateTopic {
        actor: bob,
        ..create("orders")
    };
    assert_eq!(
        forbidden(store.apply(Command::CreateTopic(command))),
        "your user no longer exists"
    );
}

#[test]
fn set_grants_replaces_all_and_empty_revokes_all() {
    let mut store = Store::new();
    store.user("bob", vec![grant(GrantAction::Produce, &["a"])]);
    let root = Actor::User("admin".into());
    store.ok(set_grants(
        root.clone(),
        "bob",
        vec![grant(GrantAction::Consume, &["b*"])],
    ));
    assert_eq!(
        store.meta.user("bob").unwrap().grants,
        vec![grant(GrantAction::Consume, &["b*"])]
    );
    store.ok(set_grants(root, "bob", vec![]));
    assert!(store.meta.user("bob").unwrap().grants.is_empty());
    assert_eq!(store.meta.user("bob").unwrap().updated_at_ms, 9);
}

#[test]
fn an_admin_cannot_change_its_own_grants() {
    let mut store = Store::new();
    let boss = store.user("boss", vec![grant(GrantAction::Admin, &[])]);
    let text = forbidden(store.apply(set_grants(boss, "boss", vec![])));
    assert_eq!(text, "cannot change your own grants");
}

#[test]
fn nobody_changes_the_root_grants() {
    let mut store = Store::new();
    let boss = store.user("boss", vec![grant(GrantAction::Admin, &[])]);
    let text = forbidden(store.apply(set_grants(boss, "admin", vec![])));
    assert_eq!(text, "cannot change the root admin's grants");
}

#[test]
fn only_root_grants_admin_to_an_existing_user() {
    let mut store = Store::new();
    let boss = store.user("boss", vec![grant(GrantAction::Admin, &[])]);
    store.user("bob", vec![]);
    let admin_grant = vec![grant(GrantAction::Admin, &[])];
    forbidden(store.apply(set_grants(boss, "bob", admin_grant.clone())));
    store.ok(set_grants(Actor::User("admin".into()), "bob", admin_grant));
    assert!(store.meta.user("bob").unwrap().is_admin());
}

#[test]
fn a_non_admin_changes_its_own_password_after_the_current_one_was_checked() {
    let mut store = Store::new();
    let bob = store.user("bob", vec![]);
    store.ok(set_password(bob, "bob", Some(hash(2))));
    assert_eq!(store.meta.user("bob").unwrap().password_hash, hash(20));
}

#[test]
fn a_non_admin_without_a_checked_current_password_is_refused() {
    let mut store = Store::new();
    let bob = store.user("bob", vec![]);
    let text = forbidden(store.apply(set_password(bob, "bob", None)));
    assert_eq!(
        text,
        "current_password required to change your own password"
    );
}

#[test]
fn a_password_changed_since_the_check_is_409() {
    let mut store = Store::new();
    let bob = store.user("bob", vec![]);
    let error = store
        .apply(set_password(bob, "bob", Some(hash(7))))
        .unwrap_err();
    assert_eq!(
        (error.status(), error),
        (409, MetastoreError::PasswordChanged)
    );
}

#[test]
fn a_non_admin_cannot_change_another_password() {
    let mut store = Store::new();
    let bob = store.user("bob", vec![]);
    store.user("eve", vec![]);
    forbidden(store.apply(set_password(bob, "eve", Some(hash(2)))));
}

#[test]
fn an_admin_changes_another_password_without_the_current_one() {
    let mut store = Store::new();
    let boss = store.user("boss", vec![grant(GrantAction::Admin, &[])]);
    store.user("bob", vec![]);
    store.ok(set_password(boss, "bob", None));
}

#[test]
fn only_root_changes_the_root_password() {
    let mut store = Store::new();
    let boss = store.user("boss", vec![grant(GrantAction::Admin, &[])]);
    let text = forbidden(store.apply(set_password(boss, "admin", None)));
    assert_eq!(
        text,
        "only the root admin may change the root admin's password"
    );
    store.ok(set_password(Actor::User("admin".into()), "admin", None));
}

#[test]
fn a_password_must_be_1_to_72_bytes() {
    assert_eq!(check_password(b""), Err(MetastoreError::PasswordLength));
    assert_eq!(
        check_password(&[b'p'; 73]),
        Err(MetastoreError::PasswordLength)
    );
    assert_eq!(check_password(&[b'p'; 72]), Ok(()));
    let error = hash_password(&[b'p'; 73], 4, [0; 16]).unwrap_err();
    assert_eq!(error.status(), 400);
}

#[test]
fn a_hash_verifies_its_password_only() {
    let hash = hash_password(b"s3cret", 4, [1; 16]).unwrap();
    assert!(verify_password(b"s3cret", &hash));
    assert!(!verify_password(b"s3creT", &hash));
    assert!(!verify_password(&[b'p'; 73], &hash));
}

#[test]
fn the_same_salt_gives_the_same_hash() {
    let first = hash_password(b"s3cret", 4, [1; 16]).unwrap();
    assert_eq!(first, hash_password(b"s3cret", 4, [1; 16]).unwrap());
    assert_ne!(first, hash_password(b"s3cret", 4, [2; 16]).unwrap());
}

#[test]
fn a_password_hash_never_prints() {
    assert_eq!(format!("{:?}", hash(1)), "PasswordHash(<redacted>)");
}

#[test]
fn the_admin_password_comes_from_the_environment_or_is_generated() {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let given = admin_password(Some("from-env".into()), &mut rng);
    assert_eq!(
        (given.password.as_str(), given.generated),
        ("from-env", false)
    );
    let generated = admin_password(None, &mut rng);
    assert!(generated.generated);
    assert_eq!(generated.password.len(), GENERATED_PASSWORD_CHARS);
    assert!(admin_password(Some(String::new()), &mut rng).generated);
}

#[test]
fn creating_a_topic_needs_a_create_grant_matching_its_name() {
    let mut store = Store::new();
    let bob = store.user("bob", vec![grant(GrantAction::Create, &["bob.*"])]);
    let outside = CreateTopic {
        actor: bob.clone(),
        ..create("orders")
    };
    let text = forbidden(store.apply(Command::CreateTopic(outside)));
    assert_eq!(text, "no create grant for this topic name");
    store.ok(Command::CreateTopic(CreateTopic {
        actor: bob,
        ..create("bob.orders")
    }));
}

#[test]
fn a_produce_grant_does_not_allow_create() {
    let mut store = Store::new();
    let bob = store.user("bob", vec![grant(GrantAction::Produce, &["*"])]);
    let command = CreateTopic {
        actor: bob,
        ..create("orders")
    };
    forbidden(store.apply(Command::CreateTopic(command)));
}

#[test]
fn only_the_owner_or_an_admin_changes_a_topic() {
    let mut store = Store::new();
    let bob = store.user("bob", vec![grant(GrantAction::Create, &["*"])]);
    let eve = store.user("eve", vec![grant(GrantAction::Create, &["*"])]);
    store.ok(Command::CreateTopic(CreateTopic {
        actor: bob.clone(),
        ..create("orders")
    }));
    let by_eve = DeleteTopic {
        actor: eve,
        name: "orders".into(),
        expected_id: None,
    };
    let text = forbidden(store.apply(Command::DeleteTopic(by_eve)));
    assert_eq!(
        text,
        "only the topic's owner or an admin may change this topic"
    );
    let by_bob = AlterTopic {
        actor: bob,
        retention_ms: Some(0),
        ..alter("orders")
    };
    store.ok(Command::AlterTopic(by_bob));
    let by_root = DeleteTopic {
        actor: Actor::User("admin".into()),
        name: "orders".into(),
        expected_id: None,
    };
    store.ok(Command::DeleteTopic(by_root));
}

#[test]
fn attach_needs_both_topics_managed_and_detach_either() {
    let mut store = Store::new();
    let bob = store.user("bob", vec![grant(GrantAction::Create, &["*"])]);
    let eve = store.user("eve", vec![grant(GrantAction::Create, &["*"])]);
    store.ok(Command::CreateTopic(CreateTopic {
        actor: bob.clone(),
        ..create("parent")
    }));
    store.ok(Command::CreateTopic(CreateTopic {
        actor: eve.clone(),
        ..create("child")
    }));
    let by_bob = AttachChild {
        actor: bob.clone(),
        ..attach("parent", "child")
    };
    forbidden(store.apply(Command::AttachChild(by_bob)));
    let by_root = AttachChild {
        actor: Actor::User("admin".into()),
        ..attach("parent", "child")
    };
    store.ok(Command::AttachChild(by_root));
    let by_eve = DetachChild {
        actor: eve,
        parent: "parent".into(),
        child: "child".into(),
    };
    store.ok(Command::DetachChild(by_eve));
}

#[test]
fn a_create_under_a_parent_needs_the_parent_managed() {
    let mut store = Store::new();
    let bob = store.user("bob", vec![grant(GrantAction::Create, &["*"])]);
    store.ok(create_cmd("parent"));
    let command = CreateTopic {
        actor: bob,
        parent: Some(link("parent")),
        ..create("child")
    };
    forbidden(store.apply(Command::CreateTopic(command)));
}
