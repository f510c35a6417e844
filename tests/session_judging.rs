//! Judging through a real server: the worker-resolved path in a session and in Evaluate,
//! tool names in any case, and long lines judged without holding up anyone else.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::policy_service_client::PolicyServiceClient;
use runplane::grpc::pb::worker_message::Message as In;
use std::time::Duration;
use tokio::sync::mpsc;

const TRUSTED: &str = "trusted-mount-autonomous";
const SAFE: &str = "headless-safe-sandbox";

/// A line that takes today's judge a good half second in a debug build (2,000 pipes: the
/// cost grows faster than the length), far longer than the quick calls below take, and
/// well under the 64 KiB cap on commands.
fn hostile_line() -> String {
    "a|".repeat(2000)
}

/// Git status calls a worker makes while the long lines are judged.
const QUICK_CALLS: usize = 20;

/// A hang guard for a long line's answer: generous, because the judge's speed depends on
/// the machine's load. Not a performance bound.
const HOSTILE_PATIENCE: Duration = Duration::from_secs(120);

/// Sends a long line on `worker` and waits for its answer.
async fn call_hostile(worker: &mut Worker, call_id: &str) -> pb::ToolCallResponse {
    worker
        .send(In::ToolCallRequest(pb::ToolCallRequest {
            call_id: call_id.into(),
            tool: "Bash".into(),
            command: hostile_line(),
            ..Default::default()
        }))
        .await;
    let message = tokio::time::timeout(HOSTILE_PATIENCE, worker.rx.message())
        .await
        .expect("the long line is answered in time")
        .expect("stream ok")
        .and_then(|m| m.message);
    match message {
        Some(Out::ToolCallResponse(response)) => response,
        other => panic!("expected a tool call response, got {other:?}"),
    }
}

/// The two tests that judge long lines take turns: each wants the cores for itself.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn attribute<'a>(event: &'a pb::RunEvent, key: &str) -> Option<&'a str> {
    event.attributes.get(key).map(String::as_str)
}

