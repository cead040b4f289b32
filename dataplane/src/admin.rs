//! Topic administration as the data plane's HTTP API asks for it. The
//! control plane implements [`Admin`] (a Raft proposal on the leader,
//! answered once the local replica applied it); [`ReplicaAdmin`] applies
//! the changes straight to a local replica, for tests and a single-process
//! setup without Raft.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::dispatch::NodeId;
use crate::ingress::now_unix_ms;
use crate::metadata::{Grant, MetadataDelta, MetadataReplica, TopicMeta, TopicSchema, User};

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
    /// The creating user; `None` with security off.
    pub owner: Option<String>,
}

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
    /// `503` with this text (no leader, change may or may not apply).
    #[error("{0}")]
    Unavailable(String),
}

/// Topic and user changes the HTTP API forwards to the control plane.
/// Each answers once the local replica holds the change (read your
/// writes). Authorization was checked by the caller.
pub trait Admin: Send + Sync + fmt::Debug {
    /// Creates a topic; answers with the record as the replica holds it.
    fn create_topic(&self, request: CreateTopic) -> AdminFuture<'_, Arc<TopicMeta>>;
    /// Deletes a topic.
    fn delete_topic(&self, name: String) -> AdminFuture<'_, ()>;
    /// Creates a user (the password already hashed).
    fn create_user(&self, user: User) -> AdminFuture<'_, Arc<User>>;
    /// Deletes a user.
    fn delete_user(&self, username: String) -> AdminFuture<'_, ()>;
    /// Replaces a user's grants.
    fn set_grants(&self, username: String, grants: Vec<Grant>) -> AdminFuture<'_, Arc<User>>;
    /// Replaces a user's password hash.
    fn set_password(&self, username: String, password_hash: String) -> AdminFuture<'_, ()>;
}

/// Applies admin changes to a local replica directly: one data node, no
/// Raft. Every partition goes to `owner`; ids are minted from a counter
/// seeded at construction.
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
    fn create_topic(&self, request: CreateTopic) -> AdminFuture<'_, Arc<TopicMeta>> {
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
            topic.owner = request.owner;
            topic.created_at_ms = now_unix_ms();
            self.replica
                .apply_delta(self.next_index(), MetadataDelta::PutTopic(topic));
            self.replica
                .topic_meta(&request.name)
                .ok_or_else(|| AdminError::Unavailable("topic vanished after create".into()))
        })
    }

    fn create_user(&self, user: User) -> AdminFuture<'_, Arc<User>> {
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

    fn delete_user(&self, username: String) -> AdminFuture<'_, ()> {
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

    fn set_grants(&self, username: String, grants: Vec<Grant>) -> AdminFuture<'_, Arc<User>> {
        Box::pin(async move {
            let _change = self.changes.lock();
            let user = self.changed_user(&username, |user| user.grants = grants)?;
            Ok(Arc::new(user))
        })
    }

    fn set_password(&self, username: String, password_hash: String) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            let _change = self.changes.lock();
            self.changed_user(&username, |user| user.password_hash = password_hash)?;
            Ok(())
        })
    }

    fn delete_topic(&self, name: String) -> AdminFuture<'_, ()> {
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
