//! The Raft log and vote, in redb.
//!
//! A log entry is stored binary, version [`STORED_ENTRY_VERSION`]: the
//! version byte, then the entry as `AppendEntries` carries it (log id,
//! payload kind, the command in the metastore's command codec or a
//! membership). An entry whose first byte is `{` is the serde JSON an older
//! build stored; it is still read, so a log written before the binary codec
//! replays. The vote, the commit hint and the purge mark stay serde JSON:
//! small records, written rarely.
//!
//! Every fault the store hands openraft on the entry path stops the state
//! machine's apply (`narad_metastore_apply_stopped`); [`ApplyFaults`]
//! counts them by kind for `narad_metastore_apply_errors_total`.

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use narad_protocol::{DecodeError, Reader, Writer};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageIOError, Vote};
use redb::{Database, Durability, ReadableDatabase, ReadableTable};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{KEY_COMMITTED, KEY_LAST_PURGED, KEY_VOTE, LOG, META};
use crate::network::raft_fields::{get_entry, put_entry};
use crate::raft::{ControlNodeId, Entry, LogId, StorageError, TypeConfig};
use narad_meta::codec::{from_json, is_bare_json};

/// Why an entry could not be read or written, by the spec's kinds of
/// `narad_metastore_apply_errors_total` (`newer_database` is refused when
/// the store opens, before anything runs that could count it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyFaultKind {
    /// The database failed a read or a write.
    Storage,
    /// A stored entry's version is one this build does not speak: a newer
    /// build wrote it.
    UnknownEntryType,
    /// A stored entry's bytes do not decode.
    Undecodable,
}

impl ApplyFaultKind {
    /// Every kind, in the order they are served.
    pub const ALL: [Self; 3] = [Self::Storage, Self::UnknownEntryType, Self::Undecodable];

    /// The `kind` label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Storage => "storage",
            Self::UnknownEntryType => "unknown_entry_type",
            Self::Undecodable => "undecodable",
        }
    }

    fn of_decode(error: &DecodeError) -> Self {
        match error {
            DecodeError::UnsupportedVersion { .. } => Self::UnknownEntryType,
            _ => Self::Undecodable,
        }
    }
}

/// Faults the log store handed openraft on the entry path, by kind.
#[derive(Debug, Default)]
pub struct ApplyFaults {
    counts: [AtomicU64; ApplyFaultKind::ALL.len()],
}

