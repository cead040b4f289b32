//! `narad data` configuration: built-in defaults, then a JSON file, then
//! environment variables, then flags (a later layer wins), validated as a
//! whole before anything is opened. Every error names the setting (its
//! file key, or the variable of an environment-only one) and where the bad
//! value came from. The layering, the parsers and their bounds' error
//! texts are shared with `narad control` and `narad dev`
//! ([`narad_controlplane::node::config::layered`]); this module names the
//! data node's settings and validates them.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use narad_controlplane::node::config::cluster_tls::{
    Exposure, require_cluster_tls, resolve_cluster_tls,
};
use narad_controlplane::node::config::layered::{
    self, Merged, Settings, parse_addr, parse_bool, parse_data_dir, parse_duration,
    parse_millis_within, parse_number, parse_off_or_millis_from, parse_positive, parse_within,
};
pub(crate) use narad_controlplane::node::config::layered::{ConfigError, Setting};
use narad_dataplane::consume::release::IDLE_SHARD_RELEASE_DEFAULT;
use narad_dataplane::fanout::machine::CursorConfig;
use narad_dataplane::http::{ApiConfig, BCRYPT_COST_DEFAULT};
use narad_dataplane::topology::NodeId;
use narad_protocol::{ClusterSecret, ClusterTls};
use serde_json::Value;

use super::front;
use super::remotes_config;
use narad_dataplane::credentials::RemoteSecrets;

