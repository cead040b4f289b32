//! A `narad dev` process for tests that kill and restart it, and a plain
//! HTTP/1.1 client that tells "no answer" apart from an answer.
//!
//! The client opens one connection per request on purpose: a request cut
//! off by a SIGKILL must come back as `None`, never as an error status, so
//! crash tests can count exactly which requests were answered.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::cluster::narad_binary;

/// How long a started node may take to answer `/readyz` with 200, and how
/// long one request may wait for its answer. A ceiling that turns a hang
/// into a failure; it asserts no speed.
pub const DEV_WAIT_MAX: Duration = Duration::from_secs(30);
const READY_POLL: Duration = Duration::from_millis(50);
/// The `narad dev` flag that turns security on.
pub const SECURE_FLAG: &str = "--secure";

/// A free TCP port on loopback.
///
/// # Panics
/// If no port can be bound.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// An HTTP answer: status and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body, decoded as UTF-8 (lossy).
    pub body: String,
}

/// One request to a node on loopback.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// `GET`, `POST`, ...
    pub method: &'a str,
    /// Path and query.
    pub path: &'a str,
    /// The `Content-Type` header.
    pub content_type: &'a str,
    /// Extra header lines, each `Name: value`.
    pub headers: &'a [&'a str],
    /// The body.
    pub body: &'a [u8],
}

impl<'a> Request<'a> {
    /// A `GET` of `path`.
    pub fn get(path: &'a str) -> Self {
        Self {
            method: "GET",
            path,
            content_type: "application/json",
            headers: &[],
            body: b"",
        }
    }

    /// A `POST` of `body` as `content_type` to `path`.
    pub fn post(path: &'a str, content_type: &'a str, body: &'a [u8]) -> Self {
        Self {
            method: "POST",
            path,
            content_type,
            headers: &[],
            body,
        }
    }

    /// The same request with extra header lines.
    pub fn with_headers(self, headers: &'a [&'a str]) -> Self {
        Self { headers, ..self }
    }

    /// Sends the request on a fresh connection to `port`; `None` when the
    /// node did not answer (down, or killed mid-request).
    pub fn send(&self, port: u16) -> Option<Answer> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()?;
        stream.set_read_timeout(Some(DEV_WAIT_MAX)).ok()?;
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: localhost\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
             Connection: close\r\n",
            self.method,
            self.path,
            self.content_type,
            self.body.len()
        );
        for header in self.headers {
            head.push_str(header);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).ok()?;
        stream.write_all(self.body).ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).ok()?;
        let text = String::from_utf8_lossy(&raw);
        let status = text.split(' ').nth(1)?.parse().ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        let body = if chunked {
            dechunk(body)?
        } else {
            body.to_owned()
        };
        Some(Answer { status, body })
    }
}

/// The chunks of a body sent with `Transfer-Encoding: chunked`, joined;
/// `None` when it is cut short (the node died while answering).
fn dechunk(body: &str) -> Option<String> {
    let mut rest = body;
    let mut joined = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.trim(), 16).ok()?;
        if size == 0 {
            return Some(joined);
        }
        joined.push_str(after.get(..size)?);
        rest = after.get(size + 2..)?;
    }
}

/// `narad dev` on a fixed port and data directory, restartable.
#[derive(Debug)]
pub struct DevProcess {
    child: Option<Child>,
    /// The HTTP port.
    pub port: u16,
    /// The data directory.
    pub data_dir: PathBuf,
    log: PathBuf,
    /// The root admin's password when the node runs with security on.
    admin_password: Option<String>,
    /// More environment for every start (settings `narad dev` reads there).
    env: Vec<(String, String)>,
}

impl DevProcess {
    /// A node (not started) keeping its data and log under `dir`.
    pub fn new(dir: &Path) -> Self {
        Self {
            child: None,
            port: free_port(),
            data_dir: dir.join("data"),
            log: dir.join("narad.log"),
            admin_password: None,
            env: Vec::new(),
        }
    }

    /// The same node, started with `key=value` in its environment.
    #[must_use]
    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// A node (not started) with security on: Basic auth on the API, the
    /// root admin `admin` seeded with `password`.
    pub fn secured(dir: &Path, password: &str) -> Self {
        let mut node = Self::new(dir);
        node.admin_password = Some(password.to_owned());
        node
    }

    /// Starts the process and waits until `/readyz` answers 200.
    ///
    /// # Panics
    /// If it is running already, does not start, or never becomes ready.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let mut command = Command::new(narad_binary());
        command
            .args(["dev", "--port", &self.port.to_string(), "--data-dir"])
            .arg(&self.data_dir)
            .envs(self.env.iter().map(|(key, value)| (key, value)));
        if let Some(password) = &self.admin_password {
            command
                .arg(SECURE_FLAG)
                .env("NARAD_ADMIN_PASSWORD", password);
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("narad dev starts");
        self.child = Some(child);
        let deadline = Instant::now() + DEV_WAIT_MAX;
        while !matches!(Request::get("/readyz").send(self.port), Some(a) if a.status == 200) {
            assert!(
                Instant::now() < deadline,
                "/readyz never 200\n{}",
                self.log()
            );
            sleep(READY_POLL);
        }
    }

    /// Kills the process with SIGKILL and reaps it.
    ///
    /// # Panics
    /// If it is not running.
    pub fn sigkill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }

    /// Stops the process with SIGTERM and waits for a clean exit.
    ///
    /// # Panics
    /// If it is not running or exits with a failure.
    pub fn sigterm(&mut self) {
        let mut child = self.child.take().expect("running");
        let signalled = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(signalled.success());
        let status = child.wait().expect("narad dev exits");
        assert!(status.success(), "exit {status:?}\n{}", self.log());
    }

    /// The last few KiB of the process's log.
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(4_000);
        text.get(start..).unwrap_or_default().to_owned()
    }
}

impl Drop for DevProcess {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::dechunk;

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(
            dechunk("5\r\nhello\r\n3\r\n!!!\r\n0\r\n\r\n").as_deref(),
            Some("hello!!!")
        );
    }

    #[test]
    fn a_chunked_body_cut_short_is_no_answer() {
        assert_eq!(dechunk("5\r\nhel"), None);
    }
}
