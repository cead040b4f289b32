//! openraft's network: Raft RPCs to other control nodes over the cluster
//! transport's control lane.

use std::net::SocketAddr;
use std::sync::Arc;

use narad_protocol::codec::{decode_message, encode_message};
use narad_protocol::{CallError, DecodeError, Lane, Message, Node, Opcode, Request, Status};
use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use super::messages::{
    AppendEntries, AppendEntriesAnswer, InstallSnapshot, InstallSnapshotAnswer, Vote, VoteAnswer,
    opcodes,
};
use crate::raft::{ControlNodeId, TypeConfig};

/// Makes one [`PeerClient`] per peer; all share the node's transport.
#[derive(Debug, Clone)]
pub struct RaftNetworkClients {
    node: Arc<Node>,
    id: ControlNodeId,
}

impl RaftNetworkClients {
    /// Clients of control node `id` that call through `node`.
    pub fn new(node: Arc<Node>, id: ControlNodeId) -> Self {
        Self { node, id }
    }
}

impl RaftNetworkFactory<TypeConfig> for RaftNetworkClients {
    type Network = PeerClient;

    async fn new_client(&mut self, target: ControlNodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            node: self.node.clone(),
            id: self.id,
            target,
            addr: node.addr.clone(),
        }
    }
}

/// Raft RPCs to one peer.
#[derive(Debug)]
pub struct PeerClient {
    node: Arc<Node>,
    /// This node.
    id: ControlNodeId,
    target: ControlNodeId,
    addr: String,
}

/// What can go wrong below Raft: the transport's failures, or an address
/// that does not resolve.
#[derive(Debug, thiserror::Error)]
enum PeerError {
    #[error("cluster address {0:?} of a peer does not resolve")]
    Address(String),
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("answer unreadable: {0}")]
    Answer(DecodeError),
}

impl PeerClient {
    async fn resolve(&self) -> Result<SocketAddr, PeerError> {
        if let Ok(addr) = self.addr.parse() {
            return Ok(addr);
        }
        tokio::net::lookup_host(self.addr.as_str())
            .await
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| PeerError::Address(self.addr.clone()))
    }

    /// Sends `request` and reads the peer's answer.
    async fn exchange<Q: Message, A: Message>(
        &self,
        opcode: Opcode,
        request: &Q,
        option: &RPCOption,
    ) -> Result<A, PeerError> {
        let addr = self.resolve().await?;
        let request = Request::new(opcode, encode_message(request));
        let response = self
            .node
            .call_with_timeout(addr, Lane::Control, request, option.hard_ttl())
            .await?;
        decode_message(response.body).map_err(PeerError::Answer)
    }

    fn rpc_error<E: std::error::Error>(
        &self,
        action: RPCTypes,
        error: PeerError,
    ) -> RPCError<ControlNodeId, BasicNode, E> {
        rpc_error(self.id, self.target, action, error)
    }

    fn remote<E: std::error::Error>(&self, error: E) -> RPCError<ControlNodeId, BasicNode, E> {
        RPCError::RemoteError(RemoteError::new(self.target, error))
    }
}

/// What openraft is told of a call to `target` that failed below Raft.
///
/// A peer that is not there (its address does not resolve, it does not
/// answer a dial, its connection was lost: not started yet, stopped,
/// crashed) or whose Raft is not (`503`: starting, stopping) is
/// `Unreachable`, which openraft retries after a backoff; a call
/// that ran out its deadline is a `Timeout`, as openraft's own deadline
/// reports it. Both are expected while voters start or one stops, and the
/// log says so at `warn` (`narad` binary, `raft_log`). Anything else (a
/// failed cluster authentication, a refused stream, an unreadable answer)
/// is a `NetworkError`: a fault to fix, logged as an error.
fn rpc_error<E: std::error::Error>(
    id: ControlNodeId,
    target: ControlNodeId,
    action: RPCTypes,
    error: PeerError,
) -> RPCError<ControlNodeId, BasicNode, E> {
    match &error {
        PeerError::Address(_)
        | PeerError::Call(CallError::Dial { .. } | CallError::ConnectionLost { .. }) => {
            RPCError::Unreachable(Unreachable::new(&error))
        }
        PeerError::Call(CallError::Rejected(refusal)) if refusal.status == Status::UNAVAILABLE => {
            RPCError::Unreachable(Unreachable::new(&error))
        }
        PeerError::Call(CallError::Timeout { after }) => RPCError::Timeout(Timeout {
            action,
            id,
            target,
            timeout: *after,
        }),
        _ => RPCError::Network(NetworkError::new(&error)),
    }
}

type RaftResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<ControlNodeId, BasicNode, RaftError<ControlNodeId, E>>>;

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RaftResult<AppendEntriesResponse<ControlNodeId>> {
        let AppendEntriesAnswer(answer) = self
            .exchange(opcodes::RAFT_APPEND_ENTRIES, &AppendEntries(rpc), &option)
            .await
            .map_err(|e| self.rpc_error(RPCTypes::AppendEntries, e))?;
        answer.map_err(|e| self.remote(e))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RaftResult<InstallSnapshotResponse<ControlNodeId>, InstallSnapshotError> {
        let InstallSnapshotAnswer(answer) = self
            .exchange(
                opcodes::RAFT_INSTALL_SNAPSHOT,
                &InstallSnapshot(rpc),
                &option,
            )
            .await
            .map_err(|e| self.rpc_error(RPCTypes::InstallSnapshot, e))?;
        answer.map_err(|e| self.remote(e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<ControlNodeId>,
        option: RPCOption,
    ) -> RaftResult<VoteResponse<ControlNodeId>> {
        let VoteAnswer(answer) = self
            .exchange(opcodes::RAFT_VOTE, &Vote(rpc), &option)
            .await
            .map_err(|e| self.rpc_error(RPCTypes::Vote, e))?;
        answer.map_err(|e| self.remote(e))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    type Mapped = RPCError<ControlNodeId, BasicNode, openraft::error::Infallible>;

    fn mapped(error: PeerError) -> Mapped {
        rpc_error(1, 2, RPCTypes::Vote, error)
    }

    fn peer() -> SocketAddr {
        "127.0.0.1:7000".parse().expect("address")
    }

    #[test]
    fn a_peer_that_does_not_answer_a_dial_is_unreachable() {
        let dial = CallError::Dial {
            peer: peer(),
            reason: "timed out".to_owned(),
        };
        assert!(matches!(mapped(dial.into()), RPCError::Unreachable(_)));
        let address = PeerError::Address("nowhere:1".to_owned());
        assert!(matches!(mapped(address), RPCError::Unreachable(_)));
    }

    #[test]
    fn a_peer_whose_connection_was_lost_is_unreachable() {
        let lost = CallError::ConnectionLost {
            peer: peer(),
            reason: "timed out".to_owned(),
        };
        assert!(matches!(mapped(lost.into()), RPCError::Unreachable(_)));
    }

    #[test]
    fn a_peer_whose_raft_is_not_running_is_unreachable() {
        let stopping = CallError::Rejected(narad_protocol::RpcError::unavailable(
            "control node stopping",
        ));
        assert!(matches!(mapped(stopping.into()), RPCError::Unreachable(_)));
    }

    #[test]
    fn a_call_past_its_deadline_is_a_timeout_of_that_rpc() {
        let after = Duration::from_millis(750);
        let RPCError::Timeout(timeout) = mapped(CallError::Timeout { after }.into()) else {
            panic!("not a timeout");
        };
        let expected = Timeout {
            action: RPCTypes::Vote,
            id: 1,
            target: 2,
            timeout: after,
        };
        assert_eq!(timeout, expected);
    }

    #[test]
    fn a_failed_authentication_is_a_network_error() {
        let refused = CallError::Auth {
            peer: peer(),
            reason: "peer failed to prove the cluster secret".to_owned(),
        };
        assert!(matches!(mapped(refused.into()), RPCError::Network(_)));
    }
}
