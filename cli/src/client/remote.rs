//! `narad remote add|ls|info|edit|rm|test|reencrypt` (spec §1.10; admin,
//! security on): the other Narad clusters remote children ship to.
//!
//! A remote's password is read from `--remote-password` or, better, the
//! first line of stdin (`--remote-password-stdin`), and is never printed:
//! the server answers with a fingerprint only.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::duration::{format_ms, parse_ms};
use super::http::{Body, Subject, encode};
use super::output::{field, print_json, rfc3339, say, table};
use super::user::password_line;
use super::{Connection, Failure, Outcome};

/// `narad remote` verbs.
#[derive(Debug, Subcommand)]
pub(crate) enum RemoteCommand {
    /// Add a remote: another Narad cluster and the replicator user there.
    Add {
        /// The remote's name (`^[a-z][a-z0-9-]{0,62}$`).
        name: String,
        /// The target's base URL, https only.
        #[arg(long)]
        url: String,
        /// The replicator user on the target.
        #[arg(long)]
        username: String,
        #[command(flatten)]
        password: PasswordArgs,
        #[command(flatten)]
        options: RemoteOptions,
    },
    /// List the remotes, the cluster's remote key and this node's view.
    Ls,
    /// Describe a remote.
    Info {
        /// The remote.
        name: String,
    },
    /// Change a remote; a new --url, --username or --ca-pem needs the
    /// password again.
    #[command(alias = "set")]
    Edit {
        /// The remote.
        name: String,
        /// A new base URL.
        #[arg(long)]
        url: Option<String>,
        /// A new replicator user.
        #[arg(long)]
        username: Option<String>,
        /// A new password.
        #[arg(long, conflicts_with = "remote_password_stdin")]
        remote_password: Option<String>,
        /// Read the new password from the first line of stdin.
        #[arg(long)]
        remote_password_stdin: bool,
        /// Remove the pinned CA: trust the public roots again.
        #[arg(long, conflicts_with = "ca_pem")]
        no_ca_pem: bool,
        /// Refuse the change unless the remote is at this revision.
        #[arg(long)]
        revision: Option<u64>,
        #[command(flatten)]
        options: RemoteOptions,
    },
    /// Delete a remote.
    Rm {
        /// The remote.
        name: String,
        /// Delete even though remote children ship to it (they then
        /// report `remote_missing`).
        #[arg(long)]
        force: bool,
    },
    /// Check a remote from the node the client reached.
    Test {
        /// The remote.
        name: String,
        /// The topic on the remote to check.
        #[arg(long)]
        topic: String,
        /// The local parent topic the remote child would ship from.
        #[arg(long)]
        source: Option<String>,
    },
    /// Seal every remote password again under the current cluster secret
    /// (after NARAD_CLUSTER_SECRET changed; the old one in
    /// NARAD_CLUSTER_SECRET_PREVIOUS).
    Reencrypt,
}

/// The password of `remote add`: on the command line or from stdin.
#[derive(Debug, Args)]
pub(crate) struct PasswordArgs {
    /// The replicator's password (prefer --remote-password-stdin).
    #[arg(long, required_unless_present = "remote_password_stdin")]
    remote_password: Option<String>,
    /// Read the replicator's password from the first line of stdin.
    #[arg(long, conflicts_with = "remote_password")]
    remote_password_stdin: bool,
}

/// A remote's pinned CA and limits; each given replaces the server's.
#[derive(Debug, Args)]
pub(crate) struct RemoteOptions {
    /// A PEM file of 1 to 16 CA certificates the remote's TLS certificate
    /// must chain to.
    #[arg(long)]
    ca_pem: Option<PathBuf>,
    /// Requests in flight to the remote per node (1-256).
    #[arg(long)]
    max_in_flight: Option<u32>,
    /// One request's budget, e.g. 30s (5s-2m).
    #[arg(long, value_parser = parse_ms)]
    request_timeout: Option<u64>,
    /// An idle connection is closed after this, e.g. 30s.
    #[arg(long, value_parser = parse_ms)]
    idle_conn_timeout: Option<u64>,
    /// A connection is not reused after this age, e.g. 5m.
    #[arg(long, value_parser = parse_ms)]
    conn_max_age: Option<u64>,
    /// Between reachability checks, e.g. 1m.
    #[arg(long, value_parser = parse_ms)]
    check_interval: Option<u64>,
    /// Body compression: none or zstd.
    #[arg(long, value_parser = ["none", "zstd"])]
    compression: Option<String>,
}

impl RemoteOptions {
    /// The `limits` object of what was given; `None` when nothing was.
    fn limits(&self) -> Option<Value> {
        let mut limits = Map::new();
        let numbers = [
            ("max_in_flight", self.max_in_flight.map(u64::from)),
            ("request_timeout_ms", self.request_timeout),
            ("idle_conn_timeout_ms", self.idle_conn_timeout),
            ("conn_max_age_ms", self.conn_max_age),
            ("check_interval_ms", self.check_interval),
        ];
        for (name, value) in numbers {
            if let Some(value) = value {
                limits.insert(name.into(), json!(value));
            }
        }
        if let Some(compression) = &self.compression {
            limits.insert("compression".into(), json!(compression));
        }
        (!limits.is_empty()).then_some(Value::Object(limits))
    }

