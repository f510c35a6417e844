//! Run leases: which process owns a live run when several share one database. A process
//! claims a run before it decides its calls (creating it, restoring it, or taking it over
//! for a worker that attached here); every commit names the owner and the epoch it
//! claimed with, and `runplane_commit` refuses any other (`StoreError::Fenced`). Leases
//! are renewed in the background and lapse when their process is gone.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use deadpool_postgres::{Object, Pool};

use super::{pg_error, pool_error};
use crate::store::StoreError;

/// The leases this process holds.
pub(super) struct Leases {
    /// This process's id in `run_leases.owner`: random, so two processes never share one.
    owner: String,
    /// How long a lease lasts unless renewed.
    ttl: Duration,
    /// The epoch of each run's lease this process claimed, by run id.
    held: Mutex<HashMap<String, i64>>,
}

impl Leases {
    pub fn new(ttl: Duration) -> Leases {
        let mut bytes = [0u8; 8];
        // Without randomness two processes could share an id only by also sharing a
        // clock tick: the time is mixed in.
        let _ = getrandom::fill(&mut bytes);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Leases {
            owner: format!("{:016x}-{nanos:08x}", u64::from_le_bytes(bytes)),
            ttl,
            held: Mutex::new(HashMap::new()),
        }
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The epoch of this process's lease on a run, if it holds one.
    pub fn epoch(&self, run_id: &str) -> Option<i64> {
        self.lock().get(run_id).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims a run: granted when nobody holds it, its lease lapsed, this process holds it,
    /// or `takeover`; otherwise `Fenced`. Each grant raises the epoch.
    pub async fn claim(
        &self,
        client: &Object,
        run_id: &str,
        takeover: bool,
    ) -> Result<(), StoreError> {
        let ttl = self.ttl_seconds();
        let statement = client
            .prepare_cached(
                "INSERT INTO run_leases (run_no, owner, epoch, expires_at)
                 SELECT run_no, $2, 1, now() + make_interval(secs => $3) FROM runs WHERE id = $1
                 ON CONFLICT (run_no) DO UPDATE
                     SET owner = excluded.owner, epoch = run_leases.epoch + 1,
                         expires_at = excluded.expires_at
                     WHERE run_leases.owner = excluded.owner
                        OR run_leases.expires_at < now() OR $4
                 RETURNING epoch",
            )
            .await
            .map_err(pg_error("prepare claim"))?;
        let row = client
            .query_opt(&statement, &[&run_id, &self.owner, &ttl, &takeover])
            .await
            .map_err(pg_error(&format!("run {run_id}: claim")))?;
        match row {
            Some(row) => {
                self.lock().insert(run_id.to_string(), row.get(0));
                if takeover {
                    // The previous owner, if another process, stops the run's actor at
                    // once rather than at its next write (`peers.rs`).
                    client
                        .execute(
                            "SELECT pg_notify('runplane_moved', $1 || ' ' || $2)",
                            &[&run_id, &self.owner],
                        )
                        .await
                        .map_err(pg_error(&format!("run {run_id}: announce takeover")))?;
                }
                Ok(())
            }
            None => {
                self.lock().remove(run_id);
                Err(StoreError::Fenced {
                    run_id: run_id.to_string(),
                })
            }
        }
    }

    /// Gives a run up, if this process still holds it with the epoch it claimed: the
    /// lease stays, owned by nobody (`''`, which no process's id is) and lapsed, so the
    /// epoch keeps rising and a live run without a worker is found as an orphan.
    pub async fn release(&self, client: &Object, run_id: &str) -> Result<(), StoreError> {
        let Some(epoch) = self.lock().remove(run_id) else {
            return Ok(());
        };
        client
            .execute(
                "UPDATE run_leases l SET owner = '', expires_at = now() FROM runs r
                 WHERE r.id = $1 AND l.run_no = r.run_no AND l.owner = $2 AND l.epoch = $3",
                &[&run_id, &self.owner, &epoch],
            )
            .await
            .map_err(pg_error(&format!("run {run_id}: release")))?;
        Ok(())
    }

    /// Extends every lease this process holds.
    async fn renew(&self, client: &Object) -> Result<(), StoreError> {
        client
            .execute(
                "UPDATE run_leases SET expires_at = now() + make_interval(secs => $2)
                 WHERE owner = $1",
                &[&self.owner, &self.ttl_seconds()],
            )
            .await
            .map_err(pg_error("renew leases"))?;
        Ok(())
    }

    /// How long a lease lasts unless renewed.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn ttl_seconds(&self) -> f64 {
        self.ttl.as_secs_f64()
    }
}

/// Renews this process's leases three times per lease time, until the pool closes. A
/// failed renewal is retried at the next tick: a lease lapses only after a whole lease
/// time without one.
pub(super) async fn renew_until_closed(pool: Pool, leases: std::sync::Arc<Leases>) {
    let mut tick = tokio::time::interval(leases.ttl / 3);
    loop {
        tick.tick().await;
        if pool.is_closed() {
            return;
        }
        let renewed = match pool.get().await.map_err(pool_error("connect")) {
            Ok(client) => leases.renew(&client).await,
            Err(error) => Err(error),
        };
        if let Err(error) = renewed {
            tracing::warn!(%error, "renewing run leases failed; retrying");
        }
    }
}
