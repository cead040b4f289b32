//! A `narad dev` process to benchmark, and what a benchmark reports about the
//! machine while it runs (load averages; CPU time is in [`crate::cpu`]).

use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdTcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::http::{Connection, http_request};

/// How long `narad dev` may take to answer `/readyz` with 200.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A `narad dev` child process, killed when dropped.
#[derive(Debug)]
pub struct DevNode {
    /// The HTTP API address.
    pub addr: SocketAddr,
    child: Child,
}

impl DevNode {
    /// Starts `binary dev` on a free port with its data in `data_dir` (its
    /// log beside it) and waits until `/readyz` answers 200.
    ///
    /// # Errors
    /// When it cannot start, exits, or is not ready in time.
    pub async fn start(binary: &Path, data_dir: &Path) -> io::Result<Self> {
        Self::start_with_wal_dir(binary, data_dir, None).await
    }

    /// [`Self::start`] with the ingress WAL under `wal_dir` when given
    /// (`--wal-dir`, `storage.wal_dir`) instead of under `data_dir`.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn start_with_wal_dir(
        binary: &Path,
        data_dir: &Path,
        wal_dir: Option<&Path>,
    ) -> io::Result<Self> {
        fs::create_dir_all(data_dir)?;
        let port = free_tcp_port()?;
        let log = File::create(data_dir.with_extension("log"))?;
        let mut command = Command::new(binary);
        command
            .arg("dev")
            .arg("--port")
            .arg(port.to_string())
            .arg("--data-dir")
            .arg(data_dir);
        if let Some(wal_dir) = wal_dir {
            fs::create_dir_all(wal_dir)?;
            command.arg("--wal-dir").arg(wal_dir);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| io::Error::other(format!("cannot start {}: {e}", binary.display())))?;
        let mut node = Self {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            child,
        };
        node.wait_ready().await?;
        Ok(node)
    }

    async fn wait_ready(&mut self) -> io::Result<()> {
        let request = http_request("GET", "/readyz", "text/plain", b"");
        let started = Instant::now();
        while started.elapsed() < READY_TIMEOUT {
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "narad dev exited early: {status}"
                )));
            }
            if let Ok(mut connection) = Connection::open(self.addr).await
                && let Ok(response) = connection.send(&request).await
                && response.status == 200
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(io::Error::other("narad dev did not become ready in time"))
    }

    /// The process id, for CPU accounting.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for DevNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free TCP port on loopback.
///
/// # Errors
/// When no port can be bound.
pub fn free_tcp_port() -> io::Result<u16> {
    Ok(StdTcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// `$NARAD_BIN`, else `narad` beside this binary (same target directory and
/// profile), else the workspace's `target/release/narad`.
pub fn narad_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("NARAD_BIN") {
        return PathBuf::from(path);
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("narad")));
    match beside {
        Some(path) if path.exists() => path,
        _ => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/release/narad"
        )),
    }
}

/// The load averages of `/proc/loadavg`, or `unknown`.
pub fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|text| text.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}
