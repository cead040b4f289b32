//! The one clock of the workspace: how time reaches the core.
//!
//! Two readings, because they answer different questions:
//! - [`Clock::now_ms`] is monotonic, counted from the clock's origin: lease
//!   expiries, long-poll deadlines, token holds and claims are measured on
//!   it, so a wall-clock step never lapses or stretches one;
//! - [`Clock::unix_ms`] is wall-clock Unix time, which records are stamped
//!   with at commit, so retention judges their age by it.
//!
//! [`SystemClock`] reads the process's clocks; [`ManualClock`] moves only
//! when a test moves it, and wakes every sleeper whose deadline it passes,
//! so tests of expiry and timeouts need no real time and no timed
//! assertions.
//!
//! It is a crate of its own, below every other, so both planes, the
//! storage crates and the outbound client share one clock without
//! depending on each other: each process makes one [`SystemClock`] at
//! start and hands it down.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// `duration` in whole milliseconds, as the clock counts them; a duration
/// too long for a `u64` is "never" (`u64::MAX`).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A future that resolves once the clock reaches a deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Monotonic and wall-clock milliseconds, and sleeping until a point on
/// the monotonic clock.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the clock's origin; never decreases.
    fn now_ms(&self) -> u64;

    /// Microseconds since the clock's origin, on the same monotonic clock
    /// as [`Clock::now_ms`]: for how long something took (a latency
    /// histogram), where milliseconds are too coarse.
    fn now_us(&self) -> u64 {
        self.now_ms().saturating_mul(1_000)
    }

    /// Now in Unix milliseconds, as records are stamped; may step back or
    /// forward with the system's clock, so never measure a deadline on it.
    fn unix_ms(&self) -> u64;

    /// Resolves once [`Clock::now_ms`] is at or past `deadline_ms` (at once
    /// if it already is).
    fn sleep_until(&self, deadline_ms: u64) -> Sleep;
}

/// The process's clocks; the monotonic one counted from when this value
/// was made. Sleeping needs a Tokio runtime with the time driver.
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose monotonic reading is zero now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        millis(self.origin.elapsed())
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn unix_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, millis)
    }

    fn sleep_until(&self, deadline_ms: u64) -> Sleep {
        let deadline = self
            .origin
            .checked_add(Duration::from_millis(deadline_ms))
            // Far enough to be "never" for a lease or a long poll.
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        Box::pin(tokio::time::sleep_until(tokio::time::Instant::from_std(
            deadline,
        )))
    }
}

/// A clock that moves only when told to (tests). Its wall clock reads the
/// same as its monotonic one: a test's Unix epoch is the clock's origin.
#[derive(Debug)]
pub struct ManualClock {
    now_ms: watch::Sender<u64>,
}

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self {
            now_ms: watch::Sender::new(now_ms),
        }
    }

    /// Moves the clock forward by `ms`, waking sleepers it passes.
    pub fn advance(&self, ms: u64) {
        self.now_ms.send_modify(|now| *now = now.saturating_add(ms));
    }

    /// Moves the clock to `now_ms`.
    ///
    /// # Panics
    /// If that is earlier than now: the clock is monotonic.
    pub fn set(&self, now_ms: u64) {
        self.now_ms.send_modify(|now| {
            assert!(
                now_ms >= *now,
                "a monotonic clock cannot go back from {now} to {now_ms}"
            );
            *now = now_ms;
        });
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        *self.now_ms.borrow()
    }

    fn unix_ms(&self) -> u64 {
        self.now_ms()
    }

    fn sleep_until(&self, deadline_ms: u64) -> Sleep {
        let mut now = self.now_ms.subscribe();
        Box::pin(async move {
            // An error means the clock was dropped; nobody can move it any
            // more, so the sleep ends rather than hang.
            let _ = now.wait_for(|now| *now >= deadline_ms).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance(250);
        assert_eq!(clock.now_ms(), 1_250);
        clock.set(2_000);
        assert_eq!((clock.now_ms(), clock.unix_ms()), (2_000, 2_000));
        assert_eq!(clock.now_us(), 2_000_000);
    }

    #[test]
    #[should_panic(expected = "cannot go back")]
    fn a_manual_clock_refuses_to_go_back() {
        ManualClock::new(1_000).set(999);
    }

    #[test]
    fn a_sleep_on_a_manual_clock_ends_when_the_clock_reaches_its_deadline() {
        let clock = ManualClock::new(0);
        let mut sleep = clock.sleep_until(100);
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        assert!(sleep.as_mut().poll(&mut context).is_pending());
        clock.advance(99);
        assert!(sleep.as_mut().poll(&mut context).is_pending());
        clock.advance(1);
        assert!(sleep.as_mut().poll(&mut context).is_ready());
    }
}
