//! Every size, count and time the transport bounds, named once.
//!
//! The values come from the spec (§7, node RPC wire) unless a comment says
//! otherwise. Timing values are defaults: [`crate::NodeConfig`] lets tests and
//! operators change them.

use std::time::Duration;

/// Largest encoded frame, length prefix included. The spec's cluster frame
/// limit; a batch produce (16 MiB) and a WAL record (≤16 MiB) are sized to it.
pub const FRAME_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Largest frame accepted before a stream has authenticated. The hello is
/// 39 bytes; anything bigger from an unauthenticated peer is refused without
/// reading it, so an attacker cannot make a node buffer data.
pub const PRE_AUTH_FRAME_BYTES_MAX: usize = 64;

/// Requests one stream carries at once, on either side. The client waits for a
/// permit before writing; the server stops reading the stream until a handler
/// finishes, so a single stream cannot grow the server's task count unbounded.
pub const STREAM_REQUESTS_IN_FLIGHT_MAX: usize = 256;

/// Frames queued for one stream's writer task. Small: a full queue pushes back
/// on the callers, which is what bounds the memory held in unsent frames.
pub const STREAM_OUTGOING_FRAMES_MAX: usize = 64;

/// Bidirectional streams a peer may hold open on one connection: every lane's
/// pool (52 streams) plus headroom for streams being replaced.
pub const CONNECTION_STREAMS_MAX: u32 = 128;

/// Connections a node accepts at once; more are refused at the handshake.
pub const CONNECTIONS_INCOMING_MAX: usize = 1024;

/// Peers one node keeps a connection to. A cluster is far smaller; the limit
/// only stops a bug from growing the table without end.
pub const PEERS_MAX: usize = 4096;

/// Permits of the messaging operation class (produce commits, forwarded
/// consume, ack): the spec's max(64, 4 × cores).
pub fn messaging_permits() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    64_usize.max(4 * cores)
}

/// Permits of the partition transfer class (segment listing and chunk fetch):
/// the spec runs 8 at a time so moves never starve client traffic.
pub const TRANSFER_PERMITS: usize = 8;

/// Default time a `call` waits for its answer, dial and handshake included:
/// the spec's default reply timeout for callers without a deadline.
pub const CALL_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

/// Time a QUIC dial may take before the call fails (spec: peer dial 1 s).
pub const DIAL_TIMEOUT_DEFAULT: Duration = Duration::from_secs(1);

/// First wait before dialling a peer again after a dial failed (spec: peer
/// dial failure backoff from 250 ms), doubling per failure.
pub const DIAL_BACKOFF_MIN: Duration = Duration::from_millis(250);

/// Longest wait between dials of a failing peer (spec: up to 2 s): short
/// enough that a restarted peer is found again within a couple of seconds.
pub const DIAL_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Time an accepted stream has to prove the secret before it is dropped, so
/// silent streams do not pin server tasks.
pub const AUTH_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

/// Time a stream's writer has for one frame, before the per-size allowance
/// below (spec: server reply write 5 s + 1 s per 256 KiB). A peer that stops
/// reading would otherwise pin the writer, and behind it every handler with
/// an answer queued for that stream.
pub const WRITE_TIMEOUT_BASE: Duration = Duration::from_secs(5);

/// Extra write time per [`WRITE_TIMEOUT_CHUNK_BYTES`] of frame.
pub const WRITE_TIMEOUT_PER_CHUNK: Duration = Duration::from_secs(1);

/// Frame bytes that earn one [`WRITE_TIMEOUT_PER_CHUNK`].
pub const WRITE_TIMEOUT_CHUNK_BYTES: usize = 256 * 1024;

/// A call that ran out its deadline makes the client ping the peer, at most
/// once per this interval per connection (spec: ≤1/s), so a storm of timeouts
/// does not become a storm of pings.
pub const LIVENESS_PING_INTERVAL: Duration = Duration::from_secs(1);

/// Time the liveness ping has. If it expires and not one datagram arrived
/// from the peer meanwhile, the connection is closed and the next call
/// re-dials (spec: drop only if no pong within 1 s and nothing else arrived).
pub const LIVENESS_PING_TIMEOUT: Duration = Duration::from_secs(1);

/// A connection with no packets for this long is closed. Keep-alives (below)
/// keep healthy idle connections open; a vanished peer is noticed in time.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Interval of QUIC keep-alive packets; a third of the idle timeout so two can
/// be lost without closing a healthy connection.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_millis(3_300);

const _: () = assert!(DIAL_BACKOFF_MIN.as_millis() < DIAL_BACKOFF_MAX.as_millis());
const _: () = assert!(PRE_AUTH_FRAME_BYTES_MAX < FRAME_BYTES_MAX);
const _: () = assert!(FRAME_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!(KEEP_ALIVE_INTERVAL.as_millis() * 3 <= IDLE_TIMEOUT.as_millis());
