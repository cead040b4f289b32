//! A whole data node on the simulated disk, driven one step at a time by a
//! seeded scheduler on a simulated clock, then cut off by a power loss at a
//! seeded point and recovered.
//!
//! The parts are the production ones, wired as the node wires them, but
//! stepped by this harness instead of by their threads: the acceptor
//! (ingress checks, placement) appending to the ingress WAL, the
//! dispatcher's state machine reading the WAL, the local combiner
//! committing into the partition logs, the dispatch checkpoint and WAL
//! compaction, and a consumer that reads what the logs make visible, acks
//! out of order, and whose position the consumer-state store writes on its
//! cadence. Each step waits for its own I/O, so the order of disk
//! operations, and with it the power cut, follows from the seed alone (the
//! WAL's sync thread serves one waiting append at a time).
//!
//! The power cut: at a seeded step, every disk operation from a seeded
//! point on fails (the device is gone); a few more steps run against the
//! dead disk; then the simulated disk crashes, dropping every unsynced
//! write and tearing each file's last one. Recovery opens a new node on the
//! same disk, drains the WAL, and checks:
//! - every produce that was acknowledged is stored, byte for byte, in the
//!   partition it was placed in, exactly once (records carry their WAL
//!   origin, so a re-dispatch stores nothing twice);
//! - every record a consumer saw is still there, at the same offset, with
//!   the same bytes (nothing was visible before it was durable);
//! - the recovered consumer position never claims an offset the consumer
//!   had not settled, and is no older than what the consumer had settled
//!   one tick plus one durability interval before the power cut;
//! - nothing panicked.
//!
//! A seed runs in either of two layouts: the WAL under the data directory,
//! or under a `storage.wal_dir` of its own. Both directories are on the one
//! simulated disk, so the power cut takes both at once, as a host's power
//! loss takes both devices; one device failing alone is not simulated.
//!
//! `cargo test` runs [`SEEDS_IN_TEST`] seeds in each layout. The ignored test
//! `node_sim::many_seeds` runs `NARAD_SIM_SEEDS` (default 10,000) and
//! `node_sim::replay` one seed, `NARAD_SIM_SEED`, in the layout
//! `NARAD_SIM_OWN_WAL_DIR` picks (set: the WAL's own directory); a failing
//! seed prints the command that replays it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use narad_disk::Disk;
use narad_disk::sim::{Fault, FaultError, FaultOp, SimDisk, Tear};
use narad_plog::{LogConfig, PartitionLog, ReadEntry, ReadLimits};
use narad_wal::{CheckpointConfig, CheckpointStore, Wal, WalOptions, WalReader};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::commit::{Combiners, commit_locally};
use crate::consume::ahead::{
    ConsumerPosition, ConsumerStateConfig, ConsumerStateStore, PositionSource, StateTicket,
};
use crate::dispatch::{Command, DispatchConfig, Dispatcher, RecordNames, WalPayload, held_of};
use crate::ingress::partition::key_partition;
use crate::ingress::{Acceptor, ProduceMessage};
use crate::metadata::MetadataReplica;
use crate::metrics::NodeMetrics;
use crate::partitions::{LocalLogs, partition_dir};
use crate::testing::{LOCAL_NODE, read_all, register, topic};
use crate::topology::Destination;

/// Seeds `cargo test` runs.
const SEEDS_IN_TEST: u64 = 200;

const DATA_DIR: &str = "/node";
/// `storage.wal_dir` of [`Layout::OwnWalDir`].
const WAL_ROOT: &str = "/wal";
const TOPIC: &str = "sim";
const PARTITIONS: u32 = 3;
/// Steps before the power cut is armed at the latest.
const STEPS: usize = 160;
/// Steps that run against the dead disk before it crashes.
const STEPS_AFTER_CUT: usize = 6;
/// The consumer-state cadence of the simulation: short, so writeouts and
/// levellings happen within a run.
const STATE_TICK: Duration = Duration::from_millis(20);
const STATE_DURABLE: Duration = Duration::from_millis(100);

/// Where the node keeps its ingress WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Under the data directory (`storage.wal_dir` unset).
    WalUnderDataDir,
    /// Under [`WAL_ROOT`] (`storage.wal_dir` set).
    OwnWalDir,
}

