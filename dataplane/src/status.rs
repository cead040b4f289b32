//! What a data node reports of itself (spec §1.9, `detail=true`): whether
//! its member record says it drains, its produces in flight, its ingress
//! records not yet committed to their owners, its quarantined copies, and
//! the partition moves its workers run.
//!
//! The status is read from [`StatusSources`], the few parts of the node
//! it looks at; the HTTP layer reads this node's directly
//! ([`NodeStatus::read`]) and asks other nodes over node RPC (opcode 33,
//! `NodeStatus`), which [`NodeStatusService`] answers from the same read.
//!
//! The move workers are another part's to report: a move runner plugs in
//! through the [`MoveReports`] seam ([`StatusSources::plug_move_reports`]).
//! Until one does, a node reports no moves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use narad_protocol::consume::decode_forward_request;
use narad_protocol::node_status::{NODE_MOVES_MAX, NODE_REMOTES_MAX, QUARANTINE_LIST_MAX};
use narad_protocol::{
    Inbound, NodeStatus as NodeStatusRequest, NodeStatusAnswer, Opcode, OperationLimit,
    QuarantinedCopy, RemoteView, Response, Router, RpcError, clip_text,
};

use narad_wal::{CheckpointStore, Wal};

use crate::credentials::RemoteCredentials;
use crate::metadata::MetadataReplica;
pub use crate::moves::status::{MoveReports, MoveWorkerStatus};
use crate::partitions::LocalLogs;

/// Node status requests one node serves at once. An operator's listing
/// asks each node once, so a few permits are plenty, and they bound the
/// disk walks counting quarantined bytes.
pub const NODE_STATUS_PERMITS: usize = 4;

/// The name of that operation class.
pub const NODE_STATUS_LIMIT_NAME: &str = "node-status";

/// Quarantined copies on a node's disk.
///
/// Copies of replaced or deleted topic incarnations kept aside until the
/// leader confirms them gone, and partition copies that left without a
/// handoff (`LocalLogs::quarantine_stats`): every one counted, the first
/// [`QUARANTINE_LIST_MAX`] described.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuarantineReport {
    /// Copies on disk.
    pub copies: u64,
    /// Bytes of their files.
    pub bytes: u64,
    /// Some of them, at most [`QUARANTINE_LIST_MAX`].
    pub list: Vec<QuarantinedCopy>,
}

/// What a node's status is read from.
#[derive(Debug)]
pub struct StatusSources {
    replica: Arc<MetadataReplica>,
    wal: Arc<Wal>,
    /// The dispatcher's stored checkpoint.
    checkpoint_stored: Arc<AtomicU64>,
    /// Produce requests being answered now (a batch counts once); the
    /// produce handlers count here.
    pub produces_in_flight: AtomicU64,
    /// The partition logs, for the quarantine; unset, none is reported.
    logs: OnceLock<Arc<LocalLogs>>,
    /// The move workers, as the move runner reports them.
    move_reports: OnceLock<Arc<dyn MoveReports>>,
    /// The dispatcher's checkpoint store, for its flusher's panics.
    checkpoint: OnceLock<Arc<CheckpointStore>>,
    /// The node's remote credentials, for its views of the remotes.
    credentials: OnceLock<Arc<RemoteCredentials>>,
}

impl StatusSources {
    /// Sources over `replica`, the ingress `wal` and the dispatcher's
    /// stored checkpoint.
    pub fn new(
        replica: Arc<MetadataReplica>,
        wal: Arc<Wal>,
        checkpoint_stored: Arc<AtomicU64>,
    ) -> Self {
        Self {
            replica,
            wal,
            checkpoint_stored,
            produces_in_flight: AtomicU64::new(0),
            logs: OnceLock::new(),
            move_reports: OnceLock::new(),
            checkpoint: OnceLock::new(),
            credentials: OnceLock::new(),
        }
    }

    /// Reports this node's views of the remotes' credentials through
    /// `credentials` from now on; false if some were plugged in already
    /// (they stay).
    pub fn plug_credentials(&self, credentials: Arc<RemoteCredentials>) -> bool {
        self.credentials.set(credentials).is_ok()
    }

    /// This node's view of each remote's credential (the first
    /// [`NODE_REMOTES_MAX`] by name, texts cut to the wire's limit);
    /// `None` until credentials are plugged in.
    pub fn remote_views(&self) -> Option<Vec<RemoteView>> {
        let credentials = self.credentials.get()?;
        let view = self.replica.view();
        let views = view
            .metastore
            .remotes()
            .take(NODE_REMOTES_MAX as usize)
            .map(|remote| {
                let mut view = credentials.view(&view.metastore, remote);
                clip_text(&mut view.name);
                if let Some(error) = &mut view.error {
                    clip_text(error);
                }
                view
            })
            .collect();
        Some(views)
    }

    /// Panics of the ingress WAL's background workers since the node
    /// started, by `worker` label (see [`narad_wal::WorkerPanics`]); the
    /// checkpoint flusher's once its store is plugged in.
    pub fn wal_worker_panics(&self) -> Vec<(&'static str, u64)> {
        let panics = self.wal.worker_panics();
        let mut counts = vec![("flush", panics.flush), ("prep", panics.prep)];
        if let Some(checkpoint) = self.checkpoint.get() {
            counts.push(("checkpoint", checkpoint.flusher_panics()));
        }
        counts
    }

