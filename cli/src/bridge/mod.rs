//! The bridge between the planes, for a data node in the same process as
//! its control node (`narad dev`). It talks to the control node over the
//! cluster transport on loopback, as a data node on another host would:
//!
//! - the metadata stream feeds the data node's replica: each batch is
//!   applied to a control-plane subscriber replica, whose state is then
//!   converted whole into the data plane's types and swapped in;
//! - the data node registers as a member and heartbeats, so the controller
//!   assigns partitions to it;
//! - [`ControlConfirm`] asks the leader, after its barrier, whether a
//!   topic or one incarnation of it is gone;
//! - [`ControlAdmin`] turns the HTTP API's topic and user changes into
//!   control-plane commands, proposed through the leader and answered once
//!   the data node's replica holds them.

mod admin;
mod confirm;
mod convert;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use narad_controlplane::controller::constants::HEARTBEAT_INTERVAL;
use narad_controlplane::node::wire::MemberReport;
use narad_controlplane::node::{ControlClient, MetadataReplica as Subscriber};
use narad_dataplane::dispatch::NodeId;
use narad_dataplane::metadata::MetadataReplica;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

pub(crate) use admin::ControlAdmin;
pub(crate) use confirm::ControlConfirm;

/// How long one metadata fetch waits for news on a quiet cluster.
const FETCH_WAIT_MS: u32 = 1_000;
/// Pause after a failed call before the next try.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What the feed, the heartbeat and the admin share.
#[derive(Debug)]
pub(crate) struct Bridge {
    client: ControlClient,
    control: SocketAddr,
    node: NodeId,
    replica: Arc<MetadataReplica>,
    /// The index the data node's replica reached.
    fed: watch::Sender<u64>,
}

impl Bridge {
    /// A bridge of data node `node` (replica `replica`) to the control node
    /// at `control`, calling through `client`.
    pub(crate) fn new(
        client: ControlClient,
        control: SocketAddr,
        node: NodeId,
        replica: Arc<MetadataReplica>,
    ) -> Arc<Self> {
        let (fed, _) = watch::channel(0);
        Arc::new(Self {
            client,
            control,
            node,
            replica,
            fed,
        })
    }

    /// Starts the metadata feed; it runs until aborted.
    pub(crate) fn spawn_feed(self: &Arc<Self>) -> JoinHandle<()> {
        let bridge = Arc::clone(self);
        tokio::spawn(async move { bridge.feed().await })
    }

    async fn feed(&self) {
        let mut subscriber = Subscriber::new();
        let mut fed_once = false;
        loop {
            let batch = match self
                .client
                .fetch_metadata(self.control, subscriber.applied_index(), FETCH_WAIT_MS)
                .await
            {
                Ok(batch) => batch,
                Err(error) => {
                    debug!(%error, "metadata fetch failed; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            let before = subscriber.applied_index();
            if let Err(error) = subscriber.apply(&batch) {
                warn!(%error, "metadata batch refused; fetching again from the replica's index");
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            let applied = subscriber.applied_index();
            if !fed_once || applied > before {
                self.replica
                    .apply_snapshot(convert::snapshot(subscriber.metastore(), applied));
                fed_once = true;
            }
            self.replica
                .set_leader_commit_index(batch.leader_commit_index);
            self.fed.send_replace(applied);
        }
    }

    /// Registers the data node (retrying until a leader takes it), then
    /// heartbeats every [`HEARTBEAT_INTERVAL`] until aborted.
    pub(crate) async fn register(&self, http_addr: SocketAddr, rpc_addr: SocketAddr) {
        let report = MemberReport::Register {
            id: convert::member_id(self.node),
            http_addr: http_addr.to_string(),
            rpc_addr: rpc_addr.to_string(),
        };
        while let Err(error) = self
            .client
            .report_member(self.control, report.clone())
            .await
        {
            debug!(%error, "member registration not taken yet; retrying");
            tokio::time::sleep(RETRY_PAUSE).await;
        }
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
                    id: convert::member_id(bridge.node),
                };
                if let Err(error) = bridge.client.report_member(bridge.control, report).await {
                    warn!(%error, "heartbeat to the control node failed");
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
