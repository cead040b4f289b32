//! `narad control` configuration: settings from built-in defaults, a JSON
//! file, environment variables and flags (later layers win), validated as a
//! whole before anything is opened. Every error names the setting (its file
//! key, and where the bad value came from).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::raft::ControlNodeId;

/// Where a value came from, for error texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The JSON config file.
    File,
    /// An environment variable.
    Env,
    /// A command-line flag.
    Flag,
}

/// One configurable setting: its file key, environment variable and flag.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Dotted key in the config file (`cluster.node_id`).
    pub key: &'static str,
    /// Environment variable.
    pub env: &'static str,
    /// Command-line flag (without `--`).
    pub flag: &'static str,
}

macro_rules! settings {
    ($($name:ident = $key:literal, $env:literal, $flag:literal;)*) => {
        $(
            #[doc = concat!("`", $key, "` / `", $env, "` / `--", $flag, "`.")]
            pub const $name: Setting = Setting { key: $key, env: $env, flag: $flag };
        )*
        /// Every setting, in documentation order.
        pub const ALL: &[Setting] = &[$($name),*];
    };
}

/// The settings of a control node.
pub mod keys {
    use super::Setting;
    settings! {
        NODE_ID = "cluster.node_id", "NARAD_NODE_ID", "node-id";
        CLUSTER_ADDR = "cluster.addr", "NARAD_CLUSTER_ADDR", "cluster-addr";
        ADVERTISE_ADDR = "cluster.advertise_addr", "NARAD_CLUSTER_ADVERTISE_ADDR", "advertise-addr";
        PEERS = "cluster.peers", "NARAD_CLUSTER_PEERS", "peers";
        HEARTBEAT = "cluster.raft_heartbeat_interval", "NARAD_CLUSTER_RAFT_HEARTBEAT_INTERVAL", "raft-heartbeat-interval";
        ELECTION = "cluster.raft_election_timeout", "NARAD_CLUSTER_RAFT_ELECTION_TIMEOUT", "raft-election-timeout";
        SNAPSHOT_THRESHOLD = "cluster.raft_snapshot_threshold", "NARAD_CLUSTER_RAFT_SNAPSHOT_THRESHOLD", "raft-snapshot-threshold";
        TRAILING_LOGS = "cluster.raft_trailing_logs", "NARAD_CLUSTER_RAFT_TRAILING_LOGS", "raft-trailing-logs";
        HTTP_ADDR = "http.addr", "NARAD_HTTP_ADDR", "http-addr";
        DATA_DIR = "storage.data_dir", "NARAD_DATA_DIR", "data-dir";
        SECURITY = "security.enabled", "NARAD_SECURITY_ENABLED", "security-enabled";
        ALLOW_INSECURE = "security.allow_insecure_cluster", "NARAD_SECURITY_ALLOW_INSECURE_CLUSTER", "allow-insecure-cluster";
        LOG_LEVEL = "log.level", "NARAD_LOG_LEVEL", "log-level";
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
    /// The spec's default data directory.
    pub const DATA_DIR: &str = "data";
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
    /// The spec's log level.
    pub const LOG_LEVEL: &str = "info";
}

/// At least this many initial voters: a majority of three survives one loss.
pub const PEERS_MIN: usize = 3;
/// An election timeout shorter than this many heartbeats would start
/// elections on ordinary jitter.
pub const ELECTION_HEARTBEATS_MIN: u32 = 3;

/// An invalid configuration: the setting, where its value came from, why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {setting}{from}: {reason}")]
pub struct ConfigError {
    /// The setting's file key (or environment variable for env-only ones).
    pub setting: String,
    /// ` (from NARAD_X)`, ` (from --x)`, ` (from the config file)` or empty.
    pub from: String,
    /// What is wrong and what is expected.
    pub reason: String,
}

impl ConfigError {
    fn new(setting: &str, from: String, reason: impl Into<String>) -> Self {
        Self {
            setting: setting.to_owned(),
            from,
            reason: reason.into(),
        }
    }
}

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
    /// `log.level`.
    pub log_level: String,
    /// `NARAD_ADMIN_PASSWORD`, if set.
    pub admin_password: Option<String>,
}

impl ControlConfig {
    /// Whether this node is one of the initial voters (else it joins).
    pub fn is_initial_member(&self) -> bool {
        self.peers.iter().any(|peer| peer.id == self.node_id)
    }
}

