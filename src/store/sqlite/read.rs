//! Reads, on their own connections: in WAL mode readers see the last committed state and
//! neither wait for the writer nor hold it up.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, ToSql};

use super::db_err;
use super::schema::{self, LIVE_CLAUSE};
use crate::domain::{Event, EventKind, Run, StallTracker};
use crate::store::{PageCursor, RunPage, RunQuery, StoreError, StoredRun};

/// Idle connections kept for reuse; more are opened under a burst and closed after it.
pub(super) const MAX_IDLE: usize = 8;

/// Read connections, opened on demand and reused.
pub(super) struct ReadPool {
    path: PathBuf,
    /// Whether connections open the file read-only (a store that never writes).
    read_only: bool,
    /// `None` once the store is closed.
    idle: Mutex<Option<Vec<Connection>>>,
}

impl ReadPool {
    pub(super) fn new(path: PathBuf, read_only: bool) -> ReadPool {
        ReadPool {
            path,
            read_only,
            idle: Mutex::new(Some(Vec::new())),
        }
    }

    /// Runs `read` on an idle connection, or a new one if none is idle.
    pub(super) fn with<T>(
        &self,
        read: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let reused = match &mut *self.lock() {
            Some(idle) => idle.pop(),
            None => return Err(StoreError::Closed),
        };
        let mut conn = match reused {
            Some(conn) => conn,
            None => schema::open_reader(&self.path, self.read_only)?,
        };
        let result = read(&mut conn);
        if let Some(idle) = &mut *self.lock() {
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
        }
        result
    }

