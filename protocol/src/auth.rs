//! Stream authentication: each stream proves the shared cluster secret,
//! both ways, before it carries a single request.
//!
//! Without cluster TLS files certificates are self-signed and not verified
//! (see `tls`), and the proof is what authenticates; with them it still runs,
//! on top of mutual TLS. Both sides export 32 bytes of keying material from the
//! connection's TLS session (RFC 5705/8446 exporter, label
//! [`EXPORTER_LABEL`]) and send `HMAC-SHA256(secret, role label || ekm)`.
//! The exporter is unique to one TLS session, so a proof is worthless on any
//! other connection: a man in the middle holds two sessions with two
//! different exports and can relay neither proof.
//!
//! The client speaks first. It sends nothing more until the server has
//! proved the secret in turn, so a server without the secret learns nothing
//! but a proof it cannot use elsewhere. A proof is an offline guessing oracle
//! for the secret, which is why [`ClusterSecret`] requires at least
//! [`CLUSTER_SECRET_BYTES_MIN`] bytes.
//!
//! The hello, the only pre-auth frame (39 bytes, under the 64-byte pre-auth
//! limit):
//!
//! ```text
//! offset  size  field
//!      0     4  length   u32 BE = 35
//!      4     1  version  AUTH_VERSION (1)
//!      5     1  role     1 client, 2 server
//!      6     1  scheme   0 none (insecure dev mode), 1 HMAC-SHA256 over the exporter
//!      7    32  proof    the HMAC; zeros with scheme 0
//! ```

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::codec::{DecodeError, Reader, Writer};
use crate::limits::PRE_AUTH_FRAME_BYTES_MAX;
use crate::wire::{WireError, read_frame, write_frame};

/// Exporter label of the keying material the proofs are bound to.
pub const EXPORTER_LABEL: &[u8] = b"narad-cluster-auth-v1";

/// Bytes exported from the TLS session for the proofs.
pub const EXPORTER_BYTES: usize = 32;

/// Shortest cluster secret accepted. A proof lets whoever receives it test
/// guesses offline, so the secret must be too large to guess: 16 random bytes
/// is the floor, 32 the recommendation.
pub const CLUSTER_SECRET_BYTES_MIN: usize = 16;

/// Version byte of the hello.
pub const AUTH_VERSION: u8 = 1;

const PROOF_BYTES: usize = 32;
const HELLO_BODY_BYTES: usize = 1 + 1 + 1 + PROOF_BYTES;
const _: () = assert!(4 + HELLO_BODY_BYTES <= PRE_AUTH_FRAME_BYTES_MAX);

const CLIENT_ROLE_LABEL: &[u8] = b"narad-cluster-client";
const SERVER_ROLE_LABEL: &[u8] = b"narad-cluster-server";

type HmacSha256 = Hmac<Sha256>;

/// The secret every node of a cluster shares. Its bytes are never printed.
#[derive(Clone)]
pub struct ClusterSecret(Vec<u8>);

impl ClusterSecret {
    /// Wraps the secret's bytes.
    ///
    /// # Errors
    /// [`SecretTooShort`] if it has fewer than [`CLUSTER_SECRET_BYTES_MIN`] bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, SecretTooShort> {
        let bytes = bytes.into();
        if bytes.len() < CLUSTER_SECRET_BYTES_MIN {
            return Err(SecretTooShort { len: bytes.len() });
        }
        Ok(Self(bytes))
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length; this cannot fail.
        <HmacSha256 as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!())
    }

    /// A key derived from the secret for another purpose, named by `label`.
    pub(crate) fn derive(&self, label: &[u8]) -> [u8; 32] {
        let mut mac = self.mac();
        mac.update(label);
        mac.finalize().into_bytes().into()
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterSecret({} bytes, redacted)", self.0.len())
    }
}

/// A secret shorter than [`CLUSTER_SECRET_BYTES_MIN`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the cluster secret has {len} bytes; at least {CLUSTER_SECRET_BYTES_MIN} are required (32 random bytes recommended)"
)]
pub struct SecretTooShort {
    /// Length of the secret given.
    pub len: usize,
}

