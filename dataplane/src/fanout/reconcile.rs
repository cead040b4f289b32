//! The fan-out thread ([`FanoutRuntime`]), with a Tokio runtime of its
//! own, and the reconciler it runs: which cursors this node should run (links × parent
//! partitions it owns), compared at once on a metadata change, with the
//! ones it runs. Without a change it compares again only while something
//! is pending (a cursor that could not start, a cursor file being
//! retired), every second; otherwise it sleeps without a timer. A cursor whose plan changed (a new
//! attach epoch, another incarnation, a partition count) is stopped before
//! its successor starts, so two cursors never share a file. A link that is
//! gone while the parent partition stays here has its cursor file deleted,
//! but only after the leader confirms the old epoch is no longer current.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use narad_meta::AttachEpoch;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::cursor_file::{self, Loaded};
use super::machine::{LinkSpec, RemoteSpec};
use super::runtime::{CursorPlan, FanoutParts, run_cursor};
use super::status::CursorKey;
use crate::metadata::MetadataView;
use crate::topology::{Destination, Route, Topology};

/// How often the reconciler compares without a metadata change, while a
/// cursor could not start or a cursor file is being retired.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(1);

/// How many times a retiring cursor asks the leader before leaving the
/// file (a leftover file of an old epoch is ignored by any later cursor).
pub const RETIRE_ATTEMPTS: u32 = 30;

/// The cursors `view` asks this node to run: for every parent partition
/// `topology` routes here, one per child linked to that parent.
pub fn desired(view: &MetadataView, topology: &dyn Topology) -> BTreeMap<CursorKey, CursorPlan> {
    let mut plans = BTreeMap::new();
    for parent in view
        .topics
        .values()
        .filter(|topic| !topic.children.is_empty())
    {
        for partition in 0..parent.partitions {
            let route = topology.route(&Destination::new(&parent.name, partition));
            if !matches!(route, Route::Owner { local: true, .. }) {
                continue;
            }
            for child_name in &parent.children {
                let Some(child) = view.topics.get(child_name.as_str()) else {
                    continue;
                };
                let Some(link) = child
                    .parent
                    .as_ref()
                    .filter(|link| link.parent == *parent.name)
                else {
                    continue;
                };
                let remote_link = view.metastore.remote_link(child_name);
                if remote_link.is_some_and(|link| link.paused.is_some()) {
                    // A paused remote child runs no cursor; its position
                    // stays in its file.
                    continue;
                }
                let key = CursorKey {
                    parent: Arc::clone(&parent.name),
                    partition,
                    child: Arc::clone(&child.name),
                };
                let spec = LinkSpec {
                    epoch: link.attach_epoch.clone(),
                    delay_ms: link.fanout_delay_ms,
                    start_offset: link
                        .attach_offsets
                        .get(partition as usize)
                        .copied()
                        .unwrap_or(0),
                    parent_partition: partition,
                    parent_partitions: parent.partitions,
                    child_partitions: child.partitions,
                    remote: remote_link.map(|link| RemoteSpec {
                        lanes: link.lanes,
                        skip: link.skip.get(&partition).cloned().unwrap_or_default(),
                    }),
                };
                let plan = CursorPlan {
                    key: key.clone(),
                    link: spec,
                    parent_incarnation: parent.incarnation_id.clone(),
                    child_incarnation: child.incarnation_id.clone(),
                    remote_link: remote_link.cloned(),
                };
                plans.insert(key, plan);
            }
        }
    }
    plans
}

/// The fan-out thread: the reconciler and every cursor, on a Tokio runtime
/// of their own.
#[derive(Debug)]
pub struct FanoutRuntime {
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FanoutRuntime {
    /// Starts the thread.
    ///
    /// # Errors
    /// The thread or its runtime could not be made.
    pub fn start(parts: FanoutParts) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .thread_name("narad-fanout-io")
            .build()?;
        let (stop, stopped) = watch::channel(false);
        let reconciler = Reconciler::new(Arc::new(parts));
        let thread = std::thread::Builder::new()
            .name("narad-fanout".into())
            .spawn(move || runtime.block_on(reconciler.run(stopped)))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops every cursor (each after its cursor file write in progress,
    /// if any) and joins the thread.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the fan-out thread panicked");
        }
    }
}

impl Drop for FanoutRuntime {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

#[derive(Debug)]
struct Running {
    plan: CursorPlan,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The reconciler's state: running cursors and retiring files.
#[derive(Debug)]
struct Reconciler {
    parts: Arc<FanoutParts>,
    running: HashMap<CursorKey, Running>,
    retiring: HashMap<CursorKey, JoinHandle<()>>,
}

impl Reconciler {
    fn new(parts: Arc<FanoutParts>) -> Self {
        Self {
            parts,
            running: HashMap::new(),
            retiring: HashMap::new(),
        }
    }

    /// Runs passes until `stop` turns true, then stops every cursor.
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut changes = self.parts.replica.watch_changes();
        // A replica that is gone changes no more: stop watching it.
        let mut watching = true;
        loop {
            let pending = self.pass().await;
            let again = async {
                if pending {
                    tokio::time::sleep(RECONCILE_EVERY).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        break;
                    }
                }
                changed = changes.changed(), if watching => watching = changed.is_ok(),
                () = again => {}
            }
        }
        for key in self.running.keys().cloned().collect::<Vec<_>>() {
            self.stop_cursor(&key).await;
        }
        for (_, retire) in self.retiring.drain() {
            retire.abort();
        }
    }

