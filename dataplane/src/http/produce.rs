//! `POST /v1/topics/{topic}/produce` and `.../produce/batch`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::body::{BudgetHold, read_limited};
use super::error::ApiError;
use super::query::params;
use super::{ApiState, authenticate, authorize};
use crate::ingress::batch::{check_encoding, decode_content, parse_batch};
use crate::ingress::{
    AcceptError, BATCH_BODY_BYTES_MAX, MESSAGE_BYTES_MAX, ProduceMessage, valid_idempotency_key,
};

/// The header carrying a single produce's idempotency key.
pub(crate) const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
use crate::metadata::GrantAction;

/// The refusal of a produce on a node being decommissioned (wire contract
/// §7.2): the client library reads it as certain, nothing stored, and
/// sends the message elsewhere.
pub(crate) const DRAINING_PRODUCE: &str =
    "this node is being decommissioned and takes no new produce; send it to another node";

/// `Retry-After` of that refusal: another node can take the produce at
/// once, so the client need not wait longer than its shortest pause.
const DRAINING_RETRY_AFTER_SECONDS: u32 = 1;

/// `503` when this node's member record says it drains: it takes no new
/// produce, so the records it holds can reach their owners and it can
/// leave. Checked before anything is read or staged.
fn refuse_if_draining(state: &ApiState) -> Result<(), ApiError> {
    if !state.replica.local_draining() {
        return Ok(());
    }
    let mut refusal = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, DRAINING_PRODUCE);
    refusal.retry_after_seconds = Some(DRAINING_RETRY_AFTER_SECONDS);
    Err(refusal)
}

/// Counts a produce in `StatusSources::produces_in_flight` until dropped, so a
/// produce whose client went away is counted out too.
struct ProduceInFlight<'a>(&'a AtomicU64);

impl<'a> ProduceInFlight<'a> {
    fn enter(count: &'a AtomicU64) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for ProduceInFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A single produce: the body is the message; `key` and `partition` come
/// from the query. `202` with an empty body once the message is durable in
/// this node's WAL.
pub(crate) async fn produce(
    State(state): State<Arc<ApiState>>,
    Path(topic): Path<String>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let user = authenticate(&state, &method, &headers).await?;
    authorize(user.as_deref(), GrantAction::Produce, &topic)?;
    refuse_if_draining(&state)?;
    let _in_flight = ProduceInFlight::enter(&state.status.produces_in_flight);
    let (key, partition) = produce_query(query.as_deref().unwrap_or(""))?;
    let idempotency_key = idempotency_key(&headers)?;
    let _cap = state.produce_cap.take(&identity(user.as_deref()), 1)?;
    let meta = state
        .acceptor
        .producible_topic(&topic)
        .map_err(|error| refused(&state, &topic, error))?;
    let payload = read_limited(&headers, body, MESSAGE_BYTES_MAX, None).await?;
    let message = ProduceMessage {
        key,
        partition,
        payload,
        idempotency_key,
    };
    state
        .acceptor
        .accept(&meta, &message)
        .await
        .map_err(|error| refused(&state, &topic, error))?;
    Ok(StatusCode::ACCEPTED.into_response())
}

/// The `Idempotency-Key` header of a single produce; empty without one.
///
/// # Errors
/// `400` for a key that is empty, over 256 bytes or not visible ASCII, or
/// given twice.
fn idempotency_key(headers: &HeaderMap) -> Result<Vec<u8>, ApiError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(Vec::new());
    };
    if values.next().is_some() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid idempotency key: Idempotency-Key given more than once",
        ));
    }
    if !valid_idempotency_key(value.as_bytes()) {
        return Err(AcceptError::IdempotencyKeyInvalid.into());
    }
    Ok(value.as_bytes().to_vec())
}

