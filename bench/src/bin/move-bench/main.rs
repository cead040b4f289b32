//! `move-bench`: how long a partition move takes under produce load, how
//! fast it copies next to the same run's raw disk, and what it does to
//! produce latency.
//!
//! Starts 3 `narad control` and 3 `narad data` processes (see
//! [`narad_bench::cluster`]), creates a topic of 4 partitions, which a
//! fresh cluster places round robin (partition 3 on node 1 beside
//! partition 0), and fills partition 3 with `--bytes` (1 GiB by default)
//! through batch produces pinned to it, and drops the partition's cached
//! pages on node 1 (see [`FREED_PAGES_SETTLE`]). Then it drives an
//! open-loop load of `--rate` keyless single produces a second (see
//! [`load`]) over data nodes 1-3 and, after a warm-up and the `--before`
//! window, starts data node 4. Each node
//! then should hold one partition, so the planner moves exactly one:
//! partition 3 (the highest of the over-quota node) from node 1 to node 4;
//! anything else fails the run. The move runs from node 4 answering
//! `/readyz` to the first describe through node 1 that names node 4 as
//! partition 3's owner; the load goes on for `--after` past that.
//!
//! Same-run baselines: sequential write and read of a file as large as the
//! partition (at most 1 GiB), its cached pages dropped before the read
//! (see [`narad_bench::baseline::drop_cached_pages`]), and 4 KiB write +
//! fdatasync, each half before and half after the cluster phases; the
//! cluster transport alone (see [`transport`]), before the cluster starts;
//! and the copy itself read back cold from node 4's disk after the cluster
//! stopped.
//!
//! Targets: the copy rate (the partition's bytes over the move's duration)
//! at least half the raw disk rate (the slower of sequential write and
//! read) and half the cold read of the copy's own files; narad CPU of the
//! source and target data nodes during the move at most 1.5 core-seconds
//! per GB copied (`copy_core_s_per_gb`); and produce p99 during the move
//! at most twice its p99 before.
//!
//! Writes `target/bench/move.json` and `move.png`, then prints one line per
//! target.

mod load;
mod partition;
mod transport;

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use narad_bench::baseline::{self, FdatasyncBaseline, SequentialRates};
use narad_bench::cluster::Cluster;
use narad_bench::cpu::cpu_seconds;
use narad_bench::node::{load_average, narad_binary};
use narad_bench::report::Report;
use narad_bench::verdict::{self, Verdict};

use load::{Load, Sample, Window};
use partition::{PartitionStats, describe, metric, owners};

const TOPIC: &str = "move-bench";
const PARTITIONS: usize = 4;
/// Control and data nodes the cluster starts with.
const NODES: usize = 3;
/// The partition that moves, its owner before and after.
const MOVED: usize = 3;
const SOURCE_NODE: &str = "1";
const TARGET_NODE: &str = "4";
/// Where a fresh cluster of three data nodes places four partitions
/// (round robin from node 1), and where the planner leaves them once node
/// 4 has joined (each node ⌊4/4⌋ = 1; node 1 gives up its highest).
const OWNERS_PLACED: [&str; PARTITIONS] = ["1", "2", "3", "1"];
const OWNERS_MOVED: [&str; PARTITIONS] = ["1", "2", "3", "4"];
/// Pause between dropping the moved partition's cached pages and the load.
/// A VM's balloon driver hands freed memory back to its host about 2 s
/// after it was freed, and on this project's VMs that stalled every
/// process's I/O for about 0.4 s: dropped just before node 4 starts, it
/// landed in the move's window, though no move caused it.
const FREED_PAGES_SETTLE: Duration = Duration::from_secs(4);
/// Load before the `--before` window, not counted.
const WARMUP: Duration = Duration::from_secs(2);
/// How often the move is looked at.
const POLL: Duration = Duration::from_millis(100);
/// How long node 4 may take to describe the moved partition as its own.
const SETTLE_MAX: Duration = Duration::from_secs(30);
/// Width of one point of the latency chart.
const CHART_BUCKET_US: u64 = 500_000;
/// The sequential baselines' file: the partition's size, up to this.
const SEQUENTIAL_BYTES_MAX: u64 = 1 << 30;
/// Samples of the fdatasync baseline, half before and half after.
const FDATASYNC_SAMPLES: usize = 500;
/// Targets: the copy at least this share of the raw disk rate; produce p99
/// during the move at most this multiple of its p99 before.
const TARGET_COPY_SHARE: f64 = 0.5;
const TARGET_P99_GROWTH: f64 = 2.0;
/// Target: narad CPU (source and target data nodes) per GB copied.
const TARGET_COPY_CORE_S_PER_GB: f64 = 1.5;
/// Fetches outstanding in the transport baseline's passes: one at a time,
/// and as many as a move keeps.
const TRANSPORT_IN_FLIGHT: [usize; 2] = [1, 4];

