//! What the dispatcher runtime acts through: commit targets (the local
//! combiner here, remote owners over QUIC in [`crate::remote`]) and the
//! leader's answer to "is this topic gone?".

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};

use super::runtime::Event;
use super::{CommitOrder, CommitOutcome, GoneQuestion, Held};
use crate::commit::{Combiners, CommitBatch, CommitError, CommitItem};
use crate::metadata::MetadataReplica;

/// What the dispatcher holds of a WAL record: enough to commit it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalPayload {
    /// Key; empty means none.
    pub key: Bytes,
    /// The message.
    pub payload: Bytes,
    /// When the record was accepted, Unix ms.
    pub created_at_unix_ms: u64,
}

/// Hands a finished commit back to the dispatcher.
#[derive(Debug)]
pub struct CommitDone {
    events: Sender<Event>,
}

impl CommitDone {
    pub(crate) fn new(events: Sender<Event>) -> Self {
        Self { events }
    }

    /// Reports `outcome` with the order's records.
    pub fn finish(self, order: CommitOrder<WalPayload>, outcome: CommitOutcome) {
        // A stopped dispatcher no longer listens; the records are in the WAL
        // and a restart commits them again.
        let _ = self.events.send(Event::CommitDone {
            id: order.id,
            outcome,
            records: order.records,
        });
    }
}

/// Where commits go. `start` must not block the dispatcher: it hands the
/// order to its own workers and reports through `done`.
pub trait CommitTarget: Send + Sync + fmt::Debug {
    /// Starts `order`; report it exactly once through `done`.
    fn start(&self, order: CommitOrder<WalPayload>, done: CommitDone);
}

/// The leader's answer to a [`GoneQuestion`]: `Ok(true)` only when it
/// confirmed (after a barrier) that the topic, or that incarnation of it,
/// is gone. `Err` or `Ok(false)` keeps the records.
pub trait LeaderConfirm: Send + Sync + fmt::Debug {
    /// Asks the leader; may block (the runtime asks from a helper thread).
    ///
    /// # Errors
    /// The leader could not be asked.
    fn confirm_gone(&self, question: &GoneQuestion) -> Result<bool, String>;
}

/// Commit worker threads for local commits. A hung commit holds a worker,
/// and the dispatcher starts at most 16 commits that are not hung, so this
/// many workers leave room for as many hung ones.
pub const LOCAL_COMMIT_WORKERS: usize = 32;

/// Local commits queued for a worker at most; the dispatcher's own limits
/// keep it far below this.
pub const LOCAL_COMMIT_QUEUE_MAX: usize = 4_096;

type LocalJob = (CommitOrder<WalPayload>, CommitDone);

/// Commits into this node's partition logs through the combiners, on a
/// pool of worker threads.
#[derive(Debug)]
pub struct LocalCommitTarget {
    jobs: Sender<LocalJob>,
}

impl LocalCommitTarget {
    /// A target with its workers started.
    ///
    /// # Errors
    /// A worker thread could not be spawned.
    pub fn start_workers(combiners: Arc<Combiners>) -> std::io::Result<Self> {
        let (jobs, receiver) = crossbeam_channel::bounded::<LocalJob>(LOCAL_COMMIT_QUEUE_MAX);
        for index in 0..LOCAL_COMMIT_WORKERS {
            let receiver: Receiver<LocalJob> = receiver.clone();
            let combiners = Arc::clone(&combiners);
            std::thread::Builder::new()
                .name(format!("narad-commit-{index}"))
                .spawn(move || {
                    for (order, done) in receiver {
                        // A panic is a bug; reporting the commit failed
                        // keeps the records in the WAL and the destination
                        // alive, where a lost answer would leave it hung.
                        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
                            commit_locally(&combiners, &order)
                        }))
                        .unwrap_or_else(|_| {
                            tracing::error!(destination = %order.destination, "local commit panicked");
                            CommitOutcome::Failed
                        });
                        done.finish(order, outcome);
                    }
                })?;
        }
        Ok(Self { jobs })
    }
}

impl CommitTarget for LocalCommitTarget {
    fn start(&self, order: CommitOrder<WalPayload>, done: CommitDone) {
        if let Err(error) = self.jobs.send((order, done)) {
            // Workers are gone only at shutdown.
            let (order, done) = error.into_inner();
            done.finish(order, CommitOutcome::Failed);
        }
    }
}

fn commit_locally(combiners: &Combiners, order: &CommitOrder<WalPayload>) -> CommitOutcome {
    let batch = CommitBatch {
        items: order
            .records
            .iter()
            .map(|held: &Held<WalPayload>| CommitItem {
                key: held.payload.key.clone(),
                payload: held.payload.payload.clone(),
                incarnation: held.meta.incarnation.clone(),
            })
            .collect(),
        deadline: Instant::now() + order.budget,
    };
    match combiners.commit(&order.destination, batch) {
        Ok(_) => CommitOutcome::Committed,
        Err(CommitError::IncarnationMismatch { batch, live }) => {
            tracing::warn!(
                destination = %order.destination,
                batch_incarnation = %batch,
                live_incarnation = %live,
                "owner refused produce records accepted for another topic incarnation; checking them again"
            );
            CommitOutcome::IncarnationMismatch
        }
        Err(error) => {
            tracing::warn!(destination = %order.destination, %error, "local commit failed");
            CommitOutcome::Failed
        }
    }
}

/// The remote target of a node with no cluster transport (`narad dev`'s
/// only data node, tests): every remote commit fails, so the dispatcher
/// probes the owner and reroutes its records to a local sibling after the
/// grace.
#[derive(Debug, Default)]
pub struct NoRemoteTarget;

impl CommitTarget for NoRemoteTarget {
    fn start(&self, order: CommitOrder<WalPayload>, done: CommitDone) {
        tracing::debug!(destination = %order.destination, node = order.node, "no transport to remote owners yet");
        done.finish(order, CommitOutcome::Failed);
    }
}

/// A leader stand-in answering from a metadata replica it trusts as the
/// leader's own (tests, through
/// [`crate::node::NodeServices::standalone`]): gone when the topic is
/// absent or holds another incarnation.
#[derive(Debug)]
pub struct ReplicaLeader {
    replica: Arc<MetadataReplica>,
}

impl ReplicaLeader {
    /// Answers from `replica`.
    pub fn new(replica: Arc<MetadataReplica>) -> Self {
        Self { replica }
    }
}

impl LeaderConfirm for ReplicaLeader {
    fn confirm_gone(&self, question: &GoneQuestion) -> Result<bool, String> {
        let topic = self.replica.topic_meta(&question.topic);
        Ok(match (topic, &question.incarnation) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(topic), Some(id)) => topic.incarnation_id.as_ref() != Some(id),
        })
    }
}
