//! Named behaviours of the metastore codecs: golden bytes, the JSON of
//! older builds, refusals by name, and determinism of the state bytes.

use bytes::Bytes;
use narad_protocol::{DecodeError, Reader, Writer};

use super::super::values::put_list;
use super::super::{
    COMMAND_FORMAT_JSON, COMMAND_VERSION, COMMAND_VERSION_BEFORE_KEY_TIME,
    COMMAND_VERSION_BEFORE_WINDOW, STATE_VERSION, STATE_VERSION_BEFORE_KEY_TIME,
    STATE_VERSION_BEFORE_MOVES, STATE_VERSION_BEFORE_REMOTES, STATE_VERSION_BEFORE_WINDOW,
    decode_command, decode_state, encode_command, encode_state, get_command,
};
use crate::tests::{Store, assign, attach, create_user, grant, link, register};
use crate::{
    Actor, ApplyContext, Command, CreateTopic, GrantAction, Heartbeat, RemoteKey, ResealRemotes,
    SetDraining, TopicDefaults,
};

/// Lowercase hex of `bytes`, for golden comparisons that show the bytes.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A create as a proposer makes it: one option of each kind set.
fn golden_command() -> Command {
    Command::CreateTopic(CreateTopic {
        actor: Actor::User("ann".into()),
        name: "orders".into(),
        id: crate::IncarnationId::from_bits(0x0123_4567_89ab_cdef),
        partitions: Some(4),
        retention_ms: None,
        visibility_timeout_ms: None,
        max_in_flight_per_partition: None,
        max_acked_ahead_per_partition: Some(-1),
        idempotency_window_ms: Some(5_000),
        schema: Some("true".into()),
        parent: None,
        defaults: TopicDefaults::default(),
        created_at_ms: 1_700_000_000_000,
    })
}

/// A small cluster: two members, a parent with a delayed child, placements
/// (one slot waiting), root and one user.
fn sample_store() -> Store {
    let mut store = Store::new();
    store.member("n1");
    store.member("n2");
    store.ok(create("p"));
    store.ok(Command::CreateTopic(CreateTopic {
        parent: Some(link("p")),
        ..crate::tests::create("c")
    }));
    store.ok(assign("p", &[(0, "n1"), (1, "n2")]));
    store.ok(Command::SetDraining(SetDraining {
        id: "n2".into(),
        draining: true,
    }));
    let root = store.root();
    store.ok(create_user(
        root,
        "bob",
        vec![grant(GrantAction::Produce, &["p", "c*"])],
    ));
    store
}

fn create(name: &str) -> Command {
    crate::tests::create_cmd(name)
}

#[test]
fn a_command_encodes_to_its_golden_bytes() {
    let bytes = encode_command(&golden_command());
    assert_eq!(hex(&bytes), golden(GOLDEN_COMMAND));
    assert_eq!(decode_command(bytes).expect("decodes"), golden_command());
}

#[test]
fn a_command_that_sets_no_window_is_written_in_the_version_older_builds_read() {
    let Command::CreateTopic(with_window) = golden_command() else {
        unreachable!("the golden command is a create")
    };
    let without = Command::CreateTopic(CreateTopic {
        idempotency_window_ms: None,
        ..with_window
    });
    let bytes = encode_command(&without);
    assert_eq!(bytes[0], COMMAND_VERSION_BEFORE_WINDOW);
    // The current layout with the window's "absent" byte taken out: what a
    // build from before the window writes.
    let current = {
        let mut writer = narad_protocol::Writer::new();
        writer.u8(COMMAND_VERSION);
        narad_protocol::Encode::encode(&without, &mut writer);
        writer.finish()
    };
    assert_eq!(bytes.len() + 1, current.len());
    assert_eq!(decode_command(bytes).expect("decodes"), without);
    assert_eq!(
        encode_command(&golden_command())[0],
        COMMAND_VERSION_BEFORE_KEY_TIME
    );
}

#[test]
fn a_state_encodes_to_its_golden_bytes() {
    let state = sample_store().meta;
    let bytes = encode_state(&state);
    assert_eq!(hex(&bytes), golden(GOLDEN_STATE));
    assert_eq!(decode_state(bytes).expect("decodes"), state);
}

