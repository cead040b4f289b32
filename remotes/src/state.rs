//! Link states (spec §4, "Remote children"): what a remote child's link
//! shows, and how an answer of the target, or a failure to get one, maps
//! to a state. None of the failure states moves the cursor.
//!
//! The mapping follows what a Narad target (this broker) answers to
//! `POST /v1/topics/{topic}/produce/batch`; `docs/internals/remotes.md`
//! ("Link states") has the table.

use std::time::Duration;

/// The longest `Retry-After` honoured; a longer one is cut to this.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(60);

/// A remote child link's state, as listed and in
/// `narad_fanout_remote_state{state}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LinkState {
    /// Shipping normally.
    Running,
    /// Paused by an operator.
    Paused,
    /// The link names a remote that no longer exists.
    RemoteMissing,
    /// The sealed password does not open on this node.
    CredentialUnreadable,
    /// This node runs without security, so it holds no credential.
    NodeInsecure,
    /// The address guard refused every way to the remote.
    DestinationRefused,
    /// The target topic has remote children of its own.
    TargetHasRemoteChildren,
    /// The target topic was deleted and created again.
    TargetReplaced,
    /// `401`: the credential is wrong.
    AuthFailed,
    /// `403`: the credential may not produce to the target topic.
    Forbidden,
    /// `404` from the topic: the target topic does not exist.
    TargetMissing,
    /// `404` from the router or `405`: the target has no batch produce.
    NoBatchProduce,
    /// A `3xx`: redirects are never followed.
    RedirectRefused,
    /// The TLS handshake failed (certificate, version, name).
    TlsFailed,
    /// `400` naming a record: the target refuses that record.
    RejectedRecord,
    /// `413`: a record is over the target's limit.
    RecordTooLarge,
    /// No answer, a connection failure, a timeout or a `5xx`.
    Unavailable,
    /// `429`: the target asks to wait.
    Throttled,
    /// Anything else.
    Unknown,
}

impl LinkState {
    /// Every state, in the spec's order.
    pub const ALL: [Self; 19] = [
        Self::RemoteMissing,
        Self::CredentialUnreadable,
        Self::NodeInsecure,
        Self::DestinationRefused,
        Self::TargetHasRemoteChildren,
        Self::TargetReplaced,
        Self::AuthFailed,
        Self::Forbidden,
        Self::TargetMissing,
        Self::NoBatchProduce,
        Self::RedirectRefused,
        Self::TlsFailed,
        Self::RejectedRecord,
        Self::RecordTooLarge,
        Self::Unavailable,
        Self::Throttled,
        Self::Unknown,
        Self::Paused,
        Self::Running,
    ];

    /// The state's name on the wire and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Paused => "paused",
            Self::RemoteMissing => "remote_missing",
            Self::CredentialUnreadable => "credential_unreadable",
            Self::NodeInsecure => "node_insecure",
            Self::DestinationRefused => "destination_refused",
            Self::TargetHasRemoteChildren => "target_has_remote_children",
            Self::TargetReplaced => "target_replaced",
            Self::AuthFailed => "auth_failed",
            Self::Forbidden => "forbidden",
            Self::TargetMissing => "target_missing",
            Self::NoBatchProduce => "no_batch_produce",
            Self::RedirectRefused => "redirect_refused",
            Self::TlsFailed => "tls_failed",
            Self::RejectedRecord => "rejected_record",
            Self::RecordTooLarge => "record_too_large",
            Self::Unavailable => "unavailable",
            Self::Throttled => "throttled",
            Self::Unknown => "unknown",
        }
    }

    /// What a failure in this state means for the remote's gate.
    pub fn scope(self) -> Scope {
        match self {
            Self::AuthFailed
            | Self::DestinationRefused
            | Self::NoBatchProduce
            | Self::RedirectRefused
            | Self::TlsFailed => Scope::RemoteWide,
            Self::Unavailable | Self::Unknown => Scope::Transient,
            Self::Throttled => Scope::Throttled,
            _ => Scope::Link,
        }
    }
}

impl std::fmt::Display for LinkState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How far a failure reaches, which decides what the gate does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every link to the remote fails the same way (credential, TLS,
    /// guard, redirect, no batch route): the gate closes at once.
    RemoteWide,
    /// Maybe passing (no answer, `5xx`, an unexpected answer): the gate
    /// closes after three in a row.
    Transient,
    /// The target asked to wait: the gate closes for `Retry-After`.
    Throttled,
    /// Only this link's topic or record (missing topic, no grant, a
    /// refused record): the remote answered, so the gate counts it as an
    /// answer and stays open.
    Link,
}

/// An answer of the target, as much of it as classifying needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// `Retry-After` in whole seconds, when present and valid.
    pub retry_after: Option<Duration>,
    /// Whether the body was `application/json` (the broker's error shape;
    /// its router's own `404` is plain text).
    pub json: bool,
    /// The `error` text of a JSON body, else the trimmed body (at most
    /// 8 KiB of it).
    pub message: String,
}

