//! `flow-bench`: produce → consume → ack through `narad dev`, next to
//! same-run baselines.
//!
//! Spawns the release `narad` binary (`$NARAD_BIN`, else `narad` beside this
//! binary) as `narad dev` on a scratch directory and measures three phases,
//! each on its own topic of [`PARTITIONS`] partitions:
//! - **single flow**: [`SINGLE_PRODUCERS`] connections producing one message
//!   per request while [`SINGLE_CONSUMERS`] connections each consume one
//!   message (long poll) and ack it; the figure is messages acked per second;
//! - **batch flow**: [`BATCH_PRODUCERS`] connections producing batches of
//!   [`BATCH`] while [`BATCH_CONSUMERS`] connections consume up to 100 and
//!   ack them in one batch ack; messages acked per second;
//! - **visible latency**: messages produced at a paced [`VISIBLE_RATE`] per
//!   second, consumed by long-polling batch consumers; latency runs from
//!   writing the produce request to the consumer reading the message. How
//!   late the senders ran behind their schedule is reported beside it
//!   (`visible_send_lateness_p99_ms`), so a run where the machine could not
//!   sustain the rate says so.
//!
//! Baselines of the same run: an axum handler in this process that answers
//! `202` to a produce (driven like the single flow's producers), and 4 KiB
//! write + fdatasync on the same disk, half before and half after the HTTP
//! phases, with the CPU one write + fdatasync costs its thread. Each phase
//! also reports narad's CPU per message.
//!
//! Writes `target/bench/flow.json` and `flow.png`, then prints one line per
//! target.
//!
//! With `--cluster N` it drives N `narad control` and N `narad data`
//! processes instead of `narad dev` (see [`narad_bench::cluster`]): producer
//! and consumer connections spread round robin over the data nodes, each
//! phase starts once every data node sees its topic assigned and has
//! drained its dispatch backlog, and `*_narad_cores` sums every process. It
//! writes `flow-cluster.json` and `.png`, with the same keys.

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use narad_bench::baseline::FdatasyncBaseline;
use narad_bench::cluster::{Broker, cluster_arg, partition_owners, spread, wait_assigned};
use narad_bench::cpu::{cpu_seconds, us_per_unit};
use narad_bench::http::{Connection, NoopServer, batch_produce_request, http_request};
use narad_bench::node::{load_average, narad_binary};
use narad_bench::report::Report;
use narad_bench::stats::Latencies;
use narad_bench::verdict::{self, Verdict};
use serde_json::Value;

/// Bytes of every produced message in the flow phases.
const MESSAGE_BYTES: usize = 256;
const PARTITIONS: u32 = 8;
/// How long each flow phase is measured, after [`WARMUP`].
const PHASE: Duration = Duration::from_secs(5);
const WARMUP: Duration = Duration::from_secs(1);
const SINGLE_PRODUCERS: usize = 32;
const SINGLE_CONSUMERS: usize = 32;
const BATCH_PRODUCERS: usize = 8;
const BATCH_CONSUMERS: usize = 8;
/// Messages per produced batch, and the most a batch consume asks for.
const BATCH: usize = 100;
/// Messages per second of the visible-latency phase.
const VISIBLE_RATE: u64 = 5_000;
/// Connections the paced producer spreads its sends over.
const VISIBLE_PRODUCERS: usize = 16;
const VISIBLE_CONSUMERS: usize = 4;
/// Topic of the visible-latency phase.
const VISIBLE_TOPIC: &str = "flow-visible";
/// Connections of the no-op baseline.
const NOOP_CONNECTIONS: usize = 64;
/// Samples of each fdatasync baseline, half before and half after the HTTP
/// phases.
const FDATASYNC_SAMPLES: usize = 500;
const CLIENT_HEADER: &str = "X-Narad-Client: flow-bench";
/// Targets of issue 7 on the 2-core machine.
const TARGET_SINGLE_MSGS_PER_S: f64 = 20_000.0;
const TARGET_BATCH_MSGS_PER_S: f64 = 150_000.0;
const TARGET_VISIBLE_P99_MS: f64 = 10.0;
/// Issue 18: the single flow at least this share of the no-op handler's
/// requests per second at 64 connections.
const TARGET_FLOW_SINGLE_TO_NOOP_C64: f64 = 0.2;