#[test]
fn a_version_3_state_decodes_with_no_remotes() {
    let bytes = Bytes::from(hex_bytes(&golden_state_before_remotes()));
    assert_eq!(bytes[0], STATE_VERSION_BEFORE_REMOTES);
    let decoded = decode_state(bytes).expect("decodes");
    assert_eq!(decoded, sample_store().meta);
    assert_eq!(decoded.remotes().count(), 0);
    assert_eq!(decoded.remote_key(), None);
}

/// A cluster remote key of version 2 with id `k2`, minted at
/// `created_at_ms`.
fn sample_key(created_at_ms: Option<u64>) -> RemoteKey {
    RemoteKey {
        version: 2,
        key_id: "k2".into(),
        salt: vec![0xab; 4],
        created_at_ms,
    }
}

/// [`GOLDEN_STATE`] in `version` with [`sample_key`] as its remote key
/// (no remotes: the last one was deleted, the key stays), the key's bytes
/// `key` (hex).
fn golden_state_with_key(version: u8, key: &str) -> String {
    let body = &GOLDEN_STATE[1..GOLDEN_STATE.len() - REMOTES_SECTION_CHUNKS];
    let remotes = ["00000000", "01", key, "00000000", "0000000000000000"];
    format!("{version:02x}{}{}", golden(body), golden(&remotes))
}

/// [`sample_key`]'s bytes before its mint time: version 2, id "k2", salt.
const SAMPLE_KEY_BEFORE_KEY_TIME: &str = "00000002 00000002 6b32 00000004 abababab";

#[test]
fn a_remote_key_round_trips_with_its_mint_time_in_the_current_state_version() {
    let mut state = sample_store().meta;
    state.remote_key = Some(sample_key(Some(1_700_000_000_000)));
    let bytes = encode_state(&state);
    let key = format!("{SAMPLE_KEY_BEFORE_KEY_TIME} 01 0000018bcfe56800");
    assert_eq!(hex(&bytes), golden_state_with_key(STATE_VERSION, &key));
    assert_eq!(decode_state(bytes), Ok(state.clone()));
    // Unknown (a key decoded from an older state) stays unknown.
    state.remote_key = Some(sample_key(None));
    let bytes = encode_state(&state);
    let key = format!("{SAMPLE_KEY_BEFORE_KEY_TIME} 00");
    assert_eq!(hex(&bytes), golden_state_with_key(STATE_VERSION, &key));
    assert_eq!(decode_state(bytes), Ok(state));
}

#[test]
fn a_version_4_state_decodes_its_remote_key_with_no_mint_time() {
    let golden = golden_state_with_key(STATE_VERSION_BEFORE_KEY_TIME, SAMPLE_KEY_BEFORE_KEY_TIME);
    let decoded = decode_state(Bytes::from(hex_bytes(&golden))).expect("decodes");
    assert_eq!(decoded.remote_key(), Some(&sample_key(None)));
    let mut expected = sample_store().meta;
    expected.remote_key = Some(sample_key(None));
    assert_eq!(decoded, expected);
}

#[test]
fn a_command_carrying_a_remote_key_is_written_in_the_current_version() {
    let reseal = Command::ResealRemotes(ResealRemotes {
        actor: Actor::User("ann".into()),
        key: sample_key(Some(1_700_000_000_000)),
        passwords: Vec::new(),
    });
    let bytes = encode_command(&reseal);
    let expected = [
        "04 19",              // command version, kind: reseal remotes
        "02 00000003 616e6e", // actor: user "ann"
        SAMPLE_KEY_BEFORE_KEY_TIME,
        "01 0000018bcfe56800", // minted at
        "00000000",            // no passwords
    ];
    assert_eq!(hex(&bytes), golden(&expected));
    assert_eq!(decode_command(bytes), Ok(reseal));
}

#[test]
fn a_version_3_command_decodes_its_remote_key_with_no_mint_time() {
    for version in [
        COMMAND_VERSION_BEFORE_KEY_TIME,
        COMMAND_VERSION_BEFORE_WINDOW,
    ] {
        let head = format!("{version:02x} 19");
        let chunks = [
            head.as_str(),
            "02 00000003 616e6e",
            SAMPLE_KEY_BEFORE_KEY_TIME,
            "00000000",
        ];
        let bytes = Bytes::from(hex_bytes(&golden(&chunks)));
        let expected = Command::ResealRemotes(ResealRemotes {
            actor: Actor::User("ann".into()),
            key: sample_key(None),
            passwords: Vec::new(),
        });
        assert_eq!(decode_command(bytes), Ok(expected), "version {version}");
    }
}

