//! Replicas that apply the same log hold the same state, and write the same
//! bytes; state and commands survive serialization (serde JSON and the
//! binary codecs) unchanged.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

const SEEDS: u64 = 64;
const COMMANDS_PER_SEED: usize = 300;

const TOPICS: [&str; 5] = ["t0", "t1", "t2", "T0", "t3"];
/// Parent and child pairs for links, few enough that detaches meet attaches.
const LINKS: [(&str, &str); 3] = [("t0", "t1"), ("t1", "t2"), ("t0", "t2")];
const MEMBERS: [&str; 3] = ["n0", "n1", "n2"];
const USERS: [&str; 3] = ["admin", "u1", "u2"];

fn pick<'a>(rng: &mut StdRng, names: &[&'a str]) -> &'a str {
    names[rng.random_range(0..names.len())]
}

fn maybe<T>(rng: &mut StdRng, make: impl FnOnce(&mut StdRng) -> T) -> Option<T> {
    if rng.random_bool(0.5) {
        Some(make(rng))
    } else {
        None
    }
}

fn actor(rng: &mut StdRng) -> Actor {
    if rng.random_bool(0.3) {
        Actor::SecurityOff
    } else {
        Actor::User(pick(rng, &USERS).into())
    }
}

fn attach_pair(rng: &mut StdRng) -> AttachChild {
    let (parent, child) = LINKS[rng.random_range(0..LINKS.len())];
    attach(parent, child)
}

/// A random placement of `state`: (topic, partition, owner, target).
fn placed_in(rng: &mut StdRng, state: &Metastore) -> Option<(String, u32, String, Option<String>)> {
    let placed: Vec<_> = state
        .topics()
        .flat_map(|topic| {
            (0..topic.partitions).filter_map(|partition| {
                let at = state.assignment(&topic.name, partition)?;
                Some((
                    topic.name.clone(),
                    partition,
                    at.owner.clone(),
                    at.target.clone(),
                ))
            })
        })
        .collect();
    if placed.is_empty() {
        return None;
    }
    Some(placed[rng.random_range(0..placed.len())].clone())
}

/// A move command: usually about a placement `state` holds (so some
/// apply), sometimes about one it does not.
fn random_move(rng: &mut StdRng, state: &Metastore, kind: u32) -> Command {
    let (topic, partition, owner, target) = placed_in(rng, state).unwrap_or_else(|| {
        let topic = pick(rng, &TOPICS).to_owned();
        (
            topic,
            rng.random_range(0..2),
            pick(rng, &MEMBERS).into(),
            None,
        )
    });
    let id = state
        .topic(&topic)
        .map_or_else(|| id_of(&topic), |t| t.id.clone());
    let other: String = pick(rng, &MEMBERS).into();
    let target = target.filter(|_| rng.random_bool(0.8)).unwrap_or(other);
    match kind {
        0 => Command::SetMoveTargets(SetMoveTargets {
            topic,
            id,
            moves: vec![MoveTarget {
                partition,
                owner,
                target,
            }],
        }),
        1 => Command::AbortMove(AbortMove {
            topic,
            id,
            partition,
            target,
        }),
        2 => Command::CompleteMove(CompleteMove {
            topic,
            id,
            partition,
            source: owner,
            target,
        }),
        _ => Command::ForcePromote(CompleteMove {
            topic,
            id,
            partition,
            source: owner,
            target,
        }),
    }
}

