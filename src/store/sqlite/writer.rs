//! The writer thread: group commit.
//!
//! One transaction per group instead of per commit is what lifts the write rate from tens
//! of thousands of rows a second to hundreds of thousands (measured on a 2-core machine): the lock, the WAL
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
use std::sync::{mpsc, Arc};
use std::time::Instant;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension};
use tokio::sync::oneshot;

use super::checkpoint;
use super::encode::{EncodedCommit, EncodedEvent, Progress};
use super::journal::Journal;
use super::retention;
use super::rows::{self, Failure};
use super::GroupObserver;
use crate::store::reply::Reply;
use crate::store::StoreError;

/// What the writer is asked to do.
pub(super) enum Job {
    /// Apply a commit and answer. Boxed: the queue moves jobs around.
    Commit(Box<EncodedCommit>, Reply),
    /// Between two groups, copy into the database file what the checkpointer left in the
    /// WAL, so that the next group starts the WAL over (`checkpoint.rs` says why only the
    /// writer can do that cheaply). Answered with whether everything was copied.
    FinishCheckpoint(mpsc::SyncSender<bool>),
    /// A small write outside the run tables (a credential), run between two groups on the
    /// writer's connection, in its own autocommit statement; it answers through its own
    /// channel.
    Exec(Box<dyn FnOnce(&Connection) + Send>),
    /// Delete a batch of finished runs (retention), between two groups in a transaction of
    /// its own; answered with how many went. The writer's memory of the journal forgets
    /// their rows once the deletion has committed.
    Purge {
        /// Runs that completed before this go.
        cutoff: DateTime<Utc>,
        /// Most runs in the batch.
        limit: usize,
        /// Where the outcome goes.
        reply: oneshot::Sender<Result<usize, StoreError>>,
    },
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
    observer: Option<Arc<dyn GroupObserver>>,
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
            let started = Instant::now();
            let outcomes = writer.write_group(&mut group);
            // Before the replies: whoever hears of a commit can already see it counted.
            if let Some(observer) = &observer {
                observer.group_written(group.len(), started.elapsed());
            }
            for ((commit, reply), outcome) in group.drain(..).zip(outcomes) {
                // The committer shares the run; it must hold the only reference again by
                // the time it hears back, or its next change would copy the run.
                drop(commit);
                reply.send(outcome);
            }
        }
        match after_group {
            Some(Job::Shutdown) => break,
            Some(Job::FinishCheckpoint(done)) => {
                // The checkpointer may have stopped waiting; that is no reason to stop.
                let _ = done.send(checkpoint::finish(&writer.conn));
            }
            Some(Job::Exec(write)) => write(&writer.conn),
            Some(Job::Purge {
                cutoff,
                limit,
                reply,
            }) => {
                let outcome = retention::purge_finished_before(
                    &writer.conn,
                    &mut writer.journal,
                    cutoff,
                    limit,
                );
                // A caller that gave up does not undo the deletion.
                let _ = reply.send(outcome);
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
    /// `EncodedCommit::definition_hash` of the stored `run_json`; `None` when not known
    /// (the row was read, not written, by this writer), which makes the next commit
    /// rewrite it.
    definition_hash: Option<u64>,
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
        if let Err(e) = rows::move_journal(&self.conn, &planned) {
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
    /// events move into `written`, the last one carrying the run's progress.
    fn write_commit(
        &mut self,
        commit: &mut EncodedCommit,
        written: &mut Written,
    ) -> Result<(), Failure> {
        let broken = |doing: &str, e: rusqlite::Error| {
            Failure::Broken(format!("run {}: {doing}: {e}", commit.run_id()))
        };
        let run_no = match commit.expected_version {
            None => {
                check_events(commit, 0).map_err(Failure::Refused)?;
                let Some(run_no) = rows::insert_run(&self.conn, commit)? else {
                    let found = self
                        .stored(commit.run_id(), written)
                        .map_err(Failure::Refused)?;
                    return Err(Failure::Refused(StoreError::Conflict {
                        run_id: commit.run_id().to_string(),
                        expected: None,
                        found: found.map(|stored| stored.version),
                    }));
                };
                run_no
            }
            Some(expected) => {
                let stored = self
                    .check_update(commit, expected, written)
                    .map_err(Failure::Refused)?;
                if stored.definition_hash != Some(commit.definition_hash) {
                    let run_json = commit.run_json().map_err(Failure::Refused)?;
                    let status_changed = stored.status != Some(commit.status);
                    rows::update_run_json(
                        &self.conn,
                        stored.run_no,
                        &run_json,
                        status_changed.then_some(commit.status),
                    )
                    .map_err(|e| broken("update", e))?;
                }
                if commit.events.is_empty() {
                    // No journal row to ride on: the progress goes straight into
                    // `run_progress`, with the newest stall tracker, the commit's or else
                    // one that only the journal holds so far.
                    let progress = &commit.progress;
                    let stall = match &progress.stall_json {
                        Some(own) => Some((progress.version, own.as_str())),
                        None => self.pending_progress(stored.run_no, written).1,
                    };
                    rows::apply_progress(&self.conn, stored.run_no, progress, stall)
                        .map_err(|e| broken("update progress", e))?;
                }
                stored.run_no
            }
        };
        written.runs.insert(
            commit.run_id().to_string(),
            Stored {
                run_no,
                version: commit.progress.version,
                definition_hash: Some(commit.definition_hash),
                status: Some(commit.status),
            },
        );
        if commit.status_is_terminal {
            written.ended.push(commit.run_id().to_string());
        }
        if commit.events.is_empty() {
            return Ok(());
        }
        let (first_id, last_id) =
            rows::append_events(&self.conn, run_no, &commit.events, &commit.progress)
                .map_err(|e| broken("append events", e))?;
        rows::apply_asks(&self.conn, run_no, &commit.events, &commit.asks)
            .map_err(|e| broken("update pending asks", e))?;
        if written.first_id == 0 {
            written.first_id = first_id;
        }
        written.last_id = written.last_id.max(last_id);
        if let Some(last) = commit.events.last() {
            written.last_seq.insert(run_no, last.seq);
        }
        written.rows += commit.events.len();
        let mut events = std::mem::take(&mut commit.events);
        if let Some(last) = events.last_mut() {
            last.progress = Some(std::mem::replace(
                &mut commit.progress,
                Box::new(Progress::default()),
            ));
        }
        written.events.push((run_no, events));
        Ok(())
    }

    /// The newest progress of a run not yet applied to `run_progress`: this group's rows,
    /// then the journal's; and the newest stall tracker among them with its version.
    fn pending_progress<'a>(
        &'a self,
        run_no: i64,
        written: &'a Written,
    ) -> (Option<&'a Progress>, Option<(i64, &'a str)>) {
        let in_group = written
            .events
            .iter()
            .rev()
            .filter(|(run, _)| *run == run_no)
            .flat_map(|(_, rows)| rows.iter().rev());
        rows::newest_progress(in_group.chain(self.journal.rows_newest_first(run_no)))
    }

    /// A run as stored: its row key, and its version with the progress of the journal and
    /// of this group counted.
    fn stored(&self, run_id: &str, written: &Written) -> Result<Option<Stored>, StoreError> {
        let row = self
            .conn
            .prepare_cached(
                "SELECT run_no, version FROM runs JOIN run_progress USING (run_no)
                 WHERE id = ?1",
            )
            .and_then(|mut stmt| {
                stmt.query_row([run_id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
                    .optional()
            })
            .map_err(|e| rows::run_error(run_id, "read", e))?;
        Ok(row.map(|(run_no, version)| {
            let pending = self.pending_progress(run_no, written).0;
            Stored {
                run_no,
                version: pending.map_or(version, |p| p.version.max(version)),
                definition_hash: None,
                status: None,
            }
        }))
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
        let run_id = commit.run_id();
        // What this writer remembers is trusted only when it agrees with the caller; on
        // a mismatch the row decides (another process may have written the file), so a
        // stale memory costs one read instead of refusing the run's commits forever.
        let remembered = written.runs.get(run_id).or_else(|| self.runs.get(run_id));
        let stored = match remembered.filter(|stored| stored.version == expected) {
            Some(stored) => Some(*stored),
            None => self.stored(run_id, written)?,
        };
        let Some(stored) = stored else {
            return Err(StoreError::NotFound {
                run_id: run_id.to_string(),
            });
        };
        if stored.version != expected {
            return Err(StoreError::Conflict {
                run_id: run_id.to_string(),
                expected: Some(expected),
                found: Some(stored.version),
            });
        }
        if commit.progress.version <= expected {
            return Err(StoreError::invalid(
                run_id,
                format!(
                    "a change must raise the version past {expected}, got {}",
                    commit.progress.version
                ),
            ));
        }
        let last = self
            .last_seq(stored.run_no, written)
            .map_err(|e| rows::run_error(run_id, "read last seq", e))?;
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
            return Err(StoreError::invalid(
                commit.run_id(),
                format!(
                    "event seq {} does not continue the log (next is {seq})",
                    event.seq
                ),
            ));
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
