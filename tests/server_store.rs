//! `server::bind_with_store`: the server runs on the store it is given, not on a SQLite
//! file of its own in the data directory.

use std::sync::Arc;

use runplane::cli::connect::Bearer;
use runplane::domain::{Role, Scope};
use runplane::grpc::pb;
use runplane::grpc::pb::run_service_client::RunServiceClient;
use runplane::server::{bind_with_store, ServeConfig};
use runplane::store::{RunStore, SqliteStore, SqliteStoreOptions};
use tokio::sync::oneshot;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

#[tokio::test]
async fn a_server_bound_with_a_store_commits_to_that_store_only() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(SqliteStore::open(SqliteStoreOptions::new(dir.path().join("given.db"))).unwrap());
    let data_dir = dir.path().join("data");
    let mut config = ServeConfig::new(&data_dir);
    config.listen = "127.0.0.1:0".parse().unwrap();
    let bound = bind_with_store(config, Arc::clone(&store) as Arc<dyn RunStore>)
        .await
        .unwrap();
    let addr = bound.local_addr().unwrap();
    let (secret, _) = bound
        .authenticator()
        .create_token("test", Role::Operator, Scope::default(), chrono::Utc::now())
        .await
        .unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(bound.serve(async {
        let _ = stopped.await;
    }));

    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let bearer = Bearer::new(Some(secret.expose())).unwrap();
    let mut runs = RunServiceClient::new(InterceptedService::new(channel, bearer));
    let started = runs
        .start_run(pb::StartRequest {
            task_id: "task-1".into(),
            agent_id: "agent-1".into(),
            project_id: "proj-1".into(),
            policy_profile: "headless-safe-sandbox".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();

    let stored = store.get_run(&started.id).await.unwrap();
    assert_eq!(stored.map(|run| run.task_id), Some("task-1".to_string()));
    assert!(
        !data_dir.exists(),
        "the data directory is not used when the store is given"
    );

    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