#[test]
fn a_version_2_state_decodes_with_no_moves() {
    let bytes = Bytes::from(hex_bytes(&golden(GOLDEN_STATE_BEFORE_MOVES)));
    assert_eq!(bytes[0], STATE_VERSION_BEFORE_MOVES);
    assert_eq!(decode_state(bytes), Ok(sample_store().meta));
}

#[test]
fn a_version_2_command_decodes_with_the_window_omitted() {
    let bytes = Bytes::from(hex_bytes(&golden(GOLDEN_COMMAND_BEFORE_WINDOW)));
    let Command::CreateTopic(golden) = golden_command() else {
        unreachable!("the golden command is a create");
    };
    let expected = Command::CreateTopic(CreateTopic {
        idempotency_window_ms: None,
        ..golden
    });
    assert_eq!(decode_command(bytes), Ok(expected));
}

#[test]
fn a_version_2_alter_decodes_changing_no_window() {
    let mut writer = Writer::new();
    writer.u8(COMMAND_VERSION_BEFORE_WINDOW);
    writer.u8(2); // AlterTopic
    writer.u8(1); // security off
    writer.str("orders");
    writer.u8(0); // no expected id
    writer.u8(1); // retention_ms
    writer.i64(3_600_000);
    writer.u8(0); // in-flight cap
    writer.u8(0); // acked-ahead cap
    writer.u8(0); // partitions
    narad_protocol::Encode::encode(&TopicDefaults::default(), &mut writer);
    let expected = crate::AlterTopic {
        retention_ms: Some(3_600_000),
        ..crate::AlterTopic::named(Actor::SecurityOff, "orders", None)
    };
    assert_eq!(
        decode_command(writer.finish()),
        Ok(Command::AlterTopic(expected))
    );
}

#[test]
fn a_version_1_state_decodes_with_the_default_window() {
    let state = sample_store().meta;
    let bytes = Bytes::from(hex_bytes(&golden_state_before_window()));
    let decoded = decode_state(bytes).expect("decodes");
    assert_eq!(decoded, state);
    for topic in decoded.topics.values() {
        assert_eq!(topic.idempotency_window_ms, 120_000);
    }
}

#[test]
fn a_topic_window_round_trips_in_the_current_state_version() {
    let mut state = sample_store().meta;
    state
        .topics
        .get_mut("p")
        .expect("p exists")
        .idempotency_window_ms = 1_000;
    let bytes = encode_state(&state);
    assert_eq!(bytes[0], STATE_VERSION);
    assert_eq!(decode_state(bytes), Ok(state));
}

/// Bytes from lowercase hex.
fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).expect("hex"))
        .collect()
}

/// [`golden_command`], field by field (spaces are for reading only).
const GOLDEN_COMMAND: &[&str] = &[
    "03",                                // command version
    "01",                                // kind: create topic
    "02 00000003 616e6e",                // actor: user "ann"
    "00000006 6f7264657273",             // name "orders"
    "0123456789abcdef",                  // incarnation id
    "01 0000000000000004",               // partitions: 4
    "00 00 00",                          // retention, visibility timeout, in-flight cap: omitted
    "01 ffffffffffffffff",               // acked-ahead cap: -1
    "01 0000000000001388",               // idempotency window: 5 s
    "01 00000004 74727565",              // schema "true"
    "00",                                // no parent link
    "00000003 0000006c",                 // defaults: 3 partitions, at most 108
    "00000000240c8400 0000000000007530", // default retention and visibility timeout
    "0000000000000400 0000000000000400", // default caps
    "0000018bcfe56800",                  // created_at_ms
];

