//! Replay over a store: pages through the chosen runs and their logs and feeds each run's
//! events to the pure core ([`crate::policy::replay`]). `runplane policy replay --data-dir`
//! runs it on a data directory opened read-only, `PolicyService.Replay` on the server's
//! own store, so both judge the same events with the same code.
//!
//! Memory stays bounded whatever the history: one page of runs and one page of one run's
//! events are held at a time, and changed calls go out through a bounded channel as they
//! are found, so a slow reader slows the replay down rather than letting it pile up.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use crate::domain::query::RunQuery;
use crate::domain::{Scope, Status};
use crate::policy::replay::{Change, Outcome, RunReplay, Tally};
use crate::policy::{parse_profile, CompiledProfile, ParseError, PolicyError, ProfileFormat};
use crate::store::{RunStore, StoreError};

/// Runs read per page.
const RUNS_PAGE: usize = 50;
/// Events of one run's log read per page.
const EVENTS_PAGE: usize = 500;
/// Changed calls found but not yet taken by the reader.
pub const CHANGES_BUFFER: usize = 64;
/// The longest profile text a replay takes: far above any real profile, and small enough
/// that compiling one cannot be made to cost much.
pub const MAX_PROFILE_BYTES: usize = 256 * 1024;
/// The name a profile text without one gets.
const CANDIDATE_NAME: &str = "candidate";

/// Which runs to replay. Empty filters match every run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayFilter {
    /// Only runs of this project.
    pub project_id: Option<String>,
    /// Only runs of this agent.
    pub agent_id: Option<String>,
    /// Only runs in this status.
    pub status: Option<Status>,
    /// Only runs created at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only runs within this scope (the caller's token's, for the RPC).
    pub scope: Scope,
}

/// The profile to replay under, as a request names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    /// A profile the replaying side has loaded, by name.
    Name(String),
    /// A whole profile in the policy-file format (TOML).
    Toml(String),
}

/// Why a replay stopped before its summary.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Whoever took the changed calls went away (a client that hung up).
    #[error("the replay's reader went away")]
    Abandoned,
    /// The judging task could not run to its end (the runtime is shutting down).
    #[error("the replay's judging task failed: {0}")]
    Task(String),
}

/// Why a profile text cannot be replayed under.
#[derive(Debug, thiserror::Error)]
pub enum CandidateError {
    /// Longer than [`MAX_PROFILE_BYTES`].
    #[error("the profile is {0} bytes, at most {MAX_PROFILE_BYTES} are taken")]
    TooLong(usize),
    /// Not a profile.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A profile that does not compile.
    #[error(transparent)]
    Compile(#[from] PolicyError),
}

/// Parses and compiles a profile text. Its own tests are not run: a candidate is still
/// being written, and replay tells what it would change whether or not they pass yet.
pub fn compile_candidate(text: &str) -> Result<CompiledProfile, CandidateError> {
    if text.len() > MAX_PROFILE_BYTES {
        return Err(CandidateError::TooLong(text.len()));
    }
    let profile = parse_profile(text, ProfileFormat::Toml, CANDIDATE_NAME)?;
    Ok(CompiledProfile::compile(profile)?)
}

/// Replays the runs `filter` chooses under `profile`, newest run first, sending each
/// changed call to `changes` as it is found, and returns the counts.
pub async fn replay(
    store: &dyn RunStore,
    profile: Arc<CompiledProfile>,
    filter: &ReplayFilter,
    changes: &mpsc::Sender<Change>,
) -> Result<Tally, ReplayError> {
    let mut tally = Tally::default();
    let mut after = None;
    loop {
        let page = store
            .list_runs(RunQuery {
                task_id: None,
                project_id: filter.project_id.clone(),
                agent_id: filter.agent_id.clone(),
                status: filter.status,
                limit: RUNS_PAGE,
                after,
                scope: filter.scope.clone(),
            })
            .await?;
        for run in &page.runs {
            // Newest first: every run after this one is older still.
            if filter.since.is_some_and(|since| run.created_at < since) {
                return Ok(tally);
            }
            tally.runs += 1;
            replay_run(store, &profile, &run.id, &mut tally, changes).await?;
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(tally),
        }
    }
}

/// Replays one run's log, page by page.
async fn replay_run(
    store: &dyn RunStore,
    profile: &Arc<CompiledProfile>,
    run_id: &str,
    tally: &mut Tally,
    changes: &mpsc::Sender<Change>,
) -> Result<(), ReplayError> {
    let mut state = RunReplay::new(run_id);
    let mut from_seq = 1;
    loop {
        // Checked per page too: a replay that finds no change would otherwise read the
        // whole history for a client that has gone.
        if changes.is_closed() {
            return Err(ReplayError::Abandoned);
        }
        let events = store.list_events(run_id, from_seq, EVENTS_PAGE).await?;
        let Some(last) = events.last() else {
            return Ok(());
        };
        from_seq = last.seq + 1;
        let full = events.len() == EVENTS_PAGE;
        // A page holds up to hundreds of shell lines to parse: judged on the blocking
        // pool, off the threads a server's sessions share.
        let profile = Arc::clone(profile);
        let (fed, outcomes) = tokio::task::spawn_blocking(move || {
            let outcomes: Vec<Outcome> = events.iter().map(|e| state.feed(&profile, e)).collect();
            (state, outcomes)
        })
        .await
        .map_err(|e| ReplayError::Task(e.to_string()))?;
        state = fed;
        for outcome in outcomes {
            tally.count(&outcome);
            if let Outcome::Changed(change) = outcome {
                changes
                    .send(*change)
                    .await
                    .map_err(|_| ReplayError::Abandoned)?;
            }
        }
        if !full {
            return Ok(());
        }
    }
}
