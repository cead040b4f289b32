//! The cursor machine driven by made-up events and a made-up clock: owner
//! down, partial bucket failure, a crash between commit and cursor write,
//! the epoch changing mid-slab, delay children, drop-behind; then a seeded
//! simulation with random failures and crashes checking that nothing is
//! skipped.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use narad_meta::AttachEpoch;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::cursor_file::{CursorPosition, Loaded};
use super::machine::{
    Action, Bucket, BucketId, Cursor, CursorConfig, Event, LinkSpec, ParentRecord, ReadOutcome,
    SlabEntry,
};
use crate::ingress::partition::key_partition;

const T0: u64 = 1_700_000_000_000;

fn epoch() -> AttachEpoch {
    AttachEpoch::from_bits(0xfeed)
}

fn link(delay_ms: u64, start_offset: u64) -> LinkSpec {
    LinkSpec {
        epoch: epoch(),
        delay_ms,
        start_offset,
        parent_partition: 1,
        parent_partitions: 3,
        child_partitions: 3,
        remote: None,
    }
}

fn record(offset: u64, key: &str, committed_at_ms: u64) -> ParentRecord {
    ParentRecord {
        offset,
        key: Bytes::copy_from_slice(key.as_bytes()),
        payload: Bytes::from(format!("m{offset}")),
        committed_at_ms,
    }
}

fn slab(records: Vec<ParentRecord>) -> Event {
    let next_offset = records.last().map_or(0, |r| r.offset + 1);
    Event::Read(ReadOutcome::Slab {
        entries: records.into_iter().map(SlabEntry::Record).collect(),
        next_offset,
    })
}

fn position(next_offset: u64) -> CursorPosition {
    CursorPosition {
        epoch: epoch(),
        next_offset,
    }
}

