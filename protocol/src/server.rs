//! The serving side: a [`Router`] from opcodes to [`Handler`]s, each under a
//! named [`OperationLimit`], and the per-connection and per-stream loops that
//! authenticate streams, read requests, run handlers and write answers.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use quinn::{RecvStream, SendStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::AbortHandle;
use tracing::{debug, warn};

use crate::auth::{AuthError, ClusterAuth, EXPORTER_BYTES, EXPORTER_LABEL, server_handshake};
use crate::codec::{Message, decode_message};
use crate::frame::{Frame, FrameKind, MalformedFrame, Request, RequestId, Response, RpcError};
use crate::handshake_failure::HandshakeFailure;
use crate::limits::{
    FRAME_BYTES_MAX, STREAM_OUTGOING_FRAMES_MAX, STREAM_REQUESTS_IN_FLIGHT_MAX, TRANSFER_PERMITS,
    messaging_permits,
};
use crate::opcode::Opcode;
use crate::stream::{Outgoing, WriteBudget, codes, write_loop};
use crate::wire::{WireError, read_frame};

/// A request as a handler sees it.
#[derive(Debug, Clone)]
pub struct Inbound {
    /// Address of the peer that sent it.
    pub peer: SocketAddr,
    /// Its id on the peer.
    pub request_id: RequestId,
    /// The request.
    pub request: Request,
}

impl Inbound {
    /// Decodes the request body as message `M`.
    ///
    /// # Errors
    /// `400 malformed request: …` naming what was wrong, ready to return.
    pub fn message<M: Message>(&self) -> Result<M, RpcError> {
        Ok(decode_message(self.request.body.clone())?)
    }
}

/// What a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Response, RpcError>> + Send + 'static>>;

/// Serves one opcode. Implemented for every `Fn(Inbound) -> impl Future`.
///
/// The future is dropped, unfinished, when the requester cancels; a handler
/// must leave nothing half-applied at an await point.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request with a response or a typed error.
    fn handle(&self, inbound: Inbound) -> HandlerFuture;
}

impl<F, Fut> Handler for F
where
    F: Fn(Inbound) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Response, RpcError>> + Send + 'static,
{
    fn handle(&self, inbound: Inbound) -> HandlerFuture {
        Box::pin(self(inbound))
    }
}

/// A named bound on how many requests of a class of operations run at once
/// on this node. Opcodes registered under the same name share the permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationLimit {
    /// Name of the class, as it appears in logs.
    pub name: &'static str,
    /// Requests that may run at once; `None` means exempt.
    pub permits: Option<usize>,
}

impl OperationLimit {
    /// A class with `permits` concurrent requests.
    ///
    /// # Panics
    /// If `permits` is 0: no request could ever run.
    pub const fn new(name: &'static str, permits: usize) -> Self {
        assert!(permits > 0, "an operation limit needs at least one permit");
        Self {
            name,
            permits: Some(permits),
        }
    }

    /// A class without a bound, for operations that mostly wait (long-poll
    /// consumes, which the spec exempts).
    pub const fn exempt(name: &'static str) -> Self {
        Self {
            name,
            permits: None,
        }
    }

    /// The spec's messaging class: produce commits, forwarded consumes and
    /// acks, max(64, 4 × cores) at once.
    pub fn messaging() -> Self {
        Self::new("messaging", messaging_permits())
    }

    /// The spec's transfer class: partition move traffic, 8 at once.
    pub const fn transfer() -> Self {
        Self::new("transfer", TRANSFER_PERMITS)
    }
}

struct Route {
    handler: Arc<dyn Handler>,
    limit: OperationLimit,
    permits: Option<Arc<Semaphore>>,
}

/// Maps opcodes to handlers. An opcode without a route is answered with
/// `400 unsupported rpc operation`.
#[derive(Default)]
pub struct Router {
    routes: HashMap<Opcode, Route>,
    limits: HashMap<&'static str, (OperationLimit, Option<Arc<Semaphore>>)>,
}

