//! Replicas as processes: `runplane serve --store postgres://…` started several times on
//! one database, with clients for their APIs and a worker's session.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use runplane::cli::connect::Bearer;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::run_service_client::RunServiceClient;
use runplane::grpc::pb::worker_message::Message as In;
use runplane::grpc::pb::worker_service_client::WorkerServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::Streaming;

/// How long a test waits for any one message.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The profile every replica loads: `rm …` denied, any other command allowed (the mode),
/// every edit asked.
pub const PROFILE: &str = r#"
name = "replicas"
mode = "acceptEdits"

[[rules]]
specifier = { tool = "Bash" }
decision = "deny"
command_allow = ["rm"]

[[rules]]
specifier = { tool = "Edit" }
decision = "ask"
path_allow = ["**"]

[termination]
max_steps = 100000
"#;

/// What every replica of a test shares: the data directory (so they share the admin
/// token file; the first one makes it) and the policy directory.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub url: String,
    pub extra: Vec<String>,
}

impl Cluster {
    pub fn new(url: &str, extra: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("policies")).unwrap();
        std::fs::write(dir.path().join("policies/replicas.toml"), PROFILE).unwrap();
        Cluster {
            dir,
            url: url.to_string(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Starts one more replica and waits until it accepts connections.
    pub async fn replica(&self) -> Replica {
        Replica::spawn(self.dir.path(), &self.url, &self.extra).await
    }

    /// `n` replicas, started one after the other.
    pub async fn replicas(&self, n: usize) -> Vec<Replica> {
        let mut replicas = Vec::new();
        for _ in 0..n {
            replicas.push(self.replica().await);
        }
        replicas
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("operator.token"))
            .unwrap()
            .trim()
            .to_string()
    }
}

/// A `runplane serve` process, killed when dropped.
pub struct Replica {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.signal("CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Replica {
    async fn spawn(data_dir: &Path, url: &str, extra: &[String]) -> Replica {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let policies: PathBuf = data_dir.join("policies");
        let child = Command::new(env!("CARGO_BIN_EXE_runplane"))
            .args(["serve", "--listen", &addr.to_string(), "--store", url])
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--policy-dir")
            .arg(&policies)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let replica = Replica { child, addr };
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "replica did not start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        replica
    }

    /// Sends a signal (`KILL`, `STOP`, `CONT`) to the process.
    pub fn signal(&self, name: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .stderr(Stdio::null())
            .status();
    }

    pub fn kill_9(&mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
    }

    pub async fn runs(&self, token: &str) -> RunServiceClient<InterceptedService<Channel, Bearer>> {
        let channel = Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        RunServiceClient::new(InterceptedService::new(
            channel,
            Bearer::new(Some(token)).unwrap(),
        ))
    }

    /// Starts a run of the test profile; returns its id and worker token.
    pub async fn start_run(&self, token: &str) -> (String, String) {
        let started = self
            .runs(token)
            .await
            .start_run(pb::StartRequest {
                task_id: "task".into(),
                agent_id: "agent".into(),
                project_id: "project".into(),
                policy_profile: "replicas".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        (started.run.unwrap().id, started.worker_token)
    }
}

/// A worker's session with one replica.
pub struct Session {
    pub tx: mpsc::Sender<pb::WorkerMessage>,
    pub rx: Streaming<pb::CoordinatorMessage>,
    pub run_id: String,
}

pub fn msg(message: In) -> pb::WorkerMessage {
    pb::WorkerMessage {
        message: Some(message),
    }
}

impl Session {
    /// Attaches to `run_id` at `replica`; the status if the replica refuses.
    pub async fn attach(
        replica: SocketAddr,
        run_id: &str,
        token: &str,
        worker_id: &str,
    ) -> Result<(Session, pb::Attached), tonic::Status> {
        let (tx, rx) = mpsc::channel(64);
        tx.send(msg(In::Attach(pb::Attach {
            run_id: run_id.into(),
            worker_id: worker_id.into(),
            token: token.into(),
            workspace_root: "/work/repo".into(),
        })))
        .await
        .unwrap();
        let channel = Channel::from_shared(format!("http://{replica}"))
            .unwrap()
            .connect_timeout(Duration::from_secs(2))
            .connect()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let rx = WorkerServiceClient::new(channel)
            .session(ReceiverStream::new(rx))
            .await?
            .into_inner();
        let mut session = Session {
            tx,
            rx,
            run_id: run_id.into(),
        };
        match session.next().await? {
            Some(Out::Attached(attached)) => Ok((session, attached)),
            other => panic!("expected attached, got {other:?}"),
        }
    }

    /// The next message, or the status that ended the stream (a replica that goes silent
    /// for `PATIENCE` counts as gone: `UNAVAILABLE`).
    pub async fn next(&mut self) -> Result<Option<Out>, tonic::Status> {
        let message = tokio::time::timeout(PATIENCE, self.rx.message())
            .await
            .map_err(|_| tonic::Status::unavailable("no message from the replica in time"))??;
        Ok(message.map(|m| m.message.expect("message set")))
    }

    pub async fn recv(&mut self) -> Out {
        match self.next().await {
            Ok(Some(out)) => out,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    pub async fn send(&self, message: In) -> bool {
        self.tx.send(msg(message)).await.is_ok()
    }

    pub async fn request(&self, call_id: &str, tool: &str, command: &str, path: &str) -> bool {
        self.send(In::ToolCallRequest(pb::ToolCallRequest {
            run_id: self.run_id.clone(),
            call_id: call_id.into(),
            tool: tool.into(),
            command: command.into(),
            path: path.into(),
            ..Default::default()
        }))
        .await
    }

    pub async fn report(&self, call_id: &str, output: &str) -> bool {
        self.send(In::ToolCallResult(pb::ToolCallResult {
            run_id: self.run_id.clone(),
            call_id: call_id.into(),
            success: true,
            output: output.into(),
            ..Default::default()
        }))
        .await
    }

    pub async fn complete(&self) -> bool {
        self.send(In::Complete(pb::RunComplete {
            status: pb::RunStatus::Completed as i32,
            output: "done".into(),
            error: String::new(),
        }))
        .await
    }
}

/// Every event of a run, read from `replica`.
pub async fn events(replica: &Replica, token: &str, run_id: &str) -> Vec<pb::RunEvent> {
    let mut client = replica.runs(token).await;
    let mut all = Vec::new();
    loop {
        let page = client
            .list_run_events(pb::ListRunEventsRequest {
                run_id: run_id.into(),
                from_seq: all.len() as u64 + 1,
                page_size: 1000,
            })
            .await
            .unwrap()
            .into_inner()
            .events;
        if page.is_empty() {
            return all;
        }
        all.extend(page);
    }
}

pub async fn get_run(replica: &Replica, token: &str, run_id: &str) -> pb::Run {
    replica
        .runs(token)
        .await
        .get_run(pb::GetRunRequest {
            run_id: run_id.into(),
        })
        .await
        .unwrap()
        .into_inner()
}
