//! The store alone: many concurrent committers, each a run committing what the actor
//! commits per call (the run plus one event; every other commit also the stall tracker),
//! and awaiting each commit before the next, as the actor does.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use hdrhistogram::Histogram;
use runplane::domain::{Run, StallTracker, StartRequest, Status};
use runplane::store::{Commit, Event, RunStore, SqliteStore, SqliteStoreOptions};
use tokio::time::Instant;

/// What the store phase measured.
pub struct StoreResult {
    /// Concurrent committers (one run each).
    pub committers: usize,
    /// Commits answered within the phase.
    pub commits: u64,
    /// The phase's length.
    pub elapsed: Duration,
    /// Commit latency, nanoseconds.
    pub latency_ns: Histogram<u64>,
}

impl StoreResult {
    /// Commits per second.
    pub fn commits_per_sec(&self) -> f64 {
        self.commits as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs `committers` runs committing as fast as their commits are answered.
pub async fn run(dir: &Path, committers: usize, duration: Duration) -> anyhow::Result<StoreResult> {
    let store: Arc<dyn RunStore> = Arc::new(SqliteStore::open(SqliteStoreOptions::new(
        dir.join("store-bench.db"),
    ))?);
    let mut runs = Vec::with_capacity(committers);
    for i in 0..committers {
        let now = Utc::now();
        let mut run = Run::new(
            format!("0197a000-0000-7000-8000-{i:012}"),
            StartRequest {
                task_id: format!("bench-task-{}", i % 100),
                agent_id: "bench-agent".into(),
                project_id: "bench".into(),
                ..Default::default()
            },
            "bench".into(),
            now,
        );
        store
            .commit(Commit {
                run: Arc::new(run.clone()),
                expected_version: None,
                events: vec![event(&run.id, 1, "run.created", 0)],
                stall: Some(StallTracker::new(5)),
            })
            .await?;
        let expected = run.version;
        run.transition(Status::Running, now)?;
        store
            .commit(Commit {
                run: Arc::new(run.clone()),
                expected_version: Some(expected),
                events: vec![event(&run.id, 2, "run.started", 0)],
                stall: None,
            })
            .await?;
        runs.push(Arc::new(run));
    }
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::with_capacity(committers);
    for run in runs {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(commit_loop(store, run, deadline)));
    }
    let mut latency_ns = crate::load::histogram();
    for task in tasks {
        for ns in task.await?? {
            latency_ns.saturating_record(ns);
        }
    }
    Ok(StoreResult {
        committers,
        commits: latency_ns.len(),
        elapsed: duration,
        latency_ns,
    })
}

async fn commit_loop(
    store: Arc<dyn RunStore>,
    mut run: Arc<Run>,
    deadline: Instant,
) -> anyhow::Result<Vec<u64>> {
    let mut samples = Vec::new();
    let mut seq = 3;
    let mut stall = StallTracker::new(5);
    while Instant::now() < deadline {
        let expected = run.version;
        // As the coordinator's actors do: the store has let go of the last commit's run,
        // so this changes it in place.
        let changed = Arc::make_mut(&mut run);
        changed.step_count += 1;
        changed.touch(Utc::now());
        let result = seq % 2 == 0;
        let kind = if result {
            stall.record_step("Read", true, &format!("output {seq}"));
            "run.toolcall.result"
        } else {
            "run.toolcall.approved"
        };
        let commit = Commit {
            run: Arc::clone(&run),
            expected_version: Some(expected),
            events: vec![event(&run.id, seq, kind, run.step_count)],
            stall: result.then(|| stall.clone()),
        };
        let sent = Instant::now();
        store.commit(commit).await?;
        let done = Instant::now();
        if done <= deadline {
            samples.push(u64::try_from((done - sent).as_nanos()).unwrap_or(u64::MAX));
        }
        seq += 1;
    }
    Ok(samples)
}

/// An event with the attributes a decision carries.
fn event(run_id: &str, seq: u64, kind: &'static str, step: i32) -> Arc<Event> {
    let attributes: BTreeMap<Cow<'static, str>, String> = [
        ("call_id", format!("c{seq}")),
        ("tool", "Read".to_string()),
        ("path", "/work/repo/src/coordinator/actor.rs".to_string()),
        ("decision", "allow".to_string()),
        (
            "reason",
            "rules[1] (Read allow) matches Read of src/coordinator/actor.rs".to_string(),
        ),
        ("rule_index", "1".to_string()),
        ("step_count", step.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (Cow::Borrowed(k), v))
    .collect();
    Arc::new(Event {
        run_id: run_id.to_string(),
        seq,
        kind: Cow::Borrowed(kind),
        at: Utc::now(),
        attributes,
    })
}
