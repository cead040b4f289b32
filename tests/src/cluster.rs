//! A harness for multi-process cluster tests: it builds the `narad` binary
//! once, starts `narad control` processes on loopback with free ports,
//! talks to them over the cluster transport (with the same secret), starts
//! `narad data` processes following them ([`DataProcess`], and
//! [`DataCluster`] for control and data nodes together, security on, and
//! optionally with every data node behind UDP relays so a test can cut one
//! off the network and heal it: [`DataCluster::start_relayed`]), and kills
//! every process it started when dropped.
//!
//! A secured cluster of several nodes needs mutual TLS files or
//! `security.allow_plaintext_raft`: every process gets
//! `NARAD_ALLOW_PLAINTEXT_RAFT=true`, unless the cluster was started with a
//! [`TestPki`] ([`ControlCluster::start_with_tls`],
//! [`DataCluster::start_with_tls`]), whose files every process and the
//! harness's own transport then use instead.
//!
//! Every wait is bounded and fails with what it was waiting for.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use narad_controlplane::node::ControlClient;
use narad_controlplane::node::wire::Status;
use narad_protocol::{ClusterAuth, ClusterSecret, ClusterTls, Node, NodeConfig, Router};

use crate::relay::Relay;
use crate::tls::TestPki;

/// The cluster secret every test cluster shares.
pub const SECRET: &str = "narad-test-cluster-secret-0123456789";

/// Raft timings for tests: twice the defaults (100 ms heartbeats, 500 ms
/// election timeout). A test binary runs several 3-node clusters at once on
/// a 2-core machine, and with the defaults a starved process missed 100 ms
/// append deadlines often enough that no stable leader formed within
/// `WAIT_MAX` (seen once under a parallel build).
const HEARTBEAT: &str = "200ms";
const ELECTION: &str = "1000ms";

/// How long any single wait of the harness may take before the test fails.
pub const WAIT_MAX: Duration = Duration::from_secs(20);

/// Returns the `narad` executable, building it if needed (once per test
/// binary) with the cargo that runs the tests.
///
/// It asks for `cargo test --workspace --no-run`, the same build as the
/// workspace's test command: under `cargo test --workspace` everything is
/// already fresh, so this only locates the binary (cargo releases its build
/// lock before tests run), and the binary is not compiled a second time
/// with another feature set. The `narad` package has an integration test,
/// so that build includes `target/debug/narad`.
///
/// # Panics
/// If the build fails or reports no executable.
pub fn narad_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let output = Command::new(env!("CARGO"))
            .current_dir(&workspace)
            .args(["test", "--workspace", "--no-run", "--message-format=json"])
            .stderr(Stdio::inherit())
            .output()
            .expect("cargo runs");
        assert!(
            output.status.success(),
            "cargo test --workspace --no-run failed"
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|message| message["target"]["name"] == "narad")
            .filter(|message| message["target"]["kind"][0] == "bin")
            .filter(|message| message["profile"]["test"] == false)
            .find_map(|message| message["executable"].as_str().map(PathBuf::from))
            .expect("cargo reported the narad executable")
    })
}

/// Ports this test process has handed out, by protocol (UDP `false`, TCP
/// `true`). A port is free when it is handed out, but the process it is
/// for binds it only later: without this, a test running beside it could
/// be handed the same port meanwhile, and one test's requests would reach
/// the other test's node (a create once answered `404` with no body, most
/// likely from another test's control node).
static HANDED_OUT: Mutex<BTreeSet<(bool, u16)>> = Mutex::new(BTreeSet::new());

/// A loopback port that was free a moment ago and that this test process
/// never handed out before. `bind` takes an address and gives the socket
/// and its port; the sockets of ports refused stay bound while looking, so
/// the system offers others.
fn unique_port<S>(tcp: bool, bind: impl Fn() -> (S, SocketAddr)) -> SocketAddr {
    let mut refused = Vec::new();
    loop {
        let (socket, addr) = bind();
        let fresh = HANDED_OUT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((tcp, addr.port()));
        if fresh {
            return addr;
        }
        refused.push(socket);
    }
}

