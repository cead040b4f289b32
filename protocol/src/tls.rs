//! TLS and QUIC configuration: the `ring` provider, the node's certificate,
//! how a peer's certificate is checked, and the stateless-reset key.
//!
//! Two modes, chosen by [`crate::NodeConfig::tls`]:
//! - without cluster TLS files, each process makes a fresh P-256
//!   self-signed certificate at start and checks no peer certificate:
//!   nodes share a secret, not a PKI, so there is nothing to pin and no CA
//!   to trust. Authentication happens on every stream in `auth`, bound to
//!   this TLS session by its exporter;
//! - with them ([`ClusterTls`]), mutual TLS on top of that proof: the node
//!   shows its CA-issued certificate, the server requires a client
//!   certificate that chains to the CA (rustls' `WebPkiClientVerifier`),
//!   and the client requires the server's to chain to it
//!   (`server_verifier`, which says why no server name is checked).
//!
//! Either way the handshake signature is checked, so the peer holds the key
//! of the certificate it shows and the session's keys are its own.

use std::sync::Arc;

use hmac::{Hmac, Mac};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use sha2::Sha256;

use crate::auth::ClusterAuth;
use crate::cluster_tls::ClusterTls;
use crate::server_verifier::PeerCertificateVerifier;

/// ALPN of the cluster plane; a peer speaking anything else fails the
/// TLS handshake.
pub const ALPN: &[u8] = b"narad-cluster-quic-v2";

/// Server name sent when dialling. Certificates are not checked against it
/// (`server_verifier` says why).
pub const SERVER_NAME: &str = "narad-node";

const RESET_KEY_LABEL: &[u8] = b"narad-quic-stateless-reset-v1";
const CID_KEY_LABEL: &[u8] = b"narad-quic-connection-id-v1";

/// Why the TLS or QUIC configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsSetupError {
    /// The certificate could not be generated.
    #[error("self-signed certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("rustls configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// quinn refused the rustls configuration (no TLS 1.3 suite it can use).
    #[error("QUIC crypto configuration: {0}")]
    Quic(String),
    /// The client-certificate verifier could not be built from the CA.
    #[error("cluster CA: {0}")]
    ClientVerifier(String),
}

/// Installs `ring` as the process's rustls provider, if no provider is
/// installed yet. The transport never relies on it (it passes the `ring`
/// provider to every configuration it builds); installing it keeps any other
/// rustls user in the process off a provider chosen by feature accident.
pub fn install_ring_provider() {
    // Err means a provider was already installed; that is not this crate's
    // business, since its own configurations name `ring` explicitly.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server side of the QUIC crypto: with `tls`, its certificate and a
/// required client certificate chaining to its CA; without, a fresh
/// self-signed certificate and no client certificate.
pub(crate) fn server_crypto(tls: Option<&ClusterTls>) -> Result<QuicServerConfig, TlsSetupError> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let mut config = match tls {
        Some(tls) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(tls.roots(), provider())
                .build()
                .map_err(|error| TlsSetupError::ClientVerifier(error.to_string()))?;
            builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(tls.chain(), tls.key())?
        }
        None => {
            let certified = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_owned()])?;
            let cert = certified.cert.der().clone();
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                certified.signing_key.serialize_der(),
            ));
            builder
                .with_no_client_auth()
                .with_single_cert(vec![cert], key)?
        }
    };
    config.alpn_protocols = vec![ALPN.to_vec()];
    QuicServerConfig::try_from(config).map_err(|error| TlsSetupError::Quic(error.to_string()))
}

/// The client side of the QUIC crypto: with `tls`, the server's certificate
/// must chain to its CA and this node shows its own; without, any server
/// certificate and none of its own.
pub(crate) fn client_crypto(tls: Option<&ClusterTls>) -> Result<QuicClientConfig, TlsSetupError> {
    let provider = provider();
    let algorithms = provider.signature_verification_algorithms;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous();
    let mut config = match tls {
        Some(tls) => builder
            .with_custom_certificate_verifier(Arc::new(PeerCertificateVerifier::chained_to(
                algorithms,
                tls.roots(),
            )))
            .with_client_auth_cert(tls.chain(), tls.key())?,
        None => builder
            .with_custom_certificate_verifier(Arc::new(PeerCertificateVerifier::any(algorithms)))
            .with_no_client_auth(),
    };
    config.alpn_protocols = vec![ALPN.to_vec()];
    QuicClientConfig::try_from(config).map_err(|error| TlsSetupError::Quic(error.to_string()))
}

