//! The commit target for partitions this node owns: the dispatcher hands it
//! commit orders, and a pool of worker threads commits each through the
//! partition's combiner and reports the outcome back.
//!
//! Dispatch defines what a commit target is ([`CommitTarget`]); the commit
//! stage owns this implementation, so dispatch does not depend on commit.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::{Combiners, CommitBatch, CommitError, CommitItem};
use crate::dispatch::{
    CommitDone, CommitOrder, CommitOutcome, CommitTarget, Declined, Held, WalPayload,
};
use narad_disk::queue::{self, Sender};

/// Commit worker threads for local commits. A hung commit holds a worker,
/// and the dispatcher starts at most 16 commits that are not hung, so this
/// many workers leave room for as many hung ones.
pub const LOCAL_COMMIT_WORKERS: usize = 32;

/// Local commits queued for a worker at most; the dispatcher's own limits
/// keep it far below this. A full queue blocks the caller of
/// [`CommitTarget::start`] until a worker takes an order.
pub const LOCAL_COMMIT_QUEUE_MAX: usize = 4_096;

type LocalJob = (CommitOrder<WalPayload>, CommitDone);

/// Commits into this node's partition logs through the combiners, on a
/// pool of worker threads.
#[derive(Debug)]
pub struct LocalCommitTarget {
    jobs: Sender<LocalJob>,
    combiners: Arc<Combiners>,
}

impl LocalCommitTarget {
    /// A target with its workers started.
    ///
    /// # Errors
    /// A worker thread could not be spawned.
    pub fn start_workers(combiners: Arc<Combiners>) -> std::io::Result<Self> {
        Self::start_pool(combiners, LOCAL_COMMIT_WORKERS, "narad-commit")
    }

    /// A target with `workers` threads named `name-N` (fan-out keeps a pool
    /// of its own).
    ///
    /// # Errors
    /// A worker thread could not be spawned.
    pub fn start_pool(
        combiners: Arc<Combiners>,
        workers: usize,
        name: &str,
    ) -> std::io::Result<Self> {
        let (jobs, receiver) = queue::bounded::<LocalJob>(LOCAL_COMMIT_QUEUE_MAX);
        let pool_combiners = Arc::clone(&combiners);
        for index in 0..workers {
            let receiver = receiver.clone();
            let combiners = Arc::clone(&pool_combiners);
            std::thread::Builder::new()
                .name(format!("{name}-{index}"))
                .spawn(move || {
                    // An idle worker sleeps in `recv` until an order comes.
                    while let Some((order, done)) = receiver.recv() {
                        commit_and_report(&combiners, order, done);
                    }
                })?;
        }
        Ok(Self { jobs, combiners })
    }
}

impl CommitTarget for LocalCommitTarget {
    fn start(&self, order: CommitOrder<WalPayload>, done: CommitDone) {
        if let Err((order, done)) = self.jobs.send((order, done)) {
            // Workers are gone only at shutdown.
            done.finish(order, CommitOutcome::Failed);
        }
    }

    fn run_here(&self, order: CommitOrder<WalPayload>, done: CommitDone) -> Result<(), Declined> {
        commit_and_report(&self.combiners, order, done);
        Ok(())
    }
}

/// Commits `order` and reports the outcome through `done`. A panic is a
/// bug; reporting the commit failed keeps the records in the WAL and the
/// destination alive, where a lost answer would leave it hung.
fn commit_and_report(combiners: &Combiners, order: CommitOrder<WalPayload>, done: CommitDone) {
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| commit_locally(combiners, &order)))
        .unwrap_or_else(|_| {
            tracing::error!(destination = %order.destination, "local commit panicked");
            CommitOutcome::Failed
        });
    done.finish(order, outcome);
}

/// Commits `order` through `combiners` on the calling thread: what a
/// worker does with each order (the node simulation steps it directly).
pub(crate) fn commit_locally(
    combiners: &Combiners,
    order: &CommitOrder<WalPayload>,
) -> CommitOutcome {
    let batch = CommitBatch {
        items: order
            .records
            .iter()
            .map(|held: &Held<WalPayload>| CommitItem {
                key: held.payload.key.clone(),
                payload: held.payload.payload.clone(),
                incarnation: held.meta.incarnation.clone(),
                origin: held.payload.origin,
                idempotency_key: held.payload.idempotency_key.clone(),
            })
            .collect(),
        deadline_ms: combiners.deadline_in(order.budget),
    };
    match combiners.commit(&order.destination, batch) {
        Ok(_) => CommitOutcome::Committed,
        Err(CommitError::IncarnationMismatch { batch, live }) => {
            tracing::warn!(
                destination = %order.destination,
                batch_incarnation = %batch,
                live_incarnation = %live,
                "owner refused produce records accepted for another topic incarnation; checking them again"
            );
            CommitOutcome::IncarnationMismatch
        }
        Err(error) => {
            tracing::warn!(destination = %order.destination, %error, "local commit failed");
            CommitOutcome::Failed
        }
    }
}
