//! The worker's workspace steps against real `sh` and real `git` in temp dirs: commands
//! with a time limit, the quality gate, rollback to where the run started, and each
//! delivery (a patch, a local commit, a branch pushed to a bare remote).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use runplane::domain::DeliverMode;
use runplane::worker::agent::Launcher;
use runplane::worker::gate::{run_gate, GateDefaults, GateRequest};
use runplane::worker::git::{GitError, Workspace};
use runplane::worker::process::{run_shell, OUTPUT_TAIL_BYTES};

/// The worker's launcher without a sandbox: these tests are about the commands' outcome
/// (tests/sandbox_kernel.rs runs them in the sandbox).
fn unsandboxed() -> Launcher {
    Launcher {
        runplane: env!("CARGO_BIN_EXE_runplane").into(),
        sandbox: None,
        env: Vec::new(),
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A repository with one commit (`a.txt`, `b.txt`, `.gitignore` ignoring `target/`), and an
/// untracked `notes.txt` that was there before the run.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"]);
    git(d, &["config", "user.email", "dev@example.com"]);
    git(d, &["config", "user.name", "Dev"]);
    std::fs::write(d.join("a.txt"), "a\n").unwrap();
    std::fs::write(d.join("b.txt"), "b\n").unwrap();
    std::fs::write(d.join(".gitignore"), "target/\n").unwrap();
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "start"]);
    std::fs::write(d.join("notes.txt"), "mine\n").unwrap();
    dir
}

/// What an agent might do: edit, delete, create, build, commit.
fn agent_works(d: &Path) {
    std::fs::write(d.join("a.txt"), "changed\n").unwrap();
    std::fs::remove_file(d.join("b.txt")).unwrap();
    std::fs::create_dir_all(d.join("src")).unwrap();
    std::fs::write(d.join("src/new.rs"), "fn main() {}\n").unwrap();
    std::fs::create_dir_all(d.join("target")).unwrap();
    std::fs::write(d.join("target/out"), "build\n").unwrap();
}

#[tokio::test]
async fn a_command_reports_its_status_and_output_tail() {
    let dir = tempfile::tempdir().unwrap();
    let finished = run_shell(
        "echo out; echo err >&2; exit 3",
        dir.path(),
        Duration::from_secs(10),
        &unsandboxed(),
    )
    .await
    .unwrap();
    assert_eq!((finished.success, finished.code), (false, Some(3)));
    assert_eq!(finished.output, "out\nerr\n");
    let long = run_shell(
        "head -c 100000 /dev/zero | tr '\\0' x",
        dir.path(),
        Duration::from_secs(10),
        &unsandboxed(),
    )
    .await
    .unwrap();
    assert!(long.success);
    assert!(long.output.starts_with("[runplane: earlier output cut]\n"));
    assert_eq!(
        long.output.len(),
        "[runplane: earlier output cut]\n".len() + OUTPUT_TAIL_BYTES
    );
}

#[tokio::test]
async fn the_time_limit_ends_everything_the_command_started() {
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let finished = run_shell(
        "(sleep 1; touch late) & echo waiting; sleep 30",
        dir.path(),
        Duration::from_millis(300),
        &unsandboxed(),
    )
    .await
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!((finished.success, finished.code), (false, None));
    assert_eq!(
        finished.output,
        "waiting\n[runplane: stopped after the time limit of 0.3 s]"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !dir.path().join("late").exists(),
        "the background job was killed too"
    );
}

#[tokio::test]
async fn the_gate_runs_tests_then_lint_and_says_when_a_command_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let defaults = GateDefaults {
        test_command: Some("echo tests ok".into()),
        lint_command: None,
        limit: Duration::from_secs(10),
    };
    let request = GateRequest {
        run_tests: true,
        run_lint: true,
        test_command: String::new(),
        lint_command: "echo lint failed; exit 1".into(),
    };
    let outcome = run_gate(&request, &defaults, dir.path(), &unsandboxed()).await;
    assert_eq!(
        (outcome.tests_passed, outcome.lint_passed),
        (Some(true), Some(false))
    );
    assert_eq!(
        (outcome.test_output.as_str(), outcome.lint_output.as_str()),
        ("tests ok\n", "lint failed\n")
    );
    assert!(outcome.error.is_empty());
    let no_lint = GateRequest {
        lint_command: String::new(),
        ..request
    };
    let outcome = run_gate(&no_lint, &defaults, dir.path(), &unsandboxed()).await;
    assert_eq!(
        outcome.error,
        "the gate asks for lint but neither the profile nor the worker names a command \
         (runplane work --lint-command)"
    );
}

