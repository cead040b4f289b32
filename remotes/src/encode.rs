//! How one record is written into a batch produce body (wire contract
//! §4.2, and this broker's `produce/batch` route): the payload raw when it
//! is one whitespace-free JSON value, else base64; the key a JSON string
//! when it is UTF-8, else base64; no pinned partition (the target places
//! by key, or by the idempotency key when there is none); and an
//! `idempotency_key` derived from the link and the record's place in the
//! parent, so a resend is stored once by a target that keeps keys.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

/// What opens a batch body.
pub const BODY_OPEN: &[u8] = br#"{"messages":["#;
/// What closes a batch body.
pub const BODY_CLOSE: &[u8] = b"]}";

/// The longest link id or parent incarnation id an idempotency key takes.
pub const IDENTITY_PART_MAX: usize = 64;

/// A refused link identity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid link identity {0:?}: want 1 to 64 characters of A-Z a-z 0-9 _ -")]
pub struct InvalidIdentity(pub String);

/// Which link ships a record, and from which incarnation of the parent:
/// with the record's partition and offset, it names the record for good,
/// so the same record always gets the same idempotency key and another
/// link's (or a re-created parent's) never does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkIdentity {
    link: String,
    incarnation: String,
}

impl LinkIdentity {
    /// A link's identity: `link` is the link's id (the remote child's
    /// attach epoch, so a re-attach starts a new key space), `incarnation`
    /// the parent topic's incarnation id.
    ///
    /// # Errors
    /// [`InvalidIdentity`] for an empty or over-long part, or a character
    /// outside `A-Z a-z 0-9 _ -`.
    pub fn new(link: &str, incarnation: &str) -> Result<Self, InvalidIdentity> {
        for part in [link, incarnation] {
            let valid = (1..=IDENTITY_PART_MAX).contains(&part.len())
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !valid {
                return Err(InvalidIdentity(part.to_owned()));
            }
        }
        Ok(Self {
            link: link.to_owned(),
            incarnation: incarnation.to_owned(),
        })
    }

    /// The idempotency key of the record at `partition`/`offset` of the
    /// parent: `nr1.<link>.<incarnation>.<partition>.<offset>`, at most
    /// 165 visible ASCII characters (the target takes 1 to 256).
    pub fn idempotency_key(&self, partition: u32, offset: u64) -> String {
        format!(
            "nr1.{}.{}.{partition}.{offset}",
            self.link, self.incarnation
        )
    }
}

/// Whether `payload` can go raw: UTF-8 holding exactly one JSON value with
/// no whitespace outside its strings. The target stores a raw payload as
/// the text between the surrounding JSON's delimiters, so only such a
/// value is stored byte for byte by every target.
pub fn is_raw_json(payload: &[u8]) -> bool {
    let mut in_string = false;
    let mut escaped = false;
    for &byte in payload {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if byte == b'"' {
            in_string = true;
        } else if matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
            return false;
        }
    }
    !payload.is_empty() && serde_json::from_slice::<serde::de::IgnoredAny>(payload).is_ok()
}

