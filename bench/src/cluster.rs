//! A three-plane cluster to benchmark: `nodes` `narad control` and `nodes`
//! `narad data` processes on loopback, security off (as `narad dev` runs),
//! the cluster plane authenticated by a fixed secret, and data nodes a
//! benchmark adds later to watch partitions move to them; and [`Broker`],
//! what a benchmark drives: one `narad dev` or such a cluster.
//!
//! Clients spread over the data nodes' HTTP ports ([`Broker::addrs`]); a
//! data node forwards what belongs to partitions another one owns, so the
//! figures include that hop for about two thirds of the requests.

use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cpu::{context_switches, cpu_seconds};
use crate::http::{Connection, http_request};
use crate::node::{DevNode, free_tcp_port};

/// How long the data nodes may take to answer `/readyz` with 200: the
/// control plane elects a leader first, then each data node registers.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// The cluster plane's secret; loopback only, so a fixed one does.
const SECRET: &str = "narad-bench-cluster-secret-0123456789";
/// Most nodes of each kind a benchmark starts: the spec's largest control
/// plane has five voters.
pub const NODES_MAX: usize = 5;
/// Fewest: a control plane of one voter is not a cluster.
pub const NODES_MIN: usize = 3;

/// `nodes` control and `nodes` data processes, and any data node added
/// later ([`Cluster::add_data_node`]), killed when dropped.
#[derive(Debug)]
pub struct Cluster {
    /// The data nodes' HTTP API addresses, node 1 first.
    pub http_addrs: Vec<SocketAddr>,
    binary: PathBuf,
    dir: PathBuf,
    /// The control nodes' cluster addresses, as `--control-nodes` takes them.
    control_nodes: String,
    controls: Vec<Child>,
    datas: Vec<Child>,
}

impl Cluster {
    /// Starts the cluster with its data and logs under `dir` and waits
    /// until every data node answers `/readyz` with 200.
    ///
    /// # Errors
    /// When a process cannot start, exits, or is not ready in time.
    ///
    /// # Panics
    /// If `nodes` is outside [`NODES_MIN`]..=[`NODES_MAX`].
    pub async fn start(binary: &Path, dir: &Path, nodes: usize) -> io::Result<Self> {
        assert!((NODES_MIN..=NODES_MAX).contains(&nodes), "{nodes} nodes");
        fs::create_dir_all(dir)?;
        let cluster_addrs = (0..nodes)
            .map(|_| free_udp_addr())
            .collect::<io::Result<Vec<_>>>()?;
        let peers = cluster_addrs
            .iter()
            .enumerate()
            .map(|(index, addr)| format!("{}@{addr}", index + 1))
            .collect::<Vec<_>>()
            .join(",");
        let control_nodes = cluster_addrs
            .iter()
            .map(SocketAddr::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            http_addrs: Vec::new(),
            binary: binary.to_path_buf(),
            dir: dir.to_path_buf(),
            control_nodes,
            controls: Vec::new(),
            datas: Vec::new(),
        };
        for (index, addr) in cluster_addrs.iter().enumerate() {
            let id = (index + 1).to_string();
            let mut command = Command::new(binary);
            command
                .arg("control")
                .args(["--node-id", &id])
                .args(["--cluster-addr", &addr.to_string()])
                .args(["--advertise-addr", &addr.to_string()])
                .args(["--http-addr", &loopback(free_tcp_port()?).to_string()])
                .args(["--peers", &peers]);
            let child = spawn(command, &dir.join(format!("control-{id}")))?;
            cluster.controls.push(child);
        }
        for _ in 0..nodes {
            cluster.spawn_data_node()?;
        }
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    /// Starts one more data node with the next id and the flags of the
    /// others, and waits until every data node answers `/readyz` with 200.
    /// The control plane's planner then moves partitions to it. Returns
    /// its HTTP API address.
    ///
    /// # Errors
    /// When it cannot start, exits, or is not ready in time (or another
    /// process of the cluster exited).
    pub async fn add_data_node(&mut self) -> io::Result<SocketAddr> {
        let http_addr = self.spawn_data_node()?;
        self.wait_ready().await?;
        Ok(http_addr)
    }

    /// The data directory of data node `id` (ids from 1).
    pub fn data_dir(&self, id: usize) -> PathBuf {
        self.dir.join(format!("data-{id}"))
    }

    /// Spawns data node `datas.len() + 1`; its HTTP API address.
    fn spawn_data_node(&mut self) -> io::Result<SocketAddr> {
        let id = self.datas.len() + 1;
        let http_addr = loopback(free_tcp_port()?);
        let mut command = Command::new(&self.binary);
        command
            .arg("data")
            .args(["--node-id", &id.to_string()])
            .args(["--control-nodes", &self.control_nodes])
            .args(["--http-addr", &http_addr.to_string()])
            .args(["--rpc-addr", &free_udp_addr()?.to_string()]);
        let child = spawn(command, &self.data_dir(id))?;
        self.datas.push(child);
        self.http_addrs.push(http_addr);
        Ok(http_addr)
    }

    async fn wait_ready(&mut self) -> io::Result<()> {
        let request = http_request("GET", "/readyz", "text/plain", b"");
        let started = Instant::now();
        let mut ready = vec![false; self.http_addrs.len()];
        while started.elapsed() < READY_TIMEOUT {
            self.check_running()?;
            for (addr, ready) in self.http_addrs.iter().zip(ready.iter_mut()) {
                if !*ready
                    && let Ok(mut connection) = Connection::open(*addr).await
                    && let Ok(response) = connection.send(&request).await
                {
                    *ready = response.status == 200;
                }
            }
            if ready.iter().all(|ready| *ready) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(io::Error::other(
            "the cluster's data nodes did not become ready in time",
        ))
    }

    fn check_running(&mut self) -> io::Result<()> {
        for child in self.controls.iter_mut().chain(self.datas.iter_mut()) {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "a cluster process exited early: {status} (logs beside its data directory)"
                )));
            }
        }
        Ok(())
    }

    /// Every process's id, control nodes first.
    pub fn pids(&self) -> Vec<u32> {
        self.controls
            .iter()
            .chain(self.datas.iter())
            .map(Child::id)
            .collect()
    }

    /// CPU seconds every process of the cluster used so far.
    pub fn cpu_seconds(&self) -> f64 {
        sum_over(&self.pids(), cpu_seconds)
    }
}

