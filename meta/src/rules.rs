//! The spec's validation rules for names, settings, grants and schema
//! documents: pure functions of the request and the proposer's defaults,
//! shared by every command that takes such a field.

use super::command::{Actor, CreateTopic, TopicDefaults};
use super::error::MetastoreError;
use super::limits::{
    DELAY_RETENTION_MARGIN_MS, FANOUT_DELAY_MS_MAX, GRANT_PATTERN_BYTES_MAX,
    IDEMPOTENCY_WINDOW_MS_DEFAULT, IDEMPOTENCY_WINDOW_MS_MAX, IDEMPOTENCY_WINDOW_MS_MIN,
    PARTITIONS_MIN, PASSWORD_BYTES_MAX, RETENTION_MS_MIN, SCHEMA_DOCUMENT_BYTES_MAX,
    TOPIC_NAME_BYTES_MAX, USERNAME_BYTES_MAX,
};
use super::state::{Grant, GrantAction, SchemaVersion, Topic};

/// The characters of topic names, usernames and grant patterns.
fn is_name_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-')
}

/// Only name characters, and not a path component of its own.
fn is_plain_name(name: &str) -> bool {
    name.bytes().all(is_name_byte) && name != "." && name != ".."
}

/// A name for a new topic: 1 to 200 characters of `A-Z a-z 0-9 . _ -`,
/// not `.` or `..`.
pub fn check_new_topic_name(name: &str) -> Result<(), MetastoreError> {
    if name.is_empty() {
        return Err(MetastoreError::TopicNameEmpty);
    }
    if !is_plain_name(name) {
        return Err(MetastoreError::TopicNameInvalid {
            name: name.to_owned(),
        });
    }
    if name.len() > TOPIC_NAME_BYTES_MAX {
        return Err(MetastoreError::TopicNameTooLong { bytes: name.len() });
    }
    Ok(())
}

