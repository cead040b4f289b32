//! Sealing a remote's password under the cluster secret (spec §1.10).
//!
//! The node that receives a remote's password seals it here and only the
//! sealed form enters Raft; every node opens it again, once per credential
//! version ([`OpenCache`]), when it ships records to the remote.
//!
//! - The key: HKDF-SHA-512 over `NARAD_CLUSTER_SECRET` with a random
//!   per-cluster salt kept in the metastore ([`KeySalt`]) yields a 256-bit
//!   AES-GCM key, an HMAC-SHA-512 key for password fingerprints and a
//!   [`KeyId`], each under its own `info` label. The key id names the key a
//!   ciphertext was sealed under without saying anything of the secret.
//! - A seal: AES-256-GCM with a fresh random 96-bit nonce; the associated
//!   data binds the remote's id, its credential version and the key id, so
//!   a ciphertext copied to another remote, to another credential version
//!   or relabelled with another key id does not open.
//! - Rotation: a [`Keyring`] holds the current key and, from
//!   `NARAD_CLUSTER_SECRET_PREVIOUS`, a previous one that only opens; it
//!   never seals. [`Keyring::reseal`] opens a credential under whichever key
//!   it names and seals it again under the current one.
//!
//! The crypto is `ring`'s (the library rustls already uses); nothing here is
//! hand-rolled. Opened passwords live in [`Zeroizing`] buffers, wiped when
//! dropped. What this module does not do: keep the salt or the sealed
//! passwords (the metastore does), read the secret from the environment
//! (the node's settings do) or count metrics (its callers do).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf::{HKDF_SHA512, KeyType, Salt};
use ring::hmac;
use zeroize::Zeroizing;

pub use ring::rand::{SecureRandom, SystemRandom};

/// Bytes of the per-cluster HKDF salt.
pub const SALT_BYTES: usize = 32;
/// Bytes of a key id.
pub const KEY_ID_BYTES: usize = 8;
/// Bytes of a password fingerprint (shown as twice as many hex digits).
pub const FINGERPRINT_BYTES: usize = 8;
/// The shortest cluster secret a key is derived from. The cluster
/// transport's secret rules are stricter; this only refuses an empty one.
pub const SECRET_BYTES_MIN: usize = 1;
/// Bytes an AES-GCM tag adds to the password.
pub const TAG_BYTES: usize = 16;
/// The longest password a seal holds (the API's limit is 72 bytes).
pub const PASSWORD_BYTES_MAX: usize = 1024;
/// Format byte that opens an encoded [`Sealed`].
const SEALED_FORMAT_V1: u8 = 1;
/// Remotes' credentials an [`OpenCache`] holds at most (the cluster keeps
/// at most 64 remotes; a few more absorb a version change in flight).
pub const OPEN_CACHE_ENTRIES_MAX: usize = 128;

const INFO_AEAD: &[u8] = b"narad remote password seal v1";
const INFO_FINGERPRINT: &[u8] = b"narad remote password fingerprint v1";
const INFO_KEY_ID: &[u8] = b"narad remote seal key id v1";
const AAD_LABEL: &[u8] = b"narad remote password v1";

const _: () = assert!(NONCE_LEN == 12, "AES-GCM nonces are 96 bits");
const _: () = assert!(FINGERPRINT_BYTES <= 64 && KEY_ID_BYTES <= 64);

/// Why a key could not be made.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The cluster secret is empty.
    #[error("the cluster secret is empty")]
    EmptySecret,
    /// The crypto library refused (never expected with these lengths).
    #[error("key derivation failed")]
    Derivation,
}

/// Why a password could not be sealed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SealError {
    /// The system's random source failed.
    #[error("the random source failed")]
    Random,
    /// The password is longer than [`PASSWORD_BYTES_MAX`].
    #[error("password longer than {PASSWORD_BYTES_MAX} bytes")]
    TooLong,
    /// The crypto library refused.
    #[error("sealing failed")]
    Crypto,
}

/// Why a sealed password did not open.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenError {
    /// Sealed under a key this node has neither as current nor previous
    /// (a secret rotated without `NARAD_CLUSTER_SECRET_PREVIOUS`, or nodes
    /// started with different secrets).
    #[error("sealed under key {0}, which this node does not have")]
    UnknownKey(KeyId),
    /// Authentication failed: tampered, or bound to another remote or
    /// credential version.
    #[error("the sealed password does not open under key {0}")]
    Refused(KeyId),
    /// The encoded form is not a sealed password.
    #[error("malformed sealed password: {0}")]
    Malformed(&'static str),
}

/// The per-cluster HKDF salt, random, kept in the metastore.
#[derive(Clone, PartialEq, Eq)]
pub struct KeySalt([u8; SALT_BYTES]);

