//! How long one writer waits for a 4 KiB write made durable, per backend and
//! per way of asking: a measurement, not a check. Ignored by default; run it
//! alone, in release, on a real file system:
//!
//! ```text
//! cargo test -p narad-disk --release --test sync_latency -- --ignored --nocapture
//! ```
//!
//! Files go to `target/bench/scratch` (override with `NARAD_SCRATCH`), not
//! `/tmp`, which may be a tmpfs where fdatasync costs nothing.
//! `NARAD_ROUNDS` (default 3) sets how many rounds run; each prints its own
//! figures and the end prints the median of each figure over the rounds.
//! The series of a round run interleaved, so they share the machine's load.

// Outside `#[test]` functions clippy's allow-unwrap-in-tests does not reach;
// a failed unwrap here is a failed measurement.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use narad_disk::portable::PortableDisk;
use narad_disk::uring::{DirectSync, RingOptions, UringDisk};
use narad_disk::{Disk, FileHandle, IoBuf, OpenOptions};

/// Durable writes per series, each waited for before the next.
const WRITES: u64 = 2_000;
/// Bytes per write.
const WRITE_BYTES: usize = 4096;
/// Writes one series makes before the next series takes its turn: series
/// interleave in slices, so a change in the machine's load hits all alike.
const SLICE_WRITES: u64 = 20;
const _: () = assert!(WRITES.is_multiple_of(SLICE_WRITES));

#[derive(Clone, Copy, Debug)]
enum Ask {
    /// `pwrite` and `fdatasync` on the measuring thread itself: the floor.
    Raw,
    /// `write_at`, wait, `fdatasync`, wait.
    WriteThenSync,
    /// `write_and_sync`, wait.
    WriteAndSync,
    /// `write_and_sync_now`: on the calling thread.
    Now,
    /// `write_and_sync` asked by a relay thread that the measuring thread
    /// hands the buffer to and waits for: the portable backend with two more
    /// thread hand-offs, the same count as io_uring's relay through its
    /// storage thread and the kernel's worker.
    Relayed,
}

type RelayJob = (u64, IoBuf, mpsc::Sender<IoBuf>);

/// Starts a thread that runs `write_and_sync` on `file` for each job.
fn relay(file: FileHandle) -> mpsc::Sender<RelayJob> {
    let (jobs, queue) = mpsc::channel::<RelayJob>();
    thread::spawn(move || {
        for (offset, buf, reply) in queue {
            let buf = file.write_and_sync(offset, buf).wait().unwrap();
            reply.send(buf).unwrap();
        }
    });
    jobs
}

