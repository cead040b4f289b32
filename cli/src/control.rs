//! `narad control`: run a control-plane node.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use narad_controlplane::node::ControlNode;
use narad_controlplane::node::config::{self, Layer, Setting, keys};
use tracing::{error, info};

/// Exit code for an invalid configuration.
const EXIT_CONFIG: u8 = 2;
/// Exit code for a failure to start (a port taken, a locked database).
const EXIT_START: u8 = 1;

/// Flags of `narad control`. Each has a config file key and an environment
/// variable too (see docs/operations.md); a flag wins over both.
#[derive(Debug, Args)]
pub(crate) struct ControlArgs {
    /// JSON config file (strict: unknown keys are refused).
    #[arg(long)]
    config: Option<PathBuf>,
    /// This control node's id (1, 2, 3, ...): cluster.node_id.
    #[arg(long)]
    node_id: Option<String>,
    /// UDP address of the cluster transport: cluster.addr.
    #[arg(long)]
    cluster_addr: Option<String>,
    /// Address other control nodes dial: cluster.advertise_addr.
    #[arg(long)]
    advertise_addr: Option<String>,
    /// Initial voters, id@host:port,...: cluster.peers.
    #[arg(long)]
    peers: Option<String>,
    /// Leader heartbeat interval, e.g. 100ms: cluster.raft_heartbeat_interval.
    #[arg(long)]
    raft_heartbeat_interval: Option<String>,
    /// Election timeout, e.g. 1s: cluster.raft_election_timeout.
    #[arg(long)]
    raft_election_timeout: Option<String>,
    /// Log entries between snapshots: cluster.raft_snapshot_threshold.
    #[arg(long)]
    raft_snapshot_threshold: Option<String>,
    /// Log entries kept behind a snapshot: cluster.raft_trailing_logs.
    #[arg(long)]
    raft_trailing_logs: Option<String>,
    /// HTTP address of /healthz, /readyz, /metrics, /status: http.addr.
    #[arg(long)]
    http_addr: Option<String>,
    /// Data directory: storage.data_dir.
    #[arg(long)]
    data_dir: Option<String>,
    /// true or false: security.enabled.
    #[arg(long)]
    security_enabled: Option<String>,
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

impl ControlArgs {
    fn flag_layer(&self) -> Layer {
        let flags: [(Setting, &Option<String>); 14] = [
            (keys::NODE_ID, &self.node_id),
            (keys::CLUSTER_ADDR, &self.cluster_addr),
            (keys::ADVERTISE_ADDR, &self.advertise_addr),
            (keys::PEERS, &self.peers),
            (keys::HEARTBEAT, &self.raft_heartbeat_interval),
            (keys::ELECTION, &self.raft_election_timeout),
            (keys::SNAPSHOT_THRESHOLD, &self.raft_snapshot_threshold),
            (keys::TRAILING_LOGS, &self.raft_trailing_logs),
            (keys::HTTP_ADDR, &self.http_addr),
            (keys::DATA_DIR, &self.data_dir),
            (keys::SECURITY, &self.security_enabled),
            (keys::ALLOW_INSECURE, &self.allow_insecure_cluster),
            (keys::LOG_LEVEL, &self.log_level),
            (keys::LOG_FORMAT, &self.log_format),
        ];
        Layer::from_flags(flags)
    }

    fn resolve(&self) -> Result<config::ControlConfig, String> {
        let layers = crate::process::config_layers(self.config.as_deref(), self.flag_layer())?;
        config::resolve(&layers, |name| std::env::var(name).ok()).map_err(|e| e.to_string())
    }
}

/// Runs a control node until SIGINT or SIGTERM.
pub(crate) fn run(args: &ControlArgs) -> ExitCode {
    let config = match args.resolve() {
        Ok(config) => config,
        Err(message) => {
            eprintln!("narad control: {message}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let runtime =
        match crate::process::logging_and_runtime("control", &config.log_level, &config.log_format)
        {
            Ok(runtime) => runtime,
            Err(code) => return code,
        };
    runtime.block_on(async move {
        let node = match ControlNode::start(config).await {
            Ok(node) => node,
            Err(e) => {
                error!(error = %e, "control node did not start");
                return ExitCode::from(EXIT_START);
            }
        };
        wait_for_signal().await;
        info!("shutting down");
        node.shutdown().await;
        ExitCode::SUCCESS
    })
}

/// Resolves on the first SIGINT or SIGTERM.
pub(crate) async fn wait_for_signal() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(e) => {
                error!(error = %e, "cannot watch SIGTERM; stopping on Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
