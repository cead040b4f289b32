//! The byte layout of a partition's consumer state files, and the codec of
//! a `consumer.ahead` slot: a whole, self-checksummed record of one
//! position. The layout is drawn in `docs/internals/consumer-state.md`.

use super::position::{ConsumerPosition, OFFSET_LIMIT};

/// Name of the two-slot state file in a partition directory.
pub const AHEAD_FILE_NAME: &str = "consumer.ahead";
/// Name of the 8-byte frontier file in a partition directory.
pub const OFFSET_FILE_NAME: &str = "consumer.offset";

/// Bytes of one slot of `consumer.ahead`.
pub const SLOT_BYTES: usize = 4096;
/// Slots in `consumer.ahead`: the anchor and the window.
pub const SLOT_COUNT: usize = 2;
/// Bytes of `consumer.ahead`.
pub const AHEAD_FILE_BYTES: usize = SLOT_BYTES * SLOT_COUNT;
/// Bytes of `consumer.offset`.
pub const OFFSET_FILE_BYTES: usize = 8;

/// First bytes of every valid slot.
pub const SLOT_MAGIC: [u8; 4] = *b"NRCS";
/// The slot format this code writes and the only one it reads.
pub const SLOT_FORMAT_VERSION: u16 = 1;
/// Fixed header before the encoded acked-ahead set.
pub const SLOT_HEADER_BYTES: usize = 32;
/// The CRC32C trailer at the end of each slot.
pub const SLOT_CRC_BYTES: usize = 4;
/// Room for the encoded acked-ahead set in one slot.
pub const SLOT_SET_BYTES_MAX: usize = SLOT_BYTES - SLOT_HEADER_BYTES - SLOT_CRC_BYTES;
/// Most acked-ahead offsets one slot may carry, checked on encode and
/// decode, so a decoded slot never allocates more than 8 MiB.
pub const SLOT_ACKED_AHEAD_MAX: usize = 1 << 20;

/// Slot flag: the acked-ahead set did not fit and only its lowest offsets
/// were kept (the others are redelivered after a restart).
const FLAG_TRUNCATED: u16 = 1;
/// Byte range of the CRC trailer, and what it covers.
const SLOT_CRC_AT: usize = SLOT_BYTES - SLOT_CRC_BYTES;

const _: () = assert!(SLOT_HEADER_BYTES + SLOT_SET_BYTES_MAX + SLOT_CRC_BYTES == SLOT_BYTES);
const _: () = assert!(SLOT_BYTES.is_multiple_of(narad_disk::IO_ALIGN));
const _: () = assert!(SLOT_SET_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(SLOT_ACKED_AHEAD_MAX <= u32::MAX as usize);

/// One decoded slot of `consumer.ahead`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRecord {
    /// Larger is newer; the two slots never hold the same generation.
    pub generation: u64,
    /// The position the slot holds.
    pub position: ConsumerPosition,
    /// The set did not fit and higher offsets were left out.
    pub truncated: bool,
}

/// Why a slot does not decode. Every case means "not a valid slot": recovery
/// uses the other one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SlotError {
    /// Fewer than [`SLOT_BYTES`] bytes (a short file).
    #[error("slot is {0} bytes, short of {SLOT_BYTES}")]
    Short(usize),
    /// The CRC32C trailer does not match (a torn or damaged slot).
    #[error("slot checksum mismatch")]
    Checksum,
    /// The magic is wrong (never written, or not a slot).
    #[error("slot magic mismatch")]
    Magic,
    /// A format version this code does not read.
    #[error("slot format version {0} not supported")]
    Version(u16),
    /// A field breaks the format's rules (see the message).
    #[error("malformed slot: {0}")]
    Malformed(&'static str),
}

