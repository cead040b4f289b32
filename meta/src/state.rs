//! What the metastore holds, and the read-only questions replicas ask of it.
//! Every map is a `BTreeMap`, so iteration (and therefore every decision and
//! every snapshot made from the state) is in one order on every replica.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::ids::{AttachEpoch, IncarnationId, PasswordHash};
use super::limits::IDEMPOTENCY_WINDOW_MS_DEFAULT;
use super::remotes::{Remote, RemoteKey, RemoteLink};

/// A topic's place in fan-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Neither parent nor child.
    Standalone,
    /// Has at least one child.
    Parent,
    /// Is fed from a parent.
    Child,
}

/// One version of a topic's schema history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaVersion {
    /// 1 for the first schema, then consecutive.
    pub version: u32,
    /// The schema document as JSON text (an object or `true`), in the form
    /// the proposer validated and normalised.
    pub document: String,
}

/// A child's link to its parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent topic's name.
    pub parent: String,
    /// Minted by the proposer of the attach; cursor files carry it.
    pub attach_epoch: AttachEpoch,
    /// A record becomes due this long after its parent commit; 0 = at once.
    /// Immutable while attached.
    pub fanout_delay_ms: u64,
    /// The attach point: parent partition i's committed high watermark
    /// observed while the attach was proposed, one per parent partition.
    pub attach_offsets: Vec<u64>,
}

/// A topic record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topic {
    /// The name, unique and unique ignoring letter case.
    pub name: String,
    /// The incarnation id, minted per create.
    pub id: IncarnationId,
    /// At least 3; only grows.
    pub partitions: u32,
    /// 0 = keep forever, else at least one hour.
    pub retention_ms: u64,
    /// Lease length; immutable after create.
    pub visibility_timeout_ms: u64,
    /// Leases outstanding per partition at most.
    pub max_in_flight_per_partition: u64,
    /// Acknowledgements ahead of the committed frontier per partition at most.
    pub max_acked_ahead_per_partition: u64,
    /// How long after a record with an idempotency key is stored a record
    /// with the same key is recognised and not stored again; one second to
    /// one day. A topic written before the setting existed (older JSON, the
    /// older binary forms) has the default.
    #[serde(default = "idempotency_window_ms_default")]
    pub idempotency_window_ms: u64,
    /// When the proposer created it (Unix ms, the proposer's clock).
    pub created_at_ms: u64,
    /// The creating user; `None` when created with security off. Never moves.
    pub owner: Option<String>,
    /// Oldest first; empty when the topic has no schema.
    pub schemas: Vec<SchemaVersion>,
    /// Set on a child.
    pub parent: Option<ParentLink>,
    /// Set on a parent, in attach order.
    pub children: Vec<String>,
}

/// The window of a topic recorded before the setting existed.
fn idempotency_window_ms_default() -> u64 {
    IDEMPOTENCY_WINDOW_MS_DEFAULT
}

impl Topic {
    /// The topic's fan-out role, derived from its links so it cannot
    /// disagree with them.
    pub fn role(&self) -> Role {
        if self.parent.is_some() {
            Role::Child
        } else if self.children.is_empty() {
            Role::Standalone
        } else {
            Role::Parent
        }
    }

    /// A delay child's delay; 0 for any other topic (a child without delay,
    /// a parent, a standalone topic).
    pub fn fanout_delay_ms(&self) -> u64 {
        self.parent.as_ref().map_or(0, |link| link.fanout_delay_ms)
    }

    /// The current schema version; 0 when the topic has no schema.
    pub fn schema_version(&self) -> u32 {
        self.schemas.last().map_or(0, |schema| schema.version)
    }

    /// Bytes of schema history this topic holds.
    pub fn schema_bytes(&self) -> u64 {
        self.schemas
            .iter()
            .map(|schema| schema.document.len() as u64)
            .sum()
    }
}

/// Whether a data node is taken to be running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberStatus {
    /// Heartbeating (or not yet marked dead).
    Alive,
    /// Marked dead by the controller; its partitions stay its own.
    Dead,
}

/// A data node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The node id (`cluster.node_id`).
    pub id: String,
    /// Where its HTTP API listens.
    pub http_addr: String,
    /// Where its node RPC listens.
    pub rpc_addr: String,
    /// Its last heartbeat, stamped by the leader that proposed it (Unix ms).
    pub last_heartbeat_ms: u64,
    /// Alive or dead.
    pub status: MemberStatus,
    /// Being decommissioned: takes no new partitions. Survives
    /// re-registration.
    pub draining: bool,
}

impl Member {
    /// Whether new partitions may be placed on it.
    pub fn is_receiver(&self) -> bool {
        self.status == MemberStatus::Alive && !self.draining
    }
}

/// A grant's action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantAction {
    /// Produce to matching topics.
    Produce,
    /// Consume, ack, extend and nack on matching topics.
    Consume,
    /// Create matching topics (and own them).
    Create,
    /// Everything; takes no patterns.
    Admin,
}

