//! Splitting a slab of parent records into lanes and each lane into
//! chunks, one batch produce request each (spec §4, "Remote children").
//!
//! A keyed record's lane is FNV-32a of its key modulo the lane count, so
//! every record of a key goes down one lane, in slab order; a keyless
//! record's lane is its parent offset modulo the lane count. A chunk holds
//! at most the target's message cap (1,000; 100 for an older target) and
//! at most the current byte limit, counted on the uncompressed body; a
//! record larger than the limit alone still goes, alone in its chunk.

use bytes::Bytes;

use crate::encode::{BODY_CLOSE, BODY_OPEN, LinkIdentity, encode_message};

/// The most lanes a link has.
pub const LANES_MAX: u8 = 8;
/// Records per request to a current target.
pub const MESSAGES_MAX: usize = 1_000;
/// Records per request to an older target (one whose batch route takes
/// at most 100).
pub const MESSAGES_MAX_OLDER: usize = 100;
/// The byte limit a link starts at and returns to.
pub const CHUNK_BYTES_START: usize = 960 * 1024;
/// The byte limit never goes below this.
pub const CHUNK_BYTES_MIN: usize = 64 * 1024;
/// Successes in a row after which a lowered limit doubles back.
pub const SUCCESSES_TO_GROW: u32 = 20;

/// One record of a parent partition, as the fan-out cursor read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The parent partition.
    pub partition: u32,
    /// The record's offset in it.
    pub offset: u64,
    /// The key; `None` for a keyless record.
    pub key: Option<Bytes>,
    /// The payload bytes.
    pub payload: Bytes,
    /// When the parent committed it (Unix ms), for the link's lag.
    pub committed_at_unix_ms: u64,
}

/// Where a record sits in the parent: what a refusal names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordRef {
    /// The parent partition.
    pub partition: u32,
    /// The offset.
    pub offset: u64,
}

/// One request's worth of records, encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The uncompressed batch body.
    pub body: Vec<u8>,
    /// The records in body order (the target's `message <i>` is
    /// `records[i]`).
    pub records: Vec<RecordRef>,
}

/// FNV-32a, the hash the broker places keys with.
pub fn fnv1a_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, &byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// The lane (0-based) of a record among `lanes` (clamped to 1..=8): a
/// keyed record's by the FNV-32a hash of its key, so one key's records
/// share a lane and keep their order; a keyless one's by its parent
/// offset, which spreads them evenly.
pub fn lane(key: &[u8], offset: u64, lanes: u8) -> usize {
    let lanes = u64::from(lanes.clamp(1, LANES_MAX));
    let spread = if key.is_empty() {
        offset
    } else {
        u64::from(fnv1a_32(key))
    };
    // Below `LANES_MAX`, so the cast keeps the value.
    (spread % lanes) as usize
}

/// The lane (0-based) of `record` among `lanes` (see [`lane`]).
pub fn lane_of(record: &Record, lanes: u8) -> usize {
    lane(
        record.key.as_deref().unwrap_or_default(),
        record.offset,
        lanes,
    )
}

/// Splits `slab` into `lanes` lanes (indices into `slab`, in slab order).
pub fn split_lanes(slab: &[Record], lanes: u8) -> Vec<Vec<usize>> {
    let mut split = vec![Vec::new(); usize::from(lanes.clamp(1, LANES_MAX))];
    for (index, record) in slab.iter().enumerate() {
        split[lane_of(record, lanes)].push(index);
    }
    split
}

/// The two caps of a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkCaps {
    /// Records per chunk.
    pub messages: usize,
    /// Uncompressed body bytes per chunk (one record over it goes alone).
    pub bytes: usize,
    /// Whether each message carries its idempotency key.
    pub idempotency_keys: bool,
}

