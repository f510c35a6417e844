//! `runplane work` driving a real agent binary (Claude Code or Codex, installed by
//! `.ci/run` from npm) against a scripted model stand-in from `tests/agents/`.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use super::{TestServer, PATIENCE};

/// Which real agent a test drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Claude Code, `RUNPLANE_CLAUDE_BIN`, with `tests/agents/fake_anthropic.py`.
    Claude,
    /// Codex, `RUNPLANE_CODEX_BIN`, with `tests/agents/fake_openai.py`.
    Codex,
}

impl Kind {
    fn env_var(self) -> &'static str {
        match self {
            Kind::Claude => "RUNPLANE_CLAUDE_BIN",
            Kind::Codex => "RUNPLANE_CODEX_BIN",
        }
    }

    /// The agent binary, or `None` (said on stderr) when the environment names none.
    pub fn binary(self) -> Option<String> {
        let found = std::env::var(self.env_var()).ok();
        if found.is_none() {
            eprintln!("{} is not set: skipped (.ci/run sets it)", self.env_var());
        }
        found
    }
}

/// What a test may change about `runplane work`.
pub struct WorkOptions {
    /// `--hook-timeout`.
    pub hook_timeout: u64,
    /// `--probe-timeout`.
    pub probe_timeout: u64,
    /// More `runplane work` flags (`--test-command …`, `--remote …`).
    pub flags: Vec<String>,
    /// A program put in front of the agent's command line (for example a wrapper that
    /// drops runplane's hook flags).
    pub wrapper: Option<PathBuf>,
    /// The user's own agent settings: for Claude Code `~/.claude/settings.json`, for Codex
    /// TOML appended to `$CODEX_HOME/config.toml`.
    pub user_settings: Option<String>,
}

impl Default for WorkOptions {
    fn default() -> WorkOptions {
        WorkOptions {
            hook_timeout: 60,
            probe_timeout: 20,
            flags: Vec::new(),
            wrapper: None,
            user_settings: None,
        }
    }
}

