//! `runplane work` with the real Claude Code 2.1.328 (`RUNPLANE_CLAUDE_BIN`, which
//! `.ci/run` installs from npm into `target/agents`), driven by the scripted model
//! stand-in `tests/agents/fake_anthropic.py`: Claude Code's own hook machinery decides
//! through runplane. Without `RUNPLANE_CLAUDE_BIN` each test says so and stops.

mod common;

use std::path::PathBuf;

use common::agents::*;
use common::*;
use runplane::grpc::pb;

/// Bash `git status`/`echo` allowed, `rm` denied, writes under src/ allowed; everything
/// else (a write of .env, `touch`) is asked. No gate: the runs end when the agent does.
const PROFILE: &str = r#"
name = "claude"
mode = "default"

[[rules]]
specifier = { tool = "Bash" }
decision = "deny"
command_allow = ["rm"]

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["git status", "echo"]

[[rules]]
specifier = { tool = "Write" }
decision = "allow"
path_allow = ["src/**"]
"#;

async fn server_and_run(mode: pb::DeliverMode) -> (TestServer, String, tempfile::TempDir, PathBuf) {
    let server = TestServer::with(Options {
        policy: Some(PROFILE.into()),
        ..Options::default()
    })
    .await;
    let run_id = server.start_delivering_run("claude", mode).await;
    let repo = git_repo();
    let workspace = std::fs::canonicalize(repo.path()).unwrap();
    (server, run_id, repo, workspace)
}

