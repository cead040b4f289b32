//! A data node's incarnation housekeeping, on a real directory (the
//! simulated disk cannot rename directories): a deleted topic's directory
//! is quarantined and removed only after the leader confirms, and a
//! directory of a topic the replica never had is retired and removed once
//! the leader confirms its incarnation gone.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use narad_disk::Disk;
use narad_disk::portable::PortableDisk;
use narad_meta::{Actor, Command, CreateTopic, DeleteTopic};
use narad_plog::LogConfig;
use tempfile::TempDir;

use super::{DataNode, DataNodeConfig, HousekeepingConfig, NodeServices};
use crate::commit::LocalLogs;
use crate::dispatch::{GoneQuestion, LeaderConfirm, ReplicaLeader};
use crate::metadata::MetadataReplica;
use crate::testing::{apply, create_command, id_text, place};
use crate::topology::Destination;

const NODE: u64 = 1;
/// The incarnation id of `orders` (and of the orphaned `ghost`), as bits.
const ORDERS_ID: u64 = 0xd4;

/// A ceiling that turns a hang into a failure; no speed is asserted.
const WAIT_MAX: Duration = Duration::from_secs(20);

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_MAX;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Answers "not gone" until opened, then what the replica says.
#[derive(Debug)]
struct GatedLeader {
    open: AtomicBool,
    asked: AtomicUsize,
    replica: ReplicaLeader,
}

impl LeaderConfirm for GatedLeader {
    fn confirm_gone(&self, question: &GoneQuestion) -> Result<bool, String> {
        self.asked.fetch_add(1, Ordering::AcqRel);
        if self.open.load(Ordering::Acquire) {
            self.replica.confirm_gone(question)
        } else {
            Ok(false)
        }
    }
}

fn portable() -> Arc<dyn Disk> {
    Arc::new(PortableDisk::new(1).expect("portable disk"))
}

/// A standalone node under `data_dir` whose replica holds `topics`, every
/// partition placed on the node, from the start (so the housekeeping's
/// first tick sees them), whose housekeeping ticks every few milliseconds
/// and asks `GatedLeader` (returned, closed).
fn start(
    disk: Arc<dyn Disk>,
    data_dir: &Path,
    topics: Vec<CreateTopic>,
) -> (DataNode, Arc<GatedLeader>) {
    let mut services = NodeServices::standalone(disk, NODE);
    for topic in topics {
        place(&services.replica, topic, NODE);
    }
    let leader = Arc::new(GatedLeader {
        open: AtomicBool::new(false),
        asked: AtomicUsize::new(0),
        replica: ReplicaLeader::new(Arc::clone(&services.replica)),
    });
    services.leader = Arc::clone(&leader) as Arc<dyn LeaderConfirm>;
    let mut config = DataNodeConfig::new(data_dir);
    config.housekeeping = HousekeepingConfig {
        tick: Duration::from_millis(5),
        stats_interval: Duration::from_millis(5),
        sweep_interval: Duration::from_millis(5),
    };
    let node = DataNode::start(services, config).expect("node starts");
    (node, leader)
}

fn topics(dir: &TempDir) -> PathBuf {
    dir.path().join("topics")
}

fn stale_copy(dir: &TempDir, topic: &str, id: &str) -> PathBuf {
    topics(dir).join(format!("{topic}.stale-{id}"))
}

fn replica_of(node: &DataNode) -> &MetadataReplica {
    &node.api().replica
}

#[test]
fn a_deleted_topics_directory_is_quarantined_then_removed_once_the_leader_confirms() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let orders = create_command("orders", ORDERS_ID, 3);
    let (node, leader) = start(portable(), dir.path(), vec![orders]);
    let replica = replica_of(&node);
    // The gauges are set at the end of a tick: from then on the
    // housekeeping remembers `orders`.
    wait_until("the housekeeping's first tick", || {
        node.api()
            .metrics
            .render()
            .contains("narad_quarantined_copies")
    });
    node.logs()
        .resolve(
            &Destination::new("orders", 0),
            Some(&Arc::from(id_text(ORDERS_ID))),
        )
        .expect("log opens");
    assert!(topics(&dir).join("orders").exists());

    apply(
        replica,
        Command::DeleteTopic(DeleteTopic {
            actor: Actor::SecurityOff,
            name: "orders".into(),
            expected_id: None,
        }),
    );
    let stale = stale_copy(&dir, "orders", &id_text(ORDERS_ID));
    wait_until("the directory renamed to its quarantined name", || {
        stale.exists() && !topics(&dir).join("orders").exists()
    });
    let metrics = &node.api().metrics;
    wait_until("the quarantine gauge to count the copy", || {
        metrics.render().contains("narad_quarantined_copies 1")
    });

    leader.open.store(true, Ordering::Release);
    wait_until("the quarantined copy removed", || !stale.exists());
    node.shutdown();
}

#[test]
fn a_directory_of_a_topic_the_replica_never_had_is_kept_until_the_leader_confirms_it_gone() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let disk = portable();
    let earlier = LocalLogs::new(Arc::clone(&disk), dir.path(), LogConfig::default());
    earlier
        .resolve(
            &Destination::new("ghost", 0),
            Some(&Arc::from(id_text(ORDERS_ID))),
        )
        .expect("log opens");
    earlier.close_all();

    let (node, leader) = start(disk, dir.path(), Vec::new());
    wait_until("the leader asked twice", || {
        leader.asked.load(Ordering::Acquire) >= 2
    });
    assert!(topics(&dir).join("ghost").exists());

    leader.open.store(true, Ordering::Release);
    let stale = stale_copy(&dir, "ghost", &id_text(ORDERS_ID));
    wait_until("the orphan directory retired and swept", || {
        !topics(&dir).join("ghost").exists() && !stale.exists()
    });
    node.shutdown();
}
