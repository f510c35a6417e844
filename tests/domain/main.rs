//! The domain's rules, one file per concept.

mod fingerprint;
mod json;
mod stall;
mod status;
mod validate;

use chrono::{DateTime, TimeZone, Utc};
use runplane::domain::{Run, StartRequest};

/// A fixed instant, so JSON and transitions are reproducible.
fn at(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_780_000_000 + seconds, 0).unwrap()
}

fn start_request() -> StartRequest {
    StartRequest {
        task_id: "task-1".into(),
        agent_id: "agent-1".into(),
        project_id: "proj-1".into(),
        ..StartRequest::default()
    }
}

fn new_run() -> Run {
    Run::new(
        "run-1".into(),
        start_request(),
        "headless-safe-sandbox".into(),
        at(0),
    )
}
