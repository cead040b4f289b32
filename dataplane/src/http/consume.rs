//! `GET /v1/topics/{topic}/consume`: a queue consume (one message, or a
//! batch with `max`) or, with `offset`, a replay read (spec §1.6, wire
//! contract §5.2–5.4).
//!
//! A queue consume leases what it returns: each message carries a
//! `receipt_handle` and stays invisible to other consumers for the topic's
//! visibility timeout. A replay read touches no queue state. `204` means
//! nothing arrived within `wait` (or the replay offset is not written
//! yet); a `200` always has a body.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use narad_clock::Clock;

use super::error::ApiError;
use super::go_duration::{format_go_duration, parse_go_duration};
use super::query::params;
use super::{ApiState, authenticate, authorize};
use crate::consume::handle::ReceiptHandle;
use crate::consume::render::{MessageView, message_capacity, message_json, write_message};
use crate::consume::service::{
    CONSUME_RECORDS_MAX, ConsumeError, ConsumeRequest, Delivery, MAX_WAIT_DEFAULT, ReplayError,
};
use crate::consume_front::{ConsumeFront, FrontError};
use crate::forward::ForwardError;
use crate::metadata::{GrantAction, User};
use crate::metrics::{self, NodeMetrics};

/// Messages one batch consume asks for at most (`max`).
pub const CONSUME_BATCH_MAX: usize = 100;

/// Encoded records in one consume answer at most; records past it are
/// released at once for redelivery.
pub const CONSUME_RESPONSE_BYTES_MAX: usize = 8 * 1024 * 1024;

/// The longest `wait` a consume is held for (`http.max_consume_wait`):
/// longer requests are clamped, not refused.
pub const CONSUME_WAIT_MAX_DEFAULT: Duration = Duration::from_secs(10);

// The service clamps to the same limits; the HTTP layer refuses or clamps
// first so the client hears about it.
const _: () = assert!(CONSUME_BATCH_MAX == CONSUME_RECORDS_MAX);
const _: () = assert!(CONSUME_WAIT_MAX_DEFAULT.as_millis() == MAX_WAIT_DEFAULT.as_millis());

/// The ceiling used when `http.max_consume_wait` is 0 (accepted by the
/// configuration, but no consume could wait at all).
pub const CONSUME_WAIT_MAX_WHEN_ZERO: Duration = Duration::from_secs(30);

/// Consumes in flight per identity per node
/// (`http.max_consume_in_flight_per_identity`); a batch counts as its
/// `max`.
pub const CONSUME_IN_FLIGHT_PER_IDENTITY_DEFAULT: usize = 1024;

/// The response header naming the wait used when the asked one was over
/// the ceiling.
pub const WAIT_CLAMPED_HEADER: &str = "x-narad-wait-clamped";

/// What a consume request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConsumeMode {
    /// One leased message, answered as the message object.
    Single,
    /// Up to this many leased messages, answered as `{"messages":[...]}`.
    Batch(usize),
    /// The record at `offset` of the pinned partition, without a lease.
    Replay {
        /// The partition (required with `offset`).
        partition: u32,
        /// The offset to read.
        offset: u64,
    },
}

/// The wait a consume is held for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wait {
    /// The wait used: the asked one, 0 for a negative one, or the ceiling.
    pub(crate) used: Duration,
    /// Whether the asked wait was over the ceiling.
    pub(crate) clamped: bool,
}

/// A validated consume query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConsumeParams {
    /// What is asked for.
    pub(crate) mode: ConsumeMode,
    /// The pinned partition, if any.
    pub(crate) partition: Option<u32>,
    /// The long-poll wait.
    pub(crate) wait: Wait,
}

impl ConsumeParams {
    /// Units the request holds of its identity's consume cap.
    pub(crate) fn cap_units(&self) -> usize {
        match self.mode {
            ConsumeMode::Batch(max) => max,
            ConsumeMode::Single | ConsumeMode::Replay { .. } => 1,
        }
    }
}

