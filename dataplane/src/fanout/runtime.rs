//! A cursor's task on the fan-out thread (see `super::reconcile`). It
//! carries out its machine's actions: cursor file loads and writes and
//! parent log reads on the blocking pool, leader questions on a plain
//! thread (the leader's client blocks on a runtime of its own), bucket
//! commits through the same commit targets as the dispatcher's (the
//! combiner on this node, the `CommitProduceBatch` RPC to another owner).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use narad_clock::Clock;
use narad_disk::Disk;
use narad_meta::RemoteLink;
use narad_plog::{LogError, ORIGIN_ID_BYTES, Origin, PartitionLog, ReadEntry, ReadLimits};
use narad_remotes::state::LinkState;
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};

use super::cursor_file::{self, CursorPosition};
use super::machine::{
    Action, Bucket, BucketId, Cursor, CursorConfig, CursorCounts, Event, LinkSpec, ParentRecord,
    ReadOutcome, SlabEntry,
};
use super::remote::{
    RemotePlane, RemoteReport, ShipOutcome, ShipTrack, Shipment, retention_headroom_ms,
};
use super::status::{CursorKey, CursorReport, FanoutStatus};
use crate::dispatch::{
    CommitDone, CommitId, CommitOrder, CommitOutcome, CommitTarget, Held, LeaderConfirm,
    RecordMeta, WalPayload,
};
use crate::metadata::MetadataReplica;
use crate::metrics::{self, NodeMetrics};
use crate::partitions::LocalLogs;
use crate::topology::{Destination, Route, Topology};

/// How long one bucket commit may take before it counts as failed.
pub const BUCKET_COMMIT_BUDGET: Duration = Duration::from_secs(10);

/// What cursors act through.
#[derive(Debug, Clone)]
pub struct FanoutParts {
    /// The disk cursor files live on.
    pub disk: Arc<dyn Disk>,
    /// This node's partition logs (parents are read from them).
    pub logs: Arc<LocalLogs>,
    /// The metadata replica: links, placement.
    pub replica: Arc<MetadataReplica>,
    /// The control plane's leader, for attach epochs.
    pub leader: Arc<dyn LeaderConfirm>,
    /// Commits to child partitions this node owns.
    pub local: Arc<dyn CommitTarget>,
    /// Commits to child partitions other nodes own.
    pub remote: Arc<dyn CommitTarget>,
    /// Where cursors report positions.
    pub status: Arc<FanoutStatus>,
    /// Ships remote children's lanes to other clusters.
    pub remote_plane: Arc<RemotePlane>,
    /// The node's metrics.
    pub metrics: Arc<NodeMetrics>,
    /// The node's clock: due times are on its wall clock, sleeps on its
    /// monotonic one.
    pub clock: Arc<dyn Clock>,
    /// Cursor limits and timings.
    pub config: CursorConfig,
}

/// One cursor to run: which pair, its link, and the incarnations it was
/// planned for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CursorPlan {
    /// The pair.
    pub key: CursorKey,
    /// The link as the replica holds it.
    pub link: LinkSpec,
    /// The parent's incarnation.
    pub parent_incarnation: Option<Arc<str>>,
    /// The child's incarnation: bucket records carry it, so a child
    /// deleted and created again refuses them.
    pub child_incarnation: Option<Arc<str>>,
    /// A remote child's link (remote, remote topic, lanes, skips): its
    /// buckets are lanes shipped to the remote, not child partitions.
    pub remote_link: Option<RemoteLink>,
}

