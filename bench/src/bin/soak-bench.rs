//! `soak-bench`: the production-shaped soak of spec §10 against one
//! `narad dev`, for a set duration (default ten minutes).
//!
//! Seven topics with the spec's partitions, rates and message sizes
//! ([`TOPICS`]): steady topics are produced one message per request at a
//! paced rate, `settlements-batch` in batch produces of [`BURST_BATCH`]
//! every five minutes, `config-changes` one message every nine minutes.
//! Producers wait for each `202`. Consumers long-poll batch consumes of up
//! to [`CONSUME_MAX`] and batch-ack what they get; on `webhooks-outbound`
//! (the topic the spec's "3% nack, 0.2% never ack" belongs to) 3% of
//! deliveries are nacked (redelivered at once) and 0.2% are dropped
//! without an answer (redelivered after the visibility timeout). Which
//! delivery gets which fate is a hash of the message id and its delivery
//! count, so a run is reproducible in its choices.
//!
//! Every payload carries a unique id, and a ledger in this process follows
//! each message: sent, produce answer, deliveries, successful ack. After
//! the load phase, consumers go on without faults (a drain of at most one
//! visibility timeout plus [`DRAIN_GRACE`]) until every `202`'d message is
//! acked. Then:
//! - `dup_after_ack`: deliveries of a message by a consume sent after an
//!   ack of that message was answered `204`. Must be 0.
//! - `never_delivered`: messages answered `202` and never delivered; and
//!   `never_acked`: answered `202` and never acked with a `204`. Must be 0.
//! - RSS of the narad process, sampled from `/proc/<pid>/status` every
//!   [`RSS_SAMPLE`]: first, last, max and a least-squares slope over the
//!   load phase after its first quarter (warm-up growth excluded), and one
//!   over its last half (`rss_slope_last_half_mib_per_min`).
//! - Delivery gaps: per topic, the longest time records waited for their
//!   first delivery while none was delivered (`max_delivery_gap_ms`, and
//!   `delivery_gap_max_ms_<topic>`): a stall of delivery while produce goes
//!   on shows here, not in a percentile.
//! - Acked-ahead sets: each topic's largest `narad_acked_ahead_size`,
//!   sampled every second ([`ahead`]), the seconds a partition spent at the
//!   cap, and whether the topic's longest gap fell in such a time
//!   (`delivery_gap_at_acked_ahead_cap_<topic>`): a partition at its cap
//!   hands out only its oldest unacked record (spec §3), so the records
//!   behind a dropped lease wait for its visibility timeout.
//! - Latencies: produce (request written to `202` read), delivery (produce
//!   request written to the message's first consume answer read: what a
//!   consumer waits), ack; overall and per [`WINDOW`] for the chart; the
//!   longest first delivery of each topic.
//!
//! `--max-acked-ahead N` creates the topics with that
//! `max_acked_ahead_per_partition` instead of the server's default (1,024).
//! `--scale F` multiplies every steady rate and the burst size (not the
//! nine-minute config change), keeping the ratios between topics; the plan
//! printed at start says what ran. Same-run baseline: 4 KiB write +
//! fdatasync on a preallocated file on the same disk.
//!
//! Writes `target/bench/soak.json` and `soak.png` (RSS and p99 over time);
//! exits 1 when a delivery check fails.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use narad_bench::baseline::{self, FileMode};
use narad_bench::cluster::wait_assigned;
use narad_bench::cpu::cpu_seconds;
use narad_bench::http::{Connection, Response};
use narad_bench::node::{DevNode, load_average, narad_binary};
use narad_bench::report::Report;

#[path = "soak-bench/ahead.rs"]
mod ahead;
use narad_bench::stats::Latencies;
use serde_json::Value;

/// How a topic's messages are produced.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Load {
    /// Messages per second, one per request, evenly paced.
    Steady(f64),
    /// `messages` every `every`, in batch produces of [`BURST_BATCH`],
    /// the first burst at [`BURST_FIRST`].
    Burst { messages: usize, every: Duration },
    /// One message every `every`, the first at [`PERIODIC_FIRST`].
    Periodic(Duration),
}

/// One topic of the soak.
#[derive(Clone, Copy, Debug, PartialEq)]
struct TopicShape {
    name: &'static str,
    partitions: u32,
    load: Load,
    message_bytes: usize,
    /// Whether its consumers nack [`NACK_PER_MILLE`] and drop
    /// [`DROP_PER_MILLE`] of deliveries.
    faults: bool,
}

/// Spec §10's production-shaped soak. The spec gives no size for
/// `payments-captured` (it takes its sibling's 420 B) and no burst size for
/// `settlements-batch` (1,000 messages every 5 minutes, about 3.3/s, keeps
/// the total near the spec's ~1,000 msg/s).
const TOPICS: [TopicShape; 7] = [
    TopicShape {
        name: "payments-authorized",
        partitions: 12,
        load: Load::Steady(400.0),
        message_bytes: 420,
        faults: false,
    },
    TopicShape {
        name: "payments-captured",
        partitions: 12,
        load: Load::Steady(250.0),
        message_bytes: 420,
        faults: false,
    },
    TopicShape {
        name: "webhooks-outbound",
        partitions: 6,
        load: Load::Steady(200.0),
        message_bytes: 1_100,
        faults: true,
    },
    TopicShape {
        name: "refunds-initiated",
        partitions: 3,
        load: Load::Steady(40.0),
        message_bytes: 640,
        faults: false,
    },
    TopicShape {
        name: "settlements-batch",
        partitions: 3,
        load: Load::Burst {
            messages: 1_000,
            every: Duration::from_secs(300),
        },
        message_bytes: 8_200,
        faults: false,
    },
    TopicShape {
        name: "audit-events",
        partitions: 6,
        load: Load::Steady(100.0),
        message_bytes: 300,
        faults: false,
    },
    TopicShape {
        name: "config-changes",
        partitions: 3,
        load: Load::Periodic(Duration::from_secs(540)),
        message_bytes: 220,
        faults: false,
    },
];

