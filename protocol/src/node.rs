//! A node's cluster endpoint: one UDP socket, serving and calling.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use quinn::{ClientConfig, Endpoint, EndpointConfig, ServerConfig, TransportConfig, VarInt};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::auth::ClusterAuth;
use crate::client::{CallError, ClientContext};
use crate::cluster_tls::ClusterTls;
use crate::codec::{Message, decode_message, encode_message};
use crate::frame::{Request, Response};
use crate::handshake_failure::TlsRefusal;
use crate::lane::Lane;
use crate::limits::{
    AUTH_TIMEOUT_DEFAULT, CALL_TIMEOUT_DEFAULT, CONNECTION_STREAMS_MAX, CONNECTIONS_INCOMING_MAX,
    DIAL_TIMEOUT_DEFAULT, IDLE_TIMEOUT, KEEP_ALIVE_INTERVAL, WRITE_TIMEOUT_BASE,
    WRITE_TIMEOUT_PER_CHUNK,
};
use crate::observe::{CallObserver, CallOutcome};
use crate::opcode::Opcode;
use crate::server::{Router, ServerContext, serve_connection};
use crate::stream::{WriteBudget, codes};
use crate::tls::{
    TlsSetupError, client_crypto, connection_id_generator, install_ring_provider, reset_key,
    server_crypto,
};

/// How a node's endpoint is set up.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// UDP address to listen on (port 0 picks a free one).
    pub bind_addr: SocketAddr,
    /// How streams authenticate. No default: the caller chooses.
    pub auth: ClusterAuth,
    /// Mutual TLS with the cluster's CA, on top of `auth`; `None` (the
    /// default) shows a self-signed certificate and checks none (`tls`
    /// module docs).
    pub tls: Option<ClusterTls>,
    /// Timeout of [`Node::call`].
    pub call_timeout: Duration,
    /// Longest a QUIC dial may take.
    pub dial_timeout: Duration,
    /// Longest a stream's hello exchange may take.
    pub auth_timeout: Duration,
    /// Time a stream's writer has for any frame, before the size allowance.
    pub write_timeout_base: Duration,
    /// Extra write time per 256 KiB of frame.
    pub write_timeout_per_chunk: Duration,
}

impl NodeConfig {
    /// A configuration with the spec's default timeouts.
    pub fn new(bind_addr: SocketAddr, auth: ClusterAuth) -> Self {
        Self {
            bind_addr,
            auth,
            tls: None,
            call_timeout: CALL_TIMEOUT_DEFAULT,
            dial_timeout: DIAL_TIMEOUT_DEFAULT,
            auth_timeout: AUTH_TIMEOUT_DEFAULT,
            write_timeout_base: WRITE_TIMEOUT_BASE,
            write_timeout_per_chunk: WRITE_TIMEOUT_PER_CHUNK,
        }
    }
}

/// Why a node's endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The TLS or QUIC configuration could not be built.
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
    /// The UDP socket could not be bound.
    #[error("cannot bind the cluster socket: {0}")]
    Bind(#[from] std::io::Error),
}

/// A node's cluster endpoint: serves its [`Router`] and calls peers.
///
/// Dropping it closes the endpoint; [`Node::shutdown`] also waits until the
/// peers were told.
#[derive(Debug)]
pub struct Node {
    endpoint: Endpoint,
    client: Arc<ClientContext>,
    accept_task: JoinHandle<()>,
    local_addr: SocketAddr,
    call_timeout: Duration,
    /// Told of every call, once the node hands one over.
    observer: OnceLock<Arc<dyn CallObserver>>,
}

fn transport_config() -> Arc<TransportConfig> {
    let mut transport = TransportConfig::default();
    transport.max_concurrent_bidi_streams(VarInt::from_u32(CONNECTION_STREAMS_MAX));
    transport.max_concurrent_uni_streams(VarInt::from_u32(0));
    transport.keep_alive_interval(Some(KEEP_ALIVE_INTERVAL));
    // IDLE_TIMEOUT is 10 s, far inside the VarInt range: the conversion holds.
    transport.max_idle_timeout(IDLE_TIMEOUT.try_into().ok());
    Arc::new(transport)
}

impl Node {
    /// Binds the endpoint and starts serving `router`.
    ///
    /// Installs the `ring` rustls provider if the process has none. Must be
    /// called inside a tokio runtime.
    ///
    /// # Errors
    /// [`NodeError`] if the socket cannot be bound or TLS cannot be set up.
    pub fn bind(config: NodeConfig, router: Router) -> Result<Node, NodeError> {
        install_ring_provider();
        if matches!(config.auth, ClusterAuth::InsecureDevOnly) {
            warn!(
                bind_addr = %config.bind_addr,
                "cluster plane runs WITHOUT authentication (insecure dev mode): anyone who reaches this port is served"
            );
        }
        let tls = config.tls.as_ref();
        let transport = transport_config();
        let mut server_config = ServerConfig::with_crypto(Arc::new(server_crypto(tls)?));
        server_config.transport_config(transport.clone());
        let mut client_config = ClientConfig::new(Arc::new(client_crypto(tls)?));
        client_config.transport_config(transport);
        let socket = std::net::UdpSocket::bind(config.bind_addr)?;
        let mut endpoint_config = EndpointConfig::new(reset_key(&config.auth));
        endpoint_config.cid_generator(connection_id_generator(&config.auth));
        let endpoint = Endpoint::new(
            endpoint_config,
            Some(server_config),
            socket,
            Arc::new(quinn::TokioRuntime),
        )?;
        let local_addr = endpoint.local_addr()?;
        let write_budget = WriteBudget {
            base: config.write_timeout_base,
            per_chunk: config.write_timeout_per_chunk,
        };
        let server = Arc::new(ServerContext {
            router,
            auth: config.auth.clone(),
            auth_timeout: config.auth_timeout,
            write_budget,
        });
        let accept_task = tokio::spawn(accept_loop(endpoint.clone(), server));
        let client = Arc::new(ClientContext::new(
            endpoint.clone(),
            client_config,
            config.auth,
            config.dial_timeout,
            config.auth_timeout,
            write_budget,
        ));
        debug!(%local_addr, mutual_tls = tls.is_some(), "cluster endpoint listening");
        Ok(Node {
            endpoint,
            client,
            accept_task,
            local_addr,
            call_timeout: config.call_timeout,
            observer: OnceLock::new(),
        })
    }

