//! `narad dev` killed with SIGKILL again and again while concurrent
//! producers send to it: every message that got a `202` must be in its
//! partition log afterwards, byte for byte, and nothing that was never sent
//! may appear there. No message may be stored twice either: every record
//! carries its ingress WAL origin, so a record the dispatcher sends again
//! after a restart is acknowledged by its partition without being stored
//! again. (The one seam left, a reroute to a sibling partition, cannot
//! happen here: every copy must sit in its home partition.)
//!
//! Placement checked per message: keyed messages must sit in the partition
//! of the spec's key hash (FNV-1a 32 of the key, mod partitions), pinned
//! messages in the partition asked for; keyless messages go round-robin from
//! a random start, so for them only "somewhere in the topic, with no key" is
//! checked.
//!
//! The kill moments come from a seeded RNG; which requests a kill cuts off
//! depends on scheduling, so the assertions hold for any interleaving.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use narad_tests::dev::{DevProcess as Dev, Request};
use narad_tests::placement::{Placed, Placement};
use narad_tests::stored::topic_records;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SEED: u64 = 0x6e61_7261_645f_6b31;
const TOPIC: &str = "crash";
const PARTITIONS: u32 = 4;
/// Producer threads; thread `t` is keyed, pinned or keyless by `t % 3`.
const PRODUCERS: usize = 6;
/// A bound on the messages one producer sends.
const MESSAGES_PER_PRODUCER_MAX: usize = 4_000;
/// Distinct keys a keyed producer cycles through.
const KEYS_PER_PRODUCER: usize = 5;
/// SIGKILLs while producing; the final one after the producers stop makes
/// one more.
const KILLS: usize = 12;
/// Range of the pause between becoming ready and the next SIGKILL.
const KILL_AFTER_MS: std::ops::Range<u64> = 80..400;
/// How long the producers go on after the last kill of the loop.
const TAIL_PRODUCE: Duration = Duration::from_millis(300);
/// A ceiling on every wait: it turns a hang into a failure, it asserts no
/// speed.
const WAIT_MAX: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);
/// Pause of a producer after a request got no answer (the node is down).
const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// How producer `producer` places its messages: keyed, pinned or keyless
/// by `producer % 3`.
fn placement_of_producer(producer: usize) -> Placement {
    match producer % 3 {
        0 => Placement::Keyed,
        1 => Placement::Pinned(u32::try_from(producer).expect("small") % PARTITIONS),
        _ => Placement::Keyless,
    }
}

/// One message a producer sent, whatever the answer.
#[derive(Clone, Debug)]
struct Sent {
    key: Vec<u8>,
    payload: Vec<u8>,
    /// The partition it must be in, when placement is predictable.
    home: Option<u32>,
    /// The HTTP status, `None` when no answer came (node down or killed).
    status: Option<u16>,
}

impl Sent {
    fn acknowledged(&self) -> bool {
        self.status == Some(202)
    }
}

fn request(
    port: u16,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> Option<(u16, String)> {
    let request = Request {
        method,
        path,
        content_type,
        headers: &[],
        body,
    };
    request
        .send(port)
        .map(|answer| (answer.status, answer.body))
}

fn get(port: u16, path: &str) -> Option<(u16, String)> {
    request(port, "GET", path, "application/json", b"")
}

/// Sends up to [`MESSAGES_PER_PRODUCER_MAX`] messages, each once, until
/// `stop`; returns every message sent and whether it got a `202`.
fn produce(port: u16, producer: usize, stop: &AtomicBool) -> Vec<Sent> {
    let placement = placement_of_producer(producer);
    let mut sent = Vec::new();
    for n in 0..MESSAGES_PER_PRODUCER_MAX {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let payload = format!("p{producer}-{n}").into_bytes();
        let Placed { key, query, home } = placement.place(
            &format!("k{producer}-{}", n % KEYS_PER_PRODUCER),
            PARTITIONS,
        );
        let path = format!("/v1/topics/{TOPIC}/produce{query}");
        let answer = request(port, "POST", &path, "application/octet-stream", &payload);
        if answer.is_none() {
            sleep(RETRY_PAUSE);
        }
        sent.push(Sent {
            key,
            payload,
            home,
            status: answer.map(|(status, _)| status),
        });
    }
    sent
}

fn backlog_records(port: u16) -> Option<u64> {
    let (_, metrics) = get(port, "/metrics")?;
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("narad_ingress_dispatch_backlog_records "))
        .and_then(|value| value.trim().parse().ok())
}

