//! Following the metastore from the metadata stream: a subscriber's copy
//! of the state, fed batch by batch (a full snapshot, then ordered changes)
//! and changed only by the same [`Metastore::apply`] the control nodes run.
//! A data node's metadata replica is one; so is any other subscriber.
//!
//! A snapshot travels as the binary state codec and a change as the binary
//! command codec ([`crate::codec`]); the bare JSON of an older control node
//! is read too.

use std::sync::Arc;

use narad_protocol::metadata::{MetadataBatch, MetadataChange};
use serde::{Deserialize, Serialize};

use crate::codec::{decode_command, decode_state, encode_command};
use crate::{ApplyContext, Command, Metastore, MetastoreError, Outcome};

/// The result of applying one entry, as a proposer or a subscriber is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AppliedOutcome {
    /// The command changed the state.
    Applied,
    /// The command was accepted and changed nothing.
    Unchanged,
    /// The command was refused: the metastore's status and text, for the
    /// client that proposed it.
    Refused {
        /// HTTP status the spec pairs with the refusal.
        status: u16,
        /// The client-facing text.
        message: String,
    },
    /// The entry carried no command (blank or membership entry).
    NoCommand,
}

impl AppliedOutcome {
    /// The outcome of `Metastore::apply`.
    pub fn of(result: Result<Outcome, MetastoreError>) -> Self {
        match result {
            Ok(Outcome::Applied) => Self::Applied,
            Ok(Outcome::Unchanged) => Self::Unchanged,
            Err(error) => Self::Refused {
                status: error.status(),
                message: error.to_string(),
            },
        }
    }
}

/// The batch that brings a subscriber to `applied_index` with `changes`
/// (log index and command, in log order), each command in the binary
/// command codec; `leader_commit_index` tells it where caught up is.
pub fn changes_batch(
    applied_index: u64,
    leader_commit_index: u64,
    changes: &[(u64, Command)],
) -> MetadataBatch {
    MetadataBatch {
        applied_index,
        leader_commit_index,
        snapshot: None,
        changes: changes
            .iter()
            .map(|(index, command)| MetadataChange {
                index: *index,
                command: encode_command(command),
            })
            .collect(),
    }
}

/// Why a subscriber could not use a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicaError {
    /// A snapshot or change did not decode.
    #[error("undecodable metadata: {0}")]
    Undecodable(String),
    /// A change out of log order: the batch is refused whole.
    #[error("change at index {index} after index {applied}")]
    OutOfOrder {
        /// The change's index.
        index: u64,
        /// The replica's index.
        applied: u64,
    },
}

/// One change a replica applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaChange {
    /// Its log index.
    pub index: u64,
    /// The command.
    pub command: Command,
    /// What applying it did.
    pub outcome: AppliedOutcome,
}

/// A subscriber's copy of the metastore, fed by [`MetadataBatch`]es.
#[derive(Debug, Clone, Default)]
pub struct Follower {
    /// Shared with readers: a batch replaces it whole, so a reader that
    /// holds it keeps one consistent state.
    metastore: Arc<Metastore>,
    applied_index: u64,
    leader_commit_index: u64,
}

impl Follower {
    /// An empty replica (asks for a snapshot first).
    pub fn new() -> Self {
        Self::default()
    }

    /// The replica's state.
    pub fn metastore(&self) -> &Metastore {
        &self.metastore
    }

    /// The index this replica has applied; the next fetch asks after it.
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// Caught up: the replica reached the highest commit index a control
    /// node reported.
    pub fn caught_up(&self) -> bool {
        self.applied_index > 0 && self.applied_index >= self.leader_commit_index
    }

    /// The replica's state, shared: it stays as it is while held, and the
    /// next batch replaces it.
    pub fn shared(&self) -> Arc<Metastore> {
        Arc::clone(&self.metastore)
    }

    /// Applies `batch`, returning every change in order with what applying
    /// it did (refused ones too, as on the control nodes). A batch from a
    /// node behind this replica changes nothing.
    ///
    /// # Errors
    /// [`ReplicaError`]; the replica is unchanged.
    pub fn apply(&mut self, batch: &MetadataBatch) -> Result<Vec<ReplicaChange>, ReplicaError> {
        self.leader_commit_index = self.leader_commit_index.max(batch.leader_commit_index);
        if let Some(snapshot) = &batch.snapshot {
            if batch.applied_index < self.applied_index {
                return Ok(Vec::new());
            }
            let metastore = decode_state(snapshot.clone())
                .map_err(|e| ReplicaError::Undecodable(e.to_string()))?;
            self.metastore = Arc::new(metastore);
            self.applied_index = batch.applied_index;
            return Ok(Vec::new());
        }
        let fresh = |change: &&MetadataChange| change.index > self.applied_index;
        if batch.applied_index <= self.applied_index && !batch.changes.iter().any(|c| fresh(&c)) {
            return Ok(Vec::new());
        }
        let mut next = Metastore::clone(&self.metastore);
        let mut next_index = self.applied_index;
        let mut applied = Vec::new();
        for change in batch.changes.iter().filter(fresh) {
            if change.index <= next_index {
                return Err(ReplicaError::OutOfOrder {
                    index: change.index,
                    applied: next_index,
                });
            }
            let command = decode_command(change.command.clone())
                .map_err(|e| ReplicaError::Undecodable(e.to_string()))?;
            // Refusals repeat the control node's: the same log, the same
            // pure apply.
            let context = ApplyContext {
                index: change.index,
            };
            let outcome = AppliedOutcome::of(next.apply(&command, context));
            next_index = change.index;
            applied.push(ReplicaChange {
                index: change.index,
                command,
                outcome,
            });
        }
        if batch.applied_index > next_index {
            next.note_applied(ApplyContext {
                index: batch.applied_index,
            });
            next_index = batch.applied_index;
        }
        self.metastore = Arc::new(next);
        self.applied_index = next_index;
        Ok(applied)
    }

