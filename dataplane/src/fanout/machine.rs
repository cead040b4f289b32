//! One cursor's decisions, free of I/O: a state machine fed events (a file
//! loaded, a slab read, a bucket committed, time passed) that answers with
//! actions for its runtime to carry out. The runtime (`super::runtime`)
//! does the reading, committing and writing; tests drive this directly with
//! made-up events and a made-up clock.
//!
//! The loop, for one (parent partition, child) pair:
//! 1. Load the cursor file. A file of this link's epoch gives the position.
//!    Anything else (no file, another epoch, damage) means anchoring at the
//!    attach point, which overwrites the file, so it waits until the leader
//!    confirms the epoch is current (deferred 1 s while it does not).
//! 2. Read a slab of committed parent records from the position. For a
//!    delay child, cut the slab at the first record not yet due; when the
//!    head itself is not due, sleep until it is (at most 30 s at a time).
//! 3. Re-key each record into the child's partitions and bucket them per
//!    child partition, slab order kept. Commit the buckets, at most 16 at
//!    once. A failed bucket is retried from memory after 1 s; the others
//!    are not sent again.
//! 4. Once every bucket is acknowledged, write the slab's end into the
//!    cursor file (one write, one fdatasync), then read the next slab.
//!
//! A crash between 3 and 4 repeats the slab (duplicates in the child);
//! nothing ever moves the position past a record not yet committed to the
//! child, so there are no gaps. Offsets that retention removed before the
//! cursor read them, and records the parent log cannot serve, are skipped
//! and counted as dropped.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

use bytes::Bytes;
use narad_meta::AttachEpoch;

use super::cursor_file::{CursorPosition, Loaded};
use crate::ingress::partition::key_partition;

/// Limits and timings of a cursor (spec §4 and §8's `fanout.*` settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CursorConfig {
    /// Records in one slab at most (`fanout.max_batch_records`).
    pub slab_records_max: usize,
    /// Key and payload bytes in one slab at most (`fanout.max_batch_bytes`).
    pub slab_bytes_max: usize,
    /// How long a read waits for a slab to fill once one record is there
    /// (`fanout.linger_ms`).
    pub linger_ms: u64,
    /// Buckets being committed at once.
    pub buckets_in_flight: usize,
    /// Wait before a failed bucket, read, load or write is tried again.
    pub retry_ms: u64,
    /// Wait before asking again whether the epoch is current.
    pub confirm_defer_ms: u64,
    /// Longest sleep waiting for a delay child's head record to fall due,
    /// so that gauges stay fresh.
    pub due_sleep_max_ms: u64,
}

impl Default for CursorConfig {
    fn default() -> Self {
        Self {
            slab_records_max: 4_096,
            slab_bytes_max: 4 << 20,
            linger_ms: 25,
            buckets_in_flight: 16,
            retry_ms: 1_000,
            confirm_defer_ms: 1_000,
            due_sleep_max_ms: 30_000,
        }
    }
}

/// What a cursor knows of its link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkSpec {
    /// The attach epoch the link was made under.
    pub epoch: AttachEpoch,
    /// A record is due this long after its parent commit.
    pub delay_ms: u64,
    /// Where a cursor without a file of this epoch starts: the attach
    /// point of its parent partition (0 for partitions added later).
    pub start_offset: u64,
    /// The parent partition the cursor reads.
    pub parent_partition: u32,
    /// The parent's partition count.
    pub parent_partitions: u32,
    /// The child's partition count (0 for a remote child's stub).
    pub child_partitions: u32,
    /// Set for a remote child: its records go to another cluster in lanes.
    pub remote: Option<RemoteSpec>,
}

/// What a cursor knows of a remote child's link (spec §4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteSpec {
    /// 1 to 8 lanes; a keyed record's lane is the FNV-32a hash of its key,
    /// a keyless one's its parent offset, modulo the lanes. Each lane is
    /// one bucket of a slab and is shipped in order.
    pub lanes: u8,
    /// Offsets of this parent partition an operator chose to skip.
    pub skip: std::collections::BTreeSet<u64>,
}

