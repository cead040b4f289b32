//! `narad dev` as a user runs it: the built binary on a free port and a
//! temporary data directory, spoken to over plain HTTP/1.1.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

const NARAD: &str = env!("CARGO_BIN_EXE_narad");

/// A ceiling on every wait: it turns a hang into a failure, it asserts no
/// speed.
const WAIT_MAX: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(50);

/// A running `narad dev`, killed if the test fails before stopping it.
struct Dev {
    child: Option<Child>,
    port: u16,
}

/// The root admin's password in the secured tests.
const ADMIN_PASSWORD: &str = "dev-admin-password-for-tests";

impl Dev {
    fn start(data_dir: &Path, port: u16) -> Self {
        Self::start_with(data_dir, port, &[])
    }

    /// `narad dev --secure` with the root admin's password set.
    fn start_secure(data_dir: &Path, port: u16) -> Self {
        Self::start_with(data_dir, port, &["--secure"])
    }

    fn start_with(data_dir: &Path, port: u16, extra_args: &[&str]) -> Self {
        Self::start_configured(data_dir, port, extra_args, &[], Stdio::piped())
    }

    /// `narad dev` with `env` added to its environment and its standard
    /// error going to `stderr`.
    fn start_configured(
        data_dir: &Path,
        port: u16,
        extra_args: &[&str],
        env: &[(&str, &str)],
        stderr: Stdio,
    ) -> Self {
        let child = Command::new(NARAD)
            .args(["dev", "--port", &port.to_string(), "--data-dir"])
            .arg(data_dir)
            .args(extra_args)
            .env("NARAD_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("narad dev starts");
        let dev = Self {
            child: Some(child),
            port,
        };
        dev.wait_ready();
        dev
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + WAIT_MAX;
        loop {
            if let Some((200, _)) = self.try_request("GET", "/readyz", "") {
                return;
            }
            assert!(Instant::now() < deadline, "/readyz never answered 200");
            sleep(POLL);
        }
    }

    fn try_request(&self, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
        self.try_request_as(None, method, path, body)
    }

    /// A request with HTTP Basic credentials `user` (name, password).
    fn try_request_as(
        &self,
        user: Option<(&str, &str)>,
        method: &str,
        path: &str,
        body: &str,
    ) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).ok()?;
        stream.set_read_timeout(Some(WAIT_MAX)).ok()?;
        let authorization = user.map_or_else(String::new, |(name, password)| {
            let encoded = BASE64.encode(format!("{name}:{password}"));
            format!("Authorization: Basic {encoded}\r\n")
        });
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
             {authorization}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        let status = answer.split(' ').nth(1)?.parse().ok()?;
        let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
        Some((status, body))
    }

    fn request(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        self.try_request(method, path, body)
            .unwrap_or_else(|| panic!("{method} {path}: no HTTP answer"))
    }

    /// Sends SIGTERM and waits for the exit.
    fn terminate(mut self) -> Output {
        let child = self.child.take().expect("running");
        let signalled = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(signalled.success());
        child.wait_with_output().expect("narad dev exits")
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

fn high_watermarks(dev: &Dev, topic: &str) -> u64 {
    let (status, body) = dev.request("GET", &format!("/v1/topics/{topic}"), "");
    assert_eq!(status, 200, "{body}");
    let described: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    described["partition_stats"]
        .as_array()
        .expect("partition_stats")
        .iter()
        .map(|stats| stats["high_watermark"].as_u64().unwrap_or(0))
        .sum()
}

/// Waits until the partition logs of `topic` hold `records` in all.
fn wait_for_records(dev: &Dev, topic: &str, records: u64) {
    let deadline = Instant::now() + WAIT_MAX;
    while high_watermarks(dev, topic) < records {
        assert!(Instant::now() < deadline, "records never reached the logs");
        sleep(POLL);
    }
}

#[test]
fn dev_accepts_produces_that_reach_the_partition_logs() {
    let data = tempfile::tempdir().expect("temp dir");
    let dev = Dev::start(data.path(), free_port());
    let (status, body) = dev.request("POST", "/v1/topics", r#"{"name":"events"}"#);
    assert_eq!(status, 201, "{body}");
    let (status, body) = dev.request("POST", "/v1/topics/events/produce", r#"{"n":1}"#);
    assert_eq!(status, 202, "{body}");
    let (status, body) = dev.request(
        "POST",
        "/v1/topics/events/produce/batch",
        r#"{"messages":[{"payload":{"n":2}},{"payload":{"n":3}}]}"#,
    );
    assert_eq!(status, 202, "{body}");
    wait_for_records(&dev, "events", 3);
    assert_eq!(high_watermarks(&dev, "events"), 3);
}

/// The kernel's `THP_enabled` line of a process's status: 0 once the
/// process turned transparent huge pages off for itself.
fn thp_enabled(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))
        .map(|value| value.trim().to_owned())
}

#[test]
fn dev_turns_transparent_huge_pages_off_for_itself() {
    // Kernels before 5.0 do not report the flag; there is nothing to read.
    if thp_enabled(std::process::id()).is_none() {
        return;
    }
    let data = tempfile::tempdir().expect("temp dir");
    let dev = Dev::start(data.path(), free_port());
    let pid = dev.child.as_ref().expect("running").id();
    assert_eq!(thp_enabled(pid).as_deref(), Some("0"));
}

#[test]
fn dev_keeps_transparent_huge_pages_when_told_to_allow_them() {
    // Only meaningful where this process runs with them allowed.
    if thp_enabled(std::process::id()).as_deref() != Some("1") {
        return;
    }
    let data = tempfile::tempdir().expect("temp dir");
    let dev = Dev::start_configured(
        data.path(),
        free_port(),
        &[],
        &[("NARAD_TRANSPARENT_HUGE_PAGES", "allow")],
        Stdio::piped(),
    );
    let pid = dev.child.as_ref().expect("running").id();
    assert_eq!(thp_enabled(pid).as_deref(), Some("1"));
}

#[test]
fn dev_keeps_committing_and_serving_when_its_log_cannot_be_written() {
    // Every write to /dev/full fails with ENOSPC, as a log on a full disk
    // does: each line the node logs (topic and partition opens, ...) fails.
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        println!("SKIPPED: no /dev/full here");
        return;
    };
    let data = tempfile::tempdir().expect("temp dir");
    let dev = Dev::start_configured(data.path(), free_port(), &[], &[], Stdio::from(full));
    let (status, body) = dev.request("POST", "/v1/topics", r#"{"name":"events","partitions":6}"#);
    assert_eq!(status, 201, "{body}");
    // Enough produces to reach every partition, so every commit worker
    // that opens a log logs.
    for n in 0..200 {
        let (status, body) = dev.request(
            "POST",
            "/v1/topics/events/produce",
            &format!(r#"{{"n":{n}}}"#),
        );
        assert_eq!(status, 202, "{body}");
    }
    wait_for_records(&dev, "events", 200);
    assert_eq!(high_watermarks(&dev, "events"), 200);
}

#[test]
fn dev_stops_on_sigterm_and_keeps_its_topics_and_records_across_a_restart() {
    let data = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let dev = Dev::start(data.path(), port);
    let (status, body) = dev.request("POST", "/v1/topics", r#"{"name":"kept"}"#);
    assert_eq!(status, 201, "{body}");
    let (status, body) = dev.request("POST", "/v1/topics/kept/produce", r#"{"n":1}"#);
    assert_eq!(status, 202, "{body}");
    wait_for_records(&dev, "kept", 1);
    let output = dev.terminate();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}:\n{stderr}",
        output.status
    );
    assert!(
        stderr.contains("DEVELOPMENT NODE, SECURITY OFF"),
        "{stderr}"
    );

    let dev = Dev::start(data.path(), port);
    let (status, body) = dev.request("GET", "/v1/topics/kept", "");
    assert_eq!(status, 200, "{body}");
    wait_for_records(&dev, "kept", 1);
    assert_eq!(high_watermarks(&dev, "kept"), 1);
    let (status, body) = dev.request("POST", "/v1/topics", r#"{"name":"kept"}"#);
    assert_eq!(status, 409, "{body}");
    let output = dev.terminate();
    assert!(output.status.success());
}

#[test]
fn secure_dev_answers_401_to_a_request_without_credentials() {
    let data = tempfile::tempdir().expect("temp dir");
    let dev = Dev::start_secure(data.path(), free_port());
    let (status, body) = dev.request("POST", "/v1/topics", r#"{"name":"guarded"}"#);
    assert_eq!(status, 401, "{body}");
}

#[test]
fn secure_dev_creates_a_topic_for_the_root_admin() {
    let data = tempfile::tempdir().expect("temp dir");
    let dev = Dev::start_secure(data.path(), free_port());
    let (status, body) = dev
        .try_request_as(
            Some(("admin", ADMIN_PASSWORD)),
            "POST",
            "/v1/topics",
            r#"{"name":"guarded"}"#,
        )
        .expect("an HTTP answer");
    assert_eq!(status, 201, "{body}");
}

#[test]
fn secure_dev_says_in_its_banner_that_security_is_on() {
    let data = tempfile::tempdir().expect("temp dir");
    let dev = Dev::start_secure(data.path(), free_port());
    let output = dev.terminate();
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("DEVELOPMENT NODE, SECURITY ON"), "{stderr}");
}

#[test]
fn dev_with_json_logs_writes_one_object_a_line_and_an_access_line_a_request() {
    let data = tempfile::tempdir().expect("temp dir");
    let dev = Dev::start_with(
        data.path(),
        free_port(),
        &["--secure", "--log-format", "json", "--access-log"],
    );
    let admin = Some(("admin", ADMIN_PASSWORD));
    let (status, body) = dev
        .try_request_as(admin, "POST", "/v1/topics", r#"{"name":"logged"}"#)
        .expect("an HTTP answer");
    assert_eq!(status, 201, "{body}");
    let (status, body) = dev
        .try_request_as(admin, "GET", "/v1/openapi.json", "")
        .expect("an HTTP answer");
    assert_eq!(status, 200);
    let document: serde_json::Value = serde_json::from_str(&body).expect("the OpenAPI document");
    assert_eq!(document["openapi"], "3.1.0");
    let output = dev.terminate();
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}\n{stderr}"));
            assert!(value.is_object(), "{line}");
            value
        })
        .collect();
    assert!(
        lines.iter().any(|line| line["message"]
            .as_str()
            .is_some_and(|m| m.contains("DEVELOPMENT NODE, SECURITY ON"))),
        "{stderr}"
    );
    let access = lines
        .iter()
        .find(|line| line["target"] == "narad::access" && line["route"] == "/v1/topics")
        .unwrap_or_else(|| panic!("no access line for POST /v1/topics\n{stderr}"));
    assert_eq!(access["method"], "POST", "{access}");
    assert_eq!(access["status"], 201, "{access}");
    assert_eq!(access["identity"], "admin", "{access}");
    assert_eq!(access["client"], "127.0.0.1", "{access}");
    assert_eq!(access["bytes_in"], r#"{"name":"logged"}"#.len(), "{access}");
    assert!(
        access["bytes_out"].as_u64().is_some_and(|n| n > 0),
        "{access}"
    );
    assert!(access["duration_ms"].is_number(), "{access}");
}

#[test]
fn dev_on_a_port_in_use_fails_before_its_banner() {
    let data = tempfile::tempdir().expect("temp dir");
    let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a port to hold");
    let port = taken.local_addr().expect("its address").port();
    let output = Command::new(NARAD)
        .args(["dev", "--port", &port.to_string(), "--data-dir"])
        .arg(data.path())
        .output()
        .expect("narad runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(!stderr.contains("DEVELOPMENT NODE"), "{stderr}");
}

/// The WAL segments (`*.wal`) in `dir`, none when it does not exist.
fn wal_segments(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().ends_with(".wal"))
            .count()
    })
}

