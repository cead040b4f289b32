//! The cluster TLS settings every node command that joins a cluster takes
//! (`narad control`, `narad data`; `narad dev` runs on loopback without
//! them): `security.cluster_tls_{cert,key,ca}_file`, all three or none,
//! read once at start, and `security.allow_plaintext_raft`.
//!
//! The rule ([`require_cluster_tls`]): a secured node (one that proves a
//! cluster secret) that shares its cluster plane (it has peers, or its
//! `cluster.addr` is not a loopback address) refuses to start without the
//! three files unless `security.allow_plaintext_raft` is true. QUIC
//! encrypts every connection either way; without the files no peer
//! certificate is verified and the secret alone authenticates, which is
//! what "plaintext Raft" means in the spec.

use std::net::SocketAddr;
use std::path::PathBuf;

use narad_protocol::{ClusterTls, ClusterTlsError, TlsFile};

use super::layered::shared::{
    ALLOW_PLAINTEXT_RAFT, CLUSTER_TLS_CA_FILE, CLUSTER_TLS_CERT_FILE, CLUSTER_TLS_KEY_FILE,
};
use super::layered::{ConfigError, Merged, parse_bool, parse_data_dir};

/// Why a secured node's cluster plane is shared with others, so that the
/// secret alone would guard it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// It has peers (several control nodes; any data node).
    Peers,
    /// A single node whose cluster socket listens beyond loopback.
    NonLoopback(SocketAddr),
    /// A single node on loopback: nothing else reaches its plane.
    Loopback,
}

impl Exposure {
    /// A node with `peers` cluster members besides itself, bound at
    /// `cluster_addr`.
    pub fn of(peers: usize, cluster_addr: SocketAddr) -> Self {
        if peers > 0 {
            Self::Peers
        } else if cluster_addr.ip().is_loopback() {
            Self::Loopback
        } else {
            Self::NonLoopback(cluster_addr)
        }
    }
}

/// The TLS material the three file settings name, read now; `None` when
/// none is set.
///
/// # Errors
/// One or two of the three set (naming the first one missing), or a file
/// that cannot be read or does not hold what it must (naming its setting).
pub fn resolve_cluster_tls(merged: &Merged) -> Result<Option<ClusterTls>, ConfigError> {
    let path = |setting| merged.parse(setting, Some(None), |v| parse_data_dir(v).map(Some));
    let cert: Option<PathBuf> = path(CLUSTER_TLS_CERT_FILE)?;
    let key: Option<PathBuf> = path(CLUSTER_TLS_KEY_FILE)?;
    let ca: Option<PathBuf> = path(CLUSTER_TLS_CA_FILE)?;
    match (cert, key, ca) {
        (None, None, None) => Ok(None),
        (Some(cert), Some(key), Some(ca)) => ClusterTls::read(&cert, &key, &ca)
            .map(Some)
            .map_err(|error| file_error(merged, &error)),
        (cert, key, _) => {
            let missing = if cert.is_none() {
                CLUSTER_TLS_CERT_FILE
            } else if key.is_none() {
                CLUSTER_TLS_KEY_FILE
            } else {
                CLUSTER_TLS_CA_FILE
            };
            Err(merged.error(
                missing,
                "required with the other cluster TLS files: set security.cluster_tls_cert_file, \
                 security.cluster_tls_key_file and security.cluster_tls_ca_file together, or none",
            ))
        }
    }
}

/// `error` as the error of the setting that names its file.
fn file_error(merged: &Merged, error: &ClusterTlsError) -> ConfigError {
    let setting = match error.file {
        TlsFile::Certificate => CLUSTER_TLS_CERT_FILE,
        TlsFile::Key => CLUSTER_TLS_KEY_FILE,
        TlsFile::Ca => CLUSTER_TLS_CA_FILE,
    };
    merged.error(setting, error.reason.clone())
}

/// Refuses a secured, exposed node without cluster TLS files unless
/// `security.allow_plaintext_raft` is true (module docs).
///
/// # Errors
/// That refusal, naming `security.cluster_tls_cert_file` and
/// `security.allow_plaintext_raft`; or an unparseable
/// `security.allow_plaintext_raft`.
pub fn require_cluster_tls(
    merged: &Merged,
    secured: bool,
    exposure: Exposure,
    tls: Option<&ClusterTls>,
) -> Result<(), ConfigError> {
    let allow_plaintext = merged.parse(ALLOW_PLAINTEXT_RAFT, Some(false), parse_bool)?;
    if !secured || tls.is_some() || allow_plaintext {
        return Ok(());
    }
    let why = match exposure {
        Exposure::Loopback => return Ok(()),
        Exposure::Peers => "this secured node has cluster peers".to_owned(),
        Exposure::NonLoopback(addr) => {
            format!("this secured node's cluster.addr {addr} is not a loopback address")
        }
    };
    Err(merged.error(
        CLUSTER_TLS_CERT_FILE,
        format!(
            "required: {why}, and without mutual TLS only the cluster secret would guard its \
             cluster plane; set security.cluster_tls_cert_file, security.cluster_tls_key_file \
             and security.cluster_tls_ca_file (NARAD_CLUSTER_TLS_CERT_FILE, _KEY_FILE, \
             _CA_FILE), or security.allow_plaintext_raft=true (NARAD_ALLOW_PLAINTEXT_RAFT) to \
             run on the secret alone"
        ),
    ))
}
