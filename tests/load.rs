//! 200 concurrent sessions × 50 calls each over a handful of HTTP/2 connections: every
//! count and every event exact.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::worker_message::Message as In;
use tokio_stream::wrappers::ReceiverStream;

const SESSIONS: usize = 200;
const CALLS: usize = 50;
const CONNECTIONS: usize = 8;

async fn next(stream: &mut tonic::Streaming<pb::CoordinatorMessage>) -> Out {
    stream.message().await.unwrap().unwrap().message.unwrap()
}

async fn one_session(
    mut workers: WorkerServiceClient<tonic::transport::Channel>,
    run_id: String,
    token: String,
) -> (String, usize, usize) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(msg(In::Attach(pb::Attach {
        run_id: run_id.clone(),
        worker_id: "load".into(),
        token,
        workspace_root: "/repo".into(),
    })))
    .await
    .unwrap();
    let mut stream = workers
        .session(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(next(&mut stream).await, Out::Attached(_)));
    let (mut allowed, mut acked) = (0, 0);
    for i in 0..CALLS {
        let call_id = format!("c{i}");
        let (tool, command) = if i % 5 == 4 {
            ("Bash", "git status && rm -rf /")
        } else {
            ("Read", "")
        };
        tx.send(msg(In::ToolCallRequest(pb::ToolCallRequest {
            call_id: call_id.clone(),
            tool: tool.into(),
            command: command.into(),
            path: format!("src/file{i}.rs"),
            ..Default::default()
        })))
        .await
        .unwrap();
        let Out::ToolCallResponse(response) = next(&mut stream).await else {
            panic!("no decision")
        };
        assert_eq!(response.call_id, call_id);
        if response.decision == pb::Decision::Allow as i32 {
            allowed += 1;
            tx.send(msg(In::ToolCallResult(pb::ToolCallResult {
                call_id: call_id.clone(),
                success: true,
                output: format!("output {i}"),
                cost_usd: 0.001,
                ..Default::default()
            })))
            .await
            .unwrap();
            let Out::ResultAck(ack) = next(&mut stream).await else {
                panic!("no ack")
            };
            assert_eq!(ack.step_count, i as i32 + 1);
            acked += 1;
        }
    }
    (run_id, allowed, acked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_sessions_fifty_calls_each_are_exact() {
    let server = TestServer::with(Options {
        policy: Some(
            r#"
name = "load"
mode = "acceptEdits"

[[rules]]
specifier = { tool = "Bash" }
decision = "deny"
command_allow = ["rm"]
"#
            .into(),
        ),
        ..Options::default()
    })
    .await;
    let mut channels = Vec::new();
    for _ in 0..CONNECTIONS {
        channels.push(server.raw_channel().await);
    }
    let mut run_ids = Vec::new();
    for _ in 0..SESSIONS {
        run_ids.push(server.start_run("load").await);
    }
    let mut tasks = Vec::new();
    for (i, run_id) in run_ids.iter().enumerate() {
        let workers = WorkerServiceClient::new(channels[i % CONNECTIONS].clone());
        let token = server.worker_token(run_id);
        tasks.push(tokio::spawn(one_session(workers, run_id.clone(), token)));
    }
    for task in tasks {
        let (run_id, allowed, acked) = task.await.unwrap();
        assert_eq!((allowed, acked), (40, 40), "{run_id}");
    }
    for run_id in &run_ids {
        let run = server.get_run(run_id).await;
        assert_eq!(run.step_count, CALLS as i32);
        assert!((run.cost_usd - 0.040).abs() < 1e-9, "{}", run.cost_usd);
        let events = server.events(run_id).await;
        let count = |kind: &str| events.iter().filter(|e| e.r#type == kind).count();
        assert_eq!(count("run.toolcall.approved"), 40);
        assert_eq!(count("run.toolcall.denied"), 10);
        assert_eq!(count("run.toolcall.result"), 40);
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    }
}
