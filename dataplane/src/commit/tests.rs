//! Combiner tests: the checks under the produce lock, and concurrent
//! batches landing as disjoint contiguous runs.

use std::sync::Arc;

use bytes::Bytes;
use narad_clock::ManualClock;
use narad_disk::Disk;
use narad_disk::sim::SimDisk;
use narad_plog::{LogConfig, ReadEntry, ReadLimits};

use super::{Combiners, CommitBatch, CommitError, CommitItem};
use crate::metrics::NodeMetrics;
use crate::partitions::LocalLogs;
use crate::testing::{LOCAL_NODE, apply, assign, create_command, id_text, place, replica};
use crate::topology::Destination;
use narad_meta::{Actor, AlterTopic, Command, CreateTopic, DeleteTopic};

fn combiners() -> (Arc<Combiners>, Arc<crate::metadata::MetadataReplica>) {
    combiners_on(Arc::new(ManualClock::new(NOW_MS)))
}

/// Combiners over a simulated disk whose clock is `clock`.
fn combiners_on(
    clock: Arc<ManualClock>,
) -> (Arc<Combiners>, Arc<crate::metadata::MetadataReplica>) {
    let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(3));
    let logs = Arc::new(LocalLogs::new(disk, "/node", LogConfig::default(), clock));
    let replica = replica();
    let combiners = Arc::new(Combiners::new(
        logs,
        Arc::clone(&replica),
        Arc::new(NodeMetrics::new()),
    ));
    (combiners, replica)
}

/// Where the combiners' clock stands: time does not move in these tests.
const NOW_MS: u64 = 10_000;

fn batch(payloads: &[&str], incarnation: Option<&str>) -> CommitBatch {
    CommitBatch {
        items: payloads
            .iter()
            .map(|payload| {
                CommitItem::new(
                    Bytes::new(),
                    Bytes::copy_from_slice(payload.as_bytes()),
                    incarnation.map(Arc::from),
                )
            })
            .collect(),
        deadline_ms: u64::MAX,
    }
}

fn payloads(combiners: &Combiners, destination: &Destination) -> Vec<Vec<u8>> {
    let Some(log) = combiners.logs().get(destination) else {
        return Vec::new();
    };
    let read = log.read(0, u64::MAX, ReadLimits::default()).unwrap();
    read.entries
        .into_iter()
        .map(|entry| match entry {
            ReadEntry::Record(record) => record.payload,
            ReadEntry::Unreadable { .. } => panic!("unreadable record"),
        })
        .collect()
}

const ORDERS_ID: &str = "00000000000000a1";

