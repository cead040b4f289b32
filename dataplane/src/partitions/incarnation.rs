//! Incarnation markers on topic directories, and quarantined copies of
//! replaced or deleted incarnations (spec §5.1, §5.6, §6 "Topic delete").
//!
//! `<data>/topics/<topic>/incarnation` names the topic incarnation whose
//! logs the directory holds. A directory of another incarnation is renamed
//! to `<topic>.stale-<old id>` and removed only once the control-plane
//! leader confirms that incarnation gone. The layout, the order of every
//! step and why each crash point is safe are in
//! `docs/internals/topic-directories.md`.
//!
//! This module decides (`decide`, a pure function of the marker) and does
//! the file-system steps; which log is open for which incarnation is
//! [`super::LocalLogs`]' business.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use narad_disk::{BackendKind, Disk, IoBuf, OpenOptions};
use narad_plog::LogError;

use crate::dispatch::GoneQuestion;
use crate::metrics::NodeMetrics;

/// The marker's file name inside a topic directory.
pub const MARKER_FILE_NAME: &str = "incarnation";

/// The marker is written here first, synced, then renamed over
/// [`MARKER_FILE_NAME`], so a marker is always whole or absent.
const MARKER_STAGING_FILE_NAME: &str = "incarnation.tmp";

/// What separates a topic name from the incarnation of a quarantined copy:
/// `<topic>.stale-<id>`.
pub const STALE_INFIX: &str = ".stale-";

/// Characters of an incarnation id: 8 bytes as lowercase hex.
pub const INCARNATION_ID_CHARS: usize = 16;

/// The marker token of a directory retired from a topic that had no
/// incarnation id (created before ids existed). Never a valid id, so it
/// cannot be mistaken for one.
pub const NO_ID_TOKEN: &str = "none";

/// A marker file larger than this is not a marker (the longest valid one
/// is 16 bytes and a line end).
const MARKER_BYTES_MAX: u64 = 64;

/// Quarantined copies one sweep asks the leader about at most; the rest
/// wait for the next sweep, so a sweep is bounded in time even after many
/// deletes.
pub const QUARANTINE_QUESTIONS_PER_SWEEP_MAX: usize = 64;

/// Directory levels a quarantined copy may have below its own directory:
/// partition directories, then a partition's own quarantined copies
/// (`p<N>.quarantine*`). Anything deeper is not a copy this node wrote, and
/// the walk refuses it rather than deleting it.
const TREE_DEPTH_MAX: usize = 3;

/// Bytes of topic name a topic directory may have. Names up to 255 created
/// by older releases keep working; the `.stale-<id>` suffix then goes past
/// the usual 255-byte file-name limit, and the quarantine rename fails with
/// an error (nothing is lost: the directory stays where it is).
const TOPIC_NAME_BYTES_MAX_LEGACY: usize = 255;

/// Whether `text` is an incarnation id: exactly 16 lowercase hex
/// characters, the form the control plane mints.
pub fn is_incarnation_id(text: &str) -> bool {
    text.len() == INCARNATION_ID_CHARS
        && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `topic` can be a directory name under `<data>/topics` without
/// escaping it: the spec's topic-name characters (`A-Z a-z 0-9 . _ -`),
/// not `.` or `..`, at most 255 bytes.
pub fn is_topic_dir_name(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= TOPIC_NAME_BYTES_MAX_LEGACY
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// What a marker names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MarkerToken {
    /// An incarnation id (16 lowercase hex characters).
    Id(Arc<str>),
    /// No id: written only when the directory of a topic without an id is
    /// retired, so its quarantined copy is recognised like any other.
    NoId,
}

impl MarkerToken {
    /// The token `text` spells, if any.
    pub fn parse(text: &str) -> Option<Self> {
        if text == NO_ID_TOKEN {
            Some(Self::NoId)
        } else if is_incarnation_id(text) {
            Some(Self::Id(Arc::from(text)))
        } else {
            None
        }
    }

    /// The token of a topic's incarnation id (`None`: no id).
    pub fn of(incarnation: Option<&str>) -> Option<Self> {
        match incarnation {
            None => Some(Self::NoId),
            Some(id) if is_incarnation_id(id) => Some(Self::Id(Arc::from(id))),
            Some(_) => None,
        }
    }

    /// As written in the marker and in a quarantined directory's name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Id(id) => id,
            Self::NoId => NO_ID_TOKEN,
        }
    }

    /// What to ask the leader before removing a copy of `topic` with this
    /// token: whether this incarnation is gone, or, without an id, whether
    /// the topic is.
    pub fn gone_question(&self, topic: &str) -> GoneQuestion {
        GoneQuestion {
            topic: Arc::from(topic),
            incarnation: match self {
                Self::Id(id) => Some(Arc::clone(id)),
                Self::NoId => None,
            },
        }
    }
}

