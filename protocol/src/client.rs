//! The calling side: one connection per peer, a pool of authenticated
//! streams per lane on it, request ids, timeouts and cancellation.
//!
//! A call encodes its frame first (so an oversize request is refused with
//! nothing written), takes a stream of its lane round-robin, registers its
//! request id, queues the frame for the stream's writer and waits for the
//! stream's reader to hand it the matching response. If the call's future is
//! dropped (a timeout, a caller that gave up), a guard unregisters it and
//! queues a cancel frame behind the request, so the peer stops the handler.
//!
//! A failed dial makes the next dials of that peer wait (`backoff`); a call
//! that runs out its deadline starts a liveness check of its connection, and
//! so does a call made with a liveness threshold that is still unanswered at
//! it (a remote commit that turned hung).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::auth::{ClusterAuth, EXPORTER_BYTES, client_handshake};
use crate::backoff::DialBackoff;
use crate::client_stream::{
    ClientStream, PendingGuard, StreamState, lock, read_answers, refine_auth_error,
};
use crate::codec::DecodeError;
use crate::frame::{Frame, FrameError, Request, RequestId, Response, RpcError};
use crate::handshake_failure::{HandshakeFailure, TlsRefusal};
use crate::lane::Lane;
use crate::limits::{
    LIVENESS_PING_INTERVAL, LIVENESS_PING_TIMEOUT, PEERS_MAX, STREAM_OUTGOING_FRAMES_MAX,
    STREAM_REQUESTS_IN_FLIGHT_MAX,
};
use crate::opcode::Opcode;
use crate::server::exporter;
use crate::stream::{Outgoing, WriteBudget, codes, write_loop};
use crate::tls::SERVER_NAME;

/// Why a call did not get a successful answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The request is over the frame limit; nothing was sent.
    #[error("request refused before sending: {0}")]
    RequestTooLarge(FrameError),
    /// The peer answered with a typed error.
    #[error("peer answered {0}")]
    Rejected(RpcError),
    /// No answer within the call's timeout; the request was cancelled.
    #[error("no answer within {after:?}")]
    Timeout {
        /// The timeout that ran out.
        after: Duration,
    },
    /// The peer could not be reached.
    #[error("could not connect to {peer}: {reason}")]
    Dial {
        /// The peer.
        peer: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The peer and this node did not authenticate each other: one refused
    /// the other's TLS certificate (with cluster TLS files), or they did not
    /// prove the cluster secret to each other.
    #[error("cluster authentication with {peer} failed: {reason}")]
    Auth {
        /// The peer.
        peer: SocketAddr,
        /// Which side refused and why.
        reason: String,
    },
    /// The connection or stream failed after the request may have been sent:
    /// the peer may or may not have applied it.
    #[error("connection to {peer} lost: {reason}")]
    ConnectionLost {
        /// The peer.
        peer: SocketAddr,
        /// Why.
        reason: String,
    },
    /// A stream was closed for breaking a protocol rule (a frame over the
    /// limit, a malformed frame), by this node or by the peer.
    #[error("stream to {peer} refused: {reason}")]
    StreamRefused {
        /// The peer.
        peer: SocketAddr,
        /// Which rule.
        reason: String,
    },
    /// The peer's successful answer is not the message expected.
    #[error("answer from {peer} unreadable: {error}")]
    MalformedAnswer {
        /// The peer.
        peer: SocketAddr,
        /// What was wrong.
        error: DecodeError,
    },
    /// This node already talks to [`PEERS_MAX`] peers.
    #[error("peer table full ({PEERS_MAX} peers)")]
    TooManyPeers,
}

/// Everything the calling side of a node holds.
#[derive(Debug)]
pub(crate) struct ClientContext {
    pub(crate) endpoint: quinn::Endpoint,
    pub(crate) client_config: quinn::ClientConfig,
    pub(crate) auth: ClusterAuth,
    pub(crate) dial_timeout: Duration,
    pub(crate) auth_timeout: Duration,
    pub(crate) write_budget: WriteBudget,
    peers: Mutex<HashMap<SocketAddr, Arc<Peer>>>,
    next_request_id: AtomicU64,
    liveness_checks: AtomicU64,
}

