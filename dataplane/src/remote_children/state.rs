//! A remote child's state as the listing shows it: `paused` while an
//! operator holds it, else what its cursors report. The cursors do not
//! report a link state yet (shipping is wired to them separately); until
//! they do, a link that is not paused shows `running`, and a skip is
//! accepted for any partition of the link. [`reported_state`] and
//! [`skip_allowed`] are the two places that read the cursor's state.

use narad_meta::RemoteLink;

use crate::fanout::CursorReport;

/// The states a skip may pass: the cursor holds on one record the target
/// refused.
pub const SKIPPABLE_STATES: [&str; 2] = ["rejected_record", "record_too_large"];

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

/// The state a cursor reported, if it reports one: the link state of its
/// last shipment (`unavailable`, `rejected_record`, …) and, when it holds
/// on a record, that record's offset. Cursors report none yet.
pub fn reported_state(_report: &CursorReport) -> Option<(String, Option<u64>)> {
    None
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
        let Some((state, at)) = report.as_ref().and_then(reported_state) else {
            continue;
        };
        if state == "running" {
            continue;
        }
        let blocked_at = at.map(|offset| BlockedAt {
            partition: *partition,
            offset,
            state: state.clone(),
        });
        return LinkState { state, blocked_at };
    }
    LinkState {
        state: "running".to_owned(),
        blocked_at: None,
    }
}

/// Whether a skip of `offset` on `partition` may be stored: the cursor of
/// that partition holds on exactly that record in one of the
/// [`SKIPPABLE_STATES`]. While cursors report no state, a skip of a
/// partition the link has is accepted.
pub fn skip_allowed(
    link_partitions: u32,
    partition: u32,
    offset: u64,
    report: Option<&CursorReport>,
) -> bool {
    match report.and_then(reported_state) {
        Some((state, at)) => SKIPPABLE_STATES.contains(&state.as_str()) && at == Some(offset),
        None => partition < link_partitions,
    }
}

/// A remote child's times, from its cursors: how far behind shipping is,
/// how long until retention passes the oldest unshipped record, when the
/// target was last verified and when a shipment last succeeded. `None`
/// where no cursor reported the figure.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CursorTimes {
    /// Age of the oldest unshipped record, seconds.
    pub lag_seconds: Option<f64>,
    /// Time until the parent's retention deletes the oldest unshipped
    /// record, seconds.
    pub retention_headroom_seconds: Option<f64>,
    /// When the target last passed its checks, Unix seconds.
    pub target_verified_at: Option<u64>,
    /// When a shipment last got its `202`, Unix seconds.
    pub last_success_at: Option<u64>,
}

/// The times `reports` give. Cursors report none yet, so every figure is
/// `None` (the listing shows `null`).
pub fn cursor_times(_reports: &[(u32, Option<CursorReport>)]) -> CursorTimes {
    CursorTimes::default()
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
    fn a_skip_is_taken_only_for_a_partition_of_the_link() {
        assert!(skip_allowed(3, 2, 7, Some(&report())));
        assert!(skip_allowed(3, 0, 7, None));
        assert!(!skip_allowed(3, 3, 7, None));
    }
}
