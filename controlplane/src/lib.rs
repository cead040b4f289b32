//! The Narad control plane, run as `narad control`.
//!
//! This crate will own the openraft node (log, vote and state machine
//! persisted in redb), the pure metastore state machine (topics with
//! incarnation ids, schemas, partition assignments, data-node membership,
//! users and grants), the controller that runs on the leader (assignment,
//! liveness, dead marking), the metadata stream that data nodes subscribe to,
//! the admin service, and leader-confirmation barriers.
//!
//! Guarantees it is built to give: a change is answered only once it is
//! committed by a Raft majority and applied by the answering node; a leader
//! confirmation reflects a linearizable read.
//!
//! It never touches partition data: it depends on `narad-protocol` only.
//!
//! Parts: [`metastore`] is the state machine (`Metastore::apply(command,
//! context) -> outcome`, deterministic, no I/O, serializable for
//! snapshots); [`controller`] holds the leader's decisions (placement, dead
//! marking with election grace and breaker) as a pure function of the state
//! and the time; [`raft`] is the openraft type configuration (a log entry
//! carries one metastore command); [`store`] persists the Raft log, the vote
//! and the state machine's snapshots in redb and passes openraft's storage
//! suite. See `docs/internals/controlplane.md`.

pub mod controller;
pub mod metastore;
pub mod network;
pub mod node;
pub mod raft;
pub mod store;
