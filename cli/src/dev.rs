//! `narad dev`: one control node and one data node in this process, on
//! loopback. Security is off unless `--secure` turns it on for the HTTP
//! API (users, Basic auth, the root admin). The data node reaches the
//! control node over the loopback cluster transport through
//! [`crate::bridge`], unauthenticated in both modes: nothing outside the
//! process can reach a loopback socket it did not open. The data node's
//! incarnation housekeeping (deleted topics' directories quarantined, then
//! removed once the control node confirms) runs inside it as in `narad
//! data`. Its `/metrics` serves both nodes' series: the data node's, then
//! the control node's (whose own HTTP port is an ephemeral loopback one).

mod settings;

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{ArgMatches, Args, FromArgMatches};
use narad_clock::{Clock, SystemClock};
use narad_controlplane::node::config::layered::{ConfigError, Layer};
use narad_controlplane::node::config::{
    ClusterSecurity, ControlConfig, ENV_ADMIN_PASSWORD, Peer, defaults,
};
use narad_controlplane::node::{ControlClient, ControlNode};
use narad_dataplane::credentials::RemoteSecrets;
use narad_dataplane::dispatch::NoRemoteTarget;
use narad_dataplane::metadata::MetadataReplica;
use narad_dataplane::metrics::ClusterCallMetrics;
use narad_dataplane::moves::DirectLinks;
use narad_dataplane::node::{DataNode, DataNodeConfig, NodeServices};
use narad_dataplane::topology::NodeId;
use narad_disk::{BackendChoice, open_backend};
use narad_protocol::{ClusterAuth, Node, NodeConfig, Router};
use tracing::{error, info};

use self::settings::{DevConfig, DevSettings};
use crate::bridge::{Bridge, ControlAdmin, ControlConfirm};
use crate::control::wait_for_signal;
use crate::data::http::{self, ReadyCheck, ReadyGate};
use crate::data::remotes_config;
use crate::data::{SHUTDOWN_GRACE, leader_check};
use crate::process::{EXIT_CONFIG, EXIT_START};

/// The control node's Raft id.
const CONTROL_NODE: u64 = 1;
/// The data node's id.
const DATA_NODE: NodeId = 1;

/// Flags of `narad dev` that only it takes.
#[derive(Debug, Args)]
pub(crate) struct DevFlags {
    /// Port of the data node's HTTP API on 127.0.0.1.
    #[arg(long, default_value_t = 7942)]
    port: u16,
    /// Directory holding all data (the control node's under `control/`).
    #[arg(long, default_value = "data")]
    data_dir: PathBuf,
    /// Turn security on for the HTTP API: every request needs Basic auth,
    /// and the root admin `admin` is seeded with NARAD_ADMIN_PASSWORD (or a
    /// generated password, logged once).
    #[arg(long)]
    secure: bool,
}

/// Flags of `narad dev`: its own, then the data-node settings it shares
/// with `narad data` ([`settings`]), as the layers they make.
#[derive(Debug)]
pub(crate) struct DevArgs {
    flags: DevFlags,
    layers: Vec<Layer<DevSettings>>,
}

