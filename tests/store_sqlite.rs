//! The SQLite store against a real database file in a temporary directory: what only it
//! does (group commit, reopening, migrations, closing). The contract it shares with
//! `MemoryStore` is tested in `store_contract.rs`.

mod store_common;

use std::path::Path;
use std::sync::Arc;

use runplane::domain::{Run, Status};
use runplane::store::{
    RunQuery, RunStore, SqliteStore, SqliteStoreOptions, StoreError, Synchronous,
};
use store_common::*;

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
        let refused = duplicate.await;
        assert!(
            matches!(refused, Err(StoreError::Invalid { .. })),
            "{refused:?}"
        );
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
    assert_eq!(
        before.iter().map(|m| m.0).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6, 7]
    );

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
        "database error: database schema version 99 is newer than this runplane (7)"
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
        matches!(&err, StoreError::Corrupt { run_id: Some(run), seq: None, .. } if run == "run-1"),
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

/// SQLite's purge stops a batch at about 1,000 events, so the commits queued behind it on
/// the one writer wait a few milliseconds at most; one run is taken however long its log.
#[tokio::test(flavor = "multi_thread")]
async fn a_purge_batch_stops_at_its_event_budget() {
    let (dir, store) = fresh();
    for i in 0..3 {
        let id = format!("long-{i}");
        let mut run = new_run(&id, "task", "proj", "agent", at(i));
        let log: Vec<Event> = (1..=600).map(|seq| event(&id, seq, "x")).collect();
        store.commit(create(&run, log)).await.unwrap();
        let running = transition(&mut run, Status::Running, at(10), vec![]);
        store.commit(running).await.unwrap();
        let ended = transition(&mut run, Status::Completed, at(20 + i), vec![]);
        store.commit(ended).await.unwrap();
    }
    let cutoff = at(1_000_000);
    // The log's rows are moved out of the journal at a reopen; the budget counts the log.
    store.close();
    let store = open(dir.path());
    assert_eq!(store.purge_finished_before(cutoff, 100).await.unwrap(), 2);
    assert_eq!(store.get_run("long-0").await.unwrap(), None);
    assert_eq!(store.get_run("long-1").await.unwrap(), None);
    assert_eq!(seqs(&store, "long-2").await.len(), 600);
    assert_eq!(store.purge_finished_before(cutoff, 100).await.unwrap(), 1);
    assert_eq!(store.purge_finished_before(cutoff, 100).await.unwrap(), 0);
}