/// What a topic directory's marker says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Marker {
    /// No marker (or no directory).
    Missing,
    /// A well-formed marker.
    Holds(MarkerToken),
    /// A marker that is not one: too large, or not a token.
    Unreadable(String),
}

/// What resolving incarnation `requested` does with the topic directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DirAction {
    /// The directory is `requested`'s: open its logs.
    Serve,
    /// No marker: the directory (new, or from before markers) becomes
    /// `requested`'s: write the marker, then open.
    Stamp,
    /// The directory is another incarnation's: close its logs, rename it
    /// aside under this token, then stamp a fresh one.
    Quarantine(MarkerToken),
    /// Nothing is touched and nothing is served.
    Refuse(String),
}

/// Decides from the marker alone. `retired` says `requested` was
/// quarantined before (by this process, or a recognised
/// `<topic>.stale-<requested>` copy exists): such a caller read the topic
/// record before it was replaced, and serving it would quarantine the
/// incarnation that replaced it.
pub(crate) fn decide(marker: &Marker, requested: &str, retired: bool) -> DirAction {
    if retired {
        return DirAction::Refuse(format!(
            "incarnation {requested} was quarantined here; the caller's topic record is stale"
        ));
    }
    match marker {
        Marker::Missing => DirAction::Stamp,
        Marker::Holds(MarkerToken::Id(id)) if &**id == requested => DirAction::Serve,
        Marker::Holds(other) => DirAction::Quarantine(other.clone()),
        // Nothing tells whose records these are; renaming or adopting them
        // on a guess could lose or expose them, so an operator looks.
        Marker::Unreadable(what) => DirAction::Refuse(format!("unreadable marker: {what}")),
    }
}

/// A topic directory operation that failed or was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopicDirError {
    /// The disk failed.
    #[error("{operation} {}: {source}", path.display())]
    Io {
        /// What was being done.
        operation: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The disk's error.
        #[source]
        source: io::Error,
    },
    /// The directory's state forbids the step; nothing was changed.
    #[error("topic directory {}: {reason}", dir.display())]
    Refused {
        /// The topic directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
}

impl TopicDirError {
    pub(crate) fn io(operation: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io {
            operation,
            path,
            source,
        }
    }
}

impl From<TopicDirError> for LogError {
    fn from(error: TopicDirError) -> Self {
        match error {
            TopicDirError::Io {
                operation, source, ..
            } => LogError::Io { operation, source },
            TopicDirError::Refused { dir, reason } => LogError::Inconsistent {
                dir: dir.display().to_string(),
                reason,
            },
        }
    }
}

/// Reads the marker of `topic_dir`.
///
/// # Errors
/// A disk error other than "not found".
pub(crate) fn read_marker(disk: &dyn Disk, topic_dir: &Path) -> io::Result<Marker> {
    let path = topic_dir.join(MARKER_FILE_NAME);
    let file = match disk.open(&path, OpenOptions::EXISTING) {
        Ok(file) => file,
        // `topic_dir` may be a stray file named like a topic directory.
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(Marker::Missing);
        }
        Err(error) => return Err(error),
    };
    let size = file.size()?;
    if size > MARKER_BYTES_MAX {
        return Ok(Marker::Unreadable(format!("{size} bytes")));
    }
    let bytes = file.read_at(0, usize::try_from(size).unwrap_or(0)).wait()?;
    let text = String::from_utf8_lossy(&bytes);
    Ok(match MarkerToken::parse(text.trim_ascii()) {
        Some(token) => Marker::Holds(token),
        None => Marker::Unreadable(format!("{:?}", text.trim_ascii())),
    })
}