/// How the cluster plane authenticates. There is no default: a node must say
/// which it wants.
#[derive(Debug, Clone)]
pub enum ClusterAuth {
    /// Every stream proves this secret, both ways.
    Secret(ClusterSecret),
    /// No proof at all: anyone who reaches the port is served. Only for
    /// `narad dev` on loopback. Peers must agree: a node with a secret refuses
    /// a peer in this mode, and the other way round.
    InsecureDevOnly,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Client,
    Server,
}

impl Role {
    fn tag(self) -> u8 {
        match self {
            Role::Client => 1,
            Role::Server => 2,
        }
    }

    fn label(self) -> &'static [u8] {
        match self {
            Role::Client => CLIENT_ROLE_LABEL,
            Role::Server => SERVER_ROLE_LABEL,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    None,
    HmacSha256Exporter,
}

impl Scheme {
    fn of(auth: &ClusterAuth) -> Self {
        match auth {
            ClusterAuth::Secret(_) => Scheme::HmacSha256Exporter,
            ClusterAuth::InsecureDevOnly => Scheme::None,
        }
    }

    fn tag(self) -> u8 {
        match self {
            Scheme::None => 0,
            Scheme::HmacSha256Exporter => 1,
        }
    }
}

/// The first and only frame each side sends before the stream is trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hello {
    role_tag: u8,
    scheme_tag: u8,
    proof: [u8; PROOF_BYTES],
}

impl Hello {
    fn encode(&self) -> Bytes {
        let mut writer = Writer::with_capacity(4 + HELLO_BODY_BYTES);
        writer.u32(HELLO_BODY_BYTES as u32);
        writer.u8(AUTH_VERSION);
        writer.u8(self.role_tag);
        writer.u8(self.scheme_tag);
        for byte in self.proof {
            writer.u8(byte);
        }
        writer.finish()
    }

    fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut reader = Reader::new(bytes);
        let version = reader.u8("hello version")?;
        if version != AUTH_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                what: "hello",
                found: version,
                supported: AUTH_VERSION,
            });
        }
        let role_tag = reader.u8("hello role")?;
        let scheme_tag = reader.u8("hello scheme")?;
        let proof_bytes = reader.fixed("hello proof", PROOF_BYTES)?;
        reader.finish()?;
        let mut proof = [0_u8; PROOF_BYTES];
        proof.copy_from_slice(&proof_bytes);
        Ok(Self {
            role_tag,
            scheme_tag,
            proof,
        })
    }
}

