use std::sync::atomic::Ordering;

use narad_meta::{Remote, RemoteId, RemoteKey};
use narad_remotes::seal::Binding;
use zeroize::Zeroizing;

use super::*;

const SECRET: &[u8] = b"a cluster secret of enough bytes";
const PASSWORD: &[u8] = b"replicator-password-0123456789";

fn credentials(current: Option<&[u8]>, previous: Option<&[u8]>) -> RemoteCredentials {
    RemoteCredentials::new(RemoteSecrets {
        current: current.map(|secret| Zeroizing::new(secret.to_vec())),
        previous: previous.map(|secret| Zeroizing::new(secret.to_vec())),
    })
}

fn remote(id: &RemoteId, sealed: SealedFor) -> (Remote, RemoteKey) {
    let remote = Remote {
        name: "dr".into(),
        id: id.clone(),
        url: "https://dr.example.com".into(),
        username: "u".into(),
        password: sealed.password,
        credential_version: 1,
        ca_pem: None,
        limits: Default::default(),
        revision: 1,
        created_at_ms: 0,
        created_by: "root".into(),
    };
    (remote, sealed.key)
}

fn sealed_remote(
    node: &RemoteCredentials,
    key: Option<&RemoteKey>,
) -> Result<(Remote, RemoteKey), CredentialError> {
    let id = RemoteId::from_bits(7);
    let binding = Binding {
        remote_id: id.as_str(),
        credential_version: 1,
    };
    let sealed = node.seal(key, binding, PASSWORD, (5_000, "root"))?;
    Ok(remote(&id, sealed))
}

#[test]
fn the_first_seal_makes_the_first_key_with_a_fresh_salt() {
    let node = credentials(Some(SECRET), None);
    let (remote, key) = sealed_remote(&node, None).expect("sealed");
    assert_eq!(key.version, 1);
    assert_eq!(key.salt.len(), SALT_BYTES);
    assert_eq!(key.key_id, node.current_key_id(&key).expect("id"));
    assert_eq!(
        key.created_at_ms,
        Some(5_000),
        "minted as the password is set"
    );
    assert_eq!(remote.password.key_id, key.key_id);
    assert_eq!(
        (remote.password.set_at_ms, remote.password.set_by.as_str()),
        (5_000, "root")
    );
    let (_, other_key) = sealed_remote(&node, None).expect("sealed");
    assert_ne!(key.salt, other_key.salt);
    assert_eq!(node.counters.seals.load(Ordering::Relaxed), 2);
}

#[test]
fn a_node_without_a_secret_seals_nothing() {
    let node = credentials(None, None);
    assert_eq!(
        sealed_remote(&node, None).map(drop),
        Err(CredentialError::NoSecret)
    );
}

#[test]
fn a_node_whose_secret_is_not_the_cluster_key_refuses_to_seal() {
    let (_, key) = sealed_remote(&credentials(Some(SECRET), None), None).expect("sealed");
    let other = credentials(Some(b"another cluster secret, long enough"), None);
    assert!(matches!(
        sealed_remote(&other, Some(&key)),
        Err(CredentialError::KeyMismatch { .. })
    ));
}

#[test]
fn a_credential_version_is_opened_once() {
    let node = credentials(Some(SECRET), None);
    let (remote, key) = sealed_remote(&node, None).expect("sealed");
    for _ in 0..3 {
        let password = node.open(&key, &remote).expect("opens");
        assert_eq!(password.as_bytes(), PASSWORD);
    }
    assert_eq!(node.decrypts_by_remote(), vec![("dr".to_owned(), 1)]);
}

#[test]
fn a_salt_of_the_wrong_length_is_refused() {
    let node = credentials(Some(SECRET), None);
    let (remote, mut key) = sealed_remote(&node, None).expect("sealed");
    key.salt.pop();
    assert_eq!(
        node.open(&key, &remote).map(drop),
        Err(CredentialError::BadSalt)
    );
}

#[test]
fn the_reencrypt_plan_moves_old_seals_to_the_next_key_version() {
    let old = credentials(Some(SECRET), None);
    let (remote, key) = sealed_remote(&old, None).expect("sealed");
    let replica = crate::testing::replica();
    replica
        .apply_next(&narad_meta::Command::CreateRemote(
            narad_meta::CreateRemote {
                actor: narad_meta::Actor::User("root".into()),
                remote: remote.clone(),
                key: key.clone(),
            },
        ))
        .expect("stored");
    let view = replica.view();
    let metastore = &*view.metastore;
    let rotated = credentials(Some(b"the next cluster secret, long enough"), Some(SECRET));
    let plan = rotated.plan_reencrypt(metastore, 9_000).expect("plan");
    let new_key = plan.key.expect("key");
    assert_eq!(new_key.version, 2);
    assert_eq!(new_key.created_at_ms, Some(9_000), "minted now");
    assert_eq!(new_key.salt, key.salt);
    assert_ne!(new_key.key_id, key.key_id);
    assert_eq!(plan.resealed.len(), 1);
    assert!(plan.failed.is_empty() && plan.already_current.is_empty());
    let resealed = &plan.resealed[0];
    assert_eq!(resealed.password.key_version, 2);
    assert_eq!(resealed.password.set_by, "root");
    assert_eq!(rotated.counters.previous_opens.load(Ordering::Relaxed), 1);
    // The old secret's node finds the cluster key current: the plan keeps
    // it, mint time and all.
    let plan = old.plan_reencrypt(metastore, 9_000).expect("plan");
    assert_eq!(plan.key.as_ref(), metastore.remote_key());
    assert_eq!(plan.already_current, vec!["dr".to_owned()]);
    let stranger = credentials(Some(b"a secret nobody had, long enough"), None);
    let plan = stranger.plan_reencrypt(metastore, 9_000).expect("plan");
    assert_eq!(plan.failed.len(), 1);
    assert!(plan.resealed.is_empty());
}

#[test]
fn debug_shows_no_secret() {
    let node = credentials(Some(SECRET), Some(SECRET));
    let shown = format!("{node:?}");
    assert!(!shown.contains("cluster secret"));
    assert!(shown.contains("current: true"));
}