/// Raw values by file key, one map per layer.
#[derive(Debug, Clone, Default)]
pub struct Layer {
    source: Option<Source>,
    values: BTreeMap<&'static str, String>,
}

impl Layer {
    /// An empty layer of `source`.
    pub fn new(source: Source) -> Self {
        Self {
            source: Some(source),
            values: BTreeMap::new(),
        }
    }

    /// Sets `setting` to `value` (flags use this).
    pub fn set(&mut self, setting: Setting, value: impl Into<String>) {
        self.values.insert(setting.key, value.into());
    }

    /// The environment layer: every setting's variable that is set.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut layer = Self::new(Source::Env);
        for setting in keys::ALL {
            if let Some(value) = lookup(setting.env) {
                layer.set(*setting, value);
            }
        }
        layer
    }

    /// The file layer from JSON text: an object of sections
    /// (`{"cluster": {"node_id": 1}}`). Unknown sections or keys are
    /// refused, so a typo never silently falls back to a default.
    ///
    /// # Errors
    /// Unparseable JSON, an unknown key, or a value of the wrong shape.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let file = |reason: String| ConfigError::new("config file", String::new(), reason);
        let root: Value = serde_json::from_str(text).map_err(|e| file(e.to_string()))?;
        let Value::Object(sections) = root else {
            return Err(file("the top level must be an object of sections".into()));
        };
        let mut layer = Self::new(Source::File);
        for (section, body) in sections {
            let Value::Object(fields) = body else {
                return Err(file(format!("section {section:?} must be an object")));
            };
            for (field, value) in fields {
                let key = format!("{section}.{field}");
                let Some(setting) = keys::ALL.iter().find(|s| s.key == key) else {
                    return Err(file(format!("unknown setting {key:?}")));
                };
                layer.set(*setting, file_value(setting, &value)?);
            }
        }
        Ok(layer)
    }
}

/// A file value as the same text an environment variable would hold.
fn file_value(setting: &Setting, value: &Value) -> Result<String, ConfigError> {
    let wrong = || {
        ConfigError::new(
            setting.key,
            " (from the config file)".into(),
            format!("unexpected value {value}"),
        )
    };
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Number(number) => Ok(number.to_string()),
        Value::Bool(flag) => Ok(flag.to_string()),
        // Peers in a file: [{"id": 1, "addr": "host:port"}, ...].
        Value::Array(items) if setting.key == keys::PEERS.key => {
            let mut parts = Vec::new();
            for item in items {
                let id = item.get("id").and_then(Value::as_u64).ok_or_else(wrong)?;
                let addr = item.get("addr").and_then(Value::as_str).ok_or_else(wrong)?;
                parts.push(format!("{id}@{addr}"));
            }
            Ok(parts.join(","))
        }
        _ => Err(wrong()),
    }
}

/// The layers merged: a later layer's value wins.
#[derive(Debug)]
struct Merged {
    values: BTreeMap<&'static str, (String, Source)>,
}

impl Merged {
    fn raw(&self, setting: Setting) -> Option<(&str, String)> {
        self.values.get(setting.key).map(|(value, source)| {
            let from = match source {
                Source::File => " (from the config file)".to_owned(),
                Source::Env => format!(" (from {})", setting.env),
                Source::Flag => format!(" (from --{})", setting.flag),
            };
            (value.as_str(), from)
        })
    }

