//! The transport end to end, over loopback QUIC.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::frame::Frame;
use crate::limits::FRAME_BYTES_MAX;
use crate::wire::read_frame;
use crate::{
    CallError, ClusterAuth, ClusterSecret, Inbound, Lane, Node, NodeConfig, Opcode, OperationLimit,
    Request, Response, Router, RpcError, Status, codes,
};

/// Generous bound on waits for a signal that must come; never a performance claim.
const SIGNAL_WAIT: Duration = Duration::from_secs(10);
/// 16 MiB each way through QUIC in a debug build (its crypto unoptimized)
/// took over 10 s on a loaded 2-core machine; a ceiling, never a speed.
const FULL_FRAME_WAIT: Duration = Duration::from_secs(60);

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn secret(byte: u8) -> ClusterAuth {
    ClusterAuth::Secret(ClusterSecret::new(vec![byte; 32]).expect("32 bytes"))
}

fn node(auth: ClusterAuth, router: Router) -> Node {
    Node::bind(NodeConfig::new(loopback(), auth), router).expect("bind")
}

async fn echo(inbound: Inbound) -> Result<Response, RpcError> {
    Ok(Response::ok(inbound.request.body))
}

fn echo_router() -> Router {
    Router::new().route(Opcode::GET_TOPIC, OperationLimit::messaging(), echo)
}

/// A router whose handler counts its calls, to prove none was served.
pub(crate) fn counting_router(served: Arc<AtomicUsize>) -> Router {
    Router::new().route(
        Opcode::GET_TOPIC,
        OperationLimit::messaging(),
        move |inbound: Inbound| {
            served.fetch_add(1, Ordering::SeqCst);
            echo(inbound)
        },
    )
}

/// `router` with a `CreateTopic` handler that refuses every call `409
/// topic exists`.
fn refusing_create(router: Router) -> Router {
    router.route(
        Opcode::CREATE_TOPIC,
        OperationLimit::new("admin", 4),
        |_: Inbound| async { Err(RpcError::new(Status::CONFLICT, "topic exists")) },
    )
}

fn request(body: &'static [u8]) -> Request {
    Request::new(Opcode::GET_TOPIC, body)
}

#[tokio::test]
async fn request_and_response_round_trip_on_every_lane() {
    let server = node(secret(1), echo_router());
    let client = node(secret(1), Router::new());
    for lane in Lane::ALL {
        let body = Bytes::from(format!("on the {lane} lane"));
        let response = client
            .call(
                server.local_addr(),
                lane,
                Request::new(Opcode::GET_TOPIC, body.clone()),
            )
            .await
            .expect("answered");
        assert_eq!(response.status, Status::OK);
        assert_eq!(response.body, body);
    }
}

#[tokio::test]
async fn many_concurrent_requests_share_one_connection() {
    let server = node(secret(1), echo_router());
    let client = Arc::new(node(secret(1), Router::new()));
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..300_u32 {
        let client = client.clone();
        let peer = server.local_addr();
        let lane = Lane::ALL[i as usize % Lane::ALL.len()];
        calls.spawn(async move {
            let body = Bytes::from(i.to_be_bytes().to_vec());
            let response = client
                .call(peer, lane, Request::new(Opcode::GET_TOPIC, body.clone()))
                .await;
            (body, response)
        });
    }
    while let Some(outcome) = calls.join_next().await {
        let (body, response) = outcome.expect("call task");
        assert_eq!(
            response.expect("answered").body,
            body,
            "each answer matches its own request"
        );
    }
    assert_eq!(client.open_connections(), 1);
}

