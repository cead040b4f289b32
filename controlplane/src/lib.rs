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
//! Status: the two pure parts exist. [`metastore`] is the state machine
//! (`Metastore::apply(command, context) -> outcome`, deterministic, no I/O,
//! serializable for snapshots); [`controller`] holds the leader's decisions
//! (placement, dead marking with election grace and breaker) as a pure
//! function of the state and the time. Not built yet: the openraft node and
//! its redb storage, the cluster transport binding, the metadata stream,
//! leader confirmation, the admin services and the `narad control` process.
//! See `docs/internals/controlplane.md`.

pub mod controller;
pub mod metastore;
