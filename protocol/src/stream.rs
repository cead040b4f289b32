//! What client and server streams share: the application error codes a
//! stream is reset with, and the writer task that owns a stream's send half.
//!
//! One writer task per stream writes whole frames in queue order. Requests
//! and handlers never touch the send half themselves, so a caller that gives
//! up (a dropped future, an aborted handler) can never leave half a frame on
//! the stream.

use std::time::Duration;

use quinn::{SendStream, VarInt};
use tokio::sync::mpsc;

use crate::limits::WRITE_TIMEOUT_CHUNK_BYTES;

use bytes::Bytes;

/// Codes a stream is reset or stopped with (and a connection closed with);
/// the peer sees them in its error.
pub mod codes {
    use quinn::VarInt;

    /// The stream is closed because its node is shutting down.
    pub const SHUTDOWN: VarInt = VarInt::from_u32(0);
    /// The peer did not prove the cluster secret.
    pub const AUTH_FAILED: VarInt = VarInt::from_u32(1);
    /// The peer sent a frame over the size limit.
    pub const FRAME_TOO_LARGE: VarInt = VarInt::from_u32(2);
    /// The peer broke the protocol (a frame of the wrong kind, a reused id).
    pub const PROTOCOL_VIOLATION: VarInt = VarInt::from_u32(3);
    /// The peer did not take a frame within the write timeout.
    pub const WRITE_TIMEOUT: VarInt = VarInt::from_u32(4);
    /// Connection closed: after a call's deadline, a liveness ping got no
    /// answer and nothing at all arrived from the peer.
    pub const LIVENESS_LOST: VarInt = VarInt::from_u32(5);
}

/// An item for a stream's writer task.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// An encoded frame, length prefix included.
    Frame(Bytes),
    /// Reset the send half with this code and stop.
    Reset(VarInt),
}

/// How long a writer may take for one frame: a base, plus an allowance per
/// chunk of frame size so a 16 MiB frame on a slow link is not cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteBudget {
    pub(crate) base: Duration,
    pub(crate) per_chunk: Duration,
}

impl WriteBudget {
    /// Time allowed for a frame of `len` bytes.
    pub(crate) fn for_frame(self, len: usize) -> Duration {
        let chunks = u32::try_from(len / WRITE_TIMEOUT_CHUNK_BYTES).unwrap_or(u32::MAX);
        self.base
            .saturating_add(self.per_chunk.saturating_mul(chunks))
    }
}

/// Writes queued frames until the queue closes (then finishes the stream) or
/// a reset is asked for. A frame not taken by the peer within its budget
/// resets the stream. Returns the error text if the stream failed.
pub(crate) async fn write_loop(
    mut send: SendStream,
    mut queue: mpsc::Receiver<Outgoing>,
    budget: WriteBudget,
) -> Option<String> {
    while let Some(item) = queue.recv().await {
        match item {
            Outgoing::Frame(frame) => {
                let len = frame.len();
                let allowed = budget.for_frame(len);
                // Handed over whole: quinn keeps the `Bytes` instead of
                // copying it into a buffer of its own.
                match tokio::time::timeout(allowed, send.write_chunk(frame)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => return Some(error.to_string()),
                    Err(_) => {
                        let _ = send.reset(codes::WRITE_TIMEOUT);
                        return Some(format!(
                            "peer did not take a {len}-byte frame within {allowed:?}"
                        ));
                    }
                }
            }
            Outgoing::Reset(code) => {
                let _ = send.reset(code);
                return None;
            }
        }
    }
    // Every sender is gone: nothing more will be written. A stream already
    // reset or stopped by the peer has nothing to finish.
    let _ = send.finish();
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_grows_by_one_allowance_per_full_chunk() {
        let budget = WriteBudget {
            base: Duration::from_secs(5),
            per_chunk: Duration::from_secs(1),
        };
        assert_eq!(budget.for_frame(0), Duration::from_secs(5));
        assert_eq!(
            budget.for_frame(WRITE_TIMEOUT_CHUNK_BYTES - 1),
            Duration::from_secs(5)
        );
        assert_eq!(
            budget.for_frame(WRITE_TIMEOUT_CHUNK_BYTES),
            Duration::from_secs(6)
        );
        assert_eq!(
            budget.for_frame(crate::limits::FRAME_BYTES_MAX),
            Duration::from_secs(5 + 64)
        );
    }
}