/// A committed parent record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParentRecord {
    /// Its offset in the parent partition.
    pub offset: u64,
    /// Key; empty means none.
    pub key: Bytes,
    /// Payload.
    pub payload: Bytes,
    /// When the parent committed it, Unix ms; never decreases along a
    /// partition.
    pub committed_at_ms: u64,
}

/// One entry of a slab.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlabEntry {
    /// A record to deliver.
    Record(ParentRecord),
    /// Offsets the parent log cannot serve (damaged); skipped and counted.
    Lost(Range<u64>),
}

/// What a read returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// Entries from the offset asked for, contiguous, maybe none; the next
    /// read starts at `next_offset`.
    Slab {
        /// The entries.
        entries: Vec<SlabEntry>,
        /// The offset after the last entry.
        next_offset: u64,
    },
    /// The offset asked for was removed by retention; the oldest kept.
    Trimmed {
        /// The partition's oldest retained offset.
        oldest_offset: u64,
    },
    /// The read failed.
    Failed(String),
}

/// Identity of one bucket commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BucketId(pub u64);

/// Records for one child partition, in slab order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Identity to report the outcome under.
    pub id: BucketId,
    /// The child partition.
    pub child_partition: u32,
    /// The records.
    pub records: Vec<ParentRecord>,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The cursor file was loaded.
    Loaded(Result<Loaded, String>),
    /// The leader answered whether the epoch is current.
    Confirmed(Result<bool, String>),
    /// A read ended.
    Read(ReadOutcome),
    /// A bucket's commit ended.
    BucketDone {
        /// The bucket.
        id: BucketId,
        /// Whether the child partition's owner committed it durably.
        committed: bool,
    },
    /// A remote child's bucket failed after its first `shipped` records
    /// were stored by the target; a retry sends only the rest.
    BucketShippedPart {
        /// The bucket.
        id: BucketId,
        /// Records at the bucket's head the target acknowledged.
        shipped: usize,
    },
    /// A remote child's cursor waiting to send failed lanes again lets
    /// them go: the wait ends in a read of the same slab from the parent's
    /// log instead (the node holds more than `remotes.max_held_bytes`).
    /// Ignored in any other state.
    Release,
    /// A cursor file write ended.
    Written(Result<(), String>),
    /// Time passed (the runtime's wake-up).
    Tick,
}

