//! The agent as a child process: its hook settings, written for it (the user's own
//! settings are neither changed nor read), and stopping it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::json;
use tokio::process::{Child, Command};

use super::hook_wire::Agent;

/// The hook events runplane listens to, and whether a failed hook must block.
const CLAUDE_EVENTS: [(&str, bool); 4] = [
    ("PreToolUse", true),
    ("PostToolUse", false),
    ("PostToolUseFailure", false),
    ("Stop", false),
];

/// Claude Code's settings: every event runs `hook_command`. `onFailure: block` makes a
/// PreToolUse hook that fails in any way block its tool (without it, Claude Code lets the
/// tool run), and the agent's own timeout sits above the hook's deadline, so the hook
/// always answers itself.
pub fn claude_settings(hook_command: &str, hook_timeout: Duration) -> serde_json::Value {
    let timeout = hook_timeout.as_secs() + 30;
    let mut hooks = serde_json::Map::new();
    for (event, blocks) in CLAUDE_EVENTS {
        let mut handler = json!({"type": "command", "command": hook_command, "timeout": timeout});
        if blocks {
            handler["onFailure"] = json!("block");
        }
        hooks.insert(event.into(), json!([{"matcher": "*", "hooks": [handler]}]));
    }
    json!({ "hooks": hooks })
}

/// The agent's command line with runplane's hooks: for Claude Code, the settings given
/// inline (a file the agent could rewrite would be a way out) and no other settings
/// sources (a user's or project's `disableAllHooks` would switch the hooks off, and a
/// project file the agent writes mid-run is reloaded).
pub fn command_line(
    agent: Agent,
    command: &[String],
    settings: &serde_json::Value,
) -> Result<Vec<String>, String> {
    let (program, rest) = command
        .split_first()
        .ok_or_else(|| "no agent command given (after --)".to_string())?;
    let bypasses = ["--bare", "--safe-mode", "--setting-sources", "--settings"];
    if let Some(flag) = rest
        .iter()
        .find(|a| bypasses.iter().any(|b| a.starts_with(b)))
    {
        return Err(format!(
            "{flag} would skip or replace runplane's hooks; leave it out (runplane work sets the \
             agent's settings itself)"
        ));
    }
    match agent {
        Agent::ClaudeCode => {
            let mut line = vec![program.clone()];
            line.extend(rest.iter().cloned());
            line.extend([
                "--settings".to_string(),
                settings.to_string(),
                "--setting-sources".to_string(),
                String::new(),
            ]);
            Ok(line)
        }
        Agent::Codex => Err("codex is not wrapped yet: only claude-code".into()),
    }
}

/// Starts the agent in `workspace`, in a process group of its own so that stopping it
/// stops everything it started. stdin is closed; its output goes where ours goes.
pub fn spawn(line: &[String], workspace: &Path) -> std::io::Result<Child> {
    let (program, args) = line
        .split_first()
        .ok_or_else(|| std::io::Error::other("empty agent command"))?;
    Command::new(program)
        .args(args)
        .current_dir(workspace)
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
}

/// Kills the agent's whole process group when dropped: however the worker ends (an error
/// included), nothing the agent started outlives it.
pub struct GroupGuard(Option<Pid>);

impl GroupGuard {
    /// Guards the group `child` leads.
    pub fn new(child: &Child) -> GroupGuard {
        GroupGuard(
            child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .map(Pid::from_raw),
        )
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            // Already gone is fine.
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

/// Stops the agent: SIGTERM to its group, then SIGKILL after `grace`.
pub async fn stop(child: &mut Child, grace: Duration) {
    let Some(group) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
    else {
        return; // already reaped
    };
    let _ = killpg(group, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = child.wait().await;
    }
}