/// A failure to get an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoAnswer {
    /// The request's deadline passed.
    Timeout,
    /// The connection failed or broke before an answer.
    Connection(String),
    /// The TLS handshake failed.
    Tls(String),
    /// The address guard refused the destination.
    Refused(String),
    /// The request could not be built or sent for another reason.
    Other(String),
}

/// A failed request, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The link state the failure puts the link in.
    pub state: LinkState,
    /// The zero-based index, in the request, of the record the target
    /// named (`message <i>: ...`).
    pub record: Option<usize>,
    /// `Retry-After`, capped at [`RETRY_AFTER_MAX`].
    pub retry_after: Option<Duration>,
    /// Whether the request ran out of time (the chunk limit halves).
    pub timed_out: bool,
    /// The status, when there was an answer.
    pub status: Option<u16>,
    /// What the target said or what went wrong.
    pub detail: String,
}

impl Failure {
    fn new(state: LinkState, status: Option<u16>, detail: String) -> Self {
        Self {
            state,
            record: None,
            retry_after: None,
            timed_out: false,
            status,
            detail,
        }
    }
}

/// Classifies a batch produce's answer: `Ok(())` for `202` only (a
/// success status is exact), else the failure.
///
/// # Errors
/// The [`Failure`] the answer means.
pub fn classify_answer(answer: &Answer) -> Result<(), Failure> {
    let status = answer.status;
    let detail = answer.message.clone();
    let failure = |state| Failure::new(state, Some(status), detail.clone());
    let retry_after = answer.retry_after.map(|wait| wait.min(RETRY_AFTER_MAX));
    let mut failed = match status {
        202 => return Ok(()),
        300..=399 => failure(LinkState::RedirectRefused),
        401 => failure(LinkState::AuthFailed),
        403 => failure(LinkState::Forbidden),
        // The broker's router answers a route it lacks with a plain-text
        // `404 page not found`; the route answers a missing topic in JSON.
        404 if answer.json => failure(LinkState::TargetMissing),
        404 | 405 => failure(LinkState::NoBatchProduce),
        400 => match record_index(&answer.message) {
            Some(index) => Failure {
                record: Some(index),
                ..failure(LinkState::RejectedRecord)
            },
            None => failure(LinkState::Unknown),
        },
        413 => Failure {
            record: record_index(&answer.message),
            ..failure(LinkState::RecordTooLarge)
        },
        429 => failure(LinkState::Throttled),
        500..=599 => failure(LinkState::Unavailable),
        _ => failure(LinkState::Unknown),
    };
    if matches!(failed.state, LinkState::Throttled | LinkState::Unavailable) {
        failed.retry_after = retry_after;
    }
    Err(failed)
}

/// Classifies a request that got no answer.
pub fn classify_no_answer(cause: &NoAnswer) -> Failure {
    match cause {
        NoAnswer::Timeout => Failure {
            timed_out: true,
            ..Failure::new(LinkState::Unavailable, None, "request timed out".to_owned())
        },
        NoAnswer::Connection(detail) => Failure::new(LinkState::Unavailable, None, detail.clone()),
        NoAnswer::Tls(detail) => Failure::new(LinkState::TlsFailed, None, detail.clone()),
        NoAnswer::Refused(detail) => {
            Failure::new(LinkState::DestinationRefused, None, detail.clone())
        }
        NoAnswer::Other(detail) => Failure::new(LinkState::Unknown, None, detail.clone()),
    }
}

