//! Layered configuration, written once for every node command (`narad
//! control`, `narad data`, `narad dev`): built-in defaults, then a strict
//! JSON file, then environment variables, then flags, a later layer
//! winning. Each command names its settings (a [`Settings`] table of file
//! key, variable, flag and help line) and validates the merged values
//! itself with the parsers here, which check a value's shape and bounds;
//! this module keeps every value's source, so each error names the setting
//! and where its bad value came from (`(from the config file)`,
//! `(from NARAD_X)`, `(from --x)`), in one text format for every command.
//!
//! Why it lives in the control plane: `narad control`'s own configuration
//! ([`super::resolve`]) is resolved and tested in this crate, so the
//! layering must be reachable from here; the data plane never reads
//! settings (the `narad` binary builds its `DataNodeConfig`), and the
//! binary is the only crate that links both planes, so `narad data` and
//! `narad dev` use this module through it. `narad-meta` reads no
//! configuration by design and `narad-protocol` is the wire, so neither
//! is a home for it.
//!
//! What it does not do: read files or the process environment (callers
//! pass the text and a lookup), or know any setting's meaning beyond the
//! spec's defaults for the few every node command shares ([`defaults`]).

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::net::{Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde_json::Value;

/// Where a value came from, for error texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The JSON config file.
    File,
    /// An environment variable.
    Env,
    /// A command-line flag.
    Flag,
}

/// One configurable setting: its file key, environment variable and flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// Dotted key in the config file (`cluster.node_id`).
    pub key: &'static str,
    /// Environment variable.
    pub env: &'static str,
    /// Command-line flag (without `--`).
    pub flag: &'static str,
    /// The flag's line in `--help` (empty when none is given).
    pub help: &'static str,
}

/// Declares settings as constants of type [`Setting`] and `ALL`, every one
/// of them in the order `--help` lists their flags. An entry is either new,
/// `NODE_ID = "cluster.node_id", "NARAD_NODE_ID", "node-id", "help";` (the
/// help line may be left out), or one of the settings every node command
/// shares, `LOG_LEVEL = shared::LOG_LEVEL;` (see [`shared`]).
#[macro_export]
macro_rules! settings {
    ($vis:vis, $($entries:tt)*) => {
        $crate::settings!(@entry ($vis) []; $($entries)*);
    };
    (@entry ($vis:vis) [$($all:ident)*];
        $name:ident = $key:literal, $env:literal, $flag:literal $(, $help:literal)?; $($rest:tt)*) => {
        #[doc = concat!("`", $key, "` / `", $env, "` / `--", $flag, "`.")]
        $vis const $name: $crate::node::config::layered::Setting =
            $crate::node::config::layered::Setting {
                key: $key,
                env: $env,
                flag: $flag,
                help: concat!("" $(, $help)?),
            };
        $crate::settings!(@entry ($vis) [$($all)* $name]; $($rest)*);
    };
    (@entry ($vis:vis) [$($all:ident)*]; $name:ident = shared::$shared:ident; $($rest:tt)*) => {
        #[doc = concat!("`", stringify!($shared), "`, shared by every node command.")]
        $vis const $name: $crate::node::config::layered::Setting =
            $crate::node::config::layered::shared::$shared;
        $crate::settings!(@entry ($vis) [$($all)* $name]; $($rest)*);
    };
    (@entry ($vis:vis) [$($all:ident)*];) => {
        /// Every setting, in the order `--help` lists their flags.
        $vis const ALL: &[$crate::node::config::layered::Setting] = &[$($all),*];
    };
}

/// The settings every node command takes alike: same key, variable, flag
/// and help line. A command's table names them `NAME = shared::NAME;`.
pub mod shared {
    crate::settings! {
        pub,
        DATA_DIR = "storage.data_dir", "NARAD_DATA_DIR", "data-dir",
            "Data directory: storage.data_dir";
        SECURITY = "security.enabled", "NARAD_SECURITY_ENABLED", "security-enabled",
            "true or false: security.enabled";
        ALLOW_INSECURE = "security.allow_insecure_cluster", "NARAD_SECURITY_ALLOW_INSECURE_CLUSTER", "allow-insecure-cluster",
            "true or false: security.allow_insecure_cluster";
        CLUSTER_TLS_CERT_FILE = "security.cluster_tls_cert_file", "NARAD_CLUSTER_TLS_CERT_FILE", "cluster-tls-cert-file",
            "PEM certificate (chain) of this node for mutual TLS between nodes: security.cluster_tls_cert_file";
        CLUSTER_TLS_KEY_FILE = "security.cluster_tls_key_file", "NARAD_CLUSTER_TLS_KEY_FILE", "cluster-tls-key-file",
            "PEM private key of that certificate: security.cluster_tls_key_file";
        CLUSTER_TLS_CA_FILE = "security.cluster_tls_ca_file", "NARAD_CLUSTER_TLS_CA_FILE", "cluster-tls-ca-file",
            "PEM CA certificate(s) every node's certificate must chain to: security.cluster_tls_ca_file";
        ALLOW_PLAINTEXT_RAFT = "security.allow_plaintext_raft", "NARAD_ALLOW_PLAINTEXT_RAFT", "allow-plaintext-raft",
            "true or false: a secured node shared with peers may run without cluster TLS files, security.allow_plaintext_raft";
        LOG_LEVEL = "log.level", "NARAD_LOG_LEVEL", "log-level",
            "debug, info, warn or error: log.level";
        LOG_FORMAT = "log.format", "NARAD_LOG_FORMAT", "log-format",
            "json (the default: one object a line) or text: log.format";
    }
}

