//! `runplane work` with the scripted stand-in agent `tests/agents/fake_claude.py`.

use super::{git_repo, sandbox_mode, TestServer};

/// Whether python3 (the stand-in's interpreter) is missing, saying so.
pub fn python3_missing() -> bool {
    let missing = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err();
    if missing {
        eprintln!("python3 is not installed: skipped (.ci/run has it)");
    }
    missing
}

/// Runs `runplane work` with `flags` and `env` on a fresh repository, the stand-in
/// playing `script`; its output and the repository.
pub async fn fake_work(
    server: &TestServer,
    flags: &[&str],
    env: &[(&str, &str)],
    script: serde_json::Value,
) -> (std::process::Output, tempfile::TempDir) {
    let repo = git_repo();
    let script_file = repo.path().join(".git/script.json");
    std::fs::write(&script_file, script.to_string()).unwrap();
    let agent = format!("{}/tests/agents/fake_claude.py", env!("CARGO_MANIFEST_DIR"));
    let output = runplane_work()
        .arg("work")
        .args(flags)
        .arg("--server")
        .arg(format!("http://{}", server.addr))
        .arg("--workspace")
        .arg(repo.path())
        .args(["--", "python3", &agent, "-p", "do it"])
        .envs(env.iter().copied())
        .env("FAKE_AGENT_SCRIPT", &script_file)
        .env_remove("RUNPLANE_TOKEN")
        .output()
        .await
        .unwrap();
    (output, repo)
}

/// `runplane`, for `runplane work`, in the sandbox where it can run.
pub fn runplane_work() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_runplane"));
    command.env("RUNPLANE_SANDBOX", sandbox_mode());
    command
}
