//! `narad dev` on a disk that fills up: its data directory is a small
//! size-limited tmpfs. Producers send until the disk is full. Every answer
//! must be `202` or the spec's status for a failed WAL write (§1.5: `500`
//! `produce failed`, latched until restart), and once the first `500` came
//! no later produce may be accepted. Then the tmpfs is grown (a remount
//! keeps the data), the node is killed and started again on the same
//! directory, and every message that got a `202` must be consumable, byte
//! for byte, found by the id at the start of its payload.
//!
//! Mounting needs root (or `CAP_SYS_ADMIN`); where `mount` is refused the
//! test prints `SKIPPED` with the reason and passes.
//!
//! What it exercises under `narad dev`: the disk backend `narad dev` picks
//! (io_uring where the kernel allows it, which works with buffered I/O on
//! tmpfs; no `O_DIRECT` is used), with WAL segment preallocation off (its
//! default; `narad dev` has no flag for it). Files grow by appends, so the
//! disk fills on a write, and `fdatasync` on tmpfs always succeeds.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use narad_tests::dev::{DevProcess as Dev, Request};

const TOPIC: &str = "full";
const PARTITIONS: u32 = 3;
/// The tmpfs while producing, and after it is grown. 64 MiB holds the
/// control plane's files, a WAL segment and the partition logs' first
/// segments, and fills within seconds at [`PAYLOAD_BYTES`] a message.
const SMALL: &str = "64m";
const LARGE: &str = "256m";
/// Each payload: its id, a space, then filler up to this size.
const PAYLOAD_BYTES: usize = 32 * 1024;
const PRODUCERS: usize = 4;
/// A ceiling on messages one producer sends (64 MiB / 32 KiB is 2,048, and
/// each message is stored twice: WAL and partition log).
const MESSAGES_PER_PRODUCER_MAX: usize = 2_000;
/// Produces each producer still sends after it saw its first refusal, to
/// check that the refusal is latched.
const SENDS_AFTER_REFUSAL: usize = 20;
/// A ceiling on every wait: it turns a hang into a failure, it asserts no
/// speed.
const WAIT_MAX: Duration = Duration::from_secs(20);
const CLIENT_HEADER: &str = "X-Narad-Client: disk-full-test";
/// Most messages one consume asks for.
const CONSUME_MAX: usize = 100;
/// Empty consumes in a row that end the final read.
const EMPTY_CONSUMES_TO_END: usize = 3;

