//! `runplane work`: a real agent as the worker of a run (`worker::session` does the work).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use super::connect::channel;
use super::DEFAULT_SERVER;
use crate::grpc::pb;
use crate::worker::gate::GateDefaults;
use crate::worker::hook_wire::Agent;
use crate::worker::session::{work, WorkConfig};

/// Flags of `runplane work`.
#[derive(Debug, Clone, Args)]
pub struct WorkArgs {
    /// The run to work on (from `runplane runs start`).
    #[arg(long, value_name = "RUN_ID")]
    pub run: String,
    /// The run's worker token (StartRun's worker_token).
    #[arg(
        long,
        env = "RUNPLANE_WORKER_TOKEN",
        hide_env_values = true,
        default_value = ""
    )]
    pub worker_token: String,
    /// The agent's working directory, a git working tree [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// The agent the command starts.
    #[arg(long, value_parser = |s: &str| s.parse::<Agent>(), default_value = "claude-code")]
    pub agent: Agent,
    /// The quality gate's test command when the profile names none.
    #[arg(long, value_name = "CMD")]
    pub test_command: Option<String>,
    /// The quality gate's lint command when the profile names none.
    #[arg(long, value_name = "CMD")]
    pub lint_command: Option<String>,
    /// Seconds each gate command may run.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub gate_timeout: u64,
    /// Seconds a hook may wait for its decision (an operator's answer to an ask
    /// included); set it above the profile's ask_timeout_seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub hook_timeout: u64,
    /// Seconds the hooks-live probe may take: the agent is started once with no way to
    /// act, and must run runplane's SessionStart hook within this time.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub probe_timeout: u64,
    /// The remote `branch` and `pr` deliveries push to.
    #[arg(long, default_value = "origin")]
    pub remote: String,
    /// URL of the runplane server.
    #[arg(long, env = "RUNPLANE_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// PEM CA certificate that signed the server's certificate.
    #[arg(long, env = "RUNPLANE_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// The agent's command line, after `--`.
    #[arg(last = true, required = true, value_name = "AGENT_COMMAND")]
    pub command: Vec<String>,
}

/// Runs the agent as the run's worker; exit 0 when the run completed.
pub(super) async fn run(args: WorkArgs) -> ExitCode {
    match run_inner(args).await {
        Ok(run) => {
            let status = pb::RunStatus::try_from(run.status).map_or("unknown", |s| s.as_str_name());
            eprintln!(
                "runplane work: run {} finished: {status} {}",
                run.id, run.error
            );
            if run.status == pb::RunStatus::Completed as i32 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run_inner(args: WorkArgs) -> anyhow::Result<pb::Run> {
    let workspace = match args.workspace {
        Some(dir) => dir,
        None => std::env::current_dir().context("the current directory")?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .with_context(|| format!("--workspace {}", workspace.display()))?;
    let config = WorkConfig {
        run_id: args.run,
        worker_token: args.worker_token,
        workspace,
        agent: args.agent,
        command: args.command,
        gate: GateDefaults {
            test_command: args.test_command,
            lint_command: args.lint_command,
            limit: Duration::from_secs(args.gate_timeout),
        },
        remote: args.remote,
        hook_program: std::env::current_exe().context("the runplane executable")?,
        hook_timeout: Duration::from_secs(args.hook_timeout),
        probe_timeout: Duration::from_secs(args.probe_timeout),
    };
    let channel = channel(&args.server, args.ca_cert.as_ref()).await?;
    Ok(work(channel, config).await?)
}
