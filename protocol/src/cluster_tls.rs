//! The cluster's mutual-TLS material: this node's certificate chain and
//! private key, and the CA every node's certificate must chain to. It is
//! read once at start from the PEM files that
//! `security.cluster_tls_{cert,key,ca}_file` name; a node never reloads it.
//!
//! What loading checks: each file holds what it must (the certificate file
//! one or more certificates, this node's first; the key file a private key;
//! the CA file one or more CA certificates), the key belongs to the
//! certificate, and every certificate parses as X.509 so its expiry is
//! known ([`CertificateExpiry`]).
//!
//! What it does not check: that the certificate chains to the CA or is
//! valid now. Every peer checks that at every handshake (see `tls`), and
//! the expiry is exported (`narad_raft_tls_cert_not_after_seconds`) and
//! turns `/readyz` to 503 once past ([`CertificateExpiry::expired`]).
//! Nor does it check that the files are private (mode 0600): that is the
//! operator's.

use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// Largest PEM file read. A node certificate with its chain, a key, or a
/// CA bundle is a few KiB; a file far larger is the wrong file.
pub const PEM_FILE_BYTES_MAX: u64 = 1 << 20;

/// A cluster TLS certificate past its `notAfter`: a reason `/readyz`
/// answers 503 (listed under `degraded`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// This node's certificate: peers refuse it at every handshake.
    Certificate,
    /// A CA certificate of the CA file. webpki checks no trust anchor's
    /// dates, so handshakes still pass, but the CA is due for replacement.
    Ca,
}

impl Expired {
    /// Its code in `/readyz`'s `degraded` list (the spec's).
    pub fn code(self) -> &'static str {
        match self {
            Self::Certificate => "raft_tls_certificate_expired",
            Self::Ca => "raft_tls_ca_expired",
        }
    }

    /// What it means, for `/readyz`'s `error`.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Certificate => {
                "this node's cluster TLS certificate (security.cluster_tls_cert_file) has expired"
            }
            Self::Ca => "a cluster CA certificate (security.cluster_tls_ca_file) has expired",
        }
    }
}

/// Which of the three files a problem is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    /// `security.cluster_tls_cert_file`: this node's certificate (chain).
    Certificate,
    /// `security.cluster_tls_key_file`: its private key.
    Key,
    /// `security.cluster_tls_ca_file`: the cluster's CA certificate(s).
    Ca,
}

impl fmt::Display for TlsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Certificate => "certificate file",
            Self::Key => "key file",
            Self::Ca => "CA file",
        })
    }
}

/// Why the TLS material could not be loaded: the file, and what is wrong
/// with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {reason}")]
pub struct ClusterTlsError {
    /// The file at fault.
    pub file: TlsFile,
    /// What is wrong, for the operator.
    pub reason: String,
}

impl ClusterTlsError {
    fn new(file: TlsFile, reason: impl Into<String>) -> Self {
        Self {
            file,
            reason: reason.into(),
        }
    }
}

/// When the certificates expire, as Unix seconds (X.509 `notAfter`, the
/// last second they are valid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CertificateExpiry {
    /// This node's certificate (the first of the certificate file).
    pub leaf_not_after_s: i64,
    /// The CA certificate of the CA file that expires first.
    pub ca_not_after_s: i64,
}

impl CertificateExpiry {
    /// What is past its `notAfter` at `now_unix_s` (this node's
    /// certificate first, then the CA); empty while both are valid.
    pub fn expired(&self, now_unix_s: i64) -> Vec<Expired> {
        let mut expired = Vec::new();
        if now_unix_s > self.leaf_not_after_s {
            expired.push(Expired::Certificate);
        }
        if now_unix_s > self.ca_not_after_s {
            expired.push(Expired::Ca);
        }
        expired
    }
}

/// This node's certificate chain and key, and the cluster's CA, checked
/// as the module docs say. Cloning shares them.
#[derive(Clone)]
pub struct ClusterTls {
    chain: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
    roots: Arc<RootCertStore>,
    expiry: CertificateExpiry,
}

impl fmt::Debug for ClusterTls {
    /// Never prints the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterTls")
            .field("chain", &self.chain.len())
            .field("roots", &self.roots.len())
            .field("expiry", &self.expiry)
            .finish_non_exhaustive()
    }
}

