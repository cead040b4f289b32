//! The data node's local replica of the cluster metadata.
//!
//! The control plane streams a full snapshot, then ordered changes, each
//! stamped with the log index it was applied at. [`MetadataReplica`]
//! applies them to its own copy of the metastore with the metastore's own
//! `apply` (`narad_meta`), the same one the control plane's Raft state
//! machine runs, and keeps the newest [`MetadataView`] behind one `Arc`
//! swap: a reader (a produce, the dispatcher) takes one consistent view
//! and never sees half a batch. It is the dispatcher's
//! [`crate::dispatch::Topology`].
//!
//! The view reads the metastore's own types; what it adds is derived once
//! per change for the hot paths ([`TopicMeta`]: numeric owners and parsed
//! schemas). Whoever links the planes feeds it: `narad data` and `narad
//! dev` from the control plane's metadata stream; a node without a
//! control plane, and tests, by applying commands to it directly
//! ([`MetadataReplica::apply_next`]).

mod replica;
mod topic;
mod view;

#[cfg(test)]
mod measure_tests;

pub use narad_meta::{Grant, GrantAction, User};
pub use replica::MetadataReplica;
pub use topic::{TopicMeta, TopicSchema};
pub use view::{Member, MetadataView};
