//! `runplane work`'s run: attach to the run, start the agent with runplane's hooks, answer
//! each hook from the run's session, and do what runplane asks — stop the agent, run the
//! gate, roll back, deliver — until the run is finished.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::agent;
use super::gate::{run_gate, GateDefaults, GateRequest};
use super::git::{Start, Workspace};
use super::hook_server::{Handler, HookServer};
use super::hook_wire::{event_of, Agent, HookAnswer, HookRequest};
use super::tools::tool_call;
use crate::domain::DeliverMode;
use crate::grpc::pb;
use crate::grpc::pb::coordinator_message::Message as Out;
use crate::grpc::pb::worker_message::Message as In;

/// How long the agent has to stop after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// Largest output of a tool reported as its result (the server caps stored text at this).
const MAX_OUTPUT_BYTES: usize = 64 * 1024;

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
    /// The `runplane` executable the agent's hooks run.
    pub hook_program: PathBuf,
    /// How long a hook may wait for its answer (an ask included).
    pub hook_timeout: Duration,
    /// How long the hooks-live probe may take.
    pub probe_timeout: Duration,
}

/// Why the worker stopped without a finished run.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// The session could not be opened or broke.
    #[error("session: {0}")]
    Session(#[from] tonic::Status),
    /// Something on this machine failed (the socket, the agent, git).
    #[error("{0}")]
    Local(String),
}

/// Where the decisions on each call go while its hook waits, by call id. A channel, not a
/// one-shot: an ask's final decision may follow its first answer at once, and must find
/// the hook still listening.
type Waiting = Arc<Mutex<HashMap<String, mpsc::UnboundedSender<pb::ToolCallResponse>>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn message(message: In) -> pb::WorkerMessage {
    pb::WorkerMessage {
        message: Some(message),
    }
}

