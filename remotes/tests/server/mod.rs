//! A local HTTPS target for the shipper's tests: axum behind rustls with
//! a certificate made here with rcgen, answering the batch produce route
//! the way this broker does (`202 {"accepted":N}`, `message <i>: ...`
//! refusals, a JSON `404 topic not found`, a plain-text `404` for an
//! unknown route, `415` for an encoding it does not take), storing each
//! idempotency key once, and replying from a script when a test asks.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::value::RawValue;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;

/// The topic the target has.
pub const TOPIC: &str = "there";
/// The replicator's credential the target takes.
pub const USER: &str = "replicator";
/// Its password.
pub const PASSWORD: &str = "a-password-of-twenty-four-bytes";

/// What the target answers the next batch request with, instead of
/// storing it.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A status with a JSON error and maybe `Retry-After`.
    Status(u16, &'static str, Option<u32>),
    /// `302` to another topic's batch route.
    Redirect,
    /// Store the batch, then never answer.
    StoreThenHang,
    /// Answer only once the test notifies, then store and accept as
    /// usual.
    HoldUntil(Arc<Notify>),
}

/// One message as the target decoded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The key bytes, if any.
    pub key: Option<Vec<u8>>,
    /// The payload bytes as stored.
    pub payload: Vec<u8>,
    /// The idempotency key.
    pub idempotency_key: String,
}

/// One batch request the target saw.
#[derive(Clone, Debug)]
pub struct Received {
    /// The topic in the path.
    pub topic: String,
    /// Whether the body came zstd-compressed.
    pub zstd: bool,
    /// Its messages.
    pub messages: Vec<Message>,
}

/// The target's state, shared with the test.
#[derive(Debug, Default)]
pub struct Target {
    /// Batch requests, in arrival order.
    pub received: Mutex<Vec<Received>>,
    /// Stored messages (one per idempotency key).
    pub stored: Mutex<Vec<Message>>,
    stored_keys: Mutex<HashSet<String>>,
    replies: Mutex<VecDeque<Reply>>,
    /// TCP connections accepted.
    pub connections: AtomicUsize,
    in_flight: AtomicUsize,
    /// The most batch requests seen at once.
    pub max_in_flight: AtomicUsize,
    /// Notified at each batch request.
    pub got_request: Notify,
    /// Batch cap: 1,000, or 100 like an older target.
    pub messages_max: usize,
    /// Whether zstd bodies are taken.
    pub zstd: bool,
    /// Whether a message may carry `idempotency_key` (an older target
    /// refuses the unknown field).
    pub idempotency_keys: bool,
    /// Children of [`TOPIC`]: each name, and whether it is a remote child
    /// (`None`: the replicator may not read it, `403`).
    pub children: Mutex<Vec<(String, Option<bool>)>>,
}

impl Target {
    /// Queues a scripted reply.
    pub fn reply(&self, reply: Reply) {
        self.replies.lock().unwrap().push_back(reply);
    }
}

/// A running target.
pub struct Running {
    /// Its state.
    pub target: Arc<Target>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The CA that issued its certificate, PEM.
    pub ca_pem: String,
}

/// Starts a target on 127.0.0.1 with a certificate for `localhost` and
/// `127.0.0.1`; a cap of 100 makes it an older target, which also refuses
/// idempotency keys.
pub async fn start(messages_max: usize, zstd: bool) -> Running {
    let (ca_pem, cert_pem, key_pem) = pki();
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let target = Arc::new(Target {
        messages_max,
        zstd,
        idempotency_keys: messages_max > 100,
        ..Target::default()
    });
    let listener = TlsListener {
        tcp,
        acceptor: TlsAcceptor::from(Arc::new(config)),
        target: Arc::clone(&target),
    };
    let app = Router::new()
        .route(
            "/readyz",
            get(|| async { (StatusCode::OK, r#"{"status":"ready"}"#) }),
        )
        .route("/v1/topics/{topic}", get(describe))
        .route("/v1/topics/{topic}/produce/batch", post(batch))
        .fallback(|| async { (StatusCode::NOT_FOUND, "404 page not found\n") })
        .with_state(Arc::clone(&target));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Running {
        target,
        port,
        ca_pem,
    }
}

/// A CA and a server certificate it issued, PEM: (CA, cert, key).
fn pki() -> (String, String, String) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().unwrap();
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let leaf =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    (ca_pem, cert.pem(), leaf_key.serialize_pem())
}

struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    target: Arc<Target>,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, address)) = self.tcp.accept().await else {
                continue;
            };
            self.target.connections.fetch_add(1, Ordering::SeqCst);
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, address);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

