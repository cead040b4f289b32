//! A UDP relay for cut-off tests: it stands at an address a node is reached
//! at, forwards every datagram to the node and the node's answers back, and
//! can be switched to drop everything (or everything of one client) and
//! back. A QUIC connection through a relay that drops sees what a pulled
//! cable or a dead peer shows: silence, no error. Needs no root and no
//! network namespace; the fault is in the test harness, not in Narad.
//!
//! Each client gets its own upstream socket, so the node sees one stable
//! address per client and its answers find their way back. A client is
//! the source address of the datagrams (a node's cluster socket).

use std::collections::{HashMap, HashSet};
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Largest datagram relayed: the UDP maximum.
const DATAGRAM_BYTES_MAX: usize = 65_535;

/// Clients one relay serves at most; a test cluster has a handful. Datagrams
/// of further clients are dropped and counted.
pub const CLIENTS_MAX: usize = 64;

/// How long a relay thread blocks before it looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// What a relay's threads share.
#[derive(Debug, Default)]
struct Switches {
    /// Drop every datagram, both ways.
    cut: AtomicBool,
    /// Drop every datagram of these clients, both ways.
    cut_clients: Mutex<HashSet<SocketAddr>>,
    stop: AtomicBool,
    forwarded: AtomicU64,
    dropped: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Switches {
    /// Whether a datagram from or to `client` passes now; counts it.
    fn passes(&self, client: SocketAddr) -> bool {
        let passes =
            !self.cut.load(Ordering::Acquire) && !lock(&self.cut_clients).contains(&client);
        let counter = if passes {
            &self.forwarded
        } else {
            &self.dropped
        };
        counter.fetch_add(1, Ordering::Relaxed);
        passes
    }
}

/// A running relay from [`Relay::addr`] to its target; stopped when dropped.
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    target: SocketAddr,
    switches: Arc<Switches>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    /// Starts a relay listening on `listen` that forwards to `target`.
    ///
    /// # Errors
    /// `listen` cannot be bound.
    pub fn start(listen: SocketAddr, target: SocketAddr) -> std::io::Result<Self> {
        let socket = Arc::new(UdpSocket::bind(listen)?);
        socket.set_read_timeout(Some(POLL))?;
        let addr = socket.local_addr()?;
        let switches = Arc::new(Switches::default());
        let threads = Arc::new(Mutex::new(Vec::new()));
        let listener = {
            let (switches, threads) = (Arc::clone(&switches), Arc::clone(&threads));
            std::thread::Builder::new()
                .name(format!("relay-{addr}"))
                .spawn(move || listen_loop(&socket, target, &switches, &threads))?
        };
        lock(&threads).push(listener);
        Ok(Self {
            addr,
            target,
            switches,
            threads,
        })
    }

    /// Where clients send to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the relay forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Drops every datagram from now on, both ways.
    pub fn cut(&self) {
        self.switches.cut.store(true, Ordering::Release);
    }

    /// Forwards again after [`Relay::cut`].
    pub fn heal(&self) {
        self.switches.cut.store(false, Ordering::Release);
    }

    /// Drops every datagram of `client` from now on, both ways.
    pub fn cut_client(&self, client: SocketAddr) {
        lock(&self.switches.cut_clients).insert(client);
    }

    /// Forwards `client`'s datagrams again after [`Relay::cut_client`].
    pub fn heal_client(&self, client: SocketAddr) {
        lock(&self.switches.cut_clients).remove(&client);
    }

    /// Datagrams forwarded so far, both ways.
    pub fn forwarded(&self) -> u64 {
        self.switches.forwarded.load(Ordering::Relaxed)
    }

