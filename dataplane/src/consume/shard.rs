//! The in-flight shard of one partition: which offsets are leased, to
//! whom (by nonce), until when, and how far the partition is settled.
//!
//! Pure: no I/O and no clock reads; time comes in as milliseconds on the
//! lease clock. The service reserves here, *then* reads the record, and
//! settles here when a consumer acks, extends or nacks.
//!
//! Every offset from the frontier up to `next_fresh` (the lowest offset
//! never handed out) is in exactly one of three states:
//! - **leased**: a live reservation `{nonce, expiry}`;
//! - **settled ahead**: acked (or skipped as unreadable) above a hole;
//! - **available**: handed out before and released (lease expired, nack,
//!   or handed to a consumer that left), so redelivered before any fresh
//!   offset.
//!
//! Offsets at or above `next_fresh` are untouched, except settled offsets
//! restored from disk above a hole, which the fresh cursor steps over. The
//! frontier is the lowest unsettled offset: everything below it is settled
//! and never delivered again.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::ops::Range;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::ahead::ConsumerPosition;

/// Stale expiry-heap entries (left by extends and settles) tolerated above
/// twice the live leases before the heap is rebuilt from the leases.
const EXPIRY_HEAP_SLACK: usize = 64;

/// The partition's caps, from its topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardLimits {
    /// Live leases at most (`max_in_flight_per_partition`).
    pub max_in_flight: usize,
    /// Settled offsets above the frontier beyond which only the frontier
    /// hole is handed out (`max_acked_ahead_per_partition`).
    pub max_acked_ahead: usize,
}

/// What a reservation found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserve {
    /// An offset is leased to the caller.
    Reserved(Lease),
    /// Nothing is reservable below the high watermark: everything there is
    /// settled or leased.
    Empty,
    /// A cap holds the partition: the in-flight cap is reached, or the
    /// acked-ahead cap is reached and the frontier hole is leased.
    AtCap,
}

/// One live reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The leased record's offset.
    pub offset: u64,
    /// Tells this lease from every other lease of the offset.
    pub nonce: u64,
    /// The lease lapses when the clock reaches this.
    pub expires_at_ms: u64,
}

/// How a consumer settles a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// Done with the record: never delivered again.
    Ack,
    /// Keep the lease for a full visibility timeout from now.
    Extend,
    /// Give the record back for redelivery now.
    Nack,
}

/// The handle names no live lease: it lapsed, was settled already, or the
/// offset was leased again under another nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("receipt handle no longer matches an active reservation")]
pub struct LeaseGone;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    nonce: u64,
    expires_at_ms: u64,
}

/// An expiry-heap entry: `(expires_at_ms, offset, nonce)`, earliest first.
type Expiry = Reverse<(u64, u64, u64)>;

/// The lease table of one partition.
#[derive(Debug)]
pub struct InFlightShard {
    frontier: u64,
    next_fresh: u64,
    leases: BTreeMap<u64, Slot>,
    expiry: BinaryHeap<Expiry>,
    settled_ahead: BTreeSet<u64>,
    available: BTreeSet<u64>,
    corrupt_skipped_total: u64,
    dropped_total: u64,
    nonces: ChaCha8Rng,
}

impl InFlightShard {
    /// A shard seeded with a restored position and no leases; nonces come
    /// from a ChaCha8 stream seeded with `nonce_seed`.
    pub fn new(position: ConsumerPosition, nonce_seed: u64) -> Self {
        let frontier = position.frontier;
        let mut shard = Self {
            frontier,
            next_fresh: frontier,
            leases: BTreeMap::new(),
            expiry: BinaryHeap::new(),
            settled_ahead: position
                .acked_ahead
                .into_iter()
                .filter(|&offset| offset >= frontier)
                .collect(),
            available: BTreeSet::new(),
            corrupt_skipped_total: 0,
            dropped_total: 0,
            nonces: ChaCha8Rng::seed_from_u64(nonce_seed),
        };
        shard.advance_frontier();
        shard
    }

    /// Leases the lowest reservable offset below `high_watermark` until
    /// `now_ms + visibility_ms`. Expired leases are not purged here: call
    /// [`InFlightShard::purge_expired`] first.
    ///
    /// # Panics
    /// If a limit is zero.
    pub fn reserve(
        &mut self,
        now_ms: u64,
        high_watermark: u64,
        visibility_ms: u64,
        limits: ShardLimits,
    ) -> Reserve {
        assert!(
            limits.max_in_flight > 0 && limits.max_acked_ahead > 0,
            "shard limits must be positive: {limits:?}"
        );
        if self.leases.len() >= limits.max_in_flight {
            return Reserve::AtCap;
        }
        let offset = if self.settled_ahead.len() >= limits.max_acked_ahead {
            // Only the hole under the settled run may go out, so the run
            // can drain once it is acked.
            if self.leases.contains_key(&self.frontier) {
                return Reserve::AtCap;
            }
            self.frontier
        } else {
            let released = self.available.first().copied().unwrap_or(u64::MAX);
            released.min(self.next_fresh)
        };
        if offset >= high_watermark {
            return Reserve::Empty;
        }
        Reserve::Reserved(self.lease(offset, now_ms.saturating_add(visibility_ms)))
    }

