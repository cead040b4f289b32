//! The control node process (`narad control`): openraft over the redb store
//! and the cluster transport, bootstrap or join, the proposer API, the
//! controller loop on the leader, and `/healthz`, `/readyz`, `/metrics`.
//!
//! A change is answered only after Raft committed it and the answering node
//! applied it: a follower forwards the proposal to the leader (one hop) and
//! then waits until its own replica reached the leader's answer index.

mod apply_stall;
mod call_metrics;
pub mod client;
pub mod config;
mod confirm;
mod controller_loop;
mod http;
mod join;
mod members;
mod metadata;
#[cfg(test)]
mod metrics_tests;
mod propose;
mod runtime;
mod upgrade_gate;
pub mod wire;

pub use client::ControlClient;
pub use config::{ConfigError, ControlConfig};

pub use propose::ProposeError;
pub use runtime::{ControlNode, StartError};
