//! Cursor files: `topics/<parent>/pNNNNN/fanout-<child>.offset`, the first
//! parent offset a child has not yet been given, under the attach epoch
//! that wrote it (spec §4, v3.1 format).
//!
//! The record is exactly 256 bytes of text:
//!
//! ```text
//! {"crc":"xxxxxxxx","epoch":"<16 hex>","next_offset":N}<spaces>\n
//! ```
//!
//! `xxxxxxxx` is the CRC-32C, as 8 lowercase hex digits, of every byte
//! after the crc field's closing quote (byte 17 to the end, padding and
//! newline included). The record is advanced in place with one 256-byte
//! write and one `fdatasync`. The first anchor and a migration from the
//! v2.0 format (plain JSON `{"epoch":…,"next_offset":N}` of any length)
//! write a temporary file, sync it, rename it over, and sync the
//! directory, because the file may not exist or may be shorter.
//!
//! A record that fails its CRC is read again a few times (a reader may
//! meet a write in progress); one that still fails is [`Loaded::Damaged`],
//! which the cursor treats as lost: it replays from the attach point once
//! the leader confirms its epoch. That costs duplicates, never a gap.

use std::io;
use std::path::{Path, PathBuf};

use narad_disk::{Disk, IoBuf, OpenOptions};
use narad_meta::AttachEpoch;
use serde::Deserialize;

/// Bytes of a v3.1 cursor record.
pub const CURSOR_RECORD_BYTES: usize = 256;

/// Reads of a record that fails its CRC before it counts as damaged.
pub const CRC_READ_ATTEMPTS: usize = 3;

/// Where the crc field's value starts and ends (`{"crc":"` is 8 bytes).
const CRC_AT: usize = 8;
const CRC_END: usize = CRC_AT + 8;
/// The checksummed bytes start after the closing quote of the crc value.
const CHECKED_FROM: usize = CRC_END + 1;

/// What a cursor file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CursorPosition {
    /// The attach epoch that wrote it.
    pub epoch: AttachEpoch,
    /// The first parent offset not yet delivered to the child.
    pub next_offset: u64,
}

/// The outcome of loading a cursor file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// No file.
    Absent,
    /// A v3.1 record that passed its CRC.
    Current(CursorPosition),
    /// A v2.0 JSON file; the next write migrates it (temp + rename).
    Legacy(CursorPosition),
    /// A file that is neither: torn, corrupted, or unreadable as either
    /// format after [`CRC_READ_ATTEMPTS`] reads.
    Damaged(String),
}

/// The file name of `child`'s cursor in a parent partition directory.
pub fn cursor_file_name(child: &str) -> String {
    format!("fanout-{child}.offset")
}

/// The path of `child`'s cursor in `partition_dir`.
pub fn cursor_path(partition_dir: &Path, child: &str) -> PathBuf {
    partition_dir.join(cursor_file_name(child))
}

/// Encodes `position` as a 256-byte record.
pub fn encode(position: &CursorPosition) -> [u8; CURSOR_RECORD_BYTES] {
    let body = format!(
        ",\"epoch\":\"{}\",\"next_offset\":{}}}",
        position.epoch, position.next_offset
    );
    let mut record = [b' '; CURSOR_RECORD_BYTES];
    record[..CRC_AT].copy_from_slice(b"{\"crc\":\"");
    record[CRC_END] = b'"';
    // 16 hex digits of epoch and at most 20 digits of offset: the body
    // always fits with room to spare.
    record[CHECKED_FROM..CHECKED_FROM + body.len()].copy_from_slice(body.as_bytes());
    record[CURSOR_RECORD_BYTES - 1] = b'\n';
    let crc = crc32c::crc32c(&record[CHECKED_FROM..]);
    record[CRC_AT..CRC_END].copy_from_slice(format!("{crc:08x}").as_bytes());
    record
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    #[serde(default)]
    crc: Option<String>,
    epoch: AttachEpoch,
    next_offset: u64,
}

/// Decodes a file's bytes: a v3.1 record, a v2.0 JSON file, or damage.
pub fn decode(bytes: &[u8]) -> Loaded {
    if bytes.starts_with(b"{\"crc\":\"") {
        return decode_record(bytes);
    }
    match serde_json::from_slice::<Fields>(bytes) {
        Ok(fields) if fields.crc.is_none() => Loaded::Legacy(CursorPosition {
            epoch: fields.epoch,
            next_offset: fields.next_offset,
        }),
        Ok(_) => Loaded::Damaged("a crc field out of place".to_owned()),
        Err(error) => Loaded::Damaged(format!("neither format: {error}")),
    }
}

