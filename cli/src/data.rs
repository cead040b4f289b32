//! `narad data`: a data node as its own process, following a control plane
//! of `narad control` nodes over the cluster transport.
//!
//! Start: the whole configuration is validated first (exit 2 naming the
//! setting); then the control nodes' addresses are resolved, the HTTP port
//! and the cluster socket are bound (exit 1 if taken), the metadata feed and
//! the leader watch start, the node registers with the leader (retrying
//! every control node in turn) and waits for its replica to catch up once,
//! then the disk backend, the ingress WAL and the dispatcher open, the
//! node starts taking commits from other data nodes, and the HTTP API is
//! served. Records for a partition another data node owns are committed
//! there over the cluster transport (`CommitProduceBatch`), at the RPC
//! address that node registered (resolved again every few seconds). `/readyz` answers `200` only while the replica is
//! caught up and a control-plane leader was heard within 5 s.
//!
//! Stop (SIGTERM or SIGINT): readiness off, no new connections, in-flight
//! requests drained within `http.shutdown_grace`, then the node shuts down
//! (dispatcher stopped, checkpoint synced, WAL and logs closed), exit 0.

pub(crate) mod config;
pub(crate) mod front;
pub(crate) mod http;
mod peers;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use narad_controlplane::node::ControlClient;
use narad_dataplane::metadata::MetadataReplica;
use narad_dataplane::node::{DataNode, DataNodeConfig, NodeServices, RetentionConfig};
use narad_disk::clock::{Clock, SystemClock};
use narad_disk::{BackendChoice, open_backend};
use narad_protocol::ClusterAuth;
use tokio::task::JoinHandle;
use tracing::{error, info};

pub(crate) use self::config::defaults::SHUTDOWN_GRACE;
use self::config::{ClusterSecurity, ConfigError, DataConfig, Layer, Setting, keys};
use self::http::{ReadyCheck, ReadyGate};
use self::peers::Peers;
use crate::bridge::{Bridge, ControlAdmin, ControlConfirm, LEADER_HEARD_WITHIN};
use crate::control::wait_for_signal;

/// Exit code for an invalid configuration.
const EXIT_CONFIG: u8 = 2;
/// Exit code for a failure to start (a port taken, a disk that will not
/// open).
const EXIT_START: u8 = 1;
/// How often the start checks whether the replica has caught up.
const CATCH_UP_POLL: Duration = Duration::from_millis(50);

