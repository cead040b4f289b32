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
//! With each it reports CPU per append of this whole process (the WAL's and
//! the storage backend's threads and the appending ones), and the CPU one raw
//! write + fdatasync costs its thread.
//!
//! Writes `target/bench/wal.json` and `wal.png`, then prints one line per
//! target. The machines are shared and noisy, so latency samples are taken
//! in rounds that interleave the baselines with the WAL (noise hits both
//! alike), and each throughput figure is the median of three short runs.
//! Read the ratios, not the absolute figures.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use narad_bench::baseline::{self, BASELINE_CPU_NOTE, FileMode};
use narad_bench::cpu::{process_cpu_seconds, us_per_unit};
use narad_bench::report::Report;
use narad_bench::stats::Latencies;
use narad_bench::verdict::{self, Verdict};
use narad_disk::portable::PortableDisk;
use narad_disk::uring::UringDisk;
use narad_disk::{Disk, FileHandle, IoBuf, OpenOptions};
use narad_wal::segment::segment_path;
use narad_wal::{Wal, WalOptions};

/// Samples per latency figure (baselines and single appender).
const LATENCY_SAMPLES: usize = 1_000;
/// Record payload size of every phase.
const RECORD_BYTES: usize = 256;
/// A payload whose frame is exactly one 4 KiB page, to compare like with
/// like against the 4 KiB baseline writes.
const PAGE_FRAME_PAYLOAD_BYTES: usize = 4096 - narad_wal::frame::FRAME_HEADER_BYTES;
/// Rounds the latency samples are split into, interleaving the series.
const LATENCY_ROUNDS: usize = 25;
/// How long each throughput run lasts.
const THROUGHPUT_PHASE: Duration = Duration::from_millis(500);
/// Runs per throughput figure; the median is reported.
const THROUGHPUT_ROUNDS: usize = 3;
/// Segment size of the latency phases: small enough to fill past a roll
/// quickly (so the active segment is a prepared one), large enough that the
/// measured appends do not roll.
const LATENCY_SEGMENT_BYTES: u64 = 32 << 20;
/// Concurrency levels of the throughput phase.
const APPENDER_COUNTS: [usize; 4] = [1, 8, 64, 256];
/// Issue 18: a single append's p50 (prealloc) at most this many raw
/// fdatasync p50s on a preallocated file, same run.
const TARGET_SINGLE_PREALLOC_TO_FDATASYNC: f64 = 1.2;

