//! Latency samples and their percentiles.

use std::time::Duration;

/// Latency samples of one measured operation.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    samples_ns: Vec<u64>,
    sorted: bool,
}

impl Latencies {
    /// No samples yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one sample.
    pub fn record(&mut self, elapsed: Duration) {
        self.samples_ns
            .push(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
        self.sorted = false;
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Latencies) {
        self.samples_ns.extend_from_slice(&other.samples_ns);
        self.sorted = false;
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples_ns.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.samples_ns.is_empty()
    }

    /// The `quantile` (0.0..=1.0) in microseconds, nearest-rank; 0 when empty.
    pub fn percentile_us(&mut self, quantile: f64) -> f64 {
        if self.samples_ns.is_empty() {
            return 0.0;
        }
        if !self.sorted {
            self.samples_ns.sort_unstable();
            self.sorted = true;
        }
        let last = self.samples_ns.len() - 1;
        // Nearest rank: the smallest sample with at least `quantile` of the
        // samples at or below it.
        let rank = ((quantile.clamp(0.0, 1.0) * self.samples_ns.len() as f64).ceil() as usize)
            .saturating_sub(1)
            .min(last);
        self.samples_ns[rank] as f64 / 1_000.0
    }

    /// Median in microseconds.
    pub fn p50_us(&mut self) -> f64 {
        self.percentile_us(0.50)
    }

    /// 99th percentile in microseconds.
    pub fn p99_us(&mut self) -> f64 {
        self.percentile_us(0.99)
    }

    /// 99.9th percentile in microseconds.
    pub fn p999_us(&mut self) -> f64 {
        self.percentile_us(0.999)
    }

    /// Mean in microseconds; 0 when empty.
    pub fn mean_us(&self) -> f64 {
        if self.samples_ns.is_empty() {
            return 0.0;
        }
        let total: u128 = self.samples_ns.iter().map(|&ns| u128::from(ns)).sum();
        total as f64 / self.samples_ns.len() as f64 / 1_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_micros(values: impl IntoIterator<Item = u64>) -> Latencies {
        let mut latencies = Latencies::new();
        values
            .into_iter()
            .for_each(|us| latencies.record(Duration::from_micros(us)));
        latencies
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let mut latencies = from_micros(1..=1000);
        assert_eq!(latencies.p50_us(), 500.0);
        assert_eq!(latencies.p99_us(), 990.0);
        assert_eq!(latencies.p999_us(), 999.0);
        assert_eq!(latencies.percentile_us(1.0), 1000.0);
    }

    #[test]
    fn order_of_recording_does_not_matter() {
        let mut forward = from_micros([5, 1, 9, 3]);
        let mut backward = from_micros([3, 9, 1, 5]);
        assert_eq!(forward.p50_us(), backward.p50_us());
        assert_eq!(forward.p50_us(), 3.0);
        assert_eq!(forward.mean_us(), 4.5);
    }

    #[test]
    fn empty_samples_report_zero() {
        let mut latencies = Latencies::new();
        assert!(latencies.is_empty());
        assert_eq!(latencies.p99_us(), 0.0);
        assert_eq!(latencies.mean_us(), 0.0);
    }
}
