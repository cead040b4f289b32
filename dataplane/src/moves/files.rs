//! The files a move copies and writes: which names may travel, where the
//! target stages its copy (`<data>/.moves/<topic>-<N>`), chunked copies, the
//! consumer state the target writes from the handoff, `move.marker`, which
//! says a copy is whole, and what becomes of a directory in the way of an
//! install.

use std::io;
use std::path::{Path, PathBuf};

use narad_disk::{Disk, IO_ALIGN, IoBuf, OpenOptions};
use narad_plog::segment::parse_segment_file_name;

use crate::consume::ahead::{
    AHEAD_FILE_BYTES, AHEAD_FILE_NAME, ConsumerPosition, OFFSET_FILE_NAME, SLOT_BYTES, encode_slot,
};
use crate::partitions::incarnation::{partition_quarantine_name, remove_empty_dir};
use crate::partitions::note;

/// Written into the staged copy by the target once it is whole, verified
/// and fenced, before the copy is installed as the partition directory and
/// the flip proposed. Its presence says the copy may become the partition
/// (see `worker.rs`), and that it never served here.
pub const MOVE_MARKER_FILE_NAME: &str = "move.marker";

/// What releases before staging wrote into a partition directory they
/// copied into in place, before copying anything. Nothing writes it now;
/// it is still read (a directory holding it never served here, so nothing
/// in it is only here) and removed, for a node upgraded mid-move.
pub const INCOMING_FILE_NAME: &str = "move.incoming";

/// The directory under `<data>` where a move's target stages its copies,
/// one directory per partition. Outside `<data>/topics`, so no listing of
/// topics or partitions ever sees a staged copy, and on the same file
/// system, so the install is one `rename(2)`.
pub const STAGING_DIR_NAME: &str = ".moves";

// A staged copy's name (a new topic name, `-`, at most 10 digits) fits the
// usual 255-byte limit on a file name.
const _: () = assert!(narad_meta::limits::TOPIC_NAME_BYTES_MAX + 1 + 10 <= 255);

/// `<data>/.moves`.
pub fn staging_root(data_dir: &Path) -> PathBuf {
    data_dir.join(STAGING_DIR_NAME)
}

/// The staged copy of `topic`'s partition `partition`:
/// `<data>/.moves/<topic>-<N>`, see [`staging_name`].
pub fn staging_dir(data_dir: &Path, topic: &str, partition: u32) -> PathBuf {
    staging_root(data_dir).join(staging_name(topic, partition))
}

/// `<topic>-<N>`, the partition index zero-padded to 5 digits as in the
/// partition directory's `p<N>`. Topic names may hold `-`, but the index is
/// always the part after the *last* `-`, all digits, in this one spelling,
/// so two (topic, partition) pairs never share a name
/// ([`parse_staging_name`] reverses it).
pub fn staging_name(topic: &str, partition: u32) -> String {
    format!("{topic}-{partition:05}")
}

/// The topic and partition a staged copy's directory name stands for;
/// `None` for a name [`staging_name`] does not make.
pub fn parse_staging_name(name: &str) -> Option<(&str, u32)> {
    let (topic, digits) = name.rsplit_once('-')?;
    if !crate::partitions::incarnation::is_topic_dir_name(topic)
        || !digits.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let partition: u32 = digits.parse().ok()?;
    (staging_name(topic, partition) == name).then_some((topic, partition))
}

/// Makes `staged` an empty, durable directory for a copy starting over:
/// creates `<data>/.moves` and `staged` if needed (each new entry synced
/// into its parent) and removes every file in it.
///
/// # Errors
/// Any disk error.
pub fn reset_staging(disk: &dyn Disk, staged: &Path) -> io::Result<()> {
    let (root, data_dir) = staging_parents(staged)?;
    let root_existed = disk.exists(root)?;
    let staged_existed = disk.exists(staged)?;
    disk.create_dir_all(staged)?;
    if !root_existed {
        disk.sync_dir(data_dir)?;
    }
    if !staged_existed {
        disk.sync_dir(root)?;
    }
    clear_dir(disk, staged, &[])
}

