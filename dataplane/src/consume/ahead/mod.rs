//! Consumer state that survives restarts: each owned partition's frontier
//! and acked-ahead set, kept in `<partition dir>/consumer.ahead` (two
//! self-checksummed 4 KiB slots) and `<partition dir>/consumer.offset` (the
//! 8-byte frontier).
//!
//! What it guarantees: every position it recovers was once the real position
//! of the partition (every offset it calls settled was settled), so a crash,
//! a torn write or a disk error can only cause redelivery, never the loss of
//! a message. A process crash costs at most the acks of the last tick (the
//! page cache keeps the window slot); a power cut costs at most one tick plus
//! one durability interval; [`ConsumerStateStore::flush_all`] makes every
//! attached position durable.
//!
//! What it does not do: it keeps no leases (they are forgotten on restart by
//! design), it does not decide positions (the in-flight shard does; this
//! module only reads them through [`PositionSource`]), and it never retries a
//! failed write or fdatasync: a partition whose state hit a disk error is
//! latched and written no more until it is attached again.
//!
//! The byte layout, the cadences and why each crash case is safe are in
//! `docs/internals/consumer-state.md`.
//!
//! - `format`: the byte layout of both files and the slot codec;
//! - `position`: what is persisted, and who reports it;
//! - `config`: the cadences and limits;
//! - `recovery` and `cadence`: the pure decisions (what a load
//!   recovers; when a partition is written out);
//! - `store`: the store that attaches partitions and writes them on the
//!   two cadences, failing into [`StateError`];
//! - `peek`: the stored frontier, read without attaching (the partition
//!   poller's lag of a partition no shard serves);
//! - `worker`: the thread that ticks the store.

mod cadence;
mod config;
mod error;
mod format;
mod peek;
mod position;
mod recovery;
mod store;
mod worker;

pub use config::{
    ConsumerStateConfig, DURABLE_INTERVAL_MAX, DURABLE_INTERVAL_MIN, HANDLES_MAX_CAP,
    OFFSET_LEVELS_IN_FLIGHT_MAX, default_handles_max,
};
pub use error::StateError;
pub use format::{
    AHEAD_FILE_BYTES, AHEAD_FILE_NAME, OFFSET_FILE_BYTES, OFFSET_FILE_NAME, SLOT_ACKED_AHEAD_MAX,
    SLOT_BYTES, SLOT_COUNT, SLOT_CRC_BYTES, SLOT_FORMAT_VERSION, SLOT_HEADER_BYTES, SLOT_MAGIC,
    SLOT_SET_BYTES_MAX, SlotError, SlotRecord, decode_slot, encode_slot,
};
pub use peek::{stored_frontier, stored_frontier_of};
pub use position::{ConsumerPosition, OFFSET_LIMIT, PositionSource};
pub use store::{ConsumerStateStore, StateTicket};
pub use worker::StateWorker;

#[cfg(test)]
mod format_tests;
#[cfg(test)]
mod store_tests;
