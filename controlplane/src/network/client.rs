//! openraft's network: Raft RPCs to other control nodes over the cluster
//! transport's control lane.

use std::net::SocketAddr;
use std::sync::Arc;

use narad_protocol::codec::{decode_message, encode_message};
use narad_protocol::{CallError, DecodeError, Lane, Message, Node, Opcode, Request};
use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
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
}

impl RaftNetworkClients {
    /// Clients that call through `node`.
    pub fn new(node: Arc<Node>) -> Self {
        Self { node }
    }
}

impl RaftNetworkFactory<TypeConfig> for RaftNetworkClients {
    type Network = PeerClient;

    async fn new_client(&mut self, target: ControlNodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            node: self.node.clone(),
            target,
            addr: node.addr.clone(),
        }
    }
}

/// Raft RPCs to one peer.
#[derive(Debug)]
pub struct PeerClient {
    node: Arc<Node>,
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
        error: PeerError,
    ) -> RPCError<ControlNodeId, BasicNode, E> {
        match &error {
            PeerError::Address(_) | PeerError::Call(CallError::Dial { .. }) => {
                RPCError::Unreachable(Unreachable::new(&error))
            }
            _ => RPCError::Network(NetworkError::new(&error)),
        }
    }

    fn remote<E: std::error::Error>(&self, error: E) -> RPCError<ControlNodeId, BasicNode, E> {
        RPCError::RemoteError(RemoteError::new(self.target, error))
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
            .map_err(|e| self.rpc_error(e))?;
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
            .map_err(|e| self.rpc_error(e))?;
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
            .map_err(|e| self.rpc_error(e))?;
        answer.map_err(|e| self.remote(e))
    }
}
