//! Consumer state that survives restarts: each owned partition's frontier
//! and acked-ahead set, kept in `<partition dir>/consumer.ahead` (two
//! self-checksummed 4 KiB slots) and `<partition dir>/consumer.offset` (the
//! 8-byte frontier).
//!
//! What it guarantees: every position it recovers was once the real position
//! of the partition (every offset it calls settled was settled), so a crash,
//! a torn write or a disk error can only cause redelivery, never the loss of
//! a message. A process crash costs at most the acks of the last tick (the
//! page cache keeps the window slot); a power cut costs at most one tick plus
//! one durability interval; [`ConsumerStateStore::flush_all`] makes every
//! attached position durable.
//!
//! What it does not do: it keeps no leases (they are forgotten on restart by
//! design), it does not decide positions (the in-flight shard does; this
//! module only reads them through [`PositionSource`]), and it never retries a
//! failed write or fdatasync: a partition whose state hit a disk error is
//! latched and written no more until it is attached again.
//!
//! The byte layout, the cadences and why each crash case is safe are in
//! `docs/internals/consumer-state.md`.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use narad_disk::{Disk, FileHandle, IoBuf, OpenOptions};
use parking_lot::Mutex;
use tracing::{debug, error, warn};

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
/// Offsets are below 2^63, as in the partition log.
pub const OFFSET_LIMIT: u64 = 1 << 63;

/// Slot flag: the acked-ahead set did not fit and only its lowest offsets
/// were kept (the others are redelivered after a restart).
const FLAG_TRUNCATED: u16 = 1;
/// Byte range of the CRC trailer, and what it covers.
const SLOT_CRC_AT: usize = SLOT_BYTES - SLOT_CRC_BYTES;

/// Held `consumer.ahead` handles are capped at this many, and at a quarter
/// of the soft open-file limit when that is lower.
pub const HANDLES_MAX_CAP: usize = 4096;
/// Most `consumer.offset` levellings in flight at once (each holds a
/// short-lived file handle besides the held `consumer.ahead` ones).
pub const OFFSET_LEVELS_IN_FLIGHT_MAX: usize = 256;
/// Shortest durability interval accepted
/// (`storage.consumer_offset_commit_interval_ms` = 10).
pub const DURABLE_INTERVAL_MIN: Duration = Duration::from_millis(10);
/// Longest durability interval accepted (60000 ms).
pub const DURABLE_INTERVAL_MAX: Duration = Duration::from_secs(60);

const _: () = assert!(SLOT_HEADER_BYTES + SLOT_SET_BYTES_MAX + SLOT_CRC_BYTES == SLOT_BYTES);
const _: () = assert!(SLOT_BYTES.is_multiple_of(narad_disk::IO_ALIGN));
const _: () = assert!(SLOT_SET_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(SLOT_ACKED_AHEAD_MAX <= u32::MAX as usize);

/// Frontier (every offset below it is settled) and the settled offsets above it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerPosition {
    /// Every offset below it is settled; the frontier itself is not.
    pub frontier: u64,
    /// Settled offsets above the frontier, sorted ascending, all `> frontier`.
    pub acked_ahead: Vec<u64>,
}

impl ConsumerPosition {
    /// A position at `frontier` with nothing acked ahead.
    pub fn at(frontier: u64) -> Self {
        Self {
            frontier,
            acked_ahead: Vec::new(),
        }
    }

    /// Whether the position keeps its invariants: offsets below
    /// [`OFFSET_LIMIT`], the set strictly ascending and above the frontier.
    pub fn is_well_formed(&self) -> bool {
        let mut previous = self.frontier;
        self.frontier < OFFSET_LIMIT
            && self.acked_ahead.iter().all(|&offset| {
                let ordered = offset > previous && offset < OFFSET_LIMIT;
                previous = offset;
                ordered
            })
    }

