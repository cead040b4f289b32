//! Partition moves across processes: three `narad control` and three
//! `narad data` processes on loopback, security on; a fourth data node
//! joins (or one is killed mid-move) while producers keep sending.
//!
//! Accounting: after the data nodes stop gracefully, each partition is read
//! from the data directory of its final owner only (a moved-away copy that
//! was not removed yet must not make a lost message look stored). Every
//! message answered `202` must be there at least once, byte for byte;
//! nothing never sent may appear; duplicates are allowed (spec §2) and
//! printed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use narad_tests::cluster::{ADMIN, DataCluster, DataProcess, basic_authorization};
use narad_tests::dev::Request;
use narad_tests::stored::topic_records;

const TOPIC: &str = "orders";
const PARTITIONS: u32 = 8;
/// `202`s collected before the fault or the join, and again after it.
const ACCEPTED_AROUND: u64 = 300;
/// How long the moves may take, at most: a ceiling that turns a hang into
/// a failure, not a timing assertion.
const MOVES_WITHIN: Duration = Duration::from_secs(90);

/// One message a producer sent.
#[derive(Clone, Debug)]
struct Sent {
    payload: Vec<u8>,
    status: Option<u16>,
}

struct Producers {
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
    threads: Vec<JoinHandle<Vec<Sent>>>,
}

impl Producers {
    /// One keyless producer per port, each sending `p<i>-<n>` until
    /// stopped.
    fn start(ports: &[u16]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let authorization = basic_authorization(ADMIN);
        let threads = ports
            .iter()
            .enumerate()
            .map(|(index, &port)| {
                let (stop, accepted, authorization) = (
                    Arc::clone(&stop),
                    Arc::clone(&accepted),
                    authorization.clone(),
                );
                thread::spawn(move || {
                    let mut sent = Vec::new();
                    let path = format!("/v1/topics/{TOPIC}/produce");
                    let headers = [authorization.as_str()];
                    let mut n = 0;
                    while !stop.load(Ordering::Acquire) {
                        let payload = format!("p{index}-{n}").into_bytes();
                        let status = Request::post(&path, "application/octet-stream", &payload)
                            .with_headers(&headers)
                            .send(port)
                            .map(|answer| answer.status);
                        if status == Some(202) {
                            accepted.fetch_add(1, Ordering::AcqRel);
                        } else {
                            thread::sleep(Duration::from_millis(10));
                        }
                        sent.push(Sent { payload, status });
                        n += 1;
                    }
                    sent
                })
            })
            .collect();
        Self {
            stop,
            accepted,
            threads,
        }
    }

