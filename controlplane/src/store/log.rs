//! The Raft log and vote, in redb.

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageIOError, Vote};
use redb::{Database, Durability, ReadableDatabase, ReadableTable};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{KEY_COMMITTED, KEY_LAST_PURGED, KEY_VOTE, LOG, META};
use crate::raft::{ControlNodeId, Entry, LogId, StorageError, TypeConfig};

/// The log and the vote. Cloning shares the database; openraft uses clones
/// as log readers for replication.
#[derive(Debug, Clone)]
pub struct LogStore {
    database: Arc<Database>,
}

impl LogStore {
    pub(super) fn new(database: Arc<Database>) -> Self {
        Self { database }
    }

    /// Reads one JSON record of the meta table.
    fn read_meta<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, redb::Error> {
        let txn = self.database.begin_read()?;
        let table = txn.open_table(META)?;
        let Some(raw) = table.get(key)? else {
            return Ok(None);
        };
        let value = serde_json::from_slice(raw.value()).map_err(corrupt)?;
        Ok(Some(value))
    }

    /// Writes one JSON record of the meta table in its own transaction.
    fn write_meta<T: Serialize>(
        &self,
        key: &str,
        value: &T,
        durability: Durability,
    ) -> Result<(), redb::Error> {
        let bytes = serde_json::to_vec(value).map_err(corrupt)?;
        let mut txn = self.database.begin_write()?;
        txn.set_durability(durability).map_err(corrupt)?;
        {
            let mut table = txn.open_table(META)?;
            table.insert(key, bytes.as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }

    fn last_entry_id(&self) -> Result<Option<LogId>, redb::Error> {
        let txn = self.database.begin_read()?;
        let table = txn.open_table(LOG)?;
        let Some((_, raw)) = table.last()? else {
            return Ok(None);
        };
        let entry: Entry = serde_json::from_slice(raw.value()).map_err(corrupt)?;
        Ok(Some(entry.log_id))
    }

    fn entries(&self, range: impl RangeBounds<u64>) -> Result<Vec<Entry>, redb::Error> {
        let txn = self.database.begin_read()?;
        let table = txn.open_table(LOG)?;
        let mut entries = Vec::new();
        for item in table.range(range)? {
            let (index, raw) = item?;
            let entry: Entry = serde_json::from_slice(raw.value()).map_err(corrupt)?;
            // Read back what was written: a key and its entry must agree.
            assert_eq!(
                entry.log_id.index,
                index.value(),
                "log entry under the wrong key"
            );
            entries.push(entry);
        }
        Ok(entries)
    }

    fn append_durably(&self, entries: Vec<Entry>) -> Result<(), redb::Error> {
        let txn = self.database.begin_write()?;
        {
            let mut table = txn.open_table(LOG)?;
            for entry in &entries {
                let bytes = serde_json::to_vec(entry).map_err(corrupt)?;
                table.insert(entry.log_id.index, bytes.as_slice())?;
            }
        }
        // Durability::Immediate (redb's default): fsynced when this returns.
        txn.commit()?;
        Ok(())
    }

    fn remove_range(&self, range: impl RangeBounds<u64>) -> Result<(), redb::Error> {
        let txn = self.database.begin_write()?;
        {
            let mut table = txn.open_table(LOG)?;
            table.retain_in(range, |_, _| false)?;
        }
        txn.commit()?;
        Ok(())
    }

    fn purge_durably(&self, upto: LogId) -> Result<(), redb::Error> {
        let bytes = serde_json::to_vec(&upto).map_err(corrupt)?;
        let txn = self.database.begin_write()?;
        {
            // The purge mark first in the same transaction: a reader never
            // sees entries gone without the mark that explains it.
            let mut meta = txn.open_table(META)?;
            meta.insert(KEY_LAST_PURGED, bytes.as_slice())?;
            let mut table = txn.open_table(LOG)?;
            table.retain_in(..=upto.index, |_, _| false)?;
        }
        txn.commit()?;
        Ok(())
    }
}

/// A stored record that does not decode (or encode): the database holds
/// something this build did not write.
fn corrupt(error: impl std::fmt::Display) -> redb::Error {
    redb::Error::Corrupted(format!("raft store record: {error}"))
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        self.entries(range)
            .map_err(|e| StorageIOError::read_logs(&e).into())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let read = || -> Result<LogState<TypeConfig>, redb::Error> {
            let last_purged_log_id: Option<LogId> = self.read_meta(KEY_LAST_PURGED)?;
            let last_log_id = self.last_entry_id()?.or(last_purged_log_id);
            Ok(LogState {
                last_purged_log_id,
                last_log_id,
            })
        };
        read().map_err(|e| StorageIOError::read_logs(&e).into())
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<ControlNodeId>) -> Result<(), StorageError> {
        self.write_meta(KEY_VOTE, vote, Durability::Immediate)
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<ControlNodeId>>, StorageError> {
        self.read_meta(KEY_VOTE)
            .map_err(|e| StorageIOError::read_vote(&e).into())
    }

    /// The commit index is a hint for re-applying after a restart, never a
    /// promise to a client, so it is written without its own fsync: the next
    /// durable append or vote carries it to disk, and a crash before that
    /// only re-applies less at start (the leader re-sends the commit index).
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.write_meta(KEY_COMMITTED, &committed, Durability::None)
            .map_err(|e| StorageIOError::write(&e).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let stored: Option<Option<LogId>> = self
            .read_meta(KEY_COMMITTED)
            .map_err(|e| StorageIOError::read(&e))?;
        Ok(stored.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        match self.append_durably(entries) {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(error) => {
                let reason = std::io::Error::other(error.to_string());
                callback.log_io_completed(Err(reason));
                Err(StorageIOError::write_logs(&error).into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.remove_range(log_id.index..)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.purge_durably(log_id)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}