#[tokio::test]
async fn a_session_judges_the_resolved_path_too_and_logs_it() {
    let mut server = TestServer::start().await;
    let run_id = server.start_run(TRUSTED).await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;

    // `link -> /etc` inside /work/repo: lexically inside, really outside.
    let out = worker
        .call_resolved("c1", "Edit", "", "link/passwd", "/etc/passwd")
        .await;
    assert_eq!(decision(&out), pb::Decision::Ask, "{}", out.reason);
    assert!(
        out.reason
            .starts_with("the resolved path \"/etc/passwd\" of \"link/passwd\" decided"),
        "{}",
        out.reason
    );
    let inside = worker
        .call_resolved("c2", "Edit", "", "src/a.rs", "/work/repo/src/a.rs")
        .await;
    assert_eq!(decision(&inside), pb::Decision::Allow, "{}", inside.reason);
    let unresolved = worker.call("c3", "Edit", "", "link/passwd").await;
    assert_eq!(decision(&unresolved), pb::Decision::Allow);

    let events = server.events(&run_id).await;
    let by_call = |call_id: &str| {
        events
            .iter()
            .find(|e| attribute(e, "call_id") == Some(call_id))
            .unwrap_or_else(|| panic!("no event for {call_id}"))
    };
    assert_eq!(by_call("c1").r#type, "run.toolcall.asked");
    assert_eq!(
        attribute(by_call("c1"), "resolved_path"),
        Some("/etc/passwd")
    );
    assert_eq!(attribute(by_call("c1"), "path"), Some("link/passwd"));
    // Not given, not recorded: logs of workers that do not resolve are unchanged.
    assert_eq!(attribute(by_call("c3"), "resolved_path"), None);

    let asks = server.pending_asks(&run_id).await;
    assert_eq!(asks.len(), 1);
    let request = asks[0].request.as_ref().expect("request");
    assert_eq!(request.resolved_path, "/etc/passwd");

    // The same call_id with another resolved path is another call, also after a restart
    // (the calls are rebuilt from the log).
    for restart in [false, true] {
        if restart {
            server.restart().await;
            worker = Worker::attach(&server, &run_id).await.0;
        }
        let again = worker
            .call_resolved("c1", "Edit", "", "link/passwd", "/etc/passwd")
            .await;
        assert_eq!(decision(&again), pb::Decision::Ask, "restart {restart}");
        worker
            .send(In::ToolCallRequest(pb::ToolCallRequest {
                call_id: "c1".into(),
                tool: "Edit".into(),
                path: "link/passwd".into(),
                ..Default::default()
            }))
            .await;
        match worker.recv().await {
            Out::Error(error) => {
                assert_eq!(error.code, "INVALID_ARGUMENT", "restart {restart}");
                assert!(
                    error.message.contains("different call"),
                    "{}",
                    error.message
                );
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn evaluate_takes_what_a_session_takes_and_no_more() {
    let server = TestServer::start().await;
    let mut policy = PolicyServiceClient::new(server.channel().await);
    let over = "x".repeat(64 * 1024 + 1);
    for (field, request) in [
        (
            "command",
            pb::EvaluateRequest {
                command: over.clone(),
                ..Default::default()
            },
        ),
        (
            "input",
            pb::EvaluateRequest {
                input: over.clone(),
                ..Default::default()
            },
        ),
        (
            "url",
            pb::EvaluateRequest {
                url: over.clone(),
                ..Default::default()
            },
        ),
    ] {
        let request = pb::EvaluateRequest {
            tool: "Bash".into(),
            ..request
        };
        let err = policy.evaluate(request).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            err.message(),
            format!("{field}: at most 65536 bytes, got 65537")
        );
    }
    let many = pb::EvaluateRequest {
        tool: "Edit".into(),
        paths: vec!["a".into(); 1025],
        ..Default::default()
    };
    let err = policy.evaluate(many).await.unwrap_err();
    assert_eq!(err.message(), "paths: at most 1024 entries, got 1025");
    let multi = pb::EvaluateRequest {
        profile: TRUSTED.into(),
        tool: "Edit".into(),
        paths: vec!["src/a.rs".into(), "/etc/passwd".into()],
        workspace_root: "/work/repo".into(),
        ..Default::default()
    };
    let verdict = policy.evaluate(multi).await.unwrap().into_inner();
    assert_ne!(
        verdict.decision(),
        pb::Decision::Allow,
        "{}",
        verdict.reason
    );
}

#[tokio::test]
async fn evaluate_judges_the_resolved_path_too() {
    let server = TestServer::start().await;
    let mut policy = PolicyServiceClient::new(server.channel().await);
    let request = |resolved_path: &str| pb::EvaluateRequest {
        profile: TRUSTED.into(),
        tool: "Edit".into(),
        path: "link/passwd".into(),
        workspace_root: "/work/repo".into(),
        resolved_path: resolved_path.into(),
        ..Default::default()
    };
    let lexical = policy.evaluate(request("")).await.expect("evaluate");
    assert_eq!(lexical.get_ref().decision(), pb::Decision::Allow);
    let resolved = policy
        .evaluate(request("/etc/passwd"))
        .await
        .expect("evaluate")
        .into_inner();
    assert_eq!(
        resolved.decision(),
        pb::Decision::Ask,
        "{}",
        resolved.reason
    );
    assert!(
        resolved.reason.contains("resolved path"),
        "{}",
        resolved.reason
    );
}

/// `bash` is Bash: judged by Bash's rules, part by part, in a session and in Evaluate.
#[tokio::test]
async fn a_tool_name_in_another_case_is_judged_as_the_tool() {
    let server = TestServer::start().await;
    let run_id = server.start_run(SAFE).await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let rm = worker.call("c1", "bash", "rm -rf /", "").await;
    assert_eq!(decision(&rm), pb::Decision::Deny, "{}", rm.reason);
    let chained = worker
        .call("c2", "BASH", "git status && rm -rf /", "")
        .await;
    assert_eq!(decision(&chained), pb::Decision::Deny, "{}", chained.reason);
    let env = worker.call("c3", "EDIT", "", ".env").await;
    assert_ne!(decision(&env), pb::Decision::Allow, "{}", env.reason);

    let mut policy = PolicyServiceClient::new(server.channel().await);
    let verdict = policy
        .evaluate(pb::EvaluateRequest {
            tool: "bash".into(),
            command: "git status && rm -rf /".into(),
            ..Default::default()
        })
        .await
        .expect("evaluate")
        .into_inner();
    assert_eq!(verdict.decision(), pb::Decision::Deny, "{}", verdict.reason);
    assert_eq!(verdict.part, "rm -rf /");
}

/// Git status calls on `worker`, answered while long lines are judged elsewhere (their
/// answers arrive on `done`, in any order relative to these). Judging is bounded by the
/// policy's budget to milliseconds, so which comes first is not a property to assert; what
/// holds is that every call on every session is answered, correctly, while long lines are
/// in flight on the blocking pool.
async fn quick_calls_are_answered(worker: &mut Worker, done: &mut mpsc::UnboundedReceiver<()>) {
    for i in 0..QUICK_CALLS {
        let call_id = format!("quick-{i}");
        let response = worker.call(&call_id, "Bash", "git status", "").await;
        assert_eq!(
            decision(&response),
            pb::Decision::Allow,
            "{}",
            response.reason
        );
    }
    while done.try_recv().is_ok() {}
}

#[tokio::test]
async fn sessions_are_answered_while_a_long_line_is_judged() {
    let _turn = HEAVY.lock().await;
    let server = TestServer::start().await;
    let (done_tx, mut done) = mpsc::unbounded_channel();
    let mut hostile = Vec::new();
    for i in 0..2 {
        let run_id = server.start_run(SAFE).await;
        let (mut worker, _) = Worker::attach(&server, &run_id).await;
        let done_tx = done_tx.clone();
        hostile.push(tokio::spawn(async move {
            let response = call_hostile(&mut worker, &format!("hostile-{i}")).await;
            let _ = done_tx.send(());
            response
        }));
    }
    let run_id = server.start_run(SAFE).await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    quick_calls_are_answered(&mut worker, &mut done).await;
    for task in hostile {
        let response = task.await.expect("hostile worker");
        assert_eq!(
            decision(&response),
            pb::Decision::Deny,
            "{}",
            response.reason
        );
    }
}

#[tokio::test]
async fn a_session_is_answered_while_evaluate_judges_a_long_line() {
    let _turn = HEAVY.lock().await;
    let server = TestServer::start().await;
    let mut policy = PolicyServiceClient::new(server.channel().await);
    let (done_tx, mut done) = mpsc::unbounded_channel();
    let hostile = tokio::spawn(async move {
        let verdict = policy
            .evaluate(pb::EvaluateRequest {
                tool: "Bash".into(),
                command: hostile_line(),
                ..Default::default()
            })
            .await;
        let _ = done_tx.send(());
        verdict
    });
    let run_id = server.start_run(SAFE).await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    quick_calls_are_answered(&mut worker, &mut done).await;
    let verdict = tokio::time::timeout(HOSTILE_PATIENCE, hostile)
        .await
        .expect("evaluate answered in time")
        .expect("evaluate task")
        .expect("evaluate")
        .into_inner();
    assert_eq!(verdict.decision(), pb::Decision::Deny, "{}", verdict.reason);
}

#[tokio::test]
async fn a_repeat_must_be_the_same_call_down_to_its_input() {
    let server = TestServer::start().await;
    let run_id = server.start_run("trusted-mount-autonomous").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let call = |input: &str| pb::ToolCallRequest {
        run_id: run_id.clone(),
        call_id: "c1".into(),
        tool: "Read".into(),
        path: "src/lib.rs".into(),
        input: input.into(),
        ..Default::default()
    };
    worker.send(In::ToolCallRequest(call(r#"{"a":1}"#))).await;
    let first = match worker.recv().await {
        Out::ToolCallResponse(response) => response,
        other => panic!("expected a decision, got {other:?}"),
    };
    assert_eq!(decision(&first), pb::Decision::Allow);
    // The same call again: the same answer. Another input under the same id: refused.
    worker.send(In::ToolCallRequest(call(r#"{"a":1}"#))).await;
    assert!(matches!(worker.recv().await, Out::ToolCallResponse(r) if r == first));
    worker.send(In::ToolCallRequest(call(r#"{"a":2}"#))).await;
    match worker.recv().await {
        Out::Error(error) => assert_eq!(
            error.message,
            "call_id: c1 was already used for a different call (a Read call)"
        ),
        other => panic!("expected an error, got {other:?}"),
    }
}