/// The settings of a data node, in the order `--help` lists them.
pub(crate) mod keys {
    narad_controlplane::settings! {
        pub(crate),
        NODE_ID = "cluster.node_id", "NARAD_NODE_ID", "node-id",
            "This data node's id (1, 2, 3, ...): cluster.node_id";
        CONTROL_NODES = "cluster.control_nodes", "NARAD_CLUSTER_CONTROL_NODES", "control-nodes",
            "Control nodes' cluster addresses, host:port,...: cluster.control_nodes";
        RPC_ADDR = "cluster.rpc_addr", "NARAD_CLUSTER_RPC_ADDR", "rpc-addr",
            "UDP address of this node's RPC socket (default: http.addr's): cluster.rpc_addr";
        ADVERTISE_HOST = "cluster.advertise_host", "NARAD_CLUSTER_ADVERTISE_HOST", "advertise-host",
            "Host others reach this node at: cluster.advertise_host";
        HTTP_ADDR = "http.addr", "NARAD_HTTP_ADDR", "http-addr",
            "TCP address of the HTTP API: http.addr";
        SHUTDOWN_GRACE = "http.shutdown_grace", "NARAD_HTTP_SHUTDOWN_GRACE", "shutdown-grace",
            "Time in-flight requests get after a stop signal, e.g. 10s: http.shutdown_grace";
        MAX_CONSUME_WAIT = "http.max_consume_wait", "NARAD_HTTP_MAX_CONSUME_WAIT", "max-consume-wait",
            "Longest consume wait, e.g. 10s (0: the API's 30 s ceiling): http.max_consume_wait";
        CONSUME_IN_FLIGHT = "http.max_consume_in_flight_per_identity", "NARAD_HTTP_MAX_CONSUME_IN_FLIGHT_PER_IDENTITY", "max-consume-in-flight-per-identity",
            "Consumes in flight per identity, 0 = no cap: http.max_consume_in_flight_per_identity";
        PRODUCE_IN_FLIGHT = "http.max_produce_in_flight_per_identity", "NARAD_HTTP_MAX_PRODUCE_IN_FLIGHT_PER_IDENTITY", "max-produce-in-flight-per-identity",
            "Produces in flight per identity, 0 = no cap: http.max_produce_in_flight_per_identity";
        METRICS_UNAUTHENTICATED = "http.metrics_unauthenticated", "NARAD_HTTP_METRICS_UNAUTHENTICATED", "metrics-unauthenticated",
            "true or false: http.metrics_unauthenticated";
        ACCESS_LOG = "http.access_log", "NARAD_HTTP_ACCESS_LOG", "access-log",
            "true or false: one log line a request on target narad::access, http.access_log";
        DATA_DIR = shared::DATA_DIR;
        WAL_DIR = "storage.wal_dir", "NARAD_STORAGE_WAL_DIR", "wal-dir",
            "Ingress WAL root, the WAL in its ingress/produce (default: storage.data_dir): storage.wal_dir";
        FRONT_THREADS = "http.front_threads", "NARAD_HTTP_FRONT_THREADS", "http-front-threads",
            "0 to 256 threads serving HTTP connections: http.front_threads";
        OFFSET_COMMIT_INTERVAL = "storage.consumer_offset_commit_interval_ms", "NARAD_STORAGE_CONSUMER_OFFSET_COMMIT_INTERVAL_MS", "consumer-offset-commit-interval-ms",
            "10 to 60000: storage.consumer_offset_commit_interval_ms";
        RETENTION_CHECK_INTERVAL = "storage.retention_check_interval_ms", "NARAD_STORAGE_RETENTION_CHECK_INTERVAL_MS", "retention-check-interval-ms",
            "1000 to 3600000: storage.retention_check_interval_ms";
        COLD_RETENTION_WALK = "storage.cold_retention_walk_ms", "NARAD_STORAGE_COLD_RETENTION_WALK_MS", "cold-retention-walk-ms",
            "0 (off), or 60000 and up: storage.cold_retention_walk_ms";
        IDLE_LOG_EVICTION = "storage.idle_log_eviction_ms", "NARAD_STORAGE_IDLE_LOG_EVICTION_MS", "idle-log-eviction-ms",
            "0 (off), or 60000 and up: storage.idle_log_eviction_ms";
        IDLE_SHARD_RELEASE = "consume.idle_shard_release_ms", "NARAD_CONSUME_IDLE_SHARD_RELEASE_MS", "idle-shard-release-ms",
            "0 (off), or 60000 and up: consume.idle_shard_release_ms";
        TAIL_CACHE_BYTES = "storage.tail_cache_bytes", "NARAD_STORAGE_TAIL_CACHE_BYTES", "tail-cache-bytes",
            "0 to 1073741824 bytes of newest records each open partition log keeps decoded: storage.tail_cache_bytes";
        WAL_PREALLOC = "storage.ingress_wal_prealloc", "NARAD_STORAGE_INGRESS_WAL_PREALLOC", "ingress-wal-prealloc",
            "true or false: storage.ingress_wal_prealloc";
        LOG_PREALLOC = "storage.partition_log_prealloc", "NARAD_STORAGE_PARTITION_LOG_PREALLOC", "partition-log-prealloc",
            "true or false: storage.partition_log_prealloc";
        WAL_INLINE_FLUSH = "storage.ingress_wal_inline_flush", "NARAD_STORAGE_INGRESS_WAL_INLINE_FLUSH", "ingress-wal-inline-flush",
            "true or false: storage.ingress_wal_inline_flush";
        FANOUT_BATCH_RECORDS = "fanout.max_batch_records", "NARAD_FANOUT_MAX_BATCH_RECORDS", "fanout-max-batch-records",
            "Records in one fan-out slab at most: fanout.max_batch_records";
        FANOUT_BATCH_BYTES = "fanout.max_batch_bytes", "NARAD_FANOUT_MAX_BATCH_BYTES", "fanout-max-batch-bytes",
            "Bytes in one fan-out slab at most: fanout.max_batch_bytes";
        FANOUT_LINGER = "fanout.linger_ms", "NARAD_FANOUT_LINGER_MS", "fanout-linger-ms",
            "How long a fan-out slab waits to fill: fanout.linger_ms";
        REMOTES_ALLOWED_HOSTS = "remotes.allowed_hosts", "NARAD_REMOTES_ALLOWED_HOSTS", "remotes-allowed-hosts",
            "Hosts remotes may point at, exact or *.suffix, comma-separated (empty: any): remotes.allowed_hosts";
        REMOTES_ALLOWED_PORTS = "remotes.allowed_ports", "NARAD_REMOTES_ALLOWED_PORTS", "remotes-allowed-ports",
            "Ports remote URLs may use, comma-separated (default 443): remotes.allowed_ports";
        REMOTES_ALLOW_ADDRESSES = "remotes.allow_addresses", "NARAD_REMOTES_ALLOW_ADDRESSES", "remotes-allow-addresses",
            "CIDRs exempt from the remotes' address guard, comma-separated: remotes.allow_addresses";
        REMOTES_ALLOW_LOOPBACK = "remotes.allow_loopback", "NARAD_REMOTES_ALLOW_LOOPBACK", "remotes-allow-loopback",
            "true or false, for tests and labs only: remotes may reach loopback addresses, remotes.allow_loopback";
        REMOTES_MAX_HELD_BYTES = "remotes.max_held_bytes", "NARAD_REMOTES_MAX_HELD_BYTES", "remotes-max-held-bytes",
            "Bytes of records held in memory for remotes: remotes.max_held_bytes";
        REMOTES_API_HOP_ENCRYPTED = "remotes.api_hop_encrypted", "NARAD_REMOTES_API_HOP_ENCRYPTED", "remotes-api-hop-encrypted",
            "true once TLS protects the hop to this node's API (remote passwords are sent to it): remotes.api_hop_encrypted";
        SECURITY = shared::SECURITY;
        BCRYPT_COST = "security.bcrypt_cost", "NARAD_SECURITY_BCRYPT_COST", "bcrypt-cost",
            "bcrypt cost of password hashes this node makes: security.bcrypt_cost";
        ALLOW_INSECURE = shared::ALLOW_INSECURE;
        CLUSTER_TLS_CERT_FILE = shared::CLUSTER_TLS_CERT_FILE;
        CLUSTER_TLS_KEY_FILE = shared::CLUSTER_TLS_KEY_FILE;
        CLUSTER_TLS_CA_FILE = shared::CLUSTER_TLS_CA_FILE;
        ALLOW_PLAINTEXT_RAFT = shared::ALLOW_PLAINTEXT_RAFT;
        LOG_LEVEL = shared::LOG_LEVEL;
        LOG_FORMAT = shared::LOG_FORMAT;
    }
}

