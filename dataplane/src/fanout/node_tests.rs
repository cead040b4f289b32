//! Fan-out on a whole data node: records produced to a parent reach every
//! attached child from its attach point on, keys and keyless indexes kept;
//! a delay child never gets a record before its due time; cursors resume
//! from their files after a restart; a detach deletes the cursor file once
//! the leader confirms the old epoch is gone.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use narad_disk::Disk;
use narad_meta::{Actor, AttachChild, AttachEpoch, Command, DetachChild};
use narad_plog::Record;

use super::cursor_file::{self, Loaded};
use crate::ingress::ProduceMessage;
use crate::metadata::MetadataReplica;
use crate::node::{DataNode, DataNodeConfig};
use crate::partitions::partition_dir;
use crate::testing::{LOCAL_NODE, apply, read_all, register, start_node, topic};

fn start(disk: &Arc<dyn Disk>, replica: &Arc<MetadataReplica>, data_dir: &Path) -> DataNode {
    let mut config = DataNodeConfig::new(data_dir);
    config.fanout.linger_ms = 5;
    config.fanout.retry_ms = 100;
    config.fanout.confirm_defer_ms = 100;
    start_node(Arc::clone(disk), replica, config)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    // A ceiling that turns a hang into a failure, not a timing assertion.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn produce(node: &DataNode, topic: &str, messages: &[(&str, String)]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let acceptor = &node.api().acceptor;
    let target = acceptor.producible_topic(topic).expect("topic");
    for (key, payload) in messages {
        let message = ProduceMessage {
            key: key.as_bytes().to_vec(),
            partition: None,
            payload: bytes::Bytes::from(payload.clone()),
            idempotency_key: Vec::new(),
        };
        runtime
            .block_on(acceptor.accept(&target, &message))
            .expect("accept");
    }
}

/// Every visible record of `topic`'s partitions, through the node's logs.
fn records(node: &DataNode, topic: &str, partitions: u32) -> BTreeMap<u32, Vec<Record>> {
    let view = node.api().replica.view();
    let incarnation = view
        .topics
        .get(topic)
        .and_then(|t| t.incarnation_id.clone());
    (0..partitions)
        .map(|partition| {
            let destination = crate::topology::Destination::new(topic, partition);
            let log = node
                .logs()
                .resolve(&destination, incarnation.as_ref())
                .expect("log");
            (partition, read_all(&log))
        })
        .collect()
}

fn count(records: &BTreeMap<u32, Vec<Record>>) -> usize {
    records.values().map(Vec::len).sum()
}

fn attach(
    node: &DataNode,
    replica: &MetadataReplica,
    parent: &str,
    child: &str,
    delay_ms: i64,
    epoch: u64,
) {
    let offsets: Vec<u64> = records(node, parent, 3)
        .values()
        .map(|records| records.len() as u64)
        .collect();
    apply(
        replica,
        Command::AttachChild(AttachChild {
            actor: Actor::SecurityOff,
            parent: parent.into(),
            parent_id: None,
            child: child.into(),
            child_id: None,
            delay_ms: Some(delay_ms),
            attach_epoch: AttachEpoch::from_bits(epoch),
            attach_offsets: offsets,
        }),
    );
}

fn keyed(range: std::ops::Range<usize>) -> Vec<(&'static str, String)> {
    const KEYS: [&str; 5] = ["", "alpha", "beta", "", "gamma"];
    range
        .map(|i| (KEYS[i % KEYS.len()], format!("m{i}")))
        .collect()
}

fn replica_with(topics: &[(&str, u64)]) -> Arc<MetadataReplica> {
    let replica = Arc::new(MetadataReplica::new(LOCAL_NODE));
    register(&replica, LOCAL_NODE);
    for (name, id) in topics {
        topic(&replica, name, *id, 3, LOCAL_NODE);
    }
    replica
}

fn portable() -> Arc<dyn Disk> {
    Arc::new(narad_disk::portable::PortableDisk::new(2).expect("portable disk"))
}