    /// Raises the frontier to `frontier` (a larger frontier from
    /// `consumer.offset`): acked-ahead offsets below it are dropped, and a
    /// run of settled offsets starting at the new frontier is absorbed.
    fn raise_frontier(&mut self, frontier: u64) {
        if frontier <= self.frontier {
            return;
        }
        self.frontier = frontier;
        self.acked_ahead.retain(|&offset| offset >= frontier);
        let absorbed = self
            .acked_ahead
            .iter()
            .zip(frontier..)
            .take_while(|(offset, expected)| **offset == *expected)
            .count();
        self.acked_ahead.drain(..absorbed);
        self.frontier += absorbed as u64;
    }
}

/// Something that can report a partition's current position (the service's shard).
///
/// The store calls [`PositionSource::position`] while it holds its own lock,
/// so an implementation must not call back into the store, and the store's
/// methods must not be called while holding a lock that `position` takes.
pub trait PositionSource: Send + Sync + fmt::Debug {
    /// The partition's current position.
    fn position(&self) -> ConsumerPosition;
}

/// The store's cadences and limits.
#[derive(Clone, Debug)]
pub struct ConsumerStateConfig {
    /// How often touched partitions get their window slot rewritten (page
    /// cache only). The effective tick is the shorter of this and
    /// `durable_interval`.
    pub tick: Duration,
    /// How often each written partition is written out (fdatasync):
    /// `storage.consumer_offset_commit_interval_ms`, 10 ms..=60 s.
    pub durable_interval: Duration,
    /// Shortest time between two levellings of `consumer.offset`.
    pub offset_level_interval: Duration,
    /// Most `consumer.ahead` files held open at once; beyond it the least
    /// recently touched partition is written out and closed.
    pub handles_max: usize,
}

impl Default for ConsumerStateConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_millis(100),
            durable_interval: Duration::from_secs(1),
            offset_level_interval: Duration::from_secs(30),
            handles_max: default_handles_max(),
        }
    }
}

impl ConsumerStateConfig {
    /// The tick actually used: `tick`, or the durability interval if shorter.
    pub fn tick_effective(&self) -> Duration {
        self.tick.min(self.durable_interval)
    }

    fn assert_valid(&self) {
        assert!(!self.tick.is_zero(), "consumer state tick must be positive");
        assert!(
            (DURABLE_INTERVAL_MIN..=DURABLE_INTERVAL_MAX).contains(&self.durable_interval),
            "consumer state durability interval {:?} outside {DURABLE_INTERVAL_MIN:?}..={DURABLE_INTERVAL_MAX:?}",
            self.durable_interval
        );
        assert!(
            !self.offset_level_interval.is_zero(),
            "consumer.offset level interval must be positive"
        );
        assert!(
            self.handles_max >= 1,
            "consumer state needs at least one file handle"
        );
    }
}

/// min([`HANDLES_MAX_CAP`], soft `RLIMIT_NOFILE` / 4), read from
/// `/proc/self/limits`; 256 (a quarter of the usual 1024) where that file
/// cannot be read.
pub fn default_handles_max() -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| soft_open_files(&limits));
    match soft {
        Some(soft) => (soft / 4).clamp(1, HANDLES_MAX_CAP as u64) as usize,
        None => 256,
    }
}

/// The soft limit on the "Max open files" line of `/proc/self/limits`
/// ("unlimited" reads as `u64::MAX`).
pub(crate) fn soft_open_files(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    let soft = line
        .strip_prefix("Max open files")?
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        Some(u64::MAX)
    } else {
        soft.parse().ok()
    }
}

/// Errors of the consumer state store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// Loading a partition's state failed: the position is unknown.
    #[error("consumer state in {dir}: {op} failed: {source}")]
    Io {
        /// The partition directory.
        dir: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The disk's error.
        #[source]
        source: io::Error,
    },
    /// These partitions' positions could not be made durable (a disk error
    /// now or earlier latched them); their positions after a restart may be
    /// older, which redelivers messages.
    #[error("consumer state of {} partition(s) not durable (first: {})", .dirs.len(), first_dir(.dirs))]
    NotDurable {
        /// The latched partition directories.
        dirs: Vec<PathBuf>,
    },
}

fn first_dir(dirs: &[PathBuf]) -> String {
    dirs.first()
        .map_or_else(String::new, |dir| dir.display().to_string())
}

// ---------------------------------------------------------------------------
// The slot codec.

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

