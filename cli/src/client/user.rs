//! `narad user add|grant|ls|rm` (spec §1.8; admin only).

use std::io::BufRead;

use clap::Subcommand;
use serde_json::{Value, json};

use super::http::{Body, Subject, encode};
use super::output::{field, say, table};
use super::{Connection, Failure, Outcome};

/// `narad user` verbs.
#[derive(Debug, Subcommand)]
pub(crate) enum UserCommand {
    /// Create a user.
    Add {
        /// The new user's name.
        name: String,
        /// The new user's password (prefer --user-password-stdin).
        #[arg(long, required_unless_present = "user_password_stdin")]
        user_password: Option<String>,
        /// Read the new user's password from the first line of stdin.
        #[arg(long, conflicts_with = "user_password")]
        user_password_stdin: bool,
        /// A grant, `action:pattern,pattern` (actions produce, consume,
        /// create; a pattern may end in `*`) or `admin`. Repeatable.
        #[arg(long = "grant", value_parser = parse_grant)]
        grants: Vec<Value>,
    },
    /// Replace a user's grants (with none: remove them all).
    Grant {
        /// The user.
        name: String,
        /// A grant, as for `user add`. Repeatable.
        #[arg(long = "grant", value_parser = parse_grant)]
        grants: Vec<Value>,
    },
    /// List the users and their grants.
    Ls,
    /// Delete a user.
    Rm {
        /// The user.
        name: String,
    },
}

/// `action:pattern,pattern` or `admin` as a Grant object.
///
/// # Errors
/// An unknown action, or patterns missing (or given to `admin`).
pub(crate) fn parse_grant(text: &str) -> Result<Value, String> {
    let (action, patterns) = match text.split_once(':') {
        Some((action, patterns)) => (action, Some(patterns)),
        None => (text, None),
    };
    match (action, patterns) {
        ("admin", None) => Ok(json!({ "action": "admin" })),
        ("admin", Some(_)) => Err("the admin grant takes no patterns: write `admin`".into()),
        ("produce" | "consume" | "create", Some(patterns)) => {
            let patterns: Vec<&str> = patterns.split(',').filter(|p| !p.is_empty()).collect();
            if patterns.is_empty() {
                return Err(format!("{action}: name at least one topic pattern"));
            }
            Ok(json!({ "action": action, "patterns": patterns }))
        }
        ("produce" | "consume" | "create", None) => Err(format!(
            "{action} needs topic patterns: write `{action}:orders,logs-*`"
        )),
        _ => Err(format!(
            "unknown grant {text:?}: write `produce:PATTERNS`, `consume:PATTERNS`, \
             `create:PATTERNS` or `admin`"
        )),
    }
}

/// Runs a `narad user` verb.
pub(crate) fn run(command: UserCommand, connection: &Connection) -> Outcome {
    let api = connection.api()?;
    let json = connection.json;
    match command {
        UserCommand::Add {
            name,
            user_password,
            user_password_stdin,
            grants,
        } => {
            let password = match user_password {
                Some(password) if !user_password_stdin => password,
                _ => password_line("--user-password-stdin")?,
            };
            let body = json!({ "username": name, "password": password, "grants": grants });
            let answer = api.send("POST", "/v1/users", Some(Body::Json(&body)))?;
            api.expect_about(
                answer,
                &[201],
                &format!("create user {name}"),
                Subject::User,
            )?;
            if json {
                return say!(
                    "{}",
                    json!({ "user": name, "created": true, "grants": grants })
                );
            }
            say!("user {name} created")
        }
        UserCommand::Grant { name, grants } => {
            let body = json!({ "grants": grants });
            let path = format!("/v1/users/{}/grants", encode(&name));
            let answer = api.send("PUT", &path, Some(Body::Json(&body)))?;
            let what = format!("set the grants of {name}");
            api.expect_about(answer, &[200], &what, Subject::User)?;
            if json {
                return say!("{}", json!({ "user": name, "grants": grants }));
            }
            say!("user {name} now has {} grant(s)", grants.len())
        }
        UserCommand::Ls => {
            let answer = api.send("GET", "/v1/users", None)?;
            let users = api
                .expect_about(answer, &[200], "list users", Subject::User)?
                .json()?;
            let users = users.as_array().cloned().unwrap_or_default();
            if json {
                for user in &users {
                    say!("{user}")?;
                }
                return Ok(());
            }
            let mut rows = table(&["USER", "GRANTS"]);
            for user in &users {
                let grants = if user.get("root").and_then(Value::as_bool) == Some(true) {
                    "admin (root)".to_owned()
                } else {
                    grants_text(user)
                };
                rows.add_row(vec![field(user, "username"), grants]);
            }
            say!("{rows}")
        }
        UserCommand::Rm { name } => {
            let path = format!("/v1/users/{}", encode(&name));
            let answer = api.send("DELETE", &path, None)?;
            api.expect_about(
                answer,
                &[204],
                &format!("delete user {name}"),
                Subject::User,
            )?;
            if json {
                return say!("{}", json!({ "user": name, "deleted": true }));
            }
            say!("user {name} deleted")
        }
    }
}

/// A user's grants as `action:patterns` words.
fn grants_text(user: &Value) -> String {
    let Some(grants) = user.get("grants").and_then(Value::as_array) else {
        return "-".into();
    };
    grants
        .iter()
        .map(|grant| {
            let action = field(grant, "action");
            match grant.get("patterns").and_then(Value::as_array) {
                Some(patterns) => {
                    let patterns: Vec<&str> = patterns.iter().filter_map(Value::as_str).collect();
                    format!("{action}:{}", patterns.join(","))
                }
                None => action,
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The first line of stdin as a password; `flag` names the flag that
/// asked for it in the error.
pub(super) fn password_line(flag: &str) -> Result<String, Failure> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| Failure::Usage(format!("cannot read the new password from stdin: {e}")))?;
    let password = line.trim_end_matches(['\r', '\n']).to_owned();
    if password.is_empty() {
        return Err(Failure::Usage(format!(
            "{flag}: standard input held no password"
        )));
    }
    Ok(password)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_parse_into_the_wire_shape() {
        assert_eq!(parse_grant("admin"), Ok(json!({"action": "admin"})));
        assert_eq!(
            parse_grant("produce:orders,logs-*"),
            Ok(json!({"action": "produce", "patterns": ["orders", "logs-*"]}))
        );
    }

    #[test]
    fn malformed_grants_are_refused() {
        for text in ["produce", "produce:", "admin:x", "delete:orders"] {
            assert!(parse_grant(text).is_err(), "{text}");
        }
    }
}
