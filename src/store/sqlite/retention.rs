//! Retention: deleting finished runs, a batch per transaction, on the writer's thread
//! between two commit groups (its connection is the only one that writes, and its memory
//! of the journal must learn what was deleted).
//!
//! The runs to go are found through `runs_finished` (schema version 6), an index on the
//! `completed_at` of run_json among terminal runs, so a batch reads the rows it deletes
//! and no others; it is compared as text with `completion::cutoff_text` (which says why
//! that is safe). A run's rows still in the journal (a quiet server seals a segment
//! rarely) are deleted too, and the writer's memory of them dropped once the deletion has
//! committed, or it would move them into the log after the run was gone.

use chrono::{DateTime, Utc};
use rusqlite::Connection;

use super::db_err;
use super::journal::Journal;
use crate::store::completion::cutoff_text;
use crate::store::StoreError;

/// About how many events one batch deletes: a tenth of the batches (100 runs of 100
/// events) that took the commits' p99 under load from 5.5 to 38 ms; at this size it stays
/// within the noise (BENCHMARKS.md, "Retention").
const EVENTS_PER_BATCH: i64 = 1_000;

/// The oldest finished runs that completed before `?1`, at most `?2`: a walk of
/// `runs_finished` from its start (`plans.rs` checks it). Named, because without
/// statistics the planner takes `runs_status` for the `IN` and then sorts every finished
/// run; `INDEXED BY` also makes the statement fail rather than scan if the index is gone.
pub(super) const FINISHED_BEFORE: &str = "SELECT run_no, id FROM runs INDEXED BY runs_finished
     WHERE status IN ('completed', 'failed', 'cancelled', 'timeout')
       AND json_extract(run_json, '$.completed_at') < ?1
     ORDER BY json_extract(run_json, '$.completed_at') LIMIT ?2";

/// Deletes up to `limit` finished runs that completed before `cutoff`, oldest first, with
/// their log, progress, pending asks and worker tokens, in one transaction; fewer when
/// their logs reach `EVENTS_PER_BATCH` events (one run at least, however long its log).
pub(super) fn purge_finished_before(
    conn: &Connection,
    journal: &mut Journal,
    cutoff: DateTime<Utc>,
    limit: usize,
) -> Result<usize, StoreError> {
    let cutoff = cutoff_text(cutoff);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    // The writer holds its connection by reference; the transaction ends (commit, or
    // rollback on drop) before the next group starts.
    let tx = conn
        .unchecked_transaction()
        .map_err(db_err("begin purge"))?;
    let doomed: Vec<(i64, String)> = tx
        .prepare_cached(FINISHED_BEFORE)
        .and_then(|mut stmt| {
            stmt.query_map(rusqlite::params![cutoff, limit], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect()
        })
        .map_err(db_err("find finished runs"))?;
    // Stop adding runs once the batch holds `EVENTS_PER_BATCH` events (at least one run):
    // the commits queued behind the batch wait for all of it.
    let mut events = 0;
    let mut taken = 0;
    for (run_no, _) in &doomed {
        if taken > 0 && events >= EVENTS_PER_BATCH {
            break;
        }
        events += tx
            .prepare_cached("SELECT coalesce(max(seq), 0) FROM events WHERE run_no = ?1")
            .and_then(|mut stmt| stmt.query_row([run_no], |r| r.get::<_, i64>(0)))
            .map_err(db_err("count a finished run's events"))?;
        taken += 1;
    }
    let doomed = &doomed[..taken];
    const BY_RUN_NO: [&str; 4] = [
        "DELETE FROM events WHERE run_no = ?1",
        "DELETE FROM pending_asks WHERE run_no = ?1",
        "DELETE FROM run_progress WHERE run_no = ?1",
        "DELETE FROM runs WHERE run_no = ?1",
    ];
    for (run_no, run_id) in doomed {
        for sql in BY_RUN_NO {
            tx.prepare_cached(sql)
                .and_then(|mut stmt| stmt.execute([run_no]))
                .map_err(db_err(&format!("run {run_id}: purge")))?;
        }
        tx.prepare_cached("DELETE FROM credentials WHERE run_id = ?1")
            .and_then(|mut stmt| stmt.execute([run_id]))
            .map_err(db_err(&format!("run {run_id}: purge worker tokens")))?;
        // The journal has no index: only a run it holds rows of costs a scan of it.
        if journal.holds(*run_no) {
            tx.prepare_cached("DELETE FROM event_journal WHERE run_no = ?1")
                .and_then(|mut stmt| stmt.execute([run_no]))
                .map_err(db_err(&format!("run {run_id}: purge journal rows")))?;
        }
    }
    tx.commit().map_err(db_err("commit purge"))?;
    let run_nos: Vec<i64> = doomed.iter().map(|(run_no, _)| *run_no).collect();
    journal.forget(&run_nos);
    Ok(doomed.len())
}