/// `read` of every process in `pids`, summed.
fn sum_over<T: std::iter::Sum>(pids: &[u32], read: impl Fn(&str) -> T) -> T {
    pids.iter().map(|pid| read(&pid.to_string())).sum()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.datas.iter_mut().chain(self.controls.iter_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Spawns `command` with its data in `data_dir` and its output in the log
/// beside it, security off and the cluster secret set. The cluster plane
/// runs on the secret alone (`security.allow_plaintext_raft`): a benchmark
/// on loopback has no certificates to show.
fn spawn(mut command: Command, data_dir: &Path) -> io::Result<Child> {
    fs::create_dir_all(data_dir)?;
    let log = File::create(data_dir.with_extension("log"))?;
    command
        .args(["--security-enabled", "false"])
        .arg("--data-dir")
        .arg(data_dir)
        .env("NARAD_CLUSTER_SECRET", SECRET)
        .env("NARAD_ALLOW_PLAINTEXT_RAFT", "true")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .map_err(|e| io::Error::other(format!("cannot start {command:?}: {e}")))
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// A loopback UDP address that was free a moment ago.
fn free_udp_addr() -> io::Result<SocketAddr> {
    UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()
}

/// What a benchmark drives.
#[derive(Debug)]
pub enum Broker {
    /// One `narad dev` process.
    Dev(DevNode),
    /// Control and data nodes as separate processes.
    Cluster(Cluster),
}

impl Broker {
    /// `narad dev`, or with `cluster` a cluster of that many nodes of each
    /// kind, with data under `dir`.
    ///
    /// # Errors
    /// See [`DevNode::start`] and [`Cluster::start`].
    pub async fn start(binary: &Path, dir: &Path, cluster: Option<usize>) -> io::Result<Self> {
        match cluster {
            None => Ok(Self::Dev(DevNode::start(binary, dir).await?)),
            Some(nodes) => Ok(Self::Cluster(Cluster::start(binary, dir, nodes).await?)),
        }
    }

    /// [`Self::start`] with the ingress WAL of `narad dev` under `wal_dir`
    /// when given (a cluster keeps each node's WAL under its data
    /// directory).
    ///
    /// # Errors
    /// As [`Self::start`]; a `wal_dir` with `cluster` is refused.
    pub async fn start_with_wal_dir(
        binary: &Path,
        dir: &Path,
        cluster: Option<usize>,
        wal_dir: Option<&Path>,
    ) -> io::Result<Self> {
        match (cluster, wal_dir) {
            (None, Some(wal_dir)) => Ok(Self::Dev(
                DevNode::start_with_wal_dir(binary, dir, Some(wal_dir)).await?,
            )),
            (Some(_), Some(_)) => Err(io::Error::other(
                "--wal-dir applies to narad dev only, not to --cluster",
            )),
            (_, None) => Self::start(binary, dir, cluster).await,
        }
    }

    /// The HTTP API addresses clients spread over (one for `narad dev`).
    pub fn addrs(&self) -> Vec<SocketAddr> {
        match self {
            Self::Dev(node) => vec![node.addr],
            Self::Cluster(cluster) => cluster.http_addrs.clone(),
        }
    }

    /// Every process's id (control nodes first in a cluster).
    pub fn pids(&self) -> Vec<u32> {
        match self {
            Self::Dev(node) => vec![node.pid()],
            Self::Cluster(cluster) => cluster.pids(),
        }
    }

    /// CPU seconds every process of the broker used so far.
    pub fn cpu_seconds(&self) -> f64 {
        sum_over(&self.pids(), cpu_seconds)
    }

    /// Context switches of every live thread of the broker so far.
    pub fn context_switches(&self) -> u64 {
        sum_over(&self.pids(), context_switches)
    }

    /// Stops every process.
    pub fn stop(self) {
        drop(self);
    }
}

/// `--cluster N` among `args` (the program's arguments after its name):
/// `None` without it.
///
/// # Errors
/// An unknown argument, or `N` missing or outside
/// [`NODES_MIN`]..=[`NODES_MAX`].
pub fn cluster_arg(args: impl IntoIterator<Item = String>) -> io::Result<Option<usize>> {
    let mut args = args.into_iter();
    let mut cluster = None;
    while let Some(arg) = args.next() {
        if arg != "--cluster" {
            return Err(io::Error::other(format!(
                "unknown argument {arg:?}; the only one is --cluster N"
            )));
        }
        let nodes = args
            .next()
            .and_then(|value| value.parse::<usize>().ok())
            .filter(|nodes| (NODES_MIN..=NODES_MAX).contains(nodes))
            .ok_or_else(|| {
                io::Error::other(format!(
                    "--cluster takes a node count from {NODES_MIN} to {NODES_MAX}"
                ))
            })?;
        cluster = Some(nodes);
    }
    Ok(cluster)
}

/// Waits until `addr` describes every one of `partitions` partitions of
/// `topic` as owned and reachable: a new topic's partitions are assigned
/// shortly after the create commits, and each data node learns of it from
/// its own replica.
///
/// # Errors
/// When that does not happen within 30 s.
pub async fn wait_assigned(addr: SocketAddr, topic: &str, partitions: usize) -> io::Result<()> {
    const ASSIGN_MAX: Duration = Duration::from_secs(30);
    let started = Instant::now();
    let request = http_request(
        "GET",
        &format!("/v1/topics/{topic}"),
        "application/json",
        b"",
    );
    let mut connection = Connection::open(addr).await?;
    while started.elapsed() < ASSIGN_MAX {
        let response = connection.send(&request).await?;
        let described: serde_json::Value =
            serde_json::from_slice(&response.body).unwrap_or(serde_json::Value::Null);
        let assigned = described["partition_stats"]
            .as_array()
            .is_some_and(|stats| {
                stats.len() == partitions && stats.iter().all(|entry| entry["status"] == "ok")
            });
        if assigned {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(io::Error::other(format!(
        "{addr} never saw every partition of {topic} assigned"
    )))
}

/// How many of `topic`'s partitions each data node owns, as `addr`
/// describes them: `"1:3 2:3 3:2"` (node id, then partitions), so a
/// report says how the controller spread the load.
///
/// # Errors
/// When `addr` does not answer.
pub async fn partition_owners(addr: SocketAddr, topic: &str) -> io::Result<String> {
    let request = http_request(
        "GET",
        &format!("/v1/topics/{topic}"),
        "application/json",
        b"",
    );
    let response = Connection::open(addr).await?.send(&request).await?;
    let described: serde_json::Value =
        serde_json::from_slice(&response.body).unwrap_or(serde_json::Value::Null);
    let mut owners = std::collections::BTreeMap::<String, usize>::new();
    for entry in described["partition_stats"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let owner = entry["owner_node"].as_str().unwrap_or("none").to_owned();
        *owners.entry(owner).or_default() += 1;
    }
    Ok(owners
        .iter()
        .map(|(owner, partitions)| format!("{owner}:{partitions}"))
        .collect::<Vec<_>>()
        .join(" "))
}

/// The address of client connection `index`: round robin over `addrs`.
///
/// # Panics
/// If `addrs` is empty.
pub fn spread(addrs: &[SocketAddr], index: usize) -> SocketAddr {
    addrs[index % addrs.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn no_argument_means_one_dev_node() {
        assert_eq!(cluster_arg(args("")).unwrap(), None);
    }

    #[test]
    fn cluster_takes_a_node_count() {
        assert_eq!(cluster_arg(args("--cluster 3")).unwrap(), Some(3));
    }

    #[test]
    fn a_cluster_of_fewer_than_three_or_no_count_is_refused() {
        assert!(cluster_arg(args("--cluster 1")).is_err());
        assert!(cluster_arg(args("--cluster")).is_err());
        assert!(cluster_arg(args("--nodes 3")).is_err());
    }

    #[test]
    fn connections_spread_round_robin() {
        let addrs: Vec<SocketAddr> = (1..=3).map(loopback).collect();
        let spread: Vec<u16> = (0..5).map(|i| spread(&addrs, i).port()).collect();
        assert_eq!(spread, [1, 2, 3, 1, 2]);
    }
}
