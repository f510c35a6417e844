//! Command-line interface: flags with clap, one module per command group.
//!
//! `serve` runs the server in this process; `runs` and `asks` are operator commands that
//! talk to a running server over gRPC. Every command returns a process exit code instead of
//! exiting, so `main` stays a one-liner and the code is testable.

mod asks;
pub mod connect;
pub mod escape;
mod exec_agent;
mod grants;
mod hook;
mod output;
mod policy;
mod policy_import;
mod policy_reload;
mod policy_replay;
mod policy_sandbox;
mod policy_test;
mod runs;
pub mod serve;
mod serve_store;
mod tokens;
mod work;

use std::future::Future;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

pub use asks::AsksCommand;
pub use exec_agent::confine;
pub use grants::GrantsCommand;
pub use policy::PolicyCommand;
pub use runs::RunsCommand;
pub use serve::ServeArgs;
pub use tokens::TokensCommand;

/// Default address of the server the operator commands talk to: where `serve` listens.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:50051";

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
    /// List and revoke a run's remembered answers (grants).
    Grants {
        /// Where the server is and how to print.
        #[command(flatten)]
        client: ClientArgs,
        /// The grants command.
        #[command(subcommand)]
        command: GrantsCommand,
    },
    /// Make, list and revoke operator tokens (admin).
    Tokens {
        /// Where the server is and how to print.
        #[command(flatten)]
        client: ClientArgs,
        /// The tokens command.
        #[command(subcommand)]
        command: TokensCommand,
    },
    /// Run by an agent at each of its hooks: asks the worker (`runplane work`) and blocks the
    /// tool on any failure.
    #[command(hide = true)]
    Hook(hook::HookArgs),
    /// Run by `runplane work` to start an agent that dies with its worker.
    #[command(hide = true)]
    ExecAgent(exec_agent::ExecAgentArgs),
    /// Run a coding agent (Claude Code) as the worker of a run: its tool calls are decided
    /// by the run's policy through the agent's hooks, failing closed.
    Work(work::WorkArgs),
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
    /// Operator token to send (`authorization: Bearer …`); wins over --token-file.
    #[arg(
        long,
        global = true,
        env = "RUNPLANE_TOKEN",
        hide_env_values = true,
        display_order = 102
    )]
    pub token: Option<String>,
    /// File whose first line is the token, used when --token and RUNPLANE_TOKEN are not
    /// set; `serve` writes its admin token to this default path.
    #[arg(
        long,
        global = true,
        env = "RUNPLANE_TOKEN_FILE",
        value_name = "FILE",
        default_value = connect::DEFAULT_TOKEN_FILE,
        display_order = 103
    )]
    pub token_file: std::path::PathBuf,
    /// PEM CA certificate that signed the server's certificate: connect with TLS.
    #[arg(
        long,
        global = true,
        env = "RUNPLANE_CA_CERT",
        value_name = "FILE",
        display_order = 104
    )]
    pub ca_cert: Option<std::path::PathBuf>,
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
        Command::Grants { client, command } => {
            block_on(async move { report(grants::run(&client, command).await) })
        }
        Command::Tokens { client, command } => {
            block_on(async move { report(tokens::run(&client, command).await) })
        }
        Command::Hook(args) => hook::run(args),
        Command::ExecAgent(args) => exec_agent::run(args),
        Command::Work(args) => block_on(work::run(args)),
        // Synchronous but for `replay`, which starts its own runtime.
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

/// Prints an operator command's error on stderr and picks the exit code: a gRPC status as
/// `error: CODE: message` (the form scripts can match on), anything else with its causes.
fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            match err.downcast_ref::<tonic::Status>() {
                // Server messages and invalid-response errors can quote agent text.
                Some(status) => {
                    eprintln!(
                        "error: {}: {}",
                        output::code_name(status.code()),
                        escape::Escaped(status.message())
                    );
                    if status.code() == tonic::Code::Unauthenticated {
                        eprintln!(
                            "hint: pass an operator token with --token or RUNPLANE_TOKEN, or \
                             point --token-file at one (`runplane serve` writes its admin \
                             token to {}, relative to the directory it runs in)",
                            connect::DEFAULT_TOKEN_FILE
                        );
                    }
                }
                None => eprintln!("error: {}", escape::escape(&format!("{err:#}"))),
            }
            ExitCode::FAILURE
        }
    }
}
