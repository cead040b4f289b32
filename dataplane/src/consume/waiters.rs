//! Parked long polls: one FIFO per topic, and one per pinned partition.
//!
//! A consume that found nothing parks here with a one-shot reply channel.
//! The service's pump takes waiters off the front (pinned queues first),
//! looks for records for each, and either answers it or puts it back at
//! the front when nothing is ready. Only one pump runs per topic at a time;
//! a wake-up that arrives while one runs marks the topic dirty, and the
//! running pump goes round again, so no wake-up is lost.
//!
//! The table only keeps order and the pump flags; it never reserves
//! anything, so a waiter that leaves costs nothing but its slot.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

/// Parked consumes per topic (both kinds of queue together) at most; a
/// consume beyond it waits without a place in line.
pub const WAITERS_PER_TOPIC_MAX: usize = 16_384;

/// One parked consume.
#[derive(Debug)]
pub struct Waiter<R> {
    /// Identifies it for removal when it stops waiting.
    pub id: u64,
    /// The partition it is pinned to, if any.
    pub partition: Option<u32>,
    /// Records it takes at most.
    pub max: usize,
    /// Where its answer goes.
    pub reply: oneshot::Sender<R>,
}

/// Which line a waiter stands in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// Consumes of the whole topic.
    Topic,
    /// Consumes pinned to one partition.
    Pinned(u32),
}

#[derive(Debug)]
struct TopicWaiters<R> {
    queue: VecDeque<Waiter<R>>,
    pinned: BTreeMap<u32, VecDeque<Waiter<R>>>,
    pumping: bool,
    dirty: bool,
}

impl<R> TopicWaiters<R> {
    fn new() -> Self {
        Self {
            queue: VecDeque::new(),
            pinned: BTreeMap::new(),
            pumping: false,
            dirty: false,
        }
    }

    fn len(&self) -> usize {
        self.queue.len() + self.pinned.values().map(VecDeque::len).sum::<usize>()
    }

    fn line(&mut self, line: Line) -> Option<&mut VecDeque<Waiter<R>>> {
        match line {
            Line::Topic => Some(&mut self.queue),
            Line::Pinned(partition) => self.pinned.get_mut(&partition),
        }
    }
}

#[derive(Debug)]
struct Table<R> {
    topics: HashMap<Arc<str>, TopicWaiters<R>>,
    next_id: u64,
    closed: bool,
}

impl<R> Table<R> {
    /// Drops a topic's entry once nobody waits and no pump runs.
    fn tidy(&mut self, topic: &str) {
        if self
            .topics
            .get(topic)
            .is_some_and(|waiting| !waiting.pumping && waiting.len() == 0)
        {
            self.topics.remove(topic);
        }
    }
}

/// The waiter table of one service.
#[derive(Debug)]
pub struct Waiters<R> {
    table: Mutex<Table<R>>,
}

impl<R> Default for Waiters<R> {
    fn default() -> Self {
        Self {
            table: Mutex::new(Table {
                topics: HashMap::new(),
                next_id: 0,
                closed: false,
            }),
        }
    }
}

impl<R> Waiters<R> {
    /// Parks a consume at the back of its line. `None` when the table is
    /// closed (shutdown) or the topic has [`WAITERS_PER_TOPIC_MAX`] waiters.
    pub fn park(
        &self,
        topic: &Arc<str>,
        partition: Option<u32>,
        max: usize,
    ) -> Option<(u64, oneshot::Receiver<R>)> {
        let mut table = self.table.lock();
        if table.closed {
            return None;
        }
        let id = table.next_id;
        table.next_id += 1;
        let waiting = table
            .topics
            .entry(Arc::clone(topic))
            .or_insert_with(TopicWaiters::new);
        if waiting.len() >= WAITERS_PER_TOPIC_MAX {
            return None;
        }
        let (reply, answer) = oneshot::channel();
        let waiter = Waiter {
            id,
            partition,
            max,
            reply,
        };
        match partition {
            None => waiting.queue.push_back(waiter),
            Some(partition) => waiting
                .pinned
                .entry(partition)
                .or_default()
                .push_back(waiter),
        }
        Some((id, answer))
    }

