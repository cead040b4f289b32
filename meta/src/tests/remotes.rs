//! Remotes and remote children (spec §1.10, §1.4 v3.2).

use super::*;

/// Key `version` with id `key_id`, minted at `version` seconds.
fn key(version: u32, key_id: &str) -> RemoteKey {
    RemoteKey {
        version,
        key_id: key_id.into(),
        salt: vec![7; 32],
        created_at_ms: Some(u64::from(version) * 1_000),
    }
}

/// `key` as a proposer saw it that says its mint time is `created_at_ms`.
fn minted(key: &RemoteKey, created_at_ms: Option<u64>) -> RemoteKey {
    RemoteKey {
        created_at_ms,
        ..key.clone()
    }
}

fn sealed(key: &RemoteKey, bytes: &[u8]) -> SealedPassword {
    SealedPassword {
        key_version: key.version,
        key_id: key.key_id.clone(),
        sealed: bytes.to_vec(),
        fingerprint: "fp".into(),
        set_at_ms: 5,
        set_by: "admin".into(),
    }
}

fn remote(name: &str, key: &RemoteKey) -> Remote {
    Remote {
        name: name.into(),
        id: RemoteId::from_bits(name.len() as u64 + 1),
        url: format!("https://{name}.example:443"),
        username: "replicator".into(),
        password: sealed(key, b"sealed-bytes"),
        credential_version: 1,
        ca_pem: None,
        limits: RemoteLimits::default(),
        revision: 1,
        created_at_ms: 5,
        created_by: "admin".into(),
    }
}

fn create_remote(actor: &Actor, name: &str, key: &RemoteKey) -> Command {
    Command::CreateRemote(CreateRemote {
        actor: actor.clone(),
        remote: remote(name, key),
        key: key.clone(),
    })
}

fn link_to(remote: &Remote, remote_topic: &str, lanes: u8) -> RemoteLink {
    RemoteLink {
        remote: remote.name.clone(),
        remote_id: remote.id.clone(),
        remote_topic: remote_topic.into(),
        target_id: None,
        lanes,
        from: RemoteFrom::Attach,
        paused: None,
        skip: Default::default(),
        created_at_ms: 9,
    }
}

fn attach_remote(actor: &Actor, parent: &str, child: &str, link: RemoteLink) -> AttachRemoteChild {
    AttachRemoteChild {
        actor: actor.clone(),
        parent: parent.into(),
        parent_id: id_of(parent),
        child: child.into(),
        child_id: id_of(child),
        attach_epoch: AttachEpoch::from_bits(3),
        attach_offsets: vec![0, 0, 0],
        link,
    }
}

/// Root, a remote `dr` and a parent `orders` (3 partitions, 7 days).
fn with_remote() -> (Store, Actor, Remote) {
    let mut store = Store::new();
    let root = store.root();
    let key = key(1, "k1");
    store.ok(create_remote(&root, "dr", &key));
    store.ok(create_cmd("orders"));
    let remote = store.meta.remote("dr").unwrap().clone();
    (store, root, remote)
}

#[test]
fn remotes_need_security_on_and_an_admin() {
    let mut store = Store::new();
    let key = key(1, "k1");
    assert_eq!(
        store.apply(create_remote(&Actor::SecurityOff, "dr", &key)),
        Err(MetastoreError::RemotesRequireSecurity)
    );
    let bob = store.user("bob", vec![]);
    let refused = store.apply(create_remote(&bob, "dr", &key)).unwrap_err();
    assert_eq!(refused.status(), 403);
    assert!(store.meta.remote("dr").is_none());
}

#[test]
fn the_first_remote_sets_the_cluster_key_and_later_ones_must_use_it() {
    let mut store = Store::new();
    let root = store.root();
    store.ok(create_remote(&root, "dr", &key(1, "k1")));
    assert_eq!(store.meta.remote_key(), Some(&key(1, "k1")));
    assert_eq!(
        store.apply(create_remote(&root, "other", &key(1, "elsewhere"))),
        Err(MetastoreError::RemoteKeyChanged)
    );
    store.ok(create_remote(&root, "other", &key(1, "k1")));
    assert_eq!(store.meta.remotes().count(), 2);
}