    /// The PEM text of `--ca-pem`.
    fn ca_pem(&self) -> Result<Option<String>, Failure> {
        self.ca_pem
            .as_ref()
            .map(|path| {
                std::fs::read_to_string(path).map_err(|e| {
                    Failure::Usage(format!("--ca-pem {}: cannot read it: {e}", path.display()))
                })
            })
            .transpose()
    }

    /// `limits` and `ca_pem` into `body`.
    fn fill(&self, body: &mut Map<String, Value>) -> Result<(), Failure> {
        if let Some(limits) = self.limits() {
            body.insert("limits".into(), limits);
        }
        if let Some(pem) = self.ca_pem()? {
            body.insert("ca_pem".into(), json!(pem));
        }
        Ok(())
    }
}

fn password(given: Option<String>, stdin: bool) -> Result<Option<String>, Failure> {
    match (given, stdin) {
        (_, true) => password_line("--remote-password-stdin").map(Some),
        (given, false) => Ok(given),
    }
}

/// Runs a `narad remote` verb.
pub(crate) fn run(command: RemoteCommand, connection: &Connection) -> Outcome {
    let api = connection.api()?;
    let json = connection.json;
    match command {
        RemoteCommand::Add {
            name,
            url,
            username,
            password: given,
            options,
        } => {
            let password = password(given.remote_password, given.remote_password_stdin)?;
            let mut body = Map::new();
            body.insert("name".into(), json!(name));
            body.insert("url".into(), json!(url));
            body.insert("username".into(), json!(username));
            body.insert("password".into(), json!(password));
            options.fill(&mut body)?;
            let answer = api.send(
                "POST",
                "/v1/remotes",
                Some(Body::Json(&Value::Object(body))),
            )?;
            let remote = api
                .expect_about(
                    answer,
                    &[201],
                    &format!("add remote {name}"),
                    Subject::Remote,
                )?
                .json()?;
            if json {
                return print_json(&remote);
            }
            say!(
                "remote {name} added: {} as {} (password fingerprint {})",
                field(&remote, "url"),
                field(&remote, "username"),
                remote["password"]["fingerprint"].as_str().unwrap_or("-")
            )
        }
        RemoteCommand::Ls => {
            let answer = api.send("GET", "/v1/remotes", None)?;
            let listing = api
                .expect_about(answer, &[200], "list remotes", Subject::Remote)?
                .json()?;
            if json {
                return print_json(&listing);
            }
            say!("{}", listing_text(&listing))
        }
        RemoteCommand::Info { name } => {
            let path = format!("/v1/remotes/{}", encode(&name));
            let answer = api.send("GET", &path, None)?;
            let remote = api
                .expect_about(
                    answer,
                    &[200],
                    &format!("describe remote {name}"),
                    Subject::Remote,
                )?
                .json()?;
            if json {
                return print_json(&remote);
            }
            say!("{}", info_text(&remote))
        }
        RemoteCommand::Edit {
            name,
            url,
            username,
            remote_password,
            remote_password_stdin,
            no_ca_pem,
            revision,
            options,
        } => {
            let mut body = Map::new();
            if let Some(url) = url {
                body.insert("url".into(), json!(url));
            }
            if let Some(username) = username {
                body.insert("username".into(), json!(username));
            }
            if let Some(password) = password(remote_password, remote_password_stdin)? {
                body.insert("password".into(), json!(password));
            }
            if no_ca_pem {
                body.insert("ca_pem".into(), Value::Null);
            }
            if let Some(revision) = revision {
                body.insert("revision".into(), json!(revision));
            }
            options.fill(&mut body)?;
            if body.is_empty() {
                return Err(Failure::Usage(
                    "remote edit: nothing to change; give --url, --username, a password, \
                     --ca-pem/--no-ca-pem or a limit"
                        .into(),
                ));
            }
            let path = format!("/v1/remotes/{}", encode(&name));
            let answer = api.send("PATCH", &path, Some(Body::Json(&Value::Object(body))))?;
            let remote = api
                .expect_about(
                    answer,
                    &[200],
                    &format!("change remote {name}"),
                    Subject::Remote,
                )?
                .json()?;
            if json {
                return print_json(&remote);
            }
            say!(
                "remote {name} changed: revision {}, credential version {}",
                field(&remote, "revision"),
                field(&remote, "credential_version")
            )
        }
        RemoteCommand::Rm { name, force } => {
            let query = if force { "?force=true" } else { "" };
            let path = format!("/v1/remotes/{}{query}", encode(&name));
            let answer = api.send("DELETE", &path, None)?;
            api.expect_about(
                answer,
                &[204],
                &format!("delete remote {name}"),
                Subject::Remote,
            )?;
            if json {
                return say!("{}", json!({ "remote": name, "deleted": true }));
            }
            say!("remote {name} deleted")
        }
        RemoteCommand::Test {
            name,
            topic,
            source,
        } => {
            let mut body = json!({ "topic": topic });
            if let Some(source) = source {
                body["source"] = json!(source);
            }
            let path = format!("/v1/remotes/{}/test", encode(&name));
            let answer = api.send("POST", &path, Some(Body::Json(&body)))?;
            let report = api
                .expect_about(
                    answer,
                    &[200],
                    &format!("test remote {name}"),
                    Subject::Remote,
                )?
                .json()?;
            if json {
                print_json(&report)?;
            } else {
                say!("{}", test_text(&report))?;
            }
            if report["result"] == "pass" {
                Ok(())
            } else {
                Err(Failure::Refused(format!(
                    "remote {name} failed its checks: {}",
                    report["class"].as_str().unwrap_or("unknown")
                )))
            }
        }
        RemoteCommand::Reencrypt => {
            let answer = api.send("POST", "/v1/cluster/reencrypt-remotes", None)?;
            let report = api
                .expect_about(answer, &[200], "re-encrypt remotes", Subject::Remote)?
                .json()?;
            if json {
                return print_json(&report);
            }
            say!("{}", reencrypt_text(&report))
        }
    }
}