/// Runs one cursor until `stop` turns true. Returns once nothing it
/// started can still write its cursor file.
pub async fn run_cursor(
    parts: Arc<FanoutParts>,
    plan: CursorPlan,
    log: Arc<PartitionLog>,
    mut stop: watch::Receiver<bool>,
) {
    let (events, mut received) = mpsc::unbounded_channel::<Event>();
    let path = cursor_file::cursor_path(log.dir(), &plan.key.child);
    let mut cursor = Cursor::new(plan.link.clone(), parts.config);
    let track = plan
        .remote_link
        .is_some()
        .then(|| Arc::new(ShipTrack::new()));
    let mut actions = cursor.start();
    let mut wake_at: Option<u64> = None;
    let mut writing: Option<tokio::task::JoinHandle<()>> = None;
    // A read waits for the parent's next commit without a timeout: the
    // cursor aborts it when it stops.
    let mut reading: Option<tokio::task::AbortHandle> = None;
    // What this cursor holds for a retry, as the node's count has it.
    let mut held = 0;
    loop {
        let released = hold_or_release(&parts, &plan, &mut cursor, &mut held);
        actions.extend(released);
        for action in actions.drain(..) {
            match action {
                Action::Load => load(&parts, &path, &events),
                Action::Confirm => confirm(&parts, &plan, &events),
                Action::Read { from, linger } => {
                    reading = Some(read(&parts, &log, from, linger, &events));
                }
                Action::Commit(bucket) => match (&plan.remote_link, &track) {
                    (Some(link), Some(track)) => ship(&parts, &plan, link, track, bucket, &events),
                    _ => commit(&parts, &plan, bucket, &events),
                },
                Action::Write { position, replace } => {
                    writing = Some(write(&parts, &path, position, replace, &events));
                }
                Action::WakeAt(at) => wake_at = Some(wake_at.map_or(at, |old| old.min(at))),
            }
        }
        publish(&parts, &plan, &mut cursor, &log, track.as_deref());
        let sleep = wake_at.map(|at| {
            let wait = at.saturating_sub(parts.clock.unix_ms());
            parts.clock.sleep_until(parts.clock.now_ms() + wait)
        });
        tokio::select! {
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
            event = received.recv() => {
                let Some(event) = event else { break };
                if let Event::Read(ReadOutcome::Slab { entries, .. }) = &event {
                    observe_slab(&parts, entries);
                }
                actions = cursor.handle(event, parts.clock.unix_ms());
            }
            () = async { match sleep { Some(sleep) => sleep.await, None => std::future::pending().await } } => {
                wake_at = None;
                actions = cursor.handle(Event::Tick, parts.clock.unix_ms());
            }
        }
    }
    cursor.stop();
    if let Some(link) = &plan.remote_link {
        parts.remote_plane.hold_for_retry(&link.remote, held, 0);
    }
    if let Some(read) = reading {
        read.abort();
    }
    if let Some(write) = writing {
        // A write in progress may still land; the next cursor of this pair
        // starts only after it did.
        let _ = write.await;
    }
    parts.status.forget(&plan.key);
    clear_gauges(&parts, &plan.key);
}

/// Keeps the node's count of what remote cursors hold for a retry, and
/// lets this cursor's lanes go when the node holds more than
/// `remotes.max_held_bytes`: the cursor then reads them again from the
/// parent's log when the retry is due. `held` is this cursor's part of the
/// count.
fn hold_or_release(
    parts: &FanoutParts,
    plan: &CursorPlan,
    cursor: &mut Cursor,
    held: &mut u64,
) -> Vec<Action> {
    let Some(link) = &plan.remote_link else {
        return Vec::new();
    };
    let plane = &parts.remote_plane;
    let holding = cursor.held_for_retry_bytes();
    let release = plane.hold_for_retry(&link.remote, *held, holding);
    *held = holding;
    if !release {
        return Vec::new();
    }
    let actions = cursor.handle(Event::Release, parts.clock.unix_ms());
    let after = cursor.held_for_retry_bytes();
    plane.hold_for_retry(&link.remote, *held, after);
    *held = after;
    actions
}

fn load(parts: &Arc<FanoutParts>, path: &std::path::Path, events: &mpsc::UnboundedSender<Event>) {
    let (disk, path, events) = (Arc::clone(&parts.disk), path.to_path_buf(), events.clone());
    tokio::task::spawn_blocking(move || {
        let loaded = cursor_file::load(&*disk, &path).map_err(|error| error.to_string());
        if let Ok(cursor_file::Loaded::Damaged(reason)) = &loaded {
            tracing::warn!(path = %path.display(), %reason, "fan-out cursor file damaged; replaying from the attach point once the leader confirms the link");
        }
        let _ = events.send(Event::Loaded(loaded));
    });
}

