//! `runplane hook`: the command an agent runs at each hook. It passes the hook's payload
//! to the worker (`runplane work`) over its unix socket and prints the worker's answer the
//! way the agent reads it; if anything goes wrong before a tool runs, the tool is blocked
//! (`worker::hook_wire` says how, and why every failure must take that path).

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;

use crate::worker::hook_wire::{
    event_of, failure, render, Agent, HookAnswer, HookOutput, HookRequest, WIRE_VERSION,
};

/// Largest payload read from stdin: a tool's whole input (a file's new content, say).
const MAX_PAYLOAD_BYTES: u64 = 16 * 1024 * 1024;

/// Flags of `runplane hook`; `runplane work` writes them into the agent's hook settings.
#[derive(Debug, Clone, Args)]
pub struct HookArgs {
    /// The agent running the hook: claude-code or codex.
    #[arg(long, value_parser = |s: &str| s.parse::<Agent>())]
    pub agent: Agent,
    /// The worker's unix socket.
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// Seconds to wait for the worker's answer before blocking the tool; below the
    /// agent's own hook timeout, so the hook always answers itself.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub deadline: f64,
}

/// Runs the hook on this process's stdin, stdout and stderr.
pub fn run(args: HookArgs) -> ExitCode {
    let mut text = String::new();
    let read = std::io::stdin()
        .take(MAX_PAYLOAD_BYTES)
        .read_to_string(&mut text);
    let output = match read {
        Err(err) => failure("", &format!("cannot read the hook payload: {err}")),
        Ok(_) => match serde_json::from_str(&text) {
            Err(err) => failure("", &format!("the hook payload is not JSON: {err}")),
            Ok(payload) => ask_worker(&args, payload),
        },
    };
    print!("{}", output.stdout);
    if !output.stderr.is_empty() {
        eprintln!("{}", output.stderr);
    }
    ExitCode::from(output.code)
}

fn ask_worker(args: &HookArgs, payload: serde_json::Value) -> HookOutput {
    let event = event_of(&payload).to_string();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return failure(&event, &format!("cannot start the async runtime: {err}")),
    };
    let deadline = Duration::try_from_secs_f64(args.deadline).unwrap_or(Duration::from_secs(60));
    let request = HookRequest {
        v: WIRE_VERSION,
        agent: args.agent,
        payload,
    };
    let exchange = exchange(&args.socket, &request);
    match runtime.block_on(async { tokio::time::timeout(deadline, exchange).await }) {
        Ok(Ok(answer)) => render(args.agent, &event, &answer),
        Ok(Err(why)) => failure(&event, &why),
        Err(_) => failure(
            &event,
            &format!(
                "no answer from the worker within {} s",
                deadline.as_secs_f64()
            ),
        ),
    }
}

/// One line out, one line back.
async fn exchange(socket: &std::path::Path, request: &HookRequest) -> Result<HookAnswer, String> {
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|err| format!("cannot reach the worker at {}: {err}", socket.display()))?;
    let (read, mut write) = stream.into_split();
    let mut line = serde_json::to_string(request).map_err(|err| err.to_string())?;
    line.push('\n');
    write
        .write_all(line.as_bytes())
        .await
        .map_err(|err| format!("cannot send to the worker: {err}"))?;
    let mut answer = String::new();
    BufReader::new(read)
        .read_line(&mut answer)
        .await
        .map_err(|err| format!("cannot read the worker's answer: {err}"))?;
    if answer.is_empty() {
        return Err("the worker closed the connection without answering".into());
    }
    serde_json::from_str(&answer).map_err(|err| format!("the worker's answer is not valid: {err}"))
}
