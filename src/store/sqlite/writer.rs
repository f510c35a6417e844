//! The writer thread: group commit.
//!
//! One transaction per group instead of per commit is what lifts the write rate from tens
//! of thousands of rows a second to hundreds of thousands (DESIGN §5): the lock, the WAL
//! append and, with `synchronous=FULL`, the fsync are paid once per group.
//!
//! One bad commit must fail alone, not take its group down. Instead of a savepoint per
//! commit (two more statements and a copy of every page it touches, about a tenth of the
//! writer's time), every check that can refuse a commit — the version, a gap or repeat in
//! its events — runs before its first write, so a refused commit has written nothing. Only
//! SQLite failing part-way through a commit (I/O, a full disk) abandons the group.
//!
//! Events go to the journal, and each group also moves a slice of the journal into the
//! indexed log (`journal.rs` says why).

use std::collections::HashMap;
use std::sync::mpsc;

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::oneshot;

use super::checkpoint;
use super::encode::{EncodedCommit, EncodedEvent};
use super::journal::{Journal, Move};
use crate::store::StoreError;

/// Where a commit's outcome is sent.
pub(super) type Reply = oneshot::Sender<Result<(), StoreError>>;

/// What the writer is asked to do.
pub(super) enum Job {
    /// Apply a commit and answer. Boxed: the queue moves jobs around.
    Commit(Box<EncodedCommit>, Reply),
    /// Between two groups, copy into the database file what the checkpointer left in the
    /// WAL, so that the next group starts the WAL over (`checkpoint.rs` says why only the
    /// writer can do that cheaply). Answered with whether everything was copied.
    FinishCheckpoint(mpsc::SyncSender<bool>),
    /// Finish the current group and stop; jobs queued behind this are dropped unanswered,
    /// which their waiters see as `Closed`.
    Shutdown,
}

