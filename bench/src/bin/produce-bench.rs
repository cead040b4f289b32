//! `produce-bench`: the HTTP produce path of `narad dev`, end to end, next to
//! same-run baselines.
//!
//! Spawns the release `narad` binary (`$NARAD_BIN`, else `narad` beside this
//! binary) as `narad dev` on a scratch directory and a free loopback port,
//! creates a topic of [`PARTITIONS`] partitions, and drives it with a
//! keep-alive HTTP/1.1 client (one connection per producer) for a fixed time
//! per phase:
//! - single-message produces of [`MESSAGE_BYTES`] bytes at 1, 16, 64 and 256
//!   concurrent producers;
//! - batch produces of 100 and 1,000 messages of [`MESSAGE_BYTES`] bytes, at
//!   1 and at [`BATCH_PRODUCERS`] concurrent producers;
//! - `single_c64_idem` and `batch100_idem`: the same as `single_c64` and
//!   `batch100` with an idempotency key on every message (a new one each
//!   time, so nothing is left out), for the cost of keyed produce.
//!
//! Latency is request written to `202` read. Baselines of the same run: an
//! axum handler in this process that reads the body and answers `202`
//! (driven by the same client), and 4 KiB write + fdatasync on the same disk,
//! with the CPU one write + fdatasync costs its thread. Each phase also
//! reports narad's CPU per message answered `202`.
//!
//! Writes `target/bench/produce.json` and `produce.png`, then prints one line
//! per target: issue 18's, each against a baseline of this run, and the older
//! absolute ones.
//!
//! With `--cluster N` it drives N `narad control` and N `narad data`
//! processes instead of `narad dev` (see [`narad_bench::cluster`]): the
//! producer connections spread round robin over the data nodes, the topic
//! is produced to once every data node sees its partitions assigned, and
//! `<phase>_narad_cores` sums every process. It writes
//! `produce-cluster.json` and `.png`, with the same keys.
//!
//! With `--wal-dir DIR` the ingress WAL of `narad dev` lives in a directory
//! of its own under DIR (`storage.wal_dir`), the partition logs under the
//! scratch directory as before; on a machine with a second device, DIR is
//! on it. The report says which (`wal_dir_separate`).

use std::borrow::Cow;
use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use narad_bench::baseline::FdatasyncBaseline;
use narad_bench::cluster::{Broker, cluster_arg, partition_owners, spread, wait_assigned};
use narad_bench::cpu::{cpu_seconds, per_unit, us_per_unit};
use narad_bench::http::{
    Connection, KeyedRequest, NoopServer, batch_produce_request, http_request,
};
use narad_bench::node::{load_average, narad_binary};
use narad_bench::report::Report;
use narad_bench::stats::Latencies;
use narad_bench::verdict::{self, Verdict};

/// Bytes of every produced message.
const MESSAGE_BYTES: usize = 256;
/// Partitions of the benchmark topic.
const PARTITIONS: u32 = 8;
/// Name of the benchmark topic.
const TOPIC: &str = "bench";
/// How long each measured phase drives load.
const PHASE: Duration = Duration::from_secs(4);
/// How long narad dev's CPU use is measured with no load, right after the
/// warmup.
const IDLE: Duration = Duration::from_secs(2);
/// Unrecorded load before the first measured phase.
const WARMUP: Duration = Duration::from_secs(1);
/// Concurrency levels of the single-message phases.
const SINGLE_PRODUCERS: [usize; 4] = [1, 16, 64, 256];
/// Concurrency of the headline batch phases.
const BATCH_PRODUCERS: usize = 16;
/// Messages per batch of the batch phases.
const BATCH_SIZES: [usize; 2] = [100, 1_000];
/// Concurrency of the no-op HTTP baseline the single-message c64 figure is
/// compared with.
const NOOP_PRODUCERS: usize = 64;
/// Samples of each fdatasync baseline.
const FDATASYNC_SAMPLES: usize = 1_000;
/// Targets of issue 6 on the 2-core machine, in absolute figures (issue
/// 18's ratios below are what count now).
const TARGET_SINGLE_C64_MSGS_PER_S: f64 = 40_000.0;
const TARGET_BATCH100_MSGS_PER_S: f64 = 300_000.0;
/// Issue 18: single c1 p50 at most the raw fdatasync p50 plus the no-op
/// handler's c1 p50 plus this.
const TARGET_SINGLE_C1_P50_SLACK_US: f64 = 60.0;
/// Issue 18: narad CPU per message at one producer at most this many raw
/// fdatasyncs' CPU.
const TARGET_CPU_C1_TO_FDATASYNC_CPU: f64 = 3.0;
/// Issue 18: narad CPU per message at 64 producers.
const TARGET_CPU_C64_US_PER_MSG: f64 = 20.0;
/// Issue 18: single c64 at least this share of the no-op handler at c64.
const TARGET_SINGLE_C64_TO_NOOP_C64: f64 = 0.45;
/// Issue 18: batch 100 messages per second at least this many times the
/// no-op handler's requests per second at c64.
const TARGET_BATCH100_TO_NOOP_C64: f64 = 4.0;
/// Issue 21: keyed produce keeps at least this share of the rate without
/// keys, single c64 and batch 100.
const TARGET_IDEMPOTENT_RATIO: f64 = 0.9;

