//! Fan-out children routes (spec §1.4): attach a child to a parent, list a
//! parent's children with their lag, detach a child. The attach point of a
//! link, made here, serves a create-as-child too.
//!
//! The link rules (flat roles, 108 children, delay against retention,
//! identical schema histories) are the metastore's: the node checks what
//! it can without state, asks every parent partition owner for its
//! committed high watermark, and proposes; the metastore refuses with its
//! status and text.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use narad_meta::{AttachChild, AttachEpoch, Command, DetachChild, MetastoreError, rules};
use narad_protocol::PartitionStatsEntry;

use super::body::read_json_refusing_400;
use super::error::ApiError;
use super::query::params;
use super::remote_children::{self, RemoteAttach};
use super::topics::{
    attach_offsets, json_response, known_topic, local_stats, propose, readable_topic, record,
    refused, remote_stats,
};
use super::{ApiState, authenticate};
use crate::admin::actor_of;
use crate::fanout::{CursorReport, RemoteReport};
use crate::forward::{STATS_BUDGET, StatsAsk};
use crate::metadata::TopicMeta;
use crate::topology::{Destination, Route, Topology};

/// An attach body is at most this large; over it answers `400`, not `413`
/// (spec §1.1).
pub const ATTACH_BODY_BYTES_MAX: usize = 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttachBody {
    #[serde(default)]
    child: Option<String>,
    #[serde(default)]
    delay_ms: Option<i64>,
    #[serde(default)]
    remote: Option<String>,
    #[serde(default)]
    remote_topic: Option<String>,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    lanes: Option<i64>,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /v1/topics/{parent}/children` → `200` parent record; managing
/// both topics. With `remote`, the remote variant
/// ([`remote_children::attach`]).
pub(crate) async fn attach(
    State(state): State<Arc<ApiState>>,
    Path(parent_name): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let user = authenticate(&state, &method, &headers).await?;
    let request: AttachBody = read_json_refusing_400(&headers, body, ATTACH_BODY_BYTES_MAX).await?;
    let child_name = request.child.unwrap_or_default();
    if child_name.is_empty() {
        return Err(refused(MetastoreError::ChildRequired));
    }
    if child_name == parent_name {
        return Err(refused(MetastoreError::ChildIsParent));
    }
    let remote = RemoteAttach {
        remote: request.remote.clone().unwrap_or_default(),
        remote_topic: request.remote_topic,
        from: request.from,
        lanes: request.lanes,
        dry_run: request.dry_run,
    };
    if request.remote.is_some() {
        if request.delay_ms.is_some_and(|delay| delay != 0) {
            return Err(ApiError::bad_request(
                "delay_ms does not go with remote: a remote child has no delay",
            ));
        }
        return Ok(remote_children::attach(
            &state,
            user.as_deref(),
            &parent_name,
            child_name,
            remote,
        )
        .await);
    }
    remote_children::refuse_without_remote(&remote)?;
    rules::fanout_delay_ms(request.delay_ms).map_err(refused)?;
    let actor = actor_of(user.as_deref());
    let parent = known_topic(&state, &parent_name)?;
    let child = known_topic(&state, &child_name)?;
    let metastore = Arc::clone(&state.replica.view().metastore);
    metastore
        .require_manage(&actor, parent.record())
        .and_then(|()| metastore.require_manage(&actor, child.record()))
        .map_err(refused)?;
    let attach_offsets = attach_offsets(&state, &parent).await?;
    let attach = AttachChild {
        actor,
        parent: parent_name.clone(),
        parent_id: Some(parent.id.clone()),
        child: child_name,
        child_id: Some(child.id.clone()),
        delay_ms: request.delay_ms,
        attach_epoch: AttachEpoch::mint(&mut rand::rng()),
        attach_offsets,
    };
    propose(&state, Command::AttachChild(attach)).await?;
    let parent = known_topic(&state, &parent_name)?;
    Ok(json_response(StatusCode::OK, &record(&parent)))
}

/// `GET /v1/topics/{parent}/children` → `200` the children in attach order
/// with their lag; any grant on the parent.
pub(crate) async fn list(
    State(state): State<Arc<ApiState>>,
    Path(parent_name): Path<String>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let parent = readable_topic(&state, &method, &headers, &parent_name).await?;
    let with_partitions = partitions_param(query.as_deref().unwrap_or(""))?;
    let positions = positions(&state, &parent).await;
    let now_unix_ms = state.clock().unix_ms();
    let children: Vec<Value> = parent
        .children
        .iter()
        .map(|child| {
            let stub = state.replica.topic_meta(child);
            let delay_ms = stub.as_ref().map_or(0, |topic| topic.fanout_delay_ms());
            let lag = lag_of(&positions, child);
            let mut entry = json!({
                "name": child,
                "delay_ms": delay_ms,
                "lag_messages": lag.messages,
                "lag_complete": lag.complete,
            });
            if let Some(stub) = stub.filter(|stub| stub.is_stub()) {
                let reports = cursor_reports(&state, &parent, child, &positions);
                remote_children::list_fields(
                    &mut entry,
                    (&parent, &stub),
                    &positions,
                    &reports,
                    with_partitions,
                    now_unix_ms,
                );
            }
            entry
        })
        .collect();
    let body = json!({
        "parent": &*parent.name,
        "parent_id": parent.id.as_str(),
        "children": children,
    });
    Ok(json_response(StatusCode::OK, &body))
}

/// The `partitions` query parameter of a children listing: `true`,
/// `false` or absent (`false`).
///
/// # Errors
/// `400` for any other value.
fn partitions_param(query: &str) -> Result<bool, ApiError> {
    let mut with_partitions = false;
    for param in params(query) {
        if param.name.as_slice() == b"partitions" {
            with_partitions = match param.value.as_slice() {
                b"true" => true,
                b"false" => false,
                _ => {
                    return Err(ApiError::bad_request(
                        "invalid partitions: want true or false",
                    ));
                }
            };
        }
    }
    Ok(with_partitions)
}

/// The reports of `child`'s cursors per parent partition: this node's
/// own, and for partitions other nodes own, what their owners reported in
/// `positions` (`None` where no cursor reported, or where the owner did
/// not answer or is too old to send a remote child's report).
fn cursor_reports(
    state: &ApiState,
    parent: &TopicMeta,
    child: &str,
    positions: &[Option<Positions>],
) -> Vec<(u32, Option<CursorReport>)> {
    (0..parent.partitions)
        .map(|partition| {
            let local = state.fanout.cursor(&parent.name, partition, child);
            let reported = || reported_by_owner(positions, partition, child);
            (partition, local.or_else(reported))
        })
        .collect()
}

/// The report of `child`'s cursor of `partition` as its owner sent it in
/// `positions`: only a remote child's, which carries its shipping report.
fn reported_by_owner(
    positions: &[Option<Positions>],
    partition: u32,
    child: &str,
) -> Option<CursorReport> {
    let positions = positions.get(usize::try_from(partition).ok()?)?.as_ref()?;
    report_in(positions, child)
}

/// `child`'s cursor report in an owner's `positions`: only a remote
/// child's, which carries its shipping report.
fn report_in(positions: &Positions, child: &str) -> Option<CursorReport> {
    Some(CursorReport {
        next_offset: *positions.cursors.get(child)?,
        high_watermark: positions.high_watermark,
        due_lag_ms: None,
        remote: Some(positions.remote.get(child)?.clone()),
    })
}

/// What one parent partition's owner reported: its committed high
/// watermark, and the next offset of each fan-out cursor running there
/// (with a remote child's shipping report).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Positions {
    /// The partition's committed high watermark.
    pub(super) high_watermark: u64,
    /// Each cursor's next offset, by child.
    pub(super) cursors: HashMap<String, u64>,
    /// Each remote child's shipping report, by child.
    pub(super) remote: HashMap<String, RemoteReport>,
}

/// Each parent partition's positions, `None` where the owner did not
/// report (no owner, marked dead, no answer, its log unreadable).
pub(super) async fn positions(state: &ApiState, parent: &TopicMeta) -> Vec<Option<Positions>> {
    let ask = StatsAsk {
        cursors: true,
        remote_reports: true,
        ..StatsAsk::default()
    };
    let mut remote = remote_stats(state, parent, ask).await;
    (0..parent.partitions)
        .map(|partition| {
            let destination = Destination::new(&parent.name, partition);
            match state.replica.route(&destination) {
                Route::Owner { local: true, .. } => local_positions(state, parent, partition),
                Route::Owner { alive: true, .. } => remote.remove(&partition).map(positions_of),
                Route::Owner { .. } | Route::Unassigned => None,
            }
        })
        .collect()
}

/// The positions an owner's statistics entry reports.
fn positions_of(entry: PartitionStatsEntry) -> Positions {
    Positions {
        high_watermark: entry.high_watermark,
        cursors: entry
            .cursors
            .iter()
            .map(|cursor| (cursor.child.clone(), cursor.next_offset))
            .collect(),
        remote: entry
            .cursors
            .into_iter()
            .filter_map(|cursor| {
                let report = cursor.remote?;
                Some((
                    cursor.child,
                    RemoteReport {
                        state: report.state,
                        blocked_at: report.blocked_at,
                        last_success_at_ms: report.last_success_at_ms,
                        oldest_pending_ms: report.oldest_pending_ms,
                    },
                ))
            })
            .collect(),
    }
}

/// What the owner of one parent partition says of a child's cursor there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OwnerCursor {
    /// The owner (this node, or another that answered) reported this:
    /// `None` when no cursor of the child reported there yet, or the
    /// partition has no owner.
    Heard(Option<CursorReport>),
    /// The owner is another node that could not be asked: marked dead, no
    /// answer, no longer the owner, or too old to send a remote child's
    /// report.
    Unheard,
}

/// `child`'s cursor of `partition` of `parent` as its owner reports it:
/// this node's own report, or the owner's answer to `TopicPartitionStats`
/// asked `with_remote_reports`, for that one partition.
pub(crate) async fn owner_cursor(
    state: &ApiState,
    parent: &TopicMeta,
    partition: u32,
    child: &str,
) -> OwnerCursor {
    if let Some(local) = state.fanout.cursor(&parent.name, partition, child) {
        return OwnerCursor::Heard(Some(local));
    }
    let node = match state
        .replica
        .route(&Destination::new(&parent.name, partition))
    {
        Route::Owner { local: true, .. } | Route::Unassigned => return OwnerCursor::Heard(None),
        Route::Owner {
            node, alive: true, ..
        } => node,
        Route::Owner { .. } => return OwnerCursor::Unheard,
    };
    let Some(forwarder) = state.forwarder.get() else {
        return OwnerCursor::Unheard;
    };
    let ask = StatsAsk {
        cursors: true,
        remote_reports: true,
        ..StatsAsk::default()
    };
    let entries = forwarder
        .stats(node, &parent.name, vec![partition], ask, STATS_BUDGET)
        .await
        .unwrap_or_default();
    match entries
        .into_iter()
        .find(|entry| entry.partition == partition && entry.owned)
    {
        Some(entry) => OwnerCursor::Heard(report_in(&positions_of(entry), child)),
        None => OwnerCursor::Unheard,
    }
}

/// This node's positions of a parent partition it owns: the log's high
/// watermark now, and what its cursors last reported.
fn local_positions(state: &ApiState, parent: &TopicMeta, partition: u32) -> Option<Positions> {
    let high_watermark = local_stats(state, parent, partition)?.high_watermark;
    let cursors = state
        .fanout
        .cursors_of(&parent.name, partition)
        .into_iter()
        .map(|(child, report)| (child.to_string(), report.next_offset))
        .collect();
    // This node's remote reports are read from its own status directly.
    Some(Positions {
        high_watermark,
        cursors,
        remote: HashMap::new(),
    })
}

/// A child's lag over every parent partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lag {
    /// Records committed to the parent and not yet delivered, summed over
    /// the partitions that reported.
    messages: u64,
    /// Whether every partition reported a cursor of the child; when not,
    /// `messages` is a lower bound.
    complete: bool,
}

/// `child`'s lag: the sum over parent partitions of the high watermark
/// less the cursor's next offset (never negative: a cursor may report a
/// position the owner's log has not shown yet).
fn lag_of(positions: &[Option<Positions>], child: &str) -> Lag {
    let mut lag = Lag {
        messages: 0,
        complete: true,
    };
    for partition in positions {
        let next_offset = partition
            .as_ref()
            .and_then(|positions| Some((positions.high_watermark, *positions.cursors.get(child)?)));
        match next_offset {
            Some((high_watermark, next_offset)) => {
                lag.messages += high_watermark.saturating_sub(next_offset);
            }
            None => lag.complete = false,
        }
    }
    lag
}

/// `DELETE /v1/topics/{parent}/children/{child}` → `204`; managing either
/// topic. The child keeps its records and schema history and becomes
/// standalone.
pub(crate) async fn detach(
    State(state): State<Arc<ApiState>>,
    Path((parent_name, child_name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let user = authenticate(&state, &method, &headers).await?;
    let force = remote_children::force_param(query.as_deref().unwrap_or(""))?;
    let actor = actor_of(user.as_deref());
    let parent = known_topic(&state, &parent_name)?;
    let child = known_topic(&state, &child_name)?;
    let linked = child
        .parent
        .as_ref()
        .is_some_and(|link| *link.parent == *parent.name);
    if !linked {
        return Err(refused(MetastoreError::NotLinked));
    }
    let metastore = Arc::clone(&state.replica.view().metastore);
    metastore
        .require_manage(&actor, parent.record())
        .or_else(|_| metastore.require_manage(&actor, child.record()))
        .map_err(refused)?;
    if child.is_stub() {
        remote_children::take_write(&state)?;
        let stubs = [Arc::clone(&child)];
        if let Some(refusal) =
            remote_children::check_unshipped(&state, &parent, &stubs, force).await?
        {
            return Ok(refusal);
        }
    }
    let detach = DetachChild {
        actor,
        parent: parent_name,
        child: child_name,
    };
    propose(&state, Command::DetachChild(detach)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reported(high_watermark: u64, cursors: &[(&str, u64)]) -> Option<Positions> {
        Some(Positions {
            high_watermark,
            cursors: cursors
                .iter()
                .map(|(child, next)| ((*child).to_owned(), *next))
                .collect(),
            remote: HashMap::new(),
        })
    }

    #[test]
    fn an_owners_report_of_a_remote_childs_cursor_becomes_that_partitions_report() {
        let shipping = RemoteReport {
            state: "unavailable".into(),
            blocked_at: None,
            last_success_at_ms: Some(1_000),
            oldest_pending_ms: Some(2_000),
        };
        let mut with_report = reported(9, &[("orders-dr", 4), ("audit", 9)]);
        if let Some(positions) = with_report.as_mut() {
            positions
                .remote
                .insert("orders-dr".into(), shipping.clone());
        }
        let positions = vec![with_report, None, reported(3, &[("orders-dr", 3)])];
        assert_eq!(
            reported_by_owner(&positions, 0, "orders-dr"),
            Some(CursorReport {
                next_offset: 4,
                high_watermark: 9,
                due_lag_ms: None,
                remote: Some(shipping),
            })
        );
        // A local child's cursor, an owner that did not answer, a cursor
        // without a report (an older owner), a partition out of range.
        assert_eq!(reported_by_owner(&positions, 0, "audit"), None);
        assert_eq!(reported_by_owner(&positions, 1, "orders-dr"), None);
        assert_eq!(reported_by_owner(&positions, 2, "orders-dr"), None);
        assert_eq!(reported_by_owner(&positions, 7, "orders-dr"), None);
    }

    #[test]
    fn lag_sums_each_partitions_high_watermark_less_the_cursor() {
        let positions = [
            reported(10, &[("audit", 4), ("billing", 10)]),
            reported(7, &[("audit", 7), ("billing", 2)]),
        ];
        let audit = lag_of(&positions, "audit");
        assert_eq!((audit.messages, audit.complete), (6, true));
        let billing = lag_of(&positions, "billing");
        assert_eq!((billing.messages, billing.complete), (5, true));
    }

    #[test]
    fn a_partition_without_a_report_makes_the_lag_a_lower_bound() {
        let positions = [reported(10, &[("audit", 4)]), None, reported(3, &[])];
        let audit = lag_of(&positions, "audit");
        assert_eq!((audit.messages, audit.complete), (6, false));
    }

    #[test]
    fn a_cursor_ahead_of_the_high_watermark_lags_by_nothing() {
        let positions = [reported(5, &[("audit", 9)])];
        assert_eq!(lag_of(&positions, "audit").messages, 0);
    }
}
