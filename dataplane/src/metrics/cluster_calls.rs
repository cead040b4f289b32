//! `narad_cluster_rpc_requests_total` and `narad_cluster_rpc_request_seconds`:
//! the data node's calls to its peers, as its cluster transport reports
//! them ([`CallObserver`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Histogram};
use narad_clock::Clock;
use narad_protocol::{CallObserver, CallOutcome, Opcode};

use super::{CLUSTER_RPC_REQUEST_SECONDS, CLUSTER_RPC_REQUESTS_TOTAL, NodeMetrics};

/// The series of one operation, taken at its first call.
#[derive(Debug)]
struct OpHandles {
    /// One counter per outcome, in [`CallOutcome::ALL`] order.
    outcomes: [Counter; CallOutcome::ALL.len()],
    seconds: Histogram,
}

/// Counts and times a node's calls to peers into its registry, reading
/// the node's clock. The series of an operation appear at its first call.
pub struct ClusterCallMetrics {
    metrics: Arc<NodeMetrics>,
    clock: Arc<dyn Clock>,
    /// By op label: a few dozen at most, since an opcode this build does
    /// not know is labelled `unknown`.
    ops: parking_lot::RwLock<HashMap<&'static str, Arc<OpHandles>>>,
}

impl fmt::Debug for ClusterCallMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterCallMetrics")
            .field("ops", &self.ops.read().len())
            .finish_non_exhaustive()
    }
}

impl ClusterCallMetrics {
    /// Counts into `metrics`, timing by `clock`.
    pub fn new(metrics: Arc<NodeMetrics>, clock: Arc<dyn Clock>) -> Self {
        Self {
            metrics,
            clock,
            ops: parking_lot::RwLock::new(HashMap::new()),
        }
    }

    fn handles(&self, op: &'static str) -> Arc<OpHandles> {
        if let Some(handles) = self.ops.read().get(op) {
            return Arc::clone(handles);
        }
        let outcome = |outcome: CallOutcome| {
            self.metrics.counter(
                CLUSTER_RPC_REQUESTS_TOTAL,
                &[
                    ("op", op.to_owned()),
                    ("outcome", outcome.label().to_owned()),
                ],
            )
        };
        let handles = Arc::new(OpHandles {
            outcomes: CallOutcome::ALL.map(outcome),
            seconds: self
                .metrics
                .histogram(CLUSTER_RPC_REQUEST_SECONDS, &[("op", op.to_owned())]),
        });
        Arc::clone(self.ops.write().entry(op).or_insert(handles))
    }
}

impl CallObserver for ClusterCallMetrics {
    fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    fn finished(&self, opcode: Opcode, outcome: CallOutcome, elapsed: Duration) {
        let handles = self.handles(opcode.label());
        handles.outcomes[outcome.index()].increment(1);
        handles.seconds.record(elapsed.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use narad_clock::ManualClock;

    use super::*;

    #[test]
    fn each_call_counts_under_its_op_and_outcome_and_is_timed() {
        let metrics = Arc::new(NodeMetrics::new());
        let calls = ClusterCallMetrics::new(Arc::clone(&metrics), Arc::new(ManualClock::new(0)));
        calls.finished(Opcode::ACK_BATCH, CallOutcome::Ok, Duration::from_millis(3));
        calls.finished(Opcode::ACK_BATCH, CallOutcome::Ok, Duration::from_millis(3));
        calls.finished(
            Opcode::ACK_BATCH,
            CallOutcome::Timeout,
            Duration::from_secs(2),
        );
        calls.finished(Opcode(250), CallOutcome::Rejected, Duration::ZERO);
        let text = metrics.render();
        assert!(
            text.contains(r#"narad_cluster_rpc_requests_total{op="ack_batch",outcome="ok"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"narad_cluster_rpc_requests_total{op="ack_batch",outcome="timeout"} 1"#
            )
        );
        assert!(
            text.contains(r#"narad_cluster_rpc_requests_total{op="unknown",outcome="rejected"} 1"#)
        );
        assert!(text.contains(r#"narad_cluster_rpc_request_seconds_count{op="ack_batch"} 3"#));
        // A histogram, with buckets: 2 calls of 3 ms fall at or under 5 ms.
        assert!(
            text.contains(
                r#"narad_cluster_rpc_request_seconds_bucket{op="ack_batch",le="0.005"} 2"#
            )
        );
    }
}