// ---------------------------------------------------------------------------
// Recovery and cadence decisions (pure).

/// What a partition's files say, after the recovery rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// The position to seed the shard with.
    pub(crate) position: ConsumerPosition,
    /// The slot holding the newest valid record, if any: it stays the anchor
    /// while priming writes the other slot.
    pub(crate) newest_slot: Option<usize>,
    /// The newest valid record's generation (0 when none).
    pub(crate) generation: u64,
}

/// Recovery: the newest valid slot wins (two invalid slots mean frontier 0),
/// then the larger frontier of that and `consumer.offset` wins.
pub(crate) fn recover(
    slots: &[Result<SlotRecord, SlotError>; SLOT_COUNT],
    offset_frontier: Option<u64>,
) -> Recovered {
    let newest = slots
        .iter()
        .enumerate()
        .filter_map(|(index, slot)| slot.as_ref().ok().map(|record| (index, record)))
        .max_by_key(|(_, record)| record.generation);
    let (mut position, newest_slot, generation) = match newest {
        Some((index, record)) => (record.position.clone(), Some(index), record.generation),
        None => (ConsumerPosition::default(), None, 0),
    };
    if let Some(frontier) = offset_frontier.filter(|&frontier| frontier < OFFSET_LIMIT) {
        position.raise_frontier(frontier);
    }
    Recovered {
        position,
        newest_slot,
        generation,
    }
}

/// Where in each durability interval a partition is written out: a stable
/// hash of its directory picks one of the interval's ticks, so writeouts
/// spread evenly over ticks.
pub(crate) fn writeout_phase(dir: &Path, config: &ConsumerStateConfig) -> Duration {
    let tick = config.tick_effective().as_nanos().max(1);
    let ticks = (config.durable_interval.as_nanos() / tick).max(1);
    let phase = u128::from(fnv1a(dir.as_os_str().as_encoded_bytes())) % ticks;
    duration_from_nanos(phase * tick)
}

/// The first writeout point after `now`: points lie at
/// `epoch + phase + k * durable_interval`.
fn next_writeout(epoch: Instant, phase: Duration, interval: Duration, now: Instant) -> Instant {
    let base = epoch + phase;
    if now < base {
        return base;
    }
    let elapsed = now.duration_since(base).as_nanos();
    let intervals = elapsed / interval.as_nanos() + 1;
    base + duration_from_nanos(intervals * interval.as_nanos())
}

fn duration_from_nanos(nanos: u128) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

// ---------------------------------------------------------------------------
// The store.

/// Tells the store that a partition's position changed (cheap: an atomic flag).
#[derive(Clone, Debug)]
pub struct StateTicket {
    touched: Arc<AtomicBool>,
}

impl StateTicket {
    /// Marks the partition for the next tick's window write.
    pub fn touched(&self) {
        self.touched.store(true, Ordering::Release);
    }
}

/// Persists each attached partition's position on the two cadences.
pub struct ConsumerStateStore {
    disk: Arc<dyn Disk>,
    config: ConsumerStateConfig,
    inner: Mutex<Inner>,
}

impl fmt::Debug for ConsumerStateStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("ConsumerStateStore")
            .field("config", &self.config)
            .field("partitions", &inner.partitions.len())
            .field("handles_open", &inner.handles_open)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// The first tick's time: writeout points are counted from it, so a
    /// run driven by explicit instants is deterministic.
    epoch: Option<Instant>,
    partitions: HashMap<PathBuf, Partition>,
    /// `consumer.ahead` handles held, at most `config.handles_max`.
    handles_open: usize,
    /// Counter for least-recently-touched ordering.
    use_counter: u64,
}

/// One attached partition.
#[derive(Debug)]
struct Partition {
    source: Weak<dyn PositionSource>,
    touched: Arc<AtomicBool>,
    /// The held `consumer.ahead` handle (None after eviction or a latch).
    file: Option<FileHandle>,
    /// The slot holding the newest durable record; never written.
    anchor_slot: usize,
    anchor_generation: u64,
    /// The newest position written to the file (window, or anchor when
    /// `unsynced` is false).
    written: ConsumerPosition,
    /// The window holds a record not yet written out.
    unsynced: bool,
    /// What `consumer.offset` holds, as far as this process knows.
    offset_frontier: u64,
    offset_levelled_at: Option<Instant>,
    phase: Duration,
    next_writeout: Option<Instant>,
    last_used: u64,
    /// A disk error (or a malformed position) stopped all writes for it.
    latched: bool,
    truncation_warned: bool,
}

