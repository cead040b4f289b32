//! The message objects of a consume or replay answer (spec §1.6), read
//! without parsing a payload into a tree. The server writes a payload that
//! is one JSON text byte for byte; every style prints that text as it came
//! (keys in their order, spaces and number spellings such as `1.50` or
//! `2e3` kept), and `--raw` prints the stored bytes exactly.
//!
//! What the wire cannot tell apart is not guessed: a stored JSON string
//! (`"hi"`, quotes included) and the plain text `hi` both arrive as the
//! JSON string `"hi"`, and both print as the text `hi`.

use std::borrow::Cow;
use std::ops::Range;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::output::{rfc3339, write_bytes};
use super::{Failure, Outcome};

/// How a consumed or replayed message is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// `[p<part> @<offset>] key=<k> <time> <payload>`.
    Line,
    /// The payload's stored bytes alone, then a newline.
    Raw,
    /// The message object as the server sent it, one a line.
    Json,
}

/// The whitespace JSON allows between tokens.
const JSON_WHITESPACE: [char; 4] = [' ', '\t', '\n', '\r'];

/// The fields of a message object the client reads.
#[derive(Debug, Deserialize)]
struct Fields<'a> {
    partition: Option<i64>,
    offset: Option<i64>,
    timestamp: Option<i64>,
    #[serde(borrow)]
    key: Option<Cow<'a, str>>,
    key_encoding: Option<String>,
    #[serde(borrow)]
    payload: Option<&'a RawValue>,
    payload_encoding: Option<String>,
    receipt_handle: Option<String>,
}

/// One message object, borrowed from the answer's body.
#[derive(Debug)]
pub(crate) struct Message<'a> {
    /// The object's text as the server sent it.
    object: &'a str,
    fields: Fields<'a>,
}

/// The body of a batch consume.
#[derive(Debug, Deserialize)]
struct Batch<'a> {
    #[serde(borrow)]
    messages: Option<Vec<&'a RawValue>>,
}

/// The messages of a consume or replay answer: `{"messages":[...]}`, or
/// one bare message object (a replay read, or a server older than batch
/// consume).
///
/// # Errors
/// The body is not the JSON expected (counted as a refusal, as for any
/// answer this client does not understand).
pub(crate) fn messages(body: &[u8]) -> Result<Vec<Message<'_>>, Failure> {
    let not_understood = |e: &dyn std::fmt::Display| {
        Failure::Refused(format!(
            "the server's answer is not the message JSON expected ({e}); is --server a narad \
             server?"
        ))
    };
    let text = std::str::from_utf8(body).map_err(|e| not_understood(&e))?;
    let batch: Batch<'_> = serde_json::from_str(text).map_err(|e| not_understood(&e))?;
    let objects = match batch.messages {
        Some(objects) => objects.into_iter().map(RawValue::get).collect(),
        None => vec![text.trim_matches(JSON_WHITESPACE)],
    };
    objects
        .into_iter()
        .map(|object| {
            serde_json::from_str(object)
                .map(|fields| Message { object, fields })
                .map_err(|e| not_understood(&e))
        })
        .collect()
}

impl Message<'_> {
    /// The lease of a queue delivery; `None` on a replay read.
    pub(crate) fn receipt_handle(&self) -> Option<&str> {
        self.fields.receipt_handle.as_deref()
    }

    /// Writes the message to stdout in `style`.
    ///
    /// # Errors
    /// Stdout is closed ([`Failure::OutputClosed`]) or cannot be written.
    pub(crate) fn print(&self, style: Style) -> Outcome {
        write_bytes(&self.render(style))
    }

    /// The bytes [`Self::print`] writes, newline included.
    fn render(&self, style: Style) -> Vec<u8> {
        let mut out = match style {
            Style::Raw => self.payload_bytes().into_owned(),
            Style::Line => self.line().into_bytes(),
            Style::Json => self.object_on_one_line().into_bytes(),
        };
        out.push(b'\n');
        out
    }

    /// The human line: `[p<part> @<offset>] key=<k> <time> <payload>`.
    fn line(&self) -> String {
        let fields = &self.fields;
        let key = match (&fields.key, &fields.key_encoding) {
            (Some(key), Some(_)) => format!("base64:{key}"),
            (Some(key), None) => key.clone().into_owned(),
            (None, _) => "-".to_owned(),
        };
        let payload = match (fields.payload, &fields.payload_encoding) {
            (Some(raw), Some(_)) => format!("base64:{}", string_text(raw).unwrap_or_default()),
            (Some(raw), None) => string_text(raw).unwrap_or_else(|| raw.get().to_owned()),
            (None, _) => String::new(),
        };
        format!(
            "[p{} @{}] key={key} {} {payload}",
            fields.partition.unwrap_or(-1),
            fields.offset.unwrap_or(-1),
            rfc3339(fields.timestamp.unwrap_or(-1))
        )
    }

    /// The payload's stored bytes: base64 decoded, a JSON string's text,
    /// or a JSON text exactly as the server sent it, whitespace around it
    /// included (a file published with its final newline keeps it).
    fn payload_bytes(&self) -> Cow<'_, [u8]> {
        let Some(raw) = self.fields.payload else {
            return Cow::Borrowed(b"");
        };
        if self.fields.payload_encoding.is_some() {
            let text = string_text(raw).unwrap_or_default();
            return Cow::Owned(BASE64.decode(&text).unwrap_or_else(|_| text.into_bytes()));
        }
        if let Some(text) = string_text(raw) {
            return Cow::Owned(text.into_bytes());
        }
        match self.payload_span(raw) {
            Some(span) => Cow::Borrowed(self.object[span].as_bytes()),
            None => Cow::Borrowed(raw.get().as_bytes()),
        }
    }

    /// The object's text with the whitespace around its payload left out:
    /// the payload's JSON text stays as it is, and a payload stored with a
    /// final newline does not break the one-object-a-line output.
    fn object_on_one_line(&self) -> String {
        let Some(span) = self.fields.payload.and_then(|raw| self.payload_span(raw)) else {
            return self.object.to_owned();
        };
        let payload = self.object[span.clone()].trim_matches(JSON_WHITESPACE);
        format!(
            "{}{payload}{}",
            &self.object[..span.start],
            &self.object[span.end..]
        )
    }

    /// Where the payload lies in the object, with the JSON whitespace on
    /// either side of it: the server writes none of its own, so any there
    /// is part of the stored bytes.
    fn payload_span(&self, raw: &RawValue) -> Option<Range<usize>> {
        let text = raw.get();
        // `raw` borrows from `self.object`: its address says where it lies.
        let start = (text.as_ptr() as usize).checked_sub(self.object.as_ptr() as usize)?;
        let end = start.checked_add(text.len())?;
        if end > self.object.len() {
            return None;
        }
        let before = self.object[..start].trim_end_matches(JSON_WHITESPACE).len();
        let after =
            self.object.len() - self.object[end..].trim_start_matches(JSON_WHITESPACE).len();
        Some(before..after)
    }
}

