//! The thread that ticks the store every effective tick while it has work,
//! and sleeps without a timer while it has none.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::error;

use super::store::ConsumerStateStore;
use narad_disk::queue::{Received, Receiver, Sender};

impl ConsumerStateStore {
    /// Runs [`ConsumerStateStore::tick`] on a thread, on a grid of one
    /// effective tick from the start, until the returned worker is stopped
    /// or dropped. When a tick leaves nothing pending
    /// ([`ConsumerStateStore::has_pending`]) the thread sleeps until a
    /// ticket is touched, then ticks at the next point of the grid, so a
    /// touch is written within one tick as before. Stopping does not
    /// flush: call [`ConsumerStateStore::flush_all`] for that.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn spawn(self: &Arc<Self>) -> io::Result<StateWorker> {
        let store = Arc::clone(self);
        let nudges = self.nudges();
        let stopping = Arc::new(AtomicBool::new(false));
        let period = self.config().tick_effective();
        let thread = {
            let stopping = Arc::clone(&stopping);
            std::thread::Builder::new()
                .name("consumer-state".to_owned())
                .spawn(move || run(&store, &nudges, &stopping, period))?
        };
        Ok(StateWorker {
            stopping,
            nudge: self.nudger(),
            thread: Some(thread),
        })
    }
}

fn run(store: &ConsumerStateStore, nudges: &Receiver<()>, stopping: &AtomicBool, period: Duration) {
    let start = Instant::now();
    let mut next = start;
    loop {
        if !sleep_until(nudges, stopping, next) {
            return;
        }
        let now = Instant::now();
        store.tick(now);
        if !store.has_pending() {
            // Nothing to write: no timer until a settle touches a ticket
            // (or the stop nudges).
            let _ = nudges.recv();
            if stopping.load(Ordering::Acquire) {
                return;
            }
        }
        next = next_tick(start, period, Instant::now());
    }
}

/// Sleeps until `at`; touches do not end it (the tick comes on its
/// grid). `false` when the worker is to stop.
fn sleep_until(nudges: &Receiver<()>, stopping: &AtomicBool, at: Instant) -> bool {
    loop {
        if stopping.load(Ordering::Acquire) {
            return false;
        }
        match nudges.recv_until(Some(at)) {
            Received::Item(()) => {}
            Received::TimedOut => return !stopping.load(Ordering::Acquire),
            Received::Disconnected => return false,
        }
    }
}

/// The first point of the grid `start + k * period` after `now`: a tick
/// that ran late is followed by the next point, not by a burst.
fn next_tick(start: Instant, period: Duration, now: Instant) -> Instant {
    let period_nanos = period.as_nanos().max(1);
    let elapsed = now.saturating_duration_since(start).as_nanos();
    let ticks = elapsed / period_nanos + 1;
    let offset = u64::try_from(ticks * period_nanos).unwrap_or(u64::MAX);
    start + Duration::from_nanos(offset)
}

/// The thread started by [`ConsumerStateStore::spawn`]; stops on drop or
/// [`StateWorker::stop`].
#[derive(Debug)]
pub struct StateWorker {
    stopping: Arc<AtomicBool>,
    /// Wakes the thread to see `stopping`.
    nudge: Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl StateWorker {
    /// Stops the thread and waits for its current tick to end.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        self.stopping.store(true, Ordering::Release);
        // A full queue already holds a nudge that wakes the thread.
        let _ = self.nudge.try_send(());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            error!("consumer state thread panicked");
        }
    }
}

impl Drop for StateWorker {
    fn drop(&mut self) {
        self.shut_down();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_tick_is_the_next_point_of_the_grid() {
        let start = Instant::now();
        let period = Duration::from_millis(100);
        assert_eq!(next_tick(start, period, start), start + period);
        assert_eq!(
            next_tick(start, period, start + Duration::from_millis(250)),
            start + Duration::from_millis(300)
        );
        assert_eq!(
            next_tick(start, period, start + Duration::from_millis(300)),
            start + Duration::from_millis(400)
        );
    }
}
