//! How `runplane work` starts each agent: the hook settings it writes, the command line,
//! the flags it refuses, the probe form, and Codex's fresh `CODEX_HOME`.

use std::path::Path;
use std::time::Duration;

use runplane::worker::codex;
use runplane::worker::hook_wire::Agent;
use runplane::worker::launch::{prepare, probe, shell_quote, HookCommand};

fn hooks(agent: Agent) -> HookCommand {
    HookCommand::new(
        Path::new("/opt/run plane/runplane"),
        agent,
        Path::new("/tmp/it's/hooks.sock"),
        Duration::from_secs(600),
    )
}

fn words(line: &[&str]) -> Vec<String> {
    line.iter().map(|w| w.to_string()).collect()
}

#[test]
fn the_hook_command_quotes_its_paths_and_the_agent_waits_longer_than_the_hook() {
    let hook = hooks(Agent::Codex);
    assert_eq!(
        hook.command,
        r#"'/opt/run plane/runplane' hook --agent codex --socket '/tmp/it'\''s/hooks.sock' --deadline 600"#
    );
    assert_eq!(hook.timeout_secs, 630);
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("printf %s {}", shell_quote("a'b c$d"))])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a'b c$d");
}

#[test]
fn claude_code_gets_inline_settings_and_no_other_settings_sources() {
    let launch = prepare(
        Agent::ClaudeCode,
        &words(&["claude", "-p", "fix it"]),
        &hooks(Agent::ClaudeCode),
    )
    .unwrap();
    assert_eq!(launch.line[..3], words(&["claude", "-p", "fix it"]));
    assert_eq!(launch.line[3], "--settings");
    assert_eq!(launch.line[5..], words(&["--setting-sources", ""]));
    let settings: serde_json::Value = serde_json::from_str(&launch.line[4]).unwrap();
    let events: Vec<&str> = settings["hooks"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        events,
        [
            "PostToolUse",
            "PostToolUseFailure",
            "PreToolUse",
            "SessionStart",
            "Stop"
        ]
    );
    let pre = &settings["hooks"]["PreToolUse"][0]["hooks"][0];
    assert_eq!(
        pre["onFailure"], "block",
        "a failed PreToolUse hook blocks its tool"
    );
    assert_eq!(pre["timeout"], 630);
    assert_eq!(settings["hooks"]["PreToolUse"][0]["matcher"], "*");
}

#[test]
fn flags_that_skip_or_replace_the_hooks_are_refused() {
    for flag in [
        "--bare",
        "--safe-mode",
        "--settings",
        "--settings=x.json",
        "--setting-sources",
    ] {
        let err = prepare(
            Agent::ClaudeCode,
            &words(&["claude", flag, "-p", "x"]),
            &hooks(Agent::ClaudeCode),
        )
        .unwrap_err();
        assert!(err.starts_with(flag), "{err}");
    }
    for line in [
        &["codex", "exec", "--ignore-user-config", "x"][..],
        &["codex", "exec", "--disable", "hooks", "x"],
        &["codex", "exec", "--disable=hooks", "x"],
        &["codex", "exec", "-c", "features.hooks=false", "x"],
        &["codex", "exec", "--config", "hooks.PreToolUse=[]", "x"],
        &["codex", "exec", "-c=hooks={}", "x"],
    ] {
        let err = prepare(Agent::Codex, &words(line), &hooks(Agent::Codex)).unwrap_err();
        assert!(err.contains("hooks"), "{line:?}: {err}");
    }
    let err = prepare(
        Agent::Codex,
        &words(&["codex", "fix it"]),
        &hooks(Agent::Codex),
    )
    .unwrap_err();
    assert!(err.contains("codex exec"), "{err}");
    // Other features and overrides are the user's business.
    prepare(
        Agent::Codex,
        &words(&[
            "codex",
            "exec",
            "--disable",
            "web_search",
            "-c",
            "model=\"o3\"",
            "x",
        ]),
        &hooks(Agent::Codex),
    )
    .unwrap();
}

