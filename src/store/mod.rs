//! Persistence behind one trait: runs, their append-only event logs and stall trackers.
//!
//! The event log is the record of every tool call: decisions (`run.toolcall.approved`,
//! `…denied`, `…asked`, `…resolved`) and results (`run.toolcall.result`) carry the call's
//! id, tool, command, path (and resolved path, when the worker sent one), decision and
//! reason as attributes. Pending asks and the set of decided call ids are rebuilt from it
//! when a run is restored, so one tool call costs one row, and nothing the worker heard
//! can be missing from the log.

mod completion;
pub mod memory;
mod peers;
pub mod postgres;
mod reply;
mod sqlite;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::domain::{Credential, Event, PolicyVersion, Run, StallTracker};

pub use crate::domain::query::{PageCursor, RunPage, RunQuery};

pub use memory::MemoryStore;
pub use peers::{PeerCommand, PeerNews, Peers};
pub use postgres::{PostgresStore, PostgresStoreOptions};
pub use sqlite::{GroupObserver, SqliteStore, SqliteStoreOptions, Synchronous};

/// What [`RunStore::commit_then`] calls with a commit's outcome.
pub type CommitDone = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// A future a store operation resolves to. Boxed so the trait stays object safe.
pub type StoreFuture<T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'static>>;

/// Everything one change to a run writes, applied atomically.
#[derive(Debug, Clone)]
pub struct Commit {
    /// The run as it is after the change. Shared with the caller, which keeps the run: the
    /// store only reads it and drops its reference before it answers, so the caller's
    /// next change (`Arc::make_mut`) does not copy the run.
    pub run: Arc<Run>,
    /// The version the writer read: the write fails with `Conflict` if the stored run has
    /// moved on. `None` creates the run and fails if it exists.
    pub expected_version: Option<i64>,
    /// Events to append, in sequence order, continuing the run's log without a gap. Shared
    /// with the coordinator's live feed, which publishes the same events once they are
    /// committed, so neither copies them.
    pub events: Vec<Arc<Event>>,
    /// The stall tracker's state after the change; `None` leaves the stored one as is.
    pub stall: Option<StallTracker>,
}

/// A live run as stored, for restoring its owner after a restart.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRun {
    /// The run as last committed.
    pub run: Run,
    /// The stall tracker as last committed, if one was.
    pub stall: Option<StallTracker>,
    /// The run's whole event log, in sequence order.
    pub events: Vec<Event>,
}

/// What can go wrong in the store. The variants tell a caller what to do: retry
/// (`Unavailable`), re-read and decide again (`Conflict`), let go of the run (`Fenced`),
/// or stop and call a person (`Corrupt`, `Invalid`, `Database`). Cloned when one failure
/// both stops a run's actor and answers the client whose request met it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Optimistic concurrency: the stored run is not at the version the writer read.
    #[error("run {run_id}: version conflict (expected {expected:?}, stored {found:?})")]
    Conflict {
        /// The run written.
        run_id: String,
        /// The version the writer expected (`None`: the run must not exist).
        expected: Option<i64>,
        /// The stored version (`None`: no such run).
        found: Option<i64>,
    },
    /// A change to a run the store does not hold.
    #[error("run {run_id}: not found")]
    NotFound {
        /// The run written.
        run_id: String,
    },
    /// The commit itself is wrong (a gap in the sequence, a version that does not rise,
    /// an event of another run, a run that fails its own checks): a bug in the writer, so
    /// retrying it can never succeed.
    #[error("run {run_id}: commit refused: {detail}")]
    Invalid {
        /// The run written.
        run_id: String,
        /// What is wrong with the commit.
        detail: String,
    },
    /// The database cannot be reached or is busy for now (a lost connection, a lock wait
    /// that timed out, an I/O error): the same operation may succeed when retried.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Another process owns the run now: this one must not write for it again (a network
    /// store's lease moved on; the embedded store never fences).
    #[error("run {run_id}: owned by another process")]
    Fenced {
        /// The run this process lost.
        run_id: String,
    },
    /// Stored data that cannot be read back (a bad JSON document, an impossible value, an
    /// event of an unknown kind).
    #[error("corrupt store data: {}{}{detail}", run_id.as_deref().map(|r| format!("run {r}: ")).unwrap_or_default(), seq.map(|s| format!("event {s}: ")).unwrap_or_default())]
    Corrupt {
        /// The run the data belongs to (`None`: a credential or the schema).
        run_id: Option<String>,
        /// The event's sequence number, when an event is unreadable.
        seq: Option<u64>,
        /// What could not be read.
        detail: String,
    },
    /// The database refused or failed the operation for another reason.
    #[error("database error: {0}")]
    Database(String),
    /// The store is shutting down or its writer has stopped.
    #[error("store is closed")]
    Closed,
    /// A credential with this name exists and is not revoked.
    #[error("a token named {0:?} already exists")]
    NameTaken(String),
}