/// The cluster secret: environment only, never in a file or on a command
/// line where other users of the host could read it.
pub(crate) const ENV_CLUSTER_SECRET: &str = "NARAD_CLUSTER_SECRET";
/// Where a host name is read when `cluster.advertise_host` is not set and
/// the node listens on every interface.
pub(crate) const ENV_HOSTNAME: &str = "HOSTNAME";

/// Defaults, with why.
pub(crate) mod defaults {
    use std::time::Duration;

    /// The spec's API port on every interface.
    pub(crate) const HTTP_ADDR: &str = "0.0.0.0:7942";
    /// The spec's `http.shutdown_grace`: in-flight requests get this long
    /// to finish after a stop signal.
    pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
    /// `storage.ingress_wal_prealloc`, on, unlike the spec: prepared
    /// segments are written with O_DIRECT, which measured a third off a
    /// single append and half its CPU (docs/benchmarks.md).
    pub(crate) const INGRESS_WAL_PREALLOC: bool = true;
    /// `storage.partition_log_prealloc` (not a key of the original), off:
    /// it measured no end-to-end gain here (docs/internals/plog.md,
    /// "Prepared zeros"; docs/benchmarks.md).
    pub(crate) const PARTITION_LOG_PREALLOC: bool = false;
    /// `storage.ingress_wal_inline_flush` (not a key of the original), off:
    /// it made a lone produce cheaper but produce beside consumers slower
    /// (docs/benchmarks.md).
    pub(crate) const INGRESS_WAL_INLINE_FLUSH: bool = false;
}

/// The spec's bounds on `storage.consumer_offset_commit_interval_ms`.
const OFFSET_COMMIT_INTERVAL_MS_MIN: u64 = 10;
const OFFSET_COMMIT_INTERVAL_MS_MAX: u64 = 60_000;

/// Bounds on `storage.retention_check_interval_ms`: a pass reads every
/// open log's segment table, so not more than once a second; retention is
/// at least an hour, so not less than once an hour.
pub(crate) const RETENTION_CHECK_INTERVAL_MS_MIN: u64 = 1_000;
pub(crate) const RETENTION_CHECK_INTERVAL_MS_MAX: u64 = 3_600_000;

