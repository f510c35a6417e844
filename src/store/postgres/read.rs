//! Reads, on the read pool. The writer commits a group in one transaction, so a single
//! statement sees every commit whole or not at all; `live_runs` reads the runs and their
//! logs in one snapshot.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use tokio_postgres::types::ToSql;
use tokio_postgres::{IsolationLevel, Row};

use super::pg_error;
use super::schema::LIVE_CLAUSE;
use crate::domain::{Event, EventKind, Run, StallTracker};
use crate::store::{PageCursor, RunPage, RunQuery, StoreError, StoredRun};

pub(super) async fn get_run(client: &Object, run_id: &str) -> Result<Option<Run>, StoreError> {
    let statement = client
        .prepare_cached("SELECT run_json FROM runs WHERE id = $1")
        .await
        .map_err(pg_error("prepare read run"))?;
    let row = client
        .query_opt(&statement, &[&run_id])
        .await
        .map_err(pg_error(&format!("run {run_id}: read")))?;
    row.map(|row| decode_run(run_id, row.get(0))).transpose()
}

/// One run and its stall tracker, from one row: a commit writes both in one statement.
pub(super) async fn get_run_and_stall(
    client: &Object,
    run_id: &str,
) -> Result<Option<(Run, Option<StallTracker>)>, StoreError> {
    let statement = client
        .prepare_cached("SELECT run_json, stall_json FROM runs WHERE id = $1")
        .await
        .map_err(pg_error("prepare read run"))?;
    let row = client
        .query_opt(&statement, &[&run_id])
        .await
        .map_err(pg_error(&format!("run {run_id}: read")))?;
    let Some(row) = row else { return Ok(None) };
    let run = decode_run(run_id, row.get(0))?;
    let stall = decode_stall(run_id, row.get(1))?;
    Ok(Some((run, stall)))
}

/// A stored stall tracker, `None` when none was stored.
fn decode_stall(run_id: &str, json: Option<&str>) -> Result<Option<StallTracker>, StoreError> {
    json.map(|json| {
        serde_json::from_str::<StallTracker>(json)
            .map_err(|e| StoreError::corrupt_run(run_id, None, format!("stall tracker: {e}")))
    })
    .transpose()
}

/// Newest first by `(created_at, id)`; one row more than the page is fetched to learn
/// whether another page exists. Task, project and agent are matched as the run was
/// created, status and team as it is now (the columns the writer keeps up to date), as
/// SQLite does.
pub(super) async fn list_runs(client: &Object, query: &RunQuery) -> Result<RunPage, StoreError> {
    let limit = query.limit.max(1);
    let fetch = i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1;
    let status = query.status.map(|s| s.as_str());
    let cursor = query.after.as_ref().map(|c| (c.created_at, c.id.as_str()));

    let mut sql = String::from("SELECT id, run_json FROM runs WHERE true");
    let mut args: Vec<&(dyn ToSql + Sync)> = Vec::new();
    if let Some(task_id) = &query.task_id {
        bind(&mut sql, &mut args, " AND task_id = ?", task_id);
    }
    if let Some(project_id) = &query.project_id {
        bind(&mut sql, &mut args, " AND project_id = ?", project_id);
    }
    if let Some(agent_id) = &query.agent_id {
        bind(&mut sql, &mut args, " AND agent_id = ?", agent_id);
    }
    if let Some(status) = &status {
        bind(&mut sql, &mut args, " AND status = ?", status);
    }
    // A run without a team is in team '' (its column holds ''). One value (the usual
    // scope) is bound as `=`: the planner then walks that column's index in page order,
    // where `= ANY(…)` cannot promise the order and reads elsewhere.
    for (column, values) in [
        ("team_id", &query.scope.teams),
        ("project_id", &query.scope.projects),
    ] {
        match values.as_slice() {
            [] => {}
            [one] => bind(&mut sql, &mut args, &format!(" AND {column} = ?"), one),
            _ => bind(
                &mut sql,
                &mut args,
                &format!(" AND {column} = ANY(?)"),
                values,
            ),
        }
    }
    if let Some((created_at, id)) = &cursor {
        bind(
            &mut sql,
            &mut args,
            " AND (created_at, id) < (?",
            created_at,
        );
        bind(&mut sql, &mut args, ", ?)", id);
    }
    bind(
        &mut sql,
        &mut args,
        " ORDER BY created_at DESC, id DESC LIMIT ?",
        &fetch,
    );

    let statement = client
        .prepare_cached(&sql)
        .await
        .map_err(pg_error("prepare list runs"))?;
    let rows = client
        .query(&statement, &args)
        .await
        .map_err(pg_error("list runs"))?;
    let mut runs = Vec::with_capacity(rows.len());
    for row in rows {
        runs.push(decode_run(row.get(0), row.get(1))?);
    }
    let next = if runs.len() > limit {
        runs.truncate(limit);
        runs.last().map(|run| PageCursor {
            created_at: run.created_at,
            id: run.id.clone(),
        })
    } else {
        None
    };
    Ok(RunPage { runs, next })
}

