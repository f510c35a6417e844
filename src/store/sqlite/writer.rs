//! The writer thread: group commit.
//!
//! One transaction per group instead of per commit is what lifts the write rate from tens
//! of thousands of rows a second to hundreds of thousands (DESIGN §5): the lock, the WAL
//! append and, with `synchronous=FULL`, the fsync are paid once per group. Each commit
//! runs inside its own savepoint so that one bad commit is undone alone.

use std::sync::mpsc;

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::oneshot;

use super::db_err;
use super::encode::EncodedCommit;
use crate::store::StoreError;

/// Where a commit's outcome is sent.
pub(super) type Reply = oneshot::Sender<Result<(), StoreError>>;

/// What the writer is asked to do.
pub(super) enum Job {
    /// Apply a commit and answer. Boxed: the queue moves jobs around.
    Commit(Box<EncodedCommit>, Reply),
    /// Finish the current group and stop; jobs queued behind this are dropped unanswered,
    /// which their waiters see as `Closed`.
    Shutdown,
}

/// Runs until `Shutdown` arrives or every sender is gone.
pub(super) fn run(conn: Connection, queue: mpsc::Receiver<Job>, max_batch: usize) {
    let mut group: Vec<(Box<EncodedCommit>, Reply)> = Vec::with_capacity(max_batch.min(4096));
    let mut running = true;
    while running {
        // Block for the first job only; then take whatever else is already waiting. Under
        // load the queue refills while a group is written, so groups grow with the load.
        let Ok(mut job) = queue.recv() else { break };
        loop {
            match job {
                Job::Commit(commit, reply) => group.push((commit, reply)),
                Job::Shutdown => {
                    running = false;
                    break;
                }
            }
            if group.len() >= max_batch {
                break;
            }
            match queue.try_recv() {
                Ok(next) => job = next,
                Err(_) => break,
            }
        }
        if group.is_empty() {
            continue;
        }
        let outcomes = write_group(&conn, &group);
        for ((_, reply), outcome) in group.drain(..).zip(outcomes) {
            // A waiter that gave up is no reason to stop.
            let _ = reply.send(outcome);
        }
    }
}

/// Writes a group in one transaction and returns each commit's outcome. Nothing is
/// reported as written before COMMIT has returned.
fn write_group(
    conn: &Connection,
    group: &[(Box<EncodedCommit>, Reply)],
) -> Vec<Result<(), StoreError>> {
    let fail_all = |message: String| {
        group
            .iter()
            .map(|_| Err(StoreError::Database(message.clone())))
            .collect()
    };
    if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
        return fail_all(format!("begin group transaction: {e}"));
    }
    let mut outcomes = Vec::with_capacity(group.len());
    for (commit, _) in group {
        let outcome = match in_savepoint(conn, commit) {
            Ok(outcome) => outcome,
            Err(e) => {
                rollback(conn);
                return fail_all(format!("group transaction abandoned: {e}"));
            }
        };
        // Some errors (I/O, disk full) make SQLite roll back the whole transaction; the
        // statements after it would then run outside any transaction.
        if conn.is_autocommit() {
            let cause = match outcome {
                Err(e) => e.to_string(),
                Ok(()) => "rolled back by SQLite".to_string(),
            };
            return fail_all(format!("group transaction lost: {cause}"));
        }
        outcomes.push(outcome);
    }
    if let Err(e) = exec(conn, "COMMIT") {
        rollback(conn);
        let message = format!("commit group transaction: {e}");
        return outcomes
            .into_iter()
            .map(|outcome| outcome.and(Err(StoreError::Database(message.clone()))))
            .collect();
    }
    outcomes
}

/// Applies one commit in a savepoint. The outer error means the savepoint could not be
/// undone, so the group transaction cannot be trusted and must be abandoned.
fn in_savepoint(
    conn: &Connection,
    commit: &EncodedCommit,
) -> Result<Result<(), StoreError>, String> {
    exec(conn, "SAVEPOINT c").map_err(|e| format!("savepoint: {e}"))?;
    match write_commit(conn, commit) {
        Ok(()) => {
            exec(conn, "RELEASE c").map_err(|e| format!("release savepoint: {e}"))?;
            Ok(Ok(()))
        }
        Err(error) => {
            exec(conn, "ROLLBACK TO c").map_err(|e| format!("roll back to savepoint: {e}"))?;
            exec(conn, "RELEASE c").map_err(|e| format!("release savepoint: {e}"))?;
            Ok(Err(error))
        }
    }
}

/// Undoes an open transaction after a failure; if there is none, there is nothing to do.
fn rollback(conn: &Connection) {
    if !conn.is_autocommit() {
        if let Err(e) = exec(conn, "ROLLBACK") {
            tracing::error!(error = %e, "store writer could not roll back");
        }
    }
}

