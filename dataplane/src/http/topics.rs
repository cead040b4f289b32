//! Topic routes: create, list, describe, delete. Changes go to the control
//! plane through [`crate::admin::Admin`]; reads come from the local
//! replica and, for partition statistics, the local partition logs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::body::read_limited;
use super::error::ApiError;
use super::query::params;
use super::{ApiState, authenticate};
use crate::admin::{Actor, AdminError, AlterTopic, CreateTopic};
use crate::forward::STATS_BUDGET;
use crate::ingress::MESSAGE_BYTES_MAX;
use crate::metadata::{
    GrantAction, MetadataReplica, RETENTION_MS_DEFAULT, TopicMeta, User,
    VISIBILITY_TIMEOUT_MS_DEFAULT,
};
use crate::topology::{Destination, NodeId, Route, Topology};
use narad_protocol::PartitionStatsEntry;

/// New topic names are at most this many bytes.
pub const TOPIC_NAME_BYTES_MAX: usize = 200;
/// Fewest partitions a topic has.
pub const PARTITIONS_MIN: u32 = 3;
/// Most partitions a topic has (`topic.max_partitions`).
pub const PARTITIONS_MAX: u32 = 108;
/// Partitions of a topic created without a count.
pub const PARTITIONS_DEFAULT: u32 = 3;
/// Longest a create waits for the controller to place the new topic's
/// partitions before answering, so that a client producing, consuming or
/// replaying right after its `201` finds every partition owned. Past it (no
/// live data node, or a slow leader) the create answers anyway; the
/// partitions are placed once a data node is alive.
pub const CREATE_PLACEMENT_WAIT: Duration = Duration::from_secs(2);
/// Shortest retention other than 0 (keep forever): one hour.
pub const RETENTION_MS_MIN: i64 = 3_600_000;
/// Topics on one list page by default, and at most.
pub const LIST_LIMIT_DEFAULT: usize = 100;
/// See [`LIST_LIMIT_DEFAULT`].
pub const LIST_LIMIT_MAX: usize = 1_000;
/// Default per-partition caps.
pub const CAP_DEFAULT: u32 = 1_024;

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
    if let Some(user) = &user
        && !user.may(GrantAction::Create, &request.name)
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "no create grant on this topic",
        ));
    }
    let create = validate(request)?;
    let topic = state
        .admin
        .create_topic(Actor::of(user.as_deref()), create)
        .await
        .map_err(admin_error)?;
    let placed = tokio::time::timeout(CREATE_PLACEMENT_WAIT, placement(&state.replica, &topic))
        .await
        .unwrap_or_else(|_| Arc::clone(&topic));
    Ok(json_response(StatusCode::CREATED, &record(&placed)))
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

fn validate(body: CreateBody) -> Result<CreateTopic, ApiError> {
    check_name(&body.name)?;
    if body.parent.is_some() || body.fanout_delay_ms.is_some_and(|delay| delay != 0) {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "fan-out children are not supported by this node yet",
        ));
    }
    let partitions = match body.partitions.unwrap_or(0) {
        0 => PARTITIONS_DEFAULT,
        p if p < i64::from(PARTITIONS_MIN) => {
            return Err(ApiError::bad_request(
                "partitions must be >= 3 (0 = use default)",
            ));
        }
        p if p > i64::from(PARTITIONS_MAX) => {
            return Err(ApiError::bad_request(format!(
                "partitions must be <= {PARTITIONS_MAX}"
            )));
        }
        p => u32::try_from(p).unwrap_or(PARTITIONS_MAX),
    };
    let retention_ms = match body.retention_ms {
        None => RETENTION_MS_DEFAULT,
        Some(r) if r < 0 => return Err(ApiError::bad_request("retention_ms must be >= 0")),
        Some(r) if r != 0 && r < RETENTION_MS_MIN => {
            return Err(ApiError::bad_request(
                "retention_ms must be 0 (keep forever) or at least 3600000 (1 hour)",
            ));
        }
        Some(r) => r.unsigned_abs(),
    };
    let schema = match body.schema {
        None => None,
        Some(schema @ (Value::Object(_) | Value::Bool(true))) => {
            if let Err(error) = jsonschema::validator_for(&schema) {
                return Err(ApiError::bad_request(format!("schema: {error}")));
            }
            Some(schema)
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                "schema must be a JSON object or true",
            ));
        }
    };
    Ok(CreateTopic {
        name: body.name,
        partitions,
        retention_ms,
        visibility_timeout_ms: positive_or(
            body.visibility_timeout_ms,
            VISIBILITY_TIMEOUT_MS_DEFAULT,
            "visibility_timeout_ms",
        )?,
        max_in_flight_per_partition: cap(
            body.max_in_flight_per_partition,
            "max_in_flight_per_partition",
        )?,
        max_acked_ahead_per_partition: cap(
            body.max_acked_ahead_per_partition,
            "max_acked_ahead_per_partition",
        )?,
        schema,
    })
}

