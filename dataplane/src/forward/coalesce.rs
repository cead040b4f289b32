//! Forwarded acks under load (spec §3 "Forwarded acks"): while fewer than
//! [`single_acks_max`] ack RPCs to an owner are in flight, each HTTP ack
//! goes as its own RPC; beyond, acks queue per owner and leave as one
//! `AckBatch` (at most 64, one topic and one kind) when a slot frees. Each
//! queued ack still gets its own answer.
//!
//! An owner on an older release answers `AckBatch` with `400`: the acks are
//! resent singly, and the owner is remembered for
//! [`ACK_BATCH_REFUSAL_MEMORY`] so that the acks queued for it meanwhile
//! leave one per freed slot, singly.
//!
//! `AckLanes` only decides: who may send, what leaves when a slot frees,
//! which owners refuse batches. The forwarder sends, and tells it the time
//! (milliseconds on the node's monotonic clock).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use narad_clock::millis;

use narad_protocol::LeaseRef;
use narad_protocol::consume::ACK_BATCH_RECORDS_MAX;
use tokio::sync::oneshot;

use super::ForwardError;
use crate::consume::shard::Settle;
use crate::topology::NodeId;

/// Acks queued for one owner at most; an ack past it is answered `503`
/// at once.
pub const QUEUED_ACKS_MAX: usize = 4_096;

/// How long an owner that answered `AckBatch` with `400` (an older
/// release) gets single acks only (spec: remembered for 2 min).
pub const ACK_BATCH_REFUSAL_MEMORY: Duration = Duration::from_secs(120);

/// Single ack RPCs in flight to one owner before acks queue:
/// max(128, 8 × cores).
pub fn single_acks_max() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    128_usize.max(8 * cores)
}

/// The answer a queued ack waits for.
pub(crate) type SettleAnswer = Result<(), ForwardError>;

/// One queued ack.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) id: u64,
    pub(crate) topic: String,
    pub(crate) how: Settle,
    pub(crate) lease: LeaseRef,
    pub(crate) answer: oneshot::Sender<SettleAnswer>,
}

/// What an ack may do now.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Send it singly; it holds a slot until [`AckLanes::slot_freed`].
    Send,
    /// Wait for the answer of the batch it will leave in.
    Queued {
        /// Its id, to withdraw it if it waits too long.
        id: u64,
        /// Where its answer comes.
        answer: oneshot::Receiver<SettleAnswer>,
    },
    /// The owner's queue is full.
    Full,
}

#[derive(Debug, Default)]
struct Lane {
    in_flight: usize,
    queued: VecDeque<Queued>,
}

/// The per-owner slots and queues.
#[derive(Debug)]
pub(crate) struct AckLanes {
    single_max: usize,
    queued_max: usize,
    next_id: u64,
    lanes: HashMap<NodeId, Lane>,
    /// Owners that refused an `AckBatch`, until when (ms) they get
    /// singles only. Bounded by the cluster's members.
    batches_refused: HashMap<NodeId, u64>,
}

impl AckLanes {
    /// Lanes allowing `single_max` RPCs in flight per owner and
    /// `queued_max` queued acks.
    pub(crate) fn new(single_max: usize, queued_max: usize) -> Self {
        assert!(single_max > 0, "at least one ack RPC may be in flight");
        Self {
            single_max,
            queued_max,
            next_id: 0,
            lanes: HashMap::new(),
            batches_refused: HashMap::new(),
        }
    }

    /// Admits one ack to `node`.
    pub(crate) fn admit(
        &mut self,
        node: NodeId,
        topic: &str,
        how: Settle,
        lease: LeaseRef,
    ) -> Admission {
        let lane = self.lanes.entry(node).or_default();
        if lane.in_flight < self.single_max {
            lane.in_flight += 1;
            return Admission::Send;
        }
        if lane.queued.len() >= self.queued_max {
            return Admission::Full;
        }
        let (sender, receiver) = oneshot::channel();
        let id = self.next_id;
        self.next_id += 1;
        lane.queued.push_back(Queued {
            id,
            topic: topic.to_owned(),
            how,
            lease,
            answer: sender,
        });
        Admission::Queued {
            id,
            answer: receiver,
        }
    }