fn main() -> io::Result<()> {
    let scratch = narad_bench::bench_dir()?.join("wal");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let mut report = Report::new("wal");
    report.note("backend_main", "io_uring");
    report.note(
        "method",
        "latency phases interleave baseline and WAL samples in rounds; throughput figures are the median of rounds",
    );
    report.note(
        "cpu_per_append",
        "*_cpu_us_per_append: CPU (user + system) of this whole process across the appends, \
         over their count: the WAL's sync and preparation threads, the storage backend's threads \
         (io_uring's io-wq workers among them) and the appending threads; the kernel's own \
         threads (jbd2, kworkers) are not counted. In the throughput runs it is the run whose \
         rate is the median",
    );
    report.note("baseline_fdatasync_cpu", BASELINE_CPU_NOTE);
    let uring: Arc<dyn Disk> = Arc::new(UringDisk::new(1)?);
    let portable: Arc<dyn Disk> = Arc::new(PortableDisk::new(4)?);

    let LatencyRounds {
        series: mut latency,
        cpu_seconds: latency_cpu,
        baseline_cpu_seconds,
    } = latency_rounds(&uring, &portable, &scratch)?;
    let rates: Vec<(usize, Throughput)> = APPENDER_COUNTS
        .iter()
        .map(|&n| {
            let dir = scratch.join(format!("appenders-{n}"));
            Ok((n, median_of_rounds(|| appenders_per_s(&uring, &dir, n))?))
        })
        .collect::<io::Result<_>>()?;
    let portable_64 =
        median_of_rounds(|| appenders_per_s(&portable, &scratch.join("portable-64"), 64))?.per_s;
    let many_100 =
        median_of_rounds(|| append_many_records_per_s(&uring, &scratch.join("many-100"), 100))?
            .per_s;
    let many_1000 =
        median_of_rounds(|| append_many_records_per_s(&uring, &scratch.join("many-1000"), 1000))?
            .per_s;

    let [
        base_append,
        base_prealloc,
        single_plain,
        single_prealloc,
        portable_single,
        prealloc_page,
        trait_append,
        trait_prealloc,
        portable_prealloc_single,
    ] = &mut latency;
    let cpu_us_per_sample =
        |cpu_seconds: f64, samples: &Latencies| us_per_unit(cpu_seconds, samples.len() as u64);
    report
        .set(
            "baseline_fdatasync_cpu_us",
            us_per_unit(
                baseline_cpu_seconds,
                (base_append.len() + base_prealloc.len()) as u64,
            ),
        )
        .set(
            "single_no_prealloc_cpu_us_per_append",
            cpu_us_per_sample(latency_cpu[2], single_plain),
        )
        .set(
            "single_prealloc_cpu_us_per_append",
            cpu_us_per_sample(latency_cpu[3], single_prealloc),
        )
        .set("baseline_fdatasync_append_p50_us", base_append.p50_us())
        .set("baseline_fdatasync_append_p99_us", base_append.p99_us())
        .set("baseline_fdatasync_prealloc_p50_us", base_prealloc.p50_us())
        .set("baseline_fdatasync_prealloc_p99_us", base_prealloc.p99_us())
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
        )
        .set(
            "portable_single_prealloc_p50_us",
            portable_prealloc_single.p50_us(),
        )
        .set(
            "portable_prealloc_single_p50_reduction",
            1.0 - portable_prealloc_single.p50_us() / portable_single.p50_us(),
        )
        .set("disk_trait_append_p50_us", trait_append.p50_us())
        .set("disk_trait_prealloc_p50_us", trait_prealloc.p50_us())
        .set("single_prealloc_4k_frame_p50_us", prealloc_page.p50_us())
        .set("single_prealloc_4k_frame_p99_us", prealloc_page.p99_us());
    for (appenders, rate) in &rates {
        report.set(&format!("appenders_{appenders}_per_s"), rate.per_s);
        report.set(
            &format!("appenders_{appenders}_cpu_us_per_append"),
            rate.cpu_us_per_record,
        );
    }
    report
        .set("portable_appenders_64_per_s", portable_64)
        .set("append_many_100x256_records_per_s", many_100)
        .set("append_many_1000x256_records_per_s", many_1000)
        .set(
            "ratio_single_no_prealloc_to_baseline_append_p50",
            single_plain.p50_us() / base_append.p50_us(),
        )
        .set(
            "ratio_single_prealloc_to_baseline_prealloc_p50",
            single_prealloc.p50_us() / base_prealloc.p50_us(),
        )
        .set(
            "ratio_appenders_64_to_1",
            rates[2].1.per_s / rates[0].1.per_s,
        )
        .set(
            "prealloc_single_p50_reduction",
            1.0 - single_prealloc.p50_us() / single_plain.p50_us(),
        );
    let verdicts = [Verdict::at_most(
        "wal_single_prealloc_ratio",
        "single_prealloc_p50_us vs 1.2 x baseline_fdatasync_prealloc_p50_us",
        single_prealloc.p50_us(),
        TARGET_SINGLE_PREALLOC_TO_FDATASYNC * base_prealloc.p50_us(),
    )];
    verdict::record_all(&mut report, &verdicts);

    report.bars(
        "p50 latency",
        "µs",
        &[
            ("raw fdatasync, appended", base_append.p50_us()),
            ("raw fdatasync, prealloc", base_prealloc.p50_us()),
            ("append, no prealloc", single_plain.p50_us()),
            ("append, prealloc", single_prealloc.p50_us()),
            ("append, portable", portable_single.p50_us()),
            ("append 4 KiB frame, prealloc", prealloc_page.p50_us()),
            (
                "append, prealloc, portable",
                portable_prealloc_single.p50_us(),
            ),
            ("Disk trait 4 KiB, appended", trait_append.p50_us()),
            ("Disk trait 4 KiB, prealloc", trait_prealloc.p50_us()),
        ],
    );
    let rate_bars: Vec<(String, f64)> = rates
        .iter()
        .map(|(n, rate)| (format!("{n} appenders"), rate.per_s))
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
    verdict::print_summary(&verdicts);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// What [`latency_rounds`] measured.
struct LatencyRounds {
    /// The latency series, in the order [`latency_rounds`] lists them.
    series: [Latencies; 9],
    /// CPU seconds of this whole process across each WAL and `Disk` trait
    /// series (0 for the two raw baselines, see `baseline_cpu_seconds`).
    cpu_seconds: [f64; 9],
    /// CPU seconds of the calling thread across the raw baselines' writes,
    /// both kinds together.
    baseline_cpu_seconds: f64,
}