impl StoreError {
    /// Whether the same operation may succeed if it is tried again later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// Unreadable data of a run (`seq`: the event, if one is unreadable).
    pub fn corrupt_run(run_id: &str, seq: Option<u64>, detail: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            run_id: Some(run_id.to_string()),
            seq,
            detail: detail.into(),
        }
    }

    /// A commit that can never succeed.
    pub fn invalid(run_id: &str, detail: impl Into<String>) -> StoreError {
        StoreError::Invalid {
            run_id: run_id.to_string(),
            detail: detail.into(),
        }
    }
}

/// Persistence for runs. Implementations: SQLite (embedded), PostgreSQL (a server), and
/// memory (tests).
pub trait RunStore: Send + Sync + 'static {
    /// Applies a commit atomically. Resolves only once the commit is durable, so a caller
    /// may then tell a worker about it. Concurrent commits may be grouped into one
    /// transaction, but each succeeds or fails on its own.
    fn commit(&self, commit: Commit) -> StoreFuture<()>;

    /// As [`commit`](RunStore::commit), without a future: `done` gets the outcome once the
    /// commit is durable or has failed. Commits issued one after another complete, and
    /// their `done` run, in that order, also interleaved with [`commit`](RunStore::commit):
    /// every earlier `done` has run before a later commit's future resolves. `done` may
    /// run on the store's own thread, so it must be quick and must not block.
    fn commit_then(&self, commit: Commit, done: CommitDone);

    /// Makes this process the run's owner: from then on only its commits of the run are
    /// accepted, until it releases the run or another process claims it (then this one's
    /// commits fail with `Fenced`). Granted when no other process holds the run (or its hold
    /// lapsed), or with `takeover` (a worker attached here). A store that only one process
    /// opens grants every claim.
    fn claim(&self, run_id: &str, takeover: bool) -> StoreFuture<()>;

    /// Gives up this process's ownership of a run (its actor stopped), so another process
    /// may claim it at once. Nothing happens if this process does not hold it.
    fn release(&self, run_id: &str) -> StoreFuture<()>;

    /// One run by id.
    fn get_run(&self, run_id: &str) -> StoreFuture<Option<Run>>;

    /// One run by id with its stall tracker as last committed (`None`: none was stored),
    /// read together so that the tracker belongs to that version of the run.
    fn get_run_and_stall(&self, run_id: &str) -> StoreFuture<Option<(Run, Option<StallTracker>)>>;

    /// Runs matching a query, newest first.
    fn list_runs(&self, query: RunQuery) -> StoreFuture<RunPage>;

    /// Up to `limit` events of a run with `seq >= from_seq`, in order.
    fn list_events(&self, run_id: &str, from_seq: u64, limit: usize) -> StoreFuture<Vec<Event>>;

    /// The `run.toolcall.asked` decisions of the calls that still wait for an operator
    /// (asked, not yet resolved), oldest first; of one run, or of every run. Any process
    /// sharing the store sees the same asks.
    fn pending_asks(&self, run_id: Option<&str>) -> StoreFuture<Vec<Event>>;

    /// Every run that is not terminal, with its stall state and whole log.
    fn live_runs(&self) -> StoreFuture<Vec<StoredRun>>;

    /// One run as `live_runs` would return it; `None` if it is unknown or terminal.
    fn live_run(&self, run_id: &str) -> StoreFuture<Option<StoredRun>>;

    /// Deletes up to `limit` finished runs (terminal status) that completed before
    /// `cutoff`, oldest completion first, with everything stored for them: their log,
    /// pending asks, worker tokens and leases. One transaction, so a batch is deleted whole
    /// or not at all; returns how many runs went. Runs that are not terminal are never
    /// touched. A store may delete fewer than `limit` to keep the transaction short (SQLite
    /// bounds the events it deletes at once), so only 0 means none is left. Retention calls
    /// this in small batches until it returns 0, so no transaction holds up commits long.
    fn purge_finished_before(&self, cutoff: DateTime<Utc>, limit: usize) -> StoreFuture<usize>;

    /// Stores a new credential; durable when this resolves. Fails with `NameTaken` when a
    /// credential of the same name is not revoked.
    fn put_credential(&self, credential: Credential) -> StoreFuture<()>;

    /// The credential whose token hashes to `hash`, revoked or not.
    fn credential(&self, hash: &str) -> StoreFuture<Option<Credential>>;

    /// Every operator credential, revoked ones included, oldest first.
    fn operator_credentials(&self) -> StoreFuture<Vec<Credential>>;

    /// Revokes the operator credential named `name` that is not revoked yet, as of `at`,
    /// and returns it; `None` when there is none.
    fn revoke_credential(&self, name: &str, at: DateTime<Utc>) -> StoreFuture<Option<Credential>>;

    /// Stores a policy version unless one with its hash is stored already (then the
    /// stored one stays, `first_seen` included); durable when this resolves.
    fn put_policy_version(&self, version: PolicyVersion) -> StoreFuture<()>;

    /// The policy version with this hash.
    fn policy_version(&self, hash: &str) -> StoreFuture<Option<PolicyVersion>>;

    /// The other processes sharing this store; `None` for a store only one process opens
    /// (that process owns every run).
    fn peers(&self) -> Option<Arc<dyn Peers>> {
        None
    }
}
