//! `narad_remote_key_age_seconds` on a clock the test moves.

use narad_clock::{Clock, ManualClock};
use narad_meta::RemoteKey;

use super::key_ages;

/// A Unix time well past the epoch (2023-11-14).
const T0_MS: u64 = 1_700_000_000_000;

fn key(version: u32, created_at_ms: Option<u64>) -> RemoteKey {
    RemoteKey {
        version,
        key_id: format!("k{version}"),
        salt: vec![7; 32],
        created_at_ms,
    }
}

#[test]
fn the_key_age_counts_from_its_mint_time_on_the_nodes_clock() {
    let clock = ManualClock::new(T0_MS);
    let minted = key(2, Some(T0_MS - 90_000));
    let ages = key_ages(Some(&minted), clock.unix_ms());
    assert_eq!(ages, vec![(vec![("key", "2".to_owned())], 90.0)]);
    clock.advance(10_500);
    let ages = key_ages(Some(&minted), clock.unix_ms());
    assert_eq!(ages, vec![(vec![("key", "2".to_owned())], 100.5)]);
}

#[test]
fn no_key_or_an_unknown_mint_time_serves_no_age() {
    let clock = ManualClock::new(T0_MS);
    assert!(key_ages(None, clock.unix_ms()).is_empty());
    assert!(key_ages(Some(&key(1, None)), clock.unix_ms()).is_empty());
}

#[test]
fn a_mint_time_ahead_of_this_nodes_clock_reads_zero() {
    let clock = ManualClock::new(T0_MS);
    let ahead = key(1, Some(T0_MS + 5_000));
    assert_eq!(
        key_ages(Some(&ahead), clock.unix_ms()),
        vec![(vec![("key", "1".to_owned())], 0.0)]
    );
}
