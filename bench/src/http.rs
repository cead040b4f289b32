//! A minimal keep-alive HTTP/1.1 client for load generation: one request at
//! a time per connection, responses framed by `Content-Length` (what Narad
//! and the baselines send). Small on purpose, so the client's own cost stays
//! low and the same for every phase it drives.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};

use axum::Router;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::post;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One HTTP/1.1 response: status and body.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

/// A keep-alive HTTP/1.1 connection sending one request at a time. It reads
/// responses framed by `Content-Length` (what the servers measured here
/// send); a chunked response is an error.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl Connection {
    /// Connects to `addr` with Nagle off.
    ///
    /// # Errors
    /// When the connection fails.
    pub async fn open(addr: SocketAddr) -> io::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            buffer: Vec::with_capacity(4096),
        })
    }

    /// Writes `request` (a whole HTTP/1.1 request) and reads its response.
    ///
    /// # Errors
    /// I/O errors, a malformed or chunked response, or the connection
    /// closing early.
    pub async fn send(&mut self, request: &[u8]) -> io::Result<Response> {
        self.stream.write_all(request).await?;
        loop {
            if let Some(response) = take_response(&mut self.buffer)? {
                return Ok(response);
            }
            if self.stream.read_buf(&mut self.buffer).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before a whole response",
                ));
            }
        }
    }
}

/// Removes one whole response from the front of `buffer`, if it holds one.
///
/// # Errors
/// A malformed status line or length, or a chunked response.
pub fn take_response(buffer: &mut Vec<u8>) -> io::Result<Option<Response>> {
    let Some(head_end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad status line"))?;
    let mut content_length = 0usize;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if name.eq_ignore_ascii_case("content-length") {
            content_length = value
                .trim()
                .parse()
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad content-length"))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "chunked responses are not supported by this client",
            ));
        }
    }
    let total = head_end + 4 + content_length;
    if buffer.len() < total {
        return Ok(None);
    }
    let body = buffer[head_end + 4..total].to_vec();
    buffer.drain(..total);
    Ok(Some(Response { status, body }))
}

/// The bytes of one HTTP/1.1 request with a `Content-Length` body.
pub fn http_request(method: &str, path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    http_request_with_headers(method, path, content_type, &[], body)
}

/// As [`http_request`], with extra header lines (each `Name: value`).
pub fn http_request_with_headers(
    method: &str,
    path: &str,
    content_type: &str,
    headers: &[&str],
    body: &[u8],
) -> Vec<u8> {
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n");
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    request
}

/// The `Authorization` header line of HTTP Basic auth for `user`.
pub fn basic_authorization(user: &str, password: &str) -> String {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Authorization: Basic {encoded}")
}

/// The no-op baseline: an axum server in this process that reads the body of
/// a produce request (single or batch) and answers `202`.
#[derive(Debug)]
pub struct NoopServer {
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<io::Result<()>>,
}

impl NoopServer {
    /// Starts the server on a free loopback port.
    ///
    /// # Errors
    /// When it cannot bind.
    pub async fn start() -> io::Result<Self> {
        async fn accept(_body: Bytes) -> StatusCode {
            StatusCode::ACCEPTED
        }
        let router = Router::new()
            .route("/v1/topics/{topic}/produce", post(accept))
            .route("/v1/topics/{topic}/produce/batch", post(accept));
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move { axum::serve(listener, router).await });
        Ok(Self { addr, task })
    }

    /// Stops the server.
    pub fn stop(self) {
        self.task.abort();
    }
}

/// A batch produce request for `topic` of `size` messages, each stored as
/// exactly `message_bytes` bytes (a JSON string payload is stored with its
/// quotes, so it holds `message_bytes - 2` characters).
///
/// # Panics
/// If `message_bytes` is below 2.
pub fn batch_produce_request(topic: &str, size: usize, message_bytes: usize) -> Vec<u8> {
    let payload = format!("\"{}\"", "b".repeat(message_bytes - 2));
    let messages = vec![format!("{{\"payload\":{payload}}}"); size].join(",");
    http_request(
        "POST",
        &format!("/v1/topics/{topic}/produce/batch"),
        "application/json",
        format!("{{\"messages\":[{messages}]}}").as_bytes(),
    )
}

/// As [`batch_produce_request`], every message pinned to `partition` (a
/// batch produce takes the partition per message, never in the query).
///
/// # Panics
/// If `message_bytes` is below 2.
pub fn pinned_batch_produce_request(
    topic: &str,
    size: usize,
    message_bytes: usize,
    partition: u32,
) -> Vec<u8> {
    let payload = format!("\"{}\"", "b".repeat(message_bytes - 2));
    let message = format!("{{\"payload\":{payload},\"partition\":{partition}}}");
    let messages = vec![message; size].join(",");
    http_request(
        "POST",
        &format!("/v1/topics/{topic}/produce/batch"),
        "application/json",
        format!("{{\"messages\":[{messages}]}}").as_bytes(),
    )
}

/// Hex digits of one idempotency key slot in a [`KeyedRequest`].
pub const KEY_SLOT_DIGITS: usize = 16;

/// A request whose idempotency keys change on every send: the bytes with
/// [`KEY_SLOT_DIGITS`]-digit slots, each filled with a fresh number, so no
/// two requests of a run carry the same key.
#[derive(Debug, Clone)]
pub struct KeyedRequest {
    bytes: Vec<u8>,
    slots: Vec<usize>,
}

