//! `narad bench <topic>`: a load test of a running server through the
//! API. Workers produce `--count` messages of `--size` bytes (singly or in
//! batches), timing every request; with `--consume` they then consume and
//! ack them. Only `202` counts as a produced message; every other answer
//! is counted by its status. Latency percentiles go to stdout, and a PNG
//! chart to `--out`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::ProgressBar;
use narad_bench::report::Report;
use serde_json::{Value, json};

use super::http::{Body, encode};
use super::output::say;
use super::pubsub::{
    BATCH_MESSAGES_MAX, MESSAGE_BYTES_MAX, batch_body, check_size, produce_batch, produce_one,
    progress_bar,
};
use super::{Api, Connection, Failure, Outcome};

/// How long `--consume` goes on without receiving anything before it stops
/// short of the produced count (other consumers may have taken some).
const CONSUME_IDLE_MAX: Duration = Duration::from_secs(5);
/// The long-poll of each benchmark consume.
const CONSUME_WAIT: &str = "1s";
/// Flags of `narad bench <topic>`.
#[derive(Debug, Parser)]
#[command(name = "narad bench", about = "Load-test a topic on a running server")]
pub(crate) struct TopicBenchArgs {
    /// The topic (it must exist).
    #[arg(required_unless_present = "topic_flag", conflicts_with = "topic_flag")]
    topic: Option<String>,
    /// The topic, for one named like a benchmark (produce, flow, ...).
    #[arg(long = "topic")]
    topic_flag: Option<String>,
    /// Messages to produce.
    #[arg(long, default_value_t = 10_000)]
    count: u64,
    /// Bytes per message (1 to 1 MiB, the server's limit).
    #[arg(long, default_value_t = 256, value_parser = parse_size)]
    size: usize,
    /// Concurrent workers (one connection each).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    workers: u16,
    /// Messages per batch produce (1..=1000) [default: single produces].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
    batch: Option<u16>,
    /// Then consume and ack the messages, timing that too.
    #[arg(long)]
    consume: bool,
    /// Write a PNG chart of the latencies here.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    connection: Connection,
}

impl TopicBenchArgs {
    fn topic(&self) -> &str {
        self.topic.as_deref().unwrap_or_default()
    }
}

/// `--size`: a message size the server stores, so that no request of the
/// run is refused for its size.
fn parse_size(text: &str) -> Result<usize, String> {
    let bytes: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of bytes"))?;
    match check_size(&format!("a message of --size {bytes}"), bytes) {
        Ok(()) => Ok(bytes),
        Err(Failure::Usage(text) | Failure::Refused(text) | Failure::Unreachable(text)) => {
            Err(text)
        }
        Err(Failure::OutputClosed) => Err(format!("1 to {MESSAGE_BYTES_MAX} bytes")),
    }
}

/// What one phase measured.
#[derive(Debug, Default)]
struct Phase {
    /// Request latencies in microseconds.
    latencies_us: Vec<u64>,
    /// Answers by status; `0` for no answer.
    statuses: BTreeMap<u16, u64>,
    /// Messages that succeeded (produced with `202`, or consumed).
    messages: u64,
    /// Consumes that delivered nothing: a long poll that waited out its
    /// wait measures the server's patience, not a delivery, so it is in
    /// neither the latencies nor the rate.
    empty_polls: u64,
    /// From the phase's start to its end; for consume, to its last
    /// delivery, so the idle wait after the last message is not counted.
    elapsed: Duration,
}

impl Phase {
    fn merge(&mut self, other: Self) {
        self.latencies_us.extend(other.latencies_us);
        for (status, count) in other.statuses {
            *self.statuses.entry(status).or_default() += count;
        }
        self.messages += other.messages;
        self.empty_polls += other.empty_polls;
        self.elapsed = self.elapsed.max(other.elapsed);
    }

    /// Counts one consume (with its ack) that answered `status` with
    /// `delivered` messages, took `latency` and ended `ended` after the
    /// phase began. Only a delivery is a latency sample and moves the
    /// phase's end; an empty long poll or a refusal is counted by status.
    fn record_consume(&mut self, status: u16, delivered: u64, latency: Duration, ended: Duration) {
        *self.statuses.entry(status).or_default() += 1;
        if delivered == 0 {
            if matches!(status, 200 | 204) {
                self.empty_polls += 1;
            }
            return;
        }
        self.latencies_us.push(latency.as_micros() as u64);
        self.messages += delivered;
        self.elapsed = self.elapsed.max(ended);
    }

