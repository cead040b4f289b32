//! Fan-out through repeated SIGKILLs of `narad dev`: a parent with four
//! children (two created with `parent`, two attached later, the last after
//! some records were already in the parent) takes concurrent produces
//! while the node is killed again and again. Afterwards every message the
//! parent acknowledged with a `202` after a child's attach point is in that
//! child, byte for byte with its key; nothing from before an attach point
//! is; nothing unknown is. Duplicates are allowed (a crash repeats a slab)
//! and are counted and printed per child.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use narad_tests::dev::{DevProcess as Dev, Request};
use narad_tests::stored::topic_records;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SEED: u64 = 0x6661_6e6f_7574_6b31;
const PARENT: &str = "fan-parent";
/// Children in attach order; the last is attached after [`EARLY`] messages.
const CHILDREN: [&str; 4] = ["fan-a", "fan-b", "fan-c", "fan-late"];
const PARTITIONS: u32 = 3;
const PRODUCERS: usize = 4;
const MESSAGES_PER_PRODUCER_MAX: usize = 3_000;
/// Messages produced before the last child is attached.
const EARLY: usize = 60;
const KILLS: usize = 10;
const KILL_AFTER_MS: std::ops::Range<u64> = 150..450;
const TAIL_PRODUCE: Duration = Duration::from_millis(300);
/// Ceilings that turn hangs into failures; no speed is asserted.
const WAIT_MAX: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);

fn send(port: u16, method: &str, path: &str, body: &[u8]) -> Option<(u16, String)> {
    Request {
        method,
        path,
        content_type: "application/json",
        headers: &[],
        body,
    }
    .send(port)
    .map(|answer| (answer.status, answer.body))
}

fn must(port: u16, method: &str, path: &str, body: &str, status: u16) -> serde_json::Value {
    let answer = send(port, method, path, body.as_bytes());
    let Some((got, text)) = answer else {
        panic!("{method} {path}: no answer");
    };
    assert_eq!(got, status, "{method} {path}: {text}");
    serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
}

#[derive(Clone, Debug)]
struct Sent {
    key: Vec<u8>,
    payload: Vec<u8>,
    acknowledged: bool,
}

fn produce_one(port: u16, key: &str, payload: &str) -> Sent {
    let path = if key.is_empty() {
        format!("/v1/topics/{PARENT}/produce")
    } else {
        format!("/v1/topics/{PARENT}/produce?key={key}")
    };
    let answer = send(port, "POST", &path, payload.as_bytes());
    Sent {
        key: key.as_bytes().to_vec(),
        payload: payload.as_bytes().to_vec(),
        acknowledged: matches!(answer, Some((202, _))),
    }
}

fn produce(port: u16, producer: usize, stop: &AtomicBool) -> Vec<Sent> {
    let mut sent = Vec::new();
    for n in 0..MESSAGES_PER_PRODUCER_MAX {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let key = if n % 2 == 0 {
            format!("k{producer}-{}", n % 7)
        } else {
            String::new()
        };
        let message = produce_one(port, &key, &format!("\"p{producer}-{n}\""));
        if !message.acknowledged {
            sleep(Duration::from_millis(10));
        }
        sent.push(message);
    }
    sent
}

/// Waits until the parent's dispatch backlog is empty and every child's
/// lag is 0 with every cursor reporting, three polls in a row.
fn wait_fanned_out(dev: &Dev) {
    let deadline = Instant::now() + WAIT_MAX;
    let mut steady = 0;
    while steady < 3 {
        assert!(
            Instant::now() < deadline,
            "fan-out never caught up\n{}",
            dev.log()
        );
        sleep(POLL);
        let backlog_idle = send(dev.port, "GET", "/metrics", b"").is_some_and(|(_, text)| {
            text.lines()
                .any(|line| line == "narad_ingress_dispatch_backlog_records 0")
        });
        let children = send(
            dev.port,
            "GET",
            &format!("/v1/topics/{PARENT}/children"),
            b"",
        );
        let caught_up = children.is_some_and(|(status, text)| {
            let body: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            status == 200
                && body["children"].as_array().is_some_and(|children| {
                    children.len() == CHILDREN.len()
                        && children.iter().all(|child| {
                            child["lag_messages"] == 0 && child["lag_complete"] == true
                        })
                })
        });
        steady = if backlog_idle && caught_up {
            steady + 1
        } else {
            0
        };
    }
}

/// Every record of `topic`: (key, payload).
fn stored(data_dir: &Path, topic: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    topic_records(data_dir, topic, PARTITIONS)
        .into_iter()
        .map(|record| (record.key, record.payload))
        .collect()
}