#[tokio::test(flavor = "multi_thread")]
async fn allowed_calls_run_a_denied_one_does_not_and_the_work_is_delivered() {
    let Some(claude) = Kind::Claude.binary() else {
        return;
    };
    let (server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::CommitLocal).await;
    let script = serde_json::json!([
        {"name": "Bash", "input": {"command": "git status", "description": "status"}},
        {"name": "Bash", "input": {"command": "git status && rm -rf build", "description": "clean"}},
        {"name": "Write", "input": {"file_path": workspace.join("src/lib.rs"), "content": "pub fn f() {}\n"}},
    ]);
    let output = AgentRun::start(
        Kind::Claude,
        &claude,
        &server,
        &run_id,
        &workspace,
        script,
        WorkOptions::default(),
    )
    .await
    .finish()
    .await;
    assert_success(&output);
    assert!(
        workspace.join("build/keep").exists(),
        "the denied rm did not run"
    );
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Completed, "{}", run.error);
    let events = server.events(&run_id).await;
    let denied: Vec<&str> = events
        .iter()
        .filter(|e| e.r#type == "run.toolcall.denied")
        .map(|e| e.attributes["command"].as_str())
        .collect();
    assert_eq!(denied, ["git status && rm -rf build"]);
    let results = events
        .iter()
        .filter(|e| e.r#type == "run.toolcall.result")
        .count();
    assert_eq!(results, 2, "git status and the write ran and were reported");
    assert_eq!(
        git(&workspace, &["show", "--name-only", "--format=", "HEAD"]),
        "src/lib.rs"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ask_waits_for_the_operator_who_allows_one_write_and_denies_another() {
    let Some(claude) = Kind::Claude.binary() else {
        return;
    };
    let (server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    let script = serde_json::json!([
        {"name": "Write", "input": {"file_path": workspace.join(".env"), "content": "K=V\n"}},
        {"name": "Write", "input": {"file_path": workspace.join("secrets.txt"), "content": "s\n"}},
    ]);
    let run = AgentRun::start(
        Kind::Claude,
        &claude,
        &server,
        &run_id,
        &workspace,
        script,
        WorkOptions::default(),
    )
    .await;
    for (file, decision) in [
        (".env", pb::Decision::Allow),
        ("secrets.txt", pb::Decision::Deny),
    ] {
        let ask = next_ask(&server, &run_id).await;
        assert!(ask.path.ends_with(file), "{}", ask.path);
        assert!(
            !workspace.join(file).exists(),
            "{file} waits for the operator"
        );
        server
            .resolve(&run_id, &ask.call_id, decision, "operator")
            .await;
    }
    assert_success(&run.finish().await);
    assert_eq!(
        std::fs::read_to_string(workspace.join(".env")).unwrap(),
        "K=V\n"
    );
    assert!(
        !workspace.join("secrets.txt").exists(),
        "the denied write did not happen"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hook_with_no_answer_in_time_blocks_the_tool() {
    let Some(claude) = Kind::Claude.binary() else {
        return;
    };
    let (server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    // `touch` is asked and nobody answers: the hook's deadline (2 s) passes first.
    let script = serde_json::json!([
        {"name": "Bash", "input": {"command": "touch marker", "description": "probe"}},
    ]);
    let output = AgentRun::start(
        Kind::Claude,
        &claude,
        &server,
        &run_id,
        &workspace,
        script,
        WorkOptions {
            hook_timeout: 2,
            ..WorkOptions::default()
        },
    )
    .await
    .finish()
    .await;
    assert_success(&output);
    assert!(!workspace.join("marker").exists(), "the tool did not run");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_ends_claude_code_within_five_seconds() {
    let Some(claude) = Kind::Claude.binary() else {
        return;
    };
    let (server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    let script = serde_json::json!([
        {"name": "Bash", "input": {"command": "touch marker", "description": "probe"}},
    ]);
    let run = AgentRun::start(
        Kind::Claude,
        &claude,
        &server,
        &run_id,
        &workspace,
        script,
        WorkOptions::default(),
    )
    .await;
    a_cancel_ends_the_agent_within_five_seconds(&server, &run_id, run, &workspace).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_goes_away_for_good_leaves_the_held_tool_unrun() {
    let Some(claude) = Kind::Claude.binary() else {
        return;
    };
    let (mut server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    let script = serde_json::json!([
        {"name": "Bash", "input": {"command": "touch marker", "description": "probe"}},
    ]);
    let run = AgentRun::start(
        Kind::Claude,
        &claude,
        &server,
        &run_id,
        &workspace,
        script,
        short_reattach(),
    )
    .await;
    let stderr =
        a_server_gone_for_good_leaves_the_held_tool_unrun(&mut server, &run_id, run, &workspace)
            .await;
    assert!(stderr.contains("error: UNAVAILABLE: "), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_restart_mid_ask_is_ridden_out_and_the_operators_answer_still_counts() {
    let Some(claude) = Kind::Claude.binary() else {
        return;
    };
    let (mut server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    let script = serde_json::json!([
        {"name": "Bash", "input": {"command": "touch marker", "description": "probe"}},
    ]);
    let run = AgentRun::start(
        Kind::Claude,
        &claude,
        &server,
        &run_id,
        &workspace,
        script,
        WorkOptions::default(),
    )
    .await;
    next_ask(&server, &run_id).await;
    server.restart().await;
    // The worker re-attaches and repeats the held call: the restored ask is pending again.
    let ask = next_ask(&server, &run_id).await;
    assert!(
        !workspace.join("marker").exists(),
        "the tool waits for the operator"
    );
    server
        .resolve(&run_id, &ask.call_id, pb::Decision::Allow, "go")
        .await;
    assert_success(&run.finish().await);
    assert!(
        workspace.join("marker").exists(),
        "the allowed tool ran after the restart"
    );
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Completed, "{}", run.error);
    let types = server.event_types(&run_id).await;
    assert_eq!(
        types.iter().filter(|t| *t == "run.worker.attached").count(),
        2,
        "{types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| *t == "run.toolcall.result").count(),
        1,
        "{types:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hooks_that_do_not_run_fail_the_run_before_claude_code_acts() {
    let Some(claude) = Kind::Claude.binary() else {
        return;
    };
    let (server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    // A wrapper drops runplane's --settings: Claude Code starts without its hooks.
    let options = WorkOptions {
        wrapper: Some(format!("{}/tests/agents/drop_hooks.py", env!("CARGO_MANIFEST_DIR")).into()),
        probe_timeout: 5,
        ..WorkOptions::default()
    };
    let script = serde_json::json!([
        {"name": "Bash", "input": {"command": "touch marker", "description": "probe"}},
    ]);
    let output = AgentRun::start(
        Kind::Claude,
        &claude,
        &server,
        &run_id,
        &workspace,
        script,
        options,
    )
    .await
    .finish()
    .await;
    assert!(!output.status.success());
    assert!(
        !workspace.join("marker").exists(),
        "Claude Code never acted"
    );
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert!(
        run.error.starts_with("the agent's hooks are not live"),
        "{}",
        run.error
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_users_and_the_projects_settings_cannot_switch_the_hooks_off() {
    let Some(claude) = Kind::Claude.binary() else {
        return;
    };
    let (server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    let off = r#"{"disableAllHooks": true}"#;
    std::fs::create_dir_all(workspace.join(".claude")).unwrap();
    std::fs::write(workspace.join(".claude/settings.json"), off).unwrap();
    std::fs::write(workspace.join(".claude/settings.local.json"), off).unwrap();
    let options = WorkOptions {
        user_settings: Some(off.into()),
        ..WorkOptions::default()
    };
    let script = serde_json::json!([
        {"name": "Bash", "input": {"command": "git status && rm -rf build", "description": "clean"}},
    ]);
    let output = AgentRun::start(
        Kind::Claude,
        &claude,
        &server,
        &run_id,
        &workspace,
        script,
        options,
    )
    .await
    .finish()
    .await;
    assert_success(&output);
    assert!(
        workspace.join("build/keep").exists(),
        "the rm was still denied"
    );
    let types = server.event_types(&run_id).await;
    assert!(
        types.contains(&"run.toolcall.denied".to_string()),
        "{types:?}"
    );
}