    /// Closes the idle connections and refuses further reads.
    pub(super) fn close(&self) {
        self.lock().take();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<Connection>>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `get_run`'s statement: the run's row by the id's unique index, and its progress by key.
/// No events are read (only the journal's progress of the run, see `journal_progress`).
pub(super) fn get_run_statement() -> String {
    format!("SELECT {RUN_COLUMNS}, stall_json FROM {RUN_TABLES} WHERE id = ?1")
}

pub(super) fn get_run(conn: &mut Connection, run_id: &str) -> Result<Option<Run>, StoreError> {
    Ok(run_and_stall_json(conn, run_id)?.map(|(run, _)| run))
}

/// One run and its stall tracker, read in one transaction.
pub(super) fn get_run_and_stall(
    conn: &mut Connection,
    run_id: &str,
) -> Result<Option<(Run, Option<StallTracker>)>, StoreError> {
    let Some((run, stall_json)) = run_and_stall_json(conn, run_id)? else {
        return Ok(None);
    };
    let stall = decode_stall(run_id, stall_json)?;
    Ok(Some((run, stall)))
}

/// One run and its stall tracker's JSON (the journal's where newer), in one transaction;
/// the JSON is left undecoded for `get_run`, which does not need it.
fn run_and_stall_json(
    conn: &mut Connection,
    run_id: &str,
) -> Result<Option<(Run, Option<String>)>, StoreError> {
    let tx = conn.transaction().map_err(db_err("begin read"))?;
    let row: Option<(RunRow, Option<String>)> = tx
        .prepare_cached(&get_run_statement())
        .and_then(|mut stmt| {
            stmt.query_row([run_id], |r| Ok((RunRow::read(r)?, r.get(7)?)))
                .optional()
        })
        .map_err(db_err(&format!("run {run_id}: read")))?;
    let Some((row, stall_json)) = row else {
        return Ok(None);
    };
    let pending = journal_progress(&tx, Some(row.run_no))
        .map_err(db_err(&format!("run {run_id}: read journal progress")))?;
    let stall_json = pending
        .stall(row.run_no, row.progress.version)
        .or(stall_json);
    Ok(Some((row.decode(&pending)?, stall_json)))
}

/// A stored stall tracker, `None` when none was stored.
fn decode_stall(run_id: &str, json: Option<String>) -> Result<Option<StallTracker>, StoreError> {
    json.map(|json| {
        serde_json::from_str::<StallTracker>(&json)
            .map_err(|e| StoreError::corrupt_run(run_id, None, format!("stall tracker: {e}")))
    })
    .transpose()
}

/// Newest first by `(created_at, id)`; one row more than the page is fetched to learn
/// whether another page exists.
pub(super) fn list_runs(conn: &mut Connection, query: &RunQuery) -> Result<RunPage, StoreError> {
    let limit = query.limit.max(1);
    let status = query.status.map(|s| s.as_str());
    let cursor = query
        .after
        .as_ref()
        .map(|c| (c.created_at.timestamp_micros(), c.id.as_str()));
    let fetch = i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1;
    let (sql, named) = list_statement(query, &status, &cursor, &fetch);
    let args: Vec<(&str, &dyn ToSql)> = named
        .iter()
        .map(|(name, value)| (name.as_str(), *value))
        .collect();

    let tx = conn.transaction().map_err(db_err("begin read"))?;
    let rows: Vec<RunRow> = {
        let mut stmt = tx
            .prepare_cached(&sql)
            .map_err(db_err("prepare list runs"))?;
        let rows = stmt
            .query_map(&*args, RunRow::read)
            .map_err(db_err("list runs"))?;
        rows.collect::<Result<_, _>>()
            .map_err(db_err("list runs"))?
    };
    let pending = if rows.is_empty() {
        Pending::default()
    } else {
        journal_progress(&tx, None).map_err(db_err("read journal progress"))?
    };
    let mut runs = Vec::with_capacity(rows.len());
    for row in rows {
        runs.push(row.decode(&pending)?);
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

/// `list_runs`' statement and its named arguments. Each filter is one equality (or `IN`)
/// and the order is `created_at DESC, id DESC`, so an index keyed by the filter's column
/// then `(created_at DESC, id DESC)` serves the page in order from the cursor on
/// (`plans.rs` checks the plans).
pub(super) fn list_statement<'q>(
    query: &'q RunQuery,
    status: &'q Option<&'static str>,
    cursor: &'q Option<(i64, &'q str)>,
    fetch: &'q i64,
) -> (String, Vec<(String, &'q dyn ToSql)>) {
    let mut sql = format!("SELECT {RUN_COLUMNS} FROM {RUN_TABLES} WHERE 1");
    let mut args: Vec<(String, &dyn ToSql)> = Vec::new();
    let filters: [(&str, Option<&dyn ToSql>); 4] = [
        ("task_id", query.task_id.as_ref().map(|v| v as &dyn ToSql)),
        (
            "project_id",
            query.project_id.as_ref().map(|v| v as &dyn ToSql),
        ),
        ("agent_id", query.agent_id.as_ref().map(|v| v as &dyn ToSql)),
        ("status", status.as_ref().map(|v| v as &dyn ToSql)),
    ];
    for (column, value) in filters {
        if let Some(value) = value {
            sql.push_str(&format!(" AND {column} = :{column}"));
            args.push((format!(":{column}"), value));
        }
    }
    // The run's team is only in run_json; `runs_team` indexes this very expression (a run
    // without a team has none there, which reads as '').
    let scope = [
        (
            "IFNULL(json_extract(run_json, '$.team_id'), '')",
            "team",
            &query.scope.teams,
        ),
        ("project_id", "project", &query.scope.projects),
    ];
    for (column, prefix, values) in scope {
        if values.is_empty() {
            continue;
        }
        let names: Vec<String> = (0..values.len()).map(|i| format!(":{prefix}{i}")).collect();
        sql.push_str(&format!(" AND {column} IN ({})", names.join(", ")));
        for (name, value) in names.into_iter().zip(values.iter()) {
            args.push((name, value as &dyn ToSql));
        }
    }
    if let Some((created_at, id)) = cursor {
        sql.push_str(" AND (created_at, id) < (:after_created_at, :after_id)");
        args.push((":after_created_at".into(), created_at));
        args.push((":after_id".into(), id));
    }
    sql.push_str(" ORDER BY created_at DESC, id DESC LIMIT :limit");
    args.push((":limit".into(), fetch));
    (sql, args)
}

/// In one read transaction: the writer may move a row from the journal to the log and
/// delete it from the journal between two statements, and only a snapshot sees it once.
pub(super) fn list_events(
    conn: &mut Connection,
    run_id: &str,
    from_seq: u64,
    limit: usize,
) -> Result<Vec<Event>, StoreError> {
    let tx = conn.transaction().map_err(db_err("begin read"))?;
    let run_no: Option<i64> = tx
        .prepare_cached("SELECT run_no FROM runs WHERE id = ?1")
        .and_then(|mut stmt| stmt.query_row([run_id], |r| r.get(0)).optional())
        .map_err(db_err(&format!("run {run_id}: read")))?;
    let Some(run_no) = run_no else {
        return Ok(Vec::new());
    };
    run_log(&tx, run_no, from_seq, limit)
        .map_err(db_err(&format!("run {run_id}: list events")))?
        .into_iter()
        .map(|row| row.decode(run_id))
        .collect()
}

/// Up to `limit` rows of a run's log from `from_seq` on, from the indexed log and the
/// journal together. A row being moved is in both with the same values; it is kept once.
fn run_log(
    conn: &Connection,
    run_no: i64,
    from_seq: u64,
    limit: usize,
) -> rusqlite::Result<Vec<EventRow>> {
    const SOURCES: [&str; 2] = [
        "SELECT seq, kind, at, attributes FROM events
         WHERE run_no = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
        "SELECT seq, kind, at, attributes FROM event_journal
         WHERE run_no = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
    ];
    let from = i64::try_from(from_seq).unwrap_or(i64::MAX);
    let fetch = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut merged = BTreeMap::new();
    for sql in SOURCES {
        let mut stmt = conn.prepare_cached(sql)?;
        let rows = stmt.query_map(rusqlite::params![run_no, from, fetch], EventRow::read)?;
        for row in rows {
            let row = row?;
            merged.insert(row.seq, row);
        }
    }
    Ok(merged.into_values().take(limit).collect())
}

/// Every live run, or the one live run `only` names. Reads in one transaction, so every
/// run's log matches the run row read with it.
pub(super) fn live_runs(
    conn: &mut Connection,
    only: Option<&str>,
) -> Result<Vec<StoredRun>, StoreError> {
    let tx = conn.transaction().map_err(db_err("begin read"))?;
    let live: Vec<(RunRow, Option<String>)> = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT {RUN_COLUMNS}, stall_json FROM {RUN_TABLES}
                 WHERE {LIVE_CLAUSE} AND (?1 IS NULL OR id = ?1)
                 ORDER BY run_no"
            ))
            .map_err(db_err("prepare live runs"))?;
        let rows = stmt
            .query_map([only], |r| Ok((RunRow::read(r)?, r.get(7)?)))
            .map_err(db_err("list live runs"))?;
        rows.collect::<Result<_, _>>()
            .map_err(db_err("list live runs"))?
    };
    let only_run_no = match (only, live.first()) {
        (Some(_), Some((row, _))) => Some(row.run_no),
        _ => None,
    };
    let pending = if live.is_empty() {
        Pending::default()
    } else {
        journal_progress(&tx, only_run_no).map_err(db_err("read journal progress"))?
    };
    let mut stored = Vec::with_capacity(live.len());
    for (row, stall_json) in live {
        let run_no = row.run_no;
        let stall_json = pending.stall(run_no, row.progress.version).or(stall_json);
        let run = row.decode(&pending)?;
        let id = &run.id;
        let stall = decode_stall(id, stall_json)?;
        let events = run_log(&tx, run_no, 0, usize::MAX)
            .map_err(db_err(&format!("run {id}: read log")))?
            .into_iter()
            .map(|row| row.decode(id))
            .collect::<Result<_, _>>()?;
        stored.push(StoredRun { run, stall, events });
    }
    Ok(stored)
}

