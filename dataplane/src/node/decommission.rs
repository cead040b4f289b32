//! The last step of a decommission, taken by the draining node itself
//! (spec §6 "Decommission"): once its member record says it drains, it
//! owns no partition, no move is headed to it, and every record its
//! ingress WAL took has been committed to its owner (dispatch backlog 0),
//! it proposes its own removal, `RemoveMember`. The metastore applies that
//! only under the same placement conditions and keeps a tombstone, so the
//! node's heartbeats cannot bring it back.
//!
//! Only the node knows its backlog, which is why it, not the controller,
//! proposes. Its produces are refused while it drains, so a backlog of 0
//! stays 0. A refusal is no error: placements may have changed between
//! this replica's view and the leader's (a move planned meanwhile), and the
//! next check tries again.
//!
//! Deciding ([`may_leave`]) is apart from doing ([`check`], run every
//! [`DECOMMISSION_CHECK_INTERVAL`] by [`DecommissionWatch`]).

use std::sync::{Arc, Weak};
use std::time::Duration;

use narad_meta::{Command, Metastore, RemoveMember};
use tokio::time::MissedTickBehavior;

use crate::admin::AdminError;
use crate::http::ApiState;
use crate::topology::member_id;

/// How often a node checks whether its decommission can end, and so how
/// often at most it proposes its removal: an emptied node leaves within
/// seconds, and a node that keeps being refused asks the leader rarely.
pub const DECOMMISSION_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Whether member `id` may leave the cluster now: it drains, owns nothing,
/// is the target of no move, and its dispatch backlog is 0.
pub(crate) fn may_leave(metastore: &Metastore, id: &str, dispatch_backlog: u64) -> bool {
    let draining = metastore.member(id).is_some_and(|member| member.draining);
    draining && metastore.holdings(id) == (0, 0) && dispatch_backlog == 0
}

/// What one check did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// The node may not leave yet (or is not leaving).
    Stays,
    /// It proposed its removal and the removal applied: it left.
    Left,
    /// It proposed its removal and was refused or not answered; the next
    /// check tries again.
    Refused(String),
    /// Its member record is gone already (removed): nothing more to do.
    Gone,
}

/// One check: proposes this node's removal when [`may_leave`] says so.
pub(crate) async fn check(api: &ApiState) -> Checked {
    let id = member_id(api.replica.local_node());
    let view = api.replica.view();
    if view.metastore.is_removed(&id) {
        return Checked::Gone;
    }
    if !may_leave(&view.metastore, &id, api.status.dispatch_backlog()) {
        return Checked::Stays;
    }
    drop(view);
    let remove = Command::RemoveMember(RemoveMember { id: id.clone() });
    match api.admin.propose(remove).await {
        Ok(()) => {
            tracing::info!(member = %id, "decommission complete: this node owns nothing, its ingress WAL is drained, and it left the cluster");
            Checked::Left
        }
        Err(error) => {
            let reason = match &error {
                AdminError::Refused { message, .. } => message.clone(),
                other => other.to_string(),
            };
            tracing::debug!(member = %id, %reason, "removal of this draining node not taken yet; retrying later");
            Checked::Refused(reason)
        }
    }
}

/// The task checking every interval whether this node's decommission can
/// end; it ends once the node left, or with [`DecommissionWatch::stop`].
#[derive(Debug)]
pub(crate) struct DecommissionWatch {
    task: tokio::task::JoinHandle<()>,
}

impl DecommissionWatch {
    /// Starts the task on the current Tokio runtime. It holds `api` weakly
    /// and ends when the node's state is gone. `None` outside a runtime (a
    /// node started from plain threads, as some tests do): there is then
    /// no watch, and a drained node stays a member.
    pub(crate) fn spawn(api: &Arc<ApiState>, interval: Duration) -> Option<Self> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let api = Arc::downgrade(api);
        let task = runtime.spawn(run(api, interval));
        Some(Self { task })
    }

    /// Stops the task; a proposal in flight is dropped (the metastore
    /// applies it or not, and a later start checks again).
    pub(crate) fn stop(self) {
        self.task.abort();
    }
}