fn positive_or(value: Option<i64>, default: u64, field: &str) -> Result<u64, ApiError> {
    match value {
        None | Some(0) => Ok(default),
        Some(v) if v < 0 => Err(ApiError::bad_request(format!("{field} must be >= 0"))),
        Some(v) => Ok(v.unsigned_abs()),
    }
}

fn cap(value: Option<i64>, field: &str) -> Result<u32, ApiError> {
    let value = positive_or(value, u64::from(CAP_DEFAULT), field)?;
    u32::try_from(value).map_err(|_| ApiError::bad_request(format!("{field} is too large")))
}

/// 1–200 bytes of `A-Z a-z 0-9 . _ -`, not `.` or `..`.
fn check_name(name: &str) -> Result<(), ApiError> {
    if name.len() > TOPIC_NAME_BYTES_MAX {
        return Err(ApiError::bad_request(format!(
            "topic name is {} bytes; new topic names are limited to {TOPIC_NAME_BYTES_MAX} bytes",
            name.len()
        )));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name == "." || name == ".." || !name.chars().all(allowed) {
        return Err(ApiError::bad_request(
            "invalid topic name: use 1-200 characters of A-Z a-z 0-9 . _ - (not . or ..)",
        ));
    }
    Ok(())
}

pub(crate) fn admin_error(error: AdminError) -> ApiError {
    let status = match &error {
        AdminError::Conflict(_) => StatusCode::CONFLICT,
        AdminError::NotFound | AdminError::UserNotFound => StatusCode::NOT_FOUND,
        AdminError::Forbidden(_) => StatusCode::FORBIDDEN,
        AdminError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        AdminError::Invalid(_) => StatusCode::BAD_REQUEST,
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
/// unknown topic, 403 without a grant on it.
async fn readable_topic(
    state: &ApiState,
    method: &Method,
    headers: &HeaderMap,
    name: &str,
) -> Result<Arc<TopicMeta>, ApiError> {
    let refusal = "no grant on this topic";
    let (_, topic) =
        authorized_topic(state, method, headers, name, User::may_read, refusal).await?;
    Ok(topic)
}

/// Authenticates the caller and returns who acts and the topic if `allowed`
/// says the caller may act on it: 404 for an unknown topic, 403 with
/// `refusal` otherwise. With security off there is no caller and every act
/// is allowed.
async fn authorized_topic(
    state: &ApiState,
    method: &Method,
    headers: &HeaderMap,
    name: &str,
    allowed: fn(&User, &TopicMeta) -> bool,
    refusal: &str,
) -> Result<(Actor, Arc<TopicMeta>), ApiError> {
    let user = authenticate(state, method, headers).await?;
    let topic = state
        .replica
        .topic_meta(name)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "topic not found"))?;
    if let Some(user) = &user
        && !allowed(user, &topic)
    {
        return Err(ApiError::new(StatusCode::FORBIDDEN, refusal));
    }
    Ok((Actor::of(user.as_deref()), topic))
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
    let remote = remote_stats(&state, &topic).await;
    let stats: Vec<Value> = (0..topic.partitions)
        .map(|partition| {
            let (stats, available) = partition_stats(&state, &topic, partition, &remote);
            partial |= !available;
            stats
        })
        .collect();
    body["schema_version"] = json!(topic.schema.as_ref().map_or(0, |schema| schema.version));
    if let Some(schema) = &topic.schema {
        body["schema"] = schema.document.clone();
    }
    body["partition_stats"] = Value::Array(stats);
    body["partial"] = json!(partial);
    Ok(json_response(StatusCode::OK, &body))
}

/// The statistics of the partitions other live nodes own, asked of each
/// owner in parallel (`TopicPartitionStats`) within 2 s in all. A partition
/// whose owner did not answer is missing from the map.
async fn remote_stats(state: &ApiState, topic: &TopicMeta) -> HashMap<u32, PartitionStatsEntry> {
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
        calls.spawn(async move { forwarder.stats(node, &name, partitions, STATS_BUDGET).await });
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
    let stats = state
        .logs
        .as_ref()
        .map(|logs| logs.resolve(&destination, topic.incarnation_id.as_ref()))
        .and_then(Result::ok)
        .and_then(|log| log.stats().ok());
    match stats {
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
    let (actor, _) = authorized_topic(
        &state,
        &method,
        &headers,
        &name,
        User::may_manage,
        "altering a topic needs its ownership or admin",
    )
    .await?;
    let body = read_limited(&headers, body, MESSAGE_BYTES_MAX, None).await?;
    let request: AlterBody<'_> = serde_json::from_slice(&body)
        .map_err(|error| ApiError::bad_request(format!("invalid json: {error}")))?;
    let alter = validate_alter(request)?;
    let topic = state
        .admin
        .alter_topic(actor, name, alter)
        .await
        .map_err(admin_error)?;
    let mut body = record(&topic);
    body["schema_version"] = json!(topic.schema.as_ref().map_or(0, |schema| schema.version));
    if let Some(schema) = &topic.schema {
        body["schema"] = schema.document.clone();
    }
    Ok(json_response(StatusCode::OK, &body))
}

fn validate_alter(body: AlterBody<'_>) -> Result<AlterTopic, ApiError> {
    let nothing = body.retention_ms.is_none()
        && body.max_in_flight_per_partition.is_none()
        && body.max_acked_ahead_per_partition.is_none()
        && body.partitions.is_none()
        && body.schema.is_none();
    if nothing {
        return Err(ApiError::bad_request(
            "nothing to change: send at least one field",
        ));
    }
    let retention_ms = match body.retention_ms {
        None => None,
        Some(r) if r < 0 => return Err(ApiError::bad_request("retention_ms must be >= 0")),
        Some(r) if r != 0 && r < RETENTION_MS_MIN => {
            return Err(ApiError::bad_request(
                "retention_ms must be 0 (keep forever) or at least 3600000 (1 hour)",
            ));
        }
        Some(r) => Some(r.unsigned_abs()),
    };
    let partitions = match body.partitions {
        None => None,
        Some(p) if p > i64::from(PARTITIONS_MAX) => {
            return Err(ApiError::bad_request(format!(
                "partitions must be <= {PARTITIONS_MAX}"
            )));
        }
        Some(p) if p < i64::from(PARTITIONS_MIN) => {
            return Err(ApiError::bad_request("partitions can only grow"));
        }
        Some(p) => Some(u32::try_from(p).unwrap_or(PARTITIONS_MAX)),
    };
    let schema = match body.schema {
        None => None,
        Some(raw) => Some(parse_schema(raw.get())?),
    };
    Ok(AlterTopic {
        retention_ms,
        max_in_flight_per_partition: body
            .max_in_flight_per_partition
            .map(|value| cap(Some(value), "max_in_flight_per_partition"))
            .transpose()?,
        max_acked_ahead_per_partition: body
            .max_acked_ahead_per_partition
            .map(|value| cap(Some(value), "max_acked_ahead_per_partition"))
            .transpose()?,
        partitions,
        schema,
        schema_base_version: body.schema_base_version.filter(|&base| base != 0),
    })
}

/// A schema document: a JSON object or `true`, that compiles.
fn parse_schema(text: &str) -> Result<Value, ApiError> {
    let schema: Value = serde_json::from_str(text)
        .map_err(|error| ApiError::bad_request(format!("invalid json: {error}")))?;
    match schema {
        Value::Null => Err(ApiError::bad_request("schema must not be null")),
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
        "version": topic.schema.as_ref().map_or(0, |schema| schema.version),
        "versions": versions,
    });
    Ok(json_response(StatusCode::OK, &body))
}

/// `DELETE /v1/topics/{topic}` → `204`; ownership or admin.
pub(crate) async fn delete(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (actor, _) = authorized_topic(
        &state,
        &method,
        &headers,
        &name,
        User::may_manage,
        "deleting a topic needs its ownership or admin",
    )
    .await?;
    state
        .admin
        .delete_topic(actor, name)
        .await
        .map_err(admin_error)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The topic record JSON (wire contract §9.2).
fn record(topic: &TopicMeta) -> Value {
    let mut value = json!({
        "name": &*topic.name,
        "partitions": topic.partitions,
        "retention_ms": topic.retention_ms,
        "visibility_timeout_ms": topic.visibility_timeout_ms,
        "max_in_flight_per_partition": topic.max_in_flight_per_partition,
        "max_acked_ahead_per_partition": topic.max_acked_ahead_per_partition,
        "created_at": topic.created_at_ms,
    });
    if let Some(id) = &topic.incarnation_id {
        value["id"] = json!(&**id);
    }
    if let Some(owner) = &topic.owner {
        value["owner"] = json!(owner);
    }
    value
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut text = body.to_string();
    text.push('\n');
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}
