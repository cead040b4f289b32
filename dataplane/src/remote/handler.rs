//! The owning side of `CommitProduceBatch`: decode, hand the batch to the
//! partition's combiner, answer.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use narad_plog::Origin;
use narad_protocol::commit::{
    CommitProduceBatch, CommitProduceBatchAnswer, IncarnationId, decode_commit_request,
    incarnation_mismatch, not_owner,
};
use narad_protocol::limits::messaging_permits;
use narad_protocol::{Inbound, Opcode, OperationLimit, Response, Router, RpcError, Status};

use crate::commit::{Combiners, CommitBatch, CommitError, CommitItem};
use crate::dispatch::constants::COMMIT_BUDGET;
use crate::metadata::MetadataReplica;
use crate::topology::{Destination, Route, Topology};

/// Name of the operation class remote commits run under: their own
/// max(64, 4 × cores) permits, apart from the other messaging operations
/// (spec §7: produce commits and other messaging ops are each capped).
pub const COMMIT_OPERATION_LIMIT_NAME: &str = "produce-commit";

/// Serves opcode 11 on this node: checks each batch on arrival against the
/// metadata replica, then hands it to the combiner of its partition, which
/// checks again under the produce lock.
///
/// The transport's router is built before the data node's combiners exist,
/// so they are attached afterwards; until then every commit is answered
/// `503`, which the sender retries.
#[derive(Debug)]
pub struct CommitService {
    serving: OnceLock<Serving>,
    caller_budget: Duration,
}

#[derive(Debug)]
struct Serving {
    combiners: Arc<Combiners>,
    replica: Arc<MetadataReplica>,
}

impl CommitService {
    /// A service answering `503` until [`CommitService::attach`].
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            serving: OnceLock::new(),
            caller_budget: COMMIT_BUDGET,
        })
    }

    /// A service serving `combiners` at once.
    pub fn with_combiners(combiners: Arc<Combiners>, replica: Arc<MetadataReplica>) -> Arc<Self> {
        let service = Self::new();
        service.attach(combiners, replica);
        service
    }

    /// Starts serving commits into `combiners`, checking arrivals against
    /// `replica` (the node's replica, the one the combiners check too).
    ///
    /// # Panics
    /// If the service was attached already: a node has one set of
    /// combiners.
    pub fn attach(&self, combiners: Arc<Combiners>, replica: Arc<MetadataReplica>) {
        let serving = Serving { combiners, replica };
        assert!(
            self.serving.set(serving).is_ok(),
            "commit service attached twice"
        );
    }

    /// `router` with opcode 11 served by this service, under its own
    /// operation class.
    pub fn route(self: &Arc<Self>, router: Router) -> Router {
        let service = Arc::clone(self);
        let limit = OperationLimit::new(COMMIT_OPERATION_LIMIT_NAME, messaging_permits());
        router.route(
            Opcode::COMMIT_PRODUCE_BATCH,
            limit,
            move |inbound: Inbound| {
                let service = Arc::clone(&service);
                async move { service.handle(inbound).await }
            },
        )
    }

    async fn handle(&self, inbound: Inbound) -> Result<Response, RpcError> {
        let batch = decode_commit_request(inbound.request.body)?;
        let Some(serving) = self.serving.get() else {
            return Err(RpcError::unavailable(
                "this data node does not serve commits yet",
            ));
        };
        let destination = Destination::new(batch.topic(), batch.partition());
        let records = batch.records().len();
        let items = commit_items(batch);
        // What the combiner checks again under the lock, checked on the
        // way in: a refusal costs no queueing behind other batches, and a
        // partition this node does not own gets no combiner.
        check_on_arrival(&serving.replica, &destination, &items)
            .map_err(|error| refusal(&destination, error, inbound.peer))?;
        // The sender gives up within its budget of at most this long after
        // sending, so a batch still queued past it has nobody waiting.
        let commit = CommitBatch {
            items,
            deadline_ms: serving.combiners.deadline_in(self.caller_budget),
        };
        let committed = {
            let destination = destination.clone();
            let combiners = Arc::clone(&serving.combiners);
            // The combiner blocks (produce lock, fdatasync). If the sender
            // cancels, the commit still runs to its end: the combiner
            // never leaves half a batch behind.
            tokio::task::spawn_blocking(move || combiners.commit(&destination, commit))
                .await
                .map_err(|error| RpcError::internal(format!("commit panicked: {error}")))?
        };
        match committed {
            Ok(stored) => {
                assert_eq!(
                    stored.records(),
                    records as u64,
                    "the combiner accounts for every record"
                );
                Ok(Response::message(&CommitProduceBatchAnswer {
                    offsets: stored.offsets,
                    already_stored: stored.already_stored,
                }))
            }
            Err(error) => Err(refusal(&destination, error, inbound.peer)),
        }
    }
}

