//! The data node's local replica of the cluster metadata.
//!
//! The control plane streams a full snapshot, then ordered deltas, each
//! stamped with the log index it was applied at; [`MetadataReplica`] keeps
//! the newest state behind one `Arc` swap, so a reader (a produce, the
//! dispatcher) takes one consistent view with one lock-free-ish load and
//! never sees half a delta. It is the dispatcher's [`crate::topology::Topology`].
//!
//! The types here are the data plane's own: they carry what the data plane
//! needs (partition owners, incarnation ids, schemas, caps, users and
//! grants) and nothing of how the control plane stores them, so the data
//! plane does not depend on `narad-controlplane`. Whoever links both planes
//! feeds it: `narad dev` subscribes to the control plane's metadata stream
//! and converts each state it reaches (`cli/src/bridge/`); tests feed it
//! directly.

mod replica;
mod types;

pub use replica::MetadataReplica;
pub use types::{
    Grant, GrantAction, Member, MetadataDelta, MetadataSnapshot, RETENTION_MS_DEFAULT, TopicMeta,
    TopicSchema, User, VISIBILITY_TIMEOUT_MS_DEFAULT,
};