/// A tmpfs mounted on a directory, unmounted when dropped.
#[derive(Debug)]
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` on `dir`; the refusal's text when mounting
    /// is not allowed here.
    fn mount(dir: &Path, size: &str) -> Result<Self, String> {
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|error| format!("cannot run mount: {error}"))?;
        if output.status.success() {
            Ok(Self {
                dir: dir.to_owned(),
            })
        } else {
            Err(format!(
                "mount -t tmpfs refused ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }

    /// Changes the size, keeping the files.
    fn resize(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.dir)
            .status()
            .expect("mount runs");
        assert!(status.success(), "remount to {size}: {status}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

/// The payload of message `id`: `m<id> ` then filler, [`PAYLOAD_BYTES`]
/// long, the filler derived from the id so a mixed-up record shows.
fn payload(id: usize) -> String {
    let head = format!("m{id} ");
    let filler = char::from(b'a' + u8::try_from(id % 26).expect("below 26"));
    let mut text = head;
    while text.len() < PAYLOAD_BYTES {
        text.push(filler);
    }
    text
}

/// One produce and its answer.
#[derive(Clone, Debug)]
struct Sent {
    id: usize,
    /// Status and body; `None` when no answer came.
    answer: Option<(u16, String)>,
    /// When the request was sent and when its answer was read.
    sent_at: Instant,
    answered_at: Instant,
}

impl Sent {
    fn accepted(&self) -> bool {
        matches!(self.answer, Some((202, _)))
    }
}

/// Sends until [`SENDS_AFTER_REFUSAL`] produces after this producer's
/// first refusal, or until the message ceiling.
fn produce(port: u16, next_id: &AtomicUsize, stop: &AtomicBool) -> Vec<Sent> {
    let path = format!("/v1/topics/{TOPIC}/produce");
    let mut sent = Vec::new();
    let mut after_refusal = None;
    for _ in 0..MESSAGES_PER_PRODUCER_MAX {
        if after_refusal == Some(0) || stop.load(Ordering::Relaxed) {
            break;
        }
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        let body = payload(id);
        let sent_at = Instant::now();
        let answer = Request::post(&path, "application/octet-stream", body.as_bytes())
            .send(port)
            .map(|answer| (answer.status, answer.body));
        let message = Sent {
            id,
            answer,
            sent_at,
            answered_at: Instant::now(),
        };
        after_refusal = match after_refusal {
            Some(left) => Some(left - 1),
            None if !message.accepted() => Some(SENDS_AFTER_REFUSAL),
            None => None,
        };
        sent.push(message);
    }
    sent
}

fn produce_until_full(dev: &Dev) -> Vec<Sent> {
    let next_id = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let (next_id, stop, port) = (Arc::clone(&next_id), Arc::clone(&stop), dev.port);
            thread::spawn(move || produce(port, &next_id, &stop))
        })
        .collect();
    let mut sent: Vec<Sent> = producers
        .into_iter()
        .flat_map(|producer| producer.join().expect("producer thread"))
        .collect();
    stop.store(true, Ordering::Relaxed);
    sent.sort_by_key(|message| message.id);
    sent
}

fn backlog_records(port: u16) -> Option<u64> {
    let answer = Request::get("/metrics").send(port)?;
    answer
        .body
        .lines()
        .find_map(|line| line.strip_prefix("narad_ingress_dispatch_backlog_records "))
        .and_then(|value| value.trim().parse().ok())
}

fn wait_drained(dev: &Dev) {
    let deadline = Instant::now() + WAIT_MAX;
    while backlog_records(dev.port) != Some(0) {
        assert!(Instant::now() < deadline, "never drained\n{}", dev.log());
        sleep(Duration::from_millis(50));
    }
}

/// Consumes and acks until [`EMPTY_CONSUMES_TO_END`] empty consumes in a
/// row: each delivered payload by id, and how often it came.
fn consume_all(dev: &Dev) -> HashMap<usize, (String, usize)> {
    let consume = format!("/v1/topics/{TOPIC}/consume?max={CONSUME_MAX}&wait=500ms");
    let ack = format!("/v1/topics/{TOPIC}/ack");
    let mut delivered: HashMap<usize, (String, usize)> = HashMap::new();
    let mut empty = 0;
    let deadline = Instant::now() + WAIT_MAX;
    while empty < EMPTY_CONSUMES_TO_END {
        assert!(
            Instant::now() < deadline,
            "consume never ended\n{}",
            dev.log()
        );
        let answer = Request::get(&consume)
            .with_headers(&[CLIENT_HEADER])
            .send(dev.port)
            .expect("consume answered");
        if answer.status == 204 {
            empty += 1;
            continue;
        }
        assert_eq!(answer.status, 200, "{}", answer.body);
        empty = 0;
        let body: serde_json::Value = serde_json::from_str(&answer.body).expect("JSON");
        let messages = body["messages"].as_array().expect("messages");
        let mut handles = Vec::new();
        for message in messages {
            let payload = message["payload"].as_str().expect("a text payload");
            let id = payload
                .strip_prefix('m')
                .and_then(|rest| rest.split(' ').next())
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("payload without an id: {:.40}", payload));
            let entry = delivered
                .entry(id)
                .or_insert_with(|| (payload.to_owned(), 0));
            entry.1 += 1;
            handles.push(message["receipt_handle"].clone());
        }
        let body = serde_json::json!({ "receipt_handles": handles }).to_string();
        let acked = Request::post(&ack, "application/json", body.as_bytes())
            .with_headers(&[CLIENT_HEADER])
            .send(dev.port)
            .expect("ack answered");
        assert_eq!(acked.status, 200, "{}", acked.body);
    }
    delivered
}

/// Checks what the producers were told: only `202` or `500 produce
/// failed`, at least one refusal, and no `202` for a produce sent after
/// the first refusal was answered (the WAL latches). Returns the
/// acknowledged ids.
fn check_answers(sent: &[Sent], dev: &Dev) -> Vec<usize> {
    let mut by_status: BTreeMap<Option<u16>, usize> = BTreeMap::new();
    for message in sent {
        *by_status
            .entry(message.answer.as_ref().map(|(status, _)| *status))
            .or_default() += 1;
    }
    println!(
        "sent {} messages of {PAYLOAD_BYTES} B; answers by status (None: no answer): \
         {by_status:?}",
        sent.len()
    );
    for message in sent {
        match &message.answer {
            Some((202, _)) => {}
            Some((500, body)) => assert!(
                body.contains("produce failed"),
                "message {}: 500 with {body}",
                message.id
            ),
            other => panic!(
                "message {}: {other:?}; only 202 or 500 produce failed may answer a produce \
                 on a full disk\n{}",
                message.id,
                dev.log()
            ),
        }
    }
    let first_refusal = sent
        .iter()
        .filter(|message| !message.accepted())
        .map(|message| message.answered_at)
        .min();
    if let Some(first_refusal) = first_refusal {
        let late: Vec<usize> = sent
            .iter()
            .filter(|message| message.accepted() && message.sent_at > first_refusal)
            .map(|message| message.id)
            .collect();
        assert!(
            late.is_empty(),
            "accepted after the WAL refused a produce (not latched): {late:?}"
        );
    }
    let accepted: Vec<usize> = sent
        .iter()
        .filter(|message| message.accepted())
        .map(|message| message.id)
        .collect();
    assert!(
        accepted.len() < sent.len(),
        "the disk never filled: every produce was accepted"
    );
    assert!(
        !accepted.is_empty(),
        "nothing was accepted before the disk filled"
    );
    accepted
}

