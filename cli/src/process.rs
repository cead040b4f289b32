//! What every long-running `narad` command sets up first: its log output and
//! the async runtime it runs on.

use std::process::ExitCode;

/// Exit status when the process could not start (the environment refused).
const EXIT_START: u8 = 1;

/// Logs to stderr at `log_level` (openraft at `warn` unless asked lower),
/// then builds the multi-threaded runtime. A runtime that cannot start is
/// reported as `narad <command>: ...` and answered with the exit status.
pub(crate) fn logging_and_runtime(
    command: &str,
    log_level: &str,
) -> Result<tokio::runtime::Runtime, ExitCode> {
    let filter = format!("{log_level},openraft=warn");
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_ansi(false)
        .init();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("narad {command}: cannot start the async runtime: {e}");
            ExitCode::from(EXIT_START)
        })
}
