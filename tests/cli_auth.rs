//! The README's two commands with authentication on: a real `runplane serve` process makes
//! its admin token, the CLI in the same directory finds it, and the token is never in the
//! log or the database in clear. Also the CLI's token precedence and `tokens` commands,
//! and what the operator sees of hostile agent text.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{msg, PATIENCE};
use runplane::cli::connect::Bearer;
use runplane::grpc::pb;
use runplane::grpc::pb::run_service_client::RunServiceClient;
use runplane::grpc::pb::worker_message::Message as In;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A `runplane serve` process in `cwd`, logging (text) to `log`.
struct Served {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops it with SIGTERM and waits, so its log is complete.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn free_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

async fn serve(cwd: &Path, log_name: &str, extra: &[&str]) -> Served {
    serve_on(free_addr(), cwd, log_name, extra).await
}

async fn serve_on(addr: SocketAddr, cwd: &Path, log_name: &str, extra: &[&str]) -> Served {
    let log = cwd.join(log_name);
    let child = Command::new(env!("CARGO_BIN_EXE_runplane"))
        .current_dir(cwd)
        .args([
            "serve",
            "--listen",
            &addr.to_string(),
            "--log-format",
            "text",
        ])
        .args(extra)
        .env("RUST_LOG", "info")
        .env_remove("RUNPLANE_TOKEN")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let probe = SocketAddr::from(([127, 0, 0, 1], addr.port()));
    while tokio::net::TcpStream::connect(probe).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "server did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Served { child, addr, log }
}

/// Runs the CLI in `cwd` with exactly the given extra environment.
fn cli(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_runplane"));
    command
        .current_dir(cwd)
        .args(args)
        .env_remove("RUNPLANE_TOKEN")
        .env_remove("RUNPLANE_TOKEN_FILE")
        .env_remove("RUNPLANE_SERVER");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_ok(output: &Output) {
    assert!(output.status.success(), "failed: {}", stderr(output));
}

fn assert_refused(output: &Output, code: &str) {
    assert!(!output.status.success(), "succeeded: {}", stdout(output));
    assert!(
        stderr(output).starts_with(&format!("error: {code}: ")),
        "{}",
        stderr(output)
    );
}

/// Whether `needle` occurs in any file of `dir` (the database, its WAL) or in `extra`.
fn found_in(files: &[PathBuf], needle: &str) -> Vec<PathBuf> {
    files
        .iter()
        .filter(|path| {
            std::fs::read(path).is_ok_and(|bytes| {
                bytes
                    .windows(needle.len())
                    .any(|window| window == needle.as_bytes())
            })
        })
        .cloned()
        .collect()
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect()
}

#[tokio::test]
async fn a_fresh_serve_makes_an_admin_token_the_cli_in_the_same_directory_uses() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let first = serve(cwd, "first.log", &[]).await;
    let url = first.url();
    let token_file = cwd.join("runplane-data/operator.token");
    let admin = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    assert!(admin.starts_with("rpo_") && admin.len() == 68, "{admin}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // The README's tour: the CLI in the same directory needs no flag.
    let listed = cli(cwd, &["runs", "list", "--server", &url], &[]);
    assert_ok(&listed);
    assert_eq!(stdout(&listed).trim(), "no runs");

    // No token anywhere: refused, and told where a token is looked for.
    let none = cli(
        cwd,
        &["asks", "list", "--server", &url, "--token-file", "missing"],
        &[],
    );
    assert_refused(&none, "UNAUTHENTICATED");
    assert!(stderr(&none).contains("hint: pass an operator token"));

    // Precedence: --token over RUNPLANE_TOKEN over --token-file.
    let wrong = format!("rpo_{}", "0".repeat(64));
    let env_wins = cli(
        cwd,
        &["runs", "list", "--server", &url],
        &[("RUNPLANE_TOKEN", &wrong)],
    );
    assert_refused(&env_wins, "UNAUTHENTICATED");
    let flag_wins = cli(
        cwd,
        &["runs", "list", "--server", &url, "--token", &admin],
        &[("RUNPLANE_TOKEN", &wrong)],
    );
    assert_ok(&flag_wins);

    // tokens create / list / revoke, and what the new token may do.
    let created = cli(
        cwd,
        &[
            "tokens", "create", "--name", "ci", "--role", "viewer", "--server", &url, "--json",
        ],
        &[],
    );
    assert_ok(&created);
    let created: serde_json::Value = serde_json::from_slice(&created.stdout).unwrap();
    let ci = created["secret"].as_str().unwrap().to_string();
    assert_eq!(created["token"]["role"], "viewer");
    let as_ci = [("RUNPLANE_TOKEN", ci.as_str())];
    assert_ok(&cli(cwd, &["runs", "list", "--server", &url], &as_ci));
    let start = [
        "runs",
        "start",
        "--task",
        "t",
        "--agent",
        "a",
        "--project",
        "p",
    ];
    let start: Vec<&str> = start.iter().copied().chain(["--server", &url]).collect();
    assert_refused(&cli(cwd, &start, &as_ci), "PERMISSION_DENIED");
    assert_refused(
        &cli(cwd, &["tokens", "list", "--server", &url], &as_ci),
        "PERMISSION_DENIED",
    );
    let listed = cli(cwd, &["tokens", "list", "--server", &url], &[]);
    assert_ok(&listed);
    let table = stdout(&listed);
    assert!(
        table.contains("admin  admin") && table.contains("ci     viewer"),
        "{table}"
    );
    assert!(!table.contains("rpo_"), "no secret is listed: {table}");
    let started = cli(cwd, &start, &[]);
    assert_ok(&started);
    assert_ok(&cli(
        cwd,
        &["tokens", "revoke", "ci", "--server", &url],
        &[],
    ));
    assert_refused(
        &cli(cwd, &["runs", "list", "--server", &url], &as_ci),
        "UNAUTHENTICATED",
    );
    assert_refused(
        &cli(cwd, &["tokens", "revoke", "ci", "--server", &url], &[]),
        "NOT_FOUND",
    );
    let worker_token = stdout(&started)
        .lines()
        .find_map(|line| line.strip_prefix("worker token:"))
        .map(|t| t.trim().to_string())
        .unwrap();
    first.stop();

    // A restart keeps the file as it is, and its token still works.
    let second = serve(cwd, "second.log", &[]).await;
    let again = std::fs::read_to_string(&token_file).unwrap();
    assert_eq!(again.trim(), admin);
    assert_ok(&cli(cwd, &["runs", "list", "--server", &second.url()], &[]));
    let log = std::fs::read_to_string(&second.log).unwrap();
    assert!(log.contains("admin token file found"), "{log}");
    second.stop();

    // No secret in clear in either log or anywhere in the data directory but the file.
    let first_log = std::fs::read_to_string(cwd.join("first.log")).unwrap();
    assert!(
        first_log.contains("operator.token"),
        "the log says where: {first_log}"
    );
    let mut files = files_in(&cwd.join("runplane-data"));
    files.retain(|path| path != &token_file);
    files.extend([cwd.join("first.log"), cwd.join("second.log")]);
    for secret in [&admin, &ci, &worker_token] {
        assert_eq!(found_in(&files, secret), Vec::<PathBuf>::new(), "{secret}");
    }
    // The hashes are what the database holds.
    let hash = runplane::auth::token::hash(&admin);
    assert!(
        !found_in(&files, &hash).is_empty(),
        "the admin token's hash is stored"
    );
}

#[tokio::test]
async fn auth_off_warns_and_lets_anyone_in() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path(), "serve.log", &["--auth", "off"]).await;
    let listed = cli(
        dir.path(),
        &[
            "runs",
            "list",
            "--server",
            &served.url(),
            "--token-file",
            "missing",
        ],
        &[],
    );
    assert_ok(&listed);
    assert!(!dir.path().join("runplane-data/operator.token").exists());
    let url = served.url();
    served.stop();
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    assert!(log.contains("authentication is OFF"), "{log}");
    assert!(!url.is_empty());
}