/// A cursor whose file of this epoch says `at`, ready to read.
fn reading_at(link: LinkSpec, at: u64) -> Cursor {
    let mut cursor = Cursor::new(link, CursorConfig::default());
    assert_eq!(cursor.start(), [Action::Load]);
    let actions = cursor.handle(Event::Loaded(Ok(Loaded::Current(position(at)))), T0);
    assert_eq!(
        actions,
        [Action::Read {
            from: at,
            linger: cursor.link().delay_ms == 0
        }]
    );
    cursor
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

fn done(id: BucketId, committed: bool) -> Event {
    Event::BucketDone { id, committed }
}

#[test]
fn without_a_file_of_its_epoch_the_cursor_anchors_only_after_the_leader_confirms() {
    let other_epoch = CursorPosition {
        epoch: AttachEpoch::from_bits(1),
        next_offset: 999,
    };
    for loaded in [
        Loaded::Absent,
        Loaded::Current(other_epoch.clone()),
        Loaded::Damaged("torn".into()),
    ] {
        let mut cursor = Cursor::new(link(0, 40), CursorConfig::default());
        cursor.start();
        assert_eq!(
            cursor.handle(Event::Loaded(Ok(loaded)), T0),
            [Action::Confirm]
        );
        // Not confirmed: deferred 1 s, and an early tick does nothing.
        assert_eq!(
            cursor.handle(Event::Confirmed(Ok(false)), T0),
            [Action::WakeAt(T0 + 1_000)]
        );
        assert_eq!(
            cursor.handle(Event::Tick, T0 + 999),
            [Action::WakeAt(T0 + 1_000)],
            "an early tick sleeps again"
        );
        assert_eq!(cursor.handle(Event::Tick, T0 + 1_000), [Action::Confirm]);
        assert_eq!(
            cursor.handle(Event::Confirmed(Err("no leader".into())), T0 + 1_000),
            [Action::WakeAt(T0 + 2_000)]
        );
        assert_eq!(cursor.handle(Event::Tick, T0 + 2_000), [Action::Confirm]);
        assert_eq!(
            cursor.handle(Event::Confirmed(Ok(true)), T0 + 2_000),
            [Action::Write {
                position: position(40),
                replace: true
            }]
        );
        assert_eq!(cursor.durable_offset(), None);
        assert_eq!(
            cursor.handle(Event::Written(Ok(())), T0 + 2_000),
            [Action::Read {
                from: 40,
                linger: true
            }]
        );
        assert_eq!(cursor.durable_offset(), Some(40));
    }
}

#[test]
fn a_file_of_its_epoch_resumes_without_asking_the_leader() {
    let cursor = reading_at(link(0, 40), 77);
    assert_eq!(cursor.next_offset(), 77);
}

#[test]
fn a_legacy_file_is_migrated_by_the_first_advance() {
    let mut cursor = Cursor::new(link(0, 0), CursorConfig::default());
    cursor.start();
    let actions = cursor.handle(Event::Loaded(Ok(Loaded::Legacy(position(5)))), T0);
    assert_eq!(
        actions,
        [Action::Read {
            from: 5,
            linger: true
        }]
    );
    let buckets = commits(&cursor.handle(slab(vec![record(5, "", T0)]), T0));
    let actions = cursor.handle(done(buckets[0].id, true), T0);
    assert_eq!(
        actions,
        [Action::Write {
            position: position(6),
            replace: true
        }]
    );
    cursor.handle(Event::Written(Ok(())), T0);
    let buckets = commits(&cursor.handle(slab(vec![record(6, "", T0)]), T0));
    let actions = cursor.handle(done(buckets[0].id, true), T0);
    assert_eq!(
        actions,
        [Action::Write {
            position: position(7),
            replace: false
        }]
    );
}

#[test]
fn records_are_bucketed_by_the_childs_partitioner_in_slab_order() {
    let mut cursor = reading_at(link(0, 0), 0);
    let records: Vec<ParentRecord> = (0..12)
        .map(|i| record(i, &format!("k{}", i % 5), T0))
        .collect();
    let buckets = commits(&cursor.handle(slab(records.clone()), T0));
    let mut seen = 0;
    for bucket in &buckets {
        let offsets: Vec<u64> = bucket.records.iter().map(|r| r.offset).collect();
        assert!(offsets.is_sorted(), "{offsets:?}");
        for record in &bucket.records {
            assert_eq!(key_partition(&record.key, 3), bucket.child_partition);
        }
        seen += bucket.records.len();
    }
    assert_eq!(seen, records.len());
}

#[test]
fn keyless_records_keep_the_parent_partition_when_counts_match_and_rotate_otherwise() {
    let mut same = reading_at(link(0, 0), 0);
    let buckets = commits(&same.handle(slab((0..6).map(|i| record(i, "", T0)).collect()), T0));
    assert_eq!(buckets.len(), 1);
    assert_eq!(buckets[0].child_partition, 1);

    let mut wider = reading_at(
        LinkSpec {
            child_partitions: 4,
            remote: None,
            ..link(0, 0)
        },
        0,
    );
    let buckets = commits(&wider.handle(slab((0..8).map(|i| record(i, "", T0)).collect()), T0));
    let sizes: BTreeMap<u32, usize> = buckets
        .iter()
        .map(|b| (b.child_partition, b.records.len()))
        .collect();
    assert_eq!(sizes, BTreeMap::from([(0, 2), (1, 2), (2, 2), (3, 2)]));
}

#[test]
fn the_cursor_advances_only_after_every_bucket_is_committed() {
    let mut cursor = reading_at(link(0, 0), 0);
    let records: Vec<ParentRecord> = (0..30)
        .map(|i| record(i, &format!("key-{i}"), T0))
        .collect();
    let buckets = commits(&cursor.handle(slab(records), T0));
    assert_eq!(buckets.len(), 3);
    assert_eq!(cursor.handle(done(buckets[0].id, true), T0), []);
    assert_eq!(cursor.handle(done(buckets[2].id, true), T0), []);
    assert_eq!(cursor.next_offset(), 0);
    assert_eq!(
        cursor.handle(done(buckets[1].id, true), T0),
        [Action::Write {
            position: position(30),
            replace: false
        }]
    );
    assert_eq!(
        cursor.handle(Event::Written(Ok(())), T0),
        [Action::Read {
            from: 30,
            linger: true
        }]
    );
    let counts = cursor.take_counts();
    assert_eq!((counts.committed, counts.slabs, counts.dropped), (30, 1, 0));
}

#[test]
fn a_failed_bucket_alone_is_retried_from_memory_after_a_second() {
    let mut cursor = reading_at(link(0, 0), 0);
    let records: Vec<ParentRecord> = (0..30)
        .map(|i| record(i, &format!("key-{i}"), T0))
        .collect();
    let buckets = commits(&cursor.handle(slab(records), T0));
    cursor.handle(done(buckets[0].id, true), T0);
    cursor.handle(done(buckets[1].id, false), T0);
    assert_eq!(
        cursor.handle(done(buckets[2].id, true), T0 + 5),
        [Action::WakeAt(T0 + 1_005)]
    );
    assert_eq!(
        cursor.handle(Event::Tick, T0 + 500),
        [Action::WakeAt(T0 + 1_005)]
    );
    let retried = commits(&cursor.handle(Event::Tick, T0 + 1_005));
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].records, buckets[1].records);
    assert_ne!(retried[0].id, buckets[1].id);
    // A late answer under the old id is not taken for the retry.
    assert_eq!(cursor.handle(done(buckets[1].id, true), T0 + 1_006), []);
    assert_eq!(
        cursor.handle(done(retried[0].id, true), T0 + 1_010),
        [Action::Write {
            position: position(30),
            replace: false
        }]
    );
}

