//! The open-loop produce load: single keyless produces of
//! [`MESSAGE_BYTES`] at a fixed rate, request `i` due at `i / rate` after
//! the start whether or not earlier ones were answered, spread over
//! [`CONNECTIONS`] keep-alive connections.
//!
//! Latency runs from the moment a request was due to its answer, so a
//! stall that holds every connection counts against every request due
//! meanwhile (no coordinated omission). The service time (request written
//! to answer read) and how late each request left are kept beside it: a
//! large lateness says the client, or the machine, could not hold the
//! schedule.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use narad_bench::cluster::spread;
use narad_bench::http::{Connection, http_request};
use narad_bench::stats::Latencies;
use tokio::task::JoinHandle;

/// Bytes of every produced message.
pub(crate) const MESSAGE_BYTES: usize = 256;
/// Connections the load spreads over. At 5,000 msg/s each carries about
/// 40 requests a second, so a request waits for a free connection only
/// once answers take longer than about 25 ms.
pub(crate) const CONNECTIONS: usize = 128;
/// Pause before a connection that could not reconnect tries again.
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);
/// The status recorded for a request that got no answer.
pub(crate) const NO_ANSWER: u16 = 0;

/// One request of the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    /// When it was due, µs after the load's start.
    pub(crate) due_us: u64,
    /// Due to answer read, ns.
    pub(crate) latency_ns: u64,
    /// Request written to answer read, ns.
    pub(crate) service_ns: u64,
    /// How late the request left, ns.
    pub(crate) lateness_ns: u64,
    /// The answer's status, or [`NO_ANSWER`].
    pub(crate) status: u16,
}

/// A running load; [`Load::stop`] ends it and returns every sample.
#[derive(Debug)]
pub(crate) struct Load {
    started: Instant,
    /// No request due at or after this (µs after `started`) is sent.
    stop_at_us: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<Vec<Sample>>>,
}

impl Load {
    /// Opens the connections (round robin over `addrs`) and starts
    /// producing to `topic` at `rate` messages a second; the first request
    /// is due 100 ms from now, which is the load's start.
    ///
    /// # Errors
    /// When a connection cannot be opened.
    ///
    /// # Panics
    /// If `rate` is 0 or `addrs` is empty.
    pub(crate) async fn start(addrs: &[SocketAddr], topic: &str, rate: u64) -> io::Result<Self> {
        assert!(rate > 0, "a load needs a rate");
        let request = Arc::new(http_request(
            "POST",
            &format!("/v1/topics/{topic}/produce"),
            "application/octet-stream",
            &vec![b'm'; MESSAGE_BYTES],
        ));
        let mut connections = Vec::with_capacity(CONNECTIONS);
        for index in 0..CONNECTIONS {
            let addr = spread(addrs, index);
            connections.push((addr, Connection::open(addr).await?));
        }
        let started = Instant::now() + Duration::from_millis(100);
        let next = Arc::new(AtomicU64::new(0));
        let stop_at_us = Arc::new(AtomicU64::new(u64::MAX));
        let tasks = connections
            .into_iter()
            .map(|(addr, connection)| {
                let sender = Sender {
                    addr,
                    connection,
                    request: Arc::clone(&request),
                    started,
                    rate,
                    next: Arc::clone(&next),
                    stop_at_us: Arc::clone(&stop_at_us),
                };
                tokio::spawn(sender.run())
            })
            .collect();
        Ok(Self {
            started,
            stop_at_us,
            tasks,
        })
    }

    /// When the first request was due.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// `at` in µs after the load's start (0 before it).
    pub(crate) fn offset_us(&self, at: Instant) -> u64 {
        micros(at.saturating_duration_since(self.started))
    }

    /// Sends nothing due at or after `at`, waits for what is in flight,
    /// and returns every sample, in no particular order.
    ///
    /// # Errors
    /// When a sender task panicked.
    pub(crate) async fn stop(self, at: Instant) -> io::Result<Vec<Sample>> {
        let stop_at_us = self.offset_us(at);
        self.stop_at_us.store(stop_at_us, Ordering::Release);
        let mut samples = Vec::new();
        for task in self.tasks {
            samples.extend(task.await.map_err(io::Error::other)?);
        }
        Ok(samples)
    }
}

/// One connection's share of the load.
struct Sender {
    addr: SocketAddr,
    connection: Connection,
    request: Arc<Vec<u8>>,
    started: Instant,
    rate: u64,
    next: Arc<AtomicU64>,
    stop_at_us: Arc<AtomicU64>,
}

impl Sender {
    /// Takes the next request number until one is due at or after the
    /// stop; a connection that got no answer is opened again.
    async fn run(mut self) -> Vec<Sample> {
        let mut samples = Vec::new();
        loop {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            let due_us = due_us(index, self.rate);
            if due_us >= self.stop_at_us.load(Ordering::Acquire) {
                return samples;
            }
            let due = self.started + Duration::from_micros(due_us);
            tokio::time::sleep_until(due.into()).await;
            if due_us >= self.stop_at_us.load(Ordering::Acquire) {
                return samples;
            }
            let sent = Instant::now();
            let status = match self.connection.send(&self.request).await {
                Ok(response) => response.status,
                Err(_) => NO_ANSWER,
            };
            let answered = Instant::now();
            samples.push(Sample {
                due_us,
                latency_ns: nanos(answered.saturating_duration_since(due)),
                service_ns: nanos(answered.saturating_duration_since(sent)),
                lateness_ns: nanos(sent.saturating_duration_since(due)),
                status,
            });
            if status == NO_ANSWER {
                match Connection::open(self.addr).await {
                    Ok(connection) => self.connection = connection,
                    Err(_) => tokio::time::sleep(RECONNECT_PAUSE).await,
                }
            }
        }
    }
}