fn decode_record(bytes: &[u8]) -> Loaded {
    if bytes.len() != CURSOR_RECORD_BYTES {
        return Loaded::Damaged(format!(
            "{} bytes where a record has {CURSOR_RECORD_BYTES}",
            bytes.len()
        ));
    }
    let stored = std::str::from_utf8(&bytes[CRC_AT..CRC_END])
        .ok()
        .and_then(|hex| u32::from_str_radix(hex, 16).ok());
    let computed = crc32c::crc32c(&bytes[CHECKED_FROM..]);
    if stored != Some(computed) {
        return Loaded::Damaged(format!("crc mismatch (computed {computed:08x})"));
    }
    match serde_json::from_slice::<Fields>(bytes.trim_ascii_end()) {
        Ok(fields) => Loaded::Current(CursorPosition {
            epoch: fields.epoch,
            next_offset: fields.next_offset,
        }),
        Err(error) => Loaded::Damaged(format!("checksummed but not a cursor: {error}")),
    }
}

/// Loads `path`, reading again up to [`CRC_READ_ATTEMPTS`] times while the
/// bytes are damaged.
///
/// # Errors
/// The disk failed to list, open or read the file.
pub fn load(disk: &dyn Disk, path: &Path) -> io::Result<Loaded> {
    let mut loaded = Loaded::Absent;
    for _ in 0..CRC_READ_ATTEMPTS {
        if !disk.exists(path)? {
            return Ok(Loaded::Absent);
        }
        let file = disk.open(path, OpenOptions::EXISTING)?;
        let size = file.size()?;
        // A cursor file is never large; anything past a few records is
        // damage, not something to read into memory.
        let len = usize::try_from(size)
            .unwrap_or(usize::MAX)
            .min(4 * CURSOR_RECORD_BYTES);
        let bytes = file.read_at(0, len).wait()?;
        loaded = decode(&bytes);
        if !matches!(loaded, Loaded::Damaged(_)) {
            return Ok(loaded);
        }
    }
    Ok(loaded)
}

/// Advances an existing v3.1 record in place: one write, one `fdatasync`.
///
/// # Errors
/// The write or the sync failed; the file holds the old or the new record,
/// or a torn one that a later load reports damaged.
pub fn advance(disk: &dyn Disk, path: &Path, position: &CursorPosition) -> io::Result<()> {
    let file = disk.open(path, OpenOptions::EXISTING)?;
    file.write_and_sync(0, IoBuf::from_slice(&encode(position)))
        .wait()?;
    Ok(())
}

/// Writes `position` as a new file: a temporary file written and synced,
/// renamed over `path`, the directory synced. For the first anchor and for
/// migrating a v2.0 file.
///
/// # Errors
/// Any step failed; `path` then holds what it held before, or the new
/// record if only the directory sync failed.
pub fn replace(disk: &dyn Disk, path: &Path, position: &CursorPosition) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("a cursor path has a directory"))?;
    disk.create_dir_all(dir)?;
    let temp = path.with_extension("offset.tmp");
    let file = disk.open(&temp, OpenOptions::CREATE)?;
    file.truncate(0).wait()?;
    file.write_and_sync(0, IoBuf::from_slice(&encode(position)))
        .wait()?;
    drop(file);
    disk.rename(&temp, path)?;
    disk.sync_dir(dir)
}