/// The text of `raw` when it is a JSON string.
fn string_text(raw: &RawValue) -> Option<String> {
    if !raw.get().starts_with('"') {
        return None;
    }
    serde_json::from_str::<String>(raw.get()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message whose payload is written as `payload` (JSON text).
    fn answer(payload: &str) -> String {
        format!(
            r#"{{"messages":[{{"topic":"t","partition":2,"offset":17,"key":"k1","payload":{payload},"timestamp":0,"receipt_handle":"2:17:1"}}]}}"#
        )
    }

    fn rendered(body: &str, style: Style) -> String {
        let list = messages(body.as_bytes()).expect("messages");
        assert_eq!(list.len(), 1);
        String::from_utf8(list[0].render(style)).expect("utf-8")
    }

    const SPELLED: &str = r#"{"z":1,  "a":[1.50, 2e3]}"#;

    #[test]
    fn raw_prints_a_json_payload_byte_for_byte() {
        assert_eq!(
            rendered(&answer(SPELLED), Style::Raw),
            format!("{SPELLED}\n")
        );
    }

    #[test]
    fn raw_keeps_whitespace_stored_around_a_json_payload() {
        let stored = " {\"a\":1}\n";
        let body = answer(stored);
        assert_eq!(rendered(&body, Style::Raw), format!("{stored}\n"));
        let json = rendered(&body, Style::Json);
        assert_eq!(json.lines().count(), 1, "{json}");
        assert!(json.contains(r#""payload":{"a":1},"timestamp""#), "{json}");
    }

    #[test]
    fn the_line_keeps_a_json_payloads_text() {
        assert_eq!(
            rendered(&answer(SPELLED), Style::Line),
            format!("[p2 @17] key=k1 1970-01-01T00:00:00Z {SPELLED}\n")
        );
    }

    #[test]
    fn json_prints_the_object_as_the_server_sent_it() {
        let body = answer(SPELLED);
        let object = &body[r#"{"messages":["#.len()..body.len() - 2];
        assert_eq!(rendered(&body, Style::Json), format!("{object}\n"));
    }

    #[test]
    fn text_and_binary_payloads_are_decoded() {
        assert_eq!(
            rendered(&answer(r#""hi \"there\"""#), Style::Raw),
            "hi \"there\"\n"
        );
        assert_eq!(
            rendered(&answer(r#""hi""#), Style::Line),
            "[p2 @17] key=k1 1970-01-01T00:00:00Z hi\n"
        );
        let binary = r#"{"partition":0,"offset":0,"payload":"AAEC","payload_encoding":"base64","timestamp":0}"#;
        assert_eq!(
            rendered(binary, Style::Raw).into_bytes(),
            vec![0, 1, 2, b'\n']
        );
        assert_eq!(
            rendered(binary, Style::Line),
            "[p0 @0] key=- 1970-01-01T00:00:00Z base64:AAEC\n"
        );
    }

    #[test]
    fn a_bare_message_is_one_delivery() {
        let bare = r#"{"partition":1,"offset":4,"payload":[1, 2],"timestamp":0}"#;
        let list = messages(bare.as_bytes()).expect("one message");
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].receipt_handle(), None);
        assert_eq!(list[0].render(Style::Raw), b"[1, 2]\n");
        let body = answer("1");
        let batch = messages(body.as_bytes()).expect("a batch");
        assert_eq!(batch[0].receipt_handle(), Some("2:17:1"));
    }
}