/// Removes the staged copy `staged`: its files, then the directory, then
/// syncs `<data>/.moves`. Nothing in a staged copy ever served, so nothing
/// in it is only here. Absent already: nothing to do.
///
/// # Errors
/// Any disk error; what is left is a staged copy still, which the worker
/// or the runner's sweep removes later.
pub fn remove_staging(disk: &dyn Disk, staged: &Path) -> io::Result<()> {
    let (root, _) = staging_parents(staged)?;
    if !disk.exists(staged)? {
        return Ok(());
    }
    clear_dir(disk, staged, &[])?;
    remove_empty_dir(disk, staged)?;
    disk.sync_dir(root)
}

fn staging_parents(staged: &Path) -> io::Result<(&Path, &Path)> {
    match staged
        .parent()
        .and_then(|root| Some((root, root.parent()?)))
    {
        Some((root, data_dir))
            if root
                .file_name()
                .is_some_and(|name| name == STAGING_DIR_NAME) =>
        {
            Ok((root, data_dir))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a staged copy", staged.display()),
        )),
    }
}

/// Clears the way for a copy to be installed at the partition directory
/// `dir` of a partition this node does not own. Absent: nothing to do. A
/// directory nothing in which is only here ([`left_copy`] says `Remove`: a
/// copy of an earlier move that never served, a copy this node handed off
/// under a fence, or no record at all) is removed. Anything else served
/// here and may hold records no other copy has: it is renamed aside to its
/// quarantine name, never removed.
///
/// # Errors
/// Any disk error; the directory is then under one of its names, whole or
/// partly cleared of files nothing needs.
pub fn vacate_partition_dir(disk: &dyn Disk, dir: &Path, now_ms: u64) -> io::Result<()> {
    if !disk.exists(dir)? {
        return Ok(());
    }
    match left_copy(disk, dir)? {
        LeftCopy::Remove => {
            clear_dir(disk, dir, &[])?;
            remove_empty_dir(disk, dir)
        }
        LeftCopy::Quarantine => {
            let quarantined = quarantine(disk, dir, now_ms)?;
            tracing::warn!(path = %quarantined.display(),
                "a partition directory that served here was in the way of a move's install; quarantined");
            Ok(())
        }
    }
}

/// Fan-out cursor files travel with their parent partition.
const CURSOR_PREFIX: &str = "fanout-";
const CURSOR_SUFFIX: &str = ".offset";

/// Whether `name` is a file a move copies: a segment file or a fan-out
/// cursor file. Nothing else is served, so a caller cannot read other
/// files of the data directory through a transfer.
pub fn is_transferable(name: &str) -> bool {
    is_segment(name) || is_cursor(name)
}

/// Whether `name` is a segment file.
pub fn is_segment(name: &str) -> bool {
    parse_segment_file_name(name).is_some()
}

fn is_cursor(name: &str) -> bool {
    name.strip_prefix(CURSOR_PREFIX)
        .and_then(|rest| rest.strip_suffix(CURSOR_SUFFIX))
        .is_some_and(|child| {
            !child.is_empty()
                && child
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                && child != "."
                && child != ".."
        })
}

/// The fan-out cursor files in `dir` and their sizes.
///
/// # Errors
/// Any disk error.
pub fn cursor_files(disk: &dyn Disk, dir: &Path) -> io::Result<Vec<(String, u64)>> {
    let mut files = Vec::new();
    for name in disk.list_dir(dir)? {
        if is_cursor(&name) {
            let size = disk.open(&dir.join(&name), OpenOptions::EXISTING)?.size()?;
            files.push((name, size));
        }
    }
    Ok(files)
}

