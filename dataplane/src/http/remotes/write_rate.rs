//! The remote write rate: at most [`WRITES_PER_WINDOW`] remote writes
//! (create, change, delete, re-encrypt) per node in any
//! [`WINDOW_MS`] (spec §1.10: 10 a minute). A sliding log of the last
//! writes' times on the node's clock: a write is admitted when fewer than
//! the limit fall in the window ending now; a refusal says when the oldest
//! of them leaves it (`Retry-After`). Pure: the caller passes the time.

use std::collections::VecDeque;

/// Remote writes a node admits per window.
pub const WRITES_PER_WINDOW: usize = 10;
/// The window, in milliseconds.
pub const WINDOW_MS: u64 = 60_000;

/// What the limiter decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Admitted, and counted.
    Admit,
    /// Refused: retry after this many whole seconds (at least 1).
    Refuse {
        /// `Retry-After`, rounded up.
        retry_after_seconds: u32,
    },
}

/// The last admitted writes' times, oldest first; never more than
/// [`WRITES_PER_WINDOW`].
#[derive(Debug, Default)]
pub struct WriteRate {
    admitted_ms: VecDeque<u64>,
}

impl WriteRate {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Admits a write at `now_ms` (monotonic) or says how long to wait.
    pub fn admit(&mut self, now_ms: u64) -> Decision {
        while self
            .admitted_ms
            .front()
            .is_some_and(|&at| now_ms.saturating_sub(at) >= WINDOW_MS)
        {
            self.admitted_ms.pop_front();
        }
        if self.admitted_ms.len() < WRITES_PER_WINDOW {
            self.admitted_ms.push_back(now_ms);
            assert!(self.admitted_ms.len() <= WRITES_PER_WINDOW);
            return Decision::Admit;
        }
        let oldest = self.admitted_ms.front().copied().unwrap_or(now_ms);
        let wait_ms = (oldest + WINDOW_MS).saturating_sub(now_ms).max(1);
        Decision::Refuse {
            retry_after_seconds: u32::try_from(wait_ms.div_ceil(1000)).unwrap_or(u32::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use narad_clock::{Clock, ManualClock};

    use super::*;

    #[test]
    fn ten_writes_in_a_minute_pass_and_the_eleventh_waits_for_the_oldest() {
        let clock = ManualClock::new(1_000);
        let mut rate = WriteRate::new();
        for _ in 0..WRITES_PER_WINDOW {
            assert_eq!(rate.admit(clock.now_ms()), Decision::Admit);
            clock.advance(1_000);
        }
        // Now 11 000; the oldest write (1 000) leaves the window at 61 000.
        assert_eq!(
            rate.admit(clock.now_ms()),
            Decision::Refuse {
                retry_after_seconds: 50
            }
        );
        clock.set(60_999);
        assert_eq!(
            rate.admit(clock.now_ms()),
            Decision::Refuse {
                retry_after_seconds: 1
            }
        );
        clock.set(61_000);
        assert_eq!(rate.admit(clock.now_ms()), Decision::Admit);
        assert_eq!(
            rate.admit(clock.now_ms()),
            Decision::Refuse {
                retry_after_seconds: 1
            }
        );
    }

    #[test]
    fn a_refused_write_is_not_counted() {
        let mut rate = WriteRate::new();
        for _ in 0..WRITES_PER_WINDOW {
            rate.admit(0);
        }
        for _ in 0..100 {
            assert!(matches!(rate.admit(30_000), Decision::Refuse { .. }));
        }
        // Had the refusals counted, the window would still be full.
        assert_eq!(rate.admit(60_000), Decision::Admit);
    }

    #[test]
    fn a_burst_after_a_quiet_minute_is_admitted_whole() {
        let mut rate = WriteRate::new();
        for _ in 0..WRITES_PER_WINDOW {
            rate.admit(0);
        }
        for _ in 0..WRITES_PER_WINDOW {
            assert_eq!(rate.admit(120_000), Decision::Admit);
        }
    }
}