impl Layout {
    /// `storage.wal_dir`.
    fn wal_root(self) -> Option<&'static Path> {
        match self {
            Self::WalUnderDataDir => None,
            Self::OwnWalDir => Some(Path::new(WAL_ROOT)),
        }
    }
}

/// What one seed found, for the totals the tests print.
#[derive(Debug, Default, Clone, Copy)]
struct SeedReport {
    /// Produces answered with success.
    acknowledged: usize,
    /// Records the consumer saw before the cut.
    seen: usize,
    /// Whether the cut hit before the last step (it always does unless the
    /// run did fewer disk operations than the cut point).
    cut: bool,
}

/// A consumer's position as the store reads it, shared with the harness.
#[derive(Debug, Default)]
struct Source(Mutex<ConsumerPosition>);

impl PositionSource for Source {
    fn position(&self) -> ConsumerPosition {
        self.0.lock().clone()
    }
}

/// One partition's consumer, as the harness models it.
#[derive(Debug, Default)]
struct Consumer {
    /// Offsets read and not settled yet.
    leased: BTreeSet<u64>,
    /// The next offset to read.
    next_read: u64,
    /// Settled offsets: the frontier and those above it.
    position: ConsumerPosition,
    /// (simulated ms, frontier) after every change.
    history: Vec<(u64, u64)>,
}

impl Consumer {
    fn settle(&mut self, offset: u64, now_ms: u64) {
        self.leased.remove(&offset);
        let position = &mut self.position;
        if offset == position.frontier {
            position.frontier += 1;
            while position.acked_ahead.first() == Some(&position.frontier) {
                position.acked_ahead.remove(0);
                position.frontier += 1;
            }
        } else if let Err(at) = position.acked_ahead.binary_search(&offset) {
            position.acked_ahead.insert(at, offset);
        }
        self.history.push((now_ms, position.frontier));
    }

    fn settled(&self, offset: u64) -> bool {
        offset < self.position.frontier || self.position.acked_ahead.binary_search(&offset).is_ok()
    }

    /// The frontier as it was at `ms` (0 before any settle).
    fn frontier_at(&self, ms: u64) -> u64 {
        self.history
            .iter()
            .take_while(|(at, _)| *at <= ms)
            .last()
            .map_or(0, |(_, frontier)| *frontier)
    }
}

/// A node's parts, as the harness steps them.
struct Node {
    wal: Arc<Wal>,
    checkpoint: Arc<CheckpointStore>,
    acceptor: Acceptor,
    replica: Arc<MetadataReplica>,
    dispatcher: Dispatcher<WalPayload>,
    reader: WalReader,
    combiners: Combiners,
    logs: Arc<LocalLogs>,
    store: Arc<ConsumerStateStore>,
    sources: Vec<Arc<Source>>,
    tickets: Vec<StateTicket>,
    recovered: Vec<ConsumerPosition>,
    names: RecordNames,
}

