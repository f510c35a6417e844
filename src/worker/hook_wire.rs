//! Between `runplane hook` (the command the agent runs at each hook) and `runplane work`
//! (the worker holding the run's session): one JSON line each way over a unix socket, and
//! what the hook then prints for the agent.
//!
//! The hook is a pipe with one rule: whatever goes wrong before a tool runs, the tool is
//! blocked. Claude Code and Codex both block a tool when a `PreToolUse` hook exits 2 with
//! text on stderr, whatever else happened; an allow or deny is JSON on stdout, exit 0.
//! Codex fails open on every other hook failure (a crash, a timeout, bad output), so the
//! hook must never fail that way: it keeps its own deadline, below the agent's timeout.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version of the line format, so a worker and a hook of different builds refuse each
/// other instead of misreading.
pub const WIRE_VERSION: u32 = 1;

/// The agent whose hook this is: it decides the output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Agent {
    /// Claude Code.
    ClaudeCode,
    /// OpenAI Codex.
    Codex,
}

impl Agent {
    /// The name `--agent` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
        }
    }
}

impl std::str::FromStr for Agent {
    type Err = String;

    fn from_str(s: &str) -> Result<Agent, String> {
        match s {
            "claude-code" => Ok(Agent::ClaudeCode),
            "codex" => Ok(Agent::Codex),
            other => Err(format!(
                "unknown agent {other:?} (expected claude-code or codex)"
            )),
        }
    }
}

/// What the hook sends the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookRequest {
    /// `WIRE_VERSION`.
    pub v: u32,
    /// Which agent ran the hook.
    pub agent: Agent,
    /// The agent's hook payload, as it came.
    pub payload: Value,
}

/// The worker's answer to a `PreToolUse`; other events get `{"ok": true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookAnswer {
    /// `allow` or `deny` (an ask is held by the worker until it is one of these).
    #[serde(default)]
    pub decision: Option<String>,
    /// runplane's reason: the model reads it.
    #[serde(default)]
    pub reason: String,
}

/// What the hook prints and exits with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookOutput {
    /// For the agent, on stdout.
    pub stdout: String,
    /// For the agent (and the model, on a block), on stderr.
    pub stderr: String,
    /// The exit code.
    pub code: u8,
}

/// The hook's event, from its payload.
pub fn event_of(payload: &Value) -> &str {
    payload
        .get("hook_event_name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Exit code that blocks a tool in both agents (with text on stderr).
const BLOCK: u8 = 2;

/// The output for the worker's answer to `event` from `agent`. Codex's PreToolUse can
/// only block: an allow is no output at all (its schema has no "allow" that means more
/// than "go on", and a field it does not know would fail open).
pub fn render(agent: Agent, event: &str, answer: &HookAnswer) -> HookOutput {
    if event != "PreToolUse" {
        return HookOutput {
            stdout: String::new(),
            stderr: String::new(),
            code: 0,
        };
    }
    match answer.decision.as_deref() {
        Some("allow") if agent == Agent::Codex => HookOutput {
            stdout: String::new(),
            stderr: String::new(),
            code: 0,
        },
        Some(decision @ ("allow" | "deny")) => HookOutput {
            stdout: serde_json::json!({
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": decision,
                    "permissionDecisionReason": answer.reason,
                }
            })
            .to_string(),
            stderr: String::new(),
            code: 0,
        },
        other => failure(
            event,
            &format!("the worker answered {other:?}, not allow or deny"),
        ),
    }
}

/// The output when the hook could not get an answer: a `PreToolUse` is blocked; other
/// events carry on (blocking a `Stop` would keep the agent going, and a result that
/// could not be reported cannot be undone by blocking).
pub fn failure(event: &str, why: &str) -> HookOutput {
    let blocks = event == "PreToolUse" || event.is_empty();
    HookOutput {
        stdout: String::new(),
        stderr: if blocks {
            format!("runplane: {why}; the tool is blocked")
        } else {
            format!("runplane: {why}")
        },
        code: if blocks { BLOCK } else { 0 },
    }
}