/// A loopback UDP port that was free a moment ago.
fn free_udp_addr() -> SocketAddr {
    unique_port(false, || {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("udp bind");
        let addr = socket.local_addr().expect("local addr");
        (socket, addr)
    })
}

/// A loopback TCP port that was free a moment ago.
fn free_tcp_addr() -> SocketAddr {
    unique_port(true, || {
        let listener = TcpListener::bind("127.0.0.1:0").expect("tcp bind");
        let addr = listener.local_addr().expect("local addr");
        (listener, addr)
    })
}

/// One `narad control` process (or its place while stopped).
#[derive(Debug)]
pub struct ControlProcess {
    /// Raft id.
    pub id: u64,
    /// Cluster transport address.
    pub cluster_addr: SocketAddr,
    /// HTTP address.
    pub http_addr: SocketAddr,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl ControlProcess {
    /// Its data directory (the Raft log, the snapshot and the metastore).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Whether the process runs.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A set of control processes and a client of them.
#[derive(Debug)]
pub struct ControlCluster {
    /// The processes, by position (id = position + 1).
    pub nodes: Vec<ControlProcess>,
    peers: String,
    extra_args: Vec<String>,
    /// Environment variables every process of this cluster gets, besides
    /// the secret and the log level.
    extra_env: Vec<(String, String)>,
    /// The cluster TLS files every process uses, if any.
    pki: Option<Arc<TestPki>>,
    client: ControlClient,
    _dir: tempfile::TempDir,
}

impl ControlCluster {
    /// Starts `voters` control nodes that bootstrap as one cluster.
    ///
    /// # Panics
    /// If a process cannot be spawned.
    pub async fn start(voters: u64) -> Self {
        Self::start_with(voters, &[]).await
    }

    /// As [`ControlCluster::start`], passing `extra_args` to every
    /// `narad control` this cluster starts (joiners and restarts too).
    ///
    /// # Panics
    /// If a process cannot be spawned.
    pub async fn start_with(voters: u64, extra_args: &[&str]) -> Self {
        Self::start_with_env(voters, extra_args, &[]).await
    }

    /// As [`ControlCluster::start_with`], with `extra_env` set for every
    /// `narad control` this cluster starts.
    ///
    /// # Panics
    /// If a process cannot be spawned.
    pub async fn start_with_env(
        voters: u64,
        extra_args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Self {
        Self::start_with_pki(voters, extra_args, extra_env, None)
    }

    /// As [`ControlCluster::start_with_env`], with mutual TLS: every
    /// process, the data nodes following it and the harness's client use
    /// `pki`'s files.
    ///
    /// # Panics
    /// If a process cannot be spawned.
    pub async fn start_with_tls(
        voters: u64,
        extra_args: &[&str],
        extra_env: &[(&str, &str)],
        pki: Arc<TestPki>,
    ) -> Self {
        Self::start_with_pki(voters, extra_args, extra_env, Some(pki))
    }

    fn start_with_pki(
        voters: u64,
        extra_args: &[&str],
        extra_env: &[(&str, &str)],
        pki: Option<Arc<TestPki>>,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let nodes: Vec<ControlProcess> = (1..=voters)
            .map(|id| ControlProcess {
                id,
                cluster_addr: free_udp_addr(),
                http_addr: free_tcp_addr(),
                data_dir: dir.path().join(format!("node-{id}")),
                log: dir.path().join(format!("node-{id}.log")),
                child: None,
            })
            .collect();
        let peers = nodes
            .iter()
            .map(|node| format!("{}@{}", node.id, node.cluster_addr))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            nodes,
            peers,
            extra_args: extra_args.iter().map(|arg| (*arg).to_owned()).collect(),
            extra_env: extra_env
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
            client: ControlClient::new(Arc::new(client_transport(
                pki.as_ref().map(|pki| pki.cluster_tls()),
            ))),
            pki,
            _dir: dir,
        };
        for index in 0..cluster.nodes.len() {
            cluster.spawn(index);
        }
        cluster
    }

    /// Adds a node with the next id that joins through the peers.
    pub fn add_joiner(&mut self) -> usize {
        let id = self.nodes.len() as u64 + 1;
        let dir = self._dir.path();
        self.nodes.push(ControlProcess {
            id,
            cluster_addr: free_udp_addr(),
            http_addr: free_tcp_addr(),
            data_dir: dir.join(format!("node-{id}")),
            log: dir.join(format!("node-{id}.log")),
            child: None,
        });
        let index = self.nodes.len() - 1;
        self.spawn(index);
        index
    }

    /// Starts (or restarts) the process at `index` on its old addresses
    /// and data directory.
    pub fn spawn(&mut self, index: usize) {
        let node = &self.nodes[index];
        assert!(node.child.is_none(), "node {} already runs", node.id);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .expect("log file");
        let mut command = Command::new(narad_binary());
        command.arg("control");
        // Security (users, the root admin) is off unless a test asks for
        // it; the cluster plane is authenticated by the secret either way.
        if !self
            .extra_args
            .iter()
            .any(|arg| arg == "--security-enabled")
        {
            command.args(["--security-enabled", "false"]);
        }
        let child = command
            .args(["--node-id", &node.id.to_string()])
            .args(["--cluster-addr", &node.cluster_addr.to_string()])
            .args(["--advertise-addr", &node.cluster_addr.to_string()])
            .args(["--http-addr", &node.http_addr.to_string()])
            .args(["--peers", &self.peers])
            .args(["--raft-heartbeat-interval", HEARTBEAT])
            .args(["--raft-election-timeout", ELECTION])
            .args(&self.extra_args)
            .arg("--data-dir")
            .arg(&node.data_dir)
            .env("NARAD_CLUSTER_SECRET", SECRET)
            .env("NARAD_LOG_LEVEL", "info")
            .envs(tls_env(self.pki.as_deref()))
            .envs(self.extra_env.iter().map(|(name, value)| (name, value)))
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("narad control starts");
        self.nodes[index].child = Some(child);
    }

    /// SIGKILLs the process at `index` and reaps it.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.nodes[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM to the process at `index` and waits (bounded) for its
    /// exit.
    ///
    /// # Panics
    /// If it does not run, or has not exited after [`WAIT_MAX`].
    pub async fn terminate(&mut self, index: usize) -> std::process::ExitStatus {
        let node = &mut self.nodes[index];
        let child = node.child.take().expect("the control node runs");
        let log = node.log.clone();
        terminate_child(child, &log).await
    }

    /// The client.
    pub fn client(&self) -> &ControlClient {
        &self.client
    }

    /// Status of every running node that answers.
    pub async fn statuses(&self) -> Vec<(usize, Status)> {
        let mut found = Vec::new();
        for (index, node) in self.nodes.iter().enumerate() {
            if node.is_running()
                && let Ok(status) = self.client.status(node.cluster_addr).await
            {
                found.push((index, status));
            }
        }
        found
    }

    /// Waits until every running node names the same leader, which runs
    /// and calls itself leader; returns its index.
    ///
    /// # Panics
    /// After [`WAIT_MAX`], with every node's log.
    pub async fn wait_for_leader(&self) -> usize {
        let running = self.nodes.iter().filter(|node| node.is_running()).count();
        self.wait_until("one leader agreed by every running node", || async {
            let statuses = self.statuses().await;
            if statuses.len() != running {
                return None;
            }
            let leader = statuses[0].1.leader?;
            let index = self.nodes.iter().position(|node| node.id == leader)?;
            let agreed = statuses
                .iter()
                .all(|(_, status)| status.leader == Some(leader));
            let leads = statuses
                .iter()
                .any(|(i, status)| *i == index && status.state == "leader");
            (agreed && leads).then_some(index)
        })
        .await
    }

    /// Polls `probe` every 50 ms until it returns `Some`.
    ///
    /// # Panics
    /// After [`WAIT_MAX`], naming `what` and showing every node's log.
    pub async fn wait_until<T, F, Fut>(&self, what: &str, probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        poll_until(what, probe, || {
            let logs: Vec<String> = self
                .nodes
                .iter()
                .map(|node| format!("--- node {} ---\n{}", node.id, node.log()))
                .collect();
            logs.join("\n")
        })
        .await
    }
}

impl Drop for ControlCluster {
    fn drop(&mut self) {
        for index in 0..self.nodes.len() {
            self.kill(index);
        }
    }
}

/// A transport node for the test's client, with the cluster secret and
/// `tls`.
fn client_transport(tls: Option<ClusterTls>) -> Node {
    let secret = ClusterSecret::new(SECRET.as_bytes().to_vec()).expect("secret long enough");
    let mut config = NodeConfig::new(
        "127.0.0.1:0".parse().expect("address"),
        ClusterAuth::Secret(secret),
    );
    config.tls = tls;
    Node::bind(config, Router::new()).expect("client transport binds")
}

/// The cluster TLS environment of a process: `pki`'s files, or without
/// them the allowance a secured cluster of several nodes needs to start
/// on its secret alone.
fn tls_env(pki: Option<&TestPki>) -> Vec<(String, String)> {
    match pki {
        Some(pki) => pki.env(),
        None => vec![("NARAD_ALLOW_PLAINTEXT_RAFT".into(), "true".into())],
    }
}

/// `GET path` over plain HTTP/1.0; the status code and body.
///
/// # Panics
/// If the node does not answer.
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("http connects");
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request sent");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("response read");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("status line");
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    (status, body)
}

/// One `narad data` process following the control nodes of a
/// [`ControlCluster`], on loopback with free ports and its own data
/// directory; killed when dropped.
#[derive(Debug)]
pub struct DataProcess {
    /// Data node id.
    pub id: u64,
    /// HTTP API address.
    pub http_addr: SocketAddr,
    /// Node RPC (cluster transport) address.
    pub rpc_addr: SocketAddr,
    /// The ingress WAL and partition logs; kept across restarts.
    pub data_dir: PathBuf,
    /// `--control-nodes`, kept for restarts.
    control_nodes: String,
    extra_args: Vec<String>,
    /// The control plane's cluster TLS files, if it has them.
    pki: Option<Arc<TestPki>>,
    log: PathBuf,
    /// Where the log of the latest spawn starts.
    log_start: u64,
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

impl DataProcess {
    /// Starts data node `id` following every control node of `cluster`,
    /// with security on (the default) and the cluster's secret; then
    /// `extra_args`, which win over the harness's own flags.
    ///
    /// # Panics
    /// If the process cannot be spawned.
    pub fn start(cluster: &ControlCluster, id: u64, extra_args: &[&str]) -> Self {
        let mut node = Self::new(cluster, id, extra_args);
        node.spawn();
        node
    }

