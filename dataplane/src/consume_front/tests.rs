//! The consume front's routing policy on a manual clock: a queue consume
//! that finds nothing here or at the remote owner parks on this node and
//! re-probes the owner on the node's clock, so only the test moves time.
//!
//! The runtime is single-threaded, so a wake-up the clock causes runs
//! before the test looks again; the polls that wait for the front to reach
//! a step sleep on Tokio's timer and decide nothing.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use narad_clock::{Clock, ManualClock};
use narad_disk::Disk;
use narad_disk::sim::SimDisk;
use narad_protocol::{
    ClusterAuth, ClusterSecret, ConsumeAnswer, Inbound, Node, NodeConfig, Opcode, OperationLimit,
    Response, Router,
};

use super::ConsumeFront;
use crate::admin::LocalAdmin;
use crate::consume::service::{ConsumeRequest, Delivery};
use crate::dispatch::{NoRemoteTarget, ReplicaLeader};
use crate::forward::Forwarder;
use crate::metadata::MetadataReplica;
use crate::metrics::NodeMetrics;
use crate::node::{DataNode, DataNodeConfig, NodeServices};
use crate::remote::AddressTable;
use crate::testing::{register, topic};
use crate::topology::NodeId;

/// The node consuming.
const HERE: NodeId = 1;
/// The node owning every partition of [`TOPIC`].
const OWNER: NodeId = 2;
const TOPIC: &str = "remote";
/// The consume's long poll.
const WAIT: Duration = Duration::from_secs(5);
/// Turns a hang into a failure; never a timing assertion.
const CEILING: Duration = Duration::from_secs(30);
/// Yields the test gives the front to act on a clock move before it looks.
const SETTLE_YIELDS: usize = 100;

fn auth() -> ClusterAuth {
    ClusterAuth::Secret(ClusterSecret::new(vec![5; 32]).expect("32 bytes"))
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The metadata both nodes hold: [`TOPIC`] (3 partitions) all on
/// [`OWNER`].
fn replica() -> Arc<MetadataReplica> {
    let replica = Arc::new(MetadataReplica::new(HERE));
    register(&replica, HERE);
    register(&replica, OWNER);
    topic(&replica, TOPIC, 0xa1, 3, OWNER);
    replica
}

/// This data node, on `clock`.
fn data_node(replica: &Arc<MetadataReplica>, clock: &Arc<ManualClock>) -> DataNode {
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(21));
    let services = NodeServices {
        disk,
        replica: Arc::clone(replica),
        leader: Arc::new(ReplicaLeader::new(Arc::clone(replica))),
        remote: Arc::new(NoRemoteTarget),
        admin: Arc::new(LocalAdmin::new(Arc::clone(replica))),
        clock: Arc::clone(clock) as Arc<dyn Clock>,
    };
    DataNode::start(services, DataNodeConfig::new(Path::new("/node"))).expect("start")
}

/// An owner with nothing to hand out: it answers every probe empty and
/// counts them in `probes`.
fn empty_owner(probes: &Arc<AtomicUsize>) -> Node {
    let counted = Arc::clone(probes);
    let router = Router::new().route(
        Opcode::CONSUME,
        OperationLimit::new("probes", 64),
        move |_inbound: Inbound| {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(Response::message(&ConsumeAnswer {
                    records: Vec::new(),
                }))
            }
        },
    );
    Node::bind(NodeConfig::new(loopback(), auth()), router).expect("bind the owner")
}

/// This node's forwarder, on `clock`, finding [`OWNER`] at `owner`.
fn forwarder_to(
    owner: &Node,
    replica: Arc<MetadataReplica>,
    clock: &Arc<ManualClock>,
) -> Arc<Forwarder> {
    let caller = Node::bind(NodeConfig::new(loopback(), auth()), Router::new()).expect("bind");
    let addresses = Arc::new(AddressTable::new());
    addresses.set(OWNER, owner.local_addr());
    Forwarder::new(
        Arc::new(caller),
        addresses,
        replica,
        Arc::clone(clock) as Arc<dyn Clock>,
    )
}

/// Waits until the owner has been probed `count` times and the consume
/// is parked here again.
async fn parked_after_probe(node: &DataNode, probes: &AtomicUsize, count: usize) {
    tokio::time::timeout(CEILING, async {
        while probes.load(Ordering::SeqCst) != count || node.consume().parked(TOPIC) != 1 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("probe {count} and the park after it"));
}

/// Lets every task the last clock move woke run before the test looks.
async fn settle() {
    for _ in 0..SETTLE_YIELDS {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_parked_consume_re_probes_after_100_ms_doubling_to_1_s_until_its_wait_ends() {
    let clock = Arc::new(ManualClock::new(1_000));
    let replica = replica();
    let node = data_node(&replica, &clock);
    let probes = Arc::new(AtomicUsize::new(0));
    let owner = empty_owner(&probes);
    let forwarder = forwarder_to(&owner, replica, &clock);
    let service = Arc::clone(node.consume());
    let consume = tokio::spawn(async move {
        let metrics = NodeMetrics::new();
        let request = ConsumeRequest {
            topic: TOPIC.to_owned(),
            partition: None,
            max: 1,
            wait: WAIT,
        };
        ConsumeFront::new(&service, Some(&forwarder), &metrics)
            .consume(request)
            .await
            .map_err(|error| error.to_string())
    });
    parked_after_probe(&node, &probes, 1).await;

    // 100, 200, 400, 800, then 1 s apart; the last park is what is left
    // of the 5 s wait.
    let pauses_ms: [u64; 8] = [100, 200, 400, 800, 1_000, 1_000, 1_000, 500];
    for (parks, pause_ms) in pauses_ms.into_iter().enumerate() {
        clock.advance(pause_ms - 1);
        settle().await;
        assert_eq!(
            (node.consume().parked(TOPIC), probes.load(Ordering::SeqCst)),
            (1, parks + 1),
            "still parked 1 ms before pause {pause_ms} ms ends"
        );
        clock.advance(1);
        if parks + 1 < pauses_ms.len() {
            parked_after_probe(&node, &probes, parks + 2).await;
        }
    }

    let answer: Vec<Delivery> = tokio::time::timeout(CEILING, consume)
        .await
        .expect("the consume ends with its wait")
        .expect("task")
        .expect("consumed");
    assert!(answer.is_empty());
    assert_eq!(
        probes.load(Ordering::SeqCst),
        pauses_ms.len() + 1,
        "one last probe when the wait ends"
    );
    node.shutdown();
}
