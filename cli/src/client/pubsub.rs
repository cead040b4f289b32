//! `narad pub`, `narad sub` and `narad replay` (spec §1.5–§1.7).

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::thread::sleep;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use serde_json::{Value, json};

use super::duration::parse_ms;
use super::http::{Answer, Body, encode, is_transient};
use super::message::{Style, messages};
use super::output::say;
use super::topic::{describe, number, partition_stats};
use super::{Api, Connection, Failure, Outcome};

/// Most messages in one batch produce, and most bytes in its body (spec
/// §1.1 limits).
pub(crate) const BATCH_MESSAGES_MAX: usize = 1_000;
const BATCH_BODY_BYTES_MAX: usize = 16 << 20;
/// Largest message the server stores (spec §1.1: 1 byte to 1 MiB, exactly
/// 1 MiB allowed); a larger one is refused here, before anything is sent.
pub(crate) const MESSAGE_BYTES_MAX: usize = 1 << 20;
const _: () = assert!(MESSAGE_BYTES_MAX * 2 <= BATCH_BODY_BYTES_MAX);
/// Most messages asked for by one batch consume.
const CONSUME_MAX: u64 = 100;
/// A run of at least this many messages shows a progress bar (on a
/// terminal).
pub(crate) const PROGRESS_MIN: u64 = 100;
/// Pause between passes of `sub --peek` once it reached every partition's
/// end, and between retries of a transient consume failure.
const PEEK_PAUSE: Duration = Duration::from_millis(500);

/// Flags of `narad pub`.
#[derive(Debug, Args)]
pub(crate) struct PubArgs {
    /// The topic.
    topic: String,
    /// The message. Without it (and without -f) every line of standard
    /// input is one message.
    message: Option<String>,
    /// The message's key (same key, same partition).
    #[arg(short, long)]
    key: Option<String>,
    /// Send to this partition (wins over the key).
    #[arg(long)]
    partition: Option<u32>,
    /// Send this file's contents as the message.
    #[arg(short, long, conflicts_with = "message")]
    file: Option<PathBuf>,
    /// Send the message (or file) this many times.
    #[arg(long)]
    count: Option<u64>,
    /// At most this many messages a second.
    #[arg(long)]
    rate: Option<f64>,
    /// Send N messages per request with batch produce (1..=1000).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
    batch: Option<u16>,
    /// With standard input: send blank lines (spaces or tabs only) too
    /// instead of skipping them; an empty line is then an error, since the
    /// server stores messages of 1 byte or more.
    #[arg(long)]
    keep_blank_lines: bool,
    #[command(flatten)]
    pub(crate) connection: Connection,
}

/// Flags of `narad sub`.
#[derive(Debug, Args)]
pub(crate) struct SubArgs {
    /// The topic.
    topic: String,
    /// Read without leasing or acking (replays): queue state is untouched.
    #[arg(long)]
    peek: bool,
    /// Only this partition.
    #[arg(long)]
    partition: Option<u32>,
    /// With --peek: start at this offset [default: the oldest retained].
    #[arg(long, requires = "peek")]
    from: Option<u64>,
    /// Do not ack: the messages are redelivered once their lease lapses.
    #[arg(long)]
    no_ack: bool,
    /// Print only each payload's bytes.
    #[arg(long, conflicts_with = "json")]
    raw: bool,
    /// Stop after this many messages.
    #[arg(long)]
    max: Option<u64>,
    /// Stop once no message arrived for this long, e.g. 5s [default: run
    /// until interrupted].
    #[arg(long, value_parser = parse_ms)]
    idle: Option<u64>,
    /// Long-poll each request this long.
    #[arg(long, value_parser = parse_ms, default_value = "10s")]
    wait: u64,
    #[command(flatten)]
    pub(crate) connection: Connection,
}

/// Flags of `narad replay`.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// The topic.
    topic: String,
    /// The partition to read.
    #[arg(long)]
    partition: u32,
    /// First offset [default: the oldest retained].
    #[arg(long)]
    from: Option<u64>,
    /// Last offset, included [default: the end].
    #[arg(long)]
    to: Option<u64>,
    /// Print only each payload's bytes.
    #[arg(long, conflicts_with = "json")]
    raw: bool,
    #[command(flatten)]
    pub(crate) connection: Connection,
}

