//! A data node's node-to-node RPC: one cluster transport for the bridge's
//! calls to the control nodes, the commits this node sends to partitions
//! other data nodes own, and the operations it serves to them.
//!
//! The transport is bound (with its router) before the data node starts,
//! because the bridge needs it to register and catch up first; services
//! whose state the data node builds are therefore routed first and attached
//! once it runs ([`Peers::attach`]), answering `503` (retried by the
//! sender) until then. Every served operation is routed in
//! [`rpc_router`], the one place a new one plugs in.

use std::net::SocketAddr;
use std::sync::Arc;

use narad_clock::Clock;
use narad_dataplane::dispatch::CommitTarget;
use narad_dataplane::forward::tokens::TokenInbox;
use narad_dataplane::forward::{ForwardService, Forwarder};
use narad_dataplane::metadata::MetadataReplica;
use narad_dataplane::metrics::ClusterCallMetrics;
use narad_dataplane::moves::{QuicLinks, TransferService};
use narad_dataplane::node::DataNode;
use narad_dataplane::remote::{AddressTable, CommitService, OwnerAddresses, RemoteCommitTarget};
use narad_dataplane::remote_children::RemoteCheckService;
use narad_dataplane::status::NodeStatusService;
use narad_protocol::{ClusterAuth, ClusterTls, Node, NodeConfig, NodeError, Router};

/// The services this node serves to other nodes, routed before the data
/// node exists.
#[derive(Debug)]
struct Served {
    /// `CommitProduceBatch` (opcode 11): commits into this node's
    /// partitions.
    commits: Arc<CommitService>,
    /// Consume, replay, settles and partition statistics (opcodes 2, 3, 8,
    /// 18, 19, 32) of this node's partitions for other nodes' clients.
    forward: Arc<ForwardService>,
    /// Delivery-token notifications (opcode 31) from owners this node's
    /// parked consumes registered with.
    tokens: Arc<TokenInbox>,
    /// The transfer calls of partition moves away from this node (opcodes
    /// 22, 23, 24, 26, 27).
    transfer: Arc<TransferService>,
    /// This node's report of itself (opcode 33), for other nodes'
    /// detailed cluster listings.
    status: Arc<NodeStatusService>,
    /// Checks of a remote child's target from this node (opcode 34), for
    /// another node's resume.
    remote_checks: Arc<RemoteCheckService>,
}

/// The operations this data node serves to other nodes.
fn rpc_router(served: &Served) -> Router {
    let router = served.commits.route(Router::new());
    let router = served.forward.route(router);
    let router = served.transfer.route(router);
    let router = served.tokens.route(router);
    let router = served.remote_checks.route(router);
    served.status.route(router)
}

/// The cluster transport of a data node and what it serves.
#[derive(Debug)]
pub(crate) struct Peers {
    transport: Arc<Node>,
    served: Served,
    clock: Arc<dyn Clock>,
}

impl Peers {
    /// Binds the cluster socket at `addr`, authenticated by `auth` (and
    /// `tls`, mutual TLS with the cluster's CA) as the control nodes' is,
    /// serving the routes of [`rpc_router`]. `clock` is
    /// the node's: its remote commits, token inbox and forwarder run on it,
    /// and the data node attached later must run on it too.
    ///
    /// # Errors
    /// The socket could not be bound.
    pub(crate) fn bind(
        addr: SocketAddr,
        auth: ClusterAuth,
        tls: Option<ClusterTls>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, NodeError> {
        let served = Served {
            commits: CommitService::new(),
            forward: ForwardService::new(),
            tokens: TokenInbox::new(Arc::clone(&clock)),
            transfer: TransferService::new(),
            status: NodeStatusService::new(),
            remote_checks: RemoteCheckService::new(),
        };
        let mut config = NodeConfig::new(addr, auth);
        config.tls = tls;
        let transport = Arc::new(Node::bind(config, rpc_router(&served))?);
        served.forward.attach_transport(&transport);
        Ok(Self {
            transport,
            served,
            clock,
        })
    }

    /// The cluster transport.
    pub(crate) fn transport(&self) -> &Arc<Node> {
        &self.transport
    }

    /// The node's clock, given to [`Peers::bind`].
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// How this node's dispatcher commits to partitions other nodes own:
    /// over this transport, to the addresses `addresses` knows, on the
    /// current tokio runtime and the node's clock.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub(crate) fn remote_commit_target(
        &self,
        addresses: &Arc<AddressTable>,
    ) -> Arc<dyn CommitTarget> {
        Arc::new(RemoteCommitTarget::new(
            Arc::clone(&self.transport),
            Arc::clone(addresses) as Arc<dyn OwnerAddresses>,
            tokio::runtime::Handle::current(),
            Arc::clone(&self.clock),
        ))
    }

    /// Starts serving the routed operations on `node`'s state (`replica` is
    /// the node's metadata replica), and lets its API forward consumes and
    /// settles of partitions other nodes own to the addresses `addresses`
    /// knows.
    ///
    /// # Panics
    /// If called twice.
    pub(crate) fn attach(
        &self,
        node: &DataNode,
        replica: Arc<MetadataReplica>,
        addresses: &Arc<AddressTable>,
    ) {
        self.served.forward.attach(
            Arc::clone(node.consume()),
            Arc::clone(node.logs()),
            Arc::clone(&replica),
            Arc::clone(node.fanout()),
        );
        let forwarder = Forwarder::new(
            Arc::clone(&self.transport),
            Arc::clone(addresses) as Arc<dyn OwnerAddresses>,
            Arc::clone(&replica),
            Arc::clone(&self.clock),
        );
        forwarder.use_tokens(Arc::clone(&self.served.tokens));
        if node.api().forwarder.set(forwarder).is_err() {
            tracing::warn!("the API had a forwarder already; this one is not used");
        }
        self.served
            .commits
            .attach(Arc::clone(node.combiners()), Arc::clone(&replica));
        self.served.transfer.attach(Arc::clone(node.move_source()));
        node.start_moves(Arc::new(QuicLinks::new(
            Arc::clone(&self.transport),
            Arc::clone(addresses) as Arc<dyn OwnerAddresses>,
        )));
        self.served.status.attach(Arc::clone(&node.api().status));
        self.served
            .remote_checks
            .attach(replica, node.remote_probe());
        self.transport
            .observe_calls(Arc::new(ClusterCallMetrics::new(
                Arc::clone(&node.api().metrics),
                Arc::clone(&self.clock),
            )));
    }

    /// Closes the transport once nothing else holds it (the bridge and the
    /// remote commit target must be gone); otherwise it closes when the
    /// last holder drops it.
    pub(crate) async fn shutdown(self) {
        if let Ok(transport) = Arc::try_unwrap(self.transport) {
            transport.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests;
