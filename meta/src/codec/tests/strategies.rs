//! Generators of every value the metastore codecs carry, each field drawn
//! independently, so rare combinations (every option absent, every list
//! empty, and the opposite) come up.

use std::collections::BTreeMap;

use proptest::collection::{btree_map, btree_set, vec};
use proptest::option::of;
use proptest::prelude::*;

use super::remote_strategies;
use crate::{
    AbortMove, Actor, AddSchemaVersion, AlterTopic, AssignPartitions, AttachChild, AttachEpoch,
    Command, CompleteMove, CreateTopic, CreateUser, DeleteTopic, DeleteUser, DetachChild,
    DomainVersions, Grant, GrantAction, Heartbeat, IncarnationId, MarkDead, Member, MemberStatus,
    Metastore, MoveTarget, NewLink, ParentLink, PartitionOwner, PasswordHash, RegisterMember,
    RemoveMember, SchemaVersion, SeedAdmin, SetDraining, SetGrants, SetMoveTargets, SetPassword,
    Topic, TopicDefaults, User,
};

pub(super) fn text() -> impl Strategy<Value = String> {
    ".{0,10}"
}

fn names() -> impl Strategy<Value = Vec<String>> {
    vec(text(), 0..4)
}

fn offsets() -> impl Strategy<Value = Vec<u64>> {
    vec(any::<u64>(), 0..6)
}

pub(super) fn incarnation() -> impl Strategy<Value = IncarnationId> {
    any::<u64>().prop_map(IncarnationId::from_bits)
}

fn epoch() -> impl Strategy<Value = AttachEpoch> {
    any::<u64>().prop_map(AttachEpoch::from_bits)
}

/// A well-formed bcrypt hash: `$2b$`, a two-digit cost, `$`, 53 characters.
pub(super) fn password_hash() -> impl Strategy<Value = PasswordHash> {
    "[./A-Za-z0-9]{53}".prop_map(|body| {
        PasswordHash::try_from(format!("$2b$04${body}")).expect("a well-formed hash")
    })
}

pub(super) fn actor() -> impl Strategy<Value = Actor> {
    prop_oneof![Just(Actor::SecurityOff), text().prop_map(Actor::User)]
}

pub(super) fn defaults() -> impl Strategy<Value = TopicDefaults> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(
            |(partitions, partitions_max, retention, visibility, in_flight, ahead)| TopicDefaults {
                partitions,
                partitions_max,
                retention_ms: retention,
                visibility_timeout_ms: visibility,
                max_in_flight_per_partition: in_flight,
                max_acked_ahead_per_partition: ahead,
            },
        )
}

pub(super) fn new_link() -> impl Strategy<Value = NewLink> {
    (text(), incarnation(), of(any::<i64>()), epoch(), offsets()).prop_map(
        |(parent, parent_id, fanout_delay_ms, attach_epoch, attach_offsets)| NewLink {
            parent,
            parent_id,
            fanout_delay_ms,
            attach_epoch,
            attach_offsets,
        },
    )
}

pub(super) fn grant() -> impl Strategy<Value = Grant> {
    let action = prop_oneof![
        Just(GrantAction::Produce),
        Just(GrantAction::Consume),
        Just(GrantAction::Create),
        Just(GrantAction::Admin),
    ];
    (action, names()).prop_map(|(action, patterns)| Grant { action, patterns })
}

fn grants() -> impl Strategy<Value = Vec<Grant>> {
    vec(grant(), 0..3)
}

pub(super) fn schema_version() -> impl Strategy<Value = SchemaVersion> {
    (any::<u32>(), ".{0,24}").prop_map(|(version, document)| SchemaVersion { version, document })
}

pub(super) fn parent_link() -> impl Strategy<Value = ParentLink> {
    (text(), epoch(), any::<u64>(), offsets()).prop_map(
        |(parent, attach_epoch, fanout_delay_ms, attach_offsets)| ParentLink {
            parent,
            attach_epoch,
            fanout_delay_ms,
            attach_offsets,
        },
    )
}

