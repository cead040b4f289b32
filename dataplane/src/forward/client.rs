//! The requesting side: what the HTTP layer calls for partitions another
//! data node owns.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use narad_clock::Clock;
use narad_protocol::codec::{Message, decode_message, encode_message};
use narad_protocol::consume::ACK_BATCH_RECORDS_MAX;
use narad_protocol::{
    AckBatch, AckBatchAnswer, CallError, CheckRemoteTarget, ConsumeAnswer, ConsumeScope,
    ForwardConsume, ForwardSettle, ForwardedRecord, Lane, LeaseRef, Node, NodeStatus,
    NodeStatusAnswer, Opcode, PartitionStatsEntry, RemoteTargetAnswer, Request, RpcError,
    SettleKind, Status, TopicPartitionStats, TopicPartitionStatsAnswer,
};
use parking_lot::Mutex;
use tokio::task::JoinSet;

use super::coalesce::{AckLanes, Admission, QUEUED_ACKS_MAX, Queued, single_acks_max};
use super::tokens::{TOKEN_SHARE_WINDOW, TokenInbox};
use super::{LONG_POLL_GRACE, PROBE_BUDGET, SETTLE_BUDGET, STATS_BUDGET};
use crate::consume::handle::ReceiptHandle;
use crate::consume::shard::Settle;
use crate::metadata::MetadataReplica;
use crate::remote::OwnerAddresses;
use crate::topology::{Destination, NodeId, Route, Topology};

/// What a statistics request asks of an owner beyond each partition's
/// figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsAsk {
    /// The owner's fan-out cursors of each partition.
    pub cursors: bool,
    /// Each partition's consume frontier.
    pub frontier: bool,
    /// Each remote child cursor's shipping report (with `cursors`).
    pub remote_reports: bool,
}

/// Why a forwarded operation has no answer from the owner.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ForwardError {
    /// The owner is marked dead, or its address is not known: nothing was
    /// sent (`503` with `Retry-After`).
    #[error("partition owner is down; retry later")]
    OwnerDown,
    /// The call got no answer (timeout, lost connection, dial failure): it
    /// may have been applied (`502`).
    #[error("partition owner did not answer: {0}")]
    NoAnswer(String),
    /// The owner answered with an error status, passed on 1:1.
    #[error("{status}: {message}")]
    Refused {
        /// The owner's status.
        status: u16,
        /// The owner's message.
        message: String,
    },
}

/// One handle's result in a forwarded batch settle: an HTTP status and,
/// for anything but `204`, a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettleOutcome {
    /// What a single settle would have answered.
    pub status: u16,
    /// The error text, for anything but `204`.
    pub message: Option<String>,
}

/// Sends forwarded consumes, replays, settles and statistics requests to
/// partition owners through the node's transport.
#[derive(Debug)]
pub struct Forwarder {
    transport: Arc<Node>,
    addresses: Arc<dyn OwnerAddresses>,
    replica: Arc<MetadataReplica>,
    /// Queued acks' budgets and the memory of owners refusing `AckBatch`
    /// are measured on it.
    clock: Arc<dyn Clock>,
    rotation: AtomicUsize,
    ack_lanes: Mutex<AckLanes>,
    tokens: OnceLock<Arc<TokenInbox>>,
    unreceived_total: AtomicU64,
}

/// Where a partition lives, as far as forwarding cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// This node owns it (or nobody does: the local path answers).
    Local,
    /// Another node owns it.
    Remote {
        /// The owner.
        node: NodeId,
        /// Whether membership says it is alive.
        alive: bool,
    },
}

impl Forwarder {
    /// A forwarder calling owners through `transport`, finding them with
    /// `addresses` and `replica` (the node's own), on `clock` (the node's).
    pub fn new(
        transport: Arc<Node>,
        addresses: Arc<dyn OwnerAddresses>,
        replica: Arc<MetadataReplica>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Self::with_single_acks_max(transport, addresses, replica, clock, single_acks_max())
    }

