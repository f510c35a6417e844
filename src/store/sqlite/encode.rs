//! A commit turned into column values before it is queued for the writer.
//!
//! The writer thread is the one serial stage every decision passes through, so everything
//! that does not need the database — validating the run, JSON-encoding the run, the stall
//! tracker and each event's attributes, and freeing the domain values afterwards — is done
//! here, on the committing task's thread, where the runtime's cores share it. The profile
//! behind this (docs/STORE.md, "Where the writer's time goes") had JSON encoding and the
//! drop of the boxed commit at about a fifth of the writer's time.

use crate::store::{Commit, StoreError};

/// A run's columns and its events' columns, ready to bind.
pub(super) struct EncodedCommit {
    /// The run's id.
    pub run_id: String,
    /// As [`Commit::expected_version`].
    pub expected_version: Option<i64>,
    /// `Status::as_str()`.
    pub status: &'static str,
    /// Whether the status is terminal: the writer then forgets the run's `run_no`.
    pub status_is_terminal: bool,
    /// Written only when the run is created.
    pub task_id: String,
    /// Written only when the run is created.
    pub agent_id: String,
    /// Written only when the run is created.
    pub project_id: String,
    /// Unix microseconds; written only when the run is created.
    pub created_at: i64,
    /// The run without its progress: `step_count`, `cost_usd`, `version` and
    /// `updated_at` are blanked, so the text only changes when something else does.
    pub run_json: String,
    /// A hash of `run_json`, for the writer to tell whether the stored text is still the
    /// same without comparing it.
    pub run_hash: u64,
    /// What every tool call changes. Boxed: it rides on the commit's last event into the
    /// journal (schema version 3), and the writer keeps journal rows in memory.
    pub progress: Box<Progress>,
    /// The events, in the order given (the writer checks they continue the log).
    pub events: Vec<EncodedEvent>,
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
    /// The event type.
    pub kind: String,
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
        mut run,
        expected_version,
        events,
        stall,
    } = commit;
    // A run that would not read back (a NaN cost serialises as null) must not be stored.
    run.validate()
        .map_err(|e| StoreError::Database(format!("run {}: refused: {e}", run.id)))?;
    let version = run.version;
    let step_count = std::mem::take(&mut run.step_count);
    let cost_usd = std::mem::take(&mut run.cost_usd);
    let updated_at = progress_time(&run.updated_at)
        .map_err(|e| StoreError::Database(format!("run {}: encode: {e}", run.id)))?;
    run.version = 0;
    run.updated_at = run.created_at;
    let run_json = serde_json::to_string(&run)
        .map_err(|e| StoreError::Database(format!("run {}: encode: {e}", run.id)))?;
    let run_hash = xxhash_rust::xxh3::xxh3_64(run_json.as_bytes());
    let stall_json = stall
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Database(format!("run {}: encode stall tracker: {e}", run.id)))?;
    let mut encoded = Vec::with_capacity(events.len());
    for event in &events {
        if event.run_id != run.id {
            return Err(StoreError::Database(format!(
                "run {}: event seq {} belongs to run {}",
                run.id, event.seq, event.run_id
            )));
        }
        let attributes = serde_json::to_string(&event.attributes).map_err(|e| {
            StoreError::Database(format!("run {}: encode event {}: {e}", run.id, event.seq))
        })?;
        encoded.push(EncodedEvent {
            seq: event.seq,
            kind: event.kind.clone(),
            at: event.at.timestamp_micros(),
            attributes,
            progress: None,
        });
    }
    Ok(EncodedCommit {
        status: run.status.as_str(),
        status_is_terminal: run.status.is_terminal(),
        created_at: run.created_at.timestamp_micros(),
        run_id: run.id,
        expected_version,
        task_id: run.task_id,
        agent_id: run.agent_id,
        project_id: run.project_id,
        run_json,
        run_hash,
        progress: Box::new(Progress {
            version,
            step_count,
            cost_usd,
            updated_at,
            stall_json,
        }),
        events: encoded,
    })
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
