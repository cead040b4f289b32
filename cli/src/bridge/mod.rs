//! The bridge between the planes: how a data node follows the control
//! plane over the cluster transport, the same way in `narad data` (control
//! nodes on other hosts) and in `narad dev` (one control node in the same
//! process, on loopback):
//!
//! - the metadata stream feeds the data node's replica, which applies each
//!   batch with the metastore's own `apply` (`narad_meta`);
//! - the data node registers as a member and heartbeats, so the controller
//!   assigns partitions to it; [`heartbeat::HeartbeatRecord`] serves how
//!   those heartbeats fare on the data node's `/metrics`;
//! - [`ControlConfirm`] asks the leader, after its barrier, whether a
//!   topic or one incarnation of it is gone;
//! - [`ControlAdmin`] proposes the metastore commands the HTTP API builds
//!   through the leader, and answers once the data node's replica holds
//!   them;
//! - [`LeaderHeard`] records when a leader was last heard, for `/readyz`;
//! - the address book ([`addresses`]) resolves the data nodes' RPC
//!   addresses from their member records, for commits to partitions other
//!   data nodes own.
//!
//! The bridge follows a list of control nodes ([`nodes::ControlNodes`]):
//! every call goes to the current one, and a node that stops answering is
//! left for the next (see [`nodes::after_error`] for which failures move
//! on and which requests are sent again).

mod addresses;
mod admin;
mod confirm;
mod heartbeat;
mod leader;
mod nodes;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use narad_clock::Clock;
use narad_controlplane::controller::constants::HEARTBEAT_INTERVAL;
use narad_controlplane::node::ControlClient;
use narad_controlplane::node::client::ClientError;
use narad_controlplane::node::wire::MemberReport;
use narad_dataplane::metadata::MetadataReplica;
use narad_dataplane::metrics::NodeMetrics;
use narad_dataplane::remote::AddressTable;
use narad_dataplane::topology::NodeId;
use narad_dataplane::topology::member_id;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use addresses::{ADDRESS_REFRESH, AddressBook, MemberAddrs};
pub(crate) use admin::ControlAdmin;
pub(crate) use confirm::ControlConfirm;
use heartbeat::HeartbeatRecord;
use leader::LEADER_POLL_INTERVAL;
pub(crate) use leader::{LEADER_HEARD_WITHIN, LeaderHeard};
use nodes::{ControlNodes, Repeat};

/// How long one metadata fetch waits for news on a quiet cluster.
const FETCH_WAIT_MS: u32 = 1_000;
/// Pause after every control node failed a call, before the next round.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What the feed, the heartbeat, the leader watch and the admin share.
#[derive(Debug)]
pub(crate) struct Bridge {
    client: ControlClient,
    controls: ControlNodes,
    node: NodeId,
    replica: Arc<MetadataReplica>,
    /// The index the data node's replica reached.
    fed: watch::Sender<u64>,
    /// When a control-plane leader was last heard.
    leader: LeaderHeard,
    /// How the registration and heartbeats fared.
    heartbeats: HeartbeatRecord,
    /// The data node's clock.
    clock: Arc<dyn Clock>,
    /// The data nodes' RPC addresses as the member records spell them.
    member_addrs: watch::Sender<MemberAddrs>,
    /// The same, resolved (by [`Bridge::spawn_address_book`]).
    addresses: Arc<AddressTable>,
}

impl Bridge {
    /// A bridge of data node `node` (replica `replica`) to the control
    /// nodes at `controls` (at least one), calling through `client`;
    /// `clock` is the data node's.
    pub(crate) fn new(
        client: ControlClient,
        controls: Vec<SocketAddr>,
        node: NodeId,
        replica: Arc<MetadataReplica>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        let (fed, _) = watch::channel(0);
        let (member_addrs, _) = watch::channel(MemberAddrs::new());
        Arc::new(Self {
            client,
            controls: ControlNodes::new(controls),
            node,
            replica,
            fed,
            leader: LeaderHeard::default(),
            heartbeats: HeartbeatRecord::new(Arc::clone(&clock)),
            clock,
            member_addrs,
            addresses: Arc::new(AddressTable::new()),
        })
    }

    /// The data nodes' RPC addresses, kept current while
    /// [`Bridge::spawn_address_book`] runs.
    pub(crate) fn addresses(&self) -> &Arc<AddressTable> {
        &self.addresses
    }

    /// Serves the heartbeat series from the data node's `metrics`.
    pub(crate) fn serve_heartbeat_metrics(&self, metrics: &Arc<NodeMetrics>) {
        self.heartbeats.attach(metrics);
    }

    /// Whether a control-plane leader was heard within `window`.
    pub(crate) fn leader_heard_within(&self, window: Duration) -> bool {
        self.leader.within(window, self.clock.now_ms())
    }

