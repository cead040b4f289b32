//! Topic routes: create, list, describe, delete. Changes go to the control
//! plane through [`crate::admin::Admin`]; reads come from the local
//! replica and, for partition statistics, the partition logs (this node's,
//! and other owners' through the forwarder).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use narad_meta::{
    Actor, AddSchemaVersion, AlterTopic, AttachEpoch, Command, CreateTopic, DeleteTopic,
    IncarnationId, MetastoreError, NewLink, TopicDefaults, rules,
};
use narad_plog::PartitionStats;
use narad_protocol::PartitionStatsEntry;

use super::body::read_limited;
use super::error::ApiError;
use super::query::params;
use super::{ApiState, authenticate};
use crate::admin::{AdminError, actor_of};
use crate::consume::ahead::stored_frontier_of;
use crate::forward::{STATS_BUDGET, StatsAsk};
use crate::ingress::MESSAGE_BYTES_MAX;
use crate::metadata::{MetadataReplica, TopicMeta};
use crate::topology::{Destination, NodeId, Route, Topology};

/// Longest a create waits for the controller to place the new topic's
/// partitions before answering, so that a client producing, consuming or
/// replaying right after its `201` finds every partition owned. Past it (no
/// live data node, or a slow leader) the create answers anyway; the
/// partitions are placed once a data node is alive.
pub const CREATE_PLACEMENT_WAIT: Duration = Duration::from_secs(2);
/// Topics on one list page by default, and at most.
pub const LIST_LIMIT_DEFAULT: usize = 100;
/// See [`LIST_LIMIT_DEFAULT`].
pub const LIST_LIMIT_MAX: usize = 1_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    #[serde(default)]
    partitions: Option<i64>,
    #[serde(default)]
    retention_ms: Option<i64>,
    #[serde(default)]
    visibility_timeout_ms: Option<i64>,
    #[serde(default)]
    max_in_flight_per_partition: Option<i64>,
    #[serde(default)]
    max_acked_ahead_per_partition: Option<i64>,
    #[serde(default)]
    idempotency_window_ms: Option<i64>,
    #[serde(default)]
    schema: Option<Value>,
    #[serde(default)]
    parent: Option<String>,
    #[serde(default)]
    fanout_delay_ms: Option<i64>,
    /// Accepted and ignored: the owner is always the caller (spec §1.3).
    #[serde(default)]
    #[allow(dead_code)]
    owner: Option<Value>,
}

/// `POST /v1/topics` → `201` topic record.
pub(crate) async fn create(
    State(state): State<Arc<ApiState>>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let user = authenticate(&state, &method, &headers).await?;
    let body = read_limited(&headers, body, MESSAGE_BYTES_MAX, None).await?;
    let request: CreateBody = serde_json::from_slice(&body)
        .map_err(|error| ApiError::bad_request(format!("invalid json: {error}")))?;
    let actor = actor_of(user.as_deref());
    state
        .replica
        .view()
        .metastore
        .require_create(&actor, &request.name)
        .map_err(refused)?;
    let (parent, fanout_delay_ms) = (request.parent.clone(), request.fanout_delay_ms);
    let mut create = create_command(actor, request, state.clock().unix_ms())?;
    if let Some(parent) = parent {
        create.parent = Some(new_link(&state, &create.actor, &parent, fanout_delay_ms).await?);
    }
    let (name, id) = (create.name.clone(), create.id.clone());
    propose(&state, Command::CreateTopic(create)).await?;
    let topic = state
        .replica
        .topic_meta(&name)
        .filter(|topic| topic.id == id)
        .ok_or_else(|| admin_error(AdminError::Unavailable("topic changed after create".into())))?;
    let placed = tokio::time::timeout(CREATE_PLACEMENT_WAIT, placement(&state.replica, &topic))
        .await
        .unwrap_or_else(|_| Arc::clone(&topic));
    let mut body = record(&placed);
    // The spec leaves the role out of a plain create's answer.
    if placed.parent.is_none()
        && let Some(fields) = body.as_object_mut()
    {
        fields.remove("role");
    }
    Ok(json_response(StatusCode::CREATED, &body))
}

