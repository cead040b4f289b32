//! The in-flight shard as a specification: reservations, settles, caps,
//! expiry, skips and restored positions, on plain millisecond values.

use std::collections::HashMap;

use proptest::prelude::*;

use super::ahead::ConsumerPosition;
use super::shard::{InFlightShard, Lease, LeaseGone, Reserve, Settle, ShardLimits};

const VISIBILITY_MS: u64 = 30_000;
const WIDE: ShardLimits = ShardLimits {
    max_in_flight: 1_024,
    max_acked_ahead: 1_024,
};

fn shard() -> InFlightShard {
    InFlightShard::new(ConsumerPosition::default(), 7)
}

fn reserve(shard: &mut InFlightShard, now_ms: u64, high_watermark: u64) -> Lease {
    match shard.reserve(now_ms, high_watermark, VISIBILITY_MS, WIDE) {
        Reserve::Reserved(lease) => lease,
        other => panic!("expected a lease, got {other:?}"),
    }
}

fn settle(
    shard: &mut InFlightShard,
    lease: Lease,
    how: Settle,
    now_ms: u64,
) -> Result<(), LeaseGone> {
    shard.settle(lease.offset, lease.nonce, how, now_ms, VISIBILITY_MS)
}

#[test]
fn reservations_go_out_in_offset_order_from_the_frontier() {
    let mut shard = shard();
    let offsets: Vec<u64> = (0..3).map(|_| reserve(&mut shard, 0, 10).offset).collect();
    assert_eq!(offsets, vec![0, 1, 2]);
    assert_eq!(shard.in_flight(), 3);
}

#[test]
fn nothing_at_or_above_the_high_watermark_is_reserved() {
    let mut shard = shard();
    reserve(&mut shard, 0, 1);
    assert_eq!(shard.reserve(0, 1, VISIBILITY_MS, WIDE), Reserve::Empty);
}

#[test]
fn a_lease_expires_one_visibility_timeout_after_it_is_taken() {
    let mut shard = shard();
    let lease = reserve(&mut shard, 1_000, 10);
    assert_eq!(lease.expires_at_ms, 1_000 + VISIBILITY_MS);
}

#[test]
fn the_same_seed_draws_the_same_nonces_and_leases_draw_distinct_ones() {
    let nonces = |seed| {
        let mut shard = InFlightShard::new(ConsumerPosition::default(), seed);
        (0..4)
            .map(|_| reserve(&mut shard, 0, 10).nonce)
            .collect::<Vec<_>>()
    };
    assert_eq!(nonces(1), nonces(1));
    assert_ne!(nonces(1), nonces(2));
    let mut distinct = nonces(1);
    distinct.dedup();
    assert_eq!(distinct.len(), 4);
}

#[test]
fn acking_the_frontier_moves_it_up() {
    let mut shard = shard();
    let lease = reserve(&mut shard, 0, 10);
    settle(&mut shard, lease, Settle::Ack, 1).unwrap();
    assert_eq!(shard.frontier(), 1);
    assert_eq!(shard.in_flight(), 0);
}

#[test]
fn an_ack_above_a_hole_is_held_ahead_until_the_hole_is_acked() {
    let mut shard = shard();
    let first = reserve(&mut shard, 0, 10);
    let second = reserve(&mut shard, 0, 10);
    let third = reserve(&mut shard, 0, 10);
    settle(&mut shard, third, Settle::Ack, 1).unwrap();
    settle(&mut shard, second, Settle::Ack, 1).unwrap();
    assert_eq!(shard.frontier(), 0);
    assert_eq!(shard.acked_ahead_len(), 2);
    settle(&mut shard, first, Settle::Ack, 1).unwrap();
    assert_eq!(shard.frontier(), 3);
    assert_eq!(shard.acked_ahead_len(), 0);
}

#[test]
fn a_second_ack_of_the_same_lease_is_lease_gone() {
    let mut shard = shard();
    let lease = reserve(&mut shard, 0, 10);
    settle(&mut shard, lease, Settle::Ack, 1).unwrap();
    assert_eq!(settle(&mut shard, lease, Settle::Ack, 2), Err(LeaseGone));
}

