//! The frame: the unit every stream carries after the auth handshake.
//!
//! ```text
//! offset  size  field
//!      0     4  frame_len    u32 BE: bytes after this field (header + payload)
//!      4     1  version      FRAME_VERSION (1)
//!      5     1  kind         1 request, 2 response, 3 cancel
//!      6     8  request_id   u64 BE, chosen by the client, unique per node
//!     14     1  opcode       see `Opcode`
//!     15     …  payload      by kind:
//!                 request:   u32 body_len, body
//!                 response:  u16 status, u8 content_type, u32 body_len, body
//!                 cancel:    (empty)
//! ```
//!
//! The whole frame, length prefix included, is at most
//! [`FRAME_BYTES_MAX`]. [`Frame::encode`]
//! refuses a larger frame before allocating anything; the reader refuses a
//! larger claimed length before reading the payload.

use std::fmt;

use bytes::Bytes;

use crate::codec::{DecodeError, Reader, Writer};
use crate::limits::FRAME_BYTES_MAX;
use crate::opcode::Opcode;

/// Version byte of the frame layout above.
pub const FRAME_VERSION: u8 = 1;

/// Bytes of the length prefix.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Bytes of the fixed header after the length prefix: version, kind,
/// request id, opcode.
pub const HEADER_BYTES: usize = 1 + 1 + 8 + 1;

const _: () = assert!(LENGTH_PREFIX_BYTES + HEADER_BYTES + 4 + 3 < FRAME_BYTES_MAX);

/// Identifies one request on its connection; the response carries it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// An answer's status, in HTTP's vocabulary so the data plane can pass it to
/// its client one to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(pub u16);

impl Status {
    /// Success with a body.
    pub const OK: Status = Status(200);
    /// Accepted for later processing.
    pub const ACCEPTED: Status = Status(202);
    /// Success without a body.
    pub const NO_CONTENT: Status = Status(204);
    /// The request is malformed or its operation is not supported.
    pub const BAD_REQUEST: Status = Status(400);
    /// The request names something that does not exist.
    pub const NOT_FOUND: Status = Status(404);
    /// The request conflicts with the current state.
    pub const CONFLICT: Status = Status(409);
    /// A precondition (an incarnation id, a term) did not hold.
    pub const PRECONDITION_FAILED: Status = Status(412);
    /// The request body is larger than allowed.
    pub const PAYLOAD_TOO_LARGE: Status = Status(413);
    /// The handler failed in a way it did not expect.
    pub const INTERNAL_ERROR: Status = Status(500);
    /// The node cannot serve the request now; retrying later may work.
    pub const UNAVAILABLE: Status = Status(503);

    /// Whether this status reports success (2xx).
    pub fn is_success(self) -> bool {
        (200..300).contains(&self.0)
    }
}

/// How a response body is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ContentType {
    /// A binary cluster message.
    Binary,
    /// UTF-8 text (error answers).
    Text,
    /// JSON (answers passed through to HTTP clients).
    Json,
}

impl ContentType {
    fn tag(self) -> u8 {
        match self {
            ContentType::Binary => 0,
            ContentType::Text => 1,
            ContentType::Json => 2,
        }
    }

    fn from_tag(tag: u8) -> Result<Self, DecodeError> {
        match tag {
            0 => Ok(ContentType::Binary),
            1 => Ok(ContentType::Text),
            2 => Ok(ContentType::Json),
            other => Err(DecodeError::InvalidValue {
                field: "content type",
                value: u64::from(other),
            }),
        }
    }
}

/// A request: what to do, and its encoded fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The operation.
    pub opcode: Opcode,
    /// The operation's encoded message.
    pub body: Bytes,
}

impl Request {
    /// A request for `opcode` carrying `body`.
    pub fn new(opcode: Opcode, body: impl Into<Bytes>) -> Self {
        Self {
            opcode,
            body: body.into(),
        }
    }
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// A 2xx status.
    pub status: Status,
    /// How to read `body`.
    pub content_type: ContentType,
    /// The answer's encoded message.
    pub body: Bytes,
}

impl Response {
    /// `200` with a binary body.
    pub fn ok(body: impl Into<Bytes>) -> Self {
        Self {
            status: Status::OK,
            content_type: ContentType::Binary,
            body: body.into(),
        }
    }

