//! Registration and heartbeats of data nodes. The command carries the time
//! of the leader's clock (the clock the controller judges silence by), so a
//! follower forwards the report to the leader, which stamps and proposes it.

use std::time::{SystemTime, UNIX_EPOCH};

use narad_protocol::{Inbound, Response, RpcError};
use openraft::ServerState;

use super::propose::{call_leader, propose};
use super::runtime::Shared;
use super::wire::{MemberReport, MemberRequest};
use crate::network::messages::opcodes;
use crate::raft::Applied;
use narad_meta::{Command, Heartbeat, RegisterMember};

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

fn command(report: MemberReport) -> Command {
    let at_ms = now_ms();
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
        propose(shared, command(request.report), true).await?
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
