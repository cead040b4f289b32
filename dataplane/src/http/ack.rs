//! `POST /v1/topics/{topic}/ack`: ack, extend or nack one lease
//! (`receipt_handle` in the query) or up to 100 (`{"receipt_handles":[...]}`
//! in the body), spec §1.7 and wire contract §5.5–5.6.
//!
//! `extend` absent, empty or `false` acks; `true` or `1` renews the lease
//! for a full visibility timeout; `0` releases it for redelivery at once.
//! A single settle answers `204`, or `410` when the handle no longer names
//! a live lease. A batch answers `200` with one result per handle, in
//! request order, each the status a single settle would have had.

use std::fmt;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use super::body::read_limited;
use super::consume::{front_refusal, owner_unavailable, topic_not_found};
use super::error::ApiError;
use super::query::params;
use super::{ApiState, authenticate, authorize};
use crate::consume::handle::{HandleError, ReceiptHandle};
use crate::consume::service::SettleError;
use crate::consume::shard::Settle;
use crate::consume_front::{ConsumeFront, SettleResult};
use crate::metadata::GrantAction;

/// Handles one batch settles at most.
pub const ACK_BATCH_MAX: usize = 100;

/// Bytes of a batch ack body at most.
pub const ACK_BATCH_BODY_BYTES_MAX: usize = 64 * 1024;

/// The `410` text: the lease lapsed, was settled already, was leased
/// again under another nonce, or never existed on this topic.
pub const LEASE_GONE: &str = "receipt handle no longer matches an active reservation";

const EXTEND_INVALID: &str =
    r#"invalid extend: want "true" (renew lease) or "0" (release for redelivery)"#;

/// A validated ack query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AckParams {
    /// What to do with every handle.
    pub(crate) how: Settle,
    /// The single handle as sent (parsed later so a malformed one answers
    /// `400` after the topic checks); `None` means a batch in the body.
    pub(crate) receipt_handle: Option<String>,
}

/// Validates the ack query; the first occurrence of each parameter wins.
///
/// # Errors
/// `400` for an `extend` value other than the accepted ones, or a
/// `receipt_handle` that is not text.
pub(crate) fn ack_params(query: &str) -> Result<AckParams, ApiError> {
    let mut extend: Option<Vec<u8>> = None;
    let mut handle: Option<Vec<u8>> = None;
    for param in params(query) {
        let slot = match param.name.as_slice() {
            b"extend" => &mut extend,
            b"receipt_handle" => &mut handle,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(param.value);
        }
    }
    let how = match extend.as_deref() {
        None | Some(b"" | b"false") => Settle::Ack,
        Some(b"true" | b"1") => Settle::Extend,
        Some(b"0") => Settle::Nack,
        Some(_) => return Err(ApiError::bad_request(EXTEND_INVALID)),
    };
    let receipt_handle = match handle {
        None => None,
        Some(bytes) if bytes.is_empty() => None,
        Some(bytes) => Some(String::from_utf8(bytes).map_err(|_| malformed_handle())?),
    };
    Ok(AckParams {
        how,
        receipt_handle,
    })
}

/// Parses one handle.
///
/// # Errors
/// `400` when it is not `partition:offset:nonce`.
pub(crate) fn parse_handle(text: &str) -> Result<ReceiptHandle, ApiError> {
    ReceiptHandle::parse(text).map_err(|_| malformed_handle())
}

fn malformed_handle() -> ApiError {
    ApiError::bad_request(HandleError::Malformed.to_string())
}

/// The `400` of an ack with neither a query handle nor a batch body.
pub(crate) fn handle_required() -> ApiError {
    ApiError::bad_request("receipt_handle required")
}

/// The `{"receipt_handles":[...]}` body.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchAckBody {
    #[serde(deserialize_with = "capped_handles")]
    receipt_handles: Vec<String>,
}

/// Parses a batch ack body: exactly one JSON object, unknown fields
/// refused, the list refused at its 101st element without reading on.
///
/// # Errors
/// `400` with the reason.
pub(crate) fn parse_batch_body(body: &[u8]) -> Result<Vec<String>, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let parsed: BatchAckBody = serde::Deserialize::deserialize(&mut deserializer)
        .map_err(|error| batch_refusal(&error))?;
    deserializer
        .end()
        .map_err(|_| ApiError::bad_request("invalid batch ack body: more than one JSON value"))?;
    if parsed.receipt_handles.is_empty() {
        return Err(ApiError::bad_request(
            "receipt_handles is empty: send 1 to 100 handles",
        ));
    }
    Ok(parsed.receipt_handles)
}