    /// Reports the panics of `checkpoint`'s flusher from now on; false if
    /// a store was plugged in already (it stays).
    pub fn plug_checkpoint(&self, checkpoint: Arc<CheckpointStore>) -> bool {
        self.checkpoint.set(checkpoint).is_ok()
    }

    /// Durable ingress WAL records the dispatcher has not yet committed to
    /// their partition owners (its stored checkpoint is behind them).
    pub fn dispatch_backlog(&self) -> u64 {
        self.wal
            .next_durable_seq()
            .saturating_sub(self.checkpoint_stored.load(Ordering::Acquire))
    }

    /// Reports the quarantine of `logs` from now on; false if some logs
    /// were plugged in already (they stay).
    pub fn plug_logs(&self, logs: Arc<LocalLogs>) -> bool {
        self.logs.set(logs).is_ok()
    }

    /// Reports the move workers of `reports` from now on; false if some
    /// were plugged in already (they stay).
    pub fn plug_move_reports(&self, reports: Arc<dyn MoveReports>) -> bool {
        self.move_reports.set(reports).is_ok()
    }
}

/// What a data node reports of itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStatus {
    /// Whether its member record says it drains.
    pub draining: bool,
    /// Produce requests (single or batch, each counted once) it is
    /// answering now.
    pub produce_in_flight: u64,
    /// Its ingress WAL records not yet committed to their partition owners.
    pub dispatch_backlog: u64,
    /// Its quarantined copies.
    pub quarantine: QuarantineReport,
    /// Its move workers.
    pub moves: Vec<MoveWorkerStatus>,
    /// Its views of the remotes' credentials, when asked for.
    pub remotes: Option<Vec<RemoteView>>,
    /// The newest metastore command version it decodes, when asked for.
    pub command_version: Option<u8>,
}

impl NodeStatus {
    /// This node's status now. Counting quarantined bytes walks the disk,
    /// on a blocking thread; if that fails the totals read 0 and a warning
    /// is logged.
    pub async fn read(sources: &StatusSources) -> Self {
        let mut moves = sources
            .move_reports
            .get()
            .map_or_else(Vec::new, |reports| reports.moves());
        moves.truncate(NODE_MOVES_MAX as usize);
        Self {
            draining: sources.replica.local_draining(),
            produce_in_flight: sources.produces_in_flight.load(Ordering::Relaxed),
            dispatch_backlog: sources.dispatch_backlog(),
            quarantine: quarantine(sources).await,
            moves,
            remotes: None,
            command_version: None,
        }
    }

    /// Adds what `asked` asks beyond the status: this node's views of the
    /// remotes (from `sources`) and the newest metastore command version
    /// this build decodes.
    pub fn answer(&mut self, asked: NodeStatusRequest, sources: &StatusSources) {
        if asked.with_remotes {
            self.remotes = sources.remote_views();
        }
        if asked.with_command_version {
            self.command_version = Some(narad_meta::codec::COMMAND_VERSION);
        }
    }

    /// The wire answer, lists and texts cut to the message's limits.
    pub fn to_wire(&self) -> NodeStatusAnswer {
        let mut quarantine = self.quarantine.list.clone();
        quarantine.truncate(QUARANTINE_LIST_MAX as usize);
        for copy in &mut quarantine {
            clip_text(&mut copy.kind);
            clip_text(&mut copy.topic);
            clip_text(&mut copy.dir);
        }
        NodeStatusAnswer {
            draining: self.draining,
            produce_in_flight: self.produce_in_flight,
            dispatch_backlog: self.dispatch_backlog,
            quarantine_copies: self.quarantine.copies,
            quarantine_bytes: self.quarantine.bytes,
            quarantine,
            moves: self
                .moves
                .iter()
                .take(NODE_MOVES_MAX as usize)
                .map(report_of)
                .collect(),
            remotes: self.remotes.clone(),
            command_version: self.command_version,
        }
    }

    /// The status another node answered.
    pub fn from_wire(answer: NodeStatusAnswer) -> Self {
        Self {
            draining: answer.draining,
            produce_in_flight: answer.produce_in_flight,
            dispatch_backlog: answer.dispatch_backlog,
            quarantine: QuarantineReport {
                copies: answer.quarantine_copies,
                bytes: answer.quarantine_bytes,
                list: answer.quarantine,
            },
            moves: answer.moves,
            remotes: answer.remotes,
            command_version: answer.command_version,
        }
    }
}