/// What the runtime is asked to do. Each action but [`Action::WakeAt`]
/// answers with exactly one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Load the cursor file → [`Event::Loaded`].
    Load,
    /// Ask the leader whether the epoch is current → [`Event::Confirmed`].
    Confirm,
    /// Read committed parent records → [`Event::Read`].
    Read {
        /// First offset.
        from: u64,
        /// Whether to linger for a fuller slab once one record is there
        /// (not for a delay child: its slab is cut by due time anyway).
        linger: bool,
    },
    /// Commit a bucket to the child → [`Event::BucketDone`].
    Commit(Bucket),
    /// Write the cursor file → [`Event::Written`]: in place, or as a new
    /// file (temp + rename) when `replace`.
    Write {
        /// What to write.
        position: CursorPosition,
        /// Anchor or migrate rather than advance.
        replace: bool,
    },
    /// Send [`Event::Tick`] at this time (Unix ms) or soon after. A tick
    /// that comes too early is answered with this action again: the
    /// runtime may sleep on a clock other than the one due times are on.
    WakeAt(u64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Loading,
    Confirming,
    /// Writing a new file at `next` (anchor or migration).
    Anchoring,
    Reading,
    Committing(Commits),
    /// Writing the slab's end.
    Advancing {
        to: u64,
    },
    /// Waiting until `until`, then doing `then`.
    Waiting {
        until: u64,
        then: Resume,
    },
    Stopped,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resume {
    Load,
    Confirm,
    Anchor,
    Read,
    Advance { to: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Commits {
    /// Where the position moves once every bucket is committed.
    slab_end: u64,
    /// Buckets not yet sent (or failed and due again).
    queued: VecDeque<Bucket>,
    /// Buckets being committed.
    in_flight: BTreeMap<BucketId, Bucket>,
    /// Buckets that failed in this round.
    failed: Vec<Bucket>,
    /// When the failed buckets, queued again, are sent.
    retry_at: Option<u64>,
}

/// Counters a cursor accumulates for its runtime to publish.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CursorCounts {
    /// Records committed to the child.
    pub committed: u64,
    /// Parent offsets skipped: aged out before read, or unreadable.
    pub dropped: u64,
    /// Slabs delivered.
    pub slabs: u64,
    /// Parent records an operator skipped (remote children).
    pub skipped: u64,
    /// Records a remote child's cursor let go while waiting to send them
    /// again, to read them again from the parent's log.
    pub released: u64,
}

/// One cursor's state.
#[derive(Debug)]
pub struct Cursor {
    link: LinkSpec,
    config: CursorConfig,
    phase: Phase,
    /// The first parent offset not yet delivered (in memory).
    next: u64,
    /// What the cursor file holds for this epoch, once known.
    durable: Option<u64>,
    /// The file must be written as a new file (legacy format) next time.
    migrate: bool,
    next_bucket: u64,
    /// Rotation for keyless records when partition counts differ.
    keyless_turn: u64,
    counts: CursorCounts,
    /// For a delay child: how late the oldest due record was when last
    /// read, ms; 0 when none is due.
    due_lag_ms: u64,
}

impl Cursor {
    /// A cursor for `link`; call [`Cursor::start`] next.
    pub fn new(link: LinkSpec, config: CursorConfig) -> Self {
        Self {
            next: link.start_offset,
            link,
            config,
            phase: Phase::Loading,
            durable: None,
            migrate: false,
            next_bucket: 0,
            keyless_turn: 0,
            counts: CursorCounts::default(),
            due_lag_ms: 0,
        }
    }

    /// The first actions.
    pub fn start(&mut self) -> Vec<Action> {
        self.phase = Phase::Loading;
        vec![Action::Load]
    }

    /// Stops the cursor: later events are ignored and nothing more is
    /// asked, in particular no cursor file write (a cursor of a newer epoch
    /// may own the file by then).
    pub fn stop(&mut self) {
        self.phase = Phase::Stopped;
    }

    /// Whether the cursor was stopped.
    pub fn is_stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// The first parent offset not yet delivered to the child.
    pub fn next_offset(&self) -> u64 {
        self.next
    }

    /// The offset the cursor file holds for this epoch, once written or
    /// read.
    pub fn durable_offset(&self) -> Option<u64> {
        self.durable
    }

    /// How late the oldest due, undelivered record was at the last read
    /// (delay children; 0 otherwise).
    pub fn due_lag_ms(&self) -> u64 {
        self.due_lag_ms
    }

    /// The counters since the last call, reset.
    pub fn take_counts(&mut self) -> CursorCounts {
        std::mem::take(&mut self.counts)
    }

    /// Key and payload bytes of the records the cursor keeps in memory to
    /// send again after a failure: 0 unless it waits to retry.
    pub fn held_for_retry_bytes(&self) -> u64 {
        match &self.phase {
            Phase::Committing(commits) if commits.retry_at.is_some() => commits
                .queued
                .iter()
                .map(|bucket| super::remote::record_bytes(&bucket.records))
                .sum(),
            _ => 0,
        }
    }

    /// The link the cursor serves.
    pub fn link(&self) -> &LinkSpec {
        &self.link
    }

    /// Feeds `event` at `now_ms` (Unix ms); returns what to do next.
    pub fn handle(&mut self, event: Event, now_ms: u64) -> Vec<Action> {
        let phase = std::mem::replace(&mut self.phase, Phase::Stopped);
        match (phase, event) {
            (Phase::Stopped, _) => Vec::new(),
            (Phase::Loading, Event::Loaded(loaded)) => self.loaded(loaded, now_ms),
            (Phase::Confirming, Event::Confirmed(answer)) => self.confirmed(answer, now_ms),
            (Phase::Anchoring, Event::Written(result)) => match result {
                Ok(()) => {
                    self.durable = Some(self.next);
                    self.migrate = false;
                    self.read()
                }
                Err(_) => self.wait(now_ms + self.config.retry_ms, Resume::Anchor),
            },
            (Phase::Reading, Event::Read(outcome)) => self.slab_read(outcome, now_ms),
            (Phase::Committing(commits), Event::Release)
                if commits.in_flight.is_empty() && commits.retry_at.is_some() =>
            {
                // The slab is read again from `next`, which has not moved.
                let released: usize = commits
                    .queued
                    .iter()
                    .map(|bucket| bucket.records.len())
                    .sum();
                self.counts.released += released as u64;
                let until = commits.retry_at.unwrap_or(now_ms);
                self.wait(until, Resume::Read)
            }
            (Phase::Committing(commits), Event::BucketDone { id, committed }) => {
                self.bucket_done(commits, id, committed, now_ms)
            }
            (Phase::Committing(mut commits), Event::BucketShippedPart { id, shipped }) => {
                if let Some(bucket) = commits.in_flight.get_mut(&id) {
                    let shipped = shipped.min(bucket.records.len());
                    bucket.records.drain(..shipped);
                    self.counts.committed += shipped as u64;
                }
                self.bucket_done(commits, id, false, now_ms)
            }
            (Phase::Advancing { to }, Event::Written(result)) => match result {
                Ok(()) => {
                    self.durable = Some(to);
                    self.migrate = false;
                    self.counts.slabs += 1;
                    self.read()
                }
                Err(_) => self.wait(now_ms + self.config.retry_ms, Resume::Advance { to }),
            },
            (Phase::Waiting { until, then }, Event::Tick) => {
                if now_ms >= until {
                    self.resume(then)
                } else {
                    // Woken early (the runtime sleeps on another clock than
                    // the one due times are on): sleep again.
                    self.wait(until, then)
                }
            }
            (Phase::Committing(mut commits), Event::Tick) => match commits.retry_at {
                Some(at) if now_ms >= at => {
                    commits.retry_at = None;
                    self.send(commits)
                }
                Some(at) => {
                    self.phase = Phase::Committing(commits);
                    vec![Action::WakeAt(at)]
                }
                None => {
                    self.phase = Phase::Committing(commits);
                    Vec::new()
                }
            },
            (phase, _) => {
                // A tick with nothing to wake, or an event of another phase
                // (a runtime bug): keep waiting for the one expected.
                self.phase = phase;
                Vec::new()
            }
        }
    }

    fn loaded(&mut self, loaded: Result<Loaded, String>, now_ms: u64) -> Vec<Action> {
        let found = match loaded {
            Err(_) => return self.wait(now_ms + self.config.retry_ms, Resume::Load),
            Ok(Loaded::Current(position)) => Some((position, false)),
            Ok(Loaded::Legacy(position)) => Some((position, true)),
            Ok(Loaded::Absent | Loaded::Damaged(_)) => None,
        };
        match found {
            Some((position, legacy)) if position.epoch == self.link.epoch => {
                self.next = position.next_offset;
                self.durable = Some(position.next_offset);
                self.migrate = legacy;
                self.read()
            }
            // No file of this epoch: anchor at the attach point, once the
            // leader confirms the epoch (anchoring overwrites the file).
            _ => {
                self.next = self.link.start_offset;
                self.confirm()
            }
        }
    }

    fn confirmed(&mut self, answer: Result<bool, String>, now_ms: u64) -> Vec<Action> {
        match answer {
            Ok(true) => self.anchor(),
            Ok(false) | Err(_) => self.wait(now_ms + self.config.confirm_defer_ms, Resume::Confirm),
        }
    }

    fn confirm(&mut self) -> Vec<Action> {
        self.phase = Phase::Confirming;
        vec![Action::Confirm]
    }

    fn anchor(&mut self) -> Vec<Action> {
        self.phase = Phase::Anchoring;
        vec![Action::Write {
            position: self.position(self.next),
            replace: true,
        }]
    }

    fn read(&mut self) -> Vec<Action> {
        self.phase = Phase::Reading;
        vec![Action::Read {
            from: self.next,
            linger: self.link.delay_ms == 0,
        }]
    }

    fn wait(&mut self, until: u64, then: Resume) -> Vec<Action> {
        self.phase = Phase::Waiting { until, then };
        vec![Action::WakeAt(until)]
    }

    fn resume(&mut self, then: Resume) -> Vec<Action> {
        match then {
            Resume::Load => {
                self.phase = Phase::Loading;
                vec![Action::Load]
            }
            Resume::Confirm => self.confirm(),
            Resume::Anchor => self.anchor(),
            Resume::Read => self.read(),
            Resume::Advance { to } => self.advance(to),
        }
    }

    fn position(&self, next_offset: u64) -> CursorPosition {
        CursorPosition {
            epoch: self.link.epoch.clone(),
            next_offset,
        }
    }

    fn advance(&mut self, to: u64) -> Vec<Action> {
        self.phase = Phase::Advancing { to };
        vec![Action::Write {
            position: self.position(to),
            replace: self.migrate,
        }]
    }

    fn slab_read(&mut self, outcome: ReadOutcome, now_ms: u64) -> Vec<Action> {
        match outcome {
            ReadOutcome::Failed(_) => self.wait(now_ms + self.config.retry_ms, Resume::Read),
            ReadOutcome::Trimmed { oldest_offset } => {
                if oldest_offset > self.next {
                    self.counts.dropped += oldest_offset - self.next;
                    self.next = oldest_offset;
                    self.read()
                } else {
                    // The log says trimmed but keeps the offset: try later.
                    self.wait(now_ms + self.config.retry_ms, Resume::Read)
                }
            }
            ReadOutcome::Slab {
                entries,
                next_offset,
            } => self.slab(entries, next_offset, now_ms),
        }
    }

    fn slab(&mut self, entries: Vec<SlabEntry>, next_offset: u64, now_ms: u64) -> Vec<Action> {
        let mut records = Vec::new();
        let mut end = self.next;
        let mut head_due: Option<u64> = None;
        let mut undue_at: Option<u64> = None;
        for entry in entries {
            match entry {
                SlabEntry::Lost(offsets) => {
                    self.counts.dropped += offsets.end.saturating_sub(offsets.start);
                    end = offsets.end;
                }
                SlabEntry::Record(record) if self.skips(record.offset) => {
                    self.counts.skipped += 1;
                    end = record.offset + 1;
                }
                SlabEntry::Record(record) => {
                    let due = record.committed_at_ms.saturating_add(self.link.delay_ms);
                    if self.link.delay_ms > 0 && due > now_ms {
                        // Commit times never decrease along a partition, so
                        // nothing after this record is due either.
                        undue_at = Some(due);
                        break;
                    }
                    head_due.get_or_insert(due);
                    end = record.offset + 1;
                    records.push(record);
                }
            }
        }
        if undue_at.is_none() {
            end = end.max(next_offset);
        }
        self.due_lag_ms = match head_due {
            Some(due) if self.link.delay_ms > 0 => now_ms.saturating_sub(due),
            _ => 0,
        };
        if records.is_empty() {
            if end > self.next {
                // Only lost offsets: move past them durably.
                self.next = end;
                return self.advance(end);
            }
            return match undue_at {
                Some(due) => {
                    let until = due.min(now_ms + self.config.due_sleep_max_ms);
                    self.wait(until, Resume::Read)
                }
                // Nothing to take (the read waits for a commit, so only a
                // log that moved under it returns empty): read again.
                None => self.read(),
            };
        }
        let buckets = self.bucket(records);
        let commits = Commits {
            slab_end: end,
            queued: buckets.into(),
            in_flight: BTreeMap::new(),
            failed: Vec::new(),
            retry_at: None,
        };
        self.send(commits)
    }

    /// Splits records into one bucket per child partition, slab order kept.
    fn bucket(&mut self, records: Vec<ParentRecord>) -> Vec<Bucket> {
        let mut by_partition: BTreeMap<u32, Vec<ParentRecord>> = BTreeMap::new();
        for record in records {
            let partition = match &self.link.remote {
                Some(remote) => lane_of(&record, remote.lanes),
                None => self.child_partition(&record.key),
            };
            by_partition.entry(partition).or_default().push(record);
        }
        by_partition
            .into_iter()
            .map(|(child_partition, records)| Bucket {
                id: self.bucket_id(),
                child_partition,
                records,
            })
            .collect()
    }

    /// Whether an operator skipped the parent record at `offset`.
    fn skips(&self, offset: u64) -> bool {
        self.link
            .remote
            .as_ref()
            .is_some_and(|remote| remote.skip.contains(&offset))
    }

    /// When the oldest record not yet delivered was committed to the
    /// parent, while a slab is being delivered (Unix ms).
    pub fn oldest_pending_ms(&self) -> Option<u64> {
        match &self.phase {
            Phase::Committing(commits) => commits
                .queued
                .iter()
                .chain(commits.in_flight.values())
                .chain(&commits.failed)
                .filter_map(|bucket| bucket.records.first())
                .map(|record| record.committed_at_ms)
                .min(),
            _ => None,
        }
    }

    fn bucket_id(&mut self) -> BucketId {
        self.next_bucket += 1;
        BucketId(self.next_bucket)
    }

    /// The child's partitioner: a keyed record by its key's hash; a keyless
    /// one keeps the parent partition's index when the counts match, and
    /// rotates otherwise.
    fn child_partition(&mut self, key: &[u8]) -> u32 {
        let partitions = self.link.child_partitions.max(1);
        if !key.is_empty() {
            return key_partition(key, partitions);
        }
        if partitions == self.link.parent_partitions {
            return self.link.parent_partition;
        }
        let turn = self.keyless_turn;
        self.keyless_turn += 1;
        u32::try_from(turn % u64::from(partitions)).unwrap_or(0)
    }

    /// Sends queued buckets up to the in-flight limit.
    fn send(&mut self, mut commits: Commits) -> Vec<Action> {
        let mut actions = Vec::new();
        while commits.in_flight.len() < self.config.buckets_in_flight {
            let Some(bucket) = commits.queued.pop_front() else {
                break;
            };
            commits.in_flight.insert(bucket.id, bucket.clone());
            actions.push(Action::Commit(bucket));
        }
        self.phase = Phase::Committing(commits);
        actions
    }

    fn bucket_done(
        &mut self,
        mut commits: Commits,
        id: BucketId,
        committed: bool,
        now_ms: u64,
    ) -> Vec<Action> {
        let Some(bucket) = commits.in_flight.remove(&id) else {
            self.phase = Phase::Committing(commits);
            return Vec::new();
        };
        if committed {
            self.counts.committed += bucket.records.len() as u64;
        } else {
            commits.failed.push(bucket);
        }
        if !commits.queued.is_empty() {
            return self.send(commits);
        }
        if !commits.in_flight.is_empty() {
            self.phase = Phase::Committing(commits);
            return Vec::new();
        }
        if commits.failed.is_empty() {
            let to = commits.slab_end;
            self.next = to;
            return self.advance(to);
        }
        // Every bucket of this round ended and some failed: retry those
        // (and only those) from memory after the back-off, under new ids so
        // a late answer of the old commit is not taken for the new one.
        let failed = std::mem::take(&mut commits.failed);
        for mut bucket in failed {
            bucket.id = self.bucket_id();
            commits.queued.push_back(bucket);
        }
        let until = now_ms + self.config.retry_ms;
        commits.retry_at = Some(until);
        self.phase = Phase::Committing(commits);
        vec![Action::WakeAt(until)]
    }
}

/// A remote child's lane for `record`: the remotes crate's lane rule
/// (`narad_remotes::chunk::lane`), so the cursor's lanes are the ones the
/// shipper would cut.
pub fn lane_of(record: &ParentRecord, lanes: u8) -> u32 {
    let lane = narad_remotes::chunk::lane(&record.key, record.offset, lanes);
    u32::try_from(lane).unwrap_or(0)
}