/// What a phase sends: the same bytes every time, or a request whose
/// idempotency keys are new on every send.
#[derive(Clone)]
enum Load {
    Fixed(Arc<Vec<u8>>),
    Keyed(Arc<KeyedRequest>, Arc<AtomicU64>),
}

impl Load {
    /// Keys numbered from `first`: each keyed phase takes its own range, so
    /// no key of one phase repeats one of another (a repeat would be left
    /// out as a duplicate and make the phase look faster).
    fn keyed(request: KeyedRequest, first: u64) -> Self {
        Self::Keyed(Arc::new(request), Arc::new(AtomicU64::new(first)))
    }

    fn next(&self) -> Cow<'_, [u8]> {
        match self {
            Self::Fixed(bytes) => Cow::Borrowed(bytes.as_slice()),
            Self::Keyed(request, counter) => {
                let first = counter.fetch_add(request.keys(), Ordering::Relaxed);
                Cow::Owned(request.fill(first))
            }
        }
    }
}

fn main() -> io::Result<()> {
    let (wal_root, rest) = wal_dir_arg(std::env::args().skip(1))?;
    let cluster = cluster_arg(rest)?;
    // Per process, so two runs at once cannot delete each other's node.
    let run = format!("produce-{}", std::process::id());
    let scratch = narad_bench::bench_dir()?.join(&run);
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch)?;
    let wal_dir = wal_root.map(|root| root.join(&run));
    let mut report = Report::new(if cluster.is_some() {
        "produce-cluster"
    } else {
        "produce"
    });
    if let Some(nodes) = cluster {
        report.note(
            "cluster",
            &format!(
                "{nodes} narad control + {nodes} narad data processes on loopback, security off; \
                 producer connections round robin over the data nodes; *_narad_cores sums every \
                 process"
            ),
        );
    }
    report.note("load_average_at_start", &load_average());
    report.note(
        "method",
        "keep-alive HTTP/1.1 client on tokio, one connection per producer, in the same process \
         as the no-op baseline server and on the same 2 cores as narad dev; latency is request \
         written to 202 read; msgs/s counts only messages answered 202",
    );
    report.note("message_bytes", &MESSAGE_BYTES.to_string());
    report.note("partitions", &PARTITIONS.to_string());
    report.note("phase_seconds", &PHASE.as_secs().to_string());
    report.note("batch_producers", &BATCH_PRODUCERS.to_string());
    report.note(
        "cores",
        "<phase>_narad_cores and <phase>_client_cores: CPU seconds per second of narad dev and of this \
         benchmark process (client) during the phase; the machine has 2",
    );
    report.note(
        "switches_per_msg",
        "<phase>_narad_switches_per_msg: context switches (voluntary and not) of narad's threads \
         during the phase over the messages answered 202 in it; each is a thread going to sleep \
         or being preempted, the cost issue 18 counts as thread hops",
    );
    report.note(
        "cpu_per_msg",
        "<phase>_narad_cpu_us_per_msg: narad's CPU seconds during the phase (every thread of \
         every narad process, io_uring's io-wq workers among them; /proc at 10 ms ticks) over the \
         messages answered 202 in it, in µs; the kernel's own threads (jbd2, kworkers) are not \
         counted",
    );

    let mut fdatasync = FdatasyncBaseline::default();
    fdatasync.sample(&scratch, FDATASYNC_SAMPLES)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    report.set("wal_dir_separate", f64::from(u8::from(wal_dir.is_some())));
    report.note(
        "wal_dir",
        &wal_dir.as_ref().map_or_else(
            || "under the node's data directory".to_owned(),
            |dir| format!("separate: {}", dir.display()),
        ),
    );
    runtime.block_on(measure(&scratch, &mut report, cluster, wal_dir.as_deref()))?;
    fdatasync.sample(&scratch, FDATASYNC_SAMPLES)?;
    fdatasync.record(&mut report);
    report.note("load_average_at_end", &load_average());
    let verdicts = summarize(&mut report);
    let path = report.write()?;
    println!(
        "{}",
        serde_json::to_string_pretty(&report.to_json()).map_err(io::Error::other)?
    );
    println!("wrote {}", path.display());
    verdict::print_summary(&verdicts);
    let _ = fs::remove_dir_all(&scratch);
    if let Some(wal_dir) = &wal_dir {
        let _ = fs::remove_dir_all(wal_dir);
    }
    Ok(())
}