    async fn wait_accepted(&self, more: u64) {
        let target = self.accepted.load(Ordering::Acquire) + more;
        let deadline = Instant::now() + MOVES_WITHIN;
        while self.accepted.load(Ordering::Acquire) < target {
            assert!(Instant::now() < deadline, "producers stalled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn stop(self) -> Vec<Sent> {
        self.stop.store(true, Ordering::Release);
        tokio::task::block_in_place(|| {
            self.threads
                .into_iter()
                .flat_map(|thread| thread.join().expect("producer thread"))
                .collect()
        })
    }
}

/// The owners of every partition as data node `via` describes them now.
async fn owners_now(cluster: &DataCluster, via: usize) -> Option<Vec<u64>> {
    let node = &cluster.data[via];
    let (status, body) = node
        .request(Some(ADMIN), "GET", &format!("/v1/topics/{TOPIC}"), "")
        .await?;
    if status != 200 {
        return None;
    }
    let described: serde_json::Value = serde_json::from_str(&body).ok()?;
    described["partition_stats"]
        .as_array()?
        .iter()
        .map(|stats| stats["owner_node"].as_str()?.parse().ok())
        .collect()
}

/// Waits until every node in `nodes` owns `share` partitions, as data node
/// `via` describes them; returns the owners.
async fn wait_for_balance(
    cluster: &DataCluster,
    via: usize,
    nodes: &[u64],
    share: usize,
) -> Vec<u64> {
    let deadline = Instant::now() + MOVES_WITHIN;
    loop {
        if let Some(owners) = owners_now(cluster, via).await {
            let balanced = nodes
                .iter()
                .all(|node| owners.iter().filter(|owner| *owner == node).count() == share);
            if balanced {
                return owners;
            }
            assert!(
                Instant::now() < deadline,
                "not balanced after {MOVES_WITHIN:?}: owners {owners:?}\n{}",
                cluster.data[via].log()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks every acknowledged message against what the final owners store.
fn account(cluster: &DataCluster, owners: &[u64], sent: &[Sent]) {
    let mut stored: HashMap<Vec<u8>, usize> = HashMap::new();
    for (partition, owner) in owners.iter().enumerate() {
        let node = cluster
            .data
            .iter()
            .find(|node| node.id == *owner)
            .expect("the owner is a data node");
        for record in topic_records(&node.data_dir, TOPIC, PARTITIONS)
            .into_iter()
            .filter(|record| record.partition as usize == partition)
        {
            *stored.entry(record.payload).or_default() += 1;
        }
    }
    let sent_payloads: HashMap<&[u8], &Sent> = sent
        .iter()
        .map(|sent| (sent.payload.as_slice(), sent))
        .collect();
    for payload in stored.keys() {
        assert!(
            sent_payloads.contains_key(payload.as_slice()),
            "stored {:?} was never sent",
            String::from_utf8_lossy(payload)
        );
    }
    let acknowledged: Vec<&Sent> = sent.iter().filter(|s| s.status == Some(202)).collect();
    let lost: Vec<String> = acknowledged
        .iter()
        .filter(|sent| !stored.contains_key(&sent.payload))
        .map(|sent| String::from_utf8_lossy(&sent.payload).into_owned())
        .collect();
    let duplicates: usize = stored.values().map(|count| count - 1).sum();
    let statuses: BTreeMap<Option<u16>, usize> = sent.iter().fold(BTreeMap::new(), |mut m, s| {
        *m.entry(s.status).or_default() += 1;
        m
    });
    println!(
        "sent {}, acknowledged {}, stored {}, duplicates {duplicates}, statuses {statuses:?}",
        sent.len(),
        acknowledged.len(),
        stored.len()
    );
    assert!(
        lost.is_empty(),
        "{} acknowledged messages lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
}

/// What the consumers saw: deliveries per payload, and the acked ones.
#[derive(Debug, Default)]
struct Consumed {
    deliveries: HashMap<Vec<u8>, usize>,
    acked: std::collections::HashSet<Vec<u8>>,
}

/// Consumers: one thread per port, each consuming up to 100 messages and
/// acking them in one batch, until stopped; an empty answer waits 100 ms.
struct Consumers {
    stop: Arc<AtomicBool>,
    consumed: Arc<std::sync::Mutex<Consumed>>,
    threads: Vec<JoinHandle<()>>,
}

/// A batch consume must name its client (spec §1.1).
const CLIENT_HEADER: &str = "X-Narad-Client: rebalance-test";

impl Consumers {
    fn start(ports: &[u16]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let consumed = Arc::new(std::sync::Mutex::new(Consumed::default()));
        let threads = ports
            .iter()
            .map(|&port| {
                let (stop, consumed) = (Arc::clone(&stop), Arc::clone(&consumed));
                thread::spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        consume_and_ack(port, &consumed);
                    }
                })
            })
            .collect();
        Self {
            stop,
            consumed,
            threads,
        }
    }

    fn stop(self) -> Consumed {
        self.stop.store(true, Ordering::Release);
        tokio::task::block_in_place(|| {
            for thread in self.threads {
                thread.join().expect("consumer thread");
            }
        });
        Arc::try_unwrap(self.consumed)
            .expect("the consumers are done")
            .into_inner()
            .expect("lock")
    }
}

/// One consume of up to 100 messages through `port`, acked in one batch;
/// how many came (0 also when the node did not answer).
fn consume_and_ack(port: u16, consumed: &std::sync::Mutex<Consumed>) -> usize {
    let authorization = basic_authorization(ADMIN);
    let headers = [authorization.as_str(), CLIENT_HEADER];
    let path = format!("/v1/topics/{TOPIC}/consume?max=100&wait=100ms");
    let Some(answer) = Request::get(&path).with_headers(&headers).send(port) else {
        thread::sleep(Duration::from_millis(100));
        return 0;
    };
    assert!(
        !(400..500).contains(&answer.status),
        "consume: {} {}",
        answer.status,
        answer.body
    );
    if answer.status != 200 {
        return 0;
    }
    let body: serde_json::Value = serde_json::from_str(&answer.body).expect("consume JSON");
    let messages = body["messages"].as_array().expect("messages");
    let payloads: Vec<Vec<u8>> = messages
        .iter()
        .map(|message| {
            message["payload"]
                .as_str()
                .expect("payload")
                .as_bytes()
                .to_vec()
        })
        .collect();
    let handles: Vec<serde_json::Value> = messages
        .iter()
        .map(|message| message["receipt_handle"].clone())
        .collect();
    {
        let mut consumed = consumed.lock().expect("lock");
        for payload in &payloads {
            *consumed.deliveries.entry(payload.clone()).or_default() += 1;
        }
    }
    let body = serde_json::json!({ "receipt_handles": handles }).to_string();
    let answer = Request::post(
        &format!("/v1/topics/{TOPIC}/ack"),
        "application/json",
        body.as_bytes(),
    )
    .with_headers(&headers)
    .send(port);
    if let Some(answer) = answer.filter(|answer| answer.status == 200) {
        let results: serde_json::Value = serde_json::from_str(&answer.body).expect("ack JSON");
        let mut consumed = consumed.lock().expect("lock");
        for (payload, result) in payloads
            .iter()
            .zip(results["results"].as_array().expect("results"))
        {
            if result["status"].as_u64() == Some(204) {
                consumed.acked.insert(payload.clone());
            }
        }
    }
    payloads.len()
}

/// Consumes through `port` until three answers in a row are empty.
fn consume_rest(port: u16, consumed: &std::sync::Mutex<Consumed>) {
    tokio::task::block_in_place(|| {
        let mut empty = 0;
        while empty < 3 {
            if consume_and_ack(port, consumed) == 0 {
                empty += 1;
            } else {
                empty = 0;
            }
        }
    });
}

/// Every message answered `202` was delivered at least once.
fn check_delivered(sent: &[Sent], consumed: &Consumed) {
    let undelivered: Vec<String> = sent
        .iter()
        .filter(|sent| sent.status == Some(202))
        .filter(|sent| !consumed.deliveries.contains_key(&sent.payload))
        .map(|sent| String::from_utf8_lossy(&sent.payload).into_owned())
        .collect();
    let redelivered = consumed
        .deliveries
        .values()
        .filter(|count| **count > 1)
        .count();
    println!(
        "delivered {}, acked {}, delivered more than once {redelivered}",
        consumed.deliveries.len(),
        consumed.acked.len()
    );
    assert!(
        undelivered.is_empty(),
        "{} acknowledged messages never delivered, e.g. {:?}",
        undelivered.len(),
        &undelivered[..undelivered.len().min(10)]
    );
}

async fn drain_and_stop(cluster: &mut DataCluster) {
    for index in 0..cluster.data.len() {
        if cluster.data[index].is_running() {
            cluster.wait_drained(index).await;
        }
    }
    cluster.terminate_data_nodes().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_takes_its_share_under_load_and_nothing_acknowledged_is_lost() {
    let mut cluster = DataCluster::start(3, 3).await;
    cluster
        .create_topic(
            0,
            &format!(r#"{{"name":"{TOPIC}","partitions":{PARTITIONS}}}"#),
        )
        .await;
    let before = cluster.partition_owners(0, TOPIC).await;
    let ports: Vec<u16> = cluster
        .data
        .iter()
        .map(|node| node.http_addr.port())
        .collect();
    let producers = Producers::start(&ports);
    let consumers = Consumers::start(&ports[..1]);
    producers.wait_accepted(ACCEPTED_AROUND).await;
    let mut joiner = DataProcess::new(&cluster.control, 4, &[]);
    joiner.spawn_ready(true).await;
    cluster.data.push(joiner);
    let owners = wait_for_balance(&cluster, 0, &[1, 2, 3, 4], 2).await;
    let moved = before.iter().zip(&owners).filter(|(a, b)| a != b).count();
    println!("owners before {before:?}, after {owners:?}: {moved} moves");
    assert_eq!(moved, 2, "8 over 4 takes exactly two moves from 3,3,2");
    producers.wait_accepted(ACCEPTED_AROUND).await;
    let sent = producers.stop();
    for index in 0..cluster.data.len() {
        cluster.wait_drained(index).await;
    }
    consume_rest(ports[0], &consumers.consumed);
    let consumed = consumers.stop();
    check_delivered(&sent, &consumed);
    wait_reclaimed(&cluster, &before, &owners).await;
    drain_and_stop(&mut cluster).await;
    account(&cluster, &owners, &sent);
}

/// Waits until every node that gave a partition away has removed its copy
/// (each removal needs the control plane's leader to confirm it).
async fn wait_reclaimed(cluster: &DataCluster, before: &[u64], after: &[u64]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for (partition, (old, new)) in before.iter().zip(after).enumerate() {
        if old == new {
            continue;
        }
        let node = cluster
            .data
            .iter()
            .find(|node| node.id == *old)
            .expect("the old owner is a data node");
        let dir = node
            .data_dir
            .join("topics")
            .join(TOPIC)
            .join(format!("p{partition:05}"));
        while dir.exists() {
            assert!(
                Instant::now() < deadline,
                "node {old} still holds its copy of partition {partition} a minute after the move"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Bytes of each message that fills a partition before a move.
const FILL_MESSAGE_BYTES: usize = 64 * 1024;
/// Messages that fill it: 48 MiB, so a copy takes long enough on this
/// machine for a kill to land in the middle of it.
const FILL_MESSAGES: usize = 768;

/// Fills `partition` through data node 0 with [`FILL_MESSAGES`] messages
/// of [`FILL_MESSAGE_BYTES`]; every one must be answered `202`.
fn fill(cluster: &DataCluster, partition: u32) -> Vec<Sent> {
    let port = cluster.data[0].http_addr.port();
    let authorization = basic_authorization(ADMIN);
    let headers = [authorization.as_str()];
    let path = format!("/v1/topics/{TOPIC}/produce?partition={partition}");
    tokio::task::block_in_place(|| {
        (0..FILL_MESSAGES)
            .map(|n| {
                let mut payload = format!("fill-{n}-").into_bytes();
                payload.resize(FILL_MESSAGE_BYTES, b'f');
                let status = Request::post(&path, "application/octet-stream", &payload)
                    .with_headers(&headers)
                    .send(port)
                    .map(|answer| answer.status);
                assert_eq!(status, Some(202), "fill message {n}");
                Sent { payload, status }
            })
            .collect()
    })
}

/// Waits until `node`'s log contains `needle`.
async fn wait_log(node: &DataProcess, needle: &str) {
    node.wait_until(needle, || async {
        node.log().contains(needle).then_some(())
    })
    .await;
}

/// A cluster of 3 + 3 with a 4-partition topic whose partition 3 (on data
/// node 1) is filled; producers running; data node 4 joined, with the move
/// of partition 3 to it started. Returns the fill and the producers.
async fn moving_partition_three() -> (DataCluster, Vec<Sent>, Producers) {
    let mut cluster = DataCluster::start(3, 3).await;
    cluster
        .create_topic(0, &format!(r#"{{"name":"{TOPIC}","partitions":4}}"#))
        .await;
    assert_eq!(cluster.partition_owners(0, TOPIC).await, [1, 2, 3, 1]);
    let filled = fill(&cluster, 3);
    let ports: Vec<u16> = cluster
        .data
        .iter()
        .map(|node| node.http_addr.port())
        .collect();
    let producers = Producers::start(&ports[1..]);
    producers.wait_accepted(ACCEPTED_AROUND).await;
    let mut joiner = DataProcess::new(&cluster.control, 4, &[]);
    joiner.spawn_ready(true).await;
    wait_log(&joiner, "move worker started").await;
    cluster.data.push(joiner);
    (cluster, filled, producers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_killed_mid_move_restarts_and_completes_it_with_nothing_lost() {
    let (mut cluster, filled, producers) = moving_partition_three().await;
    let finished = cluster.data[3].log().contains("move completed");
    cluster.data[3].kill();
    println!(
        "target killed with the move {}",
        if finished { "finished" } else { "in flight" }
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.data[3].spawn_ready(false).await;
    let owners = wait_for_balance(&cluster, 1, &[1, 2, 3, 4], 1).await;
    assert_eq!(owners[3], 4, "{owners:?}");
    producers.wait_accepted(ACCEPTED_AROUND).await;
    let mut sent = producers.stop();
    sent.extend(filled);
    drain_and_stop(&mut cluster).await;
    account(&cluster, &owners, &sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_killed_mid_move_restarts_and_the_move_completes_with_nothing_lost() {
    let (mut cluster, filled, producers) = moving_partition_three().await;
    let finished = cluster.data[3].log().contains("move completed");
    cluster.data[0].kill();
    println!(
        "source killed with the move {}",
        if finished { "finished" } else { "in flight" }
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.data[0].spawn_ready(false).await;
    let owners = wait_for_balance(&cluster, 1, &[1, 2, 3, 4], 1).await;
    assert_eq!(owners[3], 4, "{owners:?}");
    producers.wait_accepted(ACCEPTED_AROUND).await;
    let mut sent = producers.stop();
    sent.extend(filled);
    drain_and_stop(&mut cluster).await;
    account(&cluster, &owners, &sent);
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommissioned_node_drains_under_load_and_leaves() {
    let mut cluster = DataCluster::start(3, 3).await;
    cluster
        .create_topic(
            0,
            &format!(r#"{{"name":"{TOPIC}","partitions":{PARTITIONS}}}"#),
        )
        .await;
    let ports: Vec<u16> = cluster
        .data
        .iter()
        .map(|node| node.http_addr.port())
        .collect();
    // Producers go through the nodes that stay.
    let producers = Producers::start(&ports[..2]);
    producers.wait_accepted(ACCEPTED_AROUND).await;
    let (status, body) = cluster.data[0]
        .request(
            Some(ADMIN),
            "POST",
            "/v1/cluster/members/3/decommission",
            "",
        )
        .await
        .expect("decommission answered");
    assert_eq!(status, 204, "{body}");
    let owners = wait_for_balance(&cluster, 0, &[1, 2], 4).await;
    assert!(!owners.contains(&3), "{owners:?}");
    producers.wait_accepted(ACCEPTED_AROUND).await;
    let sent = producers.stop();
    // Once it owns nothing and its backlog is 0, it leaves the members.
    let node = &cluster.data[0];
    node.wait_until("member 3 removed", || async {
        let (status, body) = node
            .request(Some(ADMIN), "GET", "/v1/cluster/members", "")
            .await?;
        let members: serde_json::Value = serde_json::from_str(&body).ok()?;
        let ids: Vec<&str> = members["members"]
            .as_array()?
            .iter()
            .filter_map(|member| member["id"].as_str())
            .collect();
        (status == 200 && !ids.contains(&"3")).then_some(())
    })
    .await;
    drain_and_stop(&mut cluster).await;
    account(&cluster, &owners, &sent);
}
