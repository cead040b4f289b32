//! The payload of one ingress WAL frame: an accepted produce, encoded.
//!
//! Two formats exist and both decode forever, because a WAL written by an
//! older binary must replay unchanged after an upgrade:
//!
//! - format 1: topic, key, target partition, creation time, payload;
//! - format 2: format 1 plus the topic's incarnation id right after the
//!   topic name. Every record for a topic that has an id is written in
//!   format 2; a topic created before incarnation ids existed has none, and
//!   its records stay format 1;
//! - format 3: format 2 plus the producer's idempotency key after the key.
//!   Only a record with an idempotency key is written in format 3, and its
//!   incarnation id may be empty (the topic has none).
//!
//! Layout (all integers big-endian, every length a `u32` byte count):
//!
//! ```text
//! format 1: 0x01 | len topic | len key | partition u32 | created_at_unix_ms u64 | len payload
//! format 2: 0x02 | len topic | len incarnation_id | len key | partition u32 | created_at_unix_ms u64 | len payload
//! format 3: 0x03 | len topic | len incarnation_id | len key | len idempotency_key | partition u32 | created_at_unix_ms u64 | len payload
//! ```
//!
//! An empty key means "no key". Decoding is strict: an unknown format byte,
//! a record cut short, a length that runs past the record, bytes left over
//! after the payload, a field over its limit, and a topic or incarnation id
//! that is empty or not UTF-8 are all typed errors. The encoder refuses
//! exactly what the decoder refuses, so every record that encodes decodes.
//!
//! This module knows nothing of frames, checksums or sequence numbers: the
//! frame around a record carries those.

use std::fmt;

/// The largest encoded record, format byte to last payload byte. It equals
/// the WAL's largest frame payload, so any record that encodes fits a frame.
pub const RECORD_BYTES_MAX: usize = 16 * 1024 * 1024;

/// The longest topic name in bytes. New topics are limited to 200, but
/// names up to 255 created by older releases keep working, so records for
/// them must encode and decode.
pub const TOPIC_NAME_BYTES_MAX: usize = 255;

/// The longest incarnation id in bytes. Ids are 16 hex characters in
/// practice; the bound is looser so an id minted differently later still
/// decodes, and tight enough that a corrupt length is caught at once.
pub const INCARNATION_ID_BYTES_MAX: usize = 64;

/// The longest key in bytes. The API states no key limit, so this is the
/// largest single payload the API accepts (1 MiB): no legitimate key is
/// larger than a message, and a bound keeps a corrupt length from passing.
pub const KEY_BYTES_MAX: usize = 1024 * 1024;

/// The longest idempotency key in bytes: what the API accepts.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 256;

/// Bytes of a record that do not depend on its fields in format 1: format
/// byte, three `u32` lengths, the `u32` partition and the `u64` timestamp.
pub const RECORD_FORMAT_1_FIXED_BYTES: usize = 1 + 4 + 4 + 4 + 8 + 4;

/// Bytes of a record that do not depend on its fields in format 2: format 1
/// plus the incarnation id's `u32` length.
pub const RECORD_FORMAT_2_FIXED_BYTES: usize = RECORD_FORMAT_1_FIXED_BYTES + 4;

/// Bytes of a record that do not depend on its fields in format 3: format 2
/// plus the idempotency key's `u32` length.
pub const RECORD_FORMAT_3_FIXED_BYTES: usize = RECORD_FORMAT_2_FIXED_BYTES + 4;

// Every field limit must leave room for a record to exist at all.
const _: () = assert!(TOPIC_NAME_BYTES_MAX + RECORD_FORMAT_2_FIXED_BYTES < RECORD_BYTES_MAX);
const _: () = assert!(KEY_BYTES_MAX + INCARNATION_ID_BYTES_MAX < RECORD_BYTES_MAX);
// Lengths are stored as u32; every limit must fit one.
const _: () = assert!(RECORD_BYTES_MAX <= u32::MAX as usize);

/// Which of the two record layouts a record uses. The discriminant is the
/// format byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordFormat {
    /// Topic, key, partition, timestamp, payload.
    V1 = 1,
    /// Format 1 with the topic's incarnation id after the topic name.
    V2 = 2,
    /// Format 2 with the producer's idempotency key after the key.
    V3 = 3,
}

impl RecordFormat {
    /// The byte a record of this format starts with.
    pub fn byte(self) -> u8 {
        self as u8
    }

    /// The format a record's first byte names, if this binary knows it.
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::V1),
            2 => Some(Self::V2),
            3 => Some(Self::V3),
            _ => None,
        }
    }
}

/// A field of a record, named in errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RecordField {
    /// The leading format byte.
    Format,
    /// The topic name.
    Topic,
    /// The topic's incarnation id (format 2 only).
    IncarnationId,
    /// The key.
    Key,
    /// The producer's idempotency key (format 3 only).
    IdempotencyKey,
    /// The target partition.
    Partition,
    /// The creation time.
    CreatedAt,
    /// The message payload.
    Payload,
}