/// [`golden_command`] as a build before the window wrote it (version 2):
/// no window field.
const GOLDEN_COMMAND_BEFORE_WINDOW: &[&str] = &[
    "02",                                // command version
    "01",                                // kind: create topic
    "02 00000003 616e6e",                // actor: user "ann"
    "00000006 6f7264657273",             // name "orders"
    "0123456789abcdef",                  // incarnation id
    "01 0000000000000004",               // partitions: 4
    "00 00 00",                          // retention, visibility timeout, in-flight cap: omitted
    "01 ffffffffffffffff",               // acked-ahead cap: -1
    "01 00000004 74727565",              // schema "true"
    "00",                                // no parent link
    "00000003 0000006c",                 // defaults: 3 partitions, at most 108
    "00000000240c8400 0000000000007530", // default retention and visibility timeout
    "0000000000000400 0000000000000400", // default caps
    "0000018bcfe56800",                  // created_at_ms
];

/// The default idempotency window, two minutes, as a topic in
/// [`GOLDEN_STATE`] carries it.
const DEFAULT_WINDOW: &str = "000000000001d4c0";

/// [`GOLDEN_STATE`] as a build before the window wrote it (version 1): the
/// version 2 bytes without the topics' windows.
fn golden_state_before_window() -> String {
    let chunks: Vec<&str> = GOLDEN_STATE_BEFORE_MOVES
        .iter()
        .skip(1)
        .copied()
        .filter(|chunk| *chunk != DEFAULT_WINDOW)
        .collect();
    format!("{STATE_VERSION_BEFORE_WINDOW:02x}{}", golden(&chunks))
}

/// The state of [`sample_store`], field by field (spaces are for reading
/// only). Password hashes are the test helper's: `$2b$04$` and 53 letters.
const GOLDEN_STATE: &[&str] = &[
    "05",                                                        // state version
    "00000002",                                                  // topics, in name order
    "00000001 63 af63de4c8601eff2 00000003",                     // "c", id, partitions
    "00000000240c8400 0000000000007530", // retention_ms 7 days, visibility_timeout_ms 30 s
    "0000000000000400 0000000000000400", // in-flight and acked-ahead caps 1,024
    DEFAULT_WINDOW,                      // idempotency_window_ms 2 min
    "00000000000003e8",                  // created_at_ms
    "00 00000000",                       // no owner, no schema
    "01 00000001 70",                    // parent "p"
    "0000000000000009 0000000000000000", // attach epoch, delay 0
    "00000003 000000000000000000000000000000000000000000000000", // attach offsets 0, 0, 0
    "00000000",                          // no children
    "00000001 70 af63ed4c8602096f 00000003", // "p", id, partitions
    "00000000240c8400 0000000000007530", // retention_ms 7 days, visibility_timeout_ms 30 s
    "0000000000000400 0000000000000400", // in-flight and acked-ahead caps 1,024
    DEFAULT_WINDOW,                      // idempotency_window_ms 2 min
    "00000000000003e8",                  // created_at_ms
    "00 00000000 00",                    // no owner, no schema, no parent
    "00000001 00000001 63",              // children: "c"
    "00000002",                          // placements, in topic order
    "00000001 63 00000003 00 00 00",     // "c": three slots waiting
    "00000001 70 00000003",              // "p": three slots
    "01 00000002 6e31 00 01 00000002 6e32 00 00", // n1, n2 (no move targets), waiting
    "00000002",                          // members, in id order
    "00000002 6e31",                     // "n1"
    "00000007 6e313a37393432 00000007 6e313a37393432", // addresses "n1:7942"
    "00000000000003e8 01 00",            // heartbeat, alive, not draining
    "00000002 6e32",                     // "n2"
    "00000007 6e323a37393432 00000007 6e323a37393432", // addresses "n2:7942"
    "00000000000003e8 01 01",            // heartbeat, alive, draining
    "00000002",                          // users, in name order
    "00000005 61646d696e",               // "admin"
    "0000003c 24326224303424",           // hash
    "626262626262626262626262626262626262626262626262626262626262",
    "6262626262626262626262626262626262626262626262",
    "01 00000000",                       // root, no grants
    "0000000000000001 0000000000000001", // created, updated
    "00000003 626f62",                   // "bob"
    "0000003c 24326224303424",           // hash
    "636363636363636363636363636363636363636363636363636363636363",
    "6363636363636363636363636363636363636363636363",
    "00 00000001",                           // not root, one grant
    "01 00000002 00000001 70 00000002 632a", // produce on "p" and "c*"
    "0000000000000005 0000000000000005",     // created, updated
    "00000000",                              // no removed members
    "0000000000000002 0000000000000003",     // versions: topics, placements
    "0000000000000003 0000000000000002",     // versions: members, users
    "0000000000000008",                      // applied index
    "00000000",                              // no remotes
    "00",                                    // no remote key
    "00000000",                              // no remote links
    "0000000000000000",                      // versions: remotes
];

