//! The remote-child verbs of `narad topic` (spec §1.4, v3.2): `attach
//! --remote`, `pause`, `resume`, `skip`, and the children listing with a
//! remote child's link and state.

use serde_json::{Value, json};

use super::http::{Answer, Body, encode};
use super::output::{field, say, table};
use super::topic::ms_text;
use super::{Api, Failure, Outcome};

/// The remote fields of an attach.
#[derive(Debug, Default)]
pub(crate) struct RemoteAttach {
    pub(crate) remote: String,
    pub(crate) remote_topic: Option<String>,
    pub(crate) from: Option<String>,
    pub(crate) lanes: Option<u8>,
    pub(crate) dry_run: bool,
}

/// The attach body of stub `child` shipping to `remote`.
fn attach_body(child: &str, remote: &RemoteAttach) -> Value {
    let mut body = json!({ "child": child, "remote": remote.remote });
    if let Some(topic) = &remote.remote_topic {
        body["remote_topic"] = json!(topic);
    }
    if let Some(from) = &remote.from {
        body["from"] = json!(from);
    }
    if let Some(lanes) = remote.lanes {
        body["lanes"] = json!(lanes);
    }
    if remote.dry_run {
        body["dry_run"] = json!(true);
    }
    body
}

/// `narad topic attach PARENT CHILD --remote R …`: creates stub `child`
/// (or, with `--dry-run`, prints the checks and the attach point).
pub(crate) fn attach(
    api: &Api,
    parent: &str,
    child: &str,
    remote: &RemoteAttach,
    json: bool,
) -> Outcome {
    let body = attach_body(child, remote);
    let path = format!("/v1/topics/{}/children", encode(parent));
    let answer = api.send("POST", &path, Some(Body::Json(&body)))?;
    let what = format!("attach {child} to {parent} on remote {}", remote.remote);
    let answer = api.expect(answer, &[200, 201], &what)?.json()?;
    if json {
        return say!("{answer}");
    }
    if remote.dry_run {
        say!(
            "dry run: {child} would ship {parent} to remote {} from {}",
            remote.remote,
            field(&answer, "attach_offsets")
        )?;
        for check in answer
            .get("checks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            say!(
                "check {}: {} {}",
                field(check, "name"),
                field(check, "outcome"),
                field(check, "detail")
            )?;
        }
    } else {
        let link = answer.get("remote").cloned().unwrap_or(Value::Null);
        say!(
            "remote child {child} attached to {parent}: ships to {} on remote {} with {} lane(s) from {}",
            field(&link, "topic"),
            field(&link, "name"),
            field(&link, "lanes"),
            field(&link, "from")
        )?;
    }
    for warning in answer
        .get("warnings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        say!("warning: {}", warning.as_str().unwrap_or_default())?;
    }
    Ok(())
}

/// `?force=true` when the user chose to drop unshipped records.
pub(crate) fn force_query(drop_unshipped: bool) -> &'static str {
    if drop_unshipped { "?force=true" } else { "" }
}

/// The parent of stub `child`, read from its record.
fn parent_of(api: &Api, child: &str) -> Result<String, Failure> {
    let topic = api.get_json(
        &format!("/v1/topics/{}", encode(child)),
        &format!("read topic {child}"),
    )?;
    if topic.get("remote").is_none() {
        return Err(Failure::Usage(format!(
            "topic {child} is not a remote child (`narad topic children PARENT` lists them)"
        )));
    }
    topic
        .get("parent")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| Failure::Refused(format!("topic {child} has no parent in its record")))
}

/// Posts `body` to `verb` of remote child `child` and prints the stub.
fn change(api: &Api, child: &str, verb: &str, body: &Value, done: &str, json: bool) -> Outcome {
    let parent = parent_of(api, child)?;
    let path = format!(
        "/v1/topics/{}/children/{}/{verb}",
        encode(&parent),
        encode(child)
    );
    let answer = api.send("POST", &path, Some(Body::Json(body)))?;
    let stub = api
        .expect(answer, &[200], &format!("{verb} remote child {child}"))?
        .json()?;
    if json {
        return say!("{stub}");
    }
    say!("remote child {child} {done}")?;
    match stub.get("checks").and_then(Value::as_array) {
        Some(checks) if !checks.is_empty() => say!("{}", member_checks_table(checks)),
        _ => Ok(()),
    }
}

