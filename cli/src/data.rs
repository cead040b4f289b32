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
pub(crate) mod remotes_config;

use narad_dataplane::http::remotes::gauges::PLAINTEXT_RAFT;
mod tls_health;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use narad_clock::{Clock, SystemClock};
use narad_controlplane::node::ControlClient;
use narad_dataplane::metadata::MetadataReplica;
use narad_dataplane::node::{DataNode, DataNodeConfig, NodeServices, RetentionConfig};
use narad_disk::{BackendChoice, open_backend};
use narad_protocol::ClusterAuth;
use tokio::task::JoinHandle;
use tracing::{error, info};

pub(crate) use self::config::defaults::SHUTDOWN_GRACE;
use self::config::{ClusterSecurity, ConfigError, DataConfig, DataSettings, keys};
use self::http::{ReadyCheck, ReadyGate};
use self::peers::Peers;
use crate::bridge::{Bridge, ControlAdmin, ControlConfirm, LEADER_HEARD_WITHIN};
use crate::control::wait_for_signal;
use crate::process::{self, EXIT_CONFIG, EXIT_START};
use crate::settings::SettingArgs;

/// How often the start checks whether the replica has caught up.
const CATCH_UP_POLL: Duration = Duration::from_millis(50);

/// Flags of `narad data`: `--config` and one per setting
/// ([`config::keys`]). Each setting has a config file key and an
/// environment variable too (see docs/operations.md); a flag wins over
/// both.
pub(crate) type DataArgs = SettingArgs<DataSettings>;

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
    let (config, runtime) = match process::configure(
        "data",
        args,
        |layers| config::resolve(layers, process::env),
        |config| (&config.log_level, &config.log_format),
    ) {
        Ok(started) => started,
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
        config.cluster_tls.clone(),
        Arc::clone(&clock),
    )
    .map_err(|e| Failure::Start(format!("cluster socket {}: {e}", config.rpc_addr)))?;
    let replica = Arc::new(MetadataReplica::new(config.node_id));
    let bridge = Bridge::new(
        ControlClient::new(Arc::clone(peers.transport())),
        controls,
        config.node_id,
        Arc::clone(&replica),
        clock,
    );
    let mut tasks = Tasks(vec![
        bridge.spawn_feed(),
        bridge.spawn_leader_watch(),
        bridge.spawn_address_book(),
    ]);
    info!(node = config.node_id, http = %config.http_addr, rpc = %config.rpc_addr,
          security = config.api.security, mutual_tls = config.cluster_tls.is_some(),
          "narad data starting");
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
    node_config.wal_dir = config.wal_dir.clone();
    node_config.api = config.api.clone();
    node_config.remote_secrets = config.remote_secrets.clone();
    if let Some(interval) = config.consumer_offset_commit_interval {
        node_config.consumer_state.durable_interval = interval;
    }
    node_config.retention = RetentionConfig {
        check_interval: config.retention_check_interval,
        cold_walk: config.cold_retention_walk,
        idle_eviction: config.idle_log_eviction,
    };
    node_config.consume.idle_shard_release = config.idle_shard_release;
    node_config.log.tail_cache_bytes = config.tail_cache_bytes;
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
    bridge.serve_heartbeat_metrics(&node.api().metrics);
    // Without mutual TLS the cluster plane carries the sealed remote
    // credentials under its own TLS only (spec §9).
    let plaintext_raft = if config.cluster_tls.is_none() {
        1.0
    } else {
        0.0
    };
    node.api().metrics.set(PLAINTEXT_RAFT, &[], plaintext_raft);
    info!(http = %config.http_addr, "narad data serving");
    let mut gate = ReadyGate::new(vec![leader_check(bridge)]);
    if let Some(tls) = &config.cluster_tls {
        tls_health::publish_expiry(&node.api().metrics, tls.expiry());
        gate = gate.with_expired(tls_health::expired_check(
            tls.expiry(),
            Arc::clone(peers.clock()),
        ));
    }
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