/// Reads up to `max` bytes of `dir/name` from `offset`, never past
/// `limit` (the bytes the listing promised; `None`: the file's size).
///
/// # Errors
/// `InvalidInput` for a name that does not travel; any disk error.
pub fn read_chunk(
    disk: &dyn Disk,
    dir: &Path,
    name: &str,
    offset: u64,
    max: u32,
    limit: Option<u64>,
) -> io::Result<Vec<u8>> {
    if !is_transferable(name) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a file a move copies"),
        ));
    }
    let file = disk.open(&dir.join(name), OpenOptions::EXISTING)?;
    let end = limit.unwrap_or(file.size()?).min(file.size()?);
    let len = end.saturating_sub(offset).min(u64::from(max));
    if len == 0 {
        return Ok(Vec::new());
    }
    file.read_at(offset, usize::try_from(len).unwrap_or(usize::MAX))
        .wait()
}

/// Removes every file in `dir` but `keep` (a copy starting over). The
/// directory itself stays.
///
/// # Errors
/// Any disk error.
pub fn clear_dir(disk: &dyn Disk, dir: &Path, keep: &[&str]) -> io::Result<()> {
    if !disk.exists(dir)? {
        return Ok(());
    }
    for name in disk.list_dir(dir)? {
        if !keep.contains(&name.as_str()) {
            disk.remove_file(&dir.join(&name))?;
        }
    }
    disk.sync_dir(dir)
}

/// Writes `data` into `dir/name` at `offset` (creating the file) and
/// syncs it before returning.
///
/// A chunk is synced at once, not when the copy ends, so that a copy never
/// leaves a gigabyte of dirty pages behind: their writeback, all at the end,
/// would queue every WAL flush on the node behind it for seconds. Synced a
/// chunk at a time, the disk interleaves the two.
///
/// A chunk whose offset and length are multiples of [`IO_ALIGN`] (every
/// whole 4 MiB chunk) goes past the page cache (`O_DIRECT` with
/// `RWF_DSYNC`): copying it into cached pages cost the target more CPU
/// than anything else in a move, and nothing reads a copy before the flip.
/// A file system that refuses `O_DIRECT` takes it buffered.
///
/// # Errors
/// Any disk error.
pub fn write_chunk(
    disk: &dyn Disk,
    dir: &Path,
    name: &str,
    offset: u64,
    data: &[u8],
) -> io::Result<()> {
    let path = dir.join(name);
    let aligned = !data.is_empty()
        && offset.is_multiple_of(IO_ALIGN as u64)
        && data.len().is_multiple_of(IO_ALIGN);
    let direct = OpenOptions {
        direct_io: true,
        ..OpenOptions::CREATE
    };
    let file = match aligned.then(|| disk.open(&path, direct)) {
        Some(Ok(file)) => file,
        Some(Err(error)) if error.kind() != io::ErrorKind::InvalidInput => return Err(error),
        _ => disk.open(&path, OpenOptions::CREATE)?,
    };
    file.write_and_sync_now(offset, IoBuf::from_slice(data))?;
    Ok(())
}

/// Writes the consumer state files for `position`: `consumer.ahead` with
/// the position in its first slot (generation 1; the second slot is zeros,
/// which recovery refuses and passes over) and `consumer.offset` with the
/// frontier, then syncs both. A slot that cannot hold the whole set keeps
/// its lowest offsets (the rest are delivered again: never a loss).
///
/// # Errors
/// Any disk error.
pub fn write_consumer_state(
    disk: &dyn Disk,
    dir: &Path,
    position: &ConsumerPosition,
) -> io::Result<()> {
    let (slot, _truncated) = encode_slot(1, position);
    let mut ahead = IoBuf::with_capacity(AHEAD_FILE_BYTES);
    ahead.extend_from_slice(&slot[..]);
    ahead.extend_zeros(AHEAD_FILE_BYTES - SLOT_BYTES);
    let file = disk.open(&dir.join(AHEAD_FILE_NAME), OpenOptions::CREATE)?;
    file.write_and_sync(0, ahead).wait()?;
    let file = disk.open(&dir.join(OFFSET_FILE_NAME), OpenOptions::CREATE)?;
    file.write_and_sync(0, IoBuf::from_slice(&position.frontier.to_be_bytes()))
        .wait()?;
    Ok(())
}