/// A rate of one throughput run, with the CPU of this whole process per
/// record across it.
#[derive(Clone, Copy, Debug)]
struct Throughput {
    per_s: f64,
    cpu_us_per_record: f64,
}

/// Runs `sample`, adding this process's CPU time across it to
/// `cpu_seconds`.
fn with_process_cpu(
    cpu_seconds: &mut f64,
    sample: impl FnOnce() -> io::Result<()>,
) -> io::Result<()> {
    let before = process_cpu_seconds();
    sample()?;
    *cpu_seconds += process_cpu_seconds() - before;
    Ok(())
}

/// The latency series, sampled in interleaved rounds so that noise on the
/// shared machine hits baseline and WAL alike: raw fdatasync appended and
/// preallocated; the WAL without and with prealloc (io_uring); the WAL on
/// the portable backend; the WAL with prealloc writing one-page frames;
/// 4 KiB write + fdatasync through the `Disk` trait (io_uring, no WAL) on an
/// appended and a preallocated file; the WAL with prealloc on portable. With
/// each WAL and `Disk` trait series, this process's CPU time across it; with
/// the raw baselines, the calling thread's.
fn latency_rounds(
    uring: &Arc<dyn Disk>,
    portable: &Arc<dyn Disk>,
    scratch: &Path,
) -> io::Result<LatencyRounds> {
    let plain_dir = scratch.join("single-plain");
    let prealloc_dir = scratch.join("single-prealloc");
    let portable_dir = scratch.join("single-portable");
    let plain = open_filled(uring, &plain_dir, false)?;
    let prealloc = open_filled(uring, &prealloc_dir, true)?;
    let portable_wal = open_filled(portable, &portable_dir, false)?;
    let portable_prealloc_dir = scratch.join("single-portable-prealloc");
    let portable_prealloc = open_filled(portable, &portable_prealloc_dir, true)?;
    let page_dir = scratch.join("single-prealloc-page");
    let page = open_filled(uring, &page_dir, true)?;
    let mut series: [Latencies; 9] = Default::default();
    let mut cpu: [f64; 9] = [0.0; 9];
    let mut baseline_cpu_seconds = 0.0;
    let trait_append = scratch.join("disk-trait-append.dat");
    let trait_prealloc = scratch.join("disk-trait-prealloc.dat");
    let appended_file = uring.open(&trait_append, OpenOptions::CREATE)?;
    let prealloc_file = uring.open(&trait_prealloc, OpenOptions::CREATE)?;
    zero_fill(&prealloc_file, (LATENCY_SAMPLES * 4096) as u64)?;
    let mut trait_offsets = [0u64; 2];
    let per_round = LATENCY_SAMPLES / LATENCY_ROUNDS;
    for _ in 0..LATENCY_ROUNDS {
        for (index, mode) in [(0, FileMode::Appended), (1, FileMode::Preallocated)] {
            let taken = baseline::fdatasync_4k_with_cpu(scratch, mode, per_round)?;
            series[index].merge(&taken.latencies);
            baseline_cpu_seconds += taken.thread_cpu_seconds;
        }
        let [_, _, s2, s3, s4, s5, s6, s7, s8] = &mut series;
        let [_, _, c2, c3, c4, c5, c6, c7, c8] = &mut cpu;
        with_process_cpu(c2, || sample_appends(&plain, per_round, s2))?;
        with_process_cpu(c3, || sample_appends(&prealloc, per_round, s3))?;
        with_process_cpu(c4, || sample_appends(&portable_wal, per_round, s4))?;
        with_process_cpu(c5, || {
            sample_sized_appends(&page, PAGE_FRAME_PAYLOAD_BYTES, per_round, s5)
        })?;
        with_process_cpu(c6, || {
            sample_disk_trait(&appended_file, &mut trait_offsets[0], per_round, s6)
        })?;
        with_process_cpu(c7, || {
            sample_disk_trait(&prealloc_file, &mut trait_offsets[1], per_round, s7)
        })?;
        with_process_cpu(c8, || sample_appends(&portable_prealloc, per_round, s8))?;
    }
    drop((appended_file, prealloc_file));
    std::fs::remove_file(&trait_append)?;
    std::fs::remove_file(&trait_prealloc)?;
    drop((plain, prealloc, portable_wal, page, portable_prealloc));
    for dir in [
        plain_dir,
        prealloc_dir,
        portable_dir,
        page_dir,
        portable_prealloc_dir,
    ] {
        std::fs::remove_dir_all(dir)?;
    }
    Ok(LatencyRounds {
        series,
        cpu_seconds: cpu,
        baseline_cpu_seconds,
    })
}

