//! Test harnesses shared by Narad's multi-process tests, and the workspace's
//! architecture checks.
//!
//! Integration tests that start real `narad` processes live in `tests/`
//! beside this file; crash and fault tests of a single crate live in that
//! crate.

pub mod cluster;
pub mod dependency_rules;
pub mod dev;
pub mod metrics_list;
pub mod placement;
pub mod relay;
pub mod remote_target;
pub mod stored;
pub mod tls;
pub mod tls_front;
