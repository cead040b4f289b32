//! The source side of a move: what the partition's current owner answers
//! its move's target. Every call runs on a blocking thread (it reads files
//! and may wait for a commit cycle).

use std::sync::Arc;
use std::time::Duration;

use narad_plog::PartitionLog;
use narad_protocol::commit::not_owner;
use narad_protocol::transfer::{
    FenceHandoff, FetchSegmentChunk, FileExtent, HandoffFenced, HandoffPrepared,
    ListPartitionSegments, PartitionListing, PartitionRef, PrepareHandoff, ReleaseHandoff,
    SegmentChunk,
};
use narad_protocol::{RpcError, Status};

use super::files;
use crate::commit::Combiners;
use crate::consume::service::ConsumeService;
use crate::metadata::{MetadataReplica, TopicMeta};
use crate::partitions::freeze::{self, FREEZE_TTL, FreezeError};
use crate::partitions::{LocalLogs, partition_dir};
use crate::topology::{Destination, Route, Topology, member_id};

/// How long a handoff waits for the partition's outstanding leases (the
/// spec's 500 ms; never more than a quarter of the freeze's TTL).
const HANDOFF_LEASE_WAIT: Duration = Duration::from_millis(500);
const _: () = assert!(HANDOFF_LEASE_WAIT.as_millis() * 4 <= FREEZE_TTL.as_millis());

/// Serves the transfer calls of moves away from this node.
#[derive(Debug)]
pub struct MoveSource {
    replica: Arc<MetadataReplica>,
    logs: Arc<LocalLogs>,
    combiners: Arc<Combiners>,
    consume: Arc<ConsumeService>,
}

/// What the source checked before serving a call: the partition, its live
/// topic, and its log.
struct Served {
    destination: Destination,
    meta: Arc<TopicMeta>,
    log: Arc<PartitionLog>,
}

impl MoveSource {
    /// The source over this node's state.
    pub fn new(
        replica: Arc<MetadataReplica>,
        logs: Arc<LocalLogs>,
        combiners: Arc<Combiners>,
        consume: Arc<ConsumeService>,
    ) -> Self {
        Self {
            replica,
            logs,
            combiners,
            consume,
        }
    }

    /// Checks that this node owns the partition of the incarnation the
    /// caller copies, and opens its log.
    fn serve(&self, partition: &PartitionRef) -> Result<Served, RpcError> {
        let destination = Destination::new(&partition.topic, partition.partition);
        let meta = self.replica.topic_meta(&partition.topic).ok_or_else(|| {
            RpcError::new(
                Status::NOT_FOUND,
                format!("topic {} not found", partition.topic),
            )
        })?;
        let live = meta.incarnation_id.as_deref().unwrap_or("");
        if live != partition.incarnation {
            return Err(RpcError::new(
                Status::CONFLICT,
                format!(
                    "topic {} is incarnation {live:?}, not {:?}",
                    partition.topic, partition.incarnation
                ),
            ));
        }
        if !matches!(
            self.replica.route(&destination),
            Route::Owner { local: true, .. }
        ) {
            return Err(not_owner(&partition.topic, partition.partition));
        }
        self.combiners.restore_fences(&destination);
        let log = self
            .logs
            .resolve(&destination, meta.incarnation_id.as_ref())
            .map_err(|error| RpcError::unavailable(format!("partition log: {error}")))?;
        Ok(Served {
            destination,
            meta,
            log,
        })
    }

    /// `ListPartitionSegments`: the segments and their committed bytes,
    /// and the consumer position read after them.
    ///
    /// # Errors
    /// As [`Self::serve`].
    pub fn list(&self, request: &ListPartitionSegments) -> Result<PartitionListing, RpcError> {
        let served = self.serve(&request.partition)?;
        let listing = served.log.transfer_listing();
        let position = self
            .consume
            .position_now(&served.meta, served.destination.partition)
            .map_err(|error| RpcError::unavailable(format!("consumer position: {error}")))?;
        Ok(PartitionListing {
            high_watermark: listing.high_watermark,
            files: listing
                .segments
                .into_iter()
                .map(|segment| FileExtent {
                    name: segment.file_name,
                    bytes: segment.bytes,
                })
                .collect(),
            position: HandoffFenced {
                frontier: position.frontier,
                acked_ahead: position.acked_ahead,
            },
        })
    }

    /// `FetchSegmentChunk`: bytes of one file. A segment is never read
    /// past its committed bytes; a fetch under a live token re-arms the
    /// freeze.
    ///
    /// # Errors
    /// As [`Self::serve`]; `400` for a file that does not travel; `409`
    /// for a lapsed or unknown token; `503` for a disk error.
    pub fn fetch(&self, request: &FetchSegmentChunk) -> Result<SegmentChunk, RpcError> {
        let served = self.serve(&request.partition)?;
        if !files::is_transferable(&request.file) {
            return Err(RpcError::new(
                Status::BAD_REQUEST,
                format!("{:?} is not a file a move copies", request.file),
            ));
        }
        if request.token != 0 {
            self.combiners
                .freezes()
                .rearm(&served.destination, request.token, self.now_ms())
                .map_err(freeze_refusal)?;
        }
        let limit = files::is_segment(&request.file)
            .then(|| {
                let listing = served.log.transfer_listing();
                listing
                    .segments
                    .into_iter()
                    .find(|segment| segment.file_name == request.file)
                    .map(|segment| segment.bytes)
            })
            .flatten();
        if files::is_segment(&request.file) && limit.is_none() {
            return Err(RpcError::new(
                Status::NOT_FOUND,
                format!("segment {} is gone (retention)", request.file),
            ));
        }
        let dir = served.log.dir().to_path_buf();
        let data = files::read_chunk(
            &**self.logs.disk(),
            &dir,
            &request.file,
            request.offset,
            request.max_bytes,
            limit,
        )
        .map_err(|error| RpcError::unavailable(format!("reading {}: {error}", request.file)))?;
        Ok(SegmentChunk { data: data.into() })
    }