#[test]
fn a_settle_with_another_nonce_is_lease_gone_and_keeps_the_lease() {
    let mut shard = shard();
    let lease = reserve(&mut shard, 0, 10);
    let forged = Lease {
        nonce: lease.nonce ^ 1,
        ..lease
    };
    assert_eq!(settle(&mut shard, forged, Settle::Ack, 1), Err(LeaseGone));
    assert!(shard.is_live(lease.offset, lease.nonce));
}

#[test]
fn an_expired_lease_is_redelivered_under_a_new_nonce() {
    let mut shard = shard();
    let lease = reserve(&mut shard, 0, 10);
    assert_eq!(shard.purge_expired(VISIBILITY_MS), 1);
    let again = reserve(&mut shard, VISIBILITY_MS, 10);
    assert_eq!(again.offset, lease.offset);
    assert_ne!(again.nonce, lease.nonce);
    assert_eq!(
        settle(&mut shard, lease, Settle::Ack, VISIBILITY_MS),
        Err(LeaseGone)
    );
}

#[test]
fn a_purge_before_the_expiry_keeps_the_lease() {
    let mut shard = shard();
    let lease = reserve(&mut shard, 0, 10);
    assert_eq!(shard.purge_expired(lease.expires_at_ms - 1), 0);
    assert!(shard.is_live(lease.offset, lease.nonce));
}

#[test]
fn a_lapsed_lease_not_purged_yet_refuses_its_ack_and_is_released() {
    let mut shard = shard();
    let lease = reserve(&mut shard, 0, 10);
    assert_eq!(
        settle(&mut shard, lease, Settle::Ack, lease.expires_at_ms),
        Err(LeaseGone)
    );
    assert_eq!(shard.frontier(), 0);
    assert_eq!(reserve(&mut shard, lease.expires_at_ms, 10).offset, 0);
}

#[test]
fn an_extend_keeps_the_lease_past_its_first_expiry() {
    let mut shard = shard();
    let lease = reserve(&mut shard, 0, 10);
    settle(&mut shard, lease, Settle::Extend, 20_000).unwrap();
    assert_eq!(shard.purge_expired(VISIBILITY_MS), 0);
    assert_eq!(shard.next_expiry_ms(), Some(20_000 + VISIBILITY_MS));
    settle(&mut shard, lease, Settle::Ack, VISIBILITY_MS + 1).unwrap();
    assert_eq!(shard.frontier(), 1);
}

#[test]
fn an_extended_lease_expires_at_its_new_expiry() {
    let mut shard = shard();
    let lease = reserve(&mut shard, 0, 10);
    settle(&mut shard, lease, Settle::Extend, 10_000).unwrap();
    assert_eq!(shard.purge_expired(10_000 + VISIBILITY_MS), 1);
    assert!(!shard.is_live(lease.offset, lease.nonce));
}

#[test]
fn a_nack_makes_the_offset_the_next_one_delivered() {
    let mut shard = shard();
    let first = reserve(&mut shard, 0, 10);
    reserve(&mut shard, 0, 10);
    settle(&mut shard, first, Settle::Nack, 1).unwrap();
    let again = reserve(&mut shard, 1, 10);
    assert_eq!(again.offset, first.offset);
    assert_ne!(again.nonce, first.nonce);
}

#[test]
fn a_released_lease_is_redeliverable_at_once() {
    let mut shard = shard();
    let lease = reserve(&mut shard, 0, 10);
    assert!(shard.release(lease.offset, lease.nonce));
    assert!(
        !shard.release(lease.offset, lease.nonce),
        "released once only"
    );
    assert_eq!(reserve(&mut shard, 0, 10).offset, lease.offset);
}

#[test]
fn at_the_in_flight_cap_nothing_new_goes_out() {
    let limits = ShardLimits {
        max_in_flight: 2,
        max_acked_ahead: 8,
    };
    let mut shard = shard();
    for _ in 0..2 {
        assert!(matches!(
            shard.reserve(0, 10, VISIBILITY_MS, limits),
            Reserve::Reserved(_)
        ));
    }
    assert_eq!(shard.reserve(0, 10, VISIBILITY_MS, limits), Reserve::AtCap);
}

