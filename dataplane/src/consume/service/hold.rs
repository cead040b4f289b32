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

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::lease::{Leased, read_leased};
use super::{ConsumeService, Delivery, limits};
use crate::consume::shard::{Reserve, Settle};

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
        let hold_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX).max(1);
        let limits = limits(&meta);
        let start = self.rotation.fetch_add(1, Ordering::Relaxed) % meta.partitions.max(1);
        for partition in (start..meta.partitions).chain(0..start) {
            if held.len() >= count {
                break;
            }
            if !self.owns(&meta, partition) {
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
    /// into leases of the topic's visibility timeout and reads them. A
    /// hold that lapsed meanwhile is skipped (its record is ready again for
    /// anyone); holds past `max` are released at once.
    pub fn claim(&self, topic: &str, held: &[HeldRecord], max: usize) -> Vec<Delivery> {
        let mut deliveries = Vec::new();
        let Some(meta) = self.replica.topic_meta(topic) else {
            return deliveries;
        };
        let mut returned = false;
        for (index, hold) in held.iter().enumerate() {
            let Some(shard) = self.existing_shard(&meta, hold.partition) else {
                continue;
            };
            let now_ms = self.clock.now_ms();
            let extended = {
                let mut state = shard.state.lock();
                returned |= state.purge_expired(now_ms) > 0;
                if index >= max {
                    returned |= state.release(hold.offset, hold.nonce);
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
            if extended.is_err() {
                continue;
            }
            let entry = shard.log.read_record(hold.offset);
            match read_leased(&shard, hold.offset, hold.nonce, entry) {
                Leased::Record(record) => deliveries.push(Delivery {
                    topic: Arc::clone(&meta.name),
                    partition: hold.partition,
                    record,
                    nonce: hold.nonce,
                }),
                Leased::Skipped | Leased::Stop(_) => returned = true,
            }
        }
        if returned {
            self.pump(&meta.name);
        }
        deliveries
    }
}
