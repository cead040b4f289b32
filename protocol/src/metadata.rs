//! Wire types of the metadata stream: how a data node (or any subscriber)
//! keeps a replica of the control plane's metastore.
//!
//! The stream is a long poll over the control lane: the subscriber asks for
//! everything after the index it has applied ([`MetadataFetch`]); a control
//! node answers with either a full snapshot or the ordered changes after
//! that index ([`MetadataBatch`]), stamped with the applied index they bring
//! the subscriber to, plus the highest commit index the answering node knows
//! of (so the subscriber knows when it has caught up). This crate knows
//! nothing of the metastore's contents: snapshots and changes travel as
//! opaque bytes, defined by the control plane (its binary state and command
//! codecs, each with its own version byte; an older control plane sent
//! serde JSON, which its subscribers tell apart by the first byte).

use bytes::Bytes;

use crate::codec::{Decode, DecodeError, Encode, Message, Reader, Writer};
use crate::fields::get_count;

/// The most changes one batch carries; a subscriber further behind asks
/// again (or gets a snapshot). Keeps a batch far below the frame limit for
/// ordinary commands.
pub const METADATA_BATCH_CHANGES_MAX: u32 = 1_024;

/// The longest a fetch may wait for a change, in milliseconds: below the
/// transport's call timeouts so a quiet cluster answers before the caller
/// gives up.
pub const METADATA_WAIT_MS_MAX: u32 = 4_000;

/// A subscriber asks for the changes after `after_index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataFetch {
    /// The applied index of the subscriber's replica; 0 asks for a snapshot.
    pub after_index: u64,
    /// How long to wait when nothing is newer (capped at
    /// [`METADATA_WAIT_MS_MAX`]).
    pub wait_ms: u32,
}

impl Encode for MetadataFetch {
    fn encode(&self, writer: &mut Writer) {
        writer.u64(self.after_index);
        writer.u32(self.wait_ms);
    }
}

impl Decode for MetadataFetch {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Self {
            after_index: reader.u64("after_index")?,
            wait_ms: reader.u32("wait_ms")?,
        })
    }
}

impl Message for MetadataFetch {
    const NAME: &'static str = "MetadataFetch";
    const VERSION: u8 = 1;
}

/// Smallest encoded [`MetadataChange`]: its index and the command's length
/// prefix.
const CHANGE_BYTES_MIN: usize = 8 + 4;

/// One change: the log index that carried it and the command's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataChange {
    /// The log index; strictly increasing within a batch.
    pub index: u64,
    /// The command, encoded by the control plane.
    pub command: Bytes,
}

/// The answer to [`MetadataFetch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataBatch {
    /// After this batch the subscriber's replica is at this applied index
    /// (entries without a change, such as a new leader's blank entry,
    /// advance it too).
    pub applied_index: u64,
    /// The highest commit index the answering node knows of: the
    /// subscriber has caught up once `applied_index` reaches it.
    pub leader_commit_index: u64,
    /// A full snapshot at `applied_index`, replacing the subscriber's
    /// replica; then `changes` is empty.
    pub snapshot: Option<Bytes>,
    /// Ordered changes after the fetch's `after_index`, up to
    /// `applied_index`.
    pub changes: Vec<MetadataChange>,
}

impl Encode for MetadataBatch {
    fn encode(&self, writer: &mut Writer) {
        writer.u64(self.applied_index);
        writer.u64(self.leader_commit_index);
        match &self.snapshot {
            Some(snapshot) => {
                writer.u8(1);
                writer.bytes(snapshot);
            }
            None => writer.u8(0),
        }
        // A batch over the limit would be refused by every decoder: building
        // one is a programmer error of the sender.
        assert!(
            self.changes.len() <= METADATA_BATCH_CHANGES_MAX as usize,
            "a metadata batch of {} changes",
            self.changes.len()
        );
        writer.u32(self.changes.len() as u32);
        for change in &self.changes {
            writer.u64(change.index);
            writer.bytes(&change.command);
        }
    }
}