/// A batch produce: `{"messages":[...]}`, all or nothing, `202
/// {"accepted":N}` once the last record is durable.
pub(crate) async fn produce_batch(
    State(state): State<Arc<ApiState>>,
    Path(topic): Path<String>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let user = authenticate(&state, &method, &headers).await?;
    authorize(user.as_deref(), GrantAction::Produce, &topic)?;
    refuse_if_draining(&state)?;
    let _in_flight = ProduceInFlight::enter(&state.status.produces_in_flight);
    if query.as_deref().is_some_and(|query| !query.is_empty()) {
        return Err(ApiError::bad_request(
            "key is set per message in a batch produce, not as a query parameter",
        ));
    }
    let meta = state
        .acceptor
        .producible_topic(&topic)
        .map_err(|error| refused(&state, &topic, error))?;
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(|value| value.to_str().unwrap_or("invalid"));
    if let Some(encoding) = encoding {
        // Refuse an unknown encoding before reading the body.
        check_encoding(encoding)?;
    }
    // One unit while the body is read, then the message count.
    let reading = state.produce_cap.take(&identity(user.as_deref()), 1)?;
    let mut hold = BudgetHold::default();
    let sent = read_limited(
        &headers,
        body,
        BATCH_BODY_BYTES_MAX,
        Some((&state.body_budget, &mut hold)),
    )
    .await
    .inspect_err(|error| note_budget_rejection(&state, error))?;
    let decoded = decode_content(encoding, sent)?;
    hold.cover(&state.body_budget, decoded.len())
        .inspect_err(|error| note_budget_rejection(&state, error))?;
    let messages = parse_batch(&decoded)?;
    drop(reading);
    let _cap = state
        .produce_cap
        .take(&identity(user.as_deref()), messages.len())?;
    let accepted = state
        .acceptor
        .accept_batch(&meta, &messages)
        .await
        .map_err(|refusal| {
            if matches!(refusal.error, AcceptError::Wal(_)) {
                return ApiError::from(refusal.error);
            }
            note_rejection(&state, &topic, &refusal.error);
            ApiError::new(
                super::error::accept_status(&refusal.error),
                refusal.to_string(),
            )
        })?;
    let body = format!("{{\"accepted\":{accepted}}}\n");
    Ok((
        StatusCode::ACCEPTED,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// Who a produce counts against: the user, or one shared identity with
/// security off (unlike the consume cap, this one does not key on the
/// client address).
fn identity(user: Option<&crate::metadata::User>) -> String {
    user.map_or_else(|| "anonymous".to_owned(), |user| user.username.clone())
}

/// `key` and `partition` from the raw query: each at most once, `partition`
/// a non-negative integer.
fn produce_query(query: &str) -> Result<(Vec<u8>, Option<u32>), ApiError> {
    let mut key: Option<Vec<u8>> = None;
    let mut partition: Option<u32> = None;
    let mut partition_seen = false;
    for param in params(query) {
        match param.name.as_slice() {
            b"key" => {
                if key.is_some() {
                    return Err(ApiError::bad_request("duplicate key query parameter"));
                }
                key = Some(param.value);
            }
            b"partition" => {
                if partition_seen {
                    return Err(ApiError::bad_request("duplicate partition query parameter"));
                }
                partition_seen = true;
                partition = Some(parse_partition(&param.value)?);
            }
            _ => {}
        }
    }
    Ok((key.unwrap_or_default(), partition))
}

pub(super) fn parse_partition(value: &[u8]) -> Result<u32, ApiError> {
    std::str::from_utf8(value)
        .ok()
        .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|text| text.parse::<u64>().ok())
        .map(|p| u32::try_from(p).unwrap_or(u32::MAX))
        .ok_or_else(|| ApiError::bad_request("invalid partition: want a non-negative integer"))
}

fn note_budget_rejection(state: &ApiState, error: &ApiError) {
    if error.status == StatusCode::SERVICE_UNAVAILABLE {
        state.metrics.http().body_budget_rejections.increment(1);
    }
}

fn refused(state: &ApiState, topic: &str, error: AcceptError) -> ApiError {
    note_rejection(state, topic, &error);
    ApiError::from(error)
}

fn note_rejection(state: &ApiState, topic: &str, error: &AcceptError) {
    let schema_reason = match error {
        AcceptError::Schema(error) => Some(error.reason()),
        AcceptError::SchemaBusy => Some("busy"),
        _ => None,
    };
    if let Some(counter) =
        schema_reason.and_then(|reason| state.metrics.http().schema_rejections(reason))
    {
        counter.increment(1);
    }
    // The position in `metrics::PRODUCE_REJECTION_REASONS`.
    let reason = match error {
        AcceptError::Schema(_) => 0,
        AcceptError::DelayedChild => 1,
        AcceptError::RemoteChild { .. } => 2,
        _ => return,
    };
    state
        .metrics
        .topic(topic)
        .refusals(&state.metrics, reason)
        .increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_wins_and_key_is_kept() {
        let (key, partition) = produce_query("key=k&partition=2").unwrap();
        assert_eq!(key, b"k".to_vec());
        assert_eq!(partition, Some(2));
    }

    #[test]
    fn duplicate_key_is_refused() {
        let error = produce_query("key=a&key=b").unwrap_err();
        assert_eq!(error.message, "duplicate key query parameter");
    }

    #[test]
    fn negative_or_empty_partition_is_refused() {
        assert!(produce_query("partition=-1").is_err());
        assert!(produce_query("partition=").is_err());
        assert!(produce_query("partition=x").is_err());
    }
}
