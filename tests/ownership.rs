//! Ownership of a run: the process that runs a run's actor owns it, and when the store
//! says another process has taken the run over (a fenced commit), this one lets go at once:
//! the answer that commit carried never reaches the worker, the worker is told to
//! re-attach (UNAVAILABLE), and the run is not restored here behind the new owner's back:
//! an operator's command is refused; a worker attaching here takes the run back.

mod common;

use std::sync::Arc;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::worker_message::Message as In;
use runplane::store::{MemoryStore, RunStore};

#[tokio::test]
async fn a_fenced_run_is_let_go_and_its_answer_never_sent() {
    let store = Arc::new(MemoryStore::new());
    let server = TestServer::with(Options {
        store: Some(Arc::clone(&store) as Arc<dyn RunStore>),
        ..Options::default()
    })
    .await;
    let coordinator = server.coordinator.clone().unwrap();
    let run_id = server.start_run("trusted-mount-autonomous").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let first = worker.call("c1", "Read", "", "src/lib.rs").await;
    assert_eq!(decision(&first), pb::Decision::Allow);
    assert_eq!(coordinator.owned_runs(), vec![run_id.clone()]);
    let logged = store.list_events(&run_id, 1, 100).await.unwrap().len();

    store.fence(&run_id);
    worker
        .send(In::ToolCallRequest(pb::ToolCallRequest {
            run_id: run_id.clone(),
            call_id: "c2".into(),
            tool: "Read".into(),
            path: "src/main.rs".into(),
            ..Default::default()
        }))
        .await;
    let status = worker
        .next()
        .await
        .expect_err("the stream ends without an answer");
    assert_eq!(
        status.code(),
        tonic::Code::Unavailable,
        "{}",
        status.message()
    );
    assert_eq!(
        status.message(),
        "another server owns this run now; re-attach"
    );
    assert_eq!(
        store.list_events(&run_id, 1, 100).await.unwrap().len(),
        logged
    );
    assert!(coordinator.owned_runs().is_empty());

    // While the other process holds it, an operator's command here is refused as
    // retryable: this process does not take a run over for an operator.
    let refused = server
        .runs()
        .await
        .cancel_run(pb::CancelRunRequest {
            run_id: run_id.clone(),
            reason: "stop".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::Unavailable,
        "{}",
        refused.message()
    );
    assert!(coordinator.owned_runs().is_empty());

    // A worker that attaches here takes the run over, and repeats its unanswered call.
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let second = worker.call("c2", "Read", "", "src/main.rs").await;
    assert_eq!(decision(&second), pb::Decision::Allow);
    assert_eq!(coordinator.owned_runs(), vec![run_id.clone()]);
}
