//! `narad control` configuration: settings from built-in defaults, a JSON
//! file, environment variables and flags (later layers win, see
//! [`layered`]), validated as a whole before anything is opened. Every
//! error names the setting (its file key, and where the bad value came
//! from).

pub mod cluster_tls;
pub mod layered;

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use narad_protocol::ClusterTls;
use serde_json::Value;

use self::cluster_tls::{Exposure, require_cluster_tls, resolve_cluster_tls};
pub use self::layered::{ConfigError, Setting, Source, parse_duration};
use self::layered::{Merged, Settings, parse_bool, parse_number, parse_positive};
use crate::raft::ControlNodeId;

/// The settings of a control node, in the order `--help` lists them.
pub mod keys {
    crate::settings! {
        pub,
        NODE_ID = "cluster.node_id", "NARAD_NODE_ID", "node-id",
            "This control node's id (1, 2, 3, ...): cluster.node_id";
        CLUSTER_ADDR = "cluster.addr", "NARAD_CLUSTER_ADDR", "cluster-addr",
            "UDP address of the cluster transport: cluster.addr";
        ADVERTISE_ADDR = "cluster.advertise_addr", "NARAD_CLUSTER_ADVERTISE_ADDR", "advertise-addr",
            "Address other control nodes dial: cluster.advertise_addr";
        PEERS = "cluster.peers", "NARAD_CLUSTER_PEERS", "peers",
            "Initial voters, id@host:port,...: cluster.peers";
        HEARTBEAT = "cluster.raft_heartbeat_interval", "NARAD_CLUSTER_RAFT_HEARTBEAT_INTERVAL", "raft-heartbeat-interval",
            "Leader heartbeat interval, e.g. 100ms: cluster.raft_heartbeat_interval";
        ELECTION = "cluster.raft_election_timeout", "NARAD_CLUSTER_RAFT_ELECTION_TIMEOUT", "raft-election-timeout",
            "Election timeout, e.g. 1s: cluster.raft_election_timeout";
        SNAPSHOT_THRESHOLD = "cluster.raft_snapshot_threshold", "NARAD_CLUSTER_RAFT_SNAPSHOT_THRESHOLD", "raft-snapshot-threshold",
            "Log entries between snapshots: cluster.raft_snapshot_threshold";
        TRAILING_LOGS = "cluster.raft_trailing_logs", "NARAD_CLUSTER_RAFT_TRAILING_LOGS", "raft-trailing-logs",
            "Log entries kept behind a snapshot: cluster.raft_trailing_logs";
        HTTP_ADDR = "http.addr", "NARAD_HTTP_ADDR", "http-addr",
            "HTTP address of /healthz, /readyz, /metrics, /status: http.addr";
        DATA_DIR = shared::DATA_DIR;
        SECURITY = shared::SECURITY;
        ALLOW_INSECURE = shared::ALLOW_INSECURE;
        CLUSTER_TLS_CERT_FILE = shared::CLUSTER_TLS_CERT_FILE;
        CLUSTER_TLS_KEY_FILE = shared::CLUSTER_TLS_KEY_FILE;
        CLUSTER_TLS_CA_FILE = shared::CLUSTER_TLS_CA_FILE;
        ALLOW_PLAINTEXT_RAFT = shared::ALLOW_PLAINTEXT_RAFT;
        LOG_LEVEL = shared::LOG_LEVEL;
        LOG_FORMAT = shared::LOG_FORMAT;
    }
}

/// The environment-only secrets.
pub const ENV_CLUSTER_SECRET: &str = "NARAD_CLUSTER_SECRET";
/// The root admin's password, read once when the cluster is first seeded.
pub const ENV_ADMIN_PASSWORD: &str = "NARAD_ADMIN_PASSWORD";

/// Defaults, with why.
pub mod defaults {
    use std::time::Duration;

