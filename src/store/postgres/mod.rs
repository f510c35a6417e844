//! The network store: PostgreSQL through `tokio-postgres`, with `deadpool-postgres` pools.
//!
//! Commits go through one writer task that groups the commits queued while a group is in
//! flight into one transaction: each commit is one call of the `runplane_commit` function
//! (`schema.rs`), the calls of a group are pipelined on the writer's connection, and the
//! group's `COMMIT` (one WAL flush) answers them all (`write.rs`). Reads and credentials
//! use a pool of their own (`read.rs`, `credentials.rs`). `docs/STORE.md` ("PostgreSQL")
//! has the schema and the reasons.

mod credentials;
mod lease;
mod peers;
mod read;
mod retention;
mod schema;
mod versions;
mod write;

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{
    Commit, CommitDone, Event, RunPage, RunQuery, RunStore, StoreError, StoreFuture, StoredRun,
};
use crate::domain::{Credential, PolicyVersion, Run, StallTracker};
use crate::store::reply::Reply;
use crate::store::Peers;
use lease::Leases;
use peers::PgPeers;
use write::Job;

/// Where the database is and how the store uses it.
#[derive(Clone)]
pub struct PostgresStoreOptions {
    /// A libpq-style connection string: `postgresql://user:password@host:port/database` or
    /// `host=… user=… dbname=…`. The database must exist; the store creates its tables.
    pub url: String,
    /// Most connections the read pool opens (reads and credentials); the writer has one
    /// more of its own. 0 is treated as 1.
    pub pool_size: usize,
    /// Most commits grouped into one transaction; 0 is treated as 1.
    pub max_batch: usize,
    /// How long opening a connection may take before the operation fails as
    /// `Unavailable`; also how long a read waits for a pooled connection.
    pub connect_timeout: Duration,
    /// How long a run's lease lasts unless its owner renews it (a third of it apart): how
    /// long a run whose process died waits before another may claim it.
    pub lease_ttl: Duration,
}

impl PostgresStoreOptions {
    /// Options with the defaults: a read pool of 8 connections, groups of up to 1024
    /// commits, 5 s to connect.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresStoreOptions {
            url: url.into(),
            pool_size: 8,
            max_batch: 1024,
            connect_timeout: Duration::from_secs(5),
            lease_ttl: Duration::from_secs(15),
        }
    }
}

/// The URL may carry a password: it is not printed.
impl fmt::Debug for PostgresStoreOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStoreOptions")
            .field("url", &"<redacted>")
            .field("pool_size", &self.pool_size)
            .field("max_batch", &self.max_batch)
            .field("connect_timeout", &self.connect_timeout)
            .field("lease_ttl", &self.lease_ttl)
            .finish()
    }
}

/// The PostgreSQL implementation of [`RunStore`]. Share it behind an `Arc`. Dropping the
/// last reference stops taking commits; the writer task writes and answers what is queued,
/// then ends. [`PostgresStore::close`] does the same and waits for it.
pub struct PostgresStore {
    /// `None` once closed.
    jobs: RwLock<Option<mpsc::UnboundedSender<Job>>>,
    /// Reads and credentials.
    reads: Pool,
    /// The writer task, awaited by `close`.
    writer: Mutex<Option<JoinHandle<()>>>,
    /// The runs this process owns.
    leases: Arc<Leases>,
    /// The other processes sharing the database.
    peers: Arc<PgPeers>,
}

impl PostgresStore {
    /// Connects, brings the schema up to date and starts the writer task (on the current
    /// tokio runtime). Fails with `Unavailable` when the server cannot be reached.
    pub async fn open(options: PostgresStoreOptions) -> Result<PostgresStore, StoreError> {
        let mut config: tokio_postgres::Config = options
            .url
            .parse()
            .map_err(|e| StoreError::Database(format!("bad PostgreSQL URL: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("runplane");
        }
        let pool = |size: usize| {
            let manager = Manager::from_config(
                config.clone(),
                tokio_postgres::NoTls,
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            );
            Pool::builder(manager)
                .max_size(size.max(1))
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(options.connect_timeout))
                .create_timeout(Some(options.connect_timeout))
                .build()
                .map_err(|e| StoreError::Database(format!("build connection pool: {e}")))
        };
        // The listener's connection is one more, outside the pools.
        let listener_config = config.clone();
        let reads = pool(options.pool_size)?;
        let writes = pool(1)?;

        let mut client = writes.get().await.map_err(pool_error("connect"))?;
        schema::migrate(&mut client).await?;
        drop(client);

        let (jobs, queue) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write::run(writes, queue, options.max_batch.max(1)));
        let leases = Arc::new(Leases::new(options.lease_ttl.max(Duration::from_secs(1))));
        tokio::spawn(lease::renew_until_closed(
            reads.clone(),
            Arc::clone(&leases),
        ));
        let peers = PgPeers::start(reads.clone(), listener_config, Arc::clone(&leases));
        Ok(PostgresStore {
            jobs: RwLock::new(Some(jobs)),
            reads,
            writer: Mutex::new(Some(writer)),
            leases,
            peers,
        })
    }