impl GrantAction {
    /// Every action, in wire order.
    pub const ALL: [Self; 4] = [Self::Produce, Self::Consume, Self::Create, Self::Admin];

    /// The action's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Self::Produce => "produce",
            Self::Consume => "consume",
            Self::Create => "create",
            Self::Admin => "admin",
        }
    }

    /// The action called `name` on the wire.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|action| action.name() == name)
    }
}

/// One grant: an action on topics whose names match any pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The action.
    pub action: GrantAction,
    /// Topic names, each optionally ending in `*` (a prefix); `*` alone
    /// matches every name. Empty for `admin`.
    pub patterns: Vec<String>,
}

impl Grant {
    /// Whether this grant covers `action` on topic `name`.
    pub fn covers(&self, action: GrantAction, name: &str) -> bool {
        self.action == action
            && self
                .patterns
                .iter()
                .any(|pattern| pattern_matches(pattern, name))
    }
}

/// Whether a grant pattern matches a topic name.
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// A user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The username.
    pub username: String,
    /// bcrypt hash of the password, computed by the proposer.
    pub password_hash: PasswordHash,
    /// The root admin, seeded once.
    pub root: bool,
    /// What the user may do (root may do everything regardless).
    pub grants: Vec<Grant>,
    /// Unix ms, the proposer's clock.
    pub created_at_ms: u64,
    /// Unix ms, the proposer's clock.
    pub updated_at_ms: u64,
}

impl User {
    /// Root, or holds an `admin` grant.
    pub fn is_admin(&self) -> bool {
        self.root
            || self
                .grants
                .iter()
                .any(|grant| grant.action == GrantAction::Admin)
    }

    /// Whether the user may do `action` on the topic called `name`: an
    /// admin may do everything, anyone else what a grant covers.
    pub fn may(&self, action: GrantAction, name: &str) -> bool {
        self.is_admin() || self.grants.iter().any(|grant| grant.covers(action, name))
    }

    /// Whether the user may read `topic` (describe it, list it): an admin,
    /// its owner, or anyone with a grant of any action matching its name.
    pub fn may_read(&self, topic: &Topic) -> bool {
        self.may_manage(topic)
            || self.grants.iter().any(|grant| {
                grant
                    .patterns
                    .iter()
                    .any(|pattern| pattern_matches(pattern, &topic.name))
            })
    }

    /// Whether the user may alter, delete, attach or detach `topic`: an
    /// admin or its owner.
    pub fn may_manage(&self, topic: &Topic) -> bool {
        self.is_admin() || topic.owner.as_deref() == Some(self.username.as_str())
    }
}

/// A partition's placement: the one member that holds it, and where the
/// planner wants it moved, if anywhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The member whose disk holds the partition's only copy.
    pub owner: String,
    /// The member a move is taking the partition to: set by the planner,
    /// cleared by the move's completion (which makes it the owner) or by an
    /// abort. Never the owner. Absent from the JSON of older builds.
    #[serde(default)]
    pub target: Option<String>,
}

impl Assignment {
    /// A placement on `owner` with no move.
    pub fn owned_by(owner: &str) -> Self {
        Self {
            owner: owner.to_owned(),
            target: None,
        }
    }
}

/// Per-domain change counters: caches on hot paths key on them, so one
/// integer comparison tells a reader whether its cached view is current.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainVersions {
    /// Topics, schemas and fan-out links.
    pub topics: u64,
    /// Partition placements.
    pub assignments: u64,
    /// Membership, addresses, alive/dead and draining (not bare heartbeats,
    /// which change no routing decision).
    pub members: u64,
    /// Users, passwords and grants.
    pub users: u64,
    /// Remotes, their credentials and the cluster remote key. Remote-child
    /// links count as topics. Absent from the JSON of older builds.
    #[serde(default)]
    pub remotes: u64,
}

/// The replicated cluster metadata. Changed only by [`Metastore::apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metastore {
    pub(super) topics: BTreeMap<String, Topic>,
    /// Per topic, one slot per partition; `None` = waiting for an owner.
    pub(super) assignments: BTreeMap<String, Vec<Option<Assignment>>>,
    pub(super) members: BTreeMap<String, Member>,
    /// Ids of members removed by a completed decommission: a heartbeat
    /// under one of them is refused, so a straggling process cannot bring
    /// the member back. A fresh registration clears the id. Absent from
    /// the JSON of older builds.
    #[serde(default)]
    pub(super) removed: BTreeSet<String>,
    pub(super) users: BTreeMap<String, User>,
    /// Remotes by name. Absent from the JSON of older builds.
    #[serde(default)]
    pub(super) remotes: BTreeMap<String, Remote>,
    /// The cluster remote key, set with the first remote.
    #[serde(default)]
    pub(super) remote_key: Option<RemoteKey>,
    /// Remote-child links by stub topic name.
    #[serde(default)]
    pub(super) remote_links: BTreeMap<String, RemoteLink>,
    pub(super) versions: DomainVersions,
    pub(super) applied_index: u64,
}