impl Partition {
    fn window_slot(&self) -> usize {
        1 - self.anchor_slot
    }
}

/// The loaded state of a partition's files.
#[derive(Debug)]
struct Loaded {
    file: FileHandle,
    ahead_created: bool,
    ahead_size: u64,
    offset_frontier: Option<u64>,
    recovered: Recovered,
}

impl ConsumerStateStore {
    /// A store writing through `disk`.
    ///
    /// # Panics
    /// If `config` is out of range (see [`ConsumerStateConfig`]).
    pub fn new(disk: Arc<dyn Disk>, config: ConsumerStateConfig) -> Arc<Self> {
        config.assert_valid();
        Arc::new(Self {
            disk,
            config,
            inner: Mutex::new(Inner::default()),
        })
    }

    /// The store's configuration.
    pub fn config(&self) -> &ConsumerStateConfig {
        &self.config
    }

    /// Loads (primes) the partition's state from `<dir>/consumer.ahead` and
    /// `<dir>/consumer.offset` (larger frontier wins) and registers `source`
    /// for the cadences. Returns the position to seed the shard with and a
    /// ticket the service touches after every settle.
    ///
    /// Priming extends `consumer.ahead` to 8 KiB, writes the position into
    /// the slot that does not hold the newest valid record and writes it out
    /// (fdatasync, and a directory sync for new files). The directory must
    /// exist; it is never created here. Attaching an attached directory
    /// first writes out the old registration, then loads again; a latched
    /// one stays latched (loaded, never written).
    ///
    /// # Errors
    /// [`StateError::Io`] when the files cannot be opened or read (the
    /// position is unknown). A failure while priming writes is not an error:
    /// the partition is latched (logged) and its position still returned.
    pub fn attach(
        &self,
        dir: &Path,
        source: Weak<dyn PositionSource>,
    ) -> Result<(ConsumerPosition, StateTicket), StateError> {
        let mut inner = self.inner.lock();
        let mut keep_latched = false;
        if let Some(mut old) = inner.partitions.remove(dir) {
            keep_latched = old.latched;
            self.flush_partition(dir, &mut old);
            if old.file.take().is_some() {
                inner.handles_open -= 1;
            }
        }
        inner.make_room(&*self.disk, self.config.handles_max - 1, None);
        let loaded = self.load(dir)?;
        log_recovery(dir, &loaded);
        let touched = Arc::new(AtomicBool::new(false));
        inner.use_counter += 1;
        let mut partition = Partition {
            source,
            touched: Arc::clone(&touched),
            file: None,
            anchor_slot: loaded.recovered.newest_slot.unwrap_or(1),
            anchor_generation: loaded.recovered.generation,
            written: loaded.recovered.position.clone(),
            unsynced: false,
            offset_frontier: loaded.offset_frontier.unwrap_or(0),
            offset_levelled_at: None,
            phase: writeout_phase(dir, &self.config),
            next_writeout: None,
            last_used: inner.use_counter,
            latched: keep_latched,
            truncation_warned: false,
        };
        if !keep_latched {
            self.prime(dir, &mut partition, &loaded);
        }
        if !partition.latched {
            partition.file = Some(loaded.file);
            inner.handles_open += 1;
        }
        inner.partitions.insert(dir.to_path_buf(), partition);
        Ok((loaded.recovered.position, StateTicket { touched }))
    }

    /// Forget a partition (topic deleted / partition moved); nothing more is
    /// written for it, not even what was touched since the last tick.
    pub fn detach(&self, dir: &Path) {
        let mut inner = self.inner.lock();
        if let Some(partition) = inner.partitions.remove(dir)
            && partition.file.is_some()
        {
            inner.handles_open -= 1;
        }
    }

