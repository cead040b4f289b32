//! The series `narad dev` serves on `/metrics` after a small workload are
//! exactly the ones `ops/metrics.tsv` lists as served, with the listed
//! label keys: a served series missing from `/metrics` fails, and so does a
//! series on `/metrics` that the list does not mark served. `narad dev`
//! appends its control node's series to the data node's, so the Raft and
//! metastore series are checked on the same scrape.
//!
//! A second test produces to a topic nobody consumes and finds the
//! partition poller's lag, oldest unconsumed age and size for every one of
//! its partitions: the series the lag alert of `ops/prometheus` reads
//! (`narad-alerts-tests.yml` shows it firing on them).

use std::collections::BTreeMap;
use std::thread::sleep;
use std::time::{Duration, Instant};

use narad_tests::dev::{DevProcess, Request};
use narad_tests::metrics_list::{Family, Listed, Status, exposed_families, load_list};

const TOPIC: &str = "metered";
const CHILD: &str = "metered-audit";
const DELAY_CHILD: &str = "metered-later";
/// A ceiling on waits: it turns a hang into a failure, it asserts no speed.
const WAIT_MAX: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(200);

fn send(port: u16, request: &Request<'_>) -> (u16, String) {
    let answer = request.send(port).expect("narad dev answers");
    (answer.status, answer.body)
}

fn post_json(port: u16, path: &str, body: &str) -> (u16, String) {
    send(
        port,
        &Request::post(path, "application/json", body.as_bytes()),
    )
}

fn expect(status: u16, (got, body): (u16, String), what: &str) -> String {
    assert_eq!(got, status, "{what}: {body}");
    body
}

/// A queue consume that waits for a record; its receipt handle.
fn consume_handle(port: u16) -> String {
    let path = format!("/v1/topics/{TOPIC}/consume?wait=5s");
    let body = expect(200, send(port, &Request::get(&path)), "consume");
    let message: serde_json::Value = serde_json::from_str(&body).expect("a JSON message");
    message["receipt_handle"]
        .as_str()
        .expect("a receipt handle")
        .to_owned()
}

fn settle(port: u16, handle: &str, extend: Option<&str>) {
    let mut path = format!("/v1/topics/{TOPIC}/ack?receipt_handle={handle}");
    if let Some(extend) = extend {
        path.push_str("&extend=");
        path.push_str(extend);
    }
    expect(204, post_json(port, &path, ""), "settle");
}