impl KeySalt {
    /// A fresh salt from `rng`.
    ///
    /// # Errors
    /// [`SealError::Random`] when the random source fails.
    pub fn generate(rng: &dyn SecureRandom) -> Result<Self, SealError> {
        let mut bytes = [0u8; SALT_BYTES];
        rng.fill(&mut bytes).map_err(|_| SealError::Random)?;
        Ok(Self(bytes))
    }

    /// A salt as the metastore keeps it.
    pub fn from_bytes(bytes: [u8; SALT_BYTES]) -> Self {
        Self(bytes)
    }

    /// The salt's bytes.
    pub fn as_bytes(&self) -> &[u8; SALT_BYTES] {
        &self.0
    }
}

impl fmt::Debug for KeySalt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeySalt({})", hex(&self.0))
    }
}

/// A short, public name of a derived key (not of the secret): which key a
/// ciphertext was sealed under. Shown as 16 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId([u8; KEY_ID_BYTES]);

impl KeyId {
    /// A key id as stored.
    pub fn from_bytes(bytes: [u8; KEY_ID_BYTES]) -> Self {
        Self(bytes)
    }

    /// The key id's bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_ID_BYTES] {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// What a sealed password is bound to: it opens only for this remote and
/// this credential version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding<'a> {
    /// The remote's id (stable across renames and distinct from a remote
    /// deleted and created again under the same name).
    pub remote_id: &'a str,
    /// The remote's credential version, bumped by every password change.
    pub credential_version: u64,
}

impl Binding<'_> {
    /// The associated data: a label, then each field length-prefixed, then
    /// the key id, so no two bindings share an encoding.
    fn aad(&self, key_id: KeyId) -> Vec<u8> {
        let mut aad = Vec::with_capacity(AAD_LABEL.len() + 8 + self.remote_id.len() + 16);
        aad.extend_from_slice(AAD_LABEL);
        aad.extend_from_slice(&(self.remote_id.len() as u64).to_be_bytes());
        aad.extend_from_slice(self.remote_id.as_bytes());
        aad.extend_from_slice(&self.credential_version.to_be_bytes());
        aad.extend_from_slice(&key_id.0);
        aad
    }
}

/// A sealed password: the key it was sealed under, its nonce, and the
/// ciphertext with the AES-GCM tag appended.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The key it was sealed under.
    pub key_id: KeyId,
    /// The random nonce of this seal.
    pub nonce: [u8; NONCE_LEN],
    /// Ciphertext then tag.
    pub ciphertext: Vec<u8>,
}

impl fmt::Debug for Sealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealed")
            .field("key_id", &self.key_id)
            .field("ciphertext_bytes", &self.ciphertext.len())
            .finish_non_exhaustive()
    }
}

impl Sealed {
    /// One byte string for the metastore: format byte `1`, key id (8),
    /// nonce (12), ciphertext and tag.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + KEY_ID_BYTES + NONCE_LEN + self.ciphertext.len());
        out.push(SEALED_FORMAT_V1);
        out.extend_from_slice(&self.key_id.0);
        out.extend_from_slice(&self.nonce);
        out.extend_from_slice(&self.ciphertext);
        out
    }

    /// The inverse of [`Sealed::encode`].
    ///
    /// # Errors
    /// [`OpenError::Malformed`] for another format byte or a length that
    /// cannot hold a tag or is over the password limit.
    pub fn decode(bytes: &[u8]) -> Result<Self, OpenError> {
        let (&format, rest) = bytes.split_first().ok_or(OpenError::Malformed("empty"))?;
        if format != SEALED_FORMAT_V1 {
            return Err(OpenError::Malformed("unknown format"));
        }
        let (key_id, rest) = rest
            .split_first_chunk::<KEY_ID_BYTES>()
            .ok_or(OpenError::Malformed("truncated key id"))?;
        let (nonce, ciphertext) = rest
            .split_first_chunk::<NONCE_LEN>()
            .ok_or(OpenError::Malformed("truncated nonce"))?;
        if ciphertext.len() < TAG_BYTES {
            return Err(OpenError::Malformed("shorter than a tag"));
        }
        if ciphertext.len() > PASSWORD_BYTES_MAX + TAG_BYTES {
            return Err(OpenError::Malformed("longer than a password"));
        }
        Ok(Self {
            key_id: KeyId(*key_id),
            nonce: *nonce,
            ciphertext: ciphertext.to_vec(),
        })
    }
}

/// A byte length as an HKDF output type (for outputs that are not keys of
/// a ring algorithm).
struct OutputLen(usize);

impl KeyType for OutputLen {
    fn len(&self) -> usize {
        self.0
    }
}

