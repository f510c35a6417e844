//! The PostgreSQL store against a real server (see `store_common/postgres.rs`; every test
//! here is skipped when there is none): what only it does — migrations, group commit,
//! several stores on one database, a server that goes away. The contract it shares with
//! the other stores is tested in `store_contract.rs`.

mod store_common;

use std::sync::Arc;

use runplane::store::{PostgresStore, PostgresStoreOptions, RunQuery, RunStore, StoreError};
use store_common::postgres::{self, TestDatabase};
use store_common::*;

/// A fresh database, or return from the test (skipped).
macro_rules! database {
    () => {
        match postgres::database().await {
            Some(database) => database,
            None => return,
        }
    };
}

/// A client on the test database, for what the store does not show.
async fn sql(database: &TestDatabase) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&database.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

async fn migrations(database: &TestDatabase) -> Vec<i64> {
    sql(database)
        .await
        .query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

fn everything() -> RunQuery {
    RunQuery {
        limit: 100,
        ..RunQuery::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn migrations_apply_once_and_a_reopened_store_has_everything() {
    let database = database!();
    // Stores opening a new database at once: the advisory lock lets one migrate.
    let opening: Vec<_> = (0..4)
        .map(|_| {
            let options = database.options();
            tokio::spawn(PostgresStore::open(options))
        })
        .collect();
    let mut stores = Vec::new();
    for store in opening {
        stores.push(store.await.unwrap().unwrap());
    }
    assert_eq!(migrations(&database).await, [1, 2, 3, 4]);
    let store = stores.pop().unwrap();
    drop(stores);
    let expected = seed_live(&store).await;
    let listed = store.list_runs(everything()).await.unwrap();
    store.close().await;

    let store = database.open().await;
    let live: Vec<_> = store
        .live_runs()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.run, s.stall, s.events))
        .collect();
    assert_eq!(live, expected);
    assert_eq!(store.list_runs(everything()).await.unwrap(), listed);
    assert_eq!(migrations(&database).await, [1, 2, 3, 4]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newer_schema_is_refused() {
    let database = database!();
    database.open().await.close().await;
    sql(&database)
        .await
        .batch_execute("INSERT INTO schema_migrations (version) VALUES (99)")
        .await
        .unwrap();
    let err = PostgresStore::open(database.options()).await.err().unwrap();
    assert_eq!(
        err.to_string(),
        "database error: database schema version 99 is newer than this runplane (4)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_commit_fails_alone_in_its_group() {
    let database = database!();
    let store = database.open().await;
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
        // Succeeds only if the duplicate's run update was undone with its event.
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

/// Commits of one run queued all at once land in large groups and must be applied in the
/// order they were queued, each continuing the log of the one before.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_chain_queued_at_once_applies_in_order() {
    let database = database!();
    let store = database.open().await;
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    store.commit(create(&run, vec![])).await.unwrap();
    let outcomes: Arc<std::sync::Mutex<Vec<u64>>> = Arc::default();
    for seq in 1..=1_500 {
        let outcomes = Arc::clone(&outcomes);
        store.commit_then(
            change(&mut run, vec![event("run-1", seq, "step")], None),
            Box::new(move |outcome| {
                outcome.unwrap();
                outcomes.lock().unwrap().push(seq);
            }),
        );
    }
    store
        .commit(change(&mut run, vec![event("run-1", 1_501, "last")], None))
        .await
        .unwrap();
    assert_eq!(*outcomes.lock().unwrap(), (1..=1_500).collect::<Vec<_>>());
    assert_eq!(seqs(&store, "run-1").await, (1..=1_501).collect::<Vec<_>>());
    assert_eq!(store.get_run("run-1").await.unwrap(), Some(run));
}

/// A commit the database itself fails (here: an event key that already exists, which the
/// checks cannot see because `last_seq` was tampered with) is undone alone; the commits
/// grouped with it are written.
#[tokio::test(flavor = "multi_thread")]
async fn a_commit_the_database_fails_is_undone_alone() {
    let database = database!();
    let store = database.open().await;
    let mut bad = new_run("bad", "task", "proj", "agent", at(0));
    let mut good = new_run("good", "task", "proj", "agent", at(1));
    for run in [&bad, &good] {
        let id = run.id.clone();
        store
            .commit(create(run, vec![event(&id, 1, "run.started")]))
            .await
            .unwrap();
    }
    sql(&database)
        .await
        .batch_execute("UPDATE runs SET last_seq = 0 WHERE id = 'bad'")
        .await
        .unwrap();
    let failing = store.commit(change(&mut bad, vec![event("bad", 1, "again")], None));
    let passing = store.commit(change(&mut good, vec![event("good", 2, "next")], None));
    let err = failing.await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Database(m) if m.contains("23505")),
        "{err:?}"
    );
    passing.await.unwrap();
    assert_eq!(seqs(&store, "good").await, [1, 2]);
    assert_eq!(seqs(&store, "bad").await, [1]);
    assert_eq!(store.get_run("bad").await.unwrap().unwrap().version, 1);
}

/// PostgreSQL's text cannot hold NUL: such a commit is refused alone, before it could
/// abort its group.
#[tokio::test(flavor = "multi_thread")]
async fn a_nul_in_an_id_is_refused_alone() {
    let database = database!();
    let store = database.open().await;
    let bad = new_run("run-1", "task\0", "proj", "agent", at(0));
    let good = new_run("run-2", "task", "proj", "agent", at(1));
    let refused = store.commit(create(&bad, vec![]));
    let written = store.commit(create(&good, vec![]));
    let err = refused.await.unwrap_err();
    assert!(matches!(err, StoreError::Invalid { .. }), "{err:?}");
    written.await.unwrap();
    assert_eq!(store.get_run("run-2").await.unwrap(), Some(good));
}

/// Two stores on one database (two server processes): optimistic concurrency holds across
/// them, as the version check is in the database.
#[tokio::test(flavor = "multi_thread")]
async fn two_stores_on_one_database_conflict_properly() {
    let database = database!();
    let one = database.open().await;
    let two = database.open().await;
    let run = new_run("run-1", "task", "proj", "agent", at(0));
    one.commit(create(&run, vec![])).await.unwrap();
    assert_eq!(
        conflict(two.commit(create(&run, vec![])).await),
        ("run-1".into(), None, Some(1))
    );
    let (mut a, mut b) = (run.clone(), run.clone());
    let first = one.commit(change(&mut a, vec![event("run-1", 1, "a")], None));
    let second = two.commit(change(&mut b, vec![event("run-1", 1, "b")], None));
    let outcomes = [first.await, second.await];
    assert_eq!(
        outcomes.iter().filter(|o| o.is_ok()).count(),
        1,
        "{outcomes:?}"
    );
    let lost = outcomes.into_iter().find(Result::is_err).unwrap();
    assert_eq!(conflict(lost), ("run-1".into(), Some(1), Some(2)));
    assert_eq!(seqs(&one, "run-1").await, [1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn unreadable_rows_are_reported_as_corrupt() {
    let database = database!();
    let store = database.open().await;
    let run = new_run("run-1", "task", "proj", "agent", at(0));
    store
        .commit(create(&run, vec![event("run-1", 1, "run.started")]))
        .await
        .unwrap();
    let client = sql(&database).await;
    client
        .batch_execute("UPDATE events SET kind = 'run.nonsense'")
        .await
        .unwrap();
    let err = store.list_events("run-1", 0, 10).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { run_id: Some(r), seq: Some(1), .. } if r == "run-1"),
        "{err:?}"
    );
    client
        .batch_execute("UPDATE runs SET run_json = '{\"id\": 5}'")
        .await
        .unwrap();
    let err = store.get_run("run-1").await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { run_id: Some(r), seq: None, .. } if r == "run-1"),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_store_refuses_work_after_finishing_the_queue() {
    let database = database!();
    let store = database.open().await;
    let queued: Vec<_> = (0..50)
        .map(|i| {
            store.commit(create(
                &new_run(&format!("run-{i}"), "t", "p", "a", at(i)),
                vec![],
            ))
        })
        .collect();
    store.close().await;
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
    let store = database.open().await;
    assert_eq!(store.list_runs(everything()).await.unwrap().runs.len(), 50);
}

/// With the server gone, commits and reads fail as `Unavailable` (retryable), promptly.
#[tokio::test(flavor = "multi_thread")]
async fn a_commit_after_the_server_stopped_is_unavailable() {
    // A server of its own: this test stops it.
    let Some(mut server) = postgres::private_server() else {
        return;
    };
    let database = server.database().await;
    let store = PostgresStore::open(PostgresStoreOptions {
        connect_timeout: std::time::Duration::from_secs(2),
        ..database.options()
    })
    .await
    .unwrap();
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    store.commit(create(&run, vec![])).await.unwrap();
    assert!(store.get_run("run-1").await.unwrap().is_some());

    server.stop();
    let started = std::time::Instant::now();
    let err = store
        .commit(change(&mut run, vec![event("run-1", 1, "lost")], None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Unavailable(_)) && err.is_retryable(),
        "{err:?}"
    );
    let err = store.get_run("run-1").await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let err = store.commit(create(&run, vec![])).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

/// Many committers at once, each awaiting its commit before the next: every log stays
/// gapless. Prints the rate (`--nocapture`).
#[tokio::test(flavor = "multi_thread")]
async fn many_concurrent_writers_keep_every_log_gapless() {
    let database = database!();
    let store = Arc::new(database.open().await);
    let elapsed = hammer(Arc::clone(&store), 200, 50).await;
    eprintln!(
        "PostgreSQL: 200 committers × 50 commits in {elapsed:.2}s: {:.0} commits/s",
        10_000.0 / elapsed
    );
}

/// Throughput with 1,000 interleaved runs. Run with
/// `cargo test --release --test store_postgres -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn throughput_with_interleaved_runs() {
    let database = database!();
    let store = Arc::new(database.open().await);
    let elapsed = hammer(store, 1_000, 200).await;
    eprintln!(
        "PostgreSQL: 1,000 committers × 200 commits: {:.0} commits/s",
        200_000.0 / elapsed
    );
}

/// Whether an outcome is `Fenced` for `run-1`.
fn fenced(outcome: Result<(), StoreError>) -> bool {
    matches!(outcome, Err(StoreError::Fenced { run_id }) if run_id == "run-1")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_that_lost_its_lease_writes_nothing_more() {
    let database = database!();
    let one = database.open().await;
    let two = database.open().await;
    let mut run = new_run("run-1", "task", "proj", "agent", at(0));
    one.commit(create(&run, vec![])).await.unwrap();
    one.claim("run-1", false).await.unwrap();
    one.commit(change(&mut run, vec![event("run-1", 1, "one")], None))
        .await
        .unwrap();

    // Held and renewed by the first store: the second cannot claim it, nor write.
    assert!(fenced(two.claim("run-1", false).await));
    let mut stale = run.clone();
    assert!(fenced(
        two.commit(change(&mut stale, vec![event("run-1", 2, "two")], None))
            .await
    ));

    // A takeover (a worker attached to the second): from then on only it writes.
    two.claim("run-1", true).await.unwrap();
    let mut lost = run.clone();
    assert!(fenced(
        one.commit(change(&mut lost, vec![event("run-1", 2, "one")], None))
            .await
    ));
    assert!(fenced(one.claim("run-1", false).await));
    two.commit(change(&mut run, vec![event("run-1", 2, "two")], None))
        .await
        .unwrap();
    assert_eq!(seqs(&two, "run-1").await, [1, 2]);

    // Released, the run can be claimed at once; the releasing store then writes nothing.
    two.release("run-1").await.unwrap();
    one.claim("run-1", false).await.unwrap();
    one.commit(change(&mut run, vec![event("run-1", 3, "one")], None))
        .await
        .unwrap();
    let mut after = run.clone();
    assert!(fenced(
        two.commit(change(&mut after, vec![event("run-1", 4, "two")], None))
            .await
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_lapses_once_its_store_is_gone() {
    let database = database!();
    let short = PostgresStoreOptions {
        lease_ttl: std::time::Duration::from_secs(1),
        ..database.options()
    };
    let one = PostgresStore::open(short.clone()).await.unwrap();
    let two = PostgresStore::open(short).await.unwrap();
    let run = new_run("run-1", "task", "proj", "agent", at(0));
    one.commit(create(&run, vec![])).await.unwrap();
    one.claim("run-1", false).await.unwrap();
    // Renewed while the first store lives: still held after two lease times.
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    assert!(fenced(two.claim("run-1", false).await));
    // Gone (closed, as a killed process): the lease lapses and the run can be claimed.
    one.close().await;
    tokio::time::sleep(std::time::Duration::from_millis(1_300)).await;
    two.claim("run-1", false).await.unwrap();
}

/// The reads that must cost a page, as `EXPLAIN` plans them on 20,000 runs and 400,000
/// events (statistics taken): each reads `runs` and `events` through an index, none scans
/// them, and no listing sorts more than a selective index found (a sort of a broad match
/// would read every matching run first). The
/// statements are those of `postgres/read.rs` and `postgres/retention.rs`, with values in
/// place of their parameters; a dropped index fails here.
#[tokio::test(flavor = "multi_thread")]
async fn the_reads_that_must_stay_fast_use_indexes() {
    let database = database!();
    let store = database.open().await;
    let client = sql(&database).await;
    client
        .batch_execute(
            r#"
            INSERT INTO runs (id, task_id, agent_id, project_id, team_id, status, created_at,
                              version, last_seq, run_json)
            SELECT 'run-' || lpad(i::text, 6, '0'), 'task-' || i % 1000, 'agent-' || i % 50,
                   'project-' || i % 20, 'team-' || i % 10,
                   CASE WHEN i % 100 = 0 THEN 'running' ELSE 'completed' END,
                   timestamptz '2026-01-01' + i * interval '1 minute', 3, 20,
                   json_build_object('completed_at',
                       to_char((timestamptz '2026-01-01' + i * interval '1 minute') AT TIME ZONE 'UTC',
                               'YYYY-MM-DD"T"HH24:MI:SS"Z"'))::text
            FROM generate_series(1, 20000) i;
            INSERT INTO events (run_no, seq, kind, at, attributes)
            SELECT run_no, s, 'run.toolcall.approved', created_at, '{}'
            FROM runs, generate_series(1, 20) s;
            INSERT INTO pending_asks (run_no, call_id, seq, at, attributes)
            SELECT run_no, 'c', 20, created_at, '{}' FROM runs WHERE status = 'running';
            INSERT INTO credentials (hash, name, kind, run_id, created_at)
            SELECT 'h-' || id, 'worker:' || id, 'worker', id, '2026-01-01T00:00:00Z' FROM runs;
            ANALYZE;
            "#,
        )
        .await
        .unwrap();
    let cursor = "AND (created_at, id) < ('2026-01-05', 'run-005000')";
    let page = "ORDER BY created_at DESC, id DESC LIMIT 51";
    let listings = [
        String::new(),
        "AND status = 'running'".into(),
        "AND task_id = 'task-7'".into(),
        "AND project_id = 'project-3'".into(),
        "AND agent_id = 'agent-3'".into(),
        "AND project_id = 'project-3' AND status = 'failed'".into(),
        "AND agent_id = 'agent-3' AND status = 'running'".into(),
        "AND team_id = 'team-3'".into(),
    ];
    let mut statements: Vec<(String, bool)> = Vec::new();
    for filter in &listings {
        for after in ["", cursor] {
            let sql = format!("SELECT id, run_json FROM runs WHERE true {filter} {after} {page}");
            statements.push((sql, false));
        }
    }
    let read = [
        "SELECT run_json FROM runs WHERE id = 'run-000042'",
        "SELECT e.seq, e.kind, e.at, e.attributes FROM runs r JOIN events e ON e.run_no = r.run_no
         WHERE r.id = 'run-000042' AND e.seq >= 5 ORDER BY e.seq LIMIT 100",
        r#"SELECT r.id, p.seq, 'run.toolcall.asked', p.at, p.attributes
           FROM runs r JOIN pending_asks p ON p.run_no = r.run_no
           WHERE r.id = 'run-000100' ORDER BY p.at, p.seq"#,
        r#"SELECT run_no, id::text FROM runs
           WHERE status IN ('completed', 'failed', 'cancelled', 'timeout')
             AND (run_json::json ->> 'completed_at') COLLATE "C" < '2026-01-02T00:00:00.000000000Z'
           ORDER BY (run_json::json ->> 'completed_at') COLLATE "C"
           LIMIT 100 FOR UPDATE SKIP LOCKED"#,
        "DELETE FROM events WHERE run_no = ANY('{1,2,3}')",
        "DELETE FROM credentials WHERE run_id = ANY('{run-000001}')",
    ];
    // One run's asks and a window of events are sorted: a handful of rows.
    statements.extend(read.iter().map(|sql| (sql.to_string(), true)));
    for (sql, sort_ok) in statements {
        let plan: Vec<String> = client
            .query(&format!("EXPLAIN {sql}"), &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        let plan = plan.join("\n");
        // `pending_asks` holds only the asks waiting now: scanning it is not history.
        for table in ["runs", "events", "credentials"] {
            let scan = format!("Seq Scan on {table} ");
            assert!(!plan.contains(&scan), "{sql}\n{plan}");
        }
        // The planner may sort what a selective index found (a task's 20 runs, the live
        // runs through `runs_live`): that costs the matches, not the history. A sort of
        // more than a thousand rows would be reading the history first.
        let sorted = plan
            .lines()
            .filter_map(|line| line.trim_start().strip_prefix("->  ").or(Some(line)))
            .filter(|line| line.trim_start().starts_with("Sort "))
            .filter_map(|line| line.split("rows=").nth(1)?.split(' ').next()?.parse().ok())
            .max()
            .unwrap_or(0_u64);
        assert!(sort_ok || sorted <= 1_000, "{sql}\n{plan}");
    }
    store.close().await;
}

/// A purged run's lease goes with it (the contract cases cannot see leases).
#[tokio::test(flavor = "multi_thread")]
async fn a_purge_deletes_the_runs_leases() {
    let database = database!();
    let store = database.open().await;
    for id in ["old", "recent"] {
        let mut run = new_run(id, "task", "proj", "agent", at(0));
        store.commit(create(&run, vec![])).await.unwrap();
        store.claim(id, false).await.unwrap();
        let ended = if id == "old" { at(10) } else { at(5_000_000) };
        let running = transition(&mut run, Status::Running, at(1), vec![]);
        store.commit(running).await.unwrap();
        let done = transition(&mut run, Status::Completed, ended, vec![]);
        store.commit(done).await.unwrap();
    }
    let leases = |client: tokio_postgres::Client| async move {
        client
            .query(
                "SELECT r.id FROM run_leases l JOIN runs r USING (run_no) ORDER BY r.id",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<_, String>(0))
            .collect::<Vec<_>>()
    };
    assert_eq!(leases(sql(&database).await).await, ["old", "recent"]);
    let count = |client: tokio_postgres::Client| async move {
        client
            .query_one("SELECT count(*) FROM run_leases", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    assert_eq!(
        store
            .purge_finished_before(at(1_000_000), 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(leases(sql(&database).await).await, ["recent"]);
    assert_eq!(
        count(sql(&database).await).await,
        1,
        "no lease left without its run"
    );
    store.close().await;
}
