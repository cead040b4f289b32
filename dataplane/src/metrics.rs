//! The node's Prometheus metrics, with the spec's names (§9).
//!
//! Each node owns its recorder rather than installing a process-global one,
//! so several nodes in one test process keep separate series and a test
//! can read exactly what its node counted.

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};
use narad_protocol::CALL_SECONDS_BUCKETS;

mod cluster_calls;
mod http;

pub use cluster_calls::ClusterCallMetrics;
pub use http::{AnswerHandles, HttpHandles, RouteHandles, method_label};

/// HTTP requests answered (route, method, status).
pub const HTTP_REQUESTS_TOTAL: &str = "narad_http_requests_total";
/// Seconds to answer an HTTP request (route, method, status).
pub const HTTP_REQUEST_DURATION_SECONDS: &str = "narad_http_request_duration_seconds";
/// Batch produces refused because the node's body budget was full.
pub const HTTP_BATCH_BODY_BUDGET_REJECTIONS_TOTAL: &str =
    "narad_http_batch_body_budget_rejections_total";
/// HTTP requests being answered now.
pub const HTTP_REQUESTS_IN_FLIGHT: &str = "narad_http_requests_in_flight";
/// Request body bytes declared by clients (route).
pub const HTTP_REQUEST_BYTES_IN_TOTAL: &str = "narad_http_request_bytes_in_total";
/// Response body bytes sent (route): the exact length of each answer's
/// body, which every handler knows before it answers.
pub const HTTP_RESPONSE_BYTES_OUT_TOTAL: &str = "narad_http_response_bytes_out_total";
/// Messages appended on this node as their partition's owner (topic,
/// partition).
pub const MESSAGES_PRODUCED_TOTAL: &str = "narad_messages_produced_total";
/// Payload bytes appended on this node as owner.
pub const BYTES_PRODUCED_TOTAL: &str = "narad_bytes_produced_total";
/// Records a partition owner acknowledged without storing them again,
/// because the partition already stored them: a re-sent WAL record (same
/// origin) or a produce retried with the same idempotency key within the
/// window (topic, partition).
pub const PRODUCE_DUPLICATES_SKIPPED_TOTAL: &str = "narad_produce_duplicates_skipped_total";
/// Commits this node's dispatcher stored in a sibling of their records'
/// home partition, after the home owner was dead or failing past the
/// reroute grace: the one seam that can still store a record twice.
pub const DISPATCH_REROUTES_TOTAL: &str = "narad_dispatch_reroutes_total";
/// Records those rerouted commits stored.
pub const DISPATCH_REROUTED_RECORDS_TOTAL: &str = "narad_dispatch_rerouted_records_total";
/// Times the dispatcher panicked and started again from its checkpoint.
pub const DISPATCH_RESTARTS_TOTAL: &str = "narad_dispatch_restarts_total";
/// 1 while the dispatcher's reader stands at its lookahead (16 windows past
/// the checkpoint) with durable records beyond: the record at the
/// checkpoint holds every partition's dispatch on this node.
pub const DISPATCH_LOOKAHEAD_EXHAUSTED: &str = "narad_dispatch_lookahead_exhausted";
/// Destinations (partitions) whose commits from this node fail now.
pub const DISPATCH_FAILING_DESTINATIONS: &str = "narad_dispatch_failing_destinations";
/// How long the destination failing longest has failed, seconds (0 when
/// none fails).
pub const DISPATCH_LONGEST_FAILURE_SECONDS: &str = "narad_dispatch_longest_failure_seconds";
/// Produces refused by a topic rule (topic, reason).
pub const PRODUCE_REJECTIONS_TOTAL: &str = "narad_produce_rejections_total";
/// 1 once the ingress WAL latched a write or fdatasync failure.
pub const INGRESS_WAL_FAILED: &str = "narad_ingress_wal_failed";
/// Durable next WAL sequence number minus the stored checkpoint: the
/// records a restart would dispatch again.
pub const INGRESS_DISPATCH_BACKLOG_RECORDS: &str = "narad_ingress_dispatch_backlog_records";
/// Seconds each partition commit spent in its write and fdatasync (topic,
/// partition): the two run linked on a storage thread, one wait.
pub const STORAGE_FSYNC_DURATION_SECONDS: &str = "narad_storage_fsync_duration_seconds";
/// Bytes of partition segments retention deleted (topic, partition,
/// reason; a data node deletes by `age` only).
pub const STORAGE_RETENTION_BYTES_DELETED_TOTAL: &str =
    "narad_storage_retention_bytes_deleted_total";
/// Offsets held by the segments retention deleted (topic, partition,
/// reason).
pub const STORAGE_RETENTION_MESSAGES_DELETED_TOTAL: &str =
    "narad_storage_retention_messages_deleted_total";
/// Seconds one retention pass over the node's open logs took.
pub const STORAGE_RETENTION_RUN_DURATION_SECONDS: &str =
    "narad_storage_retention_run_duration_seconds";
