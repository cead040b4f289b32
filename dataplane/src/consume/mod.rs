//! The consume path: leases over each owned partition (the in-flight
//! shard), long polls, replay reads, acks, extends and nacks, and consumer
//! state that survives restarts.
//!
//! - [`shard`] is the pure lease state machine of one partition;
//! - [`service`] serves consumes and settles over the node's partition
//!   logs, parking long polls in [`waiters`];
//! - [`release`] decides when an idle shard is let go, so its log can be
//!   closed;
//! - [`ahead`] persists each partition's frontier and acked-ahead set;
//! - [`front`] routes each consume, replay and settle to this node's
//!   service or to the partition's owner, for the HTTP handlers;
//! - [`handle`] and [`render`] are the receipt handle and the message JSON
//!   of the HTTP API.

pub mod ahead;
pub mod handle;
pub mod release;
pub mod render;
pub mod service;
pub mod shard;
pub mod waiters;

#[cfg(test)]
mod release_tests;
#[cfg(test)]
mod service_reads_tests;
#[cfg(test)]
mod service_tests;
#[cfg(test)]
mod shard_tests;
