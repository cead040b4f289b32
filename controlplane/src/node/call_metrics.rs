//! `narad_cluster_rpc_requests_total` and `narad_cluster_rpc_request_seconds`
//! on a control node: its calls to peers (Raft, forwarded proposals, leader
//! confirmations), as its cluster transport reports them.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Histogram, counter, histogram};
use metrics_exporter_prometheus::PrometheusRecorder;
use narad_clock::Clock;
use narad_protocol::{CallObserver, CallOutcome, Opcode};

/// The series of one operation, taken at its first call.
struct OpHandles {
    /// One counter per outcome, in [`CallOutcome::ALL`] order.
    outcomes: [Counter; CallOutcome::ALL.len()],
    seconds: Histogram,
}

/// Counts and times a control node's calls into its recorder.
///
/// Call durations are read from the node's monotonic clock.
pub(super) struct ControlCallMetrics {
    recorder: Arc<PrometheusRecorder>,
    clock: Arc<dyn Clock>,
    /// By op label: a few dozen at most, since an opcode this build does
    /// not know is labelled `unknown`.
    ops: parking_lot::RwLock<HashMap<&'static str, Arc<OpHandles>>>,
}

impl fmt::Debug for ControlCallMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlCallMetrics")
            .field("ops", &self.ops.read().len())
            .finish_non_exhaustive()
    }
}

impl ControlCallMetrics {
    pub(super) fn new(recorder: Arc<PrometheusRecorder>, clock: Arc<dyn Clock>) -> Self {
        Self {
            recorder,
            clock,
            ops: parking_lot::RwLock::new(HashMap::new()),
        }
    }

    fn handles(&self, op: &'static str) -> Arc<OpHandles> {
        if let Some(handles) = self.ops.read().get(op) {
            return Arc::clone(handles);
        }
        let handles = metrics::with_local_recorder(&*self.recorder, || OpHandles {
            outcomes: CallOutcome::ALL.map(|outcome| {
                counter!(
                    "narad_cluster_rpc_requests_total",
                    "op" => op,
                    "outcome" => outcome.label()
                )
            }),
            seconds: histogram!("narad_cluster_rpc_request_seconds", "op" => op),
        });
        Arc::clone(self.ops.write().entry(op).or_insert(Arc::new(handles)))
    }
}

impl CallObserver for ControlCallMetrics {
    fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    fn finished(&self, opcode: Opcode, outcome: CallOutcome, elapsed: Duration) {
        let handles = self.handles(opcode.label());
        handles.outcomes[outcome.index()].increment(1);
        handles.seconds.record(elapsed.as_secs_f64());
    }
}
