use ring::rand::SystemRandom;

use super::*;

const SECRET: &[u8] = b"cluster secret of the first generation";
const NEW_SECRET: &[u8] = b"cluster secret of the second generation";
const PASSWORD: &[u8] = b"replicator-password-0123456789";

fn salt() -> KeySalt {
    KeySalt::from_bytes([7; SALT_BYTES])
}

fn binding(remote_id: &str, credential_version: u64) -> Binding<'_> {
    Binding {
        remote_id,
        credential_version,
    }
}

fn keyring(secret: &[u8], previous: Option<&[u8]>) -> Keyring {
    Keyring::new(secret, previous, &salt()).expect("keyring")
}

fn sealed(keys: &Keyring) -> Sealed {
    keys.seal(binding("r-1", 1), PASSWORD, &SystemRandom::new())
        .expect("seal")
}

#[test]
fn a_sealed_password_opens_to_the_same_bytes() {
    let keys = keyring(SECRET, None);
    let sealed = sealed(&keys);
    let opened = keys.open(binding("r-1", 1), &sealed).expect("open");
    assert_eq!(opened.password.as_bytes(), PASSWORD);
    assert!(!opened.by_previous);
    assert_eq!(sealed.key_id, keys.current_id());
}

#[test]
fn the_ciphertext_does_not_contain_the_password() {
    let sealed = sealed(&keyring(SECRET, None)).encode();
    assert!(
        !sealed
            .windows(PASSWORD.len())
            .any(|window| window == PASSWORD)
    );
}

#[test]
fn two_seals_of_one_password_use_different_nonces() {
    let keys = keyring(SECRET, None);
    let (first, second) = (sealed(&keys), sealed(&keys));
    assert_ne!(first.nonce, second.nonce);
    assert_ne!(first.ciphertext, second.ciphertext);
}

#[test]
fn another_secret_does_not_open_and_names_the_missing_key() {
    let sealed = sealed(&keyring(SECRET, None));
    let other = keyring(NEW_SECRET, None);
    assert_eq!(
        other.open(binding("r-1", 1), &sealed).map(|_| ()),
        Err(OpenError::UnknownKey(sealed.key_id))
    );
}

#[test]
fn another_salt_makes_another_key() {
    let first = SealKey::derive(SECRET, &salt()).expect("key");
    let second = SealKey::derive(SECRET, &KeySalt::from_bytes([8; SALT_BYTES])).expect("key");
    assert_ne!(first.id(), second.id());
}

#[test]
fn a_ciphertext_moved_to_another_remote_or_version_is_refused() {
    let keys = keyring(SECRET, None);
    let sealed = sealed(&keys);
    let refused = Err(OpenError::Refused(keys.current_id()));
    assert_eq!(keys.open(binding("r-2", 1), &sealed).map(|_| ()), refused);
    assert_eq!(keys.open(binding("r-1", 2), &sealed).map(|_| ()), refused);
}

#[test]
fn a_tampered_ciphertext_tag_or_nonce_is_refused() {
    let keys = keyring(SECRET, None);
    let sealed = sealed(&keys);
    let last = sealed.ciphertext.len() - 1;
    for tamper in [
        Box::new(|s: &mut Sealed| s.ciphertext[0] ^= 1) as Box<dyn Fn(&mut Sealed)>,
        Box::new(move |s: &mut Sealed| s.ciphertext[last] ^= 0x80),
        Box::new(|s: &mut Sealed| s.nonce[3] ^= 1),
        Box::new(|s: &mut Sealed| {
            s.ciphertext.pop();
        }),
    ] {
        let mut changed = sealed.clone();
        tamper(&mut changed);
        assert_eq!(
            keys.open(binding("r-1", 1), &changed).map(|_| ()),
            Err(OpenError::Refused(keys.current_id()))
        );
    }
}

#[test]
fn a_relabelled_key_id_is_refused_even_when_the_node_has_that_key() {
    // Sealed under the old key, then labelled with the new key's id.
    let old = keyring(SECRET, None);
    let both = keyring(NEW_SECRET, Some(SECRET));
    let mut sealed = sealed(&old);
    sealed.key_id = both.current_id();
    assert_eq!(
        both.open(binding("r-1", 1), &sealed).map(|_| ()),
        Err(OpenError::Refused(both.current_id()))
    );
}

#[test]
fn the_previous_secret_opens_old_ciphertexts_and_never_seals() {
    let old = keyring(SECRET, None);
    let sealed_old = sealed(&old);
    let rotated = keyring(NEW_SECRET, Some(SECRET));
    assert_eq!(rotated.previous_id(), Some(old.current_id()));
    let opened = rotated.open(binding("r-1", 1), &sealed_old).expect("open");
    assert_eq!(opened.password.as_bytes(), PASSWORD);
    assert!(opened.by_previous);
    assert_eq!(sealed(&rotated).key_id, rotated.current_id());
    assert_ne!(rotated.current_id(), old.current_id());
}

#[test]
fn reseal_moves_an_old_ciphertext_to_the_current_key() {
    let old = keyring(SECRET, None);
    let sealed_old = sealed(&old);
    let rotated = keyring(NEW_SECRET, Some(SECRET));
    let rng = SystemRandom::new();
    let Reseal::Resealed {
        sealed: resealed,
        fingerprint,
    } = rotated
        .reseal(binding("r-1", 1), &sealed_old, &rng)
        .expect("reseal")
    else {
        panic!("an old ciphertext must be resealed");
    };
    assert_eq!(resealed.key_id, rotated.current_id());
    assert_eq!(fingerprint, rotated.fingerprint(PASSWORD));
    // Once the previous secret is gone, the new seal still opens.
    let only_new = keyring(NEW_SECRET, None);
    let opened = only_new.open(binding("r-1", 1), &resealed).expect("open");
    assert_eq!(opened.password.as_bytes(), PASSWORD);
    assert!(matches!(
        rotated.reseal(binding("r-1", 1), &resealed, &rng),
        Ok(Reseal::AlreadyCurrent)
    ));
}

