//! A data node's remote credentials (spec §1.10): it seals the passwords
//! its API receives, opens them again once per credential version, and
//! seals them anew under a new cluster secret.
//!
//! The keys come from `NARAD_CLUSTER_SECRET` (and, to open old seals only,
//! `NARAD_CLUSTER_SECRET_PREVIOUS`) and the cluster's remote-key salt in
//! the metastore ([`RemoteKey`]); the crypto is `narad_remotes::seal`'s.
//! The keyring is derived once per salt and kept. A node without a secret
//! seals and opens nothing: remotes need security, and security needs the
//! secret.
//!
//! What the metastore holds per remote is a [`SealedPassword`]: the sealed
//! bytes ([`Sealed::encode`]), the key's version and id, a fingerprint.
//! Its `key_version` counts the cluster's keys: 1 for the first, one more
//! per re-encryption under a new secret.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use narad_clock::Clock;
use narad_meta::{Metastore, Remote, RemoteKey, ResealedPassword, SealedPassword};
use narad_protocol::{CredentialState, RemoteView};
use narad_remotes::client::{ClientError, ClientLimits, RemoteClient, Target};
use narad_remotes::guard::AddressGuard;
use narad_remotes::seal::{
    Binding, KeyError, KeySalt, Keyring, OpenCache, OpenError, Password, Reseal, ResealError,
    SALT_BYTES, SealError, Sealed, SystemRandom,
};
use narad_remotes::state::LinkState;
use parking_lot::Mutex;
use zeroize::Zeroizing;

/// The node's cluster secrets as remotes use them. `Debug` prints no byte.
#[derive(Clone, Default)]
pub struct RemoteSecrets {
    /// `NARAD_CLUSTER_SECRET`: seals and opens.
    pub current: Option<Zeroizing<Vec<u8>>>,
    /// `NARAD_CLUSTER_SECRET_PREVIOUS`: only opens.
    pub previous: Option<Zeroizing<Vec<u8>>>,
}

impl fmt::Debug for RemoteSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteSecrets")
            .field("current", &self.current.is_some())
            .field("previous", &self.previous.is_some())
            .finish()
    }
}

/// Why a credential could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// The node has no `NARAD_CLUSTER_SECRET`.
    #[error("this node has no NARAD_CLUSTER_SECRET to seal remote passwords with")]
    NoSecret,
    /// The node's secret does not derive the cluster's key: the secret
    /// changed and the remotes were not re-encrypted yet.
    #[error(
        "this node's NARAD_CLUSTER_SECRET does not match the cluster's remote key {cluster_key_id}; \
         re-encrypt the remotes (POST /v1/cluster/reencrypt-remotes, with the old secret in \
         NARAD_CLUSTER_SECRET_PREVIOUS) or give every node the same secret"
    )]
    KeyMismatch {
        /// The cluster's key id.
        cluster_key_id: String,
    },
    /// The metastore's salt is not [`SALT_BYTES`] long.
    #[error("the cluster's remote-key salt is malformed")]
    BadSalt,
    /// Key derivation failed.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// Sealing failed.
    #[error(transparent)]
    Seal(#[from] SealError),
    /// The sealed password did not open.
    #[error(transparent)]
    Open(#[from] OpenError),
}

impl From<ResealError> for CredentialError {
    fn from(error: ResealError) -> Self {
        match error {
            ResealError::Open(error) => Self::Open(error),
            ResealError::Seal(error) => Self::Seal(error),
        }
    }
}

/// A password sealed for the metastore, with the key it was sealed under.
#[derive(Debug, Clone)]
pub struct SealedFor {
    /// What the remote stores.
    pub password: SealedPassword,
    /// The cluster key: the existing one, or a new first key.
    pub key: RemoteKey,
}

/// The plan of a re-encryption: what to propose and what to report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReencryptPlan {
    /// The key of the current secret.
    pub key: Option<RemoteKey>,
    /// The passwords sealed again.
    pub resealed: Vec<ResealedPassword>,
    /// Remotes already sealed under the current key.
    pub already_current: Vec<String>,
    /// Remotes that did not open, with why.
    pub failed: Vec<(String, String)>,
}

