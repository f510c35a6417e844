//! A real runplane server on 127.0.0.1:0 with SQLite in a temp dir, and a scripted worker
//! speaking to it through the generated tonic clients.
#![allow(dead_code)]

pub mod agents;
pub mod fake;
pub mod host;
#[path = "../store_common/postgres.rs"]
pub mod postgres;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use runplane::cli::connect::{AuthChannel, Bearer};
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::worker_message::Message as In;
use runplane::server::{bind, ServeConfig};
use tempfile::TempDir;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

pub use pb::access_service_client::AccessServiceClient;
pub use pb::run_service_client::RunServiceClient;
pub use pb::worker_service_client::WorkerServiceClient;

/// How long a test waits for a message it expects.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// The resolution of tokio's timers: a timer rounds its deadline up to the next millisecond,
/// so one due `d` after the clock stopped has fired once the clock has moved `d + TICK`, and
/// not before `d`.
pub const TICK: Duration = Duration::from_millis(1);

/// How long, in real time, a [`StoppedClock`] keeps tokio from moving its clock on its own.
/// The paused part of a test takes milliseconds. When something it waits for never comes,
/// the clock then runs ahead by itself, to the `PATIENCE` timeout or to a late server timer,
/// so a test on a stopped clock also checks when its outcome happened (event times, the
/// clock's reading): an outcome reached that way is at the wrong time and still fails it.
const STOPPED_AT_MOST: Duration = Duration::from_secs(30);

/// Tokio's clock, paused so that it moves only by [`StoppedClock::advance`]: a server timer
/// then fires when the test moves time past its deadline, and the times of events and runs
/// (derived from tokio's clock, see `coordinator::clock`) move with it.
///
/// `tokio::time::pause()` alone is not enough with a real server. A paused runtime with
/// nothing to do jumps its clock to the next timer, and it has nothing to do whenever it
/// waits on the store's writer thread to commit, so a deadline would pass during an
/// unrelated commit. A running `spawn_blocking` task stops those jumps (tokio's documented
/// way to wait on work outside the runtime with time paused), so one runs while this lives.
pub struct StoppedClock {
    /// Dropping it ends the blocking task, and with it the hold on the clock.
    _release: std::sync::mpsc::Sender<()>,
}

impl StoppedClock {
    /// Pauses tokio's clock. Needs the current-thread runtime, `#[tokio::test]`'s default.
    pub fn stop() -> StoppedClock {
        tokio::time::pause();
        let (release, released) = std::sync::mpsc::channel::<()>();
        // Not awaited: the task holds the clock from its spawn until it returns.
        tokio::task::spawn_blocking(move || {
            let _ = released.recv_timeout(STOPPED_AT_MOST);
        });
        StoppedClock { _release: release }
    }

    /// Moves the clock forward by `by`; the timers due by then fire as the runtime goes on.
    pub async fn advance(&self, by: Duration) {
        tokio::time::advance(by).await;
    }
}

/// How long after `earlier` the event `later` was recorded.
pub fn time_between(earlier: &pb::RunEvent, later: &pb::RunEvent) -> Duration {
    let nanos = |event: &pb::RunEvent| {
        let at = event.at.expect("event time set");
        i128::from(at.seconds) * 1_000_000_000 + i128::from(at.nanos)
    };
    let gap = nanos(later) - nanos(earlier);
    Duration::from_nanos(u64::try_from(gap).expect("events in order"))
}

/// A running server and what it needs to be stopped and restarted.
pub struct TestServer {
    /// The bound address.
    pub addr: std::net::SocketAddr,
    /// Holds the data dir and the policy dir.
    pub dir: TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    config: ServeConfig,
    /// The store given in `Options::store`, kept for restarts.
    store: Option<std::sync::Arc<dyn runplane::store::RunStore>>,
    /// The running server's coordinator.
    pub coordinator: Option<runplane::coordinator::Coordinator>,
    /// The admin token `serve` wrote to the data dir on its first start.
    pub admin_token: String,
    /// Where `/metrics` is served, with `Options::metrics`.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The worker token of each run started through this harness, by run id.
    worker_tokens: Mutex<HashMap<String, String>>,
    /// The PostgreSQL database the server runs on, with `RUNPLANE_TEST_STORE=postgres`.
    _database: Option<postgres::TestDatabase>,
}

