//! HTTP Basic authentication against the metadata replica's users.
//!
//! Unknown usernames are refused before bcrypt runs. A verified credential
//! is cached under the users-domain version (any user change invalidates
//! every entry). Identical credentials arriving together share one bcrypt
//! run. At most [`BCRYPT_SLOTS`] bcrypt runs at once per process, on the
//! blocking pool. Wrong passwords spend a per-username budget
//! ([`FailedLoginThrottle`]); with none left the answer is `429`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use narad_clock::Clock;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::sync::{OnceCell, Semaphore};

use crate::metadata::{MetadataReplica, User};

/// bcrypt runs at once per process (v3.1): each costs tens of
/// milliseconds of one core, so more would only starve request handling.
pub const BCRYPT_SLOTS: usize = 4;

/// Wrong passwords a username may send in a burst.
pub const FAILED_LOGIN_BURST: u32 = 5;

/// One failed-login attempt is regained this often.
pub const FAILED_LOGIN_REGAIN: Duration = Duration::from_secs(12);

/// Usernames the throttle tracks at most; full buckets are dropped first.
pub const THROTTLE_USERS_MAX: usize = 10_000;

/// Verified credentials cached at most; the cache empties when full.
pub const VERIFIED_CACHE_MAX: usize = 10_000;

/// Why a request is not authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No credentials, malformed ones, an unknown user or a wrong password
    /// (`401`).
    #[error("authentication required")]
    Unauthenticated,
    /// The username's failed-login budget is spent (`429`).
    #[error("too many failed authentication attempts")]
    Throttled,
    /// bcrypt could not run (a malformed stored hash, a lost task): `500`.
    #[error("authentication unavailable")]
    Unavailable,
}

/// A per-username token bucket of failed logins: a burst of
/// [`FAILED_LOGIN_BURST`], one regained every [`FAILED_LOGIN_REGAIN`].
/// Pure: time is an argument.
#[derive(Debug, Default)]
pub struct FailedLoginThrottle {
    buckets: HashMap<String, Bucket>,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    failures: u32,
    since: Duration,
}

impl FailedLoginThrottle {
    /// Whether `username` may try a password at `now`.
    pub fn may_try(&mut self, username: &str, now: Duration) -> bool {
        match self.buckets.get_mut(username) {
            None => true,
            Some(bucket) => {
                regain(bucket, now);
                bucket.failures < FAILED_LOGIN_BURST
            }
        }
    }

    /// Records a wrong password for `username` at `now`.
    pub fn failed(&mut self, username: &str, now: Duration) {
        if self.buckets.len() >= THROTTLE_USERS_MAX && !self.buckets.contains_key(username) {
            self.buckets.retain(|_, bucket| {
                regain(bucket, now);
                bucket.failures > 0
            });
            if self.buckets.len() >= THROTTLE_USERS_MAX {
                // Every tracked name is being hammered: forget one rather
                // than grow. Losing a bucket only lets one name try again.
                if let Some(name) = self.buckets.keys().next().cloned() {
                    self.buckets.remove(&name);
                }
            }
        }
        let bucket = self.buckets.entry(username.to_owned()).or_insert(Bucket {
            failures: 0,
            since: now,
        });
        regain(bucket, now);
        if bucket.failures == 0 {
            bucket.since = now;
        }
        bucket.failures = bucket.failures.saturating_add(1);
    }
}

fn regain(bucket: &mut Bucket, now: Duration) {
    let elapsed = now.saturating_sub(bucket.since);
    let regained = elapsed.as_secs() / FAILED_LOGIN_REGAIN.as_secs();
    if regained > 0 {
        let regained = u32::try_from(regained).unwrap_or(u32::MAX);
        bucket.failures = bucket.failures.saturating_sub(regained);
        bucket.since += FAILED_LOGIN_REGAIN * regained;
        if bucket.failures == 0 {
            bucket.since = now;
        }
    }
}

type CredentialKey = (u64, String, [u8; 32]);

/// The authenticator of one node.
#[derive(Debug)]
pub struct Authenticator {
    replica: Arc<MetadataReplica>,
    verified: Mutex<HashMap<CredentialKey, Arc<OnceCell<bool>>>>,
    bcrypt_slots: Arc<Semaphore>,
    throttle: Mutex<FailedLoginThrottle>,
    salt: [u8; 16],
    /// The node's clock: the failed-login throttle runs on it.
    clock: Arc<dyn Clock>,
    bcrypt_runs: AtomicU64,
}

impl Authenticator {
    /// An authenticator over `replica`'s users, on the node's `clock`.
    pub fn new(replica: Arc<MetadataReplica>, clock: Arc<dyn Clock>) -> Self {
        Self {
            replica,
            verified: Mutex::new(HashMap::new()),
            bcrypt_slots: Arc::new(Semaphore::new(BCRYPT_SLOTS)),
            throttle: Mutex::new(FailedLoginThrottle::default()),
            salt: rand::random(),
            clock,
            bcrypt_runs: AtomicU64::new(0),
        }
    }

    /// Time since the clock's origin, as the throttle measures it.
    fn elapsed(&self) -> Duration {
        Duration::from_millis(self.clock.now_ms())
    }

