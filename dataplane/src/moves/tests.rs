//! Moves between two data nodes in one process: each node has its own
//! disk directory and replica; one shared log (a fake control plane)
//! applies every command to both replicas in order; the target reaches the
//! source's transfer calls directly.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use narad_disk::Disk;
use narad_disk::portable::PortableDisk;
use narad_meta::{Command, MoveTarget, SetMoveTargets};
use narad_protocol::transfer::{
    FenceHandoff, FetchSegmentChunk, HandoffFenced, HandoffPrepared, ListPartitionSegments,
    PartitionListing, PrepareHandoff, ReleaseHandoff,
};
use parking_lot::Mutex;

use super::worker::{LinkError, LinkFuture, SourceLink};
use super::{DirectLinks, LinkFactory, MoveRunner};
use crate::admin::{Admin, AdminError, AdminFuture};
use crate::commit::{CommitBatch, CommitError, CommitItem};
use crate::consume::service::ConsumeRequest;
use crate::consume::shard::Settle;
use crate::e2e_tests::config;
use crate::metadata::MetadataReplica;
use crate::node::{DataNode, NodeServices};
use crate::partitions::partition_dir;
use crate::testing::{create_command, register};
use crate::topology::{Destination, NodeId, member_id};

const SOURCE: NodeId = 1;
const TARGET: NodeId = 2;
const TOPIC: &str = "orders";

/// How long an installed copy waits after its last flip proposal before
/// it may be rolled back, in most of these tests (15 s in production).
const TEST_FLIP_SETTLE: Duration = Duration::from_millis(200);

/// Every replica applies every command, in one order: what the metadata
/// stream gives data nodes.
#[derive(Debug, Default)]
struct SharedLog {
    replicas: Mutex<Vec<Arc<MetadataReplica>>>,
}

impl SharedLog {
    fn apply(&self, command: &Command) -> Result<(), AdminError> {
        let replicas = self.replicas.lock();
        let mut outcome = Ok(());
        for replica in replicas.iter() {
            if let Err(error) = replica.apply_next(command) {
                outcome = Err(AdminError::from(error));
            }
        }
        outcome
    }
}

/// Proposes through the shared log; while `flips_blocked`, a flip gets no
/// answer (no leader), as in a control-plane outage.
#[derive(Debug)]
struct SharedAdmin {
    log: Arc<SharedLog>,
    flips_blocked: Arc<AtomicBool>,
    flips: Arc<FlipRace>,
}

/// Flip proposals as the test sees them: when the last one arrived, and
/// whether the next one races an abort of its move.
#[derive(Debug, Default)]
struct FlipRace {
    last: Mutex<Option<Instant>>,
    abort_first: AtomicBool,
}

impl Admin for SharedAdmin {
    fn propose(&self, command: Command) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            if let Command::CompleteMove(flip) = &command {
                *self.flips.last.lock() = Some(Instant::now());
                if self.flips.abort_first.swap(false, Ordering::AcqRel) {
                    self.log.apply(&Command::AbortMove(narad_meta::AbortMove {
                        topic: flip.topic.clone(),
                        id: flip.id.clone(),
                        partition: flip.partition,
                        target: flip.target.clone(),
                    }))?;
                } else if self.flips_blocked.load(Ordering::Acquire) {
                    return Err(AdminError::Unavailable("no leader (test)".into()));
                }
            }
            self.log.apply(&command)
        })
    }
}

/// The replica's answers as the leader's, or none while `down` (a
/// control-plane outage).
#[derive(Debug)]
struct SwitchedLeader {
    replica: crate::dispatch::ReplicaLeader,
    down: Arc<AtomicBool>,
}

impl crate::dispatch::LeaderConfirm for SwitchedLeader {
    fn confirm_gone(&self, question: &crate::dispatch::GoneQuestion) -> Result<bool, String> {
        if self.down.load(Ordering::Acquire) {
            return Err("no leader (test)".into());
        }
        self.replica.confirm_gone(question)
    }

    fn confirm_partition_holder(
        &self,
        holder: &crate::dispatch::PartitionHolder,
    ) -> Result<bool, String> {
        if self.down.load(Ordering::Acquire) {
            return Err("no leader (test)".into());
        }
        self.replica.confirm_partition_holder(holder)
    }
}

/// Which transfer calls get no answer (a dead or cut-off source).
#[derive(Debug, Default)]
struct Faults {
    /// Every call.
    all: AtomicBool,
    /// `FetchSegmentChunk`.
    fetch: AtomicBool,
    /// `FenceHandoff`.
    fence: AtomicBool,
    /// `ListPartitionSegments` answers with a high watermark of 0: an owner
    /// that lost its copy.
    list_empty: AtomicBool,
}

/// The direct links, through [`Faults`].
#[derive(Debug)]
struct FaultyLinks {
    direct: Arc<DirectLinks>,
    faults: Arc<Faults>,
}

impl LinkFactory for FaultyLinks {
    fn link(&self, source: &str) -> Option<Arc<dyn SourceLink>> {
        Some(Arc::new(FaultyLink {
            inner: self.direct.link(source)?,
            faults: Arc::clone(&self.faults),
        }))
    }
}

#[derive(Debug)]
struct FaultyLink {
    inner: Arc<dyn SourceLink>,
    faults: Arc<Faults>,
}

impl FaultyLink {
    fn cut(&self, call: &AtomicBool) -> bool {
        self.faults.all.load(Ordering::Acquire) || call.load(Ordering::Acquire)
    }
}

fn no_answer<'a, T: Send + 'a>() -> LinkFuture<'a, T> {
    Box::pin(async { Err(LinkError::Unreachable("no answer (test)".into())) })
}