fn main() -> io::Result<()> {
    let cluster = cluster_arg(std::env::args().skip(1))?;
    let scratch = narad_bench::bench_dir()?.join(format!("flow-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch)?;
    let mut report = Report::new(if cluster.is_some() {
        "flow-cluster"
    } else {
        "flow"
    });
    if let Some(nodes) = cluster {
        report.note(
            "cluster",
            &format!(
                "{nodes} narad control + {nodes} narad data processes on loopback, security off; \
                 producer and consumer connections round robin over the data nodes; \
                 *_narad_cores sums every process"
            ),
        );
    }
    report.note("load_average_at_start", &load_average());
    report.note(
        "method",
        "keep-alive HTTP/1.1 clients on tokio in this process, on the same 2 cores as narad dev; \
         flow figures count messages whose ack was answered 204 (per handle for batch acks) \
         during the measured phase",
    );
    report.note("message_bytes", &MESSAGE_BYTES.to_string());
    report.note("partitions", &PARTITIONS.to_string());
    report.note(
        "concurrency",
        &format!(
            "single: {SINGLE_PRODUCERS} producers + {SINGLE_CONSUMERS} consumers; batch: \
             {BATCH_PRODUCERS} producers of {BATCH} + {BATCH_CONSUMERS} consumers of up to {BATCH}; \
             visible: {VISIBLE_RATE} msg/s over {VISIBLE_PRODUCERS} producers, \
             {VISIBLE_CONSUMERS} batch consumers"
        ),
    );

    report.note(
        "cpu_per_msg",
        "flow_<phase>_narad_cpu_us_per_msg: narad's CPU seconds over the measured window (every \
         thread of every narad process, io_uring's io-wq workers among them; /proc at 10 ms \
         ticks) over the messages acked (204) in it, each produced, consumed and acked; \
         visible_narad_cpu_us_per_msg: over the whole visible phase, its 2 s tail included, per \
         message the consumers read; the kernel's own threads (jbd2, kworkers) are not counted",
    );

    let mut fdatasync = FdatasyncBaseline::default();
    fdatasync.sample(&scratch, FDATASYNC_SAMPLES)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let verdicts = runtime.block_on(measure(&scratch, &mut report, cluster))?;
    fdatasync.sample(&scratch, FDATASYNC_SAMPLES)?;
    fdatasync.record(&mut report);
    report.note("load_average_at_end", &load_average());
    let path = report.write()?;
    println!(
        "{}",
        serde_json::to_string_pretty(&report.to_json()).map_err(io::Error::other)?
    );
    println!("wrote {}", path.display());
    verdict::print_summary(&verdicts);
    let _ = fs::remove_dir_all(&scratch);
    Ok(())
}

/// The HTTP phases and their verdicts, recorded in `report`; the verdicts,
/// for the summary printed last.
async fn measure(
    scratch: &std::path::Path,
    report: &mut Report,
    cluster: Option<usize>,
) -> io::Result<Vec<Verdict>> {
    let noop = NoopServer::start().await?;
    let noop_per_s = noop_baseline(noop.addr).await?;
    noop.stop();
    report.set("baseline_http_noop_c64_per_s", noop_per_s);

    let node = Broker::start(&narad_binary(), &scratch.join("node"), cluster).await?;
    let addrs = node.addrs();

    let single = recorded_flow(&node, &addrs, report, Shape::Single).await?;
    report.set("drain_before_batch_ms", drain_all(&addrs).await?);
    let batch = recorded_flow(&node, &addrs, report, Shape::Batch).await?;

    report.set("drain_before_visible_ms", drain_all(&addrs).await?);
    create_topic(&addrs, VISIBLE_TOPIC).await?;
    let narad_before = node.cpu_seconds();
    let (mut visible, mut lateness) = visible_latency(&addrs).await?;
    report.set(
        "visible_narad_cpu_us_per_msg",
        us_per_unit(node.cpu_seconds() - narad_before, visible.len() as u64),
    );
    report.set("visible_send_lateness_p50_ms", lateness.p50_us() / 1_000.0);
    report.set("visible_send_lateness_p99_ms", lateness.p99_us() / 1_000.0);
    report.set("visible_p50_ms", visible.p50_us() / 1_000.0);
    report.set("visible_p99_ms", visible.p99_us() / 1_000.0);
    report.set("visible_p999_ms", visible.p999_us() / 1_000.0);
    report.set("visible_samples", visible.len() as f64);
    if cluster.is_some() {
        for topic in ["flow-single", "flow-batch", VISIBLE_TOPIC] {
            let owners = partition_owners(addrs[0], topic).await?;
            report.note(&format!("partition_owners_{topic}"), &owners);
        }
    }
    node.stop();

    report.set(
        "flow_single_vs_noop_http",
        single.acked_per_s / noop_per_s.max(1.0),
    );
    let verdicts = vec![
        Verdict::at_least(
            "flow_single_ratio",
            "flow_single_msgs_per_s vs 0.2 x baseline_http_noop_c64_per_s",
            single.acked_per_s,
            TARGET_FLOW_SINGLE_TO_NOOP_C64 * noop_per_s,
        ),
        Verdict::at_least(
            "flow_single",
            "flow_single_msgs_per_s vs 20,000 (issue 7, absolute)",
            single.acked_per_s,
            TARGET_SINGLE_MSGS_PER_S,
        ),
        Verdict::at_least(
            "flow_batch",
            "flow_batch_msgs_per_s vs 150,000 (issue 7, absolute)",
            batch.acked_per_s,
            TARGET_BATCH_MSGS_PER_S,
        ),
        Verdict::at_most(
            "visible_p99",
            "visible_p99_ms vs 10 ms (issue 7)",
            visible.p99_us() / 1_000.0,
            TARGET_VISIBLE_P99_MS,
        ),
    ];
    verdict::record_all(report, &verdicts);
    report.bars(
        "messages per second",
        "msg/s",
        &[
            ("no-op HTTP c64 (requests)", noop_per_s),
            ("single flow", single.acked_per_s),
            ("batch flow", batch.acked_per_s),
        ],
    );
    report.bars(
        "narad CPU per message",
        "µs",
        &[
            ("single flow (acked)", single.narad_cpu_us_per_msg()),
            ("batch flow (acked)", batch.narad_cpu_us_per_msg()),
        ],
    );
    Ok(verdicts)
}

/// Requests per second the no-op server answers over [`NOOP_CONNECTIONS`].
async fn noop_baseline(addr: SocketAddr) -> io::Result<f64> {
    let request = Arc::new(produce_request("noop", MESSAGE_BYTES));
    let answered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..NOOP_CONNECTIONS {
        let mut connection = Connection::open(addr).await?;
        let (request, answered, stop) = (
            Arc::clone(&request),
            Arc::clone(&answered),
            Arc::clone(&stop),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if connection.send(&request).await?.status == 202 {
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            }
            io::Result::Ok(())
        }));
    }
    tokio::time::sleep(WARMUP).await;
    let before = answered.load(Ordering::Relaxed);
    tokio::time::sleep(PHASE).await;
    let count = answered.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.map_err(io::Error::other)??;
    }
    Ok(count as f64 / PHASE.as_secs_f64())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Single,
    Batch,
}