fn confirm(parts: &Arc<FanoutParts>, plan: &CursorPlan, events: &mpsc::UnboundedSender<Event>) {
    let leader = Arc::clone(&parts.leader);
    let (child, epoch, answers) = (
        plan.key.child.to_string(),
        plan.link.epoch.clone(),
        events.clone(),
    );
    // The leader's client blocks on a runtime of its own and refuses to be
    // asked from inside one, the blocking pool's threads included.
    let spawned = std::thread::Builder::new()
        .name("narad-fanout-confirm".into())
        .spawn(move || {
            let answer = leader.confirm_attach_epoch(&child, &epoch);
            if let Err(error) = &answer {
                tracing::info!(%child, %epoch, %error, "fan-out cursor could not confirm its attach epoch; retrying in 1 s");
            }
            let _ = answers.send(Event::Confirmed(answer));
        });
    if let Err(error) = spawned {
        let _ = events.send(Event::Confirmed(Err(error.to_string())));
    }
}

fn read(
    parts: &Arc<FanoutParts>,
    log: &Arc<PartitionLog>,
    from: u64,
    linger: bool,
    events: &mpsc::UnboundedSender<Event>,
) -> tokio::task::AbortHandle {
    let (config, log, events) = (parts.config, Arc::clone(log), events.clone());
    tokio::spawn(async move {
        let outcome = read_slab(config, log, from, linger).await;
        let _ = events.send(Event::Read(outcome));
    })
    .abort_handle()
}

/// Waits for a record at `from` (no timer: the parent's commit wakes it),
/// lingers for a fuller slab if asked, then reads one slab.
async fn read_slab(
    config: CursorConfig,
    log: Arc<PartitionLog>,
    from: u64,
    linger: bool,
) -> ReadOutcome {
    let mut watch = log.watch_high_watermark();
    if watch.high_watermark() <= from
        && let Err(error) = watch.wait_beyond(from).await
    {
        return ReadOutcome::Failed(error.to_string());
    }
    let waiting = watch.high_watermark().saturating_sub(from);
    if linger && config.linger_ms > 0 && waiting < config.slab_records_max as u64 {
        tokio::time::sleep(Duration::from_millis(config.linger_ms)).await;
    }
    let limits = ReadLimits {
        records_max: config.slab_records_max,
        bytes_max: config.slab_bytes_max,
    };
    let read = tokio::task::spawn_blocking(move || log.read(from, u64::MAX, limits)).await;
    match read {
        Ok(Ok(batch)) => ReadOutcome::Slab {
            entries: batch.entries.into_iter().map(slab_entry).collect(),
            next_offset: batch.next_offset,
        },
        Ok(Err(LogError::OffsetTrimmed { oldest, .. })) => ReadOutcome::Trimmed {
            oldest_offset: oldest,
        },
        Ok(Err(error)) => ReadOutcome::Failed(error.to_string()),
        Err(error) => ReadOutcome::Failed(error.to_string()),
    }
}

fn slab_entry(entry: ReadEntry) -> SlabEntry {
    match entry {
        ReadEntry::Record(record) => SlabEntry::Record(ParentRecord {
            offset: record.offset,
            key: Bytes::from(record.key),
            payload: Bytes::from(record.payload),
            committed_at_ms: record.committed_at_ms,
        }),
        ReadEntry::Unreadable { offsets } => SlabEntry::Lost(offsets),
    }
}