/// Takes `--wal-dir DIR` out of the arguments: DIR and the rest.
fn wal_dir_arg(
    args: impl IntoIterator<Item = String>,
) -> io::Result<(Option<PathBuf>, Vec<String>)> {
    let mut args = args.into_iter();
    let (mut wal_dir, mut rest) = (None, Vec::new());
    while let Some(arg) = args.next() {
        if arg != "--wal-dir" {
            rest.push(arg);
            continue;
        }
        let dir = args
            .next()
            .ok_or_else(|| io::Error::other("--wal-dir takes a directory"))?;
        wal_dir = Some(PathBuf::from(dir));
    }
    Ok((wal_dir, rest))
}

async fn measure(
    scratch: &Path,
    report: &mut Report,
    cluster: Option<usize>,
    wal_dir: Option<&Path>,
) -> io::Result<()> {
    let single_request = Load::Fixed(Arc::new(http_request(
        "POST",
        &format!("/v1/topics/{TOPIC}/produce"),
        "application/octet-stream",
        &[b'm'; MESSAGE_BYTES],
    )));

    let noop = NoopServer::start().await?;
    let mut noop_c1 = drive(&[noop.addr], &single_request, 1, 1, PHASE).await?;
    let mut noop_c64 = drive(&[noop.addr], &single_request, NOOP_PRODUCERS, 1, PHASE).await?;
    noop.stop();
    record(report, "baseline_http_noop_c1", &mut noop_c1);
    record(report, "baseline_http_noop_c64", &mut noop_c64);
    report.set("baseline_http_noop_c64_per_s", noop_c64.msgs_per_s());

    let node = Broker::start_with_wal_dir(&narad_binary(), &scratch.join("node"), cluster, wal_dir)
        .await?;
    let addrs = node.addrs();
    create_topic(addrs[0]).await?;
    if cluster.is_some() {
        for addr in &addrs {
            wait_assigned(*addr, TOPIC, PARTITIONS as usize).await?;
        }
        report.note(
            "partition_owners",
            &partition_owners(addrs[0], TOPIC).await?,
        );
    }
    drive(&addrs, &single_request, 16, 1, WARMUP).await?;
    let idle_cpu = node.cpu_seconds();
    tokio::time::sleep(IDLE).await;
    report.set(
        "idle_narad_cores",
        (node.cpu_seconds() - idle_cpu) / IDLE.as_secs_f64(),
    );
    let mut phases: Vec<(String, Load, usize, u64)> = SINGLE_PRODUCERS
        .iter()
        .map(|&producers| {
            let name = format!("single_c{producers}");
            (name, single_request.clone(), producers, 1)
        })
        .collect();
    for size in BATCH_SIZES {
        let request = Load::Fixed(Arc::new(batch_produce_request(TOPIC, size, MESSAGE_BYTES)));
        phases.push((format!("batch{size}_c1"), request.clone(), 1, size as u64));
        phases.push((
            format!("batch{size}"),
            request,
            BATCH_PRODUCERS,
            size as u64,
        ));
    }
    // Each keyed phase runs right after the phase it is compared with, so
    // both see the same machine.
    let keyed = [
        (
            "single_c64",
            "single_c64_idem",
            Load::keyed(KeyedRequest::single(TOPIC, MESSAGE_BYTES), 0),
            64,
            1,
        ),
        (
            "batch100",
            "batch100_idem",
            Load::keyed(KeyedRequest::batch(TOPIC, 100, MESSAGE_BYTES), 1 << 48),
            BATCH_PRODUCERS,
            100,
        ),
    ];
    for (after, name, load, producers, msgs) in keyed {
        let at = phases
            .iter()
            .position(|(phase, ..)| phase == after)
            .map_or(phases.len(), |at| at + 1);
        phases.insert(at, (name.to_owned(), load, producers, msgs));
    }
    for (name, request, producers, msgs_per_request) in phases {
        let node_cpu = node.cpu_seconds();
        let node_switches = node.context_switches();
        let client_cpu = cpu_seconds("self");
        let mut phase = drive(&addrs, &request, producers, msgs_per_request, PHASE).await?;
        let seconds = phase.elapsed.as_secs_f64();
        let node_cpu = node.cpu_seconds() - node_cpu;
        let node_switches = node.context_switches().saturating_sub(node_switches);
        report.set(
            &format!("{name}_narad_switches_per_msg"),
            per_unit(node_switches as f64, phase.accepted_msgs),
        );
        report.set(&format!("{name}_narad_cores"), node_cpu / seconds);
        report.set(
            &format!("{name}_narad_cpu_us_per_msg"),
            us_per_unit(node_cpu, phase.accepted_msgs),
        );
        report.set(
            &format!("{name}_client_cores"),
            (cpu_seconds("self") - client_cpu) / seconds,
        );
        record(report, &name, &mut phase);
    }
    node.stop();
    Ok(())
}

