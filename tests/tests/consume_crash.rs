//! Produce, consume and ack through `narad dev` while it is SIGKILLed and
//! restarted, then stopped gracefully:
//!
//! - every message that got a `202` is delivered at least once and acked;
//! - after the graceful stop, no message whose ack was answered `204` is
//!   delivered again (a graceful stop persists every ack);
//! - what the kills cost is counted and printed: messages delivered more
//!   than once, and acked messages delivered again after a kill (at most
//!   about one durability interval of acks per kill, by the spec).
//!
//! Producers send batches of JSON strings `"m<producer>-<n>"`; consumers
//! take batches of up to 100 and ack each batch in one request. The kill
//! moments come from a seeded RNG; which requests a kill cuts off depends on
//! scheduling, so the assertions hold for any interleaving.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use narad_tests::dev::{DevProcess, Request};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

const SEED: u64 = 0x636f_6e73_756d_6531;
const TOPIC: &str = "flow";
const PARTITIONS: u32 = 4;
/// Messages sent in all, split evenly over the producers.
const MESSAGES: usize = 100_000;
const PRODUCERS: usize = 4;
const BATCH: usize = 250;
const CONSUMERS: usize = 4;
/// Lease length of the topic: long enough that a lease never lapses while
/// its consumer is still working on it in this test.
const VISIBILITY_MS: u64 = 20_000;
/// SIGKILLs while producers and consumers run.
const KILLS: usize = 3;
/// Range of the pause between becoming ready and the next SIGKILL.
const KILL_AFTER_MS: std::ops::Range<u64> = 300..1_500;
/// A ceiling on the whole drain: it turns a hang into a failure, it asserts
/// no speed.
const DRAIN_MAX: Duration = Duration::from_secs(180);
/// Pause of a client after a request got no answer (the node is down).
const RETRY_PAUSE: Duration = Duration::from_millis(20);
const CLIENT_HEADER: &str = "X-Narad-Client: consume-crash-test";

/// What the consumers saw, shared between their threads.
#[derive(Debug, Default)]
struct Seen {
    /// Deliveries per message.
    delivered: HashMap<String, usize>,
    /// Messages whose ack was answered `204`.
    acked: HashSet<String>,
    /// Deliveries of a message after its ack was answered `204`.
    delivered_after_ack: usize,
    /// Per-handle ack answers other than `204`, by status.
    ack_refusals: HashMap<u16, usize>,
}

fn produce(port: u16, producer: usize) -> Vec<String> {
    let per_producer = MESSAGES / PRODUCERS;
    let mut acknowledged = Vec::with_capacity(per_producer);
    let path = format!("/v1/topics/{TOPIC}/produce/batch");
    let mut next = 0;
    while next < per_producer {
        let ids: Vec<String> = (next..(next + BATCH).min(per_producer))
            .map(|n| format!("m{producer}-{n}"))
            .collect();
        let messages: Vec<Value> = ids.iter().map(|id| json!({ "payload": id })).collect();
        let body = json!({ "messages": messages }).to_string();
        match Request::post(&path, "application/json", body.as_bytes()).send(port) {
            Some(answer) if answer.status == 202 => acknowledged.extend(ids),
            Some(answer) if answer.status < 500 => {
                panic!("batch refused: {} {}", answer.status, answer.body)
            }
            // No answer, or a 5xx: the batch may or may not be stored. Not
            // resent: the test counts only what got a 202.
            _ => sleep(RETRY_PAUSE),
        }
        next += BATCH;
    }
    acknowledged
}

/// One consume of up to 100 messages, acked in one request. Returns how many
/// messages came, `None` when the node did not answer.
fn consume_once(port: u16, wait: &str, seen: &Mutex<Seen>) -> Option<usize> {
    let path = format!("/v1/topics/{TOPIC}/consume?max=100&wait={wait}");
    let answer = Request::get(&path)
        .with_headers(&[CLIENT_HEADER])
        .send(port)?;
    if answer.status == 204 {
        return Some(0);
    }
    assert_eq!(answer.status, 200, "consume: {}", answer.body);
    let body: Value = serde_json::from_str(&answer.body).ok()?;
    let messages = body["messages"].as_array().expect("a messages array");
    let mut ids = Vec::with_capacity(messages.len());
    let mut handles = Vec::with_capacity(messages.len());
    {
        let mut seen = seen.lock().expect("lock");
        for message in messages {
            let id = message["payload"].as_str().expect("a string payload");
            *seen.delivered.entry(id.to_owned()).or_default() += 1;
            if seen.acked.contains(id) {
                seen.delivered_after_ack += 1;
            }
            ids.push(id.to_owned());
            handles.push(message["receipt_handle"].clone());
        }
    }
    let body = json!({ "receipt_handles": handles }).to_string();
    let ack_path = format!("/v1/topics/{TOPIC}/ack");
    let answer = Request::post(&ack_path, "application/json", body.as_bytes())
        .with_headers(&[CLIENT_HEADER])
        .send(port)?;
    if answer.status != 200 {
        return Some(ids.len());
    }
    let results: Value = serde_json::from_str(&answer.body).expect("ack results JSON");
    let results = results["results"].as_array().expect("a results array");
    assert_eq!(results.len(), ids.len(), "one result per handle");
    let mut seen = seen.lock().expect("lock");
    for (id, result) in ids.into_iter().zip(results) {
        let status = u16::try_from(result["status"].as_u64().expect("a status")).expect("u16");
        if status == 204 {
            seen.acked.insert(id);
        } else {
            *seen.ack_refusals.entry(status).or_default() += 1;
        }
    }
    Some(messages.len())
}

