//! Behaviour of the log on every backend: the simulated disk and real files.

// Test helpers outside `#[test]` functions unwrap too: a failure is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::thread;

use common::{backends, block_on, payload, poll_once, prealloc_options, read_all, small_options};
use narad_wal::segment::{PREP_FILE_NAME, segment_path};
use narad_wal::{FrontierChange, WalError};

#[test]
fn appends_take_dense_sequence_numbers_and_read_back_identically() {
    for backend in backends() {
        let wal = backend.open(small_options());
        let mut expected = Vec::new();
        for i in 0..20u64 {
            let bytes = payload(i, 10 + i as usize * 7);
            let seqs = wal.append(&bytes).unwrap().wait().unwrap();
            assert_eq!(seqs, i..i + 1, "{}", backend.name);
            expected.push((i, bytes));
        }
        assert_eq!(read_all(&wal, 0), expected, "{}", backend.name);
        assert_eq!(wal.next_durable_seq(), 20);
    }
}

#[test]
fn records_survive_a_clean_reopen() {
    for backend in backends() {
        let mut expected = Vec::new();
        {
            let wal = backend.open(small_options());
            for i in 0..50u64 {
                let bytes = payload(i, 100 + (i as usize * 37) % 900);
                wal.append(&bytes).unwrap().wait().unwrap();
                expected.push((i, bytes));
            }
        }
        let wal = backend.open(small_options());
        assert_eq!(wal.next_seq(), 50, "{}", backend.name);
        assert!(
            wal.segment_bases().len() > 1,
            "records spanned several segments"
        );
        assert_eq!(read_all(&wal, 0), expected, "{}", backend.name);
        assert_eq!(wal.append(b"next").unwrap().wait().unwrap(), 50..51);
    }
}

#[test]
fn a_batch_takes_consecutive_sequence_numbers() {
    for backend in backends() {
        let wal = backend.open(small_options());
        wal.append(b"first").unwrap().wait().unwrap();
        let payloads: Vec<Vec<u8>> = (0..10).map(|i| payload(i, 50)).collect();
        let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let seqs = wal.append_many_slices(&slices).unwrap().wait().unwrap();
        assert_eq!(seqs, 1..11, "{}", backend.name);
        let records = read_all(&wal, 1);
        let read: Vec<Vec<u8>> = records.into_iter().map(|(_, p)| p).collect();
        assert_eq!(read, payloads);
    }
}

#[test]
fn a_batch_outgrowing_the_segment_rolls_between_records() {
    for backend in backends() {
        let wal = backend.open(small_options());
        let payloads: Vec<Vec<u8>> = (0..40).map(|i| payload(i, 1500)).collect();
        let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let seqs = wal.append_many_slices(&slices).unwrap().wait().unwrap();
        assert_eq!(seqs, 0..40);
        let bases = wal.segment_bases();
        assert!(bases.len() >= 4, "{}: {bases:?}", backend.name);
        drop(wal);
        let wal = backend.open(small_options());
        let read: Vec<Vec<u8>> = read_all(&wal, 0).into_iter().map(|(_, p)| p).collect();
        assert_eq!(read, payloads, "{}", backend.name);
    }
}

#[test]
fn append_with_writes_the_payload_in_place() {
    for backend in backends() {
        let wal = backend.open(small_options());
        let seqs = wal
            .append_with(5, |dst| {
                dst.copy_from_slice(b"fill!");
                Ok(())
            })
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(seqs, 0..1);
        assert_eq!(read_all(&wal, 0), vec![(0, b"fill!".to_vec())]);
    }
}

#[test]
fn a_failed_fill_withdraws_the_batch_and_gives_its_seqs_back() {
    for backend in backends() {
        let wal = backend.open(small_options());
        wal.append(b"before").unwrap().wait().unwrap();
        let error = wal
            .append_many(&[100; 30], |index, dst| {
                if index == 25 {
                    return Err("refused".into());
                }
                dst.fill(index as u8);
                Ok(())
            })
            .unwrap_err();
        assert!(matches!(error, WalError::Fill(_)), "{error}");
        assert_eq!(wal.next_seq(), 1);
        assert_eq!(wal.append(b"after").unwrap().wait().unwrap(), 1..2);
        let read: Vec<Vec<u8>> = read_all(&wal, 0).into_iter().map(|(_, p)| p).collect();
        assert_eq!(
            read,
            vec![b"before".to_vec(), b"after".to_vec()],
            "{}",
            backend.name
        );
    }
}

