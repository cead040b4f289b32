//! A remote child of a two-node source cluster (spec §4 "Remote children",
//! §1.4 resume): three control nodes and two data nodes own the parent's
//! partitions between them, and each ships its own to a target
//! `narad dev --secure` behind an HTTPS front. Every record arrives once;
//! a resume sent to node 2 checks the target from both members over node
//! RPC (opcode 34) and lists both, each having opened the sealed
//! credential with its own secret.

use std::collections::BTreeSet;

use narad_tests::cluster::{ADMIN, ADMIN_PASSWORD, ControlCluster, DataProcess};
use narad_tests::remote_target::{Target, wait_until};
use serde_json::{Value, json};

const RECORDS: usize = 2_000;

/// `method path` on `node` as the admin; the status and the JSON answer.
async fn call(node: &DataProcess, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let (status, text) = node
        .request(Some(ADMIN), method, path, &body)
        .await
        .unwrap_or_else(|| panic!("{method} {path}: no answer from node {}", node.id));
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn ok(node: &DataProcess, method: &str, path: &str, body: &Value, status: u16) -> Value {
    let (got, answer) = call(node, method, path, body).await;
    assert_eq!(got, status, "{method} {path} on node {}: {answer}", node.id);
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_source_ships_from_both_members_and_a_resume_checks_from_each() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let target =
        tokio::task::block_in_place(|| Target::start(dir.path(), "orders-copy", 4, RECORDS));
    let control = ControlCluster::start_with_env(
        3,
        &["--security-enabled", "true"],
        &[("NARAD_ADMIN_PASSWORD", ADMIN_PASSWORD)],
    )
    .await;
    control.wait_for_leader().await;
    let port = target.front.port.to_string();
    let flags = [
        "--remotes-allow-loopback",
        "true",
        "--remotes-allowed-ports",
        port.as_str(),
        // The password reaches the source over loopback.
        "--remotes-api-hop-encrypted",
        "true",
    ];
    let mut nodes = Vec::new();
    for id in [1, 2] {
        let mut node = DataProcess::new(&control, id, &flags);
        node.spawn_ready(true).await;
        nodes.push(node);
    }
    let (one, two) = (&nodes[0], &nodes[1]);
    one.wait_until("the root admin and both members", || async {
        let (status, body) = call(one, "GET", "/v1/cluster/members", &Value::Null).await;
        let alive = body["members"].as_array().map_or(0, |members| {
            members
                .iter()
                .filter(|member| member["status"] == "alive")
                .count()
        });
        (status == 200 && alive == 2).then_some(())
    })
    .await;

    ok(one, "POST", "/v1/remotes", &target.remote_body("dr"), 201).await;
    ok(
        one,
        "POST",
        "/v1/topics",
        &json!({"name": "orders", "partitions": 4}),
        201,
    )
    .await;
    let described = ok(one, "GET", "/v1/topics/orders", &Value::Null, 200).await;
    let owners: BTreeSet<String> = described["partition_stats"]
        .as_array()
        .expect("partition_stats")
        .iter()
        .filter_map(|stats| stats["owner_node"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(owners.len(), 2, "both nodes own partitions: {described}");
    let stub = ok(
        one,
        "POST",
        "/v1/topics/orders/children",
        &json!({"child": "orders-dr", "remote": "dr", "remote_topic": "orders-copy",
                "lanes": 2}),
        201,
    )
    .await;
    let attached_id = stub["remote"]["target_id"].clone();
    assert!(
        attached_id.is_string(),
        "the attach read the target: {stub}"
    );

    // Half the records through each node, keyed so every partition gets
    // some.
    for (node, range) in [(one, 0..RECORDS / 2), (two, RECORDS / 2..RECORDS)] {
        let messages: Vec<Value> = range
            .map(|i| json!({"key": format!("key-{}", i % 64), "payload": {"id": i}}))
            .collect();
        for chunk in messages.chunks(500) {
            ok(
                node,
                "POST",
                "/v1/topics/orders/produce/batch",
                &json!({ "messages": chunk }),
                202,
            )
            .await;
        }
    }
    let records = tokio::task::block_in_place(|| {
        wait_until("every record in the target", || {
            target.admin.stored("orders-copy") >= RECORDS as u64
        });
        target.admin.consume_all("orders-copy")
    });
    let ids: BTreeSet<u64> = records
        .iter()
        .filter_map(|(_, _, payload)| payload["id"].as_u64())
        .collect();
    assert_eq!(records.len(), RECORDS, "each record stored once");
    assert_eq!(ids.len(), RECORDS, "no record missing");

    // Pause, then resume through node 2: both members check the target.
    let pause = json!({"reason": "maintenance"});
    ok(
        two,
        "POST",
        "/v1/topics/orders/children/orders-dr/pause",
        &pause,
        200,
    )
    .await;
    let resumed = ok(
        two,
        "POST",
        "/v1/topics/orders/children/orders-dr/resume",
        &json!({}),
        200,
    )
    .await;
    let checks = resumed["checks"].as_array().expect("checks");
    let nodes_checked: Vec<u64> = checks.iter().filter_map(|c| c["node"].as_u64()).collect();
    assert_eq!(nodes_checked, [1, 2], "{resumed}");
    for check in checks {
        assert_eq!(check["result"], "pass", "{resumed}");
        assert_eq!(check["target_id"], attached_id, "{resumed}");
    }
    assert_eq!(resumed["remote"]["paused"], false, "{resumed}");
}
