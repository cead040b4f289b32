//! CPU time, and CPU per unit of work.
//!
//! Two sources with different grain: another process's CPU comes from
//! `/proc/<pid>/stat` in the kernel's 10 ms ticks (fine over phases of
//! seconds); this process's and the calling thread's come from the kernel's
//! CPU-time clocks to the nanosecond (needed for a few hundred fdatasyncs).
//! Both count user and system time of the threads named, so the kernel's
//! own threads (jbd2, writeback kworkers) are never counted; io_uring's
//! io-wq workers are threads of the process that owns the ring and are.

use std::collections::BTreeMap;
use std::fs;

use rustix::time::{ClockId, clock_gettime};

/// CPU time (user + system) of process `pid` (or `self`) in seconds, every
/// thread it has or had, from `/proc/<pid>/stat` at Linux's fixed 100 ticks
/// per second; 0 when unknown.
pub fn cpu_seconds(pid: &str) -> f64 {
    const TICKS_PER_SECOND: f64 = 100.0;
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name start at field 3 (state);
    // utime and stime are fields 14 and 15.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|field| field.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / TICKS_PER_SECOND
}

/// CPU time (user + system) of every live thread of process `pid` (or
/// `self`), summed by thread name (`comm`, as the thread builder named it),
/// in seconds; empty when unknown. A thread that ended is no longer
/// counted, so take it over phases whose threads outlive them.
pub fn thread_cpu_by_name(pid: &str) -> BTreeMap<String, f64> {
    let mut by_name = BTreeMap::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return by_name;
    };
    for task in tasks.filter_map(Result::ok) {
        let Ok(stat) = fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        if let Some((name, seconds)) = name_and_cpu_in_stat(&stat) {
            *by_name.entry(name).or_insert(0.0) += seconds;
        }
    }
    by_name
}

/// What each thread name gained from `before` to `after` (both from
/// [`thread_cpu_by_name`]), in seconds; names not in `before` count whole.
pub fn thread_cpu_growth(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(name, seconds)| {
            let growth = seconds - before.get(name).copied().unwrap_or(0.0);
            (name.clone(), growth.max(0.0))
        })
        .collect()
}

/// The command name and CPU seconds (user + system) of one
/// `/proc/.../stat` text.
fn name_and_cpu_in_stat(stat: &str) -> Option<(String, f64)> {
    const TICKS_PER_SECOND: f64 = 100.0;
    let open = stat.find('(')?;
    let (inside, rest) = stat[open + 1..].rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |index: usize| -> Option<f64> { fields.get(index)?.parse::<f64>().ok() };
    Some((
        inside.to_owned(),
        (ticks(11)? + ticks(12)?) / TICKS_PER_SECOND,
    ))
}

/// Context switches (voluntary and not) of every live thread of process
/// `pid` so far, from `/proc/<pid>/task/*/status`; 0 when unknown. A
/// thread that ended is no longer counted, so take it over phases whose
/// threads outlive them.
pub fn context_switches(pid: &str) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| fs::read_to_string(task.path().join("status")).ok())
        .map(|status| switches_in_status(&status))
        .sum()
}

/// The sum of `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches`
/// in one `/proc/.../status` text.
fn switches_in_status(status: &str) -> u64 {
    status
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(':')?;
            matches!(
                key,
                "voluntary_ctxt_switches" | "nonvoluntary_ctxt_switches"
            )
            .then(|| value.trim().parse::<u64>().ok())
            .flatten()
        })
        .sum()
}

/// CPU time (user + system) of the calling thread so far, in seconds.
pub fn thread_cpu_seconds() -> f64 {
    seconds(ClockId::ThreadCPUTime)
}

/// CPU time (user + system) of every thread of this process so far, in
/// seconds.
pub fn process_cpu_seconds() -> f64 {
    seconds(ClockId::ProcessCPUTime)
}

fn seconds(clock: ClockId) -> f64 {
    let now = clock_gettime(clock);
    now.tv_sec as f64 + now.tv_nsec as f64 / 1e9
}

