//! Decoding a batch produce body: `Content-Encoding`, the strict JSON
//! shape `{"messages":[...]}`, and each message's payload and key, with
//! every limit checked as the body is read rather than after.

use std::io::Read;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::accept::{
    AcceptError, BATCH_BODY_BYTES_MAX, BATCH_MESSAGES_MAX, ProduceMessage, check_format,
};

const TOO_MANY_MARKER: &str = "too many messages";

/// Why a batch body was refused before any message was checked against the
/// topic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BatchBodyError {
    /// A `Content-Encoding` other than zstd or gzip (`415`).
    #[error("unsupported content encoding {0:?}: send zstd, gzip or none")]
    UnsupportedEncoding(String),
    /// Over 16 MiB as sent or decoded (`413`).
    #[error("request body too large")]
    TooLarge,
    /// Not the JSON the route takes, or undecodable (`400`).
    #[error("invalid json: {0}")]
    InvalidJson(String),
    /// More than 1,000 messages (`400`).
    #[error("too many messages: more than {BATCH_MESSAGES_MAX}")]
    TooMany,
    /// No messages (`400`).
    #[error("messages required")]
    Empty,
    /// One message is malformed; nothing is stored.
    #[error("message {index}: {error}")]
    Message {
        /// Zero-based index.
        index: usize,
        /// Why.
        error: AcceptError,
    },
    /// A message's payload or key encoding is wrong (`400`).
    #[error("message {index}: {reason}")]
    Encoding {
        /// Zero-based index.
        index: usize,
        /// Why, e.g. `invalid payload: a base64 payload must be a JSON string`.
        reason: String,
    },
}

/// Refuses a `Content-Encoding` this route cannot undo, before the body is
/// read.
///
/// # Errors
/// [`BatchBodyError::UnsupportedEncoding`].
pub fn check_encoding(encoding: &str) -> Result<(), BatchBodyError> {
    match encoding.trim().to_ascii_lowercase().as_str() {
        "" | "identity" | "zstd" | "gzip" => Ok(()),
        other => Err(BatchBodyError::UnsupportedEncoding(other.to_owned())),
    }
}

/// Undoes `Content-Encoding` (`None`, `identity`, `zstd`, `gzip`), refusing
/// a decoded body over [`BATCH_BODY_BYTES_MAX`] as soon as it grows past it,
/// so a compression bomb costs at most that much memory.
///
/// # Errors
/// [`BatchBodyError::UnsupportedEncoding`], [`BatchBodyError::TooLarge`],
/// [`BatchBodyError::InvalidJson`] when the body does not decompress.
pub fn decode_content(
    encoding: Option<&str>,
    body: bytes::Bytes,
) -> Result<bytes::Bytes, BatchBodyError> {
    if body.len() > BATCH_BODY_BYTES_MAX {
        return Err(BatchBodyError::TooLarge);
    }
    let encoding = encoding.map(|e| e.trim().to_ascii_lowercase());
    match encoding.as_deref() {
        None | Some("") | Some("identity") => Ok(body),
        Some("zstd") => {
            let decoder = zstd::stream::read::Decoder::new(&body[..])
                .map_err(|error| BatchBodyError::InvalidJson(format!("zstd: {error}")))?;
            read_capped(decoder, "zstd")
        }
        Some("gzip") => read_capped(flate2::read::MultiGzDecoder::new(&body[..]), "gzip"),
        Some(other) => Err(BatchBodyError::UnsupportedEncoding(other.to_owned())),
    }
}

/// Bytes a decoder is asked for at a time.
const DECODE_CHUNK_BYTES: usize = 64 * 1024;

/// Reads `decoder` to its end, refusing it at the first chunk that would
/// take the decoded body past [`BATCH_BODY_BYTES_MAX`]. The buffer grows
/// by doubling but never past the limit, so a bomb costs at most the
/// limit plus one chunk.
fn read_capped(mut decoder: impl Read, name: &str) -> Result<bytes::Bytes, BatchBodyError> {
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; DECODE_CHUNK_BYTES];
    loop {
        let read = match decoder.read(&mut chunk) {
            Ok(0) => return Ok(out.into()),
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(BatchBodyError::InvalidJson(format!("{name}: {error}"))),
        };
        let wanted = out.len() + read;
        if wanted > BATCH_BODY_BYTES_MAX {
            return Err(BatchBodyError::TooLarge);
        }
        if wanted > out.capacity() {
            let grown = out
                .capacity()
                .saturating_mul(2)
                .clamp(wanted, BATCH_BODY_BYTES_MAX);
            out.reserve_exact(grown - out.len());
        }
        out.extend_from_slice(&chunk[..read]);
    }
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WireBody<'a> {
    #[serde(default, borrow, deserialize_with = "capped_messages")]
    messages: Vec<WireMessage<'a>>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WireMessage<'a> {
    #[serde(default, borrow)]
    payload: Option<&'a RawValue>,
    #[serde(default)]
    payload_encoding: Option<String>,
    #[serde(default, borrow)]
    key: Option<&'a RawValue>,
    #[serde(default)]
    key_encoding: Option<String>,
    #[serde(default)]
    partition: Option<i64>,
    #[serde(default)]
    idempotency_key: Option<String>,
}

