//! A run with more calls than the server keeps in memory: the oldest decided calls are read
//! back from the store when the worker names them again, before and after a restart, and
//! a repeat is still answered, not decided a second time.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::worker_message::Message as In;

/// More than the 256 calls a run keeps whole in memory.
const CALLS: usize = 300;

/// Reads that the profile allows, one per call id.
async fn decide_many(worker: &mut Worker) {
    for i in 0..CALLS {
        let response = worker
            .call(&format!("c{i}"), "Read", "", &format!("src/f{i}.rs"))
            .await;
        assert_eq!(
            decision(&response),
            pb::Decision::Allow,
            "{}",
            response.reason
        );
    }
}

/// The number of decision events for one call id in the run's log.
async fn decisions_of(server: &TestServer, run_id: &str, call_id: &str) -> usize {
    server
        .events(run_id)
        .await
        .iter()
        .filter(|e| e.r#type.starts_with("run.toolcall.") && e.r#type != "run.toolcall.result")
        .filter(|e| e.attributes.get("call_id").map(String::as_str) == Some(call_id))
        .count()
}

async fn the_oldest_calls_are_known(server: &TestServer, worker: &mut Worker, run_id: &str) {
    // A repeat of the first call: the same answer, no second decision, no step counted.
    let steps = server.get_run(run_id).await.step_count;
    let repeat = worker.call("c0", "Read", "", "src/f0.rs").await;
    assert_eq!(decision(&repeat), pb::Decision::Allow);
    assert_eq!(decisions_of(server, run_id, "c0").await, 1);
    assert_eq!(server.get_run(run_id).await.step_count, steps);

    // The same old id for another call is refused, as for a recent one.
    worker
        .send(In::ToolCallRequest(pb::ToolCallRequest {
            run_id: run_id.into(),
            call_id: "c1".into(),
            tool: "Bash".into(),
            command: "rm -rf /".into(),
            ..Default::default()
        }))
        .await;
    match worker.recv().await {
        Out::Error(error) => assert_eq!(
            error.message,
            "call_id: c1 was already used for a different call (a Read call)"
        ),
        other => panic!("expected an error, got {other:?}"),
    }

    // A result for an old allowed call is recorded once; its repeat only acknowledged.
    match worker.result("c2", true, "contents", 0.0).await {
        Out::ResultAck(ack) => assert_eq!(ack.call_id, "c2"),
        other => panic!("expected an ack, got {other:?}"),
    }
    assert!(matches!(
        worker.result("c2", true, "contents", 0.0).await,
        Out::ResultAck(_)
    ));
    let results = server
        .events(run_id)
        .await
        .iter()
        .filter(|e| e.r#type == "run.toolcall.result")
        .filter(|e| e.attributes.get("call_id").map(String::as_str) == Some("c2"))
        .count();
    assert_eq!(results, 1);
}

#[tokio::test]
async fn calls_older_than_the_recent_ones_are_read_back_from_the_store() {
    let server = unlimited_server().await;
    let run_id = server.start_run("unlimited").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    decide_many(&mut worker).await;
    the_oldest_calls_are_known(&server, &mut worker, &run_id).await;
    // A new id is still decided as new.
    let fresh = worker.call("fresh", "Read", "", "src/new.rs").await;
    assert_eq!(decision(&fresh), pb::Decision::Allow);
    assert_eq!(server.get_run(&run_id).await.step_count, CALLS as i32 + 1);
}

#[tokio::test]
async fn after_a_restart_the_oldest_calls_are_still_known() {
    let mut server = unlimited_server().await;
    let run_id = server.start_run("unlimited").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    decide_many(&mut worker).await;
    drop(worker);
    server.restart().await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    the_oldest_calls_are_known(&server, &mut worker, &run_id).await;
}
