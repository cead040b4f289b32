//! One data node, wired: ingress WAL and checkpoint store, accept stage,
//! partition logs and combiners, the dispatcher runtime, the consume
//! service with its consumer state store, the incarnation housekeeping
//! (deleted topics' directories retired, quarantined copies swept once the
//! leader confirms them gone), the end of its own decommission (it
//! proposes its removal once drained), what it reports
//! of itself to the cluster listings ([`crate::status`]), and the HTTP API.
//!
//! The metadata replica, the leader-confirmation service and the remote
//! commit target come from outside, because the control plane and the
//! cluster transport provide them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use narad_clock::{Clock, SystemClock};
use narad_disk::Disk;
use narad_plog::LogConfig;
use narad_wal::{CheckpointConfig, CheckpointError, CheckpointStore, Wal, WalError, WalOptions};

use crate::admin::{Admin, LocalAdmin};
use crate::commit::{Combiners, LocalCommitTarget};
use crate::consume::ahead::{ConsumerStateConfig, ConsumerStateStore, StateWorker};
use crate::consume::service::{ConsumeConfig, ConsumeService};
use crate::credentials::{RemoteCredentials, RemoteSecrets};
use crate::dispatch::{
    CommitTarget, DispatchConfig, DispatchParts, DispatchRuntime, DispatchStatus, LeaderConfirm,
    NoRemoteTarget, ReplicaLeader,
};
use crate::fanout::machine::CursorConfig;
use crate::fanout::shipping::{NodeShipper, SharedShipper};
use crate::fanout::{FanoutParts, FanoutRuntime, FanoutStatus, RemotePlane, RemoteShipper};
use crate::http::consume::effective_wait_max;
use crate::http::{ApiConfig, ApiState, Health, router};
use crate::ingress::Acceptor;
use crate::metadata::MetadataReplica;
use crate::metrics::NodeMetrics;
use crate::moves::source::MoveSource;
use crate::moves::worker::WorkerContext;
use crate::moves::{LinkFactory, MoveRunner};
use crate::partitions::LocalLogs;
use crate::topology::NodeId;
use crate::topology::member_id;
use narad_meta::{Command, RegisterMember};

mod decommission;
pub mod dirs;
mod housekeeping;

pub use self::decommission::DECOMMISSION_CHECK_INTERVAL;
use self::decommission::DecommissionWatch;
use self::dirs::DirError;
pub use self::housekeeping::HousekeepingConfig;
use self::housekeeping::{Housekeeping, HousekeepingParts};
use crate::partitions::poller::{Poller, PollerParts};
use crate::partitions::retention::{Retention, RetentionParts};
pub use crate::partitions::{
    COLD_RETENTION_WALK_DEFAULT, IDLE_LOG_EVICTION_DEFAULT, PollerConfig,
    RETENTION_CHECK_INTERVAL_DEFAULT, RetentionConfig,
};

/// Settings of a data node.
#[derive(Clone, Debug)]
pub struct DataNodeConfig {
    /// Root of the node's data (`storage.data_dir`).
    pub data_dir: PathBuf,
    /// Root of the ingress WAL (`storage.wal_dir`), for a WAL on a device
    /// of its own; `None` keeps it under `data_dir`. Either way the WAL is
    /// in `<root>/ingress/produce` ([`dirs`]), so moving one between the
    /// roots moves that directory whole.
    pub wal_dir: Option<PathBuf>,
    /// HTTP API behaviour.
    pub api: ApiConfig,
    /// The secrets remote credentials are sealed under; none by default
    /// (the node then seals and opens no remote password).
    pub remote_secrets: RemoteSecrets,
    /// Ingress WAL options.
    pub wal: WalOptions,
    /// Checkpoint flush timing.
    pub checkpoint: CheckpointConfig,
    /// Partition log settings.
    pub log: LogConfig,
    /// Dispatcher timing.
    pub dispatch: DispatchConfig,
    /// Seed of the per-topic rotation starts.
    pub seed: u64,
    /// How consumes are served; the wait ceiling comes from
    /// `api.max_consume_wait`.
    pub consume: ConsumeConfig,
    /// Cadences of the consumer state store
    /// (`storage.consumer_offset_commit_interval_ms` is its
    /// `durable_interval`).
    pub consumer_state: ConsumerStateConfig,
    /// Seed of the lease nonce streams. It must differ between starts of
    /// a node, or a handle from before a restart could match a new lease.
    pub consume_seed: u64,
    /// Cadences of the incarnation housekeeping.
    pub housekeeping: HousekeepingConfig,
    /// How often open partition logs are swept for retention
    /// (`storage.retention_check_interval_ms`), closed ones walked
    /// (`storage.cold_retention_walk_ms`), and idle ones closed
    /// (`storage.idle_log_eviction_ms`).
    pub retention: RetentionConfig,
    /// Cadences of the partition poller (spec §9: every 5 s, closed
    /// partitions read from disk at most every 30 s).
    pub poller: PollerConfig,
    /// Fan-out cursor limits and timings (`fanout.*`).
    pub fanout: CursorConfig,
    /// How often a draining node checks whether it may leave the cluster
    /// (and so proposes its removal at most this often).
    pub decommission_check: std::time::Duration,
    /// How long a move's source must have been marked dead before the
    /// copy on this node is force-promoted (spec §6, 2 minutes).
    pub force_promote_after: std::time::Duration,
    /// How long after this node's last flip proposal for a partition an
    /// installed copy of it may be rolled back (spec §6, 15 s).
    pub flip_settle: std::time::Duration,
}