/// Per mille of deliveries nacked, and dropped unanswered, on a topic with
/// faults (spec §10: 3% and 0.2%).
const NACK_PER_MILLE: u64 = 30;
const DROP_PER_MILLE: u64 = 2;
/// When the first settlements burst and the first config change go out, so
/// a short run sees both.
const BURST_FIRST: Duration = Duration::from_secs(30);
const PERIODIC_FIRST: Duration = Duration::from_secs(5);
/// Messages per batch produce of a burst (the spec allows 1,000).
const BURST_BATCH: usize = 100;
/// Paced messages per second one producer connection is given; a topic
/// gets enough connections that a slow fsync does not hold its schedule.
const RATE_PER_PRODUCER: f64 = 50.0;
const PRODUCERS_MIN: usize = 2;
/// Messages per second one consumer connection is given.
const RATE_PER_CONSUMER: f64 = 100.0;
/// Consumers of the burst topic (a burst is 1,000 messages at once).
const BURST_CONSUMERS: usize = 2;
/// Most messages one consume asks for (the spec's `max` is 1..=100).
const CONSUME_MAX: usize = 20;
/// The long poll of every consume.
const CONSUME_WAIT: &str = "1s";
/// The spec's default visibility timeout.
const VISIBILITY_DEFAULT: Duration = Duration::from_secs(30);
/// How long the drain may run beyond one visibility timeout.
const DRAIN_GRACE: Duration = Duration::from_secs(30);
/// How often the drain checks whether every message is acked.
const DRAIN_POLL: Duration = Duration::from_millis(500);
/// How often the narad process's RSS is read.
const RSS_SAMPLE: Duration = Duration::from_secs(5);
/// The width of one latency window of the chart.
const WINDOW: Duration = Duration::from_secs(10);
/// The pause before a producer or consumer reconnects after a transport
/// error, and how many reconnects in a row it tries before giving up.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);
const RECONNECTS_MAX: u32 = 10;
const FDATASYNC_SAMPLES: usize = 500;
const CLIENT_HEADER: &str = "X-Narad-Client: soak-bench";

const USAGE: &str = "soak-bench [--duration 10m] [--scale 1.0] [--visibility-secs 30] \
[--drain-max-secs V+30] [--max-acked-ahead N]\n  --duration: load phase (\"90s\", \"3m\", \"1h\" or seconds); \
--scale: multiplies steady rates and the burst size";

/// The flags.
#[derive(Clone, Debug, PartialEq)]
struct Options {
    duration: Duration,
    scale: f64,
    visibility: Duration,
    drain_max: Option<Duration>,
    /// The topics' `max_acked_ahead_per_partition`; `None` leaves the
    /// server's default.
    max_acked_ahead: Option<u32>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(600),
            scale: 1.0,
            visibility: VISIBILITY_DEFAULT,
            drain_max: None,
            max_acked_ahead: None,
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
            let seconds = || {
                value
                    .parse::<u64>()
                    .map(Duration::from_secs)
                    .map_err(|_| bad())
            };
            match flag.as_str() {
                "--duration" => {
                    options.duration = narad_bench::parse_duration(&value).ok_or_else(bad)?;
                }
                "--scale" => {
                    options.scale = value
                        .parse::<f64>()
                        .ok()
                        .filter(|scale| scale.is_finite() && *scale > 0.0)
                        .ok_or_else(bad)?;
                }
                "--visibility-secs" => options.visibility = seconds()?,
                "--drain-max-secs" => options.drain_max = Some(seconds()?),
                "--max-acked-ahead" => {
                    let cap = value.parse::<u32>().ok().filter(|cap| *cap > 0);
                    options.max_acked_ahead = Some(cap.ok_or_else(bad)?);
                }
                _ => return Err(io::Error::other(format!("unknown flag {flag:?}; {USAGE}"))),
            }
        }
        if options.duration.is_zero() || options.visibility.is_zero() {
            return Err(io::Error::other(format!(
                "durations must be positive; {USAGE}"
            )));
        }
        Ok(Some(options))
    }

    fn drain_max(&self) -> Duration {
        self.drain_max.unwrap_or(self.visibility + DRAIN_GRACE)
    }

    /// The acked-ahead cap the topics run with.
    fn acked_ahead_cap(&self) -> u32 {
        self.max_acked_ahead.unwrap_or(ahead::CAP_DEFAULT)
    }
}

/// The topics with `scale` applied to steady rates and burst sizes.
fn scaled_topics(scale: f64) -> Vec<TopicShape> {
    TOPICS
        .iter()
        .map(|shape| TopicShape {
            load: match shape.load {
                Load::Steady(rate) => Load::Steady(rate * scale),
                Load::Burst { messages, every } => Load::Burst {
                    messages: ((messages as f64 * scale).round() as usize).max(1),
                    every,
                },
                periodic @ Load::Periodic(_) => periodic,
            },
            ..*shape
        })
        .collect()
}

/// One line per topic: what this run produces.
fn plan(topics: &[TopicShape], options: &Options) -> String {
    let mut text = format!(
        "soak for {} s at scale {} (steady rates and burst sizes x{}; the 9-minute config change \
         is not scaled), visibility timeout {} s, drain at most {} s, acked-ahead cap {}{}\n",
        options.duration.as_secs(),
        options.scale,
        options.scale,
        options.visibility.as_secs(),
        options.drain_max().as_secs(),
        options.acked_ahead_cap(),
        if options.max_acked_ahead.is_some() {
            ""
        } else {
            " (the server's default)"
        }
    );
    for shape in topics {
        let load = match shape.load {
            Load::Steady(rate) => format!("{rate:.1} msg/s"),
            Load::Burst { messages, every } => {
                format!("{messages} msgs every {} s", every.as_secs())
            }
            Load::Periodic(every) => format!("1 msg every {} s", every.as_secs()),
        };
        let faults = if shape.faults {
            ", 3% nacked, 0.2% dropped"
        } else {
            ""
        };
        text.push_str(&format!(
            "  {:<20} {:>2} partitions, {load}, {} B{faults}\n",
            shape.name, shape.partitions, shape.message_bytes
        ));
    }
    text
}

/// What a consumer does with one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Ack,
    Nack,
    /// Neither ack nor nack: the lease lapses after the visibility timeout.
    Drop,
}

/// The fate of delivery number `delivery` (1 = first) of message `id`:
/// a fixed hash, so a rerun makes the same choices for the same messages.
fn fate(id: u64, delivery: u32) -> Fate {
    match splitmix64(id ^ (u64::from(delivery) << 48)) % 1_000 {
        roll if roll < DROP_PER_MILLE => Fate::Drop,
        roll if roll < DROP_PER_MILLE + NACK_PER_MILLE => Fate::Nack,
        _ => Fate::Ack,
    }
}

fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A JSON payload of exactly `bytes` bytes (at least its fixed part)
/// carrying `id`.
fn payload(id: u64, bytes: usize) -> String {
    let head = format!("{{\"id\":{id},\"pad\":\"");
    let tail = "\"}";
    let pad = bytes.saturating_sub(head.len() + tail.len());
    format!("{head}{}{tail}", "x".repeat(pad))
}

