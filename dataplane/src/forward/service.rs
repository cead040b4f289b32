//! The owning side: forwarded consumes, replays, settles and statistics
//! answered from this node's consume service and partition logs.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use narad_clock::Clock;
use narad_protocol::codec::Message;
use narad_protocol::commit::not_owner;
use narad_protocol::consume::STATS_CURSORS_PER_PARTITION_MAX;
use narad_protocol::consume::decode_forward_request;
use narad_protocol::limits::messaging_permits;
use narad_protocol::{
    AckBatch, AckBatchAnswer, ConsumeAnswer, ConsumeScope, CursorPosition, ForwardConsume,
    ForwardSettle, ForwardedRecord, Inbound, Opcode, OperationLimit, PartitionStatsEntry,
    RemoteCursor, Response, Router, RpcError, SettleKind, Status, TokenNotify, TokenRegister,
    TopicPartitionStats, TopicPartitionStatsAnswer,
};
use narad_protocol::{Lane, Node, Request};
use parking_lot::Mutex;

use super::PROBE_BUDGET;
use super::tokens::{CLAIM_HOLD, HoldTable, TokenTable};

use crate::consume::service::{
    ConsumeError, ConsumeRequest, ConsumeService, Delivery, ReplayError, SettleError,
};
use crate::consume::shard::Settle;
use crate::fanout::FanoutStatus;
use crate::metadata::MetadataReplica;
use crate::partitions::LocalLogs;
use crate::topology::{Destination, Route, Topology};

/// Name of the operation class forwarded settles, probes and statistics
/// run under: max(64, 4 × cores) permits (spec §7). Forwarded long polls
/// run exempt, under `forward-long-poll`.
pub const FORWARD_OPERATION_LIMIT_NAME: &str = "forward";

const LONG_POLL_LIMIT_NAME: &str = "forward-long-poll";

/// Serves the forwarded consume opcodes on this node. Built before the
/// node's consume service exists, it answers `503` until
/// [`ForwardService::attach`].
#[derive(Debug)]
pub struct ForwardService {
    this: Weak<ForwardService>,
    serving: OnceLock<Serving>,
    /// To notify token holders; weak, since the transport's router holds
    /// this service.
    transport: OnceLock<Weak<Node>>,
    tokens: Mutex<TokenTable>,
    /// Records held for token holders' claims.
    holds: Mutex<HoldTable>,
    /// Where the holders to notify start, so no holder is always last.
    rotation: AtomicUsize,
    /// Records handed to claimants through their holds.
    claimed_total: AtomicU64,
    /// Partitions whose high watermark a task watches for token holders.
    watched: Mutex<HashSet<Destination>>,
}

#[derive(Debug)]
struct Serving {
    consume: Arc<ConsumeService>,
    logs: Arc<LocalLogs>,
    replica: Arc<MetadataReplica>,
    /// The consume service's: a hold is a lease there, so token expiries
    /// and holds are judged on the clock its leases lapse on.
    clock: Arc<dyn Clock>,
    /// Where this node's fan-out cursors stand, for statistics requests
    /// that ask for them.
    fanout: Arc<FanoutStatus>,
}

impl ForwardService {
    /// A service answering `503` until attached.
    pub fn new() -> Arc<Self> {
        Arc::new_cyclic(|this| Self {
            this: this.clone(),
            serving: OnceLock::new(),
            transport: OnceLock::new(),
            tokens: Mutex::new(TokenTable::default()),
            holds: Mutex::new(HoldTable::default()),
            rotation: AtomicUsize::new(0),
            claimed_total: AtomicU64::new(0),
            watched: Mutex::new(HashSet::new()),
        })
    }

    /// Lets the service notify delivery-token holders through `transport`
    /// (the node's, bound with this service's routes). Without it,
    /// `TokenRegister` is answered `503` and requesters rely on re-probes.
    ///
    /// # Panics
    /// If set already.
    pub fn attach_transport(&self, transport: &Arc<Node>) {
        assert!(
            self.transport.set(Arc::downgrade(transport)).is_ok(),
            "forward service transport attached twice"
        );
    }