    /// Raft between control nodes (UDP, QUIC), the spec's port.
    pub const CLUSTER_ADDR: &str = "0.0.0.0:7943";
    /// Health and metrics over HTTP. The spec's 7942 belongs to data nodes'
    /// API, so a control node on the same host takes the next free number.
    pub const HTTP_ADDR: &str = "0.0.0.0:7944";
    pub use super::layered::defaults::{DATA_DIR, LOG_FORMAT, LOG_LEVEL};

    /// Leader heartbeats: five per election timeout, so a lost packet or
    /// two never starts an election.
    pub const HEARTBEAT: Duration = Duration::from_millis(100);
    /// A follower waits this long (randomised up to twice as long) without
    /// a heartbeat before it stands. openraft first lets the old leader's
    /// lease (the upper bound, 1 s) run out, so a crashed leader is replaced
    /// within about 1.5–2 s, near the spec's "crash election ~1 s".
    pub const ELECTION: Duration = Duration::from_millis(500);
    /// The spec's `cluster.raft_snapshot_threshold`.
    pub const SNAPSHOT_THRESHOLD: u64 = 8_192;
    /// The spec's `cluster.raft_trailing_logs`: entries kept behind a
    /// snapshot, so a follower a little behind catches up from the log
    /// instead of receiving a whole snapshot.
    pub const TRAILING_LOGS: u64 = 10_240;
}

/// At least this many initial voters: a majority of three survives one loss.
pub const PEERS_MIN: usize = 3;
/// An election timeout shorter than this many heartbeats would start
/// elections on ordinary jitter.
pub const ELECTION_HEARTBEATS_MIN: u32 = 3;

/// One initial voter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its Raft id.
    pub id: ControlNodeId,
    /// Its cluster address (`host:port`).
    pub addr: String,
}

/// How this node authenticates on the cluster plane.
#[derive(Clone, PartialEq, Eq)]
pub enum ClusterSecurity {
    /// `NARAD_CLUSTER_SECRET`.
    Secret(Vec<u8>),
    /// A random per-process secret: a secured single node without one.
    Generated,
    /// No authentication (security off, single node or explicitly allowed).
    Insecure,
}

impl fmt::Debug for ClusterSecurity {
    /// Never prints the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Secret(_) => f.write_str("Secret(..)"),
            Self::Generated => f.write_str("Generated"),
            Self::Insecure => f.write_str("Insecure"),
        }
    }
}

/// A validated control node configuration.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// This node's Raft id.
    pub node_id: ControlNodeId,
    /// Where the cluster socket binds.
    pub cluster_addr: SocketAddr,
    /// The address other control nodes dial.
    pub advertise_addr: String,
    /// The initial voters (this node alone when none are configured).
    pub peers: Vec<Peer>,
    /// Leader heartbeat interval.
    pub heartbeat_interval: Duration,
    /// Election timeout (the lower bound; the upper is twice it).
    pub election_timeout: Duration,
    /// Log entries between snapshots.
    pub snapshot_threshold: u64,
    /// Log entries kept behind the latest snapshot.
    pub trailing_logs: u64,
    /// Where `/healthz`, `/readyz` and `/metrics` listen.
    pub http_addr: SocketAddr,
    /// The data directory; the control node uses `<data_dir>/control`.
    pub data_dir: PathBuf,
    /// `security.enabled`: users and the root admin.
    pub security_enabled: bool,
    /// Cluster plane authentication.
    pub cluster_security: ClusterSecurity,
    /// Mutual TLS between nodes (`security.cluster_tls_*`), read at start;
    /// `None` without the files.
    pub cluster_tls: Option<ClusterTls>,
    /// `log.level`.
    pub log_level: String,
    /// `log.format`: `json` or `text`.
    pub log_format: String,
    /// `NARAD_ADMIN_PASSWORD`, if set.
    pub admin_password: Option<String>,
}

impl ControlConfig {
    /// Whether this node is one of the initial voters (else it joins).
    pub fn is_initial_member(&self) -> bool {
        self.peers.iter().any(|peer| peer.id == self.node_id)
    }
}