fn capped_messages<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<WireMessage<'de>>, D::Error> {
    struct Capped;
    impl<'de> Visitor<'de> for Capped {
        type Value = Vec<WireMessage<'de>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list of messages")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut messages = Vec::new();
            while let Some(message) = seq.next_element()? {
                // Refused at the first element over the cap, before the
                // rest of the list is decoded.
                if messages.len() == BATCH_MESSAGES_MAX {
                    return Err(de::Error::custom(TOO_MANY_MARKER));
                }
                messages.push(message);
            }
            Ok(messages)
        }
    }
    deserializer.deserialize_seq(Capped)
}

/// Decodes a (decompressed) batch body into messages, checking each one's
/// format (encodings, empty payload, size, negative partition) in order.
/// A payload taken as written is a slice of `body`, not a copy.
///
/// # Errors
/// The first [`BatchBodyError`].
pub fn parse_batch(body: &bytes::Bytes) -> Result<Vec<ProduceMessage>, BatchBodyError> {
    let text = std::str::from_utf8(body)
        .map_err(|error| BatchBodyError::InvalidJson(error.to_string()))?;
    let wire: WireBody<'_> = serde_json::from_str(text).map_err(|error| {
        if error.to_string().starts_with(TOO_MANY_MARKER) {
            BatchBodyError::TooMany
        } else {
            BatchBodyError::InvalidJson(error.to_string())
        }
    })?;
    if wire.messages.is_empty() {
        return Err(BatchBodyError::Empty);
    }
    wire.messages
        .into_iter()
        .enumerate()
        .map(|(index, message)| decode_message(body, index, message))
        .collect()
}

fn decode_message(
    body: &bytes::Bytes,
    index: usize,
    wire: WireMessage<'_>,
) -> Result<ProduceMessage, BatchBodyError> {
    let encoding = |reason: String| BatchBodyError::Encoding { index, reason };
    let payload = match wire.payload {
        None => bytes::Bytes::new(),
        Some(raw) => {
            decode_payload(body, raw, wire.payload_encoding.as_deref()).map_err(encoding)?
        }
    };
    let key = match wire.key {
        None => Vec::new(),
        Some(raw) => decode_key(raw, wire.key_encoding.as_deref()).map_err(encoding)?,
    };
    let partition = match wire.partition {
        None => None,
        Some(p) if p < 0 => {
            return Err(encoding(format!("invalid partition: {p} is negative")));
        }
        Some(p) => Some(u32::try_from(p).unwrap_or(u32::MAX)),
    };
    let idempotency_key = match wire.idempotency_key {
        None => Vec::new(),
        Some(key) if key.is_empty() => {
            return Err(BatchBodyError::Message {
                index,
                error: AcceptError::IdempotencyKeyInvalid,
            });
        }
        Some(key) => key.into_bytes(),
    };
    let message = ProduceMessage {
        key,
        partition,
        payload,
        idempotency_key,
    };
    check_format(&message).map_err(|error| BatchBodyError::Message { index, error })?;
    Ok(message)
}

/// `raw`'s payload; `raw` was read from `body`, whose slice it is when
/// taken as written.
fn decode_payload(
    body: &bytes::Bytes,
    raw: &RawValue,
    encoding: Option<&str>,
) -> Result<bytes::Bytes, String> {
    match encoding {
        // Any JSON value, stored exactly as written (a string keeps its
        // quotes).
        None | Some("") => Ok(body.slice_ref(raw.get().as_bytes())),
        Some("base64") => {
            let text: String = serde_json::from_str(raw.get()).map_err(|_| {
                "invalid payload: a base64 payload must be a JSON string".to_owned()
            })?;
            BASE64
                .decode(text)
                .map(bytes::Bytes::from)
                .map_err(|error| format!("invalid payload: bad base64: {error}"))
        }
        Some(other) => Err(format!(
            "invalid payload: unknown payload_encoding {other:?}"
        )),
    }
}