impl Router {
    /// A router with no routes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `opcode` with `handler` under `limit`.
    ///
    /// # Panics
    /// If `opcode` already has a route, or `limit`'s name is already used
    /// with another number of permits: both are programmer errors.
    #[must_use]
    pub fn route(mut self, opcode: Opcode, limit: OperationLimit, handler: impl Handler) -> Self {
        let permits = match self.limits.entry(limit.name) {
            Entry::Occupied(entry) => {
                let (known, permits) = entry.get();
                assert_eq!(
                    *known, limit,
                    "operation limit {:?} registered with two sizes",
                    limit.name
                );
                permits.clone()
            }
            Entry::Vacant(entry) => {
                let permits = limit.permits.map(|n| Arc::new(Semaphore::new(n)));
                entry.insert((limit, permits.clone()));
                permits
            }
        };
        let route = Route {
            handler: Arc::new(handler),
            limit,
            permits,
        };
        assert_ne!(
            opcode,
            Opcode::PING,
            "opcode 0 (Ping) is answered by the transport itself"
        );
        let previous = self.routes.insert(opcode, route);
        assert!(previous.is_none(), "opcode {opcode} routed twice");
        self
    }

    async fn dispatch(&self, inbound: Inbound) -> Result<Response, RpcError> {
        let opcode = inbound.request.opcode;
        if opcode == Opcode::PING {
            return Ok(Response::no_content());
        }
        let Some(route) = self.routes.get(&opcode) else {
            return Err(RpcError::unsupported_operation(opcode));
        };
        let _permit = match &route.permits {
            Some(permits) => Some(permits.clone().acquire_owned().await.map_err(|_| {
                RpcError::unavailable(format!("operation class {} is closed", route.limit.name))
            })?),
            None => None,
        };
        route.handler.handle(inbound).await
    }
}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut opcodes: Vec<_> = self.routes.keys().map(|opcode| opcode.0).collect();
        opcodes.sort_unstable();
        f.debug_struct("Router")
            .field("opcodes", &opcodes)
            .finish_non_exhaustive()
    }
}

/// What every served connection needs.
#[derive(Debug)]
pub(crate) struct ServerContext {
    pub(crate) router: Router,
    pub(crate) auth: ClusterAuth,
    pub(crate) auth_timeout: Duration,
    pub(crate) write_budget: WriteBudget,
}

/// Exports the keying material both ends bind their proofs to.
pub(crate) fn exporter(connection: &quinn::Connection) -> Result<[u8; EXPORTER_BYTES], AuthError> {
    let mut ekm = [0_u8; EXPORTER_BYTES];
    connection
        .export_keying_material(&mut ekm, EXPORTER_LABEL, b"")
        .map_err(|_| AuthError::Exporter)?;
    Ok(ekm)
}

/// Accepts streams on one connection until it closes.
pub(crate) async fn serve_connection(context: Arc<ServerContext>, connection: quinn::Connection) {
    let peer = connection.remote_address();
    let ekm = match exporter(&connection) {
        Ok(ekm) => ekm,
        Err(error) => {
            warn!(%peer, %error, "cluster connection refused");
            connection.close(codes::AUTH_FAILED, b"keying material export failed");
            return;
        }
    };
    loop {
        match connection.accept_bi().await {
            Ok((send, recv)) => {
                let connection = connection.clone();
                tokio::spawn(serve_stream(context.clone(), connection, ekm, send, recv));
            }
            Err(error) => {
                debug!(%peer, %error, "cluster connection ended");
                return;
            }
        }
    }
}

type InFlight = Arc<Mutex<HashMap<RequestId, AbortHandle>>>;

