//! The binary forms of remotes, the cluster remote key, remote-child links
//! and the commands that change them. Fields in declaration order; a sealed
//! password travels as its opaque bytes. A remote key's mint time is the
//! one field whose presence the layout decides ([`Layout::has_key_time`]).

use std::collections::{BTreeMap, BTreeSet};

use narad_protocol::fields::{get_option, invalid, put_option};
use narad_protocol::{Decode, DecodeError, Encode, Reader, Writer};

use super::Layout;
use super::values::{
    LIST_ITEMS_MAX, PARTITION_SLOTS_MAX, STR_BYTES_MIN, get_epoch, get_incarnation, get_list,
    get_offsets, get_opt_str, put_epoch, put_incarnation, put_list, put_offsets, put_opt_str,
};
use crate::limits::REMOTE_SKIPS_PER_PARTITION_MAX;
use crate::{
    Actor, AttachRemoteChild, Compression, CreateRemote, DeleteRemote, PauseRemoteChild, Remote,
    RemoteFrom, RemoteId, RemoteKey, RemoteLimits, RemoteLink, RemotePause, ResealRemotes,
    ResealedPassword, ResumeRemoteChild, SealedPassword, SkipRemoteRecord, UpdateRemote,
};
use narad_protocol::fields::{get_bool, put_bool};

/// Smallest encoded [`SealedPassword`]: key version, three strings, the
/// sealed bytes' prefix and the time.
pub(super) const SEALED_BYTES_MIN: usize = 4 + 4 * STR_BYTES_MIN + 8;

/// Smallest encoded [`Remote`].
pub(super) const REMOTE_BYTES_MIN: usize = STR_BYTES_MIN
    + 8
    + 2 * STR_BYTES_MIN
    + SEALED_BYTES_MIN
    + 8
    + 1
    + LIMITS_BYTES
    + 8
    + 8
    + STR_BYTES_MIN;

/// Smallest encoded [`RemoteLink`] with its stub's name in front.
pub(super) const LINK_BYTES_MIN: usize =
    STR_BYTES_MIN + STR_BYTES_MIN + 8 + STR_BYTES_MIN + 1 + 1 + 1 + 1 + 4 + 8;

/// Encoded [`RemoteLimits`]: one u32, four u64s and the compression tag.
const LIMITS_BYTES: usize = 4 + 4 * 8 + 1;

fn put_remote_id(writer: &mut Writer, id: &RemoteId) {
    // A remote id is 16 hex characters, like an incarnation id.
    writer.str(id.as_str());
}

fn get_remote_id(reader: &mut Reader) -> Result<RemoteId, DecodeError> {
    let text = reader.str("remote id")?;
    let length = text.len() as u64;
    RemoteId::try_from(text).map_err(|_| invalid("remote id", length))
}

impl Encode for Compression {
    fn encode(&self, writer: &mut Writer) {
        writer.u8(match self {
            Self::None => 1,
            Self::Zstd => 2,
        });
    }
}

impl Decode for Compression {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        match reader.u8("remote compression")? {
            1 => Ok(Self::None),
            2 => Ok(Self::Zstd),
            other => Err(invalid("remote compression", other)),
        }
    }
}

impl Encode for RemoteLimits {
    fn encode(&self, writer: &mut Writer) {
        writer.u32(self.max_in_flight);
        writer.u64(self.request_timeout_ms);
        writer.u64(self.idle_conn_timeout_ms);
        writer.u64(self.conn_max_age_ms);
        writer.u64(self.check_interval_ms);
        self.compression.encode(writer);
    }
}

impl Decode for RemoteLimits {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            max_in_flight: reader.u32("remote max_in_flight")?,
            request_timeout_ms: reader.u64("remote request_timeout_ms")?,
            idle_conn_timeout_ms: reader.u64("remote idle_conn_timeout_ms")?,
            conn_max_age_ms: reader.u64("remote conn_max_age_ms")?,
            check_interval_ms: reader.u64("remote check_interval_ms")?,
            compression: Compression::decode(reader)?,
        })
    }
}

impl Encode for SealedPassword {
    fn encode(&self, writer: &mut Writer) {
        writer.u32(self.key_version);
        writer.str(&self.key_id);
        writer.bytes(&self.sealed);
        writer.str(&self.fingerprint);
        writer.u64(self.set_at_ms);
        writer.str(&self.set_by);
    }
}

