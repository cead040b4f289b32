//! What a node learns of its own calls to peers, for the node to count.
//!
//! This crate knows no metrics registry and no clock of the node's: a node
//! that wants `narad_cluster_rpc_requests_total` and
//! `narad_cluster_rpc_request_seconds` hands its [`Node`](crate::Node) a
//! [`CallObserver`], which reads the node's clock at the start and end of
//! each call and is told how the call ended.

use std::fmt;
use std::time::Duration;

use crate::client::CallError;
use crate::frame::Response;
use crate::opcode::Opcode;

/// Upper bounds, in seconds, of the buckets of a call-duration histogram:
/// from a loopback call's fraction of a millisecond to a long poll's wait.
pub const CALL_SECONDS_BUCKETS: [f64; 15] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// How one call ended: the `outcome` label of
/// `narad_cluster_rpc_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The peer answered with success.
    Ok,
    /// The peer refused the request: a typed `4xx` answer (not the owner,
    /// a fence, a bad request).
    Rejected,
    /// The peer took the request and failed it: a typed `5xx` answer.
    Failed,
    /// No answer within the call's deadline.
    Timeout,
    /// No answer for another reason: the peer could not be reached or
    /// authenticated, the connection was lost, a stream broke a protocol
    /// rule, or the request was over the frame limit.
    Error,
}

impl CallOutcome {
    /// Every outcome, in label order.
    pub const ALL: [CallOutcome; 5] = [
        CallOutcome::Ok,
        CallOutcome::Rejected,
        CallOutcome::Failed,
        CallOutcome::Timeout,
        CallOutcome::Error,
    ];

    /// How `result` ended.
    pub fn of(result: &Result<Response, CallError>) -> Self {
        match result {
            Ok(_) => Self::Ok,
            Err(CallError::Rejected(refusal)) if refusal.status.0 < 500 => Self::Rejected,
            Err(CallError::Rejected(_)) => Self::Failed,
            Err(CallError::Timeout { .. }) => Self::Timeout,
            Err(
                CallError::RequestTooLarge(_)
                | CallError::Dial { .. }
                | CallError::Auth { .. }
                | CallError::ConnectionLost { .. }
                | CallError::StreamRefused { .. }
                | CallError::MalformedAnswer { .. }
                | CallError::TooManyPeers,
            ) => Self::Error,
        }
    }

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Rejected => "rejected",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
            Self::Error => "error",
        }
    }

    /// The position of this outcome in [`CallOutcome::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Told of every call a [`Node`](crate::Node) makes to a peer.
pub trait CallObserver: Send + Sync + fmt::Debug {
    /// The node's monotonic clock in microseconds, read when a call starts
    /// and when it ends.
    fn now_us(&self) -> u64;

    /// A call of `opcode` ended with `outcome` after `elapsed` (dial and
    /// handshake included).
    fn finished(&self, opcode: Opcode, outcome: CallOutcome, elapsed: Duration);
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::frame::{RpcError, Status};

    fn peer() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 7))
    }

    #[test]
    fn a_typed_refusal_is_rejected_below_500_and_failed_from_500() {
        let refused = Err(CallError::Rejected(RpcError::new(
            Status::CONFLICT,
            "fenced",
        )));
        assert_eq!(CallOutcome::of(&refused), CallOutcome::Rejected);
        let failed = Err(CallError::Rejected(RpcError::unavailable("no leader")));
        assert_eq!(CallOutcome::of(&failed), CallOutcome::Failed);
    }

    #[test]
    fn no_answer_is_a_timeout_or_an_error() {
        let timeout = Err(CallError::Timeout {
            after: Duration::from_secs(1),
        });
        assert_eq!(CallOutcome::of(&timeout), CallOutcome::Timeout);
        let lost = Err(CallError::ConnectionLost {
            peer: peer(),
            reason: "reset".to_owned(),
        });
        assert_eq!(CallOutcome::of(&lost), CallOutcome::Error);
        let dial = Err(CallError::Dial {
            peer: peer(),
            reason: "refused".to_owned(),
        });
        assert_eq!(CallOutcome::of(&dial), CallOutcome::Error);
    }

    #[test]
    fn labels_follow_the_order_of_all() {
        let labels: Vec<_> = CallOutcome::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(labels, ["ok", "rejected", "failed", "timeout", "error"]);
        for (index, outcome) in CallOutcome::ALL.iter().enumerate() {
            assert_eq!(outcome.index(), index);
        }
    }
}
