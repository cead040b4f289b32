//! The ingress write-ahead log of a Narad data node.
//!
//! Every accepted produce is appended here, and fdatasynced, before its
//! `202`. The log is a directory of segments (`<base seq>.wal`) holding
//! checksummed frames with dense sequence numbers; appenders stage frames
//! into a shared buffer and a dedicated sync loop makes them durable with
//! one write and one fdatasync for everyone staged meanwhile (group commit).
//!
//! What it guarantees:
//! - an append that returned `Ok` survives any crash: it was acknowledged
//!   only after the fdatasync covering it completed;
//! - recovery never yields a torn or invented record: a torn tail of the
//!   last segment is cut, and any other damage fails the open loudly;
//! - sequence numbers are dense and strictly increasing across segments, and
//!   a batch keeps a prefix through a crash, never a gap;
//! - after a write or fdatasync error the log refuses every append with the
//!   same error until it is reopened ([`Wal::is_failed`]).
//!
//! What it does not do: it does not know what a record means (frame
//! payloads are opaque; [`record`] encodes produces), and it does not decide
//! where records go: the dispatcher in `narad-dataplane` reads them back
//! ([`WalReader`]), commits them, stores the checkpoint and calls
//! [`Wal::compact`] behind the synced checkpoint.
//!
//! The byte layout, the commit protocol and why each crash case is safe are
//! in `docs/internals/wal.md`.
//!
//! ```
//! use std::sync::Arc;
//! use narad_disk::sim::SimDisk;
//! use narad_wal::{Wal, WalOptions};
//!
//! # fn main() -> Result<(), narad_wal::WalError> {
//! let wal = Wal::open(Arc::new(SimDisk::new(1)), "/wal", WalOptions::default())?;
//! // Accept path: stage, then wait (or `.await`) for the group commit.
//! let seqs = wal.append(b"hello")?.wait()?;
//! assert_eq!(seqs, 0..1);
//! // Dispatcher: read what is durable, then wait on the frontier for more.
//! let mut reader = wal.reader(0)?;
//! while let Some(frame) = reader.next_frame()? {
//!     assert_eq!((frame.seq, frame.payload), (0, &b"hello"[..]));
//! }
//! assert_eq!(wal.durable_watch().next_durable_seq(), 1);
//! # Ok(())
//! # }
//! ```

mod appender;
pub mod compaction;
mod direct;
mod error;
pub mod frame;
mod log;
mod notify;
mod options;
pub mod origin;
mod prep;
mod reader;
mod recent;
mod recovery;
pub mod segment;
mod staging;
mod sync_loop;

pub mod checkpoint;
pub mod record;

pub use appender::flush_inline_while_serving_one;
pub use checkpoint::{CheckpointConfig, CheckpointError, CheckpointStore};
pub use compaction::{Choice, Compaction};
pub use error::{FailedOp, FillError, IoFailure, WalError};
pub use log::{Wal, WorkerPanics};
pub use notify::{DurableWatch, FrontierChange, FrontierChanged, Pending};
pub use options::{
    COMPACT_ROTATE_BYTES_DEFAULT, PREP_RUN_BYTES_MAX, SEGMENT_BYTES_DEFAULT,
    STAGED_BYTES_MAX_DEFAULT, STAGING_BUFFER_BYTES_DEFAULT, WalOptions,
};
pub use origin::Origins;
pub use reader::{Frame, WalReader};
pub use record::{RecordError, WalRecord, WalRecordRef};
