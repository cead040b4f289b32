//! What a partition already stores, so a record sent twice is stored once.
//!
//! Two kinds of provenance make a record recognisable:
//! - an origin (an ingress WAL's id and the record's sequence in it): a
//!   dispatcher that re-sends a record after a crash, or retries a commit
//!   whose answer it never saw, sends the same origin again;
//! - an idempotency key from the producer: a produce retried with the same
//!   key within the partition's window, through any node.
//!
//! The memory is rebuilt at the first commit that carries provenance after
//! an open, from the provenance stored in the newest records (at most
//! [`REBUILD_RECORDS`] of them, and from the segments that hold the newest
//! [`REBUILD_BYTES`]), so it survives restarts and travels with the
//! partition's files. It is bounded: an origin forgets the sequences
//! below the floor its sender announces (the sender never sends them
//! again), and every table has a cap past which the oldest entries go.
//! Forgetting can only let a duplicate through; it never drops a record.

use hashbrown::HashTable;
use rustc_hash::FxHashMap;

use crate::record::{CommitRecord, ORIGIN_ID_BYTES, Origin, Record};
use crate::seq_ranges::SeqRanges;
use crate::stored_keys::StoredKeys;

/// How many of a partition's newest records the memory is rebuilt from
/// after an open. A record re-sent after more than this many newer records
/// were committed to its partition is stored again.
pub const REBUILD_RECORDS: u64 = 262_144;

/// How many of a partition's newest bytes the memory is rebuilt from after
/// an open, rounded out to the segment that holds the byte furthest back:
/// the rebuild runs under the produce lock, so its read is bounded by bytes
/// as well as records (262,144 records of 10 KB would be 2.6 GB).
pub const REBUILD_BYTES: u64 = 64 << 20;

/// Most sequences remembered per origin. An origin's sequences above its
/// floor are the records its dispatcher has in flight, which its window
/// caps far below this.
pub const ORIGIN_SEQS_MAX: usize = 131_072;

/// Most origins remembered; the one used least recently goes first.
pub const ORIGINS_MAX: usize = 1_024;

/// Most idempotency keys remembered; the oldest goes first, which shortens
/// the window only under a rate of keyed produces past this many per
/// window.
pub const IDEMPOTENCY_KEYS_MAX: usize = 1_048_576;

/// The idempotency window a log starts with: two minutes.
pub const IDEMPOTENCY_WINDOW_MS_DEFAULT: u64 = 120_000;

#[derive(Debug, Default)]
struct OriginSeen {
    floor: u64,
    /// Kept as runs: a fan-out bucket is one run of parent offsets, so an
    /// origin's memory is an entry or two however many records it sent.
    seqs: SeqRanges,
    last_used: u64,
}

/// Origins are hashed with FxHash rather than the standard SipHash: an
/// origin id is a SHA-256 digest (fan-out) or a WAL's random id, made by
/// the node, never chosen by a client, so flooding one hash bucket is not
/// an attack anyone can mount, and SipHash cost several per cent of the
/// fan-out path's CPU (a lookup per record, twice per commit).
type OriginMap<V> = FxHashMap<[u8; ORIGIN_ID_BYTES], V>;

/// The provenance a partition stores, under its writer lock.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    origins: OriginMap<OriginSeen>,
    // Idempotency keys are chosen by producers: SipHash stays.
    keys: StoredKeys,
    uses: u64,
}

/// Provenance claimed by the records planned in one commit, so a record
/// given twice in the same run is stored once too.
#[derive(Debug, Default)]
pub(crate) struct RunClaims<'a> {
    origins: OriginMap<SeqRanges>,
    /// Indexes into `claimed_keys`, by the keys' hash.
    keys: HashTable<usize>,
    /// The keys claimed, in order.
    claimed_keys: Vec<ClaimedKey<'a>>,
}

/// An idempotency key claimed in a run, with its hash in [`Seen`]'s key
/// table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClaimedKey<'a> {
    key: &'a [u8],
    hash: u64,
}

impl<'a> RunClaims<'a> {
    /// Claims for a run of at most `records` records, made at their full
    /// size at once rather than grown record by record.
    pub(crate) fn with_capacity(records: usize) -> Self {
        Self {
            origins: OriginMap::default(),
            keys: HashTable::with_capacity(records),
            claimed_keys: Vec::with_capacity(records),
        }
    }

    /// The idempotency keys claimed, in the order of the records that
    /// claimed them (for [`Seen::remember_all`]).
    pub(crate) fn into_keys(self) -> Vec<ClaimedKey<'a>> {
        self.claimed_keys
    }
}