/// The raw parameters, first occurrence of each kept (as Go's
/// `url.Values.Get`).
#[derive(Debug, Default)]
struct RawConsumeQuery {
    wait: Option<Vec<u8>>,
    partition: Option<Vec<u8>>,
    offset: Option<Vec<u8>>,
    max: Option<Vec<u8>>,
}

/// Validates the consume query. `client_header` says whether the request
/// carried `X-Narad-Client` (a batch consume must).
///
/// # Errors
/// `400` with the text the client sees.
pub(crate) fn consume_params(
    query: &str,
    client_header: bool,
    wait_max: Duration,
) -> Result<ConsumeParams, ApiError> {
    let mut raw = RawConsumeQuery::default();
    for param in params(query) {
        let slot = match param.name.as_slice() {
            b"wait" => &mut raw.wait,
            b"partition" => &mut raw.partition,
            b"offset" => &mut raw.offset,
            b"max" => &mut raw.max,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(param.value);
        }
    }
    let wait = match raw.wait.as_deref() {
        None | Some(b"") => Wait {
            used: Duration::ZERO,
            clamped: false,
        },
        Some(text) => resolve_wait(text, wait_max)?,
    };
    let partition = raw
        .partition
        .as_deref()
        .map(|value| {
            non_negative(value)
                .map(|p| u32::try_from(p).unwrap_or(u32::MAX))
                .ok_or_else(|| {
                    ApiError::bad_request("invalid partition: want a non-negative integer")
                })
        })
        .transpose()?;
    let offset = raw
        .offset
        .as_deref()
        .map(|value| {
            non_negative(value)
                .ok_or_else(|| ApiError::bad_request("invalid offset: want a non-negative integer"))
        })
        .transpose()?;
    let max = raw.max.as_deref().map(parse_max).transpose()?;
    let mode = match (offset, max) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request("max cannot be combined with offset"));
        }
        (Some(offset), None) => ConsumeMode::Replay {
            partition: partition
                .ok_or_else(|| ApiError::bad_request("offset requires partition"))?,
            offset,
        },
        (None, Some(max)) => {
            if !client_header {
                return Err(ApiError::bad_request(
                    "batch consume requires an X-Narad-Client header",
                ));
            }
            ConsumeMode::Batch(max)
        }
        (None, None) => ConsumeMode::Single,
    };
    Ok(ConsumeParams {
        mode,
        partition,
        wait,
    })
}

/// The wait ceiling in force for the setting `configured`: 0 means
/// [`CONSUME_WAIT_MAX_WHEN_ZERO`].
pub fn effective_wait_max(configured: Duration) -> Duration {
    if configured.is_zero() {
        CONSUME_WAIT_MAX_WHEN_ZERO
    } else {
        configured
    }
}

/// A Go duration: negative means no wait, over `wait_max` is clamped.
fn resolve_wait(text: &[u8], wait_max: Duration) -> Result<Wait, ApiError> {
    let wait_max = effective_wait_max(wait_max);
    let text = std::str::from_utf8(text)
        .map_err(|_| ApiError::bad_request("invalid wait: not UTF-8 text"))?;
    let nanos = parse_go_duration(text)
        .map_err(|error| ApiError::bad_request(format!("invalid wait: {error}")))?;
    let asked = Duration::from_nanos(u64::try_from(nanos).unwrap_or(0));
    Ok(if asked > wait_max {
        Wait {
            used: wait_max,
            clamped: true,
        }
    } else {
        Wait {
            used: asked,
            clamped: false,
        }
    })
}

/// `max`: an integer from 1 to [`CONSUME_BATCH_MAX`].
fn parse_max(value: &[u8]) -> Result<usize, ApiError> {
    non_negative(value)
        .and_then(|max| usize::try_from(max).ok())
        .filter(|max| (1..=CONSUME_BATCH_MAX).contains(max))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "invalid max: want an integer from 1 to {CONSUME_BATCH_MAX}"
            ))
        })
}

