//! The Narad data plane, run as `narad data`.
//!
//! This crate will own the client HTTP API, the accept stage (validation,
//! partition choice, staging into the ingress WAL), the dispatcher that
//! commits WAL records to partition owners, the commit combiner on the owner,
//! the consume path (leases, acks, replay, consumer state), fan-out, and the
//! node-to-node RPCs carried by `narad-protocol`.
//!
//! Guarantees it is built to give: a `202` is answered only after the message
//! is fsynced in this node's ingress WAL, and no crash of any node loses it; a
//! message becomes visible only after its partition owner appended, fsynced,
//! read back and CRC-checked it.
//!
//! It does not run Raft: it follows the control plane through the metadata
//! stream and asks it for leader confirmation before anything destructive.
//!
//! Status: only the dispatcher's decision logic ([`dispatch`]) exists; the HTTP
//! API, accept stage, commit stage and consume path are not built yet.

pub mod dispatch;