#[derive(Debug)]
struct FlowFigures {
    acked_per_s: f64,
    produced_per_s: f64,
    /// Messages acked (`204`) in the measured window.
    acked: u64,
    /// CPU seconds of narad and of this process over the measured window.
    narad_cpu_seconds: f64,
    client_cpu_seconds: f64,
    /// Per request of the measured phase: produces answered `202`,
    /// consumes answered `200` and acks.
    timings: Timings,
}

impl FlowFigures {
    fn narad_cpu_us_per_msg(&self) -> f64 {
        us_per_unit(self.narad_cpu_seconds, self.acked)
    }
}

/// Request latencies of one phase, request written to response read.
#[derive(Debug, Default)]
struct Timings {
    produce: Latencies,
    consume: Latencies,
    ack: Latencies,
}

impl Timings {
    fn merge(&mut self, other: &Timings) {
        self.produce.merge(&other.produce);
        self.consume.merge(&other.consume);
        self.ack.merge(&other.ack);
    }

    /// Sets `<prefix>_{produce,consume,ack}_{p50,p99}_us`.
    fn record(&mut self, report: &mut Report, prefix: &str) {
        for (name, latencies) in [
            ("produce", &mut self.produce),
            ("consume", &mut self.consume),
            ("ack", &mut self.ack),
        ] {
            report.set(&format!("{prefix}_{name}_p50_us"), latencies.p50_us());
            report.set(&format!("{prefix}_{name}_p99_us"), latencies.p99_us());
        }
    }
}

