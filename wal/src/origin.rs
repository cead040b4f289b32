//! The WAL's origin ids: which sequence space a record's number belongs to.
//!
//! A partition remembers the records it stores by (origin id, sequence), so
//! that a record the dispatcher sends twice is stored once. That is safe
//! only while a pair names one record forever. Two things would break it:
//! a WAL made anew (its numbers start again), and a recovery that cuts the
//! tail (the numbers of the records cut are handed out again). So the log
//! keeps a list of epochs, each `(first sequence, random 16-byte id)`: a
//! new WAL starts one at its first sequence, and every open whose recovery
//! cut bytes starts one at the next sequence. A record's origin id is the
//! id of the last epoch starting at or below its sequence.
//!
//! ```text
//! <wal dir>/origin      (replaced whole: origin.tmp, fdatasync, rename, dir sync)
//!   [4]  magic "NWOR"
//!   u8   version 1
//!   u32  epoch count, 1 ..= ORIGIN_EPOCHS_MAX
//!   per epoch: u64 first sequence (strictly increasing), [16] id
//!   u32  CRC-32C of every byte before it
//! ```
//!
//! All integers big-endian. A file that fails its checks is refused at
//! open: guessing could pair a number with the wrong id.

use std::path::Path;

use narad_disk::{Disk, IoBuf, OpenOptions};

use crate::error::WalError;

/// Bytes of an origin id.
pub const ORIGIN_ID_BYTES: usize = 16;

/// The name of the origin file in the WAL directory.
pub const ORIGIN_FILE_NAME: &str = "origin";

const ORIGIN_TMP_FILE_NAME: &str = "origin.tmp";
const MAGIC: &[u8; 4] = b"NWOR";
const VERSION: u8 = 1;
const EPOCH_BYTES: usize = 8 + ORIGIN_ID_BYTES;
const HEADER_BYTES: usize = 4 + 1 + 4;

/// Most epochs kept; the oldest go first. Each costs one open whose
/// recovery cut a torn tail, and only epochs covering records still in the
/// log matter.
pub const ORIGIN_EPOCHS_MAX: usize = 64;

/// The largest origin file: header, [`ORIGIN_EPOCHS_MAX`] epochs, checksum.
/// A larger file is refused before it is read, whatever size it claims.
const ORIGIN_FILE_BYTES_MAX: u64 = (HEADER_BYTES + ORIGIN_EPOCHS_MAX * EPOCH_BYTES + 4) as u64;

/// The epochs of one WAL, oldest first; never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origins {
    epochs: Vec<(u64, [u8; ORIGIN_ID_BYTES])>,
}

impl Origins {
    /// The origin id of the record with sequence `seq`.
    pub fn id_of(&self, seq: u64) -> [u8; ORIGIN_ID_BYTES] {
        let index = self.epochs.partition_point(|(first, _)| *first <= seq);
        // The first epoch covers every sequence below its start too: those
        // records were written before this file existed, and were never
        // sent with an origin.
        self.epochs[index.saturating_sub(1)].1
    }

    /// The epochs, oldest first.
    pub fn epochs(&self) -> &[(u64, [u8; ORIGIN_ID_BYTES])] {
        &self.epochs
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.epochs.len() * EPOCH_BYTES + 4);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&(self.epochs.len() as u32).to_be_bytes());
        for (first, id) in &self.epochs {
            out.extend_from_slice(&first.to_be_bytes());
            out.extend_from_slice(id);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self, &'static str> {
        let Some((body, crc)) = bytes.split_last_chunk::<4>() else {
            return Err("shorter than its checksum");
        };
        if crc32c::crc32c(body) != u32::from_be_bytes(*crc) {
            return Err("checksum mismatch");
        }
        let Some((header, mut rest)) = body.split_first_chunk::<HEADER_BYTES>() else {
            return Err("shorter than its header");
        };
        if &header[..4] != MAGIC || header[4] != VERSION {
            return Err("unknown magic or version");
        }
        let count = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) as usize;
        if count == 0 || count > ORIGIN_EPOCHS_MAX || rest.len() != count * EPOCH_BYTES {
            return Err("epoch count does not match the file");
        }
        let mut epochs = Vec::with_capacity(count);
        while let Some((epoch, after)) = rest.split_first_chunk::<EPOCH_BYTES>() {
            let (first, id) = epoch.split_at(8);
            let first = u64::from_be_bytes(first.try_into().map_err(|_| "epoch start")?);
            if epochs
                .last()
                .is_some_and(|(previous, _)| *previous >= first)
            {
                return Err("epochs out of order");
            }
            epochs.push((first, id.try_into().map_err(|_| "epoch id")?));
            rest = after;
        }
        Ok(Self { epochs })
    }
}