#[test]
fn an_owner_that_stays_down_stalls_its_bucket_and_the_cursor_never_moves() {
    let mut cursor = reading_at(link(0, 0), 10);
    let records: Vec<ParentRecord> = (10..20).map(|i| record(i, "same", T0)).collect();
    let mut bucket = commits(&cursor.handle(slab(records), T0)).remove(0);
    let mut now = T0;
    for _ in 0..50 {
        assert_eq!(
            cursor.handle(done(bucket.id, false), now),
            [Action::WakeAt(now + 1_000)]
        );
        now += 1_000;
        bucket = commits(&cursor.handle(Event::Tick, now)).remove(0);
        assert_eq!(cursor.next_offset(), 10);
        assert_eq!(cursor.durable_offset(), Some(10));
    }
    assert_eq!(
        cursor.handle(done(bucket.id, true), now),
        [Action::Write {
            position: position(20),
            replace: false
        }]
    );
}

#[test]
fn a_crash_between_commit_and_cursor_write_repeats_the_slab() {
    let mut cursor = reading_at(link(0, 0), 100);
    let records: Vec<ParentRecord> = (100..110).map(|i| record(i, "k", T0)).collect();
    let bucket = commits(&cursor.handle(slab(records.clone()), T0)).remove(0);
    let write = cursor.handle(done(bucket.id, true), T0);
    assert_eq!(
        write,
        [Action::Write {
            position: position(110),
            replace: false
        }]
    );
    // The process dies before the write lands: the file still says 100.
    let mut restarted = reading_at(link(0, 0), 100);
    let again = commits(&restarted.handle(slab(records), T0));
    assert_eq!(again[0].records, bucket.records);
}

#[test]
fn a_cursor_stopped_mid_slab_writes_nothing_more() {
    let mut cursor = reading_at(link(0, 0), 0);
    let buckets = commits(&cursor.handle(slab((0..5).map(|i| record(i, "k", T0)).collect()), T0));
    cursor.stop();
    assert!(cursor.is_stopped());
    assert_eq!(cursor.handle(done(buckets[0].id, true), T0), []);
    assert_eq!(cursor.handle(Event::Tick, T0 + 60_000), []);
    assert_eq!(cursor.durable_offset(), Some(0));
}

#[test]
fn a_failed_cursor_write_is_retried_and_the_position_stays_until_it_lands() {
    let mut cursor = reading_at(link(0, 0), 0);
    let bucket = commits(&cursor.handle(slab(vec![record(0, "k", T0)]), T0)).remove(0);
    cursor.handle(done(bucket.id, true), T0);
    assert_eq!(
        cursor.handle(Event::Written(Err("EIO".into())), T0),
        [Action::WakeAt(T0 + 1_000)]
    );
    assert_eq!(cursor.durable_offset(), Some(0));
    assert_eq!(
        cursor.handle(Event::Tick, T0 + 1_000),
        [Action::Write {
            position: position(1),
            replace: false
        }]
    );
}