const USAGE: &str = "move-bench [--bytes 1073741824] [--rate 5000] [--before 10s] [--after 5s] \
[--move-max 10m]";

/// Sizes, rates and windows, from the flags.
#[derive(Clone, Debug, PartialEq)]
struct Options {
    /// Bytes of messages the moved partition is filled with.
    bytes: u64,
    /// Produce requests a second of the load.
    rate: u64,
    /// The measured window before the move.
    before: Duration,
    /// How long the load goes on after the move.
    after: Duration,
    /// A move not done by then fails the run.
    move_max: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            bytes: 1 << 30,
            rate: 5_000,
            before: Duration::from_secs(10),
            after: Duration::from_secs(5),
            move_max: Duration::from_secs(600),
        }
    }
}

impl Options {
    fn parse(args: impl IntoIterator<Item = String>) -> io::Result<Option<Self>> {
        let mut options = Self::default();
        let Some(pairs) = narad_bench::flag_pairs(args, USAGE)? else {
            return Ok(None);
        };
        for (flag, value) in pairs {
            let bad = || io::Error::other(format!("{flag} {value:?}: not understood; {USAGE}"));
            let positive = || value.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(bad);
            let duration = || {
                narad_bench::parse_duration(&value)
                    .filter(|duration| !duration.is_zero())
                    .ok_or_else(bad)
            };
            match flag.as_str() {
                "--bytes" => options.bytes = positive()?,
                "--rate" => options.rate = positive()?,
                "--before" => options.before = duration()?,
                "--after" => options.after = duration()?,
                "--move-max" => options.move_max = duration()?,
                _ => return Err(io::Error::other(format!("unknown flag {flag:?}; {USAGE}"))),
            }
        }
        Ok(Some(options))
    }
}

