//! What a failed stream handshake says happened, and the log line that
//! tells it.
//!
//! A handshake fails for two unlike reasons: a side proved something wrong
//! (another secret, another mode, not a hello at all), or the stream or its
//! connection went away before both hellos crossed (a peer SIGKILLed,
//! restarted, cut off). The first is a configuration fault an operator must
//! fix; the second proves nothing about the peer and clears up when it is
//! back. Logging both as "authentication failed" sends an operator hunting
//! for a secret mismatch after every crash, so the two are told apart here.
//!
//! Below the streams, the TLS handshake of the connection can be refused
//! too, when cluster TLS files are set (`cluster_tls`): a certificate that
//! does not chain to the CA, one that expired, a client that shows none.
//! [`TlsRefusal`] reads which from the TLS alert the refusing side sent
//! (QUIC carries it as the connection's close code, `0x100 + alert`), and
//! which side refused, so each side's log says what it refused or what
//! refused it.

use std::net::SocketAddr;

use rustls::AlertDescription;
use tracing::{info, warn};

use crate::auth::AuthError;
use crate::lane::Lane;
use crate::wire::WireError;

/// The kind of a failed handshake, as the log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandshakeFailure {
    /// A side refused the other's proof or mode: the nodes do not share the
    /// secret, or one runs in insecure dev mode.
    Refused,
    /// The peer's hello is not a hello of this protocol (a wrong role or
    /// scheme byte, a frame over the pre-auth limit).
    Malformed,
    /// The stream or its connection ended before both hellos crossed.
    ConnectionLost,
    /// The peer, still connected, sent no hello within the auth timeout.
    Silent,
}

impl HandshakeFailure {
    /// Classifies `error`; `connection_closed` is whether the stream's QUIC
    /// connection had closed when the handshake gave up (a hello that never
    /// came on a dead connection is a lost connection, not a silent peer).
    pub(crate) fn of(error: &AuthError, connection_closed: bool) -> Self {
        match error {
            AuthError::PeerHasNoSecret
            | AuthError::PeerRequiresSecret
            | AuthError::WrongProof
            | AuthError::RefusedByPeer
            | AuthError::Exporter => Self::Refused,
            AuthError::Malformed(_) | AuthError::Wire(WireError::Frame(_)) => Self::Malformed,
            AuthError::Wire(WireError::EndedInsideFrame | WireError::Io(_)) => Self::ConnectionLost,
            AuthError::Timeout(_) if connection_closed => Self::ConnectionLost,
            AuthError::Timeout(_) => Self::Silent,
        }
    }

    /// Logs the failed handshake of a stream with `peer` (on `lane`, for the
    /// side that opened it): a refusal or a silent peer as a warning, a lost
    /// connection as information (whoever needed the stream reports the
    /// failed call).
    pub(crate) fn report(self, peer: SocketAddr, lane: Option<Lane>, error: &AuthError) {
        let lane = lane.map(tracing::field::display);
        match self {
            Self::Refused => {
                warn!(%peer, lane, %error, "cluster stream refused: authentication failed");
            }
            Self::Malformed => {
                warn!(%peer, lane, %error, "cluster stream refused: malformed hello");
            }
            Self::Silent => {
                warn!(%peer, lane, %error, "cluster stream refused: no hello in time");
            }
            Self::ConnectionLost => {
                info!(%peer, lane, %error, "cluster stream closed: connection lost");
            }
        }
    }
}

/// Which side of a connection refused the TLS handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefusedBy {
    /// This node refused the peer's certificate.
    ThisNode,
    /// The peer refused this node's certificate (or its lack of one).
    Peer,
}

/// What a refused TLS handshake says of the certificate, from its alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CertificateProblem {
    /// `unknown_ca`: the certificate does not chain to the refusing side's
    /// CA (another cluster's CA, or a node without cluster TLS files,
    /// whose certificate is self-signed).
    UnknownCa,
    /// `certificate_expired`: past its `notAfter` (or before its
    /// `notBefore`).
    Expired,
    /// `certificate_required`: the client showed no certificate (it runs
    /// without cluster TLS files).
    Missing,
    /// Any other TLS alert, by its code.
    Other(u8),
}

/// A TLS handshake between nodes that a side refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TlsRefusal {
    /// Who refused.
    pub(crate) by: RefusedBy,
    /// Why.
    pub(crate) problem: CertificateProblem,
}

/// QUIC's crypto error codes: `0x100` plus the TLS alert (RFC 9001 §4.8).
const CRYPTO_ERROR_BASE: u64 = 0x100;
const CRYPTO_ERROR_LAST: u64 = 0x1ff;

