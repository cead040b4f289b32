//! The metadata stream for data nodes: a full snapshot, then the ordered
//! changes, each batch stamped with the applied index it brings the
//! subscriber to and the highest commit index this node knows of. Any
//! control node serves it from its own replica, so a subscriber can switch
//! nodes (across a leader change, say) and continue from its index.
//!
//! A snapshot travels as the metastore's binary state codec and a change as
//! its binary command codec (`narad_meta::codec`); the subscriber also reads
//! the bare JSON an older control node sends.

use std::sync::Arc;
use std::time::Duration;

use narad_protocol::metadata::{
    METADATA_BATCH_CHANGES_MAX, METADATA_WAIT_MS_MAX, MetadataBatch, MetadataFetch,
};
use narad_protocol::{Inbound, Response, RpcError};

use super::runtime::Shared;
use crate::store::Catchup;
use narad_meta::codec::encode_state;
use narad_meta::follow::changes_batch;

/// Serves one `MetadataFetch`: waits (bounded) while this replica has
/// nothing newer, then answers what the subscriber needs next.
pub(super) async fn serve(shared: &Arc<Shared>, inbound: Inbound) -> Result<Response, RpcError> {
    let fetch: MetadataFetch = inbound.message()?;
    let wait = Duration::from_millis(u64::from(fetch.wait_ms.min(METADATA_WAIT_MS_MAX)));
    if fetch.after_index > 0 && shared.view.applied_index() <= fetch.after_index {
        let mut applied = shared.view.watch_applied();
        let after = fetch.after_index;
        // Timing out is the ordinary answer of a quiet cluster.
        let _ = tokio::time::timeout(wait, applied.wait_for(|index| *index > after)).await;
    }
    let leader_commit_index = shared.status().leader_commit_index;
    let batch = match shared
        .view
        .catch_up(fetch.after_index, METADATA_BATCH_CHANGES_MAX as usize)
    {
        Catchup::Snapshot {
            metastore,
            applied_index,
        } => MetadataBatch {
            applied_index,
            leader_commit_index,
            snapshot: Some(encode_state(&metastore)),
            changes: Vec::new(),
        },
        Catchup::Changes {
            changes,
            applied_index,
        } => changes_batch(applied_index, leader_commit_index, &changes),
    };
    Ok(Response::message(&batch))
}
