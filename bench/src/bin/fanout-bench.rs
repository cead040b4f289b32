//! `fanout-bench`: fan-out children (spec §1.4 and §4) through `narad dev`,
//! next to same-run baselines.
//!
//! Spawns the release `narad` binary (`$NARAD_BIN`, else `narad` beside this
//! binary) as `narad dev` on a scratch directory and measures three things,
//! each on topics of its own with [`PARTITIONS`] partitions:
//! - **throughput**: [`PRODUCERS`] keep-alive connections produce batches of
//!   [`BATCH`] messages of [`MESSAGE_BYTES`] bytes to a parent with 0, 1, 4
//!   and 16 replica children (created with `"parent"`). Per phase: the
//!   parent's accepted msg/s (`202`), the records committed into the
//!   children per second over the same window
//!   (`narad_fanout_committed_total`), and the children's lag (summed
//!   `lag_messages` of `GET /v1/topics/{parent}/children`) sampled every
//!   [`LAG_SAMPLE`]: its maximum, its value when the producers stop, its
//!   slope over the window (a lag that keeps growing is not bounded), and
//!   how long the children then take to catch up. After the drain, every
//!   child's high watermarks are compared with the parent's;
//! - **visible latency**: single produces at a paced rate to a parent with
//!   one child, consumed (long-poll batch consumes, acked) from the child
//!   and, as the same-run baseline, from the parent itself; latency runs
//!   from writing the produce request to the consumer reading the message;
//! - **delay child**: single produces at a paced rate to a parent with a
//!   child of `fanout_delay_ms` [`DELAY`], consumed from the child. After
//!   the run the node is stopped and the parent's partition logs are read
//!   from disk for each record's commit time (ms; the replay `timestamp` is
//!   whole seconds). Due lag = the consumer's wall-clock arrival − (parent
//!   commit + delay); a record that arrives before that is early. The
//!   child's own commit time (from its logs) gives the same figure as the
//!   node's clock saw it.
//!
//! Baselines of the same run: an axum handler in this process that reads a
//! batch produce body and answers `202` (the HTTP ceiling of the throughput
//! phases, driven by the same client), the same handler for a single
//! produce at one connection (the floor of the latency phases), and 4 KiB
//! write + fdatasync on the same disk, half before and half after.
//!
//! Writes `target/bench/fanout.json` and `fanout.png`. Flags set the
//! durations (`--help`).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use narad_bench::baseline::FdatasyncBaseline;
use narad_bench::cpu::cpu_seconds;
use narad_bench::http::{Connection, NoopServer, Response, batch_produce_request, http_request};
use narad_bench::node::{DevNode, load_average, narad_binary};
use narad_bench::report::Report;
use narad_bench::stats::Latencies;
use narad_disk::portable::PortableDisk;
use narad_plog::{LogConfig, PartitionLog, ReadEntry, ReadLimits};
use serde_json::Value;

/// Bytes of every message of the throughput phases.
const MESSAGE_BYTES: usize = 256;
/// Partitions of every parent (children inherit the count).
const PARTITIONS: u32 = 8;
/// Messages per batch produce.
const BATCH: usize = 100;
/// Concurrent batch producers of the throughput phases (as
/// `produce-bench`'s `batch100`).
const PRODUCERS: usize = 16;
/// Children per throughput phase.
const CHILD_COUNTS: [usize; 4] = [0, 1, 4, 16];
/// The delay of the delay child.
const DELAY: Duration = Duration::from_secs(1);
/// How often the children's lag is sampled.
const LAG_SAMPLE: Duration = Duration::from_millis(250);
/// Connections the paced producers spread their sends over.
const PACED_PRODUCERS: usize = 4;
/// Consumers per consumed topic of the paced phases.
const CONSUMERS: usize = 2;
/// Most messages one consume asks for.
const CONSUME_MAX: usize = 100;
/// Samples of each fdatasync baseline (half before, half after).
const FDATASYNC_SAMPLES: usize = 1_000;
/// How long the paced phases wait for the last messages after the last
/// send, beyond the delay.
const SETTLE_MAX: Duration = Duration::from_secs(5);
/// How long topic setup may take (partitions assigned, cursors running).
const SETUP_MAX: Duration = Duration::from_secs(30);
const CLIENT_HEADER: &str = "X-Narad-Client: fanout-bench";
/// Targets: the parent with 4 children keeps this share of its rate with
/// none; a delay child delivers this share within [`DUE_WINDOW`] of due,
/// and nothing early.
const TARGET_C4_PARENT_SHARE: f64 = 0.60;
const TARGET_DUE_WITHIN_SHARE: f64 = 0.99;
const DUE_WINDOW: Duration = Duration::from_millis(100);
/// A phase's lag counts as bounded when it grew by less than this share
/// of what the children were sent per second.
const LAG_SLOPE_BOUNDED_SHARE: f64 = 0.05;

/// Durations and rates, from the flags.
#[derive(Clone, Debug)]
struct Options {
    warmup: Duration,
    phase: Duration,
    drain_max: Duration,
    producers: usize,
    children: Vec<usize>,
    latency: Duration,
    latency_rate: u64,
    delay: Duration,
    delay_rate: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            warmup: Duration::from_secs(1),
            phase: Duration::from_secs(4),
            drain_max: Duration::from_secs(20),
            producers: PRODUCERS,
            children: CHILD_COUNTS.to_vec(),
            latency: Duration::from_secs(5),
            latency_rate: 200,
            delay: Duration::from_secs(5),
            delay_rate: 200,
        }
    }
}

const USAGE: &str = "fanout-bench [--phase-secs 4] [--warmup-secs 1] [--drain-max-secs 20] \
[--producers 16] [--children 0,1,4,16] [--latency-secs 5] [--latency-rate 200] \
[--delay-secs 5] [--delay-rate 200]";