impl TlsRefusal {
    /// The refusal `error` records, if it is one: a crypto error this
    /// node's TLS raised is a refusal by this node; a connection the peer
    /// closed with a crypto code is a refusal by the peer. `None` for any
    /// other way a connection ends.
    pub(crate) fn of(error: &quinn::ConnectionError) -> Option<Self> {
        let (by, code) = match error {
            quinn::ConnectionError::TransportError(error) => (RefusedBy::ThisNode, error.code),
            quinn::ConnectionError::ConnectionClosed(close) => (RefusedBy::Peer, close.error_code),
            _ => return None,
        };
        let code = u64::from(code);
        if !(CRYPTO_ERROR_BASE..=CRYPTO_ERROR_LAST).contains(&code) {
            return None;
        }
        // Within 0x100..=0x1ff the low byte is the alert.
        let alert = (code - CRYPTO_ERROR_BASE) as u8;
        let problem = match AlertDescription::from(alert) {
            AlertDescription::UnknownCA => CertificateProblem::UnknownCa,
            AlertDescription::CertificateExpired => CertificateProblem::Expired,
            AlertDescription::CertificateRequired => CertificateProblem::Missing,
            _ => CertificateProblem::Other(alert),
        };
        Some(Self { by, problem })
    }

    /// What happened, for the log and for the failed call.
    pub(crate) fn describe(&self) -> String {
        use CertificateProblem::{Expired, Missing, Other, UnknownCa};
        match (self.by, self.problem) {
            (RefusedBy::ThisNode, UnknownCa) => {
                "this node refused the peer's certificate: unknown CA \
                 (it does not chain to security.cluster_tls_ca_file)"
                    .into()
            }
            (RefusedBy::ThisNode, Expired) => {
                "this node refused the peer's certificate: expired or not yet valid".into()
            }
            (RefusedBy::ThisNode, Missing) => "this node refused the peer: no client certificate \
                 (the peer runs without security.cluster_tls_* files)"
                .into(),
            (RefusedBy::Peer, UnknownCa) => "the peer refused this node's certificate: unknown CA \
                 (it does not chain to the peer's CA; or this node runs without \
                 security.cluster_tls_* files)"
                .into(),
            (RefusedBy::Peer, Expired) => {
                "the peer refused this node's certificate: expired or not yet valid".into()
            }
            (RefusedBy::Peer, Missing) => "the peer refused this node: no client certificate \
                 (this node runs without security.cluster_tls_* files)"
                .into(),
            (RefusedBy::ThisNode, Other(alert)) => format!(
                "this node refused the TLS handshake: {:?}",
                AlertDescription::from(alert)
            ),
            (RefusedBy::Peer, Other(alert)) => format!(
                "the peer refused the TLS handshake: {:?}",
                AlertDescription::from(alert)
            ),
        }
    }

