//! The completion of one disk operation, awaitable or waitable.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The outcome of a disk operation that may still be running on a storage
/// thread.
///
/// Await it from async code, or call [`Completion::wait`] from a thread that
/// may block. If the backend drops the operation without answering (its
/// thread died), the completion resolves to an error rather than hanging.
#[derive(Debug)]
#[must_use = "a disk operation's outcome must be checked"]
pub struct Completion<T> {
    state: State<T>,
}

#[derive(Debug)]
enum State<T> {
    Ready(Option<io::Result<T>>),
    Waiting(oneshot::Receiver<io::Result<T>>),
}

/// The storage-thread side of a [`Completion`].
#[derive(Debug)]
pub struct CompletionSender<T> {
    sender: oneshot::Sender<io::Result<T>>,
}

impl<T> CompletionSender<T> {
    /// Delivers the outcome. A caller that stopped waiting is not an error.
    pub fn complete(self, result: io::Result<T>) {
        // The receiver may have been dropped (its caller was cancelled); the
        // operation still ran, and nobody is left to tell.
        let _ = self.sender.send(result);
    }
}

impl<T> Completion<T> {
    /// A completion that already holds its outcome (used by synchronous
    /// backends such as the simulated disk).
    pub fn ready(result: io::Result<T>) -> Self {
        Self {
            state: State::Ready(Some(result)),
        }
    }

    /// A pending completion and the sender that will resolve it.
    pub fn channel() -> (CompletionSender<T>, Self) {
        let (sender, receiver) = oneshot::channel();
        (
            CompletionSender { sender },
            Self {
                state: State::Waiting(receiver),
            },
        )
    }

    /// Blocks the current thread until the operation finished.
    ///
    /// # Errors
    /// The operation's own error, or an error if the backend went away
    /// without answering.
    pub fn wait(self) -> io::Result<T> {
        match self.state {
            State::Ready(Some(result)) => result,
            State::Ready(None) => Err(polled_twice()),
            State::Waiting(receiver) => receiver.recv().unwrap_or_else(|_| Err(backend_gone())),
        }
    }
}

impl<T: Unpin> Future for Completion<T> {
    type Output = io::Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // `Completion` holds no self-references, so it is `Unpin` whenever
        // `T` is, and a plain `&mut` is enough.
        let this = Pin::into_inner(self);
        match &mut this.state {
            State::Ready(result) => {
                Poll::Ready(result.take().unwrap_or_else(|| Err(polled_twice())))
            }
            State::Waiting(receiver) => match Pin::new(receiver).poll(cx) {
                Poll::Ready(Ok(result)) => Poll::Ready(result),
                Poll::Ready(Err(_)) => Poll::Ready(Err(backend_gone())),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

fn backend_gone() -> io::Error {
    io::Error::other("the storage thread stopped before completing the operation")
}

fn polled_twice() -> io::Error {
    io::Error::other("a disk completion was polled after it finished")
}