/// A random command from a small vocabulary, so commands often meet each
/// other (same names, same members), including ones that are refused.
/// Move commands are drawn from the placements of `state`.
fn random_command(rng: &mut StdRng, state: &Metastore) -> Command {
    let topic = pick(rng, &TOPICS).to_owned();
    let other = pick(rng, &TOPICS).to_owned();
    let member = pick(rng, &MEMBERS).to_owned();
    // Few distinct stamps, so dead markings sometimes match the heartbeat.
    let at_ms = rng.random_range(0..3) * 1_000;
    match rng.random_range(0..30) {
        // Creates weigh more, so most logs hold several topics at once.
        0 | 17..=19 => Command::CreateTopic(CreateTopic {
            actor: actor(rng),
            id: if rng.random_bool(0.8) {
                id_of(&topic)
            } else {
                IncarnationId::mint(rng)
            },
            partitions: maybe(rng, |r| r.random_range(-1..6)),
            retention_ms: maybe(rng, |r| r.random_range(-1..2) * 3_600_000),
            schema: maybe(rng, |_| "true".into()),
            parent: maybe(rng, |_| link(&other)),
            ..create(&topic)
        }),
        1 => Command::AlterTopic(AlterTopic {
            actor: actor(rng),
            retention_ms: maybe(rng, |r| r.random_range(0..3) * 3_600_000),
            max_in_flight_per_partition: maybe(rng, |r| r.random_range(0..5)),
            partitions: maybe(rng, |r| r.random_range(2..8)),
            ..alter(&topic)
        }),
        2 => Command::DeleteTopic(DeleteTopic {
            actor: actor(rng),
            name: topic,
            expected_id: None,
        }),
        3 => Command::AddSchemaVersion(AddSchemaVersion {
            actor: actor(rng),
            base_version: maybe(rng, |r| r.random_range(0..3)),
            ..add_schema(
                &topic,
                ["true", "{}", "{\"type\":\"object\"}"][rng.random_range(0..3)],
            )
        }),
        4 => Command::AttachChild(AttachChild {
            attach_epoch: AttachEpoch::mint(rng),
            ..attach_pair(rng)
        }),
        5 => {
            let (parent, child) = LINKS[rng.random_range(0..LINKS.len())];
            detach(parent, child)
        }
        16 => Command::AttachChild(AttachChild {
            actor: actor(rng),
            delay_ms: maybe(rng, |r| r.random_range(0..2) * 3_600_000),
            attach_epoch: AttachEpoch::mint(rng),
            ..attach(&topic, &other)
        }),
        6 => {
            // Some creates mint a random id, so some placements name a
            // stale incarnation; both paths are exercised.
            assign(&topic, &[(rng.random_range(0..4), &member)])
        }
        20..=22 => random_move(rng, state, 0),
        23..=25 => random_move(rng, state, 1),
        26..=27 => random_move(rng, state, 2),
        28 => random_move(rng, state, 3),
        29 => Command::RemoveMember(RemoveMember { id: member }),
        7 => register(&member, at_ms),
        8 => Command::Heartbeat(Heartbeat { id: member, at_ms }),
        9 => Command::MarkDead(MarkDead {
            id: member,
            observed_heartbeat_ms: at_ms,
        }),
        10 => Command::SetDraining(SetDraining {
            id: member,
            draining: rng.random_bool(0.5),
        }),
        11 => Command::SeedAdmin(SeedAdmin {
            username: "admin".into(),
            password_hash: hash(1),
            at_ms,
        }),
        12 => create_user(
            actor(rng),
            pick(rng, &USERS),
            vec![grant(GrantAction::Create, &["t*"])],
        ),
        13 => Command::SetGrants(SetGrants {
            actor: actor(rng),
            username: pick(rng, &USERS).into(),
            grants: vec![grant(GrantAction::Admin, &[])],
            at_ms,
        }),
        14 => Command::DeleteUser(DeleteUser {
            actor: actor(rng),
            username: pick(rng, &USERS).into(),
        }),
        _ => Command::SetPassword(SetPassword {
            actor: actor(rng),
            username: pick(rng, &USERS).into(),
            password_hash: hash(rng.random_range(0..3)),
            checked_hash: maybe(rng, |_| hash(2)),
            at_ms,
        }),
    }
}

/// A log of random commands, each drawn against the state the commands
/// before it leave (applied to a scratch replica).
fn random_log(rng: &mut StdRng) -> Vec<Command> {
    let mut scratch = Metastore::new();
    (1..=COMMANDS_PER_SEED as u64)
        .map(|index| {
            let command = random_command(rng, &scratch);
            let _ = scratch.apply(&command, ApplyContext { index });
            command
        })
        .collect()
}

/// The command's kind, to check the random logs exercise each one.
fn kind(command: &Command) -> &'static str {
    match command {
        Command::CreateTopic(_) => "create_topic",
        Command::AlterTopic(_) => "alter_topic",
        Command::DeleteTopic(_) => "delete_topic",
        Command::AddSchemaVersion(_) => "add_schema_version",
        Command::AttachChild(_) => "attach_child",
        Command::DetachChild(_) => "detach_child",
        Command::AssignPartitions(_) => "assign_partitions",
        Command::RegisterMember(_) => "register_member",
        Command::Heartbeat(_) => "heartbeat",
        Command::MarkDead(_) => "mark_dead",
        Command::SetDraining(_) => "set_draining",
        Command::SeedAdmin(_) => "seed_admin",
        Command::CreateUser(_) => "create_user",
        Command::DeleteUser(_) => "delete_user",
        Command::SetPassword(_) => "set_password",
        Command::SetGrants(_) => "set_grants",
        Command::SetMoveTargets(_) => "set_move_targets",
        Command::AbortMove(_) => "abort_move",
        Command::CompleteMove(_) => "complete_move",
        Command::ForcePromote(_) => "force_promote",
        Command::RemoveMember(_) => "remove_member",
        Command::CreateRemote(_) => "create_remote",
        Command::UpdateRemote(_) => "update_remote",
        Command::DeleteRemote(_) => "delete_remote",
        Command::ResealRemotes(_) => "reseal_remotes",
        Command::AttachRemoteChild(_) => "attach_remote_child",
        Command::PauseRemoteChild(_) => "pause_remote_child",
        Command::ResumeRemoteChild(_) => "resume_remote_child",
        Command::SkipRemoteRecord(_) => "skip_remote_record",
    }
}