/// A command's table of settings.
pub trait Settings {
    /// Every setting the command takes; the file and the environment may
    /// set these only.
    const ALL: &'static [Setting];

    /// A list value in the config file as the text its environment
    /// variable would hold; `None` when `setting` takes no list or `items`
    /// are not its shape. No setting takes a list unless the command says.
    fn file_list(setting: &Setting, items: &[Value]) -> Option<String> {
        let _ = (setting, items);
        None
    }
}

/// An invalid configuration: the setting, where its value came from, why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {setting}{from}: {reason}")]
pub struct ConfigError {
    /// The setting's file key (or environment variable for env-only ones).
    pub setting: String,
    /// ` (from NARAD_X)`, ` (from --x)`, ` (from the config file)` or empty.
    pub from: String,
    /// What is wrong and what is expected.
    pub reason: String,
}

impl ConfigError {
    /// An error of `setting`, whose value came `from` (see the field).
    pub fn new(setting: &str, from: String, reason: impl Into<String>) -> Self {
        Self {
            setting: setting.to_owned(),
            from,
            reason: reason.into(),
        }
    }

    /// A built-in default that does not parse: a bug, but reported as the
    /// others are.
    pub fn built_in(reason: String) -> Self {
        Self::new("built-in default", String::new(), reason)
    }
}

/// Raw values by file key from one source, for the settings `S` names.
pub struct Layer<S> {
    source: Source,
    values: BTreeMap<&'static str, String>,
    settings: PhantomData<S>,
}

impl<S> fmt::Debug for Layer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Layer")
            .field("source", &self.source)
            .field("values", &self.values)
            .finish()
    }
}

impl<S> Clone for Layer<S> {
    fn clone(&self) -> Self {
        Self {
            source: self.source,
            values: self.values.clone(),
            settings: PhantomData,
        }
    }
}

impl<S: Settings> Layer<S> {
    /// An empty layer of `source`.
    pub fn new(source: Source) -> Self {
        Self {
            source,
            values: BTreeMap::new(),
            settings: PhantomData,
        }
    }

    /// Sets `setting` to `value` (flags use this).
    pub fn set(&mut self, setting: Setting, value: impl Into<String>) {
        self.values.insert(setting.key, value.into());
    }

    /// The flag layer: every setting whose flag was given.
    pub fn from_flags(flags: impl IntoIterator<Item = (Setting, Option<String>)>) -> Self {
        let mut layer = Self::new(Source::Flag);
        for (setting, value) in flags {
            if let Some(value) = value {
                layer.set(setting, value);
            }
        }
        layer
    }

    /// The environment layer: every setting whose variable is set.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut layer = Self::new(Source::Env);
        for setting in S::ALL {
            if let Some(value) = lookup(setting.env) {
                layer.set(*setting, value);
            }
        }
        layer
    }

    /// The file layer from JSON text: an object of sections
    /// (`{"cluster": {"node_id": 1}}`). An unknown section or key is
    /// refused, so a typo never falls back to a default unnoticed.
    ///
    /// # Errors
    /// Unparseable JSON, an unknown key, or a value of the wrong shape.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let file = |reason: String| ConfigError::new("config file", String::new(), reason);
        let root: Value = serde_json::from_str(text).map_err(|e| file(e.to_string()))?;
        let Value::Object(sections) = root else {
            return Err(file("the top level must be an object of sections".into()));
        };
        let mut layer = Self::new(Source::File);
        for (section, body) in sections {
            let Value::Object(fields) = body else {
                return Err(file(format!("section {section:?} must be an object")));
            };
            for (field, value) in fields {
                let key = format!("{section}.{field}");
                let Some(setting) = S::ALL.iter().find(|s| s.key == key) else {
                    return Err(file(format!("unknown setting {key:?}")));
                };
                layer.set(*setting, file_value::<S>(setting, &value)?);
            }
        }
        Ok(layer)
    }
}

