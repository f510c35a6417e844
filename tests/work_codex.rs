//! `runplane work` with the real Codex 0.169.0 (`RUNPLANE_CODEX_BIN`, which `.ci/run`
//! installs from npm into `target/agents`), driven by the scripted model stand-in
//! `tests/agents/fake_openai.py`: Codex's own hook machinery decides through runplane.
//! Without `RUNPLANE_CODEX_BIN` each test says so and stops.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::agents::*;
use common::*;
use runplane::grpc::pb;
use serde_json::json;

/// Bash `git status`/`echo` allowed, `rm` denied, patches under src/ allowed; everything
/// else (a patch of .env, `touch`) is asked.
const PROFILE: &str = r#"
name = "codex"
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
specifier = { tool = "apply_patch" }
decision = "allow"
path_allow = ["src/**"]
"#;

async fn server_and_run(mode: pb::DeliverMode) -> (TestServer, String, tempfile::TempDir, PathBuf) {
    let server = TestServer::with(Options {
        policy: Some(PROFILE.into()),
        ..Options::default()
    })
    .await;
    let run_id = server.start_delivering_run("codex", mode).await;
    let repo = git_repo();
    let workspace = std::fs::canonicalize(repo.path()).unwrap();
    (server, run_id, repo, workspace)
}

fn shell(cmd: &str) -> serde_json::Value {
    json!({"name": "exec_command", "arguments": {"cmd": cmd}})
}

/// Codex's apply_patch (a freeform tool with the known model) adding `file`.
fn add_file(call: &str, file: &str, line: &str) -> serde_json::Value {
    json!({"raw_item": {
        "type": "custom_tool_call", "call_id": call, "name": "apply_patch", "status": "completed",
        "input": format!("*** Begin Patch\n*** Add File: {file}\n+{line}\n*** End Patch\n"),
    }})
}

