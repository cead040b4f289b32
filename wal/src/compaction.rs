//! Compaction: reclaiming segments whose records were all dispatched.
//!
//! [`choose`] decides from a snapshot and does no I/O; [`crate::Wal::compact`]
//! acts on its [`Choice`]. Compaction only ever runs behind a *synced*
//! checkpoint, so every sequence number below the oldest segment left on
//! disk is one the dispatcher committed and recorded durably.

use std::sync::Arc;

use crate::checkpoint::CheckpointStore;
use crate::error::WalError;
use crate::log::{Shared, Wal, oldest_base};
use crate::notify::FlushError;
use crate::segment::segment_path;

/// What compaction should do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Choice {
    /// Bases of sealed segments whose records are all below the checkpoint,
    /// oldest first.
    pub delete: Vec<u64>,
    /// Whether the active segment is fully dispatched and large enough to
    /// be rotated, so it can be reclaimed too.
    pub rotate_active: bool,
}

/// What a snapshot of the log holds, for [`choose`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot<'a> {
    /// Bases of every segment, oldest first; the last is the active one.
    pub bases: &'a [u64],
    /// Bytes of data in the active segment.
    pub active_bytes: u64,
    /// The sequence number the next record will take.
    pub next_seq: u64,
}

/// Decides what to reclaim behind `synced_checkpoint` (the first sequence
/// number not yet dispatched, as stored durably).
///
/// A sealed segment holds `[base, next base)`, so it goes once the next base
/// is at or below the checkpoint. The active segment is rotated when every
/// record it holds is dispatched and it holds at least `rotate_bytes`.
pub fn choose(snapshot: &Snapshot<'_>, synced_checkpoint: u64, rotate_bytes: u64) -> Choice {
    let delete = snapshot
        .bases
        .windows(2)
        .take_while(|pair| pair[1] <= synced_checkpoint)
        .map(|pair| pair[0])
        .collect();
    let active_base = snapshot.bases.last().copied().unwrap_or(0);
    let rotate_active = synced_checkpoint >= snapshot.next_seq
        && snapshot.next_seq > active_base
        && snapshot.active_bytes >= rotate_bytes;
    Choice {
        delete,
        rotate_active,
    }
}

/// What a call of [`crate::Wal::compact`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compaction {
    /// Bases of the segments deleted, oldest first.
    pub deleted: Vec<u64>,
    /// Whether the active segment was rotated.
    pub rotated: bool,
}

impl Wal {
    /// Deletes segments whose records are all below `synced_checkpoint`, and
    /// rotates a fully dispatched active segment past the rotate size so it
    /// goes too. Pass only a checkpoint value that is already durable.
    ///
    /// Segments are deleted oldest first with a directory sync after each,
    /// so a crash leaves a suffix of the segments, never a gap.
    ///
    /// # Errors
    /// [`WalError::Io`] when a delete or directory sync fails, or the log's
    /// failure when a rotation cannot be made.
    pub fn compact(&self, synced_checkpoint: u64) -> Result<Compaction, WalError> {
        let shared = self.shared();
        let mut done = Compaction::default();
        let first = self.choice(synced_checkpoint);
        if first.rotate_active {
            done.rotated = rotate(shared, synced_checkpoint)?;
        }
        let choice = if done.rotated {
            self.choice(synced_checkpoint)
        } else {
            first
        };
        for base in choice.delete {
            delete_segment(shared, base)?;
            done.deleted.push(base);
        }
        if !done.deleted.is_empty() {
            tracing::debug!(deleted = done.deleted.len(), "ingress WAL compacted");
        }
        Ok(done)
    }

    /// [`Wal::compact`] behind the store's synced value (never its stored
    /// one: a power loss may bring back any value above the synced one).
    ///
    /// # Errors
    /// As [`Wal::compact`].
    pub fn compact_behind(&self, checkpoint: &CheckpointStore) -> Result<Compaction, WalError> {
        self.compact(checkpoint.synced())
    }

