//! Generators of remotes, remote links and the commands that change them.

use std::collections::{BTreeMap, BTreeSet};

use proptest::collection::{btree_map, btree_set, vec};
use proptest::option::of;
use proptest::prelude::*;

use super::strategies::{actor, incarnation, text};
use crate::{
    AttachEpoch, AttachRemoteChild, Compression, CreateRemote, DeleteRemote, PauseRemoteChild,
    Remote, RemoteFrom, RemoteId, RemoteKey, RemoteLimits, RemoteLink, RemotePause, ResealRemotes,
    ResealedPassword, ResumeRemoteChild, SealedPassword, SkipRemoteRecord, UpdateRemote,
};

fn remote_id() -> impl Strategy<Value = RemoteId> {
    any::<u64>().prop_map(RemoteId::from_bits)
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..40)
}

pub(super) fn limits() -> impl Strategy<Value = RemoteLimits> {
    (
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        prop_oneof![Just(Compression::None), Just(Compression::Zstd)],
    )
        .prop_map(
            |(max_in_flight, request, idle, age, check, compression)| RemoteLimits {
                max_in_flight,
                request_timeout_ms: request,
                idle_conn_timeout_ms: idle,
                conn_max_age_ms: age,
                check_interval_ms: check,
                compression,
            },
        )
}

pub(super) fn sealed() -> impl Strategy<Value = SealedPassword> {
    (any::<u32>(), text(), bytes(), text(), any::<u64>(), text()).prop_map(
        |(key_version, key_id, sealed, fingerprint, set_at_ms, set_by)| SealedPassword {
            key_version,
            key_id,
            sealed,
            fingerprint,
            set_at_ms,
            set_by,
        },
    )
}

pub(super) fn key() -> impl Strategy<Value = RemoteKey> {
    (any::<u32>(), text(), bytes(), of(any::<u64>())).prop_map(
        |(version, key_id, salt, created_at_ms)| RemoteKey {
            version,
            key_id,
            salt,
            created_at_ms,
        },
    )
}

pub(super) fn remote() -> impl Strategy<Value = Remote> {
    (
        (text(), remote_id(), text(), text(), sealed()),
        (
            any::<u64>(),
            of(text()),
            limits(),
            any::<u64>(),
            any::<u64>(),
            text(),
        ),
    )
        .prop_map(
            |(
                (name, id, url, username, password),
                (credential_version, ca_pem, limits, revision, created_at_ms, created_by),
            )| Remote {
                name,
                id,
                url,
                username,
                password,
                credential_version,
                ca_pem,
                limits,
                revision,
                created_at_ms,
                created_by,
            },
        )
}

fn skips() -> impl Strategy<Value = BTreeMap<u32, BTreeSet<u64>>> {
    btree_map(any::<u32>(), btree_set(any::<u64>(), 0..4), 0..3)
}

pub(super) fn link() -> impl Strategy<Value = RemoteLink> {
    (
        (text(), remote_id(), text(), of(text()), any::<u8>()),
        (
            prop_oneof![
                Just(RemoteFrom::Attach),
                Just(RemoteFrom::Unconsumed),
                Just(RemoteFrom::Earliest)
            ],
            of(
                (text(), any::<u64>(), text()).prop_map(|(reason, at_ms, by)| RemotePause {
                    reason,
                    at_ms,
                    by,
                }),
            ),
            skips(),
            any::<u64>(),
        ),
    )
        .prop_map(
            |((remote, remote_id, remote_topic, target_id, lanes), (from, paused, skip, at))| {
                RemoteLink {
                    remote,
                    remote_id,
                    remote_topic,
                    target_id,
                    lanes,
                    from,
                    paused,
                    skip,
                    created_at_ms: at,
                }
            },
        )
}

pub(super) fn create_remote() -> impl Strategy<Value = CreateRemote> {
    (actor(), remote(), key()).prop_map(|(actor, remote, key)| CreateRemote { actor, remote, key })
}

pub(super) fn update_remote() -> impl Strategy<Value = UpdateRemote> {
    (
        (actor(), text(), of(any::<u64>()), of(text()), of(text())),
        (of(sealed()), of(key()), of(of(text())), of(limits())),
    )
        .prop_map(
            |((actor, name, expected_revision, url, username), (password, key, ca_pem, limits))| {
                UpdateRemote {
                    actor,
                    name,
                    expected_revision,
                    url,
                    username,
                    password,
                    key,
                    ca_pem,
                    limits,
                }
            },
        )
}

pub(super) fn delete_remote() -> impl Strategy<Value = DeleteRemote> {
    (actor(), text(), any::<bool>()).prop_map(|(actor, name, force)| DeleteRemote {
        actor,
        name,
        force,
    })
}

pub(super) fn reseal_remotes() -> impl Strategy<Value = ResealRemotes> {
    let resealed =
        (text(), any::<u64>(), sealed()).prop_map(|(name, credential_version, password)| {
            ResealedPassword {
                name,
                credential_version,
                password,
            }
        });
    (actor(), key(), vec(resealed, 0..3)).prop_map(|(actor, key, passwords)| ResealRemotes {
        actor,
        key,
        passwords,
    })
}

pub(super) fn attach_remote_child() -> impl Strategy<Value = AttachRemoteChild> {
    (
        (actor(), text(), incarnation(), text(), incarnation()),
        (any::<u64>(), vec(any::<u64>(), 0..5), link()),
    )
        .prop_map(
            |((actor, parent, parent_id, child, child_id), (epoch, attach_offsets, link))| {
                AttachRemoteChild {
                    actor,
                    parent,
                    parent_id,
                    child,
                    child_id,
                    attach_epoch: AttachEpoch::from_bits(epoch),
                    attach_offsets,
                    link,
                }
            },
        )
}

pub(super) fn pause_remote_child() -> impl Strategy<Value = PauseRemoteChild> {
    (actor(), text(), text(), any::<u64>()).prop_map(|(actor, child, reason, at_ms)| {
        PauseRemoteChild {
            actor,
            child,
            reason,
            at_ms,
        }
    })
}

pub(super) fn resume_remote_child() -> impl Strategy<Value = ResumeRemoteChild> {
    (actor(), text(), of(text())).prop_map(|(actor, child, target_id)| ResumeRemoteChild {
        actor,
        child,
        target_id,
    })
}

pub(super) fn skip_remote_record() -> impl Strategy<Value = SkipRemoteRecord> {
    (actor(), text(), any::<u32>(), any::<u64>()).prop_map(|(actor, child, partition, offset)| {
        SkipRemoteRecord {
            actor,
            child,
            partition,
            offset,
        }
    })
}