/// What a run is read from: its row and its progress (`schema.rs`, version 2), which the
/// journal's newer progress overrides (version 3).
const RUN_TABLES: &str = "runs JOIN run_progress USING (run_no)";
/// The columns `RunRow::read` takes, in its order.
const RUN_COLUMNS: &str = "id, run_no, run_json, version, step_count, cost_usd, updated_at";

/// A run's progress columns as read.
#[derive(Clone)]
struct ProgressRow {
    version: i64,
    step_count: i32,
    cost_usd: f64,
    updated_at: String,
}

/// The newest progress and stall tracker the journal holds for each run, by `run_no`:
/// they count only where their version is newer than `run_progress`'s.
#[derive(Default)]
struct Pending {
    progress: HashMap<i64, ProgressRow>,
    stalls: HashMap<i64, (i64, String)>,
}

impl Pending {
    /// The journal's stall tracker of a run, if it is newer than the stored one.
    fn stall(&self, run_no: i64, stored_version: i64) -> Option<String> {
        self.stalls
            .get(&run_no)
            .filter(|(version, _)| *version > stored_version)
            .map(|(_, json)| json.clone())
    }
}

/// Reads the journal's newest progress of one run, or of every run. The journal has no
/// index: every run's is a scan of it (two segments of rows, more right after a burst),
/// one run's a walk from its end.
fn journal_progress(conn: &Connection, only: Option<i64>) -> rusqlite::Result<Pending> {
    match only {
        Some(run_no) => run_journal_progress(conn, run_no),
        None => all_journal_progress(conn),
    }
}

