//! `narad ctx add|select|ls|rm`: named connection settings kept in
//! `<config dir>/narad/contexts.json` (`$XDG_CONFIG_HOME`, else
//! `~/.config`), mode 0600 because it may hold passwords. The selected
//! context applies when neither a flag nor the environment names a value.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use clap::Subcommand;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::output::{say, table};
use super::{Connection, Failure, Outcome};

/// The server a client verb talks to when no flag, environment variable
/// or context names one.
pub(crate) const DEFAULT_SERVER: &str = "http://127.0.0.1:7942";

/// The contexts file's permission bits: owner read and write only.
const FILE_MODE: u32 = 0o600;

/// One context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Context {
    pub(crate) server: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) password: Option<String>,
}

/// The contexts file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Contexts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    current: Option<String>,
    #[serde(default)]
    contexts: BTreeMap<String, Context>,
}

/// `narad ctx` verbs.
#[derive(Debug, Subcommand)]
pub(crate) enum CtxCommand {
    /// Add (or replace) a context; the first one added is selected.
    Add {
        /// The context's name.
        name: String,
        /// Its server URL [default: -s/--server, else
        /// http://127.0.0.1:7942]. Its user is -u/--user.
        #[arg(long)]
        url: Option<String>,
        /// Keep the password (-p or NARAD_PASS) in the context.
        #[arg(long)]
        save_password: bool,
    },
    /// Select the context the verbs use.
    Select {
        /// The context's name.
        name: String,
    },
    /// List the contexts; `*` marks the selected one.
    Ls,
    /// Remove a context.
    Rm {
        /// The context's name.
        name: String,
    },
}

impl Contexts {
    /// Where the file lives.
    ///
    /// # Errors
    /// No home or config directory is known.
    pub(crate) fn path() -> Result<PathBuf, Failure> {
        dirs::config_dir()
            .map(|dir| dir.join("narad").join("contexts.json"))
            .ok_or_else(|| {
                Failure::Usage(
                    "no config directory: set HOME or XDG_CONFIG_HOME to keep contexts".into(),
                )
            })
    }

    /// The file's contexts; none when there is no file.
    ///
    /// # Errors
    /// The file exists but cannot be read or parsed.
    pub(crate) fn load() -> Result<Self, Failure> {
        let Ok(path) = Self::path() else {
            return Ok(Self::default());
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => {
                return Err(Failure::Usage(format!(
                    "cannot read {}: {e}",
                    path.display()
                )));
            }
        };
        serde_json::from_str(&text).map_err(|e| {
            Failure::Usage(format!(
                "{} is not a valid contexts file ({e}); fix or remove it",
                path.display()
            ))
        })
    }

    /// Writes the file (a temporary file of mode 0600, renamed over it).
    fn save(&self) -> Result<PathBuf, Failure> {
        let path = Self::path()?;
        let failed =
            |e: std::io::Error| Failure::Usage(format!("cannot write {}: {e}", path.display()));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        let temporary = path.with_extension("json.tmp");
        let _ = std::fs::remove_file(&temporary);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&temporary)
            .map_err(failed)?;
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Failure::Usage(format!("cannot encode the contexts: {e}")))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.write_all(b"\n"))
            .and_then(|()| file.sync_all())
            .map_err(failed)?;
        std::fs::rename(&temporary, &path).map_err(failed)?;
        Ok(path)
    }

    /// The context called `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Context> {
        self.contexts.get(name)
    }

    /// The selected context, if it still exists.
    pub(crate) fn selected(&self) -> Option<&Context> {
        self.current.as_deref().and_then(|name| self.get(name))
    }

    fn known(&self, name: &str) -> Result<(), Failure> {
        if self.contexts.contains_key(name) {
            Ok(())
        } else {
            Err(Failure::Usage(format!(
                "no context named {name:?}; list them with `narad ctx ls`"
            )))
        }
    }
}

/// Runs a `narad ctx` verb.
pub(crate) fn run(command: CtxCommand, connection: &Connection) -> Outcome {
    let mut contexts = Contexts::load()?;
    let json = connection.json;
    match command {
        CtxCommand::Add {
            name,
            url,
            save_password,
        } => {
            let password = match (save_password, connection.password.clone()) {
                (false, _) => None,
                (true, Some(password)) => Some(password),
                (true, None) => {
                    return Err(Failure::Usage(
                        "--save-password: give the password with -p or NARAD_PASS".into(),
                    ));
                }
            };
            let context = Context {
                server: url
                    .or_else(|| connection.server.clone())
                    .unwrap_or_else(|| DEFAULT_SERVER.to_owned()),
                user: connection.user.clone(),
                password,
            };
            contexts.contexts.insert(name.clone(), context);
            if contexts.selected().is_none() {
                contexts.current = Some(name.clone());
            }
            let path = contexts.save()?;
            let selected = contexts.current.as_deref() == Some(name.as_str());
            if json {
                return say!(
                    "{}",
                    json!({ "context": name, "path": path.display().to_string(), "selected": selected })
                );
            }
            say!("context {name} saved in {}", path.display())
        }
        CtxCommand::Select { name } => {
            contexts.known(&name)?;
            contexts.current = Some(name.clone());
            contexts.save()?;
            if json {
                return say!("{}", json!({ "context": name, "selected": true }));
            }
            say!("context {name} selected")
        }
        CtxCommand::Ls => list(&contexts, json),
        CtxCommand::Rm { name } => {
            contexts.known(&name)?;
            contexts.contexts.remove(&name);
            if contexts.current.as_deref() == Some(name.as_str()) {
                contexts.current = None;
            }
            contexts.save()?;
            if json {
                return say!("{}", json!({ "context": name, "removed": true }));
            }
            say!("context {name} removed")
        }
    }
}

fn list(contexts: &Contexts, json: bool) -> Outcome {
    if json {
        for (name, context) in &contexts.contexts {
            let selected = contexts.current.as_deref() == Some(name.as_str());
            say!(
                "{}",
                json!({
                    "name": name, "server": context.server, "user": context.user,
                    "selected": selected,
                })
            )?;
        }
        return Ok(());
    }
    let mut rows = table(&["", "NAME", "SERVER", "USER", "PASSWORD"]);
    for (name, context) in &contexts.contexts {
        let selected = contexts.current.as_deref() == Some(name.as_str());
        rows.add_row(vec![
            if selected { "*" } else { "" }.to_owned(),
            name.clone(),
            context.server.clone(),
            context.user.clone().unwrap_or_else(|| "-".into()),
            if context.password.is_some() {
                "saved"
            } else {
                "-"
            }
            .to_owned(),
        ]);
    }
    say!("{rows}")
}
