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
use std::sync::Arc;
use std::time::Duration;

use narad_clock::{Clock, millis};
use parking_lot::Mutex;

use crate::topology::Destination;

/// How long after its last flip proposal a copy waits before it may be
/// rolled back (the spec's 15 s).
pub const FLIP_SETTLE: Duration = Duration::from_secs(15);

/// The last flip proposal of each partition, this process, on the node's
/// clock.
#[derive(Debug)]
pub struct FlipClock {
    clock: Arc<dyn Clock>,
    settle_ms: u64,
    started_ms: u64,
    proposed_ms: Mutex<HashMap<Destination, u64>>,
}

impl FlipClock {
    /// A clock whose proposals settle after `settle` ([`FLIP_SETTLE`]
    /// outside tests), started now on `clock`.
    #[must_use]
    pub fn new(settle: Duration, clock: Arc<dyn Clock>) -> Self {
        Self {
            settle_ms: millis(settle),
            started_ms: clock.now_ms(),
            clock,
            proposed_ms: Mutex::new(HashMap::new()),
        }
    }

    /// Notes a flip proposal for `destination`, now. Entries that settled
    /// are dropped on the way.
    pub fn proposing(&self, destination: &Destination) {
        let now_ms = self.clock.now_ms();
        let mut proposed = self.proposed_ms.lock();
        proposed.retain(|_, at_ms| now_ms.saturating_sub(*at_ms) < self.settle_ms);
        proposed.insert(destination.clone(), now_ms);
    }

    /// How long until a flip proposed for `destination` has settled: zero
    /// once the settle time has passed since the last proposal and since
    /// the clock started.
    #[must_use]
    pub fn unsettled_for(&self, destination: &Destination) -> Duration {
        let last_ms = self
            .proposed_ms
            .lock()
            .get(destination)
            .copied()
            .map_or(self.started_ms, |at_ms| at_ms.max(self.started_ms));
        let settled_at_ms = last_ms.saturating_add(self.settle_ms);
        Duration::from_millis(settled_at_ms.saturating_sub(self.clock.now_ms()))
    }
}

#[cfg(test)]
mod tests {
    use narad_clock::ManualClock;

    use super::*;

    #[test]
    fn a_partition_settles_only_after_the_start_and_its_last_proposal() {
        let time = Arc::new(ManualClock::new(5_000));
        let clock = FlipClock::new(Duration::from_millis(200), time.clone());
        let orders = Destination::new("orders", 0);
        let other = Destination::new("orders", 1);
        assert_eq!(
            clock.unsettled_for(&orders),
            Duration::from_millis(200),
            "a previous process may have proposed"
        );
        time.advance(199);
        assert_eq!(clock.unsettled_for(&orders), Duration::from_millis(1));
        time.advance(1);
        assert_eq!(clock.unsettled_for(&orders), Duration::ZERO);
        clock.proposing(&orders);
        time.advance(50);
        assert_eq!(clock.unsettled_for(&orders), Duration::from_millis(150));
        assert_eq!(clock.unsettled_for(&other), Duration::ZERO, "per partition");
        time.advance(150);
        assert_eq!(clock.unsettled_for(&orders), Duration::ZERO);
    }
}