    /// A service serving at once.
    pub fn with_consume(
        consume: Arc<ConsumeService>,
        logs: Arc<LocalLogs>,
        replica: Arc<MetadataReplica>,
        fanout: Arc<FanoutStatus>,
    ) -> Arc<Self> {
        let service = Self::new();
        service.attach(consume, logs, replica, fanout);
        service
    }

    /// Starts serving from `consume`, `logs`, `replica` and `fanout` (the
    /// node's own), on `consume`'s clock.
    ///
    /// # Panics
    /// If attached already.
    pub fn attach(
        &self,
        consume: Arc<ConsumeService>,
        logs: Arc<LocalLogs>,
        replica: Arc<MetadataReplica>,
        fanout: Arc<FanoutStatus>,
    ) {
        let serving = Serving {
            clock: Arc::clone(consume.clock()),
            consume,
            logs,
            replica,
            fanout,
        };
        assert!(
            self.serving.set(serving).is_ok(),
            "forward service attached twice"
        );
    }

    /// `router` with opcodes 2, 3, 8, 18, 19 and 32 served by this service.
    pub fn route(self: &Arc<Self>, router: Router) -> Router {
        let messaging = OperationLimit::new(FORWARD_OPERATION_LIMIT_NAME, messaging_permits());
        let router = self.route_one(
            router,
            Opcode::CONSUME,
            OperationLimit::exempt(LONG_POLL_LIMIT_NAME),
        );
        [
            Opcode::ACK,
            Opcode::EXTEND_ACK,
            Opcode::NACK,
            Opcode::ACK_BATCH,
            Opcode::TOPIC_PARTITION_STATS,
            Opcode::TOKEN_REGISTER,
        ]
        .into_iter()
        .fold(router, |router, opcode| {
            self.route_one(router, opcode, messaging)
        })
    }

    fn route_one(
        self: &Arc<Self>,
        router: Router,
        opcode: Opcode,
        limit: OperationLimit,
    ) -> Router {
        let service = Arc::clone(self);
        router.route(opcode, limit, move |inbound: Inbound| {
            let service = Arc::clone(&service);
            async move { service.handle(inbound).await }
        })
    }

    async fn handle(&self, inbound: Inbound) -> Result<Response, RpcError> {
        let serving = self.serving.get().ok_or_else(|| {
            RpcError::unavailable("this data node does not serve forwarded consumes yet")
        })?;
        let body = inbound.request.body;
        match inbound.request.opcode {
            Opcode::CONSUME => self.consume(serving, decode(body)?, inbound.peer).await,
            Opcode::ACK => serving.settle(decode(body)?, Settle::Ack),
            Opcode::EXTEND_ACK => serving.settle(decode(body)?, Settle::Extend),
            Opcode::NACK => serving.settle(decode(body)?, Settle::Nack),
            Opcode::ACK_BATCH => Ok(serving.settle_batch(decode(body)?)),
            Opcode::TOPIC_PARTITION_STATS => Ok(serving.stats(&decode(body)?)),
            Opcode::TOKEN_REGISTER => self.register_token(serving, &decode(body)?, inbound.peer),
            other => Err(RpcError::unsupported_operation(other)),
        }
    }
}