/// The chunks of [`GOLDEN_STATE`]'s remotes section, at its end.
const REMOTES_SECTION_CHUNKS: usize = 4;

/// [`GOLDEN_STATE`] as a build before remotes wrote it (version 3): no
/// remotes section.
fn golden_state_before_remotes() -> String {
    let body = &GOLDEN_STATE[1..GOLDEN_STATE.len() - REMOTES_SECTION_CHUNKS];
    format!("{STATE_VERSION_BEFORE_REMOTES:02x}{}", golden(body))
}

/// [`GOLDEN_STATE`] as a build before moves wrote it (version 2): no move
/// target in a slot, no removed members.
const GOLDEN_STATE_BEFORE_MOVES: &[&str] = &[
    "02",                                                        // state version
    "00000002",                                                  // topics, in name order
    "00000001 63 af63de4c8601eff2 00000003",                     // "c", id, partitions
    "00000000240c8400 0000000000007530", // retention_ms 7 days, visibility_timeout_ms 30 s
    "0000000000000400 0000000000000400", // in-flight and acked-ahead caps 1,024
    DEFAULT_WINDOW,                      // idempotency_window_ms 2 min
    "00000000000003e8",                  // created_at_ms
    "00 00000000",                       // no owner, no schema
    "01 00000001 70",                    // parent "p"
    "0000000000000009 0000000000000000", // attach epoch, delay 0
    "00000003 000000000000000000000000000000000000000000000000", // attach offsets 0, 0, 0
    "00000000",                          // no children
    "00000001 70 af63ed4c8602096f 00000003", // "p", id, partitions
    "00000000240c8400 0000000000007530", // retention_ms 7 days, visibility_timeout_ms 30 s
    "0000000000000400 0000000000000400", // in-flight and acked-ahead caps 1,024
    DEFAULT_WINDOW,                      // idempotency_window_ms 2 min
    "00000000000003e8",                  // created_at_ms
    "00 00000000 00",                    // no owner, no schema, no parent
    "00000001 00000001 63",              // children: "c"
    "00000002",                          // placements, in topic order
    "00000001 63 00000003 00 00 00",     // "c": three slots waiting
    "00000001 70 00000003",              // "p": three slots
    "01 00000002 6e31 01 00000002 6e32 00", // n1, n2, waiting
    "00000002",                          // members, in id order
    "00000002 6e31",                     // "n1"
    "00000007 6e313a37393432 00000007 6e313a37393432", // addresses "n1:7942"
    "00000000000003e8 01 00",            // heartbeat, alive, not draining
    "00000002 6e32",                     // "n2"
    "00000007 6e323a37393432 00000007 6e323a37393432", // addresses "n2:7942"
    "00000000000003e8 01 01",            // heartbeat, alive, draining
    "00000002",                          // users, in name order
    "00000005 61646d696e",               // "admin"
    "0000003c 24326224303424",           // hash
    "626262626262626262626262626262626262626262626262626262626262",
    "6262626262626262626262626262626262626262626262",
    "01 00000000",                       // root, no grants
    "0000000000000001 0000000000000001", // created, updated
    "00000003 626f62",                   // "bob"
    "0000003c 24326224303424",           // hash
    "636363636363636363636363636363636363636363636363636363636363",
    "6363636363636363636363636363636363636363636363",
    "00 00000001",                           // not root, one grant
    "01 00000002 00000001 70 00000002 632a", // produce on "p" and "c*"
    "0000000000000005 0000000000000005",     // created, updated
    "0000000000000002 0000000000000003",     // versions: topics, placements
    "0000000000000003 0000000000000002",     // versions: members, users
    "0000000000000008",                      // applied index
];

/// A golden table as the hex the encoder gives.
fn golden(chunks: &[&str]) -> String {
    chunks.concat().replace(' ', "")
}

#[test]
fn the_bare_json_of_an_older_build_still_decodes() {
    let command = golden_command();
    let json = serde_json::to_vec(&command).expect("serializes");
    assert_eq!(decode_command(Bytes::from(json)), Ok(command));
    let state = sample_store().meta;
    let json = serde_json::to_vec(&state).expect("serializes");
    assert_eq!(decode_state(Bytes::from(json)), Ok(state));
}