/// A resume's checks of the target, one row per data member: how they
/// ended, the target topic's id it read, and what failed (or why it gave
/// no answer).
pub(crate) fn member_checks_table(checks: &[Value]) -> String {
    let mut rows = table(&["NODE", "RESULT", "TARGET", "DETAIL"]);
    for check in checks {
        let detail = match check.get("class").and_then(Value::as_str) {
            Some(class) => format!("{class}: {}", field(check, "detail")),
            None => field(check, "detail"),
        };
        rows.add_row(vec![
            field(check, "node"),
            field(check, "result"),
            field(check, "target_id"),
            detail,
        ]);
    }
    rows.to_string()
}

/// `narad topic pause CHILD [--reason TEXT]`.
pub(crate) fn pause(api: &Api, child: &str, reason: &str, json: bool) -> Outcome {
    change(
        api,
        child,
        "pause",
        &json!({ "reason": reason }),
        "paused",
        json,
    )
}

/// `narad topic resume CHILD [--accept-target]`.
pub(crate) fn resume(api: &Api, child: &str, accept_target: bool, json: bool) -> Outcome {
    let body = json!({ "accept_target": accept_target });
    change(api, child, "resume", &body, "resumed", json)
}

/// `narad topic skip CHILD --partition P --offset O`.
pub(crate) fn skip(api: &Api, child: &str, partition: u32, offset: u64, json: bool) -> Outcome {
    let body = json!({ "partition": partition, "offset": offset });
    let done = format!("skips offset {offset} of partition {partition}");
    change(api, child, "skip", &body, &done, json)
}

/// `narad topic children PARENT [--partitions]`.
pub(crate) fn children(api: &Api, parent: &str, partitions: bool, json: bool) -> Outcome {
    let query = if partitions { "?partitions=true" } else { "" };
    let answer = api.get_json(
        &format!("/v1/topics/{}/children{query}", encode(parent)),
        &format!("list the children of {parent}"),
    )?;
    let list = answer
        .get("children")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if json {
        for child in &list {
            say!("{child}")?;
        }
        return Ok(());
    }
    say!("{}", children_table(&list))?;
    if partitions {
        for child in list
            .iter()
            .filter(|child| child.get("partitions").is_some())
        {
            say!("{}", partition_table(child))?;
        }
    }
    Ok(())
}

/// The listing as a table: a local child's delay, a remote child's
/// remote, topic and state, and every child's lag (`+` when a lower
/// bound).
pub(crate) fn children_table(list: &[Value]) -> String {
    let mut rows = table(&["CHILD", "DELAY", "LAG", "REMOTE", "STATE"]);
    for child in list {
        let complete = child.get("lag_complete").and_then(Value::as_bool) != Some(false);
        let (remote, state) = match child.get("remote") {
            Some(link) => (
                format!("{}/{}", field(link, "name"), field(link, "topic")),
                remote_state(child),
            ),
            None => ("-".to_owned(), "-".to_owned()),
        };
        rows.add_row(vec![
            field(child, "name"),
            ms_text(child, "delay_ms"),
            format!(
                "{}{}",
                field(child, "lag_messages"),
                if complete { "" } else { "+" }
            ),
            remote,
            state,
        ]);
    }
    rows.to_string()
}

/// A remote child's state, with where it is blocked and why it is paused.
fn remote_state(child: &Value) -> String {
    let mut state = field(child, "state");
    if let Some(at) = child.get("blocked_at").filter(|at| !at.is_null()) {
        state.push_str(&format!(
            " at p{}@{}",
            field(at, "partition"),
            field(at, "offset")
        ));
    }
    if let Some(reason) = child
        .get("paused_reason")
        .and_then(Value::as_str)
        .filter(|reason| !reason.is_empty())
    {
        state.push_str(&format!(" ({reason})"));
    }
    state
}

/// A remote child's per-partition rows.
fn partition_table(child: &Value) -> String {
    let mut rows = table(&["CHILD", "PARTITION", "HWM", "NEXT", "LAG"]);
    for row in child
        .get("partitions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        rows.add_row(vec![
            field(child, "name"),
            field(row, "partition"),
            field(row, "high_watermark"),
            field(row, "next_offset"),
            field(row, "lag_messages"),
        ]);
    }
    rows.to_string()
}