fn style(raw: bool, json: bool) -> Style {
    if json {
        Style::Json
    } else if raw {
        Style::Raw
    } else {
        Style::Line
    }
}

/// Runs `narad pub`.
pub(crate) fn publish(args: &PubArgs) -> Outcome {
    let api = args.connection.api()?;
    let (mut source, total) = message_source(args)?;
    let progress = progress_bar(total);
    let mut pacer = Pacer::new(args.rate)?;
    let batch = args.batch.map_or(1, usize::from);
    let mut published = 0u64;
    let mut pending: Vec<Vec<u8>> = Vec::with_capacity(batch);
    let mut pending_bytes = 0;
    loop {
        let next = match source.next().transpose() {
            Ok(next) => next,
            Err(failure) => {
                // The lines before a bad one go out; it and the rest do not.
                if !pending.is_empty() {
                    published += send(&api, args, &pending).inspect_err(|_| progress.abandon())?;
                }
                progress.abandon();
                return Err(after_some(failure, published, &args.topic));
            }
        };
        let full = pending.len() >= batch
            || next
                .as_ref()
                .is_some_and(|message| pending_bytes + message.len() * 2 > BATCH_BODY_BYTES_MAX);
        if !pending.is_empty() && (next.is_none() || full) {
            let sent = send(&api, args, &pending).inspect_err(|_| progress.abandon())?;
            published += sent;
            progress.inc(sent);
            pending.clear();
            pending_bytes = 0;
        }
        let Some(message) = next else { break };
        pacer.wait();
        pending_bytes += message.len();
        pending.push(message);
    }
    progress.finish_and_clear();
    if args.connection.json {
        return say!("{}", json!({ "topic": args.topic, "published": published }));
    }
    let plural = if published == 1 { "" } else { "s" };
    say!("published {published} message{plural} to {}", args.topic)
}

/// A failure of the input after `published` messages went out: says so,
/// since those stay published.
fn after_some(failure: Failure, published: u64, topic: &str) -> Failure {
    match failure {
        Failure::Usage(text) if published > 0 => Failure::Usage(format!(
            "{text} ({published} earlier message(s) were published to {topic})"
        )),
        other => other,
    }
}

type Messages = Box<dyn Iterator<Item = Result<Vec<u8>, Failure>>>;

/// The messages to send and how many there are (unknown for stdin).
fn message_source(args: &PubArgs) -> Result<(Messages, Option<u64>), Failure> {
    let one =
        match (&args.message, &args.file) {
            (Some(message), _) => Some(message.clone().into_bytes()),
            (None, Some(path)) => Some(std::fs::read(path).map_err(|e| {
                Failure::Usage(format!("-f {}: cannot read it: {e}", path.display()))
            })?),
            (None, None) => None,
        };
    let Some(message) = one else {
        if args.count.is_some() {
            return Err(Failure::Usage(
                "--count repeats a message given as an argument or with -f; with standard \
                 input every line is sent once"
                    .into(),
            ));
        }
        let keep_blank = args.keep_blank_lines;
        let lines =
            std::io::stdin().lock().lines().enumerate().filter_map(
                move |(index, line)| match line {
                    Ok(line) => line_message(index + 1, line, keep_blank).transpose(),
                    Err(e) => Some(Err(Failure::Usage(format!("cannot read stdin: {e}")))),
                },
            );
        return Ok((Box::new(lines), None));
    };
    let what = match &args.file {
        Some(path) => format!("-f {}", path.display()),
        None => "the message".to_owned(),
    };
    check_size(&what, message.len())?;
    let count = args.count.unwrap_or(1);
    Ok((
        Box::new(std::iter::repeat_n(message, count as usize).map(Ok)),
        Some(count),
    ))
}

