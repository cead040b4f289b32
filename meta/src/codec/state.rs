//! The binary encoding of the whole [`Metastore`]: the form of a metadata
//! stream snapshot and of the metastore inside a Raft snapshot.
//!
//! Maps travel as lists in key order (every map is a `BTreeMap`), and a
//! record's key is its own name or id, so the same state always gives the
//! same bytes. The decoder refuses keys that are not strictly ascending, so
//! the bytes of a state are also unique.
//!
//! The decoder checks the encoding, not the metastore's cross-record rules
//! (a child's parent lists it, a placement names a member): a state that
//! decodes was written by a replica's `apply`, which keeps them.

use std::collections::{BTreeMap, BTreeSet};

use narad_protocol::{Decode, DecodeError, Encode, Message, Reader, Writer};

use super::Layout;
use super::remotes::{LINK_BYTES_MIN, REMOTE_BYTES_MIN, get_key};
use super::values::{
    MEMBER_BYTES_MIN, PARTITION_SLOTS_MAX, STR_BYTES_MIN, TOPIC_BYTES_MIN,
    TOPIC_BYTES_MIN_BEFORE_WINDOW, USER_BYTES_MIN, decode_topic, get_list, put_list,
};
use crate::{Assignment, DomainVersions, Member, Metastore, Remote, RemoteLink, User};
use narad_protocol::fields::{get_count, get_option, put_count, put_option};

/// The version of the state encoding. The serde JSON that snapshots held
/// before has no version byte; it starts with `{`, which no version is.
/// Versions 4 ([`STATE_VERSION_BEFORE_KEY_TIME`]), 3
/// ([`STATE_VERSION_BEFORE_REMOTES`]), 2 ([`STATE_VERSION_BEFORE_MOVES`])
/// and 1 ([`STATE_VERSION_BEFORE_WINDOW`]) are still read.
pub const STATE_VERSION: u8 = 5;

/// The state encoding before the cluster remote key recorded when it was
/// minted: as [`STATE_VERSION`], except that the remote key has no
/// `created_at_ms` (it reads as unknown, and stays so until a
/// re-encryption under a new secret mints the next version). Read, never
/// written.
pub const STATE_VERSION_BEFORE_KEY_TIME: u8 = 4;

/// The state encoding before remotes: as [`STATE_VERSION`] without the
/// trailing remotes section (remotes, the cluster remote key, remote-child
/// links and the remotes change counter). Read, never written.
pub const STATE_VERSION_BEFORE_REMOTES: u8 = 3;

/// The state encoding before moves: as [`STATE_VERSION`], except that a
/// placement slot has no move target and the state lists no removed
/// members. Read, never written.
pub const STATE_VERSION_BEFORE_MOVES: u8 = 2;

/// The state encoding before the idempotency window was a topic setting:
/// as [`STATE_VERSION_BEFORE_MOVES`], except that a topic has no
/// `idempotency_window_ms` (it takes the default). Read, never written.
pub const STATE_VERSION_BEFORE_WINDOW: u8 = 1;

/// The most records of one kind (topics, placements, members, users) a
/// state holds. Far above any cluster's (each topic costs directories on
/// the data nodes and memory on every replica); the bound only stops a
/// forged count.
pub(crate) const STATE_RECORDS_MAX: u32 = 1 << 24;

impl Message for Metastore {
    const NAME: &'static str = "metastore state";
    const VERSION: u8 = STATE_VERSION;
}

/// How one map of the state travels: the name of its count, the name of
/// the error for a key out of order, and the least bytes a record takes.
struct MapField {
    count: &'static str,
    order: &'static str,
    record_bytes_min: usize,
}

const TOPICS: MapField = MapField {
    count: "metastore topics",
    order: "position of a metastore topic out of name order",
    record_bytes_min: TOPIC_BYTES_MIN,
};

const TOPICS_BEFORE_WINDOW: MapField = MapField {
    record_bytes_min: TOPIC_BYTES_MIN_BEFORE_WINDOW,
    ..TOPICS
};

const PLACEMENTS: MapField = MapField {
    count: "metastore placements",
    order: "position of a metastore placement out of topic order",
    // The topic name's prefix and the slot count.
    record_bytes_min: STR_BYTES_MIN + 4,
};

const MEMBERS: MapField = MapField {
    count: "metastore members",
    order: "position of a metastore member out of id order",
    record_bytes_min: MEMBER_BYTES_MIN,
};

