//! The target side of one move: copy the partition from its owner while
//! traffic flows, take the handoff, finish the copy to the frozen high
//! watermark, verify it, fence the source, write `move.marker`, install
//! the copy and propose the flip.
//!
//! The copy is staged in `<data>/.moves/<topic>-<N>`, outside every
//! directory this node serves or lists. Once it is whole, verified and
//! fenced, `move.marker` is written into it and it is renamed to the
//! partition directory (`LocalLogs::install_partition_dir`, under the
//! topic guard); only then is the flip proposed. A copy installed for a
//! flip that can no longer commit goes back to staging before it is
//! removed. Each step and why a crash at any point loses nothing is in
//! `docs/internals/moves.md`.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use narad_meta::MemberStatus;
use narad_meta::{Command, CompleteMove, IncarnationId};
use narad_plog::PartitionLog;
use narad_protocol::transfer::{
    CHUNK_BYTES_MAX, FenceHandoff, FetchSegmentChunk, FileExtent, HandoffFenced, HandoffPrepared,
    ListPartitionSegments, PartitionListing, PartitionRef, PrepareHandoff, ReleaseHandoff,
};
use parking_lot::Mutex;
use tokio::task::JoinHandle;

use super::decide::{
    AfterFailure, Attempts, BLOCKED_SOURCE_DEAD_COPY_BEHIND, CATCH_UP_PASSES_MAX, Failure,
    Promotion, catch_up_over, copy_reaches_source,
};
use super::files::{self, MoveMarker};
use super::settle::FlipClock;
use super::status::{MovePhase, MoveWorkerStatus};
use super::window::{Arrival, Chunk, CopyWindow};
use crate::admin::{Admin, AdminError};
use crate::consume::ahead::ConsumerPosition;
use crate::dispatch::{LeaderConfirm, PartitionHolder};
use crate::metadata::MetadataReplica;
use crate::partitions::LocalLogs;
use crate::topology::{Destination, member_id};

/// A future a [`SourceLink`] call returns.
pub type LinkFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LinkError>> + Send + 'a>>;

/// Why a call to the source failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The source answered with a refusal: its status and text.
    #[error("source refused ({status}): {message}")]
    Refused {
        /// The status.
        status: u16,
        /// The text.
        message: String,
    },
    /// No answer (unreachable, timeout, lost connection).
    #[error("source unreachable: {0}")]
    Unreachable(String),
}

impl LinkError {
    /// Whether the source said it does not own the partition (`421`).
    pub fn is_not_owner(&self) -> bool {
        matches!(self, Self::Refused { status: 421, .. })
    }
}

/// How a worker reaches its source: over the cluster transport in a
/// cluster, directly in tests.
pub trait SourceLink: Send + Sync + std::fmt::Debug {
    /// `ListPartitionSegments`.
    fn list(&self, request: ListPartitionSegments) -> LinkFuture<'_, PartitionListing>;
    /// `FetchSegmentChunk`: the bytes.
    fn fetch(&self, request: FetchSegmentChunk) -> LinkFuture<'_, bytes::Bytes>;
    /// `PrepareHandoff`.
    fn prepare(&self, request: PrepareHandoff) -> LinkFuture<'_, HandoffPrepared>;
    /// `FenceHandoff`.
    fn fence(&self, request: FenceHandoff) -> LinkFuture<'_, HandoffFenced>;
    /// `ReleaseHandoff`.
    fn release(&self, request: ReleaseHandoff) -> LinkFuture<'_, ()>;
}

/// Why one attempt of a move stopped.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// A call to the source failed.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// A disk error here.
    #[error("{what}: {error}")]
    Disk {
        /// What was being done.
        what: &'static str,
        /// The error.
        error: String,
    },
    /// The copy did not recover to the frozen high watermark.
    #[error("the copy recovers to high watermark {found}, not {expected}")]
    Unverifiable {
        /// The frozen high watermark.
        expected: u64,
        /// What the copy opened to.
        found: u64,
    },
    /// The flip could not be proposed now (no leader); tried again.
    #[error("flip not committed yet: {0}")]
    FlipPending(String),
    /// The move is no longer this node's to do.
    #[error("the move ended elsewhere")]
    Ended,
    /// The installed copy must be rolled back, but a flip proposed for it
    /// may still commit for this long.
    #[error("a flip proposed here may still commit for {0:?}; the copy stays until then")]
    FlipUnsettled(Duration),
}

/// Chunk fetches one file's copy keeps outstanding. One, beside the write
/// of the chunk before it (see `window.rs`): the source reads and sends
/// chunk n + 1 while this node writes chunk n. Measured on the 2-core VM
/// (`narad bench move --rate 100`, 2026-12-07, alternating builds), that
/// overlap copied at 277-402 MB/s against 255-318 with each chunk written
/// before the next fetch, and two in flight at 324-415 with more CPU per
/// GB and a higher produce p99 during the move; the cluster transport, not
/// the disks, bounds the copy (the bench measures it alone).
const FETCHES_IN_FLIGHT: usize = 1;

