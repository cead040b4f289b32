//! The client verbs of `narad`: topic, pub, sub, replay, user, remote, cluster,
//! server report, ctx, completion and the topic benchmark. Each is an
//! HTTP client of the API (spec §1) and nothing more: no module here links
//! the data plane.
//!
//! Every verb ends in a [`Failure`] or success, and the failure decides the
//! exit status: 1 when the server refused, 2 for a usage or local-input
//! error, 3 when the server could not be reached.

pub(crate) mod bench;
mod cluster;
mod connection;
pub(crate) mod ctx;
pub(crate) mod duration;
mod http;
mod message;
mod output;
mod pubsub;
mod remote;
mod topic;
mod topic_remote;
mod user;

use std::process::ExitCode;

use clap::Subcommand;

pub(crate) use connection::Connection;
pub(crate) use http::Api;

/// Exit status when the server answered and refused.
pub(crate) const EXIT_REFUSED: u8 = 1;
/// Exit status for a usage error: bad flags, unreadable local input.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status when the server could not be reached.
pub(crate) const EXIT_UNREACHABLE: u8 = 3;

/// Why a client verb failed; each kind has its exit status.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The server answered with a refusal (the text names it and what to do).
    Refused(String),
    /// The command line or its local input is wrong.
    Usage(String),
    /// No answer from the server.
    Unreachable(String),
    /// Standard output was closed (`narad replay ... | head -1`): the
    /// reader has what it wanted, so the verb ends quietly with status 0.
    OutputClosed,
}

impl Failure {
    /// The exit status of this failure.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Self::Refused(_) => EXIT_REFUSED,
            Self::Usage(_) => EXIT_USAGE,
            Self::Unreachable(_) => EXIT_UNREACHABLE,
            Self::OutputClosed => 0,
        }
    }

    /// What to print on stderr; nothing for a closed output.
    fn message(&self) -> Option<&str> {
        match self {
            Self::Refused(text) | Self::Usage(text) | Self::Unreachable(text) => Some(text),
            Self::OutputClosed => None,
        }
    }
}

/// What a client verb returns.
pub(crate) type Outcome = Result<(), Failure>;

/// The client verbs, as `narad` subcommands. Each takes the connection
/// flags; `completion` and the node commands do not.
#[derive(Debug, Subcommand)]
pub(crate) enum ClientCommand {
    /// Create, list, describe, change and delete topics; attach fan-out
    /// children.
    Topic {
        #[command(subcommand)]
        command: topic::TopicCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// Publish messages: one from the command line, a file, or one per
    /// line of standard input.
    Pub(pubsub::PubArgs),
    /// Consume messages (queue mode: leased and acked), or tail a topic
    /// without touching queue state (--peek).
    Sub(pubsub::SubArgs),
    /// Read one partition's retained records by offset, touching no queue
    /// state.
    Replay(pubsub::ReplayArgs),
    /// Manage users and their grants (admin).
    User {
        #[command(subcommand)]
        command: user::UserCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// Other Narad clusters remote children ship to (admin, security on).
    Remote {
        #[command(subcommand)]
        command: remote::RemoteCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// Cluster membership and partition moves (admin).
    Cluster {
        #[command(subcommand)]
        command: cluster::ClusterCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// Server-wide views.
    Server {
        #[command(subcommand)]
        command: cluster::ServerCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// Named connection settings (server, user, password), one selected.
    Ctx {
        #[command(subcommand)]
        command: ctx::CtxCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// Print a shell completion script: bash, zsh or fish.
    Completion(CompletionArgs),
}

/// Flags of `narad completion`.
#[derive(Debug, clap::Args)]
pub(crate) struct CompletionArgs {
    /// The shell to complete for.
    shell: clap_complete::Shell,
}

/// Runs a client verb and turns its outcome into the exit status, printing
/// a failure as `narad: <what went wrong and what to do>`.
pub(crate) fn run(command: ClientCommand, cli: &mut clap::Command) -> ExitCode {
    let env = |name: &str| std::env::var(name).ok();
    let outcome = match command {
        ClientCommand::Topic {
            command,
            connection,
        } => topic::run(command, &connection.with_environment(env)),
        ClientCommand::Pub(mut args) => {
            args.connection = args.connection.with_environment(env);
            pubsub::publish(&args)
        }
        ClientCommand::Sub(mut args) => {
            args.connection = args.connection.with_environment(env);
            pubsub::subscribe(&args)
        }
        ClientCommand::Replay(mut args) => {
            args.connection = args.connection.with_environment(env);
            pubsub::replay(&args)
        }
        ClientCommand::User {
            command,
            connection,
        } => user::run(command, &connection.with_environment(env)),
        ClientCommand::Remote {
            command,
            connection,
        } => remote::run(command, &connection.with_environment(env)),
        ClientCommand::Cluster {
            command,
            connection,
        } => cluster::run(&command, &connection.with_environment(env)),
        ClientCommand::Server {
            command,
            connection,
        } => cluster::server(&command, &connection.with_environment(env)),
        ClientCommand::Ctx {
            command,
            connection,
        } => ctx::run(command, &connection.with_environment(env)),
        ClientCommand::Completion(args) => completion(args.shell, cli),
    };
    finish(outcome)
}

/// Writes the completion script for `shell` to stdout.
fn completion(shell: clap_complete::Shell, cli: &mut clap::Command) -> Outcome {
    use std::io::Write;
    // Generated into memory first: the generator panics on a write error,
    // such as a closed pipe.
    let mut script = Vec::new();
    clap_complete::generate(shell, cli, "narad", &mut script);
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(&script)
        .and_then(|()| stdout.flush())
        .map_err(output::write_failure)
}

/// The exit status of `outcome`, with a failure printed to stderr.
pub(crate) fn finish(outcome: Outcome) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if let Some(message) = failure.message() {
                eprintln!("narad: {message}");
            }
            ExitCode::from(failure.exit_code())
        }
    }
}
