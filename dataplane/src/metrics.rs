//! The node's Prometheus metrics, with the spec's names (§9).
//!
//! Each node owns its recorder rather than installing a process-global one,
//! so several nodes in one test process keep separate series and a test
//! can read exactly what its node counted.

use std::fmt;
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};

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
/// Messages appended on this node as their partition's owner (topic,
/// partition).
pub const MESSAGES_PRODUCED_TOTAL: &str = "narad_messages_produced_total";
/// Payload bytes appended on this node as owner.
pub const BYTES_PRODUCED_TOTAL: &str = "narad_bytes_produced_total";
/// Produces refused by a topic rule (topic, reason).
pub const PRODUCE_REJECTIONS_TOTAL: &str = "narad_produce_rejections_total";
/// 1 once the ingress WAL latched a write or fdatasync failure.
pub const INGRESS_WAL_FAILED: &str = "narad_ingress_wal_failed";
/// Durable next WAL sequence number minus the stored checkpoint: the
/// records a restart would dispatch again.
pub const INGRESS_DISPATCH_BACKLOG_RECORDS: &str = "narad_ingress_dispatch_backlog_records";
/// Errors by component and kind (e.g. `http`/`5xx`).
pub const ERRORS_TOTAL: &str = "narad_errors_total";
/// Credential checks waiting for a bcrypt slot.
pub const AUTH_VERIFY_QUEUED: &str = "narad_auth_verify_queued";

static METADATA: Metadata<'static> = Metadata::new("narad_dataplane", Level::INFO, None);

/// One node's metrics registry.
pub struct NodeMetrics {
    recorder: PrometheusRecorder,
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
        Self {
            recorder: PrometheusBuilder::new().build_recorder(),
        }
    }

    /// Adds `value` to counter `name` with `labels`.
    pub fn count(&self, name: &'static str, labels: &[(&'static str, String)], value: u64) {
        self.recorder
            .register_counter(&key(name, labels), &METADATA)
            .increment(value);
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

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        self.recorder.handle().render()
    }
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
    fn two_registries_do_not_share_series() {
        let one = NodeMetrics::new();
        let two = NodeMetrics::new();
        one.set(INGRESS_WAL_FAILED, &[], 1.0);
        assert!(!two.render().contains(INGRESS_WAL_FAILED));
    }
}