/// Sends `request` and says how long its answer took, request written to
/// response read.
async fn send_timed(
    connection: &mut Connection,
    request: &[u8],
) -> io::Result<(narad_bench::http::Response, Duration)> {
    let started = Instant::now();
    let response = connection.send(request).await?;
    Ok((response, started.elapsed()))
}

/// Counters shared by the tasks of one phase.
#[derive(Debug, Default)]
struct Counters {
    produced: AtomicU64,
    acked: AtomicU64,
    stop: AtomicBool,
    /// Set once the warmup is over.
    measuring: AtomicBool,
}

/// One flow phase on topic `flow-<name>`, with its figures set in
/// `report` as `flow_<name>_*`: messages acked and produced per second,
/// request latencies, the cores of narad and of this client, and narad's
/// CPU per message acked, all over the measured window.
async fn recorded_flow(
    node: &Broker,
    addrs: &[SocketAddr],
    report: &mut Report,
    shape: Shape,
) -> io::Result<FlowFigures> {
    let name = match shape {
        Shape::Single => "single",
        Shape::Batch => "batch",
    };
    let mut figures = flow(node, addrs, &format!("flow-{name}"), shape).await?;
    let prefix = format!("flow_{name}");
    let seconds = PHASE.as_secs_f64();
    report.set(
        &format!("{prefix}_narad_cores"),
        figures.narad_cpu_seconds / seconds,
    );
    report.set(
        &format!("{prefix}_client_cores"),
        figures.client_cpu_seconds / seconds,
    );
    report.set(
        &format!("{prefix}_narad_cpu_us_per_msg"),
        figures.narad_cpu_us_per_msg(),
    );
    report.set(&format!("{prefix}_msgs_per_s"), figures.acked_per_s);
    report.set(
        &format!("{prefix}_produced_msgs_per_s"),
        figures.produced_per_s,
    );
    figures.timings.record(report, &prefix);
    Ok(figures)
}

