//! `remote-bench`: remote children (spec §1.10 and §4, issue 39) between
//! two local clusters, next to a same-run local child.
//!
//! Two `narad dev --secure` processes: a *source* and a *target*, the
//! target behind an HTTPS front in this process ([`TlsFront`], rustls with
//! a CA made at start), so the source ships over TLS as it would to another
//! site. The source has a remote for the front, pinned to its CA, with a
//! replicator user of the target that may produce to the target topics.
//!
//! One parent of [`PARTITIONS`] partitions on the source is pre-filled
//! with `--records` keyed records of about [`MESSAGE_BYTES`] bytes; every
//! phase then times a *drain* of those same records:
//! - **local child**: an ordinary local child cannot be attached to records
//!   already in its parent (a child copies from its attach point on), so
//!   the local child is linked before the pre-fill with a delay of
//!   `--local-delay-secs`, the source is killed once every record is
//!   committed, and restarted after the last record is due. The restarted
//!   cursors then find the whole backlog due and copy it as fast as they
//!   can. The drain runs from the restart's `/readyz` to the last record in
//!   the child;
//! - **remote child, 1, 2 and 8 lanes** (`--lanes`): a remote child
//!   attached with `from: earliest` to a target topic of its own (8
//!   partitions), after the pre-fill. The drain runs from the attach's
//!   `201` to the last record in the target.
//!
//! Arrivals are sampled every [`SAMPLE`] (the summed high watermarks of the
//! child or target topic). Per phase: `drain_per_s` (records over the whole
//! drain), `steady_per_s` (the middle 80 %: from 10 % to 90 % of the
//! records, interpolated between samples, so the cursors' start and the
//! last slab's tail count in neither phase), `first_seen_ms`, and the CPU
//! over the drain of the source and target processes (`/proc`, every
//! thread) and of the front's threads in this process, each and summed,
//! per shipped record. The source's busiest thread and its share of a core
//! name the floor when there is one.
//!
//! Same-run baselines: the target's own ingest of the same records sent by
//! this process straight to its plain HTTP port in requests of
//! [`INGEST_BATCH`] records (each with an `idempotency_key`, as the shipper
//! sends them) over 1, 2 and 8 connections, the ceiling a lane count could
//! reach through a free network; and the local child above.
//!
//! Target (issue 39): 8 lanes drain at ≥ 0.5 × the local child's steady
//! rate of the same run. Writes `target/bench/remote.json` and
//! `remote.png`.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use narad_bench::cpu::{cpu_seconds, thread_cpu_by_name, thread_cpu_growth};
use narad_bench::http::{Connection, Response, basic_authorization, http_request_with_headers};
use narad_bench::node::{DevNode, DevOptions, load_average, narad_binary};
use narad_bench::report::Report;
use narad_bench::tls_front::{self, TlsFront};
use narad_bench::verdict::{self, Verdict};
use rand::distr::Alphanumeric;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

/// Approximate bytes of every record's payload (a JSON object).
const MESSAGE_BYTES: usize = 256;
/// Partitions of the parent, the local child and every target topic.
const PARTITIONS: u32 = 8;
/// Distinct keys of the records (lanes go by key hash).
const KEYS: u64 = 4_096;
/// Records per batch produce of the pre-fill.
const PREFILL_BATCH: u64 = 500;
/// Connections of the pre-fill.
const PREFILL_PRODUCERS: u64 = 4;
/// Records per request of the ingest baseline: the shipper's chunk limit.
const INGEST_BATCH: u64 = 1_000;
/// How often arrivals are sampled.
const SAMPLE: Duration = Duration::from_millis(50);
/// How long setup steps may take (partitions assigned, a 429 retried).
const SETUP_MAX: Duration = Duration::from_secs(60);
/// The share of the local child's steady rate 8 lanes must reach.
const TARGET_L8_TO_LOCAL: f64 = 0.5;
const SOURCE_PASSWORD: &str = "bench-source-admin-password-0123";
const TARGET_PASSWORD: &str = "bench-target-admin-password-0123";
const REPLICATOR_PASSWORD: &str = "bench-replicator-password-012345";
const CLUSTER_SECRET: &str = "bench-cluster-secret-0123456789ab";
const PARENT: &str = "orders";
const LOCAL_CHILD: &str = "orders-local";
const REMOTE: &str = "bench-target";

