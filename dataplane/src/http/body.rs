//! Reading a request body within a limit, never trusting or preallocating
//! the declared length; the node-wide budget for large batch bodies; and
//! discarding what an answer left unread, so the client reads the answer
//! rather than a reset connection.

use std::future::poll_fn;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::http::error::ApiError;
use crate::ingress::{BATCH_BODY_BYTES_MAX, MESSAGE_BYTES_MAX};

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

/// Bytes of an unread request body the node reads and drops, past the
/// route's body limit, before it sends an answer given early (`413`,
/// `401`, `404`, `415`...). A client that writes its whole body before it
/// reads then gets the answer: closing a socket with unread bytes resets
/// the connection, and the reset can destroy the answer in flight.
pub const DISCARD_BYTES_PAST_LIMIT: usize = 8 * 1024 * 1024;

/// The longest the node spends dropping one unread body.
pub const DISCARD_TIME_MAX: Duration = Duration::from_secs(10);

/// The one route whose body limit is [`BATCH_BODY_BYTES_MAX`]; every other
/// route takes at most [`MESSAGE_BYTES_MAX`].
const BATCH_PRODUCE_ROUTE: &str = "/v1/topics/{topic}/produce/batch";

const _: () = assert!(BATCH_BODY_BYTES_MAX >= MESSAGE_BYTES_MAX);

/// The most bytes of an unread body discarded on `route` (the matched
/// route template; `None` for no route): its body limit plus
/// [`DISCARD_BYTES_PAST_LIMIT`].
pub(crate) fn discard_bytes_max(route: Option<&str>) -> usize {
    let limit = if route == Some(BATCH_PRODUCE_ROUTE) {
        BATCH_BODY_BYTES_MAX
    } else {
        MESSAGE_BYTES_MAX
    };
    limit + DISCARD_BYTES_PAST_LIMIT
}

/// Middleware: when a request's answer left part of its body unread, reads
/// and drops the rest before the answer goes out, then closes the
/// connection after the answer (`Connection: close`).
///
/// Nothing is read when more is left than [`discard_bytes_max`] of the
/// route (as declared, or as it arrives), past [`DISCARD_TIME_MAX`], or
/// when the client waits for `100 Continue` and the body was never asked
/// for: the connection is closed then without reading the rest.
pub(crate) async fn discard_unread_body(request: Request, next: Next) -> Response {
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let bytes_max = discard_bytes_max(
        request
            .extensions()
            .get::<MatchedPath>()
            .map(MatchedPath::as_str),
    );
    let waits_for_continue = request
        .headers()
        .get(header::EXPECT)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let unread = Arc::new(Mutex::new(None));
    let request = request.map(|body| {
        Body::new(Tracked {
            body: Some(body),
            polled: false,
            ended: false,
            unread: Arc::clone(&unread),
        })
    });
    let mut response = next.run(request).await;
    let left = unread.lock().take();
    let Some(left) = left else {
        return response;
    };
    // Asking a `100-continue` body for data would invite the client to
    // send what nobody reads.
    let may_read = left.polled || !waits_for_continue;
    if may_read && !discard(left.body, bytes_max).await {
        tracing::debug!(
            bytes_max,
            "unread request body not discarded: too long or too slow; closing the connection"
        );
    }
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Reads and drops `body`: `false` when it is longer than `bytes_max`
/// (declared or read), fails, or takes longer than [`DISCARD_TIME_MAX`].
async fn discard(body: Body, bytes_max: usize) -> bool {
    if body.size_hint().lower() > bytes_max as u64 {
        return false;
    }
    let reading = async {
        let mut body = pin!(body);
        let mut read = 0usize;
        while let Some(frame) = poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            let Ok(frame) = frame else {
                return false;
            };
            if let Some(data) = frame.data_ref() {
                read = read.saturating_add(data.len());
            }
            if read > bytes_max {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(DISCARD_TIME_MAX, reading)
        .await
        .unwrap_or(false)
}

/// A body the answer left before its end.
struct Unread {
    body: Body,
    /// Whether the handler asked it for data.
    polled: bool,
}

/// A request body that, dropped before its end, leaves the rest in
/// `unread` for [`discard_unread_body`].
struct Tracked {
    body: Option<Body>,
    polled: bool,
    /// The body ended or failed: nothing is left to discard.
    ended: bool,
    unread: Arc<Mutex<Option<Unread>>>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let Some(body) = this.body.as_mut() else {
            return Poll::Ready(None);
        };
        this.polled = true;
        let polled = Pin::new(body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            this.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.body.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(body) = self.body.take()
            && !self.ended
            && !body.is_end_stream()
        {
            *self.unread.lock() = Some(Unread {
                body,
                polled: self.polled,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_batch_produce_discards_past_the_batch_limit() {
        assert_eq!(
            discard_bytes_max(Some("/v1/topics/{topic}/produce/batch")),
            BATCH_BODY_BYTES_MAX + DISCARD_BYTES_PAST_LIMIT
        );
        for route in [Some("/v1/topics/{topic}/produce"), Some("/v1/users"), None] {
            assert_eq!(
                discard_bytes_max(route),
                MESSAGE_BYTES_MAX + DISCARD_BYTES_PAST_LIMIT
            );
        }
    }

    #[tokio::test]
    async fn a_body_up_to_the_bound_is_discarded_and_a_longer_one_is_not() {
        assert!(discard(Body::from(vec![0u8; 10]), 10).await);
        assert!(!discard(Body::from(vec![0u8; 11]), 10).await);
    }

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
