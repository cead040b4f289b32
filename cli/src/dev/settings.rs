//! The settings `narad dev` shares with `narad data`: the log format, the
//! access log, the three storage switches, the HTTP front threads, the
//! retention interval, the ingress WAL's root and the partition logs' tail
//! cache. Each takes the variable
//! and the flag that `narad data` gives it (no file: `narad dev` takes
//! none), and each value is checked by `narad data`'s parser, with its
//! bounds and its error text, through the shared layering
//! ([`narad_controlplane::node::config::layered`]).
//!
//! clap still declares the flags and their variables, so `--help` lists
//! them as before; what clap found reaches the layering with its source
//! (`ArgMatches::value_source`), so an error says `(from --flag)` or
//! `(from NARAD_X)`, and a default clap shows is not taken as set.

use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use narad_controlplane::node::config::layered::{
    ConfigError, Layer, Merged, Setting, Settings, Source, parse_bool, parse_log_format,
};
use narad_dataplane::http::remotes::RemotesConfig;
use narad_dataplane::node::RETENTION_CHECK_INTERVAL_DEFAULT;

use crate::data::config::{
    defaults, keys, parse_front_threads, parse_retention_check_interval, parse_tail_cache_bytes,
    parse_wal_dir,
};
use crate::data::front;
use crate::process::LOG_FORMATS;

/// `narad dev`'s log format: human-readable lines, for a terminal.
const LOG_FORMAT_DEFAULT: &str = "text";

/// The data node's retention interval, in the flag's unit.
const RETENTION_CHECK_INTERVAL_DEFAULT_MS: u128 = RETENTION_CHECK_INTERVAL_DEFAULT.as_millis();

/// The data-node settings `narad dev` takes, in the order `--help` lists
/// their flags.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DevSettings;

impl Settings for DevSettings {
    const ALL: &'static [Setting] = &[
        keys::LOG_FORMAT,
        keys::ACCESS_LOG,
        keys::WAL_PREALLOC,
        keys::LOG_PREALLOC,
        keys::WAL_INLINE_FLUSH,
        keys::FRONT_THREADS,
        keys::RETENTION_CHECK_INTERVAL,
        keys::WAL_DIR,
        keys::TAIL_CACHE_BYTES,
        keys::REMOTES_ALLOWED_HOSTS,
        keys::REMOTES_ALLOWED_PORTS,
        keys::REMOTES_ALLOW_ADDRESSES,
        keys::REMOTES_ALLOW_LOOPBACK,
        keys::REMOTES_MAX_HELD_BYTES,
        keys::REMOTES_API_HOP_ENCRYPTED,
    ];
}

/// A switch that takes `true` or `false` and shows its default.
fn switch(setting: Setting, default: bool, help: &'static str) -> Arg {
    Arg::new(setting.flag)
        .long(setting.flag)
        .env(setting.env)
        .default_value(if default { "true" } else { "false" })
        .action(ArgAction::Set)
        .value_name("BOOL")
        .value_parser(clap::value_parser!(bool))
        .help(help)
}

/// `narad dev`'s flags of [`DevSettings`], as `--help` shows them.
pub(crate) fn args() -> [Arg; 15] {
    [
        Arg::new(keys::LOG_FORMAT.flag)
            .long(keys::LOG_FORMAT.flag)
            .env(keys::LOG_FORMAT.env)
            .default_value(LOG_FORMAT_DEFAULT)
            .value_name("LOG_FORMAT")
            .value_parser(LOG_FORMATS)
            .help("Log format: text (the default here) or json, one object a line (log.format)"),
        Arg::new(keys::ACCESS_LOG.flag)
            .long(keys::ACCESS_LOG.flag)
            .env(keys::ACCESS_LOG.env)
            .action(ArgAction::SetTrue)
            .help(
                "One log line a request on target narad::access: route, method, status, \
                 duration, identity, bytes (http.access_log)",
            ),
        switch(
            keys::WAL_PREALLOC,
            defaults::INGRESS_WAL_PREALLOC,
            "Prepare each next ingress WAL segment in the background and write it with \
             O_DIRECT (storage.ingress_wal_prealloc)",
        ),
        switch(
            keys::LOG_PREALLOC,
            defaults::PARTITION_LOG_PREALLOC,
            "Write small commits into zeros prepared ahead of each partition's active \
             segment (storage.partition_log_prealloc)",
        ),
        switch(
            keys::WAL_INLINE_FLUSH,
            defaults::INGRESS_WAL_INLINE_FLUSH,
            "A produce that finds the ingress WAL idle writes and syncs its records itself \
             instead of handing them to the WAL's sync thread (storage.ingress_wal_inline_flush)",
        ),
        Arg::new(keys::FRONT_THREADS.flag)
            .long(keys::FRONT_THREADS.flag)
            .env(keys::FRONT_THREADS.env)
            .value_name("N")
            .help(
                "Threads serving HTTP connections, each on its own runtime; 0 serves them on \
                 the shared one; one per core by default (http.front_threads)",
            ),
        Arg::new(keys::RETENTION_CHECK_INTERVAL.flag)
            .long(keys::RETENTION_CHECK_INTERVAL.flag)
            .env(keys::RETENTION_CHECK_INTERVAL.env)
            .value_name("MS")
            .default_value(RETENTION_CHECK_INTERVAL_DEFAULT_MS.to_string())
            .help(
                "Milliseconds between retention passes over the open partition logs \
                 (storage.retention_check_interval_ms)",
            ),
        Arg::new(keys::WAL_DIR.flag)
            .long(keys::WAL_DIR.flag)
            .env(keys::WAL_DIR.env)
            .value_name("DIR")
            .help(
                "Root of the ingress WAL, which lives in DIR/ingress/produce, e.g. on a device \
                 of its own; under --data-dir by default (storage.wal_dir)",
            ),
        setting_arg(keys::TAIL_CACHE_BYTES, "BYTES"),
        setting_arg(keys::REMOTES_ALLOWED_HOSTS, "HOSTS"),
        setting_arg(keys::REMOTES_ALLOWED_PORTS, "PORTS"),
        setting_arg(keys::REMOTES_ALLOW_ADDRESSES, "CIDRS"),
        switch(
            keys::REMOTES_ALLOW_LOOPBACK,
            false,
            "For tests and labs only: remotes may reach loopback addresses \
             (remotes.allow_loopback)",
        ),
        setting_arg(keys::REMOTES_MAX_HELD_BYTES, "BYTES"),
        switch(
            keys::REMOTES_API_HOP_ENCRYPTED,
            false,
            "The hop to the API is encrypted, so remote passwords may be sent to it \
             (remotes.api_hop_encrypted)",
        ),
    ]
}