    /// `200` carrying `message`, version byte first.
    pub fn message<M: crate::codec::Message>(message: &M) -> Self {
        Self::ok(crate::codec::encode_message(message))
    }

    /// `204` without a body.
    pub fn no_content() -> Self {
        Self {
            status: Status::NO_CONTENT,
            content_type: ContentType::Binary,
            body: Bytes::new(),
        }
    }
}

/// A typed error answer: a non-2xx status and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} {message}", status.0)]
pub struct RpcError {
    /// A 4xx or 5xx status.
    pub status: Status,
    /// What went wrong.
    pub message: String,
}

impl RpcError {
    /// An error with `status` and `message`.
    ///
    /// # Panics
    /// If `status` is a success status: that is a programmer error.
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        assert!(
            !status.is_success(),
            "an RpcError needs a failure status, not {}",
            status.0
        );
        Self {
            status,
            message: message.into(),
        }
    }

    /// `400` for a request this node cannot read.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Status::BAD_REQUEST, message)
    }

    /// `400 unsupported rpc operation`: the spec's answer to an opcode this
    /// node has no handler for, which tells a newer sender to fall back.
    pub fn unsupported_operation(opcode: Opcode) -> Self {
        Self::new(
            Status::BAD_REQUEST,
            format!("unsupported rpc operation: {opcode}"),
        )
    }

    /// `503` for a request the node cannot serve now.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(Status::UNAVAILABLE, message)
    }

    /// `500` for a failure the handler did not expect.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Status::INTERNAL_ERROR, message)
    }
}

impl From<DecodeError> for RpcError {
    fn from(error: DecodeError) -> Self {
        RpcError::bad_request(format!("malformed request: {error}"))
    }
}

/// The kind of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// Client to server: do something.
    Request,
    /// Server to client: the answer.
    Response,
    /// Client to server: stop working on this request id; nobody waits.
    Cancel,
}

impl FrameKind {
    fn tag(self) -> u8 {
        match self {
            FrameKind::Request => 1,
            FrameKind::Response => 2,
            FrameKind::Cancel => 3,
        }
    }

    fn from_tag(tag: u8) -> Result<Self, DecodeError> {
        match tag {
            1 => Ok(FrameKind::Request),
            2 => Ok(FrameKind::Response),
            3 => Ok(FrameKind::Cancel),
            other => Err(DecodeError::InvalidValue {
                field: "frame kind",
                value: u64::from(other),
            }),
        }
    }
}

/// The fixed header every frame starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the frame is.
    pub kind: FrameKind,
    /// The request it belongs to.
    pub request_id: RequestId,
    /// The request's operation.
    pub opcode: Opcode,
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A request.
    Request {
        /// Its id.
        request_id: RequestId,
        /// What it asks.
        request: Request,
    },
    /// An answer: a success, or a typed error.
    Response {
        /// The request answered.
        request_id: RequestId,
        /// The request's operation.
        opcode: Opcode,
        /// The answer.
        outcome: Result<Response, RpcError>,
    },
    /// The client gave up on a request.
    Cancel {
        /// The request given up.
        request_id: RequestId,
        /// The request's operation.
        opcode: Opcode,
    },
}

/// A frame refused by a size limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The frame is larger than the limit.
    #[error("frame of {bytes} bytes exceeds the {limit}-byte limit")]
    TooLarge {
        /// Size of the whole frame, length prefix included.
        bytes: u64,
        /// The limit in force.
        limit: usize,
    },
    /// The length prefix is too small to hold a frame header.
    #[error("frame length {claimed} is shorter than the {HEADER_BYTES}-byte header")]
    TooShort {
        /// The length the prefix claims.
        claimed: u32,
    },
}

/// A frame that could not be decoded. When the header was readable it is
/// kept, so a server can still answer the request id with a clear error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed frame: {error}")]
pub struct MalformedFrame {
    /// The header, when it was readable.
    pub header: Option<FrameHeader>,
    /// What was wrong.
    pub error: DecodeError,
}