/// The message of line `number` of standard input: `None` for a blank
/// line skipped.
///
/// # Errors
/// A line too large, or an empty line kept with `--keep-blank-lines`.
fn line_message(number: usize, line: String, keep_blank: bool) -> Result<Option<Vec<u8>>, Failure> {
    let blank = line.trim_matches([' ', '\t']).is_empty();
    if blank && !keep_blank {
        return Ok(None);
    }
    if line.is_empty() {
        return Err(Failure::Usage(format!(
            "line {number} of standard input is empty; the server stores messages of 1 byte \
             to 1 MiB (without --keep-blank-lines, blank lines are skipped)"
        )));
    }
    check_size(&format!("line {number} of standard input"), line.len())?;
    Ok(Some(line.into_bytes()))
}

/// Refuses a message the server would refuse for its size.
///
/// # Errors
/// `bytes` is 0 or above [`MESSAGE_BYTES_MAX`]; `what` names the message.
pub(crate) fn check_size(what: &str, bytes: usize) -> Outcome {
    if bytes == 0 {
        return Err(Failure::Usage(format!(
            "{what} is empty; the server stores messages of 1 byte to 1 MiB"
        )));
    }
    if bytes > MESSAGE_BYTES_MAX {
        return Err(Failure::Usage(format!(
            "{what} is {bytes} bytes; the server stores messages of at most 1 MiB \
             ({MESSAGE_BYTES_MAX} bytes), so nothing was sent"
        )));
    }
    Ok(())
}

/// A progress bar on stderr when it is a terminal and the run is long
/// (or of unknown length); hidden otherwise.
pub(crate) fn progress_bar(total: Option<u64>) -> ProgressBar {
    let long = total.is_none_or(|total| total >= PROGRESS_MIN);
    if !(long && std::io::stderr().is_terminal()) {
        return ProgressBar::hidden();
    }
    let bar = match total {
        Some(total) => ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
            .with_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} messages  {rate}  eta {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .with_key("rate", write_rate),
            ),
        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()).with_style(
            ProgressStyle::with_template("{spinner} {pos} messages  {rate}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner())
                .with_key("rate", write_rate),
        ),
    };
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// The `{rate}` of a progress bar: whole messages a second.
fn write_rate(state: &ProgressState, out: &mut dyn std::fmt::Write) {
    let _ = out.write_str(&rate_text(state.per_sec()));
}

/// A rate as a progress bar shows it: rounded to whole messages.
fn rate_text(per_second: f64) -> String {
    format!("{:.0} msg/s", per_second.max(0.0))
}

/// Sends `messages`: singly, or as one batch produce when there is a
/// batch size; the number sent.
fn send(api: &Api, args: &PubArgs, messages: &[Vec<u8>]) -> Result<u64, Failure> {
    let what = format!("publish to {}", args.topic);
    if args.batch.is_none() {
        for message in messages {
            let answer = produce_one(
                api,
                &args.topic,
                args.key.as_deref(),
                args.partition,
                message,
            )?;
            api.expect(answer, &[202], &what)?;
        }
        return Ok(messages.len() as u64);
    }
    let body = batch_body(messages, args.key.as_deref(), args.partition);
    let answer = produce_batch(api, &args.topic, &body)?;
    api.expect(answer, &[202], &what)?;
    Ok(messages.len() as u64)
}

/// `POST /v1/topics/{topic}/produce` of one message.
///
/// # Errors
/// No answer.
pub(crate) fn produce_one(
    api: &Api,
    topic: &str,
    key: Option<&str>,
    partition: Option<u32>,
    message: &[u8],
) -> Result<Answer, Failure> {
    let mut query = Vec::new();
    if let Some(key) = key {
        query.push(format!("key={}", encode(key)));
    }
    if let Some(partition) = partition {
        query.push(format!("partition={partition}"));
    }
    let mut path = format!("/v1/topics/{}/produce", encode(topic));
    if !query.is_empty() {
        path.push('?');
        path.push_str(&query.join("&"));
    }
    api.send("POST", &path, Some(Body::Bytes(message)))
}