fn main() -> io::Result<()> {
    let Some(options) = Options::parse(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(());
    };
    let scratch = narad_bench::bench_dir()?.join(format!("move-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch)?;
    let mut report = Report::new("move");
    note_method(&mut report, &options);

    let sequential_bytes = options.bytes.min(SEQUENTIAL_BYTES_MAX);
    let mut fdatasync = FdatasyncBaseline::default();
    fdatasync.sample(&scratch, FDATASYNC_SAMPLES)?;
    let rates_before = baseline::seq_write_and_read(&scratch, sequential_bytes)?;
    let transport = transport::measure(sequential_bytes, &TRANSPORT_IN_FLIGHT)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let moved = runtime.block_on(measure(&scratch, &options, &mut report))?;
    let rates_after = baseline::seq_write_and_read(&scratch, sequential_bytes)?;
    fdatasync.sample(&scratch, FDATASYNC_SAMPLES)?;
    fdatasync.record(&mut report);
    report.note("load_average_at_end", &load_average());

    let disk = record_sequential(&mut report, sequential_bytes, rates_before, rates_after);
    record_transport(&mut report, &transport);
    let verdicts = judge(&mut report, &moved, disk);
    let path = report.write()?;
    println!(
        "{}",
        serde_json::to_string_pretty(&report.to_json()).map_err(io::Error::other)?
    );
    println!("wrote {}", path.display());
    println!(
        "moved partition {MOVED} from node {SOURCE_NODE} to node {TARGET_NODE}: {:.0} MB in \
         {:.1} s, {:.0} MB/s",
        moved.bytes as f64 / 1e6,
        moved.seconds,
        moved.copy_mb_per_s()
    );
    verdict::print_summary(&verdicts);
    let _ = fs::remove_dir_all(&scratch);
    Ok(())
}

fn note_method(report: &mut Report, options: &Options) {
    report.note("load_average_at_start", &load_average());
    report.note(
        "cluster",
        &format!(
            "{NODES} narad control + {NODES} narad data processes on loopback, security off; \
             data node 4 started after the before window with the same flags"
        ),
    );
    report.note(
        "fill",
        &format!(
            "partition {MOVED} filled with {} bytes of {}-byte messages (JSON string payloads) in \
             batch produces of {} pinned to it per message, sent to node {SOURCE_NODE}",
            options.bytes,
            partition::FILL_MESSAGE_BYTES,
            partition::FILL_BATCH
        ),
    );
    report.note(
        "load",
        &format!(
            "open loop: {} keyless single produces of {} B a second (spread over all {PARTITIONS} \
             partitions by the broker, so the moved one grows during the copy), request i due \
             at i/rate, over {} keep-alive connections round robin over data nodes 1-{NODES}; \
             {} s warm-up, then before {} s, joining (node 4 starting), during (node 4 ready to \
             flip seen), after {} s",
            options.rate,
            load::MESSAGE_BYTES,
            load::CONNECTIONS,
            WARMUP.as_secs(),
            options.before.as_secs(),
            options.after.as_secs()
        ),
    );
    report.note(
        "latency",
        "<window>_produce_*: from when the request was due to its 202 read, so waiting for a \
         free connection counts; <window>_service_*: request written to answer read; \
         <window>_lateness_p99_ms: how late requests left (the client or the machine behind \
         the schedule)",
    );
    report.note(
        "move",
        &format!(
            "move_seconds: node 4 answering /readyz to the first describe through node 1 (polled \
             every {} ms) naming node 4 as partition {MOVED}'s owner; moved_bytes: that \
             partition's size_bytes as node 4 describes it after the flip; copy_mb_per_s = \
             moved_bytes / move_seconds (10^6 bytes); move_worker_*: node 4's own \
             narad_moves_duration_seconds (worker start to flip) and narad_moves_bytes_total; the \
             partition's cached pages on node 1 were dropped (fadvise) before the load started; \
             copy_core_s_per_gb: CPU seconds of data nodes 1 and 4 from node 4 ready to the flip \
             seen, over moved_bytes / 10^9 (node 1 also serves its share of the load: \
             source_node_cores_before is its rate before the move); \
             baseline_partition_read_mb_per_s: node 4's copy of the partition read back in 1 MiB \
             reads after the cluster stopped, each file's cached pages dropped first",
            POLL.as_millis()
        ),
    );
}

/// What the move took.
#[derive(Debug, Default)]
struct Moved {
    /// The moved partition's bytes after the flip.
    bytes: u64,
    /// From node 4 ready to the flip seen.
    seconds: f64,
    /// Produce p99 (due to `202`) in the before window and during the move,
    /// in ms.
    before_p99_ms: f64,
    during_p99_ms: f64,
}

impl Moved {
    fn copy_mb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / 1e6 / self.seconds
        } else {
            0.0
        }
    }
}

/// Moments of the run, each as µs after the load's start.
#[derive(Clone, Copy, Debug, Default)]
struct Timeline {
    before_from_us: u64,
    before_to_us: u64,
    ready_us: u64,
    flipped_us: u64,
    stopped_us: u64,
}

