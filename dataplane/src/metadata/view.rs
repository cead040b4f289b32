//! One consistent view of the metadata: the metastore at an applied index,
//! and lookups derived from it for the hot paths (topics by name with
//! numeric owners and parsed schemas, members by node number, users
//! shared by `Arc`). A new view reuses every derived entry whose source did
//! not change, so a batch that touches one topic derives one topic.

use std::collections::BTreeMap;
use std::sync::Arc;

use narad_meta::{MemberStatus, Metastore, User};

use super::topic::{TopicMeta, owners_of};
use crate::topology::{NodeId, node_of};

/// A data node as membership reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Node id.
    pub id: NodeId,
    /// Whether the controller considers it alive.
    pub alive: bool,
    /// Whether it is being decommissioned (its produces are refused).
    pub draining: bool,
}

/// The metadata at one applied index, consistent as a whole.
#[derive(Clone, Debug, Default)]
pub struct MetadataView {
    /// The control-plane log index this view reflects.
    pub applied_index: u64,
    /// The metastore itself.
    pub metastore: Arc<Metastore>,
    /// Topics by name.
    pub topics: BTreeMap<Arc<str>, Arc<TopicMeta>>,
    /// Data nodes by number.
    pub members: BTreeMap<NodeId, Member>,
    /// Users by name.
    pub users: BTreeMap<String, Arc<User>>,
    /// The metastore's users-domain version: the key of the
    /// verified-credential cache, so a changed password or removed user is
    /// never served from it.
    pub users_version: u64,
}

impl MetadataView {
    /// The view of `metastore` at `applied_index`, reusing what `previous`
    /// derived from sources that did not change.
    pub(super) fn derive(
        previous: &MetadataView,
        metastore: Arc<Metastore>,
        applied_index: u64,
    ) -> Self {
        // Change counters only grow along the log, so equal counters mean
        // an equal domain, and its derived lookups carry over as they are.
        let before = previous.metastore.versions();
        let now = metastore.versions();
        let topics = if (before.topics, before.assignments) == (now.topics, now.assignments) {
            previous.topics.clone()
        } else {
            derive_topics(&previous.topics, &metastore)
        };
        let members = if before.members == now.members {
            previous.members.clone()
        } else {
            derive_members(&metastore)
        };
        let users = if before.users == now.users {
            previous.users.clone()
        } else {
            metastore
                .users()
                .map(|user| (user.username.clone(), Arc::new(user.clone())))
                .collect()
        };
        Self {
            applied_index,
            users_version: now.users,
            metastore,
            topics,
            members,
            users,
        }
    }
}

fn derive_topics(
    previous: &BTreeMap<Arc<str>, Arc<TopicMeta>>,
    metastore: &Metastore,
) -> BTreeMap<Arc<str>, Arc<TopicMeta>> {
    metastore
        .topics()
        .map(|record| {
            let slots = metastore.assignments(&record.name).unwrap_or_default();
            let owners = owners_of(record, slots);
            let remote = metastore.remote_link(&record.name);
            let earlier = previous.get(record.name.as_str());
            let meta = match earlier {
                Some(earlier) if earlier.describes(record, &owners, remote) => Arc::clone(earlier),
                _ => Arc::new(TopicMeta::derive(
                    record,
                    owners,
                    remote,
                    earlier.map(|arc| &**arc),
                )),
            };
            (Arc::clone(&meta.name), meta)
        })
        .collect()
}

fn derive_members(metastore: &Metastore) -> BTreeMap<NodeId, Member> {
    metastore
        .members()
        .filter_map(|member| {
            let id = node_of(&member.id)?;
            let alive = member.status == MemberStatus::Alive;
            let draining = member.draining;
            Some((
                id,
                Member {
                    id,
                    alive,
                    draining,
                },
            ))
        })
        .collect()
}
