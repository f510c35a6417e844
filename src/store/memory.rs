//! The in-memory store: the [`RunStore`] contract without a file, for coordinator tests and
//! the bench. Nothing survives the process.
//!
//! Every operation takes one mutex, applies or reads, and returns a future that is already
//! resolved: a commit is applied before `commit` returns, so commits issued one after
//! another by one caller are applied in that order, and `commit_then` calls its callback
//! before it returns. The checks and their errors are those of [`SqliteStore`]
//! (`sqlite/encode.rs`, `sqlite/writer.rs`), so a caller tested against one store meets
//! the same refusals from the other; `tests/store_contract.rs` runs the same cases
//! against both.
//!
//! [`SqliteStore`]: super::SqliteStore

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};

use super::completion::completed_before;
use super::{
    Commit, CommitDone, PageCursor, RunPage, RunQuery, RunStore, StoreError, StoreFuture, StoredRun,
};
use crate::domain::{
    Credential, CredentialKind, Decision, Event, EventKind, PolicyVersion, Run, StallTracker,
};

/// The in-memory implementation of [`RunStore`]. Share it behind an `Arc`.
#[derive(Default)]
pub struct MemoryStore {
    /// Everything stored, behind one lock: a commit checks and applies the run, its events
    /// and its stall tracker under it, which is what makes the commit atomic to readers.
    state: Mutex<State>,
}

/// What the store holds.
#[derive(Default)]
struct State {
    /// Each run by id: looked up by every commit and by `get_run`.
    runs: HashMap<String, StoredEntry>,
    /// `(creation time in microseconds, id)` of every run, in the order `list_runs`
    /// returns them reversed: paging walks it from a cursor instead of sorting every run.
    /// Microseconds, because SQLite keys its order and its cursor by them.
    by_creation: BTreeSet<(i64, String)>,
    /// The number the next created run gets: `live_runs` returns runs in creation order,
    /// as SQLite does by its `run_no`.
    next_no: u64,
    /// Credentials by token hash, the key they are looked up by; the hash is unique, as
    /// it is SQLite's primary key.
    credentials: HashMap<String, Credential>,
    /// Runs this process has lost to another (see [`MemoryStore::fence`]).
    fenced: BTreeSet<String>,
    /// Policy versions by hash.
    policy_versions: HashMap<String, PolicyVersion>,
}

/// One stored run.
struct StoredEntry {
    /// Creation order (see `State::next_no`).
    no: u64,
    /// The run as last committed.
    run: Run,
    /// The columns SQLite writes only when the run is created and filters and orders by:
    /// `list_runs` must match on these, not on a later commit's values, to agree with it.
    created: Created,
    /// The run's log, gapless from seq 1. Shared with the committer's live feed, as the
    /// commit hands the events over.
    events: Vec<Arc<Event>>,
    /// The stall tracker as last committed, if one was.
    stall: Option<StallTracker>,
}

/// A run's fields as they were when it was created.
struct Created {
    /// `created_at` in microseconds (the key in `State::by_creation`).
    micros: i64,
    task_id: String,
    project_id: String,
    agent_id: String,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// The state; a panic while it was held leaves it consistent (every change is checked
    /// before the first write), so a poisoned lock is taken over.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// From now on every commit of `run_id` fails with `Fenced`, as a network store's do
    /// once another process has taken the run's lease: how tests show what a replica does
    /// when it loses a run. A claim with `takeover` takes it back.
    pub fn fence(&self, run_id: &str) {
        self.lock().fenced.insert(run_id.to_string());
    }

    /// Checks and applies a commit; drops it (and so its run) before answering.
    fn apply(&self, commit: Commit) -> Result<(), StoreError> {
        let outcome = self.lock().apply(&commit);
        drop(commit);
        outcome
    }
}

