//! Properties of the metastore codecs: every type round-trips, and the two
//! top-level decoders (a command, a state) never panic, refuse every cut,
//! trailing bytes and any other version by name.

use bytes::Bytes;
use narad_protocol::codec::{decode, encode};
use narad_protocol::{Decode, DecodeError, Encode};
use proptest::collection::vec;
use proptest::prelude::*;

use super::super::{
    BARE_JSON_FIRST_BYTE, COMMAND_FORMAT_JSON, COMMAND_VERSION, COMMAND_VERSION_BEFORE_KEY_TIME,
    COMMAND_VERSION_BEFORE_WINDOW, STATE_VERSION, STATE_VERSION_BEFORE_KEY_TIME,
    STATE_VERSION_BEFORE_MOVES, STATE_VERSION_BEFORE_REMOTES, STATE_VERSION_BEFORE_WINDOW,
    decode_command, decode_state, encode_command, encode_state,
};
use super::{remote_strategies, strategies};
use crate::Command;

/// Cases per property: enough to meet every kind and option many times,
/// few enough that the whole suite stays within its debug-build budget.
const CASES: u32 = 64;

/// Encodes `value` alone and decodes it back; the bytes of the result are
/// the same again.
fn assert_round_trip<T>(value: &T) -> Result<(), TestCaseError>
where
    T: Encode + Decode + PartialEq + std::fmt::Debug,
{
    let bytes = encode(value);
    let back: T = decode(bytes.clone()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&back, value);
    prop_assert_eq!(encode(&back), bytes);
    Ok(())
}

/// One round-trip property per type.
macro_rules! round_trips {
    ($($name:ident: $strategy:expr;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(CASES))]
            $(
                #[test]
                fn $name(value in $strategy) {
                    assert_round_trip(&value)?;
                }
            )*
        }
    };
}

round_trips! {
    actor_round_trips: strategies::actor();
    topic_defaults_round_trip: strategies::defaults();
    new_link_round_trips: strategies::new_link();
    grant_round_trips: strategies::grant();
    schema_version_round_trips: strategies::schema_version();
    parent_link_round_trips: strategies::parent_link();
    topic_round_trips: strategies::topic();
    member_round_trips: strategies::member();
    user_round_trips: strategies::user();
    create_topic_round_trips: strategies::create_topic();
    alter_topic_round_trips: strategies::alter_topic();
    delete_topic_round_trips: strategies::delete_topic();
    add_schema_version_round_trips: strategies::add_schema_version();
    attach_child_round_trips: strategies::attach_child();
    detach_child_round_trips: strategies::detach_child();
    assign_partitions_round_trips: strategies::assign_partitions();
    register_member_round_trips: strategies::register_member();
    heartbeat_round_trips: strategies::heartbeat();
    mark_dead_round_trips: strategies::mark_dead();
    set_draining_round_trips: strategies::set_draining();
    seed_admin_round_trips: strategies::seed_admin();
    create_user_round_trips: strategies::create_user();
    delete_user_round_trips: strategies::delete_user();
    set_password_round_trips: strategies::set_password();
    set_grants_round_trips: strategies::set_grants();
    remote_round_trips: remote_strategies::remote();
    remote_link_round_trips: remote_strategies::link();
    remote_key_round_trips: remote_strategies::key();
    create_remote_round_trips: remote_strategies::create_remote();
    update_remote_round_trips: remote_strategies::update_remote();
    delete_remote_round_trips: remote_strategies::delete_remote();
    reseal_remotes_round_trips: remote_strategies::reseal_remotes();
    attach_remote_child_round_trips: remote_strategies::attach_remote_child();
    pause_remote_child_round_trips: remote_strategies::pause_remote_child();
    resume_remote_child_round_trips: remote_strategies::resume_remote_child();
    skip_remote_record_round_trips: remote_strategies::skip_remote_record();
    command_round_trips: strategies::command();
    metastore_round_trips: strategies::metastore();
}

