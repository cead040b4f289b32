use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{FrontPlan, Fronts};

/// Long enough for any step here on a loaded machine.
const CEILING: Duration = Duration::from_secs(10);

fn router() -> Router {
    Router::new()
        .route(
            "/whoami",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                let thread = std::thread::current();
                format!("{} {peer}", thread.name().unwrap_or("unnamed"))
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "done"
            }),
        )
        .route("/never", get(std::future::pending::<&'static str>))
}

struct Server {
    listener: TcpListener,
    fronts: Fronts,
    drain: watch::Sender<bool>,
    abort: watch::Sender<bool>,
}

async fn server(count: usize) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let (drain, draining) = watch::channel(false);
    let (abort, aborting) = watch::channel(false);
    let plan = FrontPlan {
        count,
        local: listener.local_addr().expect("addr"),
        draining,
        abort: aborting,
    };
    let fronts = Fronts::start(plan, router()).expect("fronts start");
    Server {
        listener,
        fronts,
        drain,
        abort,
    }
}

impl Server {
    /// Connects a client and hands the accepted end to a front.
    async fn connect(&self) -> TcpStream {
        let client = TcpStream::connect(self.listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (accepted, peer) = self.listener.accept().await.expect("accept");
        assert!(
            self.fronts.hand_off(accepted, peer).await,
            "a front took it"
        );
        client
    }

    /// Sends `GET path` on a new connection and starts the drain while the
    /// request is in flight on its front.
    async fn drain_during(&self, path: &'static str) -> JoinHandle<Option<(u16, String)>> {
        let mut client = self.connect().await;
        let answer = tokio::spawn(async move { get_on(&mut client, path).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.drain.send(true).expect("fronts listen");
        answer
    }
}

/// What the client of [`Server::drain_during`] got.
async fn client_saw(answer: JoinHandle<Option<(u16, String)>>) -> Option<(u16, String)> {
    tokio::time::timeout(CEILING, answer)
        .await
        .expect("the client saw an answer or the end in time")
        .expect("client task")
}

/// Sends `GET path` and reads the answer's status code and body; `None`
/// when the server closed the connection first.
async fn get_on(client: &mut TcpStream, path: &str) -> Option<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
    client.write_all(request.as_bytes()).await.ok()?;
    let mut received = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())
                        .flatten()
                })
                .expect("content-length");
            if body.len() >= length {
                let status = head.split(' ').nth(1)?.parse().ok()?;
                return Some((status, body[..length].to_owned()));
            }
        }
        let read = client.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        received.extend_from_slice(&chunk[..read]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_spread_over_the_fronts_and_keep_the_peer_address() {
    let server = server(2).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(server.connect().await);
    }
    let mut per_front = std::collections::BTreeMap::<String, usize>::new();
    for client in &mut clients {
        let peer = client.local_addr().expect("client addr");
        let (status, body) = tokio::time::timeout(CEILING, get_on(client, "/whoami"))
            .await
            .expect("answered in time")
            .expect("answered");
        assert_eq!(status, 200);
        let (thread, seen_peer) = body.split_once(' ').expect("thread and peer");
        assert_eq!(seen_peer, peer.to_string(), "the handler sees the client");
        *per_front.entry(thread.to_owned()).or_default() += 1;
        // Keep-alive: the same connection answers again on the same front.
        let (_, again) = get_on(client, "/whoami").await.expect("answered again");
        assert_eq!(again, body);
    }
    let expected = [
        ("narad-http-0".to_owned(), 2),
        ("narad-http-1".to_owned(), 2),
    ];
    assert_eq!(per_front, expected.into_iter().collect());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_lets_a_request_in_flight_finish_and_then_the_fronts_end() {
    let mut server = server(2).await;
    let answer = server.drain_during("/slow").await;
    assert_eq!(client_saw(answer).await, Some((200, "done".to_owned())));
    tokio::time::timeout(CEILING, server.fronts.ended())
        .await
        .expect("every front ended once its connection was done");
    server.fronts.join();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_drops_a_request_that_outlives_the_drain() {
    let mut server = server(1).await;
    let answer = server.drain_during("/never").await;
    let waited = tokio::time::timeout(Duration::from_millis(300), server.fronts.ended()).await;
    assert!(waited.is_err(), "a drain waits for the open request");
    server.abort.send(true).expect("fronts listen");
    tokio::time::timeout(CEILING, server.fronts.ended())
        .await
        .expect("the abort ends the front");
    let answer = client_saw(answer).await;
    assert_eq!(answer, None, "the connection was dropped unanswered");
    server.fronts.join();
}