#[test]
fn a_panicking_fill_withdraws_its_record() {
    for backend in backends() {
        let wal = backend.open(small_options());
        let error = wal
            .append_with(10, |_| panic!("fill exploded"))
            .unwrap_err();
        assert!(
            matches!(&error, WalError::FillPanicked(message) if message.contains("exploded")),
            "{error}"
        );
        assert_eq!(wal.append(b"x").unwrap().wait().unwrap(), 0..1);
        assert!(!wal.is_failed());
    }
}

#[test]
fn a_fill_failing_after_a_roll_withdraws_everything_it_staged() {
    for backend in backends() {
        let wal = backend.open(small_options());
        let bases_before = wal.segment_bases();
        let error = wal
            .append_many(&[1500; 30], |index, dst| {
                if index == 20 {
                    return Err("late refusal".into());
                }
                dst.fill(1);
                Ok(())
            })
            .unwrap_err();
        assert!(matches!(error, WalError::Fill(_)));
        assert_eq!(wal.next_seq(), 0);
        assert_eq!(wal.append(b"only").unwrap().wait().unwrap(), 0..1);
        assert_eq!(wal.segment_bases(), bases_before, "{}", backend.name);
        assert_eq!(read_all(&wal, 0), vec![(0, b"only".to_vec())]);
    }
}

#[test]
fn empty_and_oversized_records_are_refused_before_staging() {
    for backend in backends() {
        let wal = backend.open(small_options());
        assert!(matches!(
            wal.append(b""),
            Err(WalError::RecordSize { len: 0, .. })
        ));
        assert!(matches!(
            wal.append(&vec![0u8; 2049]),
            Err(WalError::RecordSize { len: 2049, .. })
        ));
        assert!(matches!(
            wal.append_many(&[10, 0, 10], |_, _| Ok(())),
            Err(WalError::RecordSize { len: 0, .. })
        ));
        assert!(matches!(
            wal.append_many(&[], |_, _| Ok(())),
            Err(WalError::EmptyBatch)
        ));
        assert_eq!(wal.next_seq(), 0, "{}", backend.name);
    }
}

#[test]
fn a_record_larger_than_the_staging_buffer_goes_in_its_own_write() {
    for backend in backends() {
        let options = narad_wal::WalOptions {
            record_bytes_max: 8000,
            staging_buffer_bytes: 4096,
            prep_run_bytes_max: 8192,
            ..small_options()
        };
        let wal = backend.open(options.clone());
        let big = payload(1, 8000);
        wal.append(b"small").unwrap().wait().unwrap();
        wal.append(&big).unwrap().wait().unwrap();
        drop(wal);
        let wal = backend.open(options);
        assert_eq!(read_all(&wal, 1), vec![(1, big)], "{}", backend.name);
    }
}

#[test]
fn concurrent_appenders_share_flushes_and_every_record_is_read_back() {
    for inline_flush in [true, false] {
        concurrent_appenders_read_back(inline_flush);
    }
}

#[test]
fn a_thread_serving_one_connection_flushes_its_own_appends() {
    for backend in backends() {
        let wal = Arc::new(backend.open(small_options_handing_off()));
        let served = Arc::new(AtomicUsize::new(1));
        let front = {
            let wal = Arc::clone(&wal);
            let served = Arc::clone(&served);
            thread::spawn(move || {
                narad_wal::flush_inline_while_serving_one(Arc::clone(&served));
                for i in 0..5u64 {
                    wal.append(&payload(i, 64)).unwrap().wait().unwrap();
                }
                let alone = wal.inline_flushes();
                served.store(2, Ordering::Relaxed);
                for i in 5..10u64 {
                    wal.append(&payload(i, 64)).unwrap().wait().unwrap();
                }
                (alone, wal.inline_flushes())
            })
        };
        let (alone, shared) = front.join().unwrap();
        assert_eq!(
            alone, 5,
            "one connection: every append flushed inline ({})",
            backend.name
        );
        assert_eq!(
            shared, 5,
            "two connections: the sync loop flushed ({})",
            backend.name
        );
        // A thread that never opted in hands its appends off.
        wal.append(&payload(10, 64)).unwrap().wait().unwrap();
        assert_eq!(wal.inline_flushes(), 5, "{}", backend.name);
        let expected: Vec<(u64, Vec<u8>)> = (0..11u64).map(|i| (i, payload(i, 64))).collect();
        assert_eq!(read_all(&wal, 0), expected, "{}", backend.name);
    }
}

