//! A data dir written by an earlier build (`tests/fixtures/datadir-v4/`, schema version 4)
//! must still load: every run's events read back exactly as that build showed them
//! (`expected.json`), and its live run restores — re-attach with its worker token, the
//! decisions it made repeat, its pending ask is still waiting for the operator.
//!
//! The fixture was made with `RUNPLANE_WRITE_FIXTURE=tests/fixtures/datadir-v4 cargo test
//! --test data_dir_fixture -- --ignored write_the_fixture`; it must not be rewritten by
//! a build that changes how events are stored, or it proves nothing.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::worker_message::Message as In;
use serde_json::{json, Value};

const PROFILE: &str = r#"
name = "fixture"
mode = "default"

[[rules]]
specifier = { tool = "Bash" }
decision = "deny"
command_allow = ["rm"]

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"

[[rules]]
specifier = { tool = "WebFetch" }
decision = "allow"
domain_allow = ["docs.rs"]

[[rules]]
specifier = { tool = "mcp__github__*" }
decision = "deny"

[quality_gate]
require_tests_pass = true

[termination]
stall_detection = true
stall_threshold = 3
# A hundred years: the asks carry a deadline and still wait whenever the test runs.
ask_timeout_seconds = 3153600000
"#;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/datadir-v4")
}

