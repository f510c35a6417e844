//! The eight session rules of docs/PROTOCOL.md against a real server, one test per behaviour.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::worker_message::Message as In;

#[tokio::test]
async fn attach_runs_the_run_and_decides_by_profile() {
    let server = TestServer::start().await;
    let run_id = server.start_run("headless-safe-sandbox").await;
    assert_eq!(
        status(&server.get_run(&run_id).await),
        pb::RunStatus::Pending
    );

    let (mut worker, attached) = Worker::attach(&server, &run_id).await;
    let run = attached.run.unwrap();
    assert_eq!(status(&run), pb::RunStatus::Running);
    assert!(!attached.resumed);
    assert_eq!(attached.limits.unwrap().max_steps, 50);

    let read = worker.call("c1", "Read", "", "src/lib.rs").await;
    assert_eq!(decision(&read), pb::Decision::Allow);
    assert_eq!(read.call_id, "c1");
    assert_eq!(read.run_id, run_id);
    let rm = worker
        .call("c2", "Bash", "git status && rm -rf /", "")
        .await;
    assert_eq!(decision(&rm), pb::Decision::Deny);
    let env = worker.call("c3", "Edit", "", "/etc/hosts").await;
    assert_eq!(decision(&env), pb::Decision::Ask);

    let run = server.get_run(&run_id).await;
    assert_eq!(run.step_count, 3);
    assert_eq!(
        server.event_types(&run_id).await,
        [
            "run.created",
            "run.started",
            "run.worker.attached",
            "run.toolcall.approved",
            "run.toolcall.denied",
            "run.toolcall.asked"
        ]
    );
}

fn limits(name: &str, extra: &str) -> Options {
    Options {
        policy: Some(limits_profile(name, extra)),
        ..Options::default()
    }
}

async fn expect_terminate(worker: &mut Worker) -> pb::Terminate {
    match worker.recv().await {
        Out::Terminate(terminate) => terminate,
        other => panic!("expected terminate, got {other:?}"),
    }
}

#[tokio::test]
async fn attach_to_unknown_or_finished_run_is_unauthenticated() {
    let server = TestServer::start().await;
    // No run, so no worker token for it.
    let err = Worker::try_attach(&server, "no-such-run", "w")
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");

    let run_id = server.start_run("").await;
    let mut runs = server.runs().await;
    runs.cancel_run(pb::CancelRunRequest {
        run_id: run_id.clone(),
        reason: "not needed".into(),
    })
    .await
    .unwrap();
    // The run's own token expired with the run.
    let err = Worker::try_attach(&server, &run_id, "w")
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    assert_eq!(
        err.message(),
        format!("worker token expired: run {run_id} has ended")
    );
}

#[tokio::test]
async fn a_second_attach_takes_over_and_the_first_stream_is_told() {
    let server = TestServer::start().await;
    let run_id = server.start_run("").await;
    let (mut first, _) = Worker::attach(&server, &run_id).await;
    first.call("c1", "Read", "", "a").await;
    let (mut second, attached) = Worker::try_attach(&server, &run_id, "worker-2")
        .await
        .unwrap();
    assert!(attached.resumed);
    assert_eq!(attached.run.unwrap().step_count, 1);
    let err = first.next().await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Aborted);
    assert!(err.message().contains("worker-2"), "{}", err.message());
    let again = second.call("c1", "Read", "", "a").await;
    assert_eq!(decision(&again), pb::Decision::Allow);
    assert_eq!(server.get_run(&run_id).await.step_count, 1);
}

#[tokio::test]
async fn a_repeated_call_id_gets_the_same_decision_and_counts_once() {
    let server = TestServer::start().await;
    let run_id = server.start_run("headless-safe-sandbox").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let first = worker.call("same", "Bash", "curl x", "").await;
    let second = worker.call("same", "Bash", "curl x", "").await;
    assert_eq!(first, second);
    assert_eq!(decision(&first), pb::Decision::Deny);
    assert_eq!(server.get_run(&run_id).await.step_count, 1);
    let denied = server
        .event_types(&run_id)
        .await
        .into_iter()
        .filter(|t| t == "run.toolcall.denied")
        .count();
    assert_eq!(denied, 1);
}