    /// Where dispatch starts for a stored checkpoint. A checkpoint below the
    /// oldest segment (a disk lost the checkpoint's last write while the
    /// deletions survived) starts at that segment, with a warning.
    pub fn dispatch_start(&self, checkpoint: u64) -> u64 {
        let oldest = oldest_base(self.shared());
        if checkpoint < oldest {
            tracing::warn!(
                checkpoint,
                oldest_segment = oldest,
                "ingress dispatch checkpoint was below the oldest WAL segment; dispatch starts at that segment"
            );
            oldest
        } else {
            checkpoint
        }
    }

    fn choice(&self, synced_checkpoint: u64) -> Choice {
        let shared = self.shared();
        let next_seq = shared.append.lock().next_seq;
        let (bases, active_bytes) = {
            let segments = shared.segments.lock();
            let bases: Vec<u64> = segments.keys().copied().collect();
            let active = segments.values().next_back().copied().unwrap_or(0);
            (bases, active)
        };
        choose(
            &Snapshot {
                bases: &bases,
                active_bytes,
                next_seq,
            },
            synced_checkpoint,
            shared.options.rotate_bytes(),
        )
    }
}

/// Asks the sync loop to roll to an empty segment and waits for it. Returns
/// whether it rolled (records staged meanwhile make it unnecessary).
fn rotate(shared: &Arc<Shared>, synced_checkpoint: u64) -> Result<bool, WalError> {
    let slot = {
        let mut state = shared.append.lock();
        if let Some(failure) = &state.latch {
            return Err(WalError::Failed(failure.clone()));
        }
        if state.closed {
            return Err(WalError::Closed);
        }
        let idle = state.chunks.is_empty() && state.next_seq <= synced_checkpoint;
        if !idle || state.stage_base == state.next_seq {
            return Ok(false);
        }
        state.stage_rotation()
    };
    shared.work.notify_one();
    slot_wait(&slot)?;
    Ok(true)
}

fn slot_wait(slot: &crate::notify::FlushSlot) -> Result<(), WalError> {
    slot.wait_outcome()
        .map_err(|error: FlushError| error.into())
}

fn delete_segment(shared: &Shared, base: u64) -> Result<(), WalError> {
    let path = segment_path(&shared.dir, base);
    {
        let mut segments = shared.segments.lock();
        let next_exists = segments.range(base + 1..).next().is_some();
        assert!(next_exists, "compaction never deletes the active segment");
        segments.remove(&base);
    }
    shared
        .disk
        .remove_file(&path)
        .map_err(|e| WalError::io("delete segment", &path, e))?;
    shared
        .disk
        .sync_dir(&shared.dir)
        .map_err(|e| WalError::io("sync directory", &shared.dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(bases: &[u64], active_bytes: u64, next_seq: u64) -> Snapshot<'_> {
        Snapshot {
            bases,
            active_bytes,
            next_seq,
        }
    }

    #[test]
    fn deletes_sealed_segments_wholly_below_the_checkpoint() {
        let choice = choose(&snapshot(&[0, 10, 20, 30], 5, 35), 20, 1 << 20);
        assert_eq!(choice.delete, vec![0, 10]);
        assert!(!choice.rotate_active);
    }

    #[test]
    fn keeps_a_segment_holding_the_checkpoint() {
        let choice = choose(&snapshot(&[0, 10, 20], 5, 25), 19, 1 << 20);
        assert_eq!(choice.delete, vec![0]);
    }

    #[test]
    fn never_deletes_the_active_segment() {
        let choice = choose(&snapshot(&[0, 10], 5, 12), 12, 1 << 20);
        assert_eq!(choice.delete, vec![0]);
        let choice = choose(&snapshot(&[10], 5, 12), 12, 1 << 20);
        assert!(choice.delete.is_empty());
    }

    #[test]
    fn rotates_a_fully_dispatched_active_segment_past_the_rotate_size() {
        assert!(choose(&snapshot(&[0], 2 << 20, 40), 40, 1 << 20).rotate_active);
    }

    #[test]
    fn does_not_rotate_a_small_or_undispatched_active_segment() {
        assert!(!choose(&snapshot(&[0], 1000, 40), 40, 1 << 20).rotate_active);
        assert!(!choose(&snapshot(&[0], 2 << 20, 40), 39, 1 << 20).rotate_active);
        assert!(!choose(&snapshot(&[40], 0, 40), 40, 0).rotate_active);
    }
}