/// The bytes of one request, with the client header batch consumes need.
fn request(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut bytes = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{CLIENT_HEADER}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// What the ledger knows of one message.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    topic: usize,
    /// When its produce request was written, µs after the start.
    sent_us: u64,
    /// The produce answer; `None` while pending or when none came.
    produce_status: Option<u16>,
    /// When that answer was read, µs after the start.
    answered_us: Option<u64>,
    deliveries: u32,
    first_delivery_us: Option<u64>,
    /// When its first `204` ack was read, µs after the start.
    acked_us: Option<u64>,
}

/// Latency samples of one [`WINDOW`].
#[derive(Debug, Default)]
struct Window {
    produce: Latencies,
    deliver: Latencies,
}

/// Counters of the whole run.
#[derive(Debug, Default)]
struct Counters {
    produce_requests: AtomicU64,
    produce_accepted: AtomicU64,
    produce_refused: AtomicU64,
    produce_unanswered: AtomicU64,
    deliveries: AtomicU64,
    redeliveries: AtomicU64,
    dup_after_ack: AtomicU64,
    /// Deliveries of an acked message by a consume sent before that ack
    /// was answered: a race the lease rules forbid as well.
    dup_after_ack_racing: AtomicU64,
    unknown_deliveries: AtomicU64,
    acked: AtomicU64,
    ack_refused: AtomicU64,
    nacked: AtomicU64,
    dropped: AtomicU64,
    consume_errors: AtomicU64,
    reconnects: AtomicU64,
}

