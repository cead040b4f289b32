//! A control node outside the initial peer list joins a running cluster: it
//! asks the peers until the leader adds it as a learner, waits for it to
//! catch up, and promotes it to voter.

use std::collections::BTreeSet;
use std::time::Duration;

use narad_protocol::{Inbound, Lane, Response, RpcError};
use openraft::{BasicNode, ChangeMembers};
use tracing::{info, warn};

use super::propose::{leader_address, resolve};
use super::runtime::Shared;
use super::wire::{JoinAnswer, JoinRequest};
use crate::network::messages::opcodes;

/// The spec's join sweep: every 2 s until admitted.
const JOIN_RETRY: Duration = Duration::from_secs(2);
/// Adding a learner waits until it caught up with the leader's log.
const JOIN_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The joiner's loop: ends once a peer answered that this node is a voter.
pub(super) async fn run(shared: std::sync::Arc<Shared>) {
    let request = JoinRequest {
        id: shared.config.node_id,
        addr: shared.config.advertise_addr.clone(),
        forwarded: false,
    };
    loop {
        for peer in &shared.config.peers {
            match ask(&shared, &peer.addr, &request).await {
                Ok(answer) => {
                    info!(via = peer.id, ?answer, "joined the control cluster");
                    return;
                }
                Err(reason) => info!(via = peer.id, %reason, "join attempt failed"),
            }
        }
        tokio::time::sleep(JOIN_RETRY).await;
    }
}

async fn ask(shared: &Shared, addr: &str, request: &JoinRequest) -> Result<JoinAnswer, String> {
    let peer = resolve(addr)
        .await
        .ok_or_else(|| format!("{addr:?} does not resolve"))?;
    let request = narad_protocol::Request::new(
        opcodes::JOIN_CLUSTER,
        narad_protocol::codec::encode_message(request),
    );
    let response = shared
        .transport
        .call_with_timeout(peer, Lane::Control, request, JOIN_CALL_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    narad_protocol::codec::decode_message(response.body).map_err(|e| e.to_string())
}

/// Serves `JoinCluster`: a follower forwards it to the leader once; the
/// leader adds the node as a learner (waiting until it caught up), then
/// makes it a voter.
pub(super) async fn serve(shared: &Shared, inbound: Inbound) -> Result<Response, RpcError> {
    let request: JoinRequest = inbound.message()?;
    let answer = if shared.raft.metrics().borrow().state == openraft::ServerState::Leader {
        admit(shared, &request).await?
    } else {
        if request.forwarded {
            return Err(RpcError::unavailable("not the leader"));
        }
        let (leader, addr) = leader_address(shared)?;
        let forwarded = JoinRequest {
            forwarded: true,
            ..request
        };
        ask(shared, &addr, &forwarded).await.map_err(|reason| {
            RpcError::unavailable(format!("forward to leader {leader}: {reason}"))
        })?
    };
    Ok(Response::message(&answer))
}

async fn admit(shared: &Shared, request: &JoinRequest) -> Result<JoinAnswer, RpcError> {
    let is_voter = shared
        .raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .any(|id| id == request.id);
    if is_voter {
        return Ok(JoinAnswer::Voter);
    }
    info!(id = request.id, addr = %request.addr, "adding a learner");
    shared
        .raft
        .add_learner(request.id, BasicNode::new(request.addr.clone()), true)
        .await
        .map_err(|e| RpcError::unavailable(format!("add learner: {e}")))?;
    let voters = ChangeMembers::AddVoterIds(BTreeSet::from([request.id]));
    shared
        .raft
        .change_membership(voters, false)
        .await
        .map_err(|e| {
            warn!(id = request.id, error = %e, "promotion failed");
            RpcError::unavailable(format!("promote: {e}"))
        })?;
    info!(id = request.id, "learner promoted to voter");
    Ok(JoinAnswer::Promoted)
}
