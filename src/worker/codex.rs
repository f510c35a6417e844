//! Codex under runplane. Codex runs only hooks the user has reviewed and trusted and
//! skips a new or changed one silently, so the worker gives each run a fresh `CODEX_HOME`
//! holding runplane's `hooks.json` (and a copy of the user's configuration with any hooks
//! or hook switch taken out), and starts `codex exec` with
//! `--dangerously-bypass-hook-trust`, Codex's documented switch for automation that vets
//! its hooks itself. Codex reads its hooks once at start, so a `hooks.json` the agent
//! rewrites mid-run changes nothing, and the directory is gone with the run.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::launch::{refuse_flags, HookCommand, Launch, EVENTS};

/// Codex's switch that runs hooks without persisted trust, for automation that vets
/// its hooks itself.
const TRUST_BYPASS: &str = "--dangerously-bypass-hook-trust";

/// Flags that would keep runplane's hooks from running.
const BYPASSES: [&str; 1] = ["--ignore-user-config"];

/// An option that switches hooks off or replaces them: `--disable hooks`, or a `-c`
/// override of `hooks…` or `features.hooks`.
fn hook_switch(args: &[String]) -> Option<String> {
    let value_of = |at: usize, flag: &str| -> Option<String> {
        let arg = &args[at];
        if arg == flag {
            args.get(at + 1).cloned()
        } else {
            arg.strip_prefix(&format!("{flag}=")).map(str::to_string)
        }
    };
    (0..args.len()).find_map(|at| {
        let disabled = value_of(at, "--disable").filter(|feature| feature == "hooks");
        let configured = ["-c", "--config"]
            .iter()
            .find_map(|flag| value_of(at, flag))
            .filter(|kv| kv.starts_with("hooks") || kv.starts_with("features.hooks"));
        disabled
            .or(configured)
            .map(|value| format!("{} {value}", args[at]))
    })
}

/// What is copied from the user's `CODEX_HOME`: configuration (with hooks taken out),
/// credentials and global instructions. Sessions, logs and caches stay behind.
fn copied(name: &str) -> bool {
    name == "config.toml"
        || name.ends_with(".config.toml")
        || name == "auth.json"
        || name == "AGENTS.md"
}

/// Codex's `hooks.json`: every event Codex knows that runplane listens to runs the hook
/// command. Codex has no `PostToolUseFailure` and no fail-closed option of its own: the
/// hook command never fails (it blocks by exiting 2 with a reason on stderr).
pub fn hooks_json(hooks: &HookCommand) -> serde_json::Value {
    let mut by_event = serde_json::Map::new();
    for (event, _) in EVENTS
        .iter()
        .filter(|(event, _)| *event != "PostToolUseFailure")
    {
        let handler =
            json!({"type": "command", "command": hooks.command, "timeout": hooks.timeout_secs});
        by_event.insert(
            (*event).into(),
            json!([{"matcher": "*", "hooks": [handler]}]),
        );
    }
    json!({ "hooks": by_event })
}

/// The user's `CODEX_HOME`: `$CODEX_HOME`, else `~/.codex`.
fn user_home() -> Option<PathBuf> {
    std::env::var_os("CODEX_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".codex")))
}

/// A configuration file without hooks: its `[hooks]` table and `features.hooks` go.
fn without_hooks(text: &str, name: &str) -> Result<String, String> {
    let mut table: toml::Table = toml::from_str(text)
        .map_err(|err| format!("the user's Codex {name} is not TOML: {err}"))?;
    table.remove("hooks");
    if let Some(toml::Value::Table(features)) = table.get_mut("features") {
        features.remove("hooks");
    }
    toml::to_string(&table).map_err(|err| format!("cannot write Codex {name}: {err}"))
}

/// A fresh `CODEX_HOME` with the configuration of `user_home` (the user's, when there is
/// one) and runplane's hooks.
pub fn fresh_home(
    user_home: Option<&Path>,
    hooks: &HookCommand,
) -> Result<tempfile::TempDir, String> {
    let home = tempfile::Builder::new()
        .prefix("runplane-codex-home")
        .tempdir()
        .map_err(|err| format!("cannot make a CODEX_HOME: {err}"))?;
    if let Some(source) = user_home.filter(|dir| dir.is_dir()) {
        let entries = std::fs::read_dir(source)
            .map_err(|err| format!("cannot read {}: {err}", source.display()))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !copied(&name) || !entry.path().is_file() {
                continue;
            }
            let read = |path: &Path| {
                std::fs::read(path).map_err(|err| format!("cannot read {}: {err}", path.display()))
            };
            let mut bytes = read(&entry.path())?;
            if name.ends_with("config.toml") {
                bytes = without_hooks(&String::from_utf8_lossy(&bytes), &name)?.into_bytes();
            }
            write(&home.path().join(&name), &bytes)?;
        }
    }
    write(
        &home.path().join("hooks.json"),
        hooks_json(hooks).to_string().as_bytes(),
    )?;
    Ok(home)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|err| format!("cannot write {}: {err}", path.display()))
}

pub(super) fn launch(
    program: &str,
    args: &[String],
    hooks: &HookCommand,
) -> Result<Launch, String> {
    let mut line = vec![program.to_string()];
    line.extend(args.iter().cloned());
    // The first `exec` is Codex's subcommand, also behind a launcher (`npx codex exec`).
    let Some(exec) = line.iter().position(|word| word == "exec") else {
        return Err(
            "runplane work runs Codex non-interactively: the command must be `codex exec …`".into(),
        );
    };
    let options = &line[exec + 1..];
    refuse_flags(
        options,
        &BYPASSES,
        "could keep runplane's hooks from running",
    )?;
    if let Some(switch) = hook_switch(options) {
        return Err(format!(
            "{switch} would switch off or replace runplane's hooks; leave it out"
        ));
    }
    let home = fresh_home(user_home().as_deref(), hooks)?;
    line.insert(exec + 1, TRUST_BYPASS.to_string());
    Ok(Launch {
        line,
        env: vec![("CODEX_HOME".into(), OsString::from(home.path()))],
        env_remove: Vec::new(),
        _config: Some(home),
    })
}

/// The same `CODEX_HOME` and flags, with a model provider at an address that never
/// answers (inserted after `exec`, so the user's options keep their places).
pub(super) fn probe(launch: &Launch, model: SocketAddr) -> Launch {
    let mut line = launch.line.clone();
    let provider = format!(
        "model_providers.runplane-probe={{name=\"runplane-probe\",base_url=\"http://{model}/v1\",wire_api=\"responses\"}}"
    );
    let at = line
        .iter()
        .position(|word| word == TRUST_BYPASS)
        .map_or(line.len(), |at| at + 1);
    line.splice(
        at..at,
        [
            "-c".to_string(),
            "model_provider=\"runplane-probe\"".to_string(),
            "-c".to_string(),
            provider,
        ],
    );
    Launch {
        line,
        env: launch.env.clone(),
        env_remove: launch.env_remove.clone(),
        _config: None,
    }
}

pub(super) fn describe(launch: &Launch) -> String {
    let home = launch
        .env
        .iter()
        .find(|(name, _)| name == "CODEX_HOME")
        .map(|(_, dir)| PathBuf::from(dir))
        .unwrap_or_default();
    let hooks = std::fs::read_to_string(home.join("hooks.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_default();
    format!(
        "Codex hooks.json, in a fresh CODEX_HOME for the run (with a copy of the user's \
         config.toml without hooks, and auth.json):\n{hooks}\n"
    )
}
