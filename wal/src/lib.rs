//! The ingress write-ahead log of a Narad data node.
//!
//! This crate will own the segmented, append-only log that every accepted
//! produce is written to before its `202`: frames with dense sequence numbers,
//! group commit, segment preparation, the dispatch checkpoint, compaction, and
//! recovery at open.
//!
//! Guarantee it is built to give: an append that returned `Ok` survives any
//! crash, and recovery never yields a torn or invented record.
//!
//! It does not decide where records go: the dispatcher in `narad-dataplane`
//! reads them back and commits them to partition owners.
//!
//! Status: not yet built (see the disk-engine and WAL issue).

pub mod checkpoint;
pub mod record;