/// The index `i` of a batch refusal `message <i>: ...`, the broker's (and
/// the wire contract's) prefix for a refusal of one record.
pub fn record_index(message: &str) -> Option<usize> {
    let rest = message.strip_prefix("message ")?;
    let (digits, _) = rest.split_once(": ")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, json: bool, message: &str) -> Answer {
        Answer {
            status,
            retry_after: None,
            json,
            message: message.to_owned(),
        }
    }

    fn state_of(status: u16, json: bool, message: &str) -> LinkState {
        classify_answer(&answer(status, json, message))
            .unwrap_err()
            .state
    }

    #[test]
    fn only_202_is_success() {
        assert!(classify_answer(&answer(202, true, "")).is_ok());
        for status in [200, 201, 204] {
            assert_eq!(state_of(status, true, ""), LinkState::Unknown, "{status}");
        }
    }

    #[test]
    fn statuses_map_to_the_spec_states() {
        let cases = [
            (301, false, "", LinkState::RedirectRefused),
            (302, false, "", LinkState::RedirectRefused),
            (308, false, "", LinkState::RedirectRefused),
            (401, true, "unauthorized", LinkState::AuthFailed),
            (403, true, "no grant on this topic", LinkState::Forbidden),
            (404, true, "topic not found", LinkState::TargetMissing),
            (404, false, "404 page not found", LinkState::NoBatchProduce),
            (405, false, "", LinkState::NoBatchProduce),
            (
                409,
                true,
                "direct produce to a delayed child topic is not allowed",
                LinkState::Unknown,
            ),
            (
                413,
                true,
                "request body too large",
                LinkState::RecordTooLarge,
            ),
            (
                415,
                true,
                "unsupported content encoding",
                LinkState::Unknown,
            ),
            (429, true, "", LinkState::Throttled),
            (500, true, "produce failed", LinkState::Unavailable),
            (502, false, "", LinkState::Unavailable),
            (
                503,
                false,
                "partition owner is down; retry later",
                LinkState::Unavailable,
            ),
        ];
        for (status, json, message, expected) in cases {
            assert_eq!(
                state_of(status, json, message),
                expected,
                "{status} {message}"
            );
        }
    }

    #[test]
    fn a_400_naming_a_record_is_rejected_record_with_its_index() {
        let failure = classify_answer(&answer(
            400,
            true,
            "message 7: schema: /amount: expected integer",
        ))
        .unwrap_err();
        assert_eq!(failure.state, LinkState::RejectedRecord);
        assert_eq!(failure.record, Some(7));
        let other = classify_answer(&answer(400, true, "invalid json: eof")).unwrap_err();
        assert_eq!(other.state, LinkState::Unknown);
        assert_eq!(other.record, None);
    }

    #[test]
    fn a_413_naming_a_record_carries_its_index() {
        let failure =
            classify_answer(&answer(413, true, "message 3: message too large")).unwrap_err();
        assert_eq!(failure.state, LinkState::RecordTooLarge);
        assert_eq!(failure.record, Some(3));
    }

    #[test]
    fn retry_after_is_capped_at_sixty_seconds_and_kept_only_where_it_means_wait() {
        let mut throttled = answer(429, true, "");
        throttled.retry_after = Some(Duration::from_secs(600));
        let failure = classify_answer(&throttled).unwrap_err();
        assert_eq!(failure.retry_after, Some(RETRY_AFTER_MAX));
        throttled.retry_after = Some(Duration::from_secs(5));
        let failure = classify_answer(&throttled).unwrap_err();
        assert_eq!(failure.retry_after, Some(Duration::from_secs(5)));
        let mut unauthorized = answer(401, true, "");
        unauthorized.retry_after = Some(Duration::from_secs(5));
        assert_eq!(
            classify_answer(&unauthorized).unwrap_err().retry_after,
            None
        );
    }

    #[test]
    fn no_answer_maps_to_unavailable_tls_failed_or_destination_refused() {
        let timeout = classify_no_answer(&NoAnswer::Timeout);
        assert_eq!(timeout.state, LinkState::Unavailable);
        assert!(timeout.timed_out);
        let reset = classify_no_answer(&NoAnswer::Connection("reset".into()));
        assert_eq!(reset.state, LinkState::Unavailable);
        assert!(!reset.timed_out);
        assert_eq!(
            classify_no_answer(&NoAnswer::Tls("bad certificate".into())).state,
            LinkState::TlsFailed
        );
        assert_eq!(
            classify_no_answer(&NoAnswer::Refused("loopback".into())).state,
            LinkState::DestinationRefused
        );
        assert_eq!(
            classify_no_answer(&NoAnswer::Other("builder".into())).state,
            LinkState::Unknown
        );
    }

    #[test]
    fn record_index_reads_only_the_exact_prefix() {
        assert_eq!(record_index("message 0: message required"), Some(0));
        assert_eq!(record_index("message 12: x"), Some(12));
        assert_eq!(record_index("message x: y"), None);
        assert_eq!(record_index("message : y"), None);
        assert_eq!(record_index("messages required"), None);
        assert_eq!(record_index("the message 1: y"), None);
    }

    #[test]
    fn names_are_the_spec_names_and_unique() {
        let names: std::collections::HashSet<&str> =
            LinkState::ALL.iter().map(|state| state.as_str()).collect();
        assert_eq!(names.len(), LinkState::ALL.len());
        assert_eq!(LinkState::NoBatchProduce.to_string(), "no_batch_produce");
    }

    #[test]
    fn scopes_decide_the_gate() {
        assert_eq!(LinkState::AuthFailed.scope(), Scope::RemoteWide);
        assert_eq!(LinkState::TlsFailed.scope(), Scope::RemoteWide);
        assert_eq!(LinkState::Unavailable.scope(), Scope::Transient);
        assert_eq!(LinkState::Throttled.scope(), Scope::Throttled);
        assert_eq!(LinkState::RejectedRecord.scope(), Scope::Link);
        assert_eq!(LinkState::TargetMissing.scope(), Scope::Link);
    }
}
