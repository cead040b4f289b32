//! The release pass: lets go of the shards that
//! [`release_due`](crate::consume::release::release_due) finds idle, each
//! with its log and its consumer-state registration, its position written
//! out first. The retention thread runs it before each idle log eviction
//! ([`crate::partitions::retention`]), so a log only a released shard held
//! can be closed by the same pass.
//!
//! A shard is taken off the map under its partition's gate (so no open of
//! the partition runs meanwhile, and the next open waits until the
//! position is written out) and only while the map holds the one
//! reference to it: a consume, settle or pump working on it holds another,
//! and the shard is kept. Once off the map nobody can reach it, so what it
//! held can no longer change.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::ConsumeService;
use super::shards::PartitionShard;
use crate::consume::release::{ShardIdleness, release_due};
use crate::partitions::LogHolders;
use crate::topology::Destination;

impl ConsumeService {
    /// Releases every shard idle for `consume.idle_shard_release_ms` at
    /// the clock's now, with no live lease and no consume parked on its
    /// topic. Its position is written out (fdatasync) before it goes; one
    /// whose consumer state is latched by a disk error is kept, since it
    /// holds the only current copy of its position. Returns how many it
    /// released. Blocks on the disk: run it off the async workers.
    pub fn release_idle_shards(&self) -> usize {
        let idle_after = self.config.idle_shard_release;
        if idle_after.is_none() || self.shut_down.load(Ordering::Acquire) {
            return 0;
        }
        let now_ms = self.clock.now_ms();
        let shards: Vec<Arc<PartitionShard>> = self.shards.lock().values().cloned().collect();
        let mut candidates = Vec::new();
        let mut returned: Vec<Arc<str>> = Vec::new();
        for shard in &shards {
            let (idleness, purged) = self.idleness(shard, now_ms);
            if purged > 0 && !returned.contains(&shard.destination.topic) {
                returned.push(Arc::clone(&shard.destination.topic));
            }
            if release_due(idleness, now_ms, idle_after) {
                candidates.push(shard.destination.clone());
            }
        }
        // The map must hold the only reference when a shard is taken off.
        drop(shards);
        for topic in &returned {
            self.pump(topic);
        }
        let mut released = 0;
        for destination in candidates {
            if self.under_gate(&destination, || self.release_shard(&destination, now_ms)) {
                released += 1;
            }
        }
        self.shards_released
            .fetch_add(released as u64, Ordering::Relaxed);
        released
    }

    /// Consume shards open now.
    pub fn shards_open(&self) -> usize {
        self.shards.lock().len()
    }

    /// Shards released as idle since the service was made.
    pub fn shards_released(&self) -> u64 {
        self.shards_released.load(Ordering::Relaxed)
    }

    /// `shard`'s figures for the release decision at `now_ms`, lapsed
    /// leases purged first; and how many lapsed.
    fn idleness(&self, shard: &PartitionShard, now_ms: u64) -> (ShardIdleness, usize) {
        let (leases, purged) = {
            let mut state = shard.state.lock();
            let purged = state.purge_expired(now_ms);
            (state.in_flight(), purged)
        };
        let idleness = ShardIdleness {
            active_at_ms: shard.active_at_ms.load(Ordering::Relaxed),
            leases,
            parked: self.waiters.count(&shard.destination.topic),
        };
        (idleness, purged)
    }

    /// Takes `destination`'s shard off the map if it is still idle and
    /// nobody else holds it, and lets its consumer state go: written out
    /// when the partition is still served here, dropped when it is not (a
    /// retirement would have dropped it). Runs under the partition's gate.
    /// Returns whether the shard was released.
    fn release_shard(&self, destination: &Destination, now_ms: u64) -> bool {
        let shard = {
            let mut shards = self.shards.lock();
            let Some(shard) = shards.get(destination) else {
                return false;
            };
            // Only the map holds it, so nobody else can reach its state:
            // the figures read now stay true once it is off the map.
            if Arc::strong_count(shard) != 1
                || !release_due(
                    self.idleness(shard, now_ms).0,
                    now_ms,
                    self.config.idle_shard_release,
                )
            {
                return false;
            }
            shards.remove(destination)
        };
        let Some(shard) = shard else {
            return false;
        };
        if !self.still_served(&shard) {
            self.store.detach(&shard.dir);
            return true;
        }
        match self.store.release(&shard.dir) {
            Ok(()) => {
                tracing::debug!(%destination, "idle consume shard released");
                true
            }
            Err(error) => {
                tracing::warn!(%destination, %error, "idle consume shard kept: its position is not durable");
                self.shards.lock().insert(destination.clone(), shard);
                false
            }
        }
    }

    /// Whether the replica still has `shard`'s incarnation of its topic,
    /// with its partition on this node.
    fn still_served(&self, shard: &PartitionShard) -> bool {
        self.replica
            .topic_meta(&shard.destination.topic)
            .is_some_and(|meta| {
                meta.incarnation_id == shard.incarnation
                    && self.owns(&meta, shard.destination.partition)
            })
    }
}

/// The retention thread asks the service to let go of idle shards before
/// it closes idle logs.
impl LogHolders for ConsumeService {
    fn release_idle(&self) -> usize {
        self.release_idle_shards()
    }
}