impl KeyedRequest {
    /// A single produce of `message_bytes` bytes with an `Idempotency-Key`
    /// header.
    pub fn single(topic: &str, message_bytes: usize) -> Self {
        let slot = "0".repeat(KEY_SLOT_DIGITS);
        let mut bytes = format!(
            "POST /v1/topics/{topic}/produce HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Content-Type: application/octet-stream\r\nIdempotency-Key: {slot}\r\n\
             Content-Length: {message_bytes}\r\n\r\n"
        )
        .into_bytes();
        let at = find(&bytes, b"Idempotency-Key: ") + "Idempotency-Key: ".len();
        bytes.extend(std::iter::repeat_n(b'm', message_bytes));
        Self {
            bytes,
            slots: vec![at],
        }
    }

    /// A batch produce of `size` messages of `message_bytes` bytes, each
    /// with an `idempotency_key`.
    pub fn batch(topic: &str, size: usize, message_bytes: usize) -> Self {
        let payload = format!("\"{}\"", "b".repeat(message_bytes - 2));
        let slot = "0".repeat(KEY_SLOT_DIGITS);
        let message = format!("{{\"payload\":{payload},\"idempotency_key\":\"{slot}\"}}");
        let messages = vec![message; size].join(",");
        let bytes = http_request(
            "POST",
            &format!("/v1/topics/{topic}/produce/batch"),
            "application/json",
            format!("{{\"messages\":[{messages}]}}").as_bytes(),
        );
        let marker = b"\"idempotency_key\":\"";
        let mut slots = Vec::with_capacity(size);
        let mut from = 0;
        while let Some(at) = bytes[from..]
            .windows(marker.len())
            .position(|window| window == marker)
        {
            let slot = from + at + marker.len();
            slots.push(slot);
            from = slot;
        }
        Self { bytes, slots }
    }

    /// Keys each request takes.
    pub fn keys(&self) -> u64 {
        self.slots.len() as u64
    }

    /// The request with its slots filled with `first`, `first + 1`, ...
    pub fn fill(&self, first: u64) -> Vec<u8> {
        let mut bytes = self.bytes.clone();
        for (n, &slot) in (first..).zip(&self.slots) {
            let digits = format!("{n:0width$x}", width = KEY_SLOT_DIGITS);
            bytes[slot..slot + KEY_SLOT_DIGITS].copy_from_slice(digits.as_bytes());
        }
        bytes
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
        .expect("the template holds the needle")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_headers_come_before_the_length_and_auth_is_base64() {
        let auth = basic_authorization("admin", "pw");
        assert_eq!(auth, "Authorization: Basic YWRtaW46cHc=");
        let request = http_request_with_headers("GET", "/x", "text/plain", &[&auth], b"ab");
        let text = String::from_utf8(request).unwrap();
        assert_eq!(
            text,
            "GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n\
             Authorization: Basic YWRtaW46cHc=\r\nContent-Length: 2\r\n\r\nab"
        );
    }

    #[test]
    fn keyed_requests_fill_every_slot_with_its_own_number() {
        let single = KeyedRequest::single("t", 8);
        let text = String::from_utf8(single.fill(255)).unwrap();
        assert!(
            text.contains("Idempotency-Key: 00000000000000ff\r\n"),
            "{text}"
        );
        assert!(text.ends_with("\r\n\r\nmmmmmmmm"), "{text}");
        let batch = KeyedRequest::batch("t", 3, 8);
        assert_eq!(batch.keys(), 3);
        let text = String::from_utf8(batch.fill(16)).unwrap();
        for key in ["0000000000000010", "0000000000000011", "0000000000000012"] {
            assert!(
                text.contains(&format!("\"idempotency_key\":\"{key}\"")),
                "{text}"
            );
        }
    }

    #[test]
    fn response_is_taken_only_once_its_body_is_whole() {
        let mut buffer = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 5\r\n\r\nmes".to_vec();
        assert!(take_response(&mut buffer).unwrap().is_none());
        buffer.extend_from_slice(b"sgHTTP/1.1 202 Accepted\r\n");
        let response = take_response(&mut buffer).unwrap().unwrap();
        assert_eq!(response.status, 400);
        assert_eq!(response.body, b"messg");
        assert_eq!(buffer, b"HTTP/1.1 202 Accepted\r\n");
    }

    #[test]
    fn response_without_content_length_has_an_empty_body() {
        let mut buffer = b"HTTP/1.1 202 Accepted\r\ndate: x\r\n\r\n".to_vec();
        let response = take_response(&mut buffer).unwrap().unwrap();
        assert_eq!(response.status, 202);
        assert!(response.body.is_empty());
        assert!(buffer.is_empty());
    }

    #[test]
    fn chunked_response_is_an_error() {
        let mut buffer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        assert!(take_response(&mut buffer).is_err());
    }

    #[test]
    fn pinned_batches_name_the_partition_in_every_message() {
        let request = pinned_batch_produce_request("t", 2, 10, 3);
        let text = String::from_utf8(request).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("POST /v1/topics/t/produce/batch HTTP/1.1"));
        let value: serde_json::Value = serde_json::from_str(body).unwrap();
        for message in value["messages"].as_array().unwrap() {
            assert_eq!(message["partition"], 3);
            assert_eq!(
                serde_json::to_string(&message["payload"]).unwrap().len(),
                10
            );
        }
    }

    #[test]
    fn batch_payloads_are_stored_as_message_bytes_each() {
        let request = batch_produce_request("t", 3, 256);
        let text = String::from_utf8(request).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("POST /v1/topics/t/produce/batch "));
        let value: serde_json::Value = serde_json::from_str(body).unwrap();
        let messages = value["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        let payload = serde_json::to_string(&messages[2]["payload"]).unwrap();
        assert_eq!(payload.len(), 256);
    }
}