    /// Takes waiter `id` out of its line; `false` when it is not there any
    /// more (a pump holds or answered it).
    pub fn remove(&self, topic: &str, id: u64) -> bool {
        let mut table = self.table.lock();
        let Some(waiting) = table.topics.get_mut(topic) else {
            return false;
        };
        let lines = std::iter::once(&mut waiting.queue).chain(waiting.pinned.values_mut());
        let mut removed = false;
        for line in lines {
            if let Some(at) = line.iter().position(|waiter| waiter.id == id) {
                line.remove(at);
                removed = true;
                break;
            }
        }
        waiting.pinned.retain(|_, line| !line.is_empty());
        table.tidy(topic);
        removed
    }

    /// Whether anyone waits on `topic`.
    pub fn has_waiters(&self, topic: &str) -> bool {
        self.table
            .lock()
            .topics
            .get(topic)
            .is_some_and(|waiting| waiting.len() > 0)
    }

    /// How many wait on `topic`.
    pub fn count(&self, topic: &str) -> usize {
        self.table
            .lock()
            .topics
            .get(topic)
            .map_or(0, TopicWaiters::len)
    }

    /// Topics with someone waiting, or a pump running (whose waiters are
    /// out of their lines while it serves them).
    pub fn topics(&self) -> Vec<Arc<str>> {
        self.table
            .lock()
            .topics
            .iter()
            .filter(|(_, waiting)| waiting.pumping || waiting.len() > 0)
            .map(|(topic, _)| Arc::clone(topic))
            .collect()
    }

    /// The lines of `topic` in pump order: pinned partitions first, then
    /// the topic line.
    pub fn lines(&self, topic: &str) -> Vec<Line> {
        let table = self.table.lock();
        let Some(waiting) = table.topics.get(topic) else {
            return Vec::new();
        };
        waiting
            .pinned
            .keys()
            .map(|&partition| Line::Pinned(partition))
            .chain(std::iter::once(Line::Topic))
            .collect()
    }

    /// Takes the front waiter of a line.
    pub fn pop(&self, topic: &str, line: Line) -> Option<Waiter<R>> {
        let mut table = self.table.lock();
        let waiting = table.topics.get_mut(topic)?;
        let waiter = waiting.line(line)?.pop_front();
        if let Line::Pinned(partition) = line
            && waiting
                .pinned
                .get(&partition)
                .is_some_and(VecDeque::is_empty)
        {
            waiting.pinned.remove(&partition);
        }
        waiter
    }

    /// Puts a waiter the pump could not serve back at the front of its
    /// line, keeping its place. Dropped (answered "nothing") if the table
    /// closed meanwhile.
    pub fn put_back(&self, topic: &Arc<str>, waiter: Waiter<R>) {
        let mut table = self.table.lock();
        if table.closed {
            return;
        }
        let waiting = table
            .topics
            .entry(Arc::clone(topic))
            .or_insert_with(TopicWaiters::new);
        match waiter.partition {
            None => waiting.queue.push_front(waiter),
            Some(partition) => waiting
                .pinned
                .entry(partition)
                .or_default()
                .push_front(waiter),
        }
    }

    /// Claims the pump of `topic`. `false` when one runs already (it is
    /// told to go round again) or nobody waits.
    pub fn begin_pump(&self, topic: &str) -> bool {
        let mut table = self.table.lock();
        let Some(waiting) = table.topics.get_mut(topic) else {
            return false;
        };
        if waiting.pumping {
            waiting.dirty = true;
            return false;
        }
        if waiting.len() == 0 {
            return false;
        }
        waiting.pumping = true;
        waiting.dirty = false;
        true
    }

    /// Ends a pump pass: `true` when a wake-up came during it and the pump
    /// must go round again; otherwise releases the pump.
    pub fn finish_pass(&self, topic: &str) -> bool {
        let mut table = self.table.lock();
        let Some(waiting) = table.topics.get_mut(topic) else {
            return false;
        };
        if waiting.dirty && waiting.len() > 0 {
            waiting.dirty = false;
            return true;
        }
        waiting.pumping = false;
        waiting.dirty = false;
        table.tidy(topic);
        false
    }

    /// Ends a pump that cannot finish its pass (the work it left for the
    /// blocking pool was dropped, as when the runtime shuts down): the
    /// topic's next wake-up starts a new pump.
    pub fn abandon_pump(&self, topic: &str) {
        let mut table = self.table.lock();
        if let Some(waiting) = table.topics.get_mut(topic) {
            waiting.pumping = false;
            waiting.dirty = false;
        }
        table.tidy(topic);
    }

    /// Answers every waiter with nothing (their reply channels close) and
    /// refuses new ones.
    pub fn close(&self) {
        let drained = {
            let mut table = self.table.lock();
            table.closed = true;
            std::mem::take(&mut table.topics)
        };
        // Reply senders drop outside the lock.
        drop(drained);
    }

