//! How a dialling node checks the certificate of the node it dials.
//!
//! Without cluster TLS files a node shows a fresh self-signed certificate
//! (see `tls`), so there is nothing to check it against: any certificate is
//! accepted and the stream's HMAC proof (`auth`) authenticates the peer.
//!
//! With them ([`crate::cluster_tls::ClusterTls`]) the certificate must chain
//! to the cluster's CA, be within its validity period, and allow server use
//! (its extended key usage, when it has one, includes `serverAuth`): webpki
//! decides all three, as rustls' own verifier does. The server name is not
//! checked. Nodes dial each other by address (`cluster.peers`, registered
//! RPC addresses), and those addresses change with NAT, relays and
//! rescheduled pods; a certificate bound to one would break a node that
//! moved. The CA is the cluster's own, so a certificate it issued names a
//! member of the cluster whatever its name, which is all the server side
//! checks of a client too (`WebPkiClientVerifier` checks no name). Both
//! sides still check the TLS 1.3 handshake signature, so the peer holds the
//! key of the certificate it shows, and every stream still proves the
//! cluster secret.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, RootCertStore};

/// The dialling side's check of the server's certificate (module docs).
#[derive(Debug)]
pub(crate) struct PeerCertificateVerifier {
    algorithms: WebPkiSupportedAlgorithms,
    /// The cluster's CA; `None` accepts any certificate.
    ca: Option<Arc<RootCertStore>>,
}

impl PeerCertificateVerifier {
    /// Accepts any certificate whose handshake signature holds: the HMAC
    /// proof authenticates.
    pub(crate) fn any(algorithms: WebPkiSupportedAlgorithms) -> Self {
        Self {
            algorithms,
            ca: None,
        }
    }

    /// Accepts a certificate that chains to `ca`, as the module docs say.
    pub(crate) fn chained_to(
        algorithms: WebPkiSupportedAlgorithms,
        ca: Arc<RootCertStore>,
    ) -> Self {
        Self {
            algorithms,
            ca: Some(ca),
        }
    }
}

impl ServerCertVerifier for PeerCertificateVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(ca) = &self.ca {
            let cert = ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_cert_signed_by_trust_anchor(
                &cert,
                ca,
                intermediates,
                now,
                self.algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