/// ASCII digits only, within `u64`.
fn non_negative(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value)
        .ok()
        .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|text| text.parse().ok())
}

/// The `X-Narad-Wait-Clamped` value for a clamped wait.
pub(crate) fn clamped_header_value(wait: &Wait) -> Option<String> {
    wait.clamped.then(|| format_go_duration(wait.used))
}

/// The `429` of a full consume cap.
pub(crate) fn consume_cap_refusal(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        format!("too many in-flight consume requests for this identity (limit {limit} per node)"),
    )
}

/// A consume: authenticate, check the `consume` grant, validate the
/// query, take the identity's consume cap, then a replay read or a queue
/// consume.
pub(crate) async fn consume(
    State(state): State<Arc<ApiState>>,
    Path(topic): Path<String>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
    extensions: Extensions,
) -> Result<Response, ApiError> {
    let user = authenticate(&state, &method, &headers).await?;
    authorize(user.as_deref(), GrantAction::Consume, &topic)?;
    super::remote_children::refuse_stub(&state, &topic)?;
    let params = consume_params(
        query.as_deref().unwrap_or(""),
        headers.contains_key("x-narad-client"),
        state.config.max_consume_wait,
    )?;
    let front = state.consume_front()?;
    let identity = consumer_identity(user.as_deref(), &extensions);
    let _cap = state
        .consume_cap
        .take(&identity, params.cap_units())
        .map_err(|_| consume_cap_refusal(state.config.consume_in_flight_per_identity))?;
    let mut response = match params.mode {
        ConsumeMode::Replay { partition, offset } => {
            replay(front, &topic, partition, offset).await?
        }
        ConsumeMode::Single | ConsumeMode::Batch(_) => {
            queue_consume(&state, front, &topic, &params).await?
        }
    };
    if let Some(value) =
        clamped_header_value(&params.wait).and_then(|value| HeaderValue::from_str(&value).ok())
    {
        response.headers_mut().insert(WAIT_CLAMPED_HEADER, value);
    }
    Ok(response)
}

/// Who a consume counts against: the user; with security off the client
/// address when the server recorded it, else one shared identity.
fn consumer_identity(user: Option<&User>, extensions: &Extensions) -> String {
    match (user, extensions.get::<ConnectInfo<SocketAddr>>()) {
        (Some(user), _) => user.username.clone(),
        (None, Some(ConnectInfo(address))) => address.ip().to_string(),
        (None, None) => "anonymous".to_owned(),
    }
}

/// The record at `offset`, without a lease: `200` with the message (no
/// `receipt_handle`), `204` past the end, `410` when it is gone.
async fn replay(
    front: ConsumeFront<'_>,
    topic: &str,
    partition: u32,
    offset: u64,
) -> Result<Response, ApiError> {
    let record = front
        .replay(topic, partition, offset)
        .await
        .map_err(|error| front_refusal(error, replay_refusal))?;
    let Some(record) = record else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let body = message_json(&MessageView {
        topic,
        partition,
        record: &record,
        receipt: None,
    });
    Ok(json_response(body))
}