    /// One comparison of desired and running cursors. `true` while
    /// something is left to do without a metadata change: a cursor that
    /// could not start, or a cursor file still being retired (its cursor
    /// starts on a later pass).
    async fn pass(&mut self) -> bool {
        let view = self.parts.replica.view();
        let desired = desired(&view, &*self.parts.replica);
        self.retiring.retain(|_, retire| !retire.is_finished());
        let stale: Vec<CursorKey> = self
            .running
            .iter()
            .filter(|(key, running)| desired.get(*key) != Some(&running.plan))
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            let Some(plan) = self.stop_cursor(&key).await else {
                continue;
            };
            if !desired.contains_key(&key) {
                self.retire_if_unlinked(&view, plan);
            }
        }
        let mut failed = false;
        for (key, plan) in desired {
            if self.running.contains_key(&key) || self.retiring.contains_key(&key) {
                continue;
            }
            failed |= !self.start_cursor(plan).await;
        }
        failed || !self.retiring.is_empty()
    }

    /// Starts a cursor for `plan`; `false` when its parent partition could
    /// not be opened (the next pass tries again).
    async fn start_cursor(&mut self, plan: CursorPlan) -> bool {
        let destination = Destination::new(&plan.key.parent, plan.key.partition);
        let logs = Arc::clone(&self.parts.logs);
        let incarnation = plan.parent_incarnation.clone();
        let resolved =
            tokio::task::spawn_blocking(move || logs.resolve(&destination, incarnation.as_ref()))
                .await;
        let log = match resolved {
            Ok(Ok(log)) => log,
            Ok(Err(error)) => {
                tracing::warn!(parent = %plan.key.parent, partition = plan.key.partition, %error, "fan-out cursor cannot open its parent partition; trying again on the next pass");
                return false;
            }
            Err(error) => {
                tracing::warn!(%error, "fan-out cursor start panicked");
                return false;
            }
        };
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run_cursor(
            Arc::clone(&self.parts),
            plan.clone(),
            log,
            stopped,
        ));
        tracing::info!(parent = %plan.key.parent, partition = plan.key.partition, child = %plan.key.child, epoch = %plan.link.epoch, "fan-out cursor started");
        self.running
            .insert(plan.key.clone(), Running { plan, stop, task });
        true
    }

    /// Stops a cursor and waits until nothing it started can still write.
    async fn stop_cursor(&mut self, key: &CursorKey) -> Option<CursorPlan> {
        let running = self.running.remove(key)?;
        let _ = running.stop.send(true);
        let _ = running.task.await;
        tracing::info!(parent = %key.parent, partition = key.partition, child = %key.child, "fan-out cursor stopped");
        Some(running.plan)
    }

    /// Deletes the stopped cursor's file when its link is gone but the
    /// parent partition (same incarnation) is still this node's: after a
    /// detach, not after a delete (the directory goes with the topic) or a
    /// move (the file travels).
    fn retire_if_unlinked(&mut self, view: &MetadataView, plan: CursorPlan) {
        let parent_stays = view.topics.get(&plan.key.parent).is_some_and(|parent| {
            parent.incarnation_id == plan.parent_incarnation
                && matches!(
                    self.parts
                        .replica
                        .route(&Destination::new(&parent.name, plan.key.partition)),
                    Route::Owner { local: true, .. }
                )
        });
        if !parent_stays {
            return;
        }
        let destination = Destination::new(&plan.key.parent, plan.key.partition);
        let Some(log) = self.parts.logs.get(&destination) else {
            return;
        };
        let path = cursor_file::cursor_path(log.dir(), &plan.key.child);
        let parts = Arc::clone(&self.parts);
        let key = plan.key.clone();
        let epoch = plan.link.epoch;
        let retire = tokio::task::spawn_blocking(move || retire(&parts, &key, &epoch, &path));
        self.retiring.insert(plan.key, retire);
    }
}

/// Asks the leader whether `epoch` is still `key.child`'s link; on a
/// confirmed no, deletes the file if it still holds that epoch.
fn retire(parts: &FanoutParts, key: &CursorKey, epoch: &AttachEpoch, path: &std::path::Path) {
    for _ in 0..RETIRE_ATTEMPTS {
        let leader = Arc::clone(&parts.leader);
        let (child, asked) = (key.child.to_string(), epoch.clone());
        // The leader's client refuses to be asked from a runtime thread.
        let answer = std::thread::spawn(move || leader.confirm_attach_epoch(&child, &asked))
            .join()
            .unwrap_or_else(|_| Err("leader confirmation panicked".into()));
        match answer {
            Ok(true) => return,
            Ok(false) => {
                let ours = match cursor_file::load(&*parts.disk, path) {
                    Ok(Loaded::Current(position) | Loaded::Legacy(position)) => {
                        position.epoch == *epoch
                    }
                    _ => false,
                };
                if ours && let Err(error) = cursor_file::remove(&*parts.disk, path) {
                    tracing::warn!(path = %path.display(), %error, "fan-out cursor file of a detached link could not be deleted");
                    continue;
                }
                return;
            }
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}