    /// `node` answered an `AckBatch` with `400` at `now_ms`: it gets single
    /// acks only for [`ACK_BATCH_REFUSAL_MEMORY`].
    pub(crate) fn batch_refused(&mut self, node: NodeId, now_ms: u64) {
        self.batches_refused
            .retain(|_, until_ms| *until_ms > now_ms);
        let memory_ms = millis(ACK_BATCH_REFUSAL_MEMORY);
        self.batches_refused
            .insert(node, now_ms.saturating_add(memory_ms));
    }

    /// Whether `node` refused an `AckBatch` within the last
    /// [`ACK_BATCH_REFUSAL_MEMORY`].
    pub(crate) fn refuses_batches(&self, node: NodeId, now_ms: u64) -> bool {
        self.batches_refused
            .get(&node)
            .is_some_and(|until_ms| *until_ms > now_ms)
    }

    /// A slot to `node` freed at `now_ms`. Returns the next batch to send in
    /// it (the oldest queued ack and up to 63 more of its topic and kind,
    /// skipping acks nobody waits for; only the oldest when `node` refuses
    /// batches), or frees the slot when nothing is queued.
    pub(crate) fn slot_freed(&mut self, node: NodeId, now_ms: u64) -> Option<Vec<Queued>> {
        let batch_max = if self.refuses_batches(node, now_ms) {
            1
        } else {
            ACK_BATCH_RECORDS_MAX as usize
        };
        let lane = self.lanes.get_mut(&node)?;
        assert!(lane.in_flight > 0, "a slot freed that was never taken");
        lane.queued.retain(|queued| !queued.answer.is_closed());
        let Some(first) = lane.queued.pop_front() else {
            lane.in_flight -= 1;
            if lane.in_flight == 0 {
                self.lanes.remove(&node);
            }
            return None;
        };
        let mut batch = vec![first];
        let mut rest = VecDeque::with_capacity(lane.queued.len());
        while let Some(queued) = lane.queued.pop_front() {
            let same = queued.topic == batch[0].topic && queued.how == batch[0].how;
            if same && batch.len() < batch_max {
                batch.push(queued);
            } else {
                rest.push_back(queued);
            }
        }
        lane.queued = rest;
        Some(batch)
    }

    /// Takes ack `id` out of `node`'s queue if it has not left yet.
    /// Returns whether it was still queued (then nothing was sent).
    pub(crate) fn withdraw(&mut self, node: NodeId, id: u64) -> bool {
        let Some(lane) = self.lanes.get_mut(&node) else {
            return false;
        };
        let before = lane.queued.len();
        lane.queued.retain(|queued| queued.id != id);
        lane.queued.len() < before
    }

    /// Acks queued for `node` (tests).
    #[cfg(test)]
    pub(crate) fn queued(&self, node: NodeId) -> usize {
        self.lanes.get(&node).map_or(0, |lane| lane.queued.len())
    }

