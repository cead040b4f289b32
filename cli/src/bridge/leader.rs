//! When the data node last heard of a control-plane leader, for `/readyz`.
//!
//! Heard means: a call that only a leader completes succeeded (a member
//! report, a proposal, a leader confirmation), or a control node answered
//! its status naming a leader. A follower names a leader only until its
//! election timeout runs out without one, so a lost leader stops being heard
//! within a second or two.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A leader heard longer ago than this leaves the node unready: the spec's
/// "heard from within 5 s".
pub(crate) const LEADER_HEARD_WITHIN: Duration = Duration::from_secs(5);

/// The bridge asks the current control node for its status this often, so
/// a quiet cluster (no proposals, heartbeats only every 5 s) is still heard
/// well inside [`LEADER_HEARD_WITHIN`].
pub(crate) const LEADER_POLL_INTERVAL: Duration = Duration::from_secs(1);

const _: () = assert!(LEADER_POLL_INTERVAL.as_millis() * 3 <= LEADER_HEARD_WITHIN.as_millis());

/// The last time a leader was heard.
#[derive(Debug, Default)]
pub(crate) struct LeaderHeard {
    at: Mutex<Option<Instant>>,
}

impl LeaderHeard {
    /// Notes that a leader was heard at `now`.
    pub(crate) fn note(&self, now: Instant) {
        let mut at = self.at.lock();
        if at.is_none_or(|then| then < now) {
            *at = Some(now);
        }
    }

    /// Whether a leader was heard within `window` before `now`.
    pub(crate) fn within(&self, window: Duration, now: Instant) -> bool {
        heard_within(*self.at.lock(), window, now)
    }
}

/// Pure: `heard` lies at most `window` before `now`.
fn heard_within(heard: Option<Instant>, window: Duration, now: Instant) -> bool {
    heard.is_some_and(|at| now.saturating_duration_since(at) <= window)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_heard_is_not_recent() {
        assert!(!heard_within(None, LEADER_HEARD_WITHIN, Instant::now()));
    }

    #[test]
    fn heard_inside_the_window_is_recent_and_outside_it_is_not() {
        let start = Instant::now();
        let heard = LeaderHeard::default();
        heard.note(start);
        assert!(heard.within(LEADER_HEARD_WITHIN, start + LEADER_HEARD_WITHIN));
        let later = start + LEADER_HEARD_WITHIN + Duration::from_millis(1);
        assert!(!heard.within(LEADER_HEARD_WITHIN, later));
    }

    #[test]
    fn an_older_note_never_moves_the_time_back() {
        let start = Instant::now();
        let heard = LeaderHeard::default();
        heard.note(start + Duration::from_secs(3));
        heard.note(start);
        let later = start + Duration::from_secs(3) + LEADER_HEARD_WITHIN;
        assert!(heard.within(LEADER_HEARD_WITHIN, later));
    }
}
