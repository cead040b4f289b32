//! The replica: the metastore followed from the metadata stream, behind an
//! `Arc` swap.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use narad_meta::follow::{Follower, ReplicaError};
use narad_meta::{Command, MetastoreError, Outcome};
use narad_protocol::metadata::MetadataBatch;
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use super::topic::TopicMeta;
use super::view::MetadataView;
use crate::topology::{Destination, NodeId, Route, TopicView, Topology};
use narad_meta::User;

/// The local metadata replica of one data node. One writer at a time (the
/// stream feed, or a local admin) applies batches or commands in log order
/// with the metastore's own `apply`; readers take [`MetadataReplica::view`],
/// an immutable view.
#[derive(Debug)]
pub struct MetadataReplica {
    local_node: NodeId,
    /// The writer's copy: batches and commands apply to it.
    follower: Mutex<Follower>,
    state: RwLock<Arc<MetadataView>>,
    leader_commit_index: AtomicU64,
    /// Counts applied batches and commands, so waiters that depend on
    /// topic records (a partition now owned here, caps raised) wake.
    changes: watch::Sender<u64>,
}

impl MetadataReplica {
    /// An empty replica of node `local_node`, not caught up until it
    /// applies a snapshot or a command.
    pub fn new(local_node: NodeId) -> Self {
        Self {
            local_node,
            follower: Mutex::new(Follower::new()),
            state: RwLock::new(Arc::new(MetadataView::default())),
            leader_commit_index: AtomicU64::new(0),
            changes: watch::channel(0).0,
        }
    }

    /// A subscription that wakes after every applied batch or command.
    pub fn watch_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The node this replica runs on.
    pub fn local_node(&self) -> NodeId {
        self.local_node
    }

    /// The current view, consistent as a whole.
    pub fn view(&self) -> Arc<MetadataView> {
        Arc::clone(&self.state.read())
    }

    /// Applies one batch of the metadata stream (a snapshot, or the ordered
    /// changes after the applied index).
    ///
    /// # Errors
    /// [`ReplicaError`] when the batch does not decode or is out of order;
    /// the replica is unchanged.
    pub fn apply_batch(&self, batch: &MetadataBatch) -> Result<(), ReplicaError> {
        self.set_leader_commit_index(batch.leader_commit_index);
        let mut follower = self.follower.lock();
        let before = follower.applied_index();
        let had_snapshot = before > 0;
        follower.apply(batch)?;
        if follower.applied_index() != before || !had_snapshot {
            self.publish(&follower);
        }
        Ok(())
    }

    /// Applies `command` as the next log entry: for a replica that is its
    /// own log (a data node run without a control plane, and tests).
    ///
    /// # Errors
    /// The metastore's refusal; the refused command changes nothing but the
    /// applied index.
    pub fn apply_next(&self, command: &Command) -> Result<Outcome, MetastoreError> {
        let mut follower = self.follower.lock();
        let result = follower.apply_next(command);
        self.set_leader_commit_index(follower.applied_index());
        self.publish(&follower);
        result
    }

    /// Swaps in the view of `follower`'s state; the caller holds the writer
    /// lock, so views are published in log order.
    fn publish(&self, follower: &Follower) {
        let previous = self.view();
        let next = MetadataView::derive(&previous, follower.shared(), follower.applied_index());
        *self.state.write() = Arc::new(next);
        self.changes.send_modify(|count| *count += 1);
    }

    /// The commit index the leader last reported: the replica is caught up
    /// once it has applied it.
    pub fn set_leader_commit_index(&self, index: u64) {
        self.leader_commit_index.fetch_max(index, Ordering::AcqRel);
    }

    /// Whether the replica holds a state and has applied the leader's last
    /// reported commit index.
    pub fn is_caught_up(&self) -> bool {
        let applied = self.state.read().applied_index;
        applied > 0 && applied >= self.leader_commit_index.load(Ordering::Acquire)
    }

    /// Whether this node's member record says it is being decommissioned:
    /// one map lookup in the current view, cheap enough for every produce.
    pub fn local_draining(&self) -> bool {
        self.state
            .read()
            .members
            .get(&self.local_node)
            .is_some_and(|member| member.draining)
    }

    /// The topic under `name`.
    pub fn topic_meta(&self, name: &str) -> Option<Arc<TopicMeta>> {
        self.state.read().topics.get(name).cloned()
    }

    /// The user under `name`, and the users-domain version it was read at.
    pub fn user(&self, name: &str) -> (Option<Arc<User>>, u64) {
        let state = self.state.read();
        (state.users.get(name).cloned(), state.users_version)
    }
}

impl Topology for MetadataReplica {
    fn topic(&self, name: &str) -> Option<TopicView> {
        let topic = self.topic_meta(name)?;
        Some(TopicView {
            partitions: topic.partitions,
            incarnation: topic.incarnation_id.clone(),
        })
    }

    fn route(&self, destination: &Destination) -> Route {
        let state = self.state.read();
        let owner = state
            .topics
            .get(&*destination.topic)
            .and_then(|topic| topic.owners.get(destination.partition as usize).copied())
            .flatten();
        let Some(node) = owner else {
            return Route::Unassigned;
        };
        let local = node == self.local_node;
        // This node is alive by definition; others as membership says. A
        // node membership does not know yet is taken as alive: "dead" must
        // be a statement, since it reroutes at once.
        let alive = local || state.members.get(&node).is_none_or(|member| member.alive);
        Route::Owner { node, local, alive }
    }

    fn caught_up(&self) -> bool {
        self.is_caught_up()
    }
}

