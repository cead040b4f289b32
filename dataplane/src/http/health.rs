//! `/healthz`, `/readyz`, `/metrics`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::{ApiState, authenticate};

fn json(status: StatusCode, body: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `200 {"status":"ok"}` from process start; `503` once shutdown began.
pub(crate) async fn healthz(State(state): State<Arc<ApiState>>) -> Response {
    if state.health.shutting_down.load(Ordering::Acquire) {
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    json(StatusCode::OK, "{\"status\":\"ok\"}\n")
}

/// `200 {"status":"ready"}` once startup work is done and the metadata
/// replica has caught up; `503 {"error":...}` otherwise. Evaluated live.
pub(crate) async fn readyz(State(state): State<Arc<ApiState>>) -> Response {
    if state.health.shutting_down.load(Ordering::Acquire) {
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    if !state.health.started.load(Ordering::Acquire) {
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "startup not finished")
            .into_response();
    }
    if !state.replica.is_caught_up() {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "metadata replica has not caught up with the control plane",
        )
        .into_response();
    }
    json(StatusCode::OK, "{\"status\":\"ready\"}\n")
}

/// Prometheus text; needs valid credentials with security on unless
/// `metrics_unauthenticated`.
pub(crate) async fn metrics(
    State(state): State<Arc<ApiState>>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if !state.config.metrics_unauthenticated {
        authenticate(&state, &method, &headers).await?;
    }
    // The disk gauges walk the data directory: off the async workers.
    let refreshing = Arc::clone(&state);
    tokio::task::spawn_blocking(move || refreshing.refresh_gauges())
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "refreshing the metrics failed",
            )
        })?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response())
}
