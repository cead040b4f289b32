//! Registration and heartbeats of data nodes. The command carries the time
//! of the leader's clock (the clock the controller judges silence by), so a
//! follower forwards the report to the leader, which stamps and proposes it.

use narad_protocol::{Inbound, Response, RpcError};
use openraft::ServerState;

use super::propose::{call_leader, propose};
use super::runtime::Shared;
use super::wire::{MemberReport, MemberRequest};
use crate::network::messages::opcodes;
use crate::raft::Applied;
use narad_meta::{Command, Heartbeat, RegisterMember};

/// The command for `report`, stamped `at_ms` (Unix ms on the leader's
/// clock).
fn command(report: MemberReport, at_ms: u64) -> Command {
    match report {
        MemberReport::Register {
            id,
            http_addr,
            rpc_addr,
        } => Command::RegisterMember(RegisterMember {
            id,
            http_addr,
            rpc_addr,
            at_ms,
        }),
        MemberReport::Heartbeat { id } => Command::Heartbeat(Heartbeat { id, at_ms }),
    }
}

/// Serves `RegisterMember`: answered (with what applying it did) after the
/// answering node applied it.
pub(super) async fn serve(shared: &Shared, inbound: Inbound) -> Result<Response, RpcError> {
    let request: MemberRequest = inbound.message()?;
    let applied = if shared.raft.metrics().borrow().state == ServerState::Leader {
        let at_ms = shared.clock.unix_ms();
        propose(shared, command(request.report, at_ms), true).await?
    } else if request.forwarded {
        return Err(RpcError::unavailable("not the leader"));
    } else {
        let applied = forward(shared, request).await?;
        let mut watch = shared.view.watch_applied();
        let index = applied.index;
        let _ = tokio::time::timeout(
            super::runtime::PROPOSE_TIMEOUT,
            watch.wait_for(|i| *i >= index),
        )
        .await;
        applied
    };
    Ok(Response::message(&applied))
}

async fn forward(shared: &Shared, request: MemberRequest) -> Result<Applied, RpcError> {
    let message = MemberRequest {
        forwarded: true,
        ..request
    };
    call_leader(shared, opcodes::REGISTER_MEMBER, &message).await
}
