//! The move runner of one data node: it starts a worker for every move the
//! replica shows headed here, ends freezes whose move ended, and removes
//! the copies of partitions that moved away once the control plane's
//! leader confirms this node no longer holds them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use narad_clock::{Clock, millis};
use narad_disk::BackendKind;
use parking_lot::Mutex;
use tokio::task::JoinHandle;

use super::files;
use super::service::LinkFactory;
use super::status::{MovePhase, MoveReports, MoveWorkerStatus};
use super::worker::{Ending, Worker, WorkerContext, leader_releases};
use crate::commit::Combiners;
use crate::consume::service::ConsumeService;
use crate::dispatch::PartitionHolder;
use crate::metrics::{self, NodeMetrics};
use crate::partitions::freeze::remove_fence;
use crate::partitions::{partition_dir, topics_dir};
use crate::topology::{Destination, member_id};
use narad_protocol::transfer::{ListPartitionSegments, PartitionRef};

/// While moves or freezes are in flight the runner looks again this often
/// (the spec's 1 s runner tick).
pub const RUNNER_TICK: Duration = Duration::from_secs(1);

/// With nothing in flight it wakes on metadata changes only, and this
/// often for the stale-copy sweep (the spec sweeps every 30th tick).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Running {
    status: Arc<Mutex<MoveWorkerStatus>>,
    handle: JoinHandle<Ending>,
    /// When the worker started, on the node's monotonic clock.
    started_ms: u64,
}

/// The runner: one per data node.
#[derive(Debug)]
pub struct MoveRunner {
    context: WorkerContext,
    links: Arc<dyn LinkFactory>,
    combiners: Arc<Combiners>,
    consume: Arc<ConsumeService>,
    metrics: Arc<NodeMetrics>,
    workers: Mutex<HashMap<Destination, Running>>,
    /// When the last sweep ran, on the node's monotonic clock.
    last_sweep_ms: Mutex<Option<u64>>,
    /// An earlier sweep, to ask again a new owner that could not vouch for
    /// a copy handed to it ([`VOUCH_RETRY`]).
    sweep_soon_ms: Mutex<Option<u64>>,
    completed: AtomicU64,
}

impl MoveRunner {
    /// A runner over this node's state, reaching sources through `links`.
    pub fn new(
        context: WorkerContext,
        links: Arc<dyn LinkFactory>,
        combiners: Arc<Combiners>,
        consume: Arc<ConsumeService>,
        metrics: Arc<NodeMetrics>,
    ) -> Arc<Self> {
        // Served from the start, at zero, so `increase()` sees the first
        // move.
        metrics.count(
            metrics::MOVES_TOTAL,
            &[("outcome", "completed".to_owned())],
            0,
        );
        metrics.count(metrics::MOVES_BYTES_TOTAL, &[], 0);
        metrics.register_histogram(metrics::MOVES_DURATION_SECONDS, &[]);
        Arc::new(Self {
            context,
            links,
            combiners,
            consume,
            metrics,
            workers: Mutex::new(HashMap::new()),
            last_sweep_ms: Mutex::new(None),
            sweep_soon_ms: Mutex::new(None),
            completed: AtomicU64::new(0),
        })
    }

