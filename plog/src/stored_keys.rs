//! The idempotency keys a partition stored, oldest first, each with the
//! time it was stored.
//!
//! One allocation per key: the key's bytes live in the age queue, and the
//! hash table holds only a word per key: the key's hash (32 bits) and its
//! place in the queue (32 bits). A large table's lookups miss the cache,
//! so the table is kept small. The table keeps each key's hash, so growing
//! it hashes nothing again, and a caller hashes a key once
//! ([`StoredKeys::hash`]) for its lookup, its claim in a commit and its
//! insert. Keys are chosen by producers, so the hash is the standard
//! library's randomly keyed SipHash.

use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

/// A key's place in the table: the high half of its hash, and the low
/// half of its queue position counted from the first key ever queued (the
/// queue holds fewer than 2^32 keys, so that names one entry).
type Slot = u64;

/// The most keys the queue holds, stale entries included: positions are
/// told apart by their low 32 bits.
const QUEUED_MAX: usize = u32::MAX as usize;

/// `hash` (a [`StoredKeys::hash`]) and `position` in one slot.
fn slot_of(hash: u64, position: u64) -> Slot {
    (hash & !u64::from(u32::MAX)) | (position & u64::from(u32::MAX))
}

/// The hash a slot was made from.
fn slot_hash(slot: Slot) -> u64 {
    spread(slot >> 32)
}

/// A 32-bit hash in both halves of a word: the table's buckets come from
/// the low bits and its tags from the high ones.
fn spread(half: u64) -> u64 {
    (half << 32) | half
}

/// A key in the age queue.
#[derive(Debug)]
struct Queued {
    stored_ms: u64,
    hash: u64,
    key: Box<[u8]>,
}

/// Idempotency keys with the time each was last stored, forgotten oldest
/// first. A key stored again moves to the back: its older queue entry
/// stays until it is dropped, and dropping it leaves the newer one.
#[derive(Debug, Default)]
pub(crate) struct StoredKeys {
    hasher: RandomState,
    table: HashTable<Slot>,
    order: VecDeque<Queued>,
    /// Queue entries dropped so far: the position of `order`'s front.
    dropped: u64,
}

impl StoredKeys {
    /// The hash of `key` in this table.
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        spread(self.hasher.hash_one(key) >> 32)
    }

    /// When `key` (hashing to `hash`) was last stored, if it is remembered.
    pub(crate) fn stored_ms(&self, key: &[u8], hash: u64) -> Option<u64> {
        let (order, dropped) = (&self.order, self.dropped);
        self.table
            .find(hash, |&slot| {
                slot_hash(slot) == hash && *order[queue_index(slot, dropped)].key == *key
            })
            .map(|&slot| order[queue_index(slot, dropped)].stored_ms)
    }

    /// Remembers `key` (hashing to `hash`) as stored at `stored_ms`, then
    /// drops the oldest keys until at most `max` are remembered.
    pub(crate) fn insert(&mut self, key: &[u8], hash: u64, stored_ms: u64, max: usize) {
        while self.order.len() >= QUEUED_MAX {
            self.drop_oldest();
        }
        let position = self.dropped + self.order.len() as u64;
        let (order, dropped) = (&self.order, self.dropped);
        let found = self.table.find_mut(hash, |&slot| {
            slot_hash(slot) == hash && *order[queue_index(slot, dropped)].key == *key
        });
        match found {
            Some(slot) => *slot = slot_of(hash, position),
            None => {
                self.table
                    .insert_unique(hash, slot_of(hash, position), |&slot| slot_hash(slot));
            }
        }
        self.order.push_back(Queued {
            stored_ms,
            hash,
            key: key.into(),
        });
        while self.table.len() > max {
            self.drop_oldest();
        }
    }

    /// Forgets the keys stored `window_ms` or more before `now_ms`.
    pub(crate) fn expire(&mut self, now_ms: u64, window_ms: u64) {
        while let Some(oldest) = self.order.front() {
            if now_ms < oldest.stored_ms.saturating_add(window_ms) {
                break;
            }
            self.drop_oldest();
        }
    }

    /// How many keys are remembered.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Drops the queue's front, and its key unless the key was stored
    /// again since (its slot then names a later position).
    fn drop_oldest(&mut self) {
        let Some(oldest) = self.order.pop_front() else {
            return;
        };
        let position = self.dropped;
        self.dropped += 1;
        if let Ok(slot) = self
            .table
            .find_entry(oldest.hash, |&slot| slot == slot_of(oldest.hash, position))
        {
            slot.remove();
        }
    }
}

