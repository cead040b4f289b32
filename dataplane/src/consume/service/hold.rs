//! Records held back for a delivery-token holder (spec §3 "Cross-node
//! consume"): when a record commits, the owner leases one ready record per
//! token it spends for a short hold, tells the token's holder, and turns
//! the hold into an ordinary lease when the holder's claim arrives.
//!
//! A hold is an ordinary lease whose expiry is the hold's deadline, under
//! a nonce nobody outside this node has seen. So it reserves nothing that
//! can leak: a claim that never comes leaves a lease that lapses at the
//! deadline like any other, and the expiry timer hands the record to
//! whoever waits. Until then every other consumer, local or remote, skips
//! it, as it skips any leased record. Parked local consumes are served
//! before a hold is taken (the pump runs first), so holds only take what no
//! local consume was waiting for.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use narad_clock::millis;

use narad_plog::ReadLimits;

use super::lease::{Leased, read_leased};
use super::reads::{self, NeedsDisk, Reads};
use super::shards::PartitionShard;
use super::{ConsumeService, Delivery, limits};
use crate::consume::shard::{Reserve, Settle};
use crate::metadata::TopicMeta;
use crate::topology::Destination;

/// One record held for a token holder: its lease, under the hold's nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldRecord {
    /// The partition.
    pub partition: u32,
    /// The held offset.
    pub offset: u64,
    /// The hold's nonce; the claim keeps it as the receipt handle's.
    pub nonce: u64,
    /// The hold lapses then, on the lease clock.
    pub expires_at_ms: u64,
}

impl ConsumeService {
    /// Leases up to `count` ready records of `topic` for `hold` each,
    /// after serving the topic's parked consumes. Fewer (or none) when
    /// fewer are ready: HWM − frontier − in-flight − acked-ahead bounds
    /// what can be held. Reads nothing.
    pub fn hold(&self, topic: &str, count: usize, hold: Duration) -> Vec<HeldRecord> {
        let mut held = Vec::new();
        let Some(meta) = self.replica.topic_meta(topic) else {
            return held;
        };
        if count == 0 || self.shut_down.load(Ordering::Acquire) {
            return held;
        }
        self.pump(&meta.name);
        let hold_ms = millis(hold).max(1);
        let limits = limits(&meta);
        let start = self.rotation.fetch_add(1, Ordering::Relaxed) % meta.partitions.max(1);
        for partition in (start..meta.partitions).chain(0..start) {
            if held.len() >= count {
                break;
            }
            if !self.owns(&meta, partition) || self.frozen(&Destination::new(&meta.name, partition))
            {
                continue;
            }
            let shard = match self.shard(&meta, partition) {
                Ok(shard) => shard,
                Err(error) => {
                    tracing::warn!(topic, partition, %error, "no record held for a token holder: partition unavailable");
                    continue;
                }
            };
            let now_ms = self.clock.now_ms();
            let high_watermark = shard.log.high_watermark();
            let mut state = shard.state.lock();
            state.purge_expired(now_ms);
            while held.len() < count {
                let Reserve::Reserved(lease) =
                    state.reserve(now_ms, high_watermark, hold_ms, limits)
                else {
                    break;
                };
                held.push(HeldRecord {
                    partition,
                    offset: lease.offset,
                    nonce: lease.nonce,
                    expires_at_ms: lease.expires_at_ms,
                });
            }
        }
        // A parked consume that arrives now skips the held records; the
        // expiry timer wakes it when an unclaimed hold lapses.
        if let Some(first) = held.iter().map(|held| held.expires_at_ms).min()
            && self.waiters.has_waiters(topic)
        {
            self.arm_timer(first);
        }
        held
    }

