//! The Narad data plane, run as `narad data`.
//!
//! Its rooms, from the top down:
//! - [`node`]: one data node, wired; incarnation housekeeping and the end
//!   of its own decommission.
//! - [`http`]: the client HTTP API; [`consume_front`] routes a consume, a
//!   replay or a settle to this node's consume service or to the owner.
//! - [`status`]: what a node reports of itself to the cluster listings.
//! - [`moves`]: partition moves (copy, handoff, flip) and reclaiming what
//!   moved away; [`forward`]: consumes, acks, replays and statistics of
//!   partitions another node owns; [`remote`]: commits to them.
//! - [`consume`]: leases, long polls, acks, replay reads and consumer
//!   positions that survive restarts, on the owner; [`commit`]: the commit
//!   combiner on the owner; [`fanout`]: copying parent records into child
//!   topics.
//! - [`partitions`]: the partition store the rooms above take their logs
//!   from: the log registry and idle eviction, incarnations and quarantine,
//!   handoff freezes, retention, and the poller exporting every owned
//!   partition's lag and size.
//! - [`ingress`]: the accept stage (validation, partition choice, staging
//!   into the ingress WAL); [`dispatch`]: the dispatcher that commits WAL
//!   records to partition owners; [`admin`]: topic and user changes.
//! - [`metadata`]: the local replica of the cluster metadata;
//!   [`topology`], [`metrics`]: the ground everything stands on.
//!
//! Time comes from the node's clock ([`narad_clock::Clock`]), never
//! from the process's clocks directly, so tests run on a manual one.
//!
//! Guarantees it is built to give: a `202` is answered only after the message
//! is fsynced in this node's ingress WAL, and no crash of any node loses it; a
//! message becomes visible only after its partition owner appended, fsynced,
//! read back and CRC-checked it; a message is delivered until a consumer acks
//! it or retention deletes it (at least once: lapsed leases, nacks and
//! crashes redeliver).
//!
//! It does not run Raft and does not depend on the control plane crate: it
//! follows the control plane through a local metadata replica
//! ([`metadata::MetadataReplica`]) and asks a leader-confirmation trait
//! before anything destructive.

pub mod admin;
pub mod commit;
pub mod consume;
pub mod consume_front;
pub mod credentials;
pub mod dispatch;
pub mod fanout;
pub mod forward;
pub mod http;
pub mod ingress;
pub mod metadata;
pub mod metrics;
pub mod moves;
pub mod node;
pub mod partitions;
pub mod remote;
pub mod remote_children;
pub mod status;
pub mod topology;

#[cfg(test)]
mod disk_fault_tests;
#[cfg(test)]
mod e2e_tests;
#[cfg(test)]
mod node_sim;
#[cfg(test)]
mod testing;
