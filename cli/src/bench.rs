//! `narad bench NAME [ARGS]`: runs one of the `narad-bench` benchmarks
//! against this binary. The benchmarks are their own binaries (they drive
//! narad from outside, as a client would), built beside this one by
//! `cargo build --release -p narad -p narad-bench`; this verb finds the one
//! asked for next to `narad`, points it at this binary (`NARAD_BIN`, unless
//! already set) and passes the remaining arguments through.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Args;

/// Exit code when the benchmark binary is missing or cannot be started.
const EXIT_NOT_BUILT: u8 = 2;

/// The benchmarks, by the name `narad bench` takes, and their binaries.
const BENCHMARKS: [(&str, &str); 5] = [
    ("produce", "produce-bench"),
    ("flow", "flow-bench"),
    ("wal", "wal-bench"),
    ("plog", "plog-bench"),
    ("disk-baseline", "disk-baseline"),
];

/// Flags of `narad bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Which benchmark: produce (HTTP produce), flow (produce → consume →
    /// ack), wal, plog or disk-baseline. Each writes its JSON to
    /// `target/bench/`.
    #[arg(value_parser = BENCHMARKS.map(|(name, _)| name))]
    name: String,
    /// Passed to the benchmark as they are (for example `--cluster 3`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// Runs the benchmark and exits with its status.
pub(crate) fn run(args: &BenchArgs) -> ExitCode {
    let Some(narad) = std::env::current_exe().ok() else {
        eprintln!("narad bench: cannot tell where this narad binary is");
        return ExitCode::from(EXIT_NOT_BUILT);
    };
    let Some(program) = benchmark_beside(&narad, &args.name) else {
        eprintln!(
            "narad bench: the {} benchmark is not built beside {}; build it with \
             `cargo build --release -p narad -p narad-bench`",
            args.name,
            narad.display()
        );
        return ExitCode::from(EXIT_NOT_BUILT);
    };
    let mut command = Command::new(&program);
    command.args(&args.args);
    if std::env::var_os("NARAD_BIN").is_none() {
        command.env("NARAD_BIN", &narad);
    }
    match command.status() {
        Ok(status) => match status.code().and_then(|code| u8::try_from(code).ok()) {
            Some(code) => ExitCode::from(code),
            // Killed by a signal, or a code outside 0..=255.
            None => ExitCode::FAILURE,
        },
        Err(error) => {
            eprintln!("narad bench: cannot start {}: {error}", program.display());
            ExitCode::from(EXIT_NOT_BUILT)
        }
    }
}

/// The binary of benchmark `name` in the directory of `narad`, if it is there.
fn benchmark_beside(narad: &Path, name: &str) -> Option<PathBuf> {
    let (_, binary) = BENCHMARKS.iter().find(|(known, _)| *known == name)?;
    let path = narad.parent()?.join(binary);
    path.is_file().then_some(path)
}