#[test]
fn dev_with_a_wal_dir_keeps_its_ingress_wal_there() {
    let data = tempfile::tempdir().expect("temp dir");
    let wal = tempfile::tempdir().expect("temp dir");
    let wal_root = wal.path().to_str().expect("UTF-8 path");
    let dev = Dev::start_with(data.path(), free_port(), &["--wal-dir", wal_root]);
    let (status, body) = dev.request("POST", "/v1/topics", r#"{"name":"apart"}"#);
    assert_eq!(status, 201, "{body}");
    let (status, body) = dev.request("POST", "/v1/topics/apart/produce", r#"{"n":1}"#);
    assert_eq!(status, 202, "{body}");
    wait_for_records(&dev, "apart", 1);
    assert!(wal_segments(&wal.path().join("ingress").join("produce")) > 0);
    assert!(!data.path().join("ingress").exists());
    assert!(dev.terminate().status.success());
}

#[test]
fn dev_refuses_a_wal_dir_while_its_data_dir_holds_a_wal() {
    let data = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let dev = Dev::start(data.path(), port);
    assert!(dev.terminate().status.success());
    let left = data.path().join("ingress").join("produce");
    assert!(wal_segments(&left) > 0, "the first start made a WAL");

    let wal = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(NARAD)
        .args(["dev", "--port", &port.to_string(), "--data-dir"])
        .arg(data.path())
        .arg("--wal-dir")
        .arg(wal.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("narad dev starts");
    let deadline = Instant::now() + WAIT_MAX;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("narad dev did not exit");
        }
        sleep(POLL);
    }
    let output = child.wait_with_output().expect("narad dev exits");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "storage.wal_dir is {}, but an ingress WAL is still in {}",
            wal.path().display(),
            left.display()
        )),
        "{stderr}"
    );
    assert!(
        wal_segments(&left) > 0,
        "the refused start left the WAL alone"
    );
}