    /// Applies `command` as the next log entry, for a replica that is its
    /// own log: a data node run without a control plane (tests, and
    /// single-process setups), where this is the only writer. The outcome
    /// is the metastore's, refusals included.
    ///
    /// # Errors
    /// The metastore's refusal; the state is as `apply` leaves it (a
    /// refused command changes nothing but the applied index).
    pub fn apply_next(&mut self, command: &Command) -> Result<Outcome, MetastoreError> {
        let index = self.applied_index + 1;
        let metastore = Arc::make_mut(&mut self.metastore);
        let result = metastore.apply(command, ApplyContext { index });
        self.applied_index = index;
        self.leader_commit_index = self.leader_commit_index.max(index);
        result
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::Heartbeat;
    use crate::codec::encode_state;
    use narad_protocol::metadata::MetadataChange;

    fn heartbeat(index: u64) -> Command {
        Command::Heartbeat(Heartbeat {
            id: "unknown".into(),
            at_ms: index,
        })
    }

    fn change(index: u64) -> MetadataChange {
        MetadataChange {
            index,
            command: encode_command(&heartbeat(index)),
        }
    }

    fn changes(applied_index: u64, changes: Vec<MetadataChange>) -> MetadataBatch {
        MetadataBatch {
            applied_index,
            leader_commit_index: applied_index,
            snapshot: None,
            changes,
        }
    }

    fn snapshot(applied_index: u64) -> MetadataBatch {
        MetadataBatch {
            applied_index,
            leader_commit_index: applied_index,
            snapshot: Some(encode_state(&Metastore::new())),
            changes: Vec::new(),
        }
    }

    #[test]
    fn changes_apply_in_order_and_blank_entries_advance_the_index() {
        let mut replica = Follower::new();
        replica.apply(&snapshot(2)).expect("snapshot");
        let applied = replica
            .apply(&changes(6, vec![change(3), change(5)]))
            .expect("changes");
        let indexes: Vec<u64> = applied.iter().map(|c| c.index).collect();
        assert_eq!(indexes, vec![3, 5]);
        assert!(matches!(
            applied[0].outcome,
            AppliedOutcome::Refused { status: 404, .. }
        ));
        assert_eq!(replica.applied_index(), 6);
        assert!(replica.caught_up());
    }

    #[test]
    fn a_batch_out_of_order_is_refused_whole() {
        let mut replica = Follower::new();
        replica.apply(&snapshot(2)).expect("snapshot");
        let error = replica
            .apply(&changes(5, vec![change(4), change(3)]))
            .expect_err("refused");
        assert_eq!(
            error,
            ReplicaError::OutOfOrder {
                index: 3,
                applied: 4
            }
        );
        assert_eq!(replica.applied_index(), 2);
    }

    #[test]
    fn a_batch_from_a_node_behind_the_replica_changes_nothing() {
        let mut replica = Follower::new();
        replica.apply(&snapshot(7)).expect("snapshot");
        assert!(replica.apply(&snapshot(5)).expect("ignored").is_empty());
        assert!(
            replica
                .apply(&changes(6, vec![change(6)]))
                .expect("ignored")
                .is_empty()
        );
        assert_eq!(replica.applied_index(), 7);
    }

    #[test]
    fn the_bare_json_of_an_older_control_node_still_applies() {
        let mut replica = Follower::new();
        let mut batch = snapshot(2);
        batch.snapshot = Some(Bytes::from(
            serde_json::to_vec(&Metastore::new()).expect("encodes"),
        ));
        replica.apply(&batch).expect("JSON snapshot");
        let json_change = MetadataChange {
            index: 3,
            command: Bytes::from(serde_json::to_vec(&heartbeat(3)).expect("encodes")),
        };
        let applied = replica
            .apply(&changes(3, vec![json_change]))
            .expect("JSON change");
        assert_eq!(applied[0].command, heartbeat(3));
        assert_eq!(replica.applied_index(), 3);
    }

    #[test]
    fn an_undecodable_change_refuses_the_batch_and_names_the_type() {
        let mut replica = Follower::new();
        replica.apply(&snapshot(2)).expect("snapshot");
        let mut bytes = encode_command(&heartbeat(3)).to_vec();
        bytes[0] = 9;
        let forged = MetadataChange {
            index: 3,
            command: Bytes::from(bytes),
        };
        let error = replica
            .apply(&changes(3, vec![forged]))
            .expect_err("refused");
        assert_eq!(
            error.to_string(),
            "undecodable metadata: metastore command version 9 is not supported \
             (this build speaks version 4)"
        );
        assert_eq!(replica.applied_index(), 2);
    }
}
