//! A store that keeps nothing, for one extra phase: runplane with every commit answered at
//! once. Not a mode of the product (nothing would survive a restart); it splits the gap to
//! the echo into what the store costs and what the rest of runplane costs, in the same run.

use std::future::ready;

use chrono::{DateTime, Utc};
use runplane::domain::{Credential, Event, PolicyVersion, Run, StallTracker};
use runplane::store::{Commit, CommitDone, RunPage, RunQuery, RunStore, StoreFuture, StoredRun};

/// Answers every commit with success at once and every read with nothing. It keeps no
/// credentials either, so the server on it runs with authentication off: a worker token
/// could not be checked against a run this store does not have.
pub struct NullStore;

impl RunStore for NullStore {
    fn commit(&self, _commit: Commit) -> StoreFuture<()> {
        Box::pin(ready(Ok(())))
    }

    fn commit_then(&self, _commit: Commit, done: CommitDone) {
        done(Ok(()));
    }

    fn get_run(&self, _run_id: &str) -> StoreFuture<Option<Run>> {
        Box::pin(ready(Ok(None)))
    }

    fn get_run_and_stall(&self, _run_id: &str) -> StoreFuture<Option<(Run, Option<StallTracker>)>> {
        Box::pin(ready(Ok(None)))
    }

    fn list_runs(&self, _query: RunQuery) -> StoreFuture<RunPage> {
        Box::pin(ready(Ok(RunPage {
            runs: Vec::new(),
            next: None,
        })))
    }

    fn list_events(&self, _run_id: &str, _from_seq: u64, _limit: usize) -> StoreFuture<Vec<Event>> {
        Box::pin(ready(Ok(Vec::new())))
    }

    fn claim(&self, _run_id: &str, _takeover: bool) -> StoreFuture<()> {
        Box::pin(ready(Ok(())))
    }

    fn release(&self, _run_id: &str) -> StoreFuture<()> {
        Box::pin(ready(Ok(())))
    }

    fn pending_asks(&self, _run_id: Option<&str>) -> StoreFuture<Vec<Event>> {
        Box::pin(ready(Ok(Vec::new())))
    }

    fn live_runs(&self) -> StoreFuture<Vec<StoredRun>> {
        Box::pin(ready(Ok(Vec::new())))
    }

    fn live_run(&self, _run_id: &str) -> StoreFuture<Option<StoredRun>> {
        Box::pin(ready(Ok(None)))
    }

    fn purge_finished_before(&self, _cutoff: DateTime<Utc>, _limit: usize) -> StoreFuture<usize> {
        Box::pin(ready(Ok(0)))
    }

    fn put_credential(&self, _credential: Credential) -> StoreFuture<()> {
        Box::pin(ready(Ok(())))
    }

    fn credential(&self, _hash: &str) -> StoreFuture<Option<Credential>> {
        Box::pin(ready(Ok(None)))
    }

    fn put_policy_version(&self, _version: PolicyVersion) -> StoreFuture<()> {
        Box::pin(ready(Ok(())))
    }

    /// Nothing is stored, so no run is ever restored to need one.
    fn policy_version(&self, _hash: &str) -> StoreFuture<Option<PolicyVersion>> {
        Box::pin(ready(Ok(None)))
    }

    fn operator_credentials(&self) -> StoreFuture<Vec<Credential>> {
        Box::pin(ready(Ok(Vec::new())))
    }

    fn revoke_credential(
        &self,
        _name: &str,
        _at: DateTime<Utc>,
    ) -> StoreFuture<Option<Credential>> {
        Box::pin(ready(Ok(None)))
    }
}
