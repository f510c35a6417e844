//! `--history`: the operator's reads on a store with a long history (by default 100,000
//! runs and 10 million events), median and p99 over many calls each. The store is built
//! once (`history_seed.rs`) and kept: a second run on the same file or database measures
//! again without seeding, after the store's migrations (which is how a schema change is
//! compared: seed with the old build, measure, then measure with the new one). With
//! `--history-purge-days`, commits alone and then beside retention's purge instead.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use hdrhistogram::Histogram;
use runplane::domain::{Scope, Status};
use runplane::store::{
    PageCursor, PostgresStore, PostgresStoreOptions, RunQuery, RunStore, SqliteStore,
    SqliteStoreOptions, StoreError,
};
use tokio::time::Instant;

use crate::history_seed::{self, Shape};

/// Where the history is kept.
pub enum Target<'a> {
    /// A SQLite file (created when missing).
    Sqlite(&'a Path),
    /// A PostgreSQL database (seeded when it holds no runs).
    Postgres(&'a str),
}

/// One read's latencies.
pub struct ReadFigure {
    /// What was read.
    pub name: &'static str,
    /// Latency, nanoseconds.
    pub latency_ns: Histogram<u64>,
}

/// Narrows a page's query; the number picks a project, agent, task or team.
type Shaper = fn(&mut RunQuery, usize);

/// Seeds the store if it is empty, then times each read `calls` times.
pub async fn run(
    target: Target<'_>,
    shape: Shape,
    calls: usize,
) -> anyhow::Result<Vec<ReadFigure>> {
    let store = open(&target, shape).await?;
    let runs = shape.runs;
    let mut figures = Vec::new();
    // A cheap deterministic spread of positions in the history (no rand dependency).
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut pick = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % runs as u64) as usize
    };
    let now = Utc::now();
    let cursor_at = |i: usize| {
        let run = history_seed::run(i, shape, now);
        Some(PageCursor {
            created_at: run.created_at,
            id: run.id,
        })
    };
    let finished = shape.runs - shape.live;

    let ids: Vec<String> = (0..calls)
        .map(|_| history_seed::run_id(pick() % finished))
        .collect();
    let mut next = ids.iter();
    figures.push(
        time("GetRun (a finished run)", calls, || {
            let id = next.next().cloned().unwrap_or_default();
            let store = Arc::clone(&store);
            async move { store.get_run(&id).await.map(|run| run.is_some()) }
        })
        .await?,
    );

    let pages: [(&'static str, Shaper); 9] = [
        ("ListRuns first page", |_, _| {}),
        ("ListRuns page at a random cursor", |_, _| {}),
        ("ListRuns status=completed, random cursor", |q, _| {
            q.status = Some(Status::Completed)
        }),
        ("ListRuns status=running (live only)", |q, _| {
            q.status = Some(Status::Running);
            q.after = None;
        }),
        ("ListRuns project (1/20), random cursor", |q, i| {
            q.project_id = Some(format!("project-{}", i % 20))
        }),
        ("ListRuns agent (1/50), random cursor", |q, i| {
            q.agent_id = Some(format!("agent-{}", i % 50))
        }),
        ("ListRuns task (1/1000), first page", |q, i| {
            q.task_id = Some(format!("task-{}", i % 1000));
            q.after = None;
        }),
        ("ListRuns status=failed + project, random cursor", |q, i| {
            q.status = Some(Status::Failed);
            q.project_id = Some(format!("project-{}", i % 20));
        }),
        ("ListRuns scope team (1/10), random cursor", |q, i| {
            q.scope = Scope {
                teams: vec![format!("team-{}", i % 10)],
                projects: Vec::new(),
            }
        }),
    ];
    for (index, (name, shape_query)) in pages.into_iter().enumerate() {
        let queries: Vec<RunQuery> = (0..calls)
            .map(|_| {
                let i = pick();
                let mut query = RunQuery {
                    limit: 50,
                    after: if index == 0 { None } else { cursor_at(i) },
                    ..RunQuery::default()
                };
                shape_query(&mut query, i);
                query
            })
            .collect();
        let mut next = queries.into_iter();
        figures.push(
            time(name, calls, || {
                let query = next.next().unwrap_or_default();
                let store = Arc::clone(&store);
                async move { store.list_runs(query).await.map(|page| page.runs.len()) }
            })
            .await?,
        );
    }

    figures.push(
        time("ListPendingAsks (all)", calls, || {
            let store = Arc::clone(&store);
            async move { store.pending_asks(None).await.map(|asks| asks.len()) }
        })
        .await?,
    );
    let live_ids: Vec<String> = (0..calls)
        .map(|_| history_seed::run_id(finished + pick() % shape.live.max(1)))
        .collect();
    let mut next = live_ids.iter();
    figures.push(
        time("ListPendingAsks (one run)", calls, || {
            let id = next.next().cloned().unwrap_or_default();
            let store = Arc::clone(&store);
            async move { store.pending_asks(Some(&id)).await.map(|asks| asks.len()) }
        })
        .await?,
    );
    Ok(figures)
}