/// Ships `bucket` (one lane of a slab) to a remote child's target. The
/// cursor hears [`Event::BucketDone`] when every record was stored, else
/// [`Event::BucketShippedPart`] with how many at the head were, so the
/// retry sends only the rest.
fn ship(
    parts: &Arc<FanoutParts>,
    plan: &CursorPlan,
    link: &RemoteLink,
    track: &Arc<ShipTrack>,
    bucket: Bucket,
    events: &mpsc::UnboundedSender<Event>,
) {
    let id = bucket.id;
    let shipment = Shipment {
        child: Arc::clone(&plan.key.child),
        parent: Arc::clone(&plan.key.parent),
        parent_partition: plan.key.partition,
        link: link.clone(),
        lane: bucket.child_partition,
        records: bucket.records,
        attach_epoch: plan.link.epoch.clone(),
        parent_incarnation: plan.parent_incarnation.clone(),
    };
    let records = shipment.records.clone();
    let shipping = parts.remote_plane.ship(shipment);
    let (parts, track, events) = (Arc::clone(parts), Arc::clone(track), events.clone());
    tokio::spawn(async move {
        let outcome = shipping.await;
        track.ended(&records, &outcome, parts.clock.unix_ms());
        let event = match outcome {
            ShipOutcome::Shipped => Event::BucketDone {
                id,
                committed: true,
            },
            ShipOutcome::Failed { shipped, .. } => Event::BucketShippedPart { id, shipped },
        };
        let _ = events.send(event);
    });
}

/// Sends `bucket` to the child partition's owner: this node's combiner or
/// another node over the cluster transport. An unplaced partition or a dead
/// owner fails the bucket at once (fan-out never reroutes to a sibling
/// child partition; the bucket waits for its owner).
fn commit(
    parts: &Arc<FanoutParts>,
    plan: &CursorPlan,
    bucket: Bucket,
    events: &mpsc::UnboundedSender<Event>,
) {
    let destination = Destination::new(&plan.key.child, bucket.child_partition);
    let id = bucket.id;
    let fail = |events: &mpsc::UnboundedSender<Event>| {
        let _ = events.send(Event::BucketDone {
            id,
            committed: false,
        });
    };
    let (node, local) = match parts.replica.route(&destination) {
        Route::Owner {
            node,
            local,
            alive: true,
        } => (node, local),
        Route::Owner { alive: false, .. } | Route::Unassigned => return fail(events),
    };
    let order = order_of(plan, destination, node, local, bucket);
    let events = events.clone();
    let done = CommitDone::with(move |_order, outcome| {
        let _ = events.send(Event::BucketDone {
            id,
            committed: outcome == CommitOutcome::Committed,
        });
    });
    if local {
        parts.local.start(order, done);
    } else {
        parts.remote.start(order, done);
    }
}

fn order_of(
    plan: &CursorPlan,
    destination: Destination,
    node: crate::topology::NodeId,
    local: bool,
    bucket: Bucket,
) -> CommitOrder<WalPayload> {
    let BucketId(id) = bucket.id;
    let origin = fanout_origin_id(plan);
    // The cursor file stays at or below the slab's start until every bucket
    // of the slab is stored, and a slab's records for one child partition
    // are all in its bucket: nothing below the bucket's first offset is sent
    // to this child partition again.
    let floor = bucket
        .records
        .iter()
        .map(|record| record.offset)
        .min()
        .unwrap_or(0);
    let records = bucket
        .records
        .into_iter()
        .map(|record| {
            let bytes = (record.key.len() + record.payload.len()) as u64;
            let meta = RecordMeta {
                home: destination.clone(),
                bytes,
                incarnation: plan.child_incarnation.clone(),
            };
            let payload = WalPayload {
                key: record.key,
                payload: record.payload,
                created_at_unix_ms: record.committed_at_ms,
                origin: Some(Origin {
                    id: origin,
                    seq: record.offset,
                    floor,
                }),
                idempotency_key: bytes::Bytes::new(),
            };
            Held::outside(record.offset, meta, payload)
        })
        .collect();
    CommitOrder {
        id: CommitId(id),
        destination,
        node,
        local,
        records,
        budget: BUCKET_COMMIT_BUDGET,
        probe: false,
    }
}

