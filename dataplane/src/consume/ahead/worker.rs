//! The thread that ticks the store every effective tick.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use tracing::error;

use super::store::ConsumerStateStore;

impl ConsumerStateStore {
    /// Runs [`ConsumerStateStore::tick`] on a thread every effective tick
    /// until the returned worker is stopped or dropped. Stopping does not
    /// flush: call [`ConsumerStateStore::flush_all`] for that.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn spawn(self: &Arc<Self>) -> io::Result<StateWorker> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let store = Arc::clone(self);
        let period = self.config().tick_effective();
        let thread = std::thread::Builder::new()
            .name("consumer-state".to_owned())
            .spawn(move || {
                let mut next = Instant::now();
                loop {
                    let now = Instant::now();
                    store.tick(now);
                    // After a stall, tick again one period from now rather
                    // than in a burst.
                    next = (next + period).max(now);
                    let wait = next.saturating_duration_since(Instant::now());
                    // The worker stops by dropping the sender.
                    if !matches!(
                        stopped.recv_timeout(wait),
                        Err(crossbeam_channel::RecvTimeoutError::Timeout)
                    ) {
                        return;
                    }
                }
            })?;
        Ok(StateWorker {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// The thread started by [`ConsumerStateStore::spawn`]; stops on drop or
/// [`StateWorker::stop`].
#[derive(Debug)]
pub struct StateWorker {
    stop: Option<crossbeam_channel::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl StateWorker {
    /// Stops the thread and waits for its current tick to end.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        drop(self.stop.take());
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