/// Writes `token` as the marker of `topic_dir` (which must exist): staged,
/// fdatasynced, renamed into place and the directory synced, so once this
/// returns the marker is durable, and at any crash before it the marker is
/// absent or whole.
///
/// # Errors
/// Any disk error; the marker may then be absent, never torn.
pub(crate) fn write_marker(
    disk: &dyn Disk,
    topic_dir: &Path,
    token: &MarkerToken,
) -> Result<(), TopicDirError> {
    let staging = topic_dir.join(MARKER_STAGING_FILE_NAME);
    let marker = topic_dir.join(MARKER_FILE_NAME);
    match disk.remove_file(&staging) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(TopicDirError::io(
                "remove a leftover staged marker",
                &staging,
            )(error));
        }
    }
    let file = disk
        .open(&staging, OpenOptions::CREATE)
        .map_err(TopicDirError::io("create the staged marker", &staging))?;
    file.write_at(0, IoBuf::from_slice(token.as_str().as_bytes()))
        .wait()
        .map_err(TopicDirError::io("write the staged marker", &staging))?;
    file.fdatasync()
        .wait()
        .map_err(TopicDirError::io("fdatasync the staged marker", &staging))?;
    drop(file);
    disk.rename(&staging, &marker)
        .map_err(TopicDirError::io("rename the marker into place", &marker))?;
    disk.sync_dir(topic_dir)
        .map_err(TopicDirError::io("sync the topic directory", topic_dir))
}

/// The name of the quarantined copy of `topic`'s directory holding
/// `token`'s logs.
pub fn stale_dir_name(topic: &str, token: &MarkerToken) -> String {
    format!("{topic}{STALE_INFIX}{}", token.as_str())
}

/// The topic and token a directory name would have as a quarantined copy.
/// A live topic may have such a name too (the topic-name rules allow
/// `.stale-`); `is_quarantined_copy` tells them apart by the marker.
pub fn parse_stale_dir_name(name: &str) -> Option<(&str, MarkerToken)> {
    let (topic, token) = name.rsplit_once(STALE_INFIX)?;
    if topic.is_empty() {
        return None;
    }
    Some((topic, MarkerToken::parse(token)?))
}

/// Whether the directory `name` under `topics_dir` is a quarantined copy:
/// its name parses as one and its marker holds the token the name ends in.
/// A live topic named `<t>.stale-<id>` holds its own incarnation id, which
/// the control plane minted at random and never equals the id of another
/// topic's incarnation, or no marker at all (a topic without an id).
///
/// # Errors
/// A disk error reading the marker.
pub(crate) fn is_quarantined_copy(
    disk: &dyn Disk,
    topics_dir: &Path,
    name: &str,
) -> io::Result<Option<QuarantinedCopy>> {
    let Some((topic, token)) = parse_stale_dir_name(name) else {
        return Ok(None);
    };
    let path = topics_dir.join(name);
    if read_marker(disk, &path)? != Marker::Holds(token.clone()) {
        return Ok(None);
    }
    Ok(Some(QuarantinedCopy {
        path,
        topic: Arc::from(topic),
        token,
    }))
}

/// A quarantined copy on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuarantinedCopy {
    /// Its directory.
    pub path: PathBuf,
    /// The topic it was a directory of.
    pub topic: Arc<str>,
    /// The incarnation it holds.
    pub token: MarkerToken,
}

