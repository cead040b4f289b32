//! The node's rate limits of remote children (spec §1.3, §1.4, v3.2):
//! at most [`WRITES_PER_MINUTE`] remote-child writes (attach, pause,
//! resume, skip, detach, delete) per node in any minute; one check of a
//! remote per [`REMOTE_CHECK_EVERY`]; one unshipped-records check of a
//! parent per [`UNSHIPPED_CHECK_EVERY`]. Every refusal says how long to
//! wait (`Retry-After`, whole seconds, at least 1).
//!
//! Pure: the caller passes the time, from the node's clock.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use parking_lot::Mutex;

/// Remote-child writes a node takes in any minute.
pub const WRITES_PER_MINUTE: usize = 60;
/// The window of [`WRITES_PER_MINUTE`].
pub const WRITE_WINDOW: Duration = Duration::from_secs(60);
/// The least time between two checks of one remote's target by an attach.
pub const REMOTE_CHECK_EVERY: Duration = Duration::from_secs(5);
/// The least time between two unshipped-records checks of one parent by a
/// detach or a delete.
pub const UNSHIPPED_CHECK_EVERY: Duration = Duration::from_secs(10);

/// The limits of one node. `Retry-After` seconds on refusal.
#[derive(Debug, Default)]
pub struct RemoteChildLimits {
    state: Mutex<LimitState>,
}

#[derive(Debug, Default)]
struct LimitState {
    /// When each write of the last window was taken, oldest first.
    writes: VecDeque<u64>,
    /// When each remote was last checked.
    remote_checks: HashMap<String, u64>,
    /// When each parent's unshipped records were last checked.
    unshipped_checks: HashMap<String, u64>,
}

impl RemoteChildLimits {
    /// Limits with nothing taken.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one remote-child write at `now_ms`.
    ///
    /// # Errors
    /// The seconds until the oldest write of the window leaves it, when
    /// [`WRITES_PER_MINUTE`] were taken in the last minute.
    pub fn take_write(&self, now_ms: u64) -> Result<(), u32> {
        let window_ms = millis(WRITE_WINDOW);
        let mut state = self.state.lock();
        while state
            .writes
            .front()
            .is_some_and(|&at| now_ms.saturating_sub(at) >= window_ms)
        {
            state.writes.pop_front();
        }
        if state.writes.len() >= WRITES_PER_MINUTE {
            let oldest = state.writes.front().copied().unwrap_or(now_ms);
            return Err(seconds_until(oldest + window_ms, now_ms));
        }
        state.writes.push_back(now_ms);
        Ok(())
    }

    /// Takes a check of remote `remote` at `now_ms`.
    ///
    /// # Errors
    /// The seconds left when the remote was checked less than
    /// [`REMOTE_CHECK_EVERY`] ago.
    pub fn take_remote_check(&self, remote: &str, now_ms: u64) -> Result<(), u32> {
        let mut state = self.state.lock();
        take_spaced(&mut state.remote_checks, remote, now_ms, REMOTE_CHECK_EVERY)
    }

    /// Takes an unshipped-records check of parent `parent` at `now_ms`.
    ///
    /// # Errors
    /// The seconds left when the parent was checked less than
    /// [`UNSHIPPED_CHECK_EVERY`] ago.
    pub fn take_unshipped_check(&self, parent: &str, now_ms: u64) -> Result<(), u32> {
        let mut state = self.state.lock();
        take_spaced(
            &mut state.unshipped_checks,
            parent,
            now_ms,
            UNSHIPPED_CHECK_EVERY,
        )
    }
}

/// Records `now_ms` under `name` unless the last one is less than `every`
/// old; entries older than `every` are dropped, so the map holds only
/// recent names.
fn take_spaced(
    last: &mut HashMap<String, u64>,
    name: &str,
    now_ms: u64,
    every: Duration,
) -> Result<(), u32> {
    let every_ms = millis(every);
    last.retain(|_, &mut at| now_ms.saturating_sub(at) < every_ms);
    if let Some(&at) = last.get(name) {
        return Err(seconds_until(at + every_ms, now_ms));
    }
    last.insert(name.to_owned(), now_ms);
    Ok(())
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Whole seconds from `now_ms` to `deadline_ms`, rounded up, at least 1.
fn seconds_until(deadline_ms: u64, now_ms: u64) -> u32 {
    let seconds = deadline_ms.saturating_sub(now_ms).div_ceil(1000).max(1);
    u32::try_from(seconds).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixty_writes_fit_in_a_minute_and_the_next_waits_for_the_oldest() {
        let limits = RemoteChildLimits::new();
        for write in 0..WRITES_PER_MINUTE as u64 {
            assert_eq!(limits.take_write(1_000 + write * 100), Ok(()));
        }
        // The oldest was taken at 1,000 ms; it leaves the window at 61,000.
        assert_eq!(limits.take_write(30_000), Err(31));
        assert_eq!(limits.take_write(60_999), Err(1));
        assert_eq!(limits.take_write(61_000), Ok(()));
        assert_eq!(limits.take_write(61_000), Err(1));
    }

    #[test]
    fn a_parent_is_checked_for_unshipped_records_once_per_ten_seconds() {
        let limits = RemoteChildLimits::new();
        assert_eq!(limits.take_unshipped_check("orders", 5_000), Ok(()));
        assert_eq!(limits.take_unshipped_check("orders", 5_001), Err(10));
        assert_eq!(limits.take_unshipped_check("orders", 14_100), Err(1));
        assert_eq!(limits.take_unshipped_check("billing", 5_001), Ok(()));
        assert_eq!(limits.take_unshipped_check("orders", 15_000), Ok(()));
    }

    #[test]
    fn a_remote_is_checked_once_per_five_seconds() {
        let limits = RemoteChildLimits::new();
        assert_eq!(limits.take_remote_check("dr", 0), Ok(()));
        assert_eq!(limits.take_remote_check("dr", 2_500), Err(3));
        assert_eq!(limits.take_remote_check("other", 2_500), Ok(()));
        assert_eq!(limits.take_remote_check("dr", 5_000), Ok(()));
    }
}
