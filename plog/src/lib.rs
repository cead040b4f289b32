//! The Narad partition log: the only place a message becomes visible.
//!
//! This crate will own the segments and frames of one partition, its sparse
//! offset index, `commit_durable` (append, fdatasync, read back and CRC-check,
//! then advance the high watermark), recovery at open and retention.
//!
//! Guarantee it is built to give: a record below the high watermark was
//! fsynced and verified; nothing above it is ever served; a failed commit
//! leaves no trace.
//!
//! Status: not yet built (see the partition-log issue).
