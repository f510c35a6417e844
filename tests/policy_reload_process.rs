//! Policy reload of a `runplane serve` process: SIGHUP, and `runplane policy reload`
//! through `PolicyService.Reload`; a running run keeps its version, a new run gets the new
//! one, a bad file is reported (logged, or printed with exit 1) and changes nothing.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::policy_service_client::PolicyServiceClient;
use runplane::grpc::pb::worker_message::Message as In;

/// A `runplane serve` process with a policy directory, its log in a file.
struct Serve {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    dir: tempfile::TempDir,
}

impl Drop for Serve {
    /// A failing test must not leave a server running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    async fn spawn(policy: &str) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("policies")).unwrap();
        std::fs::write(dir.path().join("policies").join("team.toml"), policy).unwrap();
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_runplane"))
            .args(["serve", "--listen", &addr.to_string()])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--policy-dir")
            .arg(dir.path().join("policies"))
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "server did not start"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        Serve { child, addr, dir }
    }

    fn write_policy(&self, file: &str, text: &str) {
        std::fs::write(self.dir.path().join("policies").join(file), text).unwrap();
    }

    fn hangup(&self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap()
    }

    async fn channel(&self) -> runplane::cli::connect::AuthChannel {
        let token =
            std::fs::read_to_string(self.dir.path().join("data").join("operator.token")).unwrap();
        let channel = tonic::transport::Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let bearer = runplane::cli::connect::Bearer::new(Some(token.trim())).unwrap();
        tonic::service::interceptor::InterceptedService::new(channel, bearer)
    }

    async fn hash(&self) -> String {
        PolicyServiceClient::new(self.channel().await)
            .get_profile(pb::GetProfileRequest {
                name: "team".into(),
                hash: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .hash
    }

    /// Starts a run under `team` and attaches a worker to it.
    async fn attached_run(&self) -> RawSession {
        let started = RunServiceClient::new(self.channel().await)
            .start_run(pb::StartRequest {
                task_id: "t".into(),
                agent_id: "a".into(),
                project_id: "p".into(),
                policy_profile: "team".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let run_id = started.run.unwrap().id;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tx.send(msg(In::Attach(pb::Attach {
            run_id: run_id.clone(),
            worker_id: "w".into(),
            token: started.worker_token,
            workspace_root: "/repo".into(),
        })))
        .await
        .unwrap();
        let channel = tonic::transport::Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut rx = WorkerServiceClient::new(channel)
            .session(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let attached = rx.message().await.unwrap().and_then(|m| m.message);
        assert!(matches!(attached, Some(Out::Attached(_))), "{attached:?}");
        RawSession { run_id, tx, rx }
    }
}

/// A worker's session with a spawned server.
struct RawSession {
    run_id: String,
    tx: tokio::sync::mpsc::Sender<pb::WorkerMessage>,
    rx: tonic::Streaming<pb::CoordinatorMessage>,
}

impl RawSession {
    async fn bash(&mut self, call_id: &str, command: &str) -> pb::Decision {
        self.tx
            .send(msg(In::ToolCallRequest(pb::ToolCallRequest {
                run_id: self.run_id.clone(),
                call_id: call_id.into(),
                tool: "Bash".into(),
                command: command.into(),
                ..Default::default()
            })))
            .await
            .unwrap();
        let reply = tokio::time::timeout(PATIENCE, self.rx.message())
            .await
            .unwrap();
        match reply.unwrap().and_then(|m| m.message) {
            Some(Out::ToolCallResponse(response)) => decision(&response),
            other => panic!("expected a decision, got {other:?}"),
        }
    }
}

/// Waits until `check` holds, at most `PATIENCE`: a SIGHUP is handled in the background.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn sighup_reloads_a_serve_process_and_a_bad_file_is_logged_and_ignored() {
    let serve = Serve::spawn(&team_profile("curl")).await;
    let (old, new) = (
        version_of(&team_profile("curl")),
        version_of(&team_profile("ls")),
    );
    assert_eq!(serve.hash().await, old);
    let mut running = serve.attached_run().await;
    assert_eq!(running.bash("a1", "ls").await, pb::Decision::Allow);

    serve.write_policy("team.toml", &team_profile("ls"));
    serve.hangup();
    eventually("the new version is served", async || {
        serve.hash().await == new
    })
    .await;
    let mut started = serve.attached_run().await;
    assert_eq!(started.bash("b1", "ls").await, pb::Decision::Deny);
    assert_eq!(started.bash("b2", "curl x").await, pb::Decision::Allow);
    assert_eq!(running.bash("a2", "ls").await, pb::Decision::Allow);
    assert_eq!(running.bash("a3", "curl x").await, pb::Decision::Deny);

    // A bad file: logged, naming it, and the versions stay.
    serve.write_policy("team.toml", &team_profile("curl"));
    serve.write_policy("broken.toml", "mode = [\n");
    serve.hangup();
    eventually("the refusal is logged", async || {
        serve.log().contains("policy reload refused")
    })
    .await;
    let log = serve.log();
    let refusal = log
        .lines()
        .find(|l| l.contains("policy reload refused"))
        .unwrap();
    assert!(refusal.contains("broken.toml"), "{refusal}");
    assert_eq!(serve.hash().await, new);
    let mut after = serve.attached_run().await;
    assert_eq!(after.bash("c1", "ls").await, pb::Decision::Deny);
    assert!(log.contains("SIGHUP"), "{log}");
}

/// `runplane policy reload` against `serve`, with its admin token file.
fn reload_cli(serve: &Serve, json: bool) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_runplane"));
    command
        .args(["policy", "reload", "--server"])
        .arg(format!("http://{}", serve.addr))
        .arg("--token-file")
        .arg(serve.dir.path().join("data").join("operator.token"))
        .env_remove("RUNPLANE_TOKEN");
    if json {
        command.arg("--json");
    }
    command.output().unwrap()
}

#[tokio::test]
async fn policy_reload_prints_the_changed_versions_or_the_bad_file() {
    let serve = Serve::spawn(&team_profile("curl")).await;
    let (old, new) = (
        version_of(&team_profile("curl")),
        version_of(&team_profile("ls")),
    );
    serve.write_policy("team.toml", &team_profile("ls"));
    let out = reload_cli(&serve, false);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "reloaded: 1 profile(s) changed\n  team  {} -> {}\n",
            &old[..12],
            &new[..12]
        )
    );
    assert_eq!(serve.hash().await, new);

    serve.write_policy("added.toml", "mode = \"plan\"\n");
    let out = reload_cli(&serve, true);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let added = serde_json::json!({
        "changes": [{ "name": "added", "previous_hash": "", "hash": version_of("name = \"added\"\nmode = \"plan\"\n") }]
    });
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, added);

    serve.write_policy("team.toml", &team_profile("curl"));
    serve.write_policy("broken.toml", "mode = [\n");
    let out = reload_cli(&serve, false);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let broken = serve.dir.path().join("policies").join("broken.toml");
    assert!(
        stderr.starts_with(&format!("error: INVALID_ARGUMENT: {}: ", broken.display())),
        "{stderr}"
    );
    assert_eq!(serve.hash().await, new);
}
