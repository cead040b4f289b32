//! The binary codec every cluster message uses: a [`Writer`] and a [`Reader`]
//! for big-endian integers and `u32`-length-prefixed fields, the
//! [`Encode`]/[`Decode`] traits, and [`Message`], which adds a version byte.
//!
//! A decoder never panics and never allocates more than the input holds: a
//! length prefix is checked against the bytes that remain before anything is
//! sliced or copied. Decoding a whole value refuses trailing bytes.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Why bytes could not be decoded. Each variant names what was wrong so the
/// peer's error answer says it plainly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended inside a fixed-size field.
    #[error("input ends inside {field}: {needed} bytes needed, {remaining} left")]
    Truncated {
        /// Name of the field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A length prefix claims more bytes than the input holds.
    #[error("{field} claims {claimed} bytes but only {remaining} remain")]
    LengthExceedsInput {
        /// Name of the field being read.
        field: &'static str,
        /// Length the prefix claims.
        claimed: u64,
        /// Bytes that were left.
        remaining: usize,
    },
    /// Bytes remain after the last field of the value.
    #[error("{count} trailing bytes after the last field")]
    TrailingBytes {
        /// How many bytes were left over.
        count: usize,
    },
    /// A string field is not UTF-8.
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 {
        /// Name of the field being read.
        field: &'static str,
    },
    /// A version byte newer (or older) than this build understands.
    #[error("{what} version {found} is not supported (this build speaks version {supported})")]
    UnsupportedVersion {
        /// What carried the version.
        what: &'static str,
        /// Version found in the input.
        found: u8,
        /// Version this build speaks.
        supported: u8,
    },
    /// A field holds a value outside its domain (an unknown enum tag).
    #[error("{field} has the invalid value {value}")]
    InvalidValue {
        /// Name of the field being read.
        field: &'static str,
        /// The value found.
        value: u64,
    },
}

/// Builds an encoded value. Integers are big-endian; byte and string fields
/// carry a `u32` big-endian length prefix.
#[derive(Debug, Default)]
pub struct Writer {
    buf: BytesMut,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty writer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            buf: BytesMut::with_capacity(capacity),
        }
    }

    /// Appends one byte.
    pub fn u8(&mut self, value: u8) {
        self.buf.put_u8(value);
    }

    /// Appends a `u16`.
    pub fn u16(&mut self, value: u16) {
        self.buf.put_u16(value);
    }

    /// Appends a `u32`.
    pub fn u32(&mut self, value: u32) {
        self.buf.put_u32(value);
    }

    /// Appends a `u64`.
    pub fn u64(&mut self, value: u64) {
        self.buf.put_u64(value);
    }

    /// Appends an `i32`.
    pub fn i32(&mut self, value: i32) {
        self.buf.put_i32(value);
    }

    /// Appends an `i64`.
    pub fn i64(&mut self, value: i64) {
        self.buf.put_i64(value);
    }

    /// Appends a length-prefixed byte field.
    ///
    /// # Panics
    /// If `value` is 4 GiB or longer: no cluster message can be, since frames
    /// are limited to 16 MiB, so such a call is a programmer error.
    pub fn bytes(&mut self, value: &[u8]) {
        let len = u32::try_from(value.len()).expect("a field shorter than 4 GiB");
        self.buf.put_u32(len);
        self.buf.put_slice(value);
    }

    /// Appends a length-prefixed UTF-8 string field.
    ///
    /// # Panics
    /// As [`Writer::bytes`].
    pub fn str(&mut self, value: &str) {
        self.bytes(value.as_bytes());
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The encoded bytes.
    pub fn finish(self) -> Bytes {
        self.buf.freeze()
    }
}

/// Reads fields from encoded bytes without copying byte fields.
#[derive(Debug, Clone)]
pub struct Reader {
    buf: Bytes,
}

impl Reader {
    /// A reader over `buf`.
    pub fn new(buf: Bytes) -> Self {
        Self { buf }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn need(&self, field: &'static str, needed: usize) -> Result<(), DecodeError> {
        if self.buf.len() < needed {
            return Err(DecodeError::Truncated {
                field,
                needed,
                remaining: self.buf.len(),
            });
        }
        Ok(())
    }

    /// Reads one byte.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if the input is empty.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        self.need(field, 1)?;
        Ok(self.buf.get_u8())
    }