/// Partition logs the cold-retention walk opened because their oldest
/// segment was older than the topic's retention (each is swept at once).
pub const COLD_RETENTION_SWEPT_TOTAL: &str = "narad_cold_retention_swept_total";
/// Partition logs closed because nobody held or used them for
/// `storage.idle_log_eviction_ms`.
pub const IDLE_LOGS_EVICTED_TOTAL: &str = "narad_idle_logs_evicted_total";
/// Cold-retention walks that panicked (the next walk runs anyway).
pub const COLD_RETENTION_PANICS_TOTAL: &str = "narad_cold_retention_panics_total";
/// Bytes of every file under the data directory.
pub const DATA_DIR_SIZE_BYTES: &str = "narad_data_dir_size_bytes";
/// Bytes the file system holding the data directory still has for this
/// process (statvfs `f_bavail` × `f_frsize`).
pub const DATA_DIR_AVAILABLE_BYTES: &str = "narad_data_dir_available_bytes";
/// Partition moves to this node in flight (gauge).
pub const MOVES_INFLIGHT: &str = "narad_moves_inflight";
/// Partition moves to this node that ended (counter; outcome `completed`,
/// or `force_promoted`).
pub const MOVES_TOTAL: &str = "narad_moves_total";
/// How long completed moves took, from the worker's start to the flip
/// (histogram).
pub const MOVES_DURATION_SECONDS: &str = "narad_moves_duration_seconds";
/// Bytes copied by completed moves (counter).
pub const MOVES_BYTES_TOTAL: &str = "narad_moves_bytes_total";
/// Moves to this node that cannot go on by themselves (gauge; reason
/// `copy_unverifiable`, `source_dead_copy_behind`).
pub const MOVES_BLOCKED: &str = "narad_moves_blocked";
/// Buckets of [`MOVES_DURATION_SECONDS`]: a small partition moves in
/// seconds, a large one in minutes to hours.
pub const MOVES_DURATION_BUCKETS_SECONDS: [f64; 10] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1_800.0, 3_600.0,
];
/// Calls this node made to peers over the cluster transport (op, outcome
/// `ok`/`rejected`/`failed`/`timeout`/`error`, as
/// [`narad_protocol::CallOutcome`] sorts them).
pub const CLUSTER_RPC_REQUESTS_TOTAL: &str = "narad_cluster_rpc_requests_total";
/// Seconds a call to a peer took, dial and handshake included (op).
pub const CLUSTER_RPC_REQUEST_SECONDS: &str = "narad_cluster_rpc_request_seconds";
/// Topics in the metadata this node holds.
pub const TOPICS_TOTAL: &str = "narad_topics_total";
/// Partitions this node owns.
pub const PARTITIONS_TOTAL: &str = "narad_partitions_total";
/// Partition logs open on this node.
pub const OPEN_PARTITION_LOGS: &str = "narad_open_partition_logs";
/// Seconds the node took to start (WAL open and recovery through the API
/// being ready to serve).
pub const BOOT_DURATION_SECONDS: &str = "narad_boot_duration_seconds";
/// Errors by component and kind (e.g. `http`/`5xx`).
pub const ERRORS_TOTAL: &str = "narad_errors_total";
/// Credential checks waiting for a bcrypt slot.
pub const AUTH_VERIFY_QUEUED: &str = "narad_auth_verify_queued";
/// Queue deliveries (topic, partition); a redelivery counts again, a
/// replay read does not.
pub const MESSAGES_CONSUMED_TOTAL: &str = "narad_messages_consumed_total";
/// Payload bytes of queue deliveries (topic, partition).
pub const BYTES_CONSUMED_TOTAL: &str = "narad_bytes_consumed_total";
/// Seconds a queue consume waited (topic, outcome =
/// `hit`/`timeout`/`cancelled`/`no_wait`).
pub const CONSUME_WAIT_SECONDS: &str = "narad_consume_wait_seconds";
/// Queue consumes answered `204` (topic).
pub const CONSUME_EMPTY_TOTAL: &str = "narad_consume_empty_total";
/// High watermark minus the consumer frontier (topic, partition), for
/// every partition this node owns; published by the partition poller.
pub const CONSUMER_LAG_MESSAGES: &str = "narad_consumer_lag_messages";
/// Seconds since the record at the consumer frontier was committed (topic,
/// partition); 0 when nothing is unconsumed. Published by the partition
/// poller.
pub const OLDEST_UNCONSUMED_MESSAGE_AGE_SECONDS: &str =
    "narad_oldest_unconsumed_message_age_seconds";
/// Bytes of a partition's segment files (topic, partition); published by
/// the partition poller.
pub const PARTITION_SIZE_BYTES: &str = "narad_partition_size_bytes";
/// Segment files of a partition (topic, partition); published by the
/// partition poller.
pub const SEGMENTS: &str = "narad_segments";
/// Bytes of the segment files of a topic's partitions this node owns
/// (topic); published by the partition poller.
pub const TOPIC_BYTES: &str = "narad_topic_bytes";
/// When a poller loop last finished a pass, in Unix seconds (loop).
pub const POLLER_LAST_SUCCESS_TIMESTAMP_SECONDS: &str =
    "narad_poller_last_success_timestamp_seconds";
/// Heartbeats to the control plane that failed since the last one a
/// leader took (gauge; 0 after a success).
pub const MEMBER_HEARTBEAT_FAILURES: &str = "narad_member_heartbeat_failures";
/// When a control-plane leader last took this node's heartbeat (or its
/// registration), in Unix seconds of the node's clock.
pub const MEMBER_HEARTBEAT_LAST_SUCCESS_TIMESTAMP_SECONDS: &str =
    "narad_member_heartbeat_last_success_timestamp_seconds";