impl fmt::Display for RecordField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Format => "format byte",
            Self::Topic => "topic",
            Self::IncarnationId => "incarnation id",
            Self::Key => "key",
            Self::IdempotencyKey => "idempotency key",
            Self::Partition => "target partition",
            Self::CreatedAt => "created_at",
            Self::Payload => "payload",
        })
    }
}

/// Why a record could not be encoded or decoded. Offsets count from the
/// record's first byte (its format byte).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The format byte names a format this binary does not read.
    #[error("WAL record has unknown format {format:#04x}; this binary reads formats 1 to 3")]
    UnknownFormat {
        /// The record's first byte.
        format: u8,
    },
    /// The record ends inside a fixed-size field or a length prefix.
    #[error(
        "WAL record truncated in the {field}: {needed} bytes needed at offset {offset}, \
         {available} left"
    )]
    Truncated {
        /// The field being read.
        field: RecordField,
        /// Where the field starts.
        offset: usize,
        /// Bytes the field takes.
        needed: usize,
        /// Bytes the record had left there.
        available: usize,
    },
    /// A length prefix declares more bytes than the record has left.
    #[error(
        "WAL record {field} length {declared} at offset {offset} runs past the end of the \
         record ({available} bytes left)"
    )]
    LengthBeyondRecord {
        /// The field whose length it is.
        field: RecordField,
        /// Where the length prefix starts.
        offset: usize,
        /// The length the prefix declares.
        declared: u32,
        /// Bytes the record had left after the prefix.
        available: usize,
    },
    /// A field is longer than its named limit.
    #[error("WAL record {field} is {len} bytes, over the limit of {max}")]
    FieldTooLong {
        /// The field.
        field: RecordField,
        /// Its length.
        len: usize,
        /// Its limit.
        max: usize,
    },
    /// A field that must hold something is empty (the topic, a format-2
    /// incarnation id, or a format-3 idempotency key).
    #[error("WAL record {field} is empty")]
    EmptyField {
        /// The field.
        field: RecordField,
    },
    /// The topic or incarnation id is not UTF-8.
    #[error("WAL record {field} is not valid UTF-8")]
    NotUtf8 {
        /// The field.
        field: RecordField,
    },
    /// Bytes follow the payload.
    #[error("WAL record has {count} trailing bytes after its payload")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// The whole record is over [`RECORD_BYTES_MAX`].
    #[error("WAL record is {len} bytes, over the limit of {max}")]
    RecordTooLarge {
        /// The record's encoded length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// A record whose fields borrow from elsewhere: what [`WalRecordRef::decode`]
/// returns without copying, and what an accept path encodes from without
/// building an owned [`WalRecord`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalRecordRef<'a> {
    /// The topic the record was produced to; never empty.
    pub topic: &'a str,
    /// The topic's incarnation id; `Some` makes the record format 2.
    pub incarnation_id: Option<&'a str>,
    /// The key; empty means the record has no key.
    pub key: &'a [u8],
    /// The producer's idempotency key; non-empty makes the record format 3.
    pub idempotency_key: &'a [u8],
    /// The partition chosen at accept time.
    pub partition: u32,
    /// When the record was accepted, in Unix milliseconds.
    pub created_at_unix_ms: u64,
    /// The message, byte for byte.
    pub payload: &'a [u8],
}

/// An owned record; see [`WalRecordRef`] for the meaning of each field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalRecord {
    /// The topic the record was produced to; never empty.
    pub topic: String,
    /// The topic's incarnation id; `Some` makes the record format 2.
    pub incarnation_id: Option<String>,
    /// The key; empty means the record has no key.
    pub key: Vec<u8>,
    /// The producer's idempotency key; non-empty makes the record format 3.
    pub idempotency_key: Vec<u8>,
    /// The partition chosen at accept time.
    pub partition: u32,
    /// When the record was accepted, in Unix milliseconds.
    pub created_at_unix_ms: u64,
    /// The message, byte for byte.
    pub payload: Vec<u8>,
}

impl<'a> WalRecordRef<'a> {
    /// The format this record encodes as: 3 when it has an idempotency key,
    /// else 2 when it has an incarnation id.
    pub fn format(&self) -> RecordFormat {
        if !self.idempotency_key.is_empty() {
            RecordFormat::V3
        } else if self.incarnation_id.is_some() {
            RecordFormat::V2
        } else {
            RecordFormat::V1
        }
    }