/// A queue consume: waits up to the wait for leased records and answers
/// one message, a `{"messages":[...]}` batch, or `204`.
async fn queue_consume(
    state: &ApiState,
    front: ConsumeFront<'_>,
    topic: &str,
    params: &ConsumeParams,
) -> Result<Response, ApiError> {
    let max = match params.mode {
        ConsumeMode::Batch(max) => max,
        ConsumeMode::Single | ConsumeMode::Replay { .. } => 1,
    };
    let request = ConsumeRequest {
        topic: topic.to_owned(),
        partition: params.partition,
        max,
        wait: params.wait.used,
    };
    let timer = WaitTimer::start(&state.metrics, &**state.clock(), topic, params.wait.used);
    let deliveries = front
        .consume(request)
        .await
        .map_err(|error| front_refusal(error, consume_refusal));
    let deliveries = match deliveries {
        Ok(deliveries) => deliveries,
        Err(error) => {
            timer.disarm();
            return Err(error);
        }
    };
    timer.finish(!deliveries.is_empty());
    if deliveries.is_empty() {
        state.metrics.topic(topic).consume_empty.increment(1);
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let batch = matches!(params.mode, ConsumeMode::Batch(_));
    let (body, delivered) = render_deliveries(&deliveries, batch);
    front.release(&deliveries[delivered..]).await;
    for delivery in &deliveries[..delivered] {
        count_delivery(&state.metrics, delivery);
    }
    Ok(json_response(body))
}

/// Renders as many deliveries as fit: one message object for a single
/// consume, `{"messages":[...]}` for a batch, at most
/// [`CONSUME_RESPONSE_BYTES_MAX`] of encoded records (the first always).
/// Returns the body and how many deliveries it holds.
fn render_deliveries(deliveries: &[Delivery], batch: bool) -> (String, usize) {
    if !batch {
        return deliveries
            .first()
            .map_or((String::new(), 0), |first| (message_json(&view(first)), 1));
    }
    let mut body = String::from("{\"messages\":[");
    let mut records_bytes = 0;
    let mut delivered = 0;
    let mut message = String::new();
    for delivery in deliveries {
        message.clear();
        message.reserve(message_capacity(&delivery.record));
        write_message(&mut message, &view(delivery));
        if delivered > 0 && records_bytes + message.len() > CONSUME_RESPONSE_BYTES_MAX {
            break;
        }
        if delivered > 0 {
            body.push(',');
        }
        body.push_str(&message);
        records_bytes += message.len();
        delivered += 1;
    }
    body.push_str("]}");
    (body, delivered)
}

fn view(delivery: &Delivery) -> MessageView<'_> {
    MessageView {
        topic: &delivery.topic,
        partition: delivery.partition,
        record: &delivery.record,
        receipt: Some(ReceiptHandle {
            partition: delivery.partition,
            offset: delivery.record.offset,
            nonce: delivery.nonce,
        }),
    }
}

/// A refusal of the consume front, as the client hears it: this node's
/// own through `local`, a forward's through [`forward_refusal`].
pub(crate) fn front_refusal<E>(
    error: FrontError<E>,
    local: impl FnOnce(E) -> ApiError,
) -> ApiError {
    match error {
        FrontError::Local(error) => local(error),
        FrontError::Forward(error) => forward_refusal(error),
    }
}

/// A forward that got no answer, as the client hears it: `503` with
/// `Retry-After: 1` for an owner down or unknown, `502` for no answer, the
/// owner's own status otherwise.
pub(crate) fn forward_refusal(error: ForwardError) -> ApiError {
    match error {
        ForwardError::OwnerDown => owner_unavailable(),
        ForwardError::NoAnswer(cause) => {
            tracing::warn!(%cause, "forwarded request got no answer from the partition owner");
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "partition owner did not answer; retry",
            )
        }
        ForwardError::Refused { status, message } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut error = ApiError::new(status, message);
            if status == StatusCode::SERVICE_UNAVAILABLE {
                error.retry_after_seconds = Some(1);
            }
            error
        }
    }
}

fn count_delivery(metrics: &NodeMetrics, delivery: &Delivery) {
    let handles = metrics.partition(&delivery.topic, delivery.partition);
    handles.messages_consumed.increment(1);
    handles
        .bytes_consumed
        .increment(delivery.record.payload.len() as u64);
}

fn json_response(body: String) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Times a queue consume into `narad_consume_wait_seconds`. Dropped
/// unfinished (the client went away and the handler was dropped), it
/// records the outcome `cancelled`.
struct WaitTimer<'a> {
    metrics: &'a NodeMetrics,
    topic: &'a str,
    wait: Duration,
    clock: &'a dyn Clock,
    started_us: u64,
    armed: bool,
}