impl Node {
    /// Checks the directories of `layout` and opens every part on `disk`,
    /// as a node start does.
    fn open(disk: &Arc<dyn Disk>, layout: Layout) -> Result<Self, String> {
        let data = Path::new(DATA_DIR);
        let wal_dir = crate::node::dirs::prepare(&**disk, data, layout.wal_root())
            .map_err(|e| format!("directories: {e}"))?;
        // Small segments, so runs roll and compact them.
        let options = WalOptions {
            segment_bytes: 64 * 1024,
            record_bytes_max: 4 * 1024,
            ..WalOptions::default()
        };
        let wal = Arc::new(
            Wal::open(Arc::clone(disk), &wal_dir, options).map_err(|e| format!("wal: {e}"))?,
        );
        // The flusher never runs on its own within a step: the harness
        // syncs the checkpoint as a step of its own.
        let checkpoint = Arc::new(
            CheckpointStore::open(
                &**disk,
                &wal_dir,
                CheckpointConfig {
                    sync_delay: Duration::from_secs(10),
                },
                crate::testing::system_clock(),
            )
            .map_err(|e| format!("checkpoint: {e}"))?,
        );
        let replica = Arc::new(MetadataReplica::new(LOCAL_NODE));
        register(&replica, LOCAL_NODE);
        topic(&replica, TOPIC, 0x51, PARTITIONS, LOCAL_NODE);
        let acceptor = Acceptor::new(
            Arc::clone(&wal),
            Arc::clone(&replica),
            7,
            crate::testing::system_clock(),
        );
        let start = wal.dispatch_start(checkpoint.stored());
        let reader = wal.reader(start).map_err(|e| format!("reader: {e}"))?;
        let dispatcher = Dispatcher::new(DispatchConfig::default(), start);
        let logs = Arc::new(LocalLogs::new(
            Arc::clone(disk),
            data,
            LogConfig {
                segment_bytes: 16 * 1024,
                ..LogConfig::default()
            },
            crate::testing::system_clock(),
        ));
        let combiners = Combiners::new(
            Arc::clone(&logs),
            Arc::clone(&replica),
            Arc::new(NodeMetrics::new()),
        );
        let store = ConsumerStateStore::new(
            Arc::clone(disk),
            ConsumerStateConfig {
                tick: STATE_TICK,
                durable_interval: STATE_DURABLE,
                offset_level_interval: Duration::from_millis(300),
                handles_max: 8,
            },
        );
        let mut sources = Vec::new();
        let mut tickets = Vec::new();
        let mut recovered = Vec::new();
        for partition in 0..PARTITIONS {
            // Opening the log creates the partition directory the store
            // needs.
            let destination = Destination::new(TOPIC, partition);
            let incarnation = replica
                .topic_meta(TOPIC)
                .and_then(|meta| meta.incarnation_id.clone());
            logs.resolve(&destination, incarnation.as_ref())
                .map_err(|e| format!("log {partition}: {e}"))?;
            let dir = partition_dir(data, TOPIC, partition);
            let source = Arc::new(Source::default());
            let weak: Weak<dyn PositionSource> =
                Arc::downgrade(&source) as Weak<dyn PositionSource>;
            let (position, ticket) = store
                .attach(&dir, weak)
                .map_err(|e| format!("consumer state {partition}: {e}"))?;
            *source.0.lock() = position.clone();
            recovered.push(position);
            sources.push(source);
            tickets.push(ticket);
        }
        Ok(Self {
            wal,
            checkpoint,
            acceptor,
            replica,
            dispatcher,
            reader,
            combiners,
            logs,
            store,
            sources,
            tickets,
            recovered,
            names: RecordNames::default(),
        })
    }

    fn log(&self, partition: u32) -> Option<Arc<PartitionLog>> {
        self.logs.get(&Destination::new(TOPIC, partition))
    }

    /// Reads what the dispatcher asks for, runs its commands, commits
    /// synchronously. Returns whether anything happened.
    fn dispatch(&mut self, now: Duration) -> bool {
        self.dispatcher
            .durable_advanced(self.wal.next_durable_seq());
        let mut progressed = false;
        while let Some(seq) = self.dispatcher.next_read(&*self.replica, now) {
            if self.reader.next_seq() != seq && self.reader.seek(seq).is_err() {
                return progressed;
            }
            let Ok(Some(frame)) = self.reader.next_frame() else {
                return progressed;
            };
            let (meta, payload) = held_of(
                seq,
                frame.payload,
                &self.wal,
                &self.checkpoint,
                &mut self.names,
            )
            .expect("a durable WAL record decodes");
            self.dispatcher
                .place(seq, meta, payload, &*self.replica, now);
            progressed = true;
        }
        for command in self.dispatcher.poll(&*self.replica, now) {
            progressed = true;
            match command {
                Command::Commit(order) => {
                    let outcome = commit_locally(&self.combiners, &order);
                    self.dispatcher
                        .commit_done(order.id, outcome, order.records, now);
                }
                Command::StoreCheckpoint(seq) => {
                    let _ = self.checkpoint.store(seq);
                }
                Command::ConfirmGone(_) | Command::Discarded { .. } => {
                    panic!("the simulated topic is never deleted")
                }
            }
        }
        progressed
    }

