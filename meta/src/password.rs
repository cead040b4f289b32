//! Password hashing, done by the proposer before it proposes: bcrypt salts
//! are random and hashing is slow, so neither may happen inside `apply`.

use rand::Rng;
use rand::distr::{Alphanumeric, SampleString};

use super::error::MetastoreError;
use super::ids::PasswordHash;
use super::rules::check_password;

/// bcrypt cost of stored hashes: the bcrypt crate's default (12), slow
/// enough to make offline guessing expensive; logins pay it once per
/// credential, since nodes cache verified credentials.
pub const BCRYPT_COST: u32 = bcrypt::DEFAULT_COST;

/// Length of a generated root admin password: 24 alphanumeric characters
/// carry about 142 bits, and stay far below bcrypt's 72-byte limit.
pub const GENERATED_PASSWORD_CHARS: usize = 24;

/// Hashes a password with the given cost and 16-byte salt (the proposer
/// draws the salt from its random source).
///
/// # Errors
/// [`MetastoreError::PasswordLength`] outside 1 to 72 bytes.
///
/// # Panics
/// If `cost` is outside bcrypt's range (4 to 31): a programming error.
pub fn hash_password(
    password: &[u8],
    cost: u32,
    salt: [u8; 16],
) -> Result<PasswordHash, MetastoreError> {
    check_password(password)?;
    let parts = match bcrypt::non_truncating_hash_with_salt(password, cost, salt) {
        Ok(parts) => parts,
        Err(error) => panic!("bcrypt refused a checked password at cost {cost}: {error}"),
    };
    let text = parts.format_for_version(bcrypt::Version::TwoB);
    match PasswordHash::try_from(text) {
        Ok(hash) => Ok(hash),
        Err(error) => panic!("bcrypt produced an unexpected hash form: {error}"),
    }
}

/// Whether `password` is the one `hash` was made from. A password longer
/// than 72 bytes never matches (it could not have been stored).
pub fn verify_password(password: &[u8], hash: &PasswordHash) -> bool {
    bcrypt::non_truncating_verify(password, hash.as_str()).unwrap_or(false)
}

/// The root admin's password and whether it was generated (then the caller
/// logs it once).
#[derive(Clone, PartialEq, Eq)]
pub struct AdminPassword {
    /// The password.
    pub password: String,
    /// `true` when no `NARAD_ADMIN_PASSWORD` was given.
    pub generated: bool,
}

impl std::fmt::Debug for AdminPassword {
    /// Never prints the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminPassword")
            .field("generated", &self.generated)
            .finish()
    }
}

/// The root admin's password: `from_env` (`NARAD_ADMIN_PASSWORD`) when set
/// and not empty, else a random one.
pub fn admin_password(from_env: Option<String>, rng: &mut impl Rng) -> AdminPassword {
    match from_env.filter(|password| !password.is_empty()) {
        Some(password) => AdminPassword {
            password,
            generated: false,
        },
        None => AdminPassword {
            password: Alphanumeric.sample_string(rng, GENERATED_PASSWORD_CHARS),
            generated: true,
        },
    }
}