/// Flags of `narad data`. Each has a config file key and an environment
/// variable too (see docs/operations.md); a flag wins over both.
#[derive(Debug, Args)]
pub(crate) struct DataArgs {
    /// JSON config file (strict: unknown keys are refused).
    #[arg(long)]
    config: Option<PathBuf>,
    /// This data node's id (1, 2, 3, ...): cluster.node_id.
    #[arg(long)]
    node_id: Option<String>,
    /// Control nodes' cluster addresses, host:port,...: cluster.control_nodes.
    #[arg(long)]
    control_nodes: Option<String>,
    /// UDP address of this node's RPC socket (default: http.addr's):
    /// cluster.rpc_addr.
    #[arg(long)]
    rpc_addr: Option<String>,
    /// Host others reach this node at: cluster.advertise_host.
    #[arg(long)]
    advertise_host: Option<String>,
    /// TCP address of the HTTP API: http.addr.
    #[arg(long)]
    http_addr: Option<String>,
    /// Time in-flight requests get after a stop signal, e.g. 10s:
    /// http.shutdown_grace.
    #[arg(long)]
    shutdown_grace: Option<String>,
    /// Longest consume wait, e.g. 10s (0: the API's 30 s ceiling):
    /// http.max_consume_wait.
    #[arg(long)]
    max_consume_wait: Option<String>,
    /// Consumes in flight per identity, 0 = no cap:
    /// http.max_consume_in_flight_per_identity.
    #[arg(long)]
    max_consume_in_flight_per_identity: Option<String>,
    /// Produces in flight per identity, 0 = no cap:
    /// http.max_produce_in_flight_per_identity.
    #[arg(long)]
    max_produce_in_flight_per_identity: Option<String>,
    /// true or false: http.metrics_unauthenticated.
    #[arg(long)]
    metrics_unauthenticated: Option<String>,
    /// true or false: one log line a request on target narad::access,
    /// http.access_log.
    #[arg(long)]
    access_log: Option<String>,
    /// Data directory: storage.data_dir.
    #[arg(long)]
    data_dir: Option<String>,
    /// 0 to 256 threads serving HTTP connections: http.front_threads.
    #[arg(long)]
    http_front_threads: Option<String>,
    /// 10 to 60000: storage.consumer_offset_commit_interval_ms.
    #[arg(long)]
    consumer_offset_commit_interval_ms: Option<String>,
    /// 1000 to 3600000: storage.retention_check_interval_ms.
    #[arg(long)]
    retention_check_interval_ms: Option<String>,
    /// 0 (off), or 60000 and up: storage.cold_retention_walk_ms.
    #[arg(long)]
    cold_retention_walk_ms: Option<String>,
    /// 0 (off), or 60000 and up: storage.idle_log_eviction_ms.
    #[arg(long)]
    idle_log_eviction_ms: Option<String>,
    /// true or false: storage.ingress_wal_prealloc.
    #[arg(long)]
    ingress_wal_prealloc: Option<String>,
    /// true or false: storage.partition_log_prealloc.
    #[arg(long)]
    partition_log_prealloc: Option<String>,
    /// true or false: storage.ingress_wal_inline_flush.
    #[arg(long)]
    ingress_wal_inline_flush: Option<String>,
    /// Records in one fan-out slab at most: fanout.max_batch_records.
    #[arg(long)]
    fanout_max_batch_records: Option<String>,
    /// Bytes in one fan-out slab at most: fanout.max_batch_bytes.
    #[arg(long)]
    fanout_max_batch_bytes: Option<String>,
    /// How long a fan-out slab waits to fill: fanout.linger_ms.
    #[arg(long)]
    fanout_linger_ms: Option<String>,
    /// true or false: security.enabled.
    #[arg(long)]
    security_enabled: Option<String>,
    /// bcrypt cost of password hashes this node makes: security.bcrypt_cost.
    #[arg(long)]
    bcrypt_cost: Option<String>,
    /// true or false: security.allow_insecure_cluster.
    #[arg(long)]
    allow_insecure_cluster: Option<String>,
    /// debug, info, warn or error: log.level.
    #[arg(long)]
    log_level: Option<String>,
    /// json (the default: one object a line) or text: log.format.
    #[arg(long)]
    log_format: Option<String>,
}

impl DataArgs {
    fn flag_layer(&self) -> Layer {
        let flags: [(Setting, &Option<String>); 28] = [
            (keys::NODE_ID, &self.node_id),
            (keys::CONTROL_NODES, &self.control_nodes),
            (keys::RPC_ADDR, &self.rpc_addr),
            (keys::ADVERTISE_HOST, &self.advertise_host),
            (keys::HTTP_ADDR, &self.http_addr),
            (keys::SHUTDOWN_GRACE, &self.shutdown_grace),
            (keys::FRONT_THREADS, &self.http_front_threads),
            (keys::MAX_CONSUME_WAIT, &self.max_consume_wait),
            (
                keys::CONSUME_IN_FLIGHT,
                &self.max_consume_in_flight_per_identity,
            ),
            (
                keys::PRODUCE_IN_FLIGHT,
                &self.max_produce_in_flight_per_identity,
            ),
            (keys::METRICS_UNAUTHENTICATED, &self.metrics_unauthenticated),
            (keys::ACCESS_LOG, &self.access_log),
            (keys::DATA_DIR, &self.data_dir),
            (
                keys::OFFSET_COMMIT_INTERVAL,
                &self.consumer_offset_commit_interval_ms,
            ),
            (
                keys::RETENTION_CHECK_INTERVAL,
                &self.retention_check_interval_ms,
            ),
            (keys::COLD_RETENTION_WALK, &self.cold_retention_walk_ms),
            (keys::IDLE_LOG_EVICTION, &self.idle_log_eviction_ms),
            (keys::WAL_PREALLOC, &self.ingress_wal_prealloc),
            (keys::LOG_PREALLOC, &self.partition_log_prealloc),
            (keys::WAL_INLINE_FLUSH, &self.ingress_wal_inline_flush),
            (keys::FANOUT_BATCH_RECORDS, &self.fanout_max_batch_records),
            (keys::FANOUT_BATCH_BYTES, &self.fanout_max_batch_bytes),
            (keys::FANOUT_LINGER, &self.fanout_linger_ms),
            (keys::SECURITY, &self.security_enabled),
            (keys::BCRYPT_COST, &self.bcrypt_cost),
            (keys::ALLOW_INSECURE, &self.allow_insecure_cluster),
            (keys::LOG_LEVEL, &self.log_level),
            (keys::LOG_FORMAT, &self.log_format),
        ];
        Layer::from_flags(flags)
    }