    /// Dispatches until every durable WAL record is committed.
    fn drain(&mut self, now: Duration) {
        for _ in 0..10_000 {
            self.dispatch(now);
            if self.dispatcher.checkpoint() >= self.wal.next_durable_seq() {
                return;
            }
        }
        panic!(
            "dispatch never drained: checkpoint {} of {}",
            self.dispatcher.checkpoint(),
            self.wal.next_durable_seq()
        );
    }
}

/// Every record of the simulated topic's partitions, read back: partition
/// → (offset, payload).
fn stored(node: &Node) -> BTreeMap<u32, Vec<(u64, Vec<u8>)>> {
    (0..PARTITIONS)
        .map(|partition| {
            let log = node.log(partition).expect("an open log");
            let records = read_all(&log)
                .into_iter()
                .map(|record| (record.offset, record.payload))
                .collect();
            (partition, records)
        })
        .collect()
}

/// One seed in `layout`, start to check. Panics (with the seed in the
/// message) on any broken promise.
fn run_seed(seed: u64, layout: Layout) -> SeedReport {
    let mut rng = StdRng::seed_from_u64(seed);
    let sim = SimDisk::new(seed);
    let disk: Arc<dyn Disk> = Arc::new(sim.clone());
    let mut now_ms: u64 = 0;
    let mut node =
        Node::open(&disk, layout).unwrap_or_else(|e| panic!("seed {seed}: first open: {e}"));
    let mut acknowledged: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut seen: BTreeMap<(u32, u64), Vec<u8>> = BTreeMap::new();
    let mut consumers: Vec<Consumer> = (0..PARTITIONS).map(|_| Consumer::default()).collect();
    let mut next_id = 0u64;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let cut_step = rng.random_range(0..STEPS);
    let mut cut_armed_at: Option<u64> = None;
    let mut cut_hit_ms: Option<u64> = None;
    let meta = node.replica.topic_meta(TOPIC).expect("the topic");
    for step in 0..cut_step + STEPS_AFTER_CUT {
        if step == cut_step {
            let nth = rng.random_range(0..12);
            cut_armed_at = Some(sim.op_count() + nth);
            sim.inject(Fault {
                op: FaultOp::Any,
                nth,
                error: FaultError::Eio,
                sticky: true,
            });
        }
        now_ms += rng.random_range(1..=15);
        let now = Duration::from_millis(now_ms);
        match rng.random_range(0..100) {
            0..30 => {
                let count = rng.random_range(1..=4);
                let messages: Vec<ProduceMessage> = (0..count)
                    .map(|_| {
                        next_id += 1;
                        let id = format!("m{next_id:06}-{}", "x".repeat((next_id % 40) as usize));
                        let pinned = rng.random_bool(0.5);
                        ProduceMessage {
                            key: if pinned {
                                Vec::new()
                            } else {
                                id.clone().into_bytes()
                            },
                            partition: pinned.then(|| rng.random_range(0..PARTITIONS)),
                            payload: Bytes::from(id.into_bytes()),
                            idempotency_key: Vec::new(),
                        }
                    })
                    .collect();
                let accepted = runtime.block_on(node.acceptor.accept_batch(&meta, &messages));
                if accepted.is_ok() {
                    for message in &messages {
                        let partition = message
                            .partition
                            .unwrap_or_else(|| key_partition(&message.key, PARTITIONS));
                        acknowledged.push((partition, message.payload.to_vec()));
                    }
                }
            }
            30..60 => {
                node.dispatch(now);
            }
            60..68 => {
                let _ = node.checkpoint.sync_now();
            }
            68..72 => {
                let _ = node.wal.compact_behind(&node.checkpoint);
            }
            _ => {
                let partition = rng.random_range(0..PARTITIONS);
                consume_step(
                    &mut node,
                    &mut consumers,
                    &mut seen,
                    &mut rng,
                    partition,
                    now_ms,
                );
            }
        }
        // The store's cadence runs on every step, so the window slot is
        // never older than one step.
        node.store.tick(now_ms);
        if cut_hit_ms.is_none() && cut_armed_at.is_some_and(|at| sim.op_count() > at) {
            cut_hit_ms = Some(now_ms);
        }
    }
    let cut = cut_hit_ms.is_some();
    // The fault may have hit during this step; what the consumer settled
    // before the step began is the last that could have been made durable.
    let cut_ms = cut_hit_ms.unwrap_or(now_ms);
    drop(node);
    sim.clear_faults();
    sim.crash(Tear::LastWrite);

    let mut node = Node::open(&disk, layout)
        .unwrap_or_else(|e| panic!("seed {seed}: open after the cut: {e}"));
    node.drain(Duration::from_millis(now_ms + 1_000));
    check(seed, &node, &acknowledged, &seen, &consumers, cut_ms);
    check_layout(seed, &disk, layout);
    SeedReport {
        acknowledged: acknowledged.len(),
        seen: seen.len(),
        cut,
    }
}