/// The cluster phases: the cluster, the fill, the load and the move; their
/// figures go into `report`.
async fn measure(scratch: &Path, options: &Options, report: &mut Report) -> io::Result<Moved> {
    let mut cluster = Cluster::start(&narad_binary(), &scratch.join("cluster"), NODES).await?;
    let addrs = cluster.http_addrs.clone();
    partition::create_topic(&addrs, TOPIC, PARTITIONS).await?;
    expect_owners(
        &describe(addrs[0], TOPIC).await?,
        &OWNERS_PLACED,
        "a fresh cluster of three data nodes places four partitions round robin",
    )?;
    fill(&addrs, options, report).await?;
    let source_dir = cluster
        .data_dir(1)
        .join("topics")
        .join(TOPIC)
        .join(format!("p{MOVED:05}"));
    let uncached =
        tokio::task::spawn_blocking(move || partition::drop_partition_cache(&source_dir))
            .await
            .map_err(io::Error::other)??;
    report.set("source_files_uncached_bytes", uncached as f64);
    tokio::time::sleep(FREED_PAGES_SETTLE).await;

    let load = Load::start(&addrs, TOPIC, options.rate).await?;
    let before_from = load.started() + WARMUP;
    tokio::time::sleep_until(before_from.into()).await;
    let cpu_before_from = cluster.cpu_seconds();
    let source_before_from = data_node_cpu(&cluster, SOURCE_NODE);
    tokio::time::sleep_until((before_from + options.before).into()).await;
    let before_to = Instant::now();
    let cpu_before_to = cluster.cpu_seconds();
    let source_before_to = data_node_cpu(&cluster, SOURCE_NODE);

    let joining = Instant::now();
    let target = cluster.add_data_node().await?;
    let ready = Instant::now();
    let cpu_ready = cluster.cpu_seconds();
    let copy_cpu_ready =
        data_node_cpu(&cluster, SOURCE_NODE) + data_node_cpu(&cluster, TARGET_NODE);
    report.set("node4_start_seconds", (ready - joining).as_secs_f64());
    let copy_dir = cluster
        .data_dir(4)
        .join("topics")
        .join(TOPIC)
        .join(format!("p{MOVED:05}"));
    let watch = Watch {
        via: addrs[0],
        target,
        copy_dir: &copy_dir,
    };
    let watched = watch_move(watch, options.move_max).await?;
    let cpu_flipped = cluster.cpu_seconds();
    let source_flipped = data_node_cpu(&cluster, SOURCE_NODE);
    let target_flipped = data_node_cpu(&cluster, TARGET_NODE);
    let settled = settle(target).await?;
    tokio::time::sleep(options.after).await;
    let stopped = Instant::now();
    let mut progress = watched.progress.clone();
    progress.push((stopped, partition::dir_bytes(&copy_dir)));
    let timeline = Timeline {
        before_from_us: load.offset_us(before_from),
        before_to_us: load.offset_us(before_to),
        ready_us: load.offset_us(ready),
        flipped_us: load.offset_us(watched.flipped),
        stopped_us: load.offset_us(stopped),
    };
    let progress: Vec<(f64, f64)> = progress
        .iter()
        .map(|(at, bytes)| (load.offset_us(*at) as f64 / 1e6, *bytes as f64 / 1e6))
        .collect();
    let samples = load.stop(stopped).await?;

    expect_owners(
        &describe(addrs[0], TOPIC).await?,
        &OWNERS_MOVED,
        "one move, of the highest partition of the node over its quota",
    )?;
    let moved = Moved {
        bytes: settled.size_bytes,
        seconds: (watched.flipped - ready).as_secs_f64(),
        ..Moved::default()
    };
    report
        .set("moved_partition", MOVED as f64)
        .set("moved_from_node", SOURCE_NODE.parse().unwrap_or(0.0))
        .set("moved_to_node", TARGET_NODE.parse().unwrap_or(0.0))
        .set("moved_bytes", settled.size_bytes as f64)
        .set("moved_high_watermark", settled.high_watermark as f64)
        .set("move_seconds", moved.seconds)
        .set("copy_mb_per_s", moved.copy_mb_per_s());
    if let Some(seen) = watched.worker_seen {
        report.set(
            "move_worker_seen_after_ready_ms",
            (seen - ready).as_secs_f64() * 1_000.0,
        );
    }
    record_worker(report, target).await?;
    let seconds = |from: Instant, to: Instant| (to - from).as_secs_f64().max(1e-9);
    report.set(
        "before_narad_cores",
        (cpu_before_to - cpu_before_from) / seconds(before_from, before_to),
    );
    report.set(
        "during_narad_cores",
        (cpu_flipped - cpu_ready) / seconds(ready, watched.flipped),
    );
    let copy_cpu = source_flipped + target_flipped - copy_cpu_ready;
    let gb = moved.bytes as f64 / 1e9;
    report
        .set(
            "source_node_cores_before",
            (source_before_to - source_before_from) / seconds(before_from, before_to),
        )
        .set("copy_core_seconds", copy_cpu)
        .set(
            "copy_core_s_per_gb",
            if gb > 0.0 { copy_cpu / gb } else { 0.0 },
        );
    drop(cluster);
    let read_back = tokio::task::spawn_blocking({
        let copy_dir = copy_dir.clone();
        move || partition::read_back_cold(&copy_dir)
    })
    .await
    .map_err(io::Error::other)??;
    report.set("baseline_partition_read_mb_per_s", read_back);
    let moved = record_load(report, &samples, &timeline, moved);
    report.lines(
        "the copy on node 4's disk, each poll",
        ("seconds since the load started", "MB"),
        &[("partition 3 on node 4", progress)],
    );
    Ok(moved)
}

