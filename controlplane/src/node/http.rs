//! The control node's HTTP surface: `/healthz`, `/readyz`, `/metrics`
//! (Prometheus text) and `/status` (JSON).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use metrics::{Histogram, counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};
use narad_clock::Clock;
use narad_protocol::{CALL_SECONDS_BUCKETS, CallObserver};
use serde_json::json;
use tokio::net::TcpListener;
use tracing::warn;

use super::call_metrics::ControlCallMetrics;
use super::runtime::Shared;
use crate::controller::colocated_child_partitions;
use crate::store::{ApplyFaultKind, DATABASE_FILE};
use narad_meta::{DecommissionBlock, Metastore};

struct Http {
    shared: Arc<Shared>,
}

/// A control node's metrics registry.
pub(super) struct ControlMetrics {
    /// A recorder of this node's own, not the process-wide one, so several
    /// nodes in one process (tests, `narad dev`) keep separate series.
    recorder: Arc<PrometheusRecorder>,
    /// The standard `process_*` series, read from the OS at each render.
    process: metrics_process::Collector,
}

/// How long each snapshot build took (encode and durable write).
const SNAPSHOT_DURATION_SECONDS: &str = "narad_metastore_snapshot_duration_seconds";

/// Buckets of [`SNAPSHOT_DURATION_SECONDS`]: a metastore snapshot is
/// kilobytes to a few megabytes, encoded in memory and written in one
/// synced redb transaction, so milliseconds normally; the top buckets show
/// a slow disk.
const SNAPSHOT_DURATION_BUCKETS_SECONDS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

impl ControlMetrics {
    pub(super) fn new() -> Self {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full(SNAPSHOT_DURATION_SECONDS.to_owned()),
                &SNAPSHOT_DURATION_BUCKETS_SECONDS,
            )
            .and_then(|builder| {
                builder.set_buckets_for_metric(
                    Matcher::Full("narad_cluster_rpc_request_seconds".to_owned()),
                    &CALL_SECONDS_BUCKETS,
                )
            })
            .expect("the bucket lists are not empty")
            .build_recorder();
        let process = metrics_process::Collector::default();
        metrics::with_local_recorder(&recorder, || process.describe());
        Self {
            recorder: Arc::new(recorder),
            process,
        }
    }

    /// What counts this node's calls to peers into this registry, timing
    /// them on `clock`.
    pub(super) fn call_observer(&self, clock: Arc<dyn Clock>) -> Arc<dyn CallObserver> {
        Arc::new(ControlCallMetrics::new(Arc::clone(&self.recorder), clock))
    }

    /// The handle the state machine records each snapshot build's duration
    /// into. Taking it registers the histogram, so it is served (with a
    /// count of 0) before the first build.
    pub(super) fn snapshot_durations(&self) -> Histogram {
        metrics::with_local_recorder(&*self.recorder, || histogram!(SNAPSHOT_DURATION_SECONDS))
    }
}

/// How often [`fold_histogram_samples`] folds: the recorder holds at
/// most this long's histogram samples (16 bytes each).
const HISTOGRAM_FOLD_INTERVAL: Duration = Duration::from_secs(5);

/// Folds the histogram samples recorded since the last fold into their
/// buckets and frees them, every [`HISTOGRAM_FOLD_INTERVAL`], until the
/// task is aborted. The recorder keeps each observation until a render or
/// a fold; without this a node nobody scrapes would keep one sample per
/// call to a peer (Raft heartbeats included) for as long as it runs.
pub(super) async fn fold_histogram_samples(shared: Arc<Shared>) {
    let mut ticks = tokio::time::interval(HISTOGRAM_FOLD_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        shared.metrics.recorder.handle().run_upkeep();
    }
}

/// Serves until the task is aborted.
pub(super) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    let http = Arc::new(Http { shared });
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .with_state(http);
    if let Err(error) = axum::serve(listener, app).await {
        warn!(%error, "http server stopped");
    }
}

async fn healthz(State(http): State<Arc<Http>>) -> Response {
    if http.shared.shutting_down.load(Ordering::Relaxed) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "shutting down"})),
        )
            .into_response();
    }
    Json(json!({"status": "ok"})).into_response()
}