impl Options {
    fn parse(args: impl IntoIterator<Item = String>) -> io::Result<Option<Self>> {
        let mut options = Self::default();
        let Some(pairs) = narad_bench::flag_pairs(args, USAGE)? else {
            return Ok(None);
        };
        for (flag, value) in pairs {
            let number = || {
                value
                    .parse::<u64>()
                    .map_err(|_| io::Error::other(format!("{flag} {value:?}: not a number")))
            };
            let seconds = || number().map(Duration::from_secs);
            match flag.as_str() {
                "--phase-secs" => options.phase = seconds()?,
                "--warmup-secs" => options.warmup = seconds()?,
                "--drain-max-secs" => options.drain_max = seconds()?,
                "--producers" => options.producers = usize::try_from(number()?.max(1)).unwrap_or(1),
                "--children" => {
                    options.children = value
                        .split(',')
                        .map(|count| count.trim().parse::<usize>())
                        .collect::<Result<_, _>>()
                        .map_err(|_| io::Error::other(format!("--children {value:?}")))?;
                }
                "--latency-secs" => options.latency = seconds()?,
                "--latency-rate" => options.latency_rate = number()?.max(1),
                "--delay-secs" => options.delay = seconds()?,
                "--delay-rate" => options.delay_rate = number()?.max(1),
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
    let scratch = narad_bench::bench_dir()?.join(format!("fanout-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch)?;
    let mut report = Report::new("fanout");
    report.note("load_average_at_start", &load_average());
    report.note(
        "method",
        "one narad dev; keep-alive HTTP/1.1 clients on tokio in this process, on the same 2 cores; \
         parent msg/s counts messages answered 202 during the measured window; child msg/s is the \
         growth of narad_fanout_committed_total over the same window, all children together \
         (per_child divides by the children); lag is the children listing's lag_messages summed \
         over the children",
    );
    report.note("message_bytes", &MESSAGE_BYTES.to_string());
    report.note("partitions", &PARTITIONS.to_string());
    report.note(
        "throughput_phases",
        &format!(
            "{} batch producers of {BATCH}; {} s warmup then {} s measured per phase; children \
             {:?}; drain waited for at most {} s",
            options.producers,
            options.warmup.as_secs(),
            options.phase.as_secs(),
            options.children,
            options.drain_max.as_secs()
        ),
    );
    report.note(
        "paced_phases",
        &format!(
            "visible latency: {}/s single produces for {} s over {PACED_PRODUCERS} connections, \
             {CONSUMERS} long-poll batch consumers on the child and {CONSUMERS} on the parent; \
             delay child: {}/s for {} s, delay {} ms",
            options.latency_rate,
            options.latency.as_secs(),
            options.delay_rate,
            options.delay.as_secs(),
            DELAY.as_millis()
        ),
    );

    let mut fdatasync = FdatasyncBaseline::default();
    fdatasync.sample(&scratch, FDATASYNC_SAMPLES)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(measure(&scratch, &options, &mut report))?;
    fdatasync.sample(&scratch, FDATASYNC_SAMPLES)?;
    fdatasync.record(&mut report);
    report.note("load_average_at_end", &load_average());
    summarize(&mut report, &options);
    let path = report.write()?;
    println!(
        "{}",
        serde_json::to_string_pretty(&report.to_json()).map_err(io::Error::other)?
    );
    println!("wrote {}", path.display());
    let _ = fs::remove_dir_all(&scratch);
    Ok(())
}

async fn measure(scratch: &Path, options: &Options, report: &mut Report) -> io::Result<()> {
    noop_baselines(options, report).await?;
    let data_dir = scratch.join("node");
    let node = DevNode::start(&narad_binary(), &data_dir).await?;
    let api = Api { addr: node.addr };
    for &children in &options.children {
        throughput(&node, &api, options, children, report).await?;
    }
    visible_latency(&api, options, report).await?;
    let delayed = delay_child(&api, options, report).await?;
    node.stop();
    delay_figures(&data_dir, &delayed, report)?;
    Ok(())
}

/// The no-op handler answering batch produces at the throughput phases'
/// concurrency (msg/s at [`BATCH`] messages a request), and single
/// produces at one connection (p50, the floor of a visible latency).
async fn noop_baselines(options: &Options, report: &mut Report) -> io::Result<()> {
    let noop = NoopServer::start().await?;
    let batch = Arc::new(batch_produce_request("noop", BATCH, MESSAGE_BYTES));
    let mut phase = drive(
        noop.addr,
        &batch,
        options.producers,
        BATCH as u64,
        options.warmup,
        options.phase,
    )
    .await?;
    report.set("baseline_http_noop_batch_msgs_per_s", phase.msgs_per_s());
    report.set("baseline_http_noop_batch_p50_us", phase.latencies.p50_us());
    let single = Arc::new(http_request(
        "POST",
        "/v1/topics/noop/produce",
        "application/json",
        b"1",
    ));
    let mut c1 = drive(
        noop.addr,
        &single,
        1,
        1,
        Duration::ZERO,
        Duration::from_secs(2),
    )
    .await?;
    report.set("baseline_http_noop_c1_p50_us", c1.latencies.p50_us());
    report.set("baseline_http_noop_c1_p99_us", c1.latencies.p99_us());
    noop.stop();
    eprintln!(
        "baseline: no-op HTTP {:.0} msg/s in batches of {BATCH} at c{}, single c1 p50 {:.1} µs",
        phase.msgs_per_s(),
        options.producers,
        c1.latencies.p50_us()
    );
    Ok(())
}

/// One throughput phase: a parent with `children` replica children.
async fn throughput(
    node: &DevNode,
    api: &Api,
    options: &Options,
    children: usize,
    report: &mut Report,
) -> io::Result<()> {
    let parent = format!("fan{children}");
    let names: Vec<String> = (0..children)
        .map(|i| format!("{parent}-child{i}"))
        .collect();
    api.create_topic(&parent, PARTITIONS).await?;
    for child in &names {
        api.create_child(child, &parent, 0).await?;
    }
    api.wait_running(&parent, &names).await?;
    let prefix = format!("fanout_c{children}");

    let request = Arc::new(batch_produce_request(&parent, BATCH, MESSAGE_BYTES));
    let load = Load::start(api.addr, &request, options.producers, BATCH as u64).await?;
    tokio::time::sleep(options.warmup).await;
    let (committed_before, _) = api.committed(&parent).await?;
    let accepted_before = load.accepted.load(Ordering::Relaxed);
    let (narad_before, client_before) = (cpu_seconds(&node.pid().to_string()), cpu_seconds("self"));
    load.measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let mut lag = LagSamples::default();
    while started.elapsed() < options.phase {
        if children > 0 {
            lag.push(started.elapsed(), api.children_lag(&parent).await?.0);
        }
        tokio::time::sleep(LAG_SAMPLE).await;
    }
    let accepted = load.accepted.load(Ordering::Relaxed) - accepted_before;
    let (committed_after, backlog) = api.committed(&parent).await?;
    let committed = committed_after - committed_before;
    let seconds = started.elapsed().as_secs_f64();
    let narad_cores = (cpu_seconds(&node.pid().to_string()) - narad_before) / seconds;
    let client_cores = (cpu_seconds("self") - client_before) / seconds;
    let final_lag = if children > 0 {
        let (lag_now, _) = api.children_lag(&parent).await?;
        lag.push(started.elapsed(), lag_now);
        lag_now
    } else {
        0
    };
    let mut produced = load.stop().await?;

    // The drain: the dispatcher commits what the parent accepted, then the
    // cursors deliver what they have not yet.
    let drain_started = Instant::now();
    let deadline = drain_started + options.drain_max;
    let drained = api.wait_backlog_empty(deadline).await? && {
        let mut caught_up = children == 0;
        while !caught_up && Instant::now() < deadline {
            let (lag_now, complete) = api.children_lag(&parent).await?;
            caught_up = lag_now == 0 && complete;
            if !caught_up {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        caught_up
    };
    let drain_ms = drain_started.elapsed().as_secs_f64() * 1_000.0;
    let lag_left = if children > 0 && !drained {
        api.children_lag(&parent).await?.0
    } else {
        0
    };
    let parent_records = api.records(&parent).await?;
    let mut child_records_min = u64::MAX;
    for child in &names {
        child_records_min = child_records_min.min(api.records(child).await?);
    }

    let parent_per_s = accepted as f64 / seconds;
    let child_per_s = committed / seconds;
    let fed_per_s = parent_per_s * children as f64;
    let slope = lag.slope_per_s();
    let set = |report: &mut Report, key: &str, value: f64| {
        report.set(&format!("{prefix}_{key}"), value);
    };
    set(report, "parent_msgs_per_s", parent_per_s);
    set(report, "parent_p50_us", produced.latencies.p50_us());
    set(report, "parent_p99_us", produced.latencies.p99_us());
    set(report, "refused", produced.refused as f64);
    set(report, "narad_cores", narad_cores);
    set(report, "dispatch_backlog_final", backlog);
    set(report, "client_cores", client_cores);
    if let Some(refusal) = &produced.first_refusal {
        report.note(&format!("{prefix}_first_refusal"), refusal);
    }
    if children > 0 {
        set(report, "child_msgs_per_s", child_per_s);
        set(
            report,
            "child_per_child_msgs_per_s",
            child_per_s / children as f64,
        );
        set(
            report,
            "child_to_parent_ratio",
            ratio(child_per_s, fed_per_s),
        );
        set(report, "lag_max", lag.max() as f64);
        set(report, "lag_final", final_lag as f64);
        set(report, "lag_slope_per_s", slope);
        set(report, "lag_slope_share", ratio(slope, fed_per_s));
        set(
            report,
            "lag_bounded",
            f64::from(u8::from(slope <= LAG_SLOPE_BOUNDED_SHARE * fed_per_s)),
        );
        set(
            report,
            "lag_final_seconds",
            ratio(final_lag as f64, fed_per_s),
        );
        set(report, "drained", f64::from(u8::from(drained)));
        set(report, "drain_ms", drain_ms);
        set(report, "lag_left_after_drain_max", lag_left as f64);
        set(report, "parent_records", parent_records as f64);
        set(report, "child_records_min", child_records_min as f64);
    }
    eprintln!(
        "{prefix}: parent {parent_per_s:.0} msg/s (p50 {:.0} µs, {} refused), children \
         {child_per_s:.0} msg/s ({:.2} of {fed_per_s:.0} fed), lag max {} final {final_lag} \
         slope {slope:.0}/s, drained {drained} in {drain_ms:.0} ms, narad {narad_cores:.2} cores",
        produced.latencies.p50_us(),
        produced.refused,
        ratio(child_per_s, fed_per_s),
        lag.max(),
    );
    api.delete_topic(&parent).await?;
    for child in &names {
        api.delete_topic(child).await?;
    }
    Ok(())
}

/// Produce-to-visible latency through a one-child parent, the child
/// against the parent itself.
async fn visible_latency(api: &Api, options: &Options, report: &mut Report) -> io::Result<()> {
    let (parent, child) = ("visible", "visible-child");
    api.create_topic(parent, PARTITIONS).await?;
    api.create_child(child, parent, 0).await?;
    api.wait_running(parent, &[child.to_owned()]).await?;
    let total = options.latency_rate * options.latency.as_secs();
    let ledger = Arc::new(Ledger::new(total));
    let stop = Arc::new(AtomicBool::new(false));
    let mut consumers = Vec::new();
    for (topic, side) in [(child, Side::Child), (parent, Side::Parent)] {
        for _ in 0..CONSUMERS {
            consumers.push(spawn_consumer(api.addr, topic, side, &ledger, &stop).await?);
        }
    }
    let mut lateness = paced_produce(api.addr, parent, options.latency_rate, &ledger).await?;
    ledger.wait_child_seen(SETTLE_MAX).await;
    stop.store(true, Ordering::Relaxed);
    for consumer in consumers {
        consumer.await.map_err(io::Error::other)??;
    }
    let mut child_latency = Latencies::new();
    let mut parent_latency = Latencies::new();
    for index in 0..ledger.len() {
        let Some(sent) = ledger.sent_mono(index) else {
            continue;
        };
        if let Some(seen) = ledger.seen_mono(Side::Child, index) {
            child_latency.record(Duration::from_micros(seen.saturating_sub(sent)));
        }
        if let Some(seen) = ledger.seen_mono(Side::Parent, index) {
            parent_latency.record(Duration::from_micros(seen.saturating_sub(sent)));
        }
    }
    let accepted = ledger.accepted();
    let ms = |us: f64| us / 1_000.0;
    report.set("visible_child_p50_ms", ms(child_latency.p50_us()));
    report.set("visible_child_p99_ms", ms(child_latency.p99_us()));
    report.set("visible_child_p999_ms", ms(child_latency.p999_us()));
    report.set("visible_parent_p50_ms", ms(parent_latency.p50_us()));
    report.set("visible_parent_p99_ms", ms(parent_latency.p99_us()));
    report.set(
        "visible_child_added_p50_ms",
        ms(child_latency.p50_us() - parent_latency.p50_us()),
    );
    report.set("visible_accepted", accepted as f64);
    report.set("visible_child_samples", child_latency.len() as f64);
    report.set("visible_parent_samples", parent_latency.len() as f64);
    report.set(
        "visible_child_duplicates",
        ledger.duplicates(Side::Child) as f64,
    );
    report.set("visible_send_lateness_p99_ms", ms(lateness.p99_us()));
    eprintln!(
        "visible: child p50 {:.1} ms p99 {:.1} ms ({} of {accepted}); parent p50 {:.1} ms p99 \
         {:.1} ms ({})",
        ms(child_latency.p50_us()),
        ms(child_latency.p99_us()),
        child_latency.len(),
        ms(parent_latency.p50_us()),
        ms(parent_latency.p99_us()),
        parent_latency.len()
    );
    api.delete_topic(parent).await?;
    api.delete_topic(child).await?;
    Ok(())
}

/// What the delay phase leaves for [`delay_figures`], which reads the
/// parent's commit times once the node has stopped.
#[derive(Debug)]
struct Delayed {
    parent: &'static str,
    child: &'static str,
    ledger: Arc<Ledger>,
    due_lag_gauge_max_s: f64,
}

/// Paced produces to a parent whose child has a delay of [`DELAY`],
/// consumed from the child.
async fn delay_child(api: &Api, options: &Options, report: &mut Report) -> io::Result<Delayed> {
    let (parent, child) = ("delayed", "delayed-child");
    api.create_topic(parent, PARTITIONS).await?;
    let delay_ms = u64::try_from(DELAY.as_millis()).unwrap_or(u64::MAX);
    api.create_child(child, parent, delay_ms).await?;
    api.wait_running(parent, &[child.to_owned()]).await?;
    let total = options.delay_rate * options.delay.as_secs();
    let ledger = Arc::new(Ledger::new(total));
    let stop = Arc::new(AtomicBool::new(false));
    let mut consumers = Vec::new();
    for _ in 0..CONSUMERS {
        consumers.push(spawn_consumer(api.addr, child, Side::Child, &ledger, &stop).await?);
    }
    let gauge_stop = Arc::new(AtomicBool::new(false));
    let gauge = {
        let (api, stop) = (*api, Arc::clone(&gauge_stop));
        tokio::spawn(async move {
            let mut max = 0.0f64;
            while !stop.load(Ordering::Relaxed) {
                let text = api.metrics().await?;
                let label = format!("child=\"{child}\"");
                max = max.max(metric_max(&text, "narad_fanout_due_lag_seconds", &label));
                tokio::time::sleep(LAG_SAMPLE).await;
            }
            io::Result::Ok(max)
        })
    };
    let mut lateness = paced_produce(api.addr, parent, options.delay_rate, &ledger).await?;
    ledger.wait_child_seen(DELAY + SETTLE_MAX).await;
    stop.store(true, Ordering::Relaxed);
    gauge_stop.store(true, Ordering::Relaxed);
    for consumer in consumers {
        consumer.await.map_err(io::Error::other)??;
    }
    let due_lag_gauge_max_s = gauge.await.map_err(io::Error::other)??;
    report.set("delay_send_lateness_p99_ms", lateness.p99_us() / 1_000.0);
    Ok(Delayed {
        parent,
        child,
        ledger,
        due_lag_gauge_max_s,
    })
}

/// The delay child's figures, from the consumers' arrival times and the
/// commit times in the (stopped) node's partition logs.
fn delay_figures(data_dir: &Path, delayed: &Delayed, report: &mut Report) -> io::Result<()> {
    let ledger = &delayed.ledger;
    let delay_ms = i64::try_from(DELAY.as_millis()).unwrap_or(i64::MAX);
    let parent_commits = commit_times(data_dir, delayed.parent)?;
    let child_commits = commit_times(data_dir, delayed.child)?;
    // Signed, in µs: arrival − due (negative = early).
    let mut due_lag_us: Vec<i64> = Vec::new();
    let mut server_due_lag_us: Vec<i64> = Vec::new();
    let (mut early, mut early_server, mut early_vs_send, mut no_commit_time) =
        (0u64, 0u64, 0u64, 0u64);
    let (mut arrival_vs_202_us, mut missing) = (Vec::new(), 0u64);
    for index in 0..ledger.len() {
        if !ledger.was_accepted(index) {
            continue;
        }
        let Some(arrived_us) = ledger.seen_wall(Side::Child, index) else {
            missing += 1;
            continue;
        };
        let arrived_us = i64::try_from(arrived_us).unwrap_or(i64::MAX);
        let sent_us = ledger
            .sent_wall(index)
            .map_or(0, |us| i64::try_from(us).unwrap_or(0));
        if arrived_us < sent_us + delay_ms * 1_000 {
            early_vs_send += 1;
        }
        if let Some(acked_us) = ledger.acked_wall(index) {
            let acked_us = i64::try_from(acked_us).unwrap_or(i64::MAX);
            arrival_vs_202_us.push(arrived_us - (acked_us + delay_ms * 1_000));
        }
        let Some(&committed_ms) = parent_commits.get(&(index as u64)) else {
            no_commit_time += 1;
            continue;
        };
        let due_us = (i64::try_from(committed_ms).unwrap_or(i64::MAX) + delay_ms) * 1_000;
        due_lag_us.push(arrived_us - due_us);
        if arrived_us < due_us {
            early += 1;
        }
        if let Some(&child_ms) = child_commits.get(&(index as u64)) {
            let lag = (i64::try_from(child_ms).unwrap_or(i64::MAX)) * 1_000 - due_us;
            server_due_lag_us.push(lag);
            if lag < 0 {
                early_server += 1;
            }
        }
    }
    let window_us = i64::try_from(DUE_WINDOW.as_micros()).unwrap_or(i64::MAX);
    let within = due_lag_us
        .iter()
        .filter(|&&lag| (0..=window_us).contains(&lag))
        .count();
    let within_share = ratio(within as f64, due_lag_us.len() as f64);
    let ms = |us: f64| us / 1_000.0;
    let accepted = ledger.accepted();
    report.set("delay_accepted", accepted as f64);
    report.set("delay_delivered", due_lag_us.len() as f64);
    report.set("delay_missing", missing as f64);
    report.set("delay_no_commit_time", no_commit_time as f64);
    report.set("delay_duplicates", ledger.duplicates(Side::Child) as f64);
    report.set(
        "delay_due_lag_p50_ms",
        ms(signed_percentile(&mut due_lag_us, 0.50)),
    );
    report.set(
        "delay_due_lag_p99_ms",
        ms(signed_percentile(&mut due_lag_us, 0.99)),
    );
    report.set(
        "delay_due_lag_max_ms",
        ms(signed_percentile(&mut due_lag_us, 1.0)),
    );
    report.set(
        "delay_due_lag_min_ms",
        ms(signed_percentile(&mut due_lag_us, 0.0)),
    );
    report.set("delay_within_100ms_share", within_share);
    report.set("delay_early", early as f64);
    report.set(
        "delay_server_due_lag_p50_ms",
        ms(signed_percentile(&mut server_due_lag_us, 0.50)),
    );
    report.set(
        "delay_server_due_lag_p99_ms",
        ms(signed_percentile(&mut server_due_lag_us, 0.99)),
    );
    report.set("delay_server_early", early_server as f64);
    report.set("delay_early_vs_send", early_vs_send as f64);
    report.set(
        "delay_arrival_minus_202_plus_delay_p50_ms",
        ms(signed_percentile(&mut arrival_vs_202_us, 0.50)),
    );
    report.set("delay_due_lag_gauge_max_s", delayed.due_lag_gauge_max_s);
    report.note(
        "delay_method",
        "due = the parent record's commit time (committed_at_ms read from the parent's partition \
         logs after the node stopped) + the delay; due lag = the consumer's wall-clock arrival − \
         due; early = arrival before due. delay_server_* use the child record's own commit time \
         instead of the arrival. delay_early_vs_send counts arrivals before send time + delay (a \
         strict bound: the commit follows the send); delay_arrival_minus_202_plus_delay uses the \
         202 time instead (a conservative stand-in for the commit time, kept for comparison)",
    );
    eprintln!(
        "delay child: {} of {accepted} delivered, due lag p50 {:.1} ms p99 {:.1} ms, {:.4} within \
         {} ms, {early} early ({early_server} by the child's commit time), {missing} missing",
        due_lag_us.len(),
        ms(signed_percentile(&mut due_lag_us, 0.50)),
        ms(signed_percentile(&mut due_lag_us, 0.99)),
        within_share,
        DUE_WINDOW.as_millis()
    );
    Ok(())
}

/// Ratios, target verdicts and charts, from the figures already set.
fn summarize(report: &mut Report, options: &Options) {
    let measured = report.clone();
    let figure = |key: &str| measured.get(key).unwrap_or(0.0);
    let c0 = figure("fanout_c0_parent_msgs_per_s");
    let noop = figure("baseline_http_noop_batch_msgs_per_s");
    report.set("ratio_c0_parent_to_http_noop", ratio(c0, noop));
    for &children in options.children.iter().filter(|&&n| n > 0) {
        report.set(
            &format!("ratio_c{children}_parent_to_c0"),
            ratio(figure(&format!("fanout_c{children}_parent_msgs_per_s")), c0),
        );
    }
    let c4_share = ratio(figure("fanout_c4_parent_msgs_per_s"), c0);
    report.set("target_c4_parent_share", TARGET_C4_PARENT_SHARE);
    report.set(
        "target_c4_parent_share_met",
        f64::from(u8::from(c4_share >= TARGET_C4_PARENT_SHARE)),
    );
    report.set("target_delay_within_100ms_share", TARGET_DUE_WITHIN_SHARE);
    report.set(
        "target_delay_met",
        f64::from(u8::from(
            figure("delay_within_100ms_share") >= TARGET_DUE_WITHIN_SHARE
                && figure("delay_early") == 0.0
                && figure("delay_delivered") > 0.0,
        )),
    );
    report.set(
        "ratio_visible_child_p50_to_parent_p50",
        ratio(
            figure("visible_child_p50_ms"),
            figure("visible_parent_p50_ms"),
        ),
    );
    // The no-op ceiling is an order of magnitude above the rest: it stays
    // in the JSON, not in the chart.
    let mut rates: Vec<(String, f64)> = Vec::new();
    for &children in &options.children {
        let noun = if children == 1 { "child" } else { "children" };
        rates.push((
            format!("parent, {children} {noun}"),
            figure(&format!("fanout_c{children}_parent_msgs_per_s")),
        ));
        if children > 0 {
            rates.push((
                format!("into the {noun}, {children} {noun}"),
                figure(&format!("fanout_c{children}_child_msgs_per_s")),
            ));
        }
    }
    let latencies = [
        (
            "visible on the parent, p50",
            figure("visible_parent_p50_ms"),
        ),
        (
            "visible on the parent, p99",
            figure("visible_parent_p99_ms"),
        ),
        ("visible on the child, p50", figure("visible_child_p50_ms")),
        ("visible on the child, p99", figure("visible_child_p99_ms")),
        ("delay child due lag, p50", figure("delay_due_lag_p50_ms")),
        ("delay child due lag, p99", figure("delay_due_lag_p99_ms")),
    ];
    let rate_refs: Vec<(&str, f64)> = rates.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    report.bars("messages per second", "msg/s", &rate_refs);
    report.bars("fan-out latencies", "ms", &latencies);
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// The `quantile` of signed samples by nearest rank; 0 when empty.
fn signed_percentile(samples: &mut [i64], quantile: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_unstable();
    let rank = ((quantile.clamp(0.0, 1.0) * samples.len() as f64).ceil() as usize)
        .saturating_sub(1)
        .min(samples.len() - 1);
    samples[rank] as f64
}

/// Microseconds since the Unix epoch.
fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

/// The HTTP API of the node, one request per fresh connection (setup,
/// sampling and teardown; the load has connections of its own).
#[derive(Clone, Copy, Debug)]
struct Api {
    addr: SocketAddr,
}

impl Api {
    async fn send(&self, method: &str, path: &str, body: &[u8]) -> io::Result<Response> {
        let request = http_request(method, path, "application/json", body);
        Connection::open(self.addr).await?.send(&request).await
    }

    async fn json(&self, path: &str) -> io::Result<Value> {
        let response = self.send("GET", path, b"").await?;
        if response.status != 200 {
            return Err(io::Error::other(format!(
                "GET {path} answered {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            )));
        }
        serde_json::from_slice(&response.body).map_err(io::Error::other)
    }

    async fn create(&self, body: &Value) -> io::Result<()> {
        let response = self
            .send("POST", "/v1/topics", body.to_string().as_bytes())
            .await?;
        if response.status == 201 {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "creating {body} answered {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            )))
        }
    }

    async fn create_topic(&self, name: &str, partitions: u32) -> io::Result<()> {
        self.create(&serde_json::json!({"name": name, "partitions": partitions}))
            .await
    }

    /// Creates `name` as a child of `parent` (inheriting its partition
    /// count), with a delay if `delay_ms` is not 0.
    async fn create_child(&self, name: &str, parent: &str, delay_ms: u64) -> io::Result<()> {
        let mut body = serde_json::json!({"name": name, "parent": parent});
        if delay_ms > 0 {
            body["fanout_delay_ms"] = delay_ms.into();
        }
        self.create(&body).await
    }

    async fn delete_topic(&self, name: &str) -> io::Result<()> {
        let response = self
            .send("DELETE", &format!("/v1/topics/{name}"), b"")
            .await?;
        match response.status {
            204 | 404 => Ok(()),
            status => Err(io::Error::other(format!(
                "deleting {name} answered {status}: {}",
                String::from_utf8_lossy(&response.body)
            ))),
        }
    }

    /// Waits until every partition of `parent` and of each child is
    /// assigned and the listing reports a running cursor of every child on
    /// every parent partition (`lag_complete`).
    async fn wait_running(&self, parent: &str, children: &[String]) -> io::Result<()> {
        let deadline = Instant::now() + SETUP_MAX;
        for topic in std::iter::once(parent).chain(children.iter().map(String::as_str)) {
            narad_bench::cluster::wait_assigned(self.addr, topic, PARTITIONS as usize).await?;
        }
        while Instant::now() < deadline {
            let listing = self.json(&format!("/v1/topics/{parent}/children")).await?;
            let listed = listing["children"].as_array().cloned().unwrap_or_default();
            let running = listed.len() == children.len()
                && listed.iter().all(|child| child["lag_complete"] == true);
            if running {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(io::Error::other(format!(
            "the cursors of {parent}'s children did not all report within {SETUP_MAX:?}"
        )))
    }

    /// The children's lag summed, and whether every cursor reported.
    async fn children_lag(&self, parent: &str) -> io::Result<(u64, bool)> {
        let listing = self.json(&format!("/v1/topics/{parent}/children")).await?;
        let children = listing["children"].as_array().cloned().unwrap_or_default();
        let lag = children
            .iter()
            .filter_map(|child| child["lag_messages"].as_u64())
            .sum();
        let complete = children.iter().all(|child| child["lag_complete"] == true);
        Ok((lag, complete))
    }

    /// The sum of `topic`'s partitions' high watermarks.
    async fn records(&self, topic: &str) -> io::Result<u64> {
        let described = self.json(&format!("/v1/topics/{topic}")).await?;
        Ok(described["partition_stats"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|stats| stats["high_watermark"].as_u64())
            .sum())
    }

    async fn metrics(&self) -> io::Result<String> {
        let response = self.send("GET", "/metrics", b"").await?;
        Ok(String::from_utf8_lossy(&response.body).into_owned())
    }

    /// Records committed into `parent`'s children so far, and the
    /// records the node accepted and has not yet committed to a partition.
    async fn committed(&self, parent: &str) -> io::Result<(f64, f64)> {
        let text = self.metrics().await?;
        let committed = metric_sum(
            &text,
            "narad_fanout_committed_total",
            &format!("parent=\"{parent}\""),
        );
        Ok((committed, dispatch_backlog(&text).unwrap_or(0.0)))
    }

    /// Waits until the dispatcher has committed everything accepted;
    /// false if `deadline` came first.
    async fn wait_backlog_empty(&self, deadline: Instant) -> io::Result<bool> {
        while Instant::now() < deadline {
            let text = self.metrics().await?;
            if dispatch_backlog(&text) == Some(0.0) {
                return Ok(true);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(false)
    }
}

/// `narad_ingress_dispatch_backlog_records` in a metrics text.
fn dispatch_backlog(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix("narad_ingress_dispatch_backlog_records "))
        .and_then(|value| value.trim().parse::<f64>().ok())
}

/// The series of metric `name` whose labels contain `label`.
fn metric_values<'a>(
    text: &'a str,
    name: &'a str,
    label: &'a str,
) -> impl Iterator<Item = f64> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?.strip_prefix('{')?;
        let (labels, value) = rest.split_once('}')?;
        labels
            .split(',')
            .any(|pair| pair == label)
            .then(|| value.trim().parse::<f64>().ok())?
    })
}

fn metric_sum(text: &str, name: &str, label: &str) -> f64 {
    metric_values(text, name, label).sum()
}

fn metric_max(text: &str, name: &str, label: &str) -> f64 {
    metric_values(text, name, label).fold(0.0, f64::max)
}

/// Lag samples of one phase: (seconds into the window, lag).
#[derive(Debug, Default)]
struct LagSamples {
    samples: Vec<(f64, f64)>,
}

impl LagSamples {
    fn push(&mut self, at: Duration, lag: u64) {
        self.samples.push((at.as_secs_f64(), lag as f64));
    }

    fn max(&self) -> u64 {
        self.samples
            .iter()
            .map(|&(_, lag)| lag as u64)
            .max()
            .unwrap_or(0)
    }

    /// The least-squares slope of lag over time, messages per second.
    fn slope_per_s(&self) -> f64 {
        let n = self.samples.len() as f64;
        if self.samples.len() < 2 {
            return 0.0;
        }
        let mean_t = self.samples.iter().map(|&(t, _)| t).sum::<f64>() / n;
        let mean_lag = self.samples.iter().map(|&(_, lag)| lag).sum::<f64>() / n;
        let covariance: f64 = self
            .samples
            .iter()
            .map(|&(t, lag)| (t - mean_t) * (lag - mean_lag))
            .sum();
        let variance: f64 = self
            .samples
            .iter()
            .map(|&(t, _)| (t - mean_t).powi(2))
            .sum();
        ratio(covariance, variance)
    }
}

/// The figures of one load: produce latencies of the measured window.
#[derive(Debug, Default)]
struct Produced {
    latencies: Latencies,
    refused: u64,
    first_refusal: Option<String>,
}

/// Producers sending one request back to back each, until stopped.
#[derive(Debug)]
struct Load {
    accepted: Arc<AtomicU64>,
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<io::Result<Produced>>>,
}

impl Load {
    async fn start(
        addr: SocketAddr,
        request: &Arc<Vec<u8>>,
        producers: usize,
        msgs_per_request: u64,
    ) -> io::Result<Self> {
        let accepted = Arc::new(AtomicU64::new(0));
        let measuring = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for _ in 0..producers {
            let mut connection = Connection::open(addr).await?;
            let (request, accepted, measuring, stop) = (
                Arc::clone(request),
                Arc::clone(&accepted),
                Arc::clone(&measuring),
                Arc::clone(&stop),
            );
            tasks.push(tokio::spawn(async move {
                let mut produced = Produced::default();
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    let response = connection.send(&request).await?;
                    let took = sent.elapsed();
                    let measured = measuring.load(Ordering::Relaxed);
                    if response.status == 202 {
                        accepted.fetch_add(msgs_per_request, Ordering::Relaxed);
                        if measured {
                            produced.latencies.record(took);
                        }
                    } else {
                        produced.refused += 1;
                        if produced.first_refusal.is_none() {
                            produced.first_refusal = Some(format!(
                                "{} {}",
                                response.status,
                                String::from_utf8_lossy(&response.body)
                            ));
                        }
                    }
                }
                io::Result::Ok(produced)
            }));
        }
        Ok(Self {
            accepted,
            measuring,
            stop,
            tasks,
        })
    }

    async fn stop(self) -> io::Result<Produced> {
        self.stop.store(true, Ordering::Relaxed);
        let mut total = Produced::default();
        for task in self.tasks {
            let produced = task.await.map_err(io::Error::other)??;
            total.latencies.merge(&produced.latencies);
            total.refused += produced.refused;
            if total.first_refusal.is_none() {
                total.first_refusal = produced.first_refusal;
            }
        }
        Ok(total)
    }
}

/// `producers` connections sending `request` back to back to `addr`: a
/// warmup, then `duration` measured.
async fn drive(
    addr: SocketAddr,
    request: &Arc<Vec<u8>>,
    producers: usize,
    msgs_per_request: u64,
    warmup: Duration,
    duration: Duration,
) -> io::Result<Rate> {
    let load = Load::start(addr, request, producers, msgs_per_request).await?;
    tokio::time::sleep(warmup).await;
    let before = load.accepted.load(Ordering::Relaxed);
    load.measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    let accepted = load.accepted.load(Ordering::Relaxed) - before;
    let elapsed = started.elapsed();
    let produced = load.stop().await?;
    Ok(Rate {
        accepted,
        elapsed,
        latencies: produced.latencies,
    })
}

#[derive(Debug)]
struct Rate {
    accepted: u64,
    elapsed: Duration,
    latencies: Latencies,
}

impl Rate {
    fn msgs_per_s(&self) -> f64 {
        ratio(self.accepted as f64, self.elapsed.as_secs_f64())
    }
}

/// Which topic a consumer reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Parent,
    Child,
}

/// What happened to each message `i` of a paced phase: when it was sent
/// and answered, and when each side first saw it. Times are µs; 0 means
/// not (yet).
#[derive(Debug)]
struct Ledger {
    /// The monotonic clock's origin of the `*_mono` times.
    origin: Instant,
    sent_mono: Vec<AtomicU64>,
    sent_wall: Vec<AtomicU64>,
    /// When the `202` was read (wall clock); 0 for any other answer.
    acked_wall: Vec<AtomicU64>,
    child_mono: Vec<AtomicU64>,
    child_wall: Vec<AtomicU64>,
    parent_mono: Vec<AtomicU64>,
    child_seen: AtomicU64,
    child_duplicates: AtomicU64,
    parent_duplicates: AtomicU64,
}

impl Ledger {
    fn new(messages: u64) -> Self {
        let slots = || (0..messages).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        Self {
            origin: Instant::now(),
            sent_mono: slots(),
            sent_wall: slots(),
            acked_wall: slots(),
            child_mono: slots(),
            child_wall: slots(),
            parent_mono: slots(),
            child_seen: AtomicU64::new(0),
            child_duplicates: AtomicU64::new(0),
            parent_duplicates: AtomicU64::new(0),
        }
    }

    fn len(&self) -> usize {
        self.sent_mono.len()
    }

    fn mono_us(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    fn nonzero(slot: &AtomicU64) -> Option<u64> {
        Some(slot.load(Ordering::Acquire)).filter(|&value| value > 0)
    }

    fn sent_mono(&self, index: usize) -> Option<u64> {
        Self::nonzero(&self.sent_mono[index])
    }

    fn sent_wall(&self, index: usize) -> Option<u64> {
        Self::nonzero(&self.sent_wall[index])
    }

    fn acked_wall(&self, index: usize) -> Option<u64> {
        Self::nonzero(&self.acked_wall[index])
    }

    fn was_accepted(&self, index: usize) -> bool {
        self.acked_wall(index).is_some()
    }

    fn accepted(&self) -> u64 {
        (0..self.len()).filter(|&i| self.was_accepted(i)).count() as u64
    }

    fn seen_mono(&self, side: Side, index: usize) -> Option<u64> {
        match side {
            Side::Child => Self::nonzero(&self.child_mono[index]),
            Side::Parent => Self::nonzero(&self.parent_mono[index]),
        }
    }

    fn seen_wall(&self, side: Side, index: usize) -> Option<u64> {
        match side {
            Side::Child => Self::nonzero(&self.child_wall[index]),
            Side::Parent => None,
        }
    }

    fn duplicates(&self, side: Side) -> u64 {
        match side {
            Side::Child => self.child_duplicates.load(Ordering::Relaxed),
            Side::Parent => self.parent_duplicates.load(Ordering::Relaxed),
        }
    }

    /// Notes that `side` saw message `index` at these times.
    fn saw(&self, side: Side, index: usize, mono: u64, wall: u64) {
        if index >= self.len() {
            return;
        }
        let (slot, duplicates) = match side {
            Side::Child => (&self.child_mono[index], &self.child_duplicates),
            Side::Parent => (&self.parent_mono[index], &self.parent_duplicates),
        };
        if slot
            .compare_exchange(0, mono, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            duplicates.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if side == Side::Child {
            self.child_wall[index].store(wall, Ordering::Release);
            self.child_seen.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits until the child has seen every accepted message, or `max`.
    async fn wait_child_seen(&self, max: Duration) {
        let deadline = Instant::now() + max;
        let accepted = self.accepted();
        while Instant::now() < deadline {
            if self.child_seen.load(Ordering::Relaxed) >= accepted {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Sends `ledger.len()` single produces to `topic` at `rate` per second
/// over [`PACED_PRODUCERS`] connections, message `i` carrying `i` as its
/// payload and due at `i / rate`; how late each send was.
async fn paced_produce(
    addr: SocketAddr,
    topic: &str,
    rate: u64,
    ledger: &Arc<Ledger>,
) -> io::Result<Latencies> {
    let total = ledger.len() as u64;
    let interval = Duration::from_secs(1) / u32::try_from(rate).unwrap_or(u32::MAX);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now() + Duration::from_millis(100);
    let mut producers = Vec::new();
    for _ in 0..PACED_PRODUCERS {
        let mut connection = Connection::open(addr).await?;
        let (next, ledger, topic) = (Arc::clone(&next), Arc::clone(ledger), topic.to_owned());
        producers.push(tokio::spawn(async move {
            let mut lateness = Latencies::new();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= total {
                    return io::Result::Ok(lateness);
                }
                let due = started + interval * u32::try_from(index).unwrap_or(u32::MAX);
                tokio::time::sleep_until(due.into()).await;
                lateness.record(Instant::now().saturating_duration_since(due));
                let slot = usize::try_from(index).unwrap_or(usize::MAX);
                let request = http_request(
                    "POST",
                    &format!("/v1/topics/{topic}/produce"),
                    "application/json",
                    index.to_string().as_bytes(),
                );
                ledger.sent_wall[slot].store(wall_us(), Ordering::Release);
                ledger.sent_mono[slot].store(ledger.mono_us(), Ordering::Release);
                let response = connection.send(&request).await?;
                if response.status == 202 {
                    ledger.acked_wall[slot].store(wall_us(), Ordering::Release);
                }
            }
        }));
    }
    let mut lateness = Latencies::new();
    for producer in producers {
        lateness.merge(&producer.await.map_err(io::Error::other)??);
    }
    Ok(lateness)
}

/// A consumer of `topic` (long-poll batch consumes, each acked in one
/// request) noting in `ledger` when `side` saw each message, until `stop`.
async fn spawn_consumer(
    addr: SocketAddr,
    topic: &str,
    side: Side,
    ledger: &Arc<Ledger>,
    stop: &Arc<AtomicBool>,
) -> io::Result<tokio::task::JoinHandle<io::Result<()>>> {
    let mut connection = Connection::open(addr).await?;
    let consume = with_client_header(http_request(
        "GET",
        &format!("/v1/topics/{topic}/consume?max={CONSUME_MAX}&wait=500ms"),
        "application/json",
        b"",
    ));
    let ack_path = format!("/v1/topics/{topic}/ack");
    let (ledger, stop) = (Arc::clone(ledger), Arc::clone(stop));
    Ok(tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let response = connection.send(&consume).await?;
            let (mono, wall) = (ledger.mono_us(), wall_us());
            if response.status != 200 {
                continue;
            }
            let body: Value = serde_json::from_slice(&response.body).map_err(io::Error::other)?;
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            let mut handles = Vec::with_capacity(messages.len());
            for message in &messages {
                if let Some(index) = message["payload"].as_u64() {
                    ledger.saw(
                        side,
                        usize::try_from(index).unwrap_or(usize::MAX),
                        mono,
                        wall,
                    );
                }
                handles.push(message["receipt_handle"].clone());
            }
            if !handles.is_empty() {
                let body = serde_json::json!({ "receipt_handles": handles }).to_string();
                let ack = with_client_header(http_request(
                    "POST",
                    &ack_path,
                    "application/json",
                    body.as_bytes(),
                ));
                connection.send(&ack).await?;
            }
        }
        io::Result::Ok(())
    }))
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

/// The earliest commit time (Unix ms) of each message of `topic` in the
/// partition logs under `data_dir`, by the index its payload carries. The
/// node must have stopped: opening a log recovers it.
fn commit_times(data_dir: &Path, topic: &str) -> io::Result<HashMap<u64, u64>> {
    let disk = Arc::new(PortableDisk::new(1)?);
    let mut times = HashMap::new();
    for partition in 0..PARTITIONS {
        let dir = data_dir
            .join("topics")
            .join(topic)
            .join(format!("p{partition:05}"));
        if !dir.is_dir() {
            continue;
        }
        let log = PartitionLog::open(
            disk.clone(),
            &dir,
            LogConfig::default(),
            Arc::new(narad_clock::SystemClock::new()),
        )
        .map_err(|error| io::Error::other(format!("{}: {error}", dir.display())))?;
        let high_watermark = log.high_watermark();
        let mut from = 0;
        while from < high_watermark {
            let batch = log
                .read(from, high_watermark, ReadLimits::default())
                .map_err(|error| io::Error::other(format!("{}: {error}", dir.display())))?;
            if batch.next_offset <= from {
                break;
            }
            for entry in batch.entries {
                if let ReadEntry::Record(record) = entry
                    && let Some(index) = std::str::from_utf8(&record.payload)
                        .ok()
                        .and_then(|text| text.parse::<u64>().ok())
                {
                    let time = times.entry(index).or_insert(record.committed_at_ms);
                    *time = (*time).min(record.committed_at_ms);
                }
            }
            from = batch.next_offset;
        }
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_set_durations_and_unknown_ones_are_refused() {
        let args = |text: &str| {
            text.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let options = Options::parse(args("--phase-secs 2 --children 0,4 --delay-rate 50"))
            .unwrap()
            .unwrap();
        assert_eq!(options.phase, Duration::from_secs(2));
        assert_eq!(options.children, [0, 4]);
        assert_eq!(options.delay_rate, 50);
        assert!(Options::parse(args("--help")).unwrap().is_none());
        assert!(Options::parse(args("--phase 2")).is_err());
        assert!(Options::parse(args("--phase-secs")).is_err());
    }

    #[test]
    fn metric_series_are_picked_by_name_and_label() {
        let text = "narad_fanout_committed_total{parent=\"fan4\",child=\"a\"} 10\n\
                    narad_fanout_committed_total{parent=\"fan4\",child=\"b\"} 5\n\
                    narad_fanout_committed_total{parent=\"fan40\",child=\"c\"} 7\n\
                    narad_fanout_committed_total_x{parent=\"fan4\",child=\"c\"} 7\n";
        let label = "parent=\"fan4\"";
        assert_eq!(
            metric_sum(text, "narad_fanout_committed_total", label),
            15.0
        );
        assert_eq!(
            metric_max(text, "narad_fanout_committed_total", label),
            10.0
        );
    }

    #[test]
    fn a_lag_that_grows_has_a_positive_slope_and_a_flat_one_none() {
        let mut growing = LagSamples::default();
        let mut flat = LagSamples::default();
        for step in 0..8u32 {
            let at = Duration::from_millis(250) * step;
            growing.push(at, u64::from(step) * 100);
            flat.push(at, 500);
        }
        assert!((growing.slope_per_s() - 400.0).abs() < 1e-6);
        assert_eq!(flat.slope_per_s(), 0.0);
        assert_eq!(growing.max(), 700);
    }

    #[test]
    fn signed_percentiles_use_the_nearest_rank() {
        let mut samples = vec![-5, 10, 3, 7];
        assert_eq!(signed_percentile(&mut samples, 0.0), -5.0);
        assert_eq!(signed_percentile(&mut samples, 0.5), 3.0);
        assert_eq!(signed_percentile(&mut samples, 1.0), 10.0);
        assert_eq!(signed_percentile(&mut [], 0.5), 0.0);
    }

    #[test]
    fn a_message_seen_twice_counts_once_and_as_a_duplicate() {
        let ledger = Ledger::new(3);
        ledger.saw(Side::Child, 1, 10, 20);
        ledger.saw(Side::Child, 1, 30, 40);
        ledger.saw(Side::Child, 7, 30, 40);
        assert_eq!(ledger.seen_mono(Side::Child, 1), Some(10));
        assert_eq!(ledger.seen_wall(Side::Child, 1), Some(20));
        assert_eq!(ledger.duplicates(Side::Child), 1);
        assert_eq!(ledger.seen_mono(Side::Parent, 1), None);
    }
}
