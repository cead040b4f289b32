//! When an installed copy may be rolled back.
//!
//! A flip is a proposal to the control plane. One sent to a leader that
//! then lost its leadership can sit in a minority's log and be committed
//! later by the next leader, after this node was told the move changed.
//! If the move meanwhile came back to this node, that late flip would make
//! it the owner of whatever is at the partition's path. So an installed
//! copy is rolled back only once the leader confirms the flip cannot commit
//! *and* [`FLIP_SETTLE`] has passed since this node last proposed one for
//! the partition (spec §6). The clock starts at the runner's start too: a
//! previous process may have proposed a flip just before it stopped.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::topology::Destination;

/// How long after its last flip proposal a copy waits before it may be
/// rolled back (the spec's 15 s).
pub const FLIP_SETTLE: Duration = Duration::from_secs(15);

/// The last flip proposal of each partition, this process.
#[derive(Debug)]
pub struct FlipClock {
    settle: Duration,
    started: Instant,
    proposed: Mutex<HashMap<Destination, Instant>>,
}

impl FlipClock {
    /// A clock whose proposals settle after `settle` ([`FLIP_SETTLE`]
    /// outside tests), started now.
    #[must_use]
    pub fn new(settle: Duration) -> Self {
        Self {
            settle,
            started: Instant::now(),
            proposed: Mutex::new(HashMap::new()),
        }
    }

    /// Notes a flip proposal for `destination`, now. Entries that settled
    /// are dropped on the way.
    pub fn proposing(&self, destination: &Destination) {
        let now = Instant::now();
        let mut proposed = self.proposed.lock();
        proposed.retain(|_, at| now.duration_since(*at) < self.settle);
        proposed.insert(destination.clone(), now);
    }

    /// How long until a flip proposed for `destination` has settled: zero
    /// once [`FlipClock::settle`] has passed since the last proposal and
    /// since the clock started.
    #[must_use]
    pub fn unsettled_for(&self, destination: &Destination) -> Duration {
        let last = self
            .proposed
            .lock()
            .get(destination)
            .copied()
            .map_or(self.started, |at| at.max(self.started));
        self.settle.saturating_sub(last.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_settles_only_after_the_start_and_its_last_proposal() {
        let clock = FlipClock::new(Duration::from_millis(200));
        let orders = Destination::new("orders", 0);
        let other = Destination::new("orders", 1);
        assert!(
            clock.unsettled_for(&orders) > Duration::ZERO,
            "a previous process may have proposed"
        );
        std::thread::sleep(Duration::from_millis(220));
        assert_eq!(clock.unsettled_for(&orders), Duration::ZERO);
        clock.proposing(&orders);
        assert!(clock.unsettled_for(&orders) > Duration::ZERO);
        assert_eq!(clock.unsettled_for(&other), Duration::ZERO, "per partition");
        std::thread::sleep(Duration::from_millis(220));
        assert_eq!(clock.unsettled_for(&orders), Duration::ZERO);
    }
}
