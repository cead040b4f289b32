//! `narad dev`: one control node and one data node in this process, on
//! loopback, with security off. The data node reaches the control node over
//! the loopback cluster transport through [`crate::bridge`].

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use narad_controlplane::node::config::{ClusterSecurity, ControlConfig, Peer, defaults};
use narad_controlplane::node::{ControlClient, ControlNode};
use narad_dataplane::dispatch::{NoRemoteTarget, NodeId};
use narad_dataplane::metadata::MetadataReplica;
use narad_dataplane::node::{DataNode, DataNodeConfig, NodeServices};
use narad_disk::{BackendChoice, open_backend};
use narad_protocol::{ClusterAuth, Node, NodeConfig, Router};
use tracing::{error, info};

use crate::bridge::{Bridge, ControlAdmin, ControlConfirm};
use crate::control::wait_for_signal;

/// Exit code for a failure to start.
const EXIT_START: u8 = 1;
/// The control node's Raft id.
const CONTROL_NODE: u64 = 1;
/// The data node's id.
const DATA_NODE: NodeId = 1;

/// Flags of `narad dev`.
#[derive(Debug, Args)]
pub(crate) struct DevArgs {
    /// Port of the data node's HTTP API on 127.0.0.1.
    #[arg(long, default_value_t = 7942)]
    port: u16,
    /// Directory holding all data (the control node's under `control/`).
    #[arg(long, default_value = "data")]
    data_dir: PathBuf,
}

const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

fn banner(args: &DevArgs) {
    eprintln!(
        "narad {} dev: DEVELOPMENT NODE, SECURITY OFF. One control node and one data node \
         in this process on 127.0.0.1; no authentication on the API or between the nodes. \
         Do not expose it or use it in production.\n  HTTP API: http://127.0.0.1:{}\n  data: {}",
        env!("CARGO_PKG_VERSION"),
        args.port,
        args.data_dir.display()
    );
}

/// A free UDP port on loopback for the control node's cluster transport
/// (nothing outside this process dials it).
fn free_udp_port() -> std::io::Result<SocketAddr> {
    UdpSocket::bind((LOOPBACK, 0))?.local_addr()
}

fn control_config(data_dir: PathBuf, cluster_addr: SocketAddr) -> ControlConfig {
    ControlConfig {
        node_id: CONTROL_NODE,
        cluster_addr,
        advertise_addr: cluster_addr.to_string(),
        peers: vec![Peer {
            id: CONTROL_NODE,
            addr: cluster_addr.to_string(),
        }],
        heartbeat_interval: defaults::HEARTBEAT,
        election_timeout: defaults::ELECTION,
        snapshot_threshold: defaults::SNAPSHOT_THRESHOLD,
        trailing_logs: defaults::TRAILING_LOGS,
        http_addr: SocketAddr::from((LOOPBACK, 0)),
        data_dir,
        security_enabled: false,
        cluster_security: ClusterSecurity::Insecure,
        log_level: defaults::LOG_LEVEL.into(),
        admin_password: None,
    }
}

/// Runs `narad dev` until SIGINT or SIGTERM.
pub(crate) fn run(args: &DevArgs) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info,openraft=warn"))
        .with_ansi(false)
        .init();
    banner(args);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("narad dev: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_START);
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            error!("{message}");
            eprintln!("narad dev: {message}");
            ExitCode::from(EXIT_START)
        }
    }
}

async fn serve(args: &DevArgs) -> Result<(), String> {
    std::fs::create_dir_all(&args.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", args.data_dir.display()))?;
    let http_addr = SocketAddr::from((LOOPBACK, args.port));
    let listener = tokio::net::TcpListener::bind(http_addr)
        .await
        .map_err(|e| format!("cannot listen on {http_addr}: {e}"))?;
    let cluster_addr = free_udp_port()
        .map_err(|e| format!("no free loopback UDP port for the control node: {e}"))?;
    let control = ControlNode::start(control_config(args.data_dir.clone(), cluster_addr))
        .await
        .map_err(|e| format!("control node did not start: {e}"))?;
    let transport = Node::bind(
        NodeConfig::new(
            SocketAddr::from((LOOPBACK, 0)),
            ClusterAuth::InsecureDevOnly,
        ),
        Router::new(),
    )
    .map_err(|e| format!("data node cluster transport: {e}"))?;
    let rpc_addr = transport.local_addr();
    let replica = Arc::new(MetadataReplica::new(DATA_NODE));
    let bridge = Bridge::new(
        ControlClient::new(Arc::new(transport)),
        cluster_addr,
        DATA_NODE,
        Arc::clone(&replica),
    );
    let feed = bridge.spawn_feed();
    tokio::select! {
        () = bridge.register(http_addr, rpc_addr) => {}
        () = wait_for_signal() => {
            feed.abort();
            control.shutdown().await;
            return Ok(());
        }
    }
    let heartbeat = bridge.spawn_heartbeat();
    let disk = open_backend(BackendChoice::Auto).map_err(|e| format!("disk backend: {e}"))?;
    let mut config = DataNodeConfig::new(&args.data_dir);
    config.api.security = false;
    let services = NodeServices {
        disk,
        leader: Arc::new(ControlConfirm::new(
            Arc::clone(&bridge),
            tokio::runtime::Handle::current(),
        )),
        remote: Arc::new(NoRemoteTarget),
        admin: Arc::new(ControlAdmin::new(Arc::clone(&bridge))),
        replica,
    };
    let node = Arc::new(
        tokio::task::block_in_place(|| DataNode::start(services, config))
            .map_err(|e| format!("data node did not start: {e}"))?,
    );
    info!(%http_addr, "narad dev serving");
    let served = node.serve(listener, wait_for_signal()).await;
    info!("shutting down");
    heartbeat.abort();
    feed.abort();
    if let Ok(node) = Arc::try_unwrap(node) {
        tokio::task::block_in_place(|| node.shutdown());
    }
    control.shutdown().await;
    served.map_err(|e| format!("HTTP API on {http_addr}: {e}"))
}
