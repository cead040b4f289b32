//! Fixtures shared by the crate's tests: a replica with known topics and
//! users, a WAL on the simulated disk, and request helpers.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use narad_disk::Disk;
use narad_disk::sim::SimDisk;
use narad_wal::{Wal, WalOptions, WalRecord};

use crate::metadata::{
    Grant, GrantAction, MetadataReplica, MetadataSnapshot, TopicMeta, TopicSchema, User,
};

/// The node id tests run as.
pub(crate) const LOCAL_NODE: u64 = 1;

/// bcrypt cost for test users: the minimum, so tests stay fast.
const TEST_BCRYPT_COST: u32 = 4;

/// A user with `password` hashed at the test cost.
pub(crate) fn user(name: &str, password: &str, grants: Vec<Grant>, root: bool) -> User {
    User {
        username: name.to_owned(),
        password_hash: bcrypt::hash(password, TEST_BCRYPT_COST).expect("bcrypt hash"),
        root,
        grants,
        created_at_ms: 0,
        updated_at_ms: 0,
    }
}

/// A snapshot with topics `orders` (3 partitions, id), `legacy` (no id),
/// `typed` (schema: object with integer `amount`), `delayed` (a delay child),
/// all owned by [`LOCAL_NODE`], and users `alice` (produce on `ord*`),
/// `bob` (no grants) and `root`.
pub(crate) fn snapshot() -> MetadataSnapshot {
    let mut snapshot = MetadataSnapshot {
        applied_index: 1,
        ..MetadataSnapshot::default()
    };
    let mut typed = TopicMeta::new("typed", Some("00000000000000c3"), 3, LOCAL_NODE);
    typed.schema = Some(Arc::new(TopicSchema {
        version: 1,
        document: serde_json::json!({
            "type": "object",
            "properties": {"amount": {"type": "integer"}},
            "required": ["amount"]
        }),
    }));
    let mut delayed = TopicMeta::new("delayed", Some("00000000000000d4"), 3, LOCAL_NODE);
    delayed.fanout_delay_ms = 60_000;
    for topic in [
        TopicMeta::new("orders", Some("00000000000000a1"), 3, LOCAL_NODE),
        TopicMeta::new("legacy", None, 3, LOCAL_NODE),
        typed,
        delayed,
    ] {
        snapshot
            .topics
            .insert(Arc::clone(&topic.name), Arc::new(topic));
    }
    for user in [
        user(
            "alice",
            "alice-pw",
            vec![Grant {
                action: GrantAction::Produce,
                patterns: vec!["ord*".into(), "typed".into(), "delayed".into()],
            }],
            false,
        ),
        user("bob", "bob-pw", Vec::new(), false),
        user("root", "root-pw", Vec::new(), true),
    ] {
        snapshot.users.insert(user.username.clone(), Arc::new(user));
    }
    snapshot.users_version = 1;
    snapshot
}

/// A replica holding [`snapshot`].
pub(crate) fn replica() -> Arc<MetadataReplica> {
    let replica = Arc::new(MetadataReplica::new(LOCAL_NODE));
    replica.apply_snapshot(snapshot());
    replica
}

/// A WAL on a fresh simulated disk.
pub(crate) fn sim_wal(seed: u64) -> (SimDisk, Arc<Wal>) {
    let sim = SimDisk::new(seed);
    let disk: Arc<dyn Disk> = Arc::new(sim.clone());
    let wal = Wal::open(disk, "/node/ingress/produce", WalOptions::default()).expect("open WAL");
    (sim, Arc::new(wal))
}

/// Every durable WAL record, decoded, with its sequence number.
pub(crate) fn wal_records(wal: &Wal) -> Vec<(u64, WalRecord)> {
    let mut reader = wal.reader(wal.oldest_seq()).expect("reader");
    let mut out = Vec::new();
    while let Some(frame) = reader.next_frame().expect("read frame") {
        out.push((
            frame.seq,
            WalRecord::decode(frame.payload).expect("decode record"),
        ));
    }
    out
}

/// An `Authorization` header value.
pub(crate) fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", BASE64.encode(format!("{user}:{password}")))
}