fn in_flight_lock(
    in_flight: &InFlight,
) -> std::sync::MutexGuard<'_, HashMap<RequestId, AbortHandle>> {
    // The map holds no invariant a panicking holder could break halfway.
    in_flight.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn serve_stream(
    context: Arc<ServerContext>,
    connection: quinn::Connection,
    ekm: [u8; EXPORTER_BYTES],
    mut send: SendStream,
    mut recv: RecvStream,
) {
    let peer = connection.remote_address();
    let handshake = server_handshake(
        &context.auth,
        &ekm,
        &mut send,
        &mut recv,
        context.auth_timeout,
    );
    if let Err(error) = handshake.await {
        HandshakeFailure::of(&error, connection.close_reason().is_some())
            .report(peer, None, &error);
        let _ = send.reset(codes::AUTH_FAILED);
        let _ = recv.stop(codes::AUTH_FAILED);
        return;
    }
    let (outgoing, queue) = mpsc::channel(STREAM_OUTGOING_FRAMES_MAX);
    let writer = tokio::spawn(write_loop(send, queue, context.write_budget));
    let in_flight = InFlight::default();
    let stream = StreamServer {
        context,
        peer,
        outgoing,
        in_flight: in_flight.clone(),
    };
    if let Err(code) = stream.read_requests(&mut recv).await {
        let handles: Vec<_> = in_flight_lock(&in_flight)
            .drain()
            .map(|(_, handle)| handle)
            .collect();
        for handle in handles {
            handle.abort();
        }
        let _ = recv.stop(code);
        let _ = stream.outgoing.send(Outgoing::Reset(code)).await;
    }
    drop(stream);
    if let Ok(Some(error)) = writer.await {
        debug!(%peer, %error, "cluster stream write failed");
    }
}

struct StreamServer {
    context: Arc<ServerContext>,
    peer: SocketAddr,
    outgoing: mpsc::Sender<Outgoing>,
    in_flight: InFlight,
}

impl StreamServer {
    /// Reads frames until the peer finishes the stream (`Ok`) or breaks a
    /// rule (`Err` with the code to reset the stream with).
    async fn read_requests(&self, recv: &mut RecvStream) -> Result<(), quinn::VarInt> {
        let permits = Arc::new(Semaphore::new(STREAM_REQUESTS_IN_FLIGHT_MAX));
        loop {
            let bytes = match read_frame(recv, FRAME_BYTES_MAX).await {
                Ok(Some(bytes)) => bytes,
                Ok(None) => return Ok(()),
                Err(WireError::Frame(error)) => {
                    warn!(peer = %self.peer, %error, "cluster stream refused: frame over the limit");
                    return Err(codes::FRAME_TOO_LARGE);
                }
                Err(error) => {
                    debug!(peer = %self.peer, %error, "cluster stream ended");
                    return Err(codes::SHUTDOWN);
                }
            };
            self.on_frame(Frame::decode(bytes), &permits).await?;
        }
    }

