//! Helpers shared by the partition log's integration tests.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use narad_plog::{CommitRecord, LogConfig, PartitionLog, ReadEntry, ReadLimits, Record};

/// A small configuration so tests roll segments and index sparsely.
pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 2_048,
        frame_payload_bytes_target: 512,
        frame_records_max: 8,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

/// An owned record to commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owned {
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    pub committed_at_ms: u64,
}

impl Owned {
    pub fn new(key: &str, payload: &str, committed_at_ms: u64) -> Self {
        Self {
            key: key.as_bytes().to_vec(),
            payload: payload.as_bytes().to_vec(),
            committed_at_ms,
        }
    }

    pub fn as_commit(&self) -> CommitRecord<'_> {
        CommitRecord::new(&self.key, &self.payload, self.committed_at_ms)
    }
}

/// `count` records numbered from `first`, stamped at `time_ms`.
pub fn numbered(first: u64, count: u64, time_ms: u64) -> Vec<Owned> {
    (first..first + count)
        .map(|n| {
            Owned::new(
                &format!("key-{n}"),
                &format!(
                    "{{\"n\":{n},\"body\":\"{}\"}}",
                    "x".repeat((n % 7) as usize * 9)
                ),
                time_ms,
            )
        })
        .collect()
}

/// Commits one batch of owned records.
pub fn commit(
    log: &PartitionLog,
    records: &[Owned],
) -> Result<std::ops::Range<u64>, narad_plog::LogError> {
    let batch: Vec<CommitRecord<'_>> = records.iter().map(Owned::as_commit).collect();
    log.commit_durable(&[&batch]).map(|outcome| outcome.offsets)
}

/// Every entry from `from` to the high watermark.
pub fn read_all(log: &PartitionLog, from: u64) -> Vec<ReadEntry> {
    let mut entries = Vec::new();
    let mut next = from;
    loop {
        let batch = log.read(next, u64::MAX, ReadLimits::default()).unwrap();
        if batch.entries.is_empty() {
            return entries;
        }
        next = batch.next_offset;
        entries.extend(batch.entries);
    }
}

/// Every record from `from`, panicking on an unreadable entry.
pub fn read_records(log: &PartitionLog, from: u64) -> Vec<Record> {
    read_all(log, from)
        .into_iter()
        .map(|entry| match entry {
            ReadEntry::Record(record) => record,
            ReadEntry::Unreadable { offsets } => {
                panic!("unexpected unreadable offsets {offsets:?}")
            }
        })
        .collect()
}

/// Whether a read record holds exactly what was committed (time aside).
pub fn same_content(record: &Record, owned: &Owned) -> bool {
    record.key == owned.key && record.payload == owned.payload
}
