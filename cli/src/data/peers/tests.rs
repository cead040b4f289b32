//! Two data nodes in one process, each with its own authenticated cluster
//! transport as `narad data` wires it: records accepted by one for a
//! partition the other owns land in the owner's partition log.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use narad_clock::{Clock, SystemClock};
use narad_dataplane::admin::LocalAdmin;
use narad_dataplane::dispatch::ReplicaLeader;
use narad_dataplane::ingress::ProduceMessage;
use narad_dataplane::metadata::MetadataReplica;
use narad_dataplane::node::{DataNode, DataNodeConfig, NodeServices};
use narad_dataplane::remote::AddressTable;
use narad_dataplane::topology::member_id;
use narad_dataplane::topology::{Destination, NodeId};
use narad_disk::{BackendChoice, open_backend};
use narad_meta::{
    Actor, AssignPartitions, Command, CreateTopic, IncarnationId, PartitionOwner, RegisterMember,
};
use narad_protocol::{ClusterAuth, ClusterSecret};

use super::Peers;

const ACCEPTING: NodeId = 1;
const OWNING: NodeId = 2;
const ORDERS_ID: u64 = 0xc3;

/// A ceiling that turns a hang into a failure; no speed is asserted.
const WAIT_MAX: Duration = Duration::from_secs(20);

fn auth() -> ClusterAuth {
    ClusterAuth::Secret(ClusterSecret::new(vec![9; 32]).expect("32 bytes"))
}

/// Each node its own clock, as each process has.
fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock::new())
}

/// The replica of `local`: both nodes alive, `orders` with every partition
/// owned by [`OWNING`].
fn replica(local: NodeId) -> Arc<MetadataReplica> {
    let replica = Arc::new(MetadataReplica::new(local));
    let apply = |command: Command| {
        replica
            .apply_next(&command)
            .expect("the metastore takes it");
    };
    for id in [ACCEPTING, OWNING] {
        apply(Command::RegisterMember(RegisterMember {
            id: member_id(id),
            http_addr: format!("node-{id}:http"),
            rpc_addr: format!("node-{id}:rpc"),
            at_ms: 1,
        }));
    }
    apply(Command::CreateTopic(CreateTopic::named(
        Actor::SecurityOff,
        "orders",
        IncarnationId::from_bits(ORDERS_ID),
        1,
    )));
    let partitions = replica.topic_meta("orders").expect("orders").partitions;
    apply(Command::AssignPartitions(AssignPartitions {
        topic: "orders".into(),
        id: IncarnationId::from_bits(ORDERS_ID),
        owners: (0..partitions)
            .map(|partition| PartitionOwner {
                partition,
                owner: member_id(OWNING),
            })
            .collect(),
    }));
    replica
}

/// Data node `id` under `dir`, serving commits on `peers` and sending
/// its own to the addresses in `addresses`.
fn start(
    id: NodeId,
    dir: &std::path::Path,
    peers: &Peers,
    addresses: &Arc<AddressTable>,
) -> DataNode {
    let replica = replica(id);
    let mut config = DataNodeConfig::new(dir);
    config.api.security = false;
    let services = NodeServices {
        disk: open_backend(BackendChoice::Auto).expect("disk backend"),
        leader: Arc::new(ReplicaLeader::new(Arc::clone(&replica))),
        remote: peers.remote_commit_target(addresses),
        admin: Arc::new(LocalAdmin::new(Arc::clone(&replica))),
        replica: Arc::clone(&replica),
        clock: Arc::clone(peers.clock()),
    };
    let node = tokio::task::block_in_place(|| DataNode::start(services, config)).expect("starts");
    peers.attach(&node, replica, addresses);
    node
}

/// One HTTP/1.1 request to `router`, served on a loopback port for it;
/// status and body.
async fn request(router: axum::Router, method: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("address");
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("writes");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("reads");
    server.abort();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_accepted_for_a_partition_another_node_owns_lands_in_its_log_and_is_consumed_through_the_accepting_node()
 {
    let dir = tempfile::tempdir().expect("temporary directory");
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let accepting_peers = Peers::bind(loopback, auth(), None, system_clock()).expect("binds");
    let owning_peers = Peers::bind(loopback, auth(), None, system_clock()).expect("binds");
    let addresses = Arc::new(AddressTable::new());
    addresses.set(OWNING, owning_peers.transport().local_addr());
    let owner = start(OWNING, &dir.path().join("owner"), &owning_peers, &addresses);
    let accepting = start(
        ACCEPTING,
        &dir.path().join("accepting"),
        &accepting_peers,
        &addresses,
    );

    let topic = accepting
        .api()
        .acceptor
        .producible_topic("orders")
        .expect("topic");
    for i in 0..3_u8 {
        let message = ProduceMessage {
            key: vec![i],
            partition: Some(0),
            payload: vec![b'm', i].into(),
            idempotency_key: Vec::new(),
        };
        accepting
            .api()
            .acceptor
            .accept(&topic, &message)
            .await
            .expect("accepted");
    }

    let destination = Destination::new("orders", 0);
    let deadline = Instant::now() + WAIT_MAX;
    while !accepting.drained() {
        assert!(
            Instant::now() < deadline,
            "the dispatch backlog never drained"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let landed = owner
        .logs()
        .get(&destination)
        .map(|log| log.high_watermark());
    assert_eq!(landed, Some(3));
    assert!(accepting.logs().get(&destination).is_none());

    // The accepting node owns nothing: its clients consume and ack the
    // owner's records through it.
    let (status, body) = request(
        accepting.router(),
        "GET",
        "/v1/topics/orders/consume?partition=0&wait=2s",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let message: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(message["partition"], 0);
    let handle = message["receipt_handle"].as_str().expect("leased");
    let ack = format!("/v1/topics/orders/ack?receipt_handle={handle}");
    assert_eq!(request(accepting.router(), "POST", &ack).await.0, 204);
    assert_eq!(
        request(accepting.router(), "POST", &ack).await.0,
        410,
        "a second ack of the same handle"
    );
    tokio::task::block_in_place(|| {
        accepting.shutdown();
        owner.shutdown();
    });
}
