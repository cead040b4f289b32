//! The state machine: the metastore in memory, its applied log id and
//! membership, and snapshots persisted in redb.
//!
//! A snapshot's data (built here, persisted in redb, sent by
//! InstallSnapshot) is binary, version [`MACHINE_SNAPSHOT_VERSION`]:
//! `u8 version, opt<LogId> last_applied, StoredMembership last_membership`,
//! then the metastore in its own state codec (`narad_meta::codec`, with its
//! own version byte). Data whose first byte is `{` is the serde JSON an
//! older build wrote; it is still read (a stored snapshot opens, a leader's
//! snapshot installs) and replaced by the binary form at the next snapshot.
//!
//! Each snapshot built or installed is measured for
//! `narad_metastore_snapshot_*`: its size and failures are counted in
//! [`SnapshotStats`] and read at render, and a build's duration is recorded
//! as it happens into a histogram handle the node hands over
//! ([`StateMachine::with_snapshot_durations`]).

use std::collections::VecDeque;
use std::io::Cursor;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use metrics::Histogram;
use narad_clock::Clock;
use narad_protocol::codec::{decode_message, encode_message};
use narad_protocol::{Decode, DecodeError, Encode, Message, Reader, Writer};
use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, Snapshot, StorageIOError};
use parking_lot::RwLock;
use redb::{Database, ReadableDatabase};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::snapshot_stats::SnapshotStats;
use super::{KEY_SNAPSHOT_DATA, KEY_SNAPSHOT_META, META};
use crate::network::raft_fields::{
    get_opt_log_id, get_stored_membership, put_opt_log_id, put_stored_membership,
};
use crate::raft::{
    Applied, Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};
use narad_meta::codec::{from_json, get_state, is_bare_json, put_state};
use narad_meta::follow::AppliedOutcome;
use narad_meta::{ApplyContext, Command, Metastore};

/// The metadata stream serves changes from memory: the last this many
/// applied commands. A subscriber further behind gets a snapshot instead.
pub const CHANGES_RETAINED: usize = 4_096;

/// The recent applied commands, for the metadata stream.
#[derive(Debug, Default)]
struct ChangeLog {
    /// (log index, command), oldest first, indexes strictly increasing.
    entries: VecDeque<(u64, Command)>,
    /// Every command applied after this index is in `entries`.
    covered_from: u64,
}

/// What a metadata subscriber at some index needs next.
#[derive(Debug, Clone)]
pub enum Catchup {
    /// The whole metastore at `applied_index`.
    Snapshot {
        /// The state.
        metastore: Box<Metastore>,
        /// Its applied index.
        applied_index: u64,
    },
    /// The commands after the subscriber's index, up to `applied_index`.
    Changes {
        /// (log index, command), in log order.
        changes: Vec<(u64, Command)>,
        /// The subscriber's index after applying them.
        applied_index: u64,
    },
}

/// Everything a snapshot holds, and exactly what the state machine is.
/// The serde derives read (and, in tests, write) the JSON snapshots of
/// older builds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct MachineState {
    metastore: Metastore,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
}

/// Version of a snapshot's binary data. Older builds wrote bare serde JSON,
/// which starts with `{`; no version byte is that.
pub(crate) const MACHINE_SNAPSHOT_VERSION: u8 = 1;

const _: () = assert!(MACHINE_SNAPSHOT_VERSION != b'{');

impl Message for MachineState {
    const NAME: &'static str = "state machine snapshot";
    const VERSION: u8 = MACHINE_SNAPSHOT_VERSION;
}

impl Encode for MachineState {
    fn encode(&self, writer: &mut Writer) {
        put_opt_log_id(writer, self.last_applied.as_ref());
        put_stored_membership(writer, &self.last_membership);
        put_state(writer, &self.metastore);
    }
}

impl Decode for MachineState {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            last_applied: get_opt_log_id(reader, "snapshot last applied")?,
            last_membership: get_stored_membership(reader)?,
            metastore: get_state(reader)?,
        })
    }
}