/// Flags.
#[derive(Clone, Debug)]
struct Options {
    records: u64,
    lanes: Vec<u32>,
    ingest_connections: Vec<u64>,
    local_delay: Duration,
    drain_max: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            records: 200_000,
            lanes: vec![1, 2, 8],
            ingest_connections: vec![1, 2, 8],
            local_delay: Duration::from_secs(15),
            drain_max: Duration::from_secs(300),
        }
    }
}

const USAGE: &str = "remote-bench [--records 200000] [--lanes 1,2,8|none] [--ingest 1,2,8] \
[--local-delay-secs 15] [--drain-max-secs 300]";

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
            let list = || {
                value
                    .split(',')
                    .map(|item| item.trim().parse::<u64>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| io::Error::other(format!("{flag} {value:?}: not a list")))
            };
            match flag.as_str() {
                "--records" => options.records = number()?.max(PREFILL_BATCH),
                "--lanes" if value == "none" => options.lanes = Vec::new(),
                "--lanes" => {
                    options.lanes = list()?
                        .into_iter()
                        .map(|lanes| u32::try_from(lanes.clamp(1, 8)).unwrap_or(1))
                        .collect();
                }
                "--ingest" => options.ingest_connections = list()?,
                "--local-delay-secs" => options.local_delay = Duration::from_secs(number()?),
                "--drain-max-secs" => options.drain_max = Duration::from_secs(number()?),
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
    let scratch = narad_bench::bench_dir()?.join(format!("remote-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch)?;
    let mut report = Report::new("remote");
    report.note("load_average_at_start", &load_average());
    report.note(
        "method",
        "two narad dev --secure processes on the same 2 cores; the target behind a rustls HTTPS \
         front in this process; one parent pre-filled with the records, then each phase drains \
         them: the local child (linked with a delay before the pre-fill; the source is restarted \
         once every record is due, and the drain runs from /readyz) and one remote child per lane \
         count (attached from earliest to a target topic of its own; the drain runs from the \
         attach's 201). steady_per_s is the middle 80 % of the records, drain_per_s the whole \
         drain; CPU is each process's /proc time over the drain, the front's from its threads",
    );
    report.note("records", &options.records.to_string());
    report.note("message_bytes", &MESSAGE_BYTES.to_string());
    report.note("partitions", &PARTITIONS.to_string());
    report.note("keys", &KEYS.to_string());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(measure(&scratch, &options, &mut report))?;
    report.note("load_average_at_end", &load_average());
    let verdicts = summarize(&mut report, &options);
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

async fn measure(scratch: &Path, options: &Options, report: &mut Report) -> io::Result<()> {
    let binary = narad_binary();
    let secret = ("NARAD_CLUSTER_SECRET".to_owned(), CLUSTER_SECRET.to_owned());
    let target_options = DevOptions {
        admin_password: Some(TARGET_PASSWORD.to_owned()),
        env: vec![secret.clone()],
        port: None,
        wal_dir: None,
    };
    let target = DevNode::start_with(&binary, &scratch.join("target"), &target_options).await?;
    let front = TlsFront::start(target.addr.port())?;
    let mut source_options = DevOptions {
        admin_password: Some(SOURCE_PASSWORD.to_owned()),
        env: vec![
            secret,
            ("NARAD_REMOTES_ALLOW_LOOPBACK".to_owned(), "true".to_owned()),
            // The bench sends the replicator's password to the source over
            // loopback, on this machine alone.
            (
                "NARAD_REMOTES_API_HOP_ENCRYPTED".to_owned(),
                "true".to_owned(),
            ),
            (
                "NARAD_REMOTES_ALLOWED_PORTS".to_owned(),
                front.port.to_string(),
            ),
        ],
        port: None,
        wal_dir: None,
    };
    let source_dir = scratch.join("source");
    let mut source = DevNode::start_with(&binary, &source_dir, &source_options).await?;
    source_options.port = Some(source.addr.port());
    let target_api = Api::new(target.addr, "admin", TARGET_PASSWORD);
    let source_api = Api::new(source.addr, "admin", SOURCE_PASSWORD);

    // The target: one topic per lane count, one for the ingest baseline,
    // and a replicator allowed to produce to them.
    let copies: Vec<String> = options.lanes.iter().map(|l| copy_topic(*l)).collect();
    for topic in copies.iter().map(String::as_str).chain(["ingest"]) {
        target_api
            .create_topic(&json!({"name": topic, "partitions": PARTITIONS}))
            .await?;
    }
    target_api
        .expect(
            "POST",
            "/v1/users",
            &json!({"username": "replicator", "password": REPLICATOR_PASSWORD,
                    "grants": [{"action": "produce",
                                "patterns": [format!("{PARENT}-copy-*")]}]}),
            201,
        )
        .await?;
    ingest_baselines(&target, &target_api, options, report).await?;

    // The source: the remote (when a lane count is asked for), the
    // parent, its delayed local child.
    if !options.lanes.is_empty() {
        source_api
            .expect(
                "POST",
                "/v1/remotes",
                &json!({"name": REMOTE, "url": front.url(), "username": "replicator",
                    "password": REPLICATOR_PASSWORD, "ca_pem": front.ca_pem}),
                201,
            )
            .await?;
    }
    source_api
        .create_topic(&json!({"name": PARENT, "partitions": PARTITIONS}))
        .await?;
    let delay_ms = u64::try_from(options.local_delay.as_millis()).unwrap_or(u64::MAX);
    source_api
        .create_topic(&json!({"name": LOCAL_CHILD, "parent": PARENT,
                              "fanout_delay_ms": delay_ms}))
        .await?;
    for topic in [PARENT, LOCAL_CHILD] {
        source_api.wait_assigned(topic).await?;
    }
    let prefill_started = Instant::now();
    prefill(&source_api, options.records).await?;
    source_api.wait_backlog_empty().await?;
    let prefill_s = prefill_started.elapsed().as_secs_f64();
    report.set(
        "prefill_records_per_s",
        ratio(options.records as f64, prefill_s),
    );
    let copied_early = source_api.records(LOCAL_CHILD).await?;
    report.set("local_copied_before_restart", copied_early as f64);
    eprintln!(
        "pre-fill: {} records in {prefill_s:.1} s; {copied_early} copied before the restart",
        options.records
    );

    // The local child: restart once every record is due.
    source.stop();
    let due_at = prefill_started + Duration::from_secs_f64(prefill_s) + options.local_delay;
    tokio::time::sleep_until((due_at + Duration::from_secs(1)).into()).await;
    source = DevNode::start_with(&binary, &source_dir, &source_options).await?;
    let local = drain(
        &source_api,
        LOCAL_CHILD,
        Some(copied_early),
        options,
        &Processes::new(&source, &target),
    )
    .await?;
    local.record(report, "local", options.records);

    for &lanes in &options.lanes {
        let child = format!("{PARENT}-dr{lanes}");
        let body = json!({"child": child, "remote": REMOTE, "remote_topic": copy_topic(lanes),
                          "from": "earliest", "lanes": lanes});
        let processes = Processes::new(&source, &target);
        source_api
            .expect_retrying("POST", &format!("/v1/topics/{PARENT}/children"), &body, 201)
            .await?;
        let shipped = drain(&target_api, &copy_topic(lanes), None, options, &processes).await?;
        let prefix = format!("remote_l{lanes}");
        shipped.record(report, &prefix, options.records);
        let listing = source_api
            .json(&format!("/v1/topics/{PARENT}/children"))
            .await?;
        let state = listing["children"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|entry| entry["name"] == child.as_str())
            .map_or_else(|| "missing".to_owned(), |entry| entry["state"].to_string());
        report.note(&format!("{prefix}_state_after"), &state);
    }
    drop(front);
    source.stop();
    target.stop();
    Ok(())
}

/// The target topic of the remote child with `lanes` lanes.
fn copy_topic(lanes: u32) -> String {
    format!("{PARENT}-copy-l{lanes}")
}

/// Record `index`: keyed by one of [`KEYS`] keys, a JSON payload of about
/// [`MESSAGE_BYTES`] bytes whose filler is random letters and digits seeded
/// by the index (so a compressed request saves what varied data would, not
/// what a run of one byte would).
fn message(index: u64, idempotency: bool) -> Value {
    let filler: String = StdRng::seed_from_u64(index)
        .sample_iter(Alphanumeric)
        .take(MESSAGE_BYTES - 32)
        .map(char::from)
        .collect();
    let mut message = json!({
        "key": format!("k{}", index % KEYS),
        "payload": {"i": index, "fill": filler},
    });
    if idempotency {
        message["idempotency_key"] = format!("ingest-{index}").into();
    }
    message
}

/// A batch produce body of records `range`.
fn batch_body(range: std::ops::Range<u64>, idempotency: bool) -> Vec<u8> {
    let messages: Vec<Value> = range.map(|index| message(index, idempotency)).collect();
    json!({ "messages": messages }).to_string().into_bytes()
}

/// Produces records `0..records` to the parent over [`PREFILL_PRODUCERS`]
/// connections.
async fn prefill(api: &Api, records: u64) -> io::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..PREFILL_PRODUCERS {
        let (api, next) = (api.clone(), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            let mut connection = Connection::open(api.addr).await?;
            loop {
                let first = next.fetch_add(PREFILL_BATCH, Ordering::Relaxed);
                if first >= records {
                    return io::Result::Ok(());
                }
                let body = batch_body(first..(first + PREFILL_BATCH).min(records), false);
                let request =
                    api.request("POST", &format!("/v1/topics/{PARENT}/produce/batch"), &body);
                let response = connection.send(&request).await?;
                if response.status != 202 {
                    return Err(refused("pre-fill", &response));
                }
            }
        }));
    }
    for task in tasks {
        task.await.map_err(io::Error::other)??;
    }
    Ok(())
}

