//! A throwaway PKI for tests: a CA and node certificates it issues, made
//! with rcgen, as PEM text.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::ClusterTls;

/// A CA that issues node certificates.
pub(crate) struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// Its certificate, PEM.
    pub(crate) pem: String,
}

/// A certificate's validity: `notBefore` and `notAfter` as (year, month,
/// day).
pub(crate) type Validity = ((i32, u8, u8), (i32, u8, u8));

/// Valid from 2000 to 2100.
pub(crate) const CURRENT: Validity = ((2000, 1, 1), (2100, 1, 1));
/// Valid in 2000 only: long expired.
pub(crate) const EXPIRED: Validity = ((2000, 1, 1), (2001, 1, 1));

fn dates(params: &mut CertificateParams, ((y0, m0, d0), (y1, m1, d1)): Validity) {
    params.not_before = rcgen::date_time_ymd(y0, m0, d0);
    params.not_after = rcgen::date_time_ymd(y1, m1, d1);
}

impl TestCa {
    /// A self-signed CA named `name`, valid over `validity`.
    pub(crate) fn new(name: &str, validity: Validity) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        dates(&mut params, validity);
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A node certificate and its key (PEM), for server and client use,
    /// valid over `validity`.
    pub(crate) fn issue(&self, validity: Validity) -> (String, String) {
        let mut params =
            CertificateParams::new(vec!["narad-node".to_owned()]).expect("node parameters");
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        dates(&mut params, validity);
        let key = KeyPair::generate().expect("node key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("node certificate");
        (cert.pem(), key.serialize_pem())
    }

    /// A node's TLS material: a certificate this CA issued over `validity`,
    /// trusting `trusted` (the CA's own PEM, usually).
    pub(crate) fn node_tls(&self, validity: Validity, trusted: &str) -> ClusterTls {
        let (cert, key) = self.issue(validity);
        ClusterTls::from_pem(cert.as_bytes(), key.as_bytes(), trusted.as_bytes())
            .expect("TLS material loads")
    }
}
