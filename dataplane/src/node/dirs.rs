//! Where a data node keeps its files, and the checks a start makes on
//! those directories before anything opens in them.
//!
//! Two roots: `storage.data_dir` holds the partition logs, consumer state,
//! fan-out cursors and moves; the ingress WAL lives in
//! `<root>/ingress/produce`, where the root is `storage.wal_dir` when it is
//! set and `storage.data_dir` otherwise. The sub-path is the same under
//! either root, so moving an existing WAL from one to the other moves its
//! `produce` directory whole (a plain `mv` within one file system), with
//! nothing renamed inside it; and a `storage.wal_dir` equal to
//! `storage.data_dir` is the default layout.
//! The move the refusal below suggests copies, syncs, then removes: across
//! devices `mv` copies and unlinks the source with nothing synced, so a
//! power loss right after it could lose both copies. If the removal is
//! lost instead, the next start finds the old copy and refuses again.
//!
//! A start checks, in this order:
//! 1. `storage.data_dir` is created if missing, and a file can be created
//!    and removed in it;
//! 2. with `storage.wal_dir` set to another root, no WAL segment is left in
//!    `<data_dir>/ingress/produce`: a WAL there holds acknowledged records
//!    the dispatcher may not have committed yet, and opening a new, empty
//!    WAL elsewhere would strand them (lose them, as far as consumers can
//!    tell). Checked before the WAL directory is created, so a refused
//!    start leaves `storage.wal_dir` as it found it and the copy the error
//!    suggests has an empty target. A fully dispatched WAL is refused too:
//!    telling it apart means opening it, and moving it is one command;
//! 3. the WAL directory is created if missing, and a file can be created
//!    and removed in it.
//!
//! Each refusal names the setting and the path.
//!
//! What it does not detect: a WAL left under a previous `storage.wal_dir`
//! once the setting is removed or changed (nothing records where the WAL
//! was before), and a `storage.wal_dir` that reaches `storage.data_dir`
//! under another spelling (a symbolic link): paths are compared as
//! written, component by component, so such a node is refused as if its
//! WAL had been left behind, which is safe.

use std::io;
use std::path::{Path, PathBuf};

use narad_disk::{Disk, OpenOptions};
use narad_wal::segment::parse_segment_name;

/// The ingress WAL's directory under its root: `ingress/produce`.
const INGRESS_WAL_SUBDIRS: [&str; 2] = ["ingress", "produce"];

/// The file each check creates and removes to prove a directory writable.
/// Anything that lists these directories skips names it does not know, so
/// one left by a crash between the two steps is harmless and removed by
/// the next start.
const WRITE_PROBE_FILE_NAME: &str = ".write-probe";

/// The file keys of the two settings, as errors name them.
const DATA_DIR_SETTING: &str = "storage.data_dir";
const WAL_DIR_SETTING: &str = "storage.wal_dir";

/// The ingress WAL's directory under `root` (`storage.wal_dir`, or
/// `storage.data_dir` when that is unset).
pub fn ingress_wal_dir(root: &Path) -> PathBuf {
    INGRESS_WAL_SUBDIRS
        .iter()
        .fold(root.to_path_buf(), |dir, part| dir.join(part))
}

/// Why a node's directories are unusable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirError {
    /// A directory could not be created, listed or written.
    #[error("{setting}: {}: cannot {op}: {source}", path.display())]
    Unusable {
        /// The setting naming the directory's root.
        setting: &'static str,
        /// The directory.
        path: PathBuf,
        /// What failed: `create the directory`, `write a file in it`, ...
        op: &'static str,
        /// The file system's error.
        source: io::Error,
    },
    /// `storage.wal_dir` is set, and an ingress WAL is still under
    /// `storage.data_dir`.
    #[error(
        "storage.wal_dir is {}, but an ingress WAL is still in {}: a new, empty WAL would strand \
         the acknowledged records it may hold. Stop the node and move it \
         (mkdir -p {} && cp -a {} {} && sync && rm -r {}), or unset storage.wal_dir",
        wal_root.display(),
        found.display(),
        target_parent.display(),
        found.display(),
        target_parent.display(),
        found.display()
    )]
    WalLeftBehind {
        /// The `storage.wal_dir` set.
        wal_root: PathBuf,
        /// The WAL directory holding segments: `<data_dir>/ingress/produce`.
        found: PathBuf,
        /// Where it is to be moved into: `<wal_dir>/ingress`.
        target_parent: PathBuf,
    },
}

/// Runs the checks of the module doc on `data_dir` and the WAL root
/// `wal_root` (`storage.wal_dir`, `None` when unset), creating what is
/// missing, and returns the ingress WAL's directory.
///
/// # Errors
/// [`DirError`]: the first check that failed.
pub fn prepare(
    disk: &dyn Disk,
    data_dir: &Path,
    wal_root: Option<&Path>,
) -> Result<PathBuf, DirError> {
    ensure_writable(disk, data_dir, DATA_DIR_SETTING)?;
    let default_wal_dir = ingress_wal_dir(data_dir);
    let Some(wal_root) = wal_root else {
        ensure_writable(disk, &default_wal_dir, DATA_DIR_SETTING)?;
        return Ok(default_wal_dir);
    };
    let wal_dir = ingress_wal_dir(wal_root);
    if wal_dir != default_wal_dir && holds_wal_segments(disk, &default_wal_dir)? {
        return Err(DirError::WalLeftBehind {
            wal_root: wal_root.to_path_buf(),
            found: default_wal_dir,
            target_parent: wal_root.join(INGRESS_WAL_SUBDIRS[0]),
        });
    }
    ensure_writable(disk, &wal_dir, WAL_DIR_SETTING)?;
    Ok(wal_dir)
}

/// Creates `dir` if missing, then creates and removes a file in it.
fn ensure_writable(disk: &dyn Disk, dir: &Path, setting: &'static str) -> Result<(), DirError> {
    let unusable = |op, source| DirError::Unusable {
        setting,
        path: dir.to_path_buf(),
        op,
        source,
    };
    disk.create_dir_all(dir)
        .map_err(|e| unusable("create the directory", e))?;
    let probe = dir.join(WRITE_PROBE_FILE_NAME);
    let file = disk
        .open(&probe, OpenOptions::CREATE)
        .map_err(|e| unusable("create a file in it", e))?;
    drop(file);
    disk.remove_file(&probe)
        .map_err(|e| unusable("remove a file from it", e))
}

/// Whether `dir` exists and holds a WAL segment.
fn holds_wal_segments(disk: &dyn Disk, dir: &Path) -> Result<bool, DirError> {
    let unusable = |op, source| DirError::Unusable {
        setting: DATA_DIR_SETTING,
        path: dir.to_path_buf(),
        op,
        source,
    };
    if !disk
        .exists(dir)
        .map_err(|e| unusable("look for an ingress WAL", e))?
    {
        return Ok(false);
    }
    let names = disk
        .list_dir(dir)
        .map_err(|e| unusable("list the ingress WAL", e))?;
    Ok(names.iter().any(|name| parse_segment_name(name).is_some()))
}

#[cfg(test)]
#[path = "dirs_tests.rs"]
mod tests;
