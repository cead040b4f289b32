//! A data node's incarnation housekeeping: retiring the directories of
//! deleted topics, sweeping quarantined copies the leader confirms gone,
//! and the quarantine gauges (spec §5.6 "Incarnation marker", §6 "Topic
//! delete"; `docs/internals/topic-directories.md`).
//!
//! It runs on its own thread, because the sweep's leader confirmation
//! blocks (and refuses to run on an async runtime worker). It ticks at once
//! after every change the replica applies, so a delete is acted on as soon
//! as the node learns of it, and otherwise only when something is pending:
//! a retirement to retry (every tick interval), an orphan directory the
//! reconcile kept, or quarantined copies (on the sweep and stats
//! intervals). A node with none of these sleeps without a timer. Each
//! tick:
//! - once the replica is caught up: every topic incarnation that left the
//!   replica since the previous tick (deleted, or replaced by a new
//!   incarnation under the same name) first has its consume shards
//!   retired (`ConsumeService::retire_incarnation`: its consumer state
//!   writes stop, pending ones are dropped), then its partition logs
//!   closed and its directory retired (`LocalLogs::retire_deleted` with
//!   the remembered id);
//! - once the replica is caught up, at the first such tick and then every
//!   sweep interval while it kept a directory: the reconcile, which
//!   retires every topic directory
//!   whose topic the replica does not hold (left by a delete while the node
//!   was down, or by a topic created and deleted between two ticks), with
//!   the id its marker names, once the leader confirms that incarnation
//!   gone (a replica fed by a lagging control node after a restart may
//!   lack a topic that exists);
//! - at the first tick, after a tick that retired or removed a copy, and
//!   every stats interval while copies may remain: the
//!   `narad_quarantined_copies` and `narad_quarantined_bytes` gauges;
//! - at the first tick and then every sweep interval while copies may
//!   remain: the quarantine sweep, which removes only copies the leader
//!   confirms gone.
//!
//! Retiring never destroys anything (it renames), and a retire whose marker
//! names another incarnation is refused by `LocalLogs`, so a topic created
//! again in the meantime keeps its directory.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use narad_clock::millis;
use tokio::sync::{oneshot, watch};

use crate::consume::service::ConsumeService;
use crate::dispatch::{GoneQuestion, LeaderConfirm};
use crate::metadata::{MetadataReplica, MetadataView};
use crate::metrics::NodeMetrics;
use crate::partitions::{LocalLogs, MarkerToken, Retirement, TopicDirError};

/// Cadences of the housekeeping thread.
#[derive(Clone, Debug)]
pub struct HousekeepingConfig {
    /// How often a retirement that failed on a disk error is tried again.
    pub tick: Duration,
    /// How often the quarantine gauges are refreshed while copies remain.
    pub stats_interval: Duration,
    /// How often quarantined copies are swept while some remain, and how
    /// often directories are reconciled while one was kept.
    pub sweep_interval: Duration,
}

impl Default for HousekeepingConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(1),
            stats_interval: Duration::from_secs(5),
            sweep_interval: Duration::from_secs(30),
        }
    }
}

/// Topic incarnations the housekeeping still has to retire after a disk
/// error, at most; beyond it the oldest is left to the next reconcile.
const RETIRE_PENDING_MAX: usize = 1_024;

/// What the housekeeping works on.
#[derive(Debug)]
pub(crate) struct HousekeepingParts {
    pub(crate) logs: Arc<LocalLogs>,
    /// The consume service, whose shards of a departed incarnation are
    /// retired before its directory.
    pub(crate) consume: Arc<ConsumeService>,
    pub(crate) replica: Arc<MetadataReplica>,
    /// Leader confirmation; asked from the housekeeping thread only.
    pub(crate) leader: Arc<dyn LeaderConfirm>,
    pub(crate) metrics: Arc<NodeMetrics>,
}

