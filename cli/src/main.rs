//! The `narad` binary: the only crate that links both planes.
//!
//! Subcommands: `narad control` (a control-plane voter), `narad data` (a data
//! node), `narad dev` (one of each in a single process on loopback, for a
//! laptop), `narad bench` (a named benchmark against this binary, or a load
//! test of a topic), and the client verbs of [`client`] (topic, pub, sub,
//! replay, user, cluster, server, ctx, completion), which speak only HTTP.

mod bench;
mod bridge;
mod client;
mod control;
mod data;
mod dev;
#[cfg(feature = "dhat-heap")]
mod heap_profile;
mod process;
mod settings;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// mimalloc instead of glibc malloc: the request paths allocate small
/// buffers on many threads, where glibc's arenas cost a quarter of the
/// user-space CPU of a loaded produce path (see docs/benchmarks.md).
#[cfg(not(feature = "dhat-heap"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The heap-profiling build (`--features dhat-heap`): dhat counts every
/// allocation instead (see `heap_profile`).
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// The end of `narad --help`: connection settings and exit statuses.
const AFTER_LONG_HELP: &str = "\
Connection (client verbs: `narad topic ls -s HOST:PORT`, or before the verb): -s/--server \
(NARAD_ADDR), -u/--user (NARAD_USER), -p/--password (NARAD_PASS) or --password-stdin, --ctx, \
and --json for JSON output. A flag beats its environment variable, which beats the selected \
context (`narad ctx`), which beats the default http://127.0.0.1:7942.

Exit status (client verbs):
  0  done
  1  the server refused (the message says why and what to do)
  2  usage: bad flags or arguments, unreadable local input, no confirmation
  3  the server could not be reached";

#[derive(Debug, Parser)]
#[command(
    name = "narad",
    version,
    about = "Narad: a durable, HTTP-first, queue-first message broker",
    after_long_help = AFTER_LONG_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a control-plane node (openraft metastore).
    Control(Box<control::ControlArgs>),
    /// Run a data node (HTTP API, ingress WAL, partition logs) that follows
    /// a control plane.
    Data(Box<data::DataArgs>),
    /// Run one control node and one data node in this process, on loopback,
    /// with security off.
    Dev(dev::DevArgs),
    /// Run a named benchmark against this binary, or load-test a topic on
    /// a running server (`narad bench TOPIC --count N`).
    #[command(long_about = bench::LONG_ABOUT)]
    Bench(bench::BenchArgs),
    #[command(flatten)]
    Client(Box<client::ClientCommand>),
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(hoist_connection_flags(std::env::args_os().collect()));
    #[cfg(feature = "dhat-heap")]
    let _profiler = matches!(
        cli.command,
        Command::Control(_) | Command::Data(_) | Command::Dev(_)
    )
    .then(heap_profile::start)
    .flatten();
    match cli.command {
        Command::Control(args) => control::run(&args),
        Command::Dev(args) => dev::run(&args),
        Command::Data(args) => data::run(&args),
        Command::Bench(args) => match bench::named(&args) {
            Some(run) => bench::run(&run),
            None => client::finish(client::bench::run_from(bench::topic_words(args))),
        },
        Command::Client(command) => client::run(*command, &mut Cli::command()),
    }
}

/// Connection flags that take a value, and those that do not (see
/// `client::connection::Connection`).
const CONNECTION_FLAGS_WITH_VALUE: [&str; 7] = [
    "-s",
    "--server",
    "-u",
    "--user",
    "-p",
    "--password",
    "--ctx",
];
const CONNECTION_FLAGS_ALONE: [&str; 2] = ["--password-stdin", "--json"];

/// Moves connection flags written before the verb (`narad -s HOST topic
/// ls`, the Go CLI's global-flag form) to just after it, where the client
/// verbs take them. Only the leading run of such flags moves; anything
/// else is left for the parser to judge, so `narad -s HOST dev` is still
/// refused by `dev`.
fn hoist_connection_flags(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args = args.into_iter();
    let program = args.next();
    let rest: Vec<std::ffi::OsString> = args.collect();
    let mut leading = 0;
    while let Some(arg) = rest.get(leading).and_then(|arg| arg.to_str()) {
        let (name, attached) = match arg.split_once('=') {
            Some((name, _)) => (name, true),
            // `-sHOST`: a short flag with its value attached.
            None if !arg.starts_with("--") && arg.len() > 2 => (arg.get(..2).unwrap_or(arg), true),
            None => (arg, false),
        };
        if CONNECTION_FLAGS_WITH_VALUE.contains(&name) {
            leading += if attached { 1 } else { 2 };
        } else if CONNECTION_FLAGS_ALONE.contains(&name) && !attached {
            leading += 1;
        } else {
            break;
        }
    }
    let leading = leading.min(rest.len());
    if leading == 0 || leading == rest.len() {
        return program.into_iter().chain(rest).collect();
    }
    let (flags, after) = rest.split_at(leading);
    let (verb, tail) = after.split_at(1);
    program
        .into_iter()
        .chain(verb.iter().cloned())
        .chain(flags.iter().cloned())
        .chain(tail.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hoisted(line: &str) -> String {
        let args = line.split(' ').map(std::ffi::OsString::from).collect();
        hoist_connection_flags(args)
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn connection_flags_before_the_verb_move_after_it() {
        assert_eq!(
            hoisted("narad -s 127.0.0.1:7942 topic ls"),
            "narad topic -s 127.0.0.1:7942 ls"
        );
        assert_eq!(
            hoisted("narad --json -u admin --ctx=prod -sHOST sub orders"),
            "narad sub --json -u admin --ctx=prod -sHOST orders"
        );
        assert_eq!(
            hoisted("narad --ctx prod pub t m"),
            "narad pub --ctx prod t m"
        );
    }

    #[test]
    fn anything_else_is_left_where_it_was() {
        assert_eq!(hoisted("narad topic ls -s h"), "narad topic ls -s h");
        assert_eq!(hoisted("narad --version"), "narad --version");
        assert_eq!(hoisted("narad -s h"), "narad -s h");
    }

    #[test]
    fn hoisted_flags_reach_the_verb() {
        let args = hoist_connection_flags(
            "narad -s 127.0.0.1:9 --json topic ls"
                .split(' ')
                .map(std::ffi::OsString::from)
                .collect(),
        );
        let cli = Cli::try_parse_from(args).expect("parses");
        let Command::Client(command) = cli.command else {
            panic!("a client verb");
        };
        let client::ClientCommand::Topic { connection, .. } = *command else {
            panic!("topic");
        };
        assert_eq!(connection.server.as_deref(), Some("127.0.0.1:9"));
        assert!(connection.json);
    }
}