pub(super) async fn list_events(
    client: &Object,
    run_id: &str,
    from_seq: u64,
    limit: usize,
) -> Result<Vec<Event>, StoreError> {
    let from = i64::try_from(from_seq).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let statement = client
        .prepare_cached(
            "SELECT e.seq, e.kind, e.at, e.attributes
             FROM runs r JOIN events e ON e.run_no = r.run_no
             WHERE r.id = $1 AND e.seq >= $2 ORDER BY e.seq LIMIT $3",
        )
        .await
        .map_err(pg_error("prepare list events"))?;
    client
        .query(&statement, &[&run_id, &from, &limit])
        .await
        .map_err(pg_error(&format!("run {run_id}: list events")))?
        .iter()
        .map(|row| decode_event(run_id, row))
        .collect()
}

/// The asked decisions of the calls still waiting for an operator, oldest first; of one
/// run, or of every run.
pub(super) async fn pending_asks(
    client: &Object,
    run_id: Option<&str>,
) -> Result<Vec<Event>, StoreError> {
    // Two statements, not one with `$1 IS NULL OR r.id = $1`: a prepared statement's
    // generic plan cannot know which branch holds, and for one run it joined every run
    // (72 ms median with 100,000 runs) instead of finding the run by its id.
    const ALL: &str = "SELECT r.id, p.seq, 'run.toolcall.asked', p.at, p.attributes
         FROM pending_asks p JOIN runs r ON r.run_no = p.run_no
         ORDER BY p.at, r.id, p.seq";
    const ONE: &str = "SELECT r.id, p.seq, 'run.toolcall.asked', p.at, p.attributes
         FROM runs r JOIN pending_asks p ON p.run_no = r.run_no
         WHERE r.id = $1
         ORDER BY p.at, p.seq";
    let statement = client
        .prepare_cached(if run_id.is_some() { ONE } else { ALL })
        .await
        .map_err(pg_error("prepare pending asks"))?;
    match run_id {
        Some(run_id) => client.query(&statement, &[&run_id]).await,
        None => client.query(&statement, &[]).await,
    }
    .map_err(pg_error("read pending asks"))?
    .iter()
    .map(|row| decode_event_at(row.get(0), row, 1))
    .collect()
}

