//! Policy versions and reload, end to end on a real server: every decision names the
//! profile version that made it, a run is judged by the version it started with (after a
//! reload and after a restart, even when its file changed or went away), a reload gives
//! new runs the new rules, and a bad file on reload changes nothing.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::policy_service_client::PolicyServiceClient;
use runplane::grpc::pb::worker_message::Message as In;
use runplane::policy::{parse_profile, CompiledProfile, ProfileFormat};
use tonic::Code;

/// The profile `team`: Bash calls starting with `denied` are denied, the rest allowed.
fn team(denied: &str) -> String {
    format!(
        r#"
name = "team"
mode = "acceptEdits"

[[rules]]
specifier = {{ tool = "Bash" }}
decision = "deny"
command_allow = ["{denied}"]
"#
    )
}

/// The version hash of a profile text, computed here, apart from the server.
fn hash_of(text: &str) -> String {
    let profile = parse_profile(text, ProfileFormat::Toml, "team").unwrap();
    CompiledProfile::compile(profile)
        .unwrap()
        .hash()
        .to_string()
}

async fn team_server() -> TestServer {
    TestServer::with(Options {
        policy: Some(team("curl")),
        ..Options::default()
    })
    .await
}

fn policy_file(server: &TestServer) -> std::path::PathBuf {
    server.dir.path().join("policies").join("test.toml")
}

async fn policies(server: &TestServer) -> PolicyServiceClient<runplane::cli::connect::AuthChannel> {
    PolicyServiceClient::new(server.channel().await)
}