    /// The address peers reach this node at.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Sends `request` to `peer` on `lane` and waits for the answer, up to the
    /// configured call timeout.
    ///
    /// # Errors
    /// [`CallError`]: the peer's typed error answer, or why no answer came.
    pub async fn call(
        &self,
        peer: SocketAddr,
        lane: Lane,
        request: Request,
    ) -> Result<Response, CallError> {
        let opcode = request.opcode;
        let call = self.client.call(peer, lane, request, self.call_timeout);
        self.observed(opcode, call).await
    }

    /// Sends message `Q` as `opcode` and decodes the answer as message `A`,
    /// within the configured call timeout.
    ///
    /// # Errors
    /// As [`Node::call`], and [`CallError::MalformedAnswer`] if the answer
    /// is not an `A` this build can read.
    pub async fn call_message<Q: Message, A: Message>(
        &self,
        peer: SocketAddr,
        lane: Lane,
        opcode: Opcode,
        message: &Q,
    ) -> Result<A, CallError> {
        let request = Request::new(opcode, encode_message(message));
        let response = self.call(peer, lane, request).await?;
        decode_message(response.body).map_err(|error| CallError::MalformedAnswer { peer, error })
    }

    /// [`Node::call`] with its own timeout (dial and handshake included).
    ///
    /// # Errors
    /// As [`Node::call`].
    pub async fn call_with_timeout(
        &self,
        peer: SocketAddr,
        lane: Lane,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, CallError> {
        let opcode = request.opcode;
        self.observed(opcode, self.client.call(peer, lane, request, timeout))
            .await
    }

    /// [`Node::call_with_timeout`] that does not wait out a vanished peer:
    /// while the call is unanswered `check_after` into its wait, the peer's
    /// connection gets a liveness check (a ping; the connection is closed
    /// if no pong comes within 1 s and not one datagram arrived from the
    /// peer meanwhile), and again every second while it waits. So a call to
    /// a peer that died fails with [`CallError::ConnectionLost`] about
    /// `check_after` + 1 s into it, while a call to a peer that is only slow
    /// (it still acknowledges packets) keeps waiting for its answer.
    ///
    /// # Errors
    /// As [`Node::call`].
    pub async fn call_checking_liveness(
        &self,
        peer: SocketAddr,
        lane: Lane,
        request: Request,
        timeout: Duration,
        check_after: Duration,
    ) -> Result<Response, CallError> {
        let opcode = request.opcode;
        let call = self
            .client
            .call_checking_liveness(peer, lane, request, timeout, check_after);
        self.observed(opcode, call).await
    }

    /// Tells `observer` of every call this node makes from now on (its
    /// opcode, how it ended, how long it took). A node has one observer: a
    /// second is ignored.
    pub fn observe_calls(&self, observer: Arc<dyn CallObserver>) {
        let _ = self.observer.set(observer);
    }

    /// Runs `call`, telling the observer (if any) how it went.
    async fn observed(
        &self,
        opcode: Opcode,
        call: impl Future<Output = Result<Response, CallError>>,
    ) -> Result<Response, CallError> {
        let Some(observer) = self.observer.get() else {
            return call.await;
        };
        let started_us = observer.now_us();
        let result = call.await;
        let elapsed = Duration::from_micros(observer.now_us().saturating_sub(started_us));
        observer.finished(opcode, CallOutcome::of(&result), elapsed);
        result
    }

    /// Connections open on this endpoint, dialled and accepted.
    pub fn open_connections(&self) -> usize {
        self.endpoint.open_connections()
    }

    #[cfg(test)]
    pub(crate) fn client(&self) -> &ClientContext {
        &self.client
    }

    /// Closes every connection and waits until peers were told.
    pub async fn shutdown(self) {
        self.close();
        self.endpoint.wait_idle().await;
    }

    fn close(&self) {
        self.accept_task.abort();
        self.endpoint.close(codes::SHUTDOWN, b"node shutting down");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.close();
    }
}

async fn accept_loop(endpoint: Endpoint, server: Arc<ServerContext>) {
    while let Some(incoming) = endpoint.accept().await {
        if endpoint.open_connections() >= CONNECTIONS_INCOMING_MAX {
            debug!(peer = %incoming.remote_address(), "cluster connection refused: too many connections");
            incoming.refuse();
            continue;
        }
        let server = server.clone();
        tokio::spawn(async move {
            let peer = incoming.remote_address();
            match incoming.await {
                Ok(connection) => serve_connection(server, connection).await,
                Err(error) => match TlsRefusal::of(&error) {
                    Some(refusal) => refusal.report(peer, &error),
                    None => debug!(%peer, %error, "cluster handshake failed"),
                },
            }
        });
    }
}
