//! What the data node knows of its own heartbeats to the control plane,
//! served on its `/metrics` as `narad_member_heartbeat_failures` (the
//! heartbeats that failed since a leader last took one) and
//! `narad_member_heartbeat_last_success_timestamp_seconds`.
//!
//! The heartbeat starts before the data node, and so before the registry
//! its series live in: the record keeps the figures itself and publishes
//! them into the registry from the moment one is attached. A registration
//! counts as a success: the leader stamps the member's heartbeat time on it
//! as on a heartbeat.

use std::sync::{Arc, OnceLock};

use narad_clock::Clock;
use narad_dataplane::metrics::{
    MEMBER_HEARTBEAT_FAILURES, MEMBER_HEARTBEAT_LAST_SUCCESS_TIMESTAMP_SECONDS, NodeMetrics,
};
use parking_lot::Mutex;

/// The heartbeats' outcomes, and the registry they are served from.
pub(crate) struct HeartbeatRecord {
    /// The node's clock; its wall clock stamps a success.
    clock: Arc<dyn Clock>,
    beats: Mutex<Beats>,
    metrics: OnceLock<Arc<NodeMetrics>>,
}

impl std::fmt::Debug for HeartbeatRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeartbeatRecord")
            .field("beats", &*self.beats.lock())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Beats {
    /// Failed since the last success.
    failures: u64,
    /// Unix milliseconds of the last success, if any yet.
    last_success_unix_ms: Option<u64>,
}

impl HeartbeatRecord {
    /// A record with no heartbeat yet, stamping successes by `clock`.
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            beats: Mutex::new(Beats::default()),
            metrics: OnceLock::new(),
        }
    }

    /// A leader took a heartbeat (or the registration).
    pub(crate) fn succeeded(&self) {
        let at_ms = self.clock.unix_ms();
        let beats = {
            let mut beats = self.beats.lock();
            beats.failures = 0;
            beats.last_success_unix_ms = Some(at_ms);
            *beats
        };
        self.publish(beats);
    }

    /// A heartbeat reached no leader.
    pub(crate) fn failed(&self) {
        let beats = {
            let mut beats = self.beats.lock();
            beats.failures = beats.failures.saturating_add(1);
            *beats
        };
        self.publish(beats);
    }

    /// Serves the figures from `metrics` from now on. A second registry is
    /// ignored: a node has one.
    pub(crate) fn attach(&self, metrics: &Arc<NodeMetrics>) {
        if self.metrics.set(Arc::clone(metrics)).is_ok() {
            let beats = *self.beats.lock();
            self.publish(beats);
        }
    }

    fn publish(&self, beats: Beats) {
        let Some(metrics) = self.metrics.get() else {
            return;
        };
        #[allow(clippy::cast_precision_loss)] // exact below 2^53 failures
        metrics.set(MEMBER_HEARTBEAT_FAILURES, &[], beats.failures as f64);
        if let Some(at_ms) = beats.last_success_unix_ms {
            #[allow(clippy::cast_precision_loss)] // exact for 285,000 years
            let seconds = at_ms as f64 / 1_000.0;
            metrics.set(
                MEMBER_HEARTBEAT_LAST_SUCCESS_TIMESTAMP_SECONDS,
                &[],
                seconds,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use narad_clock::ManualClock;

    use super::*;

    fn sample(metrics: &NodeMetrics, name: &str) -> Option<f64> {
        metrics.render().lines().find_map(|line| {
            let (series, value) = line.split_once(' ')?;
            (series == name).then(|| value.parse().expect("a number"))
        })
    }

    fn record_at(unix_ms: u64) -> (Arc<ManualClock>, HeartbeatRecord, Arc<NodeMetrics>) {
        let clock = Arc::new(ManualClock::new(unix_ms));
        let record = HeartbeatRecord::new(Arc::clone(&clock) as Arc<dyn Clock>);
        let metrics = Arc::new(NodeMetrics::new());
        (clock, record, metrics)
    }

    #[test]
    fn failures_count_until_a_success_resets_them() {
        let (_clock, record, metrics) = record_at(1_000);
        record.attach(&metrics);
        record.failed();
        record.failed();
        assert_eq!(sample(&metrics, MEMBER_HEARTBEAT_FAILURES), Some(2.0));
        record.succeeded();
        assert_eq!(sample(&metrics, MEMBER_HEARTBEAT_FAILURES), Some(0.0));
    }

    #[test]
    fn a_success_stamps_the_clocks_wall_time_in_seconds() {
        let (clock, record, metrics) = record_at(1_700_000_000_000);
        record.attach(&metrics);
        record.succeeded();
        clock.advance(5_500);
        record.succeeded();
        record.failed();
        assert_eq!(
            sample(&metrics, MEMBER_HEARTBEAT_LAST_SUCCESS_TIMESTAMP_SECONDS),
            Some(1_700_000_005.5)
        );
    }

    #[test]
    fn what_happened_before_the_registry_is_served_once_it_is_attached() {
        let (_clock, record, metrics) = record_at(42_000);
        record.succeeded();
        record.failed();
        assert_eq!(sample(&metrics, MEMBER_HEARTBEAT_FAILURES), None);
        record.attach(&metrics);
        assert_eq!(sample(&metrics, MEMBER_HEARTBEAT_FAILURES), Some(1.0));
        assert_eq!(
            sample(&metrics, MEMBER_HEARTBEAT_LAST_SUCCESS_TIMESTAMP_SECONDS),
            Some(42.0)
        );
    }
}