fn consume_until(port: u16, stop: &AtomicBool, seen: &Mutex<Seen>) {
    while !stop.load(Ordering::Relaxed) {
        if consume_once(port, "500ms", seen).is_none() {
            sleep(RETRY_PAUSE);
        }
    }
}

fn create_topic(port: u16) {
    let topic = json!({
        "name": TOPIC,
        "partitions": PARTITIONS,
        "visibility_timeout_ms": VISIBILITY_MS,
    })
    .to_string();
    let created = Request::post("/v1/topics", "application/json", topic.as_bytes()).send(port);
    assert!(
        matches!(&created, Some(answer) if answer.status == 201),
        "{created:?}"
    );
}

#[test]
fn acked_messages_survive_kills_and_are_never_redelivered_after_a_graceful_stop() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut dev = DevProcess::new(dir.path());
    let mut rng = StdRng::seed_from_u64(SEED);
    dev.start();
    create_topic(dev.port);

    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            let port = dev.port;
            thread::spawn(move || produce(port, producer))
        })
        .collect();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let (port, stop, seen) = (dev.port, Arc::clone(&stop), Arc::clone(&seen));
            thread::spawn(move || consume_until(port, &stop, &seen))
        })
        .collect();
    for _ in 0..KILLS {
        sleep(Duration::from_millis(rng.random_range(KILL_AFTER_MS)));
        dev.sigkill();
        dev.start();
    }
    let acknowledged: Vec<String> = producers
        .into_iter()
        .flat_map(|producer| producer.join().expect("producer thread"))
        .collect();

    // Drain: until every 202 message is acked and a poll finds nothing.
    let deadline = Instant::now() + DRAIN_MAX;
    loop {
        let all_acked = {
            let seen = seen.lock().expect("lock");
            acknowledged.iter().all(|id| seen.acked.contains(id))
        };
        if all_acked {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every 202 message was acked in time\n{}",
            dev.log()
        );
        sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for consumer in consumers {
        consumer.join().expect("consumer thread");
    }
    while consume_once(dev.port, "1s", &seen) != Some(0) {
        assert!(Instant::now() < deadline, "the queue never emptied");
    }

    // A graceful stop persists every ack: nothing acked comes back.
    let before_stop = {
        let seen = seen.lock().expect("lock");
        (seen.acked.clone(), seen.delivered_after_ack)
    };
    dev.sigterm();
    dev.start();
    let mut after_restart = Vec::new();
    for _ in 0..3 {
        let path = format!("/v1/topics/{TOPIC}/consume?max=100&wait=1s");
        let answer = Request::get(&path)
            .with_headers(&[CLIENT_HEADER])
            .send(dev.port)
            .expect("an answer");
        if answer.status == 200 {
            let body: Value = serde_json::from_str(&answer.body).expect("JSON");
            for message in body["messages"].as_array().expect("messages") {
                after_restart.push(message["payload"].as_str().expect("string").to_owned());
            }
        } else {
            assert_eq!(answer.status, 204, "{}", answer.body);
        }
    }
    dev.sigterm();

    let seen = seen.lock().expect("lock");
    let duplicated = seen.delivered.values().filter(|count| **count > 1).count();
    println!(
        "kills {KILLS}; 202 messages {}; distinct delivered {}; deliveries {}; messages delivered \
         more than once {duplicated}; deliveries after an ack answered 204 (kill windows) {}; \
         per-handle ack refusals by status {:?}; delivered after the graceful restart {}",
        acknowledged.len(),
        seen.delivered.len(),
        seen.delivered.values().sum::<usize>(),
        before_stop.1,
        seen.ack_refusals,
        after_restart.len(),
    );
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|id| !seen.delivered.contains_key(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} messages answered 202 were never delivered: {:?}",
        lost.len(),
        &lost[..lost.len().min(20)]
    );
    let redelivered: Vec<&String> = after_restart
        .iter()
        .filter(|id| before_stop.0.contains(*id))
        .collect();
    assert!(
        redelivered.is_empty(),
        "{} acked messages delivered again after a graceful stop: {:?}",
        redelivered.len(),
        &redelivered[..redelivered.len().min(20)]
    );
    assert!(
        acknowledged.len() > MESSAGES / 2,
        "most batches got a 202 between kills"
    );
}
