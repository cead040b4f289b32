//! The Narad control plane, run as `narad control`.
//!
//! It owns the openraft node (log, vote and state machine persisted in
//! redb), the pure metastore state machine (topics with incarnation ids,
//! schemas, partition assignments, data-node membership, users and grants),
//! the controller that runs on the leader (assignment, liveness, dead
//! marking), the metadata stream that data nodes subscribe to, and leader
//! confirmation. Client admin requests reach it as commands through the
//! generic proposer API; the translation from HTTP requests lives with the
//! caller (the `narad` binary's bridge, used by `narad data` and
//! `narad dev`).
//!
//! Guarantees: a change is answered only once it is committed by a Raft
//! majority and applied by the answering node; the vote and every
//! acknowledged log entry are fsynced before openraft is told; a leader
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
//! suite; [`network`] carries Raft over the cluster transport; [`node`] is
//! the `narad control` process (bootstrap and join, the proposer API, the
//! controller loop, the metadata stream, leader confirmation, health and
//! metrics). See `docs/internals/controlplane.md` (a map of the pages on
//! each part) and `docs/operations.md`.

pub mod controller;
pub mod network;
pub mod node;
pub mod raft;
pub mod store;