impl<'a> WaitTimer<'a> {
    fn start(
        metrics: &'a NodeMetrics,
        clock: &'a dyn Clock,
        topic: &'a str,
        wait: Duration,
    ) -> Self {
        Self {
            metrics,
            topic,
            wait,
            clock,
            started_us: clock.now_us(),
            armed: true,
        }
    }

    /// Records `hit` or `timeout`, or `no_wait` for a consume that did
    /// not wait.
    fn finish(mut self, hit: bool) {
        let outcome = match (self.wait.is_zero(), hit) {
            (true, _) => "no_wait",
            (false, true) => "hit",
            (false, false) => "timeout",
        };
        self.record(outcome);
    }

    /// Records nothing (the consume failed).
    fn disarm(mut self) {
        self.armed = false;
    }

    fn record(&mut self, outcome: &'static str) {
        self.armed = false;
        let index = metrics::CONSUME_WAIT_OUTCOMES
            .iter()
            .position(|known| *known == outcome)
            .expect("a consume wait outcome");
        let waited = Duration::from_micros(self.clock.now_us().saturating_sub(self.started_us));
        self.metrics.topic(self.topic).consume_wait[index].record(waited.as_secs_f64());
    }
}

impl Drop for WaitTimer<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.record("cancelled");
        }
    }
}

fn consume_refusal(error: ConsumeError) -> ApiError {
    match error {
        ConsumeError::TopicNotFound => topic_not_found(),
        ConsumeError::PartitionOutOfRange { partition, count } => {
            partition_out_of_range(partition, count)
        }
        ConsumeError::OwnerUnavailable { .. } => owner_unavailable(),
        ConsumeError::Read(cause) => {
            tracing::error!(error = %cause, "http server error: consume read failed");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "consume failed")
        }
    }
}

fn replay_refusal(error: ReplayError) -> ApiError {
    match error {
        ReplayError::TopicNotFound => topic_not_found(),
        ReplayError::PartitionOutOfRange { partition, count } => {
            partition_out_of_range(partition, count)
        }
        ReplayError::Gone { offset } => ApiError::new(
            StatusCode::GONE,
            format!("offset {offset} aged out of retention"),
        ),
        ReplayError::Unreadable { offset } => ApiError::new(
            StatusCode::GONE,
            format!("offset {offset} is permanently unreadable"),
        ),
        ReplayError::OwnerUnavailable { .. } => owner_unavailable(),
        ReplayError::Read(cause) => {
            tracing::error!(error = %cause, "http server error: replay read failed");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "read failed")
        }
    }
}

pub(crate) fn topic_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "topic not found")
}

fn partition_out_of_range(partition: u32, count: u32) -> ApiError {
    ApiError::bad_request(format!(
        "partition {partition} out of range: topic has {count} partitions"
    ))
}

