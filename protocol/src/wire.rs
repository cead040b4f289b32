//! Reading and writing whole frames on a byte stream.
//!
//! The reader reads the 4-byte length prefix, checks it against the limit in
//! force (the pre-auth limit before the handshake, the frame limit after),
//! and only then reads the payload, so a peer claiming a huge frame makes this
//! node allocate nothing.

use std::io;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::frame::{FrameError, check_length_prefix};

/// Why a frame could not be read from a stream.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The length prefix breaks a limit; the payload was not read.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The stream ended between the length prefix and the frame's end.
    #[error("stream ended inside a frame")]
    EndedInsideFrame,
    /// The stream failed (reset, connection lost).
    #[error("stream failed: {0}")]
    Io(#[from] io::Error),
}

/// Reads one frame (without its length prefix) under `limit`.
///
/// Returns `Ok(None)` when the stream ends cleanly between frames.
///
/// # Errors
/// [`WireError`] for a limit breach, a truncated frame or a stream failure.
pub async fn read_frame<R>(reader: &mut R, limit: usize) -> Result<Option<Bytes>, WireError>
where
    R: AsyncRead + Unpin,
{
    let mut prefix = [0_u8; 4];
    let mut filled = 0;
    while filled < prefix.len() {
        let read = reader.read(&mut prefix[filled..]).await?;
        if read == 0 {
            return if filled == 0 {
                Ok(None)
            } else {
                Err(WireError::EndedInsideFrame)
            };
        }
        filled += read;
    }
    let len = check_length_prefix(u32::from_be_bytes(prefix), limit)?;
    // Memory follows the bytes that actually arrive: a peer that claims
    // 16 MiB and sends one byte costs one chunk, not the claimed size. Once
    // a whole first chunk has come, the rest is reserved in one step, so a
    // large frame is not copied again at every doubling.
    let first = len.min(READ_CHUNK_BYTES);
    let mut payload = Vec::with_capacity(first);
    let mut reader = reader.take(len as u64);
    let mut read = (&mut reader)
        .take(first as u64)
        .read_to_end(&mut payload)
        .await?;
    if read == first && read < len {
        payload.reserve_exact(len - read);
        read += reader.read_to_end(&mut payload).await?;
    }
    if read < len {
        return Err(WireError::EndedInsideFrame);
    }
    Ok(Some(Bytes::from(payload)))
}

/// First allocation for a frame's payload; larger payloads grow as they arrive.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Writes one encoded frame (length prefix included).
///
/// # Errors
/// The stream's failure.
pub async fn write_frame<W>(writer: &mut W, frame: &[u8]) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    writer.write_all(frame).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{Frame, Request, RequestId};
    use crate::limits::{FRAME_BYTES_MAX, PRE_AUTH_FRAME_BYTES_MAX};
    use crate::opcode::Opcode;

    proptest::proptest! {
        #[test]
        fn frame_reader_never_panics_on_arbitrary_bytes(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..96),
            limit in 0_usize..128,
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            runtime.block_on(async {
                let mut input = &bytes[..];
                // Read until the input is exhausted or refused; each frame
                // returned must respect the limit.
                while let Ok(Some(frame)) = read_frame(&mut input, limit).await {
                    assert!(frame.len() + 4 <= limit);
                }
            });
        }
    }

    #[tokio::test]
    async fn reads_back_a_written_frame() {
        let frame = Frame::Request {
            request_id: RequestId(7),
            request: Request::new(Opcode::ACK, &b"abc"[..]),
        };
        let encoded = frame.encode().expect("fits");
        let mut input = &encoded[..];
        let payload = read_frame(&mut input, FRAME_BYTES_MAX)
            .await
            .expect("reads")
            .expect("one frame");
        assert_eq!(Frame::decode(payload).expect("decodes"), frame);
        assert!(
            read_frame(&mut input, FRAME_BYTES_MAX)
                .await
                .expect("clean end")
                .is_none()
        );
    }

    #[tokio::test]
    async fn claimed_length_over_the_limit_is_refused_before_the_payload_is_read() {
        // Claims 4 GiB and supplies nothing after the prefix: if the reader
        // allocated or waited for the claimed size this would fail differently.
        let mut input: &[u8] = &u32::MAX.to_be_bytes();
        let error = read_frame(&mut input, FRAME_BYTES_MAX)
            .await
            .expect_err("refused");
        assert!(
            matches!(error, WireError::Frame(FrameError::TooLarge { bytes, limit })
            if bytes == u64::from(u32::MAX) + 4 && limit == FRAME_BYTES_MAX)
        );
    }

    #[tokio::test]
    async fn pre_auth_limit_refuses_an_ordinary_frame() {
        let mut input: &[u8] = &100_u32.to_be_bytes();
        let error = read_frame(&mut input, PRE_AUTH_FRAME_BYTES_MAX)
            .await
            .expect_err("refused");
        assert!(matches!(
            error,
            WireError::Frame(FrameError::TooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn a_frame_larger_than_the_first_chunk_reads_whole_or_not_at_all() {
        let body: Vec<u8> = (0..5 * READ_CHUNK_BYTES + 17).map(|i| i as u8).collect();
        let frame = Frame::Request {
            request_id: RequestId(9),
            request: Request::new(Opcode::ACK, body),
        };
        let encoded = frame.encode().expect("fits");
        let mut input = &encoded[..];
        let payload = read_frame(&mut input, FRAME_BYTES_MAX)
            .await
            .expect("reads")
            .expect("one frame");
        assert_eq!(payload.len() + 4, encoded.len());
        assert_eq!(Frame::decode(payload).expect("decodes"), frame);
        // Cut past the first chunk: refused, not returned short.
        let mut cut = &encoded[..2 * READ_CHUNK_BYTES];
        let error = read_frame(&mut cut, FRAME_BYTES_MAX)
            .await
            .expect_err("truncated");
        assert!(matches!(error, WireError::EndedInsideFrame));
    }

    #[tokio::test]
    async fn stream_ending_inside_a_frame_is_an_error() {
        let mut input: &[u8] = &[0, 0, 0, 20, 1, 1];
        let error = read_frame(&mut input, FRAME_BYTES_MAX)
            .await
            .expect_err("truncated");
        assert!(matches!(error, WireError::EndedInsideFrame));
        let mut half_prefix: &[u8] = &[0, 0];
        let error = read_frame(&mut half_prefix, FRAME_BYTES_MAX)
            .await
            .expect_err("truncated");
        assert!(matches!(error, WireError::EndedInsideFrame));
    }
}
