//! Parked consumes and the pump that serves them: a consume that found
//! nothing parks in its topic's line; the pump hands records to waiters in
//! order, reserving only for a waiter that is still there, and a handoff
//! its consume never opened gives its leases back.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tokio::sync::oneshot;

use super::{ConsumeError, ConsumeService, Delivery};
use crate::consume::waiters::{Line, Waiters};
use crate::metadata::TopicMeta;
use crate::topology::Destination;

/// What a pump sends a parked consume.
pub(super) type Reply = Result<Handoff, ConsumeError>;

/// Records handed to a parked consume. Dropped without
/// [`Handoff::open`] (the consume went away first), it releases their
/// leases so they are redelivered at once.
#[derive(Debug)]
pub(super) struct Handoff {
    service: Weak<ConsumeService>,
    deliveries: Vec<Delivery>,
}

impl Handoff {
    fn open(mut self) -> Vec<Delivery> {
        std::mem::take(&mut self.deliveries)
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        if self.deliveries.is_empty() {
            return;
        }
        if let Some(service) = self.service.upgrade() {
            service.release(&self.deliveries);
        }
    }
}

impl ConsumeService {
    /// Parks a consume until the pump answers it or `deadline_ms` passes.
    pub(super) async fn park(
        &self,
        meta: &Arc<TopicMeta>,
        partition: Option<u32>,
        max: usize,
        deadline_ms: u64,
    ) -> Result<Vec<Delivery>, ConsumeError> {
        let topic = &meta.name;
        let Some((id, mut reply)) = self.waiters.park(topic, partition, max) else {
            if self.shut_down.load(Ordering::Acquire) {
                return Ok(Vec::new());
            }
            // The line is full: wait without a place in it, look once.
            self.clock.sleep_until(deadline_ms).await;
            return self.scan(meta, partition, max);
        };
        let parked = Parked {
            waiters: &self.waiters,
            topic,
            id,
        };
        self.pump(topic);
        tokio::select! {
            biased;
            answer = &mut reply => return opened(answer),
            () = self.clock.sleep_until(deadline_ms) => {}
        }
        if self.waiters.remove(topic, id) {
            return Ok(Vec::new());
        }
        drop(parked);
        // A pump holds this waiter right now; its answer is on the way.
        opened(reply.await)
    }

    /// Serves the waiters of `topic` until one finds nothing.
    pub(super) fn pump(&self, topic: &Arc<str>) {
        if !self.waiters.begin_pump(topic) {
            return;
        }
        loop {
            self.pump_pass(topic);
            if !self.waiters.finish_pass(topic) {
                break;
            }
        }
    }

    fn pump_pass(&self, topic: &Arc<str>) {
        let Some(meta) = self.replica.topic_meta(topic) else {
            self.waiters.drain_topic(topic);
            return;
        };
        for line in self.waiters.lines(topic) {
            self.serve_line(&meta, line);
        }
        if self.waiters.has_waiters(topic)
            && let Some(at_ms) = self.next_expiry_ms(topic)
        {
            self.arm_timer(at_ms);
        }
    }

    fn serve_line(&self, meta: &TopicMeta, line: Line) {
        while let Some(waiter) = self.waiters.pop(&meta.name, line) {
            if waiter.reply.is_closed() {
                continue;
            }
            let answer = match self.scan(meta, waiter.partition, waiter.max) {
                Ok(deliveries) if deliveries.is_empty() => {
                    self.waiters.put_back(&meta.name, waiter);
                    return;
                }
                Ok(deliveries) => Ok(Handoff {
                    service: self.this.clone(),
                    deliveries,
                }),
                Err(error) => Err(error),
            };
            // A consume gone since: the unopened handoff drops here and
            // gives its leases back.
            let _ = waiter.reply.send(answer);
        }
    }

    /// Gives back the leases of records a consume never received, and
    /// lets waiters have them.
    fn release(&self, deliveries: &[Delivery]) {
        let mut topics: Vec<Arc<str>> = Vec::new();
        for delivery in deliveries {
            let destination = Destination {
                topic: Arc::clone(&delivery.topic),
                partition: delivery.partition,
            };
            let shard = self.shards.lock().get(&destination).cloned();
            if let Some(shard) = shard {
                shard
                    .state
                    .lock()
                    .release(delivery.record.offset, delivery.nonce);
            }
            if !topics.contains(&delivery.topic) {
                topics.push(Arc::clone(&delivery.topic));
            }
        }
        for topic in topics {
            self.pump(&topic);
        }
    }
}

/// Removes a parked consume from its line when the consume goes away.
struct Parked<'a> {
    waiters: &'a Waiters<Reply>,
    topic: &'a str,
    id: u64,
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.waiters.remove(self.topic, self.id);
    }
}

fn opened(answer: Result<Reply, oneshot::error::RecvError>) -> Result<Vec<Delivery>, ConsumeError> {
    match answer {
        Ok(Ok(handoff)) => Ok(handoff.open()),
        Ok(Err(error)) => Err(error),
        // The table closed (shutdown) or the topic went away.
        Err(_) => Ok(Vec::new()),
    }
}