/// Panics of the ingress WAL's background workers (worker `flush`, `prep`,
/// `checkpoint`); a flush or checkpoint panic latches what it wrote, a
/// preparation panic is dropped and the thread goes on.
pub const WAL_WORKER_PANICS_TOTAL: &str = "narad_wal_worker_panics_total";
/// Times the retention thread was restarted after a panic.
pub const REAPER_RESTARTS: &str = "narad_reaper_restarts";
/// Seconds one schema validation of a produced payload took.
pub const SCHEMA_VALIDATION_SECONDS: &str = "narad_schema_validation_seconds";
/// Leases held now (topic, partition).
pub const INFLIGHT_SIZE: &str = "narad_inflight_size";
/// Offsets settled above the frontier (topic, partition).
pub const ACKED_AHEAD_SIZE: &str = "narad_acked_ahead_size";
/// Messages retention deleted before any consumer settled them (topic,
/// partition): data loss, alert on any value above 0.
pub const CONSUMER_DROPPED_MESSAGES: &str = "narad_consumer_dropped_messages";
/// Permanently unreadable records the consumer skipped (topic, partition):
/// data loss, alert on any increase.
pub const CONSUMER_CORRUPT_SKIPPED_TOTAL: &str = "narad_consumer_corrupt_skipped_total";
/// Consume shards (the lease table, position and log hold of a partition
/// consumed here) open on this node.
pub const CONSUME_SHARDS_OPEN: &str = "narad_consume_shards_open";
/// Consume shards released because nobody used them for
/// `consume.idle_shard_release_ms`.
pub const CONSUME_SHARDS_RELEASED_TOTAL: &str = "narad_consume_shards_released_total";
/// Leases renewed by `extend` (topic).
pub const ACK_EXTENDED_TOTAL: &str = "narad_ack_extended_total";
/// Leases released for redelivery (topic): nacks, and batch-consume
/// records past the answer's size limit.
pub const NACK_TOTAL: &str = "narad_nack_total";

/// Produces refused by a topic's schema, by reason: `depth` (nested past
/// 256 levels), `malformed` (not one JSON text), `invalid` (the schema
/// refused it), `busy` (no validation slot within 5 s).
pub const SCHEMA_REJECTIONS_TOTAL: &str = "narad_schema_rejections_total";
/// Costly schema validations (a payload over 16 KiB) holding one of the
/// node's validation slots now.
pub const SCHEMA_VALIDATIONS_IN_FLIGHT: &str = "narad_schema_validations_in_flight";
/// The `reason` labels of [`SCHEMA_REJECTIONS_TOTAL`].
pub const SCHEMA_REJECTION_REASONS: [&str; 4] = ["depth", "malformed", "invalid", "busy"];

/// Parent records a cursor has not delivered to its child yet (parent,
/// child, partition): the parent's high watermark less the cursor.
pub const FANOUT_LAG_MESSAGES: &str = "narad_fanout_lag_messages";
/// How late a delay child's oldest due, undelivered record is (parent,
/// child, partition); the signal for delay children, whose offset lag is
/// about rate × delay by design.
pub const FANOUT_DUE_LAG_SECONDS: &str = "narad_fanout_due_lag_seconds";
/// A remote child's link state per parent partition (parent, child,
/// partition, state): 1 for the state its cursor is in, 0 for the others.
pub const FANOUT_REMOTE_STATE: &str = "narad_fanout_remote_state";
/// How long the oldest record a remote child's cursor has not shipped yet
/// has waited since its parent commit (parent, child, partition).
pub const FANOUT_REMOTE_LAG_SECONDS: &str = "narad_fanout_remote_lag_seconds";
/// When a remote child's lane was last stored in full (parent, child).
pub const FANOUT_REMOTE_LAST_SUCCESS_TIMESTAMP_SECONDS: &str =
    "narad_fanout_remote_last_success_timestamp_seconds";
/// Parent records a remote child's cursor let go while waiting to send
/// them again, and reads again from the parent's log, because the node
/// held more than `remotes.max_held_bytes` (parent, child).
pub const FANOUT_REMOTE_REREADS_TOTAL: &str = "narad_fanout_remote_rereads_total";
/// Periodic looks at a remote child's target that failed (parent, child):
/// no answer, a refusal, the topic gone, or another incarnation of it.
pub const FANOUT_REMOTE_CHECK_FAILURES_TOTAL: &str = "narad_fanout_remote_check_failures_total";
/// Parent records an operator's skip passed over (parent, child).
pub const FANOUT_REMOTE_SKIPPED_RECORDS_TOTAL: &str = "narad_fanout_remote_skipped_records_total";
/// Seconds until the parent's retention deletes the oldest record this
/// node's cursors of a remote child have not shipped (parent, child); the
/// whole retention while nothing waits. Not served for a parent kept
/// forever.
pub const FANOUT_REMOTE_RETENTION_HEADROOM_SECONDS: &str =
    "narad_fanout_remote_retention_headroom_seconds";