    /// Ticks for the runtime's lifetime: every [`RUNNER_TICK`] while
    /// something is in flight, else on metadata changes and every
    /// [`SWEEP_INTERVAL`].
    pub fn spawn(self: &Arc<Self>) -> JoinHandle<()> {
        let runner = Arc::clone(self);
        tokio::spawn(async move {
            let mut changes = runner.context.replica.watch_changes();
            loop {
                runner.tick().await;
                let busy = !runner.workers.lock().is_empty()
                    || !runner.combiners.freezes().all().is_empty();
                let wait = if busy { RUNNER_TICK } else { SWEEP_INTERVAL };
                let mut wake_ms = runner.clock().now_ms().saturating_add(millis(wait));
                if let Some(soon_ms) = *runner.sweep_soon_ms.lock() {
                    wake_ms = wake_ms.min(soon_ms);
                }
                tokio::select! {
                    () = runner.clock().sleep_until(wake_ms) => {}
                    changed = changes.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
        })
    }

    /// The node's clock, which the runner's cadences and stamps read.
    fn clock(&self) -> &Arc<dyn Clock> {
        self.context.logs.clock()
    }

    /// One pass.
    pub async fn tick(&self) {
        self.start_workers();
        self.reap_workers().await;
        self.end_freezes();
        self.retire_moved_away().await;
        let now_ms = self.clock().now_ms();
        let due = self
            .last_sweep_ms
            .lock()
            .is_none_or(|at_ms| now_ms.saturating_sub(at_ms) >= millis(SWEEP_INTERVAL))
            || self
                .sweep_soon_ms
                .lock()
                .is_some_and(|at_ms| at_ms <= now_ms);
        if due {
            *self.last_sweep_ms.lock() = Some(now_ms);
            *self.sweep_soon_ms.lock() = None;
            self.sweep_stale_copies().await;
        }
        self.publish_gauges();
    }

    /// The status of every running worker, in partition order.
    pub fn report(&self) -> Vec<MoveWorkerStatus> {
        let workers = self.workers.lock();
        let mut statuses: Vec<MoveWorkerStatus> = workers
            .values()
            .map(|running| running.status.lock().clone())
            .collect();
        statuses.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        statuses
    }

    /// Stops every running worker where it stands (as a crash would; the
    /// next runner resumes from what is on disk). The runner's own task is
    /// its spawner's to stop.
    pub fn stop_workers(&self) {
        for (_, running) in self.workers.lock().drain() {
            running.handle.abort();
        }
    }

    /// Moves this runner completed since start.
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }

    fn me(&self) -> String {
        member_id(self.context.replica.local_node())
    }

    fn start_workers(&self) {
        let view = self.context.replica.view();
        let me = self.me();
        let mut workers = self.workers.lock();
        for (topic, partition, assignment) in view.metastore.moves() {
            if assignment.target.as_deref() != Some(me.as_str()) {
                continue;
            }
            let destination = Destination::new(topic, partition);
            if workers.contains_key(&destination) {
                continue;
            }
            let Some(meta) = view.topics.get(topic) else {
                continue;
            };
            let Some(link) = self.links.link(&assignment.owner) else {
                tracing::debug!(%destination, source = assignment.owner, "move source not addressable yet");
                continue;
            };
            let status = Arc::new(Mutex::new(MoveWorkerStatus {
                topic: topic.to_owned(),
                partition,
                source: assignment.owner.clone(),
                target: me.clone(),
                started_at_ms: self.clock().unix_ms(),
                phase: MovePhase::Copying.name().to_owned(),
                attempts: 0,
                last_error: None,
                copied_bytes: 0,
                blocked: None,
            }));
            let worker = Worker::new(
                self.context.clone(),
                link,
                destination.clone(),
                meta.incarnation_id.clone(),
                assignment.owner.clone(),
                Arc::clone(&status),
            );
            tracing::info!(%destination, source = assignment.owner, "move worker started");
            let handle = tokio::spawn(worker.run());
            workers.insert(
                destination,
                Running {
                    status,
                    handle,
                    started_ms: self.clock().now_ms(),
                },
            );
        }
    }

    async fn reap_workers(&self) {
        let finished: Vec<(Destination, Running)> = {
            let mut workers = self.workers.lock();
            let done: Vec<Destination> = workers
                .iter()
                .filter(|(_, running)| running.handle.is_finished())
                .map(|(destination, _)| destination.clone())
                .collect();
            done.into_iter()
                .filter_map(|destination| {
                    workers
                        .remove(&destination)
                        .map(|running| (destination, running))
                })
                .collect()
        };
        for (destination, running) in finished {
            let copied = running.status.lock().copied_bytes;
            match running.handle.await {
                Ok(Ending::Completed) => {
                    self.completed.fetch_add(1, Ordering::Relaxed);
                    let outcome = [("outcome", "completed".to_owned())];
                    self.metrics.count(metrics::MOVES_TOTAL, &outcome, 1);
                    self.metrics.observe(
                        metrics::MOVES_DURATION_SECONDS,
                        &[],
                        Duration::from_millis(
                            self.clock().now_ms().saturating_sub(running.started_ms),
                        ),
                    );
                    self.metrics.count(metrics::MOVES_BYTES_TOTAL, &[], copied);
                }
                Ok(Ending::Abandoned) => {
                    tracing::info!(%destination, "move worker ended: the move was cleared");
                }
                Err(error) => tracing::error!(%destination, %error, "move worker failed"),
            }
        }
    }

    /// Ends the freezes whose move is over, judged only by a replica that
    /// has applied at least what it had when the freeze began, and forgets
    /// lapsed ones.
    fn end_freezes(&self) {
        let freezes = self.combiners.freezes();
        freezes.forget_lapsed(self.clock().now_ms());
        let view = self.context.replica.view();
        let me = self.me();
        for (destination, freeze) in freezes.all() {
            if view.applied_index < freeze.since_index {
                continue;
            }
            let assignment = view
                .metastore
                .assignment(&destination.topic, destination.partition);
            let still_moving = assignment.is_some_and(|a| {
                a.owner == me && a.target.as_deref() == Some(freeze.target.as_str())
            });
            // Moved away: the freeze and its fence stay until the copy is
            // retired; the fence is what says the copy was handed off whole.
            let moved_away = assignment.is_some_and(|a| a.owner != me);
            if still_moving || moved_away {
                continue;
            }
            freezes.end(&destination);
            let dir = partition_dir(
                self.context.logs.data_dir(),
                &destination.topic,
                destination.partition,
            );
            if let Err(error) = remove_fence(&**self.context.logs.disk(), &dir) {
                tracing::warn!(%destination, %error, "removing a handoff fence failed");
            }
            tracing::info!(%destination, "handoff freeze ended: the move is over");
        }
    }

    /// Closes the logs of partitions whose move away committed, and
    /// removes their directories.
    async fn retire_moved_away(&self) {
        if !self.context.replica.is_caught_up() {
            return;
        }
        let view = self.context.replica.view();
        let me = self.me();
        let moved: Vec<(Destination, Option<Arc<str>>)> = self
            .context
            .logs
            .open_destinations()
            .into_iter()
            .filter(|(destination, incarnation)| {
                let live = view
                    .topics
                    .get(&*destination.topic)
                    .is_some_and(|meta| meta.incarnation_id == *incarnation);
                let assignment = view
                    .metastore
                    .assignment(&destination.topic, destination.partition);
                live && assignment
                    .is_some_and(|a| a.owner != me && a.target.as_deref() != Some(me.as_str()))
            })
            .collect();
        if moved.is_empty() {
            return;
        }
        let mut released = Vec::new();
        for (destination, incarnation) in moved {
            if self
                .leader_releases(&destination, incarnation.clone())
                .await
            {
                released.push((destination, incarnation));
            }
        }
        if released.is_empty() {
            return;
        }
        self.consume.retire_moved();
        for (destination, incarnation) in released {
            self.context.logs.close_partition(&destination);
            self.combiners.freezes().end(&destination);
            let dir = partition_dir(
                self.context.logs.data_dir(),
                &destination.topic,
                destination.partition,
            );
            self.reclaim_copy(&destination, incarnation.as_ref(), dir)
                .await;
        }
    }

    /// Every [`SWEEP_INTERVAL`]: partition directories of live topics that
    /// this node neither owns nor is receiving (a copy left by a move that
    /// was abandoned, or by a crash after a move away).
    async fn sweep_stale_copies(&self) {
        if !self.context.replica.is_caught_up() {
            return;
        }
        let view = self.context.replica.view();
        let me = self.me();
        let running: Vec<Destination> = self.workers.lock().keys().cloned().collect();
        let open: Vec<Destination> = self
            .context
            .logs
            .open_destinations()
            .into_iter()
            .map(|(destination, _)| destination)
            .collect();
        let logs = Arc::clone(&self.context.logs);
        let topics = topics_dir(logs.data_dir());
        let mut stale: Vec<(Destination, Option<Arc<str>>)> = Vec::new();
        for (name, meta) in &view.topics {
            let Ok(partitions) = list_partition_dirs(&**logs.disk(), &topics.join(&**name)) else {
                continue;
            };
            for partition in partitions {
                let destination = Destination {
                    topic: Arc::clone(name),
                    partition,
                };
                let Some(assignment) = view.metastore.assignment(name, partition) else {
                    continue;
                };
                let ours =
                    assignment.owner == me || assignment.target.as_deref() == Some(me.as_str());
                if ours || running.contains(&destination) || open.contains(&destination) {
                    continue;
                }
                if !marker_matches_live(&logs, name, meta.incarnation_id.as_deref()) {
                    continue;
                }
                stale.push((destination, meta.incarnation_id.clone()));
            }
        }
        for (destination, incarnation) in stale {
            let dir = partition_dir(logs.data_dir(), &destination.topic, destination.partition);
            let marker = files::read_marker(&**logs.disk(), &dir).ok().flatten();
            let Some(marker) = marker else {
                self.reclaim_if_released(&destination, incarnation, dir)
                    .await;
                continue;
            };
            if marker.applied_index > view.applied_index {
                continue;
            }
            // A copy installed here for a flip: a proposal of this node's
            // may still commit for a while (see `settle`).
            let unsettled = self.context.flips.unsettled_for(&destination);
            if !unsettled.is_zero() {
                let at_ms = self.clock().now_ms().saturating_add(millis(unsettled));
                let mut soon = self.sweep_soon_ms.lock();
                *soon = Some(soon.map_or(at_ms, |soon_ms| soon_ms.min(at_ms)));
                continue;
            }
            self.reclaim_if_released(&destination, incarnation, dir)
                .await;
        }
        self.drop_move_files_of_owned(&view, &me, &running);
        self.sweep_staging(&view, &me, &running).await;
    }

    /// Reclaims the copy at `dir` ([`Self::reclaim_copy`]) once the leader
    /// confirms this node neither owns nor receives it.
    async fn reclaim_if_released(
        &self,
        destination: &Destination,
        incarnation: Option<Arc<str>>,
        dir: std::path::PathBuf,
    ) {
        if self.leader_releases(destination, incarnation.clone()).await {
            self.reclaim_copy(destination, incarnation.as_ref(), dir)
                .await;
        }
    }

    /// Removes staged copies (`<data>/.moves/<topic>-<N>`) of moves that no
    /// longer target this node and have no worker here: a move abandoned
    /// while this node was down, or whose worker failed to remove its copy.
    /// A staged copy never served, so no leader needs to confirm; but one
    /// whose marker is newer than the replica is kept (its move may not be
    /// applied here yet). Runs only on a caught-up replica (the caller
    /// checks).
    async fn sweep_staging(
        &self,
        view: &crate::metadata::MetadataView,
        me: &str,
        running: &[Destination],
    ) {
        let logs = Arc::clone(&self.context.logs);
        let root = files::staging_root(logs.data_dir());
        let names = match logs.disk().list_dir(&root) {
            Ok(names) => names,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return,
            Err(error) => {
                tracing::warn!(%error, "listing staged move copies failed");
                return;
            }
        };
        let mut stale = Vec::new();
        for name in names {
            let Some((topic, partition)) = files::parse_staging_name(&name) else {
                tracing::warn!(
                    name,
                    "an entry of the move staging directory that no move made; left alone"
                );
                continue;
            };
            let destination = Destination::new(topic, partition);
            let headed_here = view
                .metastore
                .assignment(topic, partition)
                .is_some_and(|a| a.target.as_deref() == Some(me));
            if headed_here || running.contains(&destination) {
                continue;
            }
            let staged = root.join(&name);
            let marker = files::read_marker(&**logs.disk(), &staged).ok().flatten();
            if marker.is_some_and(|marker| marker.applied_index > view.applied_index) {
                continue;
            }
            stale.push((destination, staged));
        }
        for (destination, staged) in stale {
            let logs = Arc::clone(&logs);
            let removed =
                tokio::task::spawn_blocking(move || files::remove_staging(&**logs.disk(), &staged))
                    .await;
            match removed {
                Ok(Ok(())) => {
                    tracing::info!(%destination, "staged copy of a move that ended removed")
                }
                Ok(Err(error)) => {
                    tracing::warn!(%destination, %error, "removing a stale staged copy failed; the sweep retries")
                }
                Err(error) => {
                    tracing::warn!(%destination, %error, "removing a stale staged copy failed")
                }
            }
        }
    }

    /// A crash between a flip and the removal of `move.marker` and
    /// `move.incoming` leaves them in a partition this node now owns; they
    /// go, so a later move away judges the directory as one that served
    /// here (`files::left_copy`).
    fn drop_move_files_of_owned(
        &self,
        view: &crate::metadata::MetadataView,
        me: &str,
        running: &[Destination],
    ) {
        let logs = &self.context.logs;
        for (destination, _) in logs.open_destinations() {
            if running.contains(&destination) {
                continue;
            }
            let owned_still = view
                .metastore
                .assignment(&destination.topic, destination.partition)
                .is_some_and(|a| a.owner == me && a.target.is_none());
            if !owned_still {
                continue;
            }
            let dir = partition_dir(logs.data_dir(), &destination.topic, destination.partition);
            match files::has_move_files(&**logs.disk(), &dir) {
                Ok(false) => {}
                Ok(true) => {
                    if let Err(error) = files::remove_move_files(&**logs.disk(), &dir) {
                        tracing::warn!(%destination, %error, "removing a finished move's files failed");
                    }
                }
                Err(error) => {
                    tracing::warn!(%destination, %error, "looking for a finished move's files failed")
                }
            }
        }
    }

    /// Whether the control plane's leader confirmed that this node neither
    /// owns nor receives `destination` of `incarnation` (see
    /// [`leader_releases`]). No answer keeps the copy; the next pass asks
    /// again.
    async fn leader_releases(
        &self,
        destination: &Destination,
        incarnation: Option<Arc<str>>,
    ) -> bool {
        let Some(incarnation) = incarnation else {
            return false;
        };
        let holder = PartitionHolder {
            topic: Arc::clone(&destination.topic),
            incarnation,
            partition: destination.partition,
            member: self.me(),
        };
        leader_releases(Arc::clone(&self.context.leader), holder).await
    }

    /// Removes a copy the leader released, or quarantines it when it may
    /// hold records its new owner lacks ([`files::left_copy`]). A copy
    /// this node handed off (it holds a fence and records) goes only once
    /// the new owner vouches for it: its log must reach this copy's high
    /// watermark. An owner that reports less gets the copy quarantined; one
    /// that cannot be asked leaves it for the next sweep.
    async fn reclaim_copy(
        &self,
        destination: &Destination,
        incarnation: Option<&Arc<str>>,
        dir: std::path::PathBuf,
    ) {
        let logs = Arc::clone(&self.context.logs);
        let inspected = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || inspect_left_copy(&logs, &dir)).await
        };
        let (left, handed_off) = match inspected {
            Ok(Ok(inspected)) => inspected,
            Ok(Err(error)) => {
                tracing::warn!(%destination, %error, "reading a moved-away copy failed; the sweep retries");
                return;
            }
            Err(error) => {
                tracing::warn!(%destination, %error, "reading a moved-away copy failed");
                return;
            }
        };
        let mut quarantine = left == files::LeftCopy::Quarantine;
        if let Some(ours) = handed_off {
            match self.new_owner_vouches(destination, incarnation, ours).await {
                Vouch::Holds => {}
                Vouch::Lacks { theirs } => {
                    tracing::warn!(%destination, ours, theirs,
                        "the new owner's log is behind the copy handed to it; quarantining this node's copy");
                    quarantine = true;
                }
                Vouch::Unknown(reason) => {
                    tracing::info!(%destination, reason,
                        "the new owner could not vouch for the copy handed to it yet; kept, asked again soon");
                    let at_ms = self.clock().now_ms().saturating_add(millis(VOUCH_RETRY));
                    self.sweep_soon_ms.lock().get_or_insert(at_ms);
                    return;
                }
            }
        }
        let logs = Arc::clone(&self.context.logs);
        let removed = tokio::task::spawn_blocking(move || {
            let disk = &**logs.disk();
            if quarantine {
                let now_ms = logs.clock().unix_ms();
                return files::quarantine(disk, &dir, now_ms).map(Some);
            }
            files::clear_dir(disk, &dir, &[])?;
            if disk.kind() != BackendKind::Simulated {
                std::fs::remove_dir(&dir)?;
            }
            Ok::<_, std::io::Error>(None)
        })
        .await;
        match removed {
            Ok(Ok(Some(quarantined))) => {
                tracing::warn!(%destination, path = %quarantined.display(),
                    "a copy that moved away was quarantined: it may hold records its new owner lacks");
            }
            Ok(Ok(None)) => {
                tracing::info!(%destination, "copy of a partition that moved away removed")
            }
            Ok(Err(error)) => {
                tracing::warn!(%destination, %error, "removing a moved-away copy failed; the sweep retries")
            }
            Err(error) => tracing::warn!(%destination, %error, "removing a moved-away copy failed"),
        }
    }

    /// Asks the partition's owner for its listing: it vouches for a copy
    /// handed to it when its high watermark reaches `ours`.
    async fn new_owner_vouches(
        &self,
        destination: &Destination,
        incarnation: Option<&Arc<str>>,
        ours: u64,
    ) -> Vouch {
        let view = self.context.replica.view();
        let Some(assignment) = view
            .metastore
            .assignment(&destination.topic, destination.partition)
        else {
            return Vouch::Unknown("the partition has no assignment".into());
        };
        let Some(link) = self.links.link(&assignment.owner) else {
            return Vouch::Unknown(format!("no link to {}", assignment.owner));
        };
        let request = ListPartitionSegments {
            partition: PartitionRef {
                topic: destination.topic.to_string(),
                partition: destination.partition,
                incarnation: incarnation.map_or_else(String::new, |id| id.to_string()),
            },
        };
        match tokio::time::timeout(VOUCH_TIMEOUT, link.list(request)).await {
            Ok(Ok(listing)) if listing.high_watermark >= ours => Vouch::Holds,
            Ok(Ok(listing)) => Vouch::Lacks {
                theirs: listing.high_watermark,
            },
            Ok(Err(error)) => Vouch::Unknown(error.to_string()),
            Err(_) => Vouch::Unknown(format!("no answer within {VOUCH_TIMEOUT:?}")),
        }
    }

    fn publish_gauges(&self) {
        let statuses = self.report();
        self.metrics
            .set(metrics::MOVES_INFLIGHT, &[], statuses.len() as f64);
        for reason in [
            super::decide::BLOCKED_COPY_UNVERIFIABLE,
            super::decide::BLOCKED_SOURCE_DEAD_COPY_BEHIND,
        ] {
            let count = statuses
                .iter()
                .filter(|status| status.blocked.as_deref() == Some(reason))
                .count();
            self.metrics.set(
                metrics::MOVES_BLOCKED,
                &[("reason", reason.to_owned())],
                count as f64,
            );
        }
    }
}

