//! The produce path end to end in one process: HTTP accept, WAL, the
//! dispatcher runtime, the combiner and the partition logs; and crashes of
//! the simulated disk at seeded points.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use narad_disk::Disk;
use narad_disk::sim::{SimDisk, Tear};
use narad_meta::{Actor, Command, DeleteTopic};
use narad_plog::{LogConfig, PartitionLog};
use narad_wal::CheckpointConfig;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::dispatch::DispatchConfig;
use crate::ingress::ProduceMessage;
use crate::metadata::MetadataReplica;
use crate::node::dirs::DirError;
use crate::node::{DataNode, DataNodeConfig, NodeError, NodeServices};
use crate::partitions::partition_dir;
use crate::testing::{
    LOCAL_NODE, Served, apply, assign, basic, create_command, mark_dead, node_services, read_all,
    register, replica, start_node as start, topic,
};
use crate::topology::Destination;

pub(crate) const DATA_DIR: &str = "/node";
/// `storage.wal_dir` of the tests that keep the WAL apart.
const WAL_ROOT: &str = "/wal";

/// A stored record's key and payload.
type KeyedPayload = (Vec<u8>, Vec<u8>);

pub(crate) fn config(data_dir: &Path, seed: u64) -> DataNodeConfig {
    let mut config = DataNodeConfig::new(data_dir);
    config.seed = seed;
    config.checkpoint = CheckpointConfig {
        sync_delay: Duration::from_millis(5),
    };
    config.dispatch = DispatchConfig {
        reroute_grace: Duration::from_millis(200),
        ..DispatchConfig::default()
    };
    config
}

/// A data node other than [`LOCAL_NODE`], dead in the replicas of
/// [`with_dead_remote`].
const DEAD_REMOTE: u64 = LOCAL_NODE + 1;

/// A replica of [`LOCAL_NODE`] with `topics` (name, incarnation id, the
/// owner of each partition) created and placed, and [`DEAD_REMOTE`]
/// marked dead.
fn with_dead_remote(topics: &[(&str, u64, &[u64])]) -> Arc<MetadataReplica> {
    let replica = Arc::new(MetadataReplica::new(LOCAL_NODE));
    register(&replica, LOCAL_NODE);
    for (name, id, owners) in topics {
        let partitions = owners.len() as u32;
        apply(
            &replica,
            Command::CreateTopic(create_command(name, *id, partitions)),
        );
        let placed: Vec<(u32, u64)> = (0..partitions).zip(owners.iter().copied()).collect();
        assign(&replica, name, &placed);
    }
    mark_dead(&replica, DEAD_REMOTE);
    replica
}

/// A replica of [`LOCAL_NODE`] where `orders` (3 partitions, id `a1`)
/// exists but no partition is placed yet: its records wait in the WAL.
fn unplaced_orders() -> Arc<MetadataReplica> {
    let replica = Arc::new(MetadataReplica::new(LOCAL_NODE));
    register(&replica, LOCAL_NODE);
    apply(
        &replica,
        Command::CreateTopic(create_command("orders", 0xa1, 3)),
    );
    replica
}

/// Deletes topic `name`, as its owner would.
fn delete(replica: &MetadataReplica, name: &str) {
    apply(
        replica,
        Command::DeleteTopic(DeleteTopic {
            actor: Actor::SecurityOff,
            name: name.to_owned(),
            expected_id: None,
        }),
    );
}