/// Loads the WAL's origin ids at open, starting a new epoch at `next_seq`
/// when there is no file yet or when recovery `cut` bytes, and writes the
/// file back when it changed.
///
/// # Errors
/// [`WalError::Io`] on a disk error; [`WalError::Corrupt`] for a file that
/// fails its checks.
pub(crate) fn open(
    disk: &dyn Disk,
    dir: &Path,
    next_seq: u64,
    cut: bool,
) -> Result<Origins, WalError> {
    let path = dir.join(ORIGIN_FILE_NAME);
    let existing = if disk
        .exists(&path)
        .map_err(|error| WalError::io("stat the origin file", &path, error))?
    {
        let file = disk
            .open(&path, OpenOptions::EXISTING)
            .map_err(|error| WalError::io("open the origin file", &path, error))?;
        let size = file
            .size()
            .map_err(|error| WalError::io("stat the origin file", &path, error))?;
        if size > ORIGIN_FILE_BYTES_MAX {
            return Err(WalError::corrupt(
                &path,
                0,
                format!(
                    "origin file: {size} bytes, over the {ORIGIN_FILE_BYTES_MAX} of {ORIGIN_EPOCHS_MAX} epochs"
                ),
            ));
        }
        let bytes = file
            .read_at(0, size as usize)
            .wait()
            .map_err(|error| WalError::io("read the origin file", &path, error))?;
        Some(
            Origins::decode(&bytes)
                .map_err(|reason| WalError::corrupt(&path, 0, format!("origin file: {reason}")))?,
        )
    } else {
        None
    };
    let origins = match existing {
        Some(origins) if !cut => return Ok(origins),
        Some(mut origins) => {
            // Sequences from `next_seq` on are handed out again: they get an
            // id no partition has seen.
            origins.epochs.retain(|(first, _)| *first < next_seq);
            origins.epochs.push((next_seq, rand::random()));
            let excess = origins.epochs.len().saturating_sub(ORIGIN_EPOCHS_MAX);
            origins.epochs.drain(..excess);
            origins
        }
        None => Origins {
            epochs: vec![(next_seq, rand::random())],
        },
    };
    write(disk, dir, &origins)?;
    tracing::info!(
        dir = %dir.display(),
        epochs = origins.epochs.len(),
        from_seq = next_seq,
        "ingress WAL origin epoch started"
    );
    Ok(origins)
}

