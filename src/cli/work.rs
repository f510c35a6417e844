//! `runplane work`: a real agent as the worker of a run (`worker::session` does the work).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use super::connect::{channel, resolve_token, Bearer, DEFAULT_TOKEN_FILE};
use super::escape::{escape, Escaped};
use super::output::code_name;
use super::policy_sandbox::{describe, plan_for};
use super::runs::choices;
use super::DEFAULT_SERVER;
use crate::domain::{DeliverMode, StartRequest};
use crate::grpc::pb;
use crate::grpc::pb::run_service_client::RunServiceClient;
use crate::policy::{presets, DEFAULT_PROFILE};
use crate::worker::gate::GateDefaults;
use crate::worker::hook_wire::Agent;
use crate::worker::launch::{self, HookCommand};
use crate::worker::session::{work, WorkConfig, WorkError};

/// Flags of `runplane work`.
#[derive(Debug, Clone, Args)]
pub struct WorkArgs {
    /// The run to work on (from `runplane runs start`); without it, `--task` and
    /// `--project` start a new run with the operator token.
    #[arg(long, value_name = "RUN_ID", required_unless_present_any = ["task", "print_settings", "print_sandbox"])]
    pub run: Option<String>,
    /// Start a run for this task (with --project; needs an operator token).
    #[arg(long, conflicts_with = "run", requires = "project")]
    pub task: Option<String>,
    /// The project of the run to start.
    #[arg(long, requires = "task")]
    pub project: Option<String>,
    /// The team owning the run to start.
    #[arg(long, requires = "task")]
    pub team: Option<String>,
    /// The policy profile of the run to start [default: the server's].
    #[arg(long, value_name = "NAME", requires = "task")]
    pub profile: Option<String>,
    /// How the run to start hands over its changes [default: none]
    #[arg(long, requires = "task", value_parser = choices(DeliverMode::ALL, DeliverMode::as_str))]
    pub deliver_mode: Option<DeliverMode>,
    /// Operator token that starts the run (`--task`); wins over --token-file.
    #[arg(long, env = "RUNPLANE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// File whose first line is the operator token, used when --token is not set.
    #[arg(long, env = "RUNPLANE_TOKEN_FILE", value_name = "FILE", default_value = DEFAULT_TOKEN_FILE)]
    pub token_file: PathBuf,
    /// Print the hook settings runplane gives the agent and its command line, and exit.
    #[arg(long)]
    pub print_settings: bool,
    /// Print the sandbox plan the agent would run in (under `--profile`, default the
    /// server's default profile), and exit.
    #[arg(long)]
    pub print_sandbox: bool,
    /// Run the agent and the gate in the kernel sandbox compiled from the run's profile
    /// (`on`), or without one (`off`: recorded in the run's log, shown as unsandboxed, and
    /// refused when the profile requires the sandbox).
    #[arg(long, env = "RUNPLANE_SANDBOX", default_value = "on", value_parser = ["on", "off"])]
    pub sandbox: String,
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
    /// Seconds to keep re-attaching after the session drops (the agent keeps running,
    /// its hooks wait); the server keeps a run this long only within its re-attach grace.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub reattach_for: u64,
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
    if args.print_settings || args.print_sandbox {
        let printed = if args.print_sandbox {
            print_sandbox(&args)
        } else {
            print_settings(&args)
        };
        return match printed {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("error: {err:#}");
                ExitCode::FAILURE
            }
        };
    }
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
            let status = err.downcast_ref::<tonic::Status>().or_else(|| {
                match err.downcast_ref::<WorkError>() {
                    Some(WorkError::Session(status)) => Some(status),
                    _ => None,
                }
            });
            match status {
                Some(status) => eprintln!(
                    "error: {}: {}",
                    code_name(status.code()),
                    Escaped(status.message())
                ),
                None => eprintln!("error: {}", escape(&format!("{err:#}"))),
            }
            ExitCode::FAILURE
        }
    }
}

/// Shows what `runplane work` would give the agent (the hook socket as `<socket>`).
fn print_settings(args: &WorkArgs) -> anyhow::Result<()> {
    let program = std::env::current_exe().context("the runplane executable")?;
    let hooks = HookCommand::new(
        &program,
        args.agent,
        Path::new("<socket>"),
        Duration::from_secs(args.hook_timeout),
    );
    let launch = launch::prepare(args.agent, &args.command, &hooks).map_err(anyhow::Error::msg)?;
    print!("{}", launch::describe(args.agent, &launch));
    Ok(())
}

/// Shows the sandbox plan under `--profile` (a preset), for this workspace and agent.
fn print_sandbox(args: &WorkArgs) -> anyhow::Result<()> {
    let name = args.profile.as_deref().unwrap_or(DEFAULT_PROFILE);
    let profile = presets()
        .into_iter()
        .find(|p| p.name == name)
        .with_context(|| {
            format!("--profile {name}: not a preset (runplane policy sandbox reads --policy-dir)")
        })?;
    let plan = plan_for(
        &profile,
        args.workspace.as_deref(),
        &credentials(&args.token_file),
    )?;
    print!("{}", describe(&profile, &plan));
    Ok(())
}

/// runplane's credential files on this machine: hidden from the agent.
fn credentials(token_file: &Path) -> Vec<PathBuf> {
    std::fs::canonicalize(token_file).into_iter().collect()
}

async fn run_inner(args: WorkArgs) -> anyhow::Result<pb::Run> {
    let workspace = match &args.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("the current directory")?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .with_context(|| format!("--workspace {}", workspace.display()))?;
    let runplane = std::env::current_exe().context("the runplane executable")?;
    let channel = channel(&args.server, args.ca_cert.as_ref()).await?;
    let (run_id, worker_token) = match &args.run {
        Some(run) => (run.clone(), args.worker_token.clone()),
        None => start_run(&args, channel.clone()).await?,
    };
    let config = WorkConfig {
        run_id,
        worker_token,
        workspace,
        agent: args.agent,
        command: args.command,
        gate: GateDefaults {
            test_command: args.test_command,
            lint_command: args.lint_command,
            limit: Duration::from_secs(args.gate_timeout),
        },
        remote: args.remote,
        runplane,
        hook_timeout: Duration::from_secs(args.hook_timeout),
        probe_timeout: Duration::from_secs(args.probe_timeout),
        reattach_for: Duration::from_secs(args.reattach_for),
        sandbox: args.sandbox == "on",
        credentials: credentials(&args.token_file),
    };
    Ok(work(channel, config).await?)
}

/// Starts the run `--task` names with the operator token; its id and worker token.
async fn start_run(args: &WorkArgs, channel: Channel) -> anyhow::Result<(String, String)> {
    let token = resolve_token(args.token.as_deref(), &args.token_file)?;
    let bearer = Bearer::new(token.as_deref())?;
    let request = StartRequest {
        task_id: args.task.clone().unwrap_or_default(),
        agent_id: args.agent.as_str().to_string(),
        project_id: args.project.clone().unwrap_or_default(),
        team_id: args.team.clone().unwrap_or_default(),
        policy_profile: args.profile.clone().unwrap_or_default(),
        exec_mode: None,
        deliver_mode: args.deliver_mode,
    };
    let response = RunServiceClient::new(InterceptedService::new(channel, bearer))
        .start_run(pb::StartRequest::from(&request))
        .await?
        .into_inner();
    let run = response
        .run
        .ok_or_else(|| anyhow::anyhow!("StartRun answered without a run"))?;
    eprintln!("runplane work: started run {}", run.id);
    Ok((run.id, response.worker_token))
}
