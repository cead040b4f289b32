//! Fixtures shared by the crate's tests: a replica with known topics and
//! users, a WAL on the simulated disk, and request helpers.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use narad_disk::Disk;
use narad_disk::sim::SimDisk;
use narad_wal::{Wal, WalOptions, WalRecord};

use narad_meta::{
    Actor, AssignPartitions, Command, CreateTopic, CreateUser, IncarnationId, MarkDead, NewLink,
    PartitionOwner, PasswordHash, RegisterMember, SeedAdmin,
};

use crate::metadata::{Grant, GrantAction, MetadataReplica};
use crate::topology::NodeId;
use crate::topology::member_id;

/// The node id tests run as.
pub(crate) const LOCAL_NODE: u64 = 1;

/// bcrypt cost for test users: the minimum, so tests stay fast.
const TEST_BCRYPT_COST: u32 = 4;

/// The seed of the crate's property tests: fixed, so every run checks the
/// same cases.
const PROPTEST_SEED: u64 = 0x6e61_7261_6407;

/// The process's clock, for a test that runs on real time.
pub(crate) fn system_clock() -> Arc<dyn narad_clock::Clock> {
    Arc::new(narad_clock::SystemClock::new())
}

/// Settings for a property test: 256 cases (or `PROPTEST_CASES` when set,
/// for a long run) from [`PROPTEST_SEED`], and no failure files (a failure
/// replays from the seed).
pub(crate) fn seeded_proptest_config() -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(256);
    proptest::test_runner::Config {
        cases,
        rng_seed: proptest::test_runner::RngSeed::Fixed(PROPTEST_SEED),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}

/// Applies `command` as the replica's next entry; the test's setup is
/// wrong if the metastore refuses it.
pub(crate) fn apply(replica: &MetadataReplica, command: Command) {
    if let Err(error) = replica.apply_next(&command) {
        panic!("the metastore refused {command:?}: {error}");
    }
}

/// Registers data node `node` as a live member.
pub(crate) fn register(replica: &MetadataReplica, node: NodeId) {
    apply(
        replica,
        Command::RegisterMember(RegisterMember {
            id: member_id(node),
            http_addr: format!("node-{node}:http"),
            rpc_addr: format!("node-{node}:rpc"),
            at_ms: 1,
        }),
    );
}

/// Marks registered node `node` dead, as the controller does.
pub(crate) fn mark_dead(replica: &MetadataReplica, node: NodeId) {
    let id = member_id(node);
    let observed_heartbeat_ms = replica
        .view()
        .metastore
        .member(&id)
        .map_or(0, |member| member.last_heartbeat_ms);
    apply(
        replica,
        Command::MarkDead(MarkDead {
            id,
            observed_heartbeat_ms,
        }),
    );
}

/// The create command of a topic with default settings, made with
/// security off.
pub(crate) fn create_command(name: &str, id: u64, partitions: u32) -> CreateTopic {
    CreateTopic {
        partitions: Some(i64::from(partitions)),
        ..CreateTopic::named(Actor::SecurityOff, name, IncarnationId::from_bits(id), 0)
    }
}

/// Places the listed partitions of `name` on their nodes, registering each
/// node first if it is not a member yet.
pub(crate) fn assign(replica: &MetadataReplica, name: &str, owners: &[(u32, NodeId)]) {
    for &(_, node) in owners {
        if replica.view().metastore.member(&member_id(node)).is_none() {
            register(replica, node);
        }
    }
    let id = replica
        .view()
        .metastore
        .topic(name)
        .map(|topic| topic.id.clone())
        .unwrap_or_else(|| panic!("no topic {name}"));
    let owners = owners
        .iter()
        .map(|&(partition, node)| PartitionOwner {
            partition,
            owner: member_id(node),
        })
        .collect();
    apply(
        replica,
        Command::AssignPartitions(AssignPartitions {
            topic: name.to_owned(),
            id,
            owners,
        }),
    );
}

/// Creates `create` and places every partition on `owner`.
pub(crate) fn place(replica: &MetadataReplica, create: CreateTopic, owner: NodeId) {
    let name = create.name.clone();
    let partitions = create.partitions.unwrap_or(3);
    apply(replica, Command::CreateTopic(create));
    let all: Vec<(u32, NodeId)> = (0..u32::try_from(partitions).unwrap_or(0))
        .map(|partition| (partition, owner))
        .collect();
    assign(replica, &name, &all);
}

