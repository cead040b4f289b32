//! An HTTPS front for a test broker: it terminates TLS on a port of its
//! own with a certificate for `127.0.0.1` issued by a CA made in the test,
//! and relays each connection's bytes to the broker's plain HTTP port.
//! The front outlives the broker behind it, so a broker killed and
//! restarted on the same port is reached again through the same URL; while
//! the broker is down, connections through the front are closed at once.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// A running front; stops when dropped.
#[derive(Debug)]
pub struct TlsFront {
    /// The port clients reach it at (`https://127.0.0.1:<port>`).
    pub port: u16,
    /// The CA that issued its certificate, PEM: what a client pins.
    pub ca_pem: String,
    runtime: Option<tokio::runtime::Runtime>,
}

impl TlsFront {
    /// A front on a free port relaying to `127.0.0.1:<target_port>`.
    ///
    /// # Panics
    /// If the certificate cannot be made or the port not bound.
    pub fn start(target_port: u16) -> Self {
        let (ca_pem, chain, key) = certificate();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server certificate");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = runtime
            .block_on(TcpListener::bind(SocketAddr::from((
                Ipv4Addr::LOCALHOST,
                0,
            ))))
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(client).await else {
                        return;
                    };
                    let Ok(mut broker) =
                        TcpStream::connect((Ipv4Addr::LOCALHOST, target_port)).await
                    else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut broker).await;
                });
            }
        });
        Self {
            port,
            ca_pem,
            runtime: Some(runtime),
        }
    }

    /// The base URL of the front.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A CA (PEM) and a server certificate chain and key for `127.0.0.1` that
/// it issued.
fn certificate() -> (String, Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().expect("CA key");
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("parameters");
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &issuer).expect("certificate");
    let chain = vec![cert.der().clone(), ca_cert.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    (ca_cert.pem(), chain, key)
}
