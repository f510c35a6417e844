//! The embedded store: one SQLite file in WAL mode.
//!
//! Writes go through a single writer thread that groups concurrent commits into one
//! transaction (one fsync, one lock round trip for the whole group); a second thread
//! checkpoints the WAL so the writer never pauses for it; reads use their own
//! connections on tokio's blocking pool. `docs/STORE.md` has the schema and the numbers
//! behind these choices.

mod checkpoint;
mod credentials;
mod encode;
mod journal;
#[cfg(test)]
mod plans;
mod read;
mod retention;
mod rows;
mod schema;
mod versions;
mod writer;

use std::fmt;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{mpsc, Arc, Mutex, PoisonError, RwLock};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rusqlite::Connection;
use tokio::sync::oneshot;

use super::{
    Commit, CommitDone, Event, RunPage, RunQuery, RunStore, StoreError, StoreFuture, StoredRun,
};
use crate::domain::{Credential, PolicyVersion, Run, StallTracker};
use crate::store::reply::Reply;
use read::ReadPool;
use writer::Job;

/// How hard a commit waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    /// `PRAGMA synchronous=NORMAL`: in WAL mode a commit survives the process being killed
    /// (the OS has the pages) but not a power loss or kernel crash; the WAL is fsynced only
    /// at checkpoints. Several times the commit rate of `Full`.
    #[default]
    Normal,
    /// `PRAGMA synchronous=FULL`: every group commit fsyncs the WAL before any of its
    /// waiters is answered, so acknowledged commits survive power loss.
    Full,
}

impl Synchronous {
    /// The configuration spelling: `"normal"` or `"full"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Synchronous::Normal => "normal",
            Synchronous::Full => "full",
        }
    }
}

impl fmt::Display for Synchronous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Synchronous {
    type Err = crate::domain::UnknownValue;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "normal" => Ok(Synchronous::Normal),
            "full" => Ok(Synchronous::Full),
            other => Err(crate::domain::UnknownValue::new("synchronous", other)),
        }
    }
}

/// Told about every group the writer thread commits: how many commits it held and how long
/// its transaction took (BEGIN to COMMIT). A trait rather than a metrics type so that the
/// store knows nothing of who watches it (the server passes its Prometheus metrics). Called
/// on the writer thread before the group's committers hear back, so it must be quick.
pub trait GroupObserver: fmt::Debug + Send + Sync {
    /// A group was written (or failed: the time is spent either way).
    fn group_written(&self, commits: usize, took: Duration);
}

/// Where the store lives and how it trades latency for durability.
#[derive(Debug, Clone)]
pub struct SqliteStoreOptions {
    /// The database file; its directory must exist.
    pub path: PathBuf,
    /// Durability of each commit.
    pub synchronous: Synchronous,
    /// Most commits grouped into one transaction. Bounds how long the first commit of a
    /// group waits for the last one; 0 is treated as 1.
    pub max_batch: usize,
    /// How often the checkpointer copies the WAL back into the database file. Short,
    /// because a checkpoint slows the writer for about as long as it runs: at 16k round
    /// trips/s, p99 was ~50 ms with a pass every second and ~20 ms every 50 ms
    /// (BENCHMARKS.md).
    pub checkpoint_interval: Duration,
    /// Events the journal collects before they move into the indexed log as one segment.
    /// Larger segments give each run more rows per index page moved (less WAL written per
    /// event) but cost the writer memory (~300 bytes a row, up to two segments) and make
    /// reads of recent events scan more journal rows. See `journal.rs`.
    pub journal_segment_rows: usize,
    /// Bytes of WAL past which the writer starts the WAL over, and the size SQLite then
    /// truncates the file to. Starting over costs every commit waiting at that moment two
    /// fsyncs (8–25 ms on this machine's disk under load), so this sets how often that pause
    /// comes: with 64 MiB it came every ~0.75 s at 16k round trips/s, often enough to be
    /// the p99; with 256 MiB every few seconds (BENCHMARKS.md). The file can grow to about
    /// this size plus one checkpoint interval's writes.
    pub wal_size_limit: u64,
    /// Told about every group commit; `None`: nobody watches.
    pub observer: Option<Arc<dyn GroupObserver>>,
}

impl SqliteStoreOptions {
    /// Options with the defaults: NORMAL durability, groups of up to 1024 commits, a
    /// checkpoint every 50 ms, journal segments of 8192 events, a WAL of up to 256 MiB.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteStoreOptions {
            path: path.into(),
            synchronous: Synchronous::Normal,
            max_batch: 1024,
            checkpoint_interval: Duration::from_millis(50),
            journal_segment_rows: 8192,
            wal_size_limit: 256 * 1024 * 1024,
            observer: None,
        }
    }
}

