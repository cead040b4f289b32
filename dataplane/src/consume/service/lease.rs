//! The lease path of a consume: scan the topic's partitions from a
//! rotating start, reserve the lowest reservable offset of each, *then*
//! read it (reading ahead for a batch), and settle what the read found.
//! A scan reads the tail cache inline and resumes on the blocking pool
//! from the first read that needs the disk (see `reads`).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use narad_plog::{LogError, PartitionLog, ReadEntry, ReadLimits, Record};

use super::reads::{self, NeedsDisk, Reads};
use super::shards::PartitionShard;
use super::{ConsumeError, ConsumeService, Delivery, limits};
use crate::consume::shard::{Lease, Reserve};
use crate::metadata::TopicMeta;

/// What one consume has taken so far.
#[derive(Debug)]
struct Batch {
    deliveries: Vec<Delivery>,
    bytes: usize,
    records_max: usize,
    bytes_max: usize,
}

impl Batch {
    fn full(&self) -> bool {
        self.deliveries.len() >= self.records_max || self.bytes >= self.bytes_max
    }

    fn push(&mut self, delivery: Delivery) {
        self.bytes += delivery.record.key.len() + delivery.record.payload.len();
        self.deliveries.push(delivery);
    }
}

/// One consume's pass over the topic's partitions (or its pinned one),
/// from a rotating start. [`Scan::run`] stops at the first read that needs
/// the disk when only memory may be read, and a later `run` on the
/// blocking pool goes on from there. Dropped before
/// [`Scan::finish`], it gives back every lease it holds.
#[derive(Debug)]
pub(super) struct Scan {
    service: Weak<ConsumeService>,
    meta: Arc<TopicMeta>,
    pinned: Option<u32>,
    /// The partitions to visit, in order; `next` indexes the current one.
    order: Vec<u32>,
    next: usize,
    /// The current partition's shard, once open.
    shard: Option<Arc<PartitionShard>>,
    ahead: ReadAhead,
    /// A lease taken on the current partition whose record is not read
    /// yet: the read needed the disk.
    unread: Option<Lease>,
    batch: Batch,
    failure: Option<ConsumeError>,
}

impl Scan {
    /// A scan of up to `max` ready records of `meta`'s topic, or of the
    /// pinned partition.
    pub(super) fn new(
        service: &ConsumeService,
        meta: Arc<TopicMeta>,
        pinned: Option<u32>,
        max: usize,
    ) -> Self {
        let order: Vec<u32> = match pinned {
            Some(partition) => vec![partition],
            None => {
                let start =
                    service.rotation.fetch_add(1, Ordering::Relaxed) % meta.partitions.max(1);
                (start..meta.partitions).chain(0..start).collect()
            }
        };
        Self {
            service: service.this.clone(),
            meta,
            pinned,
            order,
            next: 0,
            shard: None,
            ahead: ReadAhead::default(),
            unread: None,
            batch: Batch {
                deliveries: Vec::new(),
                bytes: 0,
                records_max: max,
                bytes_max: service.config.batch_bytes_max,
            },
            failure: None,
        }
    }

    /// Takes what is ready until the batch is full or every partition was
    /// visited.
    ///
    /// # Errors
    /// [`NeedsDisk`] when `reads` is [`Reads::Memory`] and a read (or the
    /// first open of a partition) needs the disk; never with
    /// [`Reads::Disk`].
    pub(super) fn run(&mut self, service: &ConsumeService, reads: Reads) -> Result<(), NeedsDisk> {
        while self.next < self.order.len() && !self.batch.full() {
            let partition = self.order[self.next];
            let shard = match &self.shard {
                Some(shard) => Arc::clone(shard),
                None if !service.owns(&self.meta, partition) => {
                    if self.pinned.is_some() {
                        self.failure = Some(ConsumeError::OwnerUnavailable { partition });
                    }
                    self.next += 1;
                    continue;
                }
                None => match service.shard_for(&self.meta, partition, reads)? {
                    Ok(shard) => {
                        self.shard = Some(Arc::clone(&shard));
                        shard
                    }
                    Err(error) => {
                        self.failed(partition, error);
                        continue;
                    }
                },
            };
            match self.take_from(service, &shard, reads)? {
                Ok(()) => self.next_partition(),
                Err(error) => self.failed(partition, error),
            }
        }
        Ok(())
    }