/// Requests to a remote by answer status (remote, code; `none` without an
/// answer).
pub const REMOTE_REQUESTS_TOTAL: &str = "narad_remote_requests_total";
/// How long a request to a remote took (remote).
pub const REMOTE_REQUEST_SECONDS: &str = "narad_remote_request_seconds";
/// How long a request to a remote waited for one of the remote's
/// `limits.max_in_flight` slots on this node before it was sent (remote).
pub const REMOTE_INFLIGHT_WAIT_SECONDS: &str = "narad_remote_inflight_wait_seconds";
/// Failed requests to a remote by link state (remote, class).
pub const REMOTE_ERRORS_TOTAL: &str = "narad_remote_errors_total";
/// Uncompressed request body bytes sent to a remote (remote).
pub const REMOTE_BODY_BYTES_TOTAL: &str = "narad_remote_body_bytes_total";
/// Request bytes on the wire to a remote, compressed where compressed
/// (remote).
pub const REMOTE_WIRE_BYTES_TOTAL: &str = "narad_remote_wire_bytes_total";
/// A remote's chunk byte limit now (remote): 960 KiB, halved after
/// timeouts down to 64 KiB.
pub const REMOTE_CHUNK_BYTES_LIMIT: &str = "narad_remote_chunk_bytes_limit";
/// A remote's gate backoff now (remote): 0 while open.
pub const REMOTE_GATE_BACKOFF_SECONDS: &str = "narad_remote_gate_backoff_seconds";
/// The last periodic look's round trip to a remote (remote): one small
/// `GET` of the target topic, answered.
pub const REMOTE_RTT_SECONDS: &str = "narad_remote_rtt_seconds";
/// Refused destinations of a remote (remote, reason): `address`, a
/// request the outbound address guard refused after name resolution;
/// `port` or `allowlist`, a URL this node's `remotes.allowed_ports` or
/// `remotes.allowed_hosts` refused (at add, change, test, attach check or
/// before shipping).
pub const REMOTE_DESTINATION_REFUSED_TOTAL: &str = "narad_remote_destination_refused_total";
/// Records sent to a remote again (remote): a lane's records at or below
/// the highest offset that lane already sent, after a failure.
pub const REMOTE_RESENT_RECORDS_TOTAL: &str = "narad_remote_resent_records_total";
/// Key and payload bytes of the parent records this node holds in memory
/// for a remote now (remote): lanes being shipped and lanes waiting to be
/// sent again, against `remotes.max_held_bytes`.
pub const REMOTE_HELD_BYTES: &str = "narad_remote_held_bytes";
/// Records committed to children (parent, child).
pub const FANOUT_COMMITTED_TOTAL: &str = "narad_fanout_committed_total";
/// Parent records a cursor skipped (parent, child): aged out by retention
/// before it read them, or unreadable. Data loss; alert on any increase.
pub const FANOUT_CHILD_DROPPED_MESSAGES: &str = "narad_fanout_child_dropped_messages";
/// Records per slab a cursor delivered.
pub const FANOUT_BATCH_RECORDS: &str = "narad_fanout_batch_records";
/// Key and payload bytes per slab a cursor delivered.
pub const FANOUT_BATCH_BYTES: &str = "narad_fanout_batch_bytes";

/// Upper bounds of the `narad_fanout_batch_records` buckets, up to a full
/// slab.
pub const FANOUT_BATCH_RECORDS_BUCKETS: [f64; 8] =
    [1.0, 4.0, 16.0, 64.0, 256.0, 1_024.0, 2_048.0, 4_096.0];
/// Upper bounds of the `narad_fanout_batch_bytes` buckets, up to a full
/// slab's 4 MiB.
pub const FANOUT_BATCH_BYTES_BUCKETS: [f64; 8] = [
    256.0,
    4_096.0,
    16_384.0,
    65_536.0,
    262_144.0,
    1_048_576.0,
    2_097_152.0,
    4_194_304.0,
];

/// Upper bounds of the `narad_storage_fsync_duration_seconds` buckets:
/// from a write-back cache's fraction of a millisecond to a stalled disk.
pub const STORAGE_FSYNC_BUCKETS_SECONDS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Upper bounds of the `narad_storage_retention_run_duration_seconds`
/// buckets: from a node with a few idle logs to thousands of logs each
/// dating a sealed segment from disk.
pub const STORAGE_RETENTION_RUN_BUCKETS_SECONDS: [f64; 9] =
    [0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0];
/// Upper bounds of the `narad_schema_validation_seconds` buckets: from a
/// small payload's few microseconds to a large one's validation under a
/// slot.
pub const SCHEMA_VALIDATION_BUCKETS_SECONDS: [f64; 12] = [
    0.000_05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1.0,
];
/// Upper bounds of the `narad_http_request_duration_seconds` buckets:
/// Prometheus's default ones, up to a long poll's 10 s.
pub const HTTP_DURATION_BUCKETS_SECONDS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Upper bounds of the `narad_consume_wait_seconds` buckets: from a
/// record that was ready at once to the 10 s wait ceiling.
pub const CONSUME_WAIT_BUCKETS_SECONDS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The bucket bounds of every histogram this registry serves. A histogram
/// missing here would be rendered as a summary.
const BUCKETS: [(&str, &[f64]); 11] = [
    (CONSUME_WAIT_SECONDS, &CONSUME_WAIT_BUCKETS_SECONDS),
    (FANOUT_BATCH_RECORDS, &FANOUT_BATCH_RECORDS_BUCKETS),
    (FANOUT_BATCH_BYTES, &FANOUT_BATCH_BYTES_BUCKETS),
    (
        HTTP_REQUEST_DURATION_SECONDS,
        &HTTP_DURATION_BUCKETS_SECONDS,
    ),
    (
        STORAGE_FSYNC_DURATION_SECONDS,
        &STORAGE_FSYNC_BUCKETS_SECONDS,
    ),
    (
        STORAGE_RETENTION_RUN_DURATION_SECONDS,
        &STORAGE_RETENTION_RUN_BUCKETS_SECONDS,
    ),
    (MOVES_DURATION_SECONDS, &MOVES_DURATION_BUCKETS_SECONDS),
    (
        SCHEMA_VALIDATION_SECONDS,
        &SCHEMA_VALIDATION_BUCKETS_SECONDS,
    ),
    (CLUSTER_RPC_REQUEST_SECONDS, &CALL_SECONDS_BUCKETS),
    (REMOTE_REQUEST_SECONDS, &CALL_SECONDS_BUCKETS),
    (REMOTE_INFLIGHT_WAIT_SECONDS, &CALL_SECONDS_BUCKETS),
];

