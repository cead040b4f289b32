//! Go's duration syntax, which clients send as the consume `wait`
//! (`time.Duration.String()`: `10s`, `1.5s`, `1m30s`, `500µs`), parsed and
//! printed the way Go's `time` package does (wire contract §1.4).
//!
//! Parsing: an optional sign, then one or more `<number><unit>` terms;
//! numbers may have a fraction (`1.`, `.5` and `1.5` are all numbers, `.`
//! is not); units are `ns us µs μs ms s m h`; a lone `0` needs no unit.
//! Values are nanoseconds in a signed 64-bit range; anything past it is an
//! error, as in Go.

use std::time::Duration;

/// Why a duration did not parse. The text names the input as Go does.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GoDurationError {
    /// Not duration syntax.
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// A term without a unit.
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    /// A unit Go does not know.
    #[error("unknown unit {unit:?} in duration {text:?}")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole input.
        text: String,
    },
}

/// Nanoseconds Go's durations can hold: `1 << 63` is only reachable
/// negated.
const NANOS_LIMIT: u64 = 1 << 63;

/// Parses `text` into signed nanoseconds, as Go's `time.ParseDuration`.
///
/// # Errors
/// [`GoDurationError`] for anything Go refuses, including overflow.
pub fn parse_go_duration(text: &str) -> Result<i64, GoDurationError> {
    let invalid = || GoDurationError::Invalid(text.to_owned());
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let (nanos, after) = term(rest, text)?;
        total = total
            .checked_add(nanos)
            .filter(|total| *total <= NANOS_LIMIT)
            .ok_or_else(invalid)?;
        rest = after;
    }
    if negative {
        // NANOS_LIMIT itself is i64::MIN.
        return Ok(i64::try_from(total).map_or(i64::MIN, |nanos| -nanos));
    }
    i64::try_from(total).map_err(|_| invalid())
}

/// One `<number><unit>` term at the start of `rest`: its nanoseconds and
/// what follows it.
fn term<'a>(rest: &'a str, text: &str) -> Result<(u64, &'a str), GoDurationError> {
    let invalid = || GoDurationError::Invalid(text.to_owned());
    let (whole, whole_digits, rest) = leading_int(rest).ok_or_else(invalid)?;
    let (fraction, scale, fraction_digits, rest) = match rest.strip_prefix('.') {
        Some(after_dot) => leading_fraction(after_dot),
        None => (0, 1.0, 0, rest),
    };
    if whole_digits == 0 && fraction_digits == 0 {
        return Err(invalid());
    }
    let unit_len = rest
        .bytes()
        .position(|byte| byte == b'.' || byte.is_ascii_digit())
        .unwrap_or(rest.len());
    if unit_len == 0 {
        return Err(GoDurationError::MissingUnit(text.to_owned()));
    }
    let (unit_text, rest) = rest.split_at(unit_len);
    let unit = unit_nanos(unit_text).ok_or_else(|| GoDurationError::UnknownUnit {
        unit: unit_text.to_owned(),
        text: text.to_owned(),
    })?;
    let mut nanos = whole
        .checked_mul(unit)
        .filter(|nanos| *nanos <= NANOS_LIMIT)
        .ok_or_else(invalid)?;
    if fraction > 0 {
        // As Go: the fraction goes through a float, then is truncated.
        let part = (fraction as f64 * (unit as f64 / scale)) as u64;
        nanos = nanos
            .checked_add(part)
            .filter(|nanos| *nanos <= NANOS_LIMIT)
            .ok_or_else(invalid)?;
    }
    Ok((nanos, rest))
}

/// Leading ASCII digits as a number: (value, digit count, rest); `None` on
/// overflow past `1 << 63`.
fn leading_int(text: &str) -> Option<(u64, usize, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let mut value: u64 = 0;
    for byte in text[..digits].bytes() {
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(byte - b'0'))
            .filter(|value| *value <= NANOS_LIMIT)?;
    }
    Some((value, digits, &text[digits..]))
}

/// Leading fraction digits: (value, its scale, digit count, rest). Digits
/// past the precision a `u64` holds are read and dropped, as in Go.
fn leading_fraction(text: &str) -> (u64, f64, usize, &str) {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let mut value: u64 = 0;
    let mut scale = 1.0;
    let mut overflowed = false;
    for byte in text[..digits].bytes() {
        if overflowed {
            continue;
        }
        match value
            .checked_mul(10)
            .and_then(|value| value.checked_add(u64::from(byte - b'0')))
            .filter(|value| *value <= NANOS_LIMIT)
        {
            Some(next) => {
                value = next;
                scale *= 10.0;
            }
            None => overflowed = true,
        }
    }
    (value, scale, digits, &text[digits..])
}

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        // The micro sign (U+00B5) and the Greek letter mu (U+03BC).
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// `duration` as Go's `time.Duration.String()` prints it: `0s`, `750ms`,
/// `1.5s`, `1m0s`, `2h45m0.5s`.
pub fn format_go_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", with_fraction(nanos, 3));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", with_fraction(nanos, 6));
    }
    let seconds = nanos / 1_000_000_000;
    let fraction = with_fraction(nanos % 1_000_000_000, 9);
    // `with_fraction` of the sub-second part prints `0.xxx`; keep the tail.
    let fraction = fraction.strip_prefix('0').unwrap_or(&fraction);
    let (minutes, seconds) = (seconds / 60, seconds % 60);
    let (hours, minutes) = (minutes / 60, minutes % 60);
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&format!("{seconds}{fraction}s"));
    out
}

