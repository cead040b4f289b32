//! `narad topic`: create, list, describe, change, schema, delete.

use serde_json::Value;

use crate::support::{exits, fails, ok, shared, temp_dir};

#[test]
fn add_takes_human_durations_and_info_shows_them() {
    let server = shared();
    let created = ok(&server.run(&[
        "topic",
        "add",
        "t-durations",
        "--partitions",
        "4",
        "--retention",
        "12h",
        "--visibility",
        "45s",
        "--max-in-flight",
        "10",
        "--max-acked-ahead",
        "20",
        "--idempotency-window",
        "10m",
    ]));
    assert!(
        created.contains("topic t-durations created: 4 partitions"),
        "{created}"
    );
    let info = ok(&server.run(&["topic", "info", "t-durations"]));
    for line in [
        "retention:       12h",
        "visibility:      45s",
        "max in flight:   10",
        "idempotency:     10m",
    ] {
        assert!(info.contains(line), "{line} missing from:\n{info}");
    }
    let json: Value = serde_json::from_str(&ok(&server.run(&[
        "topic",
        "info",
        "t-durations",
        "--json",
    ])))
    .expect("info --json is JSON");
    assert_eq!(json["retention_ms"], 43_200_000);
    assert_eq!(json["visibility_timeout_ms"], 45_000);
    assert_eq!(json["max_acked_ahead_per_partition"], 20);
    assert_eq!(json["idempotency_window_ms"], 600_000);
    assert_eq!(json["partition_stats"].as_array().map(Vec::len), Some(4));
}

#[test]
fn ls_lists_the_topic() {
    let server = shared();
    ok(&server.run(&["topic", "add", "t-listed", "--retention", "forever"]));
    let listing = ok(&server.run(&["topic", "ls"]));
    let row = listing
        .lines()
        .find(|line| line.contains("t-listed"))
        .unwrap_or_else(|| panic!("t-listed missing from:\n{listing}"));
    assert!(row.contains("forever"), "{row}");
    let json = ok(&server.run(&["topic", "ls", "--json"]));
    assert!(
        json.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .any(|topic| topic["name"] == "t-listed"),
        "{json}"
    );
}

#[test]
fn adding_an_existing_topic_is_refused() {
    let server = shared();
    ok(&server.run(&["topic", "add", "t-twice"]));
    let error = fails(&server.run(&["topic", "add", "t-twice"]), 1);
    assert!(
        error.contains("create topic t-twice: server answered 409"),
        "{error}"
    );
}

#[test]
fn edit_changes_retention_and_partitions() {
    let server = shared();
    ok(&server.run(&["topic", "add", "t-edit"]));
    let changed = ok(&server.run(&[
        "topic",
        "edit",
        "t-edit",
        "--retention",
        "2d",
        "--partitions",
        "5",
    ]));
    assert_eq!(
        changed,
        "topic t-edit changed: partitions 5, retention 2d\n"
    );
    let changed = ok(&server.run(&["topic", "edit", "t-edit", "--idempotency-window", "1d"]));
    assert_eq!(changed, "topic t-edit changed: idempotency window 1d\n");
    let info = ok(&server.run(&["topic", "info", "t-edit"]));
    assert!(info.contains("idempotency:     1d"), "{info}");
    let error = fails(&server.run(&["topic", "edit", "t-edit"]), 2);
    assert!(error.contains("nothing to change"), "{error}");
}

#[test]
fn schema_from_a_file_is_registered_and_enforced() {
    let server = shared();
    let dir = temp_dir();
    let file = dir.join("schema.json");
    std::fs::write(&file, r#"{"type":"object","required":["id"]}"#).expect("schema file");
    let schema_arg = format!("@{}", file.display());
    ok(&server.run(&["topic", "add", "t-schema", "--schema", &schema_arg]));
    let history: Value = serde_json::from_str(&ok(&server.run(&["topic", "schema", "t-schema"])))
        .expect("schema history is JSON");
    assert_eq!(history["version"], 1);
    ok(&server.run(&["pub", "t-schema", r#"{"id":"a"}"#]));
    let error = fails(&server.run(&["pub", "t-schema", r#"{"other":1}"#]), 1);
    assert!(error.contains("server answered 400"), "{error}");
    let same = r#"{"type":"object","required":["id"]}"#;
    ok(&server.run(&[
        "topic",
        "edit",
        "t-schema",
        "--schema",
        same,
        "--schema-base-version",
        "1",
    ]));
    let stale = fails(
        &server.run(&[
            "topic",
            "edit",
            "t-schema",
            "--schema",
            same,
            "--schema-base-version",
            "7",
        ]),
        1,
    );
    assert!(stale.contains("409"), "{stale}");
}

#[test]
fn schema_from_stdin_must_be_json() {
    let server = shared();
    let error = fails(
        &server.run_with_input(&["topic", "add", "t-bad-schema", "--schema", "-"], "{nope"),
        2,
    );
    assert!(error.contains("not JSON"), "{error}");
}

#[test]
fn rm_with_force_deletes_and_a_missing_topic_is_refused() {
    let server = shared();
    ok(&server.run(&["topic", "add", "t-rm"]));
    let deleted = ok(&server.run(&["topic", "rm", "t-rm", "-f"]));
    assert!(deleted.contains("topic t-rm deleted"), "{deleted}");
    let error = fails(&server.run(&["topic", "rm", "t-rm", "-f"]), 1);
    assert!(error.contains("404"), "{error}");
    let error = fails(&server.run(&["topic", "info", "t-rm"]), 1);
    assert!(error.contains("topic not found"), "{error}");
}

#[test]
fn rm_without_a_terminal_refuses_unless_forced() {
    let server = shared();
    ok(&server.run(&["topic", "add", "t-rm-tty"]));
    let error = fails(&server.run(&["topic", "rm", "t-rm-tty"]), 2);
    assert!(error.contains("pass -f"), "{error}");
    exits(&server.run(&["topic", "info", "t-rm-tty"]), 0);
}

#[test]
fn a_refused_edit_speaks_of_the_flags_typed() {
    let server = shared();
    ok(&server.run(&["topic", "add", "t-edit-refused"]));
    let error = fails(
        &server.run(&["topic", "edit", "t-edit-refused", "--partitions", "2"]),
        1,
    );
    assert!(error.contains("--partitions 2 refused"), "{error}");
    assert!(error.contains("only grows"), "{error}");
    let error = fails(
        &server.run(&["topic", "edit", "t-edit-refused", "--retention", "5m"]),
        1,
    );
    assert!(error.contains("--retention 5m refused"), "{error}");
    assert!(error.contains("at least 1h"), "{error}");
    let error = fails(
        &server.run(&["topic", "add", "t-add-refused", "--retention", "30m"]),
        1,
    );
    assert!(error.contains("--retention 30m refused"), "{error}");
}