#[test]
fn a_copy_of_the_cluster_key_is_the_same_key_whatever_its_mint_time() {
    let mut store = Store::new();
    let root = store.root();
    let k1 = key(1, "k1");
    store.ok(create_remote(&root, "dr", &k1));
    // A proposer of an older build sends the key without its time; another
    // may hold a different one. Neither is a key change, and the cluster
    // key keeps the time it was minted at.
    for copy in [minted(&k1, None), minted(&k1, Some(99_000))] {
        let name = format!("r{}", store.meta.remotes().count());
        store.ok(create_remote(&root, &name, &copy));
        store.ok(Command::UpdateRemote(UpdateRemote {
            password: Some(sealed(&copy, b"new")),
            key: Some(copy.clone()),
            ..update(&root, "dr")
        }));
    }
    assert_eq!(store.meta.remote_key(), Some(&k1));
    assert_eq!(store.meta.remote("dr").unwrap().credential_version, 3);
}

#[test]
fn a_first_key_without_a_mint_time_takes_its_passwords_set_time() {
    let mut store = Store::new();
    let root = store.root();
    let older = minted(&key(1, "k1"), None);
    store.ok(create_remote(&root, "dr", &older));
    let set_at_ms = store.meta.remote("dr").unwrap().password.set_at_ms;
    assert_eq!(
        store.meta.remote_key().unwrap().created_at_ms,
        Some(set_at_ms)
    );
}

#[test]
fn a_remote_name_is_checked_and_unique() {
    let mut store = Store::new();
    let root = store.root();
    let key = key(1, "k1");
    for bad in ["", "Dr", "1dr", "dr_1", &"a".repeat(64)] {
        let refused = store.apply(create_remote(&root, bad, &key)).unwrap_err();
        assert_eq!(refused.status(), 400, "{bad:?}");
    }
    store.ok(create_remote(&root, &"a".repeat(63), &key));
    store.ok(create_remote(&root, "dr-2", &key));
    assert_eq!(
        store.apply(create_remote(&root, "dr-2", &key)),
        Err(MetastoreError::RemoteExists)
    );
}

#[test]
fn a_cluster_holds_at_most_64_remotes() {
    let mut store = Store::new();
    let root = store.root();
    let key = key(1, "k1");
    for n in 0..64 {
        store.ok(create_remote(&root, &format!("r{n}"), &key));
    }
    assert_eq!(
        store.apply(create_remote(&root, "r64", &key)),
        Err(MetastoreError::RemoteLimit)
    );
}

fn update(actor: &Actor, name: &str) -> UpdateRemote {
    UpdateRemote {
        actor: actor.clone(),
        name: name.into(),
        expected_revision: None,
        url: None,
        username: None,
        password: None,
        key: None,
        ca_pem: None,
        limits: None,
    }
}

#[test]
fn a_new_url_needs_the_password_again_and_bumps_the_credential() {
    let (mut store, root, _) = with_remote();
    let moved = UpdateRemote {
        url: Some("https://dr2.example".into()),
        ..update(&root, "dr")
    };
    assert_eq!(
        store.apply(Command::UpdateRemote(moved.clone())),
        Err(MetastoreError::RemotePasswordRequired)
    );
    let key = key(1, "k1");
    store.ok(Command::UpdateRemote(UpdateRemote {
        password: Some(sealed(&key, b"new")),
        key: Some(key),
        ..moved
    }));
    let remote = store.meta.remote("dr").unwrap();
    assert_eq!(remote.url, "https://dr2.example");
    assert_eq!(remote.credential_version, 2);
    assert_eq!(remote.revision, 2);
    assert_eq!(remote.password.sealed, b"new");
}

#[test]
fn new_limits_alone_need_no_password_and_keep_the_credential() {
    let (mut store, root, _) = with_remote();
    let limits = RemoteLimits {
        max_in_flight: 4,
        ..RemoteLimits::default()
    };
    store.ok(Command::UpdateRemote(UpdateRemote {
        limits: Some(limits),
        expected_revision: Some(1),
        ..update(&root, "dr")
    }));
    let remote = store.meta.remote("dr").unwrap();
    assert_eq!(remote.limits.max_in_flight, 4);
    assert_eq!(remote.credential_version, 1);
    assert_eq!(
        store.apply(Command::UpdateRemote(UpdateRemote {
            limits: Some(RemoteLimits::default()),
            expected_revision: Some(1),
            ..update(&root, "dr")
        })),
        Err(MetastoreError::RemoteRevisionConflict {
            current: 2,
            expected: 1
        })
    );
    assert_eq!(
        store.apply(Command::UpdateRemote(update(&root, "dr"))),
        Ok(Outcome::Unchanged)
    );
}