impl DataNodeConfig {
    /// Production defaults under `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            wal_dir: None,
            api: ApiConfig::default(),
            remote_secrets: RemoteSecrets::default(),
            wal: WalOptions::default(),
            checkpoint: CheckpointConfig::default(),
            log: LogConfig::default(),
            dispatch: DispatchConfig::default(),
            seed: rand::random(),
            consume: ConsumeConfig::default(),
            consumer_state: ConsumerStateConfig::default(),
            consume_seed: rand::random(),
            housekeeping: HousekeepingConfig::default(),
            retention: RetentionConfig::default(),
            poller: PollerConfig::default(),
            fanout: CursorConfig::default(),
            decommission_check: DECOMMISSION_CHECK_INTERVAL,
            force_promote_after: crate::moves::decide::FORCE_PROMOTE_AFTER,
            flip_settle: crate::moves::settle::FLIP_SETTLE,
        }
    }

    /// `storage.partition_log_prealloc`: small commits go into zeros
    /// prepared ahead of each partition's active segment
    /// (`narad_plog::PREPARE_BYTES` at a time), or are appended (off, the
    /// default).
    pub fn set_partition_log_prealloc(&mut self, on: bool) {
        self.log.prepare_bytes = if on { narad_plog::PREPARE_BYTES } else { 0 };
    }

    /// The ingress WAL's directory: `ingress/produce` under `wal_dir`,
    /// or under `data_dir` when that is unset.
    pub fn ingress_wal_dir(&self) -> PathBuf {
        dirs::ingress_wal_dir(self.wal_dir.as_deref().unwrap_or(&self.data_dir))
    }
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// `storage.data_dir` or `storage.wal_dir` is unusable, or the WAL is
    /// not where the settings say.
    #[error(transparent)]
    Dirs(#[from] DirError),
    /// The ingress WAL did not open.
    #[error("ingress WAL: {0}")]
    Wal(#[from] WalError),
    /// The checkpoint store did not open.
    #[error("ingress checkpoint: {0}")]
    Checkpoint(#[from] CheckpointError),
    /// A thread could not be started.
    #[error("starting threads: {0}")]
    Threads(#[from] std::io::Error),
}

/// What a node takes from outside.
#[derive(Debug)]
pub struct NodeServices {
    /// The disk everything is stored on.
    pub disk: Arc<dyn Disk>,
    /// The local metadata replica (fed by the control plane).
    pub replica: Arc<MetadataReplica>,
    /// Leader confirmation.
    pub leader: Arc<dyn LeaderConfirm>,
    /// Commits to other nodes' partitions.
    pub remote: Arc<dyn CommitTarget>,
    /// Topic changes (the control plane).
    pub admin: Arc<dyn Admin>,
    /// The node's clock: consume leases and long polls run on it, and
    /// forwarding's token holds and claims with them. Whoever builds
    /// `remote` builds it on this clock too (its budgets and legacy-owner
    /// memory), so the node has one.
    pub clock: Arc<dyn Clock>,
}

impl NodeServices {
    /// Services for one data node with no control plane: a replica that is
    /// its own log, holding this node as its only live member, topic and
    /// user changes applied to it directly ([`LocalAdmin`]), leader
    /// confirmation answered from it, no remote owners, and the system
    /// clock. For tests; `narad dev` and `narad data` build their services
    /// around a control plane instead.
    pub fn standalone(disk: Arc<dyn Disk>, node: NodeId) -> Self {
        let replica = Arc::new(MetadataReplica::new(node));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let register = Command::RegisterMember(RegisterMember {
            id: member_id(node),
            http_addr: format!("node-{node}:http"),
            rpc_addr: format!("node-{node}:rpc"),
            at_ms: clock.unix_ms(),
        });
        if let Err(error) = replica.apply_next(&register) {
            panic!("an empty metastore refused member {node}: {error}");
        }
        Self {
            disk,
            leader: Arc::new(ReplicaLeader::new(Arc::clone(&replica))),
            remote: Arc::new(NoRemoteTarget),
            admin: Arc::new(LocalAdmin::new(Arc::clone(&replica))),
            replica,
            clock,
        }
    }
}

/// A running data node.
#[derive(Debug)]
pub struct DataNode {
    wal: Arc<Wal>,
    checkpoint: Arc<CheckpointStore>,
    logs: Arc<LocalLogs>,
    combiners: Arc<Combiners>,
    api: Arc<ApiState>,
    dispatcher: Option<DispatchRuntime>,
    dispatch_status: Arc<DispatchStatus>,
    consume: Arc<ConsumeService>,
    consumer_state_worker: Option<StateWorker>,
    housekeeping: Option<Housekeeping>,
    retention: Option<Retention>,
    poller: Option<Poller>,
    fanout: Option<FanoutRuntime>,
    /// Where remote children's cursors ship through.
    remote_plane: Arc<RemotePlane>,
    /// Serves the transfer calls of moves away from this node.
    move_source: Arc<MoveSource>,
    /// Confirms with the control plane's leader before a move's runner
    /// reclaims a copy.
    leader: Arc<dyn LeaderConfirm>,
    /// See [`DataNodeConfig::force_promote_after`].
    force_promote_after: std::time::Duration,
    /// See [`DataNodeConfig::flip_settle`].
    flip_settle: std::time::Duration,
    /// The move runner, once [`DataNode::start_moves`] started it.
    moves: parking_lot::Mutex<Option<(Arc<MoveRunner>, tokio::task::JoinHandle<()>)>>,
    /// Ends a drained node's decommission; absent on a node started
    /// outside a Tokio runtime.
    decommission: Option<DecommissionWatch>,
}

/// Worker threads committing fan-out buckets into this node's partitions,
/// apart from the dispatcher's so that a busy fan-out cannot starve
/// produce commits.
pub const FANOUT_COMMIT_WORKERS: usize = 16;

impl DataNode {
    /// Checks the data and WAL directories ([`dirs`]), opens the WAL and
    /// checkpoint (recovering them), starts the commit workers and the
    /// dispatcher, and builds the API state. Ready once the replica has
    /// caught up.
    ///
    /// # Errors
    /// [`NodeError`].
    pub fn start(services: NodeServices, config: DataNodeConfig) -> Result<Self, NodeError> {
        let booting_us = services.clock.now_us();
        let wal_dir = dirs::prepare(&*services.disk, &config.data_dir, config.wal_dir.as_deref())?;
        let wal = Arc::new(Wal::open(
            Arc::clone(&services.disk),
            &wal_dir,
            config.wal.clone(),
        )?);
        let checkpoint = Arc::new(CheckpointStore::open(
            &*services.disk,
            &wal_dir,
            config.checkpoint,
            Arc::clone(&services.clock),
        )?);
        let metrics = Arc::new(NodeMetrics::new());
        let logs = Arc::new(LocalLogs::new(
            Arc::clone(&services.disk),
            &config.data_dir,
            config.log.clone(),
            Arc::clone(&services.clock),
        ));
        let combiners = Arc::new(Combiners::new(
            Arc::clone(&logs),
            Arc::clone(&services.replica),
            Arc::clone(&metrics),
        ));
        let local: Arc<dyn CommitTarget> =
            Arc::new(LocalCommitTarget::start_workers(Arc::clone(&combiners))?);
        let fanout_local: Arc<dyn CommitTarget> = Arc::new(LocalCommitTarget::start_pool(
            Arc::clone(&combiners),
            FANOUT_COMMIT_WORKERS,
            "narad-fanout-commit",
        )?);
        let fanout_status = Arc::new(FanoutStatus::new());
        let remote_plane = Arc::new(RemotePlane::new());
        let fanout = FanoutRuntime::start(FanoutParts {
            disk: Arc::clone(&services.disk),
            logs: Arc::clone(&logs),
            replica: Arc::clone(&services.replica),
            leader: Arc::clone(&services.leader),
            local: fanout_local,
            remote: Arc::clone(&services.remote),
            status: Arc::clone(&fanout_status),
            remote_plane: Arc::clone(&remote_plane),
            metrics: Arc::clone(&metrics),
            clock: Arc::clone(&services.clock),
            config: config.fanout,
        })?;
        let dispatch_status = Arc::new(DispatchStatus::default());
        let dispatcher = DispatchRuntime::spawn(
            DispatchParts {
                wal: Arc::clone(&wal),
                checkpoint: Arc::clone(&checkpoint),
                topology: Arc::clone(&services.replica),
                topology_changes: services.replica.watch_changes(),
                checkpoint_sync_delay: config.checkpoint.sync_delay,
                clock: Arc::clone(&services.clock),
                local,
                remote: services.remote,
                leader: Arc::clone(&services.leader),
            },
            config.dispatch.clone(),
            Arc::clone(&dispatch_status),
        )?;
        let acceptor = Arc::new(
            Acceptor::new(
                Arc::clone(&wal),
                Arc::clone(&services.replica),
                config.seed,
                Arc::clone(&services.clock),
            )
            .with_validation_timer(
                metrics.histogram(crate::metrics::SCHEMA_VALIDATION_SECONDS, &[]),
            ),
        );
        let consumer_state =
            ConsumerStateStore::new(Arc::clone(&services.disk), config.consumer_state.clone());
        let consumer_state_worker = consumer_state.spawn(Arc::clone(&services.clock))?;
        let consume = ConsumeService::new(
            Arc::clone(&logs),
            Arc::clone(&services.replica),
            consumer_state,
            config.data_dir.clone(),
            services.clock,
            ConsumeConfig {
                max_wait: effective_wait_max(config.api.max_consume_wait),
                ..config.consume.clone()
            },
            config.consume_seed,
        );
        consume.pause_when_frozen(combiners.shared_freezes());
        // Its timers run on the runtime starting the node, not on whichever
        // serves the first consume (a process may serve HTTP elsewhere).
        consume.start_runtime_tasks();
        let housekeeping = Housekeeping::spawn(
            HousekeepingParts {
                logs: Arc::clone(&logs),
                consume: Arc::clone(&consume),
                replica: Arc::clone(&services.replica),
                leader: Arc::clone(&services.leader),
                metrics: Arc::clone(&metrics),
            },
            config.housekeeping.clone(),
        )?;
        let retention = Retention::spawn(
            RetentionParts {
                logs: Arc::clone(&logs),
                replica: Arc::clone(&services.replica),
                metrics: Arc::clone(&metrics),
                holders: Some(Arc::clone(&consume) as Arc<dyn crate::partitions::LogHolders>),
            },
            config.retention,
        )?;
        let poller = Poller::spawn(
            PollerParts {
                logs: Arc::clone(&logs),
                replica: Arc::clone(&services.replica),
                metrics: Arc::clone(&metrics),
                frontiers: Arc::clone(&consume) as Arc<dyn crate::partitions::Frontiers>,
            },
            config.poller,
        )?;
        let health = Arc::new(Health::default());
        let mut api = ApiState::new(
            config.api.clone(),
            acceptor,
            services.replica,
            metrics,
            Arc::clone(&health),
            Arc::clone(&dispatch_status.checkpoint_stored),
            services.admin,
        );
        api.dispatch = Arc::clone(&dispatch_status);
        api.credentials = Arc::new(RemoteCredentials::new(config.remote_secrets.clone()));
        api.logs = Some(Arc::clone(&logs));
        api.status.plug_logs(Arc::clone(&logs));
        api.status.plug_checkpoint(Arc::clone(&checkpoint));
        api.status.plug_credentials(Arc::clone(&api.credentials));
        api.consume = Some(Arc::clone(&consume));
        api.fanout = fanout_status;
        api.metrics.set(
            crate::metrics::BOOT_DURATION_SECONDS,
            &[],
            std::time::Duration::from_micros(logs.clock().now_us().saturating_sub(booting_us))
                .as_secs_f64(),
        );
        let api = Arc::new(api);
        // Remote children ship, and their targets are checked, through one
        // outbound client per remote on this node.
        let shipper = SharedShipper(Arc::new(NodeShipper::new(
            Arc::clone(&api.replica),
            Arc::clone(&api.credentials),
            api.config.remotes.url_policy.clone(),
            api.config.remotes.guard(),
            Arc::clone(logs.clock()),
            Arc::clone(&api.metrics),
        )?));
        remote_plane.attach(Arc::new(shipper.clone()));
        remote_plane.set_max_held_bytes(api.config.remotes.max_held_bytes);
        let _ = api.remote_probe.set(Arc::new(shipper));
        let move_source = Arc::new(MoveSource::new(
            Arc::clone(&api.replica),
            Arc::clone(&logs),
            Arc::clone(&combiners),
            Arc::clone(&consume),
        ));
        let decommission = DecommissionWatch::spawn(&api, config.decommission_check);
        health.started.store(true, Ordering::Release);
        tracing::info!(data_dir = %config.data_dir.display(), wal_dir = %wal_dir.display(), backend = %wal.backend(), "data node started");
        Ok(Self {
            wal,
            checkpoint,
            logs,
            combiners,
            api,
            dispatcher: Some(dispatcher),
            dispatch_status,
            consume,
            consumer_state_worker: Some(consumer_state_worker),
            housekeeping: Some(housekeeping),
            retention: Some(retention),
            poller: Some(poller),
            fanout: Some(fanout),
            remote_plane,
            move_source,
            leader: Arc::clone(&services.leader),
            force_promote_after: config.force_promote_after,
            flip_settle: config.flip_settle,
            moves: parking_lot::Mutex::new(None),
            decommission,
        })
    }

    /// The source side of moves away from this node, for the transfer
    /// service ([`crate::moves::TransferService::attach`]).
    pub fn move_source(&self) -> &Arc<MoveSource> {
        &self.move_source
    }

    /// Starts the move runner, reaching moves' sources through `links`;
    /// runs until the node shuts down. Returns the runner (status, tests).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn start_moves(&self, links: Arc<dyn LinkFactory>) -> Arc<MoveRunner> {
        let mut moves = self.moves.lock();
        if let Some((runner, _)) = moves.as_ref() {
            return Arc::clone(runner);
        }
        let runner = MoveRunner::new(
            WorkerContext {
                replica: Arc::clone(&self.api.replica),
                logs: Arc::clone(&self.logs),
                admin: Arc::clone(&self.api.admin),
                leader: Arc::clone(&self.leader),
                force_promote_after: self.force_promote_after,
                flips: Arc::new(crate::moves::settle::FlipClock::new(
                    self.flip_settle,
                    Arc::clone(self.logs.clock()),
                )),
            },
            links,
            Arc::clone(&self.combiners),
            Arc::clone(&self.consume),
            Arc::clone(&self.api.metrics),
        );
        let task = runner.spawn();
        if !self
            .api
            .status
            .plug_move_reports(Arc::clone(&runner) as Arc<dyn crate::status::MoveReports>)
        {
            tracing::warn!("move reports were already plugged in; the runner's are not listed");
        }
        *moves = Some((Arc::clone(&runner), task));
        runner
    }

    /// The move runner, if started.
    pub fn moves(&self) -> Option<Arc<MoveRunner>> {
        self.moves
            .lock()
            .as_ref()
            .map(|(runner, _)| Arc::clone(runner))
    }

    fn stop_moves(&self) {
        if let Some((runner, task)) = self.moves.lock().take() {
            task.abort();
            runner.stop_workers();
        }
    }

    /// The client API router.
    pub fn router(&self) -> Router {
        router(Arc::clone(&self.api))
    }

    /// Serves the client API on `listener` until `shutdown` resolves; then
    /// `/healthz` answers `503`, parked long polls answer `204` (see
    /// [`DataNode::stop_consumes`]) and in-flight requests finish. Handlers
    /// see the client's address (the consume cap counts per address with
    /// security off).
    ///
    /// # Errors
    /// The listener failed.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let health = Arc::clone(&self.api.health);
        let consume = Arc::clone(&self.consume);
        axum::serve(
            listener,
            self.router()
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            shutdown.await;
            health.shutting_down.store(true, Ordering::Release);
            // Writes out consumer positions: off the async workers.
            let _ = tokio::task::spawn_blocking(move || consume.shutdown()).await;
        })
        .await
    }

    /// Answers every parked long poll with `204` now, and every later
    /// consume at once, so a draining server need not wait out long polls;
    /// acks are still taken. Writes out every consumer position. Call it
    /// when a stop begins.
    pub fn stop_consumes(&self) {
        self.consume.shutdown();
    }

    /// The API state (the accept stage, metrics, health).
    pub fn api(&self) -> &Arc<ApiState> {
        &self.api
    }

    /// The ingress WAL.
    pub fn wal(&self) -> &Arc<Wal> {
        &self.wal
    }

    /// The checkpoint store.
    pub fn checkpoint(&self) -> &Arc<CheckpointStore> {
        &self.checkpoint
    }

    /// The consume service.
    pub fn consume(&self) -> &Arc<ConsumeService> {
        &self.consume
    }

    /// The partition logs this node opened.
    pub fn logs(&self) -> &Arc<LocalLogs> {
        &self.logs
    }

    /// Where this node's fan-out cursors stand: the API's children listing
    /// reads it, and the forward service answers other nodes from it.
    pub fn fanout(&self) -> &Arc<FanoutStatus> {
        &self.api.fanout
    }

    /// Plugs in the shipper remote children's cursors ship through (the
    /// process that runs the node builds it: outbound client, sealed
    /// credentials). Returns false if one was plugged in before.
    pub fn attach_remote_shipper(&self, shipper: Arc<dyn RemoteShipper>) -> bool {
        self.remote_plane.attach(shipper)
    }

    /// Plugs in the probe that checks a remote child's target on attach
    /// and resume (the process builds it on its outbound client). Returns
    /// false if one was plugged in before.
    pub fn attach_remote_probe(&self, probe: Arc<dyn crate::remote_children::RemoteProbe>) -> bool {
        self.api.remote_probe.set(probe).is_ok()
    }

    /// The probe that checks remote children's targets from this node:
    /// the one plugged in, or one that skips every check.
    pub fn remote_probe(&self) -> Arc<dyn crate::remote_children::RemoteProbe> {
        self.api.remote_probe.get().map_or_else(
            || Arc::new(crate::remote_children::NoRemoteProbe) as Arc<_>,
            Arc::clone,
        )
    }

    /// The per-partition commit combiners: a remote commit service
    /// (`remote::CommitService::attach`) commits into the same ones as the
    /// local dispatcher, under the same produce locks.
    pub fn combiners(&self) -> &Arc<Combiners> {
        &self.combiners
    }

    /// What the dispatcher reports.
    pub fn dispatch_status(&self) -> &Arc<DispatchStatus> {
        &self.dispatch_status
    }

    /// Whether every durable WAL record is dispatched (backlog 0).
    pub fn drained(&self) -> bool {
        self.dispatch_status
            .checkpoint_stored
            .load(Ordering::Acquire)
            >= self.wal.next_durable_seq()
    }

    /// Graceful stop: `/healthz` turns 503, parked consumes answer `204`,
    /// every consumer position is written out, the dispatcher stops, the
    /// checkpoint is synced, the WAL closes (staged records are still
    /// written), the partition logs close.
    pub fn shutdown(mut self) {
        self.api.health.shutting_down.store(true, Ordering::Release);
        self.stop_moves();
        if let Some(watch) = self.decommission.take() {
            watch.stop();
        }
        if let Some(worker) = self.consumer_state_worker.take() {
            worker.stop();
        }
        self.consume.shutdown();
        if let Some(fanout) = self.fanout.take() {
            fanout.shutdown();
        }
        if let Some(dispatcher) = self.dispatcher.take() {
            dispatcher.stop();
        }
        self.stop_partition_workers();
        if let Err(error) = self.checkpoint.shutdown() {
            tracing::warn!(%error, "final checkpoint sync failed; a restart dispatches some records again");
        }
        self.wal.close();
        self.logs.close_all();
    }

    /// Stops the threads that look after the partition store: incarnation
    /// housekeeping, retention and the partition poller.
    fn stop_partition_workers(&mut self) {
        if let Some(housekeeping) = self.housekeeping.take() {
            housekeeping.stop();
        }
        if let Some(retention) = self.retention.take() {
            retention.stop();
        }
        if let Some(poller) = self.poller.take() {
            poller.stop();
        }
    }

    /// Stops the node's threads without syncing anything, as after a crash
    /// (tests: the disk was already cut under it).
    pub fn abandon(mut self) {
        self.stop_moves();
        if let Some(watch) = self.decommission.take() {
            watch.stop();
        }
        if let Some(worker) = self.consumer_state_worker.take() {
            worker.stop();
        }
        if let Some(fanout) = self.fanout.take() {
            fanout.shutdown();
        }
        self.stop_partition_workers();
        if let Some(dispatcher) = self.dispatcher.take() {
            dispatcher.stop();
        }
        self.wal.close();
    }
}

#[cfg(test)]
mod tests;
