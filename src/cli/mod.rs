//! Command-line interface: flags with clap, one module per command group.
//!
//! `serve` runs the server in this process; `runs` and `asks` are operator commands that
//! talk to a running server over gRPC. Every command returns a process exit code instead of
//! exiting, so `main` stays a one-liner and the code is testable.

mod asks;
mod output;
mod policy;
mod runs;
pub mod serve;

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use tonic::transport::{Channel, Endpoint};

pub use asks::AsksCommand;
pub use policy::PolicyCommand;
pub use runs::RunsCommand;
pub use serve::ServeArgs;

/// Default address of the server the operator commands talk to: where `serve` listens.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:50051";

/// How long an operator command waits for the TCP/HTTP2 connection before it gives up:
/// long enough for a loaded machine, short enough that a typo in `--server` is not a hang.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// runplane: the control plane for AI coding-agent runs.
#[derive(Debug, Parser)]
#[command(name = "runplane", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gRPC server (store, sessions, policy) until SIGINT or SIGTERM.
    Serve(ServeArgs),
    /// Start, inspect, watch and cancel runs on a running server.
    Runs {
        /// Where the server is and how to print.
        #[command(flatten)]
        client: ClientArgs,
        /// The runs command.
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// List and answer the tool calls waiting for an operator.
    Asks {
        /// Where the server is and how to print.
        #[command(flatten)]
        client: ClientArgs,
        /// The asks command.
        #[command(subcommand)]
        command: AsksCommand,
    },
    /// Inspect policy profiles and decide tool calls offline, as the server would.
    Policy {
        /// The policy command.
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

/// Options shared by every operator command; `global` so they may follow the subcommand
/// (`runplane runs list --json`), which is where people type them.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// URL of the runplane server.
    #[arg(
        long,
        global = true,
        env = "RUNPLANE_SERVER",
        hide_env_values = true,
        default_value = DEFAULT_SERVER,
        display_order = 100
    )]
    pub server: String,
    /// Print JSON for scripts instead of text for people.
    #[arg(long, global = true, display_order = 101)]
    pub json: bool,
}

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve(args) => block_on(serve::run(args)),
        Command::Runs { client, command } => {
            block_on(async move { report(runs::run(&client, command).await) })
        }
        Command::Asks { client, command } => {
            block_on(async move { report(asks::run(&client, command).await) })
        }
        // Offline, synchronous: no runtime needed.
        Command::Policy { command } => policy::run(command),
    }
}

/// Runs an async command on the one runtime of this process, built here so that a
/// command that needs none does not pay for it.
fn block_on(command: impl Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(command),
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Connects to the server eagerly, so an unreachable server is reported as such (naming
/// the address) rather than as an opaque UNAVAILABLE from the first call.
async fn connect(server: &str) -> anyhow::Result<Channel> {
    let endpoint = Endpoint::from_shared(server.to_string())
        .with_context(|| format!("--server: invalid URL {server:?}"))?
        .connect_timeout(CONNECT_TIMEOUT);
    endpoint.connect().await.map_err(|err| {
        // The transport's chain repeats itself ("tcp connect error: tcp connect error");
        // its last link is the one that says what happened.
        let mut cause: &dyn std::error::Error = &err;
        while let Some(source) = cause.source() {
            cause = source;
        }
        anyhow::anyhow!(
            "cannot connect to the runplane server at {server}: {cause} \
             (is `runplane serve` running there? set --server or RUNPLANE_SERVER)"
        )
    })
}

/// Prints an operator command's error on stderr and picks the exit code: a gRPC status as
/// `error: CODE: message` (the form scripts can match on), anything else with its causes.
fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            match err.downcast_ref::<tonic::Status>() {
                Some(status) => eprintln!(
                    "error: {}: {}",
                    output::code_name(status.code()),
                    status.message()
                ),
                None => eprintln!("error: {err:#}"),
            }
            ExitCode::FAILURE
        }
    }
}