/// The control node's table of settings.
#[derive(Debug, Clone, Copy)]
pub struct ControlSettings;

impl Settings for ControlSettings {
    const ALL: &'static [Setting] = keys::ALL;

    /// Peers in a file: `[{"id": 1, "addr": "host:port"}, ...]`.
    fn file_list(setting: &Setting, items: &[Value]) -> Option<String> {
        if *setting != keys::PEERS {
            return None;
        }
        let mut parts = Vec::new();
        for item in items {
            let id = item.get("id").and_then(Value::as_u64)?;
            let addr = item.get("addr").and_then(Value::as_str)?;
            parts.push(format!("{id}@{addr}"));
        }
        Some(parts.join(","))
    }
}

/// Raw values by file key from one source.
pub type Layer = layered::Layer<ControlSettings>;

/// Builds and validates the configuration from `layers` (in increasing
/// precedence) and the environment-only secrets.
///
/// # Errors
/// The first invalid setting, named.
pub fn resolve(
    layers: &[Layer],
    env: impl Fn(&str) -> Option<String>,
) -> Result<ControlConfig, ConfigError> {
    let merged = Merged::of(layers);
    let node_id = merged.parse(keys::NODE_ID, None, parse_node_id)?;
    let cluster_addr = merged.parse_addr(keys::CLUSTER_ADDR, defaults::CLUSTER_ADDR)?;
    let http_addr = merged.parse_addr(keys::HTTP_ADDR, defaults::HTTP_ADDR)?;
    if http_addr == cluster_addr {
        return Err(merged.error(
            keys::HTTP_ADDR,
            format!("must differ from cluster.addr ({cluster_addr})"),
        ));
    }
    let peers = merged.parse(keys::PEERS, Some(Vec::new()), parse_peers)?;
    let advertise = merged.parse(keys::ADVERTISE_ADDR, Some(None), |v| Ok(Some(v.to_owned())))?;
    let advertise_addr = advertise_addr(node_id, cluster_addr, &peers, advertise, &merged)?;
    let peers = if peers.is_empty() {
        vec![Peer {
            id: node_id,
            addr: advertise_addr.clone(),
        }]
    } else {
        peers
    };
    let heartbeat_interval =
        merged.parse(keys::HEARTBEAT, Some(defaults::HEARTBEAT), parse_duration)?;
    let election_timeout =
        merged.parse(keys::ELECTION, Some(defaults::ELECTION), parse_duration)?;
    if election_timeout < heartbeat_interval * ELECTION_HEARTBEATS_MIN {
        return Err(merged.error(
            keys::ELECTION,
            format!(
                "must be at least {ELECTION_HEARTBEATS_MIN} heartbeat intervals ({:?})",
                heartbeat_interval * ELECTION_HEARTBEATS_MIN
            ),
        ));
    }
    let snapshot_threshold = merged.parse(
        keys::SNAPSHOT_THRESHOLD,
        Some(defaults::SNAPSHOT_THRESHOLD),
        |v| parse_positive(v, "log entries"),
    )?;
    let trailing_logs = merged.parse(keys::TRAILING_LOGS, Some(defaults::TRAILING_LOGS), |v| {
        parse_number(v, "a number of log entries")
    })?;
    let data_dir = merged.data_dir(keys::DATA_DIR)?;
    let security_enabled = merged.parse(keys::SECURITY, Some(true), parse_bool)?;
    let allow_insecure = merged.parse(keys::ALLOW_INSECURE, Some(false), parse_bool)?;
    let (log_level, log_format) = merged.logging(keys::LOG_LEVEL, keys::LOG_FORMAT)?;
    let cluster_security = cluster_security(
        env(ENV_CLUSTER_SECRET),
        security_enabled,
        allow_insecure,
        peers.len(),
    )?;
    let cluster_tls = resolve_cluster_tls(&merged)?;
    let others = peers.iter().filter(|peer| peer.id != node_id).count();
    require_cluster_tls(
        &merged,
        cluster_security != ClusterSecurity::Insecure,
        Exposure::of(others, cluster_addr),
        cluster_tls.as_ref(),
    )?;
    Ok(ControlConfig {
        node_id,
        cluster_addr,
        advertise_addr,
        peers,
        heartbeat_interval,
        election_timeout,
        snapshot_threshold,
        trailing_logs,
        http_addr,
        data_dir,
        security_enabled,
        cluster_security,
        cluster_tls,
        log_level,
        log_format,
        admin_password: env(ENV_ADMIN_PASSWORD).filter(|p| !p.is_empty()),
    })
}

