//! Rebuilds a run's actor state from what the store holds: the run row, the stall tracker,
//! and the event log (the record of every decided call); and restoring a run whose actor
//! stopped on a store failure, with backoff.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tracing::{info, warn};

use super::actor::{AskWait, CallState};
use super::{Coordinator, CoordinatorError, Shared};
use crate::domain::Decision;
use crate::store::Event;

/// Whether the log ends with a delivery the worker has not reported on: the status alone
/// cannot tell (a delivering run is still running or in its gate status).
pub(super) fn delivery_outstanding(events: &[Event]) -> bool {
    events
        .iter()
        .rev()
        .find(|e| e.kind.starts_with("run.delivery."))
        .is_some_and(|e| e.kind == "run.delivery.requested")
}

/// The calls of a run as its log tells them.
pub(super) fn calls_from_log(events: &[Event]) -> HashMap<String, CallState> {
    let mut calls: HashMap<String, CallState> = HashMap::new();
    for event in events {
        let attr = |key: &str| event.attributes.get(key).cloned().unwrap_or_default();
        let call_id = attr("call_id");
        if call_id.is_empty() {
            continue;
        }
        match &*event.kind {
            "run.toolcall.approved" | "run.toolcall.denied" | "run.toolcall.asked" => {
                let decision = attr("decision").parse().unwrap_or(Decision::Deny);
                let deadline = attr("deadline");
                calls.insert(
                    call_id,
                    CallState {
                        tool: attr("tool"),
                        command: attr("command"),
                        path: attr("path"),
                        resolved_path: attr("resolved_path"),
                        paths: decode_paths(&attr("paths")),
                        url: attr("url"),
                        input: attr("input"),
                        decision,
                        reason: attr("reason"),
                        ask: (decision == Decision::Ask).then(|| AskWait {
                            asked_at: event.at,
                            // A deadline that cannot be read expires at once: an unreadable
                            // log never keeps a call waiting longer than it was meant to.
                            deadline: (!deadline.is_empty())
                                .then(|| parse_time(&deadline).unwrap_or(event.at)),
                        }),
                        result_recorded: false,
                    },
                );
            }
            "run.toolcall.resolved" => {
                if let Some(call) = calls.get_mut(&call_id) {
                    call.decision = attr("decision").parse().unwrap_or(Decision::Deny);
                    call.reason = attr("reason");
                    call.ask = None;
                }
            }
            "run.toolcall.result" => {
                if let Some(call) = calls.get_mut(&call_id) {
                    call.result_recorded = true;
                }
            }
            _ => {}
        }
    }
    calls
}

fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The `paths` attribute (a JSON array; absent when there were none). An unreadable one
/// reads as one path that no repeat can equal, so a repeat is refused rather than answered
/// with a decision made for other files.
pub(super) fn decode_paths(text: &str) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    serde_json::from_str(text).unwrap_or_else(|_| vec![format!("\u{0}unreadable:{text}")])
}

/// First wait before restoring a run whose actor stopped on a store failure.
const RESTORE_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between restore attempts while the store keeps failing.
const RESTORE_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Restores a run whose actor stopped because a store write failed: its in-memory state
/// was dropped, and without an actor its timers (grace, time limit, ask timeouts) would not
/// run. Retries with backoff until the run is running again, is over, or the server stops.
pub(super) fn restore_later(shared: Arc<Shared>, run_id: String) {
    let coordinator = Coordinator { shared };
    tokio::spawn(async move {
        let mut wait = RESTORE_BACKOFF;
        loop {
            tokio::time::sleep(wait).await;
            match coordinator.live_actor(&run_id).await {
                Ok(_) => return info!(%run_id, "run restored after a store failure"),
                Err(
                    CoordinatorError::Unavailable
                    | CoordinatorError::NotFound(_)
                    | CoordinatorError::FailedPrecondition(_),
                ) => return,
                Err(err) => warn!(%run_id, error = %err, "restoring the run failed; retrying"),
            }
            wait = (wait * 2).min(RESTORE_BACKOFF_MAX);
        }
    });
}
