//! What a move worker decides, with no I/O, as the dispatcher and the
//! fan-out cursor decide: when its catch-up copy is close enough for the
//! handoff, what a failed attempt means for the copy made so far and for
//! the worker's report, when the next attempt runs, and when a dead
//! source's copy may be force-promoted.
//!
//! The worker (`worker.rs`) copies, hands off, installs and flips; it
//! feeds [`Attempts`] each failure, what the replica says of the source,
//! and the node clock's monotonic milliseconds, and does what comes back.

use std::time::Duration;

use narad_clock::millis;

/// A catch-up pass that leaves less than this to copy ends the catch-up:
/// the rest is copied under the freeze, where produce to the partition
/// waits, so it must be small. 1 MiB copies in milliseconds.
pub const LAG_BYTES: u64 = 1 << 20;

/// Catch-up passes at most before the handoff, even if the partition grows
/// as fast as it is copied (the freeze then stops it).
pub const CATCH_UP_PASSES_MAX: usize = 8;

/// First pause after a failed attempt; doubles up to [`RETRY_PAUSE_MAX`].
pub const RETRY_PAUSE_MIN: Duration = Duration::from_millis(500);

/// Longest pause between attempts: a source that is back is found within
/// this long, and a dead one is not asked more than every 10 s.
pub const RETRY_PAUSE_MAX: Duration = Duration::from_secs(10);

/// How long the source must have been marked dead before its copy here is
/// force-promoted (the spec's `ForcePromoteAfter`).
pub const FORCE_PROMOTE_AFTER: Duration = Duration::from_secs(120);

const _: () = assert!(
    RETRY_PAUSE_MIN.as_millis() > 0 && RETRY_PAUSE_MIN.as_millis() <= RETRY_PAUSE_MAX.as_millis()
);

/// Why a worker is stuck, as `blocked` reports it: the copy does not
/// recover to the frozen high watermark.
pub const BLOCKED_COPY_UNVERIFIABLE: &str = "copy_unverifiable";

/// The source is dead past the force-promote delay and the copy here is
/// behind its last known high watermark (or never reached it): the move
/// waits for the source or for an abort.
pub const BLOCKED_SOURCE_DEAD_COPY_BEHIND: &str = "source_dead_copy_behind";

/// How an attempt failed, as far as the decisions care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The source did not answer.
    SourceUnreachable,
    /// The copy does not recover to the frozen high watermark.
    Unverifiable,
    /// Anything else (a refusal, a disk error, a lapsed freeze).
    Other,
}

/// What follows a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AfterFailure {
    /// Whether the copy made so far stays good for the next attempt.
    /// Copied bytes are committed bytes of the source, which never change,
    /// so a source that merely did not answer leaves them good (for the
    /// next attempt and for a force-promote); any other failure leaves the
    /// copy in doubt, and the next attempt starts it again.
    pub keep_copy: bool,
    /// What the worker reports as `blocked` until its next attempt.
    pub blocked: Option<&'static str>,
    /// Whether to look first if the source is dead long enough for its
    /// copy to be force-promoted.
    pub consider_force_promote: bool,
}

/// Where a force-promote stands, from what the replica says of the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promotion {
    /// The source is not marked dead.
    SourceAlive,
    /// It is marked dead, for less than the force-promote delay: the
    /// worker waits for it.
    Waiting,
    /// It has been marked dead for `dead_for`, at least the delay.
    Due {
        /// How long, on the node's clock, since this worker first saw it
        /// marked dead in this spell.
        dead_for: Duration,
    },
}

/// A worker's memory between attempts.
#[derive(Debug)]
pub struct Attempts {
    /// The pause before the next attempt after a failure.
    pause_ms: u64,
    /// When this worker first saw the source marked dead, in this spell.
    source_dead_since_ms: Option<u64>,
    /// [`FORCE_PROMOTE_AFTER`] outside tests.
    force_promote_after_ms: u64,
}

impl Attempts {
    /// A worker that has not failed yet and force-promotes a copy once its
    /// source has been dead for `force_promote_after`.
    pub fn new(force_promote_after: Duration) -> Self {
        Self {
            pause_ms: millis(RETRY_PAUSE_MIN),
            source_dead_since_ms: None,
            force_promote_after_ms: millis(force_promote_after),
        }
    }

    /// What a failed attempt means.
    pub fn failed(&self, failure: Failure) -> AfterFailure {
        let unreachable = failure == Failure::SourceUnreachable;
        AfterFailure {
            keep_copy: unreachable,
            blocked: (failure == Failure::Unverifiable).then_some(BLOCKED_COPY_UNVERIFIABLE),
            consider_force_promote: unreachable,
        }
    }

    /// When the next attempt runs, the failure's handling done at `now_ms`:
    /// one pause from now, and the pause after it twice as long, up to
    /// [`RETRY_PAUSE_MAX`].
    pub fn next_attempt_at(&mut self, now_ms: u64) -> u64 {
        let at_ms = now_ms.saturating_add(self.pause_ms);
        self.pause_ms = self.pause_ms.saturating_mul(2).min(millis(RETRY_PAUSE_MAX));
        at_ms
    }