static METADATA: Metadata<'static> = Metadata::new("narad_dataplane", Level::INFO, None);

/// Partitions (and, apart, topics) whose handles a registry keeps at most;
/// past it the cache starts afresh (the series stay, handles are taken
/// again on next use).
pub const HANDLES_CACHED_MAX: usize = 65_536;

/// The outcomes of [`CONSUME_WAIT_SECONDS`], in [`TopicHandles::consume_wait`]'s
/// order.
pub const CONSUME_WAIT_OUTCOMES: [&str; 4] = ["hit", "timeout", "cancelled", "no_wait"];

/// Handles on one partition's traffic series, taken once per partition
/// ([`NodeMetrics::partition`]): the produce and consume paths count
/// through them without building keys or looking up the registry.
#[derive(Debug)]
pub struct PartitionHandles {
    /// [`MESSAGES_PRODUCED_TOTAL`].
    pub messages_produced: Counter,
    /// [`BYTES_PRODUCED_TOTAL`].
    pub bytes_produced: Counter,
    /// [`PRODUCE_DUPLICATES_SKIPPED_TOTAL`].
    pub duplicates_skipped: Counter,
    /// [`STORAGE_FSYNC_DURATION_SECONDS`].
    pub fsync_seconds: Histogram,
    /// [`MESSAGES_CONSUMED_TOTAL`].
    pub messages_consumed: Counter,
    /// [`BYTES_CONSUMED_TOTAL`].
    pub bytes_consumed: Counter,
}

/// A partition's topic and index, the key of its handles.
type PartitionKey = (Arc<str>, u32);

/// Handles on one topic's series, taken once per topic
/// ([`NodeMetrics::topic`]): the consume ones at once, the rest at their
/// first count, so a topic shows no extend, nack or refusal series before
/// it had one.
#[derive(Debug)]
pub struct TopicHandles {
    topic: Arc<str>,
    /// [`CONSUME_EMPTY_TOTAL`].
    pub consume_empty: Counter,
    /// [`CONSUME_WAIT_SECONDS`] per outcome, as [`CONSUME_WAIT_OUTCOMES`].
    pub consume_wait: [Histogram; 4],
    extends: OnceLock<Counter>,
    nacks: OnceLock<Counter>,
    /// [`PRODUCE_REJECTIONS_TOTAL`] per reason, as
    /// [`PRODUCE_REJECTION_REASONS`].
    refusals: [OnceLock<Counter>; PRODUCE_REJECTION_REASONS.len()],
}

/// The reasons of [`PRODUCE_REJECTIONS_TOTAL`].
pub const PRODUCE_REJECTION_REASONS: [&str; 3] = ["schema", "delayed_child", "remote_child"];

impl TopicHandles {
    fn lazily<'a>(
        &self,
        slot: &'a OnceLock<Counter>,
        metrics: &NodeMetrics,
        name: &'static str,
        reason: Option<&'static str>,
    ) -> &'a Counter {
        slot.get_or_init(|| {
            let mut labels = vec![("topic", self.topic.to_string())];
            labels.extend(reason.map(|reason| ("reason", reason.to_owned())));
            metrics.counter(name, &labels)
        })
    }

    /// [`ACK_EXTENDED_TOTAL`] of this topic.
    pub fn extends(&self, metrics: &NodeMetrics) -> &Counter {
        self.lazily(&self.extends, metrics, ACK_EXTENDED_TOTAL, None)
    }

    /// [`NACK_TOTAL`] of this topic.
    pub fn nacks(&self, metrics: &NodeMetrics) -> &Counter {
        self.lazily(&self.nacks, metrics, NACK_TOTAL, None)
    }

    /// [`PRODUCE_REJECTIONS_TOTAL`] of this topic for the reason at
    /// `reason` in [`PRODUCE_REJECTION_REASONS`].
    pub fn refusals(&self, metrics: &NodeMetrics, reason: usize) -> &Counter {
        let label = PRODUCE_REJECTION_REASONS[reason];
        self.lazily(
            &self.refusals[reason],
            metrics,
            PRODUCE_REJECTIONS_TOTAL,
            Some(label),
        )
    }
}