/// A file value as the text an environment variable would hold.
fn file_value<S: Settings>(setting: &Setting, value: &Value) -> Result<String, ConfigError> {
    let wrong = || {
        ConfigError::new(
            setting.key,
            " (from the config file)".into(),
            format!("unexpected value {value}"),
        )
    };
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Number(number) => Ok(number.to_string()),
        Value::Bool(flag) => Ok(flag.to_string()),
        Value::Array(items) => S::file_list(setting, items).ok_or_else(wrong),
        _ => Err(wrong()),
    }
}

/// The layers merged, each value with its source: a later layer's value
/// wins.
#[derive(Debug)]
pub struct Merged {
    values: BTreeMap<&'static str, (String, Source)>,
}

impl Merged {
    /// Merges `layers`, given in increasing precedence.
    pub fn of<S: Settings>(layers: &[Layer<S>]) -> Self {
        let mut values = BTreeMap::new();
        for layer in layers {
            for (key, value) in &layer.values {
                values.insert(*key, (value.clone(), layer.source));
            }
        }
        Self { values }
    }

    fn raw(&self, setting: Setting) -> Option<(&str, String)> {
        self.values.get(setting.key).map(|(value, source)| {
            let from = match source {
                Source::File => " (from the config file)".to_owned(),
                Source::Env => format!(" (from {})", setting.env),
                Source::Flag => format!(" (from --{})", setting.flag),
            };
            (value.as_str(), from)
        })
    }