    /// Turns up to `max` of `held` (the claimant's holds, oldest first)
    /// into leases of the topic's visibility timeout and reads them: the
    /// tail cache inline, the disk on the blocking pool. A hold that
    /// lapsed meanwhile is skipped (its record is ready again for anyone);
    /// holds past `max` are released at once.
    pub async fn claim(&self, topic: &str, held: &[HeldRecord], max: usize) -> Vec<Delivery> {
        let Some(meta) = self.replica.topic_meta(topic) else {
            return Vec::new();
        };
        let mut claimed = Claimed {
            service: self.this.clone(),
            meta: Arc::clone(&meta),
            unread: VecDeque::new(),
            deliveries: Vec::new(),
            returned: false,
        };
        for (index, hold) in held.iter().enumerate() {
            let Some(shard) = self.existing_shard(&meta, hold.partition) else {
                continue;
            };
            let now_ms = self.clock.now_ms();
            let extended = {
                let mut state = shard.state.lock();
                claimed.returned |= state.purge_expired(now_ms) > 0;
                if index >= max {
                    claimed.returned |= state.release(hold.offset, hold.nonce);
                    continue;
                }
                state.settle(
                    hold.offset,
                    hold.nonce,
                    Settle::Extend,
                    now_ms,
                    meta.visibility_timeout_ms,
                )
            };
            if extended.is_ok() {
                claimed.unread.push_back((shard, *hold));
            }
        }
        if claimed.read(Reads::Memory).is_err() {
            self.reads_offloaded.fetch_add(1, Ordering::Relaxed);
            let read = tokio::task::spawn_blocking(move || {
                let finished = claimed.read(Reads::Disk);
                assert_eq!(finished, Ok(()), "a claim that may block reads anything");
                claimed
            })
            .await;
            match read {
                Ok(read) => claimed = read,
                // The claim gave its leases back as it unwound.
                Err(_) => return Vec::new(),
            }
        }
        claimed.finish()
    }

    /// Gives back every hold of `held` (holds nobody will claim).
    pub fn release_holds(&self, topic: &str, held: &[HeldRecord]) {
        let Some(meta) = self.replica.topic_meta(topic) else {
            return;
        };
        let mut returned = false;
        for hold in held {
            if let Some(shard) = self.existing_shard(&meta, hold.partition) {
                let mut state = shard.state.lock();
                returned |= state.purge_expired(self.clock.now_ms()) > 0;
                returned |= state.release(hold.offset, hold.nonce);
            }
        }
        if returned {
            self.pump(&meta.name);
        }
    }
}

/// Claimed holds, now leases, and their reads. Dropped before
/// [`Claimed::finish`] (its caller went away while it read on the blocking
/// pool), it gives every lease back.
struct Claimed {
    service: Weak<ConsumeService>,
    meta: Arc<TopicMeta>,
    /// Leases whose records are still to be read, in the claimant's order.
    unread: VecDeque<(Arc<PartitionShard>, HeldRecord)>,
    deliveries: Vec<Delivery>,
    /// A record went back to the partition (a lapsed or released hold,
    /// one retention deleted): the pump runs.
    returned: bool,
}

impl Claimed {
    /// Reads the leased records in order.
    ///
    /// # Errors
    /// [`NeedsDisk`] when a read needs the disk and `reads` allows only
    /// memory; the records not read yet stay in `unread`.
    fn read(&mut self, reads: Reads) -> Result<(), NeedsDisk> {
        let one = ReadLimits {
            records_max: 1,
            bytes_max: 1,
        };
        while let Some((shard, hold)) = self.unread.front() {
            let until = hold.offset.saturating_add(1);
            let entry = reads::read(&shard.log, hold.offset, until, one, reads)?
                .map(|read| read.entries.into_iter().next());
            let Some((shard, hold)) = self.unread.pop_front() else {
                break;
            };
            match read_leased(&shard, hold.offset, hold.nonce, entry) {
                Leased::Record(record) => self.deliveries.push(Delivery {
                    topic: Arc::clone(&self.meta.name),
                    partition: hold.partition,
                    record,
                    nonce: hold.nonce,
                }),
                Leased::Skipped | Leased::Stop(_) => self.returned = true,
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Vec<Delivery> {
        assert!(
            self.unread.is_empty(),
            "a claim finished with records unread"
        );
        if std::mem::take(&mut self.returned)
            && let Some(service) = self.service.upgrade()
        {
            service.pump(&self.meta.name);
        }
        std::mem::take(&mut self.deliveries)
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        let Some(service) = self.service.upgrade() else {
            return;
        };
        for (shard, hold) in self.unread.drain(..) {
            shard.state.lock().release(hold.offset, hold.nonce);
            self.returned = true;
        }
        if !self.deliveries.is_empty() {
            service.release(&self.deliveries);
        } else if self.returned {
            service.pump(&self.meta.name);
        }
    }
}
