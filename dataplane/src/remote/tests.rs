//! Remote commits end to end over loopback QUIC: a sender's commit order,
//! made by the real dispatcher, through [`RemoteCommitTarget`] into another
//! node's partition log; the owner's refusals; the fallback for owners that
//! do not know the incarnation section.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use narad_clock::{Clock, ManualClock, SystemClock};
use narad_disk::Disk;
use narad_disk::sim::SimDisk;
use narad_meta::{Command as MetaCommand, CreateTopic};
use narad_plog::{LogConfig, ReadEntry, ReadLimits, Record};
use narad_protocol::codec::encode_message;
use narad_protocol::commit::{
    BatchRecord, CommitProduceBatch, CommitProduceBatchAnswer, IncarnationId, NOT_OWNER,
    decode_commit_request, is_unsupported_operation,
};
use narad_protocol::{
    CallError, ClusterAuth, ClusterSecret, Inbound, Lane, Node, NodeConfig, Opcode, OperationLimit,
    Request, Response, Router, RpcError, Status,
};
use narad_wal::CheckpointConfig;

use super::{AddressTable, CommitService, LEGACY_OWNER_TTL_MS, OwnerAddresses, RemoteCommitTarget};
use crate::admin::LocalAdmin;
use crate::commit::Combiners;
use crate::dispatch::ReplicaLeader;
use crate::dispatch::targets::Event;
use crate::dispatch::{
    Command, CommitDone, CommitOrder, CommitOutcome, CommitTarget, DispatchConfig, Dispatcher,
    RecordMeta, WalPayload,
};
use crate::ingress::ProduceMessage;
use crate::metadata::MetadataReplica;
use crate::metrics::NodeMetrics;
use crate::node::{DataNode, DataNodeConfig, NodeServices};
use crate::partitions::LocalLogs;
use crate::testing::{apply, assign, create_command, place, register, topic};
use crate::topology::{Destination, NodeId};
use narad_disk::queue::Received;

/// Generous bound on waits for an outcome that must come; never a
/// performance claim.
const SIGNAL_WAIT: Duration = Duration::from_secs(20);

const SENDER: NodeId = 1;
const OWNER: NodeId = 2;
const ORDERS_ID: &str = "00000000000000a1";
const RECREATED_ID: &str = "00000000000000b2";
const CREATED_AT_MS: u64 = 1_700_000_000_000;

fn auth() -> ClusterAuth {
    ClusterAuth::Secret(ClusterSecret::new(vec![7; 32]).expect("32 bytes"))
}

fn bind(router: Router) -> Node {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    Node::bind(NodeConfig::new(loopback, auth()), router).expect("bind")
}

/// The create command of `orders` (3 partitions) under incarnation
/// `orders_id`.
fn create_orders(orders_id: &str) -> CreateTopic {
    let mut orders = create_command("orders", 0, 3);
    orders.id = narad_meta::IncarnationId::try_from(orders_id.to_owned()).expect("an id");
    orders
}

/// A replica of `local` where `orders` (incarnation `orders_id`) and
/// `legacy` have every partition owned by `owner`. The metastore gives
/// every topic an incarnation id; the tests send `legacy`'s records without
/// one, as records accepted into WAL format 1 are.
fn replica(local: NodeId, owner: NodeId, orders_id: &str) -> Arc<MetadataReplica> {
    let replica = Arc::new(MetadataReplica::new(local));
    place(&replica, create_orders(orders_id), owner);
    topic(&replica, "legacy", 0xc3, 3, owner);
    replica
}

/// A data node's partition logs and combiners on a simulated disk.
fn combiners(replica: Arc<MetadataReplica>) -> Arc<Combiners> {
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(11));
    let logs = Arc::new(LocalLogs::new(
        disk,
        "/owner",
        LogConfig::default(),
        crate::testing::system_clock(),
    ));
    Arc::new(Combiners::new(logs, replica, Arc::new(NodeMetrics::new())))
}

