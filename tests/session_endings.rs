//! How a run's work and its sessions end: a run waiting for its delivery decides nothing
//! more, every session a log shows attached is shown detached, and a watch ends at the
//! log's real end — after the worker's detach when it was still attached at the run's end.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;

/// Every event a watch of `run_id` from `from_seq` sends, until it ends.
async fn watched(server: &TestServer, run_id: &str, from_seq: u64) -> Vec<(u64, String)> {
    let mut watch = server
        .runs()
        .await
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.into(),
            from_seq,
        })
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    while let Some(event) = tokio::time::timeout(PATIENCE, watch.message())
        .await
        .expect("the watch ends")
        .unwrap()
    {
        seen.push((event.seq, event.r#type));
    }
    seen
}

#[tokio::test]
async fn a_tool_call_while_the_delivery_is_awaited_is_denied() {
    let server = TestServer::start().await;
    let run_id = server
        .start_delivering_run("trusted-mount-autonomous", pb::DeliverMode::Patch)
        .await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.complete().await;
    assert!(matches!(worker.recv().await, Out::DeliverRequest(_)));
    let late = worker.call("late", "Read", "", "src/lib.rs").await;
    assert_eq!(decision(&late), pb::Decision::Deny);
    assert_eq!(late.reason, "the run completed and waits for its delivery");
    assert_eq!(server.get_run(&run_id).await.step_count, 0, "not a step");
}

#[tokio::test]
async fn a_watch_of_a_cancelled_run_ends_with_the_detach_of_its_worker() {
    let server = TestServer::start().await;
    let run_id = server.start_run("").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let live = tokio::spawn({
        let channel = server.channel().await;
        let run_id = run_id.clone();
        async move {
            let mut watch = pb::run_service_client::RunServiceClient::new(channel)
                .watch_run(pb::WatchRunRequest {
                    run_id,
                    from_seq: 0,
                })
                .await
                .unwrap()
                .into_inner();
            let mut seen = Vec::new();
            while let Some(event) = watch.message().await.unwrap() {
                seen.push(event.r#type);
            }
            seen
        }
    });
    server.cancel(&run_id, "stop").await;
    assert!(matches!(worker.recv().await, Out::Cancel(_)));
    // The run is over but its worker is still attached: a watch started now waits for
    // the detach instead of ending at `run.cancelled`.
    let late = tokio::spawn({
        let channel = server.channel().await;
        let run_id = run_id.clone();
        async move {
            let mut watch = pb::run_service_client::RunServiceClient::new(channel)
                .watch_run(pb::WatchRunRequest {
                    run_id,
                    from_seq: 99,
                })
                .await
                .unwrap()
                .into_inner();
            let mut seen = Vec::new();
            while let Some(event) = watch.message().await.unwrap() {
                seen.push(event.r#type);
            }
            seen
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !late.is_finished(),
        "the watch waits for the worker to leave"
    );
    drop(worker);
    let expected = [
        "run.created",
        "run.started",
        "run.worker.attached",
        "run.cancelled",
        "run.worker.detached",
    ];
    let live = tokio::time::timeout(PATIENCE, live).await.unwrap().unwrap();
    assert_eq!(live, expected);
    assert!(tokio::time::timeout(PATIENCE, late)
        .await
        .unwrap()
        .unwrap()
        .is_empty());
    // Replayed from the store, the same log and the same end.
    let replayed: Vec<String> = watched(&server, &run_id, 0)
        .await
        .into_iter()
        .map(|e| e.1)
        .collect();
    assert_eq!(replayed, expected);
    assert!(watched(&server, &run_id, 4)
        .await
        .iter()
        .map(|e| e.0)
        .eq([4, 5]));
}

#[tokio::test]
async fn a_finished_run_closes_its_session_in_the_log_before_its_end() {
    let server = TestServer::start().await;
    let run_id = server.start_run("trusted-mount-autonomous").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.complete().await;
    assert!(matches!(worker.recv().await, Out::Finished(_)));
    drop(worker);
    let events = server.events(&run_id).await;
    let tail: Vec<(&str, &str)> = events[events.len() - 2..]
        .iter()
        .map(|e| {
            let reason = e.attributes.get("reason").map_or("", String::as_str);
            (e.r#type.as_str(), reason)
        })
        .collect();
    assert_eq!(
        tail,
        [
            ("run.worker.detached", "run finished"),
            ("run.completed", "")
        ]
    );
    assert_eq!(watched(&server, &run_id, 0).await.len(), events.len());
}
