//! Shipping a slab of parent records to a remote topic (spec §4, "Remote
//! children"): the "commit" of a remote child's fan-out cursor.
//!
//! The slab is split into lanes; each lane sends its chunks in order, one
//! request in flight per lane, and the lanes run at once. The shipment
//! succeeds only when every chunk of every lane got `202`. Otherwise it
//! reports the failure (and, for a refused record, its parent partition
//! and offset) and moves nothing: the caller's cursor advances only on
//! success, and a later shipment resends the same records with the same
//! idempotency keys, which a target that keeps keys stores once.
//!
//! One [`Shipper`] serves one remote on one node: its gate, chunk byte
//! limit, in-flight slots and the target's capabilities are shared by
//! every link to it. A request leaves only once it holds one of the
//! remote's `max_in_flight` slots; the time it waited for one is reported
//! with the request ([`Exchange::waited_us`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use narad_clock::Clock;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::chunk::{
    ByteLimit, Chunk, ChunkCaps, MESSAGES_MAX, MESSAGES_MAX_OLDER, Record, RecordRef, chunk_lane,
    split_lanes,
};
use crate::client::RemoteClient;
use crate::encode::{LinkIdentity, compress};
use crate::gate::{Admit, Gate, Permit};
use crate::state::{Failure, LinkState, Scope, classify_answer, classify_no_answer};

/// What the target takes, found by [`crate::check::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Records per batch request: 1,000, or 100 for an older target.
    pub max_messages: usize,
    /// Whether the batch route takes `Content-Encoding: zstd`.
    pub zstd: bool,
    /// Whether the batch route takes a per-message `idempotency_key`
    /// (without, a resend after an unanswered request may be stored
    /// twice).
    pub idempotency_keys: bool,
}

impl Default for Capabilities {
    /// A current target (this broker) without zstd: what is safe before
    /// any check.
    fn default() -> Self {
        Self {
            max_messages: MESSAGES_MAX,
            zstd: false,
            idempotency_keys: true,
        }
    }
}

/// One request of a shipment, for `narad_remote_requests_total{code}`,
/// `narad_remote_request_seconds` and `narad_remote_errors_total{class}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// The answer's status; `None` without an answer.
    pub status: Option<u16>,
    /// The failure's state; `None` for a `202`.
    pub failure: Option<LinkState>,
    /// From sending to the end of the answer (or the failure), in µs of
    /// the node's clock.
    pub elapsed_us: u64,
    /// How long the request waited for one of the remote's in-flight
    /// slots before it was sent, in µs of the node's clock
    /// (`narad_remote_inflight_wait_seconds`).
    pub waited_us: u64,
}

/// Counts of one shipment, for the remote's metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShipStats {
    /// Requests sent.
    pub requests: u32,
    /// Each request, in the order the lanes finished them.
    pub exchanges: Vec<Exchange>,
    /// Records in requests answered `202`.
    pub records: usize,
    /// Uncompressed body bytes sent.
    pub body_bytes: u64,
    /// Bytes sent on the wire (compressed where compressed).
    pub wire_bytes: u64,
}

impl ShipStats {
    fn add(&mut self, other: Self) {
        self.requests += other.requests;
        self.exchanges.extend(other.exchanges);
        self.records += other.records;
        self.body_bytes += other.body_bytes;
        self.wire_bytes += other.wire_bytes;
    }
}

/// How a shipment ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShipOutcome {
    /// Every record got `202`: the cursor may advance past the slab.
    Shipped(ShipStats),
    /// Some request failed; the cursor stays. `record` is the parent
    /// record the target refused, for `rejected_record` and
    /// `record_too_large`.
    Failed {
        /// The failure (its `state` is the link's state).
        failure: Failure,
        /// The refused record.
        record: Option<RecordRef>,
        /// What was sent before it failed.
        stats: ShipStats,
    },
    /// The remote's gate is closed: nothing was sent; try again at
    /// `until_ms` (the node clock's monotonic milliseconds).
    Held {
        /// The failure that closed the gate.
        state: LinkState,
        /// When the next probe may go.
        until_ms: u64,
    },
}

/// The shipper of one remote on one node.
#[derive(Debug)]
pub struct Shipper {
    client: Arc<RemoteClient>,
    clock: Arc<dyn Clock>,
    compression: bool,
    gate: Mutex<Gate>,
    limit: Arc<Mutex<ByteLimit>>,
    capabilities: Arc<Mutex<Capabilities>>,
    in_flight: Arc<Semaphore>,
}

impl Shipper {
    /// A shipper sending through `client`; `compression` is the remote's
    /// `limits.compression == zstd` (used only when the target takes it).
    /// At most the client's `max_in_flight` batch requests (at least one)
    /// are in flight at once, over every link and lane of the remote.
    pub fn new(client: Arc<RemoteClient>, clock: Arc<dyn Clock>, compression: bool) -> Self {
        let slots = client.limits().max_in_flight.max(1);
        Self {
            client,
            clock,
            compression,
            gate: Mutex::new(Gate::new()),
            limit: Arc::new(Mutex::new(ByteLimit::default())),
            capabilities: Arc::new(Mutex::new(Capabilities::default())),
            in_flight: Arc::new(Semaphore::new(slots)),
        }
    }