/// The target's own ingest of the same records, straight to its plain
/// port in requests of [`INGEST_BATCH`], at each connection count.
async fn ingest_baselines(
    target: &DevNode,
    api: &Api,
    options: &Options,
    report: &mut Report,
) -> io::Result<()> {
    api.wait_assigned("ingest").await?;
    let pid = target.pid().to_string();
    let mut offset = 0u64;
    for &connections in &options.ingest_connections {
        let records = options.records;
        let next = Arc::new(AtomicU64::new(0));
        let cpu_before = cpu_seconds(&pid);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..connections.max(1) {
            let (api, next) = (api.clone(), Arc::clone(&next));
            tasks.push(tokio::spawn(async move {
                let mut connection = Connection::open(api.addr).await?;
                loop {
                    let first = next.fetch_add(INGEST_BATCH, Ordering::Relaxed);
                    if first >= records {
                        return io::Result::Ok(());
                    }
                    let last = (first + INGEST_BATCH).min(records);
                    let body = batch_body(offset + first..offset + last, true);
                    let request = api.request("POST", "/v1/topics/ingest/produce/batch", &body);
                    let response = connection.send(&request).await?;
                    if response.status != 202 {
                        return Err(refused("ingest", &response));
                    }
                }
            }));
        }
        for task in tasks {
            task.await.map_err(io::Error::other)??;
        }
        let seconds = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(&pid) - cpu_before;
        offset += records;
        let prefix = format!("baseline_ingest_c{connections}");
        report.set(
            &format!("{prefix}_records_per_s"),
            ratio(records as f64, seconds),
        );
        report.set(
            &format!("{prefix}_target_cpu_us_per_record"),
            ratio(cpu * 1e6, records as f64),
        );
        eprintln!(
            "baseline: target ingest at c{connections}: {:.0} records/s, {:.1} µs target CPU a \
             record",
            ratio(records as f64, seconds),
            ratio(cpu * 1e6, records as f64)
        );
    }
    Ok(())
}