impl Metastore {
    /// An empty metastore (a cluster's first state).
    pub fn new() -> Self {
        Self::default()
    }

    /// The remote called `name`.
    pub fn remote(&self, name: &str) -> Option<&Remote> {
        self.remotes.get(name)
    }

    /// Every remote, in name order.
    pub fn remotes(&self) -> impl Iterator<Item = &Remote> {
        self.remotes.values()
    }

    /// The cluster remote key, once a remote was added.
    pub fn remote_key(&self) -> Option<&RemoteKey> {
        self.remote_key.as_ref()
    }

    /// The remote link of stub topic `child`.
    pub fn remote_link(&self, child: &str) -> Option<&RemoteLink> {
        self.remote_links.get(child)
    }

    /// Every remote link with its stub's name, in name order.
    pub fn remote_links(&self) -> impl Iterator<Item = (&str, &RemoteLink)> {
        self.remote_links
            .iter()
            .map(|(child, link)| (child.as_str(), link))
    }

    /// The stubs whose links use remote `name`, in name order.
    pub fn links_of_remote(&self, name: &str) -> Vec<String> {
        self.remote_links
            .iter()
            .filter(|(_, link)| link.remote == name)
            .map(|(child, _)| child.clone())
            .collect()
    }

    /// The topic called exactly `name`.
    pub fn topic(&self, name: &str) -> Option<&Topic> {
        self.topics.get(name)
    }

    /// Every topic, in name order.
    pub fn topics(&self) -> impl Iterator<Item = &Topic> {
        self.topics.values()
    }

    /// The topic whose name equals `name` ignoring ASCII letter case.
    pub fn topic_ignoring_case(&self, name: &str) -> Option<&Topic> {
        self.topics
            .values()
            .find(|topic| topic.name.eq_ignore_ascii_case(name))
    }

    /// A topic's partition placements, one slot per partition.
    pub fn assignments(&self, topic: &str) -> Option<&[Option<Assignment>]> {
        self.assignments.get(topic).map(Vec::as_slice)
    }

    /// The owner of one partition, if it has one.
    pub fn owner(&self, topic: &str, partition: u32) -> Option<&str> {
        let slots = self.assignments.get(topic)?;
        let slot = slots.get(usize::try_from(partition).ok()?)?;
        slot.as_ref().map(|assignment| assignment.owner.as_str())
    }

    /// The member with id `id`.
    pub fn member(&self, id: &str) -> Option<&Member> {
        self.members.get(id)
    }

    /// Every member, in id order.
    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    /// Whether `id` names a member removed by a decommission (and not
    /// registered again since).
    pub fn is_removed(&self, id: &str) -> bool {
        self.removed.contains(id)
    }

    /// Ids of removed members, in order.
    pub fn removed_members(&self) -> impl Iterator<Item = &str> {
        self.removed.iter().map(String::as_str)
    }

    /// Every partition with a move target: (topic, partition, placement),
    /// topics in name order, partitions in index order.
    pub fn moves(&self) -> impl Iterator<Item = (&str, u32, &Assignment)> {
        self.assignments.iter().flat_map(|(topic, slots)| {
            slots.iter().enumerate().filter_map(move |(index, slot)| {
                let assignment = slot.as_ref().filter(|a| a.target.is_some())?;
                Some((topic.as_str(), index as u32, assignment))
            })
        })
    }

    /// The placement of one partition, if it has an owner.
    pub fn assignment(&self, topic: &str, partition: u32) -> Option<&Assignment> {
        let slots = self.assignments.get(topic)?;
        slots.get(usize::try_from(partition).ok()?)?.as_ref()
    }

    /// How many partitions member `id` owns, and how many moves are headed
    /// to it.
    pub fn holdings(&self, id: &str) -> (usize, usize) {
        let slots = self.assignments.values().flatten().flatten();
        slots.fold((0, 0), |(owned, inbound), assignment| {
            (
                owned + usize::from(assignment.owner == id),
                inbound + usize::from(assignment.target.as_deref() == Some(id)),
            )
        })
    }

    /// The user called `username`.
    pub fn user(&self, username: &str) -> Option<&User> {
        self.users.get(username)
    }

    /// Every user, in name order.
    pub fn users(&self) -> impl Iterator<Item = &User> {
        self.users.values()
    }

    /// The change counters.
    pub fn versions(&self) -> DomainVersions {
        self.versions
    }

    /// The index of the last log entry applied (refused ones included).
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// Bytes of schema history held by all topics.
    pub fn schema_bytes(&self) -> u64 {
        self.topics.values().map(Topic::schema_bytes).sum()
    }
}
