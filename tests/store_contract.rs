//! The store contract: every case here runs against `SqliteStore` (a new file in a temp
//! dir), `MemoryStore` and `PostgresStore` (a new database on the test server, see
//! `store_common/postgres.rs`; skipped when there is none), through `Arc<dyn RunStore>`,
//! and must pass the same way on each. What only one store does (reopening, group commit,
//! the journal, migrations, the lock file) is tested in `store_sqlite.rs`,
//! `store_journal.rs`, `store_checkpoint.rs` and `store_postgres.rs`.

#[macro_use]
mod store_common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use runplane::domain::event::{Decided, Resolved};
use runplane::domain::{
    Credential, CredentialKind, Decision, Event, EventKind, PolicyVersion, Role, Scope,
};
use runplane::store::{Commit, RunQuery, RunStore, StoreError};
use store_common::*;

contract!(
    a_created_run_reads_back_exactly,
    versions_guard_every_write,
    the_log_refuses_gaps_repeats_and_strangers,
    event_times_keep_microseconds,
    commits_and_callbacks_complete_in_order,
    list_runs_filters_and_orders,
    list_runs_pages_without_gaps_or_repeats,
    list_runs_keeps_to_the_scope,
    list_events_reads_a_window,
    live_runs_restores_exactly_the_unfinished_runs,
    live_run_finds_one_unfinished_run,
    credentials_are_stored_found_and_revoked,
    a_policy_version_is_stored_once_and_found_by_hash,
    the_store_lets_go_of_the_run_before_it_answers,
    pending_asks_follow_the_log,
    get_run_and_stall_reads_the_last_committed_tracker,
);

/// What a commit refused as `StoreError::Invalid` was refused for, as "run ID: detail".
fn refused(outcome: Result<(), StoreError>) -> String {
    match outcome {
        Err(StoreError::Invalid { run_id, detail }) => format!("run {run_id}: {detail}"),
        other => panic!("not refused as invalid: {other:?}"),
    }
}

async fn a_created_run_reads_back_exactly(store: Arc<dyn RunStore>) {
    let mut run = new_run(
        "run-1",
        "task",
        "proj",
        "agent",
        at(1) + Duration::nanoseconds(123),
    );
    run.team_id = "team".into();
    run.cost_usd = 0.125;
    let events = vec![
        event("run-1", 1, "run.started"),
        event("run-1", 2, "run.toolcall.approved"),
    ];
    store.commit(create(&run, events.clone())).await.unwrap();

    assert_eq!(store.get_run("run-1").await.unwrap(), Some(run));
    assert_eq!(all_events(&*store, "run-1").await, events);
    assert_eq!(store.get_run("nope").await.unwrap(), None);
    assert!(all_events(&*store, "nope").await.is_empty());
}

async fn versions_guard_every_write(store: Arc<dyn RunStore>) {
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    store.commit(create(&run, vec![])).await.unwrap();
    let stale = run.clone();

    run.transition(Status::Running, at(5)).unwrap();
    store
        .commit(Commit {
            run: Arc::new(run.clone()),
            expected_version: Some(1),
            events: vec![event("run-1", 1, "run.started").into()],
            stall: None,
        })
        .await
        .unwrap();
    assert_eq!(store.get_run("run-1").await.unwrap(), Some(run.clone()));

    let mut late = stale.clone();
    let err = store.commit(change(&mut late, vec![], None)).await;
    assert_eq!(conflict(err), ("run-1".into(), Some(1), Some(2)));
    let err = store.commit(create(&stale, vec![])).await;
    assert_eq!(conflict(err), ("run-1".into(), None, Some(2)));
    let mut ghost = new_run("ghost", "task", "proj", "agent", at(0));
    let err = store.commit(change(&mut ghost, vec![], None)).await;
    assert!(
        matches!(&err, Err(StoreError::NotFound { run_id }) if run_id == "ghost"),
        "{err:?}"
    );

    // A change that forgets to raise the version would let the next writer overwrite it.
    let same = Commit {
        expected_version: Some(2),
        ..create(&run, vec![])
    };
    assert_eq!(
        refused(store.commit(same).await),
        "run run-1: a change must raise the version past 2, got 2"
    );
    assert_eq!(store.get_run("run-1").await.unwrap(), Some(run));
}

