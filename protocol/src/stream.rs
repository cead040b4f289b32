//! What client and server streams share: the application error codes a
//! stream is reset with, and the writer task that owns a stream's send half.
//!
//! One writer task per stream writes whole frames in queue order. Requests
//! and handlers never touch the send half themselves, so a caller that gives
//! up (a dropped future, an aborted handler) can never leave half a frame on
//! the stream.

use quinn::{SendStream, VarInt};
use tokio::sync::mpsc;

use bytes::Bytes;

/// Codes a stream is reset or stopped with; the peer sees them in its error.
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
}

/// An item for a stream's writer task.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// An encoded frame, length prefix included.
    Frame(Bytes),
    /// Reset the send half with this code and stop.
    Reset(VarInt),
}

/// Writes queued frames until the queue closes (then finishes the stream) or
/// a reset is asked for. Returns the error text if the stream failed.
pub(crate) async fn write_loop(
    mut send: SendStream,
    mut queue: mpsc::Receiver<Outgoing>,
) -> Option<String> {
    while let Some(item) = queue.recv().await {
        match item {
            Outgoing::Frame(frame) => {
                if let Err(error) = send.write_all(&frame).await {
                    return Some(error.to_string());
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