pub(super) fn topic() -> impl Strategy<Value = Topic> {
    let settings = (any::<u32>(), vec(any::<u64>(), 6..=6));
    (
        text(),
        incarnation(),
        settings,
        of(text()),
        vec(schema_version(), 0..3),
        of(parent_link()),
        names(),
    )
        .prop_map(
            |(name, id, (partitions, numbers), owner, schemas, parent, children)| Topic {
                name,
                id,
                partitions,
                retention_ms: numbers[0],
                visibility_timeout_ms: numbers[1],
                max_in_flight_per_partition: numbers[2],
                max_acked_ahead_per_partition: numbers[3],
                idempotency_window_ms: numbers[5],
                created_at_ms: numbers[4],
                owner,
                schemas,
                parent,
                children,
            },
        )
}

pub(super) fn member() -> impl Strategy<Value = Member> {
    let status = prop_oneof![Just(MemberStatus::Alive), Just(MemberStatus::Dead)];
    (text(), text(), text(), any::<u64>(), status, any::<bool>()).prop_map(
        |(id, http_addr, rpc_addr, last_heartbeat_ms, status, draining)| Member {
            id,
            http_addr,
            rpc_addr,
            last_heartbeat_ms,
            status,
            draining,
        },
    )
}

pub(super) fn user() -> impl Strategy<Value = User> {
    (
        text(),
        password_hash(),
        any::<bool>(),
        grants(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(
            |(username, password_hash, root, grants, created_at_ms, updated_at_ms)| User {
                username,
                password_hash,
                root,
                grants,
                created_at_ms,
                updated_at_ms,
            },
        )
}

fn opt_i64() -> impl Strategy<Value = Option<i64>> {
    of(any::<i64>())
}

pub(super) fn create_topic() -> impl Strategy<Value = CreateTopic> {
    (
        (actor(), text(), incarnation()),
        vec(opt_i64(), 6..=6),
        of(".{0,16}"),
        of(new_link()),
        defaults(),
        any::<u64>(),
    )
        .prop_map(
            |((actor, name, id), numbers, schema, parent, defaults, created_at_ms)| CreateTopic {
                actor,
                name,
                id,
                partitions: numbers[0],
                retention_ms: numbers[1],
                visibility_timeout_ms: numbers[2],
                max_in_flight_per_partition: numbers[3],
                max_acked_ahead_per_partition: numbers[4],
                idempotency_window_ms: numbers[5],
                schema,
                parent,
                defaults,
                created_at_ms,
            },
        )
}

pub(super) fn alter_topic() -> impl Strategy<Value = AlterTopic> {
    (
        actor(),
        text(),
        of(incarnation()),
        vec(opt_i64(), 5..=5),
        defaults(),
    )
        .prop_map(|(actor, name, expected_id, numbers, defaults)| AlterTopic {
            actor,
            name,
            expected_id,
            retention_ms: numbers[0],
            max_in_flight_per_partition: numbers[1],
            max_acked_ahead_per_partition: numbers[2],
            idempotency_window_ms: numbers[4],
            partitions: numbers[3],
            defaults,
        })
}

pub(super) fn delete_topic() -> impl Strategy<Value = DeleteTopic> {
    (actor(), text(), of(incarnation())).prop_map(|(actor, name, expected_id)| DeleteTopic {
        actor,
        name,
        expected_id,
    })
}

pub(super) fn add_schema_version() -> impl Strategy<Value = AddSchemaVersion> {
    (
        actor(),
        text(),
        of(incarnation()),
        ".{0,24}",
        of(any::<u32>()),
    )
        .prop_map(
            |(actor, name, expected_id, document, base_version)| AddSchemaVersion {
                actor,
                name,
                expected_id,
                document,
                base_version,
            },
        )
}

pub(super) fn attach_child() -> impl Strategy<Value = AttachChild> {
    (
        actor(),
        (text(), of(incarnation())),
        (text(), of(incarnation())),
        opt_i64(),
        epoch(),
        offsets(),
    )
        .prop_map(
            |(actor, (parent, parent_id), (child, child_id), delay_ms, attach_epoch, offsets)| {
                AttachChild {
                    actor,
                    parent,
                    parent_id,
                    child,
                    child_id,
                    delay_ms,
                    attach_epoch,
                    attach_offsets: offsets,
                }
            },
        )
}

pub(super) fn detach_child() -> impl Strategy<Value = DetachChild> {
    (actor(), text(), text()).prop_map(|(actor, parent, child)| DetachChild {
        actor,
        parent,
        child,
    })
}

pub(super) fn assign_partitions() -> impl Strategy<Value = AssignPartitions> {
    (text(), incarnation(), vec((any::<u32>(), text()), 0..4)).prop_map(|(topic, id, owners)| {
        AssignPartitions {
            topic,
            id,
            owners: owners
                .into_iter()
                .map(|(partition, owner)| PartitionOwner { partition, owner })
                .collect(),
        }
    })
}

pub(super) fn register_member() -> impl Strategy<Value = RegisterMember> {
    (text(), text(), text(), any::<u64>()).prop_map(|(id, http_addr, rpc_addr, at_ms)| {
        RegisterMember {
            id,
            http_addr,
            rpc_addr,
            at_ms,
        }
    })
}

pub(super) fn heartbeat() -> impl Strategy<Value = Heartbeat> {
    (text(), any::<u64>()).prop_map(|(id, at_ms)| Heartbeat { id, at_ms })
}

pub(super) fn mark_dead() -> impl Strategy<Value = MarkDead> {
    (text(), any::<u64>()).prop_map(|(id, observed_heartbeat_ms)| MarkDead {
        id,
        observed_heartbeat_ms,
    })
}

pub(super) fn set_draining() -> impl Strategy<Value = SetDraining> {
    (text(), any::<bool>()).prop_map(|(id, draining)| SetDraining { id, draining })
}

pub(super) fn set_move_targets() -> impl Strategy<Value = SetMoveTargets> {
    let step = (any::<u32>(), text(), text()).prop_map(|(partition, owner, target)| MoveTarget {
        partition,
        owner,
        target,
    });
    (text(), incarnation(), vec(step, 0..3)).prop_map(|(topic, id, moves)| SetMoveTargets {
        topic,
        id,
        moves,
    })
}

pub(super) fn abort_move() -> impl Strategy<Value = AbortMove> {
    (text(), incarnation(), any::<u32>(), text()).prop_map(|(topic, id, partition, target)| {
        AbortMove {
            topic,
            id,
            partition,
            target,
        }
    })
}

pub(super) fn complete_move() -> impl Strategy<Value = CompleteMove> {
    (text(), incarnation(), any::<u32>(), text(), text()).prop_map(
        |(topic, id, partition, source, target)| CompleteMove {
            topic,
            id,
            partition,
            source,
            target,
        },
    )
}

pub(super) fn seed_admin() -> impl Strategy<Value = SeedAdmin> {
    (text(), password_hash(), any::<u64>()).prop_map(|(username, password_hash, at_ms)| SeedAdmin {
        username,
        password_hash,
        at_ms,
    })
}

pub(super) fn create_user() -> impl Strategy<Value = CreateUser> {
    (actor(), text(), password_hash(), grants(), any::<u64>()).prop_map(
        |(actor, username, password_hash, grants, at_ms)| CreateUser {
            actor,
            username,
            password_hash,
            grants,
            at_ms,
        },
    )
}

pub(super) fn delete_user() -> impl Strategy<Value = DeleteUser> {
    (actor(), text()).prop_map(|(actor, username)| DeleteUser { actor, username })
}

pub(super) fn set_password() -> impl Strategy<Value = SetPassword> {
    (
        actor(),
        text(),
        password_hash(),
        of(password_hash()),
        any::<u64>(),
    )
        .prop_map(
            |(actor, username, password_hash, checked_hash, at_ms)| SetPassword {
                actor,
                username,
                password_hash,
                checked_hash,
                at_ms,
            },
        )
}

pub(super) fn set_grants() -> impl Strategy<Value = SetGrants> {
    (actor(), text(), grants(), any::<u64>()).prop_map(|(actor, username, grants, at_ms)| {
        SetGrants {
            actor,
            username,
            grants,
            at_ms,
        }
    })
}

/// Every kind of command, equally often.
pub(super) fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        create_topic().prop_map(Command::CreateTopic),
        alter_topic().prop_map(Command::AlterTopic),
        delete_topic().prop_map(Command::DeleteTopic),
        add_schema_version().prop_map(Command::AddSchemaVersion),
        attach_child().prop_map(Command::AttachChild),
        detach_child().prop_map(Command::DetachChild),
        assign_partitions().prop_map(Command::AssignPartitions),
        register_member().prop_map(Command::RegisterMember),
        heartbeat().prop_map(Command::Heartbeat),
        mark_dead().prop_map(Command::MarkDead),
        set_draining().prop_map(Command::SetDraining),
        seed_admin().prop_map(Command::SeedAdmin),
        create_user().prop_map(Command::CreateUser),
        delete_user().prop_map(Command::DeleteUser),
        set_password().prop_map(Command::SetPassword),
        set_grants().prop_map(Command::SetGrants),
        set_move_targets().prop_map(Command::SetMoveTargets),
        abort_move().prop_map(Command::AbortMove),
        complete_move().prop_map(Command::CompleteMove),
        complete_move().prop_map(Command::ForcePromote),
        text().prop_map(|id| Command::RemoveMember(RemoveMember { id })),
        remote_strategies::create_remote().prop_map(Command::CreateRemote),
        remote_strategies::update_remote().prop_map(Command::UpdateRemote),
        remote_strategies::delete_remote().prop_map(Command::DeleteRemote),
        remote_strategies::reseal_remotes().prop_map(Command::ResealRemotes),
        remote_strategies::attach_remote_child().prop_map(Command::AttachRemoteChild),
        remote_strategies::pause_remote_child().prop_map(Command::PauseRemoteChild),
        remote_strategies::resume_remote_child().prop_map(Command::ResumeRemoteChild),
        remote_strategies::skip_remote_record().prop_map(Command::SkipRemoteRecord),
    ]
}