impl Decode for SealedPassword {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            key_version: reader.u32("sealed key version")?,
            key_id: reader.str("sealed key id")?,
            sealed: reader.bytes("sealed password")?.to_vec(),
            fingerprint: reader.str("password fingerprint")?,
            set_at_ms: reader.u64("password set_at_ms")?,
            set_by: reader.str("password set_by")?,
        })
    }
}

impl Encode for RemoteKey {
    fn encode(&self, writer: &mut Writer) {
        put_key(writer, self, Layout::Current);
    }
}

impl Decode for RemoteKey {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        get_key(reader, Layout::Current)
    }
}

/// Writes a remote key in `layout`; before [`Layout::Current`] it has no
/// mint time.
///
/// # Panics
/// If `layout` has no mint time and the key has one: a command carrying a
/// key is written in the current layout ([`super::command::command_layout`])
/// and a state always is.
fn put_key(writer: &mut Writer, key: &RemoteKey, layout: Layout) {
    writer.u32(key.version);
    writer.str(&key.key_id);
    writer.bytes(&key.salt);
    if layout.has_key_time() {
        put_option(writer, key.created_at_ms.as_ref(), |writer, at_ms| {
            writer.u64(*at_ms);
        });
    } else {
        assert!(
            key.created_at_ms.is_none(),
            "a remote key with its mint time is written in a layout that has one"
        );
    }
}

/// Reads a remote key in `layout`; before [`Layout::Current`] its mint
/// time is unknown.
pub(super) fn get_key(reader: &mut Reader, layout: Layout) -> Result<RemoteKey, DecodeError> {
    Ok(RemoteKey {
        version: reader.u32("remote key version")?,
        key_id: reader.str("remote key id")?,
        salt: reader.bytes("remote key salt")?.to_vec(),
        created_at_ms: if layout.has_key_time() {
            get_option(reader, "remote key created_at_ms", |reader| {
                reader.u64("remote key created_at_ms")
            })?
        } else {
            None
        },
    })
}

impl Encode for Remote {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.name);
        put_remote_id(writer, &self.id);
        writer.str(&self.url);
        writer.str(&self.username);
        self.password.encode(writer);
        writer.u64(self.credential_version);
        put_opt_str(writer, self.ca_pem.as_deref());
        self.limits.encode(writer);
        writer.u64(self.revision);
        writer.u64(self.created_at_ms);
        writer.str(&self.created_by);
    }
}

impl Decode for Remote {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            name: reader.str("remote name")?,
            id: get_remote_id(reader)?,
            url: reader.str("remote url")?,
            username: reader.str("remote username")?,
            password: SealedPassword::decode(reader)?,
            credential_version: reader.u64("remote credential_version")?,
            ca_pem: get_opt_str(reader, "remote ca_pem")?,
            limits: RemoteLimits::decode(reader)?,
            revision: reader.u64("remote revision")?,
            created_at_ms: reader.u64("remote created_at_ms")?,
            created_by: reader.str("remote created_by")?,
        })
    }
}

impl Encode for RemoteFrom {
    fn encode(&self, writer: &mut Writer) {
        writer.u8(match self {
            Self::Attach => 1,
            Self::Unconsumed => 2,
            Self::Earliest => 3,
        });
    }
}

impl Decode for RemoteFrom {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        match reader.u8("remote link from")? {
            1 => Ok(Self::Attach),
            2 => Ok(Self::Unconsumed),
            3 => Ok(Self::Earliest),
            other => Err(invalid("remote link from", other)),
        }
    }
}

impl Encode for RemotePause {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.reason);
        writer.u64(self.at_ms);
        writer.str(&self.by);
    }
}

impl Decode for RemotePause {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            reason: reader.str("pause reason")?,
            at_ms: reader.u64("pause at_ms")?,
            by: reader.str("pause by")?,
        })
    }
}

impl Encode for RemoteLink {
    fn encode(&self, writer: &mut Writer) {
        writer.str(&self.remote);
        put_remote_id(writer, &self.remote_id);
        writer.str(&self.remote_topic);
        put_opt_str(writer, self.target_id.as_deref());
        writer.u8(self.lanes);
        self.from.encode(writer);
        put_option(writer, self.paused.as_ref(), |writer, pause| {
            pause.encode(writer);
        });
        put_skips(writer, &self.skip);
        writer.u64(self.created_at_ms);
    }
}

