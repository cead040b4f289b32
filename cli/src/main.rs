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
mod process;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// mimalloc instead of glibc malloc: the request paths allocate small
/// buffers on many threads, where glibc's arenas cost a quarter of the
/// user-space CPU of a loaded produce path (see docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The end of `narad --help`: connection settings and exit statuses.
const AFTER_LONG_HELP: &str = "\
Connection (client verbs, after the verb: `narad topic ls -s HOST:PORT`): -s/--server \
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
    let cli = Cli::parse();
    match cli.command {
        Command::Control(args) => control::run(&args),
        Command::Dev(args) => dev::run(&args),
        Command::Data(args) => data::run(&args),
        Command::Bench(args) if bench::is_named(&args) => bench::run(&args),
        Command::Bench(args) => client::finish(client::bench::run_from(bench::topic_words(args))),
        Command::Client(command) => client::run(*command, &mut Cli::command()),
    }
}
