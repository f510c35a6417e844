//! What the operator commands print: text for people, JSON for scripts.
//!
//! JSON uses the domain types' serde shapes where a domain type exists (a run is the same
//! object everywhere), and small view structs with fixed field names for events and asks.

use std::collections::BTreeMap;

use anyhow::Context as _;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::domain::{Run, ToolCallRequest};
use crate::grpc::convert::from_timestamp;
use crate::grpc::pb;

/// The canonical gRPC name of a status code (`NOT_FOUND`, …): what the docs and the
/// session's `SessionError.code` use, so scripts match one spelling everywhere.
pub(super) fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Prints a value as pretty JSON on stdout.
pub(super) fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// A run from the wire, checked by the domain conversion.
pub(super) fn run_from_pb(run: Option<pb::Run>) -> anyhow::Result<Run> {
    let run = run.context("the server sent a response without its run")?;
    Run::try_from(run).context("the server sent an invalid run")
}

/// A time as people read it in a terminal: UTC, to the second.
fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A run as `key: value` lines, optional fields only when set.
pub(super) fn run_details(run: &Run) -> String {
    let mut lines = vec![
        ("id", run.id.clone()),
        ("status", run.status.to_string()),
        ("task", run.task_id.clone()),
        ("agent", run.agent_id.clone()),
        ("project", run.project_id.clone()),
    ];
    if !run.team_id.is_empty() {
        lines.push(("team", run.team_id.clone()));
    }
    lines.push(("profile", run.policy_profile.clone()));
    lines.push(("exec mode", run.exec_mode.to_string()));
    if let Some(mode) = run.deliver_mode {
        lines.push(("deliver mode", mode.to_string()));
    }
    lines.push(("steps", run.step_count.to_string()));
    lines.push(("cost", format!("${:.4}", run.cost_usd)));
    lines.push(("created", time(run.created_at)));
    lines.push(("started", time(run.started_at)));
    if let Some(at) = run.completed_at {
        lines.push(("completed", time(at)));
    }
    if !run.output.is_empty() {
        lines.push(("output", run.output.clone()));
    }
    if !run.error.is_empty() {
        lines.push(("error", run.error.clone()));
    }
    lines
        .into_iter()
        .map(|(key, value)| format!("{:<13}{value}", format!("{key}:")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs as a table, one line each.
pub(super) fn runs_table(runs: &[Run]) -> String {
    let rows = runs
        .iter()
        .map(|run| {
            vec![
                run.id.clone(),
                run.status.to_string(),
                run.step_count.to_string(),
                format!("${:.4}", run.cost_usd),
                run.policy_profile.clone(),
                time(run.created_at),
            ]
        })
        .collect();
    table(
        &["ID", "STATUS", "STEPS", "COST", "PROFILE", "CREATED"],
        rows,
    )
}

/// One entry of a run's log, as `--json` prints it.
#[derive(Debug, Serialize)]
pub(super) struct EventView {
    run_id: String,
    seq: u64,
    #[serde(rename = "type")]
    kind: String,
    at: DateTime<Utc>,
    /// Sorted, so the same event always prints the same way.
    attributes: BTreeMap<String, String>,
}

impl EventView {
    /// Checks an event from the wire.
    pub(super) fn from_pb(event: pb::RunEvent) -> anyhow::Result<EventView> {
        let at = event
            .at
            .context("the server sent an event without its time")?;
        Ok(EventView {
            at: from_timestamp("at", at).context("the server sent an invalid event")?,
            run_id: event.run_id,
            seq: event.seq,
            kind: event.r#type,
            attributes: event.attributes.into_iter().collect(),
        })
    }

    /// One line: `#seq time type key=value …`, values quoted when they hold spaces.
    pub(super) fn line(&self) -> String {
        let mut line = format!("#{:<4} {} {}", self.seq, time(self.at), self.kind);
        for (key, value) in &self.attributes {
            if value.is_empty() || value.contains(char::is_whitespace) {
                line.push_str(&format!(" {key}={value:?}"));
            } else {
                line.push_str(&format!(" {key}={value}"));
            }
        }
        line
    }
}

/// A tool call waiting for an operator, as `--json` prints it.
#[derive(Debug, Serialize)]
pub(super) struct AskView {
    run_id: String,
    call_id: String,
    tool: String,
    command: String,
    path: String,
    reason: String,
    asked_at: DateTime<Utc>,
    deadline: DateTime<Utc>,
}

impl AskView {
    /// Checks a pending ask from the wire.
    pub(super) fn from_pb(ask: pb::PendingAsk) -> anyhow::Result<AskView> {
        let invalid = "the server sent an invalid pending ask";
        let request = ask
            .request
            .context("the server sent an ask without its call")?;
        let request = ToolCallRequest::try_from(request).context(invalid)?;
        let asked_at = ask
            .asked_at
            .context("the server sent an ask without asked_at")?;
        let deadline = ask
            .deadline
            .context("the server sent an ask without deadline")?;
        Ok(AskView {
            run_id: request.run_id,
            call_id: request.call_id,
            tool: request.tool,
            command: request.command,
            path: request.path,
            reason: ask.reason,
            asked_at: from_timestamp("asked_at", asked_at).context(invalid)?,
            deadline: from_timestamp("deadline", deadline).context(invalid)?,
        })
    }
}

/// Pending asks as a table; the last column (the reason) is free length.
pub(super) fn asks_table(asks: &[AskView]) -> String {
    let rows = asks
        .iter()
        .map(|ask| {
            let target = if ask.command.is_empty() {
                &ask.path
            } else {
                &ask.command
            };
            vec![
                ask.run_id.clone(),
                ask.call_id.clone(),
                ask.tool.clone(),
                target.clone(),
                time(ask.deadline),
                ask.reason.clone(),
            ]
        })
        .collect();
    table(
        &["RUN", "CALL", "TOOL", "COMMAND/PATH", "DEADLINE", "REASON"],
        rows,
    )
}

/// Left-aligned columns two spaces apart; the last column is not padded.
fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header = headers.iter().map(|h| h.to_string()).collect();
    std::iter::once(header)
        .chain(rows)
        .map(|row: Vec<String>| {
            let last = row.len().saturating_sub(1);
            row.iter()
                .enumerate()
                .map(|(i, cell)| {
                    if i == last {
                        cell.clone()
                    } else {
                        let width = widths.get(i).copied().unwrap_or(0);
                        let pad = width.saturating_sub(cell.chars().count());
                        format!("{cell}{}  ", " ".repeat(pad))
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}
