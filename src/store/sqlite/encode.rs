//! A commit turned into column values before it is queued for the writer.
//!
//! The writer thread is the one serial stage every decision passes through, so everything
//! that does not need the database — validating the run, hashing what `run_json` holds,
//! JSON-encoding the stall tracker and each event's attributes — is done here, on the
//! committing task's thread, where the runtime's cores share it. The run itself is
//! JSON-encoded by the writer, and only when its hash says the stored text is stale
//! (creation, a status change): most commits change only the progress. The profile
//! behind this (docs/STORE.md, "Where the writer's time goes") had JSON encoding and the
//! drop of the boxed commit at about a fifth of the writer's time.

use std::borrow::Cow;
use std::hash::{Hash as _, Hasher as _};
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3;

use crate::domain::{Decision, EventKind, Run};
use crate::store::{Commit, StoreError};

/// A run's columns and its events' columns, ready to bind.
pub(super) struct EncodedCommit {
    /// The run, shared with the committer: `run_json` holds it with its progress blanked
    /// (`step_count`, `cost_usd`, `version` and `updated_at`). Kept as a value, not as
    /// text: most commits change only the progress, and the writer turns it into JSON only
    /// when `definition_hash` says the stored text is out of date.
    pub run: Arc<Run>,
    /// As [`Commit::expected_version`].
    pub expected_version: Option<i64>,
    /// `Status::as_str()`.
    pub status: &'static str,
    /// Whether the status is terminal: the writer then forgets the run's `run_no`.
    pub status_is_terminal: bool,
    /// Unix microseconds; written only when the run is created.
    pub created_at: i64,
    /// A hash of every field `run_json` holds, for the writer to tell whether the stored
    /// text is still the same without encoding or comparing it.
    pub definition_hash: u64,
    /// What every tool call changes. Boxed: it rides on the commit's last event into the
    /// journal (schema version 3), and the writer keeps journal rows in memory.
    pub progress: Box<Progress>,
    /// The events, in the order given (the writer checks they continue the log).
    pub events: Vec<EncodedEvent>,
    /// How the commit changes the run's pending asks, in event order.
    pub asks: Vec<AskChange>,
}

/// A call that starts or stops waiting for an operator: the `pending_asks` table follows
/// the log, so pending asks are read without replaying it.
pub(super) enum AskChange {
    /// The call was asked: the event at this index of `events` is its decision.
    Opened { call_id: String, event: usize },
    /// The call was answered (by an operator, a timeout, or the run's end).
    Closed { call_id: String },
}

impl EncodedCommit {
    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run.id
    }

    /// `run_json`: the run without its progress, as the writer stores it when the run is
    /// created or its definition changed.
    pub fn run_json(&self) -> Result<String, StoreError> {
        let mut run = Run::clone(&self.run);
        run.step_count = 0;
        run.cost_usd = 0.0;
        run.version = 0;
        run.updated_at = run.created_at;
        serde_json::to_string(&run)
            .map_err(|e| StoreError::invalid(&run.id, format!("encode: {e}")))
    }
}

/// A run's progress columns: `run_progress`, or the journal row of the commit's last
/// event.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Progress {
    /// `Run::version`.
    pub version: i64,
    /// `Run::step_count`.
    pub step_count: i32,
    /// `Run::cost_usd`.
    pub cost_usd: f64,
    /// `Run::updated_at`, RFC 3339 as serde writes it.
    pub updated_at: String,
    /// The stall tracker; `None` keeps the one before.
    pub stall_json: Option<String>,
}

/// One event's columns.
pub(super) struct EncodedEvent {
    /// The sequence number the committer assigned.
    pub seq: u64,
    /// The event type (static text unless the event was read back).
    pub kind: Cow<'static, str>,
    /// Unix microseconds.
    pub at: i64,
    /// JSON object of strings.
    pub attributes: String,
    /// The run's progress after the commit, on the commit's last event only.
    pub progress: Option<Box<Progress>>,
}

/// Validates and encodes a commit. The errors are those the writer used to report for
/// the same faults, so callers see no difference.
pub(super) fn encode(commit: Commit) -> Result<EncodedCommit, StoreError> {
    let Commit {
        run,
        expected_version,
        events,
        stall,
    } = commit;
    // A run that would not read back (a NaN cost serialises as null) must not be stored.
    run.validate()
        .map_err(|e| StoreError::invalid(&run.id, e.to_string()))?;
    let updated_at = progress_time(&run.updated_at)
        .map_err(|e| StoreError::invalid(&run.id, format!("encode: {e}")))?;
    let stall_json = stall
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::invalid(&run.id, format!("encode stall tracker: {e}")))?;
    let mut encoded = Vec::with_capacity(events.len());
    let mut asks = Vec::new();
    for event in &events {
        match &event.kind {
            EventKind::Decided(decided) if decided.decision == Decision::Ask => {
                asks.push(AskChange::Opened {
                    call_id: decided.call_id.clone(),
                    event: encoded.len(),
                });
            }
            EventKind::Resolved(resolved) => asks.push(AskChange::Closed {
                call_id: resolved.call_id.clone(),
            }),
            _ => {}
        }
        if event.run_id != run.id {
            return Err(StoreError::invalid(
                &run.id,
                format!("event seq {} belongs to run {}", event.seq, event.run_id),
            ));
        }
        let attributes = serde_json::to_string(&event.kind.attributes()).map_err(|e| {
            StoreError::invalid(&run.id, format!("encode event {}: {e}", event.seq))
        })?;
        encoded.push(EncodedEvent {
            seq: event.seq,
            kind: Cow::Borrowed(event.kind.name()),
            at: event.at.timestamp_micros(),
            attributes,
            progress: None,
        });
    }
    Ok(EncodedCommit {
        status: run.status.as_str(),
        status_is_terminal: run.status.is_terminal(),
        created_at: run.created_at.timestamp_micros(),
        definition_hash: definition_hash(&run),
        expected_version,
        progress: Box::new(Progress {
            version: run.version,
            step_count: run.step_count,
            cost_usd: run.cost_usd,
            updated_at,
            stall_json,
        }),
        events: encoded,
        asks,
        run,
    })
}

/// A hash of every field of the run that `run_json` holds. The fields are listed without
/// `..`, so a field added to `Run` does not compile here until it is decided whether it
/// belongs to the definition (hashed) or to the progress (not).
fn definition_hash(run: &Run) -> u64 {
    let Run {
        id,
        task_id,
        agent_id,
        project_id,
        team_id,
        policy_profile,
        exec_mode,
        deliver_mode,
        status,
        step_count: _,
        cost_usd: _,
        output,
        error,
        version: _,
        started_at,
        completed_at,
        created_at,
        updated_at: _,
        sandbox,
    } = run;
    let mut hasher = Xxh3::new();
    (id, task_id, agent_id, project_id, team_id, policy_profile).hash(&mut hasher);
    (exec_mode, deliver_mode, status, output, error).hash(&mut hasher);
    (started_at, completed_at, created_at, sandbox).hash(&mut hasher);
    hasher.finish()
}

/// A time as the `run_progress.updated_at` column holds it: the JSON string serde writes,
/// without its quotes, so it reads back exactly as it would from `run_json`.
fn progress_time(at: &chrono::DateTime<chrono::Utc>) -> serde_json::Result<String> {
    match serde_json::to_value(at)? {
        serde_json::Value::String(text) => Ok(text),
        other => Err(serde::ser::Error::custom(format!(
            "updated_at serialised as {other}, not as a string"
        ))),
    }
}
