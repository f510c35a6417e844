//! A store write that fails (the database held locked by another process past the busy
//! timeout) never reaches the worker or operator as a decision, and the run comes back
//! exactly as committed.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;

/// Holds the database's write lock until dropped, as another process could.
struct Locked(rusqlite::Connection);

fn lock_database(server: &TestServer) -> Locked {
    let path = server
        .dir
        .path()
        .join("data")
        .join(runplane::server::DATABASE_FILE);
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
    Locked(conn)
}

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = self.0.execute_batch("ROLLBACK");
    }
}

/// A run with a worker attached whose first call, a Read of `a` as `c1`, was allowed.
async fn one_call_allowed() -> (TestServer, String, Worker) {
    let server = TestServer::start().await;
    let run_id = server.start_run("headless-safe-sandbox").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        decision(&worker.call("c1", "Read", "", "a").await),
        pb::Decision::Allow
    );
    (server, run_id, worker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_that_could_not_be_committed_is_never_sent() {
    let (server, run_id, mut worker) = one_call_allowed().await;

    let lock = tokio::task::block_in_place(|| lock_database(&server));
    worker
        .send(pb::worker_message::Message::ToolCallRequest(
            pb::ToolCallRequest {
                call_id: "c2".into(),
                tool: "Read".into(),
                path: "b".into(),
                ..Default::default()
            },
        ))
        .await;
    let err = worker.next().await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Internal, "{err:?}");
    drop(lock);

    let (mut worker, attached) = Worker::attach(&server, &run_id).await;
    assert!(attached.resumed);
    assert_eq!(
        attached.run.unwrap().step_count,
        1,
        "c2 was never committed"
    );
    assert_eq!(
        decision(&worker.call("c2", "Read", "", "b").await),
        pb::Decision::Allow
    );
    assert_eq!(server.get_run(&run_id).await.step_count, 2);
    let seqs: Vec<u64> = server.events(&run_id).await.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_that_could_not_be_committed_is_never_acknowledged() {
    let (server, run_id, mut worker) = one_call_allowed().await;

    let lock = tokio::task::block_in_place(|| lock_database(&server));
    worker
        .send(pb::worker_message::Message::ToolCallResult(
            pb::ToolCallResult {
                call_id: "c1".into(),
                success: true,
                output: "contents of a".into(),
                cost_usd: 0.25,
                ..Default::default()
            },
        ))
        .await;
    // Sent behind the result: its answer must not overtake the missing ack either.
    worker
        .send(pb::worker_message::Message::Heartbeat(pb::Heartbeat {}))
        .await;
    let err = worker.next().await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Internal, "{err:?}");
    drop(lock);

    let (mut worker, attached) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        attached.run.unwrap().cost_usd,
        0.0,
        "the result was never committed"
    );
    match worker.result("c1", true, "contents of a", 0.25).await {
        Out::ResultAck(ack) => assert_eq!(ack.cost_usd, 0.25),
        other => panic!("expected the ack, got {other:?}"),
    }
    let results = server
        .event_types(&run_id)
        .await
        .into_iter()
        .filter(|kind| kind == "run.toolcall.result")
        .count();
    assert_eq!(results, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_whose_resolution_could_not_be_committed_is_still_pending() {
    let server = TestServer::start().await;
    let run_id = server.start_run("headless-safe-sandbox").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        decision(&worker.call("e1", "Edit", "", "/etc/hosts").await),
        pb::Decision::Ask
    );

    let lock = tokio::task::block_in_place(|| lock_database(&server));
    let err = server
        .runs()
        .await
        .resolve_ask(pb::ResolveAskRequest {
            run_id: run_id.clone(),
            call_id: "e1".into(),
            decision: pb::Decision::Allow as i32,
            reason: String::new(),
            resolver: "ops".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Internal, "{err:?}");
    drop(lock);

    // The worker's stream was ended; nothing claimed the ask was allowed.
    let ended = worker.next().await;
    assert!(ended.is_err(), "{ended:?}");
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let repeat = worker.call("e1", "Edit", "", "/etc/hosts").await;
    assert_eq!(
        decision(&repeat),
        pb::Decision::Ask,
        "still waiting, not allowed"
    );
    assert_eq!(server.pending_asks(&run_id).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_abandoned_while_the_run_was_busy_takes_nothing_over() {
    let server = TestServer::start().await;
    let run_id = server.start_run("headless-safe-sandbox").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;

    // The actor is stuck committing c1 while a second worker's attach waits behind it,
    // and that client gives up before the actor gets to it.
    let lock = tokio::task::block_in_place(|| lock_database(&server));
    worker
        .send(pb::worker_message::Message::ToolCallRequest(
            pb::ToolCallRequest {
                call_id: "c1".into(),
                tool: "Read".into(),
                path: "a".into(),
                ..Default::default()
            },
        ))
        .await;
    // The actor must have read c1 (its commit now waits on the lock) before the attach
    // reaches it: an attach it dequeued first would be a live takeover, not an abandoned
    // one. Nothing shows the read from outside, so the test gives it time (on a machine
    // loaded by parallel tests, the attach once overtook c1).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let abandoned = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        Worker::try_attach(&server, &run_id, "worker-2"),
    )
    .await;
    assert!(abandoned.is_err(), "the attach waited for the busy actor");
    // The client's reset reaches the server before the actor gets to the attach (on a
    // loaded machine it could otherwise still be in flight when the lock goes).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    drop(lock);

    match worker.recv().await {
        Out::ToolCallResponse(response) => assert_eq!(decision(&response), pb::Decision::Allow),
        other => panic!("expected c1's decision, got {other:?}"),
    }
    assert_eq!(
        decision(&worker.call("c2", "Read", "", "b").await),
        pb::Decision::Allow,
        "the first worker is still attached"
    );
    let attaches = server
        .event_types(&run_id)
        .await
        .into_iter()
        .filter(|kind| kind.starts_with("run.worker."))
        .collect::<Vec<_>>();
    assert_eq!(attaches, ["run.worker.attached"]);
}
