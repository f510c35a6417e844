//! The event journal: events are readable exactly once from the moment they are committed,
//! while their segment moves into the indexed log, and after a restart drains it.

mod store_common;

use std::path::Path;

use runplane::store::{RunQuery, RunStore, SqliteStore, SqliteStoreOptions, StoreError};
use store_common::*;

/// A store whose journal seals a segment every `segment_rows` events.
fn open_small(dir: &Path, segment_rows: usize) -> SqliteStore {
    SqliteStore::open(SqliteStoreOptions {
        journal_segment_rows: segment_rows,
        ..SqliteStoreOptions::new(dir.join("runplane.db"))
    })
    .unwrap()
}

/// (rows in `events`, rows in `event_journal`), read beside the store.
fn table_rows(dir: &Path) -> (i64, i64) {
    let conn = rusqlite::Connection::open(dir.join("runplane.db")).unwrap();
    let count = |table: &str| {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    };
    (count("events"), count("event_journal"))
}

/// `runs` runs, each given `per_run` events one commit at a time, interleaved across the
/// runs; after every round each run's log must read back exactly.
async fn interleave(store: &SqliteStore, runs: usize, per_run: u64) -> Vec<(Run, Vec<Event>)> {
    let mut state = Vec::new();
    for i in 0..runs {
        let id = format!("run-{i:03}");
        let run = new_run(&id, "task", "proj", "agent", at(i as i64));
        let first = vec![event(&id, 1, "run.created")];
        store.commit(create(&run, first.clone())).await.unwrap();
        state.push((run, first));
    }
    for seq in 2..=per_run {
        for (run, log) in &mut state {
            let next = event(&run.id, seq, "run.toolcall.approved");
            store
                .commit(change(run, vec![next.clone()], None))
                .await
                .unwrap();
            log.push(next);
        }
        for (run, log) in &state {
            assert_eq!(
                &all_events(store, &run.id).await,
                log,
                "{} after {seq}",
                run.id
            );
            // The progress rides on the journal rows and moves with them.
            assert_eq!(
                store.get_run(&run.id).await.unwrap().as_ref(),
                Some(run),
                "{} after {seq}",
                run.id
            );
        }
    }
    state
}

#[tokio::test(flavor = "multi_thread")]
async fn every_event_reads_back_once_while_segments_move() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_small(dir.path(), 10);
    let state = interleave(&store, 12, 15).await;

    // Windows across the journal/log boundary read the same as the whole log.
    for (run, log) in &state {
        assert_eq!(store.list_events(&run.id, 5, 4).await.unwrap(), log[4..8]);
    }
    let live = store.live_runs().await.unwrap();
    assert_eq!(live.len(), state.len());
    for (stored, (run, log)) in live.iter().zip(&state) {
        assert_eq!((&stored.run, &stored.events), (run, log));
    }
    // Most events have moved; the journal holds at most the sealed and the hot segment.
    let (indexed, journaled) = table_rows(dir.path());
    assert!(indexed >= 180 - 20, "{indexed} indexed");
    assert!(journaled <= 20 + 12, "{journaled} still in the journal");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reopened_store_drains_the_journal_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let state = {
        let store = open_small(dir.path(), 1_000);
        interleave(&store, 5, 6).await
    };
    assert_eq!(table_rows(dir.path()), (0, 30), "nothing moved yet");
    // A crash between a segment's move and its delete leaves rows in both tables.
    let conn = rusqlite::Connection::open(dir.path().join("runplane.db")).unwrap();
    let copied = conn
        .execute(
            "INSERT INTO events (run_no, seq, kind, at, attributes)
             SELECT run_no, seq, kind, at, attributes FROM event_journal WHERE seq <= 3",
            [],
        )
        .unwrap();
    assert_eq!(copied, 15);
    drop(conn);

    let store = open_small(dir.path(), 1_000);
    assert_eq!(table_rows(dir.path()), (30, 0));
    for (run, log) in &state {
        assert_eq!(&all_events(&store, &run.id).await, log);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gap_check_sees_the_journal_the_log_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let repeat = |run: &Run, seq: u64| {
        let mut stale = run.clone();
        change(&mut stale, vec![event(&run.id, seq, "repeat")], None)
    };
    let refused = |result: Result<(), StoreError>| match result {
        Err(StoreError::Invalid { run_id, detail }) => format!("run {run_id}: {detail}"),
        other => panic!("not refused: {other:?}"),
    };

    let store = open_small(dir.path(), 1);
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    store
        .commit(create(&run, vec![event("run-1", 1, "run.created")]))
        .await
        .unwrap();
    let message = refused(store.commit(repeat(&run, 1)).await);
    assert_eq!(
        message,
        "run run-1: event seq 1 does not continue the log (next is 2)"
    );
    // A refused commit writes nothing: the run keeps its version and the next commit fits.
    assert_eq!(store.get_run("run-1").await.unwrap().as_ref(), Some(&run));
    for seq in 2..=4 {
        store
            .commit(change(&mut run, vec![event("run-1", seq, "step")], None))
            .await
            .unwrap();
    }
    // Segments of one row: by now the first events have moved into the indexed log.
    assert!(table_rows(dir.path()).0 >= 2);
    refused(store.commit(repeat(&run, 2)).await);
    refused(store.commit(repeat(&run, 6)).await);
    drop(store);

    let store = open_small(dir.path(), 1);
    refused(store.commit(repeat(&run, 4)).await);
    store
        .commit(change(&mut run, vec![event("run-1", 5, "step")], None))
        .await
        .unwrap();
    let seqs = seqs(&store, "run-1").await;
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
}