/// One run's newest progress and stall tracker: its newest journal rows that carry them.
/// A run's rows are appended in commit order with rising versions, and a row with a stall
/// tracker always carries progress too, so one walk backwards from the journal's end,
/// through the rows with progress, finds both and stops at the first tracker: for a run
/// that is working they are near the end, and `GetRun` reads a few pages instead of the
/// whole journal. A run without a tracker there still costs one scan.
fn run_journal_progress(conn: &Connection, run_no: i64) -> rusqlite::Result<Pending> {
    let mut stmt = conn.prepare_cached(
        "SELECT version, step_count, cost_usd, updated_at, stall_json FROM event_journal
         WHERE run_no = ?1 AND version IS NOT NULL ORDER BY id DESC",
    )?;
    let mut rows = stmt.query([run_no])?;
    let mut newest = None;
    let mut stall = None;
    while let Some(row) = rows.next()? {
        let version: i64 = row.get(0)?;
        if newest.is_none() {
            newest = Some(ProgressRow {
                version,
                step_count: row.get(1)?,
                cost_usd: row.get(2)?,
                updated_at: row.get(3)?,
            });
        }
        if let Some(stall_json) = row.get::<_, Option<String>>(4)? {
            stall = Some((version, stall_json));
            break;
        }
    }
    Ok(Pending {
        progress: newest.map(|p| (run_no, p)).into_iter().collect(),
        stalls: stall.map(|s| (run_no, s)).into_iter().collect(),
    })
}

/// Every run's newest progress and stall tracker, in one pass over the journal each.
fn all_journal_progress(conn: &Connection) -> rusqlite::Result<Pending> {
    let mut pending = Pending::default();
    let mut stmt = conn.prepare_cached(
        "SELECT run_no, max(version), step_count, cost_usd, updated_at FROM event_journal
         WHERE version IS NOT NULL GROUP BY run_no",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            ProgressRow {
                version: r.get(1)?,
                step_count: r.get(2)?,
                cost_usd: r.get(3)?,
                updated_at: r.get(4)?,
            },
        ))
    })?;
    for row in rows {
        let (run_no, progress) = row?;
        pending.progress.insert(run_no, progress);
    }
    let mut stmt = conn.prepare_cached(
        "SELECT run_no, max(version), stall_json FROM event_journal
         WHERE stall_json IS NOT NULL GROUP BY run_no",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, (r.get(1)?, r.get(2)?))))?;
    for row in rows {
        let (run_no, stall) = row?;
        pending.stalls.insert(run_no, stall);
    }
    Ok(pending)
}

/// A run as stored, before its values are checked.
struct RunRow {
    id: String,
    run_no: i64,
    run_json: String,
    progress: ProgressRow,
}

