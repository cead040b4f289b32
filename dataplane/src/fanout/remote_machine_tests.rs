//! A remote child's cursor: lanes by key hash (keyless by offset), skipped
//! offsets passed over and counted, a lane that failed after storing part
//! of its records resent from the first one not stored, and the position
//! held until every lane is stored.

use std::collections::BTreeSet;

use bytes::Bytes;
use narad_meta::AttachEpoch;

use super::cursor_file::{CursorPosition, Loaded};
use super::machine::{
    Action, Bucket, Cursor, CursorConfig, Event, LinkSpec, ParentRecord, ReadOutcome, RemoteSpec,
    SlabEntry, lane_of,
};
use crate::ingress::partition::key_partition;

const T0: u64 = 1_700_000_000_000;

fn remote_link(lanes: u8, skip: &[u64]) -> LinkSpec {
    LinkSpec {
        epoch: AttachEpoch::from_bits(7),
        delay_ms: 0,
        start_offset: 0,
        parent_partition: 2,
        parent_partitions: 8,
        child_partitions: 0,
        remote: Some(RemoteSpec {
            lanes,
            skip: skip.iter().copied().collect(),
        }),
    }
}

fn record(offset: u64, key: &str) -> ParentRecord {
    ParentRecord {
        offset,
        key: Bytes::copy_from_slice(key.as_bytes()),
        payload: Bytes::from(format!("m{offset}")),
        committed_at_ms: T0 + offset,
    }
}

fn reading(link: LinkSpec) -> Cursor {
    let mut cursor = Cursor::new(link, CursorConfig::default());
    cursor.start();
    let position = CursorPosition {
        epoch: AttachEpoch::from_bits(7),
        next_offset: 0,
    };
    cursor.handle(Event::Loaded(Ok(Loaded::Current(position))), T0);
    cursor
}

fn slab(records: &[ParentRecord]) -> Event {
    Event::Read(ReadOutcome::Slab {
        entries: records.iter().cloned().map(SlabEntry::Record).collect(),
        next_offset: records.last().map_or(0, |r| r.offset + 1),
    })
}

fn commits(actions: &[Action]) -> Vec<Bucket> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Commit(bucket) => Some(bucket.clone()),
            _ => None,
        })
        .collect()
}

fn offsets(bucket: &Bucket) -> Vec<u64> {
    bucket.records.iter().map(|r| r.offset).collect()
}

#[test]
fn a_keyed_record_goes_to_its_keys_lane_and_a_keyless_one_to_its_offsets() {
    let keys = ["", "alpha", "beta", "", "gamma", "alpha"];
    let records: Vec<_> = (0..60).map(|i| record(i, keys[i as usize % 6])).collect();
    let mut cursor = reading(remote_link(4, &[]));
    let buckets = commits(&cursor.handle(slab(&records), T0));
    assert!(buckets.len() <= 4);
    let mut seen = BTreeSet::new();
    for bucket in &buckets {
        for record in &bucket.records {
            let expected = if record.key.is_empty() {
                (record.offset % 4) as u32
            } else {
                key_partition(&record.key, 4)
            };
            assert_eq!(bucket.child_partition, expected, "offset {}", record.offset);
            assert_eq!(lane_of(record, 4), expected);
            assert!(seen.insert(record.offset));
        }
        // Slab order within the lane, so one key's records keep theirs.
        assert!(offsets(bucket).windows(2).all(|w| w[0] < w[1]));
    }
    assert_eq!(seen.len(), 60);
}

#[test]
fn skipped_offsets_are_not_shipped_and_the_position_moves_past_them() {
    let records: Vec<_> = (0..10).map(|i| record(i, "k")).collect();
    let mut cursor = reading(remote_link(1, &[3, 9]));
    let buckets = commits(&cursor.handle(slab(&records), T0));
    assert_eq!(buckets.len(), 1);
    assert_eq!(offsets(&buckets[0]), [0, 1, 2, 4, 5, 6, 7, 8]);
    let actions = cursor.handle(
        Event::BucketDone {
            id: buckets[0].id,
            committed: true,
        },
        T0,
    );
    assert!(matches!(&actions[..], [Action::Write { position, .. }] if position.next_offset == 10));
    let counts = cursor.take_counts();
    assert_eq!((counts.committed, counts.skipped), (8, 2));
}