fn write(disk: &dyn Disk, dir: &Path, origins: &Origins) -> Result<(), WalError> {
    let tmp = dir.join(ORIGIN_TMP_FILE_NAME);
    let path = dir.join(ORIGIN_FILE_NAME);
    let bytes = origins.encode();
    let file = disk
        .open(&tmp, OpenOptions::CREATE)
        .map_err(|error| WalError::io("create the origin file", &tmp, error))?;
    file.truncate(0)
        .wait()
        .map_err(|error| WalError::io("truncate the origin file", &tmp, error))?;
    file.write_at(0, IoBuf::from_slice(&bytes))
        .wait()
        .map_err(|error| WalError::io("write the origin file", &tmp, error))?;
    file.fdatasync()
        .wait()
        .map_err(|error| WalError::io("sync the origin file", &tmp, error))?;
    disk.rename(&tmp, &path)
        .map_err(|error| WalError::io("rename the origin file", &path, error))?;
    disk.sync_dir(dir)
        .map_err(|error| WalError::io("sync the WAL directory", dir, error))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use narad_disk::sim::{SimDisk, Tear};
    use proptest::prelude::*;

    use super::*;

    /// `body` with the CRC it calls for, so arbitrary bodies reach the
    /// checks behind the checksum.
    fn sealed(body: &[u8]) -> Vec<u8> {
        let mut bytes = body.to_vec();
        bytes.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
        bytes
    }

    fn arb_origins() -> impl Strategy<Value = Origins> {
        prop::collection::btree_map(
            any::<u64>(),
            any::<[u8; ORIGIN_ID_BYTES]>(),
            1..=ORIGIN_EPOCHS_MAX,
        )
        .prop_map(|epochs| Origins {
            epochs: epochs.into_iter().collect(),
        })
    }

    proptest! {
        #[test]
        fn every_origin_file_round_trips(origins in arb_origins()) {
            prop_assert_eq!(Origins::decode(&origins.encode()), Ok(origins));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
            let _ = Origins::decode(&bytes);
        }

        /// Behind a good checksum: a count that disagrees with the bytes
        /// (up to `u32::MAX`) is refused before anything is reserved, and
        /// whatever decodes is a valid list that encodes to the same bytes.
        #[test]
        fn an_arbitrary_body_behind_a_good_checksum_decodes_only_canonically(
            count in prop::option::of(prop_oneof![0u32..=70, any::<u32>()]),
            epochs in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            // No count drawn: whole epochs and the count that matches them.
            let (count, epochs) = match count {
                Some(count) => (count, &epochs[..]),
                None => {
                    let whole = epochs.len() / EPOCH_BYTES;
                    (whole as u32, &epochs[..whole * EPOCH_BYTES])
                }
            };
            let mut body = MAGIC.to_vec();
            body.push(VERSION);
            body.extend_from_slice(&count.to_be_bytes());
            body.extend_from_slice(epochs);
            let bytes = sealed(&body);
            if let Ok(origins) = Origins::decode(&bytes) {
                prop_assert!((1..=ORIGIN_EPOCHS_MAX).contains(&origins.epochs().len()));
                prop_assert!(origins.epochs().windows(2).all(|pair| pair[0].0 < pair[1].0));
                prop_assert_eq!(origins.encode(), bytes);
            }
        }
    }

    const DIR: &str = "/wal";

    fn disk(sim: &SimDisk) -> Arc<dyn Disk> {
        let disk: Arc<dyn Disk> = Arc::new(sim.clone());
        disk.create_dir_all(Path::new(DIR)).unwrap();
        disk
    }

    #[test]
    fn a_new_wal_gets_one_epoch_that_survives_a_crash_and_a_clean_reopen_keeps_it() {
        let sim = SimDisk::new(1);
        let first = open(&*disk(&sim), Path::new(DIR), 0, false).unwrap();
        sim.crash(Tear::LastWrite);
        let again = open(&*disk(&sim), Path::new(DIR), 500, false).unwrap();
        assert_eq!(again, first);
        assert_eq!(again.id_of(0), again.id_of(499));
    }

    #[test]
    fn a_cut_tail_starts_an_epoch_at_the_next_sequence_only() {
        let sim = SimDisk::new(2);
        let first = open(&*disk(&sim), Path::new(DIR), 0, false).unwrap();
        let after_cut = open(&*disk(&sim), Path::new(DIR), 100, true).unwrap();
        assert_eq!(after_cut.id_of(99), first.id_of(99));
        assert_ne!(after_cut.id_of(100), first.id_of(100));
        // A second cut lower than the first drops the epoch it overtakes.
        let lower = open(&*disk(&sim), Path::new(DIR), 80, true).unwrap();
        assert_eq!(lower.epochs().len(), 2);
        assert_eq!(lower.id_of(79), first.id_of(79));
        assert_ne!(lower.id_of(100), after_cut.id_of(100));
    }

    #[test]
    fn epochs_are_capped() {
        let sim = SimDisk::new(3);
        for seq in 0..(ORIGIN_EPOCHS_MAX as u64 + 5) {
            open(&*disk(&sim), Path::new(DIR), seq * 10, seq > 0).unwrap();
        }
        let origins = open(&*disk(&sim), Path::new(DIR), 10_000, false).unwrap();
        assert_eq!(origins.epochs().len(), ORIGIN_EPOCHS_MAX);
    }

    #[test]
    fn a_file_larger_than_the_most_epochs_is_refused_unread() {
        let sim = SimDisk::new(5);
        let disk = disk(&sim);
        let path = Path::new(DIR).join(ORIGIN_FILE_NAME);
        let file = disk.open(&path, OpenOptions::CREATE).unwrap();
        file.truncate(ORIGIN_FILE_BYTES_MAX + 1).wait().unwrap();
        drop(file);
        let error = open(&*disk, Path::new(DIR), 0, false).unwrap_err();
        let expected = format!("{} bytes, over the", ORIGIN_FILE_BYTES_MAX + 1);
        assert!(
            matches!(&error, WalError::Corrupt { reason, .. } if reason.contains(&expected)),
            "{error}"
        );
    }

    #[test]
    fn a_file_of_the_most_epochs_is_exactly_the_limit() {
        let origins = Origins {
            epochs: (0..ORIGIN_EPOCHS_MAX as u64)
                .map(|first| (first, [1; ORIGIN_ID_BYTES]))
                .collect(),
        };
        assert_eq!(origins.encode().len() as u64, ORIGIN_FILE_BYTES_MAX);
    }

    #[test]
    fn a_damaged_file_is_refused() {
        let sim = SimDisk::new(4);
        let origins = open(&*disk(&sim), Path::new(DIR), 7, false).unwrap();
        let mut bytes = origins.encode();
        for at in 0..bytes.len() {
            bytes[at] ^= 0x40;
            assert!(Origins::decode(&bytes).is_err(), "flipped byte {at}");
            bytes[at] ^= 0x40;
        }
        assert_eq!(Origins::decode(&bytes), Ok(origins));
        assert!(Origins::decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