/// Waits until this node's replica holds `created` (the same incarnation)
/// with an owner for every partition, and answers with that record. A
/// cluster without a live data node places nothing, so there is nothing to
/// wait for: the record is answered as it is.
async fn placement(replica: &MetadataReplica, created: &Arc<TopicMeta>) -> Arc<TopicMeta> {
    let mut changes = replica.watch_changes();
    loop {
        let view = replica.view();
        if let Some(current) = view.topics.get(&created.name)
            && current.incarnation_id == created.incarnation_id
            && current.owners.iter().all(Option::is_some)
        {
            return Arc::clone(current);
        }
        if !view.members.values().any(|member| member.alive) {
            return Arc::clone(created);
        }
        if changes.changed().await.is_err() {
            return Arc::clone(created);
        }
    }
}

/// The create command of `body` without its fan-out link, checked with the
/// rules the metastore applies that need no state (a delay under a parent
/// included); the proposer's part (an incarnation id, the clock, the schema
/// engine) is done here; the topic is stamped `created_at_ms` (Unix).
fn create_command(
    actor: narad_meta::Actor,
    body: CreateBody,
    created_at_ms: u64,
) -> Result<CreateTopic, ApiError> {
    rules::check_new_topic_name(&body.name).map_err(refused)?;
    if body.parent.is_some() {
        rules::fanout_delay_ms(body.fanout_delay_ms).map_err(refused)?;
    } else if body.fanout_delay_ms.is_some_and(|delay| delay != 0) {
        return Err(ApiError::bad_request(
            "fanout_delay_ms needs parent: only a fan-out child has a delay",
        ));
    }
    let schema = body
        .schema
        .map(|schema| compile_schema(schema).map(|schema| schema.to_string()))
        .transpose()?;
    let create = CreateTopic {
        actor,
        name: body.name,
        id: IncarnationId::mint(&mut rand::rng()),
        partitions: body.partitions,
        retention_ms: body.retention_ms,
        visibility_timeout_ms: body.visibility_timeout_ms,
        max_in_flight_per_partition: body.max_in_flight_per_partition,
        max_acked_ahead_per_partition: body.max_acked_ahead_per_partition,
        idempotency_window_ms: body.idempotency_window_ms,
        schema,
        parent: None,
        defaults: TopicDefaults::default(),
        created_at_ms,
    };
    rules::new_topic(&create, None).map_err(refused)?;
    Ok(create)
}

/// The fan-out link of a create of a child under `parent_name`: the parent
/// must exist (`404`) and be managed by `actor` (`403`); its attach point
/// is asked of its owners (`503` when one cannot be asked). The delay was
/// checked with the create's other fields.
pub(super) async fn new_link(
    state: &ApiState,
    actor: &Actor,
    parent_name: &str,
    fanout_delay_ms: Option<i64>,
) -> Result<NewLink, ApiError> {
    let parent = found(
        state.replica.topic_meta(parent_name),
        MetastoreError::ParentNotFound,
    )?;
    state
        .replica
        .view()
        .metastore
        .require_manage(actor, parent.record())
        .map_err(refused)?;
    let attach_offsets = attach_offsets(state, &parent).await?;
    Ok(NewLink {
        parent: parent_name.to_owned(),
        parent_id: parent.id.clone(),
        fanout_delay_ms,
        attach_epoch: AttachEpoch::mint(&mut rand::rng()),
        attach_offsets,
    })
}

/// The attach point of a link under `parent`: each parent partition's
/// committed high watermark, asked of its owner (this node's log, or the
/// owner's answer to `TopicPartitionStats`).
///
/// # Errors
/// `503` when some partition has no owner, its owner is marked dead, or
/// the owner did not answer: without its high watermark the link would
/// start at a guessed offset, so nothing is linked.
pub(super) async fn attach_offsets(
    state: &ApiState,
    parent: &TopicMeta,
) -> Result<Vec<u64>, ApiError> {
    start_offsets(state, parent, StartFigure::HighWatermark).await
}

/// What each parent partition's owner is asked for a link's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StartFigure {
    /// The committed high watermark: records committed after the attach.
    HighWatermark,
    /// The oldest retained offset: every record the parent still holds.
    OldestOffset,
    /// The consume frontier (every offset below it acknowledged), raised
    /// to the oldest retained offset: the records not consumed yet.
    ConsumeFrontier,
}

impl StartFigure {
    fn name(self) -> &'static str {
        match self {
            Self::HighWatermark => "high watermark",
            Self::OldestOffset => "oldest offset",
            Self::ConsumeFrontier => "consume frontier",
        }
    }
}

