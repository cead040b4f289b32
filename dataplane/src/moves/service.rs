//! The transfer operations on the cluster transport: this node serving
//! them as a move's source ([`TransferService`]), and reaching a source as
//! a move's target ([`QuicLinks`]).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use narad_protocol::transfer::{
    FenceHandoff, FetchSegmentChunk, HandoffFenced, HandoffPrepared, ListPartitionSegments,
    PartitionListing, PrepareHandoff, ReleaseHandoff, SegmentChunk,
};
use narad_protocol::{
    CallError, Inbound, Lane, Message, Node, Opcode, OperationLimit, Response, Router, RpcError,
};

use super::source::MoveSource;
use super::worker::{LinkError, LinkFuture, SourceLink};
use crate::remote::OwnerAddresses;
use crate::topology::node_of;

/// Transfer requests served at once (the spec's 8): each reads up to a
/// 4 MiB chunk from disk; more would take disk time from commits.
const TRANSFER_PERMITS: usize = 8;

const TRANSFER_LIMIT_NAME: &str = "transfer";

/// Serves opcodes 22, 23, 24, 26 and 27 for moves away from this node.
/// Routed before the data node runs; answers `503` until attached.
#[derive(Debug, Default)]
pub struct TransferService {
    source: OnceLock<Arc<MoveSource>>,
}

impl TransferService {
    /// A service not attached yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Starts serving from `source`.
    ///
    /// # Panics
    /// If called twice.
    pub fn attach(&self, source: Arc<MoveSource>) {
        assert!(
            self.source.set(source).is_ok(),
            "transfer service attached twice"
        );
    }

    /// `router` with the transfer opcodes served by this service.
    pub fn route(self: &Arc<Self>, router: Router) -> Router {
        let limit = OperationLimit::new(TRANSFER_LIMIT_NAME, TRANSFER_PERMITS);
        [
            Opcode::LIST_PARTITION_SEGMENTS,
            Opcode::FETCH_SEGMENT_CHUNK,
            Opcode::PREPARE_HANDOFF,
            Opcode::COMPLETE_MOVE,
            Opcode::ABORT_MOVE,
        ]
        .into_iter()
        .fold(router, |router, opcode| {
            let service = Arc::clone(self);
            router.route(opcode, limit, move |inbound: Inbound| {
                let service = Arc::clone(&service);
                async move { service.handle(inbound).await }
            })
        })
    }

    async fn handle(&self, inbound: Inbound) -> Result<Response, RpcError> {
        let source = Arc::clone(
            self.source
                .get()
                .ok_or_else(|| RpcError::unavailable("this data node does not serve moves yet"))?,
        );
        let opcode = inbound.request.opcode;
        let answer = tokio::task::spawn_blocking(move || match opcode {
            Opcode::LIST_PARTITION_SEGMENTS => {
                answer(source.list(&inbound.message::<ListPartitionSegments>()?))
            }
            Opcode::FETCH_SEGMENT_CHUNK => {
                answer(source.fetch(&inbound.message::<FetchSegmentChunk>()?))
            }
            Opcode::PREPARE_HANDOFF => {
                answer(source.prepare(&inbound.message::<PrepareHandoff>()?))
            }
            Opcode::COMPLETE_MOVE => answer(source.fence(&inbound.message::<FenceHandoff>()?)),
            Opcode::ABORT_MOVE => source
                .release(&inbound.message::<ReleaseHandoff>()?)
                .map(|()| Response::no_content()),
            other => Err(RpcError::unsupported_operation(other)),
        })
        .await;
        answer.unwrap_or_else(|error| {
            Err(RpcError::unavailable(format!(
                "transfer call failed: {error}"
            )))
        })
    }
}

fn answer<M: Message>(result: Result<M, RpcError>) -> Result<Response, RpcError> {
    result.map(|message| Response::message(&message))
}

/// Which sources a move's worker can reach.
pub trait LinkFactory: Send + Sync + std::fmt::Debug {
    /// A link to the data node with member id `source`, if it can be
    /// addressed.
    fn link(&self, source: &str) -> Option<Arc<dyn SourceLink>>;
}

/// Links over the cluster transport, to the RPC addresses the member
/// records give.
#[derive(Debug)]
pub struct QuicLinks {
    transport: Arc<Node>,
    addresses: Arc<dyn OwnerAddresses>,
}

impl QuicLinks {
    /// Links over `transport` to the nodes `addresses` knows.
    pub fn new(transport: Arc<Node>, addresses: Arc<dyn OwnerAddresses>) -> Self {
        Self {
            transport,
            addresses,
        }
    }
}

impl LinkFactory for QuicLinks {
    fn link(&self, source: &str) -> Option<Arc<dyn SourceLink>> {
        let addr = self.addresses.rpc_addr(node_of(source)?)?;
        Some(Arc::new(QuicLink {
            transport: Arc::clone(&self.transport),
            addr,
        }))
    }
}

