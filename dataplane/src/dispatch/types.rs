//! What the dispatcher reads, asks and orders.

use std::sync::Arc;
use std::time::Duration;

use super::constants;
use crate::topology::{Destination, NodeId};

/// What the dispatcher needs to know of a WAL record to place it; the
/// payload travels beside it, opaque.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordMeta {
    /// The partition chosen at accept time (the record's home).
    pub home: Destination,
    /// Encoded size of the record as a commit carries it, for the remote
    /// byte budget.
    pub bytes: u64,
    /// The topic incarnation the record was accepted under (WAL format 2);
    /// `None` for a topic without one (format 1).
    pub incarnation: Option<Arc<str>>,
}

/// A record the dispatcher holds in memory: queued, in a commit, or kept as
/// a probe.
#[derive(Debug)]
pub struct Held<P> {
    /// WAL sequence number.
    pub seq: u64,
    /// Placement facts.
    pub meta: RecordMeta,
    /// The record itself, opaque to the dispatcher.
    pub payload: P,
    pub(super) queued_at: Duration,
}

impl<P> Held<P> {
    /// A record held outside the dispatcher's queues (a fan-out bucket's),
    /// for a [`CommitOrder`] it sends through a commit target itself.
    pub fn outside(seq: u64, meta: RecordMeta, payload: P) -> Self {
        Self {
            seq,
            meta,
            payload,
            queued_at: Duration::ZERO,
        }
    }
}

/// A question to the control-plane leader: is this topic (or this
/// incarnation of it) gone for good?
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GoneQuestion {
    /// Topic name.
    pub topic: Arc<str>,
    /// `None`: is the topic gone? `Some(id)`: is this incarnation gone?
    pub incarnation: Option<Arc<str>>,
}

/// Identity of one commit the dispatcher ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommitId(pub u64);

/// A commit to run: these records, in this order, to this destination's
/// owner, within `budget`. The runtime hands the records back with the
/// outcome ([`super::Dispatcher::commit_done`]).
#[derive(Debug)]
pub struct CommitOrder<P> {
    /// Identity to report the outcome under.
    pub id: CommitId,
    /// Where the records are committed (after any reroute).
    pub destination: Destination,
    /// The owner to send them to.
    pub node: NodeId,
    /// Whether the owner is this node.
    pub local: bool,
    /// The records, in WAL order.
    pub records: Vec<Held<P>>,
    /// How long the commit may take before the runtime gives up on it.
    pub budget: Duration,
    /// Whether this is a failing destination's single-record probe.
    pub probe: bool,
}

/// How a commit ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The owner appended, fsynced, read back and made the records visible.
    Committed,
    /// The owner holds another incarnation under the topic's name (a `412`,
    /// or the local combiner's mismatch): not a failure of the destination.
    IncarnationMismatch,
    /// Anything else: an error, a timeout, no answer.
    Failed,
}

/// What the dispatcher asks its runtime to do.
#[derive(Debug)]
pub enum Command<P> {
    /// Run a commit and report it with [`super::Dispatcher::commit_done`].
    Commit(CommitOrder<P>),
    /// Store the checkpoint (first seq not done) in place; the WAL's
    /// checkpoint store makes it durable lazily.
    StoreCheckpoint(u64),
    /// Ask the leader; answer with [`super::Dispatcher::gone_answered`].
    ConfirmGone(GoneQuestion),
    /// These records were discarded after the leader confirmed their topic
    /// or incarnation gone. Logged as a warning per discard.
    Discarded {
        /// What was confirmed gone.
        question: GoneQuestion,
        /// The discarded sequence numbers.
        seqs: Vec<u64>,
    },
}

/// Timing of the dispatcher; defaults are the constants of the seed, tests
/// shrink or keep them (the machine takes time as an argument, so tests need
/// no sleeps either way).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatchConfig {
    /// See [`constants::HUNG_AFTER`].
    pub hung_after: Duration,
    /// See [`constants::COMMIT_BUDGET`].
    pub commit_budget: Duration,
    /// See [`constants::PROBE_BUDGET`].
    pub probe_budget: Duration,
    /// See [`constants::PROBE_INTERVAL`].
    pub probe_interval: Duration,
    /// See [`constants::REROUTE_GRACE`].
    pub reroute_grace: Duration,
    /// See [`constants::RESCAN_INTERVAL`].
    pub rescan_interval: Duration,
    /// See [`constants::UNRESOLVED_RETRY`].
    pub unresolved_retry: Duration,
    /// See [`constants::LINGER_MAX`].
    pub linger_max: Duration,
    /// See [`constants::CONFIRM_NEGATIVE_TTL`].
    pub confirm_negative_ttl: Duration,
    /// See [`constants::COMMIT_SLOTS`].
    pub commit_slots: usize,
    /// See [`constants::REMOTE_COMMIT_BYTES_MAX`].
    pub remote_commit_bytes_max: u64,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            hung_after: constants::HUNG_AFTER,
            commit_budget: constants::COMMIT_BUDGET,
            probe_budget: constants::PROBE_BUDGET,
            probe_interval: constants::PROBE_INTERVAL,
            reroute_grace: constants::REROUTE_GRACE,
            rescan_interval: constants::RESCAN_INTERVAL,
            unresolved_retry: constants::UNRESOLVED_RETRY,
            linger_max: constants::LINGER_MAX,
            confirm_negative_ttl: constants::CONFIRM_NEGATIVE_TTL,
            commit_slots: constants::COMMIT_SLOTS,
            remote_commit_bytes_max: constants::REMOTE_COMMIT_BYTES_MAX,
        }
    }
}