/// How far [`Worker::copy_range`] got, and how it ended.
struct Copied {
    /// The file holds every byte below this.
    at: u64,
    outcome: Result<(), MoveError>,
}

/// How a worker ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The flip committed: this node owns the partition.
    Completed,
    /// The move was cleared (aborted); the copy was removed.
    Abandoned,
}

/// Everything one worker needs.
#[derive(Debug, Clone)]
pub struct WorkerContext {
    /// This node's replica.
    pub replica: Arc<MetadataReplica>,
    /// This node's logs (the partition directory, the log configuration).
    pub logs: Arc<LocalLogs>,
    /// Proposes the flip.
    pub admin: Arc<dyn Admin>,
    /// Confirms that a copy is no longer needed before it is reclaimed.
    pub leader: Arc<dyn LeaderConfirm>,
    /// How long a dead source waits before its copy is force-promoted
    /// ([`FORCE_PROMOTE_AFTER`]; shorter in tests).
    pub force_promote_after: Duration,
    /// When an installed copy may be rolled back (shared with the runner's
    /// sweep).
    pub flips: Arc<FlipClock>,
}

/// What a worker keeps from one attempt to the next.
#[derive(Debug, Default)]
struct Progress {
    /// The staging directory was emptied for this worker's copy and `have`
    /// says what it holds; false until then, and again after a failure that
    /// leaves the copy in doubt.
    started: bool,
    /// Bytes below which each copied file is whole.
    have: BTreeMap<String, u64>,
    /// Files were created since the directory was last synced (their
    /// bytes need nothing more: each chunk is synced as it is written).
    dir_unsynced: bool,
    /// The source's last listing: its high watermark and consumer
    /// position (a force-promote's bar and starting position).
    last_listing: Option<(u64, HandoffFenced)>,
}

/// One move to this node.
#[derive(Debug)]
pub struct Worker {
    context: WorkerContext,
    link: Arc<dyn SourceLink>,
    destination: Destination,
    incarnation: Option<Arc<str>>,
    source: String,
    status: Arc<Mutex<MoveWorkerStatus>>,
}

impl Worker {
    /// A worker moving `destination` (incarnation `incarnation`) from
    /// `source` to this node through `link`, reporting into `status`.
    pub fn new(
        context: WorkerContext,
        link: Arc<dyn SourceLink>,
        destination: Destination,
        incarnation: Option<Arc<str>>,
        source: String,
        status: Arc<Mutex<MoveWorkerStatus>>,
    ) -> Self {
        Self {
            context,
            link,
            destination,
            incarnation,
            source,
            status,
        }
    }

    fn me(&self) -> String {
        member_id(self.context.replica.local_node())
    }

    fn partition_ref(&self) -> PartitionRef {
        PartitionRef {
            topic: self.destination.topic.to_string(),
            partition: self.destination.partition,
            incarnation: self.incarnation.as_deref().unwrap_or("").to_owned(),
        }
    }

    fn set_phase(&self, phase: MovePhase) {
        phase.name().clone_into(&mut self.status.lock().phase);
    }

    /// Whether the replica still shows this move: the same source as
    /// owner, this node as target, the same incarnation.
    fn still_mine(&self) -> bool {
        let view = self.context.replica.view();
        let same_topic = view
            .topics
            .get(&*self.destination.topic)
            .is_some_and(|meta| meta.incarnation_id == self.incarnation);
        let assignment = view
            .metastore
            .assignment(&self.destination.topic, self.destination.partition);
        same_topic
            && assignment.is_some_and(|a| {
                a.owner == self.source && a.target.as_deref() == Some(self.me().as_str())
            })
    }

    /// Whether this node owns the partition (of the same incarnation).
    fn owned_here(&self) -> bool {
        let view = self.context.replica.view();
        let same_topic = view
            .topics
            .get(&*self.destination.topic)
            .is_some_and(|meta| meta.incarnation_id == self.incarnation);
        same_topic
            && view
                .metastore
                .owner(&self.destination.topic, self.destination.partition)
                == Some(self.me().as_str())
    }

    /// Runs attempts until the move completes or ends elsewhere.
    pub async fn run(self) -> Ending {
        let mut attempts = Attempts::new(self.context.force_promote_after);
        let mut progress = Progress::default();
        let clock = Arc::clone(self.context.logs.clock());
        loop {
            if !self.still_mine() {
                return self.ended().await;
            }
            match self.attempt(&mut progress).await {
                Ok(()) => {
                    self.set_phase(MovePhase::Done);
                    return Ending::Completed;
                }
                Err(MoveError::Ended) => return self.ended().await,
                Err(error) => {
                    tracing::warn!(destination = %self.destination, source = self.source,
                        %error, "move attempt failed; trying again");
                    let AfterFailure {
                        keep_copy,
                        blocked,
                        consider_force_promote,
                    } = attempts.failed(failure_of(&error));
                    progress.started &= keep_copy;
                    {
                        let mut status = self.status.lock();
                        status.attempts += 1;
                        status.last_error = Some(error.to_string());
                        status.blocked = blocked.map(str::to_owned);
                    }
                    if consider_force_promote {
                        match self.force_promote(&mut attempts, &mut progress).await {
                            Ok(true) => {
                                self.set_phase(MovePhase::Done);
                                return Ending::Completed;
                            }
                            Ok(false) => {}
                            Err(MoveError::Ended) => return self.ended().await,
                            Err(error) => {
                                tracing::warn!(destination = %self.destination, %error,
                                    "force-promote failed; trying again");
                                self.status.lock().last_error = Some(error.to_string());
                            }
                        }
                    }
                    let at_ms = attempts.next_attempt_at(clock.now_ms());
                    clock.sleep_until(at_ms).await;
                }
            }
        }
    }

