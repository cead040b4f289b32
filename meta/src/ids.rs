//! Identifiers whose format is an invariant: a value of these types is
//! always well formed, because every constructor (deserialization included)
//! checks it.

use std::fmt;

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::limits::HEX_ID_CHARS;

/// Checks that `text` is exactly [`HEX_ID_CHARS`] lowercase hex characters.
fn is_hex_id(text: &str) -> bool {
    text.len() == HEX_ID_CHARS && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A hex id that failed its format check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {kind}: {text:?}")]
pub struct BadId {
    kind: &'static str,
    text: String,
}

macro_rules! hex_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// The id whose 8 bytes are `bits`, as 16 lowercase hex characters.
            pub fn from_bits(bits: u64) -> Self {
                Self(format!("{bits:016x}"))
            }

            /// Mints a fresh id. Only a proposer calls this, never `apply`:
            /// the id travels in the command so every replica stores the same.
            pub fn mint(rng: &mut impl Rng) -> Self {
                Self::from_bits(rng.random())
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = BadId;

            fn try_from(text: String) -> Result<Self, BadId> {
                if is_hex_id(&text) {
                    Ok(Self(text))
                } else {
                    Err(BadId { kind: $kind, text })
                }
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

hex_id!(
    /// A topic's incarnation id: 8 random bytes minted by the proposer of
    /// each create, so a topic deleted and created again under the same name
    /// is told apart everywhere (WAL records, directory markers, purges).
    IncarnationId,
    "incarnation id"
);

hex_id!(
    /// A fan-out link's attach epoch: 8 random bytes minted by the proposer
    /// of each attach; a cursor ignores a cursor file of another epoch.
    AttachEpoch,
    "attach epoch"
);

hex_id!(
    /// A remote's id: 8 random bytes minted by the proposer of its create,
    /// so a remote deleted and added again under the same name is told
    /// apart (its links and sealed credential name the remote they were
    /// made for).
    RemoteId,
    "remote id"
);

/// A bcrypt hash as stored (`$2b$<cost>$<salt and hash>`, 60 characters).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PasswordHash(String);

/// Length of every bcrypt hash in its modular crypt form.
const BCRYPT_HASH_CHARS: usize = 60;

impl PasswordHash {
    /// The hash text, for `bcrypt::verify`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for PasswordHash {
    type Error = BadId;

    fn try_from(text: String) -> Result<Self, BadId> {
        if text.len() == BCRYPT_HASH_CHARS && text.starts_with("$2") {
            Ok(Self(text))
        } else {
            Err(BadId {
                kind: "password hash",
                text: String::from("<redacted>"),
            })
        }
    }
}

impl From<PasswordHash> for String {
    fn from(hash: PasswordHash) -> String {
        hash.0
    }
}

impl fmt::Debug for PasswordHash {
    /// Never prints the hash: it is a secret's derivative and ends up in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PasswordHash(<redacted>)")
    }
}
