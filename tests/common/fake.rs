//! `runplane work` with the scripted stand-in agent `tests/agents/fake_claude.py`.

use std::path::Path;

use super::host::{host_root, private};
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
    let agent = fake_agent();
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

/// The scripted stand-in agent `tests/agents/fake_claude.py`, where the sandbox shows it:
/// the checkout's file, or in a clone under `/tmp` a copy on the host (named by its
/// content, so every test shares one and none is stale).
pub fn fake_agent() -> String {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/fake_claude.py");
    if !private(&source) {
        return source.display().to_string();
    }
    let text = std::fs::read(&source).expect("the stand-in agent");
    let root = host_root();
    std::fs::create_dir_all(&root).expect("the host root for sandbox tests");
    let copy = root.join(format!(
        "fake_claude-{:016x}.py",
        xxhash_rust::xxh3::xxh3_64(&text)
    ));
    if !copy.exists() {
        // Written aside and renamed: tests running at once never see half a file.
        let aside = root.join(format!("fake_claude.{}.tmp", std::process::id()));
        std::fs::write(&aside, &text).expect("a copy of the stand-in agent");
        std::fs::rename(&aside, &copy).expect("the copy in place");
    }
    copy.display().to_string()
}