/// One flow phase on a new topic, its connections round robin over
/// `addrs`; CPU figures are of `node` and of this process.
async fn flow(
    node: &Broker,
    addrs: &[SocketAddr],
    topic: &str,
    shape: Shape,
) -> io::Result<FlowFigures> {
    create_topic(addrs, topic).await?;
    let counters = Arc::new(Counters::default());
    let (producers, consumers) = match shape {
        Shape::Single => (SINGLE_PRODUCERS, SINGLE_CONSUMERS),
        Shape::Batch => (BATCH_PRODUCERS, BATCH_CONSUMERS),
    };
    let produce = Arc::new(match shape {
        Shape::Single => produce_request(topic, MESSAGE_BYTES),
        Shape::Batch => batch_produce_request(topic, BATCH, MESSAGE_BYTES),
    });
    let per_request = match shape {
        Shape::Single => 1,
        Shape::Batch => BATCH as u64,
    };
    let mut tasks = Vec::new();
    for index in 0..producers {
        let mut connection = Connection::open(spread(addrs, index)).await?;
        let (request, counters) = (Arc::clone(&produce), Arc::clone(&counters));
        tasks.push(tokio::spawn(async move {
            let mut timings = Timings::default();
            while !counters.stop.load(Ordering::Relaxed) {
                let measuring = counters.measuring.load(Ordering::Relaxed);
                let (response, took) = send_timed(&mut connection, &request).await?;
                if response.status == 202 {
                    counters.produced.fetch_add(per_request, Ordering::Relaxed);
                    if measuring {
                        timings.produce.record(took);
                    }
                }
            }
            io::Result::Ok(timings)
        }));
    }
    for index in 0..consumers {
        let mut connection = Connection::open(spread(addrs, index)).await?;
        let (topic, counters) = (topic.to_owned(), Arc::clone(&counters));
        tasks.push(tokio::spawn(async move {
            let mut timings = Timings::default();
            while !counters.stop.load(Ordering::Relaxed) {
                let measure = counters
                    .measuring
                    .load(Ordering::Relaxed)
                    .then_some(&mut timings);
                let acked = match shape {
                    Shape::Single => consume_and_ack_one(&mut connection, &topic, measure).await?,
                    Shape::Batch => consume_and_ack_batch(&mut connection, &topic, measure).await?,
                };
                counters.acked.fetch_add(acked, Ordering::Relaxed);
            }
            io::Result::Ok(timings)
        }));
    }
    tokio::time::sleep(WARMUP).await;
    counters.measuring.store(true, Ordering::Relaxed);
    let (produced_before, acked_before) = (
        counters.produced.load(Ordering::Relaxed),
        counters.acked.load(Ordering::Relaxed),
    );
    let (narad_before, client_before) = (node.cpu_seconds(), cpu_seconds("self"));
    tokio::time::sleep(PHASE).await;
    let produced = counters.produced.load(Ordering::Relaxed) - produced_before;
    let acked = counters.acked.load(Ordering::Relaxed) - acked_before;
    let narad_cpu_seconds = node.cpu_seconds() - narad_before;
    let client_cpu_seconds = cpu_seconds("self") - client_before;
    counters.stop.store(true, Ordering::Relaxed);
    let mut timings = Timings::default();
    for task in tasks {
        timings.merge(&task.await.map_err(io::Error::other)??);
    }
    Ok(FlowFigures {
        acked_per_s: acked as f64 / PHASE.as_secs_f64(),
        produced_per_s: produced as f64 / PHASE.as_secs_f64(),
        acked,
        narad_cpu_seconds,
        client_cpu_seconds,
        timings,
    })
}

/// One single consume (long poll of 1 s) and its ack; how many acks were
/// answered `204` (0 or 1).
async fn consume_and_ack_one(
    connection: &mut Connection,
    topic: &str,
    mut timings: Option<&mut Timings>,
) -> io::Result<u64> {
    let consume = http_request(
        "GET",
        &format!("/v1/topics/{topic}/consume?wait=1s"),
        "application/json",
        b"",
    );
    let (response, took) = send_timed(connection, &consume).await?;
    if response.status != 200 {
        return Ok(0);
    }
    if let Some(timings) = timings.as_deref_mut() {
        timings.consume.record(took);
    }
    let message: Value = serde_json::from_slice(&response.body).map_err(io::Error::other)?;
    let handle = message["receipt_handle"].as_str().unwrap_or_default();
    let ack = http_request(
        "POST",
        &format!("/v1/topics/{topic}/ack?receipt_handle={handle}"),
        "application/json",
        b"",
    );
    let (response, took) = send_timed(connection, &ack).await?;
    if let Some(timings) = timings {
        timings.ack.record(took);
    }
    Ok(u64::from(response.status == 204))
}

