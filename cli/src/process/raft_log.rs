//! openraft's events as a node logs them.
//!
//! openraft (logged at `warn` and above) has two habits an operator should
//! not have to learn around:
//! - It logs every failed RPC to a peer at `ERROR`: a vote to a voter that
//!   is still starting, a heartbeat to one that is stopping. A healthy
//!   cluster's start would log errors. A peer that is not there
//!   (`Unreachable`) or that did not answer in time (`Timeout`) is logged
//!   at `WARN` instead; the control plane's network reports exactly those
//!   failures so (`narad_controlplane::network`). Every other error (a
//!   failed authentication, a peer's own error, storage) stays an `ERROR`.
//! - It names the peer of an RPC in a field `target`, which clashes with
//!   the event's own target: a JSON line carried the key twice. The field
//!   is written as `peer`.
//!
//! [`RaftEvents`] writes openraft's events itself and hands every other
//! event to the standard formatter. openraft's spans are at `debug`, which
//! the filter never enables, so its lines carry no span.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The target of openraft's events: its crate name, then its modules.
const OPENRAFT_TARGET: &str = "openraft";

/// The fields openraft puts an RPC's error in.
const ERROR_FIELDS: [&str; 2] = ["error", "err"];

/// How openraft displays the errors that mean a peer is not there:
/// `Unreachable` and `Timeout` (`RPCError` displays either as it is).
const PEER_AWAY_PREFIXES: [&str; 2] = ["Unreachable node:", "timeout after "];

/// openraft's name for the peer of an RPC, and this node's.
const PEER_FIELD: (&str, &str) = ("target", "peer");

/// The line layout, as `log.format` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// One JSON object a line, fields at the top level.
    Json,
    /// `timestamp LEVEL target: message field=value ...`.
    Text,
}

/// An event formatter that writes openraft's events itself (see the
/// module) and every other event with `inner`.
#[derive(Debug)]
pub(crate) struct RaftEvents<F> {
    inner: F,
    shape: Shape,
}

impl<F> RaftEvents<F> {
    /// Formats openraft's events as `shape`, the rest with `inner` (which
    /// must write `shape` too).
    pub(crate) fn new(inner: F, shape: Shape) -> Self {
        Self { inner, shape }
    }
}

impl<S, N, F> FormatEvent<S, N> for RaftEvents<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        if metadata.target().split("::").next() != Some(OPENRAFT_TARGET) {
            return self.inner.format_event(ctx, writer, event);
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = level(*metadata.level(), &fields);
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        match self.shape {
            Shape::Json => write_json(&mut writer, &timestamp, level, metadata.target(), &fields),
            Shape::Text => write_text(&mut writer, &timestamp, level, metadata.target(), &fields),
        }
    }
}

/// The level an openraft event is logged at: `WARN` for an `ERROR` whose
/// error says the peer was not there, its own level otherwise.
fn level(level: Level, fields: &Fields) -> Level {
    let peer_away = fields.values.iter().any(|(name, value)| {
        ERROR_FIELDS.contains(name)
            && value
                .as_str()
                .is_some_and(|text| PEER_AWAY_PREFIXES.iter().any(|p| text.starts_with(p)))
    });
    if level == Level::ERROR && peer_away {
        Level::WARN
    } else {
        level
    }
}

/// An event's message and its other fields in order, as JSON values.
#[derive(Debug, Default)]
struct Fields {
    message: String,
    values: Vec<(&'static str, serde_json::Value)>,
}

impl Fields {
    fn push(&mut self, field: &Field, value: serde_json::Value) {
        let name = match field.name() {
            name if name == PEER_FIELD.0 => PEER_FIELD.1,
            name => name,
        };
        self.values.push((name, value));
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            self.push(field, text.into());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            value.clone_into(&mut self.message);
        } else {
            self.push(field, value.into());
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, value.into());
    }
}

/// `value` as a JSON string.
fn quoted(value: &str) -> String {
    serde_json::Value::from(value).to_string()
}

/// The standard JSON layout: `timestamp`, `level`, `message`, the fields,
/// then `target`.
fn write_json(
    writer: &mut Writer<'_>,
    timestamp: &str,
    level: Level,
    target: &str,
    fields: &Fields,
) -> fmt::Result {
    write!(
        writer,
        "{{\"timestamp\":{},\"level\":{},\"message\":{}",
        quoted(timestamp),
        quoted(level.as_str()),
        quoted(&fields.message)
    )?;
    for (name, value) in &fields.values {
        write!(writer, ",{}:{value}", quoted(name))?;
    }
    writeln!(writer, ",\"target\":{}}}", quoted(target))
}