    /// Parses `setting`, or answers `default` when nothing set it (`None`:
    /// the setting is required).
    ///
    /// # Errors
    /// `parse`'s reason, or a required setting nothing set, named with
    /// where its value came from.
    pub fn parse<T>(
        &self,
        setting: Setting,
        default: Option<T>,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, ConfigError> {
        match self.raw(setting) {
            Some((value, from)) => {
                parse(value).map_err(|reason| ConfigError::new(setting.key, from, reason))
            }
            None => default.ok_or_else(|| {
                ConfigError::new(
                    setting.key,
                    String::new(),
                    format!(
                        "required: set it in the config file, {} or --{}",
                        setting.env, setting.flag
                    ),
                )
            }),
        }
    }

    /// Parses the address `setting`, or answers its built-in `default`.
    ///
    /// # Errors
    /// An address that does not parse, named with where it came from (a
    /// `default` that does not parse is [`ConfigError::built_in`]).
    pub fn parse_addr(&self, setting: Setting, default: &str) -> Result<SocketAddr, ConfigError> {
        let default = parse_addr(default).map_err(ConfigError::built_in)?;
        self.parse(setting, Some(default), parse_addr)
    }

    /// The log level and format (`level` and `format`: `log.level` and
    /// `log.format`), over the spec's server [`defaults`].
    ///
    /// # Errors
    /// A level or format the spec does not name, with where it came from.
    pub fn logging(
        &self,
        level: Setting,
        format: Setting,
    ) -> Result<(String, String), ConfigError> {
        let level = self.parse(level, Some(defaults::LOG_LEVEL.to_owned()), parse_log_level)?;
        let format = self.parse(
            format,
            Some(defaults::LOG_FORMAT.to_owned()),
            parse_log_format,
        )?;
        Ok((level, format))
    }

    /// The data directory `setting` (`storage.data_dir`), over the spec's
    /// default.
    ///
    /// # Errors
    /// An empty path, with where it came from.
    pub fn data_dir(&self, setting: Setting) -> Result<PathBuf, ConfigError> {
        self.parse(
            setting,
            Some(PathBuf::from(defaults::DATA_DIR)),
            parse_data_dir,
        )
    }

    /// Where `setting`'s value came from, as error texts say it; empty when
    /// it is the default.
    pub fn origin(&self, setting: Setting) -> String {
        self.raw(setting).map(|(_, from)| from).unwrap_or_default()
    }

    /// An error of `setting` that names where its value came from.
    pub fn error(&self, setting: Setting, reason: impl Into<String>) -> ConfigError {
        ConfigError::new(setting.key, self.origin(setting), reason)
    }
}

/// The spec's defaults for the settings every node command shares.
pub mod defaults {
    /// The spec's default data directory.
    pub const DATA_DIR: &str = "data";
    /// The spec's log level.
    pub const LOG_LEVEL: &str = "info";
    /// The spec's log format for a server: one JSON object a line.
    pub const LOG_FORMAT: &str = "json";
}

/// `value` as a number from `bounds`' start to its end, both included;
/// `what` names the number in the error (`"a thread count"`).
///
/// # Errors
/// Not a number of `T`, or one outside `bounds`.
pub fn parse_within<T>(value: &str, bounds: RangeInclusive<T>, what: &str) -> Result<T, String>
where
    T: FromStr + PartialOrd + fmt::Display,
{
    match value.parse::<T>() {
        Ok(number) if bounds.contains(&number) => Ok(number),
        _ => Err(format!(
            "{value:?} is not {what} from {} to {}",
            bounds.start(),
            bounds.end()
        )),
    }
}

/// `value` as a number of milliseconds from `min` to `max`.
///
/// # Errors
/// Not a number, or one outside the bounds.
pub fn parse_millis_within(value: &str, min: u64, max: u64) -> Result<Duration, String> {
    parse_within(value, min..=max, "a number of milliseconds").map(Duration::from_millis)
}

/// `value` as 0 (off: `None`) or a number of milliseconds from `min` up.
///
/// # Errors
/// Not a number, or one from 1 to below `min`.
pub fn parse_off_or_millis_from(value: &str, min: u64) -> Result<Option<Duration>, String> {
    match value.parse::<u64>() {
        Ok(0) => Ok(None),
        Ok(ms) if ms >= min => Ok(Some(Duration::from_millis(ms))),
        _ => Err(format!(
            "{value:?} is not 0 (off) or a number of milliseconds from {min}"
        )),
    }
}

/// `value` as a number above zero; `what` names its unit in the error
/// (`"log entries"`).
///
/// # Errors
/// Not a number of `T`, or zero.
pub fn parse_positive<T>(value: &str, what: &str) -> Result<T, String>
where
    T: FromStr + PartialOrd + Default,
{
    match value.parse::<T>() {
        Ok(number) if number > T::default() => Ok(number),
        _ => Err(format!("{value:?} is not a positive number of {what}")),
    }
}

/// `value` as any number of `T`; `what` says what it counts in the error
/// (`"a number of log entries"`).
///
/// # Errors
/// Not a number of `T`.
pub fn parse_number<T: FromStr>(value: &str, what: &str) -> Result<T, String> {
    value
        .parse::<T>()
        .map_err(|_| format!("{value:?} is not {what}"))
}

/// The log levels `log.level` takes.
///
/// # Errors
/// Any other text.
pub fn parse_log_level(value: &str) -> Result<String, String> {
    match value {
        "debug" | "info" | "warn" | "error" => Ok(value.to_owned()),
        _ => Err(format!("{value:?} is not one of debug, info, warn, error")),
    }
}

/// The log formats `log.format` takes: `json` (one object a line) or
/// `text`.
///
/// # Errors
/// Any other text.
pub fn parse_log_format(value: &str) -> Result<String, String> {
    match value {
        "json" | "text" => Ok(value.to_owned()),
        _ => Err(format!("{value:?} is not one of json, text")),
    }
}

/// A data directory: any path but the empty one.
///
/// # Errors
/// An empty value.
pub fn parse_data_dir(value: &str) -> Result<PathBuf, String> {
    if value.is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(PathBuf::from(value))
    }
}

/// An `ip:port` address; `:port` (the spec's spelling) means every
/// interface.
///
/// # Errors
/// Anything else.
pub fn parse_addr(value: &str) -> Result<SocketAddr, String> {
    let value = match value.strip_prefix(':') {
        Some(port) => format!("{}:{port}", Ipv4Addr::UNSPECIFIED),
        None => value.to_owned(),
    };
    value
        .parse()
        .map_err(|_| format!("{value:?} is not an ip:port address"))
}

/// `true`/`1` or `false`/`0`.
///
/// # Errors
/// Anything else.
pub fn parse_bool(value: &str) -> Result<bool, String> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("{value:?} is not true or false")),
    }
}

/// `"250ms"`, `"1s"`, `"2m"`; never zero.
///
/// # Errors
/// Any other shape, or zero.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let bad = || format!("{value:?} is not a duration like \"250ms\", \"1s\" or \"2m\"");
    let (number, unit) = value
        .find(|c: char| !c.is_ascii_digit())
        .map(|at| value.split_at(at))
        .ok_or_else(bad)?;
    let number: u64 = number.parse().map_err(|_| bad())?;
    let duration = match unit {
        "ms" => Duration::from_millis(number),
        "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number.saturating_mul(60)),
        _ => return Err(bad()),
    };
    if duration.is_zero() {
        return Err(format!("{value:?} must be longer than zero"));
    }
    Ok(duration)
}

#[cfg(test)]
#[path = "layered_tests.rs"]
mod tests;