#[cfg(test)]
mod tests {
    use narad_meta::codec::encode_state;
    use narad_meta::follow::changes_batch;
    use narad_meta::{Actor, Command, DeleteTopic, GrantAction, Heartbeat, Metastore};

    use super::*;
    use crate::testing::{add_user, assign, create_command, mark_dead, register, topic};

    fn replica_with_orders_on(owner: NodeId) -> MetadataReplica {
        let replica = MetadataReplica::new(1);
        register(&replica, 1);
        topic(&replica, "orders", 0xaa, 3, owner);
        replica
    }

    fn delete_orders() -> Command {
        Command::DeleteTopic(DeleteTopic {
            actor: Actor::SecurityOff,
            name: "orders".into(),
            expected_id: None,
        })
    }

    #[test]
    fn route_is_local_for_partitions_this_node_owns() {
        let replica = replica_with_orders_on(1);
        let route = replica.route(&Destination::new("orders", 2));
        assert_eq!(
            route,
            Route::Owner {
                node: 1,
                local: true,
                alive: true
            }
        );
    }

    #[test]
    fn route_reports_a_dead_member_as_not_alive() {
        let replica = replica_with_orders_on(7);
        mark_dead(&replica, 7);
        let route = replica.route(&Destination::new("orders", 0));
        assert_eq!(
            route,
            Route::Owner {
                node: 7,
                local: false,
                alive: false
            }
        );
    }

    #[test]
    fn unassigned_partition_routes_nowhere() {
        let replica = MetadataReplica::new(1);
        register(&replica, 1);
        replica
            .apply_next(&Command::CreateTopic(create_command("orders", 0xaa, 3)))
            .expect("create");
        assign(&replica, "orders", &[(0, 1), (2, 1)]);
        assert_eq!(
            replica.route(&Destination::new("orders", 1)),
            Route::Unassigned
        );
        assert_eq!(
            replica.topic_meta("orders").expect("topic").owners,
            [Some(1), None, Some(1)]
        );
    }

    fn batch(applied_index: u64, leader: u64, changes: &[(u64, Command)]) -> MetadataBatch {
        changes_batch(applied_index, leader, changes)
    }

    #[test]
    fn caught_up_only_after_a_state_and_the_leader_index() {
        let replica = MetadataReplica::new(1);
        assert!(!replica.is_caught_up());
        let snapshot = MetadataBatch {
            applied_index: 3,
            leader_commit_index: 3,
            snapshot: Some(encode_state(&Metastore::new())),
            changes: Vec::new(),
        };
        replica.apply_batch(&snapshot).expect("snapshot");
        assert!(replica.is_caught_up());
        replica.set_leader_commit_index(4);
        assert!(!replica.is_caught_up());
        let heartbeat = Command::Heartbeat(Heartbeat {
            id: "unknown".into(),
            at_ms: 1,
        });
        replica
            .apply_batch(&batch(4, 4, &[(4, heartbeat)]))
            .expect("changes");
        assert!(replica.is_caught_up());
    }

    #[test]
    fn a_batch_without_changes_still_catches_the_replica_up() {
        let replica = replica_with_orders_on(1);
        let applied = replica.view().applied_index;
        replica.set_leader_commit_index(applied + 5);
        assert!(!replica.is_caught_up());
        replica
            .apply_batch(&batch(applied + 5, applied + 5, &[]))
            .expect("empty batch");
        assert!(replica.is_caught_up());
        assert!(replica.topic_meta("orders").is_some());
    }

    #[test]
    fn a_batch_out_of_order_is_refused_and_changes_nothing() {
        let replica = replica_with_orders_on(1);
        let at = replica.view().applied_index;
        let changes = [(at + 2, delete_orders()), (at + 1, delete_orders())];
        assert!(
            replica
                .apply_batch(&batch(at + 2, at + 2, &changes))
                .is_err()
        );
        assert_eq!(replica.view().applied_index, at);
        assert!(replica.topic_meta("orders").is_some());
    }

    #[test]
    fn a_change_to_one_topic_leaves_the_others_views_shared() {
        let replica = replica_with_orders_on(1);
        topic(&replica, "shipments", 0xbb, 3, 1);
        let before = replica.topic_meta("shipments").expect("shipments");
        replica.apply_next(&delete_orders()).expect("delete");
        let after = replica.topic_meta("shipments").expect("shipments");
        assert!(Arc::ptr_eq(&before, &after), "shipments was derived again");
        assert!(replica.topic_meta("orders").is_none());
    }

    #[test]
    fn user_changes_bump_the_users_version() {
        let replica = replica_with_orders_on(1);
        let (_, before) = replica.user("alice");
        add_user(&replica, "alice", "pw", Vec::new());
        let (user, after) = replica.user("alice");
        assert!(user.is_some());
        assert!(after > before);
    }

    #[test]
    fn a_refused_command_answers_the_metastores_error_and_changes_nothing() {
        let replica = replica_with_orders_on(1);
        let again = Command::CreateTopic(create_command("orders", 0xcc, 3));
        let error = replica.apply_next(&again).expect_err("exists");
        assert_eq!(error.to_string(), "topic already exists");
        let topic = replica.topic_meta("orders").expect("orders");
        assert_eq!(topic.incarnation_id.as_deref(), Some("00000000000000aa"));
    }

    #[test]
    fn wildcard_grant_matches_by_prefix_only() {
        let grant = narad_meta::Grant {
            action: GrantAction::Produce,
            patterns: vec!["ord*".into()],
        };
        assert!(grant.covers(GrantAction::Produce, "orders"));
        assert!(!grant.covers(GrantAction::Produce, "shipments"));
        assert!(!grant.covers(GrantAction::Consume, "orders"));
    }
}
