//! The remotes API's JSON: request bodies (strict, unknown fields refused)
//! and the Remote object (spec §1.10), which never carries the password or
//! its sealed bytes.

use narad_meta::{Compression, Remote, RemoteLimits};
use narad_remotes::url::limit_ranges::{
    CHECK_INTERVAL_MS, CONN_MAX_AGE_MS, IDLE_CONN_TIMEOUT_MS, MAX_IN_FLIGHT, REQUEST_TIMEOUT_MS,
};
use narad_remotes::url::{self as rules, RuleError};
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

/// `limits` as sent: any field may be missing.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsBody {
    max_in_flight: Option<u32>,
    request_timeout_ms: Option<u64>,
    idle_conn_timeout_ms: Option<u64>,
    conn_max_age_ms: Option<u64>,
    check_interval_ms: Option<u64>,
    compression: Option<String>,
}

/// `POST /v1/remotes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    pub(crate) name: String,
    pub(crate) url: String,
    pub(crate) username: String,
    pub(crate) password: String,
    #[serde(default)]
    pub(crate) ca_pem: Option<String>,
    #[serde(default)]
    pub(crate) limits: Option<LimitsBody>,
}

/// `PATCH /v1/remotes/{name}`: each field given changes; `ca_pem: null`
/// removes the pinned CA; `revision` refuses the change when the remote
/// moved on since it was read.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PatchBody {
    #[serde(default)]
    pub(crate) url: Option<String>,
    #[serde(default)]
    pub(crate) username: Option<String>,
    #[serde(default)]
    pub(crate) password: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) ca_pem: Option<Option<String>>,
    #[serde(default)]
    pub(crate) limits: Option<LimitsBody>,
    #[serde(default)]
    pub(crate) revision: Option<u64>,
}

/// `POST /v1/remotes/{name}/test`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TestBody {
    pub(crate) topic: String,
    #[serde(default)]
    pub(crate) source: Option<String>,
}

/// A field that is present, even as `null`: `Some(None)` for `null`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

/// `body` over `base` (a new remote's defaults, or its stored limits),
/// each limit checked against its range.
///
/// # Errors
/// [`RuleError`] for a limit out of range or an unknown compression.
pub(crate) fn limits_over(base: RemoteLimits, body: LimitsBody) -> Result<RemoteLimits, RuleError> {
    let compression = match body.compression.as_deref().map(rules::parse_compression) {
        None => base.compression,
        Some(Ok(true)) => Compression::Zstd,
        Some(Ok(false)) => Compression::None,
        Some(Err(error)) => return Err(error),
    };
    let limits = RemoteLimits {
        max_in_flight: body.max_in_flight.unwrap_or(base.max_in_flight),
        request_timeout_ms: body.request_timeout_ms.unwrap_or(base.request_timeout_ms),
        idle_conn_timeout_ms: body
            .idle_conn_timeout_ms
            .unwrap_or(base.idle_conn_timeout_ms),
        conn_max_age_ms: body.conn_max_age_ms.unwrap_or(base.conn_max_age_ms),
        check_interval_ms: body.check_interval_ms.unwrap_or(base.check_interval_ms),
        compression,
    };
    let checks = [
        (
            "limits.max_in_flight",
            u64::from(limits.max_in_flight),
            &MAX_IN_FLIGHT,
        ),
        (
            "limits.request_timeout_ms",
            limits.request_timeout_ms,
            &REQUEST_TIMEOUT_MS,
        ),
        (
            "limits.idle_conn_timeout_ms",
            limits.idle_conn_timeout_ms,
            &IDLE_CONN_TIMEOUT_MS,
        ),
        (
            "limits.conn_max_age_ms",
            limits.conn_max_age_ms,
            &CONN_MAX_AGE_MS,
        ),
        (
            "limits.check_interval_ms",
            limits.check_interval_ms,
            &CHECK_INTERVAL_MS,
        ),
    ];
    for (field, value, range) in checks {
        rules::check_limit(field, value, range)?;
    }
    Ok(limits)
}

/// The `limits` object.
pub(crate) fn limits_json(limits: &RemoteLimits) -> Value {
    json!({
        "max_in_flight": limits.max_in_flight,
        "request_timeout_ms": limits.request_timeout_ms,
        "idle_conn_timeout_ms": limits.idle_conn_timeout_ms,
        "conn_max_age_ms": limits.conn_max_age_ms,
        "check_interval_ms": limits.check_interval_ms,
        "compression": limits.compression.name(),
    })
}

/// The Remote object: `created_at` and `password.set_at` in Unix seconds
/// like a topic's `created_at`; `ca_pem_sha512` is `null` without a pinned
/// CA; `links` names the stub topics that ship to it; `nodes` is what the
/// caller adds (each node's view of the credential).
pub(crate) fn remote_json(remote: &Remote, links: &[String], nodes: Option<Vec<Value>>) -> Value {
    let ca_pem_sha512 = remote
        .ca_pem
        .as_deref()
        .map(|pem| rules::parse_ca_pem(pem).map_or_else(|_| Value::Null, |ca| json!(ca.sha512)));
    let mut value = json!({
        "name": remote.name,
        "id": remote.id.as_str(),
        "url": remote.url,
        "username": remote.username,
        "password": {
            "fingerprint": remote.password.fingerprint,
            "set_at": remote.password.set_at_ms / 1000,
            "set_by": remote.password.set_by,
            "key_version": remote.password.key_version,
        },
        "credential_version": remote.credential_version,
        "ca_pem_sha512": ca_pem_sha512.unwrap_or(Value::Null),
        "limits": limits_json(&remote.limits),
        "revision": remote.revision,
        "created_at": remote.created_at_ms / 1000,
        "created_by": remote.created_by,
        "links": links,
    });
    if let Some(nodes) = nodes {
        value["nodes"] = Value::Array(nodes);
    }
    value
}