impl ClientContext {
    pub(crate) fn new(
        endpoint: quinn::Endpoint,
        client_config: quinn::ClientConfig,
        auth: ClusterAuth,
        dial_timeout: Duration,
        auth_timeout: Duration,
        write_budget: WriteBudget,
    ) -> Self {
        Self {
            endpoint,
            client_config,
            auth,
            dial_timeout,
            auth_timeout,
            write_budget,
            peers: Mutex::new(HashMap::new()),
            next_request_id: AtomicU64::new(1),
            liveness_checks: AtomicU64::new(0),
        }
    }

    /// Sends `request` to `peer` on `lane` and waits up to `timeout` for the
    /// answer. A call that runs out its deadline starts a liveness check.
    pub(crate) async fn call(
        self: &Arc<Self>,
        peer: SocketAddr,
        lane: Lane,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, CallError> {
        let outcome = self.call_once(peer, lane, request, timeout).await;
        if matches!(outcome, Err(CallError::Timeout { .. })) {
            self.check_liveness(peer);
        }
        outcome
    }

    /// As [`ClientContext::call`], and while the call is still unanswered
    /// `check_after` into its wait, its peer's connection gets a liveness
    /// check, and another every [`LIVENESS_PING_INTERVAL`] after that (each
    /// subject to the same once-per-interval claim as any other check). A
    /// peer that vanished loses its connection about `check_after` plus the
    /// ping timeout into the call, which then fails with
    /// [`CallError::ConnectionLost`] instead of waiting out its deadline or
    /// the idle timeout; a peer that is merely slow answers the ping and the
    /// call keeps waiting for its answer.
    pub(crate) async fn call_checking_liveness(
        self: &Arc<Self>,
        peer: SocketAddr,
        lane: Lane,
        request: Request,
        timeout: Duration,
        check_after: Duration,
    ) -> Result<Response, CallError> {
        let call = self.call(peer, lane, request, timeout);
        tokio::pin!(call);
        let mut next_check = Instant::now() + check_after;
        loop {
            tokio::select! {
                biased;
                outcome = &mut call => return outcome,
                () = tokio::time::sleep_until(next_check) => {
                    self.check_liveness(peer);
                    next_check += LIVENESS_PING_INTERVAL;
                }
            }
        }
    }

    /// Liveness checks finished so far (answered or not).
    #[cfg(test)]
    pub(crate) fn liveness_checks(&self) -> u64 {
        self.liveness_checks.load(Ordering::SeqCst)
    }

    /// Pings `addr` on the connection the timed-out call used. If the ping
    /// gets no answer in time and not one datagram arrived from the peer
    /// meanwhile, the peer is gone: close the connection so the next call
    /// dials afresh instead of waiting out the idle timeout. A peer that is
    /// merely slow still acknowledges packets, so it keeps its connection.
    fn check_liveness(self: &Arc<Self>, addr: SocketAddr) {
        let Some(peer) = lock(&self.peers).get(&addr).cloned() else {
            return;
        };
        let context = self.clone();
        tokio::spawn(async move {
            let connection = peer.slot.lock().await.connection.clone();
            let Some(connection) = connection else {
                return;
            };
            if connection.connection.close_reason().is_some()
                || !connection.claim_ping(Instant::now())
            {
                return;
            }
            let heard_before = connection.connection.stats().udp_rx.datagrams;
            let ping = Request::new(Opcode::PING, Bytes::new());
            let outcome = context
                .call_once(addr, Lane::Control, ping, LIVENESS_PING_TIMEOUT)
                .await;
            let heard_after = connection.connection.stats().udp_rx.datagrams;
            if matches!(outcome, Err(CallError::Timeout { .. })) && heard_after == heard_before {
                warn!(peer = %addr, "liveness ping unanswered and nothing heard from the peer; closing the connection");
                connection
                    .connection
                    .close(codes::LIVENESS_LOST, b"liveness ping unanswered");
            }
            context.liveness_checks.fetch_add(1, Ordering::SeqCst);
        });
    }

    async fn call_once(
        &self,
        peer: SocketAddr,
        lane: Lane,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, CallError> {
        let request_id = RequestId(self.next_request_id.fetch_add(1, Ordering::Relaxed));
        let opcode = request.opcode;
        let frame = Frame::Request {
            request_id,
            request,
        }
        .encode()
        .map_err(CallError::RequestTooLarge)?;
        let exchange = self.exchange(peer, lane, request_id, opcode, frame);
        match tokio::time::timeout(timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(CallError::Timeout { after: timeout }),
        }
    }

    async fn exchange(
        &self,
        peer: SocketAddr,
        lane: Lane,
        request_id: RequestId,
        opcode: Opcode,
        frame: Bytes,
    ) -> Result<Response, CallError> {
        let stream = self.stream(peer, lane).await?;
        let _permit = stream
            .permits
            .acquire()
            .await
            .map_err(|_| stream.lost("stream closed"))?;
        let (answer_tx, answer_rx) = oneshot::channel();
        stream.register(request_id, answer_tx)?;
        let mut guard = PendingGuard {
            stream: &stream,
            request_id,
            opcode,
            answered: false,
        };
        if stream.outgoing.send(Outgoing::Frame(frame)).await.is_err() {
            return Err(stream
                .failure()
                .unwrap_or_else(|| stream.lost("stream writer stopped")));
        }
        let answer = answer_rx.await;
        guard.answered = true;
        match answer {
            Ok(Ok(Ok(response))) => Ok(response),
            Ok(Ok(Err(error))) => Err(CallError::Rejected(error)),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(stream
                .failure()
                .unwrap_or_else(|| stream.lost("stream dropped the request"))),
        }
    }

    fn peer(&self, addr: SocketAddr) -> Result<Arc<Peer>, CallError> {
        let mut peers = lock(&self.peers);
        if let Some(peer) = peers.get(&addr) {
            return Ok(peer.clone());
        }
        if peers.len() >= PEERS_MAX {
            return Err(CallError::TooManyPeers);
        }
        let peer = Arc::new(Peer {
            addr,
            slot: tokio::sync::Mutex::new(PeerSlot::default()),
        });
        peers.insert(addr, peer.clone());
        Ok(peer)
    }

    /// A live, authenticated stream of `lane` to `addr`. A cached connection
    /// found dead is re-dialled once: no request was sent on it yet. A
    /// connection whose TLS handshake the peer refused after this side
    /// completed it (a client certificate is checked last) counts as a
    /// failed dial, so the next dials back off.
    async fn stream(&self, addr: SocketAddr, lane: Lane) -> Result<Arc<ClientStream>, CallError> {
        let peer = self.peer(addr)?;
        let connection = peer.connection(self).await?;
        match self.stream_on(&peer, &connection, lane).await {
            Err(CallError::ConnectionLost { .. }) => {
                peer.forget(&connection).await;
                let connection = peer.connection(self).await?;
                self.stream_on(&peer, &connection, lane).await
            }
            other => other,
        }
    }

    /// A stream of `lane` on `connection`, which is forgotten with a
    /// backoff if it turns out refused by the peer's TLS.
    async fn stream_on(
        &self,
        peer: &Peer,
        connection: &Arc<PeerConnection>,
        lane: Lane,
    ) -> Result<Arc<ClientStream>, CallError> {
        let outcome = connection.stream(self, lane).await;
        if outcome.is_err() && connection.tls_refusal().is_some() {
            peer.refused(connection).await;
        }
        outcome
    }

    async fn dial(&self, addr: SocketAddr) -> Result<Arc<PeerConnection>, CallError> {
        let dial_error = |reason: String| CallError::Dial { peer: addr, reason };
        let connecting = self
            .endpoint
            .connect_with(self.client_config.clone(), addr, SERVER_NAME)
            .map_err(|error| dial_error(error.to_string()))?;
        let connection = match tokio::time::timeout(self.dial_timeout, connecting).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                return Err(match TlsRefusal::of(&error) {
                    Some(refusal) => {
                        refusal.report(addr, &error);
                        CallError::Auth {
                            peer: addr,
                            reason: refusal.describe(),
                        }
                    }
                    None => dial_error(error.to_string()),
                });
            }
            Err(_) => {
                return Err(dial_error(format!(
                    "no handshake within {:?}",
                    self.dial_timeout
                )));
            }
        };
        let ekm = exporter(&connection).map_err(|error| CallError::Auth {
            peer: addr,
            reason: error.to_string(),
        })?;
        debug!(peer = %addr, "cluster connection established");
        Ok(Arc::new(PeerConnection {
            addr,
            connection,
            ekm,
            lanes: Lane::ALL.map(LanePool::new),
            last_ping: Mutex::new(None),
        }))
    }
}

