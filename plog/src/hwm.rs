//! The `hwm` file: the exact high watermark, written only at close.
//!
//! Eight bytes, big-endian. An empty, missing or odd-sized file means "take
//! the boundary from the CRC-verified tail". The first commit after an open
//! empties the file (and syncs that) before anything new becomes visible,
//! so a stale value can never hide records committed after it.

use std::io;
use std::path::Path;

use narad_disk::{Disk, IoBuf, OpenOptions};

/// The file's name inside the partition directory.
pub const HWM_FILE_NAME: &str = "hwm";

/// Bytes of a written `hwm` file.
const HWM_FILE_BYTES: usize = 8;

/// The stored high watermark, or `None` when the file is missing, empty or
/// not exactly eight bytes (a write torn by a crash at close).
///
/// # Errors
/// A read error of the disk.
pub(crate) fn read(disk: &dyn Disk, dir: &Path) -> io::Result<Option<u64>> {
    let path = dir.join(HWM_FILE_NAME);
    let file = match disk.open(&path, OpenOptions::EXISTING) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    if file.size()? != HWM_FILE_BYTES as u64 {
        return Ok(None);
    }
    let bytes = file.read_at(0, HWM_FILE_BYTES).wait()?;
    Ok(bytes
        .first_chunk::<HWM_FILE_BYTES>()
        .map(|b| u64::from_be_bytes(*b)))
}

/// Empties the file and syncs that, if it exists and is not empty already.
///
/// # Errors
/// A truncate or fdatasync error of the disk.
pub(crate) fn empty(disk: &dyn Disk, dir: &Path) -> io::Result<()> {
    let path = dir.join(HWM_FILE_NAME);
    let file = match disk.open(&path, OpenOptions::EXISTING) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    if file.size()? == 0 {
        return Ok(());
    }
    file.truncate(0).wait()?;
    file.fdatasync().wait()
}

/// Writes `high_watermark` in place and syncs it (and the directory when
/// the file is new).
///
/// # Errors
/// Any error of the disk; the file may then hold fewer than eight bytes,
/// which a later open reads as "no stored value".
pub(crate) fn write(disk: &dyn Disk, dir: &Path, high_watermark: u64) -> io::Result<()> {
    let path = dir.join(HWM_FILE_NAME);
    let existed = disk.exists(&path)?;
    let file = disk.open(&path, OpenOptions::CREATE)?;
    file.write_at(0, IoBuf::from_slice(&high_watermark.to_be_bytes()))
        .wait()?;
    if file.size()? != HWM_FILE_BYTES as u64 {
        file.truncate(HWM_FILE_BYTES as u64).wait()?;
    }
    file.fdatasync().wait()?;
    if !existed {
        disk.sync_dir(dir)?;
    }
    Ok(())
}
