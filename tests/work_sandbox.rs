//! The real agents, Claude Code (`RUNPLANE_CLAUDE_BIN`) and Codex (`RUNPLANE_CODEX_BIN`),
//! under `runplane work` with the default profile `headless-safe-sandbox`, in the kernel
//! sandbox. An operator approves the agent's writing of a Makefile and of a script (a
//! Write for Claude Code, an apply_patch for Codex); the allowed `make test` then tries
//! each way out, the gate's `make test` tries them again, and a pre-commit hook and
//! `core.fsmonitor` left in the repository meet the delivery commit. No escape takes
//! effect, the log shows the refused egress and the kernel's refusal next to the call that
//! tried them, and the run completes because the honest parts succeed. Without the agent's
//! variable a test says so and stops; each needs the sandbox (`RUNPLANE_REQUIRE_SANDBOX=1`
//! in `.ci/run`).

mod common;

use std::path::Path;

use common::agents::*;
use common::*;
use runplane::grpc::pb;
use serde_json::json;

/// What the agent's script tries; each line records its exit status in report.txt, so
/// the test sees that every attempt ran and failed (the write to `..` may succeed: above
/// a workspace in /tmp is the sandbox's own /tmp, and the test checks the host's). `OUT` is
/// a directory outside the workspace, `PORT` a local listener's port. A refused
/// redirection's error goes to the shell's stderr before its `2>/dev/null` applies, so
/// the tool's result shows the refused writes and the worker reports them.
const ESCAPE: &str = r#"r=report.txt; : > $r
echo x > OUT/written 2>/dev/null; echo "write-outside $?" >> $r
echo x > ../escaped 2>/dev/null
ln -s OUT link && echo x > link/through-link 2>/dev/null; echo "write-symlink $?" >> $r
echo x > .git/hooks/post-commit 2>/dev/null; echo "git-hook $?" >> $r
echo "[core] fsmonitor = OUT/fsmon.sh" >> .git/config 2>/dev/null; echo "git-config $?" >> $r
cat runplane-data/operator.token > /dev/null 2>&1; echo "read-token $?" >> $r
python3 -c 'import socket; socket.create_connection(("127.0.0.1", PORT))' 2>/dev/null; echo "tcp-direct $?" >> $r
python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)' 2>/dev/null; echo "udp $?" >> $r
python3 -c 'import urllib.request as u; u.urlopen("http://refused.example/x")' 2>/dev/null; echo "egress $?" >> $r
echo built > build.log; echo "honest $?" >> $r
"#;

const MAKEFILE: &str = "test:\n\tsh escape.sh\n\nlint:\n\t@echo lint ok\n";

