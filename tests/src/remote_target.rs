//! The target side of remote-children tests: a `narad dev --secure` behind
//! an HTTPS front with a certificate made at start ([`TlsFront`]), one
//! topic, and a `replicator` user allowed to produce to it. Also a
//! blocking JSON client ([`Api`]) for either side of such a test.

use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cluster::basic_authorization;
use crate::dev::{Answer, DevProcess, Request};
use crate::tls_front::TlsFront;

/// The target's admin password.
pub const TARGET_PASSWORD: &str = "target-admin-password-0123456789";
/// The replicator's password (24–72 bytes, as a remote's must be).
pub const REPLICATOR_PASSWORD: &str = "replicator-password-0123456789ab";
/// The target's cluster secret.
pub const TARGET_SECRET: &str = "0123456789abcdef0123456789abcdef";
/// A ceiling that turns a hang into a failure, not a timing assertion.
pub const REMOTE_WAIT_MAX: Duration = Duration::from_secs(180);

/// A node's HTTP API as one user, over blocking loopback requests.
#[derive(Debug)]
pub struct Api {
    /// The node's HTTP port.
    pub port: u16,
    authorization: String,
}

impl Api {
    /// The API on `port` as `user`.
    pub fn new(port: u16, user: &str, password: &str) -> Self {
        Self {
            port,
            authorization: basic_authorization((user, password)),
        }
    }

    /// Sends `body` (none when `null`) as JSON.
    ///
    /// # Panics
    /// When the node does not answer.
    pub fn call(&self, method: &str, path: &str, body: &Value) -> Answer {
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let headers = [self.authorization.as_str(), "X-Narad-Client: narad-tests"];
        let request = Request {
            method,
            path,
            content_type: "application/json",
            headers: &headers,
            body: &body,
        };
        request
            .send(self.port)
            .unwrap_or_else(|| panic!("{method} {path}: no answer"))
    }

    /// As [`Api::call`], asserting `status`; the answer's JSON (`null` for
    /// none).
    ///
    /// # Panics
    /// On another status.
    pub fn ok(&self, method: &str, path: &str, body: &Value, status: u16) -> Value {
        let answer = self.call(method, path, body);
        assert_eq!(answer.status, status, "{method} {path}: {}", answer.body);
        serde_json::from_str(&answer.body).unwrap_or(Value::Null)
    }

    /// Records stored in `topic`: the sum of its partitions' high
    /// watermarks (0 while it cannot be read).
    pub fn stored(&self, topic: &str) -> u64 {
        let answer = self.call("GET", &format!("/v1/topics/{topic}"), &Value::Null);
        let Ok(body) = serde_json::from_str::<Value>(&answer.body) else {
            return 0;
        };
        body["partition_stats"].as_array().map_or(0, |stats| {
            stats
                .iter()
                .filter_map(|s| s["high_watermark"].as_u64())
                .sum()
        })
    }

    /// Every record of `topic`, each once (leases are taken and left to
    /// lapse, so the topic's in-flight limit must hold them all), with its
    /// partition and offset.
    ///
    /// # Panics
    /// On an answer other than `200` or `204`.
    pub fn consume_all(&self, topic: &str) -> Vec<(u64, u64, Value)> {
        let path = format!("/v1/topics/{topic}/consume?max=100&wait=1s");
        let mut seen = Vec::new();
        let mut empty_polls = 0;
        while empty_polls < 3 {
            let answer = self.call("GET", &path, &Value::Null);
            if answer.status == 204 {
                empty_polls += 1;
                continue;
            }
            assert_eq!(answer.status, 200, "{}", answer.body);
            let body: Value = serde_json::from_str(&answer.body).expect("JSON");
            for message in body["messages"].as_array().expect("messages") {
                seen.push((
                    message["partition"].as_u64().expect("partition"),
                    message["offset"].as_u64().expect("offset"),
                    message["payload"].clone(),
                ));
            }
        }
        seen
    }
}

/// Polls `done` every 200 ms.
///
/// # Panics
/// After [`REMOTE_WAIT_MAX`], naming `what`.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    wait_for(what, || {
        if done() {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    });
}

/// Polls `probe` every 200 ms until it answers `Ok`; its `Err` says what
/// it saw instead.
///
/// # Panics
/// After [`REMOTE_WAIT_MAX`], naming `what` and the last thing seen.
pub fn wait_for(what: &str, mut probe: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + REMOTE_WAIT_MAX;
    loop {
        let seen = match probe() {
            Ok(()) => return,
            Err(seen) => seen,
        };
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last seen: {seen}"
        );
        sleep(Duration::from_millis(200));
    }
}

/// A running target cluster.
#[derive(Debug)]
pub struct Target {
    /// Its one node.
    pub dev: DevProcess,
    /// The HTTPS front the source reaches it through.
    pub front: TlsFront,
    /// Its admin.
    pub admin: Api,
}

impl Target {
    /// Starts the target in `dir` with topic `topic` of `partitions`
    /// partitions whose in-flight limit holds `in_flight` leases, and the
    /// `replicator` user allowed to produce to it.
    ///
    /// # Panics
    /// When a step fails.
    pub fn start(dir: &Path, topic: &str, partitions: u32, in_flight: usize) -> Self {
        let mut dev = DevProcess::secured(dir, TARGET_PASSWORD)
            .with_env("NARAD_CLUSTER_SECRET", TARGET_SECRET);
        dev.start();
        let front = TlsFront::start(dev.port);
        let admin = Api::new(dev.port, "admin", TARGET_PASSWORD);
        // The root admin is seeded once the control plane first leads;
        // until then a login fails, and failed logins are throttled, so
        // wait for the log line rather than trying.
        wait_until("the target's root admin", || {
            dev.log().contains("root admin created")
        });
        admin.ok(
            "POST",
            "/v1/topics",
            &json!({"name": topic, "partitions": partitions,
                    "max_in_flight_per_partition": in_flight}),
            201,
        );
        admin.ok(
            "POST",
            "/v1/users",
            &json!({"username": "replicator", "password": REPLICATOR_PASSWORD,
                    "grants": [{"action": "produce", "patterns": [topic]}]}),
            201,
        );
        Self { dev, front, admin }
    }

    /// The body of `POST /v1/remotes` naming this target as `name`.
    pub fn remote_body(&self, name: &str) -> Value {
        json!({"name": name, "url": self.front.url(), "username": "replicator",
               "password": REPLICATOR_PASSWORD, "ca_pem": self.front.ca_pem})
    }
}