/// One peer's connection slot; the async lock makes concurrent callers share
/// one dial.
#[derive(Debug)]
struct Peer {
    addr: SocketAddr,
    slot: tokio::sync::Mutex<PeerSlot>,
}

#[derive(Debug, Default)]
struct PeerSlot {
    connection: Option<Arc<PeerConnection>>,
    backoff: DialBackoff,
}

impl Peer {
    async fn connection(&self, context: &ClientContext) -> Result<Arc<PeerConnection>, CallError> {
        let mut slot = self.slot.lock().await;
        if let Some(connection) = slot.connection.as_ref() {
            match connection.connection.close_reason() {
                None => return Ok(connection.clone()),
                Some(reason) => {
                    debug!(peer = %self.addr, %reason, "cluster connection lost; re-dialling");
                }
            }
        }
        if let Err(wait) = slot.backoff.admit(Instant::now()) {
            let reason = format!(
                "the last dial failed; next attempt in {} ms",
                wait.as_millis()
            );
            return Err(CallError::Dial {
                peer: self.addr,
                reason,
            });
        }
        match context.dial(self.addr).await {
            Ok(connection) => {
                slot.backoff.succeeded();
                slot.connection = Some(connection.clone());
                Ok(connection)
            }
            Err(error) => {
                slot.backoff.failed(Instant::now());
                slot.connection = None;
                Err(error)
            }
        }
    }