/// Runs until `Shutdown` arrives or every sender is gone.
pub(super) fn run(
    conn: Connection,
    queue: mpsc::Receiver<Job>,
    max_batch: usize,
    journal: Journal,
) {
    let mut writer = Writer {
        conn,
        journal,
        runs: HashMap::new(),
    };
    let mut group: Vec<(Box<EncodedCommit>, Reply)> = Vec::with_capacity(max_batch.min(4096));
    loop {
        // Block for the first job only; then take whatever else is already waiting. Under
        // load the queue refills while a group is written, so groups grow with the load.
        let Ok(mut job) = queue.recv() else { break };
        // A job that is not a commit ends the group; it runs once the group is written.
        let mut after_group = None;
        loop {
            match job {
                Job::Commit(commit, reply) => group.push((commit, reply)),
                other => {
                    after_group = Some(other);
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
        if !group.is_empty() {
            let outcomes = writer.write_group(&mut group);
            for ((_, reply), outcome) in group.drain(..).zip(outcomes) {
                // A waiter that gave up is no reason to stop.
                let _ = reply.send(outcome);
            }
        }
        match after_group {
            Some(Job::Shutdown) => break,
            Some(Job::FinishCheckpoint(done)) => {
                // The checkpointer may have stopped waiting; that is no reason to stop.
                let _ = done.send(checkpoint::finish(&writer.conn));
            }
            Some(Job::Commit(..)) | None => {}
        }
    }
}

/// The writer's connection and what it remembers between groups.
struct Writer {
    conn: Connection,
    /// The journal rows not yet moved into the indexed log.
    journal: Journal,
    /// The row key and stored version of each live run this writer has written: the
    /// checks before a commit's first write need them, and an update then finds its row
    /// by the integer key. Filled only from committed groups; a run leaves it when it ends
    /// (a later commit reads its row again).
    runs: HashMap<String, Stored>,
}

/// What the writer knows of a stored run.
#[derive(Clone, Copy)]
struct Stored {
    run_no: i64,
    version: i64,
    /// `EncodedCommit::run_hash` of the stored `run_json`; `None` when not known (the row
    /// was read, not written, by this writer), which makes the next commit rewrite it.
    run_hash: Option<u64>,
    /// The stored status, when known: a commit that keeps it leaves the status indexes
    /// alone.
    status: Option<&'static str>,
}

/// What a group wrote, kept until COMMIT says it happened.
#[derive(Default)]
struct Written {
    /// Each successful commit's events, by run.
    events: Vec<(i64, Vec<EncodedEvent>)>,
    /// How many rows that is.
    rows: usize,
    /// The last seq each run reached in this group, ahead of the journal's memory.
    last_seq: HashMap<i64, u64>,
    /// The smallest and largest journal rowids written (0: none).
    first_id: i64,
    last_id: i64,
    /// Runs written in this group, as they are after it, ahead of `Writer::runs`.
    runs: HashMap<String, Stored>,
    /// Runs that ended in this group.
    ended: Vec<String>,
}

/// Why a commit was not written.
enum Failure {
    /// Refused before it wrote anything: it fails alone.
    Refused(StoreError),
    /// SQLite failed after the commit had written part of itself: the group's transaction
    /// cannot be trusted.
    Broken(String),
}

impl Writer {
    /// Writes a group in one transaction and returns each commit's outcome. Nothing is
    /// reported as written before COMMIT has returned.
    fn write_group(
        &mut self,
        group: &mut [(Box<EncodedCommit>, Reply)],
    ) -> Vec<Result<(), StoreError>> {
        let size = group.len();
        let fail_all = |message: String| {
            (0..size)
                .map(|_| Err(StoreError::Database(message.clone())))
                .collect()
        };
        if let Err(e) = exec(&self.conn, "BEGIN IMMEDIATE") {
            return fail_all(format!("begin group transaction: {e}"));
        }
        let mut outcomes = Vec::with_capacity(size);
        let mut written = Written::default();
        for (commit, _) in group.iter_mut() {
            let outcome = match self.write_commit(commit, &mut written) {
                Ok(()) => Ok(()),
                Err(Failure::Refused(error)) => Err(error),
                Err(Failure::Broken(message)) => {
                    rollback(&self.conn);
                    return fail_all(format!("group transaction abandoned: {message}"));
                }
            };
            // Some errors (I/O, disk full) make SQLite roll back the whole transaction;
            // the statements after it would then run outside any transaction.
            if self.conn.is_autocommit() {
                let cause = match outcome {
                    Err(e) => e.to_string(),
                    Ok(()) => "rolled back by SQLite".to_string(),
                };
                return fail_all(format!("group transaction lost: {cause}"));
            }
            outcomes.push(outcome);
        }
        let planned = self.journal.plan(written.rows);
        if let Err(e) = move_journal(&self.conn, &planned) {
            // Only SQLite itself failing gets here (the copies are idempotent); the rows
            // stay in the journal and are planned again.
            rollback(&self.conn);
            self.journal.settle(planned, false);
            return fail_all(format!(
                "group transaction abandoned: move journal rows: {e}"
            ));
        }
        if let Err(e) = exec(&self.conn, "COMMIT") {
            rollback(&self.conn);
            self.journal.settle(planned, false);
            let message = format!("commit group transaction: {e}");
            return outcomes
                .into_iter()
                .map(|outcome| outcome.and(Err(StoreError::Database(message.clone()))))
                .collect();
        }
        self.journal.settle(planned, true);
        self.journal
            .appended(written.events, written.first_id, written.last_id);
        self.runs.extend(written.runs);
        for run_id in written.ended {
            self.runs.remove(&run_id);
        }
        outcomes
    }

    /// Checks a commit, then writes the run row and appends its events. On success the
    /// events move into `written`.
    fn write_commit(
        &mut self,
        commit: &mut EncodedCommit,
        written: &mut Written,
    ) -> Result<(), Failure> {
        let run_no = match commit.expected_version {
            None => {
                check_events(commit, 0).map_err(Failure::Refused)?;
                insert_run(&self.conn, commit)?
            }
            Some(expected) => {
                let stored = self
                    .check_update(commit, expected, written)
                    .map_err(Failure::Refused)?;
                update_run(&self.conn, commit, stored, expected)?;
                stored.run_no
            }
        };
        written.runs.insert(
            commit.run_id.clone(),
            Stored {
                run_no,
                version: commit.version,
                run_hash: Some(commit.run_hash),
                status: Some(commit.status),
            },
        );
        if commit.status_is_terminal {
            written.ended.push(commit.run_id.clone());
        }
        if commit.events.is_empty() {
            return Ok(());
        }
        let (first_id, last_id) = append_events(&self.conn, run_no, &commit.events)
            .map_err(|e| Failure::Broken(format!("run {}: append events: {e}", commit.run_id)))?;
        if written.first_id == 0 {
            written.first_id = first_id;
        }
        written.last_id = written.last_id.max(last_id);
        if let Some(last) = commit.events.last() {
            written.last_seq.insert(run_no, last.seq);
        }
        written.rows += commit.events.len();
        written
            .events
            .push((run_no, std::mem::take(&mut commit.events)));
        Ok(())
    }

    /// Everything that can refuse an update, checked before it writes: the version it
    /// expects, the version it brings, and that its events continue the log. Returns what
    /// is stored of the run.
    fn check_update(
        &self,
        commit: &EncodedCommit,
        expected: i64,
        written: &Written,
    ) -> Result<Stored, StoreError> {
        let run_id = &commit.run_id;
        // What this writer remembers is trusted only when it agrees with the caller; on
        // a mismatch the row decides (another process may have written the file), so a
        // stale memory costs one read instead of refusing the run's commits forever.
        let remembered = written.runs.get(run_id).or_else(|| self.runs.get(run_id));
        let stored = match remembered.filter(|stored| stored.version == expected) {
            Some(stored) => Some(*stored),
            None => self
                .conn
                .prepare_cached(
                    "SELECT run_no, version FROM runs JOIN run_progress USING (run_no)
                     WHERE id = ?1",
                )
                .and_then(|mut stmt| {
                    stmt.query_row([run_id], |r| {
                        Ok(Stored {
                            run_no: r.get(0)?,
                            version: r.get(1)?,
                            run_hash: None,
                            status: None,
                        })
                    })
                    .optional()
                })
                .map_err(|e| run_error(run_id, "read", e))?,
        };
        let Some(stored) = stored.filter(|stored| stored.version == expected) else {
            return Err(StoreError::Conflict {
                run_id: run_id.clone(),
                expected: Some(expected),
                found: stored.map(|stored| stored.version),
            });
        };
        if commit.version <= expected {
            return Err(StoreError::Database(format!(
                "run {run_id}: a change must raise the version past {expected}, got {}",
                commit.version
            )));
        }
        let last = self
            .last_seq(stored.run_no, written)
            .map_err(|e| run_error(run_id, "read last seq", e))?;
        check_events(commit, last)?;
        Ok(stored)
    }

    /// The last seq of a run's log: this group's appends, then the journal's, then the
    /// indexed log's (0: an empty log).
    fn last_seq(&self, run_no: i64, written: &Written) -> rusqlite::Result<u64> {
        if let Some(last) = written
            .last_seq
            .get(&run_no)
            .copied()
            .or_else(|| self.journal.last_seq(run_no))
        {
            return Ok(last);
        }
        let last: Option<u64> = self
            .conn
            .prepare_cached("SELECT max(seq) FROM events WHERE run_no = ?1")?
            .query_row([run_no], |r| r.get(0))?;
        Ok(last.unwrap_or(0))
    }
}

/// Refuses events that would leave a gap in the log or repeat a seq: the log is what
/// watchers replay and restores rebuild from, so it must stay gapless.
fn check_events(commit: &EncodedCommit, last: u64) -> Result<(), StoreError> {
    for (seq, event) in (last + 1..).zip(&commit.events) {
        if event.seq != seq {
            return Err(StoreError::Database(format!(
                "run {}: event seq {} does not continue the log (next is {seq})",
                commit.run_id, event.seq
            )));
        }
    }
    Ok(())
}

/// Appends checked events to the journal; returns the first and last rowid written.
fn append_events(
    conn: &Connection,
    run_no: i64,
    events: &[EncodedEvent],
) -> rusqlite::Result<(i64, i64)> {
    let mut first = 0;
    let mut insert = conn.prepare_cached(
        "INSERT INTO event_journal (run_no, seq, kind, at, attributes)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for event in events {
        insert.execute(params![
            run_no,
            event.seq,
            event.kind,
            event.at,
            event.attributes
        ])?;
        if first == 0 {
            first = conn.last_insert_rowid();
        }
    }
    Ok((first, conn.last_insert_rowid()))
}

/// A database error while writing a run, with what was being done. Built only on failure:
/// formatting the context of every statement up front was 3 % of the writer's time.
fn run_error(run_id: &str, doing: &str, e: rusqlite::Error) -> StoreError {
    StoreError::Database(format!("run {run_id}: {doing}: {e}"))
}

/// Copies a slice of the journal into the indexed log, or drops a moved segment. A row
/// already in the log (it cannot be, short of a bug) is left as it is rather than failing
/// every later group.
fn move_journal(conn: &Connection, planned: &Move) -> rusqlite::Result<()> {
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
            }
        }
        Move::Truncate(last_id) => {
            conn.prepare_cached("DELETE FROM event_journal WHERE id <= ?1")?
                .execute([last_id])?;
        }
    }
    Ok(())
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

/// Inserts the run and its progress. A run that exists already is refused before anything
/// is written; a failure after the first insert breaks the group.
fn insert_run(conn: &Connection, run: &EncodedCommit) -> Result<i64, Failure> {
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
                    run.run_id,
                    run.task_id,
                    run.agent_id,
                    run.project_id,
                    run.status,
                    run.created_at,
                    run.run_json,
                ],
                |r| r.get(0),
            )
            .optional()
        })
        .map_err(|e| Failure::Refused(run_error(&run.run_id, "insert", e)))?;
    let Some(run_no) = inserted else {
        return Err(Failure::Refused(StoreError::Conflict {
            run_id: run.run_id.clone(),
            expected: None,
            found: stored_version(conn, &run.run_id).map_err(Failure::Refused)?,
        }));
    };
    conn.prepare_cached(
        "INSERT INTO run_progress (run_no, version, step_count, cost_usd, updated_at, stall_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            run_no,
            run.version,
            run.step_count,
            run.cost_usd,
            run.updated_at,
            run.stall_json,
        ])
    })
    .map_err(|e| Failure::Broken(format!("run {}: insert progress: {e}", run.run_id)))?;
    Ok(run_no)
}

