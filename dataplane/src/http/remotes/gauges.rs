//! The credential and key series of spec §9 ("Remote"), refreshed at each
//! scrape from the metastore and the node's [`RemoteCredentials`].
//!
//! Per remote (gauge families replaced whole, so a deleted remote's
//! series go with it): `narad_remote_credential_state{remote,state}` (1
//! for the state this node finds its credential in: `readable`,
//! `unreadable`, `no_secret`; 0 for the others),
//! `narad_remote_credential_version{remote}`,
//! `narad_remote_credential_age_seconds{remote}` (since its password was
//! set), `narad_remote_key_seals{key}` (remotes sealed under each key
//! version) and the counter `narad_remote_credential_decrypts_total{remote}`.
//! Per key: `narad_remote_key_age_seconds{key}` (the cluster's current key
//! version, since it was minted; not served while the cluster has no key
//! or the mint time is unknown, see [`key_ages`]).
//! Node-wide: `narad_remote_credential_key_current` (1 when this node's
//! secret derives the cluster's key, or there is none yet and the node has
//! a secret), `narad_remote_seals_total`, `narad_remote_reseal_opens_total`
//! (opens by the previous secret's key), `narad_remotes_allowlist_configured`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use narad_meta::RemoteKey;

use super::super::ApiState;
use crate::credentials::{CredentialError, RemoteCredentials};
use crate::metrics::Series;

/// `narad_remote_credential_state`.
pub const CREDENTIAL_STATE: &str = "narad_remote_credential_state";
/// `narad_remote_credential_version`.
pub const CREDENTIAL_VERSION: &str = "narad_remote_credential_version";
/// `narad_remote_credential_decrypts_total`.
pub const CREDENTIAL_DECRYPTS_TOTAL: &str = "narad_remote_credential_decrypts_total";
/// `narad_remote_credential_age_seconds`.
pub const CREDENTIAL_AGE_SECONDS: &str = "narad_remote_credential_age_seconds";
/// `narad_remote_credential_key_current`.
pub const CREDENTIAL_KEY_CURRENT: &str = "narad_remote_credential_key_current";
/// `narad_remote_key_seals`.
pub const KEY_SEALS: &str = "narad_remote_key_seals";
/// `narad_remote_key_age_seconds`.
pub const KEY_AGE_SECONDS: &str = "narad_remote_key_age_seconds";
/// `narad_remote_seals_total`.
pub const SEALS_TOTAL: &str = "narad_remote_seals_total";
/// `narad_remote_reseal_opens_total`.
pub const RESEAL_OPENS_TOTAL: &str = "narad_remote_reseal_opens_total";
/// `narad_remotes_allowlist_configured`.
pub const ALLOWLIST_CONFIGURED: &str = "narad_remotes_allowlist_configured";
/// `narad_remotes_plaintext_raft`: set once at start by the node's
/// command, which knows whether the cluster plane has mutual TLS.
pub const PLAINTEXT_RAFT: &str = "narad_remotes_plaintext_raft";

/// The states of `narad_remote_credential_state`.
const STATES: [&str; 3] = ["readable", "unreadable", "no_secret"];

/// `narad_remote_key_age_seconds{key}` at `now_ms` (Unix ms): one series
/// for the cluster's key, labelled by its version, when it has one and its
/// mint time is known. The metastore keeps only the current key, so older
/// versions have no age; a key recorded before mint times were (state
/// version 4) has none until the next re-encryption under a new secret. A
/// mint time ahead of this node's clock reads 0.
pub(crate) fn key_ages(key: Option<&RemoteKey>, now_ms: u64) -> Vec<Series> {
    key.and_then(|key| {
        let minted_ms = key.created_at_ms?;
        let age_seconds = now_ms.saturating_sub(minted_ms) as f64 / 1000.0;
        Some((vec![("key", key.version.to_string())], age_seconds))
    })
    .into_iter()
    .collect()
}

/// Refreshes every series above from `state`.
pub(crate) fn refresh(state: &ApiState) {
    let metrics = &state.metrics;
    let credentials: &RemoteCredentials = &state.credentials;
    let view = state.replica.view();
    let metastore = &*view.metastore;
    let now_ms = state.clock().unix_ms();
    let (mut states, mut versions, mut ages) = (Vec::new(), Vec::new(), Vec::new());
    let mut key_seals: BTreeMap<u32, u64> = BTreeMap::new();
    for remote in metastore.remotes() {
        let name = || ("remote", remote.name.clone());
        let found = match metastore.remote_key() {
            Some(key) => match credentials.open(key, remote) {
                Ok(_) => "readable",
                Err(CredentialError::NoSecret) => "no_secret",
                Err(_) => "unreadable",
            },
            None => "unreadable",
        };
        for candidate in STATES {
            let value = if candidate == found { 1.0 } else { 0.0 };
            states.push((vec![name(), ("state", candidate.to_owned())], value));
        }
        versions.push((vec![name()], remote.credential_version as f64));
        let age_ms = now_ms.saturating_sub(remote.password.set_at_ms);
        ages.push((vec![name()], age_ms as f64 / 1000.0));
        *key_seals.entry(remote.password.key_version).or_default() += 1;
    }
    let seals: Vec<Series> = key_seals
        .into_iter()
        .map(|(version, count)| (vec![("key", version.to_string())], count as f64))
        .collect();
    metrics.publish_gauges(CREDENTIAL_STATE, states);
    metrics.publish_gauges(CREDENTIAL_VERSION, versions);
    metrics.publish_gauges(CREDENTIAL_AGE_SECONDS, ages);
    metrics.publish_gauges(KEY_SEALS, seals);
    metrics.publish_gauges(KEY_AGE_SECONDS, key_ages(metastore.remote_key(), now_ms));
    for (remote, decrypts) in credentials.decrypts_by_remote() {
        metrics.count_absolute(CREDENTIAL_DECRYPTS_TOTAL, &[("remote", remote)], decrypts);
    }
    let key_current = match metastore.remote_key() {
        Some(key) => credentials
            .current_key_id(key)
            .is_ok_and(|id| id == key.key_id),
        None => credentials.has_secret(),
    };
    metrics.set(
        CREDENTIAL_KEY_CURRENT,
        &[],
        if key_current { 1.0 } else { 0.0 },
    );
    let counters = &credentials.counters;
    metrics.count_absolute(SEALS_TOTAL, &[], counters.seals.load(Ordering::Relaxed));
    metrics.count_absolute(
        RESEAL_OPENS_TOTAL,
        &[],
        counters.previous_opens.load(Ordering::Relaxed),
    );
    let allowlist = state.config.remotes.url_policy.allowlist_configured();
    metrics.set(ALLOWLIST_CONFIGURED, &[], if allowlist { 1.0 } else { 0.0 });
}

#[cfg(test)]
#[path = "gauges_tests.rs"]
mod tests;
