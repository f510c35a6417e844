//! Every bad input gets its exact status code or in-stream error, and changes nothing.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::worker_message::Message as In;
use tonic::Code;

/// What the run looks like from outside: anything a bad message must not change.
async fn fingerprint(server: &TestServer, run_id: &str) -> (i64, i32, i32, usize) {
    let run = server.get_run(run_id).await;
    let events = server.events(run_id).await.len();
    (run.version, run.status, run.step_count, events)
}

fn request(run_id: &str, call_id: &str, tool: &str) -> In {
    In::ToolCallRequest(pb::ToolCallRequest {
        run_id: run_id.into(),
        call_id: call_id.into(),
        tool: tool.into(),
        command: String::new(),
        path: String::new(),
        resolved_path: String::new(),
        ..Default::default()
    })
}

fn result(call_id: &str, cost: f64, duration: Option<prost_types::Duration>) -> In {
    In::ToolCallResult(pb::ToolCallResult {
        run_id: String::new(),
        call_id: call_id.into(),
        success: true,
        output: "out".into(),
        error: String::new(),
        cost_usd: cost,
        duration,
    })
}

#[tokio::test]
async fn in_stream_errors_name_the_problem_and_change_nothing() {
    let server = TestServer::with(Options {
        policy: Some(limits_profile("bad", "")),
        ..Options::default()
    })
    .await;
    let run_id = server.start_run("bad").await;
    let other_run = server.start_run("bad").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        decision(&worker.call("denied", "Bash", "curl x", "").await),
        pb::Decision::Deny
    );
    assert_eq!(
        decision(&worker.call("asked", "Edit", "", "ask/a").await),
        pb::Decision::Ask
    );
    assert_eq!(
        decision(&worker.call("allowed", "Read", "", "a").await),
        pb::Decision::Allow
    );

    let negative = Some(prost_types::Duration {
        seconds: -1,
        nanos: 0,
    });
    let cases: Vec<(&str, In, &str, &str, &str)> = vec![
        (
            "empty call_id",
            request(&run_id, "", "Read"),
            "INVALID_ARGUMENT",
            "",
            "call_id: required",
        ),
        (
            "empty tool",
            request(&run_id, "c", ""),
            "INVALID_ARGUMENT",
            "c",
            "tool: required",
        ),
        (
            "another run's id",
            request(&other_run, "c", "Read"),
            "INVALID_ARGUMENT",
            "c",
            "run_id:",
        ),
        (
            "a call_id reused for another call",
            request(&run_id, "allowed", "Bash"),
            "INVALID_ARGUMENT",
            "allowed",
            "call_id: allowed was already used for a different call",
        ),
        (
            "a command over 64 KiB",
            In::ToolCallRequest(pb::ToolCallRequest {
                call_id: "big".into(),
                tool: "Bash".into(),
                command: "x".repeat(65537),
                ..Default::default()
            }),
            "INVALID_ARGUMENT",
            "big",
            "command: at most 65536 bytes, got 65537",
        ),
        (
            "an output over 64 KiB in complete",
            In::Complete(pb::RunComplete {
                status: pb::RunStatus::Completed as i32,
                output: "x".repeat(65537),
                ..Default::default()
            }),
            "INVALID_ARGUMENT",
            "",
            "complete.output: at most 65536 bytes",
        ),
        (
            "result for an unknown call",
            result("nope", 0.0, None),
            "NOT_FOUND",
            "nope",
            "call_id: no call nope",
        ),
        (
            "result for a denied call",
            result("denied", 0.0, None),
            "FAILED_PRECONDITION",
            "denied",
            "was not allowed",
        ),
        (
            "result for a pending ask",
            result("asked", 0.0, None),
            "FAILED_PRECONDITION",
            "asked",
            "waiting for an operator",
        ),
        (
            "NaN cost",
            result("allowed", f64::NAN, None),
            "INVALID_ARGUMENT",
            "allowed",
            "cost_usd:",
        ),
        (
            "negative cost",
            result("allowed", -1.0, None),
            "INVALID_ARGUMENT",
            "allowed",
            "cost_usd:",
        ),
        (
            "negative duration",
            result("allowed", 0.0, negative),
            "INVALID_ARGUMENT",
            "allowed",
            "duration:",
        ),
        (
            "result with another run's id",
            In::ToolCallResult(pb::ToolCallResult {
                run_id: other_run.clone(),
                call_id: "allowed".into(),
                success: true,
                ..Default::default()
            }),
            "INVALID_ARGUMENT",
            "allowed",
            "run_id:",
        ),
        (
            "a second attach on the stream",
            In::Attach(pb::Attach {
                run_id: run_id.clone(),
                ..Default::default()
            }),
            "FAILED_PRECONDITION",
            "",
            "already attached",
        ),
        (
            "complete without a status",
            In::Complete(pb::RunComplete::default()),
            "INVALID_ARGUMENT",
            "",
            "complete.status",
        ),
        (
            "complete as running",
            In::Complete(pb::RunComplete {
                status: pb::RunStatus::Running as i32,
                ..Default::default()
            }),
            "INVALID_ARGUMENT",
            "",
            "complete.status",
        ),
        (
            "complete with an unknown status",
            In::Complete(pb::RunComplete {
                status: 99,
                ..Default::default()
            }),
            "INVALID_ARGUMENT",
            "",
            "complete.status: invalid enum value 99",
        ),
        (
            "gate result nobody asked for",
            In::QualityGateResult(pb::QualityGateResult::default()),
            "FAILED_PRECONDITION",
            "",
            "no quality gate was requested",
        ),
        (
            "delivery result nobody asked for",
            In::DeliveryResult(pb::DeliveryResult::default()),
            "FAILED_PRECONDITION",
            "",
            "no delivery was requested",
        ),
    ];
    assert!(cases.len() >= 16);
    for (name, message, code, call_id, text) in cases {
        let before = fingerprint(&server, &run_id).await;
        worker.send(message).await;
        match worker.recv().await {
            Out::Error(error) => {
                assert_eq!(error.code, code, "{name}: {error:?}");
                assert_eq!(error.call_id, call_id, "{name}: {error:?}");
                assert!(
                    error.message.contains(text),
                    "{name}: {:?} lacks {text:?}",
                    error.message
                );
            }
            other => panic!("{name}: expected an error, got {other:?}"),
        }
        assert_eq!(
            fingerprint(&server, &run_id).await,
            before,
            "{name} changed the run"
        );
    }
    // An empty WorkerMessage cannot be built with `msg`, so send it raw.
    let before = fingerprint(&server, &run_id).await;
    worker
        .tx
        .send(pb::WorkerMessage { message: None })
        .await
        .unwrap();
    match worker.recv().await {
        Out::Error(error) => assert_eq!(error.code, "INVALID_ARGUMENT"),
        other => panic!("expected an error, got {other:?}"),
    }
    assert_eq!(fingerprint(&server, &run_id).await, before);
    // The session is still good.
    assert_eq!(
        decision(&worker.call("fine", "Read", "", "b").await),
        pb::Decision::Allow
    );
}