impl ForwardService {
    /// Takes a delivery token of `request.topic` for `holder` (the
    /// requester's endpoint, which serves `TokenNotify`) and makes sure
    /// every partition of the topic this node owns is watched.
    fn register_token(
        &self,
        serving: &Serving,
        request: &TokenRegister,
        holder: SocketAddr,
    ) -> Result<Response, RpcError> {
        if self.transport.get().is_none() {
            return Err(RpcError::unavailable("delivery tokens are not served here"));
        }
        let meta = serving
            .replica
            .topic_meta(&request.topic)
            .ok_or_else(topic_not_found)?;
        let now_ms = serving.clock.now_ms();
        let expires_at_ms = now_ms.saturating_add(u64::from(request.ttl_ms));
        self.tokens
            .lock()
            .register(&request.topic, holder, expires_at_ms, now_ms)
            .map_err(|_| RpcError::unavailable("too many delivery tokens; probe instead"))?;
        for partition in 0..meta.partitions {
            let destination = Destination::new(&request.topic, partition);
            if !matches!(
                serving.replica.route(&destination),
                Route::Owner { local: true, .. }
            ) {
                continue;
            }
            if !self.watched.lock().insert(destination.clone()) {
                continue;
            }
            let log = serving
                .logs
                .resolve(&destination, meta.incarnation_id.as_ref());
            match log {
                Ok(log) => self.watch(
                    destination,
                    log.watch_high_watermark(),
                    Arc::clone(&serving.clock),
                ),
                Err(_) => {
                    self.watched.lock().remove(&destination);
                }
            }
        }
        Ok(Response::no_content())
    }

    /// Until no live token of the topic is left, each commit to
    /// `destination` spends the topic's tokens.
    fn watch(
        &self,
        destination: Destination,
        mut watch: narad_plog::HwmWatch,
        clock: Arc<dyn Clock>,
    ) {
        let Some(service) = self.this.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            let mut seen = watch.high_watermark();
            loop {
                match watch.wait_beyond(seen).await {
                    Ok(high_watermark) => seen = high_watermark,
                    Err(_) => break,
                }
                service.spend_tokens(&destination.topic);
                if !service
                    .tokens
                    .lock()
                    .has_live(&destination.topic, clock.now_ms())
                {
                    break;
                }
            }
            service.watched.lock().remove(&destination);
        });
    }

    /// Now on the attached consume service's clock (tests).
    ///
    /// # Panics
    /// If not attached.
    #[cfg(test)]
    fn now_ms(&self) -> u64 {
        self.serving.get().expect("attached").clock.now_ms()
    }

    /// Whether a live delivery token of `topic` is held here (tests).
    #[cfg(test)]
    pub(crate) fn holds_token(&self, topic: &str) -> bool {
        self.tokens.lock().has_live(topic, self.now_ms())
    }

    /// A commit to a partition of `topic`: spends one live token per
    /// record that can be held (HWM − frontier − in-flight − acked-ahead
    /// bounds the holds), holds a record for each spent token's holder
    /// for [`CLAIM_HOLD`], and notifies it. Tokens left over stay live
    /// for the next commit.
    fn spend_tokens(&self, topic: &str) {
        let Some(serving) = self.serving.get() else {
            return;
        };
        let now_ms = serving.clock.now_ms();
        let mut holders = self.tokens.lock().live_holders(topic, now_ms);
        {
            let mut holds = self.holds.lock();
            holders.retain(|holder| holds.has_room(topic, *holder, now_ms));
        }
        if holders.is_empty() {
            return;
        }
        let start = self.rotation.fetch_add(1, Ordering::Relaxed) % holders.len();
        holders.rotate_left(start);
        let held = serving.consume.hold(topic, holders.len(), CLAIM_HOLD);
        let mut notified = Vec::with_capacity(held.len());
        let mut unused = Vec::new();
        {
            // Checked again under both locks: another partition's commit
            // may have spent a token since (each token gives one hold).
            let mut tokens = self.tokens.lock();
            let mut holds = self.holds.lock();
            let mut holders = holders.into_iter();
            for record in held {
                let taker = holders.by_ref().find(|holder| {
                    holds.has_room(topic, *holder, now_ms) && tokens.spend(topic, *holder, now_ms)
                });
                match taker {
                    Some(holder) => {
                        holds.insert(topic, holder, record, now_ms);
                        notified.push(holder);
                    }
                    None => unused.push(record),
                }
            }
        }
        if !unused.is_empty() {
            // Released at once.
            serving.consume.release_holds(topic, &unused);
        }
        self.notify(topic, notified);
    }

    /// Sends `TokenNotify` to each of `holders` (500 ms budget each,
    /// failures ignored: the holder's re-probes find the record once its
    /// hold lapses).
    fn notify(&self, topic: &str, holders: Vec<SocketAddr>) {
        let Some(transport) = self.transport.get().and_then(Weak::upgrade) else {
            return;
        };
        for holder in holders {
            let transport = Arc::clone(&transport);
            let notify = TokenNotify {
                topic: topic.to_owned(),
            };
            tokio::spawn(async move {
                let request = Request::new(
                    Opcode::TOKEN_NOTIFY,
                    narad_protocol::codec::encode_message(&notify),
                );
                if let Err(error) = transport
                    .call_with_timeout(holder, Lane::Consume, request, PROBE_BUDGET)
                    .await
                {
                    tracing::debug!(%holder, %error, "delivery token notification not delivered; the holder re-probes");
                }
            });
        }
    }

    /// A forwarded consume from `peer`. A claim (the `Claim` flag) first
    /// takes the records held for `peer`, then fills up to `max` as any
    /// consume would.
    async fn consume(
        &self,
        serving: &Serving,
        request: ForwardConsume,
        peer: SocketAddr,
    ) -> Result<Response, RpcError> {
        let claimed = match request.scope {
            ConsumeScope::Any if request.claim => {
                let now_ms = serving.clock.now_ms();
                let held = self.holds.lock().take(&request.topic, peer, now_ms);
                let claimed = serving
                    .consume
                    .claim(&request.topic, &held, request.max as usize)
                    .await;
                self.claimed_total
                    .fetch_add(claimed.len() as u64, Ordering::Relaxed);
                claimed
            }
            _ => Vec::new(),
        };
        serving.consume(request, claimed).await
    }

    /// Live delivery tokens of `topic` held here (tests).
    #[cfg(test)]
    pub(crate) fn live_tokens(&self, topic: &str) -> usize {
        self.tokens.lock().live(topic, self.now_ms())
    }

    /// Records held here for `holder`'s claim (tests).
    #[cfg(test)]
    pub(crate) fn held_for(&self, topic: &str, holder: SocketAddr) -> usize {
        self.holds.lock().count(topic, holder, self.now_ms())
    }

    /// Records handed to claimants through their holds (tests,
    /// diagnostics).
    pub fn claimed_total(&self) -> u64 {
        self.claimed_total.load(Ordering::Relaxed)
    }
}

