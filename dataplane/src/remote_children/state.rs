//! A remote child's state as the listing shows it: `paused` while an
//! operator holds it, else what its cursors report ([`RemoteReport`]):
//! the state of each cursor's last shipment, the record it holds on, and
//! its shipping times. Only the cursors this node runs report here; a
//! partition whose cursor runs on another node adds its position (lag)
//! but no state.

use narad_meta::RemoteLink;

use crate::fanout::remote::{names_a_record, retention_headroom_ms};
use crate::fanout::{CursorReport, RemoteReport};
use narad_remotes::state::LinkState as ShipState;

/// A remote child's state over its cursors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkState {
    /// `paused`, a failure state a cursor reported, or `running`.
    pub state: String,
    /// Where a cursor holds on a record, if one does.
    pub blocked_at: Option<BlockedAt>,
}

/// A cursor holding on one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedAt {
    /// The parent partition.
    pub partition: u32,
    /// The record's offset.
    pub offset: u64,
    /// Why it holds.
    pub state: String,
}

/// What a remote child's cursor reported beside its position, if it runs
/// here and reported.
fn remote_report(report: &CursorReport) -> Option<&RemoteReport> {
    report.remote.as_ref()
}

/// The state of `link` over `cursors` (per parent partition, the report
/// of the cursor that runs it, if one reported): `paused` when paused,
/// else the first partition's reported state that is not `running`, else
/// `running`.
pub fn link_state(link: &RemoteLink, cursors: &[(u32, Option<CursorReport>)]) -> LinkState {
    if link.paused.is_some() {
        return LinkState {
            state: "paused".to_owned(),
            blocked_at: None,
        };
    }
    for (partition, report) in cursors {
        let Some(remote) = report.as_ref().and_then(remote_report) else {
            continue;
        };
        if remote.state == ShipState::Running.as_str() {
            continue;
        }
        let blocked_at = remote.blocked_at.map(|offset| BlockedAt {
            partition: *partition,
            offset,
            state: remote.state.clone(),
        });
        return LinkState {
            state: remote.state.clone(),
            blocked_at,
        };
    }
    LinkState {
        state: ShipState::Running.as_str().to_owned(),
        blocked_at: None,
    }
}

/// Whether a skip of `offset` on `partition` may be stored, given the
/// `report` of that partition's cursor from its owner (this node or
/// another): the cursor holds on exactly that record in a state that
/// names a record (`rejected_record`, `record_too_large`). A partition
/// whose owner has no report of the cursor yet (it has not started, or
/// the partition has no owner) is taken on the operator's word when the
/// link has it.
pub fn skip_allowed(
    link_partitions: u32,
    partition: u32,
    offset: u64,
    report: Option<&CursorReport>,
) -> bool {
    match report.and_then(remote_report) {
        Some(remote) => names_a_record(&remote.state) && remote.blocked_at == Some(offset),
        None => partition < link_partitions,
    }
}

/// A remote child's times, from its cursors: how far behind shipping is,
/// how long until retention passes the oldest unshipped record, when the
/// target was last verified and when a shipment last succeeded. `None`
/// where no cursor here reported the figure.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CursorTimes {
    /// Age of the oldest record being shipped, seconds.
    pub lag_seconds: Option<f64>,
    /// Time until the parent's retention deletes the oldest record being
    /// shipped, seconds (`None` with retention forever).
    pub retention_headroom_seconds: Option<f64>,
    /// When the target last took a shipment (which verifies it), Unix
    /// seconds.
    pub target_verified_at: Option<u64>,
    /// When a shipment last got its `202`, Unix seconds.
    pub last_success_at: Option<u64>,
}