/// The owning node: its combiners, and its transport serving opcode 11.
/// Its replica says `orders` (incarnation `orders_id`) and `legacy` are
/// owned by `owner_of_topics`.
fn owning(owner_of_topics: NodeId, orders_id: &str) -> (Arc<Combiners>, Node) {
    let replica = replica(OWNER, owner_of_topics, orders_id);
    let combiners = combiners(Arc::clone(&replica));
    let service = CommitService::with_combiners(Arc::clone(&combiners), replica);
    (combiners, bind(service.route(Router::new())))
}

/// A clock that moves only when a test moves it.
fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(1_000))
}

/// A sender: its transport and a target that finds `OWNER` at `owner_addr`,
/// on `clock`.
fn sender(owner_addr: SocketAddr, clock: Arc<dyn Clock>) -> RemoteCommitTarget {
    let addresses = Arc::new(AddressTable::new());
    addresses.set(OWNER, owner_addr);
    RemoteCommitTarget::new(
        Arc::new(bind(Router::new())),
        addresses,
        tokio::runtime::Handle::current(),
        clock,
    )
}

/// One record for [`order`]: key, payload, incarnation id.
type Input = (&'static str, &'static str, Option<&'static str>);

/// The commit order the dispatcher on the sender makes for `records`, all
/// accepted for `topic`/`partition`.
fn order(
    sender_replica: &MetadataReplica,
    topic: &str,
    partition: u32,
    records: &[Input],
) -> CommitOrder<WalPayload> {
    let mut machine = Dispatcher::new(DispatchConfig::default(), 0);
    let now = Duration::ZERO;
    machine.durable_advanced(records.len() as u64);
    for (seq, (key, payload, id)) in (0_u64..).zip(records) {
        assert_eq!(machine.next_read(sender_replica, now), Some(seq));
        let meta = RecordMeta {
            home: Destination::new(topic, partition),
            bytes: 64,
            incarnation: id.map(Arc::from),
        };
        let record = WalPayload {
            key: Bytes::from_static(key.as_bytes()),
            payload: Bytes::from_static(payload.as_bytes()),
            created_at_unix_ms: CREATED_AT_MS,
            origin: None,
            idempotency_key: Bytes::new(),
        };
        machine.place(seq, meta, record, sender_replica, now);
    }
    machine
        .poll(sender_replica, now)
        .into_iter()
        .find_map(|command| match command {
            Command::Commit(order) => Some(order),
            _ => None,
        })
        .expect("the dispatcher orders a commit")
}

/// Runs `order` through `target`; the outcome and how many records came
/// back with it.
async fn run(
    target: &RemoteCommitTarget,
    order: CommitOrder<WalPayload>,
) -> (CommitOutcome, usize) {
    assert!(!order.local, "the order goes to another node");
    let (events, receiver) = narad_disk::queue::unbounded();
    target.start(order, CommitDone::new(events, 0));
    let event = tokio::task::spawn_blocking(move || {
        receiver.recv_until(Some(Instant::now() + SIGNAL_WAIT))
    })
    .await
    .expect("waiter");
    match event {
        Received::Item(Event::CommitDone {
            outcome, records, ..
        }) => (outcome, records.len()),
        other => panic!("unexpected event {other:?}"),
    }
}

fn records_in(combiners: &Combiners, topic: &str, partition: u32) -> Vec<Record> {
    let Some(log) = combiners.logs().get(&Destination::new(topic, partition)) else {
        return Vec::new();
    };
    let read = log
        .read(0, u64::MAX, ReadLimits::default())
        .expect("read the log");
    read.entries
        .into_iter()
        .map(|entry| match entry {
            ReadEntry::Record(record) => record,
            ReadEntry::Unreadable { .. } => panic!("unreadable record"),
        })
        .collect()
}

fn batch(topic: &str, partition: u32, id: Option<&str>) -> CommitProduceBatch {
    let record = BatchRecord {
        key: Bytes::new(),
        payload: Bytes::from_static(b"raw"),
        created_at_unix_ms: CREATED_AT_MS,
    };
    let id = id.map(|text| IncarnationId::parse(text).expect("an id"));
    CommitProduceBatch::new(topic, partition, [(record, id)])
}

async fn call(caller: &Node, peer: SocketAddr, body: Bytes) -> Result<Response, CallError> {
    let request = Request::new(Opcode::COMMIT_PRODUCE_BATCH, body);
    caller
        .call_with_timeout(peer, Lane::Produce, request, SIGNAL_WAIT)
        .await
}

fn rejection(answer: Result<Response, CallError>) -> RpcError {
    match answer {
        Err(CallError::Rejected(error)) => error,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_order_lands_in_the_owners_partition_log() {
    let (owned, owner) = owning(OWNER, ORDERS_ID);
    let target = sender(owner.local_addr(), manual_clock());
    let inputs: [Input; 3] = [
        ("k1", "first payload", Some(ORDERS_ID)),
        ("", "second", Some(ORDERS_ID)),
        ("k3", "third, a little longer", Some(ORDERS_ID)),
    ];
    let order = order(&replica(SENDER, OWNER, ORDERS_ID), "orders", 1, &inputs);

    assert_eq!(run(&target, order).await, (CommitOutcome::Committed, 3));

    let stored = records_in(&owned, "orders", 1);
    assert_eq!(stored.len(), inputs.len());
    for (record, (key, payload, _)) in stored.iter().zip(inputs) {
        assert_eq!(record.key, key.as_bytes());
        assert_eq!(record.payload, payload.as_bytes());
    }
    assert_eq!(
        stored
            .iter()
            .map(|record| record.offset)
            .collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_without_an_incarnation_commit_by_name() {
    let (owned, owner) = owning(OWNER, ORDERS_ID);
    let target = sender(owner.local_addr(), manual_clock());
    // `legacy` has an incarnation id (every topic has one); the record
    // has none, as one written in WAL format 1.
    let order = order(
        &replica(SENDER, OWNER, ORDERS_ID),
        "legacy",
        0,
        &[("", "no id", None)],
    );

    assert_eq!(run(&target, order).await, (CommitOutcome::Committed, 1));
    assert_eq!(records_in(&owned, "legacy", 0).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_live_incarnation_is_refused_412_naming_both_ids() {
    let (owned, owner) = owning(OWNER, RECREATED_ID);
    let caller = bind(Router::new());

    let answer = call(
        &caller,
        owner.local_addr(),
        encode_message(&batch("orders", 0, Some(ORDERS_ID))),
    )
    .await;

    let error = rejection(answer);
    assert_eq!(error.status, Status::PRECONDITION_FAILED);
    assert!(
        error.message.contains(ORDERS_ID) && error.message.contains(RECREATED_ID),
        "{error}"
    );
    assert!(records_in(&owned, "orders", 0).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_412_reaches_the_dispatcher_as_the_retriable_incarnation_mismatch() {
    let (owned, owner) = owning(OWNER, RECREATED_ID);
    let target = sender(owner.local_addr(), manual_clock());
    let order = order(
        &replica(SENDER, OWNER, ORDERS_ID),
        "orders",
        2,
        &[("", "accepted before the recreate", Some(ORDERS_ID))],
    );

    assert_eq!(
        run(&target, order).await,
        (CommitOutcome::IncarnationMismatch, 1)
    );
    assert!(records_in(&owned, "orders", 2).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_does_not_own_the_partition_answers_421() {
    let third: NodeId = 3;
    let (owned, owner) = owning(third, ORDERS_ID);
    let caller = bind(Router::new());

    let answer = call(
        &caller,
        owner.local_addr(),
        encode_message(&batch("orders", 0, Some(ORDERS_ID))),
    )
    .await;

    assert_eq!(rejection(answer).status, NOT_OWNER);
    assert!(records_in(&owned, "orders", 0).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_421_fails_the_commit() {
    let (_, owner) = owning(3, ORDERS_ID);
    let target = sender(owner.local_addr(), manual_clock());
    let order = order(
        &replica(SENDER, OWNER, ORDERS_ID),
        "orders",
        0,
        &[("", "moved away", Some(ORDERS_ID))],
    );

    assert_eq!(run(&target, order).await, (CommitOutcome::Failed, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_trailing_field_is_an_unsupported_operation_and_appends_nothing() {
    let (owned, owner) = owning(OWNER, ORDERS_ID);
    let caller = bind(Router::new());
    let mut body = encode_message(&batch("orders", 0, Some(ORDERS_ID))).to_vec();
    body.extend([0, 0, 0, 1]);

    let error = rejection(call(&caller, owner.local_addr(), Bytes::from(body)).await);

    assert_eq!(error.status, Status::BAD_REQUEST);
    assert!(is_unsupported_operation(&error), "{error}");
    assert!(records_in(&owned, "orders", 0).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_without_combiners_answers_503() {
    let owner = bind(CommitService::new().route(Router::new()));
    let caller = bind(Router::new());

    let answer = call(
        &caller,
        owner.local_addr(),
        encode_message(&batch("orders", 0, None)),
    )
    .await;

    assert_eq!(rejection(answer).status, Status::UNAVAILABLE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_without_a_known_address_fails_the_commit() {
    let target = RemoteCommitTarget::new(
        Arc::new(bind(Router::new())),
        Arc::new(AddressTable::new()),
        tokio::runtime::Handle::current(),
        manual_clock(),
    );
    let order = order(
        &replica(SENDER, OWNER, ORDERS_ID),
        "orders",
        0,
        &[("", "nowhere to go", Some(ORDERS_ID))],
    );

    assert_eq!(run(&target, order).await, (CommitOutcome::Failed, 1));
}

/// What an owner from before the incarnation section does: it reads the
/// older shape, and refuses anything after it as an unknown field.
#[derive(Debug, Default)]
struct OlderOwner {
    refused_with_ids: AtomicUsize,
    committed_without_ids: AtomicUsize,
}

impl OlderOwner {
    fn router(self: &Arc<Self>) -> Router {
        let owner = Arc::clone(self);
        Router::new().route(
            Opcode::COMMIT_PRODUCE_BATCH,
            OperationLimit::messaging(),
            move |inbound: Inbound| {
                let owner = Arc::clone(&owner);
                async move { owner.serve(&inbound) }
            },
        )
    }

    fn serve(&self, inbound: &Inbound) -> Result<Response, RpcError> {
        let batch = decode_commit_request(inbound.request.body.clone())?;
        if batch.has_incarnations() {
            self.refused_with_ids.fetch_add(1, Ordering::SeqCst);
            return Err(RpcError::unsupported_operation(
                Opcode::COMMIT_PRODUCE_BATCH,
            ));
        }
        self.committed_without_ids.fetch_add(1, Ordering::SeqCst);
        let records = batch.records().len() as u64;
        Ok(Response::message(&CommitProduceBatchAnswer {
            offsets: 0..records,
            already_stored: 0,
        }))
    }

    fn counts(&self) -> (usize, usize) {
        (
            self.refused_with_ids.load(Ordering::SeqCst),
            self.committed_without_ids.load(Ordering::SeqCst),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_refusing_ids_gets_the_batch_again_without_them() {
    let older = Arc::new(OlderOwner::default());
    let owner = bind(older.router());
    let target = sender(owner.local_addr(), manual_clock());
    let order = order(
        &replica(SENDER, OWNER, ORDERS_ID),
        "orders",
        0,
        &[("", "a", Some(ORDERS_ID)), ("", "b", Some(ORDERS_ID))],
    );

    assert_eq!(run(&target, order).await, (CommitOutcome::Committed, 2));
    assert_eq!(older.counts(), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_refusing_ids_is_sent_none_for_two_minutes() {
    let older = Arc::new(OlderOwner::default());
    let owner = bind(older.router());
    let clock = manual_clock();
    let target = sender(owner.local_addr(), Arc::clone(&clock) as Arc<dyn Clock>);
    let sender_replica = replica(SENDER, OWNER, ORDERS_ID);
    let one = |payload: &'static str| -> [Input; 1] { [("", payload, Some(ORDERS_ID))] };

    let first = order(&sender_replica, "orders", 0, &one("first"));
    assert_eq!(run(&target, first).await.0, CommitOutcome::Committed);
    assert_eq!(older.counts(), (1, 1));

    clock.advance(LEGACY_OWNER_TTL_MS - 1_000);
    let within = order(&sender_replica, "orders", 0, &one("within"));
    assert_eq!(run(&target, within).await.0, CommitOutcome::Committed);
    assert_eq!(older.counts(), (1, 2), "no ids sent within the memory");

    clock.advance(1_000);
    let after = order(&sender_replica, "orders", 0, &one("after"));
    assert_eq!(run(&target, after).await.0, CommitOutcome::Committed);
    assert_eq!(older.counts(), (2, 3), "ids tried again once it lapsed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_of_a_refusing_owner_does_not_touch_other_owners() {
    let older = Arc::new(OlderOwner::default());
    let older_node = bind(older.router());
    let (_, current) = owning(OWNER, RECREATED_ID);
    let addresses = Arc::new(AddressTable::new());
    let third: NodeId = 3;
    addresses.set(third, older_node.local_addr());
    addresses.set(OWNER, current.local_addr());
    assert_eq!(addresses.rpc_addr(third), Some(older_node.local_addr()));
    let target = RemoteCommitTarget::new(
        Arc::new(bind(Router::new())),
        addresses,
        tokio::runtime::Handle::current(),
        manual_clock(),
    );
    let to_older = order(
        &replica(SENDER, third, ORDERS_ID),
        "orders",
        0,
        &[("", "to the older owner", Some(ORDERS_ID))],
    );
    assert_eq!(run(&target, to_older).await.0, CommitOutcome::Committed);

    // The current owner still gets the ids, so it can refuse the stale
    // incarnation.
    let to_current = order(
        &replica(SENDER, OWNER, ORDERS_ID),
        "orders",
        0,
        &[("", "to the current owner", Some(ORDERS_ID))],
    );
    assert_eq!(
        run(&target, to_current).await.0,
        CommitOutcome::IncarnationMismatch
    );
}

/// Waits for `done`; a ceiling that turns a hang into a failure, not a
/// timing assertion.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + SIGNAL_WAIT;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_accepted_on_one_node_are_committed_by_the_owning_node() {
    let (owned, owner) = owning(OWNER, ORDERS_ID);
    // One clock for the sending node: its remote commits and its consume
    // service run on it.
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let target = sender(owner.local_addr(), Arc::clone(&clock));
    // The sender owns `orders` but for partition 1, which the owning node
    // holds.
    let sender_replica = Arc::new(MetadataReplica::new(SENDER));
    register(&sender_replica, SENDER);
    apply(
        &sender_replica,
        MetaCommand::CreateTopic(create_orders(ORDERS_ID)),
    );
    assign(
        &sender_replica,
        "orders",
        &[(0, SENDER), (1, OWNER), (2, SENDER)],
    );
    let mut config = DataNodeConfig::new("/sender");
    config.checkpoint = CheckpointConfig {
        sync_delay: Duration::from_millis(5),
    };
    let services = NodeServices {
        disk: Arc::new(SimDisk::new(5)),
        leader: Arc::new(ReplicaLeader::new(Arc::clone(&sender_replica))),
        remote: Arc::new(target),
        admin: Arc::new(LocalAdmin::new(Arc::clone(&sender_replica))),
        replica: sender_replica,
        clock,
    };
    let node = tokio::task::block_in_place(|| DataNode::start(services, config)).expect("start");
    let topic = node
        .api()
        .acceptor
        .producible_topic("orders")
        .expect("topic");
    let sent: Vec<(Vec<u8>, Vec<u8>)> = (0..5_u8)
        .map(|i| (vec![b'k', i], format!("message {i}").into_bytes()))
        .collect();
    for (key, payload) in &sent {
        let message = ProduceMessage {
            key: key.clone(),
            partition: Some(1),
            payload: Bytes::from(payload.clone()),
            idempotency_key: Vec::new(),
        };
        node.api()
            .acceptor
            .accept(&topic, &message)
            .await
            .expect("accepted");
    }

    wait_until("the sender's dispatch backlog to drain", || node.drained()).await;
    tokio::task::block_in_place(|| node.shutdown());

    let stored: Vec<(Vec<u8>, Vec<u8>)> = records_in(&owned, "orders", 1)
        .into_iter()
        .map(|record| (record.key, record.payload))
        .collect();
    assert_eq!(stored, sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_budget_is_spent_fails_without_sending() {
    let older = Arc::new(OlderOwner::default());
    let owner = bind(older.router());
    let target = sender(owner.local_addr(), manual_clock());
    let mut order = order(
        &replica(SENDER, OWNER, ORDERS_ID),
        "orders",
        0,
        &[("", "too late", Some(ORDERS_ID))],
    );
    order.budget = Duration::ZERO;

    assert_eq!(run(&target, order).await, (CommitOutcome::Failed, 1));
    assert_eq!(older.counts(), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_its_runtime_drops_is_reported_failed() {
    let gone = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let handle = gone.handle().clone();
    gone.shutdown_background();
    let addresses = Arc::new(AddressTable::new());
    addresses.set(OWNER, SocketAddr::from(([127, 0, 0, 1], 9)));
    let target = RemoteCommitTarget::new(
        Arc::new(bind(Router::new())),
        addresses,
        handle,
        manual_clock(),
    );
    let order = order(
        &replica(SENDER, OWNER, ORDERS_ID),
        "orders",
        0,
        &[("", "never run", Some(ORDERS_ID))],
    );

    assert_eq!(run(&target, order).await, (CommitOutcome::Failed, 1));
}

/// An owner that answers every commit, but only after `delay`: slow, yet
/// present (its transport answers pings and acknowledges packets).
fn slow_owner(delay: Duration) -> Router {
    Router::new().route(
        Opcode::COMMIT_PRODUCE_BATCH,
        OperationLimit::messaging(),
        move |inbound: Inbound| async move {
            tokio::time::sleep(delay).await;
            let batch = decode_commit_request(inbound.request.body)?;
            let records = batch.records().len() as u64;
            Ok(Response::message(&CommitProduceBatchAnswer {
                offsets: 0..records,
                already_stored: 0,
            }))
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_owner_keeps_its_commit_while_its_liveness_is_checked() {
    // Hung after 50 ms, so the owner's liveness is checked at 50 ms and
    // about every second after while the commit waits 2.5 s for its answer;
    // a present owner answers the pings, and the commit is not cut short.
    let owner = bind(slow_owner(Duration::from_millis(2_500)));
    let target = sender(owner.local_addr(), manual_clock())
        .with_liveness_check_after(Duration::from_millis(50));
    let order = order(
        &replica(SENDER, OWNER, ORDERS_ID),
        "orders",
        0,
        &[
            ("", "slow", Some(ORDERS_ID)),
            ("", "slower", Some(ORDERS_ID)),
        ],
    );

    assert_eq!(run(&target, order).await, (CommitOutcome::Committed, 2));
}