/// [`small_options`] with inline flushes left to the threads that opt in.
fn small_options_handing_off() -> narad_wal::WalOptions {
    narad_wal::WalOptions {
        inline_flush: false,
        ..small_options()
    }
}

fn concurrent_appenders_read_back(inline_flush: bool) {
    for backend in backends() {
        let options = narad_wal::WalOptions {
            inline_flush,
            ..small_options()
        };
        let wal = Arc::new(backend.open(options));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let wal = Arc::clone(&wal);
                thread::spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..25u64 {
                        let bytes = payload(t * 1000 + i, 64);
                        let seqs = wal.append(&bytes).unwrap().wait().unwrap();
                        mine.push((seqs.start, bytes));
                    }
                    mine
                })
            })
            .collect();
        let mut expected: Vec<(u64, Vec<u8>)> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        expected.sort();
        assert_eq!(
            read_all(&wal, 0),
            expected,
            "{} inline_flush={inline_flush}",
            backend.name
        );
    }
}

#[test]
fn a_lone_append_is_written_and_synced_on_the_appenders_thread() {
    for backend in backends() {
        let wal = backend.open(small_options());
        for expected_end in 1..=3 {
            let mut pending = wal.append(b"alone").unwrap();
            // Nothing else was staged and no flush was under way, so the
            // append itself made the record durable before it returned.
            assert_eq!(wal.next_durable_seq(), expected_end, "{}", backend.name);
            assert!(
                matches!(poll_once(&mut pending), Poll::Ready(Ok(_))),
                "{}",
                backend.name
            );
        }
        drop(wal);
        let wal = backend.open(small_options());
        assert_eq!(read_all(&wal, 0).len(), 3, "{}", backend.name);
    }
}

#[test]
fn pending_appends_can_be_awaited() {
    for backend in backends() {
        let wal = backend.open(small_options());
        let seqs = block_on(async {
            let first = wal.append(b"a").unwrap().await.unwrap();
            let second = wal.append(b"b").unwrap().await.unwrap();
            first.start..second.end
        });
        assert_eq!(seqs, 0..2, "{}", backend.name);
    }
}

#[test]
fn a_dropped_pending_append_is_still_made_durable() {
    for backend in backends() {
        let wal = backend.open(small_options());
        let mut pending = wal.append(b"abandoned").unwrap();
        let _ = poll_once(&mut pending);
        drop(pending);
        let watch = wal.durable_watch();
        let change = watch.wait_changed(0, std::time::Duration::from_secs(60));
        assert_eq!(change, FrontierChange::Advanced(1), "{}", backend.name);
        drop(wal);
        let wal = backend.open(small_options());
        assert_eq!(
            read_all(&wal, 0),
            vec![(0, b"abandoned".to_vec())],
            "{}",
            backend.name
        );
    }
}

#[test]
fn the_durable_watch_resolves_when_records_become_durable() {
    for backend in backends() {
        let wal = backend.open(small_options());
        let watch = wal.durable_watch();
        let mut changed = watch.changed(0);
        assert_eq!(poll_once(&mut changed), Poll::Pending);
        wal.append(b"x").unwrap().wait().unwrap();
        assert_eq!(
            block_on(changed),
            FrontierChange::Advanced(1),
            "{}",
            backend.name
        );
    }
}

#[test]
fn the_durable_watch_stops_when_the_log_closes() {
    for backend in backends() {
        let wal = backend.open(small_options());
        let watch = wal.durable_watch();
        wal.close();
        assert_eq!(block_on(watch.changed(0)), FrontierChange::Stopped(0));
        assert!(matches!(wal.append(b"late"), Err(WalError::Closed)));
    }
}

#[test]
fn a_reader_yields_records_as_they_become_durable() {
    for backend in backends() {
        let wal = backend.open(small_options());
        let mut reader = wal.reader(0).unwrap();
        assert!(reader.next_frame().unwrap().is_none());
        wal.append(b"one").unwrap().wait().unwrap();
        let frame = reader.next_frame().unwrap().unwrap();
        assert_eq!((frame.seq, frame.payload), (0, &b"one"[..]));
        assert!(reader.next_frame().unwrap().is_none());
        wal.append(b"two").unwrap().wait().unwrap();
        let frame = reader.next_frame().unwrap().unwrap();
        assert_eq!(
            (frame.seq, frame.payload),
            (1, &b"two"[..]),
            "{}",
            backend.name
        );
    }
}

