//! What the client prints: lines on stdout, tables, times. Every line goes
//! through [`say!`], which turns a closed stdout into
//! [`Failure::OutputClosed`] instead of the panic of `println!`.

use std::io::Write;

use comfy_table::{Table, presets};
use serde_json::Value;

use super::{Failure, Outcome};

/// Writes one formatted line to stdout, as `println!` does, and returns
/// the [`Outcome`](super::Outcome) of the write.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::client::output::write_line(format_args!($($arg)*))
    };
}
pub(crate) use say;

/// Writes `line` and a newline to stdout and flushes it.
///
/// # Errors
/// [`Failure::OutputClosed`] when the reader of a pipe left; a usage
/// failure for any other write error.
pub(crate) fn write_line(line: std::fmt::Arguments<'_>) -> Outcome {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(write_failure)
}

/// Writes `bytes` to stdout as they are and flushes it.
///
/// # Errors
/// As [`write_line`].
pub(crate) fn write_bytes(bytes: &[u8]) -> Outcome {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .map_err(write_failure)
}

/// The failure of a write to stdout: a closed pipe is the reader's choice
/// (`| head -1`), not an error.
pub(crate) fn write_failure(error: std::io::Error) -> Failure {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::OutputClosed
    } else {
        Failure::Usage(format!("cannot write to stdout: {error}"))
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
///
/// # Errors
/// As [`write_line`].
pub(crate) fn print_json(value: &Value) -> Outcome {
    say!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    )
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
    use super::*;

    #[test]
    fn times_are_utc_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_785_326_461), "2026-07-29T12:01:01Z");
    }
}
