//! `narad bench NAME [ARGS]`: runs one of the `narad-bench` benchmarks
//! against this binary. The benchmarks are their own binaries (they drive
//! narad from outside, as a client would), built beside this one by
//! `cargo build --release -p narad -p narad-bench`; this verb finds the one
//! asked for next to `narad`, points it at this binary (`NARAD_BIN`, unless
//! already set) and passes the remaining arguments through.
//!
//! Any other first word is a topic: `narad bench <topic> --count ...` load-tests
//! that topic on a running server ([`crate::client::bench`]). The nine
//! benchmark names are reserved; a topic with one of those names is
//! benchmarked with `narad bench --topic NAME`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Args;

/// Exit code when the benchmark binary is missing or cannot be started.
const EXIT_NOT_BUILT: u8 = 2;

/// The benchmarks, by the name `narad bench` takes, and their binaries.
const BENCHMARKS: [(&str, &str); 9] = [
    ("produce", "produce-bench"),
    ("flow", "flow-bench"),
    ("fanout", "fanout-bench"),
    ("soak", "soak-bench"),
    ("move", "move-bench"),
    ("remote", "remote-bench"),
    ("wal", "wal-bench"),
    ("plog", "plog-bench"),
    ("disk-baseline", "disk-baseline"),
];

/// The help of `narad bench`, which has two forms.
pub(crate) const LONG_ABOUT: &str =
    "Run a named benchmark against this binary, or load-test a topic on a \
running server.

  narad bench NAME [ARGS]     NAME is produce (HTTP produce), flow (produce, consume, ack), \
fanout (fan-out children: parent rate, child delivery, lag, delay), soak (the production-shaped \
soak: seven topics for --duration, default 10m; no delivery after an ack, none lost, RSS over time), \
move (a 1 GiB partition moves to a joining fourth data node under produce load: copy rate next to \
the raw disk, produce p99 during the move next to before; --bytes, --rate, --before), \
remote (remote children: a pre-filled parent drained over HTTPS to a second local cluster with 1, 2 \
and 8 lanes, next to a local child's drain; CPU per shipped record; --records, --lanes), \
wal, plog or disk-baseline. \
The benchmark binary must be built beside narad (cargo build --release -p narad -p narad-bench); \
ARGS pass through (e.g. --cluster 3); each writes its JSON to target/bench/, and with --json \
prints it on stdout (its progress lines then go to stderr).

  narad bench TOPIC [--count 10000] [--size 256] [--workers 8] [--batch N] [--consume] [--out \
chart.png]
                              Produces --count messages of --size bytes to TOPIC on the server \
(-s/--server, NARAD_ADDR or the context) and prints p50/p95/p99 latencies; only 202 counts as \
produced, every other status is reported by code. --consume then consumes and acks them. \
--out writes a PNG chart. A topic named like a benchmark: narad bench --topic NAME.";

/// Flags of `narad bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// A benchmark (produce, flow, fanout, soak, move, remote, wal, plog, disk-baseline), or a topic
    /// to load-test on a running server.
    #[arg(value_name = "NAME|TOPIC", allow_hyphen_values = true)]
    name: OsString,
    /// Passed to the benchmark as they are (for example `--cluster 3`), or
    /// the topic benchmark's flags.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// The environment variable through which a benchmark copies its JSON
/// report to a file (`narad_bench::report::JSON_COPY_ENV`; this crate does
/// not link the benchmarks).
const JSON_COPY_ENV: &str = "NARAD_BENCH_JSON_COPY";

/// A run of one named benchmark.
#[derive(Debug, PartialEq)]
pub(crate) struct NamedRun {
    name: &'static str,
    /// What the benchmark gets, `--json` taken out.
    args: Vec<OsString>,
    /// `--json` was given (before the name, as `narad --json bench NAME`
    /// puts it, or among the arguments): the report's JSON goes to
    /// standard output and the benchmark's own lines to standard error.
    json: bool,
}

/// The named benchmark `narad bench` was asked for, or `None` for a topic
/// benchmark.
pub(crate) fn named(args: &BenchArgs) -> Option<NamedRun> {
    let words = std::iter::once(&args.name).chain(&args.args);
    let json = words.clone().any(|word| word == "--json");
    let mut rest = words.filter(|word| *word != "--json");
    let first = rest.next()?;
    let (name, _) = BENCHMARKS.iter().find(|(name, _)| first == *name)?;
    Some(NamedRun {
        name,
        args: rest.cloned().collect(),
        json,
    })
}

/// The words of a topic benchmark: the topic (or its flags) and the rest.
pub(crate) fn topic_words(args: BenchArgs) -> Vec<OsString> {
    std::iter::once(args.name).chain(args.args).collect()
}

/// The names `narad bench` reserves for its named benchmarks.
pub(crate) fn benchmark_names() -> Vec<&'static str> {
    BENCHMARKS.iter().map(|(name, _)| *name).collect()
}

/// Runs the benchmark and exits with its status.
pub(crate) fn run(run: &NamedRun) -> ExitCode {
    let name = run.name;
    let Some(narad) = std::env::current_exe().ok() else {
        eprintln!("narad bench: cannot tell where this narad binary is");
        return ExitCode::from(EXIT_NOT_BUILT);
    };
    let Some(program) = benchmark_beside(&narad, name) else {
        eprintln!(
            "narad bench: the {name} benchmark is not built beside {}; build it with \
             `cargo build --release -p narad -p narad-bench`",
            narad.display()
        );
        return ExitCode::from(EXIT_NOT_BUILT);
    };
    let mut command = Command::new(&program);
    command.args(&run.args);
    if std::env::var_os("NARAD_BIN").is_none() {
        command.env("NARAD_BIN", &narad);
    }
    let copy = run.json.then(|| {
        std::env::temp_dir().join(format!("narad-bench-{name}-{}.json", std::process::id()))
    });
    if let Some(copy) = &copy {
        command.env(JSON_COPY_ENV, copy);
        // The benchmark's progress lines must not mix with the JSON.
        command.stdout(std::io::stderr());
    }
    let code = match command.status() {
        Ok(status) => match status.code().and_then(|code| u8::try_from(code).ok()) {
            Some(code) => ExitCode::from(code),
            // Killed by a signal, or a code outside 0..=255.
            None => ExitCode::FAILURE,
        },
        Err(error) => {
            eprintln!("narad bench: cannot start {}: {error}", program.display());
            return ExitCode::from(EXIT_NOT_BUILT);
        }
    };
    match copy {
        Some(copy) => print_report(&copy, name, code),
        None => code,
    }
}

/// Prints the JSON report the benchmark copied to `copy`, and removes it.
fn print_report(copy: &Path, name: &str, code: ExitCode) -> ExitCode {
    let text = std::fs::read(copy);
    let _ = std::fs::remove_file(copy);
    match text {
        Ok(text) => {
            // A closed pipe is no error here, as for every verb.
            let _ = std::io::Write::write_all(&mut std::io::stdout(), &text);
            code
        }
        Err(error) => {
            eprintln!("narad bench: the {name} benchmark wrote no report ({error})");
            if code == ExitCode::SUCCESS {
                ExitCode::FAILURE
            } else {
                code
            }
        }
    }
}

/// The binary of benchmark `name` in the directory of `narad`, if it is there.
fn benchmark_beside(narad: &Path, name: &str) -> Option<PathBuf> {
    let (_, binary) = BENCHMARKS.iter().find(|(known, _)| *known == name)?;
    let path = narad.parent()?.join(binary);
    path.is_file().then_some(path)
}
