//! Writing positions: window writes (page cache), writeouts (fdatasync)
//! that flip the slot roles, levelling `consumer.offset`, and latching a
//! partition on any disk error (never retried).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use narad_clock::millis;
use narad_disk::{Disk, IoBuf, OpenOptions};
use tracing::{error, warn};

use super::{ConsumerStateStore, Inner, Partition};
use crate::consume::ahead::config::OFFSET_LEVELS_IN_FLIGHT_MAX;
use crate::consume::ahead::format::{AHEAD_FILE_NAME, OFFSET_FILE_NAME, SLOT_BYTES, encode_slot};
use crate::consume::ahead::position::ConsumerPosition;

impl ConsumerStateStore {
    /// Writes each (partition, position) into its window slot. Handles are
    /// reopened (evicting others) first, while no write is in flight, so an
    /// eviction never writes out a window whose write is still pending; then
    /// the writes are all issued before any is waited for, so a backend with
    /// storage threads runs them side by side. A partition whose handle was
    /// evicted again by a later reopen of this tick is written out at once
    /// through a short-lived handle.
    pub(super) fn write_windows(
        &self,
        inner: &mut Inner,
        windows: Vec<(PathBuf, ConsumerPosition)>,
    ) {
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

    /// Writes the source's current position into the window if it changed
    /// and writes out an unsynced window, for one partition: re-attach and
    /// a dropped source.
    pub(super) fn flush_partition(&self, dir: &Path, partition: &mut Partition) {
        partition.touched.store(false, Ordering::Release);
        let position = partition.source.upgrade().map(|source| source.position());
        flush_one(&*self.disk, dir, partition, position);
    }

    /// Writes out (fdatasync) every listed partition holding an unsynced
    /// window; the fdatasyncs are all issued before any is waited for.
    pub(super) fn write_out(&self, inner: &mut Inner, dirs: &[PathBuf]) {
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
    /// on a cadence (`now_ms` given), whose last levelling is at least
    /// `offset_level_interval` old; at close (`now_ms` None) regardless. At
    /// most [`OFFSET_LEVELS_IN_FLIGHT_MAX`] run at once. The file exists
    /// since priming: a missing one means the directory was replaced, which
    /// latches.
    pub(super) fn level_offsets(&self, inner: &mut Inner, dirs: &[PathBuf], now_ms: Option<u64>) {
        let interval_ms = millis(self.config.offset_level_interval);
        let wanted: Vec<(&PathBuf, u64)> = dirs
            .iter()
            .filter_map(|dir| {
                let partition = inner.partitions.get(dir)?;
                let frontier = partition.written.frontier;
                let due = now_ms.is_none_or(|now_ms| {
                    partition
                        .offset_levelled_at_ms
                        .is_none_or(|at_ms| now_ms.saturating_sub(at_ms) >= interval_ms)
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
                        if now_ms.is_some() {
                            partition.offset_levelled_at_ms = now_ms;
                        }
                    }
                    Err(error) => latch(dir, partition, "levelling consumer.offset", &error),
                }
            }
        }
    }
}

/// Rejects (and latches on) a malformed position from a source: a bug in
/// the source, which must not stop the store or the other partitions.
pub(super) fn check_position(
    dir: &Path,
    partition: &mut Partition,
    position: &ConsumerPosition,
) -> bool {
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
pub(super) fn flush_one(
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
pub(super) fn finish_writeout(dir: &Path, partition: &mut Partition, result: io::Result<()>) {
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
pub(super) fn latch(dir: &Path, partition: &mut Partition, op: &str, error: &io::Error) {
    if !partition.latched {
        error!(dir = %dir.display(), op, %error, "consumer state disk failure; this partition's acks are no longer persisted until it is attached again (a restart redelivers them)");
        partition.disk_failures.fetch_add(1, Ordering::AcqRel);
    }
    partition.latched = true;
}

pub(super) fn warn_truncation(dir: &Path, partition: &mut Partition, truncated: bool) {
    if truncated && !partition.truncation_warned {
        warn!(dir = %dir.display(), "acked-ahead set does not fit a consumer.ahead slot; only its lowest offsets are persisted (the rest would be redelivered after a restart)");
    }
    partition.truncation_warned = truncated;
}