fn high_watermarks(port: u16) -> Option<u64> {
    let (status, body) = get(port, &format!("/v1/topics/{TOPIC}"))?;
    assert_eq!(status, 200, "{body}");
    let described: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let stats = described["partition_stats"].as_array()?;
    Some(
        stats
            .iter()
            .map(|stats| stats["high_watermark"].as_u64().unwrap_or(0))
            .sum(),
    )
}

/// Waits until the dispatch backlog is empty and the high watermarks have
/// stopped moving for three polls in a row.
fn wait_drained(dev: &Dev) {
    let deadline = Instant::now() + WAIT_MAX;
    let mut last = None;
    let mut steady_polls = 0;
    while steady_polls < 3 {
        assert!(Instant::now() < deadline, "never drained\n{}", dev.log());
        sleep(POLL * 2);
        let now = high_watermarks(dev.port);
        let idle = backlog_records(dev.port) == Some(0);
        steady_polls = if idle && now.is_some() && now == last {
            steady_polls + 1
        } else {
            0
        };
        last = now;
    }
}

/// Every record of every partition of the topic: (partition, key, payload).
fn stored_records(data_dir: &Path) -> Vec<(u32, Vec<u8>, Vec<u8>)> {
    for partition in 0..PARTITIONS {
        let dir = data_dir
            .join("topics")
            .join(TOPIC)
            .join(format!("p{partition:05}"));
        assert!(dir.is_dir(), "{} exists", dir.display());
    }
    topic_records(data_dir, TOPIC, PARTITIONS)
        .into_iter()
        .map(|record| (record.partition, record.key, record.payload))
        .collect()
}

/// Kills the node [`KILLS`] times at seeded moments, restarting it each
/// time, while `producers` run; then stops them and returns what they sent,
/// and whether some active segment ended in prepared zeros just before a
/// kill.
fn produce_through_kills(dev: &mut Dev, rng: &mut StdRng) -> (Vec<Sent>, bool) {
    let mut zeros_seen = false;
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            let stop = stop.clone();
            let port = dev.port;
            thread::spawn(move || produce(port, producer, &stop))
        })
        .collect();
    for _ in 0..KILLS {
        sleep(Duration::from_millis(rng.random_range(KILL_AFTER_MS)));
        zeros_seen |= some_segment_ends_in_zeros(&dev.data_dir);
        dev.sigkill();
        dev.start();
    }
    sleep(TAIL_PRODUCE);
    stop.store(true, Ordering::Relaxed);
    let sent = producers
        .into_iter()
        .flat_map(|producer| producer.join().expect("producer thread"))
        .collect();
    (sent, zeros_seen)
}

#[test]
fn every_acknowledged_message_survives_repeated_sigkills_of_dev() {
    let dir = tempfile::tempdir().expect("temp dir");
    survives_repeated_sigkills(Dev::new(dir.path()), false);
}

/// The same with `storage.partition_log_prealloc` on: commits overwrite
/// zeros prepared after each partition's active segment, and every restart
/// finds those zeros after the last frame.
#[test]
fn every_acknowledged_message_survives_repeated_sigkills_of_dev_with_prepared_partition_logs() {
    let dir = tempfile::tempdir().expect("temp dir");
    survives_repeated_sigkills(
        Dev::new(dir.path()).with_env("NARAD_STORAGE_PARTITION_LOG_PREALLOC", "true"),
        true,
    );
}

