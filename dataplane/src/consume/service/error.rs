//! Why a consume, a replay or a settle was refused.

/// Why a consume was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumeError {
    /// No such topic.
    #[error("topic not found")]
    TopicNotFound,
    /// The pinned partition does not exist.
    #[error("partition {partition} out of range: topic has {count} partitions")]
    PartitionOutOfRange {
        /// The partition asked for.
        partition: u32,
        /// The topic's partition count.
        count: u32,
    },
    /// The pinned partition is not owned by this node.
    #[error("partition {partition} is owned by another node")]
    OwnerUnavailable {
        /// The partition asked for.
        partition: u32,
    },
    /// Reading a partition log failed.
    #[error("consume failed: {0}")]
    Read(String),
}

/// Why a replay was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// No such topic.
    #[error("topic not found")]
    TopicNotFound,
    /// The partition does not exist.
    #[error("partition {partition} out of range: topic has {count} partitions")]
    PartitionOutOfRange {
        /// The partition asked for.
        partition: u32,
        /// The topic's partition count.
        count: u32,
    },
    /// Retention deleted the offset.
    #[error("offset {offset} aged out of retention")]
    Gone {
        /// The offset asked for.
        offset: u64,
    },
    /// The record is damaged on disk.
    #[error("offset {offset} is unreadable")]
    Unreadable {
        /// The offset asked for.
        offset: u64,
    },
    /// The partition is not owned by this node.
    #[error("partition {partition} is owned by another node")]
    OwnerUnavailable {
        /// The partition asked for.
        partition: u32,
    },
    /// Reading the partition log failed.
    #[error("replay failed: {0}")]
    Read(String),
}

/// Why an ack, extend or nack was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettleError {
    /// No such topic.
    #[error("topic not found")]
    TopicNotFound,
    /// The handle names no live lease (lapsed, settled already, leased
    /// again, or an unknown partition).
    #[error("receipt handle no longer matches an active reservation")]
    LeaseGone,
    /// The partition is not owned by this node.
    #[error("partition {partition} is owned by another node")]
    OwnerUnavailable {
        /// The handle's partition.
        partition: u32,
    },
    /// Never returned: a settle does no I/O. The HTTP layer maps it
    /// to `500` and the forward service to `503`.
    #[error("settle failed: {0}")]
    Read(String),
}