/// Why a stream did not authenticate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// This node has a secret and the peer runs in insecure dev mode.
    #[error("peer runs without a cluster secret (insecure dev mode); this node requires one")]
    PeerHasNoSecret,
    /// This node is in insecure dev mode and the peer has a secret.
    #[error("peer requires a cluster secret; this node runs in insecure dev mode")]
    PeerRequiresSecret,
    /// The peer's proof does not match: it holds another secret, or none.
    #[error("peer failed to prove the cluster secret")]
    WrongProof,
    /// The peer refused this node's proof (it reset the stream with the auth code).
    #[error("peer refused this node's proof of the cluster secret")]
    RefusedByPeer,
    /// The hello has a wrong role or scheme byte, or is malformed.
    #[error("malformed hello: {0}")]
    Malformed(#[from] DecodeError),
    /// The hello could not be read or written.
    #[error("hello could not be exchanged: {0}")]
    Wire(#[from] WireError),
    /// The peer sent no hello in time.
    #[error("no hello within {0:?}")]
    Timeout(Duration),
    /// The TLS exporter refused (it cannot for 32 bytes; kept for honesty).
    #[error("the TLS session would not export keying material")]
    Exporter,
}

fn proof(secret: &ClusterSecret, role: Role, ekm: &[u8; EXPORTER_BYTES]) -> [u8; PROOF_BYTES] {
    let mut mac = secret.mac();
    mac.update(role.label());
    mac.update(ekm);
    mac.finalize().into_bytes().into()
}

fn hello(auth: &ClusterAuth, role: Role, ekm: &[u8; EXPORTER_BYTES]) -> Hello {
    let proof = match auth {
        ClusterAuth::Secret(secret) => proof(secret, role, ekm),
        ClusterAuth::InsecureDevOnly => [0; PROOF_BYTES],
    };
    Hello {
        role_tag: role.tag(),
        scheme_tag: Scheme::of(auth).tag(),
        proof,
    }
}

/// Checks a peer's hello: the expected role, the same scheme, and under a
/// secret a proof that verifies in constant time.
fn check(
    auth: &ClusterAuth,
    peer_role: Role,
    ekm: &[u8; EXPORTER_BYTES],
    hello: &Hello,
) -> Result<(), AuthError> {
    if hello.role_tag != peer_role.tag() {
        return Err(DecodeError::InvalidValue {
            field: "hello role",
            value: u64::from(hello.role_tag),
        }
        .into());
    }
    let ours = Scheme::of(auth);
    match (ours, hello.scheme_tag) {
        (Scheme::HmacSha256Exporter, 1) | (Scheme::None, 0) => {}
        (Scheme::HmacSha256Exporter, 0) => return Err(AuthError::PeerHasNoSecret),
        (Scheme::None, 1) => return Err(AuthError::PeerRequiresSecret),
        (_, other) => {
            return Err(DecodeError::InvalidValue {
                field: "hello scheme",
                value: u64::from(other),
            }
            .into());
        }
    }
    let ClusterAuth::Secret(secret) = auth else {
        return Ok(());
    };
    let mut mac = secret.mac();
    mac.update(peer_role.label());
    mac.update(ekm);
    mac.verify_slice(&hello.proof)
        .map_err(|_| AuthError::WrongProof)
}

async fn read_hello<R: AsyncRead + Unpin>(
    recv: &mut R,
    timeout: Duration,
) -> Result<Hello, AuthError> {
    let read = tokio::time::timeout(timeout, read_frame(recv, PRE_AUTH_FRAME_BYTES_MAX));
    let bytes = read.await.map_err(|_| AuthError::Timeout(timeout))??;
    let bytes = bytes.ok_or(WireError::EndedInsideFrame)?;
    Ok(Hello::decode(bytes)?)
}

async fn write_hello<W: AsyncWrite + Unpin>(send: &mut W, hello: &Hello) -> Result<(), AuthError> {
    write_frame(send, &hello.encode())
        .await
        .map_err(|error| AuthError::Wire(WireError::Io(error)))
}

/// The client's half: send our proof, then require the server's.
pub(crate) async fn client_handshake<R, W>(
    auth: &ClusterAuth,
    ekm: &[u8; EXPORTER_BYTES],
    send: &mut W,
    recv: &mut R,
    timeout: Duration,
) -> Result<(), AuthError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    write_hello(send, &hello(auth, Role::Client, ekm)).await?;
    let answer = read_hello(recv, timeout).await?;
    check(auth, Role::Server, ekm, &answer)
}