    /// Whether the replica shows the source marked dead.
    fn source_dead(&self) -> bool {
        self.context
            .replica
            .view()
            .metastore
            .member(&self.source)
            .is_some_and(|member| member.status == MemberStatus::Dead)
    }

    /// Spec §6 "Force-promote": once the source has been marked dead for
    /// [`WorkerContext::force_promote_after`], a copy that reached the
    /// source's last known high watermark becomes the partition without a
    /// handoff. The copy is synced and verified, takes the consumer
    /// position of the last listing (clamped to what it holds), gets a
    /// marker with token 0, and the flip is proposed as
    /// `ForcePromote`, which Raft applies only while the source is marked
    /// dead. What the source committed after its last listing stays in its
    /// own directory, which it quarantines when it comes back
    /// (`files::left_copy`). `Ok(false)`: not now.
    async fn force_promote(
        &self,
        attempts: &mut Attempts,
        progress: &mut Progress,
    ) -> Result<bool, MoveError> {
        let now_ms = self.context.logs.clock().now_ms();
        let dead_for = match attempts.promotion(self.source_dead(), now_ms) {
            Promotion::SourceAlive => return Ok(false),
            Promotion::Waiting => {
                self.set_phase(MovePhase::WaitingForSource);
                return Ok(false);
            }
            Promotion::Due { dead_for } => dead_for,
        };
        let dir = self.dir();
        if let Some(marker) = self.our_marker(&dir).await? {
            // Installed already: fenced by the source, or forced earlier.
            self.flip(&dir, &marker).await?;
            return Ok(true);
        }
        let staged = self.staging();
        if let Some(marker) = self.our_marker(&staged).await? {
            // Whole and marked, not installed yet.
            let dir = self.install(&staged).await?;
            self.flip(&dir, &marker).await?;
            return Ok(true);
        }
        let behind = |worker: &Self| {
            worker.status.lock().blocked = Some(BLOCKED_SOURCE_DEAD_COPY_BEHIND.into());
            Ok(false)
        };
        let listed = progress.last_listing.as_ref().map(|(listed, _)| *listed);
        // Without a listing, or a copy started here, no copy qualifies:
        // nothing to verify.
        let Some((last_high_watermark, position)) = progress
            .last_listing
            .clone()
            .filter(|_| copy_reaches_source(progress.started, listed, u64::MAX))
        else {
            return behind(self);
        };
        let found = {
            let logs = Arc::clone(&self.context.logs);
            let staged = staged.clone();
            let dir_unsynced = progress.dir_unsynced;
            blocking(move || {
                if dir_unsynced {
                    logs.disk().sync_dir(&staged)?;
                }
                verify_copy(&logs, &staged)
            })
            .await
            .map_err(disk("sync and open the copy to verify it"))?
        };
        progress.dir_unsynced = false;
        if !copy_reaches_source(progress.started, listed, found) {
            tracing::warn!(destination = %self.destination, source = self.source, found,
                last_high_watermark, "the source is dead and the copy is behind it; waiting");
            return behind(self);
        }
        let fenced = HandoffFenced {
            frontier: position.frontier.min(found),
            acked_ahead: position
                .acked_ahead
                .into_iter()
                .filter(|offset| *offset < found)
                .collect(),
        };
        // Token 0: a forced marker, which only `ForcePromote` may flip.
        let marker = self.seal_copy(&staged, &fenced, found, 0).await?;
        tracing::warn!(destination = %self.destination, source = self.source,
            high_watermark = found, dead_for_s = dead_for.as_secs(),
            "force-promoting the copy: its source is dead");
        let dir = self.install(&staged).await?;
        self.flip(&dir, &marker).await?;
        Ok(true)
    }