const TOO_MANY: &str = "too many receipt_handles: more than 100";

const _: () = assert!(ACK_BATCH_MAX == 100, "TOO_MANY names the limit");

fn batch_refusal(error: &serde_json::Error) -> ApiError {
    let text = error.to_string();
    if text.starts_with(TOO_MANY) {
        return ApiError::bad_request(TOO_MANY);
    }
    ApiError::bad_request(format!("invalid batch ack body: {text}"))
}

fn capped_handles<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    deserializer.deserialize_seq(CappedHandles)
}

struct CappedHandles;

impl<'de> Visitor<'de> for CappedHandles {
    type Value = Vec<String>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a list of receipt handle strings")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut handles = Vec::new();
        while let Some(handle) = seq.next_element::<String>()? {
            if handles.len() == ACK_BATCH_MAX {
                return Err(de::Error::custom(TOO_MANY));
            }
            handles.push(handle);
        }
        Ok(handles)
    }
}

/// One handle's result in a batch answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HandleResult {
    /// What a single settle of the handle would have answered.
    pub(crate) status: StatusCode,
    /// The error text, for anything but `204`.
    pub(crate) error: Option<String>,
}

impl HandleResult {
    /// A settled handle.
    pub(crate) fn settled() -> Self {
        Self {
            status: StatusCode::NO_CONTENT,
            error: None,
        }
    }

    /// A refused handle.
    pub(crate) fn refused(error: ApiError) -> Self {
        Self {
            status: error.status,
            error: Some(error.message),
        }
    }
}

/// `{"results":[{"status":204},{"status":410,"error":"..."}]}`.
pub(crate) fn results_json(results: &[HandleResult]) -> String {
    let mut text = String::from("{\"results\":[");
    for (i, result) in results.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!("{{\"status\":{}", result.status.as_u16()));
        if let Some(error) = &result.error {
            // A JSON string value prints with JSON escapes.
            let error = serde_json::Value::String(error.clone());
            text.push_str(&format!(",\"error\":{error}"));
        }
        text.push('}');
    }
    text.push_str("]}\n");
    text
}

/// An ack, extend or nack: authenticate (and the cross-site guard), check
/// the `consume` grant, then settle the query's handle (`204`) or the
/// body's handles (`200` with per-handle results).
pub(crate) async fn ack(
    State(state): State<Arc<ApiState>>,
    Path(topic): Path<String>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let user = authenticate(&state, &method, &headers).await?;
    authorize(user.as_deref(), GrantAction::Consume, &topic)?;
    super::remote_children::refuse_stub(&state, &topic)?;
    let params = ack_params(query.as_deref().unwrap_or(""))?;
    let front = state.consume_front()?;
    if let Some(text) = params.receipt_handle {
        let handle = parse_handle(&text)?;
        front
            .settle(&topic, handle, params.how)
            .await
            .map_err(|error| front_refusal(error, settle_refusal))?;
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let body = read_limited(&headers, body, ACK_BATCH_BODY_BYTES_MAX, None).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(handle_required());
    }
    let handles = parse_batch_body(&body)?;
    if state.replica.topic_meta(&topic).is_none() {
        return Err(topic_not_found());
    }
    let results = settle_batch(front, &topic, &handles, params.how).await;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        results_json(&results),
    )
        .into_response())
}

/// Settles a batch's handles in request order: malformed ones `400`, the
/// rest through the consume front.
async fn settle_batch(
    front: ConsumeFront<'_>,
    topic: &str,
    handles: &[String],
    how: Settle,
) -> Vec<HandleResult> {
    let parsed: Vec<Result<ReceiptHandle, ApiError>> =
        handles.iter().map(|text| parse_handle(text)).collect();
    let valid: Vec<ReceiptHandle> = parsed
        .iter()
        .filter_map(|handle| handle.as_ref().ok().copied())
        .collect();
    let mut settled = front.settle_many(topic, &valid, how).await.into_iter();
    parsed
        .into_iter()
        .map(|handle| match handle {
            Err(error) => HandleResult::refused(error),
            Ok(_) => handle_result(settled.next().expect("every handle has a result")),
        })
        .collect()
}

/// What a single settle of the handle would have answered.
fn handle_result(result: SettleResult) -> HandleResult {
    match result {
        SettleResult::Local(Ok(())) => HandleResult::settled(),
        SettleResult::Local(Err(error)) => HandleResult::refused(settle_refusal(error)),
        SettleResult::Forwarded(outcome) => HandleResult {
            status: StatusCode::from_u16(outcome.status).unwrap_or(StatusCode::BAD_GATEWAY),
            error: outcome.message,
        },
    }
}