/// Checks a frame's length prefix against `limit` (the whole-frame limit) and
/// returns how many bytes follow it. Nothing is read or allocated before this
/// check passes.
///
/// # Errors
/// [`FrameError::TooLarge`] or [`FrameError::TooShort`].
pub fn check_length_prefix(claimed: u32, limit: usize) -> Result<usize, FrameError> {
    let total = u64::from(claimed) + LENGTH_PREFIX_BYTES as u64;
    if total > limit as u64 {
        return Err(FrameError::TooLarge {
            bytes: total,
            limit,
        });
    }
    let claimed_len = claimed as usize;
    if claimed_len < HEADER_BYTES {
        return Err(FrameError::TooShort { claimed });
    }
    Ok(claimed_len)
}

impl Frame {
    /// The frame's header.
    pub fn header(&self) -> FrameHeader {
        match self {
            Frame::Request {
                request_id,
                request,
            } => FrameHeader {
                kind: FrameKind::Request,
                request_id: *request_id,
                opcode: request.opcode,
            },
            Frame::Response {
                request_id, opcode, ..
            } => FrameHeader {
                kind: FrameKind::Response,
                request_id: *request_id,
                opcode: *opcode,
            },
            Frame::Cancel { request_id, opcode } => FrameHeader {
                kind: FrameKind::Cancel,
                request_id: *request_id,
                opcode: *opcode,
            },
        }
    }

    fn payload_len(&self) -> u64 {
        match self {
            Frame::Request { request, .. } => 4 + request.body.len() as u64,
            Frame::Response {
                outcome: Ok(response),
                ..
            } => 2 + 1 + 4 + response.body.len() as u64,
            Frame::Response {
                outcome: Err(error),
                ..
            } => 2 + 1 + 4 + error.message.len() as u64,
            Frame::Cancel { .. } => 0,
        }
    }

    /// Size of the encoded frame, length prefix included.
    pub fn encoded_len(&self) -> u64 {
        (LENGTH_PREFIX_BYTES + HEADER_BYTES) as u64 + self.payload_len()
    }

    /// Encodes the frame, length prefix included.
    ///
    /// # Errors
    /// [`FrameError::TooLarge`] if the frame would exceed [`FRAME_BYTES_MAX`];
    /// then nothing is allocated and nothing can be sent.
    pub fn encode(&self) -> Result<Bytes, FrameError> {
        let total = self.encoded_len();
        if total > FRAME_BYTES_MAX as u64 {
            return Err(FrameError::TooLarge {
                bytes: total,
                limit: FRAME_BYTES_MAX,
            });
        }
        // Fits in u32 and usize: FRAME_BYTES_MAX does (asserted in limits).
        let total_len = total as usize;
        let mut writer = Writer::with_capacity(total_len);
        writer.u32((total_len - LENGTH_PREFIX_BYTES) as u32);
        let header = self.header();
        writer.u8(FRAME_VERSION);
        writer.u8(header.kind.tag());
        writer.u64(header.request_id.0);
        writer.u8(header.opcode.0);
        match self {
            Frame::Request { request, .. } => writer.bytes(&request.body),
            Frame::Response {
                outcome: Ok(response),
                ..
            } => {
                writer.u16(response.status.0);
                writer.u8(response.content_type.tag());
                writer.bytes(&response.body);
            }
            Frame::Response {
                outcome: Err(error),
                ..
            } => {
                writer.u16(error.status.0);
                writer.u8(ContentType::Text.tag());
                writer.str(&error.message);
            }
            Frame::Cancel { .. } => {}
        }
        assert_eq!(
            writer.len(),
            total_len,
            "frame length computed before encoding must hold"
        );
        Ok(writer.finish())
    }

    /// Decodes a frame from the bytes after its length prefix.
    ///
    /// # Errors
    /// [`MalformedFrame`] with the header when it was readable.
    pub fn decode(bytes: Bytes) -> Result<Frame, MalformedFrame> {
        let mut reader = Reader::new(bytes);
        let header = decode_header(&mut reader).map_err(|error| MalformedFrame {
            header: None,
            error,
        })?;
        decode_payload(header, reader).map_err(|error| MalformedFrame {
            header: Some(header),
            error,
        })
    }
}

