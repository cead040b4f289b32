//! The decision behind `narad_metastore_apply_stalled`: this node has
//! committed entries it has not applied, and its applied index has not
//! moved for [`APPLY_STALL_AFTER`]. It does no I/O and reads no clock: the
//! caller passes the indexes and the time of each observation (the node's
//! monotonic clock, in milliseconds).
//!
//! The wait is measured between observations (the node observes at each
//! render of its metrics): it starts at the first observation that finds
//! entries waiting on an applied index it had not seen before, so a stall
//! shows at the first observation at least [`APPLY_STALL_AFTER`] after
//! that. An index that stood still while nothing waited (an idle cluster)
//! does not count towards the wait.

use std::time::Duration;

/// How long committed entries may wait on an applied index that does not
/// move before the apply counts as stalled. A healthy replica applies a
/// batch in milliseconds and installs a metastore snapshot in seconds, so
/// 30 s without progress while entries wait is far beyond either; and it is
/// short enough to show within an alert window of a few minutes.
pub(super) const APPLY_STALL_AFTER: Duration = Duration::from_secs(30);

/// What the decision remembers between observations.
#[derive(Debug, Clone, Default)]
pub(super) struct ApplyStall {
    /// The applied index at the last observation.
    applied_index: u64,
    /// Since when (ms) entries have waited on `applied_index`; `None`
    /// while nothing waits.
    waiting_since_ms: Option<u64>,
}

impl ApplyStall {
    /// Notes the commit index this node knows and its applied index at
    /// `now_ms`, and answers whether its apply is stalled.
    pub(super) fn observe(&mut self, commit_index: u64, applied_index: u64, now_ms: u64) -> bool {
        let moved = applied_index != self.applied_index;
        self.applied_index = applied_index;
        if commit_index <= applied_index {
            self.waiting_since_ms = None;
            return false;
        }
        let since_ms = match self.waiting_since_ms {
            Some(since_ms) if !moved => since_ms,
            _ => now_ms,
        };
        self.waiting_since_ms = Some(since_ms);
        Duration::from_millis(now_ms.saturating_sub(since_ms)) >= APPLY_STALL_AFTER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000;
    const AFTER: u64 = APPLY_STALL_AFTER.as_secs() * 1_000;

    #[test]
    fn entries_waiting_on_an_unmoved_index_past_the_threshold_are_a_stall() {
        let start = 7_000;
        let mut stall = ApplyStall::default();
        assert!(!stall.observe(10, 5, start));
        assert!(stall.observe(10, 5, start + AFTER));
    }

    #[test]
    fn entries_waiting_less_than_the_threshold_are_no_stall() {
        let start = 7_000;
        let mut stall = ApplyStall::default();
        assert!(!stall.observe(10, 5, start));
        assert!(!stall.observe(10, 5, start + AFTER - SECOND));
    }

    #[test]
    fn an_applied_index_that_moved_is_no_stall_and_restarts_the_wait() {
        let start = 7_000;
        let mut stall = ApplyStall::default();
        assert!(!stall.observe(10, 5, start));
        let moved = start + AFTER + SECOND;
        assert!(!stall.observe(10, 6, moved));
        assert!(!stall.observe(10, 6, moved + AFTER - SECOND));
        assert!(stall.observe(10, 6, moved + AFTER));
    }

    #[test]
    fn nothing_waiting_is_no_stall_however_long_the_index_stands() {
        let start = 7_000;
        let mut stall = ApplyStall::default();
        assert!(!stall.observe(5, 5, start));
        assert!(!stall.observe(5, 5, start + 100 * AFTER));
    }

    #[test]
    fn entries_committed_after_a_long_idle_wait_the_whole_threshold() {
        let start = 7_000;
        let mut stall = ApplyStall::default();
        assert!(!stall.observe(5, 5, start));
        let committed = start + 100 * AFTER;
        assert!(!stall.observe(6, 5, committed));
        assert!(!stall.observe(6, 5, committed + AFTER - SECOND));
        assert!(stall.observe(6, 5, committed + AFTER));
    }

    #[test]
    fn a_stall_clears_once_the_entries_are_applied() {
        let start = 7_000;
        let mut stall = ApplyStall::default();
        assert!(!stall.observe(10, 5, start));
        assert!(stall.observe(10, 5, start + AFTER));
        assert!(!stall.observe(10, 10, start + AFTER + SECOND));
    }
}