async fn run(api: Weak<ApiState>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(api) = api.upgrade() else {
            return;
        };
        if matches!(check(&api).await, Checked::Left | Checked::Gone) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use bytes::Bytes;
    use narad_disk::Disk;
    use narad_disk::sim::SimDisk;
    use narad_meta::SetDraining;

    use super::*;
    use crate::admin::{Admin, AdminFuture, LocalAdmin};
    use crate::http::{ApiConfig, Health};
    use crate::ingress::{Acceptor, ProduceMessage};
    use crate::metadata::MetadataReplica;
    use crate::metrics::NodeMetrics;
    use crate::testing::{LOCAL_NODE, apply, register, sim_wal, start_node, topic};
    use crate::topology::NodeId;

    /// Another member, owner of `far`.
    const OTHER: NodeId = 2;

    /// Turns a hang into a failure; never a timing assertion.
    const CEILING: Duration = Duration::from_secs(30);

    /// A replica in which this node owns nothing and [`OTHER`] owns every
    /// partition of `far`.
    fn replica() -> Arc<MetadataReplica> {
        let replica = Arc::new(MetadataReplica::new(LOCAL_NODE));
        register(&replica, LOCAL_NODE);
        register(&replica, OTHER);
        topic(&replica, "far", 0xf2, 3, OTHER);
        replica
    }

    fn drain(replica: &MetadataReplica, node: NodeId) {
        let id = member_id(node);
        apply(
            replica,
            Command::SetDraining(SetDraining { id, draining: true }),
        );
    }

    /// The node's API state over `replica`, proposing through `admin`.
    fn api(replica: &Arc<MetadataReplica>, admin: Arc<dyn Admin>) -> Arc<ApiState> {
        let (_sim, wal) = sim_wal(3);
        let acceptor = Arc::new(Acceptor::new(
            wal,
            Arc::clone(replica),
            1,
            crate::testing::system_clock(),
        ));
        Arc::new(ApiState::new(
            ApiConfig::default(),
            acceptor,
            Arc::clone(replica),
            Arc::new(NodeMetrics::new()),
            Arc::new(Health::default()),
            Arc::new(AtomicU64::new(0)),
            admin,
        ))
    }

    fn local_admin(replica: &Arc<MetadataReplica>) -> Arc<dyn Admin> {
        Arc::new(LocalAdmin::new(Arc::clone(replica)))
    }

    fn is_removed(replica: &MetadataReplica, node: NodeId) -> bool {
        replica.view().metastore.is_removed(&member_id(node))
    }

    #[test]
    fn a_member_that_is_not_draining_stays() {
        let replica = replica();
        assert!(!may_leave(&replica.view().metastore, "1", 0));
    }

    #[test]
    fn a_draining_member_that_owns_a_partition_stays() {
        let replica = replica();
        drain(&replica, OTHER);
        assert!(!may_leave(&replica.view().metastore, "2", 0));
    }

    #[test]
    fn a_draining_member_with_a_dispatch_backlog_stays() {
        let replica = replica();
        drain(&replica, LOCAL_NODE);
        assert!(!may_leave(&replica.view().metastore, "1", 1));
    }

    #[test]
    fn a_drained_member_may_leave() {
        let replica = replica();
        drain(&replica, LOCAL_NODE);
        assert!(may_leave(&replica.view().metastore, "1", 0));
    }

    #[tokio::test]
    async fn a_drained_node_proposes_its_removal_and_then_has_nothing_to_do() {
        let replica = replica();
        let api = api(&replica, local_admin(&replica));
        assert_eq!(check(&api).await, Checked::Stays, "not draining yet");
        drain(&replica, LOCAL_NODE);
        assert_eq!(check(&api).await, Checked::Left);
        assert!(is_removed(&replica, LOCAL_NODE));
        assert_eq!(check(&api).await, Checked::Gone);
    }

    #[tokio::test]
    async fn a_node_whose_records_have_not_reached_their_owners_stays() {
        let replica = replica();
        let api = api(&replica, local_admin(&replica));
        let far = api.acceptor.producible_topic("far").expect("far");
        let message = ProduceMessage {
            key: Vec::new(),
            partition: Some(0),
            payload: Bytes::from_static(b"x"),
            idempotency_key: Vec::new(),
        };
        api.acceptor.accept(&far, &message).await.expect("staged");
        drain(&replica, LOCAL_NODE);
        assert_eq!(api.status.dispatch_backlog(), 1);
        assert_eq!(check(&api).await, Checked::Stays);
        assert!(!is_removed(&replica, LOCAL_NODE));
    }

    /// An admin the metastore behind refuses, as a leader would when a
    /// move was planned to the node meanwhile.
    #[derive(Debug)]
    struct Refusing;

    impl Admin for Refusing {
        fn propose(&self, _command: Command) -> AdminFuture<'_, ()> {
            Box::pin(async {
                Err(AdminError::Refused {
                    status: 409,
                    message:
                        "member \"1\" still owns 0 partition(s) and is the target of 1 move(s)"
                            .into(),
                })
            })
        }
    }

    #[tokio::test]
    async fn a_refused_removal_is_reported_and_left_for_the_next_check() {
        let replica = replica();
        let api = api(&replica, Arc::new(Refusing));
        drain(&replica, LOCAL_NODE);
        let checked = check(&api).await;
        assert!(
            matches!(&checked, Checked::Refused(reason) if reason.contains("target of 1 move")),
            "{checked:?}"
        );
        assert!(!is_removed(&replica, LOCAL_NODE));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_running_node_leaves_the_cluster_once_drained() {
        let replica = replica();
        let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(17));
        let mut config = crate::node::DataNodeConfig::new("/node");
        config.decommission_check = Duration::from_millis(20);
        let node = tokio::task::block_in_place(|| start_node(disk, &replica, config));
        drain(&replica, LOCAL_NODE);
        tokio::time::timeout(CEILING, async {
            while !is_removed(&replica, LOCAL_NODE) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the node removed itself");
        tokio::task::block_in_place(|| node.shutdown());
    }
}
