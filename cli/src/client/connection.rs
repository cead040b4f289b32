//! The connection flags of the client verbs and how they resolve: a flag
//! beats its environment variable, which beats the selected context, which
//! beats the default (`http://127.0.0.1:7942`, no credentials).
//!
//! The environment is read here rather than by clap: clap counts a value
//! from the environment as given on the command line, and an error's usage
//! line would then show `--server <SERVER> --user <USER> --password
//! <PASSWORD>` as if the verb required them.

use std::io::BufRead;

use clap::Args;

use super::ctx::{Context, Contexts, DEFAULT_SERVER};
use super::{Api, Failure};

/// The user sent with a password when no user is named (the root admin).
const DEFAULT_USER: &str = "admin";

/// The environment variables of the connection flags.
const ENV_SERVER: &str = "NARAD_ADDR";
const ENV_USER: &str = "NARAD_USER";
const ENV_PASSWORD: &str = "NARAD_PASS";

/// Connection flags, accepted by every client verb (and by each of its
/// subcommands, anywhere after the verb).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct Connection {
    /// Server: a URL, or HOST:PORT for http:// [env: NARAD_ADDR] [default:
    /// the context's, else http://127.0.0.1:7942].
    #[arg(short = 's', long, global = true)]
    pub(crate) server: Option<String>,
    /// User for HTTP Basic auth [env: NARAD_USER] [default: the context's;
    /// `admin` when only a password is given].
    #[arg(short = 'u', long, global = true)]
    pub(crate) user: Option<String>,
    /// Password for HTTP Basic auth [env: NARAD_PASS] (prefer NARAD_PASS or
    /// --password-stdin: a flag shows in the process list).
    #[arg(short = 'p', long, global = true)]
    pub(crate) password: Option<String>,
    /// Read the password from the first line of standard input.
    #[arg(long, global = true, conflicts_with = "password")]
    pub(crate) password_stdin: bool,
    /// Use this context instead of the selected one (see `narad ctx`).
    #[arg(long, global = true)]
    pub(crate) ctx: Option<String>,
    /// Print only JSON, for scripts: one object a line for messages and
    /// listings, one object for anything else.
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

/// Where and as whom to connect, once every layer is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) server: String,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
}

impl Connection {
    /// These flags with each one not given filled from its environment
    /// variable (`env` looks one up); an empty variable counts as unset.
    pub(crate) fn with_environment(mut self, env: impl Fn(&str) -> Option<String>) -> Self {
        let env = |name: &str| env(name).filter(|value| !value.is_empty());
        self.server = self.server.or_else(|| env(ENV_SERVER));
        self.user = self.user.or_else(|| env(ENV_USER));
        if !self.password_stdin {
            self.password = self.password.or_else(|| env(ENV_PASSWORD));
        }
        self
    }

    /// The API client for these flags.
    ///
    /// # Errors
    /// A named context that does not exist, an unreadable contexts file or
    /// password on stdin, or a server URL that is not `http(s)://`.
    pub(crate) fn api(&self) -> Result<Api, Failure> {
        let context = self.context()?;
        let mut target = resolve(self, context.as_ref());
        if self.password_stdin {
            target.password = Some(password_from_stdin()?);
            if target.user.is_none() {
                target.user = Some(DEFAULT_USER.to_owned());
            }
        }
        Api::new(target)
    }

    /// The context `--ctx` names, else the selected one, else none.
    fn context(&self) -> Result<Option<Context>, Failure> {
        let contexts = Contexts::load()?;
        match &self.ctx {
            Some(name) => contexts.get(name).cloned().map(Some).ok_or_else(|| {
                Failure::Usage(format!(
                    "no context named {name:?}; list them with `narad ctx ls`"
                ))
            }),
            None => Ok(contexts.selected().cloned()),
        }
    }
}

