//! Topic administration as the data plane's HTTP API asks for it. The
//! control plane implements [`Admin`] (a Raft proposal on the leader,
//! answered once the local replica applied it); [`ReplicaAdmin`] applies
//! the changes straight to a local replica, for tests and a single-process
//! setup without Raft.
//!
//! Every change names its [`Actor`]: the HTTP API authorizes the request on
//! the node the client reached, and the control plane checks the same rules
//! again for that actor when the change applies (spec §1.8), so a grant
//! revoked or an owner changed in between is still refused there.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::ingress::now_unix_ms;
use crate::metadata::{Grant, MetadataDelta, MetadataReplica, TopicMeta, TopicSchema, User};
use crate::topology::NodeId;

/// A future an admin call returns.
pub type AdminFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, AdminError>> + Send + 'a>>;

/// A validated topic creation.
#[derive(Clone, Debug, PartialEq)]
pub struct CreateTopic {
    /// Name, already checked against the naming rules.
    pub name: String,
    /// Partition count (3..=108).
    pub partitions: u32,
    /// Retention; 0 keeps forever.
    pub retention_ms: u64,
    /// Lease length.
    pub visibility_timeout_ms: u64,
    /// Lease cap per partition.
    pub max_in_flight_per_partition: u32,
    /// Acked-ahead cap per partition.
    pub max_acked_ahead_per_partition: u32,
    /// Schema document, if any (version 1).
    pub schema: Option<serde_json::Value>,
}

/// Who asks for an admin change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actor {
    /// The node runs with security off: there is no user and every
    /// authorization check passes.
    SecurityOff,
    /// The authenticated user, by name.
    User(String),
}

impl Actor {
    /// The actor of a request: its authenticated user, or
    /// [`Actor::SecurityOff`] when the node authenticates nobody.
    pub fn of(user: Option<&User>) -> Self {
        user.map_or(Self::SecurityOff, |user| Self::User(user.username.clone()))
    }

    /// The user's name; `None` with security off.
    pub fn username(&self) -> Option<&str> {
        match self {
            Self::SecurityOff => None,
            Self::User(name) => Some(name),
        }
    }
}

/// A new password hash for a user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswordChange {
    /// Whose password.
    pub username: String,
    /// The new bcrypt hash.
    pub password_hash: String,
    /// The stored hash the caller's `current_password` was verified
    /// against, when the caller had to prove it (a non-admin changing its
    /// own password); a change of the password since refuses the change.
    pub checked_hash: Option<String>,
}

/// A validated topic change; `None` leaves a field as it is. Groups apply
/// in order retention, caps, partitions, schema, each on its own: the first
/// failure returns and earlier groups stay applied (spec §1.3).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AlterTopic {
    /// New retention; 0 keeps forever.
    pub retention_ms: Option<u64>,
    /// New lease cap per partition.
    pub max_in_flight_per_partition: Option<u32>,
    /// New acked-ahead cap per partition.
    pub max_acked_ahead_per_partition: Option<u32>,
    /// New partition count: strictly larger than the current one.
    pub partitions: Option<u32>,
    /// A new schema version.
    pub schema: Option<serde_json::Value>,
    /// The schema version the caller read; another current one is a
    /// conflict.
    pub schema_base_version: Option<u32>,
}

/// Schema versions a topic keeps at most.
pub const SCHEMA_VERSIONS_MAX: usize = 1_000;

/// Why an admin call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// `409` with this text.
    #[error("{0}")]
    Conflict(String),
    /// `404`.
    #[error("topic not found")]
    NotFound,
    /// `404` for a user.
    #[error("user not found")]
    UserNotFound,
    /// `403` with this text: the control plane's re-check refused the
    /// actor (its grant or user changed after the node authorized it).
    #[error("{0}")]
    Forbidden(String),
    /// `400` with this text.
    #[error("{0}")]
    Invalid(String),
    /// `503` with this text (no leader, change may or may not apply).
    #[error("{0}")]
    Unavailable(String),
}

/// Topic and user changes the HTTP API forwards to the control plane.
/// Each answers once the local replica holds the change (read your
/// writes). The caller authorized `actor` already; an implementation that
/// applies through the control plane has it checked again there.
pub trait Admin: Send + Sync + fmt::Debug {
    /// Creates a topic owned by `actor` (no owner with security off);
    /// answers with the record as the replica holds it.
    fn create_topic(&self, actor: Actor, request: CreateTopic) -> AdminFuture<'_, Arc<TopicMeta>>;
    /// Deletes a topic.
    fn delete_topic(&self, actor: Actor, name: String) -> AdminFuture<'_, ()>;
    /// Changes a topic; answers with the record after the last group.
    fn alter_topic(
        &self,
        actor: Actor,
        name: String,
        alter: AlterTopic,
    ) -> AdminFuture<'_, Arc<TopicMeta>>;
    /// Creates a user (the password already hashed).
    fn create_user(&self, actor: Actor, user: User) -> AdminFuture<'_, Arc<User>>;
    /// Deletes a user.
    fn delete_user(&self, actor: Actor, username: String) -> AdminFuture<'_, ()>;
    /// Replaces a user's grants.
    fn set_grants(
        &self,
        actor: Actor,
        username: String,
        grants: Vec<Grant>,
    ) -> AdminFuture<'_, Arc<User>>;
    /// Replaces a user's password hash.
    fn set_password(&self, actor: Actor, change: PasswordChange) -> AdminFuture<'_, ()>;
}

