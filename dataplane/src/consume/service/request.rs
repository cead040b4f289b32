//! What a consume asks for and what it gets, and the service's limits.

use std::sync::Arc;
use std::time::Duration;

use narad_plog::Record;

use crate::consume::release::IDLE_SHARD_RELEASE_DEFAULT;

/// Records one consume returns at most (`max` is clamped to it).
pub const CONSUME_RECORDS_MAX: usize = 100;

/// Default bound on the keys and payloads one consume reserves: 4 MiB.
pub const BATCH_BYTES_MAX_DEFAULT: usize = 4 << 20;

/// Default cap on a long poll (`http.max_consume_wait`): 10 s.
pub const MAX_WAIT_DEFAULT: Duration = Duration::from_secs(10);

/// How the service serves consumes.
#[derive(Clone, Debug)]
pub struct ConsumeConfig {
    /// Longest long poll; longer waits are cut to it.
    pub max_wait: Duration,
    /// A consume stops reserving once the keys and payloads it took reach
    /// this (its first record is always taken).
    pub batch_bytes_max: usize,
    /// `consume.idle_shard_release_ms`: how long a partition's shard may
    /// go unused, with no live lease and no consume parked on its topic,
    /// before the release pass lets it go ([`crate::consume::release`]);
    /// `None` keeps every shard.
    pub idle_shard_release: Option<Duration>,
}

impl Default for ConsumeConfig {
    fn default() -> Self {
        Self {
            max_wait: MAX_WAIT_DEFAULT,
            batch_bytes_max: BATCH_BYTES_MAX_DEFAULT,
            idle_shard_release: Some(IDLE_SHARD_RELEASE_DEFAULT),
        }
    }
}

/// One consume.
#[derive(Clone, Debug)]
pub struct ConsumeRequest {
    /// The topic.
    pub topic: String,
    /// Only this partition, if given.
    pub partition: Option<u32>,
    /// Records wanted at most, `1..=100` (clamped).
    pub max: usize,
    /// How long to wait when nothing is ready (cut to the configured
    /// maximum).
    pub wait: Duration,
}

/// One leased record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Its topic.
    pub topic: Arc<str>,
    /// Its partition.
    pub partition: u32,
    /// The record (its offset included).
    pub record: Record,
    /// The lease's nonce: with partition and offset, the receipt handle.
    pub nonce: u64,
}