/// Version 1's schema, as released: `version` and `stall_json` lived in `runs`.
const VERSION_1: &str = "
    CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL);
    INSERT INTO schema_migrations VALUES (1, '2026-12-01T00:00:00Z');
    CREATE TABLE runs (
        run_no INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, task_id TEXT NOT NULL,
        agent_id TEXT NOT NULL, project_id TEXT NOT NULL, status TEXT NOT NULL,
        created_at INTEGER NOT NULL, version INTEGER NOT NULL, run_json TEXT NOT NULL,
        stall_json TEXT
    );
    CREATE INDEX runs_created ON runs (created_at DESC, id DESC);
    CREATE TABLE events (
        run_no INTEGER NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
        at INTEGER NOT NULL, attributes TEXT NOT NULL
    );
    CREATE UNIQUE INDEX events_run_seq ON events (run_no, seq);
";

#[tokio::test(flavor = "multi_thread")]
async fn a_version_1_database_keeps_its_runs_progress_and_logs() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    run.transition(runplane::domain::Status::Running, at(5))
        .unwrap();
    run.step_count = 7;
    run.cost_usd = 0.25;
    run.version = 9;
    let stall = StallTracker::new(4);
    let log: Vec<Event> = (1..=3).map(|seq| event("run-1", seq, "step")).collect();
    {
        let conn = rusqlite::Connection::open(dir.path().join("runplane.db")).unwrap();
        conn.execute_batch(VERSION_1).unwrap();
        conn.execute(
            "INSERT INTO runs VALUES (1, 'run-1', 'task', 'agent', 'proj', 'running', 0, 9, ?1, ?2)",
            [
                serde_json::to_string(&run).unwrap(),
                serde_json::to_string(&stall).unwrap(),
            ],
        )
        .unwrap();
        for e in &log {
            conn.execute(
                "INSERT INTO events VALUES (1, ?1, ?2, ?3, ?4)",
                rusqlite::params![
                    e.seq as i64,
                    e.kind.name(),
                    e.at.timestamp_micros(),
                    serde_json::to_string(&e.kind.attributes()).unwrap()
                ],
            )
            .unwrap();
        }
    }

    let store = open_small(dir.path(), 1_000);
    assert_eq!(store.get_run("run-1").await.unwrap().as_ref(), Some(&run));
    let live = store.live_runs().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(
        (&live[0].run, &live[0].stall, &live[0].events),
        (&run, &Some(stall), &log)
    );
    // The migrated run takes its next change: the version and the log continue.
    let next = event("run-1", 4, "step");
    run.step_count = 8;
    store
        .commit(change(&mut run, vec![next.clone()], None))
        .await
        .unwrap();
    assert_eq!(store.get_run("run-1").await.unwrap().as_ref(), Some(&run));
    assert_eq!(all_events(&store, "run-1").await.last(), Some(&next));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_store_on_the_same_file_is_refused_until_the_first_closes() {
    let dir = tempfile::tempdir().unwrap();
    let first = open_small(dir.path(), 1_000);
    let file = dir.path().join("runplane.db");
    let refused = SqliteStore::open(SqliteStoreOptions::new(&file)).err();
    let expected = format!(
        "database error: {} is in use by another runplane store (it holds {}.lock)",
        file.display(),
        file.display()
    );
    assert_eq!(refused.map(|e| e.to_string()), Some(expected));
    first.close();
    let second = SqliteStore::open(SqliteStoreOptions::new(&file)).unwrap();
    assert!(second.live_runs().await.unwrap().is_empty());
}

