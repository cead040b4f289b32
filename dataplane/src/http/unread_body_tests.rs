//! Answers given before the body was read, over a real TCP connection: a
//! client that writes its whole body before it reads gets every answer
//! whole, with the spec's JSON error body, never a reset connection.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use narad_disk::Disk;
use narad_disk::sim::SimDisk;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::http::body::DISCARD_BYTES_PAST_LIMIT;
use crate::ingress::{BATCH_BODY_BYTES_MAX, MESSAGE_BYTES_MAX};
use crate::node::DataNodeConfig;
use crate::testing::{Served, basic, replica, start_node};

/// Requests per case: the Go original answers all of them.
const ATTEMPTS: usize = 30;

/// A node with the test replica on a simulated disk, served on loopback.
async fn serve(seed: u64) -> Served {
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(seed));
    Served::serve(start_node(
        disk,
        &replica(),
        DataNodeConfig::new(Path::new("/node")),
    ))
    .await
}

/// One answer as read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    fn closes(&self) -> bool {
        self.header("connection")
            .is_some_and(|value| value.eq_ignore_ascii_case("close"))
    }

    /// Asserts the spec's error answer: `status`, `Content-Type:
    /// application/json`, `{"error":"<text>"}`.
    fn assert_error(&self, status: u16, text: &str) {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.header("content-type"), Some("application/json"));
        let value: serde_json::Value = serde_json::from_str(&self.body).expect("a JSON error body");
        assert_eq!(value["error"].as_str(), Some(text), "{self:?}");
    }
}

/// A keep-alive client that writes a whole request before it reads, and
/// connects again after the node closed the connection.
struct Client {
    address: SocketAddr,
    stream: Option<TcpStream>,
    connections: usize,
}

impl Client {
    fn new(address: SocketAddr) -> Self {
        Self {
            address,
            stream: None,
            connections: 0,
        }
    }

    /// Sends `head` (request line and headers, without the blank line)
    /// with a `Content-Length` of `declared` and the first `sent` bytes of
    /// that body, then reads one answer.
    async fn send(&mut self, head: &str, declared: usize, sent: usize) -> Answer {
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.address).await.expect("connect");
            self.stream = Some(stream);
            self.connections += 1;
        }
        let stream = self.stream.as_mut().expect("connected");
        let request = format!("{head}Content-Length: {declared}\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("write the head");
        stream
            .write_all(&vec![b'x'; sent])
            .await
            .expect("write the whole body before reading");
        let answer = read_answer(stream).await;
        if answer.closes() {
            let mut rest = Vec::new();
            stream
                .read_to_end(&mut rest)
                .await
                .expect("a clean close after the answer");
            assert!(rest.is_empty(), "nothing follows the answer");
            self.stream = None;
        }
        answer
    }
}

/// Reads one answer with a `Content-Length` body.
async fn read_answer(stream: &mut TcpStream) -> Answer {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break at;
        }
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await.expect("read the answer");
        assert!(read > 0, "the connection closed before an answer");
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).expect("UTF-8 head");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.parse().ok())
        .expect("a Content-Length");
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = vec![0u8; length - body.len()];
        let read = stream.read(&mut chunk).await.expect("read the body");
        assert!(read > 0, "the connection closed inside the answer body");
        body.extend_from_slice(&chunk[..read]);
    }
    assert_eq!(body.len(), length, "one whole answer");
    Answer {
        status,
        headers,
        body: String::from_utf8(body).expect("UTF-8 body"),
    }
}

fn produce_head(topic: &str, authorization: &str, content_type: &str) -> String {
    format!(
        "POST /v1/topics/{topic}/produce HTTP/1.1\r\nHost: narad\r\nAuthorization: {authorization}\r\nContent-Type: {content_type}\r\n"
    )
}

fn root() -> String {
    basic("root", "root-pw")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_oversized_single_produce_is_answered_413() {
    let served = serve(61).await;
    let mut client = Client::new(served.address);
    let head = produce_head("orders", &root(), "application/octet-stream");
    for _ in 0..ATTEMPTS {
        let answer = client
            .send(&head, MESSAGE_BYTES_MAX + 1, MESSAGE_BYTES_MAX + 1)
            .await;
        answer.assert_error(413, "request body too large");
        assert!(answer.closes(), "an answer left unread closes");
    }
    assert_eq!(client.connections, ATTEMPTS);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_large_produce_with_wrong_credentials_is_answered_401() {
    let served = serve(62).await;
    let mut client = Client::new(served.address);
    for attempt in 0..ATTEMPTS {
        // A wrong password for each known user once (the failed-login
        // throttle allows five per user), then unknown users.
        let who = ["root", "alice", "bob"]
            .get(attempt)
            .map_or_else(|| format!("ghost-{attempt}"), |name| (*name).to_owned());
        let head = produce_head("orders", &basic(&who, "wrong"), "application/octet-stream");
        let answer = client
            .send(&head, MESSAGE_BYTES_MAX + 1, MESSAGE_BYTES_MAX + 1)
            .await;
        answer.assert_error(401, "authentication required");
        assert!(answer.header("www-authenticate").is_some());
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_large_produce_to_an_unknown_topic_is_answered_404() {
    let served = serve(63).await;
    let mut client = Client::new(served.address);
    let head = produce_head("nowhere", &root(), "application/octet-stream");
    for _ in 0..ATTEMPTS {
        let answer = client
            .send(&head, MESSAGE_BYTES_MAX + 1, MESSAGE_BYTES_MAX + 1)
            .await;
        answer.assert_error(404, "topic not found");
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_large_produce_with_a_wrong_content_type_is_answered_415() {
    let served = serve(64).await;
    let mut client = Client::new(served.address);
    let head = produce_head("orders", &root(), "text/plain");
    for _ in 0..ATTEMPTS {
        let answer = client
            .send(&head, MESSAGE_BYTES_MAX + 1, MESSAGE_BYTES_MAX + 1)
            .await;
        assert_eq!(answer.status, 415, "{answer:?}");
        assert_eq!(answer.header("content-type"), Some("application/json"));
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_batch_produce_is_answered_413() {
    let served = serve(65).await;
    let mut client = Client::new(served.address);
    let head = format!(
        "POST /v1/topics/orders/produce/batch HTTP/1.1\r\nHost: narad\r\nAuthorization: {}\r\nContent-Type: application/json\r\n",
        root()
    );
    for _ in 0..3 {
        let answer = client
            .send(&head, BATCH_BODY_BYTES_MAX + 1, BATCH_BODY_BYTES_MAX + 1)
            .await;
        answer.assert_error(413, "request body too large");
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_the_discard_bound_is_answered_without_being_read() {
    let served = serve(66).await;
    let mut client = Client::new(served.address);
    let head = produce_head("orders", &root(), "application/octet-stream");
    // The node answers at once and waits for no byte it would not read:
    // this client sends none of its body.
    let declared = MESSAGE_BYTES_MAX + DISCARD_BYTES_PAST_LIMIT + 1;
    let answer = client.send(&head, declared, 0).await;
    answer.assert_error(413, "request body too large");
    assert!(answer.closes());
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fully_read_body_keeps_the_connection() {
    let served = serve(67).await;
    let mut client = Client::new(served.address);
    let head = produce_head("orders", &root(), "application/octet-stream");
    for _ in 0..3 {
        let answer = client.send(&head, 16, 16).await;
        assert_eq!(answer.status, 202, "{answer:?}");
        assert!(!answer.closes());
    }
    assert_eq!(client.connections, 1);
    served.stop().await;
}