    /// One cadence step at `now` (tests drive it; `spawn` runs it every tick
    /// on a thread): touched partitions get their window slot rewritten
    /// (page cache only); partitions whose writeout point has come and whose
    /// window is unsynced are written out (fdatasync), which flips the slot
    /// roles; at a writeout point `consumer.offset` is levelled if the last
    /// levelling is at least `offset_level_interval` old. A partition whose
    /// source was dropped is written out and forgotten.
    pub fn tick(&self, now: Instant) {
        let mut inner = self.inner.lock();
        let epoch = *inner.epoch.get_or_insert(now);
        let mut windows = Vec::new();
        let mut gone = Vec::new();
        for (dir, partition) in &inner.partitions {
            if partition.source.strong_count() == 0 {
                gone.push(dir.clone());
            } else if !partition.latched
                && partition.touched.swap(false, Ordering::AcqRel)
                && let Some(source) = partition.source.upgrade()
            {
                windows.push((dir.clone(), source.position()));
            }
        }
        self.write_windows(&mut inner, windows);
        let interval = self.config.durable_interval;
        let mut due = Vec::new();
        for (dir, partition) in &mut inner.partitions {
            let at = *partition
                .next_writeout
                .get_or_insert_with(|| next_writeout(epoch, partition.phase, interval, now));
            if now >= at && !partition.latched {
                partition.next_writeout =
                    Some(next_writeout(epoch, partition.phase, interval, now));
                due.push(dir.clone());
            }
        }
        self.write_out(&mut inner, &due);
        self.level_offsets(&mut inner, &due, Some(now));
        for dir in gone {
            if let Some(mut partition) = inner.partitions.remove(&dir) {
                debug!(dir = %dir.display(), "consumer position source dropped; writing out and forgetting the partition");
                self.flush_partition(&dir, &mut partition);
                if partition.file.is_some() {
                    inner.handles_open -= 1;
                }
            }
        }
        inner.close_latched();
    }