impl Decode for RemoteLink {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            remote: reader.str("link remote")?,
            remote_id: get_remote_id(reader)?,
            remote_topic: reader.str("link remote_topic")?,
            target_id: get_opt_str(reader, "link target_id")?,
            lanes: reader.u8("link lanes")?,
            from: RemoteFrom::decode(reader)?,
            paused: get_option(reader, "link pause", RemotePause::decode)?,
            skip: get_skips(reader)?,
            created_at_ms: reader.u64("link created_at_ms")?,
        })
    }
}

/// Skips as a list of (partition, offsets) in partition order.
fn put_skips(writer: &mut Writer, skips: &BTreeMap<u32, BTreeSet<u64>>) {
    let entries: Vec<(&u32, &BTreeSet<u64>)> = skips.iter().collect();
    put_list(
        writer,
        "link skip partitions",
        &entries,
        PARTITION_SLOTS_MAX,
        |writer, (partition, offsets)| {
            writer.u32(**partition);
            let offsets: Vec<u64> = offsets.iter().copied().collect();
            put_list(
                writer,
                "link skipped offsets",
                &offsets,
                REMOTE_SKIPS_PER_PARTITION_MAX as u32,
                |writer, offset| writer.u64(*offset),
            );
        },
    );
}

fn get_skips(reader: &mut Reader) -> Result<BTreeMap<u32, BTreeSet<u64>>, DecodeError> {
    let entries = get_list(
        reader,
        "link skip partitions",
        PARTITION_SLOTS_MAX,
        8,
        |reader| {
            let partition = reader.u32("link skip partition")?;
            let offsets = get_list(
                reader,
                "link skipped offsets",
                REMOTE_SKIPS_PER_PARTITION_MAX as u32,
                8,
                |reader| reader.u64("link skipped offset"),
            )?;
            Ok((partition, offsets))
        },
    )?;
    let mut skips = BTreeMap::new();
    for (partition, offsets) in entries {
        let count = offsets.len();
        let offsets: BTreeSet<u64> = offsets.into_iter().collect();
        let ascending = skips
            .last_key_value()
            .is_none_or(|(last, _): (&u32, _)| *last < partition);
        if !ascending || offsets.len() != count {
            return Err(invalid("link skip partition out of order", partition));
        }
        skips.insert(partition, offsets);
    }
    Ok(skips)
}

impl Encode for CreateRemote {
    fn encode(&self, writer: &mut Writer) {
        encode_create_remote(self, writer, Layout::Current);
    }
}

/// Writes an add in `layout` (its key as [`put_key`] does).
pub(super) fn encode_create_remote(create: &CreateRemote, writer: &mut Writer, layout: Layout) {
    create.actor.encode(writer);
    create.remote.encode(writer);
    put_key(writer, &create.key, layout);
}

impl Decode for CreateRemote {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        decode_create_remote(reader, Layout::Current)
    }
}

/// Reads an add in `layout` (its key as [`get_key`] does).
pub(super) fn decode_create_remote(
    reader: &mut Reader,
    layout: Layout,
) -> Result<CreateRemote, DecodeError> {
    Ok(CreateRemote {
        actor: Actor::decode(reader)?,
        remote: Remote::decode(reader)?,
        key: get_key(reader, layout)?,
    })
}

impl Encode for UpdateRemote {
    fn encode(&self, writer: &mut Writer) {
        encode_update_remote(self, writer, Layout::Current);
    }
}

/// Writes a change in `layout` (its key as [`put_key`] does).
pub(super) fn encode_update_remote(update: &UpdateRemote, writer: &mut Writer, layout: Layout) {
    update.actor.encode(writer);
    writer.str(&update.name);
    put_option(
        writer,
        update.expected_revision.as_ref(),
        |writer, revision| {
            writer.u64(*revision);
        },
    );
    put_opt_str(writer, update.url.as_deref());
    put_opt_str(writer, update.username.as_deref());
    put_option(writer, update.password.as_ref(), |writer, password| {
        password.encode(writer);
    });
    put_option(writer, update.key.as_ref(), |writer, key| {
        put_key(writer, key, layout);
    });
    put_option(writer, update.ca_pem.as_ref(), |writer, ca| {
        put_opt_str(writer, ca.as_deref());
    });
    put_option(writer, update.limits.as_ref(), |writer, limits| {
        limits.encode(writer);
    });
}

impl Decode for UpdateRemote {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        decode_update_remote(reader, Layout::Current)
    }
}