    async fn on_frame(
        &self,
        frame: Result<Frame, MalformedFrame>,
        permits: &Arc<Semaphore>,
    ) -> Result<(), quinn::VarInt> {
        match frame {
            Ok(Frame::Request {
                request_id,
                request,
            }) => {
                // Only requests take a permit: a cancel must always be read,
                // or a stream full of hung requests could never be unblocked.
                // The client holds the same limit, so this wait is short: it
                // covers handlers whose cancel was read but not yet dropped.
                let permit = permits
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| codes::SHUTDOWN)?;
                self.start(request_id, request, permit)
            }
            Ok(Frame::Cancel { request_id, opcode }) => {
                let handle = in_flight_lock(&self.in_flight).remove(&request_id);
                if let Some(handle) = handle {
                    debug!(peer = %self.peer, %request_id, %opcode, "request cancelled by its sender");
                    handle.abort();
                }
                Ok(())
            }
            Ok(Frame::Response { request_id, .. }) => {
                warn!(peer = %self.peer, %request_id, "cluster stream refused: a client sent a response frame");
                Err(codes::PROTOCOL_VIOLATION)
            }
            Err(MalformedFrame {
                header: Some(header),
                error,
            }) if header.kind == FrameKind::Request => {
                // The request id is known: answer it plainly and keep the stream.
                let outcome = Err(RpcError::bad_request(format!("malformed frame: {error}")));
                let frame = response_frame(header.request_id, header.opcode, outcome);
                self.outgoing
                    .send(Outgoing::Frame(frame))
                    .await
                    .map_err(|_| codes::SHUTDOWN)
            }
            Err(error) => {
                warn!(peer = %self.peer, %error, "cluster stream refused: unreadable frame");
                Err(codes::PROTOCOL_VIOLATION)
            }
        }
    }

    fn start(
        &self,
        request_id: RequestId,
        request: Request,
        permit: OwnedSemaphorePermit,
    ) -> Result<(), quinn::VarInt> {
        let opcode = request.opcode;
        let inbound = Inbound {
            peer: self.peer,
            request_id,
            request,
        };
        let context = self.context.clone();
        // Held across spawn and insert, so a fast handler cannot remove its
        // entry before it exists.
        let mut in_flight = in_flight_lock(&self.in_flight);
        if in_flight.contains_key(&request_id) {
            warn!(peer = %self.peer, %request_id, "cluster stream refused: request id reused while in flight");
            return Err(codes::PROTOCOL_VIOLATION);
        }
        let mut guard = HandlerGuard {
            in_flight: self.in_flight.clone(),
            outgoing: self.outgoing.clone(),
            request_id,
            opcode,
            answered: false,
        };
        let task = tokio::spawn(async move {
            let _permit = permit;
            let outcome = context.router.dispatch(inbound).await;
            guard.answered = true;
            let frame = response_frame(request_id, opcode, outcome);
            let _ = guard.outgoing.send(Outgoing::Frame(frame)).await;
        });
        in_flight.insert(request_id, task.abort_handle());
        Ok(())
    }
}

/// Removes a handler's entry when its task ends, however it ends, and
/// answers `500` if the handler panicked so the requester does not wait out
/// its timeout. A cancelled handler is not answered: nobody waits.
struct HandlerGuard {
    in_flight: InFlight,
    outgoing: mpsc::Sender<Outgoing>,
    request_id: RequestId,
    opcode: Opcode,
    answered: bool,
}

impl Drop for HandlerGuard {
    fn drop(&mut self) {
        in_flight_lock(&self.in_flight).remove(&self.request_id);
        if !self.answered && std::thread::panicking() {
            let outcome = Err(RpcError::internal(format!(
                "handler for {} panicked",
                self.opcode
            )));
            let _ = self.outgoing.try_send(Outgoing::Frame(response_frame(
                self.request_id,
                self.opcode,
                outcome,
            )));
        }
    }
}

/// Longest error message sent; longer ones are cut (at a char boundary).
const ERROR_MESSAGE_BYTES_MAX: usize = 4096;

/// Encodes an answer. An answer over the frame limit is never sent: the
/// requester gets a `500` saying so instead.
fn response_frame(
    request_id: RequestId,
    opcode: Opcode,
    outcome: Result<Response, RpcError>,
) -> Bytes {
    let outcome = outcome.map_err(shorten);
    let frame = Frame::Response {
        request_id,
        opcode,
        outcome,
    };
    match frame.encode() {
        Ok(bytes) => bytes,
        Err(error) => {
            warn!(%request_id, %opcode, %error, "response refused before sending");
            let outcome = Err(RpcError::internal(format!("response refused: {error}")));
            Frame::Response {
                request_id,
                opcode,
                outcome,
            }
            .encode()
            .expect("a short error answer is far under the frame limit")
        }
    }
}

fn shorten(mut error: RpcError) -> RpcError {
    if error.message.len() > ERROR_MESSAGE_BYTES_MAX {
        let mut end = ERROR_MESSAGE_BYTES_MAX;
        while !error.message.is_char_boundary(end) {
            end -= 1;
        }
        error.message.truncate(end);
    }
    error
}