#[tokio::test]
async fn plaintext_beyond_loopback_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_addr().port();
    let served = serve_on(
        SocketAddr::from(([0, 0, 0, 0], port)),
        dir.path(),
        "serve.log",
        &[],
    )
    .await;
    served.stop();
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    assert!(
        log.contains("listening beyond loopback without TLS"),
        "{log}"
    );
    let quiet = serve(dir.path(), "loopback.log", &[]).await;
    quiet.stop();
    let log = std::fs::read_to_string(dir.path().join("loopback.log")).unwrap();
    assert!(!log.contains("without TLS"), "{log}");
}

const SPOOF: &str = "git status > .env #\x1b[2K\rgit status > notes.txt";
const SPOOF_SHOWN: &str = r"git status > .env #\x1b[2K\rgit status > notes.txt";
const BIDI: &str = "cat notes.txt \u{202e}vne. tac";
const BIDI_SHOWN: &str = r"cat notes.txt \u{202e}vne. tac";
const TASK: &str = "task\u{0}\x1b[31mred";
const TASK_SHOWN: &str = r"task\x00\x1b[31mred";
const WORKER: &str = "w\x1b[2K\rok";
const WORKER_SHOWN: &str = r"w\x1b[2K\rok";

/// A profile that asks about every Bash command.
const ASK_ALL: &str = r#"
name = "ask-all"
mode = "default"
"#;