/// A stub's link in `narad topic info`: where it ships and whether it is
/// paused.
pub(crate) fn link_line(link: &Value) -> String {
    let paused = if link.get("paused").and_then(Value::as_bool) == Some(true) {
        format!(", paused ({})", field(link, "paused_reason"))
    } else {
        String::new()
    };
    format!(
        "remote:          {} on remote {}, {} lane(s), from {}{paused}",
        field(link, "topic"),
        field(link, "name"),
        field(link, "lanes"),
        field(link, "from")
    )
}

/// The refusal of a detach or delete that would lose unshipped records,
/// in the CLI's terms; `None` for any other answer.
pub(crate) fn unshipped_refusal(answer: &Answer, what: &str) -> Option<Failure> {
    if answer.status != 409 {
        return None;
    }
    let body = answer.json().ok()?;
    let lag = body.get("lag_messages")?.as_u64()?;
    let complete = body.get("lag_complete").and_then(Value::as_bool) != Some(false);
    Some(Failure::Refused(format!(
        "{what}: server answered 409: {lag}{} records not shipped to the remote yet; wait for \
         them (`narad topic children`), or pass --drop-unshipped to lose them",
        if complete { "" } else { "+" }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_child_shows_its_remote_and_state_and_a_local_one_dashes() {
        let list = [
            json!({"name": "audit", "delay_ms": 0, "lag_messages": 2, "lag_complete": true}),
            json!({
                "name": "orders-dr", "delay_ms": 0, "lag_messages": 5, "lag_complete": false,
                "remote": {"name": "dr", "topic": "orders", "lanes": 2, "from": "attach"},
                "state": "paused", "paused_reason": "maintenance",
                "blocked_at": {"partition": 1, "offset": 9, "state": "rejected_record"},
            }),
        ];
        let table = children_table(&list);
        let remote_row = table
            .lines()
            .find(|line| line.contains("orders-dr"))
            .expect("remote row");
        assert!(remote_row.contains("5+"), "{remote_row}");
        assert!(remote_row.contains("dr/orders"), "{remote_row}");
        assert!(
            remote_row.contains("paused at p1@9 (maintenance)"),
            "{remote_row}"
        );
        let local_row = table
            .lines()
            .find(|line| line.contains("audit"))
            .expect("local row");
        assert!(!local_row.contains("dr/"), "{local_row}");
    }

    #[test]
    fn a_resume_lists_each_members_check() {
        let checks = [
            json!({"node": 1, "result": "pass", "target_id": "t1"}),
            json!({"node": 2, "result": "fail", "target_id": null, "check": "auth",
                   "class": "auth_failed", "detail": "401 from the target"}),
            json!({"node": 3, "result": "not_answering", "target_id": null,
                   "detail": "marked dead"}),
        ];
        let table = member_checks_table(&checks);
        let row = |node: &str| {
            table
                .lines()
                .find(|line| line.trim_start().starts_with(node))
                .unwrap_or_else(|| panic!("no row for node {node}: {table}"))
                .to_owned()
        };
        assert!(
            row("1").contains("pass") && row("1").contains("t1"),
            "{table}"
        );
        assert!(
            row("2").contains("auth_failed: 401 from the target"),
            "{table}"
        );
        assert!(
            row("3").contains("not_answering") && row("3").contains("marked dead"),
            "{table}"
        );
    }

    #[test]
    fn the_attach_body_carries_only_what_was_given() {
        let given = RemoteAttach {
            remote: "dr".into(),
            lanes: Some(4),
            dry_run: true,
            ..RemoteAttach::default()
        };
        assert_eq!(
            attach_body("orders-dr", &given),
            json!({"child": "orders-dr", "remote": "dr", "lanes": 4, "dry_run": true})
        );
    }

    #[test]
    fn topic_info_names_the_remote_topic_and_a_pause() {
        let link = json!({"name": "dr", "topic": "orders", "lanes": 2, "from": "earliest",
                          "paused": true, "paused_reason": "maintenance"});
        assert_eq!(
            link_line(&link),
            "remote:          orders on remote dr, 2 lane(s), from earliest, paused (maintenance)"
        );
    }

    #[test]
    fn force_is_sent_only_to_drop_unshipped_records() {
        assert_eq!(force_query(true), "?force=true");
        assert_eq!(force_query(false), "");
    }
}