/// The running housekeeping thread; stopped by [`Housekeeping::stop`].
#[derive(Debug)]
pub(crate) struct Housekeeping {
    stop: oneshot::Sender<()>,
    /// Set when the stop begins: a sweep then asks the leader nothing more.
    stopping: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Housekeeping {
    /// Starts the thread.
    ///
    /// # Errors
    /// The thread could not be started.
    pub(crate) fn spawn(
        parts: HousekeepingParts,
        config: HousekeepingConfig,
    ) -> std::io::Result<Self> {
        let (stop, stopped) = oneshot::channel();
        let stopping = Arc::new(AtomicBool::new(false));
        let leader = StoppableLeader {
            leader: Arc::clone(&parts.leader),
            stopping: Arc::clone(&stopping),
        };
        // Only waits run on it: the ticks block, outside it.
        let waiter = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        let changes = parts.replica.watch_changes();
        let thread = std::thread::Builder::new()
            .name("narad-housekeeping".into())
            .spawn(move || run(&parts, &leader, &config, &waiter, changes, stopped))?;
        Ok(Self {
            stop,
            stopping,
            thread,
        })
    }

    /// Stops the thread and waits for it: at most for the leader question
    /// or the disk step it is in.
    pub(crate) fn stop(self) {
        self.stopping.store(true, Ordering::Release);
        drop(self.stop);
        if self.thread.join().is_err() {
            tracing::error!("the housekeeping thread panicked");
        }
    }
}

/// The leader, refusing further questions once a stop began, so a sweep
/// of many copies does not hold the stop up.
#[derive(Debug)]
struct StoppableLeader {
    leader: Arc<dyn LeaderConfirm>,
    stopping: Arc<AtomicBool>,
}

impl LeaderConfirm for StoppableLeader {
    fn confirm_gone(&self, question: &GoneQuestion) -> Result<bool, String> {
        if self.stopping.load(Ordering::Acquire) {
            return Err("the node is stopping".into());
        }
        self.leader.confirm_gone(question)
    }
}

/// The topic incarnations of `view`, by name.
fn incarnations(view: &MetadataView) -> HashMap<Arc<str>, Option<Arc<str>>> {
    view.topics
        .iter()
        .map(|(name, topic)| (Arc::clone(name), topic.incarnation_id.clone()))
        .collect()
}

/// The incarnations in `before` that `now` no longer holds: the topic is
/// gone, or its name holds another incarnation.
fn departed(
    before: &HashMap<Arc<str>, Option<Arc<str>>>,
    now: &HashMap<Arc<str>, Option<Arc<str>>>,
) -> Vec<(Arc<str>, Option<Arc<str>>)> {
    let mut gone: Vec<(Arc<str>, Option<Arc<str>>)> = before
        .iter()
        .filter(|(name, id)| now.get(*name) != Some(*id))
        .map(|(name, id)| (Arc::clone(name), id.clone()))
        .collect();
    gone.sort();
    gone
}

/// State carried from tick to tick.
#[derive(Debug, Default)]
struct Memory {
    /// The replica's incarnations at the previous caught-up tick (`None`
    /// before the first).
    seen: Option<HashMap<Arc<str>, Option<Arc<str>>>>,
    /// The metastore's topics version `seen` was read at: a tick after a
    /// change that left topics alone (most are) compares nothing.
    seen_version: Option<u64>,
    /// Retirements that failed on a disk error, retried each tick.
    pending: Vec<(Arc<str>, Option<Arc<str>>)>,
    /// When the last tick ran, and the last of each task, on the node's
    /// monotonic clock.
    ticked_at_ms: Option<u64>,
    last_stats_ms: Option<u64>,
    last_sweep_ms: Option<u64>,
    last_reconcile_ms: Option<u64>,
    /// The last reconcile kept a directory (the leader did not confirm,
    /// or a step failed): it runs again after the sweep interval.
    orphans_kept: bool,
    /// Quarantined copies may remain: set by a retirement, cleared by a
    /// sweep that found none left. Until the first sweep, unknown.
    quarantine_left: bool,
}

impl Memory {
    fn new() -> Self {
        Self {
            quarantine_left: true,
            ..Self::default()
        }
    }