fn add(counter: &AtomicU64, count: u64) {
    counter.fetch_add(count, Ordering::Relaxed);
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A task that panicked left whole entries behind (every update is one
    // assignment), so the figures stay usable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The state every task of the run shares.
#[derive(Debug)]
struct Soak {
    addr: SocketAddr,
    topics: Vec<TopicShape>,
    started: Instant,
    load: Duration,
    next_id: AtomicU64,
    ledger: Mutex<HashMap<u64, Entry>>,
    windows: Mutex<Vec<Window>>,
    ack_latency: Mutex<Latencies>,
    burst_latency: Mutex<Latencies>,
    lateness: Mutex<Latencies>,
    /// The longest first delivery of each topic, in µs, so a stall shows
    /// which topic it was on.
    deliver_max_us: Vec<AtomicU64>,
    counters: Counters,
    /// Set after the load phase: consumers stop nacking and dropping.
    draining: AtomicBool,
    stop: AtomicBool,
}

impl Soak {
    /// A run against `addr` whose load phase lasts `load` from now.
    fn new(addr: SocketAddr, topics: Vec<TopicShape>, load: Duration) -> Self {
        Self {
            addr,
            deliver_max_us: topics.iter().map(|_| AtomicU64::new(0)).collect(),
            topics,
            started: Instant::now(),
            load,
            next_id: AtomicU64::new(0),
            ledger: Mutex::new(HashMap::new()),
            windows: Mutex::new(Vec::new()),
            ack_latency: Mutex::new(Latencies::new()),
            burst_latency: Mutex::new(Latencies::new()),
            lateness: Mutex::new(Latencies::new()),
            counters: Counters::default(),
            draining: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        }
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn window(&self, at_us: u64) -> usize {
        usize::try_from(at_us / (WINDOW.as_micros() as u64)).unwrap_or(usize::MAX)
    }

    fn record_window(&self, at_us: u64, sample: Duration, deliver: bool) {
        let index = self.window(at_us);
        let mut windows = lock(&self.windows);
        if windows.len() <= index {
            windows.resize_with(index + 1, Window::default);
        }
        let window = &mut windows[index];
        if deliver {
            window.deliver.record(sample);
        } else {
            window.produce.record(sample);
        }
    }

    /// A new message id of `topic`, entered in the ledger as sent now.
    fn send(&self, topic: usize) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = Entry {
            topic,
            sent_us: self.now_us(),
            ..Entry::default()
        };
        lock(&self.ledger).insert(id, entry);
        id
    }

    fn produced(&self, ids: &[u64], status: Option<u16>) {
        let counter = match status {
            Some(202) => &self.counters.produce_accepted,
            Some(_) => &self.counters.produce_refused,
            None => &self.counters.produce_unanswered,
        };
        add(counter, ids.len() as u64);
        let now_us = self.now_us();
        let mut ledger = lock(&self.ledger);
        for id in ids {
            if let Some(entry) = ledger.get_mut(id) {
                entry.produce_status = status;
                entry.answered_us = Some(now_us);
            }
        }
    }

    /// Notes a delivery of `id` by a consume sent at `consume_sent_us`
    /// and answered at `now_us`; returns its delivery number (1 = first),
    /// or `None` for an id this run never sent.
    fn delivered(&self, id: u64, consume_sent_us: u64, now_us: u64) -> Option<u32> {
        add(&self.counters.deliveries, 1);
        let (deliveries, first_latency) = {
            let mut ledger = lock(&self.ledger);
            let Some(entry) = ledger.get_mut(&id) else {
                add(&self.counters.unknown_deliveries, 1);
                return None;
            };
            entry.deliveries += 1;
            if let Some(acked_us) = entry.acked_us {
                if consume_sent_us > acked_us {
                    add(&self.counters.dup_after_ack, 1);
                } else {
                    add(&self.counters.dup_after_ack_racing, 1);
                }
            }
            let first = entry.first_delivery_us.is_none();
            if first {
                entry.first_delivery_us = Some(now_us);
            }
            (
                entry.deliveries,
                first.then(|| (entry.topic, now_us.saturating_sub(entry.sent_us))),
            )
        };
        match first_latency {
            Some((topic, latency_us)) => {
                self.deliver_max_us[topic].fetch_max(latency_us, Ordering::Relaxed);
                self.record_window(now_us, Duration::from_micros(latency_us), true);
            }
            None => add(&self.counters.redeliveries, 1),
        }
        Some(deliveries)
    }

    fn acked(&self, id: u64, now_us: u64) {
        add(&self.counters.acked, 1);
        if let Some(entry) = lock(&self.ledger).get_mut(&id) {
            entry.acked_us.get_or_insert(now_us);
        }
    }

    /// Messages answered `202` and not yet acked.
    fn unacked(&self) -> usize {
        lock(&self.ledger)
            .values()
            .filter(|entry| entry.produce_status == Some(202) && entry.acked_us.is_none())
            .count()
    }
}

/// A connection that reopens itself after a transport error, up to
/// [`RECONNECTS_MAX`] times in a row.
#[derive(Debug)]
struct Link {
    addr: SocketAddr,
    connection: Connection,
}

impl Link {
    async fn open(addr: SocketAddr) -> io::Result<Self> {
        Ok(Self {
            addr,
            connection: Connection::open(addr).await?,
        })
    }

    /// Sends `bytes`; `Ok(None)` when no answer came (the connection was
    /// reopened for the next request).
    async fn send(&mut self, soak: &Soak, bytes: &[u8]) -> io::Result<Option<Response>> {
        match self.connection.send(bytes).await {
            Ok(response) => Ok(Some(response)),
            Err(_) => {
                self.reconnect(soak).await?;
                Ok(None)
            }
        }
    }

    async fn reconnect(&mut self, soak: &Soak) -> io::Result<()> {
        let mut last_error = None;
        for _ in 0..RECONNECTS_MAX {
            add(&soak.counters.reconnects, 1);
            tokio::time::sleep(RECONNECT_PAUSE).await;
            match Connection::open(self.addr).await {
                Ok(connection) => {
                    self.connection = connection;
                    return Ok(());
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("cannot reconnect")))
    }
}

/// Message `index` of a paced schedule is due at `first + index × interval`.
#[derive(Clone, Copy, Debug)]
struct Schedule {
    first: Duration,
    interval: Duration,
}

/// One producer connection of a paced single-message schedule; producers
/// of a topic share `next` (the next message index) and stop at the end
/// of the load phase.
async fn paced_producer(
    soak: Arc<Soak>,
    topic: usize,
    schedule: Schedule,
    next: Arc<AtomicU64>,
) -> io::Result<()> {
    let shape = soak.topics[topic];
    let path = format!("/v1/topics/{}/produce", shape.name);
    let mut link = Link::open(soak.addr).await?;
    loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        let offset = schedule.first + schedule.interval.mul_f64(index as f64);
        if offset >= soak.load {
            return Ok(());
        }
        let due = soak.started + offset;
        tokio::time::sleep_until(due.into()).await;
        lock(&soak.lateness).record(Instant::now().saturating_duration_since(due));
        let id = soak.send(topic);
        let bytes = request("POST", &path, payload(id, shape.message_bytes).as_bytes());
        add(&soak.counters.produce_requests, 1);
        let started = Instant::now();
        let response = link.send(&soak, &bytes).await?;
        let status = response.map(|response| response.status);
        if status == Some(202) {
            soak.record_window(soak.now_us(), started.elapsed(), false);
        }
        soak.produced(&[id], status);
    }
}

/// The bursts of a burst topic: `messages` every `every` from
/// [`BURST_FIRST`], each sent as batch produces of [`BURST_BATCH`].
async fn burst_producer(
    soak: Arc<Soak>,
    topic: usize,
    messages: usize,
    every: Duration,
) -> io::Result<()> {
    let shape = soak.topics[topic];
    let path = format!("/v1/topics/{}/produce/batch", shape.name);
    let mut link = Link::open(soak.addr).await?;
    let mut offset = BURST_FIRST;
    while offset < soak.load {
        tokio::time::sleep_until((soak.started + offset).into()).await;
        let mut left = messages;
        while left > 0 {
            let count = left.min(BURST_BATCH);
            left -= count;
            let ids: Vec<u64> = (0..count).map(|_| soak.send(topic)).collect();
            let body = ids
                .iter()
                .map(|id| format!("{{\"payload\":{}}}", payload(*id, shape.message_bytes)))
                .collect::<Vec<_>>()
                .join(",");
            let bytes = request(
                "POST",
                &path,
                format!("{{\"messages\":[{body}]}}").as_bytes(),
            );
            add(&soak.counters.produce_requests, 1);
            let started = Instant::now();
            let response = link.send(&soak, &bytes).await?;
            let status = response.map(|response| response.status);
            if status == Some(202) {
                lock(&soak.burst_latency).record(started.elapsed());
            }
            soak.produced(&ids, status);
        }
        offset += every;
    }
    Ok(())
}

/// A delivery waiting for its ack or nack: the message id and its handle.
type Held = (u64, Value);

/// One consumer connection of `topic`: batch consumes, then one batch ack
/// and one batch nack of what came, until the run stops.
async fn consumer(soak: Arc<Soak>, topic: usize) -> io::Result<()> {
    let shape = soak.topics[topic];
    let consume = request(
        "GET",
        &format!(
            "/v1/topics/{}/consume?max={CONSUME_MAX}&wait={CONSUME_WAIT}",
            shape.name
        ),
        b"",
    );
    let mut link = Link::open(soak.addr).await?;
    while !soak.stop.load(Ordering::Acquire) {
        let consume_sent_us = soak.now_us();
        let Some(response) = link.send(&soak, &consume).await? else {
            add(&soak.counters.consume_errors, 1);
            continue;
        };
        match response.status {
            200 => {}
            204 => continue,
            _ => {
                add(&soak.counters.consume_errors, 1);
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            }
        }
        let now_us = soak.now_us();
        let (mut acks, mut nacks) = (Vec::new(), Vec::new());
        for message in messages(&response.body) {
            let Some(id) = message["payload"]["id"].as_u64() else {
                add(&soak.counters.unknown_deliveries, 1);
                continue;
            };
            let Some(delivery) = soak.delivered(id, consume_sent_us, now_us) else {
                continue;
            };
            let handle = message["receipt_handle"].clone();
            let draining = soak.draining.load(Ordering::Acquire);
            let fate = if shape.faults && !draining {
                fate(id, delivery)
            } else {
                Fate::Ack
            };
            match fate {
                Fate::Ack => acks.push((id, handle)),
                Fate::Nack => nacks.push((id, handle)),
                Fate::Drop => add(&soak.counters.dropped, 1),
            }
        }
        settle(&soak, &mut link, shape.name, &acks, false).await?;
        settle(&soak, &mut link, shape.name, &nacks, true).await?;
    }
    Ok(())
}

/// The messages of a batch consume answer.
fn messages(body: &[u8]) -> Vec<Value> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut fields)) => match fields.remove("messages") {
            Some(Value::Array(messages)) => messages,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// One batch ack (or nack, `extend=0`) of `held`; each handle answered
/// `204` to an ack marks its message acked in the ledger.
async fn settle(
    soak: &Soak,
    link: &mut Link,
    topic: &str,
    held: &[Held],
    nack: bool,
) -> io::Result<()> {
    if held.is_empty() {
        return Ok(());
    }
    let handles: Vec<&Value> = held.iter().map(|(_, handle)| handle).collect();
    let body = serde_json::json!({ "receipt_handles": handles }).to_string();
    let query = if nack { "?extend=0" } else { "" };
    let bytes = request(
        "POST",
        &format!("/v1/topics/{topic}/ack{query}"),
        body.as_bytes(),
    );
    let started = Instant::now();
    let response = link.send(soak, &bytes).await?;
    let answered_us = soak.now_us();
    let statuses: Vec<u16> = response
        .filter(|response| response.status == 200)
        .and_then(|response| serde_json::from_slice::<Value>(&response.body).ok())
        .and_then(|body| {
            body["results"].as_array().map(|results| {
                results
                    .iter()
                    .map(|result| result["status"].as_u64().unwrap_or(0) as u16)
                    .collect()
            })
        })
        .unwrap_or_default();
    if nack {
        add(&soak.counters.nacked, held.len() as u64);
        return Ok(());
    }
    lock(&soak.ack_latency).record(started.elapsed());
    for (index, (id, _)) in held.iter().enumerate() {
        if statuses.get(index) == Some(&204) {
            soak.acked(*id, answered_us);
        } else {
            add(&soak.counters.ack_refused, 1);
        }
    }
    Ok(())
}

/// Samples the RSS of process `pid` every [`RSS_SAMPLE`] until the run
/// stops: (seconds since the start, MiB).
async fn rss_sampler(soak: Arc<Soak>, pid: u32) -> Vec<(f64, f64)> {
    let mut samples = Vec::new();
    while !soak.stop.load(Ordering::Acquire) {
        if let Some(kib) = rss_kib(pid) {
            samples.push((soak.started.elapsed().as_secs_f64(), kib as f64 / 1_024.0));
        }
        tokio::time::sleep(RSS_SAMPLE).await;
    }
    samples
}

/// `VmRSS` of `/proc/<pid>/status`, in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// A field of `/proc/<pid>/status` counted in kB (`field` with its colon),
/// in KiB.
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Least-squares slope of `points`, in y units per x unit; 0 with fewer
/// than two distinct x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mean_x = points.iter().map(|(x, _)| x).sum::<f64>() / n;
    let mean_y = points.iter().map(|(_, y)| y).sum::<f64>() / n;
    let covariance: f64 = points
        .iter()
        .map(|(x, y)| (x - mean_x) * (y - mean_y))
        .sum();
    let variance: f64 = points.iter().map(|(x, _)| (x - mean_x).powi(2)).sum();
    if variance == 0.0 {
        0.0
    } else {
        covariance / variance
    }
}