#[test]
fn a_full_disk_refuses_produces_with_500_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mount_point = dir.path().join("disk");
    std::fs::create_dir(&mount_point).expect("mount point");
    let tmpfs = match Tmpfs::mount(&mount_point, SMALL) {
        Ok(tmpfs) => tmpfs,
        Err(reason) => {
            println!("SKIPPED: {reason}");
            return;
        }
    };
    // The log stays off the small disk, so it can say what happened.
    let mut dev = Dev::new(dir.path());
    dev.data_dir = mount_point.join("data");
    dev.start();
    let topic = format!(r#"{{"name":"{TOPIC}","partitions":{PARTITIONS}}}"#);
    let created = Request::post("/v1/topics", "application/json", topic.as_bytes())
        .send(dev.port)
        .expect("create answered");
    assert_eq!(created.status, 201, "{}", created.body);

    let sent = produce_until_full(&dev);
    let accepted = check_answers(&sent, &dev);

    tmpfs.resize(LARGE);
    dev.sigkill();
    dev.start();
    wait_drained(&dev);
    let delivered = consume_all(&dev);
    for id in &accepted {
        let (payload, _) = delivered
            .get(id)
            .unwrap_or_else(|| panic!("acknowledged message {id} lost\n{}", dev.log()));
        assert!(*payload == self::payload(*id), "message {id} altered");
    }
    let duplicates: usize = delivered.values().map(|(_, count)| count - 1).sum();
    let sent_ids: std::collections::HashSet<usize> = sent.iter().map(|m| m.id).collect();
    let unknown: Vec<&usize> = delivered
        .keys()
        .filter(|id| !sent_ids.contains(id))
        .collect();
    assert!(unknown.is_empty(), "delivered ids never sent: {unknown:?}");
    println!(
        "after growing the disk and a restart: {} acknowledged, {} distinct delivered \
         ({} without a 202), {duplicates} duplicate deliveries",
        accepted.len(),
        delivered.len(),
        delivered.len() - accepted.len()
    );
    drop(dev);
    drop(tmpfs);
}