#[test]
fn a_remote_with_links_is_deleted_only_with_force() {
    let (mut store, root, remote) = with_remote();
    let attach = attach_remote(&root, "orders", "orders-dr", link_to(&remote, "orders", 2));
    store.ok(Command::AttachRemoteChild(attach));
    let delete = |force| {
        Command::DeleteRemote(DeleteRemote {
            actor: root.clone(),
            name: "dr".into(),
            force,
        })
    };
    assert_eq!(
        store.apply(delete(false)),
        Err(MetastoreError::RemoteInUse {
            links: vec!["orders-dr".into()]
        })
    );
    store.ok(delete(true));
    assert!(store.meta.remote("dr").is_none());
    // The link stays; its cursor reports the remote missing.
    assert_eq!(store.meta.remote_link("orders-dr").unwrap().remote, "dr");
}

#[test]
fn resealing_moves_to_the_next_key_and_keeps_newer_credentials() {
    let (mut store, root, _) = with_remote();
    let old = key(1, "k1");
    store.ok(create_remote(&root, "other", &old));
    let next = key(2, "k2");
    store.ok(Command::ResealRemotes(ResealRemotes {
        actor: root.clone(),
        key: next.clone(),
        passwords: vec![
            ResealedPassword {
                name: "dr".into(),
                credential_version: 1,
                password: sealed(&next, b"resealed"),
            },
            // Changed since the proposer opened it: keeps its own.
            ResealedPassword {
                name: "other".into(),
                credential_version: 7,
                password: sealed(&next, b"stale"),
            },
        ],
    }));
    assert_eq!(store.meta.remote_key(), Some(&next));
    assert_eq!(store.meta.remote_key().unwrap().created_at_ms, Some(2_000));
    let dr = store.meta.remote("dr").unwrap();
    assert_eq!((dr.password.key_version, dr.credential_version), (2, 1));
    assert_eq!(dr.password.sealed, b"resealed");
    assert_eq!(store.meta.remote("other").unwrap().password.key_version, 1);
    // A key that skips a version, or keeps the id under a new version, is
    // no successor.
    for bad in [key(4, "k4"), key(3, "k2")] {
        let command = Command::ResealRemotes(ResealRemotes {
            actor: root.clone(),
            key: bad,
            passwords: vec![],
        });
        assert_eq!(store.apply(command), Err(MetastoreError::RemoteKeyChanged));
    }
}

#[test]
fn resealing_under_the_same_key_keeps_its_mint_time() {
    let (mut store, root, _) = with_remote();
    let k1 = key(1, "k1");
    let again = Command::ResealRemotes(ResealRemotes {
        actor: root.clone(),
        key: minted(&k1, Some(50_000)),
        passwords: vec![],
    });
    assert_eq!(store.apply(again), Ok(Outcome::Unchanged));
    assert_eq!(store.meta.remote_key(), Some(&k1));
    // A next key proposed by an older build has no time: unknown.
    let next = minted(&key(2, "k2"), None);
    store.ok(Command::ResealRemotes(ResealRemotes {
        actor: root.clone(),
        key: next.clone(),
        passwords: vec![],
    }));
    assert_eq!(store.meta.remote_key(), Some(&next));
}

#[test]
fn attaching_a_remote_child_creates_a_stub_without_partitions() {
    let (mut store, root, remote) = with_remote();
    let attach = attach_remote(&root, "orders", "orders-dr", link_to(&remote, "orders", 2));
    store.ok(Command::AttachRemoteChild(attach));
    let stub = store.topic("orders-dr");
    assert_eq!(stub.partitions, 0);
    assert_eq!(stub.role(), Role::Child);
    assert_eq!(stub.parent.as_ref().unwrap().attach_offsets, vec![0, 0, 0]);
    assert_eq!(store.meta.assignments("orders-dr"), Some(&[][..]));
    assert_eq!(store.topic("orders").children, vec!["orders-dr".to_owned()]);
    let link = store.meta.remote_link("orders-dr").unwrap();
    assert_eq!((link.lanes, link.remote_topic.as_str()), (2, "orders"));
}

#[test]
fn a_remote_child_is_refused_what_the_spec_refuses() {
    let (mut store, root, remote) = with_remote();
    store.ok(create_cmd("taken"));
    let cases = [
        (
            "taken",
            link_to(&remote, "a", 1),
            MetastoreError::TopicExists,
        ),
        (
            "s1",
            link_to(&remote, "a", 0),
            MetastoreError::RemoteLanesInvalid,
        ),
        (
            "s2",
            link_to(&remote, "a", 9),
            MetastoreError::RemoteLanesInvalid,
        ),
        (
            "s3",
            RemoteLink {
                remote: "nope".into(),
                ..link_to(&remote, "a", 1)
            },
            MetastoreError::RemoteNotFound,
        ),
        (
            "s4",
            RemoteLink {
                remote_id: RemoteId::from_bits(999),
                ..link_to(&remote, "a", 1)
            },
            MetastoreError::RemoteNotFound,
        ),
    ];
    for (child, link, error) in cases {
        let attach = attach_remote(&root, "orders", child, link);
        assert_eq!(store.apply(Command::AttachRemoteChild(attach)), Err(error));
    }
    let security_off = attach_remote(
        &Actor::SecurityOff,
        "orders",
        "s5",
        link_to(&remote, "a", 1),
    );
    assert_eq!(
        store.apply(Command::AttachRemoteChild(security_off)),
        Err(MetastoreError::RemotesRequireSecurity)
    );
}