impl ApplyFaults {
    fn note(&self, kind: ApplyFaultKind) {
        self.counts[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How many faults of `kind` the store met since it opened.
    pub fn total(&self, kind: ApplyFaultKind) -> u64 {
        self.counts[kind as usize].load(Ordering::Relaxed)
    }
}

/// An entry read that failed: the database, or an entry it holds.
#[derive(Debug, thiserror::Error)]
enum EntryReadError {
    #[error(transparent)]
    Storage(#[from] redb::Error),
    #[error("raft store record: {0}")]
    Undecodable(#[from] DecodeError),
}

impl EntryReadError {
    fn kind(&self) -> ApplyFaultKind {
        match self {
            Self::Storage(_) => ApplyFaultKind::Storage,
            Self::Undecodable(error) => ApplyFaultKind::of_decode(error),
        }
    }
}

/// The log and the vote. Cloning shares the database and the fault
/// counts; openraft uses clones as log readers for replication.
#[derive(Debug, Clone)]
pub struct LogStore {
    database: Arc<Database>,
    faults: Arc<ApplyFaults>,
}

impl LogStore {
    pub(super) fn new(database: Arc<Database>) -> Self {
        Self {
            database,
            faults: Arc::new(ApplyFaults::default()),
        }
    }

    /// The faults this store (and every clone) handed openraft.
    pub fn faults(&self) -> Arc<ApplyFaults> {
        Arc::clone(&self.faults)
    }

    /// Counts a write fault on the entry path.
    fn write_fault(&self, error: redb::Error) -> StorageError {
        self.faults.note(ApplyFaultKind::Storage);
        StorageIOError::write_logs(&error).into()
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
        let entry = decode_stored_entry(raw.value()).map_err(corrupt)?;
        Ok(Some(entry.log_id))
    }

    fn entries(&self, range: impl RangeBounds<u64>) -> Result<Vec<Entry>, EntryReadError> {
        let txn = self.database.begin_read().map_err(redb::Error::from)?;
        let table = txn.open_table(LOG).map_err(redb::Error::from)?;
        let mut entries = Vec::new();
        for item in table.range(range).map_err(redb::Error::from)? {
            let (index, raw) = item.map_err(redb::Error::from)?;
            let entry = decode_stored_entry(raw.value())?;
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
                let bytes = encode_stored_entry(entry);
                table.insert(entry.log_id.index, bytes.as_ref())?;
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

/// Version of a stored log entry's binary form. Older builds stored bare
/// serde JSON, which starts with `{`; no version byte is that.
pub(crate) const STORED_ENTRY_VERSION: u8 = 1;

const _: () = assert!(STORED_ENTRY_VERSION != b'{');

/// A log entry as the log table stores it.
fn encode_stored_entry(entry: &Entry) -> Bytes {
    let mut writer = Writer::new();
    writer.u8(STORED_ENTRY_VERSION);
    put_entry(&mut writer, entry);
    writer.finish()
}

/// Reads an entry written by [`encode_stored_entry`] or, as bare JSON, by
/// an older build.
///
/// # Errors
/// [`DecodeError::UnsupportedVersion`] naming `stored log entry`, the
/// entry's field errors, trailing bytes, or JSON that is not an entry.
fn decode_stored_entry(raw: &[u8]) -> Result<Entry, DecodeError> {
    if is_bare_json(raw) {
        return from_json(raw, "stored log entry json (column of the first error)");
    }
    let mut reader = Reader::new(Bytes::copy_from_slice(raw));
    let found = reader.u8("stored log entry version")?;
    if found != STORED_ENTRY_VERSION {
        return Err(DecodeError::UnsupportedVersion {
            what: "stored log entry",
            found,
            supported: STORED_ENTRY_VERSION,
        });
    }
    let entry = get_entry(&mut reader)?;
    reader.finish()?;
    Ok(entry)
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
        self.entries(range).map_err(|error| {
            self.faults.note(error.kind());
            StorageIOError::read_logs(&error).into()
        })
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
                Err(self.write_fault(error))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.remove_range(log_id.index..)
            .map_err(|error| self.write_fault(error))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.purge_durably(log_id)
            .map_err(|error| self.write_fault(error))
    }
}

#[cfg(test)]
mod stored_entry_tests {
    use openraft::{CommittedLeaderId, EntryPayload};
    use proptest::prelude::*;
    use tempfile::TempDir;

    use super::*;
    use narad_meta::{Command, Heartbeat};

    fn heartbeat_entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(2, 1), index),
            payload: EntryPayload::Normal(Command::Heartbeat(Heartbeat {
                id: "n1".into(),
                at_ms: 1_000,
            })),
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    #[test]
    fn a_stored_entry_encodes_to_its_golden_bytes() {
        let golden = [
            "01",                                                 // stored entry version
            "0000000000000002 0000000000000001 0000000000000007", // log id: term 2, node 1, index 7
            "01",                                                 // normal: a command
            // A heartbeat sets no idempotency window: command version 2,
            // which builds from before the window read too.
            "02 09 00000002 6e31 00000000000003e8", // heartbeat "n1" at 1,000 ms
        ];
        let bytes = encode_stored_entry(&heartbeat_entry(7));
        assert_eq!(hex(&bytes), golden.concat().replace(' ', ""));
        assert_eq!(decode_stored_entry(&bytes), Ok(heartbeat_entry(7)));
    }

    #[test]
    fn another_stored_entry_version_is_refused_by_name() {
        let mut bytes = encode_stored_entry(&heartbeat_entry(7)).to_vec();
        bytes[0] = 2;
        assert_eq!(
            decode_stored_entry(&bytes).map_err(|e| e.to_string()),
            Err("stored log entry version 2 is not supported (this build speaks version 1)".into())
        );
    }

    #[test]
    fn a_log_stored_as_json_by_an_older_build_is_read_alongside_binary_entries() {
        let dir = TempDir::new().expect("temporary directory");
        let (log, _) =
            super::super::open(&dir.path().join(super::super::DATABASE_FILE)).expect("opens");
        let txn = log.database.begin_write().expect("transaction");
        {
            let mut table = txn.open_table(LOG).expect("log table");
            for index in 1..=2 {
                let json = serde_json::to_vec(&heartbeat_entry(index)).expect("serializes");
                table.insert(index, json.as_slice()).expect("inserts");
            }
        }
        txn.commit().expect("commits");
        log.append_durably(vec![heartbeat_entry(3)])
            .expect("appends");
        let entries = log.entries(1..=3).expect("reads");
        assert_eq!(entries, (1..=3).map(heartbeat_entry).collect::<Vec<_>>());
        assert_eq!(
            log.last_entry_id().expect("reads"),
            Some(heartbeat_entry(3).log_id)
        );
    }

    /// Stores `raw` under log index `index`, as a build other than this
    /// one (or a damaged disk) might have left it.
    fn store_raw(log: &LogStore, index: u64, raw: &[u8]) {
        let txn = log.database.begin_write().expect("transaction");
        {
            let mut table = txn.open_table(LOG).expect("log table");
            table.insert(index, raw).expect("inserts");
        }
        txn.commit().expect("commits");
    }

    #[tokio::test]
    async fn entries_openraft_cannot_read_are_counted_as_apply_faults_by_kind() {
        let dir = TempDir::new().expect("temporary directory");
        let (mut log, _) =
            super::super::open(&dir.path().join(super::super::DATABASE_FILE)).expect("opens");
        let faults = log.faults();
        let mut newer = encode_stored_entry(&heartbeat_entry(1)).to_vec();
        newer[0] = STORED_ENTRY_VERSION + 1;
        store_raw(&log, 1, &newer);
        store_raw(&log, 2, &[STORED_ENTRY_VERSION, 0xff]);

        assert!(log.try_get_log_entries(1..=1).await.is_err());
        assert!(log.try_get_log_entries(2..=2).await.is_err());
        assert!(log.try_get_log_entries(2..=2).await.is_err());

        assert_eq!(faults.total(ApplyFaultKind::UnknownEntryType), 1);
        assert_eq!(faults.total(ApplyFaultKind::Undecodable), 2);
        assert_eq!(faults.total(ApplyFaultKind::Storage), 0);
    }

    #[test]
    fn a_stored_topic_create_is_smaller_than_its_json() {
        let create = narad_meta::CreateTopic::named(
            narad_meta::Actor::SecurityOff,
            "bench-topic-0001",
            narad_meta::IncarnationId::from_bits(0x9e37_79b9_7f4a_7c15),
            1_764_000_000_001,
        );
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(7, 1), 1_001),
            payload: EntryPayload::Normal(Command::CreateTopic(create)),
        };
        let binary = encode_stored_entry(&entry).len();
        let json = serde_json::to_vec(&entry).expect("serializes").len();
        println!("stored topic create: binary {binary} bytes, JSON {json} bytes");
        assert!(binary < json, "binary {binary} >= JSON {json}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn arbitrary_bytes_never_panic_the_stored_entry_decoder(
            body in proptest::collection::vec(any::<u8>(), 0..128),
        ) {
            let mut raw = vec![STORED_ENTRY_VERSION];
            raw.extend(&body);
            let _ = decode_stored_entry(&raw);
            let _ = decode_stored_entry(&body);
        }
    }
}