/// Counters for the node's metrics.
#[derive(Debug, Default)]
pub struct CredentialCounters {
    /// Passwords sealed (`narad_remote_seals_total`).
    pub seals: AtomicU64,
    /// Passwords opened, cache misses only, by remote name
    /// (`narad_remote_credential_decrypts_total`).
    decrypts: Mutex<BTreeMap<String, u64>>,
    /// Opens by the previous secret's key (`narad_remote_reseal_opens_total`).
    pub previous_opens: AtomicU64,
}

/// The node's keys and opened passwords.
pub struct RemoteCredentials {
    secrets: RemoteSecrets,
    /// The keyring of the salt it was derived for.
    keyring: Mutex<Option<(KeySalt, Arc<Keyring>)>>,
    cache: Mutex<OpenCache>,
    rng: SystemRandom,
    /// What the metrics read.
    pub counters: CredentialCounters,
}

impl fmt::Debug for RemoteCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteCredentials")
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

impl Default for RemoteCredentials {
    fn default() -> Self {
        Self::new(RemoteSecrets::default())
    }
}

impl RemoteCredentials {
    /// Credentials of `secrets`.
    pub fn new(secrets: RemoteSecrets) -> Self {
        Self {
            secrets,
            keyring: Mutex::new(None),
            cache: Mutex::new(OpenCache::new()),
            rng: SystemRandom::new(),
            counters: CredentialCounters::default(),
        }
    }

    /// The node has a secret to seal with.
    pub fn has_secret(&self) -> bool {
        self.secrets.current.is_some()
    }

    /// The node has a previous secret (re-encryption pending or possible).
    pub fn has_previous_secret(&self) -> bool {
        self.secrets.previous.is_some()
    }

    /// The keyring for `salt`, derived on first use and kept.
    fn keyring(&self, salt: &KeySalt) -> Result<Arc<Keyring>, CredentialError> {
        let mut held = self.keyring.lock();
        if let Some((held_salt, keyring)) = held.as_ref()
            && held_salt == salt
        {
            return Ok(Arc::clone(keyring));
        }
        let current = self
            .secrets
            .current
            .as_ref()
            .ok_or(CredentialError::NoSecret)?;
        let previous = self
            .secrets
            .previous
            .as_ref()
            .map(|secret| secret.as_slice());
        let keyring = Arc::new(Keyring::new(current, previous, salt)?);
        *held = Some((salt.clone(), Arc::clone(&keyring)));
        Ok(keyring)
    }

    /// The keyring of the cluster's key.
    fn cluster_keyring(&self, key: &RemoteKey) -> Result<Arc<Keyring>, CredentialError> {
        let salt: [u8; SALT_BYTES] = key
            .salt
            .as_slice()
            .try_into()
            .map_err(|_| CredentialError::BadSalt)?;
        self.keyring(&KeySalt::from_bytes(salt))
    }

    /// The id of the key this node's secret derives under the cluster's
    /// salt, if it has a secret and the cluster a key.
    ///
    /// # Errors
    /// What deriving the keyring returns.
    pub fn current_key_id(&self, key: &RemoteKey) -> Result<String, CredentialError> {
        Ok(self.cluster_keyring(key)?.current_id().to_string())
    }

    /// Seals `password` for remote `remote_id` at `credential_version`
    /// under the cluster's key, or under a new first key (fresh salt,
    /// version 1, minted at `set`'s time) when the cluster has none.
    ///
    /// # Errors
    /// [`CredentialError::NoSecret`]; [`CredentialError::KeyMismatch`] when
    /// the cluster's key is not this node's current one.
    pub fn seal(
        &self,
        cluster_key: Option<&RemoteKey>,
        binding: Binding<'_>,
        password: &[u8],
        set: (u64, &str),
    ) -> Result<SealedFor, CredentialError> {
        let (keyring, key) = match cluster_key {
            Some(key) => {
                let keyring = self.cluster_keyring(key)?;
                if keyring.current_id().to_string() != key.key_id {
                    return Err(CredentialError::KeyMismatch {
                        cluster_key_id: key.key_id.clone(),
                    });
                }
                (keyring, key.clone())
            }
            None => {
                let salt = KeySalt::generate(&self.rng)?;
                let keyring = self.keyring(&salt)?;
                let key = RemoteKey {
                    version: 1,
                    key_id: keyring.current_id().to_string(),
                    salt: salt.as_bytes().to_vec(),
                    created_at_ms: Some(set.0),
                };
                (keyring, key)
            }
        };
        let sealed = keyring.seal(binding, password, &self.rng)?;
        self.counters.seals.fetch_add(1, Ordering::Relaxed);
        let (set_at_ms, set_by) = set;
        Ok(SealedFor {
            password: SealedPassword {
                key_version: key.version,
                key_id: key.key_id.clone(),
                sealed: sealed.encode(),
                fingerprint: keyring.fingerprint(password),
                set_at_ms,
                set_by: set_by.to_owned(),
            },
            key,
        })
    }