/// The table of `remote ls`, then the cluster key line.
fn listing_text(listing: &Value) -> String {
    let mut rows = table(&["REMOTE", "URL", "USERNAME", "CREDENTIAL", "KEY", "LINKS"]);
    for remote in listing["remotes"].as_array().into_iter().flatten() {
        let links = remote["links"].as_array().map_or(0, Vec::len);
        let credential = remote["nodes"]
            .as_array()
            .and_then(|nodes| nodes.first())
            .map_or_else(|| "-".to_owned(), |node| field(node, "credential"));
        rows.add_row(vec![
            field(remote, "name"),
            field(remote, "url"),
            field(remote, "username"),
            format!("v{} {credential}", field(remote, "credential_version")),
            format!("v{}", field(&remote["password"], "key_version")),
            links.to_string(),
        ]);
    }
    let key = &listing["key"];
    let key_line = if key.is_null() {
        "cluster remote key: none yet (the first remote makes it)".to_owned()
    } else {
        let current = if key["node_current"] == true {
            "this node's secret derives it"
        } else {
            "this node's secret does NOT derive it: run `narad remote reencrypt`"
        };
        format!(
            "cluster remote key: v{} {} ({current})",
            field(key, "version"),
            field(key, "key_id")
        )
    };
    format!("{rows}\n{key_line}")
}

/// The lines of `remote info`.
fn info_text(remote: &Value) -> String {
    let password = &remote["password"];
    let set_at = password["set_at"]
        .as_i64()
        .map_or_else(|| "-".into(), rfc3339);
    let limits = &remote["limits"];
    let timeout = limits["request_timeout_ms"]
        .as_u64()
        .map_or_else(|| "-".into(), format_ms);
    let links: Vec<&str> = remote["links"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut lines = vec![
        format!("remote:             {}", field(remote, "name")),
        format!("url:                {}", field(remote, "url")),
        format!("username:           {}", field(remote, "username")),
        format!(
            "password:           fingerprint {}, set {set_at} by {}, key v{}",
            field(password, "fingerprint"),
            field(password, "set_by"),
            field(password, "key_version")
        ),
        format!(
            "credential version: {}",
            field(remote, "credential_version")
        ),
        format!("pinned CA sha512:   {}", field(remote, "ca_pem_sha512")),
        format!(
            "limits:             {} in flight, timeout {timeout}, compression {}",
            field(limits, "max_in_flight"),
            field(limits, "compression")
        ),
        format!("revision:           {}", field(remote, "revision")),
        format!(
            "links:              {}",
            if links.is_empty() {
                "-".to_owned()
            } else {
                links.join(", ")
            }
        ),
    ];
    for node in remote["nodes"].as_array().into_iter().flatten() {
        lines.push(format!(
            "node {}:             credential {}{}",
            field(node, "node"),
            field(node, "credential"),
            if node["key_current"] == true {
                ""
            } else {
                " (sealed under an older key)"
            }
        ));
    }
    lines.join("\n")
}

/// The lines of `remote test`.
fn test_text(report: &Value) -> String {
    let mut lines = vec![format!(
        "remote {}: {}",
        field(report, "remote"),
        field(report, "result")
    )];
    for check in report["checks"].as_array().into_iter().flatten() {
        lines.push(format!(
            "  {:<14} {:<8} {}",
            field(check, "name"),
            field(check, "result"),
            check["detail"].as_str().unwrap_or("")
        ));
    }
    lines.join("\n")
}

/// The line of `remote reencrypt`, then one per failure.
fn reencrypt_text(report: &Value) -> String {
    let mut lines = vec![format!(
        "remote key v{}: {} re-encrypted, {} already current",
        field(report, "key_version"),
        field(report, "reencrypted"),
        field(report, "already_current")
    )];
    for failed in report["failed"].as_array().into_iter().flatten() {
        lines.push(format!(
            "  {} did not open: {}",
            field(failed, "remote"),
            field(failed, "error")
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
#[path = "remote_tests.rs"]
mod tests;