#[tokio::test]
async fn step_limit_denies_the_next_call_and_times_the_run_out() {
    let server = TestServer::with(limits("steps", "max_steps = 2")).await;
    let run_id = server.start_run("steps").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        decision(&worker.call("c1", "Read", "", "a").await),
        pb::Decision::Allow
    );
    assert_eq!(
        decision(&worker.call("c2", "Read", "", "b").await),
        pb::Decision::Allow
    );
    let third = worker.call("c3", "Read", "", "c").await;
    assert_eq!(decision(&third), pb::Decision::Deny);
    assert_eq!(third.reason, "step limit reached (2 steps)");
    let terminate = expect_terminate(&mut worker).await;
    assert_eq!(terminate.status, pb::RunStatus::Timeout as i32);
    assert_eq!(terminate.reason, "step limit reached (2 steps)");
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Timeout);
    assert_eq!(run.step_count, 2);
    assert_eq!(run.error, "step limit reached (2 steps)");
    let later = worker.call("c4", "Read", "", "d").await;
    assert_eq!(decision(&later), pb::Decision::Deny);
    assert_eq!(later.reason, "run is not running");
}

#[tokio::test]
async fn reaching_max_cost_on_a_result_ends_the_run_at_once() {
    let server = TestServer::with(limits("cost", "max_cost = 1.0")).await;
    let run_id = server.start_run("cost").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.call("c1", "Read", "", "a").await;
    match worker.result("c1", true, "one", 0.6).await {
        Out::ResultAck(ack) => {
            assert_eq!(ack.call_id, "c1");
            assert_eq!(ack.step_count, 1);
            assert!((ack.cost_usd - 0.6).abs() < 1e-9);
        }
        other => panic!("expected ack, got {other:?}"),
    }
    worker.call("c2", "Read", "", "b").await;
    match worker.result("c2", true, "two", 0.5).await {
        Out::ResultAck(ack) => assert!((ack.cost_usd - 1.1).abs() < 1e-9),
        other => panic!("expected ack, got {other:?}"),
    }
    let terminate = expect_terminate(&mut worker).await;
    assert_eq!(terminate.status, pb::RunStatus::Timeout as i32);
    assert_eq!(terminate.reason, "cost limit reached ($1)");
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Timeout);
    assert!((run.cost_usd - 1.1).abs() < 1e-9);
}