/// Applies admin changes to a local replica directly: one data node, no
/// Raft. Every partition goes to `owner`; ids are minted from a counter
/// seeded at construction. It trusts the caller's authorization: the actor
/// only names a created topic's owner, and a checked password hash is not
/// compared again.
pub struct ReplicaAdmin {
    replica: Arc<MetadataReplica>,
    owner: NodeId,
    next_id: AtomicU64,
    /// Serializes changes: each takes the next log index.
    changes: Mutex<()>,
}

impl fmt::Debug for ReplicaAdmin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaAdmin")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl ReplicaAdmin {
    /// Admin over `replica`, assigning partitions to `owner`, minting ids
    /// from `seed`.
    pub fn new(replica: Arc<MetadataReplica>, owner: NodeId, seed: u64) -> Self {
        Self {
            replica,
            owner,
            next_id: AtomicU64::new(seed),
            changes: Mutex::new(()),
        }
    }

    fn next_index(&self) -> u64 {
        self.replica.view().applied_index + 1
    }

    /// Applies `change` to a copy of the topic and stores it unless the
    /// change refuses or leaves it as it was; the caller holds `changes`.
    fn changed_topic(
        &self,
        name: &str,
        change: impl FnOnce(&mut TopicMeta) -> Result<(), AdminError>,
    ) -> Result<(), AdminError> {
        let current = self.replica.topic_meta(name).ok_or(AdminError::NotFound)?;
        let mut topic = TopicMeta::clone(&current);
        change(&mut topic)?;
        if topic != *current {
            self.replica
                .apply_delta(self.next_index(), MetadataDelta::PutTopic(topic));
        }
        Ok(())
    }

    /// Applies `change` to a copy of the user and stores it; the caller
    /// holds `changes`.
    fn changed_user(
        &self,
        username: &str,
        change: impl FnOnce(&mut User),
    ) -> Result<User, AdminError> {
        let (user, _) = self.replica.user(username);
        let mut user = User::clone(&*user.ok_or(AdminError::UserNotFound)?);
        change(&mut user);
        user.updated_at_ms = now_unix_ms();
        self.replica
            .apply_delta(self.next_index(), MetadataDelta::PutUser(user.clone()));
        Ok(user)
    }
}

