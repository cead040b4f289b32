//! Remotes and remote-child links (spec §1.10 and §4, v3.2): what the
//! metastore keeps of another Narad cluster a parent ships to.
//!
//! A remote's password never enters the metastore in the clear: the node
//! that received it seals it under a key derived from the cluster secret and
//! the cluster's remote-key salt (kept here), and only the sealed bytes are
//! proposed. The metastore treats them as opaque; opening them is the data
//! node's business (`narad_remotes::seal`).
//!
//! A remote child is a stub topic (no partitions, a parent link like any
//! child's) plus a [`RemoteLink`] filed under the stub's name: which
//! remote, which topic there, how many lanes, where shipping started, and
//! the operator's pause and skips.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::ids::RemoteId;

/// Whether a remote's requests carry a zstd-compressed body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Bodies go as they are.
    #[default]
    None,
    /// A body is compressed when that saves at least a tenth of it and the
    /// target says it takes zstd.
    Zstd,
}

impl Compression {
    /// The name the API uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Zstd => "zstd",
        }
    }
}

/// A remote's connection limits (the spec's `limits` object), already
/// checked against their ranges by the proposer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteLimits {
    /// Requests in flight to this remote per node.
    pub max_in_flight: u32,
    /// One request's deadline.
    pub request_timeout_ms: u64,
    /// An idle connection is closed after this long.
    pub idle_conn_timeout_ms: u64,
    /// A connection is not reused once this old.
    pub conn_max_age_ms: u64,
    /// How often each node re-checks the remote (±20 % jitter).
    pub check_interval_ms: u64,
    /// Whether bodies may be compressed.
    pub compression: Compression,
}

impl Default for RemoteLimits {
    /// The spec's defaults.
    fn default() -> Self {
        Self {
            max_in_flight: 16,
            request_timeout_ms: 30_000,
            idle_conn_timeout_ms: 30_000,
            conn_max_age_ms: 300_000,
            check_interval_ms: 60_000,
            compression: Compression::None,
        }
    }
}

/// A password as the metastore holds it: sealed bytes and who set it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedPassword {
    /// The version of the cluster remote key it was sealed under.
    pub key_version: u32,
    /// The id of that key (derived from the key, not the secret), so a node
    /// knows whether its current or its previous secret opens it.
    pub key_id: String,
    /// Nonce, ciphertext and tag, as the sealer wrote them. Opaque here.
    pub sealed: Vec<u8>,
    /// A one-way fingerprint of the password, for display.
    pub fingerprint: String,
    /// When it was set (Unix ms, the proposer's clock).
    pub set_at_ms: u64,
    /// Who set it.
    pub set_by: String,
}

impl fmt::Debug for SealedPassword {
    /// Never prints the sealed bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealedPassword")
            .field("key_version", &self.key_version)
            .field("key_id", &self.key_id)
            .field("sealed_bytes", &self.sealed.len())
            .field("fingerprint", &self.fingerprint)
            .field("set_at_ms", &self.set_at_ms)
            .field("set_by", &self.set_by)
            .finish()
    }
}

/// The cluster's remote key: what every node derives the sealing key from
/// with the cluster secret. Set with the first remote; a re-encryption under
/// a new secret moves it to the next version and keeps the salt.
///
/// Two keys are the same key when [`RemoteKey::same_key`] says so: the
/// time a key was minted is a record about it, not part of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteKey {
    /// 1 for the first key, then one more per re-encryption under a new
    /// secret.
    pub version: u32,
    /// The id of the key derived from the current secret and the salt.
    pub key_id: String,
    /// Random bytes minted by the proposer of the first remote.
    pub salt: Vec<u8>,
    /// When this version was minted (Unix ms, the proposer's clock: the
    /// first remote's add, or the re-encryption that moved to it). `None`
    /// when unknown: a key recorded by a build before this field (state
    /// version 4, or a re-encryption proposed as command version 2 or 3)
    /// keeps no time, and `narad_remote_key_age_seconds` is not served for
    /// it until a re-encryption under a new secret mints the next version.
    #[serde(default)]
    pub created_at_ms: Option<u64>,
}

impl RemoteKey {
    /// Whether `other` is the same key: same version, id and salt, whenever
    /// either was minted or whether its mint time is known.
    pub fn same_key(&self, other: &Self) -> bool {
        self.version == other.version && self.key_id == other.key_id && self.salt == other.salt
    }
}

/// A remote: another Narad cluster and the credential this cluster uses to
/// produce to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remote {
    /// Unique; `^[a-z][a-z0-9-]{0,62}$`.
    pub name: String,
    /// Minted per create.
    pub id: RemoteId,
    /// The target's base URL (https).
    pub url: String,
    /// The replicator user on the target.
    pub username: String,
    /// The replicator's password, sealed.
    pub password: SealedPassword,
    /// One more each time the password (or what it opens: url, username, CA)
    /// changes; nodes open the password once per version.
    pub credential_version: u64,
    /// A pinned CA bundle (PEM); `None` = the public roots.
    pub ca_pem: Option<String>,
    /// Connection limits.
    pub limits: RemoteLimits,
    /// One more per change; an edit may name the revision it read.
    pub revision: u64,
    /// When it was added (Unix ms, the proposer's clock).
    pub created_at_ms: u64,
    /// Who added it.
    pub created_by: String,
}

/// Where a remote child's shipping starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoteFrom {
    /// Records committed after the attach.
    #[default]
    Attach,
    /// Records the parent's consumers have not acknowledged yet.
    Unconsumed,
    /// Every record the parent still holds.
    Earliest,
}

impl RemoteFrom {
    /// The name the API uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::Attach => "attach",
            Self::Unconsumed => "unconsumed",
            Self::Earliest => "earliest",
        }
    }

    /// The value of a name the API takes.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "attach" => Some(Self::Attach),
            "unconsumed" => Some(Self::Unconsumed),
            "earliest" => Some(Self::Earliest),
            _ => None,
        }
    }
}

/// An operator's pause of a remote child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemotePause {
    /// Printable text, at most 256 bytes.
    pub reason: String,
    /// When (Unix ms, the proposer's clock).
    pub at_ms: u64,
    /// Who paused it (`""` with security off, which remotes never are).
    pub by: String,
}

/// A remote child's link, filed under the stub topic's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteLink {
    /// The remote's name.
    pub remote: String,
    /// The remote's id when the link was made: a remote deleted and added
    /// again under the name is another remote.
    pub remote_id: RemoteId,
    /// The topic on the remote cluster.
    pub remote_topic: String,
    /// The target topic's incarnation id seen by the attach's checks, when
    /// the target reports one; a different one later is `target_replaced`.
    pub target_id: Option<String>,
    /// 1 to 8 ordered lanes.
    pub lanes: u8,
    /// Where shipping started.
    pub from: RemoteFrom,
    /// Set while an operator holds it.
    pub paused: Option<RemotePause>,
    /// Per parent partition, offsets an operator chose to skip.
    pub skip: BTreeMap<u32, BTreeSet<u64>>,
    /// When it was attached (Unix ms, the proposer's clock).
    pub created_at_ms: u64,
}

impl RemoteLink {
    /// Whether an operator skipped the record at `offset` of parent
    /// partition `partition`.
    pub fn skips(&self, partition: u32, offset: u64) -> bool {
        self.skip
            .get(&partition)
            .is_some_and(|offsets| offsets.contains(&offset))
    }
}
