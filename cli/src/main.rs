//! The `narad` binary: the only crate that links both planes.
//!
//! Subcommands: `narad control` (a control-plane voter), `narad data` (a data
//! node), and `narad dev` (one of each in a single process on loopback, for a
//! laptop). `narad data` reports plainly that it is not built yet, and
//! exits non-zero rather than pretending to serve.

mod bridge;
mod control;
mod dev;

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
    Dev(dev::DevArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Control(args) => control::run(&args),
        Command::Dev(args) => dev::run(&args),
        Command::Data => {
            eprintln!(
                "narad {}: the data plane as its own process (`narad data`) is not built yet; \
                 `narad dev` runs a data node with its control node in one process. \
                 See README.md for what exists today.",
                env!("CARGO_PKG_VERSION")
            );
            ExitCode::from(EXIT_NOT_BUILT)
        }
    }
}
