//! The sending side: the dispatcher's commit target for owners that are not
//! this node.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use narad_clock::Clock;
use narad_protocol::codec::{decode_message, encode_message};
use narad_protocol::commit::{
    BatchRecord, COMMIT_BATCH_RECORDS_MAX, CommitProduceBatch, CommitProduceBatchAnswer,
    IncarnationId, InvalidIncarnationId, RecordProvenance,
};
use narad_protocol::{CallError, Lane, Node, Opcode, Request};
use parking_lot::Mutex;

use super::OwnerAddresses;
use super::legacy::LegacyOwners;
use super::verdict::{Verdict, judge};
use crate::dispatch::constants::{HUNG_AFTER, WINDOW_RECORDS_MAX};
use crate::dispatch::{CommitDone, CommitOrder, CommitOutcome, CommitTarget, WalPayload};

// A commit never holds more records than the dispatcher may hold at all, so
// every order fits one batch.
const _: () = assert!(WINDOW_RECORDS_MAX <= COMMIT_BATCH_RECORDS_MAX as usize);

/// Sends commit orders to their owners as `CommitProduceBatch` on the
/// produce lane, each within its order's budget.
///
/// A commit still unanswered when it turns hung (1 s, the dispatcher's
/// threshold) has the transport check its owner's liveness, and again every
/// second while it waits: an owner that died loses its connection about 2 s
/// into the commit, which then fails, so the dispatcher's 3 s reroute grace,
/// counted from the commit's start, ends on time. An owner that is only
/// slow still acknowledges packets and keeps the commit.
///
/// `start` never blocks: the commit runs as a task on the given tokio
/// runtime and reports through its [`CommitDone`] exactly once, also when
/// the task panics or the runtime drops it (then as failed).
///
/// What is left of an order's budget and the legacy-owner memory are
/// measured on the node's clock ([`Clock::now_ms`]), the one its consume
/// service and forwarder run on; the transport's own timeouts and liveness
/// checks run on the process's time.
#[derive(Debug, Clone)]
pub struct RemoteCommitTarget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    transport: Arc<Node>,
    addresses: Arc<dyn OwnerAddresses>,
    runtime: tokio::runtime::Handle,
    clock: Arc<dyn Clock>,
    legacy: Mutex<LegacyOwners>,
    liveness_check_after: Duration,
}

impl RemoteCommitTarget {
    /// A target calling owners through `transport`, finding them with
    /// `addresses`, running its calls on `runtime`, measuring budgets and
    /// the legacy-owner memory on `clock` (the node's).
    pub fn new(
        transport: Arc<Node>,
        addresses: Arc<dyn OwnerAddresses>,
        runtime: tokio::runtime::Handle,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                transport,
                addresses,
                runtime,
                clock,
                legacy: Mutex::new(LegacyOwners::new()),
                liveness_check_after: HUNG_AFTER,
            }),
        }
    }

    /// As built, but checking a silent owner's liveness `after` into a
    /// commit instead of at the hung threshold (tests shorten it).
    ///
    /// # Panics
    /// If the target was cloned already: the setting is fixed once shared.
    #[must_use]
    pub fn with_liveness_check_after(mut self, after: Duration) -> Self {
        let inner = Arc::get_mut(&mut self.inner);
        assert!(inner.is_some(), "set before the target is shared");
        if let Some(inner) = inner {
            inner.liveness_check_after = after;
        }
        self
    }
}

impl CommitTarget for RemoteCommitTarget {
    fn start(&self, order: CommitOrder<WalPayload>, done: CommitDone) {
        let inner = Arc::clone(&self.inner);
        let report = Report {
            parts: Some((order, done)),
        };
        self.inner.runtime.spawn(async move {
            let mut report = report;
            let outcome = match report.order() {
                Some(order) => inner.commit(order).await,
                None => return,
            };
            report.finish(outcome);
        });
    }
}

/// Reports an order exactly once: with its outcome, or as failed when the
/// task ends without one (a panic, a runtime shutting down), so the
/// dispatcher never waits on a commit nobody runs.
struct Report {
    parts: Option<(CommitOrder<WalPayload>, CommitDone)>,
}

impl Report {
    fn order(&self) -> Option<&CommitOrder<WalPayload>> {
        self.parts.as_ref().map(|(order, _)| order)
    }

    fn finish(&mut self, outcome: CommitOutcome) {
        if let Some((order, done)) = self.parts.take() {
            done.finish(order, outcome);
        }
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        self.finish(CommitOutcome::Failed);
    }
}

