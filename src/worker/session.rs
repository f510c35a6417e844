//! `runplane work`'s run: attach to the run, prove the agent's hooks are live, start the
//! agent, answer each hook from the run's session, and do what runplane asks — stop the
//! agent, run the gate, roll back, deliver — until the run is finished.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Child;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tonic::transport::Channel;

use super::agent::{self, Launcher};
use super::contain::{Containment, Facts};
use super::egress::Refusal;
use super::gate::{run_gate, GateDefaults, GateRequest};
use super::git::{Start, Workspace};
use super::hook_server::HookServer;
use super::hook_wire::Agent;
use super::hooks::{tail, Hooks, Note};
use super::launch::{self, HookCommand, Launch};
use super::link::Link;
use super::probe;
use super::reports::{egress_refused, kernel_denials, sandbox_policy, sandbox_report};
use crate::domain::{DeliverMode, SandboxPolicy};
use crate::grpc::pb;
use crate::grpc::pb::coordinator_message::Message as Out;
use crate::grpc::pb::worker_message::Message as In;

/// How long the agent has to stop after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// What `runplane work` needs.
pub struct WorkConfig {
    /// The run to work on.
    pub run_id: String,
    /// Its worker token.
    pub worker_token: String,
    /// The workspace: the agent's working directory, a git working tree.
    pub workspace: PathBuf,
    /// Which agent `command` starts.
    pub agent: Agent,
    /// The agent's command line (program first).
    pub command: Vec<String>,
    /// The gate's own commands and time limit.
    pub gate: GateDefaults,
    /// Where `branch` and `pr` deliveries push.
    pub remote: String,
    /// The `runplane` executable: the agent's hooks run it, and it starts the agent.
    pub runplane: PathBuf,
    /// How long a hook may wait for its answer (an ask included).
    pub hook_timeout: Duration,
    /// How long the hooks-live probe may take.
    pub probe_timeout: Duration,
    /// How long to keep re-attaching after the session drops.
    pub reattach_for: Duration,
    /// Run the agent and the gate in the kernel sandbox (`--sandbox on`, the default).
    pub sandbox: bool,
    /// runplane's credential files on this machine, hidden from the agent.
    pub credentials: Vec<PathBuf>,
}

/// Why the worker stopped without a finished run.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// The session could not be opened or broke for good.
    #[error("session: {0}")]
    Session(#[from] tonic::Status),
    /// Something on this machine failed (the socket, the agent, git).
    #[error("{0}")]
    Local(String),
}

/// The agent while it runs.
struct Running {
    child: Child,
    _group: agent::GroupGuard,
}

/// Stops the agent if it runs.
async fn stop(agent: &mut Option<Running>) {
    if let Some(mut running) = agent.take() {
        agent::stop(&mut running.child, STOP_GRACE).await;
    }
}