/// A map whose records carry their key, as every metastore map's do.
fn keyed<T: std::fmt::Debug>(
    record: impl Strategy<Value = T>,
    file_under: fn(&mut T, String),
) -> impl Strategy<Value = BTreeMap<String, T>> {
    btree_map(text(), record, 0..4).prop_map(move |records| {
        records
            .into_iter()
            .map(|(key, mut record)| {
                file_under(&mut record, key.clone());
                (key, record)
            })
            .collect()
    })
}

fn slots() -> impl Strategy<Value = Vec<Option<crate::Assignment>>> {
    vec(
        of((text(), of(text())).prop_map(|(owner, target)| crate::Assignment { owner, target })),
        0..5,
    )
}

/// A state with every part drawn independently: the codec does not check
/// the metastore's cross-record rules, so it must carry any state.
pub(super) fn metastore() -> impl Strategy<Value = Metastore> {
    (
        keyed(topic(), |topic, name| topic.name = name),
        btree_map(text(), slots(), 0..4),
        keyed(member(), |member, id| member.id = id),
        keyed(user(), |user, name| user.username = name),
        (
            btree_set(text(), 0..3),
            vec(any::<u64>(), 5..=5),
            any::<u64>(),
        ),
        (
            keyed(remote_strategies::remote(), |remote, name| {
                remote.name = name
            }),
            of(remote_strategies::key()),
            btree_map(text(), remote_strategies::link(), 0..3),
        ),
    )
        .prop_map(
            |(
                topics,
                assignments,
                members,
                users,
                (removed, counters, applied_index),
                (remotes, remote_key, remote_links),
            )| Metastore {
                topics,
                assignments,
                members,
                removed,
                users,
                remotes,
                remote_key,
                remote_links,
                versions: DomainVersions {
                    topics: counters[0],
                    assignments: counters[1],
                    members: counters[2],
                    users: counters[3],
                    remotes: counters[4],
                },
                applied_index,
            },
        )
}
