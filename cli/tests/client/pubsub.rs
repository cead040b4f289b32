//! `narad pub`, `narad sub`, `narad replay`.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::support::{fails, ok, shared, temp_dir};

/// The JSON lines of `text`.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

#[test]
fn published_messages_are_consumed_once_and_acked() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-queue"]));
    let published = ok(&server.run(&["pub", "ps-queue", "hello", "-k", "k1"]));
    assert_eq!(published.trim(), "published 1 message to ps-queue");
    ok(&server.run_with_input(&["pub", "ps-queue"], "one\ntwo\n\nthree\n"));
    let lines = ok(&server.run(&["sub", "ps-queue", "--max", "4", "--idle", "5s"]));
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines.iter().any(|line| line.starts_with("[p")
            && line.contains(" key=k1 ")
            && line.ends_with(" hello")),
        "{lines:?}"
    );
    let payloads: BTreeSet<&str> = lines
        .iter()
        .filter_map(|line| line.rsplit(' ').next())
        .collect();
    assert_eq!(payloads, BTreeSet::from(["hello", "one", "three", "two"]));
    // Acked: nothing is left to deliver.
    let rest = ok(&server.run(&["sub", "ps-queue", "--idle", "1s"]));
    assert_eq!(rest, "", "acked messages came back");
}

#[test]
fn no_ack_leaves_messages_leased_for_redelivery() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-noack", "--visibility", "1s"]));
    ok(&server.run(&["pub", "ps-noack", "again"]));
    let first = ok(&server.run(&["sub", "ps-noack", "--max", "1", "--no-ack", "--idle", "5s"]));
    assert!(first.ends_with(" again\n"), "{first}");
    let second = ok(&server.run(&["sub", "ps-noack", "--max", "1", "--idle", "10s", "--raw"]));
    assert_eq!(second, "again\n", "redelivered after the lease lapsed");
}

#[test]
fn batch_publish_and_json_output_keep_keys_and_payloads() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-batch"]));
    let input = "{\"n\":1}\nplain text\n{\"n\":3}\n";
    let published =
        ok(&server.run_with_input(&["pub", "ps-batch", "--batch", "2", "-k", "order-7"], input));
    assert!(published.contains("published 3 messages"), "{published}");
    let out = ok(&server.run(&["sub", "ps-batch", "--max", "3", "--idle", "5s", "--json"]));
    let messages = json_lines(&out);
    assert_eq!(messages.len(), 3);
    assert!(messages.iter().all(|message| message["key"] == "order-7"));
    let partitions: BTreeSet<u64> = messages
        .iter()
        .filter_map(|message| message["partition"].as_u64())
        .collect();
    assert_eq!(partitions.len(), 1, "one key, one partition");
    let payloads: Vec<String> = messages.iter().map(|m| m["payload"].to_string()).collect();
    assert!(payloads.contains(&r#"{"n":1}"#.to_owned()), "{payloads:?}");
    assert!(
        payloads.contains(&r#""plain text""#.to_owned()),
        "{payloads:?}"
    );
}

#[test]
fn count_file_and_partition_put_copies_where_asked() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-count"]));
    let file = temp_dir().join("message.bin");
    std::fs::write(&file, b"from a file").expect("message file");
    let path = file.display().to_string();
    ok(&server.run(&[
        "pub",
        "ps-count",
        "-f",
        &path,
        "--count",
        "5",
        "--partition",
        "2",
        "--rate",
        "200",
    ]));
    server.wait_for_messages("ps-count", 5);
    let out = ok(&server.run(&["replay", "ps-count", "--partition", "2", "--raw"]));
    assert_eq!(out, "from a file\n".repeat(5));
    let empty = ok(&server.run(&["replay", "ps-count", "--partition", "0"]));
    assert_eq!(empty, "");
}

#[test]
fn replay_reads_a_range_without_touching_the_queue() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-replay"]));
    for n in 0..5 {
        ok(&server.run(&["pub", "ps-replay", &format!("m{n}"), "--partition", "1"]));
    }
    server.wait_for_messages("ps-replay", 5);
    let range = ok(&server.run(&[
        "replay",
        "ps-replay",
        "--partition",
        "1",
        "--from",
        "1",
        "--to",
        "3",
        "--json",
    ]));
    let offsets: Vec<u64> = json_lines(&range)
        .iter()
        .map(|message| {
            assert!(message.get("receipt_handle").is_none(), "{message}");
            message["offset"].as_u64().expect("offset")
        })
        .collect();
    assert_eq!(offsets, vec![1, 2, 3]);
    let lines = ok(&server.run(&["replay", "ps-replay", "--partition", "1"]));
    assert_eq!(lines.lines().count(), 5);
    assert!(
        lines
            .lines()
            .next()
            .is_some_and(|line| line.starts_with("[p1 @0] key=- "))
    );
    // Replays reserved nothing: a queue consume still gets all five.
    let consumed = ok(&server.run(&["sub", "ps-replay", "--max", "5", "--idle", "5s"]));
    assert_eq!(consumed.lines().count(), 5);
}