/// Appends one message of a batch body for a record to `out`; without
/// an idempotency key (a target that does not take them) the field is
/// left out.
pub fn encode_message(
    out: &mut Vec<u8>,
    key: Option<&[u8]>,
    payload: &[u8],
    idempotency_key: Option<&str>,
) {
    out.extend_from_slice(br#"{"payload":"#);
    if is_raw_json(payload) {
        out.extend_from_slice(payload);
    } else {
        push_base64_string(out, payload);
        out.extend_from_slice(br#","payload_encoding":"base64""#);
    }
    if let Some(key) = key.filter(|key| !key.is_empty()) {
        out.extend_from_slice(br#","key":"#);
        match std::str::from_utf8(key) {
            Ok(text) => push_json_string(out, text),
            Err(_) => {
                push_base64_string(out, key);
                out.extend_from_slice(br#","key_encoding":"base64""#);
            }
        }
    }
    if let Some(idempotency_key) = idempotency_key {
        out.extend_from_slice(br#","idempotency_key":"#);
        push_json_string(out, idempotency_key);
    }
    out.push(b'}');
}

fn push_base64_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    let start = out.len();
    out.resize(
        start + base64::encoded_len(bytes.len(), true).unwrap_or(0),
        0,
    );
    let written = BASE64
        .encode_slice(bytes, &mut out[start..])
        .unwrap_or_default();
    out.truncate(start + written);
    out.push(b'"');
}

fn push_json_string(out: &mut Vec<u8>, text: &str) {
    // Serializing a `str` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// The smallest saving, in percent, for which a body is sent compressed.
pub const ZSTD_MIN_SAVING_PERCENT: usize = 10;

/// The zstd level: fast, since the link's CPU is the sender's.
const ZSTD_LEVEL: i32 = 1;

/// `body` compressed with zstd when that saves at least
/// [`ZSTD_MIN_SAVING_PERCENT`], else `None` (send it as it is).
pub fn compress(body: &[u8]) -> Option<Vec<u8>> {
    let packed = zstd::bulk::compress(body, ZSTD_LEVEL).ok()?;
    let saved_enough = packed.len().saturating_mul(100)
        <= body.len().saturating_mul(100 - ZSTD_MIN_SAVING_PERCENT);
    saved_enough.then_some(packed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(key: Option<&[u8]>, payload: &[u8]) -> serde_json::Value {
        let mut out = Vec::new();
        encode_message(&mut out, key, payload, Some("nr1.l.i.0.1"));
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn whitespace_free_json_goes_raw() {
        for payload in [
            &br#"{"a":1,"b":[true,null]}"#[..],
            br#""a string with spaces""#,
            br#"{"k":"v w"}"#,
            b"12.5e3",
            b"null",
            br#""esc\"aped \\""#,
        ] {
            assert!(is_raw_json(payload), "{}", String::from_utf8_lossy(payload));
        }
    }

    #[test]
    fn json_with_whitespace_outside_strings_or_not_json_goes_base64() {
        for payload in [
            &br#"{"a": 1}"#[..],
            b" 1",
            b"1\n",
            b"{\"a\":\t1}",
            b"hello",
            b"1 2",
            b"{\"a\":1}{}",
            b"",
            &[0xff, 0xfe],
            br#""unterminated"#,
        ] {
            assert!(
                !is_raw_json(payload),
                "{}",
                String::from_utf8_lossy(payload)
            );
        }
    }

    #[test]
    fn a_raw_payload_is_written_verbatim() {
        let mut out = Vec::new();
        encode_message(&mut out, None, br#"{"x":"a b"}"#, Some("nr1.l.i.0.1"));
        assert_eq!(
            out,
            br#"{"payload":{"x":"a b"},"idempotency_key":"nr1.l.i.0.1"}"#.to_vec()
        );
        out.clear();
        encode_message(&mut out, Some(b"k"), b"1", None);
        assert_eq!(out, br#"{"payload":1,"key":"k"}"#.to_vec());
    }

    #[test]
    fn binary_payload_and_key_go_base64() {
        let value = message(Some(&[0x83, 0x00]), &[0x00, 0xff]);
        assert_eq!(value["payload"], "AP8=");
        assert_eq!(value["payload_encoding"], "base64");
        assert_eq!(value["key"], "gwA=");
        assert_eq!(value["key_encoding"], "base64");
    }

    #[test]
    fn a_utf8_key_is_a_json_string_and_an_empty_key_is_left_out() {
        let value = message(Some("clé \"q\"".as_bytes()), b"1");
        assert_eq!(value["key"], "clé \"q\"");
        assert!(value.get("key_encoding").is_none());
        assert!(message(Some(b""), b"1").get("key").is_none());
        assert!(message(None, b"1").get("key").is_none());
    }

    #[test]
    fn idempotency_keys_name_the_record_and_fit_the_target() {
        let identity = LinkIdentity::new("link-7", "0123456789abcdef").unwrap();
        assert_eq!(
            identity.idempotency_key(3, 42),
            "nr1.link-7.0123456789abcdef.3.42"
        );
        assert_ne!(
            identity.idempotency_key(3, 42),
            identity.idempotency_key(4, 42)
        );
        let long = "x".repeat(IDENTITY_PART_MAX);
        let widest = LinkIdentity::new(&long, &long)
            .unwrap()
            .idempotency_key(u32::MAX, u64::MAX);
        assert!(widest.len() <= 256);
        assert!(widest.bytes().all(|b| b.is_ascii_graphic()));
    }

    #[test]
    fn identities_outside_the_alphabet_are_refused() {
        assert!(LinkIdentity::new("", "i").is_err());
        assert!(LinkIdentity::new("a.b", "i").is_err());
        assert!(LinkIdentity::new("a", "i d").is_err());
        assert!(LinkIdentity::new(&"x".repeat(IDENTITY_PART_MAX + 1), "i").is_err());
    }

    #[test]
    fn zstd_is_used_only_when_it_saves_ten_percent() {
        let repetitive = br#"{"payload":{"a":1},"idempotency_key":"k"},"#.repeat(100);
        let packed = compress(&repetitive).unwrap();
        assert_eq!(
            zstd::bulk::decompress(&packed, repetitive.len()).unwrap(),
            repetitive
        );
        // xorshift64: bytes zstd cannot shrink.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let random: Vec<u8> = (0..4096)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()[3]
            })
            .collect();
        assert!(compress(&random).is_none());
    }
}