    /// The move is no longer in the replica: done if this node owns the
    /// partition, else the copy is removed: a staged one at once (it never
    /// served), an installed one only once the leader confirms this node
    /// neither owns nor receives the partition (so the flip cannot commit),
    /// by renaming it back to staging first. Unconfirmed, it stays for the
    /// runner's stale-copy sweep, which asks again.
    async fn ended(&self) -> Ending {
        if self.owned_here() {
            self.set_phase(MovePhase::Done);
            let dir = self.dir();
            let logs = Arc::clone(&self.context.logs);
            let _ = blocking(move || files::remove_move_files(&**logs.disk(), &dir)).await;
            return Ending::Completed;
        }
        let removed = self.remove_staged().await;
        let retracted = self.retract_installed().await;
        match removed.and(retracted) {
            Ok(()) => {
                tracing::info!(destination = %self.destination, "move abandoned; the copy was removed")
            }
            Err(error) => {
                tracing::warn!(destination = %self.destination, %error, "move abandoned; removing the copy failed (the runner's sweep retries)")
            }
        }
        self.set_phase(MovePhase::Abandoned);
        Ending::Abandoned
    }

    /// Removes the staged copy, if any.
    async fn remove_staged(&self) -> Result<(), MoveError> {
        let logs = Arc::clone(&self.context.logs);
        let staged = self.staging();
        blocking(move || files::remove_staging(&**logs.disk(), &staged))
            .await
            .map_err(disk("remove the staged copy"))
    }

    /// An installed copy of a move that no longer goes here: back to
    /// staging and removed, once its last flip proposal has settled and
    /// then the leader confirms.
    async fn retract_installed(&self) -> Result<(), MoveError> {
        let dir = self.dir();
        let installed = {
            let logs = Arc::clone(&self.context.logs);
            let dir = dir.clone();
            blocking(move || files::has_move_files(&**logs.disk(), &dir))
                .await
                .map_err(disk("look for an installed copy"))?
        };
        if !installed {
            return Ok(());
        }
        let Some(incarnation) = self.incarnation.clone() else {
            return Ok(());
        };
        let holder = PartitionHolder {
            topic: Arc::clone(&self.destination.topic),
            incarnation,
            partition: self.destination.partition,
            member: self.me(),
        };
        loop {
            let left = self.context.flips.unsettled_for(&self.destination);
            if !left.is_zero() {
                tracing::info!(destination = %self.destination, left_ms = left.as_millis() as u64,
                    "an installed copy waits for its last flip proposal to settle");
                tokio::time::sleep(left).await;
            }
            if !leader_releases(Arc::clone(&self.context.leader), holder.clone()).await {
                tracing::info!(destination = %self.destination,
                    "an installed copy stays until the leader confirms its flip cannot commit");
                return Ok(());
            }
            match self.roll_back().await {
                Err(MoveError::FlipUnsettled(_)) => {}
                rolled => return rolled,
            }
        }
    }

    /// Renames the installed copy back to staging (after removing whatever
    /// was staged) and removes it there: a crash part way leaves a staged
    /// copy, never part of one at the partition's path. Refused while a
    /// flip this node proposed may still commit ([`FlipClock`]).
    async fn roll_back(&self) -> Result<(), MoveError> {
        let unsettled = self.context.flips.unsettled_for(&self.destination);
        if !unsettled.is_zero() {
            return Err(MoveError::FlipUnsettled(unsettled));
        }
        let logs = Arc::clone(&self.context.logs);
        let (destination, staged) = (self.destination.clone(), self.staging());
        blocking(move || {
            files::remove_staging(&**logs.disk(), &staged)?;
            logs.retract_partition_dir(&destination, &staged)
                .map_err(std::io::Error::other)?;
            files::remove_staging(&**logs.disk(), &staged)
        })
        .await
        .map_err(disk("roll an installed copy back to staging and remove it"))
    }

    /// The partition directory, where an installed copy lives.
    fn dir(&self) -> PathBuf {
        crate::partitions::partition_dir(
            self.context.logs.data_dir(),
            &self.destination.topic,
            self.destination.partition,
        )
    }

    /// The staging directory, where the copy is made.
    fn staging(&self) -> PathBuf {
        files::staging_dir(
            self.context.logs.data_dir(),
            &self.destination.topic,
            self.destination.partition,
        )
    }

    /// Installs the staged copy (see `LocalLogs::install_partition_dir`);
    /// returns the partition directory.
    async fn install(&self, staged: &std::path::Path) -> Result<PathBuf, MoveError> {
        let logs = Arc::clone(&self.context.logs);
        let destination = self.destination.clone();
        let incarnation = self.incarnation.clone();
        let staged = staged.to_path_buf();
        let dir = blocking(move || {
            let now_ms = logs.clock().unix_ms();
            logs.install_partition_dir(&destination, incarnation.as_ref(), &staged, |disk, dir| {
                files::vacate_partition_dir(disk, dir, now_ms)
            })
            .map_err(std::io::Error::other)
        })
        .await
        .map_err(disk("install the copy"))?;
        tracing::info!(destination = %self.destination, "partition copy installed");
        Ok(dir)
    }