/// `cpu_seconds` spread over `units` (messages, appends, writes), in µs per
/// unit; 0 when there were none, which a verdict reads as not measured.
pub fn us_per_unit(cpu_seconds: f64, units: u64) -> f64 {
    per_unit(cpu_seconds * 1e6, units)
}

/// `amount` per unit; 0 when there was none.
pub fn per_unit(amount: f64, units: u64) -> f64 {
    if units == 0 {
        0.0
    } else {
        amount / units as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_grows_with_work_on_the_thread() {
        let before = thread_cpu_seconds();
        let mut sum = 0u64;
        while thread_cpu_seconds() - before < 0.005 {
            sum = std::hint::black_box(sum.wrapping_add(1));
        }
        assert!(thread_cpu_seconds() > before);
        assert!(process_cpu_seconds() >= thread_cpu_seconds() - before);
    }

    #[test]
    fn cpu_per_unit_is_zero_without_units() {
        assert_eq!(us_per_unit(1.0, 0), 0.0);
        assert_eq!(us_per_unit(0.5, 1_000), 500.0);
    }

    #[test]
    fn switches_are_summed_from_a_status_text() {
        let status = "Name:\tnarad\nvoluntary_ctxt_switches:\t120\n\
                      nonvoluntary_ctxt_switches:\t7\nThreads:\t3\n";
        assert_eq!(switches_in_status(status), 127);
        assert_eq!(switches_in_status("Name:\tx\n"), 0);
    }

    #[test]
    fn context_switches_count_a_sleep_of_a_live_thread() {
        // Other test threads of this process may end meanwhile and leave
        // the sum, so the growth is asserted on this thread alone and the
        // process sum only has to cover this thread.
        let own = || switches_in_status(&fs::read_to_string("/proc/thread-self/status").unwrap());
        let before = own();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let after = own();
        assert!(after > before, "a sleep is a voluntary switch");
        assert!(context_switches("self") >= after);
        assert_eq!(context_switches("no-such-process"), 0);
    }

    #[test]
    fn thread_names_and_cpu_are_read_from_a_stat_text() {
        let stat = "42 (tls front) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        let (name, seconds) = name_and_cpu_in_stat(stat).unwrap();
        assert_eq!(name, "tls front");
        assert!((seconds - 3.0).abs() < 1e-9);
        assert_eq!(name_and_cpu_in_stat("42 no name"), None);
    }

    #[test]
    fn a_named_live_thread_is_found_with_its_cpu() {
        let (spun, spun_wait) = std::sync::mpsc::channel::<()>();
        let (release, release_wait) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::Builder::new()
            .name("cpu-test-spin".into())
            .spawn(move || {
                let before = thread_cpu_seconds();
                let mut sum = 0u64;
                while thread_cpu_seconds() - before < 0.05 {
                    sum = std::hint::black_box(sum.wrapping_add(1));
                }
                spun.send(()).unwrap();
                release_wait.recv().unwrap();
            })
            .unwrap();
        spun_wait.recv().unwrap();
        let threads = thread_cpu_by_name("self");
        release.send(()).unwrap();
        worker.join().unwrap();
        assert!(threads["cpu-test-spin"] > 0.0, "{threads:?}");
        assert!(thread_cpu_by_name("no-such-process").is_empty());
    }

    #[test]
    fn growth_is_taken_per_name() {
        let before = BTreeMap::from([("a".to_owned(), 1.0), ("gone".to_owned(), 2.0)]);
        let after = BTreeMap::from([("a".to_owned(), 1.5), ("b".to_owned(), 0.25)]);
        let growth = thread_cpu_growth(&before, &after);
        assert_eq!(growth["a"], 0.5);
        assert_eq!(growth["b"], 0.25);
        assert!(!growth.contains_key("gone"));
    }

    #[test]
    fn proc_cpu_of_self_is_read() {
        assert!(cpu_seconds("self") >= 0.0);
        assert_eq!(cpu_seconds("no-such-process"), 0.0);
    }
}