/// `200 {"status":"ready"}`, or `503 {"error":"<reason>"}` with
/// `"degraded":["raft_tls_certificate_expired","raft_tls_ca_expired"]`
/// added while a cluster TLS certificate is expired.
async fn readyz(State(http): State<Arc<Http>>) -> Response {
    match http.shared.readiness() {
        Ok(()) => Json(json!({"status": "ready"})).into_response(),
        Err(unready) => {
            let mut body = json!({"error": unready.error});
            if !unready.degraded.is_empty() {
                let codes: Vec<&str> = unready.degraded.iter().map(|e| e.code()).collect();
                body["degraded"] = json!(codes);
            }
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

async fn status(State(http): State<Arc<Http>>) -> Response {
    Json(http.shared.status()).into_response()
}

async fn metrics(State(http): State<Arc<Http>>) -> Response {
    (
        [("content-type", "text/plain; version=0.0.4")],
        render(&http.shared, true),
    )
        .into_response()
}

/// `narad_decommission_blocked{node, reason}`: 1 for each reason a
/// draining member's decommission cannot finish now, as the leader judges
/// it; 0 for every other pair, and everywhere on a follower (a series once
/// exported stays, so it must be zeroed, not dropped). Removed members
/// are zeroed too.
fn decommission_blocked(metastore: &Metastore, leader: bool) -> Vec<(String, &'static str, f64)> {
    let members = metastore
        .members()
        .map(|member| (member.id.clone(), member.draining));
    let removed = metastore.removed_members().map(|id| (id.to_owned(), false));
    members
        .chain(removed)
        .flat_map(|(id, draining)| {
            let blocks = if leader && draining {
                metastore.decommission_blocks(&id)
            } else {
                Vec::new()
            };
            DecommissionBlock::ALL.into_iter().map(move |block| {
                let value = if blocks.contains(&block) { 1.0 } else { 0.0 };
                (id.clone(), block.code(), value)
            })
        })
        .collect()
}

/// The Prometheus text of the node's series, refreshed now; the
/// `process_*` ones only with `process` (a process hosting a data node too
/// reports them once, from the data node).
pub(super) fn render(shared: &Shared, process: bool) -> String {
    let status = shared.status();
    let refused = shared.view.refused_total();
    let ready = shared.readiness().is_ok();
    // openraft stops on a storage fault (a failed log write or snapshot):
    // the spec's "apply stopped".
    let stopped = shared.raft.metrics().borrow().running_state.is_err();
    // A leader is in contact with itself; a follower reports the time since
    // it last accepted a leader's append (nothing before the first).
    let last_contact = if status.state == "leader" {
        Some(0.0)
    } else {
        shared.contact.since_last().map(|since| since.as_secs_f64())
    };
    // The metastore's database file.
    let fsm_bytes = std::fs::metadata(shared.config.data_dir.join("control").join(DATABASE_FILE))
        .map(|metadata| metadata.len())
        .ok();
    // A controller figure: the leader's. A follower reports 0 rather than
    // leave the series out, since a series once exported stays in this
    // recorder and would keep a former leader's stale count.
    let colocated = if status.state == "leader" {
        shared.view.read(colocated_child_partitions)
    } else {
        0
    };
    let blocked = shared
        .view
        .read(|metastore| decommission_blocked(metastore, status.state == "leader"));
    // On a leader the commit index served is its applied index (openraft's
    // metrics carry no commit index), so a leader never reports a stall.
    let stalled = shared.apply_stall.lock().observe(
        status.leader_commit_index,
        status.applied_index,
        shared.clock.now_ms(),
    );
    let snapshots = shared.view.snapshot_stats();
    let tls_expiry = shared.config.cluster_tls.as_ref().map(|tls| tls.expiry());
    let recorder = &shared.metrics.recorder;
    metrics::with_local_recorder(&**recorder, || {
        for state in ["leader", "follower", "candidate", "learner", "shutdown"] {
            let value = if status.state == state { 1.0 } else { 0.0 };
            gauge!("narad_raft_state", "state" => state).set(value);
        }
        gauge!("narad_raft_term").set(status.term as f64);
        gauge!("narad_raft_last_log_index").set(status.last_log_index as f64);
        gauge!("narad_raft_commit_index").set(status.leader_commit_index as f64);
        gauge!("narad_raft_applied_index").set(status.applied_index as f64);
        // Entries committed (as the leader last reported) but not applied
        // here yet.
        gauge!("narad_raft_fsm_pending").set(
            status
                .leader_commit_index
                .saturating_sub(status.applied_index) as f64,
        );
        if let Some(seconds) = last_contact {
            gauge!("narad_raft_last_contact_seconds").set(seconds);
        }
        if let Some(bytes) = fsm_bytes {
            gauge!("narad_metastore_fsm_bytes").set(bytes as f64);
        }
        gauge!("narad_raft_has_leader").set(if status.leader.is_some() { 1.0 } else { 0.0 });
        gauge!("narad_raft_leader_id").set(status.leader.unwrap_or(0) as f64);
        gauge!("narad_raft_voters").set(status.voters.len() as f64);
        gauge!("narad_raft_nonvoters").set(status.learners.len() as f64);
        gauge!("narad_metastore_applied_index").set(status.applied_index as f64);
        gauge!("narad_control_ready").set(if ready { 1.0 } else { 0.0 });
        counter!("narad_metastore_commands_refused_total").absolute(refused);
        gauge!("narad_metastore_apply_stopped").set(if stopped { 1.0 } else { 0.0 });
        gauge!("narad_metastore_apply_stalled").set(if stalled { 1.0 } else { 0.0 });
        gauge!("narad_metastore_snapshot_bytes").set(snapshots.bytes() as f64);
        counter!("narad_metastore_snapshot_failures_total").absolute(snapshots.failures_total());
        for kind in ApplyFaultKind::ALL {
            counter!("narad_metastore_apply_errors_total", "kind" => kind.label())
                .absolute(shared.apply_faults.total(kind));
        }
        gauge!("narad_colocated_child_partitions").set(colocated as f64);
        if let Some(expiry) = tls_expiry {
            gauge!("narad_raft_tls_cert_not_after_seconds", "kind" => "leaf")
                .set(expiry.leaf_not_after_s as f64);
            gauge!("narad_raft_tls_cert_not_after_seconds", "kind" => "ca")
                .set(expiry.ca_not_after_s as f64);
        }
        for (node, reason, value) in blocked {
            gauge!("narad_decommission_blocked", "node" => node, "reason" => reason).set(value);
        }
        if process {
            shared.metrics.process.collect();
        }
    });
    recorder.handle().render()
}
