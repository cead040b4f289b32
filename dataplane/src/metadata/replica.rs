//! The replica: the newest snapshot behind an `Arc` swap.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::RwLock;
use tokio::sync::watch;

use super::types::{MetadataDelta, MetadataSnapshot, TopicMeta, User};
use crate::topology::{Destination, NodeId, Route, TopicView, Topology};

/// The local metadata replica of one data node. Writers (the stream
/// client) apply snapshots and deltas in log order; readers take
/// [`MetadataReplica::view`], an immutable snapshot.
#[derive(Debug)]
pub struct MetadataReplica {
    local_node: NodeId,
    state: RwLock<Arc<MetadataSnapshot>>,
    has_snapshot: AtomicBool,
    leader_commit_index: AtomicU64,
    /// Counts state changes (snapshots and deltas), so waiters that depend
    /// on topic records (a partition now owned here, caps raised) wake.
    changes: watch::Sender<u64>,
}

impl MetadataReplica {
    /// An empty replica of node `local_node`, not caught up until it gets a
    /// snapshot.
    pub fn new(local_node: NodeId) -> Self {
        Self {
            local_node,
            state: RwLock::new(Arc::new(MetadataSnapshot::default())),
            has_snapshot: AtomicBool::new(false),
            leader_commit_index: AtomicU64::new(0),
            changes: watch::channel(0).0,
        }
    }

    /// A subscription that wakes after every applied snapshot or delta.
    pub fn watch_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The node this replica runs on.
    pub fn local_node(&self) -> NodeId {
        self.local_node
    }

    /// The current state, consistent as a whole.
    pub fn view(&self) -> Arc<MetadataSnapshot> {
        Arc::clone(&self.state.read())
    }

    /// Replaces the whole state with a snapshot.
    ///
    /// # Panics
    /// If a topic in it is malformed (see [`TopicMeta::assert_valid`]).
    pub fn apply_snapshot(&self, snapshot: MetadataSnapshot) {
        for topic in snapshot.topics.values() {
            topic.assert_valid();
        }
        *self.state.write() = Arc::new(snapshot);
        self.has_snapshot.store(true, Ordering::Release);
        self.changes.send_modify(|count| *count += 1);
    }

    /// Applies one delta stamped with log index `index`.
    ///
    /// # Panics
    /// If `index` does not follow the applied index (the stream delivers in
    /// order; a gap or a replay means the replica would lie), or the delta
    /// is malformed.
    pub fn apply_delta(&self, index: u64, delta: MetadataDelta) {
        let mut guard = self.state.write();
        assert!(
            index > guard.applied_index,
            "metadata delta at index {index} does not follow the applied index {}",
            guard.applied_index
        );
        let mut next = MetadataSnapshot::clone(&guard);
        next.applied_index = index;
        apply(&mut next, delta);
        *guard = Arc::new(next);
        drop(guard);
        self.changes.send_modify(|count| *count += 1);
    }

    /// Moves the applied index to `index` without a change: log entries
    /// that carry none (a new leader's blank entry) still advance it, and
    /// the stream reports where a batch leaves the replica.
    ///
    /// # Panics
    /// If `index` is below the applied index.
    pub fn advance_applied_index(&self, index: u64) {
        let mut guard = self.state.write();
        assert!(
            index >= guard.applied_index,
            "metadata applied index would go back from {} to {index}",
            guard.applied_index
        );
        if index > guard.applied_index {
            let mut next = MetadataSnapshot::clone(&guard);
            next.applied_index = index;
            *guard = Arc::new(next);
        }
    }

    /// The commit index the leader last reported: the replica is caught up
    /// once it has applied it.
    pub fn set_leader_commit_index(&self, index: u64) {
        self.leader_commit_index.fetch_max(index, Ordering::AcqRel);
    }