#[test]
fn one_link_per_remote_topic() {
    let (mut store, root, remote) = with_remote();
    store.ok(create_cmd("payments"));
    let first = attach_remote(&root, "orders", "orders-dr", link_to(&remote, "shared", 1));
    store.ok(Command::AttachRemoteChild(first));
    let second = attach_remote(
        &root,
        "payments",
        "payments-dr",
        link_to(&remote, "shared", 1),
    );
    assert_eq!(
        store.apply(Command::AttachRemoteChild(second)),
        Err(MetastoreError::RemoteTopicLinked {
            remote: "dr".into(),
            remote_topic: "shared".into(),
            child: "orders-dr".into(),
        })
    );
}

#[test]
fn a_parent_holds_at_most_16_remote_children() {
    let (mut store, root, remote) = with_remote();
    for n in 0..16 {
        let attach = attach_remote(
            &root,
            "orders",
            &format!("s{n}"),
            link_to(&remote, &format!("t{n}"), 1),
        );
        store.ok(Command::AttachRemoteChild(attach));
    }
    let attach = attach_remote(&root, "orders", "s16", link_to(&remote, "t16", 1));
    assert_eq!(
        store.apply(Command::AttachRemoteChild(attach)),
        Err(MetastoreError::RemoteChildLimit)
    );
}

#[test]
fn a_parent_with_remote_children_keeps_records_a_day_or_forever() {
    let (mut store, root, remote) = with_remote();
    store.ok(Command::CreateTopic(CreateTopic {
        retention_ms: Some(3_600_000),
        ..create("short")
    }));
    let attach = attach_remote(&root, "short", "short-dr", link_to(&remote, "short", 1));
    assert_eq!(
        store.apply(Command::AttachRemoteChild(attach)),
        Err(MetastoreError::RemoteParentRetention {
            retention_ms: 3_600_000
        })
    );
    let attach = attach_remote(&root, "orders", "orders-dr", link_to(&remote, "orders", 1));
    store.ok(Command::AttachRemoteChild(attach));
    let shorten = AlterTopic {
        retention_ms: Some(7_200_000),
        ..alter("orders")
    };
    assert_eq!(
        store.apply(Command::AlterTopic(shorten)),
        Err(MetastoreError::RemoteParentRetention {
            retention_ms: 7_200_000
        })
    );
    let forever = AlterTopic {
        retention_ms: Some(0),
        ..alter("orders")
    };
    store.ok(Command::AlterTopic(forever));
}

#[test]
fn a_stub_takes_no_alter_and_no_local_children() {
    let (mut store, root, remote) = with_remote();
    let attach = attach_remote(&root, "orders", "orders-dr", link_to(&remote, "orders", 1));
    store.ok(Command::AttachRemoteChild(attach));
    let grow = AlterTopic {
        partitions: Some(9),
        ..alter("orders-dr")
    };
    assert_eq!(
        store.apply(Command::AlterTopic(grow)),
        Err(MetastoreError::RemoteStub {
            name: "orders-dr".into(),
            remote: "dr".into()
        })
    );
    store.ok(create_cmd("local"));
    let refused = store
        .apply(Command::AttachChild(attach_local("orders-dr", "local")))
        .unwrap_err();
    assert_eq!(refused.status(), 409);
}

fn attach_local(parent: &str, child: &str) -> AttachChild {
    AttachChild {
        attach_offsets: vec![],
        ..attach(parent, child)
    }
}

#[test]
fn detaching_or_deleting_a_stub_or_its_parent_removes_stub_and_link() {
    let (mut store, root, remote) = with_remote();
    let attach = |child: &str, topic: &str| {
        Command::AttachRemoteChild(attach_remote(
            &root,
            "orders",
            child,
            link_to(&remote, topic, 1),
        ))
    };
    store.ok(attach("a", "ta"));
    store.ok(attach("b", "tb"));
    store.ok(attach("c", "tc"));
    store.ok(detach("orders", "a"));
    assert!(store.meta.topic("a").is_none());
    assert!(store.meta.remote_link("a").is_none());
    store.ok(delete("b"));
    assert!(store.meta.remote_link("b").is_none());
    assert_eq!(store.topic("orders").children, vec!["c".to_owned()]);
    store.ok(delete("orders"));
    assert!(store.meta.topic("c").is_none());
    assert_eq!(store.meta.remote_links().count(), 0);
}