/// Encodes `position` as a slot of generation `generation`, keeping the
/// frontier and the lowest acked-ahead offsets that fit.
///
/// # Panics
/// If `position` is not well formed or `generation` is zero: callers check
/// positions from outside first (programmer errors).
pub fn encode_slot(generation: u64, position: &ConsumerPosition) -> (Box<[u8; SLOT_BYTES]>, bool) {
    assert!(generation > 0, "slot generation 0 is reserved");
    assert!(
        position.is_well_formed(),
        "encoding a malformed consumer position"
    );
    let mut slot = Box::new([0u8; SLOT_BYTES]);
    let (set_bytes, count, truncated) = encode_set(
        position,
        &mut slot[SLOT_HEADER_BYTES..SLOT_HEADER_BYTES + SLOT_SET_BYTES_MAX],
    );
    let flags = if truncated { FLAG_TRUNCATED } else { 0 };
    slot[0..4].copy_from_slice(&SLOT_MAGIC);
    slot[4..6].copy_from_slice(&SLOT_FORMAT_VERSION.to_be_bytes());
    slot[6..8].copy_from_slice(&flags.to_be_bytes());
    slot[8..16].copy_from_slice(&generation.to_be_bytes());
    slot[16..24].copy_from_slice(&position.frontier.to_be_bytes());
    slot[24..28].copy_from_slice(&(count as u32).to_be_bytes());
    slot[28..30].copy_from_slice(&(set_bytes as u16).to_be_bytes());
    let crc = crc32c::crc32c(&slot[..SLOT_CRC_AT]);
    slot[SLOT_CRC_AT..].copy_from_slice(&crc.to_be_bytes());
    // Check before it is written: the slot decodes to the frontier and the
    // lowest `count` offsets, nothing else.
    let decoded = decode_slot(&slot[..]);
    assert!(
        decoded
            .as_ref()
            .is_ok_and(|record| record.generation == generation
                && record.position.frontier == position.frontier
                && record.position.acked_ahead[..] == position.acked_ahead[..count]
                && record.truncated == truncated),
        "consumer state slot does not decode to what was encoded: {decoded:?}"
    );
    (slot, truncated)
}

/// Writes the set as maximal runs into `out`; returns (bytes used, offsets
/// kept, whether some were left out). A run is `uvarint(gap * 2 + long)`,
/// then `uvarint(len - 2)` if `long`; `gap` counts the unsettled offsets
/// between the previous run (or the frontier) and this one, less the one
/// that must separate them.
fn encode_set(position: &ConsumerPosition, out: &mut [u8]) -> (usize, usize, bool) {
    let mut used = 0;
    let mut kept = 0;
    // The first offset a run may start at without a gap: one past the
    // frontier (the frontier itself is unsettled).
    let mut expected = position.frontier + 1;
    for run in runs(&position.acked_ahead) {
        let len = (run.end - run.start) as usize;
        if kept + len > SLOT_ACKED_AHEAD_MAX {
            return (used, kept, true);
        }
        let mut encoded = [0u8; 20];
        let gap = run.start - expected;
        let mut n = put_uvarint(&mut encoded, gap * 2 + u64::from(len > 1));
        if len > 1 {
            n += put_uvarint(&mut encoded[n..], len as u64 - 2);
        }
        if used + n > out.len() {
            return (used, kept, true);
        }
        out[used..used + n].copy_from_slice(&encoded[..n]);
        used += n;
        kept += len;
        expected = run.end + 1;
    }
    (used, kept, false)
}

/// Maximal runs of consecutive offsets of a strictly ascending list.
fn runs(offsets: &[u64]) -> impl Iterator<Item = std::ops::Range<u64>> + '_ {
    let mut index = 0;
    std::iter::from_fn(move || {
        let &start = offsets.get(index)?;
        let mut end = start + 1;
        index += 1;
        while offsets.get(index) == Some(&end) {
            end += 1;
            index += 1;
        }
        Some(start..end)
    })
}

fn put_uvarint(out: &mut [u8], mut value: u64) -> usize {
    let mut n = 0;
    while value >= 0x80 {
        out[n] = (value as u8) | 0x80;
        value >>= 7;
        n += 1;
    }
    out[n] = value as u8;
    n + 1
}

/// Reads a canonical uvarint (no overlong forms, no overflow) at `*at`.
fn get_uvarint(bytes: &[u8], at: &mut usize) -> Result<u64, SlotError> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let &byte = bytes
            .get(*at)
            .ok_or(SlotError::Malformed("varint runs past the set"))?;
        *at += 1;
        let bits = u64::from(byte & 0x7f);
        if shift == 63 && bits > 1 {
            return Err(SlotError::Malformed("varint overflows 64 bits"));
        }
        value |= bits << shift;
        if byte & 0x80 == 0 {
            if byte == 0 && shift > 0 {
                return Err(SlotError::Malformed("overlong varint"));
            }
            return Ok(value);
        }
    }
    Err(SlotError::Malformed("varint longer than 10 bytes"))
}