    /// Whether the replica holds a snapshot and has applied the leader's
    /// last reported commit index.
    pub fn is_caught_up(&self) -> bool {
        self.has_snapshot.load(Ordering::Acquire)
            && self.state.read().applied_index >= self.leader_commit_index.load(Ordering::Acquire)
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

fn apply(state: &mut MetadataSnapshot, delta: MetadataDelta) {
    match delta {
        MetadataDelta::PutTopic(topic) => {
            topic.assert_valid();
            state
                .topics
                .insert(Arc::clone(&topic.name), Arc::new(topic));
        }
        MetadataDelta::DeleteTopic { name } => {
            state.topics.remove(name.as_str());
        }
        MetadataDelta::SetOwner {
            topic,
            partition,
            owner,
        } => {
            if let Some(meta) = state.topics.get_mut(topic.as_str()) {
                let meta = Arc::make_mut(meta);
                if let Some(slot) = meta.owners.get_mut(partition as usize) {
                    *slot = owner;
                }
            }
        }
        MetadataDelta::PutMember(member) => {
            state.members.insert(member.id, member);
        }
        MetadataDelta::PutUser(user) => {
            state.users.insert(user.username.clone(), Arc::new(user));
            state.users_version += 1;
        }
        MetadataDelta::DeleteUser { username } => {
            state.users.remove(&username);
            state.users_version += 1;
        }
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
    use super::*;
    use crate::metadata::Member;

    fn replica_with(topic: TopicMeta) -> MetadataReplica {
        let replica = MetadataReplica::new(1);
        let mut snapshot = MetadataSnapshot {
            applied_index: 5,
            ..MetadataSnapshot::default()
        };
        snapshot
            .topics
            .insert(Arc::clone(&topic.name), Arc::new(topic));
        replica.apply_snapshot(snapshot);
        replica
    }

    #[test]
    fn route_is_local_for_partitions_this_node_owns() {
        let replica = replica_with(TopicMeta::new("orders", Some("00000000000000aa"), 3, 1));
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
        let replica = replica_with(TopicMeta::new("orders", None, 3, 7));
        replica.apply_delta(
            6,
            MetadataDelta::PutMember(Member {
                id: 7,
                alive: false,
            }),
        );
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
        let replica = replica_with(TopicMeta::new("orders", None, 3, 1));
        replica.apply_delta(
            6,
            MetadataDelta::SetOwner {
                topic: "orders".into(),
                partition: 1,
                owner: None,
            },
        );
        assert_eq!(
            replica.route(&Destination::new("orders", 1)),
            Route::Unassigned
        );
    }

    #[test]
    fn caught_up_only_after_snapshot_and_leader_index() {
        let replica = MetadataReplica::new(1);
        assert!(!replica.is_caught_up());
        replica.apply_snapshot(MetadataSnapshot {
            applied_index: 3,
            ..MetadataSnapshot::default()
        });
        assert!(replica.is_caught_up());
        replica.set_leader_commit_index(4);
        assert!(!replica.is_caught_up());
        replica.apply_delta(4, MetadataDelta::DeleteTopic { name: "x".into() });
        assert!(replica.is_caught_up());
    }

    #[test]
    fn an_entry_without_a_change_still_catches_the_replica_up() {
        let replica = replica_with(TopicMeta::new("orders", None, 3, 1));
        replica.set_leader_commit_index(9);
        assert!(!replica.is_caught_up());
        replica.advance_applied_index(9);
        assert!(replica.is_caught_up());
        assert!(replica.topic_meta("orders").is_some());
    }

    #[test]
    #[should_panic(expected = "does not follow the applied index")]
    fn a_delta_out_of_order_is_refused() {
        let replica = replica_with(TopicMeta::new("orders", None, 3, 1));
        replica.apply_delta(
            5,
            MetadataDelta::DeleteTopic {
                name: "orders".into(),
            },
        );
    }

    #[test]
    fn user_changes_bump_the_users_version() {
        let replica = replica_with(TopicMeta::new("orders", None, 3, 1));
        let (_, before) = replica.user("alice");
        replica.apply_delta(
            6,
            MetadataDelta::PutUser(User {
                username: "alice".into(),
                password_hash: String::new(),
                root: false,
                grants: Vec::new(),
                created_at_ms: 0,
                updated_at_ms: 0,
            }),
        );
        let (user, after) = replica.user("alice");
        assert!(user.is_some());
        assert!(after > before);
    }

    #[test]
    fn wildcard_grant_matches_by_prefix_only() {
        let grant = crate::metadata::Grant {
            action: crate::metadata::GrantAction::Produce,
            patterns: vec!["ord*".into()],
        };
        assert!(grant.allows(crate::metadata::GrantAction::Produce, "orders"));
        assert!(!grant.allows(crate::metadata::GrantAction::Produce, "shipments"));
        assert!(!grant.allows(crate::metadata::GrantAction::Consume, "orders"));
    }
}