    /// Calls `call` on the current control node, failing over as
    /// [`ControlNodes::call`] does.
    async fn call<T, F, Fut>(&self, repeat: Repeat, call: F) -> Result<T, ClientError>
    where
        F: Fn(SocketAddr) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        self.controls.call(repeat, call).await
    }

    /// Notes that a call only a leader completes succeeded.
    fn leader_answered(&self) {
        self.leader.note(self.clock.now_ms());
    }

    /// Starts the metadata feed; it runs until aborted.
    pub(crate) fn spawn_feed(self: &Arc<Self>) -> JoinHandle<()> {
        let bridge = Arc::clone(self);
        tokio::spawn(async move { bridge.feed().await })
    }

    async fn feed(&self) {
        loop {
            let after = self.replica.view().applied_index;
            let batch = match self
                .call(Repeat::Safe, |addr| {
                    self.client.fetch_metadata(addr, after, FETCH_WAIT_MS)
                })
                .await
            {
                Ok(batch) => batch,
                Err(error) => {
                    debug!(%error, "metadata fetch failed on every control node tried; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            if let Err(error) = self.replica.apply_batch(&batch) {
                warn!(%error, "metadata batch refused; fetching again from the replica's index");
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            let view = self.replica.view();
            let addrs = addresses::member_rpc_addrs(&view.metastore);
            self.member_addrs.send_if_modified(|current| {
                let changed = *current != addrs;
                *current = addrs;
                changed
            });
            self.fed.send_replace(view.applied_index);
        }
    }

    /// Starts the address book: resolves the members' RPC addresses into
    /// [`Bridge::addresses`] on every change the feed publishes and every
    /// [`ADDRESS_REFRESH`]; runs until aborted.
    pub(crate) fn spawn_address_book(self: &Arc<Self>) -> JoinHandle<()> {
        let mut members = self.member_addrs.subscribe();
        let mut book = AddressBook::new(Arc::clone(&self.addresses));
        tokio::spawn(async move {
            loop {
                let current = members.borrow_and_update().clone();
                book.refresh(&current).await;
                tokio::select! {
                    changed = members.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    () = tokio::time::sleep(ADDRESS_REFRESH) => {}
                }
            }
        })
    }

    /// Starts the leader watch: asks the current control node for its
    /// status every [`LEADER_POLL_INTERVAL`]; runs until aborted.
    pub(crate) fn spawn_leader_watch(self: &Arc<Self>) -> JoinHandle<()> {
        let bridge = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(LEADER_POLL_INTERVAL);
            loop {
                ticks.tick().await;
                match bridge
                    .call(Repeat::Safe, |addr| bridge.client.status(addr))
                    .await
                {
                    Ok(status) if status.leader.is_some() => bridge.leader_answered(),
                    Ok(_) => debug!("the control node knows no leader"),
                    Err(error) => debug!(%error, "no control node answered its status"),
                }
            }
        })
    }

    /// Registers the data node, retrying (every control node in turn) until
    /// a leader takes it.
    pub(crate) async fn register(&self, http_addr: &str, rpc_addr: &str) {
        let report = MemberReport::Register {
            id: member_id(self.node),
            http_addr: http_addr.to_owned(),
            rpc_addr: rpc_addr.to_owned(),
        };
        while let Err(error) = self
            .call(Repeat::Safe, |addr| {
                self.client.report_member(addr, report.clone())
            })
            .await
        {
            debug!(%error, "member registration not taken yet; retrying");
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        self.leader_answered();
        self.heartbeats.succeeded();
    }

    /// Heartbeats every [`HEARTBEAT_INTERVAL`]; runs until aborted.
    pub(crate) fn spawn_heartbeat(self: &Arc<Self>) -> JoinHandle<()> {
        let bridge = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(HEARTBEAT_INTERVAL);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let report = MemberReport::Heartbeat {
                    id: member_id(bridge.node),
                };
                match bridge
                    .call(Repeat::Safe, |addr| {
                        bridge.client.report_member(addr, report.clone())
                    })
                    .await
                {
                    Ok(_) => {
                        bridge.leader_answered();
                        bridge.heartbeats.succeeded();
                    }
                    Err(error) => {
                        bridge.heartbeats.failed();
                        warn!(%error, "heartbeat reached no control-plane leader");
                    }
                }
            }
        })
    }

    /// Waits until the data node's replica reached `index`, up to `limit`.
    async fn wait_fed(&self, index: u64, limit: Duration) -> bool {
        let mut fed = self.fed.subscribe();
        matches!(
            tokio::time::timeout(limit, fed.wait_for(|fed| *fed >= index)).await,
            Ok(Ok(_))
        )
    }
}