/// CPU seconds data node `node` (`"1"` to `"4"`) used so far.
fn data_node_cpu(cluster: &Cluster, node: &str) -> f64 {
    let pids = cluster.pids();
    node.parse::<usize>()
        .ok()
        .and_then(|index| index.checked_sub(1))
        .and_then(|index| pids.get(NODES + index))
        .map_or(0.0, |pid| cpu_seconds(&pid.to_string()))
}

/// Fills the partition that will move and waits until it is committed;
/// records its size.
async fn fill(addrs: &[SocketAddr], options: &Options, report: &mut Report) -> io::Result<()> {
    let started = Instant::now();
    let filled = partition::fill(addrs[0], TOPIC, MOVED as u32, options.bytes).await?;
    partition::wait_drained(addrs).await?;
    let seconds = started.elapsed().as_secs_f64();
    let full = describe(addrs[0], TOPIC).await?;
    let bytes = full[MOVED].size_bytes;
    report
        .set("fill_messages", filled.messages as f64)
        .set("fill_accepted_seconds", filled.accepted_after.as_secs_f64())
        .set("fill_seconds", seconds)
        .set("fill_mb_per_s", bytes as f64 / 1e6 / seconds.max(1e-9))
        .set("partition_bytes_filled", bytes as f64)
        .set(
            "partition_records_filled",
            full[MOVED].high_watermark as f64,
        );
    println!(
        "filled partition {MOVED}: {} messages, {:.0} MB in {seconds:.1} s",
        filled.messages,
        bytes as f64 / 1e6
    );
    Ok(())
}

/// How the move was seen.
#[derive(Clone, Debug)]
struct Watched {
    /// The first describe that named node 4 as the owner.
    flipped: Instant,
    /// The first poll that found a move worker running on node 4.
    worker_seen: Option<Instant>,
    /// Bytes of the copy on node 4's disk at each poll.
    progress: Vec<(Instant, u64)>,
}

/// Where the move is watched from: the describing node, node 4, and the
/// moved partition's directory on node 4.
struct Watch<'a> {
    via: SocketAddr,
    target: SocketAddr,
    copy_dir: &'a Path,
}