/// Removes `move.marker` and `move.incoming` from `dir` (this node owns
/// the partition now), then syncs the directory.
///
/// # Errors
/// Any disk error.
pub fn remove_move_files(disk: &dyn Disk, dir: &Path) -> io::Result<()> {
    let mut removed = false;
    for name in [MOVE_MARKER_FILE_NAME, INCOMING_FILE_NAME] {
        let path = dir.join(name);
        if disk.exists(&path)? {
            disk.remove_file(&path)?;
            removed = true;
        }
    }
    if removed {
        disk.sync_dir(dir)?;
    }
    Ok(())
}

/// Whether `dir` holds a move's bookkeeping (`move.marker`, or an older
/// release's `move.incoming`).
///
/// # Errors
/// Any disk error.
pub fn has_move_files(disk: &dyn Disk, dir: &Path) -> io::Result<bool> {
    Ok(disk.exists(&dir.join(MOVE_MARKER_FILE_NAME))?
        || disk.exists(&dir.join(INCOMING_FILE_NAME))?)
}

/// What becomes of a partition directory this node neither owns nor
/// receives, once the leader confirmed that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeftCopy {
    /// Nothing in it is only here: a copy installed by a move that did not
    /// flip (`move.marker`, or an older release's in-place copy with
    /// `move.incoming`), a source's copy handed off whole (its
    /// `handoff.fence` froze it at the high watermark the new owner
    /// installed), or no record at all.
    Remove,
    /// It served here and was not handed off (its new owner was
    /// force-promoted): it may hold records the new owner lacks, so it is
    /// kept under a quarantine name for an operator.
    Quarantine,
}

/// Decides what becomes of `dir` (see [`LeftCopy`]).
///
/// # Errors
/// Any disk error.
pub fn left_copy(disk: &dyn Disk, dir: &Path) -> io::Result<LeftCopy> {
    if has_move_files(disk, dir)?
        || disk.exists(&dir.join(crate::partitions::freeze::FENCE_FILE_NAME))?
        || !holds_records(disk, dir)?
    {
        return Ok(LeftCopy::Remove);
    }
    Ok(LeftCopy::Quarantine)
}

/// Whether a segment file in `dir` holds any bytes.
///
/// # Errors
/// Any disk error.
pub fn holds_records(disk: &dyn Disk, dir: &Path) -> io::Result<bool> {
    for name in disk.list_dir(dir)? {
        if is_segment(&name) && disk.open(&dir.join(&name), OpenOptions::EXISTING)?.size()? > 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Renames `dir` to its quarantine name (`p<N>.quarantine-<now_ms>`) and
/// syncs the topic directory. Returns the new path.
///
/// # Errors
/// Any disk error; the directory is then under one of its two names.
pub fn quarantine(disk: &dyn Disk, dir: &Path, now_ms: u64) -> io::Result<std::path::PathBuf> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str()))
    else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a partition directory", dir.display()),
        ));
    };
    let to = parent.join(partition_quarantine_name(name, now_ms));
    disk.rename(dir, &to)?;
    disk.sync_dir(parent)?;
    Ok(to)
}

/// What `move.marker` records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveMarker {
    /// The owner the copy was taken from.
    pub source: String,
    /// The topic incarnation copied (empty for a topic without one).
    pub incarnation: String,
    /// The high watermark the copy holds.
    pub high_watermark: u64,
    /// The token of the fence the source granted for this copy; 0 for a
    /// force-promoted copy, which no source fenced.
    pub token: u64,
    /// The target's replica index when it wrote the marker: a replica that
    /// has not applied this far may not show the move yet.
    pub applied_index: u64,
}

