//! `runplane serve --store postgres://…`: the real binary on a real PostgreSQL database
//! keeps its runs there, across a kill -9 and a restart. Skipped without PostgreSQL unless
//! `RUNPLANE_REQUIRE_POSTGRES=1`.

mod store_common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use runplane::cli::connect::Bearer;
use runplane::grpc::pb;
use runplane::grpc::pb::run_service_client::RunServiceClient;
use store_common::postgres::database;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A `runplane serve` process, killed when dropped.
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn serve(data_dir: &Path, store: &str) -> (Spawned, SocketAddr) {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args(["serve", "--listen", &addr.to_string(), "--store", store])
        .arg("--data-dir")
        .arg(data_dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let spawned = Spawned(child);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "server did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (spawned, addr)
}

async fn runs(
    addr: SocketAddr,
    token: &str,
) -> RunServiceClient<InterceptedService<Channel, Bearer>> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    RunServiceClient::new(InterceptedService::new(
        channel,
        Bearer::new(Some(token)).unwrap(),
    ))
}

#[tokio::test]
async fn runs_live_in_postgres_across_a_kill_and_a_restart() {
    let Some(db) = database().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = serve(dir.path(), &db.url).await;
    let token = std::fs::read_to_string(dir.path().join("operator.token")).unwrap();
    let token = token.trim();
    let started = runs(addr, token)
        .await
        .start_run(pb::StartRequest {
            task_id: "t".into(),
            agent_id: "a".into(),
            project_id: "p".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let run_id = started.run.unwrap().id;
    // No SQLite database was made: the runs are in PostgreSQL.
    assert!(!dir.path().join("runplane.db").exists());
    drop(server);

    let (_server, addr) = serve(dir.path(), &db.url).await;
    let run = runs(addr, token)
        .await
        .get_run(pb::GetRunRequest {
            run_id: run_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(run.id, run_id);
    assert_eq!(run.status(), pb::RunStatus::Pending);
}

#[test]
fn the_store_flag_takes_sqlite_or_a_postgres_url_and_nothing_else() {
    let out = Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args(["serve", "--store", "mysql://x"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("expected sqlite or a postgres:// URL"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args([
            "serve",
            "--store",
            "postgres://u:secret@127.0.0.1:1/db",
            "--synchronous",
            "full",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("synchronous_commit"), "{stderr}");
    assert!(!stderr.contains("secret"), "{stderr}");
}
