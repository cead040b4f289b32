//! The `narad` binary: the only crate that links both planes.
//!
//! Subcommands: `narad control` (a control-plane voter), `narad data` (a data
//! node), `narad dev` (one of each in a single process on loopback, for a
//! laptop), and `narad bench` (a benchmark against this binary).

mod bench;
mod bridge;
mod control;
mod data;
mod dev;
mod process;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc malloc: the request paths allocate small
/// buffers on many threads, where glibc's arenas cost a quarter of the
/// user-space CPU of a loaded produce path (see docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Run a data node (HTTP API, ingress WAL, partition logs) that follows
    /// a control plane.
    Data(Box<data::DataArgs>),
    /// Run one control node and one data node in this process, on loopback,
    /// with security off.
    Dev(dev::DevArgs),
    /// Run a benchmark (its binary built beside this one) against this
    /// binary.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Control(args) => control::run(&args),
        Command::Dev(args) => dev::run(&args),
        Command::Data(args) => data::run(&args),
        Command::Bench(args) => bench::run(&args),
    }
}