fn error(status: u16, text: &str) -> Response {
    let body = serde_json::json!({ "error": text }).to_string();
    (
        StatusCode::from_u16(status).unwrap(),
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

fn authorized(headers: &HeaderMap) -> bool {
    let expected = format!("Basic {}", BASE64.encode(format!("{USER}:{PASSWORD}")));
    headers
        .get(header::AUTHORIZATION)
        .is_some_and(|value| value.as_bytes() == expected.as_bytes())
}

async fn describe(
    State(target): State<Arc<Target>>,
    Path(topic): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return error(401, "unauthorized");
    }
    let children = target.children.lock().unwrap().clone();
    let body = if topic == TOPIC {
        let names: Vec<&str> = children.iter().map(|(name, _)| name.as_str()).collect();
        serde_json::json!({ "name": topic, "id": "00112233aabbccdd", "partitions": 3,
                            "children": names })
    } else {
        match children.iter().find(|(name, _)| *name == topic) {
            None => return error(404, "topic not found"),
            Some((_, None)) => return error(403, "forbidden"),
            Some((_, Some(false))) => {
                serde_json::json!({ "name": topic, "partitions": 3, "parent": TOPIC })
            }
            Some((_, Some(true))) => serde_json::json!({
                "name": topic, "partitions": 0, "parent": TOPIC,
                "remote": { "name": "further", "topic": "elsewhere", "lanes": 1 }
            }),
        }
    };
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

struct InFlight<'a>(&'a Target);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(serde::Deserialize)]
struct WireBody<'a> {
    #[serde(borrow)]
    messages: Vec<WireMessage<'a>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WireMessage<'a> {
    #[serde(borrow)]
    payload: Option<&'a RawValue>,
    payload_encoding: Option<String>,
    key: Option<String>,
    key_encoding: Option<String>,
    idempotency_key: Option<String>,
}

async fn batch(
    State(target): State<Arc<Target>>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = target.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    target.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let _in_flight = InFlight(&target);
    if !authorized(&headers) {
        return error(401, "unauthorized");
    }
    if topic != TOPIC {
        return error(404, "topic not found");
    }
    let zstd = headers.get(header::CONTENT_ENCODING).is_some();
    let body = if zstd {
        if !target.zstd {
            return error(
                415,
                "unsupported content encoding \"zstd\": send gzip or none",
            );
        }
        Bytes::from(zstd::decode_all(&body[..]).unwrap())
    } else {
        body
    };
    let wire: WireBody<'_> = match serde_json::from_slice(&body) {
        Ok(wire) => wire,
        Err(cause) => return error(400, &format!("invalid json: {cause}")),
    };
    if wire.messages.is_empty() {
        return error(400, "messages required");
    }
    if wire.messages.len() > target.messages_max {
        return error(
            400,
            &format!("too many messages: more than {}", target.messages_max),
        );
    }
    if !target.idempotency_keys && wire.messages.iter().any(|m| m.idempotency_key.is_some()) {
        return error(400, "invalid json: unknown field `idempotency_key`");
    }
    let mut messages = Vec::new();
    for (index, message) in wire.messages.iter().enumerate() {
        let payload = match (message.payload, message.payload_encoding.as_deref()) {
            (None, _) => Vec::new(),
            (Some(raw), Some("base64")) => BASE64
                .decode(serde_json::from_str::<String>(raw.get()).unwrap())
                .unwrap(),
            (Some(raw), _) => raw.get().as_bytes().to_vec(),
        };
        if payload.is_empty() {
            return error(400, &format!("message {index}: message required"));
        }
        let key = message
            .key
            .as_ref()
            .map(|key| match message.key_encoding.as_deref() {
                Some("base64") => BASE64.decode(key).unwrap(),
                _ => key.as_bytes().to_vec(),
            });
        messages.push(Message {
            key,
            payload,
            idempotency_key: message.idempotency_key.clone().unwrap_or_default(),
        });
    }
    target.received.lock().unwrap().push(Received {
        topic: topic.clone(),
        zstd,
        messages: messages.clone(),
    });
    target.got_request.notify_one();
    let reply = target.replies.lock().unwrap().pop_front();
    match reply {
        Some(Reply::Status(status, text, retry_after)) => {
            let mut response = error(status, text);
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, seconds.into());
            }
            response
        }
        Some(Reply::Redirect) => (
            StatusCode::FOUND,
            [(header::LOCATION, "/v1/topics/elsewhere/produce/batch")],
        )
            .into_response(),
        Some(Reply::HoldUntil(release)) => {
            release.notified().await;
            store_and_accept(&target, messages)
        }
        Some(Reply::StoreThenHang) => {
            store(&target, messages);
            std::future::pending::<()>().await;
            unreachable!("pending never resolves")
        }
        None => store_and_accept(&target, messages),
    }
}

/// Stores `messages` and answers `202 {"accepted":N}`.
fn store_and_accept(target: &Target, messages: Vec<Message>) -> Response {
    let accepted = messages.len();
    store(target, messages);
    (
        StatusCode::ACCEPTED,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{{\"accepted\":{accepted}}}\n"),
    )
        .into_response()
}

/// Stores each message whose idempotency key the target has not seen.
fn store(target: &Target, messages: Vec<Message>) {
    let mut keys = target.stored_keys.lock().unwrap();
    let mut stored = target.stored.lock().unwrap();
    for message in messages {
        if keys.insert(message.idempotency_key.clone()) {
            stored.push(message);
        }
    }
}
