//! Human durations on the command line (`12h`, `30s`, `1h30m`, `500ms`,
//! `7d`) and back, and human byte counts.

/// Milliseconds in each unit a duration may use, longest suffix first so
/// `ms` is not read as `m`.
const UNITS_MS: [(&str, u64); 6] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
    ("w", 604_800_000),
];

/// `text` as milliseconds: one or more `<number><unit>` runs (`1h30m`), or
/// a bare `0`.
///
/// # Errors
/// A missing or unknown unit, a missing number, or an overflow; the text
/// says what is accepted.
pub(crate) fn parse_ms(text: &str) -> Result<u64, String> {
    let refuse = || {
        format!(
            "{text:?} is not a duration: write it like 30s, 12h, 1h30m, 500ms or 7d (units ms s m h d w)"
        )
    };
    if text == "0" {
        return Ok(0);
    }
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(refuse());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let number: u64 = rest[..digits].parse().map_err(|_| refuse())?;
        rest = &rest[digits..];
        let (unit, unit_ms) = UNITS_MS
            .iter()
            .find(|(unit, _)| {
                rest.starts_with(unit)
                    && !rest[unit.len()..].starts_with(|c: char| c.is_ascii_alphabetic())
            })
            .ok_or_else(refuse)?;
        rest = &rest[unit.len()..];
        total = number
            .checked_mul(*unit_ms)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(refuse)?;
    }
    Ok(total)
}

/// A retention: a duration, or `forever` (also `0`) for keep forever.
///
/// # Errors
/// As [`parse_ms`].
pub(crate) fn parse_retention_ms(text: &str) -> Result<u64, String> {
    if text == "forever" {
        Ok(0)
    } else {
        parse_ms(text)
    }
}

/// `ms` in the largest units that write it exactly (`43200000` → `12h`,
/// `90000` → `1m30s`); `0` as `0s`.
pub(crate) fn format_ms(ms: u64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut rest = ms;
    let mut text = String::new();
    for (unit, unit_ms) in UNITS_MS.iter().rev() {
        // Weeks read worse than days for retention; stop at days.
        if *unit == "w" {
            continue;
        }
        if rest >= *unit_ms {
            text.push_str(&format!("{}{unit}", rest / unit_ms));
            rest %= unit_ms;
        }
    }
    text
}

/// `bytes` in binary units with one decimal (`1536` → `1.5 KiB`).
pub(crate) fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_compound_durations() {
        assert_eq!(parse_ms("30s"), Ok(30_000));
        assert_eq!(parse_ms("12h"), Ok(43_200_000));
        assert_eq!(parse_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_ms("500ms"), Ok(500));
        assert_eq!(parse_ms("7d"), Ok(604_800_000));
        assert_eq!(parse_ms("0"), Ok(0));
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        for text in ["", "12", "h", "12x", "1.5h", "-3s", "3mss"] {
            assert!(parse_ms(text).is_err(), "{text:?}");
        }
        assert!(parse_ms("99999999999999999999d").is_err());
    }

    #[test]
    fn forever_is_a_retention_of_zero() {
        assert_eq!(parse_retention_ms("forever"), Ok(0));
        assert!(parse_ms("forever").is_err());
    }

    #[test]
    fn formats_in_exact_units() {
        assert_eq!(format_ms(43_200_000), "12h");
        assert_eq!(format_ms(90_000), "1m30s");
        assert_eq!(format_ms(604_800_000), "7d");
        assert_eq!(format_ms(1_500), "1s500ms");
        assert_eq!(format_ms(0), "0s");
    }

    #[test]
    fn formats_bytes_in_binary_units() {
        assert_eq!(format_bytes(12), "12 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(5 << 20), "5.0 MiB");
    }
}