/// The ceiling on `storage.tail_cache_bytes`: a gigabyte per partition is
/// far past any read-back a consumer that keeps up needs.
const TAIL_CACHE_BYTES_MAX: usize = 1 << 30;

/// The spec's floor on `storage.cold_retention_walk_ms` (0 turns it off).
const COLD_RETENTION_WALK_MS_MIN: u64 = 60_000;

/// The spec's floor on `storage.idle_log_eviction_ms` (0 turns it off).
const IDLE_LOG_EVICTION_MS_MIN: u64 = 60_000;

/// The floor on `consume.idle_shard_release_ms` (0 turns it off), that of
/// `storage.idle_log_eviction_ms`: a release writes the position out and
/// the next consume reads it back with the log's tail, so a shard is not
/// let go between the polls of a consumer that merely paused; and the
/// retention pass that releases shards runs at most once a second.
const IDLE_SHARD_RELEASE_MS_MIN: u64 = 60_000;

/// bcrypt's own bounds on the cost.
const BCRYPT_COST_MIN: u32 = 4;
const BCRYPT_COST_MAX: u32 = 31;

/// Control nodes a data node may follow: the spec's largest control plane
/// is 5 voters; the rest is room for a replacement being added.
pub(crate) const CONTROL_NODES_MAX: usize = 16;

/// How the node authenticates on the cluster plane. The secret's `Debug`
/// never prints its bytes.
#[derive(Clone, Debug)]
pub(crate) enum ClusterSecurity {
    /// `NARAD_CLUSTER_SECRET`.
    Secret(ClusterSecret),
    /// No authentication: security off and explicitly allowed.
    Insecure,
}

/// A validated data node configuration.
#[derive(Debug, Clone)]
pub(crate) struct DataConfig {
    /// This data node's id (its member id in the control plane).
    pub(crate) node_id: NodeId,
    /// The control nodes' cluster addresses (`host:port`), resolved at start.
    pub(crate) control_nodes: Vec<String>,
    /// Where the node RPC (QUIC, UDP) socket binds.
    pub(crate) rpc_addr: SocketAddr,
    /// The host other nodes and clients reach this node at.
    pub(crate) advertise_host: String,
    /// Where the HTTP API listens.
    pub(crate) http_addr: SocketAddr,
    /// How long in-flight requests may take to finish after a stop signal.
    pub(crate) shutdown_grace: Duration,
    /// `http.front_threads`: threads that serve HTTP connections, each on
    /// its own single-threaded runtime; 0 serves them on the shared one.
    pub(crate) front_threads: usize,
    /// The data directory (partition logs; the ingress WAL too unless
    /// `wal_dir` is set).
    pub(crate) data_dir: PathBuf,
    /// `storage.wal_dir`: the ingress WAL's root, for a WAL on a device of
    /// its own; `None` keeps it under `data_dir`.
    pub(crate) wal_dir: Option<PathBuf>,
    /// How often consumer positions are written out with fdatasync; `None`
    /// keeps the data plane's default.
    pub(crate) consumer_offset_commit_interval: Option<Duration>,
    /// `storage.retention_check_interval_ms`: how often open partition
    /// logs are swept for retention.
    pub(crate) retention_check_interval: Duration,
    /// `storage.cold_retention_walk_ms`: how often partitions whose log is
    /// not open are checked for expired segments; `None` never.
    pub(crate) cold_retention_walk: Option<Duration>,
    /// `storage.idle_log_eviction_ms`: how long a partition log nobody
    /// holds stays open unused; `None` keeps it open.
    pub(crate) idle_log_eviction: Option<Duration>,
    /// `consume.idle_shard_release_ms`: how long a partition's consume
    /// shard may go unused, with no live lease and no consume parked on its
    /// topic, before it is released; `None` keeps it.
    pub(crate) idle_shard_release: Option<Duration>,
    /// `storage.tail_cache_bytes` (not a key of the original): bytes of the
    /// newest records each open partition log keeps decoded in memory
    /// (`LogConfig::tail_cache_bytes`); 0 keeps none.
    pub(crate) tail_cache_bytes: usize,
    /// `storage.ingress_wal_prealloc`: prepare each next ingress WAL segment
    /// (zero-filled) off the append path and write it with `O_DIRECT`.
    pub(crate) ingress_wal_prealloc: bool,
    /// `storage.partition_log_prealloc`: write small commits into zeros
    /// prepared ahead of the active segment's end (`LogConfig::prepare_bytes`).
    pub(crate) partition_log_prealloc: bool,
    /// `storage.ingress_wal_inline_flush`: a produce that finds the WAL
    /// idle writes and syncs its records on its own thread
    /// (`WalOptions::inline_flush`).
    pub(crate) ingress_wal_inline_flush: bool,
    /// Fan-out slab limits and linger (`fanout.*`).
    pub(crate) fanout: CursorConfig,
    /// The HTTP API's settings (`security.enabled` is `api.security`).
    pub(crate) api: ApiConfig,
    /// Cluster plane authentication.
    pub(crate) cluster_security: ClusterSecurity,
    /// The secrets remote credentials are sealed under
    /// (`NARAD_CLUSTER_SECRET`, `NARAD_CLUSTER_SECRET_PREVIOUS`).
    pub(crate) remote_secrets: RemoteSecrets,
    /// Mutual TLS between nodes (`security.cluster_tls_*`), read at start;
    /// `None` without the files.
    pub(crate) cluster_tls: Option<ClusterTls>,
    /// `log.level`.
    pub(crate) log_level: String,
    /// `log.format`: `json` or `text`.
    pub(crate) log_format: String,
}