    /// What the scan took, or its first error when it took nothing.
    ///
    /// # Errors
    /// The first partition's error, when nothing was taken.
    ///
    /// # Panics
    /// If the scan stopped at a read it did not make.
    pub(super) fn finish(mut self) -> Result<Vec<Delivery>, ConsumeError> {
        assert!(
            self.unread.is_none(),
            "a scan finished with a leased record it did not read"
        );
        let deliveries = std::mem::take(&mut self.batch.deliveries);
        match self.failure.take() {
            Some(error) if deliveries.is_empty() => Err(error),
            _ => Ok(deliveries),
        }
    }

    fn failed(&mut self, partition: u32, error: ConsumeError) {
        tracing::warn!(topic = %self.meta.name, partition, %error, "consume could not read a partition");
        self.failure.get_or_insert(error);
        self.next_partition();
    }

    fn next_partition(&mut self) {
        self.next += 1;
        self.shard = None;
        self.ahead = ReadAhead::default();
    }

    /// Reserves and reads records of one partition into the batch until it
    /// is full or the partition has nothing more to give.
    fn take_from(
        &mut self,
        service: &ConsumeService,
        shard: &PartitionShard,
        reads: Reads,
    ) -> Result<Result<(), ConsumeError>, NeedsDisk> {
        let limits = limits(&self.meta);
        // A partition frozen for a move handoff gives out no new lease.
        let frozen = service.frozen(&shard.destination);
        while !self.batch.full() {
            let lease = match self.unread.take() {
                Some(lease) => lease,
                None if frozen => return Ok(Ok(())),
                None => {
                    let now_ms = service.clock.now_ms();
                    let high_watermark = shard.log.high_watermark();
                    let reserved = {
                        let mut state = shard.state.lock();
                        state.purge_expired(now_ms);
                        state.reserve(
                            now_ms,
                            high_watermark,
                            self.meta.visibility_timeout_ms,
                            limits,
                        )
                    };
                    let Reserve::Reserved(lease) = reserved else {
                        return Ok(Ok(()));
                    };
                    lease
                }
            };
            let records_left = self.batch.records_max - self.batch.deliveries.len();
            let bytes_left = self.batch.bytes_max.saturating_sub(self.batch.bytes).max(1);
            let entry =
                match self
                    .ahead
                    .entry(&shard.log, lease.offset, records_left, bytes_left, reads)
                {
                    Ok(entry) => entry,
                    Err(NeedsDisk) => {
                        self.unread = Some(lease);
                        return Err(NeedsDisk);
                    }
                };
            match read_leased(shard, lease.offset, lease.nonce, entry) {
                Leased::Record(record) => self.batch.push(Delivery {
                    topic: Arc::clone(&self.meta.name),
                    partition: shard.destination.partition,
                    record,
                    nonce: lease.nonce,
                }),
                Leased::Skipped => {}
                Leased::Stop(outcome) => return Ok(outcome),
            }
        }
        Ok(Ok(()))
    }
}

impl Drop for Scan {
    /// A scan dropped before it finished (its consume went away while it
    /// read on the blocking pool, or the runtime shut down) gives its
    /// leases back, so its records go out again at once.
    fn drop(&mut self) {
        let unread = self.unread.take();
        if self.batch.deliveries.is_empty() && unread.is_none() {
            return;
        }
        let Some(service) = self.service.upgrade() else {
            return;
        };
        if let (Some(lease), Some(shard)) = (unread, &self.shard) {
            shard.state.lock().release(lease.offset, lease.nonce);
        }
        if self.batch.deliveries.is_empty() {
            service.pump(&self.meta.name);
        } else {
            service.release(&self.batch.deliveries);
        }
    }
}

impl ConsumeService {
    /// Takes up to `max` ready records of the topic (or of the pinned
    /// partition): inline while the tail cache serves the reads, then on
    /// the blocking pool from the first read that needs the disk.
    pub(super) async fn scan(
        &self,
        meta: &Arc<TopicMeta>,
        pinned: Option<u32>,
        max: usize,
    ) -> Result<Vec<Delivery>, ConsumeError> {
        let mut scan = Scan::new(self, Arc::clone(meta), pinned, max);
        if scan.run(self, Reads::Memory).is_err() {
            let service = self.this.upgrade().ok_or(ConsumeError::Read(
                "the consume service is shutting down".to_owned(),
            ))?;
            self.reads_offloaded.fetch_add(1, Ordering::Relaxed);
            scan = tokio::task::spawn_blocking(move || {
                let finished = scan.run(&service, Reads::Disk);
                assert_eq!(finished, Ok(()), "a scan that may block reads anything");
                scan
            })
            .await
            .map_err(|error| ConsumeError::Read(format!("partition read failed: {error}")))?;
        }
        scan.finish()
    }
}