#[test]
fn every_acknowledged_parent_record_reaches_every_child_attached_before_it_through_sigkills() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut dev = Dev::new(dir.path());
    let mut rng = StdRng::seed_from_u64(SEED);
    dev.start();
    let port = dev.port;
    let parent = format!(r#"{{"name":"{PARENT}","partitions":{PARTITIONS}}}"#);
    must(port, "POST", "/v1/topics", &parent, 201);
    for child in &CHILDREN[..2] {
        let body = format!(r#"{{"name":"{child}","parent":"{PARENT}"}}"#);
        let created = must(port, "POST", "/v1/topics", &body, 201);
        assert_eq!(created["parent"], PARENT, "{created}");
        assert_eq!(created["partitions"], PARTITIONS, "inherited: {created}");
    }
    for child in &CHILDREN[2..] {
        let body = format!(r#"{{"name":"{child}","partitions":{PARTITIONS}}}"#);
        must(port, "POST", "/v1/topics", &body, 201);
    }
    let children_path = format!("/v1/topics/{PARENT}/children");
    must(port, "POST", &children_path, r#"{"child":"fan-c"}"#, 200);

    // Records before the last child's attach point: in the first three
    // children, never in the last.
    let early: Vec<Sent> = (0..EARLY)
        .map(|n| produce_one(port, &format!("e{}", n % 5), &format!("\"early-{n}\"")))
        .collect();
    assert!(early.iter().all(|m| m.acknowledged));
    wait_parent_committed(&dev);
    must(port, "POST", &children_path, r#"{"child":"fan-late"}"#, 200);

    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            let stop = Arc::clone(&stop);
            thread::spawn(move || produce(port, producer, &stop))
        })
        .collect();
    for _ in 0..KILLS {
        sleep(Duration::from_millis(rng.random_range(KILL_AFTER_MS)));
        dev.sigkill();
        dev.start();
    }
    sleep(TAIL_PRODUCE);
    stop.store(true, Ordering::Relaxed);
    let late: Vec<Sent> = producers
        .into_iter()
        .flat_map(|producer| producer.join().expect("producer"))
        .collect();
    dev.sigkill();
    dev.start();
    wait_fanned_out(&dev);
    dev.sigterm();

    let sent: HashMap<&[u8], &Sent> = early
        .iter()
        .chain(&late)
        .map(|m| (m.payload.as_slice(), m))
        .collect();
    let early_payloads: HashSet<&[u8]> = early.iter().map(|m| m.payload.as_slice()).collect();
    let acknowledged_late = late.iter().filter(|m| m.acknowledged).count();
    assert!(
        acknowledged_late > KILLS,
        "producers got 202s between kills"
    );
    let mut report = BTreeMap::new();
    for child in CHILDREN {
        let records = stored(&dev.data_dir, child);
        let mut copies: HashMap<&[u8], usize> = HashMap::new();
        for (key, payload) in &records {
            let message = sent.get(payload.as_slice()).unwrap_or_else(|| {
                panic!(
                    "{child} holds an unknown payload {:?}",
                    String::from_utf8_lossy(payload)
                )
            });
            assert_eq!(key, &message.key, "{child}: key of {message:?}");
            if child == "fan-late" {
                assert!(
                    !early_payloads.contains(payload.as_slice()),
                    "{child} holds {:?}, produced before its attach point",
                    String::from_utf8_lossy(payload)
                );
            }
            *copies.entry(payload.as_slice()).or_default() += 1;
        }
        let expected: Vec<&Sent> = if child == "fan-late" {
            late.iter().filter(|m| m.acknowledged).collect()
        } else {
            early
                .iter()
                .chain(&late)
                .filter(|m| m.acknowledged)
                .collect()
        };
        let missing: Vec<String> = expected
            .iter()
            .filter(|m| !copies.contains_key(m.payload.as_slice()))
            .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
            .collect();
        let duplicates: usize = copies.values().map(|n| n - 1).sum();
        report.insert(child, (expected.len(), records.len(), duplicates));
        assert!(
            missing.is_empty(),
            "{child}: {} acknowledged parent records missing: {:?}",
            missing.len(),
            &missing[..missing.len().min(20)]
        );
    }
    println!(
        "kills {}, parent acknowledged {} (early {EARLY}), per child (expected, stored, duplicates): {report:?}",
        KILLS + 1,
        acknowledged_late + EARLY,
    );
}

/// Waits until the early records are committed to the parent, so the
/// last child's attach point lies after them.
fn wait_parent_committed(dev: &Dev) {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        assert!(
            Instant::now() < deadline,
            "early records never fanned out\n{}",
            dev.log()
        );
        let answer = send(dev.port, "GET", &format!("/v1/topics/{PARENT}"), b"");
        let committed: u64 = answer
            .and_then(|(_, text)| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|topic| {
                topic["partition_stats"].as_array().map(|stats| {
                    stats
                        .iter()
                        .map(|s| s["high_watermark"].as_u64().unwrap_or(0))
                        .sum()
                })
            })
            .unwrap_or(0);
        if committed == EARLY as u64 {
            return;
        }
        sleep(POLL);
    }
}