/// Removes `path` if it exists and syncs its directory.
///
/// # Errors
/// The removal or the sync failed.
pub fn remove(disk: &dyn Disk, path: &Path) -> io::Result<()> {
    if !disk.exists(path)? {
        return Ok(());
    }
    disk.remove_file(path)?;
    match path.parent() {
        Some(dir) => disk.sync_dir(dir),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use narad_disk::sim::{SimDisk, Tear};
    use proptest::prelude::*;

    use super::*;

    fn epoch(bits: u64) -> AttachEpoch {
        AttachEpoch::from_bits(bits)
    }

    fn position(bits: u64, next_offset: u64) -> CursorPosition {
        CursorPosition {
            epoch: epoch(bits),
            next_offset,
        }
    }

    fn sim() -> (Arc<SimDisk>, PathBuf) {
        let disk = Arc::new(SimDisk::new(16));
        let path = PathBuf::from("/data/topics/orders/p00001").join(cursor_file_name("audit"));
        (disk, path)
    }

    #[test]
    fn a_record_is_256_bytes_of_json_padded_with_spaces_and_a_newline() {
        let record = encode(&position(0xab, 42));
        let text = std::str::from_utf8(&record).expect("text");
        assert_eq!(record.len(), 256);
        assert!(text.starts_with("{\"crc\":\""), "{text}");
        assert!(
            text.contains(",\"epoch\":\"00000000000000ab\",\"next_offset\":42}"),
            "{text}"
        );
        assert!(text.ends_with(" \n"), "{text:?}");
        let json: serde_json::Value = serde_json::from_str(text.trim_end()).expect("json");
        assert_eq!(json["next_offset"], 42);
        assert_eq!(decode(&record), Loaded::Current(position(0xab, 42)));
    }

    #[test]
    fn the_largest_offset_fits() {
        let record = encode(&position(u64::MAX, u64::MAX));
        assert_eq!(
            decode(&record),
            Loaded::Current(position(u64::MAX, u64::MAX))
        );
    }

    #[test]
    fn a_flipped_byte_anywhere_after_the_crc_is_damage() {
        let record = encode(&position(7, 1_000));
        for at in CHECKED_FROM..CURSOR_RECORD_BYTES {
            let mut bad = record;
            bad[at] ^= 0x01;
            assert!(
                matches!(decode(&bad), Loaded::Damaged(_)),
                "byte {at} flipped was accepted"
            );
        }
    }

    #[test]
    fn a_v2_json_file_reads_as_legacy() {
        let text = br#"{"epoch":"0000000000000007","next_offset":99}"#;
        assert_eq!(decode(text), Loaded::Legacy(position(7, 99)));
        assert!(matches!(
            decode(b"{\"epoch\":\"nothex\"}"),
            Loaded::Damaged(_)
        ));
        assert!(matches!(decode(b""), Loaded::Damaged(_)));
    }

    #[test]
    fn replace_then_advance_then_load_round_trips() {
        let (disk, path) = sim();
        assert_eq!(load(&*disk, &path).expect("load"), Loaded::Absent);
        replace(&*disk, &path, &position(1, 10)).expect("anchor");
        assert_eq!(
            load(&*disk, &path).expect("load"),
            Loaded::Current(position(1, 10))
        );
        advance(&*disk, &path, &position(1, 4_096)).expect("advance");
        assert_eq!(
            load(&*disk, &path).expect("load"),
            Loaded::Current(position(1, 4_096))
        );
        remove(&*disk, &path).expect("remove");
        assert_eq!(load(&*disk, &path).expect("load"), Loaded::Absent);
    }

    #[test]
    fn a_legacy_file_is_migrated_by_replace() {
        let (disk, path) = sim();
        disk.create_dir_all(path.parent().expect("dir"))
            .expect("dir");
        let file = disk.open(&path, OpenOptions::CREATE).expect("open");
        let legacy = br#"{"epoch":"0000000000000003","next_offset":5}"#;
        file.write_and_sync(0, IoBuf::from_slice(legacy))
            .wait()
            .expect("write");
        drop(file);
        disk.sync_dir(path.parent().expect("dir")).expect("sync");
        assert_eq!(
            load(&*disk, &path).expect("load"),
            Loaded::Legacy(position(3, 5))
        );
        replace(&*disk, &path, &position(3, 5)).expect("migrate");
        assert_eq!(
            load(&*disk, &path).expect("load"),
            Loaded::Current(position(3, 5))
        );
    }

    #[test]
    fn a_crash_leaves_the_synced_record_or_the_unsynced_one_never_another() {
        // A record sits in one 512-byte sector, which a torn write keeps
        // whole or not at all: the old record or the new, by seed.
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..32 {
            let disk = Arc::new(SimDisk::new(seed));
            let path = sim().1;
            replace(&*disk, &path, &position(2, 100)).expect("anchor");
            advance(&*disk, &path, &position(2, 200)).expect("advance");
            let file = disk.open(&path, OpenOptions::EXISTING).expect("open");
            file.write_at(0, IoBuf::from_slice(&encode(&position(2, 300))))
                .wait()
                .expect("write");
            drop(file);
            disk.crash(Tear::LastWrite);
            match load(&*disk, &path).expect("load") {
                Loaded::Current(found) => {
                    assert!([200, 300].contains(&found.next_offset), "{found:?}");
                    seen.insert(found.next_offset);
                }
                other => panic!("seed {seed}: {other:?}"),
            }
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [200, 300]);
    }

    #[test]
    fn a_synced_anchor_survives_a_crash() {
        let (disk, path) = sim();
        replace(&*disk, &path, &position(4, 1)).expect("anchor");
        disk.crash(Tear::LastWrite);
        assert_eq!(
            load(&*disk, &path).expect("load"),
            Loaded::Current(position(4, 1))
        );
    }

    proptest! {
        #[test]
        fn any_position_round_trips(bits in any::<u64>(), next_offset in any::<u64>()) {
            let record = encode(&position(bits, next_offset));
            prop_assert_eq!(decode(&record), Loaded::Current(position(bits, next_offset)));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode(&bytes);
        }

        /// A record with bytes changed and its checksum written again
        /// reaches the JSON behind the CRC; whatever decodes is a cursor.
        #[test]
        fn a_damaged_record_resealed_never_panics(
            bits in any::<u64>(),
            next_offset in any::<u64>(),
            changes in proptest::collection::vec((CHECKED_FROM..CURSOR_RECORD_BYTES, any::<u8>()), 1..4),
        ) {
            let mut record = encode(&position(bits, next_offset));
            for (at, byte) in changes {
                record[at] = byte;
            }
            let crc = crc32c::crc32c(&record[CHECKED_FROM..]);
            record[CRC_AT..CRC_END].copy_from_slice(format!("{crc:08x}").as_bytes());
            prop_assert!(!matches!(decode(&record), Loaded::Legacy(_)));
        }

        /// Text shaped like the legacy JSON file reaches its parser.
        #[test]
        fn legacy_shaped_text_never_panics(text in r#"\{("(epoch|next_offset|crc)":("[0-9a-f]{0,17}"|-?[0-9]{1,21}),?){0,4}\}"#) {
            let _ = decode(text.as_bytes());
        }
    }
}