    fn resolve(&self) -> Result<DataConfig, String> {
        let layers = crate::process::config_layers(self.config.as_deref(), self.flag_layer())?;
        config::resolve(&layers, |name| std::env::var(name).ok()).map_err(|e| e.to_string())
    }
}

/// Why the node stopped before serving.
#[derive(Debug)]
enum Failure {
    /// A setting that validated but does not work here (exit 2).
    Config(ConfigError),
    /// Something the environment refused (exit 1).
    Start(String),
}

/// Runs a data node until SIGINT or SIGTERM.
pub(crate) fn run(args: &DataArgs) -> ExitCode {
    let config = match args.resolve() {
        Ok(config) => config,
        Err(message) => {
            eprintln!("narad data: {message}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let runtime =
        match crate::process::logging_and_runtime("data", &config.log_level, &config.log_format) {
            Ok(runtime) => runtime,
            Err(code) => return code,
        };
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Config(e)) => {
            eprintln!("narad data: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(Failure::Start(message)) => {
            error!("{message}");
            eprintln!("narad data: {message}");
            ExitCode::from(EXIT_START)
        }
    }
}

/// Resolves each `host:port` of `cluster.control_nodes` to its first
/// address.
async fn control_addrs(names: &[String]) -> Result<Vec<SocketAddr>, Failure> {
    let mut addrs = Vec::with_capacity(names.len());
    for name in names {
        let resolved = tokio::net::lookup_host(name.as_str())
            .await
            .ok()
            .and_then(|mut found| found.next());
        let Some(addr) = resolved else {
            return Err(Failure::Config(ConfigError {
                setting: keys::CONTROL_NODES.key.into(),
                from: String::new(),
                reason: format!("{name:?} does not resolve to an address"),
            }));
        };
        addrs.push(addr);
    }
    Ok(addrs)
}

fn cluster_auth(security: &ClusterSecurity) -> ClusterAuth {
    match security {
        ClusterSecurity::Secret(secret) => ClusterAuth::Secret(secret.clone()),
        ClusterSecurity::Insecure => ClusterAuth::InsecureDevOnly,
    }
}

/// The tasks that keep the bridge running, stopped in [`Tasks::stop`].
#[derive(Debug, Default)]
struct Tasks(Vec<JoinHandle<()>>);

impl Tasks {
    async fn stop(self) {
        for task in &self.0 {
            task.abort();
        }
        for task in self.0 {
            // Cancelled is the expected end; the task's state is dropped.
            let _ = task.await;
        }
    }
}

/// Registers the node and waits for its replica to catch up once; `false`
/// when a stop signal came first.
async fn join(bridge: &Bridge, replica: &MetadataReplica, config: &DataConfig) -> bool {
    let joined = async {
        bridge
            .register(&config.advertised_http(), &config.advertised_rpc())
            .await;
        info!(node = config.node_id, "registered with the control plane");
        while !replica.is_caught_up() {
            tokio::time::sleep(CATCH_UP_POLL).await;
        }
    };
    tokio::select! {
        () = joined => true,
        () = wait_for_signal() => false,
    }
}

/// The leader condition of `/readyz`.
pub(crate) fn leader_check(bridge: &Arc<Bridge>) -> ReadyCheck {
    let bridge = Arc::clone(bridge);
    Box::new(move || {
        if bridge.leader_heard_within(LEADER_HEARD_WITHIN) {
            Ok(())
        } else {
            Err(format!(
                "no control-plane leader heard from within {} s",
                LEADER_HEARD_WITHIN.as_secs()
            ))
        }
    })
}

async fn serve(config: DataConfig) -> Result<(), Failure> {
    let controls = control_addrs(&config.control_nodes).await?;
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| Failure::Start(format!("cannot create {}: {e}", config.data_dir.display())))?;
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .map_err(|e| Failure::Start(format!("cannot listen on {}: {e}", config.http_addr)))?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let peers = Peers::bind(
        config.rpc_addr,
        cluster_auth(&config.cluster_security),
        clock,
    )
    .map_err(|e| Failure::Start(format!("cluster socket {}: {e}", config.rpc_addr)))?;
    let replica = Arc::new(MetadataReplica::new(config.node_id));
    let bridge = Bridge::new(
        ControlClient::new(Arc::clone(peers.transport())),
        controls,
        config.node_id,
        Arc::clone(&replica),
    );
    let mut tasks = Tasks(vec![
        bridge.spawn_feed(),
        bridge.spawn_leader_watch(),
        bridge.spawn_address_book(),
    ]);
    info!(node = config.node_id, http = %config.http_addr, rpc = %config.rpc_addr,
          security = config.api.security, "narad data starting");
    if !join(&bridge, &replica, &config).await {
        tasks.stop().await;
        return Ok(());
    }
    tasks.0.push(bridge.spawn_heartbeat());
    let served = serve_node(&config, &bridge, &peers, replica, listener).await;
    tasks.stop().await;
    drop(bridge);
    peers.shutdown().await;
    served
}

/// Opens the node's storage, serves HTTP until a stop signal, and shuts
/// the node down.
async fn serve_node(
    config: &DataConfig,
    bridge: &Arc<Bridge>,
    peers: &Peers,
    replica: Arc<MetadataReplica>,
    listener: tokio::net::TcpListener,
) -> Result<(), Failure> {
    let disk = open_backend(BackendChoice::Auto)
        .map_err(|e| Failure::Start(format!("disk backend: {e}")))?;
    let mut node_config = DataNodeConfig::new(&config.data_dir);
    node_config.api = config.api.clone();
    if let Some(interval) = config.consumer_offset_commit_interval {
        node_config.consumer_state.durable_interval = interval;
    }
    node_config.retention = RetentionConfig {
        check_interval: config.retention_check_interval,
        cold_walk: config.cold_retention_walk,
        idle_eviction: config.idle_log_eviction,
    };
    node_config.wal.prealloc = config.ingress_wal_prealloc;
    node_config.set_partition_log_prealloc(config.partition_log_prealloc);
    node_config.wal.inline_flush = config.ingress_wal_inline_flush;
    node_config.fanout = config.fanout;
    let services = NodeServices {
        disk,
        leader: Arc::new(ControlConfirm::new(
            Arc::clone(bridge),
            tokio::runtime::Handle::current(),
        )),
        remote: peers.remote_commit_target(bridge.addresses()),
        admin: Arc::new(ControlAdmin::new(Arc::clone(bridge))),
        replica: Arc::clone(&replica),
        clock: Arc::clone(peers.clock()),
    };
    let node = tokio::task::block_in_place(|| DataNode::start(services, node_config))
        .map_err(|e| Failure::Start(format!("data node did not start: {e}")))?;
    peers.attach(&node, replica, bridge.addresses());
    info!(http = %config.http_addr, "narad data serving");
    let gate = ReadyGate::new(vec![leader_check(bridge)]);
    let served = http::serve(
        &node,
        listener,
        gate,
        None,
        config.shutdown_grace,
        config.front_threads,
        wait_for_signal(),
    )
    .await;
    info!("shutting down");
    tokio::task::block_in_place(|| node.shutdown());
    served.map_err(|e| Failure::Start(format!("HTTP API on {}: {e}", config.http_addr)))
}