impl State {
    /// Everything that can refuse a commit is checked before the first change, so a
    /// refused commit changes nothing.
    fn apply(&mut self, commit: &Commit) -> Result<(), StoreError> {
        let run = &*commit.run;
        let run_id = run.id.as_str();
        if self.fenced.contains(run_id) {
            return Err(StoreError::Fenced {
                run_id: run_id.to_string(),
            });
        }
        // The checks `sqlite/encode.rs` makes before queuing, with its errors.
        run.validate()
            .map_err(|e| StoreError::invalid(run_id, e.to_string()))?;
        for event in &commit.events {
            if event.run_id != run.id {
                return Err(StoreError::invalid(
                    run_id,
                    format!("event seq {} belongs to run {}", event.seq, event.run_id),
                ));
            }
        }
        let stored = self.runs.get(run_id);
        let last_seq = match (commit.expected_version, stored) {
            (None, None) => 0,
            (Some(expected), Some(stored)) if stored.run.version == expected => {
                if run.version <= expected {
                    return Err(StoreError::invalid(
                        run_id,
                        format!(
                            "a change must raise the version past {expected}, got {}",
                            run.version
                        ),
                    ));
                }
                stored.events.last().map_or(0, |event| event.seq)
            }
            (Some(_), None) => {
                return Err(StoreError::NotFound {
                    run_id: run_id.to_string(),
                })
            }
            (expected, stored) => {
                return Err(StoreError::Conflict {
                    run_id: run_id.to_string(),
                    expected,
                    found: stored.map(|stored| stored.run.version),
                })
            }
        };
        for (seq, event) in (last_seq + 1..).zip(&commit.events) {
            if event.seq != seq {
                return Err(StoreError::invalid(
                    run_id,
                    format!(
                        "event seq {} does not continue the log (next is {seq})",
                        event.seq
                    ),
                ));
            }
        }

        let events = commit.events.iter().map(stored_event);
        match self.runs.get_mut(run_id) {
            Some(stored) => {
                stored.run = run.clone();
                stored.events.extend(events);
                if let Some(stall) = &commit.stall {
                    stored.stall = Some(stall.clone());
                }
            }
            None => {
                let created = Created {
                    micros: run.created_at.timestamp_micros(),
                    task_id: run.task_id.clone(),
                    project_id: run.project_id.clone(),
                    agent_id: run.agent_id.clone(),
                };
                self.by_creation.insert((created.micros, run.id.clone()));
                let no = self.next_no;
                self.next_no += 1;
                self.runs.insert(
                    run.id.clone(),
                    StoredEntry {
                        no,
                        run: run.clone(),
                        created,
                        events: events.collect(),
                        stall: commit.stall.clone(),
                    },
                );
            }
        }
        Ok(())
    }

    /// As `sqlite/read.rs` `list_runs`: newest first by creation time (in microseconds)
    /// then id, both descending, strictly after the cursor; one run more than the page is
    /// looked for to learn whether another page exists.
    fn list_runs(&self, query: &RunQuery) -> RunPage {
        let limit = query.limit.max(1);
        let cursor = query
            .after
            .as_ref()
            .map(|c| (c.created_at.timestamp_micros(), c.id.clone()));
        let keys: Box<dyn Iterator<Item = &(i64, String)>> = match cursor {
            Some(cursor) => Box::new(self.by_creation.range(..cursor).rev()),
            None => Box::new(self.by_creation.iter().rev()),
        };
        let mut runs: Vec<Run> = keys
            .filter_map(|(_, id)| self.runs.get(id))
            .filter(|stored| passes(stored, query))
            .take(limit.saturating_add(1))
            .map(|stored| stored.run.clone())
            .collect();
        let next = if runs.len() > limit {
            runs.truncate(limit);
            runs.last().map(|run| PageCursor {
                created_at: run.created_at,
                id: run.id.clone(),
            })
        } else {
            None
        };
        RunPage { runs, next }
    }

    /// Removes up to `limit` runs that ended before `cutoff`, oldest completion first, with
    /// their worker tokens; "before" as the other stores compare it (`completion.rs`). A
    /// scan of every run: this store holds what a test made.
    fn purge_finished_before(&mut self, cutoff: DateTime<Utc>, limit: usize) -> usize {
        let mut doomed: Vec<(DateTime<Utc>, String)> = self
            .runs
            .values()
            .filter(|stored| stored.run.status.is_terminal())
            .filter_map(|stored| Some((stored.run.completed_at?, stored.run.id.clone())))
            .filter(|(completed, _)| completed_before(*completed, cutoff))
            .collect();
        doomed.sort();
        doomed.truncate(limit);
        for (_, run_id) in &doomed {
            if let Some(stored) = self.runs.remove(run_id) {
                self.by_creation
                    .remove(&(stored.created.micros, run_id.clone()));
            }
            self.fenced.remove(run_id);
        }
        let gone: BTreeSet<&str> = doomed.iter().map(|(_, id)| id.as_str()).collect();
        self.credentials
            .retain(|_, credential| match &credential.kind {
                CredentialKind::Worker { run_id } => !gone.contains(run_id.as_str()),
                CredentialKind::Operator { .. } => true,
            });
        doomed.len()
    }