#[test]
fn a_delay_child_sleeps_until_its_head_is_due_and_never_delivers_early() {
    let delay = 1_000;
    let mut cursor = reading_at(link(delay, 0), 0);
    // Head committed at T0, now T0 + 500: due at T0 + 1,000. One wake-up,
    // whatever the backlog behind it.
    let backlog: Vec<ParentRecord> = (0..4_000).map(|i| record(i, "k", T0 + i / 100)).collect();
    assert_eq!(
        cursor.handle(slab(backlog.clone()), T0 + 500),
        [Action::WakeAt(T0 + 1_000)]
    );
    assert_eq!(
        cursor.handle(Event::Tick, T0 + 999),
        [Action::WakeAt(T0 + 1_000)]
    );
    assert_eq!(
        cursor.handle(Event::Tick, T0 + 1_000),
        [Action::Read {
            from: 0,
            linger: false
        }]
    );
    // At T0 + 1,005 the records committed up to T0 + 5 are due: 600 of them.
    let buckets = commits(&cursor.handle(slab(backlog), T0 + 1_005));
    let delivered: Vec<u64> = buckets
        .iter()
        .flat_map(|b| b.records.iter().map(|r| r.offset))
        .collect();
    assert_eq!(delivered, (0..600).collect::<Vec<_>>());
    for record in buckets.iter().flat_map(|b| &b.records) {
        assert!(record.committed_at_ms + delay <= T0 + 1_005);
    }
    assert_eq!(cursor.due_lag_ms(), 5);
    assert_eq!(
        cursor.handle(done(buckets[0].id, true), T0 + 1_006),
        [Action::Write {
            position: position(600),
            replace: false
        }]
    );
}

#[test]
fn a_long_delay_sleeps_at_most_thirty_seconds_at_a_time() {
    let mut cursor = reading_at(link(31_536_000_000, 0), 0);
    assert_eq!(
        cursor.handle(slab(vec![record(0, "k", T0)]), T0),
        [Action::WakeAt(T0 + 30_000)]
    );
    assert_eq!(
        cursor.handle(Event::Tick, T0 + 30_000),
        [Action::Read {
            from: 0,
            linger: false
        }]
    );
}

#[test]
fn a_cursor_behind_retention_skips_to_the_oldest_offset_and_counts_the_drop() {
    let mut cursor = reading_at(link(0, 0), 40);
    assert_eq!(
        cursor.handle(Event::Read(ReadOutcome::Trimmed { oldest_offset: 100 }), T0),
        [Action::Read {
            from: 100,
            linger: true
        }]
    );
    assert_eq!(cursor.take_counts().dropped, 60);
}

#[test]
fn unreadable_parent_offsets_are_skipped_counted_and_moved_past_durably() {
    let mut cursor = reading_at(link(0, 0), 0);
    let only_lost = Event::Read(ReadOutcome::Slab {
        entries: vec![SlabEntry::Lost(0..7)],
        next_offset: 7,
    });
    assert_eq!(
        cursor.handle(only_lost, T0),
        [Action::Write {
            position: position(7),
            replace: false
        }]
    );
    assert_eq!(cursor.take_counts().dropped, 7);
    cursor.handle(Event::Written(Ok(())), T0);
    let mixed = Event::Read(ReadOutcome::Slab {
        entries: vec![
            SlabEntry::Record(record(7, "k", T0)),
            SlabEntry::Lost(8..10),
            SlabEntry::Record(record(10, "k", T0)),
        ],
        next_offset: 11,
    });
    let buckets = commits(&cursor.handle(mixed, T0));
    let offsets: Vec<u64> = buckets[0].records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [7, 10]);
    assert_eq!(
        cursor.handle(done(buckets[0].id, true), T0),
        [Action::Write {
            position: position(11),
            replace: false
        }]
    );
}

#[test]
fn at_most_sixteen_buckets_are_in_flight() {
    let mut cursor = reading_at(
        LinkSpec {
            child_partitions: 40,
            remote: None,
            ..link(0, 0)
        },
        0,
    );
    let records: Vec<ParentRecord> = (0..400)
        .map(|i| record(i, &format!("key-{i}"), T0))
        .collect();
    let first = commits(&cursor.handle(slab(records), T0));
    assert_eq!(first.len(), 16);
    let next = commits(&cursor.handle(done(first[0].id, true), T0));
    assert_eq!(next.len(), 1);
}

