//! Two real clusters on loopback (spec §4, "Remote children"): a source
//! `narad dev --secure` with a parent of 8 partitions and a remote child
//! with 2 lanes, and a target `narad dev --secure` behind an HTTPS front
//! with a certificate made here. 20,000 keyed and keyless records produced
//! to the parent arrive in the target exactly once with each key's order
//! kept, also when the target is SIGKILLed mid-stream and restarted: the
//! link shows `unavailable` while it is down and recovers after.

use std::collections::{BTreeMap, BTreeSet};
use std::thread::sleep;
use std::time::{Duration, Instant};

use narad_tests::cluster::basic_authorization;
use narad_tests::dev::{Answer, DevProcess, Request};
use narad_tests::tls_front::TlsFront;
use serde_json::{Value, json};

const ADMIN_PASSWORD: &str = "source-admin-password-0123456789";
const TARGET_PASSWORD: &str = "target-admin-password-0123456789";
const REPLICATOR_PASSWORD: &str = "replicator-password-0123456789ab";
const SECRET: &str = "0123456789abcdef0123456789abcdef";
const RECORDS: usize = 20_000;
const KEYS: usize = 50;
/// A ceiling that turns a hang into a failure, not a timing assertion.
const WAIT_MAX: Duration = Duration::from_secs(180);

struct Api {
    port: u16,
    authorization: String,
}

impl Api {
    fn new(port: u16, user: &str, password: &str) -> Self {
        Self {
            port,
            authorization: format!("Authorization: {}", basic_authorization((user, password))),
        }
    }

