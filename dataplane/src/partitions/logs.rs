//! The partition logs this node owns, opened on first use, and the topic
//! directories they live in: which incarnation each directory holds, and
//! the quarantine of a directory whose incarnation was replaced or deleted
//! (see [`super::incarnation`] and `docs/internals/topic-directories.md`).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use narad_clock::{Clock, millis};
use narad_disk::Disk;
use narad_plog::{LogConfig, LogError, PartitionLog};
use parking_lot::Mutex;

use super::incarnation::{
    self, DirAction, Marker, MarkerToken, QuarantineEntry, QuarantineStats, SweepReport,
    TopicDirError,
};
use crate::dispatch::LeaderConfirm;
use crate::topology::Destination;

/// Where a partition's log lives: `<data>/topics/<topic>/p<5 digits>`.
pub fn partition_dir(data_dir: &Path, topic: &str, partition: u32) -> PathBuf {
    topics_dir(data_dir)
        .join(topic)
        .join(format!("p{partition:05}"))
}

/// Where topic directories live: `<data>/topics`.
pub fn topics_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("topics")
}

/// Incarnations of one topic this process quarantined, remembered at most
/// (each delete and recreate adds one; the oldest are forgotten first).
const RETIRED_REMEMBERED_MAX: usize = 16;

#[derive(Debug)]
struct OpenLog {
    incarnation: Option<Arc<str>>,
    log: Arc<PartitionLog>,
    /// When the log was last handed out for work ([`LocalLogs::resolve`]),
    /// as a [`LocalLogs::use_stamp`]; [`NEVER_USED`] if only looked at.
    used_at: AtomicU64,
}

/// What this process knows of one topic directory. Its mutex is the topic
/// guard: every open, close, stamp and rename of the topic runs under it.
#[derive(Debug, Default)]
struct TopicDir {
    /// The incarnation id the marker was found or written to hold, since
    /// the last rename of the directory.
    verified: Option<Arc<str>>,
    /// Incarnation ids this process quarantined: never served again.
    retired: VecDeque<Arc<str>>,
}

impl TopicDir {
    fn retire(&mut self, token: &MarkerToken) {
        self.verified = None;
        if let MarkerToken::Id(id) = token {
            if self.retired.len() == RETIRED_REMEMBERED_MAX {
                self.retired.pop_front();
            }
            self.retired.push_back(Arc::clone(id));
        }
    }
}

/// What [`LocalLogs::retire_deleted`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Retirement {
    /// The topic had no directory here.
    NoDirectory,
    /// The directory now is this quarantined copy.
    Quarantined(PathBuf),
}

/// Open partition logs, keyed by destination, each remembering the topic
/// incarnation it was opened for.
///
/// Lock order: a topic guard, then the log map. Opens, closes and renames
/// run under the topic guard, never under the map lock, so a slow open of
/// one topic does not stall the logs of another.
#[derive(Debug)]
pub struct LocalLogs {
    disk: Arc<dyn Disk>,
    data_dir: PathBuf,
    config: LogConfig,
    open: Mutex<HashMap<Destination, OpenLog>>,
    /// The node's clock: idle eviction measures use on it
    /// (`OpenLog::used_at`).
    clock: Arc<dyn Clock>,
    topics: Mutex<HashMap<Arc<str>, Arc<Mutex<TopicDir>>>>,
    /// Held across the check-then-rename of a quarantine and the creation
    /// of a topic directory, so this process never creates a directory
    /// under a name it is about to rename onto.
    namespace: Mutex<()>,
}