/// Each parent partition's `figure`, asked of its owner (see
/// [`attach_offsets`]).
///
/// # Errors
/// `503` when some partition's owner cannot be asked, and for
/// [`StartFigure::ConsumeFrontier`] when an owner cannot read its frontier
/// (or is too old to be asked for it).
pub(crate) async fn start_offsets(
    state: &ApiState,
    parent: &TopicMeta,
    figure: StartFigure,
) -> Result<Vec<u64>, ApiError> {
    let ask = StatsAsk {
        frontier: figure == StartFigure::ConsumeFrontier,
        ..StatsAsk::default()
    };
    let remote = remote_stats(state, parent, ask).await;
    (0..parent.partitions)
        .map(|partition| {
            let destination = Destination::new(&parent.name, partition);
            let value = match state.replica.route(&destination) {
                Route::Owner { local: true, .. } => {
                    local_start(state, parent, partition, figure)
                }
                Route::Owner { alive: true, .. } => {
                    remote.get(&partition).and_then(|entry| match figure {
                        StartFigure::HighWatermark => Some(entry.high_watermark),
                        StartFigure::OldestOffset => Some(entry.oldest_offset),
                        StartFigure::ConsumeFrontier => entry
                            .consume_frontier
                            .map(|frontier| frontier.max(entry.oldest_offset)),
                    })
                }
                Route::Owner { .. } | Route::Unassigned => None,
            };
            value.ok_or_else(|| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "cannot record the attach point: the owner of partition {partition} of {:?} cannot be asked for its {}; retry later",
                        parent.name,
                        figure.name()
                    ),
                )
            })
        })
        .collect()
}

/// `figure` of `parent`'s `partition`, which this node owns.
fn local_start(
    state: &ApiState,
    parent: &TopicMeta,
    partition: u32,
    figure: StartFigure,
) -> Option<u64> {
    let stats = local_stats(state, parent, partition)?;
    match figure {
        StartFigure::HighWatermark => Some(stats.high_watermark),
        StartFigure::OldestOffset => Some(stats.oldest_offset),
        StartFigure::ConsumeFrontier => {
            let destination = Destination::new(&parent.name, partition);
            // A node without a consume service (tests) reads the files.
            let frontier = match state.consume.as_ref() {
                Some(consume) => {
                    consume.frontier_now(&destination, parent.incarnation_id.as_ref())?
                }
                None => stored_frontier_of(state.logs.as_ref()?, &destination)?,
            };
            Some(frontier.max(stats.oldest_offset))
        }
    }
}

/// Proposes `command` through the node's admin; a refusal or an outage
/// as the API's error.
pub(crate) async fn propose(state: &ApiState, command: Command) -> Result<(), ApiError> {
    state.admin.propose(command).await.map_err(admin_error)
}

/// The metastore's refusal as the API's error: its status and text.
pub(crate) fn refused(error: MetastoreError) -> ApiError {
    admin_error(AdminError::from(error))
}

pub(crate) fn admin_error(error: AdminError) -> ApiError {
    let status = match &error {
        AdminError::Refused { status, .. } => {
            StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_REQUEST)
        }
        AdminError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    ApiError::new(status, error.to_string())
}

/// `GET /v1/topics[?limit=N][&page_token=T]`: name order, filtered to what
/// the caller may read, keyset pagination.
pub(crate) async fn list(
    State(state): State<Arc<ApiState>>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let user = authenticate(&state, &method, &headers).await?;
    let (limit, after) = list_query(query.as_deref().unwrap_or(""))?;
    let view = state.replica.view();
    let mut page: Vec<&Arc<TopicMeta>> = view
        .topics
        .iter()
        .filter(|(name, _)| after.as_deref().is_none_or(|after| &***name > after))
        .map(|(_, topic)| topic)
        .take(limit + 1)
        .collect();
    let more = page.len() > limit;
    page.truncate(limit);
    // Filtered after the cut, as the spec says: a page may be short.
    let next_page_token = if more {
        page.last()
            .map(|topic| topic.name.to_string())
            .unwrap_or_default()
    } else {
        String::new()
    };
    let topics: Vec<Value> = page
        .into_iter()
        .filter(|topic| user.as_deref().is_none_or(|user| user.may_read(topic)))
        .map(|topic| record(topic))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({ "topics": topics, "next_page_token": next_page_token }),
    ))
}

