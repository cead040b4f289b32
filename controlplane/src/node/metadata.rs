//! The metadata stream for data nodes: a full snapshot, then the ordered
//! changes, each batch stamped with the applied index it brings the
//! subscriber to and the highest commit index this node knows of. Any
//! control node serves it from its own replica, so a subscriber can switch
//! nodes (across a leader change, say) and continue from its index.
//!
//! A snapshot travels as the metastore's binary state codec and a change as
//! its binary command codec (`metastore::codec`); the subscriber also reads
//! the bare JSON an older control node sends.

use std::sync::Arc;
use std::time::Duration;

use narad_protocol::metadata::{
    METADATA_BATCH_CHANGES_MAX, METADATA_WAIT_MS_MAX, MetadataBatch, MetadataChange, MetadataFetch,
};
use narad_protocol::{Inbound, Response, RpcError};

use super::runtime::Shared;
use crate::metastore::codec::{decode_command, decode_state, encode_command, encode_state};
use crate::metastore::{ApplyContext, Command, Metastore};
use crate::raft::AppliedOutcome;
use crate::store::Catchup;

/// Serves one `MetadataFetch`: waits (bounded) while this replica has
/// nothing newer, then answers what the subscriber needs next.
pub(super) async fn serve(shared: &Arc<Shared>, inbound: Inbound) -> Result<Response, RpcError> {
    let fetch: MetadataFetch = inbound.message()?;
    let wait = Duration::from_millis(u64::from(fetch.wait_ms.min(METADATA_WAIT_MS_MAX)));
    if fetch.after_index > 0 && shared.view.applied_index() <= fetch.after_index {
        let mut applied = shared.view.watch_applied();
        let after = fetch.after_index;
        // Timing out is the ordinary answer of a quiet cluster.
        let _ = tokio::time::timeout(wait, applied.wait_for(|index| *index > after)).await;
    }
    let leader_commit_index = shared.status().leader_commit_index;
    let batch = match shared
        .view
        .catch_up(fetch.after_index, METADATA_BATCH_CHANGES_MAX as usize)
    {
        Catchup::Snapshot {
            metastore,
            applied_index,
        } => MetadataBatch {
            applied_index,
            leader_commit_index,
            snapshot: Some(encode_state(&metastore)),
            changes: Vec::new(),
        },
        Catchup::Changes {
            changes,
            applied_index,
        } => MetadataBatch {
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
        },
    };
    Ok(Response::message(&batch))
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

/// A subscriber's replica of the metastore, fed by [`MetadataBatch`]es.
#[derive(Debug, Clone, Default)]
pub struct MetadataReplica {
    metastore: Metastore,
    applied_index: u64,
    leader_commit_index: u64,
}

impl MetadataReplica {
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
            self.metastore = decode_state(snapshot.clone())
                .map_err(|e| ReplicaError::Undecodable(e.to_string()))?;
            self.applied_index = batch.applied_index;
            return Ok(Vec::new());
        }
        let mut next = self.clone();
        let mut applied = Vec::new();
        for change in batch
            .changes
            .iter()
            .filter(|c| c.index > self.applied_index)
        {
            if change.index <= next.applied_index {
                return Err(ReplicaError::OutOfOrder {
                    index: change.index,
                    applied: next.applied_index,
                });
            }
            let command = decode_command(change.command.clone())
                .map_err(|e| ReplicaError::Undecodable(e.to_string()))?;
            // Refusals repeat the control node's: the same log, the same
            // pure apply.
            let context = ApplyContext {
                index: change.index,
            };
            let outcome = AppliedOutcome::of(next.metastore.apply(&command, context));
            next.applied_index = change.index;
            applied.push(ReplicaChange {
                index: change.index,
                command,
                outcome,
            });
        }
        if batch.applied_index > next.applied_index {
            next.metastore.note_applied(ApplyContext {
                index: batch.applied_index,
            });
            next.applied_index = batch.applied_index;
        }
        *self = next;
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::metastore::Heartbeat;

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
        let mut replica = MetadataReplica::new();
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
        let mut replica = MetadataReplica::new();
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
        let mut replica = MetadataReplica::new();
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
        let mut replica = MetadataReplica::new();
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
        let mut replica = MetadataReplica::new();
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
             (this build speaks version 2)"
        );
        assert_eq!(replica.applied_index(), 2);
    }
}