/// Creates every topic and waits until its partitions are assigned.
async fn create_topics(soak: &Soak, options: &Options) -> io::Result<()> {
    let mut connection = Connection::open(soak.addr).await?;
    let cap = options
        .max_acked_ahead
        .map(|cap| format!(",\"max_acked_ahead_per_partition\":{cap}"))
        .unwrap_or_default();
    for shape in &soak.topics {
        let body = format!(
            "{{\"name\":\"{}\",\"partitions\":{},\"visibility_timeout_ms\":{}{cap}}}",
            shape.name,
            shape.partitions,
            options.visibility.as_millis()
        );
        let response = connection
            .send(&request("POST", "/v1/topics", body.as_bytes()))
            .await?;
        if response.status != 201 {
            return Err(io::Error::other(format!(
                "creating {} answered {}: {}",
                shape.name,
                response.status,
                String::from_utf8_lossy(&response.body)
            )));
        }
        wait_assigned(soak.addr, shape.name, shape.partitions as usize).await?;
    }
    Ok(())
}

type Task = tokio::task::JoinHandle<io::Result<()>>;

/// Starts the producers of every topic.
fn spawn_producers(soak: &Arc<Soak>) -> Vec<Task> {
    let mut tasks = Vec::new();
    for (topic, shape) in soak.topics.iter().enumerate() {
        match shape.load {
            Load::Steady(rate) => {
                let schedule = Schedule {
                    first: Duration::ZERO,
                    interval: Duration::from_secs_f64(1.0 / rate),
                };
                let next = Arc::new(AtomicU64::new(0));
                let producers = ((rate / RATE_PER_PRODUCER).ceil() as usize).max(PRODUCERS_MIN);
                for _ in 0..producers {
                    let (soak, next) = (Arc::clone(soak), Arc::clone(&next));
                    tasks.push(tokio::spawn(paced_producer(soak, topic, schedule, next)));
                }
            }
            Load::Periodic(every) => {
                let schedule = Schedule {
                    first: PERIODIC_FIRST,
                    interval: every,
                };
                let next = Arc::new(AtomicU64::new(0));
                tasks.push(tokio::spawn(paced_producer(
                    Arc::clone(soak),
                    topic,
                    schedule,
                    next,
                )));
            }
            Load::Burst { messages, every } => {
                let soak = Arc::clone(soak);
                tasks.push(tokio::spawn(burst_producer(soak, topic, messages, every)));
            }
        }
    }
    tasks
}

/// Starts the consumers of every topic.
fn spawn_consumers(soak: &Arc<Soak>) -> Vec<Task> {
    let mut tasks = Vec::new();
    for (topic, shape) in soak.topics.iter().enumerate() {
        let consumers = match shape.load {
            Load::Steady(rate) => ((rate / RATE_PER_CONSUMER).ceil() as usize).max(1),
            Load::Burst { .. } => BURST_CONSUMERS,
            Load::Periodic(_) => 1,
        };
        for _ in 0..consumers {
            tasks.push(tokio::spawn(consumer(Arc::clone(soak), topic)));
        }
    }
    tasks
}

async fn join(tasks: Vec<Task>) -> io::Result<()> {
    for task in tasks {
        task.await.map_err(io::Error::other)??;
    }
    Ok(())
}

/// What the run measured besides the ledger and counters.
#[derive(Debug)]
struct Run {
    rss: Vec<(f64, f64)>,
    drain: Duration,
    /// The acked-ahead samples ([`ahead`]) and the cap the topics had.
    ahead: ahead::Samples,
    acked_ahead_cap: u32,
    /// `RssAnon` and `RssFile` of the node when the load ended, in MiB.
    rss_parts_at_load_end: (f64, f64),
    narad_cores: f64,
    client_cores: f64,
}

