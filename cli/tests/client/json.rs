//! `--json` on every client verb: what it prints parses as JSON (one
//! value, or one a line), so scripts never scrape tables.

use std::process::Output;

use serde_json::Value;

use crate::support::{ok, shared, temp_dir};

/// The JSON values of a run's stdout, checking it succeeded and printed
/// nothing that is not JSON.
#[track_caller]
fn json_values(output: &Output) -> Vec<Value> {
    let text = ok(output);
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map(|value| value.unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}")))
        .collect()
}

/// Runs `narad ARGS --json` and returns its JSON values, at least one.
#[track_caller]
fn run_json(args: &[&str]) -> Vec<Value> {
    let mut with_flag = args.to_vec();
    with_flag.push("--json");
    let values = json_values(&shared().run(&with_flag));
    assert!(!values.is_empty(), "narad {args:?} --json printed nothing");
    values
}

#[test]
fn every_topic_and_message_verb_prints_json() {
    let server = shared();
    run_json(&["topic", "add", "js-topic"]);
    run_json(&["topic", "add", "js-child"]);
    run_json(&[
        "topic",
        "add",
        "js-schema",
        "--schema",
        r#"{"type":"object"}"#,
    ]);
    run_json(&["topic", "ls"]);
    run_json(&["topic", "info", "js-topic"]);
    run_json(&["topic", "edit", "js-topic", "--retention", "2d"]);
    run_json(&["topic", "schema", "js-schema"]);
    run_json(&["topic", "attach", "js-topic", "js-child"]);
    run_json(&["topic", "children", "js-topic"]);
    run_json(&["topic", "detach", "js-topic", "js-child"]);
    let published = run_json(&["pub", "js-topic", r#"{"n":1}"#, "--partition", "0"]);
    assert_eq!(published[0]["published"], 1);
    run_json(&["pub", "js-topic", "two", "--partition", "0"]);
    server.wait_for_messages("js-topic", 2);
    run_json(&["replay", "js-topic", "--partition", "0"]);
    run_json(&["sub", "js-topic", "--peek", "--max", "1"]);
    run_json(&["sub", "js-topic", "--max", "2", "--idle", "5s"]);
    let report = run_json(&[
        "bench",
        "js-topic",
        "--count",
        "10",
        "--workers",
        "2",
        "--consume",
    ]);
    assert_eq!(report[0]["produce"]["messages"], 10);
    assert_eq!(report[0]["consume"]["messages"], 10);
    run_json(&["server", "report"]);
    let deleted = run_json(&["topic", "rm", "js-child", "-f"]);
    assert_eq!(deleted[0]["deleted"], true);
}

#[test]
fn every_user_cluster_and_ctx_verb_prints_json() {
    let server = shared();
    run_json(&["user", "add", "js-user", "--user-password", "js-pw"]);
    run_json(&["user", "grant", "js-user", "--grant", "consume:js-*"]);
    run_json(&["user", "ls"]);
    run_json(&["user", "rm", "js-user"]);
    run_json(&["cluster", "members"]);
    // No move runs on one node: a listing of nothing is no line at all.
    assert!(json_values(&server.run(&["cluster", "moves", "--json"])).is_empty());
    run_json(&["cluster", "decommission", "1", "--dry-run"]);
    let config = temp_dir();
    let ctx = |args: &[&str]| {
        let mut command = server.narad();
        command
            .env("XDG_CONFIG_HOME", &config)
            .args(args)
            .arg("--json");
        let values = json_values(&command.output().expect("narad runs"));
        assert!(!values.is_empty(), "narad {args:?} --json printed nothing");
    };
    ctx(&["ctx", "add", "js-ctx", "--url", &server.url]);
    ctx(&["ctx", "select", "js-ctx"]);
    ctx(&["ctx", "ls"]);
    ctx(&["ctx", "rm", "js-ctx"]);
}