/// What the state machine shares with readers on the same node.
#[derive(Debug)]
struct Shared {
    state: RwLock<MachineState>,
    /// Changed only under the `state` write lock, so a reader holding the
    /// read lock sees the two agree.
    changes: parking_lot::Mutex<ChangeLog>,
    /// The last applied log index (0 before anything), for waiters.
    applied: watch::Sender<u64>,
    /// Commands refused by `apply` (client errors, not faults).
    refused: AtomicU64,
    /// Snapshots built here, for unique snapshot ids.
    snapshots_built: AtomicU64,
    /// The size of the last snapshot and the failed builds and installs.
    snapshot_stats: SnapshotStats,
}

impl Shared {
    fn publish_applied(&self, last_applied: Option<LogId>) {
        let index = last_applied.map_or(0, |log_id| log_id.index);
        self.applied.send_replace(index);
    }
}

/// The state machine openraft drives. Clones share the state.
#[derive(Debug, Clone)]
pub struct StateMachine {
    shared: Arc<Shared>,
    database: Arc<Database>,
    /// Where each successful build's duration goes, and the clock it is
    /// read on; `None` records nowhere.
    snapshot_timing: Option<SnapshotTiming>,
}

/// A histogram of snapshot build durations (seconds) and the node's clock.
#[derive(Debug, Clone)]
struct SnapshotTiming {
    durations: Histogram,
    clock: Arc<dyn Clock>,
}

/// A read-only view of the state machine for the rest of the node.
#[derive(Debug, Clone)]
pub struct MachineView {
    shared: Arc<Shared>,
}

impl MachineView {
    /// Runs `read` on the current metastore under the read lock.
    pub fn read<T>(&self, read: impl FnOnce(&Metastore) -> T) -> T {
        read(&self.shared.state.read().metastore)
    }

    /// The last applied log index (0 before anything was applied).
    pub fn applied_index(&self) -> u64 {
        *self.shared.applied.borrow()
    }

    /// A receiver that sees every change of the applied index.
    pub fn watch_applied(&self) -> watch::Receiver<u64> {
        self.shared.applied.subscribe()
    }

    /// Commands refused by `apply` since start.
    pub fn refused_total(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }

    /// The sizes and failures of this node's snapshots.
    pub fn snapshot_stats(&self) -> &SnapshotStats {
        &self.shared.snapshot_stats
    }

    /// What a subscriber whose replica applied `after_index` needs next:
    /// at most `changes_max` changes, or a snapshot when it asks from 0,
    /// from before the retained changes, or from beyond this replica.
    pub fn catch_up(&self, after_index: u64, changes_max: usize) -> Catchup {
        let state = self.shared.state.read();
        let applied_index = state.last_applied.map_or(0, |log_id| log_id.index);
        let log = self.shared.changes.lock();
        if after_index == 0 || after_index < log.covered_from || after_index > applied_index {
            return Catchup::Snapshot {
                metastore: Box::new(state.metastore.clone()),
                applied_index,
            };
        }
        let changes: Vec<(u64, Command)> = log
            .entries
            .iter()
            .filter(|(index, _)| *index > after_index)
            .take(changes_max)
            .cloned()
            .collect();
        // A cut batch brings the subscriber only to its last change.
        let applied_index = match changes.last() {
            Some((last, _)) if changes.len() == changes_max => *last,
            _ => applied_index,
        };
        Catchup::Changes {
            changes,
            applied_index,
        }
    }
}

impl StateMachine {
    /// Loads the latest stored snapshot, or starts empty.
    pub(super) fn open(database: Arc<Database>) -> Result<Self, String> {
        let snapshot_stats = SnapshotStats::default();
        let state = match read_snapshot(&database).map_err(|e| e.to_string())? {
            Some((_, data)) => {
                // The stored snapshot is the last this node built or installed.
                snapshot_stats.note_size(data.len());
                decode_snapshot(Bytes::from(data))?
            }
            None => MachineState::default(),
        };
        let (applied, _) = watch::channel(0);
        let changes = ChangeLog {
            entries: VecDeque::new(),
            covered_from: state.last_applied.map_or(0, |log_id| log_id.index),
        };
        let shared = Arc::new(Shared {
            state: RwLock::new(state),
            changes: parking_lot::Mutex::new(changes),
            applied,
            refused: AtomicU64::new(0),
            snapshots_built: AtomicU64::new(0),
            snapshot_stats,
        });
        shared.publish_applied(shared.state.read().last_applied);
        Ok(Self {
            shared,
            database,
            snapshot_timing: None,
        })
    }