impl SourceLink for FaultyLink {
    fn list(&self, request: ListPartitionSegments) -> LinkFuture<'_, PartitionListing> {
        if self.cut(&AtomicBool::new(false)) {
            return no_answer();
        }
        if self.faults.list_empty.load(Ordering::Acquire) {
            return Box::pin(async move {
                let listing = self.inner.list(request).await?;
                Ok(PartitionListing {
                    high_watermark: 0,
                    files: Vec::new(),
                    ..listing
                })
            });
        }
        self.inner.list(request)
    }

    fn fetch(&self, request: FetchSegmentChunk) -> LinkFuture<'_, Bytes> {
        if self.cut(&self.faults.fetch) {
            return no_answer();
        }
        self.inner.fetch(request)
    }

    fn prepare(&self, request: PrepareHandoff) -> LinkFuture<'_, HandoffPrepared> {
        if self.cut(&AtomicBool::new(false)) {
            return no_answer();
        }
        self.inner.prepare(request)
    }

    fn fence(&self, request: FenceHandoff) -> LinkFuture<'_, HandoffFenced> {
        if self.cut(&self.faults.fence) {
            return no_answer();
        }
        self.inner.fence(request)
    }

    fn release(&self, request: ReleaseHandoff) -> LinkFuture<'_, ()> {
        if self.cut(&AtomicBool::new(false)) {
            return no_answer();
        }
        self.inner.release(request)
    }
}