#[test]
fn peek_tails_from_an_offset_and_leaves_messages_queued() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-peek"]));
    for n in 0..3 {
        ok(&server.run(&["pub", "ps-peek", &format!("p{n}"), "--partition", "0"]));
    }
    server.wait_for_messages("ps-peek", 3);
    let peeked = ok(&server.run(&[
        "sub",
        "ps-peek",
        "--peek",
        "--partition",
        "0",
        "--from",
        "1",
        "--idle",
        "1s",
        "--raw",
    ]));
    assert_eq!(peeked, "p1\np2\n");
    let consumed = ok(&server.run(&["sub", "ps-peek", "--max", "3", "--idle", "5s"]));
    assert_eq!(consumed.lines().count(), 3);
}

#[test]
fn replay_of_a_partition_out_of_range_is_a_usage_error() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-range"]));
    let error = fails(&server.run(&["replay", "ps-range", "--partition", "9"]), 2);
    assert!(error.contains("--partition 9"), "{error}");
}

#[test]
fn publishing_to_a_missing_topic_is_refused() {
    let server = shared();
    let error = fails(&server.run(&["pub", "ps-missing", "x"]), 1);
    assert!(
        error.contains("publish to ps-missing: server answered 404"),
        "{error}"
    );
    let error = fails(&server.run(&["sub", "ps-missing", "--idle", "1s"]), 1);
    assert!(error.contains("404"), "{error}");
}

#[test]
fn bench_reports_percentiles_and_writes_a_chart() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-bench"]));
    let chart = temp_dir().join("bench.png");
    let chart_arg = chart.display().to_string();
    let out = ok(&server.run(&[
        "bench",
        "ps-bench",
        "--count",
        "120",
        "--size",
        "64",
        "--workers",
        "3",
        "--batch",
        "10",
        "--consume",
        "--out",
        &chart_arg,
    ]));
    for text in [
        "produce: 120 messages",
        "p50",
        "p95",
        "p99",
        "202: 12",
        "consume: 120 messages",
    ] {
        assert!(out.contains(text), "{text} missing from:\n{out}");
    }
    let png = std::fs::read(&chart).expect("chart written");
    assert_eq!(&png[1..4], b"PNG");
    let single = ok(&server.run(&[
        "bench",
        "--topic",
        "ps-bench",
        "--count",
        "10",
        "--workers",
        "2",
    ]));
    assert!(single.contains("202: 10"), "{single}");
}

#[test]
fn bench_counts_refused_produces_by_status() {
    let server = shared();
    ok(&server.run(&[
        "topic",
        "add",
        "ps-bench-schema",
        "--schema",
        r#"{"type":"object"}"#,
    ]));
    // The benchmark's payload is a JSON string, which this schema refuses.
    let output = server.run(&["bench", "ps-bench-schema", "--count", "4", "--workers", "1"]);
    let error = fails(&output, 1);
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(out.contains("400: 4"), "{out}");
    assert!(error.contains("only 0 of 4"), "{error}");
}

#[test]
fn no_progress_bar_is_drawn_without_a_terminal() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-quiet"]));
    let output = server.run(&["pub", "ps-quiet", "q", "--count", "150", "--batch", "50"]);
    assert_eq!(ok(&output).trim(), "published 150 messages to ps-quiet");
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