impl DataConfig {
    /// The HTTP address this node registers: the advertised host and the
    /// API port.
    pub(crate) fn advertised_http(&self) -> String {
        host_port(&self.advertise_host, self.http_addr.port())
    }

    /// The node RPC address this node registers.
    pub(crate) fn advertised_rpc(&self) -> String {
        host_port(&self.advertise_host, self.rpc_addr.port())
    }
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The data node's table of settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DataSettings;

impl Settings for DataSettings {
    const ALL: &'static [Setting] = keys::ALL;

    /// Control nodes in a file: `["host:port", ...]`; the remotes' lists
    /// likewise (`allowed_ports` as numbers).
    fn file_list(setting: &Setting, items: &[Value]) -> Option<String> {
        if *setting == keys::REMOTES_ALLOWED_PORTS {
            let ports: Option<Vec<String>> = items
                .iter()
                .map(|item| item.as_u64().map(|port| port.to_string()))
                .collect();
            return ports.map(|ports| ports.join(","));
        }
        let lists = [
            keys::CONTROL_NODES,
            keys::REMOTES_ALLOWED_HOSTS,
            keys::REMOTES_ALLOW_ADDRESSES,
        ];
        if !lists.contains(setting) {
            return None;
        }
        let items: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
        items.map(|items| items.join(","))
    }
}

/// Raw values by file key from one source.
pub(crate) type Layer = layered::Layer<DataSettings>;

/// Builds and validates the configuration from `layers` (in increasing
/// precedence) and the environment-only values read through `env`.
pub(crate) fn resolve(
    layers: &[Layer],
    env: impl Fn(&str) -> Option<String>,
) -> Result<DataConfig, ConfigError> {
    let merged = Merged::of(layers);
    let node_id = merged.parse(keys::NODE_ID, None, parse_node_id)?;
    let control_nodes = merged.parse(keys::CONTROL_NODES, None, parse_control_nodes)?;
    let http_addr = merged.parse_addr(keys::HTTP_ADDR, defaults::HTTP_ADDR)?;
    // The spec's node RPC port is the API port number over UDP.
    let rpc_addr = merged.parse(keys::RPC_ADDR, Some(http_addr), parse_addr)?;
    let advertise_host = match merged.parse(keys::ADVERTISE_HOST, Some(None), |v| {
        parse_host(v).map(Some)
    })? {
        Some(host) => host,
        None => default_advertise_host(http_addr.ip(), &env)?,
    };
    let shutdown_grace = merged.parse(
        keys::SHUTDOWN_GRACE,
        Some(defaults::SHUTDOWN_GRACE),
        parse_duration,
    )?;
    // Not a key of the original, whose HTTP server is Go's.
    let front_threads = merged.parse(
        keys::FRONT_THREADS,
        Some(front::default_count()),
        parse_front_threads,
    )?;
    let api_defaults = ApiConfig::default();
    let max_consume_wait = merged.parse(
        keys::MAX_CONSUME_WAIT,
        Some(api_defaults.max_consume_wait),
        parse_wait,
    )?;
    if shutdown_grace < max_consume_wait {
        return Err(merged.error(
            keys::SHUTDOWN_GRACE,
            format!(
                "must be at least http.max_consume_wait ({max_consume_wait:?}), so a long poll can finish"
            ),
        ));
    }
    let consume_in_flight = merged.parse(
        keys::CONSUME_IN_FLIGHT,
        Some(api_defaults.consume_in_flight_per_identity),
        |v| parse_number(v, "a number of consumes (0 turns the cap off)"),
    )?;
    let produce_in_flight = merged.parse(keys::PRODUCE_IN_FLIGHT, Some(0), |v| {
        parse_number(v, "a number of produces (0 turns the cap off)")
    })?;
    let metrics_unauthenticated =
        merged.parse(keys::METRICS_UNAUTHENTICATED, Some(false), parse_bool)?;
    let access_log = merged.parse(keys::ACCESS_LOG, Some(false), parse_bool)?;
    let data_dir = merged.data_dir(keys::DATA_DIR)?;
    // Not a key of the original, whose WAL is always under its data dir.
    let wal_dir = merged.parse(keys::WAL_DIR, Some(None), parse_wal_dir)?;
    let consumer_offset_commit_interval =
        merged.parse(keys::OFFSET_COMMIT_INTERVAL, Some(None), |v| {
            parse_millis_within(
                v,
                OFFSET_COMMIT_INTERVAL_MS_MIN,
                OFFSET_COMMIT_INTERVAL_MS_MAX,
            )
            .map(Some)
        })?;
    // Not a key of the original, whose reaper runs about every 60 s.
    let retention_check_interval = merged.parse(
        keys::RETENTION_CHECK_INTERVAL,
        Some(narad_dataplane::node::RETENTION_CHECK_INTERVAL_DEFAULT),
        parse_retention_check_interval,
    )?;
    let cold_retention_walk = merged.parse(
        keys::COLD_RETENTION_WALK,
        Some(Some(narad_dataplane::node::COLD_RETENTION_WALK_DEFAULT)),
        |v| parse_off_or_millis_from(v, COLD_RETENTION_WALK_MS_MIN),
    )?;
    let idle_log_eviction = merged.parse(
        keys::IDLE_LOG_EVICTION,
        Some(Some(narad_dataplane::node::IDLE_LOG_EVICTION_DEFAULT)),
        |v| parse_off_or_millis_from(v, IDLE_LOG_EVICTION_MS_MIN),
    )?;
    // Not a key of the original, which never releases a shard.
    let idle_shard_release = merged.parse(
        keys::IDLE_SHARD_RELEASE,
        Some(Some(IDLE_SHARD_RELEASE_DEFAULT)),
        |v| parse_off_or_millis_from(v, IDLE_SHARD_RELEASE_MS_MIN),
    )?;
    // Not a key of the original, whose partitions keep no decoded records.
    let tail_cache_bytes = merged.parse(
        keys::TAIL_CACHE_BYTES,
        Some(narad_plog::TAIL_CACHE_BYTES_DEFAULT),
        parse_tail_cache_bytes,
    )?;
    let ingress_wal_prealloc = merged.parse(
        keys::WAL_PREALLOC,
        Some(defaults::INGRESS_WAL_PREALLOC),
        parse_bool,
    )?;
    let partition_log_prealloc = merged.parse(
        keys::LOG_PREALLOC,
        Some(defaults::PARTITION_LOG_PREALLOC),
        parse_bool,
    )?;
    let ingress_wal_inline_flush = merged.parse(
        keys::WAL_INLINE_FLUSH,
        Some(defaults::INGRESS_WAL_INLINE_FLUSH),
        parse_bool,
    )?;
    let fanout = fanout_config(&merged)?;
    let security = merged.parse(keys::SECURITY, Some(true), parse_bool)?;
    let bcrypt_cost = merged.parse(keys::BCRYPT_COST, Some(BCRYPT_COST_DEFAULT), |v| {
        parse_within(v, BCRYPT_COST_MIN..=BCRYPT_COST_MAX, "a bcrypt cost")
    })?;
    let allow_insecure = merged.parse(keys::ALLOW_INSECURE, Some(false), parse_bool)?;
    let (log_level, log_format) = merged.logging(keys::LOG_LEVEL, keys::LOG_FORMAT)?;
    let cluster_security =
        cluster_security(env(ENV_CLUSTER_SECRET), security, allow_insecure, &merged)?;
    let remotes = remotes_config::resolve(&merged, security)?;
    let remote_secrets = remotes_config::secrets(&env, security)?;
    let cluster_tls = resolve_cluster_tls(&merged)?;
    // A data node always shares its plane: with the control nodes, and
    // with the other data nodes.
    require_cluster_tls(
        &merged,
        matches!(cluster_security, ClusterSecurity::Secret(_)),
        Exposure::Peers,
        cluster_tls.as_ref(),
    )?;
    // Every field is set above, but the update from the defaults stays:
    // an ApiConfig field that `narad data` takes no setting for then keeps
    // its default without a change here.
    #[allow(clippy::needless_update)]
    let api = ApiConfig {
        security,
        metrics_unauthenticated,
        bcrypt_cost,
        produce_in_flight_per_identity: produce_in_flight,
        max_consume_wait,
        consume_in_flight_per_identity: consume_in_flight,
        access_log,
        remotes,
        ..api_defaults
    };
    Ok(DataConfig {
        node_id,
        control_nodes,
        rpc_addr,
        advertise_host,
        http_addr,
        shutdown_grace,
        front_threads,
        data_dir,
        wal_dir,
        consumer_offset_commit_interval,
        retention_check_interval,
        cold_retention_walk,
        idle_log_eviction,
        idle_shard_release,
        tail_cache_bytes,
        ingress_wal_prealloc,
        partition_log_prealloc,
        ingress_wal_inline_flush,
        fanout,
        api,
        cluster_security,
        remote_secrets,
        cluster_tls,
        log_level,
        log_format,
    })
}

/// `http.front_threads`: 0 to [`front::THREADS_MAX`].
pub(crate) fn parse_front_threads(value: &str) -> Result<usize, String> {
    parse_within(value, 0..=front::THREADS_MAX, "a thread count").map(usize::from)
}

/// `storage.wal_dir`: any path but the empty one (unset keeps the WAL
/// under `storage.data_dir`).
pub(crate) fn parse_wal_dir(value: &str) -> Result<Option<PathBuf>, String> {
    parse_data_dir(value).map(Some)
}

/// `storage.retention_check_interval_ms`: from
/// [`RETENTION_CHECK_INTERVAL_MS_MIN`] to [`RETENTION_CHECK_INTERVAL_MS_MAX`].
/// `storage.tail_cache_bytes`: 0 up to [`TAIL_CACHE_BYTES_MAX`].
pub(crate) fn parse_tail_cache_bytes(value: &str) -> Result<usize, String> {
    parse_within(value, 0..=TAIL_CACHE_BYTES_MAX, "a number of bytes")
}

pub(crate) fn parse_retention_check_interval(value: &str) -> Result<Duration, String> {
    parse_millis_within(
        value,
        RETENTION_CHECK_INTERVAL_MS_MIN,
        RETENTION_CHECK_INTERVAL_MS_MAX,
    )
}

/// `fanout.max_batch_records` and `fanout.max_batch_bytes` (> 0) and
/// `fanout.linger_ms` (≥ 0) over the cursor defaults.
fn fanout_config(merged: &Merged) -> Result<CursorConfig, ConfigError> {
    let defaults = CursorConfig::default();
    let positive = |what: &'static str| move |v: &str| parse_positive::<usize>(v, what);
    let slab_records_max = merged.parse(
        keys::FANOUT_BATCH_RECORDS,
        Some(defaults.slab_records_max),
        positive("records"),
    )?;
    let slab_bytes_max = merged.parse(
        keys::FANOUT_BATCH_BYTES,
        Some(defaults.slab_bytes_max),
        positive("bytes"),
    )?;
    let linger_ms = merged.parse(keys::FANOUT_LINGER, Some(defaults.linger_ms), |v| {
        parse_number(v, "a number of milliseconds")
    })?;
    Ok(CursorConfig {
        slab_records_max,
        slab_bytes_max,
        linger_ms,
        ..defaults
    })
}

/// The host others reach this node at when none is configured: the listen
/// address when it names one, else the machine's host name.
fn default_advertise_host(
    listen: IpAddr,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    if !listen.is_unspecified() {
        return Ok(listen.to_string());
    }
    env(ENV_HOSTNAME)
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .ok_or_else(|| {
            ConfigError::new(
                keys::ADVERTISE_HOST.key,
                String::new(),
                "required: http.addr listens on every interface and the host name is unknown",
            )
        })
}

/// Security on needs the secret; security off without one needs the
/// explicit allowance, since a data node always shares its plane with
/// several control nodes.
fn cluster_security(
    secret: Option<String>,
    security: bool,
    allow_insecure: bool,
    merged: &Merged,
) -> Result<ClusterSecurity, ConfigError> {
    match secret.filter(|s| !s.is_empty()) {
        Some(secret) => ClusterSecret::new(secret.into_bytes())
            .map(ClusterSecurity::Secret)
            .map_err(|e| ConfigError::new(ENV_CLUSTER_SECRET, String::new(), e.to_string())),
        None if security => Err(ConfigError::new(
            ENV_CLUSTER_SECRET,
            String::new(),
            "required when security.enabled is true: data and control nodes prove it to each other",
        )),
        None if allow_insecure => Ok(ClusterSecurity::Insecure),
        None => Err(merged.error(
            keys::ALLOW_INSECURE,
            "without NARAD_CLUSTER_SECRET the cluster plane is open to anyone who reaches it; \
             set security.allow_insecure_cluster=true to accept that (dev only)",
        )),
    }
}

fn parse_node_id(value: &str) -> Result<NodeId, String> {
    match value.parse::<NodeId>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(format!(
            "{value:?} is not a data node id: data nodes are numbered 1, 2, 3, ..."
        )),
    }
}