#[test]
fn replicas_applying_the_same_log_hold_identical_state() {
    let mut applied_kinds = std::collections::BTreeSet::new();
    for seed in 0..SEEDS {
        let mut rng = StdRng::seed_from_u64(seed);
        let log = random_log(&mut rng);
        let (mut first, mut second) = (Metastore::new(), Metastore::new());
        let mut applied = 0;
        for (index, command) in (1..).zip(&log) {
            let context = ApplyContext { index };
            let outcome = first.apply(command, context);
            assert_eq!(
                outcome,
                second.apply(command, context),
                "seed {seed} index {index}"
            );
            applied += usize::from(outcome.is_ok());
            if outcome == Ok(Outcome::Applied) {
                applied_kinds.insert(kind(command));
            }
        }
        assert_eq!(first, second, "seed {seed}");
        assert!(
            applied > COMMANDS_PER_SEED / 10,
            "seed {seed}: too few commands applied"
        );
        let first_json = serde_json::to_string(&first).unwrap();
        assert_eq!(
            first_json,
            serde_json::to_string(&second).unwrap(),
            "seed {seed}"
        );
        let restored: Metastore = serde_json::from_str(&first_json).unwrap();
        assert_eq!(restored, first, "seed {seed}");
        restored.assert_invariants();
        let first_binary = codec::encode_state(&first);
        assert_eq!(first_binary, codec::encode_state(&second), "seed {seed}");
        let restored = codec::decode_state(first_binary).unwrap();
        assert_eq!(restored, first, "seed {seed}");
    }
    // Every kind the generator makes changed the state at least once.
    assert_eq!(applied_kinds.len(), 20, "{applied_kinds:?}");
}

#[test]
fn a_restored_snapshot_applies_the_rest_of_the_log_like_the_original() {
    let mut rng = StdRng::seed_from_u64(99);
    let log = random_log(&mut rng);
    let (head, tail) = log.split_at(COMMANDS_PER_SEED / 2);
    let mut original = Metastore::new();
    for (index, command) in (1..).zip(head) {
        let _ = original.apply(command, ApplyContext { index });
    }
    let snapshot = serde_json::to_vec(&original).unwrap();
    let mut restored: Metastore = serde_json::from_slice(&snapshot).unwrap();
    for (index, command) in (head.len() as u64 + 1..).zip(tail) {
        let context = ApplyContext { index };
        assert_eq!(
            original.apply(command, context),
            restored.apply(command, context)
        );
    }
    assert_eq!(original, restored);
}

#[test]
fn every_command_survives_serialization() {
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..500 {
        let command = random_command(&mut rng, &Metastore::new());
        let json = serde_json::to_string(&command).unwrap();
        assert_eq!(
            serde_json::from_str::<Command>(&json).unwrap(),
            command,
            "{json}"
        );
        let binary = codec::encode_command(&command);
        assert_eq!(codec::decode_command(binary).unwrap(), command);
    }
}

#[test]
fn a_malformed_incarnation_id_does_not_deserialize() {
    let error = serde_json::from_str::<IncarnationId>("\"ABCDEF0123456789\"").unwrap_err();
    assert!(error.to_string().contains("malformed incarnation id"));
    assert!(serde_json::from_str::<IncarnationId>("\"0123\"").is_err());
    let id: IncarnationId = serde_json::from_str("\"0123456789abcdef\"").unwrap();
    assert_eq!(id.as_str(), "0123456789abcdef");
}

#[test]
fn minted_ids_are_16_lowercase_hex_characters() {
    let mut rng = StdRng::seed_from_u64(3);
    let id = IncarnationId::mint(&mut rng);
    assert_eq!(id.as_str().len(), 16);
    assert!(IncarnationId::try_from(id.as_str().to_owned()).is_ok());
}