    /// The user an `Authorization` header value proves.
    ///
    /// # Errors
    /// [`AuthError`].
    pub async fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Arc<User>, AuthError> {
        let (username, password) = authorization
            .and_then(parse_basic)
            .ok_or(AuthError::Unauthenticated)?;
        let (user, users_version) = self.replica.user(&username);
        let user = user.ok_or(AuthError::Unauthenticated)?;
        let key = (
            users_version,
            username.clone(),
            self.digest(&username, &password),
        );
        let cached = self.verified.lock().get(&key).cloned();
        if let Some(cell) = &cached
            && cell.get() == Some(&true)
        {
            return Ok(user);
        }
        let now = self.elapsed();
        if !self.throttle.lock().may_try(&username, now) {
            return Err(AuthError::Throttled);
        }
        let cell = cached.unwrap_or_else(|| {
            let mut verified = self.verified.lock();
            if verified.len() >= VERIFIED_CACHE_MAX {
                verified.clear();
            }
            Arc::clone(verified.entry(key.clone()).or_default())
        });
        let ok = *cell
            .get_or_try_init(|| self.run_bcrypt(password, user.password_hash.as_str().to_owned()))
            .await?;
        if ok {
            return Ok(user);
        }
        self.verified.lock().remove(&key);
        self.throttle.lock().failed(&username, self.elapsed());
        Err(AuthError::Unauthenticated)
    }

    /// Hashes `password` at `cost`, under the bcrypt slots.
    ///
    /// # Errors
    /// [`AuthError::Unavailable`].
    pub async fn hash_password(&self, password: String, cost: u32) -> Result<String, AuthError> {
        let _slot = Arc::clone(&self.bcrypt_slots)
            .acquire_owned()
            .await
            .map_err(|_| AuthError::Unavailable)?;
        self.bcrypt_runs.fetch_add(1, Ordering::Relaxed);
        tokio::task::spawn_blocking(move || bcrypt::hash(password, cost))
            .await
            .map_err(|_| AuthError::Unavailable)?
            .map_err(|_| AuthError::Unavailable)
    }

    /// Checks `password` against `hash`, under the bcrypt slots.
    ///
    /// # Errors
    /// [`AuthError::Unavailable`].
    pub async fn verify_password(&self, password: String, hash: String) -> Result<bool, AuthError> {
        self.run_bcrypt(password, hash).await
    }

    async fn run_bcrypt(&self, password: String, hash: String) -> Result<bool, AuthError> {
        let _slot = Arc::clone(&self.bcrypt_slots)
            .acquire_owned()
            .await
            .map_err(|_| AuthError::Unavailable)?;
        self.bcrypt_runs.fetch_add(1, Ordering::Relaxed);
        let outcome = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
            .await
            .map_err(|_| AuthError::Unavailable)?;
        outcome.map_err(|error| {
            tracing::error!(%error, "stored password hash cannot be checked");
            AuthError::Unavailable
        })
    }

    /// Bcrypt runs waiting for a slot (approximate: the gauge
    /// `narad_auth_verify_queued`).
    pub fn queued(&self) -> usize {
        BCRYPT_SLOTS.saturating_sub(self.bcrypt_slots.available_permits())
    }

    /// bcrypt runs started since the node started.
    pub fn bcrypt_runs(&self) -> u64 {
        self.bcrypt_runs.load(Ordering::Relaxed)
    }

    /// A salted digest of the credential, so the cache never holds a
    /// password.
    fn digest(&self, username: &str, password: &str) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(self.salt);
        hasher.update(username.as_bytes());
        hasher.update([0u8]);
        hasher.update(password.as_bytes());
        hasher.finalize().into()
    }
}

/// Parses `Basic base64(user:pass)`.
fn parse_basic(header: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(header).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = BASE64.decode(encoded.trim()).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (username, password) = decoded.split_once(':')?;
    Some((username.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_failures_spend_the_burst() {
        let mut throttle = FailedLoginThrottle::default();
        for _ in 0..FAILED_LOGIN_BURST {
            assert!(throttle.may_try("bob", Duration::ZERO));
            throttle.failed("bob", Duration::ZERO);
        }
        assert!(!throttle.may_try("bob", Duration::ZERO));
    }

    #[test]
    fn one_attempt_is_regained_after_twelve_seconds() {
        let mut throttle = FailedLoginThrottle::default();
        for _ in 0..FAILED_LOGIN_BURST {
            throttle.failed("bob", Duration::ZERO);
        }
        assert!(!throttle.may_try("bob", Duration::from_secs(11)));
        assert!(throttle.may_try("bob", Duration::from_secs(12)));
        throttle.failed("bob", Duration::from_secs(12));
        assert!(!throttle.may_try("bob", Duration::from_secs(13)));
    }

    #[test]
    fn throttle_is_per_username() {
        let mut throttle = FailedLoginThrottle::default();
        for _ in 0..FAILED_LOGIN_BURST {
            throttle.failed("bob", Duration::ZERO);
        }
        assert!(throttle.may_try("alice", Duration::ZERO));
    }

    #[test]
    fn basic_header_parses_user_and_password_with_colons() {
        let header = format!("Basic {}", BASE64.encode("alice:pa:ss"));
        assert_eq!(
            parse_basic(header.as_bytes()),
            Some(("alice".into(), "pa:ss".into()))
        );
        assert_eq!(parse_basic(b"Bearer xyz"), None);
    }
}