fn decode<M: Message>(body: bytes::Bytes) -> Result<M, RpcError> {
    decode_forward_request::<M>(body)
}

/// How a settle kind on the wire maps to the shard's.
pub(crate) fn settle_of(kind: SettleKind) -> Settle {
    match kind {
        SettleKind::Ack => Settle::Ack,
        SettleKind::Extend => Settle::Extend,
        SettleKind::Nack => Settle::Nack,
    }
}

impl Serving {
    async fn consume(
        &self,
        request: ForwardConsume,
        claimed: Vec<Delivery>,
    ) -> Result<Response, RpcError> {
        let (partition, offset) = match request.scope {
            ConsumeScope::Replay { partition, offset } => (partition, offset),
            ConsumeScope::Any | ConsumeScope::Pinned(_) => {
                return self.lease(request, claimed).await;
            }
        };
        let record = self
            .consume
            .replay(&request.topic, partition, offset)
            .await
            .map_err(|error| replay_refusal(&request.topic, partition, error))?;
        let records = record
            .map(|record| ForwardedRecord {
                partition,
                offset: record.offset,
                key: record.key.into(),
                payload: record.payload.into(),
                committed_at_ms: record.committed_at_ms,
                nonce: 0,
            })
            .into_iter()
            .collect();
        Ok(Response::message(&ConsumeAnswer { records }))
    }