/// `503` for a pinned partition whose owner is down, unknown, or (on a
/// node without a forwarder) not this node: the client retries.
pub(crate) fn owner_unavailable() -> ApiError {
    let mut error = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "partition owner is down; retry later",
    );
    error.retry_after_seconds = Some(1);
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = CONSUME_WAIT_MAX_DEFAULT;

    fn parsed(query: &str) -> ConsumeParams {
        consume_params(query, true, CAP).expect("valid query")
    }

    fn refusal(query: &str, client_header: bool) -> String {
        consume_params(query, client_header, CAP)
            .expect_err("refused")
            .message
    }

    #[test]
    fn no_parameters_is_a_single_consume_without_waiting() {
        assert_eq!(
            parsed(""),
            ConsumeParams {
                mode: ConsumeMode::Single,
                partition: None,
                wait: Wait {
                    used: Duration::ZERO,
                    clamped: false
                },
            }
        );
    }

    #[test]
    fn wait_takes_go_durations() {
        assert_eq!(parsed("wait=1.5s").wait.used, Duration::from_millis(1_500));
        assert_eq!(
            parsed("wait=500%C2%B5s").wait.used,
            Duration::from_micros(500)
        );
        assert_eq!(parsed("wait=0").wait.used, Duration::ZERO);
    }

    #[test]
    fn a_negative_wait_means_no_wait() {
        let wait = parsed("wait=-5s").wait;
        assert_eq!(wait.used, Duration::ZERO);
        assert!(!wait.clamped);
    }

    #[test]
    fn a_wait_over_the_ceiling_is_clamped() {
        let wait = parsed("wait=1m").wait;
        assert_eq!(
            wait,
            Wait {
                used: CAP,
                clamped: true
            }
        );
        assert_eq!(clamped_header_value(&wait).as_deref(), Some("10s"));
        let wait = parsed("wait=10s").wait;
        assert!(!wait.clamped);
        assert_eq!(clamped_header_value(&wait), None);
    }

    #[test]
    fn a_zero_ceiling_falls_back_to_thirty_seconds() {
        let params = consume_params("wait=1m", true, Duration::ZERO).expect("valid");
        assert_eq!(
            params.wait,
            Wait {
                used: CONSUME_WAIT_MAX_WHEN_ZERO,
                clamped: true
            }
        );
    }

    #[test]
    fn an_unparsable_wait_is_refused() {
        assert_eq!(
            refusal("wait=soon", true),
            "invalid wait: invalid duration \"soon\""
        );
        assert_eq!(
            refusal("wait=10", true),
            "invalid wait: missing unit in duration \"10\""
        );
        assert!(refusal("wait=%FF", true).starts_with("invalid wait"));
    }

    #[test]
    fn partition_pins_and_must_be_a_non_negative_integer() {
        assert_eq!(parsed("partition=2").partition, Some(2));
        for query in ["partition=-1", "partition=x", "partition=", "partition=+1"] {
            assert_eq!(
                refusal(query, true),
                "invalid partition: want a non-negative integer",
                "{query}"
            );
        }
    }

    #[test]
    fn offset_is_a_replay_of_the_pinned_partition() {
        assert_eq!(
            parsed("offset=5&partition=1").mode,
            ConsumeMode::Replay {
                partition: 1,
                offset: 5
            }
        );
        assert_eq!(refusal("offset=5", true), "offset requires partition");
        assert_eq!(
            refusal("offset=-1&partition=0", true),
            "invalid offset: want a non-negative integer"
        );
    }

    #[test]
    fn max_is_a_batch_of_one_to_a_hundred() {
        assert_eq!(parsed("max=1").mode, ConsumeMode::Batch(1));
        assert_eq!(parsed("max=100").mode, ConsumeMode::Batch(100));
        assert_eq!(parsed("max=100").cap_units(), 100);
        for query in ["max=0", "max=101", "max=-1", "max=x", "max="] {
            assert_eq!(
                refusal(query, true),
                "invalid max: want an integer from 1 to 100",
                "{query}"
            );
        }
    }

    #[test]
    fn a_batch_needs_the_client_header() {
        assert_eq!(
            refusal("max=10", false),
            "batch consume requires an X-Narad-Client header"
        );
        assert!(consume_params("wait=1s", false, CAP).is_ok());
    }

    #[test]
    fn max_and_offset_do_not_combine() {
        assert_eq!(
            refusal("max=2&offset=1&partition=0", true),
            "max cannot be combined with offset"
        );
    }

    #[test]
    fn the_first_occurrence_of_a_parameter_wins() {
        let params = parsed("partition=1&partition=2&wait=1s&wait=x");
        assert_eq!(params.partition, Some(1));
        assert_eq!(params.wait.used, Duration::from_secs(1));
    }

    #[test]
    fn the_cap_refusal_names_the_limit() {
        let error = consume_cap_refusal(1024);
        assert_eq!(error.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            error.message,
            "too many in-flight consume requests for this identity (limit 1024 per node)"
        );
    }
}