#[test]
fn reseal_without_the_previous_secret_fails() {
    let sealed_old = sealed(&keyring(SECRET, None));
    let only_new = keyring(NEW_SECRET, None);
    assert!(matches!(
        only_new.reseal(binding("r-1", 1), &sealed_old, &SystemRandom::new()),
        Err(ResealError::Open(OpenError::UnknownKey(_)))
    ));
}

#[test]
fn a_previous_secret_equal_to_the_current_is_ignored() {
    assert_eq!(keyring(SECRET, Some(SECRET)).previous_id(), None);
}

#[test]
fn an_empty_secret_makes_no_key() {
    assert_eq!(
        Keyring::new(b"", None, &salt()).map(|_| ()),
        Err(KeyError::EmptySecret)
    );
    assert_eq!(
        Keyring::new(SECRET, Some(b""), &salt()).map(|_| ()),
        Err(KeyError::EmptySecret)
    );
}

#[test]
fn the_key_id_depends_on_the_key_and_is_not_the_secret() {
    let keys = keyring(SECRET, None);
    assert_eq!(keys.current_id(), keyring(SECRET, None).current_id());
    assert_ne!(keys.current_id(), keyring(NEW_SECRET, None).current_id());
    assert_eq!(keys.current_id().to_string().len(), 2 * KEY_ID_BYTES);
    assert!(!SECRET.starts_with(keys.current_id().as_bytes()));
}

#[test]
fn fingerprints_tell_passwords_apart_and_are_short_hex() {
    let keys = keyring(SECRET, None);
    let fingerprint = keys.fingerprint(PASSWORD);
    assert_eq!(fingerprint, keys.fingerprint(PASSWORD));
    assert_ne!(
        fingerprint,
        keys.fingerprint(b"another-password-0123456789")
    );
    assert_ne!(fingerprint, keyring(NEW_SECRET, None).fingerprint(PASSWORD));
    assert_eq!(fingerprint.len(), 2 * FINGERPRINT_BYTES);
    assert!(fingerprint.bytes().all(|byte| byte.is_ascii_hexdigit()));
}

#[test]
fn the_encoded_form_round_trips_and_refuses_garbage() {
    let sealed = sealed(&keyring(SECRET, None));
    assert_eq!(Sealed::decode(&sealed.encode()), Ok(sealed.clone()));
    let mut other_format = sealed.encode();
    other_format[0] = 2;
    assert!(matches!(
        Sealed::decode(&other_format),
        Err(OpenError::Malformed(_))
    ));
    assert!(matches!(Sealed::decode(&[]), Err(OpenError::Malformed(_))));
    let short = &sealed.encode()[..1 + KEY_ID_BYTES + NONCE_LEN + TAG_BYTES - 1];
    assert!(matches!(
        Sealed::decode(short),
        Err(OpenError::Malformed(_))
    ));
}

#[test]
fn a_password_over_the_limit_is_not_sealed() {
    let keys = keyring(SECRET, None);
    let long = vec![b'x'; PASSWORD_BYTES_MAX + 1];
    assert_eq!(
        keys.seal(binding("r-1", 1), &long, &SystemRandom::new()),
        Err(SealError::TooLong)
    );
}

#[test]
fn the_cache_opens_once_per_credential_version() {
    let keys = keyring(SECRET, None);
    let first = sealed(&keys);
    let mut cache = OpenCache::new();
    let mut opens = 0;
    for _ in 0..3 {
        let password = cache
            .get_or_open(binding("r-1", 1), || {
                opens += 1;
                keys.open(binding("r-1", 1), &first)
                    .map(|opened| opened.password)
            })
            .expect("open");
        assert_eq!(password.as_bytes(), PASSWORD);
    }
    assert_eq!(opens, 1);
    let second = keys
        .seal(
            binding("r-1", 2),
            b"a-new-password-0123456789",
            &SystemRandom::new(),
        )
        .expect("seal");
    let password = cache
        .get_or_open(binding("r-1", 2), || {
            opens += 1;
            keys.open(binding("r-1", 2), &second)
                .map(|opened| opened.password)
        })
        .expect("open");
    assert_eq!(password.as_bytes(), b"a-new-password-0123456789");
    assert_eq!((opens, cache.len()), (2, 1));
}

#[test]
fn the_cache_keeps_no_failed_open() {
    let mut cache = OpenCache::new();
    let failed: Result<Arc<Password>, OpenError> =
        cache.get_or_open(binding("r-1", 1), || Err(OpenError::Malformed("x")));
    assert!(failed.is_err());
    assert!(cache.is_empty());
}

#[test]
fn the_cache_forgets_deleted_remotes() {
    let mut cache = OpenCache::new();
    for id in ["a", "b"] {
        cache
            .get_or_open::<OpenError>(binding(id, 1), || {
                Ok(Password(Zeroizing::new(b"p".to_vec())))
            })
            .expect("open");
    }
    cache.retain(|id| id == "b");
    assert_eq!(cache.len(), 1);
}

#[test]
fn debug_output_shows_no_secret_material() {
    let keys = keyring(SECRET, None);
    let sealed = sealed(&keys);
    let opened = keys.open(binding("r-1", 1), &sealed).expect("open");
    let shown = format!("{keys:?} {sealed:?} {opened:?}");
    assert!(!shown.contains("replicator-password"));
    assert!(shown.contains(&keys.current_id().to_string()));
}
