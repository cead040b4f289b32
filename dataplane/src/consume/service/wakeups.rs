//! What wakes the pump besides a consume arriving: the expiry timer (the
//! earliest lease expiry a parked consume waits on), every metadata change,
//! and each partition's high watermark moving.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};

use narad_plog::HwmWatch;
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::task::AbortHandle;

use super::ConsumeService;
use super::shards::PartitionShard;
use narad_clock::Clock;

/// The single expiry timer: sleeps until the earliest lease expiry that a
/// parked consume waits on.
#[derive(Debug, Default)]
pub(super) struct ExpiryTimer {
    pub(super) at_ms: Mutex<Option<u64>>,
    pub(super) rearm: Notify,
    pub(super) task: OnceLock<AbortHandle>,
}

impl ConsumeService {
    pub(super) fn next_expiry_ms(&self, topic: &str) -> Option<u64> {
        let shards: Vec<Arc<PartitionShard>> = self
            .shards
            .lock()
            .values()
            .filter(|shard| &*shard.destination.topic == topic)
            .cloned()
            .collect();
        shards
            .iter()
            .filter_map(|shard| shard.state.lock().next_expiry_ms())
            .min()
    }

    pub(super) fn arm_timer(&self, at_ms: u64) {
        let mut armed = self.timer.at_ms.lock();
        if armed.is_none_or(|current| at_ms < current) {
            *armed = Some(at_ms);
            self.timer.rearm.notify_one();
        }
    }

    /// Remembers the calling Tokio runtime and starts the expiry timer and
    /// the metadata watcher on it, once: when the node starts, or on the
    /// first consume for a service built outside any runtime.
    pub(crate) fn start_runtime_tasks(&self) {
        if self.runtime.get().is_some() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.runtime.set(handle.clone()).is_err() {
            return;
        }
        let task = handle.spawn(run_expiry_timer(
            self.this.clone(),
            Arc::clone(&self.timer),
            Arc::clone(&self.clock),
        ));
        let _ = self.timer.task.set(task.abort_handle());
        let task = handle.spawn(watch_metadata(
            self.this.clone(),
            self.replica.watch_changes(),
        ));
        let _ = self.metadata_task.set(task.abort_handle());
    }

    /// Starts the shard's high-watermark watcher if it has none.
    pub(super) fn ensure_watcher(&self, shard: &PartitionShard) {
        let Some(handle) = self.runtime.get() else {
            return;
        };
        if self.shut_down.load(Ordering::Acquire) {
            return;
        }
        let mut watcher = shard.watcher.lock();
        if watcher.is_none() {
            // The starting point is taken now, before the caller reads the
            // log: a commit landing before the task first runs still wakes
            // it.
            let watch = shard.log.watch_high_watermark();
            let seen = watch.high_watermark();
            let task = handle.spawn(watch_commits(
                self.this.clone(),
                Arc::clone(&shard.destination.topic),
                watch,
                seen,
            ));
            *watcher = Some(task.abort_handle());
        }
    }
}

/// Sleeps until the armed expiry, then pumps every topic with waiters.
async fn run_expiry_timer(
    service: Weak<ConsumeService>,
    timer: Arc<ExpiryTimer>,
    clock: Arc<dyn Clock>,
) {
    loop {
        let armed = *timer.at_ms.lock();
        let Some(at_ms) = armed else {
            timer.rearm.notified().await;
            continue;
        };
        tokio::select! {
            () = clock.sleep_until(at_ms) => {}
            () = timer.rearm.notified() => continue,
        }
        {
            let mut armed = timer.at_ms.lock();
            if *armed == Some(at_ms) {
                *armed = None;
            }
        }
        let Some(service) = service.upgrade() else {
            return;
        };
        for topic in service.waiters.topics() {
            service.pump(&topic);
        }
    }
}

/// Pumps every topic with waiters after each metadata change: a parked
/// consume skipped partitions that had no owner yet (a topic created a
/// moment ago) or were at a cap, and a commit to such a partition wakes no
/// watcher until a pump has opened its shard.
async fn watch_metadata(service: Weak<ConsumeService>, mut changes: watch::Receiver<u64>) {
    while changes.changed().await.is_ok() {
        let Some(service) = service.upgrade() else {
            return;
        };
        for topic in service.waiters.topics() {
            service.pump(&topic);
        }
    }
}

/// Pumps the topic's waiters whenever the partition's high watermark
/// moves past `seen`; ends when the log closes or the service is gone.
async fn watch_commits(
    service: Weak<ConsumeService>,
    topic: Arc<str>,
    mut watch: HwmWatch,
    mut seen: u64,
) {
    while let Ok(high_watermark) = watch.wait_beyond(seen).await {
        seen = high_watermark;
        let Some(service) = service.upgrade() else {
            return;
        };
        // Unconditionally: a waiter a running pump holds is in no line, so
        // "anyone waiting?" would say no and the pump would put it back
        // without having seen this commit. Asking for a pump while one
        // runs makes that pump go round again.
        service.pump(&topic);
    }
}