#[test]
fn records_after_the_attach_point_reach_the_child_with_their_keys_and_indexes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = portable();
    let replica = replica_with(&[("orders", 0xa1), ("audit", 0xa2)]);
    let node = start(&disk, &replica, dir.path());
    produce(&node, "orders", &keyed(0..40));
    wait_until("the parent commits", || {
        count(&records(&node, "orders", 3)) == 40
    });
    attach(&node, &replica, "orders", "audit", 0, 7);
    produce(&node, "orders", &keyed(40..140));
    wait_until("the child to hold every post-attach record", || {
        count(&records(&node, "audit", 3)) >= 100
    });
    let parent = records(&node, "orders", 3);
    let child = records(&node, "audit", 3);
    for (partition, records) in &child {
        for record in records {
            let payload = String::from_utf8(record.payload.clone()).expect("utf8");
            let index: usize = payload[1..].parse().expect("index");
            assert!(
                index >= 40,
                "{payload} was produced before the attach point"
            );
            // Same key partitioner, same partition count: the child
            // partition equals the parent partition, keyed or not.
            let home = parent
                .iter()
                .find(|(_, records)| records.iter().any(|r| r.payload == record.payload))
                .map(|(p, _)| *p)
                .expect("in the parent");
            assert_eq!(home, *partition, "{payload}");
        }
    }
    assert_eq!(count(&child), 100, "exactly once without crashes");
    let report = node
        .api()
        .fanout
        .cursor("orders", 0, "audit")
        .expect("cursor runs");
    assert_eq!(report.high_watermark, parent[&0].len() as u64);
    let metrics = node.api().metrics.render();
    assert!(
        metrics.contains("narad_fanout_committed_total{parent=\"orders\",child=\"audit\"}"),
        "{metrics}"
    );
    node.shutdown();
}

#[test]
fn a_delay_child_gets_each_record_no_earlier_than_its_due_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = portable();
    let replica = replica_with(&[("orders", 0xa1), ("later", 0xa3)]);
    let node = start(&disk, &replica, dir.path());
    attach(&node, &replica, "orders", "later", 300, 8);
    produce(&node, "orders", &keyed(0..30));
    wait_until("the delay child to hold every record", || {
        count(&records(&node, "later", 3)) == 30
    });
    let parent = records(&node, "orders", 3);
    let committed: BTreeMap<Vec<u8>, u64> = parent
        .values()
        .flatten()
        .map(|r| (r.payload.clone(), r.committed_at_ms))
        .collect();
    for record in records(&node, "later", 3).values().flatten() {
        let parent_at = committed[&record.payload];
        assert!(
            record.committed_at_ms >= parent_at + 300,
            "delivered {} ms after the parent commit",
            record.committed_at_ms - parent_at
        );
    }
    node.shutdown();
}

#[test]
fn a_delay_child_gets_records_produced_one_by_one_over_time() {
    // Each head record falls due on its own; the cursor sleeps between
    // them and must wake for every one (a wake-up a millisecond early on
    // the runtime's clock once left a cursor asleep for good).
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = portable();
    let replica = replica_with(&[("orders", 0xa1), ("later", 0xa3)]);
    let node = start(&disk, &replica, dir.path());
    attach(&node, &replica, "orders", "later", 150, 10);
    for i in 0..25 {
        produce(&node, "orders", &keyed(i..i + 1));
        std::thread::sleep(Duration::from_millis(13));
    }
    wait_until("the delay child to hold every record", || {
        count(&records(&node, "later", 3)) == 25
    });
    node.shutdown();
}