/// Bytes behind a version byte, for the arbitrary-input properties.
fn behind(version: u8, body: Vec<u8>) -> Bytes {
    let mut bytes = vec![version];
    bytes.extend(body);
    Bytes::from(bytes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn a_command_round_trips_with_its_version(command in strategies::command()) {
        let bytes = encode_command(&command);
        // Only a command that carries a remote key needs the current
        // version, and one that sets an idempotency window the version
        // before it; every other is written in the version older builds
        // read.
        let version = match &command {
            Command::CreateRemote(_) | Command::ResealRemotes(_) => COMMAND_VERSION,
            Command::UpdateRemote(update) if update.key.is_some() => COMMAND_VERSION,
            Command::CreateTopic(create) if create.idempotency_window_ms.is_some() => {
                COMMAND_VERSION_BEFORE_KEY_TIME
            }
            Command::AlterTopic(alter) if alter.idempotency_window_ms.is_some() => {
                COMMAND_VERSION_BEFORE_KEY_TIME
            }
            _ => COMMAND_VERSION_BEFORE_WINDOW,
        };
        prop_assert_eq!(bytes[0], version);
        prop_assert_eq!(decode_command(bytes).expect("decodes"), command);
    }

    #[test]
    fn a_state_round_trips_with_its_version(state in strategies::metastore()) {
        let bytes = encode_state(&state);
        prop_assert_eq!(bytes[0], STATE_VERSION);
        let back = decode_state(bytes.clone()).expect("decodes");
        prop_assert_eq!(encode_state(&back), bytes);
        prop_assert_eq!(back, state);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_command_decoder(
        body in vec(any::<u8>(), 0..256),
        version in prop_oneof![
            Just(COMMAND_VERSION),
            Just(COMMAND_VERSION_BEFORE_KEY_TIME),
            Just(COMMAND_VERSION_BEFORE_WINDOW),
            Just(COMMAND_FORMAT_JSON),
            any::<u8>(),
        ],
    ) {
        let _ = decode_command(behind(version, body.clone()));
        let _ = decode_command(Bytes::from(body));
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_state_decoder(
        body in vec(any::<u8>(), 0..256),
        version in prop_oneof![
            Just(STATE_VERSION),
            Just(STATE_VERSION_BEFORE_KEY_TIME),
            Just(STATE_VERSION_BEFORE_REMOTES),
            Just(STATE_VERSION_BEFORE_WINDOW),
            any::<u8>(),
        ],
    ) {
        let _ = decode_state(behind(version, body.clone()));
        let _ = decode_state(Bytes::from(body));
    }

    #[test]
    fn a_damaged_command_never_panics(
        command in strategies::command(),
        at in any::<prop::sample::Index>(),
        value in any::<u8>(),
    ) {
        let mut bytes = encode_command(&command).to_vec();
        let at = at.index(bytes.len());
        bytes[at] = value;
        let _ = decode_command(Bytes::from(bytes));
    }

    #[test]
    fn a_damaged_state_never_panics(
        state in strategies::metastore(),
        at in any::<prop::sample::Index>(),
        value in any::<u8>(),
    ) {
        let mut bytes = encode_state(&state).to_vec();
        let at = at.index(bytes.len());
        bytes[at] = value;
        let _ = decode_state(Bytes::from(bytes));
    }

    /// A forged count or length anywhere in a command or a state: refused,
    /// or read within the bytes present, never reserved from the claim.
    #[test]
    fn a_hostile_u32_anywhere_never_panics(
        command in strategies::command(),
        state in strategies::metastore(),
        at in any::<prop::sample::Index>(),
        hostile in prop_oneof![Just(u32::MAX), Just(0x8000_0000_u32), any::<u32>()],
    ) {
        let mut command = encode_command(&command).to_vec();
        let mut state = encode_state(&state).to_vec();
        for bytes in [&mut command, &mut state] {
            if bytes.len() >= 4 {
                let at = at.index(bytes.len() - 3);
                bytes[at..at + 4].copy_from_slice(&hostile.to_be_bytes());
            }
        }
        let _ = decode_command(Bytes::from(command));
        let _ = decode_state(Bytes::from(state));
    }

    #[test]
    fn every_cut_of_a_command_is_refused(
        command in strategies::command(),
        at in any::<prop::sample::Index>(),
    ) {
        let bytes = encode_command(&command);
        let cut = at.index(bytes.len());
        prop_assert!(decode_command(bytes.slice(..cut)).is_err());
    }

    #[test]
    fn every_cut_of_a_state_is_refused(
        state in strategies::metastore(),
        at in any::<prop::sample::Index>(),
    ) {
        let bytes = encode_state(&state);
        let cut = at.index(bytes.len());
        prop_assert!(decode_state(bytes.slice(..cut)).is_err());
    }

    #[test]
    fn trailing_bytes_after_a_command_are_refused(
        command in strategies::command(),
        extra in vec(any::<u8>(), 1..8),
    ) {
        let mut bytes = encode_command(&command).to_vec();
        bytes.extend(&extra);
        prop_assert_eq!(
            decode_command(Bytes::from(bytes)).err(),
            Some(DecodeError::TrailingBytes { count: extra.len() })
        );
    }

    #[test]
    fn trailing_bytes_after_a_state_are_refused(
        state in strategies::metastore(),
        extra in vec(any::<u8>(), 1..8),
    ) {
        let mut bytes = encode_state(&state).to_vec();
        bytes.extend(&extra);
        prop_assert_eq!(
            decode_state(Bytes::from(bytes)).err(),
            Some(DecodeError::TrailingBytes { count: extra.len() })
        );
    }

    #[test]
    fn another_command_version_is_refused_by_name(
        command in strategies::command(),
        version in any::<u8>(),
    ) {
        let read = [
            COMMAND_VERSION,
            COMMAND_VERSION_BEFORE_KEY_TIME,
            COMMAND_VERSION_BEFORE_WINDOW,
            COMMAND_FORMAT_JSON,
            BARE_JSON_FIRST_BYTE,
        ];
        prop_assume!(!read.contains(&version));
        let mut bytes = encode_command(&command).to_vec();
        bytes[0] = version;
        prop_assert_eq!(
            decode_command(Bytes::from(bytes)).err(),
            Some(DecodeError::UnsupportedVersion {
                what: "metastore command",
                found: version,
                supported: COMMAND_VERSION,
            })
        );
    }

    #[test]
    fn another_state_version_is_refused_by_name(
        state in strategies::metastore(),
        version in any::<u8>(),
    ) {
        let read = [
            STATE_VERSION,
            STATE_VERSION_BEFORE_KEY_TIME,
            STATE_VERSION_BEFORE_REMOTES,
            STATE_VERSION_BEFORE_MOVES,
            STATE_VERSION_BEFORE_WINDOW,
            BARE_JSON_FIRST_BYTE,
        ];
        prop_assume!(!read.contains(&version));
        let mut bytes = encode_state(&state).to_vec();
        bytes[0] = version;
        prop_assert_eq!(
            decode_state(Bytes::from(bytes)).err(),
            Some(DecodeError::UnsupportedVersion {
                what: "metastore state",
                found: version,
                supported: STATE_VERSION,
            })
        );
    }

    #[test]
    fn a_command_in_a_message_is_its_standalone_bytes(command in strategies::command()) {
        let mut writer = narad_protocol::Writer::new();
        super::super::put_command(&mut writer, &command);
        prop_assert_eq!(writer.finish(), encode_command(&command));
    }
}