#[test]
fn a_lane_that_stored_part_of_its_records_is_resent_from_the_first_one_not_stored() {
    let records: Vec<_> = (0..6).map(|i| record(i, "same-key")).collect();
    let mut cursor = reading(remote_link(2, &[]));
    let buckets = commits(&cursor.handle(slab(&records), T0));
    assert_eq!(buckets.len(), 1);
    assert_eq!(cursor.oldest_pending_ms(), Some(T0));
    let actions = cursor.handle(
        Event::BucketShippedPart {
            id: buckets[0].id,
            shipped: 4,
        },
        T0,
    );
    // Not advanced: the retry waits for the back-off.
    assert_eq!(actions, [Action::WakeAt(T0 + 1_000)]);
    assert_eq!(cursor.oldest_pending_ms(), Some(T0 + 4));
    let retry = commits(&cursor.handle(Event::Tick, T0 + 1_000));
    assert_eq!(retry.len(), 1);
    assert_eq!(offsets(&retry[0]), [4, 5]);
    let actions = cursor.handle(
        Event::BucketDone {
            id: retry[0].id,
            committed: true,
        },
        T0 + 1_000,
    );
    assert!(matches!(&actions[..], [Action::Write { position, .. }] if position.next_offset == 6));
    assert_eq!(cursor.take_counts().committed, 6);
}

#[test]
fn the_position_holds_while_any_lane_is_not_stored() {
    let records: Vec<_> = (0..40).map(|i| record(i, &format!("k{i}"))).collect();
    let mut cursor = reading(remote_link(8, &[]));
    let buckets = commits(&cursor.handle(slab(&records), T0));
    assert!(buckets.len() > 1);
    let (last, rest) = buckets.split_last().expect("buckets");
    for bucket in rest {
        let actions = cursor.handle(
            Event::BucketDone {
                id: bucket.id,
                committed: true,
            },
            T0,
        );
        assert!(actions.is_empty(), "advanced before every lane was stored");
    }
    let failed = cursor.handle(
        Event::BucketShippedPart {
            id: last.id,
            shipped: 0,
        },
        T0,
    );
    assert_eq!(failed, [Action::WakeAt(T0 + 1_000)]);
    assert_eq!(cursor.next_offset(), 0);
}

#[test]
fn a_released_lane_is_read_again_from_the_log_when_its_retry_is_due() {
    let records: Vec<_> = (0..6).map(|i| record(i, "")).collect();
    let mut cursor = reading(remote_link(2, &[]));
    let buckets = commits(&cursor.handle(slab(&records), T0));
    assert_eq!(buckets.len(), 2);
    // Lane 0 stored; lane 1 stored its first record, then failed.
    assert_eq!(cursor.held_for_retry_bytes(), 0);
    cursor.handle(
        Event::BucketDone {
            id: buckets[0].id,
            committed: true,
        },
        T0,
    );
    let retry = cursor.handle(
        Event::BucketShippedPart {
            id: buckets[1].id,
            shipped: 1,
        },
        T0,
    );
    let [Action::WakeAt(due)] = retry[..] else {
        panic!("a retry is scheduled: {retry:?}");
    };
    // Two records of lane 1 wait in memory: "m3" and "m5".
    assert_eq!(cursor.held_for_retry_bytes(), 4);

    let released = cursor.handle(Event::Release, T0);
    assert_eq!(released, [Action::WakeAt(due)]);
    assert_eq!(cursor.held_for_retry_bytes(), 0);
    assert_eq!(cursor.take_counts().released, 2);
    // When the retry is due, the slab is read again from where the
    // position still stands.
    let again = cursor.handle(Event::Tick, due);
    assert!(
        matches!(&again[..], [Action::Read { from: 0, .. }]),
        "{again:?}"
    );
    assert_eq!(cursor.next_offset(), 0);
}

#[test]
fn release_is_ignored_while_nothing_waits_for_a_retry() {
    let records: Vec<_> = (0..4).map(|i| record(i, "")).collect();
    let mut cursor = reading(remote_link(1, &[]));
    let buckets = commits(&cursor.handle(slab(&records), T0));
    // The lane is still being shipped: nothing to let go.
    assert!(cursor.handle(Event::Release, T0).is_empty());
    let done = cursor.handle(
        Event::BucketDone {
            id: buckets[0].id,
            committed: true,
        },
        T0,
    );
    assert!(matches!(&done[..], [Action::Write { position, .. }] if position.next_offset == 4));
    assert_eq!(cursor.take_counts().released, 0);
}
