//! A queue between threads whose receivers sleep at once when it is empty:
//! the storage threads' requests, the dispatcher's events, the local commit
//! pool's orders, the consumer state worker's wake-ups.
//!
//! Why not a channel crate: the receivers of crossbeam-channel and of
//! `std::sync::mpsc` spin, then call `sched_yield` in a loop, before they
//! sleep. A profile of an idle node showed the dispatcher thread in
//! `do_sched_yield`. Here a receiver that finds the queue empty waits on a
//! condition variable (a futex wait) straight away, and a sender makes the
//! wake-up system call only when someone sleeps.
//!
//! A receiver that finds the queue empty sleeps on a condition variable of
//! its own, on top of a stack of sleepers, and a send wakes the one on top:
//! the receiver that fell asleep last. With many receivers (the local
//! commit pool has 32 workers) that keeps the same few threads at work,
//! their stacks and allocator heaps warm in the caches, where a single
//! shared condition variable woke the one that had slept longest and so
//! cycled through all of them. At 64 producers the commit workers spent
//! about a tenth of their time in cache misses inside the allocator.
//!
//! It is built on std's `Mutex` and `Condvar`, not parking_lot's: a
//! contended parking_lot mutex yields the CPU several times before it
//! sleeps, while std's spins briefly and then sleeps in the kernel. The
//! lock is held only to push or pop one item.
//!
//! A queue is bounded or not, as it was made:
//! - [`bounded`]: a full queue blocks [`Sender::send`] until a receiver
//!   takes an item (or every receiver is gone); [`Sender::try_send`] fails
//!   with [`TrySendError::Full`] instead.
//! - [`unbounded`]: a send never blocks. Its owner bounds what is sent and
//!   says how in its own docs.
//!
//! Either end can be cloned. A receive from an empty queue whose senders
//! are all gone answers [`Received::Disconnected`] (`None` from
//! [`Receiver::recv`]); a send to a queue whose receivers are all gone
//! hands the item back.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A queue holding at most `capacity` items; a full queue blocks senders.
///
/// # Panics
/// If `capacity` is 0: a queue that holds nothing would block every send.
pub fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    assert!(capacity > 0, "a bounded queue must hold at least one item");
    make(Some(capacity))
}

/// A queue with no limit: sends never block.
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    make(None)
}

fn make<T>(capacity: Option<usize>) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            senders: 1,
            receivers: 1,
            sleepers: Vec::new(),
            senders_asleep: 0,
        }),
        drained: Condvar::new(),
        capacity,
    });
    (
        Sender {
            shared: Arc::clone(&shared),
        },
        Receiver { shared },
    )
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Senders sleep here while a bounded queue is full.
    drained: Condvar,
    /// `None`: unbounded.
    capacity: Option<usize>,
}

struct State<T> {
    items: VecDeque<T>,
    senders: usize,
    receivers: usize,
    /// Receivers asleep on an empty queue, each on a condition variable of
    /// its own; the one that fell asleep last is on top, and a send takes
    /// it off and wakes it.
    sleepers: Vec<Arc<Condvar>>,
    /// Senders waiting on `drained`.
    senders_asleep: usize,
}

impl<T> Shared<T> {
    /// Every critical section leaves the state whole before anything that
    /// can panic, so a poisoned lock is taken over as it is.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn full(&self, state: &State<T>) -> bool {
        self.capacity
            .is_some_and(|capacity| state.items.len() >= capacity)
    }

    /// Pushes `item` and wakes a sleeping receiver, if any.
    fn push(&self, mut state: MutexGuard<'_, State<T>>, item: T) {
        state.items.push_back(item);
        let sleeper = state.sleepers.pop();
        drop(state);
        if let Some(sleeper) = sleeper {
            sleeper.notify_one();
        }
    }
}

/// Why [`Sender::try_send`] did not queue its item; the item comes back.
#[derive(Debug, PartialEq, Eq)]
pub enum TrySendError<T> {
    /// The bounded queue is full.
    Full(T),
    /// Every receiver is gone.
    Disconnected(T),
}

/// What a receive found.
#[derive(Debug, PartialEq, Eq)]
pub enum Received<T> {
    /// The oldest item.
    Item(T),
    /// The deadline passed with the queue empty.
    TimedOut,
    /// The queue is empty and every sender is gone.
    Disconnected,
}