    /// A live run with its stall tracker and log; `None` when it is terminal.
    fn live(stored: &StoredEntry) -> Option<StoredRun> {
        (!stored.run.status.is_terminal()).then(|| StoredRun {
            run: stored.run.clone(),
            stall: stored.stall.clone(),
            events: stored
                .events
                .iter()
                .map(|event| Event::clone(event))
                .collect(),
        })
    }
}

/// Whether a run passes a query's filters. Task, project and agent are matched as the run
/// was created, status and team as it is now: SQLite has columns for the first, set only
/// on creation, and reads the team from the stored run.
fn passes(stored: &StoredEntry, query: &RunQuery) -> bool {
    let equal =
        |wanted: &Option<String>, actual: &str| wanted.as_deref().is_none_or(|w| w == actual);
    let within = |allowed: &[String], actual: &str| {
        allowed.is_empty() || allowed.iter().any(|a| a == actual)
    };
    equal(&query.task_id, &stored.created.task_id)
        && equal(&query.project_id, &stored.created.project_id)
        && equal(&query.agent_id, &stored.created.agent_id)
        && query.status.is_none_or(|s| s == stored.run.status)
        && within(&query.scope.teams, &stored.run.team_id)
        && within(&query.scope.projects, &stored.created.project_id)
}

/// An event as SQLite reads it back: its time to the microsecond. An event already at
/// that grain (the usual case) is shared, not copied.
fn stored_event(event: &Arc<Event>) -> Arc<Event> {
    let micros = event.at.timestamp_micros();
    match DateTime::<Utc>::from_timestamp_micros(micros) {
        Some(at) if at != event.at => Arc::new(Event {
            at,
            ..Event::clone(event)
        }),
        _ => Arc::clone(event),
    }
}

/// A future that is already resolved.
fn ready<T: Send + 'static>(outcome: Result<T, StoreError>) -> StoreFuture<T> {
    Box::pin(std::future::ready(outcome))
}

impl RunStore for MemoryStore {
    /// Applied before this returns, so commits issued one after another are applied in
    /// that order.
    fn commit(&self, commit: Commit) -> StoreFuture<()> {
        ready(self.apply(commit))
    }

    /// Applies the commit and calls `done` on the caller's thread before returning, with
    /// the lock released.
    fn commit_then(&self, commit: Commit, done: CommitDone) {
        done(self.apply(commit));
    }

    fn get_run(&self, run_id: &str) -> StoreFuture<Option<Run>> {
        ready(Ok(self.lock().runs.get(run_id).map(|s| s.run.clone())))
    }

    fn get_run_and_stall(&self, run_id: &str) -> StoreFuture<Option<(Run, Option<StallTracker>)>> {
        let state = self.lock();
        let found = state
            .runs
            .get(run_id)
            .map(|s| (s.run.clone(), s.stall.clone()));
        ready(Ok(found))
    }

    fn list_runs(&self, query: RunQuery) -> StoreFuture<RunPage> {
        ready(Ok(self.lock().list_runs(&query)))
    }

    fn list_events(&self, run_id: &str, from_seq: u64, limit: usize) -> StoreFuture<Vec<Event>> {
        let state = self.lock();
        let events = state.runs.get(run_id).map_or_else(Vec::new, |stored| {
            // Seqs run from 1 without a gap, so `from_seq` is found by position.
            let start = usize::try_from(from_seq.saturating_sub(1)).unwrap_or(usize::MAX);
            stored
                .events
                .iter()
                .skip(start)
                .take(limit)
                .map(|event| Event::clone(event))
                .collect()
        });
        ready(Ok(events))
    }

    /// Granted unless the run is fenced (see [`MemoryStore::fence`]); a takeover lifts
    /// the fence, as a claim takes a lease from another process.
    fn claim(&self, run_id: &str, takeover: bool) -> StoreFuture<()> {
        let mut state = self.lock();
        if takeover {
            state.fenced.remove(run_id);
        }
        ready(match state.fenced.contains(run_id) {
            true => Err(StoreError::Fenced {
                run_id: run_id.to_string(),
            }),
            false => Ok(()),
        })
    }

