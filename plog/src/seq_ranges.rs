//! A set of sequence numbers kept as runs of consecutive ones.
//!
//! The sequences a partition remembers for one origin come in runs: a
//! fan-out bucket is consecutive parent offsets of one parent partition,
//! and a dispatcher's commit is consecutive WAL sequences more often than
//! not. A run costs one entry here however long it is, where a set of
//! single numbers cost a tree node per sequence.

use std::collections::BTreeMap;

/// Sequence numbers as disjoint runs, none adjacent to another: each
/// entry maps a run's first sequence to its last (inclusive, so a run may
/// end at `u64::MAX`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SeqRanges {
    runs: BTreeMap<u64, u64>,
    count: u64,
}

impl SeqRanges {
    /// How many sequences the set holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.count
    }

    /// How many runs hold them.
    #[cfg(test)]
    pub(crate) fn runs(&self) -> usize {
        self.runs.len()
    }

    /// The lowest sequence held.
    #[cfg(test)]
    pub(crate) fn first(&self) -> Option<u64> {
        self.runs.first_key_value().map(|(&first, _)| first)
    }

    /// Whether `seq` is held. A sequence above the highest run (a record
    /// not sent before, the usual case) is answered from that run alone.
    pub(crate) fn contains(&self, seq: u64) -> bool {
        match self.runs.last_key_value() {
            None => false,
            Some((_, &last)) if seq > last => false,
            Some(_) => self
                .runs
                .range(..=seq)
                .next_back()
                .is_some_and(|(_, &last)| seq <= last),
        }
    }

    /// Adds `seq`; false when it was held already. Appending just past the
    /// highest run (the usual case) only moves that run's end; a sequence
    /// further above it (a partition's share of an interleaved WAL) starts
    /// a run of its own without looking for runs to join.
    pub(crate) fn insert(&mut self, seq: u64) -> bool {
        if let Some(mut highest) = self.runs.last_entry() {
            let last = *highest.get();
            if seq >= *highest.key() && seq <= last {
                return false;
            }
            if last.checked_add(1) == Some(seq) {
                *highest.get_mut() = seq;
                self.count += 1;
                return true;
            }
            if seq > last {
                self.runs.insert(seq, seq);
                self.count += 1;
                return true;
            }
        }
        let below = self
            .runs
            .range(..=seq)
            .next_back()
            .map(|(&first, &last)| (first, last));
        let joins_below = match below {
            Some((_, last)) if seq <= last => return false,
            Some((first, last)) if last.checked_add(1) == Some(seq) => Some(first),
            _ => None,
        };
        let above_last = seq
            .checked_add(1)
            .and_then(|next| self.runs.remove(&next))
            .unwrap_or(seq);
        match joins_below {
            Some(first) => self.runs.insert(first, above_last),
            None => self.runs.insert(seq, above_last),
        };
        self.count += 1;
        true
    }

    /// Forgets every sequence below `floor`.
    pub(crate) fn forget_below(&mut self, floor: u64) {
        let kept = self.runs.split_off(&floor);
        let cut = std::mem::replace(&mut self.runs, kept);
        for (first, last) in cut {
            self.count -= last - first + 1;
            if last >= floor {
                // The run across the floor keeps its part above it.
                self.runs.insert(floor, last);
                self.count += last - floor + 1;
            }
        }
    }

    /// Forgets the lowest sequences until at most `max` are held.
    pub(crate) fn keep_highest(&mut self, max: u64) {
        while self.count > max {
            let Some(lowest) = self.runs.first_entry() else {
                return;
            };
            let (first, last) = (*lowest.key(), *lowest.get());
            let excess = self.count - max;
            if last - first < excess {
                lowest.remove();
                self.count -= last - first + 1;
            } else {
                lowest.remove();
                self.runs.insert(first + excess, last);
                self.count -= excess;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(seqs: &[u64]) -> SeqRanges {
        let mut ranges = SeqRanges::default();
        for &seq in seqs {
            ranges.insert(seq);
        }
        ranges
    }

    #[test]
    fn consecutive_sequences_are_one_run_in_any_order() {
        let ranges = set(&[5, 3, 4, 7, 6, 1, 2]);
        assert_eq!((ranges.len(), ranges.runs()), (7, 1));
        assert!((1..=7).all(|seq| ranges.contains(seq)));
        assert!(!ranges.contains(0) && !ranges.contains(8));
    }

    #[test]
    fn a_gap_keeps_two_runs_until_it_is_filled() {
        let mut ranges = set(&[10, 11, 13, 14]);
        assert_eq!((ranges.len(), ranges.runs()), (4, 2));
        assert!(!ranges.contains(12));
        assert!(ranges.insert(12));
        assert_eq!((ranges.len(), ranges.runs()), (5, 1));
        assert!(!ranges.insert(12), "held already");
        assert!(!ranges.insert(10), "held already, at a run's start");
        assert_eq!(ranges.len(), 5);
    }

    #[test]
    fn the_highest_sequence_is_a_run_of_its_own() {
        let mut ranges = set(&[u64::MAX - 1, u64::MAX, 0]);
        assert_eq!((ranges.len(), ranges.runs()), (3, 2));
        assert!(ranges.contains(u64::MAX));
        assert!(!ranges.insert(u64::MAX));
    }

    #[test]
    fn forgetting_below_a_floor_cuts_the_run_across_it() {
        let mut ranges = set(&[1, 2, 3, 4, 5, 8, 9]);
        ranges.forget_below(4);
        assert_eq!(ranges.first(), Some(4));
        assert_eq!((ranges.len(), ranges.runs()), (4, 2));
        assert!(!ranges.contains(3) && ranges.contains(5) && ranges.contains(8));
        ranges.forget_below(10);
        assert_eq!((ranges.len(), ranges.first()), (0, None));
    }

    #[test]
    fn keeping_the_highest_drops_whole_runs_then_part_of_one() {
        let mut ranges = set(&[1, 2, 5, 6, 7, 8, 20]);
        ranges.keep_highest(4);
        assert_eq!(ranges.len(), 4);
        assert_eq!(ranges.first(), Some(6));
        assert!(ranges.contains(20) && !ranges.contains(5));
        ranges.keep_highest(0);
        assert_eq!((ranges.len(), ranges.runs()), (0, 0));
    }

    #[test]
    fn the_set_agrees_with_a_plain_set_on_random_inserts_and_cuts() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(41);
        let mut ranges = SeqRanges::default();
        let mut plain = std::collections::BTreeSet::new();
        for step in 0..20_000u32 {
            let seq = rng.random_range(0..400u64);
            assert_eq!(ranges.insert(seq), plain.insert(seq));
            if step % 1_000 == 999 {
                let floor = rng.random_range(0..200u64);
                ranges.forget_below(floor);
                plain = plain.split_off(&floor);
                let max = rng.random_range(50..300u64);
                ranges.keep_highest(max);
                while plain.len() as u64 > max {
                    plain.pop_first();
                }
            }
            assert_eq!(ranges.len(), plain.len() as u64);
        }
        assert!((0..400).all(|seq| ranges.contains(seq) == plain.contains(&seq)));
        assert_eq!(ranges.first(), plain.first().copied());
    }
}