#[tokio::test]
async fn hostile_agent_text_is_shown_escaped_and_json_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    std::fs::create_dir(cwd.join("policies")).unwrap();
    std::fs::write(cwd.join("policies/ask-all.toml"), ASK_ALL).unwrap();
    let served = serve(cwd, "serve.log", &["--policy-dir", "policies"]).await;
    let url = served.url();
    let admin = std::fs::read_to_string(cwd.join("runplane-data/operator.token")).unwrap();
    let channel = Channel::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut runs = RunServiceClient::new(InterceptedService::new(
        channel.clone(),
        Bearer::new(Some(admin.trim())).unwrap(),
    ));
    let started = runs
        .start_run(pb::StartRequest {
            task_id: TASK.into(),
            agent_id: "a".into(),
            project_id: "p".into(),
            policy_profile: "ask-all".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let run_id = started.run.unwrap().id;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(msg(In::Attach(pb::Attach {
        run_id: run_id.clone(),
        worker_id: WORKER.into(),
        token: started.worker_token,
        workspace_root: "/work/repo".into(),
    })))
    .await
    .unwrap();
    let mut stream = pb::worker_service_client::WorkerServiceClient::new(channel)
        .session(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap();
    for (call_id, command) in [("c1", SPOOF), ("c2", BIDI)] {
        tx.send(msg(In::ToolCallRequest(pb::ToolCallRequest {
            run_id: run_id.clone(),
            call_id: call_id.into(),
            tool: "Bash".into(),
            command: command.into(),
            ..Default::default()
        })))
        .await
        .unwrap();
        let answer = stream.message().await.unwrap().unwrap();
        match answer.message {
            Some(pb::coordinator_message::Message::ToolCallResponse(r)) => {
                assert_eq!(r.decision, pb::Decision::Ask as i32, "{command:?}");
            }
            other => panic!("expected an ask, got {other:?}"),
        }
    }

    let asks = cli(cwd, &["asks", "list", "--server", &url], &[]);
    assert_ok(&asks);
    let shown = stdout(&asks);
    assert!(shown.contains(SPOOF_SHOWN), "{shown}");
    assert!(shown.contains(BIDI_SHOWN), "{shown}");
    assert!(!shown.contains('\x1b') && !shown.contains('\r') && !shown.contains('\u{202e}'));
    let json = cli(cwd, &["asks", "list", "--server", &url, "--json"], &[]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let commands: Vec<&str> = json["asks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ask| ask["command"].as_str().unwrap())
        .collect();
    assert_eq!(commands, [SPOOF, BIDI]);

    let got = cli(cwd, &["runs", "get", &run_id, "--server", &url], &[]);
    assert_ok(&got);
    assert!(
        stdout(&got).contains(&format!("task:        {TASK_SHOWN}\n")),
        "{}",
        stdout(&got)
    );
    let got_json = cli(
        cwd,
        &["runs", "get", &run_id, "--server", &url, "--json"],
        &[],
    );
    let got_json: serde_json::Value = serde_json::from_slice(&got_json.stdout).unwrap();
    assert_eq!(got_json["task_id"], TASK);

    let events = cli(cwd, &["runs", "events", &run_id, "--server", &url], &[]);
    assert_ok(&events);
    let shown = stdout(&events);
    assert!(
        shown.contains(SPOOF_SHOWN) && shown.contains(TASK_SHOWN),
        "{shown}"
    );
    assert!(!shown.contains('\x1b') && !shown.contains('\0'), "{shown}");

    drop(tx);
    served.stop();
    let log = std::fs::read_to_string(cwd.join("serve.log")).unwrap();
    assert!(log.contains(&format!("worker={WORKER_SHOWN}")), "{log}");
    assert!(!log.contains('\x1b') && !log.contains('\r'), "{log}");
}