/// `POST /v1/topics/{topic}/produce/batch` of a body from [`batch_body`].
///
/// # Errors
/// No answer.
pub(crate) fn produce_batch(api: &Api, topic: &str, body: &[u8]) -> Result<Answer, Failure> {
    let path = format!("/v1/topics/{}/produce/batch", encode(topic));
    api.send("POST", &path, Some(Body::JsonText(body)))
}

/// The batch produce body of `messages`. A message that is one JSON text
/// goes in as written (the server stores those bytes); any other goes
/// base64 with `payload_encoding`. The JSON is spliced as text so that no
/// re-encoding changes a byte of it.
pub(crate) fn batch_body(
    messages: &[Vec<u8>],
    key: Option<&str>,
    partition: Option<u32>,
) -> Vec<u8> {
    let mut body = Vec::with_capacity(messages.iter().map(|m| m.len() + 32).sum());
    body.extend_from_slice(b"{\"messages\":[");
    for (index, message) in messages.iter().enumerate() {
        if index > 0 {
            body.push(b',');
        }
        body.extend_from_slice(b"{\"payload\":");
        if serde_json::from_slice::<serde::de::IgnoredAny>(message).is_ok() {
            body.extend_from_slice(message);
        } else {
            body.push(b'"');
            body.extend_from_slice(BASE64.encode(message).as_bytes());
            body.extend_from_slice(b"\",\"payload_encoding\":\"base64\"");
        }
        if let Some(key) = key {
            body.extend_from_slice(b",\"key\":");
            body.extend_from_slice(Value::from(key).to_string().as_bytes());
        }
        if let Some(partition) = partition {
            body.extend_from_slice(format!(",\"partition\":{partition}").as_bytes());
        }
        body.push(b'}');
    }
    body.extend_from_slice(b"]}");
    body
}

/// Spaces sends to at most `rate` a second.
struct Pacer {
    interval: Option<Duration>,
    next: Instant,
}

impl Pacer {
    fn new(rate: Option<f64>) -> Result<Self, Failure> {
        let interval = match rate {
            None => None,
            Some(rate) if rate > 0.0 && rate.is_finite() => {
                Some(Duration::from_secs_f64(1.0 / rate))
            }
            Some(rate) => {
                return Err(Failure::Usage(format!(
                    "--rate {rate}: give a positive number of messages a second"
                )));
            }
        };
        Ok(Self {
            interval,
            next: Instant::now(),
        })
    }

    fn wait(&mut self) {
        let Some(interval) = self.interval else {
            return;
        };
        let now = Instant::now();
        if self.next > now {
            sleep(self.next - now);
        }
        self.next = self.next.max(now) + interval;
    }
}

/// Runs `narad sub`.
pub(crate) fn subscribe(args: &SubArgs) -> Outcome {
    let api = args.connection.api()?;
    let style = style(args.raw, args.connection.json);
    if args.peek {
        peek(&api, args, style)
    } else {
        consume(&api, args, style)
    }
}

/// Whether a `sub` that has printed `seen` messages, the last one at
/// `last`, should stop.
fn done(args: &SubArgs, seen: u64, last: Instant) -> bool {
    args.max.is_some_and(|max| seen >= max)
        || args
            .idle
            .is_some_and(|idle| last.elapsed() >= Duration::from_millis(idle))
}

/// Queue mode: batch consumes, each message printed then acked.
fn consume(api: &Api, args: &SubArgs, style: Style) -> Outcome {
    let topic = encode(&args.topic);
    let what = format!("consume from {}", args.topic);
    let (mut seen, mut last) = (0u64, Instant::now());
    while !done(args, seen, last) {
        let want = args
            .max
            .map_or(CONSUME_MAX, |max| (max - seen).min(CONSUME_MAX));
        let mut wait_ms = args.wait;
        if let Some(idle) = args.idle {
            let left = Duration::from_millis(idle).saturating_sub(last.elapsed());
            wait_ms = wait_ms.min(left.as_millis() as u64).max(1);
        }
        let mut path = format!("/v1/topics/{topic}/consume?wait={wait_ms}ms&max={want}");
        if let Some(partition) = args.partition {
            path.push_str(&format!("&partition={partition}"));
        }
        let answer = api.send("GET", &path, None)?;
        match answer.status {
            200 => {
                for message in messages(&answer.body)? {
                    // Printed first: a message the reader never got (a
                    // closed pipe) is not acked, and comes back.
                    message.print(style)?;
                    if !args.no_ack
                        && let Some(handle) = message.receipt_handle()
                    {
                        ack(api, &args.topic, handle)?;
                    }
                    seen += 1;
                }
                last = Instant::now();
            }
            204 => {}
            status if is_transient(status) => {
                eprintln!(
                    "narad: warning: consume from {} answered {status} ({}); retrying",
                    args.topic,
                    answer.error_text()
                );
                sleep(PEEK_PAUSE);
            }
            _ => return Err(api.refusal(&answer, &what)),
        }
    }
    Ok(())
}

