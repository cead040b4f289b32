//! The partitions' acked-ahead sets during the soak, sampled from the
//! node's `/metrics` (`narad_acked_ahead_size`).
//!
//! A consumer that drops a lease holds its partition's frontier until the
//! visibility timeout lapses; acks above it fill the acked-ahead set, and
//! at the topic's `max_acked_ahead_per_partition` the partition hands out
//! only that hole (spec §3, "Caps"). Records behind it then wait without a
//! stall anywhere in the broker. The samples say whether a topic's longest
//! delivery gap fell in such a time.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use narad_bench::http::{Connection, http_request};
use narad_bench::metrics::{label, series};

use crate::Soak;

/// The spec's default `max_acked_ahead_per_partition`.
pub(crate) const CAP_DEFAULT: u32 = 1_024;
/// How often the sets are sampled.
const SAMPLE: Duration = Duration::from_secs(1);
/// A scrape not answered within this is given up (its connection
/// dropped) and counted, so one lost answer cannot hold the run open.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
const METRIC: &str = "narad_acked_ahead_size";

/// One sample: seconds since the load started, and each topic's largest
/// acked-ahead set (in the order of the soak's topics).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) at_s: f64,
    pub(crate) largest: Vec<f64>,
}

/// Samples every [`SAMPLE`] until the run stops. A scrape that fails is
/// skipped: the samples are evidence, not a check.
pub(crate) async fn sampler(soak: Arc<Soak>) -> Samples {
    let names: Vec<&str> = soak.topics.iter().map(|topic| topic.name).collect();
    let request = http_request("GET", "/metrics", "text/plain", b"");
    let mut samples = Samples::default();
    let mut connection = None;
    while !soak.stop.load(Ordering::Acquire) {
        if connection.is_none() {
            connection = Connection::open(soak.addr).await.ok();
        }
        if let Some(open) = connection.as_mut() {
            match tokio::time::timeout(SCRAPE_TIMEOUT, open.send(&request)).await {
                Ok(Ok(response)) if response.status == 200 => samples.taken.push(Sample {
                    at_s: soak.started.elapsed().as_secs_f64(),
                    largest: largest_per_topic(&String::from_utf8_lossy(&response.body), &names),
                }),
                Ok(Ok(_)) => {}
                Ok(Err(_)) => connection = None,
                Err(_) => {
                    samples.unanswered += 1;
                    connection = None;
                }
            }
        }
        tokio::time::sleep(SAMPLE).await;
    }
    samples
}

/// What [`sampler`] gathered: the samples, and the scrapes the node left
/// unanswered for [`SCRAPE_TIMEOUT`].
#[derive(Debug, Default)]
pub(crate) struct Samples {
    pub(crate) taken: Vec<Sample>,
    pub(crate) unanswered: u64,
}

/// Each of `topics`' largest acked-ahead set in one scrape (0 for a topic
/// with no series).
fn largest_per_topic(text: &str, topics: &[&str]) -> Vec<f64> {
    let mut largest = vec![0.0_f64; topics.len()];
    for (labels, value) in series(text, METRIC) {
        let topic = label(labels, "topic");
        if let Some(index) = topics.iter().position(|name| Some(*name) == topic) {
            largest[index] = largest[index].max(value);
        }
    }
    largest
}

/// What the samples say about one topic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TopicAhead {
    /// The largest set sampled.
    pub(crate) largest: f64,
    /// Seconds sampled with a partition at the cap.
    pub(crate) at_cap_s: f64,
    /// Whether a sample inside the topic's longest delivery gap found a
    /// partition at the cap.
    pub(crate) cap_during_gap: bool,
}

/// Topic `topic`'s figures from `samples`, for cap `cap` and its longest
/// delivery gap `(from_s, length_s)`.
pub(crate) fn summarize(samples: &[Sample], topic: usize, cap: f64, gap: (f64, f64)) -> TopicAhead {
    let (from_s, length_s) = gap;
    let mut figures = TopicAhead {
        largest: 0.0,
        at_cap_s: 0.0,
        cap_during_gap: false,
    };
    for sample in samples {
        let size = sample.largest.get(topic).copied().unwrap_or(0.0);
        figures.largest = figures.largest.max(size);
        if size >= cap {
            figures.at_cap_s += SAMPLE.as_secs_f64();
            let inside = sample.at_s >= from_s && sample.at_s <= from_s + length_s;
            figures.cap_during_gap |= inside && length_s > 0.0;
        }
    }
    figures
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_set_of_each_topic_is_taken_over_its_partitions() {
        let text = "\
narad_acked_ahead_size{topic=\"webhooks\",partition=\"0\"} 12
narad_acked_ahead_size{topic=\"webhooks\",partition=\"4\"} 1024
narad_acked_ahead_size{topic=\"audit\",partition=\"1\"} 3
narad_inflight_size{topic=\"audit\",partition=\"1\"} 99
";
        assert_eq!(
            largest_per_topic(text, &["audit", "webhooks", "idle"]),
            [3.0, 1024.0, 0.0]
        );
    }

    #[test]
    fn a_gap_is_tied_to_the_cap_only_when_a_capped_sample_falls_inside_it() {
        let sample = |at_s: f64, size: f64| Sample {
            at_s,
            largest: vec![size],
        };
        let samples = [
            sample(10.0, 500.0),
            sample(11.0, 1024.0),
            sample(12.0, 1024.0),
            sample(30.0, 0.0),
        ];
        let inside = summarize(&samples, 0, 1024.0, (11.5, 10.0));
        assert_eq!(inside.largest, 1024.0);
        assert_eq!(inside.at_cap_s, 2.0);
        assert!(inside.cap_during_gap);
        assert!(!summarize(&samples, 0, 1024.0, (20.0, 15.0)).cap_during_gap);
        assert!(!summarize(&samples, 0, 2048.0, (11.5, 10.0)).cap_during_gap);
    }
}