struct Cluster {
    log: Arc<SharedLog>,
    flips_blocked: Arc<AtomicBool>,
    /// While set, no leader confirms anything.
    leader_down: Arc<AtomicBool>,
    replicas: Vec<Arc<MetadataReplica>>,
    nodes: Vec<Arc<DataNode>>,
    links: Arc<DirectLinks>,
    faults: Arc<Faults>,
    force_promote_after: Duration,
    flip_settle: Duration,
    flips: Arc<FlipRace>,
    runners: Vec<Arc<MoveRunner>>,
    disk: Arc<dyn Disk>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Cluster {
    /// Two nodes; `orders` (3 partitions) all on the source.
    fn start() -> Self {
        Self::start_with(crate::moves::decide::FORCE_PROMOTE_AFTER, TEST_FLIP_SETTLE)
    }

    /// As [`Self::start`], force-promoting after `force_promote_after`
    /// and rolling installed copies back `flip_settle` after their last
    /// flip proposal at the earliest.
    fn start_with(force_promote_after: Duration, flip_settle: Duration) -> Self {
        let log = Arc::new(SharedLog::default());
        let disk: Arc<dyn Disk> = Arc::new(PortableDisk::new(2).expect("portable disk"));
        let replicas: Vec<Arc<MetadataReplica>> = [SOURCE, TARGET]
            .iter()
            .map(|node| Arc::new(MetadataReplica::new(*node)))
            .collect();
        log.replicas.lock().extend(replicas.iter().cloned());
        for node in [SOURCE, TARGET] {
            for replica in &replicas {
                register(replica, node);
            }
        }
        log.apply(&Command::CreateTopic(create_command(TOPIC, 0xa1, 3)))
            .expect("create");
        let owners = (0..3)
            .map(|partition| narad_meta::PartitionOwner {
                partition,
                owner: member_id(SOURCE),
            })
            .collect();
        log.apply(&Command::AssignPartitions(narad_meta::AssignPartitions {
            topic: TOPIC.into(),
            id: narad_meta::IncarnationId::from_bits(0xa1),
            owners,
        }))
        .expect("assign");
        let flips_blocked = Arc::new(AtomicBool::new(false));
        let dirs: Vec<tempfile::TempDir> = replicas
            .iter()
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let mut cluster = Self {
            log,
            flips_blocked,
            leader_down: Arc::new(AtomicBool::new(false)),
            replicas,
            nodes: Vec::new(),
            links: Arc::new(DirectLinks::default()),
            faults: Arc::new(Faults::default()),
            force_promote_after,
            flip_settle,
            flips: Arc::new(FlipRace::default()),
            runners: Vec::new(),
            disk,
            _dirs: dirs,
        };
        for index in 0..2 {
            let (node, runner) = cluster.start_node(index);
            cluster.nodes.push(node);
            cluster.runners.push(runner);
        }
        cluster
    }

    /// Starts node `index` on its directory and replica, reachable by the
    /// other through the links, with its move runner.
    fn start_node(&self, index: usize) -> (Arc<DataNode>, Arc<MoveRunner>) {
        let replica = &self.replicas[index];
        let node = DataNode::start(
            NodeServices {
                disk: Arc::clone(&self.disk),
                replica: Arc::clone(replica),
                leader: Arc::new(SwitchedLeader {
                    replica: crate::dispatch::ReplicaLeader::new(Arc::clone(replica)),
                    down: Arc::clone(&self.leader_down),
                }),
                remote: Arc::new(crate::dispatch::NoRemoteTarget),
                admin: Arc::new(SharedAdmin {
                    log: Arc::clone(&self.log),
                    flips_blocked: Arc::clone(&self.flips_blocked),
                    flips: Arc::clone(&self.flips),
                }),
                clock: Arc::new(narad_clock::SystemClock::new()),
            },
            crate::node::DataNodeConfig {
                force_promote_after: self.force_promote_after,
                flip_settle: self.flip_settle,
                ..config(self.data_dir(index), 7)
            },
        )
        .expect("start node");
        let node = Arc::new(node);
        let member = member_id(replica.local_node());
        self.links.insert(&member, Arc::clone(node.move_source()));
        let runner = node.start_moves(Arc::new(FaultyLinks {
            direct: Arc::clone(&self.links),
            faults: Arc::clone(&self.faults),
        }));
        (node, runner)
    }

    /// Stops node `index` as a crash would (nothing synced on the way
    /// out), and starts it again on the same directory.
    fn crash_and_restart(&mut self, index: usize) {
        self.crash_and_restart_with(index, |_| {});
    }

    /// As [`Self::crash_and_restart`], running `while_down` between the
    /// crash and the restart.
    fn crash_and_restart_with(&mut self, index: usize, while_down: impl FnOnce(&Self)) {
        let member = member_id(self.replicas[index].local_node());
        self.links.remove(&member);
        let placeholder = Arc::clone(&self.nodes[1 - index]);
        let node = std::mem::replace(&mut self.nodes[index], placeholder);
        let node = Arc::try_unwrap(node).expect("no one else holds the node");
        node.abandon();
        // A worker's file call in flight when its task was stopped ends on
        // a blocking thread; let it end before the next node starts.
        std::thread::sleep(Duration::from_millis(100));
        while_down(self);
        let (node, runner) = self.start_node(index);
        self.nodes[index] = node;
        self.runners[index] = runner;
    }

    /// Where node `index` stages its copy of `partition`.
    fn staged(&self, index: usize, partition: u32) -> PathBuf {
        super::files::staging_dir(self.data_dir(index), TOPIC, partition)
    }

    /// Clears the move of `partition` (the controller's abort).
    fn abort(&self, partition: u32) {
        self.log
            .apply(&Command::AbortMove(narad_meta::AbortMove {
                topic: TOPIC.into(),
                id: narad_meta::IncarnationId::from_bits(0xa1),
                partition,
                target: member_id(TARGET),
            }))
            .expect("abort");
    }

    /// Commits `messages` to `partition`, moves it to the target with
    /// every fence unanswered, and waits until the target's copy holds
    /// bytes and one attempt failed at the fence: the copy is whole in
    /// staging and stays there.
    async fn stage_a_copy(&self, partition: u32, messages: usize) {
        for n in 0..messages {
            self.commit(partition, &format!("m{n}"));
        }
        self.faults.fence.store(true, Ordering::Release);
        self.target_partition(partition);
        self.wait_for("a copy staged and a fence unanswered", |c| {
            worker_status(c, partition)
                .is_some_and(|status| status.attempts >= 1 && status.copied_bytes > 0)
        })
        .await;
    }

    /// Waits until the target, restarted, owns `partition` and its
    /// worker is done; checks that nothing is left staged and that the
    /// target's log holds the `messages` committed before the move (`m0`,
    /// `m1`, ...) and one committed now.
    async fn installed_after_restart(&self, partition: u32, messages: usize) {
        self.wait_for("the flip after the restart", |c| {
            c.owner(partition).as_deref() == Some(&member_id(TARGET))
        })
        .await;
        self.wait_for("the worker done", |c| c.runners[1].report().is_empty())
            .await;
        assert!(
            !self.staged(1, partition).exists(),
            "the staged copy was installed"
        );
        self.commit(partition, "after");
        self.nodes[1]
            .logs()
            .close_partition(&Destination::new(TOPIC, partition));
        let mut expected: Vec<String> = (0..messages).map(|n| format!("m{n}")).collect();
        expected.push("after".into());
        assert_eq!(self.stored(1, partition), expected);
    }

    /// Closes the target's log of `partition` and checks that it holds
    /// exactly `m0` to `m<messages - 1>`.
    fn assert_target_holds(&self, partition: u32, messages: usize) {
        self.nodes[1]
            .logs()
            .close_partition(&Destination::new(TOPIC, partition));
        assert_eq!(
            self.stored(1, partition),
            (0..messages).map(|n| format!("m{n}")).collect::<Vec<_>>()
        );
    }

    fn data_dir(&self, index: usize) -> &Path {
        self._dirs[index].path()
    }

    /// Commits `messages` (`m0`, `m1`, ...) to partition 0, blocks
    /// flips, moves partition 0 to the target and waits until its copy
    /// is whole and fenced; returns the target's `move.marker`.
    async fn fence_a_copy_of_partition_0(&mut self, messages: usize) -> PathBuf {
        for n in 0..messages {
            self.commit(0, &format!("m{n}"));
        }
        self.flips_blocked.store(true, Ordering::Release);
        self.target_partition(0);
        let marker =
            partition_dir(self.data_dir(1), TOPIC, 0).join(super::files::MOVE_MARKER_FILE_NAME);
        self.wait_for("the copy to be whole and fenced", |_| marker.exists())
            .await;
        marker
    }

    fn target_partition(&self, partition: u32) {
        self.log
            .apply(&Command::SetMoveTargets(SetMoveTargets {
                topic: TOPIC.into(),
                id: narad_meta::IncarnationId::from_bits(0xa1),
                moves: vec![MoveTarget {
                    partition,
                    owner: member_id(SOURCE),
                    target: member_id(TARGET),
                }],
            }))
            .expect("set target");
    }

    fn owner(&self, partition: u32) -> Option<String> {
        self.nodes[0]
            .api()
            .replica
            .view()
            .metastore
            .owner(TOPIC, partition)
            .map(str::to_owned)
    }

    /// Commits `payload` to `partition` on whichever node owns it, as a
    /// dispatcher does: retried while refused (frozen, not the owner).
    fn commit(&self, partition: u32, payload: &str) {
        let destination = Destination::new(TOPIC, partition);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let index = if self.owner(partition).as_deref() == Some(&member_id(TARGET)) {
                1
            } else {
                0
            };
            let batch = CommitBatch {
                items: vec![CommitItem::new(
                    Bytes::new(),
                    Bytes::from(payload.to_owned()),
                    Some(Arc::from("00000000000000a1")),
                )],
                deadline_ms: self.nodes[index]
                    .combiners()
                    .deadline_in(Duration::from_secs(5)),
            };
            match self.nodes[index].combiners().commit(&destination, batch) {
                Ok(_) => return,
                Err(CommitError::Frozen | CommitError::NotOwner) => {
                    assert!(Instant::now() < deadline, "commit refused for a minute");
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(error) => panic!("commit of {payload} failed: {error}"),
            }
        }
    }

    /// Every payload stored in `partition` on node `index`'s disk.
    fn stored(&self, index: usize, partition: u32) -> Vec<String> {
        let stored =
            crate::e2e_tests::stored(&self.disk, self.data_dir(index), TOPIC, partition + 1);
        stored[&partition]
            .iter()
            .map(|(_, payload)| String::from_utf8(payload.clone()).expect("utf-8"))
            .collect()
    }

    async fn wait_for(&self, what: &str, mut done: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            for runner in &self.runners {
                runner.tick().await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_moves_with_every_committed_record_and_its_consumer_position() {
    let cluster = Cluster::start();
    for n in 0..200 {
        cluster.commit(1, &format!("m{n}"));
    }
    // A consumer acks the first 50 on the source.
    let consume = Arc::clone(cluster.nodes[0].consume());
    let mut acked = BTreeSet::new();
    while acked.len() < 50 {
        let deliveries = consume
            .consume(ConsumeRequest {
                topic: TOPIC.into(),
                partition: Some(1),
                max: 50 - acked.len(),
                wait: Duration::from_millis(100),
            })
            .await
            .expect("consume");
        for delivery in deliveries {
            consume
                .settle(
                    TOPIC,
                    1,
                    delivery.record.offset,
                    delivery.nonce,
                    Settle::Ack,
                )
                .expect("ack");
            acked.insert(delivery.record.offset);
        }
    }
    // Produce keeps flowing through the move.
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(Mutex::new(Vec::new()));
    let cluster = Arc::new(cluster);
    let producer = {
        let (cluster, stop, committed) = (
            Arc::clone(&cluster),
            Arc::clone(&stop),
            Arc::clone(&committed),
        );
        std::thread::spawn(move || {
            let mut n = 200;
            while !stop.load(Ordering::Acquire) {
                let payload = format!("m{n}");
                cluster.commit(1, &payload);
                committed.lock().push(payload);
                n += 1;
            }
        })
    };
    cluster.target_partition(1);
    cluster
        .wait_for("the flip", |c| {
            c.owner(1).as_deref() == Some(&member_id(TARGET))
        })
        .await;
    // Keep producing to the new owner for a while, then stop.
    let after_flip = committed.lock().len();
    while committed.lock().len() < after_flip + 50 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Release);
    producer.join().expect("producer");
    cluster
        .wait_for("the source's copy removed", |c| {
            !partition_dir(c.data_dir(0), TOPIC, 1).exists()
        })
        .await;
    // Every committed record is in the new owner's log, once, in order.
    let expected: Vec<String> = (0..200)
        .map(|n| format!("m{n}"))
        .chain(committed.lock().iter().cloned())
        .collect();
    cluster.nodes[1]
        .logs()
        .close_partition(&Destination::new(TOPIC, 1));
    assert_eq!(cluster.stored(1, 1), expected);
    // The consumer position came along: nothing acked is delivered again.
    let consume = Arc::clone(cluster.nodes[1].consume());
    let deliveries = consume
        .consume(ConsumeRequest {
            topic: TOPIC.into(),
            partition: Some(1),
            max: 100,
            wait: Duration::from_millis(100),
        })
        .await
        .expect("consume on the new owner");
    assert!(!deliveries.is_empty());
    for delivery in &deliveries {
        assert!(
            !acked.contains(&delivery.record.offset),
            "acked offset {} delivered again",
            delivery.record.offset
        );
    }
    // The other partitions stayed where they were.
    assert_eq!(
        cluster.owner(0).as_deref(),
        Some(member_id(SOURCE).as_str())
    );
    cluster
        .wait_for("the finished worker reaped", |c| {
            c.runners[1].completed() == 1
        })
        .await;
    assert!(cluster.runners[1].report().is_empty());
    assert!(cluster.nodes[0].combiners().freezes().all().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_move_leaves_the_source_serving_and_no_copy_behind() {
    let cluster = Cluster::start();
    for n in 0..50 {
        cluster.commit(2, &format!("m{n}"));
    }
    // The source is unreachable, so the move cannot get past its start.
    cluster.links.remove(&member_id(SOURCE));
    cluster.target_partition(2);
    for runner in &cluster.runners {
        runner.tick().await;
    }
    cluster
        .log
        .apply(&Command::AbortMove(narad_meta::AbortMove {
            topic: TOPIC.into(),
            id: narad_meta::IncarnationId::from_bits(0xa1),
            partition: 2,
            target: member_id(TARGET),
        }))
        .expect("abort");
    cluster
        .wait_for("the target to drop the move", |c| {
            c.runners[1].report().is_empty()
        })
        .await;
    assert_eq!(
        cluster.owner(2).as_deref(),
        Some(member_id(SOURCE).as_str())
    );
    cluster.commit(2, "after");
    assert!(
        !partition_dir(cluster.data_dir(1), TOPIC, 2)
            .join("move.marker")
            .exists()
    );
    let mut expected: Vec<String> = (0..50).map(|n| format!("m{n}")).collect();
    expected.push("after".into());
    cluster.nodes[0]
        .logs()
        .close_partition(&Destination::new(TOPIC, 2));
    assert_eq!(cluster.stored(0, 2), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_crashes_after_the_install_before_the_flip_resumes_from_its_marker() {
    let mut cluster = Cluster::start();
    let marker = cluster.fence_a_copy_of_partition_0(100).await;
    assert!(
        !cluster.staged(1, 0).exists(),
        "the marked copy was renamed out of staging"
    );
    // Fenced: the source takes no commit for the partition now.
    let destination = Destination::new(TOPIC, 0);
    let refused = cluster.nodes[0].combiners().commit(
        &destination,
        CommitBatch {
            items: vec![CommitItem::new(
                Bytes::new(),
                Bytes::from_static(b"x"),
                None,
            )],
            deadline_ms: cluster.nodes[0]
                .combiners()
                .deadline_in(Duration::from_secs(1)),
        },
    );
    assert!(matches!(refused, Err(CommitError::Frozen)), "{refused:?}");
    cluster.crash_and_restart(1);
    // Resuming from the marker takes no byte from the source.
    cluster.faults.fetch.store(true, Ordering::Release);
    cluster.flips_blocked.store(false, Ordering::Release);
    cluster
        .wait_for("the flip after the restart", |c| {
            c.owner(0).as_deref() == Some(&member_id(TARGET))
        })
        .await;
    cluster.commit(0, "after");
    cluster
        .wait_for("the marker removed and the source's copy gone", |c| {
            !marker.exists() && !partition_dir(c.data_dir(0), TOPIC, 0).exists()
        })
        .await;
    cluster.nodes[1].logs().close_partition(&destination);
    let mut expected: Vec<String> = (0..100).map(|n| format!("m{n}")).collect();
    expected.push("after".into());
    assert_eq!(cluster.stored(1, 0), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_crashes_between_the_marker_and_the_install_installs_after_restart() {
    let mut cluster = Cluster::start();
    cluster.fence_a_copy_of_partition_0(60).await;
    // The crash came before the rename was durable: the marked copy is
    // still staged and the partition directory absent.
    let (dir, staged) = (
        partition_dir(cluster.data_dir(1), TOPIC, 0),
        cluster.staged(1, 0),
    );
    cluster.crash_and_restart_with(1, |_| {
        std::fs::rename(&dir, &staged).expect("put the copy back in staging");
    });
    // Resuming from the marker takes no byte from the source.
    cluster.faults.fetch.store(true, Ordering::Release);
    cluster.flips_blocked.store(false, Ordering::Release);
    cluster.installed_after_restart(0, 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_is_made_in_staging_and_the_partition_directory_stays_untouched() {
    let cluster = Cluster::start();
    cluster.stage_a_copy(0, 80).await;
    let staged = cluster.staged(1, 0);
    let segment_bytes: u64 = std::fs::read_dir(&staged)
        .expect("the staging directory")
        .map(|entry| entry.expect("entry"))
        .filter(|entry| super::files::is_segment(&entry.file_name().to_string_lossy()))
        .map(|entry| entry.metadata().expect("metadata").len())
        .sum();
    assert!(segment_bytes > 0, "the copy's segments are in staging");
    assert!(
        !staged.join(super::files::MOVE_MARKER_FILE_NAME).exists(),
        "not fenced: no marker"
    );
    assert!(
        !partition_dir(cluster.data_dir(1), TOPIC, 0).exists(),
        "nothing at the partition's path before the install"
    );
    assert!(
        cluster.nodes[1]
            .logs()
            .get(&Destination::new(TOPIC, 0))
            .is_none()
    );
    cluster.faults.fence.store(false, Ordering::Release);
    cluster
        .wait_for("the flip", |c| {
            c.owner(0).as_deref() == Some(&member_id(TARGET))
        })
        .await;
    cluster
        .wait_for("the worker done", |c| c.runners[1].report().is_empty())
        .await;
    assert!(!staged.exists(), "the staged copy became the partition");
    cluster.assert_target_holds(0, 80);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_crashes_mid_copy_serves_nothing_staged_and_completes_after_restart() {
    let mut cluster = Cluster::start();
    cluster.stage_a_copy(1, 70).await;
    cluster.crash_and_restart(1);
    // Still unfenced: the restarted worker copies into staging again.
    cluster
        .wait_for("the copy staged again", |c| {
            worker_status(c, 1).is_some_and(|status| status.copied_bytes > 0)
        })
        .await;
    let logs = cluster.nodes[1].logs();
    assert!(logs.open_destinations().is_empty(), "nothing served here");
    assert!(!partition_dir(cluster.data_dir(1), TOPIC, 1).exists());
    assert!(cluster.staged(1, 1).exists());
    assert_eq!(logs.quarantine_stats().expect("stats").copies, 0);
    assert_eq!(cluster.owner(1), Some(member_id(SOURCE)));
    cluster.faults.fence.store(false, Ordering::Release);
    cluster.installed_after_restart(1, 70).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_move_leaves_no_staged_copy() {
    let cluster = Cluster::start();
    cluster.stage_a_copy(2, 40).await;
    assert!(cluster.staged(1, 2).exists());
    cluster.abort(2);
    cluster
        .wait_for("the target to drop the move", |c| {
            c.runners[1].report().is_empty()
        })
        .await;
    assert!(!cluster.staged(1, 2).exists(), "the staged copy is gone");
    assert!(!partition_dir(cluster.data_dir(1), TOPIC, 2).exists());
    assert_eq!(cluster.owner(2), Some(member_id(SOURCE)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installed_copy_of_an_aborted_move_is_rolled_back_and_removed() {
    let mut cluster = Cluster::start();
    let marker = cluster.fence_a_copy_of_partition_0(30).await;
    assert!(marker.exists(), "installed, waiting for its flip");
    cluster.abort(0);
    cluster
        .wait_for("the target to drop the move", |c| {
            c.runners[1].report().is_empty()
        })
        .await;
    assert!(
        !partition_dir(cluster.data_dir(1), TOPIC, 0).exists(),
        "the installed copy is gone from the partition's path"
    );
    assert!(!cluster.staged(1, 0).exists(), "and from staging");
    assert_eq!(cluster.owner(0), Some(member_id(SOURCE)));
}

/// Spec §6: a flip refused because its move was aborted meanwhile may
/// still commit if an earlier proposal sits in a deposed leader's log, so
/// the installed copy is rolled back only once the leader confirms the
/// flip cannot commit and the last proposal has settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installed_copy_is_rolled_back_only_once_its_last_flip_proposal_has_settled() {
    let settle = Duration::from_secs(2);
    let mut cluster = Cluster::start_with(crate::moves::decide::FORCE_PROMOTE_AFTER, settle);
    cluster.fence_a_copy_of_partition_0(30).await;
    cluster.flips.abort_first.store(true, Ordering::Release);
    cluster
        .wait_for("a flip that races an abort", |c| {
            !c.flips.abort_first.load(Ordering::Acquire)
        })
        .await;
    let proposed = cluster.flips.last.lock().expect("the racing flip");
    let installed = partition_dir(cluster.data_dir(1), TOPIC, 0);
    cluster
        .wait_for("the installed copy rolled back", |_| !installed.exists())
        .await;
    let waited = proposed.elapsed();
    assert!(
        waited >= settle,
        "rolled back {waited:?} after the flip, before it settled"
    );
    // The rollback renames the copy back to staging, then removes it there.
    let staged = cluster.staged(1, 0);
    cluster
        .wait_for("the rolled-back copy removed from staging", |_| {
            !staged.exists()
        })
        .await;
    assert_eq!(cluster.owner(0), Some(member_id(SOURCE)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_removes_a_staged_copy_of_a_move_that_ended_while_the_node_was_down() {
    let mut cluster = Cluster::start();
    cluster.stage_a_copy(2, 40).await;
    cluster.crash_and_restart_with(1, |c| c.abort(2));
    assert!(cluster.staged(1, 2).exists(), "left by the crash");
    cluster
        .wait_for("the stale staged copy swept", |c| !c.staged(1, 2).exists())
        .await;
    assert!(!partition_dir(cluster.data_dir(1), TOPIC, 2).exists());
}

#[test]
fn staged_copies_are_in_no_listing_of_topics_or_quarantined_copies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk: Arc<dyn Disk> = Arc::new(PortableDisk::new(1).expect("portable disk"));
    let logs = crate::partitions::LocalLogs::new(
        Arc::clone(&disk),
        dir.path(),
        narad_plog::LogConfig::default(),
        crate::testing::system_clock(),
    );
    let id: Arc<str> = Arc::from("00000000000000a1");
    let log = logs
        .resolve(&Destination::new(TOPIC, 0), Some(&id))
        .expect("open a live partition");
    drop(log);
    logs.close_all();
    // Staged copies, one of a topic whose name reads like a quarantined
    // copy, each with a segment and a marker.
    for (topic, partition) in [(TOPIC, 1), ("orders.stale-00000000000000a1", 0)] {
        let staged = super::files::staging_dir(dir.path(), topic, partition);
        super::files::reset_staging(&*disk, &staged).expect("stage");
        super::files::write_chunk(&*disk, &staged, "00000000000000000000.log", 0, b"bytes")
            .expect("a segment");
        super::files::write_marker(
            &*disk,
            &staged,
            &super::files::MoveMarker {
                source: member_id(SOURCE),
                incarnation: id.to_string(),
                high_watermark: 1,
                token: 7,
                applied_index: 1,
            },
        )
        .expect("a marker");
    }
    assert_eq!(
        logs.topic_directories().expect("topics"),
        vec![TOPIC.to_owned()]
    );
    assert!(logs.quarantined_partitions().expect("list").is_empty());
    assert_eq!(
        logs.quarantine_stats().expect("stats"),
        crate::partitions::incarnation::QuarantineStats::default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_copy_flips_after_a_restart_while_the_source_is_unreachable() {
    let mut cluster = Cluster::start();
    cluster.fence_a_copy_of_partition_0(40).await;
    cluster.crash_and_restart(1);
    // The source's fence is on its disk: the flip needs no answer from it.
    cluster.faults.all.store(true, Ordering::Release);
    cluster.flips_blocked.store(false, Ordering::Release);
    cluster
        .wait_for("the flip without the source", |c| {
            c.owner(0).as_deref() == Some(&member_id(TARGET))
        })
        .await;
    cluster.faults.all.store(false, Ordering::Release);
    let old_dir = partition_dir(cluster.data_dir(0), TOPIC, 0);
    cluster
        .wait_for("the fenced old copy removed", |_| !old_dir.exists())
        .await;
    assert!(
        cluster.nodes[0]
            .logs()
            .quarantined_partitions()
            .expect("list")
            .is_empty(),
        "a fenced copy was handed off whole: nothing to quarantine"
    );
    cluster.assert_target_holds(0, 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_source_that_restarts_stays_frozen_until_the_flip() {
    let mut cluster = Cluster::start();
    cluster.fence_a_copy_of_partition_0(100).await;
    cluster.crash_and_restart(0);
    // The restarted source reads its fence before its first commit.
    let destination = Destination::new(TOPIC, 0);
    let refused = cluster.nodes[0].combiners().commit(
        &destination,
        CommitBatch {
            items: vec![CommitItem::new(
                Bytes::new(),
                Bytes::from_static(b"x"),
                None,
            )],
            deadline_ms: cluster.nodes[0]
                .combiners()
                .deadline_in(Duration::from_secs(1)),
        },
    );
    assert!(matches!(refused, Err(CommitError::Frozen)), "{refused:?}");
    for runner in &cluster.runners {
        runner.tick().await;
    }
    let combiners = cluster.nodes[0].combiners();
    assert!(
        combiners
            .freezes()
            .holds(&destination, combiners.logs().clock().now_ms()),
        "the move is still on: the fence holds"
    );
    cluster.flips_blocked.store(false, Ordering::Release);
    cluster
        .wait_for("the flip", |c| {
            c.owner(0).as_deref() == Some(&member_id(TARGET))
        })
        .await;
    cluster.commit(0, "after");
    cluster
        .wait_for("the source's copy gone", |c| {
            !partition_dir(c.data_dir(0), TOPIC, 0).exists()
        })
        .await;
    cluster.nodes[1].logs().close_partition(&destination);
    let mut expected: Vec<String> = (0..100).map(|n| format!("m{n}")).collect();
    expected.push("after".into());
    assert_eq!(cluster.stored(1, 0), expected);
}

/// One consume of `partition` on node `index` (up to `max`, 100 ms wait).
async fn consume_some(
    cluster: &Cluster,
    index: usize,
    partition: u32,
    max: usize,
) -> Vec<crate::consume::service::Delivery> {
    cluster.nodes[index]
        .consume()
        .consume(ConsumeRequest {
            topic: TOPIC.into(),
            partition: Some(partition),
            max,
            wait: Duration::from_millis(100),
        })
        .await
        .expect("consume")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_partition_gives_no_new_lease_while_acks_go_on() {
    let cluster = Cluster::start();
    for n in 0..20 {
        cluster.commit(1, &format!("m{n}"));
    }
    let leased = consume_some(&cluster, 0, 1, 4).await;
    assert_eq!(leased.len(), 4);
    let destination = Destination::new(TOPIC, 1);
    let freeze = cluster.nodes[0]
        .combiners()
        .freeze_for_handoff(&destination, &member_id(TARGET));
    assert!(
        consume_some(&cluster, 0, 1, 10).await.is_empty(),
        "no lease of a frozen partition"
    );
    let consume = Arc::clone(cluster.nodes[0].consume());
    for delivery in &leased {
        consume
            .settle(
                TOPIC,
                1,
                delivery.record.offset,
                delivery.nonce,
                Settle::Ack,
            )
            .expect("an ack during the freeze");
    }
    assert!(
        cluster.nodes[0]
            .combiners()
            .freezes()
            .release(&destination, freeze.token)
    );
    let after = consume_some(&cluster, 0, 1, 10).await;
    assert_eq!(
        after.iter().map(|d| d.record.offset).collect::<Vec<_>>(),
        (4..14).collect::<Vec<u64>>(),
        "leases again once the freeze is released, past the acked ones"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handoff_waits_for_outstanding_leases_within_its_bound() {
    let cluster = Cluster::start();
    for n in 0..10 {
        cluster.commit(2, &format!("m{n}"));
    }
    let meta = cluster.replicas[0].topic_meta(TOPIC).expect("topic");
    let consume = Arc::clone(cluster.nodes[0].consume());
    let leased = consume_some(&cluster, 0, 2, 3).await;
    assert_eq!(leased.len(), 3);
    // Nobody acks: the wait ends at its bound with the leases still out.
    let waited = consume
        .wait_for_leases(&meta, 2, Duration::from_millis(50))
        .await
        .expect("wait");
    assert_eq!(waited, 3);
    // Acked while it waits: it ends with none out.
    let waiting = {
        let (consume, meta) = (Arc::clone(&consume), Arc::clone(&meta));
        tokio::spawn(async move {
            consume
                .wait_for_leases(&meta, 2, Duration::from_secs(30))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    for delivery in &leased {
        consume
            .settle(
                TOPIC,
                2,
                delivery.record.offset,
                delivery.nonce,
                Settle::Ack,
            )
            .expect("ack");
    }
    assert_eq!(waiting.await.expect("join").expect("wait"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_owner_keeps_its_copy_until_the_leader_confirms_it_may_go() {
    let cluster = Cluster::start();
    move_1_while_no_leader_confirms(&cluster).await;
    // Every replica shows the move done, but no leader confirms it.
    for _ in 0..5 {
        for runner in &cluster.runners {
            runner.tick().await;
        }
    }
    let old_copy = partition_dir(cluster.data_dir(0), TOPIC, 1);
    assert!(
        old_copy.exists(),
        "the old owner's copy stays while no leader confirms"
    );
    assert!(
        cluster.nodes[0]
            .logs()
            .get(&Destination::new(TOPIC, 1))
            .is_some()
    );
    cluster.leader_down.store(false, Ordering::Release);
    cluster
        .wait_for("the old owner's copy removed", |_| !old_copy.exists())
        .await;
}

/// Commits 30 records to partition 1 and moves it to the target while no
/// leader confirms anything; returns once the flip shows.
async fn move_1_while_no_leader_confirms(cluster: &Cluster) {
    for n in 0..30 {
        cluster.commit(1, &format!("m{n}"));
    }
    cluster.leader_down.store(true, Ordering::Release);
    cluster.target_partition(1);
    cluster
        .wait_for("the flip", |c| {
            c.owner(1).as_deref() == Some(&member_id(TARGET))
        })
        .await;
}

/// Moves partition 1 (30 records) to the target while no leader confirms
/// anything, then sets `fault` and lets the leader answer again: the old
/// owner now releases its copy, and asks the new owner to vouch for it.
/// Returns the old owner's copy's path.
async fn hand_off_then(cluster: &Cluster, fault: &AtomicBool) -> PathBuf {
    move_1_while_no_leader_confirms(cluster).await;
    fault.store(true, Ordering::Release);
    cluster.leader_down.store(false, Ordering::Release);
    cluster
        .wait_for("the old owner's log closed", |c| {
            c.nodes[0].logs().get(&Destination::new(TOPIC, 1)).is_none()
        })
        .await;
    partition_dir(cluster.data_dir(0), TOPIC, 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_off_copy_stays_while_the_new_owner_cannot_vouch_for_it() {
    let cluster = Cluster::start();
    let old_copy = hand_off_then(&cluster, &cluster.faults.all).await;
    for _ in 0..5 {
        for runner in &cluster.runners {
            runner.tick().await;
        }
    }
    assert!(
        old_copy.exists(),
        "kept while the new owner cannot be asked"
    );
    let topic_dir = old_copy.parent().expect("topic directory");
    assert!(
        !list_names(topic_dir)
            .iter()
            .any(|name| name.contains(".quarantine-")),
        "kept, not quarantined"
    );
    // Reachable again: the sweep asks again within seconds, not minutes.
    cluster.faults.all.store(false, Ordering::Release);
    cluster
        .wait_for("the old owner's copy removed", |_| !old_copy.exists())
        .await;
    assert!(
        !list_names(topic_dir)
            .iter()
            .any(|name| name.contains(".quarantine-")),
        "removed, not quarantined"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_off_copy_is_quarantined_when_the_new_owner_lacks_its_records() {
    let cluster = Cluster::start();
    let old_copy = hand_off_then(&cluster, &cluster.faults.list_empty).await;
    let topic_dir = old_copy.parent().expect("topic directory").to_path_buf();
    cluster
        .wait_for("the old owner's copy quarantined", |_| {
            !old_copy.exists()
                && list_names(&topic_dir)
                    .iter()
                    .any(|name| name.starts_with("p00001.quarantine-"))
        })
        .await;
}

fn list_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// Marks `node` dead (as the leader does once it stops heartbeating) or
/// alive again (a heartbeat).
fn set_alive(cluster: &Cluster, node: NodeId, alive: bool) {
    let id = member_id(node);
    let stamp = cluster.replicas[0]
        .view()
        .metastore
        .member(&id)
        .expect("member")
        .last_heartbeat_ms;
    let command = if alive {
        Command::Heartbeat(narad_meta::Heartbeat {
            id,
            at_ms: stamp + 1_000,
        })
    } else {
        Command::MarkDead(narad_meta::MarkDead {
            id,
            observed_heartbeat_ms: stamp,
        })
    };
    cluster.log.apply(&command).expect("membership change");
}

/// The target's worker status for `partition`, if one runs.
fn worker_status(cluster: &Cluster, partition: u32) -> Option<super::status::MoveWorkerStatus> {
    cluster.runners[1]
        .report()
        .into_iter()
        .find(|status| status.partition == partition)
}

/// Payloads of the log in `dir` (a partition directory under any name).
fn payloads_in(disk: &Arc<dyn Disk>, dir: &Path) -> Vec<String> {
    let log = narad_plog::PartitionLog::open(
        Arc::clone(disk),
        dir,
        narad_plog::LogConfig::default(),
        crate::testing::system_clock(),
    )
    .expect("open the copy");
    let payloads = crate::testing::read_all(&log)
        .into_iter()
        .map(|record| String::from_utf8(record.payload).expect("utf-8"))
        .collect();
    log.close().expect("close");
    payloads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_sources_copy_is_force_promoted_and_its_old_copy_quarantined() {
    let cluster = Cluster::start_with(Duration::from_millis(300), TEST_FLIP_SETTLE);
    for n in 0..100 {
        cluster.commit(1, &format!("m{n}"));
    }
    // A consumer acks the first 10 on the source.
    for delivery in consume_some(&cluster, 0, 1, 10).await {
        cluster.nodes[0]
            .consume()
            .settle(
                TOPIC,
                1,
                delivery.record.offset,
                delivery.nonce,
                Settle::Ack,
            )
            .expect("ack");
    }
    // The copy reaches the frozen high watermark; the fence gets no answer.
    cluster.faults.fence.store(true, Ordering::Release);
    cluster.target_partition(1);
    cluster
        .wait_for("the copy and a failed fence", |c| {
            worker_status(c, 1)
                .is_some_and(|status| status.attempts >= 1 && status.copied_bytes > 0)
        })
        .await;
    // Cut off, the source's freeze ends (as an unfenced one lapses) and it
    // commits five more that the copy never sees.
    cluster.faults.all.store(true, Ordering::Release);
    cluster.nodes[0]
        .combiners()
        .freezes()
        .end(&Destination::new(TOPIC, 1));
    for n in 100..105 {
        cluster.commit(1, &format!("m{n}"));
    }
    // Not promoted while the source is merely unreachable.
    for _ in 0..3 {
        for runner in &cluster.runners {
            runner.tick().await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(cluster.owner(1), Some(member_id(SOURCE)));
    set_alive(&cluster, SOURCE, false);
    cluster
        .wait_for("the force-promote", |c| {
            c.owner(1).as_deref() == Some(&member_id(TARGET))
        })
        .await;
    // The flip shows in the replica before the worker removes its marker.
    cluster
        .wait_for("the worker done", |c| worker_status(c, 1).is_none())
        .await;
    let copied: Vec<String> = (0..100).map(|n| format!("m{n}")).collect();
    let target_dir = partition_dir(cluster.data_dir(1), TOPIC, 1);
    assert!(
        !target_dir
            .join(super::files::MOVE_MARKER_FILE_NAME)
            .exists()
    );
    assert!(!target_dir.join(super::files::INCOMING_FILE_NAME).exists());
    // The new owner starts from the position of the source's last listing.
    let first = consume_some(&cluster, 1, 1, 1).await;
    assert_eq!(
        first.iter().map(|d| d.record.offset).collect::<Vec<_>>(),
        vec![10],
        "the acked prefix is not delivered again"
    );
    cluster.nodes[1]
        .logs()
        .close_partition(&Destination::new(TOPIC, 1));
    assert_eq!(cluster.stored(1, 1), copied);
    // The source comes back: its copy holds what the new owner lacks, so it
    // is quarantined, not removed.
    cluster.faults.all.store(false, Ordering::Release);
    set_alive(&cluster, SOURCE, true);
    let old_dir = partition_dir(cluster.data_dir(0), TOPIC, 1);
    cluster
        .wait_for("the old copy retired", |_| !old_dir.exists())
        .await;
    let quarantined = cluster.nodes[0]
        .logs()
        .quarantined_partitions()
        .expect("list quarantined copies");
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    let mut all = copied.clone();
    all.extend((100..105).map(|n| format!("m{n}")));
    assert_eq!(payloads_in(&cluster.disk, &quarantined[0]), all);
    assert_eq!(
        cluster.nodes[0]
            .logs()
            .quarantine_stats()
            .expect("stats")
            .copies,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_source_with_the_copy_behind_blocks_the_move_until_it_returns() {
    let cluster = Cluster::start_with(Duration::from_millis(300), TEST_FLIP_SETTLE);
    for n in 0..50 {
        cluster.commit(2, &format!("m{n}"));
    }
    // The source lists but sends no bytes, then is cut off and marked dead.
    cluster.faults.fetch.store(true, Ordering::Release);
    cluster.target_partition(2);
    cluster
        .wait_for("a listing and a failed fetch", |c| {
            worker_status(c, 2).is_some_and(|status| status.attempts >= 1)
        })
        .await;
    cluster.faults.all.store(true, Ordering::Release);
    set_alive(&cluster, SOURCE, false);
    cluster
        .wait_for("the move reported blocked", |c| {
            worker_status(c, 2).is_some_and(|status| {
                status.blocked.as_deref() == Some(super::decide::BLOCKED_SOURCE_DEAD_COPY_BEHIND)
            })
        })
        .await;
    assert_eq!(cluster.owner(2), Some(member_id(SOURCE)));
    cluster.runners[1].tick().await;
    assert!(
        cluster.nodes[1]
            .api()
            .metrics
            .render()
            .contains("narad_moves_blocked{reason=\"source_dead_copy_behind\"} 1")
    );
    // Back: the move completes through a handoff, and the old copy (fenced)
    // is removed, not quarantined.
    cluster.faults.all.store(false, Ordering::Release);
    cluster.faults.fetch.store(false, Ordering::Release);
    set_alive(&cluster, SOURCE, true);
    cluster
        .wait_for("the flip", |c| {
            c.owner(2).as_deref() == Some(&member_id(TARGET))
        })
        .await;
    let old_dir = partition_dir(cluster.data_dir(0), TOPIC, 2);
    cluster
        .wait_for("the old copy removed", |_| !old_dir.exists())
        .await;
    assert!(
        cluster.nodes[0]
            .logs()
            .quarantined_partitions()
            .expect("list")
            .is_empty()
    );
    cluster.assert_target_holds(2, 50);
}