    /// As [`Forwarder::new`], with `single_max` single ack RPCs in flight
    /// per owner before acks queue into `AckBatch`es (tests use small
    /// values).
    pub fn with_single_acks_max(
        transport: Arc<Node>,
        addresses: Arc<dyn OwnerAddresses>,
        replica: Arc<MetadataReplica>,
        clock: Arc<dyn Clock>,
        single_max: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            transport,
            addresses,
            replica,
            clock,
            rotation: AtomicUsize::new(0),
            ack_lanes: Mutex::new(AckLanes::new(single_max, QUEUED_ACKS_MAX)),
            tokens: OnceLock::new(),
            unreceived_total: AtomicU64::new(0),
        })
    }

    /// Parks queue consumes on delivery tokens too: `inbox` must be routed
    /// on this node's transport ([`TokenInbox::route`]), where owners send
    /// their notifications. Without it, parked consumes rely on re-probes.
    ///
    /// # Panics
    /// If set already.
    pub fn use_tokens(&self, inbox: Arc<TokenInbox>) {
        assert!(self.tokens.set(inbox).is_ok(), "token inbox set twice");
    }

    /// What parked consumes of `topic` wait on besides their own park, if
    /// tokens are in use.
    pub fn token_waker(&self, topic: &str) -> Option<Arc<tokio::sync::Notify>> {
        self.tokens.get().map(|inbox| inbox.waker(topic))
    }

    /// Asks every live remote owner of `topic` that holds no live token of
    /// this node for one, living `left` + 250 ms. Does not wait: the calls
    /// run as tasks, and a refusal only means re-probes.
    pub fn register_tokens(self: &Arc<Self>, topic: &str, left: Duration) {
        let Some(inbox) = self.tokens.get() else {
            return;
        };
        let ttl = (left + TOKEN_SHARE_WINDOW).min(Duration::from_millis(u64::from(
            narad_protocol::consume::TOKEN_TTL_MS_MAX,
        )));
        for node in self.live_remote_owners(topic) {
            if !inbox.claim_registration(node, topic, ttl) {
                continue;
            }
            let Some(peer) = self.addresses.rpc_addr(node) else {
                continue;
            };
            let forwarder = Arc::clone(self);
            let request = narad_protocol::TokenRegister {
                topic: topic.to_owned(),
                ttl_ms: u32::try_from(ttl.as_millis()).unwrap_or(u32::MAX).max(1),
            };
            tokio::spawn(async move {
                let answer = forwarder
                    .call::<_, AckBatchAnswer>(
                        peer,
                        Lane::Consume,
                        Opcode::TOKEN_REGISTER,
                        &request,
                        PROBE_BUDGET,
                    )
                    .await;
                if let Err(error) = answer {
                    tracing::debug!(node, %peer, %error, "delivery token not taken; re-probing instead");
                }
            });
        }
    }

    /// Where `topic`/`partition` lives now.
    pub(crate) fn placement(&self, topic: &str, partition: u32) -> Placement {
        match self.replica.route(&Destination::new(topic, partition)) {
            Route::Owner {
                node,
                local: false,
                alive,
            } => Placement::Remote { node, alive },
            Route::Owner { .. } | Route::Unassigned => Placement::Local,
        }
    }

    /// The other nodes owning partitions of `topic` that membership says
    /// are alive: those owed a claim first, then from a rotating one so
    /// probes spread.
    pub fn live_remote_owners(&self, topic: &str) -> Vec<NodeId> {
        let Some(meta) = self.replica.topic_meta(topic) else {
            return Vec::new();
        };
        let mut owners: Vec<NodeId> = Vec::new();
        for partition in 0..meta.partitions {
            if let Placement::Remote { node, alive: true } = self.placement(topic, partition)
                && !owners.contains(&node)
            {
                owners.push(node);
            }
        }
        if !owners.is_empty() {
            let start = self.rotation.fetch_add(1, Ordering::Relaxed) % owners.len();
            owners.rotate_left(start);
        }
        // Owners holding a record for this node come first, so a consume
        // that fills up early still claims it.
        if let Some(inbox) = self.tokens.get() {
            owners.sort_by_key(|node| {
                !self
                    .addresses
                    .rpc_addr(*node)
                    .is_some_and(|peer| inbox.owes_claim(topic, peer))
            });
        }
        owners
    }

    fn address(&self, node: NodeId, alive: bool) -> Result<SocketAddr, ForwardError> {
        if !alive {
            return Err(ForwardError::OwnerDown);
        }
        self.addresses.rpc_addr(node).ok_or(ForwardError::OwnerDown)
    }

    fn owner_of(&self, topic: &str, partition: u32) -> Result<(NodeId, SocketAddr), ForwardError> {
        match self.placement(topic, partition) {
            Placement::Remote { node, alive } => Ok((node, self.address(node, alive)?)),
            // Moved here meanwhile: the client retries and lands locally.
            Placement::Local => Err(ForwardError::Refused {
                status: 421,
                message: format!("partition {partition} moved; retry"),
            }),
        }
    }

    async fn call<Q: Message, A: Message>(
        &self,
        peer: SocketAddr,
        lane: Lane,
        opcode: Opcode,
        message: &Q,
        budget: Duration,
    ) -> Result<Option<A>, ForwardError> {
        call_on(&self.transport, peer, lane, opcode, message, budget).await
    }

    /// One non-blocking probe of `node` for up to `max` records of any
    /// partition of `topic` it owns, within [`PROBE_BUDGET`]. Every failure
    /// reads as "nothing there" (the spec's queue consume keeps looking).
    /// When `node` notified this node of a record it holds for it, the
    /// probe carries the `Claim` flag and takes that record first.
    pub async fn probe(
        self: &Arc<Self>,
        node: NodeId,
        topic: &str,
        max: usize,
    ) -> Vec<ForwardedRecord> {
        let Some(peer) = self.addresses.rpc_addr(node) else {
            return Vec::new();
        };
        let claim = self
            .tokens
            .get()
            .is_some_and(|inbox| inbox.take_claim(topic, peer));
        let request = ForwardConsume {
            topic: topic.to_owned(),
            scope: ConsumeScope::Any,
            wait_ms: 0,
            claim,
            max: max.clamp(1, 100) as u32,
        };
        match self.consume_detached(peer, request, PROBE_BUDGET).await {
            Ok(records) => records,
            Err(error) => {
                tracing::debug!(node, %peer, %error, "consume probe of a remote owner found nothing");
                Vec::new()
            }
        }
    }

    /// Sends a forwarded consume from a task of its own, so that the owner's
    /// answer is still received when the caller goes away meanwhile (its
    /// HTTP client left): the records it leased then are nacked at once
    /// instead of staying leased for a visibility timeout. A long poll
    /// (`wait_ms` > 0) is cancelled when the caller goes away while it
    /// waits, since the owner may hold it for up to a minute; its answer
    /// can then still cross the cancel, and those leases lapse.
    async fn consume_detached(
        self: &Arc<Self>,
        peer: SocketAddr,
        request: ForwardConsume,
        budget: Duration,
    ) -> Result<Vec<ForwardedRecord>, ForwardError> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let forwarder = Arc::clone(self);
        tokio::spawn(async move {
            let call = forwarder.call::<_, ConsumeAnswer>(
                peer,
                Lane::Consume,
                Opcode::CONSUME,
                &request,
                budget,
            );
            let mut sender = sender;
            let answer = if request.wait_ms > 0 {
                tokio::select! {
                    answer = call => answer,
                    () = sender.closed() => return,
                }
            } else {
                call.await
            };
            let records = answer.map(|answer| answer.map(|a| a.records).unwrap_or_default());
            if let Err(Ok(records)) = sender.send(records) {
                forwarder.release_unreceived(&request.topic, records).await;
            }
        });
        receiver.await.unwrap_or_else(|_| {
            Err(ForwardError::NoAnswer(
                "the forwarded consume's task ended without an answer".to_owned(),
            ))
        })
    }

    /// Nacks `records` leased for a consume that went away before it got
    /// them, so they are redelivered at once.
    async fn release_unreceived(self: &Arc<Self>, topic: &str, records: Vec<ForwardedRecord>) {
        self.unreceived_total
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        for record in records {
            let handle = ReceiptHandle {
                partition: record.partition,
                offset: record.offset,
                nonce: record.nonce,
            };
            if let Err(error) = self.settle(topic, handle, Settle::Nack).await {
                tracing::debug!(topic, %handle, %error, "releasing a record of a consume that went away failed; its lease lapses");
            }
        }
    }

    /// Records leased for consumes that went away before the owner's
    /// answer reached them, nacked since (tests, diagnostics).
    pub fn unreceived_total(&self) -> u64 {
        self.unreceived_total.load(Ordering::Relaxed)
    }

    /// A consume pinned to `partition`, held by its owner up to `wait`;
    /// the call gets `wait` + [`LONG_POLL_GRACE`].
    ///
    /// # Errors
    /// [`ForwardError`].
    pub async fn consume_pinned(
        self: &Arc<Self>,
        topic: &str,
        partition: u32,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<ForwardedRecord>, ForwardError> {
        let (_, peer) = self.owner_of(topic, partition)?;
        let wait_ms = u32::try_from(wait.as_millis())
            .unwrap_or(u32::MAX)
            .min(narad_protocol::consume::CONSUME_WAIT_MS_MAX);
        let request = ForwardConsume {
            topic: topic.to_owned(),
            scope: ConsumeScope::Pinned(partition),
            wait_ms,
            claim: false,
            max: max.clamp(1, 100) as u32,
        };
        let budget = Duration::from_millis(u64::from(wait_ms)) + LONG_POLL_GRACE;
        self.consume_detached(peer, request, budget).await
    }

    /// The record at `offset` of `partition`, read by its owner without a
    /// lease; `None` past the end.
    ///
    /// # Errors
    /// [`ForwardError`] (`410` when it aged out passes through as refused).
    pub async fn replay(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<Option<ForwardedRecord>, ForwardError> {
        let (_, peer) = self.owner_of(topic, partition)?;
        let request = ForwardConsume {
            topic: topic.to_owned(),
            scope: ConsumeScope::Replay { partition, offset },
            wait_ms: 0,
            claim: false,
            max: 1,
        };
        let answer = self
            .call::<_, ConsumeAnswer>(
                peer,
                Lane::Consume,
                Opcode::CONSUME,
                &request,
                SETTLE_BUDGET,
            )
            .await?;
        Ok(answer.and_then(|answer| answer.records.into_iter().next()))
    }

    /// Acks, extends or nacks one lease at its owner within
    /// [`SETTLE_BUDGET`]. While fewer than max(128, 8 × cores) ack RPCs to
    /// the owner are in flight it goes singly; beyond, it queues and leaves
    /// in one `AckBatch` with others when a slot frees.
    ///
    /// # Errors
    /// [`ForwardError`]; `410`, `404`, `421` and `503` from the owner as
    /// [`ForwardError::Refused`]; `503` when it could not leave within the
    /// budget (nothing was sent) or the owner's queue is full.
    pub async fn settle(
        self: &Arc<Self>,
        topic: &str,
        handle: ReceiptHandle,
        how: Settle,
    ) -> Result<(), ForwardError> {
        let (node, peer) = self.owner_of(topic, handle.partition)?;
        let lease = lease_of(handle);
        let admission = self.ack_lanes.lock().admit(node, topic, how, lease);
        match admission {
            Admission::Send => {
                let _slot = Slot {
                    forwarder: Arc::clone(self),
                    node,
                };
                self.settle_single(peer, topic, lease, how).await
            }
            Admission::Queued { id, answer } => {
                let deadline_ms = self.clock.now_ms().saturating_add(SETTLE_BUDGET_MS);
                tokio::select! {
                    // An answer that is there when the budget runs out wins.
                    biased;
                    answer = answer => answer.unwrap_or_else(|_| {
                        Err(ForwardError::NoAnswer(
                            "the queued ack's batch was dropped".to_owned(),
                        ))
                    }),
                    () = self.clock.sleep_until(deadline_ms) => {
                        if self.ack_lanes.lock().withdraw(node, id) {
                            Err(could_not_leave())
                        } else {
                            Err(ForwardError::NoAnswer(
                                "the queued ack's batch did not answer in time".to_owned(),
                            ))
                        }
                    }
                }
            }
            Admission::Full => Err(could_not_leave()),
        }
    }

    /// Acks queued for `node` (tests).
    #[cfg(test)]
    pub(crate) fn queued_acks(&self, node: NodeId) -> usize {
        self.ack_lanes.lock().queued(node)
    }

    async fn settle_single(
        &self,
        peer: SocketAddr,
        topic: &str,
        lease: LeaseRef,
        how: Settle,
    ) -> Result<(), ForwardError> {
        let request = ForwardSettle {
            topic: topic.to_owned(),
            lease,
        };
        self.call::<_, AckBatchAnswer>(peer, Lane::Ack, single_opcode(how), &request, SETTLE_BUDGET)
            .await
            .map(|_| ())
    }

    /// A slot to `node` freed: send what queued behind it, in the same
    /// slot, as one `AckBatch`.
    fn slot_freed(self: &Arc<Self>, node: NodeId) {
        let now_ms = self.clock.now_ms();
        let Some(batch) = self.ack_lanes.lock().slot_freed(node, now_ms) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to send on (shutting down): the waiters hear it;
            // the slot is not given back, so later acks queue and lapse
            // into 503 at their budget.
            for queued in batch {
                let _ = queued.answer.send(Err(could_not_leave()));
            }
            return;
        };
        let forwarder = Arc::clone(self);
        runtime.spawn(async move {
            let _slot = Slot {
                forwarder: Arc::clone(&forwarder),
                node,
            };
            forwarder.send_queued(node, batch).await;
        });
    }

    async fn send_queued(&self, node: NodeId, batch: Vec<Queued>) {
        let request = AckBatch {
            topic: batch[0].topic.clone(),
            how: kind_of(batch[0].how),
            leases: batch.iter().map(|queued| queued.lease).collect(),
        };
        let outcomes = self.settle_batch(node, &request).await;
        for (queued, outcome) in batch.into_iter().zip(outcomes) {
            let answer = match outcome.status {
                204 => Ok(()),
                status => Err(ForwardError::Refused {
                    status,
                    message: outcome.message.unwrap_or_default(),
                }),
            };
            let _ = queued.answer.send(answer);
        }
    }

    /// Settles `handles` (all owned by other nodes) the same way: grouped
    /// per owner, one `AckBatch` of at most 64 per group, all groups in
    /// parallel within [`SETTLE_BUDGET`]. The outcomes are in `handles`'
    /// order. An owner down gets no call (`503` per handle); a batch without
    /// an answer is `502` per handle.
    pub async fn settle_many(
        self: &Arc<Self>,
        topic: &str,
        handles: &[ReceiptHandle],
        how: Settle,
    ) -> Vec<SettleOutcome> {
        let mut outcomes: Vec<Option<SettleOutcome>> = vec![None; handles.len()];
        let mut groups: BTreeMap<NodeId, Vec<usize>> = BTreeMap::new();
        for (index, handle) in handles.iter().enumerate() {
            match self.owner_of(topic, handle.partition) {
                Ok((node, _)) => groups.entry(node).or_default().push(index),
                Err(error) => outcomes[index] = Some(outcome_of(&error)),
            }
        }
        let mut calls = JoinSet::new();
        for (node, indexes) in groups {
            for chunk in indexes.chunks(ACK_BATCH_RECORDS_MAX as usize) {
                let forwarder = Arc::clone(self);
                let batch = AckBatch {
                    topic: topic.to_owned(),
                    how: kind_of(how),
                    leases: chunk.iter().map(|&i| lease_of(handles[i])).collect(),
                };
                let chunk = chunk.to_vec();
                calls.spawn(async move {
                    let statuses = forwarder.settle_batch(node, &batch).await;
                    (chunk, statuses)
                });
            }
        }
        while let Some(joined) = calls.join_next().await {
            let (chunk, statuses) = match joined {
                Ok(done) => done,
                Err(error) => {
                    tracing::error!(%error, "a forwarded AckBatch task failed");
                    continue;
                }
            };
            for (index, outcome) in chunk.into_iter().zip(statuses) {
                outcomes[index] = Some(outcome);
            }
        }
        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| outcome_of(&ForwardError::NoAnswer("task failed".into())))
            })
            .collect()
    }

    /// Settles `batch` at `node` in one `AckBatch`, or singly, all at
    /// once, when `node` answers `AckBatch` with `400` (an older release;
    /// remembered for 2 min, during which it gets singles only).
    async fn settle_batch(&self, node: NodeId, batch: &AckBatch) -> Vec<SettleOutcome> {
        let every = |error: ForwardError| vec![outcome_of(&error); batch.leases.len()];
        let peer = match self.address(node, true) {
            Ok(peer) => peer,
            Err(error) => return every(error),
        };
        if self
            .ack_lanes
            .lock()
            .refuses_batches(node, self.clock.now_ms())
        {
            return self.settle_singly(peer, batch).await;
        }
        let answer = self
            .call::<_, AckBatchAnswer>(peer, Lane::Ack, Opcode::ACK_BATCH, batch, SETTLE_BUDGET)
            .await;
        if let Err(ForwardError::Refused { status: 400, .. }) = &answer {
            tracing::info!(node, %peer, "owner refuses AckBatch (an older release): acks go singly to it for 2 min");
            let now_ms = self.clock.now_ms();
            self.ack_lanes.lock().batch_refused(node, now_ms);
            return self.settle_singly(peer, batch).await;
        }
        match answer {
            Ok(Some(answer)) if answer.statuses.len() == batch.leases.len() => answer
                .statuses
                .into_iter()
                .map(|status| SettleOutcome {
                    status,
                    message: (status != 204).then(|| status_text(status).to_owned()),
                })
                .collect(),
            Ok(_) => every(ForwardError::NoAnswer(format!(
                "{peer} answered an AckBatch with the wrong number of statuses"
            ))),
            Err(error) => every(error),
        }
    }

    /// Settles every lease of `batch` at `peer` with its own RPC, all at
    /// once, each within [`SETTLE_BUDGET`]; outcomes in `batch` order.
    async fn settle_singly(&self, peer: SocketAddr, batch: &AckBatch) -> Vec<SettleOutcome> {
        let how = super::service::settle_of(batch.how);
        let mut calls = JoinSet::new();
        for (index, lease) in batch.leases.iter().enumerate() {
            let transport = Arc::clone(&self.transport);
            let request = ForwardSettle {
                topic: batch.topic.clone(),
                lease: *lease,
            };
            calls.spawn(async move {
                let answer = call_on::<_, AckBatchAnswer>(
                    &transport,
                    peer,
                    Lane::Ack,
                    single_opcode(how),
                    &request,
                    SETTLE_BUDGET,
                )
                .await;
                let outcome = match answer {
                    Ok(_) => SettleOutcome {
                        status: 204,
                        message: None,
                    },
                    Err(error) => outcome_of(&error),
                };
                (index, outcome)
            });
        }
        let mut outcomes = vec![None; batch.leases.len()];
        while let Some(joined) = calls.join_next().await {
            match joined {
                Ok((index, outcome)) => outcomes[index] = Some(outcome),
                Err(error) => tracing::error!(%error, "a forwarded single ack task failed"),
            }
        }
        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| outcome_of(&ForwardError::NoAnswer("task failed".into())))
            })
            .collect()
    }

    /// The statistics of `partitions` of `topic` from `node`, with what
    /// `ask` adds, or `None` when it did not answer within `budget` (or is
    /// down, or is too old for what was asked).
    pub async fn stats(
        &self,
        node: NodeId,
        topic: &str,
        partitions: Vec<u32>,
        ask: StatsAsk,
        budget: Duration,
    ) -> Option<Vec<PartitionStatsEntry>> {
        let peer = self.addresses.rpc_addr(node)?;
        let request = TopicPartitionStats {
            topic: topic.to_owned(),
            partitions,
            with_cursors: ask.cursors,
            with_frontier: ask.frontier,
            with_remote_reports: ask.remote_reports,
        };
        let answer = self
            .call::<_, TopicPartitionStatsAnswer>(
                peer,
                Lane::Control,
                Opcode::TOPIC_PARTITION_STATS,
                &request,
                budget.min(STATS_BUDGET),
            )
            .await;
        match answer {
            Ok(Some(answer)) => Some(answer.entries),
            Ok(None) => None,
            Err(error) => {
                tracing::debug!(node, %peer, %error, "partition statistics of a remote owner unavailable");
                None
            }
        }
    }
}