/// The standard text layout.
fn write_text(
    writer: &mut Writer<'_>,
    timestamp: &str,
    level: Level,
    target: &str,
    fields: &Fields,
) -> fmt::Result {
    write!(
        writer,
        "{timestamp} {:>5} {target}: {}",
        level.as_str(),
        fields.message
    )?;
    for (name, value) in &fields.values {
        match value.as_str() {
            Some(text) => write!(writer, " {name}={text}")?,
            None => write!(writer, " {name}={value}")?,
        }
    }
    writeln!(writer)
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Everything the subscriber under test wrote.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("capture").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("capture").clone()).expect("utf-8")
        }
    }

    /// The lines `emit` logs through a node's JSON (or text) formatter.
    fn logged(shape: Shape, emit: impl FnOnce()) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let builder = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(Level::TRACE)
            .with_writer(move || writer.clone());
        match shape {
            Shape::Json => {
                let subscriber = builder
                    .json()
                    .flatten_event(true)
                    .map_event_format(|json| RaftEvents::new(json, Shape::Json))
                    .finish();
                tracing::subscriber::with_default(subscriber, emit);
            }
            Shape::Text => {
                let subscriber = builder
                    .map_event_format(|full| RaftEvents::new(full, Shape::Text))
                    .finish();
                tracing::subscriber::with_default(subscriber, emit);
            }
        }
        captured.text()
    }

    fn json_line(text: &str) -> serde_json::Map<String, serde_json::Value> {
        let line = text.lines().next().expect("one line");
        match serde_json::from_str(line).expect("a JSON line") {
            serde_json::Value::Object(object) => object,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn a_vote_to_an_unreachable_peer_is_a_warning() {
        let text = logged(Shape::Json, || {
            tracing::error!(target: "openraft::core::raft_core",
                error = "Unreachable node: could not connect to 127.0.0.1:7001", target = 2,
                "while requesting vote");
        });
        let line = json_line(&text);
        assert_eq!(line["level"], "WARN", "{text}");
        assert_eq!(line["message"], "while requesting vote");
        assert_eq!(line["target"], "openraft::core::raft_core");
        assert_eq!(line["peer"], 2);
    }

    #[test]
    fn an_rpc_past_its_deadline_is_a_warning() {
        let text = logged(Shape::Json, || {
            tracing::error!(target: "openraft::replication",
                err = "timeout after 1s when AppendEntries 1->3", "RPCError");
        });
        assert_eq!(json_line(&text)["level"], "WARN", "{text}");
    }

    #[test]
    fn an_error_of_the_peer_itself_stays_an_error() {
        let text = logged(Shape::Json, || {
            tracing::error!(target: "openraft::core::raft_core",
                error = "NetworkError: cluster authentication with 127.0.0.1:7001 failed",
                target = 2, "while requesting vote");
        });
        assert_eq!(json_line(&text)["level"], "ERROR", "{text}");
    }

    #[test]
    fn an_error_without_an_rpc_error_stays_an_error() {
        let text = logged(Shape::Json, || {
            tracing::error!(target: "openraft::core::raft_core",
                error = "storage failed", "quit RaftCore::main on error");
        });
        assert_eq!(json_line(&text)["level"], "ERROR", "{text}");
    }

    #[test]
    fn a_warning_about_an_unreachable_peer_stays_a_warning() {
        let fields = Fields {
            message: "error replication".to_owned(),
            values: vec![("error", "Unreachable node: gone".into())],
        };
        assert_eq!(level(Level::WARN, &fields), Level::WARN);
    }

    #[test]
    fn openraft_s_target_field_is_written_once_as_peer() {
        let text = logged(Shape::Json, || {
            tracing::warn!(target: "openraft::core::raft_core", target = 3, "a peer event");
        });
        assert_eq!(text.matches("\"target\"").count(), 1, "{text}");
        let line = json_line(&text);
        assert_eq!(line["peer"], 3);
        assert_eq!(line["target"], "openraft::core::raft_core");
    }

    #[test]
    fn other_crates_events_keep_the_standard_layout() {
        let text = logged(Shape::Json, || {
            tracing::error!(target: "narad_dataplane::wal", records = 3, "ingress WAL failed");
        });
        let line = json_line(&text);
        assert_eq!(line["level"], "ERROR");
        assert_eq!(line["records"], 3);
        assert_eq!(line["target"], "narad_dataplane::wal");
    }

    #[test]
    fn the_text_layout_shows_the_demoted_level_and_the_peer() {
        let text = logged(Shape::Text, || {
            tracing::error!(target: "openraft::core::raft_core",
                error = "timeout after 1s when Vote 1->2", target = 2, "timeout");
        });
        assert!(
            text.contains(" WARN openraft::core::raft_core: timeout error=timeout after"),
            "{text}"
        );
        assert!(text.trim_end().ends_with(" peer=2"), "{text}");
        assert!(!text.contains("ERROR"), "{text}");
    }
}