/// The server's half: require the client's proof, then send ours. Nothing is
/// sent to a client whose proof fails.
pub(crate) async fn server_handshake<R, W>(
    auth: &ClusterAuth,
    ekm: &[u8; EXPORTER_BYTES],
    send: &mut W,
    recv: &mut R,
    timeout: Duration,
) -> Result<(), AuthError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let offer = read_hello(recv, timeout).await?;
    check(auth, Role::Client, ekm, &offer)?;
    write_hello(send, &hello(auth, Role::Server, ekm)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TIMEOUT: Duration = Duration::from_secs(5);

    fn secret(byte: u8) -> ClusterAuth {
        ClusterAuth::Secret(ClusterSecret::new(vec![byte; 32]).expect("long enough"))
    }

    async fn run(
        client: ClusterAuth,
        client_ekm: [u8; 32],
        server: ClusterAuth,
        server_ekm: [u8; 32],
    ) -> (Result<(), AuthError>, Result<(), AuthError>) {
        let (client_io, server_io) = tokio::io::duplex(256);
        let (mut client_recv, mut client_send) = tokio::io::split(client_io);
        let (mut server_recv, mut server_send) = tokio::io::split(server_io);
        let server_side = tokio::spawn(async move {
            let outcome = server_handshake(
                &server,
                &server_ekm,
                &mut server_send,
                &mut server_recv,
                TIMEOUT,
            )
            .await;
            drop(server_send);
            outcome
        });
        let client_outcome = client_handshake(
            &client,
            &client_ekm,
            &mut client_send,
            &mut client_recv,
            TIMEOUT,
        )
        .await;
        (client_outcome, server_side.await.expect("server task"))
    }

    #[tokio::test]
    async fn same_secret_and_session_authenticates_both_ways() {
        let (client, server) = run(secret(1), [9; 32], secret(1), [9; 32]).await;
        client.expect("client accepts server");
        server.expect("server accepts client");
    }

    #[tokio::test]
    async fn wrong_secret_is_refused_by_the_server_and_nothing_is_sent_back() {
        let (client, server) = run(secret(1), [9; 32], secret(2), [9; 32]).await;
        assert!(matches!(server, Err(AuthError::WrongProof)));
        assert!(
            matches!(client, Err(AuthError::Wire(WireError::EndedInsideFrame))),
            "{client:?}"
        );
    }

    #[tokio::test]
    async fn proof_from_another_session_is_refused() {
        // What a relaying man in the middle has: the right secret's proof,
        // bound to the wrong TLS session.
        let (_, server) = run(secret(1), [9; 32], secret(1), [8; 32]).await;
        assert!(matches!(server, Err(AuthError::WrongProof)));
    }

    #[tokio::test]
    async fn secured_node_refuses_an_insecure_peer_and_the_reverse() {
        let (_, server) = run(ClusterAuth::InsecureDevOnly, [9; 32], secret(1), [9; 32]).await;
        assert!(matches!(server, Err(AuthError::PeerHasNoSecret)));
        let (_, server) = run(secret(1), [9; 32], ClusterAuth::InsecureDevOnly, [9; 32]).await;
        assert!(matches!(server, Err(AuthError::PeerRequiresSecret)));
    }

    #[tokio::test]
    async fn insecure_peers_agree_without_a_secret() {
        let (client, server) = run(
            ClusterAuth::InsecureDevOnly,
            [1; 32],
            ClusterAuth::InsecureDevOnly,
            [2; 32],
        )
        .await;
        client.expect("client");
        server.expect("server");
    }

    #[test]
    fn short_secret_is_refused_and_debug_hides_the_bytes() {
        assert_eq!(
            ClusterSecret::new(vec![1; 15]).expect_err("short"),
            SecretTooShort { len: 15 }
        );
        let secret = ClusterSecret::new(b"0123456789abcdef".to_vec()).expect("16 bytes");
        assert_eq!(format!("{secret:?}"), "ClusterSecret(16 bytes, redacted)");
    }

    #[test]
    fn hello_round_trips() {
        let hello = Hello {
            role_tag: 2,
            scheme_tag: 1,
            proof: [7; 32],
        };
        let encoded = hello.encode();
        assert_eq!(encoded.len(), 39);
        assert_eq!(Hello::decode(encoded.slice(4..)).expect("decodes"), hello);
    }

    proptest! {
        #[test]
        fn hello_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = Hello::decode(Bytes::from(bytes));
        }

        #[test]
        fn any_hello_round_trips(role_tag in any::<u8>(), scheme_tag in any::<u8>(), proof in any::<[u8; 32]>()) {
            let hello = Hello { role_tag, scheme_tag, proof };
            let encoded = hello.encode();
            prop_assert_eq!(encoded.len(), 4 + HELLO_BODY_BYTES);
            prop_assert_eq!(Hello::decode(encoded.slice(4..)).expect("decodes"), hello);
        }
    }
}
