//! Raft between control nodes over the cluster transport (`narad-protocol`):
//! typed messages with their opcodes ([`messages`]) and their binary field
//! encodings, openraft's network factory on the calling side ([`client`]),
//! and the routes that serve Raft RPCs ([`service`]). Every stream is
//! authenticated by the transport (the cluster secret, or the insecure dev
//! mode); nothing here trusts a peer beyond that.

pub mod client;
pub mod messages;
pub(crate) mod metastore_fields;
pub(crate) mod raft_fields;
pub mod service;

#[cfg(test)]
mod codec_tests;

pub use client::RaftNetworkClients;
pub use service::{LeaderContact, RaftGate, RaftSlot, raft_routes};