/// The processes whose CPU a drain counts.
#[derive(Debug)]
struct Processes {
    source: String,
    target: String,
}

impl Processes {
    fn new(source: &DevNode, target: &DevNode) -> Self {
        Self {
            source: source.pid().to_string(),
            target: target.pid().to_string(),
        }
    }
}

/// CPU seconds of the drain's processes and threads at one moment.
#[derive(Debug)]
struct CpuMark {
    source: f64,
    target: f64,
    front: f64,
    source_threads: BTreeMap<String, f64>,
}

impl CpuMark {
    fn take(processes: &Processes) -> Self {
        Self {
            source: cpu_seconds(&processes.source),
            target: cpu_seconds(&processes.target),
            front: thread_cpu_by_name("self")
                .get(tls_front::THREAD_NAME)
                .copied()
                .unwrap_or(0.0),
            source_threads: thread_cpu_by_name(&processes.source),
        }
    }
}

/// One drain: arrivals over time and the CPU it took.
#[derive(Debug)]
struct Drain {
    /// (seconds since the start, records arrived since the start).
    samples: Vec<(f64, f64)>,
    /// Records there at the start (a local child may have copied a few
    /// before the restart).
    already: u64,
    complete: bool,
    seconds: f64,
    source_cpu: f64,
    target_cpu: f64,
    front_cpu: f64,
    /// The source's busiest thread over the drain and its CPU seconds.
    busiest: (String, f64),
}