    /// The key, or `None` when the record has none (an empty key).
    pub fn key(&self) -> Option<&'a [u8]> {
        (!self.key.is_empty()).then_some(self.key)
    }

    /// Bytes [`WalRecordRef::encode_into`] writes.
    pub fn encoded_len(&self) -> usize {
        let fixed = match self.format() {
            RecordFormat::V1 => RECORD_FORMAT_1_FIXED_BYTES,
            RecordFormat::V2 => RECORD_FORMAT_2_FIXED_BYTES,
            RecordFormat::V3 => RECORD_FORMAT_3_FIXED_BYTES,
        };
        fixed
            + self.topic.len()
            + self.incarnation_id.map_or(0, str::len)
            + self.key.len()
            + self.idempotency_key.len()
            + self.payload.len()
    }

    /// Checks every limit the decoder checks, so a record that passes
    /// decodes again.
    ///
    /// # Errors
    /// [`RecordError::EmptyField`] for an empty topic or incarnation id,
    /// [`RecordError::FieldTooLong`] for a field over its limit, and
    /// [`RecordError::RecordTooLarge`] when the whole record is over
    /// [`RECORD_BYTES_MAX`].
    pub fn validate(&self) -> Result<(), RecordError> {
        check_text(RecordField::Topic, self.topic, TOPIC_NAME_BYTES_MAX)?;
        if let Some(id) = self.incarnation_id {
            check_text(RecordField::IncarnationId, id, INCARNATION_ID_BYTES_MAX)?;
        }
        check_len(RecordField::Key, self.key.len(), KEY_BYTES_MAX)?;
        check_len(
            RecordField::IdempotencyKey,
            self.idempotency_key.len(),
            IDEMPOTENCY_KEY_BYTES_MAX,
        )?;
        let len = self.encoded_len();
        if len > RECORD_BYTES_MAX {
            return Err(RecordError::RecordTooLarge {
                len,
                max: RECORD_BYTES_MAX,
            });
        }
        Ok(())
    }

    /// Writes the record into `out`, which must be exactly
    /// [`WalRecordRef::encoded_len`] bytes long. This lets the WAL stage a
    /// record straight into its buffer.
    ///
    /// # Errors
    /// Whatever [`WalRecordRef::validate`] refuses; `out` is then untouched.
    ///
    /// # Panics
    /// If `out.len()` is not [`WalRecordRef::encoded_len`]: the caller sized
    /// the space wrongly.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<(), RecordError> {
        self.validate()?;
        assert_eq!(
            out.len(),
            self.encoded_len(),
            "WAL record staged into {} bytes but encodes to {}",
            out.len(),
            self.encoded_len()
        );
        let mut writer = Writer { out, at: 0 };
        writer.put(&[self.format().byte()]);
        writer.put_prefixed(self.topic.as_bytes());
        match self.format() {
            RecordFormat::V1 => {}
            RecordFormat::V2 | RecordFormat::V3 => {
                writer.put_prefixed(self.incarnation_id.unwrap_or_default().as_bytes());
            }
        }
        writer.put_prefixed(self.key);
        if self.format() == RecordFormat::V3 {
            writer.put_prefixed(self.idempotency_key);
        }
        writer.put(&self.partition.to_be_bytes());
        writer.put(&self.created_at_unix_ms.to_be_bytes());
        writer.put_prefixed(self.payload);
        assert_eq!(writer.at, writer.out.len(), "WAL record encoder left a gap");
        Ok(())
    }

    /// The record encoded into a new vector.
    ///
    /// # Errors
    /// Whatever [`WalRecordRef::validate`] refuses.
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        // Validate before allocating, so an oversized record costs nothing.
        self.validate()?;
        let mut out = vec![0; self.encoded_len()];
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// Decodes a record of either format, borrowing its fields from `bytes`.
    ///
    /// # Errors
    /// A [`RecordError`] naming what is wrong; `bytes` must be exactly one
    /// record, nothing before or after it.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, RecordError> {
        if bytes.len() > RECORD_BYTES_MAX {
            return Err(RecordError::RecordTooLarge {
                len: bytes.len(),
                max: RECORD_BYTES_MAX,
            });
        }
        let mut reader = Reader { bytes, at: 0 };
        let [format] = reader.fixed::<1>(RecordField::Format)?;
        let format =
            RecordFormat::from_byte(format).ok_or(RecordError::UnknownFormat { format })?;
        let topic = reader.text(RecordField::Topic, TOPIC_NAME_BYTES_MAX)?;
        let incarnation_id = match format {
            RecordFormat::V1 => None,
            RecordFormat::V2 => {
                Some(reader.text(RecordField::IncarnationId, INCARNATION_ID_BYTES_MAX)?)
            }
            RecordFormat::V3 => {
                Some(reader.text_or_empty(RecordField::IncarnationId, INCARNATION_ID_BYTES_MAX)?)
                    .filter(|id| !id.is_empty())
            }
        };
        let key = reader.prefixed(RecordField::Key, KEY_BYTES_MAX)?;
        let idempotency_key = match format {
            RecordFormat::V1 | RecordFormat::V2 => &[][..],
            RecordFormat::V3 => {
                let key =
                    reader.prefixed(RecordField::IdempotencyKey, IDEMPOTENCY_KEY_BYTES_MAX)?;
                if key.is_empty() {
                    return Err(RecordError::EmptyField {
                        field: RecordField::IdempotencyKey,
                    });
                }
                key
            }
        };
        let partition = u32::from_be_bytes(reader.fixed(RecordField::Partition)?);
        let created_at_unix_ms = u64::from_be_bytes(reader.fixed(RecordField::CreatedAt)?);
        let payload = reader.prefixed(RecordField::Payload, RECORD_BYTES_MAX)?;
        let count = bytes.len() - reader.at;
        if count != 0 {
            return Err(RecordError::TrailingBytes { count });
        }
        Ok(Self {
            topic,
            incarnation_id,
            key,
            idempotency_key,
            partition,
            created_at_unix_ms,
            payload,
        })
    }

    /// An owned copy of the record.
    pub fn to_record(&self) -> WalRecord {
        WalRecord {
            topic: self.topic.to_owned(),
            incarnation_id: self.incarnation_id.map(str::to_owned),
            key: self.key.to_vec(),
            idempotency_key: self.idempotency_key.to_vec(),
            partition: self.partition,
            created_at_unix_ms: self.created_at_unix_ms,
            payload: self.payload.to_vec(),
        }
    }
}