    /// Stops taking commits, waits until the writer has written and answered every commit
    /// queued before, and closes the connections. Later commits and reads fail with
    /// [`StoreError::Closed`]. Idempotent.
    pub async fn close(&self) {
        self.jobs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(writer) = writer {
            if writer.await.is_err() {
                tracing::error!("the PostgreSQL store's writer task panicked");
            }
        }
        self.reads.close();
    }

    /// Encodes a commit and queues it for the writer; a refused commit or a closed store is
    /// answered at once.
    fn queue_commit(&self, commit: Commit, reply: Reply) {
        let encoded = match write::encode(commit, &self.leases) {
            Ok(encoded) => encoded,
            Err(error) => return reply.send(Err(error)),
        };
        match &*self.jobs.read().unwrap_or_else(PoisonError::into_inner) {
            // A writer that is gone drops the job, and the reply answers `Closed`.
            Some(jobs) => {
                let _ = jobs.send(Job {
                    commit: Box::new(encoded),
                    reply,
                });
            }
            None => reply.send(Err(StoreError::Closed)),
        }
    }

    /// Runs `work` on a pooled connection.
    fn with_client<T, F, Fut>(&self, work: F) -> StoreFuture<T>
    where
        T: Send + 'static,
        F: FnOnce(deadpool_postgres::Object) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send,
    {
        let pool = self.reads.clone();
        Box::pin(async move {
            if pool.is_closed() {
                return Err(StoreError::Closed);
            }
            let client = pool.get().await.map_err(pool_error("connect"))?;
            work(client).await
        })
    }
}

impl Drop for PostgresStore {
    /// The writer ends by itself once its queue is empty and closed.
    fn drop(&mut self) {
        self.jobs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.reads.close();
    }
}

impl RunStore for PostgresStore {
    /// The commit is queued when this is called, not when the future is first polled, so
    /// commits issued one after another by one caller are applied in that order.
    fn commit(&self, commit: Commit) -> StoreFuture<()> {
        let (waiter, answer) = oneshot::channel();
        self.queue_commit(commit, Reply::wait(waiter));
        Box::pin(async move { answer.await.unwrap_or(Err(StoreError::Closed)) })
    }

    /// Runs `done` on the writer task after the group holding the commit, in queue order
    /// with every other commit's reply.
    fn commit_then(&self, commit: Commit, done: CommitDone) {
        self.queue_commit(commit, Reply::then(done));
    }

    fn claim(&self, run_id: &str, takeover: bool) -> StoreFuture<()> {
        let (run_id, leases) = (run_id.to_string(), Arc::clone(&self.leases));
        self.with_client(
            move |client| async move { leases.claim(&client, &run_id, takeover).await },
        )
    }

    fn release(&self, run_id: &str) -> StoreFuture<()> {
        let (run_id, leases) = (run_id.to_string(), Arc::clone(&self.leases));
        self.with_client(move |client| async move { leases.release(&client, &run_id).await })
    }

    fn get_run(&self, run_id: &str) -> StoreFuture<Option<Run>> {
        let run_id = run_id.to_string();
        self.with_client(move |client| async move { read::get_run(&client, &run_id).await })
    }

    fn get_run_and_stall(&self, run_id: &str) -> StoreFuture<Option<(Run, Option<StallTracker>)>> {
        let run_id = run_id.to_string();
        self.with_client(
            move |client| async move { read::get_run_and_stall(&client, &run_id).await },
        )
    }

    fn list_runs(&self, query: RunQuery) -> StoreFuture<RunPage> {
        self.with_client(move |client| async move { read::list_runs(&client, &query).await })
    }

    fn list_events(&self, run_id: &str, from_seq: u64, limit: usize) -> StoreFuture<Vec<Event>> {
        let run_id = run_id.to_string();
        self.with_client(move |client| async move {
            read::list_events(&client, &run_id, from_seq, limit).await
        })
    }

