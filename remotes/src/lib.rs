//! Remotes (spec §1.10 and §4, v3.2): a topic of another Narad cluster
//! attached as a fan-out child of a local parent.
//!
//! This crate holds what a data node needs to talk to another cluster and
//! nothing about this cluster's metadata: sealing a remote's password under
//! the cluster secret, the outbound HTTPS client and its address guard, and
//! shipping a cursor's records to a remote topic. The metastore's records
//! of remotes and links live in `narad_meta`; the routes and the cursors
//! that use this crate live in `narad_dataplane`.

pub mod seal;
pub mod url;