async fn served_hash(server: &TestServer) -> String {
    policies(server)
        .await
        .get_profile(pb::GetProfileRequest {
            name: "team".into(),
            hash: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .hash
}

/// The value of an attribute of the first event of that type.
async fn attribute(server: &TestServer, run_id: &str, kind: &str, key: &str) -> String {
    let events = server.events(run_id).await;
    let event = events
        .iter()
        .find(|e| e.r#type == kind)
        .unwrap_or_else(|| panic!("no {kind} in {events:?}"));
    event.attributes.get(key).cloned().unwrap_or_default()
}

/// `(profile, profile_hash)` of every decision in a run's log, in order.
async fn decided_by(server: &TestServer, run_id: &str) -> Vec<(String, String)> {
    server
        .events(run_id)
        .await
        .into_iter()
        .filter(|e| e.r#type.starts_with("run.toolcall.") && e.r#type != "run.toolcall.result")
        .map(|e| {
            (
                e.attributes["profile"].clone(),
                e.attributes["profile_hash"].clone(),
            )
        })
        .collect()
}

async fn bash(worker: &mut Worker, call_id: &str, command: &str) -> pb::Decision {
    decision(&worker.call(call_id, "Bash", command, "").await)
}

#[tokio::test]
async fn each_decision_records_the_profile_and_its_version() {
    let server = team_server().await;
    let hash = hash_of(&team("curl"));
    assert_eq!(hash.len(), 64);
    assert_eq!(served_hash(&server).await, hash);
    let listed = policies(&server)
        .await
        .list_profiles(pb::ListProfilesRequest {})
        .await
        .unwrap()
        .into_inner()
        .profiles;
    assert_eq!(listed.len(), 5);
    assert!(listed.iter().all(|p| p.hash.len() == 64), "{listed:?}");
    assert_eq!(
        listed
            .iter()
            .find(|p| p.name == "team")
            .map(|p| p.hash.as_str()),
        Some(hash.as_str())
    );

    let run_id = server.start_run("team").await;
    assert_eq!(
        attribute(&server, &run_id, "run.created", "policy_hash").await,
        hash
    );
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        bash(&mut worker, "c1", "curl example.com").await,
        pb::Decision::Deny
    );
    assert_eq!(bash(&mut worker, "c2", "ls").await, pb::Decision::Allow);
    assert_eq!(
        decided_by(&server, &run_id).await,
        vec![("team".to_string(), hash.clone()); 2]
    );
}

#[tokio::test]
async fn a_reload_gives_new_runs_the_new_version_and_running_runs_keep_theirs() {
    let server = team_server().await;
    let (old, new) = (hash_of(&team("curl")), hash_of(&team("ls")));
    let running = server.start_run("team").await;
    let (mut old_worker, _) = Worker::attach(&server, &running).await;
    assert_eq!(bash(&mut old_worker, "a1", "ls").await, pb::Decision::Allow);

    // Reformatting alone is no new version.
    std::fs::write(
        policy_file(&server),
        format!("# reformatted\n{}", team("curl").replace(" = ", "=")),
    )
    .unwrap();
    let unchanged = policies(&server)
        .await
        .reload(pb::ReloadRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(unchanged.changes, vec![]);

    std::fs::write(policy_file(&server), team("ls")).unwrap();
    let reloaded = policies(&server)
        .await
        .reload(pb::ReloadRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        reloaded.changes,
        vec![pb::ProfileVersionChange {
            name: "team".into(),
            previous_hash: old.clone(),
            hash: new.clone(),
        }]
    );
    assert_eq!(served_hash(&server).await, new);

    let started = server.start_run("team").await;
    assert_eq!(
        attribute(&server, &started, "run.created", "policy_hash").await,
        new
    );
    let (mut new_worker, _) = Worker::attach(&server, &started).await;
    assert_eq!(bash(&mut new_worker, "b1", "ls").await, pb::Decision::Deny);
    assert_eq!(
        bash(&mut new_worker, "b2", "curl x").await,
        pb::Decision::Allow
    );
    // The running run still has the rules it started with.
    assert_eq!(bash(&mut old_worker, "a2", "ls").await, pb::Decision::Allow);
    assert_eq!(
        bash(&mut old_worker, "a3", "curl x").await,
        pb::Decision::Deny
    );

    let by = |hash: &str, n| vec![("team".to_string(), hash.to_string()); n];
    assert_eq!(decided_by(&server, &running).await, by(&old, 3));
    assert_eq!(decided_by(&server, &started).await, by(&new, 2));
}

#[tokio::test]
async fn a_bad_file_on_reload_leaves_everything_as_it_was() {
    let server = team_server().await;
    let old = hash_of(&team("curl"));
    // A good change beside a bad file: neither is taken.
    std::fs::write(policy_file(&server), team("ls")).unwrap();
    let broken = server.dir.path().join("policies").join("broken.toml");
    std::fs::write(&broken, "mode = [\n").unwrap();
    let refused = policies(&server)
        .await
        .reload(pb::ReloadRequest {})
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused
            .message()
            .starts_with(&format!("{}: ", broken.display())),
        "{}",
        refused.message()
    );
    assert!(
        refused.message().contains("line 1"),
        "{}",
        refused.message()
    );
    assert_eq!(served_hash(&server).await, old);

    let run_id = server.start_run("team").await;
    assert_eq!(
        attribute(&server, &run_id, "run.created", "policy_hash").await,
        old
    );
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(bash(&mut worker, "c1", "ls").await, pb::Decision::Allow);
    assert_eq!(bash(&mut worker, "c2", "curl x").await, pb::Decision::Deny);
}

#[tokio::test]
async fn only_an_admin_may_reload() {
    let server = team_server().await;
    for (name, role) in [("v", pb::Role::Viewer), ("o", pb::Role::Operator)] {
        let token = server.create_token(name, role, &[]).await;
        let refused = PolicyServiceClient::new(server.channel_as(Some(&token)).await)
            .reload(pb::ReloadRequest {})
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::PermissionDenied, "{role:?}");
    }
    let token = server.create_token("a", pb::Role::Admin, &[]).await;
    let reloaded = PolicyServiceClient::new(server.channel_as(Some(&token)).await)
        .reload(pb::ReloadRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reloaded.changes, vec![]);
}

#[tokio::test]
async fn a_restored_run_is_judged_by_its_pinned_version_after_its_file_changed_or_went() {
    let mut server = team_server().await;
    let pinned = hash_of(&team("curl"));
    let run_id = server.start_run("team").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(bash(&mut worker, "c1", "curl x").await, pb::Decision::Deny);
    drop(worker);

    // Changed while the server was down: the restored run keeps its version, a new run
    // gets the file's.
    server.stop().await;
    std::fs::write(policy_file(&server), team("ls")).unwrap();
    server.restart().await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(bash(&mut worker, "c2", "ls").await, pb::Decision::Allow);
    assert_eq!(bash(&mut worker, "c3", "curl y").await, pb::Decision::Deny);
    let fresh = server.start_run("team").await;
    let (mut fresh_worker, _) = Worker::attach(&server, &fresh).await;
    assert_eq!(
        bash(&mut fresh_worker, "f1", "ls").await,
        pb::Decision::Deny
    );
    drop((worker, fresh_worker));

    // Gone altogether: the version comes from the store.
    server.stop().await;
    std::fs::remove_file(policy_file(&server)).unwrap();
    server.restart().await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(bash(&mut worker, "c4", "ls").await, pb::Decision::Allow);
    assert_eq!(bash(&mut worker, "c5", "curl z").await, pb::Decision::Deny);
    assert_eq!(
        decided_by(&server, &run_id).await,
        vec![("team".to_string(), pinned); 5]
    );
}

#[tokio::test]
async fn a_run_whose_pinned_version_is_not_stored_fails_closed() {
    if std::env::var("RUNPLANE_TEST_STORE").as_deref() == Ok("postgres") {
        // The version is removed from the SQLite file by hand below.
        return;
    }
    let mut server = team_server().await;
    let pinned = hash_of(&team("curl"));
    let run_id = server.start_run("team").await;
    server.stop().await;
    let database = server.dir.path().join("data").join("runplane.db");
    let conn = rusqlite::Connection::open(&database).unwrap();
    let removed = conn
        .execute("DELETE FROM policy_versions WHERE hash = ?1", [&pinned])
        .unwrap();
    assert_eq!(removed, 1);
    drop(conn);
    // The file changed too, so the loaded profile is not the pinned version either.
    std::fs::write(policy_file(&server), team("ls")).unwrap();
    server.restart().await;
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert_eq!(
        run.error,
        format!("policy profile \"team\": version {pinned} is not stored")
    );
}

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
    let serve = Serve::spawn(&team("curl")).await;
    let (old, new) = (hash_of(&team("curl")), hash_of(&team("ls")));
    assert_eq!(serve.hash().await, old);
    let mut running = serve.attached_run().await;
    assert_eq!(running.bash("a1", "ls").await, pb::Decision::Allow);

    serve.write_policy("team.toml", &team("ls"));
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
    serve.write_policy("team.toml", &team("curl"));
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
    let serve = Serve::spawn(&team("curl")).await;
    let (old, new) = (hash_of(&team("curl")), hash_of(&team("ls")));
    serve.write_policy("team.toml", &team("ls"));
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
        "changes": [{ "name": "added", "previous_hash": "", "hash": hash_of("name = \"added\"\nmode = \"plan\"\n") }]
    });
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, added);

    serve.write_policy("team.toml", &team("curl"));
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