/// Flag-or-environment values over the context's over the defaults.
pub(crate) fn resolve(flags: &Connection, context: Option<&Context>) -> Target {
    let server = flags
        .server
        .clone()
        .or_else(|| context.map(|context| context.server.clone()))
        .unwrap_or_else(|| DEFAULT_SERVER.to_owned());
    let password = flags
        .password
        .clone()
        .or_else(|| context.and_then(|context| context.password.clone()));
    let user = flags
        .user
        .clone()
        .or_else(|| context.and_then(|context| context.user.clone()))
        .or_else(|| password.as_ref().map(|_| DEFAULT_USER.to_owned()));
    Target {
        server: with_scheme(server.trim_end_matches('/')),
        user,
        password,
    }
}

/// `server` with `http://` put in front when it names no scheme, as the
/// Go client does with `NARAD_ADDR` (`127.0.0.1:7942`).
fn with_scheme(server: &str) -> String {
    if server.contains("://") {
        server.to_owned()
    } else {
        format!("http://{server}")
    }
}

fn password_from_stdin() -> Result<String, Failure> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| Failure::Usage(format!("cannot read the password from stdin: {e}")))?;
    let password = line.trim_end_matches(['\r', '\n']).to_owned();
    if password.is_empty() {
        return Err(Failure::Usage(
            "--password-stdin: standard input held no password".into(),
        ));
    }
    Ok(password)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> Context {
        Context {
            server: "http://ctx:1".into(),
            user: Some("ctx-user".into()),
            password: Some("ctx-pass".into()),
        }
    }

    #[test]
    fn flags_beat_the_context() {
        let flags = Connection {
            server: Some("http://flag:2/".into()),
            user: Some("flag-user".into()),
            ..Connection::default()
        };
        let target = resolve(&flags, Some(&context()));
        assert_eq!(target.server, "http://flag:2");
        assert_eq!(target.user.as_deref(), Some("flag-user"));
        assert_eq!(target.password.as_deref(), Some("ctx-pass"));
    }

    #[test]
    fn the_default_server_applies_without_flag_or_context() {
        let target = resolve(&Connection::default(), None);
        assert_eq!(target.server, DEFAULT_SERVER);
        assert_eq!(target.user, None);
    }

    #[test]
    fn an_address_without_a_scheme_is_http() {
        let flags = Connection {
            server: Some("127.0.0.1:7942/".into()),
            ..Connection::default()
        };
        assert_eq!(resolve(&flags, None).server, "http://127.0.0.1:7942");
        let context = Context {
            server: "broker.example:7942".into(),
            ..context()
        };
        let target = resolve(&Connection::default(), Some(&context));
        assert_eq!(target.server, "http://broker.example:7942");
        let https = Connection {
            server: Some("https://broker.example".into()),
            ..Connection::default()
        };
        assert_eq!(resolve(&https, None).server, "https://broker.example");
    }

    #[test]
    fn the_environment_fills_only_the_flags_not_given() {
        let env = |name: &str| match name {
            "NARAD_ADDR" => Some("http://env:3".to_owned()),
            "NARAD_USER" => Some(String::new()),
            "NARAD_PASS" => Some("env-pass".to_owned()),
            _ => None,
        };
        let flags = Connection {
            server: Some("http://flag:2".into()),
            ..Connection::default()
        }
        .with_environment(env);
        assert_eq!(flags.server.as_deref(), Some("http://flag:2"));
        assert_eq!(flags.user, None, "an empty variable is unset");
        assert_eq!(flags.password.as_deref(), Some("env-pass"));
        let from_stdin = Connection {
            password_stdin: true,
            ..Connection::default()
        }
        .with_environment(env);
        assert_eq!(
            from_stdin.password, None,
            "--password-stdin wins over NARAD_PASS"
        );
    }

    #[test]
    fn a_password_alone_goes_with_the_root_admin() {
        let flags = Connection {
            password: Some("secret".into()),
            ..Connection::default()
        };
        assert_eq!(resolve(&flags, None).user.as_deref(), Some("admin"));
    }
}