/// The run with the median rate of [`THROUGHPUT_ROUNDS`] runs of a rate
/// measurement.
fn median_of_rounds(mut measure: impl FnMut() -> io::Result<Throughput>) -> io::Result<Throughput> {
    let mut rates = (0..THROUGHPUT_ROUNDS)
        .map(|_| measure())
        .collect::<io::Result<Vec<Throughput>>>()?;
    rates.sort_by(|a, b| a.per_s.total_cmp(&b.per_s));
    Ok(rates[rates.len() / 2])
}

fn open(disk: &Arc<dyn Disk>, dir: &Path, options: WalOptions) -> io::Result<Wal> {
    Wal::open(Arc::clone(disk), dir.to_path_buf(), options).map_err(io::Error::other)
}

fn record() -> Vec<u8> {
    (0..RECORD_BYTES).map(|i| i as u8).collect()
}

/// Zero-fills and syncs `len` bytes of `file`, as a preallocated baseline.
fn zero_fill(file: &FileHandle, len: u64) -> io::Result<()> {
    let mut zeros = IoBuf::with_capacity(1 << 20);
    zeros.extend_zeros(1 << 20);
    let mut offset = 0;
    while offset < len {
        zeros = file.write_at(offset, zeros).wait()?;
        offset += 1 << 20;
    }
    file.fdatasync().wait()
}

/// 4 KiB write + fdatasync through the `Disk` trait (io_uring), no WAL: the
/// backend's own cost, to tell it apart from the WAL's.
fn sample_disk_trait(
    file: &FileHandle,
    offset: &mut u64,
    count: usize,
    into: &mut Latencies,
) -> io::Result<()> {
    let mut block = IoBuf::with_capacity(4096);
    block.extend_zeros(4096);
    for _ in 0..count {
        let started = Instant::now();
        block = file.write_at(*offset, block).wait()?;
        file.fdatasync().wait()?;
        into.record(started.elapsed());
        *offset += 4096;
    }
    Ok(())
}

/// Opens a log for single-appender latency, filled past a roll so that with
/// `prealloc` the measured appends go into a prepared segment (and without
/// it, into a plain appended one).
fn open_filled(disk: &Arc<dyn Disk>, dir: &Path, prealloc: bool) -> io::Result<Wal> {
    let options = WalOptions {
        segment_bytes: LATENCY_SEGMENT_BYTES,
        prealloc,
        ..WalOptions::default()
    };
    let wal = open(disk, dir, options)?;
    fill_past_a_roll(&wal, dir, prealloc)?;
    Ok(wal)
}

/// `count` appends of one record at a time, each waited for.
fn sample_appends(wal: &Wal, count: usize, into: &mut Latencies) -> io::Result<()> {
    sample_sized_appends(wal, RECORD_BYTES, count, into)
}

/// As [`sample_appends`], with payloads of `len` bytes.
fn sample_sized_appends(
    wal: &Wal,
    len: usize,
    count: usize,
    into: &mut Latencies,
) -> io::Result<()> {
    let payload = vec![0x3Cu8; len];
    for _ in 0..count {
        let started = Instant::now();
        append_one(wal, &payload)?;
        into.record(started.elapsed());
    }
    Ok(())
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
fn appenders_per_s(disk: &Arc<dyn Disk>, dir: &Path, appenders: usize) -> io::Result<Throughput> {
    let wal = Arc::new(open(disk, dir, WalOptions::default())?);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let cpu_before = process_cpu_seconds();
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
    let appends = done.load(Ordering::Relaxed);
    let rate = Throughput {
        per_s: appends as f64 / started.elapsed().as_secs_f64(),
        cpu_us_per_record: us_per_unit(process_cpu_seconds() - cpu_before, appends),
    };
    drop(wal);
    std::fs::remove_dir_all(dir)?;
    Ok(rate)
}

/// Records per second of one thread appending batches of `count` × 256 B
/// with `append_many`, each batch waited for.
fn append_many_records_per_s(
    disk: &Arc<dyn Disk>,
    dir: &Path,
    count: usize,
) -> io::Result<Throughput> {
    let wal = open(disk, dir, WalOptions::default())?;
    let lens = vec![RECORD_BYTES; count];
    let cpu_before = process_cpu_seconds();
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
    let rate = Throughput {
        per_s: records as f64 / started.elapsed().as_secs_f64(),
        cpu_us_per_record: us_per_unit(process_cpu_seconds() - cpu_before, records),
    };
    drop(wal);
    std::fs::remove_dir_all(dir)?;
    Ok(rate)
}