/// Polls the owners through `via` until partition [`MOVED`] is node 4's,
/// node 4's metrics until its move worker shows, and the copy's bytes on
/// node 4's disk.
///
/// # Errors
/// When another partition changes owner, or the move is not done within
/// `move_max`.
async fn watch_move(watch: Watch<'_>, move_max: Duration) -> io::Result<Watched> {
    let Watch {
        via,
        target,
        copy_dir,
    } = watch;
    let started = Instant::now();
    let mut worker_seen = None;
    let mut progress = Vec::new();
    loop {
        if worker_seen.is_none()
            && metric(target, "narad_moves_inflight").await?.unwrap_or(0.0) >= 1.0
        {
            worker_seen = Some(Instant::now());
        }
        progress.push((Instant::now(), partition::dir_bytes(copy_dir)));
        // A describe can fail while the partition flips; the next poll asks again.
        if let Ok(partitions) = describe(via, TOPIC).await {
            let now = owners(&partitions);
            let others_stayed = (0..PARTITIONS)
                .filter(|index| *index != MOVED)
                .all(|index| now[index] == OWNERS_PLACED[index]);
            if !others_stayed {
                return Err(io::Error::other(format!(
                    "expected only partition {MOVED} to move (owners {OWNERS_PLACED:?} to \
                     {OWNERS_MOVED:?}), but the owners are now {now:?}"
                )));
            }
            if now[MOVED] == TARGET_NODE {
                return Ok(Watched {
                    flipped: Instant::now(),
                    worker_seen,
                    progress,
                });
            }
        }
        if started.elapsed() > move_max {
            return Err(io::Error::other(format!(
                "partition {MOVED} did not move to node {TARGET_NODE} within {move_max:?} \
                 (logs beside the data directories)"
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Right after the flip: the moved partition as node 4 describes it once
/// it serves it (what the copy held, and what produce added since the
/// flip, a poll or so of the load).
///
/// # Errors
/// When node 4 does not describe the partition as its own and available
/// within [`SETTLE_MAX`].
async fn settle(target: SocketAddr) -> io::Result<PartitionStats> {
    let started = Instant::now();
    loop {
        let partitions = describe(target, TOPIC).await?;
        if partitions[MOVED].available && partitions[MOVED].owner == TARGET_NODE {
            return Ok(partitions[MOVED].clone());
        }
        if started.elapsed() > SETTLE_MAX {
            return Err(io::Error::other(format!(
                "node {TARGET_NODE} does not describe partition {MOVED} as its own and available"
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Fails unless `partitions` are owned as `expected`, saying `why` that
/// was expected.
fn expect_owners(partitions: &[PartitionStats], expected: &[&str], why: &str) -> io::Result<()> {
    let found = owners(partitions);
    if found == expected {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "expected partition owners {expected:?} ({why}), found {found:?}"
        )))
    }
}

/// Node 4's own account of its move: its worker's duration and bytes.
async fn record_worker(report: &mut Report, target: SocketAddr) -> io::Result<()> {
    // The runner counts a move once it reaps the finished worker, a moment
    // after the flip.
    let started = Instant::now();
    while metric(target, "narad_moves_total").await?.unwrap_or(0.0) < 1.0 {
        if started.elapsed() > SETTLE_MAX {
            return Err(io::Error::other(
                "node 4 never counted its move as completed",
            ));
        }
        tokio::time::sleep(POLL).await;
    }
    let seconds = metric(target, "narad_moves_duration_seconds_sum")
        .await?
        .unwrap_or(0.0);
    let bytes = metric(target, "narad_moves_bytes_total")
        .await?
        .unwrap_or(0.0);
    report
        .set("move_worker_seconds", seconds)
        .set("move_worker_copied_bytes", bytes)
        .set(
            "move_worker_mb_per_s",
            if seconds > 0.0 {
                bytes / 1e6 / seconds
            } else {
                0.0
            },
        );
    Ok(())
}

/// Records each window of the load and the latency chart; `moved` with
/// its p99s filled in.
fn record_load(report: &mut Report, samples: &[Sample], at: &Timeline, mut moved: Moved) -> Moved {
    let windows = [
        ("before", at.before_from_us, at.before_to_us),
        ("joining", at.before_to_us, at.ready_us),
        ("during", at.ready_us, at.flipped_us),
        ("after", at.flipped_us, at.stopped_us),
        ("all", 0, u64::MAX),
    ];
    for (name, from_us, to_us) in windows {
        let mut window = Window::of(samples, from_us, to_us);
        let ms = |us: f64| us / 1_000.0;
        report
            .set(
                &format!("{name}_seconds"),
                to_us.saturating_sub(from_us).min(at.stopped_us) as f64 / 1e6,
            )
            .set(&format!("{name}_sent"), window.sent as f64)
            .set(&format!("{name}_accepted_202"), window.accepted() as f64)
            .set(&format!("{name}_not_202"), window.refused() as f64)
            .set(
                &format!("{name}_produce_p50_ms"),
                ms(window.latency.p50_us()),
            )
            .set(
                &format!("{name}_produce_p99_ms"),
                ms(window.latency.p99_us()),
            )
            .set(
                &format!("{name}_produce_p999_ms"),
                ms(window.latency.p999_us()),
            )
            .set(
                &format!("{name}_service_p50_ms"),
                ms(window.service.p50_us()),
            )
            .set(
                &format!("{name}_service_p99_ms"),
                ms(window.service.p99_us()),
            )
            .set(
                &format!("{name}_lateness_p99_ms"),
                ms(window.lateness.p99_us()),
            );
        report.note(&format!("{name}_not_202_statuses"), &window.refusals());
        match name {
            "before" => moved.before_p99_ms = ms(window.latency.p99_us()),
            "during" => moved.during_p99_ms = ms(window.latency.p99_us()),
            _ => {}
        }
    }
    let p99 = load::latency_over_time(samples, CHART_BUCKET_US, 0.99);
    let p50 = load::latency_over_time(samples, CHART_BUCKET_US, 0.50);
    let top = p99.iter().map(|(_, ms)| *ms).fold(0.0f64, f64::max);
    let (ready_s, flipped_s) = (at.ready_us as f64 / 1e6, at.flipped_us as f64 / 1e6);
    let window = vec![
        (ready_s, 0.0),
        (ready_s, top),
        (flipped_s, top),
        (flipped_s, 0.0),
    ];
    report.lines(
        "produce latency, due to 202, per 0.5 s (the box: node 4 ready to the flip)",
        ("seconds since the load started", "ms"),
        &[("p99", p99), ("p50", p50), ("move", window)],
    );
    moved
}

/// Records the transport baseline's passes.
fn record_transport(report: &mut Report, rates: &[transport::TransportRate]) {
    for rate in rates {
        report
            .set(
                &format!("baseline_transport_{}_in_flight_mb_per_s", rate.in_flight),
                rate.mb_per_s,
            )
            .set(
                &format!(
                    "baseline_transport_{}_in_flight_core_s_per_gb",
                    rate.in_flight
                ),
                rate.core_s_per_gb,
            );
    }
    report.note(
        "baseline_transport",
        "two narad_protocol cluster endpoints in the bench's process on loopback (cluster \
         secret, the data node's transport settings), one serving FetchSegmentChunk from a 4 MiB \
         chunk in memory, the other fetching as many bytes as the sequential baselines write, \
         with 1 and with 4 fetches outstanding, on a runtime of 2 worker threads; \
         core_s_per_gb is the process's CPU (both endpoints) per 10^9 bytes; run after the \
         sequential baselines and before the cluster starts",
    );
}

/// Records the sequential baselines (each the mean of the run before and
/// after the cluster phases); the raw disk rate a copy is held against,
/// the slower of the two directions.
fn record_sequential(
    report: &mut Report,
    bytes: u64,
    before: SequentialRates,
    after: SequentialRates,
) -> f64 {
    let write = (before.write_mb_per_s + after.write_mb_per_s) / 2.0;
    let read = (before.read_mb_per_s + after.read_mb_per_s) / 2.0;
    let disk = write.min(read);
    report
        .set("baseline_seq_bytes", bytes as f64)
        .set("baseline_seq_write_mb_per_s", write)
        .set("baseline_seq_read_mb_per_s", read)
        .set("baseline_seq_write_before_mb_per_s", before.write_mb_per_s)
        .set("baseline_seq_write_after_mb_per_s", after.write_mb_per_s)
        .set("baseline_seq_read_before_mb_per_s", before.read_mb_per_s)
        .set("baseline_seq_read_after_mb_per_s", after.read_mb_per_s)
        .set("baseline_disk_mb_per_s", disk);
    report.note(
        "baseline_seq",
        "a file as large as the partition (at most 1 GiB) written in 1 MiB writes and one \
         fdatasync, then read in 1 MiB reads after fsync + posix_fadvise(DONTNEED) dropped its \
         pages from this kernel's page cache (no root needed; a hypervisor below may still cache \
         the virtual disk); once before and once after the cluster phases, each figure their \
         mean; baseline_disk_mb_per_s is the slower direction",
    );
    disk
}

/// The verdicts, recorded in `report` with the ratios behind them.
fn judge(report: &mut Report, moved: &Moved, disk_mb_per_s: f64) -> Vec<Verdict> {
    let copy = moved.copy_mb_per_s();
    let figure = |report: &Report, key: &str| report.get(key).unwrap_or(0.0);
    let (write, read) = (
        figure(report, "baseline_seq_write_mb_per_s"),
        figure(report, "baseline_seq_read_mb_per_s"),
    );
    let (before_p50, during_p50) = (
        figure(report, "before_produce_p50_ms"),
        figure(report, "during_produce_p50_ms"),
    );
    let ratio = |value: f64, over: f64| if over > 0.0 { value / over } else { 0.0 };
    let partition_read = figure(report, "baseline_partition_read_mb_per_s");
    let core_s_per_gb = figure(report, "copy_core_s_per_gb");
    let transport_1 = figure(report, "baseline_transport_1_in_flight_mb_per_s");
    let transport_4 = figure(report, "baseline_transport_4_in_flight_mb_per_s");
    report
        .set("ratio_copy_to_partition_read", ratio(copy, partition_read))
        .set(
            "ratio_copy_to_transport_1_in_flight",
            ratio(copy, transport_1),
        )
        .set(
            "ratio_copy_to_transport_4_in_flight",
            ratio(copy, transport_4),
        )
        .set(
            "ratio_transport_1_in_flight_to_partition_read",
            ratio(transport_1, partition_read),
        )
        .set(
            "ratio_transport_4_in_flight_to_partition_read",
            ratio(transport_4, partition_read),
        )
        .set("ratio_copy_to_disk", ratio(copy, disk_mb_per_s))
        .set("ratio_copy_to_seq_write", ratio(copy, write))
        .set("ratio_copy_to_seq_read", ratio(copy, read))
        .set(
            "ratio_during_to_before_p99",
            ratio(moved.during_p99_ms, moved.before_p99_ms),
        );
    let verdicts = vec![
        Verdict::at_least(
            "copy_rate",
            "copy_mb_per_s vs 0.5 x baseline_disk_mb_per_s",
            copy,
            TARGET_COPY_SHARE * disk_mb_per_s,
        ),
        Verdict::at_least(
            "copy_rate_partition_read",
            "copy_mb_per_s vs 0.5 x baseline_partition_read_mb_per_s",
            copy,
            TARGET_COPY_SHARE * partition_read,
        ),
        Verdict::at_most(
            "copy_cpu",
            "copy_core_s_per_gb vs 1.5",
            core_s_per_gb,
            TARGET_COPY_CORE_S_PER_GB,
        ),
        Verdict::at_most(
            "p99",
            "during_produce_p99_ms vs 2 x before_produce_p99_ms",
            moved.during_p99_ms,
            TARGET_P99_GROWTH * moved.before_p99_ms,
        ),
    ];
    verdict::record_all(report, &verdicts);
    report.bars(
        "partition copy next to the raw disk",
        "MB/s",
        &[
            ("move copy (bytes / move)", copy),
            ("raw sequential write", write),
            ("raw sequential read", read),
            ("the copy read back cold", partition_read),
            ("transport alone, 1 fetch in flight", transport_1),
            ("transport alone, 4 fetches in flight", transport_4),
        ],
    );
    report.bars(
        "produce latency, due to 202",
        "ms",
        &[
            ("before p50", before_p50),
            ("before p99", moved.before_p99_ms),
            ("during the move p50", during_p50),
            ("during the move p99", moved.during_p99_ms),
        ],
    );
    verdicts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn flags_set_sizes_rates_and_windows() {
        let options = Options::parse(args("--bytes 67108864 --rate 100 --before 3s --after 1m"))
            .unwrap()
            .unwrap();
        assert_eq!(options.bytes, 64 << 20);
        assert_eq!(options.rate, 100);
        assert_eq!(options.before, Duration::from_secs(3));
        assert_eq!(options.after, Duration::from_secs(60));
        assert_eq!(
            Options::parse(args("")).unwrap().unwrap(),
            Options::default()
        );
    }

    #[test]
    fn bad_flags_are_refused_and_help_is_none() {
        assert!(Options::parse(args("--help")).unwrap().is_none());
        assert!(Options::parse(args("--rate 0")).is_err());
        assert!(Options::parse(args("--before 0s")).is_err());
        assert!(Options::parse(args("--bytes")).is_err());
        assert!(Options::parse(args("--partition 3")).is_err());
    }

    #[test]
    fn the_move_leaves_every_node_one_partition() {
        for node in ["1", "2", "3", "4"] {
            assert_eq!(
                OWNERS_MOVED.iter().filter(|owner| **owner == node).count(),
                1
            );
        }
        assert_eq!(OWNERS_PLACED[MOVED], SOURCE_NODE);
        assert_eq!(OWNERS_MOVED[MOVED], TARGET_NODE);
    }
}
