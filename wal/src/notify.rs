//! Completions that async code awaits and threads wait on: the outcome of
//! one flush, and the durable frontier.

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::error::{IoFailure, WalError};

/// The outcome of a flush: shared by every record whose caller waits on it.
#[derive(Debug, Default)]
pub(crate) struct FlushSlot {
    state: Mutex<SlotState>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct SlotState {
    outcome: Option<Result<(), FlushError>>,
    wakers: Vec<Waker>,
}

/// Why a flush did not make its records durable.
#[derive(Clone, Debug)]
pub(crate) enum FlushError {
    Failed(IoFailure),
}

impl From<FlushError> for WalError {
    fn from(error: FlushError) -> Self {
        match error {
            FlushError::Failed(failure) => Self::Failed(failure),
        }
    }
}

impl FlushSlot {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Delivers the outcome once; later calls are ignored (the first outcome
    /// is the true one).
    pub(crate) fn complete(&self, outcome: Result<(), FlushError>) {
        let wakers = {
            let mut state = self.state.lock();
            if state.outcome.is_some() {
                return;
            }
            state.outcome = Some(outcome);
            std::mem::take(&mut state.wakers)
        };
        self.done.notify_all();
        wakers.into_iter().for_each(Waker::wake);
    }

    fn poll_outcome(&self, cx: &mut Context<'_>) -> Poll<Result<(), FlushError>> {
        let mut state = self.state.lock();
        if let Some(outcome) = &state.outcome {
            return Poll::Ready(outcome.clone());
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }

    pub(crate) fn wait_outcome(&self) -> Result<(), FlushError> {
        let mut state = self.state.lock();
        loop {
            if let Some(outcome) = &state.outcome {
                return outcome.clone();
            }
            self.done.wait(&mut state);
        }
    }
}

/// Records staged in the log, waiting for the flush that holds the last of
/// them. Await it from async code or call [`Pending::wait`] from a thread.
///
/// Dropping it does not withdraw anything: the records are staged, the sync
/// loop writes them, and the outcome is delivered to nobody. That is on
/// purpose: reporting failure for a record that became durable would only
/// make a retrying client produce a duplicate.
#[derive(Debug)]
#[must_use = "an append is acknowledged only once its flush completed"]
pub struct Pending {
    seqs: Range<u64>,
    slot: Arc<FlushSlot>,
}

impl Pending {
    pub(crate) fn new(seqs: Range<u64>, slot: Arc<FlushSlot>) -> Self {
        Self { seqs, slot }
    }

    /// The sequence numbers the records took (consecutive).
    pub fn seqs(&self) -> Range<u64> {
        self.seqs.clone()
    }

    /// Blocks until the flush completed.
    ///
    /// # Errors
    /// [`WalError::Failed`] when the flush failed (the log is latched).
    /// Closing the log still writes every staged record first.
    pub fn wait(self) -> Result<Range<u64>, WalError> {
        self.slot.wait_outcome()?;
        Ok(self.seqs)
    }
}

impl Future for Pending {
    type Output = Result<Range<u64>, WalError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = Pin::into_inner(self);
        match this.slot.poll_outcome(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(this.seqs.clone())),
            Poll::Ready(Err(error)) => Poll::Ready(Err(error.into())),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The durable frontier: the sequence number after the last durable record.
#[derive(Debug)]
pub(crate) struct Frontier {
    state: Mutex<FrontierState>,
    changed: Condvar,
}

#[derive(Debug)]
struct FrontierState {
    next_durable_seq: u64,
    stopped: bool,
    wakers: Vec<Waker>,
}

impl Frontier {
    pub(crate) fn new(next_durable_seq: u64) -> Self {
        Self {
            state: Mutex::new(FrontierState {
                next_durable_seq,
                stopped: false,
                wakers: Vec::new(),
            }),
            changed: Condvar::new(),
        }
    }

    pub(crate) fn get(&self) -> u64 {
        self.state.lock().next_durable_seq
    }

    /// Moves the frontier forward.
    ///
    /// # Panics
    /// If it would move backwards: durable records never become undurable.
    pub(crate) fn advance(&self, next_durable_seq: u64) {
        let wakers = {
            let mut state = self.state.lock();
            assert!(
                next_durable_seq >= state.next_durable_seq,
                "durable frontier moving back from {} to {next_durable_seq}",
                state.next_durable_seq
            );
            if next_durable_seq == state.next_durable_seq {
                return;
            }
            state.next_durable_seq = next_durable_seq;
            std::mem::take(&mut state.wakers)
        };
        self.changed.notify_all();
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Marks the frontier as final (the log closed or latched), waking
    /// every watcher so none waits forever.
    pub(crate) fn stop(&self) {
        let wakers = {
            let mut state = self.state.lock();
            state.stopped = true;
            std::mem::take(&mut state.wakers)
        };
        self.changed.notify_all();
        wakers.into_iter().for_each(Waker::wake);
    }

    fn poll_changed(&self, seen: u64, cx: &mut Context<'_>) -> Poll<FrontierChange> {
        let mut state = self.state.lock();
        if state.next_durable_seq != seen {
            return Poll::Ready(FrontierChange::Advanced(state.next_durable_seq));
        }
        if state.stopped {
            return Poll::Ready(FrontierChange::Stopped(state.next_durable_seq));
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }

    fn wait_changed(&self, seen: u64, timeout: Duration) -> FrontierChange {
        let mut state = self.state.lock();
        if state.next_durable_seq == seen && !state.stopped {
            let _ = self.changed.wait_for(&mut state, timeout);
        }
        if state.stopped && state.next_durable_seq == seen {
            FrontierChange::Stopped(seen)
        } else {
            FrontierChange::Advanced(state.next_durable_seq)
        }
    }
}

/// What a watcher of the durable frontier learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontierChange {
    /// The frontier is now at this sequence number (it may equal the value
    /// seen when a blocking wait timed out).
    Advanced(u64),
    /// The log closed or latched: the frontier will not move again.
    Stopped(u64),
}

/// A handle on the durable frontier (the next durable sequence number),
/// for the dispatcher: it learns at once when records become durable.
#[derive(Clone, Debug)]
pub struct DurableWatch {
    frontier: Arc<Frontier>,
}

impl DurableWatch {
    pub(crate) fn new(frontier: Arc<Frontier>) -> Self {
        Self { frontier }
    }

    /// The sequence number after the last durable record.
    pub fn next_durable_seq(&self) -> u64 {
        self.frontier.get()
    }

    /// A future that resolves once the frontier differs from `seen`, or the
    /// log stopped.
    pub fn changed(&self, seen: u64) -> FrontierChanged {
        FrontierChanged {
            frontier: Arc::clone(&self.frontier),
            seen,
        }
    }

    /// Blocks until the frontier differs from `seen`, the log stopped, or
    /// `timeout` passed.
    pub fn wait_changed(&self, seen: u64, timeout: Duration) -> FrontierChange {
        self.frontier.wait_changed(seen, timeout)
    }
}

/// The future of [`DurableWatch::changed`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct FrontierChanged {
    frontier: Arc<Frontier>,
    seen: u64,
}

impl Future for FrontierChanged {
    type Output = FrontierChange;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<FrontierChange> {
        let this = Pin::into_inner(self);
        this.frontier.poll_changed(this.seen, cx)
    }
}