/// A series' label, its disk, and how it asks (with `O_DIRECT` or not).
type Variant = (&'static str, Arc<dyn Disk>, (Ask, bool));

#[derive(Clone, Copy, Debug)]
enum Layout {
    /// Each write extends the file.
    Append,
    /// Each write overwrites a zero-filled, synced region.
    Preallocated,
}

/// One way of making a write durable, with its file and what it measured.
struct Series {
    label: String,
    ask: Ask,
    file: FileHandle,
    raw: fs::File,
    path: PathBuf,
    buf: Option<IoBuf>,
    relay: Option<mpsc::Sender<RelayJob>>,
    latencies: Vec<Duration>,
    /// Process CPU (every thread: storage threads and io-wq workers too)
    /// spent during this series' slices.
    cpu: Duration,
}

/// User plus system CPU of the whole process so far.
fn process_cpu() -> Duration {
    // SAFETY: `getrusage` only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

impl Series {
    fn new(
        label: &str,
        disk: &dyn Disk,
        (ask, direct_io): (Ask, bool),
        path: PathBuf,
        layout: Layout,
    ) -> Self {
        let _ = fs::remove_file(&path);
        let options = OpenOptions {
            create: true,
            direct_io,
        };
        let file = disk.open(&path, options).unwrap();
        if let Layout::Preallocated = layout {
            let zeros = IoBuf::from_slice(&vec![0; WRITE_BYTES * WRITES as usize]);
            file.write_at(0, zeros).wait().unwrap();
            file.fdatasync().wait().unwrap();
        }
        let mut raw_options = fs::OpenOptions::new();
        raw_options.write(true);
        if direct_io {
            raw_options.custom_flags(libc::O_DIRECT);
        }
        let raw = raw_options.open(&path).unwrap();
        let mut buf = IoBuf::with_capacity(WRITE_BYTES);
        buf.extend_from_slice(&[0xA5; WRITE_BYTES]);
        let relay = matches!(ask, Ask::Relayed).then(|| relay(file.clone()));
        Self {
            label: label.to_string(),
            ask,
            relay,
            file,
            raw,
            path,
            buf: Some(buf),
            latencies: Vec::with_capacity(WRITES as usize),
            cpu: Duration::ZERO,
        }
    }

    fn run_slice(&mut self) {
        let cpu = process_cpu();
        self.run_writes();
        self.cpu += process_cpu().saturating_sub(cpu);
    }

    fn run_writes(&mut self) {
        for _ in 0..SLICE_WRITES {
            let offset = self.latencies.len() as u64 * WRITE_BYTES as u64;
            let buf = self.buf.take().unwrap();
            let started = Instant::now();
            let buf = match self.ask {
                Ask::Raw => {
                    self.raw.write_all_at(&buf, offset).unwrap();
                    self.raw.sync_data().unwrap();
                    buf
                }
                Ask::WriteThenSync => {
                    let buf = self.file.write_at(offset, buf).wait().unwrap();
                    self.file.fdatasync().wait().unwrap();
                    buf
                }
                Ask::WriteAndSync => self.file.write_and_sync(offset, buf).wait().unwrap(),
                Ask::Now => self.file.write_and_sync_now(offset, buf).unwrap(),
                Ask::Relayed => {
                    let (reply, answer) = mpsc::channel();
                    let relay = self.relay.as_ref().unwrap();
                    relay.send((offset, buf, reply)).unwrap();
                    answer.recv().unwrap()
                }
            };
            self.latencies.push(started.elapsed());
            self.buf = Some(buf);
        }
    }

    /// Prints p50, p90, p99 and process CPU per write in microseconds and
    /// returns them.
    fn report(mut self, round: usize, layout: Layout) -> [u128; 4] {
        self.latencies.sort_unstable();
        let micros = |per_mille: usize| {
            let at = (self.latencies.len() * per_mille / 1000).min(self.latencies.len() - 1);
            self.latencies[at].as_micros()
        };
        let cpu_per_write = self.cpu.as_micros() / self.latencies.len() as u128;
        let figures = [micros(500), micros(900), micros(990), cpu_per_write];
        println!(
            "{round:<5} {:<12} {:<24} {:<14} {:>6} {:>6} {:>6} {:>6}",
            format!("{layout:?}"),
            self.label,
            format!("{:?}", self.ask),
            figures[0],
            figures[1],
            figures[2],
            figures[3],
        );
        drop(self.relay);
        drop(self.file);
        fs::remove_file(&self.path).unwrap();
        figures
    }
}

fn scratch_dir() -> PathBuf {
    let dir = std::env::var_os("NARAD_SCRATCH").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench/scratch"),
        PathBuf::from,
    );
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
#[ignore = "a measurement; run alone with --release --ignored --nocapture"]
fn durable_4k_write_latency_per_backend() {
    let dir = scratch_dir();
    let portable: Arc<dyn Disk> = Arc::new(PortableDisk::new(4).unwrap());
    let uring: Arc<dyn Disk> = Arc::new(UringDisk::new(1).unwrap());
    let plain = RingOptions {
        defer_taskrun: false,
        ..RingOptions::default()
    };
    let uring_plain: Arc<dyn Disk> = Arc::new(UringDisk::with_options(1, plain).unwrap());
    let linked = RingOptions {
        direct_sync: DirectSync::LinkedFsync,
        ..RingOptions::default()
    };
    let uring_linked: Arc<dyn Disk> = Arc::new(UringDisk::with_options(1, linked).unwrap());
    let buffered = false;
    let direct = true;
    let variants: Vec<Variant> = vec![
        ("thread", Arc::clone(&portable), (Ask::Raw, buffered)),
        (
            "portable",
            Arc::clone(&portable),
            (Ask::WriteThenSync, buffered),
        ),
        (
            "portable",
            Arc::clone(&portable),
            (Ask::WriteAndSync, buffered),
        ),
        ("portable", Arc::clone(&portable), (Ask::Relayed, buffered)),
        (
            "io_uring",
            Arc::clone(&uring),
            (Ask::WriteThenSync, buffered),
        ),
        (
            "io_uring",
            Arc::clone(&uring),
            (Ask::WriteAndSync, buffered),
        ),
        (
            "io_uring plain ring",
            Arc::clone(&uring_plain),
            (Ask::WriteAndSync, buffered),
        ),
        ("thread O_DIRECT", Arc::clone(&portable), (Ask::Raw, direct)),
        ("io_uring O_DIRECT", Arc::clone(&uring), (Ask::Now, direct)),
        ("io_uring", Arc::clone(&uring), (Ask::Now, buffered)),
        (
            "portable O_DIRECT",
            Arc::clone(&portable),
            (Ask::WriteAndSync, direct),
        ),
        (
            "io_uring O_DIRECT dsync",
            Arc::clone(&uring),
            (Ask::WriteAndSync, direct),
        ),
        (
            "io_uring O_DIRECT linked",
            Arc::clone(&uring_linked),
            (Ask::WriteAndSync, direct),
        ),
    ];
    let rounds: usize = std::env::var("NARAD_ROUNDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(3);
    println!(
        "{WRITES} x {WRITE_BYTES} B durable writes, one writer, series interleaved in slices of \
         {SLICE_WRITES}, {rounds} rounds, in {}",
        dir.display()
    );
    println!(
        "round layout       backend                  ask            p50_us p90_us p99_us cpu_us"
    );
    let mut all: Vec<Vec<[u128; 4]>> = vec![Vec::new(); variants.len() * 2];
    for round in 0..rounds {
        for (layout_index, layout) in [Layout::Append, Layout::Preallocated]
            .into_iter()
            .enumerate()
        {
            let mut series: Vec<Series> = variants
                .iter()
                .enumerate()
                .map(|(index, (label, disk, ask))| {
                    let path = dir.join(format!("latency-{index}"));
                    Series::new(label, disk.as_ref(), *ask, path, layout)
                })
                .collect();
            for _ in 0..WRITES / SLICE_WRITES {
                for one in &mut series {
                    one.run_slice();
                }
            }
            for (index, one) in series.into_iter().enumerate() {
                all[layout_index * variants.len() + index].push(one.report(round, layout));
            }
        }
    }
    println!("median over rounds:");
    for (index, figures) in all.iter().enumerate() {
        let (label, _, ask) = &variants[index % variants.len()];
        let layout = if index < variants.len() {
            "Append"
        } else {
            "Preallocated"
        };
        let median = |column: usize| {
            let mut values: Vec<u128> = figures.iter().map(|f| f[column]).collect();
            values.sort_unstable();
            values[values.len() / 2]
        };
        println!(
            "med   {layout:<12} {label:<24} {:<14} {:>6} {:>6} {:>6} {:>6}",
            format!("{ask:?}"),
            median(0),
            median(1),
            median(2),
            median(3)
        );
    }
}