impl Inner {
    async fn commit(&self, order: &CommitOrder<WalPayload>) -> CommitOutcome {
        let started_ms = self.clock.now_ms();
        let Some(peer) = self.addresses.rpc_addr(order.node) else {
            tracing::warn!(destination = %order.destination, node = order.node, "remote commit failed: no RPC address known for the owner");
            return CommitOutcome::Failed;
        };
        let mut batch = match batch_of(order) {
            Ok(batch) => batch,
            Err(error) => {
                tracing::error!(destination = %order.destination, %error, "remote commit failed: a record carries a malformed incarnation id");
                return CommitOutcome::Failed;
            }
        };
        if batch.has_trailing_sections() && !self.legacy.lock().sends_ids(order.node, started_ms) {
            batch.strip_trailing_sections();
        }
        loop {
            let elapsed_ms = self.clock.now_ms().saturating_sub(started_ms);
            let remaining = order
                .budget
                .saturating_sub(Duration::from_millis(elapsed_ms));
            if remaining.is_zero() {
                tracing::warn!(destination = %order.destination, node = order.node, "remote commit failed: its budget ran out");
                return CommitOutcome::Failed;
            }
            let sent_ids = batch.has_trailing_sections();
            let answer = self.send(peer, &batch, remaining).await;
            match judge(&answer, sent_ids, batch.records().len()) {
                Verdict::RetryWithoutIds => {
                    assert!(sent_ids, "a batch without ids is never sent again");
                    self.legacy.lock().refused(order.node, self.clock.now_ms());
                    tracing::info!(destination = %order.destination, node = order.node, %peer, "owner refused the trailing sections (an older build); sending without incarnation ids and provenance for 2 minutes");
                    batch.strip_trailing_sections();
                }
                Verdict::Done { outcome, reason } => {
                    log_outcome(order, peer, outcome, &reason);
                    return outcome;
                }
            }
        }
    }

    async fn send(
        &self,
        peer: SocketAddr,
        batch: &CommitProduceBatch,
        timeout: Duration,
    ) -> Result<CommitProduceBatchAnswer, CallError> {
        let request = Request::new(Opcode::COMMIT_PRODUCE_BATCH, encode_message(batch));
        let response = self
            .transport
            .call_checking_liveness(
                peer,
                Lane::Produce,
                request,
                timeout,
                self.liveness_check_after,
            )
            .await?;
        decode_message(response.body).map_err(|error| CallError::MalformedAnswer { peer, error })
    }
}

fn log_outcome(
    order: &CommitOrder<WalPayload>,
    peer: SocketAddr,
    outcome: CommitOutcome,
    reason: &str,
) {
    match outcome {
        CommitOutcome::Committed => {}
        CommitOutcome::IncarnationMismatch => tracing::warn!(
            destination = %order.destination,
            node = order.node,
            %peer,
            reason,
            "owner refused produce records accepted for another topic incarnation; checking them again"
        ),
        CommitOutcome::Failed => tracing::warn!(
            destination = %order.destination,
            node = order.node,
            %peer,
            probe = order.probe,
            reason,
            "remote commit failed"
        ),
    }
}

/// The order as a batch: its records in WAL order, each with the id it was
/// accepted under.
///
/// # Errors
/// A record's id is not an incarnation id (a replica bug upstream).
///
/// # Panics
/// If the order has no records: the dispatcher sends at least one.
fn batch_of(order: &CommitOrder<WalPayload>) -> Result<CommitProduceBatch, InvalidIncarnationId> {
    let mut records = Vec::with_capacity(order.records.len());
    let mut last: Option<(&str, IncarnationId)> = None;
    for held in &order.records {
        let id = match held.meta.incarnation.as_deref() {
            None => None,
            Some(text) => match last {
                Some((seen, id)) if seen == text => Some(id),
                _ => {
                    let id = IncarnationId::parse(text)?;
                    last = Some((text, id));
                    Some(id)
                }
            },
        };
        let record = BatchRecord {
            key: held.payload.key.clone(),
            payload: held.payload.payload.clone(),
            created_at_unix_ms: held.payload.created_at_unix_ms,
        };
        records.push((record, id));
    }
    let floor = order
        .records
        .iter()
        .filter_map(|held| held.payload.origin.map(|origin| origin.floor))
        .min()
        .unwrap_or(0);
    let provenance = order
        .records
        .iter()
        .map(|held| RecordProvenance {
            origin: held.payload.origin.map(|origin| (origin.id, origin.seq)),
            idempotency_key: held.payload.idempotency_key.clone(),
        })
        .collect();
    Ok(CommitProduceBatch::new(
        order.destination.topic.to_string(),
        order.destination.partition,
        records,
    )
    .with_provenance(floor, provenance))
}
