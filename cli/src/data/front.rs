//! HTTP front threads: each runs its own single-threaded tokio runtime and
//! serves the connections handed to it, from accept to close.
//!
//! On the shared multi-threaded runtime, a request woken by the WAL's sync
//! thread lands on one worker, and that worker wakes a second one to look
//! for more work; at one producer that costs a thread switch or two per
//! message. A connection that lives on one thread is woken there and
//! nowhere else. The main runtime keeps accepting and hands each accepted
//! socket to the front holding the fewest open connections, so a few long
//! keep-alive connections still spread over the fronts.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use axum::serve::{Listener, ListenerExt};
use tokio::sync::{mpsc, watch};
use tracing::warn;

/// Accepted sockets waiting for a front to take them. A front takes one as
/// soon as its thread runs again, so a short queue is enough; a full queue
/// holds the accept loop back, which is the back-pressure wanted.
const HANDOFF_QUEUE: usize = 64;

/// The most front threads `http.front_threads` may ask for.
pub(crate) const THREADS_MAX: u16 = 256;

/// `http.front_threads` by default: one front per core this process may
/// run on.
pub(crate) fn default_count() -> usize {
    thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// One accepted connection on its way to a front.
struct Handoff {
    stream: std::net::TcpStream,
    peer: SocketAddr,
}

/// The front side of a handoff queue, as axum's listener.
struct HandedOff {
    incoming: mpsc::Receiver<Handoff>,
    local: SocketAddr,
    open: Arc<AtomicUsize>,
}

/// The socket of one connection served by a front; counts itself out of
/// its front's open connections when dropped.
struct FrontStream {
    stream: tokio::net::TcpStream,
    open: Arc<AtomicUsize>,
}

impl Drop for FrontStream {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl tokio::io::AsyncRead for FrontStream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for FrontStream {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl Listener for HandedOff {
    type Io = FrontStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Some(handoff) = self.incoming.recv().await else {
                // The accept loop ended: serve what is open until the
                // shutdown signal, which comes with it.
                std::future::pending::<()>().await;
                unreachable!("a pending future never resolves");
            };
            // Registers the socket with this front's runtime.
            match tokio::net::TcpStream::from_std(handoff.stream) {
                Ok(stream) => {
                    let open = Arc::clone(&self.open);
                    return (FrontStream { stream, open }, handoff.peer);
                }
                Err(error) => {
                    self.open.fetch_sub(1, Ordering::Relaxed);
                    warn!(%error, peer = %handoff.peer, "could not take over an accepted connection");
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// The fronts of one server: where accepted connections go, and the
/// threads serving them.
pub(crate) struct Fronts {
    queues: Vec<(mpsc::Sender<Handoff>, Arc<AtomicUsize>)>,
    threads: Vec<thread::JoinHandle<()>>,
    /// Closed once every front thread has dropped its sender: all ended.
    ended: mpsc::Receiver<()>,
}

/// What a front serves with, and when it stops.
pub(crate) struct FrontPlan {
    /// How many front threads.
    pub(crate) count: usize,
    /// The address connections were accepted on.
    pub(crate) local: SocketAddr,
    /// Turns `true` once the server stops taking connections: fronts then
    /// finish their open requests (axum's graceful shutdown).
    pub(crate) draining: watch::Receiver<bool>,
    /// Turns `true` once the shutdown grace ran out: fronts drop what is
    /// still open.
    pub(crate) abort: watch::Receiver<bool>,
}

impl Fronts {
    /// Starts `plan.count` front threads serving `router`.
    ///
    /// # Errors
    /// A thread or its runtime could not be created.
    pub(crate) fn start(plan: FrontPlan, router: axum::Router) -> std::io::Result<Self> {
        let mut queues = Vec::with_capacity(plan.count);
        let mut threads = Vec::with_capacity(plan.count);
        let (ending, ended) = mpsc::channel(1);
        for index in 0..plan.count {
            let (sender, incoming) = mpsc::channel(HANDOFF_QUEUE);
            let open = Arc::new(AtomicUsize::new(0));
            let listener = HandedOff {
                incoming,
                local: plan.local,
                open: Arc::clone(&open),
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let router = router.clone();
            let draining = plan.draining.clone();
            let abort = plan.abort.clone();
            let ending = ending.clone();
            let thread = thread::Builder::new()
                .name(format!("narad-http-{index}"))
                .spawn(move || {
                    // While this front serves one connection, a produce on
                    // it flushes the WAL here: the thread has nothing else
                    // to do while it waits.
                    narad_wal::flush_inline_while_serving_one(Arc::clone(&listener.open));
                    runtime.block_on(serve_front(listener, router, draining, abort));
                    // Tasks a request spawned and left behind do not hold
                    // the shutdown up.
                    runtime.shutdown_background();
                    drop(ending);
                })?;
            queues.push((sender, open));
            threads.push(thread);
        }
        Ok(Self {
            queues,
            threads,
            ended,
        })
    }

    /// Hands `stream` to the front with the fewest open connections.
    /// Returns `false` when every front has ended.
    pub(crate) async fn hand_off(&self, stream: tokio::net::TcpStream, peer: SocketAddr) -> bool {
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                warn!(%error, %peer, "could not hand an accepted connection to a front");
                return true;
            }
        };
        let Some((queue, open)) = self
            .queues
            .iter()
            .filter(|(queue, _)| !queue.is_closed())
            .min_by_key(|(_, open)| open.load(Ordering::Relaxed))
        else {
            return false;
        };
        open.fetch_add(1, Ordering::Relaxed);
        if queue.send(Handoff { stream, peer }).await.is_err() {
            open.fetch_sub(1, Ordering::Relaxed);
        }
        true
    }

    /// Takes no more connections, then waits until every front thread has
    /// ended: each does once its open connections are done, after the
    /// drain signal, or at the abort signal.
    pub(crate) async fn ended(&mut self) {
        self.queues.clear();
        while self.ended.recv().await.is_some() {}
    }

    /// Joins the front threads, which [`Self::ended`] saw end.
    pub(crate) fn join(self) {
        for thread in self.threads {
            if thread.join().is_err() {
                warn!("an HTTP front thread panicked");
            }
        }
    }
}

async fn serve_front(
    listener: HandedOff,
    router: axum::Router,
    mut draining: watch::Receiver<bool>,
    mut abort: watch::Receiver<bool>,
) {
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    // `tap_io` gives the handed-off listener axum's `SocketAddr` connect
    // info, which it provides for wrapped listeners of that address type.
    let serving =
        axum::serve(listener.tap_io(|_| {}), service).with_graceful_shutdown(async move {
            let _ = draining.wait_for(|draining| *draining).await;
        });
    tokio::select! {
        served = serving.into_future() => {
            if let Err(error) = served {
                warn!(%error, "an HTTP front stopped");
            }
        }
        _ = abort.wait_for(|abort| *abort) => {}
    }
}

#[cfg(test)]
#[path = "front_tests.rs"]
mod tests;