#[test]
fn an_empty_slab_reads_again() {
    let mut cursor = reading_at(link(0, 0), 9);
    assert_eq!(
        cursor.handle(
            Event::Read(ReadOutcome::Slab {
                entries: Vec::new(),
                next_offset: 9
            }),
            T0
        ),
        [Action::Read {
            from: 9,
            linger: true
        }]
    );
    assert_eq!(
        cursor.handle(Event::Read(ReadOutcome::Failed("EIO".into())), T0),
        [Action::WakeAt(T0 + 1_000)]
    );
}

/// A seeded run: a parent partition of `total` records, a child store whose
/// commits fail at random, random crashes that restart the cursor from its
/// durable file. At the end every record is in the child at least once,
/// and the file never pointed past a record the child did not hold.
fn simulate(seed: u64, total: u64) -> (u64, usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let config = CursorConfig {
        slab_records_max: 37,
        ..CursorConfig::default()
    };
    let records: Vec<ParentRecord> = (0..total)
        .map(|i| record(i, &format!("k{}", i % 11), T0 + i))
        .collect();
    let mut stored: BTreeMap<u64, usize> = BTreeMap::new();
    let mut file: Option<CursorPosition> = None;
    let mut now = T0;
    let mut crashes = 0;
    let mut cursor = Cursor::new(link(0, 0), config);
    let mut pending: Vec<Action> = cursor.start();
    let mut waits: Vec<u64> = Vec::new();
    let mut steps = 0;
    while file.as_ref().is_none_or(|f| f.next_offset < total) {
        steps += 1;
        assert!(steps < 200_000, "seed {seed}: no progress");
        if rng.random_ratio(1, 200) {
            crashes += 1;
            cursor = Cursor::new(link(0, 0), config);
            pending = cursor.start();
            waits.clear();
            continue;
        }
        let Some(action) = (if pending.is_empty() {
            None
        } else {
            Some(pending.remove(rng.random_range(0..pending.len())))
        }) else {
            now = waits.iter().copied().min().unwrap_or(now).max(now);
            waits.clear();
            pending.extend(cursor.handle(Event::Tick, now));
            continue;
        };
        let event = match action {
            Action::Load => Event::Loaded(Ok(match &file {
                Some(position) => Loaded::Current(position.clone()),
                None => Loaded::Absent,
            })),
            Action::Confirm => Event::Confirmed(Ok(rng.random_bool(0.7))),
            Action::Read { from, .. } => {
                let end = (from + config.slab_records_max as u64).min(total);
                let entries = records[from as usize..end as usize]
                    .iter()
                    .cloned()
                    .map(SlabEntry::Record)
                    .collect();
                Event::Read(ReadOutcome::Slab {
                    entries,
                    next_offset: end,
                })
            }
            Action::Commit(bucket) => {
                let committed = rng.random_bool(0.8);
                if committed {
                    for record in &bucket.records {
                        *stored.entry(record.offset).or_default() += 1;
                    }
                }
                Event::BucketDone {
                    id: bucket.id,
                    committed,
                }
            }
            Action::Write { position, .. } => {
                let ok = rng.random_bool(0.9);
                if ok {
                    // Invariant: the file never passes a record the child
                    // does not hold.
                    for offset in 0..position.next_offset {
                        assert!(
                            stored.contains_key(&offset),
                            "seed {seed}: file at {} before {offset} was stored",
                            position.next_offset
                        );
                    }
                    file = Some(position);
                }
                Event::Written(if ok { Ok(()) } else { Err("EIO".into()) })
            }
            Action::WakeAt(at) => {
                waits.push(at);
                continue;
            }
        };
        pending.extend(cursor.handle(event, now));
    }
    let distinct: BTreeSet<u64> = stored.keys().copied().collect();
    assert_eq!(distinct.len() as u64, total, "seed {seed}");
    let duplicates = stored.values().map(|n| n - 1).sum();
    (crashes, duplicates)
}

#[test]
fn random_failures_and_crashes_never_skip_a_record() {
    let mut crashed_runs = 0;
    for seed in 0..64 {
        let (crashes, _duplicates) = simulate(seed, 500);
        crashed_runs += usize::from(crashes > 0);
    }
    assert!(
        crashed_runs > 10,
        "the simulation should crash in many runs"
    );
}
