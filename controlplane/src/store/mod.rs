//! Durable Raft storage in one redb database: the log and the vote
//! ([`LogStore`]), and the state machine with its snapshots
//! ([`StateMachine`]).
//!
//! Guarantees: `append` and `save_vote` return (and `append` reports the
//! flush to openraft) only after redb committed with
//! [`redb::Durability::Immediate`], so the vote and every acknowledged log
//! entry survive a crash. The state machine's durable form is its latest
//! snapshot (the metastore's binary state, with the last applied log id and
//! membership); after a restart openraft re-applies the log from the
//! snapshot up to the saved commit index. Layout and crash cases:
//! `docs/internals/raft.md`.

mod log;
mod machine;
mod snapshot_stats;

use std::path::Path;
use std::sync::Arc;

use redb::{Database, TableDefinition};

pub use log::{ApplyFaultKind, ApplyFaults, LogStore};
pub use machine::{CHANGES_RETAINED, Catchup, MachineView, StateMachine};
pub use snapshot_stats::SnapshotStats;

/// Log entries by index; each value is one openraft entry as JSON.
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
/// Small records by name (`vote`, `committed`, `last_purged`,
/// `snapshot_meta`, `snapshot_data`), each JSON.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");

const KEY_VOTE: &str = "vote";
const KEY_COMMITTED: &str = "committed";
const KEY_LAST_PURGED: &str = "last_purged";
const KEY_SNAPSHOT_META: &str = "snapshot_meta";
const KEY_SNAPSHOT_DATA: &str = "snapshot_data";

/// The file name of the database inside the control node's directory.
pub const DATABASE_FILE: &str = "raft.redb";

/// Why the database could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// redb refused the file (locked by another process, corrupt, newer
    /// format).
    #[error("cannot open the raft database {path}: {source}")]
    Database {
        /// The file.
        path: String,
        /// redb's reason.
        source: redb::Error,
    },
    /// The stored snapshot does not decode: the state machine cannot start.
    #[error("the stored metastore snapshot in {path} is unreadable: {reason}")]
    Snapshot {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Opens (or creates) the database at `path` and returns the log store and
/// the state machine that share it.
///
/// # Errors
/// [`OpenError`] when redb cannot open the file or a stored snapshot is
/// unreadable.
pub fn open(path: &Path) -> Result<(LogStore, StateMachine), OpenError> {
    let shown = path.display().to_string();
    let database = Database::create(path).map_err(|source| OpenError::Database {
        path: shown.clone(),
        source: source.into(),
    })?;
    let database = Arc::new(database);
    create_tables(&database).map_err(|source| OpenError::Database {
        path: shown.clone(),
        source,
    })?;
    let machine = StateMachine::open(database.clone()).map_err(|reason| OpenError::Snapshot {
        path: shown,
        reason,
    })?;
    Ok((LogStore::new(database), machine))
}

/// Creates both tables so that readers never meet a missing table.
fn create_tables(database: &Database) -> Result<(), redb::Error> {
    let txn = database.begin_write()?;
    txn.open_table(LOG)?;
    txn.open_table(META)?;
    txn.commit()?;
    Ok(())
}

#[cfg(test)]
mod snapshot_stats_tests;
#[cfg(test)]
mod tests;