impl ClusterTls {
    /// Reads the three PEM files (each at most [`PEM_FILE_BYTES_MAX`]) and
    /// loads them as [`ClusterTls::from_pem`] does.
    ///
    /// # Errors
    /// A file that cannot be read, is too large, or does not hold what it
    /// must; the error names which.
    pub fn read(cert: &Path, key: &Path, ca: &Path) -> Result<Self, ClusterTlsError> {
        let cert_pem = read_pem_file(TlsFile::Certificate, cert)?;
        let key_pem = read_pem_file(TlsFile::Key, key)?;
        let ca_pem = read_pem_file(TlsFile::Ca, ca)?;
        Self::from_pem(&cert_pem, &key_pem, &ca_pem)
    }

    /// Loads the material from PEM text: the certificate chain (this
    /// node's certificate first), its private key, and the CA
    /// certificate(s).
    ///
    /// # Errors
    /// What the module docs say loading checks, naming the file at fault.
    pub fn from_pem(
        cert_pem: &[u8],
        key_pem: &[u8],
        ca_pem: &[u8],
    ) -> Result<Self, ClusterTlsError> {
        let chain = certificates(TlsFile::Certificate, cert_pem)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|error| {
            ClusterTlsError::new(TlsFile::Key, format!("no PEM private key: {error}"))
        })?;
        let ca = certificates(TlsFile::Ca, ca_pem)?;
        let mut roots = RootCertStore::empty();
        for cert in &ca {
            roots.add(cert.clone()).map_err(|error| {
                ClusterTlsError::new(TlsFile::Ca, format!("not a usable CA certificate: {error}"))
            })?;
        }
        let leaf_not_after_s = not_after(TlsFile::Certificate, &chain[0])?;
        let mut ca_not_after_s = i64::MAX;
        for cert in &ca {
            ca_not_after_s = ca_not_after_s.min(not_after(TlsFile::Ca, cert)?);
        }
        let provider = rustls::crypto::ring::default_provider();
        CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider).map_err(|error| {
            ClusterTlsError::new(
                TlsFile::Key,
                format!("does not match the certificate: {error}"),
            )
        })?;
        Ok(Self {
            chain,
            key: Arc::new(key),
            roots: Arc::new(roots),
            expiry: CertificateExpiry {
                leaf_not_after_s,
                ca_not_after_s,
            },
        })
    }

    /// When the certificates expire.
    pub fn expiry(&self) -> CertificateExpiry {
        self.expiry
    }

    /// This node's certificate chain, its own certificate first.
    pub(crate) fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.chain.clone()
    }

    /// A copy of the private key.
    pub(crate) fn key(&self) -> PrivateKeyDer<'static> {
        self.key.clone_key()
    }

    /// The CA certificates peers' certificates must chain to.
    pub(crate) fn roots(&self) -> Arc<RootCertStore> {
        Arc::clone(&self.roots)
    }
}

/// The bytes of `path`, refused over [`PEM_FILE_BYTES_MAX`].
fn read_pem_file(file: TlsFile, path: &Path) -> Result<Vec<u8>, ClusterTlsError> {
    let opened = std::fs::File::open(path)
        .map_err(|error| ClusterTlsError::new(file, format!("{}: {error}", path.display())))?;
    let mut bytes = Vec::new();
    opened
        .take(PEM_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| ClusterTlsError::new(file, format!("{}: {error}", path.display())))?;
    if bytes.len() as u64 > PEM_FILE_BYTES_MAX {
        return Err(ClusterTlsError::new(
            file,
            format!(
                "{}: larger than {PEM_FILE_BYTES_MAX} bytes; not a PEM certificate or key",
                path.display()
            ),
        ));
    }
    Ok(bytes)
}

/// Every `CERTIFICATE` block of `pem`; at least one.
fn certificates(
    file: TlsFile,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, ClusterTlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| ClusterTlsError::new(file, format!("unreadable PEM: {error}")))?;
    if certs.is_empty() {
        return Err(ClusterTlsError::new(file, "holds no PEM CERTIFICATE block"));
    }
    Ok(certs)
}

