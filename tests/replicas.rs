//! Three `runplane serve` processes on one PostgreSQL database: operators reach a run
//! from any of them, watchers follow it from any of them, and a run outlives the replica
//! that owned it. Skipped without PostgreSQL unless `RUNPLANE_REQUIRE_POSTGRES=1`.

mod replica_common;
mod store_common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use replica_common::{events, get_run, Cluster, Session, PATIENCE};
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use store_common::postgres::database;

fn decision(out: &Out) -> pb::Decision {
    match out {
        Out::ToolCallResponse(response) => response.decision(),
        other => panic!("expected a tool call response, got {other:?}"),
    }
}

/// The events' seqs are 1..=n, in order.
fn assert_gapless(events: &[pb::RunEvent]) {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = (1..=events.len() as u64).collect();
    assert_eq!(seqs, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_and_watchers_at_any_replica_reach_the_owner() {
    let Some(db) = database().await else { return };
    let cluster = Cluster::new(&db.url, &[]);
    let [a, b, c]: [_; 3] = cluster.replicas(3).await.try_into().ok().unwrap();
    let token = cluster.token();

    let (run_id, worker_token) = a.start_run(&token).await;
    let (mut worker, _) = Session::attach(a.addr, &run_id, &worker_token, "w-a")
        .await
        .unwrap();
    // B follows the run A owns, from its first event.
    let mut watch = b
        .runs(&token)
        .await
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.clone(),
            from_seq: 1,
        })
        .await
        .unwrap()
        .into_inner();

    worker.request("c1", "Bash", "echo one", "").await;
    assert_eq!(decision(&worker.recv().await), pb::Decision::Allow);
    worker.report("c1", "one").await;
    assert!(matches!(worker.recv().await, Out::ResultAck(_)));

    // An ask raised at A is listed at C and answered at C; the worker at A hears it.
    worker.request("c2", "Edit", "", "src/main.rs").await;
    assert_eq!(decision(&worker.recv().await), pb::Decision::Ask);
    let asks = c
        .runs(&token)
        .await
        .list_pending_asks(pb::ListPendingAsksRequest {
            run_id: run_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .asks;
    assert_eq!(asks.len(), 1);
    let answered = c
        .runs(&token)
        .await
        .resolve_ask(pb::ResolveAskRequest {
            run_id: run_id.clone(),
            call_id: "c2".into(),
            decision: pb::Decision::Allow as i32,
            reason: "looks fine".into(),
            resolver: "ops".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answered.decision(), pb::Decision::Allow);
    match worker.recv().await {
        Out::ToolCallResponse(response) => {
            assert_eq!(response.call_id, "c2");
            assert_eq!(response.decision(), pb::Decision::Allow);
            assert_eq!(response.reason, "looks fine");
        }
        other => panic!("expected the final allow, got {other:?}"),
    }
    // Answering it again anywhere is refused as at the owner.
    let again = b
        .runs(&token)
        .await
        .resolve_ask(pb::ResolveAskRequest {
            run_id: run_id.clone(),
            call_id: "c2".into(),
            decision: pb::Decision::Deny as i32,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::FailedPrecondition, "{again:?}");

    // Cancelled at B: the worker at A is told.
    let sent = Instant::now();
    let cancelled = b
        .runs(&token)
        .await
        .cancel_run(pb::CancelRunRequest {
            run_id: run_id.clone(),
            reason: "enough".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cancelled.status(), pb::RunStatus::Cancelled);
    match worker.recv().await {
        Out::Cancel(cancel) => assert_eq!(cancel.reason, "enough"),
        other => panic!("expected cancel, got {other:?}"),
    }
    let took = sent.elapsed();
    eprintln!("cancel at B reached the worker at A in {took:?}");
    // The bound is loose against a loaded machine; the figure is printed above.
    assert!(took < Duration::from_secs(2), "{took:?}");
    drop(worker);

    // B's watch saw A's events live, in order, gapless, to the end of the log.
    let mut watched = Vec::new();
    while let Some(event) = tokio::time::timeout(PATIENCE, watch.message())
        .await
        .expect("the watch at B went silent")
        .unwrap()
    {
        watched.push(event);
    }
    let stored = events(&a, &token, &run_id).await;
    assert_gapless(&watched);
    assert_eq!(watched, stored);
    let types: Vec<&str> = stored.iter().map(|e| e.r#type.as_str()).collect();
    assert!(types.contains(&"run.toolcall.resolved"), "{types:?}");
    assert!(types.contains(&"run.cancelled"), "{types:?}");
    assert_eq!(types.last(), Some(&"run.worker.detached"), "{types:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_under_load_loses_nothing_its_workers_heard() {
    let Some(db) = database().await else { return };
    let cluster = Cluster::new(&db.url, &["--lease-seconds", "5"]);
    let mut replicas = cluster.replicas(3).await;
    let token = cluster.token();
    const WORKERS: usize = 24;
    const CALLS: usize = 40;

    let mut runs = Vec::new();
    for _ in 0..WORKERS {
        runs.push(replicas[0].start_run(&token).await);
    }
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let (killed_tx, killed) = tokio::sync::watch::channel(false);
    let progress = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for (n, (run_id, worker_token)) in runs.clone().into_iter().enumerate() {
        let replicas = addrs.clone();
        let killed = killed.clone();
        let progress = Arc::clone(&progress);
        tasks.push(tokio::spawn(async move {
            work(
                n,
                &replicas,
                &run_id,
                &worker_token,
                CALLS,
                killed,
                &progress,
            )
            .await
        }));
    }
    // Kill A once the workers are a third of the way.
    while progress.load(Ordering::Relaxed) < WORKERS * CALLS / 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    replicas[0].kill_9();
    killed_tx.send_replace(true);
    let mut heard_by_run = HashMap::new();
    for (task, (run_id, _)) in tasks.into_iter().zip(&runs) {
        heard_by_run.insert(run_id.clone(), task.await.unwrap());
    }

    let moved: usize = heard_by_run.values().map(|heard| heard.reattached).sum();
    eprintln!("{moved} re-attaches after the kill");
    assert!(moved >= WORKERS / 2, "{moved} re-attaches");
    let survivor = &replicas[1];
    for (run_id, heard) in &heard_by_run {
        let stored = events(survivor, &token, run_id).await;
        assert_gapless(&stored);
        // Every call decided exactly once, as the worker heard it.
        let mut decided: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut acked = 0;
        for event in &stored {
            let call = event.attributes.get("call_id").cloned().unwrap_or_default();
            match event.r#type.as_str() {
                "run.toolcall.approved" | "run.toolcall.denied" => {
                    decided.entry(call).or_default().push(event.r#type.clone());
                }
                "run.toolcall.result" => acked += 1,
                _ => {}
            }
        }
        for (call, decisions) in &decided {
            assert_eq!(
                decisions.len(),
                1,
                "run {run_id} call {call}: {decisions:?}"
            );
        }
        for (call, heard) in &heard.decisions {
            let recorded = decided.get(call).map(|d| d[0].as_str());
            let expected = match heard {
                pb::Decision::Allow => "run.toolcall.approved",
                _ => "run.toolcall.denied",
            };
            assert_eq!(recorded, Some(expected), "run {run_id} call {call}");
        }
        assert!(
            acked >= heard.acks,
            "run {run_id}: {acked} results, {} acks heard",
            heard.acks
        );
        assert_eq!(decided.len(), CALLS, "run {run_id}");
        let run = get_run(survivor, &token, run_id).await;
        assert_eq!(run.status(), pb::RunStatus::Completed, "run {run_id}");
    }
}

/// What one worker heard from the replicas.
#[derive(Debug, Default)]
struct Heard {
    /// Each call's decision.
    decisions: BTreeMap<String, pb::Decision>,
    /// Results acknowledged.
    acks: usize,
    /// Sessions after the first.
    reattached: usize,
}

/// A worker doing `calls` tool calls, each followed by its result, then completing; when
/// its replica fails it re-attaches to the next one and goes on where the log says, asking
/// again for the call it had no answer to (which the new owner answers from the log).
async fn work(
    n: usize,
    replicas: &[std::net::SocketAddr],
    run_id: &str,
    token: &str,
    calls: usize,
    killed: tokio::sync::watch::Receiver<bool>,
    progress: &AtomicUsize,
) -> Heard {
    let mut heard = Heard::default();
    let mut sessions = 0;
    let mut at = 0;
    let mut call = 0;
    let mut reported = false;
    'session: loop {
        let attached = Session::attach(replicas[at], run_id, token, &format!("w{n}")).await;
        let mut session = match attached {
            Ok((session, _)) => {
                heard.reattached = sessions;
                sessions += 1;
                session
            }
            // The run completed before the worker heard so.
            Err(status) if status.code() == tonic::Code::FailedPrecondition => return heard,
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                at = next_replica(at, replicas.len(), &killed);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        while call < calls {
            let call_id = format!("c{call}");
            if !reported {
                let command = if call % 5 == 4 {
                    "rm -rf /"
                } else {
                    "echo step"
                };
                session.request(&call_id, "Bash", command, "").await;
                let Ok(Some(out)) = session.next().await else {
                    at = next_replica(at, replicas.len(), &killed);
                    continue 'session;
                };
                progress.fetch_add(1, Ordering::Relaxed);
                let decided = decision(&out);
                if let Some(before) = heard.decisions.insert(call_id.clone(), decided) {
                    assert_eq!(before, decided, "call {call_id} decided twice differently");
                }
                if decided != pb::Decision::Allow {
                    call += 1;
                    continue;
                }
            }
            reported = true;
            session.report(&call_id, &format!("out {call}")).await;
            match session.next().await {
                Ok(Some(Out::ResultAck(_))) => {
                    heard.acks += 1;
                    reported = false;
                    call += 1;
                }
                Ok(Some(other)) => panic!("expected an ack, got {other:?}"),
                _ => {
                    at = next_replica(at, replicas.len(), &killed);
                    continue 'session;
                }
            }
        }
        session.complete().await;
        match session.next().await {
            Ok(Some(Out::Finished(_))) => return heard,
            Ok(Some(other)) => panic!("expected finished, got {other:?}"),
            _ => at = next_replica(at, replicas.len(), &killed),
        }
    }
}

/// The replica to try next: never the first once it is killed.
fn next_replica(at: usize, count: usize, killed: &tokio::sync::watch::Receiver<bool>) -> usize {
    let next = (at + 1) % count;
    if next == 0 && *killed.borrow() {
        1
    } else {
        next
    }
}

/// The `run.worker.detached` events of a log, as (worker, reason).
fn detaches(events: &[pb::RunEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e.r#type == "run.worker.detached")
        .map(|e| {
            (
                e.attributes["worker_id"].clone(),
                e.attributes["reason"].clone(),
            )
        })
        .collect()
}

/// One allowed call and its result on `session`.
async fn step(session: &mut Session, call_id: &str) {
    session.request(call_id, "Bash", "echo step", "").await;
    assert_eq!(decision(&session.recv().await), pb::Decision::Allow);
    session.report(call_id, call_id).await;
    assert!(matches!(session.recv().await, Out::ResultAck(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_that_lost_its_run_writes_nothing_more_for_it() {
    let Some(db) = database().await else { return };
    let cluster = Cluster::new(&db.url, &["--lease-seconds", "3"]);
    let [a, b]: [_; 2] = cluster.replicas(2).await.try_into().ok().unwrap();
    let token = cluster.token();
    let (run_id, worker_token) = a.start_run(&token).await;
    let (mut at_a, _) = Session::attach(a.addr, &run_id, &worker_token, "w-a")
        .await
        .unwrap();
    step(&mut at_a, "c1").await;

    // A stops answering; the worker goes to B, which takes the run over at once.
    a.signal("STOP");
    let (mut at_b, attached) = Session::attach(b.addr, &run_id, &worker_token, "w-b")
        .await
        .unwrap();
    assert!(attached.resumed);
    step(&mut at_b, "c2").await;
    // The worker gives up its stream to A; A, resumed, sees it closed and would record
    // the detach, but its lease is gone.
    drop(at_a);
    a.signal("CONT");
    tokio::time::sleep(Duration::from_secs(2)).await;
    step(&mut at_b, "c3").await;
    at_b.complete().await;
    assert!(matches!(at_b.recv().await, Out::Finished(_)));
    drop(at_b);

    let deadline = Instant::now() + PATIENCE;
    let stored = loop {
        let stored = events(&b, &token, &run_id).await;
        if stored
            .last()
            .is_some_and(|e| e.r#type == "run.worker.detached")
            || Instant::now() > deadline
        {
            break stored;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_gapless(&stored);
    // B closed A's session as lost when it took over; A wrote nothing after that.
    assert_eq!(
        detaches(&stored),
        [
            ("w-a".to_string(), "session lost".to_string()),
            ("w-b".to_string(), "run finished".to_string()),
        ]
    );
    assert_eq!(
        get_run(&b, &token, &run_id).await.status(),
        pb::RunStatus::Completed
    );
    // A is alive and well.
    let mut a = a;
    assert!(a.child.try_wait().unwrap().is_none(), "replica A exited");
    assert!(a
        .runs(&token)
        .await
        .get_run(pb::GetRunRequest {
            run_id: run_id.clone()
        })
        .await
        .is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_run_fails_worker_lost_once_decided_by_one_survivor() {
    let Some(db) = database().await else { return };
    let cluster = Cluster::new(&db.url, &["--lease-seconds", "2", "--reattach-grace", "1"]);
    let mut replicas = cluster.replicas(3).await;
    let token = cluster.token();
    let (run_id, worker_token) = replicas[0].start_run(&token).await;
    let (mut worker, _) = Session::attach(replicas[0].addr, &run_id, &worker_token, "w")
        .await
        .unwrap();
    step(&mut worker, "c1").await;
    replicas[0].kill_9();
    drop(worker);

    // The lease lapses (2 s), a survivor adopts the run within a third of that, and its
    // worker's grace (1 s) runs out.
    let deadline = Instant::now() + PATIENCE;
    let run = loop {
        let run = get_run(&replicas[1], &token, &run_id).await;
        if run.status() != pb::RunStatus::Running || Instant::now() > deadline {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(run.status(), pb::RunStatus::Failed);
    assert_eq!(run.error, "worker lost");
    // Give a second survivor every chance to decide it again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stored = events(&replicas[2], &token, &run_id).await;
    assert_gapless(&stored);
    let types: Vec<&str> = stored.iter().map(|e| e.r#type.as_str()).collect();
    assert_eq!(
        types,
        [
            "run.created",
            "run.started",
            "run.worker.attached",
            "run.toolcall.approved",
            "run.toolcall.result",
            "run.worker.detached",
            "run.failed",
        ]
    );
    assert_eq!(
        detaches(&stored),
        [("w".to_string(), "session lost".to_string())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_made_at_another_replica_holds_at_the_owner() {
    let Some(db) = database().await else { return };
    let cluster = Cluster::new(&db.url, &[]);
    let [a, b, c]: [_; 3] = cluster.replicas(3).await.try_into().ok().unwrap();
    let token = cluster.token();
    let (run_id, worker_token) = a.start_run(&token).await;
    let (mut worker, _) = Session::attach(a.addr, &run_id, &worker_token, "w-a")
        .await
        .unwrap();
    worker.request("c1", "Edit", "", "src/main.rs").await;
    assert_eq!(decision(&worker.recv().await), pb::Decision::Ask);
    // Answered for the run at C: the relayed answer carries its scope to A.
    c.runs(&token)
        .await
        .resolve_ask(pb::ResolveAskRequest {
            run_id: run_id.clone(),
            call_id: "c1".into(),
            decision: pb::Decision::Allow as i32,
            scope: pb::AnswerScope::Run as i32,
            path_glob: "src/**".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(decision(&worker.recv().await), pb::Decision::Allow);
    worker.request("c2", "Edit", "", "src/lib.rs").await;
    assert_eq!(decision(&worker.recv().await), pb::Decision::Allow);
    // Any replica lists it from the log.
    let listed = b
        .runs(&token)
        .await
        .list_grants(pb::ListGrantsRequest {
            run_id: run_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .grants;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].grant_id.as_str(), listed[0].path_glob.as_str()),
        ("g1", "src/**")
    );
    // Revoked at B, a replica that does not own the run: relayed to A, which records it.
    let revoke = pb::RevokeGrantRequest {
        run_id: run_id.clone(),
        grant_id: "g1".into(),
        reason: "too wide".into(),
    };
    let revoked = b
        .runs(&token)
        .await
        .revoke_grant(revoke.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(revoked.grant_id, "g1");
    assert!(revoked.revoked_at.is_some(), "{revoked:?}");
    // Revoked once: again, anywhere, is refused as at the owner.
    let again = c.runs(&token).await.revoke_grant(revoke).await.unwrap_err();
    assert_eq!(again.code(), tonic::Code::FailedPrecondition, "{again:?}");
    worker.request("c3", "Edit", "", "src/lib.rs").await;
    assert_eq!(decision(&worker.recv().await), pb::Decision::Ask);
}