/// One series of a published gauge family: its labels and value.
pub type Series = (Vec<(&'static str, String)>, f64);

/// One node's metrics registry.
///
/// Two ways in: the recorder's series ([`Self::count`], [`Self::set`],
/// handles from [`Self::counter`] and friends), which live as long as the
/// registry; and published gauge families ([`Self::publish_gauges`]), each
/// replaced whole by its one owner at every refresh, so a series that is no
/// longer published (a partition that moved away) is gone from the next
/// scrape. A family name is used one way or the other, never both.
pub struct NodeMetrics {
    recorder: PrometheusRecorder,
    /// The standard `process_*` series, read from the OS at each render.
    process: metrics_process::Collector,
    /// Gauge families replaced whole by their owner, by name.
    published: parking_lot::RwLock<BTreeMap<&'static str, Vec<Series>>>,
    /// Handles taken per partition, at most [`HANDLES_CACHED_MAX`].
    partitions: parking_lot::RwLock<HashMap<PartitionKey, Arc<PartitionHandles>>>,
    /// Handles taken per topic, at most [`HANDLES_CACHED_MAX`].
    topics: parking_lot::RwLock<HashMap<Arc<str>, Arc<TopicHandles>>>,
    /// The HTTP series' handles, taken at the first request.
    http: OnceLock<HttpHandles>,
}

impl fmt::Debug for NodeMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeMetrics").finish_non_exhaustive()
    }
}

impl Default for NodeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeMetrics {
    /// An empty registry.
    pub fn new() -> Self {
        let builder = BUCKETS
            .iter()
            .try_fold(PrometheusBuilder::new(), |builder, (name, buckets)| {
                builder.set_buckets_for_metric(Matcher::Full((*name).to_owned()), buckets)
            })
            .expect("the bucket lists are not empty");
        let recorder = builder.build_recorder();
        let process = metrics_process::Collector::default();
        metrics::with_local_recorder(&recorder, || process.describe());
        Self {
            recorder,
            process,
            published: parking_lot::RwLock::new(BTreeMap::new()),
            partitions: parking_lot::RwLock::new(HashMap::new()),
            topics: parking_lot::RwLock::new(HashMap::new()),
            http: OnceLock::new(),
        }
    }

    /// The handles of the HTTP series.
    pub fn http(&self) -> &HttpHandles {
        self.http.get_or_init(|| HttpHandles::new(self))
    }

    /// The handles of partition `partition` of `topic`, taken from the
    /// registry on first use only.
    pub fn partition(&self, topic: &Arc<str>, partition: u32) -> Arc<PartitionHandles> {
        let key = (Arc::clone(topic), partition);
        if let Some(handles) = self.partitions.read().get(&key) {
            return Arc::clone(handles);
        }
        let labels = [
            ("topic", topic.to_string()),
            ("partition", partition.to_string()),
        ];
        let handles = Arc::new(PartitionHandles {
            messages_produced: self.counter(MESSAGES_PRODUCED_TOTAL, &labels),
            bytes_produced: self.counter(BYTES_PRODUCED_TOTAL, &labels),
            duplicates_skipped: self.counter(PRODUCE_DUPLICATES_SKIPPED_TOTAL, &labels),
            fsync_seconds: self.histogram(STORAGE_FSYNC_DURATION_SECONDS, &labels),
            messages_consumed: self.counter(MESSAGES_CONSUMED_TOTAL, &labels),
            bytes_consumed: self.counter(BYTES_CONSUMED_TOTAL, &labels),
        });
        let mut cached = self.partitions.write();
        if cached.len() >= HANDLES_CACHED_MAX {
            cached.clear();
        }
        Arc::clone(cached.entry(key).or_insert(handles))
    }

    /// The handles of topic `topic`, taken from the registry on first use
    /// only.
    pub fn topic(&self, topic: &str) -> Arc<TopicHandles> {
        if let Some(handles) = self.topics.read().get(topic) {
            return Arc::clone(handles);
        }
        let wait = |outcome: &str| {
            self.histogram(
                CONSUME_WAIT_SECONDS,
                &[("topic", topic.to_owned()), ("outcome", outcome.to_owned())],
            )
        };
        let handles = Arc::new(TopicHandles {
            topic: Arc::from(topic),
            consume_empty: self.counter(CONSUME_EMPTY_TOTAL, &[("topic", topic.to_owned())]),
            consume_wait: CONSUME_WAIT_OUTCOMES.map(wait),
            extends: OnceLock::new(),
            nacks: OnceLock::new(),
            refusals: std::array::from_fn(|_| OnceLock::new()),
        });
        let mut cached = self.topics.write();
        if cached.len() >= HANDLES_CACHED_MAX {
            cached.clear();
        }
        Arc::clone(cached.entry(Arc::from(topic)).or_insert(handles))
    }