    /// Reads a `u16`.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if fewer than 2 bytes remain.
    pub fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        self.need(field, 2)?;
        Ok(self.buf.get_u16())
    }

    /// Reads a `u32`.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if fewer than 4 bytes remain.
    pub fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.need(field, 4)?;
        Ok(self.buf.get_u32())
    }

    /// Reads a `u64`.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if fewer than 8 bytes remain.
    pub fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        self.need(field, 8)?;
        Ok(self.buf.get_u64())
    }

    /// Reads an `i32`.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if fewer than 4 bytes remain.
    pub fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        self.need(field, 4)?;
        Ok(self.buf.get_i32())
    }

    /// Reads an `i64`.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if fewer than 8 bytes remain.
    pub fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        self.need(field, 8)?;
        Ok(self.buf.get_i64())
    }

    /// Reads a fixed number of raw bytes (no length prefix).
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if fewer than `len` bytes remain.
    pub fn fixed(&mut self, field: &'static str, len: usize) -> Result<Bytes, DecodeError> {
        self.need(field, len)?;
        Ok(self.buf.split_to(len))
    }

    /// Reads a length-prefixed byte field, sharing the input's memory.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] inside the prefix, or
    /// [`DecodeError::LengthExceedsInput`] if the prefix claims more than remains.
    pub fn bytes(&mut self, field: &'static str) -> Result<Bytes, DecodeError> {
        let claimed = self.u32(field)?;
        let len = usize::try_from(claimed).unwrap_or(usize::MAX);
        if len > self.buf.len() {
            return Err(DecodeError::LengthExceedsInput {
                field,
                claimed: u64::from(claimed),
                remaining: self.buf.len(),
            });
        }
        Ok(self.buf.split_to(len))
    }

    /// Reads a length-prefixed UTF-8 string field.
    ///
    /// # Errors
    /// As [`Reader::bytes`], and [`DecodeError::InvalidUtf8`].
    pub fn str(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let raw = self.bytes(field)?;
        String::from_utf8(raw.to_vec()).map_err(|_| DecodeError::InvalidUtf8 { field })
    }

    /// Ends decoding: every byte must have been read.
    ///
    /// # Errors
    /// [`DecodeError::TrailingBytes`] if any remain.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                count: self.buf.len(),
            })
        }
    }
}

/// A value with a binary encoding.
pub trait Encode {
    /// Appends the value's fields to `writer`.
    fn encode(&self, writer: &mut Writer);

    /// Bytes the encoding is expected to take, so a large value's buffer
    /// is sized once instead of grown (and copied) as it fills. Only a
    /// hint: 0 (the default) lets the buffer grow.
    fn encoded_len_hint(&self) -> usize {
        0
    }
}

/// A value that can be read back from its binary encoding.
pub trait Decode: Sized {
    /// Reads the value's fields from `reader`, leaving any bytes after them.
    ///
    /// # Errors
    /// A [`DecodeError`] naming the first field that could not be read.
    fn decode(reader: &mut Reader) -> Result<Self, DecodeError>;
}

/// A cluster message: a value with a version byte in front, so that a newer
/// peer's shape is refused with a clear error instead of being misread.
pub trait Message: Encode + Decode {
    /// Name used in error texts.
    const NAME: &'static str;
    /// Version of the encoding this build writes and reads.
    const VERSION: u8;
}

/// Encodes `value` alone.
pub fn encode<T: Encode + ?Sized>(value: &T) -> Bytes {
    let mut writer = Writer::new();
    value.encode(&mut writer);
    writer.finish()
}

/// Decodes exactly one `T` from `bytes`.
///
/// # Errors
/// The value's own [`DecodeError`], or [`DecodeError::TrailingBytes`].
pub fn decode<T: Decode>(bytes: Bytes) -> Result<T, DecodeError> {
    let mut reader = Reader::new(bytes);
    let value = T::decode(&mut reader)?;
    reader.finish()?;
    Ok(value)
}

/// Encodes a message: its version byte, then its fields.
pub fn encode_message<M: Message>(message: &M) -> Bytes {
    let mut writer = Writer::with_capacity(1 + message.encoded_len_hint());
    writer.u8(M::VERSION);
    message.encode(&mut writer);
    writer.finish()
}