/// Decodes one slot, strictly: every check of the encoder is made again.
///
/// # Errors
/// [`SlotError`] for anything but a slot this code could have written.
pub fn decode_slot(slot: &[u8]) -> Result<SlotRecord, SlotError> {
    if slot.len() < SLOT_BYTES {
        return Err(SlotError::Short(slot.len()));
    }
    let slot = &slot[..SLOT_BYTES];
    let stored_crc = u32::from_be_bytes(field(slot, SLOT_CRC_AT));
    if crc32c::crc32c(&slot[..SLOT_CRC_AT]) != stored_crc {
        return Err(SlotError::Checksum);
    }
    if slot[0..4] != SLOT_MAGIC {
        return Err(SlotError::Magic);
    }
    let version = u16::from_be_bytes(field(slot, 4));
    if version != SLOT_FORMAT_VERSION {
        return Err(SlotError::Version(version));
    }
    let flags = u16::from_be_bytes(field(slot, 6));
    if flags & !FLAG_TRUNCATED != 0 {
        return Err(SlotError::Malformed("unknown flag bits"));
    }
    let generation = u64::from_be_bytes(field(slot, 8));
    let frontier = u64::from_be_bytes(field(slot, 16));
    let count = u32::from_be_bytes(field(slot, 24)) as usize;
    let set_bytes = usize::from(u16::from_be_bytes(field(slot, 28)));
    if generation == 0 {
        return Err(SlotError::Malformed("generation 0"));
    }
    if frontier >= OFFSET_LIMIT {
        return Err(SlotError::Malformed("frontier at or past 2^63"));
    }
    if count > SLOT_ACKED_AHEAD_MAX {
        return Err(SlotError::Malformed("acked-ahead count over the limit"));
    }
    if set_bytes > SLOT_SET_BYTES_MAX || slot[30..32] != [0, 0] {
        return Err(SlotError::Malformed("set length or reserved bytes"));
    }
    let set_end = SLOT_HEADER_BYTES + set_bytes;
    if slot[set_end..SLOT_CRC_AT].iter().any(|&byte| byte != 0) {
        return Err(SlotError::Malformed("bytes after the set are not zero"));
    }
    let acked_ahead = decode_set(&slot[SLOT_HEADER_BYTES..set_end], frontier, count)?;
    Ok(SlotRecord {
        generation,
        position: ConsumerPosition {
            frontier,
            acked_ahead,
        },
        truncated: flags & FLAG_TRUNCATED != 0,
    })
}

fn decode_set(set: &[u8], frontier: u64, count: usize) -> Result<Vec<u64>, SlotError> {
    let mut offsets = Vec::with_capacity(count);
    let mut expected = frontier + 1;
    let mut at = 0;
    while at < set.len() {
        let tag = get_uvarint(set, &mut at)?;
        let len = if tag & 1 == 1 {
            get_uvarint(set, &mut at)?
                .checked_add(2)
                .ok_or(SlotError::Malformed("run length overflows"))?
        } else {
            1
        };
        let start = expected
            .checked_add(tag >> 1)
            .ok_or(SlotError::Malformed("run start overflows"))?;
        let end = start
            .checked_add(len)
            .filter(|&end| end <= OFFSET_LIMIT)
            .ok_or(SlotError::Malformed("run ends past 2^63"))?;
        if len > (count - offsets.len()) as u64 {
            return Err(SlotError::Malformed("more offsets than the count"));
        }
        offsets.extend(start..end);
        expected = end + 1;
    }
    if offsets.len() != count {
        return Err(SlotError::Malformed("fewer offsets than the count"));
    }
    Ok(offsets)
}

fn field<const N: usize>(slot: &[u8], at: usize) -> [u8; N] {
    let mut bytes = [0u8; N];
    bytes.copy_from_slice(&slot[at..at + N]);
    bytes
}
