//! The `narad` binary: the only crate that links both planes.
//!
//! Subcommands: `narad control` (a control-plane voter), `narad data` (a data
//! node), and `narad dev` (one of each in a single process on loopback, for a
//! laptop). `narad data` and `narad dev` report plainly that they are not
//! built yet, and exit non-zero rather than pretending to serve.

mod control;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit code for "this part of Narad is not built yet".
const EXIT_NOT_BUILT: u8 = 3;

#[derive(Debug, Parser)]
#[command(
    name = "narad",
    version,
    about = "Narad: a durable, HTTP-first, queue-first message broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a control-plane node (openraft metastore).
    Control(Box<control::ControlArgs>),
    /// Run a data node (HTTP API, ingress WAL, partition logs).
    Data,
    /// Run one control node and one data node in this process, on loopback,
    /// with security off.
    Dev {
        /// HTTP port of the data node.
        #[arg(long, default_value_t = 7942)]
        port: u16,
        /// Directory holding all data.
        #[arg(long, default_value = "data")]
        data_dir: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let part = match cli.command {
        Command::Control(args) => return control::run(&args),
        Command::Data => "the data plane (`narad data`)",
        Command::Dev { .. } => "the broker (`narad dev`)",
    };
    eprintln!(
        "narad {}: {part} is not built yet; this binary cannot serve requests. \
         See README.md for what exists today.",
        env!("CARGO_PKG_VERSION")
    );
    ExitCode::from(EXIT_NOT_BUILT)
}
