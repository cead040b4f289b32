//! The store against openraft's own storage conformance suite, and the
//! durability of what it was told.

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, EntryPayload, RaftLogReader, Vote};
use tempfile::TempDir;

use super::{DATABASE_FILE, LogStore, StateMachine, open};
use crate::raft::{Entry, LogId, StorageError, TypeConfig};
use narad_meta::follow::AppliedOutcome;
use narad_meta::{Command, Heartbeat};

/// Builds a fresh store in its own temporary directory, kept alive by the
/// guard for as long as the suite uses the store.
struct FreshStore;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for FreshStore {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError> {
        let dir = TempDir::new().expect("temporary directory");
        let (log, machine) = open(&dir.path().join(DATABASE_FILE)).expect("store opens");
        Ok((dir, log, machine))
    }
}

#[test]
fn passes_openraft_storage_suite() {
    Suite::test_all(FreshStore).expect("openraft storage suite");
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn command_entry(term: u64, index: u64, command: Command) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(command),
    }
}

fn heartbeat(id: &str) -> Command {
    Command::Heartbeat(Heartbeat {
        id: id.into(),
        at_ms: 1,
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

#[test]
fn vote_and_entries_survive_reopening() {
    let dir = TempDir::new().expect("temporary directory");
    let path = dir.path().join(DATABASE_FILE);
    runtime().block_on(async {
        {
            let (mut log, _) = open(&path).expect("opens");
            log.save_vote(&Vote::new(3, 2)).await.expect("vote saved");
            let entries = vec![
                Entry {
                    log_id: log_id(3, 1),
                    payload: EntryPayload::Blank,
                },
                command_entry(3, 2, heartbeat("a")),
            ];
            openraft::storage::RaftLogStorageExt::blocking_append(&mut log, entries)
                .await
                .expect("appended");
        }
        let (mut log, _) = open(&path).expect("reopens");
        assert_eq!(log.read_vote().await.expect("vote"), Some(Vote::new(3, 2)));
        let entries = log.try_get_log_entries(0..10).await.expect("entries");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].log_id, log_id(3, 2));
    });
}

#[test]
fn refused_command_is_answered_with_its_status_and_still_applied_in_order() {
    let dir = TempDir::new().expect("temporary directory");
    runtime().block_on(async {
        let (_, mut machine) = open(&dir.path().join(DATABASE_FILE)).expect("opens");
        let answers = machine
            .apply(vec![command_entry(1, 1, heartbeat("unknown"))])
            .await
            .expect("applies");
        assert_eq!(answers[0].index, 1);
        assert!(matches!(
            answers[0].outcome,
            AppliedOutcome::Refused { status: 404, .. }
        ));
        assert_eq!(machine.view().applied_index(), 1);
        assert_eq!(machine.view().refused_total(), 1);
    });
}

#[test]
fn state_machine_restarts_from_its_latest_snapshot() {
    let dir = TempDir::new().expect("temporary directory");
    let path = dir.path().join(DATABASE_FILE);
    runtime().block_on(async {
        {
            let (_, mut machine) = open(&path).expect("opens");
            machine
                .apply(vec![Entry {
                    log_id: log_id(1, 1),
                    payload: EntryPayload::Blank,
                }])
                .await
                .expect("applies");
            let mut builder = machine.get_snapshot_builder().await;
            openraft::RaftSnapshotBuilder::build_snapshot(&mut builder)
                .await
                .expect("snapshot");
        }
        let (_, mut machine) = open(&path).expect("reopens");
        let (applied, _) = machine.applied_state().await.expect("state");
        assert_eq!(applied, Some(log_id(1, 1)));
        assert_eq!(machine.view().applied_index(), 1);
    });
}

fn machine_with_heartbeats(dir: &TempDir, count: u64) -> StateMachine {
    let (_, mut machine) = open(&dir.path().join(DATABASE_FILE)).expect("opens");
    runtime().block_on(async {
        let entries: Vec<Entry> = (1..=count)
            .map(|index| command_entry(1, index, heartbeat("unknown")))
            .collect();
        machine.apply(entries).await.expect("applies");
    });
    machine
}

#[test]
fn a_subscriber_from_zero_gets_a_snapshot() {
    let dir = TempDir::new().expect("temporary directory");
    let machine = machine_with_heartbeats(&dir, 3);
    match machine.view().catch_up(0, 10) {
        super::Catchup::Snapshot { applied_index, .. } => assert_eq!(applied_index, 3),
        other => panic!("expected a snapshot, got {other:?}"),
    }
}

#[test]
fn a_subscriber_gets_the_changes_after_its_index_in_order_and_cut_at_the_limit() {
    let dir = TempDir::new().expect("temporary directory");
    let machine = machine_with_heartbeats(&dir, 5);
    match machine.view().catch_up(1, 3) {
        super::Catchup::Changes {
            changes,
            applied_index,
        } => {
            let indexes: Vec<u64> = changes.iter().map(|(index, _)| *index).collect();
            assert_eq!(indexes, vec![2, 3, 4]);
            assert_eq!(applied_index, 4, "a cut batch stops at its last change");
        }
        other => panic!("expected changes, got {other:?}"),
    }
}

#[test]
fn a_subscriber_behind_the_retained_changes_gets_a_snapshot() {
    let dir = TempDir::new().expect("temporary directory");
    let retained = super::CHANGES_RETAINED as u64;
    let machine = machine_with_heartbeats(&dir, retained + 2);
    assert!(matches!(
        machine.view().catch_up(1, 10),
        super::Catchup::Snapshot { .. }
    ));
    assert!(matches!(
        machine.view().catch_up(2, 10),
        super::Catchup::Changes { .. }
    ));
}