async fn run(soak: Arc<Soak>, node: &DevNode, options: &Options) -> io::Result<Run> {
    let (narad_before, client_before) = (cpu_seconds(&node.pid().to_string()), cpu_seconds("self"));
    let sampler = tokio::spawn(rss_sampler(Arc::clone(&soak), node.pid()));
    let ahead_sampler = tokio::spawn(ahead::sampler(Arc::clone(&soak)));
    let consumers = spawn_consumers(&soak);
    join(spawn_producers(&soak)).await?;
    let load_elapsed = soak.started.elapsed();
    let mib = |field| status_kib(node.pid(), field).map_or(0.0, |kib| kib as f64 / 1_024.0);
    let rss_parts_at_load_end = (mib("RssAnon:"), mib("RssFile:"));
    soak.draining.store(true, Ordering::Release);
    let drain_started = Instant::now();
    while soak.unacked() > 0 && drain_started.elapsed() < options.drain_max() {
        tokio::time::sleep(DRAIN_POLL).await;
    }
    let drain = drain_started.elapsed();
    soak.stop.store(true, Ordering::Release);
    join(consumers).await?;
    let rss = sampler.await.map_err(io::Error::other)?;
    let ahead = ahead_sampler.await.map_err(io::Error::other)?;
    let cores = |before: f64, after: f64| (after - before) / (load_elapsed + drain).as_secs_f64();
    Ok(Run {
        rss,
        drain,
        ahead,
        acked_ahead_cap: options.acked_ahead_cap(),
        rss_parts_at_load_end,
        narad_cores: cores(narad_before, cpu_seconds(&node.pid().to_string())),
        client_cores: cores(client_before, cpu_seconds("self")),
    })
}

/// Ledger totals after the drain.
#[derive(Debug, Default)]
struct Verdict {
    accepted: u64,
    never_delivered: u64,
    never_acked: u64,
    delivered_without_202: u64,
    accepted_by_topic: BTreeMap<&'static str, u64>,
}

fn verdict(soak: &Soak) -> Verdict {
    let mut verdict = Verdict::default();
    for entry in lock(&soak.ledger).values() {
        if entry.produce_status != Some(202) {
            verdict.delivered_without_202 += u64::from(entry.deliveries > 0);
            continue;
        }
        verdict.accepted += 1;
        *verdict
            .accepted_by_topic
            .entry(soak.topics[entry.topic].name)
            .or_default() += 1;
        verdict.never_delivered += u64::from(entry.first_delivery_us.is_none());
        verdict.never_acked += u64::from(entry.acked_us.is_none());
    }
    verdict
}

/// Sets the figures of the run in `report`; whether every delivery check
/// held.
fn record(report: &mut Report, soak: &Soak, run: &Run, verdict: &Verdict) -> bool {
    let load_s = soak.load.as_secs_f64();
    let counters = &soak.counters;
    let count = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as f64;
    report
        .set("load_secs", load_s)
        .set("drain_secs", run.drain.as_secs_f64())
        .set("produced_accepted", verdict.accepted as f64)
        .set("produced_accepted_per_s", verdict.accepted as f64 / load_s)
        .set("produce_requests", count(&counters.produce_requests))
        .set("produce_refused", count(&counters.produce_refused))
        .set("produce_unanswered", count(&counters.produce_unanswered))
        .set("deliveries", count(&counters.deliveries))
        .set("redeliveries", count(&counters.redeliveries))
        .set("acked", count(&counters.acked))
        .set("ack_refused", count(&counters.ack_refused))
        .set("nacked", count(&counters.nacked))
        .set("dropped", count(&counters.dropped))
        .set("consume_errors", count(&counters.consume_errors))
        .set("reconnects", count(&counters.reconnects))
        .set("unknown_deliveries", count(&counters.unknown_deliveries))
        .set(
            "delivered_without_202",
            verdict.delivered_without_202 as f64,
        )
        .set("dup_after_ack", count(&counters.dup_after_ack))
        .set(
            "dup_after_ack_racing",
            count(&counters.dup_after_ack_racing),
        )
        .set("never_delivered", verdict.never_delivered as f64)
        .set("never_acked", verdict.never_acked as f64)
        .set("narad_cores", run.narad_cores)
        .set("client_cores", run.client_cores);
    for (topic, accepted) in &verdict.accepted_by_topic {
        report.set(&format!("accepted_{topic}"), *accepted as f64);
    }
    for (shape, max_us) in soak.topics.iter().zip(&soak.deliver_max_us) {
        let max_ms = max_us.load(Ordering::Relaxed) as f64 / 1_000.0;
        report.set(&format!("deliver_max_ms_{}", shape.name), max_ms);
    }
    record_rss(report, soak, &run.rss);
    report
        .set("rss_anon_at_load_end_mib", run.rss_parts_at_load_end.0)
        .set("rss_file_at_load_end_mib", run.rss_parts_at_load_end.1);
    let gaps = record_delivery_gaps(report, soak);
    record_acked_ahead(report, soak, run, &gaps);
    record_latencies(report, soak, &run.rss);
    counters.dup_after_ack.load(Ordering::Relaxed) == 0
        && counters.dup_after_ack_racing.load(Ordering::Relaxed) == 0
        && counters.unknown_deliveries.load(Ordering::Relaxed) == 0
        && verdict.never_delivered == 0
        && verdict.never_acked == 0
}

/// The longest time, in µs, that a topic had records waiting for their
/// first delivery and delivered none, and when it began (µs after the
/// start). `waits` holds one (ready, delivered)
/// pair per accepted record: ready is when the record could first be
/// delivered (its `202` was read, or its delivery came first, which can
/// happen), delivered when its first delivery was read. A record never
/// delivered waits until `end_us`, the end of the run, so a stall that
/// never ends counts in full instead of not at all.
fn longest_delivery_gap_us(waits: &[(u64, Option<u64>)], end_us: u64) -> (u64, u64) {
    // Ready events (+1) sort before deliveries (-1) at the same instant.
    let mut events: Vec<(u64, i64)> = Vec::with_capacity(waits.len() * 2);
    for (ready, delivered) in waits {
        let ended = delivered.unwrap_or(end_us.max(*ready));
        events.push(((*ready).min(ended), 1));
        events.push((ended, -1));
    }
    events.sort_unstable_by_key(|(at, step)| (*at, -step));
    let (mut waiting, mut since, mut longest) = (0_i64, 0_u64, (0_u64, 0_u64));
    for (at, step) in events {
        if step < 0 {
            if at.saturating_sub(since) > longest.0 {
                longest = (at.saturating_sub(since), since);
            }
            since = at;
        } else if waiting == 0 {
            since = at;
        }
        waiting += step;
    }
    longest
}