#[test]
fn cursors_resume_from_their_files_after_a_restart_and_a_detach_deletes_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = portable();
    let replica = replica_with(&[("orders", 0xa1), ("audit", 0xa2)]);
    let node = start(&disk, &replica, dir.path());
    attach(&node, &replica, "orders", "audit", 0, 9);
    produce(&node, "orders", &keyed(0..60));
    wait_until("delivery", || count(&records(&node, "audit", 3)) == 60);
    let file = cursor_file::cursor_path(&partition_dir(dir.path(), "orders", 1), "audit");
    wait_until(
        "the cursor file",
        || matches!(cursor_file::load(&*disk, &file), Ok(Loaded::Current(p)) if p.next_offset == records(&node, "orders", 3)[&1].len() as u64),
    );
    node.shutdown();

    let node = start(&disk, &replica, dir.path());
    produce(&node, "orders", &keyed(60..90));
    wait_until("delivery after the restart", || {
        count(&records(&node, "audit", 3)) >= 90
    });
    // The cursor resumed where its files said: nothing was sent twice.
    assert_eq!(count(&records(&node, "audit", 3)), 90);

    apply(
        &replica,
        Command::DetachChild(DetachChild {
            actor: Actor::SecurityOff,
            parent: "orders".into(),
            child: "audit".into(),
        }),
    );
    wait_until("the detached link's cursor files to go", || {
        (0..3).all(|p| {
            let path = cursor_file::cursor_path(&partition_dir(dir.path(), "orders", p), "audit");
            matches!(cursor_file::load(&*disk, &path), Ok(Loaded::Absent))
        })
    });
    produce(&node, "orders", &keyed(90..100));
    wait_until("the parent commits", || {
        count(&records(&node, "orders", 3)) == 100
    });
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        count(&records(&node, "audit", 3)),
        90,
        "a detached child gets nothing more"
    );
    node.shutdown();
}

/// Each child partition's keys and payloads against the parent
/// partition's from `attach_offsets` on: the same records in the same
/// order (same partition counts, so each record keeps its partition).
fn assert_children_copy_the_parent(node: &DataNode, children: &[(&str, Vec<u64>)]) {
    let parent = records(node, "orders", 3);
    let fields = |records: &[Record]| -> Vec<(Vec<u8>, Vec<u8>)> {
        records
            .iter()
            .map(|r| (r.key.clone(), r.payload.clone()))
            .collect()
    };
    for (child, attach_offsets) in children {
        let copies = records(node, child, 3);
        for (partition, from) in attach_offsets.iter().enumerate() {
            let partition = partition as u32;
            let from = usize::try_from(*from).expect("offset");
            assert_eq!(
                fields(&copies[&partition]),
                fields(&parent[&partition][from..]),
                "{child} partition {partition}"
            );
        }
    }
}

#[test]
fn four_children_hold_exactly_the_parents_records_in_order_through_a_restart() {
    // One child attaches late (its cursor starts at its attach point while
    // the others are under way) and the node restarts (every cursor starts
    // again from its file).
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = portable();
    let names = ["c0", "c1", "c2", "late"];
    let mut topics = vec![("orders", 0xa1)];
    topics.extend(names.iter().zip(0xb0..).map(|(name, id)| (*name, id)));
    let replica = replica_with(&topics);
    let node = start(&disk, &replica, dir.path());
    let mut children = Vec::new();
    for (name, epoch) in names[..3].iter().zip(11..) {
        attach(&node, &replica, "orders", name, 0, epoch);
        children.push((*name, vec![0; 3]));
    }
    for batch in 0..4 {
        produce(&node, "orders", &keyed(batch * 50..batch * 50 + 50));
    }
    wait_until("the parent commits", || {
        count(&records(&node, "orders", 3)) == 200
    });
    let counts = records(&node, "orders", 3)
        .values()
        .map(|records| records.len() as u64)
        .collect();
    attach(&node, &replica, "orders", "late", 0, 14);
    children.push(("late", counts));
    produce(&node, "orders", &keyed(200..300));
    let delivered = |node: &DataNode, total: usize| {
        names
            .iter()
            .map(|name| count(&records(node, name, 3)))
            .zip([total, total, total, total - 200])
            .all(|(held, expected)| held >= expected)
    };
    wait_until("every child's copies", || delivered(&node, 300));
    assert_children_copy_the_parent(&node, &children);
    node.shutdown();

    let node = start(&disk, &replica, dir.path());
    produce(&node, "orders", &keyed(300..400));
    wait_until("every child's copies after the restart", || {
        delivered(&node, 400)
    });
    assert_children_copy_the_parent(&node, &children);
    node.shutdown();
}
