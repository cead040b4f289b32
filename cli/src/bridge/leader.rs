//! When the data node last heard of a control-plane leader, for `/readyz`.
//!
//! Heard means: a call that only a leader completes succeeded (a member
//! report, a proposal, a leader confirmation), or a control node answered
//! its status naming a leader. A follower names a leader only until its
//! election timeout runs out without one, so a lost leader stops being heard
//! within a second or two.

use std::time::Duration;

use narad_clock::millis;

use parking_lot::Mutex;

/// A leader heard longer ago than this leaves the node unready: the spec's
/// "heard from within 5 s".
pub(crate) const LEADER_HEARD_WITHIN: Duration = Duration::from_secs(5);

/// The bridge asks the current control node for its status this often, so
/// a quiet cluster (no proposals, heartbeats only every 5 s) is still heard
/// well inside [`LEADER_HEARD_WITHIN`].
pub(crate) const LEADER_POLL_INTERVAL: Duration = Duration::from_secs(1);

const _: () = assert!(LEADER_POLL_INTERVAL.as_millis() * 3 <= LEADER_HEARD_WITHIN.as_millis());

/// The last time a leader was heard, on the node's monotonic clock (ms).
#[derive(Debug, Default)]
pub(crate) struct LeaderHeard {
    at_ms: Mutex<Option<u64>>,
}

impl LeaderHeard {
    /// Notes that a leader was heard at `now_ms`.
    pub(crate) fn note(&self, now_ms: u64) {
        let mut at_ms = self.at_ms.lock();
        if at_ms.is_none_or(|then| then < now_ms) {
            *at_ms = Some(now_ms);
        }
    }

    /// Whether a leader was heard within `window` before `now_ms`.
    pub(crate) fn within(&self, window: Duration, now_ms: u64) -> bool {
        heard_within(*self.at_ms.lock(), window, now_ms)
    }
}

/// Pure: `heard_ms` lies at most `window` before `now_ms`.
fn heard_within(heard_ms: Option<u64>, window: Duration, now_ms: u64) -> bool {
    heard_ms.is_some_and(|at_ms| now_ms.saturating_sub(at_ms) <= millis(window))
}

#[cfg(test)]
mod tests {
    use super::*;

    const WITHIN_MS: u64 = LEADER_HEARD_WITHIN.as_secs() * 1_000;

    #[test]
    fn never_heard_is_not_recent() {
        assert!(!heard_within(None, LEADER_HEARD_WITHIN, 7_000));
    }

    #[test]
    fn heard_inside_the_window_is_recent_and_outside_it_is_not() {
        let start: u64 = 7_000;
        let heard = LeaderHeard::default();
        heard.note(start);
        assert!(heard.within(LEADER_HEARD_WITHIN, start + WITHIN_MS));
        let later = start + WITHIN_MS + 1;
        assert!(!heard.within(LEADER_HEARD_WITHIN, later));
    }

    #[test]
    fn an_older_note_never_moves_the_time_back() {
        let start: u64 = 7_000;
        let heard = LeaderHeard::default();
        heard.note(start + 3_000);
        heard.note(start);
        let later = start + 3_000 + WITHIN_MS;
        assert!(heard.within(LEADER_HEARD_WITHIN, later));
    }
}