/// Creates topic `name` (incarnation `id`) with `partitions` partitions,
/// all on `owner`.
pub(crate) fn topic(
    replica: &MetadataReplica,
    name: &str,
    id: u64,
    partitions: u32,
    owner: NodeId,
) {
    place(replica, create_command(name, id, partitions), owner);
}

/// A bcrypt hash of `password` at the test cost.
pub(crate) fn password_hash(password: &str) -> PasswordHash {
    let hash = bcrypt::hash(password, TEST_BCRYPT_COST).expect("bcrypt hash");
    PasswordHash::try_from(hash).expect("a bcrypt hash")
}

/// Seeds root user `name` (the metastore takes one only while it has no
/// user).
pub(crate) fn seed_root(replica: &MetadataReplica, name: &str, password: &str) {
    apply(
        replica,
        Command::SeedAdmin(SeedAdmin {
            username: name.to_owned(),
            password_hash: password_hash(password),
            at_ms: 0,
        }),
    );
}

/// Creates user `name` with `grants`, as root would.
pub(crate) fn add_user(replica: &MetadataReplica, name: &str, password: &str, grants: Vec<Grant>) {
    apply(
        replica,
        Command::CreateUser(CreateUser {
            actor: Actor::SecurityOff,
            username: name.to_owned(),
            password_hash: password_hash(password),
            grants,
            at_ms: 0,
        }),
    );
}

/// The incarnation id text of `bits`.
pub(crate) fn id_text(bits: u64) -> String {
    IncarnationId::from_bits(bits).as_str().to_owned()
}

/// A replica with topics `orders` (3 partitions, id `a1`), `legacy` (id
/// `b2`), `typed` (schema: object with integer `amount`, id `c3`),
/// `delayed` (a delay child of `legacy`, delay 60 s, id `d4`), all owned by
/// [`LOCAL_NODE`], and users `root`, `alice` (produce on `ord*`, `typed`,
/// `delayed`) and `bob` (no grants).
pub(crate) fn replica() -> Arc<MetadataReplica> {
    let replica = Arc::new(MetadataReplica::new(LOCAL_NODE));
    register(&replica, LOCAL_NODE);
    topic(&replica, "orders", 0xa1, 3, LOCAL_NODE);
    topic(&replica, "legacy", 0xb2, 3, LOCAL_NODE);
    let mut typed = create_command("typed", 0xc3, 3);
    typed.schema = Some(
        serde_json::json!({
            "type": "object",
            "properties": {"amount": {"type": "integer"}},
            "required": ["amount"]
        })
        .to_string(),
    );
    place(&replica, typed, LOCAL_NODE);
    let mut delayed = create_command("delayed", 0xd4, 3);
    delayed.parent = Some(NewLink {
        parent: "legacy".into(),
        parent_id: IncarnationId::from_bits(0xb2),
        fanout_delay_ms: Some(60_000),
        attach_epoch: narad_meta::AttachEpoch::from_bits(1),
        attach_offsets: vec![0; 3],
    });
    place(&replica, delayed, LOCAL_NODE);
    seed_root(&replica, "root", "root-pw");
    let alice = Grant {
        action: GrantAction::Produce,
        patterns: vec!["ord*".into(), "typed".into(), "delayed".into()],
    };
    add_user(&replica, "alice", "alice-pw", vec![alice]);
    add_user(&replica, "bob", "bob-pw", Vec::new());
    replica
}

/// A WAL on a fresh simulated disk.
pub(crate) fn sim_wal(seed: u64) -> (SimDisk, Arc<Wal>) {
    let sim = SimDisk::new(seed);
    let disk: Arc<dyn Disk> = Arc::new(sim.clone());
    let wal = Wal::open(disk, "/node/ingress/produce", WalOptions::default()).expect("open WAL");
    (sim, Arc::new(wal))
}

/// Every durable WAL record, decoded, with its sequence number.
pub(crate) fn wal_records(wal: &Wal) -> Vec<(u64, WalRecord)> {
    let mut reader = wal.reader(wal.oldest_seq()).expect("reader");
    let mut out = Vec::new();
    while let Some(frame) = reader.next_frame().expect("read frame") {
        out.push((
            frame.seq,
            WalRecord::decode(frame.payload).expect("decode record"),
        ));
    }
    out
}

/// An `Authorization` header value.
pub(crate) fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", BASE64.encode(format!("{user}:{password}")))
}