    /// Logs the refused connection with `peer` as a warning: a certificate
    /// problem is a configuration fault an operator must fix. `error` is
    /// the connection's own account (rustls' reason, on the refusing side).
    pub(crate) fn report(&self, peer: SocketAddr, error: &quinn::ConnectionError) {
        warn!(%peer, %error, "cluster connection refused: {}", self.describe());
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::time::Duration;

    use super::*;
    use crate::codec::DecodeError;
    use crate::frame::FrameError;

    fn io_failure(error: impl Into<io::Error>) -> AuthError {
        AuthError::Wire(WireError::Io(error.into()))
    }

    #[test]
    fn a_wrong_or_refused_proof_is_an_authentication_failure() {
        for error in [
            AuthError::WrongProof,
            AuthError::RefusedByPeer,
            AuthError::PeerHasNoSecret,
            AuthError::PeerRequiresSecret,
            AuthError::Exporter,
        ] {
            // A proof proven wrong stays wrong if the connection then closes.
            for connection_closed in [false, true] {
                assert_eq!(
                    HandshakeFailure::of(&error, connection_closed),
                    HandshakeFailure::Refused,
                    "{error}"
                );
            }
        }
    }

    #[test]
    fn a_connection_lost_during_the_hello_is_a_lost_connection() {
        for error in [
            io_failure(quinn::ReadError::ConnectionLost(
                quinn::ConnectionError::TimedOut,
            )),
            io_failure(quinn::WriteError::ConnectionLost(
                quinn::ConnectionError::Reset,
            )),
            io_failure(io::Error::from(io::ErrorKind::ConnectionReset)),
            AuthError::Wire(WireError::EndedInsideFrame),
        ] {
            for connection_closed in [false, true] {
                assert_eq!(
                    HandshakeFailure::of(&error, connection_closed),
                    HandshakeFailure::ConnectionLost,
                    "{error}"
                );
            }
        }
    }

    #[test]
    fn a_peer_reset_stream_during_the_hello_is_a_lost_connection() {
        let error = io_failure(quinn::ReadError::Reset(crate::stream::codes::SHUTDOWN));
        assert_eq!(
            HandshakeFailure::of(&error, false),
            HandshakeFailure::ConnectionLost
        );
    }

    #[test]
    fn no_hello_on_a_closed_connection_is_a_lost_connection() {
        let error = AuthError::Timeout(Duration::from_secs(5));
        assert_eq!(
            HandshakeFailure::of(&error, true),
            HandshakeFailure::ConnectionLost
        );
    }

    #[test]
    fn no_hello_on_a_live_connection_is_a_silent_peer() {
        let error = AuthError::Timeout(Duration::from_secs(5));
        assert_eq!(
            HandshakeFailure::of(&error, false),
            HandshakeFailure::Silent
        );
    }

    #[test]
    fn a_hello_that_is_not_a_hello_is_malformed() {
        let wrong_role = AuthError::Malformed(DecodeError::InvalidValue {
            field: "hello role",
            value: 7,
        });
        let oversize = AuthError::Wire(WireError::Frame(FrameError::TooLarge {
            bytes: 1 << 20,
            limit: 64,
        }));
        for error in [wrong_role, oversize] {
            assert_eq!(
                HandshakeFailure::of(&error, false),
                HandshakeFailure::Malformed,
                "{error}"
            );
        }
    }

    fn refused_here(alert: AlertDescription) -> quinn::ConnectionError {
        quinn::ConnectionError::TransportError(quinn_proto::TransportError {
            code: quinn::TransportErrorCode::crypto(u8::from(alert)),
            frame: None,
            reason: format!("{alert:?}"),
        })
    }

    fn refused_by_peer(alert: AlertDescription) -> quinn::ConnectionError {
        quinn::ConnectionError::ConnectionClosed(quinn::ConnectionClose {
            error_code: quinn::TransportErrorCode::crypto(u8::from(alert)),
            frame_type: None,
            reason: bytes::Bytes::new(),
        })
    }

    #[test]
    fn certificate_alerts_name_the_problem_and_the_side_that_refused() {
        let cases = [
            (
                AlertDescription::UnknownCA,
                CertificateProblem::UnknownCa,
                "unknown CA",
            ),
            (
                AlertDescription::CertificateExpired,
                CertificateProblem::Expired,
                "expired",
            ),
            (
                AlertDescription::CertificateRequired,
                CertificateProblem::Missing,
                "no client certificate",
            ),
        ];
        for (alert, problem, text) in cases {
            let here = TlsRefusal::of(&refused_here(alert)).expect("a refusal");
            assert_eq!(
                here,
                TlsRefusal {
                    by: RefusedBy::ThisNode,
                    problem
                }
            );
            assert!(
                here.describe().starts_with("this node refused"),
                "{}",
                here.describe()
            );
            assert!(here.describe().contains(text), "{}", here.describe());
            let there = TlsRefusal::of(&refused_by_peer(alert)).expect("a refusal");
            assert_eq!(
                there,
                TlsRefusal {
                    by: RefusedBy::Peer,
                    problem
                }
            );
            assert!(
                there.describe().starts_with("the peer refused"),
                "{}",
                there.describe()
            );
            assert!(there.describe().contains(text), "{}", there.describe());
        }
    }

    #[test]
    fn another_tls_alert_is_a_refusal_named_by_its_alert() {
        let refusal = TlsRefusal::of(&refused_here(AlertDescription::NoApplicationProtocol))
            .expect("a refusal");
        assert_eq!(
            refusal.problem,
            CertificateProblem::Other(u8::from(AlertDescription::NoApplicationProtocol))
        );
        assert!(
            refusal.describe().contains("NoApplicationProtocol"),
            "{}",
            refusal.describe()
        );
    }

    #[test]
    fn a_connection_ended_otherwise_is_no_tls_refusal() {
        let closed_by_application =
            quinn::ConnectionError::ApplicationClosed(quinn::ApplicationClose {
                error_code: quinn::VarInt::from_u32(0x100 + 48),
                reason: bytes::Bytes::new(),
            });
        let protocol_violation = quinn::ConnectionError::ConnectionClosed(quinn::ConnectionClose {
            error_code: quinn::TransportErrorCode::PROTOCOL_VIOLATION,
            frame_type: None,
            reason: bytes::Bytes::new(),
        });
        for error in [
            quinn::ConnectionError::TimedOut,
            quinn::ConnectionError::Reset,
            quinn::ConnectionError::LocallyClosed,
            closed_by_application,
            protocol_violation,
        ] {
            assert_eq!(TlsRefusal::of(&error), None, "{error}");
        }
    }
}
