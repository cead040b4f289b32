//! The same run's cluster transport alone: two `narad_protocol::Node`s in
//! this process, on loopback with the cluster secret and the transport
//! settings a data node uses, one serving `FetchSegmentChunk` with a chunk
//! held in memory, the other fetching it in chunks of the size a move asks
//! for. No disk, no partition: what a move's copy could reach if reading
//! and writing cost nothing.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use narad_bench::cpu::cpu_seconds;
use narad_protocol::transfer::{CHUNK_BYTES_MAX, FetchSegmentChunk, PartitionRef, SegmentChunk};
use narad_protocol::{
    ClusterAuth, ClusterSecret, Inbound, Lane, Node, NodeConfig, Opcode, OperationLimit, Response,
    Router, RpcError,
};
use tokio::task::JoinSet;

/// The opcode's operation class on a data node, with its permits.
const TRANSFER_PERMITS: usize = 8;

/// What one pass over the transport carried.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct TransportRate {
    /// Fetches kept outstanding.
    pub(crate) in_flight: usize,
    /// Bytes carried, in 10^6 bytes a second.
    pub(crate) mb_per_s: f64,
    /// CPU seconds of this process (both nodes) per 10^9 bytes carried.
    pub(crate) core_s_per_gb: f64,
}

/// Pushes `bytes` through the transport once for each count in
/// `in_flight`, `CHUNK_BYTES_MAX` a fetch, on a runtime of 2 worker
/// threads (a data node's on this 2-core machine).
///
/// # Errors
/// When a node cannot bind or a fetch fails.
pub(crate) fn measure(bytes: u64, in_flight: &[usize]) -> io::Result<Vec<TransportRate>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let secret = ClusterSecret::new(b"move-bench-transport-baseline-secret".to_vec())
            .map_err(|error| io::Error::other(error.to_string()))?;
        let chunk = Bytes::from(vec![0x5a; CHUNK_BYTES_MAX as usize]);
        let router = Router::new().route(
            Opcode::FETCH_SEGMENT_CHUNK,
            OperationLimit::new("transfer", TRANSFER_PERMITS),
            move |inbound: Inbound| {
                let chunk = chunk.clone();
                async move { serve(&inbound, chunk) }
            },
        );
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let auth = ClusterAuth::Secret(secret);
        let server = Node::bind(NodeConfig::new(loopback, auth.clone()), router)
            .map_err(io::Error::other)?;
        let client = Arc::new(
            Node::bind(NodeConfig::new(loopback, auth), Router::new()).map_err(io::Error::other)?,
        );
        let peer = server.local_addr();
        // One fetch first: the dial and handshake are not what is measured.
        fetch(&client, peer).await?;
        let mut rates = Vec::new();
        for &count in in_flight {
            rates.push(push(&client, peer, bytes, count).await?);
        }
        drop(client);
        server.shutdown().await;
        Ok(rates)
    })
}

fn serve(inbound: &Inbound, chunk: Bytes) -> Result<Response, RpcError> {
    let request: FetchSegmentChunk = inbound.message()?;
    let len = (request.max_bytes as usize).min(chunk.len());
    Ok(Response::message(&SegmentChunk {
        data: chunk.slice(..len),
    }))
}

async fn fetch(client: &Node, peer: SocketAddr) -> io::Result<u64> {
    let request = FetchSegmentChunk {
        partition: PartitionRef {
            topic: "transport-baseline".into(),
            partition: 0,
            incarnation: String::new(),
        },
        file: "00000000000000000000.seg".into(),
        offset: 0,
        max_bytes: CHUNK_BYTES_MAX,
        token: 0,
    };
    let chunk: SegmentChunk = client
        .call_message(peer, Lane::Control, Opcode::FETCH_SEGMENT_CHUNK, &request)
        .await
        .map_err(io::Error::other)?;
    Ok(chunk.data.len() as u64)
}

/// Fetches until `bytes` arrived, `in_flight` fetches outstanding.
async fn push(
    client: &Arc<Node>,
    peer: SocketAddr,
    bytes: u64,
    in_flight: usize,
) -> io::Result<TransportRate> {
    let pid = std::process::id().to_string();
    let cpu_from = cpu_seconds(&pid);
    let started = Instant::now();
    let fetches = bytes.div_ceil(u64::from(CHUNK_BYTES_MAX));
    let mut asked = 0;
    let mut carried = 0;
    let mut outstanding = JoinSet::new();
    while asked < fetches || !outstanding.is_empty() {
        while asked < fetches && outstanding.len() < in_flight.max(1) {
            let client = Arc::clone(client);
            outstanding.spawn(async move { fetch(&client, peer).await });
            asked += 1;
        }
        if let Some(done) = outstanding.join_next().await {
            carried += done.map_err(io::Error::other)??;
        }
    }
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    let cpu = cpu_seconds(&pid) - cpu_from;
    let gb = carried as f64 / 1e9;
    Ok(TransportRate {
        in_flight,
        mb_per_s: carried as f64 / 1e6 / seconds,
        core_s_per_gb: if gb > 0.0 { cpu / gb } else { 0.0 },
    })
}
