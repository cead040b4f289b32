//! The Narad data plane, run as `narad data`.
//!
//! This crate owns the client HTTP API, the accept stage (validation,
//! partition choice, staging into the ingress WAL), the dispatcher that
//! commits WAL records to partition owners, the commit combiner on the
//! owner, and the consume path on the owner (leases, long polls, acks,
//! replay reads, and consumer positions that survive restarts), and the
//! forwarding of consumes and acks to partitions another node owns
//! ([`forward`]), and fan-out into child topics ([`fanout`]).
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