fn decode_header(reader: &mut Reader) -> Result<FrameHeader, DecodeError> {
    let version = reader.u8("frame version")?;
    if version != FRAME_VERSION {
        return Err(DecodeError::UnsupportedVersion {
            what: "frame",
            found: version,
            supported: FRAME_VERSION,
        });
    }
    let kind = FrameKind::from_tag(reader.u8("frame kind")?)?;
    let request_id = RequestId(reader.u64("request id")?);
    let opcode = Opcode(reader.u8("opcode")?);
    Ok(FrameHeader {
        kind,
        request_id,
        opcode,
    })
}

fn decode_payload(header: FrameHeader, mut reader: Reader) -> Result<Frame, DecodeError> {
    let FrameHeader {
        kind,
        request_id,
        opcode,
    } = header;
    let frame = match kind {
        FrameKind::Request => {
            let body = reader.bytes("request body")?;
            Frame::Request {
                request_id,
                request: Request { opcode, body },
            }
        }
        FrameKind::Response => {
            let status = Status(reader.u16("status")?);
            let content_type = ContentType::from_tag(reader.u8("content type")?)?;
            let body = reader.bytes("response body")?;
            let outcome = decode_outcome(status, content_type, body)?;
            Frame::Response {
                request_id,
                opcode,
                outcome,
            }
        }
        FrameKind::Cancel => Frame::Cancel { request_id, opcode },
    };
    reader.finish()?;
    Ok(frame)
}