    /// The password of `remote`, opened at most once per credential
    /// version on this node.
    ///
    /// # Errors
    /// [`CredentialError`] when the cluster has no key, this node no secret
    /// or the password does not open.
    pub fn open(
        &self,
        cluster_key: &RemoteKey,
        remote: &Remote,
    ) -> Result<Arc<Password>, CredentialError> {
        let binding = binding_of(remote);
        self.cache.lock().get_or_open(binding, || {
            let keyring = self.cluster_keyring(cluster_key)?;
            let sealed = Sealed::decode(&remote.password.sealed)?;
            let opened = keyring.open(binding, &sealed)?;
            *self
                .counters
                .decrypts
                .lock()
                .entry(remote.name.clone())
                .or_default() += 1;
            if opened.by_previous {
                self.counters.previous_opens.fetch_add(1, Ordering::Relaxed);
            }
            Ok(opened.password)
        })
    }

    /// Opens by remote name since the node started.
    pub fn decrypts_by_remote(&self) -> Vec<(String, u64)> {
        let decrypts = self.counters.decrypts.lock();
        decrypts
            .iter()
            .map(|(name, count)| (name.clone(), *count))
            .collect()
    }

    /// Drops opened passwords of remotes the metastore no longer has.
    pub fn forget_deleted(&self, metastore: &Metastore) {
        let live: Vec<String> = metastore
            .remotes()
            .map(|remote| remote.id.to_string())
            .collect();
        self.cache
            .lock()
            .retain(|remote_id| live.iter().any(|id| id == remote_id));
    }

    /// Every remote's password sealed under this node's current key: the
    /// cluster's key when it is that one already, else the next version,
    /// minted at `now_ms` (Unix ms, the node's clock). Nothing to do
    /// without remotes.
    ///
    /// # Errors
    /// [`CredentialError::NoSecret`] and key derivation failures; a remote
    /// that does not open is reported in `failed`, not an error.
    pub fn plan_reencrypt(
        &self,
        metastore: &Metastore,
        now_ms: u64,
    ) -> Result<ReencryptPlan, CredentialError> {
        let Some(cluster_key) = metastore.remote_key() else {
            return Ok(ReencryptPlan::default());
        };
        let keyring = self.cluster_keyring(cluster_key)?;
        let current_id = keyring.current_id().to_string();
        let key = if current_id == cluster_key.key_id {
            cluster_key.clone()
        } else {
            RemoteKey {
                version: cluster_key.version + 1,
                key_id: current_id.clone(),
                salt: cluster_key.salt.clone(),
                created_at_ms: Some(now_ms),
            }
        };
        let mut plan = ReencryptPlan::default();
        for remote in metastore.remotes() {
            if remote.password.key_id == current_id {
                plan.already_current.push(remote.name.clone());
                continue;
            }
            match self.reseal(&keyring, remote, &key) {
                Ok(resealed) => plan.resealed.push(resealed),
                Err(error) => plan.failed.push((remote.name.clone(), error.to_string())),
            }
        }
        plan.key = Some(key);
        Ok(plan)
    }

    fn reseal(
        &self,
        keyring: &Keyring,
        remote: &Remote,
        key: &RemoteKey,
    ) -> Result<ResealedPassword, CredentialError> {
        let sealed = Sealed::decode(&remote.password.sealed)?;
        let reseal = keyring.reseal(binding_of(remote), &sealed, &self.rng)?;
        let Reseal::Resealed {
            sealed,
            fingerprint,
        } = reseal
        else {
            // The key id said otherwise; the seal names the current key.
            return Err(CredentialError::Open(OpenError::Malformed(
                "key id of the record and of the seal differ",
            )));
        };
        self.counters.previous_opens.fetch_add(1, Ordering::Relaxed);
        self.counters.seals.fetch_add(1, Ordering::Relaxed);
        Ok(ResealedPassword {
            name: remote.name.clone(),
            credential_version: remote.credential_version,
            password: SealedPassword {
                key_version: key.version,
                key_id: key.key_id.clone(),
                sealed: sealed.encode(),
                fingerprint,
                ..remote.password.clone()
            },
        })
    }
}