/// The quarantine totals of the node's partition logs; zero on a node
/// without logs (tests) or when the disk walk fails.
async fn quarantine(sources: &StatusSources) -> QuarantineReport {
    let Some(logs) = sources.logs.get().cloned() else {
        return QuarantineReport::default();
    };
    let counted = tokio::task::spawn_blocking(move || logs.quarantine_stats()).await;
    match counted {
        Ok(Ok(stats)) => QuarantineReport {
            copies: stats.copies,
            bytes: stats.bytes,
            list: stats
                .listed
                .into_iter()
                .map(|entry| QuarantinedCopy {
                    kind: entry.kind.to_string(),
                    topic: entry.topic,
                    partition: entry.partition,
                    dir: entry.dir.display().to_string(),
                    bytes: entry.bytes,
                    mod_time_ms: entry.mod_time_ms,
                })
                .collect(),
        },
        Ok(Err(error)) => {
            tracing::warn!(%error, "counting quarantined copies for the node status failed");
            QuarantineReport::default()
        }
        Err(error) => {
            tracing::warn!(%error, "the quarantine count for the node status did not finish");
            QuarantineReport::default()
        }
    }
}

/// `worker` with its texts cut to the message's limits.
fn report_of(worker: &MoveWorkerStatus) -> MoveWorkerStatus {
    let mut report = worker.clone();
    for text in [
        &mut report.topic,
        &mut report.source,
        &mut report.target,
        &mut report.phase,
    ] {
        clip_text(text);
    }
    for text in [&mut report.last_error, &mut report.blocked]
        .into_iter()
        .flatten()
    {
        clip_text(text);
    }
    report
}

/// Serves opcode 33 from the node's status sources. Routed before the
/// data node exists (the transport is bound first), it answers `503` until
/// [`NodeStatusService::attach`].
#[derive(Debug, Default)]
pub struct NodeStatusService {
    sources: OnceLock<Arc<StatusSources>>,
}

impl NodeStatusService {
    /// A service answering `503` until attached.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Starts answering from `sources` (the node's).
    ///
    /// # Panics
    /// If attached already.
    pub fn attach(&self, sources: Arc<StatusSources>) {
        assert!(
            self.sources.set(sources).is_ok(),
            "node status service attached twice"
        );
    }

    /// `router` with opcode 33 served by this service, at most
    /// [`NODE_STATUS_PERMITS`] at once.
    pub fn route(self: &Arc<Self>, router: Router) -> Router {
        let service = Arc::clone(self);
        let limit = OperationLimit::new(NODE_STATUS_LIMIT_NAME, NODE_STATUS_PERMITS);
        router.route(Opcode::NODE_STATUS, limit, move |inbound: Inbound| {
            let service = Arc::clone(&service);
            async move { service.handle(inbound).await }
        })
    }

    async fn handle(&self, inbound: Inbound) -> Result<Response, RpcError> {
        let sources = self.sources.get().ok_or_else(|| {
            RpcError::unavailable("this data node does not report its status yet")
        })?;
        let request = decode_forward_request::<NodeStatusRequest>(inbound.request.body)?;
        let mut status = NodeStatus::read(sources).await;
        status.answer(request, sources);
        Ok(Response::message(&status.to_wire()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(last_error: Option<String>) -> MoveWorkerStatus {
        MoveWorkerStatus {
            topic: "orders".into(),
            partition: 1,
            source: "1".into(),
            target: "2".into(),
            started_at_ms: 5,
            phase: "copying".into(),
            attempts: 2,
            last_error,
            copied_bytes: 9,
            blocked: None,
        }
    }

    #[test]
    fn a_status_survives_the_wire() {
        let status = NodeStatus {
            draining: true,
            produce_in_flight: 3,
            dispatch_backlog: 7,
            quarantine: QuarantineReport {
                copies: 2,
                bytes: 4_096,
                list: Vec::new(),
            },
            moves: vec![worker(Some("source refused".into()))],
            remotes: Some(vec![RemoteView {
                name: "dr".into(),
                credential_version: 2,
                credential: narad_protocol::CredentialState::Unreadable,
                key_current: false,
                error: Some("the seal does not open".into()),
            }]),
            command_version: Some(4),
        };
        assert_eq!(NodeStatus::from_wire(status.to_wire()), status);
    }

    #[test]
    fn long_texts_are_cut_at_a_character_boundary_for_the_wire() {
        use narad_protocol::node_status::NODE_STATUS_TEXT_BYTES_MAX;

        // 'é' is two bytes: the limit falls inside one.
        let long = format!("x{}", "é".repeat(NODE_STATUS_TEXT_BYTES_MAX));
        let status = NodeStatus {
            moves: vec![worker(Some(long))],
            ..NodeStatus::default()
        };
        let wire = status.to_wire();
        let sent = wire.moves[0].last_error.as_deref().expect("kept");
        assert!(sent.len() <= NODE_STATUS_TEXT_BYTES_MAX);
        assert!(sent.len() >= NODE_STATUS_TEXT_BYTES_MAX - 1);
        // It still encodes: the encoder would panic on an oversize text.
        let _ = narad_protocol::codec::encode_message(&wire);
    }

    #[test]
    fn workers_past_the_message_limit_are_left_out() {
        let status = NodeStatus {
            moves: vec![worker(None); NODE_MOVES_MAX as usize + 3],
            ..NodeStatus::default()
        };
        assert_eq!(status.to_wire().moves.len(), NODE_MOVES_MAX as usize);
    }
}
