//! `narad cluster members|moves|decommission` (spec §1.9; admin) and
//! `narad server report`. A server without the cluster routes answers
//! `404`/`405`; that is said plainly, as "not supported by this server".

use clap::Subcommand;
use serde_json::Value;

use super::duration::format_bytes;
use super::http::{Answer, Subject, encode};
use super::output::{field, print_json, say, table};
use super::topic::{all_topics, describe, messages, number, owner_count, partition_stats, role};
use super::{Api, Connection, Failure, Outcome};

/// `narad cluster` verbs.
#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// List the data nodes: status, draining, owned partitions.
    Members,
    /// List the partition moves in progress.
    Moves,
    /// Drain a node: move its partitions away (--cancel clears the mark).
    Decommission {
        /// The node's id.
        node: String,
        /// Clear the decommission mark instead.
        #[arg(long)]
        cancel: bool,
        /// Only say whether it could complete; change nothing.
        #[arg(long, conflicts_with = "cancel")]
        dry_run: bool,
    },
}

/// `narad server` verbs.
#[derive(Debug, Subcommand)]
pub(crate) enum ServerCommand {
    /// Per-topic table: partitions, messages, size, owner count, role.
    Report,
}

/// The answer, or a plain "not supported" when the server does not know
/// the route: a `405`, or a `404` that is the router's plain text rather
/// than the API's `{"error":...}` for a missing node.
fn supported(answer: Answer, what: &str) -> Result<Answer, Failure> {
    let api_error =
        serde_json::from_slice::<Value>(&answer.body).is_ok_and(|body| body.get("error").is_some());
    if answer.status == 405 || (answer.status == 404 && !api_error) {
        return Err(Failure::Refused(format!(
            "{what} is not supported by this server (it answered {} to the /v1/cluster \
             route); use a server release with cluster administration",
            answer.status
        )));
    }
    Ok(answer)
}

/// Runs a `narad cluster` verb.
pub(crate) fn run(command: &ClusterCommand, connection: &Connection) -> Outcome {
    let api = connection.api()?;
    match command {
        ClusterCommand::Members => {
            let answer = supported(
                api.send("GET", "/v1/cluster/members", None)?,
                "cluster members",
            )?;
            let body = api
                .expect_about(answer, &[200], "list cluster members", Subject::Node)?
                .json()?;
            rows_of(
                &body,
                "members",
                connection.json,
                &[
                    ("ID", "id"),
                    ("ADDRESS", "addr"),
                    ("STATUS", "status"),
                    ("DRAINING", "draining"),
                    ("PARTITIONS", "owned_partitions"),
                    ("OUTBOUND MOVES", "outbound_moves"),
                ],
            )
        }
        ClusterCommand::Moves => {
            let answer = supported(api.send("GET", "/v1/cluster/moves", None)?, "cluster moves")?;
            let body = api
                .expect_about(answer, &[200], "list partition moves", Subject::Node)?
                .json()?;
            rows_of(
                &body,
                "moves",
                connection.json,
                &[
                    ("TOPIC", "topic"),
                    ("PARTITION", "partition"),
                    ("FROM", "from"),
                    ("TO", "to"),
                    ("BLOCKED", "blocked"),
                ],
            )
        }
        ClusterCommand::Decommission {
            node,
            cancel,
            dry_run,
        } => decommission(&api, node, *cancel, *dry_run, connection.json),
    }
}

fn decommission(api: &Api, node: &str, cancel: bool, dry_run: bool, json: bool) -> Outcome {
    let mut path = format!("/v1/cluster/members/{}/decommission", encode(node));
    if dry_run {
        path.push_str("?dry_run=true");
    }
    let method = if cancel { "DELETE" } else { "POST" };
    let answer = supported(api.send(method, &path, None)?, "decommission")?;
    let what = format!("decommission node {node}");
    let answer = api.expect_about(answer, &[200, 204], &what, Subject::Node)?;
    match (answer.status, json) {
        (200, true) => say!("{}", answer.json()?),
        (200, false) => print_json(&answer.json()?),
        (_, true) => say!(
            "{}",
            serde_json::json!({ "node": node, "decommission": if cancel { "cancelled" } else { "draining" } })
        ),
        (_, false) if cancel => say!("node {node}: decommission cancelled"),
        (_, false) => say!("node {node}: draining; its partitions move away"),
    }
}

/// Prints the array `key` of `body` as a table of `columns` (header,
/// field), or one JSON object a line.
fn rows_of(body: &Value, key: &str, json: bool, columns: &[(&str, &str)]) -> Outcome {
    let items = body
        .get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if json {
        for item in &items {
            say!("{item}")?;
        }
        return Ok(());
    }
    let header: Vec<&str> = columns.iter().map(|(header, _)| *header).collect();
    let mut rows = table(&header);
    for item in &items {
        rows.add_row(
            columns
                .iter()
                .map(|(_, name)| field(item, name))
                .collect::<Vec<_>>(),
        );
    }
    say!("{rows}")
}

/// Runs a `narad server` verb.
pub(crate) fn server(command: &ServerCommand, connection: &Connection) -> Outcome {
    let ServerCommand::Report = command;
    let api = connection.api()?;
    let mut rows = table(&["TOPIC", "PARTITIONS", "MESSAGES", "SIZE", "OWNERS", "ROLE"]);
    let mut totals = (0u64, 0u64);
    let mut any_partial = false;
    for listed in all_topics(&api)? {
        let name = field(&listed, "name");
        let topic = describe(&api, &name)?;
        let stats = partition_stats(&topic);
        let count: u64 = stats.iter().map(|stats| messages(stats)).sum();
        let size: u64 = stats.iter().map(|stats| number(stats, "size_bytes")).sum();
        totals = (totals.0 + count, totals.1 + size);
        if connection.json {
            say!(
                "{}",
                serde_json::json!({
                    "topic": name, "partitions": number(&topic, "partitions"),
                    "messages": count, "size_bytes": size,
                    "owners": owner_count(&topic), "role": role(&topic),
                    "partial": topic.get("partial").and_then(Value::as_bool).unwrap_or(false),
                })
            )?;
            continue;
        }
        let partial = topic.get("partial").and_then(Value::as_bool) == Some(true);
        any_partial |= partial;
        rows.add_row(vec![
            name,
            field(&topic, "partitions"),
            format!("{count}{}", if partial { "+" } else { "" }),
            format_bytes(size),
            owner_count(&topic).to_string(),
            role(&topic),
        ]);
    }
    if !connection.json {
        say!("{rows}")?;
        say!("total: {} messages, {}", totals.0, format_bytes(totals.1))?;
        if any_partial {
            say!("+ marks a lower bound: some partition owners did not answer")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status,
            body: body.as_bytes().to_vec(),
            ..Answer::default()
        }
    }

    #[test]
    fn a_server_without_the_cluster_routes_is_said_not_to_support_them() {
        for unknown_route in [answer(404, "Not Found"), answer(405, "")] {
            let Err(Failure::Refused(message)) = supported(unknown_route, "cluster moves") else {
                panic!("an unknown route must be refused as unsupported");
            };
            assert!(
                message.contains("cluster moves is not supported by this server"),
                "{message}"
            );
        }
    }

    #[test]
    fn the_apis_own_not_found_passes_through() {
        let missing_node = answer(404, r#"{"error":"member not found"}"#);
        let passed = supported(missing_node, "decommission").expect("the API's own 404");
        assert_eq!(passed.status, 404);
        assert!(supported(answer(200, "{}"), "cluster members").is_ok());
    }
}