/// When request `index` is due, µs after the start, at `rate` a second.
fn due_us(index: u64, rate: u64) -> u64 {
    u64::try_from(u128::from(index) * 1_000_000 / u128::from(rate)).unwrap_or(u64::MAX)
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The samples due within one window of the run, and what they add up to.
#[derive(Debug, Default)]
pub(crate) struct Window {
    /// Requests sent.
    pub(crate) sent: u64,
    /// Answers by status ([`NO_ANSWER`] for none).
    pub(crate) statuses: BTreeMap<u16, u64>,
    /// Due to answer, of requests answered `202`.
    pub(crate) latency: Latencies,
    /// Written to answered, of requests answered `202`.
    pub(crate) service: Latencies,
    /// How late each request left, all of them.
    pub(crate) lateness: Latencies,
}

impl Window {
    /// The samples due in `[from_us, to_us)`.
    pub(crate) fn of(samples: &[Sample], from_us: u64, to_us: u64) -> Self {
        let mut window = Self::default();
        for sample in samples
            .iter()
            .filter(|sample| (from_us..to_us).contains(&sample.due_us))
        {
            window.sent += 1;
            *window.statuses.entry(sample.status).or_default() += 1;
            window
                .lateness
                .record(Duration::from_nanos(sample.lateness_ns));
            if sample.status == 202 {
                window
                    .latency
                    .record(Duration::from_nanos(sample.latency_ns));
                window
                    .service
                    .record(Duration::from_nanos(sample.service_ns));
            }
        }
        window
    }

    /// Requests answered `202`.
    pub(crate) fn accepted(&self) -> u64 {
        self.statuses.get(&202).copied().unwrap_or(0)
    }

    /// Requests not answered `202`.
    pub(crate) fn refused(&self) -> u64 {
        self.sent - self.accepted()
    }

    /// The statuses other than `202` and their counts, as `"503:12 0:1"`
    /// (0: no answer), or `"none"`.
    pub(crate) fn refusals(&self) -> String {
        let refusals: Vec<String> = self
            .statuses
            .iter()
            .filter(|(status, _)| **status != 202)
            .map(|(status, count)| format!("{status}:{count}"))
            .collect();
        if refusals.is_empty() {
            "none".to_owned()
        } else {
            refusals.join(" ")
        }
    }
}

/// The `quantile` of the latency (due to answer, `202`s only) of every
/// `bucket_us` of due time, as (seconds after the start, ms) points for a
/// chart; buckets with no `202` are left out.
pub(crate) fn latency_over_time(
    samples: &[Sample],
    bucket_us: u64,
    quantile: f64,
) -> Vec<(f64, f64)> {
    let mut buckets: BTreeMap<u64, Latencies> = BTreeMap::new();
    for sample in samples.iter().filter(|sample| sample.status == 202) {
        buckets
            .entry(sample.due_us / bucket_us)
            .or_default()
            .record(Duration::from_nanos(sample.latency_ns));
    }
    buckets
        .into_iter()
        .map(|(bucket, mut latencies)| {
            let middle_s = (bucket as f64 + 0.5) * bucket_us as f64 / 1e6;
            (middle_s, latencies.percentile_us(quantile) / 1_000.0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(due_us: u64, latency_ms: u64, status: u16) -> Sample {
        Sample {
            due_us,
            latency_ns: latency_ms * 1_000_000,
            service_ns: latency_ms * 1_000_000 / 2,
            lateness_ns: 0,
            status,
        }
    }

    #[test]
    fn requests_are_due_at_even_intervals_of_the_rate() {
        assert_eq!(due_us(0, 5_000), 0);
        assert_eq!(due_us(1, 5_000), 200);
        assert_eq!(due_us(5_000, 5_000), 1_000_000);
        assert_eq!(due_us(3, 3), 1_000_000);
    }

    #[test]
    fn a_window_takes_the_samples_due_in_it_and_times_only_202s() {
        let samples = [
            sample(10, 1, 202),
            sample(20, 9, 503),
            sample(30, 3, 202),
            sample(40, 5, 202),
        ];
        let mut window = Window::of(&samples, 10, 40);
        assert_eq!(window.sent, 3);
        assert_eq!(window.accepted(), 2);
        assert_eq!(window.refused(), 1);
        assert_eq!(window.refusals(), "503:1");
        assert_eq!(window.latency.len(), 2);
        assert_eq!(window.latency.percentile_us(1.0), 3_000.0);
        assert_eq!(Window::of(&samples, 40, 50).refusals(), "none");
    }

    #[test]
    fn latency_over_time_has_one_point_per_bucket_with_a_202() {
        let samples = [
            sample(100, 1, 202),
            sample(900, 3, 202),
            sample(1_500, 7, 503),
            sample(2_100, 2, 202),
        ];
        let points = latency_over_time(&samples, 1_000, 1.0);
        assert_eq!(points, [(0.0005, 3.0), (0.0025, 2.0)]);
    }
}