/// Whether the replica lets this node commit `items` to `destination` now:
/// it owns the partition, and every record carrying an incarnation id
/// carries the live one.
fn check_on_arrival(
    replica: &MetadataReplica,
    destination: &Destination,
    items: &[CommitItem],
) -> Result<(), CommitError> {
    if !matches!(replica.route(destination), Route::Owner { local: true, .. }) {
        return Err(CommitError::NotOwner);
    }
    let live = replica
        .topic_meta(&destination.topic)
        .and_then(|topic| topic.incarnation_id.clone());
    let stale = items
        .iter()
        .filter_map(|item| item.incarnation.as_ref())
        .find(|id| Some(*id) != live.as_ref());
    match stale {
        None => Ok(()),
        Some(id) => Err(CommitError::IncarnationMismatch {
            batch: id.to_string(),
            live: live.map_or_else(|| "none".to_owned(), |live| live.to_string()),
        }),
    }
}

/// The combiner's items, one `Arc<str>` per run of one incarnation id.
fn commit_items(batch: CommitProduceBatch) -> Vec<CommitItem> {
    let floor = batch.floor();
    let mut provenance = batch.provenance().to_vec().into_iter();
    let (_, _, records) = batch.into_parts();
    let mut last: Option<(IncarnationId, Arc<str>)> = None;
    records
        .into_iter()
        .map(|(record, id)| {
            let incarnation = id.map(|id| match &last {
                Some((seen, text)) if *seen == id => Arc::clone(text),
                _ => {
                    let text: Arc<str> = Arc::from(id.as_str());
                    last = Some((id, Arc::clone(&text)));
                    text
                }
            });
            let provenance = provenance.next().unwrap_or_default();
            CommitItem {
                key: record.key,
                payload: record.payload,
                incarnation,
                origin: provenance.origin.map(|(id, seq)| Origin {
                    id,
                    seq,
                    // A sender's floor is its checkpoint, which its own
                    // in-flight records are at or above; never above the
                    // record itself.
                    floor: floor.min(seq),
                }),
                idempotency_key: provenance.idempotency_key,
            }
        })
        .collect()
}

/// The answer for a batch the combiner did not commit. Nothing of it is
/// visible in every case.
fn refusal(destination: &Destination, error: CommitError, peer: std::net::SocketAddr) -> RpcError {
    match error {
        CommitError::NotOwner => {
            tracing::debug!(%destination, %peer, "remote commit refused: not the partition owner");
            not_owner(&destination.topic, destination.partition)
        }
        CommitError::IncarnationMismatch { batch, live } => {
            // The owner did answer: a delete and recreate, or a lagging
            // replica on either side, explains it. Not an error here.
            tracing::info!(%destination, %peer, batch_incarnation = %batch, live_incarnation = %live, "remote commit refused: topic incarnation mismatch");
            incarnation_mismatch(&batch, &live)
        }
        CommitError::Frozen => {
            tracing::debug!(%destination, %peer, "remote commit refused: partition frozen for a move handoff");
            RpcError::unavailable(format!(
                "partition {} of {} is being handed to another node; retry",
                destination.partition, destination.topic
            ))
        }
        CommitError::TopicNotFound => RpcError::new(
            Status::NOT_FOUND,
            format!("topic {} not found", destination.topic),
        ),
        CommitError::CallerGone => {
            RpcError::unavailable("the sender stopped waiting; nothing was appended")
        }
        CommitError::Aborted => {
            RpcError::unavailable("the commit cycle was aborted; nothing is visible")
        }
        CommitError::Log(error) => {
            tracing::warn!(%destination, %peer, %error, "remote commit failed in the partition log");
            RpcError::unavailable(format!("partition log unavailable: {error}"))
        }
    }
}
