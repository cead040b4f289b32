//! `narad topic add|ls|info|edit|rm|schema|attach|detach|children|pause|resume|skip`
//! (spec §1.3, §1.4; the remote-child verbs in [`super::topic_remote`]).

use std::collections::BTreeSet;
use std::io::{BufRead, IsTerminal, Read, Write};

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::duration::{format_bytes, format_ms, parse_ms, parse_retention_ms};
use super::http::{Answer, Body, encode};
use super::output::{field, print_json, say, table};
use super::{Api, Connection, Failure, Outcome, topic_remote};

/// `narad topic` verbs.
#[derive(Debug, Subcommand)]
pub(crate) enum TopicCommand {
    /// Create a topic.
    Add(AddArgs),
    /// List the topics you may read.
    Ls,
    /// Describe a topic: settings and per-partition figures.
    Info {
        /// The topic.
        name: String,
    },
    /// Change a topic's retention, caps, partition count or schema.
    Edit(EditArgs),
    /// Delete a topic and all its messages (asks first unless -f).
    Rm {
        /// The topic.
        name: String,
        /// Do not ask for confirmation (required without a terminal).
        #[arg(short, long)]
        force: bool,
        /// Delete a remote child's stub, or a parent with remote children,
        /// even though records are not shipped yet (they are lost).
        #[arg(long)]
        drop_unshipped: bool,
    },
    /// Print a topic's schema history, oldest first.
    Schema {
        /// The topic.
        name: String,
    },
    /// Attach CHILD under PARENT: from now on every record committed to
    /// the parent is copied into the child. With --remote, CHILD is a new
    /// stub and the records are shipped to a topic of another cluster.
    Attach {
        /// The parent topic.
        parent: String,
        /// The child topic (it must exist; with --remote it must not).
        child: String,
        /// Deliver each record this long after its parent commit (a delay
        /// child), e.g. 15m.
        #[arg(long, value_parser = parse_ms, conflicts_with = "remote")]
        delay: Option<u64>,
        #[command(flatten)]
        remote: RemoteAttachArgs,
    },
    /// Detach CHILD from PARENT; the child keeps its messages (a remote
    /// child's stub is deleted).
    Detach {
        /// The parent topic.
        parent: String,
        /// The child topic.
        child: String,
        /// Detach a remote child even though records are not shipped yet
        /// (they are lost).
        #[arg(long)]
        drop_unshipped: bool,
    },
    /// List a parent's children with their lag (and a remote child's
    /// link and state).
    Children {
        /// The parent topic.
        parent: String,
        /// One row per parent partition for remote children.
        #[arg(long)]
        partitions: bool,
    },
    /// Pause a remote child: nothing is shipped until it is resumed.
    Pause {
        /// The remote child (its stub).
        child: String,
        /// Why, shown in the listing (up to 256 printable bytes).
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Resume a paused remote child; its target is checked again.
    Resume {
        /// The remote child (its stub).
        child: String,
        /// Ship to the target even though its topic was replaced since the
        /// attach.
        #[arg(long)]
        accept_target: bool,
    },
    /// Let a remote child's cursor pass one record the target refused.
    Skip {
        /// The remote child (its stub).
        child: String,
        /// The parent partition the cursor holds on.
        #[arg(long)]
        partition: u32,
        /// The offset of the refused record.
        #[arg(long)]
        offset: u64,
    },
}

/// The remote flags of `narad topic attach`.
#[derive(Debug, Args)]
pub(crate) struct RemoteAttachArgs {
    /// Ship to this remote (see `narad remote ls`): CHILD is created as a
    /// stub.
    #[arg(long)]
    pub(crate) remote: Option<String>,
    /// The topic on the remote [default: the parent's name].
    #[arg(long, requires = "remote")]
    pub(crate) remote_topic: Option<String>,
    /// Where shipping starts: attach (records from now on), unconsumed
    /// (records not acknowledged yet) or earliest (every retained record).
    #[arg(long, requires = "remote", value_parser = ["attach", "unconsumed", "earliest"])]
    pub(crate) from: Option<String>,
    /// Ordered lanes to the remote, 1 to 8 [default: 1].
    #[arg(long, requires = "remote", value_parser = clap::value_parser!(u8).range(1..=8))]
    pub(crate) lanes: Option<u8>,
    /// Check the target and show the attach point; link nothing.
    #[arg(long, requires = "remote")]
    pub(crate) dry_run: bool,
}

/// Flags of `narad topic add`.
#[derive(Debug, Args)]
pub(crate) struct AddArgs {
    /// The topic's name.
    name: String,
    /// Partition count (3..108) [default: the server's, or the parent's].
    #[arg(long)]
    partitions: Option<u32>,
    /// How long messages are kept, e.g. 12h or 7d; `forever` or 0 keeps
    /// them forever [default: the server's].
    #[arg(long, value_parser = typed_retention)]
    retention: Option<Typed>,
    /// Lease length of a consumed message before redelivery, e.g. 30s
    /// (fixed once created).
    #[arg(long, value_parser = typed_ms)]
    visibility: Option<Typed>,
    /// Most leased messages per partition at once.
    #[arg(long)]
    max_in_flight: Option<u64>,
    /// Most out-of-order acks held per partition.
    #[arg(long)]
    max_acked_ahead: Option<u64>,
    /// How long a produce's idempotency key is remembered, e.g. 2m; 1s to
    /// 1d [default: 2m].
    #[arg(long, value_parser = typed_ms)]
    idempotency_window: Option<Typed>,
    /// JSON schema every message must match: inline JSON, @FILE, or - for
    /// standard input.
    #[arg(long)]
    schema: Option<String>,
    /// Create it as a fan-out child of this topic.
    #[arg(long)]
    parent: Option<String>,
    /// With --parent: deliver each record this long after its parent
    /// commit, e.g. 15m.
    #[arg(long, value_parser = parse_ms, requires = "parent")]
    delay: Option<u64>,
}

/// Flags of `narad topic edit`.
#[derive(Debug, Args)]
pub(crate) struct EditArgs {
    /// The topic.
    name: String,
    /// New partition count (only grows).
    #[arg(long)]
    partitions: Option<u32>,
    /// New retention, e.g. 24h; `forever` or 0 keeps messages forever.
    #[arg(long, value_parser = typed_retention)]
    retention: Option<Typed>,
    /// New in-flight cap per partition (0 = the server's default).
    #[arg(long)]
    max_in_flight: Option<u64>,
    /// New acked-ahead cap per partition (0 = the server's default).
    #[arg(long)]
    max_acked_ahead: Option<u64>,
    /// New idempotency window, e.g. 10m; 1s to 1d.
    #[arg(long, value_parser = typed_ms)]
    idempotency_window: Option<Typed>,
    /// New schema version: inline JSON, @FILE, or - for standard input.
    #[arg(long)]
    schema: Option<String>,
    /// Apply the schema only if the current version is this one.
    #[arg(long, requires = "schema")]
    schema_base_version: Option<u32>,
}

/// A duration flag's value as the user typed it, with its milliseconds,
/// so an answer can speak of `--retention 5m` rather than `300000`.
#[derive(Debug, Clone)]
pub(crate) struct Typed {
    text: String,
    ms: u64,
}

fn typed_retention(text: &str) -> Result<Typed, String> {
    parse_retention_ms(text).map(|ms| Typed {
        text: text.to_owned(),
        ms,
    })
}

fn typed_ms(text: &str) -> Result<Typed, String> {
    parse_ms(text).map(|ms| Typed {
        text: text.to_owned(),
        ms,
    })
}

/// A flag given to `topic add` or `topic edit`: the body field it sets,
/// the flag, the value as typed, and what the server takes.
struct Given {
    field: &'static str,
    flag: &'static str,
    typed: String,
    takes: &'static str,
}

/// The flags of `given` that were set, as [`Given`]s.
fn given(flags: &[(&'static str, &'static str, Option<String>, &'static str)]) -> Vec<Given> {
    flags
        .iter()
        .filter_map(|(field, flag, typed, takes)| {
            typed.clone().map(|typed| Given {
                field,
                flag,
                typed,
                takes,
            })
        })
        .collect()
}

const TAKES_PARTITIONS: &str = "a topic has 3 partitions or more, up to the server's maximum, \
                                and its partition count only grows (`narad topic info` shows it)";
const TAKES_RETENTION: &str = "give `forever` (or 0), or at least 1h";
const TAKES_IDEMPOTENCY: &str = "give 1s to 1d";
const TAKES_ANY: &str = "";

/// The refusal of a `400` that names one of the flags given, in the
/// user's terms: `--retention 5m refused: give ... (server answered 400:
/// ...)`. Any other refusal is worded as usual.
fn refusal_in_flags(api: &Api, answer: &Answer, what: &str, given: &[Given]) -> Failure {
    let text = answer.error_text();
    let named = given.iter().find(|given| text.starts_with(given.field));
    match named {
        Some(given) if answer.status == 400 => {
            let takes = if given.takes.is_empty() {
                String::new()
            } else {
                format!(": {}", given.takes)
            };
            Failure::Refused(format!(
                "{what}: {} {} refused{takes} (server answered 400: {text})",
                given.flag, given.typed
            ))
        }
        _ => api.refusal(answer, what),
    }
}

/// Runs a `narad topic` verb.
pub(crate) fn run(command: TopicCommand, connection: &Connection) -> Outcome {
    let api = connection.api()?;
    let json = connection.json;
    match command {
        TopicCommand::Add(args) => add(&api, args, json),
        TopicCommand::Ls => list(&api, json),
        TopicCommand::Info { name } => info(&api, &name, json),
        TopicCommand::Edit(args) => edit(&api, args, json),
        TopicCommand::Rm {
            name,
            force,
            drop_unshipped,
        } => remove(&api, &name, force, drop_unshipped, json),
        TopicCommand::Schema { name } => {
            let history = api.get_json(
                &format!("/v1/topics/{}/schema", encode(&name)),
                &format!("read the schema of topic {name}"),
            )?;
            print_json(&history)
        }
        TopicCommand::Attach {
            parent,
            child,
            remote:
                RemoteAttachArgs {
                    remote: Some(remote),
                    remote_topic,
                    from,
                    lanes,
                    dry_run,
                },
            ..
        } => topic_remote::attach(
            &api,
            &parent,
            &child,
            &topic_remote::RemoteAttach {
                remote,
                remote_topic,
                from,
                lanes,
                dry_run,
            },
            json,
        ),
        TopicCommand::Attach {
            parent,
            child,
            delay,
            ..
        } => attach(&api, &parent, &child, delay, json),
        TopicCommand::Detach {
            parent,
            child,
            drop_unshipped,
        } => {
            let path = format!(
                "/v1/topics/{}/children/{}{}",
                encode(&parent),
                encode(&child),
                topic_remote::force_query(drop_unshipped)
            );
            let answer = api.send("DELETE", &path, None)?;
            let what = format!("detach {child} from {parent}");
            if let Some(refusal) = topic_remote::unshipped_refusal(&answer, &what) {
                return Err(refusal);
            }
            api.expect(answer, &[204], &what)?;
            if json {
                return say!(
                    "{}",
                    json!({ "parent": parent, "child": child, "detached": true })
                );
            }
            say!("topic {child} detached from {parent}")
        }
        TopicCommand::Children { parent, partitions } => {
            topic_remote::children(&api, &parent, partitions, json)
        }
        TopicCommand::Pause { child, reason } => topic_remote::pause(&api, &child, &reason, json),
        TopicCommand::Resume {
            child,
            accept_target,
        } => topic_remote::resume(&api, &child, accept_target, json),
        TopicCommand::Skip {
            child,
            partition,
            offset,
        } => topic_remote::skip(&api, &child, partition, offset, json),
    }
}

fn add(api: &Api, args: AddArgs, json: bool) -> Outcome {
    let mut body = Map::new();
    body.insert("name".into(), json!(args.name));
    let numbers = [
        ("partitions", args.partitions.map(u64::from)),
        (
            "retention_ms",
            args.retention.as_ref().map(|typed| typed.ms),
        ),
        (
            "visibility_timeout_ms",
            args.visibility.as_ref().map(|typed| typed.ms),
        ),
        ("max_in_flight_per_partition", args.max_in_flight),
        ("max_acked_ahead_per_partition", args.max_acked_ahead),
        (
            "idempotency_window_ms",
            args.idempotency_window.as_ref().map(|typed| typed.ms),
        ),
        ("fanout_delay_ms", args.delay),
    ];
    for (name, value) in numbers {
        if let Some(value) = value {
            body.insert(name.into(), json!(value));
        }
    }
    if let Some(schema) = &args.schema {
        body.insert("schema".into(), read_schema(schema)?);
    }
    if let Some(parent) = &args.parent {
        body.insert("parent".into(), json!(parent));
    }
    let given = given(&[
        (
            "partitions",
            "--partitions",
            args.partitions.map(|n| n.to_string()),
            TAKES_PARTITIONS,
        ),
        (
            "retention_ms",
            "--retention",
            args.retention.map(|typed| typed.text),
            TAKES_RETENTION,
        ),
        (
            "visibility_timeout_ms",
            "--visibility",
            args.visibility.map(|typed| typed.text),
            TAKES_ANY,
        ),
        (
            "idempotency_window_ms",
            "--idempotency-window",
            args.idempotency_window.map(|typed| typed.text),
            TAKES_IDEMPOTENCY,
        ),
    ]);
    let answer = api.send("POST", "/v1/topics", Some(Body::Json(&Value::Object(body))))?;
    let what = format!("create topic {}", args.name);
    if answer.status != 201 {
        return Err(refusal_in_flags(api, &answer, &what, &given));
    }
    let topic = answer.json()?;
    if json {
        return say!("{topic}");
    }
    say!(
        "topic {} created: {} partitions, retention {}, visibility {}",
        field(&topic, "name"),
        field(&topic, "partitions"),
        retention_text(&topic),
        ms_text(&topic, "visibility_timeout_ms")
    )
}

/// Every topic the caller may read, following `next_page_token`.
pub(crate) fn all_topics(api: &Api) -> Result<Vec<Value>, Failure> {
    let mut topics = Vec::new();
    let mut token = String::new();
    loop {
        let path = if token.is_empty() {
            "/v1/topics".to_owned()
        } else {
            format!("/v1/topics?page_token={}", encode(&token))
        };
        let page = api.get_json(&path, "list topics")?;
        if let Some(Value::Array(list)) = page.get("topics") {
            topics.extend(list.iter().cloned());
        }
        match page.get("next_page_token").and_then(Value::as_str) {
            Some(next) if !next.is_empty() && next != token => token = next.to_owned(),
            _ => return Ok(topics),
        }
    }
}

fn list(api: &Api, json: bool) -> Outcome {
    let topics = all_topics(api)?;
    if json {
        for topic in &topics {
            say!("{topic}")?;
        }
        return Ok(());
    }
    let mut rows = table(&["NAME", "PARTITIONS", "RETENTION", "VISIBILITY", "OWNER"]);
    for topic in &topics {
        rows.add_row(vec![
            field(topic, "name"),
            field(topic, "partitions"),
            retention_text(topic),
            ms_text(topic, "visibility_timeout_ms"),
            field(topic, "owner"),
        ]);
    }
    say!("{rows}")
}

/// `GET /v1/topics/{name}`.
pub(crate) fn describe(api: &Api, name: &str) -> Result<Value, Failure> {
    api.get_json(
        &format!("/v1/topics/{}", encode(name)),
        &format!("describe topic {name}"),
    )
}

fn info(api: &Api, name: &str, json: bool) -> Outcome {
    let topic = describe(api, name)?;
    if json {
        return print_json(&topic);
    }
    say!("topic:           {}", field(&topic, "name"))?;
    say!("role:            {}", role(&topic))?;
    say!("partitions:      {}", field(&topic, "partitions"))?;
    say!("retention:       {}", retention_text(&topic))?;
    say!(
        "visibility:      {}",
        ms_text(&topic, "visibility_timeout_ms")
    )?;
    say!(
        "max in flight:   {}",
        field(&topic, "max_in_flight_per_partition")
    )?;
    say!(
        "max acked ahead: {}",
        field(&topic, "max_acked_ahead_per_partition")
    )?;
    say!(
        "idempotency:     {}",
        ms_text(&topic, "idempotency_window_ms")
    )?;
    say!("owner:           {}", field(&topic, "owner"))?;
    say!("schema version:  {}", field(&topic, "schema_version"))?;
    if let Some(link) = topic.get("remote") {
        say!("{}", topic_remote::link_line(link))?;
    }
    if topic.get("partial").and_then(Value::as_bool) == Some(true) {
        say!("partial:         some partition owners did not answer; figures are incomplete")?;
    }
    let mut rows = table(&[
        "PARTITION",
        "OWNER",
        "OLDEST",
        "HIGH WATERMARK",
        "MESSAGES",
        "SIZE",
        "STATUS",
    ]);
    for stats in partition_stats(&topic) {
        rows.add_row(vec![
            field(stats, "index"),
            field(stats, "owner_node"),
            field(stats, "oldest_offset"),
            field(stats, "high_watermark"),
            messages(stats).to_string(),
            format_bytes(number(stats, "size_bytes")),
            field(stats, "status"),
        ]);
    }
    say!("{rows}")
}

fn edit(api: &Api, args: EditArgs, json: bool) -> Outcome {
    let mut body = Map::new();
    let numbers = [
        ("partitions", args.partitions.map(u64::from)),
        (
            "retention_ms",
            args.retention.as_ref().map(|typed| typed.ms),
        ),
        ("max_in_flight_per_partition", args.max_in_flight),
        ("max_acked_ahead_per_partition", args.max_acked_ahead),
        (
            "idempotency_window_ms",
            args.idempotency_window.as_ref().map(|typed| typed.ms),
        ),
        (
            "schema_base_version",
            args.schema_base_version.map(u64::from),
        ),
    ];
    for (name, value) in numbers {
        if let Some(value) = value {
            body.insert(name.into(), json!(value));
        }
    }
    if let Some(schema) = &args.schema {
        body.insert("schema".into(), read_schema(schema)?);
    }
    if body.is_empty() {
        return Err(Failure::Usage(
            "topic edit: nothing to change; give --retention, --partitions, --max-in-flight, \
             --max-acked-ahead, --idempotency-window or --schema"
                .into(),
        ));
    }
    let given = given(&[
        (
            "partitions",
            "--partitions",
            args.partitions.map(|n| n.to_string()),
            TAKES_PARTITIONS,
        ),
        (
            "retention_ms",
            "--retention",
            args.retention.as_ref().map(|typed| typed.text.clone()),
            TAKES_RETENTION,
        ),
        (
            "max_in_flight_per_partition",
            "--max-in-flight",
            args.max_in_flight.map(|n| n.to_string()),
            TAKES_ANY,
        ),
        (
            "max_acked_ahead_per_partition",
            "--max-acked-ahead",
            args.max_acked_ahead.map(|n| n.to_string()),
            TAKES_ANY,
        ),
        (
            "idempotency_window_ms",
            "--idempotency-window",
            args.idempotency_window
                .as_ref()
                .map(|typed| typed.text.clone()),
            TAKES_IDEMPOTENCY,
        ),
        ("schema", "--schema", args.schema.clone(), TAKES_ANY),
    ]);
    let path = format!("/v1/topics/{}", encode(&args.name));
    let answer = api.send("PATCH", &path, Some(Body::Json(&Value::Object(body))))?;
    let what = format!("change topic {}", args.name);
    if answer.status != 200 {
        return Err(refusal_in_flags(api, &answer, &what, &given));
    }
    let topic = answer.json()?;
    if json {
        return say!("{topic}");
    }
    let changed: Vec<String> = given
        .iter()
        .map(|given| changed_text(&topic, given.field))
        .collect();
    say!(
        "topic {} changed: {}",
        field(&topic, "name"),
        changed.join(", ")
    )
}

/// How `topic edit` confirms the change of `field`: its name and the
/// value the server now holds.
fn changed_text(topic: &Value, field_name: &str) -> String {
    match field_name {
        "partitions" => format!("partitions {}", field(topic, "partitions")),
        "retention_ms" => format!("retention {}", retention_text(topic)),
        "max_in_flight_per_partition" => format!(
            "max in flight {}",
            field(topic, "max_in_flight_per_partition")
        ),
        "max_acked_ahead_per_partition" => format!(
            "max acked ahead {}",
            field(topic, "max_acked_ahead_per_partition")
        ),
        "idempotency_window_ms" => format!(
            "idempotency window {}",
            ms_text(topic, "idempotency_window_ms")
        ),
        "schema" => format!("schema version {}", field(topic, "schema_version")),
        other => other.to_owned(),
    }
}

fn remove(api: &Api, name: &str, force: bool, drop_unshipped: bool, json: bool) -> Outcome {
    if !force {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::Usage(format!(
                "refusing to delete topic {name} without confirmation: standard input is not a \
                 terminal; pass -f to delete it"
            )));
        }
        if !confirm(&format!(
            "Delete topic {name} and all its messages? This cannot be undone. [y/N] "
        ))? {
            return Err(Failure::Usage(format!(
                "topic {name} kept: the deletion was not confirmed"
            )));
        }
    }
    let path = format!(
        "/v1/topics/{}{}",
        encode(name),
        topic_remote::force_query(drop_unshipped)
    );
    let answer = api.send("DELETE", &path, None)?;
    let what = format!("delete topic {name}");
    if let Some(refusal) = topic_remote::unshipped_refusal(&answer, &what) {
        return Err(refusal);
    }
    api.expect(answer, &[204], &what)?;
    if json {
        return say!("{}", json!({ "topic": name, "deleted": true }));
    }
    say!("topic {name} deleted")
}

/// Asks `question` on stderr; true for an answer of `y` or `yes`.
fn confirm(question: &str) -> Result<bool, Failure> {
    let mut stderr = std::io::stderr();
    let _ = stderr.write_all(question.as_bytes());
    let _ = stderr.flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::Usage(format!("cannot read the answer: {e}")))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

fn attach(api: &Api, parent: &str, child: &str, delay: Option<u64>, json: bool) -> Outcome {
    let mut body = json!({ "child": child });
    if let Some(delay) = delay {
        body["delay_ms"] = json!(delay);
    }
    let path = format!("/v1/topics/{}/children", encode(parent));
    let answer = api.send("POST", &path, Some(Body::Json(&body)))?;
    api.expect(answer, &[200, 201], &format!("attach {child} to {parent}"))?;
    if json {
        return say!(
            "{}",
            json!({ "parent": parent, "child": child, "delay_ms": delay.unwrap_or(0) })
        );
    }
    match delay {
        Some(delay) => say!(
            "topic {child} attached to {parent} with a delay of {}",
            format_ms(delay)
        ),
        None => say!("topic {child} attached to {parent}"),
    }
}

/// A `--schema` value: inline JSON, `@FILE`, or `-` for standard input.
fn read_schema(text: &str) -> Result<Value, Failure> {
    let (source, document) = if text == "-" {
        let mut document = String::new();
        std::io::stdin()
            .read_to_string(&mut document)
            .map_err(|e| Failure::Usage(format!("--schema -: cannot read stdin: {e}")))?;
        ("standard input".to_owned(), document)
    } else if let Some(path) = text.strip_prefix('@') {
        let document = std::fs::read_to_string(path)
            .map_err(|e| Failure::Usage(format!("--schema @{path}: cannot read it: {e}")))?;
        (path.to_owned(), document)
    } else {
        ("--schema".to_owned(), text.to_owned())
    };
    serde_json::from_str(&document).map_err(|e| {
        Failure::Usage(format!(
            "the schema in {source} is not JSON ({e}); give a JSON object, @FILE or -"
        ))
    })
}

/// The topic's role: the server's `role`, else what its links say.
pub(crate) fn role(topic: &Value) -> String {
    if let Some(role) = topic.get("role").and_then(Value::as_str) {
        return role.to_owned();
    }
    let has_children = topic
        .get("children")
        .and_then(Value::as_array)
        .is_some_and(|children| !children.is_empty());
    if topic.get("parent").and_then(Value::as_str).is_some() {
        "child".into()
    } else if has_children {
        "parent".into()
    } else {
        "standalone".into()
    }
}

/// The `partition_stats` entries of a described topic.
pub(crate) fn partition_stats(topic: &Value) -> Vec<&Value> {
    topic
        .get("partition_stats")
        .and_then(Value::as_array)
        .map(|stats| stats.iter().collect())
        .unwrap_or_default()
}

/// Retained messages of one partition: high watermark − oldest offset.
pub(crate) fn messages(stats: &Value) -> u64 {
    number(stats, "high_watermark").saturating_sub(number(stats, "oldest_offset"))
}

/// The distinct owners of a described topic's partitions.
pub(crate) fn owner_count(topic: &Value) -> usize {
    partition_stats(topic)
        .iter()
        .filter_map(|stats| stats.get("owner_node")?.as_str())
        .filter(|owner| !owner.is_empty())
        .collect::<BTreeSet<_>>()
        .len()
}

pub(crate) fn number(value: &Value, name: &str) -> u64 {
    value.get(name).and_then(Value::as_u64).unwrap_or(0)
}

pub(super) fn ms_text(value: &Value, name: &str) -> String {
    value
        .get(name)
        .and_then(Value::as_u64)
        .map_or_else(|| "-".into(), format_ms)
}

fn retention_text(topic: &Value) -> String {
    match topic.get("retention_ms").and_then(Value::as_u64) {
        Some(0) => "forever".into(),
        Some(ms) => format_ms(ms),
        None => "-".into(),
    }
}
