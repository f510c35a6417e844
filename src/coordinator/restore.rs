//! Rebuilds a run's actor state from what the store holds: the run row, the stall tracker,
//! and the event log (the record of every decided call).

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::actor::{AskWait, CallState};
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
