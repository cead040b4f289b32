//! Raw-disk baselines, measured with plain `std::fs` calls and no Narad code,
//! so a Narad figure can be read as a ratio to what the disk allows in the
//! same run.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

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
    let path = dir.join(format!("baseline-fdatasync-{mode:?}.dat"));
    let result = measure_fdatasync(&path, mode, writes);
    let _ = fs::remove_file(&path);
    result
}

fn measure_fdatasync(path: &Path, mode: FileMode, writes: usize) -> io::Result<Latencies> {
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
    for index in 0..writes {
        let started = Instant::now();
        file.write_all_at(&block, (index * BASELINE_WRITE_BYTES) as u64)?;
        file.sync_data()?;
        latencies.record(started.elapsed());
    }
    Ok(latencies)
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
    let result = (|| {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
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
    })();
    let _ = fs::remove_file(&path);
    result
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
    fn sequential_baselines_read_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        assert!(seq_write_mb_per_s(dir.path(), 3 << 20).unwrap() > 0.0);
        let path = dir.path().join("data");
        fs::write(&path, vec![1u8; 2 << 20]).unwrap();
        assert!(seq_read_mb_per_s(&path).unwrap() > 0.0);
    }
}

/// Raw fdatasync samples taken in two halves, before and after a
/// benchmark's HTTP phases, so a burst of disk noise at one end does not
/// make the baseline: on a preallocated file and on an appended one.
#[derive(Debug, Default)]
pub struct FdatasyncBaseline {
    preallocated: Latencies,
    appended: Latencies,
}

impl FdatasyncBaseline {
    /// Takes one half: `samples / 2` writes of each kind in `dir`.
    ///
    /// # Errors
    /// When the scratch files cannot be written or synced.
    pub fn sample(&mut self, dir: &Path, samples: usize) -> io::Result<()> {
        let half = samples / 2;
        self.preallocated
            .merge(&fdatasync_4k(dir, FileMode::Preallocated, half)?);
        self.appended
            .merge(&fdatasync_4k(dir, FileMode::Appended, half)?);
        Ok(())
    }

    /// Writes the figures and their note into `report`.
    pub fn record(&mut self, report: &mut Report) {
        report.set("baseline_fdatasync_p50_us", self.preallocated.p50_us());
        report.set("baseline_fdatasync_p99_us", self.preallocated.p99_us());
        report.set("baseline_fdatasync_appended_p50_us", self.appended.p50_us());
        report.set("baseline_fdatasync_appended_p99_us", self.appended.p99_us());
        report.note(
            "baseline_fdatasync",
            "4 KiB pwrite + fdatasync, half the samples before and half after the HTTP phases; \
             baseline_fdatasync_* on a preallocated file, *_appended_* on an appended one",
        );
    }
}
