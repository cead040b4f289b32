//! The shard of each owned partition: made on first touch (its log
//! opened, its position loaded from the consumer state store, to which it
//! reports back), replaced when the topic's incarnation changes, retired
//! when the partition is no longer served here, released when idle
//! (`release`) and made again on the next touch.
//!
//! Every shard made draws its lease nonces from a stream of its own: the
//! service's seed (new at each process start) mixed with the partition,
//! its incarnation and the shard's ordinal among the shards this service
//! made. So a shard made again after a release (or after the partition
//! moved away and back) never replays the nonces of an earlier shard of
//! the partition, just as a restart does not: a receipt handle of the
//! earlier shard matches a lease of the new one only if two independent
//! 64-bit draws collide.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use narad_plog::PartitionLog;
use parking_lot::Mutex;
use tokio::task::AbortHandle;

use super::reads::{NeedsDisk, Reads};
use super::{ConsumeError, ConsumeService};
use crate::consume::ahead::{ConsumerPosition, PositionSource, StateTicket};
use crate::consume::shard::InFlightShard;
use crate::metadata::TopicMeta;
use crate::partitions::partition_dir;
use crate::topology::Destination;

/// One owned partition: its log, its shard, its persistence ticket.
#[derive(Debug)]
pub(super) struct PartitionShard {
    pub(super) destination: Destination,
    pub(super) incarnation: Option<Arc<str>>,
    pub(super) dir: PathBuf,
    pub(super) log: Arc<PartitionLog>,
    pub(super) state: Mutex<InFlightShard>,
    pub(super) ticket: OnceLock<StateTicket>,
    pub(super) watcher: Mutex<Option<AbortHandle>>,
    /// When a consumer last used the shard, on the node's monotonic clock
    /// (`release`).
    pub(super) active_at_ms: AtomicU64,
}

impl PositionSource for PartitionShard {
    fn position(&self) -> ConsumerPosition {
        self.state.lock().position()
    }
}

impl PartitionShard {
    pub(super) fn touch(&self) {
        if let Some(ticket) = self.ticket.get() {
            ticket.touched();
        }
    }

    /// Marks a use at `now_ms`: the shard is not idle before
    /// `consume.idle_shard_release_ms` from now.
    pub(super) fn used(&self, now_ms: u64) {
        self.active_at_ms.fetch_max(now_ms, Ordering::Relaxed);
    }
}

impl Drop for PartitionShard {
    fn drop(&mut self) {
        if let Some(watcher) = self.watcher.get_mut().take() {
            watcher.abort();
        }
    }
}

impl ConsumeService {
    /// The shard of an owned partition, made on first touch: the log is
    /// opened and the position loaded from the consumer state store.
    pub(super) fn shard(
        &self,
        meta: &TopicMeta,
        partition: u32,
    ) -> Result<Arc<PartitionShard>, ConsumeError> {
        let destination = Destination {
            topic: Arc::clone(&meta.name),
            partition,
        };
        if let Some(shard) = self.existing_shard(meta, partition) {
            self.ensure_watcher(&shard);
            return Ok(shard);
        }
        // Opening reads and syncs files: it runs under this partition's
        // gate only, so consumes and settles of other partitions go on.
        let shard = self.under_gate(&destination, || self.open_shard(&destination, meta))?;
        self.ensure_watcher(&shard);
        Ok(shard)
    }

    /// The shard of an owned partition as `reads` allows: one not open yet
    /// is opened only where the disk may be read (opening reads the log
    /// and the consumer state files).
    ///
    /// # Errors
    /// [`NeedsDisk`] when the shard is not open and only memory may be
    /// read; inside, the errors of [`ConsumeService::shard`].
    pub(super) fn shard_for(
        &self,
        meta: &TopicMeta,
        partition: u32,
        reads: Reads,
    ) -> Result<Result<Arc<PartitionShard>, ConsumeError>, NeedsDisk> {
        match reads {
            Reads::Disk => Ok(self.shard(meta, partition)),
            Reads::Memory => {
                let shard = self.existing_shard(meta, partition).ok_or(NeedsDisk)?;
                self.ensure_watcher(&shard);
                Ok(Ok(shard))
            }
        }
    }