async fn the_log_refuses_gaps_repeats_and_strangers(store: Arc<dyn RunStore>) {
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    store
        .commit(create(&run, vec![event("run-1", 1, "run.started")]))
        .await
        .unwrap();

    for (bad, message) in [
        (
            vec![event("run-1", 3, "gap")],
            "run run-1: event seq 3 does not continue the log (next is 2)",
        ),
        (
            vec![event("run-1", 1, "repeat")],
            "run run-1: event seq 1 does not continue the log (next is 2)",
        ),
        (
            vec![event("run-1", 2, "ok"), event("run-1", 4, "gap inside")],
            "run run-1: event seq 4 does not continue the log (next is 3)",
        ),
        (
            vec![event("run-2", 2, "stranger")],
            "run run-1: event seq 2 belongs to run run-2",
        ),
    ] {
        let mut attempt = run.clone();
        let outcome = store.commit(change(&mut attempt, bad.clone(), None)).await;
        assert_eq!(refused(outcome), message, "{bad:?}");
    }
    // A new run's log starts at 1.
    let fresh_run = new_run("run-2", "task", "proj", "agent", at(1));
    assert_eq!(
        refused(
            store
                .commit(create(&fresh_run, vec![event("run-2", 2, "late start")]))
                .await
        ),
        "run run-2: event seq 2 does not continue the log (next is 1)"
    );
    assert_eq!(store.get_run("run-2").await.unwrap(), None);
    // Each refused commit was undone whole: the run is still at version 1.
    store
        .commit(change(&mut run, vec![event("run-1", 2, "ok")], None))
        .await
        .unwrap();
    let seqs = seqs(&*store, "run-1").await;
    assert_eq!(seqs, [1, 2]);
}

/// 25 runs: ids ordered like their creation; runs 10–13 share one creation time.
async fn seed_listing(store: &dyn RunStore) -> Vec<Run> {
    let mut runs = Vec::new();
    for i in 0..25i64 {
        let created = at(if (10..14).contains(&i) {
            10_000_000
        } else {
            i * 1_000_000
        });
        let mut run = new_run(
            &format!("run-{i:02}"),
            ["task-a", "task-b"][i as usize % 2],
            ["p0", "p1", "p2"][i as usize % 3],
            ["a0", "a1", "a2", "a3", "a4"][i as usize % 5],
            created,
        );
        store.commit(create(&run, vec![])).await.unwrap();
        if i % 4 == 0 {
            let expected = run.version;
            run.transition(Status::Running, created).unwrap();
            run.transition(Status::Completed, created).unwrap();
            let commit = Commit {
                expected_version: Some(expected),
                ..create(&run, vec![])
            };
            store.commit(commit).await.unwrap();
        }
        runs.push(run);
    }
    // Newest first; ties on created_at broken by id, descending.
    runs.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
    runs
}

fn filter(
    task: Option<&str>,
    project: Option<&str>,
    agent: Option<&str>,
    status: Option<Status>,
) -> RunQuery {
    RunQuery {
        task_id: task.map(Into::into),
        project_id: project.map(Into::into),
        agent_id: agent.map(Into::into),
        status,
        limit: 100,
        after: None,
        scope: Default::default(),
    }
}

async fn list_runs_filters_and_orders(store: Arc<dyn RunStore>) {
    let all = seed_listing(&*store).await;
    for (query, count) in [
        (filter(None, None, None, None), 25),
        (filter(Some("task-b"), None, None, None), 12),
        (filter(None, Some("p2"), None, None), 8),
        (filter(None, None, Some("a3"), None), 5),
        (filter(None, None, None, Some(Status::Completed)), 7),
        (
            filter(Some("task-b"), None, Some("a1"), Some(Status::Pending)),
            3,
        ),
        (filter(None, Some("nope"), None, None), 0),
    ] {
        let wanted =
            |value: &Option<String>, actual: &str| value.as_deref().is_none_or(|v| v == actual);
        let expected: Vec<Run> = all
            .iter()
            .filter(|r| {
                wanted(&query.task_id, &r.task_id)
                    && wanted(&query.project_id, &r.project_id)
                    && wanted(&query.agent_id, &r.agent_id)
                    && query.status.is_none_or(|s| s == r.status)
            })
            .cloned()
            .collect();
        let page = store.list_runs(query.clone()).await.unwrap();
        assert_eq!(page.runs.len(), count, "{query:?}");
        assert_eq!(page.runs, expected, "{query:?}");
        assert_eq!(page.next, None);
    }
}