/// Samples `topic`'s records through `api` from now until it holds
/// `options.records`, or `options.drain_max`. `already` is what it held
/// at the start when known (a node just restarted may not report every
/// partition yet); otherwise it is read now.
async fn drain(
    api: &Api,
    topic: &str,
    already: Option<u64>,
    options: &Options,
    processes: &Processes,
) -> io::Result<Drain> {
    let before = CpuMark::take(processes);
    let started = Instant::now();
    let already = match already {
        Some(count) => count,
        None => api.records(topic).await?,
    };
    let wanted = options.records.saturating_sub(already);
    let mut samples = vec![(0.0, 0.0)];
    let mut complete = wanted == 0;
    let mut arrived = 0;
    while !complete && started.elapsed() < options.drain_max {
        tokio::time::sleep(SAMPLE).await;
        // A partition that does not report yet (a node just restarted, a
        // topic still loading) leaves the sample out rather than count 0.
        let Ok(count) = api.records(topic).await else {
            continue;
        };
        arrived = arrived.max(count.saturating_sub(already));
        samples.push((started.elapsed().as_secs_f64(), arrived as f64));
        complete = arrived >= wanted;
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = CpuMark::take(processes);
    let busiest = thread_cpu_growth(&before.source_threads, &after.source_threads)
        .into_iter()
        .fold((String::new(), 0.0), |best, (name, cpu)| {
            if cpu > best.1 { (name, cpu) } else { best }
        });
    Ok(Drain {
        samples,
        already,
        complete,
        seconds,
        source_cpu: after.source - before.source,
        target_cpu: after.target - before.target,
        front_cpu: after.front - before.front,
        busiest,
    })
}

impl Drain {
    /// When `count` records had arrived, interpolated between samples.
    fn time_of(&self, count: f64) -> Option<f64> {
        self.samples.windows(2).find_map(|pair| {
            let ((t0, c0), (t1, c1)) = (pair[0], pair[1]);
            (c1 >= count && c1 > c0).then(|| t0 + (t1 - t0) * (count - c0).max(0.0) / (c1 - c0))
        })
    }

    /// The first sample that saw a record (the first record came at most
    /// [`SAMPLE`] before it); the drain's length when none did.
    fn first_seen_s(&self) -> f64 {
        self.samples
            .iter()
            .find(|(_, count)| *count > 0.0)
            .map_or(self.seconds, |(at, _)| *at)
    }

    fn arrived(&self) -> f64 {
        self.samples.last().map_or(0.0, |(_, count)| *count)
    }

    /// Records over the middle 80 % of the drain per second.
    fn steady_per_s(&self) -> f64 {
        let total = self.arrived();
        match (self.time_of(total * 0.1), self.time_of(total * 0.9)) {
            (Some(from), Some(to)) => ratio(total * 0.8, to - from),
            _ => 0.0,
        }
    }

    fn record(&self, report: &mut Report, prefix: &str, records: u64) {
        let arrived = self.arrived();
        let last = self.time_of(arrived).unwrap_or(self.seconds);
        let set = |report: &mut Report, key: &str, value: f64| {
            report.set(&format!("{prefix}_{key}"), value);
        };
        let per_record = |cpu: f64| ratio(cpu * 1e6, arrived);
        let total_cpu = self.source_cpu + self.target_cpu + self.front_cpu;
        set(report, "steady_per_s", self.steady_per_s());
        set(report, "drain_per_s", ratio(arrived, last));
        set(report, "drain_s", last);
        set(report, "first_seen_ms", self.first_seen_s() * 1_000.0);
        set(report, "records", arrived);
        set(report, "records_before_start", self.already as f64);
        set(report, "complete", f64::from(u8::from(self.complete)));
        set(
            report,
            "source_cpu_us_per_record",
            per_record(self.source_cpu),
        );
        set(
            report,
            "target_cpu_us_per_record",
            per_record(self.target_cpu),
        );
        set(
            report,
            "front_cpu_us_per_record",
            per_record(self.front_cpu),
        );
        set(report, "cpu_us_per_record", per_record(total_cpu));
        set(report, "source_cores", ratio(self.source_cpu, last));
        set(report, "target_cores", ratio(self.target_cpu, last));
        set(report, "front_cores", ratio(self.front_cpu, last));
        set(
            report,
            "source_busiest_thread_cores",
            ratio(self.busiest.1, last),
        );
        report.note(&format!("{prefix}_source_busiest_thread"), &self.busiest.0);
        eprintln!(
            "{prefix}: {arrived:.0} of {records} in {last:.2} s: steady {:.0}/s, drain {:.0}/s; \
             CPU µs a record: source {:.1}, target {:.1}, front {:.1}, sum {:.1}; source's \
             busiest thread {} at {:.2} cores",
            self.steady_per_s(),
            ratio(arrived, last),
            per_record(self.source_cpu),
            per_record(self.target_cpu),
            per_record(self.front_cpu),
            per_record(total_cpu),
            self.busiest.0,
            ratio(self.busiest.1, last),
        );
    }
}

/// Ratios to the local child, the verdict and the charts.
fn summarize(report: &mut Report, options: &Options) -> Vec<Verdict> {
    let measured = report.clone();
    let figure = |key: &str| measured.get(key).unwrap_or(0.0);
    let local = figure("local_steady_per_s");
    let local_drain = figure("local_drain_per_s");
    let mut rates = vec![("local child".to_owned(), local)];
    let mut cpu = vec![("local child".to_owned(), figure("local_cpu_us_per_record"))];
    for &lanes in &options.lanes {
        let prefix = format!("remote_l{lanes}");
        let steady = figure(&format!("{prefix}_steady_per_s"));
        report.set(&format!("ratio_{prefix}_to_local"), ratio(steady, local));
        report.set(
            &format!("ratio_{prefix}_drain_to_local_drain"),
            ratio(figure(&format!("{prefix}_drain_per_s")), local_drain),
        );
        rates.push((format!("remote, {lanes} lanes"), steady));
        cpu.push((
            format!("remote, {lanes} lanes"),
            figure(&format!("{prefix}_cpu_us_per_record")),
        ));
    }
    for &connections in &options.ingest_connections {
        rates.push((
            format!("target ingest, {connections} conn."),
            figure(&format!("baseline_ingest_c{connections}_records_per_s")),
        ));
    }
    let verdicts = vec![Verdict::at_least(
        "remote_l8_to_local",
        "remote_l8_steady_per_s / local_steady_per_s vs 0.5",
        ratio(figure("remote_l8_steady_per_s"), local),
        TARGET_L8_TO_LOCAL,
    )];
    verdict::record_all(report, &verdicts);
    let rate_bars: Vec<(&str, f64)> = rates.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    let cpu_bars: Vec<(&str, f64)> = cpu.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    report.bars(
        "records per second, middle 80 % of the drain",
        "records/s",
        &rate_bars,
    );
    report.bars(
        "CPU per record, source + target + HTTPS front",
        "µs",
        &cpu_bars,
    );
    verdicts
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

fn refused(what: &str, response: &Response) -> io::Error {
    io::Error::other(format!(
        "{what} answered {}: {}",
        response.status,
        String::from_utf8_lossy(&response.body)
    ))
}

/// A node's HTTP API as the admin, one request per fresh connection
/// (setup and sampling; loads open connections of their own).
#[derive(Clone, Debug)]
struct Api {
    addr: SocketAddr,
    authorization: Arc<str>,
}

impl Api {
    fn new(addr: SocketAddr, user: &str, password: &str) -> Self {
        Self {
            addr,
            authorization: basic_authorization(user, password).into(),
        }
    }

    fn request(&self, method: &str, path: &str, body: &[u8]) -> Vec<u8> {
        http_request_with_headers(
            method,
            path,
            "application/json",
            &[&self.authorization],
            body,
        )
    }

    async fn send(&self, method: &str, path: &str, body: &Value) -> io::Result<Response> {
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let request = self.request(method, path, &body);
        Connection::open(self.addr).await?.send(&request).await
    }

    async fn expect(
        &self,
        method: &str,
        path: &str,
        body: &Value,
        status: u16,
    ) -> io::Result<Value> {
        let response = self.send(method, path, body).await?;
        if response.status != status {
            return Err(refused(&format!("{method} {path}"), &response));
        }
        Ok(serde_json::from_slice(&response.body).unwrap_or(Value::Null))
    }

    /// As [`Self::expect`], sending again after a `429` (an attach soon
    /// after a check of the same remote) for up to [`SETUP_MAX`].
    async fn expect_retrying(
        &self,
        method: &str,
        path: &str,
        body: &Value,
        status: u16,
    ) -> io::Result<Value> {
        let deadline = Instant::now() + SETUP_MAX;
        loop {
            let response = self.send(method, path, body).await?;
            if response.status == 429 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
            if response.status != status {
                return Err(refused(&format!("{method} {path}"), &response));
            }
            return Ok(serde_json::from_slice(&response.body).unwrap_or(Value::Null));
        }
    }

    async fn json(&self, path: &str) -> io::Result<Value> {
        self.expect("GET", path, &Value::Null, 200).await
    }

    async fn create_topic(&self, body: &Value) -> io::Result<()> {
        self.expect("POST", "/v1/topics", body, 201).await.map(drop)
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

    /// Waits until every partition of `topic` is assigned.
    async fn wait_assigned(&self, topic: &str) -> io::Result<()> {
        let deadline = Instant::now() + SETUP_MAX;
        while Instant::now() < deadline {
            let described = self.json(&format!("/v1/topics/{topic}")).await?;
            let stats = described["partition_stats"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if stats.len() == PARTITIONS as usize
                && stats.iter().all(|entry| entry["status"] == "ok")
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(io::Error::other(format!(
            "{topic}'s partitions were not all assigned in time"
        )))
    }

    /// Waits until the node has committed every record it accepted.
    async fn wait_backlog_empty(&self) -> io::Result<()> {
        let deadline = Instant::now() + SETUP_MAX;
        while Instant::now() < deadline {
            let response = self.send("GET", "/metrics", &Value::Null).await?;
            let text = String::from_utf8_lossy(&response.body);
            let backlog = text
                .lines()
                .find_map(|line| line.strip_prefix("narad_ingress_dispatch_backlog_records "))
                .and_then(|value| value.trim().parse::<f64>().ok());
            if backlog == Some(0.0) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(io::Error::other(
            "the dispatch backlog did not empty in time",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn flags_set_records_lanes_and_refuse_unknown_ones() {
        let options = Options::parse(args("--records 5000 --lanes 1,9 --ingest 2"))
            .unwrap()
            .unwrap();
        assert_eq!(options.records, 5_000);
        assert_eq!(options.lanes, [1, 8], "lanes are 1 to 8");
        assert_eq!(options.ingest_connections, [2]);
        let local_only = Options::parse(args("--lanes none")).unwrap().unwrap();
        assert!(local_only.lanes.is_empty());
        assert!(Options::parse(args("--help")).unwrap().is_none());
        assert!(Options::parse(args("--lanes x")).is_err());
        assert!(Options::parse(args("--records")).is_err());
        assert!(Options::parse(args("--recs 5")).is_err());
    }

    fn drain_of(samples: &[(f64, f64)]) -> Drain {
        Drain {
            samples: samples.to_vec(),
            already: 0,
            complete: true,
            seconds: samples.last().map_or(0.0, |(t, _)| *t),
            source_cpu: 0.0,
            target_cpu: 0.0,
            front_cpu: 0.0,
            busiest: (String::new(), 0.0),
        }
    }

    #[test]
    fn the_steady_rate_leaves_out_the_start_and_the_tail() {
        // Nothing for 1 s (a cursor starting), then 1,000 a second for
        // 10 s, then the last 10 records a second later.
        let mut samples = vec![(0.0, 0.0), (1.0, 0.0)];
        for second in 1..=10 {
            samples.push((1.0 + f64::from(second), f64::from(second) * 1_000.0));
        }
        samples.push((12.0, 10_010.0));
        let drain = drain_of(&samples);
        assert!(
            (drain.steady_per_s() - 1_000.0).abs() < 20.0,
            "{}",
            drain.steady_per_s()
        );
        assert_eq!(drain.time_of(1.0), Some(1.001));
        assert_eq!(drain.first_seen_s(), 2.0);
        assert_eq!(drain.time_of(10_010.0), Some(12.0));
        assert_eq!(drain_of(&[(0.0, 0.0)]).steady_per_s(), 0.0);
    }

    #[test]
    fn records_are_keyed_sized_and_differ() {
        let first = message(1, false);
        let second = message(2, true);
        assert_eq!(first["key"], "k1");
        assert_eq!(second["idempotency_key"], "ingest-2");
        assert!(first.get("idempotency_key").is_none());
        let size = first["payload"].to_string().len();
        assert!(
            (MESSAGE_BYTES - 16..=MESSAGE_BYTES + 16).contains(&size),
            "{size}"
        );
        assert_ne!(first["payload"]["fill"], second["payload"]["fill"]);
        let body: Value = serde_json::from_slice(&batch_body(0..3, false)).unwrap();
        assert_eq!(body["messages"].as_array().unwrap().len(), 3);
    }
}
