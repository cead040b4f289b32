//! Fan-out (spec §4): every record committed to a parent topic is copied
//! into each of its children from the child's attach point on, by cursors
//! that run on the node owning the parent partition.
//!
//! A cursor reads a slab of committed parent records, re-keys each into
//! the child's partitions, commits the buckets through the same durable
//! commit path as produce, and only after every bucket is acknowledged
//! advances its cursor file. A crash repeats the last slab (duplicates),
//! never skips one (gaps). Delay children hold each record until its
//! parent commit time plus the delay.
//!
//! [`FanoutStatus`] is where running cursors report their positions, for
//! the children listing's lag and the metrics.

pub mod cursor_file;
pub mod machine;
pub mod reconcile;
pub mod remote;
pub mod runtime;
pub mod shipping;
mod status;

pub use reconcile::FanoutRuntime;
pub use remote::{RemotePlane, RemoteReport, RemoteShipper, ShipOutcome, Shipment};
pub use runtime::FanoutParts;
pub use status::{CursorKey, CursorReport, FanoutStatus};

#[cfg(test)]
mod machine_tests;
#[cfg(test)]
mod node_tests;
#[cfg(test)]
mod remote_machine_tests;