#[tokio::test]
async fn a_version_no_longer_loaded_is_shown_by_its_hash() {
    let server = team_server().await;
    let (old, new) = (hash_of(&team("curl")), hash_of(&team("ls")));
    let get = async |name: &str, hash: &str| {
        policies(&server)
            .await
            .get_profile(pb::GetProfileRequest {
                name: name.into(),
                hash: hash.into(),
            })
            .await
    };
    // Not stored yet (no run started under it) and loaded: found all the same.
    assert_eq!(get("", &old).await.unwrap().into_inner().hash, old);
    server.start_run("team").await;
    std::fs::write(policy_file(&server), team("ls")).unwrap();
    policies(&server)
        .await
        .reload(pb::ReloadRequest {})
        .await
        .unwrap();

    let shown = get("team", &old).await.unwrap().into_inner();
    assert_eq!(shown.hash, old);
    assert_eq!(shown.rules.len(), 1);
    assert_eq!(shown.rules[0].command_allow, ["curl"]);
    assert_eq!(get("", &new).await.unwrap().into_inner().hash, new);
    assert_eq!(get("team", "").await.unwrap().into_inner().hash, new);
    for (name, hash) in [("other", old.as_str()), ("", "0123")] {
        let err = get(name, hash).await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{name} {hash}");
        assert_eq!(err.message(), format!("version {hash:?} not found"));
    }
}