/// Waits for `done`, polling; a ceiling, not a timing assertion: it only
/// turns a hang into a failure.
pub(crate) fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Every record of every partition of `topic`, read from disk: partition →
/// (key, payload) in offset order.
pub(crate) fn stored(
    disk: &Arc<dyn Disk>,
    data_dir: &Path,
    topic: &str,
    partitions: u32,
) -> BTreeMap<u32, Vec<KeyedPayload>> {
    (0..partitions)
        .map(|partition| {
            let dir = partition_dir(data_dir, topic, partition);
            let log = PartitionLog::open(
                Arc::clone(disk),
                &dir,
                LogConfig::default(),
                crate::testing::system_clock(),
            )
            .expect("open log");
            let records = read_all(&log)
                .into_iter()
                .map(|record| (record.key, record.payload))
                .collect();
            log.close().expect("close log");
            (partition, records)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_http_produces_all_land_in_their_partition_logs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk: Arc<dyn Disk> =
        Arc::new(narad_disk::portable::PortableDisk::new(2).expect("portable disk"));
    let replica = replica();
    let served = Served::serve(start(Arc::clone(&disk), &replica, config(dir.path(), 3))).await;
    let address = served.address;
    const CLIENTS: usize = 8;
    const PER_CLIENT: usize = 60;
    let auth = format!("Authorization: {}\r\n", basic("alice", "alice-pw"));
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let auth = auth.clone();
        clients.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            for i in 0..PER_CLIENT {
                let payload = format!("{{\"client\":{client},\"i\":{i}}}");
                let key = if i % 2 == 0 { format!("k{client}-{i}") } else { String::new() };
                let uri = if key.is_empty() {
                    "/v1/topics/orders/produce".to_owned()
                } else {
                    format!("/v1/topics/orders/produce?key={key}")
                };
                let (status, _) = http_over_tcp_as(address, "POST", &uri, &auth, &payload).await;
                assert_eq!(status, 202);
                sent.push((key.into_bytes(), payload.into_bytes()));
            }
            let batch = format!(
                r#"{{"messages":[{{"payload":"b{client}-0"}},{{"payload":"b{client}-1","key":"bk{client}"}}]}}"#
            );
            let (status, body) =
                http_over_tcp_as(address, "POST", "/v1/topics/orders/produce/batch", &auth, &batch).await;
            assert_eq!((status, body.as_str()), (202, "{\"accepted\":2}\n"));
            sent.push((Vec::new(), format!("\"b{client}-0\"").into_bytes()));
            sent.push((format!("bk{client}").into_bytes(), format!("\"b{client}-1\"").into_bytes()));
            sent
        }));
    }
    let mut produced = Vec::new();
    for client in clients {
        produced.extend(client.await.expect("client task"));
    }
    let total = produced.len() as u64;
    assert_eq!(served.node.wal().next_durable_seq(), total);
    let node = served.stop_serving().await;
    tokio::task::spawn_blocking(move || {
        wait_until("the checkpoint to reach the end of the WAL", || {
            node.drained()
        });
        wait_until("the checkpoint to be synced", || {
            node.checkpoint().synced() >= total
        });
        node.shutdown();
    })
    .await
    .expect("drain");

    let stored = stored(&disk, dir.path(), "orders", 3);
    let mut found: HashMap<(Vec<u8>, Vec<u8>), usize> = HashMap::new();
    for (partition, records) in &stored {
        for (key, payload) in records {
            if !key.is_empty() {
                let home = crate::ingress::partition::key_partition(key, 3);
                assert_eq!(home, *partition, "a keyed record is in its hash partition");
            }
            *found.entry((key.clone(), payload.clone())).or_default() += 1;
        }
    }
    for message in &produced {
        assert_eq!(
            found.get(message),
            Some(&1),
            "message {message:?} stored exactly once"
        );
    }
    assert_eq!(found.len(), produced.len());
}

#[test]
fn records_of_a_deleted_topic_are_discarded_after_leader_confirmation() {
    let sim = SimDisk::new(5);
    let disk: Arc<dyn Disk> = Arc::new(sim);
    // Nobody owns `orders` yet: its records wait in the WAL.
    let replica = unplaced_orders();
    let node = start(disk, &replica, config(Path::new(DATA_DIR), 1));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let topic = node
        .api()
        .acceptor
        .producible_topic("orders")
        .expect("topic");
    let message = ProduceMessage {
        key: Vec::new(),
        partition: Some(1),
        payload: bytes::Bytes::from_static(b"doomed"),
        idempotency_key: Vec::new(),
    };
    runtime
        .block_on(node.api().acceptor.accept(&topic, &message))
        .expect("accept");
    delete(&replica, "orders");
    wait_until("the discard", || node.drained());
    assert_eq!(node.dispatch_status().discarded.load(Ordering::Relaxed), 1);
    node.shutdown();
}