    /// Messages a second over the phase.
    fn rate(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The latency at `quantile` (0..=1) in milliseconds, nearest rank.
    fn percentile_ms(&self, sorted_us: &[u64], quantile: f64) -> f64 {
        if sorted_us.is_empty() {
            return 0.0;
        }
        let rank = ((quantile * sorted_us.len() as f64).ceil() as usize).clamp(1, sorted_us.len());
        sorted_us[rank - 1] as f64 / 1000.0
    }

    /// p50, p95, p99 and max in milliseconds.
    fn summary_ms(&self) -> [(&'static str, f64); 4] {
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        [
            ("p50", self.percentile_ms(&sorted, 0.50)),
            ("p95", self.percentile_ms(&sorted, 0.95)),
            ("p99", self.percentile_ms(&sorted, 0.99)),
            ("max", self.percentile_ms(&sorted, 1.0)),
        ]
    }

    fn print(&self, name: &str) -> Outcome {
        let empty = if self.empty_polls > 0 {
            format!(", {} empty polls", self.empty_polls)
        } else {
            String::new()
        };
        say!(
            "{name}: {} messages in {:.2}s ({:.0} msg/s), {} requests{empty}",
            self.messages,
            self.elapsed.as_secs_f64(),
            self.rate(),
            self.latencies_us.len()
        )?;
        let figures: Vec<String> = self
            .summary_ms()
            .iter()
            .map(|(label, ms)| format!("{label} {ms:.2}ms"))
            .collect();
        say!("{name} latency: {}", figures.join("  "))?;
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(status, count)| match status {
                0 => format!("no answer: {count}"),
                status => format!("{status}: {count}"),
            })
            .collect();
        say!("{name} statuses: {}", statuses.join("  "))
    }

    /// The phase as one JSON object.
    fn json(&self) -> Value {
        let latency: serde_json::Map<String, Value> = self
            .summary_ms()
            .iter()
            .map(|(label, ms)| ((*label).to_owned(), json!(ms)))
            .collect();
        let statuses: serde_json::Map<String, Value> = self
            .statuses
            .iter()
            .map(|(status, count)| (status.to_string(), json!(count)))
            .collect();
        json!({
            "messages": self.messages,
            "seconds": self.elapsed.as_secs_f64(),
            "messages_per_second": self.rate().round(),
            "requests": self.latencies_us.len(),
            "empty_polls": self.empty_polls,
            "latency_ms": latency,
            "statuses": statuses,
        })
    }
}

/// Parses `narad bench <topic> ...` (the words after `bench`) and runs it.
pub(crate) fn run_from(words: Vec<std::ffi::OsString>) -> Outcome {
    let mut args = match TopicBenchArgs::try_parse_from(
        std::iter::once(std::ffi::OsString::from("narad bench")).chain(words),
    ) {
        Ok(args) => args,
        Err(error) => error.exit(),
    };
    args.connection =
        std::mem::take(&mut args.connection).with_environment(|name| std::env::var(name).ok());
    if let Some(topic) = args.topic_flag.take() {
        args.topic = Some(topic);
    }
    run(&args)
}

fn run(args: &TopicBenchArgs) -> Outcome {
    let api = args.connection.api()?;
    // One look first, so a missing topic or a refused user fails plainly
    // before any worker starts.
    let what = format!("benchmark topic {}", args.topic());
    let answer = api.send("GET", &format!("/v1/topics/{}", encode(args.topic())), None)?;
    api.expect(answer, &[200], &what)
        .map_err(|failure| match failure {
            Failure::Refused(text) => Failure::Refused(format!(
                "{text}. (`narad bench NAME` runs a named benchmark only for {}; `--topic NAME` \
                 benchmarks a topic of that name)",
                crate::bench::benchmark_names().join(", ")
            )),
            other => other,
        })?;
    let json = args.connection.json;
    let payload = payload(args.size);
    let produced = produce_phase(&api, args, &payload);
    if !json {
        produced.print("produce")?;
    }
    let consumed = if args.consume {
        let phase = consume_phase(&api, args, produced.messages);
        if !json {
            phase.print("consume")?;
        }
        Some(phase)
    } else {
        None
    };
    if let Some(out) = &args.out {
        chart(out, &produced, consumed.as_ref())
            .map_err(|e| Failure::Usage(format!("--out {}: {e}", out.display())))?;
        if !json {
            say!("chart written to {}", out.display())?;
        }
    }
    if json {
        let mut report = json!({ "topic": args.topic(), "produce": produced.json() });
        if let Some(consumed) = &consumed {
            report["consume"] = consumed.json();
        }
        if let Some(out) = &args.out {
            report["chart"] = json!(out.display().to_string());
        }
        say!("{report}")?;
    }
    if produced.messages < args.count {
        return Err(Failure::Refused(format!(
            "only {} of {} messages were accepted with 202; see the statuses above",
            produced.messages, args.count
        )));
    }
    Ok(())
}

/// A message of `size` bytes; a JSON string when it fits, so a batch
/// carries it as written.
fn payload(size: usize) -> Vec<u8> {
    if size >= 2 {
        let mut bytes = vec![b'x'; size];
        bytes[0] = b'"';
        bytes[size - 1] = b'"';
        bytes
    } else {
        vec![b'x'; size.max(1)]
    }
}

/// How many of `count` messages worker `index` of `workers` sends.
fn share(count: u64, workers: u64, index: u64) -> u64 {
    count / workers + u64::from(index < count % workers)
}

fn produce_phase(api: &Api, args: &TopicBenchArgs, payload: &[u8]) -> Phase {
    let progress = progress_bar(Some(args.count));
    let workers = u64::from(args.workers);
    let batch = args
        .batch
        .map_or(1, u64::from)
        .min(BATCH_MESSAGES_MAX as u64);
    let started = Instant::now();
    let merged = Arc::new(Mutex::new(Phase::default()));
    std::thread::scope(|scope| {
        for index in 0..workers {
            let (merged, progress) = (Arc::clone(&merged), progress.clone());
            scope.spawn(move || {
                let phase = produce_worker(
                    api,
                    args,
                    payload,
                    share(args.count, workers, index),
                    batch,
                    &progress,
                );
                if let Ok(mut merged) = merged.lock() {
                    merged.merge(phase);
                }
            });
        }
    });
    progress.finish_and_clear();
    let mut phase = std::mem::take(&mut *merged.lock().unwrap_or_else(|e| e.into_inner()));
    phase.elapsed = started.elapsed();
    phase
}

fn produce_worker(
    api: &Api,
    args: &TopicBenchArgs,
    payload: &[u8],
    mut left: u64,
    batch: u64,
    progress: &ProgressBar,
) -> Phase {
    let mut phase = Phase::default();
    let full_batch = args
        .batch
        .map(|_| batch_body(&vec![payload.to_vec(); batch as usize], None, None));
    while left > 0 {
        let take = left.min(batch);
        let started = Instant::now();
        let answer = match &full_batch {
            Some(body) if take == batch => produce_batch(api, args.topic(), body),
            Some(_) => {
                let body = batch_body(&vec![payload.to_vec(); take as usize], None, None);
                produce_batch(api, args.topic(), &body)
            }
            None => produce_one(api, args.topic(), None, None, payload),
        };
        phase
            .latencies_us
            .push(started.elapsed().as_micros() as u64);
        let status = answer.map_or(0, |answer| answer.status);
        *phase.statuses.entry(status).or_default() += 1;
        if status == 202 {
            phase.messages += take;
        }
        progress.inc(take);
        left -= take;
    }
    phase
}

fn consume_phase(api: &Api, args: &TopicBenchArgs, target: u64) -> Phase {
    let started = Instant::now();
    let remaining = Arc::new(Mutex::new(target));
    let merged = Arc::new(Mutex::new(Phase::default()));
    std::thread::scope(|scope| {
        for _ in 0..args.workers {
            let (merged, remaining) = (Arc::clone(&merged), Arc::clone(&remaining));
            scope.spawn(move || {
                let phase = consume_worker(api, args.topic(), &remaining, started);
                if let Ok(mut merged) = merged.lock() {
                    merged.merge(phase);
                }
            });
        }
    });
    std::mem::take(&mut *merged.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Consumes and batch-acks until `remaining` reaches 0 or nothing came for
/// [`CONSUME_IDLE_MAX`]; each timed request is a consume plus its ack.
fn consume_worker(api: &Api, topic: &str, remaining: &Mutex<u64>, phase_start: Instant) -> Phase {
    let mut phase = Phase::default();
    let topic = encode(topic);
    let mut last = Instant::now();
    loop {
        let want = remaining.lock().map_or(0, |left| (*left).min(100));
        if want == 0 || last.elapsed() > CONSUME_IDLE_MAX {
            return phase;
        }
        let started = Instant::now();
        let path = format!("/v1/topics/{topic}/consume?wait={CONSUME_WAIT}&max={want}");
        let answer = api.send("GET", &path, None);
        let status = answer.as_ref().map_or(0, |answer| answer.status);
        let handles: Vec<Value> = answer
            .ok()
            .filter(|answer| answer.status == 200)
            .and_then(|answer| answer.json().ok())
            .and_then(|body| body.get("messages").cloned())
            .and_then(|messages| messages.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|message| message.get("receipt_handle").cloned())
            .collect();
        if !handles.is_empty() {
            let body = json!({ "receipt_handles": handles });
            let _ = api.send(
                "POST",
                &format!("/v1/topics/{topic}/ack"),
                Some(Body::Json(&body)),
            );
            if let Ok(mut left) = remaining.lock() {
                *left = left.saturating_sub(handles.len() as u64);
            }
            last = Instant::now();
        }
        phase.record_consume(
            status,
            handles.len() as u64,
            started.elapsed(),
            phase_start.elapsed(),
        );
    }
}

/// Draws the latency percentiles of each phase as horizontal bars, with
/// the benchmarks' own chart writer.
fn chart(path: &Path, produced: &Phase, consumed: Option<&Phase>) -> Result<(), String> {
    let mut rows: Vec<(String, f64)> = Vec::new();
    for (name, phase) in
        std::iter::once(("produce", produced)).chain(consumed.map(|p| ("consume", p)))
    {
        for (label, ms) in phase.summary_ms() {
            rows.push((format!("{name} {label}"), ms));
        }
    }
    let bars: Vec<(&str, f64)> = rows
        .iter()
        .map(|(label, ms)| (label.as_str(), *ms))
        .collect();
    let mut report = Report::new("narad-bench-topic");
    report.bars("narad bench: request latency", "ms", &bars);
    report.draw(path).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_count() {
        let total: u64 = (0..7).map(|index| share(100, 7, index)).sum();
        assert_eq!(total, 100);
        assert_eq!(share(3, 8, 7), 0);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let phase = Phase {
            latencies_us: (1..=100).map(|ms| ms * 1000).collect(),
            ..Phase::default()
        };
        let summary = phase.summary_ms();
        assert_eq!(summary[0], ("p50", 50.0));
        assert_eq!(summary[1], ("p95", 95.0));
        assert_eq!(summary[2], ("p99", 99.0));
        assert_eq!(summary[3], ("max", 100.0));
    }

    #[test]
    fn empty_long_polls_count_in_neither_latency_nor_rate() {
        let mut phase = Phase::default();
        let ms = Duration::from_millis;
        phase.record_consume(200, 10, ms(2), ms(100));
        phase.record_consume(204, 0, ms(1000), ms(1100));
        phase.record_consume(200, 0, ms(1000), ms(2100));
        assert_eq!(phase.latencies_us, vec![2000]);
        assert_eq!((phase.messages, phase.empty_polls), (10, 2));
        assert_eq!(phase.elapsed, ms(100));
        assert_eq!(phase.rate().round(), 100.0);
        assert_eq!(phase.statuses.get(&204), Some(&1));
    }

    #[test]
    fn a_size_over_one_mib_is_refused() {
        assert_eq!(parse_size("1048576"), Ok(MESSAGE_BYTES_MAX));
        let refused = parse_size("1048577").expect_err("over 1 MiB");
        assert!(refused.contains("at most 1 MiB"), "{refused}");
        assert!(parse_size("0").is_err());
    }

    #[test]
    fn payloads_have_the_asked_size_and_are_json_when_they_can_be() {
        let payload = payload(16);
        assert_eq!(payload.len(), 16);
        assert!(serde_json::from_slice::<Value>(&payload).is_ok());
        assert_eq!(super::payload(1), b"x");
    }
}