/// Every quarantined copy under `topics_dir`, in name order.
///
/// # Errors
/// A disk error listing the directory or reading a marker.
pub(crate) fn list_quarantined(
    disk: &dyn Disk,
    topics_dir: &Path,
) -> io::Result<Vec<QuarantinedCopy>> {
    let names = match disk.list_dir(topics_dir) {
        Ok(names) => names,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut copies = Vec::new();
    for name in names {
        if let Some(copy) = is_quarantined_copy(disk, topics_dir, &name)? {
            copies.push(copy);
        }
    }
    Ok(copies)
}

/// Renames `topic_dir` (whose logs are closed) to its quarantined name
/// for `token` and syncs `topics_dir`. Returns the new path.
///
/// # Errors
/// Refused when the quarantined name is taken (the rename would replace
/// an empty directory on Linux, or fail on a full one); any disk error,
/// after which the directory is under one of its two names, whole.
pub(crate) fn quarantine_dir(
    disk: &dyn Disk,
    topics_dir: &Path,
    topic: &str,
    token: &MarkerToken,
) -> Result<PathBuf, TopicDirError> {
    let topic_dir = topics_dir.join(topic);
    let stale = topics_dir.join(stale_dir_name(topic, token));
    if disk
        .exists(&stale)
        .map_err(TopicDirError::io("look for the quarantine name", &stale))?
    {
        return Err(TopicDirError::Refused {
            dir: topic_dir,
            reason: format!("{} exists already", stale.display()),
        });
    }
    disk.rename(&topic_dir, &stale).map_err(TopicDirError::io(
        "rename the topic directory to its quarantine name",
        &stale,
    ))?;
    disk.sync_dir(topics_dir)
        .map_err(TopicDirError::io("sync the topics directory", topics_dir))?;
    Ok(stale)
}

/// What one quarantine sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Copies the leader confirmed gone, now removed.
    pub removed: usize,
    /// Copies the leader did not confirm gone: kept.
    pub unconfirmed: usize,
    /// Copies whose question failed (no leader, timeout): kept.
    pub questions_failed: usize,
    /// Copies confirmed gone whose removal failed part way: kept, with
    /// their marker, so the next sweep finishes them.
    pub removals_failed: usize,
    /// Copies beyond [`QUARANTINE_QUESTIONS_PER_SWEEP_MAX`], left for the
    /// next sweep.
    pub deferred: usize,
    /// Set when the topics directory could not be listed: nothing was
    /// asked or removed.
    pub listing_error: Option<String>,
}

/// Infix of a quarantined partition copy's name, `p<N>.quarantine-<unix
/// ms>` beside the topic's live partition directories: a copy that served
/// here and moved away without a handoff (spec §5 layout).
pub const PARTITION_QUARANTINE_INFIX: &str = ".quarantine-";

/// The quarantine name of partition directory `name` at `now_ms`.
pub fn partition_quarantine_name(name: &str, now_ms: u64) -> String {
    format!("{name}{PARTITION_QUARANTINE_INFIX}{now_ms}")
}

/// Whether `name` is a quarantined partition copy's directory name.
pub fn is_partition_quarantine_name(name: &str) -> bool {
    let Some((partition, stamp)) = name.split_once(PARTITION_QUARANTINE_INFIX) else {
        return false;
    };
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    partition
        .strip_prefix('p')
        .is_some_and(|index| index.len() == 5 && digits(index))
        && digits(stamp)
}

/// Quarantined copies listed at most, in the node status.
pub const QUARANTINE_LISTED_MAX: usize = 100;

/// The `narad_quarantined_copies` and `narad_quarantined_bytes` gauges, and
/// the first copies for the node status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuarantineStats {
    /// Quarantined copies on disk.
    pub copies: u64,
    /// Bytes of their files.
    pub bytes: u64,
    /// The first [`QUARANTINE_LISTED_MAX`] of them: copies of replaced or
    /// deleted topic incarnations in name order, then partition copies.
    pub listed: Vec<QuarantineEntry>,
}

/// One quarantined copy, as the node status lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuarantineEntry {
    /// `incarnation` (a topic directory of a replaced or deleted
    /// incarnation, `<topic>.stale-<id>`) or `partition` (a partition copy
    /// that left without a handoff, `p<N>.quarantine-<ms>`).
    pub kind: &'static str,
    /// The topic it was a copy of.
    pub topic: String,
    /// The partition, for a partition copy.
    pub partition: Option<u32>,
    /// Its directory.
    pub dir: PathBuf,
    /// Bytes of its files.
    pub bytes: u64,
    /// Unix ms: when a partition copy was quarantined (its name says), or
    /// when a topic copy's directory last changed; 0 where the disk keeps
    /// no modification times (the simulated one).
    pub mod_time_ms: u64,
}

impl QuarantineStats {
    /// Counts one copy, and lists it while the list has room.
    pub(crate) fn add(&mut self, entry: QuarantineEntry) {
        self.copies += 1;
        self.bytes += entry.bytes;
        if self.listed.len() < QUARANTINE_LISTED_MAX {
            self.listed.push(entry);
        }
    }
}

/// The partition index and quarantine time (Unix ms) in a quarantined
/// partition copy's name, `p<N>.quarantine-<ms>`.
pub fn parse_partition_quarantine_name(name: &str) -> Option<(u32, u64)> {
    if !is_partition_quarantine_name(name) {
        return None;
    }
    let (partition, stamp) = name.split_once(PARTITION_QUARANTINE_INFIX)?;
    Some((partition[1..].parse().ok()?, stamp.parse().ok()?))
}