    /// Records each snapshot build's duration (encode and durable write,
    /// in seconds, read on the node's `clock`) into `durations`; a state
    /// machine opened without one records nowhere.
    ///
    /// A handle, not a count kept here and read at render like
    /// [`SnapshotStats`]: durations are observations, and a handle taken
    /// once from the node's recorder puts each one into its buckets as it
    /// happens, with no queue between builds and scrapes to bound or to
    /// lose from.
    #[must_use]
    pub fn with_snapshot_durations(mut self, durations: Histogram, clock: Arc<dyn Clock>) -> Self {
        self.snapshot_timing = Some(SnapshotTiming { durations, clock });
        self
    }

    /// A read-only view sharing this state machine's state.
    pub fn view(&self) -> MachineView {
        MachineView {
            shared: self.shared.clone(),
        }
    }

    /// Keeps `command` for the metadata stream (refused ones too: a
    /// subscriber applies the same log and refuses them the same way).
    /// Called under the state write lock.
    fn record_change(&self, index: u64, command: &Command) {
        let mut log = self.shared.changes.lock();
        if let Some((last, _)) = log.entries.back() {
            assert!(index > *last, "change {index} recorded after {last}");
        }
        log.entries.push_back((index, command.clone()));
        if log.entries.len() > CHANGES_RETAINED
            && let Some((dropped, _)) = log.entries.pop_front()
        {
            log.covered_from = dropped;
        }
    }

    fn apply_one(&self, state: &mut MachineState, entry: &Entry) -> Applied {
        let index = entry.log_id.index;
        let outcome = match &entry.payload {
            EntryPayload::Normal(command) => {
                // Index 0 holds only the initial membership, never a command.
                assert!(index > 0, "a command at log index 0");
                let outcome =
                    AppliedOutcome::of(state.metastore.apply(command, ApplyContext { index }));
                self.record_change(index, command);
                if matches!(outcome, AppliedOutcome::Refused { .. }) {
                    self.shared.refused.fetch_add(1, Ordering::Relaxed);
                }
                outcome
            }
            EntryPayload::Blank => {
                note_applied(&mut state.metastore, index);
                AppliedOutcome::NoCommand
            }
            EntryPayload::Membership(membership) => {
                note_applied(&mut state.metastore, index);
                state.last_membership =
                    StoredMembership::new(Some(entry.log_id), membership.clone());
                AppliedOutcome::NoCommand
            }
        };
        state.last_applied = Some(entry.log_id);
        Applied { index, outcome }
    }
}

/// The metastore counts applied indexes from 1 (0 = nothing applied); the
/// log's index 0 carries only the initial membership.
fn note_applied(metastore: &mut Metastore, index: u64) {
    if index > 0 {
        metastore.note_applied(ApplyContext { index });
    }
}

/// A snapshot's data, in the binary form.
///
/// # Panics
/// If the bytes do not decode to `state` again: a snapshot is the state
/// machine's durable form, and one this build cannot read back would stop
/// the node at its next start, so it is checked before it is stored.
fn encode_snapshot(state: &MachineState) -> Vec<u8> {
    let data = encode_message(state);
    let back = decode_snapshot(data.clone());
    assert!(
        matches!(&back, Ok(decoded) if decoded == state),
        "a snapshot does not decode to the state it was built from (error: {:?})",
        back.as_ref().err()
    );
    Vec::from(data)
}

/// Reads snapshot data written by [`encode_snapshot`] or, as bare JSON, by
/// an older build.
fn decode_snapshot(data: Bytes) -> Result<MachineState, String> {
    let decoded = if is_bare_json(&data) {
        from_json(
            &data,
            "state machine snapshot json (column of the first error)",
        )
    } else {
        decode_message(data)
    };
    decoded.map_err(|error| format!("metastore snapshot: {error}"))
}

fn read_snapshot(database: &Database) -> Result<Option<(SnapshotMeta, Vec<u8>)>, redb::Error> {
    let txn = database.begin_read()?;
    let table = txn.open_table(META)?;
    let (Some(meta), Some(data)) = (table.get(KEY_SNAPSHOT_META)?, table.get(KEY_SNAPSHOT_DATA)?)
    else {
        return Ok(None);
    };
    let meta: SnapshotMeta = serde_json::from_slice(meta.value())
        .map_err(|e| redb::Error::Corrupted(format!("snapshot meta: {e}")))?;
    Ok(Some((meta, data.value().to_vec())))
}