fn parse_host(value: &str) -> Result<String, String> {
    let host = value.trim();
    if host.is_empty() || host.contains(char::is_whitespace) || host.contains('/') {
        return Err(format!("{value:?} is not a host name or address"));
    }
    Ok(host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned())
}

/// A consume wait: a duration, or 0 (accepted as the spec says; the API
/// then holds consumes up to its own fixed ceiling).
fn parse_wait(value: &str) -> Result<Duration, String> {
    match value {
        "0" | "0s" | "0ms" => Ok(Duration::ZERO),
        _ => parse_duration(value),
    }
}

/// `host:port,...`: at least one, at most [`CONTROL_NODES_MAX`], unique.
fn parse_control_nodes(value: &str) -> Result<Vec<String>, String> {
    let addrs: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(str::to_owned)
        .collect();
    for addr in &addrs {
        let valid = addr.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !valid {
            return Err(format!("{addr:?} is not host:port"));
        }
    }
    if addrs.is_empty() {
        return Err("names no control node; give host:port,... of the control nodes".into());
    }
    if addrs.len() > CONTROL_NODES_MAX {
        return Err(format!(
            "{} control nodes given; at most {CONTROL_NODES_MAX}",
            addrs.len()
        ));
    }
    if addrs.iter().collect::<BTreeSet<_>>().len() != addrs.len() {
        return Err("control node addresses must be unique".into());
    }
    Ok(addrs)
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