    /// Sets what the target takes (from a check).
    pub fn set_capabilities(&self, capabilities: Capabilities) {
        *lock(&self.capabilities) = capabilities;
    }

    /// What the shipper believes the target takes.
    pub fn capabilities(&self) -> Capabilities {
        *lock(&self.capabilities)
    }

    /// The chunk byte limit now (`narad_remote_chunk_bytes_limit`).
    pub fn chunk_bytes_limit(&self) -> usize {
        lock(&self.limit).bytes()
    }

    /// The gate's probe backoff now (`narad_remote_gate_backoff_seconds`).
    pub fn gate_backoff(&self) -> std::time::Duration {
        lock(&self.gate).backoff()
    }

    /// Ships `slab` to `remote_topic` over `lanes` lanes (1 to 8) for the
    /// link `identity`. Cancel-safe: dropping the future aborts the lanes
    /// (the records count as unanswered and go again later).
    pub async fn ship(
        &self,
        identity: &LinkIdentity,
        remote_topic: &str,
        slab: &[Record],
        lanes: u8,
    ) -> ShipOutcome {
        if slab.is_empty() {
            return ShipOutcome::Shipped(ShipStats::default());
        }
        let permit = match lock(&self.gate).admit(self.clock.now_ms()) {
            Admit::Send(permit) => permit,
            Admit::Wait { until_ms, state } => return ShipOutcome::Held { state, until_ms },
        };
        let mut unreported = Unreported {
            gate: &self.gate,
            permit: Some(permit),
        };
        let capabilities = self.capabilities();
        let caps = ChunkCaps {
            messages: capabilities.max_messages,
            bytes: self.chunk_bytes_limit(),
            idempotency_keys: capabilities.idempotency_keys,
        };
        let zstd = self.compression && capabilities.zstd;
        let topic: Arc<str> = Arc::from(remote_topic);
        let stop = Arc::new(AtomicBool::new(false));
        let mut running = JoinSet::new();
        for lane in split_lanes(slab, lanes) {
            let chunks = chunk_lane(slab, &lane, identity, caps);
            if chunks.is_empty() {
                continue;
            }
            running.spawn(send_lane(Lane {
                client: Arc::clone(&self.client),
                clock: Arc::clone(&self.clock),
                limit: Arc::clone(&self.limit),
                capabilities: Arc::clone(&self.capabilities),
                in_flight: Arc::clone(&self.in_flight),
                topic: Arc::clone(&topic),
                stop: Arc::clone(&stop),
                zstd,
                chunks,
            }));
        }
        let mut stats = ShipStats::default();
        let mut worst: Option<(Failure, Option<RecordRef>)> = None;
        while let Some(joined) = running.join_next().await {
            let (lane_stats, result) = joined.unwrap_or_else(|error| {
                let failure = Failure {
                    state: LinkState::Unknown,
                    record: None,
                    retry_after: None,
                    timed_out: false,
                    status: None,
                    detail: format!("lane task failed: {error}"),
                };
                (ShipStats::default(), Err((failure, None)))
            });
            stats.add(lane_stats);
            if let Err(failed) = result
                && worst
                    .as_ref()
                    .is_none_or(|(current, _)| rank(&failed.0) < rank(current))
            {
                worst = Some(failed);
            }
        }
        let now = self.clock.now_ms();
        unreported.permit = None;
        match worst {
            None => {
                lock(&self.gate).report(now, permit, Ok(()));
                ShipOutcome::Shipped(stats)
            }
            Some((failure, record)) => {
                lock(&self.gate).report(now, permit, Err(&failure));
                ShipOutcome::Failed {
                    failure,
                    record,
                    stats,
                }
            }
        }
    }
}

/// Which of several lanes' failures the shipment reports: the one that
/// says most about the link (remote-wide, then a refused record, then
/// throttling, then a transient failure).
fn rank(failure: &Failure) -> u8 {
    match failure.state.scope() {
        Scope::RemoteWide => 0,
        Scope::Link => 1,
        Scope::Throttled => 2,
        Scope::Transient => 3,
    }
}

/// Hands a permit back to the gate when a shipment's future is dropped
/// before its outcome was reported, so a cancelled probe does not hold the
/// gate's probe slot for ever.
struct Unreported<'a> {
    gate: &'a Mutex<Gate>,
    permit: Option<Permit>,
}

impl Drop for Unreported<'_> {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            lock(self.gate).abandon(permit);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One lane's work, owned so that it runs as its own task.
struct Lane {
    client: Arc<RemoteClient>,
    clock: Arc<dyn Clock>,
    limit: Arc<Mutex<ByteLimit>>,
    capabilities: Arc<Mutex<Capabilities>>,
    in_flight: Arc<Semaphore>,
    topic: Arc<str>,
    stop: Arc<AtomicBool>,
    zstd: bool,
    chunks: Vec<Chunk>,
}

type LaneResult = (ShipStats, Result<(), (Failure, Option<RecordRef>)>);