/// Encodes the records `lane` picks from `slab` into chunks, in order.
pub fn chunk_lane(
    slab: &[Record],
    lane: &[usize],
    identity: &LinkIdentity,
    caps: ChunkCaps,
) -> Vec<Chunk> {
    let messages = caps.messages.max(1);
    let mut chunks = Vec::new();
    let mut current = Chunk {
        body: BODY_OPEN.to_vec(),
        records: Vec::new(),
    };
    let mut element = Vec::new();
    for &index in lane {
        let record = &slab[index];
        element.clear();
        let key = caps
            .idempotency_keys
            .then(|| identity.idempotency_key(record.partition, record.offset));
        encode_message(
            &mut element,
            record.key.as_deref(),
            &record.payload,
            key.as_deref(),
        );
        let separator = usize::from(!current.records.is_empty());
        let grown = current.body.len() + separator + element.len() + BODY_CLOSE.len();
        let full = current.records.len() >= messages || grown > caps.bytes;
        if full && !current.records.is_empty() {
            chunks.push(close(std::mem::replace(
                &mut current,
                Chunk {
                    body: BODY_OPEN.to_vec(),
                    records: Vec::new(),
                },
            )));
        }
        if !current.records.is_empty() {
            current.body.push(b',');
        }
        current.body.extend_from_slice(&element);
        current.records.push(RecordRef {
            partition: record.partition,
            offset: record.offset,
        });
    }
    if !current.records.is_empty() {
        chunks.push(close(current));
    }
    chunks
}

fn close(mut chunk: Chunk) -> Chunk {
    chunk.body.extend_from_slice(BODY_CLOSE);
    chunk
}

/// A link's chunk byte limit: starts at 960 KiB, halves after a timeout
/// down to 64 KiB, doubles back after 20 successes in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteLimit {
    bytes: usize,
    successes: u32,
}

impl Default for ByteLimit {
    fn default() -> Self {
        Self {
            bytes: CHUNK_BYTES_START,
            successes: 0,
        }
    }
}

impl ByteLimit {
    /// The limit now (`narad_remote_chunk_bytes_limit`).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// A request timed out: halve.
    pub fn on_timeout(&mut self) {
        self.bytes = (self.bytes / 2).max(CHUNK_BYTES_MIN);
        self.successes = 0;
    }