impl QuarantineStats {
    /// Sets the two gauges from these figures.
    pub fn record(&self, metrics: &NodeMetrics) {
        // Gauges are f64: above 2^53 bytes only precision is lost.
        metrics.set(QUARANTINED_COPIES, &[], self.copies as f64);
        metrics.set(QUARANTINED_BYTES, &[], self.bytes as f64);
    }
}

/// Gauge: quarantined copies on this node's disk (spec §9, Housekeeping).
/// Any value above 0 for long deserves a look: a copy the leader never
/// confirms gone stays until an operator removes it.
pub const QUARANTINED_COPIES: &str = "narad_quarantined_copies";

/// Gauge: bytes of the files of the quarantined copies.
pub const QUARANTINED_BYTES: &str = "narad_quarantined_bytes";

/// Whether `path` is a directory (it lists) rather than a file.
fn is_dir(disk: &dyn Disk, path: &Path) -> io::Result<Option<Vec<String>>> {
    match disk.list_dir(path) {
        Ok(names) => Ok(Some(names)),
        Err(error) if error.kind() == io::ErrorKind::NotADirectory => Ok(None),
        Err(error) => Err(error),
    }
}

fn too_deep(path: &Path) -> io::Error {
    io::Error::other(format!(
        "{} is nested deeper than a quarantined copy can be",
        path.display()
    ))
}

/// Bytes of the files under `dir`. A file or directory removed meanwhile
/// (a sweep running beside a scrape) counts 0.
///
/// # Errors
/// A disk error, or a tree deeper than a copy can be.
pub(crate) fn tree_bytes(disk: &dyn Disk, dir: &Path, depth: usize) -> io::Result<u64> {
    if depth > TREE_DEPTH_MAX {
        return Err(too_deep(dir));
    }
    let listed = match is_dir(disk, dir) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(0),
        listed => listed?,
    };
    let Some(names) = listed else {
        return match disk.open(dir, OpenOptions::EXISTING) {
            Ok(file) => file.size(),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(error) => Err(error),
        };
    };
    let mut bytes = 0;
    for name in names {
        bytes += tree_bytes(disk, &dir.join(name), depth + 1)?;
    }
    Ok(bytes)
}

/// Removes the quarantined copy at `copy`: every file and subdirectory,
/// then its marker, then the directory, then syncs `topics_dir`. The
/// marker goes last so a crash part way leaves a copy the next sweep still
/// recognises (and asks about again) instead of an unnamed leftover.
///
/// # Errors
/// A disk error; what is left keeps its marker.
pub(crate) fn remove_copy(disk: &dyn Disk, topics_dir: &Path, copy: &Path) -> io::Result<()> {
    remove_contents(disk, copy, 1, Some(MARKER_FILE_NAME))?;
    disk.remove_file(&copy.join(MARKER_FILE_NAME))?;
    remove_empty_dir(disk, copy)?;
    disk.sync_dir(topics_dir)
}

fn remove_contents(
    disk: &dyn Disk,
    dir: &Path,
    depth: usize,
    keep: Option<&str>,
) -> io::Result<()> {
    if depth > TREE_DEPTH_MAX {
        return Err(too_deep(dir));
    }
    for name in disk.list_dir(dir)? {
        if Some(name.as_str()) == keep {
            continue;
        }
        let path = dir.join(&name);
        if is_dir(disk, &path)?.is_some() {
            remove_contents(disk, &path, depth + 1, None)?;
            remove_empty_dir(disk, &path)?;
        } else {
            disk.remove_file(&path)?;
        }
    }
    Ok(())
}

/// Removes an empty directory. The `Disk` trait has no directory removal,
/// and every real backend serves real paths, so this goes to the file
/// system directly. The simulated disk has no directory removal either (its
/// directories are names only, and it cannot rename them, so no copy is
/// ever quarantined on it): there the empty directory stays.
pub(crate) fn remove_empty_dir(disk: &dyn Disk, path: &Path) -> io::Result<()> {
    match disk.kind() {
        BackendKind::Simulated => Ok(()),
        _ => std::fs::remove_dir(path),
    }
}