impl WalRecord {
    /// The record as a borrowed view, which does the encoding.
    pub fn view(&self) -> WalRecordRef<'_> {
        WalRecordRef {
            topic: &self.topic,
            incarnation_id: self.incarnation_id.as_deref(),
            key: &self.key,
            idempotency_key: &self.idempotency_key,
            partition: self.partition,
            created_at_unix_ms: self.created_at_unix_ms,
            payload: &self.payload,
        }
    }

    /// See [`WalRecordRef::format`].
    pub fn format(&self) -> RecordFormat {
        self.view().format()
    }

    /// See [`WalRecordRef::key`].
    pub fn key(&self) -> Option<&[u8]> {
        self.view().key()
    }

    /// See [`WalRecordRef::encoded_len`].
    pub fn encoded_len(&self) -> usize {
        self.view().encoded_len()
    }

    /// See [`WalRecordRef::validate`].
    ///
    /// # Errors
    /// As [`WalRecordRef::validate`].
    pub fn validate(&self) -> Result<(), RecordError> {
        self.view().validate()
    }

    /// See [`WalRecordRef::encode_into`].
    ///
    /// # Errors
    /// As [`WalRecordRef::encode_into`].
    ///
    /// # Panics
    /// If `out.len()` is not [`WalRecord::encoded_len`].
    pub fn encode_into(&self, out: &mut [u8]) -> Result<(), RecordError> {
        self.view().encode_into(out)
    }

    /// See [`WalRecordRef::encode`].
    ///
    /// # Errors
    /// As [`WalRecordRef::encode`].
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        self.view().encode()
    }

    /// Decodes a record of either format into owned fields.
    ///
    /// # Errors
    /// As [`WalRecordRef::decode`].
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        WalRecordRef::decode(bytes).map(|record| record.to_record())
    }
}

fn check_len(field: RecordField, len: usize, max: usize) -> Result<(), RecordError> {
    if len > max {
        return Err(RecordError::FieldTooLong { field, len, max });
    }
    Ok(())
}

fn check_text(field: RecordField, text: &str, max: usize) -> Result<(), RecordError> {
    if text.is_empty() {
        return Err(RecordError::EmptyField { field });
    }
    check_len(field, text.len(), max)
}

/// Writes fields front to back into a slice sized for them exactly.
struct Writer<'o> {
    out: &'o mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.out[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }

    fn put_prefixed(&mut self, bytes: &[u8]) {
        // `validate` bounded every field by RECORD_BYTES_MAX, which fits u32.
        let len = u32::try_from(bytes.len()).expect("validated field length fits u32");
        self.put(&len.to_be_bytes());
        self.put(bytes);
    }
}