/// A username: 1 to 64 characters of `A-Z a-z 0-9 . _ -`, not `.` or `..`.
pub fn check_username(name: &str) -> Result<(), MetastoreError> {
    if name.is_empty() || name.len() > USERNAME_BYTES_MAX || !is_plain_name(name) {
        return Err(MetastoreError::UsernameInvalid {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// A password: 1 to 72 bytes. Checked by the proposer before hashing,
/// because `apply` only ever sees the hash.
///
/// # Errors
/// [`MetastoreError::PasswordLength`] outside 1 to 72 bytes.
pub fn check_password(password: &[u8]) -> Result<(), MetastoreError> {
    if password.is_empty() || password.len() > PASSWORD_BYTES_MAX {
        return Err(MetastoreError::PasswordLength);
    }
    Ok(())
}

/// Grants: `admin` takes no patterns, the other actions at least one; a
/// pattern is topic-name characters (at most 255) optionally ending in a
/// single `*`, and `*` alone matches every name.
pub fn check_grants(grants: &[Grant]) -> Result<(), MetastoreError> {
    for grant in grants {
        let invalid = |reason: String| Err(MetastoreError::GrantInvalid { reason });
        match (grant.action, grant.patterns.is_empty()) {
            (GrantAction::Admin, false) => return invalid("admin takes no patterns".into()),
            (GrantAction::Admin, true) => continue,
            (action, true) => {
                return invalid(format!("{} needs at least one pattern", action.name()));
            }
            (_, false) => {}
        }
        for pattern in &grant.patterns {
            check_pattern(pattern).or_else(invalid)?;
        }
    }
    Ok(())
}

/// Only the root admin gives the `admin` grant, whether creating a user or
/// replacing a user's grants.
///
/// # Errors
/// `Forbidden` when `grants` holds `admin` and the giver is not root.
pub fn check_admin_grant_giver(
    grants: &[Grant],
    giver_is_root: bool,
) -> Result<(), MetastoreError> {
    let gives_admin = grants
        .iter()
        .any(|grant| grant.action == GrantAction::Admin);
    if gives_admin && !giver_is_root {
        return Err(MetastoreError::Forbidden {
            reason: super::authz::forbidden::ADMIN_GRANT_NEEDS_ROOT,
        });
    }
    Ok(())
}

fn check_pattern(pattern: &str) -> Result<(), String> {
    let body = pattern.strip_suffix('*').unwrap_or(pattern);
    if pattern.is_empty() {
        return Err("empty pattern".into());
    }
    if body.contains('*') {
        return Err(format!("pattern {pattern:?}: '*' may only end a pattern"));
    }
    if body.len() > GRANT_PATTERN_BYTES_MAX || !body.bytes().all(is_name_byte) {
        return Err(format!(
            "pattern {pattern:?}: use at most {GRANT_PATTERN_BYTES_MAX} characters of A-Z a-z 0-9 . _ -, optionally ending in '*'"
        ));
    }
    Ok(())
}

/// `retention_ms` as sent: omitted = the default, 0 = keep forever,
/// otherwise at least one hour.
pub fn retention_ms(sent: Option<i64>, defaults: &TopicDefaults) -> Result<u64, MetastoreError> {
    let Some(value) = sent else {
        return Ok(defaults.retention_ms);
    };
    let value = u64::try_from(value).map_err(|_| MetastoreError::RetentionNegative)?;
    if value != 0 && value < RETENTION_MS_MIN {
        return Err(MetastoreError::RetentionBelowFloor {
            retention_ms: value,
        });
    }
    Ok(value)
}

/// `idempotency_window_ms` as sent: omitted = the default (two minutes),
/// otherwise one second to one day. Unlike the caps, 0 does not ask for
/// the default: a window of 0 would read as "no deduplication", which the
/// topic does not offer.
pub fn idempotency_window_ms(sent: Option<i64>) -> Result<u64, MetastoreError> {
    let Some(value) = sent else {
        return Ok(IDEMPOTENCY_WINDOW_MS_DEFAULT);
    };
    match u64::try_from(value) {
        Ok(window_ms)
            if (IDEMPOTENCY_WINDOW_MS_MIN..=IDEMPOTENCY_WINDOW_MS_MAX).contains(&window_ms) =>
        {
            Ok(window_ms)
        }
        _ => Err(MetastoreError::IdempotencyWindowOutOfRange {
            idempotency_window_ms: value,
        }),
    }
}

/// A setting where omitted or 0 takes the default and negative is refused.
fn positive_or_default(
    sent: Option<i64>,
    default: u64,
    negative: MetastoreError,
) -> Result<u64, MetastoreError> {
    match sent {
        None | Some(0) => Ok(default),
        Some(value) => u64::try_from(value).map_err(|_| negative),
    }
}

/// `visibility_timeout_ms` as sent.
pub fn visibility_timeout_ms(
    sent: Option<i64>,
    defaults: &TopicDefaults,
) -> Result<u64, MetastoreError> {
    let negative = MetastoreError::VisibilityTimeoutNegative;
    positive_or_default(sent, defaults.visibility_timeout_ms, negative)
}

/// `max_in_flight_per_partition` as sent.
pub fn max_in_flight(sent: Option<i64>, defaults: &TopicDefaults) -> Result<u64, MetastoreError> {
    let negative = MetastoreError::CapNegative {
        field: "max_in_flight_per_partition",
    };
    positive_or_default(sent, defaults.max_in_flight_per_partition, negative)
}

/// `max_acked_ahead_per_partition` as sent.
pub fn max_acked_ahead(sent: Option<i64>, defaults: &TopicDefaults) -> Result<u64, MetastoreError> {
    let negative = MetastoreError::CapNegative {
        field: "max_acked_ahead_per_partition",
    };
    positive_or_default(sent, defaults.max_acked_ahead_per_partition, negative)
}

/// `partitions` of a create: omitted or 0 = `inherited` (the parent's count
/// under a parent) or else the default; at least 3 and at most the ceiling.
pub fn create_partitions(
    sent: Option<i64>,
    inherited: Option<u32>,
    defaults: &TopicDefaults,
) -> Result<u32, MetastoreError> {
    let value = match sent {
        None | Some(0) => i64::from(inherited.unwrap_or(defaults.partitions)),
        Some(value) => value,
    };
    bounded_partitions(value, defaults)
}

/// A partition count within the floor and the ceiling.
pub fn bounded_partitions(value: i64, defaults: &TopicDefaults) -> Result<u32, MetastoreError> {
    if value < i64::from(PARTITIONS_MIN) {
        return Err(MetastoreError::PartitionsTooFew);
    }
    let max = defaults.partitions_max;
    match u32::try_from(value) {
        Ok(count) if count <= max => Ok(count),
        _ => Err(MetastoreError::PartitionsTooMany { max }),
    }
}

/// A fan-out delay as sent: omitted = 0; at most one year.
pub fn fanout_delay_ms(sent: Option<i64>) -> Result<u64, MetastoreError> {
    let value =
        u64::try_from(sent.unwrap_or(0)).map_err(|_| MetastoreError::FanoutDelayNegative)?;
    if value > FANOUT_DELAY_MS_MAX {
        return Err(MetastoreError::FanoutDelayTooLong);
    }
    Ok(value)
}

/// A parent's retention must cover a child's delay plus one hour (a parent
/// that keeps records forever covers every delay).
pub fn check_delay_fits(retention_ms: u64, delay_ms: u64) -> Result<(), MetastoreError> {
    let required_ms = delay_ms + DELAY_RETENTION_MARGIN_MS;
    if retention_ms != 0 && retention_ms < required_ms {
        return Err(MetastoreError::DelayExceedsRetention {
            retention_ms,
            required_ms,
        });
    }
    Ok(())
}

/// A schema document: not empty, at most 256 KiB. Its JSON and its
/// compatibility are checked by the proposer, which has the schema engine.
pub fn check_schema_document(document: &str) -> Result<(), MetastoreError> {
    if document.trim().is_empty() {
        return Err(MetastoreError::SchemaEmpty);
    }
    if document.len() > SCHEMA_DOCUMENT_BYTES_MAX {
        return Err(MetastoreError::SchemaTooLarge {
            bytes: document.len(),
        });
    }
    Ok(())
}

/// Whether `held + added` bytes stay within `budget` (the schema byte
/// budgets: per topic and per cluster).
pub fn within_budget(held: u64, added: u64, budget: u64) -> bool {
    held.saturating_add(added) <= budget
}

/// The record a create makes, before any fan-out link: settings resolved
/// against the proposer's defaults (`inherited` is the parent's partition
/// count), the schema as version 1, the actor as owner. It needs no state,
/// so a proposer checks a create with it before proposing.
///
/// # Errors
/// The first field that breaks its rule.
pub fn new_topic(create: &CreateTopic, inherited: Option<u32>) -> Result<Topic, MetastoreError> {
    let defaults = &create.defaults;
    let mut schemas = Vec::new();
    if let Some(document) = &create.schema {
        check_schema_document(document)?;
        schemas.push(SchemaVersion {
            version: 1,
            document: document.clone(),
        });
    }
    Ok(Topic {
        name: create.name.clone(),
        id: create.id.clone(),
        partitions: create_partitions(create.partitions, inherited, defaults)?,
        retention_ms: retention_ms(create.retention_ms, defaults)?,
        visibility_timeout_ms: visibility_timeout_ms(create.visibility_timeout_ms, defaults)?,
        max_in_flight_per_partition: max_in_flight(create.max_in_flight_per_partition, defaults)?,
        max_acked_ahead_per_partition: max_acked_ahead(
            create.max_acked_ahead_per_partition,
            defaults,
        )?,
        idempotency_window_ms: idempotency_window_ms(create.idempotency_window_ms)?,
        created_at_ms: create.created_at_ms,
        owner: match &create.actor {
            Actor::SecurityOff => None,
            Actor::User(name) => Some(name.clone()),
        },
        schemas,
        parent: None,
        children: Vec::new(),
    })
}

/// A remote's name: a lowercase letter, then up to 62 lowercase letters,
/// digits and dashes (spec §1.10).
pub fn check_remote_name(name: &str) -> Result<(), MetastoreError> {
    let mut bytes = name.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_lowercase());
    let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if first_ok && rest_ok && name.len() <= 63 {
        Ok(())
    } else {
        Err(MetastoreError::RemoteNameInvalid {
            name: name.to_owned(),
        })
    }
}

/// A pause reason: printable text (no control characters) of at most 256
/// bytes.
pub fn check_pause_reason(reason: &str) -> Result<(), MetastoreError> {
    if reason.len() <= crate::limits::REMOTE_PAUSE_REASON_BYTES_MAX
        && !reason.chars().any(char::is_control)
    {
        Ok(())
    } else {
        Err(MetastoreError::PauseReasonInvalid)
    }
}