/// The consumer of `partition` reads what is visible past what it read,
/// then settles a random part of what it holds, in random order.
fn consume_step(
    node: &mut Node,
    consumers: &mut [Consumer],
    seen: &mut BTreeMap<(u32, u64), Vec<u8>>,
    rng: &mut StdRng,
    partition: u32,
    now_ms: u64,
) {
    let Some(log) = node.log(partition) else {
        return;
    };
    let consumer = &mut consumers[partition as usize];
    let limits = ReadLimits {
        records_max: rng.random_range(1..=8),
        ..ReadLimits::default()
    };
    if let Ok(batch) = log.read(consumer.next_read, u64::MAX, limits) {
        for entry in batch.entries {
            if let ReadEntry::Record(record) = entry {
                seen.insert((partition, record.offset), record.payload);
                consumer.leased.insert(record.offset);
            }
        }
        consumer.next_read = batch.next_offset.max(consumer.next_read);
    }
    let held: Vec<u64> = consumer.leased.iter().copied().collect();
    for offset in held {
        if rng.random_bool(0.6) {
            consumer.settle(offset, now_ms);
        }
    }
    *node.sources[partition as usize].0.lock() = consumer.position.clone();
    node.tickets[partition as usize].touched();
}

fn check(
    seed: u64,
    node: &Node,
    acknowledged: &[(u32, Vec<u8>)],
    seen: &BTreeMap<(u32, u64), Vec<u8>>,
    consumers: &[Consumer],
    cut_ms: u64,
) {
    let stored = stored(node);
    let mut copies: BTreeMap<(u32, &[u8]), usize> = BTreeMap::new();
    for (partition, records) in &stored {
        for (_, payload) in records {
            *copies.entry((*partition, payload.as_slice())).or_default() += 1;
        }
    }
    for (partition, payload) in acknowledged {
        let count = copies
            .get(&(*partition, payload.as_slice()))
            .copied()
            .unwrap_or(0);
        assert_eq!(
            count,
            1,
            "seed {seed}: acknowledged {:?} is stored {count} times in partition {partition}",
            String::from_utf8_lossy(payload)
        );
    }
    for ((partition, offset), payload) in seen {
        let found = stored[partition]
            .iter()
            .find(|(at, _)| at == offset)
            .map(|(_, bytes)| bytes);
        assert_eq!(
            found,
            Some(payload),
            "seed {seed}: partition {partition} offset {offset} was seen by a consumer and then lost or changed"
        );
    }
    let bound = cut_ms.saturating_sub((STATE_DURABLE + 2 * STATE_TICK).as_millis() as u64);
    for (partition, consumer) in consumers.iter().enumerate() {
        let recovered = &node.recovered[partition];
        assert!(
            recovered.frontier <= consumer.position.frontier
                || (consumer.position.frontier..recovered.frontier).all(|o| consumer.settled(o)),
            "seed {seed}: partition {partition} recovered frontier {} past the settled {}",
            recovered.frontier,
            consumer.position.frontier
        );
        for offset in &recovered.acked_ahead {
            assert!(
                consumer.settled(*offset),
                "seed {seed}: partition {partition} recovered {offset} as settled; it was not"
            );
        }
        let durable = consumer.frontier_at(bound);
        assert!(
            recovered.frontier >= durable,
            "seed {seed}: partition {partition} recovered frontier {} is older than {durable}, \
             settled by {bound} ms (cut at {cut_ms} ms)",
            recovered.frontier
        );
    }
}