/// Reads in flight at once; as many as the read pool keeps idle connections, so a steady
/// load reuses them.
const MAX_CONCURRENT_READS: usize = read::MAX_IDLE;

/// The threads behind a store, kept to be stopped and joined on close.
#[derive(Default)]
struct Workers {
    /// The lock that keeps other stores off the file; released on close.
    lock: Option<File>,
    writer: Option<JoinHandle<()>>,
    checkpointer: Option<JoinHandle<()>>,
    /// Dropping it wakes the checkpointer and tells it to stop.
    stop_checkpointer: Option<mpsc::Sender<()>>,
    /// The checkpointer's handle on the database file, for its fsyncs. Closing a file
    /// descriptor drops every POSIX lock the process holds on that file, SQLite's included,
    /// so this one is closed only after the writer's connection is gone.
    database: Option<Arc<File>>,
}

/// The SQLite implementation of [`RunStore`]. Share it behind an `Arc`; dropping the last
/// reference (or calling [`SqliteStore::close`]) writes what is queued and stops the
/// threads.
pub struct SqliteStore {
    /// `None` once closed. A read lock is enough to send, so committers do not contend.
    jobs: RwLock<Option<mpsc::Sender<Job>>>,
    reads: Arc<ReadPool>,
    /// Bounds the reads in flight (see `read`).
    read_permits: Arc<tokio::sync::Semaphore>,
    workers: Mutex<Workers>,
}

impl SqliteStore {
    /// Opens (or creates) the database file, brings its schema up to date, and starts the
    /// writer and checkpointer threads. The file's directory must already exist.
    pub fn open(options: SqliteStoreOptions) -> Result<SqliteStore, StoreError> {
        let lock = lock_file(&options.path)?;
        let mut conn =
            schema::open_writer(&options.path, options.synchronous, options.wal_size_limit)?;
        schema::migrate(&mut conn)?;
        schema::drain_journal(&mut conn)?;
        // Opened here rather than in its thread so a bad file fails `open`, not a log line.
        let checkpoint_conn = schema::open_connection(&options.path)?;
        let database = File::options()
            .read(true)
            .write(true)
            .open(&options.path)
            .map(Arc::new)
            .map_err(|e| StoreError::Database(format!("open {}: {e}", options.path.display())))?;

        let (jobs, queue) = mpsc::channel();
        let checkpoint_jobs = jobs.clone();
        let max_batch = options.max_batch.max(1);
        let journal = journal::Journal::new(options.journal_segment_rows);
        let observer = options.observer.clone();
        let writer = spawn(WRITER_THREAD, move || {
            writer::run(conn, queue, max_batch, journal, observer)
        })?;
        // From here on, dropping `store` on an error shuts down what already started.
        let store = SqliteStore {
            jobs: RwLock::new(Some(jobs)),
            reads: Arc::new(ReadPool::new(options.path.clone(), false)),
            read_permits: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_READS)),
            workers: Mutex::new(Workers {
                lock: Some(lock),
                writer: Some(writer),
                database: Some(Arc::clone(&database)),
                ..Workers::default()
            }),
        };

        let (stop, stopped) = mpsc::channel();
        let interval = options.checkpoint_interval;
        let wal_size_limit = options.wal_size_limit;
        let checkpointer = spawn(CHECKPOINT_THREAD, move || {
            checkpoint::run(
                checkpoint_conn,
                database,
                interval,
                wal_size_limit,
                stopped,
                checkpoint_jobs,
            )
        })?;
        {
            let mut workers = store.workers.lock().unwrap_or_else(PoisonError::into_inner);
            workers.checkpointer = Some(checkpointer);
            workers.stop_checkpointer = Some(stop);
        }
        Ok(store)
    }

    /// Opens an existing database for reading only, beside whichever process owns it: no
    /// lock file, no writer or checkpointer thread, no migration, and every connection
    /// opened read-only, so a running server is not disturbed (in WAL mode its commits
    /// and a reader's snapshots do not wait for each other). Commits fail with
    /// [`StoreError::Closed`]. The schema must be this version's.
    pub fn open_read_only(path: &Path) -> Result<SqliteStore, StoreError> {
        if !path.is_file() {
            return Err(StoreError::Database(format!(
                "{}: no runplane database there",
                path.display()
            )));
        }
        let reads = ReadPool::new(path.to_path_buf(), true);
        reads.with(|conn| schema::check_version(conn, path))?;
        Ok(SqliteStore {
            jobs: RwLock::new(None),
            reads: Arc::new(reads),
            read_permits: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_READS)),
            workers: Mutex::new(Workers::default()),
        })
    }

    /// Writes every commit queued so far, stops the threads and closes the connections.
    /// Later commits and reads fail with [`StoreError::Closed`]. Blocks until the writer
    /// has finished; idempotent.
    pub fn close(&self) {
        let jobs = self
            .jobs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(jobs) = jobs {
            // Fails only if the writer is already gone, which is what we want anyway.
            let _ = jobs.send(Job::Shutdown);
        }
        self.reads.close();
        let mut workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        workers.stop_checkpointer = None;
        for handle in [workers.checkpointer.take(), workers.writer.take()]
            .into_iter()
            .flatten()
        {
            if handle.join().is_err() {
                tracing::error!("a store thread panicked");
            }
        }
        workers.database = None;
        // Only now, with everything written, may another store open the file.
        workers.lock = None;
    }

    /// Encodes a commit and queues it for the writer; a refused commit or a closed store
    /// is answered at once.
    fn queue_commit(&self, commit: Commit, reply: Reply) {
        let encoded = match encode::encode(commit) {
            Ok(encoded) => encoded,
            Err(error) => return reply.send(Err(error)),
        };
        match &*self.jobs.read().unwrap_or_else(PoisonError::into_inner) {
            // A writer that is gone drops the job, and the reply answers `Closed`.
            Some(jobs) => {
                let _ = jobs.send(Job::Commit(Box::new(encoded), reply));
            }
            None => reply.send(Err(StoreError::Closed)),
        }
    }

    /// Runs `write` on the writer's connection between two commit groups.
    fn write<T, F>(&self, write: F) -> StoreFuture<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Job::Exec(Box::new(move |conn| {
            // A caller that gave up does not undo the write; nothing to do about it.
            let _ = reply.send(write(conn));
        }));
        if let Some(jobs) = &*self.jobs.read().unwrap_or_else(PoisonError::into_inner) {
            // A writer that is gone drops the job, and the answer below is `Closed`.
            let _ = jobs.send(job);
        }
        Box::pin(async move { answer.await.unwrap_or(Err(StoreError::Closed)) })
    }

    /// Runs `read` on a pooled read connection on tokio's blocking pool, at most
    /// `MAX_CONCURRENT_READS` at once: a burst of reads (hundreds of workers attaching,
    /// each token checked against the store) then queues here instead of starting a
    /// blocking thread and a SQLite connection, with its page cache, for each.
    fn read<T, F>(&self, read: F) -> StoreFuture<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let pool = Arc::clone(&self.reads);
        let permits = Arc::clone(&self.read_permits);
        Box::pin(async move {
            let _permit = permits
                .acquire_owned()
                .await
                .map_err(|_| StoreError::Closed)?;
            tokio::task::spawn_blocking(move || pool.with(read))
                .await
                .map_err(|e| StoreError::Database(format!("read task failed: {e}")))?
        })
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.close();
    }
}