#[tokio::test]
async fn broken_protocol_ends_the_stream_with_invalid_argument() {
    let server = TestServer::start().await;
    let run_id = server.start_run("").await;
    let err = Worker::open(&server, request(&run_id, "c1", "Read"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("first message"), "{}", err.message());

    let attach = In::Attach(pb::Attach::default());
    let err = Worker::open(&server, attach).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(err.message(), "attach.run_id: required");

    // No run, so no worker token for it: refused before anything else is looked at.
    let err = Worker::try_attach(&server, "unknown", "w")
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert_eq!(
        status(&server.get_run(&run_id).await),
        pb::RunStatus::Pending
    );
}

#[tokio::test]
async fn a_session_that_never_attaches_is_ended() {
    let attach_timeout = std::time::Duration::from_millis(200);
    let server = TestServer::with(Options {
        attach_timeout,
        ..Options::default()
    })
    .await;
    let clock = StoppedClock::stop();
    let stopped_at = tokio::time::Instant::now();
    let channel = server.raw_channel().await;
    // The sender stays open: the stream is neither closed nor attached.
    let (_tx, rx) = tokio::sync::mpsc::channel::<pb::WorkerMessage>(1);
    let mut workers = WorkerServiceClient::new(channel.clone());
    let session = tokio::spawn(async move {
        let result = workers
            .session(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await;
        (result.map(drop), stopped_at.elapsed())
    });
    // Lets the spawned task send the session's request before the health check's.
    tokio::task::yield_now().await;
    // The attach timer starts with the session's handler, which the client cannot see. The
    // server starts a task per stream in the order a connection's streams arrive, and this
    // runtime runs tasks in the order they were started: the answer to a later call on the
    // same connection means the session's handler has run, and its timer is set.
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let check = || tonic_health::pb::HealthCheckRequest {
        service: String::new(),
    };
    health.check(check()).await.unwrap();

    clock.advance(attach_timeout - TICK).await;
    health.check(check()).await.unwrap();
    assert!(
        !session.is_finished(),
        "the session ended before its timeout"
    );
    clock.advance(2 * TICK).await;
    let (result, ended_after) = tokio::time::timeout(PATIENCE, session)
        .await
        .expect("the session did not end")
        .unwrap();
    let err = result.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded);
    assert_eq!(
        err.message(),
        "no attach within 0.2 s of opening the session"
    );
    assert_eq!(ended_after, attach_timeout + TICK, "ended on the last move");
}

#[tokio::test]
async fn a_message_over_the_size_limit_ends_the_stream_and_loses_nothing() {
    let server = TestServer::start().await;
    let run_id = server.start_run("trusted-mount-autonomous").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.call("c1", "Bash", "make", "").await;
    let before = fingerprint(&server, &run_id).await;
    worker
        .send(In::ToolCallResult(pb::ToolCallResult {
            call_id: "c1".into(),
            success: true,
            output: "x".repeat(5 * 1024 * 1024),
            ..Default::default()
        }))
        .await;
    let err = worker.next().await.unwrap_err();
    assert!(
        matches!(err.code(), Code::OutOfRange | Code::ResourceExhausted),
        "{err:?}"
    );
    // The stream is gone (the detach is recorded) but the run and its counts are not.
    let run = server.get_run(&run_id).await;
    assert_eq!(run.status, before.1);
    assert_eq!(run.step_count, before.2);
    let (mut worker, attached) = Worker::attach(&server, &run_id).await;
    assert!(attached.resumed);
    assert!(matches!(
        worker.result("c1", true, "small", 0.0).await,
        Out::ResultAck(_)
    ));
}

#[tokio::test]
async fn operator_calls_refuse_bad_input_with_the_right_code() {
    let server = TestServer::start().await;
    let mut runs = server.runs().await;
    let good = pb::StartRequest {
        task_id: "t".into(),
        agent_id: "a".into(),
        project_id: "p".into(),
        ..Default::default()
    };
    let cases: Vec<(&str, pb::StartRequest, &str)> = vec![
        (
            "missing task_id",
            pb::StartRequest {
                task_id: String::new(),
                ..good.clone()
            },
            "task_id: required",
        ),
        (
            "missing agent_id",
            pb::StartRequest {
                agent_id: String::new(),
                ..good.clone()
            },
            "agent_id: required",
        ),
        (
            "missing project_id",
            pb::StartRequest {
                project_id: String::new(),
                ..good.clone()
            },
            "project_id: required",
        ),
        (
            "unknown exec mode",
            pb::StartRequest {
                exec_mode: 7,
                ..good.clone()
            },
            "exec_mode: invalid enum value 7",
        ),
        (
            "unknown deliver mode",
            pb::StartRequest {
                deliver_mode: -2,
                ..good.clone()
            },
            "deliver_mode: invalid enum value -2",
        ),
        (
            "unknown profile",
            pb::StartRequest {
                policy_profile: "nope".into(),
                ..good.clone()
            },
            "policy_profile: unknown profile \"nope\"",
        ),
    ];
    for (name, request, message) in cases {
        let err = runs.start_run(request).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{name}");
        assert_eq!(err.message(), message, "{name}");
    }
    let listed = runs
        .list_runs(pb::ListRunsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.runs.is_empty(), "no bad request created a run");

    let run_id = server.start_run("").await;
    let code = |r: Result<tonic::Response<pb::Run>, tonic::Status>| r.unwrap_err().code();
    assert_eq!(
        code(
            runs.get_run(pb::GetRunRequest {
                run_id: "nope".into()
            })
            .await
        ),
        Code::NotFound
    );
    assert_eq!(
        code(runs.get_run(pb::GetRunRequest::default()).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            runs.cancel_run(pb::CancelRunRequest {
                run_id: "nope".into(),
                reason: String::new()
            })
            .await
        ),
        Code::NotFound
    );

    let bad_lists = [
        pb::ListRunsRequest {
            page_token: "garbage".into(),
            ..Default::default()
        },
        pb::ListRunsRequest {
            page_size: -1,
            ..Default::default()
        },
        pb::ListRunsRequest {
            status: 42,
            ..Default::default()
        },
    ];
    for request in bad_lists {
        let err = runs.list_runs(request.clone()).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{request:?}");
    }

    let resolve = |decision: i32, call_id: &str| pb::ResolveAskRequest {
        run_id: run_id.clone(),
        call_id: call_id.into(),
        decision,
        reason: String::new(),
        resolver: String::new(),
        ..Default::default()
    };
    let err = runs
        .resolve_ask(resolve(pb::Decision::Allow as i32, "none"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let err = runs.resolve_ask(resolve(0, "none")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(err.message(), "decision: invalid enum value 0");
    let err = runs
        .resolve_ask(resolve(pb::Decision::Ask as i32, "none"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = runs
        .resolve_ask(resolve(pb::Decision::Allow as i32, ""))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    let err = runs
        .list_run_events(pb::ListRunEventsRequest {
            run_id: "nope".into(),
            from_seq: 0,
            page_size: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = runs
        .watch_run(pb::WatchRunRequest {
            run_id: "nope".into(),
            from_seq: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    runs.cancel_run(pb::CancelRunRequest {
        run_id: run_id.clone(),
        reason: String::new(),
    })
    .await
    .unwrap();
    let before = server.get_run(&run_id).await;
    let err = runs
        .cancel_run(pb::CancelRunRequest {
            run_id: run_id.clone(),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(server.get_run(&run_id).await, before);
}

#[tokio::test]
async fn a_worker_that_does_not_read_is_cut_off_with_resource_exhausted() {
    let server = TestServer::start().await;
    let run_id = server.start_run("").await;
    // A small receive window keeps the replies in the server's queue instead of the
    // transport's buffers, so the queue is what fills.
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect()
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    tx.send(msg(In::Attach(pb::Attach {
        run_id: run_id.clone(),
        token: server.worker_token(&run_id),
        ..Default::default()
    })))
    .await
    .unwrap();
    let mut stream = WorkerServiceClient::new(channel)
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    for _ in 0..100_000 {
        tx.send(msg(In::Heartbeat(pb::Heartbeat {}))).await.unwrap();
    }
    let status = loop {
        match tokio::time::timeout(PATIENCE, stream.message())
            .await
            .unwrap()
        {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended without a status"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let (_, attached) = Worker::attach(&server, &run_id).await;
    assert!(attached.resumed, "the run waits for a re-attach");
}

#[tokio::test]
async fn list_pages_are_cut_to_fit_the_message_limit() {
    let server = TestServer::with(Options {
        max_message_bytes: 256 * 1024,
        ..Options::default()
    })
    .await;
    let mut ids = Vec::new();
    for _ in 0..10 {
        let run_id = server.start_run("trusted-mount-autonomous").await;
        let (mut worker, _) = Worker::attach(&server, &run_id).await;
        worker
            .send(In::Complete(pb::RunComplete {
                status: pb::RunStatus::Completed as i32,
                output: "o".repeat(60_000),
                error: String::new(),
            }))
            .await;
        assert!(matches!(worker.recv().await, Out::Finished(_)));
        ids.push(run_id);
    }
    let mut runs = server.runs().await;
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = runs
            .list_runs(pb::ListRunsRequest {
                page_size: 50,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        seen.extend(page.runs.into_iter().map(|r| r.id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert!(
        pages > 1,
        "a 600 KB listing does not fit one 256 KiB message"
    );
    ids.reverse();
    assert_eq!(seen, ids, "every run once, newest first");
}

#[tokio::test]
async fn a_cost_that_would_make_the_total_infinite_is_refused() {
    let server = TestServer::with(Options {
        policy: Some(limits_profile("no-limits", "")),
        ..Options::default()
    })
    .await;
    let run_id = server.start_run("no-limits").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.call("c1", "Read", "", "a").await;
    assert!(matches!(
        worker.result("c1", true, "x", f64::MAX).await,
        Out::ResultAck(_)
    ));
    worker.call("c2", "Read", "", "b").await;
    let before = fingerprint(&server, &run_id).await;
    match worker.result("c2", true, "y", f64::MAX).await {
        Out::Error(error) => {
            assert_eq!(error.code, "INVALID_ARGUMENT");
            assert!(error.message.contains("infinite"), "{}", error.message);
        }
        other => panic!("expected an error, got {other:?}"),
    }
    assert_eq!(fingerprint(&server, &run_id).await, before);
    assert_eq!(server.get_run(&run_id).await.cost_usd, f64::MAX);
}

#[tokio::test]
async fn a_refused_complete_stores_nothing_of_its_output() {
    let server = TestServer::start().await;
    let run_id = server.start_run("trusted-mount-autonomous").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker
        .send(In::Complete(pb::RunComplete {
            status: pb::RunStatus::Running as i32,
            output: "leaked".into(),
            error: String::new(),
        }))
        .await;
    assert!(matches!(worker.recv().await, Out::Error(_)));
    worker.call("c1", "Read", "", "a").await;
    assert_eq!(server.get_run(&run_id).await.output, "");
}

#[tokio::test]
async fn a_delivery_result_after_cancel_is_refused_and_not_logged() {
    let server = TestServer::start().await;
    let run_id = server
        .start_delivering_run("trusted-mount-autonomous", pb::DeliverMode::Patch)
        .await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.complete().await;
    assert!(matches!(worker.recv().await, Out::DeliverRequest(_)));
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
    worker
        .send(In::DeliveryResult(pb::DeliveryResult {
            success: true,
            ..Default::default()
        }))
        .await;
    match worker.recv().await {
        Out::Error(error) => assert_eq!(error.code, "FAILED_PRECONDITION"),
        other => panic!("expected an error, got {other:?}"),
    }
    worker.send(In::Heartbeat(pb::Heartbeat {})).await;
    assert!(matches!(worker.recv().await, Out::Heartbeat(_)));
    drop(worker);
    let types = server.event_types(&run_id).await;
    assert!(
        !types.iter().any(|t| t == "run.delivery.succeeded"),
        "{types:?}"
    );
}