    /// One attempt, from wherever the copy stands: installed (resume from
    /// its marker), staged and marked (resume, then install), or neither
    /// (copy into staging).
    async fn attempt(&self, progress: &mut Progress) -> Result<(), MoveError> {
        let dir = self.dir();
        if let Some(marker) = self.our_marker(&dir).await? {
            return self.resume_from_marker(&dir, marker, true).await;
        }
        let staged = self.staging();
        if let Some(marker) = self.our_marker(&staged).await? {
            return self.resume_from_marker(&staged, marker, false).await;
        }
        if !progress.started {
            let logs = Arc::clone(&self.context.logs);
            let staged = staged.clone();
            blocking(move || files::reset_staging(&**logs.disk(), &staged))
                .await
                .map_err(disk("clear the staging directory"))?;
            self.status.lock().copied_bytes = 0;
            *progress = Progress {
                started: true,
                ..Progress::default()
            };
        }
        self.catch_up(&staged, progress).await?;
        if !self.still_mine() {
            return Err(MoveError::Ended);
        }
        self.set_phase(MovePhase::Frozen);
        let prepared = self
            .link
            .prepare(PrepareHandoff {
                partition: self.partition_ref(),
                target: self.me(),
            })
            .await?;
        progress.last_listing = Some((
            prepared.high_watermark,
            progress
                .last_listing
                .take()
                .map_or_else(HandoffFenced::default, |(_, position)| position),
        ));
        let finished = self.finish_copy(&staged, progress, &prepared).await;
        let marker = match finished {
            Ok(marker) => marker,
            Err(error) => {
                let _ = self
                    .link
                    .release(ReleaseHandoff {
                        partition: self.partition_ref(),
                        token: prepared.token,
                    })
                    .await;
                return Err(error);
            }
        };
        let dir = self.install(&staged).await?;
        self.flip(&dir, &marker).await
    }

    /// The `move.marker` in `dir`, if there is one and it is this move's.
    async fn our_marker(&self, dir: &std::path::Path) -> Result<Option<MoveMarker>, MoveError> {
        let logs = Arc::clone(&self.context.logs);
        let dir = dir.to_path_buf();
        let marker = blocking(move || files::read_marker(&**logs.disk(), &dir))
            .await
            .map_err(disk("read the move marker"))?;
        Ok(marker.filter(|m| self.marker_is_ours(m)))
    }

    fn marker_is_ours(&self, marker: &MoveMarker) -> bool {
        marker.source == self.source
            && marker.incarnation == self.incarnation.as_deref().unwrap_or("")
    }

    /// A marker from before a restart: the copy was whole and fenced,
    /// `installed` at the partition directory or still staged in `dir`.
    /// The fence is presented again (the source still holds it only if
    /// nothing changed since; its answer refreshes the consumer position),
    /// a staged copy is installed, then the flip is proposed. A refused
    /// fence means the marker is stale: the copy is removed (an installed
    /// one through staging).
    async fn resume_from_marker(
        &self,
        dir: &std::path::Path,
        marker: MoveMarker,
        installed: bool,
    ) -> Result<(), MoveError> {
        self.set_phase(MovePhase::FlipPending);
        let fenced = self
            .link
            .fence(FenceHandoff {
                partition: self.partition_ref(),
                token: marker.token,
                high_watermark: marker.high_watermark,
            })
            .await;
        match fenced {
            Ok(position) => {
                self.write_position(dir, &position).await?;
                self.install_and_flip(dir, installed, &marker).await
            }
            // The flip committed already (the source no longer owns it):
            // the proposal below finds it applied. Only an installed copy
            // can have flipped; a staged one waits for the move to change.
            Err(error) if error.is_not_owner() && installed => self.flip(dir, &marker).await,
            Err(LinkError::Refused {
                status: 409,
                message,
            }) => {
                tracing::info!(destination = %self.destination, message,
                    "the copy's fence no longer holds at the source; copying again");
                if installed {
                    self.roll_back().await?;
                } else {
                    self.remove_staged().await?;
                }
                Err(MoveError::Link(LinkError::Refused {
                    status: 409,
                    message: "stale copy removed".into(),
                }))
            }
            // The fence is on the source's disk: it commits nothing more
            // until the move ends, so the copy holds all of it and the
            // flip needs no answer from it.
            Err(LinkError::Unreachable(message)) if !marker.forced() => {
                tracing::info!(destination = %self.destination, message,
                    "the source does not answer; the fenced copy is flipped without it");
                self.install_and_flip(dir, installed, &marker).await
            }
            Err(error) => {
                self.set_phase(MovePhase::WaitingForSource);
                Err(error.into())
            }
        }
    }

    /// Installs the copy at `dir` unless it is `installed` already, then
    /// proposes the flip.
    async fn install_and_flip(
        &self,
        dir: &std::path::Path,
        installed: bool,
        marker: &MoveMarker,
    ) -> Result<(), MoveError> {
        let dir = if installed {
            dir.to_path_buf()
        } else {
            self.install(dir).await?
        };
        self.flip(&dir, marker).await
    }