/// Stores a snapshot's meta and data in one durable transaction.
fn write_snapshot(
    database: &Database,
    meta: &SnapshotMeta,
    data: &[u8],
) -> Result<(), redb::Error> {
    let meta = serde_json::to_vec(meta)
        .map_err(|e| redb::Error::Corrupted(format!("snapshot meta: {e}")))?;
    let txn = database.begin_write()?;
    {
        let mut table = txn.open_table(META)?;
        table.insert(KEY_SNAPSHOT_META, meta.as_slice())?;
        table.insert(KEY_SNAPSHOT_DATA, data)?;
    }
    txn.commit()?;
    Ok(())
}

impl StateMachine {
    /// Encodes the state and stores it durably as the latest snapshot.
    #[expect(
        clippy::result_large_err,
        reason = "openraft's own error, handed back to openraft as it is"
    )]
    fn build(&self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (data, last_applied, last_membership) = {
            let state = self.shared.state.read();
            let data = encode_snapshot(&state);
            (data, state.last_applied, state.last_membership.clone())
        };
        let built = self.shared.snapshots_built.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match last_applied {
            Some(log_id) => format!("{}-{}-{built}", log_id.leader_id, log_id.index),
            None => format!("empty-{built}"),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership,
            snapshot_id,
        };
        write_snapshot(&self.database, &meta, &data)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }

    /// Checks a leader's snapshot against its meta, stores it durably and
    /// replaces the state with it.
    #[expect(
        clippy::result_large_err,
        reason = "openraft's own error, handed back to openraft as it is"
    )]
    fn install(&self, meta: &SnapshotMeta, data: Bytes) -> Result<(), StorageError> {
        let installed = decode_snapshot(data.clone()).map_err(|e| {
            StorageIOError::read_snapshot(Some(meta.signature()), &std::io::Error::other(e))
        })?;
        // Check the data against the meta it came with before trusting it.
        if installed.last_applied != meta.last_log_id {
            let reason = std::io::Error::other(format!(
                "snapshot data applied up to {:?}, its meta says {:?}",
                installed.last_applied, meta.last_log_id
            ));
            return Err(StorageIOError::read_snapshot(Some(meta.signature()), &reason).into());
        }
        write_snapshot(&self.database, meta, &data)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        let last_applied = installed.last_applied;
        {
            let mut state = self.shared.state.write();
            *state = installed;
            let mut log = self.shared.changes.lock();
            log.entries.clear();
            log.covered_from = last_applied.map_or(0, |log_id| log_id.index);
        }
        self.shared.publish_applied(last_applied);
        Ok(())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let started_us = self.snapshot_timing.as_ref().map(|t| t.clock.now_us());
        let built = self.build();
        match &built {
            Ok(snapshot) => {
                if let (Some(timing), Some(started_us)) = (&self.snapshot_timing, started_us) {
                    let took_us = timing.clock.now_us().saturating_sub(started_us);
                    timing.durations.record(took_us as f64 / 1e6);
                }
                self.shared
                    .snapshot_stats
                    .note_size(snapshot.snapshot.get_ref().len());
            }
            Err(_) => self.shared.snapshot_stats.note_failure(),
        }
        built
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let state = self.shared.state.read();
        Ok((state.last_applied, state.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut answers = Vec::new();
        let last_applied = {
            let mut state = self.shared.state.write();
            for entry in entries {
                answers.push(self.apply_one(&mut state, &entry));
            }
            state.last_applied
        };
        self.shared.publish_applied(last_applied);
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = Bytes::from(snapshot.into_inner());
        let size = data.len();
        let installed = self.install(meta, data);
        match &installed {
            Ok(()) => self.shared.snapshot_stats.note_size(size),
            Err(_) => self.shared.snapshot_stats.note_failure(),
        }
        installed
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let stored =
            read_snapshot(&self.database).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        Ok(stored.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}

#[cfg(test)]
mod snapshot_tests {
    use std::collections::{BTreeMap, BTreeSet};

    use openraft::{BasicNode, CommittedLeaderId, Membership};
    use proptest::prelude::*;

    use super::*;
    use narad_meta::{Heartbeat, RegisterMember};

    /// A state machine after a membership entry at 1 and a registration at 2.
    fn sample_state() -> MachineState {
        let log_id = |index| LogId::new(CommittedLeaderId::new(3, 1), index);
        let nodes = BTreeMap::from([(1, BasicNode::new("c1:7943"))]);
        let membership = Membership::new(vec![BTreeSet::from([1])], nodes);
        let mut metastore = Metastore::new();
        let register = Command::RegisterMember(RegisterMember {
            id: "n1".into(),
            http_addr: "n1:80".into(),
            rpc_addr: "n1:7942".into(),
            at_ms: 1_000,
        });
        metastore
            .apply(&register, ApplyContext { index: 2 })
            .expect("registers");
        MachineState {
            metastore,
            last_applied: Some(log_id(2)),
            last_membership: StoredMembership::new(Some(log_id(1)), membership),
        }
    }

    /// The empty list of removed members in [`GOLDEN_SNAPSHOT`].
    const NO_REMOVED_MEMBERS: &str = "00000000";

    /// [`sample_state`]'s snapshot, field by field (spaces for reading only).
    const GOLDEN_SNAPSHOT: &[&str] = &[
        "01",                                                    // snapshot version
        "01 0000000000000003 0000000000000001 0000000000000002", // last applied (3, 1) index 2
        "01 0000000000000003 0000000000000001 0000000000000001", // membership log id, index 1
        "00000001 00000001 0000000000000001",                    // one config: voter 1
        "00000001 0000000000000001 00000007 63313a37393433",     // node 1 at "c1:7943"
        "05 00000000 00000000",   // state version, no topics, placements
        "00000001 00000002 6e31", // one member "n1"
        "00000005 6e313a3830 00000007 6e313a37393432", // addresses
        "00000000000003e8 01 00", // heartbeat, alive, not draining
        "00000000",               // no users
        NO_REMOVED_MEMBERS,       // no removed members (since state version 3)
        "0000000000000000 0000000000000000", // versions: topics, placements
        "0000000000000001 0000000000000000", // versions: members, users
        "0000000000000002",       // applied index
        REMOTES_SECTION,          // since state version 4 (the key's time since 5)
    ];

    /// No remotes, no remote key, no remote links, remotes version 0.
    const REMOTES_SECTION: &str = "00000000 00 00000000 0000000000000000";

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    #[test]
    fn a_snapshot_encodes_to_its_golden_bytes() {
        let data = encode_snapshot(&sample_state());
        assert_eq!(hex(&data), GOLDEN_SNAPSHOT.concat().replace(' ', ""));
        assert_eq!(decode_snapshot(Bytes::from(data)), Ok(sample_state()));
    }

    /// [`GOLDEN_SNAPSHOT`] holding its state in an older `version`: without
    /// a remote key, version 4 differs from version 5 only in the byte;
    /// without topics or placements, version 3 also lacks the remotes
    /// section, and versions 1 and 2 also lack the list of removed members.
    fn golden_with_state_version(version: u8) -> Vec<u8> {
        let at = GOLDEN_SNAPSHOT[..5].concat().replace(' ', "").len() / 2;
        let mut chunks = GOLDEN_SNAPSHOT.to_vec();
        if version < narad_meta::codec::STATE_VERSION_BEFORE_KEY_TIME {
            chunks.retain(|chunk| *chunk != REMOTES_SECTION);
        }
        if version < narad_meta::codec::STATE_VERSION_BEFORE_REMOTES {
            // The list of removed members is the last empty list.
            let removed = chunks
                .iter()
                .rposition(|chunk| *chunk == NO_REMOVED_MEMBERS)
                .expect("the golden snapshot lists removed members");
            chunks.remove(removed);
        }
        let older = chunks.concat().replace(' ', "");
        let mut data: Vec<u8> = (0..older.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&older[i..i + 2], 16).expect("hex"))
            .collect();
        assert_eq!(data[at], narad_meta::codec::STATE_VERSION);
        data[at] = version;
        data
    }

    #[test]
    fn a_snapshot_holding_an_older_state_still_decodes() {
        for version in [
            narad_meta::codec::STATE_VERSION_BEFORE_WINDOW,
            narad_meta::codec::STATE_VERSION_BEFORE_MOVES,
            narad_meta::codec::STATE_VERSION_BEFORE_REMOTES,
            narad_meta::codec::STATE_VERSION_BEFORE_KEY_TIME,
        ] {
            let data = golden_with_state_version(version);
            assert_eq!(
                decode_snapshot(Bytes::from(data)),
                Ok(sample_state()),
                "state version {version}"
            );
        }
    }

    #[test]
    fn the_json_snapshot_of_an_older_build_still_decodes() {
        let json = serde_json::to_vec(&sample_state()).expect("serializes");
        assert_eq!(decode_snapshot(Bytes::from(json)), Ok(sample_state()));
    }

    #[test]
    fn a_json_snapshot_stored_by_an_older_build_opens_and_is_replaced_by_binary() {
        let dir = tempfile::TempDir::new().expect("temporary directory");
        let path = dir.path().join(super::super::DATABASE_FILE);
        let state = sample_state();
        let meta = SnapshotMeta {
            last_log_id: state.last_applied,
            last_membership: state.last_membership.clone(),
            snapshot_id: "old-build".into(),
        };
        {
            let (_, machine) = super::super::open(&path).expect("opens");
            let json = serde_json::to_vec(&state).expect("serializes");
            write_snapshot(&machine.database, &meta, &json).expect("writes");
        }
        let (_, mut machine) = super::super::open(&path).expect("reopens");
        assert_eq!(*machine.shared.state.read(), state);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime
            .block_on(machine.build_snapshot())
            .expect("builds a snapshot");
        let (_, data) = read_snapshot(&machine.database)
            .expect("reads")
            .expect("a snapshot");
        assert_eq!(data.first(), Some(&MACHINE_SNAPSHOT_VERSION));
    }

    #[test]
    fn another_snapshot_version_is_refused_by_name() {
        let mut data = encode_snapshot(&sample_state());
        data[0] = 2;
        assert_eq!(
            decode_snapshot(Bytes::from(data)),
            Err(
                "metastore snapshot: state machine snapshot version 2 is not supported \
                 (this build speaks version 1)"
                    .to_owned()
            )
        );
    }

    #[test]
    fn another_state_version_inside_a_snapshot_is_refused_by_name() {
        let mut data = encode_snapshot(&sample_state());
        // The state's version byte follows the last applied id (25 bytes)
        // and the membership (25 + 12 + 8 + 19 bytes).
        let at = 1 + 25 + 25 + 12 + 8 + 19;
        assert_eq!(data[at], narad_meta::codec::STATE_VERSION);
        data[at] = 9;
        let error = decode_snapshot(Bytes::from(data)).expect_err("refused");
        assert!(error.contains("metastore state version 9"), "{error}");
    }

    #[test]
    fn trailing_bytes_after_a_snapshot_are_refused() {
        let mut data = encode_snapshot(&sample_state());
        data.push(0);
        let error = decode_snapshot(Bytes::from(data)).expect_err("refused");
        assert!(error.contains("1 trailing bytes"), "{error}");
    }

    #[test]
    fn a_snapshot_of_an_applied_log_is_the_same_on_every_replica() {
        let mut first = sample_state();
        let mut second = sample_state();
        for state in [&mut first, &mut second] {
            let heartbeat = Command::Heartbeat(Heartbeat {
                id: "n1".into(),
                at_ms: 2_000,
            });
            let _ = state.metastore.apply(&heartbeat, ApplyContext { index: 3 });
        }
        assert_eq!(encode_snapshot(&first), encode_snapshot(&second));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn arbitrary_bytes_never_panic_the_snapshot_decoder(
            body in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let mut data = vec![MACHINE_SNAPSHOT_VERSION];
            data.extend(&body);
            let _ = decode_snapshot(Bytes::from(data));
            let _ = decode_snapshot(Bytes::from(body));
        }

        #[test]
        fn every_cut_of_a_snapshot_is_refused(at in any::<prop::sample::Index>()) {
            let data = encode_snapshot(&sample_state());
            let cut = at.index(data.len());
            prop_assert!(decode_snapshot(Bytes::from(data[..cut].to_vec())).is_err());
        }

        #[test]
        fn a_damaged_snapshot_never_panics(
            at in any::<prop::sample::Index>(),
            value in any::<u8>(),
        ) {
            let mut data = encode_snapshot(&sample_state());
            let at = at.index(data.len());
            data[at] = value;
            let _ = decode_snapshot(Bytes::from(data));
        }
    }
}