/// Runs the whole run; returns the finished run.
pub async fn work(channel: Channel, config: WorkConfig) -> Result<pb::Run, WorkError> {
    let workspace = Workspace::new(&config.workspace);
    let start = workspace
        .start()
        .await
        .map_err(|e| WorkError::Local(format!("the workspace must be a git working tree: {e}")))?;
    let (tx, rx) = mpsc::channel(64);
    let send = |m| {
        let tx = tx.clone();
        async move {
            tx.send(message(m))
                .await
                .map_err(|_| WorkError::Local("the session is closed".into()))
        }
    };
    send(In::Attach(pb::Attach {
        run_id: config.run_id.clone(),
        worker_id: format!("runplane-work-{}", std::process::id()),
        token: config.worker_token.clone(),
        workspace_root: config.workspace.display().to_string(),
    }))
    .await?;
    let mut inbound = pb::worker_service_client::WorkerServiceClient::new(channel)
        .session(ReceiverStream::new(rx))
        .await?
        .into_inner();
    match inbound.message().await?.and_then(|m| m.message) {
        Some(Out::Attached(_)) => {}
        other => {
            return Err(WorkError::Local(format!(
                "expected attached, got {other:?}"
            )))
        }
    }

    let waiting: Waiting = Arc::default();
    let last_message = Arc::new(Mutex::new(String::new()));
    let socket_dir = tempfile::Builder::new()
        .prefix("runplane-hooks")
        .tempdir()
        .map_err(|e| WorkError::Local(format!("hook socket directory: {e}")))?;
    let handler = hook_handler(
        tx.clone(),
        Arc::clone(&waiting),
        Arc::clone(&last_message),
        config.run_id.clone(),
    );
    let server = HookServer::bind(&socket_dir.path().join("hooks.sock"), handler)
        .map_err(|e| WorkError::Local(format!("hook socket: {e}")))?;
    let hook_command = format!(
        "'{}' hook --agent claude-code --socket '{}' --deadline {}",
        config.hook_program.display(),
        server.path().display(),
        config.hook_timeout.as_secs()
    );
    let settings = agent::claude_settings(&hook_command, config.hook_timeout);
    let line =
        agent::command_line(config.agent, &config.command, &settings).map_err(WorkError::Local)?;
    let mut child = agent::spawn(&line, &config.workspace)
        .map_err(|e| WorkError::Local(format!("cannot start {:?}: {e}", config.command.first())))?;
    let _group = agent::GroupGuard::new(&child);
    let mut agent_running = true;
    let mut rollback_on_fail = false;
    loop {
        tokio::select! {
            exited = child.wait(), if agent_running => {
                agent_running = false;
                let success = exited.map(|s| s.success()).unwrap_or(false);
                let status = if success { pb::RunStatus::Completed } else { pb::RunStatus::Failed };
                let output = lock(&last_message).clone();
                send(In::Complete(pb::RunComplete {
                    status: status as i32,
                    error: if success { String::new() } else { "the agent exited with an error".into() },
                    output,
                })).await?;
            }
            received = inbound.message() => {
                let Some(out) = received?.and_then(|m| m.message) else {
                    return Err(WorkError::Local("the session ended before the run finished".into()));
                };
                match out {
                    Out::ToolCallResponse(response) => {
                        if let Some(waiter) = lock(&waiting).get(&response.call_id) {
                            let _ = waiter.send(response);
                        }
                    }
                    // The run is over: stop the agent (whatever it is doing, a held hook
                    // included) and report how it ended; the server sends nothing more.
                    Out::Cancel(cancel) => {
                        stop_agent(&mut child, agent_running).await;
                        return Ok(ended(&config.run_id, pb::RunStatus::Cancelled as i32, cancel.reason));
                    }
                    Out::Terminate(terminate) => {
                        stop_agent(&mut child, agent_running).await;
                        return Ok(ended(&config.run_id, terminate.status, terminate.reason));
                    }
                    Out::QualityGateRequest(gate) => {
                        rollback_on_fail = gate.rollback_on_fail;
                        let request = GateRequest {
                            run_tests: gate.run_tests,
                            run_lint: gate.run_lint,
                            test_command: gate.test_command,
                            lint_command: gate.lint_command,
                        };
                        let outcome = run_gate(&request, &config.gate, &config.workspace).await;
                        send(In::QualityGateResult(pb::QualityGateResult {
                            tests_passed: outcome.tests_passed,
                            lint_passed: outcome.lint_passed,
                            test_output: tail(outcome.test_output),
                            lint_output: tail(outcome.lint_output),
                            error: outcome.error,
                        })).await?;
                    }
                    Out::DeliverRequest(request) => {
                        let result = deliver(&workspace, &start, &request, &config).await;
                        send(In::DeliveryResult(result)).await?;
                    }
                    Out::Finished(finished) => {
                        let run = finished.run.unwrap_or_default();
                        if rollback_on_fail && run.status == pb::RunStatus::Failed as i32 && run.error.starts_with("quality gate failed") {
                            workspace.restore(&start).await.map_err(|e| WorkError::Local(format!("rollback: {e}")))?;
                        }
                        stop_agent(&mut child, agent_running).await;
                        return Ok(run);
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Answers each hook: a tool call is asked on the session and held until its final
/// decision; a result is reported; a stop leaves the agent's last message.
fn hook_handler(
    tx: mpsc::Sender<pb::WorkerMessage>,
    waiting: Waiting,
    last_message: Arc<Mutex<String>>,
    run_id: String,
) -> Handler {
    Arc::new(move |request: HookRequest| {
        let tx = tx.clone();
        let waiting = Arc::clone(&waiting);
        let last_message = Arc::clone(&last_message);
        let run_id = run_id.clone();
        Box::pin(async move {
            let payload = request.payload;
            let ok = HookAnswer {
                decision: None,
                reason: String::new(),
            };
            match event_of(&payload) {
                "PreToolUse" => decide(&tx, &waiting, &run_id, &payload).await,
                event @ ("PostToolUse" | "PostToolUseFailure") => {
                    let call = tool_call(&payload).map_err(|e| e.to_string())?;
                    let output = match payload
                        .get("tool_response")
                        .or_else(|| payload.get("error"))
                    {
                        Some(Value::String(text)) => text.clone(),
                        Some(other) => other.to_string(),
                        None => String::new(),
                    };
                    let duration = payload
                        .get("duration_ms")
                        .and_then(Value::as_u64)
                        .map(|ms| prost_types::Duration {
                            seconds: (ms / 1000) as i64,
                            nanos: ((ms % 1000) * 1_000_000) as i32,
                        });
                    let result = pb::ToolCallResult {
                        run_id,
                        call_id: call.call_id,
                        success: event == "PostToolUse",
                        output: tail(output),
                        error: String::new(),
                        cost_usd: 0.0,
                        duration,
                    };
                    tx.send(message(In::ToolCallResult(result)))
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok(ok)
                }
                "Stop" => {
                    if let Some(text) = payload
                        .get("last_assistant_message")
                        .and_then(Value::as_str)
                    {
                        *lock(&last_message) = text.to_string();
                    }
                    Ok(ok)
                }
                _ => Ok(ok),
            }
        })
    })
}

/// Asks runplane about a tool call and waits for the final decision (an ask is held).
async fn decide(
    tx: &mpsc::Sender<pb::WorkerMessage>,
    waiting: &Waiting,
    run_id: &str,
    payload: &Value,
) -> Result<HookAnswer, String> {
    let call = tool_call(payload).map_err(|e| e.to_string())?;
    let request = pb::ToolCallRequest::from(&crate::domain::ToolCallRequest {
        run_id: run_id.to_string(),
        ..call
    });
    let call_id = request.call_id.clone();
    let (answers, mut decisions) = mpsc::unbounded_channel();
    lock(waiting).insert(call_id.clone(), answers);
    let sent = tx.send(message(In::ToolCallRequest(request))).await;
    let mut response = None;
    if sent.is_ok() {
        // An ask is followed by the final decision once an operator answers (or it times out).
        while let Some(next) = decisions.recv().await {
            let asked = next.decision == pb::Decision::Ask as i32;
            response = Some(next);
            if !asked {
                break;
            }
        }
    }
    lock(waiting).remove(&call_id);
    let response = response.ok_or_else(|| "the session ended before the decision".to_string())?;
    // Anything but a final allow is a deny: an unknown value, or an ask with no final answer.
    let verdict = if response.decision == pb::Decision::Allow as i32 {
        "allow"
    } else {
        "deny"
    };
    Ok(answer_with(verdict, response.reason))
}

async fn stop_agent(child: &mut tokio::process::Child, running: bool) {
    if running {
        agent::stop(child, STOP_GRACE).await;
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

fn answer_with(decision: &str, reason: String) -> HookAnswer {
    HookAnswer {
        decision: Some(decision.to_string()),
        reason,
    }
}

/// The last `MAX_OUTPUT_BYTES` of a text, cut at a character boundary.
fn tail(text: String) -> String {
    if text.len() <= MAX_OUTPUT_BYTES {
        return text;
    }
    let mut cut = text.len() - MAX_OUTPUT_BYTES;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..].to_string()
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
