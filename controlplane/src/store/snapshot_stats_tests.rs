//! What the state machine measures of its snapshots: the size of the last
//! one, each build's duration, and the builds and installs that failed.

use std::io::Cursor;
use std::sync::Arc;

use metrics::{Histogram, HistogramFn};
use narad_clock::ManualClock;
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, RaftSnapshotBuilder};
use parking_lot::Mutex;
use tempfile::TempDir;

use super::{DATABASE_FILE, StateMachine, open};
use crate::raft::{Entry, LogId, SnapshotMeta};

/// A histogram that keeps every value recorded into it.
#[derive(Debug, Default)]
struct Observations(Mutex<Vec<f64>>);

impl HistogramFn for Observations {
    fn record(&self, value: f64) {
        self.0.lock().push(value);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

fn log_id(index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

/// A fresh state machine in `dir` that applied a blank entry at index 1.
async fn machine_at_one(dir: &TempDir) -> StateMachine {
    let (_, mut machine) = open(&dir.path().join(DATABASE_FILE)).expect("opens");
    machine
        .apply(vec![Entry {
            log_id: log_id(1),
            payload: EntryPayload::Blank,
        }])
        .await
        .expect("applies");
    machine
}

/// A snapshot's meta and data, built by a state machine of its own.
async fn built_snapshot() -> (SnapshotMeta, Vec<u8>) {
    let dir = TempDir::new().expect("temporary directory");
    let mut machine = machine_at_one(&dir).await;
    let snapshot = machine.build_snapshot().await.expect("builds");
    (snapshot.meta, snapshot.snapshot.into_inner())
}

async fn install(machine: &mut StateMachine, meta: &SnapshotMeta, data: Vec<u8>) -> bool {
    machine
        .install_snapshot(meta, Box::new(Cursor::new(data)))
        .await
        .is_ok()
}

#[test]
fn a_built_snapshot_sets_its_size_records_one_duration_and_no_failure() {
    let dir = TempDir::new().expect("temporary directory");
    let observations = Arc::new(Observations::default());
    runtime().block_on(async {
        let machine = machine_at_one(&dir).await;
        assert_eq!(machine.view().snapshot_stats().bytes(), 0);
        let durations = Histogram::from_arc(Arc::clone(&observations));
        // A manual clock that does not move: the build took 0 s on it.
        let clock = Arc::new(ManualClock::new(5_000));
        let mut machine = machine.with_snapshot_durations(durations, clock);
        let snapshot = machine.build_snapshot().await.expect("builds");
        let stats = machine.view();
        let stats = stats.snapshot_stats();
        assert_eq!(stats.bytes(), snapshot.snapshot.get_ref().len() as u64);
        assert!(stats.bytes() > 0);
        assert_eq!(stats.failures_total(), 0);
    });
    let recorded = observations.0.lock().clone();
    assert_eq!(recorded.len(), 1, "one build, one duration: {recorded:?}");
    assert_eq!(recorded[0], 0.0, "read on the node's clock");
}

#[test]
fn an_installed_snapshot_sets_its_size() {
    let dir = TempDir::new().expect("temporary directory");
    runtime().block_on(async {
        let (meta, data) = built_snapshot().await;
        let size = data.len() as u64;
        let (_, mut machine) = open(&dir.path().join(DATABASE_FILE)).expect("opens");
        assert!(install(&mut machine, &meta, data).await, "installs");
        assert_eq!(machine.view().snapshot_stats().bytes(), size);
        assert_eq!(machine.view().snapshot_stats().failures_total(), 0);
    });
}

#[test]
fn an_install_whose_data_does_not_decode_counts_a_failure() {
    let dir = TempDir::new().expect("temporary directory");
    runtime().block_on(async {
        let (meta, _) = built_snapshot().await;
        let (_, mut machine) = open(&dir.path().join(DATABASE_FILE)).expect("opens");
        assert!(
            !install(&mut machine, &meta, vec![0xff; 16]).await,
            "refused"
        );
        let view = machine.view();
        assert_eq!(view.snapshot_stats().failures_total(), 1);
        assert_eq!(view.snapshot_stats().bytes(), 0, "nothing was installed");
    });
}

#[test]
fn an_install_whose_data_disagrees_with_its_meta_counts_a_failure() {
    let dir = TempDir::new().expect("temporary directory");
    runtime().block_on(async {
        let (mut meta, data) = built_snapshot().await;
        meta.last_log_id = Some(log_id(2));
        let (_, mut machine) = open(&dir.path().join(DATABASE_FILE)).expect("opens");
        assert!(!install(&mut machine, &meta, data).await, "refused");
        assert_eq!(machine.view().snapshot_stats().failures_total(), 1);
    });
}

#[test]
fn a_reopened_store_reports_the_size_of_its_stored_snapshot() {
    let dir = TempDir::new().expect("temporary directory");
    let size = runtime().block_on(async {
        let mut machine = machine_at_one(&dir).await;
        let snapshot = machine.build_snapshot().await.expect("builds");
        snapshot.snapshot.get_ref().len() as u64
    });
    let (_, machine) = open(&dir.path().join(DATABASE_FILE)).expect("reopens");
    assert_eq!(machine.view().snapshot_stats().bytes(), size);
}
