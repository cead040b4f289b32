//! What every long-running `narad` command sets up first: its configuration
//! layers, its log output and the async runtime it runs on.

use std::path::Path;
use std::process::ExitCode;

use narad_controlplane::node::config::layered::{Layer, Settings};

use raft_log::{RaftEvents, Shape};

mod raft_log;

/// Exit status when the process could not start (the environment refused).
const EXIT_START: u8 = 1;

/// A node command's configuration layers in increasing precedence: the
/// `--config` file when one is named, the environment, then `flags`.
///
/// # Errors
/// The file could not be read or is not a valid configuration; the text
/// names the file.
pub(crate) fn config_layers<S: Settings>(
    config: Option<&Path>,
    flags: Layer<S>,
) -> Result<Vec<Layer<S>>, String> {
    let mut layers = Vec::new();
    if let Some(path) = config {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("invalid configuration: --config {}: {e}", path.display()))?;
        layers.push(Layer::from_json(&text).map_err(|e| format!("{e} ({})", path.display()))?);
    }
    layers.push(Layer::from_env(|name| std::env::var(name).ok()));
    layers.push(flags);
    Ok(layers)
}

/// `log.format`: one JSON object a line (the spec's default for a server),
/// or human-readable text (`narad dev`'s default).
pub(crate) const LOG_FORMATS: [&str; 2] = ["json", "text"];

/// Logs to stderr at `log_level` (openraft at `warn` unless asked lower,
/// its events as [`raft_log`] says), as `log_format` (`json` or `text`; see
/// [`LOG_FORMATS`]).
pub(crate) fn init_logging(log_level: &str, log_format: &str) {
    let filter = tracing_subscriber::EnvFilter::new(format!("{log_level},openraft=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr);
    if log_format == "json" {
        // Fields at the top level beside `timestamp`, `level`, `target`
        // and `message`, so a log pipeline indexes them as they are.
        builder
            .json()
            .flatten_event(true)
            .map_event_format(|json| RaftEvents::new(json, Shape::Json))
            .init();
    } else {
        builder
            .map_event_format(|full| RaftEvents::new(full, Shape::Text))
            .init();
    }
}

/// [`init_logging`], then builds the multi-threaded runtime. A runtime
/// that cannot start is reported as `narad <command>: ...` and answered
/// with the exit status.
pub(crate) fn logging_and_runtime(
    command: &str,
    log_level: &str,
    log_format: &str,
) -> Result<tokio::runtime::Runtime, ExitCode> {
    init_logging(log_level, log_format);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("narad {command}: cannot start the async runtime: {e}");
            ExitCode::from(EXIT_START)
        })
}
