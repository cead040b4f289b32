//! A `narad dev --secure` shared by the tests of one test binary, and the
//! `narad` client verbs run against it as a user runs them.
//!
//! The server runs under a small shell that waits on a pipe from the test
//! process: when the test binary exits, however it exits, the pipe closes
//! and the shell stops the server and removes its data directory.

#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread::sleep;
use std::time::{Duration, Instant};

pub const NARAD: &str = env!("CARGO_BIN_EXE_narad");
/// The root admin's password on the test server.
pub const ADMIN_PASSWORD: &str = "cli-test-admin-password";
/// A ceiling on waiting for the server: turns a hang into a failure.
const READY_MAX: Duration = Duration::from_secs(60);

/// A running test server.
#[derive(Debug)]
pub struct Server {
    pub url: String,
    pub port: u16,
    /// An empty config directory, so no user's contexts leak in.
    pub config_dir: PathBuf,
    /// The shell that owns the server; its stdin is the pipe it waits on.
    guard: Mutex<Child>,
}

/// The server every test in this binary shares, started on first use.
pub fn shared() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(Server::start)
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// A directory under the target's temporary directory that outlives the
/// test (the guard shell removes the server's; others are small).
pub fn temp_dir() -> PathBuf {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temp dir")
        .keep()
}

impl Server {
    fn start() -> Self {
        let dir = temp_dir();
        let port = free_port();
        let config_dir = dir.join("config");
        std::fs::create_dir_all(&config_dir).expect("config dir");
        let script = r#"
            "$NARAD" dev --secure --port "$PORT" --data-dir "$DIR/data" 2>"$DIR/narad.log" &
            server=$!
            read -r _
            kill "$server"
            wait "$server"
            rm -rf "$DIR/data"
        "#;
        let guard = Command::new("sh")
            .args(["-c", script])
            .env("NARAD", NARAD)
            .env("PORT", port.to_string())
            .env("DIR", &dir)
            .env("NARAD_ADMIN_PASSWORD", ADMIN_PASSWORD)
            // The remote tests send passwords over loopback.
            .env("NARAD_REMOTES_API_HOP_ENCRYPTED", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("narad dev starts");
        let server = Self {
            url: format!("http://127.0.0.1:{port}"),
            port,
            config_dir,
            guard: Mutex::new(guard),
        };
        server.wait_ready(&dir);
        server
    }

    fn wait_ready(&self, dir: &Path) {
        let deadline = Instant::now() + READY_MAX;
        while Instant::now() < deadline {
            if self.readyz() == Some(200) {
                return;
            }
            sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(dir.join("narad.log")).unwrap_or_default();
        panic!("narad dev never became ready:\n{log}");
    }

    fn readyz(&self) -> Option<u16> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        stream
            .write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        answer.split(' ').nth(1)?.parse().ok()
    }

    /// `narad` with this server, the root admin and an empty config
    /// directory in its environment, and nothing on its standard input.
    pub fn narad(&self) -> Command {
        let mut command = self.narad_inheriting();
        command.stdin(Stdio::null());
        command
    }

    /// [`Self::narad`] with standard input left as the caller sets it up
    /// (a terminal session).
    pub fn narad_inheriting(&self) -> Command {
        let mut command = Command::new(NARAD);
        command
            .env("NARAD_ADDR", &self.url)
            .env("NARAD_USER", "admin")
            .env("NARAD_PASS", ADMIN_PASSWORD)
            .env("XDG_CONFIG_HOME", &self.config_dir);
        command
    }

    /// Runs `narad ARGS` as the root admin.
    pub fn run(&self, args: &[&str]) -> Output {
        self.narad().args(args).output().expect("narad runs")
    }

    /// Waits until `topic`'s partition logs hold `count` messages: a `202`
    /// means durable in the ingress, and the partition log (what replays
    /// read) follows within moments.
    pub fn wait_for_messages(&self, topic: &str, count: u64) {
        let deadline = Instant::now() + READY_MAX;
        loop {
            let output = self.run(&["topic", "info", topic, "--json"]);
            let held: u64 = serde_json::from_slice::<serde_json::Value>(&output.stdout)
                .ok()
                .and_then(|info| info["partition_stats"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .map(|stats| {
                    let number = |name: &str| stats[name].as_u64().unwrap_or(0);
                    number("high_watermark").saturating_sub(number("oldest_offset"))
                })
                .sum();
            if held >= count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{topic} never held {count} messages"
            );
            sleep(Duration::from_millis(50));
        }
    }

    /// Runs `narad ARGS` with `input` on its standard input.
    pub fn run_with_input(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .narad()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("narad runs");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("narad exits")
    }
}

/// Stdout of `output` after checking it exited with `code`.
#[track_caller]
pub fn exits(output: &Output, code: i32) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(code),
        "exit status\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

/// Stdout of a run that must succeed.
#[track_caller]
pub fn ok(output: &Output) -> String {
    exits(output, 0)
}

/// Stderr of a run that must exit with `code`.
#[track_caller]
pub fn fails(output: &Output, code: i32) -> String {
    exits(output, code);
    String::from_utf8_lossy(&output.stderr).into_owned()
}
