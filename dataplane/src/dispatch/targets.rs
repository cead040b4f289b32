//! What the dispatcher runtime acts through: commit targets (this node's
//! partitions through [`crate::commit::LocalCommitTarget`], other owners
//! through [`crate::remote`]) and the leader's answer to "is this topic
//! gone?".

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use narad_meta::AttachEpoch;
use narad_plog::Origin;

use super::{CommitId, CommitOrder, CommitOutcome, GoneQuestion, Held};
use crate::metadata::MetadataReplica;
use narad_disk::queue::Sender;

/// What the dispatcher holds of a WAL record: enough to commit it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalPayload {
    /// Key; empty means none.
    pub key: Bytes,
    /// The message.
    pub payload: Bytes,
    /// When the record was accepted, Unix ms.
    pub created_at_unix_ms: u64,
    /// The ingress WAL record this is, so its partition stores it once
    /// however often it is sent; `None` for records that are not the
    /// ingress WAL's (fan-out copies).
    pub origin: Option<Origin>,
    /// The producer's idempotency key; empty means none.
    pub idempotency_key: Bytes,
}

type Report = Box<dyn FnOnce(CommitOrder<WalPayload>, CommitOutcome) + Send>;

/// Hands a finished commit back to whoever ordered it: the dispatcher, or
/// a fan-out cursor.
pub struct CommitDone {
    report: Report,
}

impl fmt::Debug for CommitDone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CommitDone")
    }
}

impl CommitDone {
    /// Reports to a dispatcher loop in its `generation` (it ignores the
    /// reports of commits a panicked generation ordered).
    pub(crate) fn new(events: Sender<Event>, generation: u64) -> Self {
        Self::with(move |order, outcome| {
            // A stopped dispatcher no longer listens; the records are in
            // the WAL and a restart commits them again.
            let _ = events.send(Event::CommitDone {
                generation,
                id: order.id,
                outcome,
                records: order.records,
            });
        })
    }

    /// Reports through `report`, called once with the order and its
    /// outcome.
    pub fn with(
        report: impl FnOnce(CommitOrder<WalPayload>, CommitOutcome) + Send + 'static,
    ) -> Self {
        Self {
            report: Box::new(report),
        }
    }

    /// Reports `outcome` with the order's records.
    pub fn finish(self, order: CommitOrder<WalPayload>, outcome: CommitOutcome) {
        (self.report)(order, outcome);
    }
}

/// An order and its report, handed back by [`CommitTarget::run_here`].
pub type Declined = (CommitOrder<WalPayload>, CommitDone);

/// Where commits go. `start` must not block the dispatcher: it hands the
/// order to its own workers and reports through `done`.
pub trait CommitTarget: Send + Sync + fmt::Debug {
    /// Starts `order`; report it exactly once through `done`.
    fn start(&self, order: CommitOrder<WalPayload>, done: CommitDone);

    /// Commits `order` on the calling thread and reports it through `done`
    /// before returning, where the target can; otherwise hands both back
    /// untouched (the default), for [`CommitTarget::start`].
    ///
    /// The dispatcher asks this only of its one commit in flight, when it
    /// would otherwise hand the order to a worker and sleep until the
    /// worker woke it: running it here saves both thread switches.
    ///
    /// # Errors
    /// The order and its report, when the target does not run orders on
    /// the caller's thread.
    fn run_here(&self, order: CommitOrder<WalPayload>, done: CommitDone) -> Result<(), Declined> {
        Err((order, done))
    }
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

    /// Asks the leader whether `child`'s link is still the one made under
    /// `epoch`: `Ok(true)` only when it confirmed so after a barrier. A
    /// fan-out cursor anchors (overwrites its cursor file) only on `true`,
    /// and deletes a detached link's file only on `false`. Leaders that
    /// cannot answer it say so with `Err`.
    ///
    /// # Errors
    /// The leader could not be asked.
    fn confirm_attach_epoch(&self, child: &str, epoch: &AttachEpoch) -> Result<bool, String> {
        let _ = (child, epoch);
        Err("this leader confirmation does not answer attach epochs".into())
    }

    /// Asks the leader whether `member` still owns, or receives in a move,
    /// `partition` of incarnation `incarnation` of `topic`: `Ok(false)`
    /// only when it confirmed, after a barrier, that it does not, so the
    /// member's copy may be reclaimed. Leaders that cannot answer it say
    /// so with `Err`.
    ///
    /// # Errors
    /// The leader could not be asked.
    fn confirm_partition_holder(&self, holder: &PartitionHolder) -> Result<bool, String> {
        let _ = holder;
        Err("this leader confirmation does not answer partition holders".into())
    }
}

/// A member's copy of a partition, as [`LeaderConfirm::confirm_partition_holder`]
/// asks about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionHolder {
    /// The topic.
    pub topic: Arc<str>,
    /// The incarnation the copy belongs to.
    pub incarnation: Arc<str>,
    /// The partition.
    pub partition: u32,
    /// The member holding the copy.
    pub member: String,
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
    fn confirm_attach_epoch(&self, child: &str, epoch: &AttachEpoch) -> Result<bool, String> {
        Ok(self
            .replica
            .topic_meta(child)
            .and_then(|topic| {
                topic
                    .parent
                    .as_ref()
                    .map(|link| link.attach_epoch == *epoch)
            })
            .unwrap_or(false))
    }

    fn confirm_partition_holder(&self, holder: &PartitionHolder) -> Result<bool, String> {
        let view = self.replica.view();
        let live = view
            .topics
            .get(&*holder.topic)
            .is_some_and(|topic| topic.incarnation_id.as_deref() == Some(&*holder.incarnation));
        Ok(live
            && view
                .metastore
                .assignment(&holder.topic, holder.partition)
                .is_some_and(|assignment| {
                    assignment.owner == holder.member
                        || assignment.target.as_deref() == Some(holder.member.as_str())
                }))
    }

    fn confirm_gone(&self, question: &GoneQuestion) -> Result<bool, String> {
        let topic = self.replica.topic_meta(&question.topic);
        Ok(match (topic, &question.incarnation) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(topic), Some(id)) => topic.incarnation_id.as_ref() != Some(id),
        })
    }
}

/// What reaches the runtime thread. The queue is unbounded; what is in it
/// is bounded by the dispatcher's own limits: one `CommitDone` per commit
/// started (at most the commit slots plus hung commits), one `Gone` per
/// question asked (one per topic or incarnation at a time), and at most
/// one `Wake` per watch between two passes of the loop.
#[derive(Debug)]
pub(crate) enum Event {
    /// The durable frontier or the topology moved: look again.
    Wake,
    /// A commit ended; `generation` is the loop's that ordered it.
    CommitDone {
        generation: u64,
        id: CommitId,
        outcome: CommitOutcome,
        records: Vec<Held<WalPayload>>,
    },
    /// The leader answered a question of loop generation `generation`.
    Gone {
        generation: u64,
        question: GoneQuestion,
        gone: bool,
    },
    /// Stop the loop.
    Stop,
}
