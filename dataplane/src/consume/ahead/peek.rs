//! A partition's stored consumer position, read without attaching it: for
//! the partition poller's lag of a partition no shard serves. Nothing is
//! created, written or synced, and no handle is kept.

use std::io;
use std::path::Path;

use narad_disk::{Disk, OpenOptions};

use super::format::{
    AHEAD_FILE_BYTES, AHEAD_FILE_NAME, OFFSET_FILE_BYTES, OFFSET_FILE_NAME, SLOT_BYTES, decode_slot,
};
use super::recovery::recover;
use crate::partitions::{LocalLogs, partition_dir};
use crate::topology::Destination;

/// The frontier an attach of `dir` would recover now (the newest valid
/// slot of `consumer.ahead`, raised to `consumer.offset`), or `None` when
/// neither file exists: nobody ever consumed the partition here, so its
/// frontier is its log's oldest offset.
///
/// # Errors
/// A read error of the disk.
pub fn stored_frontier(disk: &dyn Disk, dir: &Path) -> io::Result<Option<u64>> {
    let Some(ahead) = read_whole(disk, &dir.join(AHEAD_FILE_NAME), AHEAD_FILE_BYTES)? else {
        let offset = read_whole(disk, &dir.join(OFFSET_FILE_NAME), OFFSET_FILE_BYTES)?;
        return Ok(offset.map(|bytes| offset_frontier(&bytes).unwrap_or(0)));
    };
    let slots = [0, 1].map(|slot| {
        let start = (slot * SLOT_BYTES).min(ahead.len());
        let end = ((slot + 1) * SLOT_BYTES).min(ahead.len());
        decode_slot(&ahead[start..end])
    });
    let offset = read_whole(disk, &dir.join(OFFSET_FILE_NAME), OFFSET_FILE_BYTES)?;
    let recovered = recover(&slots, offset.as_deref().and_then(offset_frontier));
    Ok(Some(recovered.position.frontier))
}

/// The frontier of `destination` under `logs`' data directory as its
/// consumer-state files hold it ([`stored_frontier`]), 0 when none was
/// written; `None` when they cannot be read.
pub fn stored_frontier_of(logs: &LocalLogs, destination: &Destination) -> Option<u64> {
    let dir = partition_dir(logs.data_dir(), &destination.topic, destination.partition);
    let stored = stored_frontier(&**logs.disk(), &dir).ok()?;
    Some(stored.unwrap_or(0))
}

/// The frontier `consumer.offset`'s bytes hold, if they are whole.
fn offset_frontier(bytes: &[u8]) -> Option<u64> {
    <[u8; OFFSET_FILE_BYTES]>::try_from(bytes)
        .ok()
        .map(u64::from_be_bytes)
}

/// Up to `bytes_max` bytes from the start of `path`, or `None` when it
/// does not exist.
fn read_whole(disk: &dyn Disk, path: &Path, bytes_max: usize) -> io::Result<Option<Vec<u8>>> {
    let file = match disk.open(path, OpenOptions::EXISTING) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let size = usize::try_from(file.size()?).unwrap_or(usize::MAX);
    let bytes = file.read_at(0, size.min(bytes_max)).wait()?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use narad_disk::IoBuf;
    use narad_disk::sim::SimDisk;

    use super::*;
    use crate::consume::ahead::{ConsumerPosition, encode_slot};

    fn write(disk: &dyn Disk, path: &Path, bytes: &[u8]) {
        let file = disk.open(path, OpenOptions::CREATE).expect("open");
        file.write_at(0, IoBuf::from_slice(bytes))
            .wait()
            .expect("write");
    }

    #[test]
    fn no_files_is_no_stored_frontier() {
        let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(1));
        disk.create_dir_all(Path::new("/p")).expect("dir");
        assert_eq!(
            stored_frontier(&*disk, Path::new("/p")).expect("read"),
            None
        );
    }

    #[test]
    fn the_newest_slot_raised_to_the_offset_file_wins() {
        let disk: Arc<dyn Disk> = Arc::new(SimDisk::new(2));
        let dir = Path::new("/p");
        disk.create_dir_all(dir).expect("dir");
        let (old, _) = encode_slot(1, &ConsumerPosition::at(4));
        let (new, _) = encode_slot(2, &ConsumerPosition::at(7));
        let mut ahead = old.to_vec();
        ahead.extend_from_slice(&new[..]);
        write(&*disk, &dir.join(AHEAD_FILE_NAME), &ahead);
        assert_eq!(stored_frontier(&*disk, dir).expect("read"), Some(7));
        write(&*disk, &dir.join(OFFSET_FILE_NAME), &9u64.to_be_bytes());
        assert_eq!(stored_frontier(&*disk, dir).expect("read"), Some(9));
    }
}