impl Forwarder {
    /// Node `node`'s own report of itself (opcode 33, control lane) within
    /// `budget`, dial included; with its views of the remotes' credentials
    /// when `with_remotes` (a node of an older release refuses that).
    ///
    /// # Errors
    /// [`ForwardError::OwnerDown`] when no address is known for `node`
    /// (nothing was sent), [`ForwardError::NoAnswer`] when it did not
    /// answer in time or answered without a body, and its refusal (an
    /// older release answers `400 unsupported rpc operation`).
    pub async fn node_status(
        &self,
        node: NodeId,
        budget: Duration,
        asked: NodeStatus,
    ) -> Result<NodeStatusAnswer, ForwardError> {
        let peer = self
            .addresses
            .rpc_addr(node)
            .ok_or(ForwardError::OwnerDown)?;
        self.call::<_, NodeStatusAnswer>(peer, Lane::Control, Opcode::NODE_STATUS, &asked, budget)
            .await?
            .ok_or_else(|| {
                ForwardError::NoAnswer(format!("{peer} answered its status with no body"))
            })
    }
}

impl Forwarder {
    /// Node `node`'s checks of `asked`'s target topic on a remote (opcode
    /// 34, control lane), run there through its own outbound client,
    /// within `budget`, dial included.
    ///
    /// # Errors
    /// [`ForwardError::OwnerDown`] when no address is known for `node`,
    /// [`ForwardError::NoAnswer`] when it did not answer in time or
    /// answered without a body, and its refusal (an older release answers
    /// `400 unsupported rpc operation`).
    pub async fn check_remote_target(
        &self,
        node: NodeId,
        budget: Duration,
        asked: &CheckRemoteTarget,
    ) -> Result<RemoteTargetAnswer, ForwardError> {
        let peer = self
            .addresses
            .rpc_addr(node)
            .ok_or(ForwardError::OwnerDown)?;
        self.call::<_, RemoteTargetAnswer>(
            peer,
            Lane::Control,
            Opcode::CHECK_REMOTE_TARGET,
            asked,
            budget,
        )
        .await?
        .ok_or_else(|| {
            ForwardError::NoAnswer(format!("{peer} answered its target check with no body"))
        })
    }
}