/// Each topic's longest delivery gap ([`longest_delivery_gap_us`]), in ms,
/// and the longest of all; returns each topic's gap as (from, length) in
/// seconds.
fn record_delivery_gaps(report: &mut Report, soak: &Soak) -> Vec<(f64, f64)> {
    let mut waits: Vec<Vec<(u64, Option<u64>)>> = vec![Vec::new(); soak.topics.len()];
    for entry in lock(&soak.ledger).values() {
        if entry.produce_status != Some(202) {
            continue;
        }
        let ready = entry.answered_us.unwrap_or(entry.sent_us);
        waits[entry.topic].push((ready, entry.first_delivery_us));
    }
    let end_us = soak.now_us();
    let mut bars = Vec::new();
    let mut longest_ms = 0.0_f64;
    let mut gaps = Vec::new();
    for (topic, waits) in soak.topics.iter().zip(&waits) {
        let (gap_us, from_us) = longest_delivery_gap_us(waits, end_us);
        let gap_ms = gap_us as f64 / 1_000.0;
        gaps.push((from_us as f64 / 1_000_000.0, gap_us as f64 / 1_000_000.0));
        report
            .set(&format!("delivery_gap_max_ms_{}", topic.name), gap_ms)
            .set(
                &format!("delivery_gap_max_from_s_{}", topic.name),
                from_us as f64 / 1_000_000.0,
            );
        longest_ms = longest_ms.max(gap_ms);
        bars.push((topic.name, gap_ms));
    }
    report.set("max_delivery_gap_ms", longest_ms).bars(
        "longest time with records waiting and none delivered, per topic",
        "ms",
        &bars,
    );
    gaps
}

/// Each topic's acked-ahead figures ([`ahead::summarize`]) against its
/// longest delivery gap, `gaps` as [`record_delivery_gaps`] gives them.
fn record_acked_ahead(report: &mut Report, soak: &Soak, run: &Run, gaps: &[(f64, f64)]) {
    let cap = f64::from(run.acked_ahead_cap);
    report
        .set("acked_ahead_cap", cap)
        .set("acked_ahead_samples", run.ahead.taken.len() as f64)
        .set("metrics_scrapes_unanswered", run.ahead.unanswered as f64);
    for (index, (topic, gap)) in soak.topics.iter().zip(gaps).enumerate() {
        let figures = ahead::summarize(&run.ahead.taken, index, cap, *gap);
        report
            .set(&format!("acked_ahead_max_{}", topic.name), figures.largest)
            .set(
                &format!("acked_ahead_at_cap_s_{}", topic.name),
                figures.at_cap_s,
            )
            .set(
                &format!("delivery_gap_at_acked_ahead_cap_{}", topic.name),
                f64::from(u8::from(figures.cap_during_gap)),
            );
    }
}

fn record_rss(report: &mut Report, soak: &Soak, rss: &[(f64, f64)]) {
    let load_s = soak.load.as_secs_f64();
    let steady: Vec<(f64, f64)> = rss
        .iter()
        .copied()
        .filter(|(at, _)| *at >= load_s / 4.0 && *at <= load_s)
        .collect();
    let last_half: Vec<(f64, f64)> = rss
        .iter()
        .copied()
        .filter(|(at, _)| *at >= load_s / 2.0 && *at <= load_s)
        .collect();
    let first = rss.first().map_or(0.0, |(_, mib)| *mib);
    let last = rss.last().map_or(0.0, |(_, mib)| *mib);
    let max = rss.iter().map(|(_, mib)| *mib).fold(0.0, f64::max);
    report
        .set("rss_samples", rss.len() as f64)
        .set("rss_first_mib", first)
        .set("rss_last_mib", last)
        .set("rss_max_mib", max)
        .set("rss_slope_mib_per_min", slope(&steady) * 60.0)
        .set("rss_slope_last_half_mib_per_min", slope(&last_half) * 60.0);
}

fn record_latencies(report: &mut Report, soak: &Soak, rss: &[(f64, f64)]) {
    let mut produce = Latencies::new();
    let mut deliver = Latencies::new();
    let (mut produce_p99, mut deliver_p99) = (Vec::new(), Vec::new());
    for (index, window) in lock(&soak.windows).iter_mut().enumerate() {
        let minutes = (index as f64 + 0.5) * WINDOW.as_secs_f64() / 60.0;
        produce.merge(&window.produce);
        deliver.merge(&window.deliver);
        if !window.produce.is_empty() {
            produce_p99.push((minutes, window.produce.p99_us() / 1_000.0));
        }
        if !window.deliver.is_empty() {
            deliver_p99.push((minutes, window.deliver.p99_us() / 1_000.0));
        }
    }
    let ms = |us: f64| us / 1_000.0;
    report
        .set("produce_p50_ms", ms(produce.p50_us()))
        .set("produce_p99_ms", ms(produce.p99_us()))
        .set("produce_p999_ms", ms(produce.p999_us()))
        .set("deliver_p50_ms", ms(deliver.p50_us()))
        .set("deliver_p99_ms", ms(deliver.p99_us()))
        .set("deliver_p999_ms", ms(deliver.p999_us()));
    let worst = |series: &[(f64, f64)]| series.iter().map(|(_, p99)| *p99).fold(0.0, f64::max);
    report
        .set("produce_window_p99_max_ms", worst(&produce_p99))
        .set("deliver_window_p99_max_ms", worst(&deliver_p99));
    let mut ack = lock(&soak.ack_latency);
    let mut burst = lock(&soak.burst_latency);
    let mut lateness = lock(&soak.lateness);
    report
        .set("ack_batch_p99_ms", ms(ack.p99_us()))
        .set("burst_batch_produce_p99_ms", ms(burst.p99_us()))
        .set("send_lateness_p99_ms", ms(lateness.p99_us()));
    let rss_minutes: Vec<(f64, f64)> = rss.iter().map(|(s, mib)| (s / 60.0, *mib)).collect();
    report
        .lines(
            "narad RSS over the run",
            ("minutes", "MiB"),
            &[("RSS", rss_minutes)],
        )
        .lines(
            &format!("p99 per {} s window", WINDOW.as_secs()),
            ("minutes", "ms"),
            &[
                ("produce (request to 202)", produce_p99),
                (
                    "delivery (produce sent to first consume answer)",
                    deliver_p99,
                ),
            ],
        );
}

fn main() -> ExitCode {
    match soak_main() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("soak-bench: a delivery check failed (see the figures above)");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("soak-bench: {error}");
            ExitCode::from(2)
        }
    }
}