/// The origin id of a cursor's copies: the parent partition's offsets are
/// their sequence numbers, named by the parent (name and incarnation), the
/// partition and the attach epoch, so a slab repeated after a crash is
/// stored once in each child partition.
fn fanout_origin_id(plan: &CursorPlan) -> [u8; ORIGIN_ID_BYTES] {
    let mut hasher = Sha256::new();
    hasher.update(b"narad fan-out origin\0");
    hasher.update(plan.key.parent.as_bytes());
    hasher.update([0]);
    hasher.update(plan.parent_incarnation.as_deref().unwrap_or("").as_bytes());
    hasher.update([0]);
    hasher.update(plan.link.parent_partition.to_be_bytes());
    hasher.update(plan.link.epoch.as_str().as_bytes());
    let digest = hasher.finalize();
    let mut id = [0; ORIGIN_ID_BYTES];
    id.copy_from_slice(&digest[..ORIGIN_ID_BYTES]);
    id
}

fn write(
    parts: &Arc<FanoutParts>,
    path: &std::path::Path,
    position: CursorPosition,
    replace: bool,
    events: &mpsc::UnboundedSender<Event>,
) -> tokio::task::JoinHandle<()> {
    let (disk, path, events) = (Arc::clone(&parts.disk), path.to_path_buf(), events.clone());
    tokio::task::spawn_blocking(move || {
        let written = if replace {
            cursor_file::replace(&*disk, &path, &position)
        } else {
            cursor_file::advance(&*disk, &path, &position)
        };
        if let Err(error) = &written {
            tracing::warn!(path = %path.display(), %error, "fan-out cursor file write failed; retrying in 1 s");
        }
        let _ = events.send(Event::Written(written.map_err(|error| error.to_string())));
    })
}