/// Runs the whole run; returns the finished run.
pub async fn work(channel: Channel, config: WorkConfig) -> Result<pb::Run, WorkError> {
    let workspace = Workspace::new(&config.workspace);
    let start = workspace
        .start()
        .await
        .map_err(|e| WorkError::Local(format!("the workspace must be a git working tree: {e}")))?;
    let attach = pb::Attach {
        run_id: config.run_id.clone(),
        worker_id: format!("runplane-work-{}", std::process::id()),
        token: config.worker_token.clone(),
        workspace_root: config.workspace.display().to_string(),
    };
    let (mut link, attached) = Link::open(channel, attach, config.reattach_for).await?;

    let (hooks, mut notes, mut starts) = Hooks::new(config.run_id.clone());
    let socket_dir = tempfile::Builder::new()
        .prefix("runplane-hooks")
        .tempdir()
        .map_err(|e| WorkError::Local(format!("hook socket directory: {e}")))?;
    let server = HookServer::bind(&socket_dir.path().join("hooks.sock"), hooks.handler())
        .map_err(|e| WorkError::Local(format!("hook socket: {e}")))?;
    let hook_command = HookCommand::new(
        &config.runplane,
        config.agent,
        server.path(),
        config.hook_timeout,
    );
    let launch =
        launch::prepare(config.agent, &config.command, &hook_command).map_err(WorkError::Local)?;
    let policy = attached.sandbox.map(sandbox_policy).unwrap_or_default();
    let facts = Facts {
        workspace: &config.workspace,
        private: socket_dir.path(),
        agent: config.agent,
        launch: &launch,
        credentials: config.credentials.clone(),
        runplane: &config.runplane,
    };
    // Without a launcher (the sandbox could not be prepared) nothing is ever started.
    let (launcher, mut refusals, containment) = match contain(&config, &policy, facts).await {
        Ok((launcher, refusals, containment)) => {
            link.send(sandbox_report(containment.as_ref()));
            (Some(launcher), refusals, containment)
        }
        Err(why) => {
            link.send(failed(why));
            (None, tokio::sync::mpsc::unbounded_channel().1, None)
        }
    };
    let mut agent = match &launcher {
        Some(launcher) => match start_agent(&config, &launch, &mut starts, launcher).await {
            Ok(running) => Some(running),
            Err(why) => {
                link.send(failed(why));
                None
            }
        },
        None => None,
    };
    let sandboxed = containment.is_some();
    // What the probe tried (its model address is refused by design) is not the agent's.
    while refusals.try_recv().is_ok() {}
    let mut stopping = Signals::new().map_err(|e| WorkError::Local(format!("signals: {e}")))?;
    let mut gate: Option<GateOutcome> = None;
    let mut delivered: Option<pb::DeliveryResult> = None;
    loop {
        tokio::select! {
            exited = wait(&mut agent) => {
                agent = None;
                let success = exited.map(|s| s.success()).unwrap_or(false);
                let status = if success { pb::RunStatus::Completed } else { pb::RunStatus::Failed };
                link.send(In::Complete(pb::RunComplete {
                    status: status as i32,
                    error: if success { String::new() } else { "the agent exited with an error".into() },
                    output: hooks.last_message(),
                }));
            }
            Some(refusal) = refusals.recv() => {
                link.send(egress_refused(refusal, hooks.running_call()));
            }
            Some(note) = notes.recv() => match note {
                Note::Send(message) => {
                    // Inside the sandbox, a result that shows its refusals is followed by
                    // them; outside, the same words are the user's own permissions.
                    let denied = if sandboxed { kernel_denials(&message) } else { Vec::new() };
                    link.send(message);
                    denied.into_iter().for_each(|report| link.send(report));
                }
                Note::Unjudged(why) => {
                    stop(&mut agent).await;
                    link.send(failed(why));
                }
            },
            signal = stopping.recv() => {
                // The first SIGINT or SIGTERM ends the run (failed, saying why) with the
                // agent stopped; a second one leaves at once.
                if agent.is_none() {
                    return Err(WorkError::Local(format!("stopped by {signal}")));
                }
                stop(&mut agent).await;
                link.send(failed(format!("runplane work was stopped by {signal}")));
            }
            received = link.next() => match received? {
                Out::ToolCallResponse(response) => hooks.decided(response),
                Out::Error(error) => {
                    tracing::warn!(call_id = %error.call_id, code = %error.code, message = %error.message, "runplane refused a message");
                    hooks.refused(&error);
                }
                // The run is over: stop the agent (whatever it is doing, a held hook
                // included) and report how it ended; the server sends nothing more.
                Out::Cancel(cancel) => {
                    stop(&mut agent).await;
                    return Ok(ended(&config.run_id, pb::RunStatus::Cancelled as i32, cancel.reason));
                }
                Out::Terminate(terminate) => {
                    stop(&mut agent).await;
                    return Ok(ended(&config.run_id, terminate.status, terminate.reason));
                }
                Out::QualityGateRequest(request) => {
                    let outcome = GateOutcome::run(request, &config, launcher.as_ref()).await;
                    link.send(In::QualityGateResult(outcome.result.clone()));
                    gate = Some(outcome);
                }
                Out::DeliverRequest(request) => {
                    // A repeated request (after a re-attach) gets the same result: the
                    // work is delivered once.
                    let result = match &delivered {
                        Some(result) => result.clone(),
                        None => deliver(&workspace, &start, &request, &config).await,
                    };
                    link.send(In::DeliveryResult(result.clone()));
                    delivered = Some(result);
                }
                Out::Finished(finished) => {
                    let run = finished.run.unwrap_or_default();
                    let rollback = gate.as_ref().is_some_and(|g| g.rollback_on_fail)
                        && run.status == pb::RunStatus::Failed as i32
                        && run.error.starts_with("quality gate failed");
                    stop(&mut agent).await;
                    if rollback {
                        workspace.restore(&start).await.map_err(|e| WorkError::Local(format!("rollback: {e}")))?;
                    }
                    return Ok(run);
                }
                _ => {}
            },
        }
    }
}

/// SIGINT and SIGTERM, as they arrive.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// The next one's name.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}

/// Proves the hooks are live, then starts the agent.
async fn start_agent(
    config: &WorkConfig,
    launch: &Launch,
    starts: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    launcher: &Launcher,
) -> Result<Running, String> {
    probe::hooks_live(
        config.agent,
        launch,
        &config.workspace,
        starts,
        config.probe_timeout,
        launcher,
    )
    .await?;
    let child = agent::spawn(launch, &config.workspace, Stdio::inherit(), launcher)
        .map_err(|e| format!("cannot start {:?}: {e}", config.command.first()))?;
    let group = agent::GroupGuard::new(&child);
    Ok(Running {
        child,
        _group: group,
    })
}