async fn list_runs_pages_without_gaps_or_repeats(store: Arc<dyn RunStore>) {
    let all = seed_listing(&*store).await;

    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_runs(RunQuery {
                limit: 10,
                after,
                ..RunQuery::default()
            })
            .await
            .unwrap();
        sizes.push(page.runs.len());
        seen.extend(page.runs);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(sizes, [10, 10, 5]);
    assert_eq!(seen, all);
    let ids: HashSet<&str> = seen.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), 25);

    // Exactly one page's worth: no promise of a next page that would be empty.
    let page = store
        .list_runs(RunQuery {
            limit: 25,
            ..RunQuery::default()
        })
        .await
        .unwrap();
    assert_eq!((page.runs.len(), page.next), (25, None));
}

async fn list_events_reads_a_window(store: Arc<dyn RunStore>) {
    let run = new_run("run-1", "task", "proj", "agent", at(0));
    let events: Vec<Event> = (1..=10)
        .map(|seq| event("run-1", seq, "run.toolcall.result"))
        .collect();
    store.commit(create(&run, events.clone())).await.unwrap();

    assert_eq!(
        store.list_events("run-1", 4, 3).await.unwrap(),
        events[3..6]
    );
    assert_eq!(
        store.list_events("run-1", 9, 10).await.unwrap(),
        events[8..]
    );
    assert_eq!(store.list_events("run-1", 0, 2).await.unwrap(), events[..2]);
    assert!(store.list_events("run-1", 11, 10).await.unwrap().is_empty());
    assert!(store.list_events("run-1", 1, 0).await.unwrap().is_empty());
}

async fn live_runs_restores_exactly_the_unfinished_runs(store: Arc<dyn RunStore>) {
    let expected = seed_live(&*store).await;
    let live = store.live_runs().await.unwrap();
    let got: Vec<_> = live
        .into_iter()
        .map(|s| (s.run, s.stall, s.events))
        .collect();
    assert_eq!(got.len(), 3);
    assert_eq!(got, expected);
}

/// The coordinator changes its run in place after each commit (`Arc::make_mut`): that
/// copies nothing only if the store has let go of the run by the time it answers, also when
/// it refuses the commit.
async fn the_store_lets_go_of_the_run_before_it_answers(store: Arc<dyn RunStore>) {
    let mut run = Arc::new(new_run("run-1", "task", "proj", "agent", at(0)));
    store
        .commit(Commit {
            run: Arc::clone(&run),
            expected_version: None,
            events: vec![],
            stall: None,
        })
        .await
        .unwrap();
    for i in 0..200_i64 {
        let expected = run.version;
        Arc::make_mut(&mut run).touch(at(1 + i));
        let stale = i % 10 == 9;
        let outcome = store
            .commit(Commit {
                run: Arc::clone(&run),
                expected_version: Some(if stale { expected - 1 } else { expected }),
                events: vec![],
                stall: None,
            })
            .await;
        assert_eq!(outcome.is_err(), stale, "commit {i}");
        assert_eq!(Arc::strong_count(&run), 1, "after commit {i}");
        if stale {
            Arc::make_mut(&mut run).version = expected;
        }
    }
}

/// Events keep their time to the microsecond, as SQLite's column does.
async fn event_times_keep_microseconds(store: Arc<dyn RunStore>) {
    let run = new_run("run-1", "task", "proj", "agent", at(0));
    let mut precise = event("run-1", 1, "run.started");
    precise.at = at(5) + Duration::nanoseconds(999);
    store
        .commit(create(&run, vec![precise.clone()]))
        .await
        .unwrap();
    let stored = all_events(&*store, "run-1").await;
    assert_eq!(
        stored,
        [Event {
            at: at(5),
            ..precise
        }]
    );
}