/// One batch consume of up to [`BATCH`] and one batch ack of what came; how
/// many handles were answered `204`.
async fn consume_and_ack_batch(
    connection: &mut Connection,
    topic: &str,
    mut timings: Option<&mut Timings>,
) -> io::Result<u64> {
    let started = Instant::now();
    let messages = consume_batch(connection, topic).await?;
    if messages.is_empty() {
        return Ok(0);
    }
    if let Some(timings) = timings.as_deref_mut() {
        timings.consume.record(started.elapsed());
    }
    let handles: Vec<&Value> = messages.iter().map(|m| &m["receipt_handle"]).collect();
    let body = serde_json::json!({ "receipt_handles": handles }).to_string();
    let ack = with_client_header(http_request(
        "POST",
        &format!("/v1/topics/{topic}/ack"),
        "application/json",
        body.as_bytes(),
    ));
    let (response, took) = send_timed(connection, &ack).await?;
    if let Some(timings) = timings {
        timings.ack.record(took);
    }
    if response.status != 200 {
        return Ok(0);
    }
    let results: Value = serde_json::from_slice(&response.body).map_err(io::Error::other)?;
    let acked = results["results"].as_array().map_or(0, |results| {
        results.iter().filter(|r| r["status"] == 204).count()
    });
    Ok(acked as u64)
}

async fn consume_batch(connection: &mut Connection, topic: &str) -> io::Result<Vec<Value>> {
    let consume = with_client_header(http_request(
        "GET",
        &format!("/v1/topics/{topic}/consume?max={BATCH}&wait=1s"),
        "application/json",
        b"",
    ));
    let response = connection.send(&consume).await?;
    if response.status != 200 {
        return Ok(Vec::new());
    }
    let body: Value = serde_json::from_slice(&response.body).map_err(io::Error::other)?;
    Ok(match body {
        Value::Object(mut fields) => match fields.remove("messages") {
            Some(Value::Array(messages)) => messages,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    })
}

/// Produce at [`VISIBLE_RATE`] for [`PHASE`] to [`VISIBLE_TOPIC`], which
/// must exist: message `i` is due at `i / rate` and carries `i` as its
/// payload; consumers note when each arrives. Returns the visible latencies
/// and how late each send was.
async fn visible_latency(addrs: &[SocketAddr]) -> io::Result<(Latencies, Latencies)> {
    let topic = VISIBLE_TOPIC;
    let total = VISIBLE_RATE * PHASE.as_secs();
    let interval = Duration::from_secs(1) / u32::try_from(VISIBLE_RATE).unwrap_or(u32::MAX);
    let next = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now() + Duration::from_millis(200);
    // When each message's request was written, in µs after `started`
    // (0 = not yet).
    let sent_us: Arc<Vec<AtomicU64>> = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
    let mut consumers = Vec::new();
    for index in 0..VISIBLE_CONSUMERS {
        let mut connection = Connection::open(spread(addrs, index)).await?;
        let (stop, sent_us) = (Arc::clone(&stop), Arc::clone(&sent_us));
        consumers.push(tokio::spawn(async move {
            let mut latencies = Latencies::new();
            while !stop.load(Ordering::Relaxed) {
                let messages = consume_batch(&mut connection, topic).await?;
                let arrived = Instant::now();
                let mut handles = Vec::with_capacity(messages.len());
                for message in &messages {
                    let sent = message["payload"]
                        .as_u64()
                        .and_then(|index| sent_us.get(usize::try_from(index).ok()?))
                        .map(|sent| sent.load(Ordering::Acquire));
                    if let Some(sent) = sent.filter(|&sent| sent > 0) {
                        let sent = started + Duration::from_micros(sent);
                        latencies.record(arrived.saturating_duration_since(sent));
                    }
                    handles.push(&message["receipt_handle"]);
                }
                if !handles.is_empty() {
                    let body = serde_json::json!({ "receipt_handles": handles }).to_string();
                    let ack = with_client_header(http_request(
                        "POST",
                        &format!("/v1/topics/{topic}/ack"),
                        "application/json",
                        body.as_bytes(),
                    ));
                    connection.send(&ack).await?;
                }
            }
            io::Result::Ok(latencies)
        }));
    }
    let mut producers = Vec::new();
    for index in 0..VISIBLE_PRODUCERS {
        let mut connection = Connection::open(spread(addrs, index)).await?;
        let (next, sent_us) = (Arc::clone(&next), Arc::clone(&sent_us));
        producers.push(tokio::spawn(async move {
            let mut lateness = Latencies::new();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= total {
                    return io::Result::Ok(lateness);
                }
                let due = started + interval * u32::try_from(index).unwrap_or(u32::MAX);
                tokio::time::sleep_until(due.into()).await;
                let now = Instant::now();
                lateness.record(now.saturating_duration_since(due));
                let since_start = u64::try_from(now.duration_since(started).as_micros())
                    .unwrap_or(u64::MAX)
                    .max(1);
                if let Some(slot) = usize::try_from(index).ok().and_then(|i| sent_us.get(i)) {
                    slot.store(since_start, Ordering::Release);
                }
                let request = http_request(
                    "POST",
                    &format!("/v1/topics/{topic}/produce"),
                    "application/json",
                    index.to_string().as_bytes(),
                );
                connection.send(&request).await?;
            }
        }));
    }
    let mut lateness = Latencies::new();
    for producer in producers {
        lateness.merge(&producer.await.map_err(io::Error::other)??);
    }
    // Let the last messages arrive before the consumers stop.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let mut visible = Latencies::new();
    for consumer in consumers {
        visible.merge(&consumer.await.map_err(io::Error::other)??);
    }
    Ok((visible, lateness))
}