#[test]
fn an_ack_frees_an_in_flight_slot() {
    let limits = ShardLimits {
        max_in_flight: 1,
        max_acked_ahead: 8,
    };
    let mut shard = shard();
    let Reserve::Reserved(lease) = shard.reserve(0, 10, VISIBILITY_MS, limits) else {
        panic!("first reservation")
    };
    settle(&mut shard, lease, Settle::Ack, 1).unwrap();
    assert!(matches!(
        shard.reserve(1, 10, VISIBILITY_MS, limits),
        Reserve::Reserved(Lease { offset: 1, .. })
    ));
}

/// Leases offsets 0..=n, acks 1..=n, leaving offset 0 leased under them.
fn hole_under_acked_run(shard: &mut InFlightShard, n: u64) -> Lease {
    let hole = reserve(shard, 0, 100);
    for _ in 0..n {
        let lease = reserve(shard, 0, 100);
        settle(shard, lease, Settle::Ack, 1).unwrap();
    }
    hole
}

#[test]
fn at_the_acked_ahead_cap_only_the_frontier_hole_goes_out() {
    let limits = ShardLimits {
        max_in_flight: 8,
        max_acked_ahead: 2,
    };
    let mut shard = shard();
    let hole = hole_under_acked_run(&mut shard, 2);
    settle(&mut shard, hole, Settle::Nack, 1).unwrap();
    let Reserve::Reserved(lease) = shard.reserve(1, 100, VISIBILITY_MS, limits) else {
        panic!("the hole goes out")
    };
    assert_eq!(lease.offset, 0);
}

#[test]
fn at_the_acked_ahead_cap_with_the_hole_leased_the_partition_is_at_cap() {
    let limits = ShardLimits {
        max_in_flight: 8,
        max_acked_ahead: 2,
    };
    let mut shard = shard();
    hole_under_acked_run(&mut shard, 2);
    assert_eq!(shard.reserve(1, 100, VISIBILITY_MS, limits), Reserve::AtCap);
}

#[test]
fn acks_of_delivered_records_are_accepted_past_the_acked_ahead_cap() {
    let limits = ShardLimits {
        max_in_flight: 8,
        max_acked_ahead: 2,
    };
    let mut shard = shard();
    let mut leases = Vec::new();
    for _ in 0..5 {
        let Reserve::Reserved(lease) = shard.reserve(0, 100, VISIBILITY_MS, limits) else {
            panic!("below both caps")
        };
        leases.push(lease);
    }
    for &lease in &leases[1..] {
        settle(&mut shard, lease, Settle::Ack, 1).unwrap();
    }
    assert_eq!(shard.acked_ahead_len(), 4);
    settle(&mut shard, leases[0], Settle::Ack, 1).unwrap();
    assert_eq!(shard.frontier(), 5);
    assert_eq!(shard.acked_ahead_len(), 0);
}

#[test]
fn next_expiry_follows_the_earliest_live_lease() {
    let mut shard = shard();
    assert_eq!(shard.next_expiry_ms(), None);
    let first = reserve(&mut shard, 0, 10);
    reserve(&mut shard, 500, 10);
    assert_eq!(shard.next_expiry_ms(), Some(VISIBILITY_MS));
    settle(&mut shard, first, Settle::Ack, 1).unwrap();
    assert_eq!(shard.next_expiry_ms(), Some(500 + VISIBILITY_MS));
}

#[test]
fn many_extends_keep_the_expiry_heap_bounded() {
    let mut shard = shard();
    let lease = reserve(&mut shard, 0, 10);
    for now in 1..10_000 {
        settle(&mut shard, lease, Settle::Extend, now).unwrap();
    }
    shard.assert_invariants();
    assert_eq!(shard.next_expiry_ms(), Some(9_999 + VISIBILITY_MS));
    assert_eq!(shard.purge_expired(9_999 + VISIBILITY_MS), 1);
}

#[test]
fn an_unreadable_offset_is_settled_and_counted() {
    let mut shard = shard();
    let lease = reserve(&mut shard, 0, 10);
    assert_eq!(shard.skip_unreadable(lease.offset..lease.offset + 1), 1);
    assert_eq!(shard.frontier(), 1);
    assert_eq!(shard.corrupt_skipped_total(), 1);
    assert_eq!(shard.in_flight(), 0);
}