/// `commit_then` calls back with each outcome, in the order the commits were issued, also
/// interleaved with `commit`.
async fn commits_and_callbacks_complete_in_order(store: Arc<dyn RunStore>) {
    let outcomes: Arc<Mutex<Vec<(u64, bool)>>> = Arc::default();
    let record = |n: u64| -> runplane::store::CommitDone {
        let outcomes = Arc::clone(&outcomes);
        Box::new(move |outcome| outcomes.lock().unwrap().push((n, outcome.is_ok())))
    };
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    store.commit_then(create(&run, vec![]), record(0));
    // A second create of the same run is refused; its callback hears so.
    store.commit_then(create(&run, vec![]), record(1));
    for seq in 1..=5 {
        store.commit_then(
            change(&mut run, vec![event("run-1", seq, "step")], None),
            record(1 + seq),
        );
    }
    let last = store.commit(change(&mut run, vec![event("run-1", 6, "last")], None));
    last.await.unwrap();
    assert_eq!(
        *outcomes.lock().unwrap(),
        [
            (0, true),
            (1, false),
            (2, true),
            (3, true),
            (4, true),
            (5, true),
            (6, true)
        ]
    );
    assert_eq!(store.get_run("run-1").await.unwrap(), Some(run));
    assert_eq!(seqs(&*store, "run-1").await, [1, 2, 3, 4, 5, 6]);
}