/// Acks one delivered message, retrying transient failures with backoff.
/// A `410` after a retry means the earlier ack landed; a first `410` means
/// the lease lapsed and the message will be redelivered (a warning).
fn ack(api: &Api, topic: &str, handle: &str) -> Outcome {
    let path = format!(
        "/v1/topics/{}/ack?receipt_handle={}",
        encode(topic),
        encode(handle)
    );
    let (answer, attempts) = api.send_retrying("POST", &path, None)?;
    match answer.status {
        204 => Ok(()),
        410 if attempts > 1 => Ok(()),
        410 => {
            eprintln!(
                "narad: warning: the lease on {handle} lapsed before the ack; the message will \
                 be delivered again"
            );
            Ok(())
        }
        _ => Err(api.refusal(&answer, &format!("ack {handle} on {topic}"))),
    }
}

/// What a read by offset found.
#[derive(Debug)]
enum Read {
    /// The answer holding the record.
    Record(Answer),
    /// The record aged out (`410`): skipped, with a warning.
    Gone,
    /// Past the partition's end.
    End,
}

/// Reads one record by offset.
fn read_at(api: &Api, topic: &str, partition: u32, offset: u64) -> Result<Read, Failure> {
    let path = format!(
        "/v1/topics/{}/consume?partition={partition}&offset={offset}",
        encode(topic)
    );
    let (answer, _) = api.send_retrying("GET", &path, None)?;
    match answer.status {
        200 => Ok(Read::Record(answer)),
        204 => Ok(Read::End),
        410 => {
            eprintln!(
                "narad: warning: p{partition} @{offset}: {}; skipped",
                answer.error_text()
            );
            Ok(Read::Gone)
        }
        _ => Err(api.refusal(&answer, &format!("read {topic} p{partition} @{offset}"))),
    }
}

/// Prints the record of a read; the number printed.
fn print_read(answer: &Answer, style: Style) -> Result<u64, Failure> {
    let list = messages(&answer.body)?;
    for message in &list {
        message.print(style)?;
    }
    Ok(list.len() as u64)
}

/// The partitions to read and where each starts: `only` or every one, at
/// `from` or the oldest retained offset.
fn starts(
    api: &Api,
    topic: &str,
    only: Option<u32>,
    from: Option<u64>,
) -> Result<Vec<(u32, u64)>, Failure> {
    let described = describe(api, topic)?;
    let count = number(&described, "partitions");
    if let Some(partition) = only
        && u64::from(partition) >= count
    {
        return Err(Failure::Usage(format!(
            "topic {topic} has {count} partitions (0..{}); --partition {partition} is not one",
            count.saturating_sub(1)
        )));
    }
    let oldest = |partition: u32| {
        partition_stats(&described)
            .iter()
            .find(|stats| number(stats, "index") == u64::from(partition))
            .map_or(0, |stats| number(stats, "oldest_offset"))
    };
    Ok((0..count as u32)
        .filter(|partition| only.is_none_or(|only| only == *partition))
        .map(|partition| (partition, from.unwrap_or_else(|| oldest(partition))))
        .collect())
}

