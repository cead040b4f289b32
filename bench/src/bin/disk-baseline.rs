//! `disk-baseline`: the raw-disk figures every other benchmark is read
//! against, on their own: 4 KiB write + fdatasync on an appended and on a
//! preallocated file, and sequential write and read bandwidth.
//!
//! Writes `target/bench/disk-baseline.json` and `.png`.

use std::io;

use narad_bench::baseline::{self, FileMode};
use narad_bench::report::Report;

/// Samples per fdatasync baseline: enough for a stable p99 in a few seconds.
const FDATASYNC_SAMPLES: usize = 2_000;
/// Bytes of the sequential baselines: large enough to leave the disk cache's
/// burst behind, small enough to run in seconds.
const SEQUENTIAL_BYTES: u64 = 256 << 20;

fn main() -> io::Result<()> {
    let dir = narad_bench::bench_dir()?;
    let mut report = Report::new("disk-baseline");
    let mut appended = baseline::fdatasync_4k(&dir, FileMode::Appended, FDATASYNC_SAMPLES)?;
    let mut prealloc = baseline::fdatasync_4k(&dir, FileMode::Preallocated, FDATASYNC_SAMPLES)?;
    let write_mb_per_s = baseline::seq_write_mb_per_s(&dir, SEQUENTIAL_BYTES)?;
    let read_path = dir.join("baseline-read.dat");
    std::fs::write(&read_path, vec![7u8; SEQUENTIAL_BYTES as usize])?;
    let read_mb_per_s = baseline::seq_read_mb_per_s(&read_path)?;
    std::fs::remove_file(&read_path)?;

    report
        .set("baseline_fdatasync_append_p50_us", appended.p50_us())
        .set("baseline_fdatasync_append_p99_us", appended.p99_us())
        .set("baseline_fdatasync_append_p999_us", appended.p999_us())
        .set("baseline_fdatasync_prealloc_p50_us", prealloc.p50_us())
        .set("baseline_fdatasync_prealloc_p99_us", prealloc.p99_us())
        .set("baseline_fdatasync_prealloc_p999_us", prealloc.p999_us())
        .set("baseline_seq_write_mb_per_s", write_mb_per_s)
        .set("baseline_seq_read_mb_per_s", read_mb_per_s);
    report.bars(
        "4 KiB write + fdatasync",
        "µs",
        &[
            ("appended p50", appended.p50_us()),
            ("appended p99", appended.p99_us()),
            ("preallocated p50", prealloc.p50_us()),
            ("preallocated p99", prealloc.p99_us()),
        ],
    );
    report.bars(
        "sequential bandwidth",
        "MB/s",
        &[("write", write_mb_per_s), ("read", read_mb_per_s)],
    );
    let path = report.write()?;
    println!(
        "{}",
        serde_json::to_string_pretty(&report.to_json()).map_err(io::Error::other)?
    );
    println!("wrote {}", path.display());
    Ok(())
}