/// Writes the progress row, guarded by the version, and `run_json` only when it changed.
/// Task, agent, project and creation time never change after a run is created, so only
/// the insert writes their columns (and their indexes).
fn update_run(
    conn: &Connection,
    run: &EncodedCommit,
    stored: Stored,
    expected: i64,
) -> Result<(), Failure> {
    let updated = conn
        .prepare_cached(
            "UPDATE run_progress SET version = ?3, step_count = ?4, cost_usd = ?5,
                 updated_at = ?6, stall_json = coalesce(?7, stall_json)
             WHERE run_no = ?1 AND version = ?2",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                stored.run_no,
                expected,
                run.version,
                run.step_count,
                run.cost_usd,
                run.updated_at,
                run.stall_json,
            ])
        })
        .map_err(|e| Failure::Refused(run_error(&run.run_id, "update progress", e)))?;
    if updated != 1 {
        return Err(Failure::Refused(StoreError::Conflict {
            run_id: run.run_id.clone(),
            expected: Some(expected),
            found: stored_version(conn, &run.run_id).map_err(Failure::Refused)?,
        }));
    }
    if stored.run_hash == Some(run.run_hash) {
        return Ok(());
    }
    // Naming `status` in SET makes SQLite rewrite the status and live-run index entries
    // even when the value is the same, so it is named only when it may have changed.
    let sql = if stored.status == Some(run.status) {
        "UPDATE runs SET run_json = ?2 WHERE run_no = ?1"
    } else {
        "UPDATE runs SET run_json = ?2, status = ?3 WHERE run_no = ?1"
    };
    conn.prepare_cached(sql)
        .and_then(|mut stmt| {
            if stored.status == Some(run.status) {
                stmt.execute(params![stored.run_no, run.run_json])
            } else {
                stmt.execute(params![stored.run_no, run.run_json, run.status])
            }
        })
        .map_err(|e| Failure::Broken(format!("run {}: update: {e}", run.run_id)))?;
    Ok(())
}

/// The stored version of a run, for a conflict report.
fn stored_version(conn: &Connection, run_id: &str) -> Result<Option<i64>, StoreError> {
    conn.prepare_cached("SELECT version FROM runs JOIN run_progress USING (run_no) WHERE id = ?1")
        .and_then(|mut stmt| stmt.query_row([run_id], |r| r.get(0)).optional())
        .map_err(|e| run_error(run_id, "read version", e))
}
