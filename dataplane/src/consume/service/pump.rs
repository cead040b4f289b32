//! Parked consumes and the pump that serves them: a consume that found
//! nothing parks in its topic's line; the pump hands records to waiters in
//! order, reserving only for a waiter that is still there, and a handoff
//! its consume never opened gives its leases back.
//!
//! The pump runs wherever it is woken, mostly on async workers, and reads
//! only what the tail cache serves there. When a waiter's scan needs the
//! disk, the rest of the pump (that waiter first, then the passes that
//! remain) moves to the blocking pool; the topic's pump stays begun until
//! it ends there, so wake-ups meanwhile make it go round again.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tokio::sync::oneshot;

use super::lease::Scan;
use super::reads::{NeedsDisk, Reads};
use super::{ConsumeError, ConsumeService, Delivery};
use crate::consume::waiters::{Line, Waiter, Waiters};
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
            return self.scan(meta, partition, max).await;
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
        self.pump_passes(topic, Reads::Memory);
    }

    /// Runs passes until no wake-up came during the last one. A pass that
    /// stops at a read needing the disk leaves the rest to the blocking
    /// pool.
    fn pump_passes(&self, topic: &Arc<str>, reads: Reads) {
        loop {
            if let Some(resume) = self.pump_pass(topic, reads) {
                self.resume_elsewhere(resume);
                return;
            }
            if !self.waiters.finish_pass(topic) {
                break;
            }
        }
    }

    fn pump_pass(&self, topic: &Arc<str>, reads: Reads) -> Option<Resume> {
        let Some(meta) = self.replica.topic_meta(topic) else {
            self.waiters.drain_topic(topic);
            return None;
        };
        for line in self.waiters.lines(topic) {
            if let Some(resume) = self.serve_line(&meta, line, reads) {
                return Some(resume);
            }
        }
        if self.waiters.has_waiters(topic)
            && let Some(at_ms) = self.next_expiry_ms(topic)
        {
            self.arm_timer(at_ms);
        }
        None
    }

    fn serve_line(&self, meta: &Arc<TopicMeta>, line: Line, reads: Reads) -> Option<Resume> {
        while let Some(waiter) = self.waiters.pop(&meta.name, line) {
            if waiter.reply.is_closed() {
                continue;
            }
            let mut scan = Scan::new(self, Arc::clone(meta), waiter.partition, waiter.max);
            if let Err(NeedsDisk) = scan.run(self, reads) {
                return Some(Resume {
                    service: self.this.clone(),
                    topic: Arc::clone(&meta.name),
                    waiter: Some((waiter, scan)),
                });
            }
            if !self.answer(&meta.name, waiter, scan) {
                return None;
            }
        }
        None
    }

    /// Answers `waiter` with what its scan took; `false` (the waiter back
    /// at the front of its line) when it took nothing.
    fn answer(&self, topic: &Arc<str>, waiter: Waiter<Reply>, scan: Scan) -> bool {
        let answer = match scan.finish() {
            Ok(deliveries) if deliveries.is_empty() => {
                self.waiters.put_back(topic, waiter);
                return false;
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
        true
    }

    /// Carries the pump on from `resume` on the blocking pool (or here,
    /// with no runtime known: nothing then runs on an async worker).
    fn resume_elsewhere(&self, resume: Resume) {
        let (Some(service), Some(runtime)) = (self.this.upgrade(), self.runtime.get()) else {
            self.resume_pump(resume);
            return;
        };
        self.reads_offloaded.fetch_add(1, Ordering::Relaxed);
        runtime.spawn_blocking(move || service.resume_pump(resume));
    }

    /// Finishes the waiter a pass stopped at, reading the disk, then runs
    /// the passes that remain.
    fn resume_pump(&self, mut resume: Resume) {
        let Some((_, scan)) = resume.waiter.as_mut() else {
            return;
        };
        let finished = scan.run(self, Reads::Disk);
        assert_eq!(finished, Ok(()), "a scan that may block reads anything");
        let Some((waiter, scan)) = resume.waiter.take() else {
            return;
        };
        self.answer(&resume.topic, waiter, scan);
        self.pump_passes(&resume.topic, Reads::Disk);
    }

    /// Gives back the leases of records a consume never received, and
    /// lets waiters have them.
    pub(super) fn release(&self, deliveries: &[Delivery]) {
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

/// A pump pass stopped at a waiter whose scan needs the disk: the waiter,
/// out of its line, and its scan, which keeps its place. Dropped before
/// it was resumed (the runtime shut down, or the resume panicked), it
/// ends the topic's pump; the waiter's consume answers empty and the scan
/// gives its leases back.
pub(super) struct Resume {
    service: Weak<ConsumeService>,
    topic: Arc<str>,
    waiter: Option<(Waiter<Reply>, Scan)>,
}

impl Drop for Resume {
    fn drop(&mut self) {
        let Some(stopped) = self.waiter.take() else {
            return;
        };
        if let Some(service) = self.service.upgrade() {
            service.waiters.abandon_pump(&self.topic);
        }
        // Then the waiter's consume answers empty, and the scan gives its
        // leases back and pumps anew.
        drop(stopped);
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