/// The times `reports` give at `now_unix_ms`, for a parent kept
/// `retention_ms` (0 = forever). A cursor that reported and ships nothing
/// lags by 0 s.
pub fn cursor_times(
    reports: &[(u32, Option<CursorReport>)],
    now_unix_ms: u64,
    retention_ms: u64,
) -> CursorTimes {
    let remotes: Vec<&RemoteReport> = reports
        .iter()
        .filter_map(|(_, report)| report.as_ref().and_then(remote_report))
        .collect();
    if remotes.is_empty() {
        return CursorTimes::default();
    }
    let oldest_pending = remotes
        .iter()
        .filter_map(|remote| remote.oldest_pending_ms)
        .min();
    let last_success = remotes
        .iter()
        .filter_map(|remote| remote.last_success_at_ms)
        .max()
        .map(|ms| ms / 1000);
    let seconds = |ms: u64| ms as f64 / 1000.0;
    let lag_seconds =
        Some(oldest_pending.map_or(0.0, |at| seconds(now_unix_ms.saturating_sub(at))));
    let retention_headroom_seconds = oldest_pending
        .and_then(|at| retention_headroom_ms(Some(at), retention_ms, now_unix_ms))
        .map(seconds);
    CursorTimes {
        lag_seconds,
        retention_headroom_seconds,
        target_verified_at: last_success,
        last_success_at: last_success,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use narad_meta::{RemoteFrom, RemoteId, RemotePause};

    fn link(paused: bool) -> RemoteLink {
        RemoteLink {
            remote: "dr".into(),
            remote_id: RemoteId::from_bits(1),
            remote_topic: "orders".into(),
            target_id: None,
            lanes: 1,
            from: RemoteFrom::Attach,
            paused: paused.then(|| RemotePause {
                reason: "maintenance".into(),
                at_ms: 1,
                by: "root".into(),
            }),
            skip: Default::default(),
            created_at_ms: 1,
        }
    }

    fn report() -> CursorReport {
        CursorReport {
            next_offset: 3,
            high_watermark: 9,
            due_lag_ms: None,
            remote: None,
        }
    }

    fn shipping(state: &str, blocked_at: Option<u64>) -> CursorReport {
        CursorReport {
            remote: Some(RemoteReport {
                state: state.into(),
                blocked_at,
                last_success_at_ms: Some(40_000),
                oldest_pending_ms: Some(70_000),
            }),
            ..report()
        }
    }

    #[test]
    fn a_paused_link_is_paused_and_another_runs() {
        let cursors = [(0, Some(report())), (1, None)];
        assert_eq!(link_state(&link(true), &cursors).state, "paused");
        let running = link_state(&link(false), &cursors);
        assert_eq!(running.state, "running");
        assert_eq!(running.blocked_at, None);
    }

    #[test]
    fn a_failing_cursor_names_the_state_and_the_record_it_holds_on() {
        let cursors = [
            (0, Some(shipping("running", None))),
            (1, Some(shipping("rejected_record", Some(12)))),
        ];
        let state = link_state(&link(false), &cursors);
        assert_eq!(state.state, "rejected_record");
        assert_eq!(
            state.blocked_at,
            Some(BlockedAt {
                partition: 1,
                offset: 12,
                state: "rejected_record".into()
            })
        );
        assert_eq!(link_state(&link(true), &cursors).state, "paused");
    }

    #[test]
    fn a_skip_is_taken_only_for_the_record_a_cursor_holds_on() {
        let held = shipping("record_too_large", Some(12));
        assert!(skip_allowed(3, 1, 12, Some(&held)));
        assert!(!skip_allowed(3, 1, 13, Some(&held)));
        let unavailable = shipping("unavailable", None);
        assert!(!skip_allowed(3, 1, 12, Some(&unavailable)));
        assert!(!skip_allowed(3, 1, 12, Some(&shipping("running", None))));
    }

    #[test]
    fn without_a_report_here_a_skip_is_taken_for_a_partition_of_the_link() {
        assert!(skip_allowed(3, 2, 7, Some(&report())));
        assert!(skip_allowed(3, 0, 7, None));
        assert!(!skip_allowed(3, 3, 7, None));
    }

    #[test]
    fn times_come_from_the_oldest_pending_record_and_the_last_success() {
        let cursors = [(0, Some(shipping("running", None))), (1, None)];
        let times = cursor_times(&cursors, 100_000, 3_600_000);
        assert_eq!(times.lag_seconds, Some(30.0));
        assert_eq!(times.retention_headroom_seconds, Some(3_570.0));
        assert_eq!(times.last_success_at, Some(40));
        assert_eq!(
            cursor_times(&cursors, 100_000, 0).retention_headroom_seconds,
            None
        );
        assert_eq!(
            cursor_times(&[(0, None)], 100_000, 0),
            CursorTimes::default()
        );
    }
}
