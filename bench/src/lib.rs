//! Benchmarks for Narad.
//!
//! Every figure a benchmark here reports stands next to a baseline measured in
//! the same run (raw fdatasync latency on an appended and on a preallocated
//! file, raw sequential bandwidth, an HTTP handler that does nothing), because
//! the machines it runs on are shared and noisy: a ratio to a same-run
//! baseline means something, a bare number does not. Results are written as
//! JSON under `target/bench/` with a PNG chart beside them.
//!
//! This library holds what every benchmark binary shares: latency statistics
//! ([`stats`]), CPU time ([`cpu`]), a node's metrics ([`metrics`]), the raw-disk baselines ([`baseline`]),
//! the report writer ([`report`]) and its target verdicts ([`verdict`]), and
//! the brokers a benchmark drives, one `narad dev` ([`node`]) or a cluster
//! of control and data nodes ([`cluster`]), and the HTTPS front a remote
//! cluster sits behind ([`tls_front`]). Each benchmark is a binary in
//! `src/bin/`.

pub mod baseline;
pub mod cluster;
pub mod cpu;
pub mod http;
pub mod metrics;
pub mod node;
pub mod report;
pub mod stats;
pub mod tls_front;
pub mod verdict;

use std::path::PathBuf;
use std::time::Duration;

/// Where reports go: `$NARAD_BENCH_DIR`, or `target/bench` of the workspace.
pub fn report_dir() -> PathBuf {
    match std::env::var_os("NARAD_BENCH_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bench")),
    }
}

/// A scratch directory on the real disk (not tmpfs), so fdatasync costs what
/// it costs in production. Created if missing.
///
/// # Errors
/// When the directory cannot be created.
pub fn bench_dir() -> std::io::Result<PathBuf> {
    let dir = report_dir().join("scratch");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A benchmark's command line as `(flag, value)` pairs: every flag takes a
/// value. `None` for `--help` or `-h` (the caller prints `usage`).
///
/// # Errors
/// A flag without a value, naming it, with `usage`.
pub fn flag_pairs(
    args: impl IntoIterator<Item = String>,
    usage: &str,
) -> std::io::Result<Option<Vec<(String, String)>>> {
    let mut pairs = Vec::new();
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Ok(None);
        }
        let value = args
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{flag} needs a value; {usage}")))?;
        pairs.push((flag, value));
    }
    Ok(Some(pairs))
}

/// A duration flag's value: `"90s"`, `"3m"`, `"1h"` or a plain number of
/// seconds; `None` when it is none of those.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let (number, unit_secs) = match text.as_bytes().last()? {
        b's' => (&text[..text.len() - 1], 1),
        b'm' => (&text[..text.len() - 1], 60),
        b'h' => (&text[..text.len() - 1], 3_600),
        _ => (text, 1),
    };
    let count = number.parse::<u64>().ok()?;
    Some(Duration::from_secs(count.checked_mul(unit_secs)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_seconds_minutes_and_hours() {
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("3m"), Some(Duration::from_secs(180)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3_600)));
        assert_eq!(parse_duration("45"), Some(Duration::from_secs(45)));
        assert_eq!(parse_duration("m"), None);
        assert_eq!(parse_duration("3x"), None);
    }
}