    /// Forgets `refused`, a connection whose TLS handshake the peer
    /// refused, and backs off the next dial as after a failed one.
    async fn refused(&self, refused: &Arc<PeerConnection>) {
        let mut slot = self.slot.lock().await;
        if slot
            .connection
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, refused))
        {
            slot.connection = None;
            slot.backoff.failed(Instant::now());
        }
    }

    async fn forget(&self, stale: &Arc<PeerConnection>) {
        let mut slot = self.slot.lock().await;
        if slot
            .connection
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, stale))
        {
            slot.connection = None;
        }
    }
}

#[derive(Debug)]
struct PeerConnection {
    addr: SocketAddr,
    connection: quinn::Connection,
    ekm: [u8; EXPORTER_BYTES],
    lanes: [LanePool; 4],
    last_ping: Mutex<Option<Instant>>,
}

#[derive(Debug)]
struct LanePool {
    next: AtomicUsize,
    slots: Box<[tokio::sync::Mutex<Option<Arc<ClientStream>>>]>,
}

impl LanePool {
    fn new(lane: Lane) -> Self {
        let slots = (0..lane.streams())
            .map(|_| tokio::sync::Mutex::new(None))
            .collect();
        Self {
            next: AtomicUsize::new(0),
            slots,
        }
    }
}

impl PeerConnection {
    /// The TLS refusal this connection ended with, if it did.
    fn tls_refusal(&self) -> Option<TlsRefusal> {
        TlsRefusal::of(&self.connection.close_reason()?)
    }

    /// The failure of a stream whose connection ended: a TLS refusal says
    /// so (logged here, on the side that was refused), anything else is a
    /// lost connection.
    fn ended(&self, reason: String) -> CallError {
        let peer = self.addr;
        match (self.tls_refusal(), self.connection.close_reason()) {
            (Some(refusal), Some(error)) => {
                refusal.report(peer, &error);
                CallError::Auth {
                    peer,
                    reason: refusal.describe(),
                }
            }
            _ => CallError::ConnectionLost { peer, reason },
        }
    }

