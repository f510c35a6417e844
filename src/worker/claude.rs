//! Claude Code under runplane: the hooks are given inline to `--settings` (a file the
//! agent could rewrite would be a way out) with `--setting-sources ""` (a user's or
//! project's `disableAllHooks` would switch them off, and a project file the agent writes
//! mid-run is reloaded). `onFailure: block` makes a PreToolUse hook that fails in any way
//! block its tool; without it Claude Code lets the tool run.

use std::net::SocketAddr;

use serde_json::json;

use super::launch::{refuse_flags, HookCommand, Launch, EVENTS};

/// Flags that would skip or replace runplane's hooks.
const BYPASSES: [&str; 4] = ["--bare", "--safe-mode", "--settings", "--setting-sources"];

/// Variables that send Claude Code to another model provider; the probe removes them so
/// its dead model address is the only one.
const PROVIDER_SWITCHES: [&str; 3] = [
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY",
];

/// Claude Code's settings: every event runs the hook command.
pub fn settings(hooks: &HookCommand) -> serde_json::Value {
    let mut by_event = serde_json::Map::new();
    for (event, blocks) in EVENTS {
        let mut handler = json!({
            "type": "command",
            "command": hooks.command,
            "timeout": hooks.timeout_secs,
        });
        if blocks {
            handler["onFailure"] = json!("block");
        }
        by_event.insert(event.into(), json!([{"matcher": "*", "hooks": [handler]}]));
    }
    json!({ "hooks": by_event })
}

pub(super) fn launch(
    program: &str,
    args: &[String],
    hooks: &HookCommand,
) -> Result<Launch, String> {
    refuse_flags(
        args,
        &BYPASSES,
        "would skip or replace runplane's hooks (runplane work sets the agent's settings itself)",
    )?;
    let mut line = vec![program.to_string()];
    line.extend(args.iter().cloned());
    line.extend([
        "--settings".to_string(),
        settings(hooks).to_string(),
        "--setting-sources".to_string(),
        String::new(),
    ]);
    Ok(Launch {
        line,
        env: Vec::new(),
        env_remove: Vec::new(),
        _config: None,
    })
}

/// No tools at all (`--tools ""`, last, so it wins) and a model address that never answers.
pub(super) fn probe(launch: &Launch, model: SocketAddr) -> Launch {
    let mut line = launch.line.clone();
    line.extend(["--tools".to_string(), String::new()]);
    let mut env = launch.env.clone();
    env.push((
        "ANTHROPIC_BASE_URL".into(),
        format!("http://{model}").into(),
    ));
    let mut env_remove = launch.env_remove.clone();
    env_remove.extend(PROVIDER_SWITCHES.iter().map(|v| v.to_string()));
    Launch {
        line,
        env,
        env_remove,
        _config: None,
    }
}

pub(super) fn describe(launch: &Launch) -> String {
    let settings = launch
        .line
        .iter()
        .position(|word| word == "--settings")
        .and_then(|at| launch.line.get(at + 1))
        .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_default();
    format!("Claude Code settings (given inline to --settings, with --setting-sources \"\"):\n{settings}\n")
}
