//! The writer's statements: what one commit, and one slice of the journal's move, writes.
//!
//! A run's progress (version, counts, cost, time, stall tracker) changes with every tool
//! call. Since schema version 3 it rides on the commit's last event into the journal
//! instead of updating `run_progress` in place: with a thousand runs interleaved, each of
//! those updates dirtied a page of its own, about half of all the WAL written. The
//! journal's move applies each run's newest progress once per slice. Readers overlay the
//! journal rows newer than `run_progress` (`read.rs`); the rule everywhere is that the
//! newest version wins, so applying a row twice, or late, changes nothing.

use rusqlite::{params, Connection, OptionalExtension};

use super::encode::{AskChange, EncodedCommit, EncodedEvent, Progress};
use super::journal::Move;
use crate::store::StoreError;

/// Why a commit was not written.
pub(super) enum Failure {
    /// Refused before it wrote anything: it fails alone.
    Refused(StoreError),
    /// SQLite failed after the commit had written part of itself: the group's transaction
    /// cannot be trusted.
    Broken(String),
}

/// A database error while writing a run, with what was being done. Built only on failure:
/// formatting the context of every statement up front was 3 % of the writer's time.
pub(super) fn run_error(run_id: &str, doing: &str, e: rusqlite::Error) -> StoreError {
    super::sqlite_error(format!("run {run_id}: {doing}: {e}"), &e)
}

/// Appends checked events to the journal, the last one carrying `progress`; returns the
/// first and last rowid written.
pub(super) fn append_events(
    conn: &Connection,
    run_no: i64,
    events: &[EncodedEvent],
    progress: &Progress,
) -> rusqlite::Result<(i64, i64)> {
    let mut first = 0;
    let mut insert = conn.prepare_cached(
        "INSERT INTO event_journal (run_no, seq, kind, at, attributes,
             version, step_count, cost_usd, updated_at, stall_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?;
    let last = events.len().saturating_sub(1);
    for (index, event) in events.iter().enumerate() {
        let carried = (index == last).then_some(progress);
        insert.execute(params![
            run_no,
            event.seq,
            event.kind,
            event.at,
            event.attributes,
            carried.map(|p| p.version),
            carried.map(|p| p.step_count),
            carried.map(|p| p.cost_usd),
            carried.map(|p| &p.updated_at),
            carried.and_then(|p| p.stall_json.as_ref()),
        ])?;
        if first == 0 {
            first = conn.last_insert_rowid();
        }
    }
    Ok((first, conn.last_insert_rowid()))
}

/// Keeps `pending_asks` in step with the commit's events.
pub(super) fn apply_asks(
    conn: &Connection,
    run_no: i64,
    events: &[EncodedEvent],
    asks: &[AskChange],
) -> rusqlite::Result<()> {
    for change in asks {
        match change {
            AskChange::Opened { call_id, event } => {
                let Some(event) = events.get(*event) else {
                    continue;
                };
                conn.prepare_cached(
                    "INSERT OR REPLACE INTO pending_asks (run_no, call_id, seq, at, attributes)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![
                    run_no,
                    call_id,
                    event.seq,
                    event.at,
                    event.attributes
                ])?;
            }
            AskChange::Closed { call_id } => {
                conn.prepare_cached("DELETE FROM pending_asks WHERE run_no = ?1 AND call_id = ?2")?
                    .execute(params![run_no, call_id])?;
            }
        }
    }
    Ok(())
}

/// Copies a slice of the journal into the indexed log and applies each moved run's newest
/// progress, or drops a moved segment. A row already in the log (it cannot be, short of a
/// bug) is left as it is rather than failing every later group.
pub(super) fn move_journal(conn: &Connection, planned: &Move) -> rusqlite::Result<()> {
    match planned {
        Move::Nothing => {}
        Move::Rows(runs) => {
            let mut insert = conn.prepare_cached(
                "INSERT OR IGNORE INTO events (run_no, seq, kind, at, attributes)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for (run_no, rows) in runs {
                for row in rows {
                    insert.execute(params![run_no, row.seq, row.kind, row.at, row.attributes])?;
                }
                let (progress, stall) = newest_progress(rows.iter().rev());
                if let Some(progress) = progress {
                    apply_progress(conn, *run_no, progress, stall)?;
                }
            }
        }
        Move::Truncate(last_id) => {
            conn.prepare_cached("DELETE FROM event_journal WHERE id <= ?1")?
                .execute([last_id])?;
        }
    }
    Ok(())
}

