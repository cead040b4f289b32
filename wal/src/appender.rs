//! Threads that flush their own appends while they serve nothing else.
//!
//! An HTTP front thread serves the connections handed to it and nothing
//! else. While it serves one, the producer on that connection waits for its
//! own append, and the thread has nothing to do in the meantime: blocking it
//! on the flush holds no one up, and saves the hand-off to the sync loop and
//! the wake-up back. With a second connection open, a flush on the thread
//! would hold that connection up behind the disk, so the sync loop flushes.
//!
//! A thread opts in with a count of what it serves; an append on it flushes
//! inline when the count reads 1 and the log is idle, exactly as every
//! append does under `WalOptions::inline_flush`.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

thread_local! {
    static SERVED: RefCell<Option<Arc<AtomicUsize>>> = const { RefCell::new(None) };
}

/// Marks the calling thread as one that serves only what `served` counts
/// (a front thread's open connections): from now on, an append made on it
/// while `served` reads 1 and the log is idle is written and synced on this
/// thread before the append returns.
pub fn flush_inline_while_serving_one(served: Arc<AtomicUsize>) {
    SERVED.with(|cell| *cell.borrow_mut() = Some(served));
}

/// Whether the calling thread opted in and serves exactly one thing now:
/// the appender's own request.
pub(crate) fn serves_only_the_appender() -> bool {
    SERVED.with(|cell| {
        cell.borrow()
            .as_ref()
            .is_some_and(|served| served.load(Ordering::Relaxed) == 1)
    })
}