#[tokio::test]
async fn a_rollback_puts_the_workspace_back_where_the_run_started() {
    let dir = repo();
    let d = dir.path();
    let workspace = Workspace::new(d);
    let start = workspace.start().await.unwrap();
    let head = git(d, &["rev-parse", "HEAD"]);
    agent_works(d);
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "agent"]);
    std::fs::write(d.join("after-commit.txt"), "x\n").unwrap();

    workspace.restore(&start).await.unwrap();
    assert_eq!(std::fs::read_to_string(d.join("a.txt")).unwrap(), "a\n");
    assert_eq!(std::fs::read_to_string(d.join("b.txt")).unwrap(), "b\n");
    assert_eq!(
        std::fs::read_to_string(d.join("notes.txt")).unwrap(),
        "mine\n"
    );
    assert!(!d.join("src/new.rs").exists() && !d.join("after-commit.txt").exists());
    assert!(d.join("target/out").exists(), "ignored build output stays");
    assert_eq!(git(d, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(d, &["status", "--porcelain"]), "?? notes.txt");
}

#[tokio::test]
async fn deliveries_make_a_patch_a_commit_or_a_pushed_branch() {
    // patch: a diff file in the git directory that recreates the change.
    let dir = repo();
    let d = dir.path();
    let workspace = Workspace::new(d);
    let start = workspace.start().await.unwrap();
    agent_works(d);
    let patch = workspace
        .deliver(&start, DeliverMode::Patch, "m", "run-1", "origin")
        .await
        .unwrap()
        .patch_path
        .unwrap();
    assert!(patch.starts_with(d.join(".git")));
    let text = std::fs::read_to_string(&patch).unwrap();
    assert!(
        text.contains("diff --git a/src/new.rs b/src/new.rs"),
        "{text}"
    );
    assert!(
        text.contains("deleted file mode") && !text.contains("target/out"),
        "{text}"
    );
    workspace.restore(&start).await.unwrap();
    git(d, &["apply", patch.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string(d.join("a.txt")).unwrap(),
        "changed\n"
    );

    // commit-local: one commit on the current branch with everything, ignored files aside.
    let commit = workspace
        .deliver(
            &start,
            DeliverMode::CommitLocal,
            "fix: the thing",
            "run-1",
            "origin",
        )
        .await
        .unwrap()
        .commit
        .unwrap();
    assert_eq!(git(d, &["rev-parse", "HEAD"]), commit);
    assert_eq!(git(d, &["log", "-1", "--format=%s"]), "fix: the thing");
    assert_eq!(git(d, &["status", "--porcelain"]), "");

    // Nothing changed since: nothing to deliver.
    let again = workspace.start().await.unwrap();
    let err = workspace
        .deliver(&again, DeliverMode::CommitLocal, "m", "run-1", "origin")
        .await
        .unwrap_err();
    assert!(matches!(err, GitError::Refused(_)), "{err}");
}

/// `repo()` with a bare repository as its `origin`.
fn repo_with_remote() -> (tempfile::TempDir, tempfile::TempDir) {
    let remote = tempfile::tempdir().unwrap();
    git(remote.path(), &["init", "-q", "--bare"]);
    let dir = repo();
    let origin = remote.path().to_str().unwrap();
    git(dir.path(), &["remote", "add", "origin", origin]);
    (remote, dir)
}

#[tokio::test]
async fn a_branch_delivery_pushes_runplane_run_id_to_the_remote() {
    let (remote, dir) = repo_with_remote();
    let workspace = Workspace::new(dir.path());
    let start = workspace.start().await.unwrap();
    agent_works(dir.path());
    let delivered = workspace
        .deliver(&start, DeliverMode::Branch, "feat: x", "run-7", "origin")
        .await
        .unwrap();
    assert_eq!(delivered.branch.as_deref(), Some("runplane/run-7"));
    let pushed = git(remote.path(), &["rev-parse", "runplane/run-7"]);
    assert_eq!(Some(pushed), delivered.commit);
}

#[tokio::test]
async fn a_pr_delivery_without_gh_fails_clearly_after_pushing_the_branch() {
    let has_gh = Command::new("gh").arg("--version").output().is_ok();
    if has_gh {
        return; // this machine has gh: the failure path cannot be shown here
    }
    let (remote, dir) = repo_with_remote();
    let workspace = Workspace::new(dir.path());
    let start = workspace.start().await.unwrap();
    agent_works(dir.path());
    let err = workspace
        .deliver(&start, DeliverMode::Pr, "feat: x", "run-8", "origin")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("pr delivery needs the GitHub CLI `gh` on PATH"),
        "{err}"
    );
    git(remote.path(), &["rev-parse", "runplane/run-8"]);
}