#[test]
fn skipping_unreadable_offsets_never_handed_out_keeps_the_ones_between() {
    let mut shard = shard();
    assert_eq!(shard.skip_unreadable(2..4), 2);
    shard.assert_invariants();
    assert_eq!(shard.frontier(), 0);
    let offsets: Vec<u64> = (0..3).map(|_| reserve(&mut shard, 0, 10).offset).collect();
    assert_eq!(offsets, vec![0, 1, 4]);
}

#[test]
fn skipping_an_offset_twice_counts_it_once() {
    let mut shard = shard();
    shard.skip_unreadable(3..4);
    assert_eq!(shard.skip_unreadable(3..4), 0);
    assert_eq!(shard.corrupt_skipped_total(), 1);
}

#[test]
fn a_retention_jump_moves_the_frontier_and_reports_unacked_offsets_lost() {
    let mut shard = shard();
    let leases: Vec<Lease> = (0..4).map(|_| reserve(&mut shard, 0, 10)).collect();
    settle(&mut shard, leases[2], Settle::Ack, 1).unwrap();
    // 0, 1 and 3 were never acked; 2 was.
    assert_eq!(shard.skip_to(4), 3);
    assert_eq!(shard.frontier(), 4);
    assert_eq!(shard.in_flight(), 0);
    assert_eq!(shard.dropped_total(), 3);
    assert_eq!(
        settle(&mut shard, leases[0], Settle::Ack, 2),
        Err(LeaseGone)
    );
    assert_eq!(reserve(&mut shard, 2, 10).offset, 4);
}

#[test]
fn a_retention_jump_keeps_leases_above_the_oldest_offset() {
    let mut shard = shard();
    let leases: Vec<Lease> = (0..4).map(|_| reserve(&mut shard, 0, 10)).collect();
    shard.skip_to(2);
    assert!(shard.is_live(leases[3].offset, leases[3].nonce));
    settle(&mut shard, leases[2], Settle::Ack, 1).unwrap();
    assert_eq!(shard.frontier(), 3, "offset 3 is still leased");
    shard.assert_invariants();
}

#[test]
fn a_retention_jump_below_the_frontier_does_nothing() {
    let mut shard = InFlightShard::new(
        ConsumerPosition {
            frontier: 5,
            acked_ahead: Vec::new(),
        },
        1,
    );
    assert_eq!(shard.skip_to(3), 0);
    assert_eq!(shard.frontier(), 5);
}

#[test]
fn a_restored_position_delivers_only_the_holes() {
    let mut shard = InFlightShard::new(
        ConsumerPosition {
            frontier: 2,
            acked_ahead: vec![3, 5, 6],
        },
        1,
    );
    let offsets: Vec<u64> = (0..3).map(|_| reserve(&mut shard, 0, 10).offset).collect();
    assert_eq!(offsets, vec![2, 4, 7]);
    shard.assert_invariants();
}

#[test]
fn a_restored_run_that_starts_at_the_frontier_is_settled_at_once() {
    let shard = InFlightShard::new(
        ConsumerPosition {
            frontier: 2,
            acked_ahead: vec![2, 3, 7],
        },
        1,
    );
    assert_eq!(shard.frontier(), 4);
    assert_eq!(shard.position().acked_ahead, vec![7]);
}

#[test]
fn position_reports_the_frontier_and_the_offsets_acked_ahead() {
    let mut shard = shard();
    let leases: Vec<Lease> = (0..4).map(|_| reserve(&mut shard, 0, 10)).collect();
    settle(&mut shard, leases[0], Settle::Ack, 1).unwrap();
    settle(&mut shard, leases[3], Settle::Ack, 1).unwrap();
    assert_eq!(
        shard.position(),
        ConsumerPosition {
            frontier: 1,
            acked_ahead: vec![3],
        }
    );
}