/// Sets `<prefix>_msgs_per_s`, `_p50_us`, `_p99_us`, `_p999_us` and
/// `_refused`, and notes the first refusal if there was one.
fn record(report: &mut Report, prefix: &str, phase: &mut Phase) {
    report.set(&format!("{prefix}_msgs_per_s"), phase.msgs_per_s());
    report.set(&format!("{prefix}_p50_us"), phase.latencies.p50_us());
    report.set(&format!("{prefix}_p99_us"), phase.latencies.p99_us());
    report.set(&format!("{prefix}_p999_us"), phase.latencies.p999_us());
    report.set(&format!("{prefix}_refused"), phase.refused as f64);
    if let Some(refusal) = &phase.first_refusal {
        report.note(&format!("{prefix}_first_refusal"), refusal);
    }
    eprintln!(
        "{prefix}: {:.0} msgs/s, p50 {:.1} µs, p99 {:.1} µs, p999 {:.1} µs, {} refused",
        phase.msgs_per_s(),
        phase.latencies.p50_us(),
        phase.latencies.p99_us(),
        phase.latencies.p999_us(),
        phase.refused
    );
}

/// Ratios, target verdicts and charts, from the figures already set; the
/// verdicts, for the summary printed last.
fn summarize(report: &mut Report) -> Vec<Verdict> {
    let measured = report.clone();
    let figure = |key: &str| measured.get(key).unwrap_or(0.0);
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let single_c64 = figure("single_c64_msgs_per_s");
    let batch100 = figure("batch100_msgs_per_s");
    let noop_c64 = figure("baseline_http_noop_c64_per_s");
    let fdatasync = figure("baseline_fdatasync_p50_us");
    let fdatasync_cpu = figure("baseline_fdatasync_cpu_us");
    let single_c1_p50 = figure("single_c1_p50_us");
    let single_c1_cpu = figure("single_c1_narad_cpu_us_per_msg");
    let noop_c1_p50 = figure("baseline_http_noop_c1_p50_us");
    let ratios = [
        (
            "ratio_single_c64_to_http_noop_c64",
            ratio(single_c64, noop_c64),
        ),
        ("ratio_batch100_to_http_noop_c64", ratio(batch100, noop_c64)),
        (
            "ratio_single_c1_p50_to_fdatasync_p50",
            ratio(single_c1_p50, fdatasync),
        ),
        (
            "ratio_single_c1_p50_to_fdatasync_plus_noop_p50",
            ratio(single_c1_p50, fdatasync + noop_c1_p50),
        ),
        (
            "ratio_single_c1_cpu_to_fdatasync_cpu",
            ratio(single_c1_cpu, fdatasync_cpu),
        ),
        ("ratio_batch100_to_single_c64", ratio(batch100, single_c64)),
        (
            "ratio_single_c64_to_single_c1",
            ratio(single_c64, figure("single_c1_msgs_per_s")),
        ),
        (
            "ratio_single_c64_idem_to_single_c64",
            ratio(figure("single_c64_idem_msgs_per_s"), single_c64),
        ),
        (
            "ratio_batch100_idem_to_batch100",
            ratio(figure("batch100_idem_msgs_per_s"), batch100),
        ),
    ];
    for (key, value) in ratios {
        report.set(key, value);
    }
    let verdicts = vec![
        Verdict::at_most(
            "single_c1_p50",
            "single_c1_p50_us vs baseline_fdatasync_p50_us + baseline_http_noop_c1_p50_us + 60 µs",
            single_c1_p50,
            fdatasync + noop_c1_p50 + TARGET_SINGLE_C1_P50_SLACK_US,
        ),
        Verdict::at_most(
            "cpu_c1",
            "single_c1_narad_cpu_us_per_msg vs 3 x baseline_fdatasync_cpu_us",
            single_c1_cpu,
            TARGET_CPU_C1_TO_FDATASYNC_CPU * fdatasync_cpu,
        ),
        Verdict::at_most(
            "cpu_c64",
            "single_c64_narad_cpu_us_per_msg vs 20 µs",
            figure("single_c64_narad_cpu_us_per_msg"),
            TARGET_CPU_C64_US_PER_MSG,
        ),
        Verdict::at_least(
            "single_c64_ratio",
            "single_c64_msgs_per_s vs 0.45 x baseline_http_noop_c64_per_s",
            single_c64,
            TARGET_SINGLE_C64_TO_NOOP_C64 * noop_c64,
        ),
        Verdict::at_least(
            "batch100_ratio",
            "batch100_msgs_per_s vs 4 x baseline_http_noop_c64_per_s",
            batch100,
            TARGET_BATCH100_TO_NOOP_C64 * noop_c64,
        ),
        Verdict::at_least(
            "single_c64",
            "single_c64_msgs_per_s vs 40,000 (issue 6, absolute)",
            single_c64,
            TARGET_SINGLE_C64_MSGS_PER_S,
        ),
        Verdict::at_least(
            "batch100",
            "batch100_msgs_per_s vs 300,000 (issue 6, absolute)",
            batch100,
            TARGET_BATCH100_MSGS_PER_S,
        ),
        Verdict::at_least(
            "idempotent",
            "the lower of ratio_single_c64_idem_to_single_c64 and \
             ratio_batch100_idem_to_batch100 vs 0.9 (issue 21)",
            ratio(figure("single_c64_idem_msgs_per_s"), single_c64)
                .min(ratio(figure("batch100_idem_msgs_per_s"), batch100)),
            TARGET_IDEMPOTENT_RATIO,
        ),
    ];
    verdict::record_all(report, &verdicts);

    let mut rates: Vec<(String, f64)> = vec![("no-op HTTP, c64".into(), noop_c64)];
    for producers in SINGLE_PRODUCERS {
        rates.push((
            format!("single, c{producers}"),
            figure(&format!("single_c{producers}_msgs_per_s")),
        ));
    }
    for size in BATCH_SIZES {
        rates.push((
            format!("batch {size}, c1"),
            figure(&format!("batch{size}_c1_msgs_per_s")),
        ));
        rates.push((
            format!("batch {size}, c{BATCH_PRODUCERS}"),
            figure(&format!("batch{size}_msgs_per_s")),
        ));
    }
    rates.push((
        "single, c64, idempotency keys".into(),
        figure("single_c64_idem_msgs_per_s"),
    ));
    rates.push((
        format!("batch 100, c{BATCH_PRODUCERS}, idempotency keys"),
        figure("batch100_idem_msgs_per_s"),
    ));
    let mut latencies: Vec<(String, f64)> = vec![
        ("raw fdatasync 4 KiB (prealloc)".into(), fdatasync),
        (
            "raw fdatasync 4 KiB (appended)".into(),
            figure("baseline_fdatasync_appended_p50_us"),
        ),
        ("no-op HTTP, c1".into(), noop_c1_p50),
        (
            "no-op HTTP, c64".into(),
            figure("baseline_http_noop_c64_p50_us"),
        ),
    ];
    for producers in SINGLE_PRODUCERS {
        latencies.push((
            format!("single, c{producers}"),
            figure(&format!("single_c{producers}_p50_us")),
        ));
    }
    for size in BATCH_SIZES {
        latencies.push((
            format!("batch {size}, c1"),
            figure(&format!("batch{size}_c1_p50_us")),
        ));
    }
    report.bars(
        "messages per second (202 received)",
        "msg/s",
        &label_refs(&rates),
    );
    report.bars("p50 latency to 202", "µs", &label_refs(&latencies));
    let mut cpu: Vec<(String, f64)> =
        vec![("raw fdatasync 4 KiB (calling thread)".into(), fdatasync_cpu)];
    for producers in SINGLE_PRODUCERS {
        cpu.push((
            format!("single, c{producers}"),
            figure(&format!("single_c{producers}_narad_cpu_us_per_msg")),
        ));
    }
    for size in BATCH_SIZES {
        cpu.push((
            format!("batch {size}, c{BATCH_PRODUCERS}"),
            figure(&format!("batch{size}_narad_cpu_us_per_msg")),
        ));
    }
    report.bars("narad CPU per message", "µs", &label_refs(&cpu));
    verdicts
}