/// The address others dial: `cluster.advertise_addr`, else this node's
/// entry in the peer list, else `cluster.addr` when it names a host.
fn advertise_addr(
    node_id: ControlNodeId,
    cluster_addr: SocketAddr,
    peers: &[Peer],
    advertise: Option<String>,
    merged: &Merged,
) -> Result<String, ConfigError> {
    if let Some(addr) = advertise {
        return Ok(addr);
    }
    if let Some(own) = peers.iter().find(|peer| peer.id == node_id) {
        return Ok(own.addr.clone());
    }
    if !peers.is_empty() {
        return Err(merged.error(
            keys::ADVERTISE_ADDR,
            format!(
                "required: node {node_id} is not in cluster.peers, so it joins and must say where others reach it"
            ),
        ));
    }
    if cluster_addr.ip().is_unspecified() {
        let loopback = SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), cluster_addr.port());
        return Ok(loopback.to_string());
    }
    Ok(cluster_addr.to_string())
}

fn cluster_security(
    secret: Option<String>,
    security_enabled: bool,
    allow_insecure: bool,
    voters: usize,
) -> Result<ClusterSecurity, ConfigError> {
    match secret.filter(|s| !s.is_empty()) {
        Some(secret) => {
            narad_protocol::ClusterSecret::new(secret.as_bytes().to_vec())
                .map_err(|e| ConfigError::new(ENV_CLUSTER_SECRET, String::new(), e.to_string()))?;
            Ok(ClusterSecurity::Secret(secret.into_bytes()))
        }
        None if security_enabled && voters > 1 => Err(ConfigError::new(
            ENV_CLUSTER_SECRET,
            String::new(),
            "required when security is on and the cluster has several control nodes",
        )),
        None if security_enabled => Ok(ClusterSecurity::Generated),
        None if voters > 1 && !allow_insecure => Err(ConfigError::new(
            keys::ALLOW_INSECURE.key,
            String::new(),
            "a multi-node cluster without NARAD_CLUSTER_SECRET must set security.allow_insecure_cluster=true (dev only)",
        )),
        None => Ok(ClusterSecurity::Insecure),
    }
}

fn parse_node_id(value: &str) -> Result<ControlNodeId, String> {
    match value.parse::<u64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(format!(
            "{value:?} is not a control node id: control nodes are numbered 1, 2, 3, ..."
        )),
    }
}

/// `id@host:port,...`: at least three, unique ids and addresses.
fn parse_peers(value: &str) -> Result<Vec<Peer>, String> {
    let mut peers = Vec::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('@')
            .ok_or_else(|| format!("{part:?} is not id@host:port"))?;
        let id = parse_node_id(id)?;
        if addr
            .rsplit_once(':')
            .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
        {
            return Err(format!("{part:?}: {addr:?} is not host:port"));
        }
        peers.push(Peer {
            id,
            addr: addr.to_owned(),
        });
    }
    if peers.len() < PEERS_MIN {
        return Err(format!(
            "{} peers given; at least {PEERS_MIN} initial voters are required",
            peers.len()
        ));
    }
    let ids: BTreeSet<_> = peers.iter().map(|p| p.id).collect();
    let addrs: BTreeSet<_> = peers.iter().map(|p| p.addr.as_str()).collect();
    if ids.len() != peers.len() || addrs.len() != peers.len() {
        return Err("peer ids and addresses must be unique".into());
    }
    Ok(peers)
}

#[cfg(test)]
mod tests;