/// Reads fields front to back, turning every shortfall into a typed error.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn fixed<const N: usize>(&mut self, field: RecordField) -> Result<[u8; N], RecordError> {
        let truncated = RecordError::Truncated {
            field,
            offset: self.at,
            needed: N,
            available: self.remaining(),
        };
        let chunk = self
            .bytes
            .get(self.at..)
            .and_then(|rest| rest.first_chunk::<N>())
            .ok_or(truncated)?;
        self.at += N;
        Ok(*chunk)
    }

    fn prefixed(&mut self, field: RecordField, max: usize) -> Result<&'a [u8], RecordError> {
        let offset = self.at;
        let declared = u32::from_be_bytes(self.fixed(field)?);
        let len = declared as usize;
        check_len(field, len, max)?;
        if len > self.remaining() {
            return Err(RecordError::LengthBeyondRecord {
                field,
                offset,
                declared,
                available: self.remaining(),
            });
        }
        let bytes = &self.bytes[self.at..self.at + len];
        self.at += len;
        Ok(bytes)
    }

    fn text(&mut self, field: RecordField, max: usize) -> Result<&'a str, RecordError> {
        let text = self.text_or_empty(field, max)?;
        check_text(field, text, max)?;
        Ok(text)
    }

    fn text_or_empty(&mut self, field: RecordField, max: usize) -> Result<&'a str, RecordError> {
        let bytes = self.prefixed(field, max)?;
        std::str::from_utf8(bytes).map_err(|_| RecordError::NotUtf8 { field })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Format 1, written out by hand so the test pins the layout rather
    /// than whatever the encoder does today.
    const GOLDEN_FORMAT_1: &[u8] = &[
        0x01, // format
        0x00, 0x00, 0x00, 0x06, b'o', b'r', b'd', b'e', b'r', b's', // topic
        0x00, 0x00, 0x00, 0x02, b'k', b'1', // key
        0x00, 0x00, 0x00, 0x03, // partition
        0x00, 0x00, 0x01, 0x8C, 0x0A, 0x0B, 0x0C, 0x0D, // created_at_unix_ms
        0x00, 0x00, 0x00, 0x02, b'h', b'i', // payload
    ];

    fn golden_format_1_record() -> WalRecord {
        WalRecord {
            topic: "orders".to_owned(),
            incarnation_id: None,
            key: b"k1".to_vec(),
            idempotency_key: Vec::new(),
            partition: 3,
            created_at_unix_ms: 0x0000_018C_0A0B_0C0D,
            payload: b"hi".to_vec(),
        }
    }

    /// Format 2 with no key and a binary payload, written out by hand.
    const GOLDEN_FORMAT_2: &[u8] = &[
        0x02, // format
        0x00, 0x00, 0x00, 0x06, b'o', b'r', b'd', b'e', b'r', b's', // topic
        0x00, 0x00, 0x00, 0x10, b'9', b'f', b'8', b'6', b'd', b'0', b'8',
        b'1', // incarnation id
        b'8', b'8', b'4', b'c', b'7', b'd', b'6', b'5', // (continued)
        0x00, 0x00, 0x00, 0x00, // key: empty, no key
        0x00, 0x00, 0x01, 0x02, // partition
        0x00, 0x00, 0x01, 0x8C, 0x0A, 0x0B, 0x0C, 0x0D, // created_at_unix_ms
        0x00, 0x00, 0x00, 0x03, 0x00, 0xFF, 0x7F, // payload
    ];

    fn golden_format_2_record() -> WalRecord {
        WalRecord {
            topic: "orders".to_owned(),
            incarnation_id: Some("9f86d081884c7d65".to_owned()),
            key: Vec::new(),
            idempotency_key: Vec::new(),
            partition: 0x0102,
            created_at_unix_ms: 0x0000_018C_0A0B_0C0D,
            payload: vec![0x00, 0xFF, 0x7F],
        }
    }

    fn record_with(topic: &str, incarnation_id: Option<&str>, key: &[u8]) -> WalRecord {
        WalRecord {
            topic: topic.to_owned(),
            incarnation_id: incarnation_id.map(str::to_owned),
            key: key.to_vec(),
            idempotency_key: Vec::new(),
            partition: 7,
            created_at_unix_ms: 1,
            payload: b"p".to_vec(),
        }
    }

    #[test]
    fn a_record_with_an_idempotency_key_is_format_3_with_or_without_an_incarnation() {
        for incarnation_id in [Some("9f86d081884c7d65"), None] {
            let record = WalRecord {
                idempotency_key: b"req-42".to_vec(),
                ..record_with("orders", incarnation_id, b"k")
            };
            let bytes = record.encode().unwrap();
            assert_eq!(bytes[0], 3);
            assert_eq!(bytes.len(), record.encoded_len());
            assert_eq!(WalRecord::decode(&bytes), Ok(record));
        }
    }

    #[test]
    fn format_3_refuses_an_empty_or_overlong_idempotency_key() {
        let empty = raw(3, &[b"orders", b"", b"k", b""], 1, b"p");
        assert_eq!(
            WalRecordRef::decode(&empty),
            Err(RecordError::EmptyField {
                field: RecordField::IdempotencyKey
            })
        );
        let long = vec![b'x'; IDEMPOTENCY_KEY_BYTES_MAX + 1];
        let overlong = raw(3, &[b"orders", b"", b"k", &long], 1, b"p");
        assert!(matches!(
            WalRecordRef::decode(&overlong),
            Err(RecordError::FieldTooLong {
                field: RecordField::IdempotencyKey,
                ..
            })
        ));
        let record = WalRecord {
            idempotency_key: long,
            ..record_with("orders", None, b"k")
        };
        assert!(record.encode().is_err());
    }

    /// Builds raw record bytes field by field, for inputs the encoder would
    /// refuse to write.
    fn raw(format: u8, fields: &[&[u8]], partition: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![format];
        for field in fields {
            out.extend_from_slice(&(field.len() as u32).to_be_bytes());
            out.extend_from_slice(field);
        }
        out.extend_from_slice(&partition.to_be_bytes());
        out.extend_from_slice(&9u64.to_be_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// `record` encodes to exactly `golden`, as long as it said it would be.
    fn assert_encodes_to(record: &WalRecord, golden: &[u8]) {
        assert_eq!(record.encoded_len(), golden.len());
        assert_eq!(record.encode().unwrap(), golden);
    }

    /// The encoder refuses `record` and the decoder refuses `bytes`, both
    /// with `expected`.
    fn assert_refused_both_ways(record: &WalRecord, bytes: &[u8], expected: RecordError) {
        assert_eq!(record.encode().err(), Some(expected.clone()));
        assert_eq!(WalRecordRef::decode(bytes).err(), Some(expected));
    }

    #[test]
    fn golden_format_1_decodes_to_its_fields() {
        let record = WalRecord::decode(GOLDEN_FORMAT_1).unwrap();
        assert_eq!(record, golden_format_1_record());
        assert_eq!(record.format(), RecordFormat::V1);
        assert_eq!(record.key(), Some(&b"k1"[..]));
    }

    #[test]
    fn golden_format_1_encodes_byte_for_byte() {
        assert_encodes_to(&golden_format_1_record(), GOLDEN_FORMAT_1);
    }

    #[test]
    fn golden_format_2_decodes_to_its_fields() {
        let record = WalRecordRef::decode(GOLDEN_FORMAT_2).unwrap();
        assert_eq!(record.to_record(), golden_format_2_record());
        assert_eq!(record.format(), RecordFormat::V2);
        assert_eq!(record.incarnation_id, Some("9f86d081884c7d65"));
    }

    #[test]
    fn golden_format_2_encodes_byte_for_byte() {
        assert_encodes_to(&golden_format_2_record(), GOLDEN_FORMAT_2);
    }

    #[test]
    fn empty_key_means_no_key() {
        let record = WalRecord::decode(GOLDEN_FORMAT_2).unwrap();
        assert_eq!(record.key(), None);
    }

    #[test]
    fn fixed_overheads_match_the_layout() {
        let minimal = record_with("t", None, b"");
        assert_eq!(minimal.encoded_len(), RECORD_FORMAT_1_FIXED_BYTES + 1 + 1);
        let with_id = record_with("t", Some("i"), b"");
        assert_eq!(
            with_id.encoded_len(),
            RECORD_FORMAT_2_FIXED_BYTES + 1 + 1 + 1
        );
    }

    #[test]
    fn unknown_format_bytes_are_refused() {
        for format in [0x00, 0x04, 0x7F, 0xFF] {
            let mut bytes = GOLDEN_FORMAT_1.to_vec();
            bytes[0] = format;
            assert_eq!(
                WalRecordRef::decode(&bytes),
                Err(RecordError::UnknownFormat { format })
            );
        }
    }

    #[test]
    fn empty_input_is_truncated_at_the_format_byte() {
        assert_eq!(
            WalRecordRef::decode(&[]),
            Err(RecordError::Truncated {
                field: RecordField::Format,
                offset: 0,
                needed: 1,
                available: 0,
            })
        );
    }

    #[test]
    fn cut_inside_the_partition_is_truncated_there() {
        // Format byte (1) + topic (4 + 6) + key (4 + 2) = 17, then 2 of the
        // partition's 4 bytes.
        let error = WalRecordRef::decode(&GOLDEN_FORMAT_1[..19]).unwrap_err();
        assert_eq!(
            error,
            RecordError::Truncated {
                field: RecordField::Partition,
                offset: 17,
                needed: 4,
                available: 2,
            }
        );
    }

    #[test]
    fn cut_inside_the_payload_is_a_length_beyond_the_record() {
        let cut = &GOLDEN_FORMAT_1[..GOLDEN_FORMAT_1.len() - 1];
        assert_eq!(
            WalRecordRef::decode(cut),
            Err(RecordError::LengthBeyondRecord {
                field: RecordField::Payload,
                offset: 29,
                declared: 2,
                available: 1,
            })
        );
    }

    #[test]
    fn a_trailing_byte_is_refused() {
        let mut bytes = GOLDEN_FORMAT_2.to_vec();
        bytes.push(0);
        assert_eq!(
            WalRecordRef::decode(&bytes),
            Err(RecordError::TrailingBytes { count: 1 })
        );
    }

    #[test]
    fn a_topic_length_past_the_end_is_refused() {
        let bytes = [0x01, 0x00, 0x00, 0x00, 0x09, b'a', b'b'];
        assert_eq!(
            WalRecordRef::decode(&bytes),
            Err(RecordError::LengthBeyondRecord {
                field: RecordField::Topic,
                offset: 1,
                declared: 9,
                available: 2,
            })
        );
    }

    #[test]
    fn a_non_utf8_topic_is_refused() {
        let bytes = raw(1, &[&[0xC3, 0x28], b""], 0, b"p");
        assert_eq!(
            WalRecordRef::decode(&bytes),
            Err(RecordError::NotUtf8 {
                field: RecordField::Topic
            })
        );
    }

    #[test]
    fn a_non_utf8_incarnation_id_is_refused() {
        let bytes = raw(2, &[b"t", &[0xFF], b""], 0, b"p");
        assert_eq!(
            WalRecordRef::decode(&bytes),
            Err(RecordError::NotUtf8 {
                field: RecordField::IncarnationId
            })
        );
    }

    #[test]
    fn an_empty_topic_is_refused_both_ways() {
        let expected = RecordError::EmptyField {
            field: RecordField::Topic,
        };
        let bytes = raw(1, &[b"", b""], 0, b"p");
        assert_refused_both_ways(&record_with("", None, b""), &bytes, expected);
    }

    #[test]
    fn an_empty_incarnation_id_is_refused_both_ways() {
        let expected = RecordError::EmptyField {
            field: RecordField::IncarnationId,
        };
        let bytes = raw(2, &[b"t", b"", b""], 0, b"p");
        assert_refused_both_ways(&record_with("t", Some(""), b""), &bytes, expected);
    }

    #[test]
    fn a_topic_over_the_limit_is_refused_both_ways() {
        let topic = "t".repeat(TOPIC_NAME_BYTES_MAX + 1);
        let expected = RecordError::FieldTooLong {
            field: RecordField::Topic,
            len: TOPIC_NAME_BYTES_MAX + 1,
            max: TOPIC_NAME_BYTES_MAX,
        };
        let bytes = raw(1, &[topic.as_bytes(), b""], 0, b"p");
        assert_refused_both_ways(&record_with(&topic, None, b""), &bytes, expected);
    }

    #[test]
    fn a_topic_at_the_limit_round_trips() {
        let record = record_with(&"t".repeat(TOPIC_NAME_BYTES_MAX), None, b"");
        assert_eq!(WalRecord::decode(&record.encode().unwrap()), Ok(record));
    }

    #[test]
    fn an_incarnation_id_over_the_limit_is_refused_both_ways() {
        let id = "a".repeat(INCARNATION_ID_BYTES_MAX + 1);
        let expected = RecordError::FieldTooLong {
            field: RecordField::IncarnationId,
            len: INCARNATION_ID_BYTES_MAX + 1,
            max: INCARNATION_ID_BYTES_MAX,
        };
        let bytes = raw(2, &[b"t", id.as_bytes(), b""], 0, b"p");
        assert_refused_both_ways(&record_with("t", Some(&id), b""), &bytes, expected);
    }

    #[test]
    fn an_incarnation_id_of_any_shape_within_the_limit_decodes() {
        let id = "not-hex/but still an id, 40 bytes long!!";
        let record = record_with("t", Some(id), b"");
        assert_eq!(WalRecord::decode(&record.encode().unwrap()), Ok(record));
    }

    #[test]
    fn a_key_over_the_limit_is_refused_both_ways() {
        let key = vec![7u8; KEY_BYTES_MAX + 1];
        let expected = RecordError::FieldTooLong {
            field: RecordField::Key,
            len: KEY_BYTES_MAX + 1,
            max: KEY_BYTES_MAX,
        };
        let bytes = raw(1, &[b"t", &key], 0, b"p");
        assert_refused_both_ways(&record_with("t", None, &key), &bytes, expected);
    }

    #[test]
    fn a_record_over_sixteen_mib_is_refused_both_ways() {
        let mut record = record_with("t", None, b"");
        record.payload = vec![0; RECORD_BYTES_MAX];
        let len = record.encoded_len();
        let expected = RecordError::RecordTooLarge {
            len,
            max: RECORD_BYTES_MAX,
        };
        let bytes = raw(1, &[b"t", b""], 0, &record.payload);
        assert_refused_both_ways(&record, &bytes, expected);
    }

    #[test]
    fn a_record_of_exactly_sixteen_mib_round_trips() {
        let mut record = record_with("t", None, b"");
        record.payload = vec![1; RECORD_BYTES_MAX - RECORD_FORMAT_1_FIXED_BYTES - 1];
        let bytes = record.encode().unwrap();
        assert_eq!(bytes.len(), RECORD_BYTES_MAX);
        assert_eq!(WalRecord::decode(&bytes), Ok(record));
    }

    #[test]
    fn encode_into_fills_exactly_the_given_space() {
        let record = golden_format_2_record();
        let mut staged = vec![0xAA; record.encoded_len() + 2];
        let len = record.encoded_len();
        record.encode_into(&mut staged[1..1 + len]).unwrap();
        assert_eq!(staged[0], 0xAA);
        assert_eq!(&staged[1..1 + len], GOLDEN_FORMAT_2);
        assert_eq!(staged[1 + len], 0xAA);
    }

    #[test]
    fn encode_into_leaves_the_space_untouched_on_error() {
        let record = record_with("", None, b"");
        let mut staged = vec![0xAA; record.encoded_len()];
        assert!(record.encode_into(&mut staged).is_err());
        assert!(staged.iter().all(|&byte| byte == 0xAA));
    }

    #[test]
    #[should_panic(expected = "WAL record staged into 3 bytes but encodes to")]
    fn encode_into_a_wrongly_sized_space_panics() {
        let mut staged = [0u8; 3];
        let _ = golden_format_1_record().encode_into(&mut staged);
    }

    #[test]
    fn errors_name_the_field_and_the_numbers() {
        let error = WalRecordRef::decode(&GOLDEN_FORMAT_1[..19]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "WAL record truncated in the target partition: 4 bytes needed at offset 17, 2 left"
        );
        let error = WalRecordRef::decode(&[0x09]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "WAL record has unknown format 0x09; this binary reads formats 1 to 3"
        );
    }

    fn arb_text(max: usize) -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Za-z0-9._-]{1,40}",
            // Multi-byte characters, so byte and char lengths differ.
            "\\PC{1,12}",
        ]
        .prop_filter("within the byte limit", move |text| text.len() <= max)
    }

    fn arb_record() -> impl Strategy<Value = WalRecord> {
        (
            arb_text(TOPIC_NAME_BYTES_MAX),
            proptest::option::of(arb_text(INCARNATION_ID_BYTES_MAX)),
            proptest::collection::vec(any::<u8>(), 0..48),
            prop_oneof![
                Just(Vec::new()),
                proptest::collection::vec(any::<u8>(), 1..=IDEMPOTENCY_KEY_BYTES_MAX)
            ],
            any::<u32>(),
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(
                |(
                    topic,
                    incarnation_id,
                    key,
                    idempotency_key,
                    partition,
                    created_at_unix_ms,
                    payload,
                )| {
                    WalRecord {
                        topic,
                        incarnation_id,
                        key,
                        idempotency_key,
                        partition,
                        created_at_unix_ms,
                        payload,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn every_valid_record_round_trips(record in arb_record()) {
            let bytes = record.encode().unwrap();
            prop_assert_eq!(bytes.len(), record.encoded_len());
            prop_assert_eq!(bytes[0], record.format().byte());
            prop_assert_eq!(WalRecord::decode(&bytes), Ok(record));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = WalRecordRef::decode(&bytes);
        }

        #[test]
        fn arbitrary_bytes_after_a_known_format_never_panic(
            format in 1u8..=2,
            rest in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let mut bytes = vec![format];
            bytes.extend_from_slice(&rest);
            let _ = WalRecordRef::decode(&bytes);
        }

        #[test]
        fn every_strict_prefix_is_refused(record in arb_record()) {
            let bytes = record.encode().unwrap();
            for cut in 0..bytes.len() {
                prop_assert!(WalRecordRef::decode(&bytes[..cut]).is_err(), "prefix {} decoded", cut);
            }
        }

        #[test]
        fn an_appended_byte_is_refused(record in arb_record(), extra in any::<u8>()) {
            let mut bytes = record.encode().unwrap();
            bytes.push(extra);
            prop_assert_eq!(
                WalRecordRef::decode(&bytes),
                Err(RecordError::TrailingBytes { count: 1 })
            );
        }

        /// Bytes cut out of or spliced into a record (a shifted length, a
        /// lost field) never panic, and whatever still decodes is canonical.
        #[test]
        fn a_spliced_record_never_panics_and_decodes_only_canonically(
            record in arb_record(),
            at in any::<prop::sample::Index>(),
            cut in 0usize..16,
            inserted in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let mut bytes = record.encode().unwrap();
            let at = at.index(bytes.len());
            let end = (at + cut).min(bytes.len());
            bytes.splice(at..end, inserted);
            if let Ok(decoded) = WalRecordRef::decode(&bytes) {
                prop_assert_eq!(decoded.encode().unwrap(), bytes);
            }
        }

        /// A decoder that accepts a corrupted record must have read it
        /// exactly: encoding what it returned gives the same bytes back.
        #[test]
        fn a_corrupted_record_that_decodes_re_encodes_to_the_same_bytes(
            record in arb_record(),
            position in any::<prop::sample::Index>(),
            value in any::<u8>(),
        ) {
            let mut bytes = record.encode().unwrap();
            let at = position.index(bytes.len());
            bytes[at] = value;
            if let Ok(decoded) = WalRecordRef::decode(&bytes) {
                prop_assert_eq!(decoded.encode().unwrap(), bytes);
            }
        }
    }
}
