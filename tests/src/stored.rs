//! What a stopped node stored: every record of a topic's partition logs
//! under a data directory, read with the partition log's own reader, so a
//! test counts exactly what a consumer could be served.

use std::path::Path;
use std::sync::Arc;

use narad_disk::portable::PortableDisk;
use narad_plog::{LogConfig, PartitionLog, ReadEntry, ReadLimits};

/// One stored record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    /// Its partition.
    pub partition: u32,
    /// Its key; empty means none.
    pub key: Vec<u8>,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Every record below the high watermark of partitions `0..partitions` of
/// `topic` under `data_dir`, partition by partition in offset order. A
/// partition without a directory (placed on another node) holds nothing.
///
/// # Panics
/// When a log does not open or read, or holds offsets it cannot serve:
/// after a clean stop, a stored record must read back.
pub fn topic_records(data_dir: &Path, topic: &str, partitions: u32) -> Vec<StoredRecord> {
    let disk = Arc::new(PortableDisk::new(1).expect("disk threads"));
    let mut stored = Vec::new();
    for partition in 0..partitions {
        let dir = data_dir
            .join("topics")
            .join(topic)
            .join(format!("p{partition:05}"));
        if !dir.is_dir() {
            continue;
        }
        let log = PartitionLog::open(
            disk.clone(),
            &dir,
            LogConfig::default(),
            Arc::new(narad_clock::SystemClock::new()),
        )
        .expect("log opens");
        let high_watermark = log.high_watermark();
        let mut from = 0;
        while from < high_watermark {
            let batch = log
                .read(from, high_watermark, ReadLimits::default())
                .expect("read");
            assert!(batch.next_offset > from, "a read makes progress");
            for entry in batch.entries {
                match entry {
                    ReadEntry::Record(record) => stored.push(StoredRecord {
                        partition,
                        key: record.key,
                        payload: record.payload,
                    }),
                    ReadEntry::Unreadable { offsets } => panic!(
                        "{} partition {partition}: unreadable offsets {offsets:?}",
                        dir.display()
                    ),
                }
            }
            from = batch.next_offset;
        }
    }
    stored
}
