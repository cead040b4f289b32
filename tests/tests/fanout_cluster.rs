//! Fan-out across a cluster of three `narad control` and three `narad data`
//! processes on loopback, security on, one cluster secret (spec §1.4, §4).
//!
//! A parent of 3 partitions gets a replica child created with `"parent"`:
//! the child inherits the partition count and its partition p is placed
//! off the owner of parent partition p. Keyed and keyless records are
//! produced to the parent through every data node until the children
//! listing reports no lag. Then the data node that owns a child partition
//! is SIGKILLed while producers on the other two go on: the child
//! partitions whose parent partition and owner are both alive keep
//! receiving, the killed node's stay with it (nothing reroutes a fan-out
//! bucket) and the child lags. The node is restarted, the lag returns to
//! 0, and after the data nodes stop every partition log of both topics is
//! read from every node's data directory: every parent record answered
//! `202` must be in the child at least once with its key, keyed records
//! in the child partition of their key's hash, keyless ones in the
//! partition index their parent copy has, each child partition only on
//! its owner, and nothing that was never sent. Duplicates are allowed
//! (spec §2), counted and printed.
//!
//! Which requests the kill overlaps depends on scheduling; every assertion
//! holds for any interleaving and every wait is bounded.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use narad_tests::cluster::{ADMIN, DataCluster, basic_authorization};
use narad_tests::dev::Request;
use narad_tests::placement::key_partition;
use narad_tests::stored::topic_records;
use serde_json::Value;

const PARENT: &str = "orders";
const CHILD: &str = "orders-replica";
const PARTITIONS: u32 = 3;
/// Distinct keys a keyed producer cycles through.
const KEYS: usize = 11;
/// Messages each producer sends before the kill (two producers, keyed
/// and keyless, per data node).
const MESSAGES_BEFORE: usize = 25;
/// Records each still-fed child partition must gain while the killed node
/// is away.
const GROWTH_DURING_OUTAGE: u64 = 5;
/// How long the killed node stays away at least: past the 3 s after
/// which the dispatcher reroutes records of its parent partition to live
/// siblings, so rerouted records go through fan-out too.
const OUTAGE_MIN: Duration = Duration::from_secs(5);
/// `202`s the producers must collect after the restart began.
const ACCEPTED_AFTER_RESTART: u64 = 40;
/// Bound on the waits that span a restart and the cursors' retries (1 s
/// backoff) on a loaded machine: longer than the harness's 20 s. It turns
/// a stall into a failure; it asserts no speed.
const CATCH_UP_MAX: Duration = Duration::from_secs(60);
/// How long a producer pauses after a request got no answer.
const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// One message a producer sent, whatever the answer.
#[derive(Clone, Debug)]
struct Sent {
    key: Vec<u8>,
    payload: Vec<u8>,
    /// The HTTP status; `None` when no answer came.
    status: Option<u16>,
}

impl Sent {
    fn acknowledged(&self) -> bool {
        self.status == Some(202)
    }
}

/// One record found in a partition log.
#[derive(Clone, Debug)]
struct Stored {
    /// The data node whose directory holds it.
    node: u64,
    partition: u32,
    key: Vec<u8>,
    payload: Vec<u8>,
}

/// What producers share.
#[derive(Debug)]
struct Run {
    authorization: String,
    stop: AtomicBool,
    accepted: AtomicU64,
}

impl Run {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            authorization: basic_authorization(ADMIN),
            stop: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
        })
    }

    /// Sends message `name-<n>` to the parent through the node on `port`,
    /// keyed (`k<n mod KEYS>`) or not.
    fn send(&self, port: u16, name: &str, n: usize, keyed: bool) -> Sent {
        let payload = format!("{name}-{n}").into_bytes();
        let (key, query) = if keyed {
            let key = format!("k{}", n % KEYS);
            (key.clone().into_bytes(), format!("?key={key}"))
        } else {
            (Vec::new(), String::new())
        };
        let path = format!("/v1/topics/{PARENT}/produce{query}");
        let headers = [self.authorization.as_str()];
        let status = Request::post(&path, "application/octet-stream", &payload)
            .with_headers(&headers)
            .send(port)
            .map(|answer| answer.status);
        match status {
            Some(202) => {
                self.accepted.fetch_add(1, Ordering::AcqRel);
            }
            None => thread::sleep(RETRY_PAUSE),
            Some(_) => {}
        }
        Sent {
            key,
            payload,
            status,
        }
    }
}