/// Holds one ack slot to an owner; dropping it (the call ended, or its
/// caller went away) frees the slot and sends what queued behind it.
struct Slot {
    forwarder: Arc<Forwarder>,
    node: NodeId,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.forwarder.slot_freed(self.node);
    }
}

/// [`SETTLE_BUDGET`] in milliseconds on the clock.
const SETTLE_BUDGET_MS: u64 = SETTLE_BUDGET.as_millis() as u64;

/// The spec's v3.2.2 `503`: the forward could not leave within 2 s, and
/// nothing was applied.
fn could_not_leave() -> ForwardError {
    ForwardError::Refused {
        status: 503,
        message: "forwarded ack could not leave within 2s; nothing applied, retry".to_owned(),
    }
}

fn lease_of(handle: ReceiptHandle) -> LeaseRef {
    LeaseRef {
        partition: handle.partition,
        offset: handle.offset,
        nonce: handle.nonce,
    }
}

fn kind_of(how: Settle) -> SettleKind {
    match how {
        Settle::Ack => SettleKind::Ack,
        Settle::Extend => SettleKind::Extend,
        Settle::Nack => SettleKind::Nack,
    }
}

/// One call through `transport`: `None` for a `204`, else the decoded
/// answer. The budget runs on the transport's own Tokio timer, not on the
/// clock: it only bounds the wait for an answer, and decides nothing here.
async fn call_on<Q: Message, A: Message>(
    transport: &Node,
    peer: SocketAddr,
    lane: Lane,
    opcode: Opcode,
    message: &Q,
    budget: Duration,
) -> Result<Option<A>, ForwardError> {
    let request = Request::new(opcode, encode_message(message));
    let response = transport
        .call_with_timeout(peer, lane, request, budget)
        .await
        .map_err(|error| call_failure(peer, error))?;
    if response.status == Status::NO_CONTENT {
        return Ok(None);
    }
    decode_message(response.body)
        .map(Some)
        .map_err(|error| ForwardError::NoAnswer(format!("malformed answer from {peer}: {error}")))
}

