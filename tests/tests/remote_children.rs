//! Two real clusters on loopback (spec §4, "Remote children"): a source
//! `narad dev --secure` with a parent of 8 partitions and a remote child
//! with 2 lanes, and a target `narad dev --secure` behind an HTTPS front
//! with a certificate made here. 20,000 keyed and keyless records produced
//! to the parent arrive in the target exactly once with each key's order
//! kept, also when the target is SIGKILLed mid-stream and restarted: the
//! link shows `unavailable` while it is down and recovers after.

use std::collections::{BTreeMap, BTreeSet};
use std::thread::sleep;
use std::time::Duration;

use narad_tests::dev::DevProcess;
use narad_tests::metrics_list::assert_served_when;
use narad_tests::remote_target::{Api, TARGET_SECRET, Target, wait_for, wait_until};
use serde_json::{Value, json};

const ADMIN_PASSWORD: &str = "source-admin-password-0123456789";
const RECORDS: usize = 20_000;
const KEYS: usize = 50;

/// Record `i`: keyed by one of 50 keys for even `i`, keyless for odd.
fn message(i: usize) -> Value {
    let key = i
        .is_multiple_of(2)
        .then(|| format!("key-{}", (i / 2) % KEYS));
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

/// The remote child's state in the source's children listing.
fn link_state(source: &Api) -> String {
    let listing = source.ok("GET", "/v1/topics/orders/children", &Value::Null, 200);
    listing["children"][0]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_remote_child_ships_every_record_once_in_key_order_through_a_target_restart() {
    let dir = tempfile::tempdir().expect("temporary directory");
    for side in ["target", "source"] {
        std::fs::create_dir_all(dir.path().join(side)).expect("directory");
    }
    // The target: a topic and a replicator allowed to produce to it. Every
    // record is leased once, none acked, while the test reads them.
    let mut target = Target::start(&dir.path().join("target"), "orders-copy", 4, RECORDS);
    let front_port = target.front.port.to_string();
    let mut source = DevProcess::secured(&dir.path().join("source"), ADMIN_PASSWORD)
        .with_env("NARAD_CLUSTER_SECRET", TARGET_SECRET)
        .with_env("NARAD_REMOTES_ALLOW_LOOPBACK", "true")
        .with_env("NARAD_REMOTES_ALLOWED_PORTS", &front_port)
        // The password reaches the source over loopback.
        .with_env("NARAD_REMOTES_API_HOP_ENCRYPTED", "true");
    source.start();
    let target_admin = Api::new(
        target.dev.port,
        "admin",
        narad_tests::remote_target::TARGET_PASSWORD,
    );
    let source_admin = Api::new(source.port, "admin", ADMIN_PASSWORD);
    wait_until("the source's root admin", || {
        source.log().contains("root admin created")
    });

    // The source: the remote, a parent with 8 partitions, the remote child.
    source_admin.ok("POST", "/v1/remotes", &target.remote_body("dr"), 201);
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
        target_admin.stored("orders-copy") >= (RECORDS / 2) as u64
    });
    assert_eq!(link_state(&source_admin), "running");

    // A quarter while the target is killed, a quarter after. A link with
    // nothing to ship does not probe its target, so the last quarter is
    // what makes the outage visible: on a fast machine the third quarter
    // can be shipped whole before the kill lands. The producer is joined
    // first so each key's records keep their produce order.
    let producer = {
        let port = source.port;
        std::thread::spawn(move || {
            let api = Api::new(port, "admin", ADMIN_PASSWORD);
            produce(&api, RECORDS / 2..RECORDS * 3 / 4);
        })
    };
    sleep(Duration::from_millis(300));
    target.dev.sigkill();
    producer.join().expect("producer");
    produce(&source_admin, RECORDS * 3 / 4..RECORDS);
    wait_for(
        "the link to show the target unavailable",
        || match link_state(&source_admin) {
            state if state == "unavailable" => Ok(()),
            state => Err(format!("the link is {state}")),
        },
    );
    target.dev.start();
    wait_until("every record in the target", || {
        target_admin.stored("orders-copy") >= RECORDS as u64
    });
    wait_for("the link running again", || {
        match link_state(&source_admin) {
            state if state == "running" => Ok(()),
            state => Err(format!("the link is {state}")),
        }
    });

    // Exactly once, each key's records in produce order.
    let records = target_admin.consume_all("orders-copy");
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
    assert_eq!(
        target_admin.stored("orders-copy"),
        RECORDS as u64,
        "stored twice"
    );
    assert_eq!(by_key.len(), KEYS);
    for (key, mut copies) in by_key {
        let partitions: BTreeSet<u64> = copies.iter().map(|(p, _, _)| *p).collect();
        assert_eq!(partitions.len(), 1, "{key} spread over partitions");
        copies.sort_by_key(|(_, offset, _)| *offset);
        let in_order = copies.windows(2).all(|pair| pair[0].2 < pair[1].2);
        assert!(in_order, "{key}'s records out of order");
    }

    // The source serves the remote children's series.
    let metrics = source_admin.call("GET", "/metrics", &Value::Null);
    assert_eq!(metrics.status, 200);
    assert_served_when(
        &metrics.body,
        "remote-children",
        "a node shipping to a remote",
    );
}
