//! `--retain-finished-days` on a real server: the background task deletes the finished
//! runs that completed before the cutoff at start and again on every interval, leaves
//! recent and live runs alone, and counts what it deleted in `runplane_runs_purged_total`.

mod common;
// Both harnesses hold the PostgreSQL test server's module (tests/store_common/postgres.rs);
// each copy starts a server of its own, and only when a test asks for one.
#[allow(clippy::duplicate_mod)]
mod store_common;

use std::sync::Arc;
use std::time::Duration;

use common::{Options, TestServer};
use runplane::grpc::pb;
use runplane::server::Retention;
use runplane::store::{RunStore, SqliteStore, SqliteStoreOptions};
use store_common::{create, event, new_run, transition, Status, Utc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Commits a run created 40 days ago that ended `ended_days_ago` days ago (or is still
/// running, for `None`).
async fn run_of(store: &dyn RunStore, id: &str, ended_days_ago: Option<i64>) {
    let days = chrono::Duration::days;
    let created = Utc::now() - days(40);
    let mut run = new_run(id, "task", "project", "agent", created);
    store
        .commit(create(&run, vec![event(id, 1, "first")]))
        .await
        .unwrap();
    let running = transition(&mut run, Status::Running, created, vec![]);
    store.commit(running).await.unwrap();
    if let Some(ago) = ended_days_ago {
        let ended = transition(&mut run, Status::Completed, Utc::now() - days(ago), vec![]);
        store.commit(ended).await.unwrap();
    }
}

/// GetRun's status code for a run: `Ok` when it is there.
async fn get_code(server: &TestServer, run_id: &str) -> tonic::Code {
    let request = pb::GetRunRequest {
        run_id: run_id.into(),
    };
    match server.runs().await.get_run(request).await {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    }
}

/// Waits (at most 20 s) until GetRun answers NotFound for `run_id`.
async fn until_gone(server: &TestServer, run_id: &str) {
    for _ in 0..1000 {
        if get_code(server, run_id).await == tonic::Code::NotFound {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{run_id} was never deleted");
}

/// Waits (at most 20 s) until `runplane_runs_purged_total` reads `expected`: the task
/// counts a batch just after the store has deleted it.
async fn until_purged_total(server: &TestServer, expected: &str) {
    let mut last = String::new();
    for _ in 0..1000 {
        last = purged_total(server).await;
        if last == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("runplane_runs_purged_total stayed {last}, not {expected}");
}

/// `runplane_runs_purged_total` as `/metrics` serves it.
async fn purged_total(server: &TestServer) -> String {
    let addr = server.metrics_addr.expect("metrics served");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
        .lines()
        .find_map(|line| line.strip_prefix("runplane_runs_purged_total "))
        .unwrap_or_else(|| panic!("no runplane_runs_purged_total in\n{response}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn retention_deletes_old_finished_runs_at_start_and_on_every_interval() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn RunStore> =
        Arc::new(SqliteStore::open(SqliteStoreOptions::new(dir.path().join("given.db"))).unwrap());
    run_of(&*store, "old", Some(10)).await;
    run_of(&*store, "recent", Some(6)).await;
    run_of(&*store, "live", None).await;

    let server = TestServer::with(Options {
        store: Some(Arc::clone(&store)),
        metrics: true,
        retention: Some(Retention {
            keep: Duration::from_secs(7 * 86_400),
            interval: Duration::from_millis(300),
        }),
        ..Options::default()
    })
    .await;
    until_gone(&server, "old").await;
    assert!(store.list_events("old", 0, 100).await.unwrap().is_empty());
    assert_eq!(get_code(&server, "recent").await, tonic::Code::Ok);
    assert_eq!(get_code(&server, "live").await, tonic::Code::Ok);
    assert_eq!(server.events("recent").await.len(), 1);
    until_purged_total(&server, "1").await;

    // A later pass: a run that finished long ago and arrived since goes too.
    run_of(&*store, "late", Some(8)).await;
    until_gone(&server, "late").await;
    until_purged_total(&server, "2").await;
    assert_eq!(get_code(&server, "recent").await, tonic::Code::Ok);
    assert_eq!(get_code(&server, "live").await, tonic::Code::Ok);
}