/// The agent's exit; pending forever when it is not running.
async fn wait(agent: &mut Option<Running>) -> std::io::Result<std::process::ExitStatus> {
    match agent {
        Some(running) => running.child.wait().await,
        None => std::future::pending().await,
    }
}

fn failed(why: String) -> In {
    In::Complete(pb::RunComplete {
        status: pb::RunStatus::Failed as i32,
        error: why,
        output: String::new(),
    })
}

/// A gate run and whether a failure rolls the workspace back.
struct GateOutcome {
    result: pb::QualityGateResult,
    rollback_on_fail: bool,
}

impl GateOutcome {
    async fn run(
        gate: pb::QualityGateRequest,
        config: &WorkConfig,
        launcher: Option<&Launcher>,
    ) -> GateOutcome {
        let request = GateRequest {
            run_tests: gate.run_tests,
            run_lint: gate.run_lint,
            test_command: gate.test_command,
            lint_command: gate.lint_command,
        };
        let outcome = match launcher {
            Some(launcher) => run_gate(&request, &config.gate, &config.workspace, launcher).await,
            None => super::gate::GateOutcome {
                error: "the gate cannot run: the agent's sandbox could not be prepared".into(),
                ..Default::default()
            },
        };
        GateOutcome {
            result: pb::QualityGateResult {
                tests_passed: outcome.tests_passed,
                lint_passed: outcome.lint_passed,
                test_output: tail(outcome.test_output),
                lint_output: tail(outcome.lint_output),
                error: outcome.error,
            },
            rollback_on_fail: gate.rollback_on_fail,
        }
    }
}

/// The run as a cancel or terminate left it (the server sends no `finished` then).
fn ended(run_id: &str, status: i32, reason: String) -> pb::Run {
    pb::Run {
        id: run_id.to_string(),
        status,
        error: reason,
        ..pb::Run::default()
    }
}

async fn deliver(
    workspace: &Workspace,
    start: &Start,
    request: &pb::DeliverRequest,
    config: &WorkConfig,
) -> pb::DeliveryResult {
    let mode = match pb::DeliverMode::try_from(request.mode) {
        Ok(pb::DeliverMode::Patch) => DeliverMode::Patch,
        Ok(pb::DeliverMode::CommitLocal) => DeliverMode::CommitLocal,
        Ok(pb::DeliverMode::Branch) => DeliverMode::Branch,
        Ok(pb::DeliverMode::Pr) => DeliverMode::Pr,
        _ => {
            return pb::DeliveryResult {
                error: format!("unknown delivery mode {}", request.mode),
                ..Default::default()
            }
        }
    };
    match workspace
        .deliver(
            start,
            mode,
            &request.commit_message,
            &config.run_id,
            &config.remote,
        )
        .await
    {
        Ok(done) => pb::DeliveryResult {
            success: true,
            patch_path: done
                .patch_path
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            commit_hash: done.commit.unwrap_or_default(),
            branch_name: done.branch.unwrap_or_default(),
            pr_url: done.pr_url.unwrap_or_default(),
            error: String::new(),
        },
        Err(err) => pb::DeliveryResult {
            error: err.to_string(),
            ..Default::default()
        },
    }
}

/// The run's sandbox, or none with `--sandbox off` (refused when the profile requires
/// it); the launcher that starts processes in it, and the proxy's refusals.
async fn contain(
    config: &WorkConfig,
    policy: &SandboxPolicy,
    facts: Facts<'_>,
) -> Result<
    (
        Launcher,
        tokio::sync::mpsc::UnboundedReceiver<Refusal>,
        Option<Containment>,
    ),
    String,
> {
    if !config.sandbox {
        if policy.required {
            return Err(format!(
                "the run's profile {:?} requires the agent's sandbox: runplane work \
                 --sandbox off is refused",
                policy.profile
            ));
        }
        let launcher = Launcher {
            runplane: config.runplane.clone(),
            sandbox: None,
            env: Vec::new(),
        };
        let (_, none) = tokio::sync::mpsc::unbounded_channel();
        return Ok((launcher, none, None));
    }
    let (containment, refusals) = Containment::prepare(policy, facts).await?;
    let launcher = Launcher {
        runplane: config.runplane.clone(),
        sandbox: Some(containment.spec.clone()),
        env: containment.env.clone(),
    };
    Ok((launcher, refusals, Some(containment)))
}
