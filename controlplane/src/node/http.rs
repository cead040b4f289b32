//! The control node's HTTP surface: `/healthz`, `/readyz`, `/metrics`
//! (Prometheus text) and `/status` (JSON).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use metrics::{counter, gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use serde_json::json;
use tokio::net::TcpListener;
use tracing::warn;

use super::runtime::Shared;
use crate::controller::colocated_child_partitions;

struct Http {
    shared: Arc<Shared>,
    /// A recorder of this node's own, not the process-wide one, so several
    /// nodes in one process (tests, `narad dev`) keep separate series.
    recorder: PrometheusRecorder,
}

/// Serves until the task is aborted.
pub(super) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    let http = Arc::new(Http {
        shared,
        recorder: PrometheusBuilder::new().build_recorder(),
    });
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

async fn readyz(State(http): State<Arc<Http>>) -> Response {
    match http.shared.readiness() {
        Ok(()) => Json(json!({"status": "ready"})).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": reason})),
        )
            .into_response(),
    }
}

async fn status(State(http): State<Arc<Http>>) -> Response {
    Json(http.shared.status()).into_response()
}

async fn metrics(State(http): State<Arc<Http>>) -> Response {
    let status = http.shared.status();
    let refused = http.shared.view.refused_total();
    let ready = http.shared.readiness().is_ok();
    // openraft stops on a storage fault (a failed log write or snapshot):
    // the spec's "apply stopped".
    let stopped = http.shared.raft.metrics().borrow().running_state.is_err();
    // A controller figure: the leader's. A follower reports 0 rather than
    // leave the series out, since a series once exported stays in this
    // recorder and would keep a former leader's stale count.
    let colocated = if status.state == "leader" {
        http.shared.view.read(colocated_child_partitions)
    } else {
        0
    };
    metrics::with_local_recorder(&http.recorder, || {
        for state in ["leader", "follower", "candidate", "learner", "shutdown"] {
            let value = if status.state == state { 1.0 } else { 0.0 };
            gauge!("narad_raft_state", "state" => state).set(value);
        }
        gauge!("narad_raft_term").set(status.term as f64);
        gauge!("narad_raft_last_log_index").set(status.last_log_index as f64);
        gauge!("narad_raft_commit_index").set(status.leader_commit_index as f64);
        gauge!("narad_raft_applied_index").set(status.applied_index as f64);
        gauge!("narad_raft_has_leader").set(if status.leader.is_some() { 1.0 } else { 0.0 });
        gauge!("narad_raft_leader_id").set(status.leader.unwrap_or(0) as f64);
        gauge!("narad_raft_voters").set(status.voters.len() as f64);
        gauge!("narad_raft_nonvoters").set(status.learners.len() as f64);
        gauge!("narad_metastore_applied_index").set(status.applied_index as f64);
        gauge!("narad_control_ready").set(if ready { 1.0 } else { 0.0 });
        counter!("narad_metastore_commands_refused_total").absolute(refused);
        gauge!("narad_metastore_apply_stopped").set(if stopped { 1.0 } else { 0.0 });
        gauge!("narad_colocated_child_partitions").set(colocated as f64);
    });
    (
        [("content-type", "text/plain; version=0.0.4")],
        http.recorder.handle().render(),
    )
        .into_response()
}