    /// Runs [`ConsumerStateStore::tick`] on a thread every effective tick
    /// until the returned worker is stopped or dropped. Stopping does not
    /// flush: call [`ConsumerStateStore::flush_all`] for that.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn spawn(self: &Arc<Self>) -> io::Result<StateWorker> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let store = Arc::clone(self);
        let period = self.config.tick_effective();
        let thread = std::thread::Builder::new()
            .name("consumer-state".to_owned())
            .spawn(move || {
                let mut next = Instant::now();
                loop {
                    let now = Instant::now();
                    store.tick(now);
                    // After a stall, tick again one period from now rather
                    // than in a burst.
                    next = (next + period).max(now);
                    let wait = next.saturating_duration_since(Instant::now());
                    // The worker stops by dropping the sender.
                    if !matches!(
                        stopped.recv_timeout(wait),
                        Err(crossbeam_channel::RecvTimeoutError::Timeout)
                    ) {
                        return;
                    }
                }
            })?;
        Ok(StateWorker {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Graceful stop: writes and fdatasyncs every attached partition's
    /// position (read from its source now, touched or not) and levels
    /// `consumer.offset`.
    ///
    /// # Errors
    /// [`StateError::NotDurable`] naming every partition that is latched
    /// (now or earlier); all others were made durable.
    pub fn flush_all(&self) -> Result<(), StateError> {
        let mut inner = self.inner.lock();
        let mut windows = Vec::new();
        for (dir, partition) in &inner.partitions {
            partition.touched.store(false, Ordering::Release);
            if !partition.latched
                && let Some(source) = partition.source.upgrade()
            {
                windows.push((dir.clone(), source.position()));
            }
        }
        self.write_windows(&mut inner, windows);
        let dirs: Vec<PathBuf> = inner.partitions.keys().cloned().collect();
        self.write_out(&mut inner, &dirs);
        self.level_offsets(&mut inner, &dirs, None);
        inner.close_latched();
        let mut failed: Vec<PathBuf> = inner
            .partitions
            .iter()
            .filter(|(_, partition)| partition.latched)
            .map(|(dir, _)| dir.clone())
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            failed.sort();
            Err(StateError::NotDurable { dirs: failed })
        }
    }

    /// `consumer.ahead` handles held now (at most `config.handles_max`).
    pub fn handles_open(&self) -> usize {
        self.inner.lock().handles_open
    }

    /// Whether the partition is attached and latched by a disk error.
    pub fn is_latched(&self, dir: &Path) -> bool {
        self.inner
            .lock()
            .partitions
            .get(dir)
            .is_some_and(|partition| partition.latched)
    }

    /// Opens and reads both files; no writes.
    fn load(&self, dir: &Path) -> Result<Loaded, StateError> {
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
    fn read_offset_file(&self, dir: &Path) -> io::Result<Option<u64>> {
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
    fn prime(&self, dir: &Path, partition: &mut Partition, loaded: &Loaded) {
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

    /// Writes each (partition, position) into its window slot. Handles are
    /// reopened (evicting others) first, while no write is in flight, so an
    /// eviction never writes out a window whose write is still pending; then
    /// the writes are all issued before any is waited for, so a backend with
    /// storage threads runs them side by side. A partition whose handle was
    /// evicted again by a later reopen of this tick is written out at once
    /// through a short-lived handle.
    fn write_windows(&self, inner: &mut Inner, windows: Vec<(PathBuf, ConsumerPosition)>) {
        let mut changed = Vec::new();
        for (dir, position) in windows {
            inner.use_counter += 1;
            let use_counter = inner.use_counter;
            let Some(partition) = inner.partitions.get_mut(&dir) else {
                continue;
            };
            partition.last_used = use_counter;
            if position != partition.written && check_position(&dir, partition, &position) {
                changed.push((dir, position));
            }
        }
        for (dir, _) in &changed {
            self.reopen(inner, dir);
        }
        let mut writes = Vec::new();
        for (dir, position) in changed {
            let Some(partition) = inner.partitions.get_mut(&dir) else {
                continue;
            };
            match &partition.file {
                Some(file) if !partition.latched => {
                    let (bytes, truncated) =
                        encode_slot(partition.anchor_generation + 1, &position);
                    let at = (partition.window_slot() * SLOT_BYTES) as u64;
                    let completion = file.write_at(at, IoBuf::from_slice(&bytes[..]));
                    writes.push((dir, position, truncated, completion));
                }
                _ => flush_one(&*self.disk, &dir, partition, Some(position)),
            }
        }
        for (dir, position, truncated, completion) in writes {
            let Some(partition) = inner.partitions.get_mut(&dir) else {
                continue;
            };
            match completion.wait() {
                Ok(_) => {
                    warn_truncation(&dir, partition, truncated);
                    partition.written = position;
                    partition.unsynced = true;
                }
                Err(error) => latch(&dir, partition, "window write", &error),
            }
        }
    }

    /// Reopens an evicted partition's file within the handle bound (never
    /// creating it: a missing file means the directory was replaced, and
    /// the partition is latched rather than writing into the new one).
    fn reopen(&self, inner: &mut Inner, dir: &Path) {
        let needed = inner
            .partitions
            .get(dir)
            .is_some_and(|partition| partition.file.is_none() && !partition.latched);
        if !needed {
            return;
        }
        inner.make_room(&*self.disk, self.config.handles_max - 1, Some(dir));
        let Some(partition) = inner.partitions.get_mut(dir) else {
            return;
        };
        match self
            .disk
            .open(&dir.join(AHEAD_FILE_NAME), OpenOptions::EXISTING)
        {
            Ok(file) => {
                partition.file = Some(file);
                inner.handles_open += 1;
            }
            Err(error) => latch(dir, partition, "reopening consumer.ahead", &error),
        }
    }

    /// Writes the source's current position into the window if it changed
    /// and writes out an unsynced window, for one partition: re-attach and
    /// a dropped source.
    fn flush_partition(&self, dir: &Path, partition: &mut Partition) {
        partition.touched.store(false, Ordering::Release);
        let position = partition.source.upgrade().map(|source| source.position());
        flush_one(&*self.disk, dir, partition, position);
    }

    /// Writes out (fdatasync) every listed partition holding an unsynced
    /// window; the fdatasyncs are all issued before any is waited for.
    fn write_out(&self, inner: &mut Inner, dirs: &[PathBuf]) {
        let mut syncs = Vec::new();
        for dir in dirs {
            if let Some(partition) = inner.partitions.get(dir)
                && partition.unsynced
                && !partition.latched
                && let Some(file) = &partition.file
            {
                syncs.push((dir, file.fdatasync()));
            }
        }
        for (dir, completion) in syncs {
            if let Some(partition) = inner.partitions.get_mut(dir) {
                finish_writeout(dir, partition, completion.wait());
            }
        }
    }

    /// Overwrites `consumer.offset` in place (write + fdatasync) with the
    /// durable frontier for every listed partition where it differs, and,
    /// on a cadence (`now` given), whose last levelling is at least
    /// `offset_level_interval` old; at close (`now` None) regardless. At
    /// most [`OFFSET_LEVELS_IN_FLIGHT_MAX`] run at once. The file exists
    /// since priming: a missing one means the directory was replaced, which
    /// latches.
    fn level_offsets(&self, inner: &mut Inner, dirs: &[PathBuf], now: Option<Instant>) {
        let interval = self.config.offset_level_interval;
        let wanted: Vec<(&PathBuf, u64)> = dirs
            .iter()
            .filter_map(|dir| {
                let partition = inner.partitions.get(dir)?;
                let frontier = partition.written.frontier;
                let due = now.is_none_or(|now| {
                    partition
                        .offset_levelled_at
                        .is_none_or(|at| now.saturating_duration_since(at) >= interval)
                });
                let wanted = due
                    && !partition.latched
                    && !partition.unsynced
                    && frontier != partition.offset_frontier;
                wanted.then_some((dir, frontier))
            })
            .collect();
        for batch in wanted.chunks(OFFSET_LEVELS_IN_FLIGHT_MAX) {
            // Each handle is kept until its write and fdatasync completed.
            let pending: Vec<_> = batch
                .iter()
                .map(|&(dir, frontier)| {
                    let started = self
                        .disk
                        .open(&dir.join(OFFSET_FILE_NAME), OpenOptions::EXISTING)
                        .map(|file| {
                            let bytes = IoBuf::from_slice(&frontier.to_be_bytes());
                            let completion = file.write_and_sync(0, bytes);
                            (file, completion)
                        });
                    (dir, frontier, started)
                })
                .collect();
            for (dir, frontier, started) in pending {
                let result = started.and_then(|(_file, completion)| completion.wait());
                let Some(partition) = inner.partitions.get_mut(dir) else {
                    continue;
                };
                match result {
                    Ok(_) => {
                        partition.offset_frontier = frontier;
                        if now.is_some() {
                            partition.offset_levelled_at = now;
                        }
                    }
                    Err(error) => latch(dir, partition, "levelling consumer.offset", &error),
                }
            }
        }
    }
}

impl Inner {
    /// Evicts least recently touched partitions (never `spare`) until at
    /// most `keep` handles are held, writing each out before closing it.
    fn make_room(&mut self, disk: &dyn Disk, keep: usize, spare: Option<&Path>) {
        while self.handles_open > keep {
            let victim = self
                .partitions
                .iter()
                .filter(|(dir, partition)| partition.file.is_some() && Some(dir.as_path()) != spare)
                .min_by_key(|(_, partition)| partition.last_used)
                .map(|(dir, _)| dir.clone());
            let Some(victim) = victim else {
                return;
            };
            if let Some(partition) = self.partitions.get_mut(&victim) {
                debug!(dir = %victim.display(), "closing consumer.ahead to stay within the handle bound");
                // Only the window already written is made durable here; what
                // the source reports now is written at its next touch.
                flush_one(disk, &victim, partition, None);
                // A closed partition has nothing waiting in its window, or
                // is latched and written no more.
                assert!(
                    partition.latched || !partition.unsynced,
                    "evicted an unsynced window"
                );
                partition.file = None;
                self.handles_open -= 1;
            }
        }
    }

    /// Drops the handles of latched partitions: nothing is written to them.
    fn close_latched(&mut self) {
        for partition in self.partitions.values_mut() {
            if partition.latched && partition.file.take().is_some() {
                self.handles_open -= 1;
            }
        }
    }
}

/// Rejects (and latches on) a malformed position from a source: a bug in
/// the source, which must not stop the store or the other partitions.
fn check_position(dir: &Path, partition: &mut Partition, position: &ConsumerPosition) -> bool {
    if position.is_well_formed() {
        return true;
    }
    error!(dir = %dir.display(), frontier = position.frontier, "consumer position source reported a malformed position; this partition's state is no longer persisted");
    partition.latched = true;
    false
}

/// Writes `position` (when given and different from what was written) into
/// the window and writes it out; otherwise writes out an unsynced window.
/// Does nothing for a latched partition.
fn flush_one(
    disk: &dyn Disk,
    dir: &Path,
    partition: &mut Partition,
    position: Option<ConsumerPosition>,
) {
    if partition.latched {
        return;
    }
    let changed = position.filter(|position| *position != partition.written);
    let Some(position) = changed else {
        if partition.unsynced
            && let Some(file) = &partition.file
        {
            let result = file.fdatasync().wait();
            finish_writeout(dir, partition, result);
        }
        return;
    };
    if !check_position(dir, partition, &position) {
        return;
    }
    // An evicted partition is reopened for this one write, without counting
    // against the bound: the handle is dropped on return.
    let file = match &partition.file {
        Some(file) => Ok(file.clone()),
        None => disk.open(&dir.join(AHEAD_FILE_NAME), OpenOptions::EXISTING),
    };
    let (bytes, truncated) = encode_slot(partition.anchor_generation + 1, &position);
    let at = (partition.window_slot() * SLOT_BYTES) as u64;
    let result = file.and_then(|file| {
        file.write_and_sync(at, IoBuf::from_slice(&bytes[..]))
            .wait()
    });
    match result {
        Ok(_) => {
            warn_truncation(dir, partition, truncated);
            partition.written = position;
            partition.unsynced = true;
            finish_writeout(dir, partition, Ok(()));
        }
        Err(error) => latch(dir, partition, "writing out", &error),
    }
}

/// After a writeout's fdatasync: on success the window becomes the anchor;
/// on failure the partition latches (an fdatasync is never retried).
fn finish_writeout(dir: &Path, partition: &mut Partition, result: io::Result<()>) {
    match result {
        Ok(()) => {
            partition.anchor_slot = partition.window_slot();
            partition.anchor_generation += 1;
            partition.unsynced = false;
        }
        Err(error) => latch(dir, partition, "fdatasync", &error),
    }
}

/// Stops all writes for the partition, logging once. Its handle is dropped
/// by the store afterwards (`Inner::close_latched`).
fn latch(dir: &Path, partition: &mut Partition, op: &str, error: &io::Error) {
    if !partition.latched {
        error!(dir = %dir.display(), op, %error, "consumer state disk failure; this partition's acks are no longer persisted until it is attached again (a restart redelivers them)");
    }
    partition.latched = true;
}

fn warn_truncation(dir: &Path, partition: &mut Partition, truncated: bool) {
    if truncated && !partition.truncation_warned {
        warn!(dir = %dir.display(), "acked-ahead set does not fit a consumer.ahead slot; only its lowest offsets are persisted (the rest would be redelivered after a restart)");
    }
    partition.truncation_warned = truncated;
}

fn log_recovery(dir: &Path, loaded: &Loaded) {
    if loaded.recovered.newest_slot.is_none() && loaded.ahead_size > 0 {
        warn!(
            dir = %dir.display(),
            frontier = loaded.recovered.position.frontier,
            "consumer.ahead holds no valid slot; recovering the frontier from consumer.offset alone, or 0 (messages above it are redelivered)"
        );
    }
}

/// The thread started by [`ConsumerStateStore::spawn`]; stops on drop or
/// [`StateWorker::stop`].
#[derive(Debug)]
pub struct StateWorker {
    stop: Option<crossbeam_channel::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl StateWorker {
    /// Stops the thread and waits for its current tick to end.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            error!("consumer state thread panicked");
        }
    }
}

impl Drop for StateWorker {
    fn drop(&mut self) {
        self.shut_down();
    }
}
