//! When each partition is written out (pure): a writeout point per
//! durability interval, phased by a hash of the partition's directory so
//! the partitions' fdatasyncs spread over the interval's ticks.

use std::path::Path;
use std::time::{Duration, Instant};

use super::config::ConsumerStateConfig;

/// Where in each durability interval a partition is written out: a stable
/// hash of its directory picks one of the interval's ticks, so writeouts
/// spread evenly over ticks.
pub(crate) fn writeout_phase(dir: &Path, config: &ConsumerStateConfig) -> Duration {
    let tick = config.tick_effective().as_nanos().max(1);
    let ticks = (config.durable_interval.as_nanos() / tick).max(1);
    let phase = u128::from(fnv1a(dir.as_os_str().as_encoded_bytes())) % ticks;
    duration_from_nanos(phase * tick)
}

/// The first writeout point after `now`: points lie at
/// `epoch + phase + k * durable_interval`.
pub(super) fn next_writeout(
    epoch: Instant,
    phase: Duration,
    interval: Duration,
    now: Instant,
) -> Instant {
    let base = epoch + phase;
    if now < base {
        return base;
    }
    let elapsed = now.duration_since(base).as_nanos();
    let intervals = elapsed / interval.as_nanos() + 1;
    base + duration_from_nanos(intervals * interval.as_nanos())
}

fn duration_from_nanos(nanos: u128) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writeout_phases_spread_partitions_over_the_interval() {
        let config = ConsumerStateConfig {
            tick: Duration::from_millis(100),
            durable_interval: Duration::from_secs(1),
            offset_level_interval: Duration::from_secs(30),
            handles_max: 64,
        };
        let phases: std::collections::BTreeSet<Duration> = (0..64)
            .map(|p| writeout_phase(Path::new(&format!("/data/topics/t/p{p:05}")), &config))
            .collect();
        assert!(phases.len() >= 8, "only {} distinct phases", phases.len());
        for phase in phases {
            assert!(phase < config.durable_interval);
            assert_eq!(phase.as_nanos() % config.tick.as_nanos(), 0);
        }
    }
}
