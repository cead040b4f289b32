//! What every long-running `narad` command sets up first: its configuration
//! layers, its log output and the async runtime it runs on.

use std::process::ExitCode;

use narad_controlplane::node::config::layered::{ConfigError, Layer, Settings};

use raft_log::{RaftEvents, Shape};

use crate::settings::SettingArgs;

mod raft_log;

/// Exit status when the configuration is invalid.
pub(crate) const EXIT_CONFIG: u8 = 2;
/// Exit status when the process could not start (the environment refused).
pub(crate) const EXIT_START: u8 = 1;

/// A variable of the process environment; `None` when unset or not UTF-8.
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The start of a node command: its configuration, resolved by `resolve`
/// from `args`' layers (file, environment, flags), then its logging (at the
/// level and in the format `logging` reads from the configuration) and the
/// async runtime.
///
/// # Errors
/// The exit status, once the failure is reported as `narad <command>:
/// ...`: [`EXIT_CONFIG`] for an invalid configuration, [`EXIT_START`] for a
/// runtime that cannot start.
pub(crate) fn configure<S: Settings, C>(
    command: &str,
    args: &SettingArgs<S>,
    resolve: impl FnOnce(&[Layer<S>]) -> Result<C, ConfigError>,
    logging: impl Fn(&C) -> (&str, &str),
) -> Result<(C, tokio::runtime::Runtime), ExitCode> {
    let config = args
        .layers(env)
        .and_then(|layers| resolve(&layers).map_err(|e| e.to_string()))
        .map_err(|message| {
            eprintln!("narad {command}: {message}");
            ExitCode::from(EXIT_CONFIG)
        })?;
    let (log_level, log_format) = logging(&config);
    let runtime = logging_and_runtime(command, log_level, log_format)?;
    Ok((config, runtime))
}

/// `log.format`: one JSON object a line (the spec's default for a server),
/// or human-readable text (`narad dev`'s default).
pub(crate) const LOG_FORMATS: [&str; 2] = ["json", "text"];

/// Logs to stderr at `log_level` (openraft at `warn` unless asked lower,
/// its events as [`raft_log`] says), as `log_format` (`json` or `text`; see
/// [`LOG_FORMATS`]).
pub(crate) fn init_logging(log_level: &str, log_format: &str) {
    let filter = tracing_subscriber::EnvFilter::new(format!("{log_level},openraft=warn"));
    // A line that cannot be written (stderr on a full disk, a closed pipe)
    // is dropped. tracing-subscriber's default reports such a failure with
    // `eprintln!`, which panics when stderr itself fails: that killed every
    // thread that logged while a disk was full, the commit workers among
    // them, and the node stopped committing for good (seen in a soak).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .log_internal_errors(false)
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

/// The environment variable that keeps transparent huge pages allowed
/// (`allow`), for a node that would rather spend memory than CPU.
pub(crate) const THP_VAR: &str = "NARAD_TRANSPARENT_HUGE_PAGES";

/// Turns transparent huge pages off for this process, before its logs and
/// caches fill the allocator's arenas, unless [`THP_VAR`] is `allow`.
///
/// mimalloc asks the kernel for huge pages on its arenas. A huge page is
/// resident whole (2 MiB) once any byte of it is touched, so pages the
/// allocator has freed inside one stay resident: in 30-minute soaks the
/// node's resident memory ran at 2.3 to 2.9 times its live heap and rose at
/// each burst of large records (docs/operations.md, "Memory bound"). Huge
/// pages save TLB misses, so turning them off may cost CPU on the produce
/// path (docs/benchmarks.md). The flag is the process's own
/// (`PR_SET_THP_DISABLE`); a kernel that refuses it is logged and the node
/// goes on.
pub(crate) fn disable_transparent_huge_pages() {
    match env(THP_VAR).as_deref() {
        Some("allow") => {
            tracing::info!(
                "transparent huge pages stay allowed ({THP_VAR}=allow): resident memory may exceed the bound in docs/operations.md"
            );
            return;
        }
        Some("off") | None => {}
        Some(other) => tracing::warn!(
            value = other,
            "{THP_VAR} is neither `off` nor `allow`; transparent huge pages are turned off"
        ),
    }
    match nix::sys::prctl::set_thp_disable(true) {
        Ok(()) => tracing::debug!("transparent huge pages are off for this process"),
        Err(error) => tracing::warn!(
            %error,
            "cannot turn transparent huge pages off for this process; its resident memory may exceed the bound in docs/operations.md"
        ),
    }
}

/// [`init_logging`] and [`disable_transparent_huge_pages`], then builds the
/// multi-threaded runtime. A runtime
/// that cannot start is reported as `narad <command>: ...` and answered
/// with the exit status.
pub(crate) fn logging_and_runtime(
    command: &str,
    log_level: &str,
    log_format: &str,
) -> Result<tokio::runtime::Runtime, ExitCode> {
    init_logging(log_level, log_format);
    disable_transparent_huge_pages();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("narad {command}: cannot start the async runtime: {e}");
            ExitCode::from(EXIT_START)
        })
}
