//! Crash tests on the simulated disk: many seeded power cuts, with and
//! without torn writes, with and without prepared segments.
//!
//! Each run appends from several threads (single records and batches),
//! cuts the power at a seeded point, restarts, and checks:
//! - every append that returned `Ok` is recovered with identical bytes;
//! - no torn or invented record is recovered: every record is exactly the
//!   payload that was staged under its sequence number;
//! - sequence numbers are dense from the first one;
//! - a batch leaves a prefix, never a gap;
//! - the log accepts appends again after the restart.
//!
//! A failing seed replays the same disk choices (tears, faults); thread
//! interleaving is left to the scheduler, and the checks hold for every
//! interleaving.

// Test helpers outside `#[test]` functions unwrap too: a failure is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread;

use common::{payload, prealloc_options, read_all, small_options};
use narad_disk::sim::{Fault, FaultError, FaultOp, SimDisk, Tear};
use narad_wal::{Wal, WalOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What the appenders staged and what was acknowledged.
#[derive(Default)]
struct Ledger {
    /// Payload staged under each sequence number.
    staged: BTreeMap<u64, Vec<u8>>,
    /// Sequence numbers whose append returned `Ok`.
    acked: Vec<u64>,
    /// Each batch's sequence numbers.
    batches: Vec<Range<u64>>,
}

fn dir() -> PathBuf {
    PathBuf::from("/node/ingress/produce")
}

fn open(disk: &SimDisk, options: &WalOptions) -> Wal {
    Wal::open(Arc::new(disk.clone()), dir(), options.clone()).unwrap()
}

/// Appends from `threads` threads until the log refuses (the power cut) or
/// each thread did `rounds` operations.
fn run_appenders(wal: &Arc<Wal>, seed: u64, threads: u64, rounds: u64) -> Ledger {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let wal = Arc::clone(wal);
            let ledger = Arc::clone(&ledger);
            thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed * 1000 + t);
                for round in 0..rounds {
                    let tag = (seed << 32) | (t << 20) | round << 8;
                    let count = if rng.random_bool(0.3) {
                        rng.random_range(2..12)
                    } else {
                        1
                    };
                    let payloads: Vec<Vec<u8>> = (0..count)
                        .map(|i| payload(tag + i, rng.random_range(1..1800)))
                        .collect();
                    let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
                    let Ok(pending) = wal.append_many_slices(&slices) else {
                        return;
                    };
                    let seqs = pending.seqs();
                    {
                        let mut ledger = ledger.lock().unwrap();
                        for (seq, bytes) in seqs.clone().zip(payloads) {
                            ledger.staged.insert(seq, bytes);
                        }
                        if count > 1 {
                            ledger.batches.push(seqs.clone());
                        }
                    }
                    match pending.wait() {
                        Ok(done) => ledger.lock().unwrap().acked.extend(done),
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    Arc::try_unwrap(ledger)
        .ok()
        .expect("workers finished")
        .into_inner()
        .unwrap()
}

/// The checks every crash run must pass.
fn check_recovery(seed: u64, wal: &Wal, ledger: &Ledger) {
    let recovered = read_all(wal, 0);
    for (index, (seq, bytes)) in recovered.iter().enumerate() {
        assert_eq!(
            *seq, index as u64,
            "seed {seed}: sequence numbers are dense"
        );
        assert_eq!(
            ledger.staged.get(seq),
            Some(bytes),
            "seed {seed}: record {seq} is exactly what was staged"
        );
    }
    let recovered_end = recovered.len() as u64;
    for &seq in &ledger.acked {
        assert!(
            seq < recovered_end,
            "seed {seed}: acknowledged record {seq} lost (recovered up to {recovered_end})"
        );
    }
    for batch in &ledger.batches {
        let kept = batch.clone().filter(|seq| *seq < recovered_end).count() as u64;
        let kept_prefix = (batch.start..batch.start + kept).all(|seq| seq < recovered_end);
        assert!(kept_prefix, "seed {seed}: batch {batch:?} kept a gap");
    }
    assert_eq!(wal.next_seq(), recovered_end, "seed {seed}");
    let after = wal.append(b"after restart").unwrap().wait().unwrap();
    assert_eq!(after, recovered_end..recovered_end + 1, "seed {seed}");
}

/// `options` with inline flushes on for even `seed`s and off for odd ones:
/// appenders then flush their own records, or leave them all to the sync
/// loop.
fn with_inline_flush(options: WalOptions, seed: u64) -> WalOptions {
    WalOptions {
        inline_flush: seed.is_multiple_of(2),
        ..options
    }
}

/// One run: append, cut the power at a seeded data operation (every
/// operation from then on fails, as if the machine were gone), restart.
fn crash_run(seed: u64, options: &WalOptions) {
    let disk = SimDisk::new(seed);
    let mut rng = StdRng::seed_from_u64(seed);
    let wal = Arc::new(open(&disk, options));
    let cut_after = rng.random_range(0..120);
    disk.inject(Fault {
        op: FaultOp::Any,
        nth: cut_after,
        error: FaultError::Eio,
        sticky: true,
    });
    let ledger = run_appenders(&wal, seed, 3, 12);
    drop(Arc::try_unwrap(wal).expect("appenders finished"));
    let tear = if rng.random_bool(0.7) {
        Tear::LastWrite
    } else {
        Tear::None
    };
    disk.crash(tear);
    disk.clear_faults();
    let wal = open(&disk, options);
    check_recovery(seed, &wal, &ledger);
}

#[test]
fn acknowledged_appends_survive_seeded_power_cuts() {
    for seed in 0..300 {
        crash_run(seed, &with_inline_flush(small_options(), seed));
    }
}

#[test]
fn acknowledged_appends_survive_seeded_power_cuts_with_prepared_segments() {
    for seed in 1000..1300 {
        crash_run(seed, &with_inline_flush(prealloc_options(), seed));
    }
}

#[test]
fn appends_survive_a_power_cut_while_appenders_are_running() {
    for seed in 2000..2080 {
        let options = if seed % 2 == 0 {
            small_options()
        } else {
            prealloc_options()
        };
        let options = with_inline_flush(options, seed / 2);
        let disk = SimDisk::new(seed);
        let wal = Arc::new(open(&disk, &options));
        let cutter = {
            let disk = disk.clone();
            let wal = Arc::clone(&wal);
            thread::spawn(move || {
                let target = 5 + seed % 40;
                while wal.next_durable_seq() < target && !wal.is_failed() {
                    thread::yield_now();
                }
                disk.crash(Tear::LastWrite);
            })
        };
        let ledger = run_appenders(&wal, seed, 3, 30);
        cutter.join().unwrap();
        drop(Arc::try_unwrap(wal).expect("appenders finished"));
        let wal = open(&disk, &options);
        check_recovery(seed, &wal, &ledger);
    }
}

#[test]
fn repeated_power_cuts_keep_every_acknowledged_append() {
    let options = prealloc_options();
    let disk = SimDisk::new(77);
    let mut rng = StdRng::seed_from_u64(77);
    let mut ledger = Ledger::default();
    for round in 0..15u64 {
        let wal = Arc::new(open(&disk, &options));
        disk.inject(Fault {
            op: FaultOp::Any,
            nth: rng.random_range(0..60),
            error: FaultError::Eio,
            sticky: true,
        });
        let this_round = run_appenders(&wal, 77_000 + round, 2, 10);
        drop(Arc::try_unwrap(wal).expect("appenders finished"));
        disk.crash(Tear::LastWrite);
        disk.clear_faults();
        // Records staged but not durable may be replaced by later rounds
        // under the same sequence numbers; only acknowledged ones are kept.
        let wal = open(&disk, &options);
        let recovered = read_all(&wal, 0);
        for (seq, bytes) in this_round.staged {
            if (seq as usize) < recovered.len() {
                ledger.staged.insert(seq, bytes);
            }
        }
        ledger.acked.extend(this_round.acked);
        ledger
            .staged
            .retain(|seq, _| (*seq as usize) < recovered.len());
        for &seq in &ledger.acked {
            assert!(
                (seq as usize) < recovered.len(),
                "round {round}: lost {seq}"
            );
            assert_eq!(Some(&recovered[seq as usize].1), ledger.staged.get(&seq));
        }
        drop(wal);
    }
}

#[test]
fn compaction_and_rotation_survive_power_cuts() {
    for seed in 3000..3060 {
        let options = if seed % 2 == 0 {
            small_options()
        } else {
            prealloc_options()
        };
        let disk = SimDisk::new(seed);
        let mut rng = StdRng::seed_from_u64(seed);
        let wal = Arc::new(open(&disk, &options));
        disk.inject(Fault {
            op: FaultOp::Any,
            nth: rng.random_range(20..200),
            error: FaultError::Eio,
            sticky: true,
        });
        let compactor = {
            let wal = Arc::clone(&wal);
            thread::spawn(move || {
                // Plays the dispatcher: a synced checkpoint trailing the
                // durable frontier, compacted behind as it moves.
                let mut checkpoint = 0;
                while !wal.is_failed() && checkpoint < 150 {
                    let durable = wal.next_durable_seq();
                    if durable > checkpoint {
                        checkpoint = durable - (durable - checkpoint) / 2;
                        if wal.compact(checkpoint).is_err() {
                            break;
                        }
                    }
                    thread::yield_now();
                }
                checkpoint
            })
        };
        let ledger = run_appenders(&wal, seed, 2, 40);
        let checkpoint = compactor.join().unwrap();
        drop(Arc::try_unwrap(wal).expect("appenders and compactor finished"));
        disk.crash(Tear::LastWrite);
        disk.clear_faults();
        let wal = open(&disk, &options);
        let oldest = wal.oldest_seq();
        assert!(oldest <= checkpoint.max(oldest), "seed {seed}");
        let recovered = read_all(&wal, oldest);
        for (index, (seq, bytes)) in recovered.iter().enumerate() {
            assert_eq!(
                *seq,
                oldest + index as u64,
                "seed {seed}: dense from the oldest"
            );
            assert_eq!(
                ledger.staged.get(seq),
                Some(bytes),
                "seed {seed}: record {seq}"
            );
        }
        let end = oldest + recovered.len() as u64;
        for &seq in ledger.acked.iter().filter(|&&seq| seq >= checkpoint) {
            assert!(seq >= oldest && seq < end, "seed {seed}: acked {seq} lost");
        }
        assert_eq!(wal.dispatch_start(checkpoint), checkpoint.max(oldest));
    }
}

/// One appender doing a seeded sequence of single appends and batches, each
/// waited for, so the disk operations are the same on every run: the cut
/// can be placed at every one of them in turn.
fn sequential_workload(wal: &Wal, seed: u64) -> Ledger {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ledger = Ledger::default();
    for round in 0..25u64 {
        let count = if rng.random_bool(0.3) {
            rng.random_range(2..8)
        } else {
            1
        };
        let payloads: Vec<Vec<u8>> = (0..count)
            .map(|i| payload((seed << 32) | (round << 8) | i, rng.random_range(1..1800)))
            .collect();
        let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let Ok(pending) = wal.append_many_slices(&slices) else {
            break;
        };
        let seqs = pending.seqs();
        for (seq, bytes) in seqs.clone().zip(payloads) {
            ledger.staged.insert(seq, bytes);
        }
        if count > 1 {
            ledger.batches.push(seqs);
        }
        match pending.wait() {
            Ok(done) => ledger.acked.extend(done),
            Err(_) => break,
        }
    }
    ledger
}

#[test]
fn every_crash_point_of_a_sequential_workload_recovers() {
    let options = small_options();
    for seed in 4000..4003 {
        let total_ops = {
            let disk = SimDisk::new(seed);
            let wal = open(&disk, &options);
            let before = disk.op_count();
            sequential_workload(&wal, seed);
            disk.op_count() - before
        };
        for cut in 0..=total_ops {
            for tear in [Tear::None, Tear::LastWrite] {
                let disk = SimDisk::new(seed ^ cut);
                let wal = open(&disk, &options);
                disk.inject(Fault {
                    op: FaultOp::Any,
                    nth: cut,
                    error: FaultError::Eio,
                    sticky: true,
                });
                let ledger = sequential_workload(&wal, seed);
                drop(wal);
                disk.crash(tear);
                disk.clear_faults();
                let wal = open(&disk, &options);
                check_recovery(seed * 1000 + cut, &wal, &ledger);
            }
        }
    }
}