/// A scope keeps a listing to its teams and projects; a run without a team is in team "".
async fn list_runs_keeps_to_the_scope(store: Arc<dyn RunStore>) {
    for (i, (team, project)) in [
        ("red", "p1"),
        ("red", "p2"),
        ("blue", "p1"),
        ("", "p1"),
        ("blue", "p3"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut run = new_run(&format!("run-{i}"), "task", project, "agent", at(i as i64));
        run.team_id = team.into();
        store.commit(create(&run, vec![])).await.unwrap();
    }
    let ids = |teams: &[&str], projects: &[&str], limit: usize| RunQuery {
        limit,
        scope: Scope {
            teams: teams.iter().map(|t| t.to_string()).collect(),
            projects: projects.iter().map(|p| p.to_string()).collect(),
        },
        ..RunQuery::default()
    };
    for (query, expected) in [
        (
            ids(&[], &[], 10),
            vec!["run-4", "run-3", "run-2", "run-1", "run-0"],
        ),
        (ids(&["red"], &[], 10), vec!["run-1", "run-0"]),
        (ids(&["blue", ""], &[], 10), vec!["run-4", "run-3", "run-2"]),
        (ids(&[], &["p1"], 10), vec!["run-3", "run-2", "run-0"]),
        (
            ids(&["red", "blue"], &["p1", "p3"], 10),
            vec!["run-4", "run-2", "run-0"],
        ),
        (ids(&["green"], &[], 10), vec![]),
    ] {
        let page = store.list_runs(query.clone()).await.unwrap();
        let got: Vec<&str> = page.runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(got, expected, "{query:?}");
        assert_eq!(page.next, None);
    }
    // Paging within a scope never steps outside it; a limit of 0 reads as 1.
    let mut query = ids(&[], &["p1"], 0);
    let mut pages = Vec::new();
    loop {
        let page = store.list_runs(query.clone()).await.unwrap();
        pages.push(page.runs.iter().map(|r| r.id.clone()).collect::<Vec<_>>());
        match page.next {
            Some(next) => query.after = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, [["run-3"], ["run-2"], ["run-0"]]);
}

/// `live_run` returns what `live_runs` would for one run, and nothing for a finished or
/// unknown one.
async fn live_run_finds_one_unfinished_run(store: Arc<dyn RunStore>) {
    let expected = seed_live(&*store).await;
    for (run, stall, events) in expected {
        let stored = store.live_run(&run.id).await.unwrap().unwrap();
        assert_eq!(
            (stored.run, stored.stall, stored.events),
            (run, stall, events)
        );
    }
    assert_eq!(store.live_run("run-completed").await.unwrap(), None);
    assert_eq!(store.live_run("nope").await.unwrap(), None);
}

fn operator(name: &str, hash: &str, role: Role, created: i64) -> Credential {
    Credential {
        name: name.into(),
        hash: hash.into(),
        kind: CredentialKind::Operator {
            role,
            scope: Scope {
                teams: vec!["red".into()],
                projects: vec![],
            },
        },
        created_at: at(created) + Duration::nanoseconds(321),
        revoked_at: None,
    }
}

async fn a_policy_version_is_stored_once_and_found_by_hash(store: Arc<dyn RunStore>) {
    let first = PolicyVersion {
        hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        name: "team".into(),
        source: "name = \"team\"\ndescription = \"ünïcode \\\"q\\\"\"\n".into(),
        first_seen: at(1_000),
    };
    assert_eq!(store.policy_version(&first.hash).await.unwrap(), None);
    store.put_policy_version(first.clone()).await.unwrap();
    // Stored again (another process, or this one after a restart): the first one stays.
    let again = PolicyVersion {
        first_seen: at(2_000),
        ..first.clone()
    };
    store.put_policy_version(again).await.unwrap();
    assert_eq!(
        store.policy_version(&first.hash).await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(store.policy_version("0000").await.unwrap(), None);
}

async fn credentials_are_stored_found_and_revoked(store: Arc<dyn RunStore>) {
    let alice = operator("alice", "h-alice", Role::Admin, 20);
    let bob = operator("bob", "h-bob", Role::Viewer, 10);
    let worker = Credential {
        name: "worker:run-1".into(),
        hash: "h-worker".into(),
        kind: CredentialKind::Worker {
            run_id: "run-1".into(),
        },
        created_at: at(5),
        revoked_at: None,
    };
    for credential in [&alice, &bob, &worker] {
        store.put_credential(credential.clone()).await.unwrap();
    }
    let taken = |outcome: Result<(), StoreError>| match outcome {
        Err(StoreError::NameTaken(name)) => name,
        other => panic!("not NameTaken: {other:?}"),
    };
    // The name of a live credential, under another hash.
    let again = operator("alice", "h-alice-2", Role::Viewer, 30);
    assert_eq!(taken(store.put_credential(again.clone()).await), "alice");
    // The same hash under another name.
    let copy = operator("carol", "h-bob", Role::Viewer, 30);
    assert_eq!(taken(store.put_credential(copy).await), "carol");

    assert_eq!(
        store.credential("h-alice").await.unwrap(),
        Some(alice.clone())
    );
    assert_eq!(
        store.credential("h-worker").await.unwrap(),
        Some(worker.clone())
    );
    assert_eq!(store.credential("h-none").await.unwrap(), None);
    // Operators only, oldest first.
    assert_eq!(
        store.operator_credentials().await.unwrap(),
        [bob.clone(), alice.clone()]
    );

    let revoked_at = at(40) + Duration::nanoseconds(5);
    let revoked = Credential {
        revoked_at: Some(revoked_at),
        ..alice.clone()
    };
    assert_eq!(
        store.revoke_credential("alice", revoked_at).await.unwrap(),
        Some(revoked.clone())
    );
    assert_eq!(
        store.revoke_credential("alice", at(50)).await.unwrap(),
        None
    );
    assert_eq!(
        store.revoke_credential("nobody", at(50)).await.unwrap(),
        None
    );
    // Worker credentials are not revoked by name.
    assert_eq!(
        store
            .revoke_credential("worker:run-1", at(50))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.credential("h-alice").await.unwrap(),
        Some(revoked.clone())
    );
    assert_eq!(store.credential("h-worker").await.unwrap(), Some(worker));

    // Once revoked, the name is free again; the revoked one stays listed.
    store.put_credential(again.clone()).await.unwrap();
    assert_eq!(
        store.operator_credentials().await.unwrap(),
        [bob, revoked, again]
    );
}

/// A decision event for `call_id`.
fn decided(run_id: &str, seq: u64, call_id: &str, decision: Decision) -> Event {
    Event {
        run_id: run_id.into(),
        seq,
        at: at(seq as i64 * 1_000 + run_id.len() as i64),
        kind: EventKind::Decided(Decided {
            call_id: call_id.into(),
            tool: "Bash".into(),
            command: "npm publish".into(),
            path: String::new(),
            resolved_path: String::new(),
            paths: vec![],
            url: String::new(),
            input: r#"{"command":"npm publish"}"#.into(),
            decision,
            reason: "asks".into(),
            rule_index: Some(2),
            part: String::new(),
            step_count: seq as i32,
            deadline: Some(at(9_000_000)),
            profile: "ci".into(),
            profile_hash: "0b5e3c2a9f8d7e6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c".into(),
            grant: String::new(),
        }),
    }
}

/// The (run, call) of each pending ask, in the order the store returns them.
async fn pending(store: &Arc<dyn RunStore>, run_id: Option<&str>) -> Vec<(String, String)> {
    store
        .pending_asks(run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|event| match event.kind {
            EventKind::Decided(decided) => (event.run_id, decided.call_id),
            other => panic!("not a decision: {other:?}"),
        })
        .collect()
}

async fn pending_asks_follow_the_log(store: Arc<dyn RunStore>) {
    let mut one = new_run("run-1", "task", "proj", "agent", at(0));
    let mut two = new_run("run-22", "task", "proj", "agent", at(1));
    store
        .commit(create(&one, vec![event("run-1", 1, "created")]))
        .await
        .unwrap();
    store
        .commit(create(&two, vec![event("run-22", 1, "created")]))
        .await
        .unwrap();
    let asked = decided("run-1", 2, "a", Decision::Ask);
    store
        .commit(change(
            &mut one,
            vec![
                asked.clone(),
                decided("run-1", 3, "allowed", Decision::Allow),
                decided("run-1", 4, "b", Decision::Ask),
            ],
            None,
        ))
        .await
        .unwrap();
    store
        .commit(change(
            &mut two,
            vec![decided("run-22", 2, "c", Decision::Ask)],
            None,
        ))
        .await
        .unwrap();
    // Oldest first across runs; the stored event whole.
    assert_eq!(
        pending(&store, None).await,
        [("run-1", "a"), ("run-22", "c"), ("run-1", "b")].map(|(r, c)| (r.into(), c.into()))
    );
    assert_eq!(store.pending_asks(Some("run-1")).await.unwrap()[0], asked);

    let resolved = Event {
        run_id: "run-1".into(),
        seq: 5,
        at: at(6_000),
        kind: EventKind::Resolved(Resolved {
            call_id: "a".into(),
            decision: Decision::Allow,
            reason: "ok".into(),
            by: "alice".into(),
            note: String::new(),
        }),
    };
    store
        .commit(change(&mut one, vec![resolved], None))
        .await
        .unwrap();
    assert_eq!(
        pending(&store, Some("run-1")).await,
        [("run-1".into(), "b".into())]
    );
    assert_eq!(
        pending(&store, Some("run-22")).await,
        [("run-22".into(), "c".into())]
    );
    assert_eq!(pending(&store, Some("nobody")).await, []);
}

/// GetRun's read: the run with the tracker of its last commit that carried one, also once
/// the run is over (where `live_run` has nothing).
async fn get_run_and_stall_reads_the_last_committed_tracker(store: Arc<dyn RunStore>) {
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    store.commit(create(&run, vec![])).await.unwrap();
    assert_eq!(
        store.get_run_and_stall("run-1").await.unwrap(),
        Some((run.clone(), None))
    );

    let mut tracker = StallTracker::new(3);
    assert!(!tracker.record_step("Read", true, "same"));
    assert!(!tracker.record_step("Read", true, "same"));
    store
        .commit(change(&mut run, vec![], Some(tracker.clone())))
        .await
        .unwrap();
    // A commit without a tracker keeps the one before.
    store.commit(change(&mut run, vec![], None)).await.unwrap();
    let (read, stall) = store.get_run_and_stall("run-1").await.unwrap().unwrap();
    assert_eq!(read, run);
    let stall = stall.unwrap();
    assert_eq!((stall.consecutive(), stall.threshold()), (2, 3));
    assert_eq!(stall, tracker);

    assert!(tracker.record_step("Read", true, "same"));
    let read_version = run.version;
    run.transition(Status::Failed, at(9)).unwrap();
    store
        .commit(Commit {
            run: Arc::new(run.clone()),
            expected_version: Some(read_version),
            events: vec![],
            stall: Some(tracker.clone()),
        })
        .await
        .unwrap();
    assert_eq!(
        store.get_run_and_stall("run-1").await.unwrap(),
        Some((run, Some(tracker)))
    );
    assert_eq!(store.get_run_and_stall("nope").await.unwrap(), None);
}
