//! A data node's node-to-node RPC: the seam where commits to partitions
//! owned by other data nodes plug in.
//!
//! Today the data node's cluster socket serves no operation of its own (an
//! empty router answers every opcode `400 unsupported rpc operation`), and a
//! commit to another node's partition fails at once ([`NoRemoteTarget`]),
//! so the dispatcher probes that owner and reroutes the records to a local
//! partition of the same topic after its grace. The remote commit path
//! (`CommitProduceBatch` over QUIC) replaces both functions: the router
//! gains the serving side, [`remote_commit_target`] returns the calling
//! side. Nothing else in `narad data` changes when it does.

use std::sync::Arc;

use narad_dataplane::dispatch::{CommitTarget, NoRemoteTarget};
use narad_protocol::Router;

/// The operations this data node serves to other nodes.
pub(crate) fn rpc_router() -> Router {
    Router::new()
}

/// How this node's dispatcher commits to partitions other nodes own.
pub(crate) fn remote_commit_target() -> Arc<dyn CommitTarget> {
    Arc::new(NoRemoteTarget)
}
