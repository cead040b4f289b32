//! What the metadata replica holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::topology::NodeId;

/// A topic's schema: the newest version and its document.
#[derive(Clone, Debug, PartialEq)]
pub struct TopicSchema {
    /// Version number, from 1.
    pub version: u32,
    /// The JSON Schema document (an object, or `true`).
    pub document: serde_json::Value,
}

/// Retention of a topic created without one: 7 days.
pub const RETENTION_MS_DEFAULT: u64 = 7 * 24 * 3_600_000;

/// Lease length of a topic created without one: 30 s.
pub const VISIBILITY_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// A topic as the data plane needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct TopicMeta {
    /// Topic name.
    pub name: Arc<str>,
    /// Incarnation id (16 hex characters); `None` for a topic created
    /// before incarnation ids existed.
    pub incarnation_id: Option<Arc<str>>,
    /// Partition count (at least 1 here; the control plane enforces 3).
    pub partitions: u32,
    /// Owner of each partition, `None` while unassigned. Its length is
    /// `partitions`.
    pub owners: Vec<Option<NodeId>>,
    /// The newest schema, if the topic has one.
    pub schema: Option<Arc<TopicSchema>>,
    /// Every schema version, oldest first (the newest is `schema`).
    pub schema_history: Vec<Arc<TopicSchema>>,
    /// Lease cap per partition.
    pub max_in_flight_per_partition: u32,
    /// Acked-ahead cap per partition.
    pub max_acked_ahead_per_partition: u32,
    /// Fan-out delay of a delay child; 0 for any other topic. A delay child
    /// refuses direct produces.
    pub fanout_delay_ms: u64,
    /// Retention in milliseconds; 0 keeps records forever.
    pub retention_ms: u64,
    /// Lease length of a consume, immutable after create.
    pub visibility_timeout_ms: u64,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: u64,
    /// The creating user; `None` for a topic created with security off.
    pub owner: Option<String>,
}

impl TopicMeta {
    /// A topic with default caps, no schema, no delay and every partition
    /// owned by `owner`.
    pub fn new(name: &str, incarnation_id: Option<&str>, partitions: u32, owner: NodeId) -> Self {
        Self {
            name: Arc::from(name),
            incarnation_id: incarnation_id.map(Arc::from),
            partitions,
            owners: vec![Some(owner); partitions as usize],
            schema: None,
            schema_history: Vec::new(),
            max_in_flight_per_partition: 1_024,
            max_acked_ahead_per_partition: 1_024,
            fanout_delay_ms: 0,
            retention_ms: RETENTION_MS_DEFAULT,
            visibility_timeout_ms: VISIBILITY_TIMEOUT_MS_DEFAULT,
            created_at_ms: 0,
            owner: None,
        }
    }

    /// Checks the relations the rest of the data plane relies on.
    ///
    /// # Panics
    /// If the owner list does not have one entry per partition, or the
    /// topic has no partition: a delta like that is a programming error in
    /// the stream, and serving it would route records nowhere.
    pub fn assert_valid(&self) {
        assert!(self.partitions > 0, "topic {} has no partition", self.name);
        assert_eq!(
            self.owners.len(),
            self.partitions as usize,
            "topic {} lists {} owners for {} partitions",
            self.name,
            self.owners.len(),
            self.partitions
        );
    }
}

/// A data node as membership reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Node id.
    pub id: NodeId,
    /// Whether the controller considers it alive.
    pub alive: bool,
}

/// What a grant allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GrantAction {
    /// Produce and batch produce.
    Produce,
    /// Consume, ack, extend, nack.
    Consume,
    /// Create topics.
    Create,
    /// Everything.
    Admin,
}

/// One grant: an action on topics matching any of the patterns. A pattern
/// is a topic name, optionally ending in one `*` (a prefix wildcard); `*`
/// alone matches every topic. `Admin` takes no patterns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The action allowed.
    pub action: GrantAction,
    /// Topic patterns.
    pub patterns: Vec<String>,
}

impl Grant {
    /// Whether this grant allows `action` on `topic`.
    pub fn allows(&self, action: GrantAction, topic: &str) -> bool {
        if self.action == GrantAction::Admin {
            return true;
        }
        self.action == action
            && self
                .patterns
                .iter()
                .any(|pattern| pattern_matches(pattern, topic))
    }
}

fn pattern_matches(pattern: &str, topic: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => topic.starts_with(prefix),
        None => pattern == topic,
    }
}

/// A user: a bcrypt hash and grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// Username.
    pub username: String,
    /// bcrypt hash of the password.
    pub password_hash: String,
    /// The root admin (implicitly admin).
    pub root: bool,
    /// Grants.
    pub grants: Vec<Grant>,
    /// Creation time, Unix ms.
    pub created_at_ms: u64,
    /// Time of the last grant or password change, Unix ms.
    pub updated_at_ms: u64,
}

impl User {
    /// Whether the user may do `action` on `topic`.
    pub fn may(&self, action: GrantAction, topic: &str) -> bool {
        self.root || self.grants.iter().any(|grant| grant.allows(action, topic))
    }

    /// Whether the user is an admin (root, or an `admin` grant).
    pub fn is_admin(&self) -> bool {
        self.root
            || self
                .grants
                .iter()
                .any(|grant| grant.action == GrantAction::Admin)
    }

    /// Whether the user may read `topic` (describe, list): any grant
    /// matching its name, ownership, or admin.
    pub fn may_read(&self, topic: &TopicMeta) -> bool {
        self.is_admin()
            || topic.owner.as_deref() == Some(self.username.as_str())
            || self.grants.iter().any(|grant| {
                grant
                    .patterns
                    .iter()
                    .any(|pattern| pattern_matches(pattern, &topic.name))
            })
    }

    /// Whether the user may alter or delete `topic`: ownership or admin.
    pub fn may_manage(&self, topic: &TopicMeta) -> bool {
        self.is_admin() || topic.owner.as_deref() == Some(self.username.as_str())
    }
}

/// The whole metadata state at one applied index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetadataSnapshot {
    /// The control-plane log index this state reflects.
    pub applied_index: u64,
    /// Topics by name.
    pub topics: BTreeMap<Arc<str>, Arc<TopicMeta>>,
    /// Data nodes by id.
    pub members: BTreeMap<NodeId, Member>,
    /// Users by name.
    pub users: BTreeMap<String, Arc<User>>,
    /// Bumped by every user change: the key of the verified-credential
    /// cache, so a changed password or removed user is never served from it.
    pub users_version: u64,
}

/// One change, as the metadata stream delivers it after the snapshot.
#[derive(Clone, Debug, PartialEq)]
pub enum MetadataDelta {
    /// A topic was created or changed (partitions added, schema, caps,
    /// owners).
    PutTopic(TopicMeta),
    /// A topic was deleted.
    DeleteTopic {
        /// Topic name.
        name: String,
    },
    /// A partition's owner changed.
    SetOwner {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// New owner, `None` for unassigned.
        owner: Option<NodeId>,
    },
    /// A data node joined or changed liveness.
    PutMember(Member),
    /// A user was created or changed.
    PutUser(User),
    /// A user was deleted.
    DeleteUser {
        /// Username.
        username: String,
    },
}