/// The newest progress among journal rows given newest first, and the newest stall
/// tracker with the version it came with.
pub(super) fn newest_progress<'a>(
    newest_first: impl Iterator<Item = &'a EncodedEvent>,
) -> (Option<&'a Progress>, Option<(i64, &'a str)>) {
    let mut newest = None;
    for progress in newest_first.filter_map(|row| row.progress.as_deref()) {
        newest.get_or_insert(progress);
        if let Some(stall) = &progress.stall_json {
            return (newest, Some((progress.version, stall)));
        }
    }
    (newest, None)
}

/// Brings `run_progress` up to `progress` and `stall` where they are newer than what it
/// holds. All `SET` expressions see the old version, so the stall is judged by its own.
pub(super) fn apply_progress(
    conn: &Connection,
    run_no: i64,
    progress: &Progress,
    stall: Option<(i64, &str)>,
) -> rusqlite::Result<()> {
    let (stall_version, stall_json) = stall.unzip();
    conn.prepare_cached(
        "UPDATE run_progress SET
             stall_json = CASE WHEN version < ?6 THEN ?7 ELSE stall_json END,
             version = ?2, step_count = ?3, cost_usd = ?4, updated_at = ?5
         WHERE run_no = ?1 AND version < ?2",
    )?
    .execute(params![
        run_no,
        progress.version,
        progress.step_count,
        progress.cost_usd,
        progress.updated_at,
        stall_version,
        stall_json,
    ])?;
    Ok(())
}

/// Inserts the run and its progress; `None` if a run with its id exists (nothing is
/// written then). A failure after the first insert breaks the group.
pub(super) fn insert_run(conn: &Connection, run: &EncodedCommit) -> Result<Option<i64>, Failure> {
    let run_json = run.run_json().map_err(Failure::Refused)?;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO runs (id, task_id, agent_id, project_id, status, created_at, run_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (id) DO NOTHING
             RETURNING run_no",
        )
        .and_then(|mut stmt| {
            stmt.query_row(
                params![
                    run.run.id,
                    run.run.task_id,
                    run.run.agent_id,
                    run.run.project_id,
                    run.status,
                    run.created_at,
                    run_json,
                ],
                |r| r.get(0),
            )
            .optional()
        })
        .map_err(|e| Failure::Refused(run_error(run.run_id(), "insert", e)))?;
    let Some(run_no) = inserted else {
        return Ok(None);
    };
    let progress = &run.progress;
    conn.prepare_cached(
        "INSERT INTO run_progress (run_no, version, step_count, cost_usd, updated_at, stall_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            run_no,
            progress.version,
            progress.step_count,
            progress.cost_usd,
            progress.updated_at,
            progress.stall_json,
        ])
    })
    .map_err(|e| Failure::Broken(format!("run {}: insert progress: {e}", run.run_id())))?;
    Ok(Some(run_no))
}

/// Rewrites `run_json`, and `status` only when it may have changed: naming `status` in SET
/// makes SQLite rewrite the status and live-run index entries even when the value is the
/// same. Task, agent, project and creation time never change after a run is created, so
/// only the insert writes their columns (and their indexes).
pub(super) fn update_run_json(
    conn: &Connection,
    run_no: i64,
    run_json: &str,
    status: Option<&str>,
) -> rusqlite::Result<()> {
    match status {
        None => {
            conn.prepare_cached("UPDATE runs SET run_json = ?2 WHERE run_no = ?1")?
                .execute(params![run_no, run_json])?;
        }
        Some(status) => {
            conn.prepare_cached("UPDATE runs SET run_json = ?2, status = ?3 WHERE run_no = ?1")?
                .execute(params![run_no, run_json, status])?;
        }
    }
    Ok(())
}