#[test]
fn records_for_a_dead_remote_owner_are_rerouted_to_a_local_sibling() {
    let sim = SimDisk::new(6);
    let disk: Arc<dyn Disk> = Arc::new(sim);
    // `orders`/0 is on another node, which then died; its siblings are
    // here.
    let replica = with_dead_remote(&[("orders", 0xa1, &[DEAD_REMOTE, LOCAL_NODE, LOCAL_NODE])]);
    let node = start(Arc::clone(&disk), &replica, config(Path::new(DATA_DIR), 1));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let topic = node
        .api()
        .acceptor
        .producible_topic("orders")
        .expect("topic");
    let message = ProduceMessage {
        key: Vec::new(),
        partition: Some(0),
        payload: bytes::Bytes::from_static(b"moved"),
        idempotency_key: Vec::new(),
    };
    runtime
        .block_on(node.api().acceptor.accept(&topic, &message))
        .expect("accept");
    wait_until("the reroute", || node.drained());
    node.shutdown();
    let stored = stored(&disk, Path::new(DATA_DIR), "orders", 3);
    assert_eq!(stored[&1], vec![(Vec::new(), b"moved".to_vec())]);
}

#[test]
fn a_partition_nobody_can_take_holds_the_whole_node_until_its_topic_goes_and_says_so() {
    let sim = SimDisk::new(7);
    let disk: Arc<dyn Disk> = Arc::new(sim);
    // Every partition of `stuck` is on a node that died: its records have
    // no sibling to go to. `orders` is here.
    let replica = with_dead_remote(&[
        ("stuck", 0xb1, &[DEAD_REMOTE; 3]),
        ("orders", 0xa1, &[LOCAL_NODE; 3]),
    ]);
    let node = start(Arc::clone(&disk), &replica, config(Path::new(DATA_DIR), 1));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let acceptor = &node.api().acceptor;
    let message = |payload: &'static [u8]| ProduceMessage {
        key: Vec::new(),
        partition: Some(0),
        payload: bytes::Bytes::from_static(payload),
        idempotency_key: Vec::new(),
    };
    // More than the reader's lookahead: 16 windows of 4,096 records.
    let stuck = acceptor.producible_topic("stuck").expect("topic");
    let batch = vec![message(b"waits"); 1_000];
    for _ in 0..66 {
        runtime
            .block_on(acceptor.accept_batch(&stuck, &batch))
            .expect("accept");
    }
    let orders = acceptor.producible_topic("orders").expect("topic");
    runtime
        .block_on(acceptor.accept(&orders, &message(b"healthy")))
        .expect("accept");
    let status = Arc::clone(node.dispatch_status());
    wait_until("the lookahead reported exhausted", || {
        status.lookahead_exhausted.load(Ordering::Relaxed)
    });
    assert!(!node.drained());
    // Deleting the topic lets its records go (after the leader confirms),
    // and the rest is read and committed.
    delete(&replica, "stuck");
    wait_until("everything dispatched", || node.drained());
    wait_until("the lookahead reported free", || {
        !status.lookahead_exhausted.load(Ordering::Relaxed)
    });
    assert_eq!(status.discarded.load(Ordering::Relaxed), 66_000);
    node.shutdown();
    let stored = stored(&disk, Path::new(DATA_DIR), "orders", 3);
    assert_eq!(stored[&0], vec![(Vec::new(), b"healthy".to_vec())]);
}