    /// A handle on counter `name` with `labels`: take it once and keep it,
    /// so a hot path counts without building a key or looking the series
    /// up in the registry.
    pub fn counter(&self, name: &'static str, labels: &[(&'static str, String)]) -> Counter {
        self.recorder
            .register_counter(&key(name, labels), &METADATA)
    }

    /// A handle on gauge `name` with `labels` (see [`Self::counter`]).
    pub fn gauge(&self, name: &'static str, labels: &[(&'static str, String)]) -> Gauge {
        self.recorder.register_gauge(&key(name, labels), &METADATA)
    }

    /// A handle on histogram `name` with `labels` (see [`Self::counter`]);
    /// the series is served from the moment it is taken.
    pub fn histogram(&self, name: &'static str, labels: &[(&'static str, String)]) -> Histogram {
        self.recorder
            .register_histogram(&key(name, labels), &METADATA)
    }

    /// Folds the histogram samples recorded since the last fold into the
    /// histograms' buckets, and frees them.
    ///
    /// The recorder keeps every observation of a histogram (16 bytes each)
    /// until a render or a fold empties it; a node nobody scrapes would
    /// keep them all, a few samples per message, for as long as it runs.
    /// The partition poller folds at every pass (5 s), so they are bounded
    /// by what one pass interval records. A render folds too; a fold
    /// changes nothing a scrape sees.
    pub fn fold_histogram_samples(&self) {
        self.recorder.handle().run_upkeep();
    }

    /// Replaces gauge family `name` with exactly `series`: a series not in
    /// it is no longer served. An empty list serves no series (and no
    /// `# TYPE` line).
    pub fn publish_gauges(&self, name: &'static str, series: Vec<Series>) {
        self.published.write().insert(name, series);
    }

    /// Adds `value` to counter `name` with `labels`.
    pub fn count(&self, name: &'static str, labels: &[(&'static str, String)], value: u64) {
        self.recorder
            .register_counter(&key(name, labels), &METADATA)
            .increment(value);
    }

    /// Sets counter `name` with `labels` to `total`, for totals another
    /// component keeps (read at scrape time).
    pub fn count_absolute(
        &self,
        name: &'static str,
        labels: &[(&'static str, String)],
        total: u64,
    ) {
        self.recorder
            .register_counter(&key(name, labels), &METADATA)
            .absolute(total);
    }

    /// Sets gauge `name` with `labels`.
    pub fn set(&self, name: &'static str, labels: &[(&'static str, String)], value: f64) {
        self.recorder
            .register_gauge(&key(name, labels), &METADATA)
            .set(value);
    }

    /// Adds `delta` (may be negative) to gauge `name` with `labels`.
    pub fn add(&self, name: &'static str, labels: &[(&'static str, String)], delta: f64) {
        let gauge = self.recorder.register_gauge(&key(name, labels), &METADATA);
        if delta >= 0.0 {
            gauge.increment(delta);
        } else {
            gauge.decrement(-delta);
        }
    }

    /// Records `elapsed` in histogram `name` with `labels`.
    pub fn observe(
        &self,
        name: &'static str,
        labels: &[(&'static str, String)],
        elapsed: Duration,
    ) {
        self.recorder
            .register_histogram(&key(name, labels), &METADATA)
            .record(elapsed.as_secs_f64());
    }

    /// Makes histogram `name` with `labels` exist with no observation, so
    /// its series are served (at zero) before the first event.
    pub fn register_histogram(&self, name: &'static str, labels: &[(&'static str, String)]) {
        drop(
            self.recorder
                .register_histogram(&key(name, labels), &METADATA),
        );
    }

    /// Records `value` (a count or a size, not a time) in histogram
    /// `name` with `labels`.
    pub fn observe_value(&self, name: &'static str, labels: &[(&'static str, String)], value: f64) {
        self.recorder
            .register_histogram(&key(name, labels), &METADATA)
            .record(value);
    }

    /// The Prometheus text exposition of every series, the `process_*`
    /// ones read now.
    pub fn render(&self) -> String {
        metrics::with_local_recorder(&self.recorder, || self.process.collect());
        let mut text = self.recorder.handle().render();
        for (name, series) in self.published.read().iter() {
            render_gauge_family(&mut text, name, series);
        }
        text
    }
}

/// Appends one gauge family in the Prometheus text format.
fn render_gauge_family(text: &mut String, name: &str, series: &[Series]) {
    if series.is_empty() {
        return;
    }
    if !text.is_empty() && !text.ends_with("\n\n") {
        text.push('\n');
    }
    let _ = writeln!(text, "# TYPE {name} gauge");
    for (labels, value) in series {
        text.push_str(name);
        if !labels.is_empty() {
            text.push('{');
            for (index, (label, value)) in labels.iter().enumerate() {
                if index > 0 {
                    text.push(',');
                }
                let _ = write!(text, "{label}=\"{}\"", escape_label_value(value));
            }
            text.push('}');
        }
        let _ = writeln!(text, " {value}");
    }
}

/// A label value as the text format writes it: backslash, double quote and
/// line feed escaped.
fn escape_label_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

