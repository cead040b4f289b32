//! The monotonic millisecond clock leases run on.
//!
//! Lease expiry and long-poll deadlines are measured on one clock that
//! never goes backwards and starts near zero: [`SystemClock`] counts from
//! its creation over [`Instant`]; [`ManualClock`] moves only when a test
//! moves it, and wakes every sleeper whose deadline it passes, so tests of
//! expiry and timeouts need no real time and no timed assertions.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// A future that resolves once the clock reaches a deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Milliseconds on a monotonic clock, and sleeping until a point on it.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the clock's origin; never decreases.
    fn now_ms(&self) -> u64;

    /// Resolves once [`Clock::now_ms`] is at or past `deadline_ms` (at once
    /// if it already is).
    fn sleep_until(&self, deadline_ms: u64) -> Sleep;
}

/// The process's monotonic clock, counted from when this value was made.
/// Sleeping needs a Tokio runtime with the time driver.
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock at zero now.
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
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
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

/// A clock that moves only when told to (tests).
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

    fn sleep_until(&self, deadline_ms: u64) -> Sleep {
        let mut now = self.now_ms.subscribe();
        Box::pin(async move {
            // An error means the clock was dropped; nobody can move it any
            // more, so the sleep ends rather than hang.
            let _ = now.wait_for(|now| *now >= deadline_ms).await;
        })
    }
}