#[test]
fn a_reader_seeks_back_and_forward_across_segments() {
    for backend in backends() {
        let wal = backend.open(small_options());
        for i in 0..60u64 {
            wal.append(&payload(i, 700)).unwrap().wait().unwrap();
        }
        assert!(wal.segment_bases().len() > 2);
        let mut reader = wal.reader(0).unwrap();
        reader.seek(45).unwrap();
        assert_eq!(reader.next_frame().unwrap().unwrap().seq, 45);
        reader.seek(3).unwrap();
        let frame = reader.next_frame().unwrap().unwrap();
        assert_eq!((frame.seq, frame.payload), (3, &payload(3, 700)[..]));
        assert_eq!(reader.skip_frame().unwrap(), Some(4));
        assert_eq!(
            reader.next_frame().unwrap().unwrap().seq,
            5,
            "{}",
            backend.name
        );
    }
}

#[test]
fn a_reader_positioned_past_the_durable_end_waits_for_that_record() {
    for backend in backends() {
        let wal = backend.open(small_options());
        let mut reader = wal.reader(2).unwrap();
        for i in 0..3u64 {
            wal.append(&payload(i, 10)).unwrap().wait().unwrap();
        }
        assert_eq!(
            reader.next_frame().unwrap().unwrap().seq,
            2,
            "{}",
            backend.name
        );
    }
}

#[test]
fn compaction_deletes_segments_wholly_behind_the_checkpoint() {
    for backend in backends() {
        let wal = backend.open(small_options());
        for i in 0..60u64 {
            wal.append(&payload(i, 700)).unwrap().wait().unwrap();
        }
        let bases = wal.segment_bases();
        let checkpoint = bases[2] + 1;
        let done = wal.compact(checkpoint).unwrap();
        assert_eq!(done.deleted, bases[..2].to_vec(), "{}", backend.name);
        assert_eq!(wal.oldest_seq(), bases[2]);
        assert!(
            !backend
                .disk
                .exists(&segment_path(&backend.dir, bases[0]))
                .unwrap()
        );
        assert!(matches!(
            wal.reader(bases[0]),
            Err(WalError::Compacted { .. })
        ));
        let read = read_all(&wal, checkpoint);
        assert_eq!(read.first().map(|r| r.0), Some(checkpoint));
        assert_eq!(read.last().map(|r| r.0), Some(59));
    }
}

#[test]
fn a_fully_dispatched_active_segment_is_rotated_and_reclaimed() {
    for backend in backends() {
        let wal = backend.open(small_options());
        for i in 0..8u64 {
            wal.append(&payload(i, 700)).unwrap().wait().unwrap();
        }
        assert_eq!(wal.segment_bases(), vec![0]);
        let done = wal.compact(8).unwrap();
        assert!(done.rotated, "{}", backend.name);
        assert_eq!(done.deleted, vec![0]);
        assert_eq!(wal.segment_bases(), vec![8]);
        assert_eq!(wal.append(b"after").unwrap().wait().unwrap(), 8..9);
        drop(wal);
        let wal = backend.open(small_options());
        assert_eq!(read_all(&wal, 8), vec![(8, b"after".to_vec())]);
    }
}

#[test]
fn a_reader_that_read_a_reclaimed_segment_to_its_end_goes_on_in_the_next_one() {
    // Regression: the reader reported its own segment as compacted and the
    // dispatcher backed off for a second before reading again.
    for backend in backends() {
        let wal = backend.open(small_options());
        for i in 0..8u64 {
            wal.append(&payload(i, 700)).unwrap().wait().unwrap();
        }
        let mut reader = wal.reader(0).unwrap();
        for seq in 0..8u64 {
            assert_eq!(reader.next_frame().unwrap().unwrap().seq, seq);
        }
        assert!(reader.next_frame().unwrap().is_none(), "caught up");
        let done = wal.compact(8).unwrap();
        assert_eq!(done.deleted, vec![0], "{}", backend.name);
        wal.append(b"after").unwrap().wait().unwrap();
        let frame = reader.next_frame().unwrap().unwrap();
        assert_eq!(
            (frame.seq, frame.payload),
            (8, &b"after"[..]),
            "{}",
            backend.name
        );
    }
}

#[test]
fn a_small_or_undispatched_active_segment_is_not_rotated() {
    for backend in backends() {
        let wal = backend.open(small_options());
        wal.append(b"tiny").unwrap().wait().unwrap();
        assert_eq!(wal.compact(1).unwrap(), Default::default());
        for i in 0..8u64 {
            wal.append(&payload(i, 700)).unwrap().wait().unwrap();
        }
        assert_eq!(
            wal.compact(5).unwrap(),
            Default::default(),
            "{}",
            backend.name
        );
    }
}