#[test]
fn codex_runs_with_the_trust_bypass_and_a_fresh_codex_home() {
    let launch = prepare(
        Agent::Codex,
        &words(&["npx", "codex", "exec", "--json", "fix it"]),
        &hooks(Agent::Codex),
    )
    .unwrap();
    assert_eq!(
        launch.line,
        words(&[
            "npx",
            "codex",
            "exec",
            "--dangerously-bypass-hook-trust",
            "--json",
            "fix it"
        ])
    );
    let (name, home) = &launch.env[0];
    assert_eq!(name, "CODEX_HOME");
    let hooks_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(home).join("hooks.json")).unwrap())
            .unwrap();
    let events: Vec<&str> = hooks_json["hooks"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        events,
        ["PostToolUse", "PreToolUse", "SessionStart", "Stop"],
        "only events Codex knows"
    );
    let dir = Path::new(home).to_path_buf();
    drop(launch);
    assert!(!dir.exists(), "the CODEX_HOME goes with the launch");
}

#[test]
fn the_users_codex_config_is_copied_without_its_hooks() {
    let user = tempfile::tempdir().unwrap();
    std::fs::write(
        user.path().join("config.toml"),
        "model = \"o3\"\n[features]\nhooks = false\nweb_search = true\n[hooks]\nPreToolUse = []\n",
    )
    .unwrap();
    std::fs::write(user.path().join("work.config.toml"), "[hooks]\nStop = []\n").unwrap();
    std::fs::write(user.path().join("auth.json"), "{\"k\": 1}").unwrap();
    std::fs::write(user.path().join("hooks.json"), "{\"hooks\": {}}").unwrap();
    std::fs::create_dir(user.path().join("sessions")).unwrap();
    let home = codex::fresh_home(Some(user.path()), &hooks(Agent::Codex)).unwrap();
    let config: toml::Table =
        toml::from_str(&std::fs::read_to_string(home.path().join("config.toml")).unwrap()).unwrap();
    assert_eq!(config["model"].as_str(), Some("o3"));
    assert!(!config.contains_key("hooks"));
    assert_eq!(
        config["features"]
            .as_table()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["web_search"]
    );
    let profile = std::fs::read_to_string(home.path().join("work.config.toml")).unwrap();
    assert!(!profile.contains("hooks"), "{profile}");
    assert_eq!(
        std::fs::read_to_string(home.path().join("auth.json")).unwrap(),
        "{\"k\": 1}"
    );
    let hooks_json = std::fs::read_to_string(home.path().join("hooks.json")).unwrap();
    assert!(
        hooks_json.contains("runplane"),
        "runplane's hooks, not the user's: {hooks_json}"
    );
    assert!(!home.path().join("sessions").exists());

    std::fs::write(user.path().join("config.toml"), "not = [toml").unwrap();
    let err = codex::fresh_home(Some(user.path()), &hooks(Agent::Codex)).unwrap_err();
    assert!(err.contains("config.toml is not TOML"), "{err}");
}

#[test]
fn the_probe_cannot_act_and_keeps_everything_that_decides_the_hooks() {
    let model = "127.0.0.1:9".parse().unwrap();
    let claude = prepare(
        Agent::ClaudeCode,
        &words(&["claude", "-p", "x"]),
        &hooks(Agent::ClaudeCode),
    )
    .unwrap();
    let probed = probe(Agent::ClaudeCode, &claude, model);
    assert_eq!(probed.line[..claude.line.len()], claude.line[..]);
    assert_eq!(probed.line[claude.line.len()..], words(&["--tools", ""]));
    assert!(probed
        .env
        .contains(&("ANTHROPIC_BASE_URL".into(), "http://127.0.0.1:9".into())));
    assert!(probed
        .env_remove
        .contains(&"CLAUDE_CODE_USE_BEDROCK".to_string()));

    let codex = prepare(
        Agent::Codex,
        &words(&["codex", "exec", "--json", "x"]),
        &hooks(Agent::Codex),
    )
    .unwrap();
    let probed = probe(Agent::Codex, &codex, model);
    assert_eq!(probed.line[..3], codex.line[..3]);
    assert_eq!(
        probed.line[3..5],
        words(&["-c", "model_provider=\"runplane-probe\""])
    );
    assert!(
        probed.line[6].contains("base_url=\"http://127.0.0.1:9/v1\""),
        "{}",
        probed.line[6]
    );
    assert_eq!(probed.line[7..], words(&["--json", "x"]));
    assert_eq!(probed.env, codex.env, "the same CODEX_HOME");
}