/// One seeded run: producers (single and batch accepts) until the seeded
/// ack count, a power cut of the simulated disk under everything, a
/// restart on the same directories (the WAL under `wal_dir` when given,
/// else under the data directory), and a check that every acknowledged
/// message is in a partition log. Returns the duplicates found.
fn crash_and_recover(seed: u64, wal_dir: Option<&Path>) -> usize {
    let sim = SimDisk::new(seed);
    let disk: Arc<dyn Disk> = Arc::new(sim.clone());
    let replica = replica();
    let mut rng = StdRng::seed_from_u64(seed);
    let crash_after: usize = rng.random_range(10..150);
    let node_config = || DataNodeConfig {
        wal_dir: wal_dir.map(Path::to_path_buf),
        ..config(Path::new(DATA_DIR), seed)
    };
    let node = start(Arc::clone(&disk), &replica, node_config());
    let acked: Arc<parking_lot::Mutex<HashSet<String>>> = Arc::default();
    let crashed = Arc::new(AtomicBool::new(false));
    let next_id = Arc::new(AtomicUsize::new(0));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let topic = node
        .api()
        .acceptor
        .producible_topic("orders")
        .expect("topic");
    let producers: Vec<_> = (0..4)
        .map(|producer| {
            let acceptor = Arc::clone(&node.api().acceptor);
            let topic = Arc::clone(&topic);
            let (acked, crashed, next_id, sim) = (
                Arc::clone(&acked),
                Arc::clone(&crashed),
                Arc::clone(&next_id),
                sim.clone(),
            );
            runtime.spawn(async move {
                let mut round = 0usize;
                while !crashed.load(Ordering::Acquire) {
                    round += 1;
                    let count = if round % 5 == producer { 3 } else { 1 };
                    let ids: Vec<String> = (0..count)
                        .map(|_| format!("m{}", next_id.fetch_add(1, Ordering::Relaxed)))
                        .collect();
                    let messages: Vec<ProduceMessage> = ids
                        .iter()
                        .map(|id| ProduceMessage {
                            key: if round.is_multiple_of(2) {
                                id.clone().into_bytes()
                            } else {
                                Vec::new()
                            },
                            partition: None,
                            payload: bytes::Bytes::from(id.clone().into_bytes()),
                            idempotency_key: Vec::new(),
                        })
                        .collect();
                    let outcome = if count == 1 {
                        acceptor.accept(&topic, &messages[0]).await.map(|_| ())
                    } else {
                        acceptor
                            .accept_batch(&topic, &messages)
                            .await
                            .map(|_| ())
                            .map_err(|refusal| refusal.error)
                    };
                    if outcome.is_err() {
                        break;
                    }
                    let mut acked = acked.lock();
                    acked.extend(ids);
                    if acked.len() >= crash_after && !crashed.swap(true, Ordering::AcqRel) {
                        sim.crash(Tear::LastWrite);
                    }
                }
            })
        })
        .collect();
    for producer in producers {
        runtime.block_on(producer).expect("producer task");
    }
    assert!(
        crashed.load(Ordering::Acquire),
        "seed {seed}: the power cut happened"
    );
    assert!(acked.lock().len() >= crash_after);
    node.abandon();
    drop(runtime);

    let node = start(Arc::clone(&disk), &replica, node_config());
    assert_eq!(node.wal().dir(), node_config().ingress_wal_dir());
    if wal_dir.is_some() {
        let default_wal = Path::new(DATA_DIR).join("ingress");
        assert!(!disk.exists(&default_wal).expect("exists"), "seed {seed}");
    }
    wait_until("dispatch to finish after the restart", || node.drained());
    node.shutdown();
    let stored = stored(&disk, Path::new(DATA_DIR), "orders", 3);
    let mut copies: HashMap<Vec<u8>, usize> = HashMap::new();
    for records in stored.values() {
        for (_, payload) in records {
            *copies.entry(payload.clone()).or_default() += 1;
        }
    }
    for id in acked.lock().iter() {
        assert!(
            copies.contains_key(id.as_bytes()),
            "seed {seed}: acknowledged {id} lost"
        );
    }
    copies.values().map(|count| count - 1).sum()
}

#[test]
fn every_acknowledged_message_survives_a_power_cut_at_seeded_points() {
    let mut duplicates = 0;
    for seed in 0..8 {
        duplicates += crash_and_recover(seed, None);
    }
    // Every record carries its WAL origin, so the records the dispatcher
    // sends again after the power cut are acknowledged by their partitions
    // without being stored twice (the partitions rebuild what they store
    // from their logs at the first commit).
    println!("duplicates over 8 crashes: {duplicates}");
    assert_eq!(duplicates, 0, "records stored twice after power cuts");
}

#[test]
fn every_acknowledged_message_survives_a_power_cut_with_the_wal_in_its_own_directory() {
    let mut duplicates = 0;
    for seed in 0..8 {
        duplicates += crash_and_recover(seed, Some(Path::new(WAL_ROOT)));
    }
    assert_eq!(duplicates, 0, "records stored twice after power cuts");
}

