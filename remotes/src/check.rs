//! The checks of a remote and a target topic: `POST
//! /v1/remotes/{name}/test` and an attach's dry run. None of them can
//! store anything on the target.
//!
//! In order, each needing the one before:
//! 1. `reach`: `GET /readyz` gets an answer over TLS (any status but a
//!    redirect; `503` only means "not ready yet");
//! 2. `auth`: `GET /v1/topics/{topic}` is not `401`;
//! 3. `topic`: that answer is `200` (else `target_missing` or
//!    `forbidden`);
//! 4. `remote_children`: none of the topic's children (at most
//!    [`CHILDREN_LOOKED_AT`], each by `GET /v1/topics/{child}`) is a
//!    remote child itself (else `target_has_remote_children`: remote
//!    children do not chain, so a record never crosses two clusters on
//!    one link's promise). A child the credential cannot read is not
//!    known and does not fail the check; its detail says so;
//! 5. `batch_produce`: a batch of 101 messages with empty payloads. A
//!    target refuses an empty payload, and a batch is all or nothing, so
//!    nothing is stored whatever the target's version. A target whose
//!    batch cap is 100 answers `400 too many messages` (an older target:
//!    chunks of at most 100); a current one answers `400 message 0:
//!    message required`. No route (`404` in plain text, `405`) is
//!    `no_batch_produce`. A `202` would mean the target stored empty
//!    messages: the check fails as `unknown`;
//! 6. `idempotency_keys`: one empty message with an `idempotency_key`.
//!    `400 message 0: ...` means the field was taken; `400 invalid json`
//!    (an unknown field to an older target) means not, and the shipper
//!    leaves keys out. A capability, so it never fails the test;
//! 7. `zstd`: an empty batch, zstd-compressed: `400 messages required`
//!    means the body was decoded (zstd taken), `415` means not. A
//!    capability too.

use crate::chunk::{MESSAGES_MAX, MESSAGES_MAX_OLDER};
use crate::client::RemoteClient;
use crate::encode::{BODY_CLOSE, BODY_OPEN};
use crate::ship::Capabilities;
use crate::state::{
    Answer, LinkState, NoAnswer, classify_answer, classify_no_answer, record_index,
};

/// Children of the target topic looked up by the `remote_children` check.
pub const CHILDREN_LOOKED_AT: usize = 64;

/// Messages in the probe that tells an older target (cap 100) apart.
pub const PROBE_MESSAGES: usize = MESSAGES_MAX_OLDER + 1;

/// One check's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// `reach`, `auth`, `topic`, `remote_children`, `batch_produce`,
    /// `idempotency_keys` or `zstd`.
    pub name: &'static str,
    /// Whether it passed.
    pub pass: bool,
    /// The link state a failure means.
    pub class: Option<LinkState>,
    /// What the target answered.
    pub detail: String,
}

/// All checks of a remote and a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// Every check run, in order; a failure ends the list.
    pub checks: Vec<Check>,
    /// What the target takes (defaults where a check did not get there).
    pub capabilities: Capabilities,
    /// The target topic's incarnation id (`id` of `GET /v1/topics/{t}`),
    /// when it reports one: a different one later means the topic was
    /// replaced.
    pub target_id: Option<String>,
}

impl CheckReport {
    /// Whether every check passed.
    pub fn pass(&self) -> bool {
        self.checks.iter().all(|check| check.pass)
    }

    /// The class of the first failed check.
    pub fn class(&self) -> Option<LinkState> {
        self.checks.iter().find_map(|check| check.class)
    }
}

/// The `children` a topic's description names (the first
/// [`CHILDREN_LOOKED_AT`]).
fn children_of(described: Option<&serde_json::Value>) -> Vec<String> {
    described
        .and_then(|topic| topic.get("children")?.as_array())
        .map(|children| {
            children
                .iter()
                .filter_map(|child| child.as_str().map(str::to_owned))
                .take(CHILDREN_LOOKED_AT)
                .collect()
        })
        .unwrap_or_default()
}

/// What looking at a topic's children found.
enum Lookup {
    /// This child is a remote child.
    Remote(String),
    /// None that could be read; `unreadable` could not be.
    None { unreadable: usize },
}

/// Looks each of `children` up; the first that carries a `remote` link.
async fn remote_child_among(
    client: &RemoteClient,
    children: &[String],
) -> Result<Lookup, NoAnswer> {
    let mut unreadable = 0;
    for child in children {
        let answer = client.get(&["v1", "topics", child]).await?;
        if answer.status != 200 {
            unreadable += 1;
            continue;
        }
        let remote = serde_json::from_str::<serde_json::Value>(&answer.message)
            .ok()
            .and_then(|topic| topic.get("remote").cloned())
            .is_some_and(|remote| remote.is_object());
        if remote {
            return Ok(Lookup::Remote(child.clone()));
        }
    }
    Ok(Lookup::None { unreadable })
}

