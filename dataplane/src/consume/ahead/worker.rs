//! The thread that ticks the store every effective tick while it has work,
//! and sleeps without a timer while it has none. Its grid is laid on the
//! node's clock.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use narad_clock::Clock;
use tracing::error;

use super::store::ConsumerStateStore;
use narad_disk::queue::{Received, Receiver, Sender};

impl ConsumerStateStore {
    /// Runs [`ConsumerStateStore::tick`] on a thread, on a grid of one
    /// effective tick from the start, read on `clock` (the node's), until
    /// the returned worker is stopped or dropped. When a tick leaves nothing pending
    /// ([`ConsumerStateStore::has_pending`]) the thread sleeps until a
    /// ticket is touched, then ticks at the next point of the grid, so a
    /// touch is written within one tick as before. Stopping does not
    /// flush: call [`ConsumerStateStore::flush_all`] for that.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn spawn(self: &Arc<Self>, clock: Arc<dyn Clock>) -> io::Result<StateWorker> {
        let store = Arc::clone(self);
        let nudges = self.nudges();
        let stopping = Arc::new(AtomicBool::new(false));
        let period_ms = self.config().tick_effective_ms();
        let thread = {
            let stopping = Arc::clone(&stopping);
            std::thread::Builder::new()
                .name("consumer-state".to_owned())
                .spawn(move || run(&store, &*clock, &nudges, &stopping, period_ms))?
        };
        Ok(StateWorker {
            stopping,
            nudge: self.nudger(),
            thread: Some(thread),
        })
    }
}

fn run(
    store: &ConsumerStateStore,
    clock: &dyn Clock,
    nudges: &Receiver<()>,
    stopping: &AtomicBool,
    period_ms: u64,
) {
    let start_ms = clock.now_ms();
    let mut next_ms = start_ms;
    loop {
        if !sleep_until(clock, nudges, stopping, next_ms) {
            return;
        }
        store.tick(clock.now_ms());
        if !store.has_pending() {
            // Nothing to write: no timer until a settle touches a ticket
            // (or the stop nudges).
            let _ = nudges.recv();
            if stopping.load(Ordering::Acquire) {
                return;
            }
        }
        next_ms = next_tick_ms(start_ms, period_ms, clock.now_ms());
    }
}

/// Sleeps until `clock` reads `at_ms`; touches do not end it (the tick
/// comes on its grid). `false` when the worker is to stop. The thread
/// blocks for the time the clock says is left, then reads the clock again:
/// a wait that ends early, or a clock that did not move meanwhile, costs
/// only another turn.
fn sleep_until(
    clock: &dyn Clock,
    nudges: &Receiver<()>,
    stopping: &AtomicBool,
    at_ms: u64,
) -> bool {
    loop {
        if stopping.load(Ordering::Acquire) {
            return false;
        }
        let now_ms = clock.now_ms();
        if now_ms >= at_ms {
            return true;
        }
        match nudges.recv_timeout(Duration::from_millis(at_ms - now_ms)) {
            Received::Item(()) | Received::TimedOut => {}
            Received::Disconnected => return false,
        }
    }
}

/// The first point of the grid `start_ms + k * period_ms` after `now_ms`:
/// a tick that ran late is followed by the next point, not by a burst.
fn next_tick_ms(start_ms: u64, period_ms: u64, now_ms: u64) -> u64 {
    let period_ms = period_ms.max(1);
    let ticks = now_ms.saturating_sub(start_ms) / period_ms + 1;
    start_ms.saturating_add(ticks.saturating_mul(period_ms))
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
        assert_eq!(next_tick_ms(1_000, 100, 1_000), 1_100);
        assert_eq!(next_tick_ms(1_000, 100, 1_250), 1_300);
        assert_eq!(next_tick_ms(1_000, 100, 1_300), 1_400);
    }
}