/// The keys derived from one cluster secret and the cluster's salt.
pub struct SealKey {
    id: KeyId,
    aead: LessSafeKey,
    fingerprint: hmac::Key,
}

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl SealKey {
    /// The keys of `secret` under `salt` (HKDF-SHA-512, one `info` label
    /// per output).
    ///
    /// # Errors
    /// [`KeyError::EmptySecret`] for an empty secret.
    pub fn derive(secret: &[u8], salt: &KeySalt) -> Result<Self, KeyError> {
        if secret.len() < SECRET_BYTES_MIN {
            return Err(KeyError::EmptySecret);
        }
        let prk = Salt::new(HKDF_SHA512, &salt.0).extract(secret);
        let aead_key: UnboundKey = prk
            .expand(&[INFO_AEAD], &AES_256_GCM)
            .map_err(|_| KeyError::Derivation)?
            .into();
        let fingerprint: hmac::Key = prk
            .expand(&[INFO_FINGERPRINT], hmac::HMAC_SHA512)
            .map_err(|_| KeyError::Derivation)?
            .into();
        let mut id = [0u8; KEY_ID_BYTES];
        prk.expand(&[INFO_KEY_ID], OutputLen(KEY_ID_BYTES))
            .and_then(|okm| okm.fill(&mut id))
            .map_err(|_| KeyError::Derivation)?;
        Ok(Self {
            id: KeyId(id),
            aead: LessSafeKey::new(aead_key),
            fingerprint,
        })
    }

    /// This key's id.
    pub fn id(&self) -> KeyId {
        self.id
    }

    fn seal(
        &self,
        binding: Binding<'_>,
        password: &[u8],
        rng: &dyn SecureRandom,
    ) -> Result<Sealed, SealError> {
        if password.len() > PASSWORD_BYTES_MAX {
            return Err(SealError::TooLong);
        }
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill(&mut nonce).map_err(|_| SealError::Random)?;
        let mut ciphertext = Vec::with_capacity(password.len() + TAG_BYTES);
        ciphertext.extend_from_slice(password);
        self.aead
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(binding.aad(self.id)),
                &mut ciphertext,
            )
            .map_err(|_| SealError::Crypto)?;
        Ok(Sealed {
            key_id: self.id,
            nonce,
            ciphertext,
        })
    }

    fn open(&self, binding: Binding<'_>, sealed: &Sealed) -> Result<Password, OpenError> {
        debug_assert_eq!(sealed.key_id, self.id);
        let mut buffer = Zeroizing::new(sealed.ciphertext.clone());
        let plain_len = self
            .aead
            .open_in_place(
                Nonce::assume_unique_for_key(sealed.nonce),
                Aad::from(binding.aad(self.id)),
                buffer.as_mut_slice(),
            )
            .map_err(|_| OpenError::Refused(self.id))?
            .len();
        buffer.truncate(plain_len);
        Ok(Password(buffer))
    }

    /// A display fingerprint of `password`: HMAC-SHA-512 under this key,
    /// truncated to [`FINGERPRINT_BYTES`], in hex. It tells two passwords
    /// apart without revealing them; it changes when the key does.
    pub fn fingerprint(&self, password: &[u8]) -> String {
        let tag = hmac::sign(&self.fingerprint, password);
        hex(&tag.as_ref()[..FINGERPRINT_BYTES])
    }
}

/// An opened password; its buffer is wiped when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(Zeroizing<Vec<u8>>);

impl Password {
    /// The password's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(..)")
    }
}

/// A password opened by a [`Keyring`], and whether the previous key did it.
#[derive(Debug)]
pub struct Opened {
    /// The password.
    pub password: Password,
    /// Opened with the previous secret's key: the credential awaits
    /// re-encryption.
    pub by_previous: bool,
}

/// The outcome of [`Keyring::reseal`].
#[derive(Debug)]
pub enum Reseal {
    /// Already sealed under the current key; nothing to do.
    AlreadyCurrent,
    /// Opened under the previous key and sealed under the current one.
    Resealed {
        /// The new seal.
        sealed: Sealed,
        /// The password's fingerprint under the current key.
        fingerprint: String,
    },
}

/// The keys a node holds: the current one seals and opens; the previous
/// one (from `NARAD_CLUSTER_SECRET_PREVIOUS`) only opens.
#[derive(Debug)]
pub struct Keyring {
    current: SealKey,
    previous: Option<SealKey>,
}

impl Keyring {
    /// The keyring of `secret` and, when set, `previous_secret`, under the
    /// cluster's `salt`. A previous secret equal to the current one is
    /// dropped (it would name the same key).
    ///
    /// # Errors
    /// [`KeyError`] when either secret is empty.
    pub fn new(
        secret: &[u8],
        previous_secret: Option<&[u8]>,
        salt: &KeySalt,
    ) -> Result<Self, KeyError> {
        let current = SealKey::derive(secret, salt)?;
        let previous = previous_secret
            .map(|previous| SealKey::derive(previous, salt))
            .transpose()?
            .filter(|previous| previous.id != current.id);
        Ok(Self { current, previous })
    }