#[tokio::test]
async fn oversize_request_is_refused_before_sending() {
    let served = Arc::new(AtomicUsize::new(0));
    let server = node(secret(1), counting_router(served.clone()));
    let client = node(secret(1), Router::new());
    let body = Bytes::from(vec![0_u8; FRAME_BYTES_MAX]);
    let error = client
        .call(
            server.local_addr(),
            Lane::Produce,
            Request::new(Opcode::GET_TOPIC, body),
        )
        .await
        .expect_err("refused");
    assert!(matches!(error, CallError::RequestTooLarge(_)), "{error}");
    assert_eq!(
        client.open_connections(),
        0,
        "nothing was dialled, so nothing was written"
    );
    assert_eq!(served.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn request_just_under_the_limit_is_served() {
    let server = node(secret(1), echo_router());
    let client = node(secret(1), Router::new());
    // Request frame overhead is 19 bytes; its echo answer's is 22.
    let body = Bytes::from(vec![7_u8; FRAME_BYTES_MAX - 22]);
    let response = client
        .call_with_timeout(
            server.local_addr(),
            Lane::Produce,
            Request::new(Opcode::GET_TOPIC, body.clone()),
            FULL_FRAME_WAIT,
        )
        .await
        .expect("served");
    assert_eq!(response.body.len(), body.len());
}

#[tokio::test]
async fn oversize_claimed_length_on_receipt_refuses_the_stream() {
    let server = node(secret(1), echo_router());
    let client = node(secret(1), Router::new());
    let (mut send, mut recv) = client.client().open_raw_stream(server.local_addr()).await;
    send.write_all(&u32::MAX.to_be_bytes())
        .await
        .expect("write prefix");
    let error = read_frame(&mut recv, FRAME_BYTES_MAX)
        .await
        .expect_err("stream refused");
    assert!(
        error
            .to_string()
            .contains(&format!("error {}", codes::FRAME_TOO_LARGE)),
        "{error}"
    );
    // The node keeps serving other streams.
    client
        .call(server.local_addr(), Lane::Control, request(b"still here"))
        .await
        .expect("served");
}

#[tokio::test]
async fn oversize_response_is_replaced_by_an_error_answer() {
    let router = Router::new().route(
        Opcode::GET_TOPIC,
        OperationLimit::messaging(),
        |_: Inbound| async { Ok(Response::ok(vec![0_u8; FRAME_BYTES_MAX])) },
    );
    let server = node(secret(1), router);
    let client = node(secret(1), Router::new());
    let error = client
        .call(server.local_addr(), Lane::Consume, request(b""))
        .await
        .expect_err("refused");
    let CallError::Rejected(error) = error else {
        panic!("expected an error answer, got {error}")
    };
    assert_eq!(error.status, Status::INTERNAL_ERROR);
    assert!(
        error.message.contains("response refused"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn malformed_request_frame_is_answered_with_bad_request() {
    let server = node(secret(1), echo_router());
    let client = node(secret(1), Router::new());
    let (mut send, mut recv) = client.client().open_raw_stream(server.local_addr()).await;
    let frame = Frame::Request {
        request_id: crate::RequestId(5),
        request: request(b"x"),
    }
    .encode()
    .expect("fits");
    // One trailing byte after the body, counted in the length prefix.
    let mut bytes = frame.to_vec();
    let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) + 1;
    bytes[..4].copy_from_slice(&len.to_be_bytes());
    bytes.push(0);
    send.write_all(&bytes).await.expect("write");
    let answer = read_frame(&mut recv, FRAME_BYTES_MAX)
        .await
        .expect("read")
        .expect("a frame");
    let Frame::Response {
        request_id,
        outcome: Err(error),
        ..
    } = Frame::decode(answer).expect("decodes")
    else {
        panic!("expected an error answer");
    };
    assert_eq!(request_id, crate::RequestId(5));
    assert_eq!(error.status, Status::BAD_REQUEST);
    assert!(
        error.message.contains("trailing bytes"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn wrong_secret_gets_nothing_served() {
    let served = Arc::new(AtomicUsize::new(0));
    let server = node(secret(1), counting_router(served.clone()));
    let client = node(secret(2), Router::new());
    let error = client
        .call(server.local_addr(), Lane::Control, request(b"let me in"))
        .await
        .expect_err("refused");
    let CallError::Auth { reason, .. } = &error else {
        panic!("expected an auth error, got {error}")
    };
    assert!(reason.contains("refused this node's proof"), "{reason}");
    assert_eq!(served.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn secured_node_refuses_an_insecure_peer() {
    let served = Arc::new(AtomicUsize::new(0));
    let server = node(secret(1), counting_router(served.clone()));
    let client = node(ClusterAuth::InsecureDevOnly, Router::new());
    let error = client
        .call(server.local_addr(), Lane::Control, request(b"hello"))
        .await
        .expect_err("refused");
    assert!(matches!(error, CallError::Auth { .. }), "{error}");
    assert_eq!(served.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn insecure_dev_nodes_talk_to_each_other() {
    let server = node(ClusterAuth::InsecureDevOnly, echo_router());
    let client = node(ClusterAuth::InsecureDevOnly, Router::new());
    let response = client
        .call(server.local_addr(), Lane::Control, request(b"dev"))
        .await
        .expect("served");
    assert_eq!(response.body, Bytes::from_static(b"dev"));
}

#[tokio::test]
async fn reconnects_after_the_server_endpoint_restarts() {
    let first = node(secret(1), echo_router());
    let addr = first.local_addr();
    let client = node(secret(1), Router::new());
    client
        .call(addr, Lane::Ack, request(b"before"))
        .await
        .expect("served");
    let before = client
        .client()
        .cached_connection_id(addr)
        .await
        .expect("cached");
    first.shutdown().await;

    let second = rebind(addr).await;
    let mut attempts = 0;
    let response = loop {
        attempts += 1;
        match client.call(addr, Lane::Ack, request(b"after")).await {
            Ok(response) => break response,
            Err(CallError::ConnectionLost { .. }) if attempts < 10 => {}
            Err(CallError::Dial { .. }) if attempts < 10 => {
                tokio::time::sleep(crate::limits::DIAL_BACKOFF_MIN).await;
            }
            Err(error) => panic!("no answer after the restart: {error}"),
        }
    };
    assert_eq!(response.body, Bytes::from_static(b"after"));
    let after = client
        .client()
        .cached_connection_id(addr)
        .await
        .expect("cached");
    assert_ne!(
        after, before,
        "the lost connection was replaced by a new one"
    );
    drop(second);
}

/// Binds a new server on `addr`, waiting for the old socket to be released.
async fn rebind(addr: SocketAddr) -> Node {
    for _ in 0..200 {
        match Node::bind(NodeConfig::new(addr, secret(1)), echo_router()) {
            Ok(node) => return node,
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    panic!("could not bind {addr} again");
}

/// A router whose handler reports that it started and when its future is
/// dropped, and otherwise never finishes.
fn hanging_router(started: mpsc::Sender<()>, dropped: mpsc::Sender<()>) -> Router {
    Router::new().route(
        Opcode::CONSUME,
        OperationLimit::exempt("long_poll_consume"),
        move |_: Inbound| {
            let started = started.clone();
            let dropped = dropped.clone();
            async move {
                let _signal = SignalOnDrop(Some(dropped));
                let _ = started.send(()).await;
                std::future::pending::<Result<Response, RpcError>>().await
            }
        },
    )
}

struct SignalOnDrop(Option<mpsc::Sender<()>>);

impl Drop for SignalOnDrop {
    fn drop(&mut self) {
        if let Some(sender) = self.0.take() {
            let _ = sender.try_send(());
        }
    }
}

#[tokio::test]
async fn dropping_a_call_cancels_the_handler_on_the_peer() {
    let (started_tx, mut started) = mpsc::channel(1);
    let (dropped_tx, mut dropped) = mpsc::channel(1);
    let server = node(secret(1), hanging_router(started_tx, dropped_tx));
    let client = Arc::new(node(secret(1), Router::new()));
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let caller = {
        let client = client.clone();
        let peer = server.local_addr();
        tokio::spawn(async move {
            let _done = done_tx;
            client
                .call_with_timeout(
                    peer,
                    Lane::Consume,
                    Request::new(Opcode::CONSUME, &b""[..]),
                    SIGNAL_WAIT * 6,
                )
                .await
        })
    };
    tokio::time::timeout(SIGNAL_WAIT, started.recv())
        .await
        .expect("handler started");
    caller.abort();
    assert!(done_rx.await.is_err(), "the call was dropped, not answered");
    tokio::time::timeout(SIGNAL_WAIT, dropped.recv())
        .await
        .expect("handler dropped after the cancel");
}

#[tokio::test]
async fn timed_out_call_reports_timeout_and_cancels_the_handler() {
    let (started_tx, _started) = mpsc::channel(1);
    let (dropped_tx, mut dropped) = mpsc::channel(1);
    let server = node(secret(1), hanging_router(started_tx, dropped_tx));
    let client = node(secret(1), Router::new());
    let timeout = Duration::from_millis(300);
    let error = client
        .call_with_timeout(
            server.local_addr(),
            Lane::Consume,
            Request::new(Opcode::CONSUME, &b""[..]),
            timeout,
        )
        .await
        .expect_err("no answer");
    assert_eq!(error, CallError::Timeout { after: timeout });
    tokio::time::timeout(SIGNAL_WAIT, dropped.recv())
        .await
        .expect("handler dropped after the cancel");
}

#[tokio::test]
async fn unknown_opcode_is_answered_with_unsupported_operation() {
    let server = node(secret(1), echo_router());
    let client = node(secret(1), Router::new());
    for opcode in [Opcode(200), Opcode::PRODUCE] {
        let error = client
            .call(
                server.local_addr(),
                Lane::Control,
                Request::new(opcode, &b""[..]),
            )
            .await
            .expect_err("unsupported");
        let CallError::Rejected(error) = error else {
            panic!("expected an error answer, got {error}")
        };
        assert_eq!(error.status, Status::BAD_REQUEST);
        assert!(
            error.message.starts_with("unsupported rpc operation"),
            "{}",
            error.message
        );
    }
}

#[tokio::test]
async fn handler_error_reaches_the_caller_typed() {
    let server = node(secret(1), refusing_create(Router::new()));
    let client = node(secret(1), Router::new());
    let error = client
        .call(
            server.local_addr(),
            Lane::Control,
            Request::new(Opcode::CREATE_TOPIC, &b"t"[..]),
        )
        .await
        .expect_err("conflict");
    assert_eq!(
        error,
        CallError::Rejected(RpcError::new(Status::CONFLICT, "topic exists"))
    );
}

#[tokio::test]
async fn operation_limit_bounds_concurrent_handlers() {
    let active = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let router = {
        let (active, most) = (active.clone(), most.clone());
        Router::new().route(
            Opcode::FETCH_SEGMENT_CHUNK,
            OperationLimit::new("transfer", 2),
            move |_: Inbound| {
                let (active, most) = (active.clone(), most.clone());
                async move {
                    let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    active.fetch_sub(1, Ordering::SeqCst);
                    Ok(Response::no_content())
                }
            },
        )
    };
    let server = node(secret(1), router);
    let client = Arc::new(node(secret(1), Router::new()));
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (client, peer) = (client.clone(), server.local_addr());
        calls.spawn(async move {
            client
                .call(
                    peer,
                    Lane::Control,
                    Request::new(Opcode::FETCH_SEGMENT_CHUNK, &b""[..]),
                )
                .await
        });
    }
    while let Some(outcome) = calls.join_next().await {
        assert_eq!(
            outcome.expect("task").expect("answered").status,
            Status::NO_CONTENT
        );
    }
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "at most 2 ran at once, saw {}",
        most.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn panicking_handler_is_answered_with_internal_error() {
    let router = Router::new().route(
        Opcode::GET_TOPIC,
        OperationLimit::messaging(),
        |_: Inbound| async {
            panic!("handler bug");
        },
    );
    let server = node(secret(1), router);
    let client = node(secret(1), Router::new());
    let error = client
        .call(server.local_addr(), Lane::Control, request(b""))
        .await
        .expect_err("failed");
    let CallError::Rejected(error) = error else {
        panic!("expected an error answer, got {error}")
    };
    assert_eq!(error.status, Status::INTERNAL_ERROR);
}

/// Waits until `counter` reaches `target`; the bound only stops a broken
/// build from hanging the suite.
async fn wait_for_count(counter: &AtomicUsize, target: usize) {
    let reached = async {
        while counter.load(Ordering::SeqCst) < target {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::time::timeout(SIGNAL_WAIT, reached)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "count stuck at {} of {target}",
                counter.load(Ordering::SeqCst)
            )
        });
}

struct CountOnDrop(Arc<AtomicUsize>);

impl Drop for CountOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn cancels_reach_a_stream_whose_request_permits_are_all_taken() {
    let started = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let router = {
        let (started, dropped) = (started.clone(), dropped.clone());
        Router::new().route(
            Opcode::CONSUME,
            OperationLimit::exempt("long_poll_consume"),
            move |_: Inbound| {
                let (started, dropped) = (started.clone(), dropped.clone());
                async move {
                    let _count = CountOnDrop(dropped);
                    started.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<Result<Response, RpcError>>().await
                }
            },
        )
    };
    let server = node(secret(1), router);
    let client = Arc::new(node(secret(1), Router::new()));
    // Every stream of the control lane gets its full share of hung requests.
    let hung = Lane::Control.streams() * crate::limits::STREAM_REQUESTS_IN_FLIGHT_MAX;
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..hung {
        let (client, peer) = (client.clone(), server.local_addr());
        calls.spawn(async move {
            client
                .call_with_timeout(
                    peer,
                    Lane::Control,
                    Request::new(Opcode::CONSUME, &b""[..]),
                    SIGNAL_WAIT * 6,
                )
                .await
        });
    }
    wait_for_count(&started, hung).await;
    calls.abort_all();
    wait_for_count(&dropped, hung).await;
    // The lane is usable again.
    let error = client
        .call(
            server.local_addr(),
            Lane::Control,
            Request::new(Opcode::GET_TOPIC, &b""[..]),
        )
        .await
        .expect_err("no route");
    assert!(matches!(error, CallError::Rejected(_)), "{error}");
}

#[tokio::test]
async fn oversize_answer_claimed_by_a_rogue_server_refuses_the_stream() {
    // A server with the secret that claims a 4 GiB answer.
    crate::tls::install_ring_provider();
    let crypto = crate::tls::server_crypto(None).expect("crypto");
    let config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let rogue = quinn::Endpoint::server(config, loopback()).expect("bind");
    let rogue_addr = rogue.local_addr().expect("addr");
    let rogue_task = tokio::spawn(async move {
        let connection = rogue
            .accept()
            .await
            .expect("incoming")
            .await
            .expect("connected");
        let ekm = crate::server::exporter(&connection).expect("ekm");
        let (mut send, mut recv) = connection.accept_bi().await.expect("stream");
        let auth = secret(1);
        crate::auth::server_handshake(&auth, &ekm, &mut send, &mut recv, SIGNAL_WAIT)
            .await
            .expect("auth");
        let _request = read_frame(&mut recv, FRAME_BYTES_MAX)
            .await
            .expect("request");
        send.write_all(&u32::MAX.to_be_bytes())
            .await
            .expect("write");
        // Hold the connection until the client has refused the stream.
        let _ = recv.read_to_end(64).await;
        connection
    });
    let client = node(secret(1), Router::new());
    let error = client
        .call(rogue_addr, Lane::Consume, request(b""))
        .await
        .expect_err("refused");
    let CallError::StreamRefused { reason, .. } = &error else {
        panic!("expected a refused stream, got {error}")
    };
    assert!(
        reason.contains("exceeds the 16777216-byte limit"),
        "{reason}"
    );
    drop(client);
    let _ = rogue_task.await;
}

#[tokio::test]
async fn failed_dial_is_not_repeated_until_the_backoff_passes() {
    // A UDP socket that never answers: the QUIC handshake cannot finish.
    let silent = std::net::UdpSocket::bind(loopback()).expect("bind");
    let peer = silent.local_addr().expect("addr");
    let mut config = NodeConfig::new(loopback(), secret(1));
    config.dial_timeout = Duration::from_millis(200);
    let client = Node::bind(config, Router::new()).expect("bind");

    let first = client
        .call(peer, Lane::Control, request(b""))
        .await
        .expect_err("no peer");
    let CallError::Dial { reason, .. } = &first else {
        panic!("expected a dial error, got {first}")
    };
    assert!(reason.contains("no handshake within"), "{reason}");

    let second = client
        .call(peer, Lane::Control, request(b""))
        .await
        .expect_err("backing off");
    let CallError::Dial { reason, .. } = &second else {
        panic!("expected a dial error, got {second}")
    };
    assert!(reason.contains("the last dial failed"), "{reason}");
}

#[tokio::test]
async fn answer_not_taken_by_the_peer_in_time_resets_the_stream() {
    // 8 MiB cannot fit in the peer's 1.25 MB stream window while it reads nothing.
    let router = Router::new().route(
        Opcode::FETCH_SEGMENT_CHUNK,
        OperationLimit::transfer(),
        |_: Inbound| async { Ok(Response::ok(vec![1_u8; 8 * 1024 * 1024])) },
    );
    let mut config = NodeConfig::new(loopback(), secret(1));
    config.write_timeout_base = Duration::from_millis(100);
    config.write_timeout_per_chunk = Duration::from_millis(1);
    let server = Node::bind(config, router).expect("bind");
    let client = node(secret(1), Router::new());
    let (mut send, mut recv) = client.client().open_raw_stream(server.local_addr()).await;
    let frame = Frame::Request {
        request_id: crate::RequestId(1),
        request: Request::new(Opcode::FETCH_SEGMENT_CHUNK, &b""[..]),
    };
    send.write_all(&frame.encode().expect("fits"))
        .await
        .expect("write");
    // Never read: wait for the server to give up on the answer.
    let reset = tokio::time::timeout(SIGNAL_WAIT, recv.received_reset())
        .await
        .expect("reset in time");
    assert_eq!(reset.expect("stream state"), Some(codes::WRITE_TIMEOUT));
}

/// A small typed message, as a plane would define one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Offsets {
    partition: u32,
    high_watermark: u64,
}

impl crate::Encode for Offsets {
    fn encode(&self, writer: &mut crate::Writer) {
        writer.u32(self.partition);
        writer.u64(self.high_watermark);
    }
}

impl crate::Decode for Offsets {
    fn decode(reader: &mut crate::Reader) -> Result<Self, crate::DecodeError> {
        Ok(Self {
            partition: reader.u32("partition")?,
            high_watermark: reader.u64("high watermark")?,
        })
    }
}

impl crate::Message for Offsets {
    const NAME: &'static str = "Offsets";
    const VERSION: u8 = 1;
}

fn offsets_router() -> Router {
    Router::new().route(
        Opcode::TOPIC_PARTITION_STATS,
        OperationLimit::messaging(),
        |inbound: Inbound| async move {
            let mut offsets: Offsets = inbound.message()?;
            offsets.high_watermark += 1;
            Ok(Response::message(&offsets))
        },
    )
}

#[tokio::test]
async fn typed_messages_round_trip_through_call_message() {
    let server = node(secret(1), offsets_router());
    let client = node(secret(1), Router::new());
    let asked = Offsets {
        partition: 3,
        high_watermark: 41,
    };
    let answer: Offsets = client
        .call_message(
            server.local_addr(),
            Lane::Control,
            Opcode::TOPIC_PARTITION_STATS,
            &asked,
        )
        .await
        .expect("answered");
    assert_eq!(
        answer,
        Offsets {
            partition: 3,
            high_watermark: 42
        }
    );
}

#[tokio::test]
async fn malformed_message_body_is_answered_with_a_clear_error() {
    let server = node(secret(1), offsets_router());
    let client = node(secret(1), Router::new());
    // Version 1, then a partition with nothing after it.
    let body = Bytes::from_static(&[1, 0, 0, 0, 3]);
    let error = client
        .call(
            server.local_addr(),
            Lane::Control,
            Request::new(Opcode::TOPIC_PARTITION_STATS, body),
        )
        .await
        .expect_err("malformed");
    let CallError::Rejected(error) = error else {
        panic!("expected an error answer, got {error}")
    };
    assert_eq!(error.status, Status::BAD_REQUEST);
    assert!(
        error.message.contains("high watermark"),
        "{}",
        error.message
    );
}

/// A UDP relay between one client and `target` that can be made to drop
/// every packet, as a peer that vanished without a word would.
struct Blackhole {
    addr: SocketAddr,
    dropping: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Blackhole {
    async fn in_front_of(target: SocketAddr) -> Self {
        let socket = tokio::net::UdpSocket::bind(loopback())
            .await
            .expect("bind relay");
        let addr = socket.local_addr().expect("relay addr");
        let dropping = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = {
            let dropping = dropping.clone();
            tokio::spawn(async move {
                let mut buf = vec![0_u8; 65_536];
                let mut client = None;
                while let Ok((len, from)) = socket.recv_from(&mut buf).await {
                    if dropping.load(Ordering::SeqCst) {
                        continue;
                    }
                    let to = if from == target {
                        let Some(client) = client else { continue };
                        client
                    } else {
                        client = Some(from);
                        target
                    };
                    let _ = socket.send_to(&buf[..len], to).await;
                }
            })
        };
        Self {
            addr,
            dropping,
            task,
        }
    }

    fn swallow_everything(&self) {
        self.dropping.store(true, Ordering::SeqCst);
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn hanging_and_echo_router() -> Router {
    let (started, _) = mpsc::channel(1);
    let (dropped, _) = mpsc::channel(1);
    hanging_router(started, dropped).route(Opcode::GET_TOPIC, OperationLimit::messaging(), echo)
}

#[tokio::test]
async fn vanished_peer_loses_its_connection_after_a_deadline_and_an_unanswered_ping() {
    let server = node(secret(1), hanging_and_echo_router());
    let relay = Blackhole::in_front_of(server.local_addr()).await;
    let client = node(secret(1), Router::new());
    client
        .call(relay.addr, Lane::Control, request(b"hello"))
        .await
        .expect("served");
    let connection = client
        .client()
        .cached_connection(relay.addr)
        .await
        .expect("cached");

    relay.swallow_everything();
    let deadline = Duration::from_millis(200);
    let error = client
        .call_with_timeout(
            relay.addr,
            Lane::Consume,
            Request::new(Opcode::CONSUME, &b""[..]),
            deadline,
        )
        .await
        .expect_err("no answer");
    assert_eq!(error, CallError::Timeout { after: deadline });

    let closed = tokio::time::timeout(SIGNAL_WAIT, connection.closed())
        .await
        .expect("closed");
    assert_eq!(
        closed,
        quinn::ConnectionError::LocallyClosed,
        "closed by the liveness check, not the idle timeout"
    );
}

#[tokio::test]
async fn slow_but_present_peer_keeps_its_connection_after_a_deadline() {
    let server = node(secret(1), hanging_and_echo_router());
    let client = node(secret(1), Router::new());
    client
        .call(server.local_addr(), Lane::Control, request(b"hello"))
        .await
        .expect("served");
    let before = client
        .client()
        .cached_connection_id(server.local_addr())
        .await
        .expect("cached");

    let deadline = Duration::from_millis(200);
    let error = client
        .call_with_timeout(
            server.local_addr(),
            Lane::Consume,
            Request::new(Opcode::CONSUME, &b""[..]),
            deadline,
        )
        .await
        .expect_err("no answer");
    assert_eq!(error, CallError::Timeout { after: deadline });
    let checked = async {
        while client.client().liveness_checks() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(SIGNAL_WAIT, checked)
        .await
        .expect("liveness check finished");

    let connection = client
        .client()
        .cached_connection(server.local_addr())
        .await
        .expect("cached");
    assert!(
        connection.close_reason().is_none(),
        "the connection is still open"
    );
    assert_eq!(connection.stable_id(), before);
    client
        .call(server.local_addr(), Lane::Control, request(b"again"))
        .await
        .expect("served");
}

#[tokio::test]
async fn ping_is_answered_by_the_transport_itself() {
    let server = node(secret(1), Router::new());
    let client = node(secret(1), Router::new());
    let response = client
        .call(
            server.local_addr(),
            Lane::Control,
            Request::new(Opcode::PING, Bytes::new()),
        )
        .await
        .expect("pong");
    assert_eq!(response.status, Status::NO_CONTENT);
}

#[test]
#[should_panic(expected = "answered by the transport itself")]
fn routing_the_ping_opcode_is_a_programmer_error() {
    let _ = Router::new().route(Opcode::PING, OperationLimit::messaging(), echo);
}

#[tokio::test]
async fn restarted_peer_resets_a_stale_connection_at_its_next_packet() {
    let first = node(secret(1), echo_router());
    let addr = first.local_addr();
    let relay = Blackhole::in_front_of(addr).await;
    let client = node(secret(1), Router::new());
    client
        .call(relay.addr, Lane::Control, request(b"before"))
        .await
        .expect("served");
    let stale = client
        .client()
        .cached_connection(relay.addr)
        .await
        .expect("cached");

    // The first incarnation goes away without its goodbye reaching the client.
    relay.swallow_everything();
    first.shutdown().await;
    let second = rebind(addr).await;
    relay.dropping.store(false, Ordering::SeqCst);

    // The new incarnation recognises the old connection IDs and signs resets
    // with the old key (both come from the secret), so the client's next
    // packet on the stale connection is answered by a stateless reset. The
    // call either finds the connection already reset and re-dials, or loses
    // it mid-call; it never runs into its deadline.
    match client
        .call(relay.addr, Lane::Control, request(b"after"))
        .await
    {
        Ok(response) => assert_eq!(response.body, Bytes::from_static(b"after")),
        Err(CallError::ConnectionLost { .. }) => {
            client
                .call(relay.addr, Lane::Control, request(b"again"))
                .await
                .expect("re-dialled");
        }
        Err(error) => panic!("expected a fast failure or an answer, got {error}"),
    }
    assert_eq!(stale.close_reason(), Some(quinn::ConnectionError::Reset));
    drop(second);
}

#[tokio::test]
async fn a_call_checking_liveness_fails_soon_after_its_peer_vanishes() {
    let server = node(secret(1), hanging_and_echo_router());
    let relay = Blackhole::in_front_of(server.local_addr()).await;
    let client = node(secret(1), Router::new());
    client
        .call(relay.addr, Lane::Control, request(b"hello"))
        .await
        .expect("served");
    let connection = client
        .client()
        .cached_connection(relay.addr)
        .await
        .expect("cached");

    relay.swallow_everything();
    // The call's own deadline is far beyond the wait below: only the
    // liveness check can end it in time.
    let call = client.call_checking_liveness(
        relay.addr,
        Lane::Consume,
        Request::new(Opcode::CONSUME, &b""[..]),
        SIGNAL_WAIT * 6,
        Duration::from_millis(100),
    );
    let error = tokio::time::timeout(SIGNAL_WAIT, call)
        .await
        .expect("the call ended before its deadline")
        .expect_err("no answer");
    // Lost with its connection; or, when the lane's stream was still being
    // opened, refused by the one re-dial a fresh stream gets. Never a
    // timeout: the deadline is a minute away.
    assert!(
        matches!(
            error,
            CallError::ConnectionLost { .. } | CallError::Dial { .. }
        ),
        "ended by the lost connection: {error:?}"
    );
    assert_eq!(
        connection.close_reason(),
        Some(quinn::ConnectionError::LocallyClosed),
        "closed by the liveness check, not the idle timeout"
    );
}

/// A router whose handler answers only once `release` is notified.
fn held_router(release: Arc<tokio::sync::Notify>) -> Router {
    Router::new().route(
        Opcode::GET_TOPIC,
        OperationLimit::messaging(),
        move |inbound: Inbound| {
            let release = release.clone();
            async move {
                release.notified().await;
                echo(inbound).await
            }
        },
    )
}

#[tokio::test]
async fn a_slow_peer_keeps_its_connection_and_answers_a_call_checking_liveness() {
    let release = Arc::new(tokio::sync::Notify::new());
    let server = node(secret(1), held_router(release.clone()));
    let client = Arc::new(node(secret(1), Router::new()));
    client
        .call(
            server.local_addr(),
            Lane::Control,
            Request::new(Opcode::PING, Bytes::new()),
        )
        .await
        .expect("pong");
    let before = client
        .client()
        .cached_connection_id(server.local_addr())
        .await
        .expect("cached");

    let call = {
        let client = client.clone();
        let peer = server.local_addr();
        tokio::spawn(async move {
            client
                .call_checking_liveness(
                    peer,
                    Lane::Produce,
                    request(b"slow commit"),
                    SIGNAL_WAIT * 6,
                    Duration::from_millis(50),
                )
                .await
        })
    };
    let checked = async {
        while client.client().liveness_checks() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(SIGNAL_WAIT, checked)
        .await
        .expect("a liveness check finished while the call waited");
    release.notify_one();
    let response = tokio::time::timeout(SIGNAL_WAIT, call)
        .await
        .expect("answered")
        .expect("call task")
        .expect("served after the check");
    assert_eq!(&response.body[..], b"slow commit");
    assert_eq!(
        client
            .client()
            .cached_connection_id(server.local_addr())
            .await,
        Some(before),
        "the slow peer kept its connection"
    );
}

/// Records every call it is told of; its clock moves 250 µs per reading.
#[derive(Debug, Default)]
struct Recorder {
    calls: std::sync::Mutex<Vec<(Opcode, crate::CallOutcome, Duration)>>,
    readings: std::sync::atomic::AtomicU64,
}

impl crate::CallObserver for Recorder {
    fn now_us(&self) -> u64 {
        self.readings.fetch_add(250, Ordering::SeqCst)
    }

    fn finished(&self, opcode: Opcode, outcome: crate::CallOutcome, elapsed: Duration) {
        self.calls
            .lock()
            .expect("not poisoned")
            .push((opcode, outcome, elapsed));
    }
}

#[tokio::test]
async fn the_observer_is_told_each_calls_opcode_outcome_and_time() {
    let server = node(secret(1), refusing_create(echo_router()));
    let client = node(secret(1), Router::new());
    let recorder = Arc::new(Recorder::default());
    client.observe_calls(recorder.clone());
    client
        .call(server.local_addr(), Lane::Control, request(b"x"))
        .await
        .expect("answered");
    client
        .call(
            server.local_addr(),
            Lane::Control,
            Request::new(Opcode::CREATE_TOPIC, &b"t"[..]),
        )
        .await
        .expect_err("conflict");
    let unreachable = SocketAddr::from(([127, 0, 0, 1], 9));
    client
        .call_with_timeout(
            unreachable,
            Lane::Control,
            request(b"y"),
            Duration::from_millis(200),
        )
        .await
        .expect_err("nothing listens there");
    let calls = recorder.calls.lock().expect("not poisoned").clone();
    let seen: Vec<_> = calls
        .iter()
        .map(|(opcode, outcome, _)| (opcode.label(), outcome.label()))
        .collect();
    assert_eq!(seen[0], ("get_topic", "ok"));
    assert_eq!(seen[1], ("create_topic", "rejected"));
    assert_eq!(seen[2].0, "get_topic");
    assert!(
        ["timeout", "error"].contains(&seen[2].1),
        "a call to a closed port ends as {}",
        seen[2].1
    );
    assert_eq!(seen.len(), 3);
    // One clock reading at the start and one at the end of each call.
    for (_, _, elapsed) in calls {
        assert_eq!(elapsed, Duration::from_micros(250));
    }
}