    /// Copy passes while traffic flows, until what is left is small or
    /// stops shrinking.
    async fn catch_up(
        &self,
        dir: &std::path::Path,
        progress: &mut Progress,
    ) -> Result<(), MoveError> {
        self.set_phase(MovePhase::Copying);
        let mut left_before = None;
        for _ in 0..CATCH_UP_PASSES_MAX {
            let listing = self
                .link
                .list(ListPartitionSegments {
                    partition: self.partition_ref(),
                })
                .await?;
            progress.last_listing = Some((listing.high_watermark, listing.position.clone()));
            let left = left_to_copy(&listing.files, &progress.have);
            if catch_up_over(left, left_before) {
                return Ok(());
            }
            left_before = Some(left);
            self.copy_files(dir, &listing.files, progress, 0).await?;
            if !self.still_mine() {
                return Err(MoveError::Ended);
            }
        }
        Ok(())
    }

    /// Under the freeze: copies the rest, drops segments the source no
    /// longer has, syncs, verifies, fences, writes the consumer position
    /// and the marker.
    async fn finish_copy(
        &self,
        dir: &std::path::Path,
        progress: &mut Progress,
        prepared: &HandoffPrepared,
    ) -> Result<MoveMarker, MoveError> {
        let (segments, cursors): (Vec<FileExtent>, Vec<FileExtent>) = prepared
            .files
            .iter()
            .cloned()
            .partition(|file| files::is_segment(&file.name));
        // Segments retention removed at the source during the copy.
        let gone: Vec<String> = progress
            .have
            .keys()
            .filter(|name| !segments.iter().any(|file| &file.name == *name))
            .cloned()
            .collect();
        {
            let logs = Arc::clone(&self.context.logs);
            let dir = dir.to_path_buf();
            let gone = gone.clone();
            blocking(move || {
                for name in gone {
                    logs.disk().remove_file(&dir.join(name))?;
                }
                Ok(())
            })
            .await
            .map_err(disk("remove segments retention deleted at the source"))?;
        }
        for name in gone {
            progress.have.remove(&name);
        }
        self.copy_files(dir, &segments, progress, prepared.token)
            .await?;
        // Cursor files are copied whole, fresh.
        for cursor in &cursors {
            progress.have.remove(&cursor.name);
        }
        self.copy_files(dir, &cursors, progress, prepared.token)
            .await?;
        let verified = {
            let logs = Arc::clone(&self.context.logs);
            let dir = dir.to_path_buf();
            blocking(move || verify_copy(&logs, &dir)).await
        };
        let found = verified.map_err(disk("open the copy to verify it"))?;
        if found != prepared.high_watermark {
            return Err(MoveError::Unverifiable {
                expected: prepared.high_watermark,
                found,
            });
        }
        let fenced = self
            .link
            .fence(FenceHandoff {
                partition: self.partition_ref(),
                token: prepared.token,
                high_watermark: prepared.high_watermark,
            })
            .await?;
        let marker = self
            .seal_copy(dir, &fenced, prepared.high_watermark, prepared.token)
            .await?;
        tracing::info!(destination = %self.destination, source = self.source,
            high_watermark = prepared.high_watermark, "partition copy whole, verified and fenced");
        Ok(marker)
    }

    /// Writes the consumer position, then `move.marker` for a copy whole
    /// at `high_watermark` under the fence `token`: from here on the copy
    /// may become the partition.
    async fn seal_copy(
        &self,
        dir: &std::path::Path,
        position: &HandoffFenced,
        high_watermark: u64,
        token: u64,
    ) -> Result<MoveMarker, MoveError> {
        self.write_position(dir, position).await?;
        let marker = MoveMarker {
            source: self.source.clone(),
            incarnation: self.incarnation.as_deref().unwrap_or("").to_owned(),
            high_watermark,
            token,
            applied_index: self.context.replica.view().applied_index,
        };
        let logs = Arc::clone(&self.context.logs);
        let (dir, written) = (dir.to_path_buf(), marker.clone());
        blocking(move || files::write_marker(&**logs.disk(), &dir, &written))
            .await
            .map_err(disk("write the move marker"))?;
        Ok(marker)
    }

    async fn write_position(
        &self,
        dir: &std::path::Path,
        fenced: &HandoffFenced,
    ) -> Result<(), MoveError> {
        let position = ConsumerPosition {
            frontier: fenced.frontier,
            acked_ahead: fenced.acked_ahead.clone(),
        };
        let logs = Arc::clone(&self.context.logs);
        let dir = dir.to_path_buf();
        blocking(move || files::write_consumer_state(&**logs.disk(), &dir, &position))
            .await
            .map_err(disk("write the consumer position"))
    }