/// Which fields a state's encoding has: the version byte in front decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StateForm {
    /// How its topics are laid out.
    topics: Layout,
    /// Whether placement slots carry move targets and the state lists
    /// removed members.
    moves: bool,
    /// Whether the remotes section follows the applied index.
    remotes: bool,
    /// Whether the cluster remote key carries its mint time.
    key_time: bool,
}

impl StateForm {
    /// What this build writes.
    const CURRENT: Self = Self {
        topics: Layout::Current,
        moves: true,
        remotes: true,
        key_time: true,
    };

    /// The form of version `version`, if this build reads it.
    pub(super) fn of_version(version: u8) -> Option<Self> {
        match version {
            STATE_VERSION => Some(Self::CURRENT),
            STATE_VERSION_BEFORE_KEY_TIME => Some(Self {
                key_time: false,
                ..Self::CURRENT
            }),
            STATE_VERSION_BEFORE_REMOTES => Some(Self {
                key_time: false,
                remotes: false,
                ..Self::CURRENT
            }),
            STATE_VERSION_BEFORE_MOVES => Some(Self {
                topics: Layout::Current,
                moves: false,
                remotes: false,
                key_time: false,
            }),
            STATE_VERSION_BEFORE_WINDOW => Some(Self {
                topics: Layout::BeforeWindow,
                moves: false,
                remotes: false,
                key_time: false,
            }),
            _ => None,
        }
    }
}

const REMOVED: MapField = MapField {
    count: "metastore removed members",
    order: "position of a removed member out of id order",
    record_bytes_min: STR_BYTES_MIN,
};

const USERS: MapField = MapField {
    count: "metastore users",
    order: "position of a metastore user out of name order",
    record_bytes_min: USER_BYTES_MIN,
};

impl Encode for Metastore {
    fn encode(&self, writer: &mut Writer) {
        put_records(writer, &TOPICS, &self.topics, |writer, name, topic| {
            assert_eq!(name, topic.name, "a topic filed under another name");
            topic.encode(writer);
        });
        put_records(
            writer,
            &PLACEMENTS,
            &self.assignments,
            |writer, topic, slots| {
                writer.str(topic);
                put_list(
                    writer,
                    "placement slots",
                    slots,
                    PARTITION_SLOTS_MAX,
                    put_slot,
                );
            },
        );
        put_records(writer, &MEMBERS, &self.members, |writer, id, member| {
            assert_eq!(id, member.id, "a member filed under another id");
            member.encode(writer);
        });
        put_records(writer, &USERS, &self.users, |writer, name, user| {
            assert_eq!(name, user.username, "a user filed under another name");
            user.encode(writer);
        });
        put_count(writer, REMOVED.count, self.removed.len(), STATE_RECORDS_MAX);
        for id in &self.removed {
            writer.str(id);
        }
        self.versions.encode(writer);
        writer.u64(self.applied_index);
        put_records(writer, &REMOTES, &self.remotes, |writer, name, remote| {
            assert_eq!(name, remote.name, "a remote filed under another name");
            remote.encode(writer);
        });
        put_option(writer, self.remote_key.as_ref(), |writer, key| {
            key.encode(writer);
        });
        put_records(writer, &LINKS, &self.remote_links, |writer, child, link| {
            writer.str(child);
            link.encode(writer);
        });
        writer.u64(self.versions.remotes);
    }
}

const REMOTES: MapField = MapField {
    count: "metastore remotes",
    order: "position of a metastore remote out of name order",
    record_bytes_min: REMOTE_BYTES_MIN,
};

const LINKS: MapField = MapField {
    count: "metastore remote links",
    order: "position of a remote link out of stub name order",
    record_bytes_min: LINK_BYTES_MIN,
};

impl Decode for Metastore {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        decode_state(reader, StateForm::CURRENT)
    }
}