fn key(name: &'static str, labels: &[(&'static str, String)]) -> Key {
    let labels: Vec<Label> = labels
        .iter()
        .map(|(label, value)| Label::new(*label, value.clone()))
        .collect();
    Key::from_parts(name, labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_with_their_labels() {
        let metrics = NodeMetrics::new();
        metrics.count(
            MESSAGES_PRODUCED_TOTAL,
            &[("topic", "orders".into()), ("partition", "1".into())],
            3,
        );
        let text = metrics.render();
        assert!(
            text.contains(r#"narad_messages_produced_total{topic="orders",partition="1"} 3"#),
            "{text}"
        );
    }

    #[test]
    fn a_registered_histogram_is_served_before_its_first_observation() {
        let metrics = NodeMetrics::new();
        metrics.register_histogram(MOVES_DURATION_SECONDS, &[]);
        let text = metrics.render();
        assert!(
            text.contains("narad_moves_duration_seconds_count 0"),
            "{text}"
        );
    }

    #[test]
    fn consume_wait_is_a_histogram_with_buckets() {
        let metrics = NodeMetrics::new();
        metrics.observe(
            CONSUME_WAIT_SECONDS,
            &[("topic", "orders".into()), ("outcome", "hit".into())],
            Duration::from_millis(30),
        );
        let text = metrics.render();
        assert!(
            text.contains(
                r#"narad_consume_wait_seconds_bucket{topic="orders",outcome="hit",le="0.05"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn absolute_counters_take_the_total() {
        let metrics = NodeMetrics::new();
        let labels = [
            ("topic", "orders".to_owned()),
            ("partition", "0".to_owned()),
        ];
        metrics.count_absolute(CONSUMER_CORRUPT_SKIPPED_TOTAL, &labels, 4);
        metrics.count_absolute(CONSUMER_CORRUPT_SKIPPED_TOTAL, &labels, 6);
        assert!(
            metrics.render().contains(
                r#"narad_consumer_corrupt_skipped_total{topic="orders",partition="0"} 6"#
            )
        );
    }

    #[test]
    fn the_process_series_are_rendered() {
        let text = NodeMetrics::new().render();
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_start_time_seconds",
        ] {
            assert!(text.contains(&format!("\n{name} ")), "{name}: {text}");
        }
    }

    #[test]
    fn a_published_family_is_replaced_whole() {
        let metrics = NodeMetrics::new();
        let series = |partition: &str, value| {
            (
                vec![
                    ("topic", "orders".to_owned()),
                    ("partition", partition.to_owned()),
                ],
                value,
            )
        };
        metrics.publish_gauges(
            CONSUMER_LAG_MESSAGES,
            vec![series("0", 3.0), series("1", 4.0)],
        );
        let text = metrics.render();
        assert!(
            text.contains("# TYPE narad_consumer_lag_messages gauge\n"),
            "{text}"
        );
        assert!(
            text.contains(r#"narad_consumer_lag_messages{topic="orders",partition="1"} 4"#),
            "{text}"
        );
        metrics.publish_gauges(CONSUMER_LAG_MESSAGES, vec![series("0", 5.0)]);
        let text = metrics.render();
        assert!(
            text.contains(r#"narad_consumer_lag_messages{topic="orders",partition="0"} 5"#),
            "{text}"
        );
        assert!(!text.contains(r#"partition="1""#), "{text}");
        metrics.publish_gauges(CONSUMER_LAG_MESSAGES, Vec::new());
        assert!(!metrics.render().contains(CONSUMER_LAG_MESSAGES));
    }

    #[test]
    fn published_label_values_are_escaped() {
        let metrics = NodeMetrics::new();
        metrics.publish_gauges(
            TOPIC_BYTES,
            vec![(vec![("topic", "a\"b\\c\nd".to_owned())], 1.5)],
        );
        assert!(
            metrics
                .render()
                .contains(r#"narad_topic_bytes{topic="a\"b\\c\nd"} 1.5"#)
        );
    }

    #[test]
    fn a_handle_counts_into_the_same_series() {
        let metrics = NodeMetrics::new();
        let labels = [("topic", "orders".to_owned())];
        let handle = metrics.counter(NACK_TOTAL, &labels);
        handle.increment(2);
        metrics.count(NACK_TOTAL, &labels, 1);
        assert!(
            metrics
                .render()
                .contains(r#"narad_nack_total{topic="orders"} 3"#)
        );
    }

    #[test]
    fn partition_handles_are_taken_once_and_count_into_their_series() {
        let metrics = NodeMetrics::new();
        let topic: Arc<str> = Arc::from("orders");
        let first = metrics.partition(&topic, 2);
        let again = metrics.partition(&topic, 2);
        assert!(Arc::ptr_eq(&first, &again));
        first.messages_produced.increment(3);
        again.messages_produced.increment(1);
        assert!(
            metrics
                .render()
                .contains(r#"narad_messages_produced_total{topic="orders",partition="2"} 4"#)
        );
    }

    #[test]
    fn a_fold_keeps_every_sample_in_the_buckets() {
        let metrics = NodeMetrics::new();
        let handles = metrics.topic("orders");
        for _ in 0..3 {
            handles.consume_wait[0].record(0.02);
        }
        metrics.fold_histogram_samples();
        handles.consume_wait[0].record(0.02);
        handles.consume_wait[0].record(20.0);
        metrics.fold_histogram_samples();
        let text = metrics.render();
        assert!(
            text.contains(r#"narad_consume_wait_seconds_count{topic="orders",outcome="hit"} 5"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"narad_consume_wait_seconds_bucket{topic="orders",outcome="hit",le="0.05"} 4"#
            ),
            "{text}"
        );
    }

    #[test]
    fn topic_handles_time_each_outcome_apart() {
        let metrics = NodeMetrics::new();
        let handles = metrics.topic("orders");
        handles.consume_wait[1].record(0.5);
        let text = metrics.render();
        assert!(
            text.contains(
                r#"narad_consume_wait_seconds_count{topic="orders",outcome="timeout"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"narad_consume_wait_seconds_count{topic="orders",outcome="hit"} 0"#),
            "{text}"
        );
    }

    #[test]
    fn two_registries_do_not_share_series() {
        let one = NodeMetrics::new();
        let two = NodeMetrics::new();
        one.set(INGRESS_WAL_FAILED, &[], 1.0);
        assert!(!two.render().contains(INGRESS_WAL_FAILED));
    }
}
