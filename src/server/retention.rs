//! Retention (`--retain-finished-days`): a background task that deletes finished runs once
//! they completed longer ago than the setting, with everything stored for them.
//!
//! It runs at start and then every `interval`, and deletes in batches of `BATCH` runs,
//! one store transaction each, with `PAUSE` between them: on SQLite a batch runs on the
//! only writer connection between two commit groups, so a batch must be short and the
//! commits queued behind it must get the writer back before the next one. Live runs are
//! never deleted (the stores only delete terminal runs).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::store::{RunStore, StoreError};

/// Most runs per transaction. SQLite stops a batch earlier, at about 1,000 events: 100
/// runs of 100 events at once took 28 ms and the commits' p99 from 5.5 to 38 ms.
pub const BATCH: usize = 100;

/// Between two batches: on SQLite the writer is then free for commits 99 % of the time,
/// which leaves their p99 as it was (BENCHMARKS.md, "Retention"). About 4,000 events a
/// second: an hour's worth of finished runs takes seconds to minutes; a first pass over a
/// long backlog takes longer, as intended.
pub const PAUSE: Duration = Duration::from_millis(250);

/// Time between two passes unless set otherwise.
pub const DEFAULT_RETENTION_INTERVAL: Duration = Duration::from_secs(3600);

/// What retention keeps and how often it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Finished runs that completed longer ago than this are deleted.
    pub keep: Duration,
    /// Time between two passes; the first is at start.
    pub interval: Duration,
}

impl Retention {
    /// Keeps finished runs for `days` days, looking every `DEFAULT_RETENTION_INTERVAL`.
    pub fn days(days: u32) -> Retention {
        Retention {
            keep: Duration::from_secs(u64::from(days) * 86_400),
            interval: DEFAULT_RETENTION_INTERVAL,
        }
    }
}

/// The running task; dropping this stops it (between two store calls: a batch in
/// flight still completes or rolls back whole in the store).
pub(super) struct RetentionTask(JoinHandle<()>);

impl Drop for RetentionTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the task.
pub(super) fn spawn(
    store: Arc<dyn RunStore>,
    retention: Retention,
    metrics: Arc<Metrics>,
) -> RetentionTask {
    RetentionTask(tokio::spawn(async move {
        let mut ticker = tokio::time::interval(retention.interval);
        // A pass that took longer than the interval is not made up for with a burst.
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match pass(&*store, retention.keep, &metrics).await {
                Ok(0) => {}
                Ok(purged) => info!(purged, "retention deleted finished runs"),
                // The next pass tries again; what was deleted before the error stays deleted.
                Err(error) => warn!(%error, "retention pass failed"),
            }
        }
    }))
}

/// Deletes every finished run that completed more than `keep` ago, a batch at a time;
/// returns how many went.
pub async fn pass(
    store: &dyn RunStore,
    keep: Duration,
    metrics: &Metrics,
) -> Result<usize, StoreError> {
    let keep = chrono::Duration::from_std(keep).unwrap_or(chrono::Duration::MAX);
    // A retention so long that the cutoff is before any time there is deletes nothing.
    let Some(cutoff) = Utc::now().checked_sub_signed(keep) else {
        return Ok(0);
    };
    let mut purged = 0;
    loop {
        let batch = store.purge_finished_before(cutoff, BATCH).await?;
        purged += batch;
        metrics.runs_purged(batch);
        // A short batch is not the end: SQLite stops a batch at its event budget.
        if batch == 0 {
            return Ok(purged);
        }
        tokio::time::sleep(PAUSE).await;
    }
}
