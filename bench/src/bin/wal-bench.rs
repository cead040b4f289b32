//! `wal-bench`: the ingress WAL's group commit against the raw disk, in one
//! run.
//!
//! Measures, next to the same-run baseline (4 KiB write + fdatasync on an
//! appended and on a preallocated file):
//! - single-appender append latency, with segment preparation on and off;
//! - appends per second at 1, 8, 64 and 256 concurrent appenders;
//! - `append_many` of 100 and 1,000 records of 256 bytes;
//! - the io_uring backend against the portable one.
//!
//! Writes `target/bench/wal.json` and `wal.png`. Every phase is short (a
//! second or two) because the machines are shared; read the ratios, not the
//! absolute figures.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use narad_bench::baseline::{self, FileMode};
use narad_bench::report::Report;
use narad_bench::stats::Latencies;
use narad_disk::Disk;
use narad_disk::portable::PortableDisk;
use narad_disk::uring::UringDisk;
use narad_wal::segment::segment_path;
use narad_wal::{Wal, WalOptions};

/// Samples per latency figure (baselines and single appender).
const LATENCY_SAMPLES: usize = 1_000;
/// Record payload size of every phase.
const RECORD_BYTES: usize = 256;
/// How long each throughput phase runs.
const THROUGHPUT_PHASE: Duration = Duration::from_millis(1_500);
/// Segment size of the latency phases: small enough to fill past a roll
/// quickly (so the active segment is a prepared one), large enough that the
/// measured appends do not roll.
const LATENCY_SEGMENT_BYTES: u64 = 32 << 20;
/// Concurrency levels of the throughput phase.
const APPENDER_COUNTS: [usize; 4] = [1, 8, 64, 256];