    /// As [`DataProcess::start`], without spawning the process yet.
    pub fn new(cluster: &ControlCluster, id: u64, extra_args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let control_nodes = cluster
            .nodes
            .iter()
            .map(|node| node.cluster_addr.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let log = dir.path().join(format!("data-{id}.log"));
        Self {
            id,
            http_addr: free_tcp_addr(),
            rpc_addr: free_udp_addr(),
            data_dir: dir.path().join("data"),
            control_nodes,
            extra_args: extra_args.iter().map(|arg| (*arg).to_owned()).collect(),
            pki: cluster.pki.clone(),
            log,
            log_start: 0,
            child: None,
            _dir: dir,
        }
    }

    /// Starts (or restarts) the process on its old addresses and data
    /// directory; its log is appended to.
    ///
    /// # Panics
    /// If it runs already or cannot be spawned.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "data node {} already runs", self.id);
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        self.log_start = log_file.metadata().expect("log file size").len();
        let child = Command::new(narad_binary())
            .arg("data")
            .args(["--node-id", &self.id.to_string()])
            .args(["--control-nodes", &self.control_nodes])
            .args(["--http-addr", &self.http_addr.to_string()])
            .args(["--rpc-addr", &self.rpc_addr.to_string()])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(&self.extra_args)
            .env("NARAD_CLUSTER_SECRET", SECRET)
            .env("NARAD_LOG_LEVEL", "info")
            .envs(tls_env(self.pki.as_deref()))
            .stdout(log_file.try_clone().expect("log file"))
            .stderr(log_file)
            .spawn()
            .expect("narad data starts");
        self.child = Some(child);
    }