#[test]
fn pause_resume_and_skip_change_the_link() {
    let (mut store, root, remote) = with_remote();
    let attach = attach_remote(&root, "orders", "orders-dr", link_to(&remote, "orders", 1));
    store.ok(Command::AttachRemoteChild(attach));
    store.ok(Command::PauseRemoteChild(PauseRemoteChild {
        actor: root.clone(),
        child: "orders-dr".into(),
        reason: "target maintenance".into(),
        at_ms: 77,
    }));
    let paused = store
        .meta
        .remote_link("orders-dr")
        .unwrap()
        .paused
        .clone()
        .unwrap();
    assert_eq!(
        (paused.reason.as_str(), paused.at_ms, paused.by.as_str()),
        ("target maintenance", 77, "admin")
    );
    let bad_reason = PauseRemoteChild {
        actor: root.clone(),
        child: "orders-dr".into(),
        reason: "a\u{7}".into(),
        at_ms: 78,
    };
    assert_eq!(
        store.apply(Command::PauseRemoteChild(bad_reason)),
        Err(MetastoreError::PauseReasonInvalid)
    );
    let resume = ResumeRemoteChild {
        actor: root.clone(),
        child: "orders-dr".into(),
        target_id: Some("abc".into()),
    };
    store.ok(Command::ResumeRemoteChild(resume.clone()));
    let link = store.meta.remote_link("orders-dr").unwrap();
    assert!(link.paused.is_none());
    assert_eq!(link.target_id.as_deref(), Some("abc"));
    assert_eq!(
        store.apply(Command::ResumeRemoteChild(resume)),
        Ok(Outcome::Unchanged)
    );
    let skip = |partition, offset| {
        Command::SkipRemoteRecord(SkipRemoteRecord {
            actor: root.clone(),
            child: "orders-dr".into(),
            partition,
            offset,
        })
    };
    store.ok(skip(1, 42));
    assert!(store.meta.remote_link("orders-dr").unwrap().skips(1, 42));
    assert_eq!(store.apply(skip(1, 42)), Ok(Outcome::Unchanged));
    assert_eq!(
        store.apply(skip(3, 1)),
        Err(MetastoreError::PartitionOutOfRange { partition: 3 })
    );
    let not_remote = Command::PauseRemoteChild(PauseRemoteChild {
        actor: root.clone(),
        child: "orders".into(),
        reason: String::new(),
        at_ms: 1,
    });
    assert_eq!(
        store.apply(not_remote),
        Err(MetastoreError::NotRemoteChild {
            name: "orders".into()
        })
    );
}

#[test]
fn a_partition_skips_at_most_4000_records() {
    let (mut store, root, remote) = with_remote();
    let attach = attach_remote(&root, "orders", "orders-dr", link_to(&remote, "orders", 1));
    store.ok(Command::AttachRemoteChild(attach));
    let skip = |offset| {
        Command::SkipRemoteRecord(SkipRemoteRecord {
            actor: root.clone(),
            child: "orders-dr".into(),
            partition: 0,
            offset,
        })
    };
    for offset in 0..4_000 {
        store.ok(skip(offset));
    }
    assert_eq!(
        store.apply(skip(4_000)),
        Err(MetastoreError::SkipLimit { partition: 0 })
    );
}

#[test]
fn remotes_and_links_survive_both_state_encodings() {
    let (mut store, root, remote) = with_remote();
    let attach = attach_remote(&root, "orders", "orders-dr", link_to(&remote, "orders", 2));
    store.ok(Command::AttachRemoteChild(attach));
    store.ok(skip_cmd(&root));
    let binary = codec::decode_state(codec::encode_state(&store.meta)).unwrap();
    assert_eq!(binary, store.meta);
    let json: Metastore =
        serde_json::from_str(&serde_json::to_string(&store.meta).unwrap()).unwrap();
    assert_eq!(json, store.meta);
    assert!(store.meta.versions().remotes > 0);
}

fn skip_cmd(root: &Actor) -> Command {
    Command::SkipRemoteRecord(SkipRemoteRecord {
        actor: root.clone(),
        child: "orders-dr".into(),
        partition: 2,
        offset: 5,
    })
}
