//! An HTTPS front for a broker: it terminates TLS on a port of its own with
//! a certificate for `127.0.0.1` issued by a CA made at start, and relays
//! each connection's bytes to the broker's plain HTTP port. The remote
//! children bench and test put it before the target cluster, which
//! `narad dev` serves over plain HTTP.
//!
//! The front runs on a Tokio runtime of its own whose threads are named
//! [`THREAD_NAME`], so a benchmark can count the front's CPU apart from the
//! rest of its process ([`crate::cpu::thread_cpu_by_name`]). It outlives
//! the broker behind it: a broker killed and restarted on the same port is
//! reached again through the same URL; while the broker is down,
//! connections through the front are closed at once. It can be started
//! and dropped from inside another Tokio runtime.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdTcpListener};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// The name of every thread of the front's runtime.
pub const THREAD_NAME: &str = "tls-front";
/// Worker threads of the front's runtime.
const WORKERS: usize = 2;

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
    /// # Errors
    /// When the certificate cannot be made, the port not bound or the
    /// runtime not built.
    pub fn start(target_port: u16) -> io::Result<Self> {
        let (ca_pem, chain, key) = certificate().map_err(io::Error::other)?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(io::Error::other)?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .thread_name(THREAD_NAME)
            .enable_all()
            .build()?;
        // Bound here, registered with the front's runtime inside it: this
        // may be called from within another runtime, where block_on cannot.
        let listener = StdTcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        runtime.spawn(async move {
            let Ok(listener) = TcpListener::from_std(listener) else {
                return;
            };
            while let Ok((client, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _ = client.set_nodelay(true);
                    let Ok(mut tls) = acceptor.accept(client).await else {
                        return;
                    };
                    let Ok(mut broker) =
                        TcpStream::connect((Ipv4Addr::LOCALHOST, target_port)).await
                    else {
                        return;
                    };
                    let _ = broker.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut broker).await;
                });
            }
        });
        Ok(Self {
            port,
            ca_pem,
            runtime: Some(runtime),
        })
    }

    /// The base URL of the front.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // Does not block, so it may run inside another runtime.
            runtime.shutdown_background();
        }
    }
}

/// A server certificate chain for `127.0.0.1`, its key, and the CA (PEM)
/// that issued it.
type Issued = (String, Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// A CA and a server certificate for `127.0.0.1` that it issued.
fn certificate() -> Result<Issued, rcgen::Error> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    let chain = vec![cert.der().clone(), ca_cert.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    Ok((ca_cert.pem(), chain, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A TLS client that trusts only `ca_pem`.
    fn client(ca_pem: &str) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile_certs(ca_pem) {
            roots.add(cert).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }

    fn rustls_pemfile_certs(pem: &str) -> Vec<CertificateDer<'static>> {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::pem_slice_iter(pem.as_bytes())
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn bytes_go_through_tls_to_the_plain_port_and_back() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let echo = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
            let echo_port = echo.local_addr().unwrap().port();
            tokio::spawn(async move {
                let (mut stream, _) = echo.accept().await.unwrap();
                let mut buffer = [0u8; 5];
                stream.read_exact(&mut buffer).await.unwrap();
                stream.write_all(&buffer).await.unwrap();
            });
            // Started and dropped inside this runtime, as a bench does.
            let front = TlsFront::start(echo_port).unwrap();
            assert!(front.url().starts_with("https://127.0.0.1:"));
            let tcp = TcpStream::connect((Ipv4Addr::LOCALHOST, front.port))
                .await
                .unwrap();
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let mut tls = client(&front.ca_pem).connect(name, tcp).await.unwrap();
            tls.write_all(b"hello").await.unwrap();
            let mut back = [0u8; 5];
            tls.read_exact(&mut back).await.unwrap();
            assert_eq!(&back, b"hello");
            let threads = crate::cpu::thread_cpu_by_name("self");
            assert!(threads.contains_key(THREAD_NAME), "{threads:?}");
            drop(front);
        });
    }
}