fn workload(port: u16) {
    expect(
        201,
        post_json(
            port,
            "/v1/topics",
            &format!(r#"{{"name":"{TOPIC}","partitions":3}}"#),
        ),
        "create",
    );
    expect(
        201,
        post_json(
            port,
            "/v1/topics",
            &format!(r#"{{"name":"{CHILD}","parent":"{TOPIC}"}}"#),
        ),
        "create a child",
    );
    expect(
        201,
        post_json(
            port,
            "/v1/topics",
            &format!(r#"{{"name":"{DELAY_CHILD}","parent":"{TOPIC}","fanout_delay_ms":60000}}"#),
        ),
        "create a delay child",
    );
    for n in 0..3 {
        expect(
            202,
            post_json(
                port,
                &format!("/v1/topics/{TOPIC}/produce"),
                &format!(r#"{{"n":{n}}}"#),
            ),
            "produce",
        );
    }
    expect(
        202,
        post_json(
            port,
            &format!("/v1/topics/{TOPIC}/produce/batch"),
            r#"{"messages":[{"payload":{"n":3}},{"payload":{"n":4}},{"payload":{"n":5}}]}"#,
        ),
        "batch produce",
    );
    // The same idempotency key twice: the owner stores the first and
    // counts the second as already stored.
    expect(
        202,
        post_json(
            port,
            &format!("/v1/topics/{TOPIC}/produce/batch"),
            r#"{"messages":[{"payload":{"n":6},"idempotency_key":"once"},{"payload":{"n":6},"idempotency_key":"once"}]}"#,
        ),
        "batch produce with one idempotency key twice",
    );
    // A delay child takes no produce: a rejection with its reason.
    expect(
        409,
        post_json(port, &format!("/v1/topics/{DELAY_CHILD}/produce"), "{}"),
        "produce to a delay child",
    );
    let acked = consume_handle(port);
    settle(port, &acked, None);
    let nacked = consume_handle(port);
    settle(port, &nacked, Some("0"));
    let extended = consume_handle(port);
    settle(port, &extended, Some("true"));
    settle(port, &extended, None);
    // A consume of the child with nothing to give: an empty answer.
    let path = format!("/v1/topics/{DELAY_CHILD}/consume?wait=0s");
    expect(204, send(port, &Request::get(&path)), "empty consume");
}

fn served_list() -> BTreeMap<String, Listed> {
    load_list()
        .into_iter()
        .filter(|(_, listed)| listed.status == Status::Served)
        .collect()
}

/// What differs between the scrape and the list, one line each.
fn differences(
    served: &BTreeMap<String, Listed>,
    scraped: &BTreeMap<String, Family>,
) -> Vec<String> {
    let list = load_list();
    let mut problems = Vec::new();
    for (name, listed) in served {
        let labels = &listed.labels;
        match scraped.get(name) {
            None => problems.push(format!("{name}: listed as served, not on /metrics")),
            Some(family) if family.label_sets.len() != 1 || !family.label_sets.contains(labels) => {
                problems.push(format!(
                    "{name}: listed with label keys {labels:?}, /metrics has {:?}",
                    family.label_sets
                ));
            }
            Some(family) if family.kind != listed.kind => problems.push(format!(
                "{name}: listed as a {}, /metrics has a {}",
                listed.kind, family.kind
            )),
            Some(_) => {}
        }
    }
    for (name, family) in scraped {
        let sets = &family.label_sets;
        if served.contains_key(name) {
            continue;
        }
        match list.get(name) {
            Some(listed) => problems.push(format!(
                "{name}: on /metrics with label keys {sets:?} but listed as {:?}",
                listed.status
            )),
            None => problems.push(format!(
                "{name}: on /metrics with label keys {sets:?} but not in ops/metrics.tsv"
            )),
        }
    }
    problems
}

#[test]
fn metrics_served_after_a_workload_are_exactly_the_listed_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A pass of retention within the wait serves its counters.
    let mut dev =
        DevProcess::new(dir.path()).with_env("NARAD_STORAGE_RETENTION_CHECK_INTERVAL_MS", "1000");
    let booting = Instant::now();
    dev.start();
    eprintln!("ready after {:?}", booting.elapsed());
    let working = Instant::now();
    workload(dev.port);
    eprintln!("workload took {:?}", working.elapsed());
    let served = served_list();
    // Fan-out cursors and the dispatcher report in their own time: scrape
    // until the two agree or the wait runs out.
    let deadline = Instant::now() + WAIT_MAX;
    let started = Instant::now();
    loop {
        let text = expect(200, send(dev.port, &Request::get("/metrics")), "scrape");
        let problems = differences(&served, &exposed_families(&text));
        if problems.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/metrics and ops/metrics.tsv differ:\n{}\n\n{text}",
            problems.join("\n")
        );
        sleep(POLL);
    }
    eprintln!("agreed after {:?}", started.elapsed());
    dev.sigterm();
}

const UNREAD: &str = "unread";
const UNREAD_PARTITIONS: u32 = 4;

/// The value of the sample `series` (a name and its labels) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    let prefix = format!("{series} ");
    text.lines().find_map(|line| {
        line.strip_prefix(&prefix)
            .and_then(|value| value.trim().parse().ok())
    })
}

/// What the scrape lacks of the poller's series for topic `UNREAD`, whose
/// partition `p` holds `p + 1` messages nobody consumed.
fn unread_problems(text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for partition in 0..UNREAD_PARTITIONS {
        let labels = format!(r#"{{topic="{UNREAD}",partition="{partition}"}}"#);
        let lag = sample(text, &format!("narad_consumer_lag_messages{labels}"));
        if lag != Some(f64::from(partition + 1)) {
            problems.push(format!("partition {partition}: lag {lag:?}"));
        }
        let age = sample(
            text,
            &format!("narad_oldest_unconsumed_message_age_seconds{labels}"),
        );
        if age.is_none_or(|age| age < 0.0) {
            problems.push(format!("partition {partition}: oldest age {age:?}"));
        }
        let size = sample(text, &format!("narad_partition_size_bytes{labels}"));
        if size.is_none_or(|size| size <= 0.0) {
            problems.push(format!("partition {partition}: size {size:?}"));
        }
        let segments = sample(text, &format!("narad_segments{labels}"));
        if segments.is_none_or(|segments| segments < 1.0) {
            problems.push(format!("partition {partition}: segments {segments:?}"));
        }
    }
    let topic_bytes = sample(text, &format!(r#"narad_topic_bytes{{topic="{UNREAD}"}}"#));
    if topic_bytes.is_none_or(|bytes| bytes <= 0.0) {
        problems.push(format!("topic bytes {topic_bytes:?}"));
    }
    problems
}

#[test]
fn every_partition_of_a_topic_nobody_consumes_shows_lag_age_and_size() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut dev = DevProcess::new(dir.path());
    dev.start();
    expect(
        201,
        post_json(
            dev.port,
            "/v1/topics",
            &format!(r#"{{"name":"{UNREAD}","partitions":{UNREAD_PARTITIONS}}}"#),
        ),
        "create",
    );
    for partition in 0..UNREAD_PARTITIONS {
        for n in 0..=partition {
            expect(
                202,
                post_json(
                    dev.port,
                    &format!("/v1/topics/{UNREAD}/produce?partition={partition}"),
                    &format!(r#"{{"n":{n}}}"#),
                ),
                "produce",
            );
        }
    }
    // The poller passes every 5 s: scrape until it has seen every record.
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let text = expect(200, send(dev.port, &Request::get("/metrics")), "scrape");
        let problems = unread_problems(&text);
        if problems.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the poller's series of {UNREAD}:\n{}\n\n{text}",
            problems.join("\n")
        );
        sleep(POLL);
    }
    dev.sigterm();
}