fn decode_outcome(
    status: Status,
    content_type: ContentType,
    body: Bytes,
) -> Result<Result<Response, RpcError>, DecodeError> {
    if status.is_success() {
        return Ok(Ok(Response {
            status,
            content_type,
            body,
        }));
    }
    if !(400..600).contains(&status.0) {
        return Err(DecodeError::InvalidValue {
            field: "status",
            value: u64::from(status.0),
        });
    }
    let message = String::from_utf8(body.to_vec()).map_err(|_| DecodeError::InvalidUtf8 {
        field: "error message",
    })?;
    Ok(Err(RpcError { status, message }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn status_strategy() -> impl Strategy<Value = Status> {
        prop_oneof![
            (200_u16..300).prop_map(Status),
            (400_u16..600).prop_map(Status)
        ]
    }

    fn frame_strategy() -> impl Strategy<Value = Frame> {
        let body = proptest::collection::vec(any::<u8>(), 0..256).prop_map(Bytes::from);
        let content = prop_oneof![
            Just(ContentType::Binary),
            Just(ContentType::Text),
            Just(ContentType::Json)
        ];
        prop_oneof![
            (any::<u64>(), any::<u8>(), body.clone()).prop_map(|(id, op, body)| Frame::Request {
                request_id: RequestId(id),
                request: Request {
                    opcode: Opcode(op),
                    body
                },
            }),
            (
                any::<u64>(),
                any::<u8>(),
                status_strategy(),
                content,
                body,
                ".{0,64}"
            )
                .prop_map(|(id, op, status, content_type, body, message)| {
                    Frame::Response {
                        request_id: RequestId(id),
                        opcode: Opcode(op),
                        outcome: if status.is_success() {
                            Ok(Response {
                                status,
                                content_type,
                                body,
                            })
                        } else {
                            Err(RpcError { status, message })
                        },
                    }
                }),
            (any::<u64>(), any::<u8>()).prop_map(|(id, op)| Frame::Cancel {
                request_id: RequestId(id),
                opcode: Opcode(op)
            }),
        ]
    }

    proptest! {
        #[test]
        fn frame_round_trips(frame in frame_strategy()) {
            let encoded = frame.encode().expect("small frames fit");
            prop_assert_eq!(encoded.len() as u64, frame.encoded_len());
            let len = u32::from_be_bytes([encoded[0], encoded[1], encoded[2], encoded[3]]);
            prop_assert_eq!(check_length_prefix(len, FRAME_BYTES_MAX).expect("within limit"), encoded.len() - 4);
            prop_assert_eq!(Frame::decode(encoded.slice(4..)).expect("decodes"), frame);
        }

        #[test]
        fn frame_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = Frame::decode(Bytes::from(bytes));
        }

        #[test]
        fn a_damaged_frame_never_panics(frame in frame_strategy(), damage in crate::damage::damage()) {
            let body = frame.encode().expect("fits").slice(4..);
            for damaged in damage.apply(&body) {
                let _ = Frame::decode(Bytes::from(damaged));
            }
        }

        #[test]
        fn frame_decoder_refuses_any_trailing_byte(frame in frame_strategy(), extra in 1_usize..8) {
            let mut bytes = frame.encode().expect("fits").slice(4..).to_vec();
            bytes.extend(std::iter::repeat_n(0_u8, extra));
            let error = Frame::decode(Bytes::from(bytes)).expect_err("trailing bytes");
            prop_assert_eq!(error.error, DecodeError::TrailingBytes { count: extra });
            prop_assert_eq!(error.header, Some(frame.header()));
        }

        #[test]
        fn length_prefix_check_never_panics(claimed in any::<u32>(), limit in 0_usize..=FRAME_BYTES_MAX) {
            if let Ok(len) = check_length_prefix(claimed, limit) {
                prop_assert!(len + LENGTH_PREFIX_BYTES <= limit);
                prop_assert!(len >= HEADER_BYTES);
            }
        }
    }

    #[test]
    fn frame_over_the_limit_is_refused_before_encoding() {
        let body = Bytes::from(vec![
            0_u8;
            FRAME_BYTES_MAX - LENGTH_PREFIX_BYTES - HEADER_BYTES - 4
                + 1
        ]);
        let frame = Frame::Request {
            request_id: RequestId(1),
            request: Request::new(Opcode::PRODUCE, body),
        };
        assert_eq!(
            frame.encode(),
            Err(FrameError::TooLarge {
                bytes: FRAME_BYTES_MAX as u64 + 1,
                limit: FRAME_BYTES_MAX
            })
        );
    }

    #[test]
    fn frame_exactly_at_the_limit_is_encoded() {
        let body = Bytes::from(vec![
            0_u8;
            FRAME_BYTES_MAX - LENGTH_PREFIX_BYTES - HEADER_BYTES - 4
        ]);
        let frame = Frame::Request {
            request_id: RequestId(1),
            request: Request::new(Opcode::PRODUCE, body),
        };
        assert_eq!(frame.encode().expect("fits").len(), FRAME_BYTES_MAX);
    }

    #[test]
    fn unknown_frame_version_kind_and_content_type_are_named() {
        let frame = Frame::Response {
            request_id: RequestId(9),
            opcode: Opcode::ACK,
            outcome: Ok(Response::ok(&b"x"[..])),
        };
        let good = frame.encode().expect("fits").slice(4..).to_vec();

        let mut bad_version = good.clone();
        bad_version[0] = 2;
        let error = Frame::decode(Bytes::from(bad_version)).expect_err("version");
        assert_eq!(
            error.error,
            DecodeError::UnsupportedVersion {
                what: "frame",
                found: 2,
                supported: 1
            }
        );

        let mut bad_kind = good.clone();
        bad_kind[1] = 9;
        let error = Frame::decode(Bytes::from(bad_kind)).expect_err("kind");
        assert_eq!(
            error.error,
            DecodeError::InvalidValue {
                field: "frame kind",
                value: 9
            }
        );

        let mut bad_content = good;
        bad_content[HEADER_BYTES + 2] = 7;
        let error = Frame::decode(Bytes::from(bad_content)).expect_err("content type");
        assert_eq!(
            error.error,
            DecodeError::InvalidValue {
                field: "content type",
                value: 7
            }
        );
    }

    #[test]
    fn informational_and_redirect_statuses_are_refused() {
        for status in [100_u16, 304] {
            let mut writer = Writer::new();
            writer.u8(FRAME_VERSION);
            writer.u8(2);
            writer.u64(1);
            writer.u8(1);
            writer.u16(status);
            writer.u8(0);
            writer.bytes(b"");
            let error = Frame::decode(writer.finish()).expect_err("status");
            assert_eq!(
                error.error,
                DecodeError::InvalidValue {
                    field: "status",
                    value: u64::from(status)
                }
            );
        }
    }

    #[test]
    #[should_panic(expected = "needs a failure status")]
    fn rpc_error_with_a_success_status_is_a_programmer_error() {
        let _ = RpcError::new(Status::OK, "not an error");
    }
}