    /// Whether the process runs.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The log of the latest spawn so far.
    fn log_of_spawn(&self) -> String {
        let log = self.log();
        let start = usize::try_from(self.log_start).unwrap_or(usize::MAX);
        log.get(start..).unwrap_or_default().to_owned()
    }

    /// Whether the latest spawn has exited (reaping it if so).
    fn exited(&mut self) -> bool {
        let exited = self
            .child
            .as_mut()
            .is_none_or(|child| matches!(child.try_wait(), Ok(Some(_))));
        if exited {
            self.child = None;
        }
        exited
    }

    /// Spawns the process and waits until it is ready: `/readyz` answers
    /// `200` and its log says it serves, so an answer from another
    /// process that took the port does not count.
    ///
    /// Ports are picked free and released before the process binds them,
    /// so another process can take one in between (test binaries run many
    /// clusters at once, and every client connection takes a port). When
    /// the process exits because a port is in use, it is spawned again:
    /// on fresh ports if `fresh_ports`, else on the same ones once they
    /// are free (a restart keeps its addresses, which other nodes know).
    ///
    /// # Panics
    /// If it exits for another reason, or is not ready within
    /// [`WAIT_MAX`].
    pub async fn spawn_ready(&mut self, fresh_ports: bool) {
        let deadline = Instant::now() + WAIT_MAX;
        self.spawn();
        loop {
            let serving = self.log_of_spawn().contains("narad data serving");
            if serving
                && let Some((200, _)) = self.request(None, "GET", "/readyz", "").await
                && !self.exited()
            {
                return;
            }
            if self.exited() {
                let log = self.log_of_spawn();
                assert!(
                    log.contains("Address already in use"),
                    "data node {} exited at start\n{log}",
                    self.id
                );
                if fresh_ports {
                    self.http_addr = free_tcp_addr();
                    self.rpc_addr = free_udp_addr();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                self.spawn();
            }
            assert!(
                Instant::now() <= deadline,
                "gave up after {WAIT_MAX:?} waiting for data node {} to be ready\n{}",
                self.id,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILLs the process and reaps it.
    ///
    /// # Panics
    /// If it does not run.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("the data node runs");
        child.kill().expect("SIGKILL delivered");
        child.wait().expect("reaped");
    }

    /// The process's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One HTTP request, with Basic credentials `user` (name, password) if
    /// given; `None` when the node did not answer.
    pub async fn request(
        &self,
        user: Option<(&str, &str)>,
        method: &str,
        path: &str,
        body: &str,
    ) -> Option<(u16, String)> {
        let exchange = http_request(self.http_addr, user, method, path, body);
        tokio::time::timeout(WAIT_MAX, exchange).await.ok()?
    }

    /// Polls `probe` every 50 ms until it returns `Some`.
    ///
    /// # Panics
    /// After [`WAIT_MAX`], naming `what` and showing the node's log.
    pub async fn wait_until<T, F, Fut>(&self, what: &str, probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        poll_until(what, probe, || {
            format!("--- data node {} ---\n{}", self.id, self.log())
        })
        .await
    }

    /// Waits until `/readyz` answers `200`.
    ///
    /// # Panics
    /// After [`WAIT_MAX`].
    pub async fn wait_ready(&self) {
        self.wait_until("/readyz to answer 200", || async {
            let (status, _) = self.request(None, "GET", "/readyz", "").await?;
            (status == 200).then_some(())
        })
        .await;
    }

    /// Sends SIGTERM and waits (bounded) for the exit.
    ///
    /// # Panics
    /// If the process does not run, or has not exited after [`WAIT_MAX`].
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let child = self.child.take().expect("the data node runs");
        terminate_child(child, &self.log).await
    }
}

/// Sends SIGTERM to `child` and waits (bounded) for its exit.
///
/// # Panics
/// If it has not exited after [`WAIT_MAX`], with its `log`.
async fn terminate_child(mut child: Child, log: &Path) -> std::process::ExitStatus {
    let signalled = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(signalled.success(), "SIGTERM not delivered");
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        if let Some(status) = child.try_wait().expect("wait on the child") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(log).unwrap_or_default();
            panic!("no exit {WAIT_MAX:?} after SIGTERM\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Drop for DataProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `method path` with a JSON `body` over HTTP/1.1 (connection closed after
/// the answer), with Basic credentials `user` if given; the status code and
/// body, or `None` if the node did not answer.
pub async fn http_request(
    addr: SocketAddr,
    user: Option<(&str, &str)>,
    method: &str,
    path: &str,
    body: &str,
) -> Option<(u16, String)> {
    use base64::Engine;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let authorization = user.map_or_else(String::new, |(name, password)| {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{name}:{password}"));
        format!("Authorization: Basic {encoded}\r\n")
    });
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         {authorization}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())?;
    Some((status, body))
}

/// The root admin's password a [`DataCluster`]'s control plane seeds.
pub const ADMIN_PASSWORD: &str = "data-cluster-admin-password";
/// The root admin of a [`DataCluster`]: name and password.
pub const ADMIN: (&str, &str) = ("admin", ADMIN_PASSWORD);

/// The `Authorization` header line (without CRLF) for Basic credentials.
pub fn basic_authorization((name, password): (&str, &str)) -> String {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{name}:{password}"));
    format!("Authorization: Basic {encoded}")
}

/// The loopback address relayed data nodes advertise and their relays
/// listen on (Linux routes all of 127.0.0.0/8 to the loopback interface, so
/// no root is needed). The nodes themselves bind 127.0.0.1.
pub const RELAY_HOST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// The relays between one data node and the rest of a relayed
/// [`DataCluster`].
#[derive(Debug)]
pub struct NodeRelays {
    /// At the node's advertised RPC address ([`RELAY_HOST`] and the node's
    /// RPC port), forwarding to its cluster socket on 127.0.0.1: every other
    /// node reaches it through this.
    pub rpc: Relay,
    /// One per control node: the addresses this data node follows (its
    /// `--control-nodes`), so its heartbeats and metadata feed can be cut.
    pub control: Vec<Relay>,
}

impl NodeRelays {
    /// Relays to every control node of `control`, and a relay at
    /// ([`RELAY_HOST`], port of a free 127.0.0.1 UDP address) to that
    /// address, which the node is then to bind.
    fn start(control: &ControlCluster) -> (Self, SocketAddr) {
        let relays = control
            .nodes
            .iter()
            .map(|node| {
                Relay::start(SocketAddr::from((RELAY_HOST, 0)), node.cluster_addr)
                    .expect("control relay starts")
            })
            .collect();
        for _ in 0..100 {
            let node_addr = free_udp_addr();
            let listen = SocketAddr::from((RELAY_HOST, node_addr.port()));
            if let Ok(rpc) = Relay::start(listen, node_addr) {
                let relays = Self {
                    rpc,
                    control: relays,
                };
                return (relays, node_addr);
            }
        }
        panic!("no free port pair on 127.0.0.1 and {RELAY_HOST}");
    }

    /// `--control-nodes` through the control relays.
    fn control_nodes(&self) -> String {
        self.control
            .iter()
            .map(|relay| relay.addr().to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Control nodes with security on (users, the root admin [`ADMIN`]) and
/// data nodes `1..=n` following all of them, on loopback with the cluster
/// secret. Every process is killed when dropped.
#[derive(Debug)]
pub struct DataCluster {
    /// The control plane.
    pub control: ControlCluster,
    /// The data nodes, by position (id = position + 1).
    pub data: Vec<DataProcess>,
    /// Each data node's relays, by position; empty unless the cluster was
    /// started with [`DataCluster::start_relayed`].
    pub relays: Vec<NodeRelays>,
}

impl DataCluster {
    /// Starts `control_nodes` control nodes and `data_nodes` data nodes
    /// and waits until every data node is ready.
    ///
    /// # Panics
    /// If a process cannot be spawned or a data node is not ready within
    /// [`WAIT_MAX`].
    pub async fn start(control_nodes: u64, data_nodes: u64) -> Self {
        Self::start_with_pki(control_nodes, data_nodes, None).await
    }

    /// As [`DataCluster::start`], with mutual TLS between every node with
    /// `pki`'s files.
    ///
    /// # Panics
    /// As [`DataCluster::start`].
    pub async fn start_with_tls(control_nodes: u64, data_nodes: u64, pki: Arc<TestPki>) -> Self {
        Self::start_with_pki(control_nodes, data_nodes, Some(pki)).await
    }

    async fn start_with_pki(
        control_nodes: u64,
        data_nodes: u64,
        pki: Option<Arc<TestPki>>,
    ) -> Self {
        let control = ControlCluster::start_with_pki(
            control_nodes,
            &["--security-enabled", "true"],
            &[("NARAD_ADMIN_PASSWORD", ADMIN_PASSWORD)],
            pki,
        );
        let mut data = Vec::new();
        for id in 1..=data_nodes {
            let mut node = DataProcess::new(&control, id, &[]);
            node.spawn_ready(true).await;
            data.push(node);
        }
        Self {
            control,
            data,
            relays: Vec::new(),
        }
    }

    /// As [`DataCluster::start`], with every data node behind relays
    /// ([`NodeRelays`]): it binds its cluster socket on 127.0.0.1,
    /// advertises [`RELAY_HOST`] (where its RPC relay listens on the same
    /// port) and follows the control nodes through relays of its own, so
    /// [`DataCluster::cut`] can take it off the network without root. Its
    /// HTTP API stays on 127.0.0.1, where the tests talk to it; the HTTP
    /// address it advertises on [`RELAY_HOST`] is not served (nothing in
    /// the cluster dials it).
    ///
    /// # Panics
    /// As [`DataCluster::start`], or if a relay cannot be started.
    pub async fn start_relayed(control_nodes: u64, data_nodes: u64) -> Self {
        let control = ControlCluster::start_with_env(
            control_nodes,
            &["--security-enabled", "true"],
            &[("NARAD_ADMIN_PASSWORD", ADMIN_PASSWORD)],
        )
        .await;
        let advertise = RELAY_HOST.to_string();
        let mut data = Vec::new();
        let mut relays = Vec::new();
        for id in 1..=data_nodes {
            let (node_relays, rpc_addr) = NodeRelays::start(&control);
            let mut node = DataProcess::new(&control, id, &["--advertise-host", &advertise]);
            node.rpc_addr = rpc_addr;
            node.control_nodes = node_relays.control_nodes();
            // Its RPC port is fixed by the relay: a port taken meanwhile is
            // waited for, never replaced.
            node.spawn_ready(false).await;
            data.push(node);
            relays.push(node_relays);
        }
        Self {
            control,
            data,
            relays,
        }
    }

    /// Cuts data node `index` off the network: its RPC relay, its relays
    /// to the control nodes, and its datagrams to every other data node's
    /// relay all drop everything, both ways. The process keeps running.
    ///
    /// # Panics
    /// If the cluster is not relayed.
    pub fn cut(&self, index: usize) {
        let cut_off = &self.relays[index];
        cut_off.rpc.cut();
        for relay in &cut_off.control {
            relay.cut();
        }
        for (other, relays) in self.relays.iter().enumerate() {
            if other != index {
                relays.rpc.cut_client(self.data[index].rpc_addr);
            }
        }
    }

    /// Undoes [`DataCluster::cut`].
    ///
    /// # Panics
    /// If the cluster is not relayed.
    pub fn heal(&self, index: usize) {
        let healed = &self.relays[index];
        for (other, relays) in self.relays.iter().enumerate() {
            if other != index {
                relays.rpc.heal_client(self.data[index].rpc_addr);
            }
        }
        for relay in &healed.control {
            relay.heal();
        }
        healed.rpc.heal();
    }

    /// One create attempt through data node `via`: `Some(true)` created (or
    /// created by an earlier attempt whose answer was lost: names must be
    /// unique per cluster), `Some(false)` refused for now (no leader, or
    /// the root admin not seeded yet), `None` no answer.
    ///
    /// # Panics
    /// On any other answer.
    pub async fn try_create_topic(&self, via: usize, body: &str) -> Option<bool> {
        let (status, text) = self.data[via]
            .request(Some(ADMIN), "POST", "/v1/topics", body)
            .await?;
        match status {
            201 => Some(true),
            409 if text.contains("topic already exists") => Some(true),
            401 | 503 => Some(false),
            other => panic!("create {body}: {other} {text}"),
        }
    }

    /// Creates a topic (`body` is the create request) through data node
    /// `via`, retrying while the control plane cannot take it yet.
    ///
    /// # Panics
    /// If it is not created within [`WAIT_MAX`].
    pub async fn create_topic(&self, via: usize, body: &str) {
        let what = format!("topic {body} created");
        self.data[via]
            .wait_until(&what, || async {
                self.try_create_topic(via, body)
                    .await
                    .filter(|created| *created)
            })
            .await;
    }

    /// The owner (data node id) of every partition of `topic`, as data
    /// node `via` describes it once every partition has one.
    ///
    /// # Panics
    /// If some partition has no owner after [`WAIT_MAX`].
    pub async fn partition_owners(&self, via: usize, topic: &str) -> Vec<u64> {
        let path = format!("/v1/topics/{topic}");
        let node = &self.data[via];
        node.wait_until("an owner for every partition", || async {
            let (status, body) = node.request(Some(ADMIN), "GET", &path, "").await?;
            if status != 200 {
                return None;
            }
            let described: serde_json::Value = serde_json::from_str(&body).ok()?;
            described["partition_stats"]
                .as_array()?
                .iter()
                .map(|stats| stats["owner_node"].as_str()?.parse().ok())
                .collect()
        })
        .await
    }

    /// The sum of the high watermarks of the partitions of `topic` that
    /// data node `index` owns, as it describes them; `None` if it does not
    /// answer.
    pub async fn local_high_watermarks(&self, index: usize, topic: &str) -> Option<u64> {
        let node = &self.data[index];
        let path = format!("/v1/topics/{topic}");
        let (status, body) = node.request(Some(ADMIN), "GET", &path, "").await?;
        if status != 200 {
            return None;
        }
        let described: serde_json::Value = serde_json::from_str(&body).ok()?;
        let owner = node.id.to_string();
        let local = described["partition_stats"]
            .as_array()?
            .iter()
            .filter(|stats| stats["owner_node"] == owner.as_str() && stats["status"] == "ok")
            .filter_map(|stats| stats["high_watermark"].as_u64())
            .sum();
        Some(local)
    }

    /// `narad_ingress_dispatch_backlog_records` of data node `index`;
    /// `None` if it does not answer.
    pub async fn backlog_records(&self, index: usize) -> Option<u64> {
        let (status, metrics) = self.data[index]
            .request(Some(ADMIN), "GET", "/metrics", "")
            .await?;
        if status != 200 {
            return None;
        }
        metrics
            .lines()
            .find_map(|line| line.strip_prefix("narad_ingress_dispatch_backlog_records "))
            .and_then(|value| value.trim().parse().ok())
    }

    /// Waits until data node `index` has dispatched every record its WAL
    /// accepted (backlog 0).
    ///
    /// # Panics
    /// After [`WAIT_MAX`].
    pub async fn wait_drained(&self, index: usize) {
        self.data[index]
            .wait_until("a dispatch backlog of 0 records", || async {
                (self.backlog_records(index).await? == 0).then_some(())
            })
            .await;
    }

    /// Stops every running data node with SIGTERM.
    ///
    /// # Panics
    /// If one does not exit 0.
    pub async fn terminate_data_nodes(&mut self) {
        for node in self.data.iter_mut().filter(|node| node.is_running()) {
            let exit = node.terminate().await;
            assert!(exit.success(), "exit {exit:?}\n{}", node.log());
        }
    }
}

/// Polls `probe` every 50 ms until it returns `Some`.
///
/// # Panics
/// After [`WAIT_MAX`], naming `what` and showing the `logs` it gathers.
async fn poll_until<T, F, Fut>(what: &str, mut probe: F, logs: impl FnOnce() -> String) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        if Instant::now() > deadline {
            panic!("gave up after {WAIT_MAX:?} waiting for {what}\n{}", logs());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