fn soak_main() -> io::Result<bool> {
    let Some(options) = Options::parse(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(true);
    };
    let topics = scaled_topics(options.scale);
    let plan = plan(&topics, &options);
    print!("{plan}");
    let scratch = narad_bench::bench_dir()?.join(format!("soak-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch)?;
    let mut report = Report::new("soak");
    report.note("plan", plan.trim_end());
    report.note("load_average_at_start", &load_average());
    report.note(
        "method",
        "one narad dev; keep-alive HTTP/1.1 clients on tokio in this process, on the same cores; \
         producers wait for each 202; consumers batch-consume up to 20 (1 s long poll) and \
         batch-ack; a ledger follows every message by the id in its payload",
    );
    let mut fdatasync =
        baseline::fdatasync_4k(&scratch, FileMode::Preallocated, FDATASYNC_SAMPLES)?;
    report.set("baseline_fdatasync_p50_us", fdatasync.p50_us());
    report.set("baseline_fdatasync_p99_us", fdatasync.p99_us());

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let passed = runtime.block_on(async {
        let node = DevNode::start(&narad_binary(), &scratch.join("node")).await?;
        let mut soak = Soak::new(node.addr, topics, options.duration);
        create_topics(&soak, &options).await?;
        // The load phase starts once every topic is assigned.
        soak.started = Instant::now();
        let soak = Arc::new(soak);
        let run = run(Arc::clone(&soak), &node, &options).await?;
        node.stop();
        let verdict = verdict(&soak);
        io::Result::Ok(record(&mut report, &soak, &run, &verdict))
    })?;
    report.note("load_average_at_end", &load_average());
    let path = report.write()?;
    println!(
        "{}",
        serde_json::to_string_pretty(&report.to_json()).map_err(io::Error::other)?
    );
    println!("wrote {}", path.display());
    // The node's log outlives the scratch directory: a failed run is
    // explained by it.
    let log = path.with_file_name("soak-node.log");
    match fs::copy(scratch.join("node.log"), &log) {
        Ok(_) => println!("kept the node's log in {}", log.display()),
        Err(error) => eprintln!("soak-bench: the node's log was not kept: {error}"),
    }
    let _ = fs::remove_dir_all(&scratch);
    Ok(passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn flags_parse_and_bad_ones_are_refused() {
        let options = Options::parse(args("--duration 3m --scale 0.5 --visibility-secs 10"))
            .unwrap()
            .unwrap();
        assert_eq!(options.duration, Duration::from_secs(180));
        assert_eq!(options.scale, 0.5);
        assert_eq!(options.drain_max(), Duration::from_secs(40));
        assert_eq!(options.acked_ahead_cap(), 1_024);
        let capped = Options::parse(args("--max-acked-ahead 4096"))
            .unwrap()
            .unwrap();
        assert_eq!(capped.max_acked_ahead, Some(4_096));
        assert_eq!(capped.acked_ahead_cap(), 4_096);
        assert!(Options::parse(args("--max-acked-ahead 0")).is_err());
        assert!(Options::parse(args("--help")).unwrap().is_none());
        assert!(Options::parse(args("--scale 0")).is_err());
        assert!(Options::parse(args("--duration")).is_err());
        assert!(Options::parse(args("--rate 5")).is_err());
    }

    #[test]
    fn the_spec_shape_totals_about_a_thousand_per_second() {
        let steady: f64 = TOPICS
            .iter()
            .filter_map(|shape| match shape.load {
                Load::Steady(rate) => Some(rate),
                _ => None,
            })
            .sum();
        assert_eq!(steady, 990.0);
        assert_eq!(TOPICS.iter().filter(|shape| shape.faults).count(), 1);
    }

    #[test]
    fn scaling_keeps_the_ratios_and_leaves_the_periodic_topic() {
        let half = scaled_topics(0.5);
        assert_eq!(half[0].load, Load::Steady(200.0));
        assert_eq!(half[1].load, Load::Steady(125.0));
        assert_eq!(
            half[4].load,
            Load::Burst {
                messages: 500,
                every: Duration::from_secs(300)
            }
        );
        assert_eq!(half[6].load, TOPICS[6].load);
    }

    #[test]
    fn payloads_have_the_exact_size_and_carry_the_id() {
        let text = payload(123_456, 420);
        assert_eq!(text.len(), 420);
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["id"], 123_456);
    }

    #[test]
    fn fates_come_in_about_the_spec_shares() {
        let (mut nacks, mut drops) = (0, 0);
        for id in 0..100_000 {
            match fate(id, 1) {
                Fate::Nack => nacks += 1,
                Fate::Drop => drops += 1,
                Fate::Ack => {}
            }
        }
        assert!((2_700..3_300).contains(&nacks), "{nacks}");
        assert!((120..280).contains(&drops), "{drops}");
        assert_eq!(fate(7, 2), fate(7, 2));
    }

    #[test]
    fn a_delivery_gap_counts_only_while_records_wait() {
        // Nothing waits between 30 and 100: an idle topic has no gap.
        let idle = [(0, Some(10)), (20, Some(30)), (100, Some(105))];
        assert_eq!(longest_delivery_gap_us(&idle, 200), (10, 0));
        // Two records wait from 0; one is delivered at 5, the other only
        // at 40: the gap is 35, from the last delivery.
        let stall = [(0, Some(5)), (0, Some(40))];
        assert_eq!(longest_delivery_gap_us(&stall, 200), (35, 5));
        // A delivery read before its 202 was: ready at the delivery.
        assert_eq!(longest_delivery_gap_us(&[(50, Some(20))], 200), (0, 0));
        // Never delivered: it waits from its 202 to the end of the run.
        assert_eq!(
            longest_delivery_gap_us(&[(0, Some(5)), (10, None)], 200),
            (190, 10)
        );
        assert_eq!(longest_delivery_gap_us(&[(0, None)], 200), (200, 0));
    }

    #[test]
    fn slope_of_a_line_is_its_gradient() {
        let points: Vec<(f64, f64)> = (0..10)
            .map(|x| (f64::from(x), 3.0 + 2.0 * f64::from(x)))
            .collect();
        assert!((slope(&points) - 2.0).abs() < 1e-9);
        assert_eq!(slope(&[(1.0, 5.0)]), 0.0);
    }

    #[test]
    fn a_delivery_after_an_answered_ack_is_a_dup_after_ack() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 1));
        let soak = Soak::new(addr, TOPICS.to_vec(), Duration::from_secs(1));
        let id = soak.send(0);
        soak.produced(&[id], Some(202));
        assert_eq!(soak.delivered(id, 10, 20), Some(1));
        let first_us = 20u64.saturating_sub(soak.ledger.lock().unwrap()[&id].sent_us);
        assert_eq!(soak.deliver_max_us[0].load(Ordering::Relaxed), first_us);
        assert_eq!(soak.unacked(), 1);
        soak.acked(id, 30);
        assert_eq!(soak.unacked(), 0);
        assert_eq!(soak.delivered(id, 25, 40), Some(2));
        assert_eq!(
            soak.counters.dup_after_ack_racing.load(Ordering::Relaxed),
            1
        );
        assert_eq!(soak.delivered(id, 31, 50), Some(3));
        assert_eq!(soak.counters.dup_after_ack.load(Ordering::Relaxed), 1);
        assert_eq!(soak.delivered(id + 1, 31, 50), None);
        let verdict = verdict(&soak);
        assert_eq!((verdict.accepted, verdict.never_acked), (1, 0));
    }
}