impl Seen {
    /// Whether `record` is already stored, or claimed earlier in the run:
    /// its origin is remembered, or its idempotency key was stored within
    /// `window_ms` before `now_ms`. Claims the record's provenance in `run`
    /// when it is not.
    pub(crate) fn already_stored<'a>(
        &self,
        record: &CommitRecord<'a>,
        now_ms: u64,
        window_ms: u64,
        run: &mut RunClaims<'a>,
    ) -> bool {
        if let Some(origin) = record.origin {
            let stored = self
                .origins
                .get(&origin.id)
                .is_some_and(|seen| seen.seqs.contains(origin.seq));
            let claimed = run
                .origins
                .get(&origin.id)
                .is_some_and(|claims| claims.contains(origin.seq));
            if stored || claimed {
                return true;
            }
        }
        let key = record.idempotency_key;
        let hash = (!key.is_empty()).then(|| self.keys.hash(key));
        if let Some(hash) = hash {
            let stored = self
                .keys
                .stored_ms(key, hash)
                .is_some_and(|stored_ms| now_ms < stored_ms.saturating_add(window_ms));
            let claims = &run.claimed_keys;
            let claimed = run
                .keys
                .find(hash, |&index| {
                    claims[index].hash == hash && claims[index].key == key
                })
                .is_some();
            if stored || claimed {
                return true;
            }
        }
        if let Some(origin) = record.origin {
            run.origins.entry(origin.id).or_default().insert(origin.seq);
        }
        if let Some(hash) = hash {
            let claims = &run.claimed_keys;
            run.keys
                .insert_unique(hash, claims.len(), |&index| claims[index].hash);
            run.claimed_keys.push(ClaimedKey { key, hash });
        }
        false
    }

    /// Remembers the provenance of a record stored at `committed_at_ms`.
    pub(crate) fn remember(
        &mut self,
        origin: Option<Origin>,
        idempotency_key: &[u8],
        committed_at_ms: u64,
    ) {
        if let Some(origin) = origin {
            self.remember_origin(origin);
        }
        if !idempotency_key.is_empty() {
            self.remember_key(idempotency_key, committed_at_ms);
        }
    }

    /// Remembers the provenance of stored records, as
    /// [`Self::remember`] for each in turn would: the origin of a stretch
    /// of records from one origin is looked up once for all of them, and
    /// an idempotency key found in `claimed` (the claims of the run that
    /// planned `records`, [`RunClaims::into_keys`]) is not hashed again.
    pub(crate) fn remember_all(
        &mut self,
        records: &[CommitRecord<'_>],
        claimed: &[ClaimedKey<'_>],
    ) {
        let mut rest = records;
        while let Some(first) = rest.first() {
            let Some(origin) = first.origin else {
                rest = &rest[1..];
                continue;
            };
            let stretch = rest
                .iter()
                .take_while(|record| record.origin.is_some_and(|o| o.id == origin.id))
                .count();
            let (same, after) = rest.split_at(stretch);
            self.remember_origins(origin.id, same.iter().filter_map(|record| record.origin));
            rest = after;
        }
        let mut claimed = claimed.iter().peekable();
        for record in records {
            let key = record.idempotency_key;
            if key.is_empty() {
                continue;
            }
            // Claims come in the order of the records they let through.
            let hash = match claimed.next_if(|claim| claim.key == key) {
                Some(claim) => claim.hash,
                None => self.keys.hash(key),
            };
            self.keys
                .insert(key, hash, record.committed_at_ms, IDEMPOTENCY_KEYS_MAX);
        }
    }

    /// Remembers a stored record, as read back from the log.
    pub(crate) fn remember_record(&mut self, record: &Record) {
        self.remember(
            record.origin,
            &record.idempotency_key,
            record.committed_at_ms,
        );
    }

    /// Forgets idempotency keys stored `window_ms` or more before `now_ms`.
    pub(crate) fn expire_keys(&mut self, now_ms: u64, window_ms: u64) {
        self.keys.expire(now_ms, window_ms);
    }

    /// Origins and idempotency keys remembered, for tests and statistics.
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.origins.len(), self.keys.len())
    }

    fn remember_origin(&mut self, origin: Origin) {
        self.remember_origins(origin.id, std::iter::once(origin));
    }

    /// Remembers `origins`, all of origin `id`, in order. Raising the
    /// floor, adding and capping commute with each other (what is kept is
    /// the highest sequences at or above the highest floor), so they are
    /// done once for the whole stretch.
    fn remember_origins(
        &mut self,
        id: [u8; ORIGIN_ID_BYTES],
        origins: impl Iterator<Item = Origin>,
    ) {
        self.uses += 1;
        let uses = self.uses;
        if !self.origins.contains_key(&id) && self.origins.len() >= ORIGINS_MAX {
            self.forget_least_used_origin();
        }
        let seen = self.origins.entry(id).or_default();
        seen.last_used = uses;
        for origin in origins {
            if origin.floor > seen.floor {
                seen.floor = origin.floor;
                seen.seqs.forget_below(origin.floor);
            }
            if origin.seq >= seen.floor {
                seen.seqs.insert(origin.seq);
            }
        }
        seen.seqs.keep_highest(ORIGIN_SEQS_MAX as u64);
    }

    fn forget_least_used_origin(&mut self) {
        let least = self
            .origins
            .iter()
            .min_by_key(|(_, seen)| seen.last_used)
            .map(|(id, _)| *id);
        if let Some(id) = least {
            self.origins.remove(&id);
        }
    }

    fn remember_key(&mut self, key: &[u8], committed_at_ms: u64) {
        let hash = self.keys.hash(key);
        self.keys
            .insert(key, hash, committed_at_ms, IDEMPOTENCY_KEYS_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(id: u8, seq: u64, floor: u64) -> Origin {
        Origin {
            id: [id; ORIGIN_ID_BYTES],
            seq,
            floor,
        }
    }

    fn with_origin(origin: Origin) -> CommitRecord<'static> {
        CommitRecord {
            origin: Some(origin),
            ..CommitRecord::new(b"", b"p", 0)
        }
    }

    fn with_key(key: &'static [u8]) -> CommitRecord<'static> {
        CommitRecord {
            idempotency_key: key,
            ..CommitRecord::new(b"", b"p", 0)
        }
    }

    #[test]
    fn a_remembered_origin_is_stored_and_another_sequence_is_not() {
        let mut seen = Seen::default();
        seen.remember(Some(origin(1, 10, 0)), b"", 0);
        let mut run = RunClaims::default();
        assert!(seen.already_stored(&with_origin(origin(1, 10, 0)), 0, 0, &mut run));
        assert!(!seen.already_stored(&with_origin(origin(1, 11, 0)), 0, 0, &mut run));
        assert!(!seen.already_stored(&with_origin(origin(2, 10, 0)), 0, 0, &mut run));
    }

    #[test]
    fn the_same_origin_twice_in_one_run_is_stored_once() {
        let seen = Seen::default();
        let mut run = RunClaims::default();
        let record = with_origin(origin(1, 5, 0));
        assert!(!seen.already_stored(&record, 0, 0, &mut run));
        assert!(seen.already_stored(&record, 0, 0, &mut run));
    }

    #[test]
    fn the_same_idempotency_key_twice_in_one_run_is_stored_once() {
        let seen = Seen::default();
        let mut run = RunClaims::default();
        assert!(!seen.already_stored(&with_key(b"order-1"), 0, 120_000, &mut run));
        assert!(!seen.already_stored(&with_key(b"order-2"), 0, 120_000, &mut run));
        assert!(seen.already_stored(&with_key(b"order-1"), 0, 120_000, &mut run));
    }

    #[test]
    fn a_floor_forgets_the_sequences_below_it_and_never_skips_them() {
        let mut seen = Seen::default();
        for seq in 0..10 {
            seen.remember(Some(origin(1, seq, 0)), b"", 0);
        }
        seen.remember(Some(origin(1, 10, 8)), b"", 0);
        let mut run = RunClaims::default();
        // Below the floor: the sender promised never to send these again;
        // one that comes anyway is stored (a duplicate at worst, never a
        // loss).
        assert!(!seen.already_stored(&with_origin(origin(1, 7, 8)), 0, 0, &mut run));
        assert!(seen.already_stored(&with_origin(origin(1, 9, 8)), 0, 0, &mut run));
        assert_eq!(seen.origins[&[1; ORIGIN_ID_BYTES]].seqs.len(), 3);
        assert_eq!(seen.origins[&[1; ORIGIN_ID_BYTES]].seqs.runs(), 1);
    }

    #[test]
    fn an_origin_keeps_at_most_its_cap_of_sequences() {
        let mut seen = Seen::default();
        for seq in 0..(ORIGIN_SEQS_MAX as u64 + 10) {
            seen.remember(Some(origin(1, seq, 0)), b"", 0);
        }
        let seqs = &seen.origins[&[1; ORIGIN_ID_BYTES]].seqs;
        assert_eq!(seqs.len(), ORIGIN_SEQS_MAX as u64);
        assert_eq!(seqs.first(), Some(10));
    }

    #[test]
    fn the_least_recently_used_origin_goes_past_the_cap() {
        let mut seen = Seen::default();
        for id in 0..ORIGINS_MAX {
            let mut origin_id = [0; ORIGIN_ID_BYTES];
            origin_id[..8].copy_from_slice(&(id as u64).to_be_bytes());
            seen.remember(
                Some(Origin {
                    id: origin_id,
                    seq: 1,
                    floor: 0,
                }),
                b"",
                0,
            );
        }
        // Origin 0 is used again, so origin 1 is the least recent.
        seen.remember(Some(origin(0, 2, 0)), b"", 0);
        seen.remember(Some(origin(0xff, 1, 0)), b"", 0);
        assert_eq!(seen.sizes().0, ORIGINS_MAX);
        let mut one = [0; ORIGIN_ID_BYTES];
        one[..8].copy_from_slice(&1u64.to_be_bytes());
        assert!(!seen.origins.contains_key(&one));
        assert!(seen.origins.contains_key(&[0; ORIGIN_ID_BYTES]));
    }

    /// What a `Seen` holds, leaving out the use counters.
    fn held(seen: &Seen) -> Vec<([u8; ORIGIN_ID_BYTES], u64, SeqRanges)> {
        let mut held: Vec<_> = seen
            .origins
            .iter()
            .map(|(id, origin)| (*id, origin.floor, origin.seqs.clone()))
            .collect();
        held.sort_by_key(|(id, ..)| *id);
        held
    }

    #[test]
    fn remembering_records_together_keeps_what_remembering_each_keeps() {
        // Two origins interleaved, floors rising inside a stretch, a
        // sequence below a raised floor, a repeat, and idempotency keys.
        let records = [
            with_origin(origin(1, 5, 0)),
            with_origin(origin(1, 6, 0)),
            with_origin(origin(1, 9, 6)),
            with_origin(origin(1, 4, 6)),
            with_origin(origin(2, 100, 100)),
            with_key(b"k1"),
            CommitRecord {
                idempotency_key: b"k2",
                ..with_origin(origin(2, 101, 100))
            },
            with_origin(origin(1, 9, 9)),
            with_origin(origin(1, 10, 9)),
        ];
        let mut each = Seen::default();
        for record in &records {
            each.remember(
                record.origin,
                record.idempotency_key,
                record.committed_at_ms,
            );
        }
        let mut together = Seen::default();
        together.remember_all(&records, &[]);
        assert_eq!(held(&together), held(&each));
        assert_eq!(together.sizes(), each.sizes());
        assert_eq!(together.sizes(), (2, 2));
        let ones = &together.origins[&[1; ORIGIN_ID_BYTES]];
        assert_eq!((ones.floor, ones.seqs.len(), ones.seqs.runs()), (9, 2, 1));
    }

    #[test]
    fn keys_remembered_with_their_claims_are_found_as_without() {
        let records = [with_key(b"k1"), with_key(b"k2"), with_key(b"k3")];
        let mut planned = Seen::default();
        let mut run = RunClaims::default();
        for record in &records {
            assert!(!planned.already_stored(record, 0, 100, &mut run));
        }
        let claims = run.into_keys();
        planned.remember_all(&records, &claims);
        // A record whose key is not the next claim is hashed again.
        let mut mismatched = Seen::default();
        let mut run = RunClaims::default();
        for record in &records[1..] {
            assert!(!mismatched.already_stored(record, 0, 100, &mut run));
        }
        let claims = run.into_keys();
        mismatched.remember_all(&records, &claims);
        for seen in [&planned, &mismatched] {
            assert_eq!(seen.sizes().1, 3);
            let mut run = RunClaims::default();
            for record in &records {
                assert!(seen.already_stored(record, 50, 100, &mut run));
            }
        }
    }

    #[test]
    fn an_idempotency_key_is_stored_within_its_window_only() {
        let mut seen = Seen::default();
        seen.remember(None, b"order-1", 1_000);
        let mut run = RunClaims::default();
        assert!(seen.already_stored(&with_key(b"order-1"), 1_000 + 119_999, 120_000, &mut run));
        let mut run = RunClaims::default();
        assert!(!seen.already_stored(&with_key(b"order-1"), 1_000 + 120_000, 120_000, &mut run));
        assert!(!seen.already_stored(&with_key(b"order-2"), 1_000, 120_000, &mut run));
    }

    #[test]
    fn expired_keys_are_forgotten_and_a_key_stored_again_survives_its_old_entry() {
        let mut seen = Seen::default();
        seen.remember(None, b"a", 0);
        seen.remember(None, b"b", 50);
        seen.expire_keys(100, 100);
        assert_eq!(seen.sizes().1, 1);
        seen.remember(None, b"b", 200);
        seen.expire_keys(160, 100);
        let mut run = RunClaims::default();
        assert!(seen.already_stored(&with_key(b"b"), 250, 100, &mut run));
    }
}
