//! How long to wait before dialling a peer again after a dial failed.
//!
//! A pure state machine: the caller passes the time in, so tests need no
//! clock. Only genuine dial failures (no handshake, a refused handshake, a
//! timeout) feed it; a dial that was never attempted does not.

use std::time::Duration;

use tokio::time::Instant;

use crate::limits::{DIAL_BACKOFF_MAX, DIAL_BACKOFF_MIN};

/// The backoff of one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DialBackoff {
    next_wait: Duration,
    retry_at: Option<Instant>,
}

impl Default for DialBackoff {
    fn default() -> Self {
        Self {
            next_wait: DIAL_BACKOFF_MIN,
            retry_at: None,
        }
    }
}

impl DialBackoff {
    /// `Ok` if a dial may start at `now`, else how long is left to wait.
    pub(crate) fn admit(&self, now: Instant) -> Result<(), Duration> {
        match self.retry_at {
            Some(retry_at) if now < retry_at => Err(retry_at - now),
            _ => Ok(()),
        }
    }

    /// A dial failed at `now`: wait, then double the next wait up to the cap.
    pub(crate) fn failed(&mut self, now: Instant) {
        self.retry_at = Some(now + self.next_wait);
        self.next_wait = (self.next_wait * 2).min(DIAL_BACKOFF_MAX);
    }

    /// A dial succeeded: the next failure starts from the minimum again.
    pub(crate) fn succeeded(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_peer_is_dialled_at_once() {
        assert_eq!(DialBackoff::default().admit(Instant::now()), Ok(()));
    }

    #[test]
    fn waits_double_from_250_ms_to_a_2_s_cap() {
        let start = Instant::now();
        let mut backoff = DialBackoff::default();
        let mut waits = Vec::new();
        for _ in 0..6 {
            backoff.failed(start);
            waits.push(backoff.admit(start).expect_err("waiting"));
        }
        let millis: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(millis, [250, 500, 1000, 2000, 2000, 2000]);
    }

    #[test]
    fn dial_is_admitted_once_the_wait_has_passed() {
        let start = Instant::now();
        let mut backoff = DialBackoff::default();
        backoff.failed(start);
        assert_eq!(
            backoff.admit(start + Duration::from_millis(100)),
            Err(Duration::from_millis(150))
        );
        assert_eq!(backoff.admit(start + DIAL_BACKOFF_MIN), Ok(()));
    }

    #[test]
    fn success_resets_the_backoff() {
        let start = Instant::now();
        let mut backoff = DialBackoff::default();
        backoff.failed(start);
        backoff.failed(start);
        backoff.succeeded();
        assert_eq!(backoff, DialBackoff::default());
    }
}
