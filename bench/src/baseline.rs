//! Raw-disk baselines, measured with plain `std::fs` calls and no Narad code,
//! so a Narad figure can be read as a ratio to what the disk allows in the
//! same run.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use crate::cpu::{thread_cpu_seconds, us_per_unit};
use crate::report::Report;
use crate::stats::Latencies;

/// Size of one baseline write: one page, the smallest write a WAL flush makes.
pub const BASELINE_WRITE_BYTES: usize = 4096;

/// Chunk of the sequential bandwidth baselines.
const SEQUENTIAL_CHUNK_BYTES: usize = 1 << 20;

/// How the file behind a baseline fdatasync is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileMode {
    /// Each write extends the file, so each fdatasync also commits the new
    /// size (on ext4, through the journal).
    Appended,
    /// The file was zero-filled and synced first; writes overwrite allocated
    /// blocks and fdatasync changes no metadata.
    Preallocated,
}

/// Latency of `writes` × (4 KiB `pwrite` + `fdatasync`) into a fresh file in
/// `dir`.
///
/// # Errors
/// Any I/O error; the scratch file is removed either way.
pub fn fdatasync_4k(dir: &Path, mode: FileMode, writes: usize) -> io::Result<Latencies> {
    Ok(fdatasync_4k_with_cpu(dir, mode, writes)?.latencies)
}

/// What [`fdatasync_4k_with_cpu`] measured.
#[derive(Debug, Clone, Default)]
pub struct FdatasyncSamples {
    /// One latency per write + fdatasync.
    pub latencies: Latencies,
    /// CPU seconds (user + system) the calling thread spent in the writes
    /// and fdatasyncs, the file's creation and preallocation left out. Work
    /// the kernel hands to its own threads (the ext4 journal's commit in
    /// jbd2, writeback kworkers) is not in it.
    pub thread_cpu_seconds: f64,
}

/// As [`fdatasync_4k`], with the calling thread's CPU time across the
/// writes.
///
/// # Errors
/// Any I/O error; the scratch file is removed either way.
pub fn fdatasync_4k_with_cpu(
    dir: &Path,
    mode: FileMode,
    writes: usize,
) -> io::Result<FdatasyncSamples> {
    let path = dir.join(format!("baseline-fdatasync-{mode:?}.dat"));
    let result = measure_fdatasync(&path, mode, writes);
    let _ = fs::remove_file(&path);
    result
}

fn measure_fdatasync(path: &Path, mode: FileMode, writes: usize) -> io::Result<FdatasyncSamples> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    if mode == FileMode::Preallocated {
        write_zeros(&file, (writes * BASELINE_WRITE_BYTES) as u64)?;
        file.sync_all()?;
    }
    let block = vec![0xA5u8; BASELINE_WRITE_BYTES];
    let mut latencies = Latencies::new();
    let cpu_before = thread_cpu_seconds();
    for index in 0..writes {
        let started = Instant::now();
        file.write_all_at(&block, (index * BASELINE_WRITE_BYTES) as u64)?;
        file.sync_data()?;
        latencies.record(started.elapsed());
    }
    Ok(FdatasyncSamples {
        latencies,
        thread_cpu_seconds: thread_cpu_seconds() - cpu_before,
    })
}

fn write_zeros(file: &File, bytes: u64) -> io::Result<()> {
    let zeros = vec![0u8; SEQUENTIAL_CHUNK_BYTES];
    let mut offset = 0;
    while offset < bytes {
        let len = (bytes - offset).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..len], offset)?;
        offset += len as u64;
    }
    Ok(())
}

/// Sequential write bandwidth: `bytes` in 1 MiB writes, then one fdatasync,
/// in MB/s (10^6 bytes per second).
///
/// # Errors
/// Any I/O error; the scratch file is removed either way.
pub fn seq_write_mb_per_s(dir: &Path, bytes: u64) -> io::Result<f64> {
    let path = dir.join("baseline-seq-write.dat");
    let result = write_sequentially(&path, bytes);
    let _ = fs::remove_file(&path);
    result
}

/// Sequential bandwidth of one file, written and then read back.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SequentialRates {
    /// As [`seq_write_mb_per_s`]: 1 MiB writes, then one fdatasync.
    pub write_mb_per_s: f64,
    /// As [`seq_read_mb_per_s`]: 1 MiB reads after the file's cached
    /// pages were dropped.
    pub read_mb_per_s: f64,
}

/// Writes `bytes` to a fresh file in `dir` as [`seq_write_mb_per_s`]
/// does, then reads it back as [`seq_read_mb_per_s`] does: the disk's
/// sequential rates for a file of that size, both directions.
///
/// # Errors
/// Any I/O error; the scratch file is removed either way.
pub fn seq_write_and_read(dir: &Path, bytes: u64) -> io::Result<SequentialRates> {
    let path = dir.join("baseline-seq-write-read.dat");
    let result = write_sequentially(&path, bytes).and_then(|write_mb_per_s| {
        Ok(SequentialRates {
            write_mb_per_s,
            read_mb_per_s: seq_read_mb_per_s(&path)?,
        })
    });
    let _ = fs::remove_file(&path);
    result
}

/// Writes `bytes` to a fresh file at `path` in 1 MiB writes and syncs it;
/// the rate in MB/s.
fn write_sequentially(path: &Path, bytes: u64) -> io::Result<f64> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let chunk = vec![0x5Au8; SEQUENTIAL_CHUNK_BYTES];
    let started = Instant::now();
    let mut offset = 0;
    while offset < bytes {
        let len = (bytes - offset).min(chunk.len() as u64) as usize;
        file.write_all_at(&chunk[..len], offset)?;
        offset += len as u64;
    }
    file.sync_data()?;
    Ok(mb_per_s(bytes, started.elapsed().as_secs_f64()))
}