    /// Datagrams dropped so far, both ways.
    pub fn dropped(&self) -> u64 {
        self.switches.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.switches.stop.store(true, Ordering::Release);
        let threads: Vec<JoinHandle<()>> = lock(&self.threads).drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// Reads what clients send and forwards it through each client's upstream
/// socket, starting a session (socket and answer thread) for a new client.
fn listen_loop(
    socket: &Arc<UdpSocket>,
    target: SocketAddr,
    switches: &Arc<Switches>,
    threads: &Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    let mut upstreams: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
    let mut buf = vec![0_u8; DATAGRAM_BYTES_MAX];
    while !switches.stop.load(Ordering::Acquire) {
        let (len, client) = match socket.recv_from(&mut buf) {
            Ok(received) => received,
            Err(error) if is_timeout(&error) => continue,
            // An ICMP error of an earlier send surfaces here; not fatal.
            Err(_) => continue,
        };
        if !switches.passes(client) {
            continue;
        }
        let upstream = match upstreams.get(&client) {
            Some(upstream) => Arc::clone(upstream),
            None if upstreams.len() >= CLIENTS_MAX => {
                switches.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            None => match open_session(socket, client, target, switches) {
                Some((upstream, thread)) => {
                    lock(threads).push(thread);
                    upstreams.insert(client, Arc::clone(&upstream));
                    upstream
                }
                None => continue,
            },
        };
        // A send error (the node is down) is what a lossy link does too.
        let _ = upstream.send(&buf[..len]);
    }
}

/// A client's upstream socket, connected to `target`, and the thread that
/// carries the node's answers back to the client.
fn open_session(
    socket: &Arc<UdpSocket>,
    client: SocketAddr,
    target: SocketAddr,
    switches: &Arc<Switches>,
) -> Option<(Arc<UdpSocket>, JoinHandle<()>)> {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let upstream = Arc::new(UdpSocket::bind(loopback).ok()?);
    upstream.connect(target).ok()?;
    upstream.set_read_timeout(Some(POLL)).ok()?;
    let thread = {
        let (socket, upstream) = (Arc::clone(socket), Arc::clone(&upstream));
        let switches = Arc::clone(switches);
        std::thread::Builder::new()
            .name(format!("relay-back-{client}"))
            .spawn(move || answer_loop(&socket, &upstream, client, &switches))
            .ok()?
    };
    Some((upstream, thread))
}

fn answer_loop(socket: &UdpSocket, upstream: &UdpSocket, client: SocketAddr, switches: &Switches) {
    let mut buf = vec![0_u8; DATAGRAM_BYTES_MAX];
    while !switches.stop.load(Ordering::Acquire) {
        let len = match upstream.recv(&mut buf) {
            Ok(len) => len,
            Err(error) if is_timeout(&error) => continue,
            // The node's port is closed (it was killed): ICMP says so on a
            // connected socket. Keep listening for its return.
            Err(_) => continue,
        };
        if switches.passes(client) {
            let _ = socket.send_to(&buf[..len], client);
        }
    }
}

fn is_timeout(error: &std::io::Error) -> bool {
    matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    /// A node stand-in that echoes every datagram to its sender.
    fn echo_server() -> (SocketAddr, Arc<AtomicBool>, JoinHandle<()>) {
        let socket = UdpSocket::bind(loopback()).expect("bind");
        socket.set_read_timeout(Some(POLL)).expect("timeout");
        let addr = socket.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut buf = [0_u8; 1_500];
                while !stop.load(Ordering::Acquire) {
                    if let Ok((len, from)) = socket.recv_from(&mut buf) {
                        let _ = socket.send_to(&buf[..len], from);
                    }
                }
            })
        };
        (addr, stop, thread)
    }

    fn client() -> UdpSocket {
        UdpSocket::bind(loopback()).expect("bind")
    }

    /// Sends `body` through the relay; the echo, or `None` if nothing came
    /// back within `wait`.
    fn round_trip(
        client: &UdpSocket,
        relay: &Relay,
        body: &[u8],
        wait: Duration,
    ) -> Option<Vec<u8>> {
        client.set_read_timeout(Some(wait)).expect("timeout");
        client.send_to(body, relay.addr()).expect("send");
        let mut buf = [0_u8; 1_500];
        let (len, from) = client.recv_from(&mut buf).ok()?;
        assert_eq!(from, relay.addr(), "answers come from the relay");
        Some(buf[..len].to_vec())
    }

    /// Generous: an answer that must come.
    fn answer(client: &UdpSocket, relay: &Relay, body: &[u8]) -> Vec<u8> {
        round_trip(client, relay, body, Duration::from_secs(10)).expect("an answer")
    }

    /// Short: a dropped datagram is never answered, so this only bounds
    /// how long the test looks for a wrong answer.
    fn silence(client: &UdpSocket, relay: &Relay, body: &[u8]) -> bool {
        round_trip(client, relay, body, Duration::from_millis(300)).is_none()
    }

    #[test]
    fn forwards_both_ways_until_cut_and_again_after_heal() {
        let (server, stop, thread) = echo_server();
        let relay = Relay::start(loopback(), server).expect("relay");
        let client = client();
        assert_eq!(answer(&client, &relay, b"one"), b"one");
        relay.cut();
        assert!(silence(&client, &relay, b"two"), "dropped");
        relay.heal();
        assert_eq!(answer(&client, &relay, b"three"), b"three");
        assert!(relay.dropped() >= 1);
        stop.store(true, Ordering::Release);
        thread.join().expect("echo server");
    }

    #[test]
    fn cutting_one_client_leaves_the_others_through() {
        let (server, stop, thread) = echo_server();
        let relay = Relay::start(loopback(), server).expect("relay");
        let (cut_off, other) = (client(), client());
        relay.cut_client(cut_off.local_addr().expect("addr"));
        assert!(silence(&cut_off, &relay, b"a"), "dropped");
        assert_eq!(answer(&other, &relay, b"b"), b"b");
        relay.heal_client(cut_off.local_addr().expect("addr"));
        assert_eq!(answer(&cut_off, &relay, b"c"), b"c");
        stop.store(true, Ordering::Release);
        thread.join().expect("echo server");
    }
}
