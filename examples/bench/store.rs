//! The store alone: many concurrent committers, each a run committing what the actor
//! commits per call (the run plus one event; every other commit also the stall tracker),
//! and awaiting each commit before the next, as the actor does.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::history_seed::decided;
use chrono::Utc;
use hdrhistogram::Histogram;
use runplane::domain::{Decision, Run, StallTracker, StartRequest, Status};
use runplane::store::{Commit, RunQuery, RunStore, SqliteStore, SqliteStoreOptions, StoreError};
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
    /// Reads right after the phase, with the journal as the committers left it.
    pub reads: ReadCosts,
}

/// Mean time of the operator's reads, microseconds. Reads that need a run's progress
/// merge what the event journal holds, which has no index (docs/STORE.md).
pub struct ReadCosts {
    /// `get_run` of a run that was committing until the end: its journal rows are the
    /// newest.
    pub get_working_us: f64,
    /// `get_run` of a run with no rows left in the journal: the whole journal is read.
    pub get_quiet_us: f64,
    /// `list_runs` of a page of 50.
    pub list_page_us: f64,
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
    let quiet = new_run(committers);
    store.commit(creation(&quiet)).await?;
    let working = new_run(committers - 1).id;
    let latency_ns = commit_phase(&store, 0..committers, duration).await?;
    let reads = ReadCosts {
        get_working_us: mean_us(|| store.get_run(&working)).await?,
        get_quiet_us: mean_us(|| store.get_run(&quiet.id)).await?,
        list_page_us: mean_us(|| {
            store.list_runs(RunQuery {
                limit: 50,
                ..RunQuery::default()
            })
        })
        .await?,
    };
    Ok(StoreResult {
        committers,
        commits: latency_ns.len(),
        elapsed: duration,
        latency_ns,
        reads,
    })
}

/// Creates the runs numbered `runs` (see `new_run`) and has each commit as fast as its
/// commits are answered for `duration`; returns the commits' latencies.
pub async fn commit_phase(
    store: &Arc<dyn RunStore>,
    runs: std::ops::Range<usize>,
    duration: Duration,
) -> anyhow::Result<Histogram<u64>> {
    let mut created: Vec<Arc<Run>> = Vec::with_capacity(runs.len());
    for i in runs {
        let mut run = new_run(i);
        store.commit(creation(&run)).await?;
        let expected = run.version;
        run.transition(Status::Running, Utc::now())?;
        store
            .commit(Commit {
                run: Arc::new(run.clone()),
                expected_version: Some(expected),
                events: vec![decided(&run.id, 2, 0, Decision::Allow)],
                stall: None,
            })
            .await?;
        created.push(Arc::new(run));
    }
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::with_capacity(created.len());
    for run in created {
        let store = Arc::clone(store);
        tasks.push(tokio::spawn(commit_loop(store, run, deadline)));
    }
    let mut latency_ns = crate::load::histogram();
    for task in tasks {
        for ns in task.await?? {
            latency_ns.saturating_record(ns);
        }
    }
    Ok(latency_ns)
}

/// Reads one after another, as an operator's dashboard would; the mean of 100 after one
/// unmeasured read (which may open a pooled connection).
async fn mean_us<T, F: std::future::Future<Output = Result<T, StoreError>>>(
    mut read: impl FnMut() -> F,
) -> anyhow::Result<f64> {
    const READS: u32 = 100;
    read().await?;
    let start = Instant::now();
    for _ in 0..READS {
        read().await?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / f64::from(READS))
}

/// The commit that creates `run`, as the coordinator's first one.
fn creation(run: &Run) -> Commit {
    Commit {
        run: Arc::new(run.clone()),
        expected_version: None,
        events: vec![decided(&run.id, 1, 0, Decision::Allow)],
        stall: Some(StallTracker::new(5)),
    }
}

/// The `i`-th bench run, created now.
fn new_run(i: usize) -> Run {
    Run::new(
        format!("0197a000-0000-7000-8000-{i:012}"),
        StartRequest {
            task_id: format!("bench-task-{}", i % 100),
            agent_id: "bench-agent".into(),
            project_id: "bench".into(),
            ..Default::default()
        },
        "bench".into(),
        Utc::now(),
    )
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
        if result {
            stall.record_step("Read", true, &format!("output {seq}"));
        }
        let commit = Commit {
            run: Arc::clone(&run),
            expected_version: Some(expected),
            events: vec![decided(&run.id, seq, run.step_count, Decision::Allow)],
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
