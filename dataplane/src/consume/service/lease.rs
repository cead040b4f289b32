//! The lease path of a consume: scan the topic's partitions from a
//! rotating start, reserve the lowest reservable offset of each, *then*
//! read it (reading ahead for a batch), and settle what the read found.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use narad_plog::{LogError, PartitionLog, ReadEntry, ReadLimits, Record};

use super::shards::PartitionShard;
use super::{ConsumeError, ConsumeService, Delivery, limits};
use crate::consume::shard::Reserve;
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

impl ConsumeService {
    /// Takes up to `max` ready records of the topic (or of the pinned
    /// partition), scanning partitions from a rotating start.
    pub(super) fn scan(
        &self,
        meta: &TopicMeta,
        pinned: Option<u32>,
        max: usize,
    ) -> Result<Vec<Delivery>, ConsumeError> {
        let mut batch = Batch {
            deliveries: Vec::new(),
            bytes: 0,
            records_max: max,
            bytes_max: self.config.batch_bytes_max,
        };
        let order: Vec<u32> = match pinned {
            Some(partition) => vec![partition],
            None => {
                let start = self.rotation.fetch_add(1, Ordering::Relaxed) % meta.partitions;
                (start..meta.partitions).chain(0..start).collect()
            }
        };
        let mut failure = None;
        for partition in order {
            if batch.full() {
                break;
            }
            if !self.owns(meta, partition) {
                if pinned.is_some() {
                    return Err(ConsumeError::OwnerUnavailable { partition });
                }
                continue;
            }
            let taken = self
                .shard(meta, partition)
                .and_then(|shard| self.take_from(&shard, meta, &mut batch));
            if let Err(error) = taken {
                tracing::warn!(topic = %meta.name, partition, %error, "consume could not read a partition");
                failure.get_or_insert(error);
            }
        }
        match failure {
            Some(error) if batch.deliveries.is_empty() => Err(error),
            _ => Ok(batch.deliveries),
        }
    }

    /// Reserves and reads records of one partition into `batch` until it
    /// is full or the partition has nothing more to give.
    fn take_from(
        &self,
        shard: &PartitionShard,
        meta: &TopicMeta,
        batch: &mut Batch,
    ) -> Result<(), ConsumeError> {
        let limits = limits(meta);
        let mut ahead = ReadAhead::default();
        while !batch.full() {
            let now_ms = self.clock.now_ms();
            let high_watermark = shard.log.high_watermark();
            let reserved = {
                let mut state = shard.state.lock();
                state.purge_expired(now_ms);
                state.reserve(now_ms, high_watermark, meta.visibility_timeout_ms, limits)
            };
            let Reserve::Reserved(lease) = reserved else {
                return Ok(());
            };
            let records_left = batch.records_max - batch.deliveries.len();
            let bytes_left = batch.bytes_max.saturating_sub(batch.bytes).max(1);
            let entry = ahead.entry(&shard.log, lease.offset, records_left, bytes_left);
            match read_leased(shard, lease.offset, lease.nonce, entry) {
                Leased::Record(record) => batch.push(Delivery {
                    topic: Arc::clone(&meta.name),
                    partition: shard.destination.partition,
                    record,
                    nonce: lease.nonce,
                }),
                Leased::Skipped => {}
                Leased::Stop(outcome) => return outcome,
            }
        }
        Ok(())
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
    fn entry(
        &mut self,
        log: &PartitionLog,
        offset: u64,
        records_max: usize,
        bytes_max: usize,
    ) -> Result<Option<ReadEntry>, LogError> {
        if let Some(entry) = self.cached(offset) {
            return Ok(Some(entry));
        }
        let read = log.read(
            offset,
            u64::MAX,
            ReadLimits {
                records_max: records_max.max(1),
                bytes_max,
            },
        )?;
        self.entries = read.entries.into();
        Ok(self.cached(offset))
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