fn labels(key: &CursorKey) -> [(&'static str, String); 2] {
    [
        ("parent", key.parent.to_string()),
        ("child", key.child.to_string()),
    ]
}

fn partition_labels(key: &CursorKey) -> [(&'static str, String); 3] {
    [
        ("parent", key.parent.to_string()),
        ("child", key.child.to_string()),
        ("partition", key.partition.to_string()),
    ]
}

/// Reports the cursor's position and publishes its counters and gauges.
fn publish(
    parts: &FanoutParts,
    plan: &CursorPlan,
    cursor: &mut Cursor,
    log: &PartitionLog,
    track: Option<&ShipTrack>,
) {
    let delayed = plan.link.delay_ms > 0;
    let report = CursorReport {
        next_offset: cursor.next_offset(),
        high_watermark: log.high_watermark(),
        due_lag_ms: delayed.then(|| cursor.due_lag_ms()),
        remote: track.map(|track| track.report(cursor.oldest_pending_ms())),
    };
    let counts = cursor.take_counts();
    let key = &plan.key;
    // Both counters are counted even when 0, so a link's series exist
    // (at 0) from its first report: the data-loss alert's increase() then
    // sees the first drop.
    parts.metrics.count(
        metrics::FANOUT_COMMITTED_TOTAL,
        &labels(key),
        counts.committed,
    );
    if counts.dropped > 0 {
        tracing::warn!(parent = %key.parent, partition = key.partition, child = %key.child, dropped = counts.dropped, "fan-out skipped parent records it could not deliver (aged out by retention, or unreadable)");
    }
    parts.metrics.count(
        metrics::FANOUT_CHILD_DROPPED_MESSAGES,
        &labels(key),
        counts.dropped,
    );
    parts.metrics.set(
        metrics::FANOUT_LAG_MESSAGES,
        &partition_labels(key),
        report.lag_messages() as f64,
    );
    if let Some(due_lag_ms) = report.due_lag_ms {
        parts.metrics.set(
            metrics::FANOUT_DUE_LAG_SECONDS,
            &partition_labels(key),
            due_lag_ms as f64 / 1_000.0,
        );
    }
    let remote = report.remote.clone();
    parts.status.report(key.clone(), report);
    if let (Some(remote), Some(link)) = (&remote, &plan.remote_link) {
        publish_remote(parts, key, link, remote, counts);
    }
}

/// The link states a remote child's cursor can be in, for its state gauge
/// (the one it is in reads 1, the others 0): all but `paused`, since a
/// paused link runs no cursor.
fn cursor_states() -> impl Iterator<Item = LinkState> {
    LinkState::ALL
        .into_iter()
        .filter(|state| *state != LinkState::Paused)
}

fn publish_remote(
    parts: &FanoutParts,
    key: &CursorKey,
    link: &RemoteLink,
    remote: &RemoteReport,
    counts: CursorCounts,
) {
    let now_ms = parts.clock.unix_ms();
    for state in cursor_states() {
        let mut labels = partition_labels(key).to_vec();
        labels.push(("state", state.as_str().to_owned()));
        let on = remote.state == state.as_str();
        parts.metrics.set(
            metrics::FANOUT_REMOTE_STATE,
            &labels,
            f64::from(u8::from(on)),
        );
    }
    let lag_ms = remote
        .oldest_pending_ms
        .map_or(0, |oldest| now_ms.saturating_sub(oldest));
    parts.metrics.set(
        metrics::FANOUT_REMOTE_LAG_SECONDS,
        &partition_labels(key),
        lag_ms as f64 / 1_000.0,
    );
    if let Some(at_ms) = remote.last_success_at_ms {
        parts.metrics.set(
            metrics::FANOUT_REMOTE_LAST_SUCCESS_TIMESTAMP_SECONDS,
            &labels(key),
            at_ms as f64 / 1_000.0,
        );
    }
    parts.metrics.count(
        metrics::FANOUT_REMOTE_SKIPPED_RECORDS_TOTAL,
        &labels(key),
        counts.skipped,
    );
    parts.metrics.count(
        metrics::FANOUT_REMOTE_REREADS_TOTAL,
        &labels(key),
        counts.released,
    );
    parts.metrics.set(
        metrics::REMOTE_HELD_BYTES,
        &[("remote", link.remote.clone())],
        parts.remote_plane.held_bytes(&link.remote) as f64,
    );
    publish_headroom(parts, key, now_ms);
}

/// The link's retention headroom over every cursor of it on this node
/// (the gauge is the link's, so each report sets it from all of them);
/// nothing for a parent kept forever. This cursor's report is in the
/// status already.
fn publish_headroom(parts: &FanoutParts, key: &CursorKey, now_ms: u64) {
    let Some(retention_ms) = parts
        .replica
        .topic_meta(&key.parent)
        .map(|parent| parent.retention_ms)
    else {
        return;
    };
    let oldest_pending_ms = parts.status.oldest_pending_ms(&key.parent, &key.child);
    if let Some(headroom_ms) = retention_headroom_ms(oldest_pending_ms, retention_ms, now_ms) {
        parts.metrics.set(
            metrics::FANOUT_REMOTE_RETENTION_HEADROOM_SECONDS,
            &labels(key),
            headroom_ms as f64 / 1_000.0,
        );
    }
}

fn observe_slab(parts: &FanoutParts, entries: &[SlabEntry]) {
    let (records, bytes) = entries
        .iter()
        .filter_map(|entry| match entry {
            SlabEntry::Record(record) => Some(record.key.len() + record.payload.len()),
            SlabEntry::Lost(_) => None,
        })
        .fold((0usize, 0usize), |(n, b), size| (n + 1, b + size));
    if records > 0 {
        parts
            .metrics
            .observe_value(metrics::FANOUT_BATCH_RECORDS, &[], records as f64);
        parts
            .metrics
            .observe_value(metrics::FANOUT_BATCH_BYTES, &[], bytes as f64);
    }
}

/// A stopped cursor's gauges read 0 (the exporter keeps a series once
/// made).
fn clear_gauges(parts: &FanoutParts, key: &CursorKey) {
    parts
        .metrics
        .set(metrics::FANOUT_LAG_MESSAGES, &partition_labels(key), 0.0);
    parts
        .metrics
        .set(metrics::FANOUT_DUE_LAG_SECONDS, &partition_labels(key), 0.0);
}