/// A node that ran with its WAL under the data directory is restarted with
/// `storage.wal_dir`: refused while the WAL is still there; once the WAL
/// directory is moved as the refusal says, the records it held waiting are
/// dispatched from the new place.
#[test]
fn a_wal_moved_as_the_refusal_says_keeps_its_waiting_records() {
    let root = tempfile::tempdir().expect("tempdir");
    let data = root.path().join("data");
    let wal_root = root.path().join("nvme");
    let disk: Arc<dyn Disk> =
        Arc::new(narad_disk::portable::PortableDisk::new(2).expect("portable disk"));
    // Nobody owns `orders` yet: its record waits in the WAL.
    let replica = unplaced_orders();
    let node = start(Arc::clone(&disk), &replica, config(&data, 1));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let topic = node
        .api()
        .acceptor
        .producible_topic("orders")
        .expect("topic");
    let message = ProduceMessage {
        key: Vec::new(),
        partition: Some(1),
        payload: bytes::Bytes::from_static(b"waiting"),
        idempotency_key: Vec::new(),
    };
    runtime
        .block_on(node.api().acceptor.accept(&topic, &message))
        .expect("accept");
    node.shutdown();

    let moved = DataNodeConfig {
        wal_dir: Some(wal_root.clone()),
        ..config(&data, 1)
    };
    let error = DataNode::start(node_services(Arc::clone(&disk), &replica), moved.clone())
        .expect_err("a WAL is left under the data directory");
    assert!(
        matches!(error, NodeError::Dirs(DirError::WalLeftBehind { .. })),
        "{error}"
    );
    assert!(!wal_root.exists(), "a refused start made {wal_root:?}");
    // Within one file system the copy, sync and removal come to a rename.
    std::fs::create_dir_all(wal_root.join("ingress")).expect("mkdir -p");
    std::fs::rename(
        data.join("ingress").join("produce"),
        wal_root.join("ingress").join("produce"),
    )
    .expect("moved");

    let node = start(Arc::clone(&disk), &replica, moved);
    assign(
        &replica,
        "orders",
        &[(0, LOCAL_NODE), (1, LOCAL_NODE), (2, LOCAL_NODE)],
    );
    wait_until("the waiting record to be dispatched", || node.drained());
    node.shutdown();
    let stored = stored(&disk, &data, "orders", 3);
    assert_eq!(stored[&1], vec![(Vec::new(), b"waiting".to_vec())]);
}