fn main() -> io::Result<()> {
    let scratch = narad_bench::bench_dir()?.join("wal");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let mut report = Report::new("wal");

    let mut base_append = baseline::fdatasync_4k(&scratch, FileMode::Appended, LATENCY_SAMPLES)?;
    let mut base_prealloc =
        baseline::fdatasync_4k(&scratch, FileMode::Preallocated, LATENCY_SAMPLES)?;
    report
        .set("baseline_fdatasync_append_p50_us", base_append.p50_us())
        .set("baseline_fdatasync_append_p99_us", base_append.p99_us())
        .set("baseline_fdatasync_prealloc_p50_us", base_prealloc.p50_us())
        .set("baseline_fdatasync_prealloc_p99_us", base_prealloc.p99_us());

    let uring: Arc<dyn Disk> = Arc::new(UringDisk::new(1)?);
    let portable: Arc<dyn Disk> = Arc::new(PortableDisk::new(4)?);
    report.note("backend_main", "io_uring");

    let mut single_prealloc = single_appender(&uring, &scratch.join("single-prealloc"), true)?;
    let mut single_plain = single_appender(&uring, &scratch.join("single-plain"), false)?;
    let mut portable_single = single_appender(&portable, &scratch.join("portable-single"), false)?;
    report
        .set("single_prealloc_p50_us", single_prealloc.p50_us())
        .set("single_prealloc_p99_us", single_prealloc.p99_us())
        .set("single_no_prealloc_p50_us", single_plain.p50_us())
        .set("single_no_prealloc_p99_us", single_plain.p99_us())
        .set(
            "portable_single_no_prealloc_p50_us",
            portable_single.p50_us(),
        )
        .set(
            "portable_single_no_prealloc_p99_us",
            portable_single.p99_us(),
        );

    let mut rates = Vec::new();
    for appenders in APPENDER_COUNTS {
        let dir = scratch.join(format!("appenders-{appenders}"));
        let rate = appenders_per_s(&uring, &dir, appenders)?;
        report.set(&format!("appenders_{appenders}_per_s"), rate);
        rates.push((appenders, rate));
    }
    let portable_64 = appenders_per_s(&portable, &scratch.join("portable-64"), 64)?;
    report.set("portable_appenders_64_per_s", portable_64);

    let many_100 = append_many_records_per_s(&uring, &scratch.join("many-100"), 100)?;
    let many_1000 = append_many_records_per_s(&uring, &scratch.join("many-1000"), 1000)?;
    report
        .set("append_many_100x256_records_per_s", many_100)
        .set("append_many_1000x256_records_per_s", many_1000);

    let single_ratio_plain = single_plain.p50_us() / base_append.p50_us();
    let single_ratio_prealloc = single_prealloc.p50_us() / base_prealloc.p50_us();
    let scaling_64 = rates[2].1 / rates[0].1;
    let prealloc_gain = 1.0 - single_prealloc.p50_us() / single_plain.p50_us();
    report
        .set(
            "ratio_single_no_prealloc_to_baseline_append_p50",
            single_ratio_plain,
        )
        .set(
            "ratio_single_prealloc_to_baseline_prealloc_p50",
            single_ratio_prealloc,
        )
        .set("ratio_appenders_64_to_1", scaling_64)
        .set("prealloc_single_p50_reduction", prealloc_gain);

    report.bars(
        "p50 latency",
        "µs",
        &[
            ("raw fdatasync, appended", base_append.p50_us()),
            ("raw fdatasync, prealloc", base_prealloc.p50_us()),
            ("append, no prealloc", single_plain.p50_us()),
            ("append, prealloc", single_prealloc.p50_us()),
            ("append, portable", portable_single.p50_us()),
        ],
    );
    let rate_bars: Vec<(String, f64)> = rates
        .iter()
        .map(|(n, rate)| (format!("{n} appenders"), *rate))
        .chain([
            ("64, portable".to_string(), portable_64),
            ("append_many 100".to_string(), many_100),
            ("append_many 1000".to_string(), many_1000),
        ])
        .collect();
    let rate_refs: Vec<(&str, f64)> = rate_bars.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    report.bars("records per second", "records/s", &rate_refs);

    let path = report.write()?;
    println!(
        "{}",
        serde_json::to_string_pretty(&report.to_json()).map_err(io::Error::other)?
    );
    println!("wrote {}", path.display());
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

fn open(disk: &Arc<dyn Disk>, dir: &Path, options: WalOptions) -> io::Result<Wal> {
    Wal::open(Arc::clone(disk), dir.to_path_buf(), options).map_err(io::Error::other)
}

fn record() -> Vec<u8> {
    (0..RECORD_BYTES).map(|i| i as u8).collect()
}

/// Single-appender latency: one append at a time, each waited for. The log
/// is first filled past a roll, so with `prealloc` the measured appends go
/// into a prepared segment (and without it, into a plain appended one).
fn single_appender(disk: &Arc<dyn Disk>, dir: &Path, prealloc: bool) -> io::Result<Latencies> {
    let options = WalOptions {
        segment_bytes: LATENCY_SEGMENT_BYTES,
        prealloc,
        ..WalOptions::default()
    };
    let wal = open(disk, dir, options)?;
    fill_past_a_roll(&wal, dir, prealloc)?;
    let payload = record();
    let mut latencies = Latencies::new();
    for _ in 0..LATENCY_SAMPLES {
        let started = Instant::now();
        append_one(&wal, &payload)?;
        latencies.record(started.elapsed());
    }
    drop(wal);
    std::fs::remove_dir_all(dir)?;
    Ok(latencies)
}

/// Appends large batches until a second segment is active (and, with
/// `prealloc`, is a prepared one).
fn fill_past_a_roll(wal: &Wal, dir: &Path, prealloc: bool) -> io::Result<()> {
    let chunk = vec![0x5Au8; 1 << 20];
    let batch: Vec<&[u8]> = vec![&chunk[..]; 4];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let bases = wal.segment_bases();
        if bases.len() >= 2 {
            let active: PathBuf = segment_path(dir, bases[bases.len() - 1]);
            let size = std::fs::metadata(&active)?.len();
            if !prealloc || size == LATENCY_SEGMENT_BYTES {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(io::Error::other("no prepared segment became active"));
        }
        if prealloc && !wal.spare_ready() && bases.len() >= 2 {
            // Let the preparation thread finish before the next roll.
            thread::sleep(Duration::from_millis(20));
            continue;
        }
        wal.append_many_slices(&batch)
            .map_err(io::Error::other)?
            .wait()
            .map_err(io::Error::other)?;
    }
}

fn append_one(wal: &Wal, payload: &[u8]) -> io::Result<()> {
    wal.append(payload)
        .map_err(io::Error::other)?
        .wait()
        .map(|_| ())
        .map_err(io::Error::other)
}

/// Appends per second with `appenders` threads, each appending one record
/// at a time and waiting for it, for [`THROUGHPUT_PHASE`].
fn appenders_per_s(disk: &Arc<dyn Disk>, dir: &Path, appenders: usize) -> io::Result<f64> {
    let wal = Arc::new(open(disk, dir, WalOptions::default())?);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..appenders)
        .map(|_| {
            let (wal, stop, done) = (Arc::clone(&wal), Arc::clone(&stop), Arc::clone(&done));
            thread::spawn(move || -> io::Result<()> {
                let payload = record();
                while !stop.load(Ordering::Relaxed) {
                    append_one(&wal, &payload)?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    thread::sleep(THROUGHPUT_PHASE);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread
            .join()
            .map_err(|_| io::Error::other("appender panicked"))??;
    }
    let rate = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    drop(wal);
    std::fs::remove_dir_all(dir)?;
    Ok(rate)
}

/// Records per second of one thread appending batches of `count` × 256 B
/// with `append_many`, each batch waited for.
fn append_many_records_per_s(disk: &Arc<dyn Disk>, dir: &Path, count: usize) -> io::Result<f64> {
    let wal = open(disk, dir, WalOptions::default())?;
    let lens = vec![RECORD_BYTES; count];
    let started = Instant::now();
    let mut records = 0u64;
    while started.elapsed() < THROUGHPUT_PHASE {
        wal.append_many(&lens, |index, dst| {
            dst.fill(index as u8);
            Ok(())
        })
        .map_err(io::Error::other)?
        .wait()
        .map_err(io::Error::other)?;
        records += count as u64;
    }
    let rate = records as f64 / started.elapsed().as_secs_f64();
    drop(wal);
    std::fs::remove_dir_all(dir)?;
    Ok(rate)
}
