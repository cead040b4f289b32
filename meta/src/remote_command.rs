//! The commands that change remotes and remote-child links. Like every
//! command, each carries what `apply` needs beyond the state: sealed bytes,
//! ids and timestamps are the proposer's.

use serde::{Deserialize, Serialize};

use super::command::Actor;
use super::ids::{AttachEpoch, IncarnationId};
use super::remotes::{Remote, RemoteKey, RemoteLimits, RemoteLink, SealedPassword};

/// `POST /v1/remotes`: adds a remote. `key` is the cluster remote key the
/// password was sealed under; it becomes the cluster's key when there is
/// none yet, and must be the cluster's key otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateRemote {
    /// An admin.
    pub actor: Actor,
    /// The remote as it will be stored (revision and credential version 1).
    pub remote: Remote,
    /// The key its password was sealed under.
    pub key: RemoteKey,
}

/// `PATCH /v1/remotes/{name}`: changes what is given. A new url, username
/// or CA needs the password again (the proposer checks; apply checks too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateRemote {
    /// An admin.
    pub actor: Actor,
    /// The remote.
    pub name: String,
    /// The revision the proposer read; another one refuses the change.
    pub expected_revision: Option<u64>,
    /// A new base URL.
    pub url: Option<String>,
    /// A new username.
    pub username: Option<String>,
    /// A new password, sealed under `key`.
    pub password: Option<SealedPassword>,
    /// The key `password` was sealed under.
    pub key: Option<RemoteKey>,
    /// `Some(None)` removes the pinned CA, `Some(Some(pem))` pins one.
    pub ca_pem: Option<Option<String>>,
    /// New limits.
    pub limits: Option<RemoteLimits>,
}

/// `DELETE /v1/remotes/{name}`. Refused while links use it unless `force`;
/// forced, the links stay and report `remote_missing`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRemote {
    /// An admin.
    pub actor: Actor,
    /// The remote.
    pub name: String,
    /// Delete even though links use it.
    pub force: bool,
}

/// One password sealed again under a new key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResealedPassword {
    /// The remote.
    pub name: String,
    /// The credential version the proposer opened; a remote whose
    /// credential changed since keeps its newer one.
    pub credential_version: u64,
    /// The same password, sealed under the new key.
    pub password: SealedPassword,
}

/// `POST /v1/cluster/reencrypt-remotes`: every password sealed again under
/// the key of the current cluster secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResealRemotes {
    /// An admin.
    pub actor: Actor,
    /// The key of the current secret: the cluster's key when its id is
    /// already the cluster's, else its next version.
    pub key: RemoteKey,
    /// The passwords sealed again.
    pub passwords: Vec<ResealedPassword>,
}

/// `POST /v1/topics/{parent}/children` with `remote`: creates the stub
/// topic `child` (no partitions) linked under `parent` and its remote link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachRemoteChild {
    /// An admin.
    pub actor: Actor,
    /// The parent.
    pub parent: String,
    /// The parent incarnation the proposer read.
    pub parent_id: IncarnationId,
    /// The stub's name; no topic of that name may exist.
    pub child: String,
    /// The stub's incarnation id, minted by the proposer.
    pub child_id: IncarnationId,
    /// Minted by the proposer; cursor files carry it.
    pub attach_epoch: AttachEpoch,
    /// The parent's committed high watermark per partition at the attach.
    pub attach_offsets: Vec<u64>,
    /// The link (no pause, no skips).
    pub link: RemoteLink,
}

/// `POST /v1/topics/{child}/pause`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseRemoteChild {
    /// An admin.
    pub actor: Actor,
    /// The stub.
    pub child: String,
    /// Printable, at most 256 bytes.
    pub reason: String,
    /// The proposer's clock, Unix ms.
    pub at_ms: u64,
}

/// `POST /v1/topics/{child}/resume`: lifts a pause. `target_id` is what the
/// proposer's checks found the target to be now; it replaces the link's
/// when the operator accepted a replaced target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeRemoteChild {
    /// An admin.
    pub actor: Actor,
    /// The stub.
    pub child: String,
    /// The target topic's incarnation id to keep, when the checks read one.
    pub target_id: Option<String>,
}

/// `POST /v1/topics/{child}/skip`: the cursor of `partition` passes the
/// record at `offset` without shipping it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkipRemoteRecord {
    /// An admin.
    pub actor: Actor,
    /// The stub.
    pub child: String,
    /// The parent partition.
    pub partition: u32,
    /// The record's offset in it.
    pub offset: u64,
}