/// What became of a leased offset once read.
#[derive(Debug)]
pub(super) enum Leased {
    /// Deliver it.
    Record(Record),
    /// Settled as unreadable, or passed over by retention: look further.
    Skipped,
    /// Released: the log no longer has it (`Ok`), or the read failed.
    Stop(Result<(), ConsumeError>),
}

/// Settles what reading the leased `offset` found: a record is delivered;
/// an unreadable one is skipped for good; an offset retention deleted
/// moves the frontier to the oldest kept; a log that no longer has it
/// (closed or replaced under us: transient, never a gap) or a failed read
/// releases the lease.
pub(super) fn read_leased(
    shard: &PartitionShard,
    offset: u64,
    nonce: u64,
    entry: Result<Option<ReadEntry>, LogError>,
) -> Leased {
    match entry {
        Ok(Some(ReadEntry::Record(record))) => {
            assert_eq!(
                record.offset, offset,
                "read a record other than the leased one"
            );
            Leased::Record(record)
        }
        Ok(Some(ReadEntry::Unreadable { .. })) => {
            shard.state.lock().skip_unreadable(offset..offset + 1);
            shard.touch();
            tracing::warn!(destination = %shard.destination, offset, "skipped permanently-unreadable record");
            Leased::Skipped
        }
        Err(LogError::OffsetTrimmed { oldest, .. }) => {
            let gap = shard.state.lock().skip_to(oldest);
            shard.touch();
            tracing::warn!(destination = %shard.destination, oldest, gap, "consumer frontier fell behind retention; skipped to oldest retained offset");
            Leased::Skipped
        }
        Ok(None) | Err(LogError::Closed) => {
            shard.state.lock().release(offset, nonce);
            Leased::Stop(Ok(()))
        }
        Err(error) => {
            shard.state.lock().release(offset, nonce);
            Leased::Stop(Err(ConsumeError::Read(error.to_string())))
        }
    }
}

/// Reads ahead of the offset being leased, so a batch of consecutive
/// offsets costs one log read (one frame decode) rather than one per
/// record. Records are immutable, so reading before leasing is harmless:
/// only leased offsets are ever delivered.
#[derive(Debug, Default)]
struct ReadAhead {
    entries: VecDeque<ReadEntry>,
}

impl ReadAhead {
    /// The entry at `offset`, from what was read ahead or from a new read.
    ///
    /// # Errors
    /// [`NeedsDisk`] when the read needs the disk and `reads` allows only
    /// memory.
    fn entry(
        &mut self,
        log: &PartitionLog,
        offset: u64,
        records_max: usize,
        bytes_max: usize,
        reads: Reads,
    ) -> Result<Result<Option<ReadEntry>, LogError>, NeedsDisk> {
        if let Some(entry) = self.cached(offset) {
            return Ok(Ok(Some(entry)));
        }
        let limits = ReadLimits {
            records_max: records_max.max(1),
            bytes_max,
        };
        Ok(
            reads::read(log, offset, u64::MAX, limits, reads)?.map(|read| {
                self.entries = read.entries.into();
                self.cached(offset)
            }),
        )
    }

    fn cached(&mut self, offset: u64) -> Option<ReadEntry> {
        loop {
            let (start, end) = match self.entries.front()? {
                ReadEntry::Record(record) => (record.offset, record.offset + 1),
                ReadEntry::Unreadable { offsets } => (offsets.start, offsets.end),
            };
            if end <= offset {
                self.entries.pop_front();
                continue;
            }
            if start > offset {
                return None;
            }
            return match self.entries.front()? {
                ReadEntry::Record(_) => self.entries.pop_front(),
                ReadEntry::Unreadable { .. } => Some(ReadEntry::Unreadable {
                    offsets: offset..offset + 1,
                }),
            };
        }
    }
}