/// [`drain`] on every node in turn; the total time, in ms.
async fn drain_all(addrs: &[SocketAddr]) -> io::Result<f64> {
    let mut total_ms = 0.0;
    for addr in addrs {
        total_ms += drain(*addr).await?;
    }
    Ok(total_ms)
}

/// Waits until the node's dispatcher has committed everything a previous
/// phase accepted (`narad_ingress_dispatch_backlog_records` is 0), so one
/// phase's backlog is not measured as the next one's latency. Returns how
/// long that took, in ms.
async fn drain(addr: SocketAddr) -> io::Result<f64> {
    const DRAIN_MAX: Duration = Duration::from_secs(60);
    let started = Instant::now();
    let request = http_request("GET", "/metrics", "text/plain", b"");
    let mut connection = Connection::open(addr).await?;
    while started.elapsed() < DRAIN_MAX {
        let response = connection.send(&request).await?;
        let text = String::from_utf8_lossy(&response.body);
        let backlog = text
            .lines()
            .find_map(|line| line.strip_prefix("narad_ingress_dispatch_backlog_records "))
            .and_then(|value| value.trim().parse::<f64>().ok());
        if backlog == Some(0.0) {
            return Ok(started.elapsed().as_secs_f64() * 1_000.0);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(io::Error::other("the dispatch backlog did not drain"))
}

fn with_client_header(request: Vec<u8>) -> Vec<u8> {
    let text = String::from_utf8_lossy(&request).into_owned();
    text.replacen(
        "\r\nContent-Type:",
        &format!("\r\n{CLIENT_HEADER}\r\nContent-Type:"),
        1,
    )
    .into_bytes()
}

fn produce_request(topic: &str, bytes: usize) -> Vec<u8> {
    http_request(
        "POST",
        &format!("/v1/topics/{topic}/produce"),
        "application/octet-stream",
        &vec![b'm'; bytes],
    )
}

/// Creates `topic` through the first of `addrs` and waits until each of
/// them sees its partitions assigned.
async fn create_topic(addrs: &[SocketAddr], topic: &str) -> io::Result<()> {
    let body = format!(
        "{{\"name\":\"{topic}\",\"partitions\":{PARTITIONS},\"visibility_timeout_ms\":30000}}"
    );
    let request = http_request("POST", "/v1/topics", "application/json", body.as_bytes());
    let mut connection = Connection::open(addrs[0]).await?;
    let response = connection.send(&request).await?;
    if response.status == 201 {
        for addr in addrs {
            wait_assigned(*addr, topic, PARTITIONS as usize).await?;
        }
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "creating {topic} answered {}: {}",
            response.status,
            String::from_utf8_lossy(&response.body)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_header_lands_in_the_head() {
        let request = with_client_header(http_request("GET", "/x", "application/json", b""));
        let text = String::from_utf8(request).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains("\r\nX-Narad-Client: flow-bench\r\n"),
            "{head}"
        );
        assert!(body.is_empty());
    }
}