#[tokio::test(flavor = "multi_thread")]
async fn no_escape_of_a_makefile_approved_for_claude_code_takes_effect() {
    if let Some(claude) = Kind::Claude.binary() {
        no_escape_takes_effect(Kind::Claude, &claude).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_escape_of_a_makefile_approved_for_codex_takes_effect() {
    if let Some(codex) = Kind::Codex.binary() {
        no_escape_takes_effect(Kind::Codex, &codex).await;
    }
}

/// The model's script for `kind`: write the Makefile, write the script, run `make test`.
fn script(kind: Kind, workspace: &Path, escape: &str) -> serde_json::Value {
    let files = [("Makefile", MAKEFILE), ("escape.sh", escape)];
    match kind {
        Kind::Claude => {
            let mut steps: Vec<_> = files
                .iter()
                .map(|(file, content)| {
                    json!({"name": "Write", "input": {"file_path": workspace.join(file), "content": content}})
                })
                .collect();
            steps.push(json!({"name": "Bash", "input": {"command": "make test", "description": "run the tests"}}));
            json!(steps)
        }
        Kind::Codex => {
            let mut steps: Vec<_> = files
                .iter()
                .map(|(file, content)| {
                    let added: String = content.lines().map(|l| format!("+{l}\n")).collect();
                    json!({"raw_item": {
                        "type": "custom_tool_call", "call_id": format!("call_{file}"),
                        "name": "apply_patch", "status": "completed",
                        "input": format!("*** Begin Patch\n*** Add File: {file}\n{added}*** End Patch\n"),
                    }})
                })
                .collect();
            steps.push(json!({"name": "exec_command", "arguments": {"cmd": "make test"}}));
            json!({"main": steps, "final": "All done."})
        }
    }
}

async fn no_escape_takes_effect(kind: Kind, binary: &str) {
    assert!(sandbox_available(), "this test is about the sandbox");
    let server = TestServer::with(Options::default()).await;
    let run_id = server
        .start_delivering_run("headless-safe-sandbox", pb::DeliverMode::CommitLocal)
        .await;
    let repo = git_repo();
    let workspace = std::fs::canonicalize(repo.path()).unwrap();
    let outside = common::host::host_dir("outside");
    let out = std::fs::canonicalize(outside.path()).unwrap();
    plant_traps(&workspace, &out);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let escape = ESCAPE
        .replace("OUT", &out.display().to_string())
        .replace("PORT", &port);
    let options = WorkOptions {
        flags: ["--test-command", "make test", "--lint-command", "make lint"]
            .map(String::from)
            .into(),
        ..WorkOptions::default()
    };
    let script = script(kind, &workspace, &escape);
    let run = AgentRun::start(kind, binary, &server, &run_id, &workspace, script, options).await;
    for file in ["Makefile", "escape.sh"] {
        let ask = next_ask(&server, &run_id).await;
        let asked = ask.paths.first().unwrap_or(&ask.path);
        assert!(asked.ends_with(file), "{ask:?}");
        server
            .resolve(&run_id, &ask.call_id, pb::Decision::Allow, "operator")
            .await;
    }
    assert_success(&run.finish().await);
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Completed, "{}", run.error);
    assert_eq!(run.sandbox, "enforced");
    assert_no_escape(&workspace, &out);
    assert_refusals_recorded(&server.events(&run_id).await, &out);
    drop(listener);
}

/// The gate's run is the last to write the report: every attempt failed, the honest
/// write worked, and nothing the attempts aimed at exists.
fn assert_no_escape(workspace: &Path, out: &Path) {
    let report = std::fs::read_to_string(workspace.join("report.txt")).unwrap();
    for line in report.lines() {
        let (what, code) = line.split_once(' ').unwrap();
        let expected_ok = what == "honest";
        assert_eq!(code == "0", expected_ok, "{what}: exit {code}\n{report}");
    }
    assert_eq!(report.lines().count(), 9, "{report}");
    for (path, what) in [
        (out.join("written"), "a write outside"),
        (out.join("through-link"), "a write through a symlink"),
        (workspace.with_file_name("escaped"), "a write to the parent"),
        (workspace.join(".git/hooks/post-commit"), "a git hook"),
        (out.join("hook-ran"), "the planted pre-commit hook"),
        (out.join("fsmonitor-ran"), "the planted fsmonitor"),
    ] {
        assert!(!path.exists(), "{what} took effect: {}", path.display());
    }
    let config = std::fs::read_to_string(workspace.join(".git/config")).unwrap();
    assert!(!config.contains("fsmon.sh"), "{config}");
}

/// The refused egress (the agent's and the gate's attempt) and the refused write the
/// agent's `make test` showed are events naming the `make test` call.
fn assert_refusals_recorded(events: &[pb::RunEvent], out: &Path) {
    let kinds: Vec<&str> = events.iter().map(|e| e.r#type.as_str()).collect();
    assert!(kinds.contains(&"sandbox.enforced"), "{kinds:?}");
    assert!(kinds.contains(&"run.delivery.succeeded"), "{kinds:?}");
    let make_test = events
        .iter()
        .find(|e| {
            e.r#type == "run.toolcall.approved"
                && e.attributes
                    .get("command")
                    .is_some_and(|c| c == "make test")
        })
        .expect("make test was allowed");
    let call_id = make_test.attributes.get("call_id");
    let of_kind =
        |kind: &str| -> Vec<&pb::RunEvent> { events.iter().filter(|e| e.r#type == kind).collect() };
    let refused: Vec<_> = of_kind("sandbox.egress_refused")
        .into_iter()
        .filter(|e| {
            e.attributes
                .get("host")
                .is_some_and(|h| h == "refused.example")
        })
        .collect();
    assert_eq!(
        refused.len(),
        2,
        "the agent's and the gate's attempt: {refused:?}"
    );
    assert_eq!(refused[0].attributes["port"], "80");
    assert_eq!(
        refused[0].attributes.get("call_id"),
        call_id,
        "the refusal names the call that was running"
    );
    // Only the agent's call's result is read for refusals, not the gate's output; the
    // first three refused writes are reported.
    let denied = of_kind("sandbox.denied");
    let shown: Vec<_> = denied
        .iter()
        .map(|e| {
            (
                e.attributes["errno"].as_str(),
                e.attributes["line"].as_str(),
            )
        })
        .collect();
    let refused_write = |line: u8, path: String| {
        format!("escape.sh: {line}: cannot create {path}: Read-only file system")
    };
    let expected = [
        refused_write(2, out.join("written").display().to_string()),
        refused_write(4, "link/through-link".into()),
        refused_write(5, ".git/hooks/post-commit".into()),
    ];
    assert_eq!(
        shown,
        expected
            .iter()
            .map(|l| ("EROFS", l.as_str()))
            .collect::<Vec<_>>()
    );
    assert!(denied
        .iter()
        .all(|e| e.attributes.get("call_id") == call_id));
}

/// A pre-commit hook and an fsmonitor in the repository, each leaving a marker in `out`
/// if it ever runs, and an operator token where `runplane serve` would leave one.
fn plant_traps(workspace: &Path, out: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let script = |name: &str, marker: &str| {
        let path = out.join(name);
        std::fs::write(
            &path,
            format!("#!/bin/sh\ntouch '{}'\n", out.join(marker).display()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    };
    std::fs::write(workspace.join(".gitignore"), "runplane-data/\n").unwrap();
    std::fs::create_dir_all(workspace.join("runplane-data")).unwrap();
    std::fs::write(workspace.join("runplane-data/operator.token"), "secret\n").unwrap();
    git(workspace, &["add", ".gitignore"]);
    git(workspace, &["commit", "-q", "-m", "ignore"]);
    // Armed last, so that the set-up's own git commands do not trip them.
    let hook = script("pre-commit", "hook-ran");
    std::fs::copy(&hook, workspace.join(".git/hooks/pre-commit")).unwrap();
    let fsmonitor = script("fsmon-planted.sh", "fsmonitor-ran");
    git(
        workspace,
        &["config", "core.fsmonitor", &fsmonitor.display().to_string()],
    );
}