    /// Runs `work` under `destination`'s gate, which every open and every
    /// release of the partition's shard holds: one at a time.
    pub(super) fn under_gate<T>(&self, destination: &Destination, work: impl FnOnce() -> T) -> T {
        let gate = Arc::clone(self.opening.lock().entry(destination.clone()).or_default());
        let done = {
            let _gate = gate.lock();
            work()
        };
        let mut opening = self.opening.lock();
        if opening
            .get(destination)
            .is_some_and(|entry| Arc::ptr_eq(entry, &gate) && Arc::strong_count(entry) == 2)
        {
            opening.remove(destination);
        }
        done
    }

    /// Makes the shard of `destination` unless another consume made it
    /// meanwhile; a shard of an older incarnation is detached first.
    fn open_shard(
        &self,
        destination: &Destination,
        meta: &TopicMeta,
    ) -> Result<Arc<PartitionShard>, ConsumeError> {
        if let Some(shard) = self.existing_shard(meta, destination.partition) {
            return Ok(shard);
        }
        // A request holding an older view of the topic must not replace
        // the live incarnation's shard.
        let live = self.replica.topic_meta(&destination.topic);
        if live.is_none_or(|live| live.incarnation_id != meta.incarnation_id) {
            return Err(ConsumeError::Read(format!(
                "topic {} changed during the request",
                destination.topic
            )));
        }
        // The topic was deleted and made again under the same name.
        let stale = self.shards.lock().remove(destination);
        if let Some(stale) = stale {
            self.store.detach(&stale.dir);
        }
        let log = self
            .logs
            .resolve(destination, meta.incarnation_id.as_ref())
            .map_err(|error| ConsumeError::Read(error.to_string()))?;
        let shard = self.attach_shard(destination.clone(), meta, log)?;
        self.shards
            .lock()
            .insert(destination.clone(), Arc::clone(&shard));
        Ok(shard)
    }

    fn attach_shard(
        &self,
        destination: Destination,
        meta: &TopicMeta,
        log: Arc<PartitionLog>,
    ) -> Result<Arc<PartitionShard>, ConsumeError> {
        let dir = partition_dir(&self.data_dir, &destination.topic, destination.partition);
        let ordinal = self.shards_made.fetch_add(1, Ordering::Relaxed);
        let nonce_seed = nonce_seed(
            self.seed,
            &destination,
            meta.incarnation_id.as_deref(),
            ordinal,
        );
        let shard = Arc::new(PartitionShard {
            destination,
            incarnation: meta.incarnation_id.clone(),
            dir,
            log,
            state: Mutex::new(InFlightShard::new(ConsumerPosition::default(), nonce_seed)),
            ticket: OnceLock::new(),
            watcher: Mutex::new(None),
            active_at_ms: AtomicU64::new(self.clock.now_ms()),
        });
        let source: Weak<dyn PositionSource> = Arc::downgrade(&shard) as Weak<PartitionShard>;
        {
            // Held across attach so that the store, which may ask for the
            // position as soon as attach registered it, waits for the
            // seeded state instead of reading the placeholder. The store
            // cannot ask this shard during attach itself: it is not
            // registered before attach returns.
            let mut state = shard.state.lock();
            let (position, ticket) = self
                .store
                .attach(&shard.dir, source)
                .map_err(|error| ConsumeError::Read(error.to_string()))?;
            *state = InFlightShard::new(position, nonce_seed);
            // Set once, right after the shard was made.
            let _ = shard.ticket.set(ticket);
        }
        Ok(shard)
    }

    pub(super) fn existing_shard(
        &self,
        meta: &TopicMeta,
        partition: u32,
    ) -> Option<Arc<PartitionShard>> {
        let destination = Destination {
            topic: Arc::clone(&meta.name),
            partition,
        };
        let shard = self
            .shards
            .lock()
            .get(&destination)
            .filter(|shard| shard.incarnation == meta.incarnation_id)
            .cloned()?;
        // Every lookup is for a consumer's work: a consume or a pump
        // scanning it, a settle, a hold or claim, a handoff.
        shard.used(self.clock.now_ms());
        Some(shard)
    }