/// Decodes exactly one message of type `M`, checking its version byte.
///
/// # Errors
/// [`DecodeError::UnsupportedVersion`], the message's own errors, or
/// [`DecodeError::TrailingBytes`].
pub fn decode_message<M: Message>(bytes: Bytes) -> Result<M, DecodeError> {
    let mut reader = Reader::new(bytes);
    let found = reader.u8("message version")?;
    if found != M::VERSION {
        return Err(DecodeError::UnsupportedVersion {
            what: M::NAME,
            found,
            supported: M::VERSION,
        });
    }
    let message = M::decode(&mut reader)?;
    reader.finish()?;
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A message using every field kind, as a plane's message would.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Sample {
        flag: u8,
        small: u16,
        count: u32,
        offset: u64,
        max: i32,
        delta: i64,
        topic: String,
        payload: Bytes,
    }

    impl Encode for Sample {
        fn encode(&self, writer: &mut Writer) {
            writer.u8(self.flag);
            writer.u16(self.small);
            writer.u32(self.count);
            writer.u64(self.offset);
            writer.i32(self.max);
            writer.i64(self.delta);
            writer.str(&self.topic);
            writer.bytes(&self.payload);
        }
    }

    impl Decode for Sample {
        fn decode(reader: &mut Reader) -> Result<Self, DecodeError> {
            Ok(Self {
                flag: reader.u8("flag")?,
                small: reader.u16("small")?,
                count: reader.u32("count")?,
                offset: reader.u64("offset")?,
                max: reader.i32("max")?,
                delta: reader.i64("delta")?,
                topic: reader.str("topic")?,
                payload: reader.bytes("payload")?,
            })
        }
    }

    impl Message for Sample {
        const NAME: &'static str = "Sample";
        const VERSION: u8 = 3;
    }

    fn sample_strategy() -> impl Strategy<Value = Sample> {
        (
            any::<u8>(),
            any::<u16>(),
            any::<u32>(),
            any::<u64>(),
            any::<i32>(),
            any::<i64>(),
            ".{0,32}",
            proptest::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(
                |(flag, small, count, offset, max, delta, topic, payload)| Sample {
                    flag,
                    small,
                    count,
                    offset,
                    max,
                    delta,
                    topic,
                    payload: Bytes::from(payload),
                },
            )
    }

    proptest! {
        #[test]
        fn message_round_trips(sample in sample_strategy()) {
            let encoded = encode_message(&sample);
            prop_assert_eq!(decode_message::<Sample>(encoded).expect("decodes"), sample.clone());
            prop_assert_eq!(decode::<Sample>(encode(&sample)).expect("decodes"), sample);
        }

        #[test]
        fn message_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode_message::<Sample>(Bytes::from(bytes.clone()));
            let _ = decode::<Sample>(Bytes::from(bytes));
        }

        #[test]
        fn truncated_message_is_an_error_not_a_panic(sample in sample_strategy(), cut in 0_usize..200) {
            let encoded = encode_message(&sample);
            let cut = cut % encoded.len();
            prop_assert!(decode_message::<Sample>(encoded.slice(..cut)).is_err());
        }
    }

    #[test]
    fn trailing_bytes_are_refused_and_counted() {
        let sample = Sample {
            flag: 1,
            small: 2,
            count: 3,
            offset: 4,
            max: -5,
            delta: -6,
            topic: "t".into(),
            payload: Bytes::new(),
        };
        let mut bytes = encode_message(&sample).to_vec();
        bytes.extend([0, 0, 0]);
        assert_eq!(
            decode_message::<Sample>(Bytes::from(bytes)),
            Err(DecodeError::TrailingBytes { count: 3 })
        );
    }

    #[test]
    fn other_message_version_is_refused_by_name() {
        let sample = Sample {
            flag: 0,
            small: 0,
            count: 0,
            offset: 0,
            max: 0,
            delta: 0,
            topic: String::new(),
            payload: Bytes::new(),
        };
        let mut bytes = encode_message(&sample).to_vec();
        bytes[0] = 4;
        assert_eq!(
            decode_message::<Sample>(Bytes::from(bytes)),
            Err(DecodeError::UnsupportedVersion {
                what: "Sample",
                found: 4,
                supported: 3
            })
        );
    }

    #[test]
    fn length_prefix_beyond_the_input_is_refused_without_reading() {
        let mut reader = Reader::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 1, 2]));
        assert_eq!(
            reader.bytes("payload"),
            Err(DecodeError::LengthExceedsInput {
                field: "payload",
                claimed: u64::from(u32::MAX),
                remaining: 2
            })
        );
    }

    #[test]
    fn invalid_utf8_is_named() {
        let mut writer = Writer::new();
        writer.bytes(&[0xff, 0xfe]);
        assert_eq!(
            Reader::new(writer.finish()).str("topic"),
            Err(DecodeError::InvalidUtf8 { field: "topic" })
        );
    }
}