    /// A queue probe (any owned partition) or a pinned consume, waiting at
    /// most the asked wait (the consume service cuts it to its own cap),
    /// after the `claimed` records (a claim's; they never wait). If the
    /// requester cancels, the transport drops this future, and the consume
    /// service leaves no lease behind.
    async fn lease(
        &self,
        request: ForwardConsume,
        claimed: Vec<Delivery>,
    ) -> Result<Response, RpcError> {
        let max = request.max as usize;
        if !claimed.is_empty() && claimed.len() >= max {
            return Ok(answer(claimed));
        }
        let pinned = match request.scope {
            ConsumeScope::Pinned(partition) => Some(partition),
            _ => None,
        };
        let wait = if claimed.is_empty() {
            Duration::from_millis(u64::from(request.wait_ms))
        } else {
            Duration::ZERO
        };
        let deliveries = self
            .consume
            .consume(ConsumeRequest {
                topic: request.topic.clone(),
                partition: pinned,
                max: max - claimed.len(),
                wait,
            })
            .await;
        let deliveries = match deliveries {
            Ok(deliveries) => deliveries,
            Err(_) if !claimed.is_empty() => Vec::new(),
            // A probe of a topic none of whose partitions is owned here any
            // more finds nothing; only a pinned consume hears about it.
            Err(ConsumeError::OwnerUnavailable { partition }) => {
                return Err(not_owner(&request.topic, partition));
            }
            Err(error) => return Err(consume_refusal(error)),
        };
        Ok(answer(claimed.into_iter().chain(deliveries).collect()))
    }

    fn settle(&self, request: ForwardSettle, how: Settle) -> Result<Response, RpcError> {
        let lease = request.lease;
        self.consume
            .settle(
                &request.topic,
                lease.partition,
                lease.offset,
                lease.nonce,
                how,
            )
            .map_err(|error| settle_refusal(&request.topic, lease.partition, error))?;
        Ok(Response::no_content())
    }

    fn settle_batch(&self, batch: AckBatch) -> Response {
        let how = settle_of(batch.how);
        let statuses = batch
            .leases
            .iter()
            .map(|lease| {
                match self.consume.settle(
                    &batch.topic,
                    lease.partition,
                    lease.offset,
                    lease.nonce,
                    how,
                ) {
                    Ok(()) => Status::NO_CONTENT.0,
                    Err(error) => {
                        settle_refusal(&batch.topic, lease.partition, error)
                            .status
                            .0
                    }
                }
            })
            .collect();
        Response::message(&AckBatchAnswer { statuses })
    }

    fn stats(&self, request: &TopicPartitionStats) -> Response {
        let meta = self.replica.topic_meta(&request.topic);
        let entries = request
            .partitions
            .iter()
            .map(|partition| {
                let destination = Destination::new(&request.topic, *partition);
                let owned = matches!(
                    self.replica.route(&destination),
                    Route::Owner { local: true, .. }
                );
                let stats = meta
                    .as_ref()
                    .filter(|_| owned)
                    .and_then(|meta| {
                        self.logs
                            .resolve(&destination, meta.incarnation_id.as_ref())
                            .ok()
                    })
                    .and_then(|log| log.stats().ok());
                match stats {
                    Some(stats) => PartitionStatsEntry {
                        partition: *partition,
                        owned: true,
                        segments: stats.segments as u64,
                        oldest_offset: stats.oldest_offset,
                        next_offset: stats.next_offset,
                        high_watermark: stats.high_watermark,
                        size_bytes: stats.size_bytes,
                        oldest_segment_time_ms: stats.oldest_segment_time_ms,
                        cursors: if request.with_cursors {
                            self.cursors(&request.topic, *partition, request.with_remote_reports)
                        } else {
                            Vec::new()
                        },
                        consume_frontier: request
                            .with_frontier
                            .then(|| {
                                let incarnation = meta.as_ref()?.incarnation_id.as_ref();
                                self.consume.frontier_now(&destination, incarnation)
                            })
                            .flatten(),
                    },
                    None => PartitionStatsEntry {
                        partition: *partition,
                        owned: false,
                        segments: 0,
                        oldest_offset: 0,
                        next_offset: 0,
                        high_watermark: 0,
                        size_bytes: 0,
                        oldest_segment_time_ms: None,
                        cursors: Vec::new(),
                        consume_frontier: None,
                    },
                }
            })
            .collect();
        Response::message(&TopicPartitionStatsAnswer { entries })
    }

