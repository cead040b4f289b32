//! The controller's timing constants, each with the reason for its value.
//! They are the defaults of [`super::ControllerConfig`], so tests (and
//! operators' test clusters) can shrink them.

use std::time::Duration;

/// Data nodes heartbeat to the leader this often (the spec's 5 s). The
/// controller does not send heartbeats; it judges their absence.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);

/// A data node silent this long is marked dead (the spec's 30 s): six
/// heartbeats missed in a row, so a pause, a slow disk or one lost packet
/// never marks a running node dead, while a crashed node is reported within
/// half a minute.
pub const DEAD_AFTER: Duration = Duration::from_secs(30);

/// A new leader marks nobody dead until it has led this long (the spec's
/// 30 s). The heartbeats it inherits were stamped by the previous leader,
/// and data nodes need time to find the new leader; one full dead-after
/// span lets every running node heartbeat to it first.
pub const ELECTION_GRACE: Duration = DEAD_AFTER;

/// While partitions wait for an owner, the controller looks again this
/// often (the spec's 250 ms membership watch), so a node that turns alive
/// receives them well within a second.
pub const MEMBERSHIP_WATCH_INTERVAL: Duration = Duration::from_millis(250);

/// Otherwise the controller passes over the state at least this often (the
/// spec's 10 s tick), besides the passes a membership change triggers.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(10);

/// At most this many partition moves are in flight across the cluster; the
/// metastore's limit, so the HTTP API's decommission verdict and the
/// planner count against the same budget.
pub const MAX_IN_FLIGHT_MOVES: usize = narad_meta::limits::MOVES_IN_FLIGHT_MAX;

/// A move whose target has been dead this long is given up (the spec's
/// `DeadTargetAbortAfter`): long enough for a restart to resume it, short
/// enough that a lost node does not hold a partition's move for long.
pub const DEAD_TARGET_ABORT_AFTER: Duration = Duration::from_secs(120);

/// While moves are in flight, or members drain, the controller passes at
/// least this often (the move runner's own tick is 1 s), so a finished move
/// is topped up and a dead target noticed promptly.
pub const REBALANCE_INTERVAL: Duration = Duration::from_secs(1);

const _: () = assert!(HEARTBEAT_INTERVAL.as_millis() * 3 <= DEAD_AFTER.as_millis());
const _: () = assert!(MEMBERSHIP_WATCH_INTERVAL.as_millis() < 1_000);
const _: () = assert!(MEMBERSHIP_WATCH_INTERVAL.as_millis() < SWEEP_INTERVAL.as_millis());