    fn pending_asks(&self, run_id: Option<&str>) -> StoreFuture<Vec<Event>> {
        let run_id = run_id.map(str::to_string);
        self.with_client(move |client| async move {
            read::pending_asks(&client, run_id.as_deref()).await
        })
    }

    fn live_runs(&self) -> StoreFuture<Vec<StoredRun>> {
        self.with_client(|mut client| async move { read::live_runs(&mut client, None).await })
    }

    fn live_run(&self, run_id: &str) -> StoreFuture<Option<StoredRun>> {
        let run_id = run_id.to_string();
        self.with_client(move |mut client| async move {
            Ok(read::live_runs(&mut client, Some(&run_id)).await?.pop())
        })
    }

    fn purge_finished_before(&self, cutoff: DateTime<Utc>, limit: usize) -> StoreFuture<usize> {
        self.with_client(move |mut client| async move {
            retention::purge_finished_before(&mut client, cutoff, limit).await
        })
    }

    fn put_credential(&self, credential: Credential) -> StoreFuture<()> {
        self.with_client(
            move |client| async move { credentials::insert(&client, &credential).await },
        )
    }

    fn credential(&self, hash: &str) -> StoreFuture<Option<Credential>> {
        let hash = hash.to_string();
        self.with_client(move |client| async move { credentials::by_hash(&client, &hash).await })
    }

    fn operator_credentials(&self) -> StoreFuture<Vec<Credential>> {
        self.with_client(|client| async move { credentials::operators(&client).await })
    }

    fn revoke_credential(&self, name: &str, at: DateTime<Utc>) -> StoreFuture<Option<Credential>> {
        let name = name.to_string();
        self.with_client(move |client| async move { credentials::revoke(&client, &name, at).await })
    }

    fn put_policy_version(&self, version: PolicyVersion) -> StoreFuture<()> {
        self.with_client(move |client| async move { versions::insert(&client, &version).await })
    }

    fn policy_version(&self, hash: &str) -> StoreFuture<Option<PolicyVersion>> {
        let hash = hash.to_string();
        self.with_client(move |client| async move { versions::by_hash(&client, &hash).await })
    }

    fn peers(&self) -> Option<Arc<dyn Peers>> {
        Some(Arc::new(Arc::clone(&self.peers)))
    }
}

/// Maps a PostgreSQL error to a `StoreError`, saying what was being done.
fn pg_error(context: &str) -> impl FnOnce(tokio_postgres::Error) -> StoreError + '_ {
    move |e| classify(&e, format!("{context}: {}", describe(&e)))
}

/// A pool error (no connection could be had) as a `StoreError`.
fn pool_error(context: &str) -> impl FnOnce(PoolError) -> StoreError + '_ {
    move |e| match e {
        PoolError::Backend(e) => pg_error(context)(e),
        PoolError::Closed => StoreError::Closed,
        other => StoreError::Unavailable(format!("{context}: {other}")),
    }
}

/// The server's message with its detail, or the client's.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({}): {detail}", db.message(), db.code().code()),
            None => format!("{} ({})", db.message(), db.code().code()),
        },
        None => match std::error::Error::source(e) {
            Some(source) => format!("{e}: {source}"),
            None => e.to_string(),
        },
    }
}

/// `Unavailable` for what may pass on its own, `Database` for the rest.
fn classify(e: &tokio_postgres::Error, message: String) -> StoreError {
    let retryable = match e.code() {
        Some(code) => is_transient(code.code()),
        // No server error: the connection failed, closed or timed out (a value that does
        // not convert would be a bug in this module, and reads as `Database`).
        None => {
            e.is_closed()
                || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
                || e.to_string().contains("timeout")
                || e.to_string().contains("connect")
        }
    };
    if retryable {
        StoreError::Unavailable(message)
    } else {
        StoreError::Database(message)
    }
}

/// SQLSTATEs after which the same operation may succeed later: connection exceptions
/// (08), serialization failure and deadlock (40001, 40P01), insufficient resources (53),
/// operator intervention — shutdown, cancel, timeout, cannot connect now (57), a lock
/// wait that timed out (55P03), and the server's own I/O errors (58030).
fn is_transient(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("57")
        || matches!(code, "40001" | "40P01" | "55P03" | "58030")
}

#[cfg(test)]
mod tests {
    use super::is_transient;

    #[test]
    fn transient_codes_are_the_retryable_ones() {
        for code in [
            "08006", "08001", "40001", "40P01", "53300", "57P01", "57014",
        ] {
            assert!(is_transient(code), "{code}");
        }
        for code in ["23505", "22P02", "42P01", "XX000"] {
            assert!(!is_transient(code), "{code}");
        }
    }
}