/// `sub --peek`: tails every partition with offset reads.
fn peek(api: &Api, args: &SubArgs, style: Style) -> Outcome {
    let mut positions = starts(api, &args.topic, args.partition, args.from)?;
    let (mut seen, mut last) = (0u64, Instant::now());
    loop {
        let mut progressed = false;
        for (partition, next) in &mut positions {
            loop {
                match read_at(api, &args.topic, *partition, *next)? {
                    Read::End => break,
                    Read::Gone => {}
                    Read::Record(answer) => {
                        seen += print_read(&answer, style)?;
                        last = Instant::now();
                        if done(args, seen, last) {
                            return Ok(());
                        }
                    }
                }
                *next += 1;
                progressed = true;
            }
        }
        if done(args, seen, last) {
            return Ok(());
        }
        if !progressed {
            sleep(PEEK_PAUSE);
        }
    }
}

/// Runs `narad replay`.
pub(crate) fn replay(args: &ReplayArgs) -> Outcome {
    let api = args.connection.api()?;
    let style = style(args.raw, args.connection.json);
    if let (Some(from), Some(to)) = (args.from, args.to)
        && to < from
    {
        return Err(Failure::Usage(format!("--to {to} is before --from {from}")));
    }
    let [(partition, mut offset)] = starts(&api, &args.topic, Some(args.partition), args.from)?[..]
    else {
        return Err(Failure::Usage(format!(
            "topic {} has no partition {}",
            args.topic, args.partition
        )));
    };
    while args.to.is_none_or(|to| offset <= to) {
        match read_at(&api, &args.topic, partition, offset)? {
            Read::End => break,
            Read::Gone => {}
            Read::Record(answer) => {
                print_read(&answer, style)?;
            }
        }
        offset += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_body_keeps_json_as_written_and_encodes_the_rest() {
        let body = batch_body(
            &[br#"{"b":1, "a":2}"#.to_vec(), b"plain text".to_vec()],
            Some("k\"1"),
            None,
        );
        let text = String::from_utf8(body).expect("utf-8");
        assert_eq!(
            text,
            r#"{"messages":[{"payload":{"b":1, "a":2},"key":"k\"1"},{"payload":"cGxhaW4gdGV4dA==","payload_encoding":"base64","key":"k\"1"}]}"#
        );
        let parsed: Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(parsed["messages"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn a_batch_body_names_the_partition() {
        let body = batch_body(&[b"1".to_vec()], None, Some(2));
        assert_eq!(body, br#"{"messages":[{"payload":1,"partition":2}]}"#);
    }

    #[test]
    fn the_message_limit_is_the_servers() {
        assert_eq!(
            MESSAGE_BYTES_MAX,
            narad_dataplane::ingress::MESSAGE_BYTES_MAX
        );
    }

    #[test]
    fn a_message_over_one_mib_is_refused_before_sending() {
        assert!(check_size("m", MESSAGE_BYTES_MAX).is_ok());
        let Err(Failure::Usage(text)) = check_size("-f big.bin", MESSAGE_BYTES_MAX + 1) else {
            panic!("an oversize message must be a usage error");
        };
        assert!(text.contains("-f big.bin is 1048577 bytes"), "{text}");
        assert!(text.contains("at most 1 MiB"), "{text}");
        assert!(check_size("m", 0).is_err());
    }

    #[test]
    fn blank_lines_are_skipped_unless_kept() {
        assert_eq!(
            line_message(1, "a b".into(), false).ok(),
            Some(Some(b"a b".to_vec()))
        );
        assert_eq!(line_message(2, String::new(), false).ok(), Some(None));
        assert_eq!(line_message(3, " \t".into(), false).ok(), Some(None));
        assert_eq!(
            line_message(3, " \t".into(), true).ok(),
            Some(Some(b" \t".to_vec()))
        );
        let Err(Failure::Usage(text)) = line_message(4, String::new(), true) else {
            panic!("an empty line kept must be refused");
        };
        assert!(text.contains("line 4"), "{text}");
    }

    #[test]
    fn progress_rates_are_whole_messages() {
        assert_eq!(rate_text(1234.5678), "1235 msg/s");
        assert_eq!(rate_text(0.4), "0 msg/s");
    }
}
