//! Consume, replay, settle and partition statistics for partitions another
//! data node owns, over the cluster transport (spec §3 "Cross-node
//! consume" and "Forwarded acks", §7).
//!
//! Two halves:
//! - the owning side, [`ForwardService`]: the handler of opcodes 2
//!   (Consume, replay included), 3/18/19 (Ack, ExtendAck, Nack), 32
//!   (AckBatch) and 8 (TopicPartitionStats), answering from the node's own
//!   [`ConsumeService`](crate::consume::service::ConsumeService) and
//!   partition logs. Statuses are those of the spec's single operations
//!   (`410` lease gone, `421` not the owner, `404` no topic, `503`), so the
//!   requester translates them 1:1.
//! - the requesting side, [`Forwarder`]: what the HTTP layer calls for a
//!   partition whose owner is another node: one non-blocking probe per live
//!   remote owner (500 ms each), a pinned consume or replay at the owner
//!   (a long poll gets the client's wait + 2 s), settles with a 2 s budget
//!   (singly up to max(128, 8 × cores) in flight per owner, then queued
//!   into `AckBatch`es, [`coalesce`]), one `AckBatch` per owner in parallel
//!   for an HTTP batch ack, statistics with a 2 s budget, and another
//!   node's report of itself (opcode 33, served by
//!   [`crate::status::NodeStatusService`]).
//!
//! What it guarantees: a lease handed out by an owner keeps the owner's
//! `partition:offset:nonce`, so its ack reaches the owner whichever node
//! takes it. An owner marked dead, or without a known address, is answered
//! `503` without a call; a call that gets no answer is `502` (an ack may have
//! landed: the retry answers `410`).
//!
//! A parked queue consume re-probes remote owners on a 100 ms → 1 s
//! cadence, and, with a routed [`tokens::TokenInbox`], holds delivery
//! tokens at them: a commit there leases a ready record for the token's
//! node for [`tokens::CLAIM_HOLD`], wakes the consume at once, and its next
//! probe of that owner claims the record (the `Claim` flag).
//!
//! A forwarded consume runs on a task of its own: records an owner leased
//! for a consume that went away before the answer arrived are nacked at
//! once. What it does not do is listed in `docs/internals/forwarding.md`.

mod client;
pub mod coalesce;
mod service;
pub mod tokens;

use std::sync::Arc;
use std::time::Duration;

use narad_plog::Record;
use narad_protocol::ForwardedRecord;

pub(crate) use client::Placement;
pub use client::{ForwardError, Forwarder, SettleOutcome, StatsAsk};
pub use service::{FORWARD_OPERATION_LIMIT_NAME, ForwardService};

/// Budget of one non-blocking probe of a remote owner (spec §7).
pub const PROBE_BUDGET: Duration = Duration::from_millis(500);

/// Budget of a forwarded ack, extend or nack, and of one `AckBatch`,
/// dial included (spec §7).
pub const SETTLE_BUDGET: Duration = Duration::from_secs(2);

/// Added to a forwarded long poll's wait for its call budget (spec §7).
pub const LONG_POLL_GRACE: Duration = Duration::from_secs(2);

/// Budget of the statistics calls of one describe, all owners together.
pub const STATS_BUDGET: Duration = Duration::from_secs(2);

/// First pause between re-probes of remote owners by a parked consume.
pub const REPROBE_FIRST: Duration = Duration::from_millis(100);

/// Longest pause between re-probes (the pause doubles up to it).
pub const REPROBE_MAX: Duration = Duration::from_secs(1);

const _: () = assert!(REPROBE_FIRST.as_millis() < REPROBE_MAX.as_millis());

/// A record leased (or replayed) by a remote owner, as the HTTP layer
/// renders it: the receipt handle keeps the owner's partition, offset and
/// nonce, so its ack is routed back to the owner.
pub(crate) fn delivery_of(
    topic: &Arc<str>,
    record: ForwardedRecord,
) -> crate::consume::service::Delivery {
    crate::consume::service::Delivery {
        topic: Arc::clone(topic),
        partition: record.partition,
        record: Record {
            offset: record.offset,
            key: record.key.to_vec(),
            committed_at_ms: record.committed_at_ms,
            payload: record.payload.to_vec(),
            origin: None,
            idempotency_key: Vec::new(),
        },
        nonce: record.nonce,
    }
}

#[cfg(test)]
mod tests;