impl RunRow {
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
        Ok(RunRow {
            id: row.get(0)?,
            run_no: row.get(1)?,
            run_json: row.get(2)?,
            progress: ProgressRow {
                version: row.get(3)?,
                step_count: row.get(4)?,
                cost_usd: row.get(5)?,
                updated_at: row.get(6)?,
            },
        })
    }

    /// The run from `run_json`, with its progress from `run_progress` or, where newer, the
    /// journal (the copies in `run_json` are stale by design).
    fn decode(self, pending: &Pending) -> Result<Run, StoreError> {
        let corrupt = |what: String| StoreError::corrupt_run(&self.id, None, what);
        let mut run: Run =
            serde_json::from_str(&self.run_json).map_err(|e| corrupt(e.to_string()))?;
        let progress = match pending.progress.get(&self.run_no) {
            Some(newer) if newer.version > self.progress.version => newer.clone(),
            _ => self.progress,
        };
        run.version = progress.version;
        run.step_count = progress.step_count;
        run.cost_usd = progress.cost_usd;
        run.updated_at = serde_json::from_value(serde_json::Value::String(progress.updated_at))
            .map_err(|e| corrupt(format!("updated_at: {e}")))?;
        Ok(run)
    }
}

/// An `events` row as stored, before its values are checked.
struct EventRow {
    seq: i64,
    kind: String,
    at: i64,
    attributes: String,
}

impl EventRow {
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<EventRow> {
        Ok(EventRow {
            seq: row.get(0)?,
            kind: row.get(1)?,
            at: row.get(2)?,
            attributes: row.get(3)?,
        })
    }

    fn decode(self, run_id: &str) -> Result<Event, StoreError> {
        let seq = u64::try_from(self.seq).map_err(|_| {
            StoreError::corrupt_run(run_id, None, format!("event seq {}", self.seq))
        })?;
        let corrupt = |what: String| StoreError::corrupt_run(run_id, Some(seq), what);
        let at = DateTime::<Utc>::from_timestamp_micros(self.at)
            .ok_or_else(|| corrupt(format!("time {} out of range", self.at)))?;
        let attributes: BTreeMap<String, String> = serde_json::from_str(&self.attributes)
            .map_err(|e| corrupt(format!("attributes: {e}")))?;
        let kind = EventKind::parse(
            &self.kind,
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
}

/// Every pending ask, oldest first.
pub(super) const PENDING_ASKS: &str = "SELECT r.id, p.seq, p.at, p.attributes FROM pending_asks p
     JOIN runs r ON r.run_no = p.run_no
     ORDER BY p.at, r.id, p.seq";
/// One run's pending asks: a statement of its own, because with `?1 IS NULL OR r.id = ?1`
/// the plan walked every pending ask to find one run's; this finds the run by its id,
/// then its asks by their key.
pub(super) const PENDING_ASKS_OF_RUN: &str = "SELECT r.id, p.seq, p.at, p.attributes FROM runs r
     JOIN pending_asks p ON p.run_no = r.run_no
     WHERE r.id = ?1
     ORDER BY p.at, p.seq";

/// The asked decisions of the calls still waiting for an operator, oldest first; of one
/// run, or of every run.
pub(super) fn pending_asks(
    conn: &Connection,
    run_id: Option<&str>,
) -> Result<Vec<Event>, StoreError> {
    let mut statement = conn
        .prepare_cached(if run_id.is_some() {
            PENDING_ASKS_OF_RUN
        } else {
            PENDING_ASKS
        })
        .map_err(db_err("read pending asks"))?;
    let params: &[&dyn ToSql] = match &run_id {
        Some(run_id) => &[run_id],
        None => &[],
    };
    let rows = statement
        .query_map(params, |row| {
            Ok((
                row.get::<_, String>(0)?,
                EventRow {
                    seq: row.get(1)?,
                    kind: "run.toolcall.asked".to_string(),
                    at: row.get(2)?,
                    attributes: row.get(3)?,
                },
            ))
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(db_err("read pending asks"))?;
    rows.into_iter()
        .map(|(run_id, row)| row.decode(&run_id))
        .collect()
}
