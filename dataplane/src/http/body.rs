//! Reading a request body within a limit, never trusting or preallocating
//! the declared length, and the node-wide budget for large batch bodies.

use std::future::poll_fn;
use std::pin::pin;
use std::sync::Arc;

use axum::body::{Body, HttpBody};
use axum::http::{HeaderMap, StatusCode, header};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::http::error::ApiError;

/// The unit the batch body budget is taken in: the first unit of every
/// body is free, so small batches never touch the budget.
pub const BODY_BUDGET_UNIT_BYTES: usize = 1024 * 1024;

/// Bytes of batch bodies over one unit being held per node at most
/// (`http.max_batch_body_bytes_in_flight`): bounds the memory that
/// concurrent 16 MiB batches can pin.
pub const BATCH_BODY_BYTES_IN_FLIGHT_MAX: usize = 256 * 1024 * 1024;

const _: () = assert!(BATCH_BODY_BYTES_IN_FLIGHT_MAX.is_multiple_of(BODY_BUDGET_UNIT_BYTES));

/// The node-wide budget of large batch bodies, in units.
#[derive(Debug)]
pub struct BodyBudget {
    units: Arc<Semaphore>,
}

impl Default for BodyBudget {
    fn default() -> Self {
        Self::new(BATCH_BODY_BYTES_IN_FLIGHT_MAX)
    }
}

impl BodyBudget {
    /// A budget of `bytes` (rounded down to whole units).
    pub fn new(bytes: usize) -> Self {
        Self {
            units: Arc::new(Semaphore::new(bytes / BODY_BUDGET_UNIT_BYTES)),
        }
    }
}

/// Units of the budget one request holds until it is answered.
#[derive(Debug, Default)]
pub(crate) struct BudgetHold {
    permits: Vec<OwnedSemaphorePermit>,
}

impl BudgetHold {
    /// Grows the hold to cover a body of `bytes`; never waits.
    ///
    /// # Errors
    /// `503` with `Retry-After: 1` when the budget has no room.
    pub(crate) fn cover(&mut self, budget: &BodyBudget, bytes: usize) -> Result<(), ApiError> {
        let units_needed = bytes.saturating_sub(1) / BODY_BUDGET_UNIT_BYTES;
        while self.permits.len() < units_needed {
            let permit = Arc::clone(&budget.units).try_acquire_owned().map_err(|_| {
                let mut error = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "batch produce body budget of this node is full; retry",
                );
                error.retry_after_seconds = Some(1);
                error
            })?;
            self.permits.push(permit);
        }
        Ok(())
    }
}

/// Reads `body` whole, refusing it with `413 request body too large` as
/// soon as it is over `limit` bytes (declared or read). With a budget, the
/// bytes past the first unit are taken from it as they arrive.
///
/// # Errors
/// `413` over the limit, `503` when the budget is full, `400` when the
/// body cannot be read.
pub(crate) async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    budget: Option<(&BodyBudget, &mut BudgetHold)>,
) -> Result<bytes::Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    let mut budget = budget;
    let mut body = pin!(body);
    let mut out = Vec::new();
    while let Some(frame) = poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame
            .map_err(|error| ApiError::bad_request(format!("reading the request body: {error}")))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(too_large());
            }
            if let Some((budget, hold)) = budget.as_mut() {
                hold.cover(budget, out.len() + data.len())?;
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out.into())
}

/// Reads a JSON body of at most `limit` bytes as the user routes and the
/// attach route do: every failure is `400`, a body over the limit too
/// (spec §1.1).
///
/// # Errors
/// `400` with `request body too large`, a read failure or `invalid json:
/// <reason>`.
pub(crate) async fn read_json_refusing_400<T: for<'de> serde::Deserialize<'de>>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<T, ApiError> {
    let bytes = read_limited(headers, body, limit, None)
        .await
        .map_err(|error| ApiError::bad_request(error.message))?;
    serde_json::from_slice(&bytes)
        .map_err(|error| ApiError::bad_request(format!("invalid json: {error}")))
}

fn too_large() -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_unit_is_free() {
        let budget = BodyBudget::new(0);
        let mut hold = BudgetHold::default();
        assert!(hold.cover(&budget, BODY_BUDGET_UNIT_BYTES).is_ok());
    }

    #[test]
    fn a_full_budget_answers_503_with_retry_after() {
        let budget = BodyBudget::new(2 * BODY_BUDGET_UNIT_BYTES);
        let mut first = BudgetHold::default();
        first.cover(&budget, 3 * BODY_BUDGET_UNIT_BYTES).unwrap();
        let mut second = BudgetHold::default();
        let error = second
            .cover(&budget, BODY_BUDGET_UNIT_BYTES + 1)
            .unwrap_err();
        assert_eq!(error.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(error.retry_after_seconds, Some(1));
        drop(first);
        assert!(second.cover(&budget, BODY_BUDGET_UNIT_BYTES + 1).is_ok());
    }
}
