//! The message object of a consume or replay answer (spec §1.6, wire
//! contract §5.1):
//!
//! ```text
//! {"topic":"orders","partition":1,"offset":7,"key":"customer-1",
//!  "payload":{"id": "o7"},"timestamp":1700000000,"receipt_handle":"1:7:99"}
//! ```
//!
//! - `key` only when the record has one; base64 with
//!   `"key_encoding":"base64"` when it is not valid UTF-8;
//! - `payload` byte for byte when the stored bytes are one valid JSON text
//!   (whitespace and number spelling kept); else a JSON string when they
//!   are valid UTF-8; else base64 with `"payload_encoding":"base64"`; an
//!   empty payload is `null`;
//! - `timestamp` is the commit time in Unix seconds;
//! - `receipt_handle` is absent on a replay read.
//!
//! The object is written straight into the response text: a JSON payload
//! is never parsed into a tree and printed again.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use narad_plog::Record;
use serde_json::value::RawValue;

use super::handle::ReceiptHandle;
use crate::ingress::schema::nesting_depth;

/// Deepest nesting a payload may have and still count as JSON: the limit
/// of the reference implementation's validity check, so a payload is
/// rendered the same way on every node of a mixed cluster.
pub const JSON_PAYLOAD_NESTING_MAX: usize = 10_000;

/// One message to render.
#[derive(Clone, Copy, Debug)]
pub struct MessageView<'a> {
    /// The topic the client consumed from (a fan-out child's own name).
    pub topic: &'a str,
    /// The record's partition.
    pub partition: u32,
    /// The record.
    pub record: &'a Record,
    /// The lease; `None` for a replay read.
    pub receipt: Option<ReceiptHandle>,
}