/// Every live run, or the one live run `only` names, with their logs, read in one
/// snapshot so every log matches its run. Walks the live-run index and the logs of those
/// runs only: the cost follows the live runs, not every run ever made.
pub(super) async fn live_runs(
    client: &mut Object,
    only: Option<&str>,
) -> Result<Vec<StoredRun>, StoreError> {
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(pg_error("begin read"))?;
    // Two statements, so one run is found through the id's index and all of them through
    // `runs_live`.
    let runs_sql = match only {
        Some(_) => format!(
            "SELECT run_no, id, run_json, stall_json FROM runs WHERE id = $1 AND {LIVE_CLAUSE}"
        ),
        None => format!(
            "SELECT run_no, id, run_json, stall_json FROM runs WHERE {LIVE_CLAUSE} ORDER BY run_no"
        ),
    };
    let statement = tx
        .prepare_cached(&runs_sql)
        .await
        .map_err(pg_error("prepare live runs"))?;
    let rows = match only {
        Some(run_id) => tx.query(&statement, &[&run_id]).await,
        None => tx.query(&statement, &[]).await,
    }
    .map_err(pg_error("list live runs"))?;
    let run_nos: Vec<i64> = rows.iter().map(|row| row.get(0)).collect();
    let statement = tx
        .prepare_cached(
            "SELECT run_no, seq, kind, at, attributes FROM events
             WHERE run_no = ANY($1) ORDER BY run_no, seq",
        )
        .await
        .map_err(pg_error("prepare live logs"))?;
    let event_rows = if run_nos.is_empty() {
        Vec::new()
    } else {
        tx.query(&statement, &[&run_nos])
            .await
            .map_err(pg_error("read live logs"))?
    };
    tx.commit().await.map_err(pg_error("end read"))?;

    let mut logs: HashMap<i64, Vec<&Row>> = HashMap::new();
    for row in &event_rows {
        logs.entry(row.get(0)).or_default().push(row);
    }
    let mut stored = Vec::with_capacity(rows.len());
    for row in rows {
        let run_no: i64 = row.get(0);
        let id: &str = row.get(1);
        let run = decode_run(id, row.get(2))?;
        let stall = decode_stall(id, row.get(3))?;
        let events = logs
            .remove(&run_no)
            .unwrap_or_default()
            .into_iter()
            .map(|row| decode_event_at(id, row, 1))
            .collect::<Result<_, _>>()?;
        stored.push(StoredRun { run, stall, events });
    }
    Ok(stored)
}

/// Appends `clause` to `sql` with its `?` numbered as the next parameter, `value`.
fn bind<'a>(
    sql: &mut String,
    args: &mut Vec<&'a (dyn ToSql + Sync)>,
    clause: &str,
    value: &'a (dyn ToSql + Sync),
) {
    args.push(value);
    sql.push_str(&clause.replace('?', &format!("${}", args.len())));
}

/// The run from its `run_json`.
fn decode_run(run_id: &str, run_json: &str) -> Result<Run, StoreError> {
    serde_json::from_str(run_json).map_err(|e| StoreError::corrupt_run(run_id, None, e.to_string()))
}

/// An event from a row of `seq, kind, at, attributes`.
fn decode_event(run_id: &str, row: &Row) -> Result<Event, StoreError> {
    decode_event_at(run_id, row, 0)
}

/// An event from a row whose `seq, kind, at, attributes` start at column `first`.
fn decode_event_at(run_id: &str, row: &Row, first: usize) -> Result<Event, StoreError> {
    let stored_seq: i64 = row.get(first);
    let seq = u64::try_from(stored_seq)
        .map_err(|_| StoreError::corrupt_run(run_id, None, format!("event seq {stored_seq}")))?;
    let corrupt = |what: String| StoreError::corrupt_run(run_id, Some(seq), what);
    let kind: &str = row.get(first + 1);
    let at: DateTime<Utc> = row
        .try_get(first + 2)
        .map_err(|e| corrupt(format!("time: {e}")))?;
    let attributes: BTreeMap<String, String> = serde_json::from_str(row.get(first + 3))
        .map_err(|e| corrupt(format!("attributes: {e}")))?;
    let kind = EventKind::parse(
        kind,
        attributes.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )
    .map_err(|e| corrupt(e.to_string()))?;
    Ok(Event {
        run_id: run_id.to_string(),
        seq,
        at,
        kind,
    })
}