#[test]
fn a_topic_created_after_start_is_dispatched_once_assigned() {
    let sim = SimDisk::new(9);
    let disk: Arc<dyn Disk> = Arc::new(sim);
    let replica = replica();
    let node = start(Arc::clone(&disk), &replica, config(Path::new(DATA_DIR), 1));
    apply(
        &replica,
        Command::CreateTopic(create_command("fresh", 0xe5, 3)),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let topic = node
        .api()
        .acceptor
        .producible_topic("fresh")
        .expect("topic");
    let message = ProduceMessage {
        key: Vec::new(),
        partition: Some(2),
        payload: bytes::Bytes::from_static(b"early"),
        idempotency_key: Vec::new(),
    };
    runtime
        .block_on(node.api().acceptor.accept(&topic, &message))
        .expect("accept");
    assign(&replica, "fresh", &[(2, LOCAL_NODE)]);
    wait_until("the assigned partition to take the record", || {
        node.drained()
    });
    node.shutdown();
    let stored = stored(&disk, Path::new(DATA_DIR), "fresh", 3);
    assert_eq!(stored[&2], vec![(Vec::new(), b"early".to_vec())]);
}

#[test]
fn an_assignment_wakes_the_dispatcher_without_a_retry_timer() {
    let sim = SimDisk::new(14);
    let disk: Arc<dyn Disk> = Arc::new(sim);
    let replica = replica();
    let mut config = config(Path::new(DATA_DIR), 1);
    // Both backstops an hour away: only the replica's change can wake the
    // dispatcher within the test's ceiling.
    config.dispatch.unresolved_retry = Duration::from_secs(3_600);
    config.dispatch.rescan_interval = Duration::from_secs(3_600);
    let node = start(Arc::clone(&disk), &replica, config);
    apply(
        &replica,
        Command::CreateTopic(create_command("fresh", 0xe5, 3)),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let topic = node
        .api()
        .acceptor
        .producible_topic("fresh")
        .expect("topic");
    let message = |payload: &'static [u8]| ProduceMessage {
        key: Vec::new(),
        partition: Some(1),
        payload: bytes::Bytes::from_static(payload),
        idempotency_key: Vec::new(),
    };
    runtime
        .block_on(node.api().acceptor.accept(&topic, &message(b"waiting")))
        .expect("accept");
    // A record behind it, to a placed topic: once that one is stored, the
    // dispatcher has read the first and holds it for its partition.
    let orders = node
        .api()
        .acceptor
        .producible_topic("orders")
        .expect("topic");
    runtime
        .block_on(node.api().acceptor.accept(&orders, &message(b"behind")))
        .expect("accept");
    wait_until("the record behind it to be stored", || {
        node.logs()
            .get(&Destination::new("orders", 1))
            .is_some_and(|log| log.high_watermark() == 1)
    });
    assert!(!node.drained(), "the first record waits for its partition");
    assign(&replica, "fresh", &[(1, LOCAL_NODE)]);
    wait_until("the assignment to wake the dispatcher", || node.drained());
    node.shutdown();
    let stored = stored(&disk, Path::new(DATA_DIR), "fresh", 3);
    assert_eq!(stored[&1], vec![(Vec::new(), b"waiting".to_vec())]);
}

#[test]
fn the_wal_compacts_behind_the_synced_checkpoint() {
    let sim = SimDisk::new(12);
    let disk: Arc<dyn Disk> = Arc::new(sim);
    let replica = replica();
    let mut config = config(Path::new(DATA_DIR), 1);
    config.wal = narad_wal::WalOptions {
        segment_bytes: 64 * 1024,
        record_bytes_max: 16 * 1024,
        compact_rotate_bytes: 4 * 1024,
        ..narad_wal::WalOptions::default()
    };
    let node = start(disk, &replica, config);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let topic = node
        .api()
        .acceptor
        .producible_topic("orders")
        .expect("topic");
    for i in 0..200u32 {
        let message = ProduceMessage {
            key: Vec::new(),
            partition: Some(i % 3),
            payload: bytes::Bytes::from(vec![b'x'; 1024]),
            idempotency_key: Vec::new(),
        };
        runtime
            .block_on(node.api().acceptor.accept(&topic, &message))
            .expect("accept");
    }
    wait_until("dispatch", || node.drained());
    wait_until("the checkpoint to be synced", || {
        node.checkpoint().synced() >= 200
    });
    // Everything is dispatched and synced: every segment goes (200 records
    // of 1 KiB filled several 64 KiB segments from base 0), the active one
    // by rotation.
    wait_until("compaction down to one segment", || {
        node.wal().segment_bases() == vec![200]
    });
    node.shutdown();
}

#[test]
fn records_of_a_replaced_incarnation_are_discarded_and_the_new_one_commits() {
    let sim = SimDisk::new(13);
    let disk: Arc<dyn Disk> = Arc::new(sim);
    let replica = unplaced_orders();
    let node = start(Arc::clone(&disk), &replica, config(Path::new(DATA_DIR), 1));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let accept = |payload: &'static [u8]| {
        let topic = node
            .api()
            .acceptor
            .producible_topic("orders")
            .expect("topic");
        let message = ProduceMessage {
            key: Vec::new(),
            partition: Some(0),
            payload: bytes::Bytes::from_static(payload),
            idempotency_key: Vec::new(),
        };
        runtime
            .block_on(node.api().acceptor.accept(&topic, &message))
            .expect("accept");
    };
    accept(b"old incarnation");
    // Deleted and recreated under the same name while the record waited.
    delete(&replica, "orders");
    topic(&replica, "orders", 0xb2, 3, LOCAL_NODE);
    accept(b"new incarnation");
    wait_until("dispatch", || node.drained());
    assert_eq!(node.dispatch_status().discarded.load(Ordering::Relaxed), 1);
    node.shutdown();
    let stored = stored(&disk, Path::new(DATA_DIR), "orders", 3);
    assert_eq!(stored[&0], vec![(Vec::new(), b"new incarnation".to_vec())]);
}

/// One HTTP/1.1 request over a fresh TCP connection; the status and body.
async fn http_over_tcp(
    address: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    http_over_tcp_as(address, method, path, "", body).await
}