#[test]
fn commit_makes_the_batch_visible_at_contiguous_offsets() {
    let (combiners, _) = combiners();
    let destination = Destination::new("orders", 0);
    let first = combiners
        .commit(&destination, batch(&["a", "b"], Some(ORDERS_ID)))
        .unwrap();
    let second = combiners
        .commit(&destination, batch(&["c"], Some(ORDERS_ID)))
        .unwrap();
    assert_eq!((first.offsets, first.already_stored), (0..2, 0));
    assert_eq!((second.offsets, second.already_stored), (2..3, 0));
    assert_eq!(
        payloads(&combiners, &destination),
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
}

#[test]
fn incarnation_mismatch_is_refused_with_nothing_appended() {
    let (combiners, _) = combiners();
    let destination = Destination::new("orders", 0);
    let error = combiners
        .commit(&destination, batch(&["a"], Some("00000000000000ff")))
        .unwrap_err();
    assert!(matches!(error, CommitError::IncarnationMismatch { .. }));
    assert!(payloads(&combiners, &destination).is_empty());
}

#[test]
fn records_without_an_id_commit_by_name() {
    let (combiners, _) = combiners();
    let destination = Destination::new("orders", 1);
    assert!(combiners.commit(&destination, batch(&["a"], None)).is_ok());
}

#[test]
fn a_partition_owned_elsewhere_is_refused() {
    let (combiners, replica) = combiners();
    apply(
        &replica,
        Command::CreateTopic(create_command("split", 0xe5, 3)),
    );
    let owners = [(0, LOCAL_NODE), (1, LOCAL_NODE), (2, LOCAL_NODE + 1)];
    assign(&replica, "split", &owners);
    let split_id = id_text(0xe5);
    let error = combiners
        .commit(
            &Destination::new("split", 2),
            batch(&["a"], Some(&split_id)),
        )
        .unwrap_err();
    assert!(matches!(error, CommitError::NotOwner));
}

#[test]
fn a_batch_whose_caller_gave_up_is_left_out() {
    let (combiners, _) = combiners();
    let destination = Destination::new("orders", 0);
    let mut late = batch(&["a"], Some(ORDERS_ID));
    late.deadline_ms = NOW_MS - 1;
    assert!(matches!(
        combiners.commit(&destination, late),
        Err(CommitError::CallerGone)
    ));
    assert!(payloads(&combiners, &destination).is_empty());
}

#[test]
fn a_deleted_topic_is_refused() {
    let (combiners, replica) = combiners();
    let delete = DeleteTopic {
        actor: Actor::SecurityOff,
        name: "orders".into(),
        expected_id: None,
    };
    apply(&replica, Command::DeleteTopic(delete));
    assert!(
        combiners
            .commit(
                &Destination::new("orders", 0),
                batch(&["a"], Some(ORDERS_ID))
            )
            .is_err()
    );
}

#[test]
fn concurrent_batches_land_as_disjoint_runs() {
    let (combiners, _) = combiners();
    let destination = Destination::new("orders", 0);
    let threads: Vec<_> = (0..8)
        .map(|thread| {
            let combiners = Arc::clone(&combiners);
            let destination = destination.clone();
            std::thread::spawn(move || {
                (0..10)
                    .map(|i| {
                        let payload = format!("{thread}-{i}");
                        combiners
                            .commit(&destination, batch(&[&payload, &payload], Some(ORDERS_ID)))
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut ranges: Vec<_> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .map(|stored| stored.offsets)
        .collect();
    ranges.sort_by_key(|range| range.start);
    for pair in ranges.windows(2) {
        assert_eq!(pair[0].end, pair[1].start);
    }
    assert_eq!(ranges.last().map(|range| range.end), Some(160));
    let stored = payloads(&combiners, &destination);
    for range in &ranges {
        let start = usize::try_from(range.start).unwrap();
        assert_eq!(
            stored[start],
            stored[start + 1],
            "a batch's records stay together"
        );
    }
}

/// Creates topic `name` (incarnation `id`) on this node with an
/// idempotency window of `window_ms`.
fn topic_with_window(
    replica: &crate::metadata::MetadataReplica,
    name: &str,
    id: u64,
    window_ms: i64,
) {
    let create = CreateTopic {
        idempotency_window_ms: Some(window_ms),
        ..create_command(name, id, 3)
    };
    place(replica, create, LOCAL_NODE);
}

/// One record with idempotency key `key`.
fn keyed(key: &str, incarnation: &str) -> CommitBatch {
    let mut batch = batch(&[key], Some(incarnation));
    batch.items[0].idempotency_key = Bytes::copy_from_slice(key.as_bytes());
    batch
}

#[test]
fn a_commit_deduplicates_over_the_topic_idempotency_window_as_altered() {
    let (combiners, replica) = combiners();
    topic_with_window(&replica, "brief", 0xe6, 1_000);
    let destination = Destination::new("brief", 0);
    let id = id_text(0xe6);
    combiners.commit(&destination, keyed("k1", &id)).unwrap();
    let window_ms = |combiners: &Combiners| {
        let log = combiners.logs().get(&destination).expect("the log is open");
        log.idempotency_window_ms()
    };
    assert_eq!(window_ms(&combiners), 1_000);
    let alter = AlterTopic {
        idempotency_window_ms: Some(5_000),
        ..AlterTopic::named(Actor::SecurityOff, "brief", None)
    };
    apply(&replica, Command::AlterTopic(alter));
    let again = combiners.commit(&destination, keyed("k1", &id)).unwrap();
    assert_eq!(window_ms(&combiners), 5_000);
    assert_eq!(
        again.already_stored, 1,
        "within the window: not stored again"
    );
}

#[test]
fn a_key_is_stored_again_once_a_short_topic_window_has_passed() {
    let clock = Arc::new(ManualClock::new(NOW_MS));
    let (combiners, replica) = combiners_on(Arc::clone(&clock));
    topic_with_window(&replica, "brief", 0xe6, 1_000);
    let destination = Destination::new("brief", 0);
    let id = id_text(0xe6);
    let first = combiners.commit(&destination, keyed("k1", &id)).unwrap();
    assert_eq!((first.offsets, first.already_stored), (0..1, 0));
    // Commit times are the node clock's wall reading.
    clock.advance(999);
    let within = combiners.commit(&destination, keyed("k1", &id)).unwrap();
    assert_eq!(within.already_stored, 1, "still within the window");
    clock.advance(101);
    let second = combiners.commit(&destination, keyed("k1", &id)).unwrap();
    assert_eq!((second.offsets, second.already_stored), (1..2, 0));
    assert_eq!(payloads(&combiners, &destination).len(), 2);
}
