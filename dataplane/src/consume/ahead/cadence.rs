//! When each partition is written out (pure): a writeout point per
//! durability interval, phased by a hash of the partition's directory so
//! the partitions' fdatasyncs spread over the interval's ticks. Times are
//! milliseconds of the node's monotonic clock.

use std::path::Path;

use narad_clock::millis;

use super::config::ConsumerStateConfig;

/// Where in each durability interval a partition is written out, in
/// milliseconds after the interval's start: a stable hash of its directory
/// picks one of the interval's ticks, so writeouts spread evenly over ticks.
pub(crate) fn writeout_phase_ms(dir: &Path, config: &ConsumerStateConfig) -> u64 {
    let tick_ms = config.tick_effective_ms();
    let ticks = (millis(config.durable_interval) / tick_ms).max(1);
    let phase = fnv1a(dir.as_os_str().as_encoded_bytes()) % ticks;
    phase * tick_ms
}

/// The first writeout point after `now_ms`: points lie at
/// `epoch_ms + phase_ms + k * interval_ms`.
pub(super) fn next_writeout_ms(epoch_ms: u64, phase_ms: u64, interval_ms: u64, now_ms: u64) -> u64 {
    let base_ms = epoch_ms.saturating_add(phase_ms);
    if now_ms < base_ms {
        return base_ms;
    }
    let interval_ms = interval_ms.max(1);
    let intervals = (now_ms - base_ms) / interval_ms + 1;
    base_ms.saturating_add(intervals.saturating_mul(interval_ms))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_next_writeout_is_the_next_point_after_now() {
        // Points at 1_000 + 300 + k * 1_000.
        assert_eq!(next_writeout_ms(1_000, 300, 1_000, 1_000), 1_300);
        assert_eq!(next_writeout_ms(1_000, 300, 1_000, 1_300), 2_300);
        assert_eq!(next_writeout_ms(1_000, 300, 1_000, 2_299), 2_300);
        assert_eq!(next_writeout_ms(1_000, 300, 1_000, 5_750), 6_300);
    }

    #[test]
    fn writeout_phases_spread_partitions_over_the_interval() {
        let config = ConsumerStateConfig {
            tick: Duration::from_millis(100),
            durable_interval: Duration::from_secs(1),
            offset_level_interval: Duration::from_secs(30),
            handles_max: 64,
        };
        let phases: std::collections::BTreeSet<u64> = (0..64)
            .map(|p| writeout_phase_ms(Path::new(&format!("/data/topics/t/p{p:05}")), &config))
            .collect();
        assert!(phases.len() >= 8, "only {} distinct phases", phases.len());
        for phase_ms in phases {
            assert!(phase_ms < 1_000);
            assert_eq!(phase_ms % 100, 0);
        }
    }
}