/// Every run's events as the API shows them: type and attributes, by run label.
async fn all_events(server: &TestServer, runs: &BTreeMap<String, String>) -> Value {
    let mut by_label = serde_json::Map::new();
    for (label, run_id) in runs {
        let events: Vec<Value> = server
            .events(run_id)
            .await
            .into_iter()
            .map(|e| json!({"seq": e.seq, "type": e.r#type, "attributes": e.attributes}))
            .collect();
        by_label.insert(label.clone(), Value::Array(events));
    }
    Value::Object(by_label)
}

fn call(run_id: &str, call_id: &str, tool: &str) -> pb::ToolCallRequest {
    pb::ToolCallRequest {
        run_id: run_id.into(),
        call_id: call_id.into(),
        tool: tool.into(),
        ..Default::default()
    }
}

async fn ask(worker: &mut Worker, request: pb::ToolCallRequest) -> pb::ToolCallResponse {
    worker.send(In::ToolCallRequest(request)).await;
    match worker.recv().await {
        Out::ToolCallResponse(response) => response,
        other => panic!("expected a decision, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "writes the fixture; run by hand only, with a build that stores events as before"]
async fn write_the_fixture() {
    let target =
        PathBuf::from(std::env::var("RUNPLANE_WRITE_FIXTURE").expect("RUNPLANE_WRITE_FIXTURE=DIR"));
    let mut server = TestServer::with(Options {
        policy: Some(PROFILE.into()),
        ..Options::default()
    })
    .await;
    let mut runs = BTreeMap::new();

    // delivered: allow, deny, a result, the gate passes, a local commit.
    let id = server
        .start_delivering_run("fixture", pb::DeliverMode::CommitLocal)
        .await;
    let (mut w, _) = Worker::attach(&server, &id).await;
    w.call("c1", "Bash", "git status", "").await;
    w.result("c1", true, "clean", 0.25).await;
    w.call("c2", "Bash", "git status && rm -rf /", "").await;
    w.complete().await;
    assert!(matches!(w.recv().await, Out::QualityGateRequest(_)));
    w.send(In::QualityGateResult(pb::QualityGateResult {
        tests_passed: Some(true),
        test_output: "ok".into(),
        ..Default::default()
    }))
    .await;
    assert!(matches!(w.recv().await, Out::DeliverRequest(_)));
    w.send(In::DeliveryResult(pb::DeliveryResult {
        success: true,
        commit_hash: "0123abcd".into(),
        ..Default::default()
    }))
    .await;
    assert!(matches!(w.recv().await, Out::Finished(_)));
    runs.insert("delivered".to_string(), id);

    // gate-failed: the gate fails.
    let id = server.start_run("fixture").await;
    let (mut w, _) = Worker::attach(&server, &id).await;
    w.complete().await;
    assert!(matches!(w.recv().await, Out::QualityGateRequest(_)));
    w.send(In::QualityGateResult(pb::QualityGateResult {
        tests_passed: Some(false),
        test_output: "1 failed".into(),
        ..Default::default()
    }))
    .await;
    assert!(matches!(w.recv().await, Out::Finished(_)));
    runs.insert("gate-failed".to_string(), id);

    // cancelled while an ask waits.
    let id = server.start_run("fixture").await;
    let (mut w, _) = Worker::attach(&server, &id).await;
    let mut write = call(&id, "a1", "Write");
    write.path = ".env".into();
    ask(&mut w, write).await;
    server
        .runs()
        .await
        .cancel_run(pb::CancelRunRequest {
            run_id: id.clone(),
            reason: "not today".into(),
        })
        .await
        .unwrap();
    assert!(matches!(w.recv().await, Out::Cancel(_)));
    runs.insert("cancelled".to_string(), id);

    // stalled: the same output until the tracker ends the run.
    let id = server.start_run("fixture").await;
    let (mut w, _) = Worker::attach(&server, &id).await;
    for n in 0..3 {
        let call_id = format!("s{n}");
        w.call(&call_id, "Bash", "cat missing", "").await;
        w.result(&call_id, false, "no such file", 0.0).await;
    }
    assert!(matches!(w.recv().await, Out::Terminate(_)));
    runs.insert("stalled".to_string(), id);

    // live: every request field, an ask the operator allowed, one still waiting; then the
    // worker goes away and the run waits for it.
    let id = server.start_run("fixture").await;
    let (mut w, _) = Worker::attach(&server, &id).await;
    let mut fetch = call(&id, "l1", "WebFetch");
    fetch.url = "https://docs.rs/tokio".into();
    fetch.input = r#"{"url":"https://docs.rs/tokio","prompt":"read"}"#.into();
    ask(&mut w, fetch).await;
    let mut patch = call(&id, "l2", "apply_patch");
    patch.paths = vec!["src/a.rs".into(), ".env".into()];
    ask(&mut w, patch).await;
    ask(&mut w, call(&id, "l3", "mcp__github__create_issue")).await;
    let mut env = call(&id, "l4", "Write");
    env.path = ".env".into();
    ask(&mut w, env).await;
    server
        .runs()
        .await
        .resolve_ask(pb::ResolveAskRequest {
            run_id: id.clone(),
            call_id: "l4".into(),
            decision: pb::Decision::Allow as i32,
            reason: "fine".into(),
            resolver: "ops on call".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(matches!(w.recv().await, Out::ToolCallResponse(_)));
    w.result("l4", true, "written", 0.5).await;
    let mut secret = call(&id, "l5", "Write");
    secret.path = "secrets.txt".into();
    ask(&mut w, secret).await;
    drop(w);
    runs.insert("live".to_string(), id);

    // never attached.
    runs.insert("pending".to_string(), server.start_run("fixture").await);

    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let expected = json!({
        "runs": runs,
        "tokens": runs.values().map(|id| (id.clone(), server.worker_token(id))).collect::<BTreeMap<_, _>>(),
        "events": all_events(&server, &runs).await,
    });
    server.stop().await;
    copy_dir(&server.dir.path().join("data"), &target);
    let _ = std::fs::remove_file(target.join("runplane.db.lock"));
    std::fs::write(
        target.join("expected.json"),
        serde_json::to_string_pretty(&expected).unwrap(),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_data_dir_written_by_an_earlier_build_loads_and_its_live_run_restores() {
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir().join("expected.json")).unwrap(),
    )
    .unwrap();
    let runs: BTreeMap<String, String> = serde_json::from_value(expected["runs"].clone()).unwrap();
    let server = TestServer::with(Options {
        policy: Some(PROFILE.into()),
        data_dir: Some(fixture_dir()),
        ..Options::default()
    })
    .await;
    // Every stored event reads back as the earlier build showed it, after the restart's
    // own events (the live run's grace starts over).
    let now = all_events(&server, &runs).await;
    for (label, events) in expected["events"].as_object().unwrap() {
        let read = now[label].as_array().unwrap();
        let before = events.as_array().unwrap();
        assert_eq!(&read[..before.len()], &before[..], "run {label}");
    }
    let statuses: BTreeMap<&str, pb::RunStatus> = {
        let mut statuses = BTreeMap::new();
        for (label, id) in &runs {
            statuses.insert(label.as_str(), status(&server.get_run(id).await));
        }
        statuses
    };
    use pb::RunStatus::*;
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        [
            ("cancelled", Cancelled),
            ("delivered", Completed),
            ("gate-failed", Completed),
            ("live", Running),
            ("pending", Pending),
            ("stalled", Failed)
        ]
    );

    let live = &runs["live"];
    server.remember_worker_token(live, expected["tokens"][live].as_str().unwrap());
    let mut waiting: Vec<String> = server
        .pending_asks(live)
        .await
        .into_iter()
        .map(|ask| ask.request.unwrap().call_id)
        .collect();
    waiting.sort();
    assert_eq!(
        waiting,
        ["l2", "l5"],
        "the asks still wait for the operator"
    );
    let (mut worker, attached) = Worker::attach(&server, live).await;
    assert!(attached.resumed);
    // Decisions made before repeat as they were.
    for (call_id, tool, want) in [
        ("l1", "WebFetch", pb::Decision::Allow),
        ("l3", "mcp__github__create_issue", pb::Decision::Deny),
        ("l4", "Write", pb::Decision::Allow),
    ] {
        let mut request = call(live, call_id, tool);
        match call_id {
            "l1" => {
                request.url = "https://docs.rs/tokio".into();
                request.input = r#"{"url":"https://docs.rs/tokio","prompt":"read"}"#.into();
            }
            "l4" => request.path = ".env".into(),
            _ => {}
        }
        let response = ask(&mut worker, request).await;
        assert_eq!(decision(&response), want, "{call_id}: {}", response.reason);
    }
    server
        .runs()
        .await
        .resolve_ask(pb::ResolveAskRequest {
            run_id: live.clone(),
            call_id: "l5".into(),
            decision: pb::Decision::Deny as i32,
            reason: "no".into(),
            resolver: String::new(),
            ..Default::default()
        })
        .await
        .unwrap();
    match worker.recv().await {
        Out::ToolCallResponse(response) => {
            assert_eq!(
                (response.call_id.as_str(), decision(&response)),
                ("l5", pb::Decision::Deny)
            );
        }
        other => panic!("expected l5's decision, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_decision_the_log_cannot_read_back_is_refused_naming_its_run_and_seq() {
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir().join("expected.json")).unwrap(),
    )
    .unwrap();
    let live = expected["runs"]["live"].as_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture_dir(), dir.path());
    // The live run's first decision (seq 4, an allow) now says a word no build knows.
    let conn = rusqlite::Connection::open(dir.path().join("runplane.db")).unwrap();
    let changed = conn
        .execute(
            "UPDATE event_journal SET attributes = replace(attributes, '\"decision\":\"allow\"', \
             '\"decision\":\"maybe\"') WHERE seq = 4 AND run_no = (SELECT run_no FROM runs WHERE id = ?1)",
            [&live],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    let mut config = runplane::server::ServeConfig::new(dir.path());
    config.listen = "127.0.0.1:0".parse().unwrap();
    let policies = tempfile::tempdir().unwrap();
    std::fs::write(policies.path().join("fixture.toml"), PROFILE).unwrap();
    config.policy_dir = Some(policies.path().to_path_buf());
    let refused = runplane::server::bind(config)
        .await
        .err()
        .map(|e| e.to_string());
    let expected = format!(
        "corrupt store data: run {live}: event 4: event \"run.toolcall.approved\": attribute \
         \"decision\" cannot be read: \"maybe\""
    );
    assert!(
        refused.as_deref().is_some_and(|e| e.contains(&expected)),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_live_run_from_before_versions_whose_profile_is_gone_fails_at_restore() {
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir().join("expected.json")).unwrap(),
    )
    .unwrap();
    let live = expected["runs"]["live"].as_str().unwrap().to_string();
    // Its log pins no version, and no profile "fixture" is loaded: nothing to judge by.
    let server = TestServer::with(Options {
        data_dir: Some(fixture_dir()),
        ..Options::default()
    })
    .await;
    let run = server.get_run(&live).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert_eq!(run.error, "policy profile \"fixture\" no longer exists");
}
