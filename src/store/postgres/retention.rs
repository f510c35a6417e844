//! Retention: deleting finished runs, a batch per transaction, on a read-pool connection,
//! so the writer's group commits go on beside it. The runs to go are found through
//! `runs_finished` (schema version 2), an index on the `completed_at` of run_json among
//! terminal runs (compared as text: `completion::cutoff_text` says why that is safe), and
//! every per-run table is deleted from by `run_no = ANY(…)` on its primary key, so a batch
//! touches the rows it deletes and no others.

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;

use super::pg_error;
use crate::store::completion::cutoff_text;
use crate::store::StoreError;

/// Deletes up to `limit` finished runs that completed before `cutoff`, oldest first, with
/// their log, pending asks, leases and worker tokens, in one transaction.
pub(super) async fn purge_finished_before(
    client: &mut Object,
    cutoff: DateTime<Utc>,
    limit: usize,
) -> Result<usize, StoreError> {
    let cutoff = cutoff_text(cutoff);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let tx = client
        .transaction()
        .await
        .map_err(pg_error("begin purge"))?;
    // SKIP LOCKED: a run that a late commit holds is left to the next pass instead of
    // making the purge wait for it.
    let statement = tx
        .prepare_cached(
            r#"SELECT run_no, id::text FROM runs
               WHERE status IN ('completed', 'failed', 'cancelled', 'timeout')
                 AND (run_json::json ->> 'completed_at') COLLATE "C" < $1
               ORDER BY (run_json::json ->> 'completed_at') COLLATE "C"
               LIMIT $2 FOR UPDATE SKIP LOCKED"#,
        )
        .await
        .map_err(pg_error("prepare purge"))?;
    let rows = tx
        .query(&statement, &[&cutoff, &limit])
        .await
        .map_err(pg_error("find finished runs"))?;
    let run_nos: Vec<i64> = rows.iter().map(|row| row.get(0)).collect();
    let ids: Vec<String> = rows.iter().map(|row| row.get(1)).collect();
    if run_nos.is_empty() {
        return Ok(0);
    }
    for sql in [
        "DELETE FROM events WHERE run_no = ANY($1)",
        "DELETE FROM pending_asks WHERE run_no = ANY($1)",
        "DELETE FROM run_leases WHERE run_no = ANY($1)",
        "DELETE FROM runs WHERE run_no = ANY($1)",
    ] {
        let statement = tx
            .prepare_cached(sql)
            .await
            .map_err(pg_error("prepare purge"))?;
        tx.execute(&statement, &[&run_nos])
            .await
            .map_err(pg_error("purge finished runs"))?;
    }
    let statement = tx
        .prepare_cached("DELETE FROM credentials WHERE run_id = ANY($1)")
        .await
        .map_err(pg_error("prepare purge"))?;
    tx.execute(&statement, &[&ids])
        .await
        .map_err(pg_error("purge worker tokens"))?;
    tx.commit().await.map_err(pg_error("commit purge"))?;
    Ok(run_nos.len())
}