impl RunStore for SqliteStore {
    /// The commit is queued when this is called, not when the future is first polled, so
    /// commits issued one after another by one caller are applied in that order.
    ///
    /// The commit is validated and encoded here, on the caller's thread, so the single
    /// writer thread only binds and writes (see `encode`).
    fn commit(&self, commit: Commit) -> StoreFuture<()> {
        let (waiter, answer) = oneshot::channel();
        self.queue_commit(commit, Reply::wait(waiter));
        Box::pin(async move {
            // The writer drops the reply only when it stops without answering.
            answer.await.unwrap_or(Err(StoreError::Closed))
        })
    }

    /// Runs `done` on the writer thread after the group holding the commit, in queue
    /// order with every other commit's reply.
    fn commit_then(&self, commit: Commit, done: CommitDone) {
        self.queue_commit(commit, Reply::then(done));
    }

    fn get_run(&self, run_id: &str) -> StoreFuture<Option<Run>> {
        let run_id = run_id.to_string();
        self.read(move |conn| read::get_run(conn, &run_id))
    }

    fn get_run_and_stall(&self, run_id: &str) -> StoreFuture<Option<(Run, Option<StallTracker>)>> {
        let run_id = run_id.to_string();
        self.read(move |conn| read::get_run_and_stall(conn, &run_id))
    }

    fn list_runs(&self, query: RunQuery) -> StoreFuture<RunPage> {
        self.read(move |conn| read::list_runs(conn, &query))
    }

    fn list_events(&self, run_id: &str, from_seq: u64, limit: usize) -> StoreFuture<Vec<Event>> {
        let run_id = run_id.to_string();
        self.read(move |conn| read::list_events(conn, &run_id, from_seq, limit))
    }

    fn live_runs(&self) -> StoreFuture<Vec<StoredRun>> {
        self.read(|conn| read::live_runs(conn, None))
    }