/// The index in the queue of the key in `slot`, the queue's front being at
/// position `dropped`. A slot always names a queued position, fewer than
/// 2^32 after the front.
fn queue_index(slot: Slot, dropped: u64) -> usize {
    (slot as u32).wrapping_sub(dropped as u32) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(keys: &mut StoredKeys, key: &[u8], stored_ms: u64, max: usize) {
        let hash = keys.hash(key);
        keys.insert(key, hash, stored_ms, max);
    }

    fn stored_ms(keys: &StoredKeys, key: &[u8]) -> Option<u64> {
        keys.stored_ms(key, keys.hash(key))
    }

    #[test]
    fn a_key_is_found_with_its_time_and_another_is_not() {
        let mut keys = StoredKeys::default();
        insert(&mut keys, b"a", 10, 8);
        insert(&mut keys, b"b", 20, 8);
        assert_eq!(stored_ms(&keys, b"a"), Some(10));
        assert_eq!(stored_ms(&keys, b"b"), Some(20));
        assert_eq!(stored_ms(&keys, b"c"), None);
        assert_eq!(keys.len(), 2);
    }

    #[test]
    fn past_the_cap_the_oldest_key_goes_first() {
        let mut keys = StoredKeys::default();
        for (index, key) in [b"a", b"b", b"c", b"d"].iter().enumerate() {
            insert(&mut keys, *key, index as u64, 3);
        }
        assert_eq!(keys.len(), 3);
        assert_eq!(stored_ms(&keys, b"a"), None);
        assert_eq!(stored_ms(&keys, b"d"), Some(3));
    }

    #[test]
    fn a_key_stored_again_keeps_its_new_time_when_its_old_entry_expires() {
        let mut keys = StoredKeys::default();
        insert(&mut keys, b"a", 0, 8);
        insert(&mut keys, b"b", 50, 8);
        insert(&mut keys, b"a", 120, 8);
        assert_eq!(keys.len(), 2);
        keys.expire(100, 100);
        assert_eq!(stored_ms(&keys, b"a"), Some(120));
        keys.expire(160, 100);
        assert_eq!(stored_ms(&keys, b"b"), None);
        assert_eq!(stored_ms(&keys, b"a"), Some(120));
        keys.expire(220, 100);
        assert_eq!(keys.len(), 0);
    }

    #[test]
    fn a_key_stored_again_counts_once_against_the_cap() {
        let mut keys = StoredKeys::default();
        insert(&mut keys, b"a", 0, 2);
        insert(&mut keys, b"a", 1, 2);
        insert(&mut keys, b"b", 2, 2);
        assert_eq!(keys.len(), 2);
        assert_eq!(stored_ms(&keys, b"a"), Some(1));
        // The cap drops the stale entry of `a` and then `a` itself.
        insert(&mut keys, b"c", 3, 2);
        assert_eq!(stored_ms(&keys, b"a"), None);
        assert_eq!(stored_ms(&keys, b"b"), Some(2));
        assert_eq!(stored_ms(&keys, b"c"), Some(3));
    }

    #[test]
    fn positions_past_two_to_the_32_still_name_their_entries() {
        let mut keys = StoredKeys {
            dropped: u64::from(u32::MAX) - 1,
            ..StoredKeys::default()
        };
        for (index, key) in [b"a", b"b", b"c", b"d"].iter().enumerate() {
            insert(&mut keys, *key, index as u64, 3);
        }
        assert_eq!(keys.dropped, u64::from(u32::MAX));
        assert_eq!(stored_ms(&keys, b"a"), None);
        assert_eq!(stored_ms(&keys, b"b"), Some(1));
        assert_eq!(stored_ms(&keys, b"d"), Some(3));
        insert(&mut keys, b"b", 4, 3);
        // Drops the stale entry of `b` and then `c`.
        keys.expire(102, 100);
        assert_eq!(stored_ms(&keys, b"c"), None);
        assert_eq!(stored_ms(&keys, b"b"), Some(4));
        assert_eq!(stored_ms(&keys, b"d"), Some(3));
        assert_eq!(keys.len(), 2);
    }

    #[test]
    fn many_keys_survive_the_table_growing() {
        let mut keys = StoredKeys::default();
        for index in 0..10_000u64 {
            insert(&mut keys, format!("key-{index}").as_bytes(), index, 1 << 20);
        }
        assert_eq!(keys.len(), 10_000);
        assert!((0..10_000u64).all(|i| stored_ms(&keys, format!("key-{i}").as_bytes()) == Some(i)));
        keys.expire(5_000, 1);
        assert_eq!(keys.len(), 5_000);
        assert_eq!(stored_ms(&keys, b"key-4999"), None);
        assert_eq!(stored_ms(&keys, b"key-5000"), Some(5_000));
    }
}