/// The stored `(version, stall_json)` of a run's `run_progress` row, read beside the store.
fn progress_row(dir: &Path, run_no: i64) -> (i64, Option<String>) {
    let conn = rusqlite::Connection::open(dir.join("runplane.db")).unwrap();
    conn.query_row(
        "SELECT version, stall_json FROM run_progress WHERE run_no = ?1",
        [run_no],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn progress_in_the_journal_reads_back_and_a_reopen_applies_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_small(dir.path(), 1_000);
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    store
        .commit(create(&run, vec![event("run-1", 1, "run.created")]))
        .await
        .unwrap();
    let mut tracker = StallTracker::new(3);
    tracker.record_step("Read", true, "same");
    store
        .commit(change(
            &mut run,
            vec![event("run-1", 2, "run.toolcall.result")],
            Some(tracker.clone()),
        ))
        .await
        .unwrap();
    // A commit without events writes `run_progress` directly; the tracker that only the
    // journal holds must not be lost on the way.
    run.step_count = 7;
    run.cost_usd = 0.25;
    store.commit(change(&mut run, vec![], None)).await.unwrap();
    // And the journal again, without a tracker: the one before stays.
    run.step_count = 8;
    store
        .commit(change(
            &mut run,
            vec![event("run-1", 3, "run.toolcall.approved")],
            None,
        ))
        .await
        .unwrap();

    let check = |store: SqliteStore, run: Run, tracker: StallTracker| async move {
        assert_eq!(store.get_run("run-1").await.unwrap().as_ref(), Some(&run));
        let listed = store.list_runs(RunQuery {
            limit: 10,
            ..RunQuery::default()
        });
        assert_eq!(listed.await.unwrap().runs, std::slice::from_ref(&run));
        let live = store.live_run("run-1").await.unwrap().unwrap();
        assert_eq!((&live.run, live.stall.as_ref()), (&run, Some(&tracker)));
        assert_eq!(store.live_runs().await.unwrap(), [live]);
        store
    };
    let store = check(store, run.clone(), tracker.clone()).await;
    assert_eq!(run.version, 4);
    assert_eq!(
        progress_row(dir.path(), 1).0,
        3,
        "version 4 is in the journal only"
    );

    // A stale writer is refused with the newest version, the journal's.
    let mut stale = run.clone();
    stale.version = 2;
    let refused = store
        .commit(change(&mut stale, vec![event("run-1", 4, "stale")], None))
        .await;
    assert_eq!(conflict(refused), ("run-1".into(), Some(2), Some(4)));
    drop(store);

    let store = open_small(dir.path(), 1_000);
    let tracker_json = serde_json::to_string(&tracker).unwrap();
    assert_eq!(progress_row(dir.path(), 1), (4, Some(tracker_json)));
    let store = check(store, run.clone(), tracker).await;
    store
        .commit(change(&mut run, vec![event("run-1", 4, "step")], None))
        .await
        .unwrap();
    assert_eq!(store.get_run("run-1").await.unwrap(), Some(run));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stall_tracker_moves_with_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_small(dir.path(), 1);
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    store.commit(create(&run, vec![])).await.unwrap();
    let mut tracker = StallTracker::new(5);
    for seq in 1..=6 {
        tracker.record_step("Bash", true, &format!("output {}", seq % 2));
        let stall = (seq % 3 == 1).then(|| tracker.clone());
        store
            .commit(change(&mut run, vec![event("run-1", seq, "step")], stall))
            .await
            .unwrap();
    }
    // Segments of one row: the earlier rows have moved, progress and tracker with them.
    let (version, stall_json) = progress_row(dir.path(), 1);
    assert!(version >= 5, "run_progress at version {version}");
    let stored: StallTracker = serde_json::from_str(&stall_json.unwrap()).unwrap();
    let mut at_four = StallTracker::new(5);
    for seq in 1..=4 {
        at_four.record_step("Bash", true, &format!("output {}", seq % 2));
    }
    assert_eq!(
        stored, at_four,
        "the tracker of seq 4, the last one committed"
    );
    let live = store.live_run("run-1").await.unwrap().unwrap();
    assert_eq!(live.run, run);
    assert_eq!(live.stall, Some(at_four));
}

/// Reading one run walks its journal rows from the newest: the newest tracker can sit
/// behind newer rows without one, and only the journal holds it.
#[tokio::test(flavor = "multi_thread")]
async fn one_run_read_finds_the_newest_tracker_behind_newer_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_small(dir.path(), 1_000);
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    store.commit(create(&run, vec![])).await.unwrap();
    let mut tracker = StallTracker::new(5);
    for seq in 1..=5 {
        tracker.record_step("Bash", true, &format!("output {seq}"));
        let stall = (seq <= 2).then(|| tracker.clone());
        store
            .commit(change(&mut run, vec![event("run-1", seq, "step")], stall))
            .await
            .unwrap();
    }
    let mut at_two = StallTracker::new(5);
    for seq in 1..=2 {
        at_two.record_step("Bash", true, &format!("output {seq}"));
    }
    assert_eq!(progress_row(dir.path(), 1), (1, None), "all in the journal");
    let live = store.live_run("run-1").await.unwrap().unwrap();
    assert_eq!((&live.run, live.stall.as_ref()), (&run, Some(&at_two)));
    assert_eq!(store.get_run("run-1").await.unwrap(), Some(run));
}