fn list_query(query: &str) -> Result<(usize, Option<String>), ApiError> {
    let mut limit = LIST_LIMIT_DEFAULT;
    let mut after = None;
    for param in params(query) {
        match param.name.as_slice() {
            b"limit" => {
                let value: i64 = std::str::from_utf8(&param.value)
                    .ok()
                    .and_then(|text| text.parse().ok())
                    .ok_or_else(|| ApiError::bad_request("invalid limit"))?;
                if value <= 0 {
                    return Err(ApiError::bad_request("limit must be positive"));
                }
                limit = usize::try_from(value)
                    .unwrap_or(LIST_LIMIT_MAX)
                    .min(LIST_LIMIT_MAX);
            }
            b"page_token" if !param.value.is_empty() => {
                after = Some(String::from_utf8_lossy(&param.value).into_owned());
            }
            _ => {}
        }
    }
    Ok((limit, after))
}

/// Authenticates the caller and returns the topic they may read: 404 for an
/// unknown topic, 403 without a grant on it. With security off every topic
/// is readable.
pub(super) async fn readable_topic(
    state: &ApiState,
    method: &Method,
    headers: &HeaderMap,
    name: &str,
) -> Result<Arc<TopicMeta>, ApiError> {
    let user = authenticate(state, method, headers).await?;
    let topic = known_topic(state, name)?;
    if let Some(user) = &user
        && !user.may_read(topic.record())
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "no grant on this topic",
        ));
    }
    Ok(topic)
}

/// Authenticates the caller and returns who acts and the topic, if the
/// caller may manage it by the metastore's rule (ownership or admin): 404
/// for an unknown topic, the metastore's 403 otherwise.
async fn managed_topic(
    state: &ApiState,
    method: &Method,
    headers: &HeaderMap,
    name: &str,
) -> Result<(narad_meta::Actor, Arc<TopicMeta>), ApiError> {
    let user = authenticate(state, method, headers).await?;
    let actor = actor_of(user.as_deref());
    let view = state.replica.view();
    let topic = known_topic(state, name)?;
    view.metastore
        .require_manage(&actor, topic.record())
        .map_err(refused)?;
    Ok((actor, topic))
}

/// The topic called `name`, or the metastore's 404.
pub(super) fn known_topic(state: &ApiState, name: &str) -> Result<Arc<TopicMeta>, ApiError> {
    found(
        state.replica.topic_meta(name),
        MetastoreError::TopicNotFound,
    )
}

/// `value`, or the metastore's `missing` refusal (a 404) when there is none.
pub(crate) fn found<T>(value: Option<T>, missing: MetastoreError) -> Result<T, ApiError> {
    value.ok_or_else(|| refused(missing))
}

/// `GET /v1/topics/{topic}`: the record, schema and partition statistics.
pub(crate) async fn describe(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let topic = readable_topic(&state, &method, &headers, &name).await?;
    let mut body = record(&topic);
    let mut partial = false;
    let remote = remote_stats(&state, &topic, StatsAsk::default()).await;
    let stats: Vec<Value> = (0..topic.partitions)
        .map(|partition| {
            let (stats, available) = partition_stats(&state, &topic, partition, &remote);
            partial |= !available;
            stats
        })
        .collect();
    body["schema_version"] = json!(topic.schema().map_or(0, |schema| schema.version));
    if let Some(schema) = topic.schema() {
        body["schema"] = schema.document.clone();
    }
    body["partition_stats"] = Value::Array(stats);
    body["partial"] = json!(partial);
    Ok(json_response(StatusCode::OK, &body))
}