#[test]
fn the_json_of_a_build_before_the_window_decodes_with_the_default() {
    let state = sample_store().meta;
    let mut json = serde_json::to_value(&state).expect("serializes");
    for topic in json["topics"].as_object_mut().expect("a map").values_mut() {
        let removed = topic.as_object_mut().expect("a record");
        assert!(removed.remove("idempotency_window_ms").is_some());
    }
    let bytes = serde_json::to_vec(&json).expect("serializes");
    assert_eq!(decode_state(Bytes::from(bytes)), Ok(state));
}

#[test]
fn the_json_command_blob_of_an_older_peer_still_decodes() {
    let command = golden_command();
    let mut writer = Writer::new();
    writer.u8(COMMAND_FORMAT_JSON);
    writer.bytes(&serde_json::to_vec(&command).expect("serializes"));
    let mut reader = Reader::new(writer.finish());
    assert_eq!(get_command(&mut reader), Ok(command));
    assert_eq!(reader.remaining(), 0);
}

#[test]
fn json_that_is_no_command_is_refused_with_its_column() {
    let error = decode_command(Bytes::from_static(b"{\"nope\":1}")).expect_err("refused");
    assert!(matches!(
        error,
        DecodeError::InvalidValue {
            field: "command json (column of the first error)",
            ..
        }
    ));
}

#[test]
fn an_unknown_command_kind_is_refused_naming_the_type_and_tag() {
    let error = decode_command(command_bytes(99, &[])).expect_err("refused");
    assert_eq!(
        error.to_string(),
        "metastore command kind has the invalid value 99"
    );
}

/// A binary command of kind `kind` whose fields are `body`, to reach the
/// enum tags nested in commands.
fn command_bytes(kind: u8, body: &[u8]) -> Bytes {
    let mut bytes = vec![COMMAND_VERSION, kind];
    bytes.extend(body);
    Bytes::from(bytes)
}

#[test]
fn an_unknown_actor_kind_is_refused_naming_the_type_and_tag() {
    // DeleteUser (kind 14) starts with its actor.
    let error = decode_command(command_bytes(14, &[7])).expect_err("refused");
    assert_eq!(error.to_string(), "Actor kind has the invalid value 7");
}

#[test]
fn an_unknown_grant_action_is_refused_naming_the_type_and_tag() {
    let mut writer = Writer::new();
    writer.u8(COMMAND_VERSION);
    writer.u8(16); // SetGrants
    writer.u8(1); // security off
    writer.str("bob");
    writer.u32(1); // one grant
    writer.u8(5); // no such action
    writer.u32(0);
    writer.u64(0);
    let error = decode_command(writer.finish()).expect_err("refused");
    assert_eq!(
        error.to_string(),
        "GrantAction kind has the invalid value 5"
    );
}

#[test]
fn an_unknown_member_status_is_refused_naming_the_type_and_tag() {
    let mut writer = Writer::new();
    writer.u8(STATE_VERSION);
    writer.u32(0); // topics
    writer.u32(0); // placements
    writer.u32(1); // members
    writer.str("n1");
    writer.str("h");
    writer.str("r");
    writer.u64(0);
    writer.u8(3); // no such status
    writer.u8(0);
    let error = decode_state(writer.finish()).expect_err("refused");
    assert_eq!(
        error.to_string(),
        "MemberStatus kind has the invalid value 3"
    );
}

#[test]
fn a_malformed_password_hash_is_refused_by_length_without_its_text() {
    let mut writer = Writer::new();
    writer.u8(COMMAND_VERSION);
    writer.u8(12); // SeedAdmin
    writer.str("admin");
    writer.str("secret");
    writer.u64(0);
    let error = decode_command(writer.finish()).expect_err("refused");
    assert_eq!(
        error.to_string(),
        "password hash (length) has the invalid value 6"
    );
}