/// Runs a statement without parameters through the statement cache.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute([])
}

/// The run row, then the events. Validation and encoding were done by `encode` before
/// the commit was queued.
fn write_commit(conn: &Connection, commit: &EncodedCommit) -> Result<(), StoreError> {
    let run_no = match commit.expected_version {
        None => insert_run(conn, commit)?,
        Some(expected) => update_run(conn, commit, expected)?,
    };
    append_events(conn, commit, run_no)
}

fn insert_run(conn: &Connection, run: &EncodedCommit) -> Result<i64, StoreError> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO runs (id, task_id, agent_id, project_id, status, created_at,
                               version, run_json, stall_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (id) DO NOTHING
             RETURNING run_no",
        )
        .and_then(|mut stmt| {
            stmt.query_row(
                params![
                    run.run_id,
                    run.task_id,
                    run.agent_id,
                    run.project_id,
                    run.status,
                    run.created_at,
                    run.version,
                    run.run_json,
                    run.stall_json,
                ],
                |r| r.get(0),
            )
            .optional()
        })
        .map_err(db_err(&format!("run {}: insert", run.run_id)))?;
    match inserted {
        Some(run_no) => Ok(run_no),
        None => Err(StoreError::Conflict {
            run_id: run.run_id.clone(),
            expected: None,
            found: stored_version(conn, &run.run_id)?,
        }),
    }
}

/// Task, agent, project and creation time never change after a run is created, so only
/// the insert writes their columns (and their indexes).
fn update_run(conn: &Connection, run: &EncodedCommit, expected: i64) -> Result<i64, StoreError> {
    if run.version <= expected {
        return Err(StoreError::Database(format!(
            "run {}: a change must raise the version past {expected}, got {}",
            run.run_id, run.version
        )));
    }
    // Most commits keep the status. Naming `status` in SET would make SQLite rewrite the
    // status and live-run index entries even when the value is the same, so try the
    // narrower statement first.
    let attempts = [
        "UPDATE runs SET version = ?3, run_json = ?4, stall_json = coalesce(?5, stall_json)
         WHERE id = ?1 AND version = ?2 AND status = ?6
         RETURNING run_no",
        "UPDATE runs SET status = ?6, version = ?3, run_json = ?4,
                         stall_json = coalesce(?5, stall_json)
         WHERE id = ?1 AND version = ?2
         RETURNING run_no",
    ];
    for sql in attempts {
        let updated = conn
            .prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.query_row(
                    params![
                        run.run_id,
                        expected,
                        run.version,
                        run.run_json,
                        run.stall_json,
                        run.status,
                    ],
                    |r| r.get(0),
                )
                .optional()
            })
            .map_err(db_err(&format!("run {}: update", run.run_id)))?;
        if let Some(run_no) = updated {
            return Ok(run_no);
        }
    }
    Err(StoreError::Conflict {
        run_id: run.run_id.clone(),
        expected: Some(expected),
        found: stored_version(conn, &run.run_id)?,
    })
}

/// The stored version of a run, for a conflict report.
fn stored_version(conn: &Connection, run_id: &str) -> Result<Option<i64>, StoreError> {
    conn.prepare_cached("SELECT version FROM runs WHERE id = ?1")
        .and_then(|mut stmt| stmt.query_row([run_id], |r| r.get(0)).optional())
        .map_err(db_err(&format!("run {run_id}: read version")))
}

/// Appends the commit's events, refusing any that would leave a gap or repeat a seq: the
/// log is what watchers replay and restores rebuild from, so it must stay gapless.
fn append_events(conn: &Connection, commit: &EncodedCommit, run_no: i64) -> Result<(), StoreError> {
    if commit.events.is_empty() {
        return Ok(());
    }
    let run_id = &commit.run_id;
    let last: Option<i64> = conn
        .prepare_cached("SELECT max(seq) FROM events WHERE run_no = ?1")
        .and_then(|mut stmt| stmt.query_row([run_no], |r| r.get(0)))
        .map_err(db_err(&format!("run {run_id}: read last seq")))?;
    let first = last.unwrap_or(0) + 1;
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO events (run_no, seq, kind, at, attributes) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(db_err("prepare event insert"))?;
    for (seq, event) in (first..).zip(&commit.events) {
        if i64::try_from(event.seq).ok() != Some(seq) {
            return Err(StoreError::Database(format!(
                "run {run_id}: event seq {} does not continue the log (next is {seq})",
                event.seq
            )));
        }
        insert
            .execute(params![run_no, seq, event.kind, event.at, event.attributes])
            .map_err(db_err(&format!("run {run_id}: insert event {seq}")))?;
    }
    Ok(())
}