    /// `PrepareHandoff`: freezes the partition for the move to the caller
    /// and lists every file up to the frozen high watermark.
    ///
    /// # Errors
    /// As [`Self::serve`]; `409` when the replica shows no move of the
    /// partition to the caller.
    pub fn prepare(&self, request: &PrepareHandoff) -> Result<HandoffPrepared, RpcError> {
        let served = self.serve(&request.partition)?;
        let view = self.replica.view();
        let target = view
            .metastore
            .assignment(&request.partition.topic, request.partition.partition)
            .and_then(|assignment| assignment.target.clone());
        if target.as_deref() != Some(request.target.as_str()) {
            return Err(RpcError::new(
                Status::CONFLICT,
                format!(
                    "partition {} is not moving to {} (its move target is {target:?})",
                    served.destination, request.target
                ),
            ));
        }
        let freeze = self
            .combiners
            .freeze_for_handoff(&served.destination, &request.target);
        // New leases stopped with the freeze; give the outstanding ones a
        // moment to be acked, so fewer are delivered again after the flip.
        // `prepare` runs on a blocking thread of the runtime (see
        // `service.rs`), which may wait on the runtime's timers.
        let waited = tokio::runtime::Handle::current().block_on(self.consume.wait_for_leases(
            &served.meta,
            served.destination.partition,
            HANDOFF_LEASE_WAIT,
        ));
        match waited {
            Ok(0) => {}
            Ok(live) => tracing::info!(destination = %served.destination, live,
                "leases still out at the handoff; their messages are delivered again after the move"),
            Err(error) => tracing::warn!(destination = %served.destination, %error,
                "could not look at the partition's leases before the handoff"),
        }
        let listing = served.log.transfer_listing();
        let cursors = files::cursor_files(&**self.logs.disk(), served.log.dir())
            .map_err(|error| RpcError::unavailable(format!("listing cursor files: {error}")))?;
        let files = listing
            .segments
            .into_iter()
            .map(|segment| FileExtent {
                name: segment.file_name,
                bytes: segment.bytes,
            })
            .chain(
                cursors
                    .into_iter()
                    .map(|(name, bytes)| FileExtent { name, bytes }),
            )
            .collect();
        tracing::info!(destination = %served.destination, target_node = request.target,
            high_watermark = listing.high_watermark, "partition frozen for a move handoff");
        Ok(HandoffPrepared {
            token: freeze.token,
            ttl_ms: u32::try_from(FREEZE_TTL.as_millis()).unwrap_or(u32::MAX),
            high_watermark: listing.high_watermark,
            files,
        })
    }

    /// `FenceHandoff` (opcode `CompleteMove`): the target's copy holds the
    /// frozen high watermark. The freeze is fenced (written down first) and
    /// the consumer position read under it is the answer.
    ///
    /// # Errors
    /// As [`Self::serve`]; `409` for a lapsed or unknown token or another
    /// high watermark; `503` when the fence could not be written.
    pub fn fence(&self, request: &FenceHandoff) -> Result<HandoffFenced, RpcError> {
        let served = self.serve(&request.partition)?;
        let freezes = self.combiners.freezes();
        let fenced = freezes
            .fence(&served.destination, request.token, self.now_ms())
            .map_err(freeze_refusal)?;
        let high_watermark = served.log.high_watermark();
        if high_watermark != request.high_watermark {
            freezes.unfence(&served.destination, request.token);
            return Err(RpcError::new(
                Status::CONFLICT,
                format!(
                    "the partition's high watermark is {high_watermark}, not {}",
                    request.high_watermark
                ),
            ));
        }
        let dir = partition_dir(
            self.logs.data_dir(),
            &served.destination.topic,
            served.destination.partition,
        );
        if let Err(error) = freeze::write_fence(&**self.logs.disk(), &dir, &fenced) {
            freezes.unfence(&served.destination, request.token);
            return Err(RpcError::unavailable(format!(
                "writing the handoff fence: {error}"
            )));
        }
        let position = self
            .consume
            .position_now(&served.meta, served.destination.partition)
            .map_err(|error| RpcError::unavailable(format!("consumer position: {error}")))?;
        tracing::info!(destination = %served.destination, target_node = fenced.target,
            high_watermark, frontier = position.frontier, "move handoff fenced");
        Ok(HandoffFenced {
            frontier: position.frontier,
            acked_ahead: position.acked_ahead,
        })
    }

    /// `ReleaseHandoff` (opcode `AbortMove`): the target gives up its
    /// unfenced freeze.
    ///
    /// # Errors
    /// `404` for a partition this node does not know.
    pub fn release(&self, request: &ReleaseHandoff) -> Result<(), RpcError> {
        let destination = Destination::new(&request.partition.topic, request.partition.partition);
        if self
            .combiners
            .freezes()
            .release(&destination, request.token)
        {
            tracing::info!(%destination, "move handoff released by its target");
        }
        Ok(())
    }

    /// Now on the node's clock, as freezes are timed.
    fn now_ms(&self) -> u64 {
        self.logs.clock().now_ms()
    }

    /// This node's member id.
    pub fn member(&self) -> String {
        member_id(self.replica.local_node())
    }
}

fn freeze_refusal(error: FreezeError) -> RpcError {
    RpcError::new(Status::CONFLICT, error.to_string())
}