/// The run's time limit, one second from its start, on a stopped clock moved by the test.
#[tokio::test]
async fn time_limit_fires_while_the_worker_is_silent() {
    let server = TestServer::with(limits("time", "timeout_seconds = 1")).await;
    let clock = StoppedClock::stop();
    let run_id = server.start_run("time").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let limit = std::time::Duration::from_secs(1);

    clock.advance(limit - TICK).await;
    expect_still_running(&mut worker).await;
    clock.advance(2 * TICK).await;
    let terminate = expect_terminate(&mut worker).await;
    assert_eq!(terminate.status, pb::RunStatus::Timeout as i32);
    assert_eq!(terminate.reason, "time limit reached (1 s)");
    assert_eq!(
        status(&server.get_run(&run_id).await),
        pb::RunStatus::Timeout
    );
    let events = server.events(&run_id).await;
    let started = events.iter().find(|e| e.r#type == "run.started").unwrap();
    let timeout = events.last().unwrap();
    assert_eq!(timeout.r#type, "run.timeout");
    assert_eq!(time_between(started, timeout), limit + TICK);
}

/// Before a deadline: the worker's heartbeat is answered, and nothing came before the
/// answer (a terminate or a final deny would have).
async fn expect_still_running(worker: &mut Worker) {
    worker.send(In::Heartbeat(pb::Heartbeat {})).await;
    match worker.recv().await {
        Out::Heartbeat(reply) => assert_eq!(reply.status, pb::RunStatus::Running as i32),
        other => panic!("expected a heartbeat reply, got {other:?}"),
    }
}

#[tokio::test]
async fn stall_is_detected_after_exactly_threshold_non_progress_results() {
    let server = TestServer::with(limits(
        "stall",
        "stall_detection = true\nstall_threshold = 3",
    ))
    .await;
    let run_id = server.start_run("stall").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    for (i, output) in ["same", "same", "same"].iter().enumerate() {
        let call_id = format!("c{i}");
        worker.call(&call_id, "Bash", "make", "").await;
        match worker.result(&call_id, true, output, 0.0).await {
            Out::ResultAck(ack) => assert_eq!(ack.call_id, call_id),
            other => panic!("expected ack, got {other:?}"),
        }
    }
    // The first "same" was progress; two repeats are two non-progress steps: not yet.
    worker.call("c3", "Read", "", "x").await;
    worker.result("c3", true, "read", 0.0).await;
    let terminate = expect_terminate(&mut worker).await;
    assert_eq!(terminate.status, pb::RunStatus::Failed as i32);
    assert_eq!(terminate.reason, "stall detected");
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert_eq!(run.error, "stall detected");
    let types = server.event_types(&run_id).await;
    assert!(
        types.contains(&"run.stall_detected".to_string()),
        "{types:?}"
    );
}

async fn resolve(
    server: &TestServer,
    run_id: &str,
    call_id: &str,
    decision: pb::Decision,
) -> Result<pb::ToolCallResponse, tonic::Status> {
    server
        .runs()
        .await
        .resolve_ask(pb::ResolveAskRequest {
            run_id: run_id.into(),
            call_id: call_id.into(),
            decision: decision as i32,
            reason: String::new(),
            resolver: "alice".into(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

#[tokio::test]
async fn ask_resolved_allow_sends_the_final_decision_and_accepts_the_result() {
    let server = TestServer::with(limits("asks", "")).await;
    let run_id = server.start_run("asks").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let asked = worker.call("e1", "Edit", "", "ask/file.rs").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);

    let pending = server.pending_asks(&run_id).await;
    assert_eq!(pending.len(), 1);
    let request = pending[0].request.clone().unwrap();
    assert_eq!(
        (request.call_id.as_str(), request.path.as_str()),
        ("e1", "ask/file.rs")
    );
    assert!(pending[0].deadline.is_some());

    let answer = resolve(&server, &run_id, "e1", pb::Decision::Allow)
        .await
        .unwrap();
    assert_eq!(decision(&answer), pb::Decision::Allow);
    // The identity is the token's name; the client's resolver text is only a note.
    assert_eq!(answer.reason, "allow by admin");
    let events = server.events(&run_id).await;
    let resolved = events
        .iter()
        .find(|e| e.r#type == "run.toolcall.resolved")
        .unwrap();
    assert_eq!(resolved.attributes["by"], "admin");
    assert_eq!(resolved.attributes["note"], "alice");
    assert!(!resolved.attributes.contains_key("resolver"));
    match worker.recv().await {
        Out::ToolCallResponse(final_response) => {
            assert_eq!(final_response.call_id, "e1");
            assert_eq!(decision(&final_response), pb::Decision::Allow);
        }
        other => panic!("expected the final decision, got {other:?}"),
    }
    assert!(matches!(
        worker.result("e1", true, "edited", 0.0).await,
        Out::ResultAck(_)
    ));
    assert_eq!(
        server.get_run(&run_id).await.step_count,
        1,
        "the resolution counts no step"
    );
    let again = resolve(&server, &run_id, "e1", pb::Decision::Deny)
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::FailedPrecondition);
}

#[tokio::test]
async fn ask_resolved_deny_refuses_the_result() {
    let server = TestServer::with(limits("asks", "")).await;
    let run_id = server.start_run("asks").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.call("e1", "Edit", "", "ask/file.rs").await;
    resolve(&server, &run_id, "e1", pb::Decision::Deny)
        .await
        .unwrap();
    match worker.recv().await {
        Out::ToolCallResponse(r) => assert_eq!(decision(&r), pb::Decision::Deny),
        other => panic!("expected the final decision, got {other:?}"),
    }
    match worker.result("e1", true, "edited anyway", 0.0).await {
        Out::Error(error) => {
            assert_eq!(error.code, "FAILED_PRECONDITION");
            assert_eq!(error.call_id, "e1");
        }
        other => panic!("expected an error, got {other:?}"),
    }
    let types = server.event_types(&run_id).await;
    assert_eq!(types.last().unwrap(), "run.toolcall.resolved");
}

#[tokio::test]
async fn an_unanswered_ask_times_out_as_deny() {
    let server = TestServer::with(limits("asks", "ask_timeout_seconds = 1")).await;
    let clock = StoppedClock::stop();
    let run_id = server.start_run("asks").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        decision(&worker.call("e1", "Edit", "", "ask/x").await),
        pb::Decision::Ask
    );
    let timeout = std::time::Duration::from_secs(1);

    clock.advance(timeout - TICK).await;
    expect_still_running(&mut worker).await;
    assert_eq!(server.pending_asks(&run_id).await.len(), 1);
    clock.advance(2 * TICK).await;
    match worker.recv().await {
        Out::ToolCallResponse(r) => {
            assert_eq!(r.call_id, "e1");
            assert_eq!(decision(&r), pb::Decision::Deny);
            assert_eq!(r.reason, "ask timed out after 1 s");
        }
        other => panic!("expected the final decision, got {other:?}"),
    }
    let events = server.events(&run_id).await;
    let asked = events
        .iter()
        .find(|e| e.r#type == "run.toolcall.asked")
        .unwrap();
    let resolved = events.last().unwrap();
    assert_eq!(resolved.r#type, "run.toolcall.resolved");
    assert_eq!(resolved.attributes["by"], "runplane");
    assert_eq!(time_between(asked, resolved), timeout + TICK);
    assert!(server.pending_asks("").await.is_empty());
}

async fn expect_finished(worker: &mut Worker) -> pb::Run {
    let run = match worker.recv().await {
        Out::Finished(finished) => finished.run.unwrap(),
        other => panic!("expected finished, got {other:?}"),
    };
    assert!(
        matches!(worker.next().await, Ok(None)),
        "the stream closes after finished"
    );
    run
}

#[tokio::test]
async fn completion_passes_the_quality_gate_and_finishes() {
    let server = TestServer::start().await;
    let run_id = server.start_run("headless-safe-sandbox").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.complete().await;
    match worker.recv().await {
        Out::QualityGateRequest(gate) => assert!(gate.run_tests && gate.run_lint),
        other => panic!("expected a gate request, got {other:?}"),
    }
    assert_eq!(
        status(&server.get_run(&run_id).await),
        pb::RunStatus::QualityGate
    );
    worker
        .send(In::QualityGateResult(pb::QualityGateResult {
            tests_passed: Some(true),
            lint_passed: Some(true),
            ..Default::default()
        }))
        .await;
    let run = expect_finished(&mut worker).await;
    assert_eq!(status(&run), pb::RunStatus::Completed);
    assert_eq!(run.output, "all done");
    assert!(run.completed_at.is_some());
    let types = server.event_types(&run_id).await;
    // The server closes the stream with `finished`: the detach is recorded with the end.
    assert_eq!(
        types[types.len() - 4..],
        [
            "run.qualitygate.started",
            "run.qualitygate.passed",
            "run.worker.detached",
            "run.completed"
        ]
    );
}

#[tokio::test]
async fn a_failed_gate_with_rollback_fails_the_run() {
    let server = TestServer::start().await;
    let run_id = server.start_run("headless-safe-sandbox").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.complete().await;
    match worker.recv().await {
        // The worker is told up front that a failure means restoring the workspace.
        Out::QualityGateRequest(gate) => assert!(gate.rollback_on_fail),
        other => panic!("expected a gate request, got {other:?}"),
    }
    worker
        .send(In::QualityGateResult(pb::QualityGateResult {
            tests_passed: Some(false),
            lint_passed: Some(true),
            ..Default::default()
        }))
        .await;
    let run = expect_finished(&mut worker).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert_eq!(run.error, "quality gate failed: tests did not pass");
}

#[tokio::test]
async fn a_failed_gate_without_rollback_completes_with_the_error_noted() {
    let server = TestServer::start().await;
    let run_id = server.start_run("headless-permissive-sandbox").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.complete().await;
    match worker.recv().await {
        Out::QualityGateRequest(gate) => {
            assert!(gate.run_tests && !gate.run_lint && !gate.rollback_on_fail)
        }
        other => panic!("expected a gate request, got {other:?}"),
    }
    worker
        .send(In::QualityGateResult(pb::QualityGateResult {
            tests_passed: Some(false),
            ..Default::default()
        }))
        .await;
    let run = expect_finished(&mut worker).await;
    assert_eq!(status(&run), pb::RunStatus::Completed);
    assert_eq!(run.error, "quality gate failed: tests did not pass");
}

#[tokio::test]
async fn delivery_is_requested_and_recorded() {
    let server = TestServer::start().await;
    let run_id = server
        .start_delivering_run("trusted-mount-autonomous", pb::DeliverMode::CommitLocal)
        .await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.complete().await;
    match worker.recv().await {
        Out::DeliverRequest(deliver) => {
            assert_eq!(deliver.mode, pb::DeliverMode::CommitLocal as i32);
            assert!(deliver.commit_message.contains(&run_id));
        }
        other => panic!("expected a deliver request, got {other:?}"),
    }
    worker
        .send(In::DeliveryResult(pb::DeliveryResult {
            success: true,
            commit_hash: "abc123".into(),
            ..Default::default()
        }))
        .await;
    let run = expect_finished(&mut worker).await;
    assert_eq!(status(&run), pb::RunStatus::Completed);
    let events = server.events(&run_id).await;
    let delivered = events
        .iter()
        .find(|e| e.r#type == "run.delivery.succeeded")
        .unwrap();
    assert_eq!(delivered.attributes["commit_hash"], "abc123");
}

#[tokio::test]
async fn a_worker_reported_failure_ends_the_run() {
    let server = TestServer::start().await;
    let run_id = server.start_run("").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker
        .send(In::Complete(pb::RunComplete {
            status: pb::RunStatus::Failed as i32,
            output: String::new(),
            error: "could not build".into(),
        }))
        .await;
    let run = expect_finished(&mut worker).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert_eq!(run.error, "could not build");
}

#[tokio::test]
async fn cancel_pushes_cancel_and_later_requests_are_denied() {
    let server = TestServer::start().await;
    let run_id = server.start_run("").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let cancelled = server
        .runs()
        .await
        .cancel_run(pb::CancelRunRequest {
            run_id: run_id.clone(),
            reason: "wrong task".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status(&cancelled), pb::RunStatus::Cancelled);
    assert_eq!(cancelled.error, "wrong task");
    match worker.recv().await {
        Out::Cancel(cancel) => assert_eq!(cancel.reason, "wrong task"),
        other => panic!("expected cancel, got {other:?}"),
    }
    let later = worker.call("c1", "Read", "", "a").await;
    assert_eq!(decision(&later), pb::Decision::Deny);
    assert_eq!(later.reason, "run is not running");
    worker.send(In::Heartbeat(pb::Heartbeat {})).await;
    match worker.recv().await {
        Out::Heartbeat(reply) => assert_eq!(reply.status, pb::RunStatus::Cancelled as i32),
        other => panic!("expected a heartbeat reply, got {other:?}"),
    }
    let again = server
        .runs()
        .await
        .cancel_run(pb::CancelRunRequest {
            run_id: run_id.clone(),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::FailedPrecondition);
}

#[tokio::test]
async fn heartbeat_replies_with_the_status() {
    let server = TestServer::start().await;
    let run_id = server.start_run("").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.send(In::Heartbeat(pb::Heartbeat {})).await;
    match worker.recv().await {
        Out::Heartbeat(reply) => assert_eq!(reply.status, pb::RunStatus::Running as i32),
        other => panic!("expected a heartbeat reply, got {other:?}"),
    }
}

#[tokio::test]
async fn reattach_within_grace_continues_the_run() {
    let server = TestServer::start().await;
    let run_id = server.start_run("").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.call("c1", "Read", "", "a").await;
    drop(worker);
    let (mut worker, attached) = Worker::attach(&server, &run_id).await;
    assert!(attached.resumed);
    let run = attached.run.unwrap();
    assert_eq!(status(&run), pb::RunStatus::Running);
    assert_eq!(run.step_count, 1);
    assert_eq!(
        decision(&worker.call("c2", "Read", "", "b").await),
        pb::Decision::Allow
    );
}

#[tokio::test]
async fn after_the_grace_period_the_run_fails_with_worker_lost() {
    let grace = std::time::Duration::from_millis(300);
    let server = TestServer::with(Options {
        grace,
        ..Options::default()
    })
    .await;
    let clock = StoppedClock::stop();
    let run_id = server.start_run("").await;
    let (worker, _) = Worker::attach(&server, &run_id).await;
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
    drop(worker);
    // The grace runs from the recorded detach, which the test waits for before moving time.
    loop {
        let event = next_event(&mut watch).await.expect("the run is not over");
        if event.r#type == "run.worker.detached" {
            break;
        }
    }

    clock.advance(grace - TICK).await;
    assert_eq!(
        status(&server.get_run(&run_id).await),
        pb::RunStatus::Running
    );
    clock.advance(2 * TICK).await;
    let failed = next_event(&mut watch).await.expect("the run's end");
    assert_eq!(failed.r#type, "run.failed");
    assert!(
        next_event(&mut watch).await.is_none(),
        "the watch ends with the run"
    );
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert_eq!(run.error, "worker lost");
    // From the store: a watch sends a live event's time to the nanosecond, the store keeps
    // microseconds.
    let events = server.events(&run_id).await;
    let [.., detached, failed] = events.as_slice() else {
        panic!("{events:?}");
    };
    assert_eq!(
        [detached.r#type.as_str(), failed.r#type.as_str()],
        ["run.worker.detached", "run.failed"]
    );
    assert_eq!(time_between(detached, failed), grace + TICK);
    let err = Worker::try_attach(&server, &run_id, "late")
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
}

/// The next event of a watch, `None` once the run is over.
async fn next_event(watch: &mut tonic::Streaming<pb::RunEvent>) -> Option<pb::RunEvent> {
    tokio::time::timeout(PATIENCE, watch.message())
        .await
        .expect("no event in time")
        .unwrap()
}

#[tokio::test]
async fn watch_replays_then_follows_until_the_run_ends() {
    let server = TestServer::start().await;
    let run_id = server.start_run("trusted-mount-autonomous").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.call("c1", "Read", "", "a").await;
    let mut watch = server
        .runs()
        .await
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.clone(),
            from_seq: 2,
        })
        .await
        .unwrap()
        .into_inner();
    worker.complete().await;
    expect_finished(&mut worker).await;
    let mut seqs = Vec::new();
    let mut types = Vec::new();
    while let Some(event) = watch.message().await.unwrap() {
        seqs.push(event.seq);
        types.push(event.r#type);
    }
    assert_eq!(seqs, (2..=6).collect::<Vec<u64>>());
    assert_eq!(
        types,
        [
            "run.started",
            "run.worker.attached",
            "run.toolcall.approved",
            "run.worker.detached",
            "run.completed"
        ]
    );
}

#[tokio::test]
async fn cancel_reaches_a_worker_waiting_on_an_ask_before_its_deny() {
    let server = TestServer::with(limits("asks", "")).await;
    let run_id = server.start_run("asks").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        decision(&worker.call("e1", "Edit", "", "ask/x").await),
        pb::Decision::Ask
    );
    server
        .runs()
        .await
        .cancel_run(pb::CancelRunRequest {
            run_id: run_id.clone(),
            reason: "stop".into(),
        })
        .await
        .unwrap();
    assert!(matches!(worker.recv().await, Out::Cancel(_)));
    match worker.recv().await {
        Out::ToolCallResponse(r) => {
            assert_eq!(r.call_id, "e1");
            assert_eq!(decision(&r), pb::Decision::Deny);
            assert_eq!(r.reason, "run is cancelled");
        }
        other => panic!("expected the final deny, got {other:?}"),
    }
}

#[tokio::test]
async fn watching_a_finished_run_replays_its_whole_log_and_ends() {
    let server = TestServer::start().await;
    let run_id = server.start_run("trusted-mount-autonomous").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.complete().await;
    expect_finished(&mut worker).await;
    for _ in 0..20 {
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
        let mut types = Vec::new();
        while let Some(event) = watch.message().await.unwrap() {
            types.push(event.r#type);
        }
        assert_eq!(types.first().unwrap(), "run.created");
        assert_eq!(types.last().unwrap(), "run.completed");
    }
}

#[tokio::test]
async fn a_reattach_during_the_gate_gets_the_gate_request_again() {
    let server = TestServer::start().await;
    let run_id = server.start_run("headless-safe-sandbox").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.complete().await;
    assert!(matches!(worker.recv().await, Out::QualityGateRequest(_)));
    drop(worker);
    let (mut worker, attached) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        attached.run.unwrap().status,
        pb::RunStatus::QualityGate as i32
    );
    assert!(matches!(worker.recv().await, Out::QualityGateRequest(_)));
    worker.complete().await;
    match worker.recv().await {
        Out::Error(error) => assert_eq!(
            error.message,
            "complete: the run already completed and waits for its quality gate"
        ),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn finishing_a_run_denies_its_pending_asks_first() {
    let server = TestServer::with(limits("asks", "")).await;
    let run_id = server.start_run("asks").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        decision(&worker.call("e1", "Edit", "", "ask/x").await),
        pb::Decision::Ask
    );
    worker.complete().await;
    match worker.recv().await {
        Out::ToolCallResponse(r) => {
            assert_eq!(
                (r.call_id.as_str(), decision(&r)),
                ("e1", pb::Decision::Deny)
            );
            assert_eq!(r.reason, "run is completed");
        }
        other => panic!("expected the final deny, got {other:?}"),
    }
    expect_finished(&mut worker).await;
    assert!(server.pending_asks("").await.is_empty());
    let types = server.event_types(&run_id).await;
    assert_eq!(
        types[types.len() - 3..],
        [
            "run.toolcall.resolved",
            "run.worker.detached",
            "run.completed"
        ]
    );
}

#[tokio::test]
async fn a_watch_started_past_the_end_of_the_log_ends_with_the_run() {
    let server = TestServer::start().await;
    let run_id = server.start_run("trusted-mount-autonomous").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let mut watch = server
        .runs()
        .await
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.clone(),
            from_seq: 1000,
        })
        .await
        .unwrap()
        .into_inner();
    worker.complete().await;
    expect_finished(&mut worker).await;
    let end = tokio::time::timeout(PATIENCE, watch.message())
        .await
        .unwrap();
    assert!(matches!(end, Ok(None)), "{end:?}");
}