    /// Gives back a lease handed to a consumer that left before it got
    /// the record; the offset is redeliverable at once. Returns whether
    /// the lease was live.
    pub fn release(&mut self, offset: u64, nonce: u64) -> bool {
        if !self.is_live(offset, nonce) {
            return false;
        }
        self.leases.remove(&offset);
        self.available.insert(offset);
        self.drop_stale_expiries();
        true
    }

    /// Acks, extends or nacks the lease `(offset, nonce)` at `now_ms`. An
    /// extend renews it until `now_ms + visibility_ms`.
    ///
    /// # Errors
    /// [`LeaseGone`] when no live lease of `offset` carries `nonce`,
    /// including a lease that has lapsed but was not purged yet (it is
    /// released then).
    pub fn settle(
        &mut self,
        offset: u64,
        nonce: u64,
        how: Settle,
        now_ms: u64,
        visibility_ms: u64,
    ) -> Result<(), LeaseGone> {
        let slot = self
            .leases
            .get_mut(&offset)
            .filter(|slot| slot.nonce == nonce)
            .ok_or(LeaseGone)?;
        if slot.expires_at_ms <= now_ms {
            self.leases.remove(&offset);
            self.available.insert(offset);
            self.drop_stale_expiries();
            return Err(LeaseGone);
        }
        match how {
            Settle::Ack => {
                self.leases.remove(&offset);
                self.mark_settled(offset);
            }
            Settle::Extend => {
                slot.expires_at_ms = now_ms.saturating_add(visibility_ms);
                self.expiry
                    .push(Reverse((slot.expires_at_ms, offset, nonce)));
            }
            Settle::Nack => {
                self.leases.remove(&offset);
                self.available.insert(offset);
            }
        }
        self.drop_stale_expiries();
        Ok(())
    }

    /// Releases every lease whose expiry is at or before `now_ms`; returns
    /// how many.
    pub fn purge_expired(&mut self, now_ms: u64) -> usize {
        let mut purged = 0;
        while let Some(&Reverse((expires_at_ms, offset, nonce))) = self.expiry.peek() {
            if expires_at_ms > now_ms {
                break;
            }
            self.expiry.pop();
            let live = self
                .leases
                .get(&offset)
                .is_some_and(|slot| slot.nonce == nonce && slot.expires_at_ms == expires_at_ms);
            if live {
                self.leases.remove(&offset);
                self.available.insert(offset);
                purged += 1;
            }
        }
        self.drop_stale_expiries();
        purged
    }

    /// When the earliest live lease lapses, if any lease is live.
    pub fn next_expiry_ms(&self) -> Option<u64> {
        // Mutations drop stale entries off the top, so the top is live.
        self.expiry
            .peek()
            .map(|&Reverse((expires_at_ms, _, _))| expires_at_ms)
    }

    /// Settles `offsets` as permanently unreadable (damaged on disk), so
    /// the frontier can pass them; a lease on one of them ends. Returns how
    /// many offsets were newly settled (and counts them as corrupt-skipped).
    /// Costs one step per offset.
    pub fn skip_unreadable(&mut self, offsets: Range<u64>) -> u64 {
        let mut skipped = 0;
        for offset in offsets {
            if offset < self.frontier || self.settled_ahead.contains(&offset) {
                continue;
            }
            if offset >= self.next_fresh {
                // Never handed out: what lies between becomes available so
                // every offset below the cursor keeps exactly one state.
                for between in self.next_fresh..offset {
                    if !self.settled_ahead.contains(&between) {
                        self.available.insert(between);
                    }
                }
                self.next_fresh = offset + 1;
                self.step_over_settled();
            } else {
                self.leases.remove(&offset);
                self.available.remove(&offset);
            }
            self.mark_settled(offset);
            skipped += 1;
        }
        self.corrupt_skipped_total += skipped;
        self.drop_stale_expiries();
        skipped
    }

    /// Moves the frontier up to `oldest` (the oldest offset retention
    /// kept) when it is below it; leases and settled offsets below end.
    /// Returns how many unsettled offsets were passed over: messages lost
    /// to retention before they were acked.
    pub fn skip_to(&mut self, oldest: u64) -> u64 {
        if oldest <= self.frontier {
            return 0;
        }
        let settled_below = self.settled_ahead.range(..oldest).count() as u64;
        let gap = oldest - self.frontier - settled_below;
        self.leases = self.leases.split_off(&oldest);
        self.available = self.available.split_off(&oldest);
        self.settled_ahead = self.settled_ahead.split_off(&oldest);
        self.frontier = oldest;
        self.advance_frontier();
        self.dropped_total += gap;
        self.drop_stale_expiries();
        gap
    }