    /// Copies `[have, bytes)` of every file in `wanted`, in chunks (each
    /// synced as it is written), then syncs the directory if it created a
    /// file (or an earlier, failed call did).
    async fn copy_files(
        &self,
        dir: &std::path::Path,
        wanted: &[FileExtent],
        progress: &mut Progress,
        token: u64,
    ) -> Result<(), MoveError> {
        let have = &mut progress.have;
        for file in wanted {
            if !have.contains_key(&file.name) {
                // An empty file still counts: an empty active segment
                // names the offset the next commit takes.
                let logs = Arc::clone(&self.context.logs);
                let path_dir = dir.to_path_buf();
                let name = file.name.clone();
                blocking(move || files::write_chunk(&**logs.disk(), &path_dir, &name, 0, &[]))
                    .await
                    .map_err(disk("create a copied file"))?;
                have.insert(file.name.clone(), 0);
                progress.dir_unsynced = true;
            }
            let from = have.get(&file.name).copied().unwrap_or(0);
            if from < file.bytes {
                let copied = self.copy_range(dir, file, from, token).await;
                have.insert(file.name.clone(), copied.at);
                copied.outcome?;
            }
        }
        if progress.dir_unsynced {
            let logs = Arc::clone(&self.context.logs);
            let dir = dir.to_path_buf();
            blocking(move || logs.disk().sync_dir(&dir))
                .await
                .map_err(disk("sync the copy's directory"))?;
            progress.dir_unsynced = false;
        }
        Ok(())
    }

    /// Copies `[from, file.bytes)` of one file through a [`CopyWindow`]:
    /// up to [`FETCHES_IN_FLIGHT`] chunk fetches outstanding, and the
    /// chunks written in file order, one at a time, while the next fetches
    /// are out (the source reads and sends chunk n + 1 while this node
    /// writes chunk n). A short chunk (the source's file ends sooner)
    /// drops the fetches past it and asks again from where it ended.
    async fn copy_range(
        &self,
        dir: &std::path::Path,
        file: &FileExtent,
        from: u64,
        token: u64,
    ) -> Copied {
        let mut window = CopyWindow::new(
            from,
            file.bytes,
            u64::from(CHUNK_BYTES_MAX),
            FETCHES_IN_FLIGHT,
        );
        let mut fetches: VecDeque<JoinHandle<Result<bytes::Bytes, LinkError>>> = VecDeque::new();
        let mut write: Option<JoinHandle<std::io::Result<()>>> = None;
        let outcome = loop {
            while let Some(chunk) = window.next_fetch() {
                fetches.push_back(self.spawn_fetch(file, chunk, token));
            }
            let Some(fetch) = fetches.pop_front() else {
                break Ok(());
            };
            let data = match fetch.await {
                Ok(Ok(data)) => data,
                Ok(Err(error)) => break Err(MoveError::Link(error)),
                Err(error) => {
                    break Err(MoveError::Link(LinkError::Unreachable(error.to_string())));
                }
            };
            let chunk = match window.arrived(data.len() as u64) {
                Arrival::Write { chunk, dropped } => {
                    for fetch in fetches.drain(fetches.len() - dropped.len()..) {
                        fetch.abort();
                    }
                    chunk
                }
                Arrival::EndsEarly { .. } => {
                    break Err(MoveError::Link(LinkError::Refused {
                        status: 409,
                        message: format!("{} ends before byte {}", file.name, file.bytes),
                    }));
                }
            };
            if let Err(error) = self.write_finished(write.take(), &mut window).await {
                break Err(error);
            }
            window.write_started(chunk);
            let data = data.slice(..usize::try_from(chunk.len).unwrap_or(usize::MAX));
            let logs = Arc::clone(&self.context.logs);
            let (path_dir, name) = (dir.to_path_buf(), file.name.clone());
            write = Some(tokio::task::spawn_blocking(move || {
                files::write_chunk(&**logs.disk(), &path_dir, &name, chunk.offset, &data)
            }));
        };
        for fetch in fetches {
            fetch.abort();
        }
        // A write under way is waited for either way: the file is whole
        // to its end only once it completed.
        let written = self.write_finished(write, &mut window).await;
        Copied {
            at: window.whole_to(),
            outcome: outcome.and(written),
        }
    }

    /// Starts fetching `chunk` of `file`.
    fn spawn_fetch(
        &self,
        file: &FileExtent,
        chunk: Chunk,
        token: u64,
    ) -> JoinHandle<Result<bytes::Bytes, LinkError>> {
        let request = FetchSegmentChunk {
            partition: self.partition_ref(),
            file: file.name.clone(),
            offset: chunk.offset,
            max_bytes: u32::try_from(chunk.len).unwrap_or(CHUNK_BYTES_MAX),
            token,
        };
        let link = Arc::clone(&self.link);
        tokio::spawn(async move { link.fetch(request).await })
    }

    /// Waits for the write under way, if any, and counts its bytes as
    /// whole and copied once it completed.
    async fn write_finished(
        &self,
        write: Option<JoinHandle<std::io::Result<()>>>,
        window: &mut CopyWindow,
    ) -> Result<(), MoveError> {
        let Some(write) = write else {
            return Ok(());
        };
        write
            .await
            .unwrap_or_else(|error| Err(std::io::Error::other(error.to_string())))
            .map_err(disk("write a copied chunk"))?;
        let before = window.whole_to();
        window.write_done();
        self.status.lock().copied_bytes += window.whole_to() - before;
        Ok(())
    }

