//! The worker gets its answers in the order of its messages, although a decision or ack
//! waits for its commit and a heartbeat reply or an in-stream error does not.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::worker_message::Message as In;

fn call(run_id: &str, call_id: &str) -> In {
    In::ToolCallRequest(pb::ToolCallRequest {
        run_id: run_id.into(),
        call_id: call_id.into(),
        tool: "Read".into(),
        command: String::new(),
        path: "src/lib.rs".into(),
        ..Default::default()
    })
}

fn result(run_id: &str, call_id: &str) -> In {
    In::ToolCallResult(pb::ToolCallResult {
        run_id: run_id.into(),
        call_id: call_id.into(),
        success: true,
        output: format!("output of {call_id}"),
        ..Default::default()
    })
}

/// What the worker should see, in order, for one round of the script below.
fn expected(i: usize) -> Vec<String> {
    vec![
        format!("decision c{i}"),
        "heartbeat".to_string(),
        "error nope".to_string(),
        format!("ack c{i}"),
        "heartbeat".to_string(),
    ]
}

fn describe(out: Out) -> String {
    match out {
        Out::ToolCallResponse(response) => format!("decision {}", response.call_id),
        Out::Heartbeat(_) => "heartbeat".to_string(),
        Out::Error(error) => format!("error {}", error.call_id),
        Out::ResultAck(ack) => format!("ack {}", ack.call_id),
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn answers_keep_the_order_of_the_messages_that_caused_them() {
    let server = unlimited_server().await;
    let run_id = server.start_run("unlimited").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;

    // Everything sent at once: a call, a heartbeat, a result for a call that was never
    // made (answered with an in-stream error), the call's result and another heartbeat.
    let rounds = 20;
    for i in 0..rounds {
        for message in [
            call(&run_id, &format!("c{i}")),
            In::Heartbeat(pb::Heartbeat {}),
            result(&run_id, "nope"),
            result(&run_id, &format!("c{i}")),
            In::Heartbeat(pb::Heartbeat {}),
        ] {
            worker.send(message).await;
        }
    }
    let mut seen = Vec::new();
    for _ in 0..rounds * expected(0).len() {
        seen.push(describe(worker.recv().await));
    }
    let want: Vec<String> = (0..rounds).flat_map(expected).collect();
    assert_eq!(seen, want);
    assert_eq!(server.get_run(&run_id).await.step_count, rounds as i32);
}