/// Opens the store, seeding it first when it holds no runs.
async fn open(target: &Target<'_>, shape: Shape) -> anyhow::Result<Arc<dyn RunStore>> {
    let now = Utc::now();
    match target {
        Target::Sqlite(path) => {
            let seeded = path.exists();
            let store = SqliteStore::open(SqliteStoreOptions::new(*path))?;
            if !seeded {
                let started = Instant::now();
                history_seed::live_runs(&store, shape, now).await?;
                store.close();
                history_seed::sqlite(path, shape, now)?;
                eprintln!("seeded {} in {:.0?}", path.display(), started.elapsed());
                return Ok(Arc::new(SqliteStore::open(SqliteStoreOptions::new(*path))?));
            }
            Ok(Arc::new(store))
        }
        Target::Postgres(url) => {
            let started = Instant::now();
            let store = PostgresStore::open(PostgresStoreOptions::new(*url)).await?;
            eprintln!("opened (migrations) in {:.0?}", started.elapsed());
            if store
                .list_runs(RunQuery {
                    limit: 1,
                    ..RunQuery::default()
                })
                .await?
                .runs
                .is_empty()
            {
                let started = Instant::now();
                history_seed::live_runs(&store, shape, now).await?;
                history_seed::postgres(url, shape, now).await?;
                eprintln!("seeded in {:.0?}", started.elapsed());
            }
            Ok(Arc::new(store))
        }
    }
}

/// `calls` reads one after another, after 20 unmeasured ones (pooled connections, prepared
/// statements, the page cache).
async fn time<T, F: Future<Output = Result<T, StoreError>>>(
    name: &'static str,
    calls: usize,
    mut read: impl FnMut() -> F,
) -> anyhow::Result<ReadFigure> {
    for _ in 0..20 {
        read().await?;
    }
    let mut latency_ns = crate::load::histogram();
    for _ in 0..calls {
        let start = Instant::now();
        read().await?;
        latency_ns.saturating_record(elapsed_ns(start.elapsed()));
    }
    Ok(ReadFigure { name, latency_ns })
}

fn elapsed_ns(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
}

/// The figures as a Markdown table: median and p99 in microseconds.
pub fn table(figures: &[ReadFigure]) -> String {
    let mut out = String::from("| read | median µs | p99 µs |\n|---|---:|---:|\n");
    for figure in figures {
        out.push_str(&format!(
            "| {} | {:.0} | {:.0} |\n",
            figure.name,
            figure.latency_ns.value_at_quantile(0.5) as f64 / 1e3,
            figure.latency_ns.value_at_quantile(0.99) as f64 / 1e3,
        ));
    }
    out
}

/// Commit latency with and without retention deleting history beside the commits.
pub struct PurgeFigure {
    /// Commits alone.
    pub alone_ns: Histogram<u64>,
    /// Commits while the purge ran.
    pub purging_ns: Histogram<u64>,
    /// Runs the purge deleted during the second phase.
    pub purged: usize,
    /// How long one batch took, nanoseconds.
    pub batch_ns: Histogram<u64>,
}

/// `committers` runs commit for `duration`, then again for `duration` while retention's
/// loop (server/retention.rs: `RETENTION_BATCH` runs a transaction, `RETENTION_PAUSE`
/// between) deletes the finished runs older than `days` days.
pub async fn commits_during_purge(
    target: Target<'_>,
    shape: Shape,
    committers: usize,
    duration: Duration,
    days: i64,
) -> anyhow::Result<PurgeFigure> {
    let store = open(&target, shape).await?;
    // Ids far above the history's, new at every invocation (a store is measured again).
    let first = 1_000_000_000 + (Utc::now().timestamp() as usize % 10_000_000) * 10_000;
    let alone_ns = crate::store::commit_phase(&store, first..first + committers, duration).await?;
    let cutoff = Utc::now() - chrono::Duration::days(days);
    let purging = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut purged = 0;
            let mut batch_ns = crate::load::histogram();
            let stop = Instant::now() + duration;
            while Instant::now() < stop {
                let start = Instant::now();
                let batch = store
                    .purge_finished_before(cutoff, runplane::server::RETENTION_BATCH)
                    .await?;
                batch_ns.saturating_record(elapsed_ns(start.elapsed()));
                purged += batch;
                if batch == 0 {
                    break;
                }
                tokio::time::sleep(runplane::server::RETENTION_PAUSE).await;
            }
            anyhow::Ok((purged, batch_ns))
        })
    };
    let second = first + committers;
    let purging_ns =
        crate::store::commit_phase(&store, second..second + committers, duration).await?;
    let (purged, batch_ns) = purging.await??;
    Ok(PurgeFigure {
        alone_ns,
        purging_ns,
        purged,
        batch_ns,
    })
}

/// The purge figures as a Markdown table, microseconds.
pub fn purge_table(figure: &PurgeFigure) -> String {
    let row = |name: &str, h: &Histogram<u64>| {
        format!(
            "| {name} | {} | {:.0} | {:.0} | {:.0} |\n",
            h.len(),
            h.value_at_quantile(0.5) as f64 / 1e3,
            h.value_at_quantile(0.99) as f64 / 1e3,
            h.max() as f64 / 1e3,
        )
    };
    let mut out = String::from(
        "| phase | samples | median µs | p99 µs | max µs |\n|---|---:|---:|---:|---:|\n",
    );
    out.push_str(&row("commits alone", &figure.alone_ns));
    out.push_str(&row("commits while purging", &figure.purging_ns));
    out.push_str(&row("purge batches", &figure.batch_ns));
    out.push_str(&format!(
        "\nruns purged during the phase: {}\n",
        figure.purged
    ));
    out
}