#[test]
fn a_checkpoint_below_the_oldest_segment_starts_dispatch_there() {
    for backend in backends() {
        let wal = backend.open(small_options());
        for i in 0..60u64 {
            wal.append(&payload(i, 700)).unwrap().wait().unwrap();
        }
        let bases = wal.segment_bases();
        wal.compact(bases[2]).unwrap();
        assert_eq!(wal.dispatch_start(0), bases[2], "{}", backend.name);
        assert_eq!(wal.dispatch_start(bases[2] + 3), bases[2] + 3);
    }
}

#[test]
fn prealloc_prepares_a_spare_and_the_roll_uses_it() {
    for backend in backends() {
        let wal = backend.open(prealloc_options());
        let options = prealloc_options();
        let mut i = 0u64;
        while !wal.spare_ready() {
            wal.append(&payload(i, 500)).unwrap().wait().unwrap();
            i += 1;
            assert!(i < 100_000, "{}: no spare was ever prepared", backend.name);
            if i.is_multiple_of(20) {
                thread::yield_now();
            }
        }
        let first_bases = wal.segment_bases().len();
        while wal.segment_bases().len() == first_bases {
            wal.append(&payload(i, 500)).unwrap().wait().unwrap();
            i += 1;
        }
        let active = *wal.segment_bases().last().unwrap();
        let active_path = segment_path(&backend.dir, active);
        let file = backend
            .disk
            .open(&active_path, narad_disk::OpenOptions::EXISTING)
            .unwrap();
        assert_eq!(
            file.size().unwrap(),
            options.segment_bytes,
            "{}",
            backend.name
        );
        let sealed_path = segment_path(&backend.dir, wal.segment_bases()[0]);
        let sealed = backend
            .disk
            .open(&sealed_path, narad_disk::OpenOptions::EXISTING)
            .unwrap();
        assert!(sealed.size().unwrap() < options.segment_bytes - 16);
        let expected: Vec<(u64, Vec<u8>)> = (0..i).map(|k| (k, payload(k, 500))).collect();
        drop(wal);
        let wal = backend.open(prealloc_options());
        assert_eq!(read_all(&wal, 0), expected, "{}", backend.name);
        assert_eq!(wal.next_seq(), i);
    }
}

#[test]
fn prepared_segments_are_written_with_o_direct_and_read_back_whole() {
    for backend in backends() {
        let options = prealloc_options();
        let wal = backend.open(options.clone());
        let mut expected = Vec::new();
        // Sizes that end chunks anywhere in a block, so each write repeats
        // the block the one before ended in. The first segment is prepared
        // at creation; go on until a roll has used a prepared spare, so the
        // active segment is prepared when the log is reopened.
        let append = |wal: &narad_wal::Wal, expected: &mut Vec<(u64, Vec<u8>)>| {
            let seq = expected.len() as u64;
            let record = payload(seq, 1 + (seq as usize * 37) % 700);
            wal.append(&record).unwrap().wait().unwrap();
            expected.push((seq, record));
        };
        while wal.segment_bases().len() < 2 {
            append(&wal, &mut expected);
        }
        assert!(
            wal.direct_writes() > 0,
            "{}: no O_DIRECT write",
            backend.name
        );
        while !wal.spare_ready() {
            append(&wal, &mut expected);
            thread::yield_now();
        }
        let bases = wal.segment_bases().len();
        while wal.segment_bases().len() == bases {
            append(&wal, &mut expected);
        }
        append(&wal, &mut expected);
        assert_eq!(read_all(&wal, 0), expected, "{}", backend.name);
        drop(wal);
        let wal = backend.open(options.clone());
        assert_eq!(read_all(&wal, 0), expected, "{}", backend.name);
        append(&wal, &mut expected);
        assert!(
            wal.direct_writes() > 0,
            "{}: reopened segment not O_DIRECT",
            backend.name
        );
        drop(wal);
        let wal = backend.open(options);
        assert_eq!(read_all(&wal, 0), expected, "{}", backend.name);
    }
}

