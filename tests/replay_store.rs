//! The replay driver on a store with more runs and longer logs than one page holds: every
//! run and every call is judged once, the filters choose runs exactly, and a reader that
//! goes away stops the replay.

use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use runplane::domain::event::Decided;
use runplane::domain::{Decision, Event, EventKind, Run, StartRequest};
use runplane::policy::replay::{Change, Tally};
use runplane::replay::{compile_candidate, replay, ReplayError, ReplayFilter};
use runplane::store::{Commit, MemoryStore, RunStore};
use tokio::sync::mpsc;

/// Runs in the store: more than two pages of runs.
const RUNS: usize = 120;
/// Calls of the long run: more than two pages of one log.
const LONG_RUN_CALLS: usize = 1100;

/// Reads are allowed, edits denied: every recorded Edit allow changes to deny.
const CANDIDATE: &str = r#"
name = "candidate"
mode = "acceptEdits"

[[rules]]
specifier = { tool = "Edit" }
decision = "deny"
"#;

fn created(index: usize) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::minutes(index as i64)
}

fn decided(call_id: String, tool: &str, step_count: i32) -> EventKind {
    EventKind::Decided(Decided {
        call_id,
        tool: tool.into(),
        command: String::new(),
        path: "src/a.rs".into(),
        resolved_path: String::new(),
        paths: Vec::new(),
        url: String::new(),
        input: String::new(),
        decision: Decision::Allow,
        reason: "recorded".into(),
        rule_index: None,
        part: String::new(),
        step_count,
        deadline: None,
        profile: String::new(),
        profile_hash: String::new(),
        grant: String::new(),
    })
}

/// Run `i` (created `i` minutes after the start of 2026, project `even` or `odd`) with one
/// Read and one Edit; run 0 with `LONG_RUN_CALLS` Reads and one Edit at the end.
async fn fill(store: &MemoryStore) {
    for index in 0..RUNS {
        let id = format!("run-{index:03}");
        let request = StartRequest {
            task_id: "t".into(),
            agent_id: "a".into(),
            project_id: if index % 2 == 0 { "even" } else { "odd" }.into(),
            ..StartRequest::default()
        };
        let run = Run::new(id.clone(), request, "recorded".into(), created(index));
        let reads = if index == 0 { LONG_RUN_CALLS } else { 1 };
        let mut kinds = vec![EventKind::WorkerAttached {
            worker_id: "w".into(),
            resumed: false,
            workspace_root: "/ws".into(),
        }];
        for step in 1..=reads {
            kinds.push(decided(format!("read-{step}"), "Read", step as i32));
        }
        kinds.push(decided("edit".into(), "Edit", reads as i32 + 1));
        let events = kinds
            .into_iter()
            .enumerate()
            .map(|(n, kind)| {
                Arc::new(Event {
                    run_id: id.clone(),
                    seq: n as u64 + 1,
                    at: created(index),
                    kind,
                })
            })
            .collect();
        store
            .commit(Commit {
                run: Arc::new(run),
                expected_version: None,
                events,
                stall: None,
            })
            .await
            .unwrap();
    }
}

async fn replay_all(
    store: &MemoryStore,
    filter: ReplayFilter,
) -> (Vec<Change>, Result<Tally, ReplayError>) {
    let profile = Arc::new(compile_candidate(CANDIDATE).unwrap());
    let (changes, mut found) = mpsc::channel(4);
    let collect = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(change) = found.recv().await {
            all.push(change);
        }
        all
    });
    let tally = replay(store, profile, &filter, &changes).await;
    drop(changes);
    (collect.await.unwrap(), tally)
}

#[tokio::test]
async fn every_run_and_call_is_judged_once_across_pages() {
    let store = MemoryStore::new();
    fill(&store).await;
    let (changes, tally) = replay_all(&store, ReplayFilter::default()).await;
    let tally = tally.unwrap();
    assert_eq!(tally.runs, RUNS as u64);
    assert_eq!(tally.calls, (RUNS + LONG_RUN_CALLS - 1 + RUNS) as u64);
    assert_eq!(tally.unjudged, 0);
    assert_eq!(
        tally.changed.into_iter().collect::<Vec<_>>(),
        [((Decision::Allow, Decision::Deny), RUNS as u64)]
    );
    // Newest run first; each run's one Edit, at the end of its log.
    let runs: Vec<String> = changes.iter().map(|c| c.run_id.clone()).collect();
    let expected: Vec<String> = (0..RUNS).rev().map(|i| format!("run-{i:03}")).collect();
    assert_eq!(runs, expected);
    let long = changes.last().unwrap();
    assert_eq!(long.seq, LONG_RUN_CALLS as u64 + 2);
    assert_eq!(long.workspace_root, "/ws");
    assert_eq!(long.replayed.rule_index, Some(0));
}

#[tokio::test]
async fn filters_choose_the_runs() {
    let store = MemoryStore::new();
    fill(&store).await;
    // Runs 100..120 are created at or after minute 100; of them the even ones.
    let filter = ReplayFilter {
        project_id: Some("even".into()),
        since: Some(created(100)),
        ..ReplayFilter::default()
    };
    let (changes, tally) = replay_all(&store, filter).await;
    let tally = tally.unwrap();
    assert_eq!(tally.runs, 10);
    assert_eq!(tally.calls, 20);
    let runs: Vec<String> = changes.iter().map(|c| c.run_id.clone()).collect();
    let expected: Vec<String> = (100..RUNS)
        .rev()
        .filter(|i| i % 2 == 0)
        .map(|i| format!("run-{i:03}"))
        .collect();
    assert_eq!(runs, expected);
}

#[tokio::test]
async fn a_reader_that_goes_away_stops_the_replay() {
    let store = MemoryStore::new();
    fill(&store).await;
    let profile = Arc::new(compile_candidate(CANDIDATE).unwrap());
    let (changes, found) = mpsc::channel(1);
    drop(found);
    let outcome = replay(&store, profile, &ReplayFilter::default(), &changes).await;
    assert!(
        matches!(outcome, Err(ReplayError::Abandoned)),
        "{outcome:?}"
    );
}