/// How a payload is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PayloadForm<'a> {
    /// Nothing stored: `null`.
    Empty,
    /// One valid JSON text, written as it is.
    Json(&'a str),
    /// UTF-8 text that is not JSON: a JSON string.
    Text(&'a str),
    /// Anything else: base64.
    Binary(&'a [u8]),
}

/// Appends the message object of `message` to `out`.
pub fn write_message(out: &mut String, message: &MessageView<'_>) {
    let record = message.record;
    out.push_str("{\"topic\":");
    write_json_string(out, message.topic);
    out.push_str(",\"partition\":");
    out.push_str(&message.partition.to_string());
    out.push_str(",\"offset\":");
    out.push_str(&record.offset.to_string());
    if !record.key.is_empty() {
        out.push_str(",\"key\":");
        match std::str::from_utf8(&record.key) {
            Ok(text) => write_json_string(out, text),
            Err(_) => {
                write_base64(out, &record.key);
                out.push_str(",\"key_encoding\":\"base64\"");
            }
        }
    }
    out.push_str(",\"payload\":");
    match payload_form(&record.payload) {
        PayloadForm::Empty => out.push_str("null"),
        PayloadForm::Json(text) => out.push_str(text),
        PayloadForm::Text(text) => write_json_string(out, text),
        PayloadForm::Binary(bytes) => {
            write_base64(out, bytes);
            out.push_str(",\"payload_encoding\":\"base64\"");
        }
    }
    out.push_str(",\"timestamp\":");
    out.push_str(&(record.committed_at_ms / 1_000).to_string());
    if let Some(receipt) = message.receipt {
        out.push_str(",\"receipt_handle\":\"");
        out.push_str(&receipt.to_string());
        out.push('"');
    }
    out.push('}');
}

/// The message object of `message` on its own.
pub fn message_json(message: &MessageView<'_>) -> String {
    let mut out = String::with_capacity(message_capacity(message.record));
    write_message(&mut out, message);
    out
}

/// A capacity guess for one rendered record: base64 grows 4/3, escapes
/// rarely more, and the fixed fields fit in the slack.
pub fn message_capacity(record: &Record) -> usize {
    (record.key.len() + record.payload.len()) * 4 / 3 + 160
}

fn payload_form(payload: &[u8]) -> PayloadForm<'_> {
    if payload.is_empty() {
        return PayloadForm::Empty;
    }
    let Ok(text) = std::str::from_utf8(payload) else {
        return PayloadForm::Binary(payload);
    };
    if is_one_json_text(text) {
        PayloadForm::Json(text)
    } else {
        PayloadForm::Text(text)
    }
}

/// Whether `text` is exactly one JSON value, optionally surrounded by JSON
/// whitespace. Checking a `RawValue` walks the text without recursion, and
/// the nesting bound is checked first so the answer matches the reference
/// implementation's.
fn is_one_json_text(text: &str) -> bool {
    nesting_depth(text.as_bytes()) <= JSON_PAYLOAD_NESTING_MAX
        && serde_json::from_str::<&RawValue>(text).is_ok()
}

fn write_base64(out: &mut String, bytes: &[u8]) {
    out.push('"');
    BASE64.encode_string(bytes, out);
    out.push('"');
}

/// Writes `text` as a JSON string: quotes, backslashes and control
/// characters escaped, and U+2028/U+2029 too so the answer can be pasted
/// into JavaScript source.
fn write_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if u32::from(c) < 0x20 => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Bytes that are often JSON, often text, and sometimes neither.
    fn payload_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<Vec<u8>>(),
            "\\PC{0,30}".prop_map(String::into_bytes),
            r#"[ \[\]{}",:0-9a-z\\.-]{0,30}"#.prop_map(String::into_bytes),
        ]
    }

    proptest! {
        #![proptest_config(crate::testing::seeded_proptest_config())]

        #[test]
        fn any_record_renders_as_json_that_gives_its_bytes_back(
            key in payload_bytes(),
            payload in payload_bytes(),
        ) {
            let record = record(&key, &payload);
            let text = render(&record, Some(HANDLE));
            let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
            let key_back = match (&value["key"], value.get("key_encoding")) {
                (serde_json::Value::Null, None) => Vec::new(),
                (serde_json::Value::String(key), None) => key.clone().into_bytes(),
                (serde_json::Value::String(key), Some(_)) => BASE64.decode(key).expect("base64"),
                other => panic!("unexpected key {other:?}"),
            };
            prop_assert_eq!(key_back, key);
            match (value.get("payload_encoding"), payload_form(&payload)) {
                (Some(_), PayloadForm::Binary(bytes)) => {
                    let encoded = value["payload"].as_str().expect("base64 string");
                    prop_assert_eq!(BASE64.decode(encoded).expect("base64"), bytes.to_vec());
                }
                (None, PayloadForm::Text(text)) => prop_assert_eq!(value["payload"].as_str(), Some(text)),
                (None, PayloadForm::Json(text)) => {
                    let original: serde_json::Value = serde_json::from_str(text).expect("JSON");
                    prop_assert_eq!(&value["payload"], &original);
                }
                (None, PayloadForm::Empty) => prop_assert!(value["payload"].is_null()),
                (encoding, form) => panic!("{encoding:?} with {form:?}"),
            }
        }
    }

    fn record(key: &[u8], payload: &[u8]) -> Record {
        Record {
            offset: 7,
            key: key.to_vec(),
            committed_at_ms: 1_700_000_000_999,
            payload: payload.to_vec(),
            origin: None,
            idempotency_key: Vec::new(),
        }
    }

    fn render(record: &Record, receipt: Option<ReceiptHandle>) -> String {
        message_json(&MessageView {
            topic: "orders",
            partition: 1,
            record,
            receipt,
        })
    }

    fn parsed(text: &str) -> serde_json::Value {
        serde_json::from_str(text).expect("the rendered message is JSON")
    }

    const HANDLE: ReceiptHandle = ReceiptHandle {
        partition: 1,
        offset: 7,
        nonce: 99,
    };

    #[test]
    fn a_json_payload_is_written_byte_for_byte() {
        let payload = br#"{"id": "o7",   "amount": 1.50e2, "n": [1 ,2]}"#;
        let text = render(&record(b"", payload), Some(HANDLE));
        assert_eq!(
            text,
            r#"{"topic":"orders","partition":1,"offset":7,"payload":{"id": "o7",   "amount": 1.50e2, "n": [1 ,2]},"timestamp":1700000000,"receipt_handle":"1:7:99"}"#
        );
        parsed(&text);
    }

    #[test]
    fn a_json_scalar_payload_is_written_as_it_is() {
        let text = render(&record(b"", b"\"quoted\""), None);
        assert_eq!(parsed(&text)["payload"], "quoted");
        let text = render(&record(b"", b" 42 "), None);
        assert!(text.contains(r#""payload": 42 ,"#), "{text}");
        assert_eq!(parsed(&text)["payload"], 42);
    }

    #[test]
    fn json_syntax_decides_not_number_range() {
        let text = render(&record(b"", b"[1e400]"), None);
        assert!(text.contains(r#""payload":[1e400],"#), "{text}");
    }

    #[test]
    fn a_text_payload_becomes_a_json_string() {
        let text = render(&record(b"", "hello \"world\"\n\u{1} é".as_bytes()), None);
        let value = parsed(&text);
        assert_eq!(value["payload"], "hello \"world\"\n\u{1} é");
        assert!(value.get("payload_encoding").is_none());
    }

    #[test]
    fn two_json_values_are_text_not_json() {
        let value = parsed(&render(&record(b"", b"{} {}"), None));
        assert_eq!(value["payload"], "{} {}");
    }

    #[test]
    fn a_binary_payload_is_base64_with_its_encoding() {
        let value = parsed(&render(&record(b"", &[0x00, 0x83, 0xff]), None));
        assert_eq!(value["payload"], "AIP/");
        assert_eq!(value["payload_encoding"], "base64");
    }

    #[test]
    fn an_empty_payload_is_null() {
        let value = parsed(&render(&record(b"", b""), None));
        assert!(value["payload"].is_null());
        assert!(value.as_object().expect("object").contains_key("payload"));
    }

    #[test]
    fn a_text_key_is_plain() {
        let value = parsed(&render(&record(b"customer-1", b"{}"), None));
        assert_eq!(value["key"], "customer-1");
        assert!(value.get("key_encoding").is_none());
    }

    #[test]
    fn a_binary_key_is_base64_with_its_encoding() {
        let value = parsed(&render(&record(&[0x00, 0x05, 0x83, 0xff], b"{}"), None));
        assert_eq!(value["key"], "AAWD/w==");
        assert_eq!(value["key_encoding"], "base64");
    }

    #[test]
    fn no_key_means_no_key_field() {
        let value = parsed(&render(&record(b"", b"{}"), None));
        assert!(value.get("key").is_none());
        assert!(value.get("key_encoding").is_none());
    }

    #[test]
    fn the_timestamp_is_unix_seconds() {
        let value = parsed(&render(&record(b"", b"{}"), None));
        assert_eq!(value["timestamp"], 1_700_000_000);
    }

    #[test]
    fn a_replay_has_no_receipt_handle() {
        let value = parsed(&render(&record(b"", b"{}"), None));
        assert!(value.get("receipt_handle").is_none());
        let value = parsed(&render(&record(b"", b"{}"), Some(HANDLE)));
        assert_eq!(value["receipt_handle"], "1:7:99");
        assert_eq!(value["topic"], "orders");
        assert_eq!(value["partition"], 1);
        assert_eq!(value["offset"], 7);
    }

    #[test]
    fn nesting_past_the_reference_limit_is_text() {
        let deep = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        let at_limit = deep(JSON_PAYLOAD_NESTING_MAX);
        let text = render(&record(b"", at_limit.as_bytes()), None);
        assert!(text.contains(&format!("\"payload\":{at_limit},")));
        let over = deep(JSON_PAYLOAD_NESTING_MAX + 1);
        let text = render(&record(b"", over.as_bytes()), None);
        assert!(text.contains(&format!("\"payload\":\"{over}\",")));
    }

    #[test]
    fn control_and_separator_characters_are_escaped() {
        let mut out = String::new();
        write_json_string(&mut out, "a\u{0}\u{1f}\u{2028}\\");
        assert_eq!(out, r#""a\u0000\u001f\u2028\\""#);
        let back: String = serde_json::from_str(&out).expect("JSON string");
        assert_eq!(back, "a\u{0}\u{1f}\u{2028}\\");
    }
}
