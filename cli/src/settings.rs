//! The command line of a node command, made from its table of settings:
//! `--config FILE` and one `--flag VALUE` per [`Setting`], each with the
//! help line the table gives it. So a setting is declared once (file key,
//! variable, flag, help) and `narad control` and `narad data` share the
//! code that turns their command lines into configuration layers: the
//! file, then the environment, then the flags
//! ([`narad_controlplane::node::config::layered`]).
//!
//! Every value is taken as text; its shape and bounds are checked by the
//! command's `resolve`, so a bad flag is named as a bad file key or
//! variable is, with the same text.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgMatches, Command, FromArgMatches};
use narad_controlplane::node::config::layered::{Layer, Setting, Settings};

/// The argument id and value name of `--config`.
const CONFIG: &str = "config";

/// `--config` and one flag per setting of `S`, as given.
pub(crate) struct SettingArgs<S> {
    /// The JSON config file, when one is named.
    config: Option<PathBuf>,
    /// The value of every flag given, by setting.
    flags: Vec<(Setting, String)>,
    settings: PhantomData<S>,
}

impl<S> std::fmt::Debug for SettingArgs<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettingArgs")
            .field("config", &self.config)
            .field("flags", &self.flags)
            .finish()
    }
}

impl<S: Settings> SettingArgs<S> {
    /// The configuration layers in increasing precedence: the `--config`
    /// file when one is named, the environment read through `env`, then
    /// the flags.
    ///
    /// # Errors
    /// The file could not be read or is not a valid configuration; the
    /// text names the file.
    pub(crate) fn layers(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<Layer<S>>, String> {
        let mut layers = Vec::with_capacity(3);
        if let Some(path) = &self.config {
            layers.push(file_layer(path)?);
        }
        layers.push(Layer::from_env(env));
        layers.push(Layer::from_flags(
            self.flags
                .iter()
                .map(|(setting, value)| (*setting, Some(value.clone()))),
        ));
        Ok(layers)
    }
}

/// The layer of the config file at `path`.
fn file_layer<S: Settings>(path: &Path) -> Result<Layer<S>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("invalid configuration: --config {}: {e}", path.display()))?;
    Layer::from_json(&text).map_err(|e| format!("{e} ({})", path.display()))
}

/// A flag's value name in `--help`: `node-id` shows as `<NODE_ID>`.
fn value_name(flag: &str) -> String {
    flag.replace('-', "_").to_ascii_uppercase()
}

impl<S: Settings> clap::Args for SettingArgs<S> {
    fn augment_args(command: Command) -> Command {
        let config = Arg::new(CONFIG)
            .long(CONFIG)
            .value_name("CONFIG")
            .value_parser(clap::value_parser!(PathBuf))
            .help("JSON config file (strict: unknown keys are refused)");
        S::ALL.iter().fold(command.arg(config), |command, setting| {
            command.arg(
                Arg::new(setting.flag)
                    .long(setting.flag)
                    .value_name(value_name(setting.flag))
                    .help(setting.help),
            )
        })
    }

    fn augment_args_for_update(command: Command) -> Command {
        Self::augment_args(command)
    }
}

impl<S: Settings> FromArgMatches for SettingArgs<S> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let flags = S::ALL
            .iter()
            .filter_map(|setting| {
                let value = matches.get_one::<String>(setting.flag)?;
                Some((*setting, value.clone()))
            })
            .collect();
        Ok(Self {
            config: matches.get_one::<PathBuf>(CONFIG).cloned(),
            flags,
            settings: PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
