//! The dispatcher's constants, each with the reason for its value. The ones
//! that are times are defaults of [`super::DispatchConfig`], so tests can
//! shrink them.

use std::time::Duration;

/// Records the dispatcher aims to commit per destination in one batch. The
/// window grows by this much per destination it sees, and a destination
/// holding fewer lingers while other commits run.
pub const TARGET_RECORDS_PER_DESTINATION: usize = 64;

/// Smallest window: records held in memory at once (queued or in flight,
/// hung commits aside). Enough for a burst across a few partitions.
pub const WINDOW_RECORDS_MIN: usize = 4_096;

/// Largest window: bounds the dispatcher's memory whatever the fan-out.
pub const WINDOW_RECORDS_MAX: usize = 65_536;

/// The reader never reads more than this many windows past the checkpoint,
/// which bounds the per-seq bookkeeping behind a stuck record.
pub const LOOKAHEAD_WINDOWS: u64 = 16;

/// A destination's queue holds at most a quarter of the window (but at least
/// this many), so one hot or slow partition holds at most half the window
/// (a full queue and a batch in flight).
pub const DESTINATION_QUEUE_RECORDS_MIN: usize = 4_096;

/// The held limit is at least this many destinations' queues, so a single
/// destination never takes more than half of it.
pub const HELD_LIMIT_DESTINATIONS: usize = 4;

/// Commits in flight at once (hung ones do not count): enough to keep many
/// owners busy, few enough that a dispatcher cannot flood them.
pub const COMMIT_SLOTS: usize = 16;

/// Encoded bytes a commit to another node carries at most: half the 16 MiB
/// cluster frame limit, because the transport refuses a larger frame before
/// sending it and the same oversized batch would fail on every retry.
pub const REMOTE_COMMIT_BYTES_MAX: u64 = 8 << 20;

/// The frame limit the budget above is half of.
pub const CLUSTER_FRAME_BYTES_MAX: u64 = 16 << 20;
const _: () = assert!(REMOTE_COMMIT_BYTES_MAX * 2 == CLUSTER_FRAME_BYTES_MAX);
const _: () = assert!(WINDOW_RECORDS_MIN <= WINDOW_RECORDS_MAX);
const _: () = assert!(DESTINATION_QUEUE_RECORDS_MIN <= WINDOW_RECORDS_MAX);

/// A small batch waits at most this long for company while other commits
/// run: beyond it, latency costs more than the fsync it saves.
pub const LINGER_MAX: Duration = Duration::from_millis(50);

/// A small batch waits this many times its owner's recent commit latency.
pub const LINGER_LATENCY_FACTOR: u32 = 2;

/// Weight of the newest sample in an owner's moving-average commit latency.
pub const LATENCY_EWMA_WEIGHT: f64 = 0.2;

/// A commit in flight longer than this is hung: it stops taking a slot and
/// its destination's queue returns to the WAL.
pub const HUNG_AFTER: Duration = Duration::from_secs(1);

/// Budget of a normal commit: generous, because a commit that succeeds after
/// its caller gave up is retried and duplicates its batch.
pub const COMMIT_BUDGET: Duration = Duration::from_secs(30);

/// Budget of a probe commit (one record): a failed probe risks duplicating a
/// single record only.
pub const PROBE_BUDGET: Duration = Duration::from_secs(5);

/// A failing destination retries its probe this often.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// A destination failing for this long (from the start of its first failed
/// attempt) has its records rerouted to a live sibling. Measured in time, not
/// attempts, so a handoff freeze or an owner restart does not scatter records.
pub const REROUTE_GRACE: Duration = Duration::from_secs(3);

/// Records left in the WAL are read again at least this often.
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(1);

/// A destination whose owner does not resolve (a topic not assigned yet) is
/// looked up again this often. Every topology change wakes the runtime, so
/// an assignment is seen at once; this only bounds a missed wake-up.
pub const UNRESOLVED_RETRY: Duration = Duration::from_secs(1);

/// An unconfirmed "is this topic gone?" answer is remembered this long, so a
/// leader that cannot be reached is asked about once a second.
pub const CONFIRM_NEGATIVE_TTL: Duration = Duration::from_secs(1);