impl Args for DevArgs {
    fn augment_args(command: clap::Command) -> clap::Command {
        settings::augment(DevFlags::augment_args(command))
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}

impl FromArgMatches for DevArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(Self {
            flags: DevFlags::from_arg_matches(matches)?,
            layers: settings::layers(matches),
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// What `narad dev` runs with: its flags and its validated settings.
struct Dev {
    port: u16,
    data_dir: PathBuf,
    secure: bool,
    settings: DevConfig,
    /// What remote passwords are sealed under.
    remote_secrets: RemoteSecrets,
}

/// With `--secure` and no `NARAD_CLUSTER_SECRET`, a random secret for this
/// process alone (as the spec's secured single node makes): remotes added
/// in this run open until it stops, and need their passwords set again
/// after a restart.
fn dev_remote_secrets(secrets: RemoteSecrets, secure: bool) -> RemoteSecrets {
    if !secure || secrets.current.is_some() {
        return secrets;
    }
    let mut bytes = zeroize::Zeroizing::new(vec![0u8; DEV_SECRET_BYTES]);
    rand::fill(bytes.as_mut_slice());
    RemoteSecrets {
        current: Some(bytes),
        ..secrets
    }
}

/// Bytes of the per-process secret of [`dev_remote_secrets`].
const DEV_SECRET_BYTES: usize = 32;

const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// The root admin the control plane seeds when security is on.
const ROOT_ADMIN: &str = "admin";

fn banner(dev: &Dev) {
    let security = if dev.secure {
        format!(
            "SECURITY ON: every API request needs HTTP Basic auth; the root admin `{ROOT_ADMIN}` \
             is seeded on first start with {ENV_ADMIN_PASSWORD} (or a generated password, \
             logged once). The two nodes talk unauthenticated over loopback"
        )
    } else {
        "SECURITY OFF: no authentication on the API or between the nodes".to_owned()
    };
    let text = format!(
        "narad {} dev: DEVELOPMENT NODE, {security}. One control node and one data node \
         in this process on 127.0.0.1. Do not expose it or use it in production.\n  \
         HTTP API: http://127.0.0.1:{}\n  data: {}",
        env!("CARGO_PKG_VERSION"),
        dev.port,
        dev.data_dir.display()
    );
    if json_logs(dev) {
        // Every line of a JSON log is one object, the banner too.
        tracing::warn!("{text}");
    } else {
        // Not `eprintln!`: a banner that cannot be written (stderr on a
        // full disk) must not stop the node.
        let _ = writeln!(std::io::stderr(), "{text}");
    }
}

fn json_logs(dev: &Dev) -> bool {
    dev.settings.log_format == "json"
}

/// A free UDP port on loopback for the control node's cluster transport
/// (nothing outside this process dials it).
fn free_udp_port() -> std::io::Result<SocketAddr> {
    UdpSocket::bind((LOOPBACK, 0))?.local_addr()
}

fn control_config(dev: &Dev, cluster_addr: SocketAddr) -> ControlConfig {
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
        data_dir: dev.data_dir.clone(),
        security_enabled: dev.secure,
        cluster_security: ClusterSecurity::Insecure,
        cluster_tls: None,
        log_level: defaults::LOG_LEVEL.into(),
        log_format: dev.settings.log_format.clone(),
        admin_password: std::env::var(ENV_ADMIN_PASSWORD)
            .ok()
            .filter(|password| !password.is_empty()),
    }
}

/// Runs `narad dev` until SIGINT or SIGTERM.
pub(crate) fn run(args: &DevArgs) -> ExitCode {
    let env = |name: &str| std::env::var(name).ok();
    let resolved = settings::resolve(&args.layers).and_then(|settings| {
        if settings.remotes.any_set() && !args.flags.secure {
            return Err(ConfigError::new(
                "remotes",
                String::new(),
                "remotes settings need --secure: remotes exist only with security on",
            ));
        }
        let secrets = remotes_config::secrets(&env, args.flags.secure)?;
        Ok((settings, secrets))
    });
    let dev = match resolved {
        Ok((settings, remote_secrets)) => Dev {
            port: args.flags.port,
            data_dir: args.flags.data_dir.clone(),
            secure: args.flags.secure,
            settings,
            remote_secrets: dev_remote_secrets(remote_secrets, args.flags.secure),
        },
        Err(e) => {
            eprintln!("narad dev: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    crate::process::init_logging(defaults::LOG_LEVEL, &dev.settings.log_format);
    crate::process::disable_transparent_huge_pages();
    // Bound before the banner: a port in use fails alone, without first
    // announcing a node that never serves.
    let http_addr = SocketAddr::from((LOOPBACK, dev.port));
    let listener = match std::net::TcpListener::bind(http_addr)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
    {
        Ok(listener) => listener,
        Err(e) => {
            let message = format!("cannot listen on {http_addr}: {e}");
            error!("{message}");
            if !json_logs(&dev) {
                eprintln!("narad dev: {message}");
            }
            return ExitCode::from(EXIT_START);
        }
    };
    banner(&dev);
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
    match runtime.block_on(serve(&dev, listener)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            error!("{message}");
            if !json_logs(&dev) {
                eprintln!("narad dev: {message}");
            }
            ExitCode::from(EXIT_START)
        }
    }
}

async fn serve(dev: &Dev, listener: std::net::TcpListener) -> Result<(), String> {
    std::fs::create_dir_all(&dev.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", dev.data_dir.display()))?;
    let http_addr = SocketAddr::from((LOOPBACK, dev.port));
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| format!("cannot listen on {http_addr}: {e}"))?;
    let cluster_addr = free_udp_port()
        .map_err(|e| format!("no free loopback UDP port for the control node: {e}"))?;
    // One clock for the process: both planes read time from it.
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let control = ControlNode::start(control_config(dev, cluster_addr), Arc::clone(&clock))
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
    let transport = Arc::new(transport);
    let bridge = Bridge::new(
        ControlClient::new(Arc::clone(&transport)),
        vec![cluster_addr],
        DATA_NODE,
        Arc::clone(&replica),
        Arc::clone(&clock),
    );
    let feed = bridge.spawn_feed();
    let leader_watch = bridge.spawn_leader_watch();
    let (http_text, rpc_text) = (http_addr.to_string(), rpc_addr.to_string());
    tokio::select! {
        () = bridge.register(&http_text, &rpc_text) => {}
        () = wait_for_signal() => {
            feed.abort();
            leader_watch.abort();
            control.shutdown().await;
            return Ok(());
        }
    }
    let heartbeat = bridge.spawn_heartbeat();
    let disk = open_backend(BackendChoice::Auto).map_err(|e| format!("disk backend: {e}"))?;
    let mut config = DataNodeConfig::new(&dev.data_dir);
    config.wal_dir = dev.settings.wal_dir.clone();
    config.api.security = dev.secure;
    config.api.remotes = dev.settings.remotes.clone();
    config.remote_secrets = dev.remote_secrets.clone();
    config.api.access_log = dev.settings.access_log;
    config.wal.prealloc = dev.settings.ingress_wal_prealloc;
    config.set_partition_log_prealloc(dev.settings.partition_log_prealloc);
    config.wal.inline_flush = dev.settings.ingress_wal_inline_flush;
    config.retention.check_interval = dev.settings.retention_check_interval;
    config.log.tail_cache_bytes = dev.settings.tail_cache_bytes;
    let services = NodeServices {
        disk,
        leader: Arc::new(ControlConfirm::new(
            Arc::clone(&bridge),
            tokio::runtime::Handle::current(),
        )),
        // The only data node owns every partition: nothing is committed
        // elsewhere, so it neither sends nor serves remote commits.
        remote: Arc::new(NoRemoteTarget),
        admin: Arc::new(ControlAdmin::new(Arc::clone(&bridge))),
        replica: Arc::clone(&replica),
        clock,
    };
    let node = tokio::task::block_in_place(|| DataNode::start(services, config))
        .map_err(|e| format!("data node did not start: {e}"))?;
    bridge.serve_heartbeat_metrics(&node.api().metrics);
    // `narad dev` has no cluster TLS: its two nodes talk over loopback.
    node.api().metrics.set(
        narad_dataplane::http::remotes::gauges::PLAINTEXT_RAFT,
        &[],
        1.0,
    );
    transport.observe_calls(Arc::new(ClusterCallMetrics::new(
        Arc::clone(&node.api().metrics),
        Arc::clone(node.logs().clock()),
    )));
    // The only data node is never a move's target or source, but its
    // runner serves the move series and sweeps as in a cluster.
    node.start_moves(Arc::new(DirectLinks::default()));
    info!(%http_addr, secure = dev.secure, "narad dev serving");
    let mut checks = vec![leader_check(&bridge)];
    if dev.secure {
        checks.push(admin_seeded_check(replica));
    }
    let served = http::serve(
        &node,
        listener,
        ReadyGate::new(checks),
        // One /metrics for the process: the control node's series follow
        // the data node's, the process_* ones only once.
        Some(control.metrics_renderer(false)),
        SHUTDOWN_GRACE,
        dev.settings.front_threads,
        wait_for_signal(),
    )
    .await;
    info!("shutting down");
    heartbeat.abort();
    leader_watch.abort();
    feed.abort();
    tokio::task::block_in_place(|| node.shutdown());
    control.shutdown().await;
    served.map_err(|e| format!("HTTP API on {http_addr}: {e}"))
}

/// With security on, `narad dev` is ready only once the root admin it
/// promised in its banner can log in: the control node seeds it shortly
/// after it first leads.
fn admin_seeded_check(replica: Arc<MetadataReplica>) -> ReadyCheck {
    Box::new(move || {
        if replica.user(ROOT_ADMIN).0.is_some() {
            Ok(())
        } else {
            Err("the root admin is not seeded yet".into())
        }
    })
}
