//! Notes: the small text files a partition directory carries beside its
//! log, each a few lines written whole and synced before anyone relies on
//! it (the handoff fence of [`super::freeze`], the `move.marker` of a
//! moved copy).
//!
//! A note is replaced, never rewritten in place, so a shorter note never
//! keeps the tail of a longer one. Reading takes at most
//! [`NOTE_BYTES_MAX`] bytes: a note is never longer, and a damaged file
//! must not make a reader load an unbounded one.

use std::io;
use std::path::Path;

use narad_disk::{Disk, IoBuf, OpenOptions};

/// The most bytes of a note that are read; every note is far shorter.
pub const NOTE_BYTES_MAX: usize = 4096;

/// Writes `text` as the note `name` in `dir`, replacing any older one, and
/// syncs the file and the directory: once this returns the note is
/// durable.
///
/// # Errors
/// Any disk error; the note may then be absent or old, and must not be
/// relied on.
pub fn write_note(disk: &dyn Disk, dir: &Path, name: &str, text: &str) -> io::Result<()> {
    assert!(
        text.len() <= NOTE_BYTES_MAX,
        "a note of {} bytes would be cut short when read",
        text.len()
    );
    let path = dir.join(name);
    if disk.exists(&path)? {
        disk.remove_file(&path)?;
    }
    let file = disk.open(&path, OpenOptions::CREATE)?;
    file.write_and_sync(0, IoBuf::from_slice(text.as_bytes()))
        .wait()?;
    disk.sync_dir(dir)
}

/// Reads the note `name` in `dir`: `None` if there is none. Bytes that are
/// not UTF-8 are replaced, so a damaged note reads as text that does not
/// parse rather than as an error.
///
/// # Errors
/// Any disk error other than the file being absent.
pub fn read_note(disk: &dyn Disk, dir: &Path, name: &str) -> io::Result<Option<String>> {
    let path = dir.join(name);
    if !disk.exists(&path)? {
        return Ok(None);
    }
    let file = disk.open(&path, OpenOptions::EXISTING)?;
    let size = usize::try_from(file.size()?)
        .unwrap_or(usize::MAX)
        .min(NOTE_BYTES_MAX);
    let bytes = file.read_at(0, size).wait()?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// Removes the note `name` in `dir`, if any, and syncs the directory.
///
/// # Errors
/// Any disk error other than the file being absent.
pub fn remove_note(disk: &dyn Disk, dir: &Path, name: &str) -> io::Result<()> {
    let path = dir.join(name);
    if disk.exists(&path)? {
        disk.remove_file(&path)?;
        disk.sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use narad_disk::portable::PortableDisk;

    use super::*;

    #[test]
    fn a_shorter_note_replaces_a_longer_one_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = PortableDisk::new(1).expect("portable disk");
        write_note(&disk, dir.path(), "n", "a long first note\n").expect("write");
        write_note(&disk, dir.path(), "n", "short\n").expect("rewrite");
        let read = read_note(&disk, dir.path(), "n").expect("read");
        assert_eq!(read.as_deref(), Some("short\n"));
    }

    #[test]
    fn an_absent_note_reads_as_none_and_removes_quietly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = PortableDisk::new(1).expect("portable disk");
        assert_eq!(read_note(&disk, dir.path(), "n").expect("read"), None);
        remove_note(&disk, dir.path(), "n").expect("remove nothing");
        write_note(&disk, dir.path(), "n", "x\n").expect("write");
        remove_note(&disk, dir.path(), "n").expect("remove");
        assert_eq!(read_note(&disk, dir.path(), "n").expect("read"), None);
    }

    #[test]
    fn an_oversized_file_is_read_only_up_to_the_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("n"), vec![b'x'; NOTE_BYTES_MAX * 2]).expect("write");
        let read = read_note(
            &PortableDisk::new(1).expect("portable disk"),
            dir.path(),
            "n",
        )
        .expect("read");
        assert_eq!(read.map(|text| text.len()), Some(NOTE_BYTES_MAX));
    }
}
