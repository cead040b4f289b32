//! Tests of the slot codec: round trips, damage, truncation, and arbitrary
//! bytes or a damaged slot behind a valid checksum.

use proptest::prelude::*;

use super::*;

/// Where a slot's checksum starts.
const CRC_AT: usize = SLOT_BYTES - SLOT_CRC_BYTES;

fn position(frontier: u64, acked_ahead: &[u64]) -> ConsumerPosition {
    ConsumerPosition {
        frontier,
        acked_ahead: acked_ahead.to_vec(),
    }
}

#[test]
fn slot_round_trips_runs_and_single_offsets() {
    let original = position(100, &[102, 103, 104, 110, 500, 501, 1 << 40]);
    let (slot, truncated) = encode_slot(7, &original);
    assert!(!truncated);
    let record = decode_slot(&slot[..]).expect("decodes");
    assert_eq!(record.generation, 7);
    assert_eq!(record.position, original);
    assert!(!record.truncated);
}

#[test]
fn any_changed_byte_fails_the_slot() {
    let (slot, _) = encode_slot(3, &position(5, &[7, 9, 10, 11]));
    for at in 0..SLOT_BYTES {
        let mut damaged = slot.clone();
        damaged[at] ^= 0x40;
        assert!(decode_slot(&damaged[..]).is_err(), "byte {at} changed");
    }
    assert_eq!(
        decode_slot(&slot[..SLOT_BYTES - 1]),
        Err(SlotError::Short(SLOT_BYTES - 1))
    );
    assert!(decode_slot(&[0u8; SLOT_BYTES]).is_err());
}

#[test]
fn oversized_set_keeps_frontier_and_lowest_offsets_in_the_slot() {
    // Gaps of 1000 cost three bytes per offset: 5,000 of them cannot fit.
    let acked: Vec<u64> = (1..=5_000).map(|i| 10 + i * 1_000).collect();
    let original = position(10, &acked);
    let (slot, truncated) = encode_slot(1, &original);
    assert!(truncated);
    let record = decode_slot(&slot[..]).expect("decodes");
    assert!(record.truncated);
    assert_eq!(record.position.frontier, 10);
    let kept = record.position.acked_ahead.len();
    assert!(kept > 1_000, "only {kept} offsets kept");
    assert_eq!(record.position.acked_ahead[..], acked[..kept]);
}

fn arbitrary_position() -> impl Strategy<Value = ConsumerPosition> {
    let frontier = prop_oneof![0..1_000u64, 0..(OFFSET_LIMIT - (1 << 40))];
    // Gap and run length pairs: short and long gaps, singles and runs.
    let runs = prop::collection::vec(
        (
            prop_oneof![0..3u64, 0..200u64, 0..(1u64 << 30)],
            prop_oneof![Just(1u64), 1..5u64, 1..40u64],
        ),
        0..1_200,
    );
    (frontier, runs).prop_map(|(frontier, runs)| {
        let mut acked_ahead = Vec::new();
        let mut next = frontier + 1;
        for (gap, len) in runs {
            let start = next + gap;
            acked_ahead.extend(start..start + len);
            next = start + len + 1;
        }
        ConsumerPosition {
            frontier,
            acked_ahead,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn slot_round_trip_keeps_frontier_and_a_prefix_of_the_set(
        original in arbitrary_position(),
        generation in 1..u64::MAX,
    ) {
        let (slot, truncated) = encode_slot(generation, &original);
        let record = decode_slot(&slot[..]).expect("decodes");
        prop_assert_eq!(record.generation, generation);
        prop_assert_eq!(record.truncated, truncated);
        prop_assert_eq!(record.position.frontier, original.frontier);
        let kept = record.position.acked_ahead.len();
        prop_assert_eq!(&record.position.acked_ahead[..], &original.acked_ahead[..kept]);
        prop_assert_eq!(truncated, kept < original.acked_ahead.len());
    }

    /// A valid slot with bytes changed and its checksum recomputed: unlike
    /// random bodies, this reaches the offset set with a count in range.
    #[test]
    fn a_damaged_slot_resealed_decodes_only_well_formed(
        original in arbitrary_position(),
        changes in prop::collection::vec((0..CRC_AT, 1u8..=255), 1..4),
    ) {
        let (slot, _) = encode_slot(9, &original);
        let mut damaged = slot.to_vec();
        for (at, mask) in changes {
            damaged[at] ^= mask;
        }
        let crc = crc32c::crc32c(&damaged[..CRC_AT]);
        damaged[CRC_AT..].copy_from_slice(&crc.to_be_bytes());
        if let Ok(record) = decode_slot(&damaged) {
            prop_assert!(record.position.is_well_formed());
            prop_assert!(record.generation > 0);
            prop_assert!(record.position.acked_ahead.len() <= SLOT_ACKED_AHEAD_MAX);
        }
    }

    /// Random bodies behind a correct checksum reach every structural check
    /// of the decoder; none may panic, and whatever decodes is well formed.
    #[test]
    fn decoder_survives_arbitrary_bytes_behind_a_valid_checksum(
        body in prop::collection::vec(any::<u8>(), 0..SLOT_BYTES - 4),
        header_valid in any::<bool>(),
    ) {
        let mut slot = vec![0u8; SLOT_BYTES];
        slot[..body.len()].copy_from_slice(&body);
        if header_valid {
            slot[0..4].copy_from_slice(&SLOT_MAGIC);
            slot[4..6].copy_from_slice(&SLOT_FORMAT_VERSION.to_be_bytes());
            slot[6..8].copy_from_slice(&[0, 0]);
        }
        let crc = crc32c::crc32c(&slot[..SLOT_BYTES - 4]);
        slot[SLOT_BYTES - 4..].copy_from_slice(&crc.to_be_bytes());
        if let Ok(record) = decode_slot(&slot) {
            prop_assert!(record.position.is_well_formed());
            prop_assert!(record.generation > 0);
        }
    }
}
