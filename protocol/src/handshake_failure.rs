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

use std::net::SocketAddr;

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
}
