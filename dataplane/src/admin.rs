//! Metadata changes as the data plane's HTTP API proposes them. A handler
//! parses and checks a request with the metastore's own rules, builds the
//! metastore [`Command`] (minting ids and reading the clock, as a proposer
//! does) and hands it to an [`Admin`]: in a cluster a Raft proposal through
//! the control-plane leader (`narad`'s bridge); on a node that is its own
//! log, [`LocalAdmin`], which applies it to the replica directly.
//!
//! Every command names its actor: the node authorized the request against
//! its replica, and the metastore checks the same rules again for that
//! actor when the command applies (spec §1.8), so a grant revoked or an
//! owner changed in between is still refused there.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use narad_meta::{Actor, AssignPartitions, Command, MetastoreError, PartitionOwner, User};

use crate::metadata::MetadataReplica;
use crate::topology::member_id;

/// A future an admin call returns.
pub type AdminFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, AdminError>> + Send + 'a>>;

/// Why a change was not applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The metastore refused the change: the status and text it pairs
    /// with the refusal.
    #[error("{message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// Client-facing text.
        message: String,
    },
    /// No answer (no leader, or the replica did not catch up in time): the
    /// change may or may not apply. `503` with this text.
    #[error("{0}")]
    Unavailable(String),
}

impl From<MetastoreError> for AdminError {
    fn from(error: MetastoreError) -> Self {
        Self::Refused {
            status: error.status(),
            message: error.to_string(),
        }
    }
}

/// The actor of a request: its authenticated user, or
/// [`Actor::SecurityOff`] when the node authenticates nobody.
pub fn actor_of(user: Option<&User>) -> Actor {
    user.map_or(Actor::SecurityOff, |user| {
        Actor::User(user.username.clone())
    })
}

/// Proposes metadata changes. Each call answers once the local replica
/// holds the change (read your writes).
pub trait Admin: Send + Sync + fmt::Debug {
    /// Proposes `command`; answers once this node's replica applied it.
    fn propose(&self, command: Command) -> AdminFuture<'_, ()>;
}

/// Applies changes to a replica that is its own log: one data node, no
/// Raft. It plays the controller's part too: every partition of a created
/// or grown topic is placed on this node.
pub struct LocalAdmin {
    replica: Arc<MetadataReplica>,
}

impl fmt::Debug for LocalAdmin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalAdmin")
            .field("node", &self.replica.local_node())
            .finish_non_exhaustive()
    }
}

impl LocalAdmin {
    /// Admin over `replica`, which must already hold this node as a
    /// member (partitions are placed on it).
    pub fn new(replica: Arc<MetadataReplica>) -> Self {
        Self { replica }
    }

    /// Places every unassigned partition of `topic` on this node.
    fn place(&self, topic: &str) -> Result<(), MetastoreError> {
        let view = self.replica.view();
        let Some(record) = view.metastore.topic(topic) else {
            return Ok(());
        };
        let slots = view.metastore.assignments(topic).unwrap_or_default();
        let owner = member_id(self.replica.local_node());
        let owners: Vec<PartitionOwner> = (0..record.partitions)
            .filter(|&partition| slots.get(partition as usize).is_none_or(Option::is_none))
            .map(|partition| PartitionOwner {
                partition,
                owner: owner.clone(),
            })
            .collect();
        if owners.is_empty() {
            return Ok(());
        }
        let assign = Command::AssignPartitions(AssignPartitions {
            topic: topic.to_owned(),
            id: record.id.clone(),
            owners,
        });
        self.replica.apply_next(&assign).map(drop)
    }
}

impl Admin for LocalAdmin {
    fn propose(&self, command: Command) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            let placed = match &command {
                Command::CreateTopic(create) => Some(create.name.clone()),
                Command::AlterTopic(alter) if alter.partitions.is_some() => {
                    Some(alter.name.clone())
                }
                _ => None,
            };
            self.replica.apply_next(&command)?;
            if let Some(topic) = placed {
                self.place(&topic)?;
            }
            Ok(())
        })
    }
}