/// The statistics of the partitions other live nodes own, asked of each
/// owner in parallel (`TopicPartitionStats`) within 2 s in all, with what
/// `ask` adds (each owner's fan-out cursors, each partition's consume
/// frontier). A partition whose owner did not answer is missing from the
/// map.
pub(super) async fn remote_stats(
    state: &ApiState,
    topic: &TopicMeta,
    ask: StatsAsk,
) -> HashMap<u32, PartitionStatsEntry> {
    let Some(forwarder) = state.forwarder.get() else {
        return HashMap::new();
    };
    let mut owners: BTreeMap<NodeId, Vec<u32>> = BTreeMap::new();
    for partition in 0..topic.partitions {
        if let Route::Owner {
            node,
            local: false,
            alive: true,
        } = state
            .replica
            .route(&Destination::new(&topic.name, partition))
        {
            owners.entry(node).or_default().push(partition);
        }
    }
    let mut calls = tokio::task::JoinSet::new();
    for (node, partitions) in owners {
        let forwarder = Arc::clone(forwarder);
        let name = topic.name.to_string();
        calls.spawn(async move {
            forwarder
                .stats(node, &name, partitions, ask, STATS_BUDGET)
                .await
        });
    }
    let mut stats = HashMap::new();
    while let Some(joined) = calls.join_next().await {
        for entry in joined.ok().flatten().unwrap_or_default() {
            if entry.owned {
                stats.insert(entry.partition, entry);
            }
        }
    }
    stats
}

/// One partition's statistics, and whether they are real.
fn partition_stats(
    state: &ApiState,
    topic: &TopicMeta,
    partition: u32,
    remote: &HashMap<u32, PartitionStatsEntry>,
) -> (Value, bool) {
    let destination = Destination::new(&topic.name, partition);
    let placeholder = |owner: String, liveness: &str| {
        json!({
            "index": partition, "segments": 0, "oldest_offset": 0, "next_offset": 0,
            "high_watermark": 0, "size_bytes": 0, "owner_node": owner,
            "status": "owner_unavailable", "owner_liveness": liveness,
        })
    };
    let node = match state.replica.route(&destination) {
        Route::Unassigned => return (placeholder(String::new(), "unassigned"), false),
        Route::Owner {
            local: false,
            node,
            alive,
        } => {
            if let Some(entry) = remote.get(&partition) {
                return (remote_entry_json(entry, node), true);
            }
            let liveness = if alive { "unreachable" } else { "dead" };
            return (placeholder(node.to_string(), liveness), false);
        }
        Route::Owner { node, .. } => node,
    };
    match local_stats(state, topic, partition) {
        Some(stats) => {
            let mut value = json!({
                "index": partition, "segments": stats.segments, "oldest_offset": stats.oldest_offset,
                "next_offset": stats.next_offset, "high_watermark": stats.high_watermark,
                "size_bytes": stats.size_bytes, "owner_node": node.to_string(), "status": "ok",
            });
            if let Some(ms) = stats.oldest_segment_time_ms {
                value["oldest_segment_at"] = json!(ms / 1000);
            }
            (value, true)
        }
        None => (placeholder(node.to_string(), "unknown"), false),
    }
}

/// The statistics of `topic`'s `partition`, which this node owns, from its
/// partition log (opened if it is not open, which is not a use: idle
/// eviction still closes it); `None` when the node has no logs or the log
/// cannot be opened or read.
pub(super) fn local_stats(
    state: &ApiState,
    topic: &TopicMeta,
    partition: u32,
) -> Option<PartitionStats> {
    let destination = Destination::new(&topic.name, partition);
    let log = state
        .logs
        .as_ref()?
        .resolve_to_look(&destination, topic.incarnation_id.as_ref())
        .ok()?;
    log.stats().ok()
}

/// A remote owner's figures in describe's shape.
fn remote_entry_json(entry: &PartitionStatsEntry, node: NodeId) -> Value {
    let mut value = json!({
        "index": entry.partition, "segments": entry.segments,
        "oldest_offset": entry.oldest_offset, "next_offset": entry.next_offset,
        "high_watermark": entry.high_watermark, "size_bytes": entry.size_bytes,
        "owner_node": node.to_string(), "status": "ok",
    });
    if let Some(ms) = entry.oldest_segment_time_ms {
        value["oldest_segment_at"] = json!(ms / 1000);
    }
    value
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AlterBody<'a> {
    #[serde(default)]
    retention_ms: Option<i64>,
    #[serde(default)]
    idempotency_window_ms: Option<i64>,
    #[serde(default)]
    max_in_flight_per_partition: Option<i64>,
    #[serde(default)]
    max_acked_ahead_per_partition: Option<i64>,
    #[serde(default)]
    partitions: Option<i64>,
    /// Present even when `null`, so an explicit null can be refused.
    #[serde(default, borrow, deserialize_with = "present")]
    schema: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    schema_base_version: Option<u32>,
}

fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de serde_json::value::RawValue>, D::Error> {
    <&serde_json::value::RawValue>::deserialize(deserializer).map(Some)
}

