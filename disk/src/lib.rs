//! The Narad disk engine.
//!
//! Every byte Narad stores goes through the [`Disk`] trait, which has three
//! backends:
//!
//! - [`uring::UringDisk`]: storage threads, each owning one io_uring ring,
//!   served over bounded queues, with registered (fixed) buffers for callers
//!   that register them;
//! - [`portable::PortableDisk`]: `pwrite`/`pread`/`fdatasync` on a small
//!   thread pool, for kernels or sandboxes where io_uring cannot be set up;
//! - [`sim::SimDisk`], a simulated disk for tests, which keeps only synced
//!   bytes on a crash, can tear the last write and fails the Nth operation
//!   on demand.
//!
//! [`open_backend`] picks io_uring where the kernel allows it and the
//! portable backend otherwise, and logs which and why.
//!
//! What it guarantees: a write completes only with the kernel's result for
//! all of its bytes (short writes are continued, never ignored); an
//! [`DiskFile::fdatasync`] completes `Ok` only when the kernel said the data
//! is durable. Errors are returned to the caller as they are: this crate never
//! retries an fdatasync, because after a failed one the page cache may already
//! have dropped the dirty pages (the caller latches; see `narad-wal`).
//!
//! What it does not do: it has no idea of frames, records or checksums, and it
//! does no caching of its own beyond the kernel's page cache.
//!
//! Operations are asynchronous: each returns a [`Completion`] that can be
//! awaited from async code or waited on from a plain thread.
//!
//! It also holds [`queue`], the queue between threads whose receivers
//! sleep at once, because every crate that needs it depends on this one
//! and on no other in common.

mod backend;
mod buf;
mod completion;
mod file;
pub mod portable;
pub mod queue;
pub mod sim;
pub mod uring;

pub use backend::{BackendChoice, open_backend};
pub use buf::{IO_ALIGN, IoBuf};
pub use completion::{Completion, CompletionSender};
pub use file::{BackendKind, Disk, DiskFile, FileHandle, OpenOptions, sync_failed, sync_failure};