    fn release(&self, _run_id: &str) -> StoreFuture<()> {
        ready(Ok(()))
    }

    /// Replays the logs: this store is for tests and the bench, where they are short.
    fn pending_asks(&self, run_id: Option<&str>) -> StoreFuture<Vec<Event>> {
        let state = self.lock();
        let mut asks = Vec::new();
        let runs = state
            .runs
            .values()
            .filter(|stored| run_id.is_none_or(|id| stored.run.id == id));
        for stored in runs {
            let mut waiting: BTreeMap<&str, &Arc<Event>> = BTreeMap::new();
            for event in &stored.events {
                match &event.kind {
                    EventKind::Decided(decided) if decided.decision == Decision::Ask => {
                        waiting.insert(&decided.call_id, event);
                    }
                    EventKind::Resolved(resolved) => {
                        waiting.remove(resolved.call_id.as_str());
                    }
                    _ => {}
                }
            }
            asks.extend(waiting.into_values().map(|event| Event::clone(event)));
        }
        asks.sort_by(|a, b| (a.at, &a.run_id, a.seq).cmp(&(b.at, &b.run_id, b.seq)));
        ready(Ok(asks))
    }

    fn live_runs(&self) -> StoreFuture<Vec<StoredRun>> {
        let state = self.lock();
        let mut live: Vec<(u64, StoredRun)> = state
            .runs
            .values()
            .filter_map(|stored| State::live(stored).map(|run| (stored.no, run)))
            .collect();
        live.sort_by_key(|(no, _)| *no);
        ready(Ok(live.into_iter().map(|(_, run)| run).collect()))
    }

    fn live_run(&self, run_id: &str) -> StoreFuture<Option<StoredRun>> {
        ready(Ok(self.lock().runs.get(run_id).and_then(State::live)))
    }

    /// `NameTaken` also for a hash already stored, as SQLite reports any constraint it
    /// breaks.
    fn purge_finished_before(&self, cutoff: DateTime<Utc>, limit: usize) -> StoreFuture<usize> {
        ready(Ok(self.lock().purge_finished_before(cutoff, limit)))
    }

    fn put_credential(&self, credential: Credential) -> StoreFuture<()> {
        let mut state = self.lock();
        // SQLite's unique index covers the names of credentials that are not revoked, the
        // new one's included: a revoked credential may share a live one's name.
        let name_taken = credential.revoked_at.is_none()
            && state
                .credentials
                .values()
                .any(|c| c.name == credential.name && c.revoked_at.is_none());
        let outcome = if name_taken || state.credentials.contains_key(&credential.hash) {
            Err(StoreError::NameTaken(credential.name.clone()))
        } else {
            state
                .credentials
                .insert(credential.hash.clone(), credential);
            Ok(())
        };
        ready(outcome)
    }

    fn credential(&self, hash: &str) -> StoreFuture<Option<Credential>> {
        ready(Ok(self.lock().credentials.get(hash).cloned()))
    }

    /// Oldest first, ties broken by name, as SQLite orders them.
    fn operator_credentials(&self) -> StoreFuture<Vec<Credential>> {
        let state = self.lock();
        let mut operators: Vec<Credential> = state
            .credentials
            .values()
            .filter(|c| matches!(c.kind, CredentialKind::Operator { .. }))
            .cloned()
            .collect();
        operators.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
        ready(Ok(operators))
    }

    fn revoke_credential(&self, name: &str, at: DateTime<Utc>) -> StoreFuture<Option<Credential>> {
        let mut state = self.lock();
        let revoked = state
            .credentials
            .values_mut()
            .find(|c| {
                c.name == name
                    && c.revoked_at.is_none()
                    && matches!(c.kind, CredentialKind::Operator { .. })
            })
            .map(|c| {
                c.revoked_at = Some(at);
                c.clone()
            });
        ready(Ok(revoked))
    }

    fn put_policy_version(&self, version: PolicyVersion) -> StoreFuture<()> {
        self.lock()
            .policy_versions
            .entry(version.hash.clone())
            .or_insert(version);
        ready(Ok(()))
    }

    fn policy_version(&self, hash: &str) -> StoreFuture<Option<PolicyVersion>> {
        ready(Ok(self.lock().policy_versions.get(hash).cloned()))
    }
}