    /// A request got `202`: after 20 in a row, double (up to the start).
    pub fn on_success(&mut self) {
        if self.bytes >= CHUNK_BYTES_START {
            return;
        }
        self.successes += 1;
        if self.successes >= SUCCESSES_TO_GROW {
            self.bytes = (self.bytes * 2).min(CHUNK_BYTES_START);
            self.successes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use proptest::prelude::*;

    use super::*;

    fn identity() -> LinkIdentity {
        LinkIdentity::new("link", "0123456789abcdef").unwrap()
    }

    fn arb_record() -> impl Strategy<Value = (Option<Vec<u8>>, Vec<u8>)> {
        (
            prop::option::of(prop::collection::vec(0u8..4, 0..3)),
            prop_oneof![
                prop::collection::vec(any::<u8>(), 1..300),
                Just(br#"{"a":1}"#.to_vec()),
            ],
        )
    }

    fn slab_of(records: Vec<(Option<Vec<u8>>, Vec<u8>)>) -> Vec<Record> {
        records
            .into_iter()
            .enumerate()
            .map(|(i, (key, payload))| Record {
                partition: (i % 3) as u32,
                offset: i as u64,
                key: key.map(Bytes::from),
                payload: Bytes::from(payload),
                committed_at_unix_ms: 0,
            })
            .collect()
    }

    /// The (key, payload, idempotency key) of every message of a body, as
    /// the target would decode them.
    fn decode(body: &[u8]) -> Vec<(Option<Vec<u8>>, Vec<u8>, String)> {
        let value: serde_json::Value = serde_json::from_slice(body).unwrap();
        value["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|message| {
                let payload = if message.get("payload_encoding").is_some() {
                    BASE64.decode(message["payload"].as_str().unwrap()).unwrap()
                } else {
                    serde_json::to_vec(&message["payload"]).unwrap()
                };
                let key = message.get("key").map(|key| {
                    let text = key.as_str().unwrap();
                    if message.get("key_encoding").is_some() {
                        BASE64.decode(text).unwrap()
                    } else {
                        text.as_bytes().to_vec()
                    }
                });
                let idempotency = message["idempotency_key"].as_str().unwrap().to_owned();
                (key, payload, idempotency)
            })
            .collect()
    }

    proptest! {
        #[test]
        fn every_record_goes_once_in_key_order_within_the_caps(
            records in prop::collection::vec(arb_record(), 0..120),
            lanes in 1u8..=8,
            messages in 1usize..30,
            bytes in 200usize..4_000,
        ) {
            let slab = slab_of(records);
            let caps = ChunkCaps { messages, bytes, idempotency_keys: true };
            let mut seen = BTreeSet::new();
            let mut lane_of_key: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
            for (lane_index, lane) in split_lanes(&slab, lanes).iter().enumerate() {
                let mut last_offset_of_key: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
                for chunk in chunk_lane(&slab, lane, &identity(), caps) {
                    prop_assert!(!chunk.records.is_empty());
                    prop_assert!(chunk.records.len() <= messages);
                    prop_assert!(chunk.body.len() <= bytes || chunk.records.len() == 1);
                    let decoded = decode(&chunk.body);
                    prop_assert_eq!(decoded.len(), chunk.records.len());
                    for (at, (key, payload, idempotency)) in chunk.records.iter().zip(decoded) {
                        let record = &slab[at.offset as usize];
                        prop_assert_eq!(record.partition, at.partition);
                        prop_assert_eq!(&payload[..], &record.payload[..]);
                        let expected_key = record.key.as_ref().filter(|k| !k.is_empty()).map(|k| k.to_vec());
                        prop_assert_eq!(&key, &expected_key);
                        prop_assert_eq!(idempotency, identity().idempotency_key(at.partition, at.offset));
                        prop_assert!(seen.insert(at.offset), "shipped twice");
                        if let Some(key) = key {
                            prop_assert_eq!(*lane_of_key.entry(key.clone()).or_insert(lane_index), lane_index);
                            if let Some(previous) = last_offset_of_key.insert(key, at.offset) {
                                prop_assert!(previous < at.offset, "key order broken");
                            }
                        }
                    }
                }
            }
            prop_assert_eq!(seen.len(), slab.len());
        }
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a_32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn keyless_records_spread_by_offset() {
        let slab = slab_of((0..8).map(|_| (None, b"1".to_vec())).collect());
        let lanes = split_lanes(&slab, 4);
        assert_eq!(lanes, vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]);
    }

    #[test]
    fn a_record_over_the_byte_cap_goes_alone() {
        let slab = slab_of(vec![
            (None, b"1".to_vec()),
            (None, vec![7; 5_000]),
            (None, b"2".to_vec()),
        ]);
        let caps = ChunkCaps {
            messages: MESSAGES_MAX,
            bytes: 1_000,
            idempotency_keys: true,
        };
        let chunks = chunk_lane(&slab, &[0, 1, 2], &identity(), caps);
        let sizes: Vec<usize> = chunks.iter().map(|c| c.records.len()).collect();
        assert_eq!(sizes, vec![1, 1, 1]);
        assert!(chunks[1].body.len() > 1_000);
    }

    #[test]
    fn the_message_cap_splits_chunks() {
        let slab = slab_of((0..250).map(|_| (None, b"1".to_vec())).collect());
        let lane: Vec<usize> = (0..250).collect();
        let caps = ChunkCaps {
            messages: MESSAGES_MAX_OLDER,
            bytes: CHUNK_BYTES_START,
            idempotency_keys: false,
        };
        let sizes: Vec<usize> = chunk_lane(&slab, &lane, &identity(), caps)
            .iter()
            .map(|c| c.records.len())
            .collect();
        assert_eq!(sizes, vec![100, 100, 50]);
    }

    #[test]
    fn the_byte_limit_halves_to_its_floor_and_doubles_back_after_twenty_successes() {
        let mut limit = ByteLimit::default();
        assert_eq!(limit.bytes(), 960 * 1024);
        let mut halved = Vec::new();
        for _ in 0..6 {
            limit.on_timeout();
            halved.push(limit.bytes() / 1024);
        }
        assert_eq!(halved, vec![480, 240, 120, 64, 64, 64]);
        for _ in 0..19 {
            limit.on_success();
        }
        assert_eq!(limit.bytes(), 64 * 1024);
        limit.on_success();
        assert_eq!(limit.bytes(), 128 * 1024);
        for _ in 0..19 {
            limit.on_success();
        }
        limit.on_timeout();
        assert_eq!(limit.bytes(), 64 * 1024, "a timeout resets the streak");
        for _ in 0..(20 * 5) {
            limit.on_success();
        }
        assert_eq!(limit.bytes(), CHUNK_BYTES_START);
    }
}
