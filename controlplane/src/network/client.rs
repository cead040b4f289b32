//! openraft's network: Raft RPCs to other control nodes over the cluster
//! transport's control lane.

use std::net::SocketAddr;
use std::sync::Arc;

use narad_protocol::codec::{decode_message, encode_message};
use narad_protocol::{CallError, Lane, Message, Node, Opcode, Request};
use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::messages::{AppendEntriesMessage, InstallSnapshotMessage, VoteMessage, opcodes};
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
    Answer(String),
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

    /// Sends `request` as message `M` and reads the peer's `Result` back.
    async fn exchange<M, Q, A, E>(
        &self,
        opcode: Opcode,
        wrap: impl FnOnce(&Q) -> Result<M, serde_json::Error>,
        request: &Q,
        option: &RPCOption,
    ) -> Result<Result<A, E>, PeerError>
    where
        M: Message + JsonBody,
        Q: Serialize,
        A: DeserializeOwned,
        E: DeserializeOwned,
    {
        let addr = self.resolve().await?;
        let message = wrap(request).map_err(|e| PeerError::Answer(e.to_string()))?;
        let request = Request::new(opcode, encode_message(&message));
        let response = self
            .node
            .call_with_timeout(addr, Lane::Control, request, option.hard_ttl())
            .await?;
        let answer: M =
            decode_message(response.body).map_err(|e| PeerError::Answer(e.to_string()))?;
        serde_json::from_slice(answer.json()).map_err(|e| PeerError::Answer(e.to_string()))
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

/// A message that is one JSON field.
pub(crate) trait JsonBody {
    fn json(&self) -> &[u8];
}

macro_rules! json_body {
    ($($name:ident),*) => {
        $(impl JsonBody for $name {
            fn json(&self) -> &[u8] {
                &self.json
            }
        })*
    };
}

json_body!(AppendEntriesMessage, VoteMessage, InstallSnapshotMessage);

type RaftResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<ControlNodeId, BasicNode, RaftError<ControlNodeId, E>>>;

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RaftResult<AppendEntriesResponse<ControlNodeId>> {
        let answer = self
            .exchange::<AppendEntriesMessage, _, _, RaftError<ControlNodeId>>(
                opcodes::RAFT_APPEND_ENTRIES,
                AppendEntriesMessage::of,
                &rpc,
                &option,
            )
            .await
            .map_err(|e| self.rpc_error(e))?;
        answer.map_err(|e| self.remote(e))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RaftResult<InstallSnapshotResponse<ControlNodeId>, InstallSnapshotError> {
        let answer = self
            .exchange::<InstallSnapshotMessage, _, _, RaftError<ControlNodeId, InstallSnapshotError>>(
                opcodes::RAFT_INSTALL_SNAPSHOT,
                InstallSnapshotMessage::of,
                &rpc,
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
        let answer = self
            .exchange::<VoteMessage, _, _, RaftError<ControlNodeId>>(
                opcodes::RAFT_VOTE,
                VoteMessage::of,
                &rpc,
                &option,
            )
            .await
            .map_err(|e| self.rpc_error(e))?;
        answer.map_err(|e| self.remote(e))
    }
}
