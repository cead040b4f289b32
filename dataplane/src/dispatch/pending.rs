//! The WAL sequence numbers the dispatcher read and has not finished
//! (held or skipped), lowest first.
//!
//! A sequence enters only at the read frontier, above every other, and
//! leaves in any order; the lowest one left is the checkpoint. So the set
//! is one flag per sequence from the lowest pending one up to the highest:
//! entering and leaving cost no tree walk, and the span is bounded by the
//! dispatcher's lookahead past the checkpoint.

use std::collections::VecDeque;

/// Pending sequence numbers; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct PendingSeqs {
    /// The sequence of `flags[0]`; `flags[0]` is set unless the set is
    /// empty.
    first: u64,
    flags: VecDeque<bool>,
    count: usize,
}

impl PendingSeqs {
    /// Adds `seq`, which is above every sequence added before that is
    /// still pending.
    ///
    /// # Panics
    /// `seq` is not above them: the dispatcher read out of order.
    pub(crate) fn insert(&mut self, seq: u64) {
        if self.count == 0 {
            self.flags.clear();
            self.first = seq;
        }
        let end = self.first + self.flags.len() as u64;
        assert!(
            seq >= end,
            "pending seq {seq} added below the highest pending one ({end} is next)"
        );
        self.flags
            .extend(std::iter::repeat_n(false, (seq - end) as usize));
        self.flags.push_back(true);
        self.count += 1;
    }

    /// Removes `seq`; false when it was not pending.
    pub(crate) fn remove(&mut self, seq: u64) -> bool {
        let Some(flag) = self.index(seq).and_then(|index| self.flags.get_mut(index)) else {
            return false;
        };
        if !*flag {
            return false;
        }
        *flag = false;
        self.count -= 1;
        while self.flags.front() == Some(&false) {
            self.flags.pop_front();
            self.first += 1;
        }
        true
    }

    /// Whether `seq` is pending.
    pub(crate) fn contains(&self, seq: u64) -> bool {
        self.index(seq)
            .and_then(|index| self.flags.get(index))
            .is_some_and(|&flag| flag)
    }

    /// The lowest pending sequence.
    pub(crate) fn first(&self) -> Option<u64> {
        (self.count > 0).then_some(self.first)
    }

    /// How many sequences are pending.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    fn index(&self, seq: u64) -> Option<usize> {
        seq.checked_sub(self.first)
            .and_then(|offset| usize::try_from(offset).ok())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn the_first_is_the_lowest_left_after_removals_in_any_order() {
        let mut pending = PendingSeqs::default();
        for seq in 10..15 {
            pending.insert(seq);
        }
        assert!(pending.remove(12));
        assert!(!pending.remove(12), "removed already");
        assert_eq!(pending.first(), Some(10));
        assert!(pending.remove(10));
        assert_eq!(pending.first(), Some(11));
        assert!(pending.remove(11));
        assert_eq!(pending.first(), Some(13));
        assert!(!pending.contains(12) && pending.contains(14));
        assert_eq!(pending.len(), 2);
    }

    #[test]
    fn emptied_it_starts_again_at_the_next_seq() {
        let mut pending = PendingSeqs::default();
        pending.insert(3);
        assert!(pending.remove(3));
        assert_eq!(pending.len(), 0);
        assert_eq!(pending.first(), None);
        pending.insert(40);
        assert_eq!(pending.first(), Some(40));
        assert!(!pending.remove(3));
    }

    #[test]
    fn a_gap_between_added_seqs_is_not_pending() {
        let mut pending = PendingSeqs::default();
        pending.insert(1);
        pending.insert(5);
        assert!(!pending.contains(3));
        assert!(!pending.remove(3));
        assert!(pending.remove(1));
        assert_eq!(pending.first(), Some(5));
    }

    #[test]
    #[should_panic(expected = "below the highest pending one")]
    fn adding_below_the_highest_is_a_bug() {
        let mut pending = PendingSeqs::default();
        pending.insert(5);
        pending.insert(4);
    }

    #[test]
    fn it_agrees_with_a_plain_set() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut pending = PendingSeqs::default();
        let mut plain = BTreeSet::new();
        let mut next = 0u64;
        for _ in 0..20_000 {
            if rng.random_bool(0.5) {
                next += rng.random_range(1..3u64);
                pending.insert(next);
                plain.insert(next);
            } else {
                let seq = rng.random_range(next.saturating_sub(50)..=next);
                assert_eq!(pending.remove(seq), plain.remove(&seq));
            }
            assert_eq!(pending.first(), plain.first().copied());
            assert_eq!(pending.len(), plain.len());
        }
        assert!((0..=next).all(|seq| pending.contains(seq) == plain.contains(&seq)));
    }
}