/// Reads a change in `layout` (its key as [`get_key`] does).
pub(super) fn decode_update_remote(
    reader: &mut Reader,
    layout: Layout,
) -> Result<UpdateRemote, DecodeError> {
    Ok(UpdateRemote {
        actor: Actor::decode(reader)?,
        name: reader.str("remote name")?,
        expected_revision: get_option(reader, "expected revision", |reader| {
            reader.u64("expected revision")
        })?,
        url: get_opt_str(reader, "remote url")?,
        username: get_opt_str(reader, "remote username")?,
        password: get_option(reader, "remote password", SealedPassword::decode)?,
        key: get_option(reader, "remote key", |reader| get_key(reader, layout))?,
        ca_pem: get_option(reader, "remote ca_pem change", |reader| {
            get_opt_str(reader, "remote ca_pem")
        })?,
        limits: get_option(reader, "remote limits", RemoteLimits::decode)?,
    })
}

impl Encode for DeleteRemote {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.name);
        put_bool(writer, self.force);
    }
}

impl Decode for DeleteRemote {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            name: reader.str("remote name")?,
            force: get_bool(reader, "remote delete force")?,
        })
    }
}

impl Encode for ResealRemotes {
    fn encode(&self, writer: &mut Writer) {
        encode_reseal_remotes(self, writer, Layout::Current);
    }
}

/// Writes a re-encryption in `layout` (its key as [`put_key`] does).
pub(super) fn encode_reseal_remotes(reseal: &ResealRemotes, writer: &mut Writer, layout: Layout) {
    reseal.actor.encode(writer);
    put_key(writer, &reseal.key, layout);
    put_list(
        writer,
        "resealed passwords",
        &reseal.passwords,
        LIST_ITEMS_MAX,
        |writer, resealed| {
            writer.str(&resealed.name);
            writer.u64(resealed.credential_version);
            resealed.password.encode(writer);
        },
    );
}

impl Decode for ResealRemotes {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        decode_reseal_remotes(reader, Layout::Current)
    }
}

/// Reads a re-encryption in `layout` (its key as [`get_key`] does).
pub(super) fn decode_reseal_remotes(
    reader: &mut Reader,
    layout: Layout,
) -> Result<ResealRemotes, DecodeError> {
    Ok(ResealRemotes {
        actor: Actor::decode(reader)?,
        key: get_key(reader, layout)?,
        passwords: get_list(
            reader,
            "resealed passwords",
            LIST_ITEMS_MAX,
            STR_BYTES_MIN + 8 + SEALED_BYTES_MIN,
            |reader| {
                Ok(ResealedPassword {
                    name: reader.str("remote name")?,
                    credential_version: reader.u64("credential version")?,
                    password: SealedPassword::decode(reader)?,
                })
            },
        )?,
    })
}

impl Encode for AttachRemoteChild {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.parent);
        put_incarnation(writer, &self.parent_id);
        writer.str(&self.child);
        put_incarnation(writer, &self.child_id);
        put_epoch(writer, &self.attach_epoch);
        put_offsets(writer, &self.attach_offsets);
        self.link.encode(writer);
    }
}

impl Decode for AttachRemoteChild {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            parent: reader.str("parent")?,
            parent_id: get_incarnation(reader, "parent incarnation id")?,
            child: reader.str("child")?,
            child_id: get_incarnation(reader, "child incarnation id")?,
            attach_epoch: get_epoch(reader, "attach epoch")?,
            attach_offsets: get_offsets(reader)?,
            link: RemoteLink::decode(reader)?,
        })
    }
}

impl Encode for PauseRemoteChild {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.child);
        writer.str(&self.reason);
        writer.u64(self.at_ms);
    }
}

impl Decode for PauseRemoteChild {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            child: reader.str("child")?,
            reason: reader.str("pause reason")?,
            at_ms: reader.u64("pause at_ms")?,
        })
    }
}

impl Encode for ResumeRemoteChild {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.child);
        put_opt_str(writer, self.target_id.as_deref());
    }
}

impl Decode for ResumeRemoteChild {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            child: reader.str("child")?,
            target_id: get_opt_str(reader, "target id")?,
        })
    }
}

impl Encode for SkipRemoteRecord {
    fn encode(&self, writer: &mut Writer) {
        self.actor.encode(writer);
        writer.str(&self.child);
        writer.u32(self.partition);
        writer.u64(self.offset);
    }
}

impl Decode for SkipRemoteRecord {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            actor: Actor::decode(reader)?,
            child: reader.str("child")?,
            partition: reader.u32("skip partition")?,
            offset: reader.u64("skip offset")?,
        })
    }
}
