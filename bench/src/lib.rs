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
//! ([`stats`]), the raw-disk baselines ([`baseline`]), the report writer
//! ([`report`]) and the brokers a benchmark drives, one `narad dev`
//! ([`node`]) or a cluster of control and data nodes ([`cluster`]). Each
//! benchmark is a binary in `src/bin/`.

pub mod baseline;
pub mod cluster;
pub mod http;
pub mod node;
pub mod report;
pub mod stats;

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