/// Settings a test may change.
pub struct Options {
    /// A policy file's TOML, written to the policy dir.
    pub policy: Option<String>,
    /// The re-attach grace.
    pub grace: Duration,
    /// The gRPC message limit.
    pub max_message_bytes: usize,
    /// How long a session may take to attach.
    pub attach_timeout: Duration,
    /// A data dir to start from (copied; the original is not changed).
    pub data_dir: Option<std::path::PathBuf>,
    /// Another store than SQLite in the data dir; authentication is then off (no admin
    /// token is written to the data dir).
    pub store: Option<std::sync::Arc<dyn runplane::store::RunStore>>,
    /// Serve `/metrics` on a port of its own.
    pub metrics: bool,
    /// Receivers of the ask webhooks.
    pub ask_webhooks: Vec<String>,
    /// Retention of finished runs.
    pub retention: Option<runplane::server::Retention>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            policy: None,
            grace: Duration::from_secs(60),
            max_message_bytes: runplane::server::DEFAULT_MAX_MESSAGE_BYTES,
            attach_timeout: runplane::server::DEFAULT_ATTACH_TIMEOUT,
            data_dir: None,
            store: None,
            metrics: false,
            ask_webhooks: Vec::new(),
            retention: None,
        }
    }
}

/// With `RUNPLANE_TEST_STORE=postgres`, servers run on a fresh PostgreSQL database (the
/// suites that use this harness then check the session rules on that store); otherwise,
/// and for a test that brings its own store, on SQLite in the data dir.
async fn postgres_database(
    config: &mut ServeConfig,
    own_store: bool,
) -> Option<postgres::TestDatabase> {
    if own_store || std::env::var("RUNPLANE_TEST_STORE").as_deref() != Ok("postgres") {
        return None;
    }
    let database = postgres::database()
        .await
        .expect("RUNPLANE_TEST_STORE=postgres, but no PostgreSQL server could be started");
    config.store = runplane::server::StoreConfig::Postgres {
        url: database.url.clone(),
        lease_ttl: runplane::server::DEFAULT_LEASE_TTL,
    };
    Some(database)
}

impl TestServer {
    pub async fn start() -> TestServer {
        TestServer::with(Options::default()).await
    }

