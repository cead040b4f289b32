//! Attaching a partition: reading both files (no writes) and the priming
//! writeout that makes the recovered position durable in the window slot.

use std::io;
use std::path::Path;

use narad_disk::{IoBuf, OpenOptions};
use tracing::{debug, warn};

use super::writeout::{finish_writeout, latch, warn_truncation};
use super::{ConsumerStateStore, Loaded, Partition};
use crate::consume::ahead::error::StateError;
use crate::consume::ahead::format::{
    AHEAD_FILE_BYTES, AHEAD_FILE_NAME, OFFSET_FILE_BYTES, OFFSET_FILE_NAME, SLOT_BYTES,
    decode_slot, encode_slot,
};
use crate::consume::ahead::position::OFFSET_LIMIT;
use crate::consume::ahead::recovery::recover;

impl ConsumerStateStore {
    /// Opens and reads both files; no writes.
    pub(super) fn load(&self, dir: &Path) -> Result<Loaded, StateError> {
        let io_error = |op| {
            move |source| StateError::Io {
                dir: dir.to_path_buf(),
                op,
                source,
            }
        };
        let ahead_path = dir.join(AHEAD_FILE_NAME);
        let ahead_created = !self
            .disk
            .exists(&ahead_path)
            .map_err(io_error("checking consumer.ahead"))?;
        let file = self
            .disk
            .open(&ahead_path, OpenOptions::CREATE)
            .map_err(io_error("opening consumer.ahead"))?;
        let ahead_size = file.size().map_err(io_error("sizing consumer.ahead"))?;
        let bytes = file
            .read_at(0, AHEAD_FILE_BYTES)
            .wait()
            .map_err(io_error("reading consumer.ahead"))?;
        let slots = [0, 1].map(|slot| {
            let start = (slot * SLOT_BYTES).min(bytes.len());
            let end = ((slot + 1) * SLOT_BYTES).min(bytes.len());
            decode_slot(&bytes[start..end])
        });
        for (index, slot) in slots.iter().enumerate() {
            if let Err(reason) = slot
                && !ahead_created
            {
                debug!(dir = %dir.display(), slot = index, %reason, "consumer.ahead slot not valid");
            }
        }
        let offset_frontier = self
            .read_offset_file(dir)
            .map_err(io_error("reading consumer.offset"))?;
        Ok(Loaded {
            file,
            ahead_created,
            ahead_size,
            offset_frontier,
            recovered: recover(&slots, offset_frontier),
        })
    }

    /// `consumer.offset`'s frontier; None when the file is missing, short,
    /// or holds a value no offset can have (at or past 2^63).
    pub(super) fn read_offset_file(&self, dir: &Path) -> io::Result<Option<u64>> {
        let path = dir.join(OFFSET_FILE_NAME);
        let file = match self.disk.open(&path, OpenOptions::EXISTING) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error),
        };
        let bytes = file.read_at(0, OFFSET_FILE_BYTES).wait()?;
        let frontier = <[u8; OFFSET_FILE_BYTES]>::try_from(bytes.as_slice())
            .ok()
            .map(u64::from_be_bytes);
        if frontier.is_none_or(|frontier| frontier >= OFFSET_LIMIT) {
            warn!(path = %path.display(), bytes = bytes.len(), "consumer.offset is short or out of range; ignored");
            return Ok(None);
        }
        Ok(frontier)
    }

    /// The priming writeout: extend to 8 KiB, write the recovered position
    /// into the slot not holding the newest record, fdatasync, flip; create
    /// `consumer.offset` if missing; sync the directory if a file is new.
    pub(super) fn prime(&self, dir: &Path, partition: &mut Partition, loaded: &Loaded) {
        let result = (|| {
            if loaded.ahead_size < AHEAD_FILE_BYTES as u64 {
                loaded.file.truncate(AHEAD_FILE_BYTES as u64).wait()?;
            }
            let (bytes, truncated) =
                encode_slot(partition.anchor_generation + 1, &partition.written);
            let at = (partition.window_slot() * SLOT_BYTES) as u64;
            loaded
                .file
                .write_and_sync(at, IoBuf::from_slice(&bytes[..]))
                .wait()?;
            warn_truncation(dir, partition, truncated);
            partition.unsynced = true;
            finish_writeout(dir, partition, Ok(()));
            let offset_created = !self.disk.exists(&dir.join(OFFSET_FILE_NAME))?;
            if offset_created {
                let frontier = partition.written.frontier;
                self.disk
                    .open(&dir.join(OFFSET_FILE_NAME), OpenOptions::CREATE)?
                    .write_and_sync(0, IoBuf::from_slice(&frontier.to_be_bytes()))
                    .wait()?;
                partition.offset_frontier = frontier;
            }
            if loaded.ahead_created || offset_created {
                self.disk.sync_dir(dir)?;
            }
            io::Result::Ok(())
        })();
        if let Err(error) = result {
            latch(dir, partition, "priming", &error);
        }
    }
}

pub(super) fn log_recovery(dir: &Path, loaded: &Loaded) {
    if loaded.recovered.newest_slot.is_none() && loaded.ahead_size > 0 {
        warn!(
            dir = %dir.display(),
            frontier = loaded.recovered.position.frontier,
            "consumer.ahead holds no valid slot; recovering the frontier from consumer.offset alone, or 0 (messages above it are redelivered)"
        );
    }
}