    /// Where a force-promote stands at `now_ms`, the replica showing the
    /// source marked dead or not. The delay counts from when this worker
    /// first saw it dead; a source seen alive again starts it over.
    pub fn promotion(&mut self, source_dead: bool, now_ms: u64) -> Promotion {
        if !source_dead {
            self.source_dead_since_ms = None;
            return Promotion::SourceAlive;
        }
        let since_ms = *self.source_dead_since_ms.get_or_insert(now_ms);
        let dead_ms = now_ms.saturating_sub(since_ms);
        if dead_ms < self.force_promote_after_ms {
            Promotion::Waiting
        } else {
            Promotion::Due {
                dead_for: Duration::from_millis(dead_ms),
            }
        }
    }
}

/// Whether the catch-up ends and the handoff begins, with `left` bytes
/// still to copy and `left_before` the pass before (none before the first
/// pass): once little is left ([`LAG_BYTES`]), or once a pass did not
/// shrink it (the partition grows as fast as it is copied, and only the
/// freeze stops it). The worker also stops after [`CATCH_UP_PASSES_MAX`]
/// passes.
pub fn catch_up_over(left: u64, left_before: Option<u64>) -> bool {
    left < LAG_BYTES || left_before.is_some_and(|before| left >= before)
}

/// Whether a staged copy may be force-promoted: this worker started it
/// (its bytes are known), the source listed a high watermark, and the copy
/// recovers to at least that (`found` records). Anything short of that
/// leaves the worker blocked with [`BLOCKED_SOURCE_DEAD_COPY_BEHIND`].
pub fn copy_reaches_source(started: bool, listed_high_watermark: Option<u64>, found: u64) -> bool {
    started && listed_high_watermark.is_some_and(|listed| found >= listed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_attempt_waits_half_a_second_then_twice_as_long_up_to_ten() {
        let mut attempts = Attempts::new(FORCE_PROMOTE_AFTER);
        let waits: Vec<u64> = (0..7)
            .map(|n| attempts.next_attempt_at(1_000 * n) - 1_000 * n)
            .collect();
        assert_eq!(waits, [500, 1_000, 2_000, 4_000, 8_000, 10_000, 10_000]);
    }

    #[test]
    fn only_an_unreachable_source_keeps_the_copy_and_looks_at_force_promote() {
        let attempts = Attempts::new(FORCE_PROMOTE_AFTER);
        assert_eq!(
            attempts.failed(Failure::SourceUnreachable),
            AfterFailure {
                keep_copy: true,
                blocked: None,
                consider_force_promote: true,
            }
        );
        assert_eq!(
            attempts.failed(Failure::Other),
            AfterFailure {
                keep_copy: false,
                blocked: None,
                consider_force_promote: false,
            }
        );
    }

    #[test]
    fn an_unverifiable_copy_is_reported_blocked_and_copied_again() {
        let after = Attempts::new(FORCE_PROMOTE_AFTER).failed(Failure::Unverifiable);
        assert_eq!(after.blocked, Some(BLOCKED_COPY_UNVERIFIABLE));
        assert!(!after.keep_copy);
    }

    #[test]
    fn a_dead_source_is_due_for_force_promote_only_after_the_delay() {
        let mut attempts = Attempts::new(Duration::from_secs(120));
        assert_eq!(attempts.promotion(false, 0), Promotion::SourceAlive);
        assert_eq!(attempts.promotion(true, 5_000), Promotion::Waiting);
        assert_eq!(attempts.promotion(true, 124_999), Promotion::Waiting);
        assert_eq!(
            attempts.promotion(true, 125_000),
            Promotion::Due {
                dead_for: Duration::from_secs(120)
            }
        );
    }

    #[test]
    fn a_source_seen_alive_again_starts_the_delay_over() {
        let mut attempts = Attempts::new(Duration::from_secs(120));
        assert_eq!(attempts.promotion(true, 0), Promotion::Waiting);
        assert_eq!(attempts.promotion(false, 100_000), Promotion::SourceAlive);
        assert_eq!(attempts.promotion(true, 110_000), Promotion::Waiting);
        assert_eq!(attempts.promotion(true, 229_999), Promotion::Waiting);
        assert!(matches!(
            attempts.promotion(true, 230_000),
            Promotion::Due { .. }
        ));
    }

    #[test]
    fn the_catch_up_ends_when_little_is_left_or_a_pass_did_not_shrink_it() {
        assert!(
            catch_up_over(LAG_BYTES - 1, None),
            "little left at the start"
        );
        assert!(!catch_up_over(LAG_BYTES, None), "a first pass copies");
        assert!(
            !catch_up_over(5 * LAG_BYTES, Some(9 * LAG_BYTES)),
            "shrinking"
        );
        assert!(
            catch_up_over(5 * LAG_BYTES, Some(5 * LAG_BYTES)),
            "not shrinking"
        );
        assert!(catch_up_over(6 * LAG_BYTES, Some(5 * LAG_BYTES)), "growing");
    }

    #[test]
    fn a_copy_is_promoted_only_if_it_reaches_the_last_listing() {
        assert!(copy_reaches_source(true, Some(40), 40));
        assert!(copy_reaches_source(true, Some(40), 41));
        assert!(!copy_reaches_source(true, Some(40), 39), "behind");
        assert!(!copy_reaches_source(true, None, 40), "never listed");
        assert!(
            !copy_reaches_source(false, Some(40), 40),
            "not started here"
        );
    }
}