    /// Where this node's cursors of `topic`'s `partition` stand, with each
    /// remote child's shipping report when `with_remote`. A parent has at
    /// most as many children as an entry lists; cursors beyond that (none
    /// in a consistent state) are left out, so the requester counts their
    /// lag as unknown.
    fn cursors(&self, topic: &str, partition: u32, with_remote: bool) -> Vec<CursorPosition> {
        self.fanout
            .cursors_of(topic, partition)
            .into_iter()
            .take(STATS_CURSORS_PER_PARTITION_MAX as usize)
            .map(|(child, report)| CursorPosition {
                child: child.to_string(),
                next_offset: report.next_offset,
                remote: report
                    .remote
                    .filter(|_| with_remote)
                    .map(|remote| RemoteCursor {
                        state: remote.state,
                        blocked_at: remote.blocked_at,
                        last_success_at_ms: remote.last_success_at_ms,
                        oldest_pending_ms: remote.oldest_pending_ms,
                    }),
            })
            .collect()
    }
}

fn answer(deliveries: Vec<Delivery>) -> Response {
    let records = deliveries.into_iter().map(forwarded).collect();
    Response::message(&ConsumeAnswer { records })
}

fn forwarded(delivery: Delivery) -> ForwardedRecord {
    ForwardedRecord {
        partition: delivery.partition,
        offset: delivery.record.offset,
        key: delivery.record.key.into(),
        payload: delivery.record.payload.into(),
        committed_at_ms: delivery.record.committed_at_ms,
        nonce: delivery.nonce,
    }
}

fn topic_not_found() -> RpcError {
    RpcError::new(Status::NOT_FOUND, "topic not found")
}

fn consume_refusal(error: ConsumeError) -> RpcError {
    match error {
        ConsumeError::TopicNotFound => topic_not_found(),
        ConsumeError::PartitionOutOfRange { .. } => RpcError::bad_request(error.to_string()),
        ConsumeError::Read(cause) => {
            tracing::error!(error = %cause, "forwarded consume failed in a partition log");
            RpcError::internal("consume failed")
        }
        other => RpcError::internal(other.to_string()),
    }
}

fn replay_refusal(topic: &str, partition: u32, error: ReplayError) -> RpcError {
    match error {
        ReplayError::TopicNotFound => topic_not_found(),
        ReplayError::PartitionOutOfRange { .. } => RpcError::bad_request(error.to_string()),
        ReplayError::Gone { offset } => RpcError::new(
            Status(410),
            format!("offset {offset} aged out of retention"),
        ),
        ReplayError::Unreadable { offset } => RpcError::new(
            Status(410),
            format!("offset {offset} is permanently unreadable"),
        ),
        ReplayError::OwnerUnavailable { .. } => not_owner(topic, partition),
        ReplayError::Read(cause) => {
            tracing::error!(error = %cause, "forwarded replay failed in a partition log");
            RpcError::internal("read failed")
        }
    }
}

/// The spec's single-ack statuses: `410`, `404`, `421`, `503`.
fn settle_refusal(topic: &str, partition: u32, error: SettleError) -> RpcError {
    match error {
        SettleError::TopicNotFound => topic_not_found(),
        SettleError::LeaseGone => RpcError::new(Status(410), error.to_string()),
        SettleError::OwnerUnavailable { .. } => not_owner(topic, partition),
        SettleError::Read(cause) => RpcError::unavailable(format!("settle failed: {cause}")),
    }
}