/// Sequential read bandwidth of an existing file in 1 MiB reads, after
/// asking the kernel to drop the file's cached pages, in MB/s.
///
/// # Errors
/// Any I/O error.
pub fn seq_read_mb_per_s(path: &Path) -> io::Result<f64> {
    let file = File::open(path)?;
    drop_cached_pages(&file)?;
    let mut chunk = vec![0u8; SEQUENTIAL_CHUNK_BYTES];
    let started = Instant::now();
    let mut offset = 0u64;
    loop {
        let read = file.read_at(&mut chunk, offset)?;
        if read == 0 {
            break;
        }
        offset += read as u64;
    }
    Ok(mb_per_s(offset, started.elapsed().as_secs_f64()))
}

/// Asks the kernel to forget the file's clean cached pages, so a following
/// read measures the disk rather than memory. Dirty pages are synced first.
/// It needs no root (`posix_fadvise(DONTNEED)` on any file the process can
/// open, where writing `/proc/sys/vm/drop_caches` needs it), and it
/// reaches only this kernel's page cache: a hypervisor that caches the
/// virtual disk below it can still answer from memory.
///
/// # Errors
/// When the sync or the advice fails.
pub fn drop_cached_pages(file: &File) -> io::Result<()> {
    file.sync_all()?;
    rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed).map_err(io::Error::from)
}

fn mb_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        0.0
    } else {
        bytes as f64 / 1e6 / seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdatasync_baseline_records_one_sample_per_write_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [FileMode::Appended, FileMode::Preallocated] {
            let latencies = fdatasync_4k(dir.path(), mode, 5).unwrap();
            assert_eq!(latencies.len(), 5);
        }
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn fdatasync_baseline_reports_the_thread_cpu_per_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut baseline = FdatasyncBaseline::default();
        assert_eq!(baseline.cpu_us(), 0.0);
        baseline.sample(dir.path(), 4).unwrap();
        baseline.sample(dir.path(), 4).unwrap();
        assert!(baseline.cpu_us() > 0.0);
        let mut report = Report::new("unit");
        baseline.record(&mut report);
        assert_eq!(
            report.get("baseline_fdatasync_cpu_us"),
            Some(baseline.cpu_us())
        );
    }

    #[test]
    fn sequential_baselines_read_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        assert!(seq_write_mb_per_s(dir.path(), 3 << 20).unwrap() > 0.0);
        let path = dir.path().join("data");
        fs::write(&path, vec![1u8; 2 << 20]).unwrap();
        assert!(seq_read_mb_per_s(&path).unwrap() > 0.0);
    }

    #[test]
    fn write_and_read_baseline_measures_both_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let rates = seq_write_and_read(dir.path(), 3 << 20).unwrap();
        assert!(rates.write_mb_per_s > 0.0);
        assert!(rates.read_mb_per_s > 0.0);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}

/// Raw fdatasync samples taken in two halves, before and after a
/// benchmark's HTTP phases, so a burst of disk noise at one end does not
/// make the baseline: on a preallocated file and on an appended one, with
/// the calling thread's CPU time across all of them.
#[derive(Debug, Default)]
pub struct FdatasyncBaseline {
    preallocated: Latencies,
    appended: Latencies,
    thread_cpu_seconds: f64,
}

impl FdatasyncBaseline {
    /// Takes one half: `samples / 2` writes of each kind in `dir`.
    ///
    /// # Errors
    /// When the scratch files cannot be written or synced.
    pub fn sample(&mut self, dir: &Path, samples: usize) -> io::Result<()> {
        let half = samples / 2;
        for (mode, into) in [
            (FileMode::Preallocated, &mut self.preallocated),
            (FileMode::Appended, &mut self.appended),
        ] {
            let taken = fdatasync_4k_with_cpu(dir, mode, half)?;
            into.merge(&taken.latencies);
            self.thread_cpu_seconds += taken.thread_cpu_seconds;
        }
        Ok(())
    }

    /// CPU µs of one write + fdatasync on the calling thread, averaged over
    /// every sample of both kinds; 0 before any sample.
    pub fn cpu_us(&self) -> f64 {
        let writes = self.preallocated.len() + self.appended.len();
        us_per_unit(self.thread_cpu_seconds, writes as u64)
    }

    /// Writes the figures and their notes into `report`.
    pub fn record(&mut self, report: &mut Report) {
        report.set("baseline_fdatasync_p50_us", self.preallocated.p50_us());
        report.set("baseline_fdatasync_p99_us", self.preallocated.p99_us());
        report.set("baseline_fdatasync_appended_p50_us", self.appended.p50_us());
        report.set("baseline_fdatasync_appended_p99_us", self.appended.p99_us());
        report.set("baseline_fdatasync_cpu_us", self.cpu_us());
        report.note(
            "baseline_fdatasync",
            "4 KiB pwrite + fdatasync, half the samples before and half after the HTTP phases; \
             baseline_fdatasync_* on a preallocated file, *_appended_* on an appended one",
        );
        report.note("baseline_fdatasync_cpu", BASELINE_CPU_NOTE);
    }
}

/// What `baseline_fdatasync_cpu_us` counts, for every report that holds it.
pub const BASELINE_CPU_NOTE: &str = "baseline_fdatasync_cpu_us: CPU (user + system) of the calling thread per 4 KiB pwrite + \
     fdatasync, averaged over every sample; only that thread is counted, so work the kernel \
     does in its own threads (jbd2's journal commit, writeback kworkers) is not, neither here \
     nor in narad's CPU figures";
