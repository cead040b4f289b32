//! Where data lives, as this node's metadata replica says: the partition a
//! record is committed to ([`Destination`]), the node that owns it
//! ([`Route`]) and the read-only view of the replica that answers both
//! ([`Topology`]).
//!
//! Every stage of the data plane (dispatch, commit, consume, forward, the
//! HTTP API and the metadata replica itself) speaks these nouns, so they sit
//! below all of them and depend on none.

use std::fmt;
use std::sync::Arc;

/// A partition of a topic: where a record is committed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Destination {
    /// Topic name.
    pub topic: Arc<str>,
    /// Partition index within the topic.
    pub partition: u32,
}

impl Destination {
    /// A destination of `topic`.
    pub fn new(topic: &str, partition: u32) -> Self {
        Self {
            topic: Arc::from(topic),
            partition,
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// Identity of a data node.
pub type NodeId = u64;

/// Where a destination's commits go, as the local metadata replica says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The partition has no owner yet (a topic not assigned yet).
    Unassigned,
    /// The partition's owner and whether membership reports it alive.
    Owner {
        /// The owning data node.
        node: NodeId,
        /// Whether the owner is this node (no byte budget applies).
        local: bool,
        /// Whether membership reports the owner alive.
        alive: bool,
    },
}

/// What the local metadata replica says of a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicView {
    /// Number of partitions.
    pub partitions: u32,
    /// The live incarnation id, if the topic has one.
    pub incarnation: Option<Arc<str>>,
}

/// The read-only view of the local metadata replica that the stages route
/// by (the dispatcher, commit, consume, forwarding, the HTTP API). Queried,
/// never mutated, and answered from memory: no call does I/O.
pub trait Topology {
    /// The topic under `name`, or `None` if the replica has no such topic.
    fn topic(&self, name: &str) -> Option<TopicView>;
    /// Where `destination`'s commits go.
    fn route(&self, destination: &Destination) -> Route;
    /// Whether the replica has reached the commit index the leader last
    /// reported: only then may "absent here" start a discard.
    fn caught_up(&self) -> bool;
}

/// The control plane's member id of data node `node`. The data plane keys
/// nodes by number and the metastore by the `cluster.node_id` text; a data
/// node registers its number as that text.
pub fn member_id(node: NodeId) -> String {
    node.to_string()
}

/// The data node a member id names; `None` for an id that is not a number
/// (no data node this plane routes to).
pub fn node_of(member: &str) -> Option<NodeId> {
    member.parse().ok()
}
