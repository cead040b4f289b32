//! Produces retried with the same idempotency key are stored once: through
//! two different data nodes, and again after the node that took the retry
//! was killed and restarted. Three control nodes and two data nodes on
//! loopback; the stored copies are read from both nodes' partition logs.

use std::collections::HashMap;
use std::time::Duration;

use narad_tests::cluster::{ADMIN, DataCluster};
use narad_tests::stored::topic_records;

const TOPIC: &str = "orders";
const PARTITIONS: u32 = 4;
const KEYS: usize = 40;

/// One message with idempotency key `key` through data node `via`, as a
/// batch of one (the batch field is the per-message form of the
/// `Idempotency-Key` header). The payload names the attempt, so the test
/// sees which copy was stored.
async fn produce(cluster: &DataCluster, via: usize, key: &str, attempt: &str) -> u16 {
    let body =
        format!(r#"{{"messages":[{{"payload":"{key}/{attempt}","idempotency_key":"{key}"}}]}}"#);
    let path = format!("/v1/topics/{TOPIC}/produce/batch");
    let node = &cluster.data[via];
    let (status, text) = node
        .request(Some(ADMIN), "POST", &path, &body)
        .await
        .unwrap_or_else(|| panic!("produce {key} via {via}: no answer\n{}", node.log()));
    assert_eq!(status, 202, "produce {key} via {via}: {text}");
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_retried_through_two_nodes_and_across_a_restart_is_stored_once() {
    let mut cluster = DataCluster::start(3, 2).await;
    cluster
        .create_topic(
            0,
            &format!(r#"{{"name":"{TOPIC}","partitions":{PARTITIONS}}}"#),
        )
        .await;
    // Both nodes must know the topic before producing through node 1.
    cluster.data[1]
        .wait_until("node 1 knows the topic", || async {
            let path = format!("/v1/topics/{TOPIC}");
            let (status, _) = cluster.data[1]
                .request(Some(ADMIN), "GET", &path, "")
                .await?;
            (status == 200).then_some(())
        })
        .await;
    let keys: Vec<String> = (0..KEYS).map(|n| format!("req-{n:04}")).collect();
    for key in &keys {
        produce(&cluster, 0, key, "first").await;
    }
    for key in &keys {
        produce(&cluster, 1, key, "retry-other-node").await;
    }
    cluster.wait_drained(0).await;
    cluster.wait_drained(1).await;
    cluster.data[1].kill();
    cluster.data[1].spawn_ready(false).await;
    for key in &keys {
        produce(&cluster, 1, key, "retry-after-restart").await;
    }
    cluster.wait_drained(0).await;
    cluster.wait_drained(1).await;
    // The owners' logs are read from disk: stop the data nodes first so
    // every commit is closed.
    tokio::time::sleep(Duration::from_millis(200)).await;
    cluster.terminate_data_nodes().await;

    let mut copies: HashMap<String, Vec<String>> = HashMap::new();
    for node in &cluster.data {
        for record in topic_records(&node.data_dir, TOPIC, PARTITIONS) {
            let payload = String::from_utf8(record.payload).expect("utf-8 payload");
            let payload = payload.trim_matches('"').to_owned();
            let key = payload.split('/').next().unwrap_or_default().to_owned();
            copies.entry(key).or_default().push(payload);
        }
    }
    let twice: Vec<_> = copies.iter().filter(|(_, c)| c.len() > 1).collect();
    assert!(twice.is_empty(), "keys stored more than once: {twice:?}");
    for key in &keys {
        let stored = copies.get(key).map_or(&[][..], Vec::as_slice);
        assert_eq!(stored, [format!("{key}/first")], "copies of {key}");
    }
}