    /// Parses `setting`, or returns `default` when nothing set it.
    fn parse<T>(
        &self,
        setting: Setting,
        default: Option<T>,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, ConfigError> {
        match self.raw(setting) {
            Some((value, from)) => {
                parse(value).map_err(|reason| ConfigError::new(setting.key, from, reason))
            }
            None => default.ok_or_else(|| {
                ConfigError::new(
                    setting.key,
                    String::new(),
                    format!(
                        "required: set it in the config file, {} or --{}",
                        setting.env, setting.flag
                    ),
                )
            }),
        }
    }

    fn from(&self, setting: Setting) -> String {
        self.raw(setting).map(|(_, from)| from).unwrap_or_default()
    }
}

/// Builds and validates the configuration from `layers` (in increasing
/// precedence) and the environment-only secrets.
///
/// # Errors
/// The first invalid setting, named.
pub fn resolve(
    layers: &[Layer],
    env: impl Fn(&str) -> Option<String>,
) -> Result<ControlConfig, ConfigError> {
    let mut values = BTreeMap::new();
    for layer in layers {
        let source = layer.source.unwrap_or(Source::Flag);
        for (key, value) in &layer.values {
            values.insert(*key, (value.clone(), source));
        }
    }
    let merged = Merged { values };
    let node_id = merged.parse(keys::NODE_ID, None, parse_node_id)?;
    let cluster_addr = merged.parse(
        keys::CLUSTER_ADDR,
        Some(parse_addr(defaults::CLUSTER_ADDR)?),
        parse_addr_str,
    )?;
    let http_addr = merged.parse(
        keys::HTTP_ADDR,
        Some(parse_addr(defaults::HTTP_ADDR)?),
        parse_addr_str,
    )?;
    if http_addr == cluster_addr {
        return Err(ConfigError::new(
            keys::HTTP_ADDR.key,
            merged.from(keys::HTTP_ADDR),
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
        return Err(ConfigError::new(
            keys::ELECTION.key,
            merged.from(keys::ELECTION),
            format!(
                "must be at least {ELECTION_HEARTBEATS_MIN} heartbeat intervals ({:?})",
                heartbeat_interval * ELECTION_HEARTBEATS_MIN
            ),
        ));
    }
    let snapshot_threshold = merged.parse(
        keys::SNAPSHOT_THRESHOLD,
        Some(defaults::SNAPSHOT_THRESHOLD),
        |v| match v.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{v:?} is not a positive number of log entries")),
        },
    )?;
    let trailing_logs = merged.parse(keys::TRAILING_LOGS, Some(defaults::TRAILING_LOGS), |v| {
        v.parse::<u64>()
            .map_err(|_| format!("{v:?} is not a number of log entries"))
    })?;
    let data_dir = merged.parse(
        keys::DATA_DIR,
        Some(PathBuf::from(defaults::DATA_DIR)),
        |v| {
            if v.is_empty() {
                Err("must not be empty".into())
            } else {
                Ok(PathBuf::from(v))
            }
        },
    )?;
    let security_enabled = merged.parse(keys::SECURITY, Some(true), parse_bool)?;
    let allow_insecure = merged.parse(keys::ALLOW_INSECURE, Some(false), parse_bool)?;
    let log_level = merged.parse(
        keys::LOG_LEVEL,
        Some(defaults::LOG_LEVEL.to_owned()),
        |v| match v {
            "debug" | "info" | "warn" | "error" => Ok(v.to_owned()),
            _ => Err(format!("{v:?} is not one of debug, info, warn, error")),
        },
    )?;
    let cluster_security = cluster_security(
        env(ENV_CLUSTER_SECRET),
        security_enabled,
        allow_insecure,
        peers.len(),
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
        log_level,
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
        return Err(ConfigError::new(
            keys::ADVERTISE_ADDR.key,
            merged.from(keys::ADVERTISE_ADDR),
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

fn parse_addr(value: &str) -> Result<SocketAddr, ConfigError> {
    parse_addr_str(value)
        .map_err(|reason| ConfigError::new("built-in default", String::new(), reason))
}

fn parse_addr_str(value: &str) -> Result<SocketAddr, String> {
    // The spec writes ":7943" for "every interface".
    let value = if value.starts_with(':') {
        format!("0.0.0.0{value}")
    } else {
        value.to_owned()
    };
    value
        .parse()
        .map_err(|_| format!("{value:?} is not an ip:port address"))
}

fn parse_bool(value: &str) -> Result<bool, String> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("{value:?} is not true or false")),
    }
}

/// `"250ms"`, `"1s"`, `"2m"`.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let bad = || format!("{value:?} is not a duration like \"250ms\", \"1s\" or \"2m\"");
    let (number, unit) = value
        .find(|c: char| !c.is_ascii_digit())
        .map(|at| value.split_at(at))
        .ok_or_else(bad)?;
    let number: u64 = number.parse().map_err(|_| bad())?;
    let duration = match unit {
        "ms" => Duration::from_millis(number),
        "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number * 60),
        _ => return Err(bad()),
    };
    if duration.is_zero() {
        return Err(format!("{value:?} must be longer than zero"));
    }
    Ok(duration)
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
