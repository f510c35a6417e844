//! The SQLite store against a real database file in a temporary directory.

mod store_common;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use runplane::domain::{Run, StallTracker, Status};
use runplane::store::{
    Commit, RunQuery, RunStore, SqliteStore, SqliteStoreOptions, StoreError, Synchronous,
};
use store_common::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_created_run_reads_back_exactly() {
    let (_dir, store) = fresh();
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
    assert_eq!(all_events(&store, "run-1").await, events);
    assert_eq!(store.get_run("nope").await.unwrap(), None);
    assert!(all_events(&store, "nope").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn versions_guard_every_write() {
    let (_dir, store) = fresh();
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
    assert_eq!(conflict(err), ("ghost".into(), Some(1), None));

    // A change that forgets to raise the version would let the next writer overwrite it.
    let same = Commit {
        expected_version: Some(2),
        ..create(&run, vec![])
    };
    assert!(matches!(
        store.commit(same).await,
        Err(StoreError::Database(_))
    ));
    assert_eq!(store.get_run("run-1").await.unwrap(), Some(run));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_log_refuses_gaps_repeats_and_strangers() {
    let (_dir, store) = fresh();
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    store
        .commit(create(&run, vec![event("run-1", 1, "run.started")]))
        .await
        .unwrap();

    for bad in [
        vec![event("run-1", 3, "gap")],
        vec![event("run-1", 1, "repeat")],
        vec![event("run-1", 2, "ok"), event("run-1", 4, "gap inside")],
        vec![event("run-2", 2, "stranger")],
    ] {
        let mut attempt = run.clone();
        let err = store
            .commit(change(&mut attempt, bad.clone(), None))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Database(_)), "{bad:?}: {err:?}");
    }
    // Each refused commit was undone whole: the run is still at version 1.
    store
        .commit(change(&mut run, vec![event("run-1", 2, "ok")], None))
        .await
        .unwrap();
    let seqs = seqs(&store, "run-1").await;
    assert_eq!(seqs, [1, 2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_commit_fails_alone_in_its_group() {
    let (_dir, store) = fresh();
    let mut runs = Vec::new();
    for i in 0..200 {
        let id = format!("run-{i:03}");
        let run = new_run(&id, "task", "proj", "agent", at(i));
        store
            .commit(create(&run, vec![event(&id, 1, "run.started")]))
            .await
            .unwrap();
        runs.push(run);
    }
    // Queue everything before awaiting anything, so the writer finds it all waiting and
    // groups good and bad commits into the same transactions.
    let mut pending = Vec::new();
    for run in &mut runs {
        let id = run.id.clone();
        let good = change(run, vec![event(&id, 2, "first")], None);
        let mut replay = run.clone();
        let duplicate = change(&mut replay, vec![event(&id, 2, "duplicate")], None);
        let next = change(run, vec![event(&id, 3, "second")], None);
        pending.push((
            store.commit(good),
            store.commit(duplicate),
            store.commit(next),
        ));
    }
    for (good, duplicate, next) in pending {
        good.await.unwrap();
        assert!(matches!(duplicate.await, Err(StoreError::Database(_))));
        // Succeeds only if the duplicate's run update was rolled back with its event.
        next.await.unwrap();
    }
    for run in &runs {
        assert_eq!(store.get_run(&run.id).await.unwrap().as_ref(), Some(run));
        let kinds: Vec<String> = all_events(&store, &run.id)
            .await
            .into_iter()
            .map(|e| label(&e))
            .collect();
        assert_eq!(kinds, ["run.started", "first", "second"]);
    }
}

/// 25 runs: ids ordered like their creation; runs 10–13 share one creation time.
async fn seed_listing(store: &SqliteStore) -> Vec<Run> {
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

#[tokio::test(flavor = "multi_thread")]
async fn list_runs_filters_and_orders() {
    let (_dir, store) = fresh();
    let all = seed_listing(&store).await;
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

#[tokio::test(flavor = "multi_thread")]
async fn list_runs_pages_without_gaps_or_repeats() {
    let (_dir, store) = fresh();
    let all = seed_listing(&store).await;

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

#[tokio::test(flavor = "multi_thread")]
async fn list_events_reads_a_window() {
    let (_dir, store) = fresh();
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

/// Runs in every status; the live ones carry events and, some, a stall tracker.
async fn seed_live(store: &SqliteStore) -> Vec<(Run, Option<StallTracker>, Vec<Event>)> {
    let mut live = Vec::new();
    for (i, status) in Status::ALL.into_iter().enumerate() {
        let id = format!("run-{status}");
        let mut run = new_run(&id, "task", "proj", "agent", at(i as i64));
        let started = vec![event(&id, 1, "run.started")];
        store.commit(create(&run, started.clone())).await.unwrap();
        let mut events = started;
        let mut stall = None;
        if status != Status::Pending {
            let expected = run.version;
            run.transition(Status::Running, at(100)).unwrap();
            let mut tracker = StallTracker::new(3);
            tracker.record_step("Read", true, "same");
            events.push(event(&id, 2, "run.worker.attached"));
            let commit = Commit {
                run: Arc::new(run.clone()),
                expected_version: Some(expected),
                events: events[1..].iter().cloned().map(Into::into).collect(),
                stall: Some(tracker.clone()),
            };
            store.commit(commit).await.unwrap();
            stall = Some(tracker);
            // No stall update: the stored tracker stays.
            events.push(event(&id, 3, "run.toolcall.approved"));
            store
                .commit(change(&mut run, events[2..].to_vec(), None))
                .await
                .unwrap();
        }
        if status != Status::Pending && status != Status::Running {
            let expected = run.version;
            run.transition(status, at(200)).unwrap();
            events.push(event(&id, 4, "run.finished"));
            let commit = Commit {
                expected_version: Some(expected),
                ..create(&run, events[3..].to_vec())
            };
            store.commit(commit).await.unwrap();
        }
        if !status.is_terminal() {
            live.push((run, stall, events));
        }
    }
    live
}

#[tokio::test(flavor = "multi_thread")]
async fn live_runs_restores_exactly_the_unfinished_runs() {
    let (_dir, store) = fresh();
    let expected = seed_live(&store).await;
    let live = store.live_runs().await.unwrap();
    let got: Vec<_> = live
        .into_iter()
        .map(|s| (s.run, s.stall, s.events))
        .collect();
    assert_eq!(got.len(), 3);
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reopened_store_has_everything_and_migrates_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runplane.db");
    let migrations = |file: &Path| -> Vec<(i64, String)> {
        let conn = rusqlite::Connection::open(file).unwrap();
        let mut stmt = conn
            .prepare("SELECT version, applied_at FROM schema_migrations ORDER BY version")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let (expected, listed) = {
        let store = open(dir.path());
        let expected = seed_live(&store).await;
        let listed = store
            .list_runs(RunQuery {
                limit: 100,
                ..RunQuery::default()
            })
            .await
            .unwrap();
        (expected, listed)
    };
    let before = migrations(&file);
    assert_eq!(before.iter().map(|m| m.0).collect::<Vec<_>>(), [1, 2, 3, 4]);

    let store = open(dir.path());
    let live = store.live_runs().await.unwrap();
    let got: Vec<_> = live
        .into_iter()
        .map(|s| (s.run, s.stall, s.events))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(
        store
            .list_runs(RunQuery {
                limit: 100,
                ..RunQuery::default()
            })
            .await
            .unwrap(),
        listed
    );
    drop(store);
    assert_eq!(migrations(&file), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    let conn = rusqlite::Connection::open(dir.path().join("runplane.db")).unwrap();
    conn.execute("INSERT INTO schema_migrations VALUES (99, 'future')", [])
        .unwrap();
    drop(conn);
    let err = SqliteStore::open(SqliteStoreOptions::new(dir.path().join("runplane.db")))
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "database error: database schema version 99 is newer than this runplane (4)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_stored_json_is_reported_as_corrupt() {
    let (dir, store) = fresh();
    let run = new_run("run-1", "task", "proj", "agent", at(0));
    store.commit(create(&run, vec![])).await.unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("runplane.db")).unwrap();
    conn.execute("UPDATE runs SET run_json = '{\"id\": 5}'", [])
        .unwrap();
    let err = store.get_run("run-1").await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.starts_with("run run-1: ")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_store_refuses_work_after_finishing_the_queue() {
    let (dir, store) = fresh();
    let queued: Vec<_> = (0..50)
        .map(|i| {
            store.commit(create(
                &new_run(&format!("run-{i}"), "t", "p", "a", at(i)),
                vec![],
            ))
        })
        .collect();
    store.close();
    for commit in queued {
        commit.await.unwrap();
    }
    let late = new_run("late", "t", "p", "a", at(0));
    assert!(matches!(
        store.commit(create(&late, vec![])).await,
        Err(StoreError::Closed)
    ));
    assert!(matches!(
        store.get_run("run-1").await,
        Err(StoreError::Closed)
    ));
    drop(store);
    let store = open(dir.path());
    let page = store
        .list_runs(RunQuery {
            limit: 100,
            ..RunQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(page.runs.len(), 50);
}

#[test]
fn synchronous_spells_like_the_pragma() {
    assert_eq!(Synchronous::default(), Synchronous::Normal);
    for (mode, text) in [(Synchronous::Normal, "normal"), (Synchronous::Full, "full")] {
        assert_eq!(mode.to_string(), text);
        assert_eq!(text.parse::<Synchronous>().unwrap(), mode);
        assert_eq!(serde_json::to_string(&mode).unwrap(), format!("\"{text}\""));
    }
    assert!("FULL".parse::<Synchronous>().is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn many_concurrent_writers_keep_every_log_gapless() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()));
    let elapsed = hammer(store, 200, 50).await;
    eprintln!(
        "200 × 50 commits in {elapsed:.2}s: {:.0} commits/s",
        10_000.0 / elapsed
    );
}

/// Throughput with 1,000 interleaved runs, the case that defeats a `(run_id, seq)` index. Run with
/// `cargo test --release --test store_sqlite -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn throughput_with_interleaved_runs() {
    for synchronous in [Synchronous::Normal, Synchronous::Full] {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteStoreOptions {
            synchronous,
            ..SqliteStoreOptions::new(dir.path().join("runplane.db"))
        };
        let store = Arc::new(SqliteStore::open(options).unwrap());
        let elapsed = hammer(store, 1_000, 200).await;
        eprintln!(
            "{synchronous}: 1,000 runs × 200 commits: {:.0} commits/s",
            200_000.0 / elapsed
        );
    }
}

/// The writer rewrites the stored run only when a hash of its definition (every field but
/// the progress) changes: a change to any one field alone must still be stored, also by a
/// writer that reopened the file and knows no hash yet.
#[tokio::test(flavor = "multi_thread")]
async fn a_change_to_any_single_field_is_stored() {
    use runplane::domain::{DeliverMode, ExecMode};
    type Edit = fn(&mut Run);
    let edits: [(&str, Edit); 10] = [
        ("team_id", |r| r.team_id = "team-b".into()),
        ("policy_profile", |r| r.policy_profile = "other".into()),
        ("exec_mode", |r| r.exec_mode = ExecMode::Sandbox),
        ("deliver_mode", |r| {
            r.deliver_mode = Some(DeliverMode::Patch)
        }),
        ("output", |r| r.output = "done".into()),
        ("error", |r| r.error = "broken".into()),
        ("started_at", |r| r.started_at = at(77)),
        ("completed_at", |r| r.completed_at = Some(at(88))),
        ("status", |r| r.status = Status::Running),
        ("step_count and cost", |r| {
            r.step_count += 1;
            r.cost_usd += 0.5;
        }),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    {
        let store = open(dir.path());
        store.commit(create(&run, vec![])).await.unwrap();
        for (field, edit) in edits {
            edit(&mut run);
            store.commit(change(&mut run, vec![], None)).await.unwrap();
            let stored = store.get_run("run-1").await.unwrap();
            assert_eq!(stored.as_ref(), Some(&run), "after a change of {field}");
        }
        store.close();
    }
    let store = open(dir.path());
    run.output = "after reopen".into();
    store.commit(change(&mut run, vec![], None)).await.unwrap();
    assert_eq!(store.get_run("run-1").await.unwrap(), Some(run));
}

/// The coordinator changes its run in place after each commit (`Arc::make_mut`): that
/// copies nothing only if the store has let go of the run by the time it answers, also when
/// it refuses the commit.
#[tokio::test(flavor = "multi_thread")]
async fn the_store_lets_go_of_the_run_before_it_answers() {
    let (_dir, store) = fresh();
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
