//! Healing a poisoned log in place.
//!
//! A failed fdatasync (or a failed undo) poisons the log: the kernel may
//! have dropped the pages of that commit, so nothing written since the last
//! good sync can be trusted, and a retried fsync that succeeds proves
//! nothing. Every frame the log published was synced before it was
//! published, so what the log believes committed is durable; only the
//! bytes past `committed_bytes` are in doubt.
//!
//! So a commit that finds the log poisoned, at most once per
//! [`HEAL_RETRY_MS`], heals it where it stands instead of waiting for a
//! reopen (which nothing would do while consume shards and fan-out cursors
//! hold the log): it cuts the active segment back to its committed bytes,
//! syncs the cut, reads the newest committed frames back and checks their
//! CRCs, and only then lifts the latch. The records of the failed commit
//! were never published and are still in the sender's WAL, which commits
//! them again at the same offsets. A heal that fails leaves the latch set
//! and is tried again after the interval. Before this, a disk that filled
//! up for a moment stopped every partition it poisoned until restart.

use std::sync::atomic::Ordering;

use crate::error::LogError;
use crate::frame;
use crate::log::{PartitionLog, Writer};

/// Least time between two attempts to heal a poisoned log, on the node's
/// clock: a disk that keeps failing is not hammered by every commit retry.
pub const HEAL_RETRY_MS: u64 = 1_000;

impl PartitionLog {
    /// Heals the poisoned log if an attempt is due (see the module), or
    /// answers [`LogError::Poisoned`].
    ///
    /// # Errors
    /// [`LogError::Poisoned`] while no attempt is due or after one failed.
    pub(crate) fn heal_if_due(&self, writer: &mut Writer) -> Result<(), LogError> {
        let now_ms = self.clock.now_ms();
        match writer.heal_after_ms {
            // The first commit to find the latch waits one interval: the
            // failing disk gets time before it is touched again.
            None => {
                writer.heal_after_ms = Some(now_ms + HEAL_RETRY_MS);
                return Err(LogError::Poisoned);
            }
            Some(after) if now_ms < after => return Err(LogError::Poisoned),
            Some(_) => {}
        }
        match self.heal() {
            Ok(()) => {
                writer.heal_after_ms = None;
                self.poisoned.store(false, Ordering::Release);
                tracing::warn!(
                    dir = %self.dir.display(),
                    high_watermark = writer.next_offset,
                    "poisoned partition log healed: its file is cut back to its last commit and that commit read back; commits resume"
                );
                Ok(())
            }
            Err(error) => {
                writer.heal_after_ms = Some(now_ms + HEAL_RETRY_MS);
                tracing::warn!(dir = %self.dir.display(), %error, "poisoned partition log not healed yet; commits still refused");
                Err(LogError::Poisoned)
            }
        }
    }

    /// Cuts the active segment to its committed bytes, syncs the cut and
    /// checks the newest committed frames read back.
    fn heal(&self) -> Result<(), LogError> {
        let (file, committed, newest_frame_at) = {
            let table = self.table.read();
            let active = &table.active;
            let newest_frame_at = active
                .index
                .entries()
                .last()
                .map_or(0, |entry| entry.position);
            (active.file.clone(), active.committed_bytes, newest_frame_at)
        };
        self.cut_active(&file, committed)
            .map_err(LogError::io("cut a poisoned log back to its last commit"))?;
        if committed == newest_frame_at {
            return Ok(());
        }
        let length = usize::try_from(committed - newest_frame_at).unwrap_or(usize::MAX);
        let bytes = file
            .read_at(newest_frame_at, length)
            .wait()
            .map_err(LogError::io("read back a poisoned log's last commit"))?;
        let mut at = 0usize;
        while at < bytes.len() {
            let header =
                frame::check_frame(&bytes[at..], self.config.frame_bytes_max).map_err(|error| {
                    LogError::ReadBack {
                        position: newest_frame_at + at as u64,
                        reason: error.to_string(),
                    }
                })?;
            at += usize::try_from(header.frame_bytes()).unwrap_or(usize::MAX);
        }
        if at != bytes.len() {
            return Err(LogError::ReadBack {
                position: newest_frame_at,
                reason: format!("frames end at {at} of {} committed bytes", bytes.len()),
            });
        }
        Ok(())
    }
}