/// Why a periodic look at a link's target failed: the link state it
/// means, and what the target answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetFault {
    /// `target_replaced`, `target_missing`, `forbidden`, `auth_failed`, or
    /// the class of an answer or its absence.
    pub state: LinkState,
    /// What the target answered, or why nothing came.
    pub detail: String,
    /// The answer's status; `None` when nothing came.
    pub status: Option<u16>,
}

/// The periodic look at a link's target (every `check_interval_ms`):
/// `GET /v1/topics/{topic}` answers `200` and, when the link knows the
/// topic's incarnation id, names the same one. Another id means the topic
/// was deleted and made again since the attach: `target_replaced`, and
/// nothing more is shipped to it until an operator resumes the link
/// accepting the new topic. Sends nothing that could be stored.
///
/// # Errors
/// [`TargetFault`] naming the link state the answer (or its absence)
/// means.
pub async fn verify_target(
    client: &RemoteClient,
    topic: &str,
    expected_id: Option<&str>,
) -> Result<(), TargetFault> {
    let answer = client
        .get(&["v1", "topics", topic])
        .await
        .map_err(|cause| {
            let failure = classify_no_answer(&cause);
            TargetFault {
                state: failure.state,
                detail: failure.detail,
                status: None,
            }
        })?;
    let fault = |state| TargetFault {
        state,
        detail: describe(&answer),
        status: Some(answer.status),
    };
    match answer.status {
        200 => {}
        401 => return Err(fault(LinkState::AuthFailed)),
        403 => return Err(fault(LinkState::Forbidden)),
        404 => return Err(fault(LinkState::TargetMissing)),
        _ => {
            let state = classify_answer(&answer)
                .err()
                .map_or(LinkState::Unknown, |failure| failure.state);
            return Err(fault(state));
        }
    }
    let Some(expected) = expected_id else {
        return Ok(());
    };
    let found = serde_json::from_str::<serde_json::Value>(&answer.message)
        .ok()
        .and_then(|topic| topic.get("id")?.as_str().map(str::to_owned));
    match found {
        Some(found) if found == expected => Ok(()),
        found => Err(TargetFault {
            status: Some(answer.status),
            state: LinkState::TargetReplaced,
            detail: format!(
                "topic {topic} is incarnation {} on the target; the link was attached to {expected}",
                found.as_deref().unwrap_or("(none)")
            ),
        }),
    }
}

