//! The store's cadences and limits, and how the handle bound is read from
//! the process's open-file limit.

use std::time::Duration;

use narad_clock::millis;

/// Held `consumer.ahead` handles are capped at this many, and at a quarter
/// of the soft open-file limit when that is lower.
pub const HANDLES_MAX_CAP: usize = 4096;
/// Most `consumer.offset` levellings in flight at once (each holds a
/// short-lived file handle besides the held `consumer.ahead` ones).
pub const OFFSET_LEVELS_IN_FLIGHT_MAX: usize = 256;
/// Shortest durability interval accepted
/// (`storage.consumer_offset_commit_interval_ms` = 10).
pub const DURABLE_INTERVAL_MIN: Duration = Duration::from_millis(10);
/// Longest durability interval accepted (60000 ms).
pub const DURABLE_INTERVAL_MAX: Duration = Duration::from_secs(60);

/// The store's cadences and limits.
#[derive(Clone, Debug)]
pub struct ConsumerStateConfig {
    /// How often touched partitions get their window slot rewritten (page
    /// cache only). The effective tick is the shorter of this and
    /// `durable_interval`. At least 1 ms: the cadences are counted in whole
    /// milliseconds of the node's clock.
    pub tick: Duration,
    /// How often each written partition is written out (fdatasync):
    /// `storage.consumer_offset_commit_interval_ms`, 10 ms..=60 s.
    pub durable_interval: Duration,
    /// Shortest time between two levellings of `consumer.offset`; at least
    /// 1 ms.
    pub offset_level_interval: Duration,
    /// Most `consumer.ahead` files held open at once; beyond it the least
    /// recently touched partition is written out and closed.
    pub handles_max: usize,
}

impl Default for ConsumerStateConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_millis(100),
            durable_interval: Duration::from_secs(1),
            offset_level_interval: Duration::from_secs(30),
            handles_max: default_handles_max(),
        }
    }
}

impl ConsumerStateConfig {
    /// The tick actually used: `tick`, or the durability interval if shorter.
    pub fn tick_effective(&self) -> Duration {
        self.tick.min(self.durable_interval)
    }

    /// [`Self::tick_effective`] in the clock's whole milliseconds.
    pub(super) fn tick_effective_ms(&self) -> u64 {
        millis(self.tick_effective())
    }

    pub(super) fn assert_valid(&self) {
        assert!(
            self.tick >= Duration::from_millis(1),
            "consumer state tick {:?} is under 1 ms, the clock's unit",
            self.tick
        );
        assert!(
            (DURABLE_INTERVAL_MIN..=DURABLE_INTERVAL_MAX).contains(&self.durable_interval),
            "consumer state durability interval {:?} outside {DURABLE_INTERVAL_MIN:?}..={DURABLE_INTERVAL_MAX:?}",
            self.durable_interval
        );
        assert!(
            self.offset_level_interval >= Duration::from_millis(1),
            "consumer.offset level interval {:?} is under 1 ms, the clock's unit",
            self.offset_level_interval
        );
        assert!(
            self.handles_max >= 1,
            "consumer state needs at least one file handle"
        );
    }
}

/// min([`HANDLES_MAX_CAP`], soft `RLIMIT_NOFILE` / 4), read from
/// `/proc/self/limits`; 256 (a quarter of the usual 1024) where that file
/// cannot be read.
pub fn default_handles_max() -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| soft_open_files(&limits));
    match soft {
        Some(soft) => (soft / 4).clamp(1, HANDLES_MAX_CAP as u64) as usize,
        None => 256,
    }
}

/// The soft limit on the "Max open files" line of `/proc/self/limits`
/// ("unlimited" reads as `u64::MAX`).
pub(crate) fn soft_open_files(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    let soft = line
        .strip_prefix("Max open files")?
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        Some(u64::MAX)
    } else {
        soft.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_bound_reads_the_soft_open_file_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63704                63704                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(soft_open_files(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(soft_open_files(unlimited), Some(u64::MAX));
        assert_eq!(soft_open_files("Max processes 5 5\n"), None);
        let default = default_handles_max();
        assert!((1..=HANDLES_MAX_CAP).contains(&default));
    }
}
