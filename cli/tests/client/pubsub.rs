//! `narad pub`, `narad sub`, `narad replay`.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

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

/// A JSON payload whose text a parse and print would change: key order,
/// spaces, `1.50` and `2e3`.
const SPELLED: &str = r#"{"z":1,  "a":[1.50, 2e3]}"#;

#[test]
fn every_style_keeps_a_json_payloads_text() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-exact"]));
    ok(&server.run(&["pub", "ps-exact", SPELLED, "--partition", "0"]));
    let file = temp_dir().join("spaced.json");
    std::fs::write(&file, " {\"b\":2.0}\n").expect("payload file");
    let path = file.display().to_string();
    ok(&server.run(&["pub", "ps-exact", "-f", &path, "--partition", "0"]));
    server.wait_for_messages("ps-exact", 2);
    let replay = |style: &[&str]| {
        let mut args = vec!["replay", "ps-exact", "--partition", "0"];
        args.extend_from_slice(style);
        ok(&server.run(&args))
    };
    assert_eq!(
        replay(&["--raw"]),
        format!("{SPELLED}\n {{\"b\":2.0}}\n\n"),
        "--raw prints the stored bytes"
    );
    let lines = replay(&[]);
    let first = lines.lines().next().expect("a line");
    assert!(first.ends_with(&format!(" {SPELLED}")), "{first}");
    let json = replay(&["--json", "--to", "0"]);
    assert!(json.contains(&format!(r#""payload":{SPELLED},"#)), "{json}");
    let message: Value = serde_json::from_str(&json).expect("one JSON object");
    assert_eq!(message["offset"], 0);
    let peeked = ok(&server.run(&[
        "sub",
        "ps-exact",
        "--peek",
        "--partition",
        "0",
        "--max",
        "1",
        "--raw",
    ]));
    assert_eq!(peeked, format!("{SPELLED}\n"));
    let consumed = ok(&server.run(&[
        "sub",
        "ps-exact",
        "--partition",
        "0",
        "--max",
        "2",
        "--idle",
        "5s",
        "--json",
    ]));
    assert!(
        consumed.contains(&format!(r#""payload":{SPELLED},"#)),
        "{consumed}"
    );
    assert_eq!(
        consumed.lines().count(),
        2,
        "one object a line:\n{consumed}"
    );
}

#[test]
fn a_closed_pipe_ends_replay_quietly() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-pipe"]));
    let file = temp_dir().join("four-kib.txt");
    std::fs::write(&file, "p".repeat(4096)).expect("payload file");
    let path = file.display().to_string();
    ok(&server.run(&[
        "pub",
        "ps-pipe",
        "-f",
        &path,
        "--count",
        "40",
        "--partition",
        "0",
        "--batch",
        "40",
    ]));
    server.wait_for_messages("ps-pipe", 40);
    // 160 KiB of output: more than a pipe holds, so narad writes after the
    // reader left.
    let mut child = server
        .narad()
        .args(["replay", "ps-pipe", "--partition", "0", "--raw"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("narad runs");
    let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("a first line");
    assert_eq!(line.len(), 4097);
    drop(reader);
    let output = child.wait_with_output().expect("narad exits");
    assert_eq!(fails(&output, 0), "", "nothing on stderr");
}

#[test]
fn blank_lines_are_skipped_unless_kept() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-blank"]));
    let skipped = ok(&server.run_with_input(&["pub", "ps-blank"], "a\n  \n\nb\n"));
    assert_eq!(skipped.trim(), "published 2 messages to ps-blank");
    let kept = ok(&server.run_with_input(&["pub", "ps-blank", "--keep-blank-lines"], "c\n  \nd\n"));
    assert_eq!(kept.trim(), "published 3 messages to ps-blank");
    let error = fails(
        &server.run_with_input(&["pub", "ps-blank", "--keep-blank-lines"], "e\n\nf\n"),
        2,
    );
    assert!(
        error.contains("line 2 of standard input is empty"),
        "{error}"
    );
    assert!(
        error.contains("1 earlier message(s) were published"),
        "{error}"
    );
}

#[test]
fn a_message_over_one_mib_is_refused_before_sending() {
    let server = shared();
    ok(&server.run(&["topic", "add", "ps-oversize"]));
    let file = temp_dir().join("big.bin");
    std::fs::write(&file, vec![b'x'; (1 << 20) + 1]).expect("payload file");
    let path = file.display().to_string();
    let error = fails(&server.run(&["pub", "ps-oversize", "-f", &path]), 2);
    assert!(error.contains("is 1048577 bytes"), "{error}");
    assert!(error.contains("at most 1 MiB"), "{error}");
    let error = fails(
        &server.run(&["bench", "ps-oversize", "--size", "1048577", "--count", "1"]),
        2,
    );
    assert!(error.contains("at most 1 MiB"), "{error}");
    let info: Value = serde_json::from_str(&ok(&server.run(&[
        "topic",
        "info",
        "ps-oversize",
        "--json",
    ])))
    .expect("info");
    let held: u64 = info["partition_stats"]
        .as_array()
        .expect("stats")
        .iter()
        .map(|stats| stats["high_watermark"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(held, 0, "nothing was sent");
}