/// One step of a random run against the shard.
#[derive(Clone, Debug)]
enum Step {
    Reserve,
    Settle {
        pick: usize,
        how: Settle,
        forged: bool,
    },
    Release {
        pick: usize,
    },
    Advance {
        ms: u64,
    },
    Commit {
        records: u64,
    },
    Skip {
        pick: usize,
    },
    Retention {
        ahead: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let how = prop_oneof![Just(Settle::Ack), Just(Settle::Extend), Just(Settle::Nack)];
    prop_oneof![
        6 => Just(Step::Reserve),
        6 => (any::<usize>(), how, proptest::bool::weighted(0.1))
            .prop_map(|(pick, how, forged)| Step::Settle { pick, how, forged }),
        1 => any::<usize>().prop_map(|pick| Step::Release { pick }),
        2 => (0u64..40).prop_map(|ms| Step::Advance { ms }),
        2 => (0u64..6).prop_map(|records| Step::Commit { records }),
        1 => any::<usize>().prop_map(|pick| Step::Skip { pick }),
        1 => (0u64..4).prop_map(|ahead| Step::Retention { ahead }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random runs of reserve, settle, release, expiry, skips and
    /// retention jumps: never two live leases on one offset, never the
    /// frontier over an offset that was not settled, and the acked-ahead
    /// set within the sum of both caps.
    #[test]
    fn random_runs_keep_leases_exclusive_and_the_frontier_honest(
        steps in proptest::collection::vec(step(), 1..200),
        max_in_flight in 1usize..6,
        max_acked_ahead in 1usize..6,
    ) {
        const VISIBILITY: u64 = 50;
        let limits = ShardLimits { max_in_flight, max_acked_ahead };
        let mut shard = InFlightShard::new(ConsumerPosition::default(), 3);
        let mut now = 0u64;
        let mut high_watermark = 4u64;
        // What the model knows: offsets settled (acked, skipped, or
        // passed by retention) and the leases handed out, live or not.
        let mut settled = std::collections::BTreeSet::new();
        let mut handed: Vec<Lease> = Vec::new();
        let mut live: HashMap<u64, u64> = HashMap::new();
        for step in steps {
            shard.purge_expired(now);
            live.retain(|&offset, &mut nonce| shard.is_live(offset, nonce));
            match step {
                Step::Reserve => {
                    if let Reserve::Reserved(lease) =
                        shard.reserve(now, high_watermark, VISIBILITY, limits)
                    {
                        prop_assert!(lease.offset < high_watermark);
                        prop_assert!(!settled.contains(&lease.offset));
                        prop_assert!(
                            live.insert(lease.offset, lease.nonce).is_none(),
                            "offset {} leased twice", lease.offset
                        );
                        handed.push(lease);
                    }
                }
                Step::Settle { pick, how, forged } if !handed.is_empty() => {
                    let lease = handed[pick % handed.len()];
                    let nonce = if forged { lease.nonce.wrapping_add(1) } else { lease.nonce };
                    let was_live = live.get(&lease.offset) == Some(&nonce);
                    let outcome = shard.settle(lease.offset, nonce, how, now, VISIBILITY);
                    prop_assert_eq!(outcome.is_ok(), was_live);
                    if outcome.is_ok() && how != Settle::Extend {
                        live.remove(&lease.offset);
                    }
                    if outcome.is_ok() && how == Settle::Ack {
                        settled.insert(lease.offset);
                    }
                }
                Step::Release { pick } if !handed.is_empty() => {
                    let lease = handed[pick % handed.len()];
                    if shard.release(lease.offset, lease.nonce) {
                        live.remove(&lease.offset);
                    }
                }
                Step::Advance { ms } => now += ms,
                Step::Commit { records } => high_watermark += records,
                Step::Skip { pick } if !live.is_empty() => {
                    let mut offsets: Vec<u64> = live.keys().copied().collect();
                    offsets.sort_unstable();
                    let offset = offsets[pick % offsets.len()];
                    shard.skip_unreadable(offset..offset + 1);
                    live.remove(&offset);
                    settled.insert(offset);
                }
                Step::Retention { ahead } => {
                    let oldest = (shard.frontier() + ahead).min(high_watermark);
                    shard.skip_to(oldest);
                    settled.extend(0..oldest);
                    live.retain(|&offset, _| offset >= oldest);
                }
                _ => {}
            }
            shard.assert_invariants();
            prop_assert_eq!(shard.in_flight(), live.len());
            prop_assert!(
                (0..shard.frontier()).all(|offset| settled.contains(&offset)),
                "frontier {} passed an unsettled offset", shard.frontier()
            );
            prop_assert!(shard.acked_ahead_len() <= max_in_flight + max_acked_ahead);
        }
    }
}