/// Starts a keyed and a keyless producer against each data node in
/// `nodes`, each sending up to `count` messages named
/// `<phase>-n<node>-<keyed|keyless>-<n>` until [`Run::stop`].
fn start_producers(
    run: &Arc<Run>,
    cluster: &DataCluster,
    nodes: &[usize],
    phase: &str,
    count: usize,
) -> Vec<JoinHandle<Vec<Sent>>> {
    let mut producers = Vec::new();
    for &node in nodes {
        let port = cluster.data[node].http_addr.port();
        for keyed in [true, false] {
            let kind = if keyed { "keyed" } else { "keyless" };
            let name = format!("{phase}-n{}-{kind}", node + 1);
            let run = Arc::clone(run);
            producers.push(thread::spawn(move || {
                (0..count)
                    .take_while(|_| !run.stop.load(Ordering::Acquire))
                    .map(|n| run.send(port, &name, n, keyed))
                    .collect()
            }));
        }
    }
    producers
}

fn join_producers(producers: Vec<JoinHandle<Vec<Sent>>>) -> Vec<Sent> {
    tokio::task::block_in_place(|| {
        producers
            .into_iter()
            .flat_map(|producer| producer.join().expect("producer thread"))
            .collect()
    })
}

/// Polls `probe` every 100 ms until it returns `Some`.
///
/// # Panics
/// After `bound`, naming `what` and showing every data node's log.
async fn wait_for<T, F, Fut>(cluster: &DataCluster, what: &str, bound: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + bound;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = cluster
                .data
                .iter()
                .map(|node| format!("--- data node {} ---\n{}", node.id, node.log()))
                .collect();
            panic!(
                "gave up after {bound:?} waiting for {what}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `GET path` through data node `via` as the admin, parsed; `None` unless
/// it answers 200 with JSON.
async fn get_json(cluster: &DataCluster, via: usize, path: &str) -> Option<Value> {
    let (status, body) = cluster.data[via]
        .request(Some(ADMIN), "GET", path, "")
        .await?;
    if status != 200 {
        return None;
    }
    serde_json::from_str(&body).ok()
}

/// Each partition's `(owner_node, status, high_watermark)` of `topic` as
/// data node `via` describes it.
async fn partition_stats(
    cluster: &DataCluster,
    via: usize,
    topic: &str,
) -> Option<Vec<(Option<u64>, String, u64)>> {
    let described = get_json(cluster, via, &format!("/v1/topics/{topic}")).await?;
    described["partition_stats"]
        .as_array()?
        .iter()
        .map(|stats| {
            Some((
                stats["owner_node"].as_str().and_then(|id| id.parse().ok()),
                stats["status"].as_str()?.to_owned(),
                stats["high_watermark"].as_u64()?,
            ))
        })
        .collect()
}

/// The child's `(lag_messages, lag_complete)` in the parent's children
/// listing through data node `via`.
async fn child_lag(cluster: &DataCluster, via: usize) -> Option<(u64, bool)> {
    let listing = get_json(cluster, via, &format!("/v1/topics/{PARENT}/children")).await?;
    let child = listing["children"]
        .as_array()?
        .iter()
        .find(|child| child["name"] == CHILD)?;
    Some((
        child["lag_messages"].as_u64()?,
        child["lag_complete"].as_bool()?,
    ))
}

/// Waits until every running data node has dispatched what it accepted
/// and the child's lag, as `via` reports it, is 0 with every cursor
/// reporting.
async fn wait_caught_up(cluster: &DataCluster, via: usize, when: &str) {
    for index in 0..cluster.data.len() {
        if cluster.data[index].is_running() {
            wait_for(
                cluster,
                &format!("data node {} to dispatch its backlog {when}", index + 1),
                CATCH_UP_MAX,
                || async { (cluster.backlog_records(index).await? == 0).then_some(()) },
            )
            .await;
        }
    }
    wait_for(
        cluster,
        &format!("the child's lag to reach 0 with every cursor reporting {when}"),
        CATCH_UP_MAX,
        || async { (child_lag(cluster, via).await? == (0, true)).then_some(()) },
    )
    .await;
}

/// Every record of `topic` in the partition logs under `data_dir`.
fn stored_records(node: u64, data_dir: &Path, topic: &str) -> Vec<Stored> {
    topic_records(data_dir, topic, PARTITIONS)
        .into_iter()
        .map(|record| Stored {
            node,
            partition: record.partition,
            key: record.key,
            payload: record.payload,
        })
        .collect()
}

/// Every record of `topic` on every data node of the (stopped) cluster.
fn stored_everywhere(cluster: &DataCluster, topic: &str) -> Vec<Stored> {
    cluster
        .data
        .iter()
        .flat_map(|node| stored_records(node.id, &node.data_dir, topic))
        .collect()
}

/// Copies of each payload in `stored`.
fn copies(stored: &[Stored]) -> HashMap<&[u8], Vec<&Stored>> {
    let mut copies: HashMap<&[u8], Vec<&Stored>> = HashMap::new();
    for record in stored {
        copies
            .entry(record.payload.as_slice())
            .or_default()
            .push(record);
    }
    copies
}

/// The data node to kill: one owning a child partition, chosen so that the
/// most child partitions keep both their owner and their parent
/// partition's owner alive; its index, and those partitions.
fn choose_victim(cluster: &DataCluster, parent: &[u64], child: &[u64]) -> (usize, Vec<u32>) {
    let fed_without = |victim: u64| -> Vec<u32> {
        (0..PARTITIONS)
            .filter(|&p| child[p as usize] != victim && parent[p as usize] != victim)
            .collect()
    };
    let (index, fed) = cluster
        .data
        .iter()
        .enumerate()
        .filter(|(_, node)| child.contains(&node.id))
        .map(|(index, node)| (index, fed_without(node.id)))
        .max_by_key(|(_, fed)| fed.len())
        .expect("some data node owns a child partition");
    assert!(
        !fed.is_empty(),
        "no child partition keeps a live owner and a live parent partition whichever node dies: \
         parent owners {parent:?}, child owners {child:?}"
    );
    (index, fed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_child_keeps_every_acknowledged_parent_record_across_a_sigkilled_child_owner() {
    let mut cluster = DataCluster::start(3, 3).await;
    cluster
        .create_topic(
            0,
            &format!(r#"{{"name":"{PARENT}","partitions":{PARTITIONS}}}"#),
        )
        .await;
    let parent_owners = cluster.partition_owners(0, PARENT).await;
    cluster
        .create_topic(1, &format!(r#"{{"name":"{CHILD}","parent":"{PARENT}"}}"#))
        .await;
    let child_owners = cluster.partition_owners(1, CHILD).await;
    for index in 0..cluster.data.len() {
        assert_eq!(cluster.partition_owners(index, PARENT).await, parent_owners);
        assert_eq!(cluster.partition_owners(index, CHILD).await, child_owners);
    }
    println!("parent owners {parent_owners:?}, child owners {child_owners:?}");
    assert_eq!(child_owners.len(), PARTITIONS as usize, "inherited count");
    for partition in 0..PARTITIONS as usize {
        assert_ne!(
            child_owners[partition], parent_owners[partition],
            "child partition {partition} shares its owner with parent partition {partition}: \
             parent owners {parent_owners:?}, child owners {child_owners:?}"
        );
    }
    let child_record = get_json(&cluster, 2, &format!("/v1/topics/{CHILD}"))
        .await
        .expect("the child is described");
    assert_eq!(child_record["role"], "child", "{child_record}");
    assert_eq!(child_record["parent"], PARENT, "{child_record}");
    let parent_record = get_json(&cluster, 2, &format!("/v1/topics/{PARENT}"))
        .await
        .expect("the parent is described");
    assert_eq!(parent_record["role"], "parent", "{parent_record}");
    assert_eq!(
        parent_record["children"],
        serde_json::json!([CHILD]),
        "{parent_record}"
    );

    // Before the fault: through every node, until the child has it all.
    let run = Run::new();
    let everyone = [0, 1, 2];
    let mut sent = join_producers(start_producers(
        &run,
        &cluster,
        &everyone,
        "before",
        MESSAGES_BEFORE,
    ));
    wait_caught_up(&cluster, 0, "before the kill").await;

    // The fault: kill the owner of a child partition while producers on
    // the other two nodes go on.
    let (victim, fed) = choose_victim(&cluster, &parent_owners, &child_owners);
    let victim_id = cluster.data[victim].id;
    let live: Vec<usize> = everyone.into_iter().filter(|&i| i != victim).collect();
    let via = live[0];
    let stalled: Vec<u32> = (0..PARTITIONS)
        .filter(|&p| child_owners[p as usize] == victim_id)
        .collect();
    let run = Run::new();
    let producers = start_producers(&run, &cluster, &live, "during", usize::MAX);
    cluster.data[victim].kill();
    let killed_at = Instant::now();
    // Once a live node describes the victim's child partitions as
    // unavailable (and still the victim's), the fed ones must grow.
    let at_loss = wait_for(
        &cluster,
        "the killed node's child partitions described as unavailable",
        CATCH_UP_MAX,
        || async {
            let stats = partition_stats(&cluster, via, CHILD).await?;
            let away = stalled.iter().all(|&p| stats[p as usize].1 != "ok");
            away.then_some(stats)
        },
    )
    .await;
    for (partition, (owner, _, _)) in at_loss.iter().enumerate() {
        assert_eq!(
            *owner,
            Some(child_owners[partition]),
            "child partition {partition} changed owner while node {victim_id} was away"
        );
    }
    for &partition in &fed {
        let from = at_loss[partition as usize].2;
        let owner = child_owners[partition as usize];
        let owner_index = cluster
            .data
            .iter()
            .position(|node| node.id == owner)
            .expect("owner is a data node");
        let offset = from + GROWTH_DURING_OUTAGE - 1;
        let path = format!("/v1/topics/{CHILD}/consume?offset={offset}&partition={partition}");
        wait_for(
            &cluster,
            &format!(
                "child partition {partition} to grow past {from} while node {victim_id} is away"
            ),
            CATCH_UP_MAX,
            || async {
                let (status, _) = cluster.data[owner_index]
                    .request(Some(ADMIN), "GET", &path, "")
                    .await?;
                (status == 200).then_some(())
            },
        )
        .await;
    }
    let lag_during = wait_for(
        &cluster,
        "the child to lag while its partitions' owner is away",
        CATCH_UP_MAX,
        || async {
            let (lag, complete) = child_lag(&cluster, via).await?;
            (lag > 0).then_some((lag, complete))
        },
    )
    .await;
    let outage_left = OUTAGE_MIN.saturating_sub(killed_at.elapsed());
    tokio::time::sleep(outage_left).await;
    let away_for = killed_at.elapsed();
    let stats = partition_stats(&cluster, via, CHILD)
        .await
        .expect("the child is described");
    for &partition in &stalled {
        assert_ne!(
            stats[partition as usize].1, "ok",
            "child partition {partition} is served while its owner is dead"
        );
    }

    // Back: restart it, produce a little more, and wait for the child.
    let accepted_at_restart = run.accepted.load(Ordering::Acquire);
    cluster.data[victim].spawn_ready(false).await;
    wait_for(
        &cluster,
        &format!("{ACCEPTED_AFTER_RESTART} produces answered 202 after the restart"),
        CATCH_UP_MAX,
        || async {
            (run.accepted.load(Ordering::Acquire) >= accepted_at_restart + ACCEPTED_AFTER_RESTART)
                .then_some(())
        },
    )
    .await;
    run.stop.store(true, Ordering::Release);
    sent.extend(join_producers(producers));
    wait_caught_up(&cluster, victim, "after the restart").await;
    let child_stats = partition_stats(&cluster, victim, CHILD)
        .await
        .expect("the child is described");
    cluster.terminate_data_nodes().await;

    // The accounting, from every node's partition logs.
    let parent_stored = stored_everywhere(&cluster, PARENT);
    let child_stored = stored_everywhere(&cluster, CHILD);
    let by_payload: HashMap<&[u8], &Sent> = sent
        .iter()
        .map(|message| (message.payload.as_slice(), message))
        .collect();
    let parent_copies = copies(&parent_stored);
    let child_copies = copies(&child_stored);
    for record in &child_stored {
        let message = by_payload
            .get(record.payload.as_slice())
            .unwrap_or_else(|| panic!("a child record that was never sent: {record:?}"));
        assert_eq!(record.key, message.key, "key of {message:?} in the child");
        let owner = child_owners[record.partition as usize];
        assert_eq!(
            record.node, owner,
            "a child record in partition {} stored by node {}, owner {owner}: {record:?}",
            record.partition, record.node
        );
        if message.key.is_empty() {
            let parent_partitions: BTreeSet<u32> = parent_copies
                .get(record.payload.as_slice())
                .into_iter()
                .flatten()
                .map(|copy| copy.partition)
                .collect();
            assert!(
                parent_partitions.contains(&record.partition),
                "keyless {record:?} in child partition {}, its parent copies in {parent_partitions:?}",
                record.partition
            );
        } else {
            assert_eq!(
                record.partition,
                key_partition(&message.key, PARTITIONS),
                "keyed {record:?} outside its key's child partition"
            );
        }
    }
    let acknowledged: Vec<&Sent> = sent.iter().filter(|m| m.acknowledged()).collect();
    let missing_in_parent = acknowledged
        .iter()
        .filter(|m| !parent_copies.contains_key(m.payload.as_slice()))
        .count();
    let missing: Vec<String> = acknowledged
        .iter()
        .filter(|m| !child_copies.contains_key(m.payload.as_slice()))
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    let mut duplicates: Vec<String> = child_copies
        .iter()
        .filter(|(_, copies)| copies.len() > 1)
        .map(|(payload, copies)| format!("{}x{}", String::from_utf8_lossy(payload), copies.len()))
        .collect();
    duplicates.sort_unstable();
    let mut answers: BTreeMap<Option<u16>, usize> = BTreeMap::new();
    for message in &sent {
        *answers.entry(message.status).or_default() += 1;
    }
    // Keyed parent records stored outside their key's partition were
    // rerouted while their owner was away.
    let rerouted = parent_stored
        .iter()
        .filter(|record| {
            !record.key.is_empty() && record.partition != key_partition(&record.key, PARTITIONS)
        })
        .count();
    let mut per_partition: BTreeMap<u32, usize> = BTreeMap::new();
    for record in &child_stored {
        *per_partition.entry(record.partition).or_default() += 1;
    }
    println!(
        "killed node {victim_id} (child partitions {stalled:?}; kept fed {fed:?}) for {away_for:?}, \
         child lag then {lag_during:?}; sent {}, acknowledged {}, answers by status (None: no \
         answer) {answers:?}; parent records {} ({rerouted} keyed ones rerouted off their key's \
         partition), child records {} by partition {per_partition:?} \
         (high watermarks after the catch-up {:?}), duplicated in the child {} (first: {:?})",
        sent.len(),
        acknowledged.len(),
        parent_stored.len(),
        child_stored.len(),
        child_stats
            .iter()
            .map(|(_, _, hwm)| hwm)
            .collect::<Vec<_>>(),
        duplicates.len(),
        &duplicates[..duplicates.len().min(10)],
    );
    assert_eq!(
        missing_in_parent, 0,
        "acknowledged records missing in the parent"
    );
    assert!(
        missing.is_empty(),
        "{} acknowledged parent records missing in the child: {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
    assert!(
        acknowledged.len() >= MESSAGES_BEFORE,
        "too few produces answered 202: {answers:?}"
    );
}