#[test]
fn a_forged_topic_count_is_refused_before_anything_is_reserved() {
    let mut writer = Writer::new();
    writer.u8(STATE_VERSION);
    writer.u32(1_000_000);
    writer.u64(0);
    let error = decode_state(writer.finish()).expect_err("refused");
    assert!(
        matches!(
            error,
            DecodeError::LengthExceedsInput {
                field: "metastore topics",
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_topic_count_over_the_limit_is_refused() {
    let mut bytes = vec![STATE_VERSION];
    bytes.extend(u32::MAX.to_be_bytes());
    assert_eq!(
        decode_state(Bytes::from(bytes)),
        Err(DecodeError::InvalidValue {
            field: "metastore topics",
            value: u64::from(u32::MAX)
        })
    );
}

#[test]
fn a_forged_pattern_count_is_refused_before_anything_is_reserved() {
    let mut writer = Writer::new();
    writer.u8(COMMAND_VERSION);
    writer.u8(16); // SetGrants
    writer.u8(1);
    writer.str("bob");
    writer.u32(1);
    writer.u8(1);
    writer.u32(4_000_000);
    let error = decode_command(writer.finish()).expect_err("refused");
    assert!(
        matches!(
            error,
            DecodeError::LengthExceedsInput {
                field: "grant patterns",
                ..
            }
        ),
        "{error:?}"
    );
}

/// A state whose topics are the given records, in the given order.
fn state_with_topics(names: &[&str]) -> Bytes {
    let topics: Vec<_> = names
        .iter()
        .map(|name| {
            let mut store = Store::new();
            store.ok(create(name));
            store.topic(name).clone()
        })
        .collect();
    let mut writer = Writer::new();
    writer.u8(STATE_VERSION);
    put_list(&mut writer, "topics", &topics, 8, |writer, topic| {
        narad_protocol::Encode::encode(topic, writer);
    });
    // No placements, members, users or removed members.
    for _ in 0..4 {
        writer.u32(0);
    }
    for _ in 0..5 {
        writer.u64(0);
    }
    // No remotes, no remote key, no remote links, remotes version 0.
    writer.u32(0);
    writer.u8(0);
    writer.u32(0);
    writer.u64(0);
    writer.finish()
}

#[test]
fn topics_out_of_name_order_are_refused() {
    assert!(decode_state(state_with_topics(&["a", "b"])).is_ok());
    assert_eq!(
        decode_state(state_with_topics(&["b", "a"])),
        Err(DecodeError::InvalidValue {
            field: "position of a metastore topic out of name order",
            value: 1
        })
    );
}

#[test]
fn a_topic_listed_twice_is_refused() {
    assert_eq!(
        decode_state(state_with_topics(&["a", "a"])),
        Err(DecodeError::InvalidValue {
            field: "position of a metastore topic out of name order",
            value: 1
        })
    );
}

#[test]
fn replicas_that_applied_the_same_log_encode_the_same_bytes() {
    let (first, second) = (sample_store(), sample_store());
    assert_eq!(encode_state(&first.meta), encode_state(&second.meta));
}

#[test]
fn a_decoded_state_applies_the_rest_of_the_log_like_the_original() {
    let mut original = sample_store().meta;
    let mut restored = decode_state(encode_state(&original)).expect("decodes");
    let rest = [
        register("n3", 5_000),
        Command::CreateTopic(crate::tests::create("q")),
        Command::AttachChild(attach("p", "q")),
        assign("q", &[(2, "n3")]),
        Command::Heartbeat(Heartbeat {
            id: "n1".into(),
            at_ms: 9_000,
        }),
    ];
    let first = original.applied_index() + 1;
    for (index, command) in (first..).zip(&rest) {
        let context = ApplyContext { index };
        assert_eq!(
            original.apply(command, context),
            restored.apply(command, context)
        );
    }
    assert_eq!(encode_state(&restored), encode_state(&original));
    restored.assert_invariants();
}

#[test]
fn only_the_remote_kinds_wait_for_every_member_to_decode_them() {
    use crate::codec::{COMMAND_VERSION_FOR_REMOTES, members_must_decode};
    let reseal = Command::ResealRemotes(ResealRemotes {
        actor: Actor::User("ann".into()),
        key: sample_key(None),
        passwords: Vec::new(),
    });
    assert_eq!(
        members_must_decode(&reseal),
        Some(COMMAND_VERSION_FOR_REMOTES)
    );
    assert_eq!(members_must_decode(&golden_command()), None);
    assert_eq!(members_must_decode(&create("orders")), None);
}