    /// Single RPCs plus batches in flight to `node` (tests).
    #[cfg(test)]
    pub(crate) fn in_flight(&self, node: NodeId) -> usize {
        self.lanes.get(&node).map_or(0, |lane| lane.in_flight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(offset: u64) -> LeaseRef {
        LeaseRef {
            partition: 0,
            offset,
            nonce: 1,
        }
    }

    const NOW_MS: u64 = 1_000;

    fn offsets(batch: &[Queued]) -> Vec<u64> {
        batch.iter().map(|queued| queued.lease.offset).collect()
    }

    #[test]
    fn acks_go_singly_until_the_slots_are_taken_then_queue() {
        let mut lanes = AckLanes::new(2, 10);
        assert!(matches!(
            lanes.admit(7, "t", Settle::Ack, lease(0)),
            Admission::Send
        ));
        assert!(matches!(
            lanes.admit(7, "t", Settle::Ack, lease(1)),
            Admission::Send
        ));
        assert!(matches!(
            lanes.admit(7, "t", Settle::Ack, lease(2)),
            Admission::Queued { .. }
        ));
        // Another owner has its own slots.
        assert!(matches!(
            lanes.admit(8, "t", Settle::Ack, lease(0)),
            Admission::Send
        ));
    }

    #[test]
    fn a_freed_slot_sends_the_queue_as_one_batch() {
        let mut lanes = AckLanes::new(1, 10);
        let _ = lanes.admit(7, "t", Settle::Ack, lease(0));
        let waiting: Vec<Admission> = (1..4)
            .map(|offset| lanes.admit(7, "t", Settle::Ack, lease(offset)))
            .collect();

        let batch = lanes.slot_freed(7, NOW_MS).expect("a batch leaves");

        assert_eq!(offsets(&batch), vec![1, 2, 3]);
        assert_eq!(lanes.in_flight(7), 1, "the batch took the freed slot");
        drop(batch);
        assert!(lanes.slot_freed(7, NOW_MS).is_none());
        assert_eq!(lanes.in_flight(7), 0);
        drop(waiting);
    }

    #[test]
    fn a_batch_holds_one_topic_and_kind_and_at_most_sixty_four() {
        let mut lanes = AckLanes::new(1, 200);
        let _ = lanes.admit(7, "t", Settle::Ack, lease(0));
        let mut waiting = Vec::new();
        for offset in 1..=70 {
            waiting.push(lanes.admit(7, "t", Settle::Ack, lease(offset)));
        }
        waiting.push(lanes.admit(7, "t", Settle::Nack, lease(100)));
        waiting.push(lanes.admit(7, "u", Settle::Ack, lease(200)));

        let first = lanes.slot_freed(7, NOW_MS).expect("batch");
        let second = lanes.slot_freed(7, NOW_MS).expect("batch");
        let third = lanes.slot_freed(7, NOW_MS).expect("batch");

        assert_eq!(offsets(&first), (1..=64).collect::<Vec<_>>());
        assert_eq!(offsets(&second), vec![65, 66, 67, 68, 69, 70]);
        assert_eq!(offsets(&third), vec![100]);
        assert_eq!(
            offsets(&lanes.slot_freed(7, NOW_MS).expect("batch")),
            vec![200]
        );
    }

    #[test]
    fn an_ack_nobody_waits_for_is_not_sent() {
        let mut lanes = AckLanes::new(1, 10);
        let _ = lanes.admit(7, "t", Settle::Ack, lease(0));
        let gone = lanes.admit(7, "t", Settle::Ack, lease(1));
        let kept = lanes.admit(7, "t", Settle::Ack, lease(2));
        drop(gone);

        let batch = lanes.slot_freed(7, NOW_MS).expect("batch");

        assert_eq!(offsets(&batch), vec![2]);
        drop(kept);
    }

    #[test]
    fn a_withdrawn_ack_never_leaves() {
        let mut lanes = AckLanes::new(1, 10);
        let _ = lanes.admit(7, "t", Settle::Ack, lease(0));
        let Admission::Queued { id, answer } = lanes.admit(7, "t", Settle::Ack, lease(1)) else {
            panic!("queued");
        };

        assert!(lanes.withdraw(7, id));
        assert!(!lanes.withdraw(7, id));
        assert!(lanes.slot_freed(7, NOW_MS).is_none());
        drop(answer);
    }

    #[test]
    fn a_full_queue_refuses() {
        let mut lanes = AckLanes::new(1, 1);
        let _ = lanes.admit(7, "t", Settle::Ack, lease(0));
        let _queued = lanes.admit(7, "t", Settle::Ack, lease(1));
        assert!(matches!(
            lanes.admit(7, "t", Settle::Ack, lease(2)),
            Admission::Full
        ));
    }

    #[test]
    fn an_owner_that_refused_a_batch_gets_one_ack_per_freed_slot_for_two_minutes() {
        let start = NOW_MS;
        let mut lanes = AckLanes::new(1, 10);
        let _ = lanes.admit(7, "t", Settle::Ack, lease(0));
        let waiting: Vec<Admission> = (1..5)
            .map(|offset| lanes.admit(7, "t", Settle::Ack, lease(offset)))
            .collect();

        lanes.batch_refused(7, start);

        let first = lanes.slot_freed(7, start).expect("a single leaves");
        assert_eq!(offsets(&first), vec![1]);
        let memory_ms = ACK_BATCH_REFUSAL_MEMORY.as_millis() as u64;
        let later = start + memory_ms - 1;
        assert_eq!(
            offsets(&lanes.slot_freed(7, later).expect("single")),
            vec![2]
        );
        assert!(!lanes.refuses_batches(8, start), "other owners batch");
        let forgotten = start + memory_ms;
        assert!(!lanes.refuses_batches(7, forgotten));
        assert_eq!(
            offsets(&lanes.slot_freed(7, forgotten).expect("batch")),
            vec![3, 4]
        );
        drop(waiting);
    }
}