fn decode_key(raw: &RawValue, encoding: Option<&str>) -> Result<Vec<u8>, String> {
    let text: String = serde_json::from_str(raw.get())
        .map_err(|_| "invalid key: a key must be a JSON string".to_owned())?;
    match encoding {
        None | Some("") => Ok(text.into_bytes()),
        Some("base64") => BASE64
            .decode(text)
            .map_err(|error| format!("invalid key: bad base64: {error}")),
        Some(other) => Err(format!("invalid key: unknown key_encoding {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn parse(body: &[u8]) -> Result<Vec<ProduceMessage>, BatchBodyError> {
        parse_batch(&bytes::Bytes::copy_from_slice(body))
    }

    /// One message as a client sends it: base64 payload and key, so any
    /// bytes fit, and maybe a pinned partition.
    fn wire_message(payload: &[u8], key: &[u8], partition: Option<u32>) -> String {
        let partition = partition.map_or(String::new(), |p| format!(r#","partition":{p}"#));
        format!(
            r#"{{"payload":"{}","payload_encoding":"base64","key":"{}","key_encoding":"base64"{partition}}}"#,
            BASE64.encode(payload),
            BASE64.encode(key)
        )
    }

    fn arb_messages() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>, Option<u32>)>> {
        prop::collection::vec(
            (
                prop::collection::vec(any::<u8>(), 1..48),
                prop::collection::vec(any::<u8>(), 0..16),
                prop::option::of(any::<u32>()),
            ),
            1..6,
        )
    }

    fn body_of(messages: &[(Vec<u8>, Vec<u8>, Option<u32>)]) -> String {
        let list: Vec<String> = messages
            .iter()
            .map(|(payload, key, partition)| wire_message(payload, key, *partition))
            .collect();
        format!(r#"{{"messages":[{}]}}"#, list.join(","))
    }

    proptest! {
        #![proptest_config(crate::testing::seeded_proptest_config())]

        #[test]
        fn arbitrary_bytes_parse_or_are_refused_without_panicking(
            body in prop::collection::vec(any::<u8>(), 0..256),
        ) {
            let _ = parse(&body);
        }

        /// Text close to the route's shape reaches the JSON walk, the
        /// message cap and each field's decoding, not only the UTF-8 check.
        #[test]
        fn json_shaped_text_parses_or_is_refused_without_panicking(
            inside in r#"[\[\]{}":,0-9a-z_= -]{0,96}"#,
        ) {
            let _ = parse(format!(r#"{{"messages":[{inside}]}}"#).as_bytes());
            let _ = parse(format!(r#"{{"messages":[{{"payload":{inside}}}]}}"#).as_bytes());
        }

        #[test]
        fn every_valid_batch_round_trips(messages in arb_messages()) {
            let parsed = parse(body_of(&messages).as_bytes()).unwrap();
            prop_assert_eq!(parsed.len(), messages.len());
            for (message, (payload, key, partition)) in parsed.iter().zip(&messages) {
                prop_assert_eq!(&message.payload[..], payload.as_slice());
                prop_assert_eq!(&message.key, key);
                prop_assert_eq!(message.partition, *partition);
            }
        }

        #[test]
        fn a_damaged_valid_batch_never_panics(
            messages in arb_messages(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<prop::sample::Index>(),
        ) {
            let body = body_of(&messages).into_bytes();
            let mut changed = body.clone();
            changed[at.index(body.len())] = byte;
            let _ = parse(&changed);
            prop_assert!(parse(&body[..cut.index(body.len())]).is_err());
        }
    }

    #[test]
    fn raw_json_payload_is_stored_verbatim_with_its_whitespace() {
        let messages = parse(br#"{"messages":[{"payload":{"id": "o2",  "amount": 7}}]}"#).unwrap();
        assert_eq!(&messages[0].payload[..], br#"{"id": "o2",  "amount": 7}"#);
    }

    #[test]
    fn a_payload_taken_as_written_is_a_slice_of_the_body_not_a_copy() {
        let body = bytes::Bytes::from_static(br#"{"messages":[{"payload":{"id":1}}]}"#);
        let messages = parse_batch(&body).unwrap();
        let payload = &messages[0].payload;
        assert_eq!(&payload[..], br#"{"id":1}"#);
        let start = payload.as_ptr() as usize - body.as_ptr() as usize;
        assert_eq!(&body[start..start + payload.len()], &payload[..]);
        assert!(start + payload.len() <= body.len());
    }

    #[test]
    fn json_string_payload_keeps_its_quotes() {
        let messages = parse(br#"{"messages":[{"payload":"hi"}]}"#).unwrap();
        assert_eq!(&messages[0].payload[..], br#""hi""#);
    }

    #[test]
    fn base64_payload_and_key_are_decoded() {
        let body = br#"{"messages":[{"payload":"AP8=","payload_encoding":"base64","key":"gw==","key_encoding":"base64","partition":2}]}"#;
        let messages = parse(body).unwrap();
        assert_eq!(&messages[0].payload[..], &[0x00, 0xff]);
        assert_eq!(messages[0].key, vec![0x83]);
        assert_eq!(messages[0].partition, Some(2));
    }

    #[test]
    fn base64_payload_that_is_not_a_string_names_the_message() {
        let body = br#"{"messages":[{"payload":1},{"payload":5,"payload_encoding":"base64"}]}"#;
        let error = parse(body).unwrap_err();
        assert_eq!(
            error.to_string(),
            "message 1: invalid payload: a base64 payload must be a JSON string"
        );
    }

    #[test]
    fn missing_payload_is_message_required() {
        let error = parse(br#"{"messages":[{"key":"k"}]}"#).unwrap_err();
        assert_eq!(error.to_string(), "message 0: message required");
    }

    #[test]
    fn empty_list_is_messages_required() {
        assert_eq!(
            parse(br#"{"messages":[]}"#).unwrap_err().to_string(),
            "messages required"
        );
    }

    #[test]
    fn unknown_field_is_invalid_json() {
        let error = parse(br#"{"messages":[{"payload":1,"extra":2}]}"#).unwrap_err();
        assert!(error.to_string().starts_with("invalid json: "), "{error}");
    }

    #[test]
    fn second_json_value_after_the_body_is_invalid_json() {
        let error = parse(br#"{"messages":[{"payload":1}]} {}"#).unwrap_err();
        assert!(matches!(error, BatchBodyError::InvalidJson(_)));
    }

    #[test]
    fn more_than_the_cap_is_refused_as_too_many() {
        let one = r#"{"payload":1}"#;
        let body = format!(
            r#"{{"messages":[{}]}}"#,
            vec![one; BATCH_MESSAGES_MAX + 1].join(",")
        );
        let error = parse(body.as_bytes()).unwrap_err();
        assert_eq!(error.to_string(), "too many messages: more than 1000");
    }

    #[test]
    fn negative_partition_is_refused_per_message() {
        let error = parse(br#"{"messages":[{"payload":1,"partition":-1}]}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            "message 0: invalid partition: -1 is negative"
        );
    }

    #[test]
    fn decoded_payload_over_a_mebibyte_is_too_large() {
        let big = BASE64.encode(vec![7u8; super::super::MESSAGE_BYTES_MAX + 1]);
        let body = format!(r#"{{"messages":[{{"payload":"{big}","payload_encoding":"base64"}}]}}"#);
        let error = parse(body.as_bytes()).unwrap_err();
        assert_eq!(error.to_string(), "message 0: message too large");
    }

    #[test]
    fn zstd_body_is_decoded() {
        let plain = br#"{"messages":[{"payload":1}]}"#;
        let packed = zstd::encode_all(&plain[..], 1).unwrap();
        let body = decode_content(Some("zstd"), packed.into()).unwrap();
        assert_eq!(&body[..], plain);
    }

    #[test]
    fn gzip_body_is_decoded() {
        use std::io::Write;
        let plain = br#"{"messages":[{"payload":1}]}"#;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(plain).unwrap();
        let body = decode_content(Some("gzip"), encoder.finish().unwrap().into()).unwrap();
        assert_eq!(&body[..], plain);
    }

    #[test]
    fn compression_bomb_stops_at_the_decoded_limit() {
        let zeros = vec![b' '; BATCH_BODY_BYTES_MAX + 1];
        let packed = zstd::encode_all(&zeros[..], 3).unwrap();
        assert!(matches!(
            decode_content(Some("zstd"), packed.into()),
            Err(BatchBodyError::TooLarge)
        ));
    }

    #[test]
    fn a_body_of_exactly_the_limit_decodes_within_the_limit() {
        let spaces = vec![b' '; BATCH_BODY_BYTES_MAX];
        let packed = zstd::encode_all(&spaces[..], 3).unwrap();
        let body = decode_content(Some("zstd"), packed.into()).unwrap();
        assert_eq!(body.len(), BATCH_BODY_BYTES_MAX);
    }

    #[test]
    fn other_encodings_are_unsupported() {
        assert!(matches!(
            decode_content(Some("br"), bytes::Bytes::from_static(b"x")),
            Err(BatchBodyError::UnsupportedEncoding(_))
        ));
    }
}
