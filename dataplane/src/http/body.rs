//! Reading a request body within a limit, never trusting or preallocating
//! the declared length.

use std::future::poll_fn;
use std::pin::pin;

use axum::body::{Body, HttpBody};
use axum::http::{HeaderMap, StatusCode, header};

use crate::http::error::ApiError;

/// Reads `body` whole, refusing it with `413 request body too large` as
/// soon as it is over `limit` bytes (declared or read).
///
/// # Errors
/// `413` over the limit, `400` when the body cannot be read.
pub(crate) async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<bytes::Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    let mut body = pin!(body);
    let mut out = Vec::new();
    while let Some(frame) = poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame
            .map_err(|error| ApiError::bad_request(format!("reading the request body: {error}")))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(too_large());
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out.into())
}

fn too_large() -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
}