/// A setting's flag and variable with the help of `narad data`'s table.
fn setting_arg(setting: Setting, value_name: &'static str) -> Arg {
    Arg::new(setting.flag)
        .long(setting.flag)
        .env(setting.env)
        .value_name(value_name)
        .help(setting.help)
}

/// Adds [`args`] to `command`.
pub(crate) fn augment(command: Command) -> Command {
    command.args(args())
}

/// The layers clap found in `matches`: the environment's values, then the
/// flags'. A default clap filled in is in neither.
pub(crate) fn layers(matches: &ArgMatches) -> Vec<Layer<DevSettings>> {
    let mut env = Layer::new(Source::Env);
    let mut flags = Layer::new(Source::Flag);
    for setting in DevSettings::ALL {
        let Some(value) = text(matches, setting.flag) else {
            continue;
        };
        match matches.value_source(setting.flag) {
            Some(ValueSource::EnvVariable) => env.set(*setting, value),
            Some(ValueSource::CommandLine) => flags.set(*setting, value),
            _ => {}
        }
    }
    vec![env, flags]
}

/// The value clap holds for `id` as text: a switch's parsed `true` or
/// `false`, else the text given.
fn text(matches: &ArgMatches, id: &str) -> Option<String> {
    if let Ok(switch) = matches.try_get_one::<bool>(id) {
        return switch.map(bool::to_string);
    }
    matches.try_get_one::<String>(id).ok().flatten().cloned()
}

/// `narad dev`'s validated data-node settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DevConfig {
    /// `log.format`: `text` (the default here) or `json`.
    pub(crate) log_format: String,
    /// `http.access_log`.
    pub(crate) access_log: bool,
    /// `storage.ingress_wal_prealloc`.
    pub(crate) ingress_wal_prealloc: bool,
    /// `storage.partition_log_prealloc`.
    pub(crate) partition_log_prealloc: bool,
    /// `storage.ingress_wal_inline_flush`.
    pub(crate) ingress_wal_inline_flush: bool,
    /// `http.front_threads`.
    pub(crate) front_threads: usize,
    /// `storage.retention_check_interval_ms`.
    pub(crate) retention_check_interval: Duration,
    /// `storage.wal_dir`; `None` keeps the WAL under `--data-dir`.
    pub(crate) wal_dir: Option<PathBuf>,
    /// `storage.tail_cache_bytes`.
    pub(crate) tail_cache_bytes: usize,
    /// `remotes.*`, checked as with security on (`--secure` is checked
    /// apart, as it is a flag of `narad dev` alone).
    pub(crate) remotes: RemotesConfig,
}

/// Validates `layers` (in increasing precedence) with `narad data`'s
/// parsers and bounds, over `narad dev`'s defaults.
///
/// # Errors
/// The first invalid setting, named with where its value came from.
pub(crate) fn resolve(layers: &[Layer<DevSettings>]) -> Result<DevConfig, ConfigError> {
    let merged = Merged::of(layers);
    let log_format = merged.parse(
        keys::LOG_FORMAT,
        Some(LOG_FORMAT_DEFAULT.to_owned()),
        parse_log_format,
    )?;
    let switch = |setting: Setting, default: bool| merged.parse(setting, Some(default), parse_bool);
    Ok(DevConfig {
        log_format,
        access_log: switch(keys::ACCESS_LOG, false)?,
        ingress_wal_prealloc: switch(keys::WAL_PREALLOC, defaults::INGRESS_WAL_PREALLOC)?,
        partition_log_prealloc: switch(keys::LOG_PREALLOC, defaults::PARTITION_LOG_PREALLOC)?,
        ingress_wal_inline_flush: switch(
            keys::WAL_INLINE_FLUSH,
            defaults::INGRESS_WAL_INLINE_FLUSH,
        )?,
        front_threads: merged.parse(
            keys::FRONT_THREADS,
            Some(front::default_count()),
            parse_front_threads,
        )?,
        retention_check_interval: merged.parse(
            keys::RETENTION_CHECK_INTERVAL,
            Some(RETENTION_CHECK_INTERVAL_DEFAULT),
            parse_retention_check_interval,
        )?,
        wal_dir: merged.parse(keys::WAL_DIR, Some(None), parse_wal_dir)?,
        tail_cache_bytes: merged.parse(
            keys::TAIL_CACHE_BYTES,
            Some(narad_plog::TAIL_CACHE_BYTES_DEFAULT),
            parse_tail_cache_bytes,
        )?,
        remotes: crate::data::remotes_config::resolve(&merged, true)?,
    })
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