impl Admin for ReplicaAdmin {
    fn create_topic(&self, actor: Actor, request: CreateTopic) -> AdminFuture<'_, Arc<TopicMeta>> {
        Box::pin(async move {
            let _change = self.changes.lock();
            let view = self.replica.view();
            if view.topics.contains_key(request.name.as_str()) {
                return Err(AdminError::Conflict("topic already exists".into()));
            }
            if let Some(existing) = view
                .topics
                .keys()
                .find(|name| name.eq_ignore_ascii_case(&request.name))
            {
                return Err(AdminError::Conflict(format!(
                    "topic already exists: {:?} differs only in letter case from the existing topic {:?}; on a case-insensitive filesystem both would share one directory, so choose another name",
                    request.name, existing
                )));
            }
            let id = format!("{:016x}", self.next_id.fetch_add(1, Ordering::Relaxed));
            let mut topic =
                TopicMeta::new(&request.name, Some(&id), request.partitions, self.owner);
            topic.retention_ms = request.retention_ms;
            topic.visibility_timeout_ms = request.visibility_timeout_ms;
            topic.max_in_flight_per_partition = request.max_in_flight_per_partition;
            topic.max_acked_ahead_per_partition = request.max_acked_ahead_per_partition;
            topic.schema = request.schema.map(|document| {
                Arc::new(TopicSchema {
                    version: 1,
                    document,
                })
            });
            topic.schema_history = topic.schema.iter().cloned().collect();
            topic.owner = actor.username().map(str::to_owned);
            topic.created_at_ms = now_unix_ms();
            self.replica
                .apply_delta(self.next_index(), MetadataDelta::PutTopic(topic));
            self.replica
                .topic_meta(&request.name)
                .ok_or_else(|| AdminError::Unavailable("topic vanished after create".into()))
        })
    }

    fn create_user(&self, _actor: Actor, user: User) -> AdminFuture<'_, Arc<User>> {
        Box::pin(async move {
            let _change = self.changes.lock();
            let (existing, _) = self.replica.user(&user.username);
            if existing.is_some() {
                return Err(AdminError::Conflict("user already exists".into()));
            }
            let username = user.username.clone();
            self.replica
                .apply_delta(self.next_index(), MetadataDelta::PutUser(user));
            self.replica
                .user(&username)
                .0
                .ok_or_else(|| AdminError::Unavailable("user vanished after create".into()))
        })
    }

    fn delete_user(&self, _actor: Actor, username: String) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            let _change = self.changes.lock();
            if self.replica.user(&username).0.is_none() {
                return Err(AdminError::UserNotFound);
            }
            self.replica
                .apply_delta(self.next_index(), MetadataDelta::DeleteUser { username });
            Ok(())
        })
    }

    fn set_grants(
        &self,
        _actor: Actor,
        username: String,
        grants: Vec<Grant>,
    ) -> AdminFuture<'_, Arc<User>> {
        Box::pin(async move {
            let _change = self.changes.lock();
            let user = self.changed_user(&username, |user| user.grants = grants)?;
            Ok(Arc::new(user))
        })
    }

    fn set_password(&self, _actor: Actor, change: PasswordChange) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            let _change = self.changes.lock();
            let PasswordChange {
                username,
                password_hash,
                ..
            } = change;
            self.changed_user(&username, |user| user.password_hash = password_hash)?;
            Ok(())
        })
    }

    fn alter_topic(
        &self,
        _actor: Actor,
        name: String,
        alter: AlterTopic,
    ) -> AdminFuture<'_, Arc<TopicMeta>> {
        Box::pin(async move {
            let _change = self.changes.lock();
            if alter.retention_ms.is_some() {
                self.changed_topic(&name, |topic| {
                    topic.retention_ms = alter.retention_ms.unwrap_or(topic.retention_ms);
                    Ok(())
                })?;
            }
            if alter.max_in_flight_per_partition.is_some()
                || alter.max_acked_ahead_per_partition.is_some()
            {
                self.changed_topic(&name, |topic| {
                    if let Some(cap) = alter.max_in_flight_per_partition {
                        topic.max_in_flight_per_partition = cap;
                    }
                    if let Some(cap) = alter.max_acked_ahead_per_partition {
                        topic.max_acked_ahead_per_partition = cap;
                    }
                    Ok(())
                })?;
            }
            if let Some(partitions) = alter.partitions {
                let owner = self.owner;
                self.changed_topic(&name, |topic| grow_partitions(topic, partitions, owner))?;
            }
            if let Some(document) = alter.schema {
                self.changed_topic(&name, |topic| {
                    new_schema_version(topic, document, alter.schema_base_version)
                })?;
            }
            self.replica.topic_meta(&name).ok_or(AdminError::NotFound)
        })
    }

    fn delete_topic(&self, _actor: Actor, name: String) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            let _change = self.changes.lock();
            if self.replica.topic_meta(&name).is_none() {
                return Err(AdminError::NotFound);
            }
            self.replica
                .apply_delta(self.next_index(), MetadataDelta::DeleteTopic { name });
            Ok(())
        })
    }
}

fn grow_partitions(
    topic: &mut TopicMeta,
    partitions: u32,
    owner: NodeId,
) -> Result<(), AdminError> {
    if partitions <= topic.partitions {
        return Err(AdminError::Invalid(format!(
            "partitions can only grow: the topic has {}",
            topic.partitions
        )));
    }
    topic.partitions = partitions;
    topic.owners.resize(partitions as usize, Some(owner));
    Ok(())
}

/// Adds a schema version. Identical documents change nothing. A change is
/// accepted only when it provably widens what the topic accepts, which this
/// check proves for one case only: the new schema accepts everything
/// (`true` or `{}`), or the topic had no schema. Anything else is refused:
/// the full widening rules of the spec are the control plane's.
fn new_schema_version(
    topic: &mut TopicMeta,
    document: serde_json::Value,
    base_version: Option<u32>,
) -> Result<(), AdminError> {
    let current_version = topic.schema.as_ref().map_or(0, |schema| schema.version);
    if base_version.is_some_and(|base| base != current_version) {
        return Err(AdminError::Conflict("schema version conflict".into()));
    }
    if topic
        .schema
        .as_ref()
        .is_some_and(|schema| schema.document == document)
    {
        return Ok(());
    }
    let accepts_all =
        document == serde_json::Value::Bool(true) || document == serde_json::json!({});
    if topic.schema.is_some() && !accepts_all {
        return Err(AdminError::Conflict(
            "schema change is not a compatible widening of the current schema".into(),
        ));
    }
    if topic.schema_history.len() >= SCHEMA_VERSIONS_MAX {
        return Err(AdminError::Conflict(
            "schema version limit of 1000 reached".into(),
        ));
    }
    let schema = Arc::new(TopicSchema {
        version: current_version + 1,
        document,
    });
    topic.schema_history.push(Arc::clone(&schema));
    topic.schema = Some(schema);
    Ok(())
}