    /// The id of the key new seals use.
    pub fn current_id(&self) -> KeyId {
        self.current.id
    }

    /// The id of the previous key, if the node has one.
    pub fn previous_id(&self) -> Option<KeyId> {
        self.previous.as_ref().map(SealKey::id)
    }

    /// Seals `password` for `binding` under the current key.
    ///
    /// # Errors
    /// [`SealError`] when the random source fails or the password is over
    /// [`PASSWORD_BYTES_MAX`].
    pub fn seal(
        &self,
        binding: Binding<'_>,
        password: &[u8],
        rng: &dyn SecureRandom,
    ) -> Result<Sealed, SealError> {
        self.current.seal(binding, password, rng)
    }

    /// Opens `sealed` for `binding` with the key it names.
    ///
    /// # Errors
    /// [`OpenError::UnknownKey`] when the node has no such key,
    /// [`OpenError::Refused`] when it does not authenticate.
    pub fn open(&self, binding: Binding<'_>, sealed: &Sealed) -> Result<Opened, OpenError> {
        let (key, by_previous) = self.key_named(sealed.key_id)?;
        Ok(Opened {
            password: key.open(binding, sealed)?,
            by_previous,
        })
    }

    /// `sealed` sealed under the current key: unchanged when it already
    /// is, else opened with the previous key and sealed again with a new
    /// nonce under the same binding.
    ///
    /// # Errors
    /// [`ResealError::Open`] when it does not open, [`ResealError::Seal`]
    /// when the random source fails.
    pub fn reseal(
        &self,
        binding: Binding<'_>,
        sealed: &Sealed,
        rng: &dyn SecureRandom,
    ) -> Result<Reseal, ResealError> {
        if sealed.key_id == self.current.id {
            return Ok(Reseal::AlreadyCurrent);
        }
        let opened = self.open(binding, sealed)?;
        let sealed = self.seal(binding, opened.password.as_bytes(), rng)?;
        Ok(Reseal::Resealed {
            sealed,
            fingerprint: self.fingerprint(opened.password.as_bytes()),
        })
    }

    /// The fingerprint of `password` under the current key.
    pub fn fingerprint(&self, password: &[u8]) -> String {
        self.current.fingerprint(password)
    }

    fn key_named(&self, id: KeyId) -> Result<(&SealKey, bool), OpenError> {
        if id == self.current.id {
            return Ok((&self.current, false));
        }
        match &self.previous {
            Some(previous) if previous.id == id => Ok((previous, true)),
            _ => Err(OpenError::UnknownKey(id)),
        }
    }
}

/// Why a reseal failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ResealError {
    /// The old seal did not open.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The new seal could not be made.
    #[error(transparent)]
    Seal(#[from] SealError),
}

/// Opened passwords by (remote id, credential version): a node opens each
/// credential version once. Bounded by [`OPEN_CACHE_ENTRIES_MAX`]; storing
/// a remote's new version drops its older ones.
#[derive(Default)]
pub struct OpenCache {
    entries: HashMap<String, (u64, Arc<Password>)>,
}

impl fmt::Debug for OpenCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenCache")
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl OpenCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The password of `binding`, opened by `open` only when the cache
    /// does not hold that remote's credential version. A failed open is
    /// not cached (a node given the previous secret later tries again).
    ///
    /// # Errors
    /// What `open` returns.
    pub fn get_or_open<E>(
        &mut self,
        binding: Binding<'_>,
        open: impl FnOnce() -> Result<Password, E>,
    ) -> Result<Arc<Password>, E> {
        if let Some((version, password)) = self.entries.get(binding.remote_id)
            && *version == binding.credential_version
        {
            return Ok(Arc::clone(password));
        }
        let password = Arc::new(open()?);
        if self.entries.len() >= OPEN_CACHE_ENTRIES_MAX
            && !self.entries.contains_key(binding.remote_id)
        {
            // Over the bound only when remotes were deleted and not
            // forgotten: start again rather than pick a victim.
            self.entries.clear();
        }
        self.entries.insert(
            binding.remote_id.to_owned(),
            (binding.credential_version, Arc::clone(&password)),
        );
        Ok(password)
    }

    /// Drops the remotes `keep` says no (deleted ones).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.entries.retain(|remote_id, _| keep(remote_id));
    }

    /// Remotes held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

#[cfg(test)]
#[path = "seal_tests.rs"]
mod tests;
