//! Runs, events and commits for the store tests; `fresh` opens a real SQLite file in a
//! temp dir, `postgres` gives a test a fresh PostgreSQL database, the rest works on any
//! `RunStore`.
#![allow(dead_code)]

/// Each case once per store: `sqlite::<case>`, `memory::<case>` and `postgres::<case>`;
/// every case is an `async fn(Arc<dyn RunStore>)` beside the invocation (`#[macro_use]`).
#[allow(unused_macros)]
macro_rules! contract {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $case() {
                    let (_dir, store) = super::fresh();
                    super::$case(std::sync::Arc::new(store)).await;
                }
            )*
        }
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $case() {
                    super::$case(std::sync::Arc::new(runplane::store::MemoryStore::new())).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $case() {
                    let Some(database) = super::store_common::postgres::database().await else {
                        return;
                    };
                    let store = std::sync::Arc::new(database.open().await);
                    super::$case(store.clone()).await;
                    store.close().await;
                }
            )*
        }
    };
}

pub mod postgres;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

pub use chrono::{DateTime, Duration, TimeZone, Utc};
pub use runplane::domain::{Event, EventKind};
pub use runplane::domain::{Run, StallTracker, StartRequest, Status};
use runplane::store::{Commit, RunStore, SqliteStore, SqliteStoreOptions, StoreError};

/// A whole-microsecond instant: events keep microseconds, so tests compare at that grain.
pub fn at(micros: i64) -> DateTime<Utc> {
    Utc.timestamp_micros(1_780_000_000_000_000 + micros)
        .unwrap()
}

pub fn open(dir: &Path) -> SqliteStore {
    SqliteStore::open(SqliteStoreOptions::new(dir.join("runplane.db"))).unwrap()
}

/// A store on a new file; keep the directory alive as long as the store.
pub fn fresh() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    (dir, store)
}

pub fn new_run(id: &str, task: &str, project: &str, agent: &str, created: DateTime<Utc>) -> Run {
    let request = StartRequest {
        task_id: task.into(),
        agent_id: agent.into(),
        project_id: project.into(),
        ..StartRequest::default()
    };
    Run::new(id.into(), request, "headless-safe".into(), created)
}

/// An event whose `label` (see below) tells the tests' events apart; its text has quotes
/// and non-ASCII characters to show they are stored as they are.
pub fn event(run_id: &str, seq: u64, label: &str) -> Event {
    Event {
        run_id: run_id.into(),
        seq,
        at: at(seq as i64 * 1_000 + 7),
        kind: EventKind::WorkerDetached {
            worker_id: label.to_string(),
            reason: "a \"quoted\" reason, ünïcode".to_string(),
        },
    }
}

/// The label `event` gave an event.
pub fn label(event: &Event) -> String {
    match &event.kind {
        EventKind::WorkerDetached { worker_id, .. } => worker_id.clone(),
        other => other.name().to_string(),
    }
}

pub fn create(run: &Run, events: Vec<Event>) -> Commit {
    Commit {
        run: Arc::new(run.clone()),
        expected_version: None,
        events: events.into_iter().map(Arc::new).collect(),
        stall: None,
    }
}

/// The run after one accepted change, and the commit that writes it.
pub fn change(run: &mut Run, events: Vec<Event>, stall: Option<StallTracker>) -> Commit {
    let expected = run.version;
    run.touch(run.updated_at + Duration::nanoseconds(1_001));
    Commit {
        run: Arc::new(run.clone()),
        expected_version: Some(expected),
        events: events.into_iter().map(Arc::new).collect(),
        stall,
    }
}

/// The run after it moved to `to` at `at`, and the commit that writes it.
pub fn transition(run: &mut Run, to: Status, at: DateTime<Utc>, events: Vec<Event>) -> Commit {
    let expected = run.version;
    run.transition(to, at).unwrap();
    Commit {
        run: Arc::new(run.clone()),
        expected_version: Some(expected),
        events: events.into_iter().map(Arc::new).collect(),
        stall: None,
    }
}

/// The run, expected and found versions of a conflict.
pub fn conflict(result: Result<(), StoreError>) -> (String, Option<i64>, Option<i64>) {
    match result {
        Err(StoreError::Conflict {
            run_id,
            expected,
            found,
        }) => (run_id, expected, found),
        other => panic!("not a conflict: {other:?}"),
    }
}

pub async fn all_events<S: RunStore + ?Sized>(store: &S, run_id: &str) -> Vec<Event> {
    store.list_events(run_id, 0, usize::MAX).await.unwrap()
}

/// The seqs of a run's whole log, in order.
pub async fn seqs<S: RunStore + ?Sized>(store: &S, run_id: &str) -> Vec<u64> {
    all_events(store, run_id)
        .await
        .iter()
        .map(|e| e.seq)
        .collect()
}

/// `tasks` runs, each committed `per_task` times (a run update and one event) by its own
/// task; returns the elapsed seconds after checking every log is gapless.
pub async fn hammer<S: RunStore + ?Sized>(store: Arc<S>, tasks: usize, per_task: u64) -> f64 {
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let store = Arc::clone(&store);
        handles.push(tokio::spawn(async move {
            let id = format!("run-{t:05}");
            let mut run = new_run(&id, "task", "proj", "agent", at(t as i64));
            store.commit(create(&run, vec![])).await.unwrap();
            for seq in 1..=per_task {
                store
                    .commit(change(
                        &mut run,
                        vec![event(&id, seq, "run.toolcall.approved")],
                        None,
                    ))
                    .await
                    .unwrap();
            }
            run
        }));
    }
    let mut runs = Vec::new();
    for handle in handles {
        runs.push(handle.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    for run in runs {
        assert_eq!(store.get_run(&run.id).await.unwrap().as_ref(), Some(&run));
        let seqs = seqs(&*store, &run.id).await;
        assert_eq!(seqs, (1..=per_task).collect::<Vec<_>>(), "{}", run.id);
    }
    elapsed
}

/// Runs in every status; the live ones carry events and, some, a stall tracker. Returns
/// the live ones as `live_runs` must: run, stall tracker, whole log, in creation order.
pub async fn seed_live<S: RunStore + ?Sized>(
    store: &S,
) -> Vec<(Run, Option<StallTracker>, Vec<Event>)> {
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