fn label_refs(bars: &[(String, f64)]) -> Vec<(&str, f64)> {
    bars.iter()
        .map(|(label, value)| (label.as_str(), *value))
        .collect()
}

/// The figures of one phase.
#[derive(Debug, Default)]
struct Phase {
    latencies: Latencies,
    /// Messages in requests answered `202`.
    accepted_msgs: u64,
    /// Requests answered anything else.
    refused: u64,
    first_refusal: Option<String>,
    elapsed: Duration,
}

impl Phase {
    fn msgs_per_s(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.accepted_msgs as f64 / seconds
        } else {
            0.0
        }
    }

    fn absorb(&mut self, other: Phase) {
        self.latencies.merge(&other.latencies);
        self.accepted_msgs += other.accepted_msgs;
        self.refused += other.refused;
        if self.first_refusal.is_none() {
            self.first_refusal = other.first_refusal;
        }
    }
}

/// `producers` connections, round robin over `addrs`, each sending
/// `request` back to back until `duration` has passed; each `202` counts
/// `msgs_per_request` messages. The phase's time runs from the first
/// request to the last answer.
async fn drive(
    addrs: &[SocketAddr],
    request: &Load,
    producers: usize,
    msgs_per_request: u64,
    duration: Duration,
) -> io::Result<Phase> {
    let mut connections = Vec::with_capacity(producers);
    for index in 0..producers {
        connections.push(Connection::open(spread(addrs, index)).await?);
    }
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = connections
        .into_iter()
        .map(|mut connection| {
            let request = request.clone();
            tokio::spawn(async move {
                let mut phase = Phase::default();
                while Instant::now() < deadline {
                    let bytes = request.next();
                    let sent = Instant::now();
                    let response = connection.send(&bytes).await?;
                    let elapsed = sent.elapsed();
                    if response.status == 202 {
                        phase.latencies.record(elapsed);
                        phase.accepted_msgs += msgs_per_request;
                    } else {
                        phase.refused += 1;
                        if phase.first_refusal.is_none() {
                            phase.first_refusal = Some(format!(
                                "{} {}",
                                response.status,
                                String::from_utf8_lossy(&response.body)
                            ));
                        }
                    }
                }
                io::Result::Ok(phase)
            })
        })
        .collect();
    let mut total = Phase::default();
    for task in tasks {
        total.absorb(task.await.map_err(io::Error::other)??);
    }
    total.elapsed = started.elapsed();
    Ok(total)
}

async fn create_topic(addr: SocketAddr) -> io::Result<()> {
    let body = format!("{{\"name\":\"{TOPIC}\",\"partitions\":{PARTITIONS}}}");
    let request = http_request("POST", "/v1/topics", "application/json", body.as_bytes());
    let response = Connection::open(addr).await?.send(&request).await?;
    if (200..300).contains(&response.status) {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "topic creation answered {}: {}",
            response.status,
            String::from_utf8_lossy(&response.body)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn wal_dir_is_taken_out_and_the_rest_kept() {
        let (wal_dir, rest) = wal_dir_arg(args("--wal-dir /nvme1 --cluster 3")).unwrap();
        assert_eq!(wal_dir, Some(PathBuf::from("/nvme1")));
        assert_eq!(rest, args("--cluster 3"));
        assert_eq!(wal_dir_arg(args("")).unwrap(), (None, Vec::new()));
        assert!(wal_dir_arg(args("--wal-dir")).is_err());
    }
}