/// Runs the checks of `topic` on the remote `client` reaches.
pub async fn check(client: &RemoteClient, topic: &str) -> CheckReport {
    let mut report = CheckReport {
        checks: Vec::new(),
        capabilities: Capabilities::default(),
        target_id: None,
    };
    let passed = |report: &mut CheckReport, name, detail: String| {
        report.checks.push(Check {
            name,
            pass: true,
            class: None,
            detail,
        });
    };
    let failed = |report: &mut CheckReport, name, class, detail: String| {
        report.checks.push(Check {
            name,
            pass: false,
            class: Some(class),
            detail,
        });
    };

    // 1. reach
    match client.get(&["readyz"]).await {
        Err(cause) => {
            let failure = classify_no_answer(&cause);
            failed(&mut report, "reach", failure.state, failure.detail);
            return report;
        }
        Ok(answer) if (300..400).contains(&answer.status) => {
            failed(
                &mut report,
                "reach",
                LinkState::RedirectRefused,
                describe(&answer),
            );
            return report;
        }
        Ok(answer) => passed(&mut report, "reach", describe(&answer)),
    }

    // 2. auth and 3. topic
    let topic_answer = match client.get(&["v1", "topics", topic]).await {
        Ok(answer) => answer,
        Err(cause) => return end_without_answer(report, "auth", &cause),
    };
    let children = match topic_answer.status {
        200 => {
            let described = serde_json::from_str::<serde_json::Value>(&topic_answer.message).ok();
            report.target_id = described
                .as_ref()
                .and_then(|topic| topic.get("id")?.as_str().map(str::to_owned));
            passed(&mut report, "auth", "authenticated".to_owned());
            passed(&mut report, "topic", format!("topic {topic} exists"));
            children_of(described.as_ref())
        }
        401 => {
            failed(
                &mut report,
                "auth",
                LinkState::AuthFailed,
                describe(&topic_answer),
            );
            return report;
        }
        403 | 404 => {
            passed(&mut report, "auth", "authenticated".to_owned());
            let class = if topic_answer.status == 403 {
                LinkState::Forbidden
            } else {
                LinkState::TargetMissing
            };
            failed(&mut report, "topic", class, describe(&topic_answer));
            return report;
        }
        _ => {
            let class = classify_answer(&topic_answer)
                .err()
                .map_or(LinkState::Unknown, |failure| failure.state);
            failed(&mut report, "topic", class, describe(&topic_answer));
            return report;
        }
    };

    // 4. remote_children
    match remote_child_among(client, &children).await {
        Ok(Lookup::Remote(child)) => {
            failed(
                &mut report,
                "remote_children",
                LinkState::TargetHasRemoteChildren,
                format!("topic {topic} has the remote child {child}: remote children do not chain"),
            );
            return report;
        }
        Ok(Lookup::None { unreadable }) => {
            let detail = match (children.len(), unreadable) {
                (0, _) => "no children".to_owned(),
                (n, 0) => format!("none of its {n} children is remote"),
                (n, unreadable) => format!(
                    "none of its {n} children this credential can read is remote ({unreadable} not readable, not known)"
                ),
            };
            passed(&mut report, "remote_children", detail);
        }
        Err(cause) => return end_without_answer(report, "remote_children", &cause),
    }

    // 5. batch_produce and the older-target probe
    let probe = client
        .post_batch(topic, empty_messages(PROBE_MESSAGES), false)
        .await;
    let answer = match probe {
        Ok(answer) => answer,
        Err(cause) => return end_without_answer(report, "batch_produce", &cause),
    };
    match (answer.status, record_index(&answer.message)) {
        (400, _) if answer.message.starts_with("too many messages") => {
            report.capabilities.max_messages = MESSAGES_MAX_OLDER;
            passed(
                &mut report,
                "batch_produce",
                format!("older target: at most {MESSAGES_MAX_OLDER} messages per request"),
            );
        }
        (400, Some(_)) => {
            report.capabilities.max_messages = MESSAGES_MAX;
            passed(
                &mut report,
                "batch_produce",
                format!("at most {MESSAGES_MAX} messages per request"),
            );
        }
        (202, _) => {
            failed(
                &mut report,
                "batch_produce",
                LinkState::Unknown,
                "the target accepted empty messages".to_owned(),
            );
            return report;
        }
        _ => {
            let class = classify_answer(&answer)
                .err()
                .map_or(LinkState::Unknown, |failure| failure.state);
            failed(&mut report, "batch_produce", class, describe(&answer));
            return report;
        }
    }

    // 6. idempotency_keys
    let keyed = [
        BODY_OPEN,
        br#"{"payload":"","payload_encoding":"base64","idempotency_key":"nr1.probe"}"#,
        BODY_CLOSE,
    ]
    .concat();
    match client.post_batch(topic, keyed, false).await {
        Ok(answer) if answer.status == 400 && record_index(&answer.message).is_some() => {
            passed(
                &mut report,
                "idempotency_keys",
                "idempotency keys are taken".to_owned(),
            );
        }
        Ok(answer) => {
            report.capabilities.idempotency_keys = false;
            passed(
                &mut report,
                "idempotency_keys",
                format!(
                    "no idempotency keys (a resend may be stored twice): {}",
                    describe(&answer)
                ),
            );
        }
        Err(cause) => return end_without_answer(report, "idempotency_keys", &cause),
    }

    // 7. zstd
    let empty = [BODY_OPEN, BODY_CLOSE].concat();
    let packed = zstd::bulk::compress(&empty, 1).unwrap_or_default();
    match client.post_batch(topic, packed, true).await {
        Ok(answer) if answer.status == 400 && answer.message == "messages required" => {
            report.capabilities.zstd = true;
            passed(&mut report, "zstd", "zstd bodies are taken".to_owned());
        }
        Ok(answer) => passed(
            &mut report,
            "zstd",
            format!("no zstd: {}", describe(&answer)),
        ),
        Err(cause) => passed(
            &mut report,
            "zstd",
            format!("no zstd: {}", classify_no_answer(&cause).detail),
        ),
    }
    report
}

fn end_without_answer(
    mut report: CheckReport,
    name: &'static str,
    cause: &NoAnswer,
) -> CheckReport {
    let failure = classify_no_answer(cause);
    report.checks.push(Check {
        name,
        pass: false,
        class: Some(failure.state),
        detail: failure.detail,
    });
    report
}

/// A batch body of `count` messages with empty payloads.
fn empty_messages(count: usize) -> Vec<u8> {
    let message: &[u8] = br#"{"payload":"","payload_encoding":"base64"}"#;
    let mut body = BODY_OPEN.to_vec();
    for index in 0..count {
        if index > 0 {
            body.push(b',');
        }
        body.extend_from_slice(message);
    }
    body.extend_from_slice(BODY_CLOSE);
    body
}

fn describe(answer: &Answer) -> String {
    if answer.message.is_empty() {
        format!("{}", answer.status)
    } else {
        format!("{} {}", answer.status, answer.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_is_101_empty_messages() {
        let body = empty_messages(PROBE_MESSAGES);
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let messages = value["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 101);
        assert!(
            messages
                .iter()
                .all(|m| m["payload"] == "" && m["payload_encoding"] == "base64")
        );
    }
}
