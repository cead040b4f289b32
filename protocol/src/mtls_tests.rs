//! Mutual TLS between nodes, over loopback QUIC: nodes whose certificates
//! chain to one CA talk; a certificate from another CA, an expired one, or
//! none is refused, and each side logs what it refused or what refused it.

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use crate::test_pki::{CURRENT, EXPIRED, TestCa};
use crate::transport_tests::counting_router;
use crate::{
    CallError, ClusterAuth, ClusterSecret, ClusterTls, Lane, Node, NodeConfig, Opcode, Request,
    Router, Status,
};

/// Generous bound on waits for a log line that must come; never a
/// performance claim.
const SIGNAL_WAIT: Duration = Duration::from_secs(10);

fn secret() -> ClusterAuth {
    ClusterAuth::Secret(ClusterSecret::new(vec![7_u8; 32]).expect("32 bytes"))
}

fn node(tls: Option<ClusterTls>, router: Router) -> Node {
    let mut config = NodeConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), secret());
    config.tls = tls;
    Node::bind(config, router).expect("bind")
}

/// The log lines of this thread's events (the tests run on a
/// current-thread runtime, so every node's tasks log here).
///
/// One process-wide subscriber formats every event and hands the line to
/// the emitting thread's capture, if it has one. A thread-local subscriber
/// (`set_default`) is not enough: tracing caches each callsite's interest
/// for the whole process, and a sibling test thread with no subscriber
/// that reaches a `warn!` first caches it as "never", so the capturing
/// test sees nothing.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

thread_local! {
    static THIS_THREAD: RefCell<Option<Captured>> = const { RefCell::new(None) };
}

/// Stops this thread's capture when dropped.
struct Capturing;

impl Drop for Capturing {
    fn drop(&mut self) {
        THIS_THREAD.with(|capture| capture.borrow_mut().take());
    }
}

/// Writes a formatted line to the emitting thread's capture, or nowhere.
struct ToThisThread;