/// A run deleted by retention while its rows are in the journal (hot and sealed segments
/// alike) is gone from both tables, and its rows never move into the log afterwards:
/// neither as later groups move the segments nor when a reopen drains the journal.
#[tokio::test(flavor = "multi_thread")]
async fn a_purged_run_never_comes_back_from_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_small(dir.path(), 4);
    let mut doomed = Vec::new();
    for i in 0..3 {
        let id = format!("done-{i}");
        let mut run = new_run(&id, "task", "proj", "agent", at(i));
        let log: Vec<Event> = (1..=3).map(|seq| event(&id, seq, "x")).collect();
        store.commit(create(&run, log)).await.unwrap();
        let running = transition(&mut run, Status::Running, at(10), vec![]);
        store.commit(running).await.unwrap();
        let ended = transition(&mut run, Status::Completed, at(20), vec![]);
        store.commit(ended).await.unwrap();
        doomed.push(id);
    }
    let (moved, journal) = table_rows(dir.path());
    assert!(
        moved < 9 && journal > 0,
        "({moved}, {journal}): some still in the journal"
    );
    let purged = store
        .purge_finished_before(at(1_000_000), 10)
        .await
        .unwrap();
    assert_eq!(purged, 3);
    // Enough commits of another run to seal, move and truncate segment after segment.
    let survivors = interleave(&store, 2, 30).await;
    for id in &doomed {
        assert_eq!(store.get_run(id).await.unwrap(), None);
        assert!(all_events(&store, id).await.is_empty());
    }
    store.close();
    let store = open_small(dir.path(), 4);
    for id in &doomed {
        assert!(all_events(&store, id).await.is_empty());
    }
    assert_eq!(
        table_rows(dir.path()),
        (60, 0),
        "only the survivors' 2 × 30 events"
    );
    for (run, log) in &survivors {
        assert_eq!(&all_events(&store, &run.id).await, log);
    }
}