    /// The frontier and the settled offsets above it, as persisted.
    pub fn position(&self) -> ConsumerPosition {
        ConsumerPosition {
            frontier: self.frontier,
            acked_ahead: self.settled_ahead.iter().copied().collect(),
        }
    }

    /// The lowest unsettled offset.
    pub fn frontier(&self) -> u64 {
        self.frontier
    }

    /// Live leases.
    pub fn in_flight(&self) -> usize {
        self.leases.len()
    }

    /// Settled offsets above the frontier.
    pub fn acked_ahead_len(&self) -> usize {
        self.settled_ahead.len()
    }

    /// Offsets skipped as unreadable since the shard was made.
    pub fn corrupt_skipped_total(&self) -> u64 {
        self.corrupt_skipped_total
    }

    /// Unsettled offsets passed over by retention jumps since the shard was
    /// made.
    pub fn dropped_total(&self) -> u64 {
        self.dropped_total
    }

    /// Whether `(offset, nonce)` is a live lease (expiry not considered).
    pub fn is_live(&self, offset: u64, nonce: u64) -> bool {
        self.leases
            .get(&offset)
            .is_some_and(|slot| slot.nonce == nonce)
    }

    /// Checks the state invariants; tests call it after every step.
    ///
    /// # Panics
    /// If one does not hold.
    pub fn assert_invariants(&self) {
        assert!(self.frontier <= self.next_fresh, "frontier above cursor");
        assert!(
            !self.settled_ahead.contains(&self.frontier),
            "the frontier offset is settled"
        );
        assert!(
            self.settled_ahead
                .first()
                .is_none_or(|&o| o > self.frontier),
            "settled offset at or below the frontier"
        );
        for offset in self.frontier..self.next_fresh {
            let states = usize::from(self.leases.contains_key(&offset))
                + usize::from(self.settled_ahead.contains(&offset))
                + usize::from(self.available.contains(&offset));
            assert_eq!(states, 1, "offset {offset} is in {states} states");
        }
        assert!(
            self.leases
                .keys()
                .chain(&self.available)
                .all(|&o| o < self.next_fresh),
            "leased or available offset at or above the cursor"
        );
        assert!(
            self.leases.iter().all(|(&offset, slot)| self
                .expiry
                .iter()
                .any(|&Reverse(e)| e == (slot.expires_at_ms, offset, slot.nonce))),
            "a live lease has no expiry entry"
        );
    }

    fn lease(&mut self, offset: u64, expires_at_ms: u64) -> Lease {
        if offset == self.next_fresh {
            self.next_fresh += 1;
            self.step_over_settled();
        } else {
            let was_available = self.available.remove(&offset);
            assert!(was_available, "offset {offset} reserved twice");
        }
        let nonce = self.nonces.next_u64();
        let previous = self.leases.insert(
            offset,
            Slot {
                nonce,
                expires_at_ms,
            },
        );
        assert!(previous.is_none(), "offset {offset} leased twice");
        self.expiry.push(Reverse((expires_at_ms, offset, nonce)));
        Lease {
            offset,
            nonce,
            expires_at_ms,
        }
    }

    /// Settles an offset that is neither leased nor available any more.
    fn mark_settled(&mut self, offset: u64) {
        if offset == self.frontier {
            self.advance_frontier_from(offset + 1);
        } else {
            assert!(offset > self.frontier, "settling below the frontier");
            self.settled_ahead.insert(offset);
        }
    }

    fn advance_frontier(&mut self) {
        while self.settled_ahead.remove(&self.frontier) {
            self.frontier += 1;
        }
        self.next_fresh = self.next_fresh.max(self.frontier);
        self.step_over_settled();
    }

    fn advance_frontier_from(&mut self, frontier: u64) {
        self.frontier = frontier;
        self.advance_frontier();
    }

    /// Moves the fresh cursor over settled offsets restored above a hole.
    fn step_over_settled(&mut self) {
        while self.settled_ahead.contains(&self.next_fresh) {
            self.next_fresh += 1;
        }
    }

    /// Pops expiry entries that no longer match a live lease off the top,
    /// and rebuilds the heap once stale entries pile up.
    fn drop_stale_expiries(&mut self) {
        while let Some(&Reverse((expires_at_ms, offset, nonce))) = self.expiry.peek() {
            let live = self
                .leases
                .get(&offset)
                .is_some_and(|slot| slot.nonce == nonce && slot.expires_at_ms == expires_at_ms);
            if live {
                break;
            }
            self.expiry.pop();
        }
        if self.expiry.len() > 2 * self.leases.len() + EXPIRY_HEAP_SLACK {
            self.expiry = self
                .leases
                .iter()
                .map(|(&offset, slot)| Reverse((slot.expires_at_ms, offset, slot.nonce)))
                .collect();
        }
    }
}