/// `PATCH /v1/topics/{topic}` → `200` record; ownership or admin.
pub(crate) async fn alter(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (actor, current) = managed_topic(&state, &method, &headers, &name).await?;
    let body = read_limited(&headers, body, MESSAGE_BYTES_MAX, None).await?;
    let request: AlterBody<'_> = serde_json::from_slice(&body)
        .map_err(|error| ApiError::bad_request(format!("invalid json: {error}")))?;
    // The first refusal answers and the earlier groups stay applied.
    for command in alter_commands(&actor, &current, request)? {
        propose(&state, command).await?;
    }
    let topic = known_topic(&state, &name)?;
    let mut body = record(&topic);
    body["schema_version"] = json!(topic.schema().map_or(0, |schema| schema.version));
    if let Some(schema) = topic.schema() {
        body["schema"] = schema.document.clone();
    }
    Ok(json_response(StatusCode::OK, &body))
}

/// The commands of one alter of `topic`, in the spec's group order
/// (retention, idempotency window, caps, partitions, schema), each group
/// its own command, each checked first with the rule the metastore applies
/// to it.
fn alter_commands(
    actor: &narad_meta::Actor,
    topic: &TopicMeta,
    body: AlterBody<'_>,
) -> Result<Vec<Command>, ApiError> {
    let defaults = TopicDefaults::default();
    let alter = || AlterTopic::named(actor.clone(), &topic.name, Some(topic.id.clone()));
    let mut commands = Vec::new();
    if let Some(retention) = body.retention_ms {
        rules::retention_ms(Some(retention), &defaults).map_err(refused)?;
        let retention_ms = Some(retention);
        commands.push(Command::AlterTopic(AlterTopic {
            retention_ms,
            ..alter()
        }));
    }
    if let Some(window) = body.idempotency_window_ms {
        rules::idempotency_window_ms(Some(window)).map_err(refused)?;
        commands.push(Command::AlterTopic(AlterTopic {
            idempotency_window_ms: Some(window),
            ..alter()
        }));
    }
    let (in_flight, acked_ahead) = (
        body.max_in_flight_per_partition,
        body.max_acked_ahead_per_partition,
    );
    if in_flight.is_some() || acked_ahead.is_some() {
        if in_flight.is_some() {
            rules::max_in_flight(in_flight, &defaults).map_err(refused)?;
        }
        if acked_ahead.is_some() {
            rules::max_acked_ahead(acked_ahead, &defaults).map_err(refused)?;
        }
        commands.push(Command::AlterTopic(AlterTopic {
            max_in_flight_per_partition: in_flight,
            max_acked_ahead_per_partition: acked_ahead,
            ..alter()
        }));
    }
    if let Some(partitions) = body.partitions {
        rules::bounded_partitions(partitions, &defaults).map_err(refused)?;
        let partitions = Some(partitions);
        commands.push(Command::AlterTopic(AlterTopic {
            partitions,
            ..alter()
        }));
    }
    if let Some(raw) = body.schema {
        let document = parse_schema(raw.get())?;
        check_widening(topic, &document)?;
        commands.push(Command::AddSchemaVersion(AddSchemaVersion {
            actor: actor.clone(),
            name: topic.name.to_string(),
            expected_id: Some(topic.id.clone()),
            document: document.to_string(),
            base_version: body.schema_base_version.filter(|&base| base != 0),
        }));
    }
    if commands.is_empty() {
        return Err(refused(MetastoreError::AlterEmpty));
    }
    Ok(commands)
}

/// The proposer's compatibility check of a new schema version: fail-closed
/// widening. A change is accepted only when it provably widens what the
/// topic accepts, which this check proves for two cases: the topic had no
/// schema, or the new schema accepts everything (`true` or `{}`). An
/// identical document passes (the metastore makes it a no-op). Anything
/// else is refused.
fn check_widening(topic: &TopicMeta, document: &Value) -> Result<(), ApiError> {
    let Some(current) = topic.schema() else {
        return Ok(());
    };
    let accepts_all = *document == Value::Bool(true) || *document == json!({});
    if current.document == *document || accepts_all {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "schema change is not a compatible widening of the current schema",
    ))
}