/// Writes `move.marker` and syncs it and the directory.
///
/// # Errors
/// Any disk error.
pub fn write_marker(disk: &dyn Disk, dir: &Path, marker: &MoveMarker) -> io::Result<()> {
    let text = format!(
        "source {}\nincarnation {}\nhigh_watermark {}\ntoken {}\napplied_index {}\n",
        marker.source,
        marker.incarnation,
        marker.high_watermark,
        marker.token,
        marker.applied_index
    );
    note::write_note(disk, dir, MOVE_MARKER_FILE_NAME, &text)
}

impl MoveMarker {
    /// Whether the copy is force-promoted (no source fenced it).
    pub fn forced(&self) -> bool {
        self.token == 0
    }
}

/// Reads `move.marker` in `dir`, if there is one that parses.
///
/// # Errors
/// Any disk error other than the file being absent.
pub fn read_marker(disk: &dyn Disk, dir: &Path) -> io::Result<Option<MoveMarker>> {
    let Some(text) = note::read_note(disk, dir, MOVE_MARKER_FILE_NAME)? else {
        return Ok(None);
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .map(str::to_owned)
    };
    let number = |name: &str| field(name).and_then(|value| value.parse::<u64>().ok());
    Ok(
        match (
            field("source"),
            field("incarnation"),
            number("high_watermark"),
            number("token"),
            number("applied_index"),
        ) {
            (
                Some(source),
                Some(incarnation),
                Some(high_watermark),
                Some(token),
                Some(applied_index),
            ) => Some(MoveMarker {
                source,
                incarnation,
                high_watermark,
                token,
                applied_index,
            }),
            _ => None,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use narad_disk::portable::PortableDisk;

    #[test]
    fn only_segments_and_cursor_files_travel() {
        assert!(is_transferable("00000000000000000000.log"));
        assert!(is_transferable("fanout-audit.offset"));
        for name in [
            "hwm",
            "consumer.offset",
            "consumer.ahead",
            "move.marker",
            "handoff.fence",
            "../incarnation",
            "fanout-.offset",
            "fanout-../x.offset",
            "fanout-a/b.offset",
            "00000000000000000000.log.tmp",
        ] {
            assert!(!is_transferable(name), "{name} must not travel");
        }
    }

    #[test]
    fn a_chunk_stops_at_the_listed_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let disk = PortableDisk::new(1).unwrap();
        let name = "00000000000000000000.log";
        write_chunk(&disk, dir.path(), name, 0, b"0123456789").unwrap();
        assert_eq!(
            read_chunk(&disk, dir.path(), name, 2, 100, Some(6)).unwrap(),
            b"2345"
        );
        assert_eq!(
            read_chunk(&disk, dir.path(), name, 8, 100, None).unwrap(),
            b"89"
        );
        assert!(read_chunk(&disk, dir.path(), "hwm", 0, 1, None).is_err());
    }

    #[test]
    fn a_written_chunk_survives_a_power_loss_aligned_or_not() {
        let disk = narad_disk::sim::SimDisk::new(7);
        let dir = Path::new("/p");
        disk.create_dir_all(dir).unwrap();
        let name = "00000000000000000000.log";
        let whole: Vec<u8> = (0..3 * IO_ALIGN + 100).map(|i| (i % 251) as u8).collect();
        // Two page-aligned chunks (the direct path), then an unaligned tail.
        write_chunk(&disk, dir, name, 0, &whole[..IO_ALIGN]).unwrap();
        write_chunk(
            &disk,
            dir,
            name,
            IO_ALIGN as u64,
            &whole[IO_ALIGN..3 * IO_ALIGN],
        )
        .unwrap();
        write_chunk(
            &disk,
            dir,
            name,
            3 * IO_ALIGN as u64,
            &whole[3 * IO_ALIGN..],
        )
        .unwrap();
        disk.sync_dir(dir).unwrap();
        disk.crash(narad_disk::sim::Tear::LastWrite);
        assert_eq!(disk.read_file(&dir.join(name)).unwrap(), whole);
    }

    #[test]
    fn staging_names_round_trip_and_never_collide_for_topics_with_dashes() {
        let pairs = [
            ("orders", 0),
            ("a-1", 2),
            ("a", 12),
            ("a-00001", 2),
            ("a-00001-00002", 3),
            ("x", 123_456),
        ];
        let names: Vec<String> = pairs
            .iter()
            .map(|(topic, partition)| staging_name(topic, *partition))
            .collect();
        for ((topic, partition), name) in pairs.iter().zip(&names) {
            assert_eq!(
                parse_staging_name(name),
                Some((*topic, *partition)),
                "{name}"
            );
        }
        let mut distinct = names.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        for name in [
            "orders",
            "orders-1",
            "orders-000001",
            "-00001",
            "..-00001",
            "a/b-00001",
        ] {
            assert_eq!(parse_staging_name(name), None, "{name}");
        }
    }

    fn marker() -> MoveMarker {
        MoveMarker {
            source: "1".into(),
            incarnation: "0123456789abcdef".into(),
            high_watermark: 5,
            token: 9,
            applied_index: 77,
        }
    }

    #[test]
    fn a_directory_in_the_way_of_an_install_is_removed_only_if_nothing_in_it_is_only_here() {
        let data = tempfile::tempdir().unwrap();
        let disk = PortableDisk::new(1).unwrap();
        let topic = data.path().join("topics").join("orders");
        let segment = "00000000000000000000.log";
        // Never served: a copy installed for a flip that did not commit.
        let installed = topic.join("p00000");
        disk.create_dir_all(&installed).unwrap();
        write_chunk(&disk, &installed, segment, 0, b"records").unwrap();
        write_marker(&disk, &installed, &marker()).unwrap();
        vacate_partition_dir(&disk, &installed, 1).unwrap();
        assert!(!installed.exists());
        // Served here, never handed off: kept aside with its records.
        let served = topic.join("p00001");
        disk.create_dir_all(&served).unwrap();
        write_chunk(&disk, &served, segment, 0, b"records").unwrap();
        vacate_partition_dir(&disk, &served, 42).unwrap();
        assert!(!served.exists());
        let kept = topic.join("p00001.quarantine-42");
        assert_eq!(std::fs::read(kept.join(segment)).unwrap(), b"records");
        // Absent: nothing to do.
        vacate_partition_dir(&disk, &topic.join("p00002"), 1).unwrap();
    }

    #[test]
    fn a_staged_copy_is_reset_and_removed_whole() {
        let data = tempfile::tempdir().unwrap();
        let disk = PortableDisk::new(1).unwrap();
        let staged = staging_dir(data.path(), "orders", 3);
        reset_staging(&disk, &staged).unwrap();
        write_chunk(&disk, &staged, "00000000000000000000.log", 0, b"x").unwrap();
        write_marker(&disk, &staged, &marker()).unwrap();
        reset_staging(&disk, &staged).unwrap();
        assert!(disk.list_dir(&staged).unwrap().is_empty());
        write_chunk(&disk, &staged, "00000000000000000000.log", 0, b"x").unwrap();
        remove_staging(&disk, &staged).unwrap();
        assert!(!staged.exists());
        assert!(staging_root(data.path()).exists());
        // Only a directory under `.moves` is removed as a staged copy.
        assert!(remove_staging(&disk, &data.path().join("topics").join("orders-00003")).is_err());
    }

    #[test]
    fn the_marker_round_trips_and_a_damaged_one_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let disk = PortableDisk::new(1).unwrap();
        assert_eq!(read_marker(&disk, dir.path()).unwrap(), None);
        let marker = MoveMarker {
            source: "1".into(),
            incarnation: "0123456789abcdef".into(),
            high_watermark: 500,
            token: 9,
            applied_index: 77,
        };
        write_marker(&disk, dir.path(), &marker).unwrap();
        assert_eq!(read_marker(&disk, dir.path()).unwrap(), Some(marker));
        std::fs::write(dir.path().join(MOVE_MARKER_FILE_NAME), "source 1\n").unwrap();
        assert_eq!(read_marker(&disk, dir.path()).unwrap(), None);
    }
}