    /// One process owns the data directory (its lock file sees to it), and with it every
    /// run in it.
    fn claim(&self, _run_id: &str, _takeover: bool) -> StoreFuture<()> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn release(&self, _run_id: &str) -> StoreFuture<()> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn pending_asks(&self, run_id: Option<&str>) -> StoreFuture<Vec<Event>> {
        let run_id = run_id.map(str::to_string);
        self.read(move |conn| read::pending_asks(conn, run_id.as_deref()))
    }

    fn live_run(&self, run_id: &str) -> StoreFuture<Option<StoredRun>> {
        let run_id = run_id.to_string();
        self.read(move |conn| Ok(read::live_runs(conn, Some(&run_id))?.pop()))
    }

    /// On the writer's thread between two groups: a batch holds up the commits queued
    /// behind it for as long as it takes, which is why retention deletes in small batches.
    fn purge_finished_before(&self, cutoff: DateTime<Utc>, limit: usize) -> StoreFuture<usize> {
        let (reply, answer) = oneshot::channel();
        if let Some(jobs) = &*self.jobs.read().unwrap_or_else(PoisonError::into_inner) {
            // A writer that is gone drops the job, and the answer below is `Closed`.
            let _ = jobs.send(Job::Purge {
                cutoff,
                limit,
                reply,
            });
        }
        Box::pin(async move { answer.await.unwrap_or(Err(StoreError::Closed)) })
    }

    fn put_credential(&self, credential: Credential) -> StoreFuture<()> {
        self.write(move |conn| credentials::insert(conn, &credential))
    }

    fn credential(&self, hash: &str) -> StoreFuture<Option<Credential>> {
        let hash = hash.to_string();
        self.read(move |conn| credentials::by_hash(conn, &hash))
    }

    fn operator_credentials(&self) -> StoreFuture<Vec<Credential>> {
        self.read(|conn| credentials::operators(conn))
    }

    fn revoke_credential(&self, name: &str, at: DateTime<Utc>) -> StoreFuture<Option<Credential>> {
        let name = name.to_string();
        self.write(move |conn| credentials::revoke(conn, &name, at))
    }

    fn put_policy_version(&self, version: PolicyVersion) -> StoreFuture<()> {
        self.write(move |conn| versions::insert(conn, &version))
    }

    fn policy_version(&self, hash: &str) -> StoreFuture<Option<PolicyVersion>> {
        let hash = hash.to_string();
        self.read(move |conn| versions::by_hash(conn, &hash))
    }
}

/// Takes the file's lock: `<database>.lock`, held (flock) while the store is open.
///
/// One store per file: the writer remembers what it wrote (each run's version and `run_no`,
/// the journal's rows by run) to check commits without reading, and another writer on the
/// same file would make that memory wrong. The OS drops the lock when the process dies,
/// `kill -9` included, so a restart never finds a stale one.
fn lock_file(path: &Path) -> Result<File, StoreError> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| StoreError::Database(format!("open {}: {e}", lock_path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(StoreError::Database(format!(
            "{} is in use by another runplane store (it holds {})",
            path.display(),
            lock_path.display()
        ))),
        Err(TryLockError::Error(e)) => Err(StoreError::Database(format!(
            "lock {}: {e}",
            lock_path.display()
        ))),
    }
}

/// The store's thread names, as `top -H`, `perf` and `/proc/PID/task/*/comm` show them.
/// Linux keeps 15 bytes of a thread's name, so longer names that share a prefix (the
/// former `runplane-store-writer` and `runplane-store-checkpoint`) look the same there.
const WRITER_THREAD: &str = "rp-store-writer";
const CHECKPOINT_THREAD: &str = "rp-store-ckpt";

/// Starts a named thread.
fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, StoreError> {
    thread::Builder::new()
        .name(name.to_string())
        .spawn(body)
        .map_err(|e| StoreError::Database(format!("start thread {name}: {e}")))
}

/// Maps a SQLite error to a `StoreError`, saying what was being done.
fn db_err(context: &str) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
    move |e| sqlite_error(format!("{context}: {e}"), &e)
}

/// `Unavailable` for what may pass on its own (a lock held too long, an I/O error, a full
/// disk, a file that cannot be opened now), `Database` for the rest.
fn sqlite_error(message: String, e: &rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode::{
        CannotOpen, DatabaseBusy, DatabaseLocked, DiskFull, SystemIoFailure,
    };
    match e.sqlite_error_code() {
        Some(DatabaseBusy | DatabaseLocked | SystemIoFailure | DiskFull | CannotOpen) => {
            StoreError::Unavailable(message)
        }
        _ => StoreError::Database(message),
    }
}
