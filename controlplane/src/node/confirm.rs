//! Leader confirmation: before anything destructive (discarding WAL records
//! of a deleted topic, removing a stale incarnation's directory, anchoring
//! fan-out cursors) a data node asks the leader, which first proves it still
//! leads and has applied everything committed before the question
//! (openraft's `ensure_linearizable`: a heartbeat round to a quorum, then
//! waiting for apply), and only then reads its state. A follower forwards
//! the question to the leader once.

use narad_protocol::{Inbound, Response, RpcError};
use openraft::ServerState;

use super::propose::call_leader;
use super::runtime::Shared;
use super::wire::{ConfirmAnswer, ConfirmQuestion, ConfirmRequest};
use crate::network::messages::opcodes;
use narad_meta::Metastore;

/// Whether the answer to `question` is "still current" in `state`.
fn is_current(state: &Metastore, question: &ConfirmQuestion) -> bool {
    match question {
        ConfirmQuestion::Incarnation { name, id } => {
            state.topic(name).is_some_and(|topic| topic.id == *id)
        }
        ConfirmQuestion::AttachEpoch { child, epoch } => state
            .topic(child)
            .and_then(|topic| topic.parent.as_ref())
            .is_some_and(|link| link.attach_epoch == *epoch),
    }
}

/// Serves `LeaderConfirm`.
pub(super) async fn serve(shared: &Shared, inbound: Inbound) -> Result<Response, RpcError> {
    let request: ConfirmRequest = inbound.message()?;
    let answer = if shared.raft.metrics().borrow().state == ServerState::Leader {
        confirm(shared, &request.question).await?
    } else if request.forwarded {
        return Err(RpcError::unavailable("not the leader"));
    } else {
        forward(shared, request).await?
    };
    Ok(Response::message(&answer))
}

async fn confirm(shared: &Shared, question: &ConfirmQuestion) -> Result<ConfirmAnswer, RpcError> {
    let read_log_id = shared
        .raft
        .ensure_linearizable()
        .await
        .map_err(|e| RpcError::unavailable(format!("leadership not confirmed: {e}")))?;
    let read_index = read_log_id.map_or(0, |log_id| log_id.index);
    let current = shared.view.read(|state| is_current(state, question));
    Ok(ConfirmAnswer {
        current,
        read_index,
    })
}

async fn forward(shared: &Shared, request: ConfirmRequest) -> Result<ConfirmAnswer, RpcError> {
    let message = ConfirmRequest {
        forwarded: true,
        ..request
    };
    call_leader(shared, opcodes::LEADER_CONFIRM, &message).await
}
