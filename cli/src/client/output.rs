//! What the client prints: message lines, tables, times.

use std::io::Write;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use comfy_table::{Table, presets};
use serde_json::Value;

use super::Failure;

/// How a consumed or replayed message is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// `[p<part> @<offset>] key=<k> <time> <payload>`.
    Line,
    /// The payload's bytes alone, then a newline.
    Raw,
    /// The message object, one JSON object a line.
    Json,
}

/// Writes `message` (a Message object, spec §1.6) to stdout in `style`.
///
/// # Errors
/// Stdout is closed (a pipe whose reader left): reported as usage, since
/// there is nothing the server did wrong.
pub(crate) fn print_message(message: &Value, style: Style) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    let written = match style {
        Style::Json => writeln!(stdout, "{message}"),
        Style::Raw => stdout
            .write_all(&payload_bytes(message))
            .and_then(|()| stdout.write_all(b"\n")),
        Style::Line => writeln!(stdout, "{}", message_line(message)),
    };
    written
        .and_then(|()| stdout.flush())
        .map_err(|e| Failure::Usage(format!("cannot write to stdout: {e}")))
}

/// The human line of a message.
pub(crate) fn message_line(message: &Value) -> String {
    let number = |field: &str| message.get(field).and_then(Value::as_i64).unwrap_or(-1);
    let key = match (message.get("key"), message.get("key_encoding")) {
        (Some(Value::String(key)), Some(_)) => format!("base64:{key}"),
        (Some(Value::String(key)), None) => key.clone(),
        _ => "-".to_owned(),
    };
    let payload = match (message.get("payload"), message.get("payload_encoding")) {
        (Some(Value::String(text)), Some(_)) => format!("base64:{text}"),
        (Some(Value::String(text)), None) => text.clone(),
        (Some(value), _) => value.to_string(),
        (None, _) => String::new(),
    };
    format!(
        "[p{} @{}] key={key} {} {payload}",
        number("partition"),
        number("offset"),
        rfc3339(number("timestamp"))
    )
}

/// The payload's bytes: base64 decoded, a JSON string's text, or any other
/// JSON value as written.
pub(crate) fn payload_bytes(message: &Value) -> Vec<u8> {
    match (message.get("payload"), message.get("payload_encoding")) {
        (Some(Value::String(text)), Some(_)) => BASE64
            .decode(text)
            .unwrap_or_else(|_| text.as_bytes().to_vec()),
        (Some(Value::String(text)), None) => text.as_bytes().to_vec(),
        (Some(value), _) => value.to_string().into_bytes(),
        (None, _) => Vec::new(),
    }
}

/// Unix seconds as `YYYY-MM-DDThh:mm:ssZ` (UTC).
pub(crate) fn rfc3339(unix_s: i64) -> String {
    let days = unix_s.div_euclid(86_400);
    let second_of_day = unix_s.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A table with `header`, drawn without borders (easy to read and to grep).
pub(crate) fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_style(presets::NOTHING)
        .set_header(header.to_vec());
    table
}

/// Prints `value` as pretty JSON.
pub(crate) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// A JSON field as display text: strings bare, absent as `-`.
pub(crate) fn field(value: &Value, name: &str) -> String {
    match value.get(name) {
        None | Some(Value::Null) => "-".to_owned(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn times_are_utc_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_785_326_461), "2026-07-29T12:01:01Z");
    }

    #[test]
    fn a_message_line_names_partition_offset_key_time_and_payload() {
        let message = json!({"topic":"t","partition":2,"offset":17,"key":"k1",
            "payload":{"a":1},"timestamp":0});
        assert_eq!(
            message_line(&message),
            r#"[p2 @17] key=k1 1970-01-01T00:00:00Z {"a":1}"#
        );
        let keyless = json!({"partition":0,"offset":0,"payload":"hi","timestamp":0});
        assert_eq!(
            message_line(&keyless),
            "[p0 @0] key=- 1970-01-01T00:00:00Z hi"
        );
    }

    #[test]
    fn raw_payloads_are_decoded() {
        let binary = json!({"payload":"AAEC","payload_encoding":"base64"});
        assert_eq!(payload_bytes(&binary), vec![0, 1, 2]);
        assert_eq!(payload_bytes(&json!({"payload":"text"})), b"text");
        assert_eq!(payload_bytes(&json!({"payload":[1,2]})), b"[1,2]");
    }
}
