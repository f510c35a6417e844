//! The request fields that say what a tool really does — `paths`, `url`, `input` — through
//! a real session: judged, recorded in the log, shown with a pending ask, part of what makes
//! a repeated call_id the same call, and restored after a restart.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::worker_message::Message as In;

const PROFILE: &str = r#"
name = "fields"
mode = "default"

[[rules]]
specifier = { tool = "MultiEdit" }
decision = "deny"
path_allow = ["**/.env"]

[[rules]]
specifier = { tool = "MultiEdit" }
decision = "allow"
path_allow = ["src/**"]
"#;

fn request(call_id: &str, tool: &str, paths: &[&str], input: &str) -> pb::ToolCallRequest {
    pb::ToolCallRequest {
        call_id: call_id.into(),
        tool: tool.into(),
        paths: paths.iter().map(|p| p.to_string()).collect(),
        input: input.into(),
        ..Default::default()
    }
}

async fn ask(worker: &mut Worker, request: pb::ToolCallRequest) -> Out {
    worker.send(In::ToolCallRequest(request)).await;
    worker.recv().await
}

fn decision_of(out: Out) -> pb::Decision {
    match out {
        Out::ToolCallResponse(response) => decision(&response),
        other => panic!("expected a decision, got {other:?}"),
    }
}

#[tokio::test]
async fn paths_and_input_are_judged_recorded_shown_and_restored() {
    let mut server = TestServer::with(Options {
        policy: Some(PROFILE.into()),
        ..Options::default()
    })
    .await;
    let run_id = server.start_run("fields").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let input = r#"{"edits":[{"file_path":"src/a.rs"},{"file_path":".env"}]}"#;
    let edit = request("e1", "MultiEdit", &["src/a.rs", ".env"], input);
    assert_eq!(
        decision_of(ask(&mut worker, edit.clone()).await),
        pb::Decision::Deny
    );
    let fine = request("e2", "MultiEdit", &["src/a.rs", "src/b.rs"], "{}");
    assert_eq!(
        decision_of(ask(&mut worker, fine).await),
        pb::Decision::Allow
    );
    let task_input = r#"{"prompt":"rewrite the tests","subagent_type":"general"}"#;
    let task = request("t1", "Task", &[], task_input);
    assert_eq!(decision_of(ask(&mut worker, task).await), pb::Decision::Ask);

    let fetch = pb::ToolCallRequest {
        url: "https://docs.rs/tokio".into(),
        ..request("w1", "WebFetch", &[], "")
    };
    assert_eq!(
        decision_of(ask(&mut worker, fetch).await),
        pb::Decision::Ask
    );

    let events = server.events(&run_id).await;
    let fetched = events
        .iter()
        .find(|e| e.attributes.get("call_id").map(String::as_str) == Some("w1"))
        .unwrap();
    assert_eq!(fetched.attributes["url"], "https://docs.rs/tokio");
    let denied = events
        .iter()
        .find(|e| e.attributes.get("call_id").map(String::as_str) == Some("e1"))
        .unwrap();
    assert_eq!(denied.attributes["paths"], r#"["src/a.rs",".env"]"#);
    assert_eq!(denied.attributes["input"], input);
    let asks = server.pending_asks(&run_id).await;
    assert_eq!(asks[0].request.as_ref().unwrap().input, task_input);

    // The same call_id with other files is another call: refused, not answered.
    let other = request("e1", "MultiEdit", &["src/a.rs"], input);
    match ask(&mut worker, other).await {
        Out::Error(error) => {
            assert_eq!(error.code, "INVALID_ARGUMENT");
            assert!(error.message.starts_with("call_id: e1 was already used"));
        }
        other => panic!("expected an error, got {other:?}"),
    }
    // An empty entry in paths is a bad request.
    match ask(
        &mut worker,
        request("e3", "MultiEdit", &["src/a.rs", ""], ""),
    )
    .await
    {
        Out::Error(error) => assert_eq!(error.message, "paths: an entry is empty"),
        other => panic!("expected an error, got {other:?}"),
    }

    // After a restart the repeat is answered from the restored log, fields and all.
    drop(worker);
    server.restart().await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        decision_of(ask(&mut worker, edit).await),
        pb::Decision::Deny
    );
    let asks = server.pending_asks(&run_id).await;
    assert_eq!(asks[0].request.as_ref().unwrap().input, task_input);
}