#[test]
fn a_reader_takes_just_written_records_from_memory_and_older_ones_from_the_file() {
    for backend in backends() {
        let wal = backend.open(prealloc_options());
        let mut expected = Vec::new();
        for seq in 0..40u64 {
            let record = payload(seq, 300);
            wal.append(&record).unwrap().wait().unwrap();
            expected.push((seq, record));
        }
        let mut reader = wal.reader(35).unwrap();
        let frame = reader.next_frame().unwrap().unwrap();
        assert_eq!((frame.seq, frame.payload.to_vec()), expected[35]);
        assert!(wal.recent_reads() > 0, "{}", backend.name);
        // After a reopen nothing is in memory: the same bytes come from the
        // segment files.
        drop(reader);
        drop(wal);
        let wal = backend.open(prealloc_options());
        assert_eq!(read_all(&wal, 0), expected, "{}", backend.name);
        assert_eq!(wal.recent_reads(), 0, "{}", backend.name);
    }
}

#[test]
fn without_prealloc_nothing_is_written_with_o_direct() {
    for backend in backends() {
        let wal = backend.open(small_options());
        wal.append(b"plain").unwrap().wait().unwrap();
        assert_eq!(wal.direct_writes(), 0, "{}", backend.name);
    }
}

#[test]
fn a_spare_left_at_open_is_removed() {
    for backend in backends() {
        drop(backend.open(small_options()));
        let spare = backend.dir.join(PREP_FILE_NAME);
        drop(
            backend
                .disk
                .open(&spare, narad_disk::OpenOptions::CREATE)
                .unwrap(),
        );
        let wal = backend.open(small_options());
        assert!(!backend.disk.exists(&spare).unwrap(), "{}", backend.name);
        assert_eq!(wal.next_seq(), 0);
    }
}

#[test]
fn compaction_only_runs_behind_the_synced_checkpoint() {
    for backend in backends() {
        let wal = backend.open(small_options());
        for i in 0..60u64 {
            wal.append(&payload(i, 700)).unwrap().wait().unwrap();
        }
        let config = narad_wal::CheckpointConfig {
            sync_delay: std::time::Duration::from_secs(10),
        };
        let clock = Arc::new(narad_clock::SystemClock::new());
        let checkpoint =
            narad_wal::CheckpointStore::open(&*backend.disk, &backend.dir, config, clock).unwrap();
        let bases = wal.segment_bases();
        checkpoint.store(bases[2]).unwrap();
        let done = wal.compact_behind(&checkpoint).unwrap();
        assert!(
            done.deleted.is_empty(),
            "{}: stored is not synced",
            backend.name
        );
        checkpoint.sync_now().unwrap();
        let done = wal.compact_behind(&checkpoint).unwrap();
        assert_eq!(done.deleted, bases[..2].to_vec(), "{}", backend.name);
        checkpoint.shutdown().unwrap();
    }
}

#[test]
fn produce_records_are_encoded_in_place_and_decode_back() {
    use narad_wal::{WalRecord, WalRecordRef};
    for backend in backends() {
        let wal = backend.open(small_options());
        let records = [
            WalRecordRef {
                topic: "orders",
                incarnation_id: Some("9f86d081884c7d65"),
                key: b"customer-7",
                idempotency_key: &[],
                partition: 3,
                created_at_unix_ms: 1_700_000_000_000,
                payload: b"{\"total\":12}",
            },
            WalRecordRef {
                topic: "legacy",
                incarnation_id: None,
                key: b"",
                idempotency_key: &[],
                partition: 0,
                created_at_unix_ms: 1,
                payload: b"x",
            },
        ];
        let seqs = wal.append_records(&records).unwrap().wait().unwrap();
        assert_eq!(seqs, 0..2);
        let decoded: Vec<WalRecord> = read_all(&wal, 0)
            .iter()
            .map(|(_, bytes)| WalRecord::decode(bytes).unwrap())
            .collect();
        let expected: Vec<WalRecord> = records.iter().map(WalRecordRef::to_record).collect();
        assert_eq!(decoded, expected, "{}", backend.name);
    }
}

#[test]
fn an_invalid_produce_record_stages_nothing_of_its_batch() {
    for backend in backends() {
        let wal = backend.open(small_options());
        let good = narad_wal::WalRecordRef {
            topic: "orders",
            incarnation_id: None,
            key: b"",
            idempotency_key: &[],
            partition: 0,
            created_at_unix_ms: 5,
            payload: b"ok",
        };
        let bad = narad_wal::WalRecordRef { topic: "", ..good };
        let error = wal.append_records(&[good, bad]).unwrap_err();
        assert!(
            matches!(error, WalError::Record { index: 1, .. }),
            "{error}"
        );
        assert_eq!(wal.next_seq(), 0, "{}", backend.name);
    }
}