/// `value / 10^precision` in decimal, trailing zeros (and a bare point)
/// dropped.
fn with_fraction(value: u128, precision: u32) -> String {
    let unit = 10u128.pow(precision);
    let whole = value / unit;
    let fraction = value % unit;
    if fraction == 0 {
        return whole.to_string();
    }
    let digits = format!("{fraction:0width$}", width = precision as usize);
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(crate::testing::seeded_proptest_config())]

        #[test]
        fn every_printed_duration_parses_back_exactly(nanos in 0..=i64::MAX as u64) {
            let duration = Duration::from_nanos(nanos);
            let text = format_go_duration(duration);
            prop_assert_eq!(parse_go_duration(&text).ok().and_then(|n| u64::try_from(n).ok()), Some(nanos), "{}", text);
        }

        #[test]
        fn any_text_parses_or_is_refused_without_panicking(text in "[-+0-9.nuµμsmh ]{0,24}") {
            let _ = parse_go_duration(&text);
        }
    }

    const SECOND: i64 = 1_000_000_000;

    #[test]
    fn what_the_go_client_sends_parses() {
        for (text, nanos) in [
            ("10s", 10 * SECOND),
            ("5s", 5 * SECOND),
            ("10ms", 10_000_000),
            ("20ms", 20_000_000),
            ("1.5s", 3 * SECOND / 2),
            ("1m30s", 90 * SECOND),
            ("1m0s", 60 * SECOND),
            ("500µs", 500_000),
            ("500μs", 500_000),
            ("500us", 500_000),
            ("7ns", 7),
            ("2h45m", (2 * 3600 + 45 * 60) * SECOND),
        ] {
            assert_eq!(parse_go_duration(text), Ok(nanos), "{text}");
        }
    }

    #[test]
    fn a_lone_zero_needs_no_unit_but_other_numbers_do() {
        assert_eq!(parse_go_duration("0"), Ok(0));
        assert_eq!(parse_go_duration("-0"), Ok(0));
        assert_eq!(
            parse_go_duration("5"),
            Err(GoDurationError::MissingUnit("5".into()))
        );
        assert!(parse_go_duration("00").is_err());
    }

    #[test]
    fn fractions_may_omit_either_side_of_the_point() {
        assert_eq!(parse_go_duration(".5s"), Ok(SECOND / 2));
        assert_eq!(parse_go_duration("1.s"), Ok(SECOND));
        assert_eq!(parse_go_duration("1.25m"), Ok(75 * SECOND));
        assert!(parse_go_duration(".s").is_err());
        assert!(parse_go_duration("1..5s").is_err());
    }

    #[test]
    fn signs_are_kept() {
        assert_eq!(parse_go_duration("-1s"), Ok(-SECOND));
        assert_eq!(parse_go_duration("+1s"), Ok(SECOND));
        assert!(parse_go_duration("--1s").is_err());
        assert!(parse_go_duration("1s-1s").is_err());
    }

    #[test]
    fn garbage_and_unknown_units_are_refused() {
        for text in [
            "", "+", "-", "s", "1 s", " 1s", "1s ", "1d", "1S", "1sx", "ms1", "abc",
        ] {
            assert!(parse_go_duration(text).is_err(), "{text:?}");
        }
        assert_eq!(
            parse_go_duration("3d"),
            Err(GoDurationError::UnknownUnit {
                unit: "d".into(),
                text: "3d".into()
            })
        );
    }

    #[test]
    fn overflow_is_refused_and_the_edges_are_kept() {
        assert_eq!(parse_go_duration("9223372036854775807ns"), Ok(i64::MAX));
        assert!(parse_go_duration("9223372036854775808ns").is_err());
        assert_eq!(parse_go_duration("-9223372036854775808ns"), Ok(i64::MIN));
        assert!(parse_go_duration("2562048h").is_err());
        assert!(parse_go_duration("2562047h47m16.854775807s").is_ok());
        assert!(parse_go_duration("99999999999999999999s").is_err());
    }

    #[test]
    fn fraction_digits_past_u64_precision_are_dropped() {
        assert_eq!(
            parse_go_duration("1.0000000000000000000000001s"),
            Ok(SECOND)
        );
    }

    #[test]
    fn printing_matches_go() {
        for (duration, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::from_micros(500), "500µs"),
            (Duration::from_nanos(1_500), "1.5µs"),
            (Duration::from_millis(750), "750ms"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3_600), "1h0m0s"),
            (Duration::from_millis(9_900_500), "2h45m0.5s"),
        ] {
            assert_eq!(format_go_duration(duration), text);
        }
    }

    #[test]
    fn printed_durations_parse_back() {
        for millis in [1, 999, 1_000, 1_001, 59_999, 60_000, 3_599_999, 3_600_001] {
            let duration = Duration::from_millis(millis);
            let nanos = parse_go_duration(&format_go_duration(duration)).expect("parses");
            assert_eq!(u128::try_from(nanos).ok(), Some(duration.as_nanos()));
        }
    }
}
