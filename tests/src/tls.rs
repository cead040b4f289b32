//! A throwaway PKI for cluster tests with mutual TLS: a CA and a node
//! certificate it issued, written as PEM files into a temporary directory,
//! and the environment that points a `narad control` or `narad data` at
//! them.
//!
//! Every process of a test cluster shows the same node certificate: a node
//! checks only that a peer's certificate chains to the CA and is valid now,
//! never its name (docs/operations.md, "Mutual TLS between nodes").

use std::path::{Path, PathBuf};

use narad_protocol::ClusterTls;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Unix seconds of 2100-01-01T00:00:00Z, the `notAfter` of a current
/// certificate here.
pub const YEAR_2100_S: i64 = 4_102_444_800;
/// Unix seconds of 2001-01-01T00:00:00Z, the `notAfter` of an expired one.
pub const YEAR_2001_S: i64 = 978_307_200;

/// Whether the node certificate is valid now or long expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeCertificate {
    /// Valid from 2000 to 2100.
    Current,
    /// Valid in 2000 only.
    Expired,
}

/// A CA and a node certificate, as PEM files in a directory of their own.
#[derive(Debug)]
pub struct TestPki {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    _dir: tempfile::TempDir,
}

fn validity(params: &mut CertificateParams, from: i32, to: i32) {
    params.not_before = rcgen::date_time_ymd(from, 1, 1);
    params.not_after = rcgen::date_time_ymd(to, 1, 1);
}

impl TestPki {
    /// A CA valid to 2100 and a node certificate it issued (for server and
    /// client use), `node` as asked.
    ///
    /// # Panics
    /// If a key or certificate cannot be made or written.
    pub fn new(node: NodeCertificate) -> Self {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "narad test cluster CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut ca_params, 2000, 2100);
        let ca_key = KeyPair::generate().expect("CA key");
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);

        let mut params =
            CertificateParams::new(vec!["narad-node".to_owned()]).expect("node parameters");
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        match node {
            NodeCertificate::Current => validity(&mut params, 2000, 2100),
            NodeCertificate::Expired => validity(&mut params, 2000, 2001),
        }
        let key = KeyPair::generate().expect("node key");
        let cert = params.signed_by(&key, &issuer).expect("node certificate");

        let dir = tempfile::tempdir().expect("temporary directory");
        let write = |name: &str, pem: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).expect("PEM file written");
            path
        };
        Self {
            cert: write("node.crt", cert.pem()),
            key: write("node.key", key.serialize_pem()),
            ca: write("ca.crt", ca_cert.pem()),
            _dir: dir,
        }
    }

    /// The certificate, key and CA files.
    pub fn files(&self) -> [&Path; 3] {
        [&self.cert, &self.key, &self.ca]
    }

    /// The variables that give a node the three files; with them it needs
    /// no `security.allow_plaintext_raft`, so that is set false.
    pub fn env(&self) -> Vec<(String, String)> {
        let path = |path: &Path| path.to_string_lossy().into_owned();
        vec![
            ("NARAD_CLUSTER_TLS_CERT_FILE".into(), path(&self.cert)),
            ("NARAD_CLUSTER_TLS_KEY_FILE".into(), path(&self.key)),
            ("NARAD_CLUSTER_TLS_CA_FILE".into(), path(&self.ca)),
            ("NARAD_ALLOW_PLAINTEXT_RAFT".into(), "false".into()),
        ]
    }

    /// The material loaded, for a test's own cluster transport.
    ///
    /// # Panics
    /// If it does not load.
    pub fn cluster_tls(&self) -> ClusterTls {
        ClusterTls::read(&self.cert, &self.key, &self.ca).expect("test TLS material loads")
    }
}
