//! Partition choice at accept time: a pinned partition, the key's hash, or
//! a per-topic rotation. No liveness check: the accept must cost no more
//! than a local fsync, and the dispatcher reroutes around dead owners.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Topics whose rotation is remembered at most. Past it, rotations idle
/// longer than [`ROTATION_IDLE_FORGET`] are forgotten, and if none is, the
/// least recently used one goes: memory stays bounded by topic churn.
pub const ROTATIONS_MAX: usize = 4_096;

/// A rotation unused this long may be forgotten; a forgotten topic starts
/// again at a random partition, which is as good as any.
pub const ROTATION_IDLE_FORGET: Duration = Duration::from_secs(300);

/// FNV-1a, 32 bits: the spec's key hash (`key mod partitions`).
pub fn fnv1a_32(bytes: &[u8]) -> u32 {
    const OFFSET_BASIS: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u32::from(byte)).wrapping_mul(PRIME)
    })
}

/// The partition a keyed message goes to.
///
/// # Panics
/// If `partitions` is 0.
pub fn key_partition(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has at least one partition");
    fnv1a_32(key) % partitions
}

#[derive(Debug)]
struct Rotation {
    next: u64,
    last_used: Duration,
}

/// Per-topic round-robin for keyless messages, each topic starting at a
/// random partition.
#[derive(Debug)]
pub struct RoundRobin {
    state: Mutex<RoundRobinState>,
}

#[derive(Debug)]
struct RoundRobinState {
    rotations: HashMap<Arc<str>, Rotation>,
    rng: StdRng,
}

impl RoundRobin {
    /// Rotations whose random starts come from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            state: Mutex::new(RoundRobinState {
                rotations: HashMap::new(),
                rng: StdRng::seed_from_u64(seed),
            }),
        }
    }

    /// The next partition of `topic`'s rotation at time `now` (any
    /// monotonic clock).
    ///
    /// # Panics
    /// If `partitions` is 0.
    pub fn next(&self, topic: &Arc<str>, partitions: u32, now: Duration) -> u32 {
        assert!(partitions > 0, "a topic has at least one partition");
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let start = if state.rotations.contains_key(topic) {
            0
        } else {
            if state.rotations.len() >= ROTATIONS_MAX {
                forget_idle(&mut state.rotations, now);
            }
            state.rng.random_range(0..u64::from(partitions))
        };
        let rotation = state
            .rotations
            .entry(Arc::clone(topic))
            .or_insert(Rotation {
                next: start,
                last_used: now,
            });
        let partition = rotation.next % u64::from(partitions);
        rotation.next = rotation.next.wrapping_add(1);
        rotation.last_used = now;
        u32::try_from(partition).unwrap_or(0)
    }

    /// Rotations remembered now.
    pub fn remembered(&self) -> usize {
        self.state.lock().rotations.len()
    }
}

fn forget_idle(rotations: &mut HashMap<Arc<str>, Rotation>, now: Duration) {
    rotations.retain(|_, rotation| now.saturating_sub(rotation.last_used) < ROTATION_IDLE_FORGET);
    if rotations.len() >= ROTATIONS_MAX
        && let Some(oldest) = rotations
            .iter()
            .min_by_key(|(_, rotation)| rotation.last_used)
            .map(|(topic, _)| Arc::clone(topic))
    {
        rotations.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a_32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn key_partition_is_the_hash_modulo_the_partition_count() {
        assert_eq!(key_partition(b"foobar", 3), 0xbf9c_f968 % 3);
    }

    #[test]
    fn rotation_visits_every_partition_in_turn() {
        let rr = RoundRobin::new(7);
        let topic: Arc<str> = Arc::from("orders");
        let first = rr.next(&topic, 4, Duration::ZERO);
        let seen: Vec<u32> = (0..4).map(|_| rr.next(&topic, 4, Duration::ZERO)).collect();
        let expected: Vec<u32> = (1..=4).map(|step| (first + step) % 4).collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn rotations_start_at_seeded_random_partitions() {
        let starts: Vec<u32> = (0..32)
            .map(|i| RoundRobin::new(i).next(&Arc::from("t"), 16, Duration::ZERO))
            .collect();
        assert!(starts.iter().any(|&start| start != starts[0]));
    }

    #[test]
    fn idle_rotations_are_forgotten_when_full() {
        let rr = RoundRobin::new(1);
        for i in 0..ROTATIONS_MAX {
            rr.next(&Arc::from(format!("t{i}")), 3, Duration::ZERO);
        }
        assert_eq!(rr.remembered(), ROTATIONS_MAX);
        rr.next(&Arc::from("fresh"), 3, ROTATION_IDLE_FORGET);
        assert_eq!(rr.remembered(), 1);
    }

    #[test]
    fn a_full_table_of_busy_rotations_drops_one() {
        let rr = RoundRobin::new(1);
        for i in 0..ROTATIONS_MAX {
            rr.next(&Arc::from(format!("t{i}")), 3, Duration::ZERO);
        }
        rr.next(&Arc::from("fresh"), 3, Duration::from_secs(1));
        assert_eq!(rr.remembered(), ROTATIONS_MAX);
    }
}