impl RemoteCredentials {
    /// This node's look at `remote`'s credential in `metastore`: whether
    /// its secret opens it (opening it now, or from the cache), and
    /// whether its current secret derives the key it is sealed under. An
    /// entry of a remote's `nodes[]`, and what a node answers another
    /// that asks its status `with_remotes`.
    pub fn view(&self, metastore: &Metastore, remote: &Remote) -> RemoteView {
        let opened = metastore
            .remote_key()
            .ok_or(CredentialError::BadSalt)
            .and_then(|key| self.open(key, remote).map(drop));
        let (credential, error) = match opened {
            Ok(()) => (CredentialState::Readable, None),
            Err(CredentialError::NoSecret) => (CredentialState::NoSecret, None),
            Err(error) => (CredentialState::Unreadable, Some(error.to_string())),
        };
        let key_current = metastore
            .remote_key()
            .and_then(|key| self.current_key_id(key).ok())
            .is_some_and(|id| id == remote.password.key_id);
        RemoteView {
            name: remote.name.clone(),
            credential_version: remote.credential_version,
            credential,
            key_current,
            error,
        }
    }
}

impl CredentialError {
    /// The link state a remote child is in when its credential fails
    /// this way: `node_insecure` without a secret, else
    /// `credential_unreadable`.
    pub fn link_state(&self) -> LinkState {
        match self {
            Self::NoSecret => LinkState::NodeInsecure,
            _ => LinkState::CredentialUnreadable,
        }
    }
}

/// The outbound client's target of `remote`, with its opened `password`.
pub fn target_of(remote: &Remote, password: &Password) -> Target {
    let limits = &remote.limits;
    Target {
        url: remote.url.clone(),
        username: remote.username.clone(),
        password: String::from_utf8_lossy(password.as_bytes()).into_owned(),
        ca_pem: remote.ca_pem.clone(),
        limits: ClientLimits {
            request_timeout: Duration::from_millis(limits.request_timeout_ms),
            idle_conn_timeout: Duration::from_millis(limits.idle_conn_timeout_ms),
            conn_max_age: Duration::from_millis(limits.conn_max_age_ms),
            max_in_flight: limits.max_in_flight as usize,
        },
    }
}

/// Why this node cannot make a remote's client: the step that failed
/// (`credential` or `client`), the link state it means, and what went
/// wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFailure {
    /// `credential` (the password does not open here) or `client` (the
    /// client refused the URL, CA or credential).
    pub step: &'static str,
    /// The link state a remote child is in for this failure.
    pub state: LinkState,
    /// What went wrong, for logs and the `/test` report.
    pub detail: String,
}

/// The outbound client of `remote` on this node: its password opened with
/// the node's keys (once per credential version), its limits, the node's
/// address `guard`.
///
/// # Errors
/// [`ClientFailure`] naming the step that failed.
pub fn client_of(
    metastore: &Metastore,
    credentials: &RemoteCredentials,
    remote: &Remote,
    guard: AddressGuard,
    clock: Arc<dyn Clock>,
) -> Result<RemoteClient, ClientFailure> {
    let password = metastore
        .remote_key()
        .ok_or(CredentialError::BadSalt)
        .and_then(|key| credentials.open(key, remote))
        .map_err(|error| ClientFailure {
            step: "credential",
            state: error.link_state(),
            detail: error.to_string(),
        })?;
    RemoteClient::new(&target_of(remote, &password), guard, clock).map_err(|error| {
        let state = match error {
            ClientError::Ca(_) => LinkState::TlsFailed,
            ClientError::Credential(_) => LinkState::CredentialUnreadable,
            _ => LinkState::DestinationRefused,
        };
        ClientFailure {
            step: "client",
            state,
            detail: error.to_string(),
        }
    })
}

/// What a remote's sealed password is bound to.
pub fn binding_of(remote: &Remote) -> Binding<'_> {
    Binding {
        remote_id: remote.id.as_str(),
        credential_version: remote.credential_version,
    }
}

#[cfg(test)]
#[path = "credentials_tests.rs"]
mod tests;