    /// When the next tick is due if the replica does not change first;
    /// `None` when nothing is pending, and the thread sleeps untimed.
    fn next_due(&self, config: &HousekeepingConfig) -> Option<u64> {
        let after = |at_ms: u64, every: Duration| at_ms.saturating_add(millis(every));
        let retry = self
            .ticked_at_ms
            .filter(|_| !self.pending.is_empty())
            .map(|at_ms| after(at_ms, config.tick));
        let reconcile = self
            .last_reconcile_ms
            .filter(|_| self.orphans_kept)
            .map(|at_ms| after(at_ms, config.sweep_interval));
        let sweep = self
            .last_sweep_ms
            .filter(|_| self.quarantine_left)
            .map(|at_ms| after(at_ms, config.sweep_interval));
        let stats = self
            .last_stats_ms
            .filter(|_| self.quarantine_left)
            .map(|at_ms| after(at_ms, config.stats_interval));
        [retry, reconcile, sweep, stats].into_iter().flatten().min()
    }
}

fn due(last_ms: Option<u64>, every: Duration, now_ms: u64) -> bool {
    last_ms.is_none_or(|last_ms| now_ms.saturating_sub(last_ms) >= millis(every))
}

fn run(
    parts: &HousekeepingParts,
    leader: &StoppableLeader,
    config: &HousekeepingConfig,
    waiter: &tokio::runtime::Runtime,
    mut changes: watch::Receiver<u64>,
    mut stopped: oneshot::Receiver<()>,
) {
    let clock = parts.logs.clock();
    let mut memory = Memory::new();
    // A replica that is gone changes no more: stop watching it.
    let mut watching = true;
    loop {
        tick(parts, leader, config, &mut memory, clock.now_ms());
        let due = memory.next_due(config);
        let stop = waiter.block_on(async {
            let sleep = async {
                match due {
                    Some(at_ms) => clock.sleep_until(at_ms).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = &mut stopped => true,
                changed = changes.changed(), if watching => {
                    watching = changed.is_ok();
                    false
                }
                () = sleep => false,
            }
        });
        if stop {
            return;
        }
    }
}

fn tick(
    parts: &HousekeepingParts,
    leader: &StoppableLeader,
    config: &HousekeepingConfig,
    memory: &mut Memory,
    now_ms: u64,
) {
    memory.ticked_at_ms = Some(now_ms);
    let mut changed = false;
    if parts.replica.is_caught_up() {
        changed |= retire_departed(parts, memory);
        let reconcile_due = memory.last_reconcile_ms.is_none() || memory.orphans_kept;
        if reconcile_due && due(memory.last_reconcile_ms, config.sweep_interval, now_ms) {
            let outcome = reconcile(parts, leader);
            memory.orphans_kept = outcome.kept;
            changed |= outcome.retired;
            memory.last_reconcile_ms = Some(now_ms);
        }
    }
    if changed {
        memory.quarantine_left = true;
    }
    let sweep_due = memory.last_sweep_ms.is_none() || memory.quarantine_left;
    if sweep_due && due(memory.last_sweep_ms, config.sweep_interval, now_ms) {
        let report = parts.logs.sweep_quarantine(leader);
        if report.removed > 0 || report.questions_failed > 0 || report.removals_failed > 0 {
            tracing::info!(?report, "quarantine sweep");
        }
        let left =
            report.unconfirmed + report.questions_failed + report.removals_failed + report.deferred;
        memory.quarantine_left = left > 0 || report.listing_error.is_some();
        changed |= report.removed > 0;
        memory.last_sweep_ms = Some(now_ms);
    }
    let stats_due = memory.last_stats_ms.is_none() || memory.quarantine_left;
    if changed || (stats_due && due(memory.last_stats_ms, config.stats_interval, now_ms)) {
        match parts.logs.quarantine_stats() {
            Ok(stats) => stats.record(&parts.metrics),
            Err(error) => tracing::warn!(%error, "counting quarantined topic directories failed"),
        }
        memory.last_stats_ms = Some(now_ms);
    }
}

/// Retires the incarnations that left the replica since the previous tick,
/// and those whose retirement failed before. `true` when it tried one.
fn retire_departed(parts: &HousekeepingParts, memory: &mut Memory) -> bool {
    let view = parts.replica.view();
    let version = view.metastore.versions().topics;
    if memory.pending.is_empty() && memory.seen_version == Some(version) {
        return false;
    }
    memory.seen_version = Some(version);
    let now = incarnations(&view);
    let mut retiring = std::mem::take(&mut memory.pending);
    if let Some(before) = &memory.seen {
        retiring.extend(departed(before, &now));
    }
    memory.seen = Some(now);
    let tried = !retiring.is_empty();
    for (topic, id) in retiring {
        if !retire(parts, &topic, id.as_deref()) {
            if memory.pending.len() == RETIRE_PENDING_MAX {
                let (dropped, _) = memory.pending.remove(0);
                tracing::warn!(topic = %dropped, "retirement retry dropped; the next reconcile finds the directory");
            }
            memory.pending.push((topic, id));
        }
    }
    tried
}

/// Retires `topic`'s incarnation `id`: its consume shards first (no
/// consumer state write reaches the directory after that), then its
/// partition logs and directory. `false` when a disk error leaves the
/// directory to be tried again. A refusal (the directory holds another
/// incarnation, or cannot be read) is final: it is logged and the
/// directory left alone.
fn retire(parts: &HousekeepingParts, topic: &str, id: Option<&str>) -> bool {
    parts.consume.retire_incarnation(topic, id);
    let retired = parts.logs.retire_deleted(topic, id);
    // A consume that opened a shard between the two steps, from a view
    // read before the delete, is retired now rather than never.
    parts.consume.retire_incarnation(topic, id);
    match retired {
        Ok(Retirement::Quarantined(_) | Retirement::NoDirectory) => true,
        Err(TopicDirError::Refused { dir, reason }) => {
            tracing::info!(topic, incarnation = ?id, dir = %dir.display(), %reason, "deleted topic's directory not retired");
            true
        }
        Err(error) => {
            tracing::warn!(topic, incarnation = ?id, %error, "retiring a deleted topic's directory failed; retrying");
            false
        }
    }
}

/// What a reconcile did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Reconciled {
    /// It retired a directory (a new quarantined copy).
    retired: bool,
    /// It kept a directory of no known topic, or could not look: it must
    /// run again.
    kept: bool,
}

/// Retires every topic directory whose topic the replica does not hold
/// and whose incarnation the leader confirms gone.
///
/// The directories are listed before the replica is read, and each
/// orphan's marker is read before the replica is read again: a directory
/// is only made for a topic the replica already holds, so a topic created
/// while this runs is found in the second read and left alone.
fn reconcile(parts: &HousekeepingParts, leader: &dyn LeaderConfirm) -> Reconciled {
    let mut outcome = Reconciled::default();
    let directories = match parts.logs.topic_directories() {
        Ok(directories) => directories,
        Err(error) => {
            tracing::warn!(%error, "listing topic directories failed; reconcile skipped");
            outcome.kept = true;
            return outcome;
        }
    };
    let view = parts.replica.view();
    for topic in directories {
        if view.topics.contains_key(topic.as_str()) {
            continue;
        }
        let token = match parts.logs.directory_incarnation(&topic) {
            Ok(token) => token,
            Err(error) => {
                tracing::warn!(topic, %error, "topic directory of no known topic left alone");
                outcome.kept = true;
                continue;
            }
        };
        if parts.replica.topic_meta(&topic).is_some() {
            continue;
        }
        let token = token.unwrap_or(MarkerToken::NoId);
        match leader.confirm_gone(&token.gone_question(&topic)) {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(
                    topic,
                    incarnation = token.as_str(),
                    "topic directory of no known topic kept: the leader says its topic exists"
                );
                outcome.kept = true;
                continue;
            }
            Err(error) => {
                tracing::info!(topic, %error, "topic directory of no known topic kept until the leader answers");
                outcome.kept = true;
                continue;
            }
        }
        let id = match &token {
            MarkerToken::Id(id) => Some(&**id),
            MarkerToken::NoId => None,
        };
        outcome.retired = true;
        outcome.kept |= !retire(parts, &topic, id);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(pairs: &[(&str, Option<&str>)]) -> HashMap<Arc<str>, Option<Arc<str>>> {
        pairs
            .iter()
            .map(|(name, id)| (Arc::from(*name), id.map(Arc::from)))
            .collect()
    }

    #[test]
    fn a_deleted_topic_departs_with_its_incarnation() {
        let before = ids(&[("a", Some("00000000000000a1")), ("b", None)]);
        let now = ids(&[("b", None)]);
        assert_eq!(
            departed(&before, &now),
            vec![(Arc::from("a"), Some(Arc::from("00000000000000a1")))]
        );
    }

    #[test]
    fn a_recreated_topic_departs_with_its_old_incarnation() {
        let before = ids(&[("a", Some("00000000000000a1"))]);
        let now = ids(&[("a", Some("00000000000000b2"))]);
        assert_eq!(
            departed(&before, &now),
            vec![(Arc::from("a"), Some(Arc::from("00000000000000a1")))]
        );
    }

    #[test]
    fn unchanged_and_new_topics_do_not_depart() {
        let before = ids(&[("a", Some("00000000000000a1"))]);
        let now = ids(&[("a", Some("00000000000000a1")), ("c", None)]);
        assert!(departed(&before, &now).is_empty());
    }

    #[derive(Debug)]
    struct AlwaysGone;

    impl LeaderConfirm for AlwaysGone {
        fn confirm_gone(&self, _: &GoneQuestion) -> Result<bool, String> {
            Ok(true)
        }
    }

    #[test]
    fn a_stopping_node_asks_the_leader_nothing_more() {
        let stopping = Arc::new(AtomicBool::new(false));
        let leader = StoppableLeader {
            leader: Arc::new(AlwaysGone),
            stopping: Arc::clone(&stopping),
        };
        let question = GoneQuestion {
            topic: Arc::from("orders"),
            incarnation: None,
        };
        assert_eq!(leader.confirm_gone(&question), Ok(true));
        stopping.store(true, Ordering::Release);
        assert!(leader.confirm_gone(&question).is_err());
    }

    fn config() -> HousekeepingConfig {
        HousekeepingConfig {
            tick: Duration::from_secs(1),
            stats_interval: Duration::from_secs(5),
            sweep_interval: Duration::from_secs(30),
        }
    }

    /// Memory after a first tick at `at` that left nothing pending.
    /// Where the tests' memory was settled, on the node's clock.
    const AT_MS: u64 = 7_000;

    fn settled(at_ms: u64) -> Memory {
        Memory {
            ticked_at_ms: Some(at_ms),
            last_stats_ms: Some(at_ms),
            last_sweep_ms: Some(at_ms),
            last_reconcile_ms: Some(at_ms),
            orphans_kept: false,
            quarantine_left: false,
            ..Memory::new()
        }
    }

    #[test]
    fn with_nothing_pending_no_tick_is_due() {
        assert_eq!(settled(AT_MS).next_due(&config()), None);
    }

    #[test]
    fn a_failed_retirement_is_retried_after_one_tick() {
        let mut memory = settled(AT_MS);
        memory.pending.push((Arc::from("orders"), None));
        assert_eq!(
            memory.next_due(&config()),
            Some(AT_MS + millis(config().tick))
        );
    }

    #[test]
    fn quarantined_copies_keep_the_stats_and_the_sweep_on_their_intervals() {
        let mut memory = settled(AT_MS);
        memory.quarantine_left = true;
        assert_eq!(
            memory.next_due(&config()),
            Some(AT_MS + millis(config().stats_interval))
        );
        memory.last_stats_ms = Some(AT_MS + millis(config().sweep_interval));
        assert_eq!(
            memory.next_due(&config()),
            Some(AT_MS + millis(config().sweep_interval))
        );
    }

    #[test]
    fn a_kept_orphan_brings_the_reconcile_back_after_the_sweep_interval() {
        let mut memory = settled(AT_MS);
        memory.orphans_kept = true;
        assert_eq!(
            memory.next_due(&config()),
            Some(AT_MS + millis(config().sweep_interval))
        );
    }

    #[test]
    fn something_never_done_is_due() {
        assert!(due(None, Duration::from_secs(30), AT_MS));
        assert!(!due(Some(AT_MS), Duration::from_secs(30), AT_MS));
        assert!(due(Some(AT_MS), Duration::from_secs(30), AT_MS + 30_000));
    }
}