/// A schema document as sent in an alter: not `null`, and as
/// [`compile_schema`] wants it.
fn parse_schema(text: &str) -> Result<Value, ApiError> {
    let schema: Value = serde_json::from_str(text)
        .map_err(|error| ApiError::bad_request(format!("invalid json: {error}")))?;
    if schema.is_null() {
        return Err(ApiError::bad_request("schema must not be null"));
    }
    compile_schema(schema)
}

/// A schema document: a JSON object or `true`, that the schema engine
/// compiles (the proposer's check: the metastore holds no schema engine).
fn compile_schema(schema: Value) -> Result<Value, ApiError> {
    match schema {
        Value::Object(_) | Value::Bool(true) => {
            jsonschema::validator_for(&schema)
                .map_err(|error| ApiError::bad_request(format!("schema: {error}")))?;
            Ok(schema)
        }
        _ => Err(ApiError::bad_request(
            "schema must be a JSON object or true",
        )),
    }
}

/// `GET /v1/topics/{topic}/schema`: every version, oldest first.
pub(crate) async fn schema_history(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let topic = readable_topic(&state, &method, &headers, &name).await?;
    let versions: Vec<Value> = topic
        .schema_history
        .iter()
        .map(|schema| json!({ "version": schema.version, "schema": schema.document }))
        .collect();
    let body = json!({
        "topic": &*topic.name,
        "version": topic.schema().map_or(0, |schema| schema.version),
        "versions": versions,
    });
    Ok(json_response(StatusCode::OK, &body))
}

/// `DELETE /v1/topics/{topic}[?force=true|false]` → `204`; ownership or
/// admin. A stub, or a parent with remote children, is refused `409`
/// while records are unshipped unless `force=true` (spec §1.3, v3.2).
pub(crate) async fn delete(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (actor, topic) = managed_topic(&state, &method, &headers, &name).await?;
    let force = super::remote_children::force_param(query.as_deref().unwrap_or(""))?;
    let (parent, stubs) = match topic.parent.as_ref().filter(|_| topic.is_stub()) {
        Some(link) => (
            state.replica.topic_meta(&link.parent),
            vec![Arc::clone(&topic)],
        ),
        None => {
            let stubs = topic
                .children
                .iter()
                .filter_map(|child| state.replica.topic_meta(child))
                .filter(|child| child.is_stub())
                .collect();
            (Some(Arc::clone(&topic)), stubs)
        }
    };
    if let Some(parent) = parent.filter(|_| !stubs.is_empty()) {
        super::remote_children::take_write(&state)?;
        if let Some(refusal) =
            super::remote_children::check_unshipped(&state, &parent, &stubs, force).await?
        {
            return Ok(refusal);
        }
    }
    let delete = DeleteTopic {
        actor,
        name,
        expected_id: Some(topic.id.clone()),
    };
    propose(&state, Command::DeleteTopic(delete)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The topic record JSON (spec §1.3, wire contract §9.2): the settings,
/// then the fan-out role and links (`children` on a parent; `parent`,
/// `attach_epoch`, `fanout_delay_ms` and `attach_offsets` on a child).
pub(super) fn record(topic: &TopicMeta) -> Value {
    let mut value = json!({
        "name": &*topic.name,
        "partitions": topic.partitions,
        "retention_ms": topic.retention_ms,
        "visibility_timeout_ms": topic.visibility_timeout_ms,
        "max_in_flight_per_partition": topic.max_in_flight_per_partition,
        "max_acked_ahead_per_partition": topic.max_acked_ahead_per_partition,
        "idempotency_window_ms": topic.idempotency_window_ms,
        "created_at": topic.created_at_ms,
    });
    if let Some(id) = &topic.incarnation_id {
        value["id"] = json!(&**id);
    }
    if let Some(owner) = &topic.owner {
        value["owner"] = json!(owner);
    }
    value["role"] = json!(topic.role());
    if !topic.children.is_empty() {
        value["children"] = json!(topic.children);
    }
    if let Some(link) = &topic.parent {
        value["parent"] = json!(link.parent);
        value["attach_epoch"] = json!(link.attach_epoch.as_str());
        value["fanout_delay_ms"] = json!(link.fanout_delay_ms);
        value["attach_offsets"] = json!(link.attach_offsets);
    }
    if let Some(link) = &topic.remote {
        value["remote"] = super::remote_children::remote_json(link);
    }
    value
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut text = body.to_string();
    text.push('\n');
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}