    pub async fn with(options: Options) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        if let Some(source) = &options.data_dir {
            copy_dir(source, &dir.path().join("data"));
        }
        let mut config = ServeConfig::new(dir.path().join("data"));
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.reattach_grace = options.grace;
        config.max_message_bytes = options.max_message_bytes;
        config.attach_timeout = options.attach_timeout;
        config.shutdown_timeout = Duration::from_secs(2);
        if options.metrics {
            config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        }
        config.ask_webhooks = options
            .ask_webhooks
            .iter()
            .map(|url| url.parse().unwrap())
            .collect();
        config.retention = options.retention;
        if options.store.is_some() {
            config.auth = runplane::auth::AuthMode::Off;
        }
        let database = postgres_database(&mut config, options.store.is_some()).await;
        if let Some(policy) = options.policy {
            let policy_dir = dir.path().join("policies");
            std::fs::create_dir_all(&policy_dir).unwrap();
            std::fs::write(policy_dir.join("test.toml"), policy).unwrap();
            config.policy_dir = Some(policy_dir);
        }
        let mut server = TestServer {
            addr: "127.0.0.1:0".parse().unwrap(),
            dir,
            stop: None,
            task: None,
            config,
            store: options.store,
            coordinator: None,
            admin_token: String::new(),
            metrics_addr: None,
            worker_tokens: Mutex::new(HashMap::new()),
            _database: database,
        };
        server.boot().await;
        server
    }

    async fn boot(&mut self) {
        let bound = match &self.store {
            Some(store) => runplane::server::bind_with_store(self.config.clone(), store.clone())
                .await
                .unwrap(),
            None => bind(self.config.clone()).await.unwrap(),
        };
        self.coordinator = Some(bound.coordinator());
        self.admin_token = self.read_admin_token();
        self.addr = bound.local_addr().unwrap();
        self.config.listen = self.addr;
        self.metrics_addr = bound.metrics_addr();
        if let Some(addr) = self.metrics_addr {
            // A restart serves the metrics where they were.
            self.config.metrics_listen = Some(addr);
        }
        let (stop, stopped) = oneshot::channel::<()>();
        self.stop = Some(stop);
        self.task = Some(tokio::spawn(async move {
            bound
                .serve(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        }));
    }

    /// Graceful stop, then a new server on the same data dir and address.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.boot().await;
    }

    pub async fn stop(&mut self) {
        // The coordinator holds the store, and with it the data dir's lock.
        self.coordinator = None;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
    }

    /// The admin token in the data dir (empty when there is none: authentication off).
    fn read_admin_token(&self) -> String {
        std::fs::read_to_string(self.config.data_dir.join("operator.token"))
            .map(|text| text.trim().to_string())
            .unwrap_or_default()
    }

    /// A connection without credentials.
    pub async fn raw_channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// A connection whose requests carry `token` (none when `None`).
    pub async fn channel_as(&self, token: Option<&str>) -> AuthChannel {
        InterceptedService::new(self.raw_channel().await, Bearer::new(token).unwrap())
    }

    /// A connection whose requests carry the admin token (none with authentication off).
    pub async fn channel(&self) -> AuthChannel {
        let token = (!self.admin_token.is_empty()).then_some(self.admin_token.as_str());
        self.channel_as(token).await
    }

    pub async fn runs(&self) -> RunServiceClient<AuthChannel> {
        RunServiceClient::new(self.channel().await)
    }

    /// Workers carry their token in `Attach.token`, so their connection has none.
    pub async fn workers(&self) -> WorkerServiceClient<Channel> {
        WorkerServiceClient::new(self.raw_channel().await)
    }

    /// Calls the access service as the admin.
    pub async fn admin_call<T>(
        &self,
        f: impl AsyncFnOnce(AccessServiceClient<AuthChannel>) -> T,
    ) -> T {
        f(AccessServiceClient::new(self.channel().await)).await
    }

    /// Makes an operator token (as the admin) and returns its secret.
    pub async fn create_token(&self, name: &str, role: pb::Role, teams: &[&str]) -> String {
        self.admin_call(async |mut access| {
            access
                .create_token(pb::CreateTokenRequest {
                    name: name.into(),
                    role: role as i32,
                    teams: teams.iter().map(|t| t.to_string()).collect(),
                    projects: Vec::new(),
                })
                .await
                .unwrap()
                .into_inner()
                .secret
        })
        .await
    }

    /// Starts a run of `team` under `profile` (as the admin) and returns its id.
    pub async fn start_team_run(&self, team: &str, profile: &str) -> String {
        let response = self
            .runs()
            .await
            .start_run(pb::StartRequest {
                task_id: "task-1".into(),
                agent_id: "agent-1".into(),
                project_id: "proj-1".into(),
                team_id: team.into(),
                policy_profile: profile.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let run_id = response.run.unwrap().id;
        self.remember_worker_token(&run_id, &response.worker_token);
        run_id
    }

    /// The worker token `StartRun` returned for a run started through this harness.
    pub fn worker_token(&self, run_id: &str) -> String {
        self.worker_tokens
            .lock()
            .unwrap()
            .get(run_id)
            .cloned()
            .unwrap_or_default()
    }

    /// Remembers a run's worker token, for runs started outside the harness's helpers.
    pub fn remember_worker_token(&self, run_id: &str, token: &str) {
        self.worker_tokens
            .lock()
            .unwrap()
            .insert(run_id.to_string(), token.to_string());
    }

    /// Starts a run under `profile` and returns its id.
    pub async fn start_run(&self, profile: &str) -> String {
        self.start_delivering_run(profile, pb::DeliverMode::Unspecified)
            .await
    }

    /// Starts a run under `profile` that delivers with `mode` and returns its id.
    pub async fn start_delivering_run(&self, profile: &str, mode: pb::DeliverMode) -> String {
        let response = self
            .runs()
            .await
            .start_run(pb::StartRequest {
                task_id: "task-1".into(),
                agent_id: "agent-1".into(),
                project_id: "proj-1".into(),
                policy_profile: profile.into(),
                deliver_mode: mode as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let run_id = response.run.unwrap().id;
        self.remember_worker_token(&run_id, &response.worker_token);
        run_id
    }

    /// An operator's answer to the ask of `call_id`.
    pub async fn resolve(&self, run_id: &str, call_id: &str, decision: pb::Decision, reason: &str) {
        self.runs()
            .await
            .resolve_ask(pb::ResolveAskRequest {
                run_id: run_id.into(),
                call_id: call_id.into(),
                decision: decision as i32,
                reason: reason.into(),
                resolver: String::new(),
                ..Default::default()
            })
            .await
            .unwrap();
    }

    /// Cancels a run as an operator.
    pub async fn cancel(&self, run_id: &str, reason: &str) -> pb::Run {
        self.runs()
            .await
            .cancel_run(pb::CancelRunRequest {
                run_id: run_id.into(),
                reason: reason.into(),
            })
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn get_run(&self, run_id: &str) -> pb::Run {
        self.runs()
            .await
            .get_run(pb::GetRunRequest {
                run_id: run_id.into(),
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// The whole event log of a run.
    pub async fn events(&self, run_id: &str) -> Vec<pb::RunEvent> {
        self.runs()
            .await
            .list_run_events(pb::ListRunEventsRequest {
                run_id: run_id.into(),
                from_seq: 0,
                page_size: 1000,
            })
            .await
            .unwrap()
            .into_inner()
            .events
    }

    /// Pending asks of one run, or of all runs when `run_id` is empty.
    pub async fn pending_asks(&self, run_id: &str) -> Vec<pb::PendingAsk> {
        self.runs()
            .await
            .list_pending_asks(pb::ListPendingAsksRequest {
                run_id: run_id.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .asks
    }

    /// The event types of a run's log, in order.
    pub async fn event_types(&self, run_id: &str) -> Vec<String> {
        self.events(run_id)
            .await
            .into_iter()
            .map(|e| e.r#type)
            .collect()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A worker's side of a session.
pub struct Worker {
    pub tx: mpsc::Sender<pb::WorkerMessage>,
    pub rx: Streaming<pb::CoordinatorMessage>,
    pub run_id: String,
}

pub fn msg(message: In) -> pb::WorkerMessage {
    pb::WorkerMessage {
        message: Some(message),
    }
}

impl Worker {
    /// Opens a session whose first message is `first`.
    pub async fn open(
        server: &TestServer,
        first: In,
    ) -> Result<
        (
            mpsc::Sender<pb::WorkerMessage>,
            Streaming<pb::CoordinatorMessage>,
        ),
        Status,
    > {
        let (tx, rx) = mpsc::channel(64);
        tx.send(msg(first)).await.unwrap();
        let response = server
            .workers()
            .await
            .session(ReceiverStream::new(rx))
            .await?;
        Ok((tx, response.into_inner()))
    }

    /// Attaches to a run and returns the worker and the `Attached` reply.
    pub async fn attach(server: &TestServer, run_id: &str) -> (Worker, pb::Attached) {
        Worker::try_attach(server, run_id, "worker-1")
            .await
            .unwrap()
    }

    pub async fn try_attach(
        server: &TestServer,
        run_id: &str,
        worker_id: &str,
    ) -> Result<(Worker, pb::Attached), Status> {
        let attach = In::Attach(pb::Attach {
            run_id: run_id.into(),
            worker_id: worker_id.into(),
            token: server.worker_token(run_id),
            workspace_root: "/work/repo".into(),
        });
        let (tx, rx) = Worker::open(server, attach).await?;
        let mut worker = Worker {
            tx,
            rx,
            run_id: run_id.into(),
        };
        match worker.next().await? {
            Some(Out::Attached(attached)) => Ok((worker, attached)),
            other => panic!("expected attached, got {other:?}"),
        }
    }

    /// The next message, or the status that ended the stream (`Ok(None)`: ended normally).
    pub async fn next(&mut self) -> Result<Option<Out>, Status> {
        let message = tokio::time::timeout(PATIENCE, self.rx.message())
            .await
            .expect("no message from the server in time")?;
        Ok(message.map(|m| m.message.expect("message set")))
    }

    /// The next message, which must be there.
    pub async fn recv(&mut self) -> Out {
        match self.next().await {
            Ok(Some(out)) => out,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// Reports the agent done, successfully.
    pub async fn complete(&self) {
        self.send(In::Complete(pb::RunComplete {
            status: pb::RunStatus::Completed as i32,
            output: "all done".into(),
            error: String::new(),
        }))
        .await;
    }

    pub async fn send(&self, message: In) {
        self.tx.send(msg(message)).await.unwrap();
    }

    /// Asks for a tool call and returns the first response.
    pub async fn call(
        &mut self,
        call_id: &str,
        tool: &str,
        command: &str,
        path: &str,
    ) -> pb::ToolCallResponse {
        self.call_resolved(call_id, tool, command, path, "").await
    }

    /// Asks for a tool call whose path the worker resolved to `resolved_path`, and returns
    /// the first response.
    pub async fn call_resolved(
        &mut self,
        call_id: &str,
        tool: &str,
        command: &str,
        path: &str,
        resolved_path: &str,
    ) -> pb::ToolCallResponse {
        self.send(In::ToolCallRequest(pb::ToolCallRequest {
            run_id: self.run_id.clone(),
            call_id: call_id.into(),
            tool: tool.into(),
            command: command.into(),
            path: path.into(),
            resolved_path: resolved_path.into(),
            ..Default::default()
        }))
        .await;
        match self.recv().await {
            Out::ToolCallResponse(response) => response,
            other => panic!("expected a tool call response, got {other:?}"),
        }
    }

    /// Reports a result and returns the ack.
    pub async fn result(&mut self, call_id: &str, success: bool, output: &str, cost: f64) -> Out {
        self.send(In::ToolCallResult(pb::ToolCallResult {
            run_id: self.run_id.clone(),
            call_id: call_id.into(),
            success,
            output: output.into(),
            error: String::new(),
            cost_usd: cost,
            duration: None,
        }))
        .await;
        self.recv().await
    }
}

pub fn decision(response: &pb::ToolCallResponse) -> pb::Decision {
    pb::Decision::try_from(response.decision).unwrap()
}

pub fn status(run: &pb::Run) -> pb::RunStatus {
    pb::RunStatus::try_from(run.status).unwrap()
}

/// A profile with small limits, for tests that end runs by limit, stall or time.
/// A server whose profile `unlimited` has no limits and no stall detection: long scripted
/// runs end nothing.
pub async fn unlimited_server() -> TestServer {
    TestServer::with(Options {
        policy: Some(limits_profile("unlimited", "")),
        ..Options::default()
    })
    .await
}

pub fn limits_profile(name: &str, extra: &str) -> String {
    format!(
        r#"
name = "{name}"
mode = "acceptEdits"

[[rules]]
specifier = {{ tool = "Bash" }}
decision = "deny"
command_allow = ["curl"]

[[rules]]
specifier = {{ tool = "Edit" }}
decision = "ask"
path_allow = ["ask/**"]

[termination]
{extra}
"#
    )
}

/// Runs git in `dir` and returns its trimmed stdout; panics with git's stderr on failure.
pub fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository with one commit (`README`, `build/keep`, an empty `src/`), for workers.
pub fn git_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"]);
    git(d, &["config", "user.email", "dev@example.com"]);
    git(d, &["config", "user.name", "Dev"]);
    std::fs::create_dir_all(d.join("build")).unwrap();
    std::fs::write(d.join("build/keep"), "x\n").unwrap();
    std::fs::create_dir_all(d.join("src")).unwrap();
    std::fs::write(d.join("README"), "r\n").unwrap();
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "start"]);
    dir
}

/// Copies the files of `from` into a new directory `to` (one level, as a data dir is).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.path().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// The profile `team`: Bash calls starting with `denied` are denied, the rest allowed.
pub fn team_profile(denied: &str) -> String {
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
pub fn version_of(text: &str) -> String {
    let profile =
        runplane::policy::parse_profile(text, runplane::policy::ProfileFormat::Toml, "team")
            .unwrap();
    runplane::policy::CompiledProfile::compile(profile)
        .unwrap()
        .hash()
        .to_string()
}

/// `--sandbox` for `runplane work` in tests that are not about the sandbox: `on` where
/// the kernel sandbox can run — always under `RUNPLANE_REQUIRE_SANDBOX=1`, which `.ci/run`
/// sets after installing bubblewrap — else `off`, saying so (a fresh machine with only
/// the Rust toolchain has no bubblewrap).
pub fn sandbox_mode() -> &'static str {
    if sandbox_available() {
        "on"
    } else {
        eprintln!("bubblewrap or Landlock is missing here: runplane work runs with --sandbox off");
        "off"
    }
}

/// Whether the kernel sandbox can run here; under `RUNPLANE_REQUIRE_SANDBOX=1` a missing
/// part fails the test, naming it.
pub fn sandbox_available() -> bool {
    let missing = runplane::sandbox::missing();
    if std::env::var_os("RUNPLANE_REQUIRE_SANDBOX").is_some() {
        assert!(
            missing.is_empty(),
            "the sandbox is required here: {missing:?}"
        );
    }
    missing.is_empty()
}