impl Decode for MetadataBatch {
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
        let applied_index = reader.u64("applied_index")?;
        let leader_commit_index = reader.u64("leader_commit_index")?;
        let snapshot = match reader.u8("snapshot flag")? {
            0 => None,
            1 => Some(reader.bytes("snapshot")?),
            other => {
                return Err(DecodeError::InvalidValue {
                    field: "snapshot flag",
                    value: u64::from(other),
                });
            }
        };
        // Every change takes at least its index and its length prefix, so
        // a forged count is refused before anything is reserved.
        let count = get_count(
            reader,
            "change count",
            METADATA_BATCH_CHANGES_MAX,
            CHANGE_BYTES_MIN,
        )?;
        let mut changes = Vec::with_capacity(count);
        for _ in 0..count {
            changes.push(MetadataChange {
                index: reader.u64("change index")?,
                command: reader.bytes("change command")?,
            });
        }
        Ok(Self {
            applied_index,
            leader_commit_index,
            snapshot,
            changes,
        })
    }
}

impl Message for MetadataBatch {
    const NAME: &'static str = "MetadataBatch";
    const VERSION: u8 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_message, encode_message};
    use proptest::prelude::*;

    fn batch_strategy() -> impl Strategy<Value = MetadataBatch> {
        (
            any::<u64>(),
            any::<u64>(),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..32)),
            proptest::collection::vec(
                (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..16)),
                0..8,
            ),
        )
            .prop_map(|(applied_index, leader_commit_index, snapshot, changes)| {
                MetadataBatch {
                    applied_index,
                    leader_commit_index,
                    snapshot: snapshot.map(Bytes::from),
                    changes: changes
                        .into_iter()
                        .map(|(index, command)| MetadataChange {
                            index,
                            command: Bytes::from(command),
                        })
                        .collect(),
                }
            })
    }

    proptest! {
        #[test]
        fn batch_round_trips(batch in batch_strategy()) {
            let decoded = decode_message::<MetadataBatch>(encode_message(&batch)).expect("decodes");
            prop_assert_eq!(decoded, batch);
        }

        #[test]
        fn batch_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = decode_message::<MetadataBatch>(Bytes::from(bytes));
        }

        #[test]
        fn a_damaged_batch_never_panics(batch in batch_strategy(), damage in crate::damage::damage()) {
            for damaged in damage.apply(&encode_message(&batch)) {
                let _ = decode_message::<MetadataBatch>(Bytes::from(damaged));
            }
        }
    }

    #[test]
    fn fetch_round_trips() {
        let fetch = MetadataFetch {
            after_index: 42,
            wait_ms: 1_000,
        };
        assert_eq!(
            decode_message::<MetadataFetch>(encode_message(&fetch)),
            Ok(fetch)
        );
    }

    #[test]
    fn a_change_count_the_input_cannot_hold_is_refused_before_allocating() {
        let mut writer = Writer::new();
        writer.u8(MetadataBatch::VERSION);
        writer.u64(1);
        writer.u64(1);
        writer.u8(0);
        writer.u32(METADATA_BATCH_CHANGES_MAX);
        writer.u64(7);
        assert_eq!(
            decode_message::<MetadataBatch>(writer.finish()),
            Err(DecodeError::LengthExceedsInput {
                field: "change count",
                claimed: u64::from(METADATA_BATCH_CHANGES_MAX) * 12,
                remaining: 8
            })
        );
    }

    #[test]
    fn a_change_count_over_the_limit_is_refused_before_allocating() {
        let mut writer = Writer::new();
        writer.u8(MetadataBatch::VERSION);
        writer.u64(1);
        writer.u64(1);
        writer.u8(0);
        writer.u32(u32::MAX);
        assert_eq!(
            decode_message::<MetadataBatch>(writer.finish()),
            Err(DecodeError::InvalidValue {
                field: "change count",
                value: u64::from(u32::MAX)
            })
        );
    }
}
