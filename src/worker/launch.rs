//! How each agent is started under runplane: its hook settings, written for it (the
//! user's own settings are neither changed nor relied on), its command line, and the
//! probe form of both that proves the hooks are live before the agent may act.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use super::hook_wire::Agent;
use super::{claude, codex};

/// The hook events runplane listens to, and whether a failed hook must block its tool.
/// `SessionStart` runs before the agent's first model request in both agents (measured),
/// so its arrival proves the hooks are live.
pub const EVENTS: [(&str, bool); 5] = [
    ("SessionStart", false),
    ("PreToolUse", true),
    ("PostToolUse", false),
    ("PostToolUseFailure", false),
    ("Stop", false),
];

/// An agent ready to start: its command line and the environment it needs.
#[derive(Debug)]
pub struct Launch {
    /// Program first.
    pub line: Vec<String>,
    /// Variables set for the agent.
    pub env: Vec<(String, OsString)>,
    /// Variables removed from the agent's environment.
    pub env_remove: Vec<String>,
    /// Directories the agent's configuration lives in while it runs (Codex's
    /// `CODEX_HOME`); removed when the launch is dropped.
    pub _config: Option<tempfile::TempDir>,
}

/// What the hooks run and how long the agent lets them.
#[derive(Debug, Clone)]
pub struct HookCommand {
    /// The shell command the agent runs at each hook.
    pub command: String,
    /// The agent's own timeout for a hook, in seconds: above the hook's deadline, so the
    /// hook always answers itself.
    pub timeout_secs: u64,
}

impl HookCommand {
    /// `runplane hook` for `agent` on `socket`, with `deadline` to get its answer.
    pub fn new(program: &Path, agent: Agent, socket: &Path, deadline: Duration) -> HookCommand {
        HookCommand {
            command: format!(
                "{} hook --agent {} --socket {} --deadline {}",
                shell_quote(&program.display().to_string()),
                agent.as_str(),
                shell_quote(&socket.display().to_string()),
                deadline.as_secs()
            ),
            timeout_secs: deadline.as_secs() + 30,
        }
    }
}

/// `text` as one word for `sh`.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The agent's launch with runplane's hooks, from the user's command line.
pub fn prepare(agent: Agent, command: &[String], hooks: &HookCommand) -> Result<Launch, String> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| "no agent command given (after --)".to_string())?;
    match agent {
        Agent::ClaudeCode => claude::launch(program, args, hooks),
        Agent::Codex => codex::launch(program, args, hooks),
    }
}

/// `launch` changed so that the agent cannot act: it has no model to talk to (`model`
/// is an address that accepts and never answers) and, where the agent allows, no tools.
/// Everything that decides whether the hooks run is left as it is.
pub fn probe(agent: Agent, launch: &Launch, model: std::net::SocketAddr) -> Launch {
    match agent {
        Agent::ClaudeCode => claude::probe(launch, model),
        Agent::Codex => codex::probe(launch, model),
    }
}

/// What `runplane work --print-settings` shows: the settings runplane writes for the
/// agent and the command line it runs.
pub fn describe(agent: Agent, launch: &Launch) -> String {
    let mut text = match agent {
        Agent::ClaudeCode => claude::describe(launch),
        Agent::Codex => codex::describe(launch),
    };
    text.push_str("\ncommand line:\n");
    for word in &launch.line {
        text.push_str("  ");
        text.push_str(&shell_quote(word));
        text.push('\n');
    }
    text
}

/// Refuses an agent command line that holds one of `flags` (or `flag=value`).
pub fn refuse_flags(args: &[String], flags: &[&str], why: &str) -> Result<(), String> {
    match args.iter().find(|arg| {
        flags
            .iter()
            .any(|flag| arg == flag || arg.starts_with(&format!("{flag}=")))
    }) {
        Some(flag) => Err(format!("{flag} {why}; leave it out")),
        None => Ok(()),
    }
}
