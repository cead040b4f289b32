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
//! ([`stats`]), CPU time ([`cpu`]), the raw-disk baselines ([`baseline`]),
//! the report writer ([`report`]) and its target verdicts ([`verdict`]), and
//! the brokers a benchmark drives, one `narad dev` ([`node`]) or a cluster
//! of control and data nodes ([`cluster`]). Each benchmark is a binary in
//! `src/bin/`.

pub mod baseline;
pub mod cluster;
pub mod cpu;
pub mod http;
pub mod node;
pub mod report;
pub mod stats;
pub mod verdict;

use std::path::PathBuf;

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