impl LocalLogs {
    /// Logs under `data_dir` on `disk`, on the node's `clock`: idle
    /// eviction measures use on it, and whoever works on these logs (the
    /// combiner's commit stamps and freezes, retention, moves) reads time
    /// from it ([`Self::clock`]).
    pub fn new(
        disk: Arc<dyn Disk>,
        data_dir: impl Into<PathBuf>,
        config: LogConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            disk,
            data_dir: data_dir.into(),
            config,
            open: Mutex::new(HashMap::new()),
            clock,
            topics: Mutex::new(HashMap::new()),
            namespace: Mutex::new(()),
        }
    }

    /// The log of `destination` for the live `incarnation`, opened (or
    /// recovered) on first use.
    ///
    /// With an id, the topic directory's marker decides first: the same id
    /// serves; no marker is stamped with the id; another id closes the
    /// topic's open logs, renames the directory to `<topic>.stale-<old id>`
    /// and opens a fresh one. An id this process (or a quarantined copy on
    /// disk) already retired is refused: its caller read a topic record
    /// that has since been replaced. Without an id (a topic from before
    /// ids) the log is opened by name; no marker is read or written.
    ///
    /// # Errors
    /// As [`PartitionLog::open`]; `Inconsistent` for a refused incarnation,
    /// an unreadable marker or a topic name that is not a directory name
    /// (nothing is changed then); `Io` for a failed stamp or rename (the
    /// directory is whole under one of its names).
    pub fn resolve(
        &self,
        destination: &Destination,
        incarnation: Option<&Arc<str>>,
    ) -> Result<Arc<PartitionLog>, LogError> {
        self.resolve_as(destination, incarnation, Use::Work)
    }

    /// The node's clock these logs run on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// As [`Self::resolve`], for a look at the log's figures (describe):
    /// not a use. An open log's idle clock does not move, and a log this
    /// opens counts as unused since long ago, so idle eviction closes it
    /// again at its next pass unless real work uses it meanwhile.
    ///
    /// # Errors
    /// As [`Self::resolve`].
    pub fn resolve_to_look(
        &self,
        destination: &Destination,
        incarnation: Option<&Arc<str>>,
    ) -> Result<Arc<PartitionLog>, LogError> {
        self.resolve_as(destination, incarnation, Use::Look)
    }

    fn resolve_as(
        &self,
        destination: &Destination,
        incarnation: Option<&Arc<str>>,
        how: Use,
    ) -> Result<Arc<PartitionLog>, LogError> {
        if let Some(log) = self.open_as(destination, incarnation, how) {
            return Ok(log);
        }
        let guard = self.topic_guard(&destination.topic);
        let mut topic = guard.lock();
        if let Some(log) = self.open_as(destination, incarnation, how) {
            return Ok(log);
        }
        if !incarnation::is_topic_dir_name(&destination.topic) {
            return Err(LogError::Inconsistent {
                dir: topics_dir(&self.data_dir).display().to_string(),
                reason: format!("{:?} is not a topic directory name", destination.topic),
            });
        }
        if let Some(id) = incarnation {
            self.check_marker(&destination.topic, &mut topic, id)?;
        }
        let replaced = self.open.lock().remove(destination);
        if let Some(stale) = replaced {
            tracing::info!(%destination, "partition log reopened for another incarnation");
            close_log(destination, &stale.log);
        }
        let dir = partition_dir(&self.data_dir, &destination.topic, destination.partition);
        let log = Arc::new(PartitionLog::open(
            Arc::clone(&self.disk),
            &dir,
            self.config.clone(),
            Arc::clone(&self.clock),
        )?);
        self.open.lock().insert(
            destination.clone(),
            OpenLog {
                incarnation: incarnation.cloned(),
                log: Arc::clone(&log),
                used_at: AtomicU64::new(self.use_stamp(how).unwrap_or(NEVER_USED)),
            },
        );
        Ok(log)
    }

    /// Closes the open logs that nobody holds and that [`Self::resolve`]
    /// has not handed out for at least `idle` (spec §5.6, idle
    /// log eviction). The next produce, consume or replay of such a
    /// partition opens its log again. A log held anywhere else (a consume
    /// shard, a fan-out cursor, a commit or read under way, a move's
    /// source) stays open whatever its age. Returns the destinations whose
    /// logs it closed.
    ///
    /// Runs each close under the topic guard, as every close does, and
    /// decides under the log map's lock: a log that is not in the map can
    /// be handed out by nobody, so none is handed out while it closes.
    pub fn evict_idle(&self, idle: Duration) -> Vec<Destination> {
        // Used at or before this stamp: unused for at least `idle`.
        let idle_ms = millis(idle);
        let cutoff = self.work_stamp().saturating_sub(idle_ms);
        let idle_now = |entry: &OpenLog| {
            entry.used_at.load(Ordering::Relaxed) <= cutoff && Arc::strong_count(&entry.log) == 1
        };
        let candidates: Vec<Destination> = self
            .open
            .lock()
            .iter()
            .filter(|(_, entry)| idle_now(entry))
            .map(|(destination, _)| destination.clone())
            .collect();
        let mut evicted = Vec::new();
        for destination in candidates {
            let guard = self.topic_guard(&destination.topic);
            let _topic = guard.lock();
            let closing = {
                let mut open = self.open.lock();
                if open.get(&destination).is_some_and(idle_now) {
                    open.remove(&destination)
                } else {
                    None
                }
            };
            if let Some(entry) = closing {
                close_log(&destination, &entry.log);
                evicted.push(destination);
            }
        }
        evicted
    }

    /// The use stamp of handing a log out `how`: none for a look.
    fn use_stamp(&self, how: Use) -> Option<u64> {
        match how {
            Use::Work => Some(self.work_stamp()),
            Use::Look => None,
        }
    }

    /// Now on the monotonic clock, plus one: above [`NEVER_USED`] always.
    fn work_stamp(&self) -> u64 {
        self.clock.now_ms().saturating_add(1)
    }

    /// The data directory the logs live under.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The disk the logs live on.
    pub fn disk(&self) -> &Arc<dyn Disk> {
        &self.disk
    }

    /// The configuration every log opens with.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Installs a move's staged copy `staged` as the partition directory of
    /// `destination`, under the topic guard, so no open, close, stamp or
    /// quarantine of the topic runs meanwhile:
    ///
    /// 1. makes the topic directory the live incarnation's, as
    ///    [`Self::resolve`] does (stamping it, or quarantining another
    ///    incarnation's directory first). This comes before the rename: the
    ///    rename needs the topic directory, and a copy renamed into a
    ///    directory still marked for another incarnation would be
    ///    quarantined with it by the next resolve;
    /// 2. closes a log still open for `destination` (a copy that served
    ///    here and moved away, its retirement awaiting the leader), so
    ///    nothing writes into the directory it is about to judge;
    /// 3. lets `vacate` clear the way if the partition directory exists
    ///    (it must leave no directory there, or an empty one);
    /// 4. renames `staged` to the partition directory and syncs the topic
    ///    directory, then the staging directory's parent.
    ///
    /// Returns the partition directory.
    ///
    /// # Errors
    /// As [`Self::resolve`]'s marker checks (a refused incarnation changes
    /// nothing); `Io` for a failed step, after which the copy is whole at
    /// one of its two paths.
    pub fn install_partition_dir(
        &self,
        destination: &Destination,
        incarnation: Option<&Arc<str>>,
        staged: &Path,
        vacate: impl FnOnce(&dyn Disk, &Path) -> io::Result<()>,
    ) -> Result<PathBuf, LogError> {
        if !incarnation::is_topic_dir_name(&destination.topic) {
            return Err(LogError::Inconsistent {
                dir: topics_dir(&self.data_dir).display().to_string(),
                reason: format!("{:?} is not a topic directory name", destination.topic),
            });
        }
        let guard = self.topic_guard(&destination.topic);
        let mut topic = guard.lock();
        match incarnation {
            Some(id) => self.check_marker(&destination.topic, &mut topic, id)?,
            None => self.create_topic_dir(&destination.topic)?,
        }
        let serving = self.open.lock().remove(destination);
        if let Some(entry) = serving {
            tracing::info!(%destination, "a copy that moved away closed for a move's install");
            close_log(destination, &entry.log);
        }
        let dir = partition_dir(&self.data_dir, &destination.topic, destination.partition);
        let io = |operation| move |source| LogError::Io { operation, source };
        vacate(&*self.disk, &dir).map_err(io("clear the way for an installed copy"))?;
        self.disk
            .rename(staged, &dir)
            .map_err(io("rename the staged copy into place"))?;
        let topic_dir = topics_dir(&self.data_dir).join(&*destination.topic);
        self.disk
            .sync_dir(&topic_dir)
            .map_err(io("sync the topic directory"))?;
        if let Some(parent) = staged.parent() {
            self.disk
                .sync_dir(parent)
                .map_err(io("sync the staging directory"))?;
        }
        Ok(dir)
    }

    /// Renames the partition directory of `destination`, a copy installed
    /// by a move whose flip the leader confirmed cannot commit, back to
    /// `staged` (which must not exist), under the topic guard, and syncs
    /// both parents. Refused while a log of `destination` is open: an open
    /// log is a partition this node serves.
    ///
    /// # Errors
    /// `Inconsistent` when refused; `Io` for a failed step, after which the
    /// copy is whole at one of its two paths.
    pub fn retract_partition_dir(
        &self,
        destination: &Destination,
        staged: &Path,
    ) -> Result<(), LogError> {
        let guard = self.topic_guard(&destination.topic);
        let _topic = guard.lock();
        let dir = partition_dir(&self.data_dir, &destination.topic, destination.partition);
        if self.open.lock().contains_key(destination) {
            return Err(LogError::Inconsistent {
                dir: dir.display().to_string(),
                reason: "the partition's log is open here".into(),
            });
        }
        let io = |operation| move |source| LogError::Io { operation, source };
        if self
            .disk
            .exists(staged)
            .map_err(io("look for a staged copy"))?
        {
            return Err(LogError::Inconsistent {
                dir: dir.display().to_string(),
                reason: format!("{} exists already", staged.display()),
            });
        }
        self.disk
            .rename(&dir, staged)
            .map_err(io("rename an installed copy back to staging"))?;
        if let Some(parent) = staged.parent() {
            self.disk
                .sync_dir(parent)
                .map_err(io("sync the staging directory"))?;
        }
        let topic_dir = topics_dir(&self.data_dir).join(&*destination.topic);
        self.disk
            .sync_dir(&topic_dir)
            .map_err(io("sync the topic directory"))
    }

    /// Closes the open log of `destination`, if any (its partition moved
    /// away). Runs under the topic guard. Returns whether one was open.
    pub fn close_partition(&self, destination: &Destination) -> bool {
        let guard = self.topic_guard(&destination.topic);
        let _topic = guard.lock();
        let closing = self.open.lock().remove(destination);
        match closing {
            Some(entry) => {
                close_log(destination, &entry.log);
                true
            }
            None => false,
        }
    }

    /// How many partition logs are open now.
    pub fn open_count(&self) -> usize {
        self.open.lock().len()
    }

    /// Every open log's destination and the incarnation it was opened for.
    pub fn open_destinations(&self) -> Vec<(Destination, Option<Arc<str>>)> {
        self.open
            .lock()
            .iter()
            .map(|(destination, entry)| (destination.clone(), entry.incarnation.clone()))
            .collect()
    }

    /// The open log of `destination`, if any (reads, tests).
    pub fn get(&self, destination: &Destination) -> Option<Arc<PartitionLog>> {
        self.open
            .lock()
            .get(destination)
            .map(|entry| Arc::clone(&entry.log))
    }

    /// The incarnation the open log of `destination` was opened for:
    /// `None` when no log is open, `Some(None)` for one opened by name.
    pub fn open_incarnation(&self, destination: &Destination) -> Option<Option<Arc<str>>> {
        self.open
            .lock()
            .get(destination)
            .map(|entry| entry.incarnation.clone())
    }

    /// Closes every open log (writes each `hwm` file).
    pub fn close_all(&self) {
        let open = std::mem::take(&mut *self.open.lock());
        for (destination, entry) in open {
            close_log(&destination, &entry.log);
        }
    }

    /// Retires the directory of `topic`, whose incarnation `incarnation`
    /// (`None`: a topic without an id) was deleted: closes the topic's open
    /// logs and renames the directory to its quarantined name, so
    /// [`Self::sweep_quarantine`] removes it once the leader confirms. A
    /// directory without a marker is stamped first with the deleted
    /// incarnation (`none` for a topic without an id).
    ///
    /// A directory whose marker holds another incarnation is refused and
    /// left alone, with its logs open: it belongs to an incarnation the
    /// caller did not say was deleted (the topic may have been created
    /// again since the caller looked). For a directory left by a topic
    /// deleted while this node was down, read its marker with
    /// [`Self::directory_incarnation`] and pass that.
    ///
    /// Call it only after the delete applied to this node's replica: a
    /// retired incarnation is never served again by this process.
    ///
    /// # Errors
    /// Refused for a malformed id or topic name, an unreadable marker, a
    /// marker of another incarnation, or a quarantined name already taken;
    /// any disk error. The directory is then whole under one of its names,
    /// and a later call may retry.
    pub fn retire_deleted(
        &self,
        topic: &str,
        incarnation: Option<&str>,
    ) -> Result<Retirement, TopicDirError> {
        let topic_dir = topics_dir(&self.data_dir).join(topic);
        let refused = |reason: String| TopicDirError::Refused {
            dir: topic_dir.clone(),
            reason,
        };
        if !incarnation::is_topic_dir_name(topic) {
            return Err(refused("not a topic directory name".into()));
        }
        let deleted = MarkerToken::of(incarnation)
            .ok_or_else(|| refused(format!("malformed incarnation id {incarnation:?}")))?;
        let guard = self.topic_guard(topic);
        let mut state = guard.lock();
        let exists = self.disk.exists(&topic_dir).map_err(TopicDirError::io(
            "look for the topic directory",
            &topic_dir,
        ))?;
        if !exists {
            self.close_topic_logs(topic);
            state.retire(&deleted);
            return Ok(Retirement::NoDirectory);
        }
        let marker = incarnation::read_marker(&*self.disk, &topic_dir)
            .map_err(TopicDirError::io("read the marker", &topic_dir))?;
        match &marker {
            Marker::Holds(token) if *token == deleted => {}
            Marker::Missing => {}
            Marker::Holds(other) => {
                return Err(refused(format!(
                    "holds incarnation {}, not the deleted {}",
                    other.as_str(),
                    deleted.as_str()
                )));
            }
            Marker::Unreadable(what) => return Err(refused(format!("unreadable marker: {what}"))),
        }
        self.close_topic_logs(topic);
        if marker == Marker::Missing {
            incarnation::write_marker(&*self.disk, &topic_dir, &deleted)?;
        }
        let stale = self.quarantine(topic, &deleted)?;
        state.retire(&deleted);
        tracing::info!(
            topic,
            incarnation = deleted.as_str(),
            stale = %stale.display(),
            "topic directory of a deleted incarnation quarantined"
        );
        Ok(Retirement::Quarantined(stale))
    }

    /// The incarnation the marker of `topic`'s directory names: `None`
    /// when there is no directory or no marker. For a start-up reconcile
    /// that retires directories of topics deleted while this node was
    /// down (see [`Self::retire_deleted`]).
    ///
    /// # Errors
    /// Refused for a malformed topic name or an unreadable marker; a disk
    /// error.
    pub fn directory_incarnation(&self, topic: &str) -> Result<Option<MarkerToken>, TopicDirError> {
        let topic_dir = topics_dir(&self.data_dir).join(topic);
        if !incarnation::is_topic_dir_name(topic) {
            return Err(TopicDirError::Refused {
                dir: topic_dir,
                reason: "not a topic directory name".into(),
            });
        }
        match incarnation::read_marker(&*self.disk, &topic_dir)
            .map_err(TopicDirError::io("read the marker", &topic_dir))?
        {
            Marker::Missing => Ok(None),
            Marker::Holds(token) => Ok(Some(token)),
            Marker::Unreadable(what) => Err(TopicDirError::Refused {
                dir: topic_dir,
                reason: format!("unreadable marker: {what}"),
            }),
        }
    }

    /// Asks the leader, once per quarantined copy (at most
    /// [`incarnation::QUARANTINE_QUESTIONS_PER_SWEEP_MAX`]), whether its
    /// incarnation is gone, and removes the copies it confirms. An
    /// unconfirmed or failed question keeps the copy for the next sweep.
    /// Blocks while the leader answers: call it from a housekeeping thread,
    /// not an async runtime worker.
    pub fn sweep_quarantine(&self, leader: &dyn LeaderConfirm) -> SweepReport {
        let topics = topics_dir(&self.data_dir);
        let mut report = SweepReport::default();
        let copies = match incarnation::list_quarantined(&*self.disk, &topics) {
            Ok(copies) => copies,
            Err(error) => {
                tracing::warn!(%error, "listing quarantined topic directories failed");
                report.listing_error = Some(error.to_string());
                return report;
            }
        };
        let asked = copies
            .len()
            .min(incarnation::QUARANTINE_QUESTIONS_PER_SWEEP_MAX);
        report.deferred = copies.len() - asked;
        for copy in &copies[..asked] {
            let question = copy.token.gone_question(&copy.topic);
            match leader.confirm_gone(&question) {
                Ok(true) => match incarnation::remove_copy(&*self.disk, &topics, &copy.path) {
                    Ok(()) => {
                        tracing::info!(
                            topic = %copy.topic,
                            incarnation = copy.token.as_str(),
                            "removed a quarantined topic incarnation the leader confirmed gone"
                        );
                        report.removed += 1;
                    }
                    Err(error) => {
                        tracing::warn!(path = %copy.path.display(), %error, "removing a quarantined topic directory failed");
                        report.removals_failed += 1;
                    }
                },
                Ok(false) => report.unconfirmed += 1,
                Err(error) => {
                    tracing::warn!(
                        topic = %copy.topic,
                        incarnation = copy.token.as_str(),
                        %error,
                        "could not ask the leader about a quarantined topic incarnation; kept"
                    );
                    report.questions_failed += 1;
                }
            }
        }
        report
    }

    /// The quarantined copies on disk and the bytes of their files, for
    /// the `narad_quarantined_copies` and `narad_quarantined_bytes` gauges.
    /// Reads only directory listings, markers and file sizes.
    ///
    /// # Errors
    /// A disk error.
    pub fn quarantine_stats(&self) -> io::Result<QuarantineStats> {
        let topics = topics_dir(&self.data_dir);
        let copies = incarnation::list_quarantined(&*self.disk, &topics)?;
        let mut stats = QuarantineStats::default();
        for copy in copies {
            let mod_time_ms = match self.disk.modified_ms(&copy.path) {
                Ok(ms) => ms,
                Err(error) if error.kind() == io::ErrorKind::Unsupported => 0,
                Err(error) => return Err(error),
            };
            stats.add(QuarantineEntry {
                kind: "incarnation",
                topic: copy.topic.to_string(),
                partition: None,
                bytes: incarnation::tree_bytes(&*self.disk, &copy.path, 0)?,
                dir: copy.path,
                mod_time_ms,
            });
        }
        for path in self.quarantined_partitions()? {
            let name = path.file_name().map(|name| name.to_string_lossy());
            let parsed = name
                .as_deref()
                .and_then(incarnation::parse_partition_quarantine_name);
            let topic = path
                .parent()
                .and_then(Path::file_name)
                .map(|topic| topic.to_string_lossy().into_owned())
                .unwrap_or_default();
            stats.add(QuarantineEntry {
                kind: "partition",
                topic,
                partition: parsed.map(|(partition, _)| partition),
                bytes: incarnation::tree_bytes(&*self.disk, &path, 0)?,
                dir: path,
                mod_time_ms: parsed.map_or(0, |(_, ms)| ms),
            });
        }
        Ok(stats)
    }

    /// The quarantined partition copies (`p<N>.quarantine-<ms>`) in live
    /// topic directories. They are never removed here: they may hold the
    /// only copy of records (see `moves::files::left_copy`); deleting the
    /// topic retires them with its directory.
    ///
    /// # Errors
    /// A disk error.
    pub fn quarantined_partitions(&self) -> io::Result<Vec<PathBuf>> {
        let topics = topics_dir(&self.data_dir);
        let mut found = Vec::new();
        for topic in self.topic_directories()? {
            let topic_dir = topics.join(&topic);
            let names = match self.disk.list_dir(&topic_dir) {
                Ok(names) => names,
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                // A file named like a topic directory.
                Err(error) if error.kind() == io::ErrorKind::NotADirectory => continue,
                Err(error) => return Err(error),
            };
            found.extend(
                names
                    .into_iter()
                    .filter(|name| incarnation::is_partition_quarantine_name(name))
                    .map(|name| topic_dir.join(name)),
            );
        }
        Ok(found)
    }

    /// Names of the topic directories on disk, quarantined copies left
    /// out: what a startup reconcile compares with the replica to find
    /// directories of topics deleted while this node was down.
    ///
    /// # Errors
    /// A disk error.
    pub fn topic_directories(&self) -> io::Result<Vec<String>> {
        let topics = topics_dir(&self.data_dir);
        let names = match self.disk.list_dir(&topics) {
            Ok(names) => names,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(error),
        };
        let mut live = Vec::with_capacity(names.len());
        for name in names {
            if incarnation::is_quarantined_copy(&*self.disk, &topics, &name)?.is_none() {
                live.push(name);
            }
        }
        Ok(live)
    }

    /// The open log of `destination` if it was opened for `incarnation`.
    /// Opens nothing, so it never touches the disk. Like
    /// [`Self::resolve`], it counts as a use of the log
    /// ([`Self::evict_idle`]).
    pub fn current(
        &self,
        destination: &Destination,
        incarnation: Option<&Arc<str>>,
    ) -> Option<Arc<PartitionLog>> {
        self.open_as(destination, incarnation, Use::Work)
    }

    fn open_as(
        &self,
        destination: &Destination,
        incarnation: Option<&Arc<str>>,
        how: Use,
    ) -> Option<Arc<PartitionLog>> {
        let stamp = self.use_stamp(how);
        self.open
            .lock()
            .get(destination)
            .filter(|entry| entry.incarnation.as_ref() == incarnation)
            .map(|entry| {
                if let Some(stamp) = stamp {
                    entry.used_at.fetch_max(stamp, Ordering::Relaxed);
                }
                Arc::clone(&entry.log)
            })
    }

    fn topic_guard(&self, topic: &str) -> Arc<Mutex<TopicDir>> {
        Arc::clone(self.topics.lock().entry(Arc::from(topic)).or_default())
    }

    /// Makes the topic directory `id`'s (see [`Self::resolve`]). Runs under
    /// the topic guard.
    fn check_marker(
        &self,
        topic: &str,
        state: &mut TopicDir,
        id: &Arc<str>,
    ) -> Result<(), TopicDirError> {
        if state.verified.as_ref() == Some(id) {
            return Ok(());
        }
        let topics = topics_dir(&self.data_dir);
        let topic_dir = topics.join(topic);
        let refused = |reason: String| TopicDirError::Refused {
            dir: topic_dir.clone(),
            reason,
        };
        if !incarnation::is_incarnation_id(id) {
            return Err(refused(format!("malformed incarnation id {id:?}")));
        }
        let token = MarkerToken::Id(Arc::clone(id));
        let retired = state.retired.contains(id)
            || incarnation::is_quarantined_copy(
                &*self.disk,
                &topics,
                &incarnation::stale_dir_name(topic, &token),
            )
            .map_err(TopicDirError::io("look for a quarantined copy", &topic_dir))?
            .is_some();
        let marker = incarnation::read_marker(&*self.disk, &topic_dir)
            .map_err(TopicDirError::io("read the marker", &topic_dir))?;
        match incarnation::decide(&marker, id, retired) {
            DirAction::Serve => {}
            DirAction::Stamp => self.stamp(topic, &token)?,
            DirAction::Quarantine(old) => {
                self.close_topic_logs(topic);
                let stale = self.quarantine(topic, &old)?;
                state.retire(&old);
                tracing::warn!(
                    topic,
                    old_incarnation = old.as_str(),
                    incarnation = &**id,
                    stale = %stale.display(),
                    "topic directory of a replaced incarnation quarantined"
                );
                self.stamp(topic, &token)?;
            }
            DirAction::Refuse(reason) => return Err(refused(reason)),
        }
        state.verified = Some(Arc::clone(id));
        Ok(())
    }

    /// Creates the topic directory if needed and writes its marker, durable
    /// (directory entries included) before any log of the incarnation opens.
    fn stamp(&self, topic: &str, token: &MarkerToken) -> Result<(), TopicDirError> {
        let _namespace = self.namespace.lock();
        self.create_durably(topic, Some(token))
    }

    /// Creates the directory of a topic without an incarnation id (no
    /// marker is written for one), durable in `topics/`.
    fn create_topic_dir(&self, topic: &str) -> Result<(), TopicDirError> {
        let topic_dir = topics_dir(&self.data_dir).join(topic);
        let _namespace = self.namespace.lock();
        if self.disk.exists(&topic_dir).map_err(TopicDirError::io(
            "look for the topic directory",
            &topic_dir,
        ))? {
            return Ok(());
        }
        self.create_durably(topic, None)
    }

    /// Creates `topics/<topic>` (and `topics/` itself) if missing, writes
    /// the incarnation marker when there is one, and syncs the directories
    /// whose entries changed. The caller holds the namespace lock.
    fn create_durably(
        &self,
        topic: &str,
        marker: Option<&MarkerToken>,
    ) -> Result<(), TopicDirError> {
        let topics = topics_dir(&self.data_dir);
        let topic_dir = topics.join(topic);
        let topics_existed = self
            .disk
            .exists(&topics)
            .map_err(TopicDirError::io("look for the topics directory", &topics))?;
        self.disk
            .create_dir_all(&topic_dir)
            .map_err(TopicDirError::io("create the topic directory", &topic_dir))?;
        if let Some(token) = marker {
            incarnation::write_marker(&*self.disk, &topic_dir, token)?;
        }
        self.disk
            .sync_dir(&topics)
            .map_err(TopicDirError::io("sync the topics directory", &topics))?;
        if !topics_existed {
            self.disk
                .sync_dir(&self.data_dir)
                .map_err(TopicDirError::io("sync the data directory", &self.data_dir))?;
        }
        Ok(())
    }

    /// Renames the topic directory aside; its logs must be closed.
    fn quarantine(&self, topic: &str, token: &MarkerToken) -> Result<PathBuf, TopicDirError> {
        let _namespace = self.namespace.lock();
        incarnation::quarantine_dir(&*self.disk, &topics_dir(&self.data_dir), topic, token)
    }

    /// Closes every open log of `topic`. Runs under its topic guard; the
    /// map lock is held only to take the entries out.
    fn close_topic_logs(&self, topic: &str) {
        let closing: Vec<(Destination, OpenLog)> = {
            let mut open = self.open.lock();
            let keys: Vec<Destination> = open
                .keys()
                .filter(|destination| &*destination.topic == topic)
                .cloned()
                .collect();
            keys.into_iter()
                .filter_map(|key| open.remove(&key).map(|entry| (key, entry)))
                .collect()
        };
        for (destination, entry) in closing {
            close_log(&destination, &entry.log);
        }
    }
}

/// The use stamp of a log opened only to be looked at.
const NEVER_USED: u64 = 0;

/// Whether handing out a log counts as a use for idle eviction.
#[derive(Clone, Copy, Debug)]
enum Use {
    /// A produce, consume, replay or any other work on the records.
    Work,
    /// A look at its figures (describe).
    Look,
}

fn close_log(destination: &Destination, log: &PartitionLog) {
    if let Err(error) = log.close() {
        tracing::warn!(%destination, %error, "closing a partition log failed");
    }
}
