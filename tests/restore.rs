//! Graceful restarts of an in-process server on the same data directory.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::worker_message::Message as In;

#[tokio::test]
async fn shutdown_tells_the_worker_and_the_next_server_resumes_the_run() {
    let mut server = TestServer::with(Options {
        policy: Some(limits_profile("asks", "max_steps = 10")),
        ..Options::default()
    })
    .await;
    let run_id = server.start_run("asks").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.call("r1", "Read", "", "a").await;
    assert_eq!(
        decision(&worker.call("e1", "Edit", "", "ask/x").await),
        pb::Decision::Ask
    );

    server.restart().await;
    let err = worker.next().await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");

    let pending = server.pending_asks("").await;
    assert_eq!(pending.len(), 1);
    let (mut worker, attached) = Worker::attach(&server, &run_id).await;
    assert!(attached.resumed);
    assert_eq!(attached.run.unwrap().step_count, 2);
    assert_eq!(attached.limits.unwrap().max_steps, 10);
    let repeat = worker.call("e1", "Edit", "", "ask/x").await;
    assert_eq!(
        decision(&repeat),
        pb::Decision::Ask,
        "still waiting for an operator"
    );
}

#[tokio::test]
async fn a_run_whose_profile_file_was_removed_keeps_its_pinned_version() {
    let mut server = TestServer::with(Options {
        policy: Some(limits_profile("gone", "")),
        ..Options::default()
    })
    .await;
    let run_id = server.start_run("gone").await;
    std::fs::remove_file(server.dir.path().join("policies/test.toml")).unwrap();
    server.restart().await;
    // The version the run started with is in the store (policy_versions.rs has the rest,
    // and the run whose version is not stored either).
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Pending);
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        decision(&worker.call("c1", "Bash", "curl x", "").await),
        pb::Decision::Deny
    );
}

#[tokio::test]
async fn a_delivery_outstanding_at_restart_is_requested_again() {
    let mut server = TestServer::start().await;
    let run_id = server
        .start_delivering_run("trusted-mount-autonomous", pb::DeliverMode::Branch)
        .await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.complete().await;
    assert!(matches!(worker.recv().await, Out::DeliverRequest(_)));
    server.restart().await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    match worker.recv().await {
        Out::DeliverRequest(deliver) => assert_eq!(deliver.mode, pb::DeliverMode::Branch as i32),
        other => panic!("expected the delivery request again, got {other:?}"),
    }
    worker
        .send(In::DeliveryResult(pb::DeliveryResult {
            success: true,
            branch_name: "runplane/t".into(),
            ..Default::default()
        }))
        .await;
    match worker.recv().await {
        Out::Finished(finished) => {
            assert_eq!(
                finished.run.unwrap().status,
                pb::RunStatus::Completed as i32
            )
        }
        other => panic!("expected finished, got {other:?}"),
    }
}

#[tokio::test]
async fn shutdown_ends_watch_streams_with_unavailable() {
    let mut server = TestServer::start().await;
    let run_id = server.start_run("").await;
    let mut watch = server
        .runs()
        .await
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.clone(),
            from_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().r#type,
        "run.created"
    );
    server.stop().await;
    let err = tokio::time::timeout(PATIENCE, watch.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
}
