//! What a healthy cluster logs, read as an operator's log pipeline reads
//! it: three `narad control` and two `narad data` processes (JSON logs, the
//! servers' default) start, settle (a topic created, half its partitions
//! moved to the second data node) and stop with SIGTERM, the control
//! plane's leader first. Every line of every node's log must be one JSON
//! object with no key twice, and none at `ERROR`: an error in a clean run
//! is either a bug or a false alarm an operator learns to ignore.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use narad_tests::cluster::{ADMIN, DataCluster, DataProcess};
use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};

const TOPIC: &str = "settled";
const PARTITIONS: usize = 4;

/// A JSON value as a parser that refuses a key repeated within one object
/// reads it. `serde_json::Value` keeps the last of two values silently; a log
/// pipeline may keep either, or refuse the line.
struct Strict;

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value with no key twice in one object")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Strict, E> {
        Ok(Strict)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Strict, E> {
        Ok(Strict)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Strict, E> {
        Ok(Strict)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Strict, E> {
        Ok(Strict)
    }

    fn visit_str<E>(self, _: &str) -> Result<Strict, E> {
        Ok(Strict)
    }

    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        while seq.next_element::<Strict>()?.is_some() {}
        Ok(Strict)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        let mut keys = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !keys.insert(key.clone()) {
                return Err(A::Error::custom(format!("key {key:?} twice")));
            }
            map.next_value::<Strict>()?;
        }
        Ok(Strict)
    }
}

/// What is wrong with one log line, if anything: not a JSON object, a key
/// twice, or level `ERROR`.
fn fault(line: &str) -> Option<String> {
    if let Err(error) = serde_json::from_str::<Strict>(line) {
        return Some(format!("not strict JSON ({error})"));
    }
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    match value.get("level").and_then(serde_json::Value::as_str) {
        None => Some("no level".to_owned()),
        Some("ERROR") => Some("logged at ERROR".to_owned()),
        Some(_) => None,
    }
}

#[test]
fn the_strict_parser_refuses_a_key_twice_at_any_depth() {
    assert!(fault(r#"{"level":"INFO","target":"a","target":"b"}"#).is_some());
    assert!(fault(r#"{"level":"INFO","span":{"name":"a","name":"b"}}"#).is_some());
    assert!(fault(r#"{"level":"INFO","spans":[{"n":1},{"n":1,"n":2}]}"#).is_some());
    assert!(fault(r#"{"level":"ERROR","target":"a"}"#).is_some());
    assert_eq!(
        fault(r#"{"level":"WARN","a":{"b":[1,-2,3.5,null,true]},"c":"d"}"#),
        None
    );
}

/// Waits until data node `via` describes each data node as the owner of
/// half of `TOPIC`'s partitions: the second node took its share.
async fn wait_balanced(cluster: &DataCluster, via: usize) {
    let path = format!("/v1/topics/{TOPIC}");
    let node = &cluster.data[via];
    node.wait_until("each data node owning half the partitions", || async {
        let (status, body) = node.request(Some(ADMIN), "GET", &path, "").await?;
        let described: serde_json::Value = serde_json::from_str(&body).ok()?;
        let owners: Vec<&str> = described["partition_stats"]
            .as_array()?
            .iter()
            .filter_map(|stats| stats["owner_node"].as_str())
            .collect();
        let half = PARTITIONS / 2;
        let balanced = ["1", "2"]
            .iter()
            .all(|id| owners.iter().filter(|owner| *owner == id).count() == half);
        (status == 200 && balanced).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_start_and_stop_logs_strict_json_and_no_error() {
    let mut cluster = DataCluster::start(3, 1).await;
    cluster
        .create_topic(
            0,
            &format!(r#"{{"name":"{TOPIC}","partitions":{PARTITIONS}}}"#),
        )
        .await;
    let produce = format!("/v1/topics/{TOPIC}/produce");
    let (status, body) = cluster.data[0]
        .request(Some(ADMIN), "POST", &produce, r#"{"state":"settled"}"#)
        .await
        .expect("produce answered");
    assert_eq!(status, 202, "{body}");
    // The second data node joins once the first owns every partition, so
    // the controller moves half of them to it: the moves' log lines are
    // part of the run.
    let mut joiner = DataProcess::new(&cluster.control, 2, &[]);
    joiner.spawn_ready(true).await;
    cluster.data.push(joiner);
    wait_balanced(&cluster, 0).await;
    // Heartbeats and the metadata stream run a little in the settled state.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A rolling stop, leader first: the other two elect a new leader while
    // their votes to the stopped voter fail, as they would to a voter not
    // started yet.
    cluster.terminate_data_nodes().await;
    let leader = cluster.control.wait_for_leader().await;
    let mut stopping = vec![leader];
    stopping.extend((0..cluster.control.nodes.len()).filter(|index| *index != leader));
    for (position, index) in stopping.into_iter().enumerate() {
        let exit = cluster.control.terminate(index).await;
        assert!(exit.success(), "control node {} exit {exit:?}", index + 1);
        if position == 0 {
            cluster.control.wait_for_leader().await;
        }
    }

    let logs = cluster
        .control
        .nodes
        .iter()
        .map(|node| (format!("control node {}", node.id), node.log()))
        .chain(
            cluster
                .data
                .iter()
                .map(|node| (format!("data node {}", node.id), node.log())),
        );
    let mut lines = 0;
    let mut handoffs = 0;
    let mut faults = Vec::new();
    for (node, log) in logs {
        for line in log.lines().filter(|line| !line.trim().is_empty()) {
            lines += 1;
            handoffs += usize::from(line.contains("move handoff fenced"));
            if let Some(fault) = fault(line) {
                faults.push(format!("{node}: {fault}: {line}"));
            }
        }
    }
    assert!(lines > 0, "the nodes logged nothing");
    assert!(
        handoffs > 0,
        "no move was fenced: the run missed the moves' lines"
    );
    assert!(
        faults.is_empty(),
        "{} faulty lines:\n{}",
        faults.len(),
        faults.join("\n")
    );
}
