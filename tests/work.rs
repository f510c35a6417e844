//! `runplane work`, the real binary, against a real server, with an agent that keeps
//! Claude Code's hook contract (`tests/agents/fake_claude.py`): allowed tools run and their
//! results are logged, a denied one does not run, an ask waits for the operator, the gate
//! and a local commit happen with git, and a cancel stops the agent. `work_claude.rs` does
//! the same with the real Claude Code.

mod common;

use std::process::Stdio;

use common::fake::*;
use common::*;
use runplane::grpc::pb;

const PROFILE: &str = r#"
name = "work"
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

[quality_gate]
require_tests_pass = true
test_command = "test -f src/lib.rs"
rollback_on_gate_fail = true
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_under_runplane_work_is_judged_held_gated_and_delivered() {
    if python3_missing() {
        return;
    }
    let server = TestServer::with(Options {
        policy: Some(PROFILE.into()),
        ..Options::default()
    })
    .await;
    let run_id = server
        .start_delivering_run("work", pb::DeliverMode::CommitLocal)
        .await;
    let repo = git_repo();
    let workspace = std::fs::canonicalize(repo.path()).unwrap();
    let env_file = workspace.join(".env");
    let script = serde_json::json!([
        {"name": "Bash", "input": {"command": "git status"}},
        {"name": "Bash", "input": {"command": "git status && rm -rf build"}},
        {"name": "Write", "input": {"file_path": workspace.join("src/lib.rs"), "content": "pub fn f() {}\n"}},
        {"name": "Write", "input": {"file_path": env_file, "content": "K=V\n"}},
    ]);
    let script_file = repo.path().join(".git/script.json");
    std::fs::write(&script_file, script.to_string()).unwrap();
    let agent = common::fake::fake_agent();
    let worker = runplane_work()
        .args(["work", "--run", &run_id, "--hook-timeout", "30", "--server"])
        .arg(format!("http://{}", server.addr))
        .arg("--workspace")
        .arg(&workspace)
        .args(["--", "python3", &agent, "-p", "do it"])
        .env("RUNPLANE_WORKER_TOKEN", server.worker_token(&run_id))
        .env("FAKE_AGENT_SCRIPT", &script_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // The .env write asks: the operator allows it.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let ask = loop {
        if let Some(ask) = server.pending_asks(&run_id).await.pop() {
            break ask;
        }
        assert!(tokio::time::Instant::now() < deadline, "no ask arrived");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let asked = ask.request.unwrap();
    assert_eq!(
        (asked.tool.as_str(), asked.call_id.as_str()),
        ("Write", "toolu_0003")
    );
    assert!(
        asked.input.contains("K=V"),
        "the operator sees the whole input: {}",
        asked.input
    );
    server
        .resolve(&run_id, "toolu_0003", pb::Decision::Allow, "fine")
        .await;

    let output = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        worker.wait_with_output(),
    )
    .await
    .expect("runplane work finishes")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let ran: Vec<bool> = stdout
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["ran"]
                .as_bool()
                .unwrap()
        })
        .collect();
    assert_eq!(ran, [true, false, true, true], "{stdout}");
    assert!(
        workspace.join("build/keep").exists(),
        "the denied rm did not run"
    );

    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Completed, "{}", run.error);
    assert_eq!(run.output, "All done.");
    // Delivered as a local commit holding the agent's files.
    assert_eq!(git(&workspace, &["status", "--porcelain"]), "");
    let files = git(&workspace, &["show", "--name-only", "--format=", "HEAD"]);
    assert_eq!(files.lines().collect::<Vec<_>>(), [".env", "src/lib.rs"]);
    let events = server.events(&run_id).await;
    let count = |kind: &str| events.iter().filter(|e| e.r#type == kind).count();
    assert_eq!(count("run.toolcall.denied"), 1);
    assert_eq!(count("run.toolcall.result"), 3);
    assert_eq!(count("run.qualitygate.passed"), 1);
    assert_eq!(count("run.delivery.succeeded"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_stops_the_agent_at_once() {
    if python3_missing() {
        return;
    }
    let server = TestServer::with(Options {
        policy: Some(PROFILE.into()),
        ..Options::default()
    })
    .await;
    let run_id = server.start_run("work").await;
    let repo = git_repo();
    let workspace = std::fs::canonicalize(repo.path()).unwrap();
    // `sleep` has no rule: the call is asked, and the agent waits in its hook.
    let script = serde_json::json!([{"name": "Bash", "input": {"command": "sleep 30"}}]);
    let script_file = repo.path().join(".git/script.json");
    std::fs::write(&script_file, script.to_string()).unwrap();
    let agent = common::fake::fake_agent();
    let mut worker = runplane_work()
        .args(["work", "--run", &run_id, "--hook-timeout", "60", "--server"])
        .arg(format!("http://{}", server.addr))
        .arg("--workspace")
        .arg(&workspace)
        .args(["--", "python3", &agent])
        .env("RUNPLANE_WORKER_TOKEN", server.worker_token(&run_id))
        .env("FAKE_AGENT_SCRIPT", &script_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while server.pending_asks(&run_id).await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no ask arrived");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    server.cancel(&run_id, "stop").await;
    let exited = tokio::time::timeout(std::time::Duration::from_secs(5), worker.wait())
        .await
        .expect("the worker and its agent are gone within 5 s")
        .unwrap();
    assert!(!exited.success(), "a cancelled run is not a success");
    assert_eq!(
        status(&server.get_run(&run_id).await),
        pb::RunStatus::Cancelled
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_run_id_work_starts_the_run_with_the_operator_token() {
    if python3_missing() {
        return;
    }
    let server = TestServer::with(Options {
        policy: Some(PROFILE.into()),
        ..Options::default()
    })
    .await;
    let script = serde_json::json!([
        {"name": "Write", "input": {"file_path": "src/lib.rs", "content": "pub fn f() {}\n"}},
    ]);
    let flags = [
        "--task",
        "t-9",
        "--project",
        "web",
        "--profile",
        "work",
        "--deliver-mode",
        "commit-local",
        "--token",
        &server.admin_token,
    ];
    let (output, repo) = fake_work(&server, &flags, &[], script).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let runs = server
        .runs()
        .await
        .list_runs(pb::ListRunsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .runs;
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(
        (
            run.task_id.as_str(),
            run.project_id.as_str(),
            run.agent_id.as_str()
        ),
        ("t-9", "web", "claude-code")
    );
    assert_eq!(status(run), pb::RunStatus::Completed, "{}", run.error);
    assert!(
        stderr.contains(&format!("started run {}", run.id)),
        "{stderr}"
    );
    assert_eq!(
        git(repo.path(), &["show", "--name-only", "--format=", "HEAD"]),
        "src/lib.rs"
    );

    // A viewer may not start runs.
    let viewer = server.create_token("eve", pb::Role::Viewer, &[]).await;
    let (output, _repo) = fake_work(
        &server,
        &["--task", "t-10", "--project", "web", "--token", &viewer],
        &[],
        serde_json::json!([]),
    )
    .await;
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("error: PERMISSION_DENIED: "),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_whose_hooks_do_not_run_never_acts_and_its_run_fails() {
    if python3_missing() {
        return;
    }
    let server = TestServer::with(Options {
        policy: Some(PROFILE.into()),
        ..Options::default()
    })
    .await;
    let script = serde_json::json!([{"name": "Bash", "input": {"command": "touch marker"}}]);
    let run_id = server.start_run("work").await;
    let token = server.worker_token(&run_id);
    let (output, repo) = fake_work(
        &server,
        &["--run", &run_id, "--probe-timeout", "1"],
        &[
            ("RUNPLANE_WORKER_TOKEN", &token),
            ("FAKE_AGENT_SKIP_SESSION_START", "1"),
        ],
        script.clone(),
    )
    .await;
    assert!(!output.status.success());
    assert!(
        !repo.path().join("marker").exists(),
        "the agent never ran for real"
    );
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert_eq!(
        run.error,
        "the agent's hooks are not live: the agent did not run runplane's SessionStart hook \
         within 1 s. Something keeps them from running (managed settings that switch hooks off, \
         an untrusted hook, a wrapper that drops runplane's flags); the agent was not started"
    );

    // Hooks that start but skip PreToolUse: the first unjudged result stops the agent.
    let script = serde_json::json!([
        {"name": "Bash", "input": {"command": "true"}},
        {"name": "Bash", "input": {"command": "sleep 5; touch late"}},
    ]);
    let run_id = server.start_run("work").await;
    let token = server.worker_token(&run_id);
    let (output, repo) = fake_work(
        &server,
        &["--run", &run_id],
        &[
            ("RUNPLANE_WORKER_TOKEN", &token),
            ("FAKE_AGENT_SKIP_PRE_TOOL_USE", "1"),
        ],
        script,
    )
    .await;
    assert!(!output.status.success());
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert_eq!(
        run.error,
        "the agent ran Bash (call toolu_0000) without runplane's decision: its PreToolUse hook did not run"
    );
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    assert!(!repo.path().join("late").exists(), "the agent was stopped");
}

#[test]
fn print_settings_shows_what_the_agent_is_given() {
    let show = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_runplane"))
            .args(["work", "--print-settings"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let claude = show(&["--", "claude", "-p", "fix it"]);
    for expected in [
        "\"PreToolUse\"",
        "\"onFailure\": \"block\"",
        "--deadline 600",
        "'--setting-sources'\n  ''",
        "<socket>",
    ] {
        assert!(claude.contains(expected), "{expected} in {claude}");
    }
    let codex = show(&["--agent", "codex", "--", "codex", "exec", "fix it"]);
    for expected in [
        "hooks.json",
        "\"SessionStart\"",
        "'--dangerously-bypass-hook-trust'",
    ] {
        assert!(codex.contains(expected), "{expected} in {codex}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_runplane_refuses_is_denied_at_once_not_held() {
    if python3_missing() {
        return;
    }
    let server = TestServer::with(Options {
        policy: Some(PROFILE.into()),
        ..Options::default()
    })
    .await;
    // A command over the server's 64 KiB cap: the session answers with an error, not a
    // decision; the hook is released with a deny instead of waiting out its deadline.
    let command = format!("echo {}", "x".repeat(70_000));
    let script = serde_json::json!([{"name": "Bash", "input": {"command": command}}]);
    let run_id = server.start_run("work").await;
    let token = server.worker_token(&run_id);
    let started = std::time::Instant::now();
    let (output, _repo) = fake_work(
        &server,
        &["--run", &run_id, "--hook-timeout", "60"],
        &[("RUNPLANE_WORKER_TOKEN", &token)],
        script,
    )
    .await;
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(line["ran"], false, "{stdout}");
    // The run went on to its gate (which fails: the agent wrote no src/lib.rs).
    let run = server.get_run(&run_id).await;
    assert_eq!(run.error, "quality gate failed: tests did not pass");
}