    /// Whether a liveness ping may start at `now` (at most one per
    /// [`LIVENESS_PING_INTERVAL`]); if so, records it.
    fn claim_ping(&self, now: Instant) -> bool {
        let mut last = lock(&self.last_ping);
        if last.is_some_and(|at| now.duration_since(at) < LIVENESS_PING_INTERVAL) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// The next stream of `lane`, round-robin, opened (and authenticated) on
    /// first use and replaced once it has failed.
    async fn stream(
        &self,
        context: &ClientContext,
        lane: Lane,
    ) -> Result<Arc<ClientStream>, CallError> {
        let pool = &self.lanes[lane.index()];
        let index = pool.next.fetch_add(1, Ordering::Relaxed) % pool.slots.len();
        let mut slot = pool.slots[index].lock().await;
        if let Some(stream) = slot.as_ref()
            && stream.failure().is_none()
        {
            return Ok(stream.clone());
        }
        let stream = self.open_stream(context, lane).await?;
        *slot = Some(stream.clone());
        Ok(stream)
    }

    async fn open_stream(
        &self,
        context: &ClientContext,
        lane: Lane,
    ) -> Result<Arc<ClientStream>, CallError> {
        let peer = self.addr;
        let (mut send, mut recv) = self
            .connection
            .open_bi()
            .await
            .map_err(|error| self.ended(error.to_string()))?;
        let handshake = client_handshake(
            &context.auth,
            &self.ekm,
            &mut send,
            &mut recv,
            context.auth_timeout,
        );
        if let Err(error) = handshake.await {
            let error = refine_auth_error(error);
            let _ = send.reset(codes::AUTH_FAILED);
            let _ = recv.stop(codes::AUTH_FAILED);
            let reason = error.to_string();
            if self.tls_refusal().is_some() {
                return Err(self.ended(reason));
            }
            let failure = HandshakeFailure::of(&error, self.connection.close_reason().is_some());
            failure.report(peer, Some(lane), &error);
            return Err(match failure {
                HandshakeFailure::ConnectionLost => CallError::ConnectionLost { peer, reason },
                _ => CallError::Auth { peer, reason },
            });
        }
        let (outgoing, queue) = mpsc::channel(STREAM_OUTGOING_FRAMES_MAX);
        let stream = Arc::new(ClientStream {
            peer,
            outgoing: outgoing.clone(),
            permits: Semaphore::new(STREAM_REQUESTS_IN_FLIGHT_MAX),
            state: Mutex::new(StreamState::default()),
        });
        let writer_stream = stream.clone();
        let budget = context.write_budget;
        tokio::spawn(async move {
            if let Some(reason) = write_loop(send, queue, budget).await {
                writer_stream.fail(CallError::ConnectionLost { peer, reason });
            }
        });
        tokio::spawn(read_answers(stream.clone(), recv, outgoing));
        Ok(stream)
    }
}

#[cfg(test)]
impl ClientContext {
    /// The connection cached for `addr`, if one is.
    pub(crate) async fn cached_connection(&self, addr: SocketAddr) -> Option<quinn::Connection> {
        let peer = lock(&self.peers).get(&addr).cloned()?;
        let slot = peer.slot.lock().await;
        slot.connection
            .as_ref()
            .map(|connection| connection.connection.clone())
    }

    /// The stable id of the connection cached for `addr`, if one is.
    pub(crate) async fn cached_connection_id(&self, addr: SocketAddr) -> Option<usize> {
        let peer = lock(&self.peers).get(&addr).cloned()?;
        let slot = peer.slot.lock().await;
        slot.connection
            .as_ref()
            .map(|connection| connection.connection.stable_id())
    }

    /// Dials `addr` on a fresh connection and authenticates one stream, for
    /// tests that write raw bytes. The connection lives as long as the streams.
    pub(crate) async fn open_raw_stream(
        &self,
        addr: SocketAddr,
    ) -> (quinn::SendStream, quinn::RecvStream) {
        let connection = self.dial(addr).await.expect("dial");
        let (mut send, mut recv) = connection
            .connection
            .open_bi()
            .await
            .expect("open a stream");
        client_handshake(
            &self.auth,
            &connection.ekm,
            &mut send,
            &mut recv,
            self.auth_timeout,
        )
        .await
        .expect("authenticate");
        (send, recv)
    }
}
