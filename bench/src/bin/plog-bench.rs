//! `plog-bench`: the partition log's commit and read costs, next to the raw
//! disk measured in the same run.
//!
//! - commit latency (p50/p99) for batches of 1, 64 and 1,000 records of
//!   256 B, against a raw 4 KiB write + fdatasync on an appended file and
//!   on a preallocated one; single-record commits also into prepared
//!   zeros (`commit_1_prepared_*`, `storage.partition_log_prealloc`);
//! - records per second with concurrent committers to one partition (they
//!   serialize on the log's writer lock; combining them is the data plane's
//!   job) and to 16 partitions;
//! - CPU per record of commits of 100 records that each carry a new
//!   idempotency key, into a log that remembers [`KEYED_PREFILL`] keys
//!   already, against the same commits without keys (issue 21's cost of
//!   keyed produce, at the partition log: the lookups of a run's keys, the
//!   keys' bytes in the frames, remembering them);
//! - sequential read MB/s of one full segment through the log, against a raw
//!   sequential read of the same file, both with its pages dropped first
//!   and after one uncounted raw read (so the host's cache below the VM
//!   treats both alike); the median of 7 reads each way, taken in turn.
//!
//! Writes `target/bench/plog.json` and `.png`, then prints one line per
//! target.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use narad_bench::baseline::{self, BASELINE_CPU_NOTE, FileMode};
use narad_bench::cpu::{process_cpu_seconds, us_per_unit};
use narad_bench::report::Report;
use narad_bench::stats::Latencies;
use narad_bench::verdict::{self, Verdict};
use narad_disk::{BackendChoice, Disk, open_backend};
use narad_plog::segment::segment_file_name;
use narad_plog::{CommitRecord, LogConfig, PartitionLog, ReadLimits};

/// The allocator `narad` runs with, so the engine is measured as it ships
/// (glibc's would map and unmap every megabyte read buffer).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Payload bytes of every record.
const RECORD_BYTES: usize = 256;
/// Samples of the raw fdatasync baseline.
const BASELINE_SAMPLES: usize = 500;
/// Commits measured per batch size.
const COMMITS_PER_SIZE: usize = 300;
/// How long each concurrency run lasts.
const CONCURRENT_RUN: Duration = Duration::from_secs(3);
/// Sequential reads of the segment, each way; the medians are reported.
const READ_ROUNDS: usize = 7;
/// Committer threads in the concurrency runs.
const COMMITTERS: usize = 16;
/// Records per commit in the concurrency runs.
const CONCURRENT_BATCH: usize = 64;
/// Records per commit in the keyed-cost runs: a batch-100 produce to one
/// partition.
const KEYED_BATCH: usize = 100;
/// Records committed before a keyed-cost run is measured, with keys when
/// the run has them: the key table is this large when measuring starts,
/// as a partition's is after 20 s of 12,500 keyed records a second.
const KEYED_PREFILL: usize = 250_000;
/// Commits measured per keyed-cost run.
const KEYED_COMMITS: usize = 2_000;
/// Keyed-cost runs each way, alternating; the medians are reported.
const KEYED_ROUNDS: usize = 3;
/// Issue 18: a sequential read through the log at least this share of a
/// raw sequential read of the same file.
const TARGET_SEQ_READ_TO_RAW: f64 = 0.6;