/// Whether some partition's active segment ends in a 4 KiB block of
/// zeros: prepared zeros, while the node runs.
fn some_segment_ends_in_zeros(data_dir: &Path) -> bool {
    (0..PARTITIONS).any(|partition| {
        let dir = data_dir
            .join("topics")
            .join(TOPIC)
            .join(format!("p{partition:05}"));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return false;
        };
        let mut segments: Vec<_> = entries
            .map(|entry| entry.expect("entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
            .collect();
        segments.sort();
        let Some(Ok(bytes)) = segments.last().map(std::fs::read) else {
            return false;
        };
        bytes.len() >= 4_096 && bytes[bytes.len() - 4_096..].iter().all(|&b| b == 0)
    })
}

fn survives_repeated_sigkills(mut dev: Dev, prepared: bool) {
    let mut rng = StdRng::seed_from_u64(SEED);
    dev.start();
    let topic = format!(r#"{{"name":"{TOPIC}","partitions":{PARTITIONS}}}"#);
    let created = request(
        dev.port,
        "POST",
        "/v1/topics",
        "application/json",
        topic.as_bytes(),
    );
    assert!(matches!(created, Some((201, _))), "{created:?}");

    let (sent, zeros_seen) = produce_through_kills(&mut dev, &mut rng);
    assert_eq!(
        zeros_seen, prepared,
        "zeros are prepared after the active segments only when asked"
    );
    dev.sigkill();
    let kills = KILLS + 1;
    dev.start();
    wait_drained(&dev);
    dev.sigterm();

    let stored = stored_records(&dev.data_dir);
    let by_payload: HashMap<&[u8], &Sent> = sent
        .iter()
        .map(|message| (message.payload.as_slice(), message))
        .collect();
    let mut copies: HashMap<&[u8], usize> = HashMap::new();
    for (partition, key, payload) in &stored {
        let message = by_payload.get(payload.as_slice()).unwrap_or_else(|| {
            panic!(
                "partition {partition} holds an unknown payload {:?}",
                String::from_utf8_lossy(payload)
            )
        });
        assert_eq!(key, &message.key, "key of {message:?}");
        if let Some(home) = message.home {
            assert_eq!(*partition, home, "partition of {message:?}");
        }
        *copies.entry(payload.as_slice()).or_default() += 1;
    }
    let acknowledged: Vec<&Sent> = sent.iter().filter(|m| m.acknowledged()).collect();
    let mut refusals: BTreeMap<Option<u16>, usize> = BTreeMap::new();
    for message in sent.iter().filter(|m| !m.acknowledged()) {
        *refusals.entry(message.status).or_default() += 1;
    }
    let missing: Vec<String> = acknowledged
        .iter()
        .filter(|m| !copies.contains_key(m.payload.as_slice()))
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    let mut duplicates: Vec<String> = copies
        .iter()
        .filter(|(_, count)| **count > 1)
        .map(|(payload, count)| format!("{}x{count}", String::from_utf8_lossy(payload)))
        .collect();
    duplicates.sort_unstable();
    let found_unacknowledged = copies.len()
        - acknowledged
            .iter()
            .filter(|m| copies.contains_key(m.payload.as_slice()))
            .count();
    println!(
        "kills {kills}, sent {}, acknowledged {}, stored records {}, distinct stored {}, \
         stored without a 202 {found_unacknowledged}, duplicated messages {} (first ones: {:?}), \
         answers other than 202 by status (None: no answer) {refusals:?}",
        sent.len(),
        acknowledged.len(),
        stored.len(),
        copies.len(),
        duplicates.len(),
        &duplicates[..duplicates.len().min(20)],
    );
    assert!(
        missing.is_empty(),
        "{} acknowledged messages lost: {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
    assert!(
        duplicates.is_empty(),
        "{} messages stored more than once: {:?}",
        duplicates.len(),
        &duplicates[..duplicates.len().min(20)]
    );
    assert!(
        acknowledged.len() > kills,
        "producers got 202s between kills"
    );
}