/// The sending end.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Sender<T> {
    /// Queues `item`, waiting while a bounded queue is full.
    ///
    /// # Errors
    /// The item, when every receiver is gone.
    pub fn send(&self, item: T) -> Result<(), T> {
        let shared = &*self.shared;
        let mut state = shared.lock();
        loop {
            if state.receivers == 0 {
                return Err(item);
            }
            if !shared.full(&state) {
                break;
            }
            state.senders_asleep += 1;
            state = shared
                .drained
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.senders_asleep -= 1;
        }
        shared.push(state, item);
        Ok(())
    }

    /// Queues `item` if there is room now.
    ///
    /// # Errors
    /// [`TrySendError`], with the item.
    pub fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        let shared = &*self.shared;
        let state = shared.lock();
        if state.receivers == 0 {
            return Err(TrySendError::Disconnected(item));
        }
        if shared.full(&state) {
            return Err(TrySendError::Full(item));
        }
        shared.push(state, item);
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.senders -= 1;
        let sleepers = if state.senders == 0 {
            std::mem::take(&mut state.sleepers)
        } else {
            Vec::new()
        };
        drop(state);
        for sleeper in sleepers {
            sleeper.notify_one();
        }
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

/// The receiving end.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Receiver<T> {
    /// The oldest item, sleeping while the queue is empty; `None` once it
    /// is empty and every sender is gone.
    pub fn recv(&self) -> Option<T> {
        match self.recv_until(None) {
            Received::Item(item) => Some(item),
            Received::TimedOut | Received::Disconnected => None,
        }
    }

    /// The oldest item, sleeping while the queue is empty until `deadline`
    /// (`None`: no deadline).
    pub fn recv_until(&self, deadline: Option<Instant>) -> Received<T> {
        let shared = &*self.shared;
        let mut state = shared.lock();
        loop {
            if let Some(item) = state.items.pop_front() {
                let wake = state.senders_asleep > 0;
                drop(state);
                if wake {
                    shared.drained.notify_one();
                }
                return Received::Item(item);
            }
            if state.senders == 0 {
                return Received::Disconnected;
            }
            let timeout = match deadline {
                None => None,
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Received::TimedOut,
                },
            };
            // A condition variable for this wait alone: only this thread
            // ever waits on it, so a wake-up meant for it reaches it.
            let wake = Arc::new(Condvar::new());
            state.sleepers.push(Arc::clone(&wake));
            state = match timeout {
                None => wake.wait(state).unwrap_or_else(PoisonError::into_inner),
                Some(left) => {
                    wake.wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
            // A send or the last sender's leaving took it off the stack; a
            // timeout or a spurious wake-up did not.
            if let Some(at) = state
                .sleepers
                .iter()
                .position(|sleeper| Arc::ptr_eq(sleeper, &wake))
            {
                state.sleepers.remove(at);
            }
        }
    }

    /// The oldest item, sleeping while the queue is empty for at most
    /// `timeout` (a timeout too long to add to now waits without one).
    pub fn recv_timeout(&self, timeout: Duration) -> Received<T> {
        self.recv_until(Instant::now().checked_add(timeout))
    }

    /// The oldest item, if there is one now.
    pub fn try_recv(&self) -> Option<T> {
        match self.recv_until(Some(Instant::now())) {
            Received::Item(item) => Some(item),
            Received::TimedOut | Received::Disconnected => None,
        }
    }

    /// Receivers asleep on this queue now (tests).
    #[cfg(test)]
    pub fn receivers_asleep(&self) -> usize {
        self.shared.lock().sleepers.len()
    }

    /// Senders asleep on this queue now (tests).
    #[cfg(test)]
    pub fn senders_asleep(&self) -> usize {
        self.shared.lock().senders_asleep
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.shared.lock().receivers += 1;
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.receivers -= 1;
        let last = state.receivers == 0;
        drop(state);
        if last {
            self.shared.drained.notify_all();
        }
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;

    /// Yields allowed while waiting for a thread to fall asleep on the
    /// queue: a ceiling that turns a hang into a failure, not a timing
    /// assertion.
    const ASLEEP_YIELDS_MAX: usize = 10_000_000;

    fn until(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..ASLEEP_YIELDS_MAX {
            if done() {
                return;
            }
            thread::yield_now();
        }
        panic!("never saw {what}");
    }

    #[test]
    fn items_come_out_in_the_order_they_went_in() {
        let (sender, receiver) = unbounded();
        for item in 0..5 {
            sender.send(item).expect("send");
        }
        let got: Vec<u32> = std::iter::from_fn(|| receiver.try_recv()).collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_full_queue_refuses_try_send_and_hands_the_item_back() {
        let (sender, receiver) = bounded(1);
        sender.try_send(1).expect("room for one");
        assert_eq!(sender.try_send(2), Err(TrySendError::Full(2)));
        assert_eq!(receiver.try_recv(), Some(1));
        sender.try_send(3).expect("room again");
    }

    #[test]
    fn a_full_queue_blocks_the_sender_until_an_item_is_taken() {
        let (sender, receiver) = bounded(1);
        sender.send(1).expect("room for one");
        let blocked = thread::spawn(move || sender.send(2));
        until("the sender asleep", || receiver.senders_asleep() == 1);
        assert_eq!(receiver.recv(), Some(1));
        blocked
            .join()
            .expect("sender")
            .expect("queued once there was room");
        assert_eq!(receiver.recv(), Some(2));
    }

    #[test]
    fn a_sleeping_receiver_wakes_for_a_send() {
        let (sender, receiver) = unbounded::<u32>();
        let watcher = receiver.clone();
        let sleeper = thread::spawn(move || receiver.recv());
        until("the receiver asleep", || watcher.receivers_asleep() == 1);
        sender.send(7).expect("send");
        assert_eq!(sleeper.join().expect("receiver"), Some(7));
    }

    #[test]
    fn a_send_wakes_the_receiver_that_fell_asleep_last() {
        let (sender, receiver) = unbounded::<u32>();
        let (took, tally) = unbounded::<(usize, u32)>();
        let mut threads = Vec::new();
        for index in 0..3 {
            let mine = receiver.clone();
            let took = took.clone();
            threads.push(thread::spawn(move || {
                while let Some(item) = mine.recv() {
                    took.send((index, item)).expect("tally");
                }
            }));
            until("the receiver asleep", || {
                receiver.receivers_asleep() == index + 1
            });
        }
        sender.send(1).expect("send");
        assert_eq!(tally.recv(), Some((2, 1)), "the last to sleep takes it");
        // It falls asleep again on top, so it takes the next one too.
        until("the receiver asleep again", || {
            receiver.receivers_asleep() == 3
        });
        sender.send(2).expect("send");
        assert_eq!(tally.recv(), Some((2, 2)));
        drop(sender);
        for thread in threads {
            thread.join().expect("receiver");
        }
    }

    #[test]
    fn a_sleeping_receiver_wakes_when_every_sender_is_gone() {
        let (sender, receiver) = unbounded::<u32>();
        let second = sender.clone();
        let watcher = receiver.clone();
        let sleeper = thread::spawn(move || receiver.recv_until(None));
        until("the receiver asleep", || watcher.receivers_asleep() == 1);
        drop(sender);
        drop(second);
        assert_eq!(sleeper.join().expect("receiver"), Received::Disconnected);
    }

    #[test]
    fn a_blocked_sender_gets_its_item_back_when_every_receiver_is_gone() {
        let (sender, receiver) = bounded(1);
        sender.send(1).expect("room for one");
        let watcher = receiver.clone();
        let blocked = thread::spawn(move || sender.send(2));
        until("the sender asleep", || watcher.senders_asleep() == 1);
        drop(receiver);
        drop(watcher);
        assert_eq!(blocked.join().expect("sender"), Err(2));
    }

    #[test]
    fn a_receive_past_its_deadline_times_out() {
        let (_sender, receiver) = unbounded::<u32>();
        assert_eq!(
            receiver.recv_until(Some(Instant::now())),
            Received::TimedOut
        );
    }

    #[test]
    fn a_receive_with_a_timeout_takes_an_item_or_times_out() {
        let (sender, receiver) = unbounded::<u32>();
        assert_eq!(receiver.recv_timeout(Duration::ZERO), Received::TimedOut);
        sender.send(4).expect("send");
        assert_eq!(receiver.recv_timeout(Duration::ZERO), Received::Item(4));
    }

    #[test]
    fn items_queued_before_the_senders_left_are_still_received() {
        let (sender, receiver) = unbounded();
        sender.send(1).expect("send");
        drop(sender);
        assert_eq!(receiver.recv(), Some(1));
        assert_eq!(receiver.recv(), None);
    }
}
