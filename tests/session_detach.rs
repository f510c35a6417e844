//! Every way a worker's stream ends leaves `run.worker.detached` in the log, with why.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::worker_message::Message as In;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;

/// The whole log, page by page (a long run has more events than one page holds).
async fn all_events(server: &TestServer, run_id: &str) -> Vec<pb::RunEvent> {
    let mut runs = server.runs().await;
    let mut events: Vec<pb::RunEvent> = Vec::new();
    loop {
        let from_seq = events.last().map_or(0, |e| e.seq + 1);
        let page = runs
            .list_run_events(pb::ListRunEventsRequest {
                run_id: run_id.into(),
                from_seq,
                page_size: 1000,
            })
            .await
            .unwrap()
            .into_inner()
            .events;
        if page.is_empty() {
            return events;
        }
        events.extend(page);
    }
}

/// Waits until the log's last event is a detach and returns it.
async fn detach_event(server: &TestServer, run_id: &str) -> pb::RunEvent {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let events = all_events(server, run_id).await;
        if let Some(last) = events.last().filter(|e| e.r#type == "run.worker.detached") {
            return last.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no run.worker.detached at the end of the log: {:?}",
            events
                .iter()
                .rev()
                .take(3)
                .map(|e| &e.r#type)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_worker_that_does_not_read_its_stream_is_cut_off_and_the_log_says_so() {
    let server = unlimited_server().await;
    let run_id = server.start_run("unlimited").await;
    // Small HTTP/2 windows, so unread answers pile up in the server's queue quickly.
    let channel = Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .initial_stream_window_size(Some(65_535))
        .initial_connection_window_size(Some(65_535))
        .connect()
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(64);
    tx.send(msg(In::Attach(pb::Attach {
        run_id: run_id.clone(),
        worker_id: "slow-worker".into(),
        token: server.worker_token(&run_id),
        workspace_root: "/work/repo".into(),
    })))
    .await
    .unwrap();
    let mut stream = pb::worker_service_client::WorkerServiceClient::new(channel)
        .session(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();

    // Far more answers than the queue, the server's send buffer and the window hold (call
    // ids of 1,000 bytes make each answer that big), none of them read until the log shows
    // the cut-off. Once the server has cut the worker off it stops reading too, so the
    // sender may block; it is stopped at the end.
    let sent = Arc::new(AtomicUsize::new(0));
    let sender = tokio::spawn({
        let (run_id, sent) = (run_id.clone(), Arc::clone(&sent));
        async move {
            let padding = "x".repeat(990);
            for i in 0..4_000 {
                let call = msg(In::ToolCallRequest(pb::ToolCallRequest {
                    run_id: run_id.clone(),
                    call_id: format!("{i:05}-{padding}"),
                    tool: "Read".into(),
                    command: String::new(),
                    path: "src/main.rs".into(),
                    resolved_path: String::new(),
                    ..Default::default()
                }));
                if tx.send(call).await.is_err() {
                    break;
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    });

    let detached = detach_event(&server, &run_id).await;
    assert_eq!(detached.attributes["worker_id"], "slow-worker");
    assert_eq!(
        detached.attributes["reason"],
        "worker does not read its stream"
    );

    let mut answers = 0;
    let status = loop {
        match tokio::time::timeout(PATIENCE, stream.message()).await {
            Ok(Ok(Some(_))) => answers += 1,
            Ok(Ok(None)) => panic!("the stream ended without a status after {answers} messages"),
            Ok(Err(status)) => break status,
            Err(_) => panic!("the stream neither ended nor answered after {answers} messages"),
        }
    };
    sender.abort();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    let sent = sent.load(Ordering::Relaxed);
    assert!(
        answers < sent,
        "all {sent} calls were answered ({answers}): the worker was never cut off"
    );
    let run = server.get_run(&run_id).await;
    assert_eq!(run.status, pb::RunStatus::Running as i32);
}

#[tokio::test]
async fn a_server_shutdown_is_in_the_log_of_each_attached_run() {
    let mut server = TestServer::start().await;
    let run_id = server.start_run("").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let response = worker.call("c1", "Read", "", "src/main.rs").await;
    assert_eq!(response.decision, pb::Decision::Allow as i32);

    server.restart().await;
    let status = loop {
        match worker.next().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the stream ended without a status"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");

    let detached = detach_event(&server, &run_id).await;
    assert_eq!(detached.attributes["worker_id"], "worker-1");
    assert_eq!(detached.attributes["reason"], "server shutdown");
    let types = server.event_types(&run_id).await;
    assert_eq!(
        types[types.len() - 2..],
        ["run.toolcall.approved", "run.worker.detached"]
    );
}