fn settle_refusal(error: SettleError) -> ApiError {
    match error {
        SettleError::TopicNotFound => topic_not_found(),
        SettleError::LeaseGone => ApiError::new(StatusCode::GONE, LEASE_GONE),
        SettleError::OwnerUnavailable { .. } => owner_unavailable(),
        SettleError::Read(cause) => {
            tracing::error!(error = %cause, "http server error: settle failed");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "ack failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extend_values_choose_ack_extend_or_nack() {
        for (query, how) in [
            ("", Settle::Ack),
            ("extend=", Settle::Ack),
            ("extend=false", Settle::Ack),
            ("extend=true", Settle::Extend),
            ("extend=1", Settle::Extend),
            ("extend=0", Settle::Nack),
        ] {
            assert_eq!(ack_params(query).expect("valid").how, how, "{query}");
        }
    }

    #[test]
    fn any_other_extend_is_refused_with_the_spec_text() {
        for query in ["extend=yes", "extend=TRUE", "extend=2", "extend=%20"] {
            let error = ack_params(query).expect_err("refused");
            assert_eq!(error.status, StatusCode::BAD_REQUEST);
            assert_eq!(
                error.message,
                r#"invalid extend: want "true" (renew lease) or "0" (release for redelivery)"#
            );
        }
    }

    #[test]
    fn the_first_occurrence_wins() {
        let params = ack_params("extend=0&extend=bogus&receipt_handle=1%3A2%3A3&receipt_handle=x")
            .expect("valid");
        assert_eq!(params.how, Settle::Nack);
        assert_eq!(params.receipt_handle.as_deref(), Some("1:2:3"));
    }

    #[test]
    fn an_empty_handle_counts_as_missing() {
        assert_eq!(
            ack_params("receipt_handle=").expect("valid").receipt_handle,
            None
        );
    }

    #[test]
    fn a_malformed_handle_is_a_400() {
        let error = parse_handle("1:2").expect_err("refused");
        assert_eq!(error.status, StatusCode::BAD_REQUEST);
        assert!(parse_handle("1:2:3").is_ok());
    }

    #[test]
    fn a_batch_body_lists_handles_in_order() {
        let handles = parse_batch_body(br#"{"receipt_handles":["1:2:3","0:0:9"]}"#).expect("ok");
        assert_eq!(handles, vec!["1:2:3".to_owned(), "0:0:9".to_owned()]);
    }

    #[test]
    fn a_batch_of_a_hundred_is_taken_and_one_more_is_refused() {
        let body = |count: usize| {
            let list: Vec<String> = (0..count).map(|i| format!("\"0:{i}:1\"")).collect();
            format!("{{\"receipt_handles\":[{}]}}", list.join(","))
        };
        assert_eq!(
            parse_batch_body(body(100).as_bytes()).expect("ok").len(),
            100
        );
        let error = parse_batch_body(body(101).as_bytes()).expect_err("refused");
        assert_eq!(error.message, "too many receipt_handles: more than 100");
    }

    #[test]
    fn the_cap_is_checked_before_the_rest_is_read() {
        let mut body = String::from("{\"receipt_handles\":[");
        for i in 0..101 {
            body.push_str(&format!("\"0:{i}:1\","));
        }
        body.push_str("not json at all");
        let error = parse_batch_body(body.as_bytes()).expect_err("refused");
        assert_eq!(error.message, "too many receipt_handles: more than 100");
    }

    #[test]
    fn bad_batch_bodies_are_refused() {
        for body in [
            &br#"{"receipt_handles":[]}"#[..],
            br#"{"receipt_handles":["1:2:3"],"extra":1}"#,
            br#"{"receipt_handles":["1:2:3"]} {}"#,
            br#"{"receipt_handles":[1]}"#,
            br#"{"handles":["1:2:3"]}"#,
            br#"["1:2:3"]"#,
            b"{",
        ] {
            let error = parse_batch_body(body).expect_err("refused");
            assert_eq!(error.status, StatusCode::BAD_REQUEST);
        }
    }

    #[test]
    fn results_render_in_order_with_errors_only_when_refused() {
        let text = results_json(&[
            HandleResult::settled(),
            HandleResult::refused(ApiError::new(StatusCode::GONE, LEASE_GONE)),
        ]);
        assert_eq!(
            text,
            "{\"results\":[{\"status\":204},{\"status\":410,\"error\":\"receipt handle no longer matches an active reservation\"}]}\n"
        );
    }
}