    fn call(&self, method: &str, path: &str, body: &Value) -> Answer {
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let headers = [self.authorization.as_str()];
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

    fn ok(&self, method: &str, path: &str, body: &Value, status: u16) -> Value {
        let answer = self.call(method, path, body);
        assert_eq!(answer.status, status, "{method} {path}: {}", answer.body);
        serde_json::from_str(&answer.body).unwrap_or(Value::Null)
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_MAX;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        sleep(Duration::from_millis(200));
    }
}

/// Record `i`: keyed by one of 50 keys for even `i`, keyless for odd.
fn message(i: usize) -> Value {
    let key = (i % 2 == 0).then(|| format!("key-{}", (i / 2) % KEYS));
    let payload = json!({"id": i, "key": key});
    match key {
        Some(key) => json!({"key": key, "payload": payload}),
        None => json!({"payload": payload}),
    }
}

fn produce(source: &Api, range: std::ops::Range<usize>) {
    let ids: Vec<usize> = range.collect();
    for chunk in ids.chunks(500) {
        let messages: Vec<Value> = chunk.iter().map(|&i| message(i)).collect();
        source.ok(
            "POST",
            "/v1/topics/orders/produce/batch",
            &json!({ "messages": messages }),
            202,
        );
    }
}

fn stored(target: &Api) -> u64 {
    let answer = target.call("GET", "/v1/topics/orders-copy", &Value::Null);
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

/// The remote child's state in the source's children listing.
fn link_state(source: &Api) -> String {
    let listing = source.ok("GET", "/v1/topics/orders/children", &Value::Null, 200);
    listing["children"][0]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Every record of the target topic, each once (leases are taken and left
/// to lapse), with its partition and offset.
fn consume_all(target: &Api) -> Vec<(u64, u64, Value)> {
    let mut seen = Vec::new();
    let mut empty_polls = 0;
    while empty_polls < 3 {
        let answer = target.call(
            "GET",
            "/v1/topics/orders-copy/consume?max=100&wait=1s",
            &Value::Null,
        );
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

#[test]
fn a_remote_child_ships_every_record_once_in_key_order_through_a_target_restart() {
    let dir = tempfile::tempdir().expect("temporary directory");
    for side in ["target", "source"] {
        std::fs::create_dir_all(dir.path().join(side)).expect("directory");
    }
    let mut target = DevProcess::secured(&dir.path().join("target"), TARGET_PASSWORD)
        .with_env("NARAD_CLUSTER_SECRET", SECRET);
    target.start();
    let front = TlsFront::start(target.port);
    let mut source = DevProcess::secured(&dir.path().join("source"), ADMIN_PASSWORD)
        .with_env("NARAD_CLUSTER_SECRET", SECRET)
        .with_env("NARAD_REMOTES_ALLOW_LOOPBACK", "true")
        .with_env("NARAD_REMOTES_ALLOWED_PORTS", &front.port.to_string())
        // The password reaches the source over loopback.
        .with_env("NARAD_REMOTES_API_HOP_ENCRYPTED", "true");
    source.start();
    let target_admin = Api::new(target.port, "admin", TARGET_PASSWORD);
    let source_admin = Api::new(source.port, "admin", ADMIN_PASSWORD);

    // The target: a topic and a replicator allowed to produce to it.
    target_admin.ok(
        "POST",
        "/v1/topics",
        &json!({"name": "orders-copy", "partitions": 4}),
        201,
    );
    target_admin.ok(
        "POST",
        "/v1/users",
        &json!({"username": "replicator", "password": REPLICATOR_PASSWORD,
                "grants": [{"action": "produce", "topics": ["orders-copy"]}]}),
        201,
    );

    // The source: the remote, a parent with 8 partitions, the remote child.
    source_admin.ok(
        "POST",
        "/v1/remotes",
        &json!({"name": "dr", "url": front.url(), "username": "replicator",
                "password": REPLICATOR_PASSWORD, "ca_pem": front.ca_pem}),
        201,
    );
    source_admin.ok(
        "POST",
        "/v1/topics",
        &json!({"name": "orders", "partitions": 8}),
        201,
    );
    source_admin.ok(
        "POST",
        "/v1/topics/orders/children",
        &json!({"child": "orders-dr", "remote": "dr", "remote_topic": "orders-copy",
                "lanes": 2}),
        201,
    );

    // Half the records with the target up.
    produce(&source_admin, 0..RECORDS / 2);
    wait_until("the first half in the target", || {
        stored(&target_admin) >= (RECORDS / 2) as u64
    });
    assert_eq!(link_state(&source_admin), "running");

    // The other half while the target is killed and restarted.
    let producer = {
        let port = source.port;
        std::thread::spawn(move || {
            let api = Api::new(port, "admin", ADMIN_PASSWORD);
            produce(&api, RECORDS / 2..RECORDS);
        })
    };
    sleep(Duration::from_millis(300));
    target.sigkill();
    wait_until("the link to show the target unavailable", || {
        link_state(&source_admin) == "unavailable"
    });
    producer.join().expect("producer");
    target.start();
    wait_until("every record in the target", || {
        stored(&target_admin) >= RECORDS as u64
    });
    wait_until("the link running again", || {
        link_state(&source_admin) == "running"
    });

    // Exactly once, each key's records in produce order.
    let records = consume_all(&target_admin);
    let mut ids = BTreeSet::new();
    let mut by_key: BTreeMap<String, Vec<(u64, u64, u64)>> = BTreeMap::new();
    for (partition, offset, payload) in &records {
        let id = payload["id"].as_u64().expect("id");
        assert!(ids.insert(id), "record {id} stored twice");
        if let Some(key) = payload["key"].as_str() {
            by_key
                .entry(key.to_owned())
                .or_default()
                .push((*partition, *offset, id));
        }
    }
    assert_eq!(ids.len(), RECORDS, "records missing in the target");
    assert_eq!(stored(&target_admin), RECORDS as u64, "stored twice");
    assert_eq!(by_key.len(), KEYS);
    for (key, mut copies) in by_key {
        let partitions: BTreeSet<u64> = copies.iter().map(|(p, _, _)| *p).collect();
        assert_eq!(partitions.len(), 1, "{key} spread over partitions");
        copies.sort_by_key(|(_, offset, _)| *offset);
        let in_order = copies.windows(2).all(|pair| pair[0].2 < pair[1].2);
        assert!(in_order, "{key}'s records out of order");
    }
}