/// Sends a lane's chunks in order, one at a time, stopping at the first
/// failure (its own or another lane's).
async fn send_lane(mut lane: Lane) -> LaneResult {
    let mut stats = ShipStats::default();
    for chunk in std::mem::take(&mut lane.chunks) {
        if lane.stop.load(Ordering::Relaxed) {
            break;
        }
        let body_bytes = chunk.body.len() as u64;
        let packed = if lane.zstd {
            compress(&chunk.body)
        } else {
            None
        };
        let zstd = packed.is_some();
        let wire = packed.unwrap_or(chunk.body);
        let waiting_us = lane.clock.now_us();
        // The semaphore is never closed; were it, the request would go
        // without a slot rather than never.
        let slot = lane.in_flight.acquire().await.ok();
        if lane.stop.load(Ordering::Relaxed) {
            // Another lane failed while this one waited: the chunk stays
            // unsent.
            break;
        }
        stats.requests += 1;
        stats.body_bytes += body_bytes;
        stats.wire_bytes += wire.len() as u64;
        let started_us = lane.clock.now_us();
        let answer = lane.client.post_batch(&lane.topic, wire, zstd).await;
        drop(slot);
        let result = match &answer {
            Ok(answer) => classify_answer(answer),
            Err(cause) => Err(classify_no_answer(cause)),
        };
        stats.exchanges.push(Exchange {
            status: answer.as_ref().ok().map(|answer| answer.status),
            failure: result.as_ref().err().map(|failure| failure.state),
            elapsed_us: lane.clock.now_us().saturating_sub(started_us),
            waited_us: started_us.saturating_sub(waiting_us),
        });
        match result {
            Ok(()) => {
                lock(&lane.limit).on_success();
                stats.records += chunk.records.len();
            }
            Err(failure) => {
                lane.stop.store(true, Ordering::Relaxed);
                learn(&lane, &failure, chunk.records.len());
                let record = refused_record(&failure, &chunk.records);
                return (stats, Err((failure, record)));
            }
        }
    }
    (stats, Ok(()))
}

/// What a failure teaches about the next chunks: a timeout halves the
/// byte limit; a body the target found too large with more than one
/// record in it halves it too (else the same chunk would fail for ever);
/// a target that says "too many messages" takes at most 100; one that
/// refuses the `idempotency_key` field as unknown gets none.
fn learn(lane: &Lane, failure: &Failure, records: usize) {
    let body_too_large =
        failure.state == LinkState::RecordTooLarge && failure.record.is_none() && records > 1;
    if failure.timed_out || body_too_large {
        lock(&lane.limit).on_timeout();
    }
    if failure.status == Some(400) && failure.record.is_none() {
        if failure.detail.starts_with("too many messages") {
            lock(&lane.capabilities).max_messages = MESSAGES_MAX_OLDER;
        } else if failure.detail.contains("unknown field")
            && failure.detail.contains("idempotency_key")
        {
            lock(&lane.capabilities).idempotency_keys = false;
        }
    }
}

/// The parent record a refusal names: `message <i>` of the chunk, or the
/// chunk's only record for a `413` that names none.
fn refused_record(failure: &Failure, records: &[RecordRef]) -> Option<RecordRef> {
    match (failure.state, failure.record) {
        (LinkState::RejectedRecord | LinkState::RecordTooLarge, Some(index)) => {
            records.get(index).copied()
        }
        (LinkState::RecordTooLarge, None) if records.len() == 1 => records.first().copied(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(state: LinkState, record: Option<usize>) -> Failure {
        Failure {
            state,
            record,
            retry_after: None,
            timed_out: false,
            status: None,
            detail: String::new(),
        }
    }

    #[test]
    fn the_refused_record_is_the_named_message_of_the_chunk() {
        let records = [
            RecordRef {
                partition: 1,
                offset: 10,
            },
            RecordRef {
                partition: 1,
                offset: 12,
            },
        ];
        assert_eq!(
            refused_record(&failure(LinkState::RejectedRecord, Some(1)), &records),
            Some(records[1])
        );
        assert_eq!(
            refused_record(&failure(LinkState::RejectedRecord, Some(5)), &records),
            None
        );
        assert_eq!(
            refused_record(&failure(LinkState::RecordTooLarge, None), &records[..1]),
            Some(records[0])
        );
        assert_eq!(
            refused_record(&failure(LinkState::RecordTooLarge, None), &records),
            None
        );
        assert_eq!(
            refused_record(&failure(LinkState::Unavailable, Some(0)), &records),
            None
        );
    }

    #[test]
    fn the_reported_failure_is_the_most_telling() {
        let mut failures = [
            failure(LinkState::Unavailable, None),
            failure(LinkState::Throttled, None),
            failure(LinkState::RejectedRecord, Some(0)),
            failure(LinkState::AuthFailed, None),
        ];
        failures.sort_by_key(rank);
        assert_eq!(failures[0].state, LinkState::AuthFailed);
        assert_eq!(failures[1].state, LinkState::RejectedRecord);
        assert_eq!(failures[3].state, LinkState::Unavailable);
    }
}