async fn start(
    codex: &str,
    server: &TestServer,
    run_id: &str,
    workspace: &Path,
    steps: Vec<serde_json::Value>,
    options: WorkOptions,
) -> AgentRun {
    let script = json!({"main": steps, "final": "All done."});
    AgentRun::start(
        Kind::Codex,
        codex,
        server,
        run_id,
        workspace,
        script,
        options,
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn allowed_calls_run_a_denied_one_does_not_and_the_work_is_delivered() {
    let Some(codex) = Kind::Codex.binary() else {
        return;
    };
    let (server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::CommitLocal).await;
    let steps = vec![
        shell("git status"),
        shell("git status && rm -rf build"),
        add_file("call_lib", "src/lib.rs", "pub fn f() {}"),
    ];
    let run = start(
        &codex,
        &server,
        &run_id,
        &workspace,
        steps,
        WorkOptions::default(),
    )
    .await;
    let output = run.finish().await;
    assert_success(&output);
    assert!(
        workspace.join("build/keep").exists(),
        "the denied rm did not run"
    );
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Completed, "{}", run.error);
    assert_eq!(
        run.output, "All done.",
        "the last message is the run's output"
    );
    let events = server.events(&run_id).await;
    let denied: Vec<&str> = events
        .iter()
        .filter(|e| e.r#type == "run.toolcall.denied")
        .map(|e| e.attributes["command"].as_str())
        .collect();
    assert_eq!(denied, ["git status && rm -rf build"]);
    let patched: Vec<&str> = events
        .iter()
        .filter(|e| e.r#type == "run.toolcall.approved" && e.attributes["tool"] == "apply_patch")
        .map(|e| e.attributes["paths"].as_str())
        .collect();
    assert_eq!(patched, [r#"["src/lib.rs"]"#]);
    let results = events
        .iter()
        .filter(|e| e.r#type == "run.toolcall.result")
        .count();
    assert_eq!(results, 2, "git status and the patch ran and were reported");
    assert_eq!(
        git(&workspace, &["show", "--name-only", "--format=", "HEAD"]),
        "src/lib.rs"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ask_holds_the_patch_until_the_operator_allows_one_and_denies_another() {
    let Some(codex) = Kind::Codex.binary() else {
        return;
    };
    let (server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    let steps = vec![
        add_file("call_env", ".env", "K=V"),
        add_file("call_secret", "secrets.txt", "s"),
    ];
    let run = start(
        &codex,
        &server,
        &run_id,
        &workspace,
        steps,
        WorkOptions::default(),
    )
    .await;
    for (file, decision) in [
        (".env", pb::Decision::Allow),
        ("secrets.txt", pb::Decision::Deny),
    ] {
        let ask = next_ask(&server, &run_id).await;
        assert_eq!(ask.paths, [file]);
        assert!(
            ask.input.contains("*** Add File"),
            "the operator sees the patch: {}",
            ask.input
        );
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
        "the denied patch did not apply"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hook_with_no_answer_in_time_blocks_the_tool() {
    let Some(codex) = Kind::Codex.binary() else {
        return;
    };
    let (server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    let options = WorkOptions {
        hook_timeout: 2,
        ..WorkOptions::default()
    };
    let run = start(
        &codex,
        &server,
        &run_id,
        &workspace,
        vec![shell("touch marker")],
        options,
    )
    .await;
    assert_success(&run.finish().await);
    assert!(!workspace.join("marker").exists(), "the tool did not run");
}

#[tokio::test(flavor = "multi_thread")]
async fn hooks_that_do_not_run_fail_the_run_before_codex_acts() {
    let Some(codex) = Kind::Codex.binary() else {
        return;
    };
    let (server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    // Without --dangerously-bypass-hook-trust Codex skips runplane's (untrusted) hooks.
    let options = WorkOptions {
        wrapper: Some(format!("{}/tests/agents/drop_hooks.py", env!("CARGO_MANIFEST_DIR")).into()),
        probe_timeout: 5,
        ..WorkOptions::default()
    };
    let run = start(
        &codex,
        &server,
        &run_id,
        &workspace,
        vec![shell("touch marker")],
        options,
    )
    .await;
    let output = run.finish().await;
    assert!(
        !output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!workspace.join("marker").exists(), "Codex never acted");
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert!(
        run.error.starts_with("the agent's hooks are not live"),
        "{}",
        run.error
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_users_own_config_cannot_switch_the_hooks_off() {
    let Some(codex) = Kind::Codex.binary() else {
        return;
    };
    let (server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    // A user's config that switches hooks off and brings a hook of its own.
    let options = WorkOptions {
        user_settings: Some("\n[features]\nhooks = false\n\n[hooks]\nPreToolUse = []\n".into()),
        ..WorkOptions::default()
    };
    let steps = vec![shell("git status && rm -rf build")];
    let run = start(&codex, &server, &run_id, &workspace, steps, options).await;
    assert_success(&run.finish().await);
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

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_ends_codex_within_five_seconds() {
    let Some(codex) = Kind::Codex.binary() else {
        return;
    };
    let (server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    let run = start(
        &codex,
        &server,
        &run_id,
        &workspace,
        vec![shell("touch marker")],
        WorkOptions::default(),
    )
    .await;
    a_cancel_ends_the_agent_within_five_seconds(&server, &run_id, run, &workspace).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_goes_away_for_good_leaves_the_held_tool_unrun() {
    let Some(codex) = Kind::Codex.binary() else {
        return;
    };
    let (mut server, run_id, _repo, workspace) = server_and_run(pb::DeliverMode::Unspecified).await;
    let run = start(
        &codex,
        &server,
        &run_id,
        &workspace,
        vec![shell("touch marker")],
        short_reattach(),
    )
    .await;
    a_server_gone_for_good_leaves_the_held_tool_unrun(&mut server, &run_id, run, &workspace).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_codex_is_stopped_and_its_run_fails() {
    let Some(codex) = Kind::Codex.binary() else {
        return;
    };
    let server = TestServer::with(Options {
        policy: Some(
            r#"
name = "stall"
mode = "default"

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"

[termination]
stall_detection = true
stall_threshold = 3
"#
            .into(),
        ),
        ..Options::default()
    })
    .await;
    let run_id = server.start_run("stall").await;
    let repo = git_repo();
    let workspace = std::fs::canonicalize(repo.path()).unwrap();
    // The same failing read over and over; the step after it must never run.
    let mut steps = vec![shell("cat missing.txt"); 6];
    steps.push(shell("touch after-stall"));
    let run = start(
        &codex,
        &server,
        &run_id,
        &workspace,
        steps,
        WorkOptions::default(),
    )
    .await;
    let output = run.finish().await;
    assert!(!output.status.success());
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert_eq!(run.error, "stall detected");
    let types = server.event_types(&run_id).await;
    let results = types.iter().filter(|t| *t == "run.toolcall.result").count();
    assert_eq!(
        results, 4,
        "the first read is progress, three more stall: {types:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!workspace.join("after-stall").exists(), "Codex was stopped");
}