    /// Proposes the flip until the leader answers. A refusal means the
    /// move changed: if this node owns the partition after all (an earlier
    /// proposal committed) it is done; otherwise the copy is not wanted.
    async fn flip(&self, dir: &std::path::Path, marker: &MoveMarker) -> Result<(), MoveError> {
        self.set_phase(MovePhase::FlipPending);
        let Some(id) = self.incarnation_id() else {
            return Err(MoveError::Ended);
        };
        let flip = CompleteMove {
            topic: self.destination.topic.to_string(),
            id,
            partition: self.destination.partition,
            source: marker.source.clone(),
            target: self.me(),
        };
        let command = if marker.forced() {
            Command::ForcePromote(flip)
        } else {
            Command::CompleteMove(flip)
        };
        self.context.flips.proposing(&self.destination);
        match self.context.admin.propose(command).await {
            Ok(()) => {
                tracing::info!(destination = %self.destination, source = self.source,
                    "move completed: this node owns the partition");
                let logs = Arc::clone(&self.context.logs);
                let dir = dir.to_path_buf();
                let _ = blocking(move || files::remove_move_files(&**logs.disk(), &dir)).await;
                Ok(())
            }
            Err(AdminError::Refused { .. }) if self.owned_here() => Ok(()),
            Err(AdminError::Refused { message, .. }) if marker.forced() && self.still_mine() => {
                // The source is alive again: it serves on, and the move
                // starts over through a handoff. Refused, this flip can
                // never commit, so the installed copy goes (via staging).
                self.roll_back().await?;
                Err(MoveError::FlipPending(format!(
                    "force-promote refused: {message}"
                )))
            }
            Err(AdminError::Refused { message, .. }) => {
                tracing::info!(destination = %self.destination, message, "flip refused: the move changed");
                Err(MoveError::Ended)
            }
            Err(AdminError::Unavailable(message)) => Err(MoveError::FlipPending(message)),
        }
    }

    fn incarnation_id(&self) -> Option<IncarnationId> {
        let view = self.context.replica.view();
        let topic = view.metastore.topic(&self.destination.topic)?;
        (Some(topic.id.as_str()) == self.incarnation.as_deref()).then(|| topic.id.clone())
    }
}

/// How `error` failed an attempt, as the worker's decisions see it.
fn failure_of(error: &MoveError) -> Failure {
    match error {
        MoveError::Link(LinkError::Unreachable(_)) => Failure::SourceUnreachable,
        MoveError::Unverifiable { .. } => Failure::Unverifiable,
        _ => Failure::Other,
    }
}

/// Bytes of `files` not copied yet.
fn left_to_copy(files: &[FileExtent], have: &BTreeMap<String, u64>) -> u64 {
    files
        .iter()
        .map(|file| {
            file.bytes
                .saturating_sub(have.get(&file.name).copied().unwrap_or(0))
        })
        .sum()
}

/// Opens the copy as the log it will become, and closes it (which writes
/// its `hwm` file): the high watermark it recovers to.
pub(super) fn verify_copy(logs: &LocalLogs, dir: &std::path::Path) -> std::io::Result<u64> {
    let log = PartitionLog::open(
        Arc::clone(logs.disk()),
        dir,
        logs.config().clone(),
        Arc::clone(logs.clock()),
    )
    .map_err(std::io::Error::other)?;
    let high_watermark = log.high_watermark();
    log.close().map_err(std::io::Error::other)?;
    Ok(high_watermark)
}

fn disk<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> MoveError {
    move |error| MoveError::Disk {
        what,
        error: error.to_string(),
    }
}

/// Whether the control plane's leader confirmed (after its barrier) that
/// `holder.member` neither owns nor receives the partition: only then may a
/// copy of it here go (spec §6: nothing destructive on local state alone).
/// No answer is a no.
pub(super) async fn leader_releases(
    leader: Arc<dyn LeaderConfirm>,
    holder: PartitionHolder,
) -> bool {
    let destination = Destination::new(&holder.topic, holder.partition);
    let (answer, answered) = tokio::sync::oneshot::channel();
    // The leader's client blocks on a runtime of its own and refuses to
    // be asked from inside one, the blocking pool's threads included.
    let spawned = std::thread::Builder::new()
        .name("narad-move-confirm".into())
        .spawn(move || {
            let _ = answer.send(leader.confirm_partition_holder(&holder));
        });
    if let Err(error) = spawned {
        tracing::warn!(%destination, %error, "could not ask the leader about a copy; it stays");
        return false;
    }
    match answered.await {
        Ok(Ok(false)) => true,
        Ok(Ok(true)) => {
            tracing::info!(%destination, "the leader says this node still holds the partition; its copy stays");
            false
        }
        Ok(Err(error)) => {
            tracing::info!(%destination, %error, "the leader could not confirm that the copy may go; it stays for now");
            false
        }
        Err(_) => false,
    }
}

/// Runs blocking file work off the runtime's workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|error| Err(std::io::Error::other(error.to_string())))
}