impl MoveReports for MoveRunner {
    fn moves(&self) -> Vec<MoveWorkerStatus> {
        self.report()
    }
}

/// Partition indexes of the `p<5 digits>` directories in `topic_dir`.
/// How long the new owner has to answer whether it holds a handed-off
/// copy's records.
const VOUCH_TIMEOUT: Duration = Duration::from_secs(5);

/// When the new owner could not vouch for a copy (unreachable, or its
/// replica has not applied the flip yet), the sweep asks again this soon
/// instead of a whole [`SWEEP_INTERVAL`] later.
const VOUCH_RETRY: Duration = Duration::from_secs(5);

/// What a partition's new owner says of the copy this node handed it.
#[derive(Debug)]
enum Vouch {
    /// Its log reaches the copy's high watermark.
    Holds,
    /// Its log ends below it.
    Lacks { theirs: u64 },
    /// It could not be asked, or did not answer.
    Unknown(String),
}

/// What becomes of a copy that moved away ([`files::left_copy`]), and its
/// high watermark when it was handed off whole (a fence, and records): the
/// new owner must vouch for that much before it goes.
fn inspect_left_copy(
    logs: &crate::partitions::LocalLogs,
    dir: &Path,
) -> std::io::Result<(files::LeftCopy, Option<u64>)> {
    let disk = &**logs.disk();
    let left = files::left_copy(disk, dir)?;
    let fenced = disk.exists(&dir.join(crate::partitions::freeze::FENCE_FILE_NAME))?;
    if left == files::LeftCopy::Quarantine || !fenced || !files::holds_records(disk, dir)? {
        return Ok((left, None));
    }
    let high_watermark = super::worker::verify_copy(logs, dir)?;
    Ok((left, (high_watermark > 0).then_some(high_watermark)))
}

fn list_partition_dirs(disk: &dyn narad_disk::Disk, topic_dir: &Path) -> std::io::Result<Vec<u32>> {
    if !disk.exists(topic_dir)? {
        return Ok(Vec::new());
    }
    Ok(disk
        .list_dir(topic_dir)?
        .iter()
        .filter_map(|name| {
            let digits = name.strip_prefix('p')?;
            (digits.len() == 5 && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| digits.parse().ok())
                .flatten()
        })
        .collect())
}

/// Whether the topic directory's incarnation marker names the live
/// incarnation (a directory of another one is the quarantine's business).
fn marker_matches_live(
    logs: &crate::partitions::LocalLogs,
    topic: &str,
    live: Option<&str>,
) -> bool {
    matches!(
        logs.directory_incarnation(topic),
        Ok(Some(marker)) if Some(marker.as_str()) == live
    )
}