fn main() -> io::Result<()> {
    let scratch = narad_bench::bench_dir()?.join("plog");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    // `NARAD_DISK_BACKEND` = auto | io_uring | portable; auto by default.
    let choice = match std::env::var("NARAD_DISK_BACKEND") {
        Ok(text) => text.parse::<BackendChoice>()?,
        Err(_) => BackendChoice::Auto,
    };
    let disk = open_backend(choice)?;
    let mut report = Report::new("plog");
    report.note("backend", &disk.kind().to_string());

    let baseline = baseline::fdatasync_4k_with_cpu(&scratch, FileMode::Appended, BASELINE_SAMPLES)?;
    let mut fdatasync = baseline.latencies;
    report
        .set("baseline_fdatasync_p50_us", fdatasync.p50_us())
        .set("baseline_fdatasync_p99_us", fdatasync.p99_us())
        .set(
            "baseline_fdatasync_cpu_us",
            us_per_unit(baseline.thread_cpu_seconds, fdatasync.len() as u64),
        )
        .note("baseline_fdatasync_cpu", BASELINE_CPU_NOTE);

    let mut prepared_file =
        baseline::fdatasync_4k_with_cpu(&scratch, FileMode::Preallocated, BASELINE_SAMPLES)?
            .latencies;
    report.set("baseline_fdatasync_prealloc_p50_us", prepared_file.p50_us());

    let payload = payload();
    let mut latency_bars = vec![
        ("raw fdatasync p50".to_string(), fdatasync.p50_us()),
        ("raw prealloc p50".to_string(), prepared_file.p50_us()),
    ];
    // Single-record commits into prepared zeros
    // (`storage.partition_log_prealloc`), next to the default's appended
    // ones below.
    let prepared = LogConfig {
        prepare_bytes: narad_plog::PREPARE_BYTES,
        ..LogConfig::default()
    };
    let (mut latencies, _) = commit_latency(
        &disk,
        &scratch.join("latency-1-prepared"),
        &prepared,
        1,
        &payload,
    )?;
    let prepared_p50 = latencies.p50_us();
    report
        .set("commit_1_prepared_p50_us", prepared_p50)
        .set("commit_1_prepared_p99_us", latencies.p99_us());
    latency_bars.push(("1 rec prepared p50".into(), prepared_p50));
    for batch in [1usize, 64, 1_000] {
        let (mut latencies, records_per_s) = commit_latency(
            &disk,
            &scratch.join(format!("latency-{batch}")),
            &LogConfig::default(),
            batch,
            &payload,
        )?;
        if batch == 1 && latencies.p50_us() > 0.0 {
            report.set(
                "ratio_commit_1_prepared_to_appended_p50",
                prepared_p50 / latencies.p50_us(),
            );
        }
        report
            .set(&format!("commit_{batch}_p50_us"), latencies.p50_us())
            .set(&format!("commit_{batch}_p99_us"), latencies.p99_us())
            .set(&format!("commit_{batch}x256_records_per_s"), records_per_s);
        latency_bars.push((format!("{batch} rec p50"), latencies.p50_us()));
        latency_bars.push((format!("{batch} rec p99"), latencies.p99_us()));
    }

    let one = concurrent(&disk, &scratch.join("one"), 1, &payload)?;
    let sixteen = concurrent(&disk, &scratch.join("sixteen"), 16, &payload)?;
    report
        .set("concurrent_1_partition_records_per_s", one)
        .set("concurrent_16_partitions_records_per_s", sixteen);

    let mut cpu_without = Vec::with_capacity(KEYED_ROUNDS);
    let mut cpu_keyed = Vec::with_capacity(KEYED_ROUNDS);
    for round in 0..KEYED_ROUNDS {
        for (keyed, runs) in [(false, &mut cpu_without), (true, &mut cpu_keyed)] {
            let dir = scratch.join(format!("keyed-{keyed}-{round}"));
            runs.push(commit_cpu_per_record(&disk, &dir, &payload, keyed)?);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let (without, keyed) = (median(&mut cpu_without), median(&mut cpu_keyed));
    report
        .set("commit100_cpu_us_per_record", without)
        .set("commit100_keyed_cpu_us_per_record", keyed)
        .set(
            "ratio_commit100_cpu_keyed_to_without",
            if without > 0.0 { keyed / without } else { 0.0 },
        )
        .note(
            "commit100_keyed_runs",
            &format!("without keys {cpu_without:.2?}, keyed {cpu_keyed:.2?} (µs per record)"),
        );

    let (read_mb_per_s, baseline_read_mb_per_s) =
        sequential_read(&disk, &scratch.join("read"), &payload)?;
    report
        .set("read_mb_per_s", read_mb_per_s)
        .set("baseline_read_mb_per_s", baseline_read_mb_per_s)
        .set(
            "ratio_read_to_baseline_read",
            if baseline_read_mb_per_s > 0.0 {
                read_mb_per_s / baseline_read_mb_per_s
            } else {
                0.0
            },
        );
    let verdicts = [Verdict::at_least(
        "plog_seq_read_ratio",
        "read_mb_per_s vs 0.6 x baseline_read_mb_per_s",
        read_mb_per_s,
        TARGET_SEQ_READ_TO_RAW * baseline_read_mb_per_s,
    )];
    verdict::record_all(&mut report, &verdicts);

    let latency_bars: Vec<(&str, f64)> = latency_bars
        .iter()
        .map(|(label, value)| (label.as_str(), *value))
        .collect();
    report.bars("commit latency (256 B records)", "µs", &latency_bars);
    report.bars(
        "records per second, 16 committers",
        "records/s",
        &[("1 partition", one), ("16 partitions", sixteen)],
    );
    report.bars(
        "sequential read of one segment",
        "MB/s",
        &[
            ("through the log", read_mb_per_s),
            ("raw file", baseline_read_mb_per_s),
        ],
    );
    let path = report.write()?;
    let _ = std::fs::remove_dir_all(&scratch);
    println!(
        "{}",
        serde_json::to_string_pretty(&report.to_json()).map_err(io::Error::other)?
    );
    println!("wrote {}", path.display());
    verdict::print_summary(&verdicts);
    Ok(())
}

/// A JSON-like payload of `RECORD_BYTES`.
fn payload() -> Vec<u8> {
    let mut payload = br#"{"order":"ord_123","status":"paid","amount":4200,"note":""#.to_vec();
    payload.resize(RECORD_BYTES - 2, b'x');
    payload.extend_from_slice(b"\"}");
    payload
}

fn batch_of(payload: &[u8], count: usize) -> Vec<CommitRecord<'_>> {
    (0..count)
        .map(|_| CommitRecord::new(b"customer-42", payload, 0))
        .collect()
}

/// This process's CPU µs per record over `KEYED_COMMITS` commits of
/// `KEYED_BATCH` records, each record with a new idempotency key when
/// `keyed`, into a log at `dir` that first takes `KEYED_PREFILL` records
/// (keyed the same way), so its key table is full-sized when measuring
/// starts. Every key is new, so nothing is left out as a duplicate.
fn commit_cpu_per_record(
    disk: &Arc<dyn Disk>,
    dir: &Path,
    payload: &[u8],
    keyed: bool,
) -> io::Result<f64> {
    let log = open_log(disk, dir, LogConfig::default())?;
    let total = KEYED_PREFILL + KEYED_COMMITS * KEYED_BATCH;
    let keys: Vec<Vec<u8>> = if keyed {
        (0..total)
            .map(|i| format!("order-{i:012}-retry-safe").into_bytes())
            .collect()
    } else {
        Vec::new()
    };
    let record = |i: usize| CommitRecord {
        idempotency_key: keys.get(i).map_or(&[][..], Vec::as_slice),
        ..CommitRecord::new(b"customer-42", payload, 0)
    };
    for chunk in (0..KEYED_PREFILL).collect::<Vec<_>>().chunks(1_000) {
        let records: Vec<CommitRecord<'_>> = chunk.iter().map(|&i| record(i)).collect();
        log.commit_durable(&[&records]).map_err(to_io)?;
    }
    let runs: Vec<Vec<CommitRecord<'_>>> = (0..KEYED_COMMITS)
        .map(|commit| {
            let first = KEYED_PREFILL + commit * KEYED_BATCH;
            (first..first + KEYED_BATCH).map(record).collect()
        })
        .collect();
    let cpu_before = process_cpu_seconds();
    for records in &runs {
        log.commit_durable(&[records]).map_err(to_io)?;
    }
    let cpu = process_cpu_seconds() - cpu_before;
    log.close().map_err(to_io)?;
    Ok(us_per_unit(cpu, (KEYED_COMMITS * KEYED_BATCH) as u64))
}

/// The partition log at `dir` with `config`, on the process's clock.
fn open_log(disk: &Arc<dyn Disk>, dir: &Path, config: LogConfig) -> io::Result<PartitionLog> {
    PartitionLog::open(
        Arc::clone(disk),
        dir,
        config,
        Arc::new(narad_clock::SystemClock::new()),
    )
    .map_err(to_io)
}

fn to_io(error: narad_plog::LogError) -> io::Error {
    io::Error::other(error)
}

/// Latency of `COMMITS_PER_SIZE` commits of `batch` records, and the
/// records per second they sustained.
fn commit_latency(
    disk: &Arc<dyn Disk>,
    dir: &Path,
    config: &LogConfig,
    batch: usize,
    payload: &[u8],
) -> io::Result<(Latencies, f64)> {
    let log = open_log(disk, dir, config.clone())?;
    let records = batch_of(payload, batch);
    let mut latencies = Latencies::new();
    let started = Instant::now();
    for _ in 0..COMMITS_PER_SIZE {
        let commit_started = Instant::now();
        log.commit_durable(&[&records]).map_err(to_io)?;
        latencies.record(commit_started.elapsed());
    }
    let records_per_s = (COMMITS_PER_SIZE * batch) as f64 / started.elapsed().as_secs_f64();
    log.close().map_err(to_io)?;
    Ok((latencies, records_per_s))
}

/// Records per second with `COMMITTERS` threads spread over `partitions`
/// logs, each committing batches of `CONCURRENT_BATCH`.
fn concurrent(
    disk: &Arc<dyn Disk>,
    dir: &Path,
    partitions: usize,
    payload: &[u8],
) -> io::Result<f64> {
    let mut logs = Vec::with_capacity(partitions);
    for partition in 0..partitions {
        let log = open_log(
            disk,
            &dir.join(format!("p{partition:05}")),
            LogConfig::default(),
        )?;
        logs.push(Arc::new(log));
    }
    let payload = Arc::new(payload.to_vec());
    let started = Instant::now();
    let committers: Vec<_> = (0..COMMITTERS)
        .map(|index| {
            let log = Arc::clone(&logs[index % partitions]);
            let payload = Arc::clone(&payload);
            thread::spawn(move || -> io::Result<u64> {
                let records = batch_of(&payload, CONCURRENT_BATCH);
                let mut committed = 0u64;
                while started.elapsed() < CONCURRENT_RUN {
                    log.commit_durable(&[&records]).map_err(to_io)?;
                    committed += CONCURRENT_BATCH as u64;
                }
                Ok(committed)
            })
        })
        .collect();
    let mut total = 0u64;
    for committer in committers {
        total += committer
            .join()
            .map_err(|_| io::Error::other("committer panicked"))??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    for log in &logs {
        log.close().map_err(to_io)?;
    }
    Ok(total as f64 / elapsed)
}

/// Fills one segment, then reads it [`READ_ROUNDS`] times through the log
/// and raw, in turn, each after dropping the file's cached pages, after
/// one raw read that is not counted. Returns the medians (log MB/s, raw
/// MB/s): one read of a segment takes well under a second, where this
/// machine's hiccups do not average out.
fn sequential_read(disk: &Arc<dyn Disk>, dir: &Path, payload: &[u8]) -> io::Result<(f64, f64)> {
    let log = open_log(disk, dir, LogConfig::default())?;
    let records = batch_of(payload, 1_000);
    // Commit until the first segment rolls, so it is full and sealed.
    while log.stats().map_err(to_io)?.segments < 2 {
        log.commit_durable(&[&records]).map_err(to_io)?;
    }
    let first = dir.join(segment_file_name(0));
    let segment_bytes = std::fs::metadata(&first)?.len();
    // One raw read first, not counted: whichever read came first paid for
    // the hypervisor's cache below the VM's disk, which the log's read did.
    // After it, both reads find the same: nothing in this kernel's cache,
    // the file in the host's.
    baseline::seq_read_mb_per_s(&first)?;
    let end = {
        let names = disk.list_dir(dir)?;
        names
            .iter()
            .filter_map(|name| narad_plog::segment::parse_segment_file_name(name))
            .find(|&base| base > 0)
            .ok_or_else(|| io::Error::other("no second segment"))?
    };
    let limits = ReadLimits {
        records_max: 10_000,
        bytes_max: 16 << 20,
    };
    let mut through_log = Vec::with_capacity(READ_ROUNDS);
    let mut raw = Vec::with_capacity(READ_ROUNDS);
    for _ in 0..READ_ROUNDS {
        // The same log keeps reading: its sealed segment's index came over
        // at the roll, as in a running node.
        baseline::drop_cached_pages(&std::fs::File::open(&first)?)?;
        let started = Instant::now();
        let mut next = 0;
        let mut records_read = 0u64;
        while next < end {
            let batch = log.read(next, end, limits).map_err(to_io)?;
            records_read += batch.entries.len() as u64;
            next = batch.next_offset;
        }
        let elapsed = started.elapsed().as_secs_f64();
        assert_eq!(records_read, end, "every record of the segment was read");
        through_log.push(segment_bytes as f64 / 1e6 / elapsed);
        raw.push(baseline::seq_read_mb_per_s(&first)?);
    }
    log.close().map_err(to_io)?;
    Ok((median(&mut through_log), median(&mut raw)))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