/// The single settle's opcode.
fn single_opcode(how: Settle) -> Opcode {
    match how {
        Settle::Ack => Opcode::ACK,
        Settle::Extend => Opcode::EXTEND_ACK,
        Settle::Nack => Opcode::NACK,
    }
}

fn call_failure(peer: SocketAddr, error: CallError) -> ForwardError {
    match error {
        CallError::Rejected(RpcError { status, message }) => ForwardError::Refused {
            status: status.0,
            message,
        },
        other => {
            tracing::warn!(%peer, error = %other, "forwarded request got no answer");
            ForwardError::NoAnswer(other.to_string())
        }
    }
}

/// A forward failure as one handle's batch result.
pub(crate) fn outcome_of(error: &ForwardError) -> SettleOutcome {
    let (status, message) = match error {
        ForwardError::OwnerDown => (503, error.to_string()),
        ForwardError::NoAnswer(_) => (502, error.to_string()),
        ForwardError::Refused { status, message } => (*status, message.clone()),
    };
    SettleOutcome {
        status,
        message: Some(message),
    }
}

/// The text a single settle answers with each status.
fn status_text(status: u16) -> &'static str {
    match status {
        410 => "receipt handle no longer matches an active reservation",
        404 => "topic not found",
        421 => "partition moved; retry",
        503 => "partition owner unavailable; retry later",
        _ => "forwarded ack failed",
    }
}