/// One source over the cluster transport.
#[derive(Debug)]
struct QuicLink {
    transport: Arc<Node>,
    addr: SocketAddr,
}

impl QuicLink {
    async fn call<Q: Message, A: Message>(
        &self,
        opcode: Opcode,
        request: &Q,
    ) -> Result<A, LinkError> {
        self.transport
            .call_message(self.addr, Lane::Control, opcode, request)
            .await
            .map_err(link_error)
    }
}

fn link_error(error: CallError) -> LinkError {
    match error {
        CallError::Rejected(rejected) => LinkError::Refused {
            status: rejected.status.0,
            message: rejected.message,
        },
        other => LinkError::Unreachable(other.to_string()),
    }
}

impl SourceLink for QuicLink {
    fn list(&self, request: ListPartitionSegments) -> LinkFuture<'_, PartitionListing> {
        Box::pin(async move { self.call(Opcode::LIST_PARTITION_SEGMENTS, &request).await })
    }

    fn fetch(&self, request: FetchSegmentChunk) -> LinkFuture<'_, Bytes> {
        Box::pin(async move {
            let chunk: SegmentChunk = self.call(Opcode::FETCH_SEGMENT_CHUNK, &request).await?;
            Ok(chunk.data)
        })
    }

    fn prepare(&self, request: PrepareHandoff) -> LinkFuture<'_, HandoffPrepared> {
        Box::pin(async move { self.call(Opcode::PREPARE_HANDOFF, &request).await })
    }

    fn fence(&self, request: FenceHandoff) -> LinkFuture<'_, HandoffFenced> {
        Box::pin(async move { self.call(Opcode::COMPLETE_MOVE, &request).await })
    }

    fn release(&self, request: ReleaseHandoff) -> LinkFuture<'_, ()> {
        Box::pin(async move {
            let request = narad_protocol::Request::new(
                Opcode::ABORT_MOVE,
                narad_protocol::codec::encode_message(&request),
            );
            self.transport
                .call(self.addr, Lane::Control, request)
                .await
                .map(drop)
                .map_err(link_error)
        })
    }
}

/// Links that call a [`MoveSource`] in this process directly: the same
/// calls, without the transport. Tests put several nodes in one process
/// this way; `narad dev`, whose only data node has no peer, runs its
/// runner with none.
#[derive(Debug, Default)]
pub struct DirectLinks {
    sources: parking_lot::Mutex<std::collections::HashMap<String, Arc<MoveSource>>>,
}

impl DirectLinks {
    /// Makes `source` reachable as member `member`.
    pub fn insert(&self, member: &str, source: Arc<MoveSource>) {
        self.sources.lock().insert(member.to_owned(), source);
    }

    /// Makes member `member` unreachable.
    pub fn remove(&self, member: &str) {
        self.sources.lock().remove(member);
    }
}

impl LinkFactory for DirectLinks {
    fn link(&self, source: &str) -> Option<Arc<dyn SourceLink>> {
        let source = Arc::clone(self.sources.lock().get(source)?);
        Some(Arc::new(DirectLink { source }))
    }
}

#[derive(Debug)]
struct DirectLink {
    source: Arc<MoveSource>,
}

impl DirectLink {
    async fn run<T: Send + 'static>(
        &self,
        call: impl FnOnce(&MoveSource) -> Result<T, RpcError> + Send + 'static,
    ) -> Result<T, LinkError> {
        let source = Arc::clone(&self.source);
        tokio::task::spawn_blocking(move || call(&source))
            .await
            .map_err(|error| LinkError::Unreachable(error.to_string()))?
            .map_err(|rejected| LinkError::Refused {
                status: rejected.status.0,
                message: rejected.message,
            })
    }
}

impl SourceLink for DirectLink {
    fn list(&self, request: ListPartitionSegments) -> LinkFuture<'_, PartitionListing> {
        Box::pin(self.run(move |source| source.list(&request)))
    }

    fn fetch(&self, request: FetchSegmentChunk) -> LinkFuture<'_, Bytes> {
        Box::pin(self.run(move |source| source.fetch(&request).map(|chunk| chunk.data)))
    }

    fn prepare(&self, request: PrepareHandoff) -> LinkFuture<'_, HandoffPrepared> {
        Box::pin(self.run(move |source| source.prepare(&request)))
    }

    fn fence(&self, request: FenceHandoff) -> LinkFuture<'_, HandoffFenced> {
        Box::pin(self.run(move |source| source.fence(&request)))
    }

    fn release(&self, request: ReleaseHandoff) -> LinkFuture<'_, ()> {
        Box::pin(self.run(move |source| source.release(&request)))
    }
}
