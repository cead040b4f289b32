//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of this API, written
//! once in `openapi.json` beside this file and checked against
//! [`super::router`] by a test (every route and method of the router is in
//! the document and the other way round), so the two cannot drift.
//!
//! Any authenticated user may read it (no grant needed), as anyone may
//! with security off: it describes the API, not the cluster's data.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::{ApiState, authenticate};

/// The document, as served.
pub const DOCUMENT: &str = include_str!("openapi.json");

/// `200` with the document; `401` without valid credentials (security on).
pub(crate) async fn document(
    State(state): State<Arc<ApiState>>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authenticate(&state, &method, &headers).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT,
    )
        .into_response())
}