/// The services of a data node on `disk` following `replica`: leader
/// confirmation answered from the replica, no remote owners, topic changes
/// applied to the replica, the system clock.
pub(crate) fn node_services(
    disk: Arc<dyn Disk>,
    replica: &Arc<MetadataReplica>,
) -> crate::node::NodeServices {
    crate::node::NodeServices {
        disk,
        replica: Arc::clone(replica),
        leader: Arc::new(crate::dispatch::ReplicaLeader::new(Arc::clone(replica))),
        remote: Arc::new(crate::dispatch::NoRemoteTarget),
        admin: Arc::new(crate::admin::LocalAdmin::new(Arc::clone(replica))),
        clock: Arc::new(narad_clock::SystemClock::new()),
    }
}

/// Starts a data node with [`node_services`].
pub(crate) fn start_node(
    disk: Arc<dyn Disk>,
    replica: &Arc<MetadataReplica>,
    config: crate::node::DataNodeConfig,
) -> crate::node::DataNode {
    crate::node::DataNode::start(node_services(disk, replica), config).expect("start node")
}

/// Every record of `log` below its high watermark, in offset order.
///
/// # Panics
/// On a read error or an unreadable stretch: tests expect whole logs.
pub(crate) fn read_all(log: &narad_plog::PartitionLog) -> Vec<narad_plog::Record> {
    let mut out = Vec::new();
    let mut from = 0;
    loop {
        let batch = log
            .read(from, u64::MAX, narad_plog::ReadLimits::default())
            .expect("read");
        if batch.entries.is_empty() {
            return out;
        }
        for entry in batch.entries {
            match entry {
                narad_plog::ReadEntry::Record(record) => out.push(record),
                narad_plog::ReadEntry::Unreadable { offsets } => {
                    panic!("{}: unreadable offsets {offsets:?}", log.dir().display())
                }
            }
        }
        from = batch.next_offset;
    }
}

/// A data node serving its API on a loopback port, for tests that speak
/// raw TCP, until [`Served::stop`].
pub(crate) struct Served {
    /// The node.
    pub(crate) node: Arc<crate::node::DataNode>,
    /// Where it listens.
    pub(crate) address: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    /// Serves `node` on a free loopback port.
    pub(crate) async fn serve(node: crate::node::DataNode) -> Self {
        let node = Arc::new(node);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = {
            let node = Arc::clone(&node);
            tokio::spawn(async move {
                node.serve(listener, async {
                    let _ = stopped.await;
                })
                .await
            })
        };
        Self {
            node,
            address,
            stop,
            server,
        }
    }

    /// Stops serving gracefully; the node, still running.
    pub(crate) async fn stop_serving(self) -> crate::node::DataNode {
        self.stop.send(()).expect("stop");
        self.server.await.expect("server task").expect("serve");
        Arc::try_unwrap(self.node).expect("last handle")
    }

    /// Stops serving, then shuts the node down.
    pub(crate) async fn stop(self) {
        let node = self.stop_serving().await;
        tokio::task::spawn_blocking(move || node.shutdown())
            .await
            .expect("shutdown");
    }
}

/// A node RPC endpoint on loopback serving `router`, under the one
/// cluster secret every test endpoint shares.
pub(crate) fn loopback_rpc(router: narad_protocol::Router) -> narad_protocol::Node {
    use narad_protocol::{ClusterAuth, ClusterSecret, Node, NodeConfig};

    let auth = ClusterAuth::Secret(ClusterSecret::new(vec![7; 32]).expect("32 bytes"));
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    Node::bind(NodeConfig::new(loopback, auth), router).expect("bind a loopback endpoint")
}

/// A loopback endpoint serving node status (opcode 33) from `status`.
pub(crate) fn status_rpc(status: &Arc<crate::status::StatusSources>) -> narad_protocol::Node {
    let service = crate::status::NodeStatusService::new();
    service.attach(Arc::clone(status));
    loopback_rpc(service.route(narad_protocol::Router::new()))
}

/// Gives `state` a forwarder over a loopback endpoint of its own that
/// knows `peers`' addresses; returns that endpoint.
pub(crate) fn attach_forwarder(
    state: &crate::http::ApiState,
    peers: &[(NodeId, std::net::SocketAddr)],
) -> Arc<narad_protocol::Node> {
    let transport = Arc::new(loopback_rpc(narad_protocol::Router::new()));
    let addresses = Arc::new(crate::remote::AddressTable::new());
    for &(node, address) in peers {
        addresses.set(node, address);
    }
    let forwarder = crate::forward::Forwarder::new(
        Arc::clone(&transport),
        addresses,
        Arc::clone(&state.replica),
        Arc::new(narad_clock::SystemClock::new()),
    );
    assert!(
        state.forwarder.set(forwarder).is_ok(),
        "a forwarder already"
    );
    transport
}