impl io::Write for ToThisThread {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        THIS_THREAD.with(|capture| {
            if let Some(captured) = capture.borrow().as_ref() {
                captured
                    .0
                    .lock()
                    .expect("log buffer")
                    .extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn start() -> (Self, Capturing) {
        static GLOBAL: Once = Once::new();
        GLOBAL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(|| ToThisThread)
                .with_ansi(false)
                .with_max_level(tracing::Level::INFO)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
        });
        let captured = Self::default();
        THIS_THREAD.with(|capture| *capture.borrow_mut() = Some(captured.clone()));
        (captured, Capturing)
    }

    fn text(&self) -> String {
        let bytes = self.0.lock().expect("log buffer").clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Waits until a line contains every one of `parts`; the line.
    async fn line_with(&self, parts: &[&str]) -> String {
        let deadline = tokio::time::Instant::now() + SIGNAL_WAIT;
        loop {
            let text = self.text();
            if let Some(line) = text
                .lines()
                .find(|line| parts.iter().all(|part| line.contains(part)))
            {
                return line.to_owned();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no log line with {parts:?}:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn request() -> Request {
    Request::new(Opcode::GET_TOPIC, &b"over mutual TLS"[..])
}

/// Calls `server` from `client` and expects a refusal; its reason.
async fn refused_call(client: &Node, server: &Node) -> String {
    let error = client
        .call(server.local_addr(), Lane::Control, request())
        .await
        .expect_err("refused");
    match error {
        CallError::Auth { reason, .. } => reason,
        other => panic!("expected an authentication failure, got {other}"),
    }
}

/// What the two sides of a refused handshake log: the side that refused,
/// and the side that was refused.
struct Refusal {
    by_refuser: &'static str,
    by_refused: &'static str,
}

/// A certificate refused at the handshake, for `what`.
fn certificate_refused(what: &'static str) -> Refusal {
    match what {
        "unknown CA" => Refusal {
            by_refuser: "this node refused the peer's certificate: unknown CA",
            by_refused: "the peer refused this node's certificate: unknown CA",
        },
        "expired" => Refusal {
            by_refuser: "this node refused the peer's certificate: expired",
            by_refused: "the peer refused this node's certificate: expired",
        },
        other => panic!("no refusal text for {other}"),
    }
}

/// Calls `server` from `client` and expects the handshake refused as
/// `refusal` says, by the server when `server_refuses`, else by the client:
/// the call's reason is the client's words, each side logs its own words
/// at WARN naming the other, and nothing was served.
async fn refused_both_sides(
    logs: &Captured,
    (client, server): (&Node, &Node),
    served: &AtomicUsize,
    refusal: &Refusal,
    server_refuses: bool,
) {
    let (client_says, server_says) = if server_refuses {
        (refusal.by_refused, refusal.by_refuser)
    } else {
        (refusal.by_refuser, refusal.by_refused)
    };
    let reason = refused_call(client, server).await;
    assert!(reason.contains(client_says), "{reason}");
    let server_addr = format!("peer={}", server.local_addr());
    let client_addr = format!("peer={}", client.local_addr());
    logs.line_with(&["WARN", &server_addr, client_says]).await;
    logs.line_with(&["WARN", &client_addr, server_says]).await;
    assert_eq!(served.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn nodes_with_certificates_from_one_ca_talk() {
    let ca = TestCa::new("cluster CA", CURRENT);
    let served = Arc::new(AtomicUsize::new(0));
    let server = node(
        Some(ca.node_tls(CURRENT, &ca.pem)),
        counting_router(served.clone()),
    );
    let client = node(Some(ca.node_tls(CURRENT, &ca.pem)), Router::new());
    for lane in Lane::ALL {
        let response = client
            .call(server.local_addr(), lane, request())
            .await
            .expect("answered");
        assert_eq!(response.status, Status::OK);
        assert_eq!(&response.body[..], b"over mutual TLS");
    }
    assert_eq!(served.load(Ordering::SeqCst), Lane::ALL.len());
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused_as_unknown_ca() {
    let (logs, _guard) = Captured::start();
    let ca = TestCa::new("cluster CA", CURRENT);
    let other = TestCa::new("another cluster's CA", CURRENT);
    let served = Arc::new(AtomicUsize::new(0));
    let server = node(
        Some(ca.node_tls(CURRENT, &ca.pem)),
        counting_router(served.clone()),
    );
    // It trusts the cluster's CA, so it accepts the server; its own
    // certificate is the other CA's.
    let client = node(Some(other.node_tls(CURRENT, &ca.pem)), Router::new());
    let refusal = certificate_refused("unknown CA");
    refused_both_sides(&logs, (&client, &server), &served, &refusal, true).await;
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused_by_the_client() {
    let (logs, _guard) = Captured::start();
    let ca = TestCa::new("cluster CA", CURRENT);
    let other = TestCa::new("another cluster's CA", CURRENT);
    let served = Arc::new(AtomicUsize::new(0));
    let server = node(
        Some(other.node_tls(CURRENT, &other.pem)),
        counting_router(served.clone()),
    );
    let client = node(Some(ca.node_tls(CURRENT, &ca.pem)), Router::new());
    let refusal = certificate_refused("unknown CA");
    refused_both_sides(&logs, (&client, &server), &served, &refusal, false).await;
}

#[tokio::test]
async fn an_expired_certificate_is_refused_as_expired() {
    let (logs, _guard) = Captured::start();
    let ca = TestCa::new("cluster CA", CURRENT);
    let served = Arc::new(AtomicUsize::new(0));
    let server = node(
        Some(ca.node_tls(CURRENT, &ca.pem)),
        counting_router(served.clone()),
    );
    let client = node(Some(ca.node_tls(EXPIRED, &ca.pem)), Router::new());
    let refusal = certificate_refused("expired");
    refused_both_sides(&logs, (&client, &server), &served, &refusal, true).await;
}

#[tokio::test]
async fn a_node_without_a_certificate_is_refused_as_showing_none() {
    let (logs, _guard) = Captured::start();
    let ca = TestCa::new("cluster CA", CURRENT);
    let served = Arc::new(AtomicUsize::new(0));
    let server = node(
        Some(ca.node_tls(CURRENT, &ca.pem)),
        counting_router(served.clone()),
    );
    // The same secret, no TLS files: it accepts any server certificate
    // and shows none of its own.
    let client = node(None, Router::new());
    let refusal = Refusal {
        by_refuser: "this node refused the peer: no client certificate",
        by_refused: "the peer refused this node: no client certificate",
    };
    refused_both_sides(&logs, (&client, &server), &served, &refusal, true).await;
}

#[tokio::test]
async fn a_node_with_certificates_refuses_a_server_without_them() {
    let ca = TestCa::new("cluster CA", CURRENT);
    let served = Arc::new(AtomicUsize::new(0));
    let server = node(None, counting_router(served.clone()));
    let client = node(Some(ca.node_tls(CURRENT, &ca.pem)), Router::new());
    let reason = refused_call(&client, &server).await;
    assert!(
        reason.contains("this node refused the peer's certificate: unknown CA"),
        "{reason}"
    );
    assert_eq!(served.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_refused_connection_backs_off_the_next_dial() {
    let ca = TestCa::new("cluster CA", CURRENT);
    let server = node(
        Some(ca.node_tls(CURRENT, &ca.pem)),
        counting_router(Arc::default()),
    );
    let client = node(Some(ca.node_tls(EXPIRED, &ca.pem)), Router::new());
    refused_call(&client, &server).await;
    // Refused after this side completed its handshake: the next call
    // waits out the dial backoff instead of dialling again at once.
    let error = client
        .call(server.local_addr(), Lane::Control, request())
        .await
        .expect_err("refused");
    assert!(
        matches!(&error, CallError::Dial { reason, .. } if reason.contains("the last dial failed")),
        "{error}"
    );
}
