//! When an idle consume shard is released (`consume.idle_shard_release_ms`).
//!
//! A shard holds its partition's log open (its tail cache, index and
//! file handles), its lease table and its consumer-state registration for
//! as long as it exists. A shard nobody consumes from any more is released
//! so that idle log eviction can close its log; the next consume of the
//! partition opens a new one from the persisted position, as after a
//! restart.
//!
//! Pure: the service's release pass reads the figures under the shard's
//! locks and asks [`release_due`]; nothing here reads a clock.
//!
//! What keeps a shard: a live lease (its record is out with a consumer,
//! whose ack must find it), a consume parked on its topic (the shard's
//! high-watermark watcher is what wakes the parked consume when a record
//! is committed), and any use within the idle time: a consume (or a pump
//! serving a parked one) visiting the partition, an ack, extend or nack, a
//! delivery-token hold or claim, a move's handoff reading its position.
//! A replay reads the log without the shard and is not a use of it.

use std::time::Duration;

use narad_clock::millis;

/// The default of `consume.idle_shard_release_ms`: a partition nobody has
/// consumed from for 10 minutes gives its memory back. Long enough that a
/// consumer polling every few seconds, or pausing for a deploy, never
/// reopens it (a reopen reads the consumer-state files and the log's tail);
/// short next to `storage.idle_log_eviction_ms` (30 minutes), so a log only
/// consumed from is closed at the next eviction after that.
pub const IDLE_SHARD_RELEASE_DEFAULT: Duration = Duration::from_secs(600);

/// What the release pass knows of one shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardIdleness {
    /// When a consumer last used the shard, on the node's monotonic clock.
    pub active_at_ms: u64,
    /// Live leases, after lapsed ones were purged.
    pub leases: usize,
    /// Consumes parked on the shard's topic.
    pub parked: usize,
}

/// Whether a shard in `shard`'s state is released at `now_ms`, with
/// `idle_after` the setting (`None`: never). Due once it has no live
/// lease, nobody is parked on its topic, and no consumer used it for at
/// least `idle_after`.
pub fn release_due(shard: ShardIdleness, now_ms: u64, idle_after: Option<Duration>) -> bool {
    let Some(idle_after) = idle_after else {
        return false;
    };
    shard.leases == 0
        && shard.parked == 0
        && now_ms.saturating_sub(shard.active_at_ms) >= millis(idle_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_MINUTES: Option<Duration> = Some(Duration::from_secs(600));
    const TEN_MINUTES_MS: u64 = 600_000;

    fn idle(active_at_ms: u64) -> ShardIdleness {
        ShardIdleness {
            active_at_ms,
            leases: 0,
            parked: 0,
        }
    }

    #[test]
    fn a_shard_unused_for_the_idle_time_is_released() {
        assert!(release_due(
            idle(1_000),
            1_000 + TEN_MINUTES_MS,
            TEN_MINUTES
        ));
        assert!(release_due(idle(1_000), 5_000_000, TEN_MINUTES));
    }

    #[test]
    fn a_shard_used_within_the_idle_time_is_kept() {
        assert!(!release_due(
            idle(1_000),
            1_000 + TEN_MINUTES_MS - 1,
            TEN_MINUTES
        ));
    }

    #[test]
    fn a_live_lease_keeps_the_shard_however_long_it_was_idle() {
        let leased = ShardIdleness {
            leases: 1,
            ..idle(0)
        };
        assert!(!release_due(leased, u64::MAX, TEN_MINUTES));
    }

    #[test]
    fn a_consume_parked_on_the_topic_keeps_the_shard() {
        let watched = ShardIdleness {
            parked: 1,
            ..idle(0)
        };
        assert!(!release_due(watched, u64::MAX, TEN_MINUTES));
    }

    #[test]
    fn no_setting_never_releases() {
        assert!(!release_due(idle(0), u64::MAX, None));
    }

    #[test]
    fn activity_stamped_after_now_counts_as_now() {
        // A consume stamps its shard after the pass read the clock.
        assert!(!release_due(idle(2_000), 1_000, TEN_MINUTES));
    }

    #[test]
    fn an_idle_time_of_zero_releases_any_unheld_shard() {
        assert!(release_due(idle(1_000), 1_000, Some(Duration::ZERO)));
    }
}