/// [`http_over_tcp`] with extra header lines (each ending in `\r\n`).
async fn http_over_tcp_as(
    address: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: narad\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("read response");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("status line");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A standalone node (security off) on `disk`, served on loopback.
async fn standalone(disk: &Arc<dyn Disk>) -> Served {
    let services = NodeServices::standalone(Arc::clone(disk), LOCAL_NODE);
    let mut config = config(Path::new(DATA_DIR), 1);
    config.api.security = false;
    Served::serve(DataNode::start(services, config).expect("start")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_node_serves_create_and_produce_over_tcp() {
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(14));
    let served = standalone(&disk).await;
    let address = served.address;
    let (status, body) = http_over_tcp(address, "GET", "/readyz", "").await;
    assert_eq!((status, body.as_str()), (200, "{\"status\":\"ready\"}\n"));
    let (status, _) = http_over_tcp(address, "POST", "/v1/topics", r#"{"name":"events"}"#).await;
    assert_eq!(status, 201);
    let (status, _) = http_over_tcp(
        address,
        "POST",
        "/v1/topics/events/produce?partition=2",
        r#"{"n":1}"#,
    )
    .await;
    assert_eq!(status, 202);
    let drained = Arc::clone(&served.node);
    tokio::task::spawn_blocking(move || wait_until("dispatch", || drained.drained()))
        .await
        .expect("wait");
    let (status, body) = http_over_tcp(address, "GET", "/v1/topics/events", "").await;
    assert_eq!(status, 200);
    let described: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(described["partition_stats"][2]["high_watermark"], 1);
    let node = served.stop_serving().await;
    assert!(node.api().health.shutting_down.load(Ordering::Acquire));
    tokio::task::spawn_blocking(move || node.shutdown())
        .await
        .expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_retried_with_its_idempotency_key_is_stored_once_in_the_keys_partition() {
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(15));
    let served = standalone(&disk).await;
    let address = served.address;
    let body = r#"{"name":"events","partitions":4}"#;
    let (status, _) = http_over_tcp(address, "POST", "/v1/topics", body).await;
    assert_eq!(status, 201);
    let path = "/v1/topics/events/produce";
    for attempt in 0..3 {
        let payload = format!(r#"{{"attempt":{attempt}}}"#);
        let (status, body) = http_over_tcp_as(
            address,
            "POST",
            path,
            "Idempotency-Key: order-17\r\n",
            &payload,
        )
        .await;
        assert_eq!(status, 202, "{body}");
    }
    // The batch field is the per-message form; a key the header stored is
    // recognised there too.
    let batch = r#"{"messages":[{"payload":"b","idempotency_key":"order-17"},{"payload":"c","idempotency_key":"order-18"}]}"#;
    let (status, body) =
        http_over_tcp(address, "POST", "/v1/topics/events/produce/batch", batch).await;
    assert_eq!((status, body.as_str()), (202, "{\"accepted\":2}\n"));
    for bad in [
        "Idempotency-Key: has space\r\n",
        &format!("Idempotency-Key: {}\r\n", "k".repeat(257)),
    ] {
        let (status, body) = http_over_tcp_as(address, "POST", path, bad, "{}").await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body.contains("invalid idempotency key"), "{body}");
    }
    let empty = r#"{"messages":[{"payload":"d","idempotency_key":""}]}"#;
    let (status, _) =
        http_over_tcp(address, "POST", "/v1/topics/events/produce/batch", empty).await;
    assert_eq!(status, 400);
    let drained = Arc::clone(&served.node);
    tokio::task::spawn_blocking(move || wait_until("dispatch", || drained.drained()))
        .await
        .expect("wait");
    served.stop().await;
    let stored = stored(&disk, Path::new(DATA_DIR), "events", 4);
    let home = crate::ingress::partition::key_partition(b"order-17", 4);
    let all: Vec<(u32, Vec<u8>)> = stored
        .iter()
        .flat_map(|(partition, records)| records.iter().map(|(_, p)| (*partition, p.clone())))
        .collect();
    assert_eq!(all.len(), 2, "one copy per key: {all:?}");
    assert!(
        all.contains(&(home, br#"{"attempt":0}"#.to_vec())),
        "{all:?}"
    );
    let other = crate::ingress::partition::key_partition(b"order-18", 4);
    assert!(all.contains(&(other, br#""c""#.to_vec())), "{all:?}");
}