/// The WAL's segments are where `layout` puts them, and only there.
fn check_layout(seed: u64, disk: &Arc<dyn Disk>, layout: Layout) {
    let data = Path::new(DATA_DIR);
    let default_wal = crate::node::dirs::ingress_wal_dir(data);
    let (wal, not_wal) = match layout {
        Layout::WalUnderDataDir => (default_wal, Path::new(WAL_ROOT).to_path_buf()),
        Layout::OwnWalDir => (
            crate::node::dirs::ingress_wal_dir(Path::new(WAL_ROOT)),
            data.join("ingress"),
        ),
    };
    let segments = disk
        .list_dir(&wal)
        .unwrap_or_default()
        .iter()
        .filter(|name| narad_wal::segment::parse_segment_name(name).is_some())
        .count();
    assert!(
        segments > 0,
        "seed {seed}: no WAL segment in {}",
        wal.display()
    );
    assert!(
        !disk.exists(&not_wal).expect("exists"),
        "seed {seed}: {} exists in layout {layout:?}",
        not_wal.display()
    );
}

/// Runs `seeds` in `layout`, printing the replay command of the first
/// that fails.
fn run_seeds(seeds: std::ops::Range<u64>, layout: Layout) -> (usize, usize, usize) {
    let mut totals = (0, 0, 0);
    for seed in seeds {
        let report = std::panic::catch_unwind(|| run_seed(seed, layout)).unwrap_or_else(|panic| {
            let flag = match layout {
                Layout::WalUnderDataDir => "",
                Layout::OwnWalDir => "NARAD_SIM_OWN_WAL_DIR=1 ",
            };
            eprintln!(
                "node simulation failed at seed {seed} ({layout:?}); replay it with:\n  \
                 {flag}NARAD_SIM_SEED={seed} cargo test -p narad-dataplane --lib node_sim::replay -- --ignored --nocapture"
            );
            std::panic::resume_unwind(panic)
        });
        totals.0 += report.acknowledged;
        totals.1 += report.seen;
        totals.2 += usize::from(report.cut);
    }
    totals
}

/// Runs [`SEEDS_IN_TEST`] seeds in `layout` and checks the cut landed
/// inside most runs.
fn run_test_seeds(layout: Layout) {
    let (acknowledged, seen, cut) = run_seeds(0..SEEDS_IN_TEST, layout);
    println!(
        "{SEEDS_IN_TEST} seeds ({layout:?}): {acknowledged} acknowledged, {seen} seen by \
         consumers, the cut hit in {cut}"
    );
    assert!(
        cut as u64 > SEEDS_IN_TEST / 2,
        "the cut landed inside most runs"
    );
}

#[test]
fn every_seed_keeps_every_promise_through_a_power_cut() {
    run_test_seeds(Layout::WalUnderDataDir);
}

#[test]
fn every_seed_keeps_every_promise_through_a_power_cut_with_the_wal_in_its_own_directory() {
    run_test_seeds(Layout::OwnWalDir);
}

/// The layout `NARAD_SIM_OWN_WAL_DIR` names (set: [`Layout::OwnWalDir`]).
fn layout_from_env() -> Layout {
    if std::env::var_os("NARAD_SIM_OWN_WAL_DIR").is_some() {
        Layout::OwnWalDir
    } else {
        Layout::WalUnderDataDir
    }
}

#[test]
#[ignore = "10,000 seeds take minutes; run with --ignored"]
fn many_seeds() {
    let seeds: u64 = std::env::var("NARAD_SIM_SEEDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(10_000);
    let layout = layout_from_env();
    let (acknowledged, seen, cut) = run_seeds(0..seeds, layout);
    println!(
        "{seeds} seeds ({layout:?}): {acknowledged} acknowledged, {seen} seen, the cut hit in {cut}"
    );
}

#[test]
#[ignore = "replays NARAD_SIM_SEED"]
fn replay() {
    let seed: u64 = std::env::var("NARAD_SIM_SEED")
        .expect("NARAD_SIM_SEED")
        .parse()
        .expect("a seed");
    println!("{:?}", run_seed(seed, layout_from_env()));
}
