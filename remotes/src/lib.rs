//! Remotes (spec §1.10 and §4, v3.2): a topic of another Narad cluster
//! attached as a fan-out child of a local parent.
//!
//! This crate holds what a data node needs to talk to another cluster and
//! nothing about this cluster's metadata: sealing a remote's password under
//! the cluster secret, the outbound HTTPS client and its address guard, and
//! shipping a cursor's records to a remote topic. The metastore's records
//! of remotes and links live in `narad_meta`; the routes and the cursors
//! that use this crate live in `narad_dataplane`.
//!
//! Shipping, in the order a data node uses it:
//! - [`guard::AddressGuard`]: which addresses the client may connect to;
//! - [`client::RemoteClient::new`]`(&Target, AddressGuard, Arc<dyn Clock>)`:
//!   the HTTPS client of one remote;
//! - [`check::check`]`(&RemoteClient, topic) -> CheckReport`: the remote
//!   test and an attach's dry run, which also finds the target's
//!   [`ship::Capabilities`];
//! - [`ship::Shipper`]: one per remote per node, holding the remote's
//!   [`gate::Gate`] and chunk byte limit;
//!   [`ship::Shipper::ship`]`(&LinkIdentity, remote_topic, &[Record], lanes)
//!   -> ShipOutcome`; the cursor advances only on
//!   [`ship::ShipOutcome::Shipped`];
//! - [`state::LinkState`]: what a failure puts the link in.
//!
//!
//! Credentials and definitions, on the node that receives them:
//! - [`seal::Keyring`]: seals a remote's password under the cluster
//!   secret, opens it again (with the previous secret too);
//! - [`url`]: the rules of a remote's name, URL, password, CA and limits.
//!
//! `docs/internals/remotes.md` describes the wire, the link states and the
//! sealing.

pub mod check;
pub mod chunk;
pub mod client;
pub mod encode;
pub mod gate;
pub mod guard;
pub mod seal;
pub mod ship;
pub mod state;
pub mod url;