    /// Retires the shards of `topic`'s incarnation `incarnation` (deleted,
    /// or replaced under the same name): each is detached from the
    /// consumer state store, which drops its pending writes, so nothing
    /// more is written into the topic's directory. Returns how many were
    /// retired. The housekeeping calls it before it renames the directory.
    pub fn retire_incarnation(&self, topic: &str, incarnation: Option<&str>) -> usize {
        let retired: Vec<Arc<PartitionShard>> = {
            let mut shards = self.shards.lock();
            let keys: Vec<Destination> = shards
                .iter()
                .filter(|(destination, shard)| {
                    &*destination.topic == topic && shard.incarnation.as_deref() == incarnation
                })
                .map(|(destination, _)| destination.clone())
                .collect();
            keys.iter().filter_map(|key| shards.remove(key)).collect()
        };
        for shard in &retired {
            self.store.detach(&shard.dir);
            if let Some(watcher) = shard.watcher.lock().take() {
                watcher.abort();
            }
            tracing::info!(destination = %shard.destination, "consume shard retired: its topic incarnation is gone");
        }
        self.await_gates(topic);
        retired.len()
    }

    /// Waits for every open or release of a `topic` shard under way: a
    /// release writes its shard's position out after taking it off the
    /// map, where a retirement does not see it.
    fn await_gates(&self, topic: &str) {
        let gates: Vec<Arc<Mutex<()>>> = self
            .opening
            .lock()
            .iter()
            .filter(|(destination, _)| &*destination.topic == topic)
            .map(|(_, gate)| Arc::clone(gate))
            .collect();
        for gate in gates {
            drop(gate.lock());
        }
    }

    pub(super) fn retire_stale_shards(&self) {
        let view = self.replica.view();
        let local = self.replica.local_node();
        let mut shards = self.shards.lock();
        let stale: Vec<Destination> = shards
            .iter()
            .filter(|(destination, shard)| {
                view.topics.get(&destination.topic).is_none_or(|meta| {
                    meta.incarnation_id != shard.incarnation
                        || meta
                            .owners
                            .get(destination.partition as usize)
                            .copied()
                            .flatten()
                            != Some(local)
                })
            })
            .map(|(destination, _)| destination.clone())
            .collect();
        for destination in stale {
            if let Some(shard) = shards.remove(&destination) {
                self.store.detach(&shard.dir);
                tracing::info!(%destination, "consume shard retired: partition no longer served here");
            }
        }
    }
}

/// A shard's nonce seed: the service seed mixed with its partition's name
/// and incarnation and the shard's `ordinal` among the shards the service
/// made (SplitMix64 steps), so partitions, and the successive shards of
/// one partition, draw unrelated streams.
fn nonce_seed(
    seed: u64,
    destination: &Destination,
    incarnation: Option<&str>,
    ordinal: u64,
) -> u64 {
    let mut state = seed;
    let bytes = destination
        .topic
        .bytes()
        .chain([0xff])
        .chain(destination.partition.to_be_bytes())
        .chain(incarnation.unwrap_or("").bytes())
        .chain([0xff])
        .chain(ordinal.to_be_bytes());
    for byte in bytes {
        state = splitmix64(state ^ u64::from(byte));
    }
    state
}

fn splitmix64(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successive_shards_of_a_partition_draw_unrelated_seeds() {
        let destination = Destination::new("orders", 0);
        let seeds: std::collections::BTreeSet<u64> = (0..1_000)
            .map(|ordinal| nonce_seed(7, &destination, Some("a1"), ordinal))
            .collect();
        assert_eq!(seeds.len(), 1_000);
    }

    #[test]
    fn the_seed_depends_on_the_partition_and_its_incarnation() {
        let seed = |topic, partition, incarnation| {
            nonce_seed(7, &Destination::new(topic, partition), incarnation, 0)
        };
        let base = seed("orders", 0, Some("a1"));
        assert_ne!(base, seed("orders", 1, Some("a1")));
        assert_ne!(base, seed("orderz", 0, Some("a1")));
        assert_ne!(base, seed("orders", 0, Some("a2")));
        assert_ne!(base, seed("orders", 0, None));
        assert_eq!(base, seed("orders", 0, Some("a1")));
    }
}