    /// Answers the waiters of one topic with nothing (the topic is gone).
    pub fn drain_topic(&self, topic: &str) {
        let drained = {
            let mut table = self.table.lock();
            table.topics.get_mut(topic).map(|waiting| {
                (
                    std::mem::take(&mut waiting.queue),
                    std::mem::take(&mut waiting.pinned),
                )
            })
        };
        drop(drained);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic() -> Arc<str> {
        Arc::from("orders")
    }

    #[test]
    fn waiters_of_a_line_come_out_in_arrival_order() {
        let waiters = Waiters::<()>::default();
        let first = waiters.park(&topic(), None, 1).expect("park").0;
        let second = waiters.park(&topic(), None, 1).expect("park").0;
        assert_eq!(
            waiters.pop("orders", Line::Topic).map(|w| w.id),
            Some(first)
        );
        assert_eq!(
            waiters.pop("orders", Line::Topic).map(|w| w.id),
            Some(second)
        );
    }

    #[test]
    fn a_topic_whose_only_waiter_a_pump_holds_still_counts_for_wake_ups() {
        let waiters = Waiters::<()>::default();
        waiters.park(&topic(), None, 1).expect("park");
        assert!(waiters.begin_pump("orders"));
        let held = waiters.pop("orders", Line::Topic).expect("front");
        assert_eq!(waiters.topics(), vec![topic()], "the expiry timer pumps it");
        assert!(!waiters.begin_pump("orders"), "one pump at a time");
        waiters.put_back(&topic(), held);
        assert!(
            waiters.finish_pass("orders"),
            "the wake-up sends it round again"
        );
    }

    #[test]
    fn a_waiter_put_back_keeps_its_place_at_the_front() {
        let waiters = Waiters::<()>::default();
        let first = waiters.park(&topic(), None, 1).expect("park").0;
        waiters.park(&topic(), None, 1).expect("park");
        let taken = waiters.pop("orders", Line::Topic).expect("front");
        waiters.put_back(&topic(), taken);
        assert_eq!(
            waiters.pop("orders", Line::Topic).map(|w| w.id),
            Some(first)
        );
    }

    #[test]
    fn pinned_lines_come_before_the_topic_line() {
        let waiters = Waiters::<()>::default();
        waiters.park(&topic(), None, 1).expect("park");
        waiters.park(&topic(), Some(2), 1).expect("park");
        waiters.park(&topic(), Some(0), 1).expect("park");
        assert_eq!(
            waiters.lines("orders"),
            vec![Line::Pinned(0), Line::Pinned(2), Line::Topic]
        );
    }

    #[test]
    fn a_wake_up_during_a_pump_makes_it_go_round_again() {
        let waiters = Waiters::<()>::default();
        waiters.park(&topic(), None, 1).expect("park");
        assert!(waiters.begin_pump("orders"));
        assert!(!waiters.begin_pump("orders"), "one pump per topic");
        assert!(
            waiters.finish_pass("orders"),
            "the second wake-up is not lost"
        );
        assert!(!waiters.finish_pass("orders"));
        assert!(waiters.begin_pump("orders"), "released after the last pass");
    }

    #[test]
    fn a_removed_waiter_is_gone_and_the_topic_forgotten() {
        let waiters = Waiters::<()>::default();
        let id = waiters.park(&topic(), Some(1), 1).expect("park").0;
        assert!(waiters.remove("orders", id));
        assert!(!waiters.remove("orders", id));
        assert_eq!(waiters.count("orders"), 0);
        assert!(waiters.topics().is_empty());
    }

    #[test]
    fn closing_answers_every_waiter_and_refuses_new_ones() {
        let waiters = Waiters::<()>::default();
        let (_, mut answer) = waiters.park(&topic(), None, 1).expect("park");
        waiters.close();
        assert!(answer.try_recv().is_err(), "the reply channel closed");
        assert!(waiters.park(&topic(), None, 1).is_none());
    }

    #[test]
    fn a_full_topic_refuses_another_waiter() {
        let waiters = Waiters::<()>::default();
        let parked: Vec<_> = (0..WAITERS_PER_TOPIC_MAX)
            .map(|_| waiters.park(&topic(), None, 1).expect("room"))
            .collect();
        assert!(waiters.park(&topic(), Some(0), 1).is_none());
        drop(parked);
    }
}