/// The certificate's `notAfter`, Unix seconds.
fn not_after(file: TlsFile, cert: &CertificateDer<'_>) -> Result<i64, ClusterTlsError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|error| {
        ClusterTlsError::new(file, format!("not an X.509 certificate: {error}"))
    })?;
    Ok(parsed.validity().not_after.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_pki::{CURRENT, EXPIRED, TestCa};

    /// 2100-01-01T00:00:00Z and 2001-01-01T00:00:00Z.
    const YEAR_2100_S: i64 = 4_102_444_800;
    const YEAR_2001_S: i64 = 978_307_200;

    #[test]
    fn expiry_is_read_from_the_certificate_and_the_ca() {
        let ca = TestCa::new("cluster CA", CURRENT);
        let (cert, key) = ca.issue(EXPIRED);
        let tls = ClusterTls::from_pem(cert.as_bytes(), key.as_bytes(), ca.pem.as_bytes())
            .expect("loads");
        assert_eq!(
            tls.expiry(),
            CertificateExpiry {
                leaf_not_after_s: YEAR_2001_S,
                ca_not_after_s: YEAR_2100_S,
            }
        );
    }

    #[test]
    fn the_ca_expiry_is_the_earliest_of_the_ca_file() {
        let ca = TestCa::new("cluster CA", CURRENT);
        let old = TestCa::new("old CA", EXPIRED);
        let (cert, key) = ca.issue(CURRENT);
        let bundle = format!("{}{}", ca.pem, old.pem);
        let tls = ClusterTls::from_pem(cert.as_bytes(), key.as_bytes(), bundle.as_bytes())
            .expect("loads");
        assert_eq!(tls.expiry().ca_not_after_s, YEAR_2001_S);
        assert_eq!(tls.roots().len(), 2);
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_naming_the_key_file() {
        let ca = TestCa::new("cluster CA", CURRENT);
        let (cert, _) = ca.issue(CURRENT);
        let (_, other_key) = ca.issue(CURRENT);
        let error = ClusterTls::from_pem(cert.as_bytes(), other_key.as_bytes(), ca.pem.as_bytes())
            .expect_err("refused");
        assert_eq!(error.file, TlsFile::Key);
        assert!(error.reason.contains("does not match"), "{error}");
    }

    #[test]
    fn a_file_without_its_pem_block_is_refused_naming_it() {
        let ca = TestCa::new("cluster CA", CURRENT);
        let (cert, key) = ca.issue(CURRENT);
        let cases = [
            (
                key.as_str(),
                key.as_str(),
                ca.pem.as_str(),
                TlsFile::Certificate,
            ),
            (cert.as_str(), cert.as_str(), ca.pem.as_str(), TlsFile::Key),
            (cert.as_str(), key.as_str(), "", TlsFile::Ca),
        ];
        for (cert, key, ca, file) in cases {
            let error = ClusterTls::from_pem(cert.as_bytes(), key.as_bytes(), ca.as_bytes())
                .expect_err("refused");
            assert_eq!(error.file, file, "{error}");
        }
    }

    #[test]
    fn a_missing_or_oversize_file_is_refused_naming_it() {
        let temp = tempfile::tempdir().expect("temporary directory");
        let dir = temp.path();
        let ca = TestCa::new("cluster CA", CURRENT);
        let (cert, key) = ca.issue(CURRENT);
        let cert_path = dir.join("node.crt");
        let key_path = dir.join("node.key");
        let ca_path = dir.join("ca.crt");
        std::fs::write(&cert_path, cert).expect("written");
        std::fs::write(&key_path, key).expect("written");
        std::fs::write(&ca_path, &ca.pem).expect("written");
        ClusterTls::read(&cert_path, &key_path, &ca_path).expect("loads");
        let missing = dir.join("missing.key");
        let error = ClusterTls::read(&cert_path, &missing, &ca_path).expect_err("refused");
        assert_eq!(error.file, TlsFile::Key);
        assert!(error.reason.contains("missing.key"), "{error}");
        let huge = dir.join("huge.crt");
        let size = usize::try_from(PEM_FILE_BYTES_MAX).expect("fits") + 1;
        std::fs::write(&huge, vec![b'A'; size]).expect("written");
        let error = ClusterTls::read(&cert_path, &key_path, &huge).expect_err("refused");
        assert_eq!(error.file, TlsFile::Ca);
        assert!(error.reason.contains("larger than"), "{error}");
    }

    #[test]
    fn expired_names_each_certificate_past_its_not_after() {
        let expiry = CertificateExpiry {
            leaf_not_after_s: 100,
            ca_not_after_s: 200,
        };
        assert!(expiry.expired(100).is_empty(), "valid through notAfter");
        assert_eq!(expiry.expired(101), vec![Expired::Certificate]);
        assert_eq!(expiry.expired(201), vec![Expired::Certificate, Expired::Ca]);
        assert_eq!(Expired::Certificate.code(), "raft_tls_certificate_expired");
        assert_eq!(Expired::Ca.code(), "raft_tls_ca_expired");
    }
}