/// Reads a state's fields in `form` (the version byte in front chose it).
pub(super) fn decode_state(reader: &mut Reader, form: StateForm) -> Result<Metastore, DecodeError> {
    let topics = if form.topics.has_window() {
        &TOPICS
    } else {
        &TOPICS_BEFORE_WINDOW
    };
    let mut state = Metastore {
        topics: get_records(reader, topics, |reader| {
            let topic = decode_topic(reader, form.topics)?;
            Ok((topic.name.clone(), topic))
        })?,
        assignments: get_records(reader, &PLACEMENTS, |reader| {
            get_placement(reader, form.moves)
        })?,
        members: get_records(reader, &MEMBERS, |reader| {
            let member = Member::decode(reader)?;
            Ok((member.id.clone(), member))
        })?,
        users: get_records(reader, &USERS, |reader| {
            let user = User::decode(reader)?;
            Ok((user.username.clone(), user))
        })?,
        removed: if form.moves {
            get_records(reader, &REMOVED, |reader| {
                Ok((reader.str("removed member id")?, ()))
            })?
            .into_keys()
            .collect()
        } else {
            BTreeSet::new()
        },
        versions: DomainVersions::decode(reader)?,
        applied_index: reader.u64("metastore applied_index")?,
        remotes: BTreeMap::new(),
        remote_key: None,
        remote_links: BTreeMap::new(),
    };
    if form.remotes {
        state.remotes = get_records(reader, &REMOTES, |reader| {
            let remote = Remote::decode(reader)?;
            Ok((remote.name.clone(), remote))
        })?;
        let keys = if form.key_time {
            Layout::Current
        } else {
            Layout::BeforeKeyTime
        };
        state.remote_key = get_option(reader, "metastore remote key", |reader| {
            get_key(reader, keys)
        })?;
        state.remote_links = get_records(reader, &LINKS, |reader| {
            let child = reader.str("remote link stub")?;
            Ok((child, RemoteLink::decode(reader)?))
        })?;
        state.versions.remotes = reader.u64("remotes version")?;
    }
    Ok(state)
}

/// Appends a map's entries in key order (the map's own order).
fn put_records<T>(
    writer: &mut Writer,
    map: &MapField,
    records: &BTreeMap<String, T>,
    mut put: impl FnMut(&mut Writer, &str, &T),
) {
    put_count(writer, map.count, records.len(), STATE_RECORDS_MAX);
    for (key, record) in records {
        put(writer, key, record);
    }
}

/// Reads entries written by [`put_records`] back into their map, refusing
/// a key that does not follow the previous one.
fn get_records<T>(
    reader: &mut Reader,
    map: &MapField,
    mut get: impl FnMut(&mut Reader) -> Result<(String, T), DecodeError>,
) -> Result<BTreeMap<String, T>, DecodeError> {
    let count = get_count(reader, map.count, STATE_RECORDS_MAX, map.record_bytes_min)?;
    let mut records = BTreeMap::new();
    for position in 0..count {
        let (key, record) = get(reader)?;
        check_ascending(&records, &key, map.order, position)?;
        records.insert(key, record);
    }
    Ok(records)
}

/// Refuses `name` unless it sorts after every key already read: a map has
/// one encoding, and a duplicate cannot replace an earlier record. The
/// error names `order` and carries the record's position.
fn check_ascending<T>(
    records: &BTreeMap<String, T>,
    name: &str,
    order: &'static str,
    position: usize,
) -> Result<(), DecodeError> {
    match records.last_key_value() {
        Some((last, _)) if last.as_str() >= name => Err(DecodeError::InvalidValue {
            field: order,
            value: position as u64,
        }),
        _ => Ok(()),
    }
}

/// Appends one placement slot: the owner and the move target, or nothing
/// while it waits.
fn put_slot(writer: &mut Writer, slot: &Option<Assignment>) {
    put_option(writer, slot.as_ref(), |writer, assignment| {
        writer.str(&assignment.owner);
        put_option(writer, assignment.target.as_ref(), |writer, target| {
            writer.str(target);
        });
    });
}

/// Reads one topic's placements: its name, then one slot per partition;
/// without `moves` (an older form) a slot has no target.
fn get_placement(
    reader: &mut Reader,
    moves: bool,
) -> Result<(String, Vec<Option<Assignment>>), DecodeError> {
    let topic = reader.str("placement topic")?;
    let slots = get_list(
        reader,
        "placement slots",
        PARTITION_SLOTS_MAX,
        1,
        |reader| {
            get_option(reader, "placement slot", |reader| {
                let owner = reader.str("placement owner")?;
                let target = if moves {
                    get_option(reader, "placement target", |reader| {
                        reader.str("placement target")
                    })?
                } else {
                    None
                };
                Ok(Assignment { owner, target })
            })
        },
    )?;
    Ok((topic, slots))
}

impl Encode for DomainVersions {
    fn encode(&self, writer: &mut Writer) {
        writer.u64(self.topics);
        writer.u64(self.assignments);
        writer.u64(self.members);
        writer.u64(self.users);
    }
}

impl Decode for DomainVersions {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            topics: reader.u64("topics version")?,
            assignments: reader.u64("assignments version")?,
            members: reader.u64("members version")?,
            users: reader.u64("users version")?,
            // The remotes counter travels in the remotes section.
            remotes: 0,
        })
    }
}