/// A run under `runplane work -- <agent> …` with a model stand-in that plays a script.
pub struct AgentRun {
    /// The `runplane work` process.
    pub worker: tokio::process::Child,
    _model: tokio::process::Child,
    /// Holds the script, the agent's HOME and the stand-in's request log.
    pub scratch: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn stand_in(kind: Kind, script: &Path, log_dir: &Path) -> (tokio::process::Child, u16) {
    let port = free_port();
    let file = match kind {
        Kind::Claude => "fake_anthropic.py",
        Kind::Codex => "fake_openai.py",
    };
    let model = tokio::process::Command::new("python3")
        .arg(format!(
            "{}/tests/agents/{file}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg(port.to_string())
        .arg(script)
        .arg(log_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the model stand-in did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (model, port)
}

impl AgentRun {
    /// Starts `runplane work` on `run_id` in `workspace`, the agent's model playing
    /// `script` (the stand-in's script format, see `tests/agents/README.md`).
    pub async fn start(
        kind: Kind,
        binary: &str,
        server: &TestServer,
        run_id: &str,
        workspace: &Path,
        script: serde_json::Value,
        options: WorkOptions,
    ) -> AgentRun {
        let scratch = tempfile::tempdir().unwrap();
        let script_file = scratch.path().join("script.json");
        std::fs::write(&script_file, script.to_string()).unwrap();
        let (model, port) = stand_in(kind, &script_file, scratch.path()).await;
        let home = scratch.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_runplane"));
        worker
            .env("RUNPLANE_SANDBOX", super::sandbox_mode())
            .args(["work", "--run", run_id, "--hook-timeout"])
            .arg(options.hook_timeout.to_string())
            .arg("--probe-timeout")
            .arg(options.probe_timeout.to_string())
            .arg("--server")
            .arg(format!("http://{}", server.addr))
            .arg("--workspace")
            .arg(workspace)
            .args(&options.flags)
            .env("RUNPLANE_WORKER_TOKEN", server.worker_token(run_id))
            .env("HOME", &home)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match kind {
            Kind::Claude => {
                if let Some(settings) = &options.user_settings {
                    std::fs::create_dir_all(home.join(".claude")).unwrap();
                    std::fs::write(home.join(".claude/settings.json"), settings).unwrap();
                }
                worker
                    .args(["--agent", "claude-code", "--"])
                    .args(options.wrapper.iter())
                    .args([
                        binary,
                        "-p",
                        "do it",
                        "--output-format",
                        "stream-json",
                        "--verbose",
                    ])
                    .env("ANTHROPIC_API_KEY", "dummy")
                    .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}"))
                    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
            }
            Kind::Codex => {
                let codex_home = home.join(".codex");
                std::fs::create_dir_all(&codex_home).unwrap();
                std::fs::write(
                    codex_home.join("config.toml"),
                    format!(
                        "model = \"gpt-5.5\"\nmodel_provider = \"fake\"\n\n\
                         [model_providers.fake]\nname = \"fake\"\n\
                         base_url = \"http://127.0.0.1:{port}/v1\"\n\
                         wire_api = \"responses\"\nenv_key = \"FAKE_OPENAI_API_KEY\"\n{}",
                        options.user_settings.as_deref().unwrap_or_default()
                    ),
                )
                .unwrap();
                worker
                    .args(["--agent", "codex", "--"])
                    .args(options.wrapper.iter())
                    .args([
                        binary,
                        "exec",
                        "--json",
                        "--skip-git-repo-check",
                        "--dangerously-bypass-approvals-and-sandbox",
                        "do it",
                    ])
                    .env("CODEX_HOME", &codex_home)
                    .env("FAKE_OPENAI_API_KEY", "dummy");
            }
        }
        AgentRun {
            worker: worker.spawn().unwrap(),
            _model: model,
            scratch,
        }
    }

    /// Waits (at most two minutes) for `runplane work` to end.
    pub async fn finish(self) -> Output {
        let AgentRun {
            worker,
            _model,
            scratch,
        } = self;
        let output = tokio::time::timeout(Duration::from_secs(120), worker.wait_with_output())
            .await
            .expect("runplane work finishes")
            .unwrap();
        drop(scratch);
        output
    }
}

/// Asserts `runplane work` exited 0, showing its output otherwise.
pub fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Waits until the run has a pending ask and returns its request.
pub async fn next_ask(server: &TestServer, run_id: &str) -> super::pb::ToolCallRequest {
    let deadline = tokio::time::Instant::now() + PATIENCE * 3;
    loop {
        if let Some(ask) = server.pending_asks(run_id).await.pop() {
            return ask.request.unwrap();
        }
        assert!(tokio::time::Instant::now() < deadline, "no ask arrived");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// With a hook holding an ask for `touch marker`: a cancel ends `runplane work` and the
/// agent within 5 s, the held tool never runs, and the run is cancelled.
pub async fn a_cancel_ends_the_agent_within_five_seconds(
    server: &TestServer,
    run_id: &str,
    run: AgentRun,
    workspace: &Path,
) {
    next_ask(server, run_id).await;
    server.cancel(run_id, "stop").await;
    let output = tokio::time::timeout(Duration::from_secs(5), run.finish())
        .await
        .expect("runplane work and the agent are gone within 5 s");
    assert!(!output.status.success(), "a cancelled run is not a success");
    assert!(
        !workspace.join("marker").exists(),
        "the held tool never ran"
    );
    assert_eq!(
        super::status(&server.get_run(run_id).await),
        super::pb::RunStatus::Cancelled
    );
}

/// With a hook holding an ask for `touch marker` and `--reattach-for 2`: the server goes
/// away for good, `runplane work` gives up and fails, and the tool never runs. Returns
/// its stderr.
pub async fn a_server_gone_for_good_leaves_the_held_tool_unrun(
    server: &mut TestServer,
    run_id: &str,
    run: AgentRun,
    workspace: &Path,
) -> String {
    next_ask(server, run_id).await;
    server.stop().await;
    let output = tokio::time::timeout(Duration::from_secs(30), run.finish())
        .await
        .expect("runplane work gives up re-attaching after --reattach-for");
    assert!(!output.status.success());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!workspace.join("marker").exists(), "the tool did not run");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `--reattach-for 2`: a worker that gives up soon once its server is gone.
pub fn short_reattach() -> WorkOptions {
    WorkOptions {
        flags: vec!["--reattach-for".into(), "2".into()],
        ..WorkOptions::default()
    }
}