/// The key QUIC signs stateless-reset tokens with.
///
/// Derived from the cluster secret, so a node restarted on the same address
/// issues the same tokens as before and its peers' stale connections are
/// reset at their next packet instead of waiting out the idle timeout. In
/// insecure dev mode it is derived from a fixed label: there is nothing to
/// protect there.
pub(crate) fn reset_key(auth: &ClusterAuth) -> Arc<dyn quinn::crypto::HmacKey> {
    let key = match auth {
        ClusterAuth::Secret(secret) => secret.derive(RESET_KEY_LABEL),
        ClusterAuth::InsecureDevOnly => sha256(RESET_KEY_LABEL),
    };
    Arc::new(ResetKey(key))
}

/// Makes the connection IDs this endpoint issues: 8 bytes, with a keyed check
/// so the endpoint can tell its own IDs from noise.
///
/// The key is derived like the reset key, so a restarted node recognises the
/// IDs its predecessor issued. That matters: quinn answers a packet for an
/// unknown connection with a stateless reset only when the packet's ID passes
/// this check; with a fresh random key (quinn's default) the restarted node
/// would drop the packet and the peer would wait out its idle timeout.
pub(crate) fn connection_id_generator(
    auth: &ClusterAuth,
) -> impl Fn() -> Box<dyn quinn::ConnectionIdGenerator> + Send + Sync + 'static {
    let material = match auth {
        ClusterAuth::Secret(secret) => secret.derive(CID_KEY_LABEL),
        ClusterAuth::InsecureDevOnly => sha256(CID_KEY_LABEL),
    };
    let mut key_bytes = [0_u8; 8];
    key_bytes.copy_from_slice(&material[..8]);
    let key = u64::from_be_bytes(key_bytes);
    move || Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(key))
}

fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    Sha256::digest(data).into()
}

/// HMAC-SHA256 under a 32-byte key, in the shape quinn wants.
struct ResetKey([u8; 32]);

impl ResetKey {
    fn mac(&self, data: &[u8]) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!());
        mac.update(data);
        mac
    }
}

impl quinn::crypto::HmacKey for ResetKey {
    fn sign(&self, data: &[u8], signature_out: &mut [u8]) {
        let tag = self.mac(data).finalize().into_bytes();
        let len = signature_out.len().min(tag.len());
        signature_out[..len].copy_from_slice(&tag[..len]);
    }

    fn signature_len(&self) -> usize {
        32
    }

    fn verify(&self, data: &[u8], signature: &[u8]) -> Result<(), quinn::crypto::CryptoError> {
        self.mac(data)
            .verify_slice(signature)
            .map_err(|_| quinn::crypto::CryptoError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::ClusterSecret;

    fn token(auth: &ClusterAuth, cid: &[u8]) -> Vec<u8> {
        let key = reset_key(auth);
        let mut out = vec![0_u8; key.signature_len()];
        key.sign(cid, &mut out);
        out
    }

    fn secret(byte: u8) -> ClusterAuth {
        ClusterAuth::Secret(ClusterSecret::new(vec![byte; 32]).expect("32 bytes"))
    }

    #[test]
    fn reset_tokens_survive_a_restart_and_differ_between_clusters() {
        // Two keys built apart, as by a node before and after a restart.
        assert_eq!(token(&secret(1), b"cid-1"), token(&secret(1), b"cid-1"));
        assert_ne!(token(&secret(1), b"cid-1"), token(&secret(2), b"cid-1"));
        assert_ne!(token(&secret(1), b"cid-1"), token(&secret(1), b"cid-2"));
    }

    #[test]
    fn reset_key_verifies_its_own_tokens_only() {
        let key = reset_key(&secret(1));
        let good = token(&secret(1), b"cid");
        assert!(key.verify(b"cid", &good).is_ok());
        assert!(key.verify(b"cid", &token(&secret(2), b"cid")).is_err());
    }

    #[test]
    fn configurations_build_with_the_ring_provider() {
        install_ring_provider();
        server_crypto(None).expect("server crypto");
        client_crypto(None).expect("client crypto");
    }
}
